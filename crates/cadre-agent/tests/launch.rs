//! Launching and supervising real processes (`/bin/sh -c ...`) as the agent would.

use cadre_agent::gang::{self, launch_gang};
use cadre_agent::jobenv::{JobLaunch, LocalNode, OpenMode};
use cadre_agent::keeper::{Keepers, KeptEnd, LeaseFile};
use cadre_agent::launch::{LaunchError, RunAs, launch_task};
use cadre_agent::rundir::BindSource;
use cadre_agent::supervise::{PreEndSignal, SignalTarget};
use cadre_core::alloc::{Allocation, TaskAlloc};
use cadre_core::cluster::{NodeId, NodeShape};
use cadre_core::job::{JobId, JobSpec, JobState};
use cadre_core::resources::TaskResources;
use cadre_core::time::Dur;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{is_root, root_or_skip, skip_unless_ci};

/// How long a test waits for a task before it gives up: a hang guard, not a measure.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// `f()`, run on a thread of its own so that a task that never ends fails the test ("gave
/// up waiting for ...") instead of hanging it. Nothing is asserted of the time it takes.
fn without_hanging<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(HANG_GUARD) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("gave up waiting for {what}"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => panic!("{what}: the worker ended without an answer"),
        },
    }
}

/// The CPUs this test process may use: tasks can only be pinned within them.
fn allowed_cpus() -> Vec<u32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    let mut cpus = Vec::new();
    for part in line.split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().unwrap()..=b.parse().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

fn node() -> LocalNode {
    let cpus = allowed_cpus();
    LocalNode {
        id: NodeId(1),
        name: "node002".into(),
        // 4 emulated GPUs over 1 domain; cores are the CPUs this test may use.
        shape: NodeShape::uniform("test", cpus.len() as u32, 1024, 4, "emulated", 0, 1),
        os_cpus: cpus,
        cgroup_parent: None,
        kill_timeout: cadre_agent::supervise::DEFAULT_KILL_TIMEOUT,
        // Every task here has its keeper, as under a real agent, with no lease (nothing
        // is fenced) unless a test publishes one.
        keepers: Some(keepers()),
        task_scripts: Default::default(),
    }
}

/// Keepers whose status files and lease live in a directory of their own, kept (tasks may
/// outlive a test's scope) under the build's temporary directory (`target/tmp`), which
/// goes with the build, rather than in the system's, where 26 were left at every run.
fn keepers() -> Keepers {
    let dir = tempfile::Builder::new()
        .prefix("keepers")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
        .keep();
    let lease = Arc::new(LeaseFile::open(&dir).unwrap());
    Keepers::new(&dir, lease)
}

fn task(rank: u32, node: u32, cores: Vec<u32>, gpus: Vec<u32>) -> TaskAlloc {
    TaskAlloc {
        group: 0,
        rank,
        node: NodeId(node),
        cores,
        gpus,
        gpu_milli_each: 1000,
        nics: vec![],
        mem_mib: 0,
        named: vec![],
    }
}

/// A job of `user` running `script` under `sh -c`, its tasks on node002 (and node001).
fn job(dir: &Path, user: &str, script: &str, tasks: Vec<TaskAlloc>) -> JobLaunch {
    let mut spec = JobSpec::simple(user, "physics", 1, TaskResources::default(), Dur(0));
    spec.name = "train".into();
    let names = [(0, "node001"), (1, "node002")]
        .into_iter()
        .map(|(i, n)| (NodeId(i), n.to_string()))
        .collect::<BTreeMap<_, _>>();
    let mut j = JobLaunch::new(
        JobId(77),
        spec,
        Allocation {
            tasks,
            exclusive: false,
        },
        names,
        vec!["/bin/sh".into(), "-c".into(), script.into()],
        dir.to_path_buf(),
    );
    j.partition = "gpu".into();
    j.submit_env = vec![
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("FROM_SUBMITTER".into(), "yes".into()),
        ("CUDA_VISIBLE_DEVICES".into(), "0,1,2,3".into()),
    ];
    j
}

fn me() -> RunAs {
    RunAs::current().unwrap()
}

fn one_task(gpus: Vec<u32>) -> Vec<TaskAlloc> {
    vec![task(0, 1, vec![0], gpus)]
}

fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_task_sees_the_slurm_environment_and_exactly_its_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let me = me();
    // Rank 1 of 3 on node002 (node001 holds rank 0): procid 1, localid 0, nodeid 1.
    let tasks = vec![
        task(0, 0, vec![0], vec![]),
        task(1, 1, vec![0], vec![1, 3]),
        task(2, 1, vec![0], vec![2]),
    ];
    let mut j = job(dir.path(), &me.name, "env", tasks);
    j.stdout = Some("%x-%j-%t.out".into());
    let mut t = launch_task(&j, &node(), 1, &me).unwrap();
    let o = t.wait().unwrap();
    assert_eq!(o.state, JobState::Completed);
    assert_eq!(o.slurm_exit_code(), "0:0");
    let out = dir.path().join("train-77-1.out");
    assert_eq!(t.files().stdout, out);
    let env = parse_env(&std::fs::read_to_string(&out).unwrap());
    let get = |k: &str| env.get(k).map(String::as_str);
    assert_eq!(get("SLURM_JOB_ID"), Some("77"));
    assert_eq!(get("SLURM_JOB_NAME"), Some("train"));
    assert_eq!(get("SLURM_JOB_NODELIST"), Some("node[001-002]"));
    assert_eq!(get("SLURM_JOB_NUM_NODES"), Some("2"));
    assert_eq!(get("SLURM_NTASKS"), Some("3"));
    assert_eq!(get("SLURM_TASKS_PER_NODE"), Some("1,2"));
    assert_eq!(get("SLURM_PROCID"), Some("1"));
    assert_eq!(get("SLURM_LOCALID"), Some("0"));
    assert_eq!(get("SLURM_NODEID"), Some("1"));
    assert_eq!(get("SLURM_CPUS_PER_TASK"), Some("1"));
    assert_eq!(get("SLURM_JOB_PARTITION"), Some("gpu"));
    assert_eq!(get("SLURM_JOB_ACCOUNT"), Some("physics"));
    assert_eq!(get("SLURM_JOB_USER"), Some(me.name.as_str()));
    assert_eq!(get("SLURMD_NODENAME"), Some("node002"));
    assert_eq!(get("SLURM_GPUS_ON_NODE"), Some("3"));
    assert_eq!(get("SLURM_JOB_GPUS"), Some("1,2,3"));
    assert_eq!(get("CUDA_VISIBLE_DEVICES"), Some("1,3"));
    assert_eq!(get("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
    assert_eq!(get("FROM_SUBMITTER"), Some("yes"));
    assert_eq!(get("PWD"), Some(dir.path().to_str().unwrap()));
}

#[test]
fn a_task_is_pinned_to_its_cores() {
    let dir = tempfile::tempdir().unwrap();
    let cpus = allowed_cpus();
    let me = me();
    let last = cpus.len() as u32 - 1;
    let j = job(
        dir.path(),
        &me.name,
        "grep Cpus_allowed_list /proc/self/status",
        vec![task(0, 1, vec![last], vec![])],
    );
    let mut t = launch_task(&j, &node(), 0, &me).unwrap();
    assert_eq!(t.wait().unwrap().state, JobState::Completed);
    let text = std::fs::read_to_string(dir.path().join("slurm-77.out")).unwrap();
    let list = text.split_once(':').unwrap().1.trim();
    assert_eq!(list, cpus[last as usize].to_string());
}

/// An executable script `name` in `dir`.
fn program(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn the_task_prolog_changes_the_task_s_environment_and_output_and_the_task_epilog_follows_it() {
    let dir = open_dir();
    let d = dir.path().display();
    let mut n = node();
    n.task_scripts.prolog = Some(program(
        dir.path(),
        "task-prolog",
        &format!(
            "echo \"$SLURM_SCRIPT_CONTEXT $(id -u) $SLURM_PROCID\" > {d}/prolog-ran\n\
             echo 'export FROM_PROLOG=a=b'\necho 'unset FROM_SUBMITTER'\n\
             echo 'print hello from the task prolog'\necho 'export bad-name=x'\necho noise"
        ),
    ));
    n.task_scripts.epilog = Some(program(
        dir.path(),
        "task-epilog",
        &format!("echo \"$SLURM_SCRIPT_CONTEXT $FROM_PROLOG\" > {d}/epilog-ran"),
    ));
    let me = me();
    let mut j = job(
        dir.path(),
        &me.name,
        "echo \"FROM_PROLOG=$FROM_PROLOG\"; echo \"FROM_SUBMITTER=${FROM_SUBMITTER-unset}\"",
        one_task(vec![]),
    );
    j.stdout = Some(format!("{d}/out"));
    let mut t = launch_task(&j, &n, 0, &me).unwrap();
    let o = t.wait().unwrap();
    assert_eq!(o.state, JobState::Completed, "{o:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out")).unwrap(),
        "hello from the task prolog\nFROM_PROLOG=a=b\nFROM_SUBMITTER=unset\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("prolog-ran")).unwrap(),
        format!("prolog_task {} 0\n", me.uid)
    );
    assert!(!dir.path().join("epilog-ran").exists());
    t.take_task_epilog()
        .expect("a task epilog")
        .run(JobId(77), 0);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("epilog-ran")).unwrap(),
        "epilog_task a=b\n"
    );
    // A failing task prolog fails the task's launch, saying why.
    n.task_scripts.prolog = Some(program(dir.path(), "failing", "echo no quota; exit 4"));
    let err = launch_task(&j, &n, 0, &me).unwrap_err().to_string();
    assert!(
        err.contains("task prolog") && err.contains("exit status 4") && err.contains("no quota"),
        "{err}"
    );
}

