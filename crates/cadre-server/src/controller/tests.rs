//! The controller as a state machine: fed inputs at a fake time, its effects recorded by a
//! [`Recorder`] over a real SQLite store in a temporary directory. After every input the controller's
//! post-conditions are checked ([`Controller::check_invariants`]).

use super::MAX_NODE_LAUNCH_FAILURES;
use super::*;
use crate::auth::Via;
use cadre_core::cluster::Cluster;
use cadre_core::job::{JobSpec, RequeuePolicy};
use cadre_core::policy::Policy;
use cadre_core::resources::TaskResources;
use cadre_proto::agent::{NodeReport, OLDEST_AGENT_VERSION};
use cadre_store::{NewSubmitKey, Store};

/// What the controller did, in order.
#[derive(Debug, Clone, PartialEq)]
enum Effect {
    Submitted(Vec<JobId>),
    /// A commit: each job's state as committed, and the step records written.
    Committed {
        jobs: Vec<(JobId, JobState)>,
        steps: Vec<(JobId, u32, JobState)>,
        nodes: Vec<String>,
        queue_objects: usize,
    },
    Sent(u64, ControllerMessage),
    Replied(ReplyTo, Result<String, String>),
    StepEnded(JobId, u32),
    Metric(Metric),
}

/// A [`Comm`] that records every effect and carries out store calls on a real store; its
/// commits fail once `fail_commits` is set.
struct Recorder {
    store: Box<dyn Store>,
    log: Vec<Effect>,
    fail_commits: bool,
}

impl Comm for Recorder {
    fn submit(&mut self, jobs: &[NewJob], keys: &[NewSubmitKey]) -> Result<Vec<JobId>, StoreError> {
        let ids = self.store.submit_batch_keyed(jobs, keys)?;
        self.log.push(Effect::Submitted(ids.clone()));
        Ok(ids)
    }

    fn commit(&mut self, tx: &Transaction) -> Result<(), StoreError> {
        if self.fail_commits {
            return Err(StoreError::Corrupt {
                what: "the batch",
                row: String::new(),
                message: "the disk is gone".into(),
            });
        }
        tx.apply_to(self.store.as_mut())?;
        self.log.push(Effect::Committed {
            jobs: tx.changes.iter().map(|c| (c.id, c.status.state)).collect(),
            steps: tx.steps.iter().map(|s| (s.job, s.step, s.state)).collect(),
            nodes: tx.nodes.iter().map(|n| n.name.clone()).collect(),
            queue_objects: tx.queue_objects.len(),
        });
        Ok(())
    }

    fn stored_job(&mut self, id: JobId) -> Result<Option<StoredJob>, StoreError> {
        self.store.job(id)
    }

    fn run_spec(&mut self, id: JobId) -> Result<Option<RunSpec>, StoreError> {
        self.store.run_spec(id)
    }

    fn stored_steps(&mut self, id: JobId) -> Result<Vec<StepRecord>, StoreError> {
        self.store.steps(&cadre_store::StepFilter {
            jobs: vec![id],
            unfinished: false,
        })
    }

    fn send(&mut self, conn: u64, msg: ControllerMessage) {
        self.log.push(Effect::Sent(conn, msg));
    }

    fn reply(&mut self, to: ReplyTo, answer: Answer) {
        let r = match answer {
            Answer::Submitted(r) => r.map(|ids| format!("{ids:?}")),
            Answer::Done(r) => r.map(|()| "done".to_string()),
            Answer::Step(r) => r.map(|v| format!("step {}.{}", v.job, v.step)),
            Answer::QueueObjects(r) => r.map(|v| format!("{} results", v.results.len())),
        };
        self.log
            .push(Effect::Replied(to, r.map_err(|e| e.message.clone())));
    }

    fn step_ended(&mut self, job: JobId, step: u32, _event: StepEvent) {
        self.log.push(Effect::StepEnded(job, step));
    }

    fn metric(&mut self, metric: Metric) {
        self.log.push(Effect::Metric(metric));
    }
}

const NODE_LEASE: Duration = Duration::from_secs(30);
const LEASE_MARGIN: Duration = Duration::from_secs(2);

/// A controller over `nodes` nodes of 4 GPUs, its recorder, and a fake clock.
pub(crate) struct Harness {
    /// Where the store's database lives.
    _dir: Option<tempfile::TempDir>,
    pub(crate) ctl: Controller,
    rec: Recorder,
    now: Now,
    next_reply: u64,
    /// The life every agent's hello names.
    agent_life: u64,
}

pub(crate) fn root() -> Principal {
    Principal {
        user: "root".into(),
        admin: true,
        via: Via::PeerCredentials,
    }
}

pub(crate) fn alice() -> Principal {
    Principal {
        user: "alice".into(),
        admin: false,
        via: Via::PeerCredentials,
    }
}

/// A job of `tasks` tasks of one GPU each, one node's worth per 4.
pub(crate) fn gpu_job(tasks: u32) -> JobSpec {
    let mut spec = JobSpec::simple(
        "alice",
        "alice",
        tasks,
        TaskResources {
            cpus: 1,
            mem_mib: 1024,
            gpus: 1,
            ..TaskResources::default()
        },
        Dur(3600),
    );
    spec.groups[0].tasks_per_node = Some(4);
    spec
}

fn new_job(spec: JobSpec, run: RunSpec) -> NewJob {
    NewJob {
        spec,
        run,
        partition: String::new(),
        array_of: None,
    }
}

pub(crate) fn program() -> RunSpec {
    RunSpec::command(vec!["train".into()], "/".into())
}

