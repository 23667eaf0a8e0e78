//! One run on this node, from the controller's [`LaunchOrder`] to the end of its tasks, in
//! a thread of its own (launching and supervising are blocking; see [`crate::gang`]).
//!
//! The thread prepares the launch (who the tasks run as, the batch script written to the
//! state directory, the [`JobLaunch`]), starts the gang, reports `Started` or
//! `LaunchFailed`, then supervises the tasks while taking the service's orders (stop,
//! signal) until they have all ended, and reports `Ended`. Reports go to the service loop
//! through a channel; orders come through another. If the service goes away, the run's
//! tasks are killed: a task never runs unsupervised.
//!
//! Who the tasks run as: an agent running as root runs them as the job's user
//! (`spec.user`, looked up on this node) and never as root unless the user is `root`; an
//! agent that is not root cannot switch users and runs the tasks as its own user, so it
//! only runs the jobs of that user (others fail permanently, see [`crate::launch`]).
//!
//! Whether a failed launch is permanent: when the job itself is the cause (an unknown
//! user, a missing working directory or program, a script that cannot be written for lack
//! of permission, an order that contradicts itself), trying it again on any node cannot
//! help; when the node is (out of processes, a cgroup it cannot make, an allocation that
//! does not match its shape), another try elsewhere can.

use super::record;
use crate::cgroup::KILL_TASK_FAILED;
use crate::gang::{self, launch_gang};
use crate::jobenv::{JobLaunch, LocalNode};
use crate::launch::{LaunchError, RunAs};
use crate::prolog::{Context, JobFacts, NodeScripts};
use crate::rundir::{BindSource, RunDir};
use crate::supervise::TaskOutcome;
use cadre_core::cluster::{NodeId, NodeShape};
use cadre_core::job::JobState;
use cadre_proto::agent::{LaunchOrder, OutputChunk, OutputStream, RunRef, TaskEvent};
use nix::errno::Errno;
use nix::sys::signal::Signal;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// What every run on this node shares.
#[derive(Debug)]
pub(crate) struct LaunchContext {
    pub(crate) node_name: String,
    pub(crate) shape: NodeShape,
    pub(crate) os_cpus: Vec<u32>,
    pub(crate) cgroup_parent: Option<PathBuf>,
    /// How long a task's processes may survive SIGKILL (`--kill-timeout`, or the
    /// controller's setting).
    pub(crate) kill_timeout: std::sync::RwLock<Duration>,
    /// The site's prolog and epilog, and the GPUs' job mapping (the agent's options, or
    /// the controller's settings).
    pub(crate) scripts: std::sync::RwLock<NodeScripts>,
    /// Each task's keeper ([`crate::keeper`]).
    pub(crate) keepers: Option<crate::keeper::Keepers>,
    /// Batch scripts go to `state_dir/job<ID>.<run>/script`.
    pub(crate) state_dir: PathBuf,
    /// The agent's effective uid.
    pub(crate) agent_uid: u32,
    /// How tasks get the job's files at their usual paths.
    pub(crate) mounts: crate::mountns::TaskMounts,
    /// The node's container runtime, if it has one.
    pub(crate) container_runtime: Option<Arc<crate::container::ContainerRuntime>>,
    /// The capabilities containers may be given back (`--container-allowed-capabilities`).
    pub(crate) container_allowed_capabilities: Vec<String>,
    /// The node's GPUs are declared, not discovered.
    pub(crate) gpus_emulated: bool,
    /// cadre's executable, for MPI's rsh agent.
    pub(crate) rsh_executable: Option<PathBuf>,
    /// The controller's address, as the agent reaches it.
    pub(crate) controller: String,
    /// The cluster's agent key, which job tokens are made with.
    pub(crate) agent_key: String,
    /// The executable's loader and libraries, for `cadre-rsh` in containers.
    pub(crate) rsh_libraries: Option<(PathBuf, Vec<PathBuf>)>,
    /// Each task's output files, open for reading ([`crate::output`]).
    pub(crate) outputs: Arc<crate::output::OutputKeeper>,
}

impl LaunchContext {
    /// The prolog, epilog and GPU mapping as they are now (a run keeps what it started with).
    pub(crate) fn scripts(&self) -> NodeScripts {
        self.scripts.read().map(|s| s.clone()).unwrap_or_default()
    }

    pub(crate) fn kill_timeout(&self) -> Duration {
        self.kill_timeout
            .read()
            .map_or(crate::cgroup::DEFAULT_KILL_TIMEOUT, |t| *t)
    }
}

/// What a run's thread tells the service, in order: a task event, or output of a step's
/// task to relay (sent before the step's end, so that its `srun` gets all of it first).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Report {
    Event(TaskEvent),
    Output(OutputChunk),
    /// An answer to the controller (a task's output read), made off the service's loop.
    Answer(cadre_proto::agent::AgentMessage),
}

/// An order for a running run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum RunCommand {
    /// SIGTERM now, SIGKILL after `kill_wait`.
    Stop { kill_wait: Duration },
    /// A signal to every task's process group.
    Signal(i32),
    /// A new time limit, from the run's start.
    SetTimeLimit(Option<Duration>),
}

/// The service's end of a run's thread.
#[derive(Debug)]
pub(crate) struct RunHandle {
    commands: mpsc::Sender<RunCommand>,
}

