//! The scheduler: one state machine that takes events and the time, and returns decisions.
//!
//! Given: the cluster ([`Cluster`]), the policy ([`Policy`]) and a stream of [`Event`]s, each
//! with the time `now` at which it happened (the caller's clock, real or simulated).
//! Decided: by [`Scheduler::schedule`], which jobs start now and where (a full
//! [`Allocation`]), which jobs are preempted for which, and the reservations that backfill
//! plans for blocked jobs; by [`Scheduler::explain`], why a job waits.
//! Must hold (checked by [`Scheduler::check_invariants`], which tests call after every
//! mutation):
//! - no core, GPU share or NIC is in two allocations; usage on every node equals the sum of
//!   the allocations of the jobs active there; nothing new is booked on a node that is not
//!   up (a job adopted after a restart keeps what it holds, whatever its nodes' state);
//! - every active job holds a whole gang: every task group has between its minimum and its
//!   count of tasks placed, never a part;
//! - quotas are within nominal plus what borrowing allows;
//! - a job started by backfill never makes a reservation made before it infeasible;
//! - the same cluster, policy, events and times give the same decisions, bit for bit
//!   (every collection iterated is ordered, but the sets of pending and active ids, which
//!   are hashed: what is read of them in order reads them sorted (`in_id_order`), and the
//!   rest only sums, counts or sorts what it finds; no clock, no randomness).
//!
//! How a pass works ([`Scheduler::schedule`]): usage is charged and decayed up to `now`;
//! pending jobs that are eligible (not held, dependencies met, begin time reached) are
//! ordered by whether they preempted others (preemptors first), partition tier, priority
//! class, multifactor priority, submit time and id; each
//! in turn is checked against its quotas, then placed on what is free now. A job that fits
//! and takes nothing a reservation counts on starts. A job that does not fit may preempt
//! lower jobs (when the policy allows and the victims free enough for it to really fit); a
//! job held back because its cohort lent its queue's quota may take it back by preempting
//! the borrowers (Kueue's reclaim within a cohort); otherwise the top blocked jobs get
//! reservations at the earliest time they fit.
//!
//! # Crash recovery
//!
//! The scheduler keeps nothing durable; a restarted controller rebuilds it from its store
//! before the first pass, with the jobs in id order (a job's dependencies must be known
//! before it, as on submission):
//! - [`Event::RestoreEnded`] for ended jobs that restored jobs depend on;
//! - [`Event::Adopt`] for every job that was active, with the allocation it holds: it is
//!   running again from its start time (end by its time limit from there), booked on its
//!   nodes whatever their state (they are typically unknown until their agents reconnect:
//!   the tasks hold the devices regardless), and counted in quotas, usage rates, singletons
//!   (once counted) and the free summary exactly as a start by the pass is. Two adopted
//!   jobs naming one GPU, core or NIC is an error ([`CoreError::Booking`]), never a silent
//!   double booking.
//!   Quotas count an adopted job even above a limit lowered since it started; new jobs are
//!   held back until usage is within the limits again. A job adopted on a node already down
//!   is stopped at once, as [`Event::NodeAvail`] `Down` would have. A stop in flight before
//!   the restart is not restored: the controller repeats a cancel or requeue, and the pass
//!   decides preemptions afresh;
//! - [`Event::RestorePending`] for every pending job, with its requeue count and hold;
//! - then [`Event::NodeAvail`] as agents reconnect (or are given up on: `Down` stops the
//!   jobs there), and [`Event::Lost`] for an active job whose tasks an agent no longer has.
//!
//! The quota configuration a controller had (its policy's queues and the queue objects
//! applied since) is given back with [`Event::SetQuotas`] before any job is restored, so
//! that jobs count in the queues they ran in; so are the priority classes applied at run
//! time ([`Event::SetPriorityClasses`]), so that a restored job finds its class.
//!
//! Not restored: fair-share usage (running jobs are charged again from their adoption),
//! age (counted from restoration) and the workload profile of fragmentation placement
//! (rebuilt from the jobs restored).

//! # Replacing the quotas
//!
//! [`Event::SetQuotas`] replaces the queues, cohorts, nominal quotas, borrowing and lending
//! limits, capabilities, weights and account limits at once, while gangs run (Kubernetes
//! queue objects applied or deleted). Given the new [`QuotaConfig`], valid as a whole
//! (else nothing changes); decided: every job's queue looked up again by the name its spec
//! gives, and a new [`QuotaBook`] counting every active job, in id order. What holds:
//! - running gangs stay where they are: replacing quotas never stops or moves one. A gang
//!   now above its queue's quota (lowered, or its cohort gone) is counted all the same, like
//!   a job adopted after a restart (`over_quota`): the queue then admits nothing new until
//!   its use is back within the limits. Only the pass's own preemption, if the policy
//!   enables it, can take quota back (a lender reclaiming what its cohort borrows);
//! - a running gang whose queue is gone counts as a job naming no queue (its account's
//!   queue, if the configuration maps its account to one; else only account limits);
//! - a pending job whose queue is gone stays pending with [`PendingReason::InvalidQueue`]
//!   until a queue of that name comes back; so does a new job naming a queue not yet
//!   there (Kubernetes takes objects in any order);
//! - the counts are exact after the replacement ([`QuotaBook::check_counts`]), and the
//!   limits are an invariant again once no gang is counted above them.

mod backlog;
mod classes;
#[cfg(test)]
mod equivalence;
mod explain;
mod free;
mod kept;
mod pass;
mod preempt;
mod queue;
mod reason;
mod tail;

pub use explain::{Explanation, NodeWhyNot};
pub use reason::PendingReason;

use classes::{ClassFits, Fits, NodeClasses, ShapeFits};
use free::{FreeSummary, UsageRates};
use kept::KeptOrder;
use queue::{PendingTable, SizeScale};

use crate::alloc::Allocation;
use crate::backfill::{NodeReleases, Profile, Reservation};
use crate::cluster::{BookingError, Cluster, NodeAvail, NodeId, PartitionId};
use crate::fairshare::{AssocIx, FairShareAlgorithm, FairShareFactors, FairShareTree, Shares};
use crate::job::{
    IllegalTransition, JobId, JobSpec, JobState, Lifecycle, RequeuePolicy, TaskGroup, TopologyReq,
};
use crate::placement::{self, JobLayout, NodeFit, PlacementFailure, WorkloadProfile};
use crate::policy::{FairShareMode, PlacementRule, Policy, PreemptMode, PriorityClassConfig};
use crate::quota::{QueueIx, QuotaBook, QuotaConfig};
use crate::resources::{Amounts, MILLI_PER_GPU};
use crate::time::{Dur, Time};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Something that happened, told to the scheduler with the time it happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// A new job, already committed by the caller under this id.
    Submit { id: JobId, spec: Box<JobSpec> },
    /// A pending job brought back after a restart (see "Crash recovery"): a submission
    /// that keeps the job's requeue count and hold, and the age it had (counted from its
    /// submission or begin time, as before the restart; a requeued job's from the
    /// restore). `spec.hold` is not looked at: `hold` is the hold the job had.
    RestorePending {
        id: JobId,
        spec: Box<JobSpec>,
        requeues: u32,
        hold: Option<Hold>,
    },
    /// A job found running (or preempting) after a restart, adopted with the allocation it
    /// holds since `start_time`: it is running again, on its nodes whatever their state
    /// (see "Crash recovery").
    Adopt {
        id: JobId,
        spec: Box<JobSpec>,
        allocation: Allocation,
        start_time: Time,
        requeues: u32,
    },
    /// A job that ended before a restart, with its final state: what dependencies on it
    /// resolve against.
    RestoreEnded { id: JobId, state: JobState },
    /// Cancel a job: pending jobs end at once; active ones are asked to stop.
    Cancel { id: JobId },
    /// Hold a pending job (by its user, or by an administrator).
    Hold { id: JobId, admin: bool },
    /// Release a held job.
    Release { id: JobId },
    /// An administrator's requeue: an active job is stopped and goes back to the queue.
    Requeue { id: JobId },
    /// Every task of an active job is gone, with this outcome (one of the final states).
    Ended { id: JobId, outcome: JobState },
    /// Some of an active job's tasks on `node` vanished without an outcome (their agent
    /// restarted, or a restarted controller found them gone): the rest of the gang is
    /// stopped and the job treated as on a failure of that node, for this job alone.
    Lost { id: JobId, node: NodeId },
    /// A started job could not launch all its tasks; it goes back to the queue whole.
    LaunchFailed { id: JobId, reason: String },
    /// A node's availability changed (drain, resume, down, agent registered).
    NodeAvail {
        node: NodeId,
        avail: NodeAvail,
        reason: Option<String>,
    },
    /// A node's features are now these (its agent reported what it can do, such as a
    /// container runtime). Jobs running there are not looked at again; pending ones are
    /// placed by the new features.
    SetNodeFeatures { node: NodeId, features: Vec<String> },
    /// A new time limit for a pending or running job.
    SetTimeLimit { id: JobId, limit: Dur },
    /// A new nice value for a pending job.
    SetNice { id: JobId, nice: i32 },
    /// The queues and account limits are replaced while gangs run (see "Replacing the
    /// quotas"). Refused, changing nothing, when the configuration is invalid.
    SetQuotas { quotas: Box<QuotaConfig> },
    /// The priority classes added at run time (Kubernetes PriorityClass objects) are
    /// replaced; the policy file's stay. A job's class value is the one it was admitted
    /// with. Refused, changing nothing, when a name is given twice or is the policy's, or
    /// when a job that has not ended names a class the new set leaves out.
    SetPriorityClasses { classes: Vec<PriorityClassConfig> },
    /// A pending job is routed to `queue` with these node labels (the spec's own
    /// replaced): a Kubernetes workload that waited for its LocalQueue, once it exists.
    Route {
        id: JobId,
        queue: Option<String>,
        node_selector: Vec<(String, String)>,
    },
}

/// Why the scheduler asks the executor to stop a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    Cancelled,
    /// An administrator requeued it.
    Requeue,
    /// One of its nodes went down: the rest of the gang must stop too.
    NodeFailure {
        node: NodeId,
    },
}

/// What the scheduler decided; the caller commits and carries out each in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// Launch every task of the job where the allocation says.
    Start { job: JobId, allocation: Allocation },
    /// Signal the victim, then kill it after `grace`; report [`Event::Ended`] when its tasks
    /// are gone. Its resources go to `by`.
    Preempt {
        victim: JobId,
        by: JobId,
        mode: PreemptMode,
        grace: Dur,
    },
    /// Stop every task of the job (after `grace`), then report [`Event::Ended`].
    Stop {
        job: JobId,
        grace: Dur,
        why: StopReason,
    },
    /// The job is planned to start at this time on these nodes (backfill reservation).
    Reserve(Reservation),
}

