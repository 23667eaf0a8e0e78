//! Kubernetes manifests run end to end on `cadre up --nodes 3`, through `cadre apply`,
//! `get`, `describe` and `delete`, as a user runs them.
//!
//! The workloads' programs are Python scripts that check the environment their kind's
//! contract promises, resolve their peers' names (which only the job's hosts file knows:
//! the tests run as root, so the agent gives each task its own mount namespace with the
//! job's hosts file over `/etc/hosts`) and open TCP connections to rank 0. One MPIJob's
//! launcher is a Python script that reads the MPI hostfile and connects to each worker
//! listed in it, and its workers serve one connection and then sleep: the job completes
//! because its launcher did, and the workers are stopped. Another is the MPI Operator's
//! own shape: workers that would run sshd, a launcher that runs OpenMPI's `mpirun` of an
//! mpi4py program (and one MPICH's `mpiexec.hydra`), whose daemons reach the workers'
//! nodes through `cadre-rsh`. A Volcano
//! Job with the `env` and `svc` plugins reads its host files at `/etc/volcano`.
//!
//! Nothing here asserts a duration; deadlines only keep a broken build from hanging.

use cadre_test_support::{free_port, running, skip_unless_ci, text, wait_until, wait_until_or};

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A cluster of cadre-test-support's harness, driven through `cadre apply` and `get`.
struct Cluster {
    inner: cadre_test_support::Cluster,
}

impl Cluster {
    fn up(nodes: u32) -> Cluster {
        Cluster::up_with(nodes, &[])
    }

    /// `cadre up --nodes N` with more options.
    fn up_with(nodes: u32, more: &[&str]) -> Cluster {
        Cluster::start(nodes, more, None)
    }

    /// `cadre up --nodes N` started, and every command run, as `user` (uid, gid): the data
    /// directory (also the jobs' working directory) is theirs.
    fn up_as(nodes: u32, user: (u32, u32)) -> Cluster {
        Cluster::start(nodes, &[], Some(user))
    }

    fn start(nodes: u32, more: &[&str], as_user: Option<(u32, u32)>) -> Cluster {
        let mut b = cadre_test_support::Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
            .nodes(nodes)
            .args(more);
        if let Some((uid, gid)) = as_user {
            b = b.as_user(uid, gid);
        }
        Cluster { inner: b.start() }
    }

    fn dir(&self) -> &Path {
        self.inner.data()
    }

    fn run_with(&self, args: &[&str], stdin: Option<&str>) -> Output {
        self.run_in(self.dir(), args, stdin, &[])
    }

    /// `cadre ARGS` in `dir` with `stdin` and more variables (`CADRE_SERVER`, ...).
    fn run_in(
        &self,
        dir: &Path,
        args: &[&str],
        stdin: Option<&str>,
        env: &[(&str, &str)],
    ) -> Output {
        let mut cmd = self.inner.command(env!("CARGO_BIN_EXE_cadre"));
        cmd.args(args)
            .current_dir(dir)
            .envs(env.iter().copied())
            .stdin(Stdio::piped());
        let mut child = cmd.spawn().expect("the cadre binary runs");
        {
            use std::io::Write;
            let mut pipe = child.stdin.take().expect("stdin");
            if let Some(text) = stdin {
                pipe.write_all(text.as_bytes()).expect("stdin written");
            }
        }
        child.wait_with_output().expect("cadre ends")
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, None)
    }

    fn log(&self) -> String {
        self.inner.log()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "cadre {args:?} failed: {}{}",
            text(&out.stderr),
            self.log()
        );
        text(&out.stdout)
    }

    /// `cadre apply -f -` of `manifest`: the job id it printed.
    fn apply(&self, manifest: &str) -> u64 {
        self.apply_with(manifest, &[])
    }

    /// `cadre apply -f -` of `manifest` with more options: the job id it printed.
    fn apply_with(&self, manifest: &str, more: &[&str]) -> u64 {
        let mut args = vec!["apply", "-f", "-"];
        args.extend_from_slice(more);
        applied_job(&self.run_with(&args, Some(manifest)))
    }

    /// `cadre apply -f -` of `manifest` from `dir` with more variables: the job id it
    /// printed.
    fn apply_in(&self, dir: &Path, manifest: &str, env: &[(&str, &str)]) -> u64 {
        applied_job(&self.run_in(dir, &["apply", "-f", "-"], Some(manifest), env))
    }

    /// The workloads as `cadre get workloads -A -o json` lists them.
    fn workloads(&self) -> Vec<Value> {
        let out = self.ok(&["get", "workloads", "-A", "-o", "json"]);
        serde_json::from_str::<Value>(&out)
            .expect("JSON")
            .as_array()
            .cloned()
            .expect("a list")
    }

    fn state(&self, job: u64) -> String {
        self.workloads()
            .iter()
            .find(|w| w["job"] == job)
            .and_then(|w| w["state"].as_str().map(String::from))
            .unwrap_or_else(|| panic!("job {job} is not listed as a workload"))
    }

    /// Waits for the job to end; its final state.
    fn wait(&self, job: u64) -> String {
        let mut s = String::new();
        wait_until_or(
            &format!("job {job} ends"),
            || {
                s = self.state(job);
                !["PENDING", "RUNNING", "PREEMPTING"].contains(&s.as_str())
            },
            || {
                let explained = self.run(&["explain", &job.to_string()]);
                format!(
                    "\n--- its state: {} ---\n{}{}{}",
                    self.state(job),
                    text(&explained.stdout),
                    self.outputs_of(job),
                    self.inner.logs()
                )
            },
        );
        s
    }

    /// Every `*-<job>-<rank>.out` file in the work directory, named, for a failure's message.
    fn outputs_of(&self, job: u64) -> String {
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(self.dir())
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        files.retain(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains(&format!("-{job}-")) && n.ends_with(".out"))
        });
        files.sort();
        files
            .iter()
            .map(|f| {
                let out = std::fs::read_to_string(f).unwrap_or_default();
                format!("\n--- {} ---\n{out}", f.display())
            })
            .collect()
    }

    /// The output of rank `rank` of job `job` of workload `name`.
    fn output(&self, name: &str, job: u64, rank: u32) -> String {
        std::fs::read_to_string(self.dir().join(format!("{name}-{job}-{rank}.out")))
            .unwrap_or_default()
    }
}

/// Python helpers every script starts with: a port of the job's own (tasks of several
/// jobs share this machine's ports), and connecting with retries while the peer starts.
const PRELUDE: &str = r#"
import os, socket, sys, time
e = os.environ
def port(i): return 31000 + int(e["SLURM_JOB_ID"]) % 1000 * 4 + i
def listen(p):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", p)); s.listen(8); return s
def connect(host, p):
    for _ in range(300):
        try: return socket.create_connection((host, p), timeout=5)
        except OSError: time.sleep(0.05)
    sys.exit("cannot reach %s:%d" % (host, p))
def check(cond, what):
    if not cond: sys.exit("contract broken: " + what)
"#;

/// The job id a successful `cadre apply` printed (`... (job N)`).
fn applied_job(out: &Output) -> u64 {
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cadre apply failed: {}{said}",
        String::from_utf8_lossy(&out.stderr)
    );
    said.trim()
        .rsplit_once("(job ")
        .and_then(|(_, id)| id.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("cadre apply printed `{said}`"))
}

fn indent(script: &str) -> String {
    format!("{PRELUDE}{script}")
        .lines()
        .map(|l| format!("              {l}\n"))
        .collect()
}

fn indexed_job() -> String {
    let script = indent(
        r#"
i = int(e["JOB_COMPLETION_INDEX"])
check(str(i) == e["SLURM_PROCID"], "JOB_COMPLETION_INDEX is the rank")
check(e["MY_POD"] == "idx-%d" % i, "fieldRef metadata.name")
mine = socket.gethostbyname("idx-%d.idx.default.svc.cluster.local" % i)
if i == 0:
    s = listen(port(0))
    got = sorted(s.accept()[0].recv(100).decode() for _ in range(2))
    print("rank 0 heard", got, flush=True)
    check(got == ["from 1", "from 2"], "every rank reached rank 0")
else:
    c = connect("idx-0.idx", port(0)); c.sendall(b"from %d" % i); c.close()
    print("rank", i, "reached idx-0.idx at", socket.gethostbyname("idx-0.idx"), "own name at", mine, flush=True)
"#,
    );
    format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: idx}}
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  template:
    spec:
      subdomain: idx
      restartPolicy: Never
      containers:
      - name: c
        image: python:3.11
        env:
        - name: MY_POD
          valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
        command:
        - python3
        - -c
        - |
{script}"
    )
}

fn pytorch_job() -> String {
    let master = indent(
        r#"
check(e["RANK"] == "0" and e["WORLD_SIZE"] == "3", "master is rank 0 of 3")
check(e["MASTER_ADDR"] == "pt-master-0", "MASTER_ADDR")
s = listen(int(e["MASTER_PORT"]))
got = sorted(s.accept()[0].recv(100).decode() for _ in range(2))
print("master heard", got, flush=True)
check(got == ["rank 1", "rank 2"], "both workers reached the master")
"#,
    );
    let worker = indent(
        r#"
check(e["RANK"] in ("1", "2") and e["RANK"] == e["PET_NODE_RANK"], "a worker's rank")
check(e["PET_NNODES"] == "3" and e["PET_MASTER_PORT"] == e["MASTER_PORT"], "PET_ variables")
c = connect(e["MASTER_ADDR"], int(e["MASTER_PORT"])); c.sendall(b"rank " + e["RANK"].encode()); c.close()
print("worker", e["RANK"], "reached", e["MASTER_ADDR"], "at", socket.gethostbyname(e["MASTER_ADDR"]), flush=True)
"#,
    );
    format!(
        "apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: pt}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch
            command:
            - python3
            - -c
            - |
{master}    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch
            command:
            - python3
            - -c
            - |
{worker}"
    )
}

fn mpi_job() -> String {
    let launcher = indent(
        r#"
check(e["K_MPI_JOB_ROLE"] == "launcher", "the launcher's role")
path = e["OMPI_MCA_orte_default_hostfile"]
check(path == "/etc/mpi/hostfile", "the hostfile where the MPI Operator mounts it")
hosts = [l.split()[0] for l in open(path)]
check(hosts == ["mpi-worker-0.mpi.default.svc", "mpi-worker-1.mpi.default.svc"], "the hostfile's workers")
for i, h in enumerate(hosts):
    c = connect(h, port(i)); print("launcher reached", h, "->", c.recv(100).decode(), flush=True); c.close()
"#,
    );
    let worker = indent(
        r#"
check(e["K_MPI_JOB_ROLE"] == "worker", "a worker's role")
i = int(e["SLURM_PROCID"]) - 1
s = listen(port(i))
c = s.accept()[0]; c.sendall(b"worker %d" % i); c.close()
print("worker", i, "served; waiting like sshd", flush=True)
time.sleep(3600)
"#,
    );
    format!(
        "apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {{name: mpi}}
spec:
  slotsPerWorker: 1
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - name: launcher
            image: mpioperator/openmpi
            command:
            - python3
            - -c
            - |
{launcher}    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: worker
            image: mpioperator/openmpi
            command:
            - python3
            - -c
            - |
{worker}"
    )
}

fn volcano_job() -> String {
    let script = indent(
        r#"
workers = open("/etc/volcano/worker.host").read().split()
check(workers == ["vc-worker-0.vc", "vc-worker-1.vc"], "the svc plugin's host file")
check(e["VC_WORKER_HOSTS"] == ",".join(workers) and e["VC_WORKER_NUM"] == "2", "VC_WORKER_*")
check(e["VC_MASTER_HOSTS"] == "vc-master-0.vc", "VC_MASTER_HOSTS")
addrs = [socket.gethostbyname(h) for h in workers]
if e["SLURM_PROCID"] == "0":
    s = listen(port(0))
    got = sorted(s.accept()[0].recv(100).decode() for _ in range(2))
    print("master heard", got, flush=True)
    check(got == ["worker 0", "worker 1"], "both workers reached the master")
else:
    c = connect(e["VC_MASTER_HOSTS"], port(0)); c.sendall(b"worker " + e["VK_TASK_INDEX"].encode()); c.close()
    print("worker", e["VK_TASK_INDEX"], "found", workers, "at", addrs, flush=True)
"#,
    );
    format!(
        "apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: vc}}
spec:
  minAvailable: 3
  plugins: {{env: [], svc: []}}
  tasks:
  - name: master
    replicas: 1
    template:
      spec:
        restartPolicy: Never
        containers:
        - name: m
          image: python:3.11
          command:
          - python3
          - -c
          - |
{script}  - name: worker
    replicas: 2
    template:
      spec:
        restartPolicy: Never
        containers:
        - name: w
          image: python:3.11
          command:
          - python3
          - -c
          - |
{script}"
    )
}

