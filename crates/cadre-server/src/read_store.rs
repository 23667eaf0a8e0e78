//! The store handle for reads of the durable record (and token writes), apart from the
//! engine's writer ([`ReadStore`]).
//!
//! A module of its own because authentication reads tokens through it and the handlers'
//! shared state ([`crate::state`]) holds both.

use crate::api_error::ApiError;
use cadre_proto::api::ErrorCode;
use cadre_store::{Store, StoreError};
use std::sync::{Arc, Mutex};

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
