//! The records the store keeps and hands back: jobs and their changes, nodes, accounting
//! rows, fair-share usage and API tokens. Plain data; the SQL lives in the `ops` module.

use cadre_core::alloc::Allocation;
use cadre_core::cluster::NodeAvail;
use cadre_core::job::{JobId, JobSpec, JobState};
use cadre_core::run::RunSpec;
use cadre_core::scheduler::PendingReason;
use cadre_core::time::Time;
use sha2::{Digest, Sha256};
use std::fmt;

/// A submission's idempotency key, committed with its jobs ([`crate::Store::submit_batch_keyed`]):
/// the request of `user` whose jobs are `count` jobs of the batch from position `first`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSubmitKey {
    pub user: String,
    pub key: String,
    pub first: usize,
    pub count: usize,
}

/// A committed submission's idempotency key: its request's jobs are `count` ids from
/// `first` (a request's jobs get consecutive ids).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitKey {
    pub user: String,
    pub key: String,
    pub first: JobId,
    pub count: u64,
    pub at: Time,
}

/// A submission, before the store has given it an id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewJob {
    pub spec: JobSpec,
    /// What the job runs. Kept beside the spec but read back only on its own
    /// ([`crate::Store::run_spec`]): it holds the submitter's whole environment.
    pub run: RunSpec,
    /// The partition the controller resolved: the spec's, or the cluster's default.
    pub partition: String,
    /// For a task of an array submitted in this batch: the position in the batch of the
    /// array's first task, whose id becomes the array's id (`spec.array.array_job`, as
    /// Slurm's array id is its first task's). The submitter cannot know that id before
    /// the commit.
    pub array_of: Option<usize>,
}

impl NewJob {
    /// Sets `spec.array.array_job` from `array_of` and the batch's ids: what the store
    /// commits and what the controller must then tell its scheduler.
    pub fn resolve_array(&mut self, batch_ids: &[JobId]) {
        if let (Some(pos), Some(array)) = (self.array_of, self.spec.array.as_mut())
            && let Some(&id) = batch_ids.get(pos)
        {
            array.array_job = id;
        }
    }
}

/// A job as the store keeps it: the spec it was submitted with and its latest recorded state.
/// Not what it runs: listing many jobs must not load every job's environment; ask
/// [`crate::Store::run_spec`] for that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredJob {
    pub id: JobId,
    pub spec: JobSpec,
    pub partition: String,
    pub status: JobStatus,
}

/// The part of a job that changes over its life. A [`JobChange`] replaces it whole, so
/// recording the same change twice is harmless.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobStatus {
    pub state: JobState,
    /// Why the job is pending (meaningful while it is).
    pub reason: PendingReason,
    /// When the job last started.
    pub start_time: Option<Time>,
    /// When the job ended (not its limit).
    pub end_time: Option<Time>,
    /// Where the job runs or last ran.
    pub allocation: Option<Allocation>,
    pub exit_code: Option<i32>,
    /// How many times the job went back to the queue.
    pub requeues: u32,
}

impl JobStatus {
    /// The status of a job just submitted.
    pub fn submitted() -> JobStatus {
        JobStatus {
            state: JobState::Pending,
            reason: PendingReason::None,
            start_time: None,
            end_time: None,
            allocation: None,
            exit_code: None,
            requeues: 0,
        }
    }

    /// The status `spec` is stored with at submission: [`JobStatus::submitted`], held by
    /// its user if the spec asks to be. A restarted controller reads the hold from the
    /// stored reason, so a held submission must be stored held.
    pub fn submitted_as(spec: &JobSpec) -> JobStatus {
        JobStatus {
            reason: if spec.hold {
                PendingReason::JobHeldUser
            } else {
                PendingReason::None
            },
            ..JobStatus::submitted()
        }
    }
}

/// A job's new status, to be committed before the controller acts on it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobChange {
    pub id: JobId,
    pub status: JobStatus,
    /// When the change ends a run of the job (it ends, or is requeued), what that run held:
    /// the store writes the accounting row for `sacct` in the same transaction.
    pub ended_run: Option<RunUsage>,
}

/// What one run of a job held, for accounting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunUsage {
    /// Milli-GPUs held (1000 per whole GPU).
    pub gpu_milli: u64,
    pub cpus: u64,
    /// The nodes as a Slurm hostlist (`node[001-004]`), empty if it never ran.
    pub nodes: String,
}

/// Which jobs to list. Jobs come in ascending id order; page with `after` and `limit`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Any of these states; empty: every state.
    pub states: Vec<JobState>,
    pub user: Option<String>,
    pub account: Option<String>,
    pub partition: Option<String>,
    /// Only ids above this one (the last id of the previous page).
    pub after: Option<JobId>,
    /// At most this many jobs.
    pub limit: Option<u32>,
}

/// A Kubernetes queue object as applied (Kueue's ResourceFlavor, ClusterQueue, LocalQueue,
/// Topology; Volcano's Queue), kept as its manifest: the store does not read it. Named by
/// kind, namespace (empty for cluster-scoped kinds) and name, like `kubectl apply` names
/// objects: putting one of an existing name replaces it and keeps its place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueObjectRecord {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub api_version: String,
    /// The object as JSON text.
    pub manifest: String,
    pub applied: Time,
}

