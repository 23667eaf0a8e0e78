//! A cluster across hosts: the controller on one network namespace, each agent on one of
//! its own ([`cadre_test_support::netns`]), every agent its own process that enrols with a
//! join token over TLS and then speaks mutual TLS. Gangs and their steps run across the
//! hosts; a host cut off from the network stops its tasks before its gang runs again
//! elsewhere; a host that loses packets at random keeps its node.
//!
//! These need root, iproute2 and nftables: they say so and are skipped elsewhere, and
//! fail under CI.

use cadre_test_support::netns::Network;
use cadre_test_support::{Cluster, clean_command, skip_unless_ci, text, wait_until};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

/// The controller's address: host 0's.
const LISTEN: &str = "10.231.0.1:6817";

/// A controller on host 0 and an agent for node `n<i>` on host `i` (1 to 3).
struct Hosts {
    /// Agents first: they stop before the network goes.
    agents: Vec<Option<Child>>,
    c: Cluster,
    net: Network,
    /// The cluster file's directory.
    files: tempfile::TempDir,
}

impl Hosts {
    /// Hosts 0 to 3, the controller up on host 0 with a lease of `lease` seconds (and the
    /// default margin, 2 s)
    /// seconds; no agent yet. `None` (skipped) where namespaces cannot be made.
    fn new(lease: u32) -> Option<Hosts> {
        Hosts::with(lease, |_| Vec::new())
    }

    /// [`Hosts::new`], the controller with more options, made from the files' directory
    /// (where programs for the nodes can be written first).
    fn with(lease: u32, more: impl FnOnce(&Path) -> Vec<String>) -> Option<Hosts> {
        let net = match Network::new(4) {
            Ok(net) => net,
            Err(why) => return skip_unless_ci("the multi-host tests", &why),
        };
        let files = tempfile::tempdir().expect("a directory");
        let more = more(files.path());
        let more: Vec<&str> = more.iter().map(String::as_str).collect();
        let file = files.path().join("cluster.toml");
        // Nodes `n1`..`n3`, one core each, for agents on hosts 1 to 3.
        std::fs::write(&file, cadre_bench::tiny_cluster("hosts", "n[1-3]"))
            .expect("the cluster file");
        let lease = lease.to_string();
        let mut c = Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
            .in_netns(&net.host(0).ns)
            .args(&[
                "--cluster",
                &file.display().to_string(),
                "--nodes",
                "0",
                "--listen",
                LISTEN,
                "--node-lease",
                &lease,
            ])
            .args(&more)
            .prepare();
        let out = c.try_start();
        assert!(
            out.status.success() && text(&out.stdout).contains("3 node(s), 0 connected"),
            "cadre up on host 0: {}{}{}",
            text(&out.stdout),
            text(&out.stderr),
            c.log()
        );
        Some(Hosts {
            agents: (0..4).map(|_| None).collect(),
            c,
            net,
            files,
        })
    }

    fn ca(&self) -> PathBuf {
        self.c.run_dir().join("ca.crt")
    }

    /// A join token for node `node`, in a file of its own (0600).
    fn join_token(&self, node: &str) -> PathBuf {
        let token = self
            .c
            .ok(&["node", "token", "create", "--node", node])
            .trim()
            .to_string();
        let file = self.files.path().join(format!("{node}.token"));
        std::fs::write(&file, format!("{token}\n")).expect("the token file");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        file
    }

    /// `cadre agent` of node `n<i>` on host `i`, as on a machine of its own: none of the
    /// cluster's variables, its own state directory, the CA and a join token file.
    fn agent_command(&self, i: usize, join: &Path) -> std::process::Command {
        let node = format!("n{i}");
        let state = self.files.path().join(format!("{node}.state"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.files.path().join(format!("{node}.log")))
            .expect("the agent's log");
        let mut cmd = self.net.command(i, env!("CARGO_BIN_EXE_cadre"));
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &state)
            .current_dir(self.files.path())
            .args([
                "agent",
                "--controller",
                &format!("https://{LISTEN}"),
                "--node",
                &node,
                "--address",
                &self.net.host(i).addr.to_string(),
            ])
            .arg("--state-dir")
            .arg(&state)
            .arg("--ca")
            .arg(self.ca())
            .arg("--join-file")
            .arg(join)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        cmd
    }

    /// Enrols and starts the agent of host `i`, connected when this returns.
    fn start_agent(&mut self, i: usize) {
        self.start_agent_with(i, &[]);
    }