#[test]
fn output_files_follow_patterns_and_open_modes() {
    let dir = tempfile::tempdir().unwrap();
    let me = me();
    let mut j = job(
        dir.path(),
        &me.name,
        "echo out; echo err >&2",
        one_task(vec![]),
    );
    j.stdout = Some("logs-%N-%u-%4j.out".into());
    j.stderr = Some(format!("{}/e\\%j.err", dir.path().display()));
    let n = node();
    for _ in 0..2 {
        launch_task(&j, &n, 0, &me).unwrap().wait().unwrap();
    }
    let out = dir
        .path()
        .join(format!("logs-node002-{}-0077.out", me.name));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "out\n");
    let err = dir.path().join("e%j.err");
    assert_eq!(std::fs::read_to_string(&err).unwrap(), "err\n");
    // Appending keeps both runs.
    j.open_mode = OpenMode::Append;
    launch_task(&j, &n, 0, &me).unwrap().wait().unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "out\nout\n");
    // Without --error, stderr joins stdout in the default file.
    j.stdout = None;
    j.stderr = None;
    launch_task(&j, &n, 0, &me).unwrap().wait().unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("slurm-77.out")).unwrap(),
        "out\nerr\n"
    );
}

#[test]
fn exit_statuses_map_to_job_states() {
    let dir = tempfile::tempdir().unwrap();
    let me = me();
    let n = node();
    let run = |script: &str| {
        let j = job(dir.path(), &me.name, script, one_task(vec![]));
        launch_task(&j, &n, 0, &me).unwrap().wait().unwrap()
    };
    let o = run("exit 0");
    assert_eq!(
        (o.state, o.exit_code, o.signal),
        (JobState::Completed, Some(0), None)
    );
    let o = run("exit 3");
    assert_eq!(
        (o.state, o.exit_code, o.signal),
        (JobState::Failed, Some(3), None)
    );
    assert_eq!(o.slurm_exit_code(), "3:0");
    let o = run("kill -9 $$");
    assert_eq!(
        (o.state, o.exit_code, o.signal),
        (JobState::Failed, None, Some(9))
    );
    // No cgroup here: an out-of-memory kill is not claimed.
    assert!(matches!(
        o.oom,
        cadre_agent::cgroup::OomCheck::NotDetected { .. }
    ));
}

#[test]
fn a_keeper_keeps_its_task_s_end_and_kills_it_when_the_lease_it_reads_runs_out() {
    let dir = tempfile::tempdir().unwrap();
    let node = node();
    let k = node.keepers.clone().unwrap();
    // The keeper is the agent's child; the task is its own, and ends as the task did.
    let j = job(dir.path(), &me().name, "exit 5", one_task(vec![]));
    let mut t = launch_task(&j, &node, 0, &me()).unwrap();
    let status = t.status_file().unwrap().path().to_path_buf();
    let task_pid = t.status_file().unwrap().wait_task_pid(HANG_GUARD).unwrap();
    assert_ne!(task_pid as u32, t.pid(), "the task runs under a keeper");
    let o = without_hanging("the task", move || t.wait().unwrap());
    assert_eq!((o.state, o.exit_code), (JobState::Failed, Some(5)));
    // The status file stays (the agent's worker removes it once the run's end is told).
    let kept = cadre_agent::keeper::StatusFile::open(&status).unwrap();
    assert_eq!(kept.ended(), Some(KeptEnd::Exited(5)));
    assert_eq!(kept.task_pid(), Some(task_pid));
    kept.remove();
    // A lease that ends in a moment, which nobody renews: the keeper kills the task.
    let j = job(dir.path(), &me().name, "exec sleep 600", one_task(vec![]));
    k.lease
        .publish(Some(Instant::now() + Duration::from_millis(300)))
        .unwrap();
    let mut t = launch_task(&j, &node, 0, &me()).unwrap();
    let kept = cadre_agent::keeper::StatusFile::open(t.status_file().unwrap().path()).unwrap();
    let o = without_hanging("the fenced task", move || t.wait().unwrap());
    assert_eq!(o.signal, Some(9), "{o:?}");
    assert!(kept.fenced());
    assert_eq!(kept.ended(), Some(KeptEnd::Signaled(9)));
    k.lease.publish(None).unwrap();
}

