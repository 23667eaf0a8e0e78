//! Supervising a running task: its time limit, the `--signal` sent before the end,
//! cancellation, and its outcome.
//!
//! The decisions are a small state machine, [`Supervisor`], with one transition function
//! ([`Supervisor::step`]) fed the caller's clock readings: it never reads a clock itself,
//! so its rules are tested with made-up instants. [`RunningTask`] applies its decisions to
//! a real process (signals to the task's process group) and reaps it.
//!
//! The rules, after Slurm:
//! - at `start + time_limit`: SIGCONT and SIGTERM to the task's process group; after
//!   KillWait, SIGKILL. The outcome is TIMEOUT however the task then ends.
//! - cancel: the same sequence from now, with the task's KillWait or the one the cancel
//!   names (the controller's `Stop` carries its own); the outcome is CANCELLED (a task
//!   already being stopped at its limit stays TIMEOUT).
//! - `--signal=[B:]SIG[@TIME]`: SIG at `start + time_limit - TIME` (at once if TIME is
//!   longer than the limit), once; to the whole process group, or with `B:` to the task's
//!   main process only. Only jobs with a time limit get it.
//! - signals for the task's group also reach every process of its cgroup (one that left
//!   the group with `setsid` included), and SIGKILL is the cgroup's `cgroup.kill`.
//! - when the main process ends, whatever is left of its process group (and of its cgroup)
//!   is killed before the process is reaped, so the group id cannot be reused meanwhile;
//!   the task has ended only once its cgroup is empty, or after the kill timeout
//!   ([`Limits::kill_timeout`]) with what survived named in its outcome (Slurm's
//!   UnkillableStepTimeout, which drains the node "Kill task failed").
//! - outcome: cancelled > timed out > killed by the kernel for memory (only where a task
//!   cgroup says so, see [`crate::cgroup`]) > exit status 0 COMPLETED, anything else
//!   (non-zero exit, death by a signal) FAILED.

use crate::cgroup::{OomCheck, TaskCgroup};
use crate::jobenv::TaskPlace;
use crate::launch_error::LaunchError;
use cadre_core::job::{JobId, JobState};
use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest sleep of [`RunningTask::wait`] between checks of the process.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

pub use cadre_core::run::{PreEndSignal, SignalSpecError, SignalTarget};

/// The limits a task runs under.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// From the task's start; `None`: unlimited.
    pub time_limit: Option<Duration>,
    /// Between SIGTERM and SIGKILL.
    pub kill_wait: Duration,
    pub signal: Option<PreEndSignal>,
    /// How long the processes of a task's cgroup may survive SIGKILL before the task is
    /// reported ended with them named (they may still hold its GPUs).
    pub kill_timeout: Duration,
}

pub use crate::cgroup::DEFAULT_KILL_TIMEOUT;

/// Why the agent is stopping a task.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    TimeLimit,
    Cancelled,
}

/// Where the supervisor is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    Running,
    /// SIGTERM sent; SIGKILL at `kill_at` unless already `killed`.
    Stopping {
        reason: StopReason,
        kill_at: Instant,
        killed: bool,
    },
}

/// What the supervisor is told.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// Time has passed; act on whatever is due.
    Tick,
    /// The controller cancelled the job; SIGKILL after `kill_wait`, or after the task's
    /// own KillWait when `None`.
    Cancel { kill_wait: Option<Duration> },
    /// Kill at once, no grace: the gang could not start and the job goes back to the
    /// queue, so there is nothing for the task to save.
    Abort,
}

/// A signal to send.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SignalAction {
    pub target: SignalTarget,
    pub signal: Signal,
}

/// The decisions of supervision, for one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Supervisor {
    start: Instant,
    limits: Limits,
    pre_end_sent: bool,
    phase: Phase,
}

