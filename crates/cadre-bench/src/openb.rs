//! `cadre bench openb`: the FGD paper's packing protocol (ATC'23) on the Alibaba openb
//! trace, placed by cadre's own placement (see `cadre_sim::packing` for the protocol and how
//! it differs from the published runs).
//!
//! Pods arrive in creation order and never leave; each is placed on what is free and booked;
//! the GPU allocation rate is measured when the arrived GPU demand reaches 100% of the
//! cluster's GPUs. For reference, the published rates of the paper's artefact for the same
//! pod list (mean over its 10 seeds) are read from `published_fgd_atc23_allocation.csv`.

use anyhow::{Context, Result, bail};
use cadre_sim::packing::{self, Order, PackingOptions, PackingReport, Rule};
use cadre_sim::trace::{ImportOptions, openb};
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

const TRACES: &str = "../shared/traces/alibaba-openb";

#[derive(Args, Debug)]
pub struct OpenbBenchArgs {
    /// The pod list (`openb_pod_list_*.csv`).
    #[arg(
        long,
        env = "CADRE_OPENB_PODS",
        default_value = "../shared/traces/alibaba-openb/openb_pod_list_default.csv"
    )]
    pods: PathBuf,
    /// The node list (`openb_node_list_gpu_node.csv`).
    #[arg(
        long,
        env = "CADRE_OPENB_NODES",
        default_value = "../shared/traces/alibaba-openb/openb_node_list_gpu_node.csv"
    )]
    nodes: PathBuf,
    /// The published results to compare with (read if present).
    #[arg(
        long,
        default_value = "../shared/traces/alibaba-openb/published_fgd_atc23_allocation.csv"
    )]
    published: PathBuf,
    /// Placement rules to run, each on a fresh cluster.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [RuleArg::Fragmentation, RuleArg::BestFit])]
    rules: Vec<RuleArg>,
    /// Shuffle the pods with this seed instead of replaying them in creation order (the
    /// published runs shuffle, with Go's generator and seeds 42-51).
    #[arg(long)]
    shuffle: Option<u64>,
    /// Seed of the draws that extend a pod list too short to reach the target, and of the
    /// random rule.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Arrived GPU demand, in percent of the GPUs, at which the rate is measured.
    #[arg(long, default_value_t = 100)]
    target: u32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum RuleArg {
    /// The fragmentation preference, profile = the pods arrived so far.
    Fragmentation,
    /// The fragmentation preference, profile = the whole pod list (as FGD's artefact).
    FragmentationKnown,
    /// Best fit: the node with the least room left (the `slurm` preset's placement; cadre's
    /// default policy places by fragmentation).
    BestFit,
    /// A node drawn at random among those that fit.
    Random,
}

#[derive(Serialize)]
struct RuleResult {
    rule: RuleArg,
    #[serde(flatten)]
    report: PackingReport,
    /// Wall time per placement, microseconds.
    place_us: f64,
}

#[derive(Serialize)]
struct Published {
    policy: String,
    /// Mean allocation rate (%) over the published seeds at the target.
    rate: f64,
    seeds: usize,
}

#[derive(Serialize)]
struct OpenbBenchReport {
    pods_file: String,
    nodes: usize,
    total_gpus: u64,
    order: Order,
    results: Vec<RuleResult>,
    published: Vec<Published>,
}

fn read(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| {
        format!(
            "failed to read the openb {what} {} (the trace is in {TRACES}; give its path with \
             --{what})",
            path.display()
        )
    })
}

/// Mean published rate per policy for one workload at `target` percent: rows are
/// `workload,sc_policy,tune,seed,total_gpus,0,1,...,130`.
fn published(text: &str, workload: &str, target: u32) -> Vec<Published> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let cols: Vec<&str> = header.split(',').collect();
    let Some(col) = cols.iter().position(|c| *c == target.to_string()) else {
        return Vec::new();
    };
    let mut out: Vec<(String, f64, usize)> = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        if f.first() != Some(&workload) {
            continue;
        }
        let (Some(policy), Some(Ok(v))) = (f.get(1), f.get(col).map(|v| v.parse::<f64>())) else {
            continue;
        };
        // `06-FGD` -> `FGD`.
        let name = policy
            .split_once('-')
            .map_or(*policy, |(_, n)| n)
            .to_string();
        match out.iter_mut().find(|(p, _, _)| *p == name) {
            Some(e) => {
                e.1 += v;
                e.2 += 1;
            }
            None => out.push((name, v, 1)),
        }
    }
    out.into_iter()
        .map(|(policy, sum, n)| Published {
            policy,
            rate: sum / n as f64,
            seeds: n,
        })
        .collect()
}

