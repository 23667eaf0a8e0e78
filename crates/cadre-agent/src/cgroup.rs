//! One cgroup v2 per task, so that every process of a task (even one that left the task's
//! process group, as a daemon that calls `setsid` does) is signalled and killed with it,
//! a task counts as ended only once nothing of it runs, and the kernel's out-of-memory
//! kills can be told apart from other deaths.
//!
//! Given: the agent's [`CgroupSetting`]. `Auto` finds the agent's own cgroup in the
//! unified hierarchy (`/proc/self/cgroup`'s `0::` line under the `cgroup2` mount of
//! `/proc/self/mountinfo`; on a hybrid host `/sys/fs/cgroup/unified`, which has
//! `cgroup.kill` and `cgroup.events` even without controllers); `Under(DIR)` names one.
//!
//! Decided ([`AgentCgroups::prepare`], once at the agent's start):
//! - the agent's tasks go under a directory of its own there, made new, `cadre.<node>.<pid>`
//!   (agents of several clusters on one machine have nodes of the same name), with the `memory`
//!   controller enabled for its children where the parent offers it; its path is recorded
//!   in the agent's state directory (`cgroup`);
//! - what a previous life of this agent left there (it was killed: nothing stopped its
//!   tasks) is killed and removed before the agent says hello ([`sweep_previous_life`]),
//!   so that the runs the controller requeues as lost never go on here beside their new
//!   start; what survives SIGKILL drains the node;
//! - without a writable cgroup v2 the agent runs its tasks in process groups only and
//!   says at start that a process leaving its group can outlive its job.
//!
//! - the directory it is made in, and each directory above it up to the hierarchy's root,
//!   must be root's (or the agent's user's) and writable by its owner alone: whoever may
//!   write a common ancestor's `cgroup.procs` may move the tasks' processes out, and
//!   whoever owns the parent may rename the agent's directory away. Otherwise `Auto` goes
//!   without cgroups (saying why) and `Under` refuses to start.
//!
//! Per task ([`TaskCgroup`]): a child `job<J>.<R>.task<T>` of run `R` of the job
//! (`job<J>.<R>.step<S>.task<T>` of a step, whose task numbers restart at 0 beside the
//! job's own), made new (one already there is an error: it is another run's), with
//! `memory.max` set to the task's allocated memory where the controller is enabled; the
//! task joins it before exec. A signal reaches every process in it while it is frozen (a
//! frozen process cannot exit, so no pid read from it can be reused by another process
//! before it is signalled); where it cannot be frozen in time, only the task's process
//! group is signalled. SIGKILL is `cgroup.kill`, which needs no pids. Afterwards
//! `memory.events` says whether the kernel killed anything in it for lack of memory
//! (`oom_kill`); that is the only honest source for OUT_OF_MEMORY, and without a cgroup the
//! outcome says it was not detected rather than guessing from a SIGKILL.
//!
//! Must hold: a task is reported ended only when its cgroup is empty (`populated 0`), or
//! after the agent's kill timeout with what survived named, which drains the node ("Kill
//! task failed"); a run's leftovers (daemons of `cadre rsh` steps) go with the run.

use cadre_core::job::JobId;
use nix::sys::signal::Signal;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the agent puts its tasks' cgroups.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CgroupSetting {
    /// Under the agent's own cgroup in the unified hierarchy; process groups only (with a
    /// warning) where that is not writable.
    #[default]
    Auto,
    /// Under this cgroup v2 directory (`--cgroup-parent`); the agent refuses to start
    /// where it cannot.
    Under(PathBuf),
    /// No cgroups: process groups only (`--cgroups off`).
    Off,
}

/// How long a task's processes may survive SIGKILL before the run's end names them and
/// the node is drained: Slurm's default UnkillableStepTimeout.
pub const DEFAULT_KILL_TIMEOUT: Duration = Duration::from_secs(60);

/// The file of the agent's state directory naming its cgroup directory.
const RECORD: &str = "cgroup";

/// How long a cgroup may take to freeze before its processes are signalled anyway.
const FREEZE_WAIT: Duration = Duration::from_millis(100);

