//! `cadre bench submit` and `cadre bench launch`: the controller measured from outside, as
//! a user meets it.
//!
//! - `submit`: a controller (`cadre server`, its own process, SQLite in a temporary data
//!   directory, no agents so every job stays queued) and `--clients` concurrent API clients
//!   on its Unix socket, each submitting one job per request and waiting for the answer (so
//!   every job counted is durable). Prints jobs/s, the latency of each submission, and the
//!   controller's resident memory with the whole queue in it.
//! - `launch`: a whole cluster (`cadre up --detach`, one node, emulated GPUs) and
//!   single-GPU jobs submitted one after another to the idle cluster; each job's first
//!   instruction writes the wall-clock time, and the latency is from just before the
//!   submission to that time. Prints p50/p99/max.

use anyhow::{Context, Result, bail};
use cadre_client::{Connection, Target};
use cadre_core::job::JobSpec;
use cadre_core::resources::TaskResources;
use cadre_core::run::RunSpec;
use cadre_core::time::Dur;
use cadre_proto::api::{JobSubmission, SubmitRequest, SubmitResponse};
use cadre_sim::report::percentile;
use clap::Args;
use hyper::Method;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Args, Debug)]
pub struct SubmitBenchArgs {
    /// Jobs to submit in all.
    #[arg(long, default_value_t = 20_000)]
    jobs: u32,
    /// Concurrent clients, each with its own connection.
    #[arg(long, default_value_t = 16)]
    clients: u32,
    /// Environment variables captured with each job (a real shell has about 30-60).
    #[arg(long, default_value_t = 40)]
    env_vars: u32,
    /// Keep the data directory (default: a temporary one, removed after).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Print one JSON line instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct LaunchBenchArgs {
    /// Jobs, one after another.
    #[arg(long, default_value_t = 200)]
    jobs: u32,
    /// Emulated GPUs of the one node.
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// Keep the data directory (default: a temporary one, removed after).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Print one JSON line instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct SubmitReport {
    jobs: u32,
    clients: u32,
    seconds: f64,
    jobs_per_s: f64,
    latency_ms_p50: f64,
    latency_ms_p99: f64,
    latency_ms_max: f64,
    controller_rss_mib: f64,
    queued: usize,
}

#[derive(Serialize)]
struct LaunchReport {
    jobs: u32,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    mean_ms: f64,
}

/// A data directory: the one given, or a temporary one removed when dropped.
pub(crate) enum DataDir {
    Kept(PathBuf),
    Temp(tempfile::TempDir),
}

impl DataDir {
    pub(crate) fn new(given: &Option<PathBuf>) -> Result<DataDir> {
        Ok(match given {
            Some(p) => {
                cadre_cli::paths::ensure_private_dir(p)?;
                DataDir::Kept(p.canonicalize()?)
            }
            None => DataDir::Temp(
                tempfile::Builder::new()
                    .prefix("cadre-bench")
                    .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
                    .tempdir()?,
            ),
        })
    }
    pub(crate) fn path(&self) -> &Path {
        match self {
            DataDir::Kept(p) => p,
            DataDir::Temp(t) => t.path(),
        }
    }
}

impl Drop for DataDir {
    /// A temporary data directory's run directory, which the controller makes beside it
    /// (`<name>.run`), goes with it.
    fn drop(&mut self) {
        if let DataDir::Temp(t) = self {
            let run = cadre_client::locate::sibling_run_dir(t.path());
            if run.exists() {
                let _ = std::fs::remove_dir_all(run);
            }
        }
    }
}

pub(crate) fn cadre() -> Result<std::process::Command> {
    Ok(std::process::Command::new(
        std::env::current_exe().context("failed to find the cadre executable")?,
    ))
}

/// Waits until the controller at `target` answers.
pub(crate) async fn wait_ready(target: &Target, child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("the controller exited while starting ({status})");
        }
        if let Ok(mut c) = Connection::open(target, None).await
            && c.call::<(), serde_json::Value>(Method::GET, "/whoami", None)
                .await
                .is_ok()
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the controller did not answer within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

