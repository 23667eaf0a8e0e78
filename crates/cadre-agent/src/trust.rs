//! Whether a file or directory the agent acts on could be changed by anyone but root (or
//! the agent's own user): the one rule behind the trust checks of the site's programs
//! ([`crate::prolog::trusted`]) and of the cgroup hierarchy ([`crate::cgroup`]).

/// Whether anyone but root (or this process's user) may change what `meta` describes: it
/// is another user's, or group or others may write it.
pub(crate) fn others_may_change(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    (meta.uid() != 0 && meta.uid() != me) || meta.mode() & 0o022 != 0
}
