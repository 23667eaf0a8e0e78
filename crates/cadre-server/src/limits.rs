//! The bounds of the numbers a request may carry, checked before anything is sized or
//! computed from them.
//!
//! **Given** a submission's numbers (task counts, per-task amounts, the time limit, the
//! array index, the run's kill wait and signal). **Decided** here: whether each lies within
//! what it may be. **Must hold**: a job that passes can have its tasks and amounts summed,
//! multiplied by its task counts and its time limit turned into milliseconds without
//! overflow; one that does not is refused (400 `invalid_request`) with a message naming
//! the field, its value and the bound, before the engine sees it.
//!
//! The bounds are absolute, not the cluster's: a job larger than today's cluster is still
//! accepted and waits, as before. A step's counts are bounded by its job's allocation
//! instead, in `controller::steps::step_layout`; a step's time limit by [`MAX_TIME_LIMIT_SECS`].
//! The README's "Limits of a request" lists these constants.

use cadre_core::job::JobSpec;
use cadre_core::run::RunSpec;

/// Tasks of one job, all groups together.
pub const MAX_TASKS: u32 = 1 << 20;
/// Task groups of one job (a task's group is a 16-bit index in allocations).
pub const MAX_GROUPS: usize = 1024;
/// CPUs of one task.
pub const MAX_CPUS_PER_TASK: u32 = 1 << 16;
/// Whole GPUs of one task.
pub const MAX_GPUS_PER_TASK: u32 = 1024;
/// RDMA NICs of one task.
pub const MAX_NICS_PER_TASK: u32 = 1024;
/// Memory of one task, in MiB (1 EiB).
pub const MAX_MEM_MIB_PER_TASK: u64 = 1 << 40;
/// Named resources (GRES) one task asks for, and the count of each.
pub const MAX_NAMED_PER_TASK: usize = 64;
pub const MAX_NAMED_COUNT: u64 = 1 << 40;
/// A job's or a step's time limit, in seconds (100 years; 0 means none).
pub const MAX_TIME_LIMIT_SECS: u64 = 100 * 365 * 86_400;
/// A task's index in its job array (Slurm's largest `MaxArraySize` is 4,000,001).
pub const MAX_ARRAY_INDEX: u32 = 4_000_000;
/// Seconds between SIGTERM and SIGKILL (Slurm's largest `KillWait`).
pub const MAX_KILL_WAIT_SECS: u64 = 65_533;
/// Seconds before the time limit that `--signal` may ask for (Slurm's bound).
pub const MAX_SIGNAL_BEFORE_SECS: u64 = 65_535;

/// A number of a request outside what it may be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} = {value} is out of range: {bound}")]
pub struct LimitError {
    /// The field, as a path in the request (`spec.groups[0].count`).
    pub field: String,
    pub value: String,
    /// What it may be (`at most 1048576 tasks per job`).
    pub bound: String,
}

impl LimitError {
    pub(crate) fn new(
        field: impl Into<String>,
        value: impl ToString,
        bound: impl Into<String>,
    ) -> LimitError {
        LimitError {
            field: field.into(),
            value: value.to_string(),
            bound: bound.into(),
        }
    }
}

impl LimitError {
    /// The API's error for it (`out_of_range`, about the field), its message prefixed
    /// with `at` (the request's path to the field's parent, e.g. `jobs[2].`).
    pub(crate) fn answer(self, at: &str) -> crate::api_error::ApiError {
        crate::api_error::ApiError::because(
            cadre_proto::api::ErrorReason::OutOfRange,
            format!("{at}{self}"),
        )
        .about(format!("{at}{}", self.field))
    }
}

fn at_most<T: PartialOrd + ToString>(
    field: impl FnOnce() -> String,
    value: T,
    max: T,
    what: &str,
) -> Result<(), LimitError> {
    if value > max {
        return Err(LimitError::new(
            field(),
            value.to_string(),
            format!("at most {} {what}", max.to_string()),
        ));
    }
    Ok(())
}