#[test]
fn the_time_limit_terminates_then_kills() {
    let dir = tempfile::tempdir().unwrap();
    let me = me();
    let n = node();
    let mut j = job(dir.path(), &me.name, "exec sleep 30", one_task(vec![]));
    j.time_limit = Some(Duration::from_millis(200));
    // Far beyond the hang guard: a supervisor that sat out KillWait after the task had
    // died of SIGTERM would make the test give up.
    j.kill_wait = Duration::from_secs(3600);
    let (o, pid) = {
        let (j, n, me) = (j.clone(), n.clone(), me.clone());
        without_hanging("the timed-out task", move || {
            let mut t = launch_task(&j, &n, 0, &me).unwrap();
            let pid = t.pid();
            (t.wait().unwrap(), pid)
        })
    };
    // SIGTERM was enough: the task died of it, no SIGKILL followed, and it is gone.
    assert_eq!((o.state, o.signal), (JobState::Timeout, Some(15)));
    assert!(!pid_alive(pid), "the timed-out task (pid {pid}) lives on");

    // A task that ignores SIGTERM is killed after KillWait.
    let mut j = job(
        dir.path(),
        &me.name,
        "trap '' TERM; sleep 30",
        one_task(vec![]),
    );
    j.time_limit = Some(Duration::from_millis(100));
    j.kill_wait = Duration::from_millis(200);
    let (o, pid) = without_hanging("the task that ignores SIGTERM", move || {
        let mut t = launch_task(&j, &n, 0, &me).unwrap();
        let pid = t.pid();
        (t.wait().unwrap(), pid)
    });
    assert_eq!((o.state, o.signal), (JobState::Timeout, Some(9)));
    assert!(!pid_alive(pid), "the killed task (pid {pid}) lives on");
}

#[test]
fn the_pre_end_signal_arrives_before_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let me = me();
    let script = "trap 'echo got-usr1; exit 7' USR1; i=0; \
                  while [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done";
    let mut j = job(dir.path(), &me.name, script, one_task(vec![]));
    j.time_limit = Some(Duration::from_secs(21));
    j.kill_wait = Duration::from_millis(200);
    // One second after the start: time for the shell to set its trap.
    j.signal = Some(PreEndSignal {
        signal: 10,
        before_secs: 20,
        target: SignalTarget::Leader,
    });
    let o = launch_task(&j, &node(), 0, &me).unwrap().wait().unwrap();
    // The trap ran and ended the task well before its limit.
    assert_eq!((o.state, o.exit_code), (JobState::Failed, Some(7)));
    let text = std::fs::read_to_string(dir.path().join("slurm-77.out")).unwrap();
    assert_eq!(text, "got-usr1\n");
}

#[test]
fn cancel_stops_the_task_and_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let me = me();
    let mut j = job(
        dir.path(),
        &me.name,
        "sleep 30 & echo $! > child.pid; wait",
        one_task(vec![]),
    );
    j.kill_wait = Duration::from_secs(5);
    let mut t = launch_task(&j, &node(), 0, &me).unwrap();
    let pid_file = dir.path().join("child.pid");
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(&pid_file).map_or(true, |s| !s.ends_with('\n')) {
        assert!(
            Instant::now() < deadline,
            "the task never started its child"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let child: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let canceller = t.canceller();
    std::thread::spawn(move || canceller.cancel());
    let o = t.wait().unwrap();
    assert_eq!((o.state, o.signal), (JobState::Cancelled, Some(15)));
    // The background `sleep` got the group's SIGTERM too and goes (reaped by init, or at
    // worst a zombie); it may end a moment after the shell that `wait` saw end.
    let gone = || {
        std::fs::read_to_string(format!("/proc/{child}/stat"))
            .map_or(true, |s| s.split_whitespace().nth(2) == Some("Z"))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gone() {
        assert!(
            Instant::now() < deadline,
            "child {child} of the cancelled task still runs"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_missing_program_is_reported_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let me = me();
    let mut j = job(dir.path(), &me.name, "", one_task(vec![]));
    j.command = vec!["/no/such/program".into()];
    let err = launch_task(&j, &node(), 0, &me).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("failed to start task 0 of job 77: cannot execute `/no/such/program`: "),
        "{err}"
    );
}

/// A directory anybody may write to, for tasks that run as `nobody`.
fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

#[test]
fn a_root_agent_runs_tasks_as_their_user() {
    if !root_or_skip(
        "the tests of tasks run as their user",
        "switching users needs root",
    ) {
        return;
    }
    let nobody = RunAs::lookup("nobody").unwrap();
    let dir = open_dir();
    let j = job(dir.path(), "nobody", "id -u; id -g", one_task(vec![]));
    let o = launch_task(&j, &node(), 0, &nobody)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(o.state, JobState::Completed);
    let out = dir.path().join("slurm-77.out");
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        format!("{}\n{}\n", nobody.uid, nobody.gid)
    );
    let meta = std::fs::metadata(&out).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (nobody.uid, nobody.gid));

    // The task prolog runs as the user too (root's program, the user's identity).
    let mut n = node();
    n.task_scripts.prolog = Some(program(
        dir.path(),
        "task-prolog",
        &format!("id -u > {}/prolog-uid", dir.path().display()),
    ));
    launch_task(&j, &n, 0, &nobody).unwrap().wait().unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("prolog-uid")).unwrap(),
        format!("{}\n", nobody.uid)
    );

    // The task opens its files as the user: where the user may not write, it does not start.
    let closed = tempfile::tempdir().unwrap();
    let mut j = job(closed.path(), "nobody", "true", one_task(vec![]));
    j.work_dir = dir.path().to_path_buf();
    j.stdout = Some(format!("{}/x.out", closed.path().display()));
    let err = launch_task(&j, &node(), 0, &nobody).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "cannot open output file {}/x.out as uid {}",
            closed.path().display(),
            nobody.uid
        )),
        "{text}"
    );
    assert!(!closed.path().join("x.out").exists());
}