pub fn run_openb(args: &OpenbBenchArgs) -> Result<ExitCode> {
    if args.rules.is_empty() {
        bail!("--rules names no rule");
    }
    let node_text = read(&args.nodes, "nodes")?;
    let pod_text = read(&args.pods, "pods")?;
    let cluster = openb::openb_cluster(&node_text, &args.nodes.display().to_string())?;
    let pods = openb::import(
        &pod_text,
        &args.pods.display().to_string(),
        &ImportOptions::default(),
    )?;
    let order = args.shuffle.map_or(Order::Creation, Order::Shuffled);
    let mut results = Vec::new();
    for &rule in &args.rules {
        let opts = PackingOptions {
            target_percent: args.target,
            order,
            rule: match rule {
                RuleArg::Fragmentation => Rule::Fragmentation,
                RuleArg::FragmentationKnown => Rule::FragmentationKnown,
                RuleArg::BestFit => Rule::BestFit,
                RuleArg::Random => Rule::Random(args.seed),
            },
            seed: args.seed,
        };
        let start = Instant::now();
        let report = packing::run(&cluster, &pods, &opts);
        let place_us = start.elapsed().as_secs_f64() * 1e6 / report.pods_arrived.max(1) as f64;
        results.push(RuleResult {
            rule,
            report,
            place_us,
        });
    }
    let workload = args
        .pods
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let published = std::fs::read_to_string(&args.published)
        .map(|t| published(&t, &workload, args.target))
        .unwrap_or_default();
    let report = OpenbBenchReport {
        pods_file: args.pods.display().to_string(),
        nodes: cluster.nodes.len(),
        total_gpus: cluster.total_gpus(),
        order,
        results,
        published,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", render(&report, args.target));
    }
    Ok(ExitCode::SUCCESS)
}

fn render(r: &OpenbBenchReport, target: u32) -> String {
    let order = match r.order {
        Order::Creation => "creation order".to_string(),
        Order::Shuffled(seed) => format!("shuffled, seed {seed}"),
    };
    let mut out = format!(
        "openb packing: {} ({order}) on {} nodes, {} GPUs; arrivals until the GPU demand \
         reaches {target}%\n\n",
        r.pods_file, r.nodes, r.total_gpus
    );
    out.push_str(&format!(
        "{:<20} {:>9} {:>17} {:>7} {:>8} {:>6} {:>9}\n",
        "rule", "rate", "allocated GPUs", "pods", "skipped", "drawn", "us/place"
    ));
    for x in &r.results {
        let rep = &x.report;
        let rule = x
            .rule
            .to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_string());
        out.push_str(&format!(
            "{:<20} {:>8.2}% {:>8.1} / {:<6} {:>7} {:>8} {:>6} {:>9.1}\n",
            rule,
            rep.allocation_rate,
            rep.allocated_gpus,
            rep.total_gpus,
            rep.pods_arrived,
            rep.pods_skipped,
            rep.pods_drawn,
            x.place_us
        ));
    }
    if !r.published.is_empty() {
        out.push_str(&format!(
            "\npublished (FGD artefact, shuffled order, mean over seeds) at {target}%:\n"
        ));
        for p in &r.published {
            out.push_str(&format!(
                "  {:<16} {:>6.2}%  ({} seeds)\n",
                p.policy, p.rate, p.seeds
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_rates_are_averaged_per_policy() {
        let text = "workload,sc_policy,tune,seed,total_gpus,99,100\n\
                    openb_pod_list_default,01-Random,1.3,42,6212,85.0,86.0\n\
                    openb_pod_list_default,01-Random,1.3,43,6212,85.0,87.0\n\
                    openb_pod_list_default,06-FGD,1.3,42,6212,95.0,95.2\n\
                    openb_pod_list_other,06-FGD,1.3,42,6212,90.0,90.0\n";
        let p = published(text, "openb_pod_list_default", 100);
        assert_eq!(p.len(), 2);
        assert_eq!(
            (p[0].policy.as_str(), p[0].rate, p[0].seeds),
            ("Random", 86.5, 2)
        );
        assert_eq!((p[1].policy.as_str(), p[1].rate), ("FGD", 95.2));
        assert!(published(text, "openb_pod_list_default", 130).is_empty());
    }
}
