//! `cadre bench agents`: what many connected nodes cost the controller, measured from
//! outside, and how soon it notices one gone.
//!
//! **Given** `--agents N`: a controller (`cadre server`, its own process, SQLite in a
//! temporary data directory) listening over TLS on a free port of 127.0.0.1 with a
//! cluster file of N tiny nodes (1 core, 256 MiB, no GPU), `--node-lease` and
//! `--lease-margin`. In this
//! process, N simulated agents as tokio tasks, each one node, each its own WebSocket over
//! TLS from a loopback address of its own (127.0.0.2, 127.0.0.3, ...: the controller caps
//! the connections of one peer address, and real nodes have an address each).
//!
//! **The simulated agent speaks the real protocol over real TLS**: its connection is
//! opened by the agent's own code ([`cadre_agent::service::open_connection`]); it says
//! `Hello` (protocol [`PROTOCOL_VERSION`], a node report of exactly the described shape),
//! waits for the `Welcome`, then pings as the real agent does, every
//! [`cadre_agent::service::ping_interval`] (a sixth of the lease at the default keepalive),
//! drops a connection silent for as long as the real agent does
//! ([`cadre_agent::service::connection_silence`]) and reconnects with backoff, to the next
//! controller of its list when one refuses it (a standby) or cannot be reached, as the real
//! agent does. It runs nothing (this bench submits no job); a launch order is answered
//! with `Started` at once, and the run is then reported alive in every later hello until
//! the controller stops it (what `cadre bench failover` relies on). The first `--enrol` nodes enrol first, each with a join
//! token of its own, through the agent's own enrolment ([`cadre_agent::enrol::enrol`]:
//! the node's key and certificate request made here, the certificate signed by the
//! controller) and connect with their certificate (mutual TLS); the others connect over
//! TLS with the cluster's agent key as a bearer token, as `cadre up`'s local agents do.
//!
//! **Measured**, and printed (never asserted):
//! - the enrolment: join tokens made through the API, then every enrolment timed from the
//!   first request to the last certificate (`--enrol-concurrency` at once);
//! - the time for all N agents to be connected as the controller reports it (`GET
//!   /nodes` on the Unix socket);
//! - over `--seconds` once all are connected: the controller's CPU (utime + stime of
//!   `/proc/PID/stat`, as a percentage of one core) and resident memory (`VmRSS`,
//!   `VmHWM`), this process's own CPU and memory (it shares the machine), the pings sent,
//!   and before the agents connect, the controller's CPU with none connected;
//! - false losses: nodes other than the two stopped on purpose that the controller logged
//!   as disconnected, reconnected or lost from the moment all were connected to the end;
//! - a lost node, two ways at once: one agent drops its connection without a close frame
//!   (as when its process dies: the kernel closes the socket), another goes silent with
//!   its connection left open (as when its host loses power or its network); for each,
//!   the time until the controller reports it not connected, and until it reports it
//!   down, polled every 100 ms with `GET /nodes/NAME`, against the target of the lease +
//!   2 s (the controller declares a node lost the lease and its margin after its last
//!   frame, which came up to a ping interval before the stop).
//!
//! Open files: each agent holds a socket here and one in the controller; the soft limit
//! of `RLIMIT_NOFILE` is raised for this process (and so for the controller it starts,
//! which inherits it), and the bench refuses to start when it cannot be raised enough.

use crate::api::{DataDir, cadre, rss_mib, stop, wait_ready};
use anyhow::{Context, Result, bail};
use cadre_agent::service::{
    AgentSocket, DEFAULT_KEEPALIVE, connection_silence, open_connection, ping_interval,
};
use cadre_client::{Connection, Target};
use cadre_core::cluster::{NodeAvail, NodeId};
use cadre_core::job::JobState;
use cadre_proto::agent::{
    AgentMessage, ControllerMessage, Hello, NodeReport, PROTOCOL_VERSION, RunRef, SequencedEvent,
    TaskEvent,
};
use cadre_proto::api::{JoinTokenRequest, JoinTokenView, NodeList, NodeView};
use clap::Args;
use futures_util::{SinkExt, StreamExt};
use hyper::Method;
use serde::Serialize;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, oneshot};
use tokio_tungstenite::tungstenite::Message;

#[derive(Args, Debug)]
pub struct AgentsBenchArgs {
    /// Simulated agents, one node each.
    #[arg(long, default_value_t = 1000)]
    agents: u32,
    /// The controller's --node-lease in seconds (its default); `--node-timeout` is its old
    /// name.
    #[arg(long, alias = "node-timeout", default_value_t = 30)]
    node_lease: u64,
    /// The controller's --lease-margin in seconds (its default).
    #[arg(long, default_value_t = 2)]
    lease_margin: u64,
    /// Nodes that enrol first, with a join token each, and connect with their own
    /// certificate [default: the agents, at most 1000]; the others connect with the
    /// cluster's agent key over TLS.
    #[arg(long)]
    enrol: Option<u32>,
    /// Enrolments in flight at once.
    #[arg(long, default_value_t = 16)]
    enrol_concurrency: u32,
    /// Seconds over which the controller is measured once every agent is connected.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Keep the data directory (default: a temporary one, removed after).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Print one JSON line instead of a table.
    #[arg(long)]
    json: bool,
}