#[test]
fn the_agent_refuses_users_it_cannot_or_must_not_run_as() {
    let dir = tempfile::tempdir().unwrap();
    // A non-root submitter mapped to uid 0 is never run as root.
    let fake_root = RunAs {
        name: "mallory".into(),
        uid: 0,
        gid: 0,
        home: None,
        shell: None,
    };
    let j = job(dir.path(), "mallory", "true", one_task(vec![]));
    let err = launch_task(&j, &node(), 0, &fake_root).unwrap_err();
    if is_root() {
        assert!(matches!(err, LaunchError::RefuseRoot { .. }), "{err}");
    } else {
        assert!(matches!(err, LaunchError::CannotSwitchUser { .. }), "{err}");
    }
    // The account must be the submitter's.
    let j = job(dir.path(), "alice", "true", one_task(vec![]));
    let err = launch_task(&j, &node(), 0, &me()).unwrap_err();
    assert!(matches!(err, LaunchError::UserMismatch { .. }), "{err}");
    assert!(!dir.path().join("slurm-77.out").exists());
}

fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.split_whitespace().nth(2) != Some("Z"))
}

#[test]
fn a_gang_starts_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let me = me();
    let n = node();
    std::fs::create_dir(dir.path().join("out-0")).unwrap();
    // Task 1's output directory does not exist: it cannot start.
    let tasks = vec![task(0, 1, vec![0], vec![0]), task(1, 1, vec![0], vec![1])];
    let mut j = job(dir.path(), &me.name, "sleep 30", tasks.clone());
    j.stdout = Some("out-%t/log".into());
    let err = {
        let (j, n, me) = (j.clone(), n.clone(), me.clone());
        without_hanging("the failed gang start", move || {
            launch_gang(&j, &n, &me).unwrap_err()
        })
    };
    // The started task was killed, not waited for.
    assert_eq!(err.stopped.len(), 1);
    assert_eq!(err.stopped[0].signal, Some(9));
    assert!(
        err.to_string().starts_with(
            "gang start of job 77 failed on node node002, 1 started task(s) stopped: \
             failed to start task 1 of job 77: cannot open output file"
        ),
        "{err}"
    );

    // With both directories there, both start, share nothing, and end together.
    std::fs::create_dir(dir.path().join("out-1")).unwrap();
    let mut j = job(
        dir.path(),
        &me.name,
        "echo $SLURM_PROCID:$CUDA_VISIBLE_DEVICES",
        tasks,
    );
    j.stdout = Some("out-%t/log".into());
    let mut g = launch_gang(&j, &n, &me).unwrap();
    let pids: Vec<u32> = g.tasks.iter().map(|t| t.pid()).collect();
    let outcomes = g.wait().unwrap();
    assert_eq!(gang::gang_state(&outcomes), JobState::Completed);
    assert!(pids.iter().all(|&p| !pid_alive(p)));
    for (rank, gpu) in [(0, 0), (1, 1)] {
        let log = dir.path().join(format!("out-{rank}/log"));
        assert_eq!(
            std::fs::read_to_string(log).unwrap(),
            format!("{rank}:{gpu}\n")
        );
    }
}

