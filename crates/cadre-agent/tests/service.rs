//! The agent service against a controller played by the test: a WebSocket server on
//! 127.0.0.1 (or a Unix socket) that checks the bearer key, reads the agent's `Hello`,
//! welcomes it, orders launches, stops and signals of real commands, reads the events and
//! acknowledges them, and drops the connection when the test wants the agent to reconnect.

use cadre_agent::discovery::DiscoveryOptions;
use cadre_agent::service::{self, AgentConfig, AgentError};
use cadre_core::alloc::{Allocation, TaskAlloc};
use cadre_core::cluster::NodeId;
use cadre_core::job::{JobId, JobSpec, JobState};
use cadre_core::resources::TaskResources;
use cadre_core::run::RunSpec;
use cadre_core::time::Dur;
use cadre_proto::agent::{
    AgentMessage, CONNECT_PATH, ControllerMessage, Hello, LaunchOrder, PROTOCOL_VERSION, RunRef,
    SequencedEvent, TaskEvent,
};
use futures_util::{SinkExt, StreamExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

mod common;
use common::{is_root, root_or_skip};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};

const KEY: &str = "test-key-5f3a9c";
/// What the controller calls the agent's node; allocations name it.
const NODE_ID: NodeId = NodeId(7);
/// The longest any one expectation may take.
const STEP: Duration = Duration::from_secs(5);

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// The controller's side of the protocol.
struct Controller {
    listener: Listener,
    /// The address the agent is given.
    address: String,
}

impl Controller {
    async fn tcp() -> Controller {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", l.local_addr().unwrap());
        Controller {
            listener: Listener::Tcp(l),
            address,
        }
    }

    async fn unix(path: &Path) -> Controller {
        let l = tokio::net::UnixListener::bind(path).unwrap();
        Controller {
            listener: Listener::Unix(l),
            address: format!("unix://{}", path.display()),
        }
    }

    /// Accepts the next connection: the WebSocket upgrade, checked as the controller
    /// checks it (path, bearer key; 401 otherwise).
    // The check's error type is tungstenite's.
    #[allow(clippy::result_large_err)]
    async fn upgrade(&self) -> Result<Conn, String> {
        let stream: Box<dyn Io> = tokio::time::timeout(STEP, async {
            match &self.listener {
                Listener::Tcp(l) => Box::new(l.accept().await.unwrap().0) as Box<dyn Io>,
                Listener::Unix(l) => Box::new(l.accept().await.unwrap().0),
            }
        })
        .await
        .expect("the agent did not connect");
        let check = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
            let bearer = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok());
            if req.uri().path() == CONNECT_PATH && bearer == Some(&format!("Bearer {KEY}")) {
                Ok(resp)
            } else {
                let mut e = ErrorResponse::new(Some("bad key".into()));
                *e.status_mut() = 401.try_into().unwrap();
                Err(e)
            }
        };
        tokio_tungstenite::accept_hdr_async(stream, check)
            .await
            .map(|ws| Conn { ws })
            .map_err(|e| e.to_string())
    }

    /// Accepts the agent's next connection and reads its hello.
    async fn accept(&self) -> (Conn, Hello) {
        let mut c = self.upgrade().await.expect("the upgrade failed");
        match c.recv().await {
            AgentMessage::Hello(h) => (c, *h),
            other => panic!("expected a hello first, got {other:?}"),
        }
    }
}

struct Conn {
    ws: WebSocketStream<Box<dyn Io>>,
}

impl Conn {
    async fn recv(&mut self) -> AgentMessage {
        loop {
            let m = tokio::time::timeout(STEP, self.ws.next())
                .await
                .expect("nothing from the agent")
                .expect("the agent closed the connection")
                .unwrap();
            match m {
                Message::Text(t) => return serde_json::from_str(&t).unwrap(),
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("unexpected message {other:?}"),
            }
        }
    }

    async fn send(&mut self, m: ControllerMessage) {
        let text = serde_json::to_string(&m).unwrap();
        self.ws.send(Message::text(text)).await.unwrap();
    }

    async fn welcome(&mut self) {
        self.send(ControllerMessage::Welcome {
            version: PROTOCOL_VERSION,
            node_id: NODE_ID,
            lease_ms: None,
            now_ms: None,
            settings: None,
        })
        .await;
    }

