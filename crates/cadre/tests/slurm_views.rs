//! Slurm's read-side commands end to end: a cluster from `cadre up --detach` in a
//! temporary data directory, links named `squeue`, `sinfo`, `sacct`, `scancel`, `sshare`
//! and `sprio` to the `cadre` binary, and those commands run as a user or a script runs
//! them, checking their output layouts, messages and exit codes.
//!
//! One cluster serves every check (starting one is most of the cost); a guard stops it
//! (`cadre down`) when the test ends, also when it panics. Nothing here asserts a duration:
//! the test waits for states, and the deadline only keeps a broken build from hanging.

use cadre_core::job::{ArrayIndex, JobId, JobSpec};
use cadre_core::resources::TaskResources;
use cadre_core::run::RunSpec;
use cadre_core::time::Dur;
use cadre_proto::api::{JobSubmission, SubmitRequest, SubmitResponse};
use cadre_test_support::{text, wait_until};
use std::path::Path;
use std::process::{Command, Output, Stdio};

const COMMANDS: [&str; 6] = ["squeue", "sinfo", "sacct", "scancel", "sshare", "sprio"];

/// A cluster of cadre-test-support's harness (data under `data/`, the command links under
/// `bin/`, commands run in the temporary directory).
struct Cluster {
    inner: cadre_test_support::Cluster,
}

impl Cluster {
    fn up(nodes: u32, gpus_per_node: u32) -> Cluster {
        let mut inner = cadre_test_support::Cluster::builder(env!("CARGO_BIN_EXE_cadre"))
            .nodes(nodes)
            .gpus_per_node(gpus_per_node)
            .data_subdir("data")
            .workdir(".")
            .prepare();
        let bin = inner.root().join("bin");
        std::fs::create_dir(&bin).expect("bin directory");
        // scontrol too, for its option errors.
        for name in COMMANDS.iter().chain(&["scontrol"]) {
            std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_cadre"), bin.join(name))
                .expect("link to the cadre binary");
        }
        inner.start();
        Cluster { inner }
    }

    fn root(&self) -> &Path {
        self.inner.root()
    }

    fn log(&self) -> String {
        self.inner.log()
    }

    /// A command with none of the caller's `CADRE_*` or Slurm variables, against this
    /// cluster.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = self.inner.command(program);
        for (name, _) in std::env::vars_os() {
            let n = name.to_string_lossy();
            if n.starts_with("SQUEUE_")
                || n.starts_with("SINFO_")
                || n.starts_with("SACCT_")
                || n.starts_with("SCANCEL_")
                || n.starts_with("SPRIO_")
                || n == "SLURM_TIME_FORMAT"
            {
                cmd.env_remove(name);
            }
        }
        cmd
    }

    /// A Slurm command by its link, as a user runs it.
    fn slurm(&self, name: &str, args: &[&str]) -> Output {
        self.command(self.root().join("bin").join(name))
            .args(args)
            .output()
            .expect("the command runs")
    }

    /// A Slurm command that must succeed: its stdout.
    fn ok(&self, name: &str, args: &[&str]) -> String {
        let out = self.slurm(name, args);
        assert!(
            out.status.success(),
            "{name} {args:?} failed ({}): {}{}",
            out.status,
            text(&out.stderr),
            self.log()
        );
        text(&out.stdout)
    }

    fn cadre(&self, args: &[&str]) -> String {
        let out = self
            .command(env!("CARGO_BIN_EXE_cadre"))
            .args(args)
            .output()
            .expect("cadre runs");
        assert!(
            out.status.success(),
            "cadre {args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    fn submit(&self, args: &[&str]) -> u64 {
        let out = self.cadre(&[&["submit", "--parsable"][..], args].concat());
        out.trim().parse().expect("a job id")
    }

    /// Submits a held job array of `tasks` tasks through the API: the array's id.
    fn submit_array(&self, tasks: u32) -> u64 {
        let user = self.cadre(&["jobs", "--json"]);
        let user =
            serde_json::from_str::<serde_json::Value>(&user).expect("JSON")["jobs"][0]["user"]
                .as_str()
                .expect("a user")
                .to_owned();
        let jobs = (0..tasks)
            .map(|i| {
                let cpu = TaskResources {
                    cpus: 1,
                    ..TaskResources::default()
                };
                let mut spec = JobSpec::simple(&user, &user, 1, cpu, Dur(60));
                spec.name = "sweep".into();
                spec.hold = true;
                spec.array = Some(ArrayIndex {
                    array_job: JobId(0),
                    index: i,
                    max_running: None,
                });
                JobSubmission {
                    spec,
                    run: RunSpec::command(vec!["true".into()], self.root().to_owned()),
                    array_of: Some(0),
                }
            })
            .collect();
        let body = serde_json::to_string(&SubmitRequest {
            jobs,
            dry_run: false,
        })
        .expect("JSON");
        let (status, answer) = self.inner.api("POST", "/api/v1/jobs", Some(&body));
        let resp: SubmitResponse = serde_json::from_value(answer.clone())
            .unwrap_or_else(|e| panic!("not a submit answer ({status}): {e}: {answer}"));
        resp.job_ids[0].0
    }
}