impl RunHandle {
    pub(crate) fn send(&self, command: RunCommand) {
        // The thread leaves only after reporting the run's end, which the service sees
        // before it could send anything else for the run; a send to a gone thread is a
        // race with that end, and the order has nothing left to act on.
        let _ = self.commands.send(command);
    }
}

/// What went wrong before the gang could start.
#[derive(Debug, thiserror::Error)]
enum PrepareError {
    #[error("the run spec cannot be launched: {0}")]
    Spec(String),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("failed to write the batch script {}: {source}", path.display())]
    Script { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Workload(#[from] crate::workload::WorkloadError),
}

impl PrepareError {
    fn is_permanent(&self) -> bool {
        match self {
            PrepareError::Spec(_) => true,
            PrepareError::Launch(e) => is_permanent(e),
            PrepareError::Script { source, .. } => {
                source.kind() == io::ErrorKind::PermissionDenied
                    || source.raw_os_error() == Some(Errno::EROFS as i32)
            }
            PrepareError::Workload(e) => e.is_permanent(),
        }
    }
}

/// Whether trying the launch again cannot help (see the module doc).
pub(crate) fn is_permanent(e: &LaunchError) -> bool {
    use LaunchError::*;
    match e {
        NoSuchTask { .. }
        | TaskNotOnNode { .. }
        | UnknownNodeName { .. }
        | EmptyCommand { .. }
        | NulByte { .. }
        | UnknownUser { .. }
        | UserMismatch { .. }
        | RefuseRoot { .. }
        | Identity { .. }
        | CannotSwitchUser { .. }
        | NoTasksOnNode { .. }
        | NoWorkDir { .. }
        | ContainerEnv { .. }
        | ImageTransport { .. } => true,
        GpuOutOfRange { .. }
        | CoreOutOfRange { .. }
        | UserLookup { .. }
        | Pipe { .. }
        | EnvFile { .. }
        | Cgroup { .. }
        | Keeper { .. }
        | TaskProlog { .. }
        | Signal { .. }
        | Wait { .. } => false,
        // The program, the working directory or an output file is missing or forbidden
        // to the user: the job's doing. Resource shortages are the node's.
        Spawn { source, .. } => source.raw_os_error().is_some_and(|n| {
            [
                Errno::ENOENT,
                Errno::EACCES,
                Errno::EPERM,
                Errno::ENOTDIR,
                Errno::EISDIR,
                Errno::ENOEXEC,
                Errno::ELOOP,
                Errno::ENAMETOOLONG,
                Errno::EROFS,
            ]
            .iter()
            .any(|&e| e as i32 == n)
        }),
    }
}

/// Starts the run's thread. Its reports, `Started` or `LaunchFailed` then `Ended`, go to
/// `events`.
pub(crate) fn spawn_run(
    order: Box<LaunchOrder>,
    node_id: NodeId,
    ctx: Arc<LaunchContext>,
    events: UnboundedSender<Report>,
) -> io::Result<RunHandle> {
    let (tx, rx) = mpsc::channel();
    let run = order.run;
    std::thread::Builder::new()
        .name(match run.step {
            Some(s) => format!("step-{}.{s}", run.job),
            None => format!("run-{}.{}", run.job, run.run),
        })
        .spawn(move || {
            let span = tracing::info_span!("run", job = %run.job, run = run.run);
            let _entered = span.enter();
            run_thread(&order, node_id, &ctx, &events, &rx);
        })?;
    Ok(RunHandle { commands: tx })
}

fn report(events: &UnboundedSender<Report>, event: TaskEvent) {
    if events.send(Report::Event(event)).is_err() {
        tracing::warn!("the agent service is gone; the run's report is lost");
    }
}

fn run_thread(
    order: &LaunchOrder,
    node_id: NodeId,
    ctx: &LaunchContext,
    events: &UnboundedSender<Report>,
    commands: &mpsc::Receiver<RunCommand>,
) {
    let run = order.run;
    let failed = |reason: String, permanent: bool| {
        tracing::warn!(%reason, permanent, "launch failed");
        report(
            events,
            TaskEvent::LaunchFailed {
                run,
                reason,
                permanent,
            },
        );
    };
    let (job, run_as, script_dir) = match prepare(order, node_id, ctx) {
        Ok(p) => p,
        Err(e) => return failed(e.to_string(), e.is_permanent()),
    };
    let node = LocalNode {
        id: node_id,
        name: ctx.node_name.clone(),
        shape: ctx.shape.clone(),
        os_cpus: ctx.os_cpus.clone(),
        cgroup_parent: ctx.cgroup_parent.clone(),
        kill_timeout: ctx.kill_timeout(),
        keepers: ctx.keepers.clone(),
        task_scripts: ctx.scripts().task_scripts(),
    };
    // A job's run (not a step) is framed by the site's prolog and epilog.
    let facts = match run.step {
        None => match job_facts(&job, &node, &run_as) {
            Ok(f) => Some(f),
            Err(e) => {
                remove_script_dir(script_dir.as_deref());
                return failed(e.to_string(), is_permanent(&e));
            }
        },
        Some(_) => None,
    };
    if let Some(f) = &facts {
        if let Err(e) = ctx.scripts().run(Context::Prolog, f) {
            // The node's fault, not the job's: drained, the gang requeued whole.
            remove_script_dir(script_dir.as_deref());
            return failed(e.to_string(), false);
        }
        ctx.scripts().map_gpus(f);
    }
    let launched = if order.run_spec.allocation {
        Ok(gang::Gang { tasks: Vec::new() })
    } else {
        launch_gang(&job, &node, &run_as)
    };
    let mut gang = match launched {
        Ok(g) => g,
        Err(e) => {
            remove_script_dir(script_dir.as_deref());
            if let Some(f) = &facts {
                ctx.scripts().unmap_gpus(f);
            }
            return failed(e.to_string(), is_permanent(&e.source));
        }
    };
    // A gang with no task here (an allocation, a batch job's other nodes) holds its share
    // of the node until the job stops (see `finish`).
    let readers = if job.relay {
        relay_output(&mut gang, run, events)
    } else {
        for t in &mut gang.tasks {
            if let Some(r) = t.take_readers() {
                ctx.outputs.keep(run, t.place().procid, r);
            }
        }
        Vec::new()
    };
    let pids: Vec<u32> = gang.tasks.iter().map(|t| t.pid()).collect();
    tracing::info!(user = %run_as.name, uid = run_as.uid, ?pids, "started");
    if !job.relay {
        record_run(
            ctx,
            order,
            node_id,
            &gang,
            facts.as_ref(),
            script_dir.as_deref(),
        );
    }
    report(events, TaskEvent::Started { run });
    let started = started_at(&gang);
    finish(
        order, gang, readers, facts, script_dir, started, ctx, events, commands,
    );
}

/// When the run started here: its first task's start (a run without tasks: now).
fn started_at(gang: &gang::Gang) -> std::time::Instant {
    gang.tasks
        .iter()
        .map(|t| t.supervisor().start())
        .min()
        .unwrap_or_else(std::time::Instant::now)
}

/// Writes down the run for the agent's next life ([`record`]), when each of its tasks has
/// a keeper and a cgroup (nothing else can be adopted); says why not otherwise.
fn record_run(
    ctx: &LaunchContext,
    order: &LaunchOrder,
    node_id: NodeId,
    gang: &gang::Gang,
    facts: Option<&JobFacts>,
    script_dir: Option<&Path>,
) {
    let tasks: Option<Vec<record::TaskRecord>> = gang
        .tasks
        .iter()
        .map(|t| {
            Some(record::TaskRecord {
                index: t.place().index,
                keeper: t.pid(),
                keeper_start: crate::keeper::start_time(t.pid())?,
                cgroup: t.cgroup()?.path().to_path_buf(),
                status: t.status_file()?.path().to_path_buf(),
                stdout: t.files().stdout.clone(),
                stderr: t.files().stderr.clone(),
                container: t.container().cloned(),
                leftovers_outlive: t.outlives(),
            })
        })
        .collect();
    let Some(tasks) = tasks else {
        tracing::debug!(
            "the run's tasks have no keeper or cgroup: an agent restart cannot adopt them"
        );
        return;
    };
    let rec = record::RunRecord {
        order: order.clone(),
        node_id,
        started_ns: crate::keeper::monotonic_ns(started_at(gang)),
        script_dir: script_dir.map(Path::to_path_buf),
        facts: facts.cloned(),
        tasks,
    };
    if let Err(e) = record::write(&ctx.state_dir, &rec) {
        tracing::warn!(error = %e, "cannot write the run's record: an agent restart will lose it");
    }
}

/// Starts the thread of a run a previous life of the agent left, whose tasks (`gang`) are
/// adopted: it supervises them to their end as if it had started them.
pub(crate) fn spawn_adopted(
    rec: record::RunRecord,
    gang: gang::Gang,
    ctx: Arc<LaunchContext>,
    events: UnboundedSender<Report>,
) -> io::Result<RunHandle> {
    let (tx, rx) = mpsc::channel();
    let run = rec.order.run;
    std::thread::Builder::new()
        .name(format!("adopted-{}.{}", run.job, run.run))
        .spawn(move || {
            let span = tracing::info_span!("run", job = %run.job, run = run.run);
            let _entered = span.enter();
            // Written again: this life removes it at the end.
            if let Err(e) = record::write(&ctx.state_dir, &rec) {
                tracing::warn!(error = %e, "cannot write the run's record again");
            }
            let started = crate::keeper::instant_of_ns(rec.started_ns);
            let record::RunRecord {
                order,
                facts,
                script_dir,
                ..
            } = rec;
            finish(
                &order,
                gang,
                Vec::new(),
                facts,
                script_dir,
                started,
                &ctx,
                &events,
                &rx,
            );
        })?;
    Ok(RunHandle { commands: tx })
}

/// The rest of a run once it has started: supervises its tasks (or holds its share of the
/// node, when it has none here) to their end, runs what follows a job's end, reports it.
#[allow(clippy::too_many_arguments)]
fn finish(
    order: &LaunchOrder,
    mut gang: gang::Gang,
    readers: Vec<std::thread::JoinHandle<()>>,
    facts: Option<JobFacts>,
    script_dir: Option<PathBuf>,
    started: std::time::Instant,
    ctx: &LaunchContext,
    events: &UnboundedSender<Report>,
    commands: &mpsc::Receiver<RunCommand>,
) {
    let run = order.run;
    if gang.tasks.is_empty() {
        // Nothing to run here (an allocation, or a batch job's node other than the
        // script's): the node holds the job's share, for its steps, until the job stops.
        let state = hold(
            order.time_limit_ms.map(Duration::from_millis),
            started,
            commands,
            events,
        );
        remove_script_dir(script_dir.as_deref());
        tracing::info!(state = %state, "holding ended");
        let ended = TaskEvent::Ended {
            run,
            state,
            exit_code: Some(0),
            signal: None,
            drain: None,
        };
        report(events, after_run(ctx, facts.as_ref(), ended));
        record::remove(&ctx.state_dir, run);
        return;
    }
    // Which of the node's tasks belong to the groups whose end completes the job.
    let completing: Vec<bool> = match &order.run_spec.completing_groups {
        Some(groups) => gang
            .tasks
            .iter()
            .map(|t| {
                order
                    .allocation
                    .tasks
                    .get(t.place().index)
                    .is_some_and(|a| groups.contains(&a.group))
            })
            .collect(),
        None => Vec::new(),
    };
    // The status files stay until the run's end is told: a restart before that reads
    // from them how its tasks ended.
    let statuses: Vec<PathBuf> = gang
        .tasks
        .iter()
        .filter_map(|t| t.status_file().map(|s| s.path().to_path_buf()))
        .collect();
    let supervised = supervise(&mut gang, run, &completing, events, commands);
    ctx.outputs.ended(run);
    for t in &mut gang.tasks {
        if let Some(epilog) = t.take_task_epilog() {
            epilog.run(run.job, t.place().procid);
        }
    }
    // The output is all read once the tasks' pipes close; not waited for long, since a
    // process the task left behind may hold them open.
    let until = std::time::Instant::now() + RELAY_DRAIN;
    for r in readers {
        while !r.is_finished() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let ended = match supervised {
        // A step's exit code is its tasks' highest, as `srun` reports it.
        Ok(outcomes) if run.step.is_some() => match ended_event(run, &outcomes) {
            TaskEvent::Ended {
                run,
                state,
                signal,
                drain,
                ..
            } => TaskEvent::Ended {
                run,
                state,
                exit_code: outcomes.iter().filter_map(|o| o.exit_code).max(),
                signal,
                drain,
            },
            other => other,
        },
        Ok(outcomes) => ended_event(run, &outcomes),
        Err(e) => {
            tracing::error!(error = %e, "lost track of the run's tasks; killing them");
            drop(gang);
            TaskEvent::Ended {
                run,
                state: JobState::Failed,
                exit_code: None,
                signal: None,
                drain: None,
            }
        }
    };
    let ended = after_run(ctx, facts.as_ref(), ended);
    remove_script_dir(script_dir.as_deref());
    if let TaskEvent::Ended {
        state,
        exit_code,
        signal,
        ..
    } = &ended
    {
        tracing::info!(state = %state, ?exit_code, ?signal, "ended");
    }
    report(events, ended);
    record::remove(&ctx.state_dir, run);
    for s in statuses {
        let _ = std::fs::remove_file(s);
    }
}

/// Who runs the job, its script, and the launch.
fn prepare(
    order: &LaunchOrder,
    node_id: NodeId,
    ctx: &LaunchContext,
) -> Result<(JobLaunch, RunAs, Option<PathBuf>), PrepareError> {
    let rs = &order.run_spec;
    rs.validate().map_err(PrepareError::Spec)?;
    let run_as = if ctx.agent_uid == 0 {
        RunAs::lookup(&order.spec.user)?
    } else {
        RunAs::current()?
    };
    if ctx.agent_uid == 0 && run_as.uid == 0 && order.spec.user != "root" {
        // Said again by the launch; said here before anything is written for the job.
        return Err(LaunchError::RefuseRoot {
            job: order.run.job,
            user: order.spec.user.clone(),
        }
        .into());
    }
    let workload = cadre_k8s::workload_of(rs)
        .map_err(|e| PrepareError::Workload(crate::workload::WorkloadError::Contract(e)))?;
    // The run's directory, made (anew) by the first thing that writes a file for the run;
    // its files belong to the job's user when the agent is root and the user is not (see
    // `crate::rundir`).
    let owner = (ctx.agent_uid == 0 && run_as.uid != 0).then_some((run_as.uid, run_as.gid));
    let dir_path = run_dir(&ctx.state_dir, order.run);
    let mut dir: Option<RunDir> = None;
    let (command, mut script_dir) = match &rs.script {
        Some(text) => {
            let made = make_run_dir(&mut dir, &dir_path, owner).map_err(|source| {
                PrepareError::Script {
                    path: dir_path.clone(),
                    source,
                }
            })?;
            let path = write_script(made, text)?;
            let mut command = vec![path.display().to_string()];
            command.extend(rs.command.iter().cloned());
            (command, Some(dir_path.clone()))
        }
        None => (rs.command.clone(), None),
    };
    let mut job = JobLaunch::new(
        order.run.job,
        order.spec.clone(),
        order.allocation.clone(),
        order.node_names.clone(),
        command,
        rs.work_dir.clone(),
    );
    job.partition = order.partition.clone();
    job.run = order.run.run;
    job.submit_dir = rs.submit_dir.clone().unwrap_or_else(|| rs.work_dir.clone());
    job.submit_host = rs.submit_host.clone();
    job.stdout = rs.stdout.clone();
    job.stderr = rs.stderr.clone();
    job.open_mode = rs.open_mode;
    job.export = rs.export.clone();
    job.submit_env = rs.env.clone();
    job.signal = rs.signal;
    job.kill_wait = Duration::from_secs(rs.kill_wait_secs);
    job.batch = rs.script.is_some();
    job.time_limit = order.time_limit_ms.map(Duration::from_millis);
    if let (Some(id), Some(step)) = (order.run.step, &order.step) {
        job.step = Some(crate::jobenv::StepEnv {
            id,
            job_nodelist: step.job_nodelist.clone(),
            job_num_nodes: step.job_num_nodes,
            job_cpus_per_node: step.job_cpus_per_node.clone(),
        });
        job.relay = step.relay;
        job.leftovers_outlive = step.leftovers_outlive;
        job.hostname = step
            .hostname
            .clone()
            .filter(|h| cadre_proto::api::is_step_hostname(h));
        if let Some(rank) = step.in_task {
            // Inside the container of the job's task `rank` on this node: the runtime's
            // `exec` runs from the root directory; the command starts where the container
            // does.
            let Some(runtime) = ctx.container_runtime.as_deref() else {
                return Err(PrepareError::Workload(
                    crate::workload::WorkloadError::StepNeedsRuntime {
                        rank,
                        node: ctx.node_name.clone(),
                    },
                ));
            };
            job.exec_in = Some(crate::container::ExecIn {
                runtime: runtime.argv().to_vec(),
                name: crate::container::container_name(
                    &ctx.state_dir,
                    order.run.job.0,
                    order.run.run,
                    None,
                    rank,
                ),
            });
            job.work_dir = PathBuf::from("/");
            return Ok((job, run_as, script_dir));
        }
    }
    if let Some(t) = workload {
        // A Kubernetes workload: each task runs its group's program with its rank's
        // contract; the job's files live in the run's directory, removed at its end.
        script_dir = Some(dir_path.clone());
        let made = make_run_dir(&mut dir, &dir_path, owner).map_err(|source| {
            crate::workload::WorkloadError::Write {
                path: dir_path.clone(),
                source,
            }
        })?;
        // The controller's token; an older controller sends none, and the key makes it.
        let token = match &order.job_token {
            Some(t) => t.0.clone(),
            None => cadre_proto::job_token::make(&ctx.agent_key, order.run.job, order.run.run),
        };
        let means = crate::workload::NodeMeans {
            mounts: ctx.mounts,
            runtime: ctx.container_runtime.as_deref(),
            allowed_capabilities: &ctx.container_allowed_capabilities,
            real_gpus: !ctx.gpus_emulated,
            rsh: ctx
                .rsh_executable
                .as_deref()
                .map(|executable| crate::workload::RshMeans {
                    executable,
                    controller: &ctx.controller,
                    token: &token,
                    libraries: ctx.rsh_libraries.as_ref(),
                }),
        };
        job.programs = crate::workload::prepare(&t, order, node_id, made, means)
            .inspect_err(|_| remove_script_dir(Some(&dir_path)))?;
    } else if !rs.allocation {
        // Node names that are not host names resolve through the job's hosts file. A step
        // sees what its job's tasks see on this node: the job's hosts file (a Kubernetes
        // workload's names, or the nodes'), and a workload's MPI and Volcano files.
        let job_dir = run_dir(
            &ctx.state_dir,
            RunRef {
                step: None,
                ..order.run
            },
        );
        let job_hosts = job_dir.join("hosts");
        let mount_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| crate::workload::WorkloadError::Write { path, source }
        };
        let hosts = if order.run.step.is_some() && job_hosts.is_file() {
            if ctx.mounts.can_bind() {
                for (sub, at) in [
                    ("mpi", cadre_k8s::contract::MPI_DIR),
                    ("volcano", cadre_k8s::contract::VOLCANO_DIR),
                ] {
                    let files = job_dir.join(sub);
                    if files.is_dir() && Path::new(at).is_dir() {
                        let source = BindSource::open(&files).map_err(mount_err(&files))?;
                        job.binds.push((source, PathBuf::from(at)));
                    }
                }
            }
            let source = if ctx.mounts.can_bind() {
                Some(BindSource::open(&job_hosts).map_err(mount_err(&job_hosts))?)
            } else {
                None
            };
            Some((job_hosts, source))
        } else if let Some(text) = crate::workload::node_hosts_text(order)? {
            let made = make_run_dir(&mut dir, &dir_path, owner).map_err(mount_err(&dir_path))?;
            let path = made
                .write("hosts", text.as_bytes(), 0o644)
                .map_err(mount_err(&dir_path.join("hosts")))?;
            let source = if ctx.mounts.can_bind() {
                Some(made.bind_source("hosts").map_err(mount_err(&path))?)
            } else {
                None
            };
            script_dir = Some(dir_path.clone());
            Some((path, source))
        } else {
            None
        };
        if let Some((hosts, source)) = hosts {
            job.extra_env
                .push(("CADRE_HOSTS_FILE".into(), hosts.display().to_string()));
            if let Some(source) = source {
                job.binds
                    .push((source, PathBuf::from(crate::workload::HOSTS_TARGET)));
            }
        }
        // A step `cadre-rsh` starts in a holding worker's pod mounts the pod's volumes,
        // after the job's files, from what the agent recorded at the job's launch.
        if let Some(h) = &job.hostname
            && order.run.step.is_some()
            && ctx.mounts.can_bind()
        {
            let (binds, tmpfs) =
                crate::workload::PodVolumes::mounts(&job_dir, h, owner).map_err(|source| {
                    crate::workload::WorkloadError::Write {
                        path: job_dir.join(crate::workload::PodVolumes::file_name(h)),
                        source,
                    }
                })?;
            job.no_new_privs = !binds.is_empty() || !tmpfs.is_empty();
            job.binds.extend(binds);
            job.tmpfs = tmpfs;
        }
    }
    Ok((job, run_as, script_dir))
}

/// The run's directory in the state directory.
pub(crate) fn run_dir(state_dir: &Path, run: RunRef) -> PathBuf {
    match run.step {
        Some(s) => state_dir.join(format!("job{}.{}.step{s}", run.job, run.run)),
        None => state_dir.join(format!("job{}.{}", run.job, run.run)),
    }
}

/// How long a step's end waits for the last of its tasks' output.
const RELAY_DRAIN: Duration = Duration::from_secs(2);

/// Most bytes of output in one relayed chunk.
const RELAY_CHUNK: usize = 16 * 1024;

/// Starts a thread per output pipe of each task, passing what it reads to the service.
fn relay_output(
    gang: &mut gang::Gang,
    run: RunRef,
    events: &UnboundedSender<Report>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut readers = Vec::new();
    for task in &mut gang.tasks {
        let rank = task.place().procid;
        let (out, err) = task.take_output();
        let pipes: [(Option<Box<dyn io::Read + Send>>, OutputStream); 2] = [
            (
                out.map(|o| Box::new(o) as Box<dyn io::Read + Send>),
                OutputStream::Stdout,
            ),
            (
                err.map(|e| Box::new(e) as Box<dyn io::Read + Send>),
                OutputStream::Stderr,
            ),
        ];
        for (pipe, stream) in pipes {
            let Some(pipe) = pipe else { continue };
            let events = events.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("out-{}.{rank}", run.job))
                .spawn(move || relay_pipe(pipe, run, rank, stream, &events));
            match spawned {
                Ok(h) => readers.push(h),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start a thread to relay a task's output; it is lost")
                }
            }
        }
    }
    readers
}

