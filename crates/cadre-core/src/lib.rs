//! cadre-core: the model and the scheduler. Pure, synchronous, deterministic.

pub mod alloc;
pub mod cluster;
pub mod config;
pub mod fairshare;
pub mod hostlist;
pub mod job;
pub mod placement;
pub mod policy;
pub mod priority;
pub mod quota;
pub mod resources;
pub mod time;
