//! The agent's side of a Kubernetes workload's contracts: from the translation the run
//! spec carries ([`cadre_k8s::WorkloadRun`]) and where the gang landed, what each task of
//! this node runs, the variables it sees, and the job's files.
//!
//! **Given**: the launch order (the allocation, every node's name and reported address)
//! and the run's directory on this node. **Decided** ([`prepare`]): the placement the
//! contracts are computed from ([`placement`]: per task group, per index, the node's name
//! and address, the address resolved to an IP since it goes into a hosts file); the
//! rendezvous port ([`rendezvous_port`]); for each task here its group's program with
//! `$(VAR)`s expanded, its working directory and its rank's variables
//! ([`cadre_k8s::rank_environment`], set over the Slurm ones); the files written to the
//! run's directory: `hosts` (this node's `/etc/hosts`, then the job's names), `mpi/` (the
//! MPI hostfile and `discover_hosts.sh`) and `volcano/` (the svc plugin's host files).
//!
//! **How names resolve.** A task runs with the node's network, so a peer's name must
//! resolve to the address of the node its task runs on. When the agent is root, each task
//! gets a mount namespace of its own (made in the child before it becomes the user; see
//! [`crate::launch`]) where the job's `hosts` file is bind-mounted over `/etc/hosts`, and
//! the `mpi/` and `volcano/` directories over `/etc/mpi` and `/etc/volcano` (created empty
//! on the node when missing, as mount points), where the programs expect them. The node's
//! own `/etc/hosts` is untouched. When the agent is not root, the mount namespace is made
//! in a user namespace of the task's own ([`crate::mountns`]) where the kernel allows it:
//! the hosts file is mounted the same way, and `mpi/` and `volcano/` only where `/etc/mpi`
//! and `/etc/volcano` exist on the node (it cannot create them); otherwise the contract's
//! variables name those directories in the run's directory
//! (`OMPI_MCA_orte_default_hostfile`, ...). Where neither works, the files stay in the
//! run's directory, `CADRE_HOSTS_FILE` names the hosts file, and the peers' names do
//! **not** resolve through the system resolver (a program may read the hosts file itself).
//! glibc's `HOSTALIASES` is no substitute: it maps names to names, only for names without
//! dots, and only on the DNS path.
//!
//! **Ports.** Tasks of different jobs share a node's ports (on `cadre up` every node is
//! this machine), so the rendezvous port a PyTorchJob's tasks use (`MASTER_PORT`, the
//! elastic rendezvous port) is not the manifest's but one chosen per job, the same on
//! every node without agreement: `20000 + job id mod 10000`. Two jobs whose ids differ by
//! a multiple of 10000 and whose masters share a node would collide; so would a program
//! of the node already listening there.
//!
//! **Containers.** When the workload's containers run in their images
//! ([`Translated::containers`]), each task here is its image run by the node's container
//! runtime ([`crate::container`]): the job's `hosts`, `mpi/` and `volcano/` files are
//! mounted at `/etc/hosts`, `/etc/mpi` and `/etc/volcano` by the runtime (root agent or
//! not), the container starts in its `workingDir` or its image's, and its output files are
//! in the submission directory.
//!
//! **MPI's remote launch.** On the host, an MPIJob's launcher finds cadre's rsh agent at
//! `cadre-rsh` in its MPI files' directory (a link to the agent's own executable), named
//! by its MPI's variables, with `CADRE_SERVER` and the job's token (`CADRE_TOKEN`, see
//! [`cadre_proto::job_token`]) to reach the controller: it starts MPI's daemons as steps of
//! the job on the workers' nodes. Workers whose program is `sshd`
//! ([`cadre_k8s::holds_for_rsh`]) run nothing; their nodes hold their share. In
//! containers, every container of the job has `cadre-rsh` (a script running the node's
//! executable with the node's loader and libraries, mounted under `/.cadre`, and the
//! controller's socket), the workers' containers wait, and the daemons are started inside
//! them (a step with `in_task`, the runtime's `exec`).
//!
//! Not here: SSH key pairs for MPI's and Volcano's `ssh` (the translation records where
//! they are expected; cadre makes none, see above).

use crate::mountns::TaskMounts;
use crate::rundir::{BindSource, RunDir};
use cadre_core::alloc::Allocation;
use cadre_core::cluster::NodeId;
use cadre_k8s::contract::{MPI_DIR, VOLCANO_DIR};
use cadre_k8s::{PlacedTask, Placement, Program, RSH_AGENT, Translated, VolumeKind, WorkloadKind};
use cadre_proto::agent::LaunchOrder;
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use crate::container::{self, ContainerRuntime, ContainerSpec};
use crate::jobenv::{self, TaskProgram};
use cadre_k8s::PullPolicy;

/// Where a workload's containers see cadre's executable and the node's loader and
/// libraries (under `lib/`), for their `cadre-rsh`.
const RSH_ROOT: &str = "/.cadre";

/// What an MPI worker's container runs in place of its sshd: nothing, until it is
/// stopped, while `cadre-rsh` starts MPI's daemons in it.
const WAIT_FOR_EXEC: &str = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done";

/// The node's hosts file, whose lines the job's hosts file keeps first.
const NODE_HOSTS: &str = "/etc/hosts";

/// The directory of the MPI files holding the launcher's `ssh` (cadre's rsh agent).
const SSH_DIR: &str = "bin";

/// Where a container of an MPIJob finds cadre's `ssh`.
const CONTAINER_SSH: &str = "/usr/local/bin/ssh";

/// The PATH of a task on the host that was given none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What keeps a workload's tasks from being prepared.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The translation or the contract cannot be computed for this launch: the job's
    /// doing (or a cadre of another version), so retrying cannot help.
    #[error("{0}")]
    Contract(#[from] cadre_k8s::K8sError),
    /// The node's agent has no container runtime (any more): the node's doing, not the
    /// job's (the scheduler places such jobs on nodes that reported one).
    #[error(
        "task group {group} of the job runs in its image: no container runtime is configured on node {node}"
    )]
    NeedsRuntime { group: usize, node: String },
    /// A step inside a task's container, on a node without a runtime (any more).
    #[error(
        "the step runs inside the container of the job's task {rank}: no container runtime is configured on node {node}"
    )]
    StepNeedsRuntime { rank: u32, node: String },
    #[error("cannot resolve the address `{address}` of node {node}: {source}")]
    Resolve {
        node: String,
        address: String,
        source: io::Error,
    },
    #[error("failed to write the job's file {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    /// A container asks for a capability the node does not give.
    #[error(
        "task group {group} asks for capability {capability} (securityContext.capabilities.add), \
         which node {node} does not allow: its agent allows {} (--container-allowed-capabilities)",
        if allowed.is_empty() { "none".to_string() } else { allowed.join(",") }
    )]
    CapabilityNotAllowed {
        group: usize,
        capability: String,
        node: String,
        allowed: Vec<String>,
    },
    /// A volume's `mountPath` is no directory on the node the agent mounts over (it makes
    /// none where a user says; see `node_mount_point`).
    #[error(
        "task group {group} mounts volume `{volume}` at {path}, which is not a directory on node {node} that cadre mounts over: a volume goes over a directory that exists, owned by root as is every directory above it (each searchable by all and writable by root alone, or sticky), outside /proc, /sys, /dev (but /dev/shm) and the job's own /etc/hosts, /etc/mpi and /etc/volcano"
    )]
    NoMountPoint {
        group: usize,
        volume: String,
        path: String,
        node: String,
    },
    /// Volumes need a mount namespace of the task's own, which this agent cannot make.
    #[error(
        "task group {group} mounts volumes, which needs a mount namespace of the task's own: the agent of node {node} is not root and cannot make user namespaces"
    )]
    VolumesNeedNamespace { group: usize, node: String },
    /// A `hostPath` volume's path cannot be used on this node.
    #[error(
        "task group {group} mounts hostPath {path}, which cannot be used on node {node}: {source}"
    )]
    HostPath {
        group: usize,
        path: String,
        node: String,
        source: io::Error,
    },
    /// A claim's directory cannot be made or used on this node.
    #[error(
        "task group {group} mounts persistentvolumeclaim `{claim}`, whose directory on node {node} cannot be used: {source}"
    )]
    Claim {
        group: usize,
        claim: String,
        node: String,
        source: io::Error,
    },
}

