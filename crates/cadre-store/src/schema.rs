//! The schema, as numbered migrations, and the rule for applying them.
//!
//! **Given** a database at some version (none: 0) and the migrations this build knows.
//! **Decided**: which migrations to apply; each runs in its own transaction together with
//! the row that records it, so a crash leaves the database at one version or the next,
//! never between. **Must hold**: a database newer than the build is refused before anything
//! is written (an old binary must not write rows a newer schema reads differently).
//!
//! One schema for both backends. Ids the store hands out come from the `counters` table,
//! bumped in the same transaction as the rows that use them: they are strictly increasing
//! in commit order and never reused, even for rows later deleted or after a crash (a
//! transaction that never committed acknowledged nothing). Times are whole seconds since
//! the Unix epoch in 64-bit integers; specs, run specs, allocations and pending reasons are
//! JSON text.

use crate::error::StoreError;
use crate::sql::{Dialect, Tx, Value};

/// One schema change. `{id}` in the SQL is the dialect's id column type.
pub(crate) struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub sql: &'static str,
}

pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "jobs, nodes, accounting, usage, tokens",
        sql: "
CREATE TABLE counters (
    name TEXT PRIMARY KEY,
    next_value BIGINT NOT NULL
);
INSERT INTO counters (name, next_value) VALUES ('job', 1);
INSERT INTO counters (name, next_value) VALUES ('token', 1);

CREATE TABLE jobs (
    id {id},
    name TEXT NOT NULL,
    user_name TEXT NOT NULL,
    account TEXT NOT NULL,
    partition TEXT NOT NULL,
    submit_time BIGINT NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL,
    start_time BIGINT,
    end_time BIGINT,
    allocation TEXT,
    exit_code BIGINT,
    requeues BIGINT NOT NULL
);
CREATE INDEX jobs_by_state ON jobs (state, id);
CREATE INDEX jobs_by_user ON jobs (user_name, id);
CREATE INDEX jobs_by_account ON jobs (account, id);
CREATE INDEX jobs_by_partition ON jobs (partition, id);

