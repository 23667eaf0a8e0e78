//! `cadre-rsh HOST COMMAND...`: the program MPI runs in place of `ssh` inside a cadre
//! job, to start its daemons (OpenMPI's `orted`, Hydra's proxies) on the job's other nodes.
//!
//! **Why.** The MPI Operator's launcher reaches its workers over ssh: each worker pod runs
//! an `sshd` on its own network. A cadre task uses its node's network, where port 22 is
//! the node's own sshd (and `cadre up` runs several nodes on one machine), so a worker's
//! sshd cannot serve. Instead, as Slurm does for `mpirun` inside an allocation, the
//! launcher's MPI runs this program, which starts the command as a step of the job on the
//! node where the named task runs; the worker's task only holds its node's share.
//!
//! **Given**: ssh's command line (options, `[USER@]HOST`, the command's words), the job
//! (`$SLURM_JOB_ID`) and the controller (`$CADRE_SERVER`, as for every cadre command).
//! **Decided**: the node of `HOST`, the first match among, for each task of the job, the
//! names that resolve to it inside the job (a Kubernetes workload's: `<pod>.<job>...`) and
//! its node's name; the step: one task on that node, running `/bin/sh -c` with the
//! command's words joined by spaces (as ssh hands them to the remote shell), starting in
//! `$HOME` (`/` when it is not a directory, as sshd), with this program's environment (the step's `SLURM_*` over it), its output
//! passed back on this program's stdout and stderr. For a workload run in its images, the
//! step runs inside the named task's container instead (`podman exec`), with that
//! container's user, environment and working directory. Exit status: the step's exit code, 255
//! when the command could not be started (as ssh's).
//!
//! Not forwarded: stdin (MPI's daemons do not read it). ssh's options are accepted and
//! ignored (`-o ConnectionAttempts=10`, `-x`, `-p`...), except `-l` or `USER@` naming a
//! user other than this one, which is refused: the step runs as the job's user.

use anyhow::{Context, Result, bail};
use cadre_core::job::JobId;
use cadre_proto::api::{JobView, NodeList, StepRequest};
use cadre_proto::exit;
use cadre_slurm_commands::srun::run_step_request;
use std::path::Path;
use std::process::ExitCode;

/// ssh's options that take an argument.
const WITH_ARGUMENT: &str = "BbcDEeFIiJLlmOopQRSWw";

/// `cadre-rsh ARGS...` (`argv` without the program's name).
pub fn run(argv: &[String]) -> ExitCode {
    match rsh(argv) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("cadre-rsh: {}", cadre_cli::error_chain(&e));
            ExitCode::from(exit::RSH_CANNOT_RUN)
        }
    }
}

/// ssh's command line, read.
#[derive(Debug, PartialEq, Eq)]
struct Remote {
    /// `-l USER` or `USER@`.
    user: Option<String>,
    host: String,
    /// The command's words, joined by spaces.
    command: String,
}

fn parse(argv: &[String]) -> Result<Remote> {
    let mut user = None;
    let mut args = argv.iter();
    let host = loop {
        let Some(arg) = args.next() else {
            bail!("no host given (usage: cadre-rsh [ssh options] HOST COMMAND...)");
        };
        if arg == "--" {
            match args.next() {
                Some(h) => break h.clone(),
                None => bail!("no host given after `--`"),
            }
        }
        let Some(flags) = arg.strip_prefix('-').filter(|f| !f.is_empty()) else {
            break arg.clone();
        };
        for (i, flag) in flags.char_indices() {
            if WITH_ARGUMENT.contains(flag) {
                let attached = &flags[i + flag.len_utf8()..];
                let value = if attached.is_empty() {
                    args.next()
                        .cloned()
                        .with_context(|| format!("option -{flag} needs an argument"))?
                } else {
                    attached.to_string()
                };
                if flag == 'l' {
                    user = Some(value);
                }
                break;
            }
        }
    };
    let (user, host) = match host.split_once('@') {
        Some((u, h)) => (Some(u.to_string()), h.to_string()),
        None => (user, host),
    };
    let command = args.map(String::as_str).collect::<Vec<_>>().join(" ");
    if command.trim().is_empty() {
        bail!("no command for {host}: cadre-rsh runs commands, not interactive sessions");
    }
    Ok(Remote {
        user,
        host,
        command,
    })
}

/// A host name as written, compared without case and without a trailing dot.
fn same_host(a: &str, b: &str) -> bool {
    a.trim_end_matches('.')
        .eq_ignore_ascii_case(b.trim_end_matches('.'))
}

/// Where a command for a host of the job runs.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    /// The node's name.
    node: String,
    /// Inside the container of the job's task of this rank (a workload run in its
    /// images, whose task the host names).
    in_task: Option<u32>,
    /// With the host name of the pod the host names (a workload run on the host).
    hostname: Option<String>,
}

