//! `srun` and `salloc`.
//!
//! - `srun` inside an allocation (`$SLURM_JOB_ID`, or `--jobid`) starts a job step over the
//!   job's tasks (or the nodes and tasks it asks for, within the job's), prints the tasks'
//!   output as it comes (each line prefixed with its task's rank with `--label`), and exits
//!   with the highest exit code of the tasks. With `--output`/`--error` the tasks write to
//!   those files instead (`%t` task, `%n` node index, `%N` node, `%j` job ...), as Slurm's do.
//!   Interrupting `srun` (SIGINT, SIGTERM) cancels the step; if `srun` dies, the controller
//!   cancels it too. Once `srun` has lost the controller, it waits for the step's end (a
//!   restarted controller follows the step again), and an interrupt simply ends it.
//! - `srun` outside one first asks for an allocation with its options (as `salloc` would),
//!   waits for it, runs the step in it, and gives the allocation back with the step's exit
//!   code.
//! - `salloc` asks for an allocation, waits for it, runs a command (default: `$SHELL`) on
//!   this host with the allocation's `SLURM_*` variables, and gives the allocation back with
//!   the command's exit code when it exits. If the allocation ends first (cancelled, time
//!   limit), the command is sent SIGHUP, as Slurm does. `--no-shell` allocates and exits.
//!
//! Differences from Slurm, stated: no pseudo-terminal (`--pty`) and no `--multi-prog`
//! (refused with a message); standard input is not forwarded to the tasks (they read
//! `/dev/null`); concurrent steps share the job's resources (as with `--overlap`) rather
//! than waiting for one another.

use super::sbatch::{get, prepare_job, submission_error};
use super::{connect, connect_args, fail, local_clock};
use cadre_client::{Client, Connection};
use cadre_core::job::{JobId, JobState};
use cadre_proto::agent::OutputStream;
use cadre_proto::api::{
    CancelRequest, CompleteRequest, JobView, StepEvent, StepList, StepRequest, SubmitRequest,
    SubmitResponse,
};
use cadre_proto::exit;
use cadre_slurm::SlurmError;
use cadre_slurm::convert::ScriptSource;
use cadre_slurm::launch::{SALLOC_OPTIONS, SRUN_OPTIONS, parse_launch, resolve_launch};
use cadre_slurm::options::BatchOptions;
use hyper::Method;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

const SRUN_USAGE: &str =
    "Usage: srun [-N nnodes] [-n ntasks] [-c ncpus] [-p partition] [-t minutes]
            [-D path] [-o file] [-e file] [-J jobname] [-l] [-w hosts] [--jobid=id]
            [--ntasks-per-node=n] [--gpus-per-task=n] [--mem=MB] [-G gpus] [-A account]
            executable [args...]";

const SALLOC_USAGE: &str =
    "Usage: salloc [-N nnodes] [-n ntasks] [-c ncpus] [-p partition] [-t minutes]
              [-J jobname] [-G gpus] [--gpus-per-node=n] [--mem=MB] [-A account]
              [--no-shell] [command [args...]]";

/// How often the state of an allocation is asked while waiting for it.
const POLL: Duration = Duration::from_millis(100);

/// `srun ARGS...`.
pub fn run_srun(argv: Vec<String>) -> ExitCode {
    let prog = argv.first().cloned().unwrap_or_else(|| "srun".into());
    match srun(&argv[1.min(argv.len())..]) {
        Ok(code) => code,
        Err(e) => fail("srun", &prog, &e),
    }
}

/// `salloc ARGS...`.
pub fn run_salloc(argv: Vec<String>) -> ExitCode {
    let prog = argv.first().cloned().unwrap_or_else(|| "salloc".into());
    match salloc(&argv[1.min(argv.len())..]) {
        Ok(code) => code,
        Err(e) => fail("salloc", &prog, &e),
    }
}

