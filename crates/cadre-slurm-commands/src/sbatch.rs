//! `sbatch`: reads the script (a file, standard input, or `--wrap`), resolves the options
//! (`cadre_slurm::sbatch`), checks with the controller what Slurm's controller checks
//! (the partition, the features), builds the job (`cadre_slurm::convert`) and submits it
//! through the API. Prints `Submitted batch job N` (`N` with `--parsable`, nothing with
//! `--quiet`); `--wait` waits for the job (every task of an array) and exits with its
//! highest exit code; `--test-only` has the controller check the job without
//! committing it.
//!
//! `--test-only` differs from Slurm's: cadre does not estimate a start time, so it says
//! that the job would be accepted and with how many processors.

use super::{api_failure, connect, current_user, fail, local_clock};
use cadre_client::Client;
use cadre_core::job::{JobId, JobState};
use cadre_proto::api::{
    JobList, JobView, NodeList, PartitionList, SubmitRequest, SubmitResponse, WhoAmI,
};
use cadre_proto::exit;
use cadre_slurm::SlurmError;
use cadre_slurm::array::DEFAULT_MAX_ARRAY_SIZE;
use cadre_slurm::convert::{
    JobResolver, ScriptSource, SubmitContext, build_job, parse_constraint, wrap_script,
};
use cadre_slurm::dependency::DepTarget;
use cadre_slurm::error::ScriptProblem;
use cadre_slurm::options::{BatchOptions, Opt};
use cadre_slurm::refusal::{Request, SlurmErrno, refusal};
use cadre_slurm::sbatch::{parse_command_line, resolve_options};
use cadre_slurm::script::check_script;
use hyper::Method;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "Usage: sbatch [-N nnodes] [-n ntasks] [-c ncpus] [-p partition] [--hold] [--parsable] [-t minutes]
              [-D path] [--input file] [--output file] [--error file] [-J jobname]
              [--mem=MB] [--mem-per-cpu=MB] [--mem-per-gpu=MB] [--gres=list] [-G gpus]
              [--gpus-per-node=n] [--gpus-per-task=n] [--cpus-per-gpu=n] [-C list]
              [--account=name] [--qos=qos] [--dependency=type:jobid[+time]] [--array=indexes]
              [--exclusive] [--switches=n[@max-wait]] [--signal=[B:]sig[@secs]] [--export=names]
              [--requeue] [--no-requeue] [--begin=time] [--nice[=value]] [--comment=text]
              [--mail-type=type] [--mail-user=user] [--wait] [--test-only] [--wrap=command]
              executable [args...]";

/// `sbatch ARGS...`; `argv[0]` names the program in getopt's messages.
pub fn run(argv: Vec<String>) -> ExitCode {
    let prog = argv.first().cloned().unwrap_or_else(|| "sbatch".into());
    match sbatch(&argv[1.min(argv.len())..]) {
        Ok(code) => code,
        Err(e) => fail("sbatch", &prog, &e),
    }
}

