//! A cluster brought up from a Slurm site's `slurm.conf` (`cadre up --slurm-conf`), with
//! gres.conf and topology.conf beside it, whose nodes fit this machine (one CPU, 1 GiB and
//! two emulated GPUs each), running jobs on named partitions; and a `slurm.conf` whose
//! nodes do not fit, which `cadre up` refuses before starting anything.
//!
//! Each cluster has its own data directory; a guard stops it (`cadre down`) when the test
//! ends, also when it panics. Nothing here asserts a duration.

use cadre_test_support::{clean_command, text, wait_until};

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

/// `cadre ARGS` in `dir`, with none of the caller's `CADRE_*` variables and the data
/// directory `data`.
fn cadre(dir: &Path, data: &Path, args: &[&str]) -> Output {
    clean_command(env!("CARGO_BIN_EXE_cadre"), dir)
        .args(args)
        .env("CADRE_DATA_DIR", data)
        .output()
        .expect("the cadre binary runs")
}

/// The files of a Slurm configuration, written into a directory of their own.
struct SlurmFiles {
    dir: tempfile::TempDir,
}

impl SlurmFiles {
    fn write(files: &[(&str, &str)]) -> SlurmFiles {
        let dir = tempfile::tempdir().expect("temporary directory");
        for (name, body) in files {
            std::fs::write(dir.path().join(name), body).expect("configuration written");
        }
        SlurmFiles { dir }
    }

    fn slurm_conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }
}

/// A cluster of cadre-test-support's harness, described by a Slurm configuration.
struct Cluster {
    inner: cadre_test_support::Cluster,
}

impl Cluster {
    /// The cluster `cadre up --detach ARGS` would start (not started).
    fn prepare(args: &[&str], nodes: u32) -> Cluster {
        let inner = cadre_test_support::Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
            .args(args)
            .expect_connected(nodes)
            .prepare();
        Cluster { inner }
    }

    /// `cadre up --detach ARGS`, ready (every agent connected) when this returns.
    fn up(args: &[&str], nodes: u32) -> Cluster {
        let mut c = Cluster::prepare(args, nodes);
        c.inner.start();
        c
    }

    fn dir(&self) -> &Path {
        self.inner.data()
    }

    fn run(&self, args: &[&str]) -> Output {
        self.inner.run(args)
    }

    fn log(&self) -> String {
        self.inner.log()
    }

    fn ok(&self, args: &[&str]) -> String {
        self.inner.ok(args)
    }