/// Connections being opened at once (TCP, TLS, WebSocket upgrade, hello and welcome): the
/// controller closes a TLS handshake that does not end within its header timeout, and
/// thousands started at once on two cores would not.
const CONNECTING_AT_ONCE: usize = 64;
/// How long one connection attempt may take, from TCP to the welcome.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a node stopped on purpose is looked at.
const LOSS_POLL: Duration = Duration::from_millis(100);

#[derive(Serialize)]
struct AgentsReport {
    agents: u32,
    /// Agents that enrolled and connect with their node's certificate.
    enrolled: u32,
    /// Agents that connect with the cluster's agent key over TLS.
    keyed: u32,
    /// The controller's lease and margin, as configured.
    node_lease_s: u64,
    lease_margin_s: u64,
    /// The lease its welcomes granted the simulated agents.
    lease_s: f64,
    ping_interval_s: f64,
    join_tokens_s: f64,
    enrol_s: f64,
    enrol_per_s: f64,
    enrol_concurrency: u32,
    /// From the first connection to the controller reporting every node connected.
    connect_s: f64,
    /// The controller's CPU before any agent connected, over `idle_s`.
    idle_s: f64,
    controller_idle_cpu_pct: f64,
    /// The measured window, with every agent connected.
    seconds: f64,
    pings_per_s: f64,
    controller_cpu_pct: f64,
    controller_rss_mib: f64,
    controller_peak_rss_mib: f64,
    bench_cpu_pct: f64,
    bench_rss_mib: f64,
    /// Nodes the controller reports connected at the end of the window.
    connected: usize,
    /// Nodes not stopped on purpose that the controller logged as disconnected,
    /// reconnected or lost, from all connected to the end.
    false_losses: usize,
    false_loss_nodes: Vec<String>,
    /// Connections the simulated agents saw drop, over the same time (the stopped ones
    /// not counted).
    agent_reconnects: u64,
    /// The agent that dropped its connection without a close frame.
    lost_closed: LossReport,
    /// The agent that went silent with its connection open (none with a single agent).
    lost_silent: Option<LossReport>,
    /// The target for declaring a node lost: the lease + 2 s.
    target_lost_s: f64,
    /// Whether both stopped nodes were declared down within the target.
    target_met: bool,
}

#[derive(Serialize, Clone, Debug)]
struct LossReport {
    node: String,
    /// From the stop to the controller reporting the node not connected.
    not_connected_s: Option<f64>,
    /// From the stop to the controller reporting the node down.
    down_s: Option<f64>,
    /// For the silent agent: how long before the stop it last sent anything (its last
    /// ping, or its hello); the controller's silence is counted from then.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_sent_before_stop_s: Option<f64>,
}

/// How a simulated agent ends, when told to.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Fate {
    /// Drop the connection without a close frame (the kernel closes the socket).
    Close,
    /// Send and read nothing more, the connection left open.
    Silence,
}

/// What the simulated agents have seen, together.
#[derive(Default)]
pub(crate) struct Tally {
    /// Agents welcomed on their current connection.
    pub(crate) up: AtomicUsize,
    /// Connections that dropped under an agent.
    drops: AtomicU64,
    pings: AtomicU64,
    /// The lease of the welcomes, in ms.
    lease_ms: AtomicU64,
    /// The first errors that stopped an agent for good.
    fatal: Mutex<Vec<String>>,
    /// Launch orders answered with `Started`.
    pub(crate) launched: AtomicU64,
    /// Connection attempts that failed (retried).
    failed: AtomicU64,
    last_failure: Mutex<Option<String>>,
    /// When the agent told to go silent last sent anything.
    silent_since: Mutex<Option<std::time::Instant>>,
}

impl Tally {
    fn fatal(&self, why: String) {
        if let Ok(mut f) = self.fatal.lock()
            && f.len() < 5
        {
            f.push(why);
        }
    }
    pub(crate) fn first_fatal(&self) -> Option<String> {
        self.fatal.lock().ok().and_then(|f| f.first().cloned())
    }
}

/// One simulated agent's identity and where it connects from.
pub(crate) struct AgentSpec {
    pub(crate) node: String,
    /// The cluster's agent key, or empty when the node shows its certificate.
    pub(crate) key: String,
    pub(crate) tls: Arc<rustls::ClientConfig>,
    pub(crate) from: IpAddr,
}

/// What a simulated agent runs, kept across its connections as the real agent keeps it:
/// the runs it was told to launch (reported alive in each hello until stopped) and the
/// events not yet acknowledged (sent again in each hello).
struct AgentRuns {
    running: BTreeSet<RunRef>,
    outbox: Vec<SequencedEvent>,
    /// This life of the agent: its first event's number.
    life: u64,
    next_seq: u64,
}