    async fn launch(&mut self, order: LaunchOrder) {
        self.send(ControllerMessage::Launch(Box::new(order))).await;
    }

    /// The next event, acknowledged.
    async fn event(&mut self) -> SequencedEvent {
        let e = match self.recv().await {
            AgentMessage::Event(e) => e,
            other => panic!("expected an event, got {other:?}"),
        };
        self.send(ControllerMessage::Ack { seq: e.seq }).await;
        e
    }

    /// Expects `Started` then `Ended` of `run`; the end's state, exit code and signal.
    async fn started_and_ended(&mut self, run: RunRef) -> (JobState, Option<i32>, Option<i32>) {
        assert_eq!(self.event().await.event, TaskEvent::Started { run });
        ended(self.event().await.event, run)
    }
}

fn ended(event: TaskEvent, expected: RunRef) -> (JobState, Option<i32>, Option<i32>) {
    match event {
        TaskEvent::Ended {
            run,
            state,
            exit_code,
            signal,
            drain: None,
        } if run == expected => (state, exit_code, signal),
        other => panic!("expected the end of {expected:?}, got {other:?}"),
    }
}

/// An agent running in the test's runtime.
struct Agent {
    task: JoinHandle<Result<(), AgentError>>,
    /// Dropping it (or sending) shuts the agent down.
    shutdown: Option<oneshot::Sender<()>>,
    state: tempfile::TempDir,
}

impl Agent {
    fn start(controller: &str, key: &str) -> Agent {
        Agent::start_with(controller, key, |_| {})
    }

    fn start_with(controller: &str, key: &str, adjust: impl FnOnce(&mut AgentConfig)) -> Agent {
        // The agent's log, shown with a failing test's output.
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_test_writer()
            .try_init();
        let state = tempfile::tempdir().unwrap();
        // Users other than root must reach their run's directory under it.
        std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut config = AgentConfig::new(controller, key, "n1", state.path().join("agent"));
        config.address = Some("n1.test".into());
        config.discovery = DiscoveryOptions {
            emulate_gpus: 2,
            ..DiscoveryOptions::default()
        };
        config.flush_timeout = Duration::from_millis(500);
        adjust(&mut config);
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(service::run(config, rx));
        Agent {
            task,
            shutdown: Some(tx),
            state,
        }
    }

    fn state_dir(&self) -> PathBuf {
        self.state.path().join("agent")
    }

    fn shut_down(&mut self) {
        self.shutdown.take();
    }

    /// Waits for the agent to return.
    async fn exit(self) -> Result<(), AgentError> {
        let Agent { task, shutdown, .. } = self;
        let r = tokio::time::timeout(STEP, task)
            .await
            .expect("the agent did not exit")
            .unwrap();
        drop(shutdown);
        r
    }
}

fn me() -> String {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .unwrap()
        .unwrap()
        .name
}

fn run_ref(job: u64) -> RunRef {
    RunRef::job_run(JobId(job), 0)
}

/// Job `job` of `user`: one task on the agent's node running `sh -c script` in `dir`.
fn order(job: u64, user: &str, dir: &Path, script: &str) -> LaunchOrder {
    let allocation = Allocation {
        tasks: vec![TaskAlloc {
            group: 0,
            rank: 0,
            node: NODE_ID,
            // No pinning: the test may not know which CPUs it may use.
            cores: vec![],
            gpus: vec![1],
            gpu_milli_each: 1000,
            nics: vec![],
            mem_mib: 0,
            named: vec![],
        }],
        exclusive: false,
    };
    let mut run_spec = RunSpec::command(
        vec!["/bin/sh".into(), "-c".into(), script.into()],
        dir.to_path_buf(),
    );
    run_spec.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
    run_spec.kill_wait_secs = 1;
    LaunchOrder {
        run: run_ref(job),
        spec: JobSpec::simple(user, "physics", 1, TaskResources::default(), Dur(0)),
        partition: "gpu".into(),
        allocation,
        node_names: [(NODE_ID, "n1".to_string())].into_iter().collect(),
        node_addresses: Default::default(),
        run_spec,
        time_limit_ms: None,
        step: None,
        job_token: None,
        claims: Vec::new(),
        host_paths: Vec::new(),
    }
}

