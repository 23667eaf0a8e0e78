//! Starting one task of a job on this node.
//!
//! Given a [`JobLaunch`], this node ([`LocalNode`]), the position of the task in the
//! allocation and the account to run it as ([`RunAs`]), [`launch_task`] forks and execs the
//! command with:
//! - the environment of [`crate::jobenv::task_environment`] and nothing else;
//! - stdin from `/dev/null`, stdout and stderr to the files of the job's patterns, opened
//!   by the task itself after it has become the user (so the files belong to the user, and
//!   a user cannot have the agent write where they may not);
//! - its own process group (signals reach the whole task, not the agent);
//! - its working directory, entered by the child once it has the user's identity: a root
//!   agent does not look at it first, since "does not exist" against "cannot enter" would
//!   tell a user whether a path they cannot reach exists;
//! - its CPU affinity set to exactly the allocated cores;
//! - its cgroup, when the node has a cgroup parent ([`crate::cgroup`]);
//! - the user's uid, primary gid and supplementary groups when the agent is root;
//! - the job's files (hosts, MPI, Volcano) mounted over the node's in a mount namespace of
//!   its own when the job has any ([`crate::mountns`]: in a user namespace of its own when
//!   the agent is not root).
//!
//! A container task's runtime runs as the agent: a root agent first checks, as the user
//! (a child process with the user's ids and groups), that the user could read an image
//! the runtime would read from the node's files (`oci-archive:PATH`, ...), and refuses
//! images of the node's other stores ([`container::ImageSource`]).
//!
//! Who a task may run as: an agent running as root runs each task as its submitter and
//! refuses to run as root a task whose submitter is not `root`; an agent that is not root
//! cannot switch users, so it runs tasks as itself and refuses anyone else's. The
//! submitter named by the job spec must be the account given.
//!
//! Everything the child does between fork and exec is prepared in the parent (paths as C
//! strings, the CPU set, the group list, open file descriptors) so that the child only
//! makes system calls; see the soundness note in `launch_task_with`. When one of those steps fails,
//! the child writes which one to a close-on-exec pipe before it exits, so the error says
//! what failed ("cannot open output file ... as uid 65534") rather than a bare errno.

use crate::cgroup::TaskCgroup;
use crate::container;
use crate::fork::fork_guard;
use crate::jobenv::{self, JobLaunch, LocalNode, OpenMode, TaskPlace};
pub use crate::launch_error::LaunchError;
use crate::pattern::{self, expand_output_path};
pub use crate::run_as::RunAs;
use crate::supervise::{Limits, RunningTask, TaskFiles};
use cadre_core::job::JobId;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sched::CpuSet;
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid};
use std::ffi::{CString, OsStr};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Whether and how the child changes its identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UserSwitch {
    uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
}

/// Decides who the task runs as, given the agent's effective uid.
fn decide_user(
    job: &JobLaunch,
    run_as: &RunAs,
    agent_uid: u32,
) -> Result<Option<(u32, u32)>, LaunchError> {
    if run_as.name != job.spec.user {
        return Err(LaunchError::UserMismatch {
            job: job.id,
            submitter: job.spec.user.clone(),
            user: run_as.name.clone(),
        });
    }
    if agent_uid == 0 {
        if run_as.uid == 0 {
            if run_as.name != "root" {
                return Err(LaunchError::RefuseRoot {
                    job: job.id,
                    user: run_as.name.clone(),
                });
            }
            return Ok(None);
        }
        return Ok(Some((run_as.uid, run_as.gid)));
    }
    if run_as.uid != agent_uid {
        return Err(LaunchError::CannotSwitchUser {
            job: job.id,
            user: run_as.name.clone(),
            uid: run_as.uid,
            agent_uid,
        });
    }
    Ok(None)
}

fn user_switch(job: &JobLaunch, run_as: &RunAs) -> Result<Option<UserSwitch>, LaunchError> {
    let Some((uid, gid)) = decide_user(job, run_as, nix::unistd::geteuid().as_raw())? else {
        return Ok(None);
    };
    let name = cstring(job.id, "user name", run_as.name.as_bytes())?;
    let gid = Gid::from_raw(gid);
    let groups =
        nix::unistd::getgrouplist(&name, gid).map_err(|source| LaunchError::UserLookup {
            user: run_as.name.clone(),
            source,
        })?;
    Ok(Some(UserSwitch {
        uid: Uid::from_raw(uid),
        gid,
        groups,
    }))
}

