//! The `cadre` binary: one command with subcommands.
//!
//! - the cluster: `cadre up` (controller and agents on one machine), `cadre down`,
//!   `cadre server` and `cadre agent` (the two halves on their own);
//! - clients of the controller: `cadre submit`, `cadre jobs`, `cadre nodes`,
//!   `cadre explain`, `cadre cancel`, `cadre wait`, `cadre token`, `cadre ui` (a login
//!   link to the web dashboard); Kubernetes manifests:
//!   `cadre apply`, `cadre get`, `cadre delete`, `cadre describe`;
//! - the scheduling core's tools: `cadre cluster` (check and show a cluster description),
//!   `cadre policy` (check and show a policy), `cadre plan` (one scheduling pass over a job
//!   list, with every decision and reason), `cadre sim` (trace replays), `cadre discover`;
//! - `cadre bench`: the benchmarks (`cadre bench vs-slurm`: side by side with a real
//!   Slurm), in `cadre-bench`;
//! - the Slurm commands: invoked as `sbatch`, `scontrol`, ... (`cadre-slurm-commands`);
//!   `cadre install-aliases DIR` makes the links.
//!
//! A dispatcher: the Slurm commands and the benchmarks live in crates of their own, and what
//! the front ends share (how to name the controller and a policy) in `cadre-cli`.
//!
//! Exit codes ([`cadre_proto::exit`], listed by `--help`): 0 success; 1 an error (the
//! message says what and where), including a refusal by the controller and a controller
//! that cannot be reached; 2 a usage error. `cadre wait` exits 1 when a job did not
//! complete; `cadre rsh` 255 when it could not start the command.

mod agent;
mod daemon;
mod k8s;
mod native;
mod plan;
mod pods;
mod rsh;
mod sim;

use cadre_slurm_commands as slurm;

