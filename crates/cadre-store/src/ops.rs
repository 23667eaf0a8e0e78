//! Every query of the store, written once against [`Tx`] for both backends, and the
//! conversions between the model's types and columns.

use crate::error::StoreError;
use crate::records::{
    AccountingFilter, AccountingRecord, AssocUsage, JobChange, JobEvent, JobFilter, JobStatus,
    JoinRefused, NewJob, NewJoinToken, NewSubmitKey, NewToken, NodeCertRecord, NodeRecord,
    QueueObjectKey, QueueObjectRecord, RunUsage, StepFilter, StepRecord, StoredJob, SubmitKey,
    TokenHash, TokenRecord,
};
use crate::sql::{Row, Tx, Value};
use cadre_core::cluster::NodeAvail;
use cadre_core::job::{JobId, JobState};
use cadre_core::run::RunSpec;
use cadre_core::time::Time;
use serde::Serialize;
use serde::de::DeserializeOwned;

fn to_i64(what: &'static str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::OutOfRange {
        what,
        value,
        max: i64::MAX,
    })
}

fn time(what: &'static str, t: Time) -> Result<Value, StoreError> {
    Ok(Value::Int(to_i64(what, t.0)?))
}

fn opt_time(what: &'static str, t: Option<Time>) -> Result<Value, StoreError> {
    t.map_or(Ok(Value::Null), |t| time(what, t))
}

fn corrupt(what: &'static str, row: impl std::fmt::Display, message: impl ToString) -> StoreError {
    StoreError::Corrupt {
        what,
        row: row.to_string(),
        message: message.to_string(),
    }
}

fn from_i64<T: TryFrom<i64>>(what: &'static str, row: &str, v: i64) -> Result<T, StoreError> {
    T::try_from(v).map_err(|_| corrupt(what, row, format!("{v} is out of range")))
}

fn read_time(what: &'static str, row: &str, v: i64) -> Result<Time, StoreError> {
    Ok(Time(from_i64(what, row, v)?))
}

fn read_opt_time(
    what: &'static str,
    row: &str,
    v: Option<i64>,
) -> Result<Option<Time>, StoreError> {
    v.map(|v| read_time(what, row, v)).transpose()
}

/// A unit enum (`JobState`, `NodeAvail`) as its serde name: the name is the column value.
fn enum_text<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        // Unit enums always serialize to strings; fall back to the JSON text regardless.
        other => other.map(|v| v.to_string()).unwrap_or_default(),
    }
}

fn parse_enum<T: DeserializeOwned>(
    what: &'static str,
    row: &str,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|e| corrupt(what, row, format!("`{text}`: {e}")))
}

fn json<T: Serialize>(what: &'static str, id: u64, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|source| StoreError::Encode { what, id, source })
}

fn parse_json<T: DeserializeOwned>(
    what: &'static str,
    row: &str,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(what, row, e))
}

/// Takes `n` consecutive values of the counter `name`; returns the first.
fn take_ids(tx: &mut dyn Tx, name: &str, n: u64) -> Result<u64, StoreError> {
    let n = to_i64("batch size", n)?;
    let rows = tx.query(
        "UPDATE counters SET next_value = next_value + $1 WHERE name = $2 \
         RETURNING next_value - $1",
        &[Value::Int(n), Value::from(name)],
    )?;
    let row = rows
        .first()
        .ok_or_else(|| corrupt("counter", name, "missing"))?;
    from_i64("counter", name, row.int(0)?)
}

pub(crate) fn submit_batch(
    tx: &mut dyn Tx,
    jobs: &[NewJob],
    keys: &[NewSubmitKey],
) -> Result<Vec<JobId>, StoreError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let first = take_ids(tx, "job", jobs.len() as u64)?;
    let state = enum_text(&JobStatus::submitted().state);
    let batch_ids: Vec<JobId> = (0..jobs.len() as u64).map(|i| JobId(first + i)).collect();
    let mut ids = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        let id = first + i as u64;
        let resolved;
        let job = if job.array_of.is_some() {
            let mut j = job.clone();
            j.resolve_array(&batch_ids);
            resolved = j;
            &resolved
        } else {
            job
        };
        let reason = json(
            "pending reason",
            id,
            &JobStatus::submitted_as(&job.spec).reason,
        )?;
        // One statement text for every job and batch size, so that both backends prepare
        // it once per connection (a multi-row INSERT would be a new statement per size).
        tx.execute(
            "INSERT INTO jobs (id, name, user_name, account, partition, submit_time, spec, \
             state, reason, start_time, end_time, allocation, exit_code, requeues, run_spec) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, NULL, NULL, NULL, 0, $10)",
            &[
                Value::Int(to_i64("job id", id)?),
                Value::from(job.spec.name.as_str()),
                Value::from(job.spec.user.as_str()),
                Value::from(job.spec.account.as_str()),
                Value::from(job.partition.as_str()),
                time("submit time", job.spec.submit_time)?,
                Value::Text(json("spec", id, &job.spec)?),
                Value::Text(state.clone()),
                Value::Text(reason),
                Value::Text(json("run spec", id, &job.run)?),
            ],
        )?;
        ids.push(JobId(id));
    }
    for k in keys {
        let Some(first) = ids.get(k.first) else {
            return Err(StoreError::Corrupt {
                what: "submission key",
                row: k.key.clone(),
                message: format!("names job {} of a batch of {}", k.first, ids.len()),
            });
        };
        let at = jobs.get(k.first).map_or(Time(0), |j| j.spec.submit_time);
        tx.execute(
            "INSERT INTO submit_keys (user_name, idem_key, first_job, jobs, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
            &[
                Value::from(k.user.as_str()),
                Value::from(k.key.as_str()),
                Value::Int(to_i64("job id", first.0)?),
                Value::Int(to_i64("job count", k.count as u64)?),
                time("submit time", at)?,
            ],
        )?;
    }
    Ok(ids)
}