#[test]
fn slurm_read_side_commands_answer_as_slurm() {
    let c = Cluster::up(2, 4);

    // A running job, a job that fails, a job too big for what is left (pending), and a
    // held array of three tasks.
    let running = c.submit(&[
        "-J",
        "sleeper",
        "-N",
        "1",
        "--gpus-per-task",
        "2",
        "-t",
        "10",
        "--",
        "sh",
        "-c",
        "trap '' USR1; sleep 60",
    ]);
    let failed = c.submit(&["-J", "fails", "--", "sh", "-c", "exit 3"]);
    let big = c.submit(&[
        "-J",
        "big",
        "-N",
        "2",
        "-n",
        "2",
        "--gpus-per-task",
        "4",
        "-t",
        "5",
        "--",
        "true",
    ]);
    let array = c.submit_array(3);
    wait_until("the sleeper runs and the failing job has ended", || {
        let out = c.ok("squeue", &["-h", "-t", "all", "-o", "%i %t"]);
        out.contains(&format!("{running} R\n")) && out.contains(&format!("{failed} F\n"))
    });

    // squeue: the default layout, widths and state codes; pending array tasks together.
    let out = c.ok("squeue", &[]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
    );
    let user = c.ok("squeue", &["-h", "-j", &running.to_string(), "-o", "%u"]);
    let user = user.trim();
    let user8: String = user.chars().take(8).collect();
    assert!(
        lines.contains(
            &format!(
                "{:>18} {:>9} {:>8} {:>8} {:>2} {:>10} {:>6} (Resources)",
                big, "gpu", "big", user8, "PD", "0:00", 2
            )
            .as_str()
        ),
        "{out}"
    );
    let busy = c.ok("squeue", &["-h", "-j", &running.to_string(), "-o", "%N"]);
    let busy = busy.trim();
    let idle = if busy == "node001" {
        "node002"
    } else {
        "node001"
    };
    assert!(
        lines.iter().any(|l| l.starts_with(&format!(
            "{:>18} {:>9} {:>8} {:>8} {:>2} ",
            running, "gpu", "sleeper", user8, "R"
        )) && l.ends_with(&format!("      1 {busy}"))),
        "{out}"
    );
    assert!(
        lines.contains(
            &format!(
                "{:>18} {:>9} {:>8} {:>8} {:>2} {:>10} {:>6} (JobHeldUser)",
                format!("{array}_[0-2]"),
                "gpu",
                "sweep",
                user8,
                "PD",
                "0:00",
                1
            )
            .as_str()
        ),
        "{out}"
    );
    // -r: one line per task; -O with widths and suffixes.
    let out = c.ok("squeue", &["-r", "-h", "-n", "sweep", "-o", "%i|%F|%K|%r"]);
    assert_eq!(
        out,
        format!(
            "{array}_2|{array}|2|JobHeldUser\n{array}_1|{array}|1|JobHeldUser\n{array}_0|{array}|0|JobHeldUser\n"
        )
    );
    let out = c.ok(
        "squeue",
        &[
            "-h",
            "-j",
            &running.to_string(),
            "-O",
            "JobID:.8,Name:6|,tres-per-node",
        ],
    );
    assert_eq!(out, format!("{running:>8}sleepe|gres:gpu:2          \n"));
    // --start: the big job's start planned by backfill; -l: the date line, long states.
    let out = c.ok(
        "squeue",
        &["--start", "-h", "-j", &big.to_string(), "-o", "%S"],
    );
    assert!(
        out.trim().len() == 19 && out.contains('T'),
        "not a time stamp: {out}"
    );
    let out = c.ok("squeue", &["-l"]);
    assert!(
        out.lines()
            .nth(1)
            .is_some_and(|l| l.contains("   STATE       TIME TIME_LIMI")),
        "{out}"
    );
    assert!(
        out.contains(" RUNNING ") && out.contains("   10:00 "),
        "{out}"
    );
    // -t all shows the failed job with its reason; unknown states and jobs are errors.
    let out = c.ok(
        "squeue",
        &["-h", "-t", "all", "-j", &failed.to_string(), "-o", "%T %R"],
    );
    assert_eq!(out, "FAILED (NonZeroExitCode)\n");
    let out = c.slurm("squeue", &["-j", "999999"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "slurm_load_jobs error: Invalid job id specified\n"
    );
    let out = c.slurm("squeue", &["-t", "bogus"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("squeue: error: Invalid job state specified: bogus\n"));
    let out = c.slurm("squeue", &["--bogus"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).ends_with(
            "squeue: unrecognized option '--bogus'\nTry \"squeue --help\" for more information\n"
        ),
        "{}",
        text(&out.stderr)
    );

    // sinfo: the summary per state, emulated GPUs as a GRES type, node-oriented output.
    let out = c.ok("sinfo", &[]);
    assert_eq!(
        out,
        format!(
            "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n\
             gpu*         up   infinite      1    mix {busy}\n\
             gpu*         up   infinite      1   idle {idle}\n"
        )
    );
    assert_eq!(
        c.ok("sinfo", &["-h", "-o", "%P %D %G"]),
        "gpu* 2 gpu:emulated:4\n"
    );
    let out = c.ok("sinfo", &["-N", "-h", "-t", "idle"]);
    assert_eq!(out, format!("{idle}        1      gpu* idle  \n"));
    let out = c.slurm("sinfo", &["-t", "bogus"]);
    assert_eq!(out.status.code(), Some(1));

    // sprio: the pending jobs' weighted factors; the weights.
    let out = c.ok("sprio", &[]);
    assert!(
        out.starts_with("          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with(&format!("{big} gpu"))),
        "{out}"
    );
    assert!(
        c.ok("sprio", &["-w", "-h"])
            .trim_start()
            .starts_with("Weights")
    );

    // sshare: the tree's columns.
    let out = c.ok("sshare", &["-a", "-P"]);
    assert!(
        out.starts_with("Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare\n"),
        "{out}"
    );

    // scancel: an array task, an unknown job, a whole array, a signal, a filter.
    c.ok("scancel", &[&format!("{array}_1")]);
    let out = c.ok("squeue", &["-r", "-h", "-n", "sweep", "-o", "%K"]);
    assert_eq!(out, "2\n0\n");
    let out = c.slurm("scancel", &["999999"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "scancel: error: Kill job error on job id 999999: Invalid job id specified\n"
    );
    let out = c.slurm("scancel", &["--signal", "FOO", &running.to_string()]);
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (Some(1), "Unknown job signal: FOO\n".into())
    );
    c.ok("scancel", &[&array.to_string()]);
    assert_eq!(c.ok("squeue", &["-h", "-n", "sweep"]), "");
    c.ok("scancel", &[&running.to_string(), "--signal", "USR1"]);
    c.ok("scancel", &["-t", "PENDING", "-n", "big"]);
    c.ok("scancel", &[&running.to_string()]);
    wait_until("every job has ended", || c.ok("squeue", &["-h"]).is_empty());

    // sacct: the default table and what submitit reads (JobID|State, -j repeated).
    let out = c.ok("sacct", &["-j", &failed.to_string()]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode "
    );
    assert_eq!(
        lines[1],
        "------------ ---------- ---------- ---------- ---------- ---------- -------- "
    );
    assert!(
        lines[2].starts_with(&format!("{failed:<12}      fails        gpu ")),
        "{out}"
    );
    assert!(lines[2].ends_with("     FAILED      3:0 "), "{out}");
    let out = c.ok(
        "sacct",
        &[
            "-o",
            "JobID,State",
            "--parsable2",
            "-j",
            &running.to_string(),
            "-j",
            &array.to_string(),
        ],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "JobID|State");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{running}|CANCELLED by "))),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{array}_0|CANCELLED"))),
        "{out}"
    );
    // The array's three tasks were cancelled before they ran: one line each.
    assert_eq!(lines.len(), 5, "{out}");
    let out = c.slurm("sacct", &["-o", "bogus"]);
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (
            Some(1),
            "sacct: error: Invalid field requested: \"bogus\"\n".into()
        )
    );
}