impl AgentRuns {
    fn new() -> AgentRuns {
        // Numbered from the start time, as the real agent's are.
        let life = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_millis() as u64);
        AgentRuns {
            running: BTreeSet::new(),
            outbox: Vec::new(),
            life,
            next_seq: life,
        }
    }

    /// Records `event` in the outbox and returns the message that sends it.
    fn event(&mut self, event: TaskEvent) -> AgentMessage {
        let sequenced = SequencedEvent {
            seq: self.next_seq,
            event,
        };
        self.next_seq += 1;
        self.outbox.push(sequenced.clone());
        AgentMessage::Event(sequenced)
    }

    /// What the controller's message asks of the node, answered as a node whose tasks
    /// start at once and end only when stopped: the message to send back, if any.
    fn answer(&mut self, message: ControllerMessage) -> Option<AgentMessage> {
        match message {
            ControllerMessage::Launch(order) => {
                let run = order.run;
                // A launch sent again (a replay) is of a run that runs already.
                self.running
                    .insert(run)
                    .then(|| self.event(TaskEvent::Started { run }))
            }
            ControllerMessage::Stop { run, .. } => {
                self.running.remove(&run);
                Some(self.event(TaskEvent::Ended {
                    run,
                    state: JobState::Cancelled,
                    exit_code: None,
                    signal: Some(15),
                    drain: None,
                }))
            }
            ControllerMessage::Ack { seq } => {
                self.outbox.retain(|e| e.seq > seq);
                None
            }
            _ => None,
        }
    }
}

pub(crate) fn node_name(i: u32) -> String {
    format!("n{}", i + 1)
}

/// The loopback address agent `i` connects from: 127.0.0.2, 127.0.0.3, ... (the
/// controller is on 127.0.0.1).
pub(crate) fn loopback(i: u32) -> IpAddr {
    let n = i + 2;
    IpAddr::V4(Ipv4Addr::new(127, (n >> 16) as u8, (n >> 8) as u8, n as u8))
}

/// Raises this process's soft limit of open files to `need` (the controller started
/// after inherits it), or says why it cannot.
pub(crate) fn raise_open_files(need: u64) -> Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("getrlimit(RLIMIT_NOFILE)")?;
    if soft >= need {
        return Ok(soft);
    }
    let result = if hard >= need {
        setrlimit(Resource::RLIMIT_NOFILE, need, hard)
    } else {
        // Raising the hard limit takes CAP_SYS_RESOURCE.
        setrlimit(Resource::RLIMIT_NOFILE, need, need)
    };
    result.map_err(|e| {
        anyhow::anyhow!(
            "the agents need about {need} open files in this process and as many in the \
             controller; the limit is {soft} (hard {hard}) and could not be raised ({e}): \
             raise it (`ulimit -n {need}`, LimitNOFILE= in a unit) or run fewer agents"
        )
    })?;
    Ok(need)
}

/// CPU time (user + system) of process `pid` so far.
fn cpu_time(pid: u32) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("failed to read /proc/{pid}/stat"))?;
    let ticks = cpu_ticks(&stat).with_context(|| format!("unreadable /proc/{pid}/stat"))?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&t| t > 0)
        .unwrap_or(100) as u64;
    Ok(Duration::from_micros(ticks * 1_000_000 / hz))
}

/// utime + stime, in clock ticks, of a `/proc/PID/stat` line.
fn cpu_ticks(stat: &str) -> Option<u64> {
    // The command name may hold spaces and parentheses: the fields follow the last `)`,
    // starting with the 3rd; utime and stime are the 14th and 15th.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(14 - 3);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// A field of `/proc/PID/status` in MiB (`VmRSS`, `VmHWM`).
fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// CPU time over a stretch of wall-clock time, as a percentage of one core.
struct CpuWatch {
    pid: u32,
    cpu: Duration,
    wall: Instant,
}

impl CpuWatch {
    fn start(pid: u32) -> Result<CpuWatch> {
        Ok(CpuWatch {
            pid,
            cpu: cpu_time(pid)?,
            wall: Instant::now(),
        })
    }
    fn percent(&self) -> Result<f64> {
        let cpu = cpu_time(self.pid)?.saturating_sub(self.cpu);
        Ok(100.0 * cpu.as_secs_f64() / self.wall.elapsed().as_secs_f64().max(1e-9))
    }
}

pub fn run_agents(args: &AgentsBenchArgs) -> Result<ExitCode> {
    anyhow::ensure!(args.agents > 0, "--agents must be positive");
    anyhow::ensure!(args.node_lease > 0, "--node-lease must be positive");
    anyhow::ensure!(args.seconds > 0, "--seconds must be positive");
    anyhow::ensure!(
        args.enrol_concurrency > 0,
        "--enrol-concurrency must be positive"
    );
    let enrol = args.enrol.unwrap_or(args.agents.min(1000));
    anyhow::ensure!(
        enrol <= args.agents,
        "--enrol {enrol} is more than the {} agents",
        args.agents
    );
    anyhow::ensure!(
        args.agents < (1 << 24) - 2,
        "--agents {} does not fit in 127.0.0.0/8",
        args.agents
    );
    raise_open_files(u64::from(args.agents) + 1024)?;
    let dir = DataDir::new(&args.data_dir)?;
    let cluster_file = dir.path().join("cluster.toml");
    std::fs::write(
        &cluster_file,
        crate::tiny_cluster("bench-agents", &format!("n[1-{}]", args.agents)),
    )?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .context("no free port on 127.0.0.1")?;
    let listen = format!("127.0.0.1:{port}");
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path)?;
    let mut server = cadre()?;
    // The controller is configured by its arguments alone (a CADRE_DATABASE or
    // CADRE_INSECURE of the caller's would change what is measured).
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CADRE_") {
            server.env_remove(name);
        }
    }
    let run_dir = cadre_client::locate::sibling_run_dir(dir.path());
    let mut child = server
        .arg("server")
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--run-dir")
        .arg(&run_dir)
        .arg("--cluster")
        .arg(&cluster_file)
        .args(["--listen", &listen, "--node-lease"])
        .arg(args.node_lease.to_string())
        .arg("--lease-margin")
        .arg(args.lease_margin.to_string())
        .env("CADRE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("failed to start the controller")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let bench = Bench {
        args,
        enrol,
        dir: dir.path(),
        run_dir: &run_dir,
        url: format!("https://{listen}"),
        log: log_path.clone(),
    };
    let result = rt.block_on(bench.run(&mut child));
    // The agents go first, so that the controller's last words are not of them.
    rt.shutdown_timeout(Duration::from_secs(5));
    stop(child);
    let report = result.with_context(|| log_tail(&log_path))?;
    print(&report, args.json)?;
    Ok(ExitCode::SUCCESS)
}

