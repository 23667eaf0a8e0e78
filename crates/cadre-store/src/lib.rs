//! cadre-store: the controller's durable state. One trait ([`Store`]), one schema
//! (versioned by [`SCHEMA_VERSION`]), two backends: SQLite ([`SqliteStore`], the embedded default at a path) and
//! PostgreSQL ([`PostgresStore`], at a URL; feature `postgres`, on by default).
//!
//! The contract the controller builds on:
//! - a submission is acknowledged only after [`Store::submit_batch`] returned: its job is
//!   then committed and survives a crash of the controller, the OS or the machine (see
//!   [`SqliteStore`] for what that costs and why);
//! - job ids come from the store: strictly increasing, never reused, even after a crash;
//! - every change of a job is committed by [`Store::record`] before the controller acts on it;
//! - what a job runs (its `RunSpec`: command, environment, ...) is committed with its
//!   submission but read apart from it ([`Store::run_spec`]), so that listing jobs never
//!   decodes environments;
//! - each call is one transaction: all of it is committed, or none of it.
//!
//! The trait is synchronous and takes `&mut self`: the controller calls it from one writer
//! thread (or `spawn_blocking`), batching submissions that arrive together into one
//! transaction (group commit). More threads or processes open more handles on the same
//! database; the database serializes their writes.
//!
//! What does not live here: the scheduling model (`cadre-core`), the API and authentication
//! (`cadre-server`), token generation (the server draws the random token; the store only
//! ever sees its hash).

mod bench;
#[cfg(test)]
mod conformance;
mod error;
#[cfg(feature = "postgres")]
mod leader;
mod ops;
#[cfg(feature = "postgres")]
mod postgres;
mod records;
mod schema;
mod sql;
mod sqlite;

pub use bench::{SubmitBench, bench_submit};
pub use error::StoreError;
#[cfg(feature = "postgres")]
pub use leader::{LeaderInfo, LeaderLease, Taken};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresConfig, PostgresStore};
pub use records::{
    AccountingFilter, AccountingRecord, AssocUsage, JobChange, JobEvent, JobFilter, JobStatus,
    JoinRefused, NewJob, NewJoinToken, NewSubmitKey, NewToken, NodeCertRecord, NodeRecord,
    QueueObjectKey, QueueObjectRecord, RunUsage, StepFilter, StepRecord, StoredJob, SubmitKey,
    TokenHash, TokenRecord,
};
pub use schema::SCHEMA_VERSION;
pub use sqlite::{SqliteDurability, SqliteStore};

use cadre_core::job::{JobId, JobSpec};
use cadre_core::run::RunSpec;
use cadre_core::time::Time;
use sql::{Mode, Transact};

/// The controller's durable state. Every method is one transaction.
pub trait Store: Send {
    /// The schema version of the open database (migrations ran when it was opened).
    fn schema_version(&mut self) -> Result<u32, StoreError>;

    /// Commits many submissions at once and returns their ids, in the order given. Ids are
    /// strictly increasing and never reused. All of them are committed, or none.
    fn submit_batch(&mut self, jobs: &[NewJob]) -> Result<Vec<JobId>, StoreError> {
        self.submit_batch_keyed(jobs, &[])
    }

    /// [`Store::submit_batch`], with the idempotency keys of the batch's requests
    /// committed in the same transaction.
    fn submit_batch_keyed(
        &mut self,
        jobs: &[NewJob],
        keys: &[NewSubmitKey],
    ) -> Result<Vec<JobId>, StoreError>;

    /// The idempotency keys of submissions committed at `since` or later, oldest first.
    fn submit_keys(&mut self, since: Time) -> Result<Vec<SubmitKey>, StoreError>;

    /// Commits job changes in the order given (all, or none: an unknown job fails the
    /// whole batch). A change that ends a run also writes its accounting row.
    fn record(&mut self, changes: &[JobChange]) -> Result<(), StoreError>;

    /// [`Store::record`] and [`Store::add_job_events`] in one transaction: the events of
    /// the changes are committed with them, or neither is.
    fn record_with_events(
        &mut self,
        changes: &[JobChange],
        events: &[JobEvent],
    ) -> Result<(), StoreError>;

    fn job(&mut self, id: JobId) -> Result<Option<StoredJob>, StoreError>;

