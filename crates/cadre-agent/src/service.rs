//! The node agent process: connects to the controller, says what the node is and what
//! runs on it, runs what it is told, and reports how it went, over the agent protocol of
//! [`cadre_proto::agent`] (read its module doc first).
//!
//! [`run`] is the whole service: discovery, then one loop that feeds everything that
//! happens (a controller message, a run's report, the connection opening, dropping or
//! going silent, the shutdown signal) into the protocol state machine (`session`, pure,
//! tested on its own) and carries out what it decides (send, launch, stop, signal). Each
//! run lives in a thread of its own (`worker`) that launches and supervises its tasks.
//!
//! The connection:
//! - `http://host:port` (a WebSocket over TCP) or `unix:///path/to/socket` (over a Unix
//!   socket), path [`CONNECT_PATH`], header `Authorization: Bearer <key>`. TLS is not
//!   spoken (yet): use the Unix socket, or a trusted network.
//! - When it cannot be opened or drops, the agent tries again after 50 ms, doubling up to
//!   2 s ([`AgentConfig::reconnect_min`], [`AgentConfig::reconnect_max`]), for ever;
//!   the delay goes back to the minimum once a connection is welcomed. Meanwhile the runs
//!   go on, supervised, and their events wait in the outbox for the next `Hello`.
//! - The agent pings every [`AgentConfig::keepalive`] (every sixth of the controller's
//!   lease at most, see [`ping_interval`]) and drops a connection on which nothing came
//!   for three of those, or for a lease when it is longer (a controller gone without a
//!   word, a lost network).
//! - The lease (fencing, `lease`): renewed only by the controller's welcome (from when
//!   the hello was sent) and by pongs answering the agent's own numbered pings (from when
//!   each ping was sent); a kill wait before it ends, every run is stopped (SIGKILL at the
//!   end), and reported NODE_FAIL once the controller is heard again.
//! - Reconnecting cannot help and the agent exits with an error (after stopping any runs)
//!   when the controller rejects the key (HTTP 401 or 403 on the upgrade), refuses the
//!   agent (`Refused`), or welcomes it with another protocol version.
//!
//! Sequence numbers start at the wall clock's microseconds since 1970 when the agent
//! starts, so that the events of a restarted agent still number above those of its
//! previous life.
//!
//! Shutdown (the `shutdown` future of [`run`] resolving; `cadre agent` on SIGTERM or
//! SIGINT): no more launches (those ordered meanwhile fail, not permanently); every run is
//! stopped with its own KillWait (SIGTERM, SIGKILL after it) and reported NODE_FAIL, since
//! the node is leaving and the job did nothing wrong; once none is left, the agent waits
//! up to [`AgentConfig::flush_timeout`] for the controller to acknowledge the last events,
//! closes the connection and returns.
//!
//! A restarted agent adopts the runs its previous life wrote down (`record`, tasks
//! kept by their keepers: [`crate::keeper`]). Not here: TLS, health checks, log shipping.

mod lease;
mod record;
mod session;
mod worker;

use crate::cgroup::{AgentCgroups, CgroupError, CgroupSetting, Prepared};
use crate::discovery::{self, DiscoveryError, DiscoveryOptions};
use crate::health::{Baseline, HealthChecks};
use crate::prolog::NodeScripts;
use cadre_proto::address::HostPort;
use cadre_proto::agent::{
    AgentMessage, AgentSettings, CONNECT_PATH, ControllerMessage, NodeReport, RunRef, TaskEvent,
};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, SinkExt, StreamExt};
use lease::Lease;
use session::{Action, Input, Link, Session, SessionError};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::time::{Instant, sleep_until};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::http::header::AUTHORIZATION;
use tokio_tungstenite::tungstenite::{self, Message};
use worker::{LaunchContext, RunCommand, RunHandle};

/// The agent's ping interval unless the controller's lease asks for a shorter one.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(10);

/// How often the agent pings, given its configured keepalive and the lease of the
/// controller's welcome: every sixth of the lease at most. Only the pongs renew the lease,
/// from their pings' sending, and fencing starts two thirds into it: the pings sent in
/// between (three) give a pong half a lease to come back before any run is stopped.
pub fn ping_interval(keepalive: Duration, lease: Option<Duration>) -> Duration {
    match lease {
        Some(lease) => keepalive.min(lease / 6).max(Duration::from_millis(10)),
        None => keepalive,
    }
}

/// How long a connection may stay silent before the agent drops it, given its ping
/// interval and the controller's lease: three pings, or the lease when that is longer (a
/// lost pong or two must not cost the connection; the controller waits a lease too).
pub fn connection_silence(ping_every: Duration, lease: Option<Duration>) -> Duration {
    let pings = ping_every * 3;
    lease.map_or(pings, |lease| lease.max(pings))
}

/// [`connection_silence`] for an agent that knows several controllers (replicas): half
/// the lease, so that a leader cut off (its connection silent, not closed) is left for
/// the next replica before fencing starts two thirds into the lease, and the new leader's
/// welcome renews it in time.
pub fn replica_silence(ping_every: Duration, lease: Option<Duration>) -> Duration {
    let pings = ping_every * 3;
    lease.map_or(pings, |lease| (lease / 2).max(pings))
}

/// How the agent runs. [`AgentConfig::new`] gives the defaults.
#[derive(Clone)]
pub struct AgentConfig {
    /// The controller: `http://host:port` or `unix:///path/to/socket`.
    pub controller: String,
    /// The cluster's agent key (the controller's `agent.key`), sent as a bearer token.
    pub key: String,
    /// The name of the node this agent serves, as the controller's cluster knows it.
    pub node: String,
    /// What to discover and what to emulate (`--gpus-per-node`).
    pub discovery: DiscoveryOptions,
    /// The agent's own directory: batch scripts go to `state_dir/job<ID>.<run>/script`
    /// (the run's directory mode 0700, owned by the job's user when the agent is root),
    /// removed when the run ends. One per agent: agents on one machine must not share it.
    pub state_dir: PathBuf,
    /// Where each task gets a cgroup of its own (see [`crate::cgroup`]): by default under
    /// the agent's own cgroup v2, where one is writable.
    pub cgroups: CgroupSetting,
    /// How long a task's processes may survive SIGKILL before the run is reported ended
    /// with them named, which drains the node (Slurm's UnkillableStepTimeout).
    pub kill_timeout: Duration,
    /// The site's prolog and epilog around each job's run here, and the DCGM exporter's
    /// job mapping (see [`crate::prolog`]). Default: none.
    pub scripts: NodeScripts,
    /// Which of the prolog, epilog, health-check and kill-timeout settings the agent's own
    /// options gave: the controller's settings (configless) fill in the others.
    pub own: OwnSettings,
    /// The node's health checks (see [`crate::health`]): the built-in ones every minute.
    pub health: HealthChecks,
    /// The host name reported for the node's tasks to be reached at; `None`: this
    /// machine's host name.
    pub address: Option<String>,
    /// The container runtime's command line (`podman`, `podman --runtime /usr/sbin/runc`):
    /// workloads whose containers run in their images run in it (see
    /// [`crate::container`]). Checked with `--version` at start; `None`: no runtime, and
    /// such workloads are not placed on this node.
    pub container_runtime: Option<String>,
    /// The capabilities a container may be given back when its manifest asks for them
    /// (`securityContext.capabilities.add`), as [`cadre_k8s::capability`] names them; every
    /// other one is dropped. Default: none.
    pub container_allowed_capabilities: Vec<String>,
    /// cadre's own executable, which MPI launchers of Kubernetes workloads run as their rsh
    /// agent (`cadre-rsh`, see [`crate::workload`]); `None`: MPI's remote launch has no
    /// agent on this node.
    pub rsh_executable: Option<PathBuf>,
    /// First delay before reconnecting.
    pub reconnect_min: Duration,
    /// Longest delay before reconnecting.
    pub reconnect_max: Duration,
    /// How long opening a connection (TCP or Unix, and the WebSocket handshake) may take.
    pub connect_timeout: Duration,
    /// Ping interval; a connection silent for three of them is dropped.
    pub keepalive: Duration,
    /// Most events kept unacknowledged; past it the oldest `Started` go first, then the
    /// oldest events (logged as errors).
    pub outbox_limit: usize,
    /// On shutdown, how long to wait for the controller to acknowledge the last events.
    pub flush_timeout: Duration,
    /// For an `https://` controller: the client's TLS configuration (the cluster's CA to
    /// trust, the node's certificate to show; see [`crate::enrol`]).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl AgentConfig {
    /// An agent of node `node` for the controller at `controller`, with the defaults:
    /// discovery of this machine without emulated GPUs, a cgroup per task under the agent's
    /// own where it can (60 s for their processes to die), this machine's host
    /// name, reconnects after 50 ms doubling up to 2 s, 5 s to connect, a ping every 10 s,
    /// 100 000 unacknowledged events at most, 2 s to flush on shutdown.
    pub fn new(
        controller: impl Into<String>,
        key: impl Into<String>,
        node: impl Into<String>,
        state_dir: impl Into<PathBuf>,
    ) -> AgentConfig {
        AgentConfig {
            controller: controller.into(),
            key: key.into(),
            node: node.into(),
            discovery: DiscoveryOptions::default(),
            state_dir: state_dir.into(),
            cgroups: CgroupSetting::Auto,
            kill_timeout: crate::supervise::DEFAULT_KILL_TIMEOUT,
            scripts: NodeScripts::default(),
            health: HealthChecks::default(),
            own: OwnSettings::default(),
            address: None,
            container_runtime: None,
            container_allowed_capabilities: Vec::new(),
            rsh_executable: None,
            reconnect_min: Duration::from_millis(50),
            reconnect_max: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(5),
            keepalive: DEFAULT_KEEPALIVE,
            outbox_limit: 100_000,
            flush_timeout: Duration::from_secs(2),
            tls: None,
        }
    }
}