#[test]
fn workloads_run_as_gangs_with_their_names_environment_and_files() {
    let hosts_before = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let c = Cluster::up(3);
    let idx = c.apply(&indexed_job());
    let pt = c.apply(&pytorch_job());
    let mpi = c.apply(&mpi_job());
    let vc = c.apply(&volcano_job());

    for (job, name, ranks) in [
        (idx, "idx", 3),
        (pt, "pt", 3),
        (mpi, "mpi", 3),
        (vc, "vc", 3),
    ] {
        let state = c.wait(job);
        let outputs: Vec<String> = (0..ranks).map(|r| c.output(name, job, r)).collect();
        assert_eq!(
            state,
            "COMPLETED",
            "{name} (job {job}): {outputs:#?}\n{}",
            c.log()
        );
    }
    assert!(
        c.output("idx", idx, 0)
            .contains("rank 0 heard ['from 1', 'from 2']")
    );
    assert!(
        c.output("idx", idx, 2)
            .contains("rank 2 reached idx-0.idx at")
    );
    assert!(
        c.output("pt", pt, 0)
            .contains("master heard ['rank 1', 'rank 2']")
    );
    assert!(
        c.output("pt", pt, 1)
            .contains("worker 1 reached pt-master-0 at")
    );
    let launcher = c.output("mpi", mpi, 0);
    assert!(
        launcher.contains("launcher reached mpi-worker-1.mpi.default.svc -> worker 1"),
        "{launcher}"
    );
    // The workers were serving for an hour: stopped once the launcher completed.
    assert!(c.output("mpi", mpi, 2).contains("waiting like sshd"));
    // The names were the job's alone: the node's hosts file is as it was.
    assert_eq!(
        std::fs::read_to_string("/etc/hosts").unwrap_or_default(),
        hosts_before
    );

    let listed = c.ok(&["get", "workloads"]);
    for object in [
        "job.batch/idx",
        "pytorchjob.kubeflow.org/pt",
        "mpijob.kubeflow.org/mpi",
    ] {
        assert!(listed.contains(object), "{listed}");
    }
    let described = c.ok(&["describe", "mpijob", "mpi"]);
    // Times are dates in local time, not raw numbers of seconds.
    let submitted = described
        .lines()
        .find_map(|l| l.strip_prefix("Submitted:"))
        .unwrap_or_else(|| panic!("no Submitted line:\n{described}"))
        .trim();
    let date = submitted.split(' ').next().unwrap_or_default();
    assert!(
        date.len() == 19
            && date.as_bytes()[4] == b'-'
            && date.as_bytes()[10] == b'T'
            && submitted.ends_with(" ago)"),
        "{submitted}"
    );
    for line in [
        format!("Job:          {mpi}"),
        "State:        COMPLETED".to_string(),
        "Succeeds:     when the tasks of launcher have exited 0; the others are then stopped"
            .to_string(),
        "not in a container: no container runtime is configured".to_string(),
        "mpi-launcher".to_string(),
        "mpi-worker-1".to_string(),
    ] {
        assert!(
            described.contains(&line),
            "`{line}` missing in:\n{described}"
        );
    }

    // A gang bigger than the cluster starts no rank at all.
    let nodes: Value = serde_json::from_str(&c.ok(&["nodes", "--json"])).expect("JSON");
    let cores = nodes["nodes"][0]["cpus"].as_u64().expect("cpus");
    let big = c.apply(&format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: big}}
spec:
  completions: 4
  parallelism: 4
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: busybox
        command: [sh, -c, 'echo started']
        resources: {{requests: {{cpu: '{cores}'}}}}
"
    ));
    // Two scheduling passes at least: its state and reason are the scheduler's word.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(c.state(big), "PENDING");
    for rank in 0..4 {
        assert!(
            !c.dir().join(format!("big-{big}-{rank}.out")).exists(),
            "rank {rank} of a gang that cannot fit started"
        );
    }
    // Applying another manifest of a name whose job has not ended is refused; delete
    // cancels it.
    let again = c.run_with(&["apply", "-f", "-"], Some("apiVersion: batch/v1\nkind: Job\nmetadata: {name: big}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: c, image: b, command: ['true']}]\n"));
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains(&format!(
            "job.batch/big in namespace default is job {big} (PENDING) and differs from \
             this manifest: a workload's spec is immutable; delete it first"
        )),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        c.ok(&["delete", "job", "big"]).trim(),
        format!("job.batch/big deleted (job {big} cancelled)")
    );
    assert_eq!(c.state(big), "CANCELLED");
    // Its events: why it waited, who deleted it, how it ended.
    let described = c.ok(&["describe", "job", "big"]);
    for line in [
        "Warning   Pending",
        "BadConstraints: the job does not fit on the 3 eligible nodes even when they are idle",
        "Normal    Deleted",
        "cancelled by user",
        "Warning   Cancelled",
    ] {
        assert!(
            described.contains(line),
            "`{line}` missing in:\n{described}"
        );
    }
    assert!(!described.contains(" Started "), "{described}");
}

/// A Kueue ResourceFlavor, a ClusterQueue of `cpus` CPUs and 8 GiB, and LocalQueue
/// `user-queue` feeding it.
fn kueue_queues(cpus: u32) -> String {
    format!(
        "apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: default-flavor}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources:
      - {{name: cpu, nominalQuota: {cpus}}}
      - {{name: memory, nominalQuota: 8Gi}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{namespace: default, name: user-queue}}
spec: {{clusterQueue: cq}}
"
    )
}

/// A one-CPU Job through LocalQueue `user-queue` that runs until the file `go-NAME` exists
/// in the cluster's directory.
fn queued_job(name: &str) -> String {
    format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  labels: {{kueue.x-k8s.io/queue-name: user-queue}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: busybox
        command: [sh, -c, 'while [ ! -e go-{name} ]; do sleep 0.05; done']
        resources: {{requests: {{cpu: 1, memory: 1Gi}}}}
"
    )
}

/// A one-CPU Volcano Job in Volcano Queue `vq` that runs until `go-NAME` exists.
fn volcano_queued_job(name: &str) -> String {
    format!(
        "apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: {name}}}
spec:
  minAvailable: 1
  queue: vq
  tasks:
  - name: main
    replicas: 1
    template:
      spec:
        restartPolicy: Never
        containers:
        - name: c
          image: busybox
          command: [sh, -c, 'while [ ! -e go-{name} ]; do sleep 0.05; done']
          resources: {{requests: {{cpu: 1, memory: 1Gi}}}}
"
    )
}

impl Cluster {
    /// `cadre apply -f -` of queue objects alone: what it printed.
    fn apply_queues(&self, manifest: &str) -> String {
        let out = self.run_with(&["apply", "-f", "-"], Some(manifest));
        assert!(
            out.status.success(),
            "cadre apply failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// SIGKILLs the controller and waits until it has exited.
    fn kill_controller(&self) {
        let pid: i32 = std::fs::read_to_string(self.dir().join("cadre.pid"))
            .expect("cadre.pid")
            .trim()
            .parse()
            .expect("a pid");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("the controller is killed");
        wait_until("the killed controller exits", || !running(pid));
    }

    fn go(&self, name: &str) {
        std::fs::write(self.dir().join(format!("go-{name}")), "").expect("go file");
    }

    /// Waits until the job is in `state` (with `reason`, for a pending one).
    fn wait_for(&self, job: u64, state: &str, reason: Option<&str>) {
        wait_until(&format!("job {job} {state} {reason:?}"), || {
            let w = self
                .workloads()
                .into_iter()
                .find(|w| w["job"] == job)
                .unwrap_or_else(|| panic!("job {job} is not listed"));
            w["state"] == state && reason.is_none_or(|r| w["reason"] == r)
        });
    }

    /// The queue named `name` as `cadre get queues -o json` shows it.
    fn queue(&self, name: &str) -> Value {
        let list: Value =
            serde_json::from_str(&self.ok(&["get", "queues", "-o", "json"])).expect("JSON");
        list["queues"]
            .as_array()
            .and_then(|q| q.iter().find(|q| q["name"] == name).cloned())
            .unwrap_or_else(|| panic!("queue {name} is not listed: {list}"))
    }
}

#[test]
fn a_cluster_queues_quota_holds_a_second_job_back_until_the_first_ends() {
    let c = Cluster::up(3);
    // The queue objects and the first job in one file: the queues are applied first.
    let first = c.apply(&format!("{}---\n{}", kueue_queues(1), queued_job("first")));
    c.wait_for(first, "RUNNING", None);
    let second = c.apply(&queued_job("second"));
    c.wait_for(second, "PENDING", Some("QOSGrpCpuLimit"));
    let q = c.queue("cq");
    assert_eq!(
        (
            &q["source"],
            &q["admitted"],
            &q["pending"],
            &q["used"]["cpus"],
            &q["nominal"]["cpus"]
        ),
        (
            &Value::from("ClusterQueue"),
            &Value::from(1),
            &Value::from(1),
            &Value::from(1),
            &Value::from(1)
        ),
        "{q}"
    );
    let lq = c.ok(&["get", "localqueues"]);
    assert!(lq.contains("user-queue") && lq.contains("cq"), "{lq}");
    // Three idle nodes: only the quota holds it, and describe says which.
    let described = c.ok(&["describe", "job", "second"]);
    assert!(
        described.contains(
            "QOSGrpCpuLimit: queue `cq` would use 2 cpus, above its nominal quota of 1 cpu by 1 cpu"
        ),
        "{described}"
    );
    c.go("first");
    assert_eq!(c.wait(first), "COMPLETED");
    c.wait_for(second, "RUNNING", None);
    c.go("second");
    assert_eq!(c.wait(second), "COMPLETED");
    let described = c.ok(&["describe", "job", "second"]);
    let events = described
        .split_once("Events:")
        .map(|(_, e)| e.to_string())
        .unwrap_or_else(|| panic!("no events: {described}"));
    let order: Vec<&str> = ["Submitted", "Pending", "Started", "Completed"]
        .into_iter()
        .filter(|k| events.contains(&format!(" {k} ")))
        .collect();
    assert_eq!(
        order,
        ["Submitted", "Pending", "Started", "Completed"],
        "{events}"
    );
    assert!(events.contains("admitted by queue cq"), "{events}");
}

#[test]
fn kueue_and_volcano_queue_objects_applied_change_what_is_admitted() {
    let c = Cluster::up(3);
    c.apply_queues(&kueue_queues(1));
    let a = c.apply(&queued_job("a"));
    c.wait_for(a, "RUNNING", None);
    let b = c.apply(&queued_job("b"));
    c.wait_for(b, "PENDING", Some("QOSGrpCpuLimit"));
    // Raised: the waiting job starts.
    let said = c.apply_queues(&kueue_queues(2));
    assert!(
        said.contains("clusterqueue.kueue.x-k8s.io/cq configured"),
        "{said}"
    );
    assert!(
        said.contains("localqueue.kueue.x-k8s.io/user-queue unchanged"),
        "{said}"
    );
    c.wait_for(b, "RUNNING", None);
    // Lowered below what runs: nothing is stopped, the queue is over its quota and a new
    // job waits.
    c.apply_queues(&kueue_queues(1));
    let q = c.queue("cq");
    assert_eq!(
        (&q["admitted"], &q["over_quota"]),
        (&Value::from(2), &Value::from(true)),
        "{q}"
    );
    let d = c.apply(&queued_job("d"));
    c.wait_for(d, "PENDING", Some("QOSGrpCpuLimit"));
    assert_eq!(c.state(a), "RUNNING");
    assert_eq!(c.state(b), "RUNNING");
    // The ClusterQueue deleted: its waiting job stays, saying so; running ones go on.
    assert_eq!(
        c.ok(&["delete", "clusterqueue", "cq"]).trim(),
        "clusterqueue.kueue.x-k8s.io/cq deleted"
    );
    c.wait_for(d, "PENDING", Some("InvalidQueue"));
    // A new workload for it is taken and waits, saying why, as Kueue's would.
    let e = c.apply(&queued_job("e"));
    c.wait_for(e, "PENDING", Some("InvalidQueue"));
    let described = c.ok(&["describe", "job", "e"]);
    assert!(
        described.contains(
            "Inadmissible: LocalQueue `default/user-queue` feeds ClusterQueue `cq`, which does \
             not exist"
        ),
        "{described}"
    );
    for j in ["a", "b", "d", "e"] {
        c.go(j);
    }
    assert_eq!(c.wait(a), "COMPLETED");
    c.apply_queues(&kueue_queues(1));
    assert_eq!(c.wait(d), "COMPLETED");
    assert_eq!(c.wait(e), "COMPLETED");
    let described = c.ok(&["describe", "job", "e"]);
    assert!(
        described.contains("routed to ClusterQueue cq") && described.contains("Queue:        cq"),
        "{described}"
    );

    // A Volcano Queue's capability: the second job waits until it is raised.
    let vq = |cap: u32| {
        format!(
            "apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {{name: vq}}
spec: {{weight: 1, capability: {{cpu: {cap}}}}}
"
        )
    };
    // A job naming a queue not applied yet waits for it.
    let v1 = c.apply(&volcano_queued_job("v1"));
    c.wait_for(v1, "PENDING", Some("InvalidQueue"));
    assert_eq!(
        c.apply_queues(&vq(1)).trim(),
        "queue.scheduling.volcano.sh/vq created"
    );
    c.wait_for(v1, "RUNNING", None);
    let v2 = c.apply(&volcano_queued_job("v2"));
    c.wait_for(v2, "PENDING", Some("QOSGrpCpuLimit"));
    c.apply_queues(&vq(2));
    c.wait_for(v2, "RUNNING", None);
    c.go("v1");
    c.go("v2");
    assert_eq!(c.wait(v1), "COMPLETED");
    assert_eq!(c.wait(v2), "COMPLETED");
}

#[test]
fn a_workload_applied_before_its_local_queue_waits_and_starts_once_it_is_applied() {
    let c = Cluster::up(1);
    let early = c.apply(&queued_job("early"));
    c.wait_for(early, "PENDING", Some("InvalidQueue"));
    let described = c.ok(&["describe", "job", "early"]);
    assert!(
        described.contains(
            "InvalidQueue: Inadmissible: LocalQueue `user-queue` does not exist in namespace \
             `default`"
        ),
        "{described}"
    );
    // The queue objects with a quota of one CPU: the workload is routed to its ClusterQueue
    // and counted there, and the route is kept across a restart.
    c.apply_queues(&kueue_queues(1));
    c.wait_for(early, "RUNNING", None);
    // Applied again as it is, it is unchanged; changed, it is refused (a Job's template is
    // immutable), and nothing is applied.
    let again = c.run_with(&["apply", "-f", "-"], Some(&queued_job("early")));
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(
        text(&again.stdout).trim(),
        format!("job.batch/early unchanged (job {early})")
    );
    let changed = queued_job("early").replace("sleep 0.05", "sleep 0.1");
    let out = c.run_with(&["apply", "-f", "-"], Some(&changed));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!(
            "job.batch/early in namespace default is job {early} (RUNNING) and differs from this \
             manifest: a workload's spec is immutable; delete it first"
        )),
        "{}",
        text(&out.stderr)
    );
    let late = c.apply(&queued_job("late"));
    c.wait_for(late, "PENDING", Some("QOSGrpCpuLimit"));
    c.kill_controller();
    c.ok(&["up", "--detach", "--nodes", "1"]);
    c.wait_for(late, "PENDING", Some("QOSGrpCpuLimit"));
    let described = c.ok(&["describe", "job", "early"]);
    assert!(
        described.contains("Queue:        cq")
            && described.contains("its LocalQueue is applied: routed to ClusterQueue cq"),
        "{described}"
    );
    c.go("early");
    c.go("late");
    assert_eq!(c.wait(early), "COMPLETED");
    assert_eq!(c.wait(late), "COMPLETED");
}