/// Errors of the scheduler's inputs: what was wrong and with which job or node.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CoreError {
    #[error("job {0} does not exist")]
    UnknownJob(JobId),
    #[error("job {0} already exists")]
    DuplicateJob(JobId),
    #[error("node id {0} does not exist")]
    UnknownNode(u32),
    #[error("job {id} is invalid: {what}")]
    InvalidJob {
        id: JobId,
        /// What kind of refusal, for callers that answer in words of their own (an API's
        /// reasons, Slurm's messages).
        refusal: Refusal,
        what: String,
    },
    #[error("job {id} is {state}; {what}")]
    WrongState {
        id: JobId,
        state: JobState,
        what: &'static str,
    },
    #[error(transparent)]
    Transition(#[from] IllegalTransition),
    #[error("job {id} has no tasks on node {node}")]
    NotOnNode { id: JobId, node: String },
    #[error("job {id}'s allocation cannot be booked: {source}")]
    Booking {
        id: JobId,
        #[source]
        source: BookingError,
    },
    #[error("the quota configuration is invalid: {what}")]
    InvalidQuotas { what: String },
    #[error("the priority classes are invalid: {what}")]
    InvalidPriorityClasses { what: String },
}

/// Why a job is refused: the kinds a caller may tell apart (each refusal's text says the
/// rest). `subject` names what the refusal is about where there is one thing (the
/// partition's name, the job depended on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The spec itself is wrong (counts, sizes, times, fields that contradict each other).
    Spec,
    UnknownPartition {
        subject: String,
    },
    NoDefaultPartition,
    UnknownQos {
        subject: String,
    },
    UnknownPriorityClass {
        subject: String,
    },
    DependencyNotFound {
        subject: String,
    },
    /// The user may not charge the account (no association).
    NoAssociation,
    /// The cluster or policy cannot take it (a configuration, usage or allocation that
    /// does not fit).
    Policy,
}

/// The queue a spec names in `book`, and whether it names one `book` does not have.
fn queue_of(book: &QuotaBook, spec: &JobSpec) -> (Option<QueueIx>, bool) {
    match &spec.queue {
        Some(name) => match book.queue_ix(name) {
            Some(q) => (Some(q), false),
            None => (None, true),
        },
        None => (None, false),
    }
}

/// How a start books its allocation on the cluster.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Booking {
    /// Placed by the pass on what is free now: every node must be up.
    Placed,
    /// Already held by a job found running after a restart: on nodes in any state.
    Adopted,
}

/// How a job is held.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Hold {
    User,
    Admin,
}

/// What placement looks at in a job: jobs with equal keys place alike.
///
/// Within one pass resources are only taken, never freed (starts book; preempted jobs keep
/// theirs until they end), and holds are only added. So a shape that could not be placed
/// cannot be placed later in the same pass, and a shape whose placement took what a hold
/// counts on by some end time does so for any later end time too. The pass remembers both
/// and skips placement for later jobs of the same shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct ShapeKey {
    partition: PartitionId,
    groups: Vec<TaskGroup>,
    topology: TopologyReq,
    exclusive: bool,
    one_task_per_node: bool,
    features: Vec<String>,
    node_selector: Vec<(String, String)>,
}

impl ShapeKey {
    fn of(partition: PartitionId, s: &JobSpec) -> ShapeKey {
        ShapeKey {
            partition,
            groups: s.groups.clone(),
            topology: s.topology,
            exclusive: s.exclusive,
            one_task_per_node: s.one_task_per_node,
            features: s.features.clone(),
            node_selector: s.node_selector.clone(),
        }
    }
}

/// A job as the scheduler keeps it.
#[derive(Clone, Debug)]
pub struct Job {
    pub id: JobId,
    pub spec: JobSpec,
    pub state: JobState,
    pub partition: PartitionId,
    /// The job's placement shape (what placement reads of its spec and partition),
    /// interned: jobs of one shape place alike.
    pub shape: u32,
    pub assoc: AssocIx,
    /// The queue the job names (its account's queue applies otherwise; see [`QuotaBook`]).
    pub queue: Option<QueueIx>,
    /// The job names a queue the quota configuration no longer has (it was replaced since
    /// the job was submitted): pending, it waits with [`PendingReason::InvalidQueue`];
    /// active, it counts as a job naming no queue.
    pub queue_missing: bool,
    /// Value of the job's priority class (0 without one).
    pub class_value: i32,
    /// Whether the job's priority class may preempt.
    pub class_preempting: bool,
    /// The gang's amounts at full size and at its minimum size (elastic gangs).
    pub want: Amounts,
    pub min_want: Amounts,
    /// The QOS factor of multifactor priority, in [0, 1].
    pub qos_factor: f64,
    pub reason: PendingReason,
    /// Multifactor priority when the job last left the queue: while it is pending, the pass
    /// keeps its priority elsewhere; read it with [`Scheduler::priority`].
    priority: u64,
    /// When the job first became eligible in its current pending period (age counts from here).
    pub eligible_since: Option<Time>,
    /// When the last pass found it starving and put it first in its partition (see
    /// `starvation_wait` in the policy, and `drain_longest_first` for the job a quiet
    /// partition's backlog waits on): when it became eligible. `None` otherwise.
    pub starving_since: Option<Time>,
    pub hold: Option<Hold>,
    pub start_time: Option<Time>,
    /// Start plus time limit: when the job must end at the latest.
    pub end_time: Option<Time>,
    pub allocation: Option<Allocation>,
    /// Amounts held per node (whole nodes for exclusive jobs), in node order.
    pub per_node: Vec<(NodeId, Amounts)>,
    /// Billing units per second while running.
    pub billing_rate: f64,
    pub requeues: u32,
    /// Why the job was asked to stop, while it stops.
    pub stopping: Option<Stopping>,
    /// Jobs preempted for this one that have not ended yet.
    pub awaiting_victims: BTreeSet<JobId>,
    /// The job this one was preempted for, until it ends (whatever it ends as: a cancel
    /// overrides the preemption in `stopping`, and the preemptor must still learn of it).
    pub preempted_by: Option<JobId>,
    /// What the victims of the last preemption for this job held, per node: kept for it
    /// while they stop, including what those that already ended have freed.
    pub victims_held: Vec<(NodeId, Amounts)>,
    /// Whether the job has ever started (for `after` dependencies).
    pub ever_started: bool,
}

/// What [`Scheduler::admission`] resolves of a submission.
struct Admission {
    partition: PartitionId,
    qos_factor: f64,
    class_value: i32,
    class_preempting: bool,
    queue: Option<QueueIx>,
    queue_missing: bool,
}

/// Why an active job is stopping, which decides where it goes when it ends.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Stopping {
    Cancelled,
    Requeue,
    Preempted { by: JobId, mode: PreemptMode },
    NodeFailure,
}

/// The jobs not yet ended, by id, each in a box of its own.
///
/// A job is about 750 bytes. Held in the tree's nodes, every job that ends shifted the
/// jobs after it in its node (up to ten of them), and the nodes, mostly jobs, spread a
/// lookup's path over a hundred megabytes of a deep queue. Boxed, a node holds only
/// pointers: the tree is a few megabytes that stay in the caches, and a lookup reaches
/// the job itself once.
pub(super) type JobTable = BTreeMap<JobId, Box<Job>>;

/// A set of job ids looked up by hash: the pending jobs and the active ones, which every
/// start and end changes (as B-trees, a start's remove and insert were 6% of a pass's time
/// at 12,500 nodes). What reads them in id order sorts them, or sweeps the job table. Job
/// ids are the scheduler's own, not names users choose, so a fixed seed keeps runs alike.
pub(super) type IdSet = hashbrown::HashSet<JobId, foldhash::fast::FixedState>;

/// The ids of `set` in id order, for what depends on the order: which running jobs come out
/// over a quota replaced, the least id at fault, the pending rows made again.
fn in_id_order(set: &IdSet) -> Vec<JobId> {
    let mut ids: Vec<JobId> = set.iter().copied().collect();
    ids.sort_unstable();
    ids
}

/// The scheduler's whole state.
#[derive(Clone, Debug)]
pub struct Scheduler {
    cluster: Cluster,
    policy: Policy,
    /// Priority classes added at run time, after the policy's.
    runtime_classes: Vec<PriorityClassConfig>,
    jobs: JobTable,
    /// Final states of jobs that have ended, for dependencies.
    ended: BTreeMap<JobId, JobState>,
    pending: IdSet,
    /// What a pass reads of each pending job, kept in step with the job table.
    queue: PendingTable,
    /// The order of the eligible pending jobs, kept between passes under strict order.
    kept: KeptOrder,
    active: IdSet,
    fairshare: FairShareTree,
    fairshare_factors: FairShareFactors,
    /// Counts the computations of `fairshare_factors` (wrapping): a priority computed with
    /// the factors of the same count read the same fair-share factor.
    fairshare_count: u32,
    /// When factors were last computed; `None` forces a recomputation.
    fairshare_computed: Option<Time>,
    quota: QuotaBook,
    /// Active jobs counted in their quotas above a limit: adopted after a restart under a
    /// policy that would not start them now. While any is active, quota limits are not an
    /// invariant (the counts still are).
    over_quota: BTreeSet<JobId>,
    /// The ranks of the running preemptible jobs, for the pass's [`preempt::VictimSummary`].
    running_ranks: preempt::RunningRanks,
    /// What the active jobs release on each node by their time limits, for the pass's
    /// backfill profile.
    releases: NodeReleases,
    /// Active jobs asked to stop (which the profile expects to end sooner).
    stopping: BTreeSet<JobId>,
    /// Running jobs per user and name, for `singleton` dependencies: counted from the first
    /// time a job with one enters the table (see [`Scheduler::count_singletons_for`]).
    singletons: Option<Singletons>,
    /// Usage rates of the associations with running jobs, charged lazily.
    usage: UsageRates,
    /// What is free now, per partition, kept up to date as jobs start and end.
    free: FreeSummary,
    /// The nodes by what placement sees of them, kept up to date with `free`.
    classes: NodeClasses,
    /// What the classes offer jobs placed on one node, remembered within a pass.
    class_fits: ClassFits,
    /// What would be free were every up node idle; rebuilt after node state changes.
    idle_free: Option<FreeSummary>,
    /// The running jobs' remaining work by time limits, per partition.
    running_work: backlog::RunningWork,
    /// Per partition, whether and why the last pass found that its job-size factor
    /// favours larger jobs (its backlog within the policy's `largest_first_within`, or too
    /// little small work left to fill the gaps, `largest_first_gaps_percent`).
    largest_first: Vec<Option<backlog::LargestFirst>>,
    /// The last pass changed a partition's `largest_first`: every priority it remembered
    /// was computed with another job-size factor.
    largest_first_moved: bool,
    /// Shapes known never to fit the up nodes, and shapes already checked, since the nodes
    /// last changed state.
    never_fits: HashMap<u32, PlacementFailure>,
    checked_shapes: BTreeSet<u32>,
    /// Whether the first job of the last pass's order (the highest-priority eligible job,
    /// or a starving one the policy's `starvation_wait` put first) waited for resources.
    head_blocked: bool,
    /// The task sizes submitted, for the fragmentation preference of placement.
    workload: WorkloadProfile,
    /// Interned placement shapes of the jobs submitted.
    shapes: HashMap<ShapeKey, u32>,
    /// Per interned shape, what may fit reads of its jobs.
    shape_needs: Vec<free::Need>,
    last_decay: Option<Time>,
    reservations: Vec<Reservation>,
    max_partition_factor: u32,
    max_qos_priority: u32,
    /// Whether any queue or account limit is configured (otherwise quota checks are skipped).
    quota_enforced: bool,
    size_scale: SizeScale,
    /// Decide without the shortcuts that only save work (placement scanning every node of
    /// the partition and scoring each afresh, the victim summary, the backfill profile
    /// gathered from the running jobs, the backlog's work added up from the jobs instead of
    /// read from the sums kept as they come and go): the straightforward scheduler the
    /// tests compare the fast one with.
    reference: bool,
    /// The work submitted to each partition, averaged over a day (for
    /// `drain_longest_first`).
    arrivals: tail::Arrivals,
}

