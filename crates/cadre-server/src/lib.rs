//! cadre-server: the controller. The REST API under `/api/v1` (with its OpenAPI document),
//! authentication, the scheduling loop and its durable record, dispatch to node agents over
//! the agent protocol, and metrics at `/metrics`.
//!
//! The parts:
//! - [`controller`]: the controller's logic, a synchronous state machine without I/O or
//!   clock: inputs (API commands, agent messages, the end of each batch) in, effects out
//!   through [`controller::Comm`], every change committed before it is acted on or
//!   answered; [`engine`]: the I/O shell, one thread that owns the controller, the store's
//!   writer handle and the agents' connections, and feeds it the commands on its channel;
//! - [`api`]: the HTTP handlers; [`auth`]: who is calling; [`agents`]: the agents'
//!   WebSocket; [`ui`]: the web dashboard's pages under `/ui/`; [`dashboard`]: its
//!   sessions, which the API shares; [`metrics`]: the Prometheus exposition; [`limits`]:
//!   the bounds of the numbers a request may carry; [`authority`]: what a caller may set
//!   in a job's spec, submitted or updated; [`api_error`]: the error every part answers a caller with;
//!   [`read_store`]: the store handle for reads; [`state`]: what every handler shares;
//! - [`serve`]: binds the Unix socket (and a TCP address if asked), rebuilds the engine from
//!   the store, and runs until told to stop; [`listen`]: the connections, their timeouts
//!   and each TCP peer's cap.
//!
//! Not here: starting agents, daemonizing, the command line (the `cadre` binary does that).

pub mod agents;
pub mod api;
pub mod api_error;
pub mod auth;
pub mod authority;
pub mod claims;
pub mod controller;
pub mod dashboard;
pub mod engine;
pub mod limits;
pub mod listen;
pub mod metrics;
pub mod output_reads;
pub mod queues;
pub mod read_store;
pub mod replica;
pub mod state;
pub mod ui;

use crate::auth::Authenticator;
use crate::controller::{RecoverError, StoreFailed};
use crate::engine::{Command, Engine, EngineConfig, EngineHandle};
use crate::metrics::Metrics;
use crate::read_store::ReadStore;
use crate::state::AppState;
use cadre_core::cluster::Cluster;
use cadre_core::policy::Policy;
use cadre_core::scheduler::{CoreError, Scheduler};
use cadre_store::StoreError;
use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What the controller runs with.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// `--database`: an SQLite path or a `postgres://` URL.
    pub database: String,
    /// The Unix socket local clients and agents connect to.
    pub socket: PathBuf,
    /// A TCP address to listen on as well (remote clients with tokens, remote agents).
    pub listen: Option<SocketAddr>,
    pub cluster: Cluster,
    pub policy: Policy,
    /// The agents' shared key.
    pub agent_key: String,
    /// The cluster's settings for its agents, told in every welcome (configless).
    pub agent_settings: cadre_proto::agent::AgentSettings,
    /// The agents' lease: an agent that cannot renew it stops its runs by its end; a
    /// connection silent for a lease is closed.
    pub node_lease: Duration,
    /// How much longer than the lease after an agent's last frame its node is declared
    /// lost and its gangs requeued.
    pub lease_margin: Duration,
    pub sched_interval: Duration,
    /// Whether the nodes' GPUs are declared, not discovered (until each agent reports).
    pub emulated_gpus: bool,
    /// Connections' header and idle timeouts, and each TCP peer's cap.
    pub connections: listen::ConnectionLimits,
    /// TLS on the TCP address (the cluster's CA and the controller's certificate); `None`:
    /// plain TCP, which `cadre server` allows only with `--insecure`.
    pub tls: Option<Arc<TlsSetup>>,
    /// The leader lease's epoch this controller's writes are fenced with, when it leads
    /// replicated controllers ([`replica`]); `None`: a single controller.
    pub fence: Option<u64>,
    /// The lease it leads under, and how long the cluster went without a leader before,
    /// when it leads replicated controllers.
    pub leading: Option<(cadre_proto::api::LeaderStatus, Option<Duration>)>,
}

/// The controller's TLS: the cluster's CA (which signs nodes' certificates at enrolment)
/// and the rustls configuration of its TCP listener.
pub struct TlsSetup {
    pub ca: cadre_tls::Ca,
    pub server: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for TlsSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsSetup { .. }")
    }
}

impl TlsSetup {
    /// The CA (the site's, or the one in `data_dir`, made there on first use) and a
    /// certificate for `names` (host names and addresses clients reach the controller by).
    pub fn new(ca: cadre_tls::Ca, names: &[String]) -> Result<TlsSetup, cadre_tls::TlsError> {
        let identity = ca.server_identity(names)?;
        let server = cadre_tls::server_config(&ca, identity)?;
        Ok(TlsSetup { ca, server })
    }
}

/// Why the controller could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("failed to open the store `{database}`: {source}")]
    Store {
        database: String,
        source: StoreError,
    },
    #[error("the cluster and policy do not make a scheduler: {0}")]
    Scheduler(CoreError),
    #[error("failed to rebuild the controller's state from the store: {0}")]
    Recover(#[from] RecoverError),
    #[error("the socket `{path}` is in use by a running controller")]
    SocketInUse { path: PathBuf },
    #[error("failed to listen on {what}: {source}")]
    Listen {
        what: String,
        source: std::io::Error,
    },
    #[error("the engine stopped: {0}")]
    Engine(StoreFailed),
    #[error("the engine thread panicked")]
    EnginePanicked,
}