impl Harness {
    pub(crate) fn new(nodes: u32) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cadre.db");
        let store = cadre_store::open(path.to_str().unwrap()).expect("a store");
        let mut h = Harness::recover(nodes, store, Duration::ZERO);
        h._dir = Some(dir);
        h
    }

    /// A controller rebuilt from what `store` holds, at `mono` on the fake clock.
    fn recover(nodes: u32, mut store: Box<dyn Store>, mono: Duration) -> Harness {
        let sched = Scheduler::new(Cluster::flat_gpu(nodes, 4), Policy::default()).unwrap();
        let snapshot = Snapshot::load(store.as_mut(), Time(1_000)).unwrap();
        let mut rec = Recorder {
            store,
            log: Vec::new(),
            fail_commits: false,
        };
        let now = Now {
            wall: Time(1_000_000 + mono.as_secs()),
            mono,
        };
        let config = ControllerConfig {
            node_lease: NODE_LEASE,
            lease_margin: LEASE_MARGIN,
            emulated_gpus: true,
            job_token_key: "the cluster key".into(),
            agent_settings: Default::default(),
        };
        let ctl = Controller::recover(sched, config, snapshot, now, &mut rec).unwrap();
        ctl.check_invariants().unwrap();
        Harness {
            _dir: None,
            ctl,
            rec,
            now,
            next_reply: 0,
            agent_life: 1,
        }
    }

    fn feed(&mut self, input: Input) -> Result<(), StoreFailed> {
        let r = self.ctl.handle(input, self.now, &mut self.rec);
        if let Err(e) = self.ctl.check_invariants() {
            panic!("post-condition broken: {e}\n{:#?}", self.rec.log);
        }
        r
    }

    fn reply_to(&mut self) -> ReplyTo {
        self.next_reply += 1;
        ReplyTo(self.next_reply)
    }

    fn later(&mut self, secs: u64) {
        self.now.wall.0 += secs;
        self.now.mono += Duration::from_secs(secs);
    }

    /// Connection `conn` closes, its last frame heard now.
    fn gone(&mut self, conn: u64) {
        let last_heard = self.now.mono;
        self.feed(Input::AgentGone { conn, last_heard }).unwrap();
    }

    pub(crate) fn tick(&mut self, pass: bool) {
        self.feed(Input::Tick { pass }).unwrap();
    }

    /// Node `n`'s agent says hello on connection `conn`, running `running`.
    fn hello(&mut self, n: u32, conn: u64, running: Vec<RunRef>, outbox: Vec<SequencedEvent>) {
        let shape = self.ctl.sched().cluster().shape(NodeId(n)).clone();
        self.hello_as(n, conn, shape, running, outbox);
    }

    /// Node `n`'s agent says hello, reporting `shape` as what it found.
    fn hello_as(
        &mut self,
        n: u32,
        conn: u64,
        shape: cadre_core::cluster::NodeShape,
        running: Vec<RunRef>,
        outbox: Vec<SequencedEvent>,
    ) {
        self.hello_full(n, conn, PROTOCOL_VERSION, shape, running, outbox, None);
    }

    /// Node `n`'s agent of protocol `version` says hello with all it may say.
    #[allow(clippy::too_many_arguments)]
    fn hello_full(
        &mut self,
        n: u32,
        conn: u64,
        version: u32,
        shape: cadre_core::cluster::NodeShape,
        running: Vec<RunRef>,
        outbox: Vec<SequencedEvent>,
        health: Option<String>,
    ) {
        let node = NodeId(n);
        let hello = Hello {
            version,
            health,
            agent_version: Some("0.1.0".into()),
            life: Some(self.agent_life),
            node: self.ctl.node_name(node).to_owned(),
            report: NodeReport {
                shape,
                emulated_gpus: true,
                address: format!("10.0.0.{n}"),
                notes: Vec::new(),
                container_runtime: None,
            },
            running,
            outbox,
        };
        self.feed(Input::AgentHello {
            conn,
            hello: Box::new(hello),
        })
        .unwrap();
    }

    /// Every node's agent connects (connection = 100 + node).
    pub(crate) fn connect_all(&mut self) {
        for n in 0..self.ctl.sched().cluster().nodes.len() as u32 {
            self.hello(n, 100 + u64::from(n), Vec::new(), Vec::new());
        }
        self.tick(false);
    }

    pub(crate) fn submit(&mut self, spec: JobSpec, run: RunSpec) -> ReplyTo {
        let reply = self.reply_to();
        self.feed(Input::Submit {
            jobs: vec![new_job(spec, run)],
            dry_run: false,
            key: None,
            reply,
        })
        .unwrap();
        reply
    }

    /// Submits and runs a pass: the job's id.
    pub(crate) fn start(&mut self, spec: JobSpec, run: RunSpec) -> JobId {
        let before = self.rec.log.len();
        self.submit(spec, run);
        self.tick(true);
        self.rec.log[before..]
            .iter()
            .find_map(|e| match e {
                Effect::Submitted(ids) => ids.first().copied(),
                _ => None,
            })
            .expect("submitted")
    }

    /// Alice asks a step of `ntasks` tasks in job `id`, and the batch ends.
    fn step(&mut self, id: JobId, ntasks: u32) -> ReplyTo {
        let reply = self.reply_to();
        self.feed(Input::StepCreate {
            who: alice(),
            id,
            request: Box::new(StepRequest {
                command: vec!["hostname".into()],
                work_dir: "/".into(),
                ntasks: Some(ntasks),
                ..StepRequest::default()
            }),
            reply,
        })
        .unwrap();
        self.tick(false);
        reply
    }

    /// An administrator resumes `node` (the batch still to end).
    fn resume(&mut self, node: NodeId) {
        let reply = self.reply_to();
        self.feed(Input::Node {
            who: root(),
            name: self.ctl.node_name(node).to_owned(),
            action: NodeAction::Resume,
            reply,
        })
        .unwrap();
    }

    fn state(&self, id: JobId) -> Option<JobState> {
        self.ctl.sched().job(id).map(|j| j.state)
    }

    fn event(&mut self, n: u32, seq: u64, event: TaskEvent) {
        self.feed(Input::AgentEvent {
            conn: 100 + u64::from(n),
            event: SequencedEvent { seq, event },
        })
        .unwrap();
    }

    /// Where in the log a launch of `run` went to connection `conn`.
    fn launch_at(&self, run: RunRef, conn: u64) -> Option<usize> {
        self.rec.log.iter().position(
            |e| matches!(e, Effect::Sent(c, ControllerMessage::Launch(o)) if *c == conn && o.run == run),
        )
    }

    /// Where in the log the first commit of `id` in `state` is.
    fn committed_at(&self, id: JobId, state: JobState) -> Option<usize> {
        self.rec.log.iter().position(
            |e| matches!(e, Effect::Committed { jobs, .. } if jobs.contains(&(id, state))),
        )
    }

    fn stops_to(&self, since: usize, conn: u64, run: RunRef) -> usize {
        self.rec.log[since..]
            .iter()
            .filter(|e| {
                matches!(e, Effect::Sent(c, ControllerMessage::Stop { run: r, .. }) if *c == conn && *r == run)
            })
            .count()
    }
}

fn ended(run: RunRef, state: JobState, exit_code: i32) -> TaskEvent {
    TaskEvent::Ended {
        run,
        state,
        exit_code: Some(exit_code),
        signal: None,
        drain: None,
    }
}

