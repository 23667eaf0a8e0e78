//! What the integration tests of the `cadre` binary share: a whole cluster started as a
//! user starts it ([`Cluster`]: `cadre up --detach` in a temporary private data directory,
//! stopped with `cadre down` when dropped), the one wait ([`wait_until`]), and requests to
//! the API ([`Cluster::api`] through `cadre-client`; [`http`] by hand on any stream, for the
//! checks that are about the connection itself), and a real browser for the dashboard
//! ([`browser`]: Debian's chromium through chromedriver).
//!
//! What does not live here: what a single test file needs alone (a Slurm alias directory,
//! a `nobody` attacker, a real Slurm to compare with) stays in that file, built on this.
//! This crate is a dev-dependency only.
//!
//! Nothing here asserts a duration: the tests wait for states and files, and [`DEADLINE`]
//! only keeps a broken build from hanging.

pub mod browser;
pub mod netns;
pub mod pg;

use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use cadre_client::Target;

/// How long any one wait may take before the test gives up (a hang guard, not a measure).
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Waits until `done` says yes, panicking with `what` after [`DEADLINE`].
pub fn wait_until(what: &str, done: impl FnMut() -> bool) {
    wait_until_or(what, done, String::new)
}

/// [`wait_until`], whose panic also carries what `explain` finds then (logs, files): a
/// wait that gives up in CI must say why without a second run.
pub fn wait_until_or(what: &str, mut done: impl FnMut() -> bool, explain: impl FnOnce() -> String) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        if Instant::now() >= deadline {
            panic!("gave up waiting: {what}{}", explain());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The test PostgreSQL server's URL (`.ci/run` starts one and sets `CADRE_TEST_POSTGRES`;
/// CI must have it, elsewhere its tests are skipped).
/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

pub fn postgres_url() -> Option<String> {
    match std::env::var("CADRE_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CADRE_TEST_POSTGRES is unset in CI: .ci/run starts a server and sets it"
            );
            None
        }
    }
}

/// The pids of processes whose command line holds `marker` as a word.
pub fn processes_with(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|w| w == marker.as_bytes()))
        })
        .collect()
}

/// Bytes of a program's output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A temporary data directory: the controller refuses one that others may enter.
pub fn private_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    tempfile::Builder::new()
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .expect("temporary directory")
}

/// `None`, saying on stderr why `tests` are skipped; under CI (`$CI` set), which must run
/// them (as root, with the tools they need), a failure instead.
pub fn skip_unless_ci<T>(tests: &str, why: &str) -> Option<T> {
    assert!(std::env::var_os("CI").is_none(), "CI runs {tests}: {why}");
    eprintln!("skipped: {why}");
    None
}

/// The run directory `cadre up` makes beside data directory `data` (`<data>.run`), where
/// its socket is (whatever `$CADRE_RUN_DIR` the caller has: the harness removes it).
pub fn run_dir_of(data: &Path) -> PathBuf {
    cadre_client::locate::sibling_run_dir(data)
}

/// Whether `pid` is a process that has not exited. A zombie has exited: orphans are
/// reparented to this machine's pid 1, which does not reap them.
pub fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The pid in a pid file.
pub fn read_pid(path: &Path) -> i32 {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("failed to read {}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{} holds `{text}`, not a pid: {e}", path.display()))
}

/// `program` with none of the caller's `CADRE_*` variables (a developer's `CADRE_SERVER`
/// or `CADRE_TOKEN` must not redirect the tests), in `dir`, stdin closed, output captured.
pub fn clean_command(program: impl AsRef<OsStr>, dir: &Path) -> Command {
    let mut cmd = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CADRE_") {
            cmd.env_remove(name);
        }
    }
    cmd.current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// One HTTP/1.1 exchange written by hand on `stream` (which it closes): the status and the
