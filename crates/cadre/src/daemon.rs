//! `cadre up`, `cadre down` and `cadre server`: running the controller, and on one machine
//! its agents too.
//!
//! `cadre up` runs the controller in this process and one `cadre agent` process per node
//! (the nodes of `--cluster` or `--slurm-conf`, which must fit this machine, or
//! `node[001-N]`), each in its own process group so that a terminal's Ctrl-C reaches only
//! `cadre up`, which stops them in order: first the controller (so that what the agents do
//! while stopping is not recorded as the jobs' fate), then the agents, which stop their
//! tasks. Jobs that were running go back to the
//! queue (or end NODE_FAIL, by their requeue policy) when the cluster next comes up.
//!
//! Files in the data directory (mode 0700, files 0600: see [`cadre_cli::paths`]): `cadre.pid`
//! (the controller's process id), `cadre.db` (SQLite, unless `--database` names another
//! store), `agent.key` (the agents' shared key), `cadre.log` (with `--detach`), and
//! `agents/<node>.{pid,log}`. In the run directory (mode 0755): `cadre.sock` and the agents'
//! state directories `nodes/<node>/` (batch scripts and the jobs' files). The controller and
//! `cadre up` run with umask 077; the agents they start get the umask `cadre up` was
//! started with, which their tasks inherit.
//!
//! After a `kill -9` of the controller, agents keep running and supervising their tasks;
//! `cadre up` again adopts the agents that are still alive (by their pid files) and starts
//! the missing ones, and the agents reconnect.

use crate::{ClusterFileArgs, Described};
use anyhow::{Context, Result, bail};
use cadre_cli::PolicyArgs;
use cadre_client::locate::default_data_dir;
use cadre_client::{Connection, Target};
use cadre_core::cluster::Cluster;
use cadre_server::{ServerConfig, TlsSetup};
use clap::Args;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod replicas;

/// The cluster's settings for its agents, which each agent takes where its own command line
/// does not set them (Slurm's configless mode): paths are on the nodes, and an agent runs a
/// program only where it is root's alone.
#[derive(Args, Debug, Clone, Default)]
pub struct AgentSettingsArgs {
    /// The agents' prolog (as `cadre agent --prolog`).
    #[arg(long, value_name = "PROGRAM")]
    pub agent_prolog: Option<String>,
    /// The agents' epilog (as `cadre agent --epilog`).
    #[arg(long, value_name = "PROGRAM")]
    pub agent_epilog: Option<String>,
    /// Seconds the agents' prolog and epilog may run (as `cadre agent --prolog-timeout`).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub agent_prolog_timeout: Option<u64>,
    /// The agents' health-check program (as `cadre agent --health-check-program`).
    #[arg(long, value_name = "PROGRAM")]
    pub agent_health_check_program: Option<String>,
    /// Seconds between the agents' health checks (as `cadre agent --health-check-interval`).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub agent_health_check_interval: Option<u64>,
    /// The agents' task prolog (as `cadre agent --task-prolog`).
    #[arg(long, value_name = "PROGRAM")]
    pub agent_task_prolog: Option<String>,
    /// The agents' task epilog (as `cadre agent --task-epilog`).
    #[arg(long, value_name = "PROGRAM")]
    pub agent_task_epilog: Option<String>,
    /// Seconds a task's processes may outlive SIGKILL (as `cadre agent --kill-timeout`).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub agent_kill_timeout: Option<u64>,
}

impl AgentSettingsArgs {
    fn settings(&self) -> cadre_proto::agent::AgentSettings {
        cadre_proto::agent::AgentSettings {
            prolog: self.agent_prolog.clone(),
            epilog: self.agent_epilog.clone(),
            prolog_timeout_secs: self.agent_prolog_timeout,
            health_check_program: self.agent_health_check_program.clone(),
            health_check_interval_secs: self.agent_health_check_interval,
            kill_timeout_secs: self.agent_kill_timeout,
            task_prolog: self.agent_task_prolog.clone(),
            task_epilog: self.agent_task_epilog.clone(),
        }
    }
}