pub(crate) fn submit_keys(tx: &mut dyn Tx, since: Time) -> Result<Vec<SubmitKey>, StoreError> {
    let rows = tx.query(
        "SELECT user_name, idem_key, first_job, jobs, created_at FROM submit_keys \
         WHERE created_at >= $1 ORDER BY created_at",
        &[time("key time", since)?],
    )?;
    rows.iter()
        .map(|r| {
            Ok(SubmitKey {
                user: r.text(0)?.to_owned(),
                key: r.text(1)?.to_owned(),
                first: JobId(u64::try_from(r.int(2)?).unwrap_or(0)),
                count: u64::try_from(r.int(3)?).unwrap_or(0),
                at: read_time("key time", "submit_keys", r.int(4)?)?,
            })
        })
        .collect()
}

pub(crate) fn record(tx: &mut dyn Tx, changes: &[JobChange]) -> Result<(), StoreError> {
    for change in changes {
        let id = change.id.0;
        let s = &change.status;
        let allocation = match &s.allocation {
            Some(a) => Value::Text(json("allocation", id, a)?),
            None => Value::Null,
        };
        let changed = tx.execute(
            "UPDATE jobs SET state = $2, reason = $3, start_time = $4, end_time = $5, \
             allocation = $6, exit_code = $7, requeues = $8 WHERE id = $1",
            &[
                Value::Int(to_i64("job id", id)?),
                Value::Text(enum_text(&s.state)),
                Value::Text(json("pending reason", id, &s.reason)?),
                opt_time("start time", s.start_time)?,
                opt_time("end time", s.end_time)?,
                allocation,
                Value::from(s.exit_code.map(i64::from)),
                Value::Int(i64::from(s.requeues)),
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::UnknownJob { id });
        }
        if let Some(usage) = &change.ended_run {
            record_run(tx, change, usage)?;
        }
    }
    Ok(())
}

/// Writes the accounting row of the run `change` ends, from the job's identity and the
/// change. Recording the same end twice keeps the first row.
fn record_run(tx: &mut dyn Tx, change: &JobChange, usage: &RunUsage) -> Result<(), StoreError> {
    let s = &change.status;
    let end = s.end_time.or(s.start_time).unwrap_or(Time(0));
    let params = [
        Value::Int(to_i64("job id", change.id.0)?),
        Value::Int(i64::from(s.requeues)),
        opt_time("start time", s.start_time)?,
        time("end time", end)?,
        Value::Text(enum_text(&s.state)),
        Value::from(s.exit_code.map(i64::from)),
        Value::Int(to_i64("GPUs", usage.gpu_milli)?),
        Value::Int(to_i64("CPUs", usage.cpus)?),
        Value::from(usage.nodes.as_str()),
    ];
    tx.execute(
        "INSERT INTO job_runs (job_id, run, name, user_name, account, partition, submit_time, \
         start_time, end_time, state, exit_code, gpu_milli, cpus, nodes) \
         SELECT id, CAST($2 AS BIGINT), name, user_name, account, partition, submit_time, \
         CAST($3 AS BIGINT), CAST($4 AS BIGINT), CAST($5 AS TEXT), CAST($6 AS BIGINT), \
         CAST($7 AS BIGINT), CAST($8 AS BIGINT), CAST($9 AS TEXT) FROM jobs WHERE id = $1 \
         ON CONFLICT (job_id, run) DO NOTHING",
        &params,
    )?;
    Ok(())
}

const JOB_COLUMNS: &str = "id, partition, spec, state, reason, start_time, end_time, \
                           allocation, exit_code, requeues";

