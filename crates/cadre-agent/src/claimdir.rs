//! The directory of a PersistentVolumeClaim on this node, made so that a root agent never
//! acts on anything a user could have placed or replaced.
//!
//! **Given** a claim as the controller's launch order names it ([`ClaimMount`]: its
//! StorageClass's path and its directory's name, `pvc-<uid>`) and the job's user.
//! **Decided**: the claim's directory, `<class path>/pvc-<uid>`, made on first use (mode
//! 0700, the user's) or found (then it must be a directory of the user's), opened for the
//! task's mount. **Must hold**: the class's path is root's all the way down: every
//! directory of it owned by root, each above it searchable by all and writable by root
//! alone (or sticky), the class's directory itself writable by root alone, so no user can
//! put or swap anything in it; the claim's directory is then made and opened relative to
//! the class directory's descriptor, never following a link (`O_NOFOLLOW`), and its owner
//! is set on the open descriptor.

use crate::rundir::BindSource;
use cadre_proto::agent::ClaimMount;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

fn io_err(e: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

fn refused(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, what)
}

/// Whether every directory of `path` is root's: owned by root, not a link; each above the
/// last searchable by all and writable by root alone or sticky; the last (`last_strict`)
/// writable by root alone too.
pub fn root_owned_dirs(path: &Path, last_strict: bool) -> bool {
    if !path.is_absolute() {
        return false;
    }
    let parts: Vec<_> = path.components().skip(1).collect();
    let mut at = PathBuf::from("/");
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let Ok(m) = std::fs::symlink_metadata(&at) else {
            return false;
        };
        if !m.is_dir() || m.uid() != 0 {
            return false;
        }
        let mode = m.mode();
        let last = i + 1 == parts.len();
        let writable_by_others = mode & 0o022 != 0;
        if !last && (mode & 0o001 == 0 || (writable_by_others && mode & 0o1000 == 0)) {
            return false;
        }
        if last && last_strict && writable_by_others {
            return false;
        }
    }
    !parts.is_empty()
}

/// The claim's directory on this node, made if missing, for `owner` (the job's user; `None`
/// when the agent runs as the job's user: then the agent's own), opened to be mounted; and
/// its path (for a container runtime's `--volume`).
pub fn claim_dir(claim: &ClaimMount, owner: Option<(u32, u32)>) -> io::Result<BindSource> {
    let class = Path::new(&claim.class_path);
    if !cadre_k8s::storage::class_path_ok(&claim.class_path) || !root_owned_dirs(class, true) {
        return Err(refused(format!(
            "the StorageClass path {} of claim `{}` is not a directory owned by root all the \
             way down and writable by root alone on this node: no claim directory is made in it",
            class.display(),
            claim.name
        )));
    }
    let volume = &claim.volume;
    let uid_part = volume.strip_prefix("pvc-").unwrap_or_default();
    if uid_part.is_empty() || !uid_part.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return Err(refused(format!(
            "`{volume}` is not a claim directory's name (pvc-<uid>)"
        )));
    }
    let dir = nix::fcntl::open(
        class,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_err)?;
    let (uid, gid) = owner.unwrap_or_else(|| {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    });
    let path = class.join(volume);
    let open = |name: &str| {
        nix::fcntl::openat(
            &dir,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err)
    };
    match open(volume) {
        Ok(fd) => {
            let st = nix::sys::stat::fstat(&fd).map_err(io_err)?;
            if st.st_uid != uid {
                return Err(refused(format!(
                    "{} (claim `{}`) is owned by uid {}, not by the job's user (uid {uid}): not \
                     mounting it",
                    path.display(),
                    claim.name,
                    st.st_uid
                )));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // Made under a name of this agent's alone, given to the user, then put in place
            // whole: another node or job making it at once finds it the user's, or this one
            // loses the race and its own is removed.
            let temp = format!(".{volume}.{}.{}", std::process::id(), unique());
            nix::sys::stat::mkdirat(&dir, temp.as_str(), Mode::from_bits_truncate(0o700))
                .map_err(io_err)?;
            let placed = open(&temp)
                .and_then(|fd| {
                    nix::unistd::fchown(
                        &fd,
                        Some(nix::unistd::Uid::from_raw(uid)),
                        Some(nix::unistd::Gid::from_raw(gid)),
                    )
                    .map_err(io_err)
                })
                .and_then(|()| {
                    match nix::fcntl::renameat2(
                        &dir,
                        temp.as_str(),
                        &dir,
                        volume.as_str(),
                        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
                    ) {
                        // A file system without it (some NFS and FUSE ones): made in place
                        // and given to the user (a launch on another node at that instant
                        // may find it root's and fail, to be retried; a rename could replace
                        // a directory a task already mounts).
                        Err(nix::errno::Errno::EINVAL) => nix::sys::stat::mkdirat(
                            &dir,
                            volume.as_str(),
                            Mode::from_bits_truncate(0o700),
                        )
                        .and_then(|()| {
                            let fd = nix::fcntl::openat(
                                &dir,
                                volume.as_str(),
                                OFlag::O_RDONLY
                                    | OFlag::O_DIRECTORY
                                    | OFlag::O_NOFOLLOW
                                    | OFlag::O_CLOEXEC,
                                Mode::empty(),
                            )?;
                            nix::unistd::fchown(
                                &fd,
                                Some(nix::unistd::Uid::from_raw(uid)),
                                Some(nix::unistd::Gid::from_raw(gid)),
                            )
                        })
                        .map_err(io_err),
                        r => r.map_err(io_err),
                    }
                });
            // Gone when it was renamed; left (empty) when it was not.
            let _ =
                nix::unistd::unlinkat(&dir, temp.as_str(), nix::unistd::UnlinkatFlags::RemoveDir);
            if let Err(e) = placed {
                if e.raw_os_error() != Some(libc::EEXIST) {
                    return Err(e);
                }
                // Made meanwhile: found again, it must be the user's.
                return claim_dir(claim, owner);
            }
        }
        Err(e) => return Err(e),
    }
    BindSource::open_at(&dir, volume, path)
}

