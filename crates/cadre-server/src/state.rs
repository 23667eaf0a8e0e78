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
    /// The dashboard's sessions and live updates.
    pub dashboard: Arc<crate::dashboard::Dashboard>,
    /// TLS on the TCP address, whose CA signs nodes' certificates at enrolment.
    pub tls: Option<Arc<crate::TlsSetup>>,
    /// Nodes whose certificates were just revoked: their agents' connections close.
    pub revoked: tokio::sync::broadcast::Sender<String>,
    /// How long an agent's connection may stay silent (the agents' lease).
    pub agent_silence: std::time::Duration,
    /// What this controller is (`GET /status`).
    pub status: cadre_proto::api::ControllerStatus,
}

pub use crate::auth::random_secret;