impl WorkloadError {
    fn no_mount_point(group: usize, v: &cadre_k8s::Volume, node: String) -> WorkloadError {
        WorkloadError::NoMountPoint {
            group,
            volume: v.name.clone(),
            path: v.path.clone(),
            node,
        }
    }

    /// Whether trying again (elsewhere) cannot help.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            WorkloadError::Contract(_)
                | WorkloadError::CapabilityNotAllowed { .. }
                | WorkloadError::NoMountPoint { .. }
                // The path the job names, or its claim's directory, is not what it may
                // mount: held with why, rather than the node drained for a job's doing.
                | WorkloadError::HostPath { .. }
                | WorkloadError::Claim { .. }
        )
    }
}

/// The port a job's rendezvous uses (see the module doc).
pub fn rendezvous_port(job: cadre_core::job::JobId) -> u16 {
    20_000 + (job.0 % 10_000) as u16
}

/// `address` as an IP address: itself if it is one, else the first address it resolves to
/// (IPv4 first, as a hosts file is usually read for them).
pub fn resolve(address: &str) -> io::Result<IpAddr> {
    if let Ok(ip) = address.parse::<IpAddr>() {
        return Ok(ip);
    }
    let mut ips: Vec<IpAddr> = (address, 0).to_socket_addrs()?.map(|a| a.ip()).collect();
    ips.sort_by_key(|ip| !ip.is_ipv4());
    ips.into_iter()
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "it resolves to no address"))
}

/// Where each task of the gang runs, per task group and index in the group, with the
/// nodes' addresses resolved by `lookup`; the files at the Kubernetes paths.
pub fn placement(
    t: &Translated,
    allocation: &Allocation,
    names: &BTreeMap<NodeId, String>,
    addresses: &BTreeMap<NodeId, String>,
    mut lookup: impl FnMut(&str, &str) -> Result<String, WorkloadError>,
) -> Result<Placement, WorkloadError> {
    let mut resolved: BTreeMap<NodeId, String> = BTreeMap::new();
    let mut groups: Vec<Vec<(u32, PlacedTask)>> = vec![Vec::new(); t.spec.groups.len()];
    for task in &allocation.tasks {
        let name = names
            .get(&task.node)
            .cloned()
            .ok_or_else(|| cadre_k8s::K8sError::Contract {
                what: format!("the launch order names no node id {}", task.node.0),
            })?;
        let address = match resolved.get(&task.node) {
            Some(a) => a.clone(),
            None => {
                let reported = addresses.get(&task.node).unwrap_or(&name);
                let a = lookup(&name, reported)?;
                resolved.insert(task.node, a.clone());
                a
            }
        };
        let group = usize::from(task.group);
        if group >= groups.len() {
            return Err(cadre_k8s::K8sError::Contract {
                what: format!(
                    "the allocation places a task of group {group}; the job has {} groups",
                    groups.len()
                ),
            }
            .into());
        }
        groups[group].push((
            task.rank,
            PlacedTask {
                node: name,
                address,
            },
        ));
    }
    let tasks = groups
        .into_iter()
        .map(|mut g| {
            g.sort_by_key(|(rank, _)| *rank);
            g.into_iter().map(|(_, t)| t).collect()
        })
        .collect();
    Ok(Placement::new(tasks))
}

/// What a node can do for a workload's tasks.
#[derive(Clone, Copy, Debug)]
pub struct NodeMeans<'a> {
    /// How tasks get the job's files at their usual paths.
    pub mounts: TaskMounts,
    /// The node's container runtime, if any.
    pub runtime: Option<&'a ContainerRuntime>,
    /// The capabilities a container may be given back (the agent's
    /// `--container-allowed-capabilities`).
    pub allowed_capabilities: &'a [String],
    /// The node's GPUs are real (containers get them as devices).
    pub real_gpus: bool,
    /// What MPI's remote launch goes through on this node, if anything.
    pub rsh: Option<RshMeans<'a>>,
}

/// cadre's rsh agent, as an MPI launcher runs it (see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct RshMeans<'a> {
    /// cadre's executable: `cadre-rsh` in the MPI files' directory links to it.
    pub executable: &'a Path,
    /// The controller's address, given to the launcher as `CADRE_SERVER`.
    pub controller: &'a str,
    /// The executable's dynamic loader and libraries ([`container::own_libraries`]), for
    /// `cadre-rsh` in a container; `None`: MPI in containers has no rsh agent here.
    pub libraries: Option<&'a (PathBuf, Vec<PathBuf>)>,
    /// The job's token ([`cadre_proto::job_token`]), given to the launcher as
    /// `CADRE_TOKEN`: the launcher reaches the controller as the job's user with it, over
    /// TCP as over the controller's socket.
    pub token: &'a str,
}