/// body (`null` if empty). For checks about the connection itself; [`api`] otherwise.
pub fn http(
    mut stream: impl Read + Write,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, Value) {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: cadre\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(req.as_bytes()).expect("request sent");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("answer read");
    let raw = text(&raw);
    let (head, rest) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of headers in the answer to {method} {path}: {raw:?}"));
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in the answer to {method} {path}: {head:?}"));
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    (status, json_of(method, path, status, body.as_bytes()))
}

/// The body of a chunked HTTP/1.1 answer, whole.
pub fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("chunk size line");
        let size = usize::from_str_radix(size.trim(), 16).expect("hex chunk size");
        if size == 0 {
            return out;
        }
        out.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

fn json_of(method: &str, path: &str, status: u16, body: &[u8]) -> Value {
    let body = text(body);
    if body.trim().is_empty() {
        return Value::Null;
    }
    serde_json::from_str(&body).unwrap_or_else(|e| {
        panic!("the answer to {method} {path} ({status}) is not JSON: {e}: {body:?}")
    })
}

/// One request to the API at `target` through `cadre-client` (with `token`, if any): the
/// status and the JSON body (`null` if empty), whatever the status.
pub fn api(
    target: &Target,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, Value) {
    let mut client = cadre_client::Client::connect(target, token.map(str::to_owned))
        .unwrap_or_else(|e| panic!("failed to reach the controller at {target}: {e}"));
    let verb = hyper::Method::from_bytes(method.as_bytes())
        .unwrap_or_else(|e| panic!("`{method}` is not an HTTP method: {e}"));
    let (status, bytes) = client
        .send_raw(verb, path, body.map(|b| b.as_bytes().to_vec()))
        .unwrap_or_else(|e| panic!("{method} {path} to the controller at {target} failed: {e}"));
    (
        status.as_u16(),
        json_of(method, path, status.as_u16(), &bytes),
    )
}

/// How to start a [`Cluster`].
pub struct ClusterBuilder {
    cadre: PathBuf,
    nodes: Option<u32>,
    connected: Option<u32>,
    gpus_per_node: Option<u32>,
    args: Vec<String>,
    data_subdir: Option<PathBuf>,
    workdir: Option<PathBuf>,
    env: Vec<(String, String)>,
    as_user: Option<(u32, u32)>,
    netns: Option<String>,
}

impl ClusterBuilder {
    /// `cadre up` runs in this network namespace (a [`netns::Host`]'s): the controller
    /// and the agents it starts are on that host. Commands still reach it by its socket.
    pub fn in_netns(mut self, ns: &str) -> Self {
        self.netns = Some(ns.to_owned());
        self
    }

    /// Agents (named nodes) to run (default: `cadre up`'s, one).
    pub fn nodes(mut self, n: u32) -> Self {
        self.nodes = Some(n);
        self
    }

    /// How many agents `cadre up` must report connected when no `--nodes` says it (a
    /// cluster described by a file; default 1).
    pub fn expect_connected(mut self, n: u32) -> Self {
        self.connected = Some(n);
        self
    }

    /// Emulated GPUs on each node (default: `cadre up`'s).
    pub fn gpus_per_node(mut self, g: u32) -> Self {
        self.gpus_per_node = Some(g);
        self
    }

    /// The cluster, and every command of it, runs as this user (uid, gid), whose the
    /// data directory and the work directory are, and whose `HOME` is the data directory.
    pub fn as_user(mut self, uid: u32, gid: u32) -> Self {
        self.as_user = Some((uid, gid));
        self
    }

