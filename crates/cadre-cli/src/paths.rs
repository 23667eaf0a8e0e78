//! Who may reach a cluster's files on this machine: the daemon's checks of its directories.
//!
//! Two directories, told apart by who must reach them:
//! - the **data directory** (`--data-dir`, `$CADRE_DATA_DIR`, default
//!   `~/.local/share/cadre`): the controller's own, mode 0700, every file in it 0600. It
//!   holds the database (`cadre.db` and its WAL), the agent key, logs and pid files: every
//!   job's environment and script, and the key that is root on every node. The controller
//!   refuses to start on one owned by another user or open to group or others.
//! - the **run directory** (`--run-dir`, `$CADRE_RUN_DIR`, default the data directory's
//!   sibling `<data directory>.run`): what every user of the cluster must reach, mode 0755
//!   and writable by its owner only: the controller's socket (`cadre.sock`, which anyone may
//!   connect to: the kernel tells the controller who they are) and, for the agents of `cadre
//!   up`, their state directories (`nodes/<node>/`, where a job's batch script and files
//!   are). The controller refuses one that is a symbolic link, owned by another user, or
//!   writable by group or others (anyone who could replace the socket could pose as the
//!   controller).
//!
//! Where these directories are by default, and how a client finds the socket in them, is
//! `cadre_client::locate`'s; the checks that a daemon makes before it uses them are here.

use anyhow::{Result, bail};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Creates the data directory (mode 0700) if missing, and refuses one that another user
/// owns or that group or others may enter.
pub fn ensure_private_dir(dir: &Path) -> Result<()> {
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        bail!("failed to create the data directory {}: {e}", dir.display());
    }
    let meta = std::fs::metadata(dir)
        .map_err(|e| anyhow::anyhow!("failed to read the data directory {}: {e}", dir.display()))?;
    check_owner(dir, &meta, "the data directory")?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "the data directory {} is open to group or others (mode {mode:03o}): it holds the database and the agent key; `chmod 700 {}` and start again",
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}

/// Creates the run directory (mode 0755) if missing, and refuses one that is a symbolic
/// link, that another user owns, or that group or others may write to.
pub fn ensure_public_dir(dir: &Path) -> Result<()> {
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => {
            // Whatever the umask: every user must reach the socket.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| anyhow::anyhow!("failed to set the mode of {}: {e}", dir.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => bail!("failed to create the run directory {}: {e}", dir.display()),
    }
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| anyhow::anyhow!("failed to read the run directory {}: {e}", dir.display()))?;
    if meta.file_type().is_symlink() {
        bail!(
            "the run directory {} is a symbolic link: give the directory itself (--run-dir)",
            dir.display()
        );
    }
    if !meta.is_dir() {
        bail!("the run directory {} is not a directory", dir.display());
    }
    check_owner(dir, &meta, "the run directory")?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        bail!(
            "the run directory {} is writable by group or others (mode {mode:03o}): anyone could replace the controller's socket; `chmod 755 {}` and start again",
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}

/// Refuses a secret's file (the agent key) that another user owns or that group or others
/// may read or write.
pub fn check_secret_file(path: &Path, what: &str) -> Result<()> {
    let meta = std::fs::metadata(path)
        .map_err(|e| anyhow::anyhow!("failed to read {what} {}: {e}", path.display()))?;
    check_owner(path, &meta, what)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "{what} {} is open to group or others (mode {mode:03o}): `chmod 600 {}`, and make a new key if others may have read it",
            path.display(),
            path.display()
        );
    }
    Ok(())
}

fn check_owner(path: &Path, meta: &std::fs::Metadata, what: &str) -> Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        bail!(
            "{what} {} belongs to uid {}, not to this process's user (uid {me}); refusing to use it",
            path.display(),
            meta.uid()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_directory_open_to_others_or_a_writable_run_directory_is_refused() {
        let top = tempfile::tempdir().unwrap();
        let data = top.path().join("data");
        ensure_private_dir(&data).unwrap();
        let mode = std::fs::metadata(&data).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = ensure_private_dir(&data).unwrap_err().to_string();
        assert!(err.contains("open to group or others (mode 755)"), "{err}");
        assert!(
            err.contains(&format!("chmod 700 {}", data.display())),
            "{err}"
        );

        let run = top.path().join("data.run");
        ensure_public_dir(&run).unwrap();
        let mode = std::fs::metadata(&run).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = ensure_public_dir(&run).unwrap_err().to_string();
        assert!(
            err.contains("writable by group or others (mode 777)"),
            "{err}"
        );
        let link = top.path().join("link.run");
        std::os::unix::fs::symlink(&run, &link).unwrap();
        let err = ensure_public_dir(&link).unwrap_err().to_string();
        assert!(err.contains("is a symbolic link"), "{err}");

        let key = top.path().join("agent.key");
        std::fs::write(&key, "k\n").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = check_secret_file(&key, "the agent key file")
            .unwrap_err()
            .to_string();
        assert!(err.contains("open to group or others (mode 644)"), "{err}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        check_secret_file(&key, "the agent key file").unwrap();
    }
}
