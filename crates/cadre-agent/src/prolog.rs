//! The site's programs around each job on a node, as Slurm's `Prolog` and `Epilog`, and
//! the DCGM exporter's job mapping.
//!
//! Given: the agent's [`NodeScripts`] (`--prolog`, `--epilog`, `--prolog-timeout`,
//! `--dcgm-job-mapping-dir`), and a job's run starting or ending on this node (a job's run,
//! never its steps).
//!
//! Decided:
//! - the prolog runs before any task of the run starts here, the epilog after every task of
//!   it has ended here (its cgroups empty); both as the agent's user (root), in `/`, with
//!   no standard input, with Slurm's variables (`SLURM_JOB_ID`, `SLURM_JOB_USER`,
//!   `SLURM_JOB_UID`, `SLURM_JOB_GID`, `SLURM_JOB_NODELIST`, `SLURM_JOB_PARTITION`,
//!   `SLURMD_NODENAME`, `SLURM_SCRIPT_CONTEXT`, `CUDA_VISIBLE_DEVICES` of the job's GPUs
//!   here) and nothing of the job's own environment (a user's variables never reach a
//!   root program), in a process group of its own, killed whole at the timeout;
//! - its output goes to the agent's log, at most [`OUTPUT_KEPT`] bytes of it, and its first
//!   line names the failure;
//! - a prolog that fails (non-zero status, a signal, the timeout) fails the run's launch on
//!   this node: the controller drains the node with the reason and requeues the gang whole;
//!   an epilog that fails drains the node once the run has ended;
//! - with a job-mapping directory, the GPUs a run holds here each get a file named by the
//!   GPU's index, holding the job's id, while it runs (the DCGM exporter's
//!   `--hpc-job-mapping-dir` format), so that GPU metrics carry job ids.
//!
//! Must hold: the programs are the administrator's (given on the agent's command line),
//! never a user's; nothing a user controls decides what runs as root or where it writes.

use cadre_core::job::JobId;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How much of a program's output is kept for the log and the reason.
pub const OUTPUT_KEPT: usize = 4096;

/// Slurm's default PrologEpilogTimeout is none; a site program that hangs must not hold a
/// node for ever, so cadre's default is this.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The site's programs around jobs on this node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeScripts {
    pub prolog: Option<PathBuf>,
    pub epilog: Option<PathBuf>,
    /// Run as the job's user before each task's program, in the task's environment, which
    /// its output changes (Slurm's TaskProlog; see [`TaskScripts`]).
    pub task_prolog: Option<PathBuf>,
    /// Run as the job's user after each task has ended (Slurm's TaskEpilog).
    pub task_epilog: Option<PathBuf>,
    /// How long each may run; `None`: [`DEFAULT_TIMEOUT`].
    pub timeout: Option<Duration>,
    /// Where the DCGM exporter reads which job holds which GPU (`--hpc-job-mapping-dir`).
    pub dcgm_job_mapping_dir: Option<PathBuf>,
}

/// Which of them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Context {
    Prolog,
    Epilog,
}

impl Context {
    /// `SLURM_SCRIPT_CONTEXT`, as slurmd sets it.
    fn slurm_name(self) -> &'static str {
        match self {
            Context::Prolog => "prolog_slurmd",
            Context::Epilog => "epilog_slurmd",
        }
    }

    fn word(self) -> &'static str {
        match self {
            Context::Prolog => "prolog",
            Context::Epilog => "epilog",
        }
    }
}

/// What a prolog or epilog is told of the job.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobFacts {
    pub job: JobId,
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    pub nodelist: String,
    pub partition: String,
    pub node: String,
    /// The job's GPUs on this node, by device index.
    pub gpus: Vec<u32>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScriptError {
    #[error("{context} {} could not be started: {why}", program.display())]
    Start {
        context: &'static str,
        program: PathBuf,
        why: String,
    },
    #[error("{context} {} failed ({how}){}", program.display(), first_line(output))]
    Failed {
        context: &'static str,
        program: PathBuf,
        /// `exit status 3`, `killed by signal 9`.
        how: String,
        output: String,
    },
    #[error("{context} {} did not end within {timeout:?} and was killed", program.display())]
    TimedOut {
        context: &'static str,
        program: PathBuf,
        timeout: Duration,
    },
}

fn first_line(output: &str) -> String {
    output
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| format!(": {}", l.chars().take(200).collect::<String>()))
        .unwrap_or_default()
}