    /// What job `id` runs, exactly as submitted; `None` if there is no such job. Apart from
    /// [`Store::job`] because it holds the submitter's whole environment: only launching
    /// a job needs it.
    ///
    /// A job submitted before the store kept run specs (schema version 1, migrated) has
    /// none: that is [`StoreError::MissingRunSpec`], not `None`, so that "no such job" and
    /// "nothing to launch" cannot be mistaken for each other. Such a job cannot run; the
    /// controller fails it.
    fn run_spec(&mut self, id: JobId) -> Result<Option<RunSpec>, StoreError>;

    /// Jobs matching `filter`, in ascending id order.
    fn list_jobs(&mut self, filter: &JobFilter) -> Result<Vec<StoredJob>, StoreError>;

    /// Every job not in a final state (pending, running, preempting), in id order: what a
    /// restarted controller rebuilds its scheduler from.
    fn unfinished_jobs(&mut self) -> Result<Vec<StoredJob>, StoreError>;

    /// Inserts or replaces nodes by name.
    fn upsert_nodes(&mut self, nodes: &[NodeRecord]) -> Result<(), StoreError>;

    /// Every node, by name.
    fn nodes(&mut self) -> Result<Vec<NodeRecord>, StoreError>;

    /// Accounting rows (one per ended run) for `sacct`, in (job, run) order.
    fn accounting(
        &mut self,
        filter: &AccountingFilter,
    ) -> Result<Vec<AccountingRecord>, StoreError>;

    /// Replaces the saved fair-share usage with this snapshot.
    fn save_usage(&mut self, usage: &[AssocUsage]) -> Result<(), StoreError>;

    /// The last saved fair-share usage, by account then user.
    fn load_usage(&mut self) -> Result<Vec<AssocUsage>, StoreError>;

    /// Replaces jobs' specs (a time limit or nice value changed after submission).
    fn update_specs(&mut self, specs: &[(JobId, JobSpec)]) -> Result<(), StoreError>;

    /// Writes each step's row (inserted, or replaced whole).
    fn record_steps(&mut self, steps: &[StepRecord]) -> Result<(), StoreError>;

    /// Steps by job then step number.
    fn steps(&mut self, filter: &StepFilter) -> Result<Vec<StepRecord>, StoreError>;

    /// Stores a token's hash; fails with [`StoreError::DuplicateToken`] if it exists.
    fn create_token(&mut self, token: &NewToken) -> Result<TokenRecord, StoreError>;

    /// The unrevoked token with this hash, if any: what authentication asks.
    fn active_token(&mut self, hash: &TokenHash) -> Result<Option<TokenRecord>, StoreError>;

    /// Every token, revoked ones included, by id.
    fn tokens(&mut self) -> Result<Vec<TokenRecord>, StoreError>;

    /// Revokes a token; false if there is no such unrevoked token.
    fn revoke_token(&mut self, id: u64, at: Time) -> Result<bool, StoreError>;

    /// Puts queue objects (replacing those of the same key, which keep their place) and
    /// deletes others, all in one transaction: one `cadre apply` or `cadre delete`.
    /// Deleting a key that is not there is not an error.
    fn change_queue_objects(
        &mut self,
        put: &[QueueObjectRecord],
        delete: &[QueueObjectKey],
    ) -> Result<(), StoreError>;

    /// Every queue object, in the order they were first put: what a restarted controller
    /// applies before it restores its jobs.
    fn queue_objects(&mut self) -> Result<Vec<QueueObjectRecord>, StoreError>;

    /// Appends events of jobs (which must exist), in the order given.
    fn add_job_events(&mut self, events: &[JobEvent]) -> Result<(), StoreError>;

    /// A job's events, oldest first.
    fn job_events(&mut self, id: JobId) -> Result<Vec<JobEvent>, StoreError>;

    /// Keeps a new join token (its hash).
    fn create_join_token(&mut self, token: &NewJoinToken) -> Result<(), StoreError>;

    /// Takes the join token of `hash` for `cert`'s node and records `cert` as the node's
    /// one live certificate, in one transaction; or says why the token does not enrol it
    /// (nothing is written then).
    fn enrol_node(
        &mut self,
        hash: &TokenHash,
        cert: &NodeCertRecord,
    ) -> Result<Result<(), JoinRefused>, StoreError>;

    /// The node a join token was made for, if the token exists and names one.
    fn join_token_node(&mut self, hash: &TokenHash) -> Result<Option<String>, StoreError>;