#[test]
fn a_launch_is_sent_only_after_its_start_is_committed() {
    let mut h = Harness::new(2);
    h.connect_all();
    let id = h.start(gpu_job(8), program());
    assert_eq!(h.state(id), Some(JobState::Running));
    let run = RunRef::job_run(id, 0);
    let committed = h
        .committed_at(id, JobState::Running)
        .expect("the start is committed");
    for conn in [100, 101] {
        let launch = h.launch_at(run, conn).expect("each node gets the launch");
        assert!(
            committed < launch,
            "launch at {launch} before its commit at {committed}"
        );
        // The order carries the run's job token, made by the controller (an enrolled
        // agent holds no key to make it).
        let Effect::Sent(_, ControllerMessage::Launch(order)) = &h.rec.log[launch] else {
            unreachable!()
        };
        let token = order.job_token.as_ref().expect("a job token");
        assert_eq!(
            cadre_proto::job_token::verify("the cluster key", &token.0),
            Some((id, 0))
        );
    }
}

#[test]
fn a_reply_is_sent_only_after_its_commit() {
    let mut h = Harness::new(1);
    h.connect_all();
    let submit = h.submit(gpu_job(4), program());
    h.tick(false);
    let submitted = h
        .rec
        .log
        .iter()
        .position(|e| matches!(e, Effect::Submitted(_)))
        .expect("submitted");
    let answered = h
        .rec
        .log
        .iter()
        .position(|e| matches!(e, Effect::Replied(to, Ok(_)) if *to == submit))
        .expect("answered");
    assert!(
        submitted < answered,
        "the submission is answered after its commit"
    );
    let id = JobId(1);
    let cancel = h.reply_to();
    h.feed(Input::Job {
        who: alice(),
        id,
        action: JobAction::Cancel,
        reply: cancel,
    })
    .unwrap();
    assert!(
        !h.rec
            .log
            .iter()
            .any(|e| matches!(e, Effect::Replied(to, _) if *to == cancel)),
        "no answer before the batch's commit"
    );
    h.tick(false);
    let committed = h
        .committed_at(id, JobState::Cancelled)
        .expect("the cancel is committed");
    let answered = h
        .rec
        .log
        .iter()
        .position(|e| matches!(e, Effect::Replied(to, Ok(_)) if *to == cancel))
        .expect("answered");
    assert!(committed < answered);
}

#[test]
fn a_store_failure_stops_the_controller_and_nothing_after_it_is_sent() {
    let mut h = Harness::new(2);
    h.connect_all();
    h.submit(gpu_job(8), program());
    h.rec.fail_commits = true;
    let before = h.rec.log.len();
    let result = h.feed(Input::Tick { pass: true });
    assert!(matches!(result, Err(StoreFailed(_))), "{result:?}");
    // The job was submitted (its own store call), started in memory, and its start's
    // commit failed: no launch, no answer beyond the submission's, nothing else.
    let after: Vec<&Effect> = h.rec.log[before..].iter().collect();
    assert!(
        after.iter().all(|e| matches!(
            e,
            Effect::Submitted(_) | Effect::Replied(..) | Effect::Metric(_)
        )),
        "{after:#?}"
    );
    assert!(!after.iter().any(|e| matches!(e, Effect::Sent(..))));
    // And it stays stopped: the next input is refused, and sends nothing.
    h.rec.fail_commits = false;
    let before = h.rec.log.len();
    assert!(h.feed(Input::Tick { pass: true }).is_err());
    assert!(
        h.feed(Input::AgentGone {
            conn: 100,
            last_heard: h.now.mono
        })
        .is_err(),
        "a stopped controller takes no input"
    );
    assert_eq!(h.rec.log.len(), before, "{:#?}", &h.rec.log[before..]);
}

#[test]
fn agents_are_reconciled_on_hello_kept_finished_requeued_stopped() {
    let mut h = Harness::new(4);
    h.connect_all();
    let kept = h.start(gpu_job(4), program());
    let finished = h.start(gpu_job(4), program());
    let requeued = h.start(gpu_job(4), program());
    let nodes: Vec<NodeId> = [kept, finished, requeued]
        .iter()
        .map(|&id| {
            h.ctl
                .sched()
                .job(id)
                .unwrap()
                .allocation
                .as_ref()
                .unwrap()
                .nodes()[0]
        })
        .collect();
    // Each job holds one node; their agents reconnect after a controller hiccup.
    let stranger = RunRef::job_run(JobId(999), 0);
    let before = h.rec.log.len();
    for (i, (&id, node)) in [kept, finished, requeued].iter().zip(&nodes).enumerate() {
        let conn = 100 + u64::from(node.0);
        h.gone(conn);
        let run = RunRef::job_run(id, 0);
        let (running, outbox) = match i {
            // Still running, with a run the controller does not know.
            0 => (vec![run, stranger], Vec::new()),
            // Ended while away: its outbox says how.
            1 => (
                Vec::new(),
                vec![SequencedEvent {
                    seq: 7,
                    event: ended(run, JobState::Completed, 0),
                }],
            ),
            // Gone without a word (the node rebooted: its agent is a new life).
            _ => {
                h.agent_life += 1;
                (Vec::new(), Vec::new())
            }
        };
        h.hello(node.0, 200 + u64::from(node.0), running, outbox);
    }
    h.tick(false);
    assert_eq!(h.state(kept), Some(JobState::Running), "kept");
    assert_eq!(h.state(finished), None, "finished");
    assert!(h.committed_at(finished, JobState::Completed).is_some());
    let job = h.ctl.sched().job(requeued).expect("requeued");
    assert_eq!(
        (job.state, job.requeues),
        (JobState::Pending, 1),
        "requeued"
    );
    let kept_conn = 200 + u64::from(nodes[0].0);
    assert_eq!(
        h.stops_to(before, kept_conn, stranger),
        1,
        "the unknown run is stopped"
    );
    assert_eq!(
        h.stops_to(before, kept_conn, RunRef::job_run(kept, 0)),
        0,
        "the kept run is left alone"
    );
    let finished_conn = 200 + u64::from(nodes[1].0);
    assert!(
        h.rec.log[before..].contains(&Effect::Sent(
            finished_conn,
            ControllerMessage::Ack { seq: 7 }
        )),
        "the outbox is acknowledged"
    );
}