    /// More arguments of `cadre up`.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|s| s.to_string()));
        self
    }

    /// The data directory is this subdirectory of the temporary directory (made 0700),
    /// not the temporary directory itself.
    pub fn data_subdir(mut self, name: impl Into<PathBuf>) -> Self {
        self.data_subdir = Some(name.into());
        self
    }

    /// Commands run in this subdirectory of the temporary directory (made if missing),
    /// not in the data directory.
    pub fn workdir(mut self, name: impl Into<PathBuf>) -> Self {
        self.workdir = Some(name.into());
        self
    }

    /// A variable every command of the cluster gets.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The cluster's directories, not started: for a test that writes files first.
    pub fn prepare(self) -> Cluster {
        let root = private_tempdir();
        let data = match &self.data_subdir {
            Some(sub) => {
                let data = root.path().join(sub);
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&data)
                    .expect("the data directory is made");
                data
            }
            None => root.path().to_path_buf(),
        };
        let workdir = match &self.workdir {
            Some(sub) => {
                let dir = root.path().join(sub);
                std::fs::create_dir_all(&dir).expect("the work directory is made");
                dir
            }
            None => data.clone(),
        };
        if let Some((uid, gid)) = self.as_user {
            for dir in [&data, &workdir] {
                std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                    .unwrap_or_else(|e| panic!("failed to chown {}: {e}", dir.display()));
            }
        }
        let mut up_args = Vec::new();
        if let Some(n) = self.nodes {
            up_args.extend(["--nodes".to_owned(), n.to_string()]);
        }
        if let Some(g) = self.gpus_per_node {
            up_args.extend(["--gpus-per-node".to_owned(), g.to_string()]);
        }
        up_args.extend(self.args);
        Cluster {
            root,
            data,
            workdir,
            cadre: self.cadre,
            nodes: self.connected.or(self.nodes).unwrap_or(1),
            up_args,
            env: self.env,
            as_user: self.as_user,
            netns: self.netns,
            started: false,
        }
    }

    /// `cadre up --detach` with these arguments, ready (every agent connected) when this
    /// returns.
    pub fn start(self) -> Cluster {
        let mut c = self.prepare();
        c.start();
        c
    }
}

use std::os::unix::fs::DirBuilderExt;

/// A cluster in a temporary data directory, stopped (`cadre down`, else its processes
/// killed by pid) when dropped, also when the test panics.
pub struct Cluster {
    root: tempfile::TempDir,
    data: PathBuf,
    workdir: PathBuf,
    cadre: PathBuf,
    nodes: u32,
    up_args: Vec<String>,
    env: Vec<(String, String)>,
    as_user: Option<(u32, u32)>,
    netns: Option<String>,
    started: bool,
}

impl Cluster {
    /// A cluster of the `cadre` binary `cadre` (`env!("CARGO_BIN_EXE_cadre")`) to start.
    pub fn builder(cadre: impl Into<PathBuf>) -> ClusterBuilder {
        ClusterBuilder {
            cadre: cadre.into(),
            nodes: None,
            connected: None,
            gpus_per_node: None,
            args: Vec::new(),
            data_subdir: None,
            workdir: None,
            env: Vec::new(),
            as_user: None,
            netns: None,
        }
    }

