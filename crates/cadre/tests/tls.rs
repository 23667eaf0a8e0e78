//! TLS on the controller's TCP address, and nodes' enrolment with join tokens: an agent on
//! another node enrols once with a one-time token and the cluster's CA, then connects with
//! its node's certificate (mutual TLS) and can act only as that node; plain text, a
//! foreign CA, a used or expired token and a revoked node are refused.

use cadre_test_support::{Cluster, clean_command, free_port, text, wait_until};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// Two one-core nodes without GPUs: `n1` gets `cadre up`'s local agent, `n2` is left for an
/// agent that enrols over TLS.
const CLUSTER: &str = r#"version = 1
name = "tls"

[[shape]]
name = "tiny"
cores = 1
memory = "256M"

[[nodes]]
names = "n[1-2]"
shape = "tiny"

[[partition]]
name = "all"
nodes = "ALL"
"#;

struct Setup {
    c: Cluster,
    url: String,
    addr: String,
    /// The cluster file's directory.
    _files: tempfile::TempDir,
}

fn up() -> Setup {
    let addr = format!("127.0.0.1:{}", free_port());
    let files = tempfile::tempdir().unwrap();
    let file = files.path().join("cluster.toml");
    std::fs::write(&file, CLUSTER).expect("the cluster file is written");
    let file = file.display().to_string();
    let mut c = Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
        .args(&["--cluster", &file, "--nodes", "1", "--listen", &addr])
        .prepare();
    let out = c.try_start();
    assert!(
        out.status.success() && text(&out.stdout).contains("2 node(s), 1 connected"),
        "cadre up: {}{}{}",
        text(&out.stdout),
        text(&out.stderr),
        c.log()
    );
    Setup {
        c,
        url: format!("https://{addr}"),
        addr,
        _files: files,
    }
}

impl Setup {
    fn ca(&self) -> PathBuf {
        self.c.run_dir().join("ca.crt")
    }

    /// `cadre node token create ARGS`: the token, written to a file of its own (0600).
    fn join_token(&self, name: &str, args: &[&str]) -> PathBuf {
        let token = self
            .c
            .ok(&[&["node", "token", "create"][..], args].concat())
            .trim()
            .to_string();
        assert!(token.starts_with("cadre-join-"), "{token}");
        let file = self.c.path(name);
        std::fs::write(&file, format!("{token}\n")).expect("the token file");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        file
    }

    /// `cadre agent` for `node` against the TLS address, as on another machine: none of
    /// the cluster's variables, no agent key; its state in `state`. `node` empty: no
    /// `--node` (the controller names it).
    fn agent(&self, node: &str, state: &Path, ca: &Path, join: Option<&Path>) -> Command {
        let mut cmd = clean_command(env!("CARGO_BIN_EXE_cadre"), self.c.root());
        cmd.env("HOME", state)
            .args(["agent", "--controller", &self.url]);
        if !node.is_empty() {
            cmd.args(["--node", node]);
        }
        cmd.arg("--state-dir")
            .arg(state)
            .arg("--ca")
            .arg(ca)
            .args(["--log-level", "warn"]);
        if let Some(file) = join {
            cmd.arg("--join-file").arg(file);
        }
        cmd
    }

