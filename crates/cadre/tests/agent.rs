//! `cadre agent` run as an administrator would: its errors, its exit statuses, and its
//! shutdown on SIGTERM. (The protocol itself is tested in cadre-agent's tests.)

use cadre_test_support::{clean_command, wait_until};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::Duration;

/// `cadre agent ARGS` with none of the caller's `CADRE_*` variables (the agent's among
/// them), in this directory (the data directory may not exist yet).
fn agent(args: &[&str], data_dir: &Path) -> Command {
    let mut cmd = clean_command(env!("CARGO_BIN_EXE_cadre"), Path::new("."));
    cmd.arg("agent").args(args).env("CADRE_DATA_DIR", data_dir);
    cmd
}

/// Waits for the child, killing it if it takes longer than `limit`.
fn wait(mut child: Child, limit: Duration) -> (Option<i32>, String) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code(), err);
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("cadre agent did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn without_a_key_the_agent_says_how_to_give_one() {
    let data = tempfile::tempdir().unwrap();
    let child = agent(
        &["--controller", "http://127.0.0.1:1", "--node", "n1"],
        data.path(),
    )
    .spawn()
    .unwrap();
    let (code, err) = wait(child, Duration::from_secs(10));
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        "cadre: error: no agent key: give --key-file FILE (the controller's agent.key), or set \
         CADRE_AGENT_KEY\n"
    );
}

#[test]
fn a_rejected_key_ends_the_agent_with_status_1() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("agent.key"), "wrong\n").unwrap();
    std::fs::set_permissions(
        data.path().join("agent.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    // A controller that rejects every upgrade, as the real one rejects a bad key.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&request).to_lowercase();
            assert!(text.contains("authorization: bearer wrong\r\n"), "{text}");
            let _ = stream.write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let child = agent(
        &[
            "--controller",
            &address,
            "--node",
            "n1",
            "--log-level",
            "error",
        ],
        data.path(),
    )
    .spawn()
    .unwrap();
    let (code, err) = wait(child, Duration::from_secs(10));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "cadre: error: the controller at {address} rejected the agent key (HTTP 401)"
        )),
        "{err}"
    );
}

#[test]
fn sigterm_stops_the_agent_cleanly_even_while_it_waits_for_the_controller() {
    let top = tempfile::tempdir().unwrap();
    let data = top.path().join("data");
    let socket = top.path().join("nobody-listens.sock");
    let controller = format!("unix://{}", socket.display());
    let mut child = agent(
        &[
            "--controller",
            &controller,
            "--node",
            "n1",
            "--gpus-per-node",
            "2",
        ],
        &data,
    )
    .env("CADRE_AGENT_KEY", "k")
    .spawn()
    .unwrap();
    // Once the agent has logged its node, its signal handlers are in place.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    while !log.iter().any(|l: &String| l.contains("node discovered")) {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(line) => log.push(line),
            Err(e) => {
                child.kill().unwrap();
                panic!("no discovery in the log ({e}): {log:?}");
            }
        }
    }
    let discovered = log.last().unwrap();
    assert!(discovered.contains("gpus_emulated=true"), "{discovered}");
    let state = top.path().join("data.run/nodes/n1");
    assert!(
        state.is_dir(),
        "the state directory defaults to nodes/NODE in the run directory, DATA_DIR.run"
    );
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&state).unwrap().permissions());
    assert_eq!(
        mode & 0o777,
        0o755,
        "every user reaches their jobs' files in it"
    );
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut code = None;
    wait_until("the agent stops on SIGTERM", || {
        match child.try_wait().expect("the agent's status") {
            Some(s) => {
                code = s.code();
                true
            }
            None => false,
        }
    });
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(1)) {
        log.push(line);
    }
    assert_eq!(code, Some(0), "{log:#?}");
    assert!(
        log.iter().any(|l| l.contains("SIGTERM received")),
        "{log:#?}"
    );
    assert!(log.iter().any(|l| l.contains("agent stopped")), "{log:#?}");
}