use anyhow::Result;
use cadre_cli::{ConnectArgs, PolicyArgs};
use cadre_core::cluster::Cluster;
use cadre_proto::exit;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// cadre: one workload manager for GPU training clusters.
#[derive(Parser, Debug)]
#[command(name = "cadre", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Bring up a cluster on this machine: the controller and one agent per node.
    Up(daemon::UpArgs),
    /// Stop the cluster `cadre up` started (its controller, then its agents).
    Down(daemon::DownArgs),
    /// Run the controller alone; agents connect with `cadre agent`.
    Server(daemon::ControllerArgs),
    /// Run a node agent that connects to a controller.
    Agent(agent::AgentArgs),
    /// Submit a command as a job.
    Submit {
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(flatten)]
        job: native::SubmitArgs,
    },
    /// List jobs (your own, or everyone's for administrators).
    Jobs {
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(flatten)]
        args: native::JobsArgs,
    },
    /// List nodes with their state, allocation and agent.
    Nodes {
        #[command(flatten)]
        connect: ConnectArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Each node's agent: its version and protocol, the address its tasks are reached
        /// at, when it was last heard, when its certificate expires, and what its health
        /// checks find.
        #[arg(short, long, conflicts_with = "json")]
        long: bool,
    },
    /// Why a job waits: reason, priority factors, planned start, per-node why-not.
    Explain {
        #[command(flatten)]
        connect: ConnectArgs,
        /// The job id.
        job: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel jobs.
    Cancel {
        #[command(flatten)]
        connect: ConnectArgs,
        #[arg(required = true)]
        jobs: Vec<u64>,
    },
    /// Wait until jobs end; exit 0 if every one completed, 1 otherwise. With `--for`,
    /// wait for a condition of applied workloads (KIND/NAME), as `kubectl wait` does.
    #[command(after_help = "Examples:
  cadre wait 12 13
  cadre wait --for=condition=Complete job/train --timeout 600
  cadre wait --for=condition=Failed pytorchjob/ddp -n research")]
    Wait {
        #[command(flatten)]
        connect: ConnectArgs,
        /// Job ids; with --for, workloads as KIND/NAME (job/train, pytorchjob/ddp).
        #[arg(required = true, value_name = "JOBS")]
        targets: Vec<String>,
        /// `condition=Complete` (or `Succeeded`) or `condition=Failed`: exit 0 once it
        /// holds, 1 when the workload ended the other way or at the timeout.
        #[arg(long = "for", value_name = "condition=COND")]
        for_condition: Option<String>,
        /// The workloads' namespace (with --for).
        #[arg(short = 'n', long, default_value = "default")]
        namespace: String,
        /// Give up after this many seconds.
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Print the output of a workload's ranks as `kubectl logs` prints pods' logs.
    #[command(
        long_about = "Print the output of the ranks of applied workloads, each rank a pod, as `kubectl logs` prints pods' logs: one pod (pod/NAME or NAME), every rank of a workload (KIND/NAME), or the pods whose labels match -l (the labels Kubernetes and the operators set: job-name, batch.kubernetes.io/job-completion-index, training.kubeflow.org/replica-type, volcano.sh/task-spec, and the template's own). Several pods' lines are prefixed [pod/NAME/CONTAINER]. The output is read from the agent of each rank's node while the rank runs and for 10 minutes after it ends, then from the rank's output file where this machine sees it (<name>-<job id>-<rank>.out in the working directory).",
        after_help = "Examples:
  cadre logs pod/train-0
  cadre logs -f pytorchjob/ddp
  cadre logs -l training.kubeflow.org/replica-type=worker --tail 20"
    )]
    Logs {
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(flatten)]
        args: pods::LogsArgs,
    },
    /// Apply Kubernetes manifests: workloads run as jobs, queue objects become queues.
    ///
    /// Workloads: Job, JobSet, MPIJob, PyTorchJob, Volcano Job. Queue objects: Kueue
    /// ResourceFlavor, ClusterQueue, LocalQueue, Topology; Volcano Queue. Queue objects are
    /// applied first (all or none; administrators), at once on the running cluster: running
    /// jobs are kept, and what is admitted next follows the new quotas.
    Apply {
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(flatten)]
        args: k8s::ApplyArgs,
    },
    /// List applied workloads with their jobs, or queues with their quota and use.
    Get {
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(flatten)]
        args: k8s::GetArgs,
    },
    /// Delete an applied workload (cancel its job) or a queue object.
    Delete {
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(flatten)]
        args: k8s::NamedArgs,
    },
    /// Show an applied workload: its translation, job, ranks' nodes and events.
    Describe {
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(flatten)]
        args: k8s::NamedArgs,
    },
    /// Run a command on the node where a task of this job runs, as a step of the job: the
    /// program MPI runs in place of ssh inside a job (also as `cadre-rsh`).
    #[command(
        long_about = "Run a command on the node where a task of this job runs, as a step of \
the job ($SLURM_JOB_ID, on the controller of $CADRE_SERVER): the program MPI's launchers \
(mpirun, mpiexec) run in place of ssh inside a cadre job, to start their daemons on the \
job's other nodes. An MPIJob's launcher finds it as /etc/mpi/cadre-rsh, a link named so \
(OMPI_MCA_plm_rsh_agent, I_MPI_HYDRA_BOOTSTRAP_EXEC, HYDRA_LAUNCHER_EXEC name it).

HOST is a name of one of the job's tasks (a Kubernetes workload's pod names, such as \
pi-worker-0.pi.default.svc) or one of its nodes. The command's words are joined by spaces and \
run by /bin/sh -c in $HOME, with this environment, as ssh does; its output comes back here. \
For a workload run in its images, the command runs inside the named task's container instead, \
with that container's user, environment and working directory. ssh's options are accepted \
and ignored, except a user (-l, USER@) other than this one.