/// The workload's tasks on this node, prepared: its files written to the run's directory
/// `dir` (fresh: see [`crate::rundir`] for who owns what), and for each task here (by
/// position in the allocation) what it runs: its program on the host, or its image in the
/// node's container runtime when the workload's containers run in their images.
pub fn prepare(
    t: &Translated,
    order: &LaunchOrder,
    node: NodeId,
    dir: &RunDir,
    means: NodeMeans<'_>,
) -> Result<BTreeMap<usize, TaskProgram>, WorkloadError> {
    let run_dir = dir.path();
    let mounts = means.mounts;
    // Where the job's files appear at their usual paths: in containers (the runtime mounts
    // them) or in the tasks' own mount namespaces. Decided once: the run's variables and
    // its tasks' mounts must agree.
    let mpi_mounted = t.containers || mounts.can_mount_at(MPI_DIR);
    let volcano_mounted = t.containers || mounts.can_mount_at(VOLCANO_DIR);
    let mounted = |at: &str| {
        if at == MPI_DIR {
            mpi_mounted
        } else {
            volcano_mounted
        }
    };
    let node_name = order.node_names.get(&node).cloned().unwrap_or_default();
    let mut p = placement(
        t,
        &order.allocation,
        &order.node_names,
        &order.node_addresses,
        |name, address| {
            resolve(address)
                .map(|ip| ip.to_string())
                .map_err(|source| WorkloadError::Resolve {
                    node: name.to_string(),
                    address: address.to_string(),
                    source,
                })
        },
    )?;
    p.rendezvous_port = Some(rendezvous_port(order.run.job));
    let mpi_host = run_dir.join("mpi");
    let volcano_host = run_dir.join("volcano");
    if !mpi_mounted {
        p.mpi_dir = mpi_host.display().to_string();
    }
    if !volcano_mounted {
        p.volcano_dir = volcano_host.display().to_string();
    }
    // MPI's remote launch goes through cadre's rsh agent (in containers, only where the
    // agent knows what its executable needs there).
    let rsh = means.rsh.filter(|r| {
        matches!(t.kind, WorkloadKind::MpiJob { .. }) && (!t.containers || r.libraries.is_some())
    });
    if rsh.is_some() {
        p.rsh_agent = Some(format!("{}/{RSH_AGENT}", p.mpi_dir));
    }
    let rsh_in_images = rsh.is_some() && t.containers;
    let write_err = |path: PathBuf| move |source| WorkloadError::Write { path, source };

    // The hosts file: the node's own lines first (localhost, the node's name), then the
    // job's names.
    let mut hosts = node_hosts_lines();
    hosts.push_str(&cadre_k8s::hosts_file(t, &p)?);
    let hosts_path = dir
        .write("hosts", hosts.as_bytes(), 0o644)
        .map_err(write_err(run_dir.join("hosts")))?;

    // The MPI and Volcano files, into the run's directory: `mpi/` and `volcano/`, made on
    // first use.
    let mut subdirs: BTreeMap<&str, RunDir> = BTreeMap::new();
    let mut dirs_used: Vec<(PathBuf, &str, Vec<usize>)> = Vec::new();
    for file in cadre_k8s::job_files(t, &p)? {
        let seen = Path::new(&file.path);
        let (sub, at) = if seen.starts_with(&p.mpi_dir) {
            ("mpi", MPI_DIR)
        } else {
            ("volcano", VOLCANO_DIR)
        };
        let Some(name) = seen.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let host_dir = run_dir.join(sub);
        subdir(&mut subdirs, dir, sub)?
            .write(name, file.text.as_bytes(), file.mode)
            .map_err(write_err(host_dir.join(name)))?;
        match dirs_used.iter_mut().find(|(d, _, _)| *d == host_dir) {
            Some((_, _, groups)) => groups.extend(file.groups.iter().copied()),
            None => dirs_used.push((host_dir, at, file.groups.clone())),
        }
    }
    // What every container of the job mounts for its `cadre-rsh`.
    let mut rsh_mounts: Vec<(PathBuf, String)> = Vec::new();
    if let Some(rsh) = rsh {
        // The launcher's `cadre-rsh`, beside its hostfile: on the host a link to the
        // agent's executable; in a container a script that runs that executable, mounted
        // with the node's loader and libraries (the image has its own, or none).
        let at = mpi_host.join(RSH_AGENT);
        let mpi = subdir(&mut subdirs, dir, "mpi")?;
        match rsh.libraries.filter(|_| t.containers) {
            None => {
                mpi.symlink(RSH_AGENT, rsh.executable)
                    .map_err(write_err(at.clone()))?;
                // `ssh` too, first on the launcher's PATH: launchers written for the MPI
                // Operator's sshd (`ssh <worker> hostname` until each answers) reach the
                // workers as `cadre-rsh` does.
                let bin = mpi_host.join(SSH_DIR);
                mpi.subdir(SSH_DIR)
                    .and_then(|d| d.symlink("ssh", rsh.executable))
                    .map_err(write_err(bin))?;
            }
            Some((loader, libraries)) => {
                let lib = |p: &Path| {
                    format!(
                        "{RSH_ROOT}/lib/{}",
                        p.file_name().unwrap_or_default().to_string_lossy()
                    )
                };
                rsh_mounts.push((rsh.executable.to_path_buf(), format!("{RSH_ROOT}/cadre")));
                rsh_mounts.push((loader.clone(), lib(loader)));
                for l in libraries {
                    rsh_mounts.push((l.clone(), lib(l)));
                }
                if let Some(socket) = rsh.controller.strip_prefix("unix://") {
                    rsh_mounts.push((PathBuf::from(socket), socket.to_string()));
                }
                let script = format!(
                    "#!/bin/sh\n# cadre's rsh agent: the node's cadre, with the node's loader and libraries.\nexec {} --library-path {RSH_ROOT}/lib {RSH_ROOT}/cadre rsh \"$@\"\n",
                    lib(loader)
                );
                mpi.write(RSH_AGENT, script.as_bytes(), 0o755)
                    .map_err(write_err(at.clone()))?;
                // `ssh` in every container of the job, ahead of an image's own on the
                // usual PATH.
                rsh_mounts.push((at.clone(), CONTAINER_SSH.to_string()));
            }
        }
        if !dirs_used.iter().any(|(d, _, _)| *d == mpi_host) {
            dirs_used.push((mpi_host.clone(), MPI_DIR, vec![0]));
        }
    }
    if mounts == TaskMounts::Root && !t.containers {
        for (_, at, _) in &dirs_used {
            // The mount point, empty on the node.
            std::fs::create_dir_all(at).map_err(write_err(PathBuf::from(at)))?;
        }
    }
    // What tasks on the host get mounted, opened once: the files the agent just made.
    let mut sources: BTreeMap<PathBuf, BindSource> = BTreeMap::new();
    if mounts.can_bind() && !t.containers {
        sources.insert(
            hosts_path.clone(),
            dir.bind_source("hosts")
                .map_err(write_err(hosts_path.clone()))?,
        );
        for (host_dir, _, _) in &dirs_used {
            let name = host_dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let source = dir.bind_source(name).map_err(write_err(host_dir.clone()))?;
            sources.insert(host_dir.clone(), source);
        }
    }
    let source = |path: &PathBuf| {
        sources.get(path).cloned().ok_or_else(|| {
            WorkloadError::from(cadre_k8s::K8sError::Contract {
                what: format!("no mount source was opened for {}", path.display()),
            })
        })
    };

    let mut programs = BTreeMap::new();
    for index in jobenv::tasks_on_node(&order.allocation, node) {
        let task = &order.allocation.tasks[index];
        let group = usize::from(task.group);
        let Some(place) = jobenv::task_place(&order.allocation, index) else {
            continue;
        };
        let mut env = cadre_k8s::rank_environment(t, place.procid, &p)?;
        let program = cadre_k8s::rank_program(t, place.procid, &p)?;
        // The pod's host name, in a UTS namespace of the task's own (where its files are
        // mounted, or in its container): torchrun's c10d rendezvous decides which rank
        // hosts its store by it.
        let hostname = cadre_k8s::pod_hostname(t, group, task.rank);
        // Checked again here (the translation comes from the client): no volume is mounted
        // inside another, whose contents, the user's, would decide where it lands.
        let vols = &t.groups[group].volumes;
        for (i, a) in vols.iter().enumerate() {
            if let Some(b) = vols[i + 1..]
                .iter()
                .find(|b| cadre_k8s::nested(&a.path, &b.path))
            {
                return Err(cadre_k8s::K8sError::Contract {
                    what: format!(
                        "task group {group} mounts volumes at {} and {}, one inside the other",
                        a.path, b.path
                    ),
                }
                .into());
            }
        }
        if let (Some(rsh), 0) = (rsh, group) {
            env.push(("CADRE_SERVER".into(), rsh.controller.to_string()));
            env.push(("CADRE_TOKEN".into(), rsh.token.to_string()));
        }
        if t.containers {
            let Some(runtime) = means.runtime else {
                return Err(WorkloadError::NeedsRuntime {
                    group,
                    node: node_name,
                });
            };
            let run = &t.groups[group];
            if let Some(c) = run
                .capabilities
                .iter()
                .find(|c| !means.allowed_capabilities.contains(c))
            {
                return Err(WorkloadError::CapabilityNotAllowed {
                    group,
                    capability: c.clone(),
                    node: node_name,
                    allowed: means.allowed_capabilities.to_vec(),
                });
            }
            let (Program::Image { command, args }, Some(image)) = (&program, &run.image) else {
                return Err(cadre_k8s::K8sError::Contract {
                    what: format!(
                        "task group {group} runs in a container but has no image and image program"
                    ),
                }
                .into());
            };
            let mut mounts = vec![(hosts_path.clone(), NODE_HOSTS.to_string())];
            for (dir, at, groups) in &dirs_used {
                if groups.contains(&group) {
                    mounts.push((dir.clone(), at.to_string()));
                }
            }
            if rsh_in_images {
                // Every task's container has `cadre-rsh`: OpenMPI passes its rsh agent on
                // to the daemons it starts in the workers' containers, which refuse to
                // start where that path is missing.
                if !mounts.iter().any(|(_, at)| at == MPI_DIR) {
                    mounts.push((mpi_host.clone(), MPI_DIR.to_string()));
                }
                mounts.extend(rsh_mounts.iter().cloned());
            }
            // An MPI worker's sshd: the container waits for the daemons `cadre-rsh` starts
            // in it.
            let (command, args) = if cadre_k8s::holds_for_rsh(t, group) && rsh_in_images {
                (
                    Some(vec![
                        "/bin/sh".to_string(),
                        "-c".into(),
                        WAIT_FOR_EXEC.into(),
                    ]),
                    Vec::new(),
                )
            } else {
                (command.clone(), args.clone())
            };
            let spec = ContainerSpec {
                runtime: runtime.argv().to_vec(),
                name: container::container_name(
                    dir.path().parent().unwrap_or(dir.path()),
                    order.run.job.0,
                    order.run.run,
                    order.run.step,
                    place.procid,
                ),
                image: image.clone(),
                pull: run.pull_policy.unwrap_or(PullPolicy::IfNotPresent),
                command,
                args,
                work_dir: run.work_dir.clone(),
                mounts,
                gpu_devices: means.real_gpus,
                capabilities: run.capabilities.clone(),
                hostname: Some(hostname),
                tmpfs: Vec::new(),
                writable: Vec::new(),
            };
            let mut spec = spec;
            for (i, v) in run.volumes.iter().enumerate() {
                // The runtime's options are joined with `:` and `,`.
                if !mount_path_words(&v.path) {
                    return Err(WorkloadError::no_mount_point(group, v, node_name));
                }
                let name = format!("volume-{}-{i}", place.procid);
                match &v.kind {
                    VolumeKind::EmptyDir => {
                        let made = dir
                            .user_dir(&name)
                            .and_then(|d| d.hand_over().map(|()| d))
                            .map_err(write_err(run_dir.join(&name)))?;
                        spec.writable
                            .push((made.path().to_path_buf(), v.path.clone()));
                    }
                    VolumeKind::Memory { size_bytes } => spec
                        .tmpfs
                        .push((v.path.clone(), size_bytes.or(task_memory(task)))),
                    VolumeKind::ConfigMap { .. } | VolumeKind::Secret { .. } => {
                        let made = volume_files(dir, &name, t, &v.kind)
                            .map_err(write_err(run_dir.join(&name)))?;
                        spec.mounts.push((made, v.path.clone()));
                    }
                    VolumeKind::Claim { .. } | VolumeKind::HostPath { .. } => {
                        let made = outside_source(order, dir, &v.kind, group, &node_name)?;
                        let at = (made.path().to_path_buf(), v.path.clone());
                        if made.is_read_only() {
                            spec.mounts.push(at);
                        } else {
                            spec.writable.push(at);
                        }
                    }
                }
            }
            programs.insert(
                index,
                TaskProgram {
                    command: program.words(),
                    work_dir: t.submit_dir.clone(),
                    env,
                    binds: Vec::new(),
                    container: Some(spec),
                    holds: false,
                    hostname: None,
                    no_new_privs: false,
                    tmpfs: Vec::new(),
                    identity: run.identity.clone(),
                },
            );
            continue;
        }
        let command = match program {
            Program::Argv(argv) => argv,
            Program::Image { .. } => {
                return Err(cadre_k8s::K8sError::Contract {
                    what: format!(
                        "task group {group} runs in its image, but the workload runs on the host"
                    ),
                }
                .into());
            }
        };
        // The program is looked up on the submitter's `PATH` (the manifest's own, later in
        // the list, wins).
        if let Some(path) = &t.host_path {
            env.insert(0, ("PATH".into(), path.clone()));
        }
        // The launcher's `ssh` is cadre's (see above), first on its PATH.
        if rsh.is_some() && group == 0 {
            let path = env
                .iter()
                .rev()
                .find(|(k, _)| k == "PATH")
                .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
            let path = format!("{}/{SSH_DIR}:{path}", p.mpi_dir);
            env.push(("PATH".into(), path));
        }
        let work_dir = t.work_dir(group).unwrap_or_else(|| t.submit_dir.clone());
        // An MPI worker's sshd runs nothing: the node holds the worker's share, and the
        // launcher's `mpirun` reaches it through the rsh agent.
        let holds = cadre_k8s::holds_for_rsh(t, group);
        let mut binds = Vec::new();
        // The pod's volumes, mounted after the job's own files (whose mounts go through
        // `/proc/self/fd`, which no volume may stand over).
        let mut volume_binds = Vec::new();
        let mut own_hostname = None;
        let mut tmpfs = Vec::new();
        let volumes = &t.groups[group].volumes;
        // What the daemons `cadre-rsh` starts in a holding worker's pod mount: recorded
        // for the steps that start them (see [`PodVolumes`]).
        let mut recorded = Vec::new();
        if !volumes.is_empty() {
            if !mounts.can_bind() {
                return Err(WorkloadError::VolumesNeedNamespace {
                    group,
                    node: node_name,
                });
            }
            for (i, v) in volumes.iter().enumerate() {
                let at = PathBuf::from(&v.path);
                if !node_mount_point(&v.path) {
                    return Err(WorkloadError::no_mount_point(group, v, node_name));
                }
                let name = format!("volume-{}-{i}", place.procid);
                match &v.kind {
                    VolumeKind::EmptyDir => {
                        dir.user_dir(&name)
                            .and_then(|d| d.hand_over())
                            .map_err(write_err(run_dir.join(&name)))?;
                    }
                    VolumeKind::Memory { size_bytes } => {
                        let size = size_bytes.or(task_memory(task));
                        recorded.push(PodVolume::Memory {
                            at: v.path.clone(),
                            size,
                        });
                        tmpfs.push((at, size));
                        continue;
                    }
                    VolumeKind::ConfigMap { .. } | VolumeKind::Secret { .. } => {
                        volume_files(dir, &name, t, &v.kind)
                            .map_err(write_err(run_dir.join(&name)))?;
                    }
                    VolumeKind::Claim { .. } | VolumeKind::HostPath { .. } => {
                        let made = outside_source(order, dir, &v.kind, group, &node_name)?;
                        let read_only = made.is_read_only();
                        match &v.kind {
                            VolumeKind::Claim { claim, .. } => {
                                if let Some(c) = order.claims.iter().find(|c| &c.name == claim) {
                                    recorded.push(PodVolume::Claim {
                                        at: v.path.clone(),
                                        claim: c.clone(),
                                        read_only,
                                    });
                                }
                            }
                            _ => recorded.push(PodVolume::HostPath {
                                at: v.path.clone(),
                                path: made.path().to_path_buf(),
                                read_only,
                            }),
                        }
                        volume_binds.push((made, at));
                        continue;
                    }
                }
                recorded.push(PodVolume::Dir {
                    at: v.path.clone(),
                    name: name.clone(),
                });
                let made = dir
                    .bind_source(&name)
                    .map_err(write_err(run_dir.join(&name)))?;
                volume_binds.push((made, at));
            }
        }
        if holds && !recorded.is_empty() && !cadre_proto::api::is_step_hostname(&hostname) {
            return Err(cadre_k8s::K8sError::Contract {
                what: format!("task group {group}: `{hostname}` is not a pod's host name"),
            }
            .into());
        }
        if holds && !recorded.is_empty() {
            // The holder runs nothing: its pod's volumes are the daemons' that `cadre-rsh`
            // starts in it, by its host name.
            let file = PodVolumes::file_name(&hostname);
            serde_json::to_vec(&PodVolumes { volumes: recorded })
                .map_err(|e| io::Error::other(e.to_string()))
                .and_then(|bytes| dir.write_private(&file, &bytes))
                .map_err(write_err(run_dir.join(&file)))?;
            volume_binds.clear();
            tmpfs.clear();
        }
        if !mounts.can_bind() {
            env.push(("CADRE_HOSTS_FILE".into(), hosts_path.display().to_string()));
        } else if !holds {
            env.push(("HOSTNAME".into(), hostname.clone()));
            own_hostname = Some(hostname);
            binds.push((source(&hosts_path)?, PathBuf::from(NODE_HOSTS)));
            for (dir, at, groups) in &dirs_used {
                if groups.contains(&group) && mounted(at) {
                    binds.push((source(dir)?, PathBuf::from(at)));
                }
            }
        }
        programs.insert(
            index,
            TaskProgram {
                command,
                work_dir,
                env,
                binds: binds.into_iter().chain(volume_binds).collect(),
                container: None,
                holds,
                hostname: own_hostname,
                no_new_privs: !volumes.is_empty() && !holds,
                tmpfs,
                identity: t.groups[group].identity.clone(),
            },
        );
    }
    Ok(programs)
}

