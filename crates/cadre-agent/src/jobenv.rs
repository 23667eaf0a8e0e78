//! What a task is launched from, and the environment it sees.
//!
//! Given: a [`JobLaunch`] (what the controller says about the job: its spec, its full
//! allocation, the names of its nodes, the command, directories, output patterns, the
//! submitter's environment and how much of it to export, time limit and signals) and a
//! [`LocalNode`] (what this agent knows about its node: name, id, shape, the mapping from
//! the shape's core ids to the kernel's CPU numbers).
//!
//! Decided here, purely: each task's rank numbers (global rank `SLURM_PROCID` in
//! (group, rank) order; node-local rank `SLURM_LOCALID`; node index `SLURM_NODEID` in
//! node-id order, which is the cluster's node-table order, as Slurm orders
//! `SLURM_JOB_NODELIST`), and its full environment ([`task_environment`]).
//!
//! A task with its own program ([`TaskProgram`], a Kubernetes workload's) gets its
//! variables last, over the Slurm ones: its kind's contract wins, as the variables a
//! Kubernetes controller injects win over the container's.
//!
//! Must hold: `CUDA_VISIBLE_DEVICES` names exactly the device indices of the task's
//! allocated GPUs (empty when it has none, so that a task never sees a GPU it was not
//! given), whatever the submitter's environment said; the job's variables always win over
//! exported ones.

use crate::launch_error::LaunchError;
use crate::pattern::PatternValues;
use crate::run_as::RunAs;
use cadre_core::alloc::{Allocation, TaskAlloc};
use cadre_core::cluster::{NodeId, NodeShape};
use cadre_core::hostlist;
use cadre_core::job::{JobId, JobSpec};
use cadre_core::run::PreEndSignal;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Slurm's default KillWait: time between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_WAIT: Duration =
    Duration::from_secs(cadre_core::run::DEFAULT_KILL_WAIT_SECS);

/// `PATH` for tasks that export nothing (`--export=NONE`).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

pub use cadre_core::run::{Export, OpenMode};

/// Everything the agent needs to launch a job's tasks, as the controller sends it.
///
/// A batch job ([`JobLaunch::batch`]) runs like Slurm's: its script once, as the batch step,
/// on the job's first node, with all the job's CPUs, GPUs and memory on that node; the
/// job's other tasks hold their resources without a process (launching on them is a job
/// step's business, `srun`'s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobLaunch {
    pub id: JobId,
    /// Which start of the job this is (its requeue count): two starts of one job on a node
    /// never share a cgroup.
    pub run: u32,
    pub spec: JobSpec,
    /// The partition the job runs in (the spec's, or the default it was routed to).
    pub partition: String,
    pub allocation: Allocation,
    /// Names of the job's nodes.
    pub node_names: BTreeMap<NodeId, String>,
    /// Program and arguments (for a batch job: the script's path).
    pub command: Vec<String>,
    /// Where the task starts (`--chdir`); relative output paths are under it.
    pub work_dir: PathBuf,
    /// `SLURM_SUBMIT_DIR`.
    pub submit_dir: PathBuf,
    pub submit_host: Option<String>,
    /// `--output` pattern; `None`: [`crate::pattern::default_output_pattern`].
    pub stdout: Option<String>,
    /// `--error` pattern; `None`: stderr goes to the stdout file.
    pub stderr: Option<String>,
    pub open_mode: OpenMode,
    pub export: Export,
    /// The submitter's environment, as captured at submission.
    pub submit_env: Vec<(String, String)>,
    /// Wall-clock limit from the start of the task; `None`: unlimited. Sub-second limits
    /// are allowed (Slurm's are whole minutes) so that tests can be quick.
    pub time_limit: Option<Duration>,
    /// Slurm's KillWait.
    pub kill_wait: Duration,
    /// `--signal`.
    pub signal: Option<PreEndSignal>,
    /// A batch script: run once, on the first node (see above).
    pub batch: bool,
    /// Tasks that run something else than `command`, by position in the allocation: the
    /// tasks of a Kubernetes workload, each running its group's program with its rank's
    /// contract ([`crate::workload`]).
    pub programs: BTreeMap<usize, TaskProgram>,
    /// A job step (`srun` in the job's allocation): the allocation above is the step's.
    pub step: Option<StepEnv>,
    /// The tasks' output goes to pipes the agent relays back to `srun`, not to files.
    pub relay: bool,
    /// Bind mounts of the tasks that have no program of their own (the job's hosts file
    /// over `/etc/hosts`, see [`crate::workload::node_hosts_text`]); only where the agent
    /// can mount ([`crate::mountns::TaskMounts::can_bind`]).
    pub binds: Vec<(crate::rundir::BindSource, PathBuf)>,
    /// Variables set last, over everything (`CADRE_HOSTS_FILE`).
    pub extra_env: Vec<(String, String)>,
    /// Every task runs its command inside this running container (a step inside a
    /// workload task's container); the runtime's `exec` is then the task's process.
    pub exec_in: Option<crate::container::ExecIn>,
    /// When a task's own process ends, what it left behind in its process group and
    /// cgroup is not killed (a step of `cadre rsh`, as an ssh session).
    pub leftovers_outlive: bool,
    /// With `binds`: the host name of tasks that have no program of their own, in a UTS
    /// namespace of their own (a step `cadre rsh` starts in a Kubernetes pod: the pod's).
    pub hostname: Option<String>,
    /// With `binds`: the private tmpfs mounts of tasks that have no program of their own
    /// (a step `cadre rsh` starts in a pod: the pod's `medium: Memory` volumes).
    pub tmpfs: Vec<(PathBuf, Option<u64>)>,
    /// Tasks that have no program of their own cannot gain privileges (a step with a pod's
    /// volumes, as the pod's tasks).
    pub no_new_privs: bool,
}