    /// The node certificate of serial `serial`, if the controller issued it.
    fn node_cert(&mut self, serial: &str) -> Result<Option<NodeCertRecord>, StoreError>;

    /// Every node certificate issued, by node.
    fn node_certs(&mut self) -> Result<Vec<NodeCertRecord>, StoreError>;

    /// Revokes the node's live certificates; how many.
    fn revoke_node_certs(&mut self, node: &str, at: Time) -> Result<u64, StoreError>;
}

impl<B: Transact> Store for B {
    fn schema_version(&mut self) -> Result<u32, StoreError> {
        self.transact(Mode::Read, &mut |tx| {
            let rows = tx.query("SELECT MAX(version) FROM schema_migrations", &[])?;
            let v = rows.first().map(|r| r.opt_int(0)).transpose()?.flatten();
            u32::try_from(v.unwrap_or(0)).map_err(|_| StoreError::Corrupt {
                what: "schema version",
                row: "schema_migrations".into(),
                message: format!("{v:?} is not a version"),
            })
        })
    }

    fn submit_batch_keyed(
        &mut self,
        jobs: &[NewJob],
        keys: &[NewSubmitKey],
    ) -> Result<Vec<JobId>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.transact(Mode::Write, &mut |tx| ops::submit_batch(tx, jobs, keys))
    }

    fn submit_keys(&mut self, since: Time) -> Result<Vec<SubmitKey>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::submit_keys(tx, since))
    }

    fn record(&mut self, changes: &[JobChange]) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        self.transact(Mode::Write, &mut |tx| ops::record(tx, changes))
    }

    fn record_with_events(
        &mut self,
        changes: &[JobChange],
        events: &[JobEvent],
    ) -> Result<(), StoreError> {
        if changes.is_empty() && events.is_empty() {
            return Ok(());
        }
        self.transact(Mode::Write, &mut |tx| {
            ops::record(tx, changes)?;
            if events.is_empty() {
                return Ok(());
            }
            ops::add_job_events(tx, events)
        })
    }

    fn job(&mut self, id: JobId) -> Result<Option<StoredJob>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::job(tx, id))
    }

    fn run_spec(&mut self, id: JobId) -> Result<Option<RunSpec>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::run_spec(tx, id))
    }

    fn list_jobs(&mut self, filter: &JobFilter) -> Result<Vec<StoredJob>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::list_jobs(tx, filter))
    }

    fn unfinished_jobs(&mut self) -> Result<Vec<StoredJob>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::unfinished_jobs(tx))
    }

    fn upsert_nodes(&mut self, nodes: &[NodeRecord]) -> Result<(), StoreError> {
        self.transact(Mode::Write, &mut |tx| ops::upsert_nodes(tx, nodes))
    }

    fn nodes(&mut self) -> Result<Vec<NodeRecord>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::nodes(tx))
    }

    fn accounting(
        &mut self,
        filter: &AccountingFilter,
    ) -> Result<Vec<AccountingRecord>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::accounting(tx, filter))
    }

    fn save_usage(&mut self, usage: &[AssocUsage]) -> Result<(), StoreError> {
        self.transact(Mode::Write, &mut |tx| ops::save_usage(tx, usage))
    }

    fn load_usage(&mut self) -> Result<Vec<AssocUsage>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::load_usage(tx))
    }

    fn update_specs(&mut self, specs: &[(JobId, JobSpec)]) -> Result<(), StoreError> {
        if specs.is_empty() {
            return Ok(());
        }
        self.transact(Mode::Write, &mut |tx| ops::update_specs(tx, specs))
    }

    fn record_steps(&mut self, steps: &[StepRecord]) -> Result<(), StoreError> {
        if steps.is_empty() {
            return Ok(());
        }
        self.transact(Mode::Write, &mut |tx| ops::record_steps(tx, steps))
    }

    fn steps(&mut self, filter: &StepFilter) -> Result<Vec<StepRecord>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::steps(tx, filter))
    }

    fn create_token(&mut self, token: &NewToken) -> Result<TokenRecord, StoreError> {
        self.transact(Mode::Write, &mut |tx| ops::create_token(tx, token))
    }

    fn active_token(&mut self, hash: &TokenHash) -> Result<Option<TokenRecord>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::active_token(tx, hash))
    }

    fn tokens(&mut self) -> Result<Vec<TokenRecord>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::tokens(tx))
    }

    fn revoke_token(&mut self, id: u64, at: Time) -> Result<bool, StoreError> {
        self.transact(Mode::Write, &mut |tx| ops::revoke_token(tx, id, at))
    }

    fn change_queue_objects(
        &mut self,
        put: &[QueueObjectRecord],
        delete: &[QueueObjectKey],
    ) -> Result<(), StoreError> {
        if put.is_empty() && delete.is_empty() {
            return Ok(());
        }
        self.transact(Mode::Write, &mut |tx| {
            ops::change_queue_objects(tx, put, delete)
        })
    }

    fn queue_objects(&mut self) -> Result<Vec<QueueObjectRecord>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::queue_objects(tx))
    }

    fn add_job_events(&mut self, events: &[JobEvent]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        self.transact(Mode::Write, &mut |tx| ops::add_job_events(tx, events))
    }

    fn job_events(&mut self, id: JobId) -> Result<Vec<JobEvent>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::job_events(tx, id))
    }

    fn create_join_token(&mut self, token: &NewJoinToken) -> Result<(), StoreError> {
        self.transact(Mode::Write, &mut |tx| ops::create_join_token(tx, token))
    }

    fn enrol_node(
        &mut self,
        hash: &TokenHash,
        cert: &NodeCertRecord,
    ) -> Result<Result<(), JoinRefused>, StoreError> {
        self.transact(Mode::Write, &mut |tx| ops::enrol_node(tx, hash, cert))
    }

    fn join_token_node(&mut self, hash: &TokenHash) -> Result<Option<String>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::join_token_node(tx, hash))
    }

    fn node_cert(&mut self, serial: &str) -> Result<Option<NodeCertRecord>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::node_cert(tx, serial))
    }

    fn node_certs(&mut self) -> Result<Vec<NodeCertRecord>, StoreError> {
        self.transact(Mode::Read, &mut |tx| ops::node_certs(tx))
    }

    fn revoke_node_certs(&mut self, node: &str, at: Time) -> Result<u64, StoreError> {
        self.transact(Mode::Write, &mut |tx| ops::revoke_node_certs(tx, node, at))
    }
}