#[test]
fn a_restarted_controller_brings_its_queues_back_before_its_jobs() {
    let c = Cluster::up(1);
    let first = c.apply(&format!("{}---\n{}", kueue_queues(1), queued_job("first")));
    c.wait_for(first, "RUNNING", None);
    let second = c.apply(&queued_job("second"));
    c.wait_for(second, "PENDING", Some("QOSGrpCpuLimit"));
    c.kill_controller();
    c.ok(&["up", "--detach", "--nodes", "1"]);
    // The running job counts in its queue again, so the second still waits for it.
    c.wait_for(second, "PENDING", Some("QOSGrpCpuLimit"));
    let q = c.queue("cq");
    assert_eq!(
        (&q["admitted"], &q["pending"]),
        (&Value::from(1), &Value::from(1)),
        "{q}"
    );
    assert_eq!(c.state(first), "RUNNING");
    c.go("first");
    c.go("second");
    assert_eq!(c.wait(first), "COMPLETED");
    assert_eq!(c.wait(second), "COMPLETED");
}

#[test]
fn a_failed_master_fails_its_pytorchjob_and_stops_the_workers() {
    let c = Cluster::up(1);
    let job = c.apply(
        "apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: broken}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: p, command: [sh, -c, 'echo master; exit 3']}]
    Worker:
      replicas: 1
      template:
        spec:
          containers: [{name: pytorch, image: p, command: [sh, -c, 'echo worker; exec sleep 3600']}]
",
    );
    assert_eq!(c.wait(job), "FAILED", "{}", c.log());
    let listed = c.workloads();
    assert_eq!(listed[0]["exit_code"], 3, "{listed:?}");
    assert!(c.output("broken", job, 1).contains("worker"));
    // The rank that failed, by its group and rank, then the job's end.
    let described = c.ok(&["describe", "pytorchjob", "broken"]);
    let events = described.split_once("Events:").map_or("", |(_, e)| e);
    assert!(
        events.contains("Warning   TasksFailed")
            && events.contains("tasks master/0 on node001 ended FAILED with exit code 3"),
        "{events}"
    );
    assert!(
        events.contains("Warning   Failed")
            && events.contains("the job ended FAILED (exit code 3)"),
        "{events}"
    );
}

#[test]
fn a_restarted_controller_still_ends_an_mpijob_with_its_launcher() {
    let c = Cluster::up(1);
    let job = c.apply(
        "apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: long}
spec:
  mpiReplicaSpecs:
    Launcher:
      template:
        spec:
          containers: [{name: l, image: m, command: [sh, -c, 'while [ ! -e go ]; do sleep 0.05; done']}]
    Worker:
      replicas: 1
      template:
        spec:
          containers: [{name: w, image: m, command: [sh, -c, 'exec sleep 3600']}]
",
    );
    wait_until(&format!("job {job} RUNNING"), || c.state(job) == "RUNNING");
    // kill -9 of the controller; `cadre up` again adopts the agents and the running job.
    c.kill_controller();
    c.ok(&["up", "--detach", "--nodes", "1"]);
    std::fs::write(c.dir().join("go"), "").expect("go");
    assert_eq!(c.wait(job), "COMPLETED", "{}", c.log());
}

/// The container runtime of the container tests (`CADRE_TEST_CONTAINER_RUNTIME`, default
/// `podman`), with the test image made offline by `scripts/container-test-image.sh`;
/// `None` (the test is skipped, saying why) where there is none or the tests do not run as
/// root (the runtime is rootful), except under CI, which must run them.
fn container_runtime() -> Option<String> {
    let line = std::env::var("CADRE_TEST_CONTAINER_RUNTIME").unwrap_or_else(|_| "podman".into());
    let skip = |why: String| skip_unless_ci("the container tests", &why);
    if !nix::unistd::geteuid().is_root() {
        return skip("the container tests run a rootful runtime, as root".into());
    }
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/container-test-image.sh");
    match Command::new("sh").arg(&script).arg(&line).output() {
        Ok(o) if o.status.success() => Some(line),
        Ok(o) => skip(format!(
            "no container runtime `{line}` with the test image: {}",
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => skip(format!("cannot run {}: {e}", script.display())),
    }
}

/// An Indexed Job of 3 ranks in the test image (busybox): each rank checks its contract
/// and the container it is in, resolves rank 0's name and sends it a line over TCP (on a
/// port off the range of `PRELUDE`'s: the tests run at once, in clusters whose first job
/// ids are the same). Each rank has a port of its own: two ranks sending to one port could
/// both land in the first listener's backlog, which takes one line and drops the other
/// (its sender, already written, does not retry), and the second listener would wait
/// for ever.
fn indexed_job_in_image() -> String {
    let script = r#"
set -eu
i=$JOB_COMPLETION_INDEX
p=$((32000 + SLURM_JOB_ID % 1000 * 4))
[ "$i" = "$SLURM_PROCID" ] || { echo "JOB_COMPLETION_INDEX is not the rank"; exit 1; }
[ "$MY_POD" = "cidx-$i" ] || { echo "fieldRef metadata.name"; exit 1; }
[ ! -e /etc/os-release ] || { echo "not in the image"; exit 1; }
echo "rank $i in $(pwd) as $(id -u) path $PATH"
grep -q "cidx-0.cidx" /etc/hosts || { echo "no job names in /etc/hosts"; exit 1; }
if [ "$i" = 0 ]; then
  for k in 1 2; do nc -l -p "$((p + k))"; echo; done > /tmp/heard
  echo "rank 0 heard" $(sort /tmp/heard | grep .)
else
  until echo "from-$i" | nc -w 2 cidx-0.cidx "$((p + i))"; do sleep 0.1; done
  echo "rank $i reached cidx-0.cidx"
fi
"#;
    let script: String = script.lines().map(|l| format!("          {l}\n")).collect();
    format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: cidx}}
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  template:
    spec:
      subdomain: cidx
      restartPolicy: Never
      containers:
      - name: c
        image: localhost/cadre-test:1
        imagePullPolicy: Never
        env:
        - name: MY_POD
          valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
        command:
        - /bin/sh
        - -c
        - |
{script}"
    )
}

#[test]
fn with_a_container_runtime_workloads_run_in_their_images() {
    let Some(runtime) = container_runtime() else {
        return;
    };
    let c = Cluster::up_with(3, &["--container-runtime", &runtime]);
    // Every node reports its runtime, and carries the feature workloads in images need.
    let nodes: Value = serde_json::from_str(&c.ok(&["nodes", "--json"])).expect("JSON");
    for n in nodes["nodes"].as_array().expect("nodes") {
        assert!(
            n["container_runtime"]
                .as_str()
                .is_some_and(|v| v.contains("version")),
            "{n}"
        );
        assert!(
            n["features"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f == "container-runtime"),
            "{n}"
        );
    }

    let job = c.apply(&indexed_job_in_image());
    assert_eq!(
        c.wait(job),
        "COMPLETED",
        "{}\n{}\n{}",
        c.output("cidx", job, 0),
        c.output("cidx", job, 1),
        c.output("cidx", job, 2)
    );
    let rank0 = c.output("cidx", job, 0);
    // The image's working directory and PATH, the submitter's uid (root here).
    assert!(
        rank0.starts_with("rank 0 in /work as 0 path /bin\n"),
        "{rank0}"
    );
    assert!(rank0.ends_with("rank 0 heard from-1 from-2\n"), "{rank0}");
    assert!(
        c.output("cidx", job, 2)
            .ends_with("rank 2 reached cidx-0.cidx\n"),
        "{}",
        c.output("cidx", job, 2)
    );
    let said = c.ok(&["describe", "job", "cidx"]);
    assert!(
        said.contains("Runs:         in containers, each task in its group's image"),
        "{said}"
    );
    assert!(
        said.contains("image:    localhost/cadre-test:1 (never pulled)"),
        "{said}"
    );
    assert!(
        said.contains("in:       (the image's working directory)"),
        "{said}"
    );

    // No command: the image's entrypoint, with the container's args.
    let entry = c.apply(
        "apiVersion: batch/v1
kind: Job
metadata: {name: entry}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: c, image: 'localhost/cadre-test:1', imagePullPolicy: Never, args: [hello, world]}
",
    );
    assert_eq!(c.wait(entry), "COMPLETED");
    assert_eq!(
        c.output("entry", entry, 0),
        "from-entrypoint RANK= hello world\n"
    );

    // The same cluster still runs a workload on the host when asked.
    let onhost = c.apply_with(
        "apiVersion: batch/v1
kind: Job
metadata: {name: onhost}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: c, image: 'localhost/cadre-test:1', command: [sh, -c, 'test -e /etc/os-release && echo on the host']}
",
        &["--run-in", "host"],
    );
    assert_eq!(c.wait(onhost), "COMPLETED");
    assert_eq!(c.output("onhost", onhost, 0), "on the host\n");
    let said = c.ok(&["describe", "job", "onhost"]);
    assert!(said.contains("applied with `--run-in host`"), "{said}");

    // An MPIJob in its images: mpirun in the launcher's container reaches the workers'
    // containers through cadre-rsh (the node's cadre, mounted), which starts its daemons
    // inside them; the workers' sshd is not run.
    let mpi_image =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/container-mpi-image.sh");
    let built = Command::new("sh")
        .arg(&mpi_image)
        .arg(&runtime)
        .output()
        .expect("the MPI image script runs");
    assert!(
        built.status.success(),
        "the MPI test image: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mpi = c.apply(
        &sshd_mpi_job(
            "cpi",
            "OpenMPI",
            "[mpirun, --allow-run-as-root, -n, '2', python3, /opt/cadre/sum.py]",
        )
        .replace(
            "image: mpioperator/mpi-pi:openmpi",
            "image: localhost/cadre-mpi:1\n            imagePullPolicy: Never",
        ),
    );
    let state = c.wait(mpi);
    let out = c.output("cpi", mpi, 0);
    assert_eq!(state, "COMPLETED", "{out}\n{}", c.log());
    let described = c.ok(&["describe", "mpijob", "cpi"]);
    for r in 0..2 {
        let want = format!(
            "rank {r} of 2 on {} sum 3",
            described_node(&described, &format!("cpi-worker-{r}"))
        );
        assert!(out.lines().any(|l| l == want), "no `{want}` in:\n{out}");
    }
    assert!(
        described.contains("inside the workers' containers")
            && described.contains("their containers wait for the daemons"),
        "{described}"
    );

    // No container is left behind. (Once, in a clean-clone CI run beside three benchmark
    // processes, a worker's container of the MPIJob was left, `Exited (-1)`, for good; the
    // agents' logs say whether its removal failed.)
    let words: Vec<&str> = runtime.split_whitespace().collect();
    let left = Command::new(words[0])
        .args(&words[1..])
        .args(["ps", "--all", "--format", "{{.Names}}"])
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&left.stdout);
    assert!(
        !names.lines().any(|n| [job, entry, mpi]
            .iter()
            .any(|j| n.starts_with("cadre-") && n.contains(&format!("-job{j}.")))),
        "{names}{}",
        c.inner.logs()
    );
}

/// The command lines of every process of the machine that names `needle` (each as its
/// pid and words), read from `/proc/*/cmdline`, which any local user may read.
fn command_lines_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // A process may end meanwhile.
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let words = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if words.contains(needle) {
            found.push(format!("{}: {words}", name.to_string_lossy()));
        }
    }
    found
}

/// An MPIJob in the test image: a launcher that prints its job token and `API_KEY`, then
/// waits to be deleted; one worker whose sshd waits for the daemons.
fn secret_mpi_job(name: &str, secret: &str) -> String {
    format!(
        "apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {{name: {name}}}
spec:
  slotsPerWorker: 1
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - name: l
            image: localhost/cadre-test:1
            imagePullPolicy: Never
            env:
            - {{name: API_KEY, value: '{secret}'}}
            command: [/bin/sh, -c, 'echo \"token=$CADRE_TOKEN\"; echo \"key=$API_KEY\"; sleep 600']
    Worker:
      replicas: 1
      template:
        spec:
          containers:
          - name: w
            image: localhost/cadre-test:1
            imagePullPolicy: Never
            command: [/usr/sbin/sshd, -De]
"
    )
}