fn sbatch(args: &[String]) -> Result<ExitCode, SlurmError> {
    let cli = parse_command_line(args)?;
    match cli.informational() {
        Some(Opt::Version) => {
            println!(
                "cadre {} (Slurm-compatible sbatch)",
                env!("CARGO_PKG_VERSION")
            );
            return Ok(ExitCode::SUCCESS);
        }
        Some(_) => {
            println!("{USAGE}");
            println!("\ncadre's sbatch takes Slurm's sbatch options; see `man sbatch`.");
            println!(
                "Exit codes: {} submitted; {} refused (or $SLURM_EXIT_ERROR) or another error; {} an option error; with --wait, the job's own.",
                exit::SUCCESS,
                exit::ERROR,
                exit::SLURM_USAGE
            );
            return Ok(ExitCode::SUCCESS);
        }
        None => {}
    }
    let clock = local_clock();
    let (text, source, script_args) = if let Some(cmd) = cli.wrap() {
        if !cli.operands.is_empty() {
            return Err(SlurmError::Script(ScriptProblem::ArgsWithWrap));
        }
        (wrap_script(cmd), ScriptSource::Wrap, Vec::new())
    } else if let Some(path) = cli.operands.first() {
        let bytes = std::fs::read(path)
            .map_err(|_| SlurmError::Script(ScriptProblem::Unreadable(path.clone())))?;
        (
            String::from_utf8_lossy(&bytes).into_owned(),
            ScriptSource::File(path.clone()),
            cli.operands[1..].to_vec(),
        )
    } else {
        let mut bytes = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut bytes);
        (
            String::from_utf8_lossy(&bytes).into_owned(),
            ScriptSource::Stdin,
            Vec::new(),
        )
    };
    let is_wrap = source == ScriptSource::Wrap;
    if !is_wrap {
        check_script(&text)?;
    }
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let opts = resolve_options(
        &cli,
        |k| env.get(k).map(String::as_str),
        (!is_wrap).then_some(text.as_str()),
        &clock,
    )?;

    let client = RefCell::new(connect()?);
    let job = prepare_job(&client, &opts, &text, &source, &script_args, env, clock)?;
    for w in &job.warnings {
        eprintln!("sbatch: Warning: {w}");
    }
    let first = job.submissions[0].spec.clone();
    let req = SubmitRequest {
        jobs: job.submissions,
        dry_run: opts.test_only,
    };
    let resp: SubmitResponse = client
        .borrow_mut()
        .send(Method::POST, "/jobs", Some(&req))
        .map_err(|e| submission_error(&e.into()))?;
    if opts.test_only {
        let cpus = first.tasks() * first.groups[0].per_task.cpus;
        eprintln!(
            "sbatch: Job would be accepted: {cpus} processors in partition {} (cadre does not estimate start times)",
            first.partition.as_deref().unwrap_or("(default)")
        );
        return Ok(ExitCode::SUCCESS);
    }
    let Some(&id) = resp.job_ids.first() else {
        return Err(SlurmError::submission("the controller returned no job id"));
    };
    if opts.parsable {
        println!("{id}");
    } else if !opts.quiet {
        println!("Submitted batch job {id}");
    }
    if opts.wait {
        return wait_for(&client, &resp.job_ids);
    }
    Ok(ExitCode::SUCCESS)
}

/// The job `opts` ask for, checked with the controller as Slurm's controller checks it
/// (the partition, the features, dependencies): shared by `sbatch`, `srun` and `salloc`.
pub(super) fn prepare_job(
    client: &RefCell<Client>,
    opts: &BatchOptions,
    text: &str,
    source: &ScriptSource,
    script_args: &[String],
    env: BTreeMap<String, String>,
    clock: cadre_slurm::time::Clock,
) -> Result<cadre_slurm::convert::BatchJob, SlurmError> {
    let user = if super::connect_args().token.is_some() {
        get::<WhoAmI>(client, "/whoami")?.user
    } else {
        current_user()
    };
    check_partition(client, opts)?;
    check_features(client, opts)?;
    let cwd = std::env::current_dir()
        .map_err(|e| SlurmError::Refused(format!("cannot read the working directory: {e}")))?;
    let ctx = SubmitContext {
        default_account: env
            .get("CADRE_ACCOUNT")
            .cloned()
            .unwrap_or_else(|| user.clone()),
        user,
        cwd,
        env: env.into_iter().collect(),
        submit_host: nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok()),
        clock,
        max_array_size: DEFAULT_MAX_ARRAY_SIZE,
    };
    let resolver = ApiResolver { client };
    build_job(opts, text, source, script_args, &ctx, &resolver)
}

pub(super) fn get<T: serde::de::DeserializeOwned>(
    client: &RefCell<Client>,
    path: &str,
) -> Result<T, SlurmError> {
    client
        .borrow_mut()
        .get(path)
        .map_err(|e| submission_error(&e.into()))
}

/// A failed request in Slurm's words where Slurm has words for its reason
/// ([`cadre_slurm::refusal`]), else in the controller's.
pub fn submission_error(e: &anyhow::Error) -> SlurmError {
    let Some(f) = api_failure(e) else {
        return SlurmError::submission(cadre_cli::error_chain(e));
    };
    match refusal(f.reason, Request::Submit, None).errno {
        Some(SlurmErrno::InvalidPartitionName) => invalid_partition(f.subject.as_deref()),
        Some(SlurmErrno::AccessDenied) => {
            SlurmError::submission(format!("{} ({})", SlurmErrno::AccessDenied, f.message))
        }
        Some(errno) => SlurmError::submission(errno.text()),
        None => SlurmError::submission(f.message.clone()),
    }
}