/// Where `host` runs in `job`: the node of the task it names (a Kubernetes workload's
/// names), inside that task's container when the workload runs in its images; else the
/// node of that name, of the job's.
fn target_of(host: &str, job: &JobView, nodes: &NodeList) -> Result<Target> {
    let Some(allocation) = &job.allocation else {
        bail!("job {} has no allocation (it is {})", job.id, job.state);
    };
    let node_name = |id: cadre_core::cluster::NodeId| {
        nodes
            .nodes
            .get(id.0 as usize)
            .map(|n| n.name.clone())
            .with_context(|| format!("the controller lists no node of id {}", id.0))
    };
    let workload = match &job.run {
        Some(run) => cadre_k8s::workload_of(run)?,
        None => None,
    };
    if let Some(t) = &workload {
        for (procid, &i) in allocation.rank_order().iter().enumerate() {
            let task = &allocation.tasks[i];
            let g = usize::from(task.group);
            let pod = cadre_k8s::pod_name(t, g, task.rank);
            let names = cadre_k8s::dns_names(t, g, task.rank);
            if std::iter::once(&pod)
                .chain(&names)
                .any(|n| same_host(n, host))
            {
                return Ok(Target {
                    node: node_name(task.node)?,
                    in_task: t.containers.then_some(procid as u32),
                    hostname: (!t.containers).then(|| cadre_k8s::pod_hostname(t, g, task.rank)),
                });
            }
        }
    }
    for id in allocation.nodes() {
        let name = node_name(id)?;
        if same_host(&name, host) {
            return Ok(Target {
                node: name,
                in_task: None,
                hostname: None,
            });
        }
    }
    bail!(
        "`{host}` is not where job {} runs: neither a name of one of its tasks nor one of its nodes ({})",
        job.id,
        job.nodes
    )
}

fn rsh(argv: &[String]) -> Result<u8> {
    let remote = parse(argv)?;
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name);
    if let Some(user) = &remote.user
        && me.as_deref() != Some(user.as_str())
    {
        bail!(
            "cannot run as `{user}` on {}: the job's steps run as its own user ({})",
            remote.host,
            me.as_deref().unwrap_or("unknown")
        );
    }
    let id = cadre_slurm_commands::query::env_var("SLURM_JOB_ID")
        .context("SLURM_JOB_ID is not set: cadre-rsh runs inside a cadre job")?;
    let id = JobId(
        id.trim()
            .parse::<u64>()
            .with_context(|| format!("SLURM_JOB_ID `{id}` is not a job id"))?,
    );
    let mut client = cadre_slurm_commands::connect_args().client()?;
    let job: JobView = client.get(&format!("/jobs/{id}"))?;
    let nodes: NodeList = client.get("/nodes")?;
    let target = target_of(&remote.host, &job, &nodes)?;
    // As sshd: the home directory, or `/` when there is none (service accounts such as
    // `nobody` name one that does not exist).
    let work_dir = std::env::var("HOME")
        .ok()
        .filter(|h| h.starts_with('/') && Path::new(h).is_dir())
        .unwrap_or_else(|| "/".into());
    let name = remote
        .command
        .split_whitespace()
        .next()
        .map(|w| w.trim_matches(['"', '\'']))
        .and_then(|w| w.rsplit('/').next())
        .map(str::to_string);
    let req = StepRequest {
        command: vec!["/bin/sh".into(), "-c".into(), remote.command],
        work_dir,
        env: std::env::vars().collect(),
        name,
        nodes: Some(1),
        nodelist: Some(target.node),
        ntasks: Some(1),
        in_task: target.in_task,
        hostname: target.hostname,
        leftovers_outlive: true,
        ..StepRequest::default()
    };
    run_step_request(id, req, false, "cadre-rsh").map_err(|e| anyhow::anyhow!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn ssh_options_are_skipped_and_the_command_joined() {
        let r = parse(&words(
            "-o ConnectionAttempts=10 -x -p22 pi-worker-0.pi.default.svc  orted -mca ess \"env\"",
        ))
        .unwrap();
        assert_eq!(r.host, "pi-worker-0.pi.default.svc");
        assert_eq!(r.command, " orted -mca ess \"env\"");
        assert_eq!(r.user, None);
        let r = parse(&words("-qxl alice -oBatchMode=yes bob@n2 hostname")).unwrap();
        assert_eq!((r.user.as_deref(), r.host.as_str()), (Some("bob"), "n2"));
        let r = parse(&words("-l alice -- n3 true")).unwrap();
        assert_eq!((r.user.as_deref(), r.host.as_str()), (Some("alice"), "n3"));
    }

    #[test]
    fn what_cannot_be_run_is_said() {
        let err = |s: &[&str]| {
            parse(&s.iter().map(|w| w.to_string()).collect::<Vec<_>>())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(err(&["-o"]), "option -o needs an argument",);
        assert_eq!(
            err(&["-x"]),
            "no host given (usage: cadre-rsh [ssh options] HOST COMMAND...)"
        );
        assert_eq!(
            err(&["n1"]),
            "no command for n1: cadre-rsh runs commands, not interactive sessions"
        );
    }

    #[test]
    fn hosts_compare_without_case_or_trailing_dot() {
        assert!(same_host("Pi-Worker-0.pi.", "pi-worker-0.pi"));
        assert!(!same_host("pi-worker-0", "pi-worker-0.pi"));
    }
}
