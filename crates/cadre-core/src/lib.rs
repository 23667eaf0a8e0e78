//! cadre-core: the model and the scheduler. Pure, synchronous, deterministic.
//!
//! (The full statement of the scheduling problem is written below once the model lands.)

pub mod fairshare;