Exit status: the command's; 255 when it could not be started.",
        after_help = "Examples:
  cadre rsh pi-worker-1.pi.default.svc hostname
  OMPI_MCA_plm_rsh_agent=/etc/mpi/cadre-rsh mpirun -n 4 ./pi"
    )]
    Rsh {
        /// [ssh options] HOST COMMAND...
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            required = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },
    /// Print a one-time login link to the web dashboard for the current user.
    #[command(
        long_about = "Print a one-time login link to the web dashboard (/ui/ on the \
controller's TCP listener, `cadre up --listen ADDR`) for the current user, as Jupyter does: \
opening it in a browser logs in as this user, with this user's rights (administrators act on \
every job and node, users on their own jobs). The link is good for one login within five \
minutes; the session it opens lasts at most 12 hours. Without a link, log in at /ui/ with an \
API token (`cadre token create`).",
        after_help = "Examples:
  cadre ui
  cadre ui --url https://head-node:6817"
    )]
    Ui {
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(flatten)]
        args: native::UiArgs,
    },
    /// Show each controller of --server ($CADRE_SERVER): alone, the leader of replicated
    /// ones (its epoch and since when), a standby, or unreachable. Exits 0 when one serves
    /// (alone or leading), 1 when none does.
    #[command(after_help = "Examples:
  cadre status
  CADRE_SERVER=https://ctl-a:6817,https://ctl-b:6817 cadre status")]
    Status {
        #[command(flatten)]
        connect: ConnectArgs,
        /// Print the answers as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Enrol nodes and cut them off (administrators): one-time join tokens, revocation of a
    /// node's certificate.
    #[command(after_help = "Examples:
  cadre node token create --node gpu-017 --ttl 30m > join.token
  (on gpu-017) cadre agent --controller https://ctl.example:6817 --ca ca.crt --join-file join.token
  cadre node revoke gpu-017")]
    Node {
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(subcommand)]
        command: native::NodeCommand,
    },
    /// Create, list and revoke API tokens (administrators).
    Token {
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(subcommand)]
        command: native::TokenCommand,
    },
    /// Check a cluster description and show what it describes.
    Cluster {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check a policy file (or a preset) and print it in full, defaults included.
    Policy {
        #[command(flatten)]
        policy: PolicyArgs,
    },
    /// Run one scheduling pass over a list of jobs and show every decision and reason.
    Plan(plan::PlanArgs),
    /// Replay a trace through the scheduler with simulated time; compare policies.
    Sim(sim::SimArgs),
    /// Show the hardware the node agent finds on this machine (NUMA, cores, memory, GPUs,
    /// RDMA NICs), as the node shape the scheduler would book.
    Discover {
        /// Declare this many emulated GPUs when the machine has none (reported as emulated).
        #[arg(long, default_value_t = 0)]
        gpus_per_node: u32,
        /// Print the shape and the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Link the Slurm command names (sbatch, squeue, scontrol, ...) to this executable in
    /// DIR, so that the binary answers as them.
    InstallAliases {
        /// Where to make the links (e.g. a directory early on PATH).
        dir: PathBuf,
    },
    /// Run a benchmark and print its figures.
    Bench {
        #[command(subcommand)]
        bench: cadre_bench::BenchCommand,
    },
}

/// Where the cluster comes from: a description file, a Slurm site's slurm.conf, or a flat
/// cluster from flags.
#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// A cluster description (versioned TOML; see docs/cluster.md).
    #[arg(long, env = "CADRE_CLUSTER", conflicts_with_all = ["nodes", "gpus_per_node", "slurm_conf"])]
    pub cluster: Option<PathBuf>,
    /// A Slurm site's slurm.conf as the cluster, with gres.conf and topology.conf from its
    /// directory (see docs/slurm-conf.md).
    #[arg(long, env = "CADRE_SLURM_CONF", conflicts_with_all = ["nodes", "gpus_per_node"])]
    pub slurm_conf: Option<PathBuf>,
    /// A flat cluster of this many nodes `node[001-N]` in one partition `gpu`.
    #[arg(long, default_value_t = 4)]
    pub nodes: u32,
    /// GPUs per node of the flat cluster (2 NUMA domains, 16 cores and 128 GiB per GPU,
    /// one NIC per 2 GPUs).
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
}

impl ClusterArgs {
    pub fn load(&self) -> Result<Cluster> {
        Ok(self.load_described()?.cluster)
    }

    /// The cluster, with what reading a slurm.conf noted.
    pub fn load_described(&self) -> Result<Described> {
        match (&self.cluster, &self.slurm_conf) {
            (Some(path), _) => Ok(Described::of(cadre_core::config::load_cluster_file(path)?)),
            (None, Some(path)) => Described::from_slurm_conf(path),
            (None, None) => {
                anyhow::ensure!(self.nodes > 0, "--nodes must be at least 1");
                Ok(Described::of(Cluster::flat_gpu(
                    self.nodes,
                    self.gpus_per_node,
                )))
            }
        }
    }
}

/// A cluster read from a description, and what the reading says about it.
pub struct Described {
    pub cluster: Cluster,
    /// Files read (a slurm.conf and the files beside it).
    pub files: Vec<PathBuf>,
    /// What a slurm.conf had that does not do in cadre what it does in Slurm
    /// (`file:line: what`).
    pub notes: Vec<String>,
    /// The line describing each node (`file:line`), where known.
    pub origins: BTreeMap<String, String>,
}

