//! What every request handler shares.

use crate::auth::Authenticator;
use crate::engine::{ApiError, EngineHandle};
use crate::metrics::Metrics;
use cadre_proto::api::ErrorCode;
use cadre_store::{Store, StoreError};
use std::sync::{Arc, Mutex};

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

/// A store handle used only on blocking threads: the PostgreSQL client blocks on a runtime
/// of its own, so it must neither run nor be dropped on the async runtime's threads.
#[derive(Clone)]
pub struct ReadStore(Arc<Mutex<Option<Box<dyn Store>>>>);

impl ReadStore {
    pub fn new(store: Box<dyn Store>) -> ReadStore {
        ReadStore(Arc::new(Mutex::new(Some(store))))
    }

    /// Runs `f` on the handle, on a blocking thread.
    pub async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let inner = self.0.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = inner
                .lock()
                .map_err(|_| ApiError::new(ErrorCode::Internal, "store handle poisoned"))?;
            let store = guard.as_mut().ok_or_else(|| {
                ApiError::new(ErrorCode::Unavailable, "the controller is shutting down")
            })?;
            f(store.as_mut()).map_err(ApiError::from)
        })
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?
    }

    /// Closes the handle, on a blocking thread.
    pub async fn close(&self) {
        let inner = self.0.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if let Ok(mut guard) = inner.lock() {
                drop(guard.take());
            }
        })
        .await;
    }
}