struct Bench<'a> {
    args: &'a AgentsBenchArgs,
    enrol: u32,
    dir: &'a Path,
    run_dir: &'a Path,
    url: String,
    log: PathBuf,
}

impl Bench<'_> {
    async fn run(&self, child: &mut Child) -> Result<AgentsReport> {
        let args = self.args;
        let target = Target::Unix(cadre_client::locate::socket_in(self.run_dir));
        wait_ready(&target, child).await?;
        let pid = child.id();
        let ca_path = self.run_dir.join(cadre_tls::CA_CERT_FILE);
        let ca_pem = std::fs::read_to_string(&ca_path)
            .with_context(|| format!("the controller's CA {}", ca_path.display()))?;
        let key = std::fs::read_to_string(self.dir.join("agent.key"))
            .context("the cluster's agent key")?
            .trim()
            .to_owned();
        let cluster = cadre_core::config::load_cluster(
            &crate::tiny_cluster("bench-agents", &format!("n[1-{}]", args.agents)),
            "the bench's cluster",
        )?;
        let shape = cluster.shape(NodeId(0)).clone();

        // Join tokens, made as an administrator would, then the enrolments.
        let bar = progress(u64::from(self.enrol), "join tokens");
        let t = Instant::now();
        let mut conn = Connection::open(&target, None).await?;
        let mut tokens = Vec::with_capacity(self.enrol as usize);
        for i in 0..self.enrol {
            let token: JoinTokenView = conn
                .call(
                    Method::POST,
                    "/nodes/join-tokens",
                    Some(&JoinTokenRequest {
                        node: Some(node_name(i)),
                        ttl_secs: None,
                    }),
                )
                .await?;
            tokens.push(token.token);
            bar.inc(1);
        }
        let join_tokens_s = t.elapsed().as_secs_f64();
        bar.finish_and_clear();
        let (enrolled, enrol_s) = self.enrol_all(tokens, &ca_pem, &ca_path).await?;

        // The controller with every node described and none connected.
        let idle = Duration::from_secs(args.seconds.min(5));
        let watch = CpuWatch::start(pid)?;
        tokio::time::sleep(idle).await;
        let controller_idle_cpu_pct = watch.percent()?;

        // Every agent, connected.
        let keyed_tls = cadre_tls::client_config(&ca_pem, &ca_path, None)?;
        let tally = Arc::new(Tally::default());
        let gate = Arc::new(Semaphore::new(CONNECTING_AT_ONCE));
        let report = Arc::new(NodeReport {
            shape,
            emulated_gpus: false,
            address: String::new(),
            notes: vec!["a simulated agent of cadre bench agents".into()],
            container_runtime: None,
        });
        let mut enrolled = enrolled.into_iter();
        let mut orders = Vec::new();
        let mut tasks = Vec::with_capacity(args.agents as usize);
        let t = Instant::now();
        for i in 0..args.agents {
            let (key, tls) = match enrolled.next() {
                Some(tls) => (String::new(), tls),
                None => (key.clone(), keyed_tls.clone()),
            };
            let spec = AgentSpec {
                node: node_name(i),
                key,
                tls,
                from: loopback(i),
            };
            // The last two agents are stopped on purpose at the end.
            let order = if i + 2 >= args.agents {
                let (tx, rx) = oneshot::channel();
                orders.push((spec.node.clone(), tx));
                Some(rx)
            } else {
                None
            };
            tasks.push(tokio::spawn(simulated_agent(
                spec,
                Arc::from([self.url.clone()]),
                Arc::clone(&report),
                Arc::clone(&gate),
                Arc::clone(&tally),
                order,
            )));
        }
        self.wait_connected(&target, &tally).await?;
        let connect_s = t.elapsed().as_secs_f64();
        let lease = Duration::from_millis(tally.lease_ms.load(Ordering::Relaxed));
        let ping_every = ping_interval(DEFAULT_KEEPALIVE, Some(lease));

        // The measured window.
        let log_from = std::fs::metadata(&self.log).map_or(0, |m| m.len());
        let drops_before = tally.drops.load(Ordering::Relaxed);
        let pings_before = tally.pings.load(Ordering::Relaxed);
        let controller = CpuWatch::start(pid)?;
        let own = CpuWatch::start(std::process::id())?;
        let bar = progress(args.seconds, "seconds measured");
        let window = Instant::now();
        for _ in 0..args.seconds {
            tokio::time::sleep(Duration::from_secs(1)).await;
            bar.inc(1);
        }
        let seconds = window.elapsed().as_secs_f64();
        let controller_cpu_pct = controller.percent()?;
        let bench_cpu_pct = own.percent()?;
        let pings = tally.pings.load(Ordering::Relaxed) - pings_before;
        let controller_rss_mib = rss_mib(pid);
        let controller_peak_rss_mib = status_mib(pid, "VmHWM:");
        let bench_rss_mib = rss_mib(std::process::id());
        bar.finish_and_clear();
        let nodes: NodeList = Connection::open(&target, None)
            .await?
            .call::<(), _>(Method::GET, "/nodes", None)
            .await?;
        let connected = nodes.nodes.iter().filter(|n| n.connected).count();

        // Two nodes lost, two ways, at once.
        let mut victims = Vec::new();
        let stopped_at = Instant::now();
        for ((node, tx), fate) in orders.into_iter().rev().zip([Fate::Close, Fate::Silence]) {
            let _ = tx.send(fate);
            victims.push(node);
        }
        let losses = self
            .watch_losses(&target, &victims, stopped_at, lease)
            .await?;
        // What the controller logged of the others, from all connected to now.
        let victims_set: BTreeSet<&str> = victims.iter().map(String::as_str).collect();
        let false_loss_nodes = logged_losses(&self.log, log_from)?
            .into_iter()
            .filter(|n| !victims_set.contains(n.as_str()))
            .collect::<Vec<_>>();
        // The stopped agents count no drop: one never connects again, the other no longer
        // reads its connection.
        let agent_reconnects = tally.drops.load(Ordering::Relaxed) - drops_before;
        for t in tasks {
            t.abort();
        }
        let mut losses = losses.into_iter();
        let lost_closed = losses.next().context("no agent was stopped")?;
        let lost_silent = losses.next().map(|mut l| {
            l.last_sent_before_stop_s = tally
                .silent_since
                .lock()
                .ok()
                .and_then(|t| *t)
                .map(|t| stopped_at.saturating_duration_since(t).as_secs_f64());
            l
        });
        let target_lost_s = lease.as_secs_f64() + 2.0;
        let target_met = [Some(&lost_closed), lost_silent.as_ref()]
            .into_iter()
            .flatten()
            .all(|l| l.down_s.is_some_and(|s| s <= target_lost_s));
        Ok(AgentsReport {
            agents: args.agents,
            enrolled: self.enrol,
            keyed: args.agents - self.enrol,
            node_lease_s: args.node_lease,
            lease_margin_s: args.lease_margin,
            lease_s: lease.as_secs_f64(),
            ping_interval_s: ping_every.as_secs_f64(),
            join_tokens_s,
            enrol_s,
            enrol_per_s: if enrol_s > 0.0 {
                f64::from(self.enrol) / enrol_s
            } else {
                0.0
            },
            enrol_concurrency: args.enrol_concurrency,
            connect_s,
            idle_s: idle.as_secs_f64(),
            controller_idle_cpu_pct,
            seconds,
            pings_per_s: pings as f64 / seconds,
            controller_cpu_pct,
            controller_rss_mib,
            controller_peak_rss_mib,
            bench_cpu_pct,
            bench_rss_mib,
            connected,
            false_losses: false_loss_nodes.len(),
            false_loss_nodes,
            agent_reconnects,
            lost_closed,
            lost_silent,
            target_lost_s,
            target_met,
        })
    }

    /// Enrols the first nodes, one join token each, `--enrol-concurrency` at once: each
    /// node's TLS configuration (its certificate), and the seconds from the first request
    /// to the last certificate.
    async fn enrol_all(
        &self,
        tokens: Vec<String>,
        ca_pem: &str,
        ca_path: &Path,
    ) -> Result<(Vec<Arc<rustls::ClientConfig>>, f64)> {
        let bar = progress(tokens.len() as u64, "nodes enrolled");
        let gate = Arc::new(Semaphore::new(self.args.enrol_concurrency as usize));
        let t = Instant::now();
        let mut tasks = Vec::with_capacity(tokens.len());
        for (i, token) in tokens.into_iter().enumerate() {
            let (gate, bar, url) = (Arc::clone(&gate), bar.clone(), self.url.clone());
            let (ca_pem, ca_path, dir) = (
                ca_pem.to_owned(),
                ca_path.to_owned(),
                self.dir.join("nodes").join(node_name(i as u32)),
            );
            tasks.push(tokio::spawn(async move {
                let _permit = gate.acquire().await?;
                let node = node_name(i as u32);
                let identity = cadre_agent::enrol::enrol(
                    &url,
                    &node,
                    None,
                    &token,
                    &ca_pem,
                    &ca_path,
                    Duration::from_secs(60),
                )
                .await
                .with_context(|| format!("node {node} could not enrol"))?;
                bar.inc(1);
                // The files are not written: `dir` only names them in messages.
                anyhow::Ok(identity.client_config(&dir)?)
            }));
        }
        let mut configs = Vec::with_capacity(tasks.len());
        for task in tasks {
            configs.push(task.await??);
        }
        let seconds = t.elapsed().as_secs_f64();
        bar.finish_and_clear();
        Ok((configs, seconds))
    }

    /// Waits until the controller reports every node connected.
    async fn wait_connected(&self, target: &Target, tally: &Tally) -> Result<()> {
        let n = self.args.agents as usize;
        let bar = progress(n as u64, "agents connected");
        let deadline =
            Instant::now() + Duration::from_secs(60) + Duration::from_millis(20) * n as u32;
        // Each look lists every node: less often on a large cluster.
        let every = Duration::from_millis(100 + n as u64 / 20);
        let mut conn = Connection::open(target, None).await?;
        loop {
            tokio::time::sleep(every).await;
            bar.set_position(tally.up.load(Ordering::Relaxed) as u64);
            if let Some(why) = tally.first_fatal() {
                bail!("a simulated agent gave up: {why}");
            }
            let nodes: NodeList = conn.call::<(), _>(Method::GET, "/nodes", None).await?;
            let connected = nodes.nodes.iter().filter(|n| n.connected).count();
            if connected == n {
                bar.finish_and_clear();
                return Ok(());
            }
            if Instant::now() >= deadline {
                let last = tally
                    .last_failure
                    .lock()
                    .ok()
                    .and_then(|f| f.clone())
                    .map(|f| format!("; the last failed attempt: {f}"))
                    .unwrap_or_default();
                bail!(
                    "only {connected} of {n} agents connected in time ({} connection attempts failed{last})",
                    tally.failed.load(Ordering::Relaxed),
                );
            }
        }
    }

    /// Polls the stopped nodes until the controller reports each down (or a generous
    /// time has passed): when each was first reported not connected, and down.
    async fn watch_losses(
        &self,
        target: &Target,
        victims: &[String],
        stopped_at: Instant,
        lease: Duration,
    ) -> Result<Vec<LossReport>> {
        let mut losses: Vec<LossReport> = victims
            .iter()
            .map(|node| LossReport {
                node: node.clone(),
                not_connected_s: None,
                down_s: None,
                last_sent_before_stop_s: None,
            })
            .collect();
        let bar = indicatif::ProgressBar::new_spinner().with_message(format!(
            "waiting for the controller to find {} lost",
            victims.join(" and ")
        ));
        let give_up = stopped_at
            + lease
            + Duration::from_secs(self.args.lease_margin)
            + Duration::from_secs(30);
        let mut conn = Connection::open(target, None).await?;
        while losses.iter().any(|l| l.down_s.is_none()) && Instant::now() < give_up {
            bar.tick();
            for loss in losses.iter_mut().filter(|l| l.down_s.is_none()) {
                let view: NodeView = conn
                    .call::<(), _>(Method::GET, &format!("/nodes/{}", loss.node), None)
                    .await?;
                let at = stopped_at.elapsed().as_secs_f64();
                if !view.connected && loss.not_connected_s.is_none() {
                    loss.not_connected_s = Some(at);
                }
                if view.avail == NodeAvail::Down {
                    loss.down_s = Some(at);
                }
            }
            tokio::time::sleep(LOSS_POLL).await;
        }
        bar.finish_and_clear();
        Ok(losses)
    }
}