/// The GPU thousandths a running job holds, over its nodes.
fn held_gpu_milli(per_node: &[(NodeId, Amounts)]) -> u64 {
    per_node.iter().map(|(_, a)| a.gpu_milli).sum()
}

/// Whether a scheduler under `policy` keeps the order of the eligible jobs between passes
/// ([`KeptOrder`]; the reference scheduler does not): not when fair-share or expansion is
/// weighed, which move every job's priority at once (expansion at every pass, fair-share
/// whenever its factors are computed again, once a calc period), while the kept order
/// looks at a job again only when the job's own time comes.
fn keeps_order(policy: &Policy) -> bool {
    let w = &policy.priority;
    policy.strict_order && w.fairshare == 0 && w.expansion == 0
}

impl Scheduler {
    /// A scheduler for this cluster and policy, with no jobs.
    pub fn new(cluster: Cluster, policy: Policy) -> Result<Scheduler, CoreError> {
        let mut fairshare = FairShareTree::new();
        let invalid = |what: String| CoreError::InvalidJob {
            id: JobId(0),
            refusal: Refusal::Policy,
            what,
        };
        // Parents first: accounts may be listed in any order.
        let mut remaining: Vec<&crate::policy::AccountConfig> = policy.account.iter().collect();
        while !remaining.is_empty() {
            let before = remaining.len();
            let mut i = 0;
            while i < remaining.len() {
                let a = remaining[i];
                let parent = a.parent.as_deref().unwrap_or("root");
                if fairshare.account(parent).is_some() {
                    fairshare
                        .add_account(&a.name, parent, a.shares)
                        .map_err(|e| invalid(format!("policy account `{}`: {e}", a.name)))?;
                    for (user, shares) in &a.users {
                        fairshare
                            .add_user(user, &a.name, Shares::Raw(*shares))
                            .map_err(|e| invalid(format!("policy account `{}`: {e}", a.name)))?;
                    }
                    remaining.remove(i);
                } else {
                    i += 1;
                }
            }
            if remaining.len() == before {
                let a = remaining[0];
                return Err(invalid(format!(
                    "policy account `{}` has parent `{}`, which is not defined",
                    a.name,
                    a.parent.as_deref().unwrap_or("root")
                )));
            }
        }
        let quota =
            QuotaBook::new(&policy.quotas).map_err(|e| invalid(format!("policy quotas: {e}")))?;
        let max_partition_factor = cluster
            .partitions
            .iter()
            .map(|p| p.priority_job_factor)
            .max()
            .unwrap_or(1)
            .max(1);
        let max_qos_priority = policy.qos.iter().map(|q| q.priority).max().unwrap_or(0);
        let quota_enforced = policy.quotas.limits_anything();
        let cluster_gpus = cluster.total_gpus();
        let cluster_cpus = cluster
            .nodes
            .iter()
            .map(|n| u64::from(cluster.shapes[n.shape.0 as usize].cores))
            .sum();
        let size_scale = SizeScale::new(cluster_gpus, cluster_cpus, policy.priority.max_age);
        let free = FreeSummary::new(&cluster);
        let classes = NodeClasses::new(&cluster);
        let releases = NodeReleases::new(cluster.nodes.len());
        let mut queue = PendingTable::default();
        if keeps_order(&policy) {
            queue.keep_changes();
        }
        Ok(Scheduler {
            cluster,
            policy,
            jobs: BTreeMap::new(),
            ended: BTreeMap::new(),
            pending: IdSet::default(),
            queue,
            kept: KeptOrder::default(),
            active: IdSet::default(),
            fairshare,
            fairshare_factors: FairShareFactors::default(),
            fairshare_count: 0,
            fairshare_computed: None,
            quota,
            runtime_classes: Vec::new(),
            over_quota: BTreeSet::new(),
            running_ranks: Default::default(),
            releases,
            stopping: BTreeSet::new(),
            singletons: None,
            shapes: HashMap::new(),
            shape_needs: Vec::new(),
            usage: UsageRates::default(),
            workload: WorkloadProfile::default(),
            free,
            classes,
            class_fits: ClassFits::default(),
            idle_free: None,
            running_work: backlog::RunningWork::default(),
            largest_first: Vec::new(),
            largest_first_moved: false,
            never_fits: HashMap::new(),
            checked_shapes: BTreeSet::new(),
            head_blocked: false,
            last_decay: None,
            reservations: Vec::new(),
            max_partition_factor,
            max_qos_priority,
            quota_enforced,
            size_scale,
            reference: false,
            arrivals: tail::Arrivals::default(),
        })
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id).map(Box::as_ref)
    }

    /// Whether and why the last pass found that partition `p`'s job-size factor favours
    /// larger jobs (`largest_first_within`, `largest_first_gaps_percent`).
    fn largest_first_in(&self, p: PartitionId) -> Option<backlog::LargestFirst> {
        self.largest_first.get(usize::from(p.0)).copied().flatten()
    }

    /// A job's multifactor priority: a pending job's as the last pass computed it (0 before
    /// its first pass), an active job's as it was when it started.
    pub fn priority(&self, job: &Job) -> u64 {
        match self.queue.row(job.id) {
            Some(row) if job.state == JobState::Pending => row.priority,
            _ => job.priority,
        }
    }

    /// Jobs not yet ended, in id order.
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values().map(Box::as_ref)
    }

    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    pub fn active_count(&self) -> usize {
        self.active.len()
    }

    /// The final state of an ended job.
    pub fn ended_state(&self, id: JobId) -> Option<JobState> {
        self.ended.get(&id).copied()
    }

    /// Whether the first job of the last pass's order waited for resources (see the field).
    pub fn head_blocked(&self) -> bool {
        self.head_blocked
    }

    /// Reservations made by the last pass.
    pub fn reservations(&self) -> &[Reservation] {
        &self.reservations
    }

    pub fn fairshare(&self) -> &FairShareTree {
        &self.fairshare
    }

    pub fn quota(&self) -> &QuotaBook {
        &self.quota
    }

    /// Whether an active job is counted above a quota limit (it was adopted, or the quotas
    /// were lowered, while it ran): its queue admits nothing new while it is.
    pub fn is_over_quota(&self, id: JobId) -> bool {
        self.over_quota.contains(&id)
    }

    /// Applies one event. Decisions that follow from it directly (stopping the tasks of a
    /// cancelled job, of the gangs on a node that went down, of a job whose tasks were lost
    /// or that was adopted on a node already down) are returned; starting jobs waits for the
    /// next [`Scheduler::schedule`]. A refused event changes nothing.
    pub fn handle(&mut self, event: Event, now: Time) -> Result<Vec<Decision>, CoreError> {
        self.arrivals.watch(now);
        match event {
            Event::Submit { id, spec } => {
                self.submit(id, *spec, now)?;
                if let Some(job) = self.jobs.get(&id) {
                    let (g, limit) = (job.want.gpu_milli, job.spec.time_limit);
                    self.arrivals.add(job.partition, g, limit, now);
                }
                Ok(Vec::new())
            }
            Event::RestorePending {
                id,
                spec,
                requeues,
                hold,
            } => {
                self.submit(id, *spec, now)?;
                self.queue.touch(id);
                let job = self.jobs.get_mut(&id).ok_or(CoreError::UnknownJob(id))?;
                job.requeues = requeues;
                job.hold = hold;
                if hold.is_some() {
                    job.eligible_since = None;
                } else if requeues == 0 && job.eligible_since.is_some() {
                    // Its age counts from when it became eligible, not from the restart: its
                    // submission, or its begin time (a requeued job's counts from the
                    // restore: when it went back to the queue is not kept).
                    let since = job
                        .spec
                        .begin
                        .map_or(job.spec.submit_time, |b| b.max(job.spec.submit_time));
                    job.eligible_since = Some(since.min(now));
                }
                Ok(Vec::new())
            }
            Event::Adopt {
                id,
                spec,
                allocation,
                start_time,
                requeues,
            } => self.adopt(id, *spec, allocation, start_time, requeues, now),
            Event::RestoreEnded { id, state } => self.restore_ended(id, state).map(|()| Vec::new()),
            Event::Lost { id, node } => self.lost(id, node),
            Event::Cancel { id } => self.cancel(id),
            Event::Hold { id, admin } => {
                let job = self.pending_job_mut(id, "only pending jobs can be held")?;
                job.hold = Some(if admin { Hold::Admin } else { Hold::User });
                job.eligible_since = None;
                Ok(Vec::new())
            }
            Event::Release { id } => {
                let job = self.pending_job_mut(id, "only pending jobs can be released")?;
                job.hold = None;
                Ok(Vec::new())
            }
            Event::Requeue { id } => self.request_stop(id, Stopping::Requeue, StopReason::Requeue),
            Event::Ended { id, outcome } => {
                // How much of its limit a job that ended by itself ran (not one stopped
                // for a preemption, a requeue or a node).
                let ran = self.jobs.get(&id).and_then(|job| match job.stopping {
                    None => Some((
                        job.want.gpu_milli,
                        now.since(job.start_time?),
                        job.spec.time_limit,
                    )),
                    Some(_) => None,
                });
                self.ended(id, outcome, now)?;
                if let Some((g, ran, limit)) = ran {
                    self.arrivals.ran(g, ran, limit);
                }
                Ok(Vec::new())
            }
            Event::LaunchFailed { id, .. } => {
                self.finish_active(id, now, Lifecycle::Requeue)?;
                Ok(Vec::new())
            }
            Event::NodeAvail {
                node,
                avail,
                reason,
            } => self.node_avail(node, avail, reason),
            Event::SetNodeFeatures { node, features } => {
                self.node_mut(node)?.features = features;
                self.classes.refresh_static(&self.cluster, node);
                self.forget_fits();
                Ok(Vec::new())
            }
            Event::SetTimeLimit { id, limit } => {
                let job = self.jobs.get_mut(&id).ok_or(CoreError::UnknownJob(id))?;
                if job.state == JobState::Pending {
                    self.queue.touch(id);
                }
                job.spec.time_limit = limit;
                if let Some(start) = job.start_time {
                    let was = job.limit_end();
                    let end = end_of(start, limit);
                    job.end_time = Some(end);
                    self.releases.remove(id, was, &job.per_node);
                    self.releases.add(id, end, &job.per_node);
                    let gpus = held_gpu_milli(&job.per_node);
                    self.running_work.count(job.partition, gpus, was, false);
                    self.running_work.count(job.partition, gpus, end, true);
                }
                Ok(Vec::new())
            }
            Event::SetNice { id, nice } => {
                self.pending_job_mut(id, "only a pending job's nice value can change")?
                    .spec
                    .nice = nice;
                Ok(Vec::new())
            }
            Event::SetQuotas { quotas } => self.set_quotas(*quotas).map(|()| Vec::new()),
            Event::SetPriorityClasses { classes } => {
                self.validate_priority_classes(&classes)?;
                self.runtime_classes = classes;
                Ok(Vec::new())
            }
            Event::Route {
                id,
                queue,
                node_selector,
            } => {
                let job = self.pending_job_mut(id, "only a pending job can be routed")?;
                let (mut spec, partition) = (job.spec.clone(), job.partition);
                spec.queue = queue;
                spec.node_selector = node_selector;
                validate_spec(&spec).map_err(|what| CoreError::InvalidJob {
                    id,
                    refusal: Refusal::Spec,
                    what,
                })?;
                let (queue, queue_missing) = queue_of(&self.quota, &spec);
                let shape = self.intern_shape(partition, &spec);
                let job = self.jobs.get_mut(&id).ok_or(CoreError::UnknownJob(id))?;
                (job.spec, job.queue, job.queue_missing, job.shape) =
                    (spec, queue, queue_missing, shape);
                Ok(Vec::new())
            }
        }
    }

    fn pending_job_mut(&mut self, id: JobId, what: &'static str) -> Result<&mut Job, CoreError> {
        let job = self.jobs.get_mut(&id).ok_or(CoreError::UnknownJob(id))?;
        if job.state != JobState::Pending {
            return Err(CoreError::WrongState {
                id,
                state: job.state,
                what,
            });
        }
        self.queue.touch(id);
        Ok(job)
    }

    /// Whether a job with this spec would be accepted by [`Event::Submit`] now: what the
    /// controller asks before it commits a submission, so that it never acknowledges a job
    /// the scheduler would then refuse. `id` only names the job in the error.
    pub fn validate(&self, id: JobId, spec: &JobSpec) -> Result<(), CoreError> {
        self.admission(id, spec)?;
        if self.fairshare.assoc(&spec.user, &spec.account).is_none()
            && !self.policy.auto_associations
        {
            return Err(CoreError::InvalidJob {
                id,
                refusal: Refusal::NoAssociation,
                what: format!(
                    "user `{}` has no association with account `{}`",
                    spec.user, spec.account
                ),
            });
        }
        Ok(())
    }

    /// The checks of a submission that read but do not change the scheduler, and what they
    /// resolve: the partition, QOS factor, priority class and queue. A job naming a queue
    /// that does not exist is taken, marked `queue_missing`: it waits for the queue (a new
    /// one applied before its queue, or one whose queue was deleted).
    fn admission(&self, id: JobId, spec: &JobSpec) -> Result<Admission, CoreError> {
        if self.jobs.contains_key(&id) || self.ended.contains_key(&id) {
            return Err(CoreError::DuplicateJob(id));
        }
        let refused = |refusal: Refusal, what: String| CoreError::InvalidJob { id, refusal, what };
        validate_spec(spec).map_err(|what| refused(Refusal::Spec, what))?;
        let partition = match &spec.partition {
            Some(name) => self.cluster.partition_id(name).ok_or_else(|| {
                refused(
                    Refusal::UnknownPartition {
                        subject: name.clone(),
                    },
                    format!("partition `{name}` does not exist"),
                )
            })?,
            None => self.cluster.default_partition().ok_or_else(|| {
                refused(
                    Refusal::NoDefaultPartition,
                    "no partition given and the cluster has no default partition".into(),
                )
            })?,
        };
        let qos_factor = match &spec.qos {
            Some(name) => {
                let qos = self.policy.qos(name).ok_or_else(|| {
                    refused(
                        Refusal::UnknownQos {
                            subject: name.clone(),
                        },
                        format!("qos `{name}` does not exist"),
                    )
                })?;
                if self.max_qos_priority == 0 {
                    0.0
                } else {
                    f64::from(qos.priority) / f64::from(self.max_qos_priority)
                }
            }
            None => 0.0,
        };
        let (class_value, class_preempting) = match &spec.priority_class {
            Some(name) => {
                let class = self.priority_class(name).ok_or_else(|| {
                    refused(
                        Refusal::UnknownPriorityClass {
                            subject: name.clone(),
                        },
                        format!("priority class `{name}` does not exist"),
                    )
                })?;
                (class.value, class.preempting)
            }
            None => (0, false),
        };
        for dep in &spec.dependencies {
            if let crate::job::Dependency::On { job, .. } = dep {
                if !self.jobs.contains_key(job) && !self.ended.contains_key(job) {
                    return Err(refused(
                        Refusal::DependencyNotFound {
                            subject: job.to_string(),
                        },
                        format!("dependency on job {job}, which does not exist"),
                    ));
                }
            }
        }
        // A job naming a queue that does not exist (yet) is taken and waits for it, as
        // Kubernetes takes objects in any order.
        let (queue, queue_missing) = queue_of(&self.quota, spec);
        Ok(Admission {
            partition,
            qos_factor,
            class_value,
            class_preempting,
            queue,
            queue_missing,
        })
    }

    fn submit(&mut self, id: JobId, spec: JobSpec, now: Time) -> Result<(), CoreError> {
        let job = self.prepare(id, spec, now)?;
        self.count_singletons_for(&job.spec);
        self.record_workload(&job.spec);
        self.queue.insert(id, &job);
        self.jobs.insert(id, Box::new(job));
        self.pending.insert(id);
        Ok(())
    }

    /// Starts counting the running jobs per user and name, from the active jobs, when the
    /// first job with a `singleton` dependency enters the table. Until then nothing asks,
    /// and counting every start and end would hash and copy names for nothing (it was 4%
    /// of a pass's time at 12,500 nodes).
    fn count_singletons_for(&mut self, spec: &JobSpec) {
        if self.singletons.is_some() || !spec.singleton() {
            return;
        }
        self.singletons = Some(self.singletons_counted());
    }

    /// The running jobs per user and name, counted from the active jobs.
    fn singletons_counted(&self) -> Singletons {
        let mut counted = Singletons::default();
        for id in &self.active {
            let spec = &self.jobs[id].spec;
            counted.add(&spec.user, &spec.name);
        }
        counted
    }

    /// The task sizes of a job joining the workload profile (fragmentation placement).
    fn record_workload(&mut self, spec: &JobSpec) {
        for g in &spec.groups {
            self.workload.record(&g.per_task, g.count);
        }
        if self.workload.total_weight() > WORKLOAD_MEMORY {
            self.workload.halve();
        }
    }

    /// The interned number of the shape of a job of `spec` in `partition`.
    fn intern_shape(&mut self, partition: PartitionId, spec: &JobSpec) -> u32 {
        let next = self.shapes.len() as u32;
        let shape = *self
            .shapes
            .entry(ShapeKey::of(partition, spec))
            .or_insert(next);
        if shape == next {
            self.shape_needs.push(free::Need::of(spec));
        }
        shape
    }

    /// Checks a new job against the cluster and policy and builds it, pending. Nothing
    /// changes on error; on success only its association may have been created (with
    /// `auto_associations`) and its shape interned.
    fn prepare(&mut self, id: JobId, spec: JobSpec, now: Time) -> Result<Job, CoreError> {
        let Admission {
            partition,
            qos_factor,
            class_value,
            class_preempting,
            queue,
            queue_missing,
        } = self.admission(id, &spec)?;
        let invalid = |what: String| CoreError::InvalidJob {
            id,
            refusal: Refusal::Spec,
            what,
        };
        // Last, as the only change a refused job could leave behind.
        let assoc = match self.fairshare.assoc(&spec.user, &spec.account) {
            Some(a) => a,
            None if self.policy.auto_associations => {
                let assoc = self
                    .fairshare
                    .ensure_assoc(&spec.user, &spec.account)
                    .map_err(|e| invalid(e.to_string()))?;
                self.fairshare_computed = None;
                assoc
            }
            None => {
                return Err(CoreError::InvalidJob {
                    id,
                    refusal: Refusal::NoAssociation,
                    what: format!(
                        "user `{}` has no association with account `{}`",
                        spec.user, spec.account
                    ),
                });
            }
        };
        let hold = spec.hold.then_some(Hold::User);
        // Age counts from eligibility: from submission for a job nothing holds back.
        let eligible_since =
            (hold.is_none() && spec.begin.is_none_or(|b| b <= now) && spec.dependencies.is_empty())
                .then_some(now);
        let (want, min_want) = (spec.amounts(), spec.min_amounts());
        let shape = self.intern_shape(partition, &spec);
        Ok(Job {
            id,
            spec,
            state: JobState::Pending,
            partition,
            shape,
            want,
            min_want,
            assoc,
            queue,
            queue_missing,
            class_value,
            class_preempting,
            qos_factor,
            reason: PendingReason::None,
            priority: 0,
            eligible_since,
            starving_since: None,
            hold,
            start_time: None,
            end_time: None,
            allocation: None,
            per_node: Vec::new(),
            billing_rate: 0.0,
            requeues: 0,
            stopping: None,
            awaiting_victims: BTreeSet::new(),
            victims_held: Vec::new(),
            preempted_by: None,
            ever_started: false,
        })
    }

    /// Adopts a job found active after a restart, holding `alloc` since `start_time` (see
    /// "Crash recovery" in the module doc). Checked whole before anything changes: the
    /// spec, that the allocation is a gang of it on nodes that exist, and that nothing
    /// else holds what it names.
    fn adopt(
        &mut self,
        id: JobId,
        spec: JobSpec,
        alloc: Allocation,
        start_time: Time,
        requeues: u32,
        now: Time,
    ) -> Result<Vec<Decision>, CoreError> {
        if self.jobs.contains_key(&id) || self.ended.contains_key(&id) {
            return Err(CoreError::DuplicateJob(id));
        }
        let invalid = |what: String| CoreError::InvalidJob {
            id,
            refusal: Refusal::Spec,
            what,
        };
        validate_spec(&spec).map_err(invalid)?;
        let nodes = self.cluster.nodes.len();
        if let Some(t) = alloc.tasks.iter().find(|t| t.node.0 as usize >= nodes) {
            return Err(CoreError::UnknownNode(t.node.0));
        }
        check_gang(id, &spec, &alloc, &self.cluster)
            .map_err(|what| invalid(format!("its allocation does not match its spec: {what}")))?;
        // Booking all or nothing, tried before preparing the job (which may create its
        // association): a refused adoption changes nothing.
        self.cluster
            .restore(id, &alloc)
            .map_err(|source| CoreError::Booking { id, source })?;
        self.cluster.release(id, &alloc);
        let mut job = self.prepare(id, spec, now)?;
        job.requeues = requeues;
        job.hold = None;
        job.eligible_since = None;
        self.count_singletons_for(&job.spec);
        self.jobs.insert(id, Box::new(job));
        self.pending.insert(id);
        self.queue.touch(id);
        let per_node = pass::per_node_amounts(&self.cluster, &alloc);
        let nodes = alloc.nodes();
        if let Err(e) = self.apply_start(id, alloc, per_node, start_time, now, Booking::Adopted) {
            self.jobs.remove(&id);
            self.pending.remove(&id);
            return Err(e);
        }
        if let Some(job) = self.jobs.get(&id) {
            let spec = job.spec.clone();
            self.record_workload(&spec);
        }
        // Its tasks on a node already down have failed: stopped as the Down event did for
        // the jobs it found there.
        let down = nodes
            .into_iter()
            .find(|&n| self.cluster.node(n).avail == NodeAvail::Down);
        Ok(down
            .and_then(|n| self.node_failure(id, n))
            .into_iter()
            .collect())
    }

    /// The priority class `name`: the policy file's, else one added at run time.
    pub fn priority_class(&self, name: &str) -> Option<&PriorityClassConfig> {
        self.policy
            .priority_class(name)
            .or_else(|| self.runtime_classes.iter().find(|c| c.name == name))
    }

    /// Whether [`Event::SetPriorityClasses`] would take these classes.
    pub fn validate_priority_classes(
        &self,
        classes: &[PriorityClassConfig],
    ) -> Result<(), CoreError> {
        let invalid = |what: String| CoreError::InvalidPriorityClasses { what };
        let mut seen = BTreeSet::new();
        for c in classes {
            if !seen.insert(c.name.as_str()) {
                return Err(invalid(format!(
                    "priority class `{}` is given twice",
                    c.name
                )));
            }
            if self.policy.priority_class(&c.name).is_some() {
                return Err(invalid(format!(
                    "priority class `{}` is defined in the policy file",
                    c.name
                )));
            }
        }
        let used = self.jobs.values().find_map(|j| {
            let name = j.spec.priority_class.as_deref()?;
            (self.policy.priority_class(name).is_none() && !seen.contains(name))
                .then_some((j.id, name))
        });
        match used {
            Some((id, name)) => Err(invalid(format!(
                "priority class `{name}` is in use by job {id}, which has not ended"
            ))),
            None => Ok(()),
        }
    }

    /// Whether [`Event::SetQuotas`] would take this configuration: what the controller
    /// asks before it commits the queue objects that make it.
    pub fn validate_quotas(&self, quotas: &QuotaConfig) -> Result<(), CoreError> {
        QuotaBook::new(quotas)
            .map(|_| ())
            .map_err(|e| CoreError::InvalidQuotas {
                what: e.to_string(),
            })
    }

    /// Replaces the quota configuration (see "Replacing the quotas" in the module doc):
    /// a new book, every active job counted in it, in id order, whatever its limits say;
    /// every job's queue looked up again by name. All or nothing.
    fn set_quotas(&mut self, quotas: QuotaConfig) -> Result<(), CoreError> {
        let invalid = |what: String| CoreError::InvalidQuotas { what };
        let mut book = QuotaBook::new(&quotas).map_err(|e| invalid(e.to_string()))?;
        let mut over = BTreeSet::new();
        for id in &in_id_order(&self.active) {
            let job = self.jobs.get(id).ok_or(CoreError::UnknownJob(*id))?;
            let (queue, _) = queue_of(&book, &job.spec);
            let counted = book.restore_in(
                queue,
                &job.spec.account,
                &job.spec.user,
                job.spec.namespace.as_deref(),
                job.spec_amounts_held(),
            );
            match counted {
                Ok(None) => {}
                Ok(Some(_)) => {
                    over.insert(*id);
                }
                Err(block) => {
                    return Err(invalid(format!(
                        "running job {id} cannot be counted: {block}"
                    )));
                }
            }
        }
        for job in self.jobs.values_mut() {
            (job.queue, job.queue_missing) = queue_of(&book, &job.spec);
        }
        self.queue.touch_all();
        self.quota_enforced = quotas.limits_anything();
        self.quota = book;
        self.over_quota = over;
        self.policy.quotas = quotas;
        Ok(())
    }

    /// What a pending job's reason means in its case, when the reason name alone does not
    /// say: the limit a quota reason stands for and by how much, as the quotas are now;
    /// the queue a job waiting with [`PendingReason::InvalidQueue`] names; why a job that
    /// can never run as asked does not fit (when the pass found so for its shape).
    pub fn reason_detail(&self, id: JobId) -> Option<String> {
        let job = self.jobs.get(&id)?;
        if job.state != JobState::Pending {
            return None;
        }
        match &job.reason {
            PendingReason::InvalidQueue => Some(format!(
                "queue `{}` does not exist; the job waits until a queue of that name is applied",
                job.spec.queue.as_deref().unwrap_or_default()
            )),
            PendingReason::Limit(_) => self
                .quota
                .check_in(
                    job.queue,
                    &job.spec.account,
                    &job.spec.user,
                    job.spec.namespace.as_deref(),
                    job.min_want,
                )
                .err()
                .map(|block| block.to_string()),
            PendingReason::BadConstraints => match self.never_fits.get(&job.shape) {
                Some(fail) => Some(fail.to_string()),
                None => self
                    .place(&job.spec, &self.cluster.partition(job.partition).nodes)
                    .err()
                    .filter(PlacementFailure::is_permanent)
                    .map(|fail| fail.to_string()),
            },
            _ => None,
        }
    }

    /// Records the final state of a job that ended before a restart.
    fn restore_ended(&mut self, id: JobId, state: JobState) -> Result<(), CoreError> {
        if self.jobs.contains_key(&id) || self.ended.contains_key(&id) {
            return Err(CoreError::DuplicateJob(id));
        }
        if !state.is_final() {
            return Err(CoreError::InvalidJob {
                id,
                refusal: Refusal::Spec,
                what: format!("{state} is not a final state"),
            });
        }
        self.ended.insert(id, state);
        Ok(())
    }

    /// Part of an active job's tasks vanished on `node`: a node failure for that job alone.
    fn lost(&mut self, id: JobId, node: NodeId) -> Result<Vec<Decision>, CoreError> {
        let job = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        if !job.state.is_active() {
            return Err(CoreError::WrongState {
                id,
                state: job.state,
                what: "only an active job's tasks can be lost",
            });
        }
        let name = &self
            .cluster
            .nodes
            .get(node.0 as usize)
            .ok_or(CoreError::UnknownNode(node.0))?
            .name;
        let there = job
            .allocation
            .as_ref()
            .is_some_and(|a| a.tasks.iter().any(|t| t.node == node));
        if !there {
            return Err(CoreError::NotOnNode {
                id,
                node: name.clone(),
            });
        }
        Ok(self.node_failure(id, node).into_iter().collect())
    }

    fn cancel(&mut self, id: JobId) -> Result<Vec<Decision>, CoreError> {
        let job = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        if job.state == JobState::Pending {
            let state = job.state.on(id, Lifecycle::CancelPending)?;
            self.pending.remove(&id);
            self.queue.touch(id);
            self.retire(id, state);
            return Ok(Vec::new());
        }
        self.request_stop(id, Stopping::Cancelled, StopReason::Cancelled)
    }

    fn request_stop(
        &mut self,
        id: JobId,
        why: Stopping,
        reason: StopReason,
    ) -> Result<Vec<Decision>, CoreError> {
        let job = self.jobs.get_mut(&id).ok_or(CoreError::UnknownJob(id))?;
        if !job.state.is_active() {
            return Err(CoreError::WrongState {
                id,
                state: job.state,
                what: "only running jobs can be stopped",
            });
        }
        // A cancel overrides a requeue or preemption in flight; nothing else overrides.
        if job.stopping.is_none() || why == Stopping::Cancelled {
            job.stopping = Some(why);
        }
        self.stopping.insert(id);
        Ok(vec![Decision::Stop {
            job: id,
            grace: Dur(0),
            why: reason,
        }])
    }

    fn ended(&mut self, id: JobId, outcome: JobState, now: Time) -> Result<(), CoreError> {
        let job = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        if !outcome.is_final() {
            return Err(CoreError::InvalidJob {
                id,
                refusal: Refusal::Spec,
                what: format!("{outcome} is not a final state"),
            });
        }
        let requeue_allowed = job.spec.requeue == RequeuePolicy::Requeue;
        let event = match (job.stopping, outcome) {
            (Some(Stopping::Cancelled), _) => Lifecycle::End(JobState::Cancelled),
            // A job that finished its work before a preemption, requeue or node failure
            // could stop it completed: its work is not redone. (A cancel stays a cancel.)
            (_, JobState::Completed) => Lifecycle::End(JobState::Completed),
            (Some(Stopping::Requeue), _) => Lifecycle::Requeue,
            (
                Some(Stopping::Preempted {
                    mode: PreemptMode::Requeue,
                    ..
                }),
                _,
            ) if requeue_allowed => Lifecycle::Requeue,
            (Some(Stopping::Preempted { .. }), _) => Lifecycle::End(JobState::Preempted),
            (Some(Stopping::NodeFailure), _) | (None, JobState::NodeFail) if requeue_allowed => {
                Lifecycle::Requeue
            }
            (Some(Stopping::NodeFailure), _) => Lifecycle::End(JobState::NodeFail),
            (None, outcome) => Lifecycle::End(outcome),
        };
        self.finish_active(id, now, event)
    }

    /// Releases an active job's resources and moves it to its next state.
    fn finish_active(&mut self, id: JobId, now: Time, event: Lifecycle) -> Result<(), CoreError> {
        let job = self.jobs.get_mut(&id).ok_or(CoreError::UnknownJob(id))?;
        let next = job.state.on(id, event)?;
        self.running_ranks.count(&self.cluster, job, false);
        self.usage
            .stop(&mut self.fairshare, job.assoc, job.billing_rate, now);
        let amounts = job.spec_amounts_held();
        let alloc = job.allocation.take().unwrap_or_default();
        self.cluster.release(id, &alloc);
        let nodes = alloc.nodes();
        self.free.refresh(&self.cluster, &nodes);
        self.classes.refresh(&self.cluster, &nodes);
        let released = self.quota.release_in(
            job.queue,
            &job.spec.account,
            &job.spec.user,
            job.spec.namespace.as_deref(),
            amounts,
        );
        debug_assert!(released.is_ok(), "quota release of job {id}: {released:?}");
        if let Some(singletons) = &mut self.singletons {
            singletons.remove(&job.spec.user, &job.spec.name);
        }
        let preemptor = job.preempted_by.take();
        self.releases.remove(id, job.limit_end(), &job.per_node);
        let gpus = held_gpu_milli(&job.per_node);
        self.running_work
            .count(job.partition, gpus, job.limit_end(), false);
        job.per_node.clear();
        job.stopping = None;
        self.stopping.remove(&id);
        job.billing_rate = 0.0;
        self.active.remove(&id);
        self.over_quota.remove(&id);
        if let Some(by) = preemptor.and_then(|by| self.jobs.get_mut(&by)) {
            by.awaiting_victims.remove(&id);
            self.queue.touch(by.id);
        }
        if next == JobState::Pending {
            let job = self.jobs.get_mut(&id).ok_or(CoreError::UnknownJob(id))?;
            job.state = next;
            job.requeues += 1;
            job.reason = PendingReason::None;
            job.eligible_since = None;
            job.start_time = None;
            job.end_time = None;
            self.pending.insert(id);
            self.queue.touch(id);
        } else {
            self.retire(id, next);
        }
        Ok(())
    }

    /// Moves a job to the ended table.
    fn retire(&mut self, id: JobId, state: JobState) {
        self.jobs.remove(&id);
        self.ended.insert(id, state);
    }

    fn node_mut(&mut self, node: NodeId) -> Result<&mut crate::cluster::Node, CoreError> {
        self.cluster
            .nodes
            .get_mut(node.0 as usize)
            .ok_or(CoreError::UnknownNode(node.0))
    }

    /// Forgets which job shapes never fit and which were checked: the nodes changed, so
    /// what never fit may fit now, and what fit may not.
    fn forget_fits(&mut self) {
        self.never_fits.clear();
        self.checked_shapes.clear();
    }

    fn node_avail(
        &mut self,
        node: NodeId,
        avail: NodeAvail,
        reason: Option<String>,
    ) -> Result<Vec<Decision>, CoreError> {
        let n = self.node_mut(node)?;
        n.avail = avail;
        n.reason = if avail == NodeAvail::Up { None } else { reason };
        let on_node: Vec<JobId> = n.usage.jobs.keys().copied().collect();
        self.free.refresh(&self.cluster, &[node]);
        self.classes.refresh(&self.cluster, &[node]);
        self.idle_free = None;
        self.forget_fits();
        let mut out = Vec::new();
        if avail == NodeAvail::Down {
            out.extend(
                on_node
                    .into_iter()
                    .filter_map(|id| self.node_failure(id, node)),
            );
        }
        Ok(out)
    }

    /// An active job's tasks on `node` failed (the node went down, or the tasks vanished):
    /// the rest of the gang must stop. When its tasks are gone ([`Event::Ended`]) it goes
    /// back to the queue or ends `NODE_FAIL` by its requeue policy; a cancel in flight stays
    /// a cancel. `None` for a job the scheduler does not hold.
    fn node_failure(&mut self, id: JobId, node: NodeId) -> Option<Decision> {
        let job = self.jobs.get_mut(&id)?;
        if job.stopping != Some(Stopping::Cancelled) {
            job.stopping = Some(Stopping::NodeFailure);
        }
        if job.state.is_active() {
            self.stopping.insert(id);
        }
        Some(Decision::Stop {
            job: id,
            grace: Dur(0),
            why: StopReason::NodeFailure { node },
        })
    }

    /// Starts a job on an allocation found by placement now.
    fn start(
        &mut self,
        id: JobId,
        alloc: Allocation,
        per_node: Vec<(NodeId, Amounts)>,
        now: Time,
    ) -> Option<Decision> {
        let started = self.apply_start(id, alloc, per_node, now, now, Booking::Placed);
        debug_assert!(
            started.is_ok(),
            "placement returned an allocation that does not start: {started:?}"
        );
        started.ok()?;
        let allocation = self.jobs.get(&id)?.allocation.clone()?;
        Some(Decision::Start {
            job: id,
            allocation,
        })
    }

    /// Makes a pending job active, holding `alloc` since `start_time`: books the allocation
    /// on the cluster, counts it in its quotas, its association's usage rate (from `now`),
    /// its singleton name (once counted) and the free summary, and sets its end by its time
    /// limit. The one path by which a job becomes active: starts decided by the pass and
    /// jobs adopted after a restart both take it.
    ///
    /// All or nothing: on error nothing has changed. A double booking is an error either
    /// way. Quotas count the job even above a limit (a pass never starts one so; an adopted
    /// job holds its resources whatever the policy says now): such a job is remembered in
    /// `over_quota` until it ends.
    fn apply_start(
        &mut self,
        id: JobId,
        alloc: Allocation,
        per_node: Vec<(NodeId, Amounts)>,
        start_time: Time,
        now: Time,
        booking: Booking,
    ) -> Result<(), CoreError> {
        let job = self.jobs.get_mut(&id).ok_or(CoreError::UnknownJob(id))?;
        let next = job.state.on(id, Lifecycle::Start)?;
        match booking {
            Booking::Placed => self.cluster.book(id, &alloc),
            Booking::Adopted => self.cluster.restore(id, &alloc),
        }
        .map_err(|source| CoreError::Booking { id, source })?;
        let amounts = alloc.amounts();
        let over = match self.quota.restore_in(
            job.queue,
            &job.spec.account,
            &job.spec.user,
            job.spec.namespace.as_deref(),
            amounts,
        ) {
            Ok(over) => over,
            Err(block) => {
                self.cluster.release(id, &alloc);
                return Err(CoreError::InvalidJob {
                    id,
                    refusal: Refusal::Policy,
                    what: format!("its quotas cannot count it: {block}"),
                });
            }
        };
        debug_assert!(
            booking == Booking::Adopted || over.is_none(),
            "the pass checked job {id}'s quota before starting it: {over:?}"
        );
        if over.is_some() {
            self.over_quota.insert(id);
        }
        let touched: Vec<NodeId> = per_node.iter().map(|(n, _)| *n).collect();
        self.free.refresh(&self.cluster, &touched);
        self.classes.refresh(&self.cluster, &touched);
        job.state = next;
        self.running_ranks.count(&self.cluster, job, true);
        job.ever_started = true;
        job.start_time = Some(start_time);
        job.end_time = Some(end_of(start_time, job.spec.time_limit));
        job.reason = PendingReason::None;
        job.billing_rate = billing_rate(&self.policy.billing, &self.cluster, &alloc);
        self.usage
            .start(&mut self.fairshare, job.assoc, job.billing_rate, now);
        self.releases.add(id, job.limit_end(), &per_node);
        let gpus = held_gpu_milli(&per_node);
        self.running_work
            .count(job.partition, gpus, job.limit_end(), true);
        job.per_node = per_node;
        job.victims_held.clear();
        job.allocation = Some(alloc);
        if let Some(singletons) = &mut self.singletons {
            singletons.add(&job.spec.user, &job.spec.name);
        }
        if let Some(row) = self.queue.take(id) {
            job.priority = row.priority;
        }
        self.pending.remove(&id);
        self.active.insert(id);
        Ok(())
    }

    /// The fair-share usage of every user association as of `now`, running jobs charged and
    /// all usage decayed up to `now`, as (user, account, raw usage in billing-unit-seconds):
    /// what a controller saves so that a restart does not forget who used what.
    ///
    /// Worked out on a copy of the usage: taking it leaves the scheduler as it was, so the
    /// fair-share factors are still computed once a calc period, as the policy says, however
    /// often a controller saves (it saves every minute, and each save used to compute them
    /// again, and so every pending job's priority at the next pass).
    pub fn usage_snapshot(&self, now: Time) -> Vec<(String, String, f64)> {
        let mut fairshare = self.fairshare.clone();
        let half_life = self.policy.fairshare.half_life;
        let usage = &mut self.usage.clone();
        charge_and_decay(usage, &mut fairshare, self.last_decay, now, half_life);
        fairshare
            .rows(self.fairshare_algorithm())
            .into_iter()
            .filter_map(|r| r.user.map(|u| (u, r.account, r.raw_usage)))
            .filter(|(_, _, usage)| *usage > 0.0)
            .collect()
    }

    /// Puts back a usage saved at `as_of` by [`Scheduler::usage_snapshot`], decayed by the
    /// policy's half-life to `now`. An association the policy no longer has is created if
    /// the policy creates associations on demand, and skipped (false) otherwise.
    pub fn restore_usage(
        &mut self,
        user: &str,
        account: &str,
        raw_usage: f64,
        as_of: Time,
        now: Time,
    ) -> Result<bool, CoreError> {
        let invalid = |what: String| CoreError::InvalidJob {
            id: JobId(0),
            refusal: Refusal::Policy,
            what,
        };
        let assoc = match self.fairshare.assoc(user, account) {
            Some(a) => a,
            None if self.policy.auto_associations => self
                .fairshare
                .ensure_assoc(user, account)
                .map_err(|e| invalid(e.to_string()))?,
            None => return Ok(false),
        };
        let half_life = self.policy.fairshare.half_life.0 as f64;
        let elapsed = now.since(as_of).0 as f64;
        let decayed = if half_life > 0.0 {
            raw_usage * (-elapsed / half_life).exp2()
        } else {
            raw_usage
        };
        self.fairshare
            .charge(assoc, decayed)
            .map_err(|e| invalid(format!("saved usage of `{user}` in `{account}`: {e}")))?;
        self.fairshare_computed = None;
        Ok(true)
    }

    /// Every calc period (Slurm's `PriorityCalcPeriod`): charges running jobs' usage up to
    /// `now`, decays all usage by the time since the last decay, and recomputes fair-share
    /// factors. Between calc periods usage is not looked at, so nothing is done.
    fn accrue(&mut self, now: Time) {
        let due = match self.fairshare_computed {
            None => true,
            Some(at) => now.since(at) >= self.policy.fairshare.calc_period,
        };
        if !due {
            return;
        }
        let half_life = self.policy.fairshare.half_life;
        let last = self.last_decay;
        charge_and_decay(&mut self.usage, &mut self.fairshare, last, now, half_life);
        self.last_decay = Some(now);
        self.fairshare_factors = self.fairshare.factors(self.fairshare_algorithm());
        self.fairshare_count = self.fairshare_count.wrapping_add(1);
        self.fairshare_computed = Some(now);
    }

    /// The fair-share algorithm the policy names.
    pub fn fairshare_algorithm(&self) -> FairShareAlgorithm {
        match self.policy.fairshare.algorithm {
            FairShareMode::FairTree => FairShareAlgorithm::FairTree,
            FairShareMode::Classic => FairShareAlgorithm::Classic {
                dampening: self.policy.fairshare.dampening,
            },
        }
    }

    /// Checks every invariant of the scheduler's state; tests call it after every mutation.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.cluster.check_invariants().map_err(|e| e.to_string())?;
        // Usage equals the sum of active allocations, device by device.
        let mut expect = Cluster::clone(&self.cluster);
        for node in &mut expect.nodes {
            node.usage.cores.clear();
            node.usage.nics.clear();
            node.usage.gpu_milli.iter_mut().for_each(|m| *m = 0);
            node.usage.mem_mib = 0;
            node.usage.named.iter_mut().for_each(|m| *m = 0);
            node.usage.jobs.clear();
            node.usage.exclusive = None;
            node.avail = NodeAvail::Up;
        }
        for id in &in_id_order(&self.active) {
            let job = self
                .jobs
                .get(id)
                .ok_or_else(|| format!("active job {id} is not in the job table"))?;
            if !job.state.is_active() {
                return Err(format!("job {id} is in the active set but {}", job.state));
            }
            let alloc = job
                .allocation
                .as_ref()
                .ok_or_else(|| format!("active job {id} has no allocation"))?;
            expect
                .book(*id, alloc)
                .map_err(|e| format!("allocations overlap: {e}"))?;
            check_gang(*id, &job.spec, alloc, &self.cluster)?;
        }
        for (a, b) in expect.nodes.iter().zip(&self.cluster.nodes) {
            if a.usage != b.usage {
                return Err(format!(
                    "usage of node {} differs from the sum of its allocations",
                    a.name
                ));
            }
        }
        if self.shape_needs.len() != self.shapes.len() {
            return Err("a shape's need is missing, or one too many is kept".into());
        }
        for (id, job) in &self.jobs {
            let listed_pending = self.pending.contains(id);
            if listed_pending != (job.state == JobState::Pending) {
                return Err(format!(
                    "job {id} is {} but pending-set membership is {listed_pending}",
                    job.state
                ));
            }
            if job.state == JobState::Pending && job.allocation.is_some() {
                return Err(format!("pending job {id} holds an allocation"));
            }
            if self.shapes.get(&ShapeKey::of(job.partition, &job.spec)) != Some(&job.shape) {
                return Err(format!("job {id}'s shape {} is not its spec's", job.shape));
            }
            if self.shape_needs.get(job.shape as usize) != Some(&free::Need::of(&job.spec)) {
                return Err(format!(
                    "job {id}'s shape {} needs what its spec does not",
                    job.shape
                ));
            }
            if (job.queue, job.queue_missing) != queue_of(&self.quota, &job.spec) {
                return Err(format!(
                    "job {id}'s queue {:?} (missing: {}) is not the one its spec names in the quotas",
                    job.queue, job.queue_missing
                ));
            }
            if job.state.is_active() != self.active.contains(id) {
                return Err(format!(
                    "job {id} is {} but active-set membership disagrees",
                    job.state
                ));
            }
        }
        match &self.singletons {
            Some(s) if *s != self.singletons_counted() => {
                return Err("the running jobs counted per user and name (for singleton \
                     dependencies) are not the active jobs'"
                    .into());
            }
            Some(_) => {}
            None => {
                if let Some(job) = self.jobs.values().find(|j| j.spec.singleton()) {
                    return Err(format!(
                        "job {} has a singleton dependency, but the running jobs are not \
                         counted per user and name",
                        job.id
                    ));
                }
            }
        }
        if self.over_quota.is_empty() {
            self.quota.check_invariants().map_err(|e| e.to_string())?;
        } else {
            self.quota.check_counts().map_err(|e| e.to_string())?;
        }
        if let Some(id) = self.over_quota.iter().find(|id| !self.active.contains(*id)) {
            return Err(format!("job {id} is counted over its quota but not active"));
        }
        if self.free != FreeSummary::new(&self.cluster) {
            return Err("the free-resource summary differs from the cluster's usage".into());
        }
        self.classes.check(&self.cluster)?;
        let mut releases = NodeReleases::new(self.cluster.nodes.len());
        let mut running_work = backlog::RunningWork::default();
        for id in &self.active {
            let job = &self.jobs[id];
            releases.add(*id, job.limit_end(), &job.per_node);
            let gpus = held_gpu_milli(&job.per_node);
            running_work.count(job.partition, gpus, job.limit_end(), true);
        }
        if releases != self.releases {
            return Err("the release lists differ from the active jobs' allocations".into());
        }
        if !running_work.same_as(&self.running_work) {
            return Err("the running work per partition differs from the active jobs'".into());
        }
        self.queue.check_work()?;
        let stopping: BTreeSet<JobId> = self
            .active
            .iter()
            .copied()
            .filter(|id| self.jobs[id].stopping.is_some())
            .collect();
        if stopping != self.stopping {
            return Err("the stopping jobs listed differ from the jobs asked to stop".into());
        }
        // Before every end, at the last pass (some ends behind it) and a day later.
        let last = self.last_decay.unwrap_or(Time(0));
        for at in [Time(0), last, last + Dur::days(1)] {
            if !self.reference && self.profile(at) != self.profile_gathered(at) {
                return Err(format!(
                    "the profile copied from the release lists differs at {at:?} from the active jobs'"
                ));
            }
        }
        if !self.running_ranks_agree() {
            return Err(
                "the counts of the running jobs' ranks differ from the running jobs".into(),
            );
        }
        // The pass's copy of every pending job is the job's.
        self.queue.check(&self.jobs, &self.pending)?;
        if self.keeps_order() {
            self.check_kept()?;
        }
        Ok(())
    }
}