    /// [`Hosts::start_agent`] with more options of `cadre agent`.
    fn start_agent_with(&mut self, i: usize, more: &[&str]) {
        let join = self.join_token(&format!("n{i}"));
        let child = self
            .agent_command(i, &join)
            .args(more)
            .spawn()
            .expect("the agent starts");
        self.agents[i] = Some(child);
        self.wait_node(&format!("n{i}"), "connected", |n| n["connected"] == true);
    }

    fn node(&self, name: &str) -> Value {
        let (_, nodes) = self.c.api("GET", "/nodes", None);
        nodes["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    }

    fn wait_node(&self, name: &str, what: &str, done: impl Fn(&Value) -> bool) {
        cadre_test_support::wait_until_or(
            &format!("node {name} {what}"),
            || done(&self.node(name)),
            || format!("\n{}\n{}", self.node(name), self.logs()),
        );
    }

    /// Waits for job `id` to be in `state`, saying where it is and every log if it never is.
    fn wait_job(&self, id: u64, state: &str) {
        cadre_test_support::wait_until_or(
            &format!("job {id} {state}"),
            || self.job(id)["state"] == state,
            || format!("\n{}\n{}", self.job(id), self.logs()),
        );
    }

    /// Submits `sh -c script` as a gang of one task on each of the three nodes.
    fn gang(&self, script: &str) -> u64 {
        let out = self.c.ok(&[
            "submit",
            "--parsable",
            "-N",
            "3",
            "-n",
            "3",
            "--",
            "sh",
            "-c",
            script,
        ]);
        out.trim().parse().expect("a job id")
    }

    fn job(&self, id: u64) -> Value {
        self.c.api("GET", &format!("/jobs/{id}"), None).1
    }

    /// The host of each node of the job's allocation, in task order.
    fn hosts_of(&self, id: u64) -> Vec<usize> {
        let job = self.job(id);
        let names: Vec<String> = job["nodes"].as_str().map(expand).unwrap_or_default();
        names
            .iter()
            .map(|n| n.trim_start_matches('n').parse().expect("a node of ours"))
            .collect()
    }

    /// `$PATH` with the Slurm commands (`cadre install-aliases`) first, as a user's.
    fn path_with_aliases(&self) -> std::ffi::OsString {
        let bin = self.files.path().join("bin");
        if !bin.exists() {
            self.c.ok(&["install-aliases", &bin.display().to_string()]);
        }
        let mut path = bin.into_os_string();
        path.push(":");
        path.push(std::env::var_os("PATH").unwrap_or_default());
        path
    }

    /// Every log: the controller's and each agent's.
    fn logs(&self) -> String {
        let mut all = self.c.log();
        for i in 1..=3 {
            let log = std::fs::read_to_string(self.files.path().join(format!("n{i}.log")))
                .unwrap_or_default();
            all.push_str(&format!("\n--- agent n{i} ---\n{log}"));
        }
        all
    }

    /// `cadre ARGS` run on host `i` as a user there would: over TLS to the controller's
    /// address, trusting the cluster's CA, with `token`.
    fn remote(&self, i: usize, token: &str, program: &str, args: &[&str]) -> Output {
        let path = self.path_with_aliases();
        let mut cmd = clean_command("ip", self.c.workdir());
        cmd.args(["netns", "exec", &self.net.host(i).ns])
            .arg(self.files.path().join("bin").join(program))
            .args(args)
            .env("CADRE_SERVER", format!("https://{LISTEN}"))
            .env("CADRE_CA", self.ca())
            .env("CADRE_TOKEN", token)
            .env("PATH", path);
        cmd.output().expect("cadre runs")
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for child in self.agents.iter_mut().flatten() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for child in self.agents.iter_mut().flatten() {
            while child.try_wait().is_ok_and(|s| s.is_none()) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `n[1-3]`, `n1,n3`, `n2`: the names.
fn expand(list: &str) -> Vec<String> {
    cadre_core::hostlist::expand(list).expect("a host list")
}

/// An administrator's API token (`cadre token create`), for commands run on other hosts.
fn admin_token(h: &Hosts) -> String {
    let t: Value =
        serde_json::from_str(&h.c.ok(&["token", "create", "--user", "root", "--admin", "--json"]))
            .expect("the token as JSON");
    t["token"].as_str().expect("the secret").to_owned()
}

#[test]
fn agents_on_hosts_of_their_own_enrol_over_tls_and_run_a_gang_and_its_steps_across_them() {
    let Some(mut h) = Hosts::new(30) else { return };
    for i in 1..=3 {
        h.start_agent(i);
    }
    // Each node shows its agent: version and protocol, address, last heard, certificate.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for i in 1..=3 {
        let n = h.node(&format!("n{i}"));
        assert_eq!(n["address"], format!("10.231.0.{}", i + 1), "{n}");
        assert_eq!(
            n["agent_protocol"],
            cadre_proto::agent::PROTOCOL_VERSION,
            "{n}"
        );
        assert_eq!(n["agent_version"], env!("CARGO_PKG_VERSION"), "{n}");
        assert!(
            n["last_heard"].as_u64().is_some_and(|t| t + 60 > now),
            "{n}"
        );
        assert!(n["cert_expires"].as_u64().is_some_and(|t| t > now), "{n}");
        assert_eq!(n["health"], Value::Null, "{n}");
    }
    let long = h.c.ok(&["nodes", "--long"]);
    let n2 = long
        .lines()
        .find(|l| l.starts_with("n2 "))
        .expect("n2 listed");
    assert!(
        n2.contains(&format!("(p{})", cadre_proto::agent::PROTOCOL_VERSION))
            && n2.contains("10.231.0.3")
            && n2.ends_with("ok"),
        "{long}"
    );
    // A used token enrols nothing more, and plain text gets no answer.
    let used = h.files.path().join("n3.token");
    let again = h
        .agent_command(3, &used)
        .arg("--state-dir")
        .arg(h.files.path().join("other.state"))
        .output()
        .expect("a second agent runs");
    assert!(!again.status.success(), "a used token enrolled again");
    let token = admin_token(&h);
    let plain = {
        let mut cmd = clean_command("ip", h.c.workdir());
        cmd.args(["netns", "exec", &h.net.host(1).ns])
            .arg(env!("CARGO_BIN_EXE_cadre"))
            .arg("nodes")
            .env("CADRE_SERVER", format!("http://{LISTEN}"))
            .env("CADRE_TOKEN", &token);
        cmd.output().expect("cadre runs")
    };
    assert!(!plain.status.success(), "plain text was answered");

    // From a user's host (host 1), over TLS: a batch job of one task on each host, whose
    // script (on the first node) runs a step across all three.
    let script = h.files.path().join("gang.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n\
         echo batch on $SLURMD_NODENAME at $(hostname -I)\n\
         srun -N 3 -n 3 sh -c 'echo step rank $SLURM_PROCID on $SLURMD_NODENAME at $(hostname -I)'\n",
    )
    .unwrap();
    let out = h.remote(
        1,
        &token,
        "sbatch",
        &[
            "--parsable",
            "-N",
            "3",
            "-n",
            "3",
            "-o",
            &h.files.path().join("gang-%j.out").display().to_string(),
            &script.display().to_string(),
        ],
    );
    assert!(out.status.success(), "submit: {}", text(&out.stderr));
    let id: u64 = text(&out.stdout).trim().parse().expect("a job id");
    h.wait_job(id, "COMPLETED");
    let output = std::fs::read_to_string(h.files.path().join(format!("gang-{id}.out")))
        .expect("the batch's output");
    // The batch ran on the first node's host; each step rank on its node's host.
    assert!(
        output
            .lines()
            .any(|l| l.trim() == "batch on n1 at 10.231.0.2"),
        "{output}"
    );
    let mut hosts: Vec<String> = output
        .lines()
        .filter(|l| l.starts_with("step rank"))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            format!("{} {}", words[4], words[6])
        })
        .collect();
    hosts.sort();
    assert_eq!(
        hosts,
        vec!["n1 10.231.0.2", "n2 10.231.0.3", "n3 10.231.0.4"],
        "{output}"
    );
}

/// A task's stamps in `file`: `start <node> <pid> <seconds>`, and `end ...` when it is
/// told to stop (SIGTERM), on the machine's one clock.
fn stamping_task(file: &Path) -> String {
    let f = file.display();
    format!(
        "s() {{ echo \"$1 $SLURMD_NODENAME $$ $(date +%s.%N)\" >> {f}; }}; \
         trap 's end; exit 143' TERM; s start; sleep 600 & wait"
    )
}

/// Each task's (node, pid) -> (start, end) from a stamps file.
fn intervals(file: &Path) -> Vec<(String, String, f64, Option<f64>)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut out: Vec<(String, String, f64, Option<f64>)> = Vec::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [kind, node, pid, at] = w[..] else {
            continue;
        };
        let at: f64 = at.parse().expect("a time");
        match kind {
            "start" => out.push((node.into(), pid.into(), at, None)),
            _ => {
                if let Some(t) = out.iter_mut().find(|t| t.0 == node && t.1 == pid) {
                    t.3 = Some(at);
                }
            }
        }
    }
    out
}

fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

#[test]
fn a_host_cut_off_stops_its_tasks_before_its_gang_runs_again_elsewhere() {
    // Lease 3 s: the cut host's agent sends SIGTERM 2 s after its last answered ping and
    // SIGKILL at 3 s; the node is declared lost 5 s after the controller last heard it.
    let Some(mut h) = Hosts::new(3) else { return };
    for i in 1..=3 {
        h.start_agent(i);
    }
    let stamps = h.files.path().join("stamps");
    let out = h.c.ok(&[
        "submit",
        "--parsable",
        "-N",
        "2",
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        &stamping_task(&stamps),
    ]);
    let id: u64 = out.trim().parse().expect("a job id");
    wait_until("both tasks have started", || intervals(&stamps).len() == 2);
    let first = h.hosts_of(id);
    assert_eq!(first.len(), 2, "{}", h.job(id));
    let cut = first[0];
    let cut_at = now_secs();
    h.net.cut(cut);
    // The gang runs again, whole, on the two hosts that can still be reached.
    cadre_test_support::wait_until_or(
        "the gang runs again",
        || {
            let j = h.job(id);
            j["requeues"].as_u64() == Some(1)
                && j["state"] == "RUNNING"
                && intervals(&stamps).iter().filter(|t| t.2 > cut_at).count() == 2
        },
        || format!("\n{}\n{}", h.job(id), h.logs()),
    );
    let second = h.hosts_of(id);
    assert!(
        !second.contains(&cut),
        "the gang ran again on the cut host: {second:?}"
    );
    // Every task of the first run ended before any of the second started: at no moment
    // did the job's tasks run on the cut host and elsewhere at once.
    let all = intervals(&stamps);
    let (before, after): (Vec<_>, Vec<_>) = all.iter().partition(|t| t.2 < cut_at);
    let last_end = before
        .iter()
        .map(|t| {
            t.3.unwrap_or_else(|| panic!("a first-run task never ended: {all:?}"))
        })
        .fold(f64::MIN, f64::max);
    let first_start = after.iter().map(|t| t.2).fold(f64::MAX, f64::min);
    assert!(
        last_end < first_start,
        "the first run's tasks ran until {last_end}, the second's started at {first_start}: {all:?}"
    );
    // The cut host's agent stopped its task itself (fencing), with nothing from the
    // controller.
    let log = std::fs::read_to_string(h.files.path().join(format!("n{cut}.log"))).unwrap();
    assert!(log.contains("stopping every run (fencing)"), "{log}");
    // Back on the network, the node comes back and the job is cancelled whole.
    h.net.heal(cut);
    h.wait_node(&format!("n{cut}"), "back", |n| n["connected"] == true);
    h.c.ok(&["cancel", &id.to_string()]);
    wait_until("the job ends", || h.job(id)["state"] == "CANCELLED");
}