fn job_from_row(row: &Row) -> Result<StoredJob, StoreError> {
    let id: u64 = from_i64("job id", "jobs", row.int(0)?)?;
    let at = format!("job {id}");
    Ok(StoredJob {
        id: JobId(id),
        partition: row.text(1)?.to_owned(),
        spec: parse_json("spec", &at, row.text(2)?)?,
        status: JobStatus {
            state: parse_enum("state", &at, row.text(3)?)?,
            reason: parse_json("pending reason", &at, row.text(4)?)?,
            start_time: read_opt_time("start time", &at, row.opt_int(5)?)?,
            end_time: read_opt_time("end time", &at, row.opt_int(6)?)?,
            allocation: row
                .opt_text(7)?
                .map(|a| parse_json("allocation", &at, a))
                .transpose()?,
            exit_code: row
                .opt_int(8)?
                .map(|c| from_i64("exit code", &at, c))
                .transpose()?,
            requeues: from_i64("requeue count", &at, row.int(9)?)?,
        },
    })
}

pub(crate) fn job(tx: &mut dyn Tx, id: JobId) -> Result<Option<StoredJob>, StoreError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1");
    let rows = tx.query(&sql, &[Value::Int(to_i64("job id", id.0)?)])?;
    rows.first().map(job_from_row).transpose()
}

/// What job `id` runs: `None` if there is no such job, [`StoreError::MissingRunSpec`] if it
/// was submitted before the store kept run specs (its column is NULL).
pub(crate) fn run_spec(tx: &mut dyn Tx, id: JobId) -> Result<Option<RunSpec>, StoreError> {
    let rows = tx.query(
        "SELECT run_spec FROM jobs WHERE id = $1",
        &[Value::Int(to_i64("job id", id.0)?)],
    )?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    match row.opt_text(0)? {
        Some(text) => parse_json("run spec", &format!("job {}", id.0), text).map(Some),
        None => Err(StoreError::MissingRunSpec { id: id.0 }),
    }
}

/// Builds `WHERE ...` clauses with numbered parameters.
#[derive(Default)]
struct Conditions {
    clauses: Vec<String>,
    params: Vec<Value>,
}

impl Conditions {
    fn push(&mut self, column: &str, value: Value) {
        self.params.push(value);
        self.clauses
            .push(format!("{column} = ${}", self.params.len()));
    }

    fn push_cmp(&mut self, column: &str, op: &str, value: Value) {
        self.params.push(value);
        self.clauses
            .push(format!("{column} {op} ${}", self.params.len()));
    }

    fn push_states(&mut self, column: &str, states: &[JobState]) {
        if states.is_empty() {
            return;
        }
        let mut list = Vec::with_capacity(states.len());
        for s in states {
            self.params.push(Value::Text(enum_text(s)));
            list.push(format!("${}", self.params.len()));
        }
        self.clauses
            .push(format!("{column} IN ({})", list.join(", ")));
    }

    fn sql(&self) -> String {
        if self.clauses.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.clauses.join(" AND "))
        }
    }

    fn limit(&mut self, limit: Option<u32>) -> String {
        match limit {
            Some(n) => {
                self.params.push(Value::Int(i64::from(n)));
                format!(" LIMIT ${}", self.params.len())
            }
            None => String::new(),
        }
    }
}

pub(crate) fn list_jobs(tx: &mut dyn Tx, filter: &JobFilter) -> Result<Vec<StoredJob>, StoreError> {
    let mut c = Conditions::default();
    c.push_states("state", &filter.states);
    if let Some(u) = &filter.user {
        c.push("user_name", Value::from(u.as_str()));
    }
    if let Some(a) = &filter.account {
        c.push("account", Value::from(a.as_str()));
    }
    if let Some(p) = &filter.partition {
        c.push("partition", Value::from(p.as_str()));
    }
    if let Some(after) = filter.after {
        c.push_cmp("id", ">", Value::Int(to_i64("job id", after.0)?));
    }
    let where_ = c.sql();
    let limit = c.limit(filter.limit);
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs{where_} ORDER BY id{limit}");
    tx.query(&sql, &c.params)?
        .iter()
        .map(job_from_row)
        .collect()
}

pub(crate) fn unfinished_jobs(tx: &mut dyn Tx) -> Result<Vec<StoredJob>, StoreError> {
    let filter = JobFilter {
        states: vec![JobState::Pending, JobState::Running, JobState::Preempting],
        ..JobFilter::default()
    };
    debug_assert!(filter.states.iter().all(|s| !s.is_final()));
    list_jobs(tx, &filter)
}

pub(crate) fn upsert_nodes(tx: &mut dyn Tx, nodes: &[NodeRecord]) -> Result<(), StoreError> {
    for n in nodes {
        tx.execute(
            "INSERT INTO nodes (name, avail, reason, emulated_gpus, updated_at) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (name) DO UPDATE SET avail = excluded.avail, \
             reason = excluded.reason, emulated_gpus = excluded.emulated_gpus, \
             updated_at = excluded.updated_at",
            &[
                Value::from(n.name.as_str()),
                Value::Text(enum_text(&n.avail)),
                Value::from(n.reason.clone()),
                Value::Bool(n.emulated_gpus),
                time("node update time", n.updated)?,
            ],
        )?;
    }
    Ok(())
}

