//! `cadre bench policy`: a scheduling policy against a reference policy (the `slurm`
//! preset by default) on every load of docs/simulator.md's table, one replay each, and
//! the figures the policy loses.
//!
//! The loads are the Philly trace on 32, 48, 64 and 128 nodes of 8 GPUs, ten synthetic
//! loads above capacity (20,000 jobs at load 1.2 on 64 x 8, seeds 7, 1, 2, 3, 11, 4, 5, 6,
//! 8 and 9), the eight Pollux workloads on 16 x 4, and the 60-job Tiresias trace on 4 x 4,
//! 2 x 8 and 1 x 8: 25 loads, five figures each (GPU utilization, mean, p95 and longest
//! wait, mean bounded slowdown). A figure is lost when it is worse than the reference's:
//! utilization lower, any other figure higher. Partial gang starts are reported beside
//! them (a policy should start none). Replays are deterministic, so a run repeats its
//! figures exactly, on any number of threads; they run on as many as the machine has cores
//! (`--threads`), the longest first, and each trace is read once. The default against the
//! preset takes about two minutes on two cores, most of it the Philly trace at 32 x 8.
//!
//! `--held-out` replays 45 other loads instead, held out from tuning until experiment 17
//! chose its setting on them together with the table (no setting before): the Pollux
//! workloads on 12 x 4 and 24 x 4, synthetic seeds 12 to 21 (as above), and the Tiresias
//! trace on 3 x 4, 6 x 4 and 3 x 8 (held out since docs/simulator.md's experiment 15), and
//! the Pollux workloads at twice the load (`workloads-2.0`, 320 jobs each) on 16 x 4 and
//! 32 x 4 (since experiment 16); under a minute.

