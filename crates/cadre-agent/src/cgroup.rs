//! One cgroup v2 per task, under a parent directory the agent is given, so that the
//! kernel's out-of-memory kills can be told apart from other deaths, and every process of a
//! task (even one that left the task's process group) can be killed.
//!
//! Given: a parent directory in a cgroup v2 hierarchy (`cgroup.controllers` present) whose
//! `cgroup.subtree_control` enables the `memory` controller for its children, and no
//! process of its own (cgroup v2's "no internal processes" rule). Preparing it is the
//! agent process's job, not this module's.
//!
//! Decided: a child `job<J>.task<T>` per task of a job (`job<J>.step<S>.task<T>` of a
//! step, whose task numbers restart at 0 beside the job's own), with `memory.max` set to the task's
//! allocated memory when it has one; the task joins it before exec. Afterwards
//! `memory.events` says whether the kernel killed anything in it for lack of memory
//! (`oom_kill`); that is the only honest source for OUT_OF_MEMORY, and without a cgroup the
//! outcome says it was not detected rather than guessing from a SIGKILL.

use cadre_core::job::JobId;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("{} is not a cgroup v2 directory (no cgroup.controllers)", path.display())]
    NotV2 { path: PathBuf },
    #[error("failed to create cgroup {}: {source}", path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("failed to write {} in {}: {source}", file, path.display())]
    Write {
        path: PathBuf,
        file: &'static str,
        source: io::Error,
    },
    #[error("failed to open {} for writing: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
}

/// Whether an out-of-memory kill could be checked, and what was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OomCheck {
    /// The task ran in its own cgroup; the kernel's `oom_kill` count there.
    Checked { oom_kills: u64 },
    /// Out-of-memory kills are not detected for this task, and why.
    NotDetected { why: String },
}

/// A task's cgroup.
#[derive(Debug)]
pub struct TaskCgroup {
    path: PathBuf,
}

impl TaskCgroup {
    /// Creates the cgroup of task `procid` of the job (of its step `step`) under `parent`,
    /// limited to `mem_mib` when non-zero.
    pub fn create(
        parent: &Path,
        job: JobId,
        step: Option<u32>,
        procid: u32,
        mem_mib: u64,
    ) -> Result<TaskCgroup, CgroupError> {
        if !parent.join("cgroup.controllers").is_file() {
            return Err(CgroupError::NotV2 {
                path: parent.to_path_buf(),
            });
        }
        let path = parent.join(match step {
            None => format!("job{job}.task{procid}"),
            Some(step) => format!("job{job}.step{step}.task{procid}"),
        });
        match fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(CgroupError::Create { path, source }),
        }
        let cg = TaskCgroup { path };
        if mem_mib > 0 {
            let bytes = mem_mib.saturating_mul(1 << 20).to_string();
            fs::write(cg.path.join("memory.max"), bytes).map_err(|source| {
                cg.remove();
                CgroupError::Write {
                    path: cg.path.clone(),
                    file: "memory.max",
                    source,
                }
            })?;
        }
        Ok(cg)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `cgroup.procs`, open for writing, for the child to join before exec.
    pub(crate) fn procs_fd(&self) -> Result<OwnedFd, CgroupError> {
        let path = self.path.join("cgroup.procs");
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map(OwnedFd::from)
            .map_err(|source| CgroupError::Open { path, source })
    }

    /// The task's out-of-memory kills so far.
    pub fn oom_check(&self) -> OomCheck {
        let path = self.path.join("memory.events");
        match fs::read_to_string(&path) {
            Ok(text) => match parse_oom_kills(&text) {
                Some(n) => OomCheck::Checked { oom_kills: n },
                None => OomCheck::NotDetected {
                    why: format!("no oom_kill line in {}", path.display()),
                },
            },
            Err(e) => OomCheck::NotDetected {
                why: format!("cannot read {}: {e}", path.display()),
            },
        }
    }

    /// Kills every process in the cgroup (`cgroup.kill`, Linux 5.14+); best effort.
    pub(crate) fn kill_all(&self) {
        let _ = fs::write(self.path.join("cgroup.kill"), "1");
    }

    /// Removes the cgroup; best effort (it fails while processes remain in it).
    pub(crate) fn remove(&self) {
        let _ = fs::remove_dir(&self.path);
    }
}

/// The `oom_kill` count of a `memory.events` file.
pub fn parse_oom_kills(memory_events: &str) -> Option<u64> {
    memory_events.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == "oom_kill").then(|| value.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_kills_are_read_from_memory_events() {
        let text = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(parse_oom_kills(text), Some(1));
        assert_eq!(parse_oom_kills("low 0\noom 0\n"), None);
        assert_eq!(parse_oom_kills("oom_kill x\n"), None);
    }

    #[test]
    fn a_step_s_task_has_a_cgroup_apart_from_the_job_s_task_of_its_number() {
        // Killing a step's cgroup at its end must not kill the job's task 0 beside it.
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("cgroup.controllers"), "memory\n").unwrap();
        let job = TaskCgroup::create(dir.path(), JobId(7), None, 0, 0).unwrap();
        let step = TaskCgroup::create(dir.path(), JobId(7), Some(0), 0, 0).unwrap();
        assert_eq!(job.path(), dir.path().join("job7.task0"));
        assert_eq!(step.path(), dir.path().join("job7.step0.task0"));
    }

    #[test]
    fn a_directory_outside_cgroup_v2_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = TaskCgroup::create(dir.path(), JobId(1), None, 0, 0).unwrap_err();
        assert!(
            err.to_string().contains("is not a cgroup v2 directory"),
            "{err}"
        );
    }
}