#[test]
fn a_node_away_past_its_lease_and_margin_from_its_last_frame_requeues_its_gang_whole() {
    let mut h = Harness::new(2);
    h.connect_all();
    let id = h.start(gpu_job(8), program());
    let run = RunRef::job_run(id, 0);
    // Its last frame came 10 s before its connection was closed as silent.
    let last_heard = h.now.mono;
    h.later(10);
    h.feed(Input::AgentGone {
        conn: 101,
        last_heard,
    })
    .unwrap();
    assert_eq!(
        h.ctl.next_loss_at(),
        Some(last_heard + NODE_LEASE + LEASE_MARGIN)
    );
    h.later((NODE_LEASE + LEASE_MARGIN).as_secs() - 10 - 1);
    let before = h.rec.log.len();
    h.tick(false);
    assert_eq!(
        h.state(id),
        Some(JobState::Running),
        "not before the lease and margin"
    );
    assert_eq!(h.stops_to(before, 100, run), 0);
    h.later(1);
    h.tick(false);
    assert!(
        h.stops_to(before, 100, run) >= 1,
        "the rest of the gang is stopped"
    );
    assert_eq!(
        h.ctl.sched().cluster().node(NodeId(1)).avail,
        NodeAvail::Down
    );
    // Its other node's tasks end: the whole gang goes back to the queue.
    h.event(0, 1, ended(run, JobState::Cancelled, 143));
    h.tick(false);
    let job = h.ctl.sched().job(id).expect("requeued");
    assert_eq!((job.state, job.requeues), (JobState::Pending, 1));
    assert!(h.committed_at(id, JobState::Pending).is_some());
}

#[test]
fn nothing_new_starts_on_a_suspect_node_and_it_is_lost_only_after_its_lease_and_margin() {
    let mut h = Harness::new(2);
    h.connect_all();
    h.gone(101);
    h.tick(true);
    let node = h.ctl.sched().cluster().node(NodeId(1));
    assert_eq!(
        (node.avail, node.reason.as_deref()),
        (NodeAvail::Unknown, Some("agent not connected"))
    );
    // A gang of both nodes waits; a job of one node goes to the other.
    let both = h.start(gpu_job(8), program());
    let one = h.start(gpu_job(4), program());
    h.tick(true);
    assert_eq!(h.state(both), Some(JobState::Pending));
    assert_eq!(h.state(one), Some(JobState::Running));
    let placed = h.ctl.sched().job(one).and_then(|j| j.allocation.as_ref());
    assert_eq!(placed.map(|a| a.nodes()), Some(vec![NodeId(0)]));
    assert!(
        !h.rec
            .log
            .iter()
            .any(|e| matches!(e, Effect::Sent(101, ControllerMessage::Launch(_)))),
        "nothing is sent to the suspect node"
    );
    // Not lost one second before its lease and margin have passed; back before, it runs
    // the gang (once the single-node job is done).
    h.later((NODE_LEASE + LEASE_MARGIN).as_secs() - 1);
    h.tick(true);
    assert_eq!(
        h.ctl.sched().cluster().node(NodeId(1)).avail,
        NodeAvail::Unknown
    );
    h.hello(1, 201, Vec::new(), Vec::new());
    h.event(0, 1, ended(RunRef::job_run(one, 0), JobState::Completed, 0));
    h.tick(true);
    assert_eq!(h.ctl.sched().cluster().node(NodeId(1)).avail, NodeAvail::Up);
    assert_eq!(h.state(both), Some(JobState::Running));
    assert_eq!(h.ctl.next_loss_at(), None);
}

#[test]
fn an_older_agent_is_granted_three_quarters_of_the_lease_counted_from_its_disconnection() {
    let mut h = Harness::new(2);
    let shape = h.ctl.sched().cluster().shape(NodeId(0)).clone();
    let old = LEASE_FROM_PINGS_VERSION - 1;
    h.hello_full(0, 100, old, shape.clone(), Vec::new(), Vec::new(), None);
    h.hello(1, 101, Vec::new(), Vec::new());
    let lease = |conn: u64| {
        h.rec.log.iter().find_map(|e| match e {
            Effect::Sent(c, ControllerMessage::Welcome { lease_ms, .. }) if *c == conn => *lease_ms,
            _ => None,
        })
    };
    assert_eq!(lease(100), Some(NODE_LEASE.as_millis() as u64 * 3 / 4));
    assert_eq!(lease(101), Some(NODE_LEASE.as_millis() as u64));
    // Both last heard at 0 s, their connections closed at 20 s: the older agent may have
    // heard the controller until then, and its lease counts from then.
    let last_heard = h.now.mono;
    h.later(20);
    for conn in [100, 101] {
        h.feed(Input::AgentGone { conn, last_heard }).unwrap();
    }
    h.later((NODE_LEASE + LEASE_MARGIN).as_secs() - 20);
    h.tick(false);
    let avail = |h: &Harness, n: u32| h.ctl.sched().cluster().node(NodeId(n)).avail;
    assert_eq!(avail(&h, 1), NodeAvail::Down, "lost from its last frame");
    assert_eq!(
        avail(&h, 0),
        NodeAvail::Unknown,
        "older: from its disconnection"
    );
    h.later(20);
    h.tick(false);
    assert_eq!(avail(&h, 0), NodeAvail::Down);
}

#[test]
fn completing_groups_settle_a_run_and_stop_the_rest() {
    let mut h = Harness::new(2);
    h.connect_all();
    // An MPIJob's shape: one launcher task, four workers on the other node.
    let mut spec = gpu_job(4);
    let mut launcher = spec.groups[0].clone();
    launcher.name = "launcher".into();
    launcher.count = 1;
    launcher.per_task.gpus = 0;
    spec.groups.insert(0, launcher);
    spec.requeue = RequeuePolicy::Never;
    let mut run = program();
    run.completing_groups = Some(vec![0]);
    let id = h.start(spec, run);
    let track = h.ctl.runs.get(&id).expect("running");
    let launcher_node = track
        .allocation
        .tasks
        .iter()
        .find(|t| t.group == 0)
        .unwrap()
        .node;
    let rr = RunRef::job_run(id, 0);
    let before = h.rec.log.len();
    h.event(
        launcher_node.0,
        1,
        TaskEvent::Completing {
            run: rr,
            state: JobState::Completed,
            exit_code: Some(0),
            signal: None,
        },
    );
    h.tick(false);
    for n in h.ctl.runs[&id].nodes_left.clone() {
        assert_eq!(
            h.stops_to(before, 100 + u64::from(n.0), rr),
            1,
            "node {n:?} is told to stop the rest"
        );
    }
    // The workers die of the stop: that does not count.
    for n in h.ctl.runs[&id].nodes_left.clone() {
        h.event(n.0, 2, ended(rr, JobState::Failed, 137));
    }
    h.tick(false);
    assert_eq!(h.state(id), None);
    assert!(
        h.committed_at(id, JobState::Completed).is_some(),
        "{:#?}",
        h.rec.log
    );
}