/// Checks every number of one submitted job (its spec and what it runs) against its
/// bound. Fields are named as paths in the submission (`spec.groups[1].per_task.mem_mib`).
pub fn check_job(spec: &JobSpec, run: &RunSpec) -> Result<(), LimitError> {
    at_most(
        || "spec.groups".into(),
        spec.groups.len(),
        MAX_GROUPS,
        "task groups per job",
    )?;
    let mut tasks: u64 = 0;
    for (i, g) in spec.groups.iter().enumerate() {
        let field = |name: &str| format!("spec.groups[{i}].{name}");
        at_most(|| field("count"), g.count, MAX_TASKS, "tasks per job")?;
        if let Some(min) = g.min_count {
            at_most(|| field("min_count"), min, g.count, "(the group's count)")?;
        }
        if let Some(k) = g.tasks_per_node {
            at_most(
                || field("tasks_per_node"),
                k,
                g.count,
                "(the group's count)",
            )?;
        }
        if let Some(n) = g.nodes {
            at_most(|| field("nodes"), n, g.count, "(the group's count)")?;
        }
        tasks += u64::from(g.count);
        let r = &g.per_task;
        let per_task = |name: &str| format!("spec.groups[{i}].per_task.{name}");
        at_most(
            || per_task("cpus"),
            r.cpus,
            MAX_CPUS_PER_TASK,
            "CPUs per task",
        )?;
        at_most(
            || per_task("gpus"),
            r.gpus,
            MAX_GPUS_PER_TASK,
            "GPUs per task",
        )?;
        at_most(
            || per_task("nics"),
            r.nics,
            MAX_NICS_PER_TASK,
            "NICs per task",
        )?;
        at_most(
            || per_task("mem_mib"),
            r.mem_mib,
            MAX_MEM_MIB_PER_TASK,
            "MiB per task",
        )?;
        at_most(
            || per_task("named"),
            r.named.len(),
            MAX_NAMED_PER_TASK,
            "named resources per task",
        )?;
        for (j, (name, count)) in r.named.iter().enumerate() {
            at_most(
                || format!("spec.groups[{i}].per_task.named[{j}] ({name})"),
                *count,
                MAX_NAMED_COUNT,
                "per task",
            )?;
        }
    }
    at_most(
        || "the sum of spec.groups[].count".into(),
        tasks,
        u64::from(MAX_TASKS),
        "tasks per job",
    )?;
    at_most(
        || "spec.time_limit".into(),
        spec.time_limit.0,
        MAX_TIME_LIMIT_SECS,
        "seconds (0: none)",
    )?;
    if let Some(a) = &spec.array {
        at_most(
            || "spec.array.index".into(),
            a.index,
            MAX_ARRAY_INDEX,
            "(the largest array index)",
        )?;
        if a.max_running == Some(0) {
            return Err(LimitError::new(
                "spec.array.max_running",
                0,
                "at least 1 task of the array running at once",
            ));
        }
    }
    at_most(
        || "run.kill_wait_secs".into(),
        run.kill_wait_secs,
        MAX_KILL_WAIT_SECS,
        "seconds",
    )?;
    if let Some(sig) = &run.signal {
        if cadre_core::run::signal_name(sig.signal).is_none() {
            return Err(LimitError::new(
                "run.signal.signal",
                sig.signal,
                "a Linux signal number (1 to 31)",
            ));
        }
        at_most(
            || "run.signal.before_secs".into(),
            sig.before_secs,
            MAX_SIGNAL_BEFORE_SECS,
            "seconds",
        )?;
    }
    for (j, &g) in run.completing_groups.iter().flatten().enumerate() {
        if usize::from(g) >= spec.groups.len() {
            return Err(LimitError::new(
                format!("run.completing_groups[{j}]"),
                g,
                format!(
                    "a task group of the job, below {} (its number of groups)",
                    spec.groups.len()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadre_core::cluster::Cluster;
    use cadre_core::job::{ArrayIndex, JobId, TaskGroup};
    use cadre_core::policy::Policy;
    use cadre_core::resources::TaskResources;
    use cadre_core::scheduler::{Event, Scheduler};
    use cadre_core::time::{Dur, Time};
    use proptest::prelude::*;

    fn job(count: u32, mem_mib: u64) -> JobSpec {
        JobSpec::simple(
            "u",
            "u",
            count,
            TaskResources {
                cpus: 1,
                mem_mib,
                ..TaskResources::default()
            },
            Dur(60),
        )
    }

    fn run() -> RunSpec {
        RunSpec::command(vec!["true".into()], "/".into())
    }

    #[test]
    fn a_job_of_four_billion_tasks_is_refused_naming_the_field_and_the_bound() {
        let err = check_job(&job(u32::MAX, 0), &run()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.groups[0].count = 4294967295 is out of range: at most 1048576 tasks per job"
        );
        let mut two = job(MAX_TASKS, 1);
        two.groups.push(two.groups[0].clone());
        assert_eq!(
            check_job(&two, &run()).unwrap_err().field,
            "the sum of spec.groups[].count"
        );
        let err = check_job(&job(1, u64::MAX), &run()).unwrap_err();
        assert_eq!(err.field, "spec.groups[0].per_task.mem_mib");
        let mut forever = job(1, 1);
        forever.time_limit = Dur(u64::MAX);
        assert_eq!(
            check_job(&forever, &run()).unwrap_err().field,
            "spec.time_limit"
        );
        let mut kill = run();
        kill.kill_wait_secs = u64::MAX;
        assert_eq!(
            check_job(&job(1, 1), &kill).unwrap_err().field,
            "run.kill_wait_secs"
        );
        let mut completing = run();
        completing.completing_groups = Some(vec![3]);
        assert_eq!(
            check_job(&job(1, 1), &completing).unwrap_err().field,
            "run.completing_groups[0]"
        );
        assert_eq!(
            check_job(&job(MAX_TASKS, MAX_MEM_MIB_PER_TASK), &run()),
            Ok(())
        );
    }

    /// Any number: mostly small ones (so that many jobs pass), else the edges and beyond.
    fn any_u32() -> impl Strategy<Value = u32> {
        prop_oneof![
            100 => 0u32..8,
            1 => Just(MAX_TASKS),
            1 => Just(MAX_TASKS + 1),
            1 => Just(u32::MAX),
            1 => any::<u32>(),
        ]
    }

    fn any_u64() -> impl Strategy<Value = u64> {
        prop_oneof![
            100 => 0u64..8,
            1 => Just(MAX_MEM_MIB_PER_TASK),
            1 => Just(MAX_TIME_LIMIT_SECS),
            1 => Just(u64::MAX / 1000 + 1),
            1 => Just(u64::MAX),
            1 => any::<u64>(),
        ]
    }

    prop_compose! {
        fn any_group()(
            count in any_u32(),
            min_count in proptest::option::weighted(0.25, any_u32()),
            tasks_per_node in proptest::option::weighted(0.25, any_u32()),
            nodes in proptest::option::weighted(0.25, any_u32()),
            cpus in any_u32(),
            mem_mib in any_u64(),
            gpus in any_u32(),
            nics in any_u32(),
            named in proptest::option::of(any_u64()),
        ) -> TaskGroup {
            TaskGroup {
                name: "g".into(),
                count,
                min_count,
                per_task: TaskResources {
                    cpus,
                    mem_mib,
                    gpus,
                    nics,
                    named: named.map(|n| vec![("license".to_string(), n)]).unwrap_or_default(),
                    ..TaskResources::default()
                },
                tasks_per_node,
                nodes,
            }
        }
    }

    prop_compose! {
        fn any_job()(
            groups in proptest::collection::vec(any_group(), 1..4),
            time_limit in any_u64(),
            nice in any::<i32>(),
            begin in proptest::option::of(any_u64()),
            array in proptest::option::of((any_u32(), proptest::option::of(any_u32()))),
        ) -> JobSpec {
            let mut spec = job(1, 1);
            spec.groups = groups;
            spec.time_limit = Dur(time_limit);
            spec.nice = nice;
            spec.begin = begin.map(Time);
            spec.array = array.map(|(index, max_running)| ArrayIndex {
                array_job: JobId(1),
                index,
                max_running,
            });
            spec
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Whatever numbers a submission carries, its check refuses it or lets through a
        /// job whose totals are computed without overflow and that the scheduler takes,
        /// schedules and cancels without a panic.
        #[test]
        fn any_numbers_in_a_submission_are_refused_or_make_a_job_the_scheduler_handles(
            spec in any_job(),
            kill_wait in any_u64(),
        ) {
            let mut run = run();
            run.kill_wait_secs = kill_wait;
            if check_job(&spec, &run).is_err() {
                return Ok(());
            }
            let tasks = spec.groups.iter().try_fold(0u32, |t, g| t.checked_add(g.count));
            prop_assert!(tasks.is_some_and(|t| t <= MAX_TASKS));
            for g in &spec.groups {
                let a = g.per_task.amounts();
                let n = u64::from(g.count);
                prop_assert!(a.mem_mib.checked_mul(n).is_some());
                prop_assert!(a.cpus.checked_mul(n).is_some());
                prop_assert!(a.gpu_milli.checked_mul(n).is_some());
            }
            let _ = spec.amounts();
            prop_assert!(spec.time_limit.0.checked_mul(1000).is_some());
            prop_assert!(run.kill_wait_secs <= MAX_KILL_WAIT_SECS);
            let mut sched = Scheduler::new(Cluster::flat_gpu(2, 4), Policy::default())
                .expect("a scheduler over a small cluster");
            let now = Time(1_000);
            let id = JobId(7);
            if sched.validate(id, &spec).is_ok() {
                sched
                    .handle(Event::Submit { id, spec: Box::new(spec) }, now)
                    .expect("a validated job is taken");
                let _ = sched.schedule(now);
                let _ = sched.handle(Event::Cancel { id }, now);
            }
        }
    }
}