/// Binds the Unix socket at `path`, removing a stale socket file left by a controller that
/// is gone (and refusing one that still answers).
pub(crate) async fn bind_socket(path: &PathBuf) -> Result<tokio::net::UnixListener, ServerError> {
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(ServerError::SocketInUse { path: path.clone() });
        }
        let _ = std::fs::remove_file(path);
    }
    let listen_err = |source| ServerError::Listen {
        what: path.display().to_string(),
        source,
    };
    let listener = tokio::net::UnixListener::bind(path).map_err(listen_err)?;
    // Anyone local may connect: the kernel tells who they are.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(listen_err)?;
    Ok(listener)
}

/// Runs the controller until `shutdown` resolves (or the engine stops on a store failure).
/// `ready` is called once it accepts connections.
pub async fn serve(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    ready: impl FnOnce(),
) -> Result<(), ServerError> {
    let fence = config.fence;
    let open = move |database: &str| {
        match fence {
            Some(epoch) => cadre_store::open_fenced(database, epoch),
            None => cadre_store::open(database),
        }
        .map_err(|source| ServerError::Store {
            database: database.to_owned(),
            source,
        })
    };
    let sched = Scheduler::new(config.cluster.clone(), config.policy.clone())
        .map_err(ServerError::Scheduler)?;
    let metrics = Arc::new(Metrics::new());
    if let Some((leader, gap)) = &config.leading {
        metrics.set_leader(leader.epoch, leader.since, *gap);
    }
    let status = cadre_proto::api::ControllerStatus {
        role: if config.leading.is_some() {
            "leader"
        } else {
            "single"
        }
        .into(),
        version: env!("CARGO_PKG_VERSION").into(),
        replica: config.leading.as_ref().map(|(l, _)| l.name.clone()),
        leader: config.leading.as_ref().map(|(l, _)| l.clone()),
    };
    let engine_config = EngineConfig {
        node_lease: config.node_lease,
        lease_margin: config.lease_margin,
        sched_interval: config.sched_interval,
        emulated_gpus: config.emulated_gpus,
        job_token_key: config.agent_key.clone(),
        agent_settings: config.agent_settings.clone(),
    };
    // Stores block (PostgreSQL's client on a runtime of its own): open them and rebuild
    // the engine off the async threads.
    let io = crate::engine::IoHub::default();
    let (engine, reads) = {
        let database = config.database.clone();
        let metrics = metrics.clone();
        let io = io.clone();
        tokio::task::spawn_blocking(move || -> Result<_, ServerError> {
            let writer = open(&database)?;
            let reads = ReadStore::new(open(&database)?);
            let engine = Engine::recover(sched, writer, engine_config, metrics, io)?;
            Ok((engine, reads))
        })
        .await
        .map_err(|_| ServerError::EnginePanicked)??
    };
    let socket = bind_socket(&config.socket).await?;
    let tcp = match config.listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ServerError::Listen {
                    what: addr.to_string(),
                    source,
                })?,
        ),
        None => None,
    };
    let (tx, rx) = std::sync::mpsc::channel::<Command>();
    let handle = EngineHandle::new(tx, io);
    let engine_thread = std::thread::Builder::new()
        .name("cadre-engine".into())
        .spawn(move || engine.run(rx))
        .map_err(|source| ServerError::Listen {
            what: "the engine thread".into(),
            source,
        })?;
    let state = AppState {
        engine: handle.clone(),
        auth: Arc::new(Authenticator {
            tokens: reads.clone(),
            owner_uid: nix::unistd::geteuid().as_raw(),
            agent_key: config.agent_key.clone(),
        }),
        reads: reads.clone(),
        metrics,
        // The session cookie is `Secure` when the TCP address serves TLS.
        dashboard: Arc::new(dashboard::Dashboard::new(
            config.listen,
            config.tls.is_some(),
        )),
        tls: config.tls.clone(),
        revoked: tokio::sync::broadcast::channel(64).0,
        agent_silence: config.node_lease,
        status,
    };
    let watcher = tokio::spawn(ui::live::watch_changes(
        handle.clone(),
        state.dashboard.clone(),
    ));
    let app = api::router(state.clone())
        .merge(ui::router(state))
        .merge(replica::probes(true));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let unix_task = tokio::spawn(listen::serve(
        socket,
        app.clone(),
        config.connections.clone(),
        stop_rx.clone(),
        None,
    ));
    let acceptor = config
        .tls
        .as_ref()
        .map(|t| tokio_rustls::TlsAcceptor::from(t.server.clone()));
    let tcp_task = tcp.map(|listener| {
        tokio::spawn(listen::serve(
            listener,
            app,
            config.connections.clone(),
            stop_rx.clone(),
            acceptor,
        ))
    });
    tracing::info!(socket = %config.socket.display(), listen = ?config.listen, "controller ready");
    ready();
    // Stop on request, or when the engine stops by itself (a store failure).
    let engine_gone = {
        let handle = handle.clone();
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if handle.read(|_| ()).await.is_err() {
                    return;
                }
            }
        }
    };
    tokio::select! {
        () = shutdown => {}
        () = engine_gone => {}
    }
    let _ = stop_tx.send(true);
    watcher.abort();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    if handle.send(Command::Shutdown { reply: done_tx }).is_ok() {
        let _ = done_rx.await;
    }
    // Connections that linger (agents' WebSockets) must not hold the shutdown up.
    let _ = tokio::time::timeout(Duration::from_secs(2), unix_task).await;
    if let Some(t) = tcp_task {
        let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
    }
    let _ = std::fs::remove_file(&config.socket);
    reads.close().await;
    drop(handle);
    match tokio::task::spawn_blocking(move || engine_thread.join()).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(e))) => Err(ServerError::Engine(e)),
        _ => Err(ServerError::EnginePanicked),
    }
}
