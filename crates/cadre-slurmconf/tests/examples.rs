//! The example configurations of `examples/slurm/` and the fixture shaped like the
//! reference Slurm's (`shared/slurm/start-slurm.sh`), read from disk and summarised: every
//! shape, node group, partition, switch, block and note, as a reviewed snapshot.

use cadre_core::cluster::{Cluster, NodeAvail};
use cadre_core::hostlist;
use cadre_slurmconf::{SlurmCluster, load};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The summary, with paths relative to the repository.
fn summary(c: &SlurmCluster) -> String {
    let root = repo()
        .canonicalize()
        .expect("repository path")
        .display()
        .to_string();
    let cluster: &Cluster = &c.cluster;
    let mut out = String::new();
    let _ = writeln!(out, "cluster {}", cluster.name);
    for (i, s) in cluster.shapes.iter().enumerate() {
        let names: Vec<&str> = cluster
            .nodes
            .iter()
            .filter(|n| n.shape.0 as usize == i)
            .map(|n| n.name.as_str())
            .collect();
        let _ = writeln!(
            out,
            "shape {}: {} | {} cores, {} MiB, named {:?}",
            s.name,
            hostlist::compress(&names),
            s.cores,
            s.mem_mib,
            s.named
        );
        for (d, dom) in s.numa.iter().enumerate() {
            let gpus: Vec<String> = dom
                .gpus
                .iter()
                .map(|&p| {
                    let g = &s.gpus[p as usize];
                    let model = if g.model.is_empty() { "-" } else { &g.model };
                    format!("{}:{model}", g.index)
                })
                .collect();
            let _ = writeln!(
                out,
                "  numa {d}: cores {}-{}, {} MiB, gpus [{}]",
                dom.cores.first().copied().unwrap_or(0),
                dom.cores.last().copied().unwrap_or(0),
                dom.mem_mib,
                gpus.join(" ")
            );
        }
    }
    // Nodes with features or not up, in runs of the same features, state and reason.
    let mut runs: Vec<(Vec<&str>, String)> = Vec::new();
    for n in &cluster.nodes {
        if n.features.is_empty() && n.avail == NodeAvail::Up {
            continue;
        }
        let what = format!("features {:?}, {:?} {:?}", n.features, n.avail, n.reason);
        match runs.last_mut() {
            Some((names, w)) if *w == what => names.push(&n.name),
            _ => runs.push((vec![&n.name], what)),
        }
    }
    for (names, what) in runs {
        let _ = writeln!(out, "nodes {}: {what}", hostlist::compress(&names));
    }
    for p in &cluster.partitions {
        let names: Vec<&str> = p
            .nodes
            .iter()
            .map(|&id| cluster.node(id).name.as_str())
            .collect();
        let _ = writeln!(
            out,
            "partition {}{}: {} | max {:?} default {:?} tier {} factor {} {}",
            p.name,
            if p.default { " (default)" } else { "" },
            hostlist::compress(&names),
            p.max_time.map(|d| d.0),
            p.default_time.map(|d| d.0),
            p.priority_tier,
            p.priority_job_factor,
            if p.up { "up" } else { "down" }
        );
    }
    for s in &cluster.switches {
        let nodes: Vec<&str> = s
            .nodes
            .iter()
            .map(|&id| cluster.node(id).name.as_str())
            .collect();
        let children: Vec<&str> = s
            .children
            .iter()
            .map(|c| cluster.switches[c.0 as usize].name.as_str())
            .collect();
        let _ = writeln!(
            out,
            "switch {} level {}: nodes {} switches {}",
            s.name,
            s.level,
            hostlist::compress(&nodes),
            children.join(",")
        );
    }
    for b in &cluster.blocks {
        let nodes: Vec<&str> = b
            .nodes
            .iter()
            .map(|&id| cluster.node(id).name.as_str())
            .collect();
        let _ = writeln!(out, "block {}: {}", b.name, hostlist::compress(&nodes));
    }
    if !cluster.block_sizes.is_empty() {
        let _ = writeln!(out, "block sizes {:?}", cluster.block_sizes);
    }
    for f in &c.files {
        let _ = writeln!(out, "read {}", f.display());
    }
    for note in &c.notes {
        let _ = writeln!(out, "note {note}");
    }
    out.replace(&format!("{root}/"), "")
}

fn example(dir: &str) -> SlurmCluster {
    let path = repo()
        .canonicalize()
        .expect("repository path")
        .join(dir)
        .join("slurm.conf");
    load(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn small_gpu_cluster() {
    let c = example("examples/slurm/small");
    assert_eq!(c.cluster.nodes.len(), 4);
    assert_eq!(c.cluster.total_gpus(), 32);
    insta::assert_snapshot!(summary(&c));
}

#[test]
fn two_partitions_and_a_switch_tree() {
    let c = example("examples/slurm/two-partitions-tree");
    assert_eq!(c.cluster.nodes.len(), 40);
    assert_eq!(c.cluster.switches.len(), 4);
    insta::assert_snapshot!(summary(&c));
}

#[test]
fn dgx_style_nvlink_blocks() {
    let c = example("examples/slurm/dgx-block");
    assert_eq!(c.cluster.blocks.len(), 4);
    assert_eq!(c.cluster.total_gpus(), 288);
    insta::assert_snapshot!(summary(&c));
}

/// What the reference Slurm of `shared/slurm/start-slurm.sh` is configured with (4 nodes
/// of 8 GPUs and 64 CPUs): the same cluster in cadre.
#[test]
fn the_reference_slurm_configuration() {
    let c = example("crates/cadre-slurmconf/tests/fixtures/reference");
    let cluster = &c.cluster;
    assert_eq!(cluster.name, "ref");
    let names: Vec<&str> = cluster.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(hostlist::compress(&names), "gpu[001-004]");
    assert_eq!(cluster.shapes.len(), 1);
    let shape = &cluster.shapes[0];
    assert_eq!(
        (shape.cores, shape.mem_mib, shape.gpus.len()),
        (64, 512_000, 8)
    );
    assert_eq!(shape.numa.len(), 1, "CPUs alone give one NUMA domain");
    let p = &cluster.partitions[0];
    assert_eq!(p.name, "gpu");
    assert!(p.default && p.up && p.max_time.is_none());
    insta::assert_snapshot!(summary(&c));
}