/// The switch of a task whose pod's `securityContext` gives identity fields, checked
/// against who the task is (`switch`, else the agent itself): `runAsNonRoot` refuses root,
/// `fsGroup` and `supplementalGroups` must be the user's groups, and `runAsGroup` becomes
/// the task's group where the user is in it (root is in every group). `runAsUser` changes
/// nothing: no manifest makes the user another.
fn with_identity(
    job: &JobLaunch,
    id: &cadre_k8s::PodIdentity,
    switch: Option<UserSwitch>,
) -> Result<Option<UserSwitch>, LaunchError> {
    let refuse = |field: &'static str, why: String| LaunchError::Identity {
        job: job.id,
        field,
        why,
    };
    let me = match &switch {
        Some(s) => s.clone(),
        None => UserSwitch {
            uid: nix::unistd::geteuid(),
            gid: nix::unistd::getegid(),
            groups: nix::unistd::getgroups().map_err(|source| LaunchError::UserLookup {
                user: job.spec.user.clone(),
                source,
            })?,
        },
    };
    let root = me.uid.is_root();
    let member = |g: u32| root || me.gid.as_raw() == g || me.groups.iter().any(|x| x.as_raw() == g);
    if id.run_as_non_root && root {
        return Err(refuse("runAsNonRoot", "the job's user is root".to_string()));
    }
    let not_in = |g: u32| format!("`{}` is not in group {g} on this node", job.spec.user);
    if let Some(g) = id.fs_group.filter(|g| !member(*g)) {
        return Err(refuse("fsGroup", not_in(g)));
    }
    if let Some(g) = id.supplemental_groups.iter().copied().find(|g| !member(*g)) {
        return Err(refuse("supplementalGroups", not_in(g)));
    }
    let Some(g) = id.run_as_group.filter(|g| *g != me.gid.as_raw()) else {
        return Ok(switch);
    };
    if !member(g) {
        return Err(refuse("runAsGroup", not_in(g)));
    }
    if switch.is_none() && !nix::unistd::geteuid().is_root() {
        return Err(refuse(
            "runAsGroup",
            format!(
                "the agent is not root and cannot give a task group {g} (its own group is {})",
                me.gid
            ),
        ));
    }
    Ok(Some(UserSwitch {
        gid: Gid::from_raw(g),
        ..me
    }))
}

fn cstring(job: JobId, what: &'static str, bytes: &[u8]) -> Result<CString, LaunchError> {
    CString::new(bytes).map_err(|_| LaunchError::NulByte {
        job,
        what,
        value: String::from_utf8_lossy(bytes).into_owned(),
    })
}

/// The steps the child takes before exec, in order; the byte it reports on failure.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
enum ChildStep {
    Cgroup = 1,
    Affinity = 2,
    Groups = 3,
    Gid = 4,
    Uid = 5,
    Chdir = 6,
    Stdout = 7,
    Stderr = 8,
    Namespace = 9,
    Bind = 10,
    Inherit = 11,
    Keeper = 12,
}

impl ChildStep {
    fn from_byte(b: u8) -> Option<ChildStep> {
        use ChildStep::*;
        [
            Cgroup, Affinity, Namespace, Bind, Groups, Gid, Uid, Chdir, Stdout, Stderr, Inherit,
            Keeper,
        ]
        .into_iter()
        .find(|s| *s as u8 == b)
    }
}

/// One bind mount of the child's: the file or directory the agent made (`made`, at
/// `path`) over `at`.
struct ChildBind {
    path: CString,
    made: crate::rundir::BindSource,
    at: CString,
    read_only: bool,
}