/// Regression: a container task's variables were `--env NAME=VALUE` words of the root
/// runtime's command line, which every local user reads in `/proc/PID/cmdline`: the job's
/// token (an MPIJob launcher's `CADRE_TOKEN`) and every value of the manifest.
#[test]
fn a_container_s_token_and_secrets_are_on_no_command_line() {
    let Some(runtime) = container_runtime() else {
        return;
    };
    let c = Cluster::up_with(2, &["--container-runtime", &runtime]);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_nanos();
    let secret = format!("not-on-argv-{}-{nanos}", std::process::id());
    let job = c.apply(&secret_mpi_job("argv", &secret));
    let mut said = String::new();
    wait_until("the launcher starts", || {
        said = c.output("argv", job, 0);
        said.lines().any(|l| l.starts_with("key="))
    });
    // Both reach the task, in its container.
    let value = |name: &str| {
        said.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_default()
            .to_string()
    };
    let token = value("token");
    assert!(
        token.starts_with(&format!("cadre-job-{job}-")),
        "token `{token}` in:\n{said}"
    );
    assert_eq!(value("key"), secret, "{said}");
    // While the containers run, no process of the machine has either on its command line.
    for needle in [&secret, &token] {
        let found = command_lines_naming(needle);
        assert!(
            found.is_empty(),
            "`{needle}` is on command lines:\n{found:#?}"
        );
    }
    c.ok(&["delete", "mpijob", "argv"]);
    assert_eq!(c.wait(job), "CANCELLED");
}

/// Regression: a root agent's runtime read a workload's image from any path of the node
/// the manifest named (`oci-archive:PATH`), also one its user could not read, and loaded
/// it into the node's shared image store under the names the file chose. A job not of
/// root naming the node's files is now held with the reason, even for a file its user
/// may read, and the runtime never sees it.
#[test]
fn an_image_from_the_node_s_files_holds_a_job_not_of_root() {
    let Some(runtime) = container_runtime() else {
        return;
    };
    let addr = format!("127.0.0.1:{}", free_port());
    let c = Cluster::up_with(
        1,
        &[
            "--container-runtime",
            &runtime,
            "--listen",
            &addr,
            "--insecure",
        ],
    );
    // The user's own, which they may read (the runtime would load it as root).
    let files = tempfile::tempdir().expect("temporary directory");
    std::fs::set_permissions(files.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let archive = files.path().join("image.tar");
    std::fs::write(&archive, "not an archive").expect("archive written");
    std::os::unix::fs::chown(&archive, Some(65534), Some(65534)).expect("chown");
    let token: Value =
        serde_json::from_str(&c.ok(&["token", "create", "--user", "nobody", "--json"]))
            .expect("token JSON");
    let token = token["token"].as_str().expect("the secret");
    let manifest = format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: peek}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - {{name: c, image: 'oci-archive:{}', command: [cat, /etc/hostname]}}
",
        archive.display()
    );
    // Applied from a directory nobody may write to: the task's output can be opened.
    let submit = tempfile::tempdir().expect("temporary directory");
    std::fs::set_permissions(submit.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let server = format!("http://{addr}");
    let job = c.apply_in(
        submit.path(),
        &manifest,
        &[("CADRE_SERVER", &server), ("CADRE_TOKEN", token)],
    );
    let mut reason = String::new();
    wait_until(&format!("job {job} held"), || {
        let jobs: Value = serde_json::from_str(&c.ok(&["jobs", "--json"])).expect("JSON");
        let this = jobs["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .find(|j| j["id"] == job)
            .cloned()
            .unwrap_or_default();
        assert_ne!(
            this["state"], "FAILED",
            "the runtime tried the image: {this}"
        );
        reason = this["reason"].as_str().unwrap_or_default().to_string();
        reason.starts_with("launch failed requeued held")
    });
    let want = format!(
        "the image `oci-archive:{}` is read through the `oci-archive` transport, from the node's own files or stores, which only root's jobs may use",
        archive.display()
    );
    assert!(reason.contains(&want), "{reason}");
}

#[test]
fn apply_in_containers_without_a_runtime_is_refused_and_says_how_to_go_on() {
    let c = Cluster::up(1);
    let out = c.run_with(
        &["apply", "-f", "-", "--run-in", "container"],
        Some(&indexed_job_in_image()),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no node of the cluster has a container runtime")
            && err.contains("--run-in host"),
        "{err}"
    );
}

/// Debian's Python, which has Debian's mpi4py (python3-mpi4py, built on its OpenMPI).
const MPI_PYTHON: &str = "/usr/bin/python3";

/// An MPI program: every rank adds its rank + 1 with an allreduce and says where it ran
/// (the node's name, from its step's `SLURMD_NODENAME`).
const MPI_SUM: &str = r#"
import os
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1, op=MPI.SUM)
print("rank %d of %d on %s sum %d" % (comm.Get_rank(), comm.Get_size(), os.environ.get("SLURMD_NODENAME", "?"), total), flush=True)
"#;

/// `MPI_SUM` written into `dir`; `None` (the test is skipped, saying why) where OpenMPI,
/// mpi4py and MPICH are not installed, except under CI, which installs them.
fn mpi_program(dir: &Path) -> Option<std::path::PathBuf> {
    let program = dir.join("sum.py");
    std::fs::write(&program, MPI_SUM).expect("program written");
    let found = Command::new(MPI_PYTHON)
        .args(["-c", "import mpi4py.MPI"])
        .output();
    let why = match found {
        Ok(o)
            if o.status.success()
                && Path::new("/usr/bin/mpirun").exists()
                && Path::new("/usr/bin/mpiexec.hydra").exists() =>
        {
            return Some(program);
        }
        Ok(o) => format!(
            "no OpenMPI with mpi4py and MPICH (Debian's openmpi-bin, python3-mpi4py, mpich): {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("no {MPI_PYTHON}: {e}"),
    };
    skip_unless_ci("the MPI test", &why)
}

/// The node `cadre describe` says the pod `pod` runs on.
fn described_node(described: &str, pod: &str) -> String {
    described
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(pod))
        .and_then(|l| l.split(" on ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("describe lists no {pod}:\n{described}"))
        .to_string()
}

/// An MPIJob named `name` as the MPI Operator's examples write it: 2 workers that run
/// sshd, one per node (two OpenMPI daemons of one job on one host share its session
/// directory, see docs/kubernetes.md: about one run in seven of two such jobs at once then
/// hung), a launcher whose command is `launcher` (YAML flow list).
fn sshd_mpi_job(name: &str, implementation: &str, launcher: &str) -> String {
    format!(
        "apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {{name: {name}}}
spec:
  slotsPerWorker: 1
  mpiImplementation: {implementation}
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - name: mpi-launcher
            image: mpioperator/mpi-pi:openmpi
            command: {launcher}
            resources: {{limits: {{cpu: 1}}}}
    Worker:
      replicas: 2
      template:
        spec:
          affinity:
            podAntiAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
              - labelSelector:
                  matchLabels: {{training.kubeflow.org/replica-type: worker}}
                topologyKey: kubernetes.io/hostname
          containers:
          - name: mpi-worker
            image: mpioperator/mpi-pi:openmpi
            command: [/usr/sbin/sshd]
            args: [-De, -f, /home/mpiuser/.sshd_config]
            resources: {{limits: {{cpu: 1}}}}
"
    )
}

#[test]
fn an_mpijob_s_mpirun_starts_its_ranks_on_its_workers_nodes_through_cadre_rsh() {
    let c = Cluster::up(3);
    let Some(program) = mpi_program(c.dir()) else {
        return;
    };
    // OpenMPI's mpirun of an mpi4py allreduce, and MPICH's Hydra (Debian's mpich) of a
    // shell line: each rank says where it ran.
    let openmpi = c.apply(&sshd_mpi_job(
        "pi",
        "OpenMPI",
        &format!(
            "[mpirun, --allow-run-as-root, -n, '2', {MPI_PYTHON}, {}]",
            program.display()
        ),
    ));
    let hydra = c.apply(&sshd_mpi_job(
        "hy",
        "MPICH",
        "[mpiexec.hydra, -n, '2', sh, -c, 'echo rank $PMI_RANK on $SLURM_STEP_NODELIST']",
    ));
    let sacct = c.dir().join("sacct");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_cadre"), &sacct).expect("sacct link");
    for (job, name, line, daemon) in [
        (openmpi, "pi", "rank {r} of 2 on {node} sum 3", "orted"),
        (hydra, "hy", "rank {r} on {node}", "hydra_pmi_proxy"),
    ] {
        let state = c.wait(job);
        let out = c.output(name, job, 0);
        assert_eq!(state, "COMPLETED", "{name}: {out}\n{}", c.log());
        // Where describe says each worker runs, its rank ran.
        let described = c.ok(&["describe", "mpijob", name]);
        let node_of = |r: u32| described_node(&described, &format!("{name}-worker-{r}"));
        for r in 0..2 {
            let want = line
                .replace("{r}", &r.to_string())
                .replace("{node}", &node_of(r));
            assert!(
                out.lines().any(|l| l == want),
                "{name}: no `{want}` in:\n{out}"
            );
        }
        assert!(
            described.contains("through cadre-rsh"),
            "describe says how the workers are reached:\n{described}"
        );
        // The daemons ran as steps of the job, one on each worker's node, and completed.
        let out = Command::new(&sacct)
            .args([
                "-j",
                &job.to_string(),
                "-n",
                "-P",
                "--format=JobID,JobName,State,NodeList",
            ])
            .env("CADRE_DATA_DIR", c.dir())
            .output()
            .expect("sacct runs");
        let steps = String::from_utf8_lossy(&out.stdout);
        let mut daemons: Vec<String> = steps
            .lines()
            .filter(|l| l.contains(&format!("|{daemon}|")))
            .map(|l| l.split_once('|').map_or(l, |(_, r)| r).to_string())
            .collect();
        daemons.sort();
        let mut want: Vec<String> = (0..2)
            .map(|r| format!("{daemon}|COMPLETED|{}", node_of(r)))
            .collect();
        want.sort();
        assert_eq!(daemons, want, "{name}: {steps}");
        // What the daemons left running ended with the job: no cgroup of it is left on any
        // node (the workers' nodes hold the job without a task of their own).
        wait_until(&format!("{name}: no cgroup of job {job} is left"), || {
            job_cgroups_left(&c, job).is_empty()
        });
    }
}

/// The cgroups of job `job` still under each agent's cgroup directory (as its state
/// directory's `cgroup` record names it); none where agents run without cgroups.
fn job_cgroups_left(c: &Cluster, job: u64) -> Vec<std::path::PathBuf> {
    let nodes = c.inner.run_dir().join("nodes");
    let mut left = Vec::new();
    for node in std::fs::read_dir(nodes).into_iter().flatten().flatten() {
        let Ok(record) = std::fs::read_to_string(node.path().join("cgroup")) else {
            continue;
        };
        let dir = std::path::PathBuf::from(record.trim());
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with(&format!("job{job}."))
            {
                left.push(e.path());
            }
        }
    }
    left
}

/// An Indexed Job of 2 ranks, one per node, whose ranks say who they run as, where their
/// peers' names resolve, and whether they were handed a hosts file to read themselves.
const NAMES_JOB: &str = "apiVersion: batch/v1
kind: Job
metadata: {name: nm}
spec:
  completions: 2
  parallelism: 2
  completionMode: Indexed
  template:
    metadata: {labels: {app: nm}}
    spec:
      subdomain: nm
      restartPolicy: Never
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: nm}}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: c
        image: busybox
        command: [sh, -c, 'echo uid $(id -u); getent hosts nm-0.nm nm-1.nm.default.svc || echo unresolved; echo hosts-file ${CADRE_HOSTS_FILE:-none}']
";

#[test]
fn a_cluster_not_run_by_root_resolves_its_tasks_names_in_user_namespaces() {
    // Root runs the cluster as `nobody`; anyone else runs it as themselves.
    let user = nix::unistd::geteuid().is_root().then_some((65534, 65534));
    let c = match user {
        Some(user) => Cluster::up_as(2, user),
        None => Cluster::up(2),
    };
    let agents = std::fs::read_to_string(c.dir().join("agents/node001.log")).unwrap_or_default();
    if agents.contains("cannot make user namespaces") {
        skip_unless_ci::<()>(
            "the user-namespace test",
            "this machine does not let users make user namespaces",
        );
        return;
    }
    let job = c.apply(NAMES_JOB);
    assert_eq!(c.wait(job), "COMPLETED", "{}", c.log());
    let described = c.ok(&["describe", "job", "nm"]);
    let uid = nix::unistd::geteuid().as_raw();
    let uid = user.map_or(uid, |(u, _)| u);
    for rank in 0..2 {
        let out = c.output("nm", job, rank);
        assert!(out.contains(&format!("uid {uid}\n")), "rank {rank}: {out}");
        // `cadre up`'s node00N is 127.0.0.(N+1); each name resolves to its rank's node.
        for (peer, name) in [(0, "nm-0.nm"), (1, "nm-1.nm.default.svc")] {
            let node = described_node(&described, &format!("nm-{peer}"));
            let n: u32 = node.trim_start_matches("node").parse().expect("node00N");
            let address = format!("127.0.0.{}", n + 1);
            assert!(
                out.lines()
                    .any(|l| l.starts_with(&address) && l.split_whitespace().any(|w| w == name)),
                "rank {rank}: {name} should resolve to {address} ({node}):\n{out}"
            );
        }
        assert!(out.contains("hosts-file none"), "rank {rank}: {out}");
    }
}

