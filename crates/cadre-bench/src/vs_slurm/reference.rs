//! The reference Slurm: finding it (its commands by full path, never cadre's aliases),
//! reading its shape, bringing nodes that came up `inval` back to idle, and reading its
//! records of finished jobs (`jobcomp/filetxt`, as `shared/slurm/start-slurm.sh` configures:
//! there is no slurmdbd, so no sacct).

use super::replay::RunRecord;
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub const SBATCH: &str = "/usr/bin/sbatch";
pub const SQUEUE: &str = "/usr/bin/squeue";
pub const SCONTROL: &str = "/usr/bin/scontrol";
pub const SCANCEL: &str = "/usr/bin/scancel";

/// How to start the reference, for error messages.
pub fn start_hint(nodes: u32, gpus: u32, cpus: u32) -> String {
    format!(
        "start it (as root) with `bash ../shared/slurm/start-slurm.sh {nodes} {gpus} {cpus}` \
         ({nodes} nodes of {gpus} GPUs and {cpus} CPUs, the CPUs of this machine's cadre nodes)"
    )
}

/// The running reference as the bench found it.
#[derive(Clone, Debug)]
pub struct Reference {
    pub version: String,
    pub nodes: Vec<String>,
    pub gpus_per_node: u32,
    pub cpus_per_node: u32,
    pub jobcomp: PathBuf,
}

/// One node of `scontrol show node -o`.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRecord {
    pub name: String,
    pub state: String,
    pub cpus: u32,
    pub gpus: u32,
}

/// `key=value` fields of one line of Slurm's one-line records (`scontrol -o`, jobcomp).
/// Values have no spaces in what the bench reads.
pub fn fields(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace()
        .filter_map(|f| f.split_once('='))
        .collect()
}

/// The GPUs of a `Gres=` value (`gpu:8`, `gpu:a100:8`, `gpu:8(S:0)`), 0 for none.
pub fn gres_gpus(gres: &str) -> u32 {
    gres.split(',')
        .filter(|g| g.starts_with("gpu"))
        .filter_map(|g| {
            let count = g.split('(').next().unwrap_or(g).rsplit(':').next()?;
            count.parse::<u32>().ok()
        })
        .sum()
}

pub fn parse_nodes(text: &str) -> Vec<NodeRecord> {
    text.lines()
        .filter(|l| l.starts_with("NodeName="))
        .map(|l| {
            let f = fields(l);
            NodeRecord {
                name: f.get("NodeName").unwrap_or(&"").to_string(),
                state: f.get("State").unwrap_or(&"").to_string(),
                cpus: f.get("CPUTot").and_then(|c| c.parse().ok()).unwrap_or(0),
                gpus: f.get("Gres").map_or(0, |g| gres_gpus(g)),
            }
        })
        .collect()
}

/// A node the scheduler can use now: `IDLE` (with `+` flags such as `+CLOUD` allowed,
/// but not `INVAL`, `DRAIN`, `NOT_RESPONDING`), or already running jobs.
pub fn node_usable(state: &str) -> bool {
    let mut parts = state.split('+');
    let base = parts.next().unwrap_or("");
    let bad = |f: &str| {
        matches!(
            f,
            "INVAL" | "DRAIN" | "DRAINED" | "DRAINING" | "NOT_RESPONDING" | "FAIL" | "MAINT"
        )
    };
    matches!(base, "IDLE" | "MIXED" | "ALLOCATED") && !parts.any(bad)
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("failed to run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Finds the running reference; brings `inval` (or drained) nodes back with their GPUs;
/// refuses what would make the comparison unfair.
pub fn connect(want_gpus: Option<u32>, hint_cpus: u32) -> Result<Reference> {
    let hint = |n: u32, g: u32| start_hint(n, g, hint_cpus);
    for cmd in [SBATCH, SQUEUE, SCONTROL, SCANCEL] {
        if !std::path::Path::new(cmd).exists() {
            bail!(
                "the reference Slurm's commands are not installed ({cmd} is missing): {}",
                hint(16, 8)
            );
        }
    }
    let ping = Command::new(SCONTROL).arg("ping").output();
    let up = matches!(&ping, Ok(o) if o.status.success() && String::from_utf8_lossy(&o.stdout).contains("UP"));
    if !up {
        bail!(
            "the reference Slurm is not running (`scontrol ping` finds no slurmctld): {}",
            hint(16, 8)
        );
    }
    // `slurm 22.05.8`, or `slurm-wlm 22.05.8` from Debian's packages.
    let version = output(Command::new(SCONTROL).arg("--version"))?
        .split_whitespace()
        .last()
        .unwrap_or("?")
        .to_string();
    let mut nodes = parse_nodes(&output(
        Command::new(SCONTROL).args(["show", "node", "-o"]),
    )?);
    if nodes.is_empty() {
        bail!("the reference Slurm has no nodes: {}", hint(16, 8));
    }
    let gpus = want_gpus.unwrap_or_else(|| nodes.iter().map(|n| n.gpus).max().unwrap_or(0));
    if gpus == 0 {
        bail!(
            "the reference Slurm's nodes have no GPUs: {}",
            hint(nodes.len() as u32, 8)
        );
    }
    let queued = output(Command::new(SQUEUE).args(["-h", "-o", "%i"]))?;
    let queued = queued.lines().filter(|l| !l.trim().is_empty()).count();
    if queued > 0 {
        bail!(
            "the reference Slurm has {queued} jobs queued or running; the bench needs it idle \
             (cancel them with `/usr/bin/scancel --user=$(id -un)`)"
        );
    }
    if nodes
        .iter()
        .any(|n| n.gpus != gpus || !node_usable(&n.state))
    {
        repair_nodes(&nodes, gpus)?;
        nodes = parse_nodes(&output(
            Command::new(SCONTROL).args(["show", "node", "-o"]),
        )?);
        let still: Vec<String> = nodes
            .iter()
            .filter(|n| n.gpus != gpus || !node_usable(&n.state))
            .map(|n| format!("{} ({}, gpu:{})", n.name, n.state, n.gpus))
            .collect();
        if !still.is_empty() {
            bail!(
                "the reference Slurm's nodes did not come back to idle with {gpus} GPUs: {}; \
                 restart it: {}",
                still.join(", "),
                hint(nodes.len() as u32, gpus)
            );
        }
    }
    let cpus = nodes.iter().map(|n| n.cpus).min().unwrap_or(0);
    if nodes.iter().any(|n| n.cpus != cpus) {
        bail!(
            "the reference Slurm's nodes differ in CPUs; the bench compares like with like: {}",
            hint(nodes.len() as u32, gpus)
        );
    }
    let config = output(Command::new(SCONTROL).args(["show", "config"]))?;
    let jobcomp = config
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "JobCompLoc").then(|| PathBuf::from(v.trim()))
        })
        .filter(|p| p.is_absolute())
        .context(
            "the reference Slurm keeps no job completion file (JobCompLoc): the bench reads \
             finished jobs from it, as start-slurm.sh configures (jobcomp/filetxt)",
        )?;
    Ok(Reference {
        version,
        nodes: nodes.into_iter().map(|n| n.name).collect(),
        gpus_per_node: gpus,
        cpus_per_node: cpus,
        jobcomp,
    })
}