impl fmt::Debug for AgentConfig {
    /// Everything but the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentConfig")
            .field("controller", &self.controller)
            .field("key", &"<redacted>")
            .field("node", &self.node)
            .field("discovery", &self.discovery)
            .field("state_dir", &self.state_dir)
            .field("cgroups", &self.cgroups)
            .field("kill_timeout", &self.kill_timeout)
            .field("scripts", &self.scripts)
            .field("health", &self.health)
            .field("container_runtime", &self.container_runtime)
            .field(
                "container_allowed_capabilities",
                &self.container_allowed_capabilities,
            )
            .field("address", &self.address)
            .field("reconnect_min", &self.reconnect_min)
            .field("reconnect_max", &self.reconnect_max)
            .field("connect_timeout", &self.connect_timeout)
            .field("keepalive", &self.keepalive)
            .field("outbox_limit", &self.outbox_limit)
            .field("flush_timeout", &self.flush_timeout)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Why the agent stopped, other than being asked to.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("invalid controller address `{address}`: {why}")]
    InvalidController { address: String, why: String },
    #[error("invalid agent configuration: {why}")]
    InvalidConfig { why: String },
    #[error("failed to discover the node's hardware: {0}")]
    Discovery(#[source] DiscoveryError),
    #[error("{0}")]
    ContainerRuntime(#[source] crate::container::RuntimeError),
    #[error("failed to prepare the tasks' cgroups: {0}")]
    Cgroup(#[source] CgroupError),
    #[error("failed to prepare the agent's state directory {}: {source}", path.display())]
    StateDir { path: PathBuf, source: io::Error },
    #[error("failed to read this machine's host name: {source}")]
    HostName { source: nix::errno::Errno },
    #[error(
        "the controller at {controller} rejected the agent key (HTTP {status}): give the \
         controller's agent.key with --key-file or CADRE_AGENT_KEY"
    )]
    Unauthorized { controller: String, status: u16 },
    #[error("the controller at {controller} refused node {node}: {reason}")]
    Refused {
        controller: String,
        node: String,
        reason: String,
    },
    #[error(
        "the controller at {controller} speaks agent protocol version {theirs}; this agent \
         speaks version {ours}"
    )]
    VersionMismatch {
        controller: String,
        theirs: u32,
        ours: u32,
    },
    #[error("internal error of the agent: {what}")]
    Internal { what: String },
}

/// Which settings an agent's own options gave (see [`AgentConfig::own`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnSettings {
    pub prolog: bool,
    pub epilog: bool,
    pub task_prolog: bool,
    pub task_epilog: bool,
    pub prolog_timeout: bool,
    pub health_check_program: bool,
    pub health_check_interval: bool,
    pub kill_timeout: bool,
}

/// Where the controller listens.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Endpoint {
    /// `host:port`, as given; over TLS to `host` when `tls` is set (`https://`).
    Tcp {
        authority: String,
        tls: Option<TlsTarget>,
    },
    Unix {
        path: PathBuf,
    },
}

/// Where a TLS connection goes: the name its certificate must carry, and the client's
/// configuration (the cluster's CA, the node's certificate).
#[derive(Clone)]
struct TlsTarget {
    name: rustls::pki_types::ServerName<'static>,
    config: Arc<rustls::ClientConfig>,
}

impl PartialEq for TlsTarget {
    fn eq(&self, other: &TlsTarget) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.config, &other.config)
    }
}

impl Eq for TlsTarget {}

impl fmt::Debug for TlsTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TlsTarget({:?})", self.name)
    }
}

impl Endpoint {
    fn parse(address: &str, tls: Option<&Arc<rustls::ClientConfig>>) -> Result<Endpoint, String> {
        if let Some(path) = address.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(
                    "a unix:// address takes an absolute path: unix:///path/to/socket".into(),
                );
            }
            return Ok(Endpoint::Unix { path: path.into() });
        }
        let (rest, secure) = if let Some(rest) = address
            .strip_prefix("https://")
            .or_else(|| address.strip_prefix("wss://"))
        {
            (rest, true)
        } else if let Some(rest) = address
            .strip_prefix("http://")
            .or_else(|| address.strip_prefix("ws://"))
        {
            (rest, false)
        } else {
            return Err(
                "expected https://host:port, http://host:port or unix:///path/to/socket".into(),
            );
        };
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if !path.is_empty() {
            return Err(format!(
                "the address has a path (`/{path}`); give only host and port"
            ));
        }
        let HostPort { host, authority } =
            cadre_proto::address::host_port(authority, if secure { 443 } else { 80 })?;
        let tls = if secure {
            let config = tls.ok_or_else(|| {
                "an https:// controller needs the cluster's CA and this node's certificate \
                 (cadre agent --ca FILE, enrolled with --join-file FILE)"
                    .to_string()
            })?;
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| format!("`{host}` is not a host name or address: {e}"))?;
            Some(TlsTarget {
                name,
                config: config.clone(),
            })
        } else {
            None
        };
        Ok(Endpoint::Tcp { authority, tls })
    }

    /// The URI of the WebSocket request (over a Unix socket the host is a formality).
    fn request_uri(&self) -> String {
        match self {
            Endpoint::Tcp { authority, .. } => format!("ws://{authority}{CONNECT_PATH}"),
            Endpoint::Unix { .. } => format!("ws://localhost{CONNECT_PATH}"),
        }
    }
}

/// A byte stream the agent's WebSocket runs over: TCP, TLS over TCP, or a Unix socket.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The agent's connection to its controller, as [`open_connection`] opens it.
pub type AgentSocket = WebSocketStream<Box<dyn Io>>;

type Ws = AgentSocket;

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid controller address `{address}`: {why}")]
    InvalidController { address: String, why: String },
    #[error("HTTP {status}: the key was rejected")]
    Unauthorized { status: u16 },
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("WebSocket handshake failed: {0}")]
    Handshake(#[from] tungstenite::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Opens the agent's WebSocket to the controller at `controller` as the agent does (TCP or
/// a Unix socket; TLS with `tls` for `https://`; the upgrade with `key` as the bearer token
/// unless it is empty), its TCP connection made from the local address `from` when one is
/// given. Nothing is sent on it yet: the caller says hello. For programs that speak the
/// agent protocol themselves, such as `cadre bench agents`'s simulated agents.
pub async fn open_connection(
    controller: &str,
    key: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    from: Option<std::net::IpAddr>,
) -> Result<Box<AgentSocket>, ConnectError> {
    let endpoint =
        Endpoint::parse(controller, tls).map_err(|why| ConnectError::InvalidController {
            address: controller.to_owned(),
            why,
        })?;
    connect(endpoint, key.to_owned(), from).await
}

/// A TCP connection to `authority` (`host:port`), from the local address `from` if given.
async fn tcp_connect(
    authority: &str,
    from: Option<std::net::IpAddr>,
) -> io::Result<tokio::net::TcpStream> {
    let Some(from) = from else {
        return tokio::net::TcpStream::connect(authority).await;
    };
    let to = tokio::net::lookup_host(authority)
        .await?
        .find(|a| a.is_ipv4() == from.is_ipv4())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("`{authority}` has no address of the family of {from}"),
            )
        })?;
    let socket = if from.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.bind(std::net::SocketAddr::new(from, 0))?;
    socket.connect(to).await
}