/// The last lines of the controller's log, to go with an error (a temporary data
/// directory is gone by the time it is read).
pub(crate) fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
    format!("the controller's log ended with:\n{tail}")
}

pub(crate) fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} ({elapsed})")
    {
        bar.set_style(style);
    }
    bar.set_message(what.to_owned());
    bar
}

/// The nodes the controller's log says were disconnected, reconnected or lost, in what
/// it wrote from byte `from` on.
fn logged_losses(log: &Path, from: u64) -> Result<BTreeSet<String>> {
    let text = std::fs::read(log).with_context(|| format!("failed to read {}", log.display()))?;
    let text = String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default());
    Ok(text
        .lines()
        .filter(|l| {
            l.contains("agent disconnected")
                || l.contains("agent reconnected")
                || l.contains("agent lost")
        })
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("node="))
                .map(str::to_owned)
        })
        .collect())
}

/// Why a simulated agent's connection ended.
enum Ended {
    /// It dropped (the controller closed it, or it went silent): reconnect.
    Dropped(String),
    /// The agent was told to stop, and did.
    Stopped,
    /// Reconnecting cannot help.
    Fatal(String),
}

/// One simulated agent: connects, says hello, pings as the real agent does, and
/// reconnects after 50 ms doubling to 2 s when its connection drops, until told to stop
/// (then it never connects again). With several controllers (`urls`, replicas), a
/// connection that fails goes to the next one 100 ms later, and the backoff applies once
/// every one was tried, as with the real agent's `--controller A,B`.
pub(crate) async fn simulated_agent(
    spec: AgentSpec,
    urls: Arc<[String]>,
    report: Arc<NodeReport>,
    gate: Arc<Semaphore>,
    tally: Arc<Tally>,
    mut order: Option<oneshot::Receiver<Fate>>,
) {
    let mut backoff = Duration::from_millis(50);
    let mut at = 0;
    let mut runs = AgentRuns::new();
    loop {
        let url = &urls[at % urls.len()];
        let opened = {
            let Ok(_permit) = gate.acquire().await else {
                return;
            };
            tokio::time::timeout(CONNECT_TIMEOUT, say_hello(&spec, url, &report, &runs)).await
        };
        let (ws, lease) = match opened {
            Ok(Ok(welcomed)) => welcomed,
            Ok(Err(Ended::Fatal(why))) => return tally.fatal(format!("{}: {why}", spec.node)),
            Ok(Err(Ended::Dropped(why))) => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut last) = tally.last_failure.lock() {
                    *last = Some(format!("{}: {why}", spec.node));
                }
                at = (at + 1) % urls.len();
                if at == 0 {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                } else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                continue;
            }
            Ok(Err(Ended::Stopped)) => return,
            Err(_) => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        tally
            .lease_ms
            .store(lease.as_millis() as u64, Ordering::Relaxed);
        tally.up.fetch_add(1, Ordering::Relaxed);
        let every = ping_interval(DEFAULT_KEEPALIVE, Some(lease));
        let silence = connection_silence(every, Some(lease));
        let ended = keep_alive(ws, every, silence, &tally, &mut order, &mut runs).await;
        tally.up.fetch_sub(1, Ordering::Relaxed);
        match ended {
            Ended::Dropped(_) => {
                tally.drops.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(backoff).await;
            }
            Ended::Stopped => return,
            Ended::Fatal(why) => return tally.fatal(format!("{}: {why}", spec.node)),
        }
    }
}

