//! What the agent's integration tests share: whether they run as root, and skipping what
//! needs root (or a container runtime) everywhere but under CI (`$CI` set), which runs the
//! tests as root and must run them all.
#![allow(dead_code)]

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `None`, saying on stderr why `tests` are skipped; under CI, which must run them, a
/// failure instead.
pub fn skip_unless_ci<T>(tests: &str, why: &str) -> Option<T> {
    assert!(std::env::var_os("CI").is_none(), "CI runs {tests}: {why}");
    eprintln!("skipped: {why}");
    None
}

/// Whether a test that needs root goes on: as root it does; otherwise it is skipped, saying
/// `why`, except under CI, where it fails.
pub fn root_or_skip(tests: &str, why: &str) -> bool {
    if is_root() {
        return true;
    }
    skip_unless_ci::<()>(tests, why);
    false
}