use anyhow::{Context, Result, bail};
use cadre_core::cluster::Cluster;
use cadre_core::policy::Policy;
use cadre_sim::engine::{SimOptions, replay};
use cadre_sim::report::Report;
use cadre_sim::trace::{self, DEFAULT_TIME_LIMIT_FACTOR, ImportOptions, TraceFormat, TraceJob};
use clap::Args;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct PolicyBenchArgs {
    /// The policies to measure (presets or policy files), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "cadre")]
    policy: Vec<String>,
    /// The reference they are measured against (a preset or a policy file).
    #[arg(long, default_value = "slurm")]
    against: String,
    /// The directory of the traces (philly/, pollux-workloads/, tiresias/).
    #[arg(long, env = "CADRE_TRACES", default_value = "../shared/traces")]
    traces: PathBuf,
    /// Only these loads, comma-separated: a load's name (the table's first column) or a
    /// family's, the part before the first `-` (`philly`, `synthetic`, `pollux`,
    /// `tiresias`; with `--held-out`, of the held-out loads, which have no `philly` and
    /// add `pollux2x`).
    #[arg(long, value_delimiter = ',')]
    loads: Vec<String>,
    /// Replay the 45 held-out loads instead of the table's 25: the Pollux workloads on
    /// 12 x 4 and 24 x 4, synthetic seeds 12 to 21, the Tiresias trace on 3 x 4, 6 x 4 and
    /// 3 x 8, and the Pollux workloads at twice the load (`pollux2x`) on 16 x 4 and 32 x 4
    /// (no setting was chosen on them until experiment 17 chose one on them and the table
    /// together; see docs/simulator.md, experiments 15 to 17).
    #[arg(long)]
    held_out: bool,
    /// Replays run at once [default: the machine's cores].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// Where a load's jobs come from.
#[derive(Clone, Debug, PartialEq)]
enum Source {
    /// A trace file under `--traces`, in a format.
    Trace(String, TraceFormat),
    /// Synthetic jobs: count, load, seed.
    Synthetic(usize, f64, u64),
}

/// One load of the table: its jobs on a flat cluster.
#[derive(Clone, Debug, PartialEq)]
struct Load {
    name: String,
    source: Source,
    nodes: u32,
    gpus_per_node: u32,
}

/// The 25 loads of docs/simulator.md's table, in its order.
fn loads() -> Vec<Load> {
    let mut out = Vec::new();
    for nodes in [32, 48, 64, 128] {
        let source = Source::Trace("philly/philly.csv".into(), TraceFormat::Philly);
        out.push(Load::flat(format!("philly-{nodes}x8"), source, nodes, 8));
    }
    out.extend(synthetic([7, 1, 2, 3, 11, 4, 5, 6, 8, 9]));
    out.extend(pollux("workloads", "pollux", 16, ""));
    out.extend(tiresias([(4, 4), (2, 8), (1, 8)]));
    out
}

/// The 45 held-out loads (`--held-out`): the same families on other clusters and seeds,
/// and the Pollux workloads at twice the load.
fn held_out_loads() -> Vec<Load> {
    let mut out = pollux("workloads", "pollux", 12, "-12x4");
    out.extend(pollux("workloads", "pollux", 24, "-24x4"));
    out.extend(pollux("workloads-2.0", "pollux2x", 16, "-16x4"));
    out.extend(pollux("workloads-2.0", "pollux2x", 32, "-32x4"));
    out.extend(synthetic(12..=21));
    out.extend(tiresias([(3, 4), (6, 4), (3, 8)]));
    out
}

/// 20,000 synthetic jobs at load 1.2 on 64 x 8, one load per seed.
fn synthetic(seeds: impl IntoIterator<Item = u64>) -> impl Iterator<Item = Load> {
    seeds.into_iter().map(|seed| {
        let source = Source::Synthetic(20_000, 1.2, seed);
        Load::flat(format!("synthetic-seed{seed}"), source, 64, 8)
    })
}

/// The eight Pollux workloads of `set` (`workloads`, 160 jobs each, or `workloads-2.0`,
/// 320 jobs each: twice the load) on `nodes` x 4, named `family-N` and `suffix`.
fn pollux(set: &str, family: &str, nodes: u32, suffix: &str) -> Vec<Load> {
    (1..=8)
        .map(|i| {
            let path = format!("pollux-workloads/{set}/workload-{i}.csv");
            let source = Source::Trace(path, TraceFormat::Pollux);
            Load::flat(format!("{family}-{i}{suffix}"), source, nodes, 4)
        })
        .collect()
}

/// The 60-job Tiresias trace on each cluster of `shapes` (nodes, GPUs per node).
fn tiresias(shapes: [(u32, u32); 3]) -> impl Iterator<Item = Load> {
    shapes.into_iter().map(|(nodes, gpus)| {
        let source = Source::Trace("tiresias/60_job.csv".into(), TraceFormat::Tiresias);
        Load::flat(format!("tiresias-{nodes}x{gpus}"), source, nodes, gpus)
    })
}

/// The loads `wanted` names (all of them if none), in the table's order: each name is a
/// load's or its family's (`pollux` for `pollux-1` to `pollux-8`); a name that matches
/// none is an error.
fn select(all: Vec<Load>, wanted: &[String]) -> Result<Vec<Load>> {
    if wanted.is_empty() {
        return Ok(all);
    }
    let named = |l: &Load, w: &str| l.name == w || l.name.split('-').next() == Some(w);
    for w in wanted {
        if !all.iter().any(|l| named(l, w)) {
            let names: Vec<&str> = all.iter().map(|l| l.name.as_str()).collect();
            bail!(
                "--loads: no load is named `{w}` (the loads: {})",
                names.join(", ")
            );
        }
    }
    Ok(all
        .into_iter()
        .filter(|l| wanted.iter().any(|w| named(l, w)))
        .collect())
}

impl Load {
    fn flat(name: String, source: Source, nodes: u32, gpus_per_node: u32) -> Load {
        Load {
            name,
            source,
            nodes,
            gpus_per_node,
        }
    }

    fn cluster(&self) -> Cluster {
        Cluster::flat_gpu(self.nodes, self.gpus_per_node)
    }

    /// The GPUs of [`Load::cluster`], without making it.
    fn gpus(&self) -> u64 {
        u64::from(self.nodes) * u64::from(self.gpus_per_node)
    }

    /// The load's jobs, with limits of twice their run times, as `cadre sim` makes them.
    fn jobs(&self, traces: &Path) -> Result<Vec<TraceJob>> {
        let opts = ImportOptions {
            gpus_per_node: self.gpus_per_node,
            time_limit_factor: DEFAULT_TIME_LIMIT_FACTOR,
        };
        Ok(match &self.source {
            Source::Trace(file, format) => {
                let path = traces.join(file);
                trace::import_file(&path, Some(*format), &opts).with_context(|| {
                    format!(
                        "load {}: reading {} (give the traces' directory with --traces)",
                        self.name,
                        path.display()
                    )
                })?
            }
            Source::Synthetic(count, load, seed) => {
                cadre_sim::synthetic::generate(*count, self.gpus(), *load, *seed, &opts)
            }
        })
    }
}

/// The five figures of a replay that the table compares.
#[derive(Clone, Debug, PartialEq, Serialize)]
struct Figures {
    gpu_utilization: f64,
    mean_wait_s: f64,
    p95_wait_s: f64,
    max_wait_s: f64,
    mean_bounded_slowdown: f64,
    partial_gang_starts: usize,
}

impl Figures {
    fn of(r: &Report) -> Figures {
        Figures {
            gpu_utilization: r.gpu_utilization,
            mean_wait_s: r.mean_wait_s,
            p95_wait_s: r.p95_wait_s,
            max_wait_s: r.max_wait_s,
            mean_bounded_slowdown: r.mean_bounded_slowdown,
            partial_gang_starts: r.partial_gang_starts,
        }
    }

    fn values(&self) -> [f64; 5] {
        [
            self.gpu_utilization,
            self.mean_wait_s,
            self.p95_wait_s,
            self.max_wait_s,
            self.mean_bounded_slowdown,
        ]
    }
}

/// A figure of a policy over the reference's, and whether it is worse.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
struct Ratio {
    /// The policy's figure over the reference's; `None` where the reference's is 0 (a
    /// wait nobody had) and the policy's is not.
    ratio: Option<f64>,
    lost: bool,
}

/// Each figure of `f` against the reference's `r`: utilization is lost when lower, the
/// waits and the slowdown when higher.
fn compare(f: &Figures, r: &Figures) -> [Ratio; 5] {
    let (f, r) = (f.values(), r.values());
    std::array::from_fn(|i| {
        let lost = if i == 0 { f[i] < r[i] } else { f[i] > r[i] };
        let ratio = if r[i] != 0.0 {
            Some(f[i] / r[i])
        } else if f[i] == 0.0 {
            Some(1.0)
        } else {
            None
        };
        Ratio { ratio, lost }
    })
}

#[derive(Serialize)]
struct PolicyRow {
    policy: String,
    figures: Figures,
    /// Utilization, mean, p95 and longest wait, bounded slowdown against the reference.
    ratios: [Ratio; 5],
    losses: usize,
}

#[derive(Serialize)]
struct LoadRow {
    load: String,
    nodes: u32,
    gpus_per_node: u32,
    jobs: usize,
    reference: Figures,
    policies: Vec<PolicyRow>,
}

#[derive(Serialize)]
struct Total {
    policy: String,
    losses: usize,
    figures: usize,
    partial_gang_starts: usize,
}

#[derive(Serialize)]
struct PolicyBenchReport {
    reference: String,
    loads: Vec<LoadRow>,
    totals: Vec<Total>,
    wall_s: f64,
}

pub fn run_policy(args: &PolicyBenchArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let (reference_name, reference) =
        cadre_cli::named_policy(&args.against).context("--against")?;
    let mut policies: Vec<(String, Policy)> = Vec::with_capacity(args.policy.len());
    for spec in &args.policy {
        let (name, policy) = cadre_cli::named_policy(spec.trim()).context("--policy")?;
        if name == reference_name || policies.iter().any(|(n, _)| *n == name) {
            bail!(
                "--policy: two policies would be named `{name}` in the table (the reference \
                 is `{reference_name}`); give files of other names"
            );
        }
        policies.push((name, policy));
    }
    let set = match args.held_out {
        true => held_out_loads(),
        false => loads(),
    };
    let loads = select(set, &args.loads)?;
    let threads = match args.threads {
        Some(n) => usize::from(n),
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    // Every trace is read once, before any replay, so that a missing one fails at once.
    let mut read: Vec<((Source, u32), Vec<TraceJob>)> = Vec::new();
    let mut jobs_of = Vec::with_capacity(loads.len());
    for load in &loads {
        let key = (load.source.clone(), load.gpus_per_node);
        let i = match read.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                read.push((key, load.jobs(&args.traces)?));
                read.len() - 1
            }
        };
        jobs_of.push(i);
    }
    let jobs = |l: usize| &read[jobs_of[l]].1;
    // Policy 0 is the reference.
    let names: Vec<&str> = std::iter::once(reference_name.as_str())
        .chain(policies.iter().map(|(n, _)| n.as_str()))
        .collect();
    let all: Vec<&Policy> = std::iter::once(&reference)
        .chain(policies.iter().map(|(_, p)| p))
        .collect();
    let mut tasks: Vec<(usize, usize)> = (0..loads.len())
        .flat_map(|l| (0..all.len()).map(move |p| (l, p)))
        .collect();
    // The longest first (the most jobs per GPU), so that no long replay starts last on an
    // otherwise idle machine.
    let cost = |l: usize| jobs(l).len() as f64 / loads[l].gpus().max(1) as f64;
    tasks.sort_by(|a, b| cost(b.0).total_cmp(&cost(a.0)));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let bar = crate::agents::progress(tasks.len() as u64, "replays");
    // One replay: the figures of its report, or an error naming it (a panic too).
    let one = |(l, p): (usize, usize)| -> Result<Figures> {
        let load = &loads[l];
        let what = || format!("load {}, policy {}", load.name, names[p]);
        let replayed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            replay(
                load.cluster(),
                all[p].clone(),
                jobs(l),
                &SimOptions::default(),
                &mut |_| {},
            )
        }));
        match replayed {
            Ok(report) => Ok(Figures::of(&report.with_context(what)?)),
            Err(_) => bail!("{}: the replay panicked", what()),
        }
    };
    let finished: Vec<Result<Vec<(usize, usize, Figures)>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(tasks.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let Some(&task) = tasks.get(next.fetch_add(1, Ordering::Relaxed)) else {
                            break;
                        };
                        match one(task) {
                            Ok(figures) => {
                                bar.inc(1);
                                bar.set_message(format!(
                                    "{} {}",
                                    loads[task.0].name, names[task.1]
                                ));
                                done.push((task.0, task.1, figures));
                            }
                            Err(e) => {
                                stop.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                    }
                    Ok(done)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a replay thread panicked")))
            })
            .collect()
    });
    bar.finish_and_clear();
    let mut measured: Vec<Vec<Option<Figures>>> = vec![vec![None; all.len()]; loads.len()];
    for worker in finished {
        for (l, p, figures) in worker? {
            measured[l][p] = Some(figures);
        }
    }
    let mut rows = Vec::with_capacity(loads.len());
    for (l, (load, measured)) in loads.iter().zip(measured).enumerate() {
        let figures: Vec<Figures> = measured
            .into_iter()
            .enumerate()
            .map(|(p, f)| {
                f.with_context(|| format!("load {}, policy {}: no report", load.name, names[p]))
            })
            .collect::<Result<_>>()?;
        let policies = figures[1..]
            .iter()
            .zip(&policies)
            .map(|(f, (name, _))| {
                let ratios = compare(f, &figures[0]);
                PolicyRow {
                    policy: name.clone(),
                    figures: f.clone(),
                    ratios,
                    losses: ratios.iter().filter(|r| r.lost).count(),
                }
            })
            .collect();
        rows.push(LoadRow {
            load: load.name.clone(),
            nodes: load.nodes,
            gpus_per_node: load.gpus_per_node,
            jobs: jobs(l).len(),
            reference: figures[0].clone(),
            policies,
        });
    }
    let totals = policies
        .iter()
        .enumerate()
        .map(|(i, (name, _))| Total {
            policy: name.clone(),
            losses: rows.iter().map(|r| r.policies[i].losses).sum(),
            figures: rows.len() * 5,
            partial_gang_starts: rows
                .iter()
                .map(|r| r.policies[i].figures.partial_gang_starts)
                .sum(),
        })
        .collect();
    let report = PolicyBenchReport {
        reference: reference_name.clone(),
        loads: rows,
        totals,
        wall_s: started.elapsed().as_secs_f64(),
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", table(&report));
        eprintln!("{} replays in {:.0} s", tasks.len(), report.wall_s);
    }
    Ok(ExitCode::SUCCESS)
}