/// Opens the connection with the agent's own code, says hello, and waits for the
/// welcome: the connection and the lease.
async fn say_hello(
    spec: &AgentSpec,
    url: &str,
    report: &NodeReport,
    runs: &AgentRuns,
) -> Result<(Box<AgentSocket>, Duration), Ended> {
    let mut ws = open_connection(url, &spec.key, Some(&spec.tls), Some(spec.from))
        .await
        .map_err(|e| match e {
            cadre_agent::service::ConnectError::Unauthorized { .. }
            | cadre_agent::service::ConnectError::InvalidController { .. } => {
                Ended::Fatal(e.to_string())
            }
            e => Ended::Dropped(e.to_string()),
        })?;
    let hello = AgentMessage::Hello(Box::new(Hello {
        version: PROTOCOL_VERSION,
        node: spec.node.clone(),
        report: NodeReport {
            address: spec.from.to_string(),
            ..report.clone()
        },
        running: runs.running.iter().copied().collect(),
        outbox: runs.outbox.clone(),
        health: None,
        agent_version: Some(env!("CARGO_PKG_VERSION").to_string()),
        life: Some(runs.life),
    }));
    let text = serde_json::to_string(&hello).map_err(|e| Ended::Fatal(e.to_string()))?;
    ws.send(Message::text(text))
        .await
        .map_err(|e| Ended::Dropped(format!("failed to say hello: {e}")))?;
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(text))) => match serde_json::from_str(&text) {
                Ok(ControllerMessage::Welcome {
                    version, lease_ms, ..
                }) => {
                    if version != PROTOCOL_VERSION {
                        return Err(Ended::Fatal(format!(
                            "welcomed in protocol version {version}, not {PROTOCOL_VERSION}"
                        )));
                    }
                    let lease = lease_ms
                        .ok_or_else(|| Ended::Fatal("the controller gave no lease".into()))?;
                    return Ok((ws, Duration::from_millis(lease)));
                }
                Ok(ControllerMessage::Refused { reason }) => {
                    return Err(Ended::Fatal(format!("refused: {reason}")));
                }
                Ok(_) => {}
                Err(e) => return Err(Ended::Fatal(format!("undecodable message: {e}"))),
            },
            Some(Ok(Message::Close(_))) | None => {
                return Err(Ended::Dropped("closed before the welcome".into()));
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(Ended::Dropped(e.to_string())),
        }
    }
}

