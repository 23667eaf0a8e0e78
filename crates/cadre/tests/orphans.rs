//! No process of a job outlives it: each task runs in a cgroup v2 of its own (see
//! `cadre_agent::cgroup`), so that a daemon that left the task's process group with
//! `setsid` and ignores SIGTERM (a data loader's worker, `orted`) is killed with its job,
//! the job ends only once nothing of it runs; an agent killed with SIGKILL and started
//! again adopts the tasks its previous life left (their keepers kept their exit status),
//! and one that is not started again has its tasks killed by their keepers when its lease
//! ends, before the controller requeues their job.
//!
//! These need root and a writable cgroup v2 (the unified hierarchy): they say so and are
//! skipped elsewhere, and fail under CI.

use cadre_test_support::{Cluster, processes_with, read_pid, skip_unless_ci, wait_until};
use std::process::{Command, Stdio};

/// A `sleep` argument no other test or process uses.
fn marker(n: u32) -> String {
    format!("{}.{}", 86_000 + n, std::process::id())
}

/// A cluster of one node whose agent runs tasks in cgroups; `None` (skipped) where it
/// cannot.
fn cluster() -> Option<Cluster> {
    if !nix::unistd::geteuid().is_root() {
        return skip_unless_ci("the cgroup tests", "they need root");
    }
    let c = Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
        .nodes(1)
        .args(&["--node-lease", "30"])
        .start();
    let log = std::fs::read_to_string(c.path("agents/node001.log")).unwrap_or_default();
    if !log.contains("each task runs in a cgroup of its own") {
        return skip_unless_ci(
            "the cgroup tests",
            &format!("the agent has no writable cgroup v2 here:\n{log}"),
        );
    }
    Some(c)
}

fn submit(c: &Cluster, script: &str) -> u64 {
    let out = c.ok(&["submit", "--parsable", "--", "sh", "-c", script]);
    out.trim().parse().expect("a job id")
}

fn job(c: &Cluster, id: u64) -> serde_json::Value {
    c.api("GET", &format!("/jobs/{id}"), None).1
}

fn state(c: &Cluster, id: u64) -> String {
    job(c, id)["state"].as_str().unwrap_or_default().to_string()
}

/// A daemon of the task, in a session of its own and deaf to SIGTERM, as `sh -c` words.
fn daemon(marker: &str) -> String {
    format!("setsid sh -c 'trap \"\" TERM; exec sleep {marker}' </dev/null >/dev/null 2>&1 &")
}

#[test]
fn a_daemon_that_left_its_task_and_ignores_sigterm_is_gone_once_its_job_is_cancelled() {
    let Some(c) = cluster() else { return };
    let m = marker(1);
    let id = submit(&c, &format!("{} exec sleep 3600", daemon(&m)));
    wait_until("the daemon runs", || processes_with(&m).len() == 1);
    c.ok(&["cancel", &id.to_string()]);
    wait_until("the job ends", || state(&c, id) == "CANCELLED");
    // Already gone when the job is seen ended: its GPUs are freed only after its processes.
    assert_eq!(
        processes_with(&m),
        Vec::<i32>::new(),
        "the daemon outlived its job"
    );
}

#[test]
fn a_daemon_left_behind_by_a_task_that_completed_is_gone_once_its_job_has_ended() {
    let Some(c) = cluster() else { return };
    let m = marker(2);
    // The task's own process ends at once, leaving its daemon.
    let id = submit(&c, &format!("{} echo started", daemon(&m)));
    wait_until("the job ends", || state(&c, id) == "COMPLETED");
    assert_eq!(
        processes_with(&m),
        Vec::<i32>::new(),
        "the daemon outlived its job"
    );
}

/// The agent of node001's pid and command line, then kills it with SIGKILL and waits
/// until it is gone (its tasks run on).
fn kill_agent(c: &Cluster) -> Vec<String> {
    let agent = read_pid(&c.path("agents/node001.pid"));
    let argv: Vec<String> = std::fs::read(format!("/proc/{agent}/cmdline"))
        .expect("the agent's command line")
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("the agent is killed");
    wait_until("the agent is gone", || {
        !std::path::Path::new(&format!("/proc/{agent}")).exists()
            || std::fs::read_to_string(format!("/proc/{agent}/stat"))
                .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
    });
    argv
}

