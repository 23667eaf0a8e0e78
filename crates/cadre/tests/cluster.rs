//! Whole clusters started as a user starts them (`cadre up --detach` in a temporary data
//! directory, agents and emulated GPUs on this machine) and driven through the `cadre`
//! command line, and through `cadre-client` where the check is about the API's own answers
//! (status codes, tokens, a job's allocation); HTTP is written by hand only where the check
//! is about the connection itself (half a request head, a connection beyond a peer's cap).
//!
//! Each test has its own data directory and cluster; a guard stops the cluster (`cadre
//! down`) when the test ends, also when it panics. Nothing here asserts a duration: tests
//! wait for states and files, and the deadlines only keep a broken build from hanging.

use cadre_client::Target;
use cadre_test_support::{
    Cluster, DEADLINE, api, clean_command, free_port, http, read_pid, run_dir_of, running,
    skip_unless_ci, text, wait_until,
};

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// `cadre` in `dir` with none of the caller's `CADRE_*` variables.
fn cadre_command(dir: &Path) -> Command {
    clean_command(env!("CARGO_BIN_EXE_cadre"), dir)
}

/// Whether the file holds at least one whole line (a writer may be half-way).
fn has_line(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t.contains('\n'))
}

/// `cadre up --detach --nodes N --gpus-per-node G EXTRA...`, ready (every agent
/// connected) when this returns.
fn up(nodes: u32, gpus_per_node: u32, extra: &[&str]) -> Cluster {
    Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
        .nodes(nodes)
        .gpus_per_node(gpus_per_node)
        .args(extra)
        .start()
}

/// What these tests do with a cluster's jobs through `cadre`.
trait Jobs {
    fn submit(&self, args: &[&str]) -> u64;
    fn wait(&self, id: u64) -> String;
    fn jobs(&self) -> BTreeMap<u64, Value>;
    fn job(&self, id: u64) -> Value;
    fn wait_for_state(&self, id: u64, state: &str);
    fn kill_controller(&self);
}

impl Jobs for Cluster {
    /// `cadre submit --parsable ARGS`: the job id.
    fn submit(&self, args: &[&str]) -> u64 {
        let out = self.ok(&[&["submit", "--parsable"][..], args].concat());
        out.trim()
            .parse()
            .unwrap_or_else(|e| panic!("submit printed `{out}`, not a job id: {e}"))
    }

    /// `cadre wait JOB`: the state it ended in, checked against the exit status (0 iff
    /// COMPLETED).
    fn wait(&self, id: u64) -> String {
        let out = self.run(&["wait", &id.to_string(), "--timeout", "60"]);
        let said = text(&out.stdout);
        let state = said
            .trim()
            .strip_prefix(&format!("job {id} "))
            .unwrap_or_else(|| {
                panic!(
                    "cadre wait {id} printed `{said}`: {}{}",
                    text(&out.stderr),
                    self.log()
                )
            })
            .to_owned();
        assert_eq!(
            out.status.success(),
            state == "COMPLETED",
            "cadre wait {id} exits 0 iff the job COMPLETED (it is {state})"
        );
        state
    }

    /// `cadre jobs --json`, by id.
    fn jobs(&self) -> BTreeMap<u64, Value> {
        let out = self.ok(&["jobs", "--json"]);
        let list: Value = serde_json::from_str(&out).expect("cadre jobs --json prints JSON");
        list["jobs"]
            .as_array()
            .expect("a list of jobs")
            .iter()
            .map(|j| (j["id"].as_u64().expect("a job id"), j.clone()))
            .collect()
    }

    fn job(&self, id: u64) -> Value {
        self.jobs()
            .remove(&id)
            .unwrap_or_else(|| panic!("job {id} is not in `cadre jobs --json`"))
    }

    fn wait_for_state(&self, id: u64, state: &str) {
        wait_until(&format!("job {id} {state}"), || {
            self.job(id)["state"] == state
        });
    }

    /// `kill -9` of the controller; returns once it has exited.
    fn kill_controller(&self) {
        let pid = self.controller_pid();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("the controller is killed");
        wait_until("the killed controller exits", || !running(pid));
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("failed to read {}: {e}", path.display()))
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The `KEY=value` lines a task printed.
fn env_of(path: &Path) -> BTreeMap<String, String> {
    lines(path)
        .into_iter()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect()
}

#[test]
fn gang_runs_one_rank_per_node_on_four_nodes_and_down_leaves_nothing_behind() {
    let mut c = up(4, 2, &[]);
    let agents = c.agent_pids();
    assert_eq!(agents.len(), 4, "one agent per node: {agents:?}");
    let pattern = c.path("rank-%t.out");
    let id = c.submit(&[
        "-n",
        "4",
        "--ntasks-per-node",
        "1",
        "--gpus-per-task",
        "1",
        "-o",
        pattern.to_str().expect("utf-8 path"),
        "--",
        "sh",
        "-c",
        "for v in SLURM_PROCID SLURM_NODEID SLURMD_NODENAME SLURM_JOB_NODELIST SLURM_NTASKS \
         CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER; do eval echo $v=\\$$v; done",
    ]);
    assert_eq!(c.wait(id), "COMPLETED");

    let mut nodes = BTreeSet::new();
    let mut node_ids = BTreeSet::new();
    for rank in 0..4 {
        let env = env_of(&c.path(&format!("rank-{rank}.out")));
        assert_eq!(env["SLURM_PROCID"], rank.to_string(), "{env:?}");
        assert_eq!(env["SLURM_JOB_NODELIST"], "node[001-004]", "{env:?}");
        assert_eq!(env["SLURM_NTASKS"], "4", "{env:?}");
        assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID", "{env:?}");
        let gpus: Vec<&str> = env["CUDA_VISIBLE_DEVICES"].split(',').collect();
        assert_eq!(gpus.len(), 1, "one GPU per task: {env:?}");
        assert!(
            ["0", "1"].contains(&gpus[0]),
            "a GPU of a 2-GPU node: {env:?}"
        );
        nodes.insert(env["SLURMD_NODENAME"].clone());
        node_ids.insert(env["SLURM_NODEID"].clone());
    }
    let want: BTreeSet<String> = (1..=4).map(|n| format!("node00{n}")).collect();
    assert_eq!(nodes, want, "each rank on its own node");
    assert_eq!(node_ids, ["0", "1", "2", "3"].map(String::from).into());
    let job = c.job(id);
    assert_eq!(job["nodes"], "node[001-004]");
    assert_eq!(job["exit_code"], 0);

    c.stop();
    // The socket, and the agents' state directories with their lease files and the
    // (empty) directories of their keepers' and runs' records: the whole run directory.
    let run = run_dir_of(c.data());
    assert!(
        !run.exists(),
        "cadre down removes the run directory, left with: {:?}",
        files_under(&run)
    );
    assert!(
        !c.path("cadre.pid").exists(),
        "cadre down removes the pid file"
    );
    for (node, pid) in agents {
        assert!(!running(pid), "the agent of {node} (pid {pid}) still runs");
    }
}

/// Every path under `dir`, for a failure's message.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p.clone());
            }
            found.push(p);
        }
    }
    found
}

#[test]
fn concurrent_jobs_on_one_node_see_disjoint_gpus() {
    let c = up(1, 4, &[]);
    // Each job records its GPUs, then waits until the other has too: both COMPLETED means
    // they ran at the same time (a job that waits alone gives up and fails).
    let script = "echo \"$CUDA_VISIBLE_DEVICES\" > gpus.$SLURM_JOB_ID.tmp && \
                  mv gpus.$SLURM_JOB_ID.tmp gpus.$SLURM_JOB_ID; \
                  echo \"$CUDA_DEVICE_ORDER\" > order.$SLURM_JOB_ID; i=0; \
                  while [ \"$(ls gpus.* | grep -cv tmp)\" -lt 2 ]; do \
                    i=$((i+1)); [ $i -gt 400 ] && exit 9; sleep 0.1; \
                  done";
    let dir = c.data().to_str().expect("utf-8 path").to_owned();
    let submit = || {
        c.submit(&[
            "-n",
            "1",
            "--gpus-per-task",
            "2",
            "-D",
            &dir,
            "--",
            "sh",
            "-c",
            script,
        ])
    };
    let (a, b) = (submit(), submit());
    assert_eq!(c.wait(a), "COMPLETED", "job {a} ran alone");
    assert_eq!(c.wait(b), "COMPLETED", "job {b} ran alone");
    let devices = |id: u64| -> BTreeSet<String> {
        let line = lines(&c.path(&format!("gpus.{id}"))).join("");
        let set: BTreeSet<String> = line.split(',').map(str::to_owned).collect();
        assert_eq!(set.len(), 2, "job {id} sees two GPUs: `{line}`");
        set
    };
    let (ga, gb) = (devices(a), devices(b));
    assert!(
        ga.is_disjoint(&gb),
        "jobs {a} and {b} share GPUs: {ga:?} {gb:?}"
    );
    let all: BTreeSet<String> = ga.union(&gb).cloned().collect();
    assert_eq!(all, ["0", "1", "2", "3"].map(String::from).into());
    for id in [a, b] {
        assert_eq!(lines(&c.path(&format!("order.{id}"))), ["PCI_BUS_ID"]);
    }
}

