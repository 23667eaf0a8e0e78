//! `cadre bench vs-slurm --quick`, shrunk further, against the reference Slurm of
//! `../shared/slurm/start-slurm.sh` (CI starts it with 4 nodes of 8 GPUs and 64 CPUs and
//! sets `CADRE_TEST_SLURM=1`). Checks what the run reports, never how fast: every workload
//! ran on both systems, every replayed job has a record on both, no gang started partly.
//! Without the reference the test says so and passes, except under CI.

use std::path::PathBuf;
use std::process::Command;

fn reference_available() -> bool {
    if std::env::var_os("CADRE_TEST_SLURM").is_some() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the reference Slurm is required under CI: .ci/run starts it and sets CADRE_TEST_SLURM"
    );
    eprintln!(
        "note: skipping cadre bench vs-slurm: start the reference with ../shared/slurm/start-slurm.sh 4 8 64 and set CADRE_TEST_SLURM=1"
    );
    false
}

#[test]
fn vs_slurm_quick_runs_every_workload_on_both_systems() {
    if !reference_available() {
        return;
    }
    let trace =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/philly/philly.csv");
    let out = Command::new(env!("CARGO_BIN_EXE_cadre"))
        .args([
            "bench",
            "vs-slurm",
            "--quick",
            "--json",
            "--submit-jobs",
            "40",
            "--latency-jobs",
            "3",
            "--replay-jobs",
            "12",
            "--replay-span",
            "5",
            "--scale-cap",
            "20",
            "--trace",
        ])
        .arg(&trace)
        .env_remove("CADRE_SERVER")
        .env_remove("CADRE_DATA_DIR")
        .output()
        .expect("cadre runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cadre bench vs-slurm failed:\n{stderr}"
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    for workload in ["submit", "latency", "replay", "scale"] {
        for side in ["cadre", "slurm"] {
            assert!(
                v[workload][side].is_object(),
                "{workload}.{side} missing in {v}"
            );
        }
    }
    for side in ["cadre", "slurm"] {
        assert!(v["submit"][side]["submit_per_s"].as_f64().unwrap() > 0.0);
        assert_eq!(v["submit"][side]["failed"], 0, "{side}: {stderr}");
        assert!(v["latency"][side]["p50_ms"].as_f64().unwrap() > 0.0);
        assert_eq!(v["replay"][side]["jobs"], 12);
        assert_eq!(v["replay"][side]["missing"], 0, "{side}: {stderr}");
        assert!(v["replay"][side]["makespan_s"].as_f64().unwrap() > 0.0);
        assert!(!v["scale"][side]["steps"].as_array().unwrap().is_empty());
    }
    assert!(v["submit"]["cadre"]["api_submit_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(v["replay"]["cadre"]["partial_gang_starts"], 0);
    assert_eq!(v["replay"]["slurm"]["partial_gang_starts"], 0);
}
