//! cadre-sim: replays GPU-cluster traces through the very scheduling core the controller
//! runs (`cadre-core`), with simulated time; compares policies; reports and plots.
//!
//! - [`trace`]: importers of real traces (Philly, Alibaba openb, Tiresias, Pollux) and of
//!   cadre's own JSON-lines format, into [`trace::TraceJob`]s.
//! - [`engine`]: the discrete-event replay.
//! - [`report`]: what a replay measured; [`plot`]: the picture of several replays.
//! - [`synthetic`]: seeded synthetic traces of any size.
//! - [`packing`]: the arrival-only packing protocol of the FGD paper (GPU allocation rate
//!   when the arrived demand reaches the cluster's capacity).

pub mod engine;
pub mod packing;
pub mod plot;
pub mod report;
pub mod synthetic;
pub mod trace;