pub(crate) fn nodes(tx: &mut dyn Tx) -> Result<Vec<NodeRecord>, StoreError> {
    let rows = tx.query(
        "SELECT name, avail, reason, emulated_gpus, updated_at FROM nodes ORDER BY name",
        &[],
    )?;
    rows.iter()
        .map(|row| {
            let name = row.text(0)?.to_owned();
            let at = format!("node {name}");
            Ok(NodeRecord {
                avail: parse_enum::<NodeAvail>("availability", &at, row.text(1)?)?,
                reason: row.opt_text(2)?.map(str::to_owned),
                emulated_gpus: row.bool(3)?,
                updated: read_time("update time", &at, row.int(4)?)?,
                name,
            })
        })
        .collect()
}

pub(crate) fn accounting(
    tx: &mut dyn Tx,
    filter: &AccountingFilter,
) -> Result<Vec<AccountingRecord>, StoreError> {
    let mut c = Conditions::default();
    c.push_states("state", &filter.states);
    if let Some(u) = &filter.user {
        c.push("user_name", Value::from(u.as_str()));
    }
    if let Some(a) = &filter.account {
        c.push("account", Value::from(a.as_str()));
    }
    if let Some(p) = &filter.partition {
        c.push("partition", Value::from(p.as_str()));
    }
    if let Some(t) = filter.ended_since {
        c.push_cmp("end_time", ">=", time("end time", t)?);
    }
    if let Some(t) = filter.ended_before {
        c.push_cmp("end_time", "<", time("end time", t)?);
    }
    if let Some(after) = filter.after {
        c.push_cmp("job_id", ">", Value::Int(to_i64("job id", after.0)?));
    }
    let where_ = c.sql();
    let limit = c.limit(filter.limit);
    let sql = format!(
        "SELECT job_id, run, name, user_name, account, partition, submit_time, start_time, \
         end_time, state, exit_code, gpu_milli, cpus, nodes FROM job_runs{where_} \
         ORDER BY job_id, run{limit}"
    );
    tx.query(&sql, &c.params)?
        .iter()
        .map(|row| {
            let job: u64 = from_i64("job id", "job_runs", row.int(0)?)?;
            let at = format!("accounting row of job {job}");
            Ok(AccountingRecord {
                job: JobId(job),
                run: from_i64("run", &at, row.int(1)?)?,
                name: row.text(2)?.to_owned(),
                user: row.text(3)?.to_owned(),
                account: row.text(4)?.to_owned(),
                partition: row.text(5)?.to_owned(),
                submit_time: read_time("submit time", &at, row.int(6)?)?,
                start_time: read_opt_time("start time", &at, row.opt_int(7)?)?,
                end_time: read_time("end time", &at, row.int(8)?)?,
                state: parse_enum("state", &at, row.text(9)?)?,
                exit_code: row
                    .opt_int(10)?
                    .map(|c| from_i64("exit code", &at, c))
                    .transpose()?,
                usage: RunUsage {
                    gpu_milli: from_i64("GPUs", &at, row.int(11)?)?,
                    cpus: from_i64("CPUs", &at, row.int(12)?)?,
                    nodes: row.text(13)?.to_owned(),
                },
            })
        })
        .collect()
}

pub(crate) fn update_specs(
    tx: &mut dyn Tx,
    specs: &[(JobId, cadre_core::job::JobSpec)],
) -> Result<(), StoreError> {
    for (id, spec) in specs {
        let changed = tx.execute(
            "UPDATE jobs SET spec = $2 WHERE id = $1",
            &[
                Value::Int(to_i64("job id", id.0)?),
                Value::Text(json("spec", id.0, spec)?),
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::UnknownJob { id: id.0 });
        }
    }
    Ok(())
}

pub(crate) fn record_steps(tx: &mut dyn Tx, steps: &[StepRecord]) -> Result<(), StoreError> {
    for s in steps {
        tx.execute(
            "INSERT INTO job_steps (job_id, step, name, state, nodes, ntasks, cpus, start_time, \
             end_time, exit_code, command) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (job_id, step) DO UPDATE SET name = excluded.name, \
             state = excluded.state, nodes = excluded.nodes, ntasks = excluded.ntasks, \
             cpus = excluded.cpus, start_time = excluded.start_time, \
             end_time = excluded.end_time, exit_code = excluded.exit_code, \
             command = excluded.command",
            &[
                Value::Int(to_i64("job id", s.job.0)?),
                Value::Int(i64::from(s.step)),
                Value::from(s.name.as_str()),
                Value::Text(enum_text(&s.state)),
                Value::from(s.nodes.as_str()),
                Value::Int(i64::from(s.ntasks)),
                Value::Int(to_i64("step CPUs", s.cpus)?),
                time("step start time", s.start_time)?,
                opt_time("step end time", s.end_time)?,
                s.exit_code
                    .map_or(Value::Null, |c| Value::Int(i64::from(c))),
                Value::from(s.command.as_str()),
            ],
        )?;
    }
    Ok(())
}

