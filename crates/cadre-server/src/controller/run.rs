//! One run of an active job as the controller follows it, and the one function that moves
//! its lifecycle.
//!
//! **Given** a run's start (or its adoption after a restart) and what its nodes report.
//! **Decided** here: the run's phase, its outcome so far (the worst node's; the first
//! failing exit code), and which nodes it still waits for. **Must hold**: a run is settled
//! at most once, and once settled its outcome no longer changes; a stop may be asked in any
//! phase (the latest wait wins), and is remembered to be asked again of agents that come
//! back with the run alive.

use cadre_core::alloc::Allocation;
use cadre_core::cluster::NodeId;
use cadre_core::job::JobState;
use cadre_core::time::Time;
use cadre_store::StepRecord;
use std::collections::BTreeSet;

/// Where a run is in its life. A run that has ended is no longer followed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RunPhase {
    /// Its tasks run (or are being launched) on the nodes it waits for.
    Running,
    /// A stop was asked (cancel, requeue, preemption, node failure, launch failure): its
    /// tasks get SIGTERM, then SIGKILL after this many seconds.
    Stopping { kill_wait_secs: u64 },
    /// Its outcome is fixed: its completing groups have all ended, or the client of an
    /// allocation completed it. Its other tasks are stopped (`kill_wait_secs`, once asked);
    /// how they end no longer counts.
    Settled {
        outcome: JobState,
        exit_code: Option<i32>,
        kill_wait_secs: Option<u64>,
    },
}

/// What happens to a run's lifecycle.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RunEvent {
    Stop {
        kill_wait_secs: u64,
    },
    Settle {
        outcome: JobState,
        exit_code: Option<i32>,
    },
}

/// A move a run's lifecycle cannot make.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a run cannot go from {from:?} on {event:?}")]
pub struct IllegalRun {
    pub from: RunPhase,
    pub event: RunEvent,
}

impl RunPhase {
    /// The phase after `event`, or why the event cannot happen now.
    pub fn next(self, event: RunEvent) -> Result<RunPhase, IllegalRun> {
        match (self, event) {
            (RunPhase::Running | RunPhase::Stopping { .. }, RunEvent::Stop { kill_wait_secs }) => {
                Ok(RunPhase::Stopping { kill_wait_secs })
            }
            (
                RunPhase::Settled {
                    outcome, exit_code, ..
                },
                RunEvent::Stop { kill_wait_secs },
            ) => Ok(RunPhase::Settled {
                outcome,
                exit_code,
                kill_wait_secs: Some(kill_wait_secs),
            }),
            (RunPhase::Running, RunEvent::Settle { outcome, exit_code }) => Ok(RunPhase::Settled {
                outcome,
                exit_code,
                kill_wait_secs: None,
            }),
            (RunPhase::Stopping { kill_wait_secs }, RunEvent::Settle { outcome, exit_code }) => {
                Ok(RunPhase::Settled {
                    outcome,
                    exit_code,
                    kill_wait_secs: Some(kill_wait_secs),
                })
            }
            (RunPhase::Settled { .. }, RunEvent::Settle { .. }) => {
                Err(IllegalRun { from: self, event })
            }
        }
    }
}

/// One run of an active job as dispatch follows it.
#[derive(Clone, Debug)]
pub(crate) struct RunTrack {
    pub(crate) run: u32,
    pub(crate) allocation: Allocation,
    pub(crate) start_time: Time,
    /// Nodes whose tasks have not ended yet.
    pub(crate) nodes_left: BTreeSet<NodeId>,
    /// The worst outcome reported so far.
    pub(crate) outcome: JobState,
    pub(crate) exit_code: Option<i32>,
    /// The launch failed on some node: (why, whether retrying cannot help).
    pub(crate) launch_failed: Option<(String, bool)>,
    pub(crate) phase: RunPhase,
    /// An allocation without a program of its own (`salloc`): it ends when its client
    /// completes it.
    pub(crate) is_allocation: bool,
    /// A batch job's batch step (its script's run), for accounting; ended with the run.
    pub(crate) batch_step: Option<StepRecord>,
    /// For a job that completes with some of its groups (the run spec's
    /// `completing_groups`): the nodes holding tasks of those groups that have not all
    /// ended yet. Empty otherwise.
    pub(crate) completing_left: BTreeSet<NodeId>,
    /// The run spec's completing groups (what a node's `Completing` report is about).
    pub(crate) completing_groups: Option<Vec<u16>>,
    /// Nodes whose agent reported the run's tasks started (a run adopted at recovery: all
    /// of them). A node that comes back without the run and never reported it started
    /// lost its launch order on the way: it is sent again, not taken for a lost run.
    pub(crate) started_on: BTreeSet<NodeId>,
}

