//! The openb packing protocol (FGD, ATC'23) on the real trace files in
//! `shared/traces/alibaba-openb/`; skipped, with a note, where they are absent. The protocol
//! is deterministic, so the rates are asserted a little below what they measure.

use cadre_core::cluster::Cluster;
use cadre_sim::packing::{self, PackingOptions, Rule};
use cadre_sim::trace::{ImportOptions, TraceJob, openb};
use std::path::PathBuf;

fn load(pods: &str) -> Option<(Cluster, Vec<TraceJob>)> {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/alibaba-openb");
    let nodes = dir.join("openb_node_list_gpu_node.csv");
    let pods = dir.join(pods);
    let (Ok(n), Ok(p)) = (
        std::fs::read_to_string(&nodes),
        std::fs::read_to_string(&pods),
    ) else {
        eprintln!(
            "note: the openb trace is not in {}; skipping this test",
            dir.display()
        );
        return None;
    };
    let cluster = openb::openb_cluster(&n, &nodes.display().to_string()).unwrap();
    let jobs = openb::import(&p, &pods.display().to_string(), &ImportOptions::default()).unwrap();
    Some((cluster, jobs))
}

#[test]
fn openb_files_import_whole() {
    let Some((cluster, pods)) = load("openb_pod_list_default.csv") else {
        return;
    };
    assert_eq!(cluster.nodes.len(), 1213);
    assert_eq!(cluster.total_gpus(), 6212);
    assert_eq!(pods.len(), 8152);
    let shares = pods
        .iter()
        .filter(|p| p.spec.groups[0].per_task.gpu_share_milli.is_some())
        .count();
    assert_eq!(shares, 3078);
    assert!(pods.windows(2).all(|w| w[0].submit <= w[1].submit));
}

#[test]
fn fragmentation_preference_allocates_at_least_95_percent_of_openb() {
    let Some((cluster, pods)) = load("openb_pod_list_default.csv") else {
        return;
    };
    let opts = PackingOptions {
        rule: Rule::Fragmentation,
        ..PackingOptions::default()
    };
    let r = packing::run(&cluster, &pods, &opts);
    // Measured: 95.45% (5,929 of 6,212 GPUs) in creation order.
    assert!(r.allocation_rate >= 95.3, "{r:?}");
    assert_eq!(r.total_gpus, 6212);
    assert_eq!(r.pods_arrived, r.pods_placed + r.pods_skipped);
    // The list asks for 97.98% of the GPUs: a few pods are drawn again to reach 100%.
    assert!(r.pods_drawn > 0 && r.pods_drawn < 1000, "{r:?}");
}

#[test]
fn best_fit_alone_allocates_less_of_openb() {
    let Some((cluster, pods)) = load("openb_pod_list_default.csv") else {
        return;
    };
    let opts = PackingOptions {
        rule: Rule::BestFit,
        ..PackingOptions::default()
    };
    let r = packing::run(&cluster, &pods, &opts);
    // Measured: 91.32%; the published BestFit rate (random order) is 92.9%.
    assert!(
        (91.0..92.0).contains(&r.allocation_rate),
        "best fit moved: {r:?}"
    );
}