/// Waits for a file the task writes (the task may still be writing it).
async fn wait_for(path: &Path) {
    let deadline = tokio::time::Instant::now() + STEP;
    while !path.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_wrong_key_makes_the_agent_exit_with_a_clear_error() {
    let ctl = Controller::tcp().await;
    let agent = Agent::start(&ctl.address, "not-the-key");
    assert!(ctl.upgrade().await.is_err());
    let err = agent.exit().await.unwrap_err();
    assert!(
        matches!(err, AgentError::Unauthorized { status: 401, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("rejected the agent key (HTTP 401)"),
        "{err}"
    );
}

#[tokio::test]
async fn a_refused_agent_exits_with_the_controllers_reason() {
    let ctl = Controller::tcp().await;
    let agent = Agent::start(&ctl.address, KEY);
    let (mut c, _) = ctl.accept().await;
    c.send(ControllerMessage::Refused {
        reason: "no node named n1 in this cluster".into(),
    })
    .await;
    let err = agent.exit().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the controller at {} refused node n1: no node named n1 in this cluster",
            ctl.address
        )
    );
}

#[tokio::test]
async fn a_launched_command_starts_and_ends_with_its_state_and_exit_code() {
    let ctl = Controller::tcp().await;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(&ctl.address, KEY);
    let (mut c, hello) = ctl.accept().await;
    assert_eq!(hello.version, PROTOCOL_VERSION);
    assert_eq!(hello.node, "n1");
    assert_eq!(hello.report.address, "n1.test");
    assert!(hello.report.emulated_gpus);
    assert_eq!(hello.report.shape.gpus.len(), 2);
    assert!(
        hello.report.notes.iter().any(|n| n.contains("EMULATED")),
        "{:?}",
        hello.report.notes
    );
    assert!(hello.running.is_empty() && hello.outbox.is_empty());
    c.welcome().await;

    let me = me();
    let script = "echo $SLURM_JOB_ID $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES > out";
    c.launch(order(42, &me, dir.path(), script)).await;
    let end = c.started_and_ended(run_ref(42)).await;
    assert_eq!(end, (JobState::Completed, Some(0), None));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out")).unwrap(),
        "42 n1 1\n"
    );

    c.launch(order(43, &me, dir.path(), "exit 3")).await;
    let end = c.started_and_ended(run_ref(43)).await;
    assert_eq!(end, (JobState::Failed, Some(3), None));

    agent.shut_down();
    agent.exit().await.unwrap();
}

#[tokio::test]
async fn a_batch_script_runs_from_the_state_directory_with_its_arguments() {
    let ctl = Controller::tcp().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(&ctl.address, KEY);
    let (mut c, _) = ctl.accept().await;
    c.welcome().await;
    let mut o = order(44, &me(), dir.path(), "");
    o.run_spec.script = Some("#!/bin/sh\necho \"$1 $SLURM_JOB_ID $0\" > out\n".into());
    o.run_spec.command = vec!["hello".into()];
    c.launch(o).await;
    let end = c.started_and_ended(run_ref(44)).await;
    assert_eq!(end, (JobState::Completed, Some(0), None));
    let script = agent.state_dir().join("job44.0/script");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out")).unwrap(),
        format!("hello 44 {}\n", script.display())
    );
    // The run's directory goes with the run.
    assert!(!agent.state_dir().join("job44.0").exists());
}

#[tokio::test]
async fn a_root_agent_runs_a_batch_script_as_the_jobs_user() {
    if !root_or_skip(
        "the tests of batch scripts run as their user",
        "the agent switches users only as root",
    ) {
        return;
    }
    let ctl = Controller::tcp().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let agent = Agent::start(&ctl.address, KEY);
    let (mut c, _) = ctl.accept().await;
    c.welcome().await;
    let mut o = order(45, "nobody", dir.path(), "");
    // The script is the user's alone, in a directory the user cannot change (the agent's:
    // a root agent never writes where a user could place a link) and others cannot list.
    o.run_spec.script = Some(
        "#!/bin/sh\nid -u > out\nstat -c '%u %a' \"$(dirname \"$0\")\" \"$0\" >> out\n".into(),
    );
    c.launch(o).await;
    let end = c.started_and_ended(run_ref(45)).await;
    assert_eq!(end, (JobState::Completed, Some(0), None));
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out")).unwrap(),
        format!("{nobody}\n0 711\n{nobody} 700\n")
    );
    drop(agent);
}