/// How long the leftovers of a previous life of the agent may take to die.
const SWEEP_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("{} is not a cgroup v2 directory (no cgroup.controllers)", path.display())]
    NotV2 { path: PathBuf },
    #[error("failed to create cgroup {}: {source}", path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("failed to write {} in {}: {source}", file, path.display())]
    Write {
        path: PathBuf,
        file: &'static str,
        source: io::Error,
    },
    #[error("failed to open {} for writing: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot find this process's cgroup v2: {why}")]
    NotFound { why: String },
    #[error("failed to record the agent's cgroup in {}: {source}", path.display())]
    Record { path: PathBuf, source: io::Error },
    #[error(
        "cgroup {} is not root's alone (owner uid {uid}, mode {mode:o}): its owner, or whoever \
         may write it, could move the tasks' processes out of their cgroups",
        path.display()
    )]
    Untrusted { path: PathBuf, uid: u32, mode: u32 },
}

/// Whether an out-of-memory kill could be checked, and what was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OomCheck {
    /// The task ran in its own cgroup; the kernel's `oom_kill` count there.
    Checked { oom_kills: u64 },
    /// Out-of-memory kills are not detected for this task, and why.
    NotDetected { why: String },
}

/// A task's cgroup.
#[derive(Debug)]
pub struct TaskCgroup {
    path: PathBuf,
}

impl TaskCgroup {
    /// The cgroup at `path` a previous life of the agent made for a task it adopts.
    pub(crate) fn existing(path: PathBuf) -> TaskCgroup {
        TaskCgroup { path }
    }