pub(crate) fn steps(tx: &mut dyn Tx, filter: &StepFilter) -> Result<Vec<StepRecord>, StoreError> {
    let mut c = Conditions::default();
    if !filter.jobs.is_empty() {
        let mut list = Vec::with_capacity(filter.jobs.len());
        for j in &filter.jobs {
            c.params.push(Value::Int(to_i64("job id", j.0)?));
            list.push(format!("${}", c.params.len()));
        }
        c.clauses.push(format!("job_id IN ({})", list.join(", ")));
    }
    if filter.unfinished {
        c.clauses.push("end_time IS NULL".into());
    }
    let sql = format!(
        "SELECT job_id, step, name, state, nodes, ntasks, cpus, start_time, end_time, \
         exit_code, command FROM job_steps{} ORDER BY job_id, step",
        c.sql()
    );
    tx.query(&sql, &c.params)?
        .iter()
        .map(|row| {
            let job: u64 = from_i64("job id", "job_steps", row.int(0)?)?;
            let at = format!("step of job {job}");
            Ok(StepRecord {
                job: JobId(job),
                step: from_i64("step", &at, row.int(1)?)?,
                name: row.text(2)?.to_owned(),
                state: parse_enum("state", &at, row.text(3)?)?,
                nodes: row.text(4)?.to_owned(),
                ntasks: from_i64("tasks", &at, row.int(5)?)?,
                cpus: from_i64("CPUs", &at, row.int(6)?)?,
                start_time: read_time("start time", &at, row.int(7)?)?,
                end_time: read_opt_time("end time", &at, row.opt_int(8)?)?,
                exit_code: row
                    .opt_int(9)?
                    .map(|c| from_i64("exit code", &at, c))
                    .transpose()?,
                command: row.text(10)?.to_owned(),
            })
        })
        .collect()
}

pub(crate) fn save_usage(tx: &mut dyn Tx, usage: &[AssocUsage]) -> Result<(), StoreError> {
    tx.execute("DELETE FROM assoc_usage", &[])?;
    for u in usage {
        if !u.raw_usage.is_finite() {
            return Err(corrupt(
                "usage",
                format!("association {}/{}", u.account, u.user),
                format!("{} is not a finite number", u.raw_usage),
            ));
        }
        tx.execute(
            "INSERT INTO assoc_usage (user_name, account, raw_usage, as_of) VALUES ($1, $2, $3, $4)",
            &[
                Value::from(u.user.as_str()),
                Value::from(u.account.as_str()),
                Value::Real(u.raw_usage),
                time("usage time", u.as_of)?,
            ],
        )?;
    }
    Ok(())
}

pub(crate) fn load_usage(tx: &mut dyn Tx) -> Result<Vec<AssocUsage>, StoreError> {
    let rows = tx.query(
        "SELECT user_name, account, raw_usage, as_of FROM assoc_usage \
         ORDER BY account, user_name",
        &[],
    )?;
    rows.iter()
        .map(|row| {
            let user = row.text(0)?.to_owned();
            let account = row.text(1)?.to_owned();
            let at = format!("association {account}/{user}");
            Ok(AssocUsage {
                raw_usage: row.real(2)?,
                as_of: read_time("usage time", &at, row.int(3)?)?,
                user,
                account,
            })
        })
        .collect()
}

const TOKEN_COLUMNS: &str = "id, user_name, admin, hash, created_at, revoked_at";

fn token_from_row(row: &Row) -> Result<TokenRecord, StoreError> {
    let id: u64 = from_i64("token id", "tokens", row.int(0)?)?;
    let at = format!("token {id}");
    let hash_text = row.text(3)?;
    Ok(TokenRecord {
        id,
        user: row.text(1)?.to_owned(),
        admin: row.bool(2)?,
        hash: TokenHash::from_hex(hash_text)
            .ok_or_else(|| corrupt("token hash", &at, "not 64 hexadecimal digits"))?,
        created: read_time("creation time", &at, row.int(4)?)?,
        revoked: read_opt_time("revocation time", &at, row.opt_int(5)?)?,
    })
}