/// Keeps a welcomed connection alive as the real agent does: a ping every `every`,
/// dropped when nothing came for `silence`; answers launch and stop orders (`runs`);
/// ends it as `order` says.
async fn keep_alive(
    mut ws: Box<AgentSocket>,
    every: Duration,
    silence: Duration,
    tally: &Tally,
    order: &mut Option<oneshot::Receiver<Fate>>,
    runs: &mut AgentRuns,
) -> Ended {
    use tokio::time::{Instant, sleep_until};
    let mut heard = Instant::now();
    let mut sent = heard;
    let mut ping_at = heard + every;
    loop {
        let dead_at = heard + silence;
        let told = async {
            match order.as_mut() {
                Some(rx) => rx.await.ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            frame = ws.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    heard = Instant::now();
                    let answer = match serde_json::from_str(&text) {
                        Ok(ControllerMessage::Refused { reason }) => {
                            return Ended::Fatal(format!("refused: {reason}"));
                        }
                        Ok(message) => {
                            if matches!(message, ControllerMessage::Launch(_)) {
                                tally.launched.fetch_add(1, Ordering::Relaxed);
                            }
                            runs.answer(message)
                        }
                        Err(_) => None,
                    };
                    if let Some(answer) = answer {
                        let Ok(text) = serde_json::to_string(&answer) else {
                            return Ended::Fatal("an event that cannot be encoded".into());
                        };
                        if let Err(e) = ws.send(Message::text(text)).await {
                            return Ended::Dropped(format!("failed to report an event: {e}"));
                        }
                    }
                }
                Some(Ok(Message::Close(_))) | None => return Ended::Dropped("closed by the controller".into()),
                // Pongs; a ping is answered by the WebSocket itself.
                Some(Ok(_)) => heard = Instant::now(),
                Some(Err(e)) => return Ended::Dropped(e.to_string()),
            },
            _ = sleep_until(ping_at.min(dead_at)) => {
                if Instant::now() >= dead_at {
                    return Ended::Dropped("nothing from the controller for too long".into());
                }
                ping_at = Instant::now() + every;
                if let Err(e) = ws.send(Message::Ping(Default::default())).await {
                    return Ended::Dropped(format!("failed to ping: {e}"));
                }
                sent = Instant::now();
                tally.pings.fetch_add(1, Ordering::Relaxed);
            }
            fate = told => {
                *order = None;
                match fate {
                    // The socket goes without a close frame: the kernel closes it.
                    Some(Fate::Close) => drop(ws),
                    // The connection stays open, and nothing more is read or sent on it.
                    Some(Fate::Silence) => {
                        if let Ok(mut since) = tally.silent_since.lock() {
                            *since = Some(sent.into_std());
                        }
                        std::future::pending::<()>().await;
                        drop(ws);
                    }
                    // The bench is over.
                    None => {}
                }
                return Ended::Stopped;
            }
        }
    }
}

