//! The Pollux (OSDI'21) evaluation workloads: `name,time,application,num_replicas,batch_size`,
//! 160 jobs each, arrivals sampled from Philly, six training applications.
//!
//! The rows carry no run times: Pollux's simulator derives progress from measured throughput
//! and statistical-efficiency traces of each application. For a rigid job (fixed replicas
//! and batch size, as its Tiresias baseline runs them) the run time depends only on the
//! application, the replicas and the batch size, and the workloads use 16 such
//! configurations. [`pollux_duration`] holds one run time per configuration, taken from
//! the published results of the Pollux artefact rather than recomputed (see below); a row
//! whose configuration is not in the table is an error naming the line.
//!
//! # Where the run times come from, and how good they are
//! The artefact (petuum/adaptdl, `simulator/`) ships the per-job completion times (JCTs)
//! its simulator produced for the Tiresias policy on the eight 1.0x workloads
//! (`results-jobload/tiresias-1.0/summary.json`). In that simulator a job submitted at `t`
//! is first considered at the next 60 s scheduling tick, then spends a fixed 30 s
//! (re)start delay, then trains. So for a job that found the cluster free,
//! `JCT = wait for the tick (0..60 s) + 30 s + run time`. For each configuration the value
//! below is the shortest JCT found for that configuration, minus the 30 s start delay. The
//! JCTs were read for 3 to 35 jobs of each configuration (the early, lightly loaded part of
//! the workloads, and every imagenet job), not all 1,280; a JCT never falls below the run
//! time plus 30 s, so an unread job could lower a value by less than the 60 s tick.
//!
//! - For 13 of the 16 configurations the lowest JCTs lie within 60 s of one another (e.g.
//!   cifar10 at 16 replicas: 515, 516, 522, 523, 525 s), the signature of uncontended runs
//!   that differ only by the tick: the run time is within about +60 s of the value
//!   (expected error about 60/(n+1) s for n such jobs).
//! - imagenet (24, 32, 48 replicas) never ran uncontended: Tiresias demotes a job after 16
//!   GPU-hours of service (20 minutes at 48 GPUs) and it is then preempted by newer jobs; its
//!   lowest JCTs are spread over thousands of seconds and grow with the replicas, which a
//!   free cluster would not do. Those three values are upper bounds, possibly by tens of
//!   per cent; treat imagenet run times as rough.
//! - Pollux's own throughput models (measured step times interpolated over placements and
//!   batch sizes, on 4-GPU nodes) are what these JCTs rest on; a job placed differently in
//!   cadre (e.g. 8-GPU nodes) would in reality run at a somewhat different speed.
//!
//! Jobs: `time` is the submit time (seconds), `num_replicas` GPUs make the gang
//! ([`super::rows::gpu_job`]), `name` is the job name; every job is user `pollux` in account
//! `pollux` (the workloads have no users). `batch_size` only selects the run time.

use super::rows::{self, RawJob};
use super::{ImportOptions, TraceError, TraceJob};
use cadre_core::time::Dur;

pub(crate) const COLUMNS: [&str; 5] = ["name", "time", "application", "num_replicas", "batch_size"];

/// `(application, replicas, batch size, run time in seconds)` of rigid Pollux jobs; see the
/// module documentation for the source and the accuracy.
const RIGID_RUN_TIMES: [(&str, u32, u64, u64); 16] = [
    ("bert", 6, 384, 3114),
    ("bert", 8, 384, 2504),
    ("bert", 12, 384, 1601),
    ("bert", 16, 384, 1331),
    ("cifar10", 6, 2048, 911),
    ("cifar10", 8, 2048, 870),
    ("cifar10", 12, 4096, 624),
    ("cifar10", 16, 4096, 485),
    ("deepspeech2", 6, 320, 4152),
    ("deepspeech2", 8, 320, 3544),
    ("deepspeech2", 12, 640, 2506),
    // Upper bounds: no uncontended run was observed (see the module documentation).
    ("imagenet", 24, 3200, 36_704),
    ("imagenet", 32, 6400, 41_971),
    ("imagenet", 48, 6400, 49_555),
    ("ncf", 1, 32768, 47),
    ("yolov3", 4, 64, 14_105),
];

/// The run time of a rigid Pollux job of `application` at `replicas` GPUs and a total batch
/// size of `batch_size`, if the workloads use that configuration.
pub fn pollux_duration(application: &str, replicas: u32, batch_size: u64) -> Option<Dur> {
    RIGID_RUN_TIMES
        .iter()
        .find(|(a, r, b, _)| *a == application && *r == replicas && *b == batch_size)
        .map(|&(_, _, _, secs)| Dur(secs))
}

pub(crate) fn import(
    text: &str,
    origin: &str,
    opts: &ImportOptions,
) -> Result<Vec<TraceJob>, TraceError> {
    rows::check_options(opts, origin)?;
    let rows = rows::rows(text, origin, &COLUMNS)?;
    let mut jobs = Vec::with_capacity(rows.len());
    for row in &rows {
        let name = row.name(0)?;
        let submit = row.u64(1)?;
        let app = row.name(2)?;
        let replicas = row.positive_u32(3)?;
        let batch = row.u64(4)?;
        let duration = pollux_duration(app, replicas, batch).ok_or_else(|| {
            row.error(
                2,
                format_args!(
                    "no run time is known for `{app}` at {replicas} replicas and batch size \
                     {batch} (Pollux workloads carry no durations; see docs/trace-formats.md \
                     for the configurations cadre knows)"
                ),
            )
        })?;
        let spec = rows::gpu_job(
            name.to_string(),
            "pollux",
            "pollux",
            replicas,
            duration,
            opts,
        );
        jobs.push(RawJob {
            submit,
            duration,
            spec,
        });
    }
    Ok(rows::finish(jobs))
}