/// Options shared by `cadre up` and `cadre server`.
#[derive(Args, Debug, Clone)]
pub struct ControllerArgs {
    /// The data directory: database, agent key, logs (mode 0700; refused when open to
    /// others).
    #[arg(long, env = "CADRE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The run directory every user of the cluster reaches: the controller's socket and
    /// the local agents' state (mode 0755) [default: DATA_DIR.run, beside the data
    /// directory].
    #[arg(long, env = "CADRE_RUN_DIR")]
    pub run_dir: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: ClusterFileArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The store: a `postgres://` URL, or an SQLite file (default: DATA_DIR/cadre.db).
    #[arg(long, env = "CADRE_DATABASE")]
    pub database: Option<String>,
    /// Also listen on this TCP address (remote clients with tokens, remote agents), over
    /// TLS: the cluster's CA signs the controller's certificate and, at their enrolment,
    /// the nodes' (see --ca-cert, --tls-name, `cadre node token create`).
    #[arg(long, env = "CADRE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Listen on --listen in plain TCP, without TLS: tokens, launch orders and job
    /// environments cross the network readable by anyone on it. For a trusted, isolated
    /// network only; a warning is logged at start.
    #[arg(long, env = "CADRE_INSECURE")]
    pub insecure: bool,
    /// A name (host name or address) clients and agents reach the controller by, for its
    /// certificate; repeatable [default: this machine's host name, localhost, 127.0.0.1,
    /// ::1 and the --listen address when it is a specific one].
    #[arg(
        long = "tls-name",
        env = "CADRE_TLS_NAMES",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub tls_names: Vec<String>,
    /// The site's CA certificate (PEM) to sign the controller's and nodes' certificates
    /// with, instead of the cluster CA the controller makes in its data directory on first
    /// start (ca.crt, ca.key); with --ca-key.
    #[arg(long, env = "CADRE_CA_CERT", value_name = "FILE", requires = "ca_key")]
    pub ca_cert: Option<PathBuf>,
    /// The site CA's key (PEM, mode 0600).
    #[arg(long, env = "CADRE_CA_KEY", value_name = "FILE", requires = "ca_cert")]
    pub ca_key: Option<PathBuf>,
    /// The agents' lease in seconds (Slurm's SlurmdTimeout): an agent that cannot renew it
    /// (its pings unanswered) stops every run it holds by its end, SIGTERM a third of it
    /// before; the controller closes a connection silent for a lease. A shorter lease
    /// finds a lost node sooner; a controller stopped or unreachable for longer than it
    /// stops every job on the nodes that cannot reach it. `--node-timeout` is its old
    /// name.
    #[arg(
        long,
        alias = "node-timeout",
        env = "CADRE_NODE_LEASE",
        value_name = "SECS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub node_lease: u64,
    /// Seconds the controller waits beyond the lease, counted from a node's last frame,
    /// before it declares the node lost and requeues its gangs: room for a SIGKILL that
    /// is slow to take (processes in D state) and for the hosts' clocks to drift.
    #[arg(
        long,
        env = "CADRE_LEASE_MARGIN",
        value_name = "SECS",
        default_value_t = 2,
        value_parser = clap::value_parser!(u64).range(0..=3_600)
    )]
    pub lease_margin: u64,
    #[command(flatten)]
    pub agents: AgentSettingsArgs,
    /// Longest time between scheduling passes, in milliseconds (passes also run on every
    /// change).
    #[arg(long, default_value_t = 1000)]
    pub sched_interval_ms: u64,
    /// Seconds a connection (TCP or the socket) may take to send a request's head, from
    /// its first byte; slower ones are closed.
    #[arg(
        long,
        env = "CADRE_HEADER_TIMEOUT",
        value_name = "SECS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub header_timeout: u64,
    /// Seconds a connection with no request in flight (keep-alive) stays open; requests
    /// being served (srun's output streams) and agents' WebSockets are never timed out.
    #[arg(
        long,
        env = "CADRE_IDLE_TIMEOUT",
        value_name = "SECS",
        default_value_t = 60,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub idle_timeout: u64,
    /// Connections one TCP peer (IP address) may hold at once; further ones are closed
    /// as they are accepted.
    #[arg(
        long,
        env = "CADRE_MAX_CONNECTIONS_PER_PEER",
        value_name = "N",
        default_value_t = 1024,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub max_connections_per_peer: u32,
    /// Run as one of two or three replicated controllers on one PostgreSQL --database
    /// (`cadre server` only): one leads, holding the leader lease, the others stand by
    /// (`/readyz` 503, requests answered `not_leader` with the leader's address) and take
    /// over when its lease lapses. Give every replica the same site CA (--ca-cert,
    /// --ca-key) and agent key (the data directory's agent.key).
    #[arg(long, env = "CADRE_REPLICA")]
    pub replica: bool,
    /// With --replica: where clients and agents reach this replica, told to them by the
    /// standbys [default: https://ADDRESS:PORT of --listen, this machine's host name for
    /// an unspecified address; without --listen, unix:// and its socket, for replicas on
    /// one machine].
    #[arg(
        long,
        env = "CADRE_ADVERTISE",
        value_name = "URL",
        requires = "replica"
    )]
    pub advertise: Option<String>,
    /// With --replica: seconds a leader may go without renewing its lease before a
    /// standby takes over (it renews every quarter of it). Shorter fails over sooner;
    /// longer rides out slower database answers.
    #[arg(
        long,
        env = "CADRE_LEADER_LEASE",
        value_name = "SECS",
        default_value_t = 3,
        value_parser = clap::value_parser!(u64).range(1..=600)
    )]
    pub leader_lease: u64,
}