/// Tasks the workload profile remembers before it halves its weights.
const WORKLOAD_MEMORY: u64 = 1 << 20;

impl Scheduler {
    /// Places a job on what is free now by the policy's placement rule.
    pub(crate) fn place(
        &self,
        spec: &JobSpec,
        nodes: &[NodeId],
    ) -> Result<Allocation, PlacementFailure> {
        match self.policy.placement {
            PlacementRule::BestFit => placement::place(&self.cluster, spec, nodes),
            // The reference scheduler scores every placement afresh: a copy of the profile
            // remembers no scores from earlier placements.
            PlacementRule::Fragmentation if self.reference => {
                placement::place_with_profile(&self.cluster, spec, nodes, &self.workload.clone())
            }
            PlacementRule::Fragmentation => {
                placement::place_with_profile(&self.cluster, spec, nodes, &self.workload)
            }
        }
    }

    /// [`Scheduler::place`] on the nodes of partition `part`, looking only at the first few
    /// nodes of each class of equal nodes ([`NodeClasses`]) with as many whole GPUs free as
    /// the job's smallest task of whole GPUs needs, as many as the job has tasks: the other
    /// nodes take none of its tasks now, or would lose to an equal node of a lower id, so
    /// the answer is the same, for a fraction of the work on a large cluster.
    pub(crate) fn place_in(
        &self,
        spec: &JobSpec,
        part: PartitionId,
    ) -> Result<Allocation, PlacementFailure> {
        let nodes = &self.cluster.partition(part).nodes;
        if self.reference {
            return self.place(spec, nodes);
        }
        let scan = self.scan(spec, part, None);
        placement::place_scanning(&self.cluster, spec, nodes, self.profile_placed(), scan)
    }