async fn connect(
    endpoint: Endpoint,
    key: String,
    from: Option<std::net::IpAddr>,
) -> Result<Box<Ws>, ConnectError> {
    let stream: Box<dyn Io> = match &endpoint {
        Endpoint::Tcp { authority, tls } => {
            let s = tcp_connect(authority, from).await?;
            s.set_nodelay(true)?;
            match tls {
                None => Box::new(s),
                Some(t) => {
                    let connector = tokio_rustls::TlsConnector::from(t.config.clone());
                    Box::new(connector.connect(t.name.clone(), s).await?)
                }
            }
        }
        Endpoint::Unix { path } => Box::new(tokio::net::UnixStream::connect(path).await?),
    };
    let mut request = endpoint.request_uri().into_client_request()?;
    // Over TLS with the node's certificate no key is needed (nor sent, when there is none).
    if !key.is_empty() {
        // The key was checked to be a valid header value before the first connection.
        let bearer = HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|e| ConnectError::Handshake(tungstenite::Error::HttpFormat(e.into())))?;
        request.headers_mut().insert(AUTHORIZATION, bearer);
    }
    match tokio_tungstenite::client_async(request, stream).await {
        Ok((ws, _)) => Ok(Box::new(ws)),
        Err(tungstenite::Error::Http(response))
            if matches!(response.status().as_u16(), 401 | 403) =>
        {
            Err(ConnectError::Unauthorized {
                status: response.status().as_u16(),
            })
        }
        Err(e) => Err(ConnectError::Handshake(e)),
    }
}

/// Delays between connection attempts: doubling from `min` up to `max`.
#[derive(Clone, Debug)]
struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new(min: Duration, max: Duration) -> Backoff {
        let max = max.max(min);
        Backoff {
            min,
            max,
            next: min,
        }
    }

    fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    fn reset(&mut self) {
        self.next = self.min;
    }
}

/// The connection, as the loop drives it.
enum Conn {
    /// Connect at this instant.
    Waiting {
        at: Instant,
    },
    Connecting(BoxFuture<'static, Result<Box<Ws>, ConnectError>>),
    Open {
        ws: Box<Ws>,
        last_heard: Instant,
        last_ping: Instant,
    },
    /// No more connections (a fatal error).
    Closed,
}

/// What happened on the connection.
enum ConnEvent {
    ConnectDue,
    Connected(Result<Box<Ws>, ConnectError>),
    Received(Option<Result<Message, tungstenite::Error>>),
    PingDue,
    Silent,
}

/// The next event of the connection: pings every `keepalive`, silent after `silence`
/// without a frame.
async fn next_conn_event(conn: &mut Conn, keepalive: Duration, silence: Duration) -> ConnEvent {
    match conn {
        Conn::Waiting { at } => {
            sleep_until(*at).await;
            ConnEvent::ConnectDue
        }
        Conn::Connecting(f) => ConnEvent::Connected(f.await),
        Conn::Open {
            ws,
            last_heard,
            last_ping,
        } => {
            let dead_at = *last_heard + silence;
            let ping_at = *last_ping + keepalive;
            tokio::select! {
                m = ws.next() => ConnEvent::Received(m),
                _ = sleep_until(ping_at.min(dead_at)) => {
                    if Instant::now() >= dead_at { ConnEvent::Silent } else { ConnEvent::PingDue }
                }
            }
        }
        Conn::Closed => std::future::pending().await,
    }
}

/// Says goodbye on a connection about to be dropped; a controller that no longer reads
/// cannot hold the agent up (the close frame is a courtesy).
async fn close_quietly(ws: &mut Ws) {
    let close = WebSocketStream::close(ws, None);
    let _ = tokio::time::timeout(Duration::from_secs(1), close).await;
}

/// Why the agent is winding down.
enum Stopping {
    Requested,
    Fatal(AgentError),
}

/// The service: the protocol state, the runs' threads, the connection.
struct Service {
    controller: String,
    node: String,
    key: String,
    /// Each controller's address and endpoint (two or three for replicated controllers),
    /// and the one connected to or tried next.
    endpoints: Vec<(String, Endpoint)>,
    at: usize,
    keepalive: Duration,
    /// The keepalive configured, before a lease shortens it.
    configured_keepalive: Duration,
    /// The lease the controller gave at its welcome, and what renews it (fencing).
    lease: Lease,
    /// The runs stopped because the lease ran out, since it was last renewed.
    fenced: BTreeSet<RunRef>,
    connect_timeout: Duration,
    flush_timeout: Duration,
    session: Session,
    ctx: Arc<LaunchContext>,
    runs: BTreeMap<RunRef, RunHandle>,
    /// The lease deadline its tasks' keepers enforce ([`crate::keeper`]).
    lease_file: Arc<crate::keeper::LeaseFile>,
    events_tx: UnboundedSender<worker::Report>,
    conn: Conn,
    backoff: Backoff,
    /// Failed connection attempts since the last welcome.
    failures: u32,
    stopping: Option<Stopping>,
    /// Once idle while stopping: when to give up waiting for acknowledgements.
    flush_deadline: Option<Instant>,
    /// The agent's directory of task cgroups, released when it stops.
    cgroups: Option<AgentCgroups>,
    /// What the last run of the health checks found wrong.
    checks_found: Vec<String>,
    /// The health checks to run, as the controller's settings make them.
    checks_tx: tokio::sync::watch::Sender<HealthChecks>,
    /// Which settings the agent's own options gave, and those settings: the controller's
    /// (configless) fill in the rest.
    own: OwnSettings,
    own_scripts: NodeScripts,
    own_health: HealthChecks,
    own_kill_timeout: Duration,
    /// A setting from the controller this node cannot use (a program others may change).
    settings_problem: Option<String>,
    /// The node's clock against the controller's, as of the last welcome.
    clock_problem: Option<String>,
    /// Processes of a previous life of the agent that survived SIGKILL: the node stays
    /// drained until the agent starts again without them.
    left_running: Option<String>,
    /// The state directory's lock, held for the agent's life.
    _lock: nix::fcntl::Flock<std::fs::File>,
    /// Each run of the health checks' findings.
    health_rx: mpsc::UnboundedReceiver<Vec<String>>,
    /// Each sample of the GPUs' use (only where NVML found real GPUs).
    usage_rx: mpsc::UnboundedReceiver<Vec<cadre_proto::agent::GpuUsage>>,
}

/// How often the GPUs' use is sampled and reported (Prometheus scrapes every 15 to 60 s).
const GPU_USAGE_INTERVAL: Duration = Duration::from_secs(15);

/// Samples the GPUs' use through NVML every [`GPU_USAGE_INTERVAL`], for ever.
async fn usage_loop(found: mpsc::UnboundedSender<Vec<cadre_proto::agent::GpuUsage>>) {
    loop {
        let Ok(usage) = tokio::task::spawn_blocking(crate::gpu::read_usage).await else {
            return;
        };
        if found.send(usage).is_err() {
            return;
        }
        tokio::time::sleep(GPU_USAGE_INTERVAL).await;
    }
}

/// Runs the health checks every interval, for ever, sending what each run finds.
///
/// The checks are `checks`' latest (the controller's settings may change them): a change
/// runs them at once.
async fn health_loop(
    mut checks: tokio::sync::watch::Receiver<HealthChecks>,
    node: String,
    state_dir: PathBuf,
    baseline: Baseline,
    found: mpsc::UnboundedSender<Vec<String>>,
) {
    loop {
        let interval = checks.borrow().interval.max(Duration::from_secs(1));
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            changed = checks.changed() => if changed.is_err() { return },
        }
        let (c, n, d, b) = (
            checks.borrow_and_update().clone(),
            node.clone(),
            state_dir.clone(),
            baseline.clone(),
        );
        let Ok(problems) = tokio::task::spawn_blocking(move || c.run(&n, &d, &b)).await else {
            return;
        };
        if found.send(problems).is_err() {
            return;
        }
    }
}