/// An object named by `metadata.generateName` (as many published examples are) gets a name
/// of its own on each apply: the prefix and five letters and digits.
#[test]
fn generate_name_gives_each_apply_a_name_of_its_own() {
    let c = Cluster::up(1);
    let manifest = "apiVersion: batch/v1
kind: Job
metadata: {generateName: gen-}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: c, image: busybox, command: [sh, -c, 'echo job $(hostname) ok']}
";
    let first = c.apply(manifest);
    let second = c.apply(manifest);
    assert_ne!(first, second);
    for job in [first, second] {
        assert_eq!(c.wait(job), "COMPLETED", "{}", c.log());
    }
    let names: Vec<String> = c
        .workloads()
        .iter()
        .filter_map(|w| w["name"].as_str().map(str::to_string))
        .filter(|n| n.starts_with("gen-"))
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_ne!(names[0], names[1], "{names:?}");
    for n in &names {
        let suffix = n.strip_prefix("gen-").unwrap_or_default();
        assert!(
            suffix.len() == 5
                && suffix
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
            "{n}"
        );
    }
}

/// Regression: on the host, a container's program was looked up in a fixed
/// `/usr/local/bin:/usr/bin:/bin`, so `torchrun` of the user's virtual environment was not
/// found and the job was held. It is looked up on the `PATH` the user applied with.
#[test]
fn a_program_on_the_host_is_found_on_the_path_it_was_applied_with() {
    use std::os::unix::fs::PermissionsExt;
    let c = Cluster::up(1);
    let venv = tempfile::tempdir().expect("temporary directory");
    let bin = venv.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let prog = bin.join("cadre-venv-prog");
    std::fs::write(&prog, "#!/bin/sh\necho found in the venv\n").expect("program written");
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let manifest = "apiVersion: batch/v1
kind: Job
metadata: {name: venv}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: c, image: python, command: [cadre-venv-prog]}
";
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let job = c.apply_in(c.dir(), manifest, &[("PATH", &path)]);
    assert_eq!(c.wait(job), "COMPLETED", "{}", c.log());
    assert_eq!(c.output("venv", job, 0), "found in the venv\n");
}

/// `cadre get pods`, `cadre logs` and `cadre wait --for` as `kubectl` users run them on an
/// Indexed Job whose two ranks print a line a step, waiting for a flag file between steps.
#[test]
fn ranks_are_pods_whose_logs_and_conditions_read_as_kubectl_s() {
    let c = Cluster::up(2);
    let flag = c.dir().join("logs-go");
    let manifest = format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: talk}}
spec:
  completions: 2
  parallelism: 2
  completionMode: Indexed
  template:
    metadata: {{labels: {{app: talker}}}}
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: [sh, -c, 'echo rank $JOB_COMPLETION_INDEX first; while [ ! -e {} ]; do sleep 0.1; done; echo rank $JOB_COMPLETION_INDEX last']
",
        flag.display()
    );
    let job = c.apply(&manifest);
    wait_until("both ranks printed their first line", || {
        (0..2).all(|r| c.output("talk", job, r).contains("first"))
    });
    // Pods: each rank with the labels Kubernetes sets, Running on its node.
    let pods: Value =
        serde_json::from_str(&c.ok(&["get", "pods", "-l", "app=talker", "-o", "json"]))
            .expect("JSON");
    let pods = pods.as_array().expect("a list");
    assert_eq!(pods.len(), 2, "{pods:?}");
    for (i, p) in pods.iter().enumerate() {
        assert_eq!(p["name"], format!("talk-{i}"), "{p}");
        assert_eq!(p["status"], "Running", "{p}");
        assert_eq!(p["labels"]["job-name"], "talk", "{p}");
        assert_eq!(
            p["labels"]["batch.kubernetes.io/job-completion-index"],
            i.to_string(),
            "{p}"
        );
    }
    assert!(
        pods.iter()
            .all(|p| p["node"].as_str().is_some_and(|n| n.starts_with("node")))
    );
    let table = c.ok(&[
        "get",
        "pods",
        "-l",
        "batch.kubernetes.io/job-completion-index in (1)",
    ]);
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains("talk-1") && !table.contains("talk-0"),
        "{table}"
    );
    assert!(
        table.contains("1/1") && table.contains("Running"),
        "{table}"
    );
    // One pod's log, while it runs, read from its node's agent.
    let one = c.ok(&["logs", "pod/talk-1"]);
    assert_eq!(one, "rank 1 first\n");
    // The workload's: every rank, prefixed, followed until the ranks end.
    let mut follow = c
        .inner
        .command(env!("CARGO_BIN_EXE_cadre"))
        .args(["logs", "-f", "job/talk"])
        .current_dir(c.dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cadre logs -f");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        follow.try_wait().expect("its status").is_none(),
        "logs -f ended while its ranks run"
    );
    std::fs::write(&flag, "").expect("the flag");
    let out = follow.wait_with_output().expect("cadre logs -f ends");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    for r in 0..2 {
        for what in ["first", "last"] {
            let line = format!("[pod/talk-{r}/main] rank {r} {what}\n");
            assert!(printed.contains(&line), "{line:?} missing:\n{printed}");
        }
    }
    let waited = c.run(&[
        "wait",
        "--for=condition=Complete",
        "job/talk",
        "--timeout",
        "120",
    ]);
    assert!(waited.status.success(), "{}", text(&waited.stderr));
    assert_eq!(text(&waited.stdout), "job.batch/talk condition met\n");
    let failed = c.run(&["wait", "--for=condition=Failed", "job/talk"]);
    assert_eq!(failed.status.code(), Some(1));
    assert!(
        text(&failed.stderr).contains("ended COMPLETED"),
        "{}",
        text(&failed.stderr)
    );
    assert_eq!(c.ok(&["logs", "talk-0", "--tail", "1"]), "rank 0 last\n");
    // Bad input says what was wrong.
    let bad = c.run(&["logs", "-l", "app in talker"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        text(&bad.stderr).contains("parentheses"),
        "{}",
        text(&bad.stderr)
    );
    let bad = c.run(&["logs", "pod/talk-0", "-c", "sidecar"]);
    assert!(
        text(&bad.stderr).contains("container sidecar is not valid for pod talk-0"),
        "{}",
        text(&bad.stderr)
    );
    let bad = c.run(&["wait", "job/talk"]);
    assert!(
        text(&bad.stderr).contains("--for=condition"),
        "{}",
        text(&bad.stderr)
    );
}

/// The virtual environment with PyPI's `torch` (`$CADRE_TEST_TORCH`, its `bin` directory,
/// which .ci/run makes once and caches).
fn torch_bin() -> Option<std::path::PathBuf> {
    let bin = std::env::var_os("CADRE_TEST_TORCH").map(std::path::PathBuf::from);
    match bin {
        Some(b) if b.join("torchrun").is_file() => Some(b),
        _ => skip_unless_ci(
            "the PyTorch tests",
            "CADRE_TEST_TORCH names no virtual environment with torchrun",
        ),
    }
}

/// Kueue's DDP lab, written as its tutorials write it: a ResourceFlavor, a ClusterQueue of
/// 4 CPUs, a LocalQueue, a headless Service and an Indexed Job of two ranks whose
/// `torchrun` meets over c10d at `<job>-0.<svc>` (each rank with its pod's host name, so
/// that rank 0 hosts the store), all in one file.
fn ddp_lab(job: &str, ranks: u32, train: &Path, port: u16) -> Vec<String> {
    let mut docs: Vec<String> = kueue_queues(4).split("---\n").map(str::to_string).collect();
    docs.push(format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {job}-svc}}
spec:
  clusterIP: None
  selector: {{job-name: {job}}}
  ports: [{{name: rdzv, port: {port}}}]
"
    ));
    docs.push(format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: {job}
  labels: {{kueue.x-k8s.io/queue-name: user-queue}}
spec:
  completions: {ranks}
  parallelism: {ranks}
  completionMode: Indexed
  template:
    spec:
      subdomain: {job}-svc
      restartPolicy: Never
      containers:
      - name: trainer
        image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
        command:
        - torchrun
        - --nnodes={ranks}
        - --nproc_per_node=1
        - --node_rank=$(JOB_COMPLETION_INDEX)
        - --rdzv_backend=c10d
        - --rdzv_endpoint={job}-0.{job}-svc:{port}
        - {}
        resources: {{requests: {{cpu: 1, memory: 1Gi}}}}
",
        train.display()
    ));
    docs
}

#[test]
fn kueue_s_ddp_lab_meets_over_c10d_with_real_pytorch_and_a_gang_over_quota_starts_no_rank() {
    let Some(torch) = torch_bin() else { return };
    let c = Cluster::up(3);
    let train = c.dir().join("train.py");
    std::fs::write(
        &train,
        "import socket, torch, torch.distributed as dist
dist.init_process_group('gloo')
r, w = dist.get_rank(), dist.get_world_size()
t = torch.tensor([r + 1.0])
dist.all_reduce(t)
dist.barrier()
host = socket.gethostname()
fqdn = f'{host}.ddp-svc.default.svc.cluster.local'
print(f'rank {r} of {w} on {host} ({fqdn} is {socket.gethostbyname(fqdn)}) sum {t.item():.0f}', flush=True)
dist.destroy_process_group()
",
    )
    .expect("train.py");
    let path = format!(
        "{}:{}",
        torch.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let env = [("PATH", path.as_str())];
    // Applied in reverse order: the Job first, then its Service, then its queues.
    let reversed: Vec<String> = ddp_lab("ddp", 2, &train, 29517).into_iter().rev().collect();
    let out = c.run_in(
        c.dir(),
        &["apply", "-f", "-"],
        Some(&reversed.join("---\n")),
        &env,
    );
    let said = text(&out.stdout);
    assert!(out.status.success(), "{}{said}", text(&out.stderr));
    assert!(said.contains("service/ddp-svc created"), "{said}");
    let job = applied_job(&out);
    assert_eq!(c.wait(job), "COMPLETED", "{}", c.outputs_of(job));
    for r in 0..2 {
        let o = c.output("ddp", job, r);
        assert!(
            o.contains(&format!(
                "rank {r} of 2 on ddp-{r} (ddp-{r}.ddp-svc.default.svc.cluster.local is "
            )) && o.contains(") sum 3\n"),
            "rank {r}:\n{o}"
        );
    }
    let logs = c.ok(&["logs", "-l", "job-name=ddp"]);
    for r in 0..2 {
        assert!(
            logs.contains(&format!("[pod/ddp-{r}/trainer] rank {r} of 2 on ddp-{r} ")),
            "{logs}"
        );
    }
    let described = c.ok(&["describe", "job", "ddp"]);
    assert!(
        described.contains("ddp-svc (headless): selector job-name=ddp"),
        "{described}"
    );
    // In file order this time, 6 ranks of a CPU each over the queue's 4: none starts.
    let big = ddp_lab("ddp6", 6, &train, 29518).join("---\n");
    let out = c.run_in(c.dir(), &["apply", "-f", "-"], Some(&big), &env);
    let six = applied_job(&out);
    wait_until("the 6-rank job waits on its quota", || {
        c.workloads()
            .iter()
            .any(|w| w["job"] == six && w["reason"].as_str().is_some_and(|r| r.contains("QOS")))
    });
    std::thread::sleep(Duration::from_secs(2));
    let pods: Value =
        serde_json::from_str(&c.ok(&["get", "pods", "-l", "job-name=ddp6", "-o", "json"]))
            .expect("JSON");
    let pods = pods.as_array().expect("pods");
    assert_eq!(pods.len(), 6, "{pods:?}");
    assert!(pods.iter().all(|p| p["status"] == "Pending"), "{pods:?}");
    // A Service applied on its own, selecting no pod yet, is kept for the workloads to come.
    let lone = "apiVersion: v1
kind: Service
metadata: {name: alone}
spec:
  selector: {app: nothing}
  ports: [{port: 80}]
";
    let out = c.run_with(&["apply", "-f", "-"], Some(lone));
    assert!(
        text(&out.stdout).contains("service/alone created"),
        "{}",
        text(&out.stderr)
    );
    let listed = c.ok(&["get", "svc"]);
    assert!(listed.contains("app=nothing"), "{listed}");
}

/// Regression: launchers written for the MPI Operator's sshd wait for each worker with
/// `ssh <worker> hostname` before `mpirun`; with no ssh to the workers they waited for
/// ever. The launcher's `ssh` is cadre's rsh agent, and what it starts in a worker's pod
/// has the pod's host name.
#[test]
fn an_mpijob_launcher_that_waits_for_its_workers_over_ssh_reaches_them() {
    let c = Cluster::up(3);
    if mpi_program(c.dir()).is_none() {
        return;
    }
    // MPICH's Hydra: two OpenMPI launches at once on this one machine (this test's and the
    // one above, which run side by side) now and then left one `mpirun` never hearing
    // from its daemons.
    let job = c.apply(&sshd_mpi_job(
        "sw",
        "MPICH",
        "[sh, -c, 'for w in $(cut -d: -f1 /etc/mpi/hostfile); do until ssh -o ConnectTimeout=2 $w true; do sleep 1; done; echo reached $w; done; exec mpiexec.hydra -n 2 sh -c \"echo rank on \\$(hostname)\"']",
    ));
    let state = c.wait(job);
    let out = c.output("sw", job, 0);
    assert_eq!(state, "COMPLETED", "{out}\n{}", c.log());
    for r in 0..2 {
        assert!(
            out.contains(&format!("reached sw-worker-{r}.sw.default.svc\n")),
            "{out}"
        );
    }
    // Each rank, started by Hydra's proxy in its worker's pod, has that pod's host name.
    for r in 0..2 {
        assert!(out.contains(&format!("rank on sw-worker-{r}\n")), "{out}");
    }
}

/// `emptyDir` volumes as training manifests use them: `/dev/shm` as a tmpfs of the size
/// NCCL needs (`medium: Memory`, `sizeLimit`), and a scratch directory on disk, each the
/// pod's own; a task with volumes cannot gain privileges. Other volume sources are refused
/// by name.
#[test]
fn empty_dir_volumes_are_each_rank_s_own_and_shm_is_sized() {
    let c = Cluster::up(1);
    let manifest = "apiVersion: batch/v1
kind: Job
metadata: {name: vols}
spec:
  completions: 2
  parallelism: 2
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      volumes:
      - {name: dshm, emptyDir: {medium: Memory, sizeLimit: 64Mi}}
      - {name: scratch, emptyDir: {}}
      containers:
      - name: c
        image: busybox
        command: [sh, -c, 'df -B1 --output=size /dev/shm | tail -n 1 | tr -d \" \"; ls /mnt; echo $JOB_COMPLETION_INDEX > /mnt/mine; cat /mnt/mine; grep NoNewPrivs /proc/self/status']
        volumeMounts:
        - {name: dshm, mountPath: /dev/shm}
        - {name: scratch, mountPath: /mnt}
";
    let before: Vec<_> = std::fs::read_dir("/mnt")
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
        .unwrap_or_default();
    let job = c.apply(manifest);
    assert_eq!(c.wait(job), "COMPLETED", "{}", c.outputs_of(job));
    for r in 0..2 {
        // Its own shm of 64 MiB, its own empty scratch (each rank sees only its file).
        assert_eq!(
            c.output("vols", job, r),
            format!("67108864\n{r}\nNoNewPrivs:\t1\n"),
            "rank {r}"
        );
    }
    let after: Vec<_> = std::fs::read_dir("/mnt")
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
        .unwrap_or_default();
    assert_eq!(before, after, "nothing reached the node's /mnt");
    // A volume source cadre does not give, and a mount point the node lacks.
    let refused = manifest.replace(
        "{name: scratch, emptyDir: {}}",
        "{name: scratch, nfs: {server: files, path: /data}}",
    );
    let out = c.run_with(&["apply", "-f", "-"], Some(&refused));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("volume `scratch`: nfs volumes are not supported yet"),
        "{err}"
    );
    let nowhere = manifest
        .replace("name: vols", "name: nowhere")
        .replace("mountPath: /mnt}", "mountPath: /cadre-no-such-dir}");
    let job = c.apply(&nowhere);
    wait_until("the job is held for its mount point", || {
        let explained = text(&c.run(&["explain", &job.to_string()]).stdout);
        explained.contains(
            "/cadre-no-such-dir, which is not a directory on node node001 that cadre mounts over",
        )
    });
    assert!(
        !Path::new("/cadre-no-such-dir").exists(),
        "a mount point was made"
    );
}