fn informational(cmd: &str, usage: &str, opts: &BatchOptions) -> Option<ExitCode> {
    if opts.version {
        println!(
            "cadre {} (Slurm-compatible {cmd})",
            env!("CARGO_PKG_VERSION")
        );
    } else if opts.help || opts.usage {
        println!("{usage}");
        println!("\ncadre's {cmd} takes Slurm's {cmd} options; see `man {cmd}`.");
        println!(
            "Exit codes: the {}'s own; {} an error (or $SLURM_EXIT_ERROR for a refused allocation); {} an option error.",
            if cmd == "srun" { "step" } else { "command" },
            exit::ERROR,
            exit::SLURM_USAGE
        );
    } else {
        return None;
    }
    Some(ExitCode::SUCCESS)
}

fn program_name(cmd: &[String]) -> Option<String> {
    let first = cmd.first()?;
    Some(
        std::path::Path::new(first)
            .file_name()
            .map_or_else(|| first.clone(), |f| f.to_string_lossy().into_owned()),
    )
}

fn srun(args: &[String]) -> Result<ExitCode, SlurmError> {
    let cli = parse_launch(&SRUN_OPTIONS, args)?;
    let clock = local_clock();
    let opts = resolve_launch(&cli, &clock)?;
    if let Some(code) = informational("srun", SRUN_USAGE, &opts) {
        return Ok(code);
    }
    for (flag, what) in [
        ("pty", "--pty (a pseudo-terminal for the first task)"),
        ("multi-prog", "--multi-prog (a program per task)"),
    ] {
        if opts.recorded.contains_key(flag) {
            return Err(SlurmError::unsupported(what));
        }
    }
    let command = cli.operands.clone();
    if command.is_empty() {
        return Err(SlurmError::Fatal("No command given to execute.".into()));
    }
    let inside = match &opts.jobid {
        Some(j) => Some(parse_job_id(j)?),
        None => match super::query::env_var("SLURM_JOB_ID")
            .or_else(|| super::query::env_var("SLURM_JOBID"))
        {
            Some(j) => Some(parse_job_id(&j)?),
            None => None,
        },
    };
    let client = RefCell::new(connect()?);
    match inside {
        Some(id) => run_step(id, &opts, &command, true).map(ExitCode::from),
        None => {
            let mut opts = opts;
            if opts.job_name.is_none() {
                opts.job_name = program_name(&command);
            }
            let id = allocate(&client, &opts, "srun", false)?;
            let code = run_step(id, &opts, &command, false);
            relinquish(&client, id, code.as_ref().map_or(1, |c| i32::from(*c)));
            code.map(ExitCode::from)
        }
    }
}

fn parse_job_id(text: &str) -> Result<JobId, SlurmError> {
    text.trim()
        .parse::<u64>()
        .map(JobId)
        .map_err(|_| SlurmError::Fatal(format!("Invalid job id: {text}")))
}

/// Asks for an allocation and waits until it is granted; its id.
fn allocate(
    client: &RefCell<Client>,
    opts: &BatchOptions,
    cmd: &str,
    always_say: bool,
) -> Result<JobId, SlurmError> {
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let job = prepare_job(
        client,
        opts,
        "#!/bin/sh\n",
        &ScriptSource::Wrap,
        &[],
        env,
        local_clock(),
    )?;
    for w in &job.warnings {
        eprintln!("{cmd}: Warning: {w}");
    }
    let mut jobs = job.submissions;
    for j in &mut jobs {
        let work_dir = j.run.work_dir.clone();
        let env = std::mem::take(&mut j.run.env);
        j.run = cadre_core::run::RunSpec {
            env,
            export: j.run.export.clone(),
            submit_dir: j.run.submit_dir.clone(),
            submit_host: j.run.submit_host.clone(),
            ..cadre_core::run::RunSpec::allocation(work_dir)
        };
    }
    let resp: SubmitResponse = client
        .borrow_mut()
        .send(
            Method::POST,
            "/jobs",
            Some(&SubmitRequest {
                jobs,
                dry_run: false,
            }),
        )
        .map_err(|e| submission_error(&e.into()))?;
    let Some(&id) = resp.job_ids.first() else {
        return Err(SlurmError::submission("the controller returned no job id"));
    };
    let mut said_pending = false;
    loop {
        let v: JobView = get(client, &format!("/jobs/{id}"))?;
        match v.state {
            JobState::Running => break,
            JobState::Pending if !said_pending => {
                if always_say {
                    eprintln!("{cmd}: Pending job allocation {id}");
                }
                eprintln!("{cmd}: job {id} queued and waiting for resources");
                said_pending = true;
            }
            s if s.is_final() => {
                return Err(SlurmError::Fatal(format!(
                    "Job allocation {id} has been revoked ({s})."
                )));
            }
            _ => {}
        }
        std::thread::sleep(POLL);
    }
    if said_pending && !always_say {
        eprintln!("{cmd}: job {id} has been allocated resources");
    }
    if always_say {
        eprintln!("{cmd}: Granted job allocation {id}");
    }
    Ok(id)
}