/// The name of a [`QueueObjectRecord`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueueObjectKey {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl QueueObjectRecord {
    pub fn key(&self) -> QueueObjectKey {
        QueueObjectKey {
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// Something that happened to a job, as `cadre describe` lists it (Kubernetes' events):
/// `kind` is a one-word reason (`Submitted`, `Started`, `TasksFailed`, ...), `warning`
/// marks the ones Kubernetes would show as `Warning`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEvent {
    pub job: JobId,
    pub at: Time,
    pub kind: String,
    pub warning: bool,
    pub message: String,
}

/// A node as the store keeps it.
/// One job step: the tasks one `srun` launched inside a job's allocation, for `squeue -s`
/// and `sacct`. Written when the step starts and again when it ends (the same row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRecord {
    pub job: JobId,
    /// The step's number in its job: 0, 1, ... in the order the steps were created.
    pub step: u32,
    pub name: String,
    /// RUNNING until the step ends, then its final state.
    pub state: JobState,
    /// The step's nodes as a Slurm hostlist.
    pub nodes: String,
    pub ntasks: u32,
    pub cpus: u64,
    pub start_time: Time,
    pub end_time: Option<Time>,
    pub exit_code: Option<i32>,
    /// The program and its arguments, joined by spaces (for display).
    pub command: String,
}

/// Which steps to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepFilter {
    /// Only the steps of these jobs; empty: of every job.
    pub jobs: Vec<JobId>,
    /// Only steps that have not ended.
    pub unfinished: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRecord {
    pub name: String,
    pub avail: NodeAvail,
    /// Why it is drained or down, as the administrator or agent said.
    pub reason: Option<String>,
    /// Its GPUs are declared (`--gpus-per-node`), not discovered.
    pub emulated_gpus: bool,
    pub updated: Time,
}

/// One run of a job for `sacct`: a job requeued twice has three rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountingRecord {
    pub job: JobId,
    /// The run's position: the job's requeue count when it ended.
    pub run: u32,
    pub name: String,
    pub user: String,
    pub account: String,
    pub partition: String,
    pub submit_time: Time,
    pub start_time: Option<Time>,
    pub end_time: Time,
    pub state: JobState,
    pub exit_code: Option<i32>,
    pub usage: RunUsage,
}

/// Which accounting rows to list, in (job, run) order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountingFilter {
    pub user: Option<String>,
    pub account: Option<String>,
    pub partition: Option<String>,
    /// Any of these end states; empty: all.
    pub states: Vec<JobState>,
    /// Runs that ended at or after this time (`sacct -S`).
    pub ended_since: Option<Time>,
    /// Runs that ended before this time (`sacct -E`).
    pub ended_before: Option<Time>,
    /// Only jobs above this id.
    pub after: Option<JobId>,
    pub limit: Option<u32>,
}

/// The decayed fair-share usage of one user association.
#[derive(Clone, Debug, PartialEq)]
pub struct AssocUsage {
    pub user: String,
    pub account: String,
    /// Decayed billing-unit-seconds.
    pub raw_usage: f64,
    /// The time the decay was applied up to.
    pub as_of: Time,
}

/// The SHA-256 of an API token. Tokens are random and long, so a fast hash is enough to
/// make a leaked table useless; the token itself is never stored.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The hash of `token` as the client sends it.
    pub fn of(token: &str) -> TokenHash {
        TokenHash(Sha256::digest(token.as_bytes()).into())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hexadecimal, as stored.
    pub fn to_hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(64);
        for b in self.0 {
            out.push(char::from(DIGITS[usize::from(b >> 4)]));
            out.push(char::from(DIGITS[usize::from(b & 0xf)]));
        }
        out
    }

    pub fn from_hex(text: &str) -> Option<TokenHash> {
        let bytes = text.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = char::from(pair[0]).to_digit(16)?;
            let lo = char::from(pair[1]).to_digit(16)?;
            out[i] = u8::try_from(hi * 16 + lo).ok()?;
        }
        Some(TokenHash(out))
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenHash({})", self.to_hex())
    }
}

/// A token to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewToken {
    pub user: String,
    pub admin: bool,
    pub hash: TokenHash,
    pub created: Time,
}

/// A one-time token a node enrols with (`cadre node token create`); only its hash is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewJoinToken {
    pub hash: TokenHash,
    /// The one node it enrols; `None`: any node of the cluster.
    pub node: Option<String>,
    pub created: Time,
    pub expires: Time,
}

/// A node's certificate as the store records it (never the certificate's key, which
/// stays on the node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCertRecord {
    /// The certificate's serial number, in hexadecimal.
    pub serial: String,
    pub node: String,
    pub issued: Time,
    pub expires: Time,
    pub revoked: Option<Time>,
}

/// Why a join token does not enrol a node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JoinRefused {
    #[error("the join token is not known")]
    Unknown,
    #[error("the join token was used already")]
    Used,
    #[error("the join token expired")]
    Expired,
    #[error("the join token is for node `{0}`")]
    OtherNode(String),
    /// A token for any node does not replace a node's live certificate: enrolling an
    /// enrolled node again takes a token made for it.
    #[error(
        "node `{0}` is enrolled already: enrolling it again takes a join token made for it (cadre node token create --node {0})"
    )]
    Enrolled(String),
}

/// A token as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: u64,
    pub user: String,
    pub admin: bool,
    pub hash: TokenHash,
    pub created: Time,
    pub revoked: Option<Time>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_hash_is_sha256_and_round_trips_through_hex() {
        let h = TokenHash::of("abc");
        assert_eq!(
            h.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(TokenHash::from_hex(&h.to_hex()), Some(h));
        assert_eq!(TokenHash::from_hex("ba78"), None);
        assert_eq!(TokenHash::from_hex(&"zz".repeat(32)), None);
    }
}
