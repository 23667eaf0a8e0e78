//! A run's directory on this node, and the job's files in it, made so that a root agent
//! never acts on anything a user could have placed or replaced.
//!
//! **Given**: the agent's state directory (the agent's own, writable by it alone: checked
//! at start), a run, and the job's user when the agent is root and the user is not.
//! **Decided**: the layout and ownership of everything the agent makes for the run:
//!
//! | path (in the state directory) | owner | mode | what |
//! |---|---|---|---|
//! | `job<J>.<R>[.step<S>]/` | the agent | 0711 (0700 when the agent is the user) | the run's directory: users may pass through it to their files, list nothing |
//! | `.../script` | the job's user | 0700 | the batch script |
//! | `.../hosts` | the job's user | 0600 | the job's hosts file, mounted over `/etc/hosts` |
//! | `.../mpi/`, `.../volcano/` | the agent | 0755 | mounted over `/etc/mpi`, `/etc/volcano` |
//! | `.../mpi/*`, `.../volcano/*` | the job's user | 0600, or 0700 for programs | MPI's hostfile, `discover_hosts.sh`, the svc plugin's files |
//! | `.../mpi/cadre-rsh` | the agent | link | MPI's rsh agent (a link to the agent's executable) |
//!
//! **Must hold**: no directory the agent writes in, or mounts from, is writable by the
//! job's user or anyone else but the agent, so nothing in it can be swapped for a symbolic
//! link between the agent's checks and its uses. Each file is created with
//! `O_CREAT|O_EXCL|O_NOFOLLOW` relative to its directory's descriptor and its mode and owner
//! are set on the open descriptor (`fchmod`, `fchown`), never by path. What a task gets
//! mounted is opened here with `O_PATH|O_NOFOLLOW` ([`BindSource`]) and mounted through
//! `/proc/self/fd/N` in the task's mount namespace, so the mount is of the file the agent
//! made (reopened by path in the task's new mount namespace, whose tree is the node's
//! copy, without following a link at its end, and compared with the agent's descriptor by
//! device and inode: `mountns::bind_made`). A leftover of an earlier life of the run is removed whole first (`remove_dir_all`
//! does not follow symbolic links). The files are the user's to read (and to change: they
//! are their job's own), other users cannot read them.

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{Mode, fchmod};
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A directory the agent made for a run, open.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    fd: OwnedFd,
    /// The job's user, who owns the files in it (`None`: the agent's own user).
    owner: Option<(u32, u32)>,
}

