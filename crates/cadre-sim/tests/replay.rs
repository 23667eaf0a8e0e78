//! Replays of small traces: exact figures on hand-made traces, and properties on random ones.

use cadre_core::cluster::Cluster;
use cadre_core::job::JobSpec;
use cadre_core::policy::Policy;
use cadre_core::resources::TaskResources;
use cadre_core::time::{Dur, Time};
use cadre_sim::engine::{SimOptions, replay};
use cadre_sim::report::Report;
use cadre_sim::trace::{ImportOptions, TraceJob};
use proptest::prelude::*;

fn job(
    account: &str,
    submit: u64,
    gpus: u32,
    nodes: u32,
    duration: u64,
    opts: &ImportOptions,
) -> TraceJob {
    let per_task = TaskResources {
        cpus: 4 * gpus,
        mem_mib: 1024,
        gpus,
        ..TaskResources::default()
    };
    let mut spec = JobSpec::simple(
        &format!("{account}-user"),
        account,
        nodes,
        per_task,
        opts.time_limit(Dur(duration)),
    );
    spec.submit_time = Time(submit);
    if nodes > 1 {
        spec.groups[0].tasks_per_node = Some(1);
    }
    TraceJob {
        submit: Time(submit),
        duration: Dur(duration),
        spec,
    }
}

fn checked() -> SimOptions {
    SimOptions {
        check_invariants: true,
        ..SimOptions::default()
    }
}

/// A report without the figures that depend on the host's speed.
fn deterministic(mut r: Report) -> Report {
    r.sim_wall_s = 0.0;
    r.cycles.mean_ms = 0.0;
    r.cycles.p50_ms = 0.0;
    r.cycles.p99_ms = 0.0;
    r.cycles.max_ms = 0.0;
    r
}