impl Supervisor {
    pub fn new(start: Instant, limits: Limits) -> Supervisor {
        Supervisor {
            start,
            limits,
            pre_end_sent: false,
            phase: Phase::Running,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// When the task started (its time limit counts from here).
    pub fn start(&self) -> Instant {
        self.start
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        match self.phase {
            Phase::Running => None,
            Phase::Stopping { reason, .. } => Some(reason),
        }
    }

    /// The time limit changed (`scontrol update TimeLimit=`): from the task's start, as
    /// before. A limit already passed stops the task at the next tick.
    pub fn set_time_limit(&mut self, limit: Option<Duration>) {
        self.limits.time_limit = limit;
    }

    fn end(&self) -> Option<Instant> {
        self.limits.time_limit.map(|l| self.start + l)
    }

    fn pre_end_at(&self) -> Option<Instant> {
        let sig = self.limits.signal?;
        let end = self.end()?;
        Some(
            end.checked_sub(Duration::from_secs(sig.before_secs))
                .unwrap_or(self.start)
                .max(self.start),
        )
    }

    /// The next instant at which [`Input::Tick`] would do something.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Running => {
                let pre = self.pre_end_at().filter(|_| !self.pre_end_sent);
                match (pre, self.end()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
            Phase::Stopping {
                kill_at,
                killed: false,
                ..
            } => Some(kill_at),
            Phase::Stopping { killed: true, .. } => None,
        }
    }

    fn begin_stop(
        &mut self,
        reason: StopReason,
        kill_wait: Duration,
        now: Instant,
    ) -> Vec<SignalAction> {
        self.phase = Phase::Stopping {
            reason,
            kill_at: now + kill_wait,
            killed: false,
        };
        [Signal::SIGCONT, Signal::SIGTERM]
            .into_iter()
            .map(|signal| SignalAction {
                target: SignalTarget::Group,
                signal,
            })
            .collect()
    }

    /// The one transition function: what to send now.
    pub fn step(&mut self, input: Input, now: Instant) -> Vec<SignalAction> {
        let mut out = Vec::new();
        match (self.phase, input) {
            (Phase::Running, Input::Cancel { kill_wait }) => {
                let kill_wait = kill_wait.unwrap_or(self.limits.kill_wait);
                out.extend(self.begin_stop(StopReason::Cancelled, kill_wait, now))
            }
            (Phase::Running, Input::Tick) => {
                if let (Some(at), Some(sig)) = (self.pre_end_at(), self.limits.signal)
                    && !self.pre_end_sent
                    && now >= at
                {
                    self.pre_end_sent = true;
                    // Every number a `PreEndSignal` parses from is a Linux signal.
                    if let Ok(signal) = Signal::try_from(sig.signal) {
                        out.push(SignalAction {
                            target: sig.target,
                            signal,
                        });
                    }
                }
                if self.end().is_some_and(|end| now >= end) {
                    out.extend(self.begin_stop(StopReason::TimeLimit, self.limits.kill_wait, now));
                }
            }
            (Phase::Stopping { .. }, Input::Cancel { .. }) => {}
            (_, Input::Abort) => {
                let reason = self.stop_reason().unwrap_or(StopReason::Cancelled);
                self.phase = Phase::Stopping {
                    reason,
                    kill_at: now,
                    killed: true,
                };
                out.push(SignalAction {
                    target: SignalTarget::Group,
                    signal: Signal::SIGKILL,
                });
            }
            (
                Phase::Stopping {
                    reason,
                    kill_at,
                    killed: false,
                },
                Input::Tick,
            ) if now >= kill_at => {
                self.phase = Phase::Stopping {
                    reason,
                    kill_at,
                    killed: true,
                };
                out.push(SignalAction {
                    target: SignalTarget::Group,
                    signal: Signal::SIGKILL,
                });
            }
            (Phase::Stopping { .. }, Input::Tick) => {}
        }
        out
    }
}

/// How the task's main process ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Termination {
    Exited(i32),
    Signaled(i32),
}

/// The job state a task's end means.
pub fn outcome_state(
    reason: Option<StopReason>,
    termination: Termination,
    oom: &OomCheck,
) -> JobState {
    match reason {
        Some(StopReason::Cancelled) => JobState::Cancelled,
        Some(StopReason::TimeLimit) => JobState::Timeout,
        None => match (oom, termination) {
            (OomCheck::Checked { oom_kills }, _) if *oom_kills > 0 => JobState::OutOfMemory,
            (_, Termination::Exited(0)) => JobState::Completed,
            _ => JobState::Failed,
        },
    }
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskOutcome {
    pub job: JobId,
    pub procid: u32,
    pub state: JobState,
    /// Exit status of the main process when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed the main process, when one did.
    pub signal: Option<i32>,
    pub oom: OomCheck,
    /// Processes of the task's cgroup outlived SIGKILL by the kill timeout: which, where.
    pub unkillable: Option<String>,
}

impl TaskOutcome {
    /// Slurm's `ExitCode` column: `code:signal`.
    pub fn slurm_exit_code(&self) -> String {
        format!(
            "{}:{}",
            self.exit_code.unwrap_or(0),
            self.signal.unwrap_or(0)
        )
    }
}

/// The files a task writes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskFiles {
    pub stdout: PathBuf,
    /// `None`: stderr goes to the stdout file.
    pub stderr: Option<PathBuf>,
    /// The output goes through pipes back to `srun` (a job step without output files),
    /// not to these files.
    pub relayed: bool,
}

/// A cancellation asked for, possibly from another thread, and the KillWait it names.
#[derive(Debug, Default)]
struct CancelRequest {
    requested: AtomicBool,
    /// Milliseconds; [`NO_KILL_WAIT`]: the task's own KillWait.
    kill_wait_ms: AtomicU64,
}