/// Runs the agent until `shutdown` resolves (then stops every run and returns `Ok`), or
/// until an error that reconnecting cannot fix. See the module doc.
pub async fn run(config: AgentConfig, shutdown: impl Future) -> Result<(), AgentError> {
    // Replicated controllers: every address, tried in turn (the standbys refuse the agent
    // until one of them leads).
    let endpoints = config
        .controller
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| {
            Endpoint::parse(a, config.tls.as_ref())
                .map(|e| (a.to_owned(), e))
                .map_err(|why| AgentError::InvalidController {
                    address: a.to_owned(),
                    why,
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let Some((_, endpoint)) = endpoints.first() else {
        return Err(AgentError::InvalidController {
            address: config.controller.clone(),
            why: "no address given".into(),
        });
    };
    for (_, e) in &endpoints {
        check_config(&config, e)?;
    }
    let _ = endpoint;
    let opts = config.discovery.clone();
    let found = tokio::task::spawn_blocking(move || discovery::discover(&opts))
        .await
        .map_err(|e| AgentError::Internal {
            what: format!("discovery did not finish: {e}"),
        })?
        .map_err(AgentError::Discovery)?;
    prepare_state_dir(&config.state_dir)?;
    // One agent per state directory: a second one would sweep the first's tasks as its
    // own previous life's.
    let lock = lock_state_dir(&config.state_dir)?;
    let lease_file = Arc::new(crate::keeper::LeaseFile::open(&config.state_dir).map_err(
        |source| AgentError::StateDir {
            path: config.state_dir.join(crate::keeper::LEASE_FILE),
            source,
        },
    )?);
    // The runs a previous life of the agent wrote down: their tasks are adopted, not
    // killed, where cgroups are still in use.
    let (records, unreadable) = record::take_all(&config.state_dir);
    for (path, why) in &unreadable {
        tracing::warn!(record = %path.display(), %why, "a run record of a previous life cannot be read: its run is lost");
    }
    let records = if config.cgroups == CgroupSetting::Off {
        for r in &records {
            record::forget(&config.state_dir, r);
        }
        Vec::new()
    } else {
        records
    };
    let keep: Vec<PathBuf> = records
        .iter()
        .flat_map(|r| r.tasks.iter().map(|t| t.cgroup.clone()))
        .collect();
    let swept = {
        let dir = config.state_dir.clone();
        tokio::task::spawn_blocking(move || crate::cgroup::sweep_previous_life(&dir, &keep))
            .await
            .map_err(|e| AgentError::Internal {
                what: format!("the sweep of a previous life did not finish: {e}"),
            })?
    };
    let left_running = swept.left_running;
    let cgroups = {
        let (setting, node, dir, reuse) = (
            config.cgroups.clone(),
            config.node.clone(),
            config.state_dir.clone(),
            swept.kept,
        );
        tokio::task::spawn_blocking(move || {
            AgentCgroups::prepare(&setting, &node, &dir, reuse.as_deref())
        })
        .await
        .map_err(|e| AgentError::Internal {
            what: format!("the cgroup setup did not finish: {e}"),
        })?
        .map_err(AgentError::Cgroup)?
    };
    let cgroups = match cgroups {
        Prepared::Ready(cg) => {
            tracing::info!(node = %config.node, cgroup = %cg.path().display(), memory = cg.memory_enabled(), "each task runs in a cgroup of its own");
            Some(cg)
        }
        Prepared::Without { why } => {
            let why = why.unwrap_or_else(|| "cgroups are off".into());
            tracing::warn!(node = %config.node, %why, "tasks run without cgroups, in process groups only: a process that leaves its task's group (setsid) can outlive its job, and out-of-memory kills are not detected");
            None
        }
    };
    let address = match &config.address {
        Some(a) => a.clone(),
        None => host_name()?,
    };
    let shape = &found.shape;
    tracing::info!(
        node = %config.node,
        controller = %config.controller,
        cores = shape.cores,
        mem_mib = shape.mem_mib,
        gpus = shape.gpus.len(),
        gpus_emulated = found.gpus_emulated,
        %address,
        "node discovered"
    );
    for line in &found.report {
        tracing::debug!(node = %config.node, "{line}");
    }
    let runtime = match &config.container_runtime {
        Some(line) => {
            let line = line.clone();
            let rt = tokio::task::spawn_blocking(move || {
                crate::container::ContainerRuntime::detect(&line)
            })
            .await
            .map_err(|e| AgentError::Internal {
                what: format!("the container runtime check did not finish: {e}"),
            })?
            .map_err(AgentError::ContainerRuntime)?;
            tracing::info!(node = %config.node, runtime = ?rt.argv(), version = rt.version(), "container runtime");
            Some(Arc::new(rt))
        }
        None => None,
    };
    let report = NodeReport {
        shape: found.shape.clone(),
        emulated_gpus: found.gpus_emulated,
        address,
        notes: found.report.clone(),
        container_runtime: runtime.as_ref().map(|r| r.version().to_string()),
    };
    let first_seq = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
        .max(1);
    let real_gpus = if found.gpus_emulated {
        0
    } else {
        found.shape.gpus.len()
    };
    let ctx = Arc::new(LaunchContext {
        node_name: config.node.clone(),
        shape: found.shape,
        os_cpus: found.os_cpus,
        cgroup_parent: cgroups.as_ref().map(|c| c.path().to_path_buf()),
        keepers: Some(crate::keeper::Keepers::new(
            &config.state_dir,
            Arc::clone(&lease_file),
        )),
        kill_timeout: std::sync::RwLock::new(config.kill_timeout),
        scripts: std::sync::RwLock::new(config.scripts.clone()),
        state_dir: config.state_dir.clone(),
        agent_uid: nix::unistd::geteuid().as_raw(),
        mounts: crate::mountns::TaskMounts::probe(),
        container_runtime: runtime,
        container_allowed_capabilities: config.container_allowed_capabilities.clone(),
        gpus_emulated: found.gpus_emulated,
        rsh_executable: config.rsh_executable.clone(),
        controller: config.controller.clone(),
        agent_key: config.key.clone(),
        rsh_libraries: config
            .rsh_executable
            .as_ref()
            .and_then(|_| crate::container::own_libraries()),
        outputs: Arc::default(),
    });
    // The node's health: checked once before the first hello (a node that fails never takes
    // a job), then every interval.
    let baseline = Baseline::of(real_gpus, std::path::Path::new("/sys/class/infiniband"));
    let (health_tx, health_rx) = mpsc::unbounded_channel();
    let first_checks = {
        let (checks, node, dir, base) = (
            config.health.clone(),
            config.node.clone(),
            config.state_dir.clone(),
            baseline.clone(),
        );
        tokio::task::spawn_blocking(move || checks.run(&node, &dir, &base))
            .await
            .map_err(|e| AgentError::Internal {
                what: format!("the health checks did not finish: {e}"),
            })?
    };
    // The GPUs' use, sampled where NVML found real GPUs (none are emulated).
    let (usage_tx, usage_rx) = mpsc::unbounded_channel();
    let usage_loop = (real_gpus > 0).then(|| tokio::spawn(usage_loop(usage_tx)));
    let (checks_tx, checks_rx) = tokio::sync::watch::channel(config.health.clone());
    let health_loop = tokio::spawn(health_loop(
        checks_rx,
        config.node.clone(),
        config.state_dir.clone(),
        baseline,
        health_tx,
    ));
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let mut service = Service {
        session: Session::new(config.node.clone(), report, first_seq, config.outbox_limit),
        controller: config.controller,
        node: config.node,
        key: config.key,
        endpoints,
        at: 0,
        keepalive: config.keepalive.max(Duration::from_millis(10)),
        configured_keepalive: config.keepalive.max(Duration::from_millis(10)),
        lease: Lease::new(Instant::now()),
        fenced: BTreeSet::new(),
        connect_timeout: config.connect_timeout,
        flush_timeout: config.flush_timeout,
        ctx,
        runs: BTreeMap::new(),
        events_tx,
        conn: Conn::Waiting { at: Instant::now() },
        backoff: Backoff::new(config.reconnect_min, config.reconnect_max),
        failures: 0,
        stopping: None,
        flush_deadline: None,
        cgroups,
        checks_found: first_checks,
        checks_tx,
        own: config.own.clone(),
        own_scripts: config.scripts.clone(),
        own_health: config.health.clone(),
        own_kill_timeout: config.kill_timeout,
        settings_problem: None,
        clock_problem: None,
        left_running,
        health_rx,
        usage_rx,
        lease_file,
        _lock: lock,
    };
    service.adopt(records);
    service.tell_health().await;
    let result = service.main(shutdown, events_rx).await;
    health_loop.abort();
    if let Some(l) = usage_loop {
        l.abort();
    }
    result
}

/// This machine's host name, as the kernel has it (`uname -n`).
pub fn host_name() -> Result<String, AgentError> {
    Ok(nix::unistd::gethostname()
        .map_err(|source| AgentError::HostName { source })?
        .to_string_lossy()
        .into_owned())
}

fn check_config(config: &AgentConfig, endpoint: &Endpoint) -> Result<(), AgentError> {
    let bad = |why: &str| {
        Err(AgentError::InvalidConfig {
            why: why.to_string(),
        })
    };
    // Over TLS the node's certificate is the credential; elsewhere the key is.
    let certified = matches!(endpoint, Endpoint::Tcp { tls: Some(_), .. });
    if config.key.is_empty() && !certified {
        return bad("the agent key is empty");
    }
    if !config.key.bytes().all(|b| b.is_ascii_graphic()) {
        return bad("the agent key holds spaces or characters other than printable ASCII");
    }
    if config.node.is_empty() {
        return bad("the node name is empty");
    }
    if !config.state_dir.is_absolute() {
        return Err(AgentError::InvalidConfig {
            why: format!(
                "the state directory `{}` is not an absolute path",
                config.state_dir.display()
            ),
        });
    }
    Ok(())
}

/// Creates the state directory (mode 0755: users must reach their run's directory in it),
/// and refuses one that is a symbolic link, belongs to another user or that group or
/// others may write to: a root agent creates the jobs' files in it and mounts them into
/// their tasks, so nobody else may place or replace anything there.
/// Locks `dir/lock` (made 0600, never through a link) for this agent alone.
fn lock_state_dir(dir: &std::path::Path) -> Result<nix::fcntl::Flock<std::fs::File>, AgentError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("lock");
    let err = |source| AgentError::StateDir {
        path: dir.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&path)
        .map_err(err)?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
        err(std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            format!(
                "another agent uses it (its lock {} is held: {e})",
                path.display()
            ),
        ))
    })
}

