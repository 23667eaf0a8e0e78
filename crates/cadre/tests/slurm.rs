//! The Slurm commands end to end: a cluster from `cadre up --detach` (2 nodes, 4 emulated
//! GPUs each) in a temporary data directory, the aliases from `cadre install-aliases`, and
//! `sbatch`/`scontrol` run by those names as a user runs them. The comparison of formats
//! with the real Slurm is `slurm_compare.rs`; here jobs run.
//!
//! A guard stops the cluster (`cadre down`) when a test ends, also when it panics. Tests
//! wait for states and files; deadlines only keep a broken build from hanging.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Cluster {
    dir: tempfile::TempDir,
    work: PathBuf,
    bin: PathBuf,
}

impl Cluster {
    fn up() -> Cluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        let work = dir.path().join("work");
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&work).unwrap();
        let c = Cluster { dir, work, bin };
        let out = c.cadre(&["up", "--detach", "--nodes", "2", "--gpus-per-node", "4"]);
        assert!(out.status.success(), "cadre up: {}", text(&out.stderr));
        let out = c.cadre(&["install-aliases", c.bin.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "install-aliases: {}",
            text(&out.stderr)
        );
        c
    }

    fn data(&self) -> &Path {
        self.dir.path()
    }

    fn cadre(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_cadre"))
            .args(args)
            .env_remove("CADRE_SERVER")
            .env_remove("CADRE_TOKEN")
            .env("CADRE_DATA_DIR", self.data())
            .current_dir(&self.work)
            .stdin(Stdio::null())
            .output()
            .expect("cadre runs")
    }

    /// A Slurm command by its alias, in the work directory.
    fn slurm(&self, name: &str, args: &[&str]) -> Output {
        let mut cmd = Command::new(self.bin.join(name));
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("SBATCH_") || k.starts_with("SLURM_") || k.starts_with("CADRE_") {
                cmd.env_remove(k.as_ref());
            }
        }
        cmd.args(args)
            .env("CADRE_DATA_DIR", self.data())
            .current_dir(&self.work)
            .stdin(Stdio::null())
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
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(self.data().join("cadre.sock"))
            .expect("socket");
        write!(
            s,
            "GET /api/v1{path} HTTP/1.1\r\nHost: cadre\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        let body = resp.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        // The body may be chunked: take the JSON object within.
        let start = body.find('{').unwrap_or(0);
        let end = body.rfind('}').map_or(body.len(), |e| e + 1);
        serde_json::from_str(&body[start..end]).expect("JSON body")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.cadre(&["down"]);
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
fn every_slurm_name_is_linked_and_those_not_there_yet_say_so() {
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
    for name in ["srun", "salloc"] {
        let out = c.slurm(name, &[]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            text(&out.stderr).trim(),
            format!("cadre: {name} is not implemented yet")
        );
    }
    // Making the links again replaces them.
    let out = c.cadre(&["install-aliases", c.bin.to_str().unwrap()]);
    assert!(out.status.success());
}
