//! cadre-core: the model and the scheduler. Pure, synchronous, deterministic.

pub mod alloc;
pub mod cluster;
pub mod job;
pub mod placement;
pub mod resources;
pub mod time;
