//! `cadre agent`: the node agent as a process. Reads its options, finds the key, sets up
//! logging and a tokio runtime, and runs [`cadre_agent::service::run`] until SIGTERM or
//! SIGINT.

use anyhow::{Context, Result, bail};
use cadre_agent::cgroup::CgroupSetting;
use cadre_agent::discovery::DiscoveryOptions;
use cadre_agent::health::HealthChecks;
use cadre_agent::prolog::NodeScripts;
use cadre_agent::service::{self, AgentConfig, OwnSettings};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The key itself, for deployments that pass secrets through the environment.
const KEY_ENV: &str = "CADRE_AGENT_KEY";

/// Run this machine's node agent: connect to the controller, report the node's hardware,
/// and run the job tasks the controller places on it.
/// `--cgroups`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupMode {
    Auto,
    Off,
}

#[derive(Args, Debug)]
#[command(
    long_about = "Run this machine's node agent (the slurmd role): connect to the controller, \
report the node's hardware (cores, NUMA domains, memory, GPUs, RDMA NICs), run the job tasks \
the controller places on this node with their allocated cores and GPUs, and report how they \
end.

The agent keeps reconnecting (after 50 ms, doubling up to 2 s) whenever the controller cannot \
be reached; running tasks go on meanwhile and their ends are reported once it is back. It exits \
with an error when the controller rejects its key or refuses it.

Users: an agent running as root runs each job as the user who submitted it, and never runs \
as root a job that root did not submit. An agent running as another user runs jobs as itself, so it only \
runs that user's jobs; it gives each task a user namespace of its own (its ids mapped to \
themselves) where the kernel allows it, so that the job's hosts file is mounted over /etc/hosts \
for the task as a root agent's is, and logs a warning when the kernel refuses.