/// Reads a pipe to its end, sending chunks that end on character boundaries.
fn relay_pipe(
    mut pipe: Box<dyn io::Read + Send>,
    run: RunRef,
    task: u32,
    stream: OutputStream,
    events: &UnboundedSender<Report>,
) {
    let mut buf = vec![0u8; RELAY_CHUNK];
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        pending.extend_from_slice(&buf[..n]);
        let cut = utf8_prefix_len(&pending);
        if cut == 0 {
            continue;
        }
        let data = String::from_utf8_lossy(&pending[..cut]).into_owned();
        pending.drain(..cut);
        let chunk = OutputChunk {
            run,
            task,
            stream,
            data,
        };
        if events.send(Report::Output(chunk)).is_err() {
            return;
        }
    }
    if !pending.is_empty() {
        let data = String::from_utf8_lossy(&pending).into_owned();
        let _ = events.send(Report::Output(OutputChunk {
            run,
            task,
            stream,
            data,
        }));
    }
}

/// The length of the longest prefix of `bytes` that does not end inside a UTF-8 character
/// (bytes that are not UTF-8 at all count whole: they are replaced when sent).
fn utf8_prefix_len(bytes: &[u8]) -> usize {
    // A character is at most 4 bytes: look back at most 3 for an unfinished one.
    for back in 1..=3.min(bytes.len()) {
        let b = bytes[bytes.len() - back];
        if b & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back
        }
        let need = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return bytes.len(),
        };
        return if need > back {
            bytes.len() - back
        } else {
            bytes.len()
        };
    }
    bytes.len()
}

