//! The agent's side of the protocol as a state machine: what the agent says, launches and
//! stops, given what the controller says and what its runs report. No I/O, no clock, no
//! threads: [`Session::handle`] takes one [`Input`] and returns the [`Action`]s for the
//! caller (the service loop) to carry out.
//!
//! Given: the node's name and report, the first sequence number, and the outbox bound.
//!
//! Kept across connections: the outbox (events not yet acknowledged, oldest first, with
//! increasing `seq`), the runs alive on the node and their phase, and a bounded memory of
//! runs that ended here (so that a late duplicate `Launch` cannot run a job twice).
//!
//! Kept per connection: the link ([`Link`]): down; hello sent, waiting for the welcome;
//! up. Events are sent on the connection only once it is up; those that arise while the
//! welcome is awaited are sent when it comes, and everything unacknowledged goes again in
//! the next connection's `Hello`.
//!
//! Decided here, as the protocol module (`cadre_proto::agent`) leaves to the agent:
//! - a `Launch` of a run already alive here is not started again: the run's `Started` is
//!   sent again if it had started (a restarted controller re-sending its orders learns it
//!   runs), nothing if it is still starting or stopping (its next event will come);
//! - a `Launch` of a run that ended here recently is ignored: its end is in the outbox or
//!   was acknowledged, and running it again would run the job twice;
//! - a `Stop` of a run unknown here is answered with `Ended { state: CANCELLED }`: the
//!   controller waits for an end to make progress, the run is certainly not running here,
//!   and an end for a run that is already final is a no-op for the controller; a `Stop`
//!   of a run that ended here recently gets nothing (its end is already on its way);
//! - a `Signal` for a run that is not alive here is dropped;
//! - on shutdown every run is stopped with its own KillWait, and a run that ends
//!   CANCELLED because of it is reported NODE_FAIL: the node went away, the user did not
//!   cancel it, and the controller may requeue it. A `Launch` during shutdown fails
//!   (not permanently: another node can run it).
//!
//! Must hold (checked by [`Session::check_invariants`]): outbox sequence numbers strictly
//! increase and are below the next one; a run is never both alive and ended; the link is
//! up only with the node id of the last welcome; the outbox holds at most its bound.

use cadre_core::cluster::NodeId;
use cadre_core::job::JobState;
use cadre_proto::agent::{
    AgentMessage, ControllerMessage, Hello, LaunchOrder, NodeReport, OutputRequest,
    PROTOCOL_VERSION, RunRef, SequencedEvent, TaskEvent,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// How many ended runs are remembered to ignore duplicate launches.
const ENDED_MEMORY: usize = 4096;

/// The state of the current connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Link {
    Down,
    /// `Hello` sent, carrying the outbox up to `sent_up_to`.
    AwaitingWelcome {
        sent_up_to: Option<u64>,
    },
    /// Welcomed; the controller calls this node `node_id`.
    Up {
        node_id: NodeId,
    },
}

/// Why a run is being stopped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum StopCause {
    /// The controller's `Stop`.
    Controller,
    /// The agent is shutting down.
    Shutdown,
    /// The agent's lease ran out without a word from the controller (fencing): the
    /// controller will requeue the run elsewhere.
    Fenced,
}

/// Where a run alive on this node is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum RunPhase {
    /// Ordered to launch; no `Started` or `LaunchFailed` yet.
    Launching,
    Running,
    Stopping(StopCause),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Run {
    phase: RunPhase,
    /// Whether `Started` was reported (a run can be stopped while launching).
    started: bool,
    /// The run's own KillWait, for a shutdown.
    kill_wait: Duration,
}

/// What the session is told.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Input {
    /// A connection is open (WebSocket handshake done).
    Connected,
    /// The controller said this.
    Message(ControllerMessage),
    /// A run's worker reports this.
    Report(TaskEvent),
    /// The connection is gone.
    Disconnected,
    /// Stop everything and leave.
    Shutdown,
    /// The lease ran out with the controller unheard: stop every run (each within
    /// `kill_wait` at most), to be reported NODE_FAIL, and go on.
    LeaseExpired { kill_wait: Duration },
    /// The node's health checks found this wrong (`None`: nothing).
    Health(Option<String>),
    /// A previous life of the agent left this run, whose tasks this life adopted: it is
    /// running (listed in the next hello), with its own KillWait.
    Adopted { run: RunRef, kill_wait: Duration },
}