/// `CancelRequest::kill_wait_ms` when the cancel names no KillWait.
const NO_KILL_WAIT: u64 = u64::MAX;

impl CancelRequest {
    fn request(&self, kill_wait: Option<Duration>) {
        let ms = kill_wait.map_or(NO_KILL_WAIT, |d| {
            u64::try_from(d.as_millis()).unwrap_or(NO_KILL_WAIT - 1)
        });
        // The KillWait first: a reader that sees `requested` sees it too (SeqCst).
        self.kill_wait_ms.store(ms, Ordering::SeqCst);
        self.requested.store(true, Ordering::SeqCst);
    }

    /// `Some(kill_wait)` once a cancel was asked for.
    fn taken(&self) -> Option<Option<Duration>> {
        if !self.requested.load(Ordering::SeqCst) {
            return None;
        }
        let ms = self.kill_wait_ms.load(Ordering::SeqCst);
        Some((ms != NO_KILL_WAIT).then(|| Duration::from_millis(ms)))
    }
}

/// Cancels a task from another thread; takes effect at the task's next
/// [`RunningTask::poll`].
#[derive(Clone, Debug)]
pub struct TaskCanceller(Arc<CancelRequest>);

impl TaskCanceller {
    /// Cancels with the task's own KillWait.
    pub fn cancel(&self) {
        self.0.request(None);
    }

    /// Cancels with SIGKILL `kill_wait` after SIGTERM.
    pub fn cancel_within(&self, kill_wait: Duration) {
        self.0.request(Some(kill_wait));
    }
}

/// The process the agent supervises a task through: its own child, or (after the agent
/// started again) the keeper its previous life left ([`crate::keeper`]).
#[derive(Debug)]
enum Proc {
    Child(Child),
    /// Not the agent's child: watched through a pidfd (`None`: it was gone already when
    /// adopted), its end read from the task's status file.
    Adopted {
        pid: u32,
        pidfd: Option<OwnedFd>,
    },
}

impl Proc {
    fn pid(&self) -> u32 {
        match self {
            Proc::Child(c) => c.id(),
            Proc::Adopted { pid, .. } => *pid,
        }
    }
}

/// A started task and its supervision.
#[derive(Debug)]
pub struct RunningTask {
    job: JobId,
    place: TaskPlace,
    child: Proc,
    /// The task's status file, when a keeper stands between the agent and the task.
    kept: Option<crate::keeper::StatusFile>,
    /// The site's task epilog, run once the task has ended (taken once).
    after: Option<crate::prolog::TaskEpilogRun>,
    supervisor: Supervisor,
    files: TaskFiles,
    cgroup: Option<TaskCgroup>,
    cancel: Arc<CancelRequest>,
    cancel_applied: bool,
    outcome: Option<TaskOutcome>,
    /// The task's process is a container runtime's `run`: `(runtime command, container
    /// name)`, removed when the task ends (see [`crate::container`]).
    container: Option<(Vec<String>, String)>,
    /// What the task's process leaves behind is not killed when it ends.
    leftovers_outlive: bool,
    /// Its output files, open for reading ([`crate::output`]), until taken.
    readers: Option<crate::output::TaskReaders>,
    /// The main process has ended (reaped) and how, since when: the task waits for its
    /// cgroup to empty.
    ending: Option<(Termination, Instant)>,
}

impl RunningTask {
    pub(crate) fn new(
        job: JobId,
        place: TaskPlace,
        child: Child,
        start: Instant,
        limits: Limits,
        files: TaskFiles,
        cgroup: Option<TaskCgroup>,
    ) -> RunningTask {
        RunningTask::new_with(job, place, Proc::Child(child), start, limits, files, cgroup)
    }

    fn new_with(
        job: JobId,
        place: TaskPlace,
        child: Proc,
        start: Instant,
        limits: Limits,
        files: TaskFiles,
        cgroup: Option<TaskCgroup>,
    ) -> RunningTask {
        RunningTask {
            job,
            place,
            child,
            kept: None,
            after: None,
            supervisor: Supervisor::new(start, limits),
            files,
            cgroup,
            cancel: Arc::new(CancelRequest::default()),
            cancel_applied: false,
            outcome: None,
            container: None,
            leftovers_outlive: false,
            readers: None,
            ending: None,
        }
    }

    /// The task's output files, open for reading (see [`crate::output`]).
    pub(crate) fn reading(mut self, readers: Option<crate::output::TaskReaders>) -> RunningTask {
        self.readers = readers;
        self
    }