/// Everything the child needs between fork and exec, prepared by the parent.
struct ChildPlan {
    cgroup_procs: Option<OwnedFd>,
    /// The task's keeper, forked off right after the cgroup is joined ([`crate::keeper`]).
    keeper: Option<crate::keeper::KeeperPlan>,
    cpus: Option<CpuSet>,
    /// Bind mounts made in a mount namespace of the task's own; none: the task shares the
    /// agent's.
    binds: Vec<ChildBind>,
    /// With `binds`, for an agent that is not root: the mount namespace is made in a user
    /// namespace of the task's own, its ids mapped to themselves ([`crate::mountns`]).
    user_ns: Option<crate::mountns::UserMaps>,
    /// With `binds`: the task's host name, in a UTS namespace of its own (a pod's).
    hostname: Option<CString>,
    /// With `binds`: private tmpfs mounts, `(where, mount options)`.
    tmpfs: Vec<(CString, CString)>,
    /// `PR_SET_NO_NEW_PRIVS` before exec.
    no_new_privs: bool,
    switch: Option<UserSwitch>,
    /// With `switch`: the child keeps the agent's identity and takes the user's only for
    /// the file system (working directory, output files), then gives it back: a container
    /// task's runtime runs as the agent. The agent's ids and groups to return to.
    files_only: Option<(Uid, Gid, Vec<Gid>)>,
    work_dir: CString,
    /// The output goes to pipes the parent reads (set up by `Command`): no files.
    relay: bool,
    stdout: CString,
    /// `None`: stderr goes to the stdout file.
    stderr: Option<CString>,
    /// Open flags for the stdout and stderr files.
    stdout_flags: OFlag,
    stderr_flags: OFlag,
    /// Write end of the step-report pipe.
    report: OwnedFd,
    /// Where the child passes its output files, opened again for reading as the user
    /// ([`crate::output`]); `None`: nowhere (relayed output, or no socket pair).
    readers: Option<OwnedFd>,
    /// What the task prolog prints, written to the task's standard output first.
    preamble: Vec<u8>,
    /// A descriptor the program inherits (the container's environment file): close-on-exec
    /// in the agent, so that no other task inherits it, and cleared in the child.
    inherit: Option<OwnedFd>,
}

impl ChildPlan {
    /// Runs in the child after fork: system calls only, no allocation, no locks.
    fn run(&self) -> io::Result<()> {
        let fail = |step: ChildStep, e: Errno| -> io::Error {
            // Nothing useful can be done if the report cannot be written: the errno still
            // reaches the parent through std's own pipe.
            let _ = nix::unistd::write(&self.report, &[step as u8]);
            io::Error::from_raw_os_error(e as i32)
        };
        if let Some(k) = &self.keeper {
            // Returns in the task's process only; the keeper stays behind as its parent,
            // outside the task's cgroup (which its fencing kills, and whose memory limit
            // and freezing are the task's).
            k.split().map_err(|e| fail(ChildStep::Keeper, e))?;
        }
        if let Some(fd) = &self.cgroup_procs {
            // "0" moves the writing process itself.
            nix::unistd::write(fd, b"0").map_err(|e| fail(ChildStep::Cgroup, e))?;
        }
        if let Some(cpus) = &self.cpus {
            nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), cpus)
                .map_err(|e| fail(ChildStep::Affinity, e))?;
        }
        if !self.binds.is_empty() {
            // A mount namespace of the task's own, private so that nothing mounted in it
            // propagates back to the node; then the job's files over the node's.
            crate::mountns::enter(self.user_ns.as_ref(), self.hostname.as_deref())
                .map_err(|e| fail(ChildStep::Namespace, e))?;
            for b in &self.binds {
                crate::mountns::bind_made(&b.path, b.made.fd(), &b.at)
                    .map_err(|e| fail(ChildStep::Bind, e))?;
                if b.read_only {
                    crate::mountns::read_only(&b.at).map_err(|e| fail(ChildStep::Bind, e))?;
                }
            }
            for (at, options) in &self.tmpfs {
                crate::mountns::tmpfs(at, options).map_err(|e| fail(ChildStep::Bind, e))?;
            }
        }
        if self.no_new_privs {
            // SAFETY: a system call with constant arguments.
            if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
                return Err(fail(ChildStep::Namespace, Errno::last()));
            }
        }
        if let Some(s) = &self.switch {
            nix::unistd::setgroups(&s.groups).map_err(|e| fail(ChildStep::Groups, e))?;
            if self.files_only.is_some() {
                // Cannot fail for root; the opens below would tell if it did.
                nix::unistd::setfsgid(s.gid);
                nix::unistd::setfsuid(s.uid);
            } else {
                nix::unistd::setgid(s.gid).map_err(|e| fail(ChildStep::Gid, e))?;
                nix::unistd::setuid(s.uid).map_err(|e| fail(ChildStep::Uid, e))?;
            }
        }
        nix::unistd::chdir(self.work_dir.as_c_str()).map_err(|e| fail(ChildStep::Chdir, e))?;
        if !self.relay {
            let mode = Mode::from_bits_truncate(0o644);
            let out = nix::fcntl::open(self.stdout.as_c_str(), self.stdout_flags, mode)
                .map_err(|e| fail(ChildStep::Stdout, e))?;
            nix::unistd::dup2_stdout(&out).map_err(|e| fail(ChildStep::Stdout, e))?;
            if let Some(channel) = &self.readers {
                crate::output::pass_reader(channel, &out, self.stdout.as_c_str(), false);
            }
            match &self.stderr {
                None => nix::unistd::dup2_stderr(&out).map_err(|e| fail(ChildStep::Stderr, e))?,
                Some(path) => {
                    let err = nix::fcntl::open(path.as_c_str(), self.stderr_flags, mode)
                        .map_err(|e| fail(ChildStep::Stderr, e))?;
                    nix::unistd::dup2_stderr(&err).map_err(|e| fail(ChildStep::Stderr, e))?;
                    if let Some(channel) = &self.readers {
                        crate::output::pass_reader(channel, &err, path.as_c_str(), true);
                    }
                }
            }
        }
        let mut rest = self.preamble.as_slice();
        while !rest.is_empty() {
            // SAFETY: standard output, set up above (or by `Command` when relayed).
            let out = unsafe { std::os::fd::BorrowedFd::borrow_raw(1) };
            match nix::unistd::write(out, rest) {
                Ok(0) => break,
                Ok(n) => rest = &rest[n..],
                Err(Errno::EINTR) => {}
                Err(e) => return Err(fail(ChildStep::Stdout, e)),
            }
        }
        if let Some((uid, gid, groups)) = &self.files_only {
            nix::unistd::setfsuid(*uid);
            nix::unistd::setfsgid(*gid);
            nix::unistd::setgroups(groups).map_err(|e| fail(ChildStep::Groups, e))?;
        }
        if let Some(fd) = &self.inherit {
            nix::fcntl::fcntl(
                fd,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
            )
            .map_err(|e| fail(ChildStep::Inherit, e))?;
        }
        Ok(())
    }
}