/// The same agent again, as `cadre up` started it (`argv`), its log appended to.
fn restart_agent(c: &Cluster, argv: &[String]) -> StopOnDrop {
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(c.path("agents/node001.log"))
        .expect("the agent's log");
    StopOnDrop(
        Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("the agent starts again"),
    )
}

#[test]
fn a_killed_agent_started_again_adopts_its_running_tasks_and_their_end_and_leaves_nothing_behind() {
    let Some(c) = cluster() else { return };
    let m = marker(3);
    let dir = tempfile::tempdir().expect("a directory");
    let d = dir.path().display();
    // A task with a daemon of its own, which waits for `go` and then fails with 3.
    let id = submit(
        &c,
        &format!(
            "{} touch {d}/started; while [ ! -e {d}/go ]; do sleep 0.1; done; exit 3",
            daemon(&m)
        ),
    );
    wait_until("the task runs", || {
        dir.path().join("started").exists() && processes_with(&m).len() == 1
    });
    let argv = kill_agent(&c);
    assert_eq!(processes_with(&m).len(), 1, "the task died with its agent");
    let mut again = restart_agent(&c, &argv);
    wait_until("the agent adopts the run", || {
        std::fs::read_to_string(c.path("agents/node001.log"))
            .is_ok_and(|l| l.contains("adopted the run's tasks"))
    });
    // The task ends only now, under the new agent: its exit status reaches it through
    // the task's keeper.
    std::fs::write(dir.path().join("go"), "").expect("go");
    wait_until("the job ends", || state(&c, id) == "FAILED");
    let j = job(&c, id);
    assert_eq!(j["exit_code"], 3, "{j}");
    assert_eq!(j["requeues"], 0, "the job was requeued, not adopted: {j}");
    assert_eq!(
        processes_with(&m),
        Vec::<i32>::new(),
        "the task's daemon outlived its job"
    );
    // The next job runs as usual under the new life.
    let next = submit(&c, "exit 0");
    wait_until("the next job ends", || state(&c, next) == "COMPLETED");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(again.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    wait_until("the agent stops", || {
        again.0.try_wait().is_ok_and(|s| s.is_some())
    });
}

#[test]
fn a_killed_agent_s_tasks_are_killed_by_their_keepers_at_its_lease_s_end_before_their_job_is_requeued()
 {
    if !nix::unistd::geteuid().is_root() {
        skip_unless_ci::<()>("the cgroup tests", "they need root");
        return;
    }
    let c = Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
        .nodes(1)
        .args(&["--node-timeout", "6"])
        .start();
    let (m, d) = (marker(5), marker(6));
    let id = submit(&c, &format!("{} exec sleep {m}", daemon(&d)));
    wait_until("the task runs", || {
        processes_with(&m).len() == 1 && processes_with(&d).len() == 1
    });
    kill_agent(&c);
    // Nobody renews the lease: the keepers kill the task and its daemon at its end, before
    // the controller declares the node lost and requeues the job.
    cadre_test_support::wait_until_or(
        "the job is requeued",
        || {
            let j = job(&c, id);
            let requeued = j["requeues"].as_u64().unwrap_or(0) >= 1 || j["state"] != "RUNNING";
            let left = [processes_with(&m), processes_with(&d)].concat();
            assert!(
                !requeued || left.is_empty(),
                "processes {left:?} of the job run on after it was requeued: {j}"
            );
            requeued
        },
        || {
            format!(
                "\njob: {}\nprocesses: {:?}\nnodes: {}\nagent's log:\n{}\ncontroller's log:\n{}",
                job(&c, id),
                [processes_with(&m), processes_with(&d)].concat(),
                c.api("GET", "/nodes", None).1,
                std::fs::read_to_string(c.path("agents/node001.log")).unwrap_or_default(),
                c.log()
            )
        },
    );
}

#[test]
fn a_task_prolog_from_the_controller_sets_the_task_s_variables_and_leaves_no_process_behind() {
    if !nix::unistd::geteuid().is_root() {
        skip_unless_ci::<()>("the cgroup tests", "they need root");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let files = tempfile::tempdir().expect("a directory");
    let m = marker(7);
    let prolog = files.path().join("task-prolog");
    std::fs::write(
        &prolog,
        format!(
            "#!/bin/sh\nsetsid sh -c 'exec sleep {m}' </dev/null >/dev/null 2>&1 &\n\
             echo export FROM_TASK_PROLOG=yes\n"
        ),
    )
    .expect("the task prolog");
    std::fs::set_permissions(&prolog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let c = Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
        .nodes(1)
        .args(&["--agent-task-prolog", &prolog.display().to_string()])
        .start();
    let out = files.path().join("out");
    let id = submit(&c, &format!("echo $FROM_TASK_PROLOG > {}", out.display()));
    wait_until("the job ends", || state(&c, id) == "COMPLETED");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "yes\n");
    // What the task prolog left in its cgroup went with it.
    assert_eq!(processes_with(&m), Vec::<i32>::new());
}

/// The restarted agent, killed if the test ends before it stops it.
struct StopOnDrop(std::process::Child);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A job of an unprivileged user (`nobody`) tries to leave its cgroup, to make cgroups of
/// its own under it, to rewrite the record that tells the agent's next start what to
/// kill, to kill or signal its keeper, and to rewrite the lease, its status file or a run
/// record: each is refused, and the job ran in the cgroup the agent made for it.
#[test]
fn an_unprivileged_job_cannot_leave_its_cgroup_nor_rewrite_what_the_agent_kills() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let Some(c) = cluster() else { return };
    let home = tempfile::tempdir().expect("a directory");
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(home.path(), Some(65534), Some(65534)).unwrap();
    let agent_dir = c.run_dir().join("nodes/node001");
    let record = agent_dir.join("cgroup");
    let before = std::fs::read_to_string(&record).expect("the agent's record");
    let attack = format!(
        "cg=$(sed -n 's/^0:://p' /proc/self/cgroup); echo \"in $cg\"; \
         echo $$ > /sys/fs/cgroup/unified/cgroup.procs 2>/dev/null && echo ESCAPED; \
         mkdir \"/sys/fs/cgroup/unified$cg/mine\" 2>/dev/null && echo MADE; \
         echo /sys/fs/cgroup/unified > {} 2>/dev/null && echo REWROTE; \
         ln -s /etc/shadow {}/lock.new 2>/dev/null && echo LINKED; \
         kill -KILL $PPID 2>/dev/null && echo KEEPER_KILLED; \
         kill -TERM $PPID 2>/dev/null && echo KEEPER_SIGNALLED; \
         echo 0 > {d}/lease 2>/dev/null && echo LEASE; \
         echo x > {d}/tasks/job1.0.task0 2>/dev/null && echo STATUS; \
         ls {d}/tasks {d}/runs >/dev/null 2>&1 && echo LISTED; \
         echo '{{}}' > {d}/runs/job1.0.json 2>/dev/null && echo RECORD; true",
        record.display(),
        agent_dir.display(),
        d = agent_dir.display()
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cadre"))
        .args([
            "submit",
            "--parsable",
            "-o",
            "attack.out",
            "--",
            "sh",
            "-c",
            &attack,
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("CADRE_DATA_DIR", c.data())
        .current_dir(home.path())
        .uid(65534)
        .gid(65534)
        .output()
        .expect("cadre submit runs as nobody");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a job id");
    wait_until("the job ends", || state(&c, id) == "COMPLETED");
    let said = std::fs::read_to_string(home.path().join("attack.out")).expect("its output");
    let dir = before.trim().trim_start_matches("/sys/fs/cgroup/unified");
    assert!(
        said.lines()
            .any(|l| l == format!("in {dir}/job{id}.0.task0")),
        "{said}"
    );
    // Nor may it touch its keeper (root's), the lease its keeper enforces, its status
    // file, or the records a restarted agent adopts from: it completed as itself.
    for marker in [
        "ESCAPED",
        "MADE",
        "REWROTE",
        "LINKED",
        "KEEPER_KILLED",
        "KEEPER_SIGNALLED",
        "LEASE",
        "STATUS",
        "LISTED",
        "RECORD",
    ] {
        assert!(!said.contains(marker), "{marker}: {said}");
    }
    assert_eq!(std::fs::read_to_string(&record).unwrap(), before);
}
