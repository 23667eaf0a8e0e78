//! `cadre sim`: replay a trace (or a synthetic one) through the scheduler with simulated
//! time, one or several policies, and report and plot what happened.

use crate::ClusterArgs;
use anyhow::{Context, Result, bail};
use cadre_core::policy::Policy;
use cadre_core::time::secs;
use cadre_core::time::{Dur, Time};
use cadre_sim::engine::{SimOptions, replay};
use cadre_sim::report::Report;
use cadre_sim::trace::{self, DEFAULT_TIME_LIMIT_FACTOR, ImportOptions, TraceFormat, TraceJob};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct SimArgs {
    /// The trace to replay (format detected from its first line unless --format is given).
    #[arg(
        long,
        required_unless_present = "synthetic",
        conflicts_with = "synthetic"
    )]
    trace: Option<PathBuf>,
    /// The trace's format: philly, openb, tiresias, pollux or cadre.
    #[arg(long)]
    format: Option<TraceFormat>,
    /// Replay this many synthetic jobs instead of a trace (see --seed and --load).
    #[arg(long)]
    synthetic: Option<usize>,
    /// Offered load of the synthetic trace, as a fraction of the cluster's GPUs.
    #[arg(long, default_value_t = 0.9)]
    load: f64,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The policy: a policy file, or a preset (cadre, slurm, fifo).
    #[arg(long, default_value = "cadre")]
    policy: String,
    /// Compare several policies (presets or files), comma-separated: `fifo,slurm,cadre`.
    #[arg(long, value_delimiter = ',', conflicts_with = "policy")]
    compare: Vec<String>,
    /// Write the report (JSON) here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Draw utilization, queue length and wait-time CDF here (.svg or .png).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write what happened to every job here (CSV, a row per job and policy: policy, job
    /// (its place among the replayed jobs, in submit order, from 0), account, user, gpus,
    /// submit_s, duration_s, time_limit_s, start_s (the first), wait_s (until then),
    /// last_start_s (later after a requeue), end_s, state; times in seconds from the
    /// replay's start (the trace's, or the window's), empty for a job that never started).
    #[arg(long)]
    jobs: Option<PathBuf>,
    /// Only jobs submitted in START:END (seconds, or with a unit: `10d:20d`) from the
    /// trace's start; times shift so that START is 0.
    #[arg(long)]
    window: Option<String>,
    /// Time limit = actual duration x this factor (rounded up to whole minutes).
    #[arg(long, default_value_t = DEFAULT_TIME_LIMIT_FACTOR)]
    time_limit_factor: f64,
    /// Seed of the synthetic trace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The least simulated time between scheduling passes (seconds or with a unit).
    #[arg(long, default_value = "1")]
    min_interval: String,
    /// Check the scheduler's invariants after every event (slow).
    #[arg(long)]
    check: bool,
    /// Print the report(s) as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn parse_window(text: &str) -> Result<(Time, Time)> {
    let (a, b) = text
        .split_once(':')
        .with_context(|| format!("--window `{text}`: expected START:END"))?;
    let start = if a.is_empty() {
        Dur(0)
    } else {
        secs::parse(a).map_err(anyhow::Error::msg)?
    };
    let end = if b.is_empty() {
        Dur(u64::MAX)
    } else {
        secs::parse(b).map_err(anyhow::Error::msg)?
    };
    if end <= start {
        bail!("--window `{text}`: END must be after START");
    }
    Ok((Time(start.0), Time(end.0)))
}

fn load_jobs(args: &SimArgs, opts: &ImportOptions, gpus: u64) -> Result<Vec<TraceJob>> {
    let mut jobs = match (&args.trace, args.synthetic) {
        (Some(path), _) => trace::import_file(path, args.format, opts)?,
        (None, Some(n)) => cadre_sim::synthetic::generate(n, gpus, args.load, args.seed, opts),
        (None, None) => bail!("give --trace FILE or --synthetic N"),
    };
    if let Some(w) = &args.window {
        let (start, end) = parse_window(w)?;
        jobs.retain(|j| j.submit >= start && j.submit < end);
        for j in &mut jobs {
            j.submit = Time(j.submit.0 - start.0);
            j.spec.submit_time = j.submit;
        }
        if jobs.is_empty() {
            bail!("--window `{w}` leaves no jobs");
        }
    }
    Ok(jobs)
}

/// The simulated cluster: a cadre cluster description, a trace's own node list (an openb
/// node CSV or a Tiresias cluster spec), or a flat cluster from flags.
fn load_cluster(args: &ClusterArgs) -> Result<cadre_core::cluster::Cluster> {
    if let Some(path) = args
        .cluster
        .as_ref()
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
    {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("failed to read cluster {}", path.display()))?;
        return match trace::trace_cluster(&text, &path.display().to_string()) {
            Some(cluster) => Ok(cluster?),
            None => bail!(
                "{}: a .csv cluster must be an openb node list (sn,cpu_milli,...) or a Tiresias cluster spec (num_switch,...)",
                path.display()
            ),
        };
    }
    args.load()
}

