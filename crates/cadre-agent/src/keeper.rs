//! A task's keeper: the process between the agent and the task's program, which outlives
//! the agent, keeps the task's exit status for it, and enforces the agent's lease when the
//! agent is gone.
//!
//! Why: an agent killed with SIGKILL (a crash, the kernel's out-of-memory killer, an
//! upgrade gone wrong) must not cost its running jobs: its next life re-adopts them
//! ([`crate::service`]). But a process's exit status goes only to its parent, and the
//! parent of a dead agent's children is init. So the child the agent forks for a task
//! forks once more (`KeeperPlan::split`): the grandchild goes on to become the task and
//! exec its program; the child (the keeper) stays behind as its parent, waits for it,
//! writes how it ended into the task's status file in the agent's state directory, and
//! exits the same way (with its exit code, or by its signal), so that an agent that is
//! still there sees exactly what it saw before keepers existed.
//!
//! The keeper also fences: it reads the agent's lease deadline from the lease file
//! ([`LeaseFile`], a CLOCK_MONOTONIC instant the agent moves on at each renewal) and, once
//! the deadline has passed with nobody moving it (the agent dead or cut off), kills the
//! task's cgroup (`cgroup.kill`; the task's process without one). A task therefore never
//! outlives its node's lease, whether or not its agent is alive: the controller requeues a
//! lost node's gangs only after the lease and a margin.
//!
//! Must hold, since the keeper runs between fork and exec of a multi-threaded agent: only
//! system calls, no allocation, no lock (see `KeeperPlan::split`). It is root's when the
//! agent is root (it forks before the task takes the user's identity), so the task's user
//! can neither kill it nor rewrite what it reports; it ignores the catchable signals the
//! agent sends to the task's process group and cgroup (SIGTERM, `scancel --signal`), and
//! dies only by SIGKILL, which ends the task anyway.
//!
//! The status file (`state_dir/tasks/<task cgroup name>`, 0600, made new for each task):
//! bytes 0..4 the task's pid, written by the keeper at once; 4..8 `1` once it has ended;
//! 8..12 its raw wait status; 12..16 `1` if the keeper killed it at the lease's end. All
//! little-endian.

use nix::errno::Errno;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PID_AT: u64 = 0;
const ENDED_AT: u64 = 4;
const STATUS_AT: u64 = 8;
const FENCED_AT: u64 = 12;
const STATUS_LEN: usize = 16;
/// The `ended` word of a task the keeper could not wait for.
const ENDED_UNKNOWN: u32 = 2;

/// The directory of the status files, in the agent's state directory.
pub const TASKS_DIR: &str = "tasks";
/// The lease file, in the agent's state directory.
pub const LEASE_FILE: &str = "lease";