#[tokio::test]
async fn an_unknown_user_fails_the_launch_permanently() {
    let ctl = Controller::tcp().await;
    let dir = tempfile::tempdir().unwrap();
    let _agent = Agent::start(&ctl.address, KEY);
    let (mut c, _) = ctl.accept().await;
    c.welcome().await;
    c.launch(order(46, "no-such-user-cadre", dir.path(), "true"))
        .await;
    match c.event().await.event {
        TaskEvent::LaunchFailed {
            run,
            reason,
            permanent,
        } => {
            assert_eq!(run, run_ref(46));
            assert!(permanent, "{reason}");
            if is_root() {
                assert_eq!(
                    reason,
                    "user `no-such-user-cadre` does not exist on this node"
                );
            }
        }
        other => panic!("expected a failed launch, got {other:?}"),
    }
    // A missing working directory is the job's doing too.
    c.launch(order(47, &me(), &dir.path().join("gone"), "true"))
        .await;
    assert!(matches!(
        c.event().await.event,
        TaskEvent::LaunchFailed { permanent: true, reason, .. } if reason.contains("does not exist")
    ));
}

#[tokio::test]
async fn a_stop_cancels_the_run_and_a_stop_of_an_unknown_run_ends_it() {
    let ctl = Controller::tcp().await;
    let dir = tempfile::tempdir().unwrap();
    let _agent = Agent::start(&ctl.address, KEY);
    let (mut c, _) = ctl.accept().await;
    c.welcome().await;
    c.launch(order(48, &me(), dir.path(), "sleep 30")).await;
    assert_eq!(
        c.event().await.event,
        TaskEvent::Started { run: run_ref(48) }
    );
    c.send(ControllerMessage::Stop {
        run: run_ref(48),
        kill_wait_secs: 1,
    })
    .await;
    let end = ended(c.event().await.event, run_ref(48));
    assert_eq!(end, (JobState::Cancelled, None, Some(15)));

    c.send(ControllerMessage::Stop {
        run: run_ref(99),
        kill_wait_secs: 1,
    })
    .await;
    assert_eq!(
        ended(c.event().await.event, run_ref(99)),
        (JobState::Cancelled, None, None)
    );
}

#[tokio::test]
async fn a_signal_reaches_the_tasks() {
    let ctl = Controller::tcp().await;
    let dir = tempfile::tempdir().unwrap();
    let _agent = Agent::start(&ctl.address, KEY);
    let (mut c, _) = ctl.accept().await;
    c.welcome().await;
    let script = "trap 'echo got-usr1 > sig; exit 0' USR1; touch ready; \
                  while :; do sleep 0.05; done";
    c.launch(order(49, &me(), dir.path(), script)).await;
    assert_eq!(
        c.event().await.event,
        TaskEvent::Started { run: run_ref(49) }
    );
    wait_for(&dir.path().join("ready")).await;
    c.send(ControllerMessage::Signal {
        run: run_ref(49),
        signal: 10,
    })
    .await;
    let end = ended(c.event().await.event, run_ref(49));
    assert_eq!(end, (JobState::Completed, Some(0), None));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("sig")).unwrap(),
        "got-usr1\n"
    );
}

#[tokio::test]
async fn a_time_limit_ends_the_run_as_timeout() {
    let ctl = Controller::tcp().await;
    let dir = tempfile::tempdir().unwrap();
    let _agent = Agent::start(&ctl.address, KEY);
    let (mut c, _) = ctl.accept().await;
    c.welcome().await;
    let mut o = order(50, &me(), dir.path(), "sleep 30");
    o.time_limit_ms = Some(500);
    c.launch(o).await;
    let end = c.started_and_ended(run_ref(50)).await;
    assert_eq!(end, (JobState::Timeout, None, Some(15)));
}

