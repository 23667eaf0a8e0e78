//! What every request handler shares.

use crate::auth::Authenticator;
use crate::engine::EngineHandle;
use crate::metrics::Metrics;
use crate::read_store::ReadStore;
use std::sync::Arc;

#[derive(Clone)]
pub struct AppState {
    pub engine: EngineHandle,
    pub auth: Arc<Authenticator>,
    /// A store handle for reads of the durable record (and token writes), apart from the
    /// engine's writer so that long lists never stall scheduling.
    pub reads: ReadStore,
    pub metrics: Arc<Metrics>,
}

/// A fresh random secret: `prefix` and 64 hexadecimal digits (256 bits from the OS).
pub fn random_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    // The OS's random source does not fail on Linux once booted; a failure here would make
    // every secret predictable, so it must not be ignored.
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    let mut out = String::with_capacity(prefix.len() + 64);
    out.push_str(prefix);
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}