/// Refuses, for a job not run as root, an image that the root runtime would read from the
/// node's files or from another store of the node. Not only could the runtime read, with
/// root's rights, a path the user cannot (and a path checked first could be swapped for a
/// link before the runtime opens it, and a directory layout holds links the runtime
/// follows): the runtime loads an image read from files into the node's shared image store
/// under the names the files give it, where it would take the place of an image other
/// users' jobs run (`imagePullPolicy: IfNotPresent`).
fn check_image(job: &JobLaunch, image: &str) -> Result<(), LaunchError> {
    let transport = match container::image_source(image) {
        container::ImageSource::Store => return Ok(()),
        container::ImageSource::NodeStore { transport }
        | container::ImageSource::Paths { transport, .. } => transport,
    };
    Err(LaunchError::ImageTransport {
        job: job.id,
        image: image.to_string(),
        transport,
    })
}

/// A close-on-exec memory file holding `text`, at a descriptor above the standard ones
/// (which the child's own stdin, stdout and stderr replace). Nothing is on disk; only
/// processes given the descriptor, and root, can read it.
fn memory_file(text: &str) -> Result<OwnedFd, Errno> {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let mut fd = memfd_create(c"cadre-container-env", MFdFlags::MFD_CLOEXEC)?;
    if fd.as_raw_fd() <= 2 {
        let raw = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))?;
        // SAFETY: `raw` was just returned by F_DUPFD_CLOEXEC: an open descriptor that
        // nothing else owns.
        fd = unsafe { OwnedFd::from_raw_fd(raw) };
    }
    let mut rest = text.as_bytes();
    while !rest.is_empty() {
        match nix::unistd::write(&fd, rest) {
            Ok(0) => return Err(Errno::EIO),
            Ok(n) => rest = &rest[n..],
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(fd)
}

fn open_flags(mode: OpenMode) -> OFlag {
    // O_APPEND even when truncating: tasks sharing one file must not overwrite each other.
    let base = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_APPEND | OFlag::O_CLOEXEC;
    match mode {
        OpenMode::Append => base,
        OpenMode::Truncate => base | OFlag::O_TRUNC,
    }
}

/// The stdout and stderr paths of a task (stderr `None`: into the stdout file).
pub fn output_paths(
    job: &JobLaunch,
    node: &LocalNode,
    place: &TaskPlace,
) -> (PathBuf, Option<PathBuf>) {
    let values = jobenv::pattern_values(job, node, place);
    let out_pattern = job
        .stdout
        .as_deref()
        .unwrap_or(pattern::default_output_pattern(job.spec.array.is_some()));
    let work_dir = job.work_dir_of(place.index);
    let stdout = expand_output_path(out_pattern, &values, work_dir);
    let stderr = job
        .stderr
        .as_deref()
        .map(|p| expand_output_path(p, &values, work_dir))
        .filter(|p| *p != stdout);
    (stdout, stderr)
}

/// Starts task `index` of the job's allocation on this node, as `run_as`.
pub fn launch_task(
    job: &JobLaunch,
    node: &LocalNode,
    index: usize,
    run_as: &RunAs,
) -> Result<RunningTask, LaunchError> {
    launch_task_with(job, node, index, run_as, (job.open_mode, job.open_mode))
}

/// [`launch_task`] with the open modes of the stdout and stderr files given (the gang
/// truncates a file shared by several tasks only once).
pub(crate) fn launch_task_with(
    job: &JobLaunch,
    node: &LocalNode,
    index: usize,
    run_as: &RunAs,
    open_modes: (OpenMode, OpenMode),
) -> Result<RunningTask, LaunchError> {
    let mut env = jobenv::task_environment(job, node, index, run_as)?;
    // A pod's host name: a Kubernetes task's own, or a step's that `cadre rsh` started in
    // a pod (which says it in `HOSTNAME` too, not its launcher's).
    let own_hostname: Option<&str> = match job.programs.get(&index) {
        Some(p) => p.hostname.as_deref(),
        None => job.hostname.as_deref(),
    };
    if let (None, Some(h)) = (job.programs.get(&index), own_hostname) {
        env.insert("HOSTNAME".into(), h.to_string());
    }
    let task = &job.allocation.tasks[index];
    let place = jobenv::task_place(&job.allocation, index).ok_or(LaunchError::NoSuchTask {
        job: job.id,
        index,
        tasks: job.allocation.tasks.len(),
    })?;
    let switch = match job.programs.get(&index) {
        Some(p) if !p.identity.is_empty() => {
            with_identity(job, &p.identity, user_switch(job, run_as)?)?
        }
        _ => user_switch(job, run_as)?,
    };
    let ids: crate::prolog::Ids = switch.as_ref().map(|s| {
        (
            s.uid.as_raw(),
            s.gid.as_raw(),
            s.groups.iter().map(|g| g.as_raw()).collect(),
        )
    });
    // The site's task prolog, as the user, changes the task's environment and writes first
    // to its output (see `crate::prolog::TaskScripts`); it and the task epilog run in
    // cgroups of their own beside the task's.
    let program_cgroup = |what: &str| {
        node.cgroup_parent.as_ref().map(|p| {
            p.join(format!(
                "{}.{what}",
                crate::keeper::status_name(
                    job.id.0,
                    job.run,
                    job.step.as_ref().map(|s| s.id),
                    place.procid
                )
            ))
        })
    };
    let preamble = match &node.task_scripts.prolog {
        Some(program) => {
            let ran = crate::prolog::run_task_program(
                program,
                "prolog_task",
                &ids,
                &env,
                node.task_scripts.timeout,
                program_cgroup("prolog").as_deref(),
            )
            .map_err(|source| LaunchError::TaskProlog {
                job: job.id,
                procid: place.procid,
                source: Box::new(source),
            })?;
            let says = crate::prolog::TaskPrologSays::parse(&ran.stdout);
            says.apply(&mut env);
            says.print.into_bytes()
        }
        None => Vec::new(),
    };
    let task_epilog =
        node.task_scripts
            .epilog
            .as_ref()
            .map(|program| crate::prolog::TaskEpilogRun {
                program: program.clone(),
                ids: ids.clone(),
                env: env.clone(),
                timeout: node.task_scripts.timeout,
                cgroup: program_cgroup("epilog"),
            });
    let container = job.programs.get(&index).and_then(|p| p.container.as_ref());
    // The runtime is the task's process: in a container of its own, or in another's.
    let in_runtime = container.is_some() || job.exec_in.is_some();
    let path_c = |what, p: &Path| cstring(job.id, what, p.as_os_str().as_bytes());
    if container.is_none() && job.command_of(index).is_empty() {
        return Err(LaunchError::EmptyCommand { job: job.id });
    }
    let work_dir = job.work_dir_of(index);
    if let (Some(spec), Some(_)) = (container, &switch) {
        check_image(job, &spec.image)?;
    }
    // A task that becomes another user enters its working directory as that user (the
    // child's chdir, `ChildStep::Chdir`): looked at first by a root agent, a directory the
    // user cannot reach would say whether it exists.
    if switch.is_none() && !work_dir.is_dir() {
        return Err(LaunchError::NoWorkDir {
            job: job.id,
            dir: work_dir.to_path_buf(),
        });
    }
    // Each source with the descriptor the agent opened it with when it made it (open in
    // the child until it execs): the mount is of what the agent made.
    let binds = match job.programs.get(&index) {
        Some(p) => &p.binds,
        None => &job.binds,
    }
    .iter()
    .map(|(what, at)| {
        Ok(ChildBind {
            path: path_c("bind mount source", what.path())?,
            made: what.clone(),
            at: path_c("bind mount target", at)?,
            read_only: what.is_read_only(),
        })
    })
    .collect::<Result<Vec<_>, LaunchError>>()?;
    let mut cpus = jobenv::os_cpus(job.id, node, task)?;
    // The batch step has every core and all the memory of the job on its node.
    let mut mem_mib = task.mem_mib;
    if job.batch {
        for i in jobenv::tasks_on_node(&job.allocation, node.id) {
            if i != index {
                let other = &job.allocation.tasks[i];
                cpus.extend(jobenv::os_cpus(job.id, node, other)?);
                mem_mib += other.mem_mib;
            }
        }
        cpus.sort_unstable();
        cpus.dedup();
    }
    let cpus = if cpus.is_empty() {
        None
    } else {
        let mut set = CpuSet::new();
        for &c in &cpus {
            set.set(c as usize)
                .map_err(|_| LaunchError::CoreOutOfRange {
                    job: job.id,
                    core: c,
                    cores: CpuSet::count(),
                })?;
        }
        Some(set)
    };
    let (stdout, stderr) = output_paths(job, node, &place);
    // The container's variables, in a memory file the runtime inherits (never on its
    // command line: see `crate::container`).
    let mut env_file: Option<OwnedFd> = None;
    let argv: Vec<String> = match container {
        Some(spec) => {
            use nix::sys::resource::Resource;
            let settings = container::TaskSettings {
                env: env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                user: nix::unistd::geteuid().is_root().then(|| {
                    switch.as_ref().map_or((run_as.uid, run_as.gid), |s| {
                        (s.uid.as_raw(), s.gid.as_raw())
                    })
                }),
                mem_mib,
                gpus: jobenv::gpu_indices(job.id, node, task)?,
                nofile: container::own_limit(Resource::RLIMIT_NOFILE, None),
                nproc: container::own_limit(Resource::RLIMIT_NPROC, container::pid_max()),
            };
            let text = container::env_file(spec, &settings).map_err(|source| {
                LaunchError::ContainerEnv {
                    job: job.id,
                    source,
                }
            })?;
            let fd = memory_file(&text).map_err(|source| LaunchError::EnvFile {
                job: job.id,
                source,
            })?;
            let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
            env_file = Some(fd);
            container::run_command(spec, &settings, &path)
        }
        None => match &job.exec_in {
            Some(exec) => container::exec_command(exec, job.command_of(index)),
            None => job.command_of(index).to_vec(),
        },
    };
    let Some((program, args)) = argv.split_first() else {
        return Err(LaunchError::EmptyCommand { job: job.id });
    };
    let files_only = match (in_runtime, &switch) {
        (true, Some(_)) => Some((
            nix::unistd::geteuid(),
            nix::unistd::getegid(),
            nix::unistd::getgroups().map_err(|source| LaunchError::UserLookup {
                user: "the agent's own groups".into(),
                source,
            })?,
        )),
        _ => None,
    };

    let cgroup = match &node.cgroup_parent {
        Some(parent) => Some(
            TaskCgroup::create(
                parent,
                job.id,
                job.run,
                job.step.as_ref().map(|s| s.id),
                place.procid,
                mem_mib,
            )
            .map_err(|source| LaunchError::Cgroup {
                job: job.id,
                source,
            })?,
        ),
        None => None,
    };
    let cgroup_procs = match &cgroup {
        Some(cg) => Some(cg.procs_fd().map_err(|source| LaunchError::Cgroup {
            job: job.id,
            source,
        })?),
        None => None,
    };
    let keeper_err = |source: io::Error| LaunchError::Keeper {
        job: job.id,
        source,
    };
    let (status, keeper) = match &node.keepers {
        Some(k) => {
            let name = crate::keeper::status_name(
                job.id.0,
                job.run,
                job.step.as_ref().map(|s| s.id),
                place.procid,
            );
            let status = crate::keeper::StatusFile::create(&k.dir, &name).map_err(keeper_err)?;
            let plan = crate::keeper::KeeperPlan {
                status: status.fd().map_err(keeper_err)?,
                lease: k.lease.fd().map_err(keeper_err)?,
                // Without `cgroup.kill` (before Linux 5.14) the keeper kills the task's
                // process alone.
                kill: cgroup
                    .as_ref()
                    .and_then(|cg| cg.kill_fd().ok())
                    .and_then(|fd| crate::keeper::above_stdio(fd).ok()),
            };
            (Some(status), Some(plan))
        }
        None => (None, None),
    };
    let (report_read, report_write) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|source| LaunchError::Pipe {
            job: job.id,
            source,
        })?;
    // A socket pair that cannot be made costs only the following of this task's output.
    let channel = if job.relay {
        None
    } else {
        crate::output::ReaderChannel::new()
            .inspect_err(
                |e| tracing::warn!(error = %e, "no socket pair for the task's output readers"),
            )
            .ok()
    };
    let (readers_in, readers_out) = match channel {
        Some(c) => (Some(c.receive), Some(c.send)),
        None => (None, None),
    };
    let plan = ChildPlan {
        cgroup_procs,
        keeper,
        cpus,
        switch: switch.clone(),
        files_only,
        user_ns: (!binds.is_empty() && !nix::unistd::geteuid().is_root())
            .then(crate::mountns::UserMaps::own),
        tmpfs: match (binds.is_empty(), job.programs.get(&index)) {
            (true, _) => Vec::new(),
            (false, p) => p
                .map_or(&job.tmpfs, |p| &p.tmpfs)
                .iter()
                .map(|(at, size)| {
                    let options = match size {
                        Some(n) => format!("size={n},mode=1777"),
                        None => "mode=1777".to_string(),
                    };
                    Ok((
                        path_c("tmpfs mount point", at)?,
                        cstring(job.id, "tmpfs options", options.as_bytes())?,
                    ))
                })
                .collect::<Result<Vec<_>, LaunchError>>()?,
        },
        // A task in namespaces cadre made (its own files over the node's, its pod's host
        // name) gains no privileges: a set-user-id program (sudo) would believe them.
        no_new_privs: !binds.is_empty()
            || job
                .programs
                .get(&index)
                .map_or(job.no_new_privs, |p| p.no_new_privs),
        hostname: match (binds.is_empty(), own_hostname) {
            (false, Some(h)) => Some(cstring(job.id, "host name", h.as_bytes())?),
            _ => None,
        },
        binds,
        work_dir: path_c("working directory", work_dir)?,
        relay: job.relay,
        stdout: path_c("output file", &stdout)?,
        stderr: stderr
            .as_deref()
            .map(|p| path_c("error file", p))
            .transpose()?,
        stdout_flags: open_flags(open_modes.0),
        stderr_flags: open_flags(open_modes.1),
        report: report_write,
        readers: readers_out,
        preamble,
        inherit: env_file,
    };

    let mut cmd = Command::new(OsStr::new(program));
    cmd.args(args);
    if !in_runtime {
        // A container's runtime keeps the agent's environment (see `crate::container`).
        cmd.env_clear().envs(&env);
    }
    cmd.stdin(Stdio::null())
        .stdout(if job.relay {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(if job.relay {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .process_group(0);
    // SAFETY: `pre_exec` runs the closure in the child between fork and exec, where only
    // async-signal-safe operations are allowed (the parent may have other threads holding
    // locks, e.g. the allocator's). `ChildPlan::run` only reads data prepared before the
    // fork (C strings, a CpuSet, a group list, a user namespace's id maps, file
    // descriptors) and makes direct system calls through nix and libc (write,
    // sched_setaffinity, unshare, sethostname, mount (binds and tmpfs), prctl, open and write of `/proc/self`'s id
    // maps, setgroups, setgid, setuid, chdir, open, fstat, dup2, sendmsg of a descriptor
    // from stack buffers, fcntl(F_SETFD), close on drop of the opened descriptors); none of them
    // allocates or takes a lock: nix passes `&CStr` paths (and `None` for absent mount
    // arguments) straight through and `io::Error::from_raw_os_error`
    // does not allocate. The closure does not touch the parent's state.
    unsafe {
        cmd.pre_exec(move || plan.run());
    }
    let started = Instant::now();
    let spawned = {
        let _no_writer = fork_guard();
        cmd.spawn()
    };
    // Dropping the command closes our copy of the report pipe's write end, so the read
    // below sees the child's report or end of file, never blocks.
    drop(cmd);
    let child = match spawned {
        Ok(child) => child,
        Err(source) => {
            let mut byte = [0u8; 1];
            let mut reader = std::fs::File::from(report_read);
            let step = match reader.read(&mut byte) {
                Ok(1) => ChildStep::from_byte(byte[0]),
                _ => None,
            };
            if let Some(cg) = &cgroup {
                cg.remove();
            }
            if let Some(s) = &status {
                s.remove();
            }
            let step = describe_step(step, program, work_dir, &stdout, &stderr, &switch);
            return Err(LaunchError::Spawn {
                job: job.id,
                procid: place.procid,
                step,
                source,
            });
        }
    };
    let readers = readers_in
        .as_ref()
        .map(|c| crate::output::receive_readers(c, stderr.is_none()));
    Ok(RunningTask::new(
        job.id,
        place,
        child,
        started,
        Limits {
            time_limit: job.time_limit,
            kill_wait: job.kill_wait,
            signal: job.signal,
            kill_timeout: node.kill_timeout,
        },
        TaskFiles {
            stdout,
            stderr,
            relayed: job.relay,
        },
        cgroup,
    )
    .in_container(container.map(|c| (c.runtime.clone(), c.name.clone())))
    .kept(status)
    .after_task(task_epilog)
    .leftovers_outlive(job.leftovers_outlive)
    .reading(readers))
}

fn describe_step(
    step: Option<ChildStep>,
    program: &str,
    work_dir: &Path,
    stdout: &Path,
    stderr: &Option<PathBuf>,
    switch: &Option<UserSwitch>,
) -> String {
    let who = match switch {
        Some(s) => format!("uid {}", s.uid),
        None => "the agent's user".to_string(),
    };
    match step {
        None => format!("cannot execute `{program}`"),
        Some(ChildStep::Cgroup) => "cannot join the task's cgroup".into(),
        Some(ChildStep::Affinity) => "cannot pin to the allocated cores".into(),
        Some(ChildStep::Namespace) => {
            "cannot make the task's own mount namespace (and, for an agent that is not root, user namespace; for a pod, UTS namespace with its host name)".into()
        }
        Some(ChildStep::Bind) => {
            "cannot bind-mount the job's files (hosts file, MPI or Volcano files) or mount its volumes".into()
        }
        Some(ChildStep::Keeper) => "cannot fork the task's keeper".into(),
        Some(ChildStep::Inherit) => {
            "cannot pass the container's environment file to the runtime".into()
        }
        Some(ChildStep::Groups) => format!("cannot set the supplementary groups of {who}"),
        Some(ChildStep::Gid) => format!("cannot set the group id of {who}"),
        Some(ChildStep::Uid) => format!("cannot become {who}"),
        Some(ChildStep::Chdir) => {
            format!(
                "cannot enter working directory {} as {who}",
                work_dir.display()
            )
        }
        Some(ChildStep::Stdout) => {
            format!("cannot open output file {} as {who}", stdout.display())
        }
        Some(ChildStep::Stderr) => format!(
            "cannot open error file {} as {who}",
            stderr.as_deref().unwrap_or(stdout).display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadre_core::alloc::Allocation;
    use cadre_core::job::JobSpec;
    use cadre_core::resources::TaskResources;
    use cadre_core::time::Dur;
    use std::collections::BTreeMap;

    fn job(user: &str) -> JobLaunch {
        JobLaunch::new(
            JobId(9),
            JobSpec::simple(user, "a", 1, TaskResources::default(), Dur(0)),
            Allocation::default(),
            BTreeMap::new(),
            vec!["true".into()],
            PathBuf::from("/"),
        )
    }

    fn account(name: &str, uid: u32) -> RunAs {
        RunAs {
            name: name.into(),
            uid,
            gid: uid,
            home: None,
            shell: None,
        }
    }

    #[test]
    fn root_agent_switches_to_the_submitter_and_never_runs_others_as_root() {
        assert_eq!(
            decide_user(&job("alice"), &account("alice", 1000), 0).unwrap(),
            Some((1000, 1000))
        );
        assert_eq!(
            decide_user(&job("root"), &account("root", 0), 0).unwrap(),
            None
        );
        let err = decide_user(&job("toor"), &account("toor", 0), 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "refusing to run job 9 of user `toor` as root (uid 0)"
        );
        let err = decide_user(&job("alice"), &account("bob", 1001), 0).unwrap_err();
        assert!(matches!(err, LaunchError::UserMismatch { .. }), "{err}");
    }

    #[test]
    fn unprivileged_agent_runs_only_its_own_tasks() {
        assert_eq!(
            decide_user(&job("me"), &account("me", 1234), 1234).unwrap(),
            None
        );
        let err = decide_user(&job("alice"), &account("alice", 1000), 1234).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot run job 9 as `alice` (uid 1000): the agent runs as uid 1234, not root, \
             and can only run its own tasks"
        );
    }

    #[test]
    fn child_steps_round_trip_through_their_byte() {
        for b in 0..=13u8 {
            if let Some(s) = ChildStep::from_byte(b) {
                assert_eq!(s as u8, b);
            } else {
                assert!(b == 0 || b == 13);
            }
        }
    }
}