The key (the controller's agent.key) comes from --key-file, else from the CADRE_AGENT_KEY \
environment variable, else from agent.key in the data directory ($CADRE_DATA_DIR, default \
~/.local/share/cadre), where a controller on the same machine keeps it.

On SIGTERM or SIGINT the agent stops every running job (SIGTERM, then SIGKILL after the job's \
KillWait), reports them NODE_FAIL so that the controller can requeue them, and exits with \
status 0. Exit status 1: the agent could not start, or the controller rejected or refused it.",
    after_help = "Examples:
  cadre agent --controller https://ctl.example:6817 --ca /etc/cadre/ca.crt --join-file /etc/cadre/join.token
  cadre agent --controller http://ctl.example:6817 --key-file /etc/cadre/agent.key   (an --insecure controller)
  cadre agent --controller unix:///run/cadre/cadre.sock --node node001 --gpus-per-node 8"
)]
pub struct AgentArgs {
    /// The controller: https://HOST:PORT (with --ca; enrolled with --join-file on the first
    /// start), http://HOST:PORT (an --insecure controller), or unix:///PATH/TO/SOCKET on
    /// the same machine; replicated controllers: their addresses separated by commas, tried
    /// in turn (a standby refuses the agent until it leads).
    #[arg(long, env = "CADRE_SERVER", value_name = "URL")]
    pub controller: String,
    /// This node's name in the controller's cluster [default: with --state-dir and an
    /// https:// controller, the node its certificate names (when it enrols, the node its
    /// join token was made for, `cadre node token create --node NAME`, else the host
    /// name); otherwise this machine's host name, up to its first dot].
    #[arg(long, env = "CADRE_NODE", value_name = "NAME")]
    pub node: Option<String>,
    /// A file holding the cluster's agent key (the controller's agent.key). Without it, the
    /// key is taken from CADRE_AGENT_KEY, else from agent.key in the data directory. Not
    /// needed with an https:// controller: the node's certificate is its credential.
    #[arg(long, env = "CADRE_AGENT_KEY_FILE", value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// For an https:// controller: the cluster's CA certificate (the controller's ca.crt),
    /// the only authority the agent trusts to enrol.
    #[arg(long, env = "CADRE_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// For an https:// controller, on the first start: a file holding a one-time join token
    /// (`cadre node token create`), traded for this node's certificate, which is kept in
    /// tls/ of the state directory from then on. Also $CADRE_JOIN_TOKEN. A token is a
    /// secret: never on a command line.
    #[arg(long, env = "CADRE_JOIN_TOKEN_FILE", value_name = "FILE")]
    pub join_file: Option<PathBuf>,
    /// Declare G emulated GPUs when the machine has none: reported to the controller as
    /// emulated, for trying cadre without GPUs. Real GPUs are always used instead.
    #[arg(long, default_value_t = 0, value_name = "G")]
    pub gpus_per_node: u32,
    /// The agent's own directory (the batch scripts and files of running jobs), which the
    /// jobs' users must reach (mode 0755, writable by the agent's user alone); one per agent
    /// [default: nodes/NODE in the run directory, $CADRE_RUN_DIR or DATA_DIR.run].
    #[arg(long, env = "CADRE_AGENT_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Whether each task runs in a cgroup v2 of its own: `auto` makes them under the
    /// agent's own cgroup in the unified hierarchy (`/sys/fs/cgroup`, or
    /// `/sys/fs/cgroup/unified` on a hybrid host) where it may, else runs tasks in process
    /// groups only and says so at start; `off`, process groups only. In a cgroup, every
    /// process of a task (daemons that left its process group included) is signalled and
    /// killed with it, and its GPUs are freed only once none is left.
    #[arg(long, value_enum, default_value_t = CgroupMode::Auto, conflicts_with = "cgroup_parent")]
    pub cgroups: CgroupMode,
    /// The cgroup v2 directory to make the tasks' cgroups under instead of the agent's own
    /// (the agent refuses to start where it cannot); memory limits and out-of-memory
    /// detection need the memory controller enabled in its `cgroup.subtree_control`.
    #[arg(long, value_name = "DIR")]
    pub cgroup_parent: Option<PathBuf>,
    /// Seconds a task's processes may survive SIGKILL before the node is drained "Kill
    /// task failed" (Slurm's UnkillableStepTimeout); the job ends meanwhile, its GPUs are
    /// not booked again while the node is drained [default: the controller's
    /// --agent-kill-timeout, else 60].
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub kill_timeout: Option<u64>,
    /// A program run as root before each job's tasks start on this node (Slurm's Prolog),
    /// with the job's SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_UID, SLURM_JOB_NODELIST,
    /// SLURM_JOB_PARTITION, SLURMD_NODENAME and CUDA_VISIBLE_DEVICES. When it fails, the
    /// node is drained with its first line of output and the job is requeued whole. It
    /// must be root's and writable by root alone [default: the controller's
    /// --agent-prolog, else none].
    #[arg(long, value_name = "PROGRAM")]
    pub prolog: Option<PathBuf>,
    /// A program run as root after each job's tasks have ended on this node (Slurm's
    /// Epilog), told as the prolog; when it fails, the node is drained [default: the
    /// controller's --agent-epilog, else none].
    #[arg(long, value_name = "PROGRAM")]
    pub epilog: Option<PathBuf>,
    /// A program run as the job's user before each task's program starts (Slurm's
    /// TaskProlog), in the task's environment; lines of its output change the task:
    /// `export NAME=value`, `unset NAME`, `print TEXT` (to the task's output). When it
    /// fails, the task's launch fails. It must be root's and writable by root alone
    /// [default: the controller's --agent-task-prolog, else none].
    #[arg(long, value_name = "PROGRAM")]
    pub task_prolog: Option<PathBuf>,
    /// A program run as the job's user after each task has ended (Slurm's TaskEpilog), in
    /// the task's environment; its failure is logged [default: the controller's
    /// --agent-task-epilog, else none].
    #[arg(long, value_name = "PROGRAM")]
    pub task_epilog: Option<PathBuf>,
    /// Seconds the prolog or epilog may run before it is killed (and counts as failed)
    /// [default: the controller's --agent-prolog-timeout, else 300].
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub prolog_timeout: Option<u64>,
    /// A directory where each GPU a job holds gets a file named by its index holding the
    /// job's id, for the DCGM exporter's --hpc-job-mapping-dir (GPU metrics by job).
    #[arg(long, value_name = "DIR")]
    pub dcgm_job_mapping_dir: Option<PathBuf>,
    /// A program run as root every --health-check-interval, and before the node takes its
    /// first job (Slurm's HealthCheckProgram): when it fails, its first line of output
    /// drains the node until it passes again. Built-in checks run beside it: free space
    /// for jobs, the GPUs found at the start, RDMA ports, the clock against the
    /// controller's. It must be root's and writable by root alone [default: the
    /// controller's --agent-health-check-program, else none].
    #[arg(long, value_name = "PROGRAM")]
    pub health_check_program: Option<PathBuf>,
    /// Seconds between runs of the health checks [default: the controller's
    /// --agent-health-check-interval, else 60].
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub health_check_interval: Option<u64>,
    /// Seconds the health-check program may run before it is killed (and fails).
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub health_check_timeout: u64,
    /// The least free space, in MiB, of the filesystem of the agent's state directory
    /// (the jobs' scripts and files); below it the node is drained. 0: not checked.
    #[arg(long, value_name = "MIB", default_value_t = 100)]
    pub health_min_free_mib: u64,
    /// The host name at which other nodes reach this node's tasks (MASTER_ADDR and the like)
    /// [default: this machine's host name].
    #[arg(long, value_name = "HOST")]
    pub address: Option<String>,
    /// The node's container runtime, a command line whose `run` and `rm` speak podman's
    /// options (`podman`, `podman --runtime /usr/sbin/runc`): Kubernetes workloads whose
    /// containers run in their images are placed on nodes that have one and run there.
    /// Checked with `--version` at start [default: none; such workloads are not placed
    /// here].
    #[arg(long, env = "CADRE_CONTAINER_RUNTIME", value_name = "COMMAND")]
    pub container_runtime: Option<String>,
    /// The capabilities a container may be given back when its manifest asks for them
    /// (`securityContext.capabilities.add`; containers run with every other one dropped),
    /// comma-separated: `IPC_LOCK,SYS_NICE`. A container asking for another one fails to
    /// launch, for good [default: none].
    #[arg(
        long,
        env = "CADRE_CONTAINER_ALLOWED_CAPABILITIES",
        value_name = "CAPS",
        value_delimiter = ','
    )]
    pub container_allowed_capabilities: Vec<String>,
    /// How much to log on stderr: error, warn, info, debug or trace.
    #[arg(long, env = "CADRE_LOG", default_value = "info", value_name = "LEVEL")]
    pub log_level: tracing::Level,
}