    fn connected(&self, node: &str) -> bool {
        let (_, nodes) = self.c.api("GET", "/nodes", None);
        nodes["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|n| n["name"] == node && n["connected"] == true)
    }
}

/// Waits for a child that must end by itself, killing it after a generous guard.
fn finish(mut child: Child) -> Output {
    let guard = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("the agent's status").is_none() {
        if Instant::now() > guard {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("the agent's output")
}

fn fails_with(out: &Output, words: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(words), "expected `{words}` in: {err}");
}

#[test]
fn a_node_enrols_once_with_its_token_and_acts_only_as_itself() {
    let s = up();
    let states = tempfile::tempdir().unwrap();

    // The TCP address speaks TLS only: a plain-text request gets no HTTP answer.
    let mut plain = std::net::TcpStream::connect(&s.addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    plain
        .write_all(b"GET /api/v1/whoami HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !answer.starts_with(b"HTTP/"),
        "plain text answered: {}",
        String::from_utf8_lossy(&answer)
    );

    // An agent that trusts another CA does not hand its token to this controller.
    let token = s.join_token("n2.token", &["--node", "n2"]);
    let other_ca = states.path().join("other-ca.crt");
    let (other, _) = cadre_tls::Ca::create(cadre_tls::OffsetDateTime::now_utc()).unwrap();
    std::fs::write(&other_ca, other.cert_pem()).unwrap();
    let state = states.path().join("n2");
    let out = s
        .agent("n2", &state, &other_ca, Some(&token))
        .output()
        .unwrap();
    fails_with(&out, "TLS");

    // The right CA: the node enrols, keeps its key to itself, and connects.
    let agent = s
        .agent("n2", &state, &s.ca(), Some(&token))
        .spawn()
        .unwrap();
    wait_until("n2's agent connects over TLS", || s.connected("n2"));
    let key = state.join("tls/node.key");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        !s.c.log().contains("cadre-join-"),
        "the join token is in the log"
    );

    // The token was used: another agent cannot enrol with it.
    let out = s
        .agent("n2", &states.path().join("again"), &s.ca(), Some(&token))
        .output()
        .unwrap();
    fails_with(&out, "used already");
    // A token for n2 does not enrol n1.
    let for_n2 = s.join_token("n2b.token", &["--node", "n2"]);
    let out = s
        .agent("n1", &states.path().join("n1"), &s.ca(), Some(&for_n2))
        .output()
        .unwrap();
    fails_with(&out, "is for node `n2`");
    // An expired one enrols nobody.
    let short = s.join_token("short.token", &["--ttl", "1s"]);
    std::thread::sleep(Duration::from_millis(2100));
    let out = s
        .agent("n1", &states.path().join("n1b"), &s.ca(), Some(&short))
        .output()
        .unwrap();
    fails_with(&out, "expired");

    // n2's certificate cannot speak for n1.
    let impostor = states.path().join("impostor");
    std::fs::create_dir_all(&impostor).unwrap();
    std::fs::set_permissions(&impostor, std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = impostor.join("tls");
    std::fs::create_dir(&copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o700)).unwrap();
    for f in ["node.key", "node.crt", "ca.crt"] {
        std::fs::copy(state.join("tls").join(f), copy.join(f)).unwrap();
    }
    let out = s.agent("n1", &impostor, &s.ca(), None).output().unwrap();
    fails_with(&out, "cannot speak for node `n1`");
    assert!(s.connected("n1"), "the real n1 is untouched");

    // Revoked: the live connection closes, and the certificate is refused from then on.
    let revoked = s.c.ok(&["node", "revoke", "n2"]);
    assert!(revoked.contains("1 certificate revoked"), "{revoked}");
    let out = finish(agent);
    fails_with(&out, "revoked");
    wait_until("n2 is away", || !s.connected("n2"));
    let out = s.agent("n2", &state, &s.ca(), None).output().unwrap();
    fails_with(&out, "HTTP 403");

    // Named by the controller: without --node, a node enrols as the node its join token
    // was made for (else as its host's name), and is from then on the node its certificate
    // names.
    let unnamed = states.path().join("unnamed");
    let any = s.join_token("any.token", &[]);
    // A token made for any node leaves the name to the host's (not one of this cluster's).
    let out = s.agent("", &unnamed, &s.ca(), Some(&any)).output().unwrap();
    fails_with(&out, "is not in the cluster");
    let for_n2 = s.join_token("n2c.token", &["--node", "n2"]);
    let mut agent = s
        .agent("", &unnamed, &s.ca(), Some(&for_n2))
        .spawn()
        .unwrap();
    wait_until("n2, named by its join token, connects", || {
        s.connected("n2")
    });
    agent.kill().unwrap();
    agent.wait().unwrap();
    wait_until("n2 is away", || !s.connected("n2"));
    let mut agent = s.agent("", &unnamed, &s.ca(), None).spawn().unwrap();
    wait_until("n2, named by its certificate, connects again", || {
        s.connected("n2")
    });
    agent.kill().unwrap();
    agent.wait().unwrap();
}

#[test]
fn join_tokens_are_for_administrators_and_bounded() {
    let s = up();
    let nobody =
        s.c.command(env!("CARGO_BIN_EXE_cadre"))
            .args(["node", "token", "create"])
            .current_dir("/")
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
    assert_eq!(nobody.status.code(), Some(1), "{}", text(&nobody.stderr));
    assert!(
        text(&nobody.stderr).contains("only an administrator may make join tokens"),
        "{}",
        text(&nobody.stderr)
    );
    // Nor may they revoke a node, read the CA's key, or put their own CA where local
    // clients and agents take it from.
    let nobody_runs = |program: &str, args: &[&str]| {
        std::process::Command::new("runuser")
            .args(["-u", "nobody", "--", program])
            .args(args)
            .current_dir("/")
            .output()
            .unwrap()
    };
    let revoke =
        s.c.command(env!("CARGO_BIN_EXE_cadre"))
            .args(["node", "revoke", "n1"])
            .current_dir("/")
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
    assert!(
        text(&revoke.stderr).contains("only an administrator may revoke nodes"),
        "{}",
        text(&revoke.stderr)
    );
    let key = s.c.data().join("ca.key");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let read = nobody_runs("cat", &[key.to_str().unwrap()]);
    assert!(!read.status.success() && read.stdout.is_empty());
    let planted = nobody_runs(
        "sh",
        &["-c", &format!("echo forged > {}", s.ca().display())],
    );
    assert!(!planted.status.success(), "nobody replaced ca.crt");
    assert!(
        std::fs::read_to_string(s.ca())
            .unwrap()
            .contains("BEGIN CERTIFICATE"),
        "ca.crt is the controller's"
    );
    let out = s.c.run(&["node", "token", "create", "--node", "n9"]);
    assert!(
        text(&out.stderr).contains("node `n9` is not in the cluster"),
        "{}",
        text(&out.stderr)
    );
    let out = s.c.run(&["node", "token", "create", "--ttl", "400d"]);
    assert!(
        text(&out.stderr).contains("a join token lasts 1 to 2592000 seconds"),
        "{}",
        text(&out.stderr)
    );
}

use std::os::unix::process::CommandExt;

#[test]
fn clients_reach_a_tls_controller_trusting_its_ca_alone() {
    let s = up();
    let token =
        s.c.ok(&["token", "create", "--user", "root", "--admin"])
            .trim()
            .to_string();
    // As on another machine: the address, the token, the CA; no data directory.
    let remote = |ca: &Path, program: &Path, args: &[&str]| {
        clean_command(program, s.c.root())
            .env("HOME", s.c.root())
            .env("CADRE_SERVER", &s.url)
            .env("CADRE_TOKEN", &token)
            .env("CADRE_CA", ca)
            .args(args)
            .output()
            .unwrap()
    };
    let cadre = Path::new(env!("CARGO_BIN_EXE_cadre"));
    let out = remote(&s.ca(), cadre, &["nodes"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("n1"), "{}", text(&out.stdout));
    // Slurm's commands find it the same way.
    let bin = tempfile::tempdir().unwrap();
    let squeue = bin.path().join("squeue");
    std::os::unix::fs::symlink(cadre, &squeue).unwrap();
    let out = remote(&s.ca(), &squeue, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("JOBID"), "{}", text(&out.stdout));
    // Another CA is not trusted, and nothing is sent.
    let other_ca = bin.path().join("other.crt");
    let (other, _) = cadre_tls::Ca::create(cadre_tls::OffsetDateTime::now_utc()).unwrap();
    std::fs::write(&other_ca, other.cert_pem()).unwrap();
    let out = remote(&other_ca, cadre, &["nodes"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("TLS with the controller at"),
        "{}",
        text(&out.stderr)
    );
    // Without any CA the client says where to get one.
    let out = remote(&bin.path().join("missing.crt"), cadre, &["nodes"]);
    assert!(
        text(&out.stderr).contains("give the cluster's CA with --ca FILE or CADRE_CA"),
        "{}",
        text(&out.stderr)
    );
}