#[test]
fn tasks_sharing_an_output_file_do_not_truncate_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let me = me();
    let tasks = vec![task(0, 1, vec![0], vec![]), task(1, 1, vec![0], vec![])];
    let mut j = job(dir.path(), &me.name, "echo rank$SLURM_PROCID", tasks);
    std::fs::write(dir.path().join("slurm-77.out"), "old run\n").unwrap();
    let mut g = launch_gang(&j, &node(), &me).unwrap();
    g.wait().unwrap();
    let mut lines: Vec<String> = std::fs::read_to_string(dir.path().join("slurm-77.out"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    assert_eq!(lines, vec!["rank0", "rank1"]);
    j.allocation.tasks.clear();
    let err = launch_gang(&j, &node(), &me).unwrap_err();
    assert_eq!(err.source.to_string(), "job 77 has no task on node node002");
}

#[test]
fn a_gang_takes_signals_and_stops_within_the_kill_wait_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let me = me();
    let n = node();
    let tasks = vec![task(0, 1, vec![0], vec![]), task(1, 1, vec![0], vec![])];
    // Each task ends on USR1 with its rank + 3; `ready-<rank>` says its trap is set.
    let script = "trap 'exit $((SLURM_PROCID + 3))' USR1; touch ready-$SLURM_PROCID; \
                  while :; do sleep 0.05; done";
    let j = job(dir.path(), &me.name, script, tasks.clone());
    let mut g = launch_gang(&j, &n, &me).unwrap();
    wait_for_files(dir.path(), &["ready-0", "ready-1"]);
    g.signal(nix::sys::signal::Signal::SIGUSR1).unwrap();
    let outcomes = loop {
        if let Some(o) = g.poll().unwrap() {
            break o;
        }
        std::thread::sleep(g.nap());
    };
    let codes: Vec<_> = outcomes.iter().map(|o| (o.state, o.exit_code)).collect();
    assert_eq!(
        codes,
        vec![(JobState::Failed, Some(3)), (JobState::Failed, Some(4))]
    );
    // Ended tasks take no more signals.
    g.signal(nix::sys::signal::Signal::SIGUSR1).unwrap();

    // Tasks that ignore SIGTERM are killed after the stop's own KillWait, not the job's.
    let script = "trap '' TERM; touch ready-$SLURM_PROCID; while :; do sleep 0.05; done";
    let mut j = job(dir.path(), &me.name, script, tasks);
    j.kill_wait = Duration::from_secs(60);
    std::fs::remove_file(dir.path().join("ready-0")).unwrap();
    std::fs::remove_file(dir.path().join("ready-1")).unwrap();
    let mut g = launch_gang(&j, &n, &me).unwrap();
    wait_for_files(dir.path(), &["ready-0", "ready-1"]);
    g.cancel_within(Duration::from_millis(100)).unwrap();
    let outcomes = g.wait().unwrap();
    assert_eq!(gang::gang_state(&outcomes), JobState::Cancelled);
    assert!(outcomes.iter().all(|o| o.signal == Some(9)), "{outcomes:?}");
}

fn wait_for_files(dir: &Path, names: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !names.iter().all(|n| dir.join(n).exists()) {
        assert!(Instant::now() < deadline, "{names:?} never appeared");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_task_with_its_own_program_sees_the_jobs_files_over_the_nodes_in_its_own_namespace() {
    if !root_or_skip(
        "the tests of mount namespaces",
        "mount namespaces need root",
    ) {
        return;
    }
    let nobody = RunAs::lookup("nobody").unwrap();
    let dir = open_dir();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "10.9.8.7\tpeer-0 peer-0.sub\n").unwrap();
    let mpi = dir.path().join("mpi");
    std::fs::create_dir(&mpi).unwrap();
    std::fs::write(mpi.join("hostfile"), "peer-0.sub slots=1\n").unwrap();
    // A mount point of the test's own, so that nothing of the node's is needed.
    let point = dir.path().join("point");
    std::fs::create_dir(&point).unwrap();
    // And a memory volume of 1 MiB of its own (an emptyDir of medium Memory).
    let shm = dir.path().join("shm");
    std::fs::create_dir(&shm).unwrap();
    let node_hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    let mut j = job(dir.path(), "nobody", "not run", one_task(vec![]));
    j.export = cadre_agent::jobenv::Export::None;
    j.programs.insert(
        0,
        cadre_agent::jobenv::TaskProgram {
            command: vec![
                "/bin/sh".into(),
                "-c".into(),
                format!(
                    "id -u; hostname; getent hosts peer-0.sub; cat {}/hostfile; echo \"$ROLE $SLURM_PROCID\"; \
                     df -B1 --output=size {shm} | tail -n 1 | tr -d ' '; touch {shm}/mine; grep NoNewPrivs /proc/self/status",
                    point.display(),
                    shm = shm.display()
                ),
            ],
            work_dir: dir.path().to_path_buf(),
            env: vec![
                ("ROLE".into(), "first".into()),
                ("ROLE".into(), "launcher".into()),
            ],
            binds: vec![
                (BindSource::open(&hosts).unwrap(), "/etc/hosts".into()),
                (BindSource::open(&mpi).unwrap(), point.clone()),
            ],
            container: None,
            holds: false,
            hostname: Some("peer-0".into()),
            tmpfs: vec![(shm.clone(), Some(1 << 20))],
            no_new_privs: true,
            identity: Default::default(),
        },
    );
    let node_name = nix::unistd::gethostname().unwrap();
    let o = launch_task(&j, &node(), 0, &nobody)
        .unwrap()
        .wait()
        .unwrap();
    let out = std::fs::read_to_string(dir.path().join("slurm-77.out")).unwrap();
    assert_eq!(o.state, JobState::Completed, "{out}");
    assert_eq!(
        out,
        format!(
            "{}\npeer-0\n10.9.8.7        peer-0 peer-0.sub\npeer-0.sub slots=1\nlauncher 0\n1048576\nNoNewPrivs:\t1\n",
            nobody.uid
        )
    );
    // The task's tmpfs was its own: nothing it wrote there is on the node.
    assert_eq!(std::fs::read_dir(&shm).unwrap().count(), 0);
    // Nothing leaked to the node: its files, its host name.
    assert_eq!(std::fs::read_to_string("/etc/hosts").unwrap(), node_hosts);
    assert_eq!(nix::unistd::gethostname().unwrap(), node_name);
    assert_eq!(std::fs::read_dir(&point).unwrap().count(), 0);

    // What is mounted is what the agent made: the hosts file swapped for a link to a file
    // only root may read after the agent made it, the task is not started (a mount by
    // path would have followed the link as root and shown the file).
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "root's secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let opened = BindSource::open(&hosts).unwrap();
    std::fs::rename(&hosts, dir.path().join("hosts.old")).unwrap();
    std::os::unix::fs::symlink(&secret, &hosts).unwrap();
    j.programs.get_mut(&0).unwrap().command = vec!["/bin/cat".into(), "/etc/hosts".into()];
    j.programs.get_mut(&0).unwrap().binds = vec![(opened, "/etc/hosts".into())];
    let _ = std::fs::remove_file(dir.path().join("slurm-77.out"));
    let err = launch_task(&j, &node(), 0, &nobody)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot bind-mount the job's files") && err.contains("Stale file handle"),
        "{err}"
    );
    let out = std::fs::read_to_string(dir.path().join("slurm-77.out")).unwrap_or_default();
    assert!(!out.contains("secret"), "{out}");
    // Nor is a link ever opened to be mounted.
    let err = BindSource::open(&hosts).unwrap_err();
    assert!(err.to_string().contains("a symbolic link"), "{err}");

    // A mount point that does not exist: the launch fails and says what failed.
    j.programs.get_mut(&0).unwrap().binds = vec![(
        BindSource::open(&dir.path().join("hosts.old")).unwrap(),
        dir.path().join("missing"),
    )];
    let err = launch_task(&j, &node(), 0, &nobody)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot bind-mount the job's files (hosts file, MPI or Volcano files)"),
        "{err}"
    );
}