/// A ConfigMap mounted and in variables, a Secret in variables (one key, and every key with
/// a prefix): they reach the ranks; the Secret's value is on no command line, in no
/// answer of the API, in neither `describe` nor `get`, in no log of cadre's.
#[test]
fn config_maps_and_secrets_reach_the_ranks_and_the_secret_nowhere_else() {
    let c = Cluster::up(1);
    let flag = c.dir().join("cm-go");
    let secret = "s3cr3t-v4lue-7f2c";
    let manifest = format!(
        "apiVersion: v1
kind: ConfigMap
metadata: {{name: settings}}
data: {{greeting: hello, train.yaml: 'lr: 0.1'}}
---
apiVersion: v1
kind: Secret
metadata:
  name: hf
  # As an exported Secret has it: the whole object again.
  annotations: {{kubectl.kubernetes.io/last-applied-configuration: '{{\"stringData\":{{\"token\":\"{secret}\"}}}}'}}
type: Opaque
stringData: {{token: {secret}, user: alice}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: cfg}}
spec:
  template:
    spec:
      restartPolicy: Never
      volumes:
      - {{name: conf, configMap: {{name: settings}}}}
      - {{name: creds, secret: {{secretName: hf, items: [{{key: token, path: hf-token}}]}}}}
      containers:
      - name: c
        image: busybox
        command: [sh, -c, 'while [ ! -e {flag} ]; do sleep 0.1; done; echo greeting=$(GREETING); cat /srv/conf/train.yaml; echo; [ \"$HF_TOKEN\" = \"$(cat /srv/creds/hf-token)\" ] && echo token ok; echo user=$HF_user; echo arg=$0; stat -c %a /srv/creds/hf-token', '$(HF_TOKEN)']
        env:
        - {{name: GREETING, valueFrom: {{configMapKeyRef: {{name: settings, key: greeting}}}}}}
        - {{name: HF_TOKEN, valueFrom: {{secretKeyRef: {{name: hf, key: token}}}}}}
        envFrom:
        - {{secretRef: {{name: hf}}, prefix: HF_}}
        volumeMounts:
        - {{name: conf, mountPath: /srv/conf}}
        - {{name: creds, mountPath: /srv/creds, readOnly: true}}
",
        flag = flag.display()
    );
    // Mount points of the test's own on the machine, removed when it ends.
    struct MountPoints(Vec<&'static str>);
    impl Drop for MountPoints {
        fn drop(&mut self) {
            for d in &self.0 {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
    let _points = MountPoints(
        ["/srv/conf", "/srv/creds"]
            .into_iter()
            .filter(|d| !Path::new(d).exists())
            .collect(),
    );
    for d in ["/srv/conf", "/srv/creds"] {
        std::fs::create_dir_all(d).expect("mount point");
    }
    let out = c.run_with(&["apply", "-f", "-"], Some(&manifest));
    let said = text(&out.stdout);
    assert!(
        said.contains("configmap/settings created") && said.contains("secret/hf created"),
        "{said}"
    );
    let job = applied_job(&out);
    wait_until("the job runs", || c.state(job) == "RUNNING");
    std::thread::sleep(Duration::from_millis(300));
    // While it runs: on no command line of the machine.
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            assert!(
                !String::from_utf8_lossy(&cmdline).contains(secret),
                "the Secret is on the command line of {}",
                entry.path().display()
            );
        }
    }
    let described = c.ok(&["describe", "job", "cfg"]);
    let listed = c.ok(&["get", "workloads", "-o", "yaml"]);
    let (_, api_job) = c.inner.api("GET", &format!("/jobs/{job}"), None);
    let (_, api_run) = c.inner.api("GET", &format!("/jobs/{job}/run"), None);
    for (what, shown) in [
        ("describe", described.clone()),
        ("get", listed),
        ("GET /jobs/ID", api_job.to_string()),
        ("GET /jobs/ID/run", api_run.to_string()),
    ] {
        assert!(!shown.contains(secret), "{what} shows the Secret:\n{shown}");
    }
    assert!(api_run.to_string().contains("<redacted>"), "{api_run}");
    std::fs::write(&flag, "").expect("the flag");
    assert_eq!(c.wait(job), "COMPLETED", "{}", c.outputs_of(job));
    assert_eq!(
        c.output("cfg", job, 0),
        "greeting=hello\nlr: 0.1\ntoken ok\nuser=alice\narg=$(HF_TOKEN)\n400\n"
    );
    assert!(
        !c.log().contains(secret),
        "a log of cadre's shows the Secret"
    );
    // Objects in any file: a Secret applied on its own is kept (its keys listed, its
    // value nowhere), and a Job applied later, alone, gets the ConfigMap and Secret applied
    // before it.
    let out = c.run_with(
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: Secret\nmetadata: {name: lonely}\nstringData: {a: b}\n"),
    );
    assert!(
        text(&out.stdout).contains("secret/lonely created"),
        "{}",
        text(&out.stderr)
    );
    let secrets = c.ok(&["get", "secrets"]);
    assert!(
        secrets.contains("lonely") && secrets.contains("hf"),
        "{secrets}"
    );
    for shown in [
        c.ok(&["get", "secrets", "-o", "yaml"]),
        c.ok(&["get", "secrets", "-o", "json"]),
    ] {
        assert!(
            !shown.contains(secret),
            "get secrets shows the value:\n{shown}"
        );
        assert!(shown.contains("token"), "the keys are shown:\n{shown}");
    }
    std::fs::remove_file(&flag).expect("the flag");
    let later = manifest
        .split("---\n")
        .nth(2)
        .expect("the Job")
        .replace("name: cfg", "name: cfg2");
    let job = c.apply(&later);
    std::fs::write(&flag, "").expect("the flag");
    assert_eq!(c.wait(job), "COMPLETED", "{}", c.outputs_of(job));
    assert_eq!(
        c.output("cfg2", job, 0),
        "greeting=hello\nlr: 0.1\ntoken ok\nuser=alice\narg=$(HF_TOKEN)\n400\n"
    );
    // One that was never applied is refused, saying which.
    let out = c.run_with(
        &["apply", "-f", "-"],
        Some(
            &later
                .replace("name: cfg2", "name: cfg3")
                .replace("name: settings", "name: nothing"),
        ),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("configmap/nothing is not applied in namespace default"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        !c.log().contains(secret),
        "a log of cadre's shows the Secret"
    );
}

/// A Volcano gang in namespace `team`, queue `research`, of `replicas` workers of `gpus`
/// GPUs each, each waiting for its go file; `more` is put in each container's resources.
fn team_gang(name: &str, replicas: u32, gpus: u32, class: &str, more: &str) -> String {
    let class = if class.is_empty() {
        String::new()
    } else {
        format!("\n        priorityClassName: {class}")
    };
    format!(
        "apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: {name}, namespace: team}}
spec:
  minAvailable: {replicas}
  queue: research
  tasks:
  - name: worker
    replicas: {replicas}
    template:
      spec:
        restartPolicy: Never{class}
        containers:
        - name: w
          image: busybox
          command: [sh, -c, 'while [ ! -e go-{name} ]; do sleep 0.05; done']
          resources: {{limits: {{nvidia.com/gpu: {gpus}{more}}}}}
"
    )
}

/// The objects a platform team gives a tenant: its namespace, a GPU quota, container
/// defaults and maxima, priority classes, and two Volcano queues.
const TEAM_OBJECTS: &str = "apiVersion: v1
kind: Namespace
metadata: {name: team, labels: {tier: gold}}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: gpu-quota, namespace: team}
spec:
  hard: {requests.nvidia.com/gpu: 4, pods: 8, count/jobs.batch.volcano.sh: 3}
---
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: team}
spec:
  limits:
  - type: Container
    default: {memory: 512Mi, cpu: 1}
    max: {memory: 2Gi}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: team-default}
value: 100
globalDefault: true
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: team-high}
value: 1000
preemptionPolicy: Never
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
spec: {weight: 2, capability: {nvidia.com/gpu: 24}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: batch}
spec: {weight: 1}
";

