//! What every integration test of the `cadre` binary needs to find and make a cluster's
//! directories, and to skip what needs root or tools everywhere but under CI (each test file
//! uses some of it).
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

/// `None`, saying on stderr why `tests` are skipped; under CI (`$CI` set), which must run
/// them (as root, with the tools they need), a failure instead.
pub fn skip_unless_ci<T>(tests: &str, why: &str) -> Option<T> {
    assert!(std::env::var_os("CI").is_none(), "CI runs {tests}: {why}");
    eprintln!("skipped: {why}");
    None
}