    /// Creates the cgroup of task `procid` of run `run` of the job (of its step `step`)
    /// under `parent`, limited to `mem_mib` when non-zero. One already there is an error:
    /// it holds what another start left, which this task must not join.
    pub fn create(
        parent: &Path,
        job: JobId,
        run: u32,
        step: Option<u32>,
        procid: u32,
        mem_mib: u64,
    ) -> Result<TaskCgroup, CgroupError> {
        if !parent.join("cgroup.controllers").is_file() {
            return Err(CgroupError::NotV2 {
                path: parent.to_path_buf(),
            });
        }
        let path = parent.join(match step {
            None => format!("job{job}.{run}.task{procid}"),
            Some(step) => format!("job{job}.{run}.step{step}.task{procid}"),
        });
        if let Err(source) = fs::create_dir(&path) {
            return Err(CgroupError::Create { path, source });
        }
        let cg = TaskCgroup { path };
        // `memory.max` exists only where the parent enables the memory controller.
        if mem_mib > 0 && cg.path.join("memory.max").exists() {
            let bytes = mem_mib.saturating_mul(1 << 20).to_string();
            fs::write(cg.path.join("memory.max"), bytes).map_err(|source| {
                cg.remove();
                CgroupError::Write {
                    path: cg.path.clone(),
                    file: "memory.max",
                    source,
                }
            })?;
        }
        Ok(cg)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `cgroup.procs`, open for writing, for the child to join before exec.
    pub(crate) fn procs_fd(&self) -> Result<OwnedFd, CgroupError> {
        self.open_for_writing("cgroup.procs")
    }

    /// `cgroup.kill`, open for writing, for the task's keeper ([`crate::keeper`]).
    pub(crate) fn kill_fd(&self) -> Result<OwnedFd, CgroupError> {
        self.open_for_writing("cgroup.kill")
    }

    fn open_for_writing(&self, file: &str) -> Result<OwnedFd, CgroupError> {
        let path = self.path.join(file);
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map(OwnedFd::from)
            .map_err(|source| CgroupError::Open { path, source })
    }

    /// The task's out-of-memory kills so far.
    pub fn oom_check(&self) -> OomCheck {
        let path = self.path.join("memory.events");
        match fs::read_to_string(&path) {
            Ok(text) => match parse_oom_kills(&text) {
                Some(n) => OomCheck::Checked { oom_kills: n },
                None => OomCheck::NotDetected {
                    why: format!("no oom_kill line in {}", path.display()),
                },
            },
            Err(e) => OomCheck::NotDetected {
                why: format!("cannot read {}: {e}", path.display()),
            },
        }
    }

    /// Kills every process in the cgroup: `cgroup.kill` (Linux 5.14+), else SIGKILL to
    /// each; best effort.
    pub(crate) fn kill_all(&self) {
        kill_cgroup(&self.path);
    }

    /// Sends `signal` to every process in the cgroup, frozen meanwhile: a frozen process
    /// cannot exit by itself, so no pid read here can be reused by another process before
    /// it is signalled. `false`: it could not be frozen in time, and nothing was sent.
    pub(crate) fn signal_all(&self, signal: Signal) -> bool {
        signal_cgroup(&self.path, signal)
    }

    /// Whether any process is left in it (`cgroup.events`); a cgroup that cannot be read
    /// (removed) is empty.
    pub(crate) fn populated(&self) -> bool {
        populated(&self.path)
    }

    /// The pids left in it, for a message.
    pub(crate) fn pids(&self) -> Vec<i32> {
        pids(&self.path)
    }

    /// Removes the cgroup; best effort (it fails while processes remain in it).
    pub(crate) fn remove(&self) {
        let _ = fs::remove_dir(&self.path);
    }
}

/// The agent's directory of task cgroups.
#[derive(Debug)]
pub struct AgentCgroups {
    path: PathBuf,
    record: PathBuf,
}

/// What [`AgentCgroups::prepare`] found.
#[derive(Debug)]
pub enum Prepared {
    /// Tasks get cgroups under it.
    Ready(AgentCgroups),
    /// No cgroups (`Off`, or `Auto` where none is writable: `why` says what was tried).
    Without { why: Option<String> },
}

impl AgentCgroups {
    /// Finds or makes the agent's cgroup directory for node `node` by `setting`, recorded
    /// in `state_dir` (after [`sweep_previous_life`], which reads the previous record).
    /// `reuse`: the previous life's directory, which holds the tasks this life adopts.
    pub fn prepare(
        setting: &CgroupSetting,
        node: &str,
        state_dir: &Path,
        reuse: Option<&Path>,
    ) -> Result<Prepared, CgroupError> {
        let record = state_dir.join(RECORD);
        let parent = match setting {
            CgroupSetting::Off => return Ok(Prepared::Without { why: None }),
            CgroupSetting::Under(dir) => dir.clone(),
            CgroupSetting::Auto => match own_cgroup() {
                Ok(dir) => dir,
                Err(e) => {
                    return Ok(Prepared::Without {
                        why: Some(e.to_string()),
                    });
                }
            },
        };
        if let Some(dir) = reuse
            && *setting != CgroupSetting::Off
        {
            trusted_ancestors(dir)?;
            return Ok(Prepared::Ready(AgentCgroups {
                path: dir.to_path_buf(),
                record,
            }));
        }
        match AgentCgroups::make(&parent, node, record) {
            Ok(made) => Ok(Prepared::Ready(made)),
            Err(e) if *setting == CgroupSetting::Auto => Ok(Prepared::Without {
                why: Some(e.to_string()),
            }),
            Err(e) => Err(e),
        }
    }

    fn make(parent: &Path, node: &str, record: PathBuf) -> Result<AgentCgroups, CgroupError> {
        if !parent.join("cgroup.controllers").is_file() {
            return Err(CgroupError::NotV2 {
                path: parent.to_path_buf(),
            });
        }
        trusted_ancestors(parent)?;
        let name: String = node
            .chars()
            .take(64)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        // A directory of its own, made new: another agent of this process (tests run
        // several) or an earlier process of this pid may have one of the same name.
        let base = format!("cadre.{name}.{}", std::process::id());
        let mut n = 0u32;
        let path = loop {
            let path = parent.join(if n == 0 {
                base.clone()
            } else {
                format!("{base}.{n}")
            });
            match fs::create_dir(&path) {
                Ok(()) => break path,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(source) => return Err(CgroupError::Create { path, source }),
            }
        };
        let offered = fs::read_to_string(path.join("cgroup.controllers")).unwrap_or_default();
        if offered.split_whitespace().any(|c| c == "memory")
            && let Err(e) = fs::write(path.join("cgroup.subtree_control"), "+memory")
        {
            tracing::warn!(cgroup = %path.display(), error = %e, "cannot enable the memory controller for task cgroups: memory limits and out-of-memory kills are not enforced or detected");
        }
        write_record(&record, &path).map_err(|source| {
            let _ = fs::remove_dir(&path);
            CgroupError::Record {
                path: record.clone(),
                source,
            }
        })?;
        Ok(AgentCgroups { path, record })
    }

