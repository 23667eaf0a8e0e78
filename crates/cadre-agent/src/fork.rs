//! The lock around every fork of a task ([`fork_guard`]), and holding forks off while a file
//! that will be executed is open for writing ([`no_fork_guard`]).
//!
//! Apart from [`crate::launch`], which forks tasks, because the mount namespace of a task
//! ([`crate::mountns`]) forks too and the agent's service writes batch scripts.

/// Taken shared around every fork of a task, and exclusive while the agent holds a file
/// it will execute open for writing (a batch script).
///
/// Why: a child forked by one thread inherits every descriptor of the process until it
/// execs, close-on-exec ones included; if one is another thread's script still open for
/// writing, executing that script meanwhile fails with ETXTBSY ("text file busy"). With
/// this lock no fork happens while such a descriptor is open, and every forked child has
/// exec'd (or died) by the time `spawn` returns.
static FORK_LOCK: std::sync::RwLock<()> = std::sync::RwLock::new(());

pub(crate) fn fork_guard() -> std::sync::RwLockReadGuard<'static, ()> {
    // The lock guards no data: a panic while it was held leaves nothing inconsistent.
    FORK_LOCK.read().unwrap_or_else(|e| e.into_inner())
}

/// Holds off every task fork of this process while the guard lives: take it while a file
/// that will be executed is open for writing (see `FORK_LOCK`).
pub(crate) fn no_fork_guard() -> std::sync::RwLockWriteGuard<'static, ()> {
    FORK_LOCK.write().unwrap_or_else(|e| e.into_inner())
}