#[test]
fn a_steps_layout_lies_within_its_job() {
    let mut h = Harness::new(3);
    h.connect_all();
    let mut spec = gpu_job(8);
    spec.user = "alice".into();
    let id = h.start(spec, program());
    let job_alloc = h.ctl.runs[&id].allocation.clone();
    let before = h.rec.log.len();
    h.step(id, 2);
    let orders: Vec<&LaunchOrder> = h.rec.log[before..]
        .iter()
        .filter_map(|e| match e {
            Effect::Sent(_, ControllerMessage::Launch(o)) if o.run.step.is_some() => Some(&**o),
            _ => None,
        })
        .collect();
    assert!(!orders.is_empty(), "{:#?}", &h.rec.log[before..]);
    for o in &orders {
        assert_eq!(o.allocation.tasks.len(), 2);
        for t in &o.allocation.tasks {
            let held = job_alloc.tasks.iter().any(|j| {
                j.node == t.node
                    && t.cores.iter().all(|c| {
                        job_alloc
                            .tasks
                            .iter()
                            .any(|x| x.node == t.node && x.cores.contains(c))
                    })
            });
            assert!(held, "step task {t:?} outside the job's allocation");
            assert!(
                t.gpus.iter().all(|g| job_alloc
                    .tasks
                    .iter()
                    .any(|x| x.node == t.node && x.gpus.contains(g))),
                "step task {t:?} uses a GPU its job does not hold"
            );
        }
    }
    let step_committed = h
        .rec
        .log
        .iter()
        .position(|e| matches!(e, Effect::Committed { steps, .. } if steps.contains(&(id, 0, JobState::Running))))
        .expect("the step's start is committed");
    let first_launch = h
        .rec
        .log
        .iter()
        .position(
            |e| matches!(e, Effect::Sent(_, ControllerMessage::Launch(o)) if o.run.step == Some(0)),
        )
        .unwrap();
    assert!(step_committed < first_launch);
    // A step asking more tasks than its job holds is refused, and nothing is sent.
    let before = h.rec.log.len();
    let reply = h.step(id, 64);
    assert!(
        h.rec.log[before..]
            .iter()
            .any(|e| matches!(e, Effect::Replied(to, Err(_)) if *to == reply))
    );
    assert!(
        !h.rec.log[before..]
            .iter()
            .any(|e| matches!(e, Effect::Sent(_, ControllerMessage::Launch(_))))
    );
}

fn queue_objects(gpus: u32) -> Vec<serde_json::Value> {
    let yaml = format!(
        "apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: f}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{{name: f, resources: [{{name: nvidia.com/gpu, nominalQuota: {gpus}}}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: lq}}
spec: {{clusterQueue: cq}}
"
    );
    cadre_k8s::documents_json(&yaml, "test")
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}

#[test]
fn queue_objects_replaced_while_gangs_run() {
    let mut h = Harness::new(2);
    h.connect_all();
    let apply = |h: &mut Harness, gpus: u32| {
        let reply = h.reply_to();
        h.feed(Input::QueueObjects {
            who: root(),
            request: Box::new(QueueObjectsRequest {
                put: queue_objects(gpus),
                delete: Vec::new(),
                namespace: None,
                dry_run: false,
            }),
            reply,
        })
        .unwrap();
        h.tick(true);
        let answer = h.rec.log.iter().rev().find_map(|e| match e {
            Effect::Replied(to, r) if *to == reply => Some(r.clone()),
            _ => None,
        });
        assert!(matches!(answer, Some(Ok(_))), "{answer:?}");
    };
    apply(&mut h, 4);
    let queued = |tasks| {
        let mut spec = gpu_job(tasks);
        spec.annotations.insert(
            crate::queues::LOCAL_QUEUE_ANNOTATION.into(),
            "default/lq".into(),
        );
        spec
    };
    let first = h.start(queued(4), program());
    assert_eq!(h.state(first), Some(JobState::Running));
    let second = h.start(queued(4), program());
    assert_eq!(
        h.state(second),
        Some(JobState::Pending),
        "beyond the queue's quota"
    );
    // The quota grows while the first gang runs: the first is left alone, the second
    // starts; the objects are committed before the answer.
    let before = h.rec.log.len();
    apply(&mut h, 8);
    assert_eq!(h.state(first), Some(JobState::Running));
    assert_eq!(h.state(second), Some(JobState::Running));
    assert!(
        !h.rec.log[before..]
            .iter()
            .any(|e| matches!(e, Effect::Sent(_, ControllerMessage::Stop { .. }))),
        "no running gang is stopped"
    );
    assert!(
        h.rec.log[before..]
            .iter()
            .any(|e| matches!(e, Effect::Committed { queue_objects, .. } if *queue_objects == 1))
    );
    // And shrinks: nothing running is stopped (quotas admit, they do not evict).
    let before = h.rec.log.len();
    apply(&mut h, 4);
    assert_eq!(h.state(first), Some(JobState::Running));
    assert_eq!(h.state(second), Some(JobState::Running));
    assert!(
        !h.rec.log[before..]
            .iter()
            .any(|e| matches!(e, Effect::Sent(_, ControllerMessage::Stop { .. })))
    );
}

/// Feeds submissions of one job each with idempotency key `key` (one batch), then ends
/// the batch: their answers, and how many jobs were committed.
fn submit_keyed(h: &mut Harness, keys: &[&str]) -> (Vec<Result<String, String>>, usize) {
    let before = h.rec.log.len();
    let replies: Vec<ReplyTo> = keys
        .iter()
        .map(|k| {
            let reply = h.reply_to();
            h.feed(Input::Submit {
                jobs: vec![new_job(gpu_job(1), program())],
                dry_run: false,
                key: Some((*k).to_string()),
                reply,
            })
            .unwrap();
            reply
        })
        .collect();
    h.tick(false);
    let log = &h.rec.log[before..];
    let answers = replies
        .iter()
        .map(|reply| {
            log.iter()
                .find_map(|e| match e {
                    Effect::Replied(to, r) if to == reply => Some(r.clone()),
                    _ => None,
                })
                .expect("answered")
        })
        .collect();
    let committed = log
        .iter()
        .map(|e| match e {
            Effect::Submitted(ids) => ids.len(),
            _ => 0,
        })
        .sum();
    (answers, committed)
}