    /// [`Scheduler::place_in`] on only the nodes of partition `part` whose holds in
    /// `profile` begin at `end` or later ([`Profile::untouched_until`]); `None` if the job
    /// does not fit there, without the work of saying why.
    pub(crate) fn place_untouched(
        &self,
        spec: &JobSpec,
        part: PartitionId,
        profile: &Profile,
        end: Time,
    ) -> Option<Allocation> {
        let keep = |n| profile.untouched_until(n, end);
        // A large partition's nodes are read here at every such placement: the filter is
        // not a call through a pointer per node.
        let nodes = kept_nodes(&self.cluster.partition(part).nodes, keep);
        if self.reference {
            return self.place(spec, &nodes).ok();
        }
        let scan = self.scan(spec, part, Some(&keep));
        let profile = self.profile_placed();
        placement::place_scanning_quietly(&self.cluster, spec, &nodes, profile, scan)
    }

    /// The nodes of partition `part` a placement of `spec` scans, each with the number of
    /// equal nodes it stands for (see [`NodeClasses::representatives`]), among those `keep`
    /// keeps if given.
    fn scan(
        &self,
        spec: &JobSpec,
        part: PartitionId,
        keep: Option<&dyn Fn(NodeId) -> bool>,
    ) -> Vec<(NodeId, u32)> {
        let tasks = spec
            .groups
            .iter()
            .fold(0u32, |sum, g| sum.saturating_add(g.count));
        self.classes
            .representatives(&self.cluster, part, least_whole(spec), tasks, keep)
    }