/// The container runtime of the container tests (`CADRE_TEST_CONTAINER_RUNTIME`, default
/// `podman`) with the test image made by `scripts/container-test-image.sh`; `None` (the
/// test is skipped, saying why) where there is none or the tests do not run as root (the
/// runtime is rootful), except under CI, which must run them.
fn test_runtime() -> Option<cadre_agent::container::ContainerRuntime> {
    let skip = |why: String| skip_unless_ci("the container tests", &why);
    if !is_root() {
        return skip("the container tests run a rootful runtime, as root".into());
    }
    let line = std::env::var("CADRE_TEST_CONTAINER_RUNTIME").unwrap_or_else(|_| "podman".into());
    let rt = match cadre_agent::container::ContainerRuntime::detect(&line) {
        Ok(rt) => rt,
        Err(e) => return skip(e.to_string()),
    };
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/container-test-image.sh");
    let made = std::process::Command::new("sh")
        .arg(&script)
        .arg(&line)
        .output()
        .unwrap();
    if !made.status.success() {
        return skip(format!(
            "the test image cannot be made: {}",
            String::from_utf8_lossy(&made.stderr)
        ));
    }
    Some(rt)
}

fn container_exists(rt: &cadre_agent::container::ContainerRuntime, name: &str) -> bool {
    let (program, global) = rt.argv().split_first().unwrap();
    std::process::Command::new(program)
        .args(global)
        .args(["container", "exists", name])
        .status()
        .unwrap()
        .success()
}

fn container_program(
    rt: &cadre_agent::container::ContainerRuntime,
    dir: &Path,
    name: &str,
    script: &str,
) -> cadre_agent::jobenv::TaskProgram {
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "10.9.8.7\tpeer-0 peer-0.sub\n").unwrap();
    cadre_agent::jobenv::TaskProgram {
        command: vec![],
        work_dir: dir.to_path_buf(),
        env: vec![("RANK".into(), "4".into())],
        binds: vec![],
        container: Some(cadre_agent::container::ContainerSpec {
            runtime: rt.argv().to_vec(),
            name: name.into(),
            image: "localhost/cadre-test:1".into(),
            pull: cadre_k8s::PullPolicy::Never,
            command: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]),
            args: vec![],
            work_dir: None,
            mounts: vec![(hosts, "/etc/hosts".into())],
            gpu_devices: false,
            capabilities: vec![],
            hostname: Some("peer-0".into()),
            tmpfs: Vec::new(),
            writable: Vec::new(),
        }),
        holds: false,
        hostname: None,
        tmpfs: Vec::new(),
        no_new_privs: false,
        identity: Default::default(),
    }
}