#[test]
fn a_submission_sent_again_with_its_key_gets_its_jobs_once_also_from_the_next_leader() {
    let mut h = Harness::new(2);
    h.connect_all();
    let (first, n) = submit_keyed(&mut h, &["k1"]);
    assert_eq!(n, 1);
    assert!(first[0].is_ok(), "{first:?}");
    // Sent again (its answer was lost): the same job, nothing committed.
    let (again, n) = submit_keyed(&mut h, &["k1"]);
    assert_eq!((again, n), (first.clone(), 0));
    // Twice in one batch: committed once, both answered with it.
    let (both, n) = submit_keyed(&mut h, &["k2", "k2"]);
    assert_eq!(n, 1);
    assert_eq!(both[0], both[1]);
    assert_ne!(both[0], first[0]);
    // Another controller, from the store (a failover): the keys answer there too.
    let dir = h._dir.take();
    let Harness { rec, .. } = h;
    let mut r = Harness::recover(2, rec.store, Duration::from_secs(500));
    r._dir = dir;
    let (after, n) = submit_keyed(&mut r, &["k1", "k2", "k3"]);
    assert_eq!(n, 1, "only the new key commits");
    assert_eq!(after[0], first[0]);
    assert_eq!(after[1], both[0]);
}

#[test]
fn an_agent_back_without_a_launch_it_never_got_is_sent_it_again_and_one_that_ran_it_is_not() {
    let mut h = Harness::new(2);
    h.connect_all();
    let id = h.start(gpu_job(4), program());
    let node = h.ctl.runs[&id].allocation.nodes()[0];
    let run = RunRef::job_run(id, 0);
    let conn = 100 + u64::from(node.0);
    assert!(h.launch_at(run, conn).is_some(), "launched");
    // The connection drops before the order arrives; the agent comes back without the run.
    h.gone(conn);
    h.hello(node.0, 300, Vec::new(), Vec::new());
    h.tick(false);
    assert!(h.launch_at(run, 300).is_some(), "the launch is sent again");
    assert_eq!(h.state(id), Some(JobState::Running), "not taken for lost");
    assert_eq!(h.ctl.sched().job(id).unwrap().requeues, 0);
    // Now it starts there; an agent that comes back without a run it started lost it.
    h.feed(Input::AgentEvent {
        conn: 300,
        event: SequencedEvent {
            seq: 1,
            event: TaskEvent::Started { run },
        },
    })
    .unwrap();
    h.tick(false);
    h.gone(300);
    h.hello(node.0, 301, Vec::new(), Vec::new());
    h.tick(true);
    assert!(
        h.launch_at(run, 301).is_none(),
        "a started run is not launched again"
    );
    let j = h.ctl.sched().job(id).unwrap();
    assert!(
        j.requeues == 1 || j.state != JobState::Running,
        "the run lost on the node ended it: {:?}",
        j.state
    );
}

#[test]
fn restart_recovery_from_a_store_snapshot() {
    let mut h = Harness::new(2);
    h.connect_all();
    let running = h.start(gpu_job(4), program());
    let mut held = gpu_job(4);
    held.hold = true;
    let pending = h.start(held, program());
    assert_eq!(h.state(pending), Some(JobState::Pending));
    let node = h.ctl.runs[&running].allocation.nodes()[0];
    // The controller dies; a new one is built from what the store holds.
    let dir = h._dir.take();
    let Harness { rec, .. } = h;
    let mut r = Harness::recover(2, rec.store, Duration::from_secs(500));
    r._dir = dir;
    assert_eq!(r.state(running), Some(JobState::Running), "adopted");
    assert_eq!(r.state(pending), Some(JobState::Pending), "still queued");
    assert_eq!(
        r.ctl.sched().job(pending).unwrap().hold,
        Some(Hold::User),
        "still held"
    );
    // Its agent comes back with the run: kept, and never launched again.
    r.hello(node.0, 300, vec![RunRef::job_run(running, 0)], Vec::new());
    r.tick(true);
    assert_eq!(r.state(running), Some(JobState::Running));
    assert!(
        !r.rec
            .log
            .iter()
            .any(|e| matches!(e, Effect::Sent(_, ControllerMessage::Launch(_)))),
        "{:#?}",
        r.rec.log
    );
    // The other node's agent never comes back: its absence counts from the restart.
    r.later((NODE_LEASE + LEASE_MARGIN).as_secs());
    r.tick(false);
    let other = NodeId(1 - node.0);
    assert_eq!(r.ctl.sched().cluster().node(other).avail, NodeAvail::Down);
    assert_eq!(r.state(running), Some(JobState::Running));
}

#[test]
fn a_dry_run_checks_a_job_exactly_as_its_submission_and_commits_nothing() {
    let mut h = Harness::new(1);
    h.connect_all();
    // A job whose LocalQueue annotation is not namespace/name: the submission refuses it
    // in its routing, and so does the dry run (which once skipped the routing and said
    // yes).
    let mut lost = gpu_job(1);
    lost.annotations.insert(
        crate::queues::LOCAL_QUEUE_ANNOTATION.into(),
        "nowhere".into(),
    );
    let answers = |h: &mut Harness, spec: JobSpec, dry_run: bool| {
        let reply = h.reply_to();
        let before = h.rec.log.len();
        h.feed(Input::Submit {
            jobs: vec![new_job(spec, program())],
            dry_run,
            key: None,
            reply,
        })
        .unwrap();
        h.tick(false);
        let answer = h.rec.log[before..].iter().find_map(|e| match e {
            Effect::Replied(to, r) if *to == reply => Some(r.clone()),
            _ => None,
        });
        let committed = h.rec.log[before..]
            .iter()
            .any(|e| matches!(e, Effect::Submitted(_)));
        (answer.expect("answered"), committed)
    };
    let (dry, committed) = answers(&mut h, lost.clone(), true);
    assert!(!committed);
    let (real, _) = answers(&mut h, lost, false);
    assert_eq!(
        dry.clone().map(|_| ()),
        real.clone().map(|_| ()),
        "{dry:?} {real:?}"
    );
    assert!(
        real.as_ref()
            .is_err_and(|e| e.contains("`nowhere` is not namespace/name")),
        "{real:?}"
    );
    // A job that is not a Kubernetes workload naming a queue that does not exist: refused
    // (a workload would wait for it).
    let mut typo = gpu_job(1);
    typo.queue = Some("nowhere".into());
    let (real, committed) = answers(&mut h, typo, false);
    assert!(!committed);
    assert!(
        real.as_ref()
            .is_err_and(|e| e.contains("queue `nowhere` does not exist")),
        "{real:?}"
    );
    let (dry, committed) = answers(&mut h, gpu_job(1), true);
    assert_eq!(dry, Ok("[]".to_string()));
    assert!(!committed, "a dry run commits nothing");
    assert!(h.ctl.sched().jobs().next().is_none());
}