    /// The workload profile placement prefers by, if the policy places by fragmentation.
    fn profile_placed(&self) -> Option<&WorkloadProfile> {
        match self.policy.placement {
            PlacementRule::BestFit => None,
            PlacementRule::Fragmentation => Some(&self.workload),
        }
    }

    /// [`Scheduler::place_in`] (every node of partition `part`) for a job of interned shape
    /// `shape` whose spec is `spec`. A job that goes on one node ([`placement::OneNode`])
    /// is placed on the node it fits best, found from what each class of nodes offers the
    /// shape, remembered while the class keeps its state ([`ClassFits`]): in a pass that
    /// starts thousands of such jobs, each start changes the state of a node or two. For the
    /// pass alone, which forgets the fits as it begins: they include the workload profile's
    /// rises and follow the policy's placement rule, which change only between passes.
    fn place_shaped(
        &self,
        spec: &JobSpec,
        part: PartitionId,
        shape: u32,
    ) -> Result<Allocation, PlacementFailure> {
        if !self.reference && placement::OneNode::suits(spec) {
            // Held while the job is placed: one lookup finds the shape's fits and layout.
            let mut fits = self.class_fits.lock();
            let Fits {
                by_shape,
                choice,
                devices,
            } = &mut *fits;
            let ShapeFits { classes, layout } = by_shape.entry(shape).or_default();
            let layout = layout.get_or_insert_with(|| JobLayout::new(&self.cluster, spec));
            if let Some((node, fit)) = self.one_node_choice(spec, part, classes, layout, choice) {
                // The devices do not depend on the profile. The fit is the node's class's,
                // remembered under the class's stamp: the node's now.
                let placed = placement::OneNode::new(&self.cluster, spec, None, Some(layout))
                    .and_then(|one| one.allocation_fitting(node, &fit, devices));
                debug_assert!(placed.is_some(), "the chosen node {node:?} holds the job");
                if let Some(alloc) = placed {
                    return Ok(alloc);
                }
            }
        }
        self.place_in(spec, part)
    }