#[test]
fn time_limit_ends_a_job_as_timeout_and_stops_its_process() {
    let c = up(1, 0, &[]);
    let pid_file = c.path("task.pid");
    let id = c.submit(&[
        "-t",
        "1",
        "--",
        "sh",
        "-c",
        &format!("echo $$ > {}; exec sleep 60", pid_file.display()),
    ]);
    // `-t` takes whole minutes, as Slurm's `--time` does; the API takes seconds, which
    // keeps this quick.
    let (status, answer) = c.api(
        "PATCH",
        &format!("/api/v1/jobs/{id}"),
        Some(r#"{"time_limit": 2}"#),
    );
    assert_eq!(status, 204, "{answer}");
    assert_eq!(c.wait(id), "TIMEOUT");
    assert_eq!(c.job(id)["state"], "TIMEOUT");
    assert_eq!(c.job(id)["time_limit"], 2);
    let pid = read_pid(&pid_file);
    assert!(!running(pid), "the timed-out task (pid {pid}) still runs");
}

#[test]
fn cancelled_job_ends_cancelled_with_its_processes_gone() {
    let c = up(1, 0, &[]);
    let (shell, child) = (c.path("shell.pid"), c.path("child.pid"));
    let id = c.submit(&[
        "--",
        "sh",
        "-c",
        &format!(
            "sleep 60 & echo $! > {}; echo $$ > {}; wait",
            child.display(),
            shell.display()
        ),
    ]);
    wait_until("the task writes its pids", || has_line(&shell));
    assert_eq!(c.job(id)["state"], "RUNNING");
    let (shell_pid, child_pid) = (read_pid(&shell), read_pid(&child));
    assert!(running(shell_pid) && running(child_pid));
    c.ok(&["cancel", &id.to_string()]);
    assert_eq!(c.wait(id), "CANCELLED");
    // The shell is the agent's child, reaped by it; its own child is an orphan by now.
    assert!(
        !Path::new(&format!("/proc/{shell_pid}")).exists(),
        "the task (pid {shell_pid}) is still there after its job ended"
    );
    assert!(
        !running(child_pid),
        "the task's child (pid {child_pid}) still runs after its job ended"
    );
}

#[test]
fn failing_command_ends_failed_with_its_exit_code() {
    let c = up(1, 0, &[]);
    let id = c.submit(&["--", "sh", "-c", "exit 3"]);
    assert_eq!(c.wait(id), "FAILED");
    let job = c.job(id);
    assert_eq!(job["state"], "FAILED");
    assert_eq!(job["exit_code"], 3);
}

#[test]
fn gang_larger_than_the_cluster_stays_pending_and_never_starts() {
    let c = up(2, 2, &[]);
    let marker = c.path("started");
    // Three tasks of 2 GPUs: each fits a node, the gang does not fit the 4 GPUs.
    let big = c.submit(&[
        "-n",
        "3",
        "--gpus-per-task",
        "2",
        "--",
        "touch",
        marker.to_str().expect("utf-8 path"),
    ]);
    // A job submitted after it that runs to the end: the scheduler has had its passes.
    let small = c.submit(&["--gpus-per-task", "1", "--", "true"]);
    assert_eq!(c.wait(small), "COMPLETED");
    let job = c.job(big);
    assert_eq!(job["state"], "PENDING");
    let reason = job["reason"].as_str().expect("a reason");
    assert!(!reason.is_empty() && reason != "None", "reason `{reason}`");
    let explained: Value =
        serde_json::from_str(&c.ok(&["explain", &big.to_string(), "--json"])).expect("JSON");
    assert_eq!(explained["reason"], reason);
    assert!(!marker.exists(), "a task of the gang that cannot fit ran");
    assert_eq!(job["start_time"], Value::Null);
}

/// A 3-GPU job for two days waits on a node of 4 GPUs, with no small work queued to fill
/// the GPU it would leave idle: `cadre explain` says its partition goes largest first for
/// the gaps (the default `largest_first_gaps_percent`), in text and in JSON.
#[test]
fn explain_says_when_larger_jobs_go_first_for_the_gaps() {
    let c = up(1, 4, &[]);
    let blocker = c.submit(&["--gpus-per-task", "4", "-t", "10", "--", "sleep", "60"]);
    c.wait_for_state(blocker, "RUNNING");
    let wide = c.submit(&["--gpus-per-task", "3", "-t", "2880", "--", "true"]);
    let explained = || -> Value {
        serde_json::from_str(&c.ok(&["explain", &wide.to_string(), "--json"])).expect("JSON")
    };
    wait_until("a pass weighs the wide job's gaps", || {
        explained()["largest_first_for_gaps"] == true
    });
    assert_eq!(explained()["largest_first"], true);
    let said = c.ok(&["explain", &wide.to_string()]);
    assert!(
        said.contains("could not fill") && said.contains("largest_first_gaps_percent"),
        "{said}"
    );
    c.ok(&["cancel", &blocker.to_string()]);
    assert_eq!(c.wait(wide), "COMPLETED");
}

/// Regression: a job submitted with `--hold` was stored with no hold in its status, so a
/// controller restarted after a crash released it, and it ran.
#[test]
fn held_job_stays_held_after_the_controller_is_killed() {
    let mut c = up(1, 0, &[]);
    let marker = c.path("held-job-ran");
    let held = c.submit(&[
        "--hold",
        "--",
        "touch",
        marker.to_str().expect("utf-8 path"),
    ]);
    c.kill_controller();
    c.start();
    // A job submitted after the restart that runs to the end: the scheduler has had its
    // passes.
    let after = c.submit(&["--", "true"]);
    assert_eq!(c.wait(after), "COMPLETED");
    let job = c.job(held);
    assert_eq!(job["state"], "PENDING", "{job}");
    assert_eq!(job["reason"], "JobHeldUser", "{job}");
    assert!(!marker.exists(), "the held job ran");
}

/// `cadre token create --user USER` as root on the socket: the token's id and secret.
fn token_for(c: &Cluster, user: &str) -> (u64, String) {
    let t: Value = serde_json::from_str(&c.ok(&["token", "create", "--user", user, "--json"]))
        .expect("token JSON");
    (
        t["id"].as_u64().expect("token id"),
        t["token"].as_str().expect("the secret").to_owned(),
    )
}

/// `cadre submit --server http://ADDR --token TOKEN --hold -- true`, which must succeed:
/// the job id.
fn submit_held_over_tcp(c: &Cluster, addr: &str, token: &str) -> u64 {
    let server = format!("http://{addr}");
    let out = c.run(&[
        "submit",
        "--server",
        &server,
        "--token",
        token,
        "--parsable",
        "--hold",
        "--",
        "true",
    ]);
    assert!(
        out.status.success(),
        "submission with a token: {}",
        text(&out.stderr)
    );
    text(&out.stdout).trim().parse().expect("a job id")
}

/// Regression: `cadre submit` with a token named the local login name as the job's user,
/// and the controller refused a token holder submitting as another user (`alice` may not
/// submit as user `root`).
/// Regression: a root agent looked at a job's working directory (`-D`) before becoming the
/// job's user, so that a job held for it told the user whether a path they cannot reach
/// exists ("does not exist" or "cannot enter").
#[test]
fn a_working_directory_its_user_cannot_reach_holds_the_job_alike_whether_it_exists_or_not() {
    if !nix::unistd::geteuid().is_root() {
        skip_unless_ci::<()>("the tests of other users' jobs", "they need root");
        return;
    }
    let addr = format!("127.0.0.1:{}", free_port());
    let c = up(1, 0, &["--listen", &addr, "--insecure"]);
    let (_, token) = token_for(&c, "nobody");
    let private = tempfile::tempdir().expect("temporary directory");
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700))
        .expect("chmod");
    std::fs::create_dir(private.path().join("existing")).expect("mkdir");
    let held_reason = |dir: &Path| {
        let out = cadre_command(c.data())
            .env("CADRE_SERVER", format!("http://{addr}"))
            .env("CADRE_TOKEN", &token)
            .arg("submit")
            .arg("--parsable")
            .arg("-D")
            .arg(dir)
            .args(["--", "true"])
            .output()
            .expect("the cadre binary runs");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let id: u64 = text(&out.stdout).trim().parse().expect("a job id");
        let mut reason = String::new();
        wait_until(&format!("job {id} held"), || {
            reason = c.job(id)["reason"].as_str().unwrap_or_default().to_owned();
            reason.starts_with("launch failed requeued held")
        });
        reason
            .replace(&dir.display().to_string(), "DIR")
            .replace(&format!("job {id}"), "job ID")
    };
    let existing = held_reason(&private.path().join("existing"));
    let missing = held_reason(&private.path().join("missing"));
    assert_eq!(existing, missing);
    let nobody = nix::unistd::User::from_name("nobody")
        .expect("user lookup")
        .expect("a user `nobody`");
    assert!(
        existing.contains(&format!(
            "cannot enter working directory DIR as uid {}: Permission denied",
            nobody.uid
        )),
        "{existing}"
    );
}

#[test]
fn submit_with_a_token_submits_as_the_tokens_user() {
    let addr = format!("127.0.0.1:{}", free_port());
    let c = up(1, 0, &["--listen", &addr, "--insecure"]);
    let (_, alice) = token_for(&c, "alice");
    let id = submit_held_over_tcp(&c, &addr, &alice);
    let job = c.job(id);
    assert_eq!(job["user"], "alice", "{job}");
    assert_eq!(job["account"], "alice", "{job}");
}