/// `cadre up`.
#[derive(Args, Debug, Clone)]
pub struct UpArgs {
    #[command(flatten)]
    pub controller: ControllerArgs,
    /// Return once the cluster is ready, leaving it running in the background (its
    /// process id in DATA_DIR/cadre.pid, its log in DATA_DIR/cadre.log).
    #[arg(long)]
    pub detach: bool,
    /// The nodes' container runtime, a command line such as `podman` (each agent is
    /// started with `--container-runtime`): Kubernetes workloads then run in their images.
    #[arg(long, env = "CADRE_CONTAINER_RUNTIME", value_name = "COMMAND")]
    pub container_runtime: Option<String>,
    /// The capabilities the nodes' containers may be given back when their manifests ask
    /// for them (each agent's --container-allowed-capabilities), comma-separated:
    /// `IPC_LOCK,SYS_NICE` [default: none].
    #[arg(long, value_name = "CAPS", value_delimiter = ',')]
    pub container_allowed_capabilities: Vec<String>,
    /// Run N replicated controllers on this machine (2 to 5), on one PostgreSQL
    /// --database: one leads, the others stand by and take over when it goes; one that
    /// stops is started again and stands by. For trying the HA form: in production each
    /// replica is a `cadre server --replica` on a host of its own (docs/replicas.md).
    /// Replica I listens on its own socket (cadre.sock for the first, cadre-I.sock for the
    /// others, in the run directory) and, with --listen ADDR:PORT, on port PORT+I-1.
    #[arg(
        long,
        env = "CADRE_REPLICAS",
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u8).range(1..=i64::from(cadre_client::locate::MAX_LOCAL_REPLICAS))
    )]
    pub replicas: u8,
    /// Replica I of `cadre up --replicas` (started by it).
    #[arg(long, hide = true, value_name = "I")]
    pub as_replica: Option<u8>,
}

/// `cadre down`.
#[derive(Args, Debug, Clone)]
pub struct DownArgs {
    /// The data directory of the cluster to stop.
    #[arg(long, env = "CADRE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Its run directory [default: DATA_DIR.run].
    #[arg(long, env = "CADRE_RUN_DIR")]
    pub run_dir: Option<PathBuf>,
    /// Seconds to wait for it to stop before giving up.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
}

struct Layout {
    /// The data directory (private).
    dir: PathBuf,
    /// The run directory (public).
    run: PathBuf,
}

impl Layout {
    /// The directories of `data` and `run` (their defaults when `None`), without creating
    /// or checking anything.
    fn of(data: Option<PathBuf>, run: Option<PathBuf>) -> Layout {
        let dir = data.unwrap_or_else(default_data_dir);
        let run = run.unwrap_or_else(|| cadre_client::locate::run_dir_of(&dir));
        Layout { dir, run }
    }

    /// The directories, created where missing and checked (see [`cadre_cli::paths`]).
    fn new(data: Option<PathBuf>, run: Option<PathBuf>) -> Result<Layout> {
        let Layout { dir, run } = Layout::of(data, run);
        cadre_cli::paths::ensure_private_dir(&dir)?;
        cadre_cli::paths::ensure_public_dir(&run)?;
        let dir = dir.canonicalize()?;
        let run = run.canonicalize()?;
        for (sub, public) in [(dir.join("agents"), false), (run.join("nodes"), true)] {
            std::fs::create_dir_all(&sub)
                .with_context(|| format!("failed to create {}", sub.display()))?;
            if public {
                std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755))?;
            }
        }
        Ok(Layout { dir, run })
    }
    fn pid(&self) -> PathBuf {
        self.dir.join("cadre.pid")
    }
    fn socket(&self) -> PathBuf {
        cadre_client::locate::socket_in(&self.run)
    }
    /// Replica `i`'s socket (`cadre up --replicas`).
    fn replica_socket(&self, i: u8) -> PathBuf {
        cadre_client::locate::replica_socket_in(&self.run, i)
    }
    /// Replica `i`'s files (`replica-I.pid`, `replica-I.log`).
    fn replica(&self, i: u8, ext: &str) -> PathBuf {
        self.dir.join(format!("replica-{i}.{ext}"))
    }
    fn log(&self) -> PathBuf {
        self.dir.join("cadre.log")
    }
    fn key(&self) -> PathBuf {
        self.dir.join("agent.key")
    }
    fn agent(&self, node: &str, ext: &str) -> PathBuf {
        self.dir.join("agents").join(format!("{node}.{ext}"))
    }
    /// A local agent's state directory.
    fn agent_state(&self, node: &str) -> PathBuf {
        self.run.join("nodes").join(node)
    }
}

/// The process id in `path`, if it names a live process whose command line contains
/// every one of `words` (so that a reused pid is not taken for ours).
fn live_pid(path: &Path, words: &[&str]) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    words.iter().all(|w| cmdline.contains(w)).then_some(pid)
}