/// What a job step's tasks see of the step and of its job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepEnv {
    /// `SLURM_STEP_ID`.
    pub id: u32,
    /// The job's node list, node count and CPUs per node (`SLURM_JOB_*`); the step's own
    /// come from its allocation.
    pub job_nodelist: String,
    pub job_num_nodes: u32,
    pub job_cpus_per_node: String,
}

/// What one task runs in place of the job's command, and what it sees.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskProgram {
    /// Program and arguments.
    pub command: Vec<String>,
    /// Where it starts; relative output paths are under it.
    pub work_dir: PathBuf,
    /// Variables set over the job's environment, in order (a later one wins).
    pub env: Vec<(String, String)>,
    /// Files or directories bind-mounted in the task's own mount namespace, `(what, where)`:
    /// the job's hosts file over `/etc/hosts`, the MPI files at `/etc/mpi`. Needs the agent
    /// to be root; empty otherwise. Each source is opened by the agent
    /// ([`crate::rundir::BindSource`]): what is mounted is what the agent made.
    pub binds: Vec<(crate::rundir::BindSource, PathBuf)>,
    /// The task runs in this container: its process is the container runtime, which keeps
    /// the agent's identity and environment (see [`crate::container`]); `command` is then
    /// only what the container runs, for display, and `work_dir` where its output files are.
    pub container: Option<crate::container::ContainerSpec>,
    /// The task runs nothing: the node holds its share of the job until the job stops (an
    /// MPI worker that MPI's launcher reaches through job steps).
    pub holds: bool,
    /// With `binds`: the task's host name, in a UTS namespace of its own (a pod's).
    pub hostname: Option<String>,
    /// With `binds`: a private tmpfs at each path, of the size given (`None`: the
    /// kernel's default), writable by all (mode 1777), `nosuid,nodev` (a pod's `emptyDir`
    /// of `medium: Memory`).
    pub tmpfs: Vec<(PathBuf, Option<u64>)>,
    /// The task cannot gain privileges (`PR_SET_NO_NEW_PRIVS`): one with volumes it may
    /// write, mounted where set-user-id programs look, must not make them root's.
    pub no_new_privs: bool,
    /// Its pod's `securityContext` identity fields, checked against the job's user when
    /// it starts (see [`cadre_k8s::PodIdentity`]).
    pub identity: cadre_k8s::PodIdentity,
}

impl JobLaunch {
    /// What task `index` runs: its own program, else the job's command.
    pub fn command_of(&self, index: usize) -> &[String] {
        self.programs
            .get(&index)
            .map_or(&self.command, |p| &p.command)
    }

    /// Where task `index` starts.
    pub fn work_dir_of(&self, index: usize) -> &std::path::Path {
        self.programs
            .get(&index)
            .map_or(&self.work_dir, |p| &p.work_dir)
    }