/// What the caller must do.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Action {
    Send(AgentMessage),
    /// Start the run's tasks placed on node `node_id` (this node's id in the controller's
    /// cluster, for the allocation).
    Launch {
        order: Box<LaunchOrder>,
        node_id: NodeId,
    },
    Stop {
        run: RunRef,
        kill_wait: Duration,
    },
    Signal {
        run: RunRef,
        signal: i32,
    },
    SetTimeLimit {
        run: RunRef,
        limit: Option<Duration>,
    },
    /// Read a task's output and answer `request` ([`ControllerMessage::ReadOutput`]); its
    /// `max` at most [`cadre_proto::agent::MAX_OUTPUT_READ`].
    ReadOutput {
        request: u64,
        read: OutputRequest,
    },
}

/// A transition the protocol does not allow.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum SessionError {
    /// The controller broke the protocol: drop the connection and reconnect.
    #[error("protocol violation by the controller: {what}")]
    Protocol { what: String },
    /// The controller refused this agent: do not try again.
    #[error("{reason}")]
    Refused { reason: String },
    #[error("the controller speaks agent protocol version {theirs}, this agent version {ours}")]
    VersionMismatch { theirs: u32, ours: u32 },
    /// The caller fed an input that cannot happen in this state (a bug of the agent).
    #[error("internal error: {what}")]
    Internal { what: String },
}

impl SessionError {
    /// Whether reconnecting cannot help.
    pub(crate) fn is_fatal(&self) -> bool {
        matches!(
            self,
            SessionError::Refused { .. } | SessionError::VersionMismatch { .. }
        )
    }
}

/// The agent's protocol state.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    node: String,
    report: NodeReport,
    link: Link,
    node_id: Option<NodeId>,
    next_seq: u64,
    /// This life of the agent, told in every hello ([`Hello::life`]): its first `seq`.
    life: u64,
    outbox: VecDeque<SequencedEvent>,
    outbox_limit: usize,
    runs: BTreeMap<RunRef, Run>,
    ended: BTreeSet<RunRef>,
    ended_order: VecDeque<RunRef>,
    shutting_down: bool,
    /// Events dropped because the outbox was full.
    dropped: u64,
    /// What the node's health checks last found wrong, told in every hello and whenever
    /// it changes.
    health: Option<String>,
    /// What the last hello told of it.
    health_in_hello: Option<String>,
}

fn kind(m: &ControllerMessage) -> &'static str {
    match m {
        ControllerMessage::Welcome { .. } => "welcome",
        ControllerMessage::Refused { .. } => "refused",
        ControllerMessage::Ack { .. } => "ack",
        ControllerMessage::Launch(_) => "launch",
        ControllerMessage::Stop { .. } => "stop",
        ControllerMessage::Signal { .. } => "signal",
        ControllerMessage::SetTimeLimit { .. } => "time limit",
        ControllerMessage::ReadOutput { .. } => "read output",
    }
}

impl Session {
    /// A session of the agent of `node`; its first event gets `first_seq`.
    pub(crate) fn new(
        node: String,
        report: NodeReport,
        first_seq: u64,
        outbox_limit: usize,
    ) -> Session {
        Session {
            node,
            report,
            link: Link::Down,
            node_id: None,
            next_seq: first_seq,
            life: first_seq,
            outbox: VecDeque::new(),
            outbox_limit: outbox_limit.max(1),
            runs: BTreeMap::new(),
            ended: BTreeSet::new(),
            ended_order: VecDeque::new(),
            shutting_down: false,
            dropped: 0,
            health: None,
            health_in_hello: None,
        }
    }

    pub(crate) fn link(&self) -> Link {
        self.link
    }

    /// No run is alive on the node.
    pub(crate) fn is_idle(&self) -> bool {
        self.runs.is_empty()
    }

    pub(crate) fn outbox_len(&self) -> usize {
        self.outbox.len()
    }

    #[cfg(test)]
    pub(crate) fn phase(&self, run: RunRef) -> Option<RunPhase> {
        self.runs.get(&run).map(|r| r.phase)
    }

    /// The one transition function.
    pub(crate) fn handle(&mut self, input: Input) -> Result<Vec<Action>, SessionError> {
        let out = match input {
            Input::Connected => self.connected(),
            Input::Disconnected => {
                self.link = Link::Down;
                Ok(Vec::new())
            }
            Input::Message(m) => self.message(m),
            Input::Report(e) => self.report(e),
            Input::Shutdown => Ok(self.shutdown()),
            Input::LeaseExpired { kill_wait } => Ok(self.fence(kill_wait)),
            Input::Health(problem) => Ok(self.health(problem)),
            Input::Adopted { run, kill_wait } => self.adopted(run, kill_wait),
        };
        #[cfg(debug_assertions)]
        self.check_invariants();
        out
    }

    fn adopted(&mut self, run: RunRef, kill_wait: Duration) -> Result<Vec<Action>, SessionError> {
        if self.runs.contains_key(&run) {
            return Err(SessionError::Internal {
                what: format!("run {}.{} adopted twice", run.job, run.run),
            });
        }
        self.runs.insert(
            run,
            Run {
                phase: RunPhase::Running,
                started: true,
                kill_wait,
            },
        );
        Ok(Vec::new())
    }