pub(crate) fn stop(mut child: Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
}

fn job(name: &str, gpus: u32, run: RunSpec) -> JobSubmission {
    let per_task = TaskResources {
        cpus: 1,
        gpus,
        ..TaskResources::default()
    };
    let mut spec = JobSpec::simple("", "bench", 1, per_task, Dur(600));
    spec.name = name.into();
    JobSubmission {
        spec,
        run,
        array_of: None,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub fn run_submit(args: &SubmitBenchArgs) -> Result<ExitCode> {
    anyhow::ensure!(
        args.clients > 0 && args.jobs > 0,
        "--jobs and --clients must be positive"
    );
    let dir = DataDir::new(&args.data_dir)?;
    let log = std::fs::File::create(dir.path().join("server.log"))?;
    // One node that never connects: every job stays queued, as in a deep queue.
    let mut child = cadre()?
        .args([
            "server",
            "--nodes",
            "1",
            "--gpus-per-node",
            "8",
            "--data-dir",
        ])
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("failed to start the controller")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(submit_load(args, dir.path(), &mut child));
    stop(child);
    let (seconds, mut latencies, queued, rss) = result?;
    latencies.sort_by(f64::total_cmp);
    let report = SubmitReport {
        jobs: args.jobs,
        clients: args.clients,
        seconds,
        jobs_per_s: f64::from(args.jobs) / seconds,
        latency_ms_p50: percentile(&latencies, 50.0),
        latency_ms_p99: percentile(&latencies, 99.0),
        latency_ms_max: latencies.last().copied().unwrap_or(0.0),
        controller_rss_mib: rss,
        queued,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{} jobs from {} clients in {:.2} s: {:.0} durable submissions/s",
            report.jobs, report.clients, report.seconds, report.jobs_per_s
        );
        println!(
            "submission latency: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            report.latency_ms_p50, report.latency_ms_p99, report.latency_ms_max
        );
        println!(
            "controller resident memory with {} jobs queued: {:.0} MiB",
            report.queued, report.controller_rss_mib
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn submit_load(
    args: &SubmitBenchArgs,
    dir: &Path,
    child: &mut Child,
) -> Result<(f64, Vec<f64>, usize, f64)> {
    wait_ready(&Target::of_data_dir(dir), child).await?;
    let mut run = RunSpec::command(vec!["true".into()], PathBuf::from("/tmp"));
    run.env = (0..args.env_vars)
        .map(|i| {
            (
                format!("BENCH_VAR_{i}"),
                format!("value-{i}-{}", "x".repeat(24)),
            )
        })
        .collect();
    let target = Target::of_data_dir(dir);
    let bar = indicatif::ProgressBar::new(u64::from(args.jobs));
    let (seconds, latencies) = submit_concurrently(
        &target,
        args.jobs,
        args.clients,
        &job("bench", 1, run),
        &bar,
    )
    .await?;
    bar.finish_and_clear();
    // Memory first: listing the whole queue would itself take memory.
    let rss = rss_mib(child.id());
    let mut conn = Connection::open(&target, None).await?;
    let (_, text) = conn.send_raw(Method::GET, "/metrics", None).await?;
    let queued = String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| l.starts_with("cadre_jobs{") && l.contains("state=\"PENDING\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as usize;
    Ok((seconds, latencies, queued, rss))
}

/// Submits `jobs` copies of `submission` from `clients` concurrent API clients, each on its
/// own connection, one job per request, each waiting for its answer (so every job counted is
/// durable). Returns the seconds from the first submission to the last answer and each
/// submission's latency in ms.
pub(crate) async fn submit_concurrently(
    target: &Target,
    jobs: u32,
    clients: u32,
    submission: &JobSubmission,
    bar: &indicatif::ProgressBar,
) -> Result<(f64, Vec<f64>)> {
    anyhow::ensure!(clients > 0, "at least one client is needed");
    let per_client = jobs / clients;
    let extra = jobs % clients;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let n = per_client + u32::from(c < extra);
        let target = target.clone();
        let submission = submission.clone();
        let bar = bar.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = Connection::open(&target, None).await?;
            let mut lat = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let req = SubmitRequest {
                    jobs: vec![submission.clone()],
                    dry_run: false,
                };
                let t = Instant::now();
                let _: SubmitResponse = conn.call(Method::POST, "/jobs", Some(&req)).await?;
                lat.push(ms(t.elapsed()));
                bar.inc(1);
            }
            anyhow::Ok(lat)
        }));
    }
    let mut latencies = Vec::with_capacity(jobs as usize);
    for t in tasks {
        latencies.extend(t.await??);
    }
    Ok((t0.elapsed().as_secs_f64(), latencies))
}