/// The report as a Markdown table: a row per load and policy, each figure over the
/// reference's, a lost one in bold; then each policy's total.
fn table(report: &PolicyBenchReport) -> String {
    let mut out = format!(
        "Each figure over `{}`'s (utilization should be at least 1, the others at most 1; a \
         loss in bold).\n\n",
        report.reference
    );
    out +=
        "| load | policy | util | mean wait | p95 wait | max wait | bounded slowdown | losses |\n";
    out += "|---|---|---:|---:|---:|---:|---:|---:|\n";
    for row in &report.loads {
        for p in &row.policies {
            out += &format!("| {} | {} |", row.load, p.policy);
            for r in &p.ratios {
                let text = match r.ratio {
                    Some(x) => format!("{x:.4}"),
                    None => "from 0".to_string(),
                };
                out += &if r.lost {
                    format!(" **{text}** |")
                } else {
                    format!(" {text} |")
                };
            }
            out += &format!(" {} |\n", p.losses);
        }
    }
    out.push('\n');
    for t in &report.totals {
        out += &format!(
            "{}: {} figures lost of {} over {} loads; {} partial gang starts\n",
            t.policy,
            t.losses,
            t.figures,
            report.loads.len(),
            t.partial_gang_starts
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(values: [f64; 5]) -> Figures {
        Figures {
            gpu_utilization: values[0],
            mean_wait_s: values[1],
            p95_wait_s: values[2],
            max_wait_s: values[3],
            mean_bounded_slowdown: values[4],
            partial_gang_starts: 0,
        }
    }

    #[test]
    fn lower_utilization_and_longer_waits_are_losses_and_equal_figures_are_not() {
        let reference = figures([0.8, 100.0, 200.0, 300.0, 2.0]);
        let policy = figures([0.79, 90.0, 200.0, 301.0, 0.0]);
        let lost: Vec<bool> = compare(&policy, &reference)
            .iter()
            .map(|r| r.lost)
            .collect();
        assert_eq!(lost, [true, false, false, true, false]);
        let better = figures([0.81, 100.0, 200.0, 300.0, 2.0]);
        assert!(compare(&better, &reference).iter().all(|r| !r.lost));
    }

    #[test]
    fn a_wait_where_the_reference_had_none_is_a_loss_without_a_ratio() {
        let reference = figures([0.5, 0.0, 0.0, 0.0, 1.0]);
        let policy = figures([0.5, 3.0, 0.0, 0.0, 1.0]);
        let ratios = compare(&policy, &reference);
        assert_eq!(
            ratios[1],
            Ratio {
                ratio: None,
                lost: true
            }
        );
        assert_eq!(
            ratios[2],
            Ratio {
                ratio: Some(1.0),
                lost: false
            }
        );
    }

    #[test]
    fn the_table_has_the_25_loads_of_the_docs_and_selects_by_name_or_family() {
        let all = loads();
        assert_eq!(all.len(), 25);
        let names = |wanted: &[&str]| -> Vec<String> {
            let wanted: Vec<String> = wanted.iter().map(|w| w.to_string()).collect();
            select(all.clone(), &wanted)
                .unwrap()
                .into_iter()
                .map(|l| l.name)
                .collect()
        };
        // In the table's order, whatever the order asked.
        let mut expected = vec!["philly-64x8".to_string()];
        expected.extend((1..=8).map(|i| format!("pollux-{i}")));
        assert_eq!(names(&["pollux", "philly-64x8"]), expected);
        // A name is a whole name: seed 1 is not seed 11.
        assert_eq!(names(&["synthetic-seed1"]), ["synthetic-seed1"]);
        for wrong in ["alibaba", "synthetic-seed", "pollux-"] {
            let err = select(all.clone(), &[wrong.to_string()])
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("no load is named `{wrong}`")),
                "{err}"
            );
        }
    }

    #[test]
    fn the_held_out_loads_are_45_others_and_select_by_family() {
        let held = held_out_loads();
        assert_eq!(held.len(), 45);
        let tuned = loads();
        // What a replay depends on, the name aside.
        let what = |l: &Load| (l.source.clone(), l.nodes, l.gpus_per_node);
        for l in &held {
            assert!(!tuned.iter().any(|t| t.name == l.name), "{} twice", l.name);
            assert!(
                !tuned.iter().any(|t| what(t) == what(l)),
                "{} replays a load of the table",
                l.name
            );
            assert_eq!(held.iter().filter(|o| what(o) == what(l)).count(), 1);
        }
        for (name, nodes) in [("pollux-3-12x4", 12), ("pollux-3-24x4", 24)] {
            let p = held.iter().find(|l| l.name == name).unwrap();
            assert_eq!((p.nodes, p.gpus_per_node), (nodes, 4));
        }
        let t = held.iter().find(|l| l.name == "tiresias-6x4").unwrap();
        assert_eq!((t.nodes, t.gpus_per_node), (6, 4));
        let s = select(held.clone(), &["synthetic".to_string()]).unwrap();
        let seeds: Vec<&Source> = s.iter().map(|l| &l.source).collect();
        let expected: Vec<Source> = (12..=21)
            .map(|s| Source::Synthetic(20_000, 1.2, s))
            .collect();
        assert_eq!(seeds, expected.iter().collect::<Vec<_>>());
        assert_eq!(
            select(held.clone(), &["pollux".to_string()]).unwrap().len(),
            16
        );
        let twice = select(held, &["pollux2x".to_string()]).unwrap();
        assert_eq!(twice.len(), 16);
        let p = twice.iter().find(|l| l.name == "pollux2x-5-32x4").unwrap();
        let file = "pollux-workloads/workloads-2.0/workload-5.csv".to_string();
        assert_eq!(p.source, Source::Trace(file, TraceFormat::Pollux));
        assert_eq!((p.nodes, p.gpus_per_node), (32, 4));
        let q = twice.iter().find(|l| l.name == "pollux2x-2-16x4").unwrap();
        let file = "pollux-workloads/workloads-2.0/workload-2.csv".to_string();
        assert_eq!(q.source, Source::Trace(file, TraceFormat::Pollux));
        assert_eq!((q.nodes, q.gpus_per_node), (16, 4));
    }

    #[test]
    fn a_missing_trace_names_the_load_the_file_and_the_flag() {
        let load = loads().into_iter().find(|l| l.name == "pollux-3").unwrap();
        let err = load.jobs(Path::new("/nonexistent-traces")).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("load pollux-3"), "{text}");
        assert!(
            text.contains("/nonexistent-traces/pollux-workloads/workloads/workload-3.csv"),
            "{text}"
        );
        assert!(text.contains("--traces"), "{text}");
    }
}