    /// A change of the node's health is told at once when connected, and in every hello.
    fn health(&mut self, problem: Option<String>) -> Vec<Action> {
        if self.health == problem {
            return Vec::new();
        }
        self.health = problem.clone();
        match self.link {
            Link::Up { .. } => vec![Action::Send(AgentMessage::Health { problem })],
            // The hello on its way (or the next) carries it; told again after the welcome.
            Link::AwaitingWelcome { .. } | Link::Down => Vec::new(),
        }
    }

    fn connected(&mut self) -> Result<Vec<Action>, SessionError> {
        if self.link != Link::Down {
            return Err(SessionError::Internal {
                what: format!("connected while the link is {:?}", self.link),
            });
        }
        let hello = Hello {
            version: PROTOCOL_VERSION,
            node: self.node.clone(),
            report: self.report.clone(),
            running: self.runs.keys().copied().collect(),
            outbox: self.outbox.iter().cloned().collect(),
            health: self.health.clone(),
            agent_version: Some(env!("CARGO_PKG_VERSION").to_string()),
            life: Some(self.life),
        };
        self.health_in_hello = self.health.clone();
        self.link = Link::AwaitingWelcome {
            sent_up_to: self.outbox.back().map(|e| e.seq),
        };
        Ok(vec![Action::Send(AgentMessage::Hello(Box::new(hello)))])
    }

    fn message(&mut self, m: ControllerMessage) -> Result<Vec<Action>, SessionError> {
        let protocol = |what: String| Err(SessionError::Protocol { what });
        match (self.link, m) {
            (Link::Down, m) => Err(SessionError::Internal {
                what: format!("a {} message while disconnected", kind(&m)),
            }),
            (
                Link::AwaitingWelcome { sent_up_to },
                ControllerMessage::Welcome {
                    version, node_id, ..
                },
            ) => {
                if version != PROTOCOL_VERSION {
                    return Err(SessionError::VersionMismatch {
                        theirs: version,
                        ours: PROTOCOL_VERSION,
                    });
                }
                if let Some(old) = self.node_id.filter(|&old| old != node_id) {
                    tracing::warn!(
                        old = old.0,
                        new = node_id.0,
                        "the controller gave this node a new id; runs started before keep the old one"
                    );
                }
                self.node_id = Some(node_id);
                self.link = Link::Up { node_id };
                let mut actions: Vec<Action> = self
                    .outbox
                    .iter()
                    .filter(|e| sent_up_to.is_none_or(|s| e.seq > s))
                    .map(|e| Action::Send(AgentMessage::Event(e.clone())))
                    .collect();
                // Changed since the hello went out.
                if self.health != self.health_in_hello {
                    actions.push(Action::Send(AgentMessage::Health {
                        problem: self.health.clone(),
                    }));
                }
                Ok(actions)
            }
            (_, ControllerMessage::Refused { reason }) => Err(SessionError::Refused { reason }),
            // Reads answer in any state after the hello: the controller may ask as soon as
            // it has the connection, before its welcome.
            (_, ControllerMessage::ReadOutput { request, mut read }) => {
                read.max = read.max.min(cadre_proto::agent::MAX_OUTPUT_READ);
                Ok(vec![Action::ReadOutput { request, read }])
            }
            (Link::AwaitingWelcome { .. }, m) => {
                protocol(format!("expected a welcome, got a {} message", kind(&m)))
            }
            (Link::Up { .. }, ControllerMessage::Welcome { .. }) => {
                protocol("a second welcome on one connection".into())
            }
            (Link::Up { .. }, ControllerMessage::Ack { seq }) => {
                if seq >= self.next_seq {
                    return protocol(format!(
                        "ack of event {seq}, but the last event sent is {}",
                        self.next_seq.wrapping_sub(1)
                    ));
                }
                while self.outbox.front().is_some_and(|e| e.seq <= seq) {
                    self.outbox.pop_front();
                }
                Ok(Vec::new())
            }
            (Link::Up { node_id }, ControllerMessage::Launch(order)) => {
                Ok(self.launch(order, node_id))
            }
            (
                Link::Up { .. },
                ControllerMessage::Stop {
                    run,
                    kill_wait_secs,
                },
            ) => Ok(self.stop(run, Duration::from_secs(kill_wait_secs))),
            (Link::Up { .. }, ControllerMessage::Signal { run, signal }) => {
                match self.runs.get(&run) {
                    Some(_) => Ok(vec![Action::Signal { run, signal }]),
                    None => {
                        tracing::info!(job = %run.job, run = run.run, signal, "signal for a run not alive here: dropped");
                        Ok(Vec::new())
                    }
                }
            }
            (Link::Up { .. }, ControllerMessage::SetTimeLimit { run, time_limit_ms }) => {
                match self.runs.get(&run) {
                    Some(_) => Ok(vec![Action::SetTimeLimit {
                        run,
                        limit: time_limit_ms.map(Duration::from_millis),
                    }]),
                    None => {
                        tracing::info!(%run, "time limit for a run not alive here: dropped");
                        Ok(Vec::new())
                    }
                }
            }
        }
    }