    /// A launch with Slurm's defaults: export everything, truncate, `slurm-%j.out`, the
    /// spec's time limit (0 means none), a 30 s KillWait, no `--signal`.
    pub fn new(
        id: JobId,
        spec: JobSpec,
        allocation: Allocation,
        node_names: BTreeMap<NodeId, String>,
        command: Vec<String>,
        work_dir: PathBuf,
    ) -> JobLaunch {
        let time_limit = (spec.time_limit.0 > 0).then(|| Duration::from_secs(spec.time_limit.0));
        JobLaunch {
            id,
            run: 0,
            partition: spec.partition.clone().unwrap_or_default(),
            spec,
            allocation,
            node_names,
            command,
            submit_dir: work_dir.clone(),
            work_dir,
            submit_host: None,
            stdout: None,
            stderr: None,
            open_mode: OpenMode::Truncate,
            export: Export::All,
            submit_env: Vec::new(),
            time_limit,
            kill_wait: DEFAULT_KILL_WAIT,
            signal: None,
            batch: false,
            programs: BTreeMap::new(),
            step: None,
            relay: false,
            binds: Vec::new(),
            extra_env: Vec::new(),
            exec_in: None,
            leftovers_outlive: false,
            hostname: None,
            tmpfs: Vec::new(),
            no_new_privs: false,
        }
    }
}

/// What this agent knows about its own node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalNode {
    pub id: NodeId,
    pub name: String,
    pub shape: NodeShape,
    /// The kernel's CPU number of each core id of the shape (`os_cpus[core]`); from
    /// [`crate::discovery::Discovery::os_cpus`].
    pub os_cpus: Vec<u32>,
    /// A cgroup v2 directory under which the agent makes one cgroup per task (see
    /// [`crate::cgroup`]); `None`: no cgroups, and out-of-memory kills are not detected.
    pub cgroup_parent: Option<PathBuf>,
    /// How long a task's processes may survive SIGKILL before the task is reported ended
    /// with them named (the supervisor's `Limits::kill_timeout`).
    pub kill_timeout: std::time::Duration,
    /// Where each task's keeper keeps its status, and the agent's lease it enforces (see
    /// [`crate::keeper`]); `None`: no keeper, the task is the agent's own child.
    pub keepers: Option<crate::keeper::Keepers>,
    /// The site's programs around each task (Slurm's TaskProlog and TaskEpilog).
    pub task_scripts: crate::prolog::TaskScripts,
}

/// A task's place in its job.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TaskPlace {
    /// Position in [`Allocation::tasks`].
    pub index: usize,
    /// `SLURM_PROCID`: rank over all tasks, in (group, rank) order.
    pub procid: u32,
    /// `SLURM_LOCALID`: rank among the job's tasks on this node.
    pub localid: u32,
    /// `SLURM_NODEID`: index of the node in the job's node list.
    pub nodeid: u32,
}

/// The place of task `index` of the allocation.
pub fn task_place(alloc: &Allocation, index: usize) -> Option<TaskPlace> {
    let task = alloc.tasks.get(index)?;
    let order = alloc.rank_order();
    let procid = order.iter().position(|&i| i == index)? as u32;
    let localid = order
        .iter()
        .filter(|&&i| alloc.tasks[i].node == task.node)
        .position(|&i| i == index)? as u32;
    let nodeid = alloc.nodes().iter().position(|&n| n == task.node)? as u32;
    Some(TaskPlace {
        index,
        procid,
        localid,
        nodeid,
    })
}

/// The task a batch script runs as: the first (in rank order) on the job's first node,
/// where Slurm runs the batch step.
pub fn batch_task(alloc: &Allocation) -> Option<usize> {
    let first = *alloc.nodes().first()?;
    tasks_on_node(alloc, first).first().copied()
}

/// Indices of the allocation's tasks on `node`, in rank order.
pub fn tasks_on_node(alloc: &Allocation, node: NodeId) -> Vec<usize> {
    alloc
        .rank_order()
        .into_iter()
        .filter(|&i| alloc.tasks[i].node == node)
        .collect()
}

pub use cadre_core::hostlist::compress_counts;

fn node_name(job: &JobLaunch, node: NodeId) -> Result<&str, LaunchError> {
    job.node_names
        .get(&node)
        .map(String::as_str)
        .ok_or(LaunchError::UnknownNodeName { job: job.id, node })
}

