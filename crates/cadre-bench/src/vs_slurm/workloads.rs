//! The four workloads, each run on one system at a time: what is submitted, how, and what
//! is read back. The figures come from the systems' own records (replay) or from time
//! stamps the jobs write themselves (latency, scale); nothing is estimated.

use super::replay::{self, ReplayPlan, TraceEntry};
use super::report::{LatencyFigures, ReplayFigures, ScaleFigures, ScaleStep, SubmitFigures};
use super::system::{Kind, System};
use super::{BUSY_FEATURE, Sizes, reference, target_of};
use crate::api::{now_ns, stamp_script, submit_concurrently, wait_for_stamp};
use anyhow::{Context, Result, bail};
use cadre_core::job::JobSpec;
use cadre_core::resources::TaskResources;
use cadre_core::run::RunSpec;
use cadre_core::time::Dur;
use cadre_proto::api::JobSubmission;
use cadre_sim::report::percentile;
use cadre_sim::trace::{self, ImportOptions, TraceFormat};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the cluster may take to empty after a workload (jobs cancelled or ending).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);

/// A probe or latency job that has not started after this long counts as not started.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The account of the bench's own jobs (latency, scale), the same on both systems.
const ACCOUNT: &str = "bench";

fn api_job(
    name: &str,
    cpus: u32,
    gpus: u32,
    limit: Dur,
    command: &str,
    work: &Path,
) -> JobSubmission {
    let per_task = TaskResources {
        cpus,
        gpus,
        ..TaskResources::default()
    };
    let mut spec = JobSpec::simple("", ACCOUNT, 1, per_task, limit);
    spec.name = name.into();
    let mut run = RunSpec::command(
        vec!["/bin/sh".into(), "-c".into(), command.into()],
        work.to_path_buf(),
    );
    run.stdout = Some("/dev/null".into());
    JobSubmission {
        spec,
        run,
        array_of: None,
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// `submit`: the same `sbatch --wrap true` from concurrent shells on both; cadre's API
/// with the same job too. The jobs run as the scheduler starts them; whatever is left is
/// cancelled once measured, and the cluster is let drain before the next workload.
pub fn submit(sys: &System, sizes: &Sizes, cadre_dir: Option<&Path>) -> Result<SubmitFigures> {
    eprintln!(
        "{}: submit: {} x sbatch --wrap true from {} shells",
        sys.kind.name(),
        sizes.submit_jobs,
        sizes.submit_shells
    );
    let (seconds, failed) = super::system::submit_from_shells(
        sys,
        sizes.submit_jobs,
        sizes.submit_shells,
        &["--wrap", "true"],
    )?;
    sys.cancel_all()?;
    sys.wait_idle(DRAIN_TIMEOUT, "cancelling the submit workload's jobs")?;
    let mut figures = SubmitFigures {
        submit_per_s: f64::from(sizes.submit_jobs - failed) / seconds,
        api_submit_per_s: None,
        jobs: sizes.submit_jobs,
        failed,
    };
    if let Some(dir) = cadre_dir {
        eprintln!(
            "{}: submit: {} jobs through the API from {} clients",
            sys.kind.name(),
            sizes.submit_jobs,
            sizes.submit_shells
        );
        let job = api_job("wrap", sys.cpus_per_job, 0, Dur(0), "true", &sys.work);
        let bar = indicatif::ProgressBar::new(u64::from(sizes.submit_jobs));
        let (seconds, _) = runtime()?.block_on(submit_concurrently(
            &target_of(dir),
            sizes.submit_jobs,
            sizes.submit_shells,
            &job,
            &bar,
        ))?;
        bar.finish_and_clear();
        figures.api_submit_per_s = Some(f64::from(sizes.submit_jobs) / seconds);
        sys.cancel_all()?;
        sys.wait_idle(DRAIN_TIMEOUT, "cancelling the API submissions")?;
    }
    Ok(figures)
}

/// The `sbatch` arguments of a single-GPU job whose first instruction writes `stamp`.
fn stamped_job(sys: &System, name: &str, stamp: &Path) -> Vec<String> {
    vec![
        "--parsable".into(),
        "-J".into(),
        name.into(),
        "-A".into(),
        ACCOUNT.into(),
        "-t".into(),
        "1".into(),
        "-c".into(),
        sys.cpus_per_job.to_string(),
        "--gres=gpu:1".into(),
        "-o".into(),
        "/dev/null".into(),
        "--wrap".into(),
        stamp_script(stamp),
    ]
}

/// Submits one stamped job and waits for its first instruction: the ms from just before
/// `sbatch` to the stamp, `None` if it did not start within [`START_TIMEOUT`] (then it is
/// cancelled).
fn time_one(sys: &System, name: &str, stamp: &Path) -> Result<Option<f64>> {
    let _ = std::fs::remove_file(stamp);
    let args = stamped_job(sys, name, stamp);
    let t0 = now_ns();
    let id = sys.submit(&args)?;
    match wait_for_stamp(stamp, START_TIMEOUT)? {
        Some(t) => Ok(Some(t.saturating_sub(t0) as f64 / 1e6)),
        None => {
            sys.cancel(&[id]);
            Ok(None)
        }
    }
}

/// `latency`: single-GPU jobs one after another on the idle cluster.
pub fn latency(sys: &System, sizes: &Sizes) -> Result<LatencyFigures> {
    eprintln!(
        "{}: latency: {} single-GPU jobs one after another",
        sys.kind.name(),
        sizes.latency_jobs
    );
    let stamps = sys.work.join("latency");
    std::fs::create_dir_all(&stamps)?;
    let bar = indicatif::ProgressBar::new(u64::from(sizes.latency_jobs));
    let mut lat = Vec::new();
    for i in 0..sizes.latency_jobs {
        let stamp = stamps.join(i.to_string());
        match time_one(sys, "latency", &stamp)? {
            Some(ms) => lat.push(ms),
            None => bail!(
                "{}: latency job {i} did not start within {} s",
                sys.kind.name(),
                START_TIMEOUT.as_secs()
            ),
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    sys.wait_idle(DRAIN_TIMEOUT, "the latency jobs ending")?;
    lat.sort_by(f64::total_cmp);
    Ok(LatencyFigures {
        p50_ms: percentile(&lat, 50.0),
        p99_ms: percentile(&lat, 99.0),
        max_ms: lat.last().copied().unwrap_or(0.0),
        jobs: sizes.latency_jobs,
    })
}

/// The replay's window of the Philly trace, compressed (see [`replay()`]).
pub fn replay_plan(
    trace_path: &Path,
    sizes: &Sizes,
    gpus_per_node: u32,
    cluster_gpus: u64,
) -> Result<ReplayPlan> {
    let opts = ImportOptions {
        gpus_per_node,
        time_limit_factor: 1.5,
    };
    let jobs =
        trace::import_file(trace_path, Some(TraceFormat::Philly), &opts).with_context(|| {
            format!(
                "reading the Philly trace {} (give its path with --trace)",
                trace_path.display()
            )
        })?;
    let entries: Vec<TraceEntry> = jobs
        .iter()
        .map(|j| TraceEntry {
            submit: j.submit.0,
            duration: j.duration.0,
            gpus: u32::try_from(j.spec.amounts().gpus_ceil()).unwrap_or(u32::MAX),
            account: j.spec.account.clone(),
        })
        .filter(|e| u64::from(e.gpus) <= cluster_gpus)
        .collect();
    if entries.len() < sizes.replay_jobs.max(1) {
        bail!(
            "{}: only {} jobs fit {cluster_gpus} GPUs, fewer than the {} of the window",
            trace_path.display(),
            entries.len(),
            sizes.replay_jobs
        );
    }
    let start = replay::select_window(&entries, sizes.replay_jobs, gpus_per_node, cluster_gpus);
    Ok(replay::plan(
        &entries,
        start,
        sizes.replay_jobs,
        gpus_per_node,
        cluster_gpus,
        sizes.replay_span_s,
    ))
}

/// `replay`: every job submitted with `sbatch` at its compressed arrival time (4
/// submitting threads, so that a slow `sbatch` does not delay the next arrival), then the
/// system's records read once every job has ended.
pub fn replay(sys: &System, plan: &ReplayPlan, cluster_gpus: u64) -> Result<ReplayFigures> {
    eprintln!(
        "{}: replay: {} jobs over {:.0} s of arrivals",
        sys.kind.name(),
        plan.jobs.len(),
        plan.jobs.last().map_or(0.0, |j| j.arrival_s)
    );
    let next = AtomicUsize::new(0);
    let ids: Mutex<Vec<Option<u64>>> = Mutex::new(vec![None; plan.jobs.len()]);
    let errors: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let bar = indicatif::ProgressBar::new(plan.jobs.len() as u64);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(job) = plan.jobs.get(i) else { break };
                    let at = t0 + Duration::from_secs_f64(job.arrival_s);
                    if let Some(wait) = at.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    match sys.submit(&job.sbatch_args(sys.cpus_per_job)) {
                        Ok(id) => {
                            if let Ok(mut v) = ids.lock() {
                                v[i] = Some(id);
                            }
                        }
                        Err(e) => {
                            if let Ok(mut v) = errors.lock() {
                                v.push(format!("job {i}: {e:#}"));
                            }
                        }
                    }
                    bar.inc(1);
                }
            });
        }
    });
    bar.finish_and_clear();
    let late = t0.elapsed().as_secs_f64() - plan.jobs.last().map_or(0.0, |j| j.arrival_s);
    let errors = errors.into_inner().unwrap_or_default();
    if let Some(first) = errors.first() {
        sys.cancel_all()?;
        bail!(
            "{}: {} replay submissions failed; the first: {first}",
            sys.kind.name(),
            errors.len()
        );
    }
    if late > 5.0 {
        eprintln!(
            "{}: note: the last submission was {late:.1} s behind its arrival time",
            sys.kind.name()
        );
    }
    let ids: Vec<Option<u64>> = ids.into_inner().unwrap_or_default();
    let wanted: BTreeSet<u64> = ids.iter().flatten().copied().collect();
    // Every job has a limit of at most 1.5x the cap; give them all that and more to end.
    let longest = plan
        .jobs
        .iter()
        .map(|j| j.time_limit_min * 60)
        .max()
        .unwrap_or(60);
    sys.wait_idle(
        DRAIN_TIMEOUT + Duration::from_secs(longest),
        "the replay's jobs ending",
    )?;
    // The records are written as jobs end; give the last ones a moment.
    let deadline = Instant::now() + Duration::from_secs(30);
    let records = loop {
        let r = sys.records(&wanted)?;
        if r.len() >= wanted.len() || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let per_job: Vec<Option<replay::RunRecord>> = ids
        .iter()
        .map(|id| id.and_then(|id| records.get(&id).cloned()))
        .collect();
    let figures = replay::figures(&plan.jobs, &per_job, cluster_gpus);
    if figures.missing > 0 {
        eprintln!(
            "{}: note: {} of the replay's jobs have no record of a run",
            sys.kind.name(),
            figures.missing
        );
    }
    Ok(figures)
}