    /// The directory under which each task gets its cgroup.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the memory controller is enabled for the task cgroups.
    pub fn memory_enabled(&self) -> bool {
        fs::read_to_string(self.path.join("cgroup.subtree_control"))
            .is_ok_and(|s| s.split_whitespace().any(|c| c == "memory"))
    }
}

impl Drop for AgentCgroups {
    /// The agent stops (or its service ends on an error): the directory and its record go;
    /// what is left in it (a task that could not be killed) keeps both for the next start
    /// to sweep.
    fn drop(&mut self) {
        // The record goes only while it still names this directory.
        let ours = fs::read_to_string(&self.record)
            .is_ok_and(|r| Path::new(r.trim()) == self.path.as_path());
        if fs::remove_dir(&self.path).is_ok() && ours {
            let _ = fs::remove_file(&self.record);
        }
    }
}

/// Writes the record naming `dir`: a new file renamed over the old one, so that a crash
/// leaves the old record or the new, never half of one, and never through a link.
fn write_record(record: &Path, dir: &Path) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = record.with_extension("new");
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&tmp)?;
    writeln!(f, "{}", dir.display())?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, record)
}

/// Refuses `dir` when it, or a directory above it in the hierarchy, is not root's (or
/// this process's user's) or may be written by group or others.
fn trusted_ancestors(dir: &Path) -> Result<(), CgroupError> {
    use std::os::unix::fs::MetadataExt;
    let mut at = Some(dir);
    while let Some(d) = at {
        if !d.join("cgroup.controllers").is_file() {
            break;
        }
        let meta = fs::metadata(d).map_err(|source| CgroupError::Create {
            path: d.to_path_buf(),
            source,
        })?;
        if crate::trust::others_may_change(&meta) {
            return Err(CgroupError::Untrusted {
                path: d.to_path_buf(),
                uid: meta.uid(),
                mode: meta.mode() & 0o7777,
            });
        }
        at = d.parent();
    }
    Ok(())
}

/// Kills and removes every cgroup of run `run` of job `job` (its tasks', its steps') left
/// under `parent`: a run's end takes what its `cadre rsh` steps left running with it (and
/// never another run's). Returns the cgroups that could not be emptied within the wait,
/// with their pids.
pub fn sweep_job(parent: &Path, job: JobId, run: u32, wait: Duration) -> Vec<(PathBuf, Vec<i32>)> {
    let prefix = format!("job{job}.{run}.");
    let dirs: Vec<PathBuf> = fs::read_dir(parent)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .map(|e| e.path())
        .collect();
    sweep(&dirs, wait)
}

/// Kills every process of `dirs`, waits up to `wait` for them to empty, removes them.
fn sweep(dirs: &[PathBuf], wait: Duration) -> Vec<(PathBuf, Vec<i32>)> {
    for dir in dirs {
        kill_cgroup(dir);
    }
    let deadline = Instant::now() + wait;
    while dirs.iter().any(|d| populated(d)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        for dir in dirs.iter().filter(|d| populated(d)) {
            kill_cgroup(dir);
        }
    }
    let mut left = Vec::new();
    for dir in dirs {
        if fs::remove_dir(dir).is_err() && populated(dir) {
            left.push((dir.clone(), pids(dir)));
        }
    }
    left
}