/// `cadre agent`.
pub fn run(args: &AgentArgs) -> Result<ExitCode> {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_max_level(args.log_level)
        .with_writer(std::io::stderr)
        // Colours on a terminal only: not in journald or a log file.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let data_dir = data_dir();
    let secure = args.controller.starts_with("https://") || args.controller.starts_with("wss://");
    // The node's name: given; else, with a state directory of its own over TLS, the one
    // its certificate (or, to enrol, its join token) names; else the host's.
    let named_by_controller = args.node.is_none() && secure && args.state_dir.is_some();
    let mut node = match &args.node {
        Some(n) => n.clone(),
        None if named_by_controller => String::new(),
        None => {
            let host = service::host_name()?;
            host.split('.').next().unwrap_or(&host).to_string()
        }
    };
    let key = match read_key(args.key_file.as_deref(), data_dir.as_deref()) {
        Ok(key) => key,
        // Over TLS the node's certificate is the credential.
        Err(_) if secure && args.key_file.is_none() => String::new(),
        Err(e) => return Err(e),
    };
    let state_dir = match (&args.state_dir, &data_dir) {
        (Some(dir), _) => absolute(dir)?,
        (None, Some(data)) => cadre_client::locate::run_dir_of(data)
            .join("nodes")
            .join(&node),
        (None, None) => {
            bail!("no state directory: give --state-dir, or set CADRE_DATA_DIR or HOME")
        }
    };
    let tls = if secure {
        let (config, named) = node_tls(args, &node, &state_dir)?;
        if node.is_empty() {
            node = named;
        }
        Some(config)
    } else {
        None
    };
    let mut config = AgentConfig::new(&args.controller, key, node, state_dir);
    config.tls = tls;
    config.discovery = DiscoveryOptions {
        emulate_gpus: args.gpus_per_node,
        ..DiscoveryOptions::default()
    };
    config.cgroups = match (&args.cgroup_parent, args.cgroups) {
        (Some(dir), _) => CgroupSetting::Under(dir.clone()),
        (None, CgroupMode::Auto) => CgroupSetting::Auto,
        (None, CgroupMode::Off) => CgroupSetting::Off,
    };
    let secs = std::time::Duration::from_secs;
    config.kill_timeout = args
        .kill_timeout
        .map_or(cadre_agent::cgroup::DEFAULT_KILL_TIMEOUT, secs);
    config.scripts = NodeScripts {
        prolog: args.prolog.clone(),
        epilog: args.epilog.clone(),
        task_prolog: args.task_prolog.clone(),
        task_epilog: args.task_epilog.clone(),
        timeout: args.prolog_timeout.map(secs),
        dcgm_job_mapping_dir: args.dcgm_job_mapping_dir.clone(),
    };
    // What is given here is the agent's; the controller's settings fill in the rest.
    config.own = OwnSettings {
        prolog: args.prolog.is_some(),
        epilog: args.epilog.is_some(),
        task_prolog: args.task_prolog.is_some(),
        task_epilog: args.task_epilog.is_some(),
        prolog_timeout: args.prolog_timeout.is_some(),
        health_check_program: args.health_check_program.is_some(),
        health_check_interval: args.health_check_interval.is_some(),
        kill_timeout: args.kill_timeout.is_some(),
    };
    config
        .scripts
        .check()
        .map_err(|why| anyhow::anyhow!("refusing to start: {why}"))?;
    if let Some(program) = &args.health_check_program {
        cadre_agent::prolog::trusted(program, "--health-check-program", false)
            .map_err(|why| anyhow::anyhow!("refusing to start: {why}"))?;
    }
    config.health = HealthChecks {
        program: args.health_check_program.clone(),
        interval: args
            .health_check_interval
            .map_or(HealthChecks::default().interval, secs),
        timeout: std::time::Duration::from_secs(args.health_check_timeout),
        min_free_mib: args.health_min_free_mib,
    };
    config.address = args.address.clone();
    config.container_runtime = args.container_runtime.clone();
    config.container_allowed_capabilities =
        allowed_capabilities(&args.container_allowed_capabilities)?;
    config.rsh_executable = std::env::current_exe().ok();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("cadre-agent")
        .build()
        .context("failed to start the agent's runtime")?;
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("failed to watch for SIGTERM")?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
            }
        };
        service::run(config, shutdown).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// The node's TLS for an https:// controller: its identity kept in the state directory, or
