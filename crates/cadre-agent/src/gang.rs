//! Starting all of a job's tasks on this node, or none.
//!
//! A gang starts whole or not at all (the controller requeues a job whose gang failed to
//! start, whole). [`launch_gang`] starts the job's tasks on this node in rank order; when
//! one fails to start, the ones already started are killed at once (no grace: they have
//! only just started and the job goes back to the queue) and reaped, and the error says
//! which task failed and why. Once started, [`Gang`] supervises the tasks together: a
//! blocking [`Gang::wait`], or [`Gang::poll`] for a caller that also takes orders (stop,
//! signal) between checks.
//!
//! Output files shared by several tasks (a pattern without `%t`) are truncated once, by
//! the first task that opens them, and appended to by the others.
//!
//! A batch job starts one process, its script, on its first node; its gang on the other
//! nodes has no process and ends at once, their resources held by the job until it ends.

use crate::jobenv::{self, JobLaunch, LocalNode, OpenMode};
use crate::launch::{self, LaunchError, RunAs};
use crate::supervise::{RunningTask, TaskOutcome};
use cadre_core::job::{JobId, JobState};
use nix::sys::signal::Signal;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Longest sleep of [`Gang::wait`] between checks.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// A gang that did not start; the tasks that had started were stopped.
#[derive(Debug, thiserror::Error)]
#[error(
    "gang start of job {job} failed on node {node}, {} started task(s) stopped: {source}",
    stopped.len()
)]
pub struct GangStartError {
    pub job: JobId,
    pub node: String,
    pub source: LaunchError,
    /// How the tasks that had started ended when stopped.
    pub stopped: Vec<TaskOutcome>,
}

/// All of a job's tasks on this node, started.
#[derive(Debug)]
pub struct Gang {
    pub tasks: Vec<RunningTask>,
}

/// Starts every task of the job that is placed on this node, or none of them.
pub fn launch_gang(
    job: &JobLaunch,
    node: &LocalNode,
    run_as: &RunAs,
) -> Result<Gang, GangStartError> {
    let fail = |source: LaunchError, started: Vec<RunningTask>| {
        let stopped = started
            .into_iter()
            .filter_map(|mut t| t.abort().ok())
            .collect();
        GangStartError {
            job: job.id,
            node: node.name.clone(),
            source,
            stopped,
        }
    };
    let mut indices = jobenv::tasks_on_node(&job.allocation, node.id);
    if job.batch && !indices.is_empty() {
        // The script runs once, on the first node; the other tasks only hold their share.
        let batch = jobenv::batch_task(&job.allocation);
        indices.retain(|&i| Some(i) == batch);
        if indices.is_empty() {
            return Ok(Gang { tasks: Vec::new() });
        }
    }
    // Tasks that only hold their share run nothing; a node with nothing else holds.
    let before = indices.len();
    indices.retain(|i| !job.programs.get(i).is_some_and(|p| p.holds));
    if before > 0 && indices.is_empty() {
        return Ok(Gang { tasks: Vec::new() });
    }
    if indices.is_empty() {
        return Err(fail(
            LaunchError::NoTasksOnNode {
                job: job.id,
                node: node.name.clone(),
            },
            Vec::new(),
        ));
    }
    let mut opened: BTreeSet<PathBuf> = BTreeSet::new();
    let mut mode_for = |path: PathBuf| match job.open_mode {
        OpenMode::Truncate if opened.insert(path) => OpenMode::Truncate,
        _ => OpenMode::Append,
    };
    let mut started: Vec<RunningTask> = Vec::with_capacity(indices.len());
    for index in indices {
        let modes = match jobenv::task_place(&job.allocation, index) {
            Some(place) => {
                let (out, err) = launch::output_paths(job, node, &place);
                let out_mode = mode_for(out.clone());
                (out_mode, err.map_or(out_mode, &mut mode_for))
            }
            None => (job.open_mode, job.open_mode),
        };
        match launch::launch_task_with(job, node, index, run_as, modes) {
            Ok(task) => started.push(task),
            Err(e) => return Err(fail(e, started)),
        }
    }
    Ok(Gang { tasks: started })
}