#[test]
fn a_node_with_fewer_gpus_than_described_is_drained_saying_so_until_it_has_them() {
    let mut h = Harness::new(1);
    let whole = h.ctl.sched().cluster().shape(NodeId(0)).clone();
    let mut short = whole.clone();
    short.gpus.pop();
    h.hello_as(0, 100, short, Vec::new(), Vec::new());
    h.tick(true);
    let node = h.ctl.sched().cluster().node(NodeId(0));
    assert_eq!(node.avail, NodeAvail::Drain);
    let reason = node.reason.clone().unwrap_or_default();
    assert!(reason.contains("only 3 of its 4 GPUs"), "{reason}");
    // Never booked for what it does not have: a job of the node's four GPUs waits.
    let id = h.start(gpu_job(4), program());
    assert_eq!(h.state(id), Some(JobState::Pending));
    // An administrator's resume does not lift a drain the node's own report set.
    let reply = h.reply_to();
    h.feed(Input::Node {
        who: root(),
        name: h.ctl.node_name(NodeId(0)).to_owned(),
        action: NodeAction::Resume,
        reply,
    })
    .unwrap();
    h.tick(true);
    assert_eq!(
        h.ctl.sched().cluster().node(NodeId(0)).avail,
        NodeAvail::Drain
    );
    assert_eq!(h.state(id), Some(JobState::Pending));
    // Its agent comes back whole (the GPU reseated): the drain is lifted, the job runs.
    h.gone(100);
    h.hello_as(0, 101, whole, Vec::new(), Vec::new());
    h.tick(true);
    assert_eq!(h.ctl.sched().cluster().node(NodeId(0)).avail, NodeAvail::Up);
    assert_eq!(h.state(id), Some(JobState::Running));
}

#[test]
fn a_node_whose_tasks_outlive_sigkill_is_drained_kill_task_failed_until_an_administrator_resumes_it()
 {
    let mut h = Harness::new(2);
    h.connect_all();
    let id = h.start(gpu_job(1), program());
    let run = RunRef::job_run(id, 0);
    let node = h
        .ctl
        .sched()
        .job(id)
        .and_then(|j| j.allocation.as_ref())
        .expect("placed")
        .tasks[0]
        .node;
    let what =
        "Kill task failed: processes [4242] in /sys/fs/cgroup/cadre.n1.1/job1.task0 after SIGKILL";
    h.event(
        node.0,
        1,
        TaskEvent::Ended {
            run,
            state: JobState::Completed,
            exit_code: Some(0),
            signal: None,
            drain: Some(what.into()),
        },
    );
    h.tick(true);
    // The job ends as its tasks did; the node is drained with Slurm's reason and what.
    assert!(h.committed_at(id, JobState::Completed).is_some());
    let n = h.ctl.sched().cluster().node(node);
    assert_eq!(n.avail, NodeAvail::Drain);
    assert_eq!(n.reason.as_deref(), Some(what));
    // Nothing new is booked there while the processes may hold its GPUs.
    let next = h.start(gpu_job(4), program());
    let placed = h
        .ctl
        .sched()
        .job(next)
        .and_then(|j| j.allocation.as_ref())
        .map(|a| a.tasks[0].node);
    assert_ne!(placed, Some(node), "a job was placed on the drained node");
    // Durably: the drain is in the store as an administrator's.
    let stored = h.rec.store.nodes().expect("nodes read");
    let record = stored
        .iter()
        .find(|r| r.name == h.ctl.node_name(node))
        .expect("its record");
    assert_eq!(record.avail, NodeAvail::Drain);
    assert!(
        record
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("Kill task failed: ")),
        "{record:?}"
    );
    // An administrator who has looked at the node resumes it.
    h.resume(node);
    h.tick(true);
    assert_eq!(h.ctl.sched().cluster().node(node).avail, NodeAvail::Up);
}

/// Regression: an `Ended` that drained its node, applied but not acknowledged before the
/// connection dropped, comes again in the next hello's outbox; the administrator resumed
/// the node in between, and the replay must not drain it again (nor end, requeue or count
/// the run twice).
#[test]
fn a_replayed_ended_with_a_drain_does_not_drain_a_resumed_node_again_nor_count_twice() {
    let mut h = Harness::new(2);
    h.connect_all();
    let id = h.start(gpu_job(4), program());
    let run = RunRef::job_run(id, 0);
    let node = h
        .ctl
        .sched()
        .job(id)
        .unwrap()
        .allocation
        .as_ref()
        .unwrap()
        .nodes()[0];
    let conn = 100 + u64::from(node.0);
    // The agent was stopping (NODE_FAIL, requeued) and some of the tasks outlived SIGKILL.
    let what = "Kill task failed: processes [4242] in job1.task0 after SIGKILL";
    let end = SequencedEvent {
        seq: 5,
        event: TaskEvent::Ended {
            run,
            state: JobState::NodeFail,
            exit_code: None,
            signal: Some(9),
            drain: Some(what.into()),
        },
    };
    h.feed(Input::AgentEvent {
        conn,
        event: end.clone(),
    })
    .unwrap();
    h.tick(true);
    assert_eq!(h.ctl.sched().cluster().node(node).avail, NodeAvail::Drain);
    let requeues = |h: &Harness| h.ctl.sched().job(id).map(|j| (j.requeues, j.state));
    let after_end = requeues(&h);
    assert_eq!(after_end.map(|r| r.0), Some(1), "requeued once");
    // The acknowledgement never reaches the agent: the connection drops.
    h.gone(conn);
    h.tick(false);
    // An administrator resumes the node.
    h.resume(node);
    h.tick(false);
    assert_ne!(h.ctl.sched().cluster().node(node).avail, NodeAvail::Drain);
    // The agent reconnects with the same event in its outbox.
    let before = h.rec.log.len();
    h.hello(node.0, 200 + u64::from(node.0), Vec::new(), vec![end]);
    h.tick(true);
    let n = h.ctl.sched().cluster().node(node);
    assert_eq!(
        (n.avail, n.reason.as_deref()),
        (NodeAvail::Up, None),
        "the replay drained the resumed node again"
    );
    assert_eq!(requeues(&h), after_end, "the replay changed the job");
    assert!(
        !h.rec.log[before..].iter().any(|e| matches!(
            e,
            Effect::Committed { jobs, .. } if jobs.iter().any(|(j, _)| *j == id)
        )),
        "the replay committed a change of the job"
    );
    // It is acknowledged all the same, so that the agent forgets it.
    assert!(h.rec.log[before..].contains(&Effect::Sent(
        200 + u64::from(node.0),
        ControllerMessage::Ack { seq: 5 }
    )));
}

