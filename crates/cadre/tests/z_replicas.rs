//! Replicated controllers (`cadre server --replica`) on one PostgreSQL database: the leader
//! killed during a storm of submissions from clients that know every replica, and a
//! leader paused past its lease, PostgreSQL restarted under them, and a leader's host cut
//! off. They need the test PostgreSQL server (`.ci/run` starts it and sets
//! `CADRE_TEST_POSTGRES`); elsewhere they are skipped.
//!
//! Named to run after the Slurm front ends' tests (cargo runs test files in name order): run
//! just before them in CI, `tests/slurm.rs` saw a lowered time limit never end a job, the
//! symptom `z_last_bench_agents.rs` describes after the agents bench. Not understood yet.

use cadre_test_support::pg::TestSchema;
use cadre_test_support::{
    Target, api, free_port, postgres_url, skip_unless_ci, text, wait_until_or,
};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The nodes whose agents the controller at `target` has connected now.
fn connected(target: &Target) -> Vec<String> {
    let (_, nodes) = api(target, None, "GET", "/nodes", None);
    nodes["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["connected"] == true)
        .filter_map(|n| n["name"].as_str().map(str::to_owned))
        .collect()
}

/// The jobs committed in `schema`, by name.
fn jobs(schema: &mut TestSchema) -> Vec<(String, i64)> {
    schema
        .admin
        .query(&format!("SELECT name, id FROM {}.jobs", schema.name), &[])
        .expect("the jobs")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// One `cadre server --replica`.
struct Replica {
    child: Child,
    data: PathBuf,
    log: PathBuf,
}

impl Replica {
    fn start(dir: &Path, name: &str, database: &str) -> Replica {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cadre"));
        cmd.args(["server", "--nodes", "2"])
            .args(["--listen", &format!("127.0.0.1:{}", free_port())]);
        Replica::start_with(cmd, dir, name, database)
    }

    /// `cmd` (a `cadre server` with its cluster and --listen) as a replica of `database`.
    fn start_with(mut cmd: Command, dir: &Path, name: &str, database: &str) -> Replica {
        let data = dir.join(name);
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("the log");
        let child = cmd
            .args(["--replica", "--leader-lease", "2"])
            .arg("--data-dir")
            .arg(&data)
            .args(["--database", database])
            .env("CADRE_LOG", "info")
            .env_remove("CADRE_DATA_DIR")
            .env_remove("CADRE_SERVER")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("cadre server --replica starts");
        Replica { child, data, log }
    }

    fn socket(&self) -> PathBuf {
        let mut run = self.data.clone().into_os_string();
        run.push(".run");
        PathBuf::from(run).join("cadre.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it has taken the lease and serves (it logs that it is ready after it).
    fn leads(&self) -> bool {
        let log = self.log();
        log.rfind("took the leader lease")
            .is_some_and(|took| log[took..].contains("controller ready"))
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), signal)
            .expect("signalled");
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A second replica's data directory: the first's CA and agent key (every replica signs
/// and checks with the same).
fn share_keys(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700)).unwrap();
    for f in ["ca.crt", "ca.key", "agent.key"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

/// Replicas `a` (the leader) and `b` (standing by) on `database`.
fn two(dir: &Path, database: &str) -> (Replica, Replica) {
    let a = Replica::start(dir, "a", database);
    wait_until_or("a leads", || a.leads(), || a.log());
    share_keys(&a.data, &dir.join("b"));
    let b = Replica::start(dir, "b", database);
    wait_until_or(
        "b stands by",
        || b.log().contains("standing by"),
        || b.log(),
    );
    (a, b)
}

/// What the controller on `socket` says it is (`leader`, `standby`), or why it says nothing.
fn role_of(socket: &Path) -> String {
    match cadre_client::Client::connect(&Target::Unix(socket.to_path_buf()), None)
        .and_then(|mut c| c.get::<serde_json::Value>("/status"))
    {
        Ok(body) => body["role"].as_str().unwrap_or("").to_owned(),
        Err(e) => format!("unreachable ({e})"),
    }
}

fn cadre(servers: &str, args: &[&str]) -> std::process::Output {
    // The jobs' output files (slurm-<id>.out in the submission's directory) go under the
    // build's temporary directory, not into the crate's (66 were left there at every run).
    Command::new(env!("CARGO_BIN_EXE_cadre"))
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .args(args)
        .env("CADRE_SERVER", servers)
        .env_remove("CADRE_DATA_DIR")
        .output()
        .expect("cadre runs")
}

#[test]
fn the_leader_killed_in_a_submission_storm_loses_no_acknowledged_job_and_commits_none_twice() {
    let Some(mut schema) = TestSchema::new("replicas_storm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut a, b) = two(dir.path(), &schema.url);
    // A gang that runs through the failover, on an agent that knows both replicas.
    let servers = format!(
        "unix://{},unix://{}",
        a.socket().display(),
        b.socket().display()
    );
    let agent_state = dir.path().join("agent");
    let mut agent = Command::new(env!("CARGO_BIN_EXE_cadre"))
        .args(["agent", "--controller", &servers, "--node", "node001"])
        .arg("--key-file")
        .arg(a.data.join("agent.key"))
        .arg("--state-dir")
        .arg(&agent_state)
        .env_remove("CADRE_SERVER")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("agent.log")).unwrap())
        .spawn()
        .expect("the agent starts");
    let out = cadre(
        &servers,
        &["submit", "--parsable", "-J", "gang", "--", "sleep", "600"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let gang: u64 = text(&out.stdout).trim().parse().expect("an id");
    let job = |t: &Target| api(t, None, "GET", &format!("/jobs/{gang}"), None).1;
    let a_target = Target::Unix(a.socket());
    wait_until_or(
        "the gang runs",
        || job(&a_target)["state"] == "RUNNING",
        || format!("{}\n{}", job(&a_target), a.log()),
    );
    // 8 clients, 100 submissions each; the leader is killed after 200 are acknowledged.
    let acked: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let failed: Arc<Mutex<Vec<String>>> = Arc::default();
    let clients: Vec<_> = (0..8)
        .map(|c| {
            let (acked, failed, servers) = (acked.clone(), failed.clone(), servers.clone());
            std::thread::spawn(move || {
                for i in 0..100 {
                    let name = format!("s{c}-{i}");
                    let out = cadre(
                        &servers,
                        &["submit", "--parsable", "-J", &name, "--", "true"],
                    );
                    match text(&out.stdout).trim().parse::<u64>() {
                        Ok(id) if out.status.success() => {
                            acked.lock().unwrap().insert(name, id);
                        }
                        _ => failed
                            .lock()
                            .unwrap()
                            .push(format!("{name}: {}", text(&out.stderr))),
                    }
                }
            })
        })
        .collect();
    while acked.lock().unwrap().len() < 200 {
        std::thread::sleep(Duration::from_millis(10));
    }
    a.signal(nix::sys::signal::Signal::SIGKILL);
    let killed = Instant::now();
    let _ = a.child.wait();
    wait_until_or("b leads", || b.leads(), || b.log());
    eprintln!("failover: b led {:?} after a was killed", killed.elapsed());
    for c in clients {
        c.join().expect("a client");
    }
    let failed = failed.lock().unwrap();
    assert!(failed.is_empty(), "submissions failed: {failed:?}");
    let acked = acked.lock().unwrap();
    assert_eq!(acked.len(), 800);
    // Every acknowledged job is there, with its id, once; nothing else was committed.
    let stored = jobs(&mut schema);
    let mut names: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (name, id) in &stored {
        names.entry(name.clone()).or_default().push(*id);
    }
    let twice: Vec<_> = names.iter().filter(|(_, ids)| ids.len() > 1).collect();
    assert!(twice.is_empty(), "committed twice: {twice:?}");
    for (name, id) in acked.iter() {
        assert_eq!(names.get(name), Some(&vec![*id as i64]), "{name}");
    }
    let expected: BTreeSet<&str> = acked.keys().map(String::as_str).chain(["gang"]).collect();
    let found: BTreeSet<&str> = names.keys().map(String::as_str).collect();
    assert_eq!(found, expected);
    // The gang went on through the failover: the new leader adopted it from its agent.
    let b_target = Target::Unix(b.socket());
    wait_until_or(
        "the agent reconnects to b",
        || connected(&b_target).iter().any(|n| n == "node001"),
        || std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default() + &b.log(),
    );
    let j = job(&b_target);
    assert_eq!(j["state"], "RUNNING", "{j}");
    assert_eq!(j["requeues"], 0, "{j}");
    // `cadre status` says who serves; the new leader's metrics say since when and after
    // how long without a leader.
    let out = cadre(&servers, &["status"]);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(said.contains(": unreachable"), "{said}");
    assert!(
        said.contains(": leader ") && said.contains("epoch 2"),
        "{said}"
    );
    let mut metrics = cadre_client::Client::connect(&b_target, None).expect("b");
    let (_, body) = metrics
        .send_raw(hyper::Method::GET, "/metrics", None)
        .expect("metrics");
    let body = String::from_utf8_lossy(&body).into_owned();
    assert!(body.contains("cadre_replica_leader_epoch 2"), "{body}");
    let gap: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("cadre_replica_takeover_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the takeover gap");
    assert!(gap > 0.0, "{gap}");
    let _ = agent.kill();
    let _ = agent.wait();
}

#[test]
fn a_leader_paused_past_its_lease_commits_nothing_when_it_wakes_and_stands_by() {
    let Some(mut schema) = TestSchema::new("replicas_pause") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two(dir.path(), &schema.url);
    a.signal(nix::sys::signal::Signal::SIGSTOP);
    wait_until_or("b takes over", || b.leads(), || b.log());
    let servers = format!("unix://{}", b.socket().display());
    let out = cadre(
        &servers,
        &["submit", "--parsable", "-J", "on-b", "--", "true"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let before = jobs(&mut schema);
    a.signal(nix::sys::signal::Signal::SIGCONT);
    wait_until_or(
        "a steps down",
        || a.log().contains("stepping down to standby"),
        || a.log(),
    );
    wait_until_or(
        "a stands by again",
        || a.log().matches("standing by").count() >= 2,
        || a.log(),
    );
    // Whatever a had under way when it was paused, it committed nothing after: the jobs
    // are b's alone, and b still leads.
    assert_eq!(jobs(&mut schema), before);
    let (status, body) = api(&Target::Unix(a.socket()), None, "GET", "/jobs", None);
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["reason"], "not_leader", "{body}");
    let (status, _) = api(&Target::Unix(b.socket()), None, "GET", "/jobs", None);
    assert_eq!(status, 200);
}

#[test]
fn postgresql_restarted_under_replicated_controllers_loses_nothing_and_the_cluster_resumes() {
    if postgres_url().is_none() {
        return;
    }
    let pg = match cadre_test_support::pg::OwnPostgres::start("127.0.0.1", None) {
        Ok(pg) => pg,
        Err(why) => {
            skip_unless_ci::<()>("the PostgreSQL restart test", &why);
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two(dir.path(), &pg.url());
    let servers = format!(
        "unix://{},unix://{}",
        a.socket().display(),
        b.socket().display()
    );
    let submit = |servers: &str, name: &str| {
        let out = cadre(servers, &["submit", "--parsable", "-J", name, "--", "true"]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        text(&out.stdout).trim().parse::<u64>().expect("an id")
    };
    let mut acked: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..10 {
        let name = format!("before-{i}");
        acked.insert(name.clone(), submit(&servers, &name));
    }
    // The database goes away: nothing can be committed, and whoever led stops leading.
    pg.ctl_stop().expect("the database stops");
    let stopped = Instant::now();
    let during = {
        let servers = servers.clone();
        std::thread::spawn(move || {
            // Sent while the database is down: the client keeps trying through it.
            let out = cadre(
                &servers,
                &["submit", "--parsable", "-J", "during", "--", "true"],
            );
            (out.status.success(), text(&out.stdout), text(&out.stderr))
        })
    };
    wait_until_or(
        "the leader stops leading",
        || (a.log() + &b.log()).contains("stepping down to standby"),
        || a.log() + &b.log(),
    );
    std::thread::sleep(Duration::from_secs(1));
    pg.ctl_start().expect("the database starts again");
    eprintln!("database down for {:?}", stopped.elapsed());
    let (ok, stdout, stderr) = during.join().expect("the submitting client");
    assert!(
        ok,
        "the submission sent while the database was down failed: {stderr}"
    );
    acked.insert("during".into(), stdout.trim().parse().expect("an id"));
    for i in 0..10 {
        let name = format!("after-{i}");
        acked.insert(name.clone(), submit(&servers, &name));
    }
    // Every acknowledged job is there, once, with its id.
    let mut admin = postgres::Client::connect(&pg.url(), postgres::NoTls).expect("the database");
    let stored: Vec<(String, i64)> = admin
        .query("SELECT name, id FROM jobs", &[])
        .expect("the jobs")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let found: BTreeMap<String, Vec<i64>> =
        stored.iter().fold(BTreeMap::new(), |mut m, (n, id)| {
            m.entry(n.clone()).or_insert_with(Vec::new).push(*id);
            m
        });
    assert_eq!(found.len(), acked.len(), "{found:?}");
    for (name, id) in &acked {
        assert_eq!(
            found.get(name),
            Some(&vec![*id as i64]),
            "{name}: {found:?}"
        );
    }
}

#[test]
fn a_leader_cut_off_from_its_database_and_agents_is_replaced_and_rejoins_as_a_standby() {
    use cadre_test_support::netns::Network;
    if postgres_url().is_none() {
        return;
    }
    // Hosts: 0 and 1 the replicas, 2 and 3 the agents, 4 the database.
    let net = match Network::new(5) {
        Ok(net) => net,
        Err(why) => {
            skip_unless_ci::<()>("the multi-host replica test", &why);
            return;
        }
    };
    let db_host = net.host(4).addr.to_string();
    let pg = cadre_test_support::pg::OwnPostgres::start(&db_host, Some(&net.host(4).ns))
        .expect("a PostgreSQL server on host 4");
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster.toml");
    // Nodes `n2` and `n3`, one core each, for agents on hosts 2 and 3.
    std::fs::write(&cluster, cadre_bench::tiny_cluster("replicas", "n[2-3]")).unwrap();
    let replica = |i: usize, name: &str| {
        let mut cmd = net.command(i, env!("CARGO_BIN_EXE_cadre"));
        cmd.args(["server", "--nodes", "0", "--node-lease", "9"])
            .arg("--cluster")
            .arg(&cluster)
            .args(["--listen", &format!("{}:6817", net.host(i).addr)]);
        Replica::start_with(cmd, dir.path(), name, &pg.url())
    };
    let a = replica(0, "a");
    wait_until_or("a leads", || a.leads(), || a.log());
    share_keys(&a.data, &dir.path().join("b"));
    let b = replica(1, "b");
    wait_until_or(
        "b stands by",
        || b.log().contains("standing by"),
        || b.log(),
    );
    let a_local = format!("unix://{}", a.socket().display());
    // Agents on hosts 2 and 3 know both replicas.
    let controllers = format!(
        "https://{}:6817,https://{}:6817",
        net.host(0).addr,
        net.host(1).addr
    );
    let mut agents = Vec::new();
    for i in [2, 3] {
        let node = format!("n{i}");
        let out = cadre(&a_local, &["node", "token", "create", "--node", &node]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let token = dir.path().join(format!("{node}.token"));
        std::fs::write(&token, text(&out.stdout)).unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let log = std::fs::File::create(dir.path().join(format!("{node}.log"))).unwrap();
        let child = net
            .command(i, env!("CARGO_BIN_EXE_cadre"))
            .args(["agent", "--controller", &controllers, "--node", &node])
            .args(["--address", &net.host(i).addr.to_string()])
            .arg("--state-dir")
            .arg(dir.path().join(format!("{node}.state")))
            .arg("--ca")
            .arg(a.data.join("ca.crt"))
            .arg("--join-file")
            .arg(&token)
            .env_remove("CADRE_SERVER")
            .env_remove("CADRE_DATA_DIR")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("the agent starts");
        agents.push(StopAgent(child));
    }
    let out = cadre(
        &a_local,
        &[
            "submit",
            "--parsable",
            "-N",
            "2",
            "-n",
            "2",
            "--",
            "sleep",
            "600",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id: u64 = text(&out.stdout).trim().parse().expect("an id");
    let job = |t: &Target| api(t, None, "GET", &format!("/jobs/{id}"), None).1;
    let logs = || {
        let mut all = a.log() + &b.log();
        for n in ["n2", "n3"] {
            all +=
                &std::fs::read_to_string(dir.path().join(format!("{n}.log"))).unwrap_or_default();
        }
        all
    };
    wait_until_or(
        "the gang runs",
        || job(&Target::Unix(a.socket()))["state"] == "RUNNING",
        logs,
    );
    // a's host loses the network: its database and its agents are out of reach.
    net.cut(0);
    wait_until_or("b takes over", || b.leads(), logs);
    let b_local = Target::Unix(b.socket());
    wait_until_or(
        "the agents reconnect to b",
        || connected(&b_local).len() == 2,
        logs,
    );
    // The gang went on: adopted by b, not requeued.
    let j = job(&b_local);
    assert_eq!(
        (j["state"].as_str(), j["requeues"].as_u64()),
        (Some("RUNNING"), Some(0)),
        "{j}\n{}",
        logs()
    );
    // Still cut off, a stops serving once it could not renew its lease for a whole lease,
    // though its renewal still waits for a database that does not answer.
    wait_until_or(
        "a, still cut off, stands by",
        || role_of(&a.socket()) == "standby",
        || format!("{}\n{}", role_of(&a.socket()), logs()),
    );
    // Back on the network, a finds it was replaced and stands by.
    net.heal(0);
    wait_until_or(
        "a stands by again",
        || a.log().matches("standing by").count() >= 2,
        logs,
    );
    let out = cadre(
        &format!("{a_local},unix://{}", b.socket().display()),
        &["status"],
    );
    let said = text(&out.stdout);
    assert!(
        said.contains(": standby ") && said.contains(": leader "),
        "{said}"
    );
}

/// An agent, stopped at the end of the test.
struct StopAgent(Child);

impl Drop for StopAgent {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.0.try_wait().is_ok_and(|s| s.is_none()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cadre up --replicas 2` and its clients on one machine, stopped with `cadre down` when
/// the test ends (also when it fails).
struct UpReplicas {
    dir: tempfile::TempDir,
}

impl UpReplicas {
    fn data(&self) -> PathBuf {
        self.dir.path().join("d")
    }

    /// `program` (cadre, or one of its Slurm commands) as a user of this machine runs it.
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let path = std::env::var("PATH").unwrap_or_default();
        let mut command = Command::new(program);
        command
            .args(args)
            .env("CADRE_DATA_DIR", self.data())
            .env("PATH", format!("{}:{path}", self.bin().display()))
            .env_remove("CADRE_SERVER")
            .env_remove("CADRE_RUN_DIR")
            .current_dir(self.dir.path());
        command
    }

    fn cadre(&self, program: &Path, args: &[&str]) -> std::process::Output {
        self.command(program, args).output().expect("cadre runs")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cadre(Path::new(env!("CARGO_BIN_EXE_cadre")), args);
        assert!(
            out.status.success(),
            "cadre {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    /// Replica `i`'s socket, its pid, and what it says it is.
    fn replica(&self, i: u8) -> (PathBuf, i32, String) {
        let run = cadre_test_support::run_dir_of(&self.data());
        let socket = cadre_client::locate::replica_socket_in(&run, i);
        let pid = std::fs::read_to_string(self.data().join(format!("replica-{i}.pid")))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0);
        let role = role_of(&socket);
        (socket, pid, role)
    }

    fn logs(&self) -> String {
        ["cadre.log", "replica-1.log", "replica-2.log"]
            .iter()
            .map(|f| {
                let log = std::fs::read_to_string(self.data().join(f)).unwrap_or_default();
                format!("--- {f}\n{log}")
            })
            .collect()
    }
}

impl Drop for UpReplicas {
    fn drop(&mut self) {
        let _ = self.cadre(Path::new(env!("CARGO_BIN_EXE_cadre")), &["down"]);
    }
}

fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

#[test]
fn cadre_up_with_two_replicas_fails_over_under_a_running_step_and_restarts_the_killed_one() {
    let Some(schema) = TestSchema::new("replicas_up") else {
        return;
    };
    let c = UpReplicas {
        dir: tempfile::tempdir().unwrap(),
    };
    c.ok(&[
        "up",
        "--replicas",
        "2",
        "--database",
        &schema.url,
        "--leader-lease",
        "2",
        "--nodes",
        "2",
        "--detach",
    ]);
    let roles = |c: &UpReplicas| [c.replica(1).2, c.replica(2).2];
    let mut sorted = roles(&c);
    sorted.sort();
    assert_eq!(sorted, ["leader", "standby"], "{}", c.logs());
    let agents: Vec<i32> = ["node001", "node002"]
        .iter()
        .map(|n| {
            let pid = std::fs::read_to_string(c.data().join(format!("agents/{n}.pid")));
            pid.expect("an agent's pid file")
                .trim()
                .parse()
                .expect("a pid")
        })
        .collect();

    // A batch job whose step runs through the failover. Its `srun` finds the controllers
    // as every client of this machine does, from the data directory alone.
    c.ok(&["install-aliases", c.bin().to_str().expect("utf-8 path")]);
    let flag = c.dir.path().join("go");
    let out = c.dir.path().join("steps.out");
    std::fs::write(
        c.dir.path().join("steps.sh"),
        format!(
            "#!/bin/bash\n#SBATCH -N 2 -o {out}\n\
             srun -l bash -c 'echo start $SLURM_PROCID; while [ ! -e {flag} ]; do sleep 0.05; done; echo end $SLURM_PROCID'\n\
             echo \"srun=$?\"\n",
            out = out.display(),
            flag = flag.display()
        ),
    )
    .unwrap();
    let sbatch = c.cadre(&c.bin().join("sbatch"), &["--parsable", "steps.sh"]);
    assert!(sbatch.status.success(), "{}", text(&sbatch.stderr));
    let id = text(&sbatch.stdout).trim().to_owned();
    wait_until_or(
        "both tasks of the step have started",
        || {
            std::fs::read_to_string(&out)
                .is_ok_and(|o| o.contains("0: start 0") && o.contains("1: start 1"))
        },
        || std::fs::read_to_string(&out).unwrap_or_default() + &c.logs(),
    );
    // And an allocation whose command runs a step once the failover is over.
    let salloc_err = c.dir.path().join("salloc.err");
    let salloc_script = format!(
        "while [ ! -e {flag} ]; do sleep 0.05; done; srun hostname && echo salloc-step-ran",
        flag = flag.display()
    );
    let salloc = c
        .command(
            &c.bin().join("salloc"),
            &["-N", "1", "bash", "-c", &salloc_script],
        )
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&salloc_err).unwrap())
        .spawn()
        .expect("salloc runs");
    wait_until_or(
        "salloc is granted its allocation",
        || std::fs::read_to_string(&salloc_err).is_ok_and(|e| e.contains("Granted")),
        || std::fs::read_to_string(&salloc_err).unwrap_or_default() + &c.logs(),
    );

    // The leader killed: a replica takes over (the standby, or the killed one started
    // again, whichever takes the lease first once it has lapsed), the step goes on, the job
    // completes.
    let leader = if roles(&c)[0] == "leader" { 1 } else { 2 };
    let (_, killed, _) = c.replica(leader);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(killed),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("the leader killed");
    let new_leader_of = || {
        (1..=2u8).find(|&r| {
            let (_, pid, role) = c.replica(r);
            pid != killed && role == "leader"
        })
    };
    wait_until_or(
        "a replica takes over",
        || new_leader_of().is_some(),
        || c.logs(),
    );
    let took_over = new_leader_of().expect("a leader");
    let other = 3 - took_over;
    std::fs::write(&flag, "").unwrap();
    let new_leader = Target::Unix(c.replica(took_over).0);
    let job = || api(&new_leader, None, "GET", &format!("/jobs/{id}"), None).1;
    wait_until_or(
        "the batch job completes",
        || job()["state"] == "COMPLETED",
        || format!("{}\n{}", job(), c.logs()),
    );
    let said = std::fs::read_to_string(&out).unwrap();
    assert!(said.trim_end().ends_with("srun=0"), "{said}");
    assert_eq!(job()["requeues"], 0, "{}", job());
    let salloc = salloc.wait_with_output().expect("salloc ends");
    let err = std::fs::read_to_string(&salloc_err).unwrap_or_default();
    assert!(
        salloc.status.success(),
        "{:?} {}{err}",
        salloc.status,
        text(&salloc.stdout)
    );
    assert!(
        text(&salloc.stdout).contains("salloc-step-ran"),
        "{}{err}",
        text(&salloc.stdout)
    );

    // The killed replica was started again; the replica that did not take over stands by.
    wait_until_or(
        "the other replica stands by",
        || {
            let (_, pid, role) = c.replica(other);
            pid != killed && role == "standby"
        },
        || c.logs(),
    );
    assert_ne!(
        c.replica(leader).1,
        killed,
        "the killed replica was started again"
    );
    // An interactive step on the new leader: the batch step started on the other replica,
    // so one of the two found the leader behind the first socket's standby.
    let srun = c.cadre(&c.bin().join("srun"), &["-N", "2", "-l", "hostname"]);
    assert!(srun.status.success(), "{}", text(&srun.stderr));
    assert_eq!(
        text(&srun.stdout).lines().count(),
        2,
        "{}",
        text(&srun.stdout)
    );
    let status = c.ok(&["status"]);
    assert_eq!(status.matches(": leader ").count(), 1, "{status}");
    assert_eq!(status.matches(": standby ").count(), 1, "{status}");
    assert!(status.contains("epoch 2"), "{status}");

    // `cadre down` stops it all and leaves no run directory.
    let replicas = [c.replica(1).1, c.replica(2).1];
    c.ok(&["down"]);
    for pid in replicas.iter().chain(&agents) {
        assert!(!running(*pid), "pid {pid} still runs after cadre down");
    }
    assert!(!cadre_test_support::run_dir_of(&c.data()).exists());
}
