//! cadre-sim: replays GPU-cluster traces through the very scheduling core the controller
//! runs (`cadre-core`), with simulated time; compares policies; reports and plots.
//!
//! - [`trace`]: importers of real traces (Philly, Alibaba openb, Tiresias, Pollux) and of
//!   cadre's own JSON-lines format, into [`trace::TraceJob`]s.
//! - [`packing`]: the arrival-only packing protocol of the FGD paper (GPU allocation rate
//!   when the arrived demand reaches the cluster's capacity).

pub mod packing;
pub mod trace;
