//! The `cadre` binary driven as a user would: outputs and error texts are snapshots.

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cadre(args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cadre"));
    cmd.args(args).current_dir(repo());
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("the cadre binary runs");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(text.as_bytes())
            .expect("stdin takes the input");
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("the cadre binary finishes")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn plan_of_the_example_jobs() {
    let out = cadre(
        &["plan", "--jobs", "examples/jobs/first.jsonl", "--now", "60"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    insta::assert_snapshot!(stdout(&out));
}

#[test]
fn plan_why_not_lists_nodes_for_a_job_that_never_fits() {
    let job = r#"{"name":"huge","user":"u","account":"a","time_limit":60,"submit_time":0,"groups":[{"name":"t","count":1,"per_task":{"gpus":9}}]}"#;
    let out = cadre(
        &["plan", "--jobs", "-", "--nodes", "2", "--why-not"],
        Some(job),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    insta::assert_snapshot!(stdout(&out));
}

#[test]
fn plan_json_is_machine_readable() {
    let out = cadre(
        &[
            "plan",
            "--jobs",
            "examples/jobs/first.jsonl",
            "--now",
            "60",
            "--json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("plan --json prints JSON");
    let starts = v["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .filter(|d| d.get("Start").is_some())
        .count();
    assert_eq!(starts, 4);
    assert_eq!(v["jobs"].as_array().expect("jobs").len(), 6);
}

#[test]
fn cluster_summary_of_the_superpod_example() {
    let out = cadre(
        &["cluster", "--cluster", "examples/clusters/superpod.toml"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    insta::assert_snapshot!(stdout(&out));
}

#[test]
fn printed_policy_is_a_valid_policy_file() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    for preset in ["cadre", "slurm", "fifo"] {
        let out = cadre(&["policy", "--preset", preset], None);
        assert!(out.status.success(), "{}", stderr(&out));
        let path = dir.join(format!("{preset}.toml"));
        std::fs::write(&path, &out.stdout).expect("write policy");
        let again = cadre(
            &["policy", "--policy", path.to_str().expect("utf-8 path")],
            None,
        );
        assert!(again.status.success(), "{}", stderr(&again));
        assert_eq!(stdout(&again), stdout(&out), "preset {preset} round-trips");
    }
}

#[test]
fn errors_say_what_was_wrong_and_exit_1() {
    let cases: Vec<(&str, Vec<&str>, Option<&str>)> = vec![
        (
            "unknown field in a job line",
            vec!["plan", "--jobs", "-"],
            Some("{\"name\":\"x\",\"usr\":\"u\"}\n"),
        ),
        (
            "refused job",
            vec!["plan", "--jobs", "-"],
            Some(
                r#"{"name":"x","user":"u","account":"a","time_limit":60,"submit_time":0,"groups":[{"name":"t","count":1,"per_task":{"gpus":1,"gpu_share_milli":500}}]}"#,
            ),
        ),
        (
            "unknown partition",
            vec!["plan", "--jobs", "-"],
            Some(
                r#"{"name":"x","user":"u","account":"a","partition":"cpu","time_limit":60,"submit_time":0,"groups":[{"name":"t","count":1,"per_task":{"cpus":1}}]}"#,
            ),
        ),
        ("empty job file", vec!["plan", "--jobs", "-"], Some("")),
        (
            "unknown preset",
            vec!["policy", "--preset", "lottery"],
            None,
        ),
        (
            "missing cluster file",
            vec!["cluster", "--cluster", "no/such/cluster.toml"],
            None,
        ),
        (
            "replicas without PostgreSQL",
            vec!["up", "--replicas", "2", "--data-dir", "no/such/dir"],
            None,
        ),
    ];
    let mut report = String::new();
    for (what, args, stdin) in cases {
        let out = cadre(&args, stdin);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", stderr(&out));
        report.push_str(&format!("{what}:\n{}\n", stderr(&out)));
    }
    insta::assert_snapshot!(report);
}

#[test]
fn bad_usage_exits_2() {
    let out = cadre(&["plan"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--jobs"), "{}", stderr(&out));
}

#[test]
fn bench_policy_compares_a_policy_file_with_the_slurm_preset_on_the_tiresias_loads() {
    // A Tiresias trace of its own (8-GPU gangs and narrow jobs arriving behind them), so
    // that the test needs nothing from beside the repository.
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::create_dir(dir.path().join("tiresias")).expect("the trace's directory");
    let mut trace =
        String::from("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n");
    for i in 0..24u32 {
        let gpus = [8, 1, 4, 2][i as usize % 4];
        trace += &format!(
            "{i},{gpus},{},100,vgg16,{},20\n",
            i * 20,
            100 + (i * 37) % 90
        );
    }
    let trace_file = dir.path().join("tiresias/60_job.csv");
    std::fs::write(&trace_file, trace).expect("the trace");
    // Small work first however shallow the backlog: the default before experiment 13.
    let policy = dir.path().join("small.toml");
    let text = "version = 1\n[priority]\nlargest_first_within = 0\n";
    std::fs::write(&policy, text).expect("a policy");
    let traces = dir.path().to_str().expect("a UTF-8 path");
    let policies = format!("cadre,{}", policy.display());
    let args = ["bench", "policy", "--traces", traces, "--loads", "tiresias"];
    let json = |threads: &str| -> serde_json::Value {
        let more = ["--policy", &policies, "--json", "--threads", threads];
        let out = cadre(&[&args[..], &more[..]].concat(), None);
        assert!(out.status.success(), "{}", stderr(&out));
        let mut report: serde_json::Value =
            serde_json::from_str(&stdout(&out)).expect("one JSON object");
        report.as_object_mut().expect("an object").remove("wall_s");
        report
    };
    let report = json("1");
    // Replays are deterministic: any number of threads gives the same report.
    assert_eq!(json("3"), report);
    assert_eq!(report["reference"], "slurm");
    let loads = report["loads"].as_array().expect("loads");
    let names: Vec<&str> = loads.iter().map(|l| l["load"].as_str().unwrap()).collect();
    assert_eq!(names, ["tiresias-4x4", "tiresias-2x8", "tiresias-1x8"]);
    // The 4 x 4 load's figures are `cadre sim`'s on the same trace and cluster, policy by
    // policy.
    let trace_arg = trace_file.to_str().expect("a UTF-8 path");
    let compare = format!("slurm,{policies}");
    let sim = cadre(
        &[
            "sim",
            "--trace",
            trace_arg,
            "--nodes",
            "4",
            "--gpus-per-node",
            "4",
            "--compare",
            &compare,
            "--json",
        ],
        None,
    );
    assert!(sim.status.success(), "{}", stderr(&sim));
    let sims: Vec<serde_json::Value> = stdout(&sim)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a report per line"))
        .collect();
    let figures = |f: &serde_json::Value| -> Vec<f64> {
        [
            "gpu_utilization",
            "mean_wait_s",
            "p95_wait_s",
            "max_wait_s",
            "mean_bounded_slowdown",
        ]
        .iter()
        .map(|k| f[*k].as_f64().expect("a figure"))
        .collect()
    };
    let four = &loads[0];
    assert_eq!(figures(&four["reference"]), figures(&sims[0]));
    for (p, sim) in four["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .zip(&sims[1..])
    {
        assert_eq!(p["policy"], sim["policy"]);
        assert_eq!(figures(&p["figures"]), figures(sim), "{}", p["policy"]);
    }
    // A loss is a figure worse than the preset's (utilization lower, the others higher),
    // and a total is the sum over the loads.
    let totals = report["totals"].as_array().expect("totals");
    for (i, total) in totals.iter().enumerate() {
        let mut lost = 0;
        for load in loads {
            let (mine, theirs) = (
                figures(&load["policies"][i]["figures"]),
                figures(&load["reference"]),
            );
            let worse = (mine[0] < theirs[0]) as u64
                + (1..5).filter(|&k| mine[k] > theirs[k]).count() as u64;
            assert_eq!(load["policies"][i]["losses"], worse, "{load}");
            lost += worse;
        }
        assert_eq!(total["losses"], lost, "{total}");
    }
    assert_eq!(totals[1]["policy"], "small");
    assert_ne!(
        figures(&four["policies"][0]["figures"]),
        figures(&four["policies"][1]["figures"])
    );
    // The table says the same in words.
    let out = cadre(&args, None);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("| tiresias-1x8 | cadre |"), "{text}");
    assert!(text.contains("figures lost of 15 over 3 loads"), "{text}");
    // A load that does not exist is refused with the names there are; no thread is no run.
    let out = cadre(
        &["bench", "policy", "--traces", traces, "--loads", "alibaba"],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no load is named `alibaba`"),
        "{}",
        stderr(&out)
    );
    let out = cadre(&[&args[..], &["--threads", "0"]].concat(), None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn bench_scheduler_prints_its_figures_as_json() {
    let trace = repo().join("../shared/traces/philly/philly.csv");
    if !trace.exists() {
        // The trace lives beside the repository (shared/); without it the bench says so.
        let out = cadre(
            &[
                "bench",
                "scheduler",
                "--nodes",
                "8",
                "--trace",
                "no/such.csv",
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(1));
        return;
    }
    let out = cadre(
        &[
            "bench",
            "scheduler",
            "--nodes",
            "16",
            "--gpus-per-node",
            "8",
            "--pending",
            "200",
            "--cycles",
            "3",
            "--json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    for key in [
        "nodes",
        "gpus",
        "pending",
        "cycles",
        "cycle_ms_p50",
        "cycle_ms_p99",
        "cycle_cpu_ms_p50",
        "fill_cycle_cpu_ms",
        "event_us_p50",
        "started",
        "rss_mib",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    assert_eq!(v["gpus"], 128);
    assert_eq!(v["pending"], 200);
    // The fill pass starts jobs, so its thread used some CPU time (0 would mean the clock
    // was not read).
    assert!(v["fill_cycle_cpu_ms"].as_f64().unwrap_or(0.0) > 0.0, "{v}");
}

#[test]
fn discover_reports_emulated_gpus_on_a_machine_without_any() {
    let out = cadre(&["discover", "--gpus-per-node", "2", "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("discover --json prints JSON");
    assert!(v["shape"]["cores"].as_u64().unwrap_or(0) > 0);
    let report = v["report"].to_string();
    if report.contains("no NVIDIA driver found") {
        assert_eq!(v["gpus_emulated"], true);
        assert_eq!(v["shape"]["gpus"].as_array().map(Vec::len), Some(2));
        assert!(report.contains("EMULATED"), "{report}");
    } else {
        // A machine with real GPUs: they are reported, never mixed with emulated ones.
        assert_eq!(v["gpus_emulated"], false, "{report}");
    }
}

/// `cadre sim --jobs` writes every job's outcome under each policy; the figures of the
/// report come from the same outcomes.
#[test]
fn sim_writes_every_jobs_outcome() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let csv = tmp.path().join("jobs.csv");
    let out = cadre(
        &[
            "sim",
            "--synthetic",
            "300",
            "--load",
            "1.5",
            "--nodes",
            "4",
            "--gpus-per-node",
            "8",
            "--seed",
            "3",
            "--compare",
            "fifo,cadre",
            "--jobs",
            csv.to_str().expect("a UTF-8 path"),
            "--json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&csv).expect("the outcomes are written");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(
            "policy,job,account,user,gpus,submit_s,duration_s,time_limit_s,start_s,wait_s,last_start_s,end_s,state"
        )
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 600, "a row per job and policy");
    for report in stdout(&out).lines() {
        let report: serde_json::Value = serde_json::from_str(report).expect("a JSON line");
        let policy = report["policy"].as_str().expect("a policy name");
        let mine: Vec<&Vec<&str>> = rows.iter().filter(|r| r[0] == policy).collect();
        assert_eq!(mine.len(), 300, "{policy}");
        let (mut started, mut max_wait) = (0u64, 0u64);
        for (i, r) in mine.iter().enumerate() {
            assert_eq!(r.len(), 13, "{r:?}");
            assert_eq!(r[1], i.to_string(), "jobs in the trace's order");
            if r[8].is_empty() {
                assert!(r[9..12].iter().all(|f| f.is_empty()), "{r:?}");
                continue;
            }
            let num = |s: &str| s.parse::<u64>().expect("seconds");
            let (submit, start, wait) = (num(r[5]), num(r[8]), num(r[9]));
            let (last_start, end) = (num(r[10]), num(r[11]));
            assert_eq!(start - submit, wait, "{r:?}");
            assert!(last_start >= start && end >= last_start, "{r:?}");
            assert_eq!(r[12], "COMPLETED", "every job ends well: {r:?}");
            started += 1;
            max_wait = max_wait.max(wait);
        }
        assert_eq!(Some(started), report["started_jobs"].as_u64(), "{policy}");
        assert_eq!(
            Some(max_wait as f64),
            report["max_wait_s"].as_f64(),
            "{policy}"
        );
        assert!(max_wait > 0, "the load above capacity makes jobs wait");
    }
}