    /// The node a job of [`placement::OneNode`]'s kind goes on in partition `part`, if one
    /// node can hold it, with what it offers the job; `known`: what each class offers the
    /// job's shape, as far as known.
    fn one_node_choice(
        &self,
        spec: &JobSpec,
        part: PartitionId,
        known: &mut Vec<Option<(u64, NodeFit)>>,
        layout: &JobLayout,
        choice: &mut placement::OneNodeChoice,
    ) -> Option<(NodeId, NodeFit)> {
        // Made at the first class whose fit is not known: it holds the profile's memo.
        let mut probe = None;
        choice.clear();
        for (node, weight, class, stamp) in
            self.classes.firsts(&self.cluster, part, least_whole(spec))
        {
            let slot = class as usize;
            if known.len() <= slot {
                known.resize(slot + 1, None);
            }
            // Read in place: a fit is a few words, and every class is read at every start.
            if let Some((s, fit)) = &known[slot]
                && *s == stamp
            {
                choice.add(node, weight, fit);
                continue;
            }
            if probe.is_none() {
                probe = placement::OneNode::new(
                    &self.cluster,
                    spec,
                    self.profile_placed(),
                    Some(layout),
                );
            }
            let fit = probe.as_ref()?.fit(node);
            known[slot] = Some((stamp, fit));
            choice.add(node, weight, &fit);
        }
        choice.chosen()
    }
}