    fn json(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(args)).expect("JSON output")
    }

    fn submit(&self, args: &[&str]) -> u64 {
        let out = self.ok(&[&["submit", "--parsable"][..], args].concat());
        out.trim().parse().expect("a job id")
    }

    /// `cadre wait JOB`, then the job as `cadre jobs --json` shows it.
    fn finished(&self, id: u64) -> Value {
        let out = self.run(&["wait", &id.to_string(), "--timeout", "60"]);
        let job = self.json(&["jobs", "--json"])["jobs"]
            .as_array()
            .expect("a list of jobs")
            .iter()
            .find(|j| j["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("job {id} is not listed"));
        assert!(
            out.status.success(),
            "job {id} did not complete: {job}{}",
            self.log()
        );
        job
    }
}

/// A site's configuration of two nodes that fit any machine this runs on: one CPU, 1 GiB
/// and two GPUs each; a default partition of one node and a training partition of both,
/// under one leaf switch.
const SLURM_CONF: &str = "\
# Two small GPU nodes, as a site would describe them.
ClusterName=itest
SlurmctldHost=localhost
AuthType=auth/munge
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
TopologyPlugin=topology/tree
NodeName=DEFAULT CPUs=1 RealMemory=1024 Gres=gpu:test:2 State=UNKNOWN
NodeName=gpu[001-002] Features=small
PartitionName=debug Nodes=gpu001 Default=YES MaxTime=10:00 State=UP
PartitionName=train Nodes=ALL MaxTime=1:00:00 PriorityTier=2 State=UP
";

const GRES_CONF: &str = "Name=gpu Type=test File=/dev/nvidia[0-1]\n";

const TOPOLOGY_CONF: &str = "SwitchName=leaf Nodes=gpu[001-002]\n";

#[test]
fn a_cluster_from_slurm_conf_runs_jobs_on_its_named_partitions() {
    let conf = SlurmFiles::write(&[
        ("slurm.conf", SLURM_CONF),
        ("gres.conf", GRES_CONF),
        ("topology.conf", TOPOLOGY_CONF),
    ]);
    let path = conf.slurm_conf();
    let path = path.to_str().expect("utf-8 path");
    let c = Cluster::up(&["--slurm-conf", path, "--gpus-per-node", "2"], 2);

    let nodes = c.json(&["nodes", "--json"]);
    let nodes = nodes["nodes"].as_array().expect("a list of nodes");
    let names: Vec<&str> = nodes.iter().filter_map(|n| n["name"].as_str()).collect();
    assert_eq!(names, ["gpu001", "gpu002"]);
    for n in nodes {
        assert_eq!(n["gpus"], 2, "{n}");
        assert_eq!(n["gpu_model"], "test", "{n}");
        assert_eq!(n["features"], serde_json::json!(["small"]), "{n}");
    }
    assert_eq!(
        nodes[0]["partitions"],
        serde_json::json!(["debug", "train"])
    );
    assert_eq!(nodes[1]["partitions"], serde_json::json!(["train"]));

    // A two-node gang on the named partition, one GPU per rank.
    let out = c.dir().join("train-%t.out");
    let id = c.submit(&[
        "-p",
        "train",
        "-t",
        "10",
        "-N",
        "2",
        "--gpus-per-task",
        "1",
        "-o",
        out.to_str().expect("utf-8 path"),
        "--",
        "sh",
        "-c",
        "echo $SLURM_JOB_PARTITION $SLURMD_NODENAME",
    ]);
    let job = c.finished(id);
    assert_eq!(job["partition"], "train");
    assert_eq!(job["time_limit"], 600);
    assert_eq!(job["nodes"], "gpu[001-002]");
    let mut ranks: Vec<String> = (0..2)
        .map(|t| {
            std::fs::read_to_string(c.dir().join(format!("train-{t}.out")))
                .expect("the rank's output")
                .trim()
                .to_owned()
        })
        .collect();
    ranks.sort();
    assert_eq!(ranks, ["train gpu001", "train gpu002"]);

    // No partition: the default one, whose only node is gpu001.
    let id = c.submit(&["-t", "5", "--gpus-per-task", "2", "--", "true"]);
    let job = c.finished(id);
    assert_eq!(job["partition"], "debug");
    assert_eq!(job["nodes"], "gpu001");

    // Above the partition's MaxTime (10 minutes): held back, as Slurm holds it.
    let id = c.submit(&["-p", "debug", "-t", "11", "--", "true"]);
    let mut job = Value::Null;
    wait_until("PartitionTimeLimit", || {
        let jobs = c.json(&["jobs", "--json"]);
        job = jobs["jobs"]
            .as_array()
            .and_then(|a| a.iter().find(|j| j["id"] == id).cloned())
            .expect("the job is listed");
        job["reason"] == "PartitionTimeLimit"
    });
    assert_eq!(job["state"], "PENDING");

    // Regression: a job without a time limit gets the partition's (MaxTime, there being no
    // DefaultTime) and runs; it used to pend forever with PartitionTimeLimit.
    let id = c.submit(&["-p", "debug", "--", "true"]);
    let job = c.finished(id);
    assert_eq!(job["time_limit"], 600);
    assert_eq!(job["state"], "COMPLETED");
}

/// Regression: a node the description says is drained stayed drained only until its agent
/// connected; the description's state is the administrator's word until changed.
#[test]
fn a_node_described_drained_stays_drained_when_its_agent_connects() {
    let conf = SlurmFiles::write(&[(
        "slurm.conf",
        "\
ClusterName=itest
NodeName=gpu001 CPUs=1 RealMemory=1024
NodeName=gpu002 CPUs=1 RealMemory=1024 State=DRAIN Reason=maintenance
PartitionName=debug Nodes=ALL Default=YES State=UP
",
    )]);
    let path = conf.slurm_conf();
    let c = Cluster::up(&["--slurm-conf", path.to_str().expect("utf-8 path")], 2);
    let nodes = c.json(&["nodes", "--json"]);
    let nodes = nodes["nodes"].as_array().expect("a list of nodes");
    assert_eq!(nodes[0]["name"], "gpu001");
    assert_eq!(nodes[0]["state"], "idle", "{}", nodes[0]);
    assert_eq!(nodes[1]["name"], "gpu002");
    assert_eq!(nodes[1]["connected"], true, "{}", nodes[1]);
    assert_eq!(nodes[1]["state"], "drained", "{}", nodes[1]);
    assert_eq!(nodes[1]["reason"], "maintenance", "{}", nodes[1]);
}

#[test]
fn nodes_bigger_than_this_machine_are_refused_before_anything_starts() {
    let big = SLURM_CONF.replace("CPUs=1 RealMemory=1024", "CPUs=4096 RealMemory=1024");
    let conf = SlurmFiles::write(&[
        ("slurm.conf", big.as_str()),
        ("gres.conf", GRES_CONF),
        ("topology.conf", TOPOLOGY_CONF),
    ]);
    let path = conf.slurm_conf();
    let path = path.to_str().expect("utf-8 path");
    let mut guard = Cluster::prepare(&["--slurm-conf", path, "--gpus-per-node", "2"], 2);
    let out = guard.inner.try_start();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "node `gpu001` (described at {path}:11) has 4096 CPUs, 1024 MiB and 2 GPUs; this \
             machine has "
        )),
        "{err}"
    );
    assert!(err.contains("1 more of the 2 nodes"), "{err}");
    assert!(
        !guard.dir().join("cadre.pid").exists(),
        "no controller was started"
    );
}

#[test]
fn cadre_cluster_checks_a_slurm_conf_and_says_where_it_is_wrong() {
    let conf = SlurmFiles::write(&[
        ("slurm.conf", SLURM_CONF),
        ("gres.conf", "Name=gpu Type=test File=/dev/nvidia[0-2]\n"),
        ("topology.conf", TOPOLOGY_CONF),
    ]);
    let here = conf.dir.path();
    let out = cadre(here, here, &["cluster", "--slurm-conf", "slurm.conf"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "cadre: error: gres.conf:1: node \"gpu001\": gres.conf gives 3 gpu:test but its \
         NodeName line (slurm.conf:10) gives 2\n"
    );
}

#[test]
fn cadre_cluster_summarises_a_slurm_conf_with_its_notes() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let conf = "examples/slurm/two-partitions-tree/slurm.conf";
    let out = cadre(&repo, &repo, &["cluster", "--slurm-conf", conf]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    insta::assert_snapshot!(text(&out.stdout));

    let out = cadre(&repo, &repo, &["cluster", "--slurm-conf", conf, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(summary["nodes"], 40);
    assert_eq!(summary["read"].as_array().map(Vec::len), Some(4));
    assert_eq!(summary["notes"].as_array().map(Vec::len), Some(7));

    let out = cadre(
        &repo,
        &repo,
        &["cluster", "--slurm-conf", conf, "--cluster", "x.toml"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "--cluster and --slurm-conf conflict"
    );
}