    /// Takes the task's output readers (once).
    pub fn take_readers(&mut self) -> Option<crate::output::TaskReaders> {
        self.readers.take()
    }

    /// When the task's process ends, the processes it left in its process group and
    /// cgroup go on (as after an ssh session); its cgroup is then removed only if empty.
    pub(crate) fn leftovers_outlive(mut self, outlive: bool) -> RunningTask {
        self.leftovers_outlive = outlive;
        self
    }

    /// The site's task epilog to run once the task has ended.
    pub(crate) fn after_task(
        mut self,
        epilog: Option<crate::prolog::TaskEpilogRun>,
    ) -> RunningTask {
        self.after = epilog;
        self
    }

    /// The task epilog, once (the worker runs it after the task's end).
    pub fn take_task_epilog(&mut self) -> Option<crate::prolog::TaskEpilogRun> {
        self.after.take()
    }

    /// A keeper stands between the agent and the task; its status file.
    pub(crate) fn kept(mut self, status: Option<crate::keeper::StatusFile>) -> RunningTask {
        self.kept = status;
        self
    }

    /// Supervises again the task of keeper `pid` (started at `keeper_start`, in clock
    /// ticks since boot, as `/proc/PID/stat` says) that a previous life of the agent
    /// started at `start`, in `cgroup`, with its status file `status`. When the status file
    /// says the task ended, or `pid` is no longer that keeper (it ended, and the pid went to
    /// another process), only the status file tells how the task ended.
    #[allow(clippy::too_many_arguments)]
    pub fn adopt(
        job: JobId,
        place: TaskPlace,
        pid: u32,
        keeper_start: u64,
        start: Instant,
        limits: Limits,
        files: TaskFiles,
        cgroup: TaskCgroup,
        status: crate::keeper::StatusFile,
    ) -> RunningTask {
        // Opened first, checked after: a pidfd names one process for good, so a process
        // with the keeper's start time after the open is the keeper itself.
        let pidfd = i32::try_from(pid)
            .ok()
            .filter(|_| status.ended().is_none())
            .and_then(|p| {
                // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
                let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p, 0) };
                // SAFETY: a descriptor just returned by the kernel, owned by nobody else.
                (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
            })
            .filter(|_| crate::keeper::start_time(pid) == Some(keeper_start));
        let mut task = RunningTask::new_with(
            job,
            place,
            Proc::Adopted { pid, pidfd },
            start,
            limits,
            files,
            Some(cgroup),
        );
        task.kept = Some(status);
        task
    }

    /// The task runs in this container (`(runtime command, container name)`).
    pub(crate) fn in_container(mut self, container: Option<(Vec<String>, String)>) -> RunningTask {
        self.container = container;
        self
    }

    /// Removes the task's container, if it has one: it may outlive its runtime's `run`.
    /// Tried again while the runtime refuses if `again` (see [`crate::container::remove`]):
    /// not when the task is dropped, which may be on the agent's async runtime.
    fn remove_container(&self, again: bool) {
        if let Some((runtime, name)) = &self.container
            && let Err(e) = crate::container::remove(runtime, name, again)
        {
            tracing::warn!(job = %self.job, container = %name, error = %e, "cannot remove the task's container");
        }
    }

    pub fn job(&self) -> JobId {
        self.job
    }

    /// The main process (also the process group id): the task's keeper where it has one.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The task's status file, where a keeper keeps it.
    pub fn status_file(&self) -> Option<&crate::keeper::StatusFile> {
        self.kept.as_ref()
    }

    /// The task's container, `(runtime command, container name)`, if it runs in one.
    pub fn container(&self) -> Option<&(Vec<String>, String)> {
        self.container.as_ref()
    }

    /// Whether what the task leaves behind outlives it.
    pub fn outlives(&self) -> bool {
        self.leftovers_outlive
    }

    /// The cgroup the task runs in, if it has one.
    pub fn cgroup(&self) -> Option<&TaskCgroup> {
        self.cgroup.as_ref()
    }

    pub fn place(&self) -> TaskPlace {
        self.place
    }

    pub fn files(&self) -> &TaskFiles {
        &self.files
    }

    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    pub fn canceller(&self) -> TaskCanceller {
        TaskCanceller(Arc::clone(&self.cancel))
    }

    /// Starts stopping the task now (SIGTERM, SIGKILL after KillWait).
    pub fn cancel(&mut self) -> Result<(), LaunchError> {
        self.cancel.request(None);
        self.poll().map(drop)
    }

    /// Starts stopping the task now, with SIGKILL `kill_wait` after SIGTERM.
    pub fn cancel_within(&mut self, kill_wait: Duration) -> Result<(), LaunchError> {
        self.cancel.request(Some(kill_wait));
        self.poll().map(drop)
    }

    /// Whether the task has ended (and been reaped).
    pub fn has_ended(&self) -> bool {
        self.outcome.is_some()
    }

    /// Sends `signal` to the task's processes now (`scancel --signal`); nothing once the
    /// task has ended. Safe from pid reuse: the task is reaped only by
    /// [`RunningTask::poll`], which takes the same `&mut self`, and nothing is sent by pid
    /// after that (see `send`).
    pub fn signal(&mut self, signal: Signal) -> Result<(), LaunchError> {
        if self.outcome.is_some() {
            return Ok(());
        }
        self.send(SignalAction {
            target: SignalTarget::Group,
            signal,
        })
    }

    /// Kills the task at once (no grace) and reaps it.
    pub fn abort(&mut self) -> Result<TaskOutcome, LaunchError> {
        if let Some(o) = &self.outcome {
            return Ok(o.clone());
        }
        for a in self.supervisor.step(Input::Abort, Instant::now()) {
            self.send(a)?;
        }
        self.wait()
    }

    /// The task's time limit changed.
    pub fn set_time_limit(&mut self, limit: Option<Duration>) {
        self.supervisor.set_time_limit(limit);
    }

    /// The read ends of the task's output pipes, when its output is relayed (taken once).
    pub fn take_output(
        &mut self,
    ) -> (
        Option<std::process::ChildStdout>,
        Option<std::process::ChildStderr>,
    ) {
        match &mut self.child {
            Proc::Child(c) => (c.stdout.take(), c.stderr.take()),
            Proc::Adopted { .. } => (None, None),
        }
    }

    /// When [`RunningTask::poll`] next has something to do besides noticing an exit.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.supervisor.next_deadline()
    }

    fn pid_nix(&self) -> Pid {
        // A pid always fits in pid_t: the kernel handed it out as one.
        Pid::from_raw(self.child.pid() as i32)
    }

    fn wait_error(&self, source: std::io::Error) -> LaunchError {
        LaunchError::Wait {
            job: self.job,
            procid: self.place.procid,
            pid: self.pid_nix().as_raw(),
            source,
        }
    }

    /// Signals the task: its group through its cgroup where it has one (every process it
    /// started, also those that left the group), else the group; its main process alone
    /// for `B:` signals. Once the main process is reaped its pid may belong to anyone:
    /// nothing is sent to it or its group any more.
    fn send(&self, action: SignalAction) -> Result<(), LaunchError> {
        let pid = self.pid_nix();
        let reaped = self.ending.is_some();
        let sent = match action.target {
            SignalTarget::Group => {
                let through_cgroup = match (&self.cgroup, action.signal) {
                    (Some(cg), Signal::SIGKILL) => {
                        cg.kill_all();
                        true
                    }
                    (Some(cg), signal) => cg.signal_all(signal),
                    (None, _) => false,
                };
                // An adopted keeper is not this agent's child: its group id may have
                // been reused, and only its cgroup is signalled.
                let adopted = matches!(self.child, Proc::Adopted { .. });
                if through_cgroup || reaped || adopted {
                    Ok(())
                } else {
                    nix::sys::signal::killpg(pid, action.signal)
                }
            }
            SignalTarget::Leader if reaped => Ok(()),
            // The task's own process, not its keeper (which ignores it).
            SignalTarget::Leader => match &self.kept {
                // Never to a task that has ended: its pid may be anyone's by now.
                Some(k) if k.ended().is_some() => Ok(()),
                Some(k) => match k.wait_task_pid(Duration::from_millis(200)) {
                    Some(task) => nix::sys::signal::kill(Pid::from_raw(task), action.signal),
                    None => Ok(()),
                },
                None => nix::sys::signal::kill(pid, action.signal),
            },
        };
        match sent {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(source) => Err(LaunchError::Signal {
                job: self.job,
                procid: self.place.procid,
                pid: pid.as_raw(),
                signal: action.signal.to_string(),
                source,
            }),
        }
    }

    /// Sends what is due, and returns the outcome once the task has ended. Never waits for
    /// the task; once it has ended, removing its container (if it runs in one) waits for
    /// the runtime (up to 30 s an attempt, and 4 s of pauses while it refuses).
    pub fn poll(&mut self) -> Result<Option<TaskOutcome>, LaunchError> {
        if let Some(o) = &self.outcome {
            return Ok(Some(o.clone()));
        }
        let (termination, since) = match self.ending {
            Some(ending) => ending,
            None => match self.poll_main()? {
                Some(termination) => {
                    let ending = (termination, Instant::now());
                    self.ending = Some(ending);
                    ending
                }
                None => return Ok(None),
            },
        };
        let unkillable = match &self.cgroup {
            Some(cg) if !self.leftovers_outlive && cg.populated() => {
                if since.elapsed() < self.supervisor.limits.kill_timeout {
                    // Killed again: what forked since the last kill goes too.
                    cg.kill_all();
                    return Ok(None);
                }
                let why = format!(
                    "processes {:?} of task {} of job {} are still in {} {:?} after SIGKILL",
                    cg.pids(),
                    self.place.procid,
                    self.job,
                    cg.path().display(),
                    self.supervisor.limits.kill_timeout
                );
                tracing::error!(job = %self.job, procid = self.place.procid, "{why}");
                Some(why)
            }
            _ => None,
        };
        let oom = match &self.cgroup {
            Some(cg) => {
                let check = cg.oom_check();
                cg.remove();
                check
            }
            None => OomCheck::NotDetected {
                why: "the task ran without a cgroup of its own".into(),
            },
        };
        let state = outcome_state(self.supervisor.stop_reason(), termination, &oom);
        let (exit_code, signal) = match termination {
            Termination::Exited(c) => (Some(c), None),
            Termination::Signaled(s) => (None, Some(s)),
        };
        let outcome = TaskOutcome {
            job: self.job,
            procid: self.place.procid,
            state,
            exit_code,
            signal,
            oom,
            unkillable,
        };
        self.outcome = Some(outcome.clone());
        Ok(Some(outcome))
    }

    /// Sends what is due; once the main process has ended, kills what it left (unless
    /// leftovers outlive it), reaps it, removes its container and says how it ended. Never
    /// waits for the task; the container's removal waits for the runtime, up to 30 s an
    /// attempt, and 4 s more in pauses while the runtime refuses.
    fn poll_main(&mut self) -> Result<Option<Termination>, LaunchError> {
        let now = Instant::now();
        let mut actions = Vec::new();
        if !self.cancel_applied
            && let Some(kill_wait) = self.cancel.taken()
        {
            self.cancel_applied = true;
            actions.extend(self.supervisor.step(Input::Cancel { kill_wait }, now));
        }
        actions.extend(self.supervisor.step(Input::Tick, now));
        for a in actions {
            self.send(a)?;
        }
        match &self.child {
            Proc::Child(_) => {
                // WNOWAIT: see the exit without reaping, so the process group cannot
                // vanish and its id be reused before the leftovers are killed.
                let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
                match nix::sys::wait::waitid(Id::Pid(self.pid_nix()), flags) {
                    Ok(WaitStatus::StillAlive) => return Ok(None),
                    Ok(_) => {}
                    Err(e) => return Err(self.wait_error(e.into())),
                }
            }
            // Init reaps an adopted keeper: its cgroup, not its group, is signalled.
            Proc::Adopted { pidfd, .. } => {
                if pidfd.as_ref().is_some_and(|fd| !readable(fd)) {
                    return Ok(None);
                }
            }
        }
        if !self.leftovers_outlive {
            if let Some(cg) = &self.cgroup {
                cg.kill_all();
            }
            self.send(SignalAction {
                target: SignalTarget::Group,
                signal: Signal::SIGKILL,
            })?;
        }
        let status = match &mut self.child {
            Proc::Child(c) => Some(c.wait()),
            Proc::Adopted { .. } => None,
        };
        self.remove_container(true);
        Ok(Some(match status {
            Some(status) => {
                let status = status.map_err(|e| self.wait_error(e))?;
                match (status.code(), status.signal()) {
                    (Some(code), _) => Termination::Exited(code),
                    (None, Some(sig)) => Termination::Signaled(sig),
                    // Neither exited nor signalled cannot come out of waitpid(WEXITED).
                    (None, None) => Termination::Exited(-1),
                }
            }
            // A keeper killed before it could write the end: the task went with it.
            None => match self.kept.as_ref().and_then(|k| k.ended()) {
                Some(crate::keeper::KeptEnd::Exited(c)) => Termination::Exited(c),
                Some(crate::keeper::KeptEnd::Signaled(s)) => Termination::Signaled(s),
                Some(crate::keeper::KeptEnd::Unknown) | None => {
                    Termination::Signaled(Signal::SIGKILL as i32)
                }
            },
        }))
    }

    /// Supervises the task until it ends.
    pub fn wait(&mut self) -> Result<TaskOutcome, LaunchError> {
        loop {
            if let Some(o) = self.poll()? {
                return Ok(o);
            }
            let now = Instant::now();
            let nap = self
                .next_deadline()
                .map_or(POLL_INTERVAL, |d| d.saturating_duration_since(now))
                .min(POLL_INTERVAL);
            std::thread::sleep(nap);
        }
    }
}