impl RunTrack {
    /// A run that has just started (or was adopted) on every node of its allocation;
    /// `completing`: the run spec's completing groups.
    pub(crate) fn new(
        run: u32,
        allocation: Allocation,
        start_time: Time,
        completing: Option<&[u16]>,
    ) -> RunTrack {
        let completing_left = completing.map_or_else(BTreeSet::new, |groups| {
            allocation
                .tasks
                .iter()
                .filter(|t| groups.contains(&t.group))
                .map(|t| t.node)
                .collect()
        });
        RunTrack {
            run,
            nodes_left: allocation.nodes().into_iter().collect(),
            allocation,
            start_time,
            outcome: JobState::Completed,
            exit_code: None,
            launch_failed: None,
            phase: RunPhase::Running,
            is_allocation: false,
            batch_step: None,
            completing_left,
            completing_groups: completing.map(<[u16]>::to_vec),
            started_on: BTreeSet::new(),
        }
    }

    /// What the run spec says of how the run ends: a batch script's run ends with its
    /// first node's tasks (where the script runs; the other nodes only hold the job's
    /// resources, for its steps), an allocation's when its client completes it.
    pub(crate) fn shape_by(&mut self, run_spec: &cadre_core::run::RunSpec) {
        self.is_allocation = run_spec.allocation;
        if run_spec.script.is_some()
            && self.completing_left.is_empty()
            && let Some(&first) = self.allocation.nodes().first()
        {
            self.completing_left = [first].into_iter().collect();
        }
    }

    /// Records a node's outcome in the run's (the worst wins; the first failing exit code).
    pub(crate) fn record(&mut self, state: JobState, exit_code: Option<i32>) {
        if severity(state) > severity(self.outcome) {
            self.outcome = state;
        }
        if self.exit_code.is_none()
            || (exit_code.is_some_and(|c| c != 0) && self.exit_code == Some(0))
        {
            self.exit_code = exit_code.or(self.exit_code);
        }
    }

    /// Moves the run's lifecycle.
    pub(crate) fn advance(&mut self, event: RunEvent) -> Result<(), IllegalRun> {
        self.phase = self.phase.next(event)?;
        Ok(())
    }

    /// The stop asked of the run's tasks (SIGKILL after so many seconds), if any.
    pub(crate) fn stop(&self) -> Option<u64> {
        match self.phase {
            RunPhase::Running => None,
            RunPhase::Stopping { kill_wait_secs } => Some(kill_wait_secs),
            RunPhase::Settled { kill_wait_secs, .. } => kill_wait_secs,
        }
    }

    /// The run's fixed outcome and exit code, once settled.
    pub(crate) fn settled(&self) -> Option<(JobState, Option<i32>)> {
        match self.phase {
            RunPhase::Settled {
                outcome, exit_code, ..
            } => Some((outcome, exit_code)),
            RunPhase::Running | RunPhase::Stopping { .. } => None,
        }
    }

    /// Settles the run with its outcome so far.
    pub(crate) fn settle_now(&mut self) -> Result<(), IllegalRun> {
        self.advance(RunEvent::Settle {
            outcome: self.outcome,
            exit_code: self.exit_code,
        })
    }
}

/// How bad an outcome is, for the gang's outcome: the worst node's.
pub(crate) fn severity(s: JobState) -> u8 {
    match s {
        JobState::Completed => 0,
        JobState::Failed => 1,
        JobState::OutOfMemory => 2,
        JobState::Timeout => 3,
        JobState::NodeFail => 4,
        JobState::Preempted => 5,
        JobState::Cancelled => 6,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settle(outcome: JobState) -> RunEvent {
        RunEvent::Settle {
            outcome,
            exit_code: Some(0),
        }
    }

    #[test]
    fn a_run_settles_once_and_keeps_its_outcome() {
        let settled = RunPhase::Running.next(settle(JobState::Completed)).unwrap();
        assert_eq!(
            settled,
            RunPhase::Settled {
                outcome: JobState::Completed,
                exit_code: Some(0),
                kill_wait_secs: None
            }
        );
        assert!(settled.next(settle(JobState::Failed)).is_err());
        // A stop after settling keeps the outcome.
        assert_eq!(
            settled.next(RunEvent::Stop { kill_wait_secs: 1 }),
            Ok(RunPhase::Settled {
                outcome: JobState::Completed,
                exit_code: Some(0),
                kill_wait_secs: Some(1)
            })
        );
    }

    #[test]
    fn a_stop_may_come_in_any_phase_and_the_latest_wait_wins() {
        let stopping = RunPhase::Running
            .next(RunEvent::Stop { kill_wait_secs: 30 })
            .unwrap();
        assert_eq!(
            stopping.next(RunEvent::Stop { kill_wait_secs: 0 }),
            Ok(RunPhase::Stopping { kill_wait_secs: 0 })
        );
        // Completing groups that end while the job is being stopped settle it, and the
        // stop is kept, to be asked again of agents that come back.
        assert_eq!(
            stopping.next(settle(JobState::Failed)),
            Ok(RunPhase::Settled {
                outcome: JobState::Failed,
                exit_code: Some(0),
                kill_wait_secs: Some(30)
            })
        );
    }
}