impl Gang {
    /// Cancels every task (SIGTERM, SIGKILL after KillWait).
    pub fn cancel(&mut self) -> Result<(), LaunchError> {
        for t in &mut self.tasks {
            t.cancel()?;
        }
        Ok(())
    }

    /// Cancels every task with SIGKILL `kill_wait` after SIGTERM.
    pub fn cancel_within(&mut self, kill_wait: Duration) -> Result<(), LaunchError> {
        for t in &mut self.tasks {
            t.cancel_within(kill_wait)?;
        }
        Ok(())
    }

    /// Changes every task's time limit.
    pub fn set_time_limit(&mut self, limit: Option<Duration>) {
        for t in &mut self.tasks {
            t.set_time_limit(limit);
        }
    }

    /// Sends `signal` to the process group of every task that has not ended.
    pub fn signal(&mut self, signal: Signal) -> Result<(), LaunchError> {
        for t in &mut self.tasks {
            t.signal(signal)?;
        }
        Ok(())
    }

    /// Sends what is due; every outcome, in rank order, once all tasks have ended. Never
    /// blocks.
    pub fn poll(&mut self) -> Result<Option<Vec<TaskOutcome>>, LaunchError> {
        let mut outcomes = Vec::with_capacity(self.tasks.len());
        for t in &mut self.tasks {
            if let Some(o) = t.poll()? {
                outcomes.push(o);
            }
        }
        Ok((outcomes.len() == self.tasks.len()).then_some(outcomes))
    }

    /// How long a caller may sleep before the next [`Gang::poll`]: until the next
    /// deadline of a task, at most [`POLL_INTERVAL`] (so that exits are noticed soon).
    pub fn nap(&self) -> Duration {
        let now = Instant::now();
        self.tasks
            .iter()
            .filter_map(RunningTask::next_deadline)
            .min()
            .map_or(POLL_INTERVAL, |d| d.saturating_duration_since(now))
            .min(POLL_INTERVAL)
    }

    /// Supervises all tasks until every one has ended; outcomes in rank order.
    pub fn wait(&mut self) -> Result<Vec<TaskOutcome>, LaunchError> {
        loop {
            if let Some(outcomes) = self.poll()? {
                return Ok(outcomes);
            }
            std::thread::sleep(self.nap());
        }
    }
}

/// The job's state from its tasks' outcomes: cancelled, else timed out, else out of
/// memory, else failed if any task failed, else completed.
pub fn gang_state(outcomes: &[TaskOutcome]) -> JobState {
    let any = |s: JobState| outcomes.iter().any(|o| o.state == s);
    [
        JobState::Cancelled,
        JobState::Timeout,
        JobState::OutOfMemory,
        JobState::Failed,
    ]
    .into_iter()
    .find(|&s| any(s))
    .unwrap_or(JobState::Completed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::OomCheck;

    fn outcome(state: JobState) -> TaskOutcome {
        TaskOutcome {
            job: JobId(1),
            procid: 0,
            state,
            exit_code: Some(0),
            signal: None,
            oom: OomCheck::NotDetected { why: "x".into() },
            unkillable: None,
        }
    }

    #[test]
    fn the_worst_task_outcome_is_the_jobs() {
        use JobState::*;
        let s = |states: &[JobState]| {
            gang_state(&states.iter().map(|&s| outcome(s)).collect::<Vec<_>>())
        };
        assert_eq!(s(&[Completed, Completed]), Completed);
        assert_eq!(s(&[Completed, Failed]), Failed);
        assert_eq!(s(&[OutOfMemory, Failed]), OutOfMemory);
        assert_eq!(s(&[Failed, Timeout]), Timeout);
        assert_eq!(s(&[Timeout, Cancelled]), Cancelled);
        assert_eq!(s(&[]), Completed);
    }
}