fn print(r: &AgentsReport, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
        return Ok(());
    }
    println!(
        "controller: cadre server, {} nodes of 1 core and 256 MiB, lease {:.1} s, margin {} s; simulated agents ping every {:.1} s",
        r.agents, r.lease_s, r.lease_margin_s, r.ping_interval_s
    );
    if r.enrolled > 0 {
        println!(
            "enrolment: {} nodes with a join token each in {:.2} s ({:.0} nodes/s, {} at a time); the {} join tokens were made in {:.2} s",
            r.enrolled, r.enrol_s, r.enrol_per_s, r.enrol_concurrency, r.enrolled, r.join_tokens_s
        );
    }
    println!(
        "connections: {} agents with their node's certificate (mutual TLS), {} with the cluster's agent key over TLS; all {} connected in {:.2} s",
        r.enrolled, r.keyed, r.agents, r.connect_s
    );
    println!(
        "heartbeats over {:.1} s ({:.0} pings/s): controller {:.2}% of one core (with no agent connected: {:.2}%), {:.0} MiB resident (peak {:.0} MiB)",
        r.seconds,
        r.pings_per_s,
        r.controller_cpu_pct,
        r.controller_idle_cpu_pct,
        r.controller_rss_mib,
        r.controller_peak_rss_mib
    );
    println!(
        "this bench (the {} agents, on the same cores): {:.2}% of one core, {:.0} MiB resident",
        r.agents, r.bench_cpu_pct, r.bench_rss_mib
    );
    println!(
        "false losses: {} of {} nodes{} ({} connected at the end of the window; {} agent connection(s) dropped)",
        r.false_losses,
        r.agents,
        if r.false_loss_nodes.is_empty() {
            String::new()
        } else {
            format!(": {}", r.false_loss_nodes.join(", "))
        },
        r.connected,
        r.agent_reconnects
    );
    let secs = |s: Option<f64>| s.map_or_else(|| "never".to_string(), |s| format!("{s:.2} s"));
    println!(
        "lost node, connection dropped without a close frame ({}): not connected after {}, down after {}",
        r.lost_closed.node,
        secs(r.lost_closed.not_connected_s),
        secs(r.lost_closed.down_s)
    );
    if let Some(l) = &r.lost_silent {
        println!(
            "lost node, silent with its connection open ({}): not connected after {}, down after {} (it last sent a frame {} before it stopped)",
            l.node,
            secs(l.not_connected_s),
            secs(l.down_s),
            secs(l.last_sent_before_stop_s)
        );
    }
    println!(
        "target: a lost node declared within lease + 2 s = {:.1} s: {}; the controller declares a node down the lease and margin ({} s) after its last frame",
        r.target_lost_s,
        if r.target_met { "met" } else { "not met" },
        r.node_lease_s + r.lease_margin_s
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_connect_from_loopback_addresses_of_their_own() {
        assert_eq!(loopback(0).to_string(), "127.0.0.2");
        assert_eq!(loopback(253).to_string(), "127.0.0.255");
        assert_eq!(loopback(254).to_string(), "127.0.1.0");
        assert_eq!(loopback(9_999).to_string(), "127.0.39.17");
    }

    #[test]
    fn the_log_names_the_nodes_it_lost() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let before =
            "2026-01-01T00:00:00Z  WARN cadre_server::controller: agent disconnected node=n1\n";
        let after = "2026-01-01T00:00:01Z  INFO cadre_server::controller: agent reconnected; the older connection is dropped node=n2 old=4\n\
                     2026-01-01T00:00:02Z  WARN cadre_server::controller: agent lost: node down node=n3\n\
                     2026-01-01T00:00:02Z  INFO cadre_server::controller: welcomed node=n4\n";
        std::fs::write(&log, format!("{before}{after}")).unwrap();
        let found = logged_losses(&log, before.len() as u64).unwrap();
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            vec!["n2".to_string(), "n3".to_string()]
        );
    }

    #[test]
    fn cpu_ticks_are_read_past_a_command_name_with_parentheses() {
        let stat = "4242 (cadre (x) y) S 1 4242 4242 0 -1 4194560 2000 0 0 0 \
                    731 152 0 0 20 0 9 0 123 456 789";
        assert_eq!(cpu_ticks(stat), Some(731 + 152));
        assert_eq!(cpu_ticks("4242 (cadre) S 1"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(cpu_ticks(&own).is_some(), "{own}");
    }
}