    fn launch(&mut self, order: Box<LaunchOrder>, node_id: NodeId) -> Vec<Action> {
        let run = order.run;
        if let Some(r) = self.runs.get(&run) {
            tracing::info!(job = %run.job, run = run.run, phase = ?r.phase, "launch of a run already alive here: not started again");
            return match r.phase {
                RunPhase::Running => self.emit(TaskEvent::Started { run }),
                RunPhase::Launching | RunPhase::Stopping(_) => Vec::new(),
            };
        }
        if self.ended.contains(&run) {
            tracing::warn!(job = %run.job, run = run.run, "launch of a run that already ended here: ignored");
            return Vec::new();
        }
        if self.shutting_down {
            return self.emit(TaskEvent::LaunchFailed {
                run,
                reason: format!("the agent of node {} is shutting down", self.node),
                permanent: false,
            });
        }
        self.runs.insert(
            run,
            Run {
                phase: RunPhase::Launching,
                started: false,
                kill_wait: Duration::from_secs(order.run_spec.kill_wait_secs),
            },
        );
        vec![Action::Launch { order, node_id }]
    }

    fn stop(&mut self, run: RunRef, kill_wait: Duration) -> Vec<Action> {
        match self.runs.get_mut(&run) {
            Some(r) => match r.phase {
                RunPhase::Launching | RunPhase::Running => {
                    r.phase = RunPhase::Stopping(StopCause::Controller);
                    vec![Action::Stop { run, kill_wait }]
                }
                RunPhase::Stopping(_) => {
                    // Already being stopped; the controller's word makes it a cancel.
                    r.phase = RunPhase::Stopping(StopCause::Controller);
                    Vec::new()
                }
            },
            None if self.ended.contains(&run) => Vec::new(),
            None => {
                tracing::info!(job = %run.job, run = run.run, "stop of a run unknown here: reported ended");
                self.emit(TaskEvent::Ended {
                    run,
                    state: JobState::Cancelled,
                    exit_code: None,
                    signal: None,
                    drain: None,
                })
            }
        }
    }

    fn report(&mut self, event: TaskEvent) -> Result<Vec<Action>, SessionError> {
        let run = event.run();
        let Some(r) = self.runs.get_mut(&run) else {
            return Err(SessionError::Internal {
                what: format!(
                    "a report for run {}.{} that is not alive here",
                    run.job, run.run
                ),
            });
        };
        let event = match event {
            TaskEvent::Started { .. } => {
                if r.started || !matches!(r.phase, RunPhase::Launching | RunPhase::Stopping(_)) {
                    return Err(SessionError::Internal {
                        what: format!("run {}.{} started twice", run.job, run.run),
                    });
                }
                r.started = true;
                if r.phase == RunPhase::Launching {
                    r.phase = RunPhase::Running;
                }
                event
            }
            TaskEvent::LaunchFailed { .. } => {
                self.forget(run);
                event
            }
            // The run goes on (its other tasks run until the controller stops them).
            TaskEvent::Completing { .. } => event,
            TaskEvent::Ended {
                state,
                exit_code,
                signal,
                drain,
                ..
            } => {
                let state = match (r.phase, state) {
                    (
                        RunPhase::Stopping(StopCause::Shutdown | StopCause::Fenced),
                        JobState::Cancelled,
                    ) => JobState::NodeFail,
                    (_, s) => s,
                };
                self.forget(run);
                TaskEvent::Ended {
                    run,
                    state,
                    exit_code,
                    signal,
                    drain,
                }
            }
        };
        Ok(self.emit(event))
    }

    fn shutdown(&mut self) -> Vec<Action> {
        self.shutting_down = true;
        let mut out = Vec::new();
        for (&run, r) in &mut self.runs {
            if matches!(r.phase, RunPhase::Launching | RunPhase::Running) {
                r.phase = RunPhase::Stopping(StopCause::Shutdown);
                out.push(Action::Stop {
                    run,
                    kill_wait: r.kill_wait,
                });
            }
        }
        out
    }