/// Gives an allocation back, ending its job with `code`.
fn relinquish(client: &RefCell<Client>, id: JobId, code: i32) {
    let done: Result<serde_json::Value, _> = client.borrow_mut().send(
        Method::POST,
        &format!("/jobs/{id}/complete"),
        Some(&CompleteRequest { exit_code: code }),
    );
    if let Err(e) = done {
        // Already over (cancelled, timed out): nothing to give back.
        tracing::debug!(job = %id, error = %e, "allocation not completed");
    }
}

/// The step request of `srun`'s options.
/// Inside an allocation, the counts `srun` was given shape the step; in an allocation made
/// for it, they shaped the job and the step takes the job's tasks.
fn step_request(
    opts: &BatchOptions,
    command: &[String],
    inside: bool,
) -> Result<StepRequest, SlurmError> {
    let cwd = match &opts.chdir {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::current_dir()
            .map_err(|e| SlurmError::Refused(format!("cannot read the working directory: {e}")))?,
    };
    let cwd = if cwd.is_absolute() {
        cwd
    } else {
        std::env::current_dir().unwrap_or_default().join(cwd)
    };
    let gpus_per_task = opts.gpus_per_task.as_ref().map(|g| g.count as u32);
    // The shape counts only inside an allocation (outside, it shaped the job).
    let shape = |v: Option<u32>| v.filter(|_| inside);
    Ok(StepRequest {
        command: command.to_vec(),
        work_dir: cwd.display().to_string(),
        env: std::env::vars().collect(),
        name: opts.job_name.clone(),
        nodes: shape(opts.nodes.map(|n| n.min)),
        nodelist: opts.recorded.get("nodelist").filter(|_| inside).cloned(),
        ntasks: shape(opts.ntasks),
        ntasks_per_node: shape(opts.ntasks_per_node),
        cpus_per_task: shape(opts.cpus_per_task),
        gpus_per_task,
        stdout: opts.output.clone(),
        stderr: opts.error.clone(),
        time_limit: opts.time.and_then(|t| t.secs()),
        in_task: None,
        leftovers_outlive: false,
        hostname: None,
    })
}

/// Each task's output, passed on in whole lines, as Slurm's step daemons buffer it, so that
/// the lines of tasks writing at once do not mix; with `--label`, each line prefixed with
/// its task's rank.
#[derive(Default)]
struct TaskLines {
    /// The rank's width, when labelling.
    width: Option<usize>,
    /// What each task's stream (rank, stderr) wrote after its last newline.
    pending: BTreeMap<(u32, bool), String>,
}

impl TaskLines {
    fn labelled(&self, task: u32, lines: &str) -> String {
        match self.width {
            None => lines.to_string(),
            Some(w) => lines
                .split_inclusive('\n')
                .map(|l| format!("{task:>w$}: {l}"))
                .collect(),
        }
    }