/// Gives the reference's first node the busy feature, and its own features back when
/// dropped (the reference is left as it was found).
struct SlurmFeature<'a> {
    node: &'a str,
    available: String,
    active: String,
}

impl<'a> SlurmFeature<'a> {
    fn set(node: &'a str) -> Result<SlurmFeature<'a>> {
        let shown = Command::new(reference::SCONTROL)
            .args(["show", "node", node, "-o"])
            .output()?;
        let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
        let f = reference::fields(&shown);
        let own = |k: &str| {
            let v = f.get(k).copied().unwrap_or("");
            if v == "(null)" {
                String::new()
            } else {
                v.to_string()
            }
        };
        let guard = SlurmFeature {
            node,
            available: own("AvailableFeatures"),
            active: own("ActiveFeatures"),
        };
        let with = |own: &str| {
            if own.is_empty() {
                BUSY_FEATURE.to_string()
            } else {
                format!("{own},{BUSY_FEATURE}")
            }
        };
        let out = Command::new(reference::SCONTROL)
            .args([
                "update",
                &format!("NodeName={node}"),
                &format!("AvailableFeatures={}", with(&guard.available)),
                &format!("ActiveFeatures={}", with(&guard.active)),
            ])
            .output()?;
        if !out.status.success() {
            bail!(
                "failed to give the reference's node {node} the feature {BUSY_FEATURE}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(guard)
    }
}

impl Drop for SlurmFeature<'_> {
    fn drop(&mut self) {
        let _ = Command::new(reference::SCONTROL)
            .args([
                "update",
                &format!("NodeName={}", self.node),
                &format!("AvailableFeatures={}", self.available),
                &format!("ActiveFeatures={}", self.active),
            ])
            .output();
    }
}

/// `scale`: a long job holds the first node whole; the backlog asks for that node (by its
/// feature) with the probes' own shape and limit, so that it ranks ahead of every probe
/// (older, same size) and every pass must consider each backlog job before reaching a
/// probe. At each step the backlog grows to the step's size, then probes (single-GPU jobs
/// that fit any other node) run one after another; the step is met if their median
/// submit-to-first-instruction is under 1 s. Stops at the first step not met.
pub fn scale(
    sys: &System,
    sizes: &Sizes,
    gpus: u32,
    cadre_dir: Option<&Path>,
    first_node: &str,
) -> Result<ScaleFigures> {
    eprintln!(
        "{}: scale: backlog steps {:?}",
        sys.kind.name(),
        sizes.scale_steps
    );
    let _feature = match sys.kind {
        Kind::Slurm => Some(SlurmFeature::set(first_node)?),
        Kind::Cadre => None,
    };
    let result = scale_steps(sys, sizes, gpus, cadre_dir);
    sys.cancel_all()?;
    sys.wait_idle(DRAIN_TIMEOUT, "cancelling the scale workload's jobs")?;
    result
}

fn scale_steps(
    sys: &System,
    sizes: &Sizes,
    gpus: u32,
    cadre_dir: Option<&Path>,
) -> Result<ScaleFigures> {
    let constraint = format!("--constraint={BUSY_FEATURE}");
    let cpus = sys.cpus_per_job.to_string();
    let blocker_gres = format!("--gres=gpu:{gpus}");
    let blocker: Vec<String> = [
        "--parsable",
        "-J",
        "scale-blocker",
        "-A",
        ACCOUNT,
        "-t",
        "600",
        "-c",
        &cpus,
        &blocker_gres,
        &constraint,
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 36000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let blocker_id = sys.submit(&blocker)?;
    let deadline = Instant::now() + START_TIMEOUT;
    while sys.state(blocker_id)?.as_deref() != Some("RUNNING") {
        if Instant::now() > deadline {
            bail!(
                "{}: the scale workload's blocking job {blocker_id} did not start",
                sys.kind.name()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let backlog_args = [
        "-J",
        "scale-backlog",
        "-A",
        ACCOUNT,
        "-t",
        "1",
        "-c",
        &cpus,
        "--gres=gpu:1",
        &constraint,
        "-o",
        "/dev/null",
        "--wrap",
        "true",
    ];
    let stamps = sys.work.join("scale");
    std::fs::create_dir_all(&stamps)?;
    let mut figures = ScaleFigures::default();
    let mut backlog = 0u32;
    let mut probe_no = 0;
    for &step in &sizes.scale_steps {
        let add = step.saturating_sub(backlog);
        if add > 0 {
            eprintln!("{}: scale: backlog {backlog} -> {step}", sys.kind.name());
            match cadre_dir {
                // cadre's backlog through its API (faster to build; the same jobs).
                Some(dir) => {
                    let mut job = api_job(
                        "scale-backlog",
                        sys.cpus_per_job,
                        1,
                        Dur(60),
                        "true",
                        &sys.work,
                    );
                    job.spec.features = vec![BUSY_FEATURE.to_string()];
                    let bar = indicatif::ProgressBar::new(u64::from(add));
                    runtime()?.block_on(submit_concurrently(
                        &target_of(dir),
                        add,
                        8,
                        &job,
                        &bar,
                    ))?;
                    bar.finish_and_clear();
                }
                None => {
                    let (_, failed) =
                        super::system::submit_from_shells(sys, add, 8, &backlog_args)?;
                    if failed > 0 {
                        bail!("{}: {failed} backlog submissions failed", sys.kind.name());
                    }
                }
            }
            backlog = step;
        }
        // Let the scheduler pass over the new backlog before the probes.
        std::thread::sleep(Duration::from_secs(2));
        let mut times = Vec::new();
        let mut all_started = true;
        for _ in 0..sizes.scale_probes {
            probe_no += 1;
            let stamp = stamps.join(format!("probe-{probe_no}"));
            match time_one(sys, "scale-probe", &stamp)? {
                Some(ms) => times.push(ms),
                None => {
                    all_started = false;
                    break;
                }
            }
        }
        times.sort_by(f64::total_cmp);
        let median = all_started.then(|| percentile(&times, 50.0));
        eprintln!(
            "{}: scale: {step} pending: probe {}",
            sys.kind.name(),
            median.map_or("did not start".to_string(), |m| format!("{m:.0} ms"))
        );
        figures.steps.push(ScaleStep {
            pending: step,
            probe_ms: median,
        });
        match median {
            Some(ms) if ms < 1000.0 => {
                figures.max_pending = step;
                figures.reached_cap = Some(&step) == sizes.scale_steps.last();
            }
            _ => break,
        }
    }
    Ok(figures)
}