fn write_file(path: &Path, text: &str, mode: u32) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("failed to write {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// The agents' key, made on first use.
fn agent_key(layout: &Layout) -> Result<String> {
    let path = layout.key();
    if path.exists() {
        cadre_cli::paths::check_secret_file(&path, "the agent key file")?;
    }
    if let Ok(text) = std::fs::read_to_string(&path) {
        let key = text.trim().to_owned();
        anyhow::ensure!(
            !key.is_empty(),
            "the agent key file {} is empty",
            path.display()
        );
        return Ok(key);
    }
    let key = cadre_server::state::random_secret("");
    write_file(&path, &format!("{key}\n"), 0o600)?;
    Ok(key)
}

/// The cluster `cadre up` runs: the description's (cadre's TOML or a slurm.conf), or
/// `--nodes` copies of this machine (with `--gpus-per-node` emulated GPUs where it has
/// none).
fn local_cluster(args: &ClusterFileArgs) -> Result<(Cluster, bool)> {
    if let Some(described) = described_cluster(args)? {
        for note in &described.notes {
            tracing::info!("{note}");
        }
        return Ok((described.cluster, args.gpus_per_node > 0));
    }
    let opts = cadre_agent::discovery::DiscoveryOptions {
        emulate_gpus: args.gpus_per_node,
        ..Default::default()
    };
    let nodes = args.nodes.unwrap_or(1);
    anyhow::ensure!(nodes > 0, "--nodes must be at least 1");
    let found = cadre_agent::discovery::discover(&opts)
        .context("failed to discover this machine's hardware")?;
    Ok((Cluster::flat(nodes, found.shape), found.gpus_emulated))
}

/// The cluster of `--cluster` or `--slurm-conf`, if one is given.
fn described_cluster(args: &ClusterFileArgs) -> Result<Option<Described>> {
    Ok(match (&args.cluster, &args.slurm_conf) {
        (Some(path), _) => Some(Described {
            cluster: cadre_core::config::load_cluster_file(path)?,
            files: vec![path.clone()],
            notes: Vec::new(),
            origins: BTreeMap::new(),
        }),
        (None, Some(path)) => Some(Described::from_slurm_conf(path)?),
        (None, None) => None,
    })
}

/// The nodes `cadre up` starts agents for on this machine: the first `--nodes` of a
/// description (all by default), or every node of a flat cluster.
fn local_nodes(args: &ClusterFileArgs, cluster: &Cluster) -> Vec<String> {
    let count = match args.nodes {
        Some(n) if args.described() => n as usize,
        _ => cluster.nodes.len(),
    };
    cluster
        .nodes
        .iter()
        .take(count)
        .map(|n| n.name.clone())
        .collect()
}

/// `cadre up` runs every node's agent on this machine, and the controller refuses an
/// agent whose machine is smaller than its node (cores, memory, GPUs; emulated GPUs count,
/// which is what `--gpus-per-node` is for). A described node bigger than this machine
/// could never connect, so `cadre up` refuses to start, naming the node and where it is
/// described, rather than waiting for agents that will be turned away. Hardware is never
/// pretended.
fn check_fits_this_machine(args: &ClusterFileArgs) -> Result<()> {
    let Some(described) = described_cluster(args)? else {
        return Ok(());
    };
    let cluster = &described.cluster;
    let nodes = local_nodes(args, cluster);
    if nodes.is_empty() {
        return Ok(());
    }
    let opts = cadre_agent::discovery::DiscoveryOptions {
        emulate_gpus: args.gpus_per_node,
        ..Default::default()
    };
    let found = cadre_agent::discovery::discover(&opts)
        .context("failed to discover this machine's hardware")?;
    let have = found.shape.capacity();
    let too_big: Vec<&str> = nodes
        .iter()
        .map(String::as_str)
        .filter(|name| {
            let want = cluster
                .node_id(name)
                .map(|id| cluster.shape(id).capacity())
                .unwrap_or_default();
            want.cpus > have.cpus || want.mem_mib > have.mem_mib || want.gpu_milli > have.gpu_milli
        })
        .collect();
    let Some(first) = too_big.first() else {
        return Ok(());
    };
    let want = cluster
        .node_id(first)
        .map(|id| cluster.shape(id).capacity())
        .unwrap_or_default();
    let gpus = |milli: u64| milli / u64::from(cadre_core::resources::MILLI_PER_GPU);
    let at = described
        .origins
        .get(*first)
        .map(|o| format!(" (described at {o})"))
        .unwrap_or_default();
    let others = match too_big.len() - 1 {
        0 => String::new(),
        n => format!(" ({n} more of the {} nodes do not fit either)", nodes.len()),
    };
    let emulated = if found.gpus_emulated { " emulated" } else { "" };
    bail!(
        "node `{first}`{at} has {} CPUs, {} MiB and {} GPUs; this machine has {} CPUs, {} MiB \
         and {}{emulated} GPUs{others}. `cadre up` runs every node's agent on this machine, \
         and the controller refuses an agent whose machine is smaller than its node: run \
         `cadre server` with this description and `cadre agent` on each real node, start \
         agents for only the first nodes with `--nodes N`, or describe nodes that fit this \
         machine (`--gpus-per-node G` emulates G GPUs where it has none)",
        want.cpus,
        want.mem_mib,
        gpus(want.gpu_milli),
        have.cpus,
        have.mem_mib,
        gpus(have.gpu_milli),
    )
}

/// The names of the controller's certificate: those given, else this machine's host name,
/// the loopback names and the listen address when it is a specific one.
fn tls_names(args: &ControllerArgs) -> Vec<String> {
    if !args.tls_names.is_empty() {
        return args.tls_names.clone();
    }
    let mut names = Vec::new();
    if let Ok(host) = nix::unistd::gethostname() {
        names.push(host.to_string_lossy().into_owned());
    }
    names.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
    if let Some(addr) = args.listen
        && !addr.ip().is_unspecified()
    {
        names.push(addr.ip().to_string());
    }
    names.sort();
    names.dedup();
    names
}

/// TLS for `--listen`: the site's CA or the data directory's, and a certificate for the
/// controller's names. Its CA certificate is also put in the run directory (`ca.crt`),
/// where local clients and agents find it.
fn tls_setup(args: &ControllerArgs, layout: &Layout) -> Result<Option<Arc<TlsSetup>>> {
    if args.listen.is_none() {
        return Ok(None);
    }
    if args.insecure {
        eprintln!(
            "cadre: warning: --insecure: listening on {} in plain TCP; tokens and jobs cross the network unencrypted",
            args.listen.map(|a| a.to_string()).unwrap_or_default()
        );
        return Ok(None);
    }
    let ca = match (&args.ca_cert, &args.ca_key) {
        (Some(cert), Some(key)) => cadre_tls::Ca::load(cert, key)
            .with_context(|| format!("the site CA {}", cert.display()))?,
        _ => cadre_tls::Ca::load_or_create(&layout.dir).context("the cluster CA")?,
    };
    let public = layout.run.join(cadre_tls::CA_CERT_FILE);
    write_file(&public, ca.cert_pem(), 0o644)?;
    let names = tls_names(args);
    let setup = TlsSetup::new(ca, &names).context("the controller's certificate")?;
    Ok(Some(Arc::new(setup)))
}

fn server_config(args: &ControllerArgs, layout: &Layout) -> Result<(ServerConfig, Cluster)> {
    let (cluster, emulated_gpus) = local_cluster(&args.cluster)?;
    let policy = args.policy.load()?;
    let database = args
        .database
        .clone()
        .unwrap_or_else(|| layout.dir.join("cadre.db").display().to_string());
    Ok((
        ServerConfig {
            database,
            socket: layout.socket(),
            listen: args.listen,
            cluster: cluster.clone(),
            policy,
            agent_key: agent_key(layout)?,
            agent_settings: args.agents.settings(),
            node_lease: Duration::from_secs(args.node_lease),
            lease_margin: Duration::from_secs(args.lease_margin),
            sched_interval: Duration::from_millis(args.sched_interval_ms.max(1)),
            emulated_gpus,
            connections: cadre_server::listen::ConnectionLimits {
                header_timeout: Duration::from_secs(args.header_timeout),
                idle_timeout: Duration::from_secs(args.idle_timeout),
                max_per_peer: args.max_connections_per_peer as usize,
            },
            tls: tls_setup(args, layout)?,
            fence: None,
            leading: None,
        },
        cluster,
    ))
}

/// `--replica`'s settings: its name, its address for clients and agents, its lease.
fn replica_config(
    args: &ControllerArgs,
    config: &ServerConfig,
) -> Result<cadre_server::replica::ReplicaConfig> {
    if !replicas::is_postgres(&config.database) {
        bail!(
            "--replica needs --database postgres://...: replicated controllers share a \
             PostgreSQL database (SQLite serves one controller)"
        );
    }
    let host = cadre_agent::service::host_name()?;
    let advertise = match (&args.advertise, config.listen) {
        (Some(url), _) => url.clone(),
        (None, Some(addr)) => {
            let scheme = if config.tls.is_some() {
                "https"
            } else {
                "http"
            };
            let at = if addr.ip().is_unspecified() {
                host.clone()
            } else {
                addr.ip().to_string()
            };
            match addr {
                SocketAddr::V6(_) if !addr.ip().is_unspecified() => {
                    format!("{scheme}://[{at}]:{}", addr.port())
                }
                _ => format!("{scheme}://{at}:{}", addr.port()),
            }
        }
        (None, None) => format!("unix://{}", config.socket.display()),
    };
    Ok(cadre_server::replica::ReplicaConfig {
        name: format!("{host}:{}", std::process::id()),
        advertise,
        lease: Duration::from_secs(args.leader_lease),
    })
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CADRE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,postgres=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Resolves on SIGINT or SIGTERM.
async fn termination() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        // Without signal handlers, only the engine's own end stops us.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}

/// `cadre server`: the controller alone (agents connect with `cadre agent`).
pub fn server(args: &ControllerArgs) -> Result<ExitCode> {
    init_tracing();
    restrict_umask();
    let layout = Layout::new(args.data_dir.clone(), args.run_dir.clone())?;
    let (config, _) = server_config(args, &layout)?;
    let rt = tokio::runtime::Runtime::new()?;
    if args.replica {
        let replica = replica_config(args, &config)?;
        rt.block_on(cadre_server::replica::serve_replica(
            config,
            replica,
            termination(),
        ))?;
    } else {
        rt.block_on(cadre_server::serve(config, termination(), || {}))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `cadre up`.
pub fn up(args: &UpArgs) -> Result<ExitCode> {
    if args.controller.replica {
        bail!(
            "--replica is for `cadre server` (each replica on its own host, or port and data \
             directory); `cadre up --replicas N` runs N replicas on this machine"
        );
    }
    if args.replicas > 1 || args.as_replica.is_some() {
        replicas::check(&args.controller)?;
    }
    restrict_umask();
    let layout = Layout::new(
        args.controller.data_dir.clone(),
        args.controller.run_dir.clone(),
    )?;
    if let Some(i) = args.as_replica {
        init_tracing();
        return replicas::serve(&args.controller, &layout, i);
    }
    if let Some(pid) = live_pid(&layout.pid(), &["cadre"]) {
        bail!(
            "cadre is already running in {} (pid {pid}); `cadre down` stops it",
            layout.dir.display()
        );
    }
    check_fits_this_machine(&args.controller.cluster)?;
    if args.detach {
        let (cluster, _) = local_cluster(&args.controller.cluster)?;
        let local = local_nodes(&args.controller.cluster, &cluster);
        let target = match args.replicas {
            1 => Target::Unix(layout.socket()),
            n => replicas::target(&layout, n),
        };
        return detach(&layout, &local, &target);
    }
    init_tracing();
    write_file(&layout.pid(), &format!("{}\n", std::process::id()), 0o600)?;
    let capabilities = crate::agent::allowed_capabilities(&args.container_allowed_capabilities)?;
    let agents = NodeAgents {
        runtime: args.container_runtime.as_deref(),
        capabilities: &capabilities,
    };
    let result = if args.replicas > 1 {
        replicas::run(&args.controller, &layout, args.replicas, &agents)
    } else {
        run_up(&args.controller, &layout, &agents)
    };
    let _ = std::fs::remove_file(layout.pid());
    result
}

/// What `cadre up` starts its agents with, beside their node.
pub(crate) struct NodeAgents<'a> {
    pub(crate) runtime: Option<&'a str>,
    pub(crate) capabilities: &'a [String],
}

fn run_up(args: &ControllerArgs, layout: &Layout, agents: &NodeAgents<'_>) -> Result<ExitCode> {
    let (config, cluster) = server_config(args, layout)?;
    let nodes = local_nodes(&args.cluster, &cluster);
    let gpus = args.cluster.gpus_per_node;
    let rt = tokio::runtime::Runtime::new()?;
    let mut agent_pids = Vec::new();
    let spawn_error = std::cell::RefCell::new(None);
    let result = rt.block_on(cadre_server::serve(config, termination(), || {
        for (i, node) in nodes.iter().enumerate() {
            let controller = format!("unix://{}", layout.socket().display());
            match ensure_agent(
                layout,
                node,
                &loopback_address(i),
                gpus,
                agents,
                &controller,
            ) {
                Ok(pid) => agent_pids.push((node.clone(), pid)),
                Err(e) => {
                    tracing::error!(node, error = %e, "failed to start the node's agent");
                    *spawn_error.borrow_mut() = Some(e);
                }
            }
        }
        tracing::info!(nodes = nodes.len(), dir = %layout.dir.display(), "cadre is up");
    }));
    stop_agents(layout, &agent_pids, Duration::from_secs(40));
    result?;
    if let Some(e) = spawn_error.into_inner() {
        return Err(e);
    }
    Ok(ExitCode::SUCCESS)
}

/// The address of the `i`-th node of `cadre up`: a loopback address of its own,
/// 127.0.0.2, 127.0.0.3 and so on (all of 127.0.0.0/8 reaches this machine), so that the
/// names of tasks on different nodes resolve to different addresses, as on a real cluster:
/// a program that compares addresses (MPI's launchers tell local hosts from remote ones
/// so) sees as many hosts as there are nodes.
fn loopback_address(i: usize) -> String {
    let n = (i as u32 + 2).min(0x00ff_fffe);
    format!("127.{}.{}.{}", n >> 16, (n >> 8) & 0xff, n & 0xff)
}

/// The node's agent: the one still running from before, or a new one.
fn ensure_agent(
    layout: &Layout,
    node: &str,
    address: &str,
    gpus: u32,
    agents: &NodeAgents<'_>,
    controller: &str,
) -> Result<i32> {
    let pid_file = layout.agent(node, "pid");
    if let Some(pid) = live_pid(&pid_file, &["agent", node]) {
        tracing::info!(node, pid, "adopting the agent still running");
        return Ok(pid);
    }
    let exe = std::env::current_exe().context("failed to find the cadre executable")?;
    let state_dir = layout.agent_state(node);
    let mut command = std::process::Command::new(exe);
    with_original_umask(&mut command);
    command.arg("agent");
    if let Some(runtime) = agents.runtime {
        command.arg("--container-runtime").arg(runtime);
    }
    if !agents.capabilities.is_empty() {
        command
            .arg("--container-allowed-capabilities")
            .arg(agents.capabilities.join(","));
    }
    command
        .arg("--controller")
        .arg(controller)
        .arg("--node")
        .arg(node)
        .arg("--address")
        .arg(address)
        .arg("--key-file")
        .arg(layout.key())
        .arg("--gpus-per-node")
        .arg(gpus.to_string())
        .arg("--state-dir")
        .arg(&state_dir);
    let (child, pid) = spawn_logged(
        command,
        &layout.agent(node, "log"),
        &pid_file,
        &format!("the agent of node {node}"),
    )?;
    // The agent outlives this process if it is killed; nothing waits for it here.
    std::mem::forget(child);
    Ok(pid)
}

/// Starts `command` in a process group of its own (a terminal's Ctrl-C reaches only
/// `cadre up`, which stops it in order), its output appended to `log`, its pid written to
/// `pid_file`.
fn spawn_logged(
    mut command: std::process::Command,
    log: &Path,
    pid_file: &Path,
    what: &str,
) -> Result<(std::process::Child, i32)> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("failed to open {}", log.display()))?;
    let child = command
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| format!("failed to start {what}"))?;
    let pid = i32::try_from(child.id()).context("pid out of range")?;
    write_file(pid_file, &format!("{pid}\n"), 0o600)?;
    Ok((child, pid))
}