/// Whether the reference Slurm (`shared/slurm/start-slurm.sh`) answers on this machine.
/// Without it the comparison is skipped, unless `CADRE_TEST_SLURM` (set by `.ci/run`,
/// which starts the reference) demands it.
fn reference_slurm() -> bool {
    let up = Command::new("/usr/bin/sinfo")
        .arg("-h")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !up {
        assert!(
            std::env::var_os("CADRE_TEST_SLURM").is_none(),
            "CADRE_TEST_SLURM is set but the reference Slurm does not answer (/usr/bin/sinfo -h)"
        );
        eprintln!("the reference Slurm does not answer: comparison skipped");
    }
    up
}

/// The reference command's stdout, stderr (its program path taken out) and exit code.
fn reference(name: &str, args: &[&str]) -> (String, String, Option<i32>) {
    let out = Command::new(format!("/usr/bin/{name}"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the reference command runs");
    (
        text(&out.stdout),
        text(&out.stderr).replace("/usr/bin/", ""),
        out.status.code(),
    )
}

/// Every header, error message and exit code that does not depend on the jobs and nodes
/// of the two clusters is the reference Slurm's.
#[test]
fn headers_and_errors_are_the_reference_slurms() {
    if !reference_slurm() {
        return;
    }
    let c = Cluster::up(1, 2);
    let bin = c.root().join("bin");
    let mine = |name: &str, args: &[&str]| {
        let out = c.slurm(name, args);
        (
            text(&out.stdout),
            text(&out.stderr).replace(&format!("{}/", bin.display()), ""),
            out.status.code(),
        )
    };
    let first_header = |out: &str| {
        out.lines()
            .find(|l| !l.contains(" 20") || l.contains("JOBID") || l.contains("PARTITION"))
            .unwrap_or("")
            .to_owned()
    };
    let squeue_letters = "aAbcCDeEfFghijkKlLmMnNpPqQrRStTuUvVyY";
    let sinfo_letters = "aAbBcCdDeEfFgGhHIlLmMnNoOpPrRstTuUvwXYZz";
    let all = |letters: &str| {
        letters
            .chars()
            .map(|c| format!("%{c}"))
            .collect::<Vec<_>>()
            .join("|")
    };
    let squeue_names = "account,jobid,tres-per-node,tres-per-job,mincpus,numcpus,numnodes,endtime,dependency,feature,arrayjobid,jobarrayid,groupname,oversubscribe,name,comment,arraytaskid,timelimit,timeleft,minmemory,timeused,reqnodes,nodelist,priority,partition,qos,prioritylong,reason,reasonlist,starttime,statecompact,state,username,userid,reservation,submittime,nice,schednodes,numtasks,restartcnt,requeue,pendingtime,exit_code,cpus-per-task,JobID:.7|,Name:3x";
    let sinfo_names = "available,nodeai,features_act,maxcpuspernode,cpus,cpusstate,disk,nodes,freemem,reason,features,nodeaiot,groups,gres,gresused,oversubscribe,timestamp,priorityjobfactor,time,defaulttime,memory,allocmem,preemptmode,nodehost,nodelist,nodeaddr,cpusload,prioritytier,partition,root,partitionname,size,statecompact,statelong,statecomplete,user,userlong,version,weight,sockets,cores,threads,socketcorethread,Partition:.4|";
    let squeue_fmt = all(squeue_letters);
    let sinfo_fmt = all(sinfo_letters);
    let header_cases: Vec<(&str, Vec<&str>)> = vec![
        ("squeue", vec![]),
        ("squeue", vec!["-l"]),
        ("squeue", vec!["--start"]),
        ("squeue", vec!["-s"]),
        ("squeue", vec!["-o", &squeue_fmt]),
        ("squeue", vec!["-O", squeue_names]),
        ("sinfo", vec![]),
        ("sinfo", vec!["-l"]),
        ("sinfo", vec!["-s"]),
        ("sinfo", vec!["-N"]),
        ("sinfo", vec!["-N", "-l"]),
        ("sinfo", vec!["-R"]),
        ("sinfo", vec!["-R", "-l"]),
        ("sinfo", vec!["-o", &sinfo_fmt]),
        ("sinfo", vec!["-O", sinfo_names]),
    ];
    for (name, args) in &header_cases {
        let (theirs, _, _) = reference(name, args);
        let (ours, err, _) = mine(name, args);
        assert_eq!(
            first_header(&ours),
            first_header(&theirs),
            "{name} {args:?}: the header differs ({err})"
        );
    }
    let error_cases: Vec<(&str, Vec<&str>)> = vec![
        ("squeue", vec!["--bogus"]),
        ("squeue", vec!["-x"]),
        ("squeue", vec!["-o"]),
        ("squeue", vec!["--format"]),
        ("squeue", vec!["--long=3"]),
        ("squeue", vec!["--st"]),
        ("squeue", vec!["--bogus=1"]),
        ("squeue", vec!["--st=1"]),
        ("squeue", vec!["-j", "abc"]),
        ("squeue", vec!["-j", "999999"]),
        ("squeue", vec!["-t", "bogus"]),
        ("squeue", vec!["-u", "no-such-user-here"]),
        ("squeue", vec!["-h", "-o", "%_"]),
        ("squeue", vec!["-h", "-O", "bogus"]),
        ("sinfo", vec!["--bogus"]),
        ("sinfo", vec!["-t", "bogus"]),
        ("sinfo", vec!["-p"]),
        ("sinfo", vec!["-h", "-o", "%_"]),
        ("sinfo", vec!["-h", "-O", "bogus"]),
        ("scancel", vec![]),
        ("scancel", vec!["abc"]),
        ("scancel", vec!["--bogus"]),
        ("scancel", vec!["-t", "bogus", "5"]),
        ("scancel", vec!["-s", "FOO", "5"]),
        ("scancel", vec!["-u", "no-such-user-here"]),
        ("sacct", vec!["--bogus"]),
        ("sshare", vec!["--bogus"]),
        ("sprio", vec!["--bogus"]),
        ("scontrol", vec!["-x", "show", "job"]),
        ("scontrol", vec!["--bogus"]),
        ("scontrol", vec!["show", "job", "--ver"]),
    ];
    for (name, args) in &error_cases {
        let (_, theirs, their_code) = reference(name, args);
        let (_, ours, our_code) = mine(name, args);
        assert_eq!(
            (ours.as_str(), our_code),
            (theirs.as_str(), their_code),
            "{name} {args:?}: the message or the exit code differs"
        );
    }
}

/// Without a controller, each command says so in Slurm's words and exits 1.
#[test]
fn without_a_controller_the_commands_fail_as_slurms_do() {
    let dir = tempfile::tempdir().expect("temporary directory");
    for name in COMMANDS {
        let link = dir.path().join(name);
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_cadre"), &link).expect("link");
        let mut cmd = Command::new(&link);
        for (var, _) in std::env::vars_os() {
            if var.to_string_lossy().starts_with("CADRE_") {
                cmd.env_remove(var);
            }
        }
        let args: &[&str] = if name == "scancel" { &["5"] } else { &[] };
        let out = cmd
            .args(args)
            .env("CADRE_DATA_DIR", dir.path().join("none"))
            .output()
            .expect("the command runs");
        assert_eq!(out.status.code(), Some(1), "{name}");
        let err = text(&out.stderr);
        assert!(
            err.starts_with(&format!(
                "{name}: error: Unable to contact slurm controller (connect failure): "
            )),
            "{name}: {err}"
        );
    }
}