fn io_err(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl RunDir {
    /// Makes `path` anew (removing whatever is there) and opens it. Mode 0711 when the
    /// files in it belong to another user than the agent's, else 0700.
    pub fn create(path: &Path, owner: Option<(u32, u32)>) -> io::Result<RunDir> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(path)?,
            Ok(_) => std::fs::remove_file(path)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mode = if owner.is_some() { 0o711 } else { 0o700 };
        nix::unistd::mkdir(path, Mode::from_bits_truncate(mode)).map_err(io_err)?;
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err)?;
        fchmod(&fd, Mode::from_bits_truncate(mode)).map_err(io_err)?;
        Ok(RunDir {
            path: path.to_path_buf(),
            fd,
            owner,
        })
    }

    /// The directory's path (for messages and for what finds files by path: the batch
    /// script's command line, the container runtime's mounts).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The job's user, who owns the files in it (`None`: the agent's own user).
    pub(crate) fn owner(&self) -> Option<(u32, u32)> {
        self.owner
    }

    /// A subdirectory `name` (mode 0755, the agent's), made if missing, open.
    pub(crate) fn subdir(&self, name: &str) -> io::Result<RunDir> {
        self.dir_in(name, 0o755, true)
    }

    /// Directory `name` of mode `mode`, made (`existing`: or found), open without
    /// following a link.
    fn dir_in(&self, name: &str, mode: u32, existing: bool) -> io::Result<RunDir> {
        match nix::sys::stat::mkdirat(&self.fd, name, Mode::from_bits_truncate(mode)) {
            Ok(()) => {}
            Err(nix::errno::Errno::EEXIST) if existing => {}
            Err(e) => return Err(io_err(e)),
        }
        let fd = nix::fcntl::openat(
            &self.fd,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err)?;
        fchmod(&fd, Mode::from_bits_truncate(mode)).map_err(io_err)?;
        Ok(RunDir {
            path: self.path.join(name),
            fd,
            owner: self.owner,
        })
    }

    /// A new, empty directory `name` (mode 0700, the agent's until [`RunDir::hand_over`]),
    /// open: a pod's volume. Made, never found: an existing `name` is an error.
    pub(crate) fn user_dir(&self, name: &str) -> io::Result<RunDir> {
        self.dir_in(name, 0o700, false)
    }

    /// Gives the directory to the run's user (once the agent has written what it holds:
    /// the user can place nothing in it before).
    pub(crate) fn hand_over(&self) -> io::Result<()> {
        if let Some((uid, gid)) = self.owner {
            nix::unistd::fchown(
                &self.fd,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )
            .map_err(io_err)?;
        }
        Ok(())
    }

    /// Writes a new file `name` holding `bytes`, its mode `mode` (group's and others' bits
    /// dropped when the file is another user's), owned by the run's user; its path.
    pub(crate) fn write(&self, name: &str, bytes: &[u8], mode: u32) -> io::Result<PathBuf> {
        let mut file = self.new_file(name)?;
        // Not synced to disk: the files live as long as the run, and a run's launch after
        // a crash writes them anew (an fsync per file was a third of a millisecond on each
        // launch).
        file.write_all(bytes)?;
        let mode = if self.owner.is_some() {
            mode & 0o700
        } else {
            mode
        };
        fchmod(file.as_fd(), Mode::from_bits_truncate(mode)).map_err(io_err)?;
        if let Some((uid, gid)) = self.owner {
            nix::unistd::fchown(
                file.as_fd(),
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )
            .map_err(io_err)?;
        }
        Ok(self.path.join(name))
    }

    /// Writes a new file `name` holding `bytes`, the agent's alone (mode 0600, never given
    /// to the run's user): what the agent records for itself.
    pub(crate) fn write_private(&self, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
        self.new_file(name)?.write_all(bytes)?;
        Ok(self.path.join(name))
    }

    /// A new file `name` (mode 0600, the agent's), made, never found, and never through a
    /// link; open for writing.
    fn new_file(&self, name: &str) -> io::Result<std::fs::File> {
        let fd = nix::fcntl::openat(
            &self.fd,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(io_err)?;
        Ok(std::fs::File::from(fd))
    }

    /// A symbolic link `name` to `target`, the agent's.
    pub(crate) fn symlink(&self, name: &str, target: &Path) -> io::Result<PathBuf> {
        nix::unistd::symlinkat(target, &self.fd, name).map_err(io_err)?;
        Ok(self.path.join(name))
    }

    /// `name` in this directory, opened to be mounted.
    pub(crate) fn bind_source(&self, name: &str) -> io::Result<BindSource> {
        BindSource::open_at(&self.fd, name, self.path.join(name))
    }
}

/// A file [`RunDir::write_private`] wrote, read back: opened without following a link and
/// only if it is still the agent's alone (owned by the agent's user, mode 0600).
pub(crate) fn read_private(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let fd = nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_err)?;
    let st = nix::sys::stat::fstat(&fd).map_err(io_err)?;
    if st.st_uid != nix::unistd::geteuid().as_raw() || st.st_mode & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not the agent's alone: not read", path.display()),
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// What a task gets mounted: a file or directory the agent opened with
/// `O_PATH|O_NOFOLLOW` when it made it; the task's mount is of that very file (see the
/// module doc).
#[derive(Clone, Debug)]
pub struct BindSource {
    fd: Arc<OwnedFd>,
    /// Where it was opened, for messages.
    path: PathBuf,
    /// Mounted read-only.
    read_only: bool,
}

impl PartialEq for BindSource {
    fn eq(&self, other: &BindSource) -> bool {
        self.path == other.path
    }
}

impl Eq for BindSource {}

impl BindSource {
    /// `name` in directory `dir` (at `path`), opened to be mounted, never through a link.
    pub(crate) fn open_at(dir: &impl AsFd, name: &str, path: PathBuf) -> io::Result<BindSource> {
        let fd = nix::fcntl::openat(
            dir,
            name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err)?;
        BindSource::checked(fd, path)
    }