#[test]
fn tokens_decide_who_sees_and_changes_what_over_tcp() {
    let addr = format!("127.0.0.1:{}", free_port());
    let c = up(1, 0, &["--listen", &addr, "--insecure"]);

    let (status, body) = over_tcp(&addr, "GET", "/api/v1/jobs", None, None);
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthenticated", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );

    let (_, alice) = token_for(&c, "alice");
    let (bob_id, bob) = token_for(&c, "bob");
    let id = submit_held_over_tcp(&c, &addr, &alice);
    let job = c.job(id);
    assert_eq!(job["user"], "alice");
    assert_eq!(job["state"], "PENDING");

    let path = format!("/api/v1/jobs/{id}");
    let (status, body) = over_tcp(&addr, "DELETE", &path, Some(&bob), None);
    assert_eq!(status, 403, "bob cancels alice's job: {body}");
    assert_eq!(body["error"]["code"], "forbidden");
    let (status, body) = over_tcp(&addr, "GET", &path, Some(&bob), None);
    assert_eq!(status, 403, "bob reads alice's job: {body}");
    let (status, body) = over_tcp(&addr, "GET", "/api/v1/jobs", Some(&bob), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["jobs"],
        serde_json::json!([]),
        "bob sees no job of alice"
    );
    let (status, body) = over_tcp(&addr, "GET", "/api/v1/jobs", Some(&alice), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["jobs"][0]["id"], id, "alice sees her job: {body}");

    let (status, body) = over_tcp(
        &addr,
        "POST",
        "/api/v1/tokens",
        Some(&bob),
        Some(r#"{"user":"bob","admin":true}"#),
    );
    assert_eq!(status, 403, "a user makes himself a token: {body}");
    assert_eq!(body["error"]["code"], "forbidden");

    let (status, body) = over_tcp(&addr, "DELETE", &path, Some(&alice), None);
    assert_eq!(status, 204, "alice cancels her job: {body}");
    assert_eq!(c.job(id)["state"], "CANCELLED");

    c.ok(&["token", "revoke", &bob_id.to_string()]);
    let (status, body) = over_tcp(&addr, "GET", "/api/v1/jobs", Some(&bob), None);
    assert_eq!(status, 401, "a revoked token: {body}");
    assert_eq!(body["error"]["code"], "unauthenticated");
}

/// A job's token (made, as its agents make it, from the cluster's agent key) acts as the
/// job's user over TCP while the job runs, on that job only: `cadre rsh` with it starts a
/// step on one of the job's nodes and passes its output back. Forged, or once the job has
/// ended, it is refused.
#[test]
fn a_job_token_lets_cadre_rsh_start_steps_over_tcp_while_the_job_runs() {
    let addr = format!("127.0.0.1:{}", free_port());
    let c = up(2, 0, &["--listen", &addr, "--insecure"]);
    let id = c.submit(&["-N", "2", "--", "sleep", "60"]);
    c.wait_for_state(id, "RUNNING");
    let key = std::fs::read_to_string(c.path("agent.key")).expect("the agent key");
    let token = cadre_proto::job_token::make(key.trim(), cadre_core::job::JobId(id), 0);

    let (status, body) = over_tcp(&addr, "GET", "/api/v1/whoami", Some(&token), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["via"], "job-token", "{body}");
    assert_eq!(body["admin"], false, "{body}");
    // It reaches its own job, its steps and the nodes, nothing else.
    let (status, body) = over_tcp(
        &addr,
        "GET",
        &format!("/api/v1/jobs/{id}"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "{body}");
    for (method, path) in [
        ("GET", "/api/v1/jobs".to_string()),
        ("DELETE", format!("/api/v1/jobs/{id}")),
    ] {
        let (status, body) = over_tcp(&addr, method, &path, Some(&token), None);
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert_eq!(body["error"]["code"], "forbidden", "{body}");
    }
    let forged = cadre_proto::job_token::make("not the key", cadre_core::job::JobId(id), 0);
    let (status, body) = over_tcp(&addr, "GET", "/api/v1/whoami", Some(&forged), None);
    assert_eq!(status, 401, "{body}");

    let rsh = |host: &str| {
        cadre_command(c.data())
            .args(["rsh", "-o", "ConnectionAttempts=10", host])
            .arg("echo on $SLURMD_NODENAME; exit 3")
            .env("CADRE_SERVER", format!("http://{addr}"))
            .env("CADRE_TOKEN", &token)
            .env("SLURM_JOB_ID", id.to_string())
            .output()
            .expect("cadre rsh runs")
    };
    let out = rsh("node002");
    assert_eq!(text(&out.stdout), "on node002\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "the command's exit code");
    // As after an ssh session, what the command leaves behind goes on (OpenMPI's daemons
    // detach themselves from their step); this one has not even left the step's process
    // group, which a step of `srun` would have killed.
    let leftover = format!("sleep 59.{id}");
    let out = cadre_command(c.data())
        .args(["rsh", "node002"])
        .arg(format!("{leftover} </dev/null >/dev/null 2>&1 & exit 0"))
        .env("CADRE_SERVER", format!("http://{addr}"))
        .env("CADRE_TOKEN", &token)
        .env("SLURM_JOB_ID", id.to_string())
        .output()
        .expect("cadre rsh runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    std::thread::sleep(Duration::from_millis(300));
    let found = Command::new("pgrep")
        .args(["-f", &format!("^{leftover}$")])
        .output()
        .expect("pgrep runs");
    let _ = Command::new("pkill")
        .args(["-f", &format!("^{leftover}$")])
        .status();
    assert!(
        found.status.success(),
        "`{leftover}`, left behind by cadre rsh, was stopped with its step"
    );
    let out = rsh("elsewhere");
    assert_eq!(out.status.code(), Some(255));
    assert!(
        text(&out.stderr).contains("`elsewhere` is not where job"),
        "{}",
        text(&out.stderr)
    );

    c.ok(&["cancel", &id.to_string()]);
    c.wait(id);
    let (status, body) = over_tcp(&addr, "GET", "/api/v1/whoami", Some(&token), None);
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not running")),
        "{body}"
    );
}

/// A job's token is of one run: once the job is requeued and runs again, the first run's
/// token is refused (it would otherwise outlive the run it was given to, in whatever the
/// first run left behind), and the new run's token works.
#[test]
fn a_job_token_is_worth_nothing_once_its_run_has_ended_even_when_the_job_runs_again() {
    let addr = format!("127.0.0.1:{}", free_port());
    let c = up(1, 0, &["--listen", &addr, "--insecure"]);
    let id = c.submit(&["--", "sleep", "60"]);
    c.wait_for_state(id, "RUNNING");
    let key = std::fs::read_to_string(c.path("agent.key")).expect("the agent key");
    let key = key.trim();
    let first = cadre_proto::job_token::make(key, cadre_core::job::JobId(id), 0);
    let (status, body) = over_tcp(&addr, "GET", "/api/v1/whoami", Some(&first), None);
    assert_eq!(status, 200, "{body}");
    // A token of a run that has not started is refused too.
    let early = cadre_proto::job_token::make(key, cadre_core::job::JobId(id), 1);
    let (status, body) = over_tcp(&addr, "GET", "/api/v1/whoami", Some(&early), None);
    assert_eq!(status, 401, "{body}");

    let (status, body) = c.api("POST", &format!("/api/v1/jobs/{id}/requeue"), None);
    assert!(status < 300, "requeue: {status} {body}");
    wait_until("the job runs again", || {
        let job = c.job(id);
        job["state"] == "RUNNING" && job["requeues"] == 1
    });
    let (status, body) = over_tcp(&addr, "GET", "/api/v1/whoami", Some(&first), None);
    assert_eq!(
        status, 401,
        "the first run's token, after a requeue: {body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("run 0 of job") && m.contains("has ended")),
        "{body}"
    );
    let (status, body) = over_tcp(&addr, "GET", "/api/v1/whoami", Some(&early), None);
    assert_eq!(status, 200, "the second run's token: {body}");
    assert_eq!(body["via"], "job-token", "{body}");
}

/// Every API error carries a stable reason beside its code, and what the reason is about
/// where there is one thing: clients (sbatch's messages among them) decide on those, never
/// on the message's words.
#[test]
fn errors_carry_a_reason_and_what_it_is_about() {
    let c = up(1, 0, &[]);
    let submit = |edit: &dyn Fn(&mut cadre_core::job::JobSpec)| {
        let mut spec = one_cpu_spec("root");
        edit(&mut spec);
        let body = serde_json::json!({
            "jobs": [{
                "spec": spec,
                "run": {"command": ["true"], "work_dir": "/tmp"},
            }]
        });
        c.api("POST", "/api/v1/jobs", Some(&body.to_string()))
    };
    for (edit, reason, subject) in [
        (
            Box::new(|s: &mut cadre_core::job::JobSpec| s.partition = Some("nope".into()))
                as Box<dyn Fn(&mut cadre_core::job::JobSpec)>,
            "unknown_partition",
            Some("nope"),
        ),
        (
            Box::new(|s: &mut cadre_core::job::JobSpec| s.qos = Some("gold".into())),
            "unknown_qos",
            Some("gold"),
        ),
        (
            Box::new(|s: &mut cadre_core::job::JobSpec| {
                s.dependencies = vec![cadre_core::job::Dependency::On {
                    kind: cadre_core::job::DependencyKind::AfterOk,
                    job: cadre_core::job::JobId(424242),
                }]
            }),
            "dependency_not_found",
            Some("424242"),
        ),
        (
            Box::new(|s: &mut cadre_core::job::JobSpec| s.groups[0].count = u32::MAX),
            "out_of_range",
            Some("jobs[0].spec.groups[0].count"),
        ),
    ] {
        let (status, answer) = submit(&*edit);
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
        assert_eq!(answer["error"]["reason"], reason, "{answer}");
        match subject {
            Some(s) => assert_eq!(answer["error"]["subject"], s, "{answer}"),
            None => assert!(answer["error"].get("subject").is_none(), "{answer}"),
        }
    }
    let (status, answer) = c.api("GET", "/api/v1/jobs/999999", None);
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error"]["reason"], "not_found", "{answer}");
    let (status, answer) = c.api("POST", "/api/v1/jobs", Some("{not json"));
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["reason"], "invalid_body", "{answer}");
    // The reasons are in the OpenAPI document.
    let (_, doc) = c.api("GET", "/api/v1/openapi.json", None);
    let reasons = &doc["components"]["schemas"]["ErrorReason"]["enum"];
    for r in [
        "unknown_partition",
        "forbidden_field",
        "out_of_range",
        "invalid_body",
    ] {
        assert!(
            reasons.as_array().is_some_and(|a| a.iter().any(|v| v == r)),
            "{r} is not in the OpenAPI document's ErrorReason: {reasons}"
        );
    }
}

/// One submission attempt of the storm: the job id if the controller acknowledged it.
fn storm_submit(c: &Cluster, ran_dir: &str) -> Option<u64> {
    let out = c.run(&[
        "submit",
        "--parsable",
        "--hold",
        "--",
        "sh",
        "-c",
        &format!("echo $$ >> {ran_dir}/ran.$SLURM_JOB_ID"),
    ]);
    if !out.status.success() {
        return None;
    }
    Some(text(&out.stdout).trim().parse().expect("a job id"))
}

#[test]
fn controller_killed_during_a_submission_storm_loses_nothing_and_starts_nothing_twice() {
    let mut c = up(2, 2, &[]);
    let dir = c.data().to_str().expect("utf-8 path").to_owned();
    let long = c.submit(&[
        "-n",
        "2",
        "-N",
        "2",
        "--ntasks-per-node",
        "1",
        "--gpus-per-task",
        "1",
        "--",
        "sh",
        "-c",
        &format!("echo $$ >> {dir}/long.$SLURM_PROCID; exec sleep 30"),
    ]);
    let long_pids = [c.path("long.0"), c.path("long.1")];
    wait_until("both tasks of the long job write their pids", || {
        long_pids.iter().all(|p| has_line(p))
    });
    c.wait_for_state(long, "RUNNING");
    let (status, before) = c.api("GET", &format!("/api/v1/jobs/{long}"), None);
    assert_eq!(status, 200, "{before}");
    assert!(before["allocation"].is_object(), "{before}");
    let task_pids: Vec<i32> = long_pids.iter().map(|p| read_pid(p)).collect();
    let agents = c.agent_pids();
    let controller = c.controller_pid();

    let acked = Mutex::new(Vec::new());
    let count = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            let (acked, count, c, dir) = (&acked, &count, &c, &dir);
            s.spawn(move || {
                for _ in 0..50 {
                    if let Some(id) = storm_submit(c, dir) {
                        acked.lock().expect("ids").push(id);
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        wait_until("a hundred submissions acknowledged", || {
            count.load(Ordering::SeqCst) >= 100
        });
        c.kill_controller();
    });
    let acked = acked.into_inner().expect("ids");
    assert!(
        acked.len() < 400,
        "every submission was acknowledged: the kill came too late to test anything"
    );

    c.start();
    assert_ne!(c.controller_pid(), controller, "a new controller");
    assert_eq!(
        c.agent_pids(),
        agents,
        "the agents are adopted, not restarted"
    );
    for (node, pid) in &agents {
        assert!(running(*pid), "the agent of {node} (pid {pid}) is gone");
    }

    let jobs = c.jobs();
    eprintln!(
        "{} of 400 submissions acknowledged, {} jobs stored",
        acked.len(),
        jobs.len() - 1
    );
    let lost: Vec<u64> = acked
        .iter()
        .copied()
        .filter(|id| !jobs.contains_key(id))
        .collect();
    assert!(lost.is_empty(), "acknowledged jobs lost: {lost:?}");

    let (status, after) = c.api("GET", &format!("/api/v1/jobs/{long}"), None);
    assert_eq!(status, 200, "{after}");
    assert_eq!(after["state"], "RUNNING", "{after}");
    assert_eq!(after["allocation"], before["allocation"]);
    assert_eq!(after["start_time"], before["start_time"]);
    assert_eq!(after["requeues"], 0);
    for (path, pid) in long_pids.iter().zip(&task_pids) {
        assert_eq!(lines(path).len(), 1, "{} started again", path.display());
        assert!(running(*pid), "the long job's task {pid} is gone");
    }

    // Held jobs stay held; release a few and let them run.
    let storm: Vec<u64> = jobs.keys().copied().filter(|&id| id != long).collect();
    for id in &storm {
        assert_eq!(jobs[id]["state"], "PENDING", "job {id}: {}", jobs[id]);
        assert_eq!(jobs[id]["reason"], "JobHeldUser", "job {id}: {}", jobs[id]);
    }
    // The first ones, and the last ones: submitted as the controller was killed.
    let released: Vec<u64> = [&storm[..3], &storm[storm.len() - 3..]].concat();
    for id in &released {
        let (status, body) = c.api("POST", &format!("/api/v1/jobs/{id}/release"), None);
        assert_eq!(status, 204, "release {id}: {body}");
    }
    for &id in &released {
        assert_eq!(c.wait(id), "COMPLETED");
        assert_eq!(lines(&c.path(&format!("ran.{id}"))).len(), 1, "job {id}");
    }
    for (id, job) in c.jobs() {
        assert_eq!(job["requeues"], 0, "job {id} was requeued: {job}");
    }
    for id in storm.iter().filter(|id| !released.contains(id)) {
        assert!(!c.path(&format!("ran.{id}")).exists(), "held job {id} ran");
    }
    for path in &long_pids {
        assert_eq!(lines(path).len(), 1, "{} started again", path.display());
    }

    c.stop();
    for (node, pid) in agents {
        assert!(!running(pid), "the adopted agent of {node} still runs");
    }
    for pid in task_pids {
        assert!(!running(pid), "the long job's task {pid} still runs");
    }
    assert!(!run_dir_of(c.data()).join("cadre.sock").exists());
}

/// The production store behind the same controller: `cadre up --database postgres://...`
/// runs a job, writes it to PostgreSQL (and no SQLite file), and a restart finds it there.
#[test]
fn a_cluster_on_postgresql_runs_jobs_and_keeps_them_there() {
    let Some(mut schema) = cadre_test_support::pg::TestSchema::new("cluster_test") else {
        return;
    };
    let mut c = up(1, 1, &["--database", &schema.url]);
    let id = c.submit(&["--gpus-per-task", "1", "--", "true"]);
    assert_eq!(c.wait(id), "COMPLETED");
    assert!(
        !c.path("cadre.db").exists(),
        "an SQLite file was made beside a PostgreSQL store"
    );
    let name = schema.name.clone();
    let row = schema
        .admin
        .query_one(
            &format!("SELECT state, requeues FROM {name}.jobs WHERE id = $1"),
            &[&i64::try_from(id).expect("small id")],
        )
        .expect("the job's row in PostgreSQL");
    assert_eq!(row.get::<_, String>(0), "COMPLETED");
    assert_eq!(row.get::<_, i64>(1), 0);
    let runs: i64 = schema
        .admin
        .query_one(
            &format!("SELECT COUNT(*) FROM {name}.job_runs WHERE job_id = $1"),
            &[&i64::try_from(id).expect("small id")],
        )
        .expect("accounting rows")
        .get(0);
    assert_eq!(runs, 1, "one accounting row for one run");
    // A restart reads the same store.
    c.kill_controller();
    c.start();
    assert_eq!(c.job(id)["state"], "COMPLETED");
    c.stop();
}

/// `/metrics` of a running cluster: jobs by state, GPUs (emulated, allocated), and which
/// job holds which GPU.
#[test]
fn metrics_count_jobs_and_gpus_and_map_each_gpu_to_its_job() {
    let c = up(1, 2, &[]);
    let id = c.submit(&["--gpus-per-task", "1", "--", "sleep", "30"]);
    c.wait_for_state(id, "RUNNING");
    let raw = scrape(&c.target(), None);
    let user = String::from_utf8_lossy(
        &Command::new("id")
            .arg("-un")
            .output()
            .expect("id runs")
            .stdout,
    )
    .trim()
    .to_owned();
    for line in [
        "cadre_gpus{partition=\"gpu\"} 2".to_owned(),
        "cadre_gpus_emulated{partition=\"gpu\"} 2".to_owned(),
        "cadre_gpus_allocated{partition=\"gpu\"} 1.0".to_owned(),
        "cadre_jobs{state=\"RUNNING\",partition=\"gpu\"} 1".to_owned(),
        "cadre_jobs_submitted_total 1".to_owned(),
        "cadre_nodes{state=\"mixed\"} 1".to_owned(),
        format!("cadre_gpu_job_info{{node=\"node001\",gpu=\"0\",job=\"{id}\",user=\"{user}\"}} 1"),
    ] {
        assert!(raw.lines().any(|l| l == line), "no `{line}` in:\n{raw}");
    }
    assert!(raw.contains("cadre_scheduler_cycle_seconds_count"));
    assert!(raw.trim_end().ends_with("# EOF"));
    c.ok(&["cancel", &id.to_string()]);
}

/// A batch job's `srun` step goes on through a controller crash: the restarted
/// controller follows the step again from the store and the agents, `srun` waits for its
/// end, and the job completes as if nothing happened (the output printed while the
/// controller was away is the one thing lost).
#[test]
fn a_batch_jobs_step_survives_a_controller_crash() {
    let mut c = up(2, 2, &[]);
    let bin = c.path("bin");
    c.ok(&["install-aliases", bin.to_str().expect("utf-8 path")]);
    let flag = c.path("go");
    std::fs::write(
        c.path("steps.sh"),
        format!(
            "#!/bin/bash\n#SBATCH -N 2 -o {out}\n\
             srun -l bash -c 'echo start $SLURM_PROCID; while [ ! -e {flag} ]; do sleep 0.05; done; echo end $SLURM_PROCID'\n\
             echo \"srun=$?\"\n",
            out = c.path("steps.out").display(),
            flag = flag.display()
        ),
    )
    .unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let out = std::process::Command::new(bin.join("sbatch"))
        .args(["--parsable", "steps.sh"])
        .env("PATH", format!("{}:{path}", bin.display()))
        .env("CADRE_DATA_DIR", c.data())
        .current_dir(c.data())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id: u64 = text(&out.stdout).trim().parse().expect("a job id");
    wait_until("both tasks of the step have started", || {
        std::fs::read_to_string(c.path("steps.out"))
            .is_ok_and(|o| o.contains("0: start 0") && o.contains("1: start 1"))
    });
    c.kill_controller();
    c.start();
    std::fs::write(&flag, "").unwrap();
    c.wait_for_state(id, "COMPLETED");
    let out = std::fs::read_to_string(c.path("steps.out")).unwrap();
    assert!(out.contains("waiting for step"), "{out}");
    assert!(out.trim_end().ends_with("srun=0"), "{out}");
    let (status, steps) = c.api("GET", &format!("/api/v1/jobs/{id}/steps"), None);
    assert_eq!(status, 200, "{steps}");
    let states: Vec<(u64, &str)> = steps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["step"].as_u64().unwrap(), s["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        vec![(0, "COMPLETED"), (0xFFFF_FFFB, "COMPLETED")],
        "{steps}"
    );
}

/// `cadre rsh` (as `srun`) that has lost the controller waits for its step's end, and a
/// SIGTERM still ends it: the step cannot be cancelled without the controller.
#[test]
fn cadre_rsh_that_lost_the_controller_still_ends_on_sigterm() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = up(2, 0, &["--listen", &addr, "--insecure"]);
    let id = c.submit(&["-N", "2", "--", "sleep", "60"]);
    c.wait_for_state(id, "RUNNING");
    let key = std::fs::read_to_string(c.path("agent.key")).expect("the agent key");
    let token = cadre_proto::job_token::make(key.trim(), cadre_core::job::JobId(id), 0);
    let mut rsh = cadre_command(c.data())
        .args(["rsh", "node002", "echo started; sleep 60"])
        .env("CADRE_SERVER", format!("http://{addr}"))
        .env("CADRE_TOKEN", &token)
        .env("SLURM_JOB_ID", id.to_string())
        .spawn()
        .expect("cadre rsh runs");
    let mut stdout = rsh.stdout.take().expect("stdout");
    let mut first = [0u8; 8];
    std::io::Read::read_exact(&mut stdout, &mut first).expect("the step's first output");
    assert_eq!(&first, b"started\n");
    c.kill_controller();
    let mut stderr = rsh.stderr.take().expect("stderr");
    let mut said = Vec::new();
    let mut byte = [0u8; 1];
    // It says it lost the controller once its stream is cut.
    while !String::from_utf8_lossy(&said).contains("lost contact with the controller") {
        let n = std::io::Read::read(&mut stderr, &mut byte).expect("stderr read");
        assert!(n > 0, "cadre rsh ended: {}", String::from_utf8_lossy(&said));
        said.push(byte[0]);
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(rsh.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM sent");
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = rsh.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = rsh.kill();
            panic!("cadre rsh outlived SIGTERM without its controller");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(15), "{status:?}");
    c.start();
}

/// The unprivileged local user the security tests attack as (`nobody`), with a home of
/// their own under a temporary directory: the cluster runs as root, the attacker's
/// commands find it as any user would (`CADRE_DATA_DIR`, whose socket is in the run
/// directory beside it: they cannot read the data directory itself).
struct Nobody {
    home: tempfile::TempDir,
}

const NOBODY: u32 = 65534;

impl Nobody {
    /// `None` (the test is skipped, saying why) unless the tests run as root, except under
    /// CI, which runs them as root.
    fn new() -> Option<Nobody> {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs the tests as root: the attacks as `nobody` must run there"
            );
            eprintln!("skipped: the attacks as `nobody` need root to become nobody");
            return None;
        }
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().expect("temporary directory");
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        std::os::unix::fs::chown(home.path(), Some(NOBODY), Some(NOBODY)).expect("chown");
        Some(Nobody { home })
    }

    fn home(&self) -> &Path {
        self.home.path()
    }

    /// `program ARGS` as `nobody`, in their home, against cluster `c`, with nothing of
    /// the test's environment but `PATH` (their `bin` first).
    fn run(&self, c: &Cluster, program: &str, args: &[&str]) -> Output {
        use std::os::unix::process::CommandExt;
        let path = std::env::var("PATH").unwrap_or_default();
        Command::new(program)
            .args(args)
            .env_clear()
            .env(
                "PATH",
                format!("{}:{path}", self.home().join("bin").display()),
            )
            .env("HOME", self.home())
            .env("CADRE_DATA_DIR", c.data())
            .current_dir(self.home())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .expect("a command runs as nobody")
    }
}

/// The controller's data directory holds every job's environment and script, the agent
/// key (root on every node) and the logs: a local user reads none of it, and still
/// reaches the controller through its socket in the run directory.
#[test]
fn a_local_user_reads_nothing_of_the_controller_s_data_directory() {
    let Some(nobody) = Nobody::new() else { return };
    let c = up(1, 0, &[]);
    let id = c.submit(&["--", "true"]);
    c.wait(id);
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(c.data()), 0o700);
    for file in [
        "cadre.db",
        "cadre.db-wal",
        "agent.key",
        "cadre.log",
        "cadre.pid",
    ] {
        assert_eq!(mode(&c.path(file)), 0o600, "{file}");
    }
    assert_eq!(mode(&run_dir_of(c.data())), 0o755);
    for file in ["cadre.db", "cadre.db-wal", "agent.key", "cadre.log"] {
        let path = c.path(file);
        let out = nobody.run(&c, "cat", &[path.to_str().expect("utf-8 path")]);
        assert!(!out.status.success(), "nobody read {file}");
        assert!(
            text(&out.stderr).contains("Permission denied"),
            "{file}: {}",
            text(&out.stderr)
        );
    }
    // The socket stays theirs to use: they see their own jobs (none), not root's.
    let cadre = env!("CARGO_BIN_EXE_cadre");
    let out = nobody.run(&c, cadre, &["jobs", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let jobs: Value = serde_json::from_str(&text(&out.stdout)).expect("JSON");
    assert_eq!(jobs["jobs"], serde_json::json!([]), "{jobs}");
    // The dashboard's queue view over the same socket: root's pending job is not theirs to
    // see, and the rows they may ask for are bounded.
    c.submit(&["--hold", "--", "true"]);
    let get = |path: &str| {
        let script = "import socket, sys\n\
            s = socket.socket(socket.AF_UNIX)\n\
            s.connect(sys.argv[1])\n\
            s.sendall(('GET ' + sys.argv[2] + ' HTTP/1.1\\r\\nHost: cadre\\r\\nConnection: close\\r\\n\\r\\n').encode())\n\
            out = b''\n\
            while True:\n    \
                b = s.recv(65536)\n    \
                if not b: break\n    \
                out += b\n\
            sys.stdout.write(out.decode())\n";
        let socket = c.socket();
        let out = nobody.run(
            &c,
            "python3",
            &["-c", script, socket.to_str().expect("utf-8 path"), path],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let queue = get("/ui/queue");
    assert!(queue.starts_with("HTTP/1.1 200"), "{queue}");
    let (head, body) = queue.split_once("\r\n\r\n").unwrap_or_default();
    let body = match head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        true => cadre_test_support::dechunk(body),
        false => body.to_owned(),
    };
    let body: Value = serde_json::from_str(&body).expect("the queue view as JSON");
    assert_eq!(body["pending_total"], 0, "{body}");
    assert_eq!(body["pending"], serde_json::json!([]), "{body}");
    let too_many = get("/ui/queue?limit=1000000000");
    assert!(too_many.starts_with("HTTP/1.1 400"), "{too_many}");
    assert!(too_many.contains("limit=1000000000"), "{too_many}");
}

/// A job's hosts file lives in a run directory the job's user cannot change: swapping it
/// for a link to a file only root may read, before a step bind-mounts it over
/// `/etc/hosts`, fails, and the step shows the job's names, never the file.
#[test]
fn a_user_cannot_swap_their_job_s_hosts_file_for_a_link_to_a_root_only_file() {
    let Some(nobody) = Nobody::new() else { return };
    let c = up(2, 0, &[]);
    let bin = nobody.home().join("bin");
    c.ok(&["install-aliases", bin.to_str().expect("utf-8 path")]);
    let secret = c.path("secret");
    let marker = format!("root-only-{}", std::process::id());
    std::fs::write(&secret, format!("{marker}\n")).unwrap();
    let out = nobody.home().join("attack.out");
    let script = nobody.home().join("attack.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n#SBATCH -N 1 -o {out}\n\
             h=\"$CADRE_HOSTS_FILE\"\n\
             echo \"dir $(stat -c %U:%a \"$(dirname \"$h\")\") file $(stat -c %U:%a \"$h\")\"\n\
             rm -f \"$h\" 2>/dev/null; ln -sf {secret} \"$h\" 2>/dev/null; echo \"swap=$?\"\n\
             srun cat /etc/hosts\n\
             echo \"srun=$?\"\n",
            out = out.display(),
            secret = secret.display()
        ),
    )
    .unwrap();
    std::os::unix::fs::chown(&script, Some(NOBODY), Some(NOBODY)).unwrap();
    let submitted = nobody.run(&c, "sbatch", &["--parsable", "attack.sh"]);
    assert!(submitted.status.success(), "{}", text(&submitted.stderr));
    let id: u64 = text(&submitted.stdout).trim().parse().expect("a job id");
    c.wait(id);
    let said = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        !said.contains(&marker),
        "the step showed root's file:\n{said}"
    );
    assert!(said.contains("dir root:711 file nobody:600"), "{said}");
    assert!(said.contains("swap=1"), "{said}");
    assert!(
        said.contains("node001") && said.contains("srun=0"),
        "{said}"
    );
}

/// `cadre submit --server http://ADDR --token TOKEN ARGS`, which must succeed: the job id.
fn submit_over_tcp(c: &Cluster, addr: &str, token: &str, args: &[&str]) -> u64 {
    let server = format!("http://{addr}");
    let out = c.run(
        &[
            &[
                "submit",
                "--server",
                &server,
                "--token",
                token,
                "--parsable",
            ][..],
            args,
        ]
        .concat(),
    );
    assert!(
        out.status.success(),
        "submission with a token: {}{}",
        text(&out.stderr),
        c.log()
    );
    text(&out.stdout).trim().parse().expect("a job id")
}

/// Regression (issue 14): a user with a running job posted a step of 4294967295 tasks;
/// the controller sized the step's task list by that count before any check and the
/// allocation aborted it. Now every count of a step is checked against what the job holds
/// (and its time limit against the bound) first: 400, and the controller goes on.
#[test]
fn a_users_step_with_huge_counts_gets_400_and_the_controller_goes_on() {
    let addr = format!("127.0.0.1:{}", free_port());
    let c = up(1, 0, &["--listen", &addr, "--insecure"]);
    let (_, nobody) = token_for(&c, "nobody");
    let id = submit_over_tcp(
        &c,
        &addr,
        &nobody,
        &["-D", "/tmp", "-o", "/dev/null", "--", "sleep", "60"],
    );
    c.wait_for_state(id, "RUNNING");
    let path = format!("/api/v1/jobs/{id}/steps");
    for (field, body) in [
        ("ntasks", r#""ntasks":4294967295"#),
        ("ntasks_per_node", r#""ntasks_per_node":4294967295"#),
        ("CPU(s)", r#""ntasks":1,"cpus_per_task":4294967295"#),
        ("GPU(s)", r#""ntasks":1,"gpus_per_task":4294967295"#),
        ("only 1 node(s)", r#""nodes":4294967295"#),
        ("time_limit", r#""time_limit":18446744073709551615"#),
    ] {
        let body = format!(r#"{{"command":["true"],"work_dir":"/tmp",{body}}}"#);
        let (status, answer) = over_tcp(&addr, "POST", &path, Some(&nobody), Some(&body));
        assert_eq!(status, 400, "{body}: {answer}{}", c.log());
        assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(field), "{body}: {message}");
    }
    // A submission's numbers are bounded too.
    let mut spec = cadre_core::job::JobSpec::simple(
        "nobody",
        "nobody",
        u32::MAX,
        cadre_core::resources::TaskResources {
            cpus: 1,
            mem_mib: u64::MAX,
            ..Default::default()
        },
        cadre_core::time::Dur(u64::MAX),
    );
    spec.name = "huge".into();
    let run = cadre_core::run::RunSpec::command(vec!["true".into()], "/tmp".into());
    let body = serde_json::json!({ "jobs": [{ "spec": spec, "run": run }] }).to_string();
    let (status, answer) = over_tcp(&addr, "POST", "/api/v1/jobs", Some(&nobody), Some(&body));
    assert_eq!(status, 400, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        "jobs[0].spec.groups[0].count = 4294967295 is out of range: at most 1048576 tasks per job"
    );
    // Ids and times beyond what the store keeps are the request's fault, not the store's.
    for path in [
        "/api/v1/jobs?after=18446744073709551615".to_string(),
        "/api/v1/usage?since=18446744073709551615".to_string(),
        "/api/v1/jobs/18446744073709551615".to_string(),
    ] {
        let (status, answer) = over_tcp(&addr, "GET", &path, Some(&nobody), None);
        assert_eq!(status, 400, "{path}: {answer}");
    }
    let (status, answer) = over_tcp(&addr, "GET", "/api/v1/whoami", Some(&nobody), None);
    assert_eq!(status, 200, "the controller still answers: {answer}");
    assert_eq!(answer["user"], "nobody", "{answer}");
    assert_eq!(c.job(id)["state"], "RUNNING");
    c.ok(&["cancel", &id.to_string()]);
}

/// One task of one CPU for a minute, of `user` charging the account of their name.
fn one_cpu_spec(user: &str) -> cadre_core::job::JobSpec {
    cadre_core::job::JobSpec::simple(
        user,
        user,
        1,
        cadre_core::resources::TaskResources {
            cpus: 1,
            ..Default::default()
        },
        cadre_core::time::Dur(60),
    )
}

/// A submission body of one held `true` job of `user` with this nice value.
fn held_job_with_nice(user: &str, nice: i32) -> String {
    let mut spec = one_cpu_spec(user);
    spec.nice = nice;
    spec.hold = true;
    let run = cadre_core::run::RunSpec::command(vec!["true".into()], "/tmp".into());
    serde_json::json!({ "jobs": [{ "spec": spec, "run": run }] }).to_string()
}

/// Regression (issue 14): a user's submission with `nice = -2147483648` was accepted (its
/// priority jumped above every other job's) while `PATCH` refused the same value. Both go
/// through one check now: the user gets PATCH's 403; an administrator may.
#[test]
fn a_users_submission_with_a_negative_nice_is_refused_as_its_update_is() {
    let addr = format!("127.0.0.1:{}", free_port());
    let c = up(1, 0, &["--listen", &addr, "--insecure"]);
    let (_, nobody) = token_for(&c, "nobody");
    let body = held_job_with_nice("nobody", i32::MIN);
    let (status, answer) = over_tcp(&addr, "POST", "/api/v1/jobs", Some(&nobody), Some(&body));
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "forbidden", "{answer}");
    assert_eq!(answer["error"]["reason"], "forbidden_field", "{answer}");
    assert_eq!(answer["error"]["subject"], "nice", "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("negative nice")),
        "{answer}"
    );
    // The same rule, the same answer, on an update of the user's own job.
    let body = held_job_with_nice("nobody", 0);
    let (status, answer) = over_tcp(&addr, "POST", "/api/v1/jobs", Some(&nobody), Some(&body));
    assert_eq!(status, 201, "{answer}");
    let id = answer["job_ids"][0].as_u64().expect("a job id");
    let (status, patched) = over_tcp(
        &addr,
        "PATCH",
        &format!("/api/v1/jobs/{id}"),
        Some(&nobody),
        Some(r#"{"nice":-2147483648}"#),
    );
    assert_eq!(status, 403, "{patched}");
    assert_eq!(patched["error"]["code"], "forbidden", "{patched}");
    assert_eq!(patched["error"]["reason"], "forbidden_field", "{patched}");
    assert_eq!(patched["error"]["subject"], "nice", "{patched}");
    // An administrator (root on the socket) may.
    let (status, answer) = c.api(
        "POST",
        "/api/v1/jobs",
        Some(&held_job_with_nice("nobody", i32::MIN)),
    );
    assert_eq!(status, 201, "{answer}");
}

/// A submission body of held `true` jobs of `user`, tasks `indices` of an array: each with
/// `spec.array` naming `array_job` and with `array_of` (`None`: not given).
fn held_array_tasks(
    user: &str,
    array_job: u64,
    indices: &[u32],
    array_of: Option<usize>,
) -> String {
    let jobs: Vec<Value> = indices
        .iter()
        .map(|&index| {
            let mut spec = one_cpu_spec(user);
            spec.hold = true;
            spec.array = Some(cadre_core::job::ArrayIndex {
                array_job: cadre_core::job::JobId(array_job),
                index,
                max_running: Some(1),
            });
            let run = cadre_core::run::RunSpec::command(vec!["true".into()], "/tmp".into());
            match array_of {
                Some(p) => serde_json::json!({ "spec": spec, "run": run, "array_of": p }),
                None => serde_json::json!({ "spec": spec, "run": run }),
            }
        })
        .collect();
    serde_json::json!({ "jobs": jobs }).to_string()
}

/// Regression (issue 14): a submission whose `spec.array.array_job` named an existing
/// array without `array_of` was taken as it was: bob's job became a task of alice's array
/// (in its `squeue`, `scancel` and dependencies, and counted by its `%N` limit). Array
/// membership is now the controller's to give: 400, and alice's array is unchanged.
#[test]
fn a_user_cannot_make_a_job_a_task_of_another_user_s_array() {
    let addr = format!("127.0.0.1:{}", free_port());
    let c = up(1, 0, &["--listen", &addr, "--insecure"]);
    let (_, alice) = token_for(&c, "alice");
    let (_, bob) = token_for(&c, "bob");
    let body = held_array_tasks("alice", 0, &[0, 1, 2], Some(0));
    let (status, answer) = over_tcp(&addr, "POST", "/api/v1/jobs", Some(&alice), Some(&body));
    assert_eq!(status, 201, "{answer}{}", c.log());
    let ids: Vec<u64> = answer["job_ids"]
        .as_array()
        .expect("job ids")
        .iter()
        .map(|i| i.as_u64().expect("a job id"))
        .collect();
    let array = ids[0];
    // The tasks of each array, as the controller lists them.
    let arrays = || -> BTreeMap<u64, Vec<(u64, String)>> {
        let mut by_array: BTreeMap<u64, Vec<(u64, String)>> = BTreeMap::new();
        for (id, j) in c.jobs() {
            if let Some(a) = j["array"]["array_job"].as_u64() {
                let user = j["user"].as_str().unwrap_or_default().to_owned();
                by_array.entry(a).or_default().push((id, user));
            }
        }
        by_array
    };
    let before = arrays();
    let alices: Vec<(u64, String)> = ids.iter().map(|&i| (i, "alice".to_owned())).collect();
    assert_eq!(before.get(&array), Some(&alices), "{before:?}");
    let jobs_before = c.jobs().len();

    // Bob names alice's array by its id.
    let (status, answer) = over_tcp(
        &addr,
        "POST",
        "/api/v1/jobs",
        Some(&bob),
        Some(&held_array_tasks("bob", array, &[3], None)),
    );
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "jobs[0].spec.array: names array {array} without `array_of`"
        )),
        "{message}"
    );
    // Alice's array is as it was, and bob has no job.
    assert_eq!(arrays(), before);
    assert_eq!(c.jobs().len(), jobs_before);
    // An array of bob's own is his to make.
    let (status, answer) = over_tcp(
        &addr,
        "POST",
        "/api/v1/jobs",
        Some(&bob),
        Some(&held_array_tasks("bob", array, &[0, 1], Some(0))),
    );
    assert_eq!(status, 201, "{answer}");
    let bobs = answer["job_ids"][0].as_u64().expect("a job id");
    assert_ne!(bobs, array);
    assert_eq!(arrays().get(&array), Some(&alices));
    assert_eq!(arrays()[&bobs].len(), 2);
}

/// `GET /metrics` of the controller at `target` through `cadre-client`, with a bearer
/// token or not: the text, which must be a 200's.
fn scrape(target: &Target, token: Option<&str>) -> String {
    let mut client = cadre_client::Client::connect(target, token.map(str::to_owned))
        .unwrap_or_else(|e| panic!("failed to reach the controller at {target}: {e}"));
    let (status, body) = client
        .send_raw(hyper::Method::GET, "/metrics", None)
        .unwrap_or_else(|e| panic!("GET /metrics of the controller at {target} failed: {e}"));
    let body = text(&body);
    assert_eq!(status.as_u16(), 200, "{body}");
    body
}

/// One request to the API over TCP at `addr` through `cadre-client`, with `token` if any:
/// the status and the JSON body, whatever the status.
fn over_tcp(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, Value) {
    api(&Target::Tcp(addr.to_owned()), token, method, path, body)
}

/// Regression (issue 14): `/metrics` over TCP told anyone which user and job held each GPU
/// (`cadre_gpu_job_info`). That series is for authenticated scrapers now; an anonymous
/// scrape gets every other series.
#[test]
fn only_an_authenticated_scrape_sees_which_job_holds_each_gpu() {
    let addr = format!("127.0.0.1:{}", free_port());
    let c = up(1, 2, &["--listen", &addr, "--insecure"]);
    let id = c.submit(&["--gpus-per-task", "1", "--", "sleep", "60"]);
    c.wait_for_state(id, "RUNNING");
    let info = format!("job=\"{id}\"");
    let tcp = Target::Tcp(addr.clone());
    let anonymous = scrape(&tcp, None);
    assert!(
        anonymous
            .lines()
            .any(|l| l == "cadre_gpus_allocated{partition=\"gpu\"} 1.0"),
        "{anonymous}"
    );
    assert!(
        !anonymous.contains("cadre_gpu_job_info") && !anonymous.contains(&info),
        "an anonymous scrape shows who holds the GPUs:\n{anonymous}"
    );
    let (_, token) = token_for(&c, "nobody");
    let authenticated = scrape(&tcp, Some(&token));
    assert!(
        authenticated
            .lines()
            .any(|l| l.starts_with("cadre_gpu_job_info{") && l.contains(&info)),
        "{authenticated}"
    );
    let forged = scrape(&tcp, Some("not-a-token"));
    assert!(!forged.contains("cadre_gpu_job_info"), "{forged}");
    let local = scrape(&c.target(), None);
    assert!(local.contains(&info), "{local}");
    c.ok(&["cancel", &id.to_string()]);
}

/// Whether the controller closed `stream` (a read ends, or the connection is reset) before
/// the hang guard: what it may have answered before closing is read and dropped.
fn closed_by_server(stream: &mut std::net::TcpStream) -> bool {
    stream
        .set_read_timeout(Some(DEADLINE))
        .expect("a read timeout");
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(e) => panic!("read failed: {e}"),
        }
    }
}

/// `GET /api/v1/whoami` on a fresh TCP connection: whether it was answered 200.
fn whoami_answers(addr: &str, token: &str) -> bool {
    cadre_client::Client::connect(&Target::Tcp(addr.to_owned()), Some(token.to_owned()))
        .and_then(|mut client| client.send_raw(hyper::Method::GET, "/whoami", None))
        .is_ok_and(|(status, _)| status == hyper::StatusCode::OK)
}

/// Regression (issue 14): the TCP listener had no cap on connections (3,000 half-open
/// ones stayed open). A peer now holds at most `--max-connections-per-peer` at once: the
/// extra ones are closed as they are accepted, the others keep working, and the slots come
/// back when they close.
#[test]
fn connections_beyond_a_peers_cap_are_closed_at_once() {
    let addr = format!("127.0.0.1:{}", free_port());
    let c = up(
        1,
        0,
        &[
            "--listen",
            &addr,
            "--insecure",
            "--max-connections-per-peer",
            "4",
        ],
    );
    let (_, nobody) = token_for(&c, "nobody");
    let connect = || std::net::TcpStream::connect(&addr).expect("the controller listens on TCP");
    let mut held: Vec<std::net::TcpStream> = (0..4).map(|_| connect()).collect();
    for _ in 0..2 {
        assert!(
            closed_by_server(&mut connect()),
            "a connection beyond the cap was kept{}",
            c.log()
        );
    }
    let (status, body) = http(
        held.pop().expect("a held connection"),
        "GET",
        "/api/v1/whoami",
        Some(&nobody),
        None,
    );
    assert_eq!(status, 200, "a connection within the cap works: {body}");
    drop(held);
    wait_until("a new connection is served once the others closed", || {
        whoami_answers(&addr, &nobody)
    });
}

/// Regression (issue 14): a connection that sent half a request head, or nothing, was
/// kept forever. Now a head must be complete within `--header-timeout` of its first byte,
/// and a connection with no request in flight is closed after `--idle-timeout`; a request
/// being served (a step's output stream) is never cut, and agents' WebSockets stay up.
#[test]
fn connections_that_wait_too_long_are_closed_and_streams_are_not() {
    let addr = format!("127.0.0.1:{}", free_port());
    let c = up(
        1,
        0,
        &[
            "--listen",
            &addr,
            "--insecure",
            "--header-timeout",
            "1",
            "--idle-timeout",
            "2",
        ],
    );
    let (_, nobody) = token_for(&c, "nobody");
    let connect = || std::net::TcpStream::connect(&addr).expect("the controller listens on TCP");
    let mut half = connect();
    half.write_all(b"GET /api/v1/whoami HTTP/1.1\r\nHost: cad")
        .expect("half a head sent");
    assert!(
        closed_by_server(&mut half),
        "half a head was waited for{}",
        c.log()
    );
    let mut silent = connect();
    assert!(
        closed_by_server(&mut silent),
        "a silent connection was kept{}",
        c.log()
    );
    // A step whose output stream outlasts both timeouts, on the socket (whose
    // connections have the same timeouts), through the agent's WebSocket.
    let id = c.submit(&["--", "sleep", "60"]);
    c.wait_for_state(id, "RUNNING");
    let body: Value = serde_json::from_str(
        r#"{"command":["sh","-c","sleep 4; echo survived"],"work_dir":"/tmp"}"#,
    )
    .expect("a step request");
    let target = c.target();
    let mut raw = String::new();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(async {
            // The hang guard, as the socket's read timeout was.
            tokio::time::timeout(DEADLINE, async {
                let mut conn = cadre_client::Connection::open(&target, None).await?;
                conn.stream_lines(&format!("/jobs/{id}/steps"), &body, |line| {
                    raw.push_str(&text(line));
                    raw.push('\n');
                    Ok::<(), cadre_client::BoxError>(())
                })
                .await
            })
            .await
            .unwrap_or_else(|_| panic!("the step's stream hung past {DEADLINE:?}"))
        })
        .unwrap_or_else(|e| panic!("the step's stream on {target}: {e}: {raw}{}", c.log()));
    assert!(
        raw.contains("survived") && raw.contains(r#""type":"ended""#),
        "the step's stream was cut: {raw}{}",
        c.log()
    );
    assert!(
        whoami_answers(&addr, &nobody),
        "a normal request{}",
        c.log()
    );
    c.ok(&["cancel", &id.to_string()]);
}

/// The objects that bound a namespace (ResourceQuota, LimitRange, PriorityClass,
/// Namespace) are the administrator's: a local user can neither apply nor delete them, nor
/// go around a quota's object counts by applying into its namespace.
#[test]
fn a_user_can_neither_change_a_namespace_s_quota_nor_apply_past_it() {
    let Some(nobody) = Nobody::new() else { return };
    let c = up(1, 0, &[]);
    let cadre = env!("CARGO_BIN_EXE_cadre");
    let quota = "apiVersion: v1
kind: ResourceQuota
metadata: {name: counts, namespace: team}
spec: {hard: {count/jobs.batch: 0}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: urgent}
value: 1000000
";
    let file = |name: &str, text: &str| {
        let path = nobody.home().join(name);
        std::fs::write(&path, text).unwrap();
        std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
        path.display().to_string()
    };
    // Their own quota and class, raised over root's: refused, nothing applied.
    let mine = file(
        "mine.yaml",
        &quota.replace("count/jobs.batch: 0", "count/jobs.batch: 99"),
    );
    let out = nobody.run(&c, cadre, &["apply", "-f", &mine]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("only an administrator may apply or delete queue objects"),
        "{}",
        text(&out.stderr)
    );
    assert!(c.ok(&["get", "quota", "-A"]).is_empty());
    // Root's: applied; the user may not delete them.
    let root = c.path("quota.yaml");
    std::fs::write(&root, quota).unwrap();
    c.ok(&["apply", "-f", root.to_str().unwrap()]);
    for (kind, name) in [("resourcequota", "counts"), ("priorityclass", "urgent")] {
        let out = nobody.run(&c, cadre, &["delete", kind, name, "-n", "team"]);
        assert_eq!(out.status.code(), Some(1), "{kind} {name}");
        assert!(
            text(&out.stderr).contains("only an administrator"),
            "{}",
            text(&out.stderr)
        );
    }
    // A workload of theirs in the namespace is held to its counts.
    let job = "apiVersion: batch/v1
kind: Job
metadata: {name: sneak, namespace: team}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox, command: ['true']}]
";
    let out = nobody.run(&c, cadre, &["apply", "-f", &file("job.yaml", job)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(
            "exceeded quota: counts, requested: count/jobs.batch=1, used: count/jobs.batch=0, \
             limited: count/jobs.batch=0"
        ),
        "{}",
        text(&out.stderr)
    );
    assert!(c.ok(&["get", "quota", "-n", "team"]).contains("counts"));
}

/// A user's PersistentVolumeClaim is theirs: they apply it (an owner they name themselves is
/// replaced by who they are), their job gets its directory (theirs alone); they may neither
/// apply a StorageClass nor mount, change or delete root's claim.
#[test]
fn a_user_s_claim_is_theirs_alone_and_root_s_is_not_theirs_to_take() {
    let Some(nobody) = Nobody::new() else { return };
    let c = up(1, 0, &[]);
    let cadre = env!("CARGO_BIN_EXE_cadre");
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let class = top.path().join("claims");
    std::fs::create_dir(&class).unwrap();
    std::fs::set_permissions(&class, std::fs::Permissions::from_mode(0o755)).unwrap();
    let storage = format!(
        "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: shared
  annotations: {{storageclass.kubernetes.io/is-default-class: \"true\"}}
provisioner: cadre.io/shared-directory
parameters: {{path: {}}}
",
        class.display()
    );
    let claim = |name: &str| {
        format!(
            "apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {name}
  namespace: team
  annotations: {{cadre.io/owner: root}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
"
        )
    };
    let file = |name: &str, text: &str| {
        let path = nobody.home().join(name);
        std::fs::write(&path, text).unwrap();
        std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
        path.display().to_string()
    };
    // A class of their own, over a directory of their choosing: refused.
    let out = nobody.run(&c, cadre, &["apply", "-f", &file("sc.yaml", &storage)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("only an administrator may apply or delete queue objects"),
        "{}",
        text(&out.stderr)
    );
    let root = c.path("storage.yaml");
    std::fs::write(&root, format!("{storage}---\n{}", claim("roots"))).unwrap();
    c.ok(&["apply", "-f", root.to_str().unwrap()]);
    // Their own claim, naming root as its owner: it is theirs.
    let out = nobody.run(
        &c,
        cadre,
        &["apply", "-f", &file("mine.yaml", &claim("mine"))],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = c.ok(&["get", "pvc", "-n", "team"]);
    let owner = |name: &str| {
        listed
            .lines()
            .find(|l| l.starts_with(name))
            // OWNER, before AGE.
            .and_then(|l| l.split_whitespace().rev().nth(1))
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(
        (owner("mine"), owner("roots")),
        ("nobody".into(), "root".into()),
        "{listed}"
    );
    // Root's claim: not theirs to change, delete or mount.
    let changed = claim("roots").replace("1Gi", "2Gi");
    let out = nobody.run(&c, cadre, &["apply", "-f", &file("roots.yaml", &changed)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("belongs to `root`"),
        "{}",
        text(&out.stderr)
    );
    let out = nobody.run(&c, cadre, &["delete", "pvc", "roots", "-n", "team"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("belongs to `root`"),
        "{}",
        text(&out.stderr)
    );
    let job = |claim: &str| {
        format!(
            "apiVersion: batch/v1
kind: Job
metadata: {{name: use-{claim}, namespace: team}}
spec:
  template:
    spec:
      restartPolicy: Never
      volumes: [{{name: d, persistentVolumeClaim: {{claimName: {claim}}}}}]
      containers:
      - name: c
        image: busybox
        command: [sh, -c, 'id -u > /mnt/who; stat -c %a /mnt']
        volumeMounts: [{{name: d, mountPath: /mnt}}]
"
        )
    };
    // Root's Secret: its value is shown to no one, and neither replaced nor used by them.
    let value = "r00t-0nly-v4lue";
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: roots-secret, namespace: team}}\nstringData: {{token: {value}}}\n"
    );
    let root_secret = c.path("secret.yaml");
    std::fs::write(&root_secret, &secret).unwrap();
    c.ok(&["apply", "-f", root_secret.to_str().unwrap()]);
    let shown = nobody.run(&c, cadre, &["get", "secrets", "-n", "team", "-o", "yaml"]);
    assert!(
        text(&shown.stdout).contains("roots-secret"),
        "{}",
        text(&shown.stderr)
    );
    assert!(
        !text(&shown.stdout).contains(value),
        "{}",
        text(&shown.stdout)
    );
    let out = nobody.run(
        &c,
        cadre,
        &[
            "apply",
            "-f",
            &file("secret.yaml", &secret.replace(value, "mine")),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("belongs to `root`"),
        "{}",
        text(&out.stderr)
    );
    let steal = job("mine").replace(
        "volumes: [{name: d, persistentVolumeClaim: {claimName: mine}}]",
        "volumes: [{name: d, secret: {secretName: roots-secret}}]",
    );
    let out = nobody.run(&c, cadre, &["apply", "-f", &file("steal.yaml", &steal)]);
    assert_eq!(out.status.code(), Some(1));
    // Their apply sees only their own objects (the controller refuses another's Secret
    // to a job sent without it: `claims::tests`).
    assert!(
        text(&out.stderr).contains("secret/roots-secret is not applied in namespace team"),
        "{}",
        text(&out.stderr)
    );
    // A path of the node: an administrator's only.
    let host = job("mine").replace(
        "persistentVolumeClaim: {claimName: mine}",
        "hostPath: {path: /root}",
    );
    let out = nobody.run(&c, cadre, &["apply", "-f", &file("host.yaml", &host)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(
            "hostPath volume `/root`: only an administrator's workloads mount paths of the node"
        ),
        "{}",
        text(&out.stderr)
    );
    let out = nobody.run(
        &c,
        cadre,
        &["apply", "-f", &file("take.yaml", &job("roots"))],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(
            "persistentvolumeclaim \"roots\" in namespace team belongs to `root`: a job of \
             `nobody` may not mount it"
        ),
        "{}",
        text(&out.stderr)
    );
    // Their own: their job writes in a directory that is theirs alone.
    let out = nobody.run(&c, cadre, &["apply", "-f", &file("use.yaml", &job("mine"))]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id: u64 = text(&out.stdout)
        .rsplit_once("(job ")
        .and_then(|(_, r)| r.trim_end().trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no job in {}", text(&out.stdout)));
    assert_eq!(c.wait(id), "COMPLETED");
    let dirs: Vec<PathBuf> = std::fs::read_dir(&class)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let theirs = dirs
        .iter()
        .find(|d| d.join("who").exists())
        .unwrap_or_else(|| panic!("no claim directory was written: {dirs:?}"));
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(theirs).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (NOBODY, 0o700));
    assert_eq!(
        std::fs::read_to_string(theirs.join("who")).unwrap(),
        "65534\n"
    );
    let out = std::fs::read_to_string(nobody.home().join(format!("use-mine-{id}-0.out"))).unwrap();
    assert_eq!(out, "700\n");
}

/// As `nobody`: a pod's `runAsUser: 0` does not make them root (the task runs as them), and
/// `runAsGroup` of a group they are not in holds the job, saying so.
#[test]
fn a_user_s_security_context_makes_them_neither_root_nor_another_group() {
    let Some(nobody) = Nobody::new() else { return };
    let c = up(1, 0, &[]);
    let cadre = env!("CARGO_BIN_EXE_cadre");
    let job = |name: &str, context: &str| {
        format!(
            "apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
  template:
    spec:
      restartPolicy: Never
      securityContext: {context}
      containers:
      - name: c
        image: busybox
        command: [sh, -c, 'echo $(id -u) $(id -g)']
"
        )
    };
    let apply = |name: &str, context: &str| {
        let path = nobody.home().join(format!("{name}.yaml"));
        std::fs::write(&path, job(name, context)).unwrap();
        std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
        let out = nobody.run(&c, cadre, &["apply", "-f", path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
            .rsplit_once("(job ")
            .and_then(|(_, r)| r.trim_end().trim_end_matches(')').parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no job in {}", text(&out.stdout)))
    };
    let id = apply("asroot", "{runAsUser: 0, runAsNonRoot: true}");
    assert_eq!(c.wait(id), "COMPLETED");
    let out = std::fs::read_to_string(nobody.home().join(format!("asroot-{id}-0.out"))).unwrap();
    assert_eq!(out, "65534 65534\n");
    let id = apply("wheel", "{runAsGroup: 0}");
    wait_until("the job is held for its group", || {
        c.ok(&["explain", &id.to_string()])
            .contains("securityContext.runAsGroup: `nobody` is not in group 0 on this node")
    });
}