CREATE TABLE nodes (
    name TEXT PRIMARY KEY,
    avail TEXT NOT NULL,
    reason TEXT,
    emulated_gpus BOOLEAN NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE job_runs (
    job_id BIGINT NOT NULL REFERENCES jobs (id),
    run BIGINT NOT NULL,
    name TEXT NOT NULL,
    user_name TEXT NOT NULL,
    account TEXT NOT NULL,
    partition TEXT NOT NULL,
    submit_time BIGINT NOT NULL,
    start_time BIGINT,
    end_time BIGINT NOT NULL,
    state TEXT NOT NULL,
    exit_code BIGINT,
    gpu_milli BIGINT NOT NULL,
    cpus BIGINT NOT NULL,
    nodes TEXT NOT NULL,
    PRIMARY KEY (job_id, run)
);
CREATE INDEX job_runs_by_end ON job_runs (end_time);
CREATE INDEX job_runs_by_user ON job_runs (user_name, job_id);

CREATE TABLE assoc_usage (
    user_name TEXT NOT NULL,
    account TEXT NOT NULL,
    raw_usage DOUBLE PRECISION NOT NULL,
    as_of BIGINT NOT NULL,
    PRIMARY KEY (user_name, account)
);

CREATE TABLE tokens (
    id {id},
    user_name TEXT NOT NULL,
    admin BOOLEAN NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
",
    },
    // Nullable: jobs submitted at version 1 have none, and adding a nullable column
    // without a default rewrites no rows on either backend. Every job submitted since
    // has one; `Store::run_spec` reports a job without one as `MissingRunSpec`.
    Migration {
        version: 2,
        name: "run specs of jobs",
        sql: "ALTER TABLE jobs ADD COLUMN run_spec TEXT;",
    },
    Migration {
        version: 3,
        name: "job steps",
        sql: "
CREATE TABLE job_steps (
    job_id BIGINT NOT NULL REFERENCES jobs (id),
    step BIGINT NOT NULL,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    nodes TEXT NOT NULL,
    ntasks BIGINT NOT NULL,
    cpus BIGINT NOT NULL,
    start_time BIGINT NOT NULL,
    end_time BIGINT,
    exit_code BIGINT,
    command TEXT NOT NULL,
    PRIMARY KEY (job_id, step)
);
CREATE INDEX job_steps_by_end ON job_steps (end_time);
",
    },
    // Self-contained: two new tables and a counter, nothing else touched, so that it can
    // be renumbered against another branch's migration without rewriting either.
    Migration {
        version: 4,
        name: "queue objects, job events",
        sql: "
INSERT INTO counters (name, next_value) VALUES ('queue_object', 1);
INSERT INTO counters (name, next_value) VALUES ('job_event', 1);

CREATE TABLE queue_objects (
    kind TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    seq BIGINT NOT NULL,
    api_version TEXT NOT NULL,
    manifest TEXT NOT NULL,
    applied_at BIGINT NOT NULL,
    PRIMARY KEY (kind, namespace, name)
);

CREATE TABLE job_events (
    id {id},
    job_id BIGINT NOT NULL REFERENCES jobs (id),
    at BIGINT NOT NULL,
    kind TEXT NOT NULL,
    warning BOOLEAN NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX job_events_by_job ON job_events (job_id, id);
",
    },
    // Self-contained, as version 4: two new tables.
    Migration {
        version: 5,
        name: "join tokens, node certificates",
        sql: "
CREATE TABLE join_tokens (
    hash TEXT PRIMARY KEY,
    node TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT,
    used_by TEXT
);

CREATE TABLE node_certs (
    serial TEXT PRIMARY KEY,
    node TEXT NOT NULL,
    issued_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX node_certs_by_node ON node_certs (node);
",
    },
    // The leader lease of replicated controllers (PostgreSQL; one row). Each leader takes
    // it with a new epoch; every write of the leader's checks its epoch (see `leader`).
    Migration {
        version: 6,
        name: "leader lease",
        sql: "
CREATE TABLE leadership (
    id BIGINT PRIMARY KEY,
    epoch BIGINT NOT NULL,
    holder TEXT NOT NULL,
    address TEXT NOT NULL,
    renewed_ms BIGINT NOT NULL,
    lease_ms BIGINT NOT NULL,
    since_ms BIGINT NOT NULL
);
INSERT INTO leadership (id, epoch, holder, address, renewed_ms, lease_ms, since_ms)
    VALUES (1, 0, '', '', 0, 0, 0);
",
    },
    // A submission's idempotency key, committed with its jobs: a request sent again (a
    // client's retry after a failover) is answered with the jobs of the first.
    Migration {
        version: 7,
        name: "submission idempotency keys",
        sql: "
CREATE TABLE submit_keys (
    user_name TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    first_job BIGINT NOT NULL,
    jobs BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (user_name, idem_key)
);
CREATE INDEX submit_keys_by_time ON submit_keys (created_at);
",
    },
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

const VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at BIGINT NOT NULL
)";

/// The database's version inside `tx` (0 for an empty database).
pub(crate) fn current_version(tx: &mut dyn Tx) -> Result<u32, StoreError> {
    tx.batch(VERSION_TABLE)?;
    let rows = tx.query("SELECT MAX(version) FROM schema_migrations", &[])?;
    let found = match rows.first() {
        Some(row) => row.opt_int(0)?.unwrap_or(0),
        None => 0,
    };
    u32::try_from(found).map_err(|_| StoreError::Corrupt {
        what: "schema version",
        row: "schema_migrations".into(),
        message: format!("{found} is not a version"),
    })
}

/// Refuses a database newer than this build.
pub(crate) fn check_not_newer(found: u32) -> Result<(), StoreError> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Applies `migration` inside `tx` if the database is just below it. Returns whether it
/// applied (another process may have done it first).
pub(crate) fn apply(
    tx: &mut dyn Tx,
    migration: &Migration,
    now_secs: i64,
) -> Result<bool, StoreError> {
    if tx.dialect() == Dialect::Postgres {
        // Two controllers starting at once take turns; SQLite's write transaction already
        // holds the database's one write lock.
        tx.execute("SELECT pg_advisory_xact_lock(7242105)", &[])?;
    }
    let found = current_version(tx)?;
    check_not_newer(found)?;
    if found >= migration.version {
        return Ok(false);
    }
    let sql = migration.sql.replace("{id}", tx.dialect().id_column());
    let wrap = |source| StoreError::Migration {
        version: migration.version,
        name: migration.name,
        source: Box::new(source),
    };
    tx.batch(&sql).map_err(wrap)?;
    tx.execute(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
        &[
            Value::Int(i64::from(migration.version)),
            Value::from(migration.name),
            Value::Int(now_secs),
        ],
    )
    .map_err(wrap)?;
    Ok(true)
}