#[test]
fn a_container_task_runs_its_image_as_the_user_and_leaves_no_container() {
    let Some(rt) = test_runtime() else { return };
    let nobody = RunAs::lookup("nobody").unwrap();
    let dir = open_dir();
    let mut j = job(dir.path(), "nobody", "not run", one_task(vec![1]));
    j.export = cadre_agent::jobenv::Export::None;
    j.programs.insert(
        0,
        container_program(
            &rt,
            dir.path(),
            "cadre-test-run",
            "id -u; cat /proc/sys/kernel/hostname; pwd; echo \"$RANK $SLURM_PROCID $CUDA_VISIBLE_DEVICES\"; \
             cat /etc/hosts; echo \"${HOME:-nohome} $PATH\"; exit 3",
        ),
    );
    let o = launch_task(&j, &node(), 0, &nobody)
        .unwrap()
        .wait()
        .unwrap();
    let file = dir.path().join("slurm-77.out");
    let out = std::fs::read_to_string(&file).unwrap();
    assert_eq!(o.exit_code, Some(3), "{out}");
    assert_eq!(o.state, JobState::Failed);
    // The image's working directory and PATH, the task's variables, the job's hosts file,
    // the job's user; the output file is the user's.
    assert_eq!(
        out,
        format!(
            "{}\npeer-0\n/work\n4 0 1\n10.9.8.7\tpeer-0 peer-0.sub\n/nonexistent /bin\n",
            nobody.uid
        )
    );
    assert_eq!(std::fs::metadata(&file).unwrap().uid(), nobody.uid);
    assert!(!container_exists(&rt, "cadre-test-run"));
}

/// Regression: a root job's container had the runtime's default capabilities, and no
/// container was kept from gaining privileges (set-user-id programs of the image).
#[test]
fn a_container_task_has_no_capabilities_and_no_new_privileges_even_as_root() {
    let Some(rt) = test_runtime() else { return };
    let root = RunAs::lookup("root").unwrap();
    let dir = open_dir();
    let mut j = job(dir.path(), "root", "not run", one_task(vec![]));
    j.programs.insert(
        0,
        container_program(
            &rt,
            dir.path(),
            "cadre-test-caps",
            "id -u; grep -E '^(CapPrm|CapEff|NoNewPrivs):' /proc/self/status",
        ),
    );
    let o = launch_task(&j, &node(), 0, &root).unwrap().wait().unwrap();
    let out = std::fs::read_to_string(dir.path().join("slurm-77.out")).unwrap();
    assert_eq!(o.state, JobState::Completed, "{out}");
    assert_eq!(
        out,
        "0\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\n"
    );
}

#[test]
fn a_container_task_gets_back_the_capabilities_it_was_given() {
    let Some(rt) = test_runtime() else { return };
    let nobody = RunAs::lookup("nobody").unwrap();
    let dir = open_dir();
    let mut j = job(dir.path(), "nobody", "not run", one_task(vec![]));
    let mut program = container_program(
        &rt,
        dir.path(),
        "cadre-test-cap-add",
        "grep -E '^(CapEff|NoNewPrivs):' /proc/self/status",
    );
    if let Some(c) = program.container.as_mut() {
        c.capabilities = vec!["IPC_LOCK".into()];
    }
    j.programs.insert(0, program);
    let o = launch_task(&j, &node(), 0, &nobody)
        .unwrap()
        .wait()
        .unwrap();
    let out = std::fs::read_to_string(dir.path().join("slurm-77.out")).unwrap();
    assert_eq!(o.state, JobState::Completed, "{out}");
    // CAP_IPC_LOCK is bit 14.
    assert_eq!(out, "CapEff:\t0000000000004000\nNoNewPrivs:\t1\n");
}

#[test]
fn a_cancelled_container_task_that_ignores_sigterm_is_killed_with_its_container() {
    let Some(rt) = test_runtime() else { return };
    let nobody = RunAs::lookup("nobody").unwrap();
    let dir = open_dir();
    let mut j = job(dir.path(), "nobody", "not run", one_task(vec![]));
    j.programs.insert(
        0,
        container_program(
            &rt,
            dir.path(),
            "cadre-test-cancel",
            "trap '' TERM; echo started; while true; do sleep 0.1; done",
        ),
    );
    let mut t = launch_task(&j, &node(), 0, &nobody).unwrap();
    let out = dir.path().join("slurm-77.out");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&out)
        .unwrap_or_default()
        .contains("started")
    {
        assert!(Instant::now() < deadline, "the container never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(container_exists(&rt, "cadre-test-cancel"));
    t.cancel_within(Duration::from_millis(300)).unwrap();
    let o = t.wait().unwrap();
    assert_eq!(o.state, JobState::Cancelled, "{o:?}");
    assert!(!container_exists(&rt, "cadre-test-cancel"));
}