/// Refuses a program (or directory, with `dir`) that anyone but root (or the agent's own
/// user) could change, or whose directory they could: the agent runs it as itself, and a
/// program another user can rewrite is that user's way to run anything as root. `what`
/// names the option in the message.
pub fn trusted(path: &Path, what: &str, dir: bool) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if dir != meta.is_dir() {
        let kind = if dir { "a directory" } else { "a file" };
        return Err(format!("{what} {} is not {kind}", path.display()));
    }
    let mut checked = vec![(path.to_path_buf(), meta)];
    if !dir && let Some(parent) = path.parent() {
        let meta =
            std::fs::metadata(parent).map_err(|e| format!("{what} {}: {e}", parent.display()))?;
        checked.push((parent.to_path_buf(), meta));
    }
    for (p, meta) in checked {
        if crate::trust::others_may_change(&meta) {
            return Err(format!(
                "{what}: {} may be changed by others (owner uid {}, mode {:o}); it must be \
                 root's (or this agent's user's) and writable by its owner alone",
                p.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

impl NodeScripts {
    /// Refuses programs and a mapping directory that anyone but root (or the agent's own
    /// user) could change: the agent runs the programs as itself, and a program another
    /// user can rewrite is that user's way to run anything as root.
    pub fn check(&self) -> Result<(), String> {
        if let Some(p) = &self.prolog {
            trusted(p, "--prolog", false)?;
        }
        if let Some(p) = &self.epilog {
            trusted(p, "--epilog", false)?;
        }
        if let Some(p) = &self.task_prolog {
            trusted(p, "--task-prolog", false)?;
        }
        if let Some(p) = &self.task_epilog {
            trusted(p, "--task-epilog", false)?;
        }
        if let Some(d) = &self.dcgm_job_mapping_dir {
            trusted(d, "--dcgm-job-mapping-dir", true)?;
        }
        Ok(())
    }

    /// Runs the prolog or epilog, if there is one, for `facts`; blocks until it ends.
    pub fn run(&self, context: Context, facts: &JobFacts) -> Result<(), ScriptError> {
        let program = match context {
            Context::Prolog => &self.prolog,
            Context::Epilog => &self.epilog,
        };
        let Some(program) = program else {
            return Ok(());
        };
        run_program(
            program,
            context,
            facts,
            self.timeout.unwrap_or(DEFAULT_TIMEOUT),
        )
    }

    /// The programs around each task.
    pub fn task_scripts(&self) -> TaskScripts {
        TaskScripts {
            prolog: self.task_prolog.clone(),
            epilog: self.task_epilog.clone(),
            timeout: self.timeout.unwrap_or(DEFAULT_TIMEOUT),
        }
    }

    /// The job holds `facts.gpus` here from now: their mapping files say so.
    pub fn map_gpus(&self, facts: &JobFacts) {
        let Some(dir) = &self.dcgm_job_mapping_dir else {
            return;
        };
        for gpu in &facts.gpus {
            if let Err(e) = write_mapping(dir, *gpu, &format!("{}\n", facts.job)) {
                tracing::warn!(job = %facts.job, gpu, dir = %dir.display(), error = %e, "cannot write the GPU's job mapping file");
            }
        }
    }

    /// The job no longer holds `facts.gpus`: their mapping files are emptied, unless
    /// another job has taken the GPU since.
    pub fn unmap_gpus(&self, facts: &JobFacts) {
        let Some(dir) = &self.dcgm_job_mapping_dir else {
            return;
        };
        for gpu in &facts.gpus {
            let path = dir.join(gpu.to_string());
            let ours = std::fs::read_to_string(&path)
                .is_ok_and(|held| held.trim() == facts.job.to_string());
            if ours && let Err(e) = write_mapping(dir, *gpu, "") {
                tracing::warn!(job = %facts.job, gpu, error = %e, "cannot clear the GPU's job mapping file");
            }
        }
    }
}

/// Writes the mapping file of `gpu` in `dir` (the administrator's directory): a new file
/// renamed over the old one, so the exporter never reads half of it; never through a link.
fn write_mapping(dir: &Path, gpu: u32, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!(".{gpu}.cadre-tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, dir.join(gpu.to_string()))
}

fn run_program(
    program: &Path,
    context: Context,
    facts: &JobFacts,
    timeout: Duration,
) -> Result<(), ScriptError> {
    let word = context.word();
    let gpus: Vec<String> = facts.gpus.iter().map(u32::to_string).collect();
    let env = [
        ("SLURM_JOB_ID", facts.job.to_string()),
        ("SLURM_JOBID", facts.job.to_string()),
        ("SLURM_JOB_USER", facts.user.clone()),
        ("SLURM_JOB_UID", facts.uid.to_string()),
        ("SLURM_JOB_GID", facts.gid.to_string()),
        ("SLURM_JOB_NODELIST", facts.nodelist.clone()),
        ("SLURM_JOB_PARTITION", facts.partition.clone()),
        ("SLURMD_NODENAME", facts.node.clone()),
        ("SLURM_SCRIPT_CONTEXT", context.slurm_name().to_string()),
        ("CUDA_VISIBLE_DEVICES", gpus.join(",")),
    ];
    let ran = run_site_program(program, &env, timeout).map_err(|e| ScriptError::Start {
        context: word,
        program: program.to_path_buf(),
        why: e.to_string(),
    })?;
    if !ran.output.trim().is_empty() {
        tracing::info!(job = %facts.job, program = %program.display(), "{word} said: {}", ran.output.trim());
    }
    match ran.status {
        None => Err(ScriptError::TimedOut {
            context: word,
            program: program.to_path_buf(),
            timeout,
        }),
        Some(status) if status.success() => Ok(()),
        Some(status) => Err(ScriptError::Failed {
            context: word,
            program: program.to_path_buf(),
            how: how_it_ended(status),
            output: ran.output,
        }),
    }
}

/// The site's programs around each task (Slurm's `TaskProlog` and `TaskEpilog`), run as
/// the job's user (its uid, primary group and groups), in `/`, with no standard input, in
/// the task's own environment and `SLURM_SCRIPT_CONTEXT` (`prolog_task`, `epilog_task`),
/// in a process group of their own killed whole when they end or at the timeout:
/// - the task prolog runs before the task's program starts; the lines of its standard
///   output (the first [`OUTPUT_KEPT`] bytes) change the task: `export NAME=value` sets a
///   variable of its environment, `unset NAME` removes one, `print TEXT` writes TEXT to the
///   task's standard output before the program does; other lines are ignored. A task prolog
///   that fails (non-zero status, a signal, its timeout) fails the task's launch, as the
///   prolog does the run's;
/// - the task epilog runs once the task has ended (before the job's epilog); its failure
///   is logged, as Slurm does, and changes nothing.
///
/// `SLURM_TASK_PID` is not given: the task prolog runs before the task's process exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskScripts {
    pub prolog: Option<PathBuf>,
    pub epilog: Option<PathBuf>,
    pub timeout: Duration,
}

impl Default for TaskScripts {
    /// None, with the default timeout.
    fn default() -> TaskScripts {
        TaskScripts {
            prolog: None,
            epilog: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// A task epilog to run once its task has ended: the program, who as, and the task's
/// environment as it started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskEpilogRun {
    pub program: PathBuf,
    pub ids: Ids,
    pub env: std::collections::BTreeMap<String, String>,
    pub timeout: Duration,
    /// The cgroup to make for it (see [`run_task_program`]).
    pub cgroup: Option<PathBuf>,
}

impl TaskEpilogRun {
    /// Runs it; a failure is logged (and changes nothing, as in Slurm).
    pub fn run(&self, job: JobId, procid: u32) {
        match run_task_program(
            &self.program,
            "epilog_task",
            &self.ids,
            &self.env,
            self.timeout,
            self.cgroup.as_deref(),
        ) {
            Ok(ran) if !ran.output.trim().is_empty() => {
                tracing::info!(%job, procid, program = %self.program.display(), "task epilog said: {}", ran.output.trim());
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(%job, procid, error = %e, "task epilog failed"),
        }
    }
}

/// What a task prolog's output asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskPrologSays {
    pub export: Vec<(String, String)>,
    pub unset: Vec<String>,
    /// Lines to write to the task's standard output first, each ending with a newline.
    pub print: String,
}

impl TaskPrologSays {
    /// Reads a task prolog's standard output; lines with a variable name that is not one
    /// (`[A-Za-z_][A-Za-z0-9_]*`) or a NUL byte are ignored.
    pub fn parse(stdout: &str) -> TaskPrologSays {
        let name_ok = |n: &str| {
            let mut c = n.chars();
            c.next()
                .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
                && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
        };
        let mut says = TaskPrologSays::default();
        for line in stdout.lines().filter(|l| !l.contains('\0')) {
            if let Some(rest) = line.strip_prefix("export ") {
                if let Some((n, v)) = rest.trim_start().split_once('=')
                    && name_ok(n)
                {
                    says.unset.retain(|u| u != n);
                    says.export.push((n.to_string(), v.to_string()));
                }
            } else if let Some(n) = line.strip_prefix("unset ") {
                let n = n.trim();
                if name_ok(n) {
                    says.export.retain(|(e, _)| e != n);
                    says.unset.push(n.to_string());
                }
            } else if let Some(text) = line.strip_prefix("print ") {
                says.print.push_str(text);
                says.print.push('\n');
            }
        }
        says
    }

    /// Applies the variables to a task's environment.
    pub fn apply(&self, env: &mut std::collections::BTreeMap<String, String>) {
        for n in &self.unset {
            env.remove(n);
        }
        for (n, v) in &self.export {
            env.insert(n.clone(), v.clone());
        }
    }
}

/// Who a task program runs as: uid, primary gid, supplementary groups; `None`: the agent.
pub type Ids = Option<(u32, u32, Vec<u32>)>;

/// Runs a task prolog or epilog (`context`: `"prolog_task"` or `"epilog_task"`) as `ids`,
/// with the task's environment `env`; blocks until it ends or its timeout.
///
/// `cgroup`: a cgroup v2 directory to make for it (beside the task's), which it runs in and
/// which is killed whole and removed when it ends: what it leaves behind (a process that
/// left its group with `setsid`) goes with it. `None`: its process group only.
pub fn run_task_program(
    program: &Path,
    context: &'static str,
    ids: &Ids,
    env: &std::collections::BTreeMap<String, String>,
    timeout: Duration,
    cgroup: Option<&Path>,
) -> Result<Ran, ScriptError> {
    let word = if context == "prolog_task" {
        "task prolog"
    } else {
        "task epilog"
    };
    let start_err = |why: String| ScriptError::Start {
        context: word,
        program: program.to_path_buf(),
        why,
    };
    let cgroup = cgroup
        .map(ProgramCgroup::make)
        .transpose()
        .map_err(|e| start_err(format!("cannot make its cgroup: {e}")))?;
    let join = cgroup
        .as_ref()
        .map(|c| std::os::fd::AsRawFd::as_raw_fd(&c.procs));
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .envs(env)
        .env("SLURM_SCRIPT_CONTEXT", context)
        .current_dir("/");
    let ids: Option<(nix::unistd::Uid, nix::unistd::Gid, Vec<nix::unistd::Gid>)> =
        ids.clone().map(|(uid, gid, groups)| {
            (
                nix::unistd::Uid::from_raw(uid),
                nix::unistd::Gid::from_raw(gid),
                groups.into_iter().map(nix::unistd::Gid::from_raw).collect(),
            )
        });
    // SAFETY: runs between fork and exec; write, setgroups, setgid and setuid are system
    // calls on data prepared before the fork (no allocation, no lock). The cgroup's
    // `cgroup.procs` descriptor stays open in the parent until the spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = join {
                // "0": the writing process itself, before it gives root up.
                nix::unistd::write(std::os::fd::BorrowedFd::borrow_raw(fd), b"0")?;
            }
            if let Some((uid, gid, groups)) = &ids {
                nix::unistd::setgroups(groups)?;
                nix::unistd::setgid(*gid)?;
                nix::unistd::setuid(*uid)?;
            }
            Ok(())
        });
    }
    let ran = supervise_program(cmd, timeout, cgroup.as_ref().map(|c| &c.cg));
    if let Some(c) = cgroup {
        c.finish();
    }
    let ran = ran.map_err(|e| start_err(e.to_string()))?;
    match ran.status {
        None => Err(ScriptError::TimedOut {
            context: word,
            program: program.to_path_buf(),
            timeout,
        }),
        Some(status) if status.success() => Ok(ran),
        Some(status) => Err(ScriptError::Failed {
            context: word,
            program: program.to_path_buf(),
            how: how_it_ended(status),
            output: ran.output,
        }),
    }
}

/// `exit status 3`, `killed by signal 9` (how a program ended).
pub(crate) fn how_it_ended(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "ended abnormally".into(),
    }
}

/// What a site program did: how it ended (`None`: killed at its timeout) and the first
/// [`OUTPUT_KEPT`] bytes of its output (stdout, then stderr).
pub struct Ran {
    pub status: Option<std::process::ExitStatus>,
    pub output: String,
    /// The standard output alone (its first [`OUTPUT_KEPT`] bytes).
    pub stdout: String,
}

/// Runs one of the site's programs as the agent's user: in `/`, with no standard input,
/// only `env` and a fixed `PATH`, in a process group of its own that is killed whole when
/// it ends or at `timeout`. `Err`: it could not be started.
pub(crate) fn run_site_program(
    program: &Path,
    env: &[(&str, String)],
    timeout: Duration,
) -> std::io::Result<Ran> {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir("/");
    supervise_program(cmd, timeout, None)
}

/// Runs `cmd` with no standard input, its output read (bounded), in a process group of its
/// own that is killed whole when it ends or at `timeout`.
fn supervise_program(
    mut cmd: Command,
    timeout: Duration,
    cgroup: Option<&crate::cgroup::TaskCgroup>,
) -> std::io::Result<Ran> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    // The output is read on threads of its own, so that a program writing more than a
    // pipe holds never blocks on it; only the first OUTPUT_KEPT bytes are kept.
    let (tx, rx) = std::sync::mpsc::channel();
    let mut readers = 0;
    for (i, r) in [
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .enumerate()
    {
        if let Some(r) = r {
            readers += 1;
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _ = tx.send((i, read_bounded(r)));
            });
        }
    }
    drop(tx);
    // Its end is seen without reaping it (WNOWAIT), so that its process group id stays
    // its own while the group is killed.
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    let ended = loop {
        match waitid(Id::Pid(pid), flags) {
            Ok(WaitStatus::StillAlive) if started.elapsed() >= timeout => break false,
            Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Ok(_) | Err(_) => break true,
        }
    };
    // The whole group and cgroup, whether the program ended or not: what it started goes.
    let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
    if let Some(cg) = cgroup {
        cg.kill_all();
    }
    let status = child.wait().ok().filter(|_| ended);
    // Its output, unless something it left (outside a cgroup) holds its pipes open: then
    // what was read within a second more.
    let mut outputs = [String::new(), String::new()];
    let until = Instant::now() + Duration::from_secs(1);
    for _ in 0..readers {
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok((i, text)) => outputs[i] = text,
            Err(_) => break,
        }
    }
    let [stdout, stderr] = outputs;
    Ok(Ran {
        status,
        output: format!("{stdout}{stderr}"),
        stdout,
    })
}

