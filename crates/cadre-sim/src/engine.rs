//! The discrete-event engine: the scheduling core driven with simulated time.
//!
//! Given: a cluster, a policy and a trace (jobs with submit times and actual durations).
//! The engine plays the controller and the agents: it submits each job at its submit time,
//! runs scheduling passes, starts what the scheduler starts, and ends each started job after
//! its actual duration, or at its time limit if that comes first (TIMEOUT). A preempted job
//! ends after the grace time; requeued, it later runs its whole duration again (no
//! checkpoints). Node events are not simulated.
//!
//! Passes run when something changed (a job arrived or ended), at most once per
//! [`SimOptions::min_interval`] of simulated time, like Slurm's event-triggered scheduler
//! with its minimum interval; jobs arriving in between are seen by the next pass.
//!
//! Must hold: the engine only reports what happened; the scheduler is the live one. With
//! [`SimOptions::check_invariants`] the scheduler's invariants are checked after every pass
//! and event, and every start is checked to be a whole gang.

use crate::report::{Recorder, Report};
use crate::trace::TraceJob;
use cadre_core::cluster::Cluster;
use cadre_core::job::{JobId, JobState};
use cadre_core::policy::Policy;
use cadre_core::scheduler::{CoreError, Decision, Event, Scheduler};
use cadre_core::time::{Dur, Time};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Instant;

/// How a replay runs.
#[derive(Clone, Debug, PartialEq)]
pub struct SimOptions {
    /// The least simulated time between two passes.
    pub min_interval: Dur,
    /// Check the scheduler's invariants after every event and pass (slow; for tests).
    pub check_invariants: bool,
    /// Keep what happened to every job in the report ([`crate::report::Report::outcomes`];
    /// a few hundred bytes a job, so only when asked).
    pub outcomes: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            min_interval: Dur(1),
            check_invariants: false,
            outcomes: false,
        }
    }
}

/// Errors of a replay.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("the scheduler refused trace job {index} (`{name}`): {source}")]
    Refused {
        index: usize,
        name: String,
        #[source]
        source: CoreError,
    },
    #[error("the scheduler rejected an event at t={at}: {source}")]
    Event {
        at: u64,
        #[source]
        source: CoreError,
    },
    #[error("invariant broken at t={at}: {what}")]
    Invariant { at: u64, what: String },
}

/// What happens next in simulated time, ordered by time, then kind (ends before arrivals
/// at the same second, so that a pass sees what was freed), then job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Next {
    at: Time,
    what: Happening,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Happening {
    /// The job's run `run` ends: by itself (`stopped` false), or killed after a stop.
    End {
        job: JobId,
        run: u64,
        stopped: bool,
    },
    Arrive {
        index: usize,
    },
}

/// Progress of a replay, for a progress bar.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub done_jobs: usize,
    pub total_jobs: usize,
    pub now: Time,
}