#[test]
fn a_namespace_s_quota_limit_range_and_priority_classes_hold_its_gangs_across_a_restart() {
    // Every node of `cadre up` is this machine, of 2 cores (CI's): a task takes a whole
    // core, so the gangs here are of at most 6 tasks.
    let c = Cluster::up_with(3, &["--gpus-per-node", "8"]);
    // The workload before the objects it needs, in one file: applied in any order.
    let out = c.run_with(
        &["apply", "-f", "-"],
        Some(&format!(
            "{}---\n{TEAM_OBJECTS}",
            team_gang("four", 4, 1, "", "")
        )),
    );
    let printed = text(&out.stdout);
    for line in [
        "namespace/team created",
        "resourcequota/gpu-quota created",
        "limitrange/defaults created",
        "priorityclass.scheduling.k8s.io/team-default created",
        "priorityclass.scheduling.k8s.io/team-high created",
        "queue.scheduling.volcano.sh/research created",
    ] {
        assert!(printed.contains(line), "{line} in {printed}");
    }
    let four = applied_job(&out);
    c.wait_for(four, "RUNNING", None);
    // The LimitRange's defaults are what each worker was given, and the class is the
    // global default.
    let described = c.ok(&["describe", "vcjob", "four", "-n", "team"]);
    for want in [
        "LimitRanges:  defaults (their defaults and bounds applied)",
        "Priority:     class team-default",
        "512 MiB",
    ] {
        assert!(described.contains(want), "{want} in {described}");
    }
    let quotas = c.ok(&["get", "resourcequotas", "-n", "team"]);
    assert!(
        quotas.contains("gpu-quota") && quotas.contains("gpus: 4/4"),
        "{quotas}"
    );
    let classes = c.ok(&["get", "priorityclasses"]);
    assert!(
        classes.contains("team-high") && classes.contains("Never") && classes.contains("1000"),
        "{classes}"
    );
    assert!(c.ok(&["get", "ns"]).contains("team"));
    // 3 x 2 GPUs would make 10 of 4: the whole gang waits, naming the quota.
    let big = c.apply(&team_gang("big", 3, 2, "team-high", ""));
    c.wait_for(big, "PENDING", Some("NamespaceQuota"));
    let described = c.ok(&["describe", "vcjob", "big", "-n", "team"]);
    assert!(
        described.contains(
            "exceeded quota: gpu-quota in namespace team, requested: 6 gpus, used: 4 gpus, \
             limited: 4 gpus"
        ),
        "{described}"
    );
    // Kubernetes' rules: a class's value is immutable, a class in use stays, a namespace
    // holding objects stays, a container above the range's maximum is refused.
    let changed = TEAM_OBJECTS.replace("value: 1000", "value: 5");
    let out = c.run_with(&["apply", "-f", "-"], Some(&changed));
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(
            "PriorityClass.scheduling.k8s.io \"team-high\" is invalid: value: Forbidden: may not \
             be changed in an update."
        ),
        "{}",
        text(&out.stderr)
    );
    for (kind, name, why) in [
        ("priorityclass", "team-high", "in use by job"),
        (
            "namespace",
            "team",
            "holds ResourceQuota `gpu-quota`, LimitRange `defaults`",
        ),
    ] {
        let out = c.run(&["delete", kind, name]);
        assert!(!out.status.success(), "{kind} {name} deleted");
        assert!(text(&out.stderr).contains(why), "{}", text(&out.stderr));
    }
    // Its object counts: 4 + 3 ranks of 8, so 2 more are refused at apply.
    let out = c.run_with(
        &["apply", "-f", "-"],
        Some(&team_gang("more", 2, 1, "", "")),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(
            "exceeded quota: gpu-quota, requested: pods=2, used: pods=7, limited: pods=8"
        ),
        "{}",
        text(&out.stderr)
    );
    let out = c.run_with(
        &["apply", "-f", "-"],
        Some(&team_gang("fat", 1, 1, "", ", memory: 4Gi")),
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr)
            .contains("Forbidden: maximum memory usage per Container is 2Gi, but limit is 4Gi"),
        "{}",
        text(&out.stderr)
    );
    // A restarted controller has the classes and the quota before its jobs: the gang
    // still runs, counted, and the other still waits for the quota.
    c.kill_controller();
    c.ok(&["up", "--detach", "--nodes", "3", "--gpus-per-node", "8"]);
    c.wait_for(big, "PENDING", Some("NamespaceQuota"));
    assert_eq!(c.state(four), "RUNNING");
    assert!(c.ok(&["get", "quota", "-n", "team"]).contains("gpus: 4/4"));
    c.go("four");
    assert_eq!(c.wait(four), "COMPLETED");
    // 6 GPUs never fit 4: the gang waits whole until it is deleted.
    c.wait_for(big, "PENDING", Some("NamespaceQuota"));
    c.ok(&["delete", "vcjob", "big", "-n", "team"]);
    c.ok(&["delete", "priorityclass", "team-high"]);
}

/// The MPI Operator's shape at 16 ranks, named by `generateName`: a launcher that waits
/// for its host file and for each worker over `ssh`, then runs `mpi` (which starts 16 ranks,
/// each printing `rank R of N on HOST shm BYTES ...`), over 2 workers of `slotsPerWorker: 8`
/// kept apart by `podAntiAffinity`, each with a 64 MiB `medium: Memory` emptyDir at
/// `/dev/shm`; `image` (with its pull policy) for both, `worker` added to the worker's
/// container.
fn sixteen_rank_mpijob(implementation: &str, image: &str, mpi: &str, worker: &str) -> String {
    format!(
        r#"apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {{generateName: pi16-}}
spec:
  slotsPerWorker: 8
  mpiImplementation: {implementation}
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - name: mpi-launcher
            {image}
            command:
            - sh
            - -c
            - |
              until [ -s /etc/mpi/hostfile ]; do sleep 0.1; done
              for w in $(sed 's/[: ].*//' /etc/mpi/hostfile); do
                until ssh -o ConnectTimeout=2 $w true; do sleep 1; done
              done
              exec {mpi}
            resources: {{limits: {{cpu: 1}}}}
    Worker:
      replicas: 2
      template:
        spec:
          affinity:
            podAntiAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
              - labelSelector:
                  matchLabels: {{training.kubeflow.org/replica-type: worker}}
                topologyKey: kubernetes.io/hostname
          volumes:
          - name: shm
            emptyDir: {{medium: Memory, sizeLimit: 64Mi}}
          containers:
          - name: mpi-worker
            {image}
            command: [/usr/sbin/sshd]
            args: [-De, -f, /home/mpiuser/.sshd_config]{worker}
            volumeMounts: [{{name: shm, mountPath: /dev/shm}}]
            resources: {{limits: {{cpu: 1}}}}
"#
    )
}

/// Applies a [`sixteen_rank_mpijob`] and checks its launcher's output: 16 ranks, 8 on each
/// worker's pod (by its host name), each seeing the worker's 64 MiB `/dev/shm`; `line`
/// checks each rank's line further (its words).
fn sixteen_ranks_fill_two_workers(c: &Cluster, manifest: &str, line: impl Fn(&[&str])) {
    let out = c.run_with(&["apply", "-f", "-"], Some(manifest));
    let job = applied_job(&out);
    let name = text(&out.stdout)
        .split_whitespace()
        .find_map(|w| w.strip_prefix("mpijob.kubeflow.org/").map(str::to_string))
        .unwrap_or_else(|| panic!("no name in {}", text(&out.stdout)));
    assert!(name.starts_with("pi16-") && name.len() == 10, "{name}");
    assert_eq!(
        c.wait(job),
        "COMPLETED",
        "{}\n{}",
        c.outputs_of(job),
        c.log()
    );
    let launcher = c.output(&name, job, 0);
    let mut per_host: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
    for l in launcher.lines().filter(|l| l.starts_with("rank ")) {
        let words: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(words.get(3), Some(&"16"), "{l}");
        // The worker pod's own /dev/shm (on the host, its daemon mounted it for its ranks).
        assert_eq!(words.get(7), Some(&"67108864"), "{l}");
        line(&words);
        per_host
            .entry(words[5].to_string())
            .or_default()
            .push(words[1].parse().expect("a rank"));
    }
    let hosts: Vec<&String> = per_host.keys().collect();
    assert_eq!(
        hosts,
        [&format!("{name}-worker-0"), &format!("{name}-worker-1")],
        "{launcher}"
    );
    for (host, ranks) in &per_host {
        assert_eq!(ranks.len(), 8, "8 slots of {host}: {launcher}");
    }
}

/// The MPI Operator's pattern at 16 ranks on the host, with MPICH's Hydra: the daemons
/// `cadre-rsh` starts in each worker's pod mount its volumes.
#[test]
fn a_sixteen_rank_mpijob_named_by_generate_name_fills_two_workers_of_eight_slots() {
    let c = Cluster::up(3);
    if mpi_program(c.dir()).is_none() {
        return;
    }
    let manifest = sixteen_rank_mpijob(
        "MPICH",
        "image: mpioperator/mpi-pi:openmpi",
        r#"mpiexec.hydra -n 16 sh -c 'echo rank $PMI_RANK of $PMI_SIZE on $(hostname) shm $(df -B1 --output=size /dev/shm | tail -n 1 | tr -d " ")'"#,
        "",
    );
    sixteen_ranks_fill_two_workers(&c, &manifest, |_| {});
}

/// The same in containers, as the issue's check writes it, with OpenMPI's `mpirun` and
/// `IPC_LOCK` (which the nodes allow): every rank runs in its worker's container, sees its
/// `/dev/shm` and has the capability.
#[test]
fn in_containers_a_sixteen_rank_mpijob_gets_its_workers_shm_and_ipc_lock() {
    let Some(runtime) = container_runtime() else {
        return;
    };
    let c = Cluster::up_with(
        3,
        &[
            "--container-runtime",
            &runtime,
            "--container-allowed-capabilities",
            "IPC_LOCK",
        ],
    );
    let mpi_image =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/container-mpi-image.sh");
    let built = Command::new("sh")
        .arg(&mpi_image)
        .arg(&runtime)
        .output()
        .expect("the MPI image script runs");
    assert!(
        built.status.success(),
        "the MPI test image: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let manifest = sixteen_rank_mpijob(
        "OpenMPI",
        "image: localhost/cadre-mpi:1\n            imagePullPolicy: Never",
        r#"mpirun --allow-run-as-root -np 16 sh -c 'while read k v; do [ "$k" = CapEff: ] && c=$v; done </proc/self/status; echo rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $(cat /proc/sys/kernel/hostname) shm $(df -B1 --output=size /dev/shm | tail -n 1 | tr -d " ") CapEff: $c'"#,
        "\n            securityContext: {capabilities: {add: [IPC_LOCK]}}",
    );
    sixteen_ranks_fill_two_workers(&c, &manifest, |words| {
        // CAP_IPC_LOCK is bit 14, and the only one a root rank has.
        assert_eq!(
            words.get(9),
            Some(&"0000000000004000"),
            "IPC_LOCK alone: {words:?}"
        );
    });
}

/// A StorageClass's directory for the tests: root's all the way down, as the agents want
/// it (the temporary directory above it searchable by all).
fn class_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let top = tempfile::tempdir().expect("temporary directory");
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let class = top.path().join("shared");
    std::fs::create_dir(&class).unwrap();
    std::fs::set_permissions(&class, std::fs::Permissions::from_mode(0o755)).unwrap();
    (top, class)
}

/// The default StorageClass `shared` over `class`, whose claims may grow.
fn storage_class(class: &Path) -> String {
    format!(
        "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: shared
  annotations: {{storageclass.kubernetes.io/is-default-class: \"true\"}}
provisioner: cadre.io/shared-directory
parameters: {{path: {}}}
reclaimPolicy: Retain
allowVolumeExpansion: true
",
        class.display()
    )
}

/// In a container, a claim mounted twice: writable at one path, read-only at another.
#[test]
fn in_a_container_a_claim_is_mounted_writable_or_read_only() {
    let Some(runtime) = container_runtime() else {
        return;
    };
    let c = Cluster::up_with(1, &["--container-runtime", &runtime]);
    let (_top, class) = class_dir();
    let manifest = format!(
        "{}---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: cpvc}}
spec:
  template:
    spec:
      restartPolicy: Never
      volumes: [{{name: d, persistentVolumeClaim: {{claimName: data}}}}]
      containers:
      - name: c
        image: localhost/cadre-test:1
        imagePullPolicy: Never
        command: [/bin/sh, -c, 'echo hi > /mnt/f; cat /ro/f; touch /ro/g 2>/dev/null || echo read-only']
        volumeMounts:
        - {{name: d, mountPath: /mnt}}
        - {{name: d, mountPath: /ro, readOnly: true}}
",
        storage_class(&class)
    );
    let job = c.apply(&manifest);
    assert_eq!(c.wait(job), "COMPLETED", "{}", c.outputs_of(job));
    assert_eq!(c.output("cpvc", job, 0), "hi\nread-only\n");
    let dirs: Vec<_> = std::fs::read_dir(&class)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert_eq!(std::fs::read_to_string(dirs[0].join("f")).unwrap(), "hi\n");
    assert!(!dirs[0].join("g").exists());
}

/// A claim applied beside the Indexed Job that mounts it: both ranks (on two nodes) write
/// into its one directory, a later job reads what they wrote (read-only, as `ReadOnlyMany`
/// mounts it), the claim and its class cannot be deleted while they are used, and a
/// deleted claim's directory is kept.
#[test]
fn a_claim_s_directory_outlives_its_jobs_and_is_kept_while_they_use_it() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: a claim's directory is made by a root agent");
        return;
    }
    let c = Cluster::up(2);
    let (_top, class) = class_dir();
    c.run_with(&["apply", "-f", "-"], Some(&storage_class(&class)));
    let claim = "apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: team}
spec:
  accessModes: [ReadWriteMany]
  resources: {requests: {storage: 1Gi}}
";
    let job = |name: &str, script: &str, read_only: bool| {
        format!(
            "apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: team}}
spec:
  completions: 2
  parallelism: 2
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      volumes: [{{name: d, persistentVolumeClaim: {{claimName: data}}}}]
      containers:
      - name: c
        image: busybox
        command: [sh, -c, '{script}']
        volumeMounts: [{{name: d, mountPath: /mnt, readOnly: {read_only}}}]
"
        )
    };
    let writer = format!(
        "{claim}---\n{}",
        job(
            "writer",
            "echo rank $JOB_COMPLETION_INDEX on $(hostname) > /mnt/rank-$JOB_COMPLETION_INDEX",
            false
        )
    );
    let first = c.apply(&writer);
    assert_eq!(c.wait(first), "COMPLETED", "{}", c.outputs_of(first));
    let listed = c.ok(&["get", "pvc", "-n", "team"]);
    assert!(listed.contains("Bound"), "{listed}");
    assert!(listed.contains("RWX"), "{listed}");
    assert!(listed.contains("shared"), "{listed}");
    let volume = listed
        .split_whitespace()
        .find(|w| w.starts_with("pvc-"))
        .unwrap_or_else(|| panic!("no volume in {listed}"))
        .to_string();
    let dir = class.join(&volume);
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&dir).unwrap();
        assert_eq!(
            m.mode() & 0o777,
            0o700,
            "the claim's directory is its owner's alone"
        );
    }
    for r in 0..2 {
        let written = std::fs::read_to_string(dir.join(format!("rank-{r}"))).unwrap();
        assert!(
            written.starts_with(&format!("rank {r} on writer-{r}")),
            "{written}"
        );
    }
    // Re-applying the claim is `unchanged`; shrinking it is refused, growing it is not.
    let out = c.run_with(&["apply", "-f", "-"], Some(claim));
    assert!(
        text(&out.stdout).contains("persistentvolumeclaim/data unchanged"),
        "{}",
        text(&out.stdout)
    );
    let out = c.run_with(&["apply", "-f", "-"], Some(&claim.replace("1Gi", "1Mi")));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("field can not be less than status.capacity"),
        "{}",
        text(&out.stderr)
    );
    c.run_with(&["apply", "-f", "-"], Some(&claim.replace("1Gi", "2Gi")));
    assert!(c.ok(&["get", "pvc", "-n", "team"]).contains("2Gi"));
    // A reader while it runs: the claim and its class stay; it reads what was written and
    // cannot write.
    let gate = c.dir().join("pvc-go");
    let reader = job(
        "reader",
        &format!(
            "cat /mnt/rank-$JOB_COMPLETION_INDEX; touch /mnt/new 2>/dev/null || echo read-only; \
             while [ ! -e {} ]; do sleep 0.1; done",
            gate.display()
        ),
        true,
    );
    let second = c.apply(&reader);
    wait_until("the reader runs", || c.state(second) == "RUNNING");
    let out = c.run(&["delete", "pvc", "data", "-n", "team"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!("is mounted by job {second}, which has not ended")),
        "{}",
        text(&out.stderr)
    );
    let out = c.run(&["delete", "sc", "shared"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is the class of PersistentVolumeClaims team/data"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(&gate, "").unwrap();
    assert_eq!(c.wait(second), "COMPLETED", "{}", c.outputs_of(second));
    for r in 0..2 {
        let out = c.output("reader", second, r);
        assert!(
            out.starts_with(&format!("rank {r} on writer-{r}\nread-only\n")),
            "{out}"
        );
    }
    assert!(!dir.join("new").exists());
    // Deleted once no job uses it; its directory is kept (Retain).
    let out = c.ok(&["delete", "pvc", "data", "-n", "team"]);
    assert!(out.contains("persistentvolumeclaim/data deleted"), "{out}");
    assert!(dir.join("rank-0").exists());
    // A workload naming a claim that is not applied is refused, saying which.
    let out = c.run_with(&["apply", "-f", "-"], Some(&job("late", "true", false)));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("persistentvolumeclaim \"data\" not found in namespace team"),
        "{}",
        text(&out.stderr)
    );
    c.ok(&["delete", "sc", "shared"]);
}