/// The files of a `configMap` or `secret` volume (each key, or each of its `items`, a file
/// of the job's user alone), in a new directory `name` of the run's directory; its path.
/// An optional object that was not applied gives an empty directory.
fn volume_files(
    dir: &RunDir,
    name: &str,
    t: &Translated,
    kind: &VolumeKind,
) -> io::Result<PathBuf> {
    let made = dir.user_dir(name)?;
    let (object, items, secret) = match kind {
        VolumeKind::ConfigMap { name, items, .. } => (name, items, false),
        VolumeKind::Secret { name, items, .. } => (name, items, true),
        VolumeKind::EmptyDir
        | VolumeKind::Memory { .. }
        | VolumeKind::Claim { .. }
        | VolumeKind::HostPath { .. } => {
            return Ok(made.path().to_path_buf());
        }
    };
    let keys: Vec<String> = if secret {
        t.secrets.0.get(object).map(|d| d.keys().cloned().collect())
    } else {
        t.config_maps
            .get(object)
            .map(|d| d.keys().cloned().collect())
    }
    .unwrap_or_default();
    let files: Vec<(String, String)> = if items.is_empty() {
        keys.iter().map(|k| (k.clone(), k.clone())).collect()
    } else {
        items.clone()
    };
    for (key, file) in files {
        let bytes = if secret {
            t.secrets.get(object, &key)
        } else {
            t.config_maps
                .get(object)
                .and_then(|d| d.get(&key))
                .map(|v| v.as_bytes().to_vec())
        };
        if let Some(bytes) = bytes {
            made.write(&file, &bytes, 0o400)?;
        }
    }
    made.hand_over()?;
    Ok(made.path().to_path_buf())
}

