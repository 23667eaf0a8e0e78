//! A task's own view of the node's files: the job's hosts file over `/etc/hosts` (and its
//! MPI and Volcano files over `/etc/mpi` and `/etc/volcano`), in a mount namespace of the
//! task's own, so that the names of a job's tasks resolve through the system resolver
//! while the node's own files stay untouched.
//!
//! A root agent makes the mount namespace directly. An agent that is not root cannot, but
//! where the kernel lets unprivileged users make user namespaces (Linux's default; some
//! distributions restrict it) the task gets a user namespace of its own first, in which its
//! uid and gid are mapped to themselves: the task keeps its identity (the files it writes
//! are the user's), and the namespace's capabilities allow the mounts. What a task in such a
//! namespace sees differently: other users' files and processes show as owned by the
//! overflow id (`nobody`), and set-uid programs (`sudo`) do not gain privileges. An agent
//! that can do neither leaves the files in the run's directory and names them in variables
//! (`CADRE_HOSTS_FILE`, ...).
//!
//! Everything here that runs in a forked child makes system calls only (no allocation, no
//! locks): see the soundness note in [`crate::launch`].

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::{MsFlags, mount};
use nix::sched::CloneFlags;
use nix::sys::stat::Mode;
use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// How this agent gives a task the job's files at their usual paths.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TaskMounts {
    /// The agent is root: a mount namespace of the task's own; the mount points
    /// (`/etc/mpi`, `/etc/volcano`) are created on the node where missing.
    Root,
    /// The agent is not root and the kernel lets it make user namespaces: a user namespace
    /// of the task's own, with a mount namespace in it. Only paths that exist on the node
    /// can be mounted over.
    UserNamespace,
    /// Neither: the files stay in the run's directory.
    None,
}

impl TaskMounts {
    /// Whether the job's files can be mounted over the node's.
    pub fn can_bind(self) -> bool {
        self != TaskMounts::None
    }

    /// Whether a directory of the job's files can be mounted at `at` (absolute): a root
    /// agent creates the mount point; in a user namespace it must exist on the node.
    pub fn can_mount_at(self, at: &str) -> bool {
        match self {
            TaskMounts::Root => true,
            TaskMounts::UserNamespace => std::path::Path::new(at).is_dir(),
            TaskMounts::None => false,
        }
    }

    /// What this agent can do, tried once: a root agent mounts; otherwise a child enters a
    /// user namespace of its own and mounts the node's `/etc/hosts` over itself, exactly
    /// as a task would. Says why at warning level when it cannot.
    pub fn probe() -> TaskMounts {
        if nix::unistd::geteuid().is_root() {
            return TaskMounts::Root;
        }
        match try_user_namespace() {
            Ok(()) => {
                tracing::info!(
                    "the agent is not root: each task gets a user namespace of its own, in which the job's hosts file is mounted over /etc/hosts"
                );
                TaskMounts::UserNamespace
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "the agent is not root and cannot make user namespaces: the names of a job's tasks and nodes will not resolve through /etc/hosts; CADRE_HOSTS_FILE names the job's hosts file"
                );
                TaskMounts::None
            }
        }
    }
}

/// The contents of `/proc/self/uid_map` and `gid_map` that map the caller's ids to
/// themselves, made before the fork.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UserMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl UserMaps {
    /// The maps of the calling process's effective ids.
    pub(crate) fn own() -> UserMaps {
        let uid = nix::unistd::geteuid();
        let gid = nix::unistd::getegid();
        UserMaps {
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
        }
    }
}

/// In a forked child: leaves the node's mount namespace for a private one of its own
/// (inside a new user namespace when `user` is given), so that nothing mounted in it
/// propagates back to the node; with `hostname`, a UTS namespace of its own too, in which
/// the host name is `hostname` (a pod's: `socket.gethostname()` in the task says it).
pub(crate) fn enter(user: Option<&UserMaps>, hostname: Option<&CStr>) -> Result<(), Errno> {
    let uts = if hostname.is_some() {
        CloneFlags::CLONE_NEWUTS
    } else {
        CloneFlags::empty()
    };
    match user {
        None => nix::sched::unshare(CloneFlags::CLONE_NEWNS | uts)?,
        Some(maps) => {
            nix::sched::unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | uts)?;
            // An unprivileged process may map its gid only once setgroups is denied.
            write_proc(c"/proc/self/setgroups", b"deny")?;
            write_proc(c"/proc/self/uid_map", &maps.uid_map)?;
            write_proc(c"/proc/self/gid_map", &maps.gid_map)?;
        }
    }
    if let Some(name) = hostname {
        // SAFETY: a system call on a NUL-terminated string that outlives it.
        let r = unsafe { libc::sethostname(name.as_ptr(), name.to_bytes().len()) };
        if r != 0 {
            return Err(Errno::last());
        }
    }
    mount(
        None::<&CStr>,
        c"/",
        None::<&CStr>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&CStr>,
    )
}