    /// The whole lines that `data` completes for the task's stream.
    fn lines(&mut self, task: u32, err: bool, data: &str) -> String {
        let pending = self.pending.entry((task, err)).or_default();
        pending.push_str(data);
        let Some(end) = pending.rfind('\n') else {
            return String::new();
        };
        let rest = pending.split_off(end + 1);
        let whole = std::mem::replace(pending, rest);
        self.labelled(task, &whole)
    }

    /// What is left, unfinished lines at the end, per stream: (stderr, text).
    fn rest(&mut self) -> Vec<(bool, String)> {
        std::mem::take(&mut self.pending)
            .into_iter()
            .filter(|(_, text)| !text.is_empty())
            .map(|((task, err), text)| (err, self.labelled(task, &text)))
            .collect()
    }
}

/// Writes `text` to stdout or stderr, at once.
fn emit(err: bool, text: &str) {
    if text.is_empty() {
        return;
    }
    if err {
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(text.as_bytes());
        let _ = e.flush();
    } else {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(text.as_bytes());
        let _ = o.flush();
    }
}

/// Runs a step in job `id` and returns its exit code.
fn run_step(
    id: JobId,
    opts: &BatchOptions,
    command: &[String],
    inside: bool,
) -> Result<u8, SlurmError> {
    let req = step_request(opts, command, inside)?;
    run_step_request(id, req, opts.label, "srun")
}

/// Creates step `req` in job `id`, passes its tasks' output on (each line prefixed with
/// its task's rank when `label`), cancels it on SIGINT or SIGTERM, and returns its exit
/// code: 0 when it completed, else its highest exit code, else 1. `who` names the command
/// in what it says on stderr.
pub fn run_step_request(
    id: JobId,
    req: StepRequest,
    label: bool,
    who: &'static str,
) -> Result<u8, SlurmError> {
    let target = connect_args()
        .target()
        .map_err(|e| SlurmError::submission(cadre_cli::error_chain(&e)))?;
    let token = connect_args().token;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SlurmError::Fatal(format!("cannot start: {e}")))?;
    let result = rt.block_on(async move {
        let mut conn = Connection::open(&target, token.clone()).await?;
        let mut step_no: Option<u32> = None;
        let lines = std::cell::RefCell::new(TaskLines::default());
        let mut end: Option<(JobState, Option<i32>, Option<String>)> = None;
        let (cancel_tx, mut cancel_rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
        let path = format!("/jobs/{id}/steps");
        let streaming = conn.stream_lines(&path, &req, |line| -> anyhow::Result<()> {
            let event: StepEvent = serde_json::from_slice(line)?;
            match event {
                StepEvent::Created { step } => {
                    step_no = Some(step.step);
                    let _ = cancel_tx.send(step.step);
                    let digits = (step.ntasks.max(1) - 1).to_string().len();
                    lines.borrow_mut().width = label.then_some(digits);
                }
                StepEvent::Output { task, stream, data } => {
                    let err = stream == OutputStream::Stderr;
                    emit(err, &lines.borrow_mut().lines(task, err, &data));
                }
                StepEvent::Ended {
                    state,
                    exit_code,
                    reason,
                } => end = Some((state, exit_code, reason)),
            }
            Ok(())
        });
        let interrupts = async {
            let Some(step) = cancel_rx.recv().await else {
                return std::future::pending::<()>().await;
            };
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .ok();
            loop {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {},
                    _ = async { match &mut term { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {},
                }
                eprintln!("{who}: interrupted: cancelling step {id}.{step}");
                if let Ok(mut c) = Connection::open(&target, token.clone()).await {
                    let _: Result<serde_json::Value, _> = c
                        .call(
                            Method::POST,
                            &format!("/jobs/{id}/steps/{step}/cancel"),
                            Some(&CancelRequest { signal: None }),
                        )
                        .await;
                }
            }
        };
        let cut = tokio::select! {
            r = streaming => r.err().map(anyhow::Error::from),
            _ = interrupts => None,
        };
        for (err, text) in lines.borrow_mut().rest() {
            emit(err, &text);
        }
        if let Some(e) = cut {
            // Refused outright: the controller's answer. Cut short: the step goes on.
            if step_no.is_none() {
                return Err(e);
            }
            tracing::debug!(error = %e, "the step's stream was cut");
        }
        anyhow::Ok((step_no, end))
    });
    let (step_no, end) = result.map_err(|e| match super::api_failure(&e) {
        Some(f) => SlurmError::Fatal(f.message.clone()),
        None => SlurmError::Fatal(cadre_cli::error_chain(&e)),
    })?;
    let step = step_no.map_or_else(|| "?".into(), |s| s.to_string());
    let (state, exit_code, reason) = match (end, step_no) {
        (Some(end), _) => end,
        (None, Some(n)) => {
            // Without the controller the step cannot be cancelled: an interrupt ends this
            // program as it ends any other (the runtime's handlers outlive the runtime),
            // from the moment it says so.
            // SAFETY: restoring a signal's default disposition touches no memory of this
            // program.
            for signal in [nix::sys::signal::SIGINT, nix::sys::signal::SIGTERM] {
                unsafe {
                    let _ = nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl);
                }
            }
            eprintln!(
                "{who}: lost contact with the controller; waiting for step {id}.{n} to end (its output until then is not shown)"
            );
            await_step_end(id, n)
        }
        (None, None) => {
            return Err(SlurmError::Fatal(format!(
                "lost contact with the controller before step {id}.{step} started"
            )));
        }
    };
    if state != JobState::Completed {
        let why = reason.map(|r| format!(": {r}")).unwrap_or_default();
        eprintln!(
            "{who}: error: step {id}.{step} {}{why}{}",
            state,
            exit_code
                .map(|c| format!(" (exit code {c})"))
                .unwrap_or_default()
        );
    }
    Ok(match (state, exit_code) {
        (JobState::Completed, _) => exit::SUCCESS,
        (_, Some(c)) if c > 0 => exit::of_status(c),
        _ => exit::ERROR,
    })
}