/// An agent's GPU usage reports (protocol 6; a real agent sends them every 15 s where NVML
/// reads real GPUs, which this machine has none of) become the controller's per-GPU
/// series, and go with the agent's connection.
#[test]
fn an_agent_s_gpu_usage_reports_are_served_as_metrics_until_it_goes() {
    use cadre_proto::agent::{
        AgentMessage, ControllerMessage, GpuUsage, Hello, NodeReport, PROTOCOL_VERSION,
    };
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let dir = cadre_test_support::private_tempdir();
    let data = dir.path().join("data");
    /// The controller, killed when the test ends, however it ends.
    struct Server(Child);
    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Server(
        clean_command(env!("CARGO_BIN_EXE_cadre"), dir.path())
            .args(["server", "--nodes", "1", "--gpus-per-node", "2"])
            .arg("--data-dir")
            .arg(&data)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("cadre server starts"),
    );
    let socket = cadre_client::locate::socket_in(&cadre_test_support::run_dir_of(&data));
    let target = cadre_client::Target::Unix(socket.clone());
    let metrics = || {
        cadre_client::Client::connect(&target, None)
            .and_then(|mut c| c.send_raw(hyper::Method::GET, "/metrics", None))
            .map(|(_, body)| String::from_utf8_lossy(&body).into_owned())
            .unwrap_or_default()
    };
    wait_until("the controller answers", || !metrics().is_empty());
    let found = cadre_agent::discovery::discover(&cadre_agent::discovery::DiscoveryOptions {
        emulate_gpus: 2,
        ..Default::default()
    })
    .expect("this machine's shape");
    let key = std::fs::read_to_string(data.join("agent.key")).expect("the agent key");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut ws = rt.block_on(async {
        let url = format!("unix://{}", socket.display());
        let mut ws = cadre_agent::service::open_connection(&url, key.trim(), None, None)
            .await
            .expect("connected");
        let hello = AgentMessage::Hello(Box::new(Hello {
            version: PROTOCOL_VERSION,
            node: "node001".into(),
            report: NodeReport {
                shape: found.shape.clone(),
                emulated_gpus: found.gpus_emulated,
                address: "127.0.0.1".into(),
                notes: Vec::new(),
                container_runtime: None,
            },
            running: Vec::new(),
            outbox: Vec::new(),
            health: None,
            agent_version: None,
            life: Some(1),
        }));
        ws.send(Message::text(serde_json::to_string(&hello).unwrap()))
            .await
            .unwrap();
        loop {
            let Some(Ok(Message::Text(text))) = ws.next().await else {
                panic!("no welcome");
            };
            match serde_json::from_str::<ControllerMessage>(&text) {
                Ok(ControllerMessage::Welcome { version, .. }) => {
                    assert_eq!(version, PROTOCOL_VERSION);
                    break;
                }
                Ok(ControllerMessage::Refused { reason }) => panic!("refused: {reason}"),
                _ => {}
            }
        }
        let usage = AgentMessage::GpuUsage {
            gpus: vec![
                GpuUsage {
                    index: 0,
                    utilization_percent: 40,
                    memory_used_bytes: 1 << 30,
                    memory_total_bytes: 80 << 30,
                },
                GpuUsage {
                    index: 1,
                    utilization_percent: 100,
                    memory_used_bytes: 79 << 30,
                    memory_total_bytes: 80 << 30,
                },
            ],
        };
        ws.send(Message::text(serde_json::to_string(&usage).unwrap()))
            .await
            .unwrap();
        ws
    });
    let node0 = r#"cadre_gpu_utilization_ratio{node="node001",gpu="0"} 0.4"#;
    wait_until("the usage in the metrics", || metrics().contains(node0));
    let m = metrics();
    for line in [
        r#"cadre_gpu_utilization_ratio{node="node001",gpu="1"} 1.0"#.to_owned(),
        format!(
            r#"cadre_gpu_memory_used_bytes{{node="node001",gpu="1"}} {}"#,
            79u64 << 30
        ),
        format!(
            r#"cadre_gpu_memory_total_bytes{{node="node001",gpu="0"}} {}"#,
            80u64 << 30
        ),
    ] {
        assert!(m.lines().any(|l| l == line), "no `{line}` in:\n{m}");
    }
    rt.block_on(async {
        let _ = ws.close().await;
    });
    drop(ws);
    wait_until("the usage gone with the agent", || {
        !metrics().contains("cadre_gpu_utilization_ratio{")
    });
}