/// Replays `jobs` (sorted by submit time) on `cluster` under `policy`.
pub fn replay(
    cluster: Cluster,
    policy: Policy,
    jobs: &[TraceJob],
    options: &SimOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, SimError> {
    let wall = Instant::now();
    let mut sched = Scheduler::new(cluster.clone(), policy.clone())
        .map_err(|source| SimError::Event { at: 0, source })?;
    let grace = policy.preemption.grace;
    let mut recorder = Recorder::new(&cluster, jobs);
    // Job ids are trace positions + 1, so that reports can name trace rows.
    let id_of = |index: usize| JobId(index as u64 + 1);
    let index_of = |job: JobId| (job.0 - 1) as usize;
    let mut queue: BinaryHeap<Reverse<Next>> = jobs
        .iter()
        .enumerate()
        .map(|(index, j)| {
            Reverse(Next {
                at: j.submit,
                what: Happening::Arrive { index },
            })
        })
        .collect();
    // The run a job is on: a requeued job's earlier end events are stale.
    let mut runs: BTreeMap<JobId, u64> = BTreeMap::new();
    let mut ended = 0usize;
    let mut dirty = false;
    let mut last_pass: Option<Time> = None;
    let check = |sched: &Scheduler, at: Time| -> Result<(), SimError> {
        if options.check_invariants {
            sched
                .check_invariants()
                .map_err(|what| SimError::Invariant { at: at.0, what })?;
        }
        Ok(())
    };

    loop {
        let next_event = queue.peek().map(|Reverse(n)| n.at);
        // A pass runs once something changed, no sooner than the minimum interval after
        // the last one, and after every event of its own second (they are batched).
        if dirty {
            let at = match last_pass {
                Some(t) => (t + options.min_interval).max(recorder.now()),
                None => recorder.now(),
            };
            if next_event.is_none_or(|e| at < e) {
                let started = Instant::now();
                let decisions = sched.schedule(at);
                let cycle = started.elapsed();
                check(&sched, at)?;
                recorder.pass(&sched, at, cycle, &decisions);
                for d in &decisions {
                    match d {
                        Decision::Start { job, .. } => {
                            let trace = &jobs[index_of(*job)];
                            let run = runs.entry(*job).and_modify(|r| *r += 1).or_insert(0);
                            let limit = trace.spec.time_limit;
                            let lasts = if limit.0 == 0 {
                                trace.duration
                            } else {
                                Dur(trace.duration.0.min(limit.0))
                            };
                            queue.push(Reverse(Next {
                                at: at + lasts,
                                what: Happening::End {
                                    job: *job,
                                    run: *run,
                                    stopped: false,
                                },
                            }));
                        }
                        Decision::Preempt { victim, .. } => {
                            let run = runs.get(victim).copied().unwrap_or(0);
                            queue.push(Reverse(Next {
                                at: at + grace,
                                what: Happening::End {
                                    job: *victim,
                                    run,
                                    stopped: true,
                                },
                            }));
                        }
                        Decision::Stop { job, .. } => {
                            let run = runs.get(job).copied().unwrap_or(0);
                            queue.push(Reverse(Next {
                                at,
                                what: Happening::End {
                                    job: *job,
                                    run,
                                    stopped: true,
                                },
                            }));
                        }
                        Decision::Reserve(_) => {}
                    }
                }
                last_pass = Some(at);
                dirty = false;
                continue;
            }
        }
        let Some(Reverse(next)) = queue.pop() else {
            break;
        };
        let at = next.at;
        recorder.advance(at);
        match next.what {
            Happening::Arrive { index } => {
                let spec = Box::new(jobs[index].spec.clone());
                sched
                    .handle(
                        Event::Submit {
                            id: id_of(index),
                            spec,
                        },
                        at,
                    )
                    .map_err(|source| SimError::Refused {
                        index,
                        name: jobs[index].spec.name.clone(),
                        source,
                    })?;
                recorder.arrived(index, at);
            }
            Happening::End { job, run, stopped } => {
                if runs.get(&job) != Some(&run) {
                    continue;
                }
                let Some(state) = sched.job(job).map(|j| j.state) else {
                    continue;
                };
                if !state.is_active() {
                    continue;
                }
                let trace = &jobs[index_of(job)];
                let outcome = if stopped {
                    JobState::Cancelled
                } else if trace.spec.time_limit.0 > 0 && trace.duration > trace.spec.time_limit {
                    JobState::Timeout
                } else {
                    JobState::Completed
                };
                let allocation_gpus = sched
                    .job(job)
                    .and_then(|j| j.allocation.as_ref())
                    .map(|a| a.gpus())
                    .unwrap_or(0.0);
                sched
                    .handle(Event::Ended { id: job, outcome }, at)
                    .map_err(|source| SimError::Event { at: at.0, source })?;
                match sched.job(job) {
                    Some(j) if j.state == JobState::Pending => {
                        recorder.requeued(index_of(job), at, allocation_gpus)
                    }
                    _ => {
                        ended += 1;
                        let final_state = sched.ended_state(job).unwrap_or(outcome);
                        recorder.ended(index_of(job), at, final_state, allocation_gpus);
                        if ended % 1024 == 0 || ended == jobs.len() {
                            progress(Progress {
                                done_jobs: ended,
                                total_jobs: jobs.len(),
                                now: at,
                            });
                        }
                    }
                }
            }
        }
        check(&sched, at)?;
        dirty = true;
    }
    Ok(recorder.finish(&sched, wall.elapsed().as_secs_f64(), options.outcomes))
}