pub fn prepare_state_dir(dir: &std::path::Path) -> Result<(), AgentError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let err = |source| AgentError::StateDir {
        path: dir.to_path_buf(),
        source,
    };
    let unsafe_dir = |why: String| {
        err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            why,
        ))
    };
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(err)?;
    }
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(err)?
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(err(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(err)?;
    if !meta.is_dir() {
        return Err(unsafe_dir(
            "it is a symbolic link or not a directory".to_string(),
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(unsafe_dir(format!(
            "it belongs to uid {}, not to the agent's user (uid {me})",
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "group or others may write to it (mode {mode:03o}); `chmod 755` it"
        )));
    }
    if nix::unistd::geteuid().is_root()
        && let Some(closed) = dir
            .ancestors()
            .find(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 == 0))
    {
        tracing::warn!(
            dir = %dir.display(),
            closed = %closed.display(),
            "other users cannot pass through a directory on the way to the state directory: their batch scripts will not run (give the agent a state directory every user reaches, --state-dir or the run directory)"
        );
    }
    Ok(())
}

impl Service {
    async fn main(
        mut self,
        shutdown: impl Future,
        mut events_rx: UnboundedReceiver<worker::Report>,
    ) -> Result<(), AgentError> {
        let shutdown = shutdown.fuse();
        tokio::pin!(shutdown);
        let mut shutdown_seen = false;
        loop {
            if self.done() {
                return self.finish().await;
            }
            self.publish_lease();
            let flush_at = self.flush_deadline;
            let (fence_at, lease_running) = (self.fence_at(), self.lease_running());
            let silence = self.silence();
            tokio::select! {
                _ = &mut shutdown, if !shutdown_seen => {
                    shutdown_seen = true;
                    tracing::info!(node = %self.node, runs = self.runs.len(), "shutting down: stopping every run");
                    self.begin_stopping(Stopping::Requested).await;
                }
                Some(found) = self.health_rx.recv() => {
                    self.checks_found = found;
                    self.tell_health().await;
                }
                Some(gpus) = self.usage_rx.recv() => {
                    // A sample taken while disconnected is dropped: the next replaces it.
                    if !gpus.is_empty() && matches!(self.session.link(), Link::Up { .. }) {
                        self.send(&AgentMessage::GpuUsage { gpus }).await;
                    }
                }
                Some(report) = events_rx.recv() => match report {
                    worker::Report::Event(event) => self.on_report(event).await,
                    worker::Report::Output(chunk) => self.relay(chunk).await,
                    worker::Report::Answer(message) => self.answer(message).await,
                },
                event = next_conn_event(&mut self.conn, self.keepalive, silence) => self.on_conn_event(event).await,
                _ = sleep_until(fence_at), if lease_running => self.fence().await,
                _ = sleep_until(flush_at.unwrap_or_else(Instant::now)), if flush_at.is_some() => {}
            }
        }
    }

    /// Takes over the runs a previous life of the agent left ([`record`]): their tasks
    /// are supervised as if this life had started them, and the controller hears of them
    /// in the hello as running here. A run that cannot be adopted is killed (the
    /// controller, not hearing of it, requeues it).
    fn adopt(&mut self, records: Vec<record::RunRecord>) {
        for rec in records {
            let run = rec.order.run;
            let gang = match self.adopted_gang(&rec) {
                Ok(g) => g,
                Err(why) => {
                    tracing::warn!(job = %run.job, run = run.run, %why, "a run of a previous life of the agent cannot be adopted: killing its tasks");
                    for t in &rec.tasks {
                        let cg = crate::cgroup::TaskCgroup::existing(t.cgroup.clone());
                        cg.kill_all();
                        cg.remove();
                    }
                    record::forget(&self.ctx.state_dir, &rec);
                    continue;
                }
            };
            let kill_wait = Duration::from_secs(rec.order.run_spec.kill_wait_secs);
            let tasks = gang.tasks.len();
            match worker::spawn_adopted(rec, gang, Arc::clone(&self.ctx), self.events_tx.clone()) {
                Ok(handle) => {
                    tracing::info!(job = %run.job, run = run.run, tasks, "adopted the run's tasks from a previous life of the agent");
                    self.runs.insert(run, handle);
                    let result = self.session.handle(Input::Adopted { run, kill_wait });
                    if let Err(e) = result {
                        tracing::error!(error = %e, "the session refused an adopted run");
                    }
                }
                // The thread's closure, and the tasks with it, are dropped: killed.
                Err(e) => {
                    tracing::error!(job = %run.job, error = %e, "cannot start the thread of an adopted run: its tasks are killed")
                }
            }
        }
    }

    /// The tasks of a recorded run, supervised again.
    fn adopted_gang(&self, rec: &record::RunRecord) -> Result<crate::gang::Gang, String> {
        use crate::supervise::{Limits, RunningTask, TaskFiles};
        let parent = self
            .ctx
            .cgroup_parent
            .as_deref()
            .ok_or("this life of the agent runs without cgroups")?;
        let order = &rec.order;
        let start = crate::keeper::instant_of_ns(rec.started_ns);
        let limits = Limits {
            time_limit: order.time_limit_ms.map(Duration::from_millis),
            kill_wait: Duration::from_secs(order.run_spec.kill_wait_secs),
            signal: order.run_spec.signal,
            kill_timeout: self.ctx.kill_timeout(),
        };
        let mut tasks = Vec::new();
        for t in &rec.tasks {
            if t.cgroup.parent() != Some(parent) {
                return Err(format!(
                    "its task cgroup {} is not under this life's {}",
                    t.cgroup.display(),
                    parent.display()
                ));
            }
            let place = crate::jobenv::task_place(&order.allocation, t.index)
                .ok_or_else(|| format!("its allocation has no task {}", t.index))?;
            let status = crate::keeper::StatusFile::open(&t.status)
                .map_err(|e| format!("its status file {}: {e}", t.status.display()))?;
            let task = RunningTask::adopt(
                order.run.job,
                place,
                t.keeper,
                t.keeper_start,
                start,
                limits,
                TaskFiles {
                    stdout: t.stdout.clone(),
                    stderr: t.stderr.clone(),
                    relayed: false,
                },
                crate::cgroup::TaskCgroup::existing(t.cgroup.clone()),
                status,
            )
            .in_container(t.container.clone())
            .leftovers_outlive(t.leftovers_outlive);
            tasks.push(task);
        }
        Ok(crate::gang::Gang { tasks })
    }

    /// Tells the tasks' keepers the lease's end, by which the agent's own fencing has
    /// killed them, once the controller gave a lease: a keeper kills no earlier than the
    /// agent would, so a fenced task gets its SIGTERM's grace.
    fn publish_lease(&self) {
        if !matches!(self.session.link(), Link::Up { .. }) {
            return;
        }
        let deadline = self.lease.end().map(|end| end.into_std());
        if let Err(e) = self.lease_file.publish(deadline) {
            tracing::warn!(error = %e, "cannot write the lease file: the tasks' keepers may stop them at the previous deadline");
        }
    }

    /// When fencing starts (a kill wait before the lease ends), unless it is renewed.
    fn fence_at(&self) -> Instant {
        self.lease
            .fence_at()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365))
    }

    /// Whether a lapse of the lease would stop anything: a run not stopped by it yet.
    fn lease_running(&self) -> bool {
        self.lease.length().is_some()
            && self.stopping.is_none()
            && self.runs.keys().any(|run| !self.fenced.contains(run))
    }

    /// How long the connection may stay silent before it is dropped.
    fn silence(&self) -> Duration {
        if self.endpoints.len() > 1 {
            replica_silence(self.keepalive, self.lease.length())
        } else {
            connection_silence(self.keepalive, self.lease.length())
        }
    }

    /// The lease is about to run out: the controller may declare this node lost and
    /// requeue its runs elsewhere once it has, so they stop here first: SIGTERM now,
    /// SIGKILL at the lease's end; reported NODE_FAIL. Runs launched after the lease ran
    /// out (orders still reach an agent the controller no longer hears) stop at once.
    async fn fence(&mut self) {
        // Pongs that arrived while the loop was busy elsewhere renew the lease first: only
        // a real silence fences.
        while let Conn::Open { ws, .. } = &mut self.conn {
            match ws.next().now_or_never() {
                Some(frame) => self.on_conn_event(ConnEvent::Received(frame)).await,
                None => break,
            }
        }
        let (Some(fence_at), Some(end)) = (self.lease.fence_at(), self.lease.end()) else {
            return;
        };
        let now = Instant::now();
        if !self.lease_running() || now < fence_at {
            return;
        }
        let kill_wait = end.saturating_duration_since(now);
        tracing::warn!(node = %self.node, runs = self.runs.len(), lease = ?self.lease.length(), ?kill_wait, "the lease was not renewed (no answer from the controller): stopping every run (fencing)");
        self.fenced.extend(self.runs.keys().copied());
        let result = self.session.handle(Input::LeaseExpired { kill_wait });
        self.apply(result).await;
    }

    /// The lease was renewed: runs launched from now on are protected by it again.
    fn renewed(&mut self) {
        self.fenced.clear();
    }

    /// Whether the agent may leave now.
    fn done(&mut self) -> bool {
        if self.stopping.is_none() || !self.session.is_idle() {
            return false;
        }
        let unacked =
            matches!(self.session.link(), Link::Up { .. }) && self.session.outbox_len() > 0;
        if !unacked {
            return true;
        }
        let now = Instant::now();
        let deadline = *self.flush_deadline.get_or_insert(now + self.flush_timeout);
        if now >= deadline {
            tracing::warn!(
                unacked = self.session.outbox_len(),
                "leaving with events the controller has not acknowledged"
            );
            return true;
        }
        false
    }

    async fn finish(mut self) -> Result<(), AgentError> {
        if let Conn::Open { ws, .. } = &mut self.conn {
            close_quietly(ws).await;
        }
        // The tasks' cgroups go with it (see `AgentCgroups`'s drop), and its lock: the
        // state directory is left as empty as its runs left it. With no run left, nothing
        // reads the lease file, and the directories of keepers' and runs' records are
        // empty (not removed when a record is left: a next life adopts from them).
        drop(self.cgroups.take());
        let state = &self.ctx.state_dir;
        if self.runs.is_empty() {
            let _ = std::fs::remove_file(state.join(crate::keeper::LEASE_FILE));
            let _ = std::fs::remove_dir(state.join(crate::keeper::TASKS_DIR));
            let _ = std::fs::remove_dir(state.join(record::RUNS_DIR));
        }
        let _ = std::fs::remove_file(state.join("lock"));
        match self.stopping.take() {
            Some(Stopping::Fatal(e)) => Err(e),
            _ => {
                tracing::info!(node = %self.node, "agent stopped");
                Ok(())
            }
        }
    }

    async fn begin_stopping(&mut self, why: Stopping) {
        let first = self.stopping.is_none();
        if let Stopping::Fatal(e) = &why {
            tracing::error!(node = %self.node, error = %e, runs = self.runs.len(), "giving up: stopping every run");
            if let Conn::Open { ws, .. } = &mut self.conn {
                close_quietly(ws).await;
            }
            self.conn = Conn::Closed;
            let _ = self.session.handle(Input::Disconnected);
        }
        if first || matches!(why, Stopping::Fatal(_)) {
            self.stopping = Some(why);
        }
        if first {
            // A shutdown only stops runs: it cannot fail, nor lead back here.
            match self.session.handle(Input::Shutdown) {
                Ok(actions) => {
                    for action in actions {
                        self.execute(action).await;
                    }
                }
                Err(e) => tracing::error!(error = %e, "shutdown refused by the protocol state"),
            }
        }
    }

    async fn on_report(&mut self, event: TaskEvent) {
        let run = event.run();
        match &event {
            TaskEvent::Started { .. } | TaskEvent::Completing { .. } => {}
            TaskEvent::LaunchFailed { .. } | TaskEvent::Ended { .. } => {
                self.runs.remove(&run);
            }
        }
        let result = self.session.handle(Input::Report(event));
        self.apply(result).await;
    }

    /// Carries out the session's decisions, or reacts to its error.
    async fn apply(&mut self, result: Result<Vec<Action>, SessionError>) {
        match result {
            Ok(actions) => {
                for action in actions {
                    self.execute(action).await;
                }
            }
            Err(e) if e.is_fatal() => {
                let err = match e {
                    SessionError::Refused { reason } => AgentError::Refused {
                        controller: self.controller.clone(),
                        node: self.node.clone(),
                        reason,
                    },
                    SessionError::VersionMismatch { theirs, ours } => AgentError::VersionMismatch {
                        controller: self.controller.clone(),
                        theirs,
                        ours,
                    },
                    other => AgentError::Internal {
                        what: other.to_string(),
                    },
                };
                self.begin_stopping(Stopping::Fatal(err)).await;
            }
            Err(e @ SessionError::Protocol { .. }) => {
                self.lose_connection(&e.to_string());
            }
            Err(e) => {
                tracing::error!(error = %e, "the agent's protocol state machine was fed an impossible input");
            }
        }
    }

    async fn execute(&mut self, action: Action) {
        match action {
            Action::Send(message) => self.send(&message).await,
            Action::Launch { order, node_id } => {
                let run = order.run;
                tracing::info!(
                    job = %run.job,
                    run = run.run,
                    user = %order.spec.user,
                    node_id = node_id.0,
                    "launching"
                );
                let spawned = worker::spawn_run(
                    order,
                    node_id,
                    Arc::clone(&self.ctx),
                    self.events_tx.clone(),
                );
                match spawned {
                    Ok(handle) => {
                        self.runs.insert(run, handle);
                    }
                    Err(e) => {
                        // Reported through the channel like any run's report: the session
                        // hears of it on the next turn of the loop.
                        let _ =
                            self.events_tx
                                .send(worker::Report::Event(TaskEvent::LaunchFailed {
                                    run,
                                    reason: format!("failed to start a thread for the run: {e}"),
                                    permanent: false,
                                }));
                    }
                }
            }
            Action::Stop { run, kill_wait } => {
                tracing::info!(job = %run.job, run = run.run, kill_wait_secs = kill_wait.as_secs(), "stop");
                if let Some(h) = self.runs.get(&run) {
                    h.send(RunCommand::Stop { kill_wait });
                }
            }
            Action::SetTimeLimit { run, limit } => {
                tracing::info!(%run, limit_ms = ?limit.map(|l| l.as_millis() as u64), "time limit");
                if let Some(h) = self.runs.get(&run) {
                    h.send(RunCommand::SetTimeLimit(limit));
                }
            }
            Action::Signal { run, signal } => {
                tracing::info!(job = %run.job, run = run.run, signal, "signal");
                if let Some(h) = self.runs.get(&run) {
                    h.send(RunCommand::Signal(signal));
                }
            }
            Action::ReadOutput { request, read } => {
                // A pread of a file that may be on a slow shared file system: off the loop,
                // the answer comes back through the reports.
                let outputs = Arc::clone(&self.ctx.outputs);
                let events = self.events_tx.clone();
                tokio::task::spawn_blocking(move || {
                    let answer = outputs.read(read);
                    let _ = events.send(worker::Report::Answer(AgentMessage::OutputRead {
                        request,
                        answer,
                    }));
                });
            }
        }
    }

    /// Sends the answer to a controller's request, if still connected (a new connection's
    /// controller asks again).
    async fn answer(&mut self, message: AgentMessage) {
        if matches!(self.conn, Conn::Open { .. }) {
            self.send(&message).await;
        }
    }

    /// Passes a step task's output to the controller, if connected (it is not kept).
    async fn relay(&mut self, chunk: cadre_proto::agent::OutputChunk) {
        if matches!(self.session.link(), Link::Up { .. }) {
            self.send(&AgentMessage::Output(chunk)).await;
        } else {
            tracing::debug!(run = %chunk.run, bytes = chunk.data.len(), "output while disconnected: dropped");
        }
    }

    async fn send(&mut self, message: &AgentMessage) {
        let Conn::Open { ws, .. } = &mut self.conn else {
            return;
        };
        let text = match serde_json::to_string(message) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(error = %e, "failed to encode a message for the controller");
                return;
            }
        };
        if let AgentMessage::Event(e) = message {
            tracing::debug!(seq = e.seq, event = ?e.event, "sending event");
        }
        if let Err(e) = ws.send(Message::text(text)).await {
            self.lose_connection(&format!("failed to send: {e}"));
        }
    }

    /// Drops the connection and schedules the next attempt.
    fn lose_connection(&mut self, why: &str) {
        if matches!(self.conn, Conn::Closed) {
            return;
        }
        let delay = self.backoff.next_delay();
        tracing::warn!(controller = %self.controller, reason = why, retry_in_ms = delay.as_millis() as u64, "connection lost");
        // Replicas: the next one first (a leader cut off would only time out again; a
        // standby refuses at once and the turn comes back).
        self.at = (self.at + 1) % self.endpoints.len();
        self.conn = Conn::Waiting {
            at: Instant::now() + delay,
        };
        self.lease.disconnected();
        let _ = self.session.handle(Input::Disconnected);
    }

    async fn on_conn_event(&mut self, event: ConnEvent) {
        match event {
            ConnEvent::ConnectDue => {
                let (address, endpoint) = &self.endpoints[self.at];
                self.controller = address.clone();
                let connecting = tokio::time::timeout(
                    self.connect_timeout,
                    connect(endpoint.clone(), self.key.clone(), None),
                );
                let timeout = self.connect_timeout;
                self.conn = Conn::Connecting(
                    connecting
                        .map(move |r| r.unwrap_or(Err(ConnectError::Timeout(timeout))))
                        .boxed(),
                );
            }
            ConnEvent::Connected(Ok(ws)) => {
                tracing::debug!(controller = %self.controller, "connected; saying hello");
                let now = Instant::now();
                self.lease.hello_sent(now);
                self.conn = Conn::Open {
                    ws,
                    last_heard: now,
                    last_ping: now,
                };
                let result = self.session.handle(Input::Connected);
                self.apply(result).await;
            }
            ConnEvent::Connected(Err(ConnectError::Unauthorized { status })) => {
                let err = AgentError::Unauthorized {
                    controller: self.controller.clone(),
                    status,
                };
                self.begin_stopping(Stopping::Fatal(err)).await;
            }
            ConnEvent::Connected(Err(e)) => {
                self.failures += 1;
                // The next controller (a standby refuses the agent: 503); the backoff once
                // every one was tried.
                self.at = (self.at + 1) % self.endpoints.len();
                let delay = if self.at == 0 {
                    self.backoff.next_delay()
                } else {
                    Duration::from_millis(100)
                };
                // The first failure and then one in 30: a controller that is down for
                // long must not flood the log.
                if self.failures == 1 || self.failures % 30 == 0 {
                    tracing::warn!(controller = %self.controller, error = %e, failures = self.failures, retry_in_ms = delay.as_millis() as u64, "cannot connect to the controller");
                } else {
                    tracing::debug!(controller = %self.controller, error = %e, failures = self.failures, "cannot connect to the controller");
                }
                self.conn = Conn::Waiting {
                    at: Instant::now() + delay,
                };
            }
            ConnEvent::Received(Some(Ok(message))) => {
                if let Conn::Open { last_heard, .. } = &mut self.conn {
                    *last_heard = Instant::now();
                }
                // Only once welcomed: the controller's engine then holds this connection
                // as the node's, and counts its silence from its last frame.
                if matches!(self.session.link(), Link::Up { .. }) && self.lease.heard(&message) {
                    self.renewed();
                }
                match message {
                    Message::Text(text) => match serde_json::from_str::<ControllerMessage>(&text) {
                        Ok(m) => self.on_message(m).await,
                        Err(e) => self.lose_connection(&format!(
                            "protocol violation by the controller: undecodable message: {e}"
                        )),
                    },
                    Message::Binary(_) => self
                        .lose_connection("protocol violation by the controller: a binary message"),
                    Message::Close(frame) => {
                        let why = frame.map_or_else(
                            || "closed by the controller".to_string(),
                            |f| format!("closed by the controller ({}: {})", f.code, f.reason),
                        );
                        self.lose_connection(&why);
                    }
                    Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
                }
            }
            ConnEvent::Received(Some(Err(e))) => self.lose_connection(&e.to_string()),
            ConnEvent::Received(None) => self.lose_connection("closed by the controller"),
            ConnEvent::PingDue => {
                if let Conn::Open { ws, last_ping, .. } = &mut self.conn {
                    *last_ping = Instant::now();
                    // Numbered, and counted from before it is sent: its pong renews the
                    // lease from then (see `lease`).
                    let number = self.lease.ping(*last_ping);
                    if let Err(e) = ws.send(Message::Ping(number.to_vec().into())).await {
                        self.lose_connection(&format!("failed to ping: {e}"));
                    }
                }
            }
            ConnEvent::Silent => {
                let why = format!("nothing from the controller in {:?}", self.silence());
                self.lose_connection(&why);
            }
        }
    }

    /// The controller's settings (configless), where the agent's own options say nothing:
    /// programs only where they are root's alone (else the node is drained, saying why),
    /// numbers within their bounds.
    fn apply_settings(&mut self, theirs: &AgentSettings) {
        let mut problems = Vec::new();
        let mut program = |path: &Option<String>, what: &str| -> Option<PathBuf> {
            let path = PathBuf::from(path.as_ref()?);
            match crate::prolog::trusted(&path, what, false) {
                Ok(()) => Some(path),
                Err(why) => {
                    problems.push(format!("the controller's {why}"));
                    None
                }
            }
        };
        let secs = |s: Option<u64>| s.map(|s| Duration::from_secs(s.clamp(1, 86_400)));
        let mut scripts = self.own_scripts.clone();
        if !self.own.prolog {
            scripts.prolog = program(&theirs.prolog, "prolog");
        }
        if !self.own.epilog {
            scripts.epilog = program(&theirs.epilog, "epilog");
        }
        if !self.own.task_prolog {
            scripts.task_prolog = program(&theirs.task_prolog, "task prolog");
        }
        if !self.own.task_epilog {
            scripts.task_epilog = program(&theirs.task_epilog, "task epilog");
        }
        if !self.own.prolog_timeout {
            scripts.timeout = secs(theirs.prolog_timeout_secs).or(self.own_scripts.timeout);
        }
        let mut health = self.own_health.clone();
        if !self.own.health_check_program {
            health.program = program(&theirs.health_check_program, "health check");
        }
        if !self.own.health_check_interval {
            health.interval = secs(theirs.health_check_interval_secs).unwrap_or(health.interval);
        }
        let kill_timeout = match self.own.kill_timeout {
            true => self.own_kill_timeout,
            false => secs(theirs.kill_timeout_secs).unwrap_or(self.own_kill_timeout),
        };
        if let Ok(mut s) = self.ctx.scripts.write() {
            *s = scripts;
        }
        if let Ok(mut t) = self.ctx.kill_timeout.write() {
            *t = kill_timeout;
        }
        self.checks_tx.send_if_modified(|current| {
            let changed = *current != health;
            *current = health;
            changed
        });
        self.settings_problem = crate::health::reason(&problems);
    }

    /// What the checks and the clock find, as the session tells it to the controller.
    async fn tell_health(&mut self) {
        let mut problems = self.checks_found.clone();
        problems.extend(self.clock_problem.clone());
        problems.extend(self.settings_problem.clone());
        problems.extend(self.left_running.clone());
        let reason = crate::health::reason(&problems);
        let result = self.session.handle(Input::Health(reason));
        self.apply(result).await;
    }

    async fn on_message(&mut self, message: ControllerMessage) {
        if let ControllerMessage::Welcome {
            now_ms, settings, ..
        } = &message
        {
            if let Some(theirs) = now_ms {
                let ours = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                self.clock_problem = crate::health::clock_problem(ours, *theirs);
            }
            self.apply_settings(&settings.clone().unwrap_or_default());
        }
        match &message {
            ControllerMessage::Welcome {
                node_id, lease_ms, ..
            } => {
                self.backoff.reset();
                self.failures = 0;
                if self.lease.welcomed(lease_ms.map(Duration::from_millis)) {
                    self.renewed();
                }
                self.keepalive = ping_interval(self.configured_keepalive, self.lease.length());
                tracing::info!(
                    controller = %self.controller,
                    node = %self.node,
                    node_id = node_id.0,
                    running = self.runs.len(),
                    unacked = self.session.outbox_len(),
                    "welcomed by the controller"
                );
            }
            ControllerMessage::Ack { seq } => tracing::debug!(seq, "ack"),
            _ => {}
        }
        let welcome = matches!(message, ControllerMessage::Welcome { .. });
        let result = self.session.handle(Input::Message(message));
        self.apply(result).await;
        if welcome {
            // The clock, checked at the welcome, is told once the link is up.
            self.tell_health().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_agent_on_one_state_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock_state_dir(dir.path()).unwrap();
        let err = lock_state_dir(dir.path()).unwrap_err();
        assert!(err.to_string().contains("another agent uses it"), "{err}");
        drop(first);
        lock_state_dir(dir.path()).unwrap();
    }

    #[test]
    fn controller_addresses_are_tcp_or_unix() {
        let p = |a: &str| Endpoint::parse(a, None);
        let tcp = |authority: &str| {
            Ok(Endpoint::Tcp {
                authority: authority.into(),
                tls: None,
            })
        };
        assert_eq!(p("http://ctl:6817"), tcp("ctl:6817"));
        assert_eq!(p("http://ctl/"), tcp("ctl:80"));
        assert_eq!(p("ws://[::1]:9000"), tcp("[::1]:9000"));
        assert_eq!(p("http://[::1]"), tcp("[::1]:80"));
        assert_eq!(
            p("unix:///run/cadre.sock"),
            Ok(Endpoint::Unix {
                path: "/run/cadre.sock".into()
            })
        );
        assert!(
            p("unix://run/cadre.sock")
                .unwrap_err()
                .contains("absolute path")
        );
        assert!(
            p("https://ctl:443")
                .unwrap_err()
                .contains("needs the cluster's CA"),
            "https without the CA"
        );
        assert!(p("ctl:6817").unwrap_err().contains("expected https://"));
        assert!(
            p("http://ctl:port")
                .unwrap_err()
                .contains("not a port number")
        );
        assert!(p("http://ctl:1/api").unwrap_err().contains("has a path"));
        assert_eq!(
            Endpoint::Unix { path: "/x".into() }.request_uri(),
            "ws://localhost/agent/v1/connect"
        );
        // Over TLS: the certificate's name is the host, without the port or brackets.
        let (ca, _) = cadre_tls::Ca::create(time_now()).unwrap();
        let config =
            cadre_tls::client_config(ca.cert_pem(), std::path::Path::new("ca"), None).unwrap();
        for (address, authority, name) in [
            (
                "https://ctl.example:6817",
                "ctl.example:6817",
                "ctl.example",
            ),
            ("https://ctl.example", "ctl.example:443", "ctl.example"),
            ("wss://[::1]:6817", "[::1]:6817", "::1"),
            ("https://10.0.0.1:6817", "10.0.0.1:6817", "10.0.0.1"),
        ] {
            match Endpoint::parse(address, Some(&config)) {
                Ok(Endpoint::Tcp {
                    authority: a,
                    tls: Some(t),
                }) => {
                    assert_eq!(a, authority);
                    assert_eq!(
                        t.name,
                        rustls::pki_types::ServerName::try_from(name).unwrap()
                    );
                }
                other => panic!("{address}: {other:?}"),
            }
        }
    }

    fn time_now() -> cadre_tls::OffsetDateTime {
        cadre_tls::OffsetDateTime::now_utc()
    }

    #[test]
    fn an_agent_of_replicas_leaves_a_silent_leader_before_fencing_would_start() {
        let s = Duration::from_secs;
        let lease = s(30);
        let every = ping_interval(DEFAULT_KEEPALIVE, Some(lease));
        let silence = replica_silence(every, Some(lease));
        assert_eq!(silence, s(15));
        assert!(
            silence < lease * 2 / 3,
            "fencing starts two thirds into the lease"
        );
        // One controller: the connection is kept for a whole lease, as before.
        assert_eq!(connection_silence(every, Some(lease)), lease);
    }

    #[test]
    fn the_agent_pings_every_sixth_of_the_lease_at_most() {
        let s = Duration::from_secs;
        assert_eq!(ping_interval(DEFAULT_KEEPALIVE, Some(s(30))), s(5));
        assert_eq!(
            ping_interval(DEFAULT_KEEPALIVE, Some(s(120))),
            DEFAULT_KEEPALIVE
        );
        assert_eq!(ping_interval(DEFAULT_KEEPALIVE, None), DEFAULT_KEEPALIVE);
        assert_eq!(
            ping_interval(DEFAULT_KEEPALIVE, Some(Duration::from_millis(3))),
            Duration::from_millis(10)
        );
    }

    #[test]
    fn reconnect_delays_double_up_to_the_max_and_reset() {
        let mut b = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        let ms: Vec<u128> = (0..8).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(ms, vec![50, 100, 200, 400, 800, 1600, 2000, 2000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(50));
    }

    #[test]
    fn the_key_never_shows_in_the_config_debug_output() {
        let c = AgentConfig::new("http://h:1", "s3cr3t-key", "n1", "/tmp/x");
        let text = format!("{c:?}");
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(text.contains("<redacted>"));
    }

    #[test]
    fn a_bad_key_or_node_is_refused_before_connecting() {
        let mut c = AgentConfig::new("http://h:1", "", "n1", "/tmp/x");
        let plain = Endpoint::parse("http://h:1", None).unwrap();
        let msg = |c: &AgentConfig| check_config(c, &plain).unwrap_err().to_string();
        assert_eq!(
            msg(&c),
            "invalid agent configuration: the agent key is empty"
        );
        c.key = "two words".into();
        assert!(msg(&c).contains("printable ASCII"));
        c.key = "k".into();
        c.state_dir = "relative".into();
        assert!(msg(&c).contains("not an absolute path"));
    }
}