/// one enrolled now with the join token (`--join-file`, `$CADRE_JOIN_TOKEN`) and the CA of
/// `--ca`; with the node's name as its certificate says. `node` empty: the name is the
/// certificate's (at enrolment, the one the join token was made for).
fn node_tls(
    args: &AgentArgs,
    node: &str,
    state_dir: &Path,
) -> Result<(std::sync::Arc<rustls::ClientConfig>, String)> {
    use cadre_agent::enrol::{NodeIdentity, enrol};
    service::prepare_state_dir(state_dir)?;
    let identity = match NodeIdentity::load(state_dir)? {
        Some(identity) => identity,
        None => {
            let token = match (&args.join_file, std::env::var("CADRE_JOIN_TOKEN")) {
                (Some(file), _) => {
                    // Others must not have read it first (and enrolled before this agent).
                    use std::os::unix::fs::PermissionsExt;
                    let mode = std::fs::metadata(file)
                        .with_context(|| {
                            format!("failed to read the join token {}", file.display())
                        })?
                        .permissions()
                        .mode();
                    if mode & 0o077 != 0 {
                        bail!(
                            "the join token {} may be read by others (mode {:o}); it must be readable by its owner alone (chmod 600)",
                            file.display(),
                            mode & 0o777
                        );
                    }
                    std::fs::read_to_string(file)
                        .with_context(|| {
                            format!("failed to read the join token {}", file.display())
                        })?
                        .trim()
                        .to_string()
                }
                (None, Ok(token)) if !token.trim().is_empty() => token.trim().to_string(),
                _ => bail!(
                    "node `{}` has not enrolled with this controller yet: give a join token \
                     (`cadre node token create` on the controller) in --join-file FILE or \
                     CADRE_JOIN_TOKEN, and the cluster's CA in --ca FILE",
                    if node.is_empty() { "(unnamed)" } else { node }
                ),
            };
            let ca_path = args.ca.as_deref().context(
                "--ca FILE (the controller's ca.crt) is needed to enrol: it is the only authority trusted",
            )?;
            let ca_pem = std::fs::read_to_string(ca_path)
                .with_context(|| format!("failed to read the CA {}", ca_path.display()))?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("failed to start the enrolment's runtime")?;
            let host = service::host_name()?;
            let host = host.split('.').next().unwrap_or(&host).to_string();
            // With replicated controllers, the leader enrols: a standby refuses (503).
            let mut enrolled = None;
            for controller in args
                .controller
                .split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
            {
                let tried = rt.block_on(enrol(
                    controller,
                    node,
                    Some(&host),
                    &token,
                    &ca_pem,
                    ca_path,
                    std::time::Duration::from_secs(30),
                ));
                let standby =
                    matches!(
                        &tried,
                        Err(cadre_agent::enrol::EnrolError::Refused { status: 503, .. })
                    ) || matches!(&tried, Err(cadre_agent::enrol::EnrolError::Connect { .. }));
                enrolled = Some(tried);
                if !standby {
                    break;
                }
            }
            let identity = enrolled.context("no controller address given")??;
            identity.save(state_dir)?;
            eprintln!(
                "cadre agent: node `{}` enrolled; its certificate is kept in {}",
                identity.node().unwrap_or_default(),
                state_dir.join(cadre_agent::enrol::IDENTITY_DIR).display()
            );
            identity
        }
    };
    // A --node other than the certificate's is the controller's to refuse (it knows the
    // agent by its certificate alone).
    let named = identity
        .node()
        .context("the node's certificate names no node (its common name)")?;
    Ok((identity.client_config(state_dir)?, named))
}