/// Asks the controller, again and again (it may be restarting), how a step ended. The
/// step goes on meanwhile: a restarted controller follows it again.
fn await_step_end(id: JobId, step: u32) -> (JobState, Option<i32>, Option<String>) {
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let Ok(mut client) = connect_args().client() else {
            continue;
        };
        let Ok(list) = client.get::<StepList>(&format!("/jobs/{id}/steps")) else {
            continue;
        };
        match list.steps.iter().find(|s| s.step == step) {
            Some(s) if s.end_time.is_some() => return (s.state, s.exit_code, None),
            Some(_) => {}
            None => {
                return (
                    JobState::Failed,
                    None,
                    Some("the controller no longer knows the step".into()),
                );
            }
        }
    }
}

/// The variables `salloc` gives its command, from the granted job.
fn allocation_env(v: &JobView) -> Vec<(String, String)> {
    let nodes = cadre_core::hostlist::expand(&v.nodes).unwrap_or_default();
    let mut env = vec![
        ("SLURM_JOB_ID", v.id.to_string()),
        ("SLURM_JOBID", v.id.to_string()),
        ("SLURM_JOB_NAME", v.name.clone()),
        ("SLURM_JOB_NODELIST", v.nodes.clone()),
        ("SLURM_NODELIST", v.nodes.clone()),
        ("SLURM_JOB_NUM_NODES", nodes.len().to_string()),
        ("SLURM_NNODES", nodes.len().to_string()),
        ("SLURM_NTASKS", v.tasks.to_string()),
        ("SLURM_NPROCS", v.tasks.to_string()),
        ("SLURM_JOB_PARTITION", v.partition.clone()),
        ("SLURM_JOB_ACCOUNT", v.account.clone()),
    ];
    if let Some(a) = &v.allocation {
        let ids = a.nodes();
        let per_node = |f: &dyn Fn(&cadre_core::alloc::TaskAlloc) -> u64| {
            ids.iter()
                .map(|&n| a.tasks.iter().filter(|t| t.node == n).map(f).sum())
                .collect::<Vec<u64>>()
        };
        env.push((
            "SLURM_TASKS_PER_NODE",
            cadre_core::hostlist::compress_counts(&per_node(&|_| 1)),
        ));
        env.push((
            "SLURM_JOB_CPUS_PER_NODE",
            cadre_core::hostlist::compress_counts(&per_node(&|t| t.cores.len() as u64)),
        ));
    }
    if let Ok(cwd) = std::env::current_dir() {
        env.push(("SLURM_SUBMIT_DIR", cwd.display().to_string()));
    }
    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn salloc(args: &[String]) -> Result<ExitCode, SlurmError> {
    let cli = parse_launch(&SALLOC_OPTIONS, args)?;
    let clock = local_clock();
    let mut opts = resolve_launch(&cli, &clock)?;
    if let Some(code) = informational("salloc", SALLOC_USAGE, &opts) {
        return Ok(code);
    }
    let command: Vec<String> = if cli.operands.is_empty() {
        vec![std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into())]
    } else {
        cli.operands.clone()
    };
    if opts.job_name.is_none() {
        opts.job_name = Some(if cli.operands.is_empty() {
            "interactive".into()
        } else {
            program_name(&command).unwrap_or_else(|| "interactive".into())
        });
    }
    let client = RefCell::new(connect()?);
    let id = allocate(&client, &opts, "salloc", true)?;
    if opts.no_shell {
        return Ok(ExitCode::SUCCESS);
    }
    let view: JobView = get(&client, &format!("/jobs/{id}"))?;
    let mut child = match std::process::Command::new(&command[0])
        .args(&command[1..])
        .envs(allocation_env(&view))
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("salloc: error: cannot run {}: {e}", command[0]);
            relinquish(&client, id, 1);
            eprintln!("salloc: Relinquishing job allocation {id}");
            return Ok(ExitCode::from(exit::ERROR));
        }
    };
    // The shell takes the terminal's interrupts; salloc outlives them (as Slurm's does).
    // SAFETY: setting a signal's disposition to ignore touches no memory of this program.
    unsafe {
        let _ = nix::sys::signal::signal(
            nix::sys::signal::SIGINT,
            nix::sys::signal::SigHandler::SigIgn,
        );
    }
    let mut revoked = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => {
                return Err(SlurmError::Fatal(format!(
                    "waiting for {}: {e}",
                    command[0]
                )));
            }
        }
        if !revoked {
            let v: Result<JobView, _> = get(&client, &format!("/jobs/{id}"));
            if let Ok(v) = v
                && v.state.is_final()
            {
                eprintln!("salloc: Job allocation {id} has been revoked.");
                revoked = true;
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::SIGHUP,
                );
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let code = status.code().unwrap_or_else(|| {
        128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)
    });
    if !revoked {
        eprintln!("salloc: Relinquishing job allocation {id}");
        relinquish(&client, id, code);
    }
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(exit::ERROR)))
}

#[cfg(test)]
mod tests {
    use super::TaskLines;

    #[test]
    fn tasks_output_is_passed_on_in_whole_lines_labelled_when_asked() {
        let mut l = TaskLines::default();
        assert_eq!(l.lines(1, false, "rank 1 sum"), "");
        assert_eq!(
            l.lines(0, false, "rank 0 sum 1\nrank 0 b"),
            "rank 0 sum 1\n"
        );
        assert_eq!(l.lines(1, false, " 1\n"), "rank 1 sum 1\n");
        assert_eq!(l.lines(1, true, "oops"), "");
        assert_eq!(
            l.rest(),
            vec![(false, "rank 0 b".to_string()), (true, "oops".to_string())]
        );
        assert!(l.rest().is_empty());
        let mut l = TaskLines {
            width: Some(2),
            ..TaskLines::default()
        };
        assert_eq!(l.lines(3, false, "a\nb\nc"), " 3: a\n 3: b\n");
        assert_eq!(l.rest(), vec![(false, " 3: c".to_string())]);
    }
}