    /// Stops every run not stopping yet, for good reason but not its own.
    fn fence(&mut self, kill_wait: Duration) -> Vec<Action> {
        let mut out = Vec::new();
        for (&run, r) in &mut self.runs {
            if matches!(r.phase, RunPhase::Launching | RunPhase::Running) {
                r.phase = RunPhase::Stopping(StopCause::Fenced);
                out.push(Action::Stop {
                    run,
                    kill_wait: r.kill_wait.min(kill_wait),
                });
            }
        }
        out
    }

    /// The run is no longer alive here.
    fn forget(&mut self, run: RunRef) {
        self.runs.remove(&run);
        if self.ended.insert(run) {
            self.ended_order.push_back(run);
        }
        while self.ended_order.len() > ENDED_MEMORY {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }

    /// Numbers the event, keeps it until acknowledged, and sends it if the link is up.
    fn emit(&mut self, event: TaskEvent) -> Vec<Action> {
        let e = SequencedEvent {
            seq: self.next_seq,
            event,
        };
        self.next_seq += 1;
        self.outbox.push_back(e.clone());
        while self.outbox.len() > self.outbox_limit {
            self.drop_one();
        }
        match self.link {
            Link::Up { .. } => vec![Action::Send(AgentMessage::Event(e))],
            Link::Down | Link::AwaitingWelcome { .. } => Vec::new(),
        }
    }

    /// Makes room in a full outbox: the oldest `Started` first (a later end of the same run
    /// implies it), else the oldest event.
    fn drop_one(&mut self) {
        let pos = self
            .outbox
            .iter()
            .position(|e| matches!(e.event, TaskEvent::Started { .. }))
            .unwrap_or(0);
        if let Some(e) = self.outbox.remove(pos) {
            self.dropped += 1;
            tracing::error!(
                seq = e.seq,
                job = %e.event.run().job,
                run = e.event.run().run,
                limit = self.outbox_limit,
                dropped = self.dropped,
                "the outbox is full: an unacknowledged event is dropped"
            );
        }
    }

    /// Panics when an invariant does not hold (debug builds and tests check after every
    /// step).
    #[cfg(any(test, debug_assertions))]
    pub(crate) fn check_invariants(&self) {
        let mut last = None;
        for e in &self.outbox {
            assert!(last.is_none_or(|l| e.seq > l), "outbox out of order");
            assert!(e.seq < self.next_seq, "outbox event from the future");
            last = Some(e.seq);
        }
        assert!(
            self.outbox.len() <= self.outbox_limit,
            "outbox over its bound"
        );
        for run in self.runs.keys() {
            assert!(!self.ended.contains(run), "run {run:?} alive and ended");
        }
        assert_eq!(self.ended.len(), self.ended_order.len());
        if let Link::Up { node_id } = self.link {
            assert_eq!(self.node_id, Some(node_id), "link up with another node id");
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cadre_core::alloc::Allocation;
    use cadre_core::cluster::NodeShape;
    use cadre_core::job::{JobId, JobSpec};
    use cadre_core::resources::TaskResources;
    use cadre_core::run::RunSpec;
    use cadre_core::time::Dur;

    fn report() -> NodeReport {
        NodeReport {
            shape: NodeShape::uniform("local", 2, 1024, 0, "none", 0, 1),
            emulated_gpus: false,
            address: "host".into(),
            notes: vec![],
            container_runtime: None,
        }
    }

    fn run(job: u64) -> RunRef {
        RunRef::job_run(JobId(job), 0)
    }

    pub(crate) fn order(job: u64) -> Box<LaunchOrder> {
        let mut run_spec = RunSpec::command(vec!["true".into()], "/".into());
        run_spec.kill_wait_secs = 7;
        Box::new(LaunchOrder {
            run: run(job),
            spec: JobSpec::simple("root", "a", 1, TaskResources::default(), Dur(0)),
            partition: "p".into(),
            allocation: Allocation::default(),
            node_names: BTreeMap::new(),
            node_addresses: BTreeMap::new(),
            run_spec,
            time_limit_ms: None,
            step: None,
            job_token: None,
            claims: Vec::new(),
            host_paths: Vec::new(),
        })
    }

    fn ended(job: u64, state: JobState) -> TaskEvent {
        TaskEvent::Ended {
            run: run(job),
            state,
            exit_code: Some(0),
            signal: None,
            drain: None,
        }
    }

    /// A session with a welcomed connection, node id 3, first seq 1.
    fn up() -> Session {
        let mut s = Session::new("n1".into(), report(), 1, 100);
        s.handle(Input::Connected).unwrap();
        s.handle(welcome()).unwrap();
        s
    }

    fn welcome() -> Input {
        Input::Message(ControllerMessage::Welcome {
            version: PROTOCOL_VERSION,
            node_id: NodeId(3),
            lease_ms: None,
            now_ms: None,
            settings: None,
        })
    }

    fn msg(m: ControllerMessage) -> Input {
        Input::Message(m)
    }

    fn sent_events(actions: &[Action]) -> Vec<(u64, TaskEvent)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Send(AgentMessage::Event(e)) => Some((e.seq, e.event.clone())),
                _ => None,
            })
            .collect()
    }