/// Holds a run that has no process on this node until it is stopped (CANCELLED) or its
/// time limit passes (TIMEOUT).
fn hold(
    limit: Option<Duration>,
    start: std::time::Instant,
    commands: &mpsc::Receiver<RunCommand>,
    events: &UnboundedSender<Report>,
) -> JobState {
    let mut limit = limit;
    loop {
        let wait = match limit {
            Some(l) => match l.checked_sub(start.elapsed()) {
                Some(left) => left.min(Duration::from_secs(1)),
                None => return JobState::Timeout,
            },
            None => Duration::from_secs(1),
        };
        if events.is_closed() {
            return JobState::Cancelled;
        }
        match commands.recv_timeout(wait) {
            Ok(RunCommand::Stop { .. }) => return JobState::Cancelled,
            Ok(RunCommand::SetTimeLimit(l)) => limit = l,
            Ok(RunCommand::Signal(_)) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return JobState::Cancelled,
        }
    }
}

/// The run's directory, made anew the first time it is asked for.
fn make_run_dir<'a>(
    dir: &'a mut Option<RunDir>,
    path: &Path,
    owner: Option<(u32, u32)>,
) -> io::Result<&'a RunDir> {
    if dir.is_none() {
        *dir = Some(RunDir::create(path, owner)?);
    }
    dir.as_ref()
        .ok_or_else(|| io::Error::other("the run's directory was not made"))
}