/// Waits for the stamp file a job's first instruction writes (`date +%s%N` into
/// `PATH.tmp`, then renamed to `PATH`, so that it is never read half written) and returns
/// its time; `None` if it did not appear within `timeout`.
pub(crate) fn wait_for_stamp(path: &Path, timeout: Duration) -> Result<Option<u128>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return Ok(Some(text.trim().parse().with_context(|| {
                format!("unreadable time stamp in {}", path.display())
            })?));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The shell line that writes the stamp [`wait_for_stamp`] reads.
pub(crate) fn stamp_script(path: &Path) -> String {
    format!("date +%s%N > {0}.tmp && mv {0}.tmp {0}", path.display())
}

/// The wall clock in nanoseconds since the epoch (what `date +%s%N` prints).
pub(crate) fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

pub fn run_launch(args: &LaunchBenchArgs) -> Result<ExitCode> {
    anyhow::ensure!(args.jobs > 0, "--jobs must be positive");
    let dir = DataDir::new(&args.data_dir)?;
    let status = cadre()?
        .args(["up", "--detach", "--nodes", "1", "--gpus-per-node"])
        .arg(args.gpus_per_node.to_string())
        .arg("--data-dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .status()
        .context("failed to start cadre up")?;
    if !status.success() {
        bail!(
            "`cadre up --detach` failed ({status}); see {}",
            dir.path().join("cadre.log").display()
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(launch_load(args, dir.path()));
    let _ = cadre()?
        .args(["down", "--data-dir"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .status();
    let mut lat = result?;
    let mean = lat.iter().sum::<f64>() / lat.len() as f64;
    lat.sort_by(f64::total_cmp);
    let report = LaunchReport {
        jobs: args.jobs,
        p50_ms: percentile(&lat, 50.0),
        p99_ms: percentile(&lat, 99.0),
        max_ms: lat.last().copied().unwrap_or(0.0),
        mean_ms: mean,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "submit to first instruction, {} single-GPU jobs one after another on an idle node: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, mean {:.1} ms",
            report.jobs, report.p50_ms, report.p99_ms, report.max_ms, report.mean_ms
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn launch_load(args: &LaunchBenchArgs, dir: &Path) -> Result<Vec<f64>> {
    let target = Target::of_data_dir(dir);
    let mut conn = Connection::open(&target, None).await?;
    let stamps = dir.join("stamps");
    std::fs::create_dir_all(&stamps)?;
    let bar = indicatif::ProgressBar::new(u64::from(args.jobs));
    let mut lat = Vec::with_capacity(args.jobs as usize);
    for i in 0..args.jobs {
        let stamp = stamps.join(format!("{i}"));
        // The job's first instruction: the shell's `date`, written to the stamp file.
        let script = stamp_script(&stamp);
        let mut run = RunSpec::command(vec!["/bin/sh".into(), "-c".into(), script], stamps.clone());
        run.stdout = Some("/dev/null".into());
        let req = SubmitRequest {
            jobs: vec![job("launch", 1, run)],
            dry_run: false,
        };
        let t0 = now_ns();
        let _: SubmitResponse = conn.call(Method::POST, "/jobs", Some(&req)).await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let started: u128 = loop {
            if let Ok(text) = std::fs::read_to_string(&stamp) {
                break text.trim().parse().context("unreadable stamp")?;
            }
            if Instant::now() >= deadline {
                bail!("job {i} did not start within 30 s");
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        lat.push(started.saturating_sub(t0) as f64 / 1e6);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(lat)
}