/// A cgroup of its own for a task program ([`run_task_program`]).
struct ProgramCgroup {
    cg: crate::cgroup::TaskCgroup,
    procs: std::os::fd::OwnedFd,
}

impl ProgramCgroup {
    /// Makes `dir` (anew: an empty one left by an earlier try goes first).
    fn make(dir: &Path) -> std::io::Result<ProgramCgroup> {
        let _ = std::fs::remove_dir(dir);
        std::fs::create_dir(dir)?;
        let cg = crate::cgroup::TaskCgroup::existing(dir.to_path_buf());
        match cg.procs_fd() {
            Ok(procs) => Ok(ProgramCgroup { cg, procs }),
            Err(e) => {
                cg.remove();
                Err(std::io::Error::other(e))
            }
        }
    }

    /// Kills what is left in it, waits a moment for it to empty, and removes it (one that
    /// will not empty is left for the run's end, which sweeps its cgroups).
    fn finish(self) {
        let until = Instant::now() + Duration::from_secs(2);
        while self.cg.populated() && Instant::now() < until {
            self.cg.kill_all();
            std::thread::sleep(Duration::from_millis(10));
        }
        self.cg.remove();
    }
}

/// Up to [`OUTPUT_KEPT`] bytes of `r` as text; the rest is read and dropped.
fn read_bounded(mut r: Box<dyn Read + Send>) -> String {
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn facts() -> JobFacts {
        JobFacts {
            job: JobId(42),
            user: "alice".into(),
            uid: 1000,
            gid: 1000,
            nodelist: "n[1-2]".into(),
            partition: "gpu".into(),
            node: "n1".into(),
            gpus: vec![2, 3],
        }
    }

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn a_prolog_sees_the_job_as_slurm_tells_it_and_nothing_of_the_job_s_environment() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("seen");
        let prolog = script(
            dir.path(),
            "prolog",
            &format!(
                "echo \"$SLURM_JOB_ID $SLURM_JOB_USER $SLURM_JOB_UID $SLURM_JOB_NODELIST \
                 $SLURM_JOB_PARTITION $SLURMD_NODENAME $SLURM_SCRIPT_CONTEXT \
                 $CUDA_VISIBLE_DEVICES ${{HOME:-nohome}} $(pwd)\" > {}",
                out.display()
            ),
        );
        let scripts = NodeScripts {
            prolog: Some(prolog),
            ..NodeScripts::default()
        };
        scripts.run(Context::Prolog, &facts()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&out).unwrap().trim(),
            "42 alice 1000 n[1-2] gpu n1 prolog_slurmd 2,3 nohome /"
        );
        // No epilog: nothing to run.
        scripts.run(Context::Epilog, &facts()).unwrap();
    }

    #[test]
    fn a_failing_or_hanging_program_is_reported_with_its_first_line_and_killed_whole() {
        let dir = tempfile::tempdir().unwrap();
        let failing = script(
            dir.path(),
            "epilog",
            "echo; echo 'GPU 3 has XID 79' >&2; exit 3",
        );
        let scripts = NodeScripts {
            epilog: Some(failing.clone()),
            ..NodeScripts::default()
        };
        let err = scripts.run(Context::Epilog, &facts()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "epilog {} failed (exit status 3): GPU 3 has XID 79",
                failing.display()
            )
        );
        // A program that never ends, and its child, are killed at the timeout.
        let marker = dir.path().join("child-alive");
        let hanging = script(
            dir.path(),
            "prolog",
            &format!("(sleep 2; touch {}) & sleep 600", marker.display()),
        );
        let scripts = NodeScripts {
            prolog: Some(hanging),
            timeout: Some(Duration::from_millis(300)),
            ..NodeScripts::default()
        };
        let err = scripts.run(Context::Prolog, &facts()).unwrap_err();
        assert!(matches!(err, ScriptError::TimedOut { .. }), "{err}");
        std::thread::sleep(Duration::from_millis(2500));
        assert!(!marker.exists(), "the prolog's child outlived the timeout");
        // One that cannot start says so.
        let scripts = NodeScripts {
            prolog: Some(dir.path().join("missing")),
            ..NodeScripts::default()
        };
        let err = scripts.run(Context::Prolog, &facts()).unwrap_err();
        assert!(err.to_string().contains("could not be started"), "{err}");
    }

    #[test]
    fn programs_that_others_could_change_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let prolog = script(dir.path(), "prolog", "true");
        let ok = NodeScripts {
            prolog: Some(prolog.clone()),
            dcgm_job_mapping_dir: Some(dir.path().to_path_buf()),
            ..NodeScripts::default()
        };
        ok.check().unwrap();
        std::fs::set_permissions(&prolog, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = ok.check().unwrap_err();
        assert!(err.contains("may be changed by others"), "{err}");
        std::fs::set_permissions(&prolog, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Its directory too: whoever may write there may replace it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = ok.check().unwrap_err();
        assert!(err.contains("may be changed by others"), "{err}");
        let missing = NodeScripts {
            epilog: Some(dir.path().join("missing")),
            ..NodeScripts::default()
        };
        assert!(missing.check().unwrap_err().starts_with("--epilog"));
    }

    #[test]
    fn gpu_mapping_files_name_the_job_while_it_runs_and_are_emptied_after_unless_retaken() {
        let dir = tempfile::tempdir().unwrap();
        let scripts = NodeScripts {
            dcgm_job_mapping_dir: Some(dir.path().to_path_buf()),
            ..NodeScripts::default()
        };
        let f = facts();
        scripts.map_gpus(&f);
        let read = |gpu: u32| std::fs::read_to_string(dir.path().join(gpu.to_string())).unwrap();
        assert_eq!((read(2), read(3)), ("42\n".to_string(), "42\n".to_string()));
        // GPU 3 is taken by job 43 before 42's end is handled: 43 keeps it.
        let other = JobFacts {
            job: JobId(43),
            gpus: vec![3],
            ..facts()
        };
        scripts.map_gpus(&other);
        scripts.unmap_gpus(&f);
        assert_eq!((read(2), read(3)), (String::new(), "43\n".to_string()));
        // A link planted in the directory is replaced, never written through.
        let target = dir.path().join("target");
        std::fs::write(&target, "kept").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("7")).unwrap();
        scripts.map_gpus(&JobFacts {
            gpus: vec![7],
            ..facts()
        });
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
        assert_eq!(read(7), "42\n");
    }
}