/// Brings nodes that are `inval`, drained or down, or that show the wrong GPU count, back
/// to idle with `gpus` GPUs, the way the reference allows (found by trying, Slurm 22.05):
///
/// - a node is `inval` when it registered reporting fewer GPUs than its configured count
///   (its slurmd, one of several on one host, reports 0); `State=RESUME` is refused from
///   INVAL, and resuming with the count set makes it re-register and fail again;
/// - `scontrol reconfigure` turns INVAL into DRAIN (and shows every node's GRES as none);
/// - with its count set to 0, the resumed node's registration is valid and it is idle;
/// - setting every node's count to `gpus` then (as start-slurm.sh does) keeps them idle.
fn repair_nodes(nodes: &[NodeRecord], gpus: u32) -> Result<()> {
    let bad: Vec<&str> = nodes
        .iter()
        .filter(|n| !node_usable(&n.state))
        .map(|n| n.name.as_str())
        .collect();
    let all: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let all = cadre_core::hostlist::compress(&all);
    let update = |args: &[&str]| {
        let out = Command::new(SCONTROL).arg("update").args(args).output();
        if let Ok(o) = out
            && !o.status.success()
        {
            eprintln!(
                "reference Slurm: scontrol update {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
    };
    if !bad.is_empty() {
        let list = cadre_core::hostlist::compress(&bad);
        eprintln!("reference Slurm: nodes {list} are not usable; resuming them with gpu:{gpus}");
        if nodes.iter().any(|n| n.state.contains("INVAL")) {
            let _ = Command::new(SCONTROL).arg("reconfigure").output();
            std::thread::sleep(Duration::from_secs(2));
        }
        update(&[&format!("NodeName={list}"), "Gres=gpu:0"]);
        update(&[&format!("NodeName={list}"), "State=RESUME"]);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            let now = parse_nodes(&output(
                Command::new(SCONTROL).args(["show", "node", "-o"]),
            )?);
            if now.iter().all(|n| node_usable(&n.state)) {
                break;
            }
        }
    } else {
        eprintln!("reference Slurm: setting gpu:{gpus} on nodes {all}");
    }
    update(&[&format!("NodeName={all}"), &format!("Gres=gpu:{gpus}")]);
    std::thread::sleep(Duration::from_secs(2));
    Ok(())
}

/// A `YYYY-MM-DDTHH:MM:SS` time of Slurm's records as seconds (the zone does not matter:
/// only differences between Slurm's own times are used). `Unknown` and `None` are absent.
pub fn slurm_time(s: &str) -> Option<f64> {
    let s = s.replacen('T', " ", 1);
    cadre_sim::trace::parse_timestamp(&s).ok().map(|t| t as f64)
}

/// The runs of the jobcomp file by job id (a requeued job: its first start, last end).
pub fn parse_jobcomp(text: &str) -> BTreeMap<u64, RunRecord> {
    let mut out: BTreeMap<u64, RunRecord> = BTreeMap::new();
    for line in text.lines() {
        let f = fields(line);
        let Some(id) = f.get("JobId").and_then(|v| v.parse::<u64>().ok()) else {
            continue;
        };
        let (Some(submit), Some(start), Some(end)) = (
            f.get("SubmitTime").and_then(|v| slurm_time(v)),
            f.get("StartTime").and_then(|v| slurm_time(v)),
            f.get("EndTime").and_then(|v| slurm_time(v)),
        ) else {
            continue;
        };
        let nodes = f.get("NodeCnt").and_then(|v| v.parse().ok()).unwrap_or(0);
        let rec = RunRecord {
            submit,
            start,
            end,
            nodes,
            gpus: None,
        };
        out.entry(id)
            .and_modify(|r| {
                r.start = r.start.min(rec.start);
                r.end = r.end.max(rec.end);
                r.submit = r.submit.min(rec.submit);
            })
            .or_insert(rec);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOBCOMP: &str = "JobId=2 UserId=root(0) GroupId=root(0) Name=wrap JobState=COMPLETED Partition=gpu TimeLimit=1 StartTime=2026-11-21T15:45:55 EndTime=2026-11-21T15:45:57 NodeList=gpu[002-003] NodeCnt=2 ProcCnt=2 WorkDir=/tmp/sbt ReservationName= Tres=cpu=2,mem=1000G,node=2,billing=2 Account= QOS= WcKey= Cluster=unknown SubmitTime=2026-11-21T15:45:54 EligibleTime=2026-11-21T15:45:55 DerivedExitCode=0:0 ExitCode=0:0 
JobId=1 UserId=root(0) GroupId=root(0) Name=t1 JobState=COMPLETED Partition=gpu TimeLimit=1 StartTime=2026-11-21T23:59:59 EndTime=2026-11-22T00:00:02 NodeList=gpu001 NodeCnt=1 ProcCnt=1 WorkDir=/tmp/sbt ReservationName= Tres=cpu=1,mem=500G,node=1,billing=1 Account=accta QOS= WcKey= Cluster=unknown SubmitTime=2026-11-21T23:59:50 EligibleTime=2026-11-21T15:45:55 DerivedExitCode=0:0 ExitCode=0:0 
JobId=7 UserId=root(0) GroupId=root(0) Name=x JobState=CANCELLED Partition=gpu TimeLimit=1 StartTime=Unknown EndTime=2026-11-21T15:46:00 NodeList=(null) NodeCnt=0 ProcCnt=0 SubmitTime=2026-11-21T15:45:58
";

    #[test]
    fn jobcomp_lines_become_runs() {
        let runs = parse_jobcomp(JOBCOMP);
        assert_eq!(runs.len(), 2, "a job that never started has no run");
        let r2 = &runs[&2];
        assert_eq!(r2.start - r2.submit, 1.0);
        assert_eq!(r2.end - r2.start, 2.0);
        assert_eq!(r2.nodes, 2);
        assert_eq!(r2.gpus, None);
        // Across midnight.
        let r1 = &runs[&1];
        assert_eq!(r1.end - r1.start, 3.0);
        assert_eq!(r1.start - r1.submit, 9.0);
    }

    #[test]
    fn a_requeued_job_keeps_its_first_start_and_last_end() {
        let text = "JobId=3 StartTime=2026-01-01T00:00:10 EndTime=2026-01-01T00:00:20 NodeCnt=1 SubmitTime=2026-01-01T00:00:00\n\
                    JobId=3 StartTime=2026-01-01T00:00:30 EndTime=2026-01-01T00:00:40 NodeCnt=1 SubmitTime=2026-01-01T00:00:00\n";
        let r = &parse_jobcomp(text)[&3];
        assert_eq!(
            (r.start, r.end),
            (
                slurm_time("2026-01-01T00:00:10").unwrap(),
                slurm_time("2026-01-01T00:00:40").unwrap()
            )
        );
    }

    #[test]
    fn nodes_states_and_gres() {
        let text = "NodeName=gpu001 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.42 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:8 NodeAddr=localhost State=IDLE+INVAL ThreadsPerCore=1\n\
                    NodeName=gpu002 CPUTot=64 Gres=gpu:a100:4(S:0-1) State=MIXED\n";
        let nodes = parse_nodes(text);
        assert_eq!(
            nodes[0],
            NodeRecord {
                name: "gpu001".into(),
                state: "IDLE+INVAL".into(),
                cpus: 2,
                gpus: 8
            }
        );
        assert_eq!((nodes[1].cpus, nodes[1].gpus), (64, 4));
        assert!(!node_usable("IDLE+INVAL"));
        assert!(!node_usable("IDLE+DRAIN"));
        assert!(!node_usable("DOWN+NOT_RESPONDING"));
        assert!(node_usable("IDLE"));
        assert!(node_usable("MIXED"));
        assert!(node_usable("IDLE+CLOUD"));
        assert_eq!(gres_gpus("(null)"), 0);
    }
}