/// The volumes of a pod whose worker holds its node for `cadre-rsh` (it runs nothing): the
/// steps `cadre-rsh` starts in the pod (MPI's daemons, and the ranks they start) mount
/// them, as the pod's containers would. Written by the agent in the job's run directory
/// (the agent's, mode 0600: no user can write or replace it) at the job's launch, read at
/// each such step's ([`PodVolumes::mounts`]).
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct PodVolumes {
    pub(crate) volumes: Vec<PodVolume>,
}

/// One volume of a [`PodVolumes`], by its mount path in the pod.
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum PodVolume {
    /// A directory the agent made in the job's run directory (`emptyDir`, `configMap`,
    /// `secret`).
    Dir { at: String, name: String },
    /// A private tmpfs of `size` bytes (`emptyDir` of `medium: Memory`).
    Memory { at: String, size: Option<u64> },
    /// A claim's directory, made again (found) through [`crate::claimdir::claim_dir`].
    Claim {
        at: String,
        claim: cadre_proto::agent::ClaimMount,
        read_only: bool,
    },
    /// A node path the job's launch order allowed (`hostPath`).
    HostPath {
        at: String,
        path: PathBuf,
        read_only: bool,
    },
}

/// What a step started in a pod mounts: its bind mounts (after the job's files) and its
/// tmpfs mounts.
pub(crate) type StepMounts = (Vec<(BindSource, PathBuf)>, Vec<(PathBuf, Option<u64>)>);

impl PodVolumes {
    /// The record's file in the job's run directory, for the pod of host name `hostname`.
    pub(crate) fn file_name(hostname: &str) -> String {
        format!("pod-{hostname}.volumes")
    }

    /// The mounts of a step started in the pod of host name `hostname` of the job whose run
    /// directory is `job_dir` (`owner`: the job's user, as the run directory gives it);
    /// none when the pod has no record (not a holding worker, or no volumes).
    pub(crate) fn mounts(
        job_dir: &Path,
        hostname: &str,
        owner: Option<(u32, u32)>,
    ) -> io::Result<StepMounts> {
        let path = job_dir.join(PodVolumes::file_name(hostname));
        let bytes = match crate::rundir::read_private(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
            Err(e) => return Err(e),
        };
        let record: PodVolumes = serde_json::from_slice(&bytes).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        })?;
        let mut binds = Vec::new();
        let mut tmpfs = Vec::new();
        for v in record.volumes {
            match v {
                PodVolume::Dir { at, name } => {
                    if name.contains('/') {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, name));
                    }
                    binds.push((BindSource::open(&job_dir.join(name))?, PathBuf::from(at)));
                }
                PodVolume::Memory { at, size } => tmpfs.push((PathBuf::from(at), size)),
                PodVolume::Claim {
                    at,
                    claim,
                    read_only,
                } => {
                    let made = crate::claimdir::claim_dir(&claim, owner)?;
                    let made = if read_only { made.read_only() } else { made };
                    binds.push((made, PathBuf::from(at)));
                }
                PodVolume::HostPath {
                    at,
                    path,
                    read_only,
                } => {
                    let made = open_host_path(&path)?;
                    let made = if read_only { made.read_only() } else { made };
                    binds.push((made, PathBuf::from(at)));
                }
            }
        }
        Ok((binds, tmpfs))
    }
}

/// What a volume from outside the run's directory mounts: a claim's directory
/// ([`claim_source`]) or a node path ([`host_path_source`]).
fn outside_source(
    order: &LaunchOrder,
    dir: &RunDir,
    kind: &VolumeKind,
    group: usize,
    node: &str,
) -> Result<BindSource, WorkloadError> {
    match kind {
        VolumeKind::Claim { claim, read_only } => {
            claim_source(order, dir, claim, *read_only, group, node)
        }
        VolumeKind::HostPath {
            path,
            kind,
            read_only,
        } => host_path_source(order, path, *kind, *read_only, group, node),
        _ => Err(cadre_k8s::K8sError::Contract {
            what: format!("task group {group}: not a volume from outside the run"),
        }
        .into()),
    }
}

