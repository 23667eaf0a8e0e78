//! Jobs as gangs: the job spec every front end (Slurm options, Kubernetes manifests, the
//! REST API, trace importers) produces, and the job states the scheduler moves through.
//!
//! A job is one or more task groups (MPI launcher + workers, PyTorch master + workers, or
//! the N tasks of a Slurm job). The scheduler starts all of a job's tasks in one decision or
//! none of them; an elastic group may start with fewer tasks than asked, never fewer than
//! its minimum.

use crate::resources::{Amounts, TaskResources};
use crate::time::{Dur, Time};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A job's id, assigned by the caller (the store, or a trace) before the core sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One group of identical tasks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TaskGroup {
    /// `launcher`, `worker`, `master`, or `task` for a plain Slurm job.
    pub name: String,
    /// Tasks wanted.
    pub count: u32,
    /// Elastic groups: the fewest tasks the job can start with (Volcano `minAvailable`,
    /// PyTorch `elasticPolicy.minReplicas`). `None`: exactly `count`.
    #[serde(default)]
    pub min_count: Option<u32>,
    /// What each task asks for.
    pub per_task: TaskResources,
    /// Exactly this many tasks on each node used (`--ntasks-per-node`).
    #[serde(default)]
    pub tasks_per_node: Option<u32>,
    /// Exactly this many nodes (`--nodes`).
    #[serde(default)]
    pub nodes: Option<u32>,
}

impl TaskGroup {
    /// The fewest tasks this group may start with.
    pub fn min_tasks(&self) -> u32 {
        self.min_count.unwrap_or(self.count).min(self.count)
    }
}

/// How a task's devices relate to NUMA domains.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum NumaPolicy {
    /// No requirement.
    #[default]
    None,
    /// GPUs, cores and NICs of a task from one NUMA domain where possible.
    Preferred,
    /// GPUs, cores and NICs of a task from one NUMA domain, or the task does not start.
    Strict,
}

/// How the nodes of a job relate to the network.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum NetworkSpan {
    /// Any nodes.
    #[default]
    Any,
    /// All nodes under one leaf switch.
    OneLeaf,
    /// All nodes within one NVLink block.
    OneBlock,
    /// Nodes under at most this many leaf switches (Slurm `--switches`).
    MaxSwitches(u32),
}

/// The topology a job asks for.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct TopologyReq {
    pub numa: NumaPolicy,
    pub span: NetworkSpan,
}

/// Kinds of dependency (Slurm `--dependency`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DependencyKind {
    /// The other job has started.
    After,
    /// The other job has ended, however.
    AfterAny,
    /// The other job completed successfully.
    AfterOk,
    /// The other job ended unsuccessfully.
    AfterNotOk,
}

/// One dependency of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Dependency {
    On {
        kind: DependencyKind,
        job: JobId,
    },
    /// No other job of the same name and user runs at the same time.
    Singleton,
}

/// What happens to the job when it is preempted or its node fails.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum RequeuePolicy {
    /// Back to the queue, whole.
    #[default]
    Requeue,
    /// Ended for good.
    Never,
}

/// A job's array membership.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArrayIndex {
    pub array_job: JobId,
    pub index: u32,
    /// `--array=...%N`: at most this many of the array's tasks run at once (the others
    /// pend with `JobArrayTaskLimit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
}

/// Everything a job asks for: the single input type of the scheduler.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub name: String,
    pub user: String,
    pub account: String,
    /// `None`: the cluster's default partition.
    #[serde(default)]
    pub partition: Option<String>,
    #[serde(default)]
    pub qos: Option<String>,
    /// Kueue/Volcano queue the job is admitted through; `None`: the account's own.
    #[serde(default)]
    pub queue: Option<String>,
    /// Priority class (Kubernetes `priorityClassName`); higher classes may preempt lower.
    #[serde(default)]
    pub priority_class: Option<String>,
    /// The Kubernetes namespace of a workload: its running gangs count against the
    /// namespace's quotas (ResourceQuota objects). `None` for jobs of no namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default)]
    pub nice: i32,
    pub time_limit: Dur,
    pub submit_time: Time,
    /// Not eligible before this time (`--begin`).
    #[serde(default)]
    pub begin: Option<Time>,
    /// Submitted held (`--hold`).
    #[serde(default)]
    pub hold: bool,
    pub groups: Vec<TaskGroup>,
    #[serde(default)]
    pub dependencies: Vec<Dependency>,
    /// Dependencies are satisfied when any of them is (`?` separator) instead of all.
    #[serde(default)]
    pub dependencies_any: bool,
    #[serde(default)]
    pub array: Option<ArrayIndex>,
    #[serde(default)]
    pub exclusive: bool,
    #[serde(default = "yes")]
    pub preemptible: bool,
    #[serde(default)]
    pub requeue: RequeuePolicy,
    #[serde(default)]
    pub topology: TopologyReq,
    /// Node features all nodes must have (`--constraint a&b`).
    #[serde(default)]
    pub features: Vec<String>,
    /// Node labels all nodes must carry (Kubernetes node selectors).
    #[serde(default)]
    pub node_selector: Vec<(String, String)>,
    /// Put each task of the job on a different node (`podAntiAffinity` on hostname).
    #[serde(default)]
    pub one_task_per_node: bool,
    /// What front ends record and the scheduler never looks at: the options a Slurm
    /// script gave that cadre keeps only to show them back (`--comment`, `--mail-type`,
    /// the form a memory request took, ...), a manifest's labels and annotations. Keys are
    /// namespaced by their front end (`slurm.comment`, `k8s.label/team`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

fn yes() -> bool {
    true
}