    fn hello(actions: &[Action]) -> Hello {
        match actions {
            [Action::Send(AgentMessage::Hello(h))] => (**h).clone(),
            other => panic!("expected one hello, got {other:?}"),
        }
    }

    #[test]
    fn the_node_s_health_is_in_every_hello_and_told_when_it_changes() {
        let sick = |s: &str| Input::Health(Some(s.to_string()));
        let health_sent = |actions: &[Action]| -> Vec<Option<String>> {
            actions
                .iter()
                .filter_map(|a| match a {
                    Action::Send(AgentMessage::Health { problem }) => Some(problem.clone()),
                    _ => None,
                })
                .collect()
        };
        let mut s = Session::new("n1".into(), report(), 1, 100);
        // Found before the first hello: told in it.
        assert!(s.handle(sick("disk full")).unwrap().is_empty());
        let h = hello(&s.handle(Input::Connected).unwrap());
        assert_eq!(h.health.as_deref(), Some("disk full"));
        // Changed while the welcome is awaited: told after it.
        assert!(s.handle(Input::Health(None)).unwrap().is_empty());
        assert_eq!(health_sent(&s.handle(welcome()).unwrap()), vec![None]);
        // Connected: told at once, and only when it changes.
        assert_eq!(
            health_sent(&s.handle(sick("clock")).unwrap()),
            vec![Some("clock".to_string())]
        );
        assert!(s.handle(sick("clock")).unwrap().is_empty());
        // A reconnect's hello carries what is known now.
        s.handle(Input::Disconnected).unwrap();
        let h = hello(&s.handle(Input::Connected).unwrap());
        assert_eq!(h.health.as_deref(), Some("clock"));
        assert!(health_sent(&s.handle(welcome()).unwrap()).is_empty());
    }

    #[test]
    fn a_launch_is_started_on_the_welcomed_node_id_and_its_events_numbered() {
        let mut s = up();
        let a = s.handle(msg(ControllerMessage::Launch(order(5)))).unwrap();
        assert!(
            matches!(&a[..], [Action::Launch { node_id: NodeId(3), order }] if order.run == run(5))
        );
        assert_eq!(s.phase(run(5)), Some(RunPhase::Launching));
        let a = s
            .handle(Input::Report(TaskEvent::Started { run: run(5) }))
            .unwrap();
        assert_eq!(
            sent_events(&a),
            vec![(1, TaskEvent::Started { run: run(5) })]
        );
        let a = s
            .handle(Input::Report(ended(5, JobState::Completed)))
            .unwrap();
        assert_eq!(sent_events(&a), vec![(2, ended(5, JobState::Completed))]);
        assert!(s.is_idle());
        assert_eq!(s.outbox_len(), 2);
        s.handle(msg(ControllerMessage::Ack { seq: 1 })).unwrap();
        assert_eq!(s.outbox_len(), 1);
        s.handle(msg(ControllerMessage::Ack { seq: 2 })).unwrap();
        assert_eq!(s.outbox_len(), 0);
        s.check_invariants();
    }

