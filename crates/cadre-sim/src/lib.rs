//! cadre-sim: replays GPU-cluster traces through the very scheduling core the controller
//! runs (`cadre-core`), with simulated time; compares policies; reports and plots.
//!
//! - [`trace`]: importers of real traces (Philly, Alibaba openb, Tiresias, Pollux) and of
//!   cadre's own JSON-lines format, into [`trace::TraceJob`]s.
//! - [`engine`]: the discrete-event replay.
//! - [`report`]: what a replay measured.

pub mod engine;
pub mod report;
pub mod trace;
