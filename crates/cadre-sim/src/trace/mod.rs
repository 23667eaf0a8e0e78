//! Traces: jobs as they arrived on a real cluster, with the run times they really had.
//!
//! Every importer turns its format into [`TraceJob`]s: a submit time and an actual duration
//! (what the trace recorded), and a [`JobSpec`] for the scheduler whose time limit is a
//! documented function of that duration ([`ImportOptions::time_limit_factor`]): traces carry
//! run times, not the limits users gave, and backfill needs limits.

pub mod openb;

use cadre_core::cluster::Cluster;
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

mod cadre;
mod philly;
mod pollux;
mod rows;
mod tiresias;

pub use cadre::write_jsonl;
pub use philly::parse_timestamp;
pub use pollux::pollux_duration;
pub use rows::{CPUS_PER_GPU, MEM_MIB_PER_GPU};
pub use tiresias::{
    TIRESIAS_GPU_MEMORY, TIRESIAS_GPU_MODEL, tiresias_cluster, tiresias_cluster_file,
};

use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// The trace formats cadre reads (see docs/trace-formats.md).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TraceFormat {
    /// Microsoft Philly job list as prepared by Pollux: `timestamp,duration,num_gpus,...`.
    Philly,
    /// Alibaba GPU cluster 2023 ("openb") pod lists: `name,cpu_milli,memory_mib,num_gpu,...`.
    Openb,
    /// Tiresias simulator job traces: `job_id,num_gpu,submit_time,...`.
    Tiresias,
    /// Pollux evaluation workloads: `name,time,application,num_replicas,batch_size`.
    Pollux,
    /// cadre's own JSON lines: `{"submit": .., "duration": .., "spec": {..}}`.
    Cadre,
}

impl TraceFormat {
    /// Every format, in the order of [`TraceFormat`].
    pub const ALL: [TraceFormat; 5] = [
        TraceFormat::Philly,
        TraceFormat::Openb,
        TraceFormat::Tiresias,
        TraceFormat::Pollux,
        TraceFormat::Cadre,
    ];

    /// The name used on command lines and in messages.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Philly => "philly",
            TraceFormat::Openb => "openb",
            TraceFormat::Tiresias => "tiresias",
            TraceFormat::Pollux => "pollux",
            TraceFormat::Cadre => "cadre",
        }
    }

    /// The leading header columns that identify a CSV format.
    fn header_prefix(self) -> Option<&'static [&'static str]> {
        match self {
            TraceFormat::Philly => Some(&philly::COLUMNS),
            TraceFormat::Openb => {
                Some(&["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"])
            }
            TraceFormat::Tiresias => Some(&tiresias::COLUMNS),
            TraceFormat::Pollux => Some(&pollux::COLUMNS),
            TraceFormat::Cadre => None,
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A trace format name that is none of cadre's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown trace format `{0}`; expected one of philly, openb, tiresias, pollux, cadre")]
pub struct UnknownTraceFormat(pub String);

impl FromStr for TraceFormat {
    type Err = UnknownTraceFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TraceFormat::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownTraceFormat(s.to_string()))
    }
}

/// The format of a trace whose first line is `header`: a CSV header whose leading columns
/// are those of a format, or a JSON object (cadre's format). `None` if neither.
pub fn detect(header: &str) -> Option<TraceFormat> {
    let header = header.strip_prefix('\u{feff}').unwrap_or(header).trim();
    if header.starts_with('{') {
        return Some(TraceFormat::Cadre);
    }
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    TraceFormat::ALL.into_iter().find(|f| {
        f.header_prefix()
            .is_some_and(|want| columns.len() >= want.len() && columns[..want.len()] == *want)
    })
}

/// A cluster from a trace's own node list: the Alibaba openb node CSV
/// (`sn,cpu_milli,memory_mib,gpu,model`) or a Tiresias cluster spec
/// (`num_switch,num_node_p_switch,...`), told apart by the header. `None` for any other file.
pub fn trace_cluster(text: &str, origin: &str) -> Option<Result<Cluster, TraceError>> {
    let header = text
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .trim_start_matches('\u{feff}');
    if header.starts_with("sn,") {
        Some(openb::openb_cluster(text, origin))
    } else if header.starts_with("num_switch,") {
        Some(tiresias_cluster(text, origin))
    } else {
        None
    }
}

/// Reads the trace at `path` in `format`, or in the format its first line shows.
pub fn import_file(
    path: &Path,
    format: Option<TraceFormat>,
    opts: &ImportOptions,
) -> Result<Vec<TraceJob>, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Read {
        path: path.display().to_string(),
        source,
    })?;
    import_str(&text, &path.display().to_string(), format, opts)
}

/// Reads a trace from `text`; `origin` names it in errors (a path, or `<inline>`). Jobs come
/// out sorted by submit time (trace order among equal times), shifted so that the first
/// submit is 0.
pub fn import_str(
    text: &str,
    origin: &str,
    format: Option<TraceFormat>,
    opts: &ImportOptions,
) -> Result<Vec<TraceJob>, TraceError> {
    let format = match format {
        Some(f) => f,
        None => {
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            detect(first).ok_or_else(|| TraceError::File {
                origin: origin.to_string(),
                what: format!(
                    "cannot tell the trace format from its first line `{}`; name the format \
                     (philly, openb, tiresias, pollux or cadre)",
                    first.chars().take(80).collect::<String>()
                ),
            })?
        }
    };
    match format {
        TraceFormat::Philly => philly::import(text, origin, opts),
        TraceFormat::Tiresias => tiresias::import(text, origin, opts),
        TraceFormat::Pollux => pollux::import(text, origin, opts),
        TraceFormat::Cadre => cadre::import(text, origin, opts),
        TraceFormat::Openb => openb::import(text, origin, opts),
    }
}