    #[test]
    fn events_while_disconnected_wait_in_the_outbox_for_the_next_hello() {
        let mut s = up();
        s.handle(msg(ControllerMessage::Launch(order(5)))).unwrap();
        s.handle(Input::Report(TaskEvent::Started { run: run(5) }))
            .unwrap();
        s.handle(Input::Disconnected).unwrap();
        let a = s.handle(Input::Report(ended(5, JobState::Failed))).unwrap();
        assert!(a.is_empty());
        let h = hello(&s.handle(Input::Connected).unwrap());
        assert_eq!(h.version, PROTOCOL_VERSION);
        assert_eq!(h.node, "n1");
        assert!(h.running.is_empty());
        let seqs: Vec<u64> = h.outbox.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![1, 2]);
        // The same life as in the first hello: the controller compares the replayed
        // events' seqs with those it applied of this life.
        assert_eq!(h.life, Some(1));
        // Nothing is sent twice on the same connection once welcomed.
        assert!(s.handle(welcome()).unwrap().is_empty());
    }

    #[test]
    fn events_between_hello_and_welcome_are_sent_once_welcomed() {
        let mut s = up();
        s.handle(msg(ControllerMessage::Launch(order(5)))).unwrap();
        s.handle(Input::Disconnected).unwrap();
        let h = hello(&s.handle(Input::Connected).unwrap());
        assert_eq!(h.running, vec![run(5)]);
        assert!(h.outbox.is_empty());
        assert!(
            s.handle(Input::Report(TaskEvent::Started { run: run(5) }))
                .unwrap()
                .is_empty()
        );
        let a = s.handle(welcome()).unwrap();
        assert_eq!(
            sent_events(&a),
            vec![(1, TaskEvent::Started { run: run(5) })]
        );
    }

    #[test]
    fn a_duplicate_launch_starts_nothing_and_repeats_started() {
        let mut s = up();
        s.handle(msg(ControllerMessage::Launch(order(5)))).unwrap();
        assert!(
            s.handle(msg(ControllerMessage::Launch(order(5))))
                .unwrap()
                .is_empty()
        );
        s.handle(Input::Report(TaskEvent::Started { run: run(5) }))
            .unwrap();
        let a = s.handle(msg(ControllerMessage::Launch(order(5)))).unwrap();
        assert_eq!(
            sent_events(&a),
            vec![(2, TaskEvent::Started { run: run(5) })]
        );
        s.handle(Input::Report(ended(5, JobState::Completed)))
            .unwrap();
        // Ended here: a late launch of the same run does not run the job again.
        assert!(
            s.handle(msg(ControllerMessage::Launch(order(5))))
                .unwrap()
                .is_empty()
        );
        assert!(s.is_idle());
    }

    #[test]
    fn stops_reach_alive_runs_and_unknown_runs_are_reported_ended() {
        let mut s = up();
        s.handle(msg(ControllerMessage::Launch(order(5)))).unwrap();
        let a = s
            .handle(msg(ControllerMessage::Stop {
                run: run(5),
                kill_wait_secs: 2,
            }))
            .unwrap();
        assert_eq!(
            a,
            vec![Action::Stop {
                run: run(5),
                kill_wait: Duration::from_secs(2)
            }]
        );
        assert_eq!(
            s.phase(run(5)),
            Some(RunPhase::Stopping(StopCause::Controller))
        );
        // Started after the stop: reported, and still stopping.
        let a = s
            .handle(Input::Report(TaskEvent::Started { run: run(5) }))
            .unwrap();
        assert_eq!(sent_events(&a).len(), 1);
        assert_eq!(
            s.phase(run(5)),
            Some(RunPhase::Stopping(StopCause::Controller))
        );
        assert!(
            s.handle(msg(ControllerMessage::Stop {
                run: run(5),
                kill_wait_secs: 2
            }))
            .unwrap()
            .is_empty()
        );
        s.handle(Input::Report(ended(5, JobState::Cancelled)))
            .unwrap();
        // Ended here: nothing more to say.
        assert!(
            s.handle(msg(ControllerMessage::Stop {
                run: run(5),
                kill_wait_secs: 2
            }))
            .unwrap()
            .is_empty()
        );
        // Never seen here: an end, so that the controller can move on.
        let a = s
            .handle(msg(ControllerMessage::Stop {
                run: run(9),
                kill_wait_secs: 2,
            }))
            .unwrap();
        assert_eq!(
            sent_events(&a),
            vec![(
                3,
                TaskEvent::Ended {
                    run: run(9),
                    state: JobState::Cancelled,
                    exit_code: None,
                    signal: None,
                    drain: None,
                }
            )]
        );
        // Signals reach alive runs only.
        assert!(
            s.handle(msg(ControllerMessage::Signal {
                run: run(9),
                signal: 10
            }))
            .unwrap()
            .is_empty()
        );
    }

    #[test]
    fn shutdown_stops_every_run_with_its_kill_wait_and_reports_node_fail() {
        let mut s = up();
        s.handle(msg(ControllerMessage::Launch(order(5)))).unwrap();
        s.handle(msg(ControllerMessage::Launch(order(6)))).unwrap();
        s.handle(msg(ControllerMessage::Stop {
            run: run(6),
            kill_wait_secs: 1,
        }))
        .unwrap();
        let a = s.handle(Input::Shutdown).unwrap();
        assert_eq!(
            a,
            vec![Action::Stop {
                run: run(5),
                kill_wait: Duration::from_secs(7)
            }]
        );
        let a = s
            .handle(Input::Report(ended(5, JobState::Cancelled)))
            .unwrap();
        assert!(matches!(
            sent_events(&a)[0].1,
            TaskEvent::Ended {
                state: JobState::NodeFail,
                ..
            }
        ));
        // Stopped by the controller: a cancel stays a cancel.
        let a = s
            .handle(Input::Report(ended(6, JobState::Cancelled)))
            .unwrap();
        assert!(matches!(
            sent_events(&a)[0].1,
            TaskEvent::Ended {
                state: JobState::Cancelled,
                ..
            }
        ));
        let a = s.handle(msg(ControllerMessage::Launch(order(7)))).unwrap();
        assert!(matches!(
            &sent_events(&a)[0].1,
            TaskEvent::LaunchFailed { permanent: false, reason, .. } if reason.contains("shutting down")
        ));
        assert!(s.is_idle());
    }

    #[test]
    fn a_lapsed_lease_stops_every_run_as_a_node_failure_and_the_agent_goes_on() {
        let mut s = up();
        s.handle(msg(ControllerMessage::Launch(order(5)))).unwrap();
        s.handle(Input::Disconnected).unwrap();
        let a = s
            .handle(Input::LeaseExpired {
                kill_wait: Duration::from_secs(2),
            })
            .unwrap();
        assert_eq!(
            a,
            vec![Action::Stop {
                run: run(5),
                kill_wait: Duration::from_secs(2)
            }],
            "the fence's kill wait, shorter than the run's own"
        );
        let a = s
            .handle(Input::Report(ended(5, JobState::Cancelled)))
            .unwrap();
        assert!(a.is_empty(), "kept for the controller while disconnected");
        assert!(
            s.outbox.iter().any(|e| matches!(
                e.event,
                TaskEvent::Ended {
                    state: JobState::NodeFail,
                    ..
                }
            )),
            "reported as a node failure, to be requeued"
        );
        // Not shutting down: it takes new runs once back.
        assert!(!s.shutting_down);
        assert!(s.is_idle());
    }

    #[test]
    fn illegal_transitions_are_errors() {
        let mut s = Session::new("n1".into(), report(), 1, 100);
        assert!(matches!(
            s.handle(msg(ControllerMessage::Ack { seq: 1 })),
            Err(SessionError::Internal { .. })
        ));
        s.handle(Input::Connected).unwrap();
        assert!(matches!(
            s.handle(Input::Connected),
            Err(SessionError::Internal { .. })
        ));
        let e = s
            .handle(msg(ControllerMessage::Launch(order(1))))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "protocol violation by the controller: expected a welcome, got a launch message"
        );
        assert!(!e.is_fatal());
        let e = s
            .handle(msg(ControllerMessage::Welcome {
                version: PROTOCOL_VERSION + 1,
                node_id: NodeId(0),
                lease_ms: None,
                now_ms: None,
                settings: None,
            }))
            .unwrap_err();
        assert!(e.is_fatal());
        assert_eq!(
            e.to_string(),
            format!(
                "the controller speaks agent protocol version {}, this agent version {PROTOCOL_VERSION}",
                PROTOCOL_VERSION + 1
            )
        );
        let e = s
            .handle(msg(ControllerMessage::Refused {
                reason: "bad node".into(),
            }))
            .unwrap_err();
        assert_eq!(
            e,
            SessionError::Refused {
                reason: "bad node".into()
            }
        );
        let mut s = up();
        assert!(matches!(
            s.handle(welcome()),
            Err(SessionError::Protocol { .. })
        ));
        assert!(matches!(
            s.handle(msg(ControllerMessage::Ack { seq: 1 })),
            Err(SessionError::Protocol { .. })
        ));
        assert!(matches!(
            s.handle(Input::Report(TaskEvent::Started { run: run(1) })),
            Err(SessionError::Internal { .. })
        ));
    }

    #[test]
    fn a_full_outbox_drops_starts_before_ends() {
        let mut s = Session::new("n1".into(), report(), 1, 2);
        s.handle(Input::Connected).unwrap();
        s.handle(welcome()).unwrap();
        s.handle(msg(ControllerMessage::Launch(order(5)))).unwrap();
        s.handle(msg(ControllerMessage::Launch(order(6)))).unwrap();
        s.handle(Input::Report(TaskEvent::Started { run: run(5) }))
            .unwrap();
        s.handle(Input::Report(ended(5, JobState::Completed)))
            .unwrap();
        s.handle(Input::Report(TaskEvent::Started { run: run(6) }))
            .unwrap();
        s.handle(Input::Disconnected).unwrap();
        let h = hello(&s.handle(Input::Connected).unwrap());
        let seqs: Vec<u64> = h.outbox.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![2, 3]);
        s.check_invariants();
    }

    #[test]
    fn the_memory_of_ended_runs_is_bounded() {
        let mut s = up();
        for job in 0..(ENDED_MEMORY as u64 + 10) {
            s.handle(msg(ControllerMessage::Launch(order(job))))
                .unwrap();
            s.handle(Input::Report(TaskEvent::LaunchFailed {
                run: run(job),
                reason: "x".into(),
                permanent: true,
            }))
            .unwrap();
            s.handle(msg(ControllerMessage::Ack { seq: job + 1 }))
                .unwrap();
        }
        assert_eq!(s.ended.len(), ENDED_MEMORY);
        assert!(!s.ended.contains(&run(0)));
        s.check_invariants();
    }
}