/// Writes the batch script to `script` in the run's directory (mode 0700, the job's user's
/// when the agent is root: see [`crate::rundir`]).
fn write_script(dir: &RunDir, text: &str) -> Result<PathBuf, PrepareError> {
    // No task may be forked while the script is open for writing: the child would hold it
    // open too, and executing it would fail with ETXTBSY.
    let _no_fork = crate::fork::no_fork_guard();
    dir.write("script", text.as_bytes(), 0o700)
        .map_err(|source| PrepareError::Script {
            path: dir.path().join("script"),
            source,
        })
}

fn remove_script_dir(dir: Option<&Path>) {
    if let Some(dir) = dir
        && let Err(e) = std::fs::remove_dir_all(dir)
    {
        tracing::warn!(dir = %dir.display(), error = %e, "failed to remove the run's directory");
    }
}

/// Supervises the gang until its tasks have ended, taking orders between checks.
/// `completing`: per task of the gang, whether it belongs to a completing group (empty:
/// the job has none); once those have all ended while others run, `Completing` is reported.
fn supervise(
    gang: &mut gang::Gang,
    run: RunRef,
    completing: &[bool],
    events: &UnboundedSender<Report>,
    commands: &mpsc::Receiver<RunCommand>,
) -> Result<Vec<TaskOutcome>, LaunchError> {
    let mut orders_open = true;
    let mut abandoned = false;
    let mut completing_reported = !completing.contains(&true);
    loop {
        if let Some(outcomes) = gang.poll()? {
            return Ok(outcomes);
        }
        if !completing_reported {
            let mut ended = Vec::new();
            let mut done = true;
            for (task, &counts) in gang.tasks.iter_mut().zip(completing) {
                match task.poll()? {
                    Some(o) => ended.push(o),
                    None => done &= !counts,
                }
            }
            if done {
                completing_reported = true;
                if let TaskEvent::Ended {
                    state,
                    exit_code,
                    signal,
                    ..
                } = ended_event(run, &ended)
                {
                    tracing::info!(state = %state, "the completing groups' tasks here have ended");
                    report(
                        events,
                        TaskEvent::Completing {
                            run,
                            state,
                            exit_code,
                            signal,
                        },
                    );
                }
            }
        }
        if !abandoned && events.is_closed() {
            abandoned = true;
            tracing::warn!("the agent service is gone; killing the run's tasks");
            gang.cancel_within(Duration::ZERO)?;
        }
        let nap = gang.nap();
        if !orders_open {
            std::thread::sleep(nap);
            continue;
        }
        match commands.recv_timeout(nap) {
            Ok(RunCommand::Stop { kill_wait }) => {
                tracing::info!(kill_wait_ms = kill_wait.as_millis() as u64, "stopping");
                gang.cancel_within(kill_wait)?;
            }
            Ok(RunCommand::SetTimeLimit(limit)) => {
                tracing::info!(limit_ms = ?limit.map(|l| l.as_millis() as u64), "new time limit");
                gang.set_time_limit(limit);
            }
            Ok(RunCommand::Signal(number)) => match Signal::try_from(number) {
                Ok(signal) => {
                    tracing::info!(%signal, "signalling the tasks");
                    gang.signal(signal)?;
                }
                Err(_) => tracing::warn!(signal = number, "no such signal; not sent"),
            },
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => orders_open = false,
        }
    }
}