#[tokio::test]
async fn a_duplicate_launch_runs_the_job_once_and_says_started_again() {
    let ctl = Controller::tcp().await;
    let dir = tempfile::tempdir().unwrap();
    let _agent = Agent::start(&ctl.address, KEY);
    let (mut c, _) = ctl.accept().await;
    c.welcome().await;
    let o = order(
        51,
        &me(),
        dir.path(),
        "echo once >> out; while [ ! -e go ]; do sleep 0.02; done",
    );
    c.launch(o.clone()).await;
    let first = c.event().await;
    assert_eq!(first.event, TaskEvent::Started { run: run_ref(51) });
    c.launch(o.clone()).await;
    let again = c.event().await;
    assert_eq!(again.event, TaskEvent::Started { run: run_ref(51) });
    assert!(again.seq > first.seq);
    std::fs::write(dir.path().join("go"), "").unwrap();
    let end = ended(c.event().await.event, run_ref(51));
    assert_eq!(end, (JobState::Completed, Some(0), None));
    // Ended here: a late copy of the order is ignored (nothing runs, nothing is said).
    c.launch(o).await;
    c.send(ControllerMessage::Stop {
        run: run_ref(52),
        kill_wait_secs: 0,
    })
    .await;
    assert_eq!(
        ended(c.event().await.event, run_ref(52)).0,
        JobState::Cancelled
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out")).unwrap(),
        "once\n"
    );
}

#[tokio::test]
async fn the_agent_reconnects_and_reports_what_happened_while_away() {
    let ctl = Controller::tcp().await;
    let dir = tempfile::tempdir().unwrap();
    let _agent = Agent::start(&ctl.address, KEY);
    let (mut c, _) = ctl.accept().await;
    c.welcome().await;
    let run = run_ref(53);
    c.launch(order(
        53,
        &me(),
        dir.path(),
        "while [ ! -e go ]; do sleep 0.02; done",
    ))
    .await;
    let started = match c.recv().await {
        AgentMessage::Event(e) => e,
        other => panic!("expected an event, got {other:?}"),
    };
    assert_eq!(started.event, TaskEvent::Started { run });
    // The controller goes away before acknowledging the start.
    drop(c);

    // The agent comes back; its hello lists the run and repeats the unacknowledged start.
    let (mut c, hello) = ctl.accept().await;
    assert_eq!(hello.running, vec![run]);
    assert_eq!(hello.outbox, vec![started.clone()]);
    c.welcome().await;
    c.send(ControllerMessage::Ack { seq: started.seq }).await;
    drop(c);

    // The run ends while the agent is away. Connections turned away without a welcome
    // see hellos that list the run until the agent has seen it end; then the hello
    // carries the end, and no longer the acknowledged start.
    std::fs::write(dir.path().join("go"), "").unwrap();
    let (mut c, hello) = loop {
        let (c, hello) = ctl.accept().await;
        if hello.running.is_empty() {
            break (c, hello);
        }
        assert_eq!(hello.running, vec![run]);
        assert!(hello.outbox.is_empty(), "{:?}", hello.outbox);
    };
    assert_eq!(hello.outbox.len(), 1, "{:?}", hello.outbox);
    let end = &hello.outbox[0];
    assert!(end.seq > started.seq);
    assert_eq!(
        ended(end.event.clone(), run),
        (JobState::Completed, Some(0), None)
    );
    c.welcome().await;
    c.send(ControllerMessage::Ack { seq: end.seq }).await;
    // Acknowledged: the next connection's hello has nothing left to say.
    drop(c);
    let (_c, hello) = ctl.accept().await;
    assert!(
        hello.running.is_empty() && hello.outbox.is_empty(),
        "{hello:?}"
    );
}

#[tokio::test]
async fn shutdown_stops_the_runs_and_reports_them_node_fail() {
    let ctl = Controller::tcp().await;
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(&ctl.address, KEY);
    let (mut c, _) = ctl.accept().await;
    c.welcome().await;
    c.launch(order(54, &me(), dir.path(), "sleep 30")).await;
    assert_eq!(
        c.event().await.event,
        TaskEvent::Started { run: run_ref(54) }
    );
    agent.shut_down();
    let end = ended(c.event().await.event, run_ref(54));
    assert_eq!(end, (JobState::NodeFail, None, Some(15)));
    agent.exit().await.unwrap();
}