fn alive(pid: i32) -> bool {
    // A zombie still answers kill(0); look at its state too.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn reap(pid: i32) {
    use nix::sys::wait::{WaitPidFlag, waitpid};
    let _ = waitpid(nix::unistd::Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
}

/// SIGTERM to each agent, then waits for them (SIGKILL after `wait`).
fn stop_agents(layout: &Layout, agents: &[(String, i32)], wait: Duration) {
    let agents: Vec<(PathBuf, i32)> = agents
        .iter()
        .map(|(node, pid)| (layout.agent(node, "pid"), *pid))
        .collect();
    stop_processes(&agents, wait);
}

/// SIGTERM to each process, then waits for them (SIGKILL after `wait`) and removes their
/// pid files.
fn stop_processes(processes: &[(PathBuf, i32)], wait: Duration) {
    use nix::sys::signal::{Signal, kill};
    for (_, pid) in processes {
        let _ = kill(nix::unistd::Pid::from_raw(*pid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + wait;
    for (pid_file, pid) in processes {
        loop {
            reap(*pid);
            if !alive(*pid) {
                break;
            }
            if Instant::now() >= deadline {
                let _ = kill(nix::unistd::Pid::from_raw(*pid), Signal::SIGKILL);
                reap(*pid);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(pid_file);
    }
}

/// `cadre up --detach`: starts `cadre up` in the background and waits until it answers.
/// Starts `cadre up` in the background and returns once the agents it starts (`local`) are
/// connected (nodes left for agents on other machines are not waited for).
fn detach(layout: &Layout, local: &[String], target: &Target) -> Result<ExitCode> {
    let exe = std::env::current_exe().context("failed to find the cadre executable")?;
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--detach")
        .collect();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(layout.log())?;
    let mut command = std::process::Command::new(exe);
    with_original_umask(&mut command);
    let mut child = command
        .args(&args)
        .env("CADRE_DATA_DIR", &layout.dir)
        .env("CADRE_RUN_DIR", &layout.run)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("failed to start cadre in the background")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!(
                "cadre stopped while starting ({status}); the end of {}:\n{}",
                layout.log().display(),
                log_tail(&layout.log(), 5)
            );
        }
        let ready = rt.block_on(async {
            match Connection::open(target, None).await {
                Ok(mut c) => c
                    .call::<(), cadre_proto::api::NodeList>(hyper::Method::GET, "/nodes", None)
                    .await
                    .ok(),
                Err(_) => None,
            }
        });
        if let Some(nodes) = ready {
            let connected = nodes.nodes.iter().filter(|n| n.connected).count();
            let local_up = nodes
                .nodes
                .iter()
                .filter(|n| local.contains(&n.name))
                .all(|n| n.connected);
            if local_up || Instant::now() >= deadline {
                let gpus: u64 = nodes.nodes.iter().map(|n| n.gpus).sum();
                let emulated = nodes.nodes.iter().any(|n| n.emulated_gpus);
                println!(
                    "cadre is up: {} node(s), {connected} connected, {gpus} GPU(s){}; pid {} in {}",
                    nodes.nodes.len(),
                    if emulated { " (emulated)" } else { "" },
                    child.id(),
                    layout.pid().display()
                );
                std::mem::forget(child);
                return Ok(ExitCode::SUCCESS);
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "cadre did not answer within 60 s; see {}",
                layout.log().display()
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The last `lines` lines of the log at `path` (none when it cannot be read), for an
/// error that says why a process did not start.
fn log_tail(path: &Path, lines: usize) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(lines).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// `cadre down`.
pub fn down(args: &DownArgs) -> Result<ExitCode> {
    use nix::sys::signal::{Signal, kill};
    let layout = Layout::of(args.data_dir.clone(), args.run_dir.clone());
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    match live_pid(&layout.pid(), &["cadre"]) {
        Some(pid) => {
            kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM)
                .with_context(|| format!("failed to signal cadre (pid {pid})"))?;
            while alive(pid) {
                if Instant::now() >= deadline {
                    bail!("cadre (pid {pid}) did not stop within {} s", args.timeout);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = std::fs::remove_file(layout.pid());
            println!("cadre stopped (pid {pid})");
        }
        None => println!("cadre is not running in {}", layout.dir.display()),
    }
    // Replicas (`cadre up --replicas`) left behind by a `cadre up` that was killed.
    let left = replicas::left_running(&layout);
    if !left.is_empty() {
        stop_processes(&left, deadline.saturating_duration_since(Instant::now()));
        println!("stopped {} controller replica(s) left running", left.len());
    }
    // Agents left behind by a controller that was killed.
    let mut orphans = Vec::new();
    if let Ok(entries) = std::fs::read_dir(layout.dir.join("agents")) {
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "pid") {
                let node = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                match live_pid(&path, &["agent", &node]) {
                    Some(pid) => orphans.push((node, pid)),
                    None => {
                        let _ = std::fs::remove_file(&path);
                    }
                }
            }
        }
    }
    if !orphans.is_empty() {
        stop_agents(
            &layout,
            &orphans,
            deadline.saturating_duration_since(Instant::now()),
        );
        println!("stopped {} agent(s) left running", orphans.len());
    }
    remove_run_dir(&layout);
    Ok(ExitCode::SUCCESS)
}

/// The run directory of a stopped cluster, if nothing is left in it: the agents' state
/// directories (each empty once its runs ended), the CA certificate and the directory
/// itself. A stale socket was removed by the controller, or is by the next one.
fn remove_run_dir(layout: &Layout) {
    if let Ok(entries) = std::fs::read_dir(layout.run.join("nodes")) {
        for e in entries.flatten() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
    let _ = std::fs::remove_dir(layout.run.join("nodes"));
    // The CA certificate the controller put there for its clients (it puts it there again
    // at its next start).
    let _ = std::fs::remove_file(layout.run.join(cadre_tls::CA_CERT_FILE));
    let _ = std::fs::remove_dir(&layout.run);
}

/// The umask `cadre up` was started with, which the agents it starts get (their tasks'
/// files are the users' business) and so does the `cadre up` that `--detach` starts.
static ORIGINAL_UMASK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0o022);

/// `command` is started with [`ORIGINAL_UMASK`].
fn with_original_umask(command: &mut std::process::Command) {
    let umask = ORIGINAL_UMASK.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: umask(2) is async-signal-safe and touches no memory; the closure captures
    // a plain integer made before the fork.
    unsafe {
        command.pre_exec(move || {
            libc::umask(umask as libc::mode_t);
            Ok(())
        });
    }
}

/// Umask 077 for the controller: nothing it makes is for others unless it says so (the
/// socket and the run directory are given their modes explicitly).
fn restrict_umask() {
    let before = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    ORIGINAL_UMASK.store(before.bits(), std::sync::atomic::Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::loopback_address;

    #[test]
    fn each_node_of_cadre_up_has_a_loopback_address_of_its_own() {
        assert_eq!(loopback_address(0), "127.0.0.2");
        assert_eq!(loopback_address(253), "127.0.0.255");
        assert_eq!(loopback_address(254), "127.0.1.0");
        assert_eq!(loopback_address(70_000), "127.1.17.114");
    }
}