/// An administrator's hostPath volumes: a node directory bound writable, the same read-only,
/// one made for `DirectoryOrCreate`; a type the path does not have holds the job, saying
/// why. (A user's are refused: `tests/cluster.rs`.)
#[test]
fn an_administrator_s_host_paths_are_bound_as_their_types_say() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: an administrator's workload, as root");
        return;
    }
    let c = Cluster::up(1);
    let top = tempfile::tempdir().unwrap();
    let data = top.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("in"), "from the node\n").unwrap();
    let made = top.path().join("made/here");
    let manifest = format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: hp}}
spec:
  template:
    spec:
      restartPolicy: Never
      volumes:
      - {{name: data, hostPath: {{path: {data}, type: Directory}}}}
      - {{name: made, hostPath: {{path: {made}, type: DirectoryOrCreate}}}}
      containers:
      - name: c
        image: busybox
        command: [sh, -c, 'cat /mnt/in; echo out > /mnt/out; touch /srv/x 2>/dev/null || echo read-only; ls -d /media']
        volumeMounts:
        - {{name: data, mountPath: /mnt}}
        - {{name: data, mountPath: /srv, readOnly: true}}
        - {{name: made, mountPath: /media}}
",
        data = data.display(),
        made = made.display()
    );
    let job = c.apply(&manifest);
    assert_eq!(c.wait(job), "COMPLETED", "{}", c.outputs_of(job));
    assert_eq!(c.output("hp", job, 0), "from the node\nread-only\n/media\n");
    assert_eq!(std::fs::read_to_string(data.join("out")).unwrap(), "out\n");
    assert!(!data.join("x").exists());
    assert!(made.is_dir(), "DirectoryOrCreate made it");
    // A file where a directory is asked for: held, naming the path and why.
    std::fs::write(top.path().join("file"), "").unwrap();
    let wrong = manifest.replace("name: hp", "name: wrong").replace(
        &data.display().to_string(),
        &top.path().join("file").display().to_string(),
    );
    let job = c.apply(&wrong);
    wait_until("the job is held for its host path", || {
        let explained = text(&c.run(&["explain", &job.to_string()]).stdout);
        explained.contains("it is not a directory, as its type says")
    });
    // Below a user's directory: that user could swap a part of the path for a link.
    let theirs = top.path().join("theirs");
    std::fs::create_dir_all(theirs.join("data")).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let below = manifest.replace("name: hp", "name: below").replace(
        &data.display().to_string(),
        &theirs.join("data").display().to_string(),
    );
    let job = c.apply(&below);
    let explain = || text(&c.run(&["explain", &job.to_string()]).stdout);
    wait_until_or(
        "the job is held for a path a user could swap",
        || explain().contains("is not a directory owned by root as is every directory above it"),
        || format!("{}\n{}", explain(), c.outputs_of(job)),
    );
}

/// A pod's securityContext identity, within what the submitting user (root here) may be:
/// `runAsGroup` becomes the task's group, `runAsUser` makes no one another; a job of root
/// with `runAsNonRoot` is held, saying why.
#[test]
fn a_pod_s_run_as_group_is_the_task_s_and_run_as_non_root_holds_a_job_of_root() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the job of root");
        return;
    }
    let c = Cluster::up(1);
    let manifest = "apiVersion: batch/v1
kind: Job
metadata: {name: ids}
spec:
  template:
    spec:
      restartPolicy: Never
      securityContext: {runAsGroup: 100, fsGroup: 100}
      containers:
      - name: c
        image: busybox
        command: [sh, -c, 'echo $(id -u) $(id -g); grep NoNewPrivs /proc/self/status']
        securityContext: {runAsUser: 1000}
";
    let job = c.apply(manifest);
    assert_eq!(c.wait(job), "COMPLETED", "{}", c.outputs_of(job));
    // In the pod's namespaces (its host name, its hosts file), a set-user-id program
    // gains nothing: sudo would believe the host name.
    assert_eq!(c.output("ids", job, 0), "0 100\nNoNewPrivs:\t1\n");
    let refused = manifest
        .replace("name: ids", "name: nonroot")
        .replace("{runAsUser: 1000}", "{runAsNonRoot: true}");
    let job = c.apply(&refused);
    wait_until("the job is held for runAsNonRoot", || {
        let explained = text(&c.run(&["explain", &job.to_string()]).stdout);
        explained.contains("securityContext.runAsNonRoot: the job's user is root")
    });
    let out = c.run_with(
        &["apply", "-f", "-"],
        Some(&manifest.replace("runAsGroup: 100", "runAsGroup: -1")),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("securityContext.runAsGroup: Invalid value: -1"),
        "{}",
        text(&out.stderr)
    );
}

/// A PyTorchJob of a master and two workers, each running PyPI's `torchrun` with no
/// arguments but the script, as the Training Operator's examples do: torchrun takes the
/// node count, rank, master address and port from the `PET_*` variables the contract sets,
/// the three processes form one gloo group over the master's store, all-reduce and meet at
/// a barrier.
#[test]
fn a_pytorchjob_s_master_and_workers_meet_under_real_torchrun() {
    let Some(torch) = torch_bin() else { return };
    let c = Cluster::up(3);
    let train = c.dir().join("train-ptj.py");
    std::fs::write(
        &train,
        "import os, socket, torch, torch.distributed as dist
dist.init_process_group('gloo')
r, w = dist.get_rank(), dist.get_world_size()
t = torch.tensor([r + 1.0])
dist.all_reduce(t)
dist.barrier()
print(f'rank {r} of {w} on {socket.gethostname()} sum {t.item():.0f}', flush=True)
dist.destroy_process_group()
",
    )
    .expect("train-ptj.py");
    let group = |kind: &str, replicas: u32| {
        format!(
            "    {kind}:
      replicas: {replicas}
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
            command: [torchrun, {}]
            resources: {{limits: {{cpu: 1}}}}
",
            train.display()
        )
    };
    let manifest = format!(
        "apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: ptj}}
spec:
  nprocPerNode: \"1\"
  pytorchReplicaSpecs:
{}{}",
        group("Master", 1),
        group("Worker", 2)
    );
    let path = format!(
        "{}:{}",
        torch.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = c.run_in(
        c.dir(),
        &["apply", "-f", "-"],
        Some(&manifest),
        &[("PATH", path.as_str())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let job = applied_job(&out);
    assert_eq!(c.wait(job), "COMPLETED", "{}", c.outputs_of(job));
    let logs = c.ok(&["logs", "pytorchjob/ptj"]);
    for (r, pod) in ["ptj-master-0", "ptj-worker-0", "ptj-worker-1"]
        .iter()
        .enumerate()
    {
        assert!(
            logs.contains(&format!("rank {r} of 3 on {pod} sum 6")),
            "rank {r} on {pod}:\n{logs}"
        );
    }
}

/// The issue's namespace check at its own scale: a ResourceQuota of 16 GPUs and a
/// LimitRange in a world of two Volcano queues, on 4 nodes of 8 GPUs (and 2 cores each, so
/// 8 one-core tasks fill them): a gang of 8 one-GPU workers runs whole with the range's
/// defaults; a gang of 3 x 6 GPUs waits whole, naming the quota.
#[test]
fn a_quota_of_sixteen_gpus_runs_eight_workers_whole_and_holds_three_times_six_whole() {
    let c = Cluster::up_with(4, &["--gpus-per-node", "8"]);
    let objects = TEAM_OBJECTS
        .replace(
            "requests.nvidia.com/gpu: 4, pods: 8",
            "requests.nvidia.com/gpu: 16, pods: 16",
        )
        .replace(
            "capability: {nvidia.com/gpu: 24}",
            "capability: {nvidia.com/gpu: 32}",
        );
    let out = c.run_with(
        &["apply", "-f", "-"],
        Some(&format!(
            "{objects}---\n{}",
            team_gang("eight", 8, 1, "", "")
        )),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let eight = applied_job(&out);
    c.wait_for(eight, "RUNNING", None);
    let pods: Value = serde_json::from_str(&c.ok(&[
        "get",
        "pods",
        "-n",
        "team",
        "-l",
        "volcano.sh/job-name=eight",
        "-o",
        "json",
    ]))
    .expect("JSON");
    let pods = pods.as_array().expect("pods");
    assert_eq!(pods.len(), 8, "{pods:?}");
    assert!(pods.iter().all(|p| p["status"] == "Running"), "{pods:?}");
    let described = c.ok(&["describe", "vcjob", "eight", "-n", "team"]);
    assert!(described.contains("LimitRanges:  defaults"), "{described}");
    assert!(described.contains("512 MiB"), "{described}");
    assert!(
        c.ok(&["get", "quota", "-n", "team"]).contains("gpus: 8/16"),
        "the quota's use"
    );
    let big = c.apply(&team_gang("big", 3, 6, "", ""));
    c.wait_for(big, "PENDING", Some("NamespaceQuota"));
    let described = c.ok(&["describe", "vcjob", "big", "-n", "team"]);
    assert!(
        described.contains(
            "exceeded quota: gpu-quota in namespace team, requested: 18 gpus, used: 8 gpus, \
             limited: 16 gpus"
        ),
        "{described}"
    );
    let pods = c.ok(&["get", "pods", "-n", "team", "-l", "volcano.sh/job-name=big"]);
    assert_eq!(
        pods.matches("Pending").count(),
        3,
        "no rank of it starts: {pods}"
    );
    std::fs::write(c.dir().join("go-eight"), "").unwrap();
    assert_eq!(c.wait(eight), "COMPLETED");
}

/// Objects in any file: a headless Service applied on its own, then in a later apply the
/// Indexed Job it selects, whose ranks find each other by the Service's names.
#[test]
fn a_service_applied_before_its_workload_in_another_file_names_its_pods() {
    let c = Cluster::up(2);
    let service = "apiVersion: v1
kind: Service
metadata: {name: peers}
spec:
  clusterIP: None
  selector: {job-name: later}
";
    let out = c.run_with(&["apply", "-f", "-"], Some(service));
    assert!(
        text(&out.stdout).contains("service/peers created"),
        "{}",
        text(&out.stderr)
    );
    let job = c.apply(
        "apiVersion: batch/v1
kind: Job
metadata: {name: later}
spec:
  completions: 2
  parallelism: 2
  completionMode: Indexed
  template:
    spec:
      subdomain: peers
      restartPolicy: Never
      containers:
      - name: c
        image: busybox
        command: [sh, -c, 'grep -c later-1.peers.default.svc.cluster.local /etc/hosts']
",
    );
    assert_eq!(c.wait(job), "COMPLETED", "{}", c.outputs_of(job));
    for r in 0..2 {
        assert_eq!(c.output("later", job, r), "1\n", "rank {r}");
    }
    let described = c.ok(&["describe", "job", "later"]);
    assert!(described.contains("peers (headless)"), "{described}");
    // Applied again: unchanged; deleted: gone.
    let out = c.run_with(&["apply", "-f", "-"], Some(service));
    assert!(
        text(&out.stdout).contains("service/peers unchanged"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        c.ok(&["delete", "svc", "peers"])
            .contains("service/peers deleted")
    );
}
