//! From [`BatchOptions`] to the job cadre runs: a [`JobSubmission`] (one per array task).
//!
//! A Slurm job becomes one task group of `ntasks` tasks with per-task resources. Slurm's
//! per-node and per-job requests become per-task amounts over the tasks a node runs
//! (`ntasks-per-node` when given, else the tasks spread over the nodes given, else all
//! tasks on one node), rounded up where they do not divide: `--gres=gpu:8` with
//! `--ntasks-per-node=8` is one GPU per task; `--mem=64G` with four tasks on a node is
//! 16 GiB per task. The form of every request (per node, per task, per job; `--mem` or
//! `--mem-per-cpu`; the TRES strings) is recorded in the spec's annotations under
//! `slurm.*`, so that `scontrol show job` shows it back as Slurm does.
//!
//! What cadre's scheduler cannot hold yet, recorded and reported instead:
//! - a node range `--nodes=2-4` runs on its minimum, 2 nodes;
//! - `--ntasks-per-node` is exact when the tasks fill the nodes, and otherwise only fixes
//!   the node count (Slurm takes it as a maximum per node);
//! - `--mem=0` (all of a node's memory) books no memory;
//! - `%N` of `--array` (at most N tasks running) is not enforced;
//! - `after:job+minutes` waits for the start only;
//! - `--time-min`, `--hint`, `--input`, `--contiguous`, `--oversubscribe`,
//!   `--wait-all-nodes`, mail and the options in [`BatchOptions::recorded`] have no effect.
//!
//! Refused: `--reservation` (cadre has no reservations: Slurm's message for an unknown
//! one), constraints beyond `&`-joined features, `aftercorr` and `afterburstbuffer`, jobs
//! of zero nodes.

use crate::array::{ArraySpec, parse_array};
use crate::dependency::{DepKind, DepTarget, DependencySpec, parse_dependency};
use crate::error::SlurmError;
use crate::gres::GpuRequest;
use crate::options::{BatchOptions, Exclusive};
use crate::time::{Clock, TimeLimit};
use cadre_core::job::{
    ArrayIndex, Dependency, DependencyKind, JobId, JobSpec, NetworkSpan, RequeuePolicy,
};
use cadre_core::resources::TaskResources;
use cadre_core::run::{Export, OpenMode, PreEndSignal, RunSpec, SignalTarget};
use cadre_core::time::{Dur, Time};
use cadre_proto::api::JobSubmission;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Slurm's default `max_switch_wait`, in seconds: `--switches` waits no longer.
pub const MAX_SWITCH_WAIT_SECS: u64 = 300;

/// Annotation keys, shared with [`crate::show`].
pub mod keys {
    pub const NODES: &str = "slurm.nodes";
    pub const NTASKS_PER_NODE: &str = "slurm.ntasks_per_node";
    pub const CPUS_PER_TASK: &str = "slurm.cpus_per_task";
    pub const MEM_PER_NODE: &str = "slurm.mem_per_node";
    pub const MEM_PER_CPU: &str = "slurm.mem_per_cpu";
    pub const TRES_PER_NODE: &str = "slurm.tres_per_node";
    pub const TRES_PER_JOB: &str = "slurm.tres_per_job";
    pub const TRES_PER_TASK: &str = "slurm.tres_per_task";
    pub const CPUS_PER_TRES: &str = "slurm.cpus_per_tres";
    pub const MEM_PER_TRES: &str = "slurm.mem_per_tres";
    pub const TIME_MIN: &str = "slurm.time_min";
    pub const COMMENT: &str = "slurm.comment";
    pub const MAIL_TYPE: &str = "slurm.mail_type";
    pub const MAIL_USER: &str = "slurm.mail_user";
    pub const INPUT: &str = "slurm.input";
    pub const OVERSUBSCRIBE: &str = "slurm.oversubscribe";
    pub const CONTIGUOUS: &str = "slurm.contiguous";
    pub const HINT: &str = "slurm.hint";
    pub const WAIT_ALL_NODES: &str = "slurm.wait_all_nodes";
    pub const SWITCHES: &str = "slurm.switches";
    pub const DEPENDENCY: &str = "slurm.dependency";
    pub const ARRAY: &str = "slurm.array";
    pub const ARRAY_MAX_RUNNING: &str = "slurm.array_max_running";
    pub const PARTITIONS: &str = "slurm.partitions";
    pub const COMMAND: &str = "slurm.command";
    pub const PRIORITY: &str = "slurm.priority";
    pub const EXCLUSIVE: &str = "slurm.exclusive";
    pub const NODE_RANGE_NOTE: &str = "slurm.note.nodes";
    pub const MEM_ALL: &str = "slurm.mem_all";
}