/// What [`sweep_previous_life`] left.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// What survived SIGKILL, for the node's health: such processes may hold its GPUs,
    /// and the node is drained until the agent starts again without them.
    pub left_running: Option<String>,
    /// The previous life's directory, kept because it holds the task cgroups this life
    /// adopts: this life goes on in it ([`AgentCgroups::prepare`]).
    pub kept: Option<PathBuf>,
}

/// Kills and removes the task cgroups of the directory a previous life of the agent
/// recorded, but those in `keep` (the tasks this life adopts), and the directory itself
/// unless it keeps any. The record names a directory only the agent writes; it is trusted
/// only as far as being a `cadre.*` cgroup v2 directory.
pub fn sweep_previous_life(state_dir: &Path, keep: &[PathBuf]) -> Swept {
    let mut swept = Swept::default();
    let record = state_dir.join(RECORD);
    let Ok(text) = fs::read_to_string(&record) else {
        return swept;
    };
    let old = PathBuf::from(text.trim());
    let ours = old.is_absolute()
        && old
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("cadre."))
        && old.join("cgroup.controllers").is_file();
    if ours {
        let tasks: Vec<PathBuf> = fs::read_dir(&old)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .filter(|p| !keep.contains(p))
            .collect();
        if !tasks.is_empty() {
            tracing::warn!(cgroup = %old.display(), tasks = tasks.len(), "killing the tasks a previous life of this agent left running that it does not adopt (their runs are lost)");
        }
        let left = sweep(&tasks, SWEEP_WAIT);
        for (dir, pids) in &left {
            tracing::error!(cgroup = %dir.display(), ?pids, "processes of a previous life of this agent survive SIGKILL");
        }
        if keep
            .iter()
            .any(|k| k.parent() == Some(old.as_path()) && k.is_dir())
        {
            swept.kept = Some(old.clone());
        } else {
            let _ = fs::remove_dir(&old);
        }
        if let Some((dir, pids)) = left.first() {
            // The record stays, for the next start to sweep again.
            swept.left_running = Some(format!(
                "{KILL_TASK_FAILED}: processes {} of a previous life of this agent in {} after SIGKILL",
                some_pids(pids),
                dir.display()
            ));
            return swept;
        }
    }
    if !old.exists() {
        let _ = fs::remove_file(&record);
    }
    swept
}

/// Slurm's words for processes that outlive SIGKILL, which sites' scripts look for.
pub const KILL_TASK_FAILED: &str = "Kill task failed";

/// This process's cgroup directory in the unified hierarchy.
fn own_cgroup() -> Result<PathBuf, CgroupError> {
    let not_found = |why: String| CgroupError::NotFound { why };
    let own = fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| not_found(format!("cannot read /proc/self/cgroup: {e}")))?;
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| not_found(format!("cannot read /proc/self/mountinfo: {e}")))?;
    unified_dir(&own, &mountinfo).ok_or_else(|| {
        not_found("no cgroup2 mount holds this process's cgroup (no `0::` line, or no cgroup2 in /proc/self/mountinfo)".into())
    })
}

/// The directory of the `0::PATH` cgroup of `proc_cgroup` under the `cgroup2` mount of
/// `mountinfo`, whose root may be a part of the hierarchy (a cgroup namespace).
fn unified_dir(proc_cgroup: &str, mountinfo: &str) -> Option<PathBuf> {
    let own = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        if fs.split_whitespace().next() != Some("cgroup2") {
            return None;
        }
        let mut fields = mount.split_whitespace();
        let root = fields.nth(3)?;
        let point = fields.next()?;
        let rel = if root == "/" {
            Path::new(own)
        } else {
            Path::new(own).strip_prefix(root).ok()?
        };
        let rel = rel.to_str()?.trim_start_matches('/');
        Some(if rel.is_empty() {
            PathBuf::from(point)
        } else {
            Path::new(point).join(rel)
        })
    })
}

/// Whether processes are left in `dir`; a cgroup that is gone is empty, one that cannot
/// be read otherwise is taken as not (yet) empty.
fn populated(dir: &Path) -> bool {
    match fs::read_to_string(dir.join("cgroup.events")) {
        Ok(text) => text.lines().any(|l| {
            l.split_once(' ')
                .is_some_and(|(k, v)| k == "populated" && v.trim() != "0")
        }),
        Err(e) => e.kind() != io::ErrorKind::NotFound,
    }
}