/// A number no other call of this process has had.
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn claim(class: &Path, volume: &str) -> ClaimMount {
        ClaimMount {
            name: "data".into(),
            class_path: class.display().to_string(),
            volume: volume.into(),
            read_only: false,
        }
    }

    #[test]
    fn a_class_path_a_user_could_write_in_is_refused() {
        // The temporary directory is under /tmp: sticky, so above the last it passes;
        // the class directory itself, writable by all, does not.
        let top = tempfile::tempdir().unwrap();
        let class = top.path().join("class");
        std::fs::create_dir(&class).unwrap();
        std::fs::set_permissions(&class, std::fs::Permissions::from_mode(0o777)).unwrap();
        if !nix::unistd::geteuid().is_root() {
            // Not root's: refused either way.
            assert!(!root_owned_dirs(&class, true));
            return;
        }
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!root_owned_dirs(&class, true));
        assert!(root_owned_dirs(&class, false));
        let err = claim_dir(&claim(&class, "pvc-1"), Some((65534, 65534))).unwrap_err();
        assert!(err.to_string().contains("writable by root alone"), "{err}");
        std::fs::set_permissions(&class, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(root_owned_dirs(&class, true));
    }

    #[test]
    fn the_directory_is_made_the_user_s_found_again_and_never_through_a_link() {
        if !nix::unistd::geteuid().is_root() {
            return; // Making a directory another user's needs root.
        }
        let top = tempfile::tempdir().unwrap();
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let class = top.path().join("class");
        std::fs::create_dir(&class).unwrap();
        std::fs::set_permissions(&class, std::fs::Permissions::from_mode(0o755)).unwrap();
        let made = claim_dir(&claim(&class, "pvc-1"), Some((65534, 65534))).unwrap();
        let names: Vec<_> = std::fs::read_dir(&class)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["pvc-1"], "no name of the making is left");
        let m = std::fs::symlink_metadata(made.path()).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o777), (65534, 65534, 0o700));
        // Found again, for the same user.
        claim_dir(&claim(&class, "pvc-1"), Some((65534, 65534))).unwrap();
        // Another user's job never gets it.
        let err = claim_dir(&claim(&class, "pvc-1"), Some((1, 1))).unwrap_err();
        assert!(err.to_string().contains("owned by uid 65534"), "{err}");
        // A link where the directory would be is not followed.
        std::os::unix::fs::symlink("/etc", class.join("pvc-2")).unwrap();
        claim_dir(&claim(&class, "pvc-2"), Some((65534, 65534))).unwrap_err();
        // Nor a name that leaves the class directory.
        claim_dir(&claim(&class, "../x"), Some((65534, 65534))).unwrap_err();
        claim_dir(&claim(&class, "pvc-../x"), Some((65534, 65534))).unwrap_err();
    }
}