/// Whether a pidfd says its process has ended, without waiting.
fn readable(fd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on the stack, no wait.
    unsafe { libc::poll(&mut p, 1, 0) > 0 }
}

impl Drop for RunningTask {
    /// A task is never left running unsupervised: dropping it kills what is left.
    fn drop(&mut self) {
        if self.outcome.is_none() {
            if self.ending.is_none() {
                let _ = self.send(SignalAction {
                    target: SignalTarget::Group,
                    signal: Signal::SIGKILL,
                });
            }
            if let Some(cg) = &self.cgroup {
                cg.kill_all();
            }
            if let Proc::Child(c) = &mut self.child {
                let _ = c.wait();
            }
            self.remove_container(false);
            if let Some(cg) = &self.cgroup {
                cg.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(limit_ms: u64, wait_ms: u64, signal: Option<PreEndSignal>) -> Limits {
        Limits {
            time_limit: Some(Duration::from_millis(limit_ms)),
            kill_wait: Duration::from_millis(wait_ms),
            signal,
            kill_timeout: DEFAULT_KILL_TIMEOUT,
        }
    }

    fn sigs(actions: &[SignalAction]) -> Vec<Signal> {
        actions.iter().map(|a| a.signal).collect()
    }

    #[test]
    fn time_limit_terms_then_kills_after_kill_wait() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut s = Supervisor::new(t0, limits(1000, 300, None));
        assert_eq!(s.next_deadline(), Some(ms(1000)));
        assert!(s.step(Input::Tick, ms(999)).is_empty());
        assert_eq!(
            sigs(&s.step(Input::Tick, ms(1000))),
            vec![Signal::SIGCONT, Signal::SIGTERM]
        );
        assert_eq!(s.stop_reason(), Some(StopReason::TimeLimit));
        assert_eq!(s.next_deadline(), Some(ms(1300)));
        assert!(s.step(Input::Tick, ms(1299)).is_empty());
        assert_eq!(sigs(&s.step(Input::Tick, ms(1300))), vec![Signal::SIGKILL]);
        assert!(s.step(Input::Tick, ms(5000)).is_empty());
        assert_eq!(s.next_deadline(), None);
        // A cancel while timing out changes nothing.
        assert!(
            s.step(Input::Cancel { kill_wait: None }, ms(5000))
                .is_empty()
        );
        assert_eq!(s.stop_reason(), Some(StopReason::TimeLimit));
    }

    #[test]
    fn pre_end_signal_is_sent_once_before_the_limit() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let usr1 = PreEndSignal {
            signal: 10,
            before_secs: 4,
            target: SignalTarget::Leader,
        };
        let mut s = Supervisor::new(t0, limits(10_000, 300, Some(usr1)));
        assert_eq!(s.next_deadline(), Some(ms(6000)));
        assert!(s.step(Input::Tick, ms(5999)).is_empty());
        let a = s.step(Input::Tick, ms(6000));
        assert_eq!(
            a,
            vec![SignalAction {
                target: SignalTarget::Leader,
                signal: Signal::SIGUSR1
            }]
        );
        assert!(s.step(Input::Tick, ms(7000)).is_empty());
        assert_eq!(s.next_deadline(), Some(ms(10_000)));
        // A lead longer than the limit: at once.
        let early = PreEndSignal {
            before_secs: 60,
            ..usr1
        };
        let mut s = Supervisor::new(t0, limits(1000, 300, Some(early)));
        assert_eq!(sigs(&s.step(Input::Tick, t0)), vec![Signal::SIGUSR1]);
    }

    #[test]
    fn cancel_stops_with_the_same_sequence() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut s = Supervisor::new(
            t0,
            Limits {
                time_limit: None,
                kill_wait: Duration::from_millis(100),
                signal: None,
                kill_timeout: DEFAULT_KILL_TIMEOUT,
            },
        );
        assert_eq!(s.next_deadline(), None);
        assert!(s.step(Input::Tick, ms(10_000)).is_empty());
        assert_eq!(
            sigs(&s.step(Input::Cancel { kill_wait: None }, ms(10_000))),
            vec![Signal::SIGCONT, Signal::SIGTERM]
        );
        assert_eq!(s.stop_reason(), Some(StopReason::Cancelled));
        assert_eq!(
            sigs(&s.step(Input::Tick, ms(10_100))),
            vec![Signal::SIGKILL]
        );
    }