/// What the submitting side knows that the options do not say.
#[derive(Clone, Debug)]
pub struct SubmitContext {
    pub user: String,
    /// The account when none is asked for (cadre charges the user's own by default).
    pub default_account: String,
    pub cwd: PathBuf,
    /// The submitter's environment, captured for the job.
    pub env: Vec<(String, String)>,
    pub submit_host: Option<String>,
    pub clock: Clock,
    pub max_array_size: u32,
}

/// Where the script came from, for the job's name and `Command=`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptSource {
    /// A file, by the path given (made absolute against the working directory).
    File(String),
    Stdin,
    Wrap,
}

/// The job to submit, and what `sbatch` says about it on the way.
#[derive(Clone, Debug)]
pub struct BatchJob {
    /// One per array task (a single one otherwise), in index order.
    pub submissions: Vec<JobSubmission>,
    /// `sbatch: Warning: ...` lines.
    pub warnings: Vec<String>,
}

/// Resolves a dependency's target to cadre job ids: a job, every task of an array (`12`
/// names the whole array), or one task (`12_3`).
pub trait JobResolver {
    fn resolve(&self, target: &DepTarget) -> Result<Vec<JobId>, SlurmError>;
}

/// Takes every target for the job of its number (for tests and offline use).
pub struct Literal;

impl JobResolver for Literal {
    fn resolve(&self, target: &DepTarget) -> Result<Vec<JobId>, SlurmError> {
        Ok(vec![JobId(target.job)])
    }
}

/// The wrapper script of `--wrap`.
pub fn wrap_script(command: &str) -> String {
    format!("#!/bin/sh\n# made by sbatch --wrap (cadre)\n{command}\n")
}