pub fn run(args: &SimArgs) -> Result<ExitCode> {
    if !(args.time_limit_factor >= 1.0 && args.time_limit_factor.is_finite()) {
        bail!(
            "--time-limit-factor must be at least 1 (a limit below the run time kills every job)"
        );
    }
    let cluster = load_cluster(&args.cluster)?;
    let gpus_per_node = cluster
        .shapes
        .iter()
        .map(|s| s.gpus.len() as u32)
        .max()
        .unwrap_or(0)
        .max(1);
    let opts = ImportOptions {
        gpus_per_node,
        time_limit_factor: args.time_limit_factor,
    };
    let jobs = load_jobs(args, &opts, cluster.total_gpus())?;
    let policies: Vec<(String, Policy)> = if args.compare.is_empty() {
        vec![cadre_cli::named_policy(&args.policy)?]
    } else {
        args.compare
            .iter()
            .map(|p| cadre_cli::named_policy(p.trim()))
            .collect::<Result<_>>()?
    };
    let options = SimOptions {
        min_interval: secs::parse(&args.min_interval).map_err(anyhow::Error::msg)?,
        check_invariants: args.check,
        outcomes: args.jobs.is_some(),
    };
    let mut reports = Vec::with_capacity(policies.len());
    for (name, policy) in policies {
        let bar = ProgressBar::new(jobs.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} jobs {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(name.clone());
        let mut report = replay(cluster.clone(), policy, &jobs, &options, &mut |p| {
            bar.set_position(p.done_jobs as u64);
            bar.set_message(format!("t={:.1} d", p.now.0 as f64 / 86_400.0));
        })
        .with_context(|| format!("replay with policy {name}"))?;
        bar.finish_and_clear();
        report.policy = name;
        reports.push(report);
    }
    if let Some(path) = &args.report {
        let text = if reports.len() == 1 {
            serde_json::to_string_pretty(&reports[0])?
        } else {
            serde_json::to_string_pretty(&serde_json::json!({ "policies": reports }))?
        };
        std::fs::write(path, text + "\n")
            .with_context(|| format!("failed to write report {}", path.display()))?;
    }
    if let Some(path) = &args.jobs {
        std::fs::write(path, outcomes_csv(&reports))
            .with_context(|| format!("failed to write the jobs' outcomes to {}", path.display()))?;
        for r in &mut reports {
            r.outcomes = Vec::new();
        }
    }
    if let Some(path) = &args.plot {
        cadre_sim::plot::plot(&reports, path)?;
    }
    if args.json {
        for r in &reports {
            let mut r = r.clone();
            r.series.clear();
            println!("{}", serde_json::to_string(&r)?);
        }
    } else {
        print!("{}", table(&reports));
    }
    Ok(ExitCode::SUCCESS)
}

/// Every job's outcome under each policy, as CSV with a header line.
fn outcomes_csv(reports: &[Report]) -> String {
    // A field with a comma, a quote or a line break is quoted, its quotes doubled.
    let field = |s: &str| match s.contains([',', '"', '\n', '\r']) {
        true => format!("\"{}\"", s.replace('"', "\"\"")),
        false => s.to_string(),
    };
    let some = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    let mut out = String::from(
        "policy,job,account,user,gpus,submit_s,duration_s,time_limit_s,start_s,wait_s,last_start_s,end_s,state\n",
    );
    for r in reports {
        for o in &r.outcomes {
            let state = o.state.map(|s| s.to_string()).unwrap_or_default();
            out += &format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                field(&r.policy),
                o.index,
                field(&o.account),
                field(&o.user),
                o.gpus,
                o.submit_s,
                o.duration_s,
                o.time_limit_s,
                some(o.start_s),
                some(o.wait_s),
                some(o.last_start_s),
                some(o.end_s),
                state
            );
        }
    }
    out
}

/// The reports side by side: one column per policy.
fn table(reports: &[Report]) -> String {
    type Row = (&'static str, fn(&Report) -> String);
    let rows: [Row; 20] = [
        ("jobs", |r| r.jobs.to_string()),
        ("started jobs", |r| r.started_jobs.to_string()),
        ("never started", |r| r.never_started.to_string()),
        ("GPUs", |r| r.gpus.to_string()),
        ("makespan (h)", |r| format!("{:.2}", r.makespan_s / 3600.0)),
        ("makespan lower bound (h)", |r| {
            format!("{:.2}", r.makespan_lower_bound_s / 3600.0)
        }),
        ("GPU utilization", |r| format!("{:.3}", r.gpu_utilization)),
        ("GPU utilization, backlogged", |r| {
            format!("{:.3}", r.gpu_utilization_backlogged)
        }),
        ("mean wait (s)", |r| format!("{:.0}", r.mean_wait_s)),
        ("p50 / p95 wait (s)", |r| {
            format!("{:.0} / {:.0}", r.p50_wait_s, r.p95_wait_s)
        }),
        ("p99 / max wait (s)", |r| {
            format!("{:.0} / {:.0}", r.p99_wait_s, r.max_wait_s)
        }),
        ("mean JCT (h)", |r| format!("{:.2}", r.mean_jct_s / 3600.0)),
        ("mean bounded slowdown", |r| {
            format!("{:.2}", r.mean_bounded_slowdown)
        }),
        ("partial gang starts", |r| r.partial_gang_starts.to_string()),
        ("preemptions / requeues", |r| {
            format!("{} / {}", r.preemptions, r.requeues)
        }),
        ("timeouts", |r| r.timeouts.to_string()),
        ("free GPUs while head blocked", |r| {
            format!("{:.1}", r.fragmentation.mean_free_gpus_while_blocked)
        }),
        ("cycles", |r| r.cycles.count.to_string()),
        ("cycle ms p50 / p99", |r| {
            format!("{:.2} / {:.2}", r.cycles.p50_ms, r.cycles.p99_ms)
        }),
        ("sim wall (s)", |r| format!("{:.2}", r.sim_wall_s)),
    ];
    let width = 30;
    let mut out = format!("{:<width$}", "");
    for r in reports {
        out += &format!("{:>18}", r.policy);
    }
    out.push('\n');
    for (name, value) in rows {
        out += &format!("{name:<width$}");
        for r in reports {
            out += &format!("{:>18}", value(r));
        }
        out.push('\n');
    }
    out
}