impl JobSpec {
    /// A plain job of `tasks` identical tasks: the shape of most Slurm jobs.
    pub fn simple(
        user: &str,
        account: &str,
        tasks: u32,
        per_task: TaskResources,
        time_limit: Dur,
    ) -> JobSpec {
        JobSpec {
            name: "job".into(),
            user: user.into(),
            account: account.into(),
            partition: None,
            qos: None,
            queue: None,
            priority_class: None,
            namespace: None,
            nice: 0,
            time_limit,
            submit_time: Time(0),
            begin: None,
            hold: false,
            groups: vec![TaskGroup {
                name: "task".into(),
                count: tasks,
                min_count: None,
                per_task,
                tasks_per_node: None,
                nodes: None,
            }],
            dependencies: Vec::new(),
            dependencies_any: false,
            array: None,
            exclusive: false,
            preemptible: true,
            requeue: RequeuePolicy::Requeue,
            topology: TopologyReq::default(),
            features: Vec::new(),
            node_selector: Vec::new(),
            one_task_per_node: false,
            annotations: BTreeMap::new(),
        }
    }

    /// Whether the job waits for no job of its user and name to run (`singleton`).
    pub fn singleton(&self) -> bool {
        (self.dependencies.iter()).any(|d| matches!(d, Dependency::Singleton))
    }

    /// Amounts of the whole gang at its full size.
    pub fn amounts(&self) -> Amounts {
        self.groups.iter().fold(Amounts::ZERO, |acc, g| {
            acc + g.per_task.amounts() * u64::from(g.count)
        })
    }

    /// Amounts of the gang at its minimum size.
    pub fn min_amounts(&self) -> Amounts {
        self.groups.iter().fold(Amounts::ZERO, |acc, g| {
            acc + g.per_task.amounts() * u64::from(g.min_tasks())
        })
    }

    /// Total tasks at full size.
    pub fn tasks(&self) -> u32 {
        self.groups.iter().map(|g| g.count).sum()
    }

    /// Whether any group may start smaller than asked.
    pub fn is_elastic(&self) -> bool {
        self.groups.iter().any(|g| g.min_tasks() < g.count)
    }
}

/// Where a job is in its life.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    Pending,
    Running,
    /// Asked to stop so that another job can run; its resources are still held.
    Preempting,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    NodeFail,
    OutOfMemory,
    Preempted,
}

impl JobState {
    /// Whether the job holds resources.
    pub fn is_active(self) -> bool {
        matches!(self, JobState::Running | JobState::Preempting)
    }

    /// Whether the job has ended for good.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            JobState::Pending | JobState::Running | JobState::Preempting
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Preempting => "PREEMPTING",
            JobState::Completed => "COMPLETED",
            JobState::Failed => "FAILED",
            JobState::Cancelled => "CANCELLED",
            JobState::Timeout => "TIMEOUT",
            JobState::NodeFail => "NODE_FAIL",
            JobState::OutOfMemory => "OUT_OF_MEMORY",
            JobState::Preempted => "PREEMPTED",
        })
    }
}

/// What happens to a job, as the job lifecycle sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Lifecycle {
    /// The scheduler started it.
    Start,
    /// The scheduler asked it to stop for another job.
    Preempt,
    /// It was cancelled while pending.
    CancelPending,
    /// Its tasks are gone, with this outcome.
    End(JobState),
    /// It goes back to the queue whole (after a failed launch, a preemption, a node failure
    /// or an administrator's requeue).
    Requeue,
}

/// A transition the job lifecycle does not allow.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("job {job} is {from}; it cannot take {event:?}")]
pub struct IllegalTransition {
    pub job: JobId,
    pub from: JobState,
    pub event: Lifecycle,
}

impl JobState {
    /// The one transition function of the job lifecycle.
    pub fn on(self, job: JobId, event: Lifecycle) -> Result<JobState, IllegalTransition> {
        use JobState::*;
        let next = match (self, event) {
            (Pending, Lifecycle::Start) => Some(Running),
            (Pending, Lifecycle::CancelPending) => Some(Cancelled),
            (Running, Lifecycle::Preempt) => Some(Preempting),
            (Running | Preempting, Lifecycle::End(end)) if end.is_final() => Some(end),
            (Running | Preempting, Lifecycle::Requeue) => Some(Pending),
            _ => None,
        };
        next.ok_or(IllegalTransition {
            job,
            from: self,
            event,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_allows_only_its_transitions() {
        let j = JobId(7);
        assert_eq!(
            JobState::Pending.on(j, Lifecycle::Start),
            Ok(JobState::Running)
        );
        assert_eq!(
            JobState::Running.on(j, Lifecycle::Preempt),
            Ok(JobState::Preempting)
        );
        assert_eq!(
            JobState::Preempting.on(j, Lifecycle::End(JobState::Preempted)),
            Ok(JobState::Preempted)
        );
        assert_eq!(
            JobState::Running.on(j, Lifecycle::Requeue),
            Ok(JobState::Pending)
        );
        let err = JobState::Pending.on(j, Lifecycle::Preempt).unwrap_err();
        assert_eq!(err.to_string(), "job 7 is PENDING; it cannot take Preempt");
        assert!(JobState::Completed.on(j, Lifecycle::Start).is_err());
        assert!(
            JobState::Running
                .on(j, Lifecycle::End(JobState::Running))
                .is_err()
        );
    }

    #[test]
    fn elastic_minimum_never_exceeds_count() {
        let g = TaskGroup {
            name: "w".into(),
            count: 4,
            min_count: Some(9),
            per_task: TaskResources::default(),
            tasks_per_node: None,
            nodes: None,
        };
        assert_eq!(g.min_tasks(), 4);
    }
}