/// The node's `path` of a `hostPath` volume, as the launch order allows it (the controller
/// names only an administrator's: never one the job's own translation names alone), made
/// first for `DirectoryOrCreate` (mode 0755, root's, as the kubelet makes it), checked to
/// be what its type says, opened to be mounted (its last component not followed).
fn host_path_source(
    order: &LaunchOrder,
    path: &str,
    kind: Option<cadre_k8s::HostPathKind>,
    read_only: bool,
    group: usize,
    node: &str,
) -> Result<BindSource, WorkloadError> {
    use cadre_k8s::HostPathKind;
    if !order.host_paths.iter().any(|p| p == path) || !mount_path_words(path) {
        return Err(cadre_k8s::K8sError::Contract {
            what: format!(
                "task group {group} mounts hostPath `{path}`, which the controller's launch \
                 order does not give"
            ),
        }
        .into());
    }
    let fail = |source: io::Error| WorkloadError::HostPath {
        group,
        path: path.to_string(),
        node: node.to_string(),
        source,
    };
    if kind == Some(HostPathKind::DirectoryOrCreate) {
        // Only below directories that are root's all the way down: no user can have put a
        // link where root would follow it.
        let existing = Path::new(path)
            .ancestors()
            .find(|a| a.exists())
            .unwrap_or(Path::new("/"));
        if !crate::claimdir::root_owned_dirs(existing, false) && existing != Path::new("/") {
            return Err(fail(not_roots(existing)));
        }
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(path)
            .map_err(fail)?;
    }
    let made = open_host_path(Path::new(path)).map_err(fail)?;
    let wrong = match kind {
        Some(HostPathKind::Directory | HostPathKind::DirectoryOrCreate) => {
            (!made.is_dir()).then_some("a directory")
        }
        Some(HostPathKind::File) => made.is_dir().then_some("a file"),
        None => None,
    };
    if let Some(want) = wrong {
        return Err(fail(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is not {want}, as its type says"),
        )));
    }
    Ok(if read_only { made.read_only() } else { made })
}

/// Why a host path is not taken: a directory of it (or above it) that a user could change.
fn not_roots(dir: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} is not a directory owned by root as is every directory above it, each \
             searchable by all and writable by root alone (or sticky): a user could swap a part \
             of the path for a link",
            dir.display()
        ),
    )
}

/// A node path to mount (`hostPath`), opened: every directory above it root's (checked
/// first: no user can change them after), its last component not followed if a link.
pub(crate) fn open_host_path(path: &Path) -> io::Result<BindSource> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    if parent != Path::new("/") && !crate::claimdir::root_owned_dirs(parent, false) {
        return Err(not_roots(parent));
    }
    BindSource::open(path)
}

/// The directory of claim `claim` on this node, as the launch order names it (only the
/// controller's claims are mounted: never one the job's own translation names alone),
/// made the job's user's and opened to be mounted; read-only when the volume or the claim
/// says so.
fn claim_source(
    order: &LaunchOrder,
    dir: &RunDir,
    claim: &str,
    read_only: bool,
    group: usize,
    node: &str,
) -> Result<crate::rundir::BindSource, WorkloadError> {
    let Some(c) = order.claims.iter().find(|c| c.name == claim) else {
        return Err(cadre_k8s::K8sError::Contract {
            what: format!(
                "task group {group} mounts persistentvolumeclaim `{claim}`, which the \
                 controller's launch order does not give"
            ),
        }
        .into());
    };
    let made =
        crate::claimdir::claim_dir(c, dir.owner()).map_err(|source| WorkloadError::Claim {
            group,
            claim: claim.to_string(),
            node: node.to_string(),
            source,
        })?;
    Ok(if read_only || c.read_only {
        made.read_only()
    } else {
        made
    })
}

/// Whether `path` is written only of what a mount path may hold here: absolute, letters,
/// digits, `/`, `.`, `_`, `-`, no `..` (a container runtime's options are joined with `:`
/// and `,`).
fn mount_path_words(path: &str) -> bool {
    path.starts_with('/')
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'))
        && !path.split('/').any(|c| c == "..")
}

/// Whether the agent mounts a pod's volume over `path` on this node, where the task's own
/// mount namespace is made as root (the translation comes from the client: this is
/// checked again here). Not under `/proc`, `/sys` or `/dev` (but `/dev/shm` itself),
/// nor over the job's own files; and a directory that exists, owned by root as is every
/// directory above it, each of those searchable by all and writable by root alone (or
/// sticky): no user can swap a part of the path for a link between this check and the
/// mount, and whether a directory exists where the user cannot look is not told.
fn node_mount_point(path: &str) -> bool {
    if !mount_path_words(path) {
        return false;
    }
    let p = Path::new(path);
    let reserved = ["/proc", "/sys", "/dev", NODE_HOSTS, MPI_DIR, VOLCANO_DIR];
    if path != "/dev/shm"
        && reserved
            .iter()
            .any(|r| p.starts_with(r) || Path::new(r).starts_with(p))
    {
        return false;
    }
    crate::claimdir::root_owned_dirs(p, false)
}

/// A memory-backed volume's size when its manifest gives none: the task's memory, as the
/// kubelet sizes it to the pod's.
fn task_memory(task: &cadre_core::alloc::TaskAlloc) -> Option<u64> {
    (task.mem_mib > 0).then(|| task.mem_mib.saturating_mul(1 << 20))
}

/// Subdirectory `name` of the run's directory, made on first use.
fn subdir<'a>(
    made: &'a mut BTreeMap<&'static str, RunDir>,
    dir: &RunDir,
    name: &'static str,
) -> Result<&'a RunDir, WorkloadError> {
    if !made.contains_key(name) {
        let sub = dir.subdir(name).map_err(|source| WorkloadError::Write {
            path: dir.path().join(name),
            source,
        })?;
        made.insert(name, sub);
    }
    made.get(name).ok_or_else(|| {
        WorkloadError::from(cadre_k8s::K8sError::Contract {
            what: format!("the run's directory {name} was not made"),
        })
    })
}

/// The hosts file of a job whose node names are not their hosts' names (the nodes of
/// `cadre up`, or a site whose `NodeName`s differ from its `NodeHostname`s): this node's
/// `/etc/hosts`, then each such node's name at its address, so that a script that takes
/// `MASTER_ADDR` from `scontrol show hostnames` reaches the right host. `None` when every
/// node's name is its address (names resolve as they always do). The caller writes it to
/// the run's directory and bind-mounts it over `/etc/hosts` (where the agent can,
/// [`TaskMounts::can_bind`]) and names it in `CADRE_HOSTS_FILE`.
pub fn node_hosts_text(order: &LaunchOrder) -> Result<Option<String>, WorkloadError> {
    let mut lines = String::new();
    for (id, name) in &order.node_names {
        let Some(address) = order.node_addresses.get(id).filter(|a| *a != name) else {
            continue;
        };
        let ip = resolve(address).map_err(|source| WorkloadError::Resolve {
            node: name.clone(),
            address: address.clone(),
            source,
        })?;
        lines.push_str(&format!("{ip}\t{name}\n"));
    }
    if lines.is_empty() {
        return Ok(None);
    }
    let mut hosts = node_hosts_lines();
    hosts.push_str("# the job's nodes (cadre)\n");
    hosts.push_str(&lines);
    Ok(Some(hosts))
}

/// This node's `/etc/hosts`, ending with a new line unless empty.
fn node_hosts_lines() -> String {
    let mut hosts = std::fs::read_to_string(NODE_HOSTS).unwrap_or_default();
    if !hosts.is_empty() && !hosts.ends_with('\n') {
        hosts.push('\n');
    }
    hosts
}

/// Where a job's hosts file goes in its tasks' mount namespace.
pub const HOSTS_TARGET: &str = NODE_HOSTS;

#[cfg(test)]
mod tests {
    use super::*;
    use cadre_core::alloc::TaskAlloc;
    use cadre_core::job::JobId;
    use cadre_k8s::{TranslateOptions, parse_documents, translate};
    use cadre_proto::agent::RunRef;

    const PYTORCH: &str = "apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: tj}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: p, command: [python3, train.py, '--rank=$(RANK)']}]
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: pytorch, image: p, command: [python3, train.py, '--rank=$(RANK)'], workingDir: /tmp}]
";

    const MPI: &str = "apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: pi}