/// `--container-allowed-capabilities`, each named as [`cadre_k8s::capability`] names it.
pub(crate) fn allowed_capabilities(names: &[String]) -> Result<Vec<String>> {
    let mut allowed: Vec<String> = Vec::new();
    for name in names.iter().filter(|n| !n.trim().is_empty()) {
        let Some(c) = cadre_k8s::capability(name) else {
            bail!(
                "unknown capability `{name}` in --container-allowed-capabilities: name Linux \
                 capabilities such as IPC_LOCK or SYS_NICE (ALL is not one)"
            );
        };
        if !allowed.iter().any(|a| a == c) {
            allowed.push(c.to_string());
        }
    }
    Ok(allowed)
}

/// `$CADRE_DATA_DIR`, else `~/.local/share/cadre`.
fn data_dir() -> Option<PathBuf> {
    match std::env::var_os("CADRE_DATA_DIR") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".local/share/cadre")),
    }
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("failed to resolve {}", path.display()))
}

/// The key: from `key_file`, else `$CADRE_AGENT_KEY`, else `agent.key` in the data
/// directory. Surrounding whitespace (a final newline) is not part of it.
fn read_key(key_file: Option<&Path>, data_dir: Option<&Path>) -> Result<String> {
    let from_file = |path: &Path| -> Result<String> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("failed to read the agent key file {}", path.display()))?;
        let key = text.trim();
        if key.is_empty() {
            bail!("the agent key file {} is empty", path.display());
        }
        Ok(key.to_string())
    };
    if let Some(path) = key_file {
        cadre_cli::paths::check_secret_file(path, "the agent key file")?;
        return from_file(path);
    }
    if let Ok(key) = std::env::var(KEY_ENV)
        && !key.trim().is_empty()
    {
        return Ok(key.trim().to_string());
    }
    if let Some(path) = data_dir.map(|d| d.join("agent.key"))
        && path.exists()
    {
        cadre_cli::paths::check_secret_file(&path, "the agent key file")?;
        return from_file(&path);
    }
    bail!("no agent key: give --key-file FILE (the controller's agent.key), or set {KEY_ENV}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_capabilities_are_named_as_the_kernel_names_them() {
        let names = |s: &[&str]| s.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            allowed_capabilities(&names(&["ipc_lock", "CAP_SYS_NICE", "IPC_LOCK", ""])).unwrap(),
            ["IPC_LOCK", "SYS_NICE"]
        );
        let err = allowed_capabilities(&names(&["ALL"])).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unknown capability `ALL` in --container-allowed-capabilities"),
            "{err}"
        );
    }

    #[test]
    fn a_key_file_is_read_without_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("agent.key");
        std::fs::write(&file, "k3y\n").unwrap();
        // A key others may read is refused: it is root on every node.
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        let err = read_key(Some(&file), None).unwrap_err();
        assert!(err.to_string().contains("open to group or others"), "{err}");
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        assert_eq!(read_key(Some(&file), None).unwrap(), "k3y");
        // The data directory's agent.key when no file is named (and no env key is set in
        // the test's environment).
        if std::env::var(KEY_ENV).is_err() {
            assert_eq!(read_key(None, Some(dir.path())).unwrap(), "k3y");
        }
        std::fs::write(&file, "\n").unwrap();
        let err = read_key(Some(&file), None).unwrap_err();
        assert!(err.to_string().ends_with("agent.key is empty"), "{err}");
        let err = read_key(Some(&dir.path().join("none")), None).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("failed to read the agent key file"),
            "{err}"
        );
    }
}