pub(crate) fn create_token(tx: &mut dyn Tx, token: &NewToken) -> Result<TokenRecord, StoreError> {
    let hash = token.hash.to_hex();
    let existing = tx.query(
        "SELECT id FROM tokens WHERE hash = $1",
        &[Value::from(hash.as_str())],
    )?;
    if !existing.is_empty() {
        return Err(StoreError::DuplicateToken);
    }
    let id = take_ids(tx, "token", 1)?;
    tx.execute(
        "INSERT INTO tokens (id, user_name, admin, hash, created_at, revoked_at) \
         VALUES ($1, $2, $3, $4, $5, NULL)",
        &[
            Value::Int(to_i64("token id", id)?),
            Value::from(token.user.as_str()),
            Value::Bool(token.admin),
            Value::Text(hash),
            time("token creation time", token.created)?,
        ],
    )?;
    Ok(TokenRecord {
        id,
        user: token.user.clone(),
        admin: token.admin,
        hash: token.hash,
        created: token.created,
        revoked: None,
    })
}

pub(crate) fn active_token(
    tx: &mut dyn Tx,
    hash: &TokenHash,
) -> Result<Option<TokenRecord>, StoreError> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE hash = $1 AND revoked_at IS NULL");
    let rows = tx.query(&sql, &[Value::Text(hash.to_hex())])?;
    rows.first().map(token_from_row).transpose()
}

pub(crate) fn tokens(tx: &mut dyn Tx) -> Result<Vec<TokenRecord>, StoreError> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY id");
    tx.query(&sql, &[])?.iter().map(token_from_row).collect()
}

pub(crate) fn revoke_token(tx: &mut dyn Tx, id: u64, at: Time) -> Result<bool, StoreError> {
    let changed = tx.execute(
        "UPDATE tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
        &[
            Value::Int(to_i64("token id", id)?),
            time("revocation time", at)?,
        ],
    )?;
    Ok(changed > 0)
}

pub(crate) fn change_queue_objects(
    tx: &mut dyn Tx,
    put: &[QueueObjectRecord],
    delete: &[QueueObjectKey],
) -> Result<(), StoreError> {
    for k in delete {
        tx.execute(
            "DELETE FROM queue_objects WHERE kind = $1 AND namespace = $2 AND name = $3",
            &[
                Value::from(k.kind.as_str()),
                Value::from(k.namespace.as_str()),
                Value::from(k.name.as_str()),
            ],
        )?;
    }
    for o in put {
        let key = [
            Value::from(o.kind.as_str()),
            Value::from(o.namespace.as_str()),
            Value::from(o.name.as_str()),
        ];
        let replaced = tx.execute(
            "UPDATE queue_objects SET api_version = $4, manifest = $5, applied_at = $6 \
             WHERE kind = $1 AND namespace = $2 AND name = $3",
            &[
                key[0].clone(),
                key[1].clone(),
                key[2].clone(),
                Value::from(o.api_version.as_str()),
                Value::from(o.manifest.as_str()),
                time("queue object apply time", o.applied)?,
            ],
        )?;
        if replaced == 0 {
            let seq = take_ids(tx, "queue_object", 1)?;
            tx.execute(
                "INSERT INTO queue_objects \
                 (kind, namespace, name, seq, api_version, manifest, applied_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    key[0].clone(),
                    key[1].clone(),
                    key[2].clone(),
                    Value::Int(to_i64("queue object sequence", seq)?),
                    Value::from(o.api_version.as_str()),
                    Value::from(o.manifest.as_str()),
                    time("queue object apply time", o.applied)?,
                ],
            )?;
        }
    }
    Ok(())
}

pub(crate) fn queue_objects(tx: &mut dyn Tx) -> Result<Vec<QueueObjectRecord>, StoreError> {
    let rows = tx.query(
        "SELECT kind, namespace, name, api_version, manifest, applied_at FROM queue_objects \
         ORDER BY seq",
        &[],
    )?;
    rows.iter()
        .map(|row| {
            let kind = row.text(0)?.to_owned();
            let namespace = row.text(1)?.to_owned();
            let name = row.text(2)?.to_owned();
            let at = format!("queue object {kind} {namespace}/{name}");
            Ok(QueueObjectRecord {
                api_version: row.text(3)?.to_owned(),
                manifest: row.text(4)?.to_owned(),
                applied: read_time("apply time", &at, row.int(5)?)?,
                kind,
                namespace,
                name,
            })
        })
        .collect()
}

pub(crate) fn add_job_events(tx: &mut dyn Tx, events: &[JobEvent]) -> Result<(), StoreError> {
    let first = take_ids(tx, "job_event", events.len() as u64)?;
    for (i, e) in events.iter().enumerate() {
        let job = to_i64("job id", e.job.0)?;
        let known = tx.query("SELECT id FROM jobs WHERE id = $1", &[Value::Int(job)])?;
        if known.is_empty() {
            return Err(StoreError::UnknownJob { id: e.job.0 });
        }
        tx.execute(
            "INSERT INTO job_events (id, job_id, at, kind, warning, message) \
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                Value::Int(to_i64("event id", first + i as u64)?),
                Value::Int(job),
                time("event time", e.at)?,
                Value::from(e.kind.as_str()),
                Value::Bool(e.warning),
                Value::from(e.message.as_str()),
            ],
        )?;
    }
    Ok(())
}