/// The instant of CLOCK_MONOTONIC (the clock of [`Instant`], shared by every process of
/// the machine) at `at`, in nanoseconds.
pub fn monotonic_ns(at: Instant) -> u64 {
    // SAFETY: no argument.
    let now = unsafe { now_ns() };
    let read_at = Instant::now();
    if at >= read_at {
        now.saturating_add(u64::try_from((at - read_at).as_nanos()).unwrap_or(u64::MAX))
    } else {
        now.saturating_sub(u64::try_from((read_at - at).as_nanos()).unwrap_or(u64::MAX))
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds.
fn monotonic_now_ns() -> u64 {
    // SAFETY: no argument.
    unsafe { now_ns() }
}

/// The [`Instant`] of CLOCK_MONOTONIC instant `ns` (now, if it is in the future).
pub fn instant_of_ns(ns: u64) -> Instant {
    let ago = Duration::from_nanos(monotonic_now_ns().saturating_sub(ns));
    Instant::now().checked_sub(ago).unwrap_or_else(Instant::now)
}

/// Opens a file of the agent's state directory for reading and writing, never through a
/// link, never readable by others; made if missing, kept if there (its keepers hold it).
/// Close-on-exec, as every file std opens.
fn open_private(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// The agent's lease deadline, as its tasks' keepers read it: 8 bytes, little-endian, a
/// CLOCK_MONOTONIC instant in nanoseconds; 0: no lease (nothing is killed).
#[derive(Debug)]
pub struct LeaseFile {
    file: File,
    published: std::sync::Mutex<Option<u64>>,
}

impl LeaseFile {
    /// Opens the lease file of `state_dir`, keeping the deadline the previous life of the
    /// agent left in it: its tasks' keepers go on with that until this life renews it.
    pub fn open(state_dir: &Path) -> io::Result<LeaseFile> {
        let file = open_private(&state_dir.join(LEASE_FILE), true)?;
        if file.metadata()?.len() < 8 {
            file.write_all_at(&0u64.to_le_bytes(), 0)?;
        }
        Ok(LeaseFile {
            file,
            published: std::sync::Mutex::new(None),
        })
    }

    /// Sets the deadline (`None`: none); written only when it changed.
    pub fn publish(&self, deadline: Option<Instant>) -> io::Result<()> {
        let ns = deadline.map_or(0, |d| monotonic_ns(d).max(1));
        let mut last = self.published.lock().unwrap_or_else(|p| p.into_inner());
        // Within a millisecond is the same deadline: no write for every frame.
        if last.is_some_and(|l| l.abs_diff(ns) < 1_000_000 && (l == 0) == (ns == 0)) {
            return Ok(());
        }
        self.file.write_all_at(&ns.to_le_bytes(), 0)?;
        *last = Some(ns);
        Ok(())
    }

    /// A descriptor of the file for a keeper (close-on-exec: the task's program does not
    /// get it).
    pub(crate) fn fd(&self) -> io::Result<OwnedFd> {
        above_stdio(OwnedFd::from(self.file.try_clone()?))
    }
}

/// How a kept task ended, as its status file says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum KeptEnd {
    Exited(i32),
    Signaled(i32),
    /// The keeper lost its task (it could not wait for it): how it ended is unknown.
    Unknown,
}

/// A task's status file, as the agent reads it.
#[derive(Debug)]
pub struct StatusFile {
    file: File,
    path: PathBuf,
}

impl StatusFile {
    /// Makes the status file `name` in `dir` (made if missing, 0700): a new file, replacing
    /// what an earlier task of the same name left.
    pub fn create(dir: &Path, name: &str) -> io::Result<StatusFile> {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(dir)?;
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        file.set_len(STATUS_LEN as u64)?;
        Ok(StatusFile { file, path })
    }

    /// Opens the status file at `path` a previous life of the agent made.
    pub fn open(path: &Path) -> io::Result<StatusFile> {
        Ok(StatusFile {
            file: open_private(path, false)?,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn word(&self, at: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        self.file.read_exact_at(&mut b, at).ok()?;
        Some(u32::from_le_bytes(b))
    }

    /// The task's own pid (the keeper's child), once the keeper wrote it.
    pub fn task_pid(&self) -> Option<i32> {
        self.word(PID_AT).map(|p| p as i32).filter(|&p| p > 0)
    }

    /// How the task ended, once it has.
    pub fn ended(&self) -> Option<KeptEnd> {
        match self.word(ENDED_AT)? {
            1 => {}
            ENDED_UNKNOWN => return Some(KeptEnd::Unknown),
            _ => return None,
        }
        let status = self.word(STATUS_AT)? as i32;
        Some(if libc::WIFSIGNALED(status) {
            KeptEnd::Signaled(libc::WTERMSIG(status))
        } else {
            KeptEnd::Exited(libc::WEXITSTATUS(status))
        })
    }

    /// Whether the keeper killed the task at the lease's end (its agent gone).
    pub fn fenced(&self) -> bool {
        self.word(FENCED_AT) == Some(1)
    }

    /// The task's pid, waiting a moment for the keeper to write it (it does at once).
    pub fn wait_task_pid(&self, within: Duration) -> Option<i32> {
        let until = Instant::now() + within;
        loop {
            if let Some(p) = self.task_pid() {
                return Some(p);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A descriptor for the keeper.
    pub(crate) fn fd(&self) -> io::Result<OwnedFd> {
        above_stdio(OwnedFd::from(self.file.try_clone()?))
    }

    /// Removes the file (the task's end was told).
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where a node's tasks get their keepers: the status files' directory and the agent's
/// lease file.
#[derive(Clone, Debug)]
pub struct Keepers {
    pub dir: PathBuf,
    pub lease: std::sync::Arc<LeaseFile>,
}

impl PartialEq for Keepers {
    fn eq(&self, other: &Keepers) -> bool {
        self.dir == other.dir && std::sync::Arc::ptr_eq(&self.lease, &other.lease)
    }
}

impl Eq for Keepers {}

impl Keepers {
    /// The keepers of an agent whose state directory is `state_dir`, with its lease file.
    pub fn new(state_dir: &Path, lease: std::sync::Arc<LeaseFile>) -> Keepers {
        Keepers {
            dir: state_dir.join(TASKS_DIR),
            lease,
        }
    }
}

/// What a keeper needs, opened by the agent before the fork.
#[derive(Debug)]
pub(crate) struct KeeperPlan {
    pub(crate) status: OwnedFd,
    pub(crate) lease: OwnedFd,
    /// The task cgroup's `cgroup.kill`; `None`: the task has no cgroup.
    pub(crate) kill: Option<OwnedFd>,
}

impl KeeperPlan {
    /// In the child of the agent's fork, before anything else changes it but its cgroup:
    /// forks the task's process and returns in it; the keeper never returns.
    pub(crate) fn split(&self) -> Result<(), Errno> {
        // SAFETY: fork in a single-threaded child (the agent's fork left it one thread);
        // both sides only make system calls afterwards (see `keep`).
        match unsafe { libc::fork() } {
            -1 => Err(Errno::last()),
            0 => Ok(()),
            task => self.keep(task),
        }
    }

    /// The keeper's life: system calls only.
    fn keep(&self, task: libc::pid_t) -> ! {
        let status = self.status.as_raw_fd();
        let lease = self.lease.as_raw_fd();
        let kill = self.kill.as_ref().map_or(-1, |k| k.as_raw_fd());
        // SAFETY (the whole function): direct system calls on descriptors this process
        // owns and on stack buffers; no allocation, no lock, nothing of the parent's state.
        unsafe {
            pwrite_all(status, &(task as u32).to_le_bytes(), PID_AT);
            // Deaf to every signal but SIGKILL and SIGSTOP, which cannot be caught, and
            // SIGCHLD, whose default it needs to wait for its task: whatever reaches the
            // task's process group (`scancel --signal=ABRT`) leaves it be. Never dumped: it
            // is a copy of the agent's memory.
            for sig in 1..libc::SIGRTMAX() {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP && sig != libc::SIGCHLD {
                    libc::signal(sig, libc::SIG_IGN);
                }
            }
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            // The last the kernel kills for lack of memory: its task's end depends on it.
            let adj = libc::open(
                c"/proc/self/oom_score_adj".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            if adj >= 0 {
                libc::write(adj, b"-1000".as_ptr().cast(), 5);
                libc::close(adj);
            }
            // Nothing of the task's: its output pipes (the agent must see them close when
            // the task's close), std's exec-error pipe, the launch report pipe.
            for fd in 0..3 {
                libc::close(fd);
            }
            close_others(&mut [status, lease, kill]);
            let pidfd = libc::syscall(libc::SYS_pidfd_open, task, 0) as libc::c_int;
            let mut fenced = false;
            let mut wait_status: libc::c_int = 0;
            loop {
                let got = libc::waitpid(task, &mut wait_status, libc::WNOHANG);
                if got == task {
                    break;
                }
                if got == -1 && *libc::__errno_location() == libc::ECHILD {
                    // Cannot happen to a parent that does not ignore SIGCHLD; said if it does.
                    pwrite_all(status, &ENDED_UNKNOWN.to_le_bytes(), ENDED_AT);
                    libc::_exit(255);
                }
                let deadline = read_u64(lease);
                let now = now_ns();
                let mut wait_ms: libc::c_int = 1000;
                if deadline != 0 && !fenced {
                    if now >= deadline {
                        fenced = true;
                        pwrite_all(status, &1u32.to_le_bytes(), FENCED_AT);
                        if kill >= 0 {
                            libc::write(kill, b"1".as_ptr().cast(), 1);
                        }
                        libc::kill(task, libc::SIGKILL);
                    } else {
                        wait_ms = ((deadline - now) / 1_000_000 + 1).min(1000) as libc::c_int;
                    }
                }
                if pidfd >= 0 {
                    let mut p = libc::pollfd {
                        fd: pidfd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    libc::poll(&mut p, 1, wait_ms);
                } else {
                    let t = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 50_000_000,
                    };
                    libc::nanosleep(&t, std::ptr::null_mut());
                }
            }
            pwrite_all(status, &(wait_status as u32).to_le_bytes(), STATUS_AT);
            pwrite_all(status, &1u32.to_le_bytes(), ENDED_AT);
            // Ended as the task did, for an agent that is still its parent.
            if libc::WIFSIGNALED(wait_status) {
                let sig = libc::WTERMSIG(wait_status);
                let none = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &none);
                libc::signal(sig, libc::SIG_DFL);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, sig);
                libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::kill(libc::getpid(), sig);
                libc::_exit(128 + sig);
            }
            libc::_exit(libc::WEXITSTATUS(wait_status))
        }
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds (system call only).
unsafe fn now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a stack timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The lease deadline, read twice until both reads agree (a write may be under way).
unsafe fn read_u64(fd: libc::c_int) -> u64 {
    loop {
        let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
        // SAFETY: stack buffers of the length given.
        let (ra, rb) = unsafe {
            (
                libc::pread(fd, a.as_mut_ptr().cast(), 8, 0),
                libc::pread(fd, b.as_mut_ptr().cast(), 8, 0),
            )
        };
        if ra != 8 || rb != 8 {
            return 0;
        }
        if a == b {
            return u64::from_le_bytes(a);
        }
    }
}

unsafe fn pwrite_all(fd: libc::c_int, bytes: &[u8], at: u64) {
    // SAFETY: a buffer of the length given; a short write of a few bytes to a regular file
    // does not happen, and there is nobody to tell if it did.
    unsafe { libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), at as libc::off_t) };
}

/// Closes every descriptor from 3 up but those in `keep` (-1: none).
unsafe fn close_others(keep: &mut [libc::c_int; 3]) {
    keep.sort_unstable();
    let mut from: libc::c_uint = 3;
    for &k in keep.iter() {
        if k < 3 {
            continue;
        }
        let k = k as libc::c_uint;
        if k > from {
            // SAFETY: this process's own descriptors.
            unsafe { close_range(from, k - 1) };
        }
        from = k + 1;
    }
    // SAFETY: as above.
    unsafe { close_range(from, libc::c_uint::MAX) };
}

/// Closes descriptors `from..=to`: `close_range` (Linux 5.9), else one by one up to the
/// process's limit (older kernels, and seccomp profiles that refuse it).
unsafe fn close_range(from: libc::c_uint, to: libc::c_uint) {
    // SAFETY: this process's own descriptors; getrlimit on a stack struct.
    unsafe {
        if libc::syscall(libc::SYS_close_range, from, to, 0) == 0 {
            return;
        }
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 20) as libc::c_uint
        } else {
            1024
        };
        let mut fd = from;
        while fd <= to && fd < top {
            libc::close(fd as libc::c_int);
            fd += 1;
        }
    }
}

/// `fd` moved above the standard descriptors (0 to 2, which the child's own standard
/// input and outputs replace), close-on-exec: what a keeper keeps must not be among them.
pub(crate) fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    let raw = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))?;
    // SAFETY: a descriptor F_DUPFD_CLOEXEC just returned; nothing else owns it.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) })
}

/// When process `pid` started, in clock ticks since boot (`/proc/PID/stat`'s 22nd field):
/// with its pid, what tells one process from a later one given the same pid.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields after its last `)`.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The name of a task's status file: its cgroup's (`job<J>.<R>[.step<S>].task<T>`).
pub fn status_name(job: u64, run: u32, step: Option<u32>, procid: u32) -> String {
    match step {
        None => format!("job{job}.{run}.task{procid}"),
        Some(s) => format!("job{job}.{run}.step{s}.task{procid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_file_reads_nothing_until_the_keeper_writes_and_then_how_the_task_ended() {
        let dir = tempfile::tempdir().unwrap();
        let s = StatusFile::create(&dir.path().join("tasks"), "job1.0.task0").unwrap();
        assert_eq!((s.task_pid(), s.ended(), s.fenced()), (None, None, false));
        let fd = s.fd().unwrap();
        // SAFETY: test descriptors.
        unsafe {
            pwrite_all(fd.as_raw_fd(), &77u32.to_le_bytes(), PID_AT);
            pwrite_all(fd.as_raw_fd(), &((3 << 8) as u32).to_le_bytes(), STATUS_AT);
            pwrite_all(fd.as_raw_fd(), &1u32.to_le_bytes(), ENDED_AT);
        }
        assert_eq!(s.task_pid(), Some(77));
        assert_eq!(s.ended(), Some(KeptEnd::Exited(3)));
        // SAFETY: as above.
        unsafe { pwrite_all(fd.as_raw_fd(), &9u32.to_le_bytes(), STATUS_AT) };
        assert_eq!(s.ended(), Some(KeptEnd::Signaled(9)));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(s.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn the_lease_file_holds_a_monotonic_deadline_or_zero_and_keeps_the_previous_life_s() {
        let dir = tempfile::tempdir().unwrap();
        let lease = LeaseFile::open(dir.path()).unwrap();
        // SAFETY: a test descriptor.
        let read = |l: &LeaseFile| unsafe { read_u64(l.fd().unwrap().as_raw_fd()) };
        assert_eq!(read(&lease), 0);
        let at = Instant::now() + Duration::from_secs(10);
        lease.publish(Some(at)).unwrap();
        // SAFETY: no argument.
        let now = unsafe { now_ns() };
        let d = read(&lease);
        assert!(
            d > now + 9_000_000_000 && d < now + 11_000_000_000,
            "{d} vs {now}"
        );
        drop(lease);
        let again = LeaseFile::open(dir.path()).unwrap();
        assert_eq!(
            read(&again),
            d,
            "a new life keeps the deadline until it renews"
        );
        again.publish(None).unwrap();
        assert_eq!(read(&again), 0);
    }
}
