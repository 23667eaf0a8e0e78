//! The Slurm commands end to end: a cluster from `cadre up --detach` (2 nodes, 4 emulated
//! GPUs each) in a temporary data directory, the aliases from `cadre install-aliases`, and
//! `sbatch`/`scontrol` run by those names as a user runs them. The comparison of formats
//! with the real Slurm is `slurm_compare.rs`; here jobs run.
//!
//! A guard stops the cluster (`cadre down`) when a test ends, also when it panics. Tests
//! wait for states and files; deadlines only keep a broken build from hanging.

use cadre_test_support::{skip_unless_ci, text, wait_until, wait_until_or};

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A cluster of cadre-test-support's harness with the Slurm aliases in `bin` and a work
/// directory `work` where the commands run.
struct Cluster {
    inner: cadre_test_support::Cluster,
    work: PathBuf,
    bin: PathBuf,
}

impl Cluster {
    fn up() -> Cluster {
        let inner = cadre_test_support::Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
            .nodes(2)
            .gpus_per_node(4)
            .workdir("work")
            .start();
        let work = inner.workdir().to_path_buf();
        let bin = inner.root().join("bin");
        let c = Cluster { inner, work, bin };
        let out = c.cadre(&["install-aliases", c.bin.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "install-aliases: {}",
            text(&out.stderr)
        );
        c
    }

    fn data(&self) -> &Path {
        self.inner.data()
    }

    fn cadre(&self, args: &[&str]) -> Output {
        self.inner.run(args)
    }

    /// A Slurm command by its alias, in the work directory.
    fn slurm(&self, name: &str, args: &[&str]) -> Output {
        let mut cmd = self.inner.command(self.bin.join(name));
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("SBATCH_") || k.starts_with("SLURM_") {
                cmd.env_remove(k.as_ref());
            }
        }
        // The aliases first on PATH, as after `cadre install-aliases`: a job's `srun` and
        // `scontrol` are cadre's too.
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.args(args)
            .env("PATH", format!("{}:{path}", self.bin.display()))
            .output()
            .expect("the alias runs")
    }

    fn ok(&self, name: &str, args: &[&str]) -> String {
        let out = self.slurm(name, args);
        assert!(
            out.status.success(),
            "{name} {args:?} failed ({}): {}{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    fn sbatch(&self, args: &[&str]) -> u64 {
        let mut a = vec!["--parsable"];
        a.extend_from_slice(args);
        let out = self.ok("sbatch", &a);
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("sbatch printed `{out}`"))
    }