impl Described {
    fn of(cluster: Cluster) -> Described {
        Described {
            cluster,
            files: Vec::new(),
            notes: Vec::new(),
            origins: BTreeMap::new(),
        }
    }

    /// A Slurm site's slurm.conf, with gres.conf and topology.conf beside it.
    pub fn from_slurm_conf(path: &Path) -> Result<Described> {
        let read = cadre_slurmconf::load(path)?;
        let origins = read
            .cluster
            .nodes
            .iter()
            .filter_map(|n| Some((n.name.clone(), read.origin(&n.name)?.to_string())))
            .collect();
        Ok(Described {
            files: read.files,
            notes: read.notes.iter().map(ToString::to_string).collect(),
            origins,
            cluster: read.cluster,
        })
    }
}

/// The cluster of `cadre up` and `cadre server`: a description file, a Slurm site's
/// slurm.conf, or copies of this machine.
#[derive(Args, Debug, Clone)]
pub struct ClusterFileArgs {
    /// A cluster description (versioned TOML; see docs/cluster.md).
    #[arg(long, env = "CADRE_CLUSTER", conflicts_with = "slurm_conf")]
    pub cluster: Option<PathBuf>,
    /// A Slurm site's slurm.conf as the cluster, with gres.conf and topology.conf from its
    /// directory (see docs/slurm-conf.md).
    #[arg(long, env = "CADRE_SLURM_CONF")]
    pub slurm_conf: Option<PathBuf>,
    /// Nodes `node[001-N]`, each this machine as discovered, one agent each on this machine
    /// (with --cluster or --slurm-conf: agents for the description's first N nodes).
    /// Default: 1, or every node of the description.
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Emulated GPUs per node where the machine has none (reported as emulated everywhere).
    #[arg(long, default_value_t = 0)]
    pub gpus_per_node: u32,
}

impl ClusterFileArgs {
    /// Whether the cluster comes from a description (a file), not from this machine.
    pub fn described(&self) -> bool {
        self.cluster.is_some() || self.slurm_conf.is_some()
    }
}

fn main() -> ExitCode {
    // Invoked under the name of a Slurm command (a link named so), answer as that command.
    if let Some(code) = slurm::run_as_named() {
        return code;
    }
    let argv: Vec<String> = std::env::args().collect();
    if argv
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|name| name == "cadre-rsh" || name == "ssh")
    {
        // `cadre-rsh`, or `ssh` in an MPIJob's launcher (a link the agent makes there).
        return rsh::run(&argv[1..]);
    }
    let matches = Cli::command()
        .after_help(format!(
            "Exit codes: {} success, {} an error, {} a usage error (--help lists them all).",
            exit::SUCCESS,
            exit::ERROR,
            exit::USAGE
        ))
        .after_long_help(exit_codes_help())
        .get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("cadre: error: {}", cadre_cli::error_chain(&err));
            ExitCode::from(exit::ERROR)
        }
    }
}

/// The exit codes, as `cadre --help` lists them (from [`cadre_proto::exit`]).
/// `cadre wait`'s words as job ids (workloads need `--for`).
fn job_ids(targets: &[String]) -> anyhow::Result<Vec<u64>> {
    targets
        .iter()
        .map(|t| {
            t.parse().map_err(|_| {
                anyhow::anyhow!(
                    "`{t}` is not a job id (a workload, KIND/NAME, is waited for with --for=condition=Complete)"
                )
            })
        })
        .collect()
}