spec:
  mpiReplicaSpecs:
    Launcher:
      template:
        spec:
          containers: [{name: l, image: m, command: [mpirun, -n, '2', /pi]}]
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: w, image: m, command: [/usr/sbin/sshd, -De]}]
";

    fn task(group: u16, rank: u32, node: u32) -> TaskAlloc {
        TaskAlloc {
            group,
            rank,
            node: NodeId(node),
            cores: vec![0],
            gpus: vec![],
            gpu_milli_each: 1000,
            nics: vec![],
            mem_mib: 0,
            named: vec![],
        }
    }

    fn order(t: &Translated) -> LaunchOrder {
        let (spec, run_spec) = cadre_k8s::submission(t).unwrap();
        LaunchOrder {
            run: RunRef::job_run(JobId(12345), 0),
            spec,
            partition: "p".into(),
            // Worker 1 listed before worker 0, on node 2 with the master.
            allocation: Allocation {
                tasks: vec![task(1, 1, 2), task(0, 0, 2), task(1, 0, 3)],
                exclusive: false,
            },
            node_names: [(NodeId(2), "n2".into()), (NodeId(3), "n3".into())].into(),
            node_addresses: [
                (NodeId(2), "10.0.0.2".into()),
                (NodeId(3), "127.0.0.1".into()),
            ]
            .into(),
            run_spec,
            time_limit_ms: None,
            step: None,
            job_token: None,
            claims: Vec::new(),
            host_paths: Vec::new(),
        }
    }

    /// A new run's directory at `path`, the agent's (no other user).
    fn fresh(path: &Path) -> RunDir {
        RunDir::create(path, None).expect("the run's directory")
    }

    /// The bind mounts as `(source, target)` paths.
    fn bind_paths(binds: &[(BindSource, PathBuf)]) -> Vec<(PathBuf, PathBuf)> {
        binds
            .iter()
            .map(|(s, at)| (s.path().to_path_buf(), at.clone()))
            .collect()
    }

    const HOST_NO_MOUNTS: NodeMeans<'static> = NodeMeans {
        mounts: TaskMounts::None,
        runtime: None,
        allowed_capabilities: &[],
        real_gpus: false,
        rsh: None,
    };

    fn translated() -> Translated {
        let o = TranslateOptions::new("alice", "research", "/home/alice");
        translate(&parse_documents(PYTORCH, "t").unwrap()[0], &o).unwrap()
    }

    #[test]
    fn tasks_are_placed_by_group_and_rank_with_resolved_addresses() {
        let t = translated();
        let o = order(&t);
        let p = placement(
            &t,
            &o.allocation,
            &o.node_names,
            &o.node_addresses,
            |_, a| Ok(format!("ip-of-{a}")),
        )
        .unwrap();
        let where_: Vec<Vec<(&str, &str)>> = p
            .tasks
            .iter()
            .map(|g| {
                g.iter()
                    .map(|t| (t.node.as_str(), t.address.as_str()))
                    .collect()
            })
            .collect();
        assert_eq!(
            where_,
            vec![
                vec![("n2", "ip-of-10.0.0.2")],
                vec![("n3", "ip-of-127.0.0.1"), ("n2", "ip-of-10.0.0.2")]
            ]
        );
        assert_eq!(resolve("10.1.2.3").unwrap().to_string(), "10.1.2.3");
        assert!(resolve("localhost").unwrap().is_loopback());
    }

    #[test]
    fn each_task_runs_its_ranks_program_with_its_contract() {
        let t = translated();
        let o = order(&t);
        let dir = tempfile::tempdir().unwrap();
        let run_dir = dir.path().join("job12345.0");
        // No mounts: no binds, files named by their place in the run's directory.
        let programs = prepare(&t, &o, NodeId(2), &fresh(&run_dir), HOST_NO_MOUNTS).unwrap();
        assert_eq!(programs.keys().copied().collect::<Vec<_>>(), vec![0, 1]);
        let master = &programs[&1];
        assert_eq!(master.command, ["python3", "train.py", "--rank=0"]);
        assert_eq!(master.work_dir, Path::new("/home/alice"));
        let env: BTreeMap<_, _> = master.env.iter().cloned().collect();
        assert_eq!(env["MASTER_ADDR"], "tj-master-0");
        assert_eq!(env["MASTER_PORT"], "22345");
        assert_eq!(env["WORLD_SIZE"], "3");
        assert_eq!(env["RANK"], "0");
        assert!(master.binds.is_empty());
        let hosts_path = run_dir.join("hosts");
        assert_eq!(env["CADRE_HOSTS_FILE"], hosts_path.display().to_string());
        let worker1 = &programs[&0];
        assert_eq!(worker1.command, ["python3", "train.py", "--rank=2"]);
        assert_eq!(worker1.work_dir, Path::new("/tmp"));
        let hosts = std::fs::read_to_string(&hosts_path).unwrap();
        let node_hosts = std::fs::read_to_string(NODE_HOSTS).unwrap_or_default();
        assert!(hosts.starts_with(&node_hosts), "{hosts}");
        assert!(
            hosts.contains(
                "10.0.0.2\ttj-master-0.default.svc.cluster.local tj-master-0 tj-master-0.default "
            ),
            "{hosts}"
        );
        assert!(
            hosts.contains("127.0.0.1\ttj-worker-0.default.svc.cluster.local tj-worker-0 "),
            "{hosts}"
        );
        assert!(
            hosts.contains("10.0.0.2\ttj-worker-1.default.svc.cluster.local tj-worker-1 "),
            "{hosts}"
        );
    }

    #[test]
    fn volumes_go_only_over_root_s_directories_that_no_user_can_swap() {
        for ok in ["/dev/shm", "/tmp", "/srv", "/mnt"] {
            if std::path::Path::new(ok).is_dir() {
                assert!(node_mount_point(ok), "{ok}");
            }
        }
        for refused in [
            "/",
            "/proc",
            "/proc/self",
            "/sys",
            "/dev",
            "/dev/pts",
            "/etc",
            "/etc/hosts",
            "/etc/mpi",
            "/srv/a:b",
            "/srv/a,b",
            "/srv/../proc",
            "relative",
            "/no/such/dir",
            "/root/x",
        ] {
            assert!(!node_mount_point(refused), "{refused}");
        }
        // A directory of a user's (which they could swap for a link) is refused.
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        std::os::unix::fs::chown(&mine, Some(65534), Some(65534)).unwrap();
        assert!(!node_mount_point(mine.to_str().unwrap()));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/tmp", &link).unwrap();
        assert!(!node_mount_point(link.to_str().unwrap()));
    }

    /// The MPIJob on the host, its order, and a directory for its run's.
    fn mpi_on_the_host() -> (Translated, LaunchOrder, tempfile::TempDir) {
        let o = TranslateOptions::new("alice", "research", "/home/alice");
        let t = translate(&parse_documents(MPI, "t").unwrap()[0], &o).unwrap();
        let o = order(&t);
        (t, o, tempfile::tempdir().unwrap())
    }

    #[test]
    fn an_mpi_launcher_gets_cadre_s_rsh_agent_and_sshd_workers_hold() {
        let (t, o, dir) = mpi_on_the_host();
        let run_dir = dir.path().join("job12345.0");
        let means = NodeMeans {
            rsh: Some(RshMeans {
                executable: Path::new("/usr/local/bin/cadre"),
                controller: "unix:///run/cadre/cadre.sock",
                token: "cadre-job-12345-00",
                libraries: None,
            }),
            ..HOST_NO_MOUNTS
        };
        // Node 2 has worker 1 and the launcher (task 1: group 0, rank 0).
        let programs = prepare(&t, &o, NodeId(2), &fresh(&run_dir), means).unwrap();
        let launcher = &programs[&1];
        assert!(!launcher.holds);
        let env: BTreeMap<_, _> = launcher.env.iter().cloned().collect();
        let agent = run_dir.join("mpi").join(RSH_AGENT);
        assert_eq!(env["OMPI_MCA_plm_rsh_agent"], agent.display().to_string());
        assert_eq!(env["CADRE_SERVER"], "unix:///run/cadre/cadre.sock");
        assert_eq!(env["CADRE_TOKEN"], "cadre-job-12345-00");
        assert_eq!(
            std::fs::read_link(&agent).unwrap(),
            Path::new("/usr/local/bin/cadre")
        );
        let worker = &programs[&0];
        assert!(worker.holds);
        assert_eq!(worker.command, ["/usr/sbin/sshd", "-De"]);
        assert!(!worker.env.iter().any(|(k, _)| k == "CADRE_SERVER"));
        // Without the agent, the launcher names none.
        let programs = prepare(&t, &o, NodeId(2), &fresh(&run_dir), HOST_NO_MOUNTS).unwrap();
        assert!(
            !programs[&1]
                .env
                .iter()
                .any(|(k, _)| k == "OMPI_MCA_plm_rsh_agent")
        );
    }

    #[test]
    fn in_a_user_namespace_the_hosts_file_is_mounted_and_mpi_files_where_etc_mpi_is() {
        let (t, o, dir) = mpi_on_the_host();
        let run_dir = dir.path().join("job12345.0");
        let means = NodeMeans {
            mounts: TaskMounts::UserNamespace,
            ..HOST_NO_MOUNTS
        };
        let programs = prepare(&t, &o, NodeId(2), &fresh(&run_dir), means).unwrap();
        let launcher = &programs[&1];
        let env: BTreeMap<_, _> = launcher.env.iter().cloned().collect();
        assert!(!env.contains_key("CADRE_HOSTS_FILE"), "{env:?}");
        let binds = bind_paths(&launcher.binds);
        assert!(
            binds.contains(&(run_dir.join("hosts"), PathBuf::from(NODE_HOSTS))),
            "{binds:?}"
        );
        // An agent that is not root cannot create `/etc/mpi`: where the node has none, the
        // files are named in the run's directory.
        let etc_mpi = Path::new(MPI_DIR).is_dir();
        let mpi_bind = (run_dir.join("mpi"), PathBuf::from(MPI_DIR));
        assert_eq!(binds.contains(&mpi_bind), etc_mpi);
        let hostfile = if etc_mpi {
            format!("{MPI_DIR}/hostfile")
        } else {
            run_dir.join("mpi/hostfile").display().to_string()
        };
        assert_eq!(env["OMPI_MCA_orte_default_hostfile"], hostfile);
    }

    #[test]
    fn in_images_the_launcher_gets_the_node_s_cadre_and_sshd_workers_wait() {
        let mut o = TranslateOptions::new("alice", "research", "/home/alice");
        o.container_runtime = true;
        let t = translate(&parse_documents(MPI, "t").unwrap()[0], &o).unwrap();
        let o = order(&t);
        let dir = tempfile::tempdir().unwrap();
        let run_dir = dir.path().join("job12345.0");
        let runtime = ContainerRuntime::detect("sh -c 'echo podman version 4' sh").unwrap();
        let libraries = (
            PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            vec![PathBuf::from("/usr/lib/libc.so.6")],
        );
        let means = NodeMeans {
            runtime: Some(&runtime),
            rsh: Some(RshMeans {
                executable: Path::new("/usr/local/bin/cadre"),
                controller: "unix:///run/cadre/cadre.sock",
                token: "cadre-job-12345-00",
                libraries: Some(&libraries),
            }),
            ..HOST_NO_MOUNTS
        };
        let programs = prepare(&t, &o, NodeId(2), &fresh(&run_dir), means).unwrap();
        let launcher = programs[&1].container.as_ref().unwrap();
        for (from, at) in [
            ("/usr/local/bin/cadre", "/.cadre/cadre"),
            (
                "/lib64/ld-linux-x86-64.so.2",
                "/.cadre/lib/ld-linux-x86-64.so.2",
            ),
            ("/usr/lib/libc.so.6", "/.cadre/lib/libc.so.6"),
            ("/run/cadre/cadre.sock", "/run/cadre/cadre.sock"),
        ] {
            assert!(
                launcher
                    .mounts
                    .contains(&(PathBuf::from(from), at.to_string())),
                "{from}: {:?}",
                launcher.mounts
            );
        }
        let env: BTreeMap<_, _> = programs[&1].env.iter().cloned().collect();
        assert_eq!(env["OMPI_MCA_plm_rsh_agent"], "/etc/mpi/cadre-rsh");
        assert_eq!(env["CADRE_TOKEN"], "cadre-job-12345-00");
        let script = std::fs::read_to_string(run_dir.join("mpi").join(RSH_AGENT)).unwrap();
        assert!(
            script.ends_with(
                "exec /.cadre/lib/ld-linux-x86-64.so.2 --library-path /.cadre/lib /.cadre/cadre rsh \"$@\"\n"
            ),
            "{script}"
        );
        // The worker's container waits instead of running sshd; it has cadre-rsh too, which
        // OpenMPI's daemons look for.
        let worker = programs[&0].container.as_ref().unwrap();
        assert_eq!(
            worker.command.as_deref(),
            Some(&["/bin/sh".to_string(), "-c".into(), WAIT_FOR_EXEC.into()][..])
        );
        assert!(worker.args.is_empty());
        assert!(
            worker
                .mounts
                .contains(&(run_dir.join("mpi"), MPI_DIR.to_string()))
        );
        assert!(worker.mounts.iter().any(|(_, at)| at == "/.cadre/cadre"));
    }

    #[test]
    fn a_container_gets_back_only_capabilities_its_node_allows() {
        let mut o = TranslateOptions::new("alice", "research", "/home/alice");
        o.container_runtime = true;
        let mut t = translate(&parse_documents(PYTORCH, "t").unwrap()[0], &o).unwrap();
        t.groups[1].capabilities = vec!["IPC_LOCK".into()];
        let o = order(&t);
        let dir = tempfile::tempdir().unwrap();
        let run_dir = dir.path().join("job12345.0");
        let runtime = ContainerRuntime::detect("sh -c 'echo podman version 4' sh").unwrap();
        let means = NodeMeans {
            runtime: Some(&runtime),
            ..HOST_NO_MOUNTS
        };
        let err = prepare(&t, &o, NodeId(2), &fresh(&run_dir), means).unwrap_err();
        assert!(err.is_permanent());
        assert_eq!(
            err.to_string(),
            "task group 1 asks for capability IPC_LOCK (securityContext.capabilities.add), \
             which node n2 does not allow: its agent allows none (--container-allowed-capabilities)"
        );
        let allowed = ["SYS_NICE".to_string(), "IPC_LOCK".to_string()];
        let means = NodeMeans {
            allowed_capabilities: &allowed,
            ..means
        };
        let programs = prepare(&t, &o, NodeId(2), &fresh(&run_dir), means).unwrap();
        // Task 0 is a worker (group 1), task 1 the master (group 0), which asks for none.
        let caps = |i: usize| {
            programs[&i]
                .container
                .as_ref()
                .unwrap()
                .capabilities
                .clone()
        };
        assert_eq!(caps(0), ["IPC_LOCK"]);
        assert!(caps(1).is_empty());
    }

    #[test]
    fn an_allocation_that_does_not_fit_the_job_is_refused_for_good() {
        let t = translated();
        let mut o = order(&t);
        o.allocation.tasks.push(task(5, 0, 2));
        let dir = tempfile::tempdir().unwrap();
        let err = prepare(&t, &o, NodeId(2), &fresh(dir.path()), HOST_NO_MOUNTS).unwrap_err();
        assert!(err.is_permanent());
        assert_eq!(
            err.to_string(),
            "the allocation places a task of group 5; the job has 2 groups"
        );
    }
}