    /// `scontrol show job -o ID` as key=value pairs (the first record).
    fn show(&self, id: &str) -> BTreeMap<String, String> {
        let out = self.ok("scontrol", &["show", "job", "-o", id]);
        out.lines()
            .next()
            .unwrap_or("")
            .split(' ')
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn state(&self, id: u64) -> String {
        self.show(&id.to_string())["JobState"].clone()
    }

    /// One API request on the socket.
    fn api(&self, path: &str) -> Value {
        self.request("GET", path, None)
    }

    /// One API request with a JSON body on the socket.
    fn request(&self, method: &str, path: &str, body: Option<&str>) -> Value {
        self.inner.api(method, &format!("/api/v1{path}"), body).1
    }
}

#[test]
fn a_batch_script_runs_once_on_the_first_node_and_sbatch_wait_returns_its_exit_code() {
    let c = Cluster::up();
    let script = c.work.join("train.sh");
    std::fs::write(
        &script,
        "#!/bin/bash\n#SBATCH -J train\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n#SBATCH --gpus-per-node=2\n#SBATCH -o train-%j.out\n\
         echo \"batch $SLURM_NODEID $SLURMD_NODENAME ntasks=$SLURM_NTASKS gpus=$CUDA_VISIBLE_DEVICES args=$*\"\n\
         scontrol show hostnames \"$SLURM_JOB_NODELIST\"\nexit 3\n",
    )
    .unwrap();
    let out = c.slurm("sbatch", &["--wait", "train.sh", "a", "b"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    let id: u64 = said
        .trim()
        .strip_prefix("Submitted batch job ")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("sbatch said `{said}`"));
    let output = std::fs::read_to_string(c.work.join(format!("train-{id}.out"))).unwrap();
    let lines: Vec<&str> = output.lines().collect();
    // Once, on the first node, with the node's two GPUs, then the two nodes of the job.
    assert_eq!(
        lines,
        vec![
            "batch 0 node001 ntasks=4 gpus=0,1 args=a b",
            "node001",
            "node002"
        ],
        "{output}"
    );
    let f = c.show(&id.to_string());
    assert_eq!(f["JobState"], "FAILED");
    assert_eq!(f["ExitCode"], "3:0");
    assert_eq!(f["NodeList"], "node[001-002]");
    assert_eq!(f["NumNodes"], "2");
    assert_eq!(f["TresPerNode"], "gres/gpu:2");
    assert_eq!(f["Command"], c.work.join("train.sh").display().to_string());
}

#[test]
fn arrays_dependencies_and_scontrol_job_control() {
    let c = Cluster::up();
    // An array: one job per task, files named by %A and %a, the array's id printed.
    let array = c.sbatch(&[
        "--array=1-3%2",
        "-o",
        "arr-%A_%a.out",
        "--wrap",
        "echo task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID",
    ]);
    for i in 1..=3 {
        let path = c.work.join(format!("arr-{array}_{i}.out"));
        wait_until(&format!("{}", path.display()), || {
            std::fs::read_to_string(&path).is_ok_and(|t| t.contains("task"))
        });
        assert_eq!(
            std::fs::read_to_string(&path).unwrap().trim(),
            format!("task {i} of {array}")
        );
    }
    // A dependency on the whole array (by its id) and on one task.
    let dep = c.sbatch(&[
        "--hold",
        &format!("--dependency=afterany:{array},afterok:{array}_2"),
        "--wrap",
        "true",
    ]);
    let spec = &c.api(&format!("/jobs/{dep}"))["spec"];
    assert_eq!(spec["dependencies"].as_array().unwrap().len(), 4);
    assert_eq!(c.show(&dep.to_string())["Reason"], "JobHeldUser");
    // hold, release, update, requeue.
    let long = c.sbatch(&["--hold", "-t", "10", "--wrap", "sleep 300"]);
    c.ok(
        "scontrol",
        &["update", &format!("JobId={long}"), "TimeLimit=20", "Nice=5"],
    );
    let f = c.show(&long.to_string());
    assert_eq!(
        (f["TimeLimit"].as_str(), f["Nice"].as_str()),
        ("00:20:00", "5")
    );
    c.ok("scontrol", &["release", &long.to_string()]);
    wait_until("released job runs", || c.state(long) == "RUNNING");
    c.ok("scontrol", &["requeue", &long.to_string()]);
    wait_until("requeued job pends or runs again", || {
        let f = c.show(&long.to_string());
        f["Restarts"] == "1"
    });
    // A job waiting for its begin time can be held and released.
    let later = c.sbatch(&["--begin=now+1hour", "--wrap", "true"]);
    c.ok("scontrol", &["hold", &later.to_string()]);
    // Held by root: an administrator's hold, as in Slurm.
    assert_eq!(c.show(&later.to_string())["Reason"], "JobHeldAdmin");
    c.ok("scontrol", &["release", &later.to_string()]);
    wait_until("released job waits for its begin time", || {
        c.show(&later.to_string())["Reason"] == "BeginTime"
    });
    let out = c.slurm("scontrol", &["hold", "99999"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("Invalid job id specified"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn scontrol_shows_and_drains_nodes_partitions_and_hostnames() {
    let c = Cluster::up();
    assert_eq!(
        c.ok("scontrol", &["show", "hostnames", "node[001-003],x"]),
        "node001\nnode002\nnode003\nx\n"
    );
    let out = c.slurm("scontrol", &["show", "hostnames"]);
    assert_eq!(out.status.code(), Some(1));
    let out = Command::new(c.bin.join("scontrol"))
        .args(["show", "hostnames"])
        .env("SLURM_JOB_NODELIST", "gpu[07-08]")
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), "gpu07\ngpu08\n");
    let part = c.ok("scontrol", &["show", "partition", "-o"]);
    assert!(part.starts_with("PartitionName=gpu "), "{part}");
    assert!(part.contains(" Nodes=node[001-002] "), "{part}");
    c.ok(
        "scontrol",
        &[
            "update",
            "NodeName=node002",
            "State=DRAIN",
            "Reason=bad fan",
        ],
    );
    let node = c.ok("scontrol", &["show", "node", "-o", "node002"]);
    assert!(node.contains("State=IDLE+DRAIN"), "{node}");
    assert!(node.contains("Reason=bad fan"), "{node}");
    let out = c.slurm("scontrol", &["update", "NodeName=node002", "State=DRAIN"]);
    assert_eq!(out.status.code(), Some(1));
    c.ok("scontrol", &["update", "NodeName=node002", "State=RESUME"]);
    let node = c.ok("scontrol", &["show", "node", "node002"]);
    assert!(node.contains("State=IDLE\n"), "{node}");
    let out = c.slurm("scontrol", &["show", "node", "nosuch"]);
    assert_eq!(
        (out.status.code(), text(&out.stderr).trim()),
        (Some(1), "Node nosuch not found")
    );
}

#[test]
fn test_only_commits_nothing_and_the_run_spec_is_shown_without_the_environment() {
    let c = Cluster::up();
    let out = c.slurm("sbatch", &["--test-only", "-n", "2", "--wrap", "true"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("2 processors in partition"),
        "{}",
        text(&out.stderr)
    );
    let out = c.slurm("sbatch", &["--test-only", "-p", "nosuch", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(c.api("/jobs")["jobs"].as_array().unwrap().is_empty());
    let id = c.sbatch(&["--hold", "-o", "x-%j.out", "--wrap", "true"]);
    let job = c.api(&format!("/jobs/{id}"));
    assert_eq!(job["run"]["stdout"], "x-%j.out");
    assert!(
        job["run"]["script"]
            .as_str()
            .unwrap()
            .starts_with("#!/bin/sh")
    );
    assert_eq!(job["run"]["env"].as_array().map(Vec::len), Some(0));
    // A list does not carry run specs.
    assert!(c.api("/jobs")["jobs"][0].get("run").is_none());
}

#[test]
fn every_slurm_name_is_linked_and_srun_refuses_what_it_cannot_do() {
    let c = Cluster::up();
    for name in [
        "sbatch", "srun", "salloc", "squeue", "sinfo", "scancel", "sacct", "scontrol", "sshare",
        "sprio",
    ] {
        let link = c.bin.join(name);
        assert!(
            std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()),
            "{name} is not linked"
        );
    }
    let out = c.slurm("srun", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim(),
        "srun: fatal: No command given to execute."
    );
    let out = c.slurm("srun", &["--pty", "bash"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--pty"), "{}", text(&out.stderr));
    // Making the links again replaces them.
    let out = c.cadre(&["install-aliases", c.bin.to_str().unwrap()]);
    assert!(out.status.success());
}

/// `sacct -P -n -o JobID,State,ExitCode -j ID`, line by line.
fn accounting(c: &Cluster, id: u64) -> Vec<String> {
    c.ok(
        "sacct",
        &[
            "-P",
            "-n",
            "-o",
            "JobID,State,ExitCode",
            "-j",
            &id.to_string(),
        ],
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

#[test]
fn srun_in_a_batch_job_starts_steps_with_per_task_environments_and_they_are_accounted() {
    let c = Cluster::up();
    std::fs::write(
        c.work.join("steps.sh"),
        "#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=2 --gpus-per-node=2 -t 5 -o steps-%j.out\n\
         srun -l bash -c 'echo \"rank=$SLURM_PROCID local=$SLURM_LOCALID node=$SLURM_NODEID step=$SLURM_STEP_ID n=$SLURM_NTASKS host=$SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES tpn=$SLURM_TASKS_PER_NODE job=$SLURM_JOB_NODELIST\"'\n\
         srun -N1 -n1 -o 'one-%j.%t.out' bash -c 'echo only $SLURM_STEP_NODELIST $SLURM_NNODES'\n\
         srun -n2 --gpus-per-task=1 bash -c 'exit $((SLURM_PROCID + 3))'\n\
         echo \"srun said $?\"\n",
    )
    .unwrap();
    let id = c.sbatch(&["--wait", "steps.sh"]);
    let out = std::fs::read_to_string(c.work.join(format!("steps-{id}.out"))).unwrap();
    let mut lines: Vec<&str> = out.lines().collect();
    let last = lines.pop();
    // The failed step says so on srun's stderr, which is the job's output here.
    let said = lines.pop();
    assert_eq!(
        said,
        Some(format!("srun: error: step {id}.2 FAILED (exit code 4)").as_str())
    );
    lines.sort_unstable();
    assert_eq!(
        lines,
        vec![
            "0: rank=0 local=0 node=0 step=0 n=4 host=node001 gpus=0,1 tpn=2(x2) job=node[001-002]",
            "1: rank=1 local=1 node=0 step=0 n=4 host=node001 gpus=0,1 tpn=2(x2) job=node[001-002]",
            "2: rank=2 local=0 node=1 step=0 n=4 host=node002 gpus=0,1 tpn=2(x2) job=node[001-002]",
            "3: rank=3 local=1 node=1 step=0 n=4 host=node002 gpus=0,1 tpn=2(x2) job=node[001-002]",
        ],
        "{out}"
    );
    // The highest exit code of the step's tasks.
    assert_eq!(last, Some("srun said 4"), "{out}");
    let one = std::fs::read_to_string(c.work.join(format!("one-{id}.0.out"))).unwrap();
    assert_eq!(one.trim(), "only node001 1");
    assert_eq!(
        accounting(&c, id),
        vec![
            format!("{id}|COMPLETED|0:0"),
            format!("{id}.batch|COMPLETED|0:0"),
            format!("{id}.0|COMPLETED|0:0"),
            format!("{id}.1|COMPLETED|0:0"),
            format!("{id}.2|FAILED|4:0"),
        ]
    );
    // A step cannot ask for more than its job holds.
    std::fs::write(
        c.work.join("toomany.sh"),
        "#!/bin/bash\n#SBATCH -N 1 -o toomany.out\nsrun -N2 true\necho \"rc=$?\"\n",
    )
    .unwrap();
    c.sbatch(&["--wait", "toomany.sh"]);
    let out = std::fs::read_to_string(c.work.join("toomany.out")).unwrap();
    assert!(
        out.contains("srun: fatal: only 1 node(s) are allocated to job") && out.contains("rc=1"),
        "{out}"
    );
}

#[test]
fn srun_and_salloc_outside_an_allocation_get_one_and_give_it_back() {
    let c = Cluster::up();
    let out = c.slurm(
        "srun",
        &[
            "-N2",
            "-n2",
            "-l",
            "bash",
            "-c",
            "echo $SLURMD_NODENAME $SLURM_STEP_ID",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    lines.sort();
    assert_eq!(lines, vec!["0: node001 0", "1: node002 0"]);
    let out = c.slurm("srun", &["-n1", "bash", "-c", "echo oops >&2; exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    // The task's stderr comes first, unless the job waited for the first job's nodes to be
    // given back: then srun says so before, as Slurm's does ("queued and waiting for
    // resources", "has been allocated resources").
    let stderr = text(&out.stderr);
    let task_first = stderr
        .lines()
        .skip_while(|l| l.starts_with("srun: job ") && l.contains(" resources"))
        .collect::<Vec<_>>();
    assert_eq!(task_first.first(), Some(&"oops"), "{stderr}");
    let jobs: Vec<u64> = c.api("/jobs")["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(jobs.len(), 2);
    assert_eq!(
        accounting(&c, jobs[0])[0],
        format!("{}|COMPLETED|0:0", jobs[0])
    );
    assert_eq!(
        accounting(&c, jobs[1]),
        vec![
            format!("{}|FAILED|7:0", jobs[1]),
            format!("{}.0|FAILED|7:0", jobs[1])
        ]
    );

    // salloc runs its command here with the allocation's variables; srun in it uses it.
    let out = c.slurm(
        "salloc",
        &[
            "-N2",
            "bash",
            "-c",
            "srun -l bash -c 'echo $SLURMD_NODENAME'; echo alloc=$SLURM_JOB_NODELIST n=$SLURM_JOB_NUM_NODES",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("0: node001\n"), "{stdout}");
    assert!(stdout.contains("1: node002\n"), "{stdout}");
    assert!(stdout.ends_with("alloc=node[001-002] n=2\n"), "{stdout}");
    let stderr = text(&out.stderr);
    let id: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("salloc: Granted job allocation "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(stderr.contains(&format!("salloc: Relinquishing job allocation {id}")));
    assert_eq!(c.state(id), "COMPLETED");
    // The command's exit code is salloc's, and the job's.
    let out = c.slurm("salloc", &["-N1", "bash", "-c", "exit 5"]);
    assert_eq!(out.status.code(), Some(5));
}

#[test]
fn steps_are_listed_while_they_run_and_scancel_stops_one_step() {
    let c = Cluster::up();
    let out = c.slurm("salloc", &["-N1", "--no-shell", "-J", "holder"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let id: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("salloc: Granted job allocation "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{stderr}"));
    let path = std::env::var("PATH").unwrap_or_default();
    let mut srun = Command::new(c.bin.join("srun"))
        .args(["--jobid", &id.to_string(), "sleep", "300"])
        .env("PATH", format!("{}:{path}", c.bin.display()))
        .env("CADRE_DATA_DIR", c.data())
        .env_remove("SLURM_JOB_ID")
        .current_dir(&c.work)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the step is listed", || {
        c.ok("squeue", &["-s", "-h"])
            .lines()
            .any(|l| l.split_whitespace().next() == Some(&format!("{id}.0")))
    });
    let listed = c.ok("squeue", &["-s"]);
    assert!(listed.starts_with("         STEPID     NAME PARTITION     USER      TIME NODELIST\n"));
    assert!(listed.contains(" sleep "), "{listed}");
    c.ok("scancel", &[&format!("{id}.0")]);
    let status = srun.wait().unwrap();
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(srun.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains(&format!("step {id}.0 CANCELLED")), "{err}");
    // The allocation goes on; the step is over.
    assert_eq!(c.state(id), "RUNNING");
    assert_eq!(accounting(&c, id)[1], format!("{id}.0|CANCELLED by 0|0:0"));
    let again = c.slurm("scancel", &[&format!("{id}.0")]);
    assert!(
        text(&again.stderr).contains("Job/step already completing or completed"),
        "{}",
        text(&again.stderr)
    );
    c.ok("scancel", &[&id.to_string()]);
    wait_until("the allocation ends", || c.state(id) == "CANCELLED");
}

/// A multi-node training script as sites write them for torchrun: the first node of the
/// job (from `scontrol show hostnames`) is the rendezvous, every rank connects to it by
/// that name. Node names resolve through the job's hosts file, which needs the agents to
/// run as root; elsewhere the test says so and stops, except under CI, which runs it as root.
#[test]
fn a_torchrun_style_script_forms_its_group_from_scontrol_show_hostnames() {
    if !nix::unistd::geteuid().is_root() {
        skip_unless_ci::<()>(
            "the test of node names inside jobs",
            "node names resolve inside jobs only when the agents run as root",
        );
        return;
    }
    let c = Cluster::up();
    std::fs::write(
        c.work.join("rendezvous.py"),
        r#"import os, socket, time
rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    srv = socket.create_server(("0.0.0.0", port))
    peers = []
    while len(peers) < world - 1:
        conn, _ = srv.accept()
        peers.append((int(conn.recv(64).decode()), conn))
    total = rank + sum(r for r, _ in peers)
    for _, conn in peers:
        conn.sendall(str(total).encode())
        conn.close()
else:
    deadline = time.time() + 30
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.1)
    conn.sendall(str(rank).encode())
    total = int(conn.recv(64).decode())
print(f"rank {rank}/{world} on {os.environ['SLURMD_NODENAME']} via {addr} sum {total}", flush=True)
"#,
    )
    .unwrap();
    std::fs::write(
        c.work.join("train.sh"),
        "#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=1 --gpus-per-node=1 -t 5 -o train.out\n\
         export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n\
         export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n\
         srun python3 rendezvous.py\n",
    )
    .unwrap();
    let id = c.sbatch(&["--wait", "train.sh"]);
    let out = std::fs::read_to_string(c.work.join("train.out")).unwrap();
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        vec![
            "rank 0/2 on node001 via node001 sum 1",
            "rank 1/2 on node002 via node001 sum 1"
        ],
        "{out}"
    );
    assert_eq!(c.state(id), "COMPLETED");
}

/// submitit (PyPI, installed by `.ci/run`) with the aliases first on PATH: it writes its
/// own sbatch scripts (`srun --unbuffered --output ...` inside, `#SBATCH --array=0-2%3`
/// for `map_array`), polls `sacct --parsable2`, and cancels with `scancel`.
#[test]
fn submitit_submits_a_function_maps_an_array_and_cancels_a_job() {
    let have = Command::new("python3")
        .args(["-c", "import submitit"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        have,
        "this test needs submitit for python3 (`pip install submitit`; .ci/run installs it)"
    );
    let c = Cluster::up();
    std::fs::write(
        c.work.join("client.py"),
        r#"import sys, time, submitit

def add(a, b):
    return a + b

def where():
    import os
    return (os.environ["SLURM_JOB_ID"], os.environ["SLURM_PROCID"], os.environ["SLURMD_NODENAME"])

ex = submitit.AutoExecutor(folder=sys.argv[1], cluster="slurm")
ex.update_parameters(timeout_min=5, nodes=1, tasks_per_node=1, gpus_per_node=1, cpus_per_task=1)
job = ex.submit(add, 2, 3)
print("result", job.result(), flush=True)
# The result is written before the job's end is recorded (with Slurm too, which says
# RUNNING or COMPLETING meanwhile): the end is waited for, as a user's script does.
deadline = time.time() + 60
while job.get_info(mode="force").get("State") in ("PENDING", "RUNNING", "COMPLETING"):
    assert time.time() < deadline, job.get_info(mode="force")
    time.sleep(0.1)
print("state", job.get_info(mode="force")["State"], flush=True)
w = ex.submit(where)
print("where", w.result() == (w.job_id, "0", "node001"), flush=True)
jobs = ex.map_array(add, [1, 2, 3], [10, 20, 30])
print("array", [j.result() for j in jobs], jobs[0].job_id.split("_")[1], flush=True)
slow = ex.submit(time.sleep, 300)
deadline = time.time() + 60
while slow.get_info(mode="force").get("State") != "RUNNING":
    assert time.time() < deadline, slow.get_info(mode="force")
    time.sleep(0.2)
slow.cancel()
while not slow.get_info(mode="force").get("State", "").startswith("CANCELLED"):
    assert time.time() < deadline, slow.get_info(mode="force")
    time.sleep(0.2)
print("cancelled", slow.get_info(mode="force")["State"], flush=True)
"#,
    )
    .unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let out = Command::new("python3")
        .args(["client.py", "runs"])
        .env("PATH", format!("{}:{path}", c.bin.display()))
        .env("CADRE_DATA_DIR", c.data())
        .env_remove("SLURM_JOB_ID")
        .current_dir(&c.work)
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        vec![
            "result 5",
            "state COMPLETED",
            "where True",
            "array [11, 22, 33] 0",
            "cancelled CANCELLED by 0",
        ],
        "{}",
        text(&out.stderr)
    );
}

/// `scontrol update TimeLimit=` of a running job reaches its node (the job times out at
/// the new limit) and the store (the limit shown after the job ended is the new one).
#[test]
fn a_running_jobs_time_limit_changes_where_it_runs_and_in_the_store() {
    let c = Cluster::up();
    let id = c.sbatch(&["-t", "10", "-N", "2", "--wrap", "srun sleep 300"]);
    wait_until("the job runs", || c.state(id) == "RUNNING");
    c.ok(
        "scontrol",
        &["update", &format!("JobId={id}"), "TimeLimit=5"],
    );
    assert_eq!(c.show(&id.to_string())["TimeLimit"], "00:05:00");
    // Slurm's limits are whole minutes; the API takes seconds, which keeps this quick.
    let answer = c.request(
        "PATCH",
        &format!("/jobs/{id}"),
        Some(r#"{"time_limit": 2}"#),
    );
    assert_eq!(answer, Value::Null, "{answer}");
    wait_until_or(
        "the job times out",
        || c.state(id) == "TIMEOUT",
        || format!("state {}{}", c.state(id), c.inner.logs()),
    );
    assert_eq!(c.show(&id.to_string())["TimeLimit"], "00:00:02");
    let _ = c.cadre(&["down"]);
    let out = c.cadre(&["up", "--detach", "--nodes", "2", "--gpus-per-node", "4"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(c.show(&id.to_string())["TimeLimit"], "00:00:02");
}

/// The controller's refusals reach the user in Slurm's words, chosen by the API's reason
/// and by what was asked (`cadre_slurm::refusal`), with Slurm's exit codes: an unknown
/// node of `scontrol update`, a hold of a job that has ended, an unknown QOS of `sbatch`
/// (`$SLURM_EXIT_ERROR` applies to submissions only).
#[test]
fn refusals_are_told_in_slurms_words_by_their_reason() {
    let c = Cluster::up();
    let out = c.slurm(
        "scontrol",
        &["update", "NodeName=nosuch", "State=DRAIN", "Reason=x"],
    );
    assert_eq!(
        (out.status.code(), text(&out.stderr).trim()),
        (Some(1), "Invalid node name specified: nosuch"),
        "{}",
        text(&out.stdout)
    );

    let done = c.sbatch(&["--wrap", "true"]);
    wait_until("the job completes", || c.state(done) == "COMPLETED");
    let out = c.slurm("scontrol", &["hold", &done.to_string()]);
    assert_eq!(
        (out.status.code(), text(&out.stderr).trim().to_owned()),
        (Some(1), format!("Job has already finished for job {done}")),
    );

    let mut sbatch = c.inner.command(c.bin.join("sbatch"));
    let out = sbatch
        .args(["--qos=nosuch", "--wrap", "true"])
        .env("SLURM_EXIT_ERROR", "7")
        .output()
        .expect("sbatch runs");
    assert_eq!(
        (out.status.code(), text(&out.stderr).trim()),
        (
            Some(7),
            "sbatch: error: Batch job submission failed: Invalid qos specification"
        ),
    );
    let out = c.slurm(
        "scontrol",
        &["update", "NodeName=nosuch", "State=DRAIN", "Reason=x"],
    );
    assert_eq!(out.status.code(), Some(1), "SLURM_EXIT_ERROR is unset here");
}