/// The device indices of the task's GPUs, checked against the node's shape.
pub fn gpu_indices(
    job: JobId,
    node: &LocalNode,
    task: &TaskAlloc,
) -> Result<Vec<u32>, LaunchError> {
    task.gpus
        .iter()
        .map(|&pos| {
            node.shape
                .gpus
                .get(pos as usize)
                .map(|g| g.index)
                .ok_or(LaunchError::GpuOutOfRange {
                    job,
                    gpu: pos,
                    gpus: node.shape.gpus.len(),
                })
        })
        .collect()
}

/// The kernel CPU numbers of the task's cores, checked against the node.
pub fn os_cpus(job: JobId, node: &LocalNode, task: &TaskAlloc) -> Result<Vec<u32>, LaunchError> {
    task.cores
        .iter()
        .map(|&core| {
            node.os_cpus
                .get(core as usize)
                .copied()
                .ok_or(LaunchError::CoreOutOfRange {
                    job,
                    core,
                    cores: node.os_cpus.len(),
                })
        })
        .collect()
}

fn join<T: ToString>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The values of the output pattern letters for a task.
pub fn pattern_values<'a>(
    job: &'a JobLaunch,
    node: &'a LocalNode,
    place: &TaskPlace,
) -> PatternValues<'a> {
    PatternValues {
        job_id: job.id.0,
        array: job.spec.array.map(|a| (a.array_job.0, a.index)),
        job_name: &job.spec.name,
        user: &job.spec.user,
        node_name: &node.name,
        node_index: place.nodeid,
        task: place.procid,
    }
}