/// What a job's run (`facts`; `None` for a step) leaves to do once its tasks have ended
/// here: kill what its steps left running (the daemons of `cadre rsh` steps, which outlive
/// their step as after an ssh session), free its GPUs' job mapping, run the epilog. What
/// survives SIGKILL and a failing epilog drain the node.
fn after_run(ctx: &LaunchContext, facts: Option<&JobFacts>, ended: TaskEvent) -> TaskEvent {
    let Some(facts) = facts else {
        return ended;
    };
    let TaskEvent::Ended {
        run,
        state,
        exit_code,
        signal,
        mut drain,
    } = ended
    else {
        return ended;
    };
    if let Some(parent) = &ctx.cgroup_parent {
        let left = crate::cgroup::sweep_job(parent, run.job, run.run, ctx.kill_timeout());
        if !left.is_empty() && drain.is_none() {
            let what: Vec<String> = left
                .iter()
                .take(4)
                .map(|(dir, pids)| {
                    format!(
                        "processes {} in {}",
                        crate::cgroup::some_pids(pids),
                        dir.display()
                    )
                })
                .collect();
            drain = Some(format!(
                "{KILL_TASK_FAILED}: {} after SIGKILL",
                what.join(", ")
            ));
        }
    }
    ctx.scripts().unmap_gpus(facts);
    if let Err(e) = ctx.scripts().run(Context::Epilog, facts) {
        tracing::error!(error = %e, "epilog failed: the node is to be drained");
        drain = drain.or(Some(e.to_string()));
    }
    TaskEvent::Ended {
        run,
        state,
        exit_code,
        signal,
        drain,
    }
}