/// In a forked child, after [`enter`]: a tmpfs of its own at `at`, `nosuid,nodev`, with
/// `options` (`size=N,mode=1777`).
pub(crate) fn tmpfs(at: &CStr, options: &CStr) -> Result<(), Errno> {
    mount(
        Some(c"tmpfs"),
        at,
        Some(c"tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options),
    )
}

/// In a forked child, after [`enter`]: mounts `what` over `at`.
pub(crate) fn bind(what: &CStr, at: &CStr) -> Result<(), Errno> {
    mount(
        Some(what),
        at,
        None::<&CStr>,
        MsFlags::MS_BIND,
        None::<&CStr>,
    )
}

/// In a forked child, after [`enter`]: mounts over `at` the file or directory at `path`,
/// which must be the very one `made` (a descriptor the agent opened when it made it,
/// [`crate::rundir::BindSource`]) is: `path` is opened again here without following a
/// link at its end (the descriptor itself is of the node's mount namespace, which the
/// kernel does not bind from), compared with `made` by device and inode (`ESTALE` when it
/// is another), and mounted through `/proc/self/fd/N`.
pub(crate) fn bind_made(path: &CStr, made: BorrowedFd<'_>, at: &CStr) -> Result<(), Errno> {
    let fd = nix::fcntl::open(
        path,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let now = nix::sys::stat::fstat(&fd)?;
    let then = nix::sys::stat::fstat(made)?;
    if (now.st_dev, now.st_ino) != (then.st_dev, then.st_ino) {
        return Err(Errno::ESTALE);
    }
    let mut buf = [0u8; 32];
    bind(proc_fd_path(fd.as_raw_fd(), &mut buf)?, at)
}

/// In a forked child, after a bind over `at`: makes that mount read-only, keeping the flags
/// it has (a mount namespace made in a user namespace may not clear them).
pub(crate) fn read_only(at: &CStr) -> Result<(), Errno> {
    use nix::sys::statvfs::FsFlags;
    let have = nix::sys::statvfs::statvfs(at)?.flags();
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    for (f, m) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if have.contains(f) {
            flags |= m;
        }
    }
    mount(None::<&CStr>, at, None::<&CStr>, flags, None::<&CStr>)
}

/// `/proc/self/fd/<fd>`, written into `buf` without allocating.
fn proc_fd_path(fd: i32, buf: &mut [u8; 32]) -> Result<&CStr, Errno> {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 10];
    let mut n = u32::try_from(fd).map_err(|_| Errno::EBADF)?;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
    CStr::from_bytes_with_nul(&buf[..=PREFIX.len() + len]).map_err(|_| Errno::EINVAL)
}

fn write_proc(path: &CStr, bytes: &[u8]) -> Result<(), Errno> {
    let fd = nix::fcntl::open(path, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty())?;
    let written = nix::unistd::write(&fd, bytes)?;
    if written == bytes.len() {
        Ok(())
    } else {
        Err(Errno::EIO)
    }
}

/// A child that enters a user namespace and mounts `/etc/hosts` over itself, then exits
/// without exec'ing anything.
fn try_user_namespace() -> std::io::Result<()> {
    let maps = UserMaps::own();
    let mut cmd = Command::new("/");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure runs in the child between fork and exec; `enter` and `bind` make
    // system calls only, on data made before the fork (see the module doc), and `_exit`
    // (async-signal-safe) ends the child without running the parent's destructors or atexit handlers. A
    // child that exits before exec'ing reports success to `spawn`, like a successful exec.
    unsafe {
        cmd.pre_exec(move || {
            let err = |e: Errno| std::io::Error::from_raw_os_error(e as i32);
            enter(Some(&maps), None).map_err(err)?;
            bind(c"/etc/hosts", c"/etc/hosts").map_err(err)?;
            libc::_exit(0)
        });
    }
    let status = {
        let _fork = crate::fork::fork_guard();
        cmd.spawn()?
    }
    .wait()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "the probing child ended with {status}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_s_proc_path_is_written_without_allocating() {
        let mut buf = [0u8; 32];
        assert_eq!(proc_fd_path(0, &mut buf).unwrap(), c"/proc/self/fd/0");
        assert_eq!(proc_fd_path(1234, &mut buf).unwrap(), c"/proc/self/fd/1234");
        assert_eq!(
            proc_fd_path(i32::MAX, &mut buf).unwrap(),
            c"/proc/self/fd/2147483647"
        );
        assert_eq!(proc_fd_path(-1, &mut buf), Err(Errno::EBADF));
    }

    #[test]
    fn maps_name_the_callers_own_ids_once() {
        let maps = UserMaps::own();
        let uid = nix::unistd::geteuid().to_string();
        assert_eq!(maps.uid_map, format!("{uid} {uid} 1").into_bytes());
        let gid = nix::unistd::getegid().to_string();
        assert_eq!(maps.gid_map, format!("{gid} {gid} 1").into_bytes());
    }

    #[test]
    fn mount_points_a_user_namespace_needs_must_exist() {
        assert!(TaskMounts::Root.can_mount_at("/no/such/dir/cadre"));
        assert!(!TaskMounts::UserNamespace.can_mount_at("/no/such/dir/cadre"));
        assert!(TaskMounts::UserNamespace.can_mount_at("/"));
        assert!(!TaskMounts::None.can_mount_at("/"));
        assert!(TaskMounts::UserNamespace.can_bind() && !TaskMounts::None.can_bind());
    }

    #[test]
    fn the_probe_enters_a_user_namespace_and_mounts_in_it() {
        // What a task of an agent that is not root goes through (root may map itself too).
        try_user_namespace().expect("a user namespace with a bind mount in it");
        if nix::unistd::geteuid().is_root() {
            assert_eq!(TaskMounts::probe(), TaskMounts::Root);
        } else {
            assert_eq!(TaskMounts::probe(), TaskMounts::UserNamespace);
        }
    }
}