    /// `path` opened to be mounted: its last component is not followed if it is a
    /// symbolic link (which is refused); the directories above it must be the agent's.
    pub fn open(path: &Path) -> io::Result<BindSource> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err)?;
        BindSource::checked(fd, path.to_path_buf())
    }

    fn checked(fd: OwnedFd, path: PathBuf) -> io::Result<BindSource> {
        let st = nix::sys::stat::fstatat(&fd, "", AtFlags::AT_EMPTY_PATH).map_err(io_err)?;
        let kind = st.st_mode & libc::S_IFMT;
        if kind != libc::S_IFREG && kind != libc::S_IFDIR {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is not a regular file or directory (a symbolic link?): not mounting it",
                    path.display()
                ),
            ));
        }
        Ok(BindSource {
            fd: Arc::new(fd),
            path,
            read_only: false,
        })
    }

    /// The same, mounted read-only.
    pub(crate) fn read_only(self) -> BindSource {
        BindSource {
            read_only: true,
            ..self
        }
    }

    /// Whether it is mounted read-only.
    pub(crate) fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Whether it is a directory (else a regular file: see [`BindSource::open`]).
    pub(crate) fn is_dir(&self) -> bool {
        nix::sys::stat::fstatat(&*self.fd, "", AtFlags::AT_EMPTY_PATH)
            .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
    }

    /// Where it was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor, open in this process and its children until they exec.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_private_record_is_read_back_only_while_it_is_the_agent_s_alone() {
        let top = tempfile::tempdir().unwrap();
        let dir = RunDir::create(&top.path().join("job1.0"), None).unwrap();
        let path = dir.write_private("record", b"mine").unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(read_private(&path).unwrap(), b"mine");
        // Made readable by others: no longer trusted.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = read_private(&path).unwrap_err();
        assert!(err.to_string().contains("not the agent's alone"), "{err}");
        // A link in its place is not followed.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        read_private(&path).unwrap_err();
        // Never made over an existing name.
        dir.write_private("record", b"again").unwrap_err();
    }

    #[test]
    fn files_are_made_new_with_their_modes_and_never_through_a_link() {
        let top = tempfile::tempdir().unwrap();
        let path = top.path().join("job1.0");
        // A leftover of an earlier life, holding a link out.
        std::fs::create_dir(&path).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", path.join("hosts")).unwrap();
        let dir = RunDir::create(&path, None).unwrap();
        assert_eq!(mode(&path), 0o700);
        let hosts = dir.write("hosts", b"127.0.0.1 x\n", 0o644).unwrap();
        assert_eq!(std::fs::read_to_string(&hosts).unwrap(), "127.0.0.1 x\n");
        assert_eq!(mode(&hosts), 0o644);
        // No file is written twice, nor through a link.
        let err = dir.write("hosts", b"again", 0o644).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        std::os::unix::fs::symlink("/etc/passwd", path.join("evil")).unwrap();
        let passwd = std::fs::read("/etc/passwd").unwrap();
        assert!(dir.write("evil", b"x", 0o644).is_err());
        assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd);
        // A link is not mounted.
        let err = dir.bind_source("evil").unwrap_err();
        assert!(
            err.raw_os_error() == Some(libc::ELOOP) || err.to_string().contains("symbolic"),
            "{err}"
        );
        let source = dir.bind_source("hosts").unwrap();
        assert_eq!(source.path(), hosts);
        let mpi = dir.subdir("mpi").unwrap();
        assert_eq!(mode(mpi.path()), 0o755);
        let tool = mpi
            .write("discover_hosts.sh", b"#!/bin/sh\n", 0o755)
            .unwrap();
        assert_eq!(mode(&tool), 0o755);
    }

    #[test]
    fn another_user_s_files_are_theirs_alone_in_a_directory_they_cannot_change() {
        if !nix::unistd::geteuid().is_root() {
            return; // only root gives files away
        }
        let top = tempfile::tempdir().unwrap();
        let path = top.path().join("job2.0");
        let dir = RunDir::create(&path, Some((65534, 65534))).unwrap();
        assert_eq!(mode(&path), 0o711);
        assert_eq!(std::fs::metadata(&path).unwrap().uid(), 0);
        let script = dir.write("script", b"#!/bin/sh\n", 0o700).unwrap();
        let hosts = dir.write("hosts", b"x\n", 0o644).unwrap();
        for (file, want) in [(&script, 0o700), (&hosts, 0o600)] {
            let m = std::fs::metadata(file).unwrap();
            assert_eq!((m.uid(), m.gid()), (65534, 65534), "{}", file.display());
            assert_eq!(mode(file), want, "{}", file.display());
        }
        let mpi = dir.subdir("mpi").unwrap();
        assert_eq!(std::fs::metadata(mpi.path()).unwrap().uid(), 0);
        let tool = mpi
            .write("discover_hosts.sh", b"#!/bin/sh\n", 0o755)
            .unwrap();
        assert_eq!(mode(&tool), 0o700);
    }
}
