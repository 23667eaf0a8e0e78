//! What every integration test of the `cadre` binary needs to find and make a cluster's
//! directories (each test file uses some of it).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The run directory `cadre up` makes beside data directory `data` (`<data>.run`), where
/// its socket is.
pub fn run_dir_of(data: &Path) -> PathBuf {
    let mut name = data.as_os_str().to_owned();
    name.push(".run");
    PathBuf::from(name)
}

/// A temporary data directory: the controller refuses one that others may enter.
pub fn private_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .expect("temporary directory")
}