    /// The temporary directory everything is in.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// Where commands run.
    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// `name` in the data directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.data.join(name)
    }

    /// The run directory beside the data directory.
    pub fn run_dir(&self) -> PathBuf {
        run_dir_of(&self.data)
    }

    /// The controller's socket.
    pub fn socket(&self) -> PathBuf {
        cadre_client::locate::socket_in(&self.run_dir())
    }

    /// The controller's socket as a client's target.
    pub fn target(&self) -> Target {
        Target::Unix(self.socket())
    }

    /// The arguments of `cadre up` (without `--detach`).
    pub fn up_args(&self) -> Vec<&str> {
        self.up_args.iter().map(String::as_str).collect()
    }

    /// The controller's log, for failure messages.
    pub fn log(&self) -> String {
        let log = std::fs::read_to_string(self.path("cadre.log")).unwrap_or_default();
        format!("\n--- cadre.log ---\n{log}")
    }

    /// The controller's log and every agent's (`agents/<node>.log`), for a failure's message.
    pub fn logs(&self) -> String {
        let mut all = self.log();
        let mut agents: Vec<PathBuf> = std::fs::read_dir(self.path("agents"))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        agents.retain(|p| p.extension().is_some_and(|e| e == "log"));
        agents.sort();
        for agent in agents {
            let log = std::fs::read_to_string(&agent).unwrap_or_default();
            all.push_str(&format!("\n--- {} ---\n{log}", agent.display()));
        }
        all
    }

    /// `program` against this cluster: by its data directory, in the work directory, with
    /// the cluster's variables and none of the caller's `CADRE_*`.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = clean_command(program, &self.workdir);
        // By the environment: an option after `submit`'s `--` would be the command's.
        cmd.env("CADRE_DATA_DIR", &self.data);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some((uid, gid)) = self.as_user {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid).env("HOME", &self.data);
        }
        cmd
    }

    /// `cadre ARGS` against this cluster.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(&self.cadre)
            .args(args)
            .output()
            .expect("the cadre binary runs")
    }

    /// `cadre ARGS`, which must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "cadre {args:?} failed ({}): {}{}",
            out.status,
            text(&out.stderr),
            self.log()
        );
        text(&out.stdout)
    }

    /// `cadre up --detach` with this cluster's arguments; every agent connected when this
    /// returns.
    pub fn start(&mut self) {
        let out = self.try_start();
        assert!(
            out.status.success(),
            "cadre up failed: {}{}",
            text(&out.stderr),
            self.log()
        );
        let said = text(&out.stdout);
        let nodes = self.nodes;
        assert!(
            said.contains(&format!("{nodes} node(s), {nodes} connected")),
            "not every agent connected: {said}"
        );
    }

    /// `cadre up --detach` with this cluster's arguments, whatever it answers (for a test of
    /// a refused start); the cluster is stopped when dropped all the same.
    pub fn try_start(&mut self) -> Output {
        self.started = true;
        let up = [&["up", "--detach"][..], &self.up_args()[..]].concat();
        match &self.netns {
            Some(ns) => self
                .command("ip")
                .args(["netns", "exec", ns])
                .arg(&self.cadre)
                .args(up)
                .output()
                .expect("ip netns exec runs"),
            None => self.run(&up),
        }
    }

    /// `cadre down`, which must succeed.
    pub fn stop(&mut self) {
        self.started = false;
        let out = self.run(&["down"]);
        assert!(
            out.status.success(),
            "cadre down failed: {}{}",
            text(&out.stderr),
            self.log()
        );
    }

    /// `cadre down`, then `cadre up --detach` again on the same directories.
    pub fn restart(&mut self) {
        self.stop();
        self.start();
    }

    /// One request to the API on the socket (as this process's user).
    pub fn api(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        api(&self.target(), None, method, path, body)
    }

    pub fn controller_pid(&self) -> i32 {
        read_pid(&self.path("cadre.pid"))
    }

    /// The agents' pids, by node, from their pid files.
    pub fn agent_pids(&self) -> BTreeMap<String, i32> {
        let mut pids = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(self.path("agents")) else {
            return pids;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|x| x == "pid") {
                let node = path.file_stem().expect("a name").to_string_lossy();
                pids.insert(node.into_owned(), read_pid(&path));
            }
        }
        pids
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The run directory sits beside the data directory: outside the temporary
        // directory when the data directory is its root, so it is removed here (what a
        // test's jobs left in it included), after the cluster is stopped.
        let run = run_dir_of(&self.data);
        let outside = !run.starts_with(self.root.path());
        if !self.started {
            if outside {
                let _ = std::fs::remove_dir_all(&run);
            }
            return;
        }
        let agents = self.agent_pids();
        let out = self.run(&["down"]);
        if !out.status.success() {
            // Nothing of this test may outlive it: kill what it started, by pid.
            use nix::sys::signal::{Signal, kill};
            use nix::unistd::Pid;
            if let Ok(text) = std::fs::read_to_string(self.path("cadre.pid"))
                && let Ok(pid) = text.trim().parse()
            {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            for pid in agents.values() {
                let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
            }
        }
        if outside {
            let _ = std::fs::remove_dir_all(&run);
        }
    }
}