pub(crate) fn job_events(tx: &mut dyn Tx, id: JobId) -> Result<Vec<JobEvent>, StoreError> {
    let rows = tx.query(
        "SELECT at, kind, warning, message FROM job_events WHERE job_id = $1 ORDER BY id",
        &[Value::Int(to_i64("job id", id.0)?)],
    )?;
    let at = format!("events of job {id}");
    rows.iter()
        .map(|row| {
            Ok(JobEvent {
                job: id,
                at: read_time("event time", &at, row.int(0)?)?,
                kind: row.text(1)?.to_owned(),
                warning: row.bool(2)?,
                message: row.text(3)?.to_owned(),
            })
        })
        .collect()
}

pub(crate) fn create_join_token(tx: &mut dyn Tx, token: &NewJoinToken) -> Result<(), StoreError> {
    let hash = token.hash.to_hex();
    let existing = tx.query(
        "SELECT hash FROM join_tokens WHERE hash = $1",
        &[Value::from(hash.as_str())],
    )?;
    if !existing.is_empty() {
        return Err(StoreError::DuplicateToken);
    }
    tx.execute(
        "INSERT INTO join_tokens (hash, node, created_at, expires_at, used_at, used_by) \
         VALUES ($1, $2, $3, $4, NULL, NULL)",
        &[
            Value::Text(hash),
            Value::from(token.node.as_deref()),
            time("join token creation time", token.created)?,
            time("join token expiry", token.expires)?,
        ],
    )?;
    Ok(())
}

/// Takes a join token for `cert`'s node (once, before it expires, for the node it names)
/// and records the certificate as the node's one live certificate: the node's earlier
/// ones are revoked in the same transaction.
pub(crate) fn join_token_node(
    tx: &mut dyn Tx,
    hash: &TokenHash,
) -> Result<Option<String>, StoreError> {
    let rows = tx.query(
        "SELECT node FROM join_tokens WHERE hash = $1",
        &[Value::Text(hash.to_hex())],
    )?;
    match rows.first() {
        Some(row) => Ok(row.opt_text(0)?.map(str::to_owned)),
        None => Ok(None),
    }
}

pub(crate) fn enrol_node(
    tx: &mut dyn Tx,
    hash: &TokenHash,
    cert: &NodeCertRecord,
) -> Result<Result<(), JoinRefused>, StoreError> {
    let at = cert.issued;
    let rows = tx.query(
        "SELECT node, expires_at, used_at FROM join_tokens WHERE hash = $1",
        &[Value::Text(hash.to_hex())],
    )?;
    let Some(row) = rows.first() else {
        return Ok(Err(JoinRefused::Unknown));
    };
    let row_name = "join token";
    if row.opt_int(2)?.is_some() {
        return Ok(Err(JoinRefused::Used));
    }
    if read_time("join token expiry", row_name, row.int(1)?)? <= at {
        return Ok(Err(JoinRefused::Expired));
    }
    match row.opt_text(0)? {
        Some(node) if node != cert.node => {
            return Ok(Err(JoinRefused::OtherNode(node.to_owned())));
        }
        Some(_) => {}
        None => {
            let live = tx.query(
                "SELECT serial FROM node_certs WHERE node = $1 AND revoked_at IS NULL AND expires_at > $2",
                &[Value::from(cert.node.as_str()), time("enrolment time", at)?],
            )?;
            if !live.is_empty() {
                return Ok(Err(JoinRefused::Enrolled(cert.node.clone())));
            }
        }
    }
    let taken = tx.execute(
        "UPDATE join_tokens SET used_at = $2, used_by = $3 WHERE hash = $1 AND used_at IS NULL",
        &[
            Value::Text(hash.to_hex()),
            time("join token use", at)?,
            Value::from(cert.node.as_str()),
        ],
    )?;
    if taken == 0 {
        return Ok(Err(JoinRefused::Used));
    }
    tx.execute(
        "UPDATE node_certs SET revoked_at = $2 WHERE node = $1 AND revoked_at IS NULL",
        &[
            Value::from(cert.node.as_str()),
            time("revocation time", at)?,
        ],
    )?;
    tx.execute(
        "INSERT INTO node_certs (serial, node, issued_at, expires_at, revoked_at) \
         VALUES ($1, $2, $3, $4, NULL)",
        &[
            Value::from(cert.serial.as_str()),
            Value::from(cert.node.as_str()),
            time("certificate issue time", cert.issued)?,
            time("certificate expiry", cert.expires)?,
        ],
    )?;
    Ok(Ok(()))
}

const NODE_CERT_COLUMNS: &str = "serial, node, issued_at, expires_at, revoked_at";