    #[test]
    fn a_cancel_may_name_its_own_kill_wait() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut s = Supervisor::new(t0, limits(10_000, 30_000, None));
        let kill_wait = Some(Duration::from_millis(50));
        assert_eq!(
            sigs(&s.step(Input::Cancel { kill_wait }, ms(100))),
            vec![Signal::SIGCONT, Signal::SIGTERM]
        );
        assert_eq!(s.next_deadline(), Some(ms(150)));
        assert_eq!(sigs(&s.step(Input::Tick, ms(150))), vec![Signal::SIGKILL]);
    }

    #[test]
    fn a_cancel_request_carries_its_kill_wait_across_threads() {
        let r = CancelRequest::default();
        assert_eq!(r.taken(), None);
        r.request(None);
        assert_eq!(r.taken(), Some(None));
        r.request(Some(Duration::from_secs(2)));
        assert_eq!(r.taken(), Some(Some(Duration::from_secs(2))));
    }

    #[test]
    fn abort_kills_at_once_and_keeps_a_timeout_a_timeout() {
        let t0 = Instant::now();
        let mut s = Supervisor::new(t0, limits(1000, 300, None));
        assert_eq!(sigs(&s.step(Input::Abort, t0)), vec![Signal::SIGKILL]);
        assert_eq!(s.stop_reason(), Some(StopReason::Cancelled));
        assert_eq!(s.next_deadline(), None);
        let mut s = Supervisor::new(t0, limits(1000, 300, None));
        s.step(Input::Tick, t0 + Duration::from_secs(1));
        assert_eq!(sigs(&s.step(Input::Abort, t0)), vec![Signal::SIGKILL]);
        assert_eq!(s.stop_reason(), Some(StopReason::TimeLimit));
    }

    #[test]
    fn outcomes_map_to_job_states() {
        let none = OomCheck::NotDetected { why: "x".into() };
        let oom = OomCheck::Checked { oom_kills: 1 };
        let clean = OomCheck::Checked { oom_kills: 0 };
        use Termination::*;
        assert_eq!(outcome_state(None, Exited(0), &none), JobState::Completed);
        assert_eq!(outcome_state(None, Exited(0), &clean), JobState::Completed);
        assert_eq!(outcome_state(None, Exited(3), &none), JobState::Failed);
        assert_eq!(outcome_state(None, Signaled(9), &none), JobState::Failed);
        assert_eq!(
            outcome_state(None, Signaled(9), &oom),
            JobState::OutOfMemory
        );
        assert_eq!(
            outcome_state(Some(StopReason::TimeLimit), Exited(0), &oom),
            JobState::Timeout
        );
        assert_eq!(
            outcome_state(Some(StopReason::Cancelled), Signaled(15), &none),
            JobState::Cancelled
        );
    }

    /// A task whose main process has ended, in a cgroup whose `cgroup.events` says
    /// `populated` as given (a made-up cgroup: no process can be made unkillable here).
    fn ended_task_in_cgroup(
        populated: bool,
        kill_timeout: Duration,
    ) -> (RunningTask, tempfile::TempDir) {
        use std::os::unix::process::CommandExt;
        let parent = tempfile::tempdir().unwrap();
        std::fs::write(parent.path().join("cgroup.controllers"), "").unwrap();
        let cg = TaskCgroup::create(parent.path(), JobId(7), 0, None, 0, 0).unwrap();
        let events = format!("populated {}\nfrozen 0\n", u8::from(populated));
        std::fs::write(cg.path().join("cgroup.events"), events).unwrap();
        let child = std::process::Command::new("true")
            .process_group(0)
            .spawn()
            .unwrap();
        let task = RunningTask::new(
            JobId(7),
            TaskPlace {
                index: 0,
                procid: 0,
                localid: 0,
                nodeid: 0,
            },
            child,
            Instant::now(),
            Limits {
                time_limit: None,
                kill_wait: Duration::from_secs(1),
                signal: None,
                kill_timeout,
            },
            TaskFiles {
                stdout: "/dev/null".into(),
                stderr: None,
                relayed: false,
            },
            Some(cg),
        );
        (task, parent)
    }

    #[test]
    fn a_task_ends_only_once_its_cgroup_is_empty_or_names_what_survived_the_kill_timeout() {
        let (mut task, _dir) = ended_task_in_cgroup(true, Duration::from_millis(300));
        // Its process has exited, but its cgroup is not empty: not ended yet.
        let first = loop {
            if task.ending.is_some() {
                break task.poll().unwrap();
            }
            assert!(task.poll().unwrap().is_none());
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(first.is_none(), "ended while its cgroup held processes");
        let outcome = task.wait().unwrap();
        let what = outcome.unkillable.expect("what survived is named");
        assert!(
            what.contains("job7.0.task0") && what.contains("after SIGKILL"),
            "{what}"
        );
        assert_eq!(outcome.state, JobState::Completed);

        let (mut task, _dir) = ended_task_in_cgroup(false, Duration::from_secs(3600));
        let outcome = task.wait().unwrap();
        assert_eq!(outcome.unkillable, None);
        assert_eq!(outcome.exit_code, Some(0));
    }
}
