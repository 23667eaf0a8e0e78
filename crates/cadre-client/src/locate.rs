//! Where a cluster's controller is found on this machine.
//!
//! A cluster has a **data directory** (`$CADRE_DATA_DIR`, default `~/.local/share/cadre`),
//! private to the controller's user, and a **run directory** (`$CADRE_RUN_DIR`, default the
//! data directory's sibling `<data directory>.run`) that every user of the cluster reaches:
//! the controller's socket (`cadre.sock`) is there. A client finds the socket from the same
//! two variables, so that `CADRE_DATA_DIR` alone still names a cluster; users of a cluster
//! they do not run set `CADRE_SERVER` (or `CADRE_RUN_DIR`), since they cannot read its data
//! directory. The checks the controller makes on these directories belong to the daemon,
//! not here.

use std::path::{Path, PathBuf};

/// `$CADRE_DATA_DIR`, else `~/.local/share/cadre` (`/tmp/.local/share/cadre` without a
/// home).
pub fn default_data_dir() -> PathBuf {
    match std::env::var_os("CADRE_DATA_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let home =
                std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
            home.join(".local/share/cadre")
        }
    }
}

/// The run directory of the data directory `data`: `$CADRE_RUN_DIR`, else `data`'s
/// sibling `<name>.run`.
pub fn run_dir_of(data: &Path) -> PathBuf {
    match std::env::var_os("CADRE_RUN_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => sibling_run_dir(data),
    }
}

/// `data`'s sibling `<name>.run` (whatever `data`'s trailing slashes or dots), whatever
/// the environment says.
pub fn sibling_run_dir(data: &Path) -> PathBuf {
    let data = std::path::absolute(data).unwrap_or_else(|_| data.to_path_buf());
    let mut clean = PathBuf::new();
    for c in data.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                clean.pop();
            }
            other => clean.push(other),
        }
    }
    match (clean.parent(), clean.file_name()) {
        (Some(parent), Some(name)) => {
            let mut name = name.to_os_string();
            name.push(".run");
            parent.join(name)
        }
        _ => PathBuf::from("/cadre.run"),
    }
}

/// The controller's socket in run directory `run`.
pub fn socket_in(run: &Path) -> PathBuf {
    run.join("cadre.sock")
}

/// The most replicated controllers `cadre up --replicas` runs on one machine.
pub const MAX_LOCAL_REPLICAS: u8 = 5;

/// The socket of replica `i` (1 to [`MAX_LOCAL_REPLICAS`]) of `cadre up --replicas` in run
/// directory `run`: the first has the controller's usual socket, so that a single
/// controller's clients find it; the others `cadre-2.sock` and so on.
pub fn replica_socket_in(run: &Path, i: u8) -> PathBuf {
    match i {
        0 | 1 => socket_in(run),
        i => run.join(format!("cadre-{i}.sock")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_replica_has_the_controller_s_socket_and_the_others_their_own() {
        let run = Path::new("/r");
        assert_eq!(replica_socket_in(run, 1), socket_in(run));
        assert_eq!(replica_socket_in(run, 2), Path::new("/r/cadre-2.sock"));
    }

    #[test]
    fn the_run_directory_is_the_data_directory_s_sibling() {
        assert_eq!(
            sibling_run_dir(Path::new("/var/lib/cadre")),
            Path::new("/var/lib/cadre.run")
        );
        assert_eq!(
            sibling_run_dir(Path::new("/var/lib/cadre/")),
            Path::new("/var/lib/cadre.run")
        );
        assert_eq!(
            sibling_run_dir(Path::new("/var/lib/./x/../cadre/.")),
            Path::new("/var/lib/cadre.run")
        );
        assert_eq!(sibling_run_dir(Path::new("/")), Path::new("/cadre.run"));
    }
}