/// Opens the database `--database` names: a `postgres://` or `postgresql://` URL, or else
/// a path to an SQLite file (created if missing). Migrates it to [`SCHEMA_VERSION`].
/// [`open`], for the leader of replicated controllers: every write transaction checks
/// first that the leader lease is still at `epoch` ([`LeaderLease`]), and fails with
/// [`StoreError::Deposed`] once another controller has taken it. PostgreSQL only.
pub fn open_fenced(database: &str, epoch: u64) -> Result<Box<dyn Store>, StoreError> {
    #[cfg(feature = "postgres")]
    if database.starts_with("postgres://") || database.starts_with("postgresql://") {
        let mut store = PostgresStore::connect(database)?;
        store.fence(epoch);
        return Ok(Box::new(store));
    }
    let _ = epoch;
    Err(StoreError::PostgresUrl {
        message: format!(
            "replicated controllers share a PostgreSQL database (postgres://...), not `{database}`"
        ),
    })
}

pub fn open(database: &str) -> Result<Box<dyn Store>, StoreError> {
    if database.starts_with("postgres://") || database.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        return Ok(Box::new(PostgresStore::connect(database)?));
        #[cfg(not(feature = "postgres"))]
        return Err(StoreError::PostgresDisabled {
            url: database.to_owned(),
        });
    }
    Ok(Box::new(SqliteStore::open(std::path::Path::new(database))?))
}

/// Seconds since the Unix epoch, for the `applied_at` of migrations (the one clock read).
pub(crate) fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Brings a freshly opened backend to [`SCHEMA_VERSION`], one migration per transaction,
/// refusing a newer database before writing anything.
pub(crate) fn migrate<B: Transact>(backend: &mut B) -> Result<(), StoreError> {
    let now = now_secs();
    for m in schema::MIGRATIONS {
        backend.transact(Mode::Write, &mut |tx| schema::apply(tx, m, now))?;
    }
    // Also catches a database already newer than every migration we know.
    backend.transact(Mode::Write, &mut |tx| {
        let found = schema::current_version(tx)?;
        schema::check_not_newer(found)
    })
}
