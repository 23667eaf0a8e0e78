//! cadre-sim: replays GPU-cluster traces through the very scheduling core the controller
//! runs (`cadre-core`), with simulated time; compares policies; reports and plots.
//!
//! - [`trace`]: importers of real traces (Philly, Alibaba openb, Tiresias, Pollux) and of
//!   cadre's own JSON-lines format, into [`trace::TraceJob`]s.

pub mod trace;
