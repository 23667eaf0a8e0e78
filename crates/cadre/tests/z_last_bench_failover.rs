//! `cadre bench failover` run small, as a check that the benchmark works: the leader is
//! killed once, a standby takes over and starts a job, the single controller is restarted
//! once, and nothing acknowledged is lost. It needs the test PostgreSQL server (`.ci/run`
//! starts it and sets `CADRE_TEST_POSTGRES`); elsewhere it is skipped.
//!
//! Named to run after every other test file of the crate, as `z_last_bench_agents.rs` is
//! (its simulated agents' loopback connections linger in TIME_WAIT).

use std::process::{Command, Output};

fn cadre(args: &[&str], database: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cadre"))
        .args(args)
        .args(["--database", database])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the cadre binary runs")
}

/// With 1,000 simulated agents, 200 held jobs, one failover and one restart: both outages
/// end with a submission accepted and a job started, every acknowledged job is in the
/// database, no node is declared lost (a failover alone loses none), and the report has
/// every figure. The figures themselves are printed, not checked.
#[test]
fn bench_failover_takes_over_starts_a_job_and_loses_nothing() {
    let Some(database) = cadre_test_support::postgres_url() else {
        return;
    };
    let out = cadre(
        &[
            "bench",
            "failover",
            "--agents",
            "1000",
            "--jobs",
            "200",
            "--failovers",
            "1",
            "--restarts",
            "1",
            "--json",
        ],
        &database,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(v["agents"], 1000, "{v}");
    assert_eq!(v["replicas"], 2, "{v}");
    assert_eq!(v["failover"]["outages"], 1, "{v}");
    assert_eq!(v["single"]["outages"], 1, "{v}");
    assert_eq!(v["failover"]["failed"], 0, "the standby took over: {v}");
    assert_eq!(v["single"]["failed"], 0, "the controller came back: {v}");
    // 200 held jobs and one probe per outage.
    assert_eq!(v["jobs_acknowledged"], 202, "{v}");
    assert_eq!(v["jobs_lost"], 0, "{v}");
    assert_eq!(
        v["probes_not_running"], 0,
        "runs are kept across a failover: {v}"
    );
    for phase in ["failover", "single"] {
        for figure in ["submit_s", "started_s", "reconnected_s"] {
            assert!(v[phase][figure]["p50"].is_number(), "{phase} {figure}: {v}");
        }
    }
    assert_eq!(v["nodes_lost"], 0, "{v}");
    assert_eq!(v["nodes_lost_single"], 0, "{v}");
    assert!(v["target_met"].is_boolean(), "{v}");
}