#[test]
fn two_whole_node_jobs_queue_one_behind_the_other() {
    let o = ImportOptions::default();
    let jobs = vec![job("a", 0, 8, 1, 100, &o), job("b", 10, 8, 1, 100, &o)];
    let r = replay(
        Cluster::flat_gpu(1, 8),
        Policy::default(),
        &jobs,
        &checked(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(r.jobs, 2);
    assert_eq!(r.started_jobs, 2);
    assert_eq!(r.makespan_s, 200.0);
    assert_eq!(r.mean_wait_s, 45.0, "b waits from 10 to 100");
    assert_eq!(r.max_wait_s, 90.0);
    assert_eq!(r.mean_jct_s, 145.0);
    assert_eq!(r.gpu_utilization, 1.0);
    assert_eq!(r.makespan_lower_bound_s, 200.0);
    assert!(
        (r.mean_bounded_slowdown - 1.45).abs() < 1e-9,
        "{}",
        r.mean_bounded_slowdown
    );
    assert_eq!(r.partial_gang_starts, 0);
    assert_eq!(r.accounts.len(), 2);
    assert!((r.accounts[0].share - 0.5).abs() < 1e-9);
    assert!((r.fragmentation.blocked_s - 90.0).abs() < 1e-9);
    assert_eq!(r.fragmentation.mean_free_gpus_while_blocked, 0.0);
}

#[test]
fn backfill_fills_the_hole_in_front_of_a_reserved_gang() {
    let o = ImportOptions {
        time_limit_factor: 1.0,
        ..ImportOptions::default()
    };
    // Node 1 busy until 600; a 2-node gang must wait for it; a short 8-GPU job fits on
    // node 2 before the gang's reservation and backfills; FIFO leaves node 2 idle instead.
    let jobs = vec![
        job("a", 0, 8, 1, 600, &o),
        job("b", 1, 8, 2, 600, &o),
        job("c", 2, 8, 1, 300, &o),
    ];
    let cadre = replay(
        Cluster::flat_gpu(2, 8),
        Policy::default(),
        &jobs,
        &checked(),
        &mut |_| {},
    )
    .unwrap();
    let fifo = replay(
        Cluster::flat_gpu(2, 8),
        Policy::fifo(),
        &jobs,
        &checked(),
        &mut |_| {},
    )
    .unwrap();
    assert!(
        cadre.mean_wait_s < fifo.mean_wait_s,
        "{} vs {}",
        cadre.mean_wait_s,
        fifo.mean_wait_s
    );
    assert!(cadre.makespan_s < fifo.makespan_s);
    assert_eq!(
        cadre.max_wait_s, 599.0,
        "the gang still starts when node 1 frees"
    );
}

#[test]
fn a_job_that_never_fits_is_reported_not_lost() {
    let o = ImportOptions::default();
    let jobs = vec![job("a", 0, 8, 3, 100, &o), job("b", 5, 1, 1, 100, &o)];
    let r = replay(
        Cluster::flat_gpu(2, 8),
        Policy::default(),
        &jobs,
        &checked(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(r.never_started, 1);
    assert_eq!(r.started_jobs, 1);
}

fn trace_strategy() -> impl Strategy<Value = Vec<TraceJob>> {
    let o = ImportOptions::default();
    prop::collection::vec((0u64..2000, 1u32..9, 1u32..3, 1u64..900, 0usize..3), 1..40).prop_map(
        move |rows| {
            let mut jobs: Vec<TraceJob> = rows
                .into_iter()
                .map(|(submit, gpus, nodes, duration, account)| {
                    job(["a", "b", "c"][account], submit, gpus, nodes, duration, &o)
                })
                .collect();
            jobs.sort_by_key(|j| j.submit);
            jobs
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_traces_keep_every_invariant_and_replay_identically(
        jobs in trace_strategy(),
        preset in prop::sample::select(vec!["cadre", "slurm", "fifo"]),
        interval in 1u64..60,
    ) {
        let policy = Policy::preset(preset).unwrap();
        let options = SimOptions {
            min_interval: Dur(interval),
            check_invariants: true,
            ..SimOptions::default()
        };
        let first = replay(Cluster::flat_gpu(3, 8), policy.clone(), &jobs, &options, &mut |_| {}).unwrap();
        prop_assert_eq!(first.partial_gang_starts, 0);
        prop_assert_eq!(first.started_jobs + first.never_started, jobs.len());
        prop_assert_eq!(first.never_started, 0, "every job fits on 3 nodes");
        prop_assert!(first.gpu_utilization <= 1.0 + 1e-9);
        prop_assert!(first.makespan_s + 1e-9 >= first.makespan_lower_bound_s - 1.0);
        let second = replay(Cluster::flat_gpu(3, 8), policy, &jobs, &options, &mut |_| {}).unwrap();
        prop_assert_eq!(deterministic(first), deterministic(second));
    }
}

#[test]
fn plot_draws_every_policy_into_an_svg() {
    let o = ImportOptions::default();
    let jobs = vec![
        job("a", 0, 8, 1, 100, &o),
        job("b", 10, 8, 1, 100, &o),
        job("c", 20, 4, 1, 50, &o),
    ];
    let mut reports = Vec::new();
    for preset in ["fifo", "cadre"] {
        let mut r = replay(
            Cluster::flat_gpu(1, 8),
            Policy::preset(preset).unwrap(),
            &jobs,
            &checked(),
            &mut |_| {},
        )
        .unwrap();
        r.policy = preset.to_string();
        reports.push(r);
    }
    let dir = std::env::temp_dir().join(format!("cadre-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cmp.svg");
    cadre_sim::plot::plot(&reports, &path)
        .expect("a TrueType font is installed (fonts-dejavu-core)");
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    for needle in [
        "GPU utilization",
        "queued jobs",
        "wait time CDF",
        "fifo: util",
        "cadre: util",
    ] {
        assert!(svg.contains(needle), "the plot lacks `{needle}`");
    }
    let bad = cadre_sim::plot::plot(&reports, &dir.join("cmp.gif")).unwrap_err();
    assert!(
        bad.to_string().contains("must end in .svg or .png"),
        "{bad}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