fn frozen(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events")).is_ok_and(|text| {
        text.lines().any(|l| {
            l.split_once(' ')
                .is_some_and(|(k, v)| k == "frozen" && v.trim() == "1")
        })
    })
}

fn pids(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| {
            t.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn kill_cgroup(dir: &Path) {
    if fs::write(dir.join("cgroup.kill"), "1").is_err() {
        // A kernel before 5.14: through the freezer (5.2+), pid by pid.
        signal_cgroup(dir, Signal::SIGKILL);
    }
}

/// Signals every process of `dir` while it is frozen; `false` (nothing sent) when it
/// cannot be frozen within [`FREEZE_WAIT`] (a process stuck in the kernel holds a freeze
/// off): then a pid read from it could be reused before the signal.
fn signal_cgroup(dir: &Path, signal: Signal) -> bool {
    let freeze = dir.join("cgroup.freeze");
    if fs::write(&freeze, "1").is_err() {
        return false;
    }
    let deadline = Instant::now() + FREEZE_WAIT;
    while !frozen(dir) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let froze = frozen(dir);
    if froze {
        for pid in pids(dir) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
    }
    let _ = fs::write(&freeze, "0");
    froze
}

/// At most 16 of `pids`, and how many more, for a message.
pub fn some_pids(pids: &[i32]) -> String {
    let shown: Vec<String> = pids.iter().take(16).map(i32::to_string).collect();
    match pids.len().saturating_sub(16) {
        0 => format!("[{}]", shown.join(", ")),
        more => format!("[{}, and {more} more]", shown.join(", ")),
    }
}

/// The `oom_kill` count of a `memory.events` file.
pub fn parse_oom_kills(memory_events: &str) -> Option<u64> {
    memory_events.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == "oom_kill").then(|| value.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_kills_are_read_from_memory_events() {
        let text = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(parse_oom_kills(text), Some(1));
        assert_eq!(parse_oom_kills("low 0\noom 0\n"), None);
        assert_eq!(parse_oom_kills("oom_kill x\n"), None);
    }

    #[test]
    fn a_step_s_task_and_another_run_s_have_cgroups_apart_from_the_job_s_task_of_its_number() {
        // Killing a step's cgroup at its end must not kill the job's task 0 beside it.
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("cgroup.controllers"), "memory\n").unwrap();
        let job = TaskCgroup::create(dir.path(), JobId(7), 0, None, 0, 0).unwrap();
        let step = TaskCgroup::create(dir.path(), JobId(7), 0, Some(0), 0, 0).unwrap();
        assert_eq!(job.path(), dir.path().join("job7.0.task0"));
        assert_eq!(step.path(), dir.path().join("job7.0.step0.task0"));
        // Regression: the next start of the job on this node, while the first is still
        // being killed, got the same cgroup; the first's kill loop killed the second.
        let next = TaskCgroup::create(dir.path(), JobId(7), 1, None, 0, 0).unwrap();
        assert_eq!(next.path(), dir.path().join("job7.1.task0"));
        // One already there is never joined.
        let again = TaskCgroup::create(dir.path(), JobId(7), 1, None, 0, 0).unwrap_err();
        assert!(again.to_string().contains("job7.1.task0"), "{again}");
        // A run's sweep kills its own cgroups only (a made-up tree: `cgroup.kill` written).
        sweep_job(dir.path(), JobId(7), 0, Duration::from_millis(10));
        assert!(job.path().join("cgroup.kill").exists());
        assert!(step.path().join("cgroup.kill").exists());
        assert!(!next.path().join("cgroup.kill").exists());
    }

    #[test]
    fn pid_lists_in_messages_are_bounded() {
        assert_eq!(some_pids(&[1, 2]), "[1, 2]");
        let many: Vec<i32> = (1..=40).collect();
        assert!(some_pids(&many).ends_with("16, and 24 more]"));
    }

    #[test]
    fn the_unified_cgroup_is_found_on_hybrid_and_pure_hosts_and_in_namespaces() {
        let hybrid = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
                      41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let own = "4:memory:/x\n0::/system.slice/cadre-agent.service\n";
        assert_eq!(
            unified_dir(own, hybrid),
            Some(PathBuf::from(
                "/sys/fs/cgroup/unified/system.slice/cadre-agent.service"
            ))
        );
        assert_eq!(
            unified_dir("0::/\n", hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let pure = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            unified_dir("0::/a/b\n", pure),
            Some(PathBuf::from("/sys/fs/cgroup/a/b"))
        );
        // A mount of a part of the hierarchy: the part is not repeated.
        let part = "30 23 0:26 /a /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            unified_dir("0::/a/b\n", part),
            Some(PathBuf::from("/sys/fs/cgroup/b"))
        );
        assert_eq!(unified_dir("1:cpu:/\n", pure), None);
        assert_eq!(
            unified_dir("0::/\n", "31 23 0:28 / /x rw - tmpfs tmpfs rw\n"),
            None
        );
    }

    #[test]
    fn a_recorded_directory_is_swept_only_when_it_is_a_cadre_cgroup() {
        let state = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let record = state.path().join(RECORD);
        // A cgroup not named as the agent names its own: left alone.
        fs::write(elsewhere.path().join("cgroup.controllers"), "").unwrap();
        fs::create_dir(elsewhere.path().join("job1.task0")).unwrap();
        fs::write(&record, format!("{}\n", elsewhere.path().display())).unwrap();
        assert_eq!(sweep_previous_life(state.path(), &[]), Swept::default());
        assert!(elsewhere.path().join("job1.task0").exists());
        // Named so, but not a cgroup (no cgroup.controllers): left alone too.
        let named = elsewhere.path().join("cadre.n1.1");
        fs::create_dir_all(named.join("job1.task0")).unwrap();
        fs::write(&record, format!("{}\n", named.display())).unwrap();
        assert_eq!(sweep_previous_life(state.path(), &[]), Swept::default());
        assert!(named.join("job1.task0").exists());
        assert!(record.exists());
    }

    #[test]
    fn two_agents_of_one_process_and_node_name_get_directories_of_their_own() {
        // Regression: the service tests run several agents of node `n1` in one process;
        // sharing `cadre.n1.<pid>`, one's stop removed the other's directory.
        let parent = tempfile::tempdir().unwrap();
        fs::write(parent.path().join("cgroup.controllers"), "").unwrap();
        let under = CgroupSetting::Under(parent.path().to_path_buf());
        let (s1, s2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let Prepared::Ready(a) = AgentCgroups::prepare(&under, "n1", s1.path(), None).unwrap()
        else {
            panic!("no directory");
        };
        let Prepared::Ready(b) = AgentCgroups::prepare(&under, "n/1", s2.path(), None).unwrap()
        else {
            panic!("no directory");
        };
        assert_ne!(a.path(), b.path());
        assert_eq!(a.path().parent(), Some(parent.path()));
        assert!(
            b.path()
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("cadre.n_1.")
        );
        let kept = b.path().to_path_buf();
        assert_eq!(
            fs::read_to_string(s2.path().join(RECORD)).unwrap().trim(),
            kept.display().to_string()
        );
        drop(a);
        assert!(
            kept.is_dir(),
            "one agent's stop removed the other's directory"
        );
        drop(b);
        assert!(!kept.exists() && !s2.path().join(RECORD).exists());
    }

    #[test]
    fn an_explicit_parent_outside_cgroup_v2_is_refused() {
        let state = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let err = AgentCgroups::prepare(
            &CgroupSetting::Under(dir.path().to_path_buf()),
            "n1",
            state.path(),
            None,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("is not a cgroup v2 directory"),
            "{err}"
        );
    }

    #[test]
    fn a_directory_outside_cgroup_v2_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = TaskCgroup::create(dir.path(), JobId(1), 0, None, 0, 0).unwrap_err();
        assert!(
            err.to_string().contains("is not a cgroup v2 directory"),
            "{err}"
        );
    }
}