#[test]
fn an_agent_killed_during_a_gang_and_started_again_adopts_its_task_and_nothing_outlives_the_job() {
    let Some(mut h) = Hosts::new(30) else { return };
    for i in 1..=3 {
        h.start_agent(i);
    }
    let dir = h.files.path().to_path_buf();
    let d = dir.display();
    // Each rank leaves a daemon of its own (a `sleep` no other process runs) and waits
    // for `go`.
    let marker = format!("{}.{}", 87_000, std::process::id());
    let script = format!(
        "setsid sleep {marker} </dev/null >/dev/null 2>&1 & touch {d}/started.$SLURM_PROCID; \
         while [ ! -e {d}/go ]; do sleep 0.1; done"
    );
    let id = h.gang(&script);
    // Host 2's agent writes its run's record once the rank has started; a kill before
    // that loses the run (its tasks are killed by the next life), which is not what this
    // test is about, and a kill between the record's write and its rename is adopted.
    let record = dir.join(format!("n2.state/runs/job{id}.0.json"));
    wait_until("every rank has started and host 2 recorded its run", || {
        (0..3).all(|r| dir.join(format!("started.{r}")).exists())
            && cadre_test_support::processes_with(&marker).len() == 3
            && record.exists()
    });
    // Host 2's agent dies without stopping anything, and is started again.
    let mut killed = h.agents[2].take().expect("host 2's agent");
    killed.kill().expect("SIGKILL");
    killed.wait().expect("reaped");
    assert_eq!(
        cadre_test_support::processes_with(&marker).len(),
        3,
        "a rank died with its agent"
    );
    let join = h.files.path().join("n2.token");
    let again = h
        .agent_command(2, &join)
        .spawn()
        .expect("the agent starts again");
    h.agents[2] = Some(again);
    cadre_test_support::wait_until_or(
        "host 2's agent adopts its rank",
        || {
            std::fs::read_to_string(dir.join("n2.log"))
                .is_ok_and(|l| l.contains("adopted the run's tasks"))
        },
        || h.logs(),
    );
    h.wait_node("n2", "back", |n| n["connected"] == true);
    // The gang never stopped: it ends as its ranks do, with no requeue, and nothing of it
    // is left on any host.
    std::fs::write(dir.join("go"), "").expect("go");
    h.wait_job(id, "COMPLETED");
    assert_eq!(h.job(id)["requeues"], 0, "{}", h.job(id));
    assert_eq!(
        cadre_test_support::processes_with(&marker),
        Vec::<i32>::new(),
        "a rank's daemon outlived the job"
    );
}