fn node_cert_from_row(row: &Row) -> Result<NodeCertRecord, StoreError> {
    let serial = row.text(0)?.to_owned();
    let at = format!("node certificate {serial}");
    Ok(NodeCertRecord {
        node: row.text(1)?.to_owned(),
        issued: read_time("issue time", &at, row.int(2)?)?,
        expires: read_time("expiry", &at, row.int(3)?)?,
        revoked: read_opt_time("revocation time", &at, row.opt_int(4)?)?,
        serial,
    })
}

pub(crate) fn node_cert(
    tx: &mut dyn Tx,
    serial: &str,
) -> Result<Option<NodeCertRecord>, StoreError> {
    let sql = format!("SELECT {NODE_CERT_COLUMNS} FROM node_certs WHERE serial = $1");
    let rows = tx.query(&sql, &[Value::from(serial)])?;
    rows.first().map(node_cert_from_row).transpose()
}

pub(crate) fn node_certs(tx: &mut dyn Tx) -> Result<Vec<NodeCertRecord>, StoreError> {
    let sql = format!("SELECT {NODE_CERT_COLUMNS} FROM node_certs ORDER BY node, issued_at");
    tx.query(&sql, &[])?
        .iter()
        .map(node_cert_from_row)
        .collect()
}

pub(crate) fn revoke_node_certs(tx: &mut dyn Tx, node: &str, at: Time) -> Result<u64, StoreError> {
    tx.execute(
        "UPDATE node_certs SET revoked_at = $2 WHERE node = $1 AND revoked_at IS NULL",
        &[Value::from(node), time("revocation time", at)?],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::Dialect;
    use cadre_core::job::JobSpec;
    use cadre_core::resources::TaskResources;
    use cadre_core::time::Dur;
    use std::collections::BTreeSet;

    /// A transaction that keeps the SQL it is given and answers as a database in which
    /// every job exists and every counter is at 1.
    #[derive(Default)]
    struct RecordingTx {
        texts: BTreeSet<String>,
    }

    impl Tx for RecordingTx {
        fn dialect(&self) -> Dialect {
            Dialect::Sqlite
        }
        fn execute(&mut self, sql: &str, _: &[Value]) -> Result<u64, StoreError> {
            self.texts.insert(sql.to_owned());
            Ok(1)
        }
        fn query(&mut self, sql: &str, _: &[Value]) -> Result<Vec<Row>, StoreError> {
            self.texts.insert(sql.to_owned());
            Ok(vec![Row(vec![Value::Int(1)])])
        }
        fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
            self.texts.insert(sql.to_owned());
            Ok(())
        }
    }

    fn texts(f: impl FnOnce(&mut dyn Tx) -> Result<(), StoreError>) -> BTreeSet<String> {
        let mut tx = RecordingTx::default();
        if let Err(e) = f(&mut tx) {
            panic!("recording transaction failed: {e}");
        }
        tx.texts
    }

    fn submission(user: &str, env_vars: usize) -> NewJob {
        let mut run = RunSpec::command(vec!["true".into()], "/tmp".into());
        run.env = (0..env_vars)
            .map(|i| (format!("V{i}"), "x".into()))
            .collect();
        NewJob {
            spec: JobSpec::simple(user, "a", 1, TaskResources::default(), Dur::hours(1)),
            run,
            partition: "p".into(),
            array_of: None,
        }
    }

    fn change(id: u64, state: JobState, ended: bool) -> JobChange {
        JobChange {
            id: JobId(id),
            status: JobStatus {
                state,
                ..JobStatus::submitted()
            },
            ended_run: ended.then(|| RunUsage {
                gpu_milli: id * 1000,
                cpus: id,
                nodes: format!("node{id:03}"),
            }),
        }
    }

    /// Both backends prepare a statement once per connection and find it again by its SQL
    /// text. A text that varied with the batch's size or its values (a multi-row INSERT,
    /// an id formatted in) would be parsed and planned again at every call on the paths
    /// the controller takes most often.
    #[test]
    fn submissions_and_changes_reuse_the_same_statement_texts() {
        let one = texts(|tx| submit_batch(tx, &[submission("u", 0)], &[]).map(drop));
        let many: Vec<NewJob> = (0..64).map(|i| submission(&format!("u{i}"), i)).collect();
        assert_eq!(texts(|tx| submit_batch(tx, &many, &[]).map(drop)), one);
        assert_eq!(one.len(), 2, "{one:#?}");

        let first = texts(|tx| record(tx, &[change(1, JobState::Completed, true)]));
        let changes: Vec<JobChange> = (1..40)
            .map(|i| {
                let state = [JobState::Running, JobState::Failed][usize::from(i % 2 == 0)];
                change(i, state, i % 3 == 0)
            })
            .collect();
        assert_eq!(texts(|tx| record(tx, &changes)), first);
        assert_eq!(first.len(), 2, "{first:#?}");
    }
}