/// The whole environment of task `index` of the job's allocation, sorted by name.
pub fn task_environment(
    job: &JobLaunch,
    node: &LocalNode,
    index: usize,
    run_as: &RunAs,
) -> Result<BTreeMap<String, String>, LaunchError> {
    let alloc = &job.allocation;
    let task = alloc.tasks.get(index).ok_or(LaunchError::NoSuchTask {
        job: job.id,
        index,
        tasks: alloc.tasks.len(),
    })?;
    if task.node != node.id {
        return Err(LaunchError::TaskNotOnNode {
            job: job.id,
            index,
            node: node.name.clone(),
        });
    }
    let place = task_place(alloc, index).ok_or(LaunchError::NoSuchTask {
        job: job.id,
        index,
        tasks: alloc.tasks.len(),
    })?;

    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let is_slurm = |k: &str| k.starts_with("SLURM_");
    match &job.export {
        Export::All => env.extend(job.submit_env.iter().cloned()),
        Export::None | Export::Named(_) => {
            let named: &[String] = match &job.export {
                Export::Named(n) => n,
                _ => &[],
            };
            env.extend(
                job.submit_env
                    .iter()
                    .filter(|(k, _)| is_slurm(k) || named.iter().any(|n| n == k))
                    .cloned(),
            );
            env.entry("PATH".into())
                .or_insert_with(|| DEFAULT_PATH.into());
            for (k, v) in run_as.account_env() {
                env.entry(k).or_insert(v);
            }
        }
    }

    let nodes = alloc.nodes();
    let names = nodes
        .iter()
        .map(|&n| node_name(job, n))
        .collect::<Result<Vec<_>, _>>()?;
    let nodelist = hostlist::compress(&names);
    let tasks_per_node: Vec<u64> = nodes
        .iter()
        .map(|&n| alloc.tasks.iter().filter(|t| t.node == n).count() as u64)
        .collect();
    let cpus_per_node: Vec<u64> = nodes
        .iter()
        .map(|&n| {
            alloc
                .tasks
                .iter()
                .filter(|t| t.node == n)
                .map(|t| t.cores.len() as u64)
                .sum()
        })
        .collect();
    let here = tasks_on_node(alloc, node.id);
    let gtids: Vec<u32> = here
        .iter()
        .filter_map(|&i| task_place(alloc, i).map(|p| p.procid))
        .collect();
    let mut job_gpus: Vec<u32> = Vec::new();
    for &i in &here {
        job_gpus.extend(gpu_indices(job.id, node, &alloc.tasks[i])?);
    }
    job_gpus.sort_unstable();
    job_gpus.dedup();
    let task_gpus = gpu_indices(job.id, node, task)?;

    let id = job.id.to_string();
    let ntasks = alloc.tasks.len().to_string();
    let nnodes = nodes.len().to_string();
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), v);
    };
    set("SLURM_JOB_ID", id.clone());
    set("SLURM_JOBID", id);
    set("SLURM_JOB_NAME", job.spec.name.clone());
    set("SLURM_JOB_NODELIST", nodelist.clone());
    set("SLURM_NODELIST", nodelist.clone());
    set("SLURM_JOB_NUM_NODES", nnodes.clone());
    set("SLURM_NNODES", nnodes);
    set("SLURM_NTASKS", ntasks.clone());
    set("SLURM_NPROCS", ntasks);
    set("SLURM_TASKS_PER_NODE", compress_counts(&tasks_per_node));
    set("SLURM_JOB_CPUS_PER_NODE", compress_counts(&cpus_per_node));
    set(
        "SLURM_CPUS_ON_NODE",
        here.iter()
            .map(|&i| alloc.tasks[i].cores.len())
            .sum::<usize>()
            .to_string(),
    );
    set("SLURM_CPUS_PER_TASK", task.cores.len().to_string());
    set("SLURM_PROCID", place.procid.to_string());
    set("SLURM_LOCALID", place.localid.to_string());
    set("SLURM_NODEID", place.nodeid.to_string());
    set("SLURM_GTIDS", join(&gtids));
    set("SLURM_SUBMIT_DIR", job.submit_dir.display().to_string());
    if let Some(host) = &job.submit_host {
        set("SLURM_SUBMIT_HOST", host.clone());
    }
    set("SLURM_JOB_ACCOUNT", job.spec.account.clone());
    set("SLURM_JOB_PARTITION", job.partition.clone());
    if let Some(qos) = &job.spec.qos {
        set("SLURM_JOB_QOS", qos.clone());
    }
    set("SLURM_JOB_USER", run_as.name.clone());
    set("SLURM_JOB_UID", run_as.uid.to_string());
    set("SLURM_JOB_GID", run_as.gid.to_string());
    set("SLURMD_NODENAME", node.name.clone());
    if let Some(array) = job.spec.array {
        set("SLURM_ARRAY_JOB_ID", array.array_job.to_string());
        set("SLURM_ARRAY_TASK_ID", array.index.to_string());
    }
    if !job_gpus.is_empty() {
        set("SLURM_GPUS_ON_NODE", job_gpus.len().to_string());
        set("SLURM_JOB_GPUS", join(&job_gpus));
    }
    if let Some(step) = &job.step {
        // A job step: SLURM_NODELIST, SLURM_NNODES, SLURM_NTASKS and SLURM_TASKS_PER_NODE
        // above are the step's (as srun sets them); the job's are the job's.
        set("SLURM_STEP_ID", step.id.to_string());
        set("SLURM_STEPID", step.id.to_string());
        set("SLURM_STEP_NODELIST", nodelist);
        set("SLURM_STEP_NUM_NODES", nodes.len().to_string());
        set("SLURM_STEP_NUM_TASKS", alloc.tasks.len().to_string());
        set(
            "SLURM_STEP_TASKS_PER_NODE",
            compress_counts(&tasks_per_node),
        );
        set("SLURM_JOB_NODELIST", step.job_nodelist.clone());
        set("SLURM_JOB_NUM_NODES", step.job_num_nodes.to_string());
        set("SLURM_JOB_CPUS_PER_NODE", step.job_cpus_per_node.clone());
    }
    if job.batch {
        // The batch step: rank 0 of its node, the first node, and every GPU of the job
        // there (Slurm's batch step sees the node's whole allocation).
        set("SLURM_PROCID", "0".into());
        set("SLURM_LOCALID", "0".into());
        set("SLURM_NODEID", "0".into());
        set("CUDA_VISIBLE_DEVICES", join(&job_gpus));
    } else {
        set("CUDA_VISIBLE_DEVICES", join(&task_gpus));
    }
    set("CUDA_DEVICE_ORDER", "PCI_BUS_ID".into());
    if let Some(program) = job.programs.get(&index) {
        for (k, v) in &program.env {
            set(k, v.clone());
        }
    }
    for (k, v) in &job.extra_env {
        set(k, v.clone());
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadre_core::job::ArrayIndex;
    use cadre_core::resources::TaskResources;
    use cadre_core::time::Dur;

    fn task(rank: u32, node: u32, cores: Vec<u32>, gpus: Vec<u32>) -> TaskAlloc {
        TaskAlloc {
            group: 0,
            rank,
            node: NodeId(node),
            cores,
            gpus,
            gpu_milli_each: 1000,
            nics: vec![],
            mem_mib: 0,
            named: vec![],
        }
    }

    fn job() -> JobLaunch {
        let spec = JobSpec::simple(
            "alice",
            "physics",
            4,
            TaskResources::default(),
            Dur::minutes(5),
        );
        // Node 3 holds ranks 1 and 3; listed out of order on purpose.
        let allocation = Allocation {
            tasks: vec![
                task(3, 3, vec![2], vec![1]),
                task(0, 1, vec![0, 1], vec![0]),
                task(1, 3, vec![0, 1], vec![0, 2]),
                task(2, 2, vec![0], vec![]),
            ],
            exclusive: false,
        };
        let names = [(1, "gpu001"), (2, "gpu002"), (3, "gpu003")]
            .into_iter()
            .map(|(i, n)| (NodeId(i), n.to_string()))
            .collect();
        let mut j = JobLaunch::new(
            JobId(42),
            spec,
            allocation,
            names,
            vec!["true".into()],
            PathBuf::from("/home/alice"),
        );
        j.partition = "gpu".into();
        j.submit_env = vec![
            ("HOME".into(), "/home/alice".into()),
            ("FOO".into(), "bar".into()),
            ("CUDA_VISIBLE_DEVICES".into(), "0,1,2,3".into()),
            ("SLURM_CONF".into(), "/etc/slurm.conf".into()),
        ];
        j
    }

    fn node3() -> LocalNode {
        // GPU device indices differ from positions, to tell the two apart.
        let mut shape = NodeShape::uniform("n", 4, 1024, 3, "h100", 0, 1);
        for (pos, g) in shape.gpus.iter_mut().enumerate() {
            g.index = 10 + pos as u32;
        }
        LocalNode {
            id: NodeId(3),
            name: "gpu003".into(),
            shape,
            os_cpus: vec![0, 1, 2, 3],
            cgroup_parent: None,
            kill_timeout: crate::cgroup::DEFAULT_KILL_TIMEOUT,
            keepers: None,
            task_scripts: Default::default(),
        }
    }

    fn alice() -> RunAs {
        RunAs {
            name: "alice".into(),
            uid: 1000,
            gid: 1000,
            home: Some("/home/alice".into()),
            shell: Some("/bin/bash".into()),
        }
    }

    #[test]
    fn ranks_follow_group_and_rank_order() {
        let j = job();
        let p = task_place(&j.allocation, 0).unwrap();
        assert_eq!((p.procid, p.localid, p.nodeid), (3, 1, 2));
        let p = task_place(&j.allocation, 2).unwrap();
        assert_eq!((p.procid, p.localid, p.nodeid), (1, 0, 2));
        assert_eq!(tasks_on_node(&j.allocation, NodeId(3)), vec![2, 0]);
        assert!(task_place(&j.allocation, 9).is_none());
    }

    /// Regression: a batch script ran once per task, on every node, each copy seeing only
    /// its task's GPUs; Slurm runs it once, on the first node, seeing the node's GPUs.
    #[test]
    fn a_batch_script_is_the_first_nodes_first_task_with_the_nodes_gpus() {
        let mut j = job();
        // The first node is gpu001 (node 1), whose only task is index 1.
        assert_eq!(batch_task(&j.allocation), Some(1));
        j.batch = true;
        let env = task_environment(&j, &node3(), 2, &alice()).unwrap();
        assert_eq!(env["SLURM_PROCID"], "0");
        assert_eq!(env["SLURM_NODEID"], "0");
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "10,11,12");
        assert_eq!(env["SLURM_NTASKS"], "4");
    }

    #[test]
    fn counts_compress_as_slurm_prints_them() {
        assert_eq!(compress_counts(&[2, 2, 2, 1]), "2(x3),1");
        assert_eq!(compress_counts(&[4]), "4");
        assert_eq!(compress_counts(&[1, 2, 1]), "1,2,1");
        assert_eq!(compress_counts(&[]), "");
    }

    #[test]
    fn environment_holds_the_job_and_the_task() {
        let j = job();
        let env = task_environment(&j, &node3(), 2, &alice()).unwrap();
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("SLURM_JOB_ID"), Some("42"));
        assert_eq!(get("SLURM_JOB_NAME"), Some("job"));
        assert_eq!(get("SLURM_JOB_NODELIST"), Some("gpu[001-003]"));
        assert_eq!(get("SLURM_JOB_NUM_NODES"), Some("3"));
        assert_eq!(get("SLURM_NNODES"), Some("3"));
        assert_eq!(get("SLURM_NTASKS"), Some("4"));
        assert_eq!(get("SLURM_NPROCS"), Some("4"));
        assert_eq!(get("SLURM_TASKS_PER_NODE"), Some("1(x2),2"));
        assert_eq!(get("SLURM_JOB_CPUS_PER_NODE"), Some("2,1,3"));
        assert_eq!(get("SLURM_CPUS_ON_NODE"), Some("3"));
        assert_eq!(get("SLURM_CPUS_PER_TASK"), Some("2"));
        assert_eq!(get("SLURM_PROCID"), Some("1"));
        assert_eq!(get("SLURM_LOCALID"), Some("0"));
        assert_eq!(get("SLURM_NODEID"), Some("2"));
        assert_eq!(get("SLURM_GTIDS"), Some("1,3"));
        assert_eq!(get("SLURM_JOB_ACCOUNT"), Some("physics"));
        assert_eq!(get("SLURM_JOB_PARTITION"), Some("gpu"));
        assert_eq!(get("SLURM_JOB_USER"), Some("alice"));
        assert_eq!(get("SLURM_JOB_UID"), Some("1000"));
        assert_eq!(get("SLURM_SUBMIT_DIR"), Some("/home/alice"));
        assert_eq!(get("SLURMD_NODENAME"), Some("gpu003"));
        // The job holds positions 0, 1 and 2 here; the task holds 0 and 2.
        assert_eq!(get("SLURM_GPUS_ON_NODE"), Some("3"));
        assert_eq!(get("SLURM_JOB_GPUS"), Some("10,11,12"));
        assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("10,12"));
        assert_eq!(get("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
        assert_eq!(get("FOO"), Some("bar"));
        assert!(get("SLURM_ARRAY_JOB_ID").is_none());
    }

    #[test]
    fn a_task_without_gpus_sees_none() {
        let mut j = job();
        j.allocation.tasks[0].gpus.clear();
        j.allocation.tasks[2].gpus.clear();
        let env = task_environment(&j, &node3(), 2, &alice()).unwrap();
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "");
        assert!(!env.contains_key("SLURM_GPUS_ON_NODE"));
        assert!(!env.contains_key("SLURM_JOB_GPUS"));
    }

    #[test]
    fn export_none_keeps_slurm_variables_and_the_account() {
        let mut j = job();
        j.export = Export::None;
        let env = task_environment(&j, &node3(), 0, &alice()).unwrap();
        assert!(!env.contains_key("FOO"));
        assert_eq!(env["SLURM_CONF"], "/etc/slurm.conf");
        assert_eq!(env["PATH"], DEFAULT_PATH);
        assert_eq!(env["USER"], "alice");
        assert_eq!(env["SHELL"], "/bin/bash");
        j.export = Export::Named(vec!["FOO".into()]);
        let env = task_environment(&j, &node3(), 0, &alice()).unwrap();
        assert_eq!(env["FOO"], "bar");
    }

    #[test]
    fn array_jobs_get_their_array_variables() {
        let mut j = job();
        j.spec.array = Some(ArrayIndex {
            array_job: JobId(40),
            index: 2,
            max_running: None,
        });
        let env = task_environment(&j, &node3(), 0, &alice()).unwrap();
        assert_eq!(env["SLURM_ARRAY_JOB_ID"], "40");
        assert_eq!(env["SLURM_ARRAY_TASK_ID"], "2");
    }

    #[test]
    fn inconsistent_launches_are_refused_with_what_was_wrong() {
        let j = job();
        let err = task_environment(&j, &node3(), 1, &alice()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "task 1 of job 42 is not placed on node gpu003"
        );
        let mut bad = job();
        bad.allocation.tasks[2].gpus = vec![5];
        let err = task_environment(&bad, &node3(), 2, &alice()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "job 42 is allocated GPU position 5 but this node has 3 GPUs"
        );
        let mut bad = job();
        bad.node_names.remove(&NodeId(2));
        let err = task_environment(&bad, &node3(), 2, &alice()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "job 42 uses node id 2 but no name was given for it"
        );
    }
}