#[test]
fn a_host_losing_a_fifth_of_its_packets_keeps_its_node_and_its_jobs_complete() {
    // Lease 5 s: pings every 0.8 s, fencing would start 3.3 s after the last answered one.
    // (With 3 s, TCP's retransmission backoff at a fifth of packets lost stalled the
    // connection for a whole lease now and then.)
    let Some(mut h) = Hosts::new(5) else { return };
    for i in 1..=3 {
        h.start_agent(i);
    }
    h.net.drop_randomly(2, 20);
    let since = Instant::now();
    let mut ids = Vec::new();
    // Gangs of all three nodes, one after the other: each launch and end crosses n2's link.
    for _ in 0..3 {
        ids.push(h.gang("sleep 2"));
    }
    // For three leases at least, and until the jobs are done, n2 is never lost (a
    // connection dropped and made again within the lease is not a loss).
    while since.elapsed() < Duration::from_secs(15)
        || ids.iter().any(|&id| h.job(id)["state"] != "COMPLETED")
    {
        let node = h.node("n2");
        assert_ne!(node["state"], "down", "n2 was lost: {node}\n{}", h.logs());
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "the jobs did not complete: {:?}\n{}",
            ids.iter().map(|&id| h.job(id)).collect::<Vec<_>>(),
            h.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for id in ids {
        assert_eq!(h.job(id)["requeues"].as_u64(), Some(0), "{}", h.job(id));
    }
}

/// A program of the site's (root's, 0755) in `dir`.
fn site_program(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("the program");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

#[test]
fn a_failing_prolog_drains_its_node_and_requeues_the_gang_whole_and_a_failing_epilog_drains() {
    let Some(mut h) = Hosts::new(30) else { return };
    let dir = h.files.path().to_path_buf();
    let seen = dir.join("prolog-saw");
    let failing = site_program(
        &dir,
        "prolog-full",
        "echo 'scratch is full on this node'; exit 1",
    );
    let telling = site_program(
        &dir,
        "prolog-tell",
        &format!(
            "echo \"$SLURMD_NODENAME $SLURM_JOB_ID $SLURM_JOB_USER $SLURM_JOB_NODELIST\" >> {}",
            seen.display()
        ),
    );
    let epilog = site_program(
        &dir,
        "epilog-fail",
        "echo 'GPU 0 fell off the bus' >&2; exit 2",
    );
    h.start_agent_with(1, &["--prolog", &failing]);
    h.start_agent_with(2, &["--prolog", &telling]);
    h.start_agent_with(3, &["--prolog", &telling, "--epilog", &epilog]);
    let out =
        h.c.ok(&["submit", "--parsable", "-N", "2", "-n", "2", "--", "true"]);
    let id: u64 = out.trim().parse().expect("a job id");
    h.wait_job(id, "COMPLETED");
    // First placed on n1 and n2: n1's prolog failed, so no task of that start ran (n2's
    // was stopped with it) and the gang went back whole, to run on n2 and n3.
    let job = h.job(id);
    assert_eq!(job["requeues"].as_u64(), Some(1), "{job}");
    assert_eq!(job["nodes"], "n[2-3]", "{job}");
    let n1 = h.node("n1");
    assert_eq!(n1["avail"], "drain", "{n1}");
    let reason = n1["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("prolog") && reason.contains("scratch is full on this node"),
        "{n1}"
    );
    // The prologs that ran were told the job as Slurm tells it.
    let saw = std::fs::read_to_string(&seen).expect("the prologs wrote");
    for node in ["n2", "n3"] {
        assert!(
            saw.lines().any(|l| l == format!("{node} {id} root n[2-3]")),
            "{node}: {saw}"
        );
    }
    // n3's epilog failed once the job ended there: n3 is drained, saying why.
    h.wait_node("n3", "drained by its epilog", |n| n["avail"] == "drain");
    let n3 = h.node("n3");
    assert!(
        n3["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("GPU 0 fell off the bus"),
        "{n3}"
    );
    assert_eq!(h.node("n2")["avail"], "up", "{}", h.node("n2"));
}

#[test]
fn a_failing_health_check_drains_its_node_with_its_reason_until_it_passes_again() {
    let Some(mut h) = Hosts::new(30) else { return };
    let dir = h.files.path().to_path_buf();
    let flag = dir.join("scratch-read-only");
    let check = site_program(
        &dir,
        "health",
        &format!(
            "[ -e {} ] && {{ echo \"/scratch is read-only on $SLURMD_NODENAME\"; exit 1; }}; exit 0",
            flag.display()
        ),
    );
    for i in 1..=2 {
        h.start_agent_with(
            i,
            &[
                "--health-check-program",
                &check,
                "--health-check-interval",
                "1",
            ],
        );
    }
    assert_eq!(h.node("n1")["avail"], "up", "{}", h.node("n1"));
    // An administrator's drain of n2 is the administrator's: checks that pass keep it.
    let (status, _) = h.c.api(
        "POST",
        "/nodes/n2/drain",
        Some(r#"{"reason":"maintenance"}"#),
    );
    assert!(status < 300, "drain: {status}");
    std::fs::write(&flag, "").unwrap();
    h.wait_node("n1", "drained by its check", |n| n["avail"] == "drain");
    let n1 = h.node("n1");
    assert_eq!(n1["reason"], "/scratch is read-only on n1", "{n1}");
    // Nothing starts on it meanwhile.
    let out =
        h.c.ok(&["submit", "--parsable", "-N", "2", "-n", "2", "--", "true"]);
    let id: u64 = out.trim().parse().expect("a job id");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(h.job(id)["state"], "PENDING", "{}", h.job(id));
    // The check passes again: the drain it set is lifted; the administrator's stays.
    std::fs::remove_file(&flag).unwrap();
    h.wait_node("n1", "back up", |n| n["avail"] == "up");
    let n2 = h.node("n2");
    assert_eq!(
        (&n2["avail"], &n2["reason"]),
        (&Value::from("drain"), &Value::from("maintenance")),
        "{n2}"
    );
    h.c.api("POST", "/nodes/n2/resume", None);
    h.start_agent(3);
    wait_until("the job runs", || h.job(id)["state"] != "PENDING");
}

/// A PyTorchJob of a master and two workers, one per node, whose ranks meet as torchrun's
/// do: the master listens on `MASTER_PORT`, each worker connects to `MASTER_ADDR` (the
/// master's pod name, resolved through the job's hosts file) and says its rank.
const RENDEZVOUS: &str = r#"apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: pt}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
          - {name: pytorch, image: pytorch, command: [python3, -c, "$(PROGRAM)"], resources: {limits: {cpu: 1}}, env: [{name: PROGRAM, value: "$(P)"}]}
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          containers:
          - {name: pytorch, image: pytorch, command: [python3, -c, "$(PROGRAM)"], resources: {limits: {cpu: 1}}, env: [{name: PROGRAM, value: "$(P)"}]}
"#;

const RENDEZVOUS_PROGRAM: &str = r#"
import os, socket, time
e = os.environ
if e["RANK"] == "0":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(e["MASTER_PORT"])))
    s.listen(4)
    got = []
    for _ in range(int(e["WORLD_SIZE"]) - 1):
        c, addr = s.accept()
        got.append(c.recv(100).decode() + " from " + addr[0])
        c.close()
    for g in sorted(got):
        print("master heard", g, flush=True)
else:
    for _ in range(300):
        try:
            c = socket.create_connection((e["MASTER_ADDR"], int(e["MASTER_PORT"])), timeout=2)
            break
        except OSError:
            time.sleep(0.1)
    c.sendall(("rank " + e["RANK"]).encode())
    c.close()
    print("worker", e["RANK"], "reached", e["MASTER_ADDR"], "at", socket.gethostbyname(e["MASTER_ADDR"]), flush=True)
"#;

#[test]
fn a_pytorchjob_s_ranks_meet_across_hosts_as_torchrun_s_rendezvous_does() {
    let Some(mut h) = Hosts::new(30) else { return };
    for i in 1..=3 {
        h.start_agent(i);
    }
    // The program as one YAML string: its newlines and quotes escaped.
    let program = serde_json::to_string(RENDEZVOUS_PROGRAM).expect("JSON string");
    let manifest = RENDEZVOUS.replace("\"$(P)\"", &program);
    let file = h.files.path().join("pt.yaml");
    std::fs::write(&file, manifest).unwrap();
    let out = h.c.ok(&["apply", "-f", &file.display().to_string()]);
    let id: u64 = out
        .split_whitespace()
        .filter_map(|w| {
            w.trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .ok()
        })
        .next()
        .unwrap_or_else(|| panic!("no job id in: {out}"));
    h.wait_job(id, "COMPLETED");
    let described = h.c.ok(&["describe", "pytorchjob", "pt"]);
    // Which host each pod ran on, from `describe` (`pt-master-0 ... on n2`).
    let host_of = |pod: &str| -> String {
        let node = described
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(pod))
            .and_then(|l| l.split(" on ").nth(1))
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("describe lists no {pod}:\n{described}"))
            .to_string();
        let i: u8 = node
            .trim_start_matches('n')
            .parse()
            .expect("a node of ours");
        format!("10.231.0.{}", i + 1)
    };
    let output = |rank: u32| {
        std::fs::read_to_string(h.c.workdir().join(format!("pt-{id}-{rank}.out")))
            .unwrap_or_default()
    };
    let master = host_of("pt-master-0");
    let mut hosts = vec![master.clone()];
    for (rank, pod) in [(1, "pt-worker-0"), (2, "pt-worker-1")] {
        let host = host_of(pod);
        assert_ne!(host, master, "{described}");
        assert!(
            output(0).contains(&format!("master heard rank {rank} from {host}")),
            "{}",
            output(0)
        );
        assert!(
            output(rank).contains(&format!("reached pt-master-0 at {master}")),
            "{}",
            output(rank)
        );
        hosts.push(host);
    }
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 3, "one rank per host: {described}");
}