fn absolute(cwd: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// Features joined by `&` (or `,`, which Slurm shows as `&`): the only constraints cadre's
/// scheduler can hold.
pub fn parse_constraint(c: &str) -> Result<Vec<String>, SlurmError> {
    let features: Vec<String> = c.split(['&', ',']).map(str::to_string).collect();
    let plain = |f: &String| {
        !f.is_empty()
            && f.chars()
                .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.'))
    };
    if features.iter().all(plain) {
        Ok(features)
    } else {
        Err(SlurmError::unsupported(format!(
            "the constraint `{c}` (only features joined by `&`)"
        )))
    }
}

/// `--export`'s value into the run spec's export mode, with the values it sets.
fn export_of(value: &str) -> (Export, Vec<(String, String)>) {
    let mut all = false;
    let mut names = Vec::new();
    let mut values = Vec::new();
    for item in value.split(',').filter(|i| !i.is_empty()) {
        if item.eq_ignore_ascii_case("ALL") {
            all = true;
        } else if item.eq_ignore_ascii_case("NONE") {
            all = false;
        } else if let Some((k, v)) = item.split_once('=') {
            names.push(k.to_string());
            values.push((k.to_string(), v.to_string()));
        } else {
            names.push(item.to_string());
        }
    }
    let mode = if all {
        Export::All
    } else if names.is_empty() {
        Export::None
    } else {
        Export::Named(names)
    };
    (mode, values)
}

fn dependency_kind(kind: DepKind) -> Result<DependencyKind, SlurmError> {
    Ok(match kind {
        DepKind::After => DependencyKind::After,
        DepKind::AfterAny => DependencyKind::AfterAny,
        DepKind::AfterOk => DependencyKind::AfterOk,
        DepKind::AfterNotOk => DependencyKind::AfterNotOk,
        DepKind::AfterCorr => return Err(SlurmError::unsupported("the dependency type aftercorr")),
        DepKind::AfterBurstBuffer => {
            return Err(SlurmError::unsupported(
                "the dependency type afterburstbuffer",
            ));
        }
        DepKind::Singleton => unreachable!("singleton has no target"),
    })
}

fn dependencies(
    spec: &DependencySpec,
    resolver: &dyn JobResolver,
) -> Result<Vec<Dependency>, SlurmError> {
    let mut out = Vec::new();
    for e in &spec.entries {
        match (e.kind, e.target) {
            (DepKind::Singleton, _) => out.push(Dependency::Singleton),
            (kind, Some(target)) => {
                let kind = dependency_kind(kind)?;
                for job in resolver.resolve(&target)? {
                    out.push(Dependency::On { kind, job });
                }
            }
            (_, None) => return Err(SlurmError::submission("Job dependency problem")),
        }
    }
    Ok(out)
}

/// Builds the job of a submission. `script` is the batch script's text (already checked),
/// `args` its arguments.
pub fn build_job(
    opts: &BatchOptions,
    script: &str,
    source: &ScriptSource,
    args: &[String],
    ctx: &SubmitContext,
    resolver: &dyn JobResolver,
) -> Result<BatchJob, SlurmError> {
    let mut warnings = Vec::new();
    let mut notes: BTreeMap<String, String> = BTreeMap::new();
    let mut note = |k: &str, v: String| {
        notes.insert(k.to_string(), v);
    };

    if opts.reservation.is_some() {
        return Err(SlurmError::submission("Requested reservation is invalid"));
    }

    // Nodes and tasks, as sbatch settles them before the controller sees them.
    let mut nodes = opts.nodes;
    if let Some(r) = nodes {
        if r.min == 0 {
            return Err(SlurmError::unsupported("a job of no nodes (--nodes=0)"));
        }
    }
    if let (Some(n), Some(r)) = (opts.ntasks, nodes.as_mut()) {
        if n < r.min {
            warnings.push(format!(
                "can't run {n} processes on {} nodes, setting nnodes to {n}",
                r.min
            ));
            r.min = n;
            r.max = Some(r.max.map_or(n, |m| m.min(n)));
        }
    }
    let tpn = opts.ntasks_per_node;
    let ntasks = opts.ntasks.unwrap_or(match (nodes, tpn) {
        (Some(r), Some(k)) => r.min * k,
        (None, Some(k)) => k,
        (Some(r), None) => r.min,
        (None, None) => 1,
    });
    if let Some(r) = nodes {
        let max = r.max.unwrap_or(r.min);
        note(keys::NODES, format!("{}-{max}", r.min));
        if max != r.min {
            note(keys::NODE_RANGE_NOTE, format!("runs on {} nodes", r.min));
        }
    }
    // How the tasks sit on the nodes, as far as cadre's scheduler can hold it.
    let (group_nodes, group_tpn) = match (nodes, tpn) {
        (Some(r), Some(k)) if r.min * k == ntasks => (Some(r.min), Some(k)),
        (Some(r), _) => (Some(r.min), None),
        (None, Some(k)) if ntasks % k == 0 => (Some(ntasks / k), Some(k)),
        (None, Some(k)) => (Some(ntasks.div_ceil(k)), None),
        (None, None) => (None, None),
    };
    if let Some(k) = tpn {
        note(keys::NTASKS_PER_NODE, k.to_string());
    }
    // Tasks on a node, for per-node amounts.
    let tasks_on_node = match (group_tpn, group_nodes) {
        (Some(k), _) => k,
        (None, Some(n)) => ntasks.div_ceil(n),
        (None, None) => ntasks,
    }
    .max(1);
    let node_count = group_nodes.unwrap_or(1);

    // GPUs.
    let per_node_gpus: Option<GpuRequest> = match (&opts.gpus_per_node, &opts.gres) {
        (Some(a), Some(Some(b))) => Some(GpuRequest {
            model: a.model.clone().or_else(|| b.model.clone()),
            count: a.count + b.count,
            text: a.text.clone(),
        }),
        (Some(a), _) => Some(a.clone()),
        (None, Some(Some(b))) => Some(b.clone()),
        _ => None,
    };
    let mut tres_per_node: Vec<String> = Vec::new();
    if let Some(g) = &opts.gpus_per_node {
        tres_per_node.push(g.tres());
    }
    if let Some(Some(g)) = &opts.gres {
        tres_per_node.push(g.tres());
    }
    if !tres_per_node.is_empty() {
        note(keys::TRES_PER_NODE, tres_per_node.join(","));
    }
    if let Some(g) = &opts.gpus {
        note(keys::TRES_PER_JOB, g.tres());
    }
    if let Some(g) = &opts.gpus_per_task {
        note(keys::TRES_PER_TASK, g.tres());
    }
    let (gpus_per_task, total_gpus) = if let Some(g) = &opts.gpus_per_task {
        (g.count, g.count * u64::from(ntasks))
    } else if let Some(g) = &per_node_gpus {
        (
            g.count.div_ceil(u64::from(tasks_on_node)),
            g.count * u64::from(node_count),
        )
    } else if let Some(g) = &opts.gpus {
        (g.count.div_ceil(u64::from(ntasks)), g.count)
    } else {
        (0, 0)
    };
    let gpu_model = [&opts.gpus_per_task, &per_node_gpus, &opts.gpus]
        .iter()
        .find_map(|g| g.as_ref().and_then(|g| g.model.clone()))
        .map(|m| m.to_ascii_lowercase());
    let gpu_tres = opts
        .gpus_per_task
        .as_ref()
        .or(per_node_gpus.as_ref())
        .or(opts.gpus.as_ref())
        .map(|g| match &g.model {
            Some(m) => format!("gres/gpu:{m}"),
            None => "gres/gpu".to_string(),
        });

    // CPUs.
    let mut cpus = opts.cpus_per_task.unwrap_or(1);
    if let Some(c) = opts.cpus_per_task {
        note(keys::CPUS_PER_TASK, c.to_string());
    }
    if let Some(c) = opts.cpus_per_gpu {
        if let Some(t) = &gpu_tres {
            note(keys::CPUS_PER_TRES, format!("{t}:{c}"));
        }
        let total = u64::from(c) * total_gpus;
        cpus = cpus.max(u32::try_from(total.div_ceil(u64::from(ntasks))).unwrap_or(u32::MAX));
    }

    // Memory, per task.
    let mem_mib = if let Some(m) = opts.mem_per_node {
        note(keys::MEM_PER_NODE, m.to_string());
        if m == 0 {
            note(keys::MEM_ALL, "1".into());
        }
        m.div_ceil(u64::from(tasks_on_node))
    } else if let Some(m) = opts.mem_per_cpu {
        note(keys::MEM_PER_CPU, m.to_string());
        m * u64::from(cpus)
    } else if let Some(m) = opts.mem_per_gpu {
        if let Some(t) = &gpu_tres {
            note(keys::MEM_PER_TRES, format!("{t}:{m}"));
        }
        (m * total_gpus).div_ceil(u64::from(ntasks))
    } else {
        0
    };

    let per_task = TaskResources {
        cpus,
        mem_mib,
        gpus: u32::try_from(gpus_per_task).unwrap_or(u32::MAX),
        gpu_model: if gpus_per_task > 0 { gpu_model } else { None },
        ..TaskResources::default()
    };

    let time_limit = opts.time.map_or(Dur(0), TimeLimit::dur);
    let account = opts
        .account
        .clone()
        .unwrap_or_else(|| ctx.default_account.clone());
    let mut spec = JobSpec::simple(&ctx.user, &account, ntasks, per_task, time_limit);
    spec.name = match (&opts.job_name, source) {
        (Some(n), _) => n.clone(),
        (None, ScriptSource::Wrap) => "wrap".into(),
        (None, ScriptSource::Stdin) => "sbatch".into(),
        (None, ScriptSource::File(p)) => Path::new(p)
            .file_name()
            .map_or_else(|| p.clone(), |f| f.to_string_lossy().into_owned()),
    };
    if let Some(g) = spec.groups.first_mut() {
        g.nodes = group_nodes;
        g.tasks_per_node = group_tpn;
    }
    if let Some(p) = &opts.partition {
        let first = p.split(',').next().unwrap_or(p).to_string();
        if first != *p {
            note(keys::PARTITIONS, p.clone());
        }
        spec.partition = Some(first);
    }
    spec.qos = opts.qos.clone();
    spec.hold = opts.hold;
    spec.nice = opts.nice.unwrap_or(0);
    if let Some(b) = opts.begin {
        if b > ctx.clock.now {
            spec.begin = Some(Time(b as u64));
        }
    }
    spec.requeue = match opts.requeue {
        Some(false) => RequeuePolicy::Never,
        _ => RequeuePolicy::Requeue,
    };
    if let Some(x) = opts.exclusive {
        spec.exclusive = true;
        match x {
            Exclusive::Node => note(keys::OVERSUBSCRIBE, "NO".into()),
            Exclusive::User => note(keys::OVERSUBSCRIBE, "USER".into()),
            Exclusive::Mcs => note(keys::OVERSUBSCRIBE, "MCS".into()),
            Exclusive::Topo => note(keys::OVERSUBSCRIBE, "TOPO".into()),
        }
        if x != Exclusive::Node {
            note(keys::EXCLUSIVE, format!("{x:?}").to_ascii_lowercase());
        }
    } else if opts.oversubscribe {
        note(keys::OVERSUBSCRIBE, "YES".into());
    }
    if let Some(c) = &opts.constraint {
        spec.features = parse_constraint(c)?;
    }
    if let Some(s) = opts.switches {
        if s.count > 0 {
            spec.topology.span = NetworkSpan::MaxSwitches(s.count);
        }
        let wait = s
            .max_wait_secs
            .unwrap_or(MAX_SWITCH_WAIT_SECS)
            .min(MAX_SWITCH_WAIT_SECS);
        note(keys::SWITCHES, format!("{}@{wait}", s.count));
    }
    if let Some(d) = &opts.dependency {
        let parsed = parse_dependency(d)?;
        spec.dependencies = dependencies(&parsed, resolver)?;
        spec.dependencies_any = parsed.any;
        let shown: Vec<String> = parsed.entries.iter().map(ToString::to_string).collect();
        note(
            keys::DEPENDENCY,
            shown.join(&parsed.separator().to_string()),
        );
    }
    if let Some(t) = opts.time_min {
        note(
            keys::TIME_MIN,
            match t {
                TimeLimit::Unlimited => "0".into(),
                TimeLimit::Minutes(m) => m.to_string(),
            },
        );
    }
    for (key, value) in [
        (keys::COMMENT, &opts.comment),
        (keys::MAIL_TYPE, &opts.mail_type),
        (keys::MAIL_USER, &opts.mail_user),
        (keys::HINT, &opts.hint),
        (keys::PRIORITY, &opts.priority),
    ] {
        if let Some(v) = value {
            note(key, v.clone());
        }
    }
    if let Some(i) = &opts.input {
        note(keys::INPUT, i.clone());
    }
    if opts.contiguous {
        note(keys::CONTIGUOUS, "1".into());
    }
    if let Some(w) = opts.wait_all_nodes {
        note(keys::WAIT_ALL_NODES, u8::from(w).to_string());
    }
    for (name, value) in &opts.recorded {
        note(&format!("slurm.{name}"), value.clone());
    }

    // What it runs.
    let work_dir = match &opts.chdir {
        Some(d) => absolute(&ctx.cwd, d),
        None => ctx.cwd.clone(),
    };
    let mut run = RunSpec::command(args.to_vec(), work_dir);
    run.script = Some(script.to_string());
    run.submit_dir = Some(ctx.cwd.clone());
    run.submit_host = ctx.submit_host.clone();
    run.stdout = opts.output.clone();
    run.stderr = opts.error.clone();
    if opts.open_append == Some(true) {
        run.open_mode = OpenMode::Append;
    }
    run.env = ctx.env.clone();
    if let Some(e) = &opts.export {
        let (mode, values) = export_of(e);
        run.export = mode;
        for (k, v) in values {
            run.env.retain(|(name, _)| *name != k);
            run.env.push((k, v));
        }
    }
    run.signal = opts.signal.map(|s| PreEndSignal {
        signal: s.signal,
        before_secs: s.before_secs,
        target: if s.batch_only {
            SignalTarget::Leader
        } else {
            SignalTarget::Group
        },
    });
    if let ScriptSource::File(p) = source {
        note(keys::COMMAND, absolute(&ctx.cwd, p).display().to_string());
    }

    spec.annotations = notes;

    let submissions = match &opts.array {
        None => vec![JobSubmission {
            spec,
            run,
            array_of: None,
        }],
        Some(a) => {
            let ArraySpec {
                indices,
                max_running,
            } = parse_array(a, ctx.max_array_size)?;
            spec.annotations.insert(keys::ARRAY.into(), a.clone());
            if let Some(n) = max_running {
                spec.annotations
                    .insert(keys::ARRAY_MAX_RUNNING.into(), n.to_string());
            }
            indices
                .into_iter()
                .map(|index| {
                    let mut spec = spec.clone();
                    spec.array = Some(ArrayIndex {
                        array_job: JobId(0),
                        index,
                        max_running,
                    });
                    JobSubmission {
                        spec,
                        run: run.clone(),
                        array_of: Some(0),
                    }
                })
                .collect()
        }
    };
    Ok(BatchJob {
        submissions,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Opt;

    const CLOCK: Clock = Clock {
        now: 1_795_269_697,
        utc_offset: 0,
    };

    fn ctx() -> SubmitContext {
        SubmitContext {
            user: "alice".into(),
            default_account: "alice".into(),
            cwd: "/home/alice/run".into(),
            env: vec![("PATH".into(), "/usr/bin".into())],
            submit_host: Some("login1".into()),
            clock: CLOCK,
            max_array_size: 1001,
        }
    }

    fn job(args: &[(Opt, Option<&str>)]) -> Result<BatchJob, SlurmError> {
        let mut o = BatchOptions::default();
        for (opt, v) in args {
            o.set(*opt, *v, &CLOCK)?;
        }
        o.check()?;
        build_job(
            &o,
            "#!/bin/sh\ntrue\n",
            &ScriptSource::File("train.sh".into()),
            &[],
            &ctx(),
            &Literal,
        )
    }

    fn one(args: &[(Opt, Option<&str>)]) -> JobSubmission {
        let mut j = job(args).unwrap();
        assert_eq!(j.submissions.len(), 1);
        j.submissions.remove(0)
    }

    fn note<'a>(s: &'a JobSubmission, k: &str) -> Option<&'a str> {
        s.spec.annotations.get(k).map(String::as_str)
    }

    #[test]
    fn a_plain_script_is_one_task_named_after_its_file() {
        let s = one(&[]);
        assert_eq!(s.spec.name, "train.sh");
        assert_eq!(s.spec.tasks(), 1);
        assert_eq!(s.spec.groups[0].per_task.cpus, 1);
        assert_eq!(s.spec.time_limit, Dur(0));
        assert_eq!(s.spec.account, "alice");
        assert_eq!(s.run.work_dir, PathBuf::from("/home/alice/run"));
        assert_eq!(note(&s, keys::COMMAND), Some("/home/alice/run/train.sh"));
        assert!(s.run.script.as_deref().unwrap().starts_with("#!/bin/sh"));
    }

    #[test]
    fn nodes_and_tasks_settle_as_sbatch_does() {
        let s = one(&[(Opt::Nodes, Some("2")), (Opt::NtasksPerNode, Some("4"))]);
        let g = &s.spec.groups[0];
        assert_eq!((g.count, g.nodes, g.tasks_per_node), (8, Some(2), Some(4)));
        assert_eq!(note(&s, keys::NODES), Some("2-2"));
        // -N alone: one task per node.
        let s = one(&[(Opt::Nodes, Some("3"))]);
        assert_eq!((s.spec.tasks(), s.spec.groups[0].nodes), (3, Some(3)));
        // -n with --ntasks-per-node fixes the node count.
        let s = one(&[(Opt::Ntasks, Some("4")), (Opt::NtasksPerNode, Some("2"))]);
        let g = &s.spec.groups[0];
        assert_eq!((g.count, g.nodes, g.tasks_per_node), (4, Some(2), Some(2)));
        // A range runs on its minimum and says so.
        let s = one(&[(Opt::Nodes, Some("2-3")), (Opt::Ntasks, Some("8"))]);
        assert_eq!(s.spec.groups[0].nodes, Some(2));
        assert_eq!(note(&s, keys::NODES), Some("2-3"));
        assert!(note(&s, keys::NODE_RANGE_NOTE).is_some());
    }

    #[test]
    fn fewer_tasks_than_nodes_shrinks_the_nodes_with_slurms_warning() {
        let j = job(&[(Opt::Nodes, Some("3")), (Opt::Ntasks, Some("2"))]).unwrap();
        assert_eq!(
            j.warnings,
            vec!["can't run 2 processes on 3 nodes, setting nnodes to 2".to_string()]
        );
        assert_eq!(j.submissions[0].spec.groups[0].nodes, Some(2));
        assert_eq!(
            j.submissions[0]
                .spec
                .annotations
                .get(keys::NODES)
                .map(String::as_str),
            Some("2-2")
        );
    }

    #[test]
    fn gpus_per_node_divide_over_the_tasks_of_a_node() {
        let s = one(&[
            (Opt::Nodes, Some("2")),
            (Opt::NtasksPerNode, Some("8")),
            (Opt::GpusPerNode, Some("8")),
        ]);
        assert_eq!(s.spec.groups[0].per_task.gpus, 1);
        assert_eq!(note(&s, keys::TRES_PER_NODE), Some("gres/gpu:8"));
        let s = one(&[(Opt::Gres, Some("gpu:a100:4"))]);
        assert_eq!(s.spec.groups[0].per_task.gpus, 4);
        assert_eq!(s.spec.groups[0].per_task.gpu_model.as_deref(), Some("a100"));
        assert_eq!(note(&s, keys::TRES_PER_NODE), Some("gres/gpu:a100:4"));
        let s = one(&[(Opt::Gpus, Some("4")), (Opt::Nodes, Some("2"))]);
        assert_eq!(s.spec.groups[0].per_task.gpus, 2);
        assert_eq!(note(&s, keys::TRES_PER_JOB), Some("gres/gpu:4"));
        let s = one(&[(Opt::GpusPerTask, Some("1")), (Opt::Ntasks, Some("4"))]);
        assert_eq!(s.spec.groups[0].per_task.gpus, 1);
        assert_eq!(note(&s, keys::TRES_PER_TASK), Some("gres/gpu:1"));
    }

    #[test]
    fn memory_keeps_its_form() {
        let s = one(&[(Opt::Mem, Some("64G")), (Opt::NtasksPerNode, Some("4"))]);
        assert_eq!(s.spec.groups[0].per_task.mem_mib, 16 * 1024);
        assert_eq!(note(&s, keys::MEM_PER_NODE), Some("65536"));
        let s = one(&[(Opt::MemPerCpu, Some("2G")), (Opt::CpusPerTask, Some("4"))]);
        assert_eq!(s.spec.groups[0].per_task.mem_mib, 8 * 1024);
        assert_eq!(note(&s, keys::MEM_PER_CPU), Some("2048"));
        let s = one(&[(Opt::MemPerGpu, Some("8G")), (Opt::GpusPerNode, Some("2"))]);
        assert_eq!(s.spec.groups[0].per_task.mem_mib, 16 * 1024);
        assert_eq!(note(&s, keys::MEM_PER_TRES), Some("gres/gpu:8192"));
    }

    #[test]
    fn cpus_per_gpu_raise_the_cpus_of_a_task() {
        let s = one(&[(Opt::GpusPerNode, Some("2")), (Opt::CpusPerGpu, Some("3"))]);
        assert_eq!(s.spec.groups[0].per_task.cpus, 6);
        assert_eq!(note(&s, keys::CPUS_PER_TRES), Some("gres/gpu:3"));
    }

    #[test]
    fn arrays_are_one_submission_per_task_pointing_at_the_first() {
        let j = job(&[(Opt::Array, Some("0-9:3%2"))]).unwrap();
        let idx: Vec<u32> = j
            .submissions
            .iter()
            .map(|s| s.spec.array.unwrap().index)
            .collect();
        assert_eq!(idx, vec![0, 3, 6, 9]);
        assert!(j.submissions.iter().all(|s| s.array_of == Some(0)));
        assert_eq!(
            j.submissions[0]
                .spec
                .annotations
                .get(keys::ARRAY_MAX_RUNNING)
                .map(String::as_str),
            Some("2")
        );
    }

    #[test]
    fn dependencies_and_their_shown_form() {
        let s = one(&[(Opt::Dependency, Some("afterok:5:6?afternotok:7"))]);
        assert!(s.spec.dependencies_any);
        assert_eq!(s.spec.dependencies.len(), 3);
        assert_eq!(
            note(&s, keys::DEPENDENCY),
            Some("afterok:5?afterok:6?afternotok:7")
        );
        let s = one(&[(Opt::Dependency, Some("singleton"))]);
        assert_eq!(s.spec.dependencies, vec![Dependency::Singleton]);
        assert!(matches!(
            job(&[(Opt::Dependency, Some("aftercorr:5"))]),
            Err(SlurmError::Unsupported { .. })
        ));
    }

    #[test]
    fn run_spec_options() {
        let s = one(&[
            (Opt::Output, Some("out-%j.txt")),
            (Opt::Error, Some("err-%j.txt")),
            (Opt::Chdir, Some("sub")),
            (Opt::OpenMode, Some("append")),
            (Opt::Export, Some("NONE,FOO=bar")),
            (Opt::Signal, Some("B:USR1@90")),
        ]);
        assert_eq!(s.run.stdout.as_deref(), Some("out-%j.txt"));
        assert_eq!(s.run.work_dir, PathBuf::from("/home/alice/run/sub"));
        assert_eq!(s.run.open_mode, OpenMode::Append);
        assert_eq!(s.run.export, Export::Named(vec!["FOO".into()]));
        assert!(s.run.env.contains(&("FOO".into(), "bar".into())));
        assert_eq!(s.run.signal.unwrap().target, SignalTarget::Leader);
    }

    #[test]
    fn refusals() {
        assert_eq!(
            job(&[(Opt::Reservation, Some("maint"))])
                .unwrap_err()
                .to_string(),
            "Batch job submission failed: Requested reservation is invalid"
        );
        assert!(matches!(
            job(&[(Opt::Constraint, Some("a|b"))]),
            Err(SlurmError::Unsupported { .. })
        ));
        assert_eq!(
            one(&[(Opt::Constraint, Some("a100,ib"))]).spec.features,
            vec!["a100".to_string(), "ib".to_string()]
        );
    }
}