/// A restarted agent numbers its events afresh, maybe lower than its previous life did (a
/// clock stepped back): its replays are applied, not taken for repeats.
#[test]
fn a_restarted_agent_s_replayed_events_are_applied_though_numbered_lower() {
    let mut h = Harness::new(1);
    h.connect_all();
    let first = h.start(gpu_job(4), program());
    h.event(
        0,
        1000,
        ended(RunRef::job_run(first, 0), JobState::Completed, 0),
    );
    h.tick(true);
    assert!(h.committed_at(first, JobState::Completed).is_some());
    // The agent restarts; its events now start at 5.
    h.gone(100);
    h.agent_life = 5;
    h.hello(0, 100, Vec::new(), Vec::new());
    h.tick(true);
    let second = h.start(gpu_job(4), program());
    let run = RunRef::job_run(second, 0);
    assert_eq!(h.state(second), Some(JobState::Running));
    // Its end is in the outbox of its next connection, never having been sent by itself.
    h.gone(100);
    let end = SequencedEvent {
        seq: 5,
        event: ended(run, JobState::Failed, 3),
    };
    h.hello(0, 101, Vec::new(), vec![end]);
    h.tick(true);
    assert!(h.committed_at(second, JobState::Failed).is_some());
}

#[test]
fn an_agent_s_health_drains_its_node_from_its_hello_until_it_reports_clean_and_an_older_agent_is_welcomed_in_its_version()
 {
    let mut h = Harness::new(2);
    let shape = h.ctl.sched().cluster().shape(NodeId(0)).clone();
    let sick = "only 12 MiB free for jobs in /var/lib/cadre-agent";
    h.hello_full(
        0,
        100,
        PROTOCOL_VERSION,
        shape.clone(),
        Vec::new(),
        Vec::new(),
        Some(sick.into()),
    );
    h.tick(true);
    let welcome = |h: &Harness, conn: u64| {
        h.rec.log.iter().find_map(|e| match e {
            Effect::Sent(
                c,
                ControllerMessage::Welcome {
                    version, now_ms, ..
                },
            ) if *c == conn => Some((*version, now_ms.is_some())),
            _ => None,
        })
    };
    assert_eq!(welcome(&h, 100), Some((PROTOCOL_VERSION, true)));
    let node = h.ctl.sched().cluster().node(NodeId(0));
    assert_eq!(
        (node.avail, node.reason.as_deref()),
        (NodeAvail::Drain, Some(sick))
    );
    // Never booked meanwhile; clean again, it is.
    let id = h.start(gpu_job(1), program());
    assert_eq!(h.state(id), Some(JobState::Pending));
    h.feed(Input::AgentHealth {
        conn: 100,
        problem: None,
    })
    .unwrap();
    h.tick(true);
    assert_eq!(h.ctl.sched().cluster().node(NodeId(0)).avail, NodeAvail::Up);
    assert_eq!(h.state(id), Some(JobState::Running));
    // A report from a connection of no node changes nothing.
    h.feed(Input::AgentHealth {
        conn: 999,
        problem: Some("x".into()),
    })
    .unwrap();
    h.tick(true);
    assert_eq!(h.ctl.sched().cluster().node(NodeId(0)).avail, NodeAvail::Up);
    // An agent of the previous version is served in it; one older still is refused.
    h.hello_full(
        1,
        101,
        OLDEST_AGENT_VERSION,
        shape.clone(),
        Vec::new(),
        Vec::new(),
        None,
    );
    assert_eq!(welcome(&h, 101), Some((OLDEST_AGENT_VERSION, true)));
    h.hello_full(
        1,
        102,
        OLDEST_AGENT_VERSION - 1,
        shape,
        Vec::new(),
        Vec::new(),
        None,
    );
    assert!(
        h.rec
            .log
            .iter()
            .any(|e| matches!(e, Effect::Sent(102, ControllerMessage::Refused { .. }))),
        "an agent of version {} was not refused",
        OLDEST_AGENT_VERSION - 1
    );
}

#[test]
fn a_job_whose_launch_fails_on_node_after_node_is_held_after_three_not_draining_them_all() {
    let mut h = Harness::new(4);
    h.connect_all();
    let id = h.start(gpu_job(1), program());
    let mut drained = Vec::new();
    for attempt in 0..MAX_NODE_LAUNCH_FAILURES {
        let job = h.ctl.sched().job(id).expect("the job");
        assert_eq!(job.state, JobState::Running, "attempt {attempt}");
        let node = job.allocation.as_ref().expect("placed").tasks[0].node;
        assert!(!drained.contains(&node), "placed again on a drained node");
        let run = RunRef::job_run(id, attempt);
        h.event(
            node.0,
            u64::from(attempt) + 1,
            TaskEvent::LaunchFailed {
                run,
                reason: "prolog /etc/cadre/prolog failed (exit status 1): scratch is full".into(),
                permanent: false,
            },
        );
        h.tick(true);
        drained.push(node);
        assert_eq!(h.ctl.sched().cluster().node(node).avail, NodeAvail::Drain);
    }
    // Three nodes drained: the job is held for an administrator, and the fourth node is
    // left alone.
    let job = h.ctl.sched().job(id).expect("the job");
    assert_eq!(job.state, JobState::Pending);
    assert!(job.hold.is_some(), "{:?}", job.hold);
    let spare = (0..4).map(NodeId).find(|n| !drained.contains(n)).unwrap();
    assert_eq!(h.ctl.sched().cluster().node(spare).avail, NodeAvail::Up);
}