/// One submission of the storm, held: the job id if the controller acknowledged it.
fn storm_submit(h: &Hosts, ran: &Path) -> Option<u64> {
    let out = h.c.run(&[
        "submit",
        "--parsable",
        "--hold",
        "--",
        "sh",
        "-c",
        &format!("echo $$ >> {}/ran.$SLURM_JOB_ID", ran.display()),
    ]);
    out.status
        .success()
        .then(|| text(&out.stdout).trim().parse().expect("a job id"))
}

#[test]
fn a_controller_killed_during_a_submission_storm_loses_nothing_and_its_agents_on_other_hosts_keep_their_gang()
 {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let Some(mut h) = Hosts::new(30) else { return };
    for i in 1..=3 {
        h.start_agent(i);
    }
    let ran = h.files.path().join("ran");
    std::fs::create_dir(&ran).unwrap();
    let pids = h.files.path().join("long");
    let long = h.gang(&format!(
        "echo $$ >> {}.$SLURM_PROCID; exec sleep 120",
        pids.display()
    ));
    let pid_files: Vec<PathBuf> = (0..3)
        .map(|r| PathBuf::from(format!("{}.{r}", pids.display())))
        .collect();
    wait_until("the gang's three tasks run", || {
        pid_files.iter().all(|p| p.exists())
    });
    let before = h.job(long);
    let controller = cadre_test_support::read_pid(&h.c.path("cadre.pid"));

    let acked = Mutex::new(Vec::new());
    let count = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            let (acked, count, h, ran) = (&acked, &count, &h, &ran);
            s.spawn(move || {
                for _ in 0..40 {
                    if let Some(id) = storm_submit(h, ran) {
                        acked.lock().expect("ids").push(id);
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        wait_until("eighty submissions acknowledged", || {
            count.load(Ordering::SeqCst) >= 80
        });
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(controller),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("the controller is killed");
    });
    let acked = acked.into_inner().expect("ids");
    assert!(acked.len() < 320, "the kill came too late to test anything");
    wait_until("the killed controller is gone", || {
        !cadre_test_support::running(controller)
    });
    // Up again on host 0; the agents on hosts 1 to 3 reconnect over TLS, their gang kept.
    let out = h.c.try_start();
    assert!(out.status.success(), "{}{}", text(&out.stderr), h.logs());
    for i in 1..=3 {
        h.wait_node(&format!("n{i}"), "back", |n| n["connected"] == true);
    }
    let jobs: Value = serde_json::from_str(&h.c.ok(&["jobs", "--json"])).expect("JSON");
    let stored: Vec<u64> = jobs["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["id"].as_u64())
        .collect();
    let lost: Vec<&u64> = acked.iter().filter(|id| !stored.contains(id)).collect();
    assert!(lost.is_empty(), "acknowledged jobs lost: {lost:?}");
    let after = h.job(long);
    assert_eq!(after["state"], "RUNNING", "{after}");
    assert_eq!(after["start_time"], before["start_time"], "{after}");
    assert_eq!(after["requeues"], 0, "{after}");
    for p in &pid_files {
        let text = std::fs::read_to_string(p).unwrap();
        assert_eq!(text.lines().count(), 1, "{} started again", p.display());
        let pid: i32 = text.trim().parse().unwrap();
        assert!(
            cadre_test_support::running(pid),
            "a task of the gang is gone"
        );
    }
    // Held ones stay held and run once when released.
    let released: Vec<u64> = [&acked[..2], &acked[acked.len() - 2..]].concat();
    for id in &released {
        let (status, body) = h.c.api("POST", &format!("/api/v1/jobs/{id}/release"), None);
        assert_eq!(status, 204, "release {id}: {body}");
    }
    h.c.ok(&["cancel", &long.to_string()]);
    for id in &released {
        h.wait_job(*id, "COMPLETED");
        let runs = std::fs::read_to_string(ran.join(format!("ran.{id}"))).unwrap();
        assert_eq!(runs.lines().count(), 1, "job {id} ran {runs:?}");
    }
    let never: Vec<&u64> = acked
        .iter()
        .filter(|id| !released.contains(id) && ran.join(format!("ran.{id}")).exists())
        .collect();
    assert!(never.is_empty(), "held jobs ran: {never:?}");
}

#[test]
fn agents_take_the_controller_s_settings_where_their_own_options_say_nothing() {
    let flag = std::sync::OnceLock::new();
    let Some(mut h) = Hosts::with(30, |dir| {
        let f = dir.join("scratch-gone");
        flag.set(f.clone()).unwrap();
        let check = site_program(
            dir,
            "site-check",
            &format!(
                "[ -e {} ] && {{ echo \"/scratch is gone on $SLURMD_NODENAME\"; exit 1; }}; exit 0",
                f.display()
            ),
        );
        // An epilog anyone may rewrite: no node may run it.
        let loose = site_program(dir, "loose-epilog", "exit 0");
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o777)).unwrap();
        [
            "--agent-health-check-program",
            &check,
            "--agent-health-check-interval",
            "1",
            "--agent-epilog",
            &loose,
        ]
        .map(String::from)
        .to_vec()
    }) else {
        return;
    };
    let flag = flag.get().unwrap().clone();
    let dir = h.files.path().to_path_buf();
    let own_epilog = site_program(&dir, "own-epilog", "exit 0");
    let own_check = site_program(&dir, "own-check", "exit 0");
    // n1 sets nothing; n2 its own epilog and health check; n3 its own epilog only.
    h.start_agent(1);
    h.start_agent_with(
        2,
        &[
            "--epilog",
            &own_epilog,
            "--health-check-program",
            &own_check,
        ],
    );
    h.start_agent_with(3, &["--epilog", &own_epilog]);
    h.wait_node("n1", "drained by the loose epilog", |n| {
        n["avail"] == "drain"
    });
    let reason = h.node("n1")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        reason.contains("the controller's epilog") && reason.contains("may be changed by others"),
        "{reason}"
    );
    assert_eq!(h.node("n2")["avail"], "up", "{}", h.node("n2"));
    assert_eq!(h.node("n3")["avail"], "up", "{}", h.node("n3"));
    // The controller's health check runs where the node has none of its own.
    std::fs::write(&flag, "").unwrap();
    h.wait_node("n3", "drained by the controller's check", |n| {
        n["avail"] == "drain"
    });
    assert_eq!(
        h.node("n3")["reason"],
        "/scratch is gone on n3",
        "{}",
        h.node("n3")
    );
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        h.node("n2")["avail"],
        "up",
        "n2 runs its own check: {}",
        h.node("n2")
    );
    std::fs::remove_file(&flag).unwrap();
    h.wait_node("n3", "back up", |n| n["avail"] == "up");
}