/// Slurm's refusal of a partition `name` that does not exist.
fn invalid_partition(name: Option<&str>) -> SlurmError {
    SlurmError::Submission {
        preface: Some(format!(
            "invalid partition specified: {}",
            name.unwrap_or_default()
        )),
        reason: SlurmErrno::InvalidPartitionName.text().into(),
    }
}

/// Slurm refuses a partition that does not exist before anything else.
fn check_partition(client: &RefCell<Client>, opts: &BatchOptions) -> Result<(), SlurmError> {
    let Some(wanted) = &opts.partition else {
        return Ok(());
    };
    let list: PartitionList = get(client, "/partitions")?;
    for p in wanted.split(',') {
        if !list.partitions.iter().any(|q| q.name == p) {
            return Err(invalid_partition(Some(p)));
        }
    }
    Ok(())
}

/// Slurm refuses a feature that no node has.
fn check_features(client: &RefCell<Client>, opts: &BatchOptions) -> Result<(), SlurmError> {
    let Some(c) = &opts.constraint else {
        return Ok(());
    };
    let wanted = parse_constraint(c)?;
    let nodes: NodeList = get(client, "/nodes")?;
    if wanted
        .iter()
        .all(|f| nodes.nodes.iter().any(|n| n.features.contains(f)))
    {
        Ok(())
    } else {
        Err(SlurmError::submission(SlurmErrno::InvalidFeature.text()))
    }
}

/// Dependencies name Slurm job ids: a job, every task of an array (by the array's id), or
/// one task (`12_3`).
struct ApiResolver<'a> {
    client: &'a RefCell<Client>,
}

fn problem() -> SlurmError {
    SlurmError::submission(SlurmErrno::DependencyProblem.text())
}

impl ApiResolver<'_> {
    /// The tasks of array `id` (`id` is its first task's), by index.
    fn array_tasks(&self, id: u64) -> Result<Vec<(u32, JobId)>, SlurmError> {
        let list: JobList = get(
            self.client,
            &format!(
                "/jobs?after={}&limit={DEFAULT_MAX_ARRAY_SIZE}",
                id.saturating_sub(1)
            ),
        )?;
        Ok(list
            .jobs
            .iter()
            .filter_map(|j| {
                j.array
                    .filter(|a| a.array_job.0 == id)
                    .map(|a| (a.index, j.id))
            })
            .collect())
    }
}

impl JobResolver for ApiResolver<'_> {
    fn resolve(&self, target: &DepTarget) -> Result<Vec<JobId>, SlurmError> {
        let view: JobView = self
            .client
            .borrow_mut()
            .get(&format!("/jobs/{}", target.job))
            .map_err(|_| problem())?;
        let is_array = view.array.is_some_and(|a| a.array_job.0 == target.job);
        match (target.task, is_array) {
            (None, false) => Ok(vec![view.id]),
            (None, true) => Ok(self
                .array_tasks(target.job)?
                .into_iter()
                .map(|(_, id)| id)
                .collect()),
            (Some(t), true) => self
                .array_tasks(target.job)?
                .into_iter()
                .find(|(i, _)| *i == t)
                .map(|(_, id)| vec![id])
                .ok_or_else(problem),
            (Some(_), false) => Err(problem()),
        }
    }
}

/// `--wait`: until every job has ended; the highest exit code, 1 for a job that did not
/// exit on its own (signalled, cancelled, timed out, its node lost).
fn wait_for(client: &RefCell<Client>, ids: &[JobId]) -> Result<ExitCode, SlurmError> {
    let mut worst = exit::SUCCESS;
    for id in ids {
        let view = loop {
            let v: JobView = get(client, &format!("/jobs/{id}"))?;
            if v.state.is_final() {
                break v;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let code = match (view.state, view.exit_code) {
            (JobState::Completed, _) => exit::SUCCESS,
            (JobState::Failed, Some(c)) if c > 0 => exit::of_status(c),
            _ => exit::ERROR,
        };
        worst = worst.max(code);
    }
    Ok(ExitCode::from(worst))
}
