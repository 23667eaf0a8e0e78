//! Traces: jobs as they arrived on a real cluster, with the run times they really had.
//!
//! Every importer turns its format into [`TraceJob`]s: a submit time and an actual duration
//! (what the trace recorded), and a [`JobSpec`] for the scheduler whose time limit is a
//! documented function of that duration ([`ImportOptions::time_limit_factor`]): traces carry
//! run times, not the limits users gave, and backfill needs limits.

pub mod openb;

use cadre_core::job::JobSpec;
use cadre_core::time::{Dur, Time};
use serde::{Deserialize, Serialize};

/// One job of a trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceJob {
    /// When the job arrives, in seconds from the start of the trace.
    pub submit: Time,
    /// How long the job really runs once started.
    pub duration: Dur,
    /// What the job asks of the scheduler; `spec.submit_time` equals `submit`.
    pub spec: JobSpec,
}

/// How traces become jobs.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportOptions {
    /// GPUs per node of the simulated cluster: a job asking for more becomes a multi-node
    /// gang of whole-node tasks.
    pub gpus_per_node: u32,
    /// Time limit = duration x this factor, rounded up to whole minutes (at least one).
    pub time_limit_factor: f64,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            gpus_per_node: 8,
            time_limit_factor: DEFAULT_TIME_LIMIT_FACTOR,
        }
    }
}

/// Users over-estimate their run times; studies of HPC logs find requested limits of a few
/// times the actual run time on average. 2x is a moderate, documented default.
pub const DEFAULT_TIME_LIMIT_FACTOR: f64 = 2.0;

impl ImportOptions {
    /// The time limit of a job that really runs for `duration`.
    pub fn time_limit(&self, duration: Dur) -> Dur {
        let secs = (duration.0 as f64 * self.time_limit_factor).ceil() as u64;
        Dur(secs.div_ceil(60).max(1) * 60)
    }
}

/// Errors of reading a trace: which file, which line, what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("failed to read trace {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{origin}:{line}: {what}")]
    Line {
        origin: String,
        line: usize,
        what: String,
    },
    #[error("{origin}: {what}")]
    File { origin: String, what: String },
}