/// What the prolog and epilog are told of the job's run on this node.
fn job_facts(job: &JobLaunch, node: &LocalNode, run_as: &RunAs) -> Result<JobFacts, LaunchError> {
    let mut gpus = Vec::new();
    for task in job.allocation.tasks.iter().filter(|t| t.node == node.id) {
        gpus.extend(crate::jobenv::gpu_indices(job.id, node, task)?);
    }
    gpus.sort_unstable();
    gpus.dedup();
    let names: Vec<&str> = job.node_names.values().map(String::as_str).collect();
    Ok(JobFacts {
        job: job.id,
        user: run_as.name.clone(),
        uid: run_as.uid,
        gid: run_as.gid,
        nodelist: cadre_core::hostlist::compress(&names),
        partition: job.partition.clone(),
        node: node.name.clone(),
        gpus,
    })
}

/// The run's end from its tasks' outcomes (in rank order): the worst state, and the exit
/// code and signal of the first task that did not complete, else of the first task.
pub(crate) fn ended_event(run: RunRef, outcomes: &[TaskOutcome]) -> TaskEvent {
    let pick = outcomes
        .iter()
        .find(|o| o.state != JobState::Completed)
        .or(outcomes.first());
    TaskEvent::Ended {
        run,
        state: gang::gang_state(outcomes),
        exit_code: pick.and_then(|o| o.exit_code),
        signal: pick.and_then(|o| o.signal),
        drain: outcomes
            .iter()
            .find_map(|o| o.unkillable.as_ref())
            .map(|what| format!("{KILL_TASK_FAILED}: {what}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::OomCheck;
    use cadre_core::job::JobId;
    use std::os::unix::fs::PermissionsExt;

    fn outcome(
        procid: u32,
        state: JobState,
        exit_code: Option<i32>,
        signal: Option<i32>,
    ) -> TaskOutcome {
        TaskOutcome {
            job: JobId(1),
            procid,
            state,
            exit_code,
            signal,
            oom: OomCheck::NotDetected { why: "x".into() },
            unkillable: None,
        }
    }

    #[test]
    fn the_end_names_the_first_task_that_did_not_complete() {
        let run = RunRef::job_run(JobId(1), 0);
        let e = ended_event(
            run,
            &[
                outcome(0, JobState::Completed, Some(0), None),
                outcome(1, JobState::Failed, Some(3), None),
                outcome(2, JobState::Failed, None, Some(9)),
            ],
        );
        assert_eq!(
            e,
            TaskEvent::Ended {
                run,
                state: JobState::Failed,
                exit_code: Some(3),
                signal: None,
                drain: None,
            }
        );
        let e = ended_event(run, &[outcome(0, JobState::Completed, Some(0), None)]);
        assert_eq!(
            e,
            TaskEvent::Ended {
                run,
                state: JobState::Completed,
                exit_code: Some(0),
                signal: None,
                drain: None,
            }
        );
    }

    #[test]
    fn job_caused_failures_are_permanent_and_node_caused_ones_are_not() {
        let job = JobId(1);
        assert!(is_permanent(&LaunchError::UnknownUser { user: "x".into() }));
        assert!(is_permanent(&LaunchError::NoWorkDir {
            job,
            dir: "/x".into()
        }));
        assert!(!is_permanent(&LaunchError::CoreOutOfRange {
            job,
            core: 9,
            cores: 2
        }));
        let spawn = |errno: Errno| LaunchError::Spawn {
            job,
            procid: 0,
            step: "x".into(),
            source: io::Error::from_raw_os_error(errno as i32),
        };
        assert!(is_permanent(&spawn(Errno::ENOENT)));
        assert!(is_permanent(&spawn(Errno::EACCES)));
        assert!(!is_permanent(&spawn(Errno::EAGAIN)));
        assert!(!is_permanent(&spawn(Errno::ENOMEM)));
    }

    #[test]
    fn a_script_is_written_private_and_executable_and_replaces_a_leftover() {
        let state = tempfile::tempdir().unwrap();
        let run = RunRef::job_run(JobId(12), 3);
        let dir = run_dir(state.path(), run);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("stale"), "x").unwrap();
        let mut made = None;
        let d = make_run_dir(&mut made, &dir, None).unwrap();
        let path = write_script(d, "#!/bin/sh\necho hi\n").unwrap();
        assert_eq!(path, state.path().join("job12.3/script"));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "#!/bin/sh\necho hi\n"
        );
        assert!(!dir.join("stale").exists());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&dir), mode(&path)), (0o700, 0o700));
        // Made once per launch: asked again, the same directory, the script still there.
        make_run_dir(&mut made, &dir, None).unwrap();
        assert!(path.exists());
        // A state directory that is not there: not permanent (the node's doing).
        let missing = state.path().join("missing").join("job12.3");
        let err = make_run_dir(&mut None, &missing, None)
            .map_err(|source| PrepareError::Script {
                path: missing.clone(),
                source,
            })
            .unwrap_err();
        assert!(!err.is_permanent(), "{err}");
        assert!(
            err.to_string()
                .starts_with("failed to write the batch script"),
            "{err}"
        );
    }
}