/// Charges the running jobs' `usage` to `fairshare` up to `now`, then decays all of it by
/// `half_life` over the time from the last decay, `last` (none: nothing to decay), to `now`.
fn charge_and_decay(
    usage: &mut UsageRates,
    fairshare: &mut FairShareTree,
    last: Option<Time>,
    now: Time,
    half_life: Dur,
) {
    usage.charge_all(fairshare, now);
    let half_life = half_life.0 as f64;
    if let Some(last) = last {
        let elapsed = now.since(last).0 as f64;
        if elapsed > 0.0 && half_life > 0.0 {
            let decayed = fairshare.decay(elapsed, half_life);
            debug_assert!(
                decayed.is_ok(),
                "decay of {elapsed} s by half-life {half_life} s: {decayed:?}"
            );
        }
    }
}

/// Running jobs per user and name, for `singleton` dependencies. Hash maps, as every start
/// and end counts here (ordered string keys cost more), nested so that counting a name
/// already there makes no string.
#[derive(Clone, Debug, Default, PartialEq)]
struct Singletons(HashMap<String, HashMap<String, u32>>);

impl Singletons {
    fn add(&mut self, user: &str, name: &str) {
        let names = match self.0.get_mut(user) {
            Some(names) => names,
            None => self.0.entry(user.to_owned()).or_default(),
        };
        match names.get_mut(name) {
            Some(n) => *n += 1,
            None => {
                names.insert(name.to_owned(), 1);
            }
        }
    }

    fn remove(&mut self, user: &str, name: &str) {
        let Some(names) = self.0.get_mut(user) else {
            return;
        };
        if let Some(n) = names.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                names.remove(name);
            }
        }
        if names.is_empty() {
            self.0.remove(user);
        }
    }

    fn running(&self, user: &str, name: &str) -> bool {
        self.0
            .get(user)
            .is_some_and(|names| names.contains_key(name))
    }
}

/// The nodes of `all` that `keep` keeps, in their order. Each node is written, and counted
/// only if kept: no branch on a test that goes either way from one node to the next (a
/// pass's retries on the nodes its holds leave untouched read a large partition's every
/// node each time).
fn kept_nodes(all: &[NodeId], keep: impl Fn(NodeId) -> bool) -> Vec<NodeId> {
    let mut kept = vec![NodeId(0); all.len()];
    let mut len = 0;
    for &n in all {
        kept[len] = n;
        len += usize::from(keep(n));
    }
    kept.truncate(len);
    kept
}

/// The fewest whole GPUs a task of the job asks for (0 when one asks for a share, or none):
/// nodes with fewer free take none of its tasks.
fn least_whole(spec: &JobSpec) -> u32 {
    spec.groups
        .iter()
        .filter(|g| g.count > 0)
        .map(|g| match g.per_task.gpu_share_milli {
            Some(_) => 0,
            None => g.per_task.gpus,
        })
        .min()
        .unwrap_or(0)
}

/// A job's end time by its time limit; a zero limit means unlimited.
fn end_of(start: Time, limit: Dur) -> Time {
    if limit.0 == 0 {
        Time::NEVER
    } else {
        start + limit
    }
}

impl Job {
    /// When the job must end by its time limit ([`Time::NEVER`] while pending or
    /// unlimited): the end its releases are kept under ([`NodeReleases`]).
    fn limit_end(&self) -> Time {
        self.end_time.unwrap_or(Time::NEVER)
    }

    /// The amounts the job holds while active (its allocation's), zero while pending.
    pub fn spec_amounts_held(&self) -> Amounts {
        self.allocation
            .as_ref()
            .map(Allocation::amounts)
            .unwrap_or_default()
    }
}

/// Checks a spec for what can never make sense, whatever the cluster.
fn validate_spec(spec: &JobSpec) -> Result<(), String> {
    if spec.groups.is_empty() {
        return Err("it has no task groups".into());
    }
    for g in &spec.groups {
        let r = &g.per_task;
        let name = &g.name;
        if g.count == 0 {
            return Err(format!("task group `{name}` has no tasks"));
        }
        if g.min_count == Some(0) {
            return Err(format!("task group `{name}` has a minimum of 0 tasks"));
        }
        if r.gpus > 0 && r.gpu_share_milli.is_some() {
            return Err(format!(
                "task group `{name}` asks for whole GPUs and a GPU share at once"
            ));
        }
        if let Some(share) = r.gpu_share_milli {
            if share == 0 || share >= MILLI_PER_GPU {
                return Err(format!(
                    "task group `{name}` asks for a GPU share of {share} milli; it must be 1 to 999"
                ));
            }
        }
        if g.tasks_per_node == Some(0) || g.nodes == Some(0) {
            return Err(format!(
                "task group `{name}` asks for 0 tasks per node or 0 nodes"
            ));
        }
        if let (Some(tpn), Some(nodes)) = (g.tasks_per_node, g.nodes) {
            if u64::from(tpn) * u64::from(nodes) != u64::from(g.count) && g.min_count.is_none() {
                return Err(format!(
                    "task group `{name}` asks for {} tasks but {nodes} nodes x {tpn} tasks per node",
                    g.count
                ));
            }
        }
        if r.cpus == 0 && !r.wants_gpu() && r.mem_mib == 0 && r.named.is_empty() {
            return Err(format!("task group `{name}` asks for no resources at all"));
        }
    }
    Ok(())
}

/// Billing units per second of an allocation.
fn billing_rate(b: &crate::policy::BillingWeights, cluster: &Cluster, alloc: &Allocation) -> f64 {
    alloc
        .tasks
        .iter()
        .map(|t| {
            let shape = cluster.shape(t.node);
            let gpu: f64 = t
                .gpus
                .iter()
                .map(|&g| {
                    let model = shape
                        .gpus
                        .get(g as usize)
                        .map(|d| d.model.as_str())
                        .unwrap_or("");
                    let w = b.gpu_models.get(model).copied().unwrap_or(b.gpu);
                    w * f64::from(t.gpu_milli_each) / f64::from(MILLI_PER_GPU)
                })
                .sum();
            gpu + b.cpu * t.cores.len() as f64 + b.mem_gib * t.mem_mib as f64 / 1024.0
        })
        .sum()
}

/// Checks that an allocation is a whole gang of the job and honours its per-task asks.
fn check_gang(
    id: JobId,
    spec: &JobSpec,
    alloc: &Allocation,
    cluster: &Cluster,
) -> Result<(), String> {
    for (gi, g) in spec.groups.iter().enumerate() {
        let mut ranks: Vec<u32> = alloc
            .tasks
            .iter()
            .filter(|t| usize::from(t.group) == gi)
            .map(|t| t.rank)
            .collect();
        ranks.sort_unstable();
        let n = ranks.len() as u32;
        if n < g.min_tasks() || n > g.count {
            return Err(format!(
                "job {id} group `{}` has {n} tasks placed; a gang needs {}..={}",
                g.name,
                g.min_tasks(),
                g.count
            ));
        }
        if ranks.iter().enumerate().any(|(i, &r)| r != i as u32) {
            return Err(format!("job {id} group `{}` ranks are not 0..{n}", g.name));
        }
        for t in alloc.tasks.iter().filter(|t| usize::from(t.group) == gi) {
            let r = &g.per_task;
            if t.cores.len() < r.cpus as usize
                || t.mem_mib < r.mem_mib
                || t.nics.len() < r.nics as usize
            {
                return Err(format!(
                    "job {id} task {}/{} got less than it asked",
                    g.name, t.rank
                ));
            }
            let gpus_ok = match r.gpu_share_milli {
                Some(share) => t.gpus.len() == 1 && t.gpu_milli_each == share,
                None => {
                    t.gpus.len() == r.gpus as usize
                        && (r.gpus == 0 || t.gpu_milli_each == MILLI_PER_GPU)
                }
            };
            if !gpus_ok {
                return Err(format!(
                    "job {id} task {}/{} got GPUs {:?} for its ask",
                    g.name, t.rank, t.gpus
                ));
            }
            if spec.topology.numa == crate::job::NumaPolicy::Strict {
                let shape = cluster.shape(t.node);
                let domain_ok = shape.numa.iter().any(|d| {
                    t.gpus.iter().all(|g| d.gpus.contains(g))
                        && t.cores.iter().all(|c| d.cores.contains(c))
                        && t.nics.iter().all(|n| d.nics.contains(n))
                });
                if !domain_ok {
                    return Err(format!(
                        "job {id} task {}/{} spans NUMA domains under a strict NUMA ask",
                        g.name, t.rank
                    ));
                }
            }
        }
    }
    if alloc
        .tasks
        .iter()
        .any(|t| usize::from(t.group) >= spec.groups.len())
    {
        return Err(format!("job {id} has a task of a group it does not have"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The nodes kept are those a filter keeps, in the same order.
        #[test]
        fn kept_nodes_are_the_filters(
            all in proptest::collection::vec(0u32..64, 0..100),
            kept in proptest::collection::vec(proptest::bool::ANY, 64),
        ) {
            let all: Vec<NodeId> = all.into_iter().map(NodeId).collect();
            let keep = |n: NodeId| kept[n.0 as usize];
            let want: Vec<NodeId> = all.iter().copied().filter(|&n| keep(n)).collect();
            prop_assert_eq!(kept_nodes(&all, keep), want);
        }
    }
}