fn exit_codes_help() -> String {
    format!(
        "Exit codes:
  {:<4} success
  {:<4} an error; the message says what and where (a refusal of the controller, whatever
       its reason; a controller that cannot be reached; a file that does not parse);
       `cadre wait`: a job did not complete
  {:<4} a usage error (an unknown subcommand or option, a missing or invalid argument)
  {:<4} `cadre rsh`: the command could not be started on the job's node

Slurm's commands (sbatch, srun, salloc, squeue, sinfo, scancel, sacct, scontrol, sshare,
sprio): {} success, {} an error, {} an option error of sbatch, srun and salloc;
$SLURM_EXIT_ERROR instead of {} for a failed submission; srun, salloc and sbatch --wait
end with the job's or the step's exit code.",
        exit::SUCCESS,
        exit::ERROR,
        exit::USAGE,
        exit::RSH_CANNOT_RUN,
        exit::SUCCESS,
        exit::ERROR,
        exit::SLURM_USAGE,
        exit::ERROR,
    )
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Up(args) => daemon::up(&args),
        Command::Down(args) => daemon::down(&args),
        Command::Server(args) => daemon::server(&args),
        Command::Agent(args) => agent::run(&args),
        Command::Submit { connect, job } => native::submit(&connect, &job),
        Command::Jobs { connect, args } => native::jobs(&connect, &args),
        Command::Nodes {
            connect,
            json,
            long,
        } => native::nodes(&connect, json, long),
        Command::Explain { connect, job, json } => native::explain(&connect, job, json),
        Command::Cancel { connect, jobs } => native::cancel(&connect, &jobs),
        Command::Wait {
            connect,
            targets,
            for_condition: Some(condition),
            namespace,
            timeout,
        } => pods::wait_for(&connect, &condition, &targets, &namespace, timeout),
        Command::Wait {
            connect,
            targets,
            for_condition: None,
            timeout,
            ..
        } => native::wait(&connect, &job_ids(&targets)?, timeout),
        Command::Logs { connect, args } => pods::logs(&connect, &args),
        Command::Token { connect, command } => native::token(&connect, &command),
        Command::Ui { connect, args } => native::ui(&connect, &args),
        Command::Status { connect, json } => native::status(&connect, json),
        Command::Node { connect, command } => native::node(&connect, &command),
        Command::Apply { connect, args } => k8s::apply(&connect, &args),
        Command::Get { connect, args } => {
            pods::get(&connect, &args).unwrap_or_else(|| k8s::get(&connect, &args))
        }
        Command::Delete { connect, args } => k8s::delete(&connect, &args),
        Command::Describe { connect, args } => k8s::describe(&connect, &args),
        Command::Rsh { args } => Ok(rsh::run(&args)),
        Command::Cluster { cluster, json } => {
            let described = cluster.load_described()?;
            let mut summary = plan::cluster_summary(&described.cluster);
            summary.read = described
                .files
                .iter()
                .map(|f| f.display().to_string())
                .collect();
            summary.notes = described.notes;
            if json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                print!("{}", plan::render_cluster_summary(&summary));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Policy { policy } => {
            let policy = policy.load()?;
            print!("{}", toml::to_string(&policy)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Plan(args) => plan::run(&args),
        Command::Discover {
            gpus_per_node,
            json,
        } => discover(gpus_per_node, json),
        Command::Sim(args) => sim::run(&args),
        Command::InstallAliases { dir } => slurm::install_aliases(&dir),
        Command::Bench { bench } => cadre_bench::run(&bench),
    }
}

/// `cadre discover`: the agent's hardware discovery on this machine.
fn discover(gpus_per_node: u32, json: bool) -> Result<ExitCode> {
    let opts = cadre_agent::discovery::DiscoveryOptions {
        emulate_gpus: gpus_per_node,
        ..Default::default()
    };
    let found = cadre_agent::discovery::discover(&opts)?;
    if json {
        let out = serde_json::json!({
            "shape": found.shape,
            "gpus_emulated": found.gpus_emulated,
            "report": found.report,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    for line in &found.report {
        println!("{line}");
    }
    let shape = &found.shape;
    for (i, d) in shape.numa.iter().enumerate() {
        println!(
            "numa {i}: {} cores, {} MiB, GPUs {:?}, NICs {:?}",
            d.cores.len(),
            d.mem_mib,
            d.gpus,
            d.nics
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cadre`'s usage errors end with the documented code (clap's own).
    #[test]
    fn usage_errors_exit_with_the_documented_code() {
        for argv in [
            &["cadre", "--no-such-option"][..],
            &["cadre", "no-such-subcommand"],
            &["cadre", "cancel"],
            &["cadre", "explain", "not-a-number"],
        ] {
            let err = Cli::try_parse_from(argv).unwrap_err();
            assert_eq!(err.exit_code(), i32::from(exit::USAGE), "{argv:?}: {err}");
        }
    }

    #[test]
    fn the_help_lists_every_exit_code() {
        let help = exit_codes_help();
        for code in [
            exit::SUCCESS,
            exit::ERROR,
            exit::USAGE,
            exit::RSH_CANNOT_RUN,
        ] {
            assert!(help.contains(&format!("\n  {code:<4} ")), "{code}: {help}");
        }
        assert!(help.contains(&format!("{} an option error", exit::SLURM_USAGE)));
    }
}