#[tokio::test]
async fn the_agent_connects_over_a_unix_socket_once_the_controller_is_up() {
    let sockets = tempfile::tempdir().unwrap();
    let path = sockets.path().join("cadre.sock");
    let address = format!("unix://{}", path.display());
    let dir = tempfile::tempdir().unwrap();
    let _agent = Agent::start_with(&address, KEY, |c| {
        c.reconnect_max = Duration::from_millis(200);
    });
    // Nothing listens yet: the agent keeps trying.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ctl = Controller::unix(&path).await;
    assert_eq!(ctl.address, address);
    let (mut c, hello) = ctl.accept().await;
    assert_eq!(hello.node, "n1");
    c.welcome().await;
    c.launch(order(55, &me(), dir.path(), "echo $SLURM_JOB_ID > out"))
        .await;
    let end = c.started_and_ended(run_ref(55)).await;
    assert_eq!(end, (JobState::Completed, Some(0), None));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out")).unwrap(),
        "55\n"
    );
}

#[tokio::test]
async fn a_silent_controller_is_left_for_a_new_connection() {
    let ctl = Controller::tcp().await;
    let _agent = Agent::start_with(&ctl.address, KEY, |c| {
        c.keepalive = Duration::from_millis(100);
    });
    let (mut c, _) = ctl.accept().await;
    c.welcome().await;
    // The controller neither reads (so answers no ping) nor writes: after three
    // keepalive intervals the agent gives up on this connection and opens another.
    let (_c2, hello) = ctl.accept().await;
    assert_eq!(hello.node, "n1");
    drop(c);
}

/// Regression: a script written while another run's task was being forked was held open
/// by the child, and executing it failed with ETXTBSY ("text file busy").
#[tokio::test]
async fn batch_scripts_launched_together_all_start() {
    let ctl = Controller::tcp().await;
    let dir = tempfile::tempdir().unwrap();
    let _agent = Agent::start(&ctl.address, KEY);
    let (mut c, _) = ctl.accept().await;
    c.welcome().await;
    let jobs: Vec<u64> = (60..76).collect();
    for &job in &jobs {
        let mut o = order(job, &me(), dir.path(), "");
        o.run_spec.script = Some("#!/bin/sh\nexit 0\n".into());
        c.launch(o).await;
    }
    let mut ended = Vec::new();
    while ended.len() < jobs.len() {
        match c.event().await.event {
            TaskEvent::Started { .. } => {}
            TaskEvent::Ended { run, state, .. } => {
                assert_eq!(state, JobState::Completed);
                ended.push(run.job.0);
            }
            other => panic!("{other:?}"),
        }
    }
    ended.sort_unstable();
    assert_eq!(ended, jobs);
}

#[tokio::test]
async fn the_end_of_the_completing_groups_tasks_is_reported_while_the_others_run() {
    let ctl = Controller::tcp().await;
    let dir = tempfile::tempdir().unwrap();
    let _agent = Agent::start(&ctl.address, KEY);
    let (mut c, _) = ctl.accept().await;
    c.welcome().await;
    // Rank 0 (group 0, a launcher) ends; rank 1 (group 1, a worker) would serve on.
    let mut o = order(
        50,
        &me(),
        dir.path(),
        "if [ $SLURM_PROCID = 0 ]; then exit 0; else sleep 30; fi",
    );
    let mut worker = o.allocation.tasks[0].clone();
    worker.group = 1;
    worker.gpus = vec![];
    o.allocation.tasks.push(worker);
    o.run_spec.completing_groups = Some(vec![0]);
    c.launch(o).await;
    assert_eq!(
        c.event().await.event,
        TaskEvent::Started { run: run_ref(50) }
    );
    assert_eq!(
        c.event().await.event,
        TaskEvent::Completing {
            run: run_ref(50),
            state: JobState::Completed,
            exit_code: Some(0),
            signal: None
        }
    );
    // The controller stops the rest; the node's end follows as usual.
    c.send(ControllerMessage::Stop {
        run: run_ref(50),
        kill_wait_secs: 1,
    })
    .await;
    let end = ended(c.event().await.event, run_ref(50));
    assert_eq!(end, (JobState::Cancelled, None, Some(15)));
}
