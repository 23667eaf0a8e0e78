//! Behaviour tests of the scheduler: one test per behaviour, each a small scripted scenario
//! asserting the exact decisions, states and reasons. Every mutation (event or pass) goes
//! through [`Sim`], which checks the scheduler's invariants after it.

use cadre_core::alloc::Allocation;
use cadre_core::backfill::Reservation;
use cadre_core::cluster::{BookingError, Cluster, NodeAvail, NodeId};
use cadre_core::job::{
    Dependency, DependencyKind, JobId, JobSpec, JobState, NetworkSpan, NumaPolicy, RequeuePolicy,
    TaskGroup,
};
use cadre_core::policy::{BackfillMode, Policy, PreemptMode, PriorityClassConfig, QosConfig};
use cadre_core::priority::{PriorityWeights, SizeBasis};
use cadre_core::quota::{NamespaceQuotaConfig, QueueConfig, QuotaAmounts, QuotaConfig};
use cadre_core::resources::{Amounts, TaskResources};
use cadre_core::scheduler::{
    CoreError, Decision, Event, Hold, NodeWhyNot, PendingReason, Scheduler, StopReason,
};
use cadre_core::time::{Dur, Time};

// ---------------------------------------------------------------------------------------
// Builders
// ---------------------------------------------------------------------------------------

const GIB: u64 = 1024;

/// A task of `gpus` whole GPUs with 8 cores and 16 GiB per GPU (a CPU-only task of 8 cores
/// and 16 GiB when `gpus` is 0).
fn gpu_task(gpus: u32) -> TaskResources {
    TaskResources {
        cpus: 8 * gpus.max(1),
        mem_mib: 16 * GIB * u64::from(gpus.max(1)),
        gpus,
        ..TaskResources::default()
    }
}

/// A job of `tasks` tasks of `gpus` GPUs each, by alice of account `ml`.
fn job(tasks: u32, gpus: u32, limit: u64) -> JobSpec {
    JobSpec::simple("alice", "ml", tasks, gpu_task(gpus), Dur(limit))
}

/// A job of one task of `cpus` cores and 4 GiB, no GPU.
fn cpu_job(cpus: u32, limit: u64) -> JobSpec {
    let task = TaskResources {
        cpus,
        mem_mib: 4 * GIB,
        ..TaskResources::default()
    };
    JobSpec::simple("alice", "ml", 1, task, Dur(limit))
}

fn group(name: &str, count: u32, per_task: TaskResources) -> TaskGroup {
    TaskGroup {
        name: name.into(),
        count,
        min_count: None,
        per_task,
        tasks_per_node: None,
        nodes: None,
    }
}

fn with<F: FnOnce(&mut JobSpec)>(mut spec: JobSpec, f: F) -> JobSpec {
    f(&mut spec);
    spec
}

/// cadre's defaults with every priority weight zero: jobs go in submit order, so a test
/// about something else is not disturbed by fair-share or size (nor, once a test weighs
/// job size, by the backlog's depth turning the size order round).
fn plain() -> Policy {
    Policy {
        priority: PriorityWeights {
            age: 0,
            fairshare: 0,
            job_size: 0,
            partition: 0,
            qos: 0,
            largest_first_within: Dur(0),
            ..PriorityWeights::default()
        },
        ..Policy::default()
    }
}

/// `plain()` with classes `low` (0, not preempting) and `high` (100, preempting), grace 30 s.
fn preempting() -> Policy {
    let mut p = plain();
    p.priority_class = vec![
        PriorityClassConfig {
            name: "low".into(),
            value: 0,
            preempting: false,
        },
        PriorityClassConfig {
            name: "high".into(),
            value: 100,
            preempting: true,
        },
    ];
    p.preemption.grace = Dur(30);
    p
}

/// A cluster description named `$name` of 8-GPU nodes `$nodes` (64 cores, 1 TiB, 2 NUMA
/// domains, 4 NICs, H100s of 80 GB), followed by `$rest` (its partitions, switches).
macro_rules! g8_cluster {
    ($name:literal, $nodes:literal, $rest:literal) => {
        concat!(
            "version = 1\nname = \"",
            $name,
            "\"\n\n[[shape]]\nname = \"g8\"\ncores = 64\nmemory = \"1T\"\nnuma = 2\n",
            "gpus = 8\nnics = 4\ngpu_model = \"h100\"\ngpu_memory = \"80G\"\n\n",
            "[[nodes]]\nnames = \"",
            $nodes,
            "\"\nshape = \"g8\"\n",
            $rest
        )
    };
}

/// Two partitions over the same two 8-GPU nodes: `hi` (tier 2) and `lo` (tier 1, default).
const TWO_TIERS: &str = g8_cluster!(
    "tiers",
    "n[1-2]",
    r#"
[[partition]]
name = "lo"
nodes = "ALL"
default = true
priority_tier = 1
priority_job_factor = 1

[[partition]]
name = "hi"
nodes = "ALL"
priority_tier = 2
priority_job_factor = 1
"#
);

/// Four 8-GPU nodes under two leaf switches (n1, n2 | n3, n4); partition `short` has a
/// 1-hour time limit.
const TWO_LEAVES: &str = g8_cluster!(
    "leaves",
    "n[1-4]",
    r#"
[[partition]]
name = "gpu"
nodes = "ALL"
default = true

[[partition]]
name = "short"
nodes = "ALL"
max_time = "1:00:00"

[[switch]]
name = "leaf1"
nodes = "n[1-2]"

[[switch]]
name = "leaf2"
nodes = "n[3-4]"

[[switch]]
name = "spine"
switches = "leaf[1-2]"
"#
);

fn load(toml: &str) -> Cluster {
    cadre_core::config::load_cluster(toml, "test.toml").expect("test cluster parses")
}

/// The scheduler under test, with invariants checked after every mutation.
struct Sim {
    s: Scheduler,
}

impl Sim {
    fn new(cluster: Cluster, policy: Policy) -> Sim {
        let s = Scheduler::new(cluster, policy).expect("test policy is valid");
        s.check_invariants().expect("invariants of a new scheduler");
        Sim { s }
    }

    /// Submits `spec` as job `id` at `now` (its submit time).
    fn submit(&mut self, id: u64, spec: JobSpec, now: u64) {
        let spec = with(spec, |s| s.submit_time = Time(now));
        self.try_event(
            Event::Submit {
                id: JobId(id),
                spec: Box::new(spec),
            },
            now,
        )
        .expect("submission is accepted");
    }

    fn try_event(&mut self, e: Event, now: u64) -> Result<Vec<Decision>, CoreError> {
        let out = self.s.handle(e, Time(now));
        self.check();
        out
    }

    fn event(&mut self, e: Event, now: u64) -> Vec<Decision> {
        let what = format!("{e:?}");
        self.try_event(e, now)
            .unwrap_or_else(|err| panic!("{what} refused: {err}"))
    }

    fn end(&mut self, id: u64, outcome: JobState, now: u64) -> Vec<Decision> {
        self.event(
            Event::Ended {
                id: JobId(id),
                outcome,
            },
            now,
        )
    }

    fn node(
        &mut self,
        node: u32,
        avail: NodeAvail,
        reason: Option<&str>,
        now: u64,
    ) -> Vec<Decision> {
        self.event(
            Event::NodeAvail {
                node: NodeId(node),
                avail,
                reason: reason.map(str::to_string),
            },
            now,
        )
    }

    fn pass(&mut self, now: u64) -> Vec<Decision> {
        let out = self.s.schedule(Time(now));
        self.check();
        out
    }

    fn check(&self) {
        if let Err(e) = self.s.check_invariants() {
            panic!("invariant broken: {e}");
        }
    }

    /// The job's state, ended or not.
    fn state(&self, id: u64) -> JobState {
        match self.s.job(JobId(id)) {
            Some(j) => j.state,
            None => self.s.ended_state(JobId(id)).expect("job was submitted"),
        }
    }

    fn reason(&self, id: u64) -> String {
        self.s
            .job(JobId(id))
            .expect("job is not ended")
            .reason
            .to_string()
    }

    fn pending_reason(&self, id: u64) -> PendingReason {
        self.s
            .job(JobId(id))
            .expect("job is not ended")
            .reason
            .clone()
    }

    fn priority(&self, id: u64) -> u64 {
        let job = self.s.job(JobId(id)).expect("job is not ended");
        self.s.priority(job)
    }

    /// Node indices the job runs on.
    fn nodes_of(&self, id: u64) -> Vec<u32> {
        let job = self.s.job(JobId(id)).expect("job is not ended");
        let alloc = job.allocation.as_ref().expect("job runs");
        alloc.nodes().into_iter().map(|n| n.0).collect()
    }

    fn free(&self, node: u32) -> Amounts {
        self.s.cluster().free_amounts(NodeId(node))
    }
}

/// The jobs started by these decisions, in order.
fn started(ds: &[Decision]) -> Vec<u64> {
    ds.iter()
        .filter_map(|d| match d {
            Decision::Start { job, .. } => Some(job.0),
            _ => None,
        })
        .collect()
}

/// The reservations among these decisions.
fn reserved(ds: &[Decision]) -> Vec<&Reservation> {
    ds.iter()
        .filter_map(|d| match d {
            Decision::Reserve(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// A compact view of decisions: `start 3`, `reserve 4 @100`, `preempt 2 by 5`, `stop 1`.
fn summary(ds: &[Decision]) -> Vec<String> {
    ds.iter()
        .map(|d| match d {
            Decision::Start { job, .. } => format!("start {job}"),
            Decision::Reserve(r) => format!("reserve {} @{}", r.job, r.start.0),
            Decision::Preempt { victim, by, .. } => format!("preempt {victim} by {by}"),
            Decision::Stop { job, .. } => format!("stop {job}"),
        })
        .collect()
}

fn full_gpu_node() -> Amounts {
    Cluster::flat_gpu(1, 8).shape(NodeId(0)).capacity()
}

// ---------------------------------------------------------------------------------------
// 1. Gang admission
// ---------------------------------------------------------------------------------------

#[test]
fn gang_does_not_start_partially_on_15_free_gpus_and_starts_whole_when_a_node_frees() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    sim.submit(1, job(1, 1, 100), 0);
    assert_eq!(summary(&sim.pass(0)), ["start 1"]);
    // 15 GPUs free (7 + 8), but the gang wants two whole nodes' worth.
    sim.submit(2, job(2, 8, 1000), 10);
    assert_eq!(summary(&sim.pass(10)), ["reserve 2 @100"]);
    assert_eq!(sim.state(2), JobState::Pending);
    assert_eq!(sim.pending_reason(2), PendingReason::Resources);
    assert_eq!(
        sim.free(1),
        full_gpu_node(),
        "nothing was booked for the gang"
    );

    sim.end(1, JobState::Completed, 50);
    let ds = sim.pass(50);
    assert_eq!(summary(&ds), ["start 2"]);
    let Decision::Start { allocation, .. } = &ds[0] else {
        unreachable!()
    };
    assert_eq!(allocation.tasks.len(), 2);
    assert_eq!(allocation.nodes(), [NodeId(0), NodeId(1)]);
    assert!(allocation.tasks.iter().all(|t| t.gpus.len() == 8));
    assert_eq!(sim.state(2), JobState::Running);
}

#[test]
fn launcher_and_workers_start_in_one_decision() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    let mut spec = job(1, 0, 100);
    spec.groups = vec![
        group("launcher", 1, cpu_job(2, 1).groups[0].per_task.clone()),
        group("worker", 2, gpu_task(8)),
    ];
    sim.submit(1, spec, 0);
    let ds = sim.pass(0);
    assert_eq!(summary(&ds), ["start 1"]);
    let Decision::Start { allocation, .. } = &ds[0] else {
        unreachable!()
    };
    let mut ranks: Vec<(u16, u32)> = allocation.tasks.iter().map(|t| (t.group, t.rank)).collect();
    ranks.sort_unstable();
    assert_eq!(ranks, [(0, 0), (1, 0), (1, 1)]);
}

#[test]
fn elastic_gang_starts_at_its_minimum_when_only_that_fits() {
    let mut sim = Sim::new(Cluster::flat_gpu(4, 8), plain());
    sim.submit(1, job(2, 8, 1000), 0);
    assert_eq!(summary(&sim.pass(0)), ["start 1"]);
    let elastic = with(job(4, 8, 1000), |s| s.groups[0].min_count = Some(2));
    sim.submit(2, elastic, 10);
    let ds = sim.pass(10);
    assert_eq!(summary(&ds), ["start 2"]);
    let Decision::Start { allocation, .. } = &ds[0] else {
        unreachable!()
    };
    assert_eq!(allocation.tasks.len(), 2, "two of four workers fit");
}

#[test]
fn elastic_gang_takes_more_than_its_minimum_when_more_fits() {
    let mut sim = Sim::new(Cluster::flat_gpu(4, 8), plain());
    sim.submit(1, job(1, 8, 1000), 0);
    assert_eq!(summary(&sim.pass(0)), ["start 1"]);
    let elastic = with(job(4, 8, 1000), |s| s.groups[0].min_count = Some(2));
    sim.submit(2, elastic, 10);
    let ds = sim.pass(10);
    let Decision::Start { allocation, .. } = &ds[0] else {
        panic!("elastic gang did not start: {ds:?}")
    };
    assert_eq!(allocation.tasks.len(), 3, "three nodes are free");
}

#[test]
fn elastic_gang_below_its_minimum_does_not_start() {
    let mut sim = Sim::new(Cluster::flat_gpu(4, 8), plain());
    sim.submit(1, job(3, 8, 1000), 0);
    assert_eq!(summary(&sim.pass(0)), ["start 1"]);
    let elastic = with(job(4, 8, 1000), |s| s.groups[0].min_count = Some(2));
    sim.submit(2, elastic, 10);
    assert_eq!(summary(&sim.pass(10)), ["reserve 2 @1000"]);
    assert_eq!(sim.pending_reason(2), PendingReason::Resources);
}

// ---------------------------------------------------------------------------------------
// 2. Backfill
// ---------------------------------------------------------------------------------------

/// Node 0 runs a node-sized job until t=100; job 2 wants both nodes' GPUs.
fn backfill_setup(policy: Policy) -> Sim {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), policy);
    sim.submit(1, job(1, 8, 100), 0);
    assert_eq!(summary(&sim.pass(0)), ["start 1"]);
    assert_eq!(sim.nodes_of(1), [0]);
    sim.submit(2, job(2, 8, 1000), 10);
    sim
}

#[test]
fn easy_backfill_reserves_for_the_blocked_gang_and_backfills_a_short_job() {
    let mut sim = backfill_setup(plain());
    sim.submit(3, job(1, 1, 50), 10); // ends at 60, before the reservation
    sim.submit(4, job(1, 1, 1000), 10); // would hold a GPU the reservation needs
    let ds = sim.pass(10);
    assert_eq!(summary(&ds), ["reserve 2 @100", "start 3"]);
    let r = reserved(&ds)[0];
    assert_eq!(r.end, Time(1100));
    assert_eq!(
        r.nodes
            .iter()
            .map(|(n, a)| (n.0, a.gpu_milli))
            .collect::<Vec<_>>(),
        [(0, 8000), (1, 8000)]
    );
    assert_eq!(sim.s.expected_start(JobId(2)), Some(Time(100)));
    assert_eq!(sim.nodes_of(3), [1]);
    assert_eq!(sim.pending_reason(2), PendingReason::Resources);
    assert_eq!(sim.pending_reason(4), PendingReason::Priority);
    assert_eq!(sim.state(4), JobState::Pending);
}

#[test]
fn long_job_beside_a_reservation_starts_on_what_the_reservation_does_not_need() {
    let mut sim = backfill_setup(plain());
    // The reservation needs every GPU but only 64 of the 128 cores of each node.
    sim.submit(3, cpu_job(32, 100_000), 10);
    let ds = sim.pass(10);
    assert_eq!(summary(&ds), ["reserve 2 @100", "start 3"]);
    // When the reservation's time comes the gang still fits beside it.
    sim.end(1, JobState::Completed, 100);
    assert_eq!(summary(&sim.pass(100)), ["start 2"]);
    assert_eq!(sim.state(3), JobState::Running);
}

#[test]
fn easy_backfill_reserves_only_for_its_depth_and_conservative_for_every_blocked_job() {
    let run = |mode: BackfillMode| {
        let mut p = plain();
        p.backfill.mode = mode;
        p.backfill.reservation_depth = 1;
        let mut sim = backfill_setup(p);
        sim.submit(3, job(2, 8, 500), 10);
        summary(&sim.pass(10))
    };
    assert_eq!(run(BackfillMode::Easy), ["reserve 2 @100"]);
    assert_eq!(
        run(BackfillMode::Conservative),
        ["reserve 2 @100", "reserve 3 @1100"]
    );
}

/// Regression: reservation search only tried the times running jobs end, never the end of
/// a reservation made before in the pass, so a second blocked gang that needs what the first
/// reservation holds got no reservation at all (and could be starved by backfill).
#[test]
fn second_blocked_gang_is_reserved_after_the_first_reservation_ends() {
    let mut policy = plain();
    policy.backfill.reservation_depth = 4;
    let mut sim = backfill_setup(policy);
    sim.submit(3, job(2, 8, 500), 10);
    sim.submit(4, job(2, 8, 100), 10);
    let ds = sim.pass(10);
    assert_eq!(
        summary(&ds),
        ["reserve 2 @100", "reserve 3 @1100", "reserve 4 @1600"]
    );
    assert_eq!(sim.s.expected_start(JobId(3)), Some(Time(1100)));
    assert_eq!(sim.pending_reason(4), PendingReason::Resources);
}

/// Two 8-GPU jobs running until 5000; pending: a 2-node gang (2, eligible at 10), a
/// one-node job that outranks it as smaller (3, at 10), and a second gang (4, at 20).
fn starvation_setup(starvation_wait: u64) -> Sim {
    starvation_setup_with(starvation_wait, |_| {})
}

/// [`starvation_setup`], with `before` run on the scheduler before its first pass.
fn starvation_setup_with(starvation_wait: u64, before: impl FnOnce(&mut Sim)) -> Sim {
    let mut p = weights(|w| {
        w.job_size = 1000;
        w.favor_small = true;
    });
    p.backfill.reservation_depth = 1;
    p.backfill.starvation_wait = Dur(starvation_wait);
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), p);
    before(&mut sim);
    sim.submit(1, job(1, 8, 5000), 0);
    sim.submit(5, job(1, 8, 5000), 0);
    assert_eq!(summary(&sim.pass(0)), ["start 1", "start 5"]);
    sim.submit(2, job(2, 8, 1000), 10);
    sim.submit(3, job(1, 8, 1000), 10);
    assert_eq!(summary(&sim.pass(10)), ["reserve 3 @5000"]);
    sim.submit(4, job(2, 8, 1000), 20);
    assert_eq!(summary(&sim.pass(20)), ["reserve 3 @5000"]);
    sim
}

#[test]
fn the_longest_waiting_starving_job_gets_a_reservation_beside_the_top_job_s() {
    let mut sim = starvation_setup(1000);
    // Job 2 has waited 999 s: not starving yet.
    assert_eq!(summary(&sim.pass(1009)), ["reserve 3 @5000"]);
    assert_eq!(sim.s.expected_start(JobId(2)), None);
    // From 1010 it is, and goes first with a reservation of its own; the top job's
    // reservation (depth 1) still comes, after it.
    assert_eq!(
        summary(&sim.pass(1010)),
        ["reserve 2 @5000", "reserve 3 @6000"]
    );
    assert_eq!(sim.s.expected_start(JobId(2)), Some(Time(5000)));
    assert_eq!(sim.pending_reason(2), PendingReason::Resources);
    // Explain says why it went first: when it became eligible.
    let starving = |sim: &Sim, id: u64| {
        sim.s
            .explain(JobId(id), Time(1010), false)
            .expect("pending")
            .starving_since
    };
    assert_eq!(starving(&sim, 2), Some(Time(10)));
    assert_eq!(starving(&sim, 3), None);
    // Job 4 starves too, but only the longest waiting of a partition is promoted.
    assert_eq!(
        summary(&sim.pass(1100)),
        ["reserve 2 @5000", "reserve 3 @6000"]
    );
    assert_eq!(sim.s.expected_start(JobId(4)), None);
    assert_eq!(sim.pending_reason(4), PendingReason::Resources);
    assert_eq!(
        starving(&sim, 4),
        None,
        "not marked: another job of its partition is"
    );
    // Once job 2 has started, the next pass promotes job 3, eligible as long as job 2 was
    // (the tie went to the lower id), and job 4, now the top job, gets the depth's
    // reservation behind it.
    sim.end(1, JobState::Completed, 5000);
    sim.end(5, JobState::Completed, 5000);
    assert_eq!(summary(&sim.pass(5000)), ["start 2", "reserve 3 @6000"]);
    assert_eq!(
        summary(&sim.pass(5001)),
        ["reserve 3 @6000", "reserve 4 @7000"]
    );
}

/// Regression (from a review): the mark went to the partition's longest-waiting starving
/// job even when that job could never use it, here one that never fits, which waits
/// forever and so kept every other job of its partition from the guard.
#[test]
fn a_job_that_never_fits_does_not_take_the_starving_mark() {
    let mut sim = starvation_setup_with(1000, |sim| sim.submit(9, job(3, 8, 1000), 0));
    assert_eq!(sim.pending_reason(9), PendingReason::BadConstraints);
    assert_eq!(
        summary(&sim.pass(1010)),
        ["reserve 2 @5000", "reserve 3 @6000"]
    );
    assert_eq!(sim.pending_reason(9), PendingReason::BadConstraints);
}

#[test]
fn without_a_starvation_wait_only_the_top_blocked_job_is_reserved_for() {
    let mut sim = starvation_setup(0);
    assert_eq!(summary(&sim.pass(4000)), ["reserve 3 @5000"]);
    assert_eq!(sim.s.expected_start(JobId(2)), None);
    assert_eq!(Policy::slurm().backfill.starvation_wait, Dur(0));
    assert_eq!(Policy::fifo().backfill.starvation_wait, Dur(0));
    assert_eq!(Policy::default().backfill.starvation_wait, Dur::days(28));
}

const DAY: u64 = 86_400;

/// One 8-GPU node, small work first (the default's order), no starvation guard. At 0, job
/// 1 (8 GPUs for up to 5 days) starts; jobs 2 (8 GPUs, 10 hours), 3 and 4 (8 GPUs, `short`
/// seconds each) wait. At day 5 job 1 ends, and `last` (if any) is submitted a second
/// before. What arrived at 0 then comes to a third of the tenth of the node under which
/// it is quiet.
fn tail_setup(drain_longest_first: bool, short: u64, last: Option<JobSpec>) -> Sim {
    let mut p = weights(|w| w.job_size = 1000);
    p.backfill.starvation_wait = Dur(0);
    p.backfill.drain_longest_first = drain_longest_first;
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), p);
    sim.submit(1, job(1, 8, 5 * DAY), 0);
    assert_eq!(summary(&sim.pass(0)), ["start 1"]);
    sim.submit(2, job(1, 8, 10 * 3600), 0);
    sim.submit(3, job(1, 8, short), 0);
    sim.submit(4, job(1, 8, short), 0);
    if let Some(spec) = last {
        sim.submit(5, spec, 5 * DAY - 1);
    }
    sim.end(1, JobState::Completed, 5 * DAY);
    sim
}

/// Once nothing has arrived for days, the job that would end the backlog last goes first,
/// marked as a starving job is: the backlog ends at 10 hours, not 12.
#[test]
fn once_work_stops_arriving_the_job_the_backlog_waits_on_goes_first() {
    let mut sim = tail_setup(true, 3600, None);
    assert_eq!(
        summary(&sim.pass(5 * DAY)),
        ["start 2", "reserve 3 @468000"]
    );
    let explained = sim
        .s
        .explain(JobId(3), Time(5 * DAY), false)
        .expect("pending");
    assert_eq!(
        (explained.starving_since, explained.ends_backlog),
        (None, false)
    );
    // Without the rule, small work first.
    let mut sim = tail_setup(false, 3600, None);
    assert_eq!(
        summary(&sim.pass(5 * DAY)),
        ["start 3", "reserve 4 @435600"]
    );
    assert!(!Policy::slurm().backfill.drain_longest_first);
    assert!(!Policy::fifo().backfill.drain_longest_first);
    assert!(Policy::default().backfill.drain_longest_first);
}

/// A job marked so while it cannot start yet gets a reservation, and explain says why; of
/// two that outlast the rest, the longer is marked.
#[test]
fn explain_says_a_job_goes_first_because_it_ends_the_backlog() {
    let mut p = weights(|w| w.job_size = 1000);
    p.backfill.starvation_wait = Dur::days(28);
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), p);
    // Job 1 holds both nodes until an hour after day 5. Jobs 2 (10 hours) and 5 (12 hours)
    // each outlast the rest on the two nodes; job 5 is the longer.
    sim.submit(1, job(2, 8, 5 * DAY + 3600), 0);
    assert_eq!(summary(&sim.pass(0)), ["start 1"]);
    sim.submit(2, job(1, 8, 10 * 3600), 0);
    sim.submit(3, job(1, 8, 3600), 0);
    sim.submit(4, job(1, 8, 3600), 0);
    sim.submit(5, job(1, 8, 12 * 3600), 0);
    let ds = sim.pass(5 * DAY);
    assert_eq!(reserved(&ds)[0].job, JobId(5), "{:?}", summary(&ds));
    let explain = |sim: &Sim, id: u64, at: u64| {
        let x = sim.s.explain(JobId(id), Time(at), false).expect("pending");
        (x.starving_since, x.ends_backlog)
    };
    assert_eq!(explain(&sim, 5, 5 * DAY), (Some(Time(0)), true));
    assert_eq!(explain(&sim, 2, 5 * DAY), (None, false));
    // At 28 days the guard marks the longest waiting (a tie, to the lower id), for its wait.
    sim.pass(28 * DAY);
    assert_eq!(explain(&sim, 2, 28 * DAY), (Some(Time(0)), false));
    assert_eq!(explain(&sim, 5, 28 * DAY), (None, false));
}

/// While work still arrives (here 4 hours of the node, a second before), the order stays
/// small work first; and a job shorter than what the rest of the backlog needs (two jobs of
/// 6 hours against its 10) is never put first.
#[test]
fn while_work_arrives_or_the_rest_is_longer_the_order_stays_small_work_first() {
    let mut sim = tail_setup(true, 3600, Some(job(1, 8, 4 * 3600)));
    assert_eq!(
        summary(&sim.pass(5 * DAY)),
        ["start 3", "reserve 4 @435600"]
    );
    let mut sim = tail_setup(true, 6 * 3600, None);
    assert_eq!(
        summary(&sim.pass(5 * DAY)),
        ["start 3", "reserve 4 @453600"]
    );
}

/// What the running jobs have left counts in the rest of the backlog. Two 8-GPU nodes:
/// job 9 holds one until day 5, job 1 the other with a limit of `left` past day 5; jobs 2
/// (10 hours), 3 and 4 (an hour each) wait. At day 5 the rest of job 2's backlog is 2 hours
/// of pending work plus `left` on one node, over two nodes.
#[test]
fn the_running_jobs_remaining_work_counts_in_the_rest_of_the_backlog() {
    let first = |left: Option<u64>| {
        let mut p = weights(|w| w.job_size = 1000);
        p.backfill.starvation_wait = Dur(0);
        let mut sim = Sim::new(Cluster::flat_gpu(2, 8), p);
        sim.submit(1, job(1, 8, left.map_or(0, |l| 5 * DAY + l)), 0);
        sim.submit(9, job(1, 8, 5 * DAY), 0);
        let mut both = started(&sim.pass(0));
        both.sort_unstable();
        assert_eq!(both, [1, 9]);
        sim.submit(2, job(1, 8, 10 * 3600), 0);
        sim.submit(3, job(1, 8, 3600), 0);
        sim.submit(4, job(1, 8, 3600), 0);
        sim.end(9, JobState::Completed, 5 * DAY);
        started(&sim.pass(5 * DAY))
    };
    // An hour left: the rest is (2 + 1) x 8 GPU-hours over 16 GPUs, 1.5 hours: job 2 ends
    // the backlog and goes first.
    assert_eq!(first(Some(3600)), [2]);
    // 20 hours left: (2 + 20) x 8 over 16, 11 hours, longer than job 2: small work first.
    assert_eq!(first(Some(20 * 3600)), [3]);
    // No limit: the backlog's end is unknown, no job is put first.
    assert_eq!(first(None), [3]);
}

#[test]
fn fifo_starts_nothing_behind_a_blocked_job() {
    let mut sim = backfill_setup(Policy::fifo());
    sim.submit(3, job(1, 1, 50), 20);
    assert_eq!(summary(&sim.pass(20)), Vec::<String>::new());
    assert_eq!(sim.pending_reason(2), PendingReason::Resources);
    assert_eq!(sim.pending_reason(3), PendingReason::Priority);
    sim.end(1, JobState::Completed, 100);
    assert_eq!(summary(&sim.pass(100)), ["start 2"]);
    assert_eq!(
        sim.pending_reason(3),
        PendingReason::Resources,
        "now nothing is free"
    );
}

#[test]
fn backfill_disabled_still_starts_what_fits_but_reserves_nothing() {
    let mut p = plain();
    p.backfill.enabled = false;
    let mut sim = backfill_setup(p);
    sim.submit(3, job(1, 1, 1000), 10);
    assert_eq!(summary(&sim.pass(10)), ["start 3"]);
    assert_eq!(sim.s.expected_start(JobId(2)), None);
}

// ---------------------------------------------------------------------------------------
// 3. Priority
// ---------------------------------------------------------------------------------------

/// Only the weight named is non-zero.
fn weights(f: impl FnOnce(&mut PriorityWeights)) -> Policy {
    let mut p = plain();
    f(&mut p.priority);
    p.fairshare.calc_period = Dur(0);
    p
}

#[test]
fn fair_share_ranks_an_account_with_recent_usage_below_an_idle_one() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), weights(|w| w.fairshare = 10_000));
    let busy = |s: JobSpec| with(s, |s| s.account = "busy".into());
    let idle = |s: JobSpec| with(s, |s| s.account = "idle".into());
    sim.submit(1, busy(job(1, 8, 1000)), 0);
    sim.submit(2, idle(job(1, 8, 1000)), 0);
    sim.event(
        Event::Hold {
            id: JobId(2),
            admin: false,
        },
        0,
    );
    assert_eq!(summary(&sim.pass(0)), ["start 1"]);
    assert!(
        sim.s
            .fairshare()
            .assoc_usage(sim.s.job(JobId(2)).unwrap().assoc)
            == 0.0
    );
    // Job 3 (busy) is submitted before job 4 (idle); job 1's usage is charged over time.
    sim.submit(3, busy(job(1, 8, 1000)), 100);
    sim.submit(4, idle(job(1, 8, 1000)), 110);
    sim.pass(200);
    let busy_assoc = sim.s.job(JobId(3)).unwrap().assoc;
    assert!(sim.s.fairshare().assoc_usage(busy_assoc) > 0.0);
    assert!(
        sim.priority(4) > sim.priority(3),
        "idle {} vs busy {}",
        sim.priority(4),
        sim.priority(3)
    );
    assert_eq!((sim.priority(4), sim.priority(3)), (10_000, 5_000));
    sim.end(1, JobState::Completed, 300);
    assert_eq!(started(&sim.pass(300)), [4]);
}

#[test]
fn age_counts_from_eligibility_and_puts_the_longer_eligible_job_first() {
    let mut sim = Sim::new(
        Cluster::flat_gpu(1, 8),
        weights(|w| {
            w.age = 1000;
            w.max_age = Dur(1000);
        }),
    );
    sim.submit(1, job(1, 8, 1000), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    // Job 2 is submitted first but may not begin before t=150; job 3 is eligible at t=100.
    sim.submit(2, with(job(1, 8, 1000), |s| s.begin = Some(Time(150))), 50);
    sim.submit(3, job(1, 8, 1000), 100);
    sim.pass(100);
    assert_eq!(sim.pending_reason(2), PendingReason::BeginTime);
    sim.pass(400);
    assert_eq!(sim.priority(3), 300);
    assert_eq!(
        sim.priority(2),
        1,
        "eligible since t=400 only; priority is at least 1"
    );
    sim.end(1, JobState::Completed, 400);
    assert_eq!(started(&sim.pass(400)), [3]);
}

/// Small work first, then one 8-GPU node that job 1 holds for 10 hours. Job 2 (an hour)
/// waits from 0; job 3 (half an hour, less work) arrives a minute before job 1 ends.
fn expansion_setup(expansion: u32) -> Sim {
    let mut sim = Sim::new(
        Cluster::flat_gpu(1, 8),
        weights(|w| {
            w.age = 5000;
            w.job_size = 5000;
            w.expansion = expansion;
        }),
    );
    sim.submit(1, job(1, 8, 10 * 3600), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    sim.submit(2, job(1, 8, 3600), 0);
    sim.submit(3, job(1, 8, 1800), 10 * 3600 - 60);
    sim.end(1, JobState::Completed, 10 * 3600);
    sim
}

/// The expansion factor puts a short job that has waited ten times its length before a
/// shorter one that has just arrived; without it, the smaller work goes first.
#[test]
fn expansion_puts_the_job_that_waited_longest_against_its_limit_first() {
    let mut sim = expansion_setup(0);
    assert_eq!(started(&sim.pass(10 * 3600)), [3]);
    let mut sim = expansion_setup(8000);
    // Job 2 waited 10 hours against an hour: (10 + 1) / 1 = 11, log2(11) / 8 of the
    // weight; job 3 a minute against half an hour.
    let at = Time(10 * 3600);
    let factor = |sim: &Sim, id| sim.s.factors(JobId(id), at).expect("pending").expansion;
    assert!((factor(&sim, 2) - 11f64.log2() / 8.0).abs() < 1e-12);
    assert!((factor(&sim, 3) - (1860f64 / 1800.0).log2() / 8.0).abs() < 1e-12);
    assert_eq!(started(&sim.pass(10 * 3600)), [2]);
    let explained = sim.s.explain(JobId(3), at, false).expect("pending");
    assert_eq!(
        explained.factors.expect("factors").expansion,
        factor(&sim, 3)
    );
    // A job without a time limit counts `max_age` (14 days): after 14 days, an eighth.
    sim.submit(4, job(1, 8, 0), 10 * 3600);
    let f = sim
        .s
        .factors(JobId(4), Time(10 * 3600 + 14 * DAY))
        .expect("pending");
    assert!((f.expansion - 1.0 / 8.0).abs() < 1e-12, "{f:?}");
    assert_eq!(Policy::default().priority.expansion, 0);
    assert_eq!(Policy::slurm().priority.expansion, 0);
}

/// Default weights but fair-share (one account here), with `largest_first_within` at
/// `within`, on 2 nodes of 8 GPUs: job 1 holds both for an hour; then a 1-GPU job of an
/// hour (2) and a 2-node gang (3) with a limit of `gang_limit` wait.
fn depth_setup(within: Dur, gang_limit: u64) -> Sim {
    behind_job_1(size_policy(within), job(1, 1, 3600), job(2, 8, gang_limit))
}

/// Default weights but fair-share, with `largest_first_within` at `within`.
fn size_policy(within: Dur) -> Policy {
    let mut p = Policy::default();
    p.priority.fairshare = 0;
    p.priority.largest_first_within = within;
    p.fairshare.calc_period = Dur(0);
    p
}

/// On 2 nodes of 8 GPUs under `policy`: job 1 holds both for an hour; then jobs 2 and 3
/// wait.
fn behind_job_1(policy: Policy, two: JobSpec, three: JobSpec) -> Sim {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), policy);
    sim.submit(1, job(2, 8, 3600), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    sim.submit(2, two, 10);
    sim.submit(3, three, 20);
    sim
}

/// While the queued and running work would drain within `largest_first_within`, the larger
/// job goes first; in a deeper backlog (or with the rule off) small work does, and explain
/// says which.
#[test]
fn a_shallow_backlog_goes_largest_first_and_a_deep_one_small_work_first() {
    let (hour, day) = (3600, DAY);
    let order = |within: Dur, gang_limit: u64| {
        let mut sim = depth_setup(within, gang_limit);
        sim.pass(30);
        let flag = |sim: &Sim, id| {
            let x = sim.s.explain(JobId(id), Time(30), false).expect("pending");
            x.largest_first
        };
        let flags = (flag(&sim, 2), flag(&sim, 3));
        sim.end(1, JobState::Completed, hour);
        (summary(&sim.pass(hour)), flags)
    };
    // The gang's day on both nodes, the hour left of job 1 and job 2's hour: 1 day and
    // 1 hour and 1/16 of one, within 2 days.
    assert_eq!(
        order(Dur::days(2), day),
        (
            vec!["start 3".to_string(), "reserve 2 @90000".to_string()],
            (true, true)
        )
    );
    // Three days of gang: deeper than 2 days; the gang gets the reservation.
    assert_eq!(
        order(Dur::days(2), 3 * day),
        (
            vec!["start 2".to_string(), "reserve 3 @7200".to_string()],
            (false, false)
        )
    );
    // Off: small work first however shallow.
    assert_eq!(
        order(Dur(0), day),
        (
            vec!["start 2".to_string(), "reserve 3 @7200".to_string()],
            (false, false)
        )
    );
    // The factor shown is the one the pass used: the job's GPUs over the cluster's.
    let mut sim = depth_setup(Dur::days(2), day);
    sim.pass(30);
    let size = |sim: &Sim, id| {
        sim.s
            .factors(JobId(id), Time(30))
            .expect("pending")
            .job_size
    };
    assert_eq!((size(&sim, 2), size(&sim, 3)), (1.0 / 16.0, 1.0));
    assert_eq!(
        Policy::default().priority.largest_first_within,
        Dur::hours(4)
    );
    assert_eq!(Policy::slurm().priority.largest_first_within, Dur(0));
    assert_eq!(Policy::fifo().priority.largest_first_within, Dur(0));
}

/// On 2 nodes of 8 GPUs, with the policy's `largest_first_within` at `within` and its
/// `largest_first_gaps_percent` at `percent`: job 1 holds both nodes for an hour; then an
/// 8-GPU job of an hour (2, 8 GPU-hours of small work: 8 divides 16) and a 12-GPU gang of 4
/// hours (3, which leaves 4 GPUs idle beside it for 4 hours: 16 GPU-hours of gaps) wait.
fn gaps_setup(within: Dur, percent: u32) -> Sim {
    let mut p = size_policy(within);
    p.priority.largest_first_gaps_percent = percent;
    behind_job_1(p, job(1, 8, 3600), job(3, 4, 4 * 3600))
}

/// While the small work queued is at most `largest_first_gaps_percent` of the gaps the
/// gangs would leave, the gang goes first and the small job fills beside it later; with
/// more small work than that (or the rule off) small work goes first; explain says which.
#[test]
fn a_gang_whose_gaps_the_small_work_cannot_fill_goes_first() {
    let hour = 3600;
    let order = |percent: u32| {
        let mut sim = gaps_setup(Dur(0), percent);
        sim.pass(30);
        let x = sim.s.explain(JobId(3), Time(30), false).expect("pending");
        let flags = (x.largest_first, x.largest_first_for_gaps);
        sim.end(1, JobState::Completed, hour);
        (started(&sim.pass(hour)), flags)
    };
    // 8 GPU-hours of small work, exactly half the 16 of gaps.
    assert_eq!(order(50), (vec![3], (true, true)));
    assert_eq!(order(49), (vec![2], (false, false)));
    assert_eq!(order(0), (vec![2], (false, false)));
    // A shallow backlog says so, not the gaps: its 4.5 hours drain within a day.
    let mut sim = gaps_setup(Dur::days(1), 50);
    sim.pass(30);
    let x = sim.s.explain(JobId(3), Time(30), false).expect("pending");
    assert_eq!((x.largest_first, x.largest_first_for_gaps), (true, false));
    assert_eq!(Policy::default().priority.largest_first_gaps_percent, 50);
    assert_eq!(Policy::slurm().priority.largest_first_gaps_percent, 0);
    assert_eq!(Policy::fifo().priority.largest_first_gaps_percent, 0);
}

/// A pending job without a time limit leaves the backlog's end unknown (never shallow); a
/// held job is not counted, until it is released.
#[test]
fn an_unlimited_job_keeps_the_backlog_deep_and_a_held_one_is_not_counted() {
    let deep = |sim: &Sim| {
        !sim.s
            .explain(JobId(3), Time(40), false)
            .expect("pending")
            .largest_first
    };
    let mut sim = depth_setup(Dur::days(2), DAY);
    sim.submit(4, job(1, 1, 0), 25);
    sim.pass(40);
    assert!(deep(&sim), "a job without a limit");
    let mut sim = depth_setup(Dur::days(2), DAY);
    sim.submit(4, job(2, 8, 30 * DAY), 25);
    sim.event(
        Event::Hold {
            id: JobId(4),
            admin: false,
        },
        25,
    );
    sim.pass(40);
    assert!(!deep(&sim), "held: not counted");
    sim.event(Event::Release { id: JobId(4) }, 40);
    sim.pass(40);
    assert!(deep(&sim), "released: 30 days of both nodes");
    sim.s.check_invariants().expect("invariants");
}

/// The running jobs' work counts by what is left of their limits; when the depth turns a
/// partition's size factor round, every priority is computed again (this policy weighs no
/// fair-share, so a priority is otherwise kept while only age moves it).
#[test]
fn running_work_sets_the_depth_and_a_flip_computes_every_priority_again() {
    let mut sim = depth_setup(Dur::days(2), DAY);
    let agrees = |sim: &Sim, id: u64, at: u64| {
        let x = sim.s.explain(JobId(id), Time(at), false).expect("pending");
        let weights = &Policy::default().priority;
        let mut w = weights.clone();
        w.fairshare = 0;
        (
            x.largest_first,
            x.priority == w.priority(&x.factors.expect("factors")),
        )
    };
    sim.pass(30);
    assert_eq!(agrees(&sim, 3, 30), (true, true));
    // Job 1's limit raised to 3 days on both nodes: deeper than 2 days.
    sim.event(
        Event::SetTimeLimit {
            id: JobId(1),
            limit: Dur(3 * DAY),
        },
        40,
    );
    sim.pass(40);
    assert_eq!(agrees(&sim, 3, 40), (false, true));
    assert_eq!(agrees(&sim, 2, 40), (false, true));
    // Cut back below its run time: nothing left of it, shallow again.
    sim.event(
        Event::SetTimeLimit {
            id: JobId(1),
            limit: Dur(10),
        },
        50,
    );
    sim.pass(50);
    assert_eq!(agrees(&sim, 3, 50), (true, true));
    sim.s.check_invariants().expect("invariants");
}

/// Two partitions on their own nodes (`a`: n1-n2, `b`: n3-n4, 8 GPUs each).
const TWO_PARTS: &str = g8_cluster!(
    "parts",
    "n[1-4]",
    r#"
[[partition]]
name = "a"
nodes = "n[1-2]"
default = true

[[partition]]
name = "b"
nodes = "n[3-4]"
"#
);

/// Each partition's depth is its own: in `a` the waiting gang's day keeps the backlog
/// within 2 days and it goes first; in `b` the same queue with a 4-day gang is deep and
/// the 1-GPU job goes first, in the same pass. Neither partition's work counts in the
/// other's, and the job-size factor shown is the one the pass used in each.
#[test]
fn each_partition_is_shallow_or_deep_by_its_own_backlog() {
    let mut p = Policy::default();
    p.priority.fairshare = 0;
    p.priority.largest_first_within = Dur::days(2);
    p.fairshare.calc_period = Dur(0);
    // A reservation for each blocked job, so that one partition's cannot hide the other's.
    p.backfill.reservation_depth = 4;
    let mut sim = Sim::new(load(TWO_PARTS), p);
    let on_b = |s: JobSpec| with(s, |s| s.partition = Some("b".into()));
    sim.submit(1, job(2, 8, 3600), 0);
    sim.submit(11, on_b(job(2, 8, 3600)), 0);
    assert_eq!(started(&sim.pass(0)), [1, 11]);
    sim.submit(2, job(1, 1, 3600), 10);
    sim.submit(3, job(2, 8, DAY), 20);
    sim.submit(12, on_b(job(1, 1, 3600)), 10);
    sim.submit(13, on_b(job(2, 8, 4 * DAY)), 20);
    sim.pass(30);
    let view = |sim: &Sim, id: u64| {
        let x = sim.s.explain(JobId(id), Time(30), false).expect("pending");
        (x.largest_first, x.factors.expect("factors").job_size)
    };
    // The cluster's 32 GPUs: the gang's 16 are half of them, shown as is in `a`; in `b`
    // the factor favours small work (the 1-GPU hour above the gang's 4 days). Counted
    // together, the two would be 2.5 days deep, over both partitions' GPUs.
    assert_eq!(view(&sim, 3), (true, 0.5));
    assert_eq!(view(&sim, 2), (true, 1.0 / 32.0));
    let (b_gang, b_small) = (view(&sim, 13), view(&sim, 12));
    assert!(!b_gang.0 && !b_small.0, "{b_gang:?} {b_small:?}");
    assert!(b_small.1 > b_gang.1, "{b_small:?} {b_gang:?}");
    sim.end(1, JobState::Completed, 3600);
    sim.end(11, JobState::Completed, 3600);
    let mut decided = summary(&sim.pass(3600));
    decided.sort();
    assert_eq!(
        decided,
        [
            "reserve 13 @7200",
            "reserve 2 @90000",
            "start 12",
            "start 3"
        ]
    );
    sim.s.check_invariants().expect("invariants");
}

#[test]
fn qos_factor_orders_jobs_by_qos_priority() {
    let mut p = weights(|w| w.qos = 2000);
    p.qos = vec![
        QosConfig {
            name: "normal".into(),
            priority: 10,
            preempt: vec![],
        },
        QosConfig {
            name: "high".into(),
            priority: 40,
            preempt: vec![],
        },
    ];
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), p);
    sim.submit(1, job(1, 8, 100), 0);
    sim.pass(0);
    sim.submit(
        2,
        with(job(1, 8, 100), |s| s.qos = Some("normal".into())),
        1,
    );
    sim.submit(3, with(job(1, 8, 100), |s| s.qos = Some("high".into())), 2);
    sim.pass(10);
    assert_eq!((sim.priority(2), sim.priority(3)), (500, 2000));
    sim.end(1, JobState::Completed, 100);
    assert_eq!(started(&sim.pass(100)), [3]);
}

#[test]
fn partition_factor_scales_by_the_highest_partition_factor() {
    let toml = TWO_TIERS.replace(
        "priority_tier = 2\npriority_job_factor = 1",
        "priority_tier = 1\npriority_job_factor = 4",
    );
    let mut sim = Sim::new(load(&toml), weights(|w| w.partition = 1000));
    sim.submit(1, job(2, 8, 100), 0);
    sim.pass(0);
    sim.submit(2, job(1, 8, 100), 1);
    sim.submit(
        3,
        with(job(1, 8, 100), |s| s.partition = Some("hi".into())),
        2,
    );
    sim.pass(10);
    assert_eq!((sim.priority(2), sim.priority(3)), (250, 1000));
    sim.end(1, JobState::Completed, 100);
    let ds = sim.pass(100);
    assert_eq!(
        started(&ds),
        [3, 2],
        "both fit; the higher priority is decided first"
    );
}

#[test]
fn nice_lowers_priority_and_can_be_changed_while_pending() {
    // One user: the fair-share factor is 1.0 for all its jobs.
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), weights(|w| w.fairshare = 1000));
    sim.submit(1, job(1, 8, 100), 0);
    sim.pass(0);
    sim.submit(2, job(1, 8, 100), 1);
    sim.submit(3, with(job(1, 8, 100), |s| s.nice = 50), 2);
    sim.event(
        Event::SetNice {
            id: JobId(2),
            nice: 300,
        },
        5,
    );
    sim.pass(10);
    assert_eq!((sim.priority(2), sim.priority(3)), (700, 950));
    sim.end(1, JobState::Completed, 100);
    assert_eq!(started(&sim.pass(100)), [3]);
    assert!(matches!(
        sim.try_event(
            Event::SetNice {
                id: JobId(3),
                nice: 1
            },
            101
        ),
        Err(CoreError::WrongState { .. })
    ));
}

/// Without fair-share a pending job's priority is kept between passes while only its age
/// could move it (under `fifo`'s weights, for hours); a change to the job itself still
/// moves it at the next pass.
#[test]
fn a_priority_kept_between_passes_follows_a_change_to_its_job() {
    let mut sim = Sim::new(
        Cluster::flat_gpu(1, 8),
        weights(|w| {
            w.age = 1000;
            w.max_age = Dur::days(365);
            w.job_size = 1000;
            w.favor_small = false;
            w.size_basis = SizeBasis::Resources;
        }),
    );
    sim.submit(1, job(1, 8, 100), 0);
    sim.pass(0);
    // The whole cluster: a job-size factor of 1.
    sim.submit(2, job(1, 8, 100), 1);
    sim.pass(10);
    assert_eq!(sim.priority(2), 1000);
    sim.pass(20);
    assert_eq!(sim.priority(2), 1000, "ten seconds of age round to nothing");
    sim.event(
        Event::SetNice {
            id: JobId(2),
            nice: 300,
        },
        25,
    );
    sim.pass(30);
    assert_eq!(sim.priority(2), 700);
    // Nine hours of waiting add one (1000 x 9 h / 365 days = 1.03).
    sim.pass(10 + 9 * 3600);
    assert_eq!(sim.priority(2), 701);
}

#[test]
fn higher_partition_tier_goes_first_whatever_the_multifactor_priority() {
    let mut p = weights(|w| w.qos = 2000);
    p.qos = vec![QosConfig {
        name: "high".into(),
        priority: 10,
        preempt: vec![],
    }];
    let mut sim = Sim::new(load(TWO_TIERS), p);
    let hi = |s: JobSpec| with(s, |s| s.partition = Some("hi".into()));
    sim.submit(1, hi(job(2, 8, 100)), 0);
    sim.pass(0);
    sim.submit(2, with(job(1, 8, 100), |s| s.qos = Some("high".into())), 1);
    sim.submit(3, hi(job(1, 8, 100)), 2);
    sim.submit(4, job(1, 8, 100), 3);
    let ds = sim.pass(10);
    assert!(started(&ds).is_empty());
    assert!(sim.priority(2) > sim.priority(3));
    sim.end(1, JobState::Completed, 100);
    assert_eq!(started(&sim.pass(100)), [3, 2]);
}

#[test]
fn higher_priority_class_goes_first_whatever_the_multifactor_priority() {
    let mut p = preempting();
    p.priority_class[1].preempting = false;
    p.priority.age = 1000;
    p.priority.max_age = Dur(100);
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), p);
    sim.submit(1, job(1, 8, 1000), 0);
    sim.pass(0);
    sim.submit(
        2,
        with(job(1, 8, 100), |s| s.priority_class = Some("low".into())),
        1,
    );
    sim.pass(1);
    sim.submit(
        3,
        with(job(1, 8, 100), |s| s.priority_class = Some("high".into())),
        500,
    );
    sim.pass(500);
    assert!(sim.priority(2) > sim.priority(3));
    sim.end(1, JobState::Completed, 600);
    assert_eq!(started(&sim.pass(600)), [3]);
}

// ---------------------------------------------------------------------------------------
// 4. Preemption
// ---------------------------------------------------------------------------------------

/// Four low-class 2-GPU jobs on one 8-GPU node, started at t=0, 10, 20, 30 (ids 1..=4).
fn four_low_jobs(policy: Policy) -> Sim {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), policy);
    for i in 0..4u64 {
        let low = with(job(1, 2, 10_000), |s| s.priority_class = Some("low".into()));
        sim.submit(i + 1, low, i * 10);
        assert_eq!(started(&sim.pass(i * 10)), [i + 1]);
    }
    sim
}

fn high(spec: JobSpec) -> JobSpec {
    with(spec, |s| s.priority_class = Some("high".into()))
}

#[test]
fn high_class_preempts_the_fewest_most_recently_started_victims() {
    let mut sim = four_low_jobs(preempting());
    sim.submit(5, high(job(1, 4, 1000)), 100);
    let ds = sim.pass(100);
    assert_eq!(
        ds,
        [
            Decision::Preempt {
                victim: JobId(4),
                by: JobId(5),
                mode: PreemptMode::Requeue,
                grace: Dur(30),
            },
            Decision::Preempt {
                victim: JobId(3),
                by: JobId(5),
                mode: PreemptMode::Requeue,
                grace: Dur(30),
            },
        ]
    );
    assert_eq!(sim.state(4), JobState::Preempting);
    assert_eq!(sim.state(3), JobState::Preempting);
    assert_eq!(sim.state(2), JobState::Running);
    assert_eq!(sim.reason(5), "Resources");
    assert_eq!(sim.pending_reason(5), PendingReason::Preempting);
    // Nothing starts and nothing more is preempted while the victims stop.
    assert!(sim.pass(110).is_empty());
    sim.end(4, JobState::Cancelled, 120);
    sim.end(3, JobState::Cancelled, 125);
    assert_eq!(started(&sim.pass(130)), [5]);
    assert_eq!(sim.state(3), JobState::Pending);
    assert_eq!(sim.s.job(JobId(3)).unwrap().requeues, 1);
}

/// Regression: a victim that ended before the others was requeued and, in the next pass,
/// restarted on the very resources it had freed for its preemptor (the preemptor waits for
/// its other victims and is skipped), so the preemptor never got them.
#[test]
fn resources_freed_by_a_victim_are_kept_for_the_preemptor_until_all_victims_end() {
    let mut sim = four_low_jobs(preempting());
    sim.submit(5, high(job(1, 4, 1000)), 100);
    assert_eq!(sim.pass(100).len(), 2);
    sim.end(4, JobState::Cancelled, 110);
    assert_eq!(sim.state(4), JobState::Pending);
    let ds = sim.pass(110);
    assert!(
        started(&ds).is_empty(),
        "job 4 restarted on its freed GPUs: {ds:?}"
    );
    sim.end(3, JobState::Cancelled, 120);
    assert_eq!(started(&sim.pass(120)), [5]);
}

#[test]
fn preempted_victim_ends_preempted_without_requeue_or_in_cancel_mode() {
    // RequeuePolicy::Never on the victim.
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), preempting());
    let low = with(job(1, 8, 10_000), |s| {
        s.priority_class = Some("low".into());
        s.requeue = RequeuePolicy::Never;
    });
    sim.submit(1, low, 0);
    sim.pass(0);
    sim.submit(2, high(job(1, 8, 100)), 10);
    assert_eq!(summary(&sim.pass(10)), ["preempt 1 by 2"]);
    sim.end(1, JobState::Cancelled, 20);
    assert_eq!(sim.state(1), JobState::Preempted);

    // PreemptMode::Cancel in the policy.
    let mut p = preempting();
    p.preemption.mode = PreemptMode::Cancel;
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), p);
    sim.submit(
        1,
        with(job(1, 8, 10_000), |s| s.priority_class = Some("low".into())),
        0,
    );
    sim.pass(0);
    sim.submit(2, high(job(1, 8, 100)), 10);
    assert_eq!(
        sim.pass(10),
        [Decision::Preempt {
            victim: JobId(1),
            by: JobId(2),
            mode: PreemptMode::Cancel,
            grace: Dur(30),
        }]
    );
    sim.end(1, JobState::Cancelled, 20);
    assert_eq!(sim.state(1), JobState::Preempted);
    assert_eq!(started(&sim.pass(20)), [2]);
}

#[test]
fn non_preemptible_and_exempt_jobs_are_not_chosen() {
    let mut p = preempting();
    p.preemption.exempt_time = Dur(50);
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), p);
    let low = |s: JobSpec| with(s, |s| s.priority_class = Some("low".into()));
    sim.submit(
        1,
        low(with(job(1, 4, 10_000), |s| s.preemptible = false)),
        0,
    );
    sim.pass(0);
    sim.submit(2, low(job(1, 2, 10_000)), 0);
    sim.pass(0); // job 2 may be preempted from t=50
    sim.submit(3, low(job(1, 2, 10_000)), 40);
    sim.pass(40); // job 3 from t=90
    sim.submit(4, high(job(1, 2, 100)), 60);
    // Job 3 is cheaper (started last) but exempt; job 1 is not preemptible.
    assert_eq!(summary(&sim.pass(60)), ["preempt 2 by 4"]);
}

#[test]
fn nothing_is_preempted_when_even_all_candidates_would_not_make_room() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), preempting());
    let low = |s: JobSpec| with(s, |s| s.priority_class = Some("low".into()));
    sim.submit(1, low(with(job(1, 4, 1000), |s| s.preemptible = false)), 0);
    sim.submit(2, low(job(1, 4, 1000)), 0);
    assert_eq!(started(&sim.pass(0)), [1, 2]);
    sim.submit(3, high(job(1, 8, 100)), 10);
    assert_eq!(summary(&sim.pass(10)), ["reserve 3 @1000"]);
    assert_eq!(sim.state(2), JobState::Running);
    assert_eq!(sim.pending_reason(3), PendingReason::Resources);
}

#[test]
fn qos_preempt_list_lets_a_qos_preempt_another() {
    let mut p = plain();
    p.qos = vec![
        QosConfig {
            name: "scavenger".into(),
            priority: 0,
            preempt: vec![],
        },
        QosConfig {
            name: "normal".into(),
            priority: 0,
            preempt: vec![],
        },
        QosConfig {
            name: "urgent".into(),
            priority: 0,
            preempt: vec!["scavenger".into()],
        },
    ];
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), p);
    let qos = |s: JobSpec, q: &str| with(s, |s| s.qos = Some(q.into()));
    sim.submit(1, qos(job(1, 4, 1000), "normal"), 0);
    sim.submit(2, qos(job(1, 4, 1000), "scavenger"), 0);
    assert_eq!(started(&sim.pass(0)), [1, 2]);
    // A normal job preempts nobody; an urgent one preempts the scavenger.
    sim.submit(3, qos(job(1, 4, 100), "normal"), 10);
    assert_eq!(summary(&sim.pass(10)), ["reserve 3 @1000"]);
    sim.event(Event::Cancel { id: JobId(3) }, 11);
    sim.submit(4, qos(job(1, 4, 100), "urgent"), 11);
    assert_eq!(summary(&sim.pass(11)), ["preempt 2 by 4"]);
}

#[test]
fn higher_partition_tier_preempts_a_lower_tier() {
    let mut sim = Sim::new(load(TWO_TIERS), plain());
    sim.submit(1, job(2, 8, 1000), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    sim.submit(
        2,
        with(job(1, 8, 100), |s| s.partition = Some("hi".into())),
        10,
    );
    assert_eq!(summary(&sim.pass(10)), ["preempt 1 by 2"]);
    sim.end(1, JobState::Cancelled, 20);
    let ds = sim.pass(20);
    assert_eq!(started(&ds), [2]);
}

#[test]
fn partition_tier_preemption_can_be_turned_off() {
    let mut p = plain();
    p.preemption.partition_tier = false;
    let mut sim = Sim::new(load(TWO_TIERS), p);
    sim.submit(1, job(2, 8, 1000), 0);
    sim.pass(0);
    sim.submit(
        2,
        with(job(1, 8, 100), |s| s.partition = Some("hi".into())),
        10,
    );
    assert_eq!(summary(&sim.pass(10)), ["reserve 2 @1000"]);
}

// ---------------------------------------------------------------------------------------
// 5. Quotas
// ---------------------------------------------------------------------------------------

/// Queues `qa` (account `a`) and `qb` (account `b`) in cohort `c`, 4 GPUs nominal each;
/// `qa` may borrow 2 GPUs; users of `qb` may use 3 GPUs each.
fn quota_policy() -> Policy {
    let mut p = plain();
    p.quotas = QuotaConfig {
        queues: vec![
            QueueConfig {
                name: "qa".into(),
                cohort: Some("c".into()),
                nominal: QuotaAmounts::gpus(4),
                borrowing_limit: Some(QuotaAmounts::gpus(2)),
                lending_limit: None,
                capability: None,
                weight: 1,
                accounts: vec!["a".into()],
                max_per_user: None,
                max_running_jobs_per_user: None,
            },
            QueueConfig {
                name: "qb".into(),
                cohort: Some("c".into()),
                nominal: QuotaAmounts::gpus(4),
                borrowing_limit: None,
                lending_limit: None,
                capability: None,
                weight: 1,
                accounts: vec!["b".into()],
                max_per_user: Some(QuotaAmounts::gpus(3)),
                max_running_jobs_per_user: None,
            },
        ],
        accounts: vec![],
        namespaces: Vec::new(),
    };
    p
}

fn acct(spec: JobSpec, account: &str, user: &str) -> JobSpec {
    with(spec, |s| {
        s.account = account.into();
        s.user = user.into();
    })
}

#[test]
fn queue_borrows_from_an_idle_cohort_member_up_to_its_borrowing_limit() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), quota_policy());
    sim.submit(1, acct(job(1, 4, 1000), "a", "u"), 0);
    sim.submit(2, acct(job(1, 2, 1000), "a", "u"), 1);
    sim.submit(3, acct(job(1, 1, 1000), "a", "u"), 2);
    assert_eq!(started(&sim.pass(10)), [1, 2]);
    let qa = sim.s.quota().queue_ix("qa").unwrap();
    assert_eq!(sim.s.quota().used(qa).gpu_milli, 6000);
    assert_eq!(sim.s.quota().borrowed(qa).gpu_milli, 2000);
    assert_eq!(sim.reason(3), "QOSGrpGRES");
    // Released on end: the blocked job starts.
    sim.end(2, JobState::Completed, 20);
    assert_eq!(started(&sim.pass(20)), [3]);
    assert_eq!(sim.s.quota().used(qa).gpu_milli, 5000);
}

#[test]
fn borrowed_quota_is_not_available_to_the_lender_beyond_what_is_left() {
    let mut policy = quota_policy();
    policy.preemption.reclaim_within_cohort = false;
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), policy);
    sim.submit(1, acct(job(1, 6, 1000), "a", "u"), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    // qb lent 2 of its 4 GPUs; a 3-GPU job of qb does not fit the cohort's quota.
    sim.submit(2, acct(job(1, 3, 1000), "b", "v"), 10);
    sim.submit(3, acct(job(1, 2, 1000), "b", "w"), 11);
    assert_eq!(started(&sim.pass(20)), [3]);
    assert_eq!(sim.reason(2), "CohortQuotaExhausted");
}

/// Kueue's reclaimWithinCohort: the lender takes its lent quota back by preempting the
/// borrower's job, and starts once that job has stopped.
#[test]
fn a_lender_reclaims_its_quota_by_preempting_the_borrower() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), quota_policy());
    sim.submit(1, acct(job(1, 6, 1000), "a", "u"), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    sim.submit(2, acct(job(1, 3, 1000), "b", "v"), 10);
    let d = sim.pass(20);
    assert!(
        d.iter().any(|d| matches!(
            d,
            Decision::Preempt {
                victim: JobId(1),
                by: JobId(2),
                ..
            }
        )),
        "{d:?}"
    );
    assert!(started(&d).is_empty());
    assert_eq!(sim.pending_reason(2), PendingReason::Preempting);
    sim.end(1, JobState::Cancelled, 30);
    assert_eq!(sim.state(1), JobState::Pending, "the borrower is requeued");
    assert_eq!(started(&sim.pass(31)), [2]);
    // The requeued borrower may not borrow past what the lender now uses.
    assert_eq!(sim.reason(1), "CohortQuotaExhausted");
}

#[test]
fn per_user_limit_holds_one_user_but_not_another() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), quota_policy());
    sim.submit(1, acct(job(1, 2, 1000), "b", "v"), 0);
    sim.submit(2, acct(job(1, 2, 1000), "b", "v"), 1);
    sim.submit(3, acct(job(1, 2, 1000), "b", "w"), 2);
    assert_eq!(started(&sim.pass(10)), [1, 3]);
    assert_eq!(sim.reason(2), "QOSMaxGRESPerUser");
}

#[test]
fn quota_counts_the_whole_gang() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), quota_policy());
    // Each task (3 GPUs) is within qa's 6-GPU ceiling; the gang (9) is not.
    sim.submit(1, acct(job(3, 3, 1000), "a", "u"), 0);
    assert!(started(&sim.pass(0)).is_empty());
    assert_eq!(sim.reason(1), "QOSGrpGRES");
    assert_eq!(sim.free(0), full_gpu_node());
}

/// Regression: an elastic gang was placed at its full size, found above its quota on the
/// recheck, and left pending, although a smaller size within its quota fitted.
#[test]
fn elastic_gang_is_admitted_at_the_largest_size_its_quota_allows() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), quota_policy());
    let elastic = with(acct(job(4, 2, 1000), "a", "u"), |s| {
        s.groups[0].min_count = Some(2)
    });
    sim.submit(1, elastic, 0);
    let ds = sim.pass(0);
    assert_eq!(started(&ds), [1]);
    // qa's ceiling is 6 GPUs (4 nominal + 2 borrowed): 3 workers of 2 GPUs.
    let Decision::Start { allocation, .. } = &ds[0] else {
        unreachable!()
    };
    assert_eq!(allocation.tasks.len(), 3);
    let qa = sim.s.quota().queue_ix("qa").unwrap();
    assert_eq!(sim.s.quota().used(qa).gpu_milli, 6000);
}

// Replacing the quotas while gangs run (Kubernetes queue objects applied at runtime).

fn set_quotas(sim: &mut Sim, quotas: QuotaConfig, now: u64) {
    let ds = sim.event(
        Event::SetQuotas {
            quotas: Box::new(quotas),
        },
        now,
    );
    assert!(ds.is_empty(), "replacing quotas stops nothing: {ds:?}");
}

/// One queue `q` in no cohort with `gpus` GPUs nominal, named by the jobs of [`in_q`].
fn one_queue(gpus: u64) -> QuotaConfig {
    QuotaConfig {
        queues: vec![QueueConfig {
            name: "q".into(),
            cohort: None,
            nominal: QuotaAmounts::gpus(gpus),
            borrowing_limit: None,
            lending_limit: None,
            capability: None,
            weight: 1,
            accounts: vec![],
            max_per_user: None,
            max_running_jobs_per_user: None,
        }],
        accounts: vec![],
        namespaces: vec![],
    }
}

fn in_q(spec: JobSpec) -> JobSpec {
    with(spec, |s| s.queue = Some("q".into()))
}

fn in_ns(spec: JobSpec, namespace: &str) -> JobSpec {
    with(spec, |s| s.namespace = Some(namespace.into()))
}

#[test]
fn a_namespace_quota_holds_a_whole_gang_above_it_and_not_other_namespaces() {
    let mut policy = plain();
    policy.quotas.namespaces = vec![NamespaceQuotaConfig {
        namespace: "team".into(),
        name: "gpu-quota".into(),
        hard: QuotaAmounts::gpus(16),
    }];
    let mut sim = Sim::new(Cluster::flat_gpu(6, 8), policy);
    // A Volcano-style gang of 8 one-GPU workers fits the 16 GPUs.
    sim.submit(1, in_ns(job(8, 1, 1000), "team"), 0);
    // 3 x 6 GPUs would make 26 of 16: it waits whole, naming the quota.
    sim.submit(2, in_ns(job(3, 6, 1000), "team"), 0);
    // The same gang in another namespace, or in none, is not limited by it.
    sim.submit(3, in_ns(job(3, 6, 1000), "other"), 0);
    sim.submit(4, job(1, 6, 1000), 0);
    assert_eq!(started(&sim.pass(0)), [1, 3, 4]);
    assert_eq!(sim.reason(2), "NamespaceQuota");
    let why = sim.s.reason_detail(JobId(2)).expect("a detail");
    assert!(
        why.contains("exceeded quota: gpu-quota in namespace team, requested: 18 gpus, used: 8 gpus, limited: 16 gpus"),
        "{why}"
    );
    // 18 GPUs never fit 16: the gang still waits whole once the first has ended, and a
    // gang of 12 in the namespace starts.
    sim.end(1, JobState::Completed, 10);
    sim.submit(5, in_ns(job(2, 6, 1000), "team"), 10);
    assert_eq!(started(&sim.pass(10)), [5]);
    assert_eq!(sim.reason(2), "NamespaceQuota");
}

#[test]
fn priority_classes_added_at_run_time_rank_jobs_and_cannot_go_while_used() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    let class = |name: &str, value: i32| PriorityClassConfig {
        name: name.into(),
        value,
        preempting: false,
    };
    let refused = sim
        .try_event(
            Event::Submit {
                id: JobId(1),
                spec: Box::new(with(job(1, 8, 100), |s| {
                    s.priority_class = Some("urgent".into())
                })),
            },
            0,
        )
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("priority class `urgent` does not exist"),
        "{refused}"
    );
    sim.event(
        Event::SetPriorityClasses {
            classes: vec![class("urgent", 1000), class("batch", 10)],
        },
        0,
    );
    sim.submit(1, job(1, 8, 100), 0);
    sim.submit(
        2,
        with(job(1, 8, 100), |s| s.priority_class = Some("batch".into())),
        1,
    );
    sim.submit(
        3,
        with(job(1, 8, 100), |s| s.priority_class = Some("urgent".into())),
        2,
    );
    assert_eq!(started(&sim.pass(3)), [3], "the highest class first");
    let err = sim
        .try_event(
            Event::SetPriorityClasses {
                classes: vec![class("urgent", 1000)],
            },
            4,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the priority classes are invalid: priority class `batch` is in use by job 2, which has \
         not ended"
    );
    let twice = Event::SetPriorityClasses {
        classes: vec![class("urgent", 1), class("urgent", 2), class("batch", 10)],
    };
    assert!(
        sim.try_event(twice, 4)
            .unwrap_err()
            .to_string()
            .contains("given twice")
    );
    sim.end(3, JobState::Completed, 5);
    assert_eq!(started(&sim.pass(5)), [2]);
    sim.end(2, JobState::Completed, 6);
    sim.event(Event::SetPriorityClasses { classes: vec![] }, 7);
    assert_eq!(sim.state(1), JobState::Pending);
}

#[test]
fn a_lowered_quota_keeps_running_gangs_and_holds_new_ones_until_raised() {
    let mut policy = plain();
    policy.quotas = one_queue(8);
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), policy);
    sim.submit(1, in_q(job(1, 6, 1000)), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    // Lowered below what runs: the gang stays, counted above the new quota.
    set_quotas(&mut sim, one_queue(4), 10);
    assert_eq!(sim.state(1), JobState::Running);
    let q = sim.s.quota().queue_ix("q").unwrap();
    assert_eq!(sim.s.quota().used(q).gpu_milli, 6000);
    sim.submit(2, in_q(job(1, 1, 1000)), 11);
    assert!(started(&sim.pass(12)).is_empty());
    assert_eq!(sim.reason(2), "QOSGrpGRES");
    let detail = sim
        .s
        .reason_detail(JobId(2))
        .expect("a quota reason is detailed");
    assert!(
        detail.contains("queue `q` would use 7 gpus, above its nominal quota of 4 gpus"),
        "{detail}"
    );
    // Raised: the waiting job starts at the next pass.
    set_quotas(&mut sim, one_queue(8), 20);
    assert_eq!(started(&sim.pass(21)), [2]);
}

/// Regression: the active jobs are a hashed set, and counting them in the new quotas in
/// its order marked arbitrary jobs over the quota; they are counted in id order, so the
/// latest jobs are the ones over it.
#[test]
fn a_lowered_quota_counts_the_running_jobs_in_id_order() {
    let mut policy = plain();
    policy.quotas = one_queue(32);
    let mut sim = Sim::new(Cluster::flat_gpu(4, 8), policy);
    for id in 1..=32 {
        sim.submit(id, in_q(job(1, 1, 1000)), 0);
    }
    assert_eq!(started(&sim.pass(0)).len(), 32);
    set_quotas(&mut sim, one_queue(16), 10);
    let over: Vec<u64> = (1..=32)
        .filter(|&id| sim.s.is_over_quota(JobId(id)))
        .collect();
    assert_eq!(over, (17..=32).collect::<Vec<u64>>());
}

#[test]
fn a_gang_over_a_lowered_quota_admits_nothing_new_until_it_ends() {
    let mut policy = plain();
    policy.quotas = one_queue(8);
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), policy);
    sim.submit(1, in_q(job(1, 6, 1000)), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    set_quotas(&mut sim, one_queue(4), 10);
    sim.submit(2, in_q(job(1, 4, 1000)), 11);
    assert!(started(&sim.pass(12)).is_empty());
    sim.end(1, JobState::Completed, 50);
    assert_eq!(started(&sim.pass(51)), [2]);
}

#[test]
fn a_deleted_queue_leaves_its_pending_jobs_waiting_with_a_reason_until_it_returns() {
    let mut policy = plain();
    policy.quotas = one_queue(8);
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), policy);
    sim.submit(1, in_q(job(1, 8, 1000)), 0);
    sim.submit(2, in_q(job(1, 4, 1000)), 1);
    assert_eq!(started(&sim.pass(2)), [1]);
    set_quotas(&mut sim, QuotaConfig::default(), 10);
    // The running gang goes on, counted in no queue; the pending one waits, and why.
    assert_eq!(sim.state(1), JobState::Running);
    assert!(started(&sim.pass(11)).is_empty(), "free GPUs do not matter");
    assert_eq!(sim.pending_reason(2), PendingReason::InvalidQueue);
    assert_eq!(sim.reason(2), "InvalidQueue");
    let detail = sim.s.reason_detail(JobId(2)).unwrap();
    assert!(detail.contains("queue `q` does not exist"), "{detail}");
    // A new job naming it is taken and waits too, as Kubernetes takes a workload before
    // its queue.
    sim.submit(3, in_q(job(1, 1, 1000)), 12);
    assert!(started(&sim.pass(12)).is_empty());
    assert_eq!(sim.pending_reason(3), PendingReason::InvalidQueue);
    // Back with room for both: job 1 counts in it again, and jobs 2 and 3 start.
    set_quotas(&mut sim, one_queue(13), 20);
    let q = sim.s.quota().queue_ix("q").unwrap();
    assert_eq!(sim.s.quota().used(q).gpu_milli, 8000);
    assert_eq!(started(&sim.pass(21)), [2, 3]);
}

#[test]
fn a_pending_job_routed_to_its_queue_takes_the_queue_and_the_node_labels() {
    let mut policy = plain();
    policy.quotas = one_queue(4);
    let cluster = load(
        r#"
version = 1
name = "pools"

[[shape]]
name = "g8"
cores = 16
memory = "64G"
gpus = 8
gpu_model = "h100"
gpu_memory = "80G"

[[nodes]]
names = "a1"
shape = "g8"
labels = { pool = "a" }

[[nodes]]
names = "b1"
shape = "g8"
labels = { pool = "b" }

[[partition]]
name = "all"
nodes = "ALL"
default = true
"#,
    );
    let mut sim = Sim::new(cluster, policy);
    // Waiting in a queue that no quota has (a LocalQueue not yet applied).
    sim.submit(
        1,
        with(job(1, 2, 1000), |s| s.queue = Some("ns/lq".into())),
        0,
    );
    assert!(started(&sim.pass(0)).is_empty());
    assert_eq!(sim.pending_reason(1), PendingReason::InvalidQueue);
    sim.event(
        Event::Route {
            id: JobId(1),
            queue: Some("q".into()),
            node_selector: vec![("pool".into(), "b".into())],
        },
        1,
    );
    assert_eq!(started(&sim.pass(1)), [1]);
    assert_eq!(sim.nodes_of(1), [1], "on the flavor's nodes");
    let q = sim.s.quota().queue_ix("q").unwrap();
    assert_eq!(
        sim.s.quota().used(q).gpu_milli,
        2000,
        "counted in its queue"
    );
    // Only a pending job is routed.
    let refused = sim.try_event(
        Event::Route {
            id: JobId(1),
            queue: None,
            node_selector: vec![],
        },
        2,
    );
    assert!(refused.is_err(), "{refused:?}");
}

#[test]
fn an_invalid_quota_configuration_is_refused_and_changes_nothing() {
    let mut policy = plain();
    policy.quotas = one_queue(8);
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), policy);
    sim.submit(1, in_q(job(1, 6, 1000)), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    let mut bad = one_queue(4);
    bad.queues[0].borrowing_limit = Some(QuotaAmounts::gpus(1));
    let refused = sim.try_event(
        Event::SetQuotas {
            quotas: Box::new(bad.clone()),
        },
        10,
    );
    assert_eq!(
        refused,
        Err(CoreError::InvalidQuotas {
            what: "queue `q` sets borrowing_limit but is in no cohort; only cohort members \
                   borrow or lend"
                .into()
        })
    );
    assert!(sim.s.validate_quotas(&bad).is_err());
    assert_eq!(sim.s.policy().quotas, one_queue(8));
    let q = sim.s.quota().queue_ix("q").unwrap();
    assert_eq!(sim.s.quota().used(q).gpu_milli, 6000);
}

/// A restarted controller gives its quotas back before its jobs; a pending job whose
/// queue was deleted while it was down is restored, waiting, not refused.
#[test]
fn a_job_restored_after_its_queue_was_deleted_waits_instead_of_failing_recovery() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    sim.event(
        Event::RestorePending {
            id: JobId(1),
            spec: Box::new(in_q(job(1, 1, 1000))),
            requeues: 0,
            hold: None,
        },
        0,
    );
    let alloc = placed(Cluster::flat_gpu(2, 8), &job(1, 2, 1000));
    sim.adopt(2, in_q(job(1, 2, 1000)), alloc, 0, 0);
    assert!(started(&sim.pass(1)).is_empty());
    assert_eq!(sim.pending_reason(1), PendingReason::InvalidQueue);
    assert_eq!(sim.state(2), JobState::Running);
    set_quotas(&mut sim, one_queue(8), 2);
    assert_eq!(started(&sim.pass(3)), [1]);
}

// ---------------------------------------------------------------------------------------
// 6. Dependencies, holds, begin time, limits, constraints
// ---------------------------------------------------------------------------------------

fn dep(kind: DependencyKind, on: u64) -> Dependency {
    Dependency::On {
        kind,
        job: JobId(on),
    }
}

fn depending(spec: JobSpec, deps: Vec<Dependency>) -> JobSpec {
    with(spec, |s| s.dependencies = deps)
}

#[test]
fn after_waits_for_the_other_job_to_start() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    sim.submit(1, job(1, 1, 100), 0);
    sim.event(
        Event::Hold {
            id: JobId(1),
            admin: false,
        },
        0,
    );
    sim.submit(
        2,
        depending(job(1, 1, 100), vec![dep(DependencyKind::After, 1)]),
        0,
    );
    assert!(sim.pass(0).is_empty());
    assert_eq!(sim.reason(1), "JobHeldUser");
    assert_eq!(sim.reason(2), "Dependency");
    sim.event(Event::Release { id: JobId(1) }, 5);
    assert_eq!(started(&sim.pass(5)), [1]);
    assert_eq!(started(&sim.pass(6)), [2]);
}

#[test]
fn afterok_and_afternotok_follow_the_outcome() {
    for (outcome, ok, notok) in [
        (JobState::Completed, "start", "DependencyNeverSatisfied"),
        (JobState::Failed, "DependencyNeverSatisfied", "start"),
    ] {
        let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
        sim.submit(1, job(1, 1, 100), 0);
        sim.submit(
            2,
            depending(job(1, 1, 100), vec![dep(DependencyKind::AfterOk, 1)]),
            0,
        );
        sim.submit(
            3,
            depending(job(1, 1, 100), vec![dep(DependencyKind::AfterNotOk, 1)]),
            0,
        );
        sim.submit(
            4,
            depending(job(1, 1, 100), vec![dep(DependencyKind::AfterAny, 1)]),
            0,
        );
        assert_eq!(started(&sim.pass(0)), [1]);
        assert_eq!(sim.reason(2), "Dependency");
        assert_eq!(sim.reason(4), "Dependency");
        sim.end(1, outcome, 50);
        let ds = sim.pass(50);
        let expect_started: Vec<u64> = [(2, ok), (3, notok), (4, "start")]
            .iter()
            .filter(|(_, what)| *what == "start")
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(started(&ds), expect_started, "after {outcome}");
        for (id, what) in [(2, ok), (3, notok)] {
            if what != "start" {
                assert_eq!(sim.reason(id), what, "job {id} after {outcome}");
            }
        }
    }
}

#[test]
fn dependencies_any_is_met_by_one_and_never_only_when_all_fail() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    sim.submit(1, job(1, 1, 100), 0);
    sim.submit(2, job(1, 1, 100), 0);
    let both = || {
        depending(
            job(1, 1, 100),
            vec![
                dep(DependencyKind::AfterOk, 1),
                dep(DependencyKind::AfterOk, 2),
            ],
        )
    };
    sim.submit(3, with(both(), |s| s.dependencies_any = true), 0);
    sim.submit(4, both(), 0);
    assert_eq!(started(&sim.pass(0)), [1, 2]);
    sim.end(1, JobState::Failed, 10);
    sim.pass(10);
    assert_eq!(sim.reason(3), "Dependency", "one of two can still succeed");
    assert_eq!(
        sim.reason(4),
        "DependencyNeverSatisfied",
        "all must succeed"
    );
    sim.end(2, JobState::Completed, 20);
    assert_eq!(started(&sim.pass(20)), [3]);
}

#[test]
fn singleton_waits_for_the_running_job_of_the_same_name_and_user() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    let named = |s: JobSpec| with(s, |s| s.name = "train".into());
    sim.submit(1, named(job(1, 1, 100)), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    sim.submit(
        2,
        named(depending(job(1, 1, 100), vec![Dependency::Singleton])),
        1,
    );
    // Another user's job of the same name does not count.
    sim.submit(
        3,
        with(
            named(depending(job(1, 1, 100), vec![Dependency::Singleton])),
            |s| s.user = "bob".into(),
        ),
        1,
    );
    assert_eq!(started(&sim.pass(1)), [3]);
    assert_eq!(sim.reason(2), "Dependency");
    assert_eq!(sim.pending_reason(2), PendingReason::SingletonDependency);
    sim.end(1, JobState::Completed, 10);
    assert_eq!(started(&sim.pass(10)), [2]);
}

#[test]
fn admin_hold_and_release() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    sim.submit(1, with(job(1, 1, 100), |s| s.hold = true), 0);
    assert!(sim.pass(0).is_empty());
    assert_eq!(sim.reason(1), "JobHeldUser");
    sim.event(
        Event::Hold {
            id: JobId(1),
            admin: true,
        },
        1,
    );
    sim.pass(1);
    assert_eq!(sim.reason(1), "JobHeldAdmin");
    sim.event(Event::Release { id: JobId(1) }, 2);
    assert_eq!(started(&sim.pass(2)), [1]);
}

#[test]
fn begin_time_defers_eligibility() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    sim.submit(1, with(job(1, 1, 100), |s| s.begin = Some(Time(100))), 0);
    assert!(sim.pass(99).is_empty());
    assert_eq!(sim.reason(1), "BeginTime");
    assert_eq!(started(&sim.pass(100)), [1]);
}

#[test]
fn time_limit_above_the_partition_limit_pends_with_partition_time_limit() {
    let mut sim = Sim::new(load(TWO_LEAVES), plain());
    let short = |s: JobSpec| with(s, |s| s.partition = Some("short".into()));
    sim.submit(1, short(job(1, 1, 7200)), 0);
    sim.submit(2, short(job(1, 1, 0)), 0); // unlimited
    sim.submit(3, short(job(1, 1, 3600)), 0);
    assert_eq!(started(&sim.pass(0)), [3]);
    assert_eq!(sim.reason(1), "PartitionTimeLimit");
    assert_eq!(sim.reason(2), "PartitionTimeLimit");
    sim.event(
        Event::SetTimeLimit {
            id: JobId(1),
            limit: Dur(60),
        },
        1,
    );
    assert_eq!(started(&sim.pass(1)), [1]);
}

/// A running job's time limit changes: the reservation of the job waiting behind it moves
/// to the new end (the backfill plan counts on the running job's end as the job now has
/// it), and back when the limit grows again.
#[test]
fn a_running_jobs_new_time_limit_moves_the_reservation_behind_it() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    sim.submit(1, job(1, 8, 1000), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    sim.submit(2, job(1, 8, 100), 1);
    assert_eq!(summary(&sim.pass(1)), ["reserve 2 @1000"]);
    let limit = |sim: &mut Sim, secs: u64, now: u64| {
        sim.event(
            Event::SetTimeLimit {
                id: JobId(1),
                limit: Dur(secs),
            },
            now,
        );
    };
    limit(&mut sim, 500, 2);
    assert_eq!(summary(&sim.pass(2)), ["reserve 2 @500"]);
    limit(&mut sim, 2000, 3);
    assert_eq!(summary(&sim.pass(3)), ["reserve 2 @2000"]);
    sim.end(1, JobState::Completed, 4);
    assert_eq!(started(&sim.pass(4)), [2]);
}

/// Regression (with the next test): the pass's quick free-resource summary turned away
/// jobs that could not fit now as `Resources` before placement could say that they never fit
/// (`BadConstraints`) or wait for nodes that are not up (`ReqNodeNotAvail`).
#[test]
fn job_that_can_never_fit_pends_with_bad_constraints() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    sim.submit(1, job(1, 9, 100), 0);
    sim.submit(2, job(3, 8, 100), 0);
    sim.submit(3, job(1, 1, 100), 0);
    assert_eq!(summary(&sim.pass(0)), ["start 3"]);
    assert_eq!(sim.reason(1), "BadConstraints");
    assert_eq!(sim.reason(2), "BadConstraints");
}

/// A node's features change at runtime (its agent reports a container runtime): a job that
/// never fit before fits now, on that node only, and one that needs a feature the node lost
/// waits again.
#[test]
fn a_feature_reported_later_lets_a_job_that_needed_it_start_there() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    let needs = || {
        with(job(1, 1, 100), |s| {
            s.features = vec!["container-runtime".into()]
        })
    };
    sim.submit(1, needs(), 0);
    assert!(sim.pass(0).is_empty());
    assert_eq!(sim.reason(1), "BadConstraints");
    sim.event(
        Event::SetNodeFeatures {
            node: NodeId(1),
            features: vec!["container-runtime".into()],
        },
        5,
    );
    assert_eq!(started(&sim.pass(5)), [1]);
    assert_eq!(sim.nodes_of(1), [1]);
    sim.event(
        Event::SetNodeFeatures {
            node: NodeId(1),
            features: vec![],
        },
        6,
    );
    sim.submit(2, needs(), 6);
    assert!(sim.pass(6).is_empty());
    assert_eq!(sim.reason(2), "BadConstraints");
    // The running job is not looked at again.
    assert_eq!(sim.state(1), JobState::Running);
}

#[test]
fn job_needing_drained_nodes_pends_with_req_node_not_avail() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    sim.node(1, NodeAvail::Drain, Some("maint"), 0);
    sim.submit(1, job(2, 8, 100), 0);
    assert!(sim.pass(0).is_empty());
    assert_eq!(sim.reason(1), "ReqNodeNotAvail");
    sim.node(1, NodeAvail::Up, None, 10);
    assert_eq!(started(&sim.pass(10)), [1]);
}

// ---------------------------------------------------------------------------------------
// 7. Node failure
// ---------------------------------------------------------------------------------------

#[test]
fn node_down_stops_the_gang_running_on_it_and_requeues_it_whole() {
    let mut sim = Sim::new(Cluster::flat_gpu(3, 8), plain());
    sim.submit(1, job(2, 8, 1000), 0);
    sim.submit(2, job(1, 8, 1000), 0);
    assert_eq!(started(&sim.pass(0)), [1, 2]);
    let gang_nodes = sim.nodes_of(1);
    let ds = sim.node(gang_nodes[0], NodeAvail::Down, Some("dead"), 10);
    assert_eq!(
        ds,
        [Decision::Stop {
            job: JobId(1),
            grace: Dur(0),
            why: StopReason::NodeFailure {
                node: NodeId(gang_nodes[0])
            },
        }]
    );
    assert_eq!(
        sim.state(1),
        JobState::Running,
        "still running until its tasks are gone"
    );
    sim.end(1, JobState::NodeFail, 11);
    assert_eq!(sim.state(1), JobState::Pending);
    assert_eq!(sim.s.job(JobId(1)).unwrap().requeues, 1);
    assert_eq!(
        sim.free(gang_nodes[1]),
        full_gpu_node(),
        "the whole gang was released"
    );
    assert_eq!(sim.state(2), JobState::Running);
}

#[test]
fn node_down_ends_a_never_requeue_gang_node_fail() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    sim.submit(
        1,
        with(job(2, 8, 1000), |s| s.requeue = RequeuePolicy::Never),
        0,
    );
    sim.pass(0);
    assert_eq!(sim.node(0, NodeAvail::Down, None, 10).len(), 1);
    sim.end(1, JobState::NodeFail, 11);
    assert_eq!(sim.state(1), JobState::NodeFail);
    assert_eq!(sim.free(1), full_gpu_node());
}

#[test]
fn drained_node_takes_no_new_work_but_running_work_continues() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    sim.submit(1, job(1, 4, 1000), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    let n = sim.nodes_of(1)[0];
    assert!(sim.node(n, NodeAvail::Drain, Some("maint"), 10).is_empty());
    assert_eq!(sim.state(1), JobState::Running);
    sim.submit(2, job(1, 4, 1000), 10);
    sim.submit(3, job(1, 4, 1000), 10);
    sim.submit(4, job(1, 4, 1000), 10);
    let ds = sim.pass(10);
    assert_eq!(started(&ds), [2, 3]);
    assert!(ds.iter().all(|d| match d {
        Decision::Start { allocation, .. } => allocation.nodes() == [NodeId(1 - n)],
        _ => true,
    }));
    sim.end(1, JobState::Completed, 20);
    assert!(
        started(&sim.pass(20)).is_empty(),
        "the drained node stays out of use"
    );
}

#[test]
fn launch_failure_requeues_the_whole_gang_and_frees_everything() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    let mut spec = job(1, 0, 100);
    spec.groups = vec![
        group("launcher", 1, gpu_task(0)),
        group("worker", 2, gpu_task(4)),
    ];
    sim.submit(1, spec, 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    sim.event(
        Event::LaunchFailed {
            id: JobId(1),
            reason: "image pull".into(),
        },
        5,
    );
    assert_eq!(sim.state(1), JobState::Pending);
    assert_eq!(sim.free(0), full_gpu_node());
    assert_eq!(sim.free(1), full_gpu_node());
    assert_eq!(started(&sim.pass(6)), [1]);
}

// ---------------------------------------------------------------------------------------
// 8. Cancel, errors, explain
// ---------------------------------------------------------------------------------------

#[test]
fn cancel_of_a_pending_job_ends_it_at_once() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    sim.submit(1, job(1, 1, 100), 0);
    assert!(sim.event(Event::Cancel { id: JobId(1) }, 1).is_empty());
    assert_eq!(sim.state(1), JobState::Cancelled);
    assert!(sim.pass(2).is_empty());
}

#[test]
fn cancel_of_a_running_job_stops_it_and_it_ends_cancelled() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    sim.submit(1, job(1, 1, 100), 0);
    sim.pass(0);
    assert_eq!(
        sim.event(Event::Cancel { id: JobId(1) }, 1),
        [Decision::Stop {
            job: JobId(1),
            grace: Dur(0),
            why: StopReason::Cancelled,
        }]
    );
    sim.end(1, JobState::Completed, 2);
    assert_eq!(sim.state(1), JobState::Cancelled);
    assert_eq!(sim.free(0), full_gpu_node());
}

#[test]
fn illegal_transitions_are_errors_and_change_nothing() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    sim.submit(1, job(1, 1, 100), 0);
    sim.submit(2, job(1, 1, 100), 0);
    sim.pass(0);
    sim.submit(3, job(1, 8, 100), 0);
    let err = sim
        .try_event(
            Event::Ended {
                id: JobId(3),
                outcome: JobState::Completed,
            },
            1,
        )
        .unwrap_err();
    assert!(matches!(err, CoreError::Transition(_)), "{err}");
    assert_eq!(sim.state(3), JobState::Pending);
    let err = sim
        .try_event(
            Event::Hold {
                id: JobId(1),
                admin: false,
            },
            1,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "job 1 is RUNNING; only pending jobs can be held"
    );
    let err = sim
        .try_event(
            Event::Ended {
                id: JobId(1),
                outcome: JobState::Running,
            },
            1,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "job 1 is invalid: RUNNING is not a final state"
    );
    let err = sim
        .try_event(Event::Requeue { id: JobId(3) }, 1)
        .unwrap_err();
    assert!(matches!(err, CoreError::WrongState { .. }), "{err}");
    assert_eq!(
        sim.try_event(Event::Cancel { id: JobId(99) }, 1)
            .unwrap_err(),
        CoreError::UnknownJob(JobId(99))
    );
    assert_eq!(
        sim.try_event(
            Event::NodeAvail {
                node: NodeId(7),
                avail: NodeAvail::Drain,
                reason: None
            },
            1
        )
        .unwrap_err(),
        CoreError::UnknownNode(7)
    );
    // An ended job cannot end again.
    sim.end(2, JobState::Completed, 2);
    assert_eq!(
        sim.try_event(
            Event::Ended {
                id: JobId(2),
                outcome: JobState::Completed
            },
            3
        )
        .unwrap_err(),
        CoreError::UnknownJob(JobId(2))
    );
}

#[test]
fn invalid_submissions_are_refused_with_what_is_wrong() {
    let mut p = plain();
    p.auto_associations = true;
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), p);
    sim.submit(1, job(1, 1, 100), 0);
    let submit = |sim: &mut Sim, id: u64, spec: JobSpec| {
        sim.try_event(
            Event::Submit {
                id: JobId(id),
                spec: Box::new(spec),
            },
            0,
        )
        .unwrap_err()
        .to_string()
    };
    assert_eq!(submit(&mut sim, 1, job(1, 1, 100)), "job 1 already exists");
    sim.event(Event::Cancel { id: JobId(1) }, 0);
    assert_eq!(
        submit(&mut sim, 1, job(1, 1, 100)),
        "job 1 already exists",
        "ids are not reused"
    );
    let cases: Vec<(JobSpec, &str)> = vec![
        (
            with(job(1, 1, 100), |s| s.partition = Some("cpu".into())),
            "job 2 is invalid: partition `cpu` does not exist",
        ),
        (
            with(job(1, 1, 100), |s| s.qos = Some("gold".into())),
            "job 2 is invalid: qos `gold` does not exist",
        ),
        (
            with(job(1, 1, 100), |s| s.priority_class = Some("vip".into())),
            "job 2 is invalid: priority class `vip` does not exist",
        ),
        (
            job(0, 1, 100),
            "job 2 is invalid: task group `task` has no tasks",
        ),
        (
            with(job(1, 1, 100), |s| {
                s.groups[0].per_task.gpu_share_milli = Some(500)
            }),
            "job 2 is invalid: task group `task` asks for whole GPUs and a GPU share at once",
        ),
        (
            with(job(1, 1, 100), |s| {
                s.dependencies = vec![dep(DependencyKind::AfterOk, 42)]
            }),
            "job 2 is invalid: dependency on job 42, which does not exist",
        ),
    ];
    for (spec, msg) in cases {
        assert_eq!(submit(&mut sim, 2, spec), msg);
        assert!(sim.s.job(JobId(2)).is_none());
    }
}

#[test]
fn explain_lists_why_each_node_cannot_take_a_pending_job() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    sim.submit(1, job(1, 6, 1000), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    let busy = sim.nodes_of(1)[0];
    let drained = if busy == 0 { 1 } else { 0 };
    sim.node(drained, NodeAvail::Drain, Some("maint"), 1);
    sim.submit(2, job(2, 4, 100), 2);
    sim.pass(2);
    let e = sim.s.explain(JobId(2), Time(2), true).unwrap();
    assert_eq!(e.state, JobState::Pending);
    assert_eq!(e.reason, PendingReason::Resources);
    let name = |n: u32| sim.s.cluster().node(NodeId(n)).name.clone();
    let mut expect = vec![
        NodeWhyNot {
            node: name(drained),
            why: "node is drained: maint".into(),
        },
        NodeWhyNot {
            node: name(busy),
            why: "2 of 8 GPUs free, a task needs 4".into(),
        },
    ];
    expect.sort_by(|a, b| a.node.cmp(&b.node));
    assert_eq!(e.nodes, expect);
    assert_eq!(e.expected_start, Some(Time(1000)));
    let e = sim.s.explain(JobId(2), Time(2), false).unwrap();
    assert!(e.nodes.is_empty());
}

// ---------------------------------------------------------------------------------------
// 9. Topology
// ---------------------------------------------------------------------------------------

#[test]
fn one_leaf_job_waits_rather_than_spanning_two_leaves() {
    let mut sim = Sim::new(load(TWO_LEAVES), plain());
    for i in 1..=4 {
        sim.submit(i, job(1, 8, 100 * i), 0);
    }
    assert_eq!(started(&sim.pass(0)), [1, 2, 3, 4]);
    let node_of = |sim: &Sim, id| sim.nodes_of(id)[0];
    let (on1, on3) = (
        (1..=4).find(|&i| node_of(&sim, i) == 0).unwrap(),
        (1..=4).find(|&i| node_of(&sim, i) == 2).unwrap(),
    );
    // Free n2 and n4: one node per leaf.
    for i in 1..=4 {
        if i != on1 && i != on3 {
            sim.end(i, JobState::Completed, 10);
        }
    }
    let one_leaf = with(job(2, 8, 100), |s| s.topology.span = NetworkSpan::OneLeaf);
    sim.submit(10, one_leaf, 10);
    let ds = sim.pass(10);
    assert!(started(&ds).is_empty(), "{ds:?}");
    assert_eq!(sim.reason(10), "Resources");
    sim.end(on1, JobState::Completed, 20);
    assert_eq!(started(&sim.pass(20)), [10]);
    assert_eq!(sim.nodes_of(10), [0, 1]);
}

#[test]
fn strict_numa_task_gets_gpus_cores_and_nics_from_one_domain() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    // Three GPUs of one domain in use: a 2-GPU strict task must go to the other domain.
    sim.submit(1, job(1, 3, 1000), 0);
    sim.pass(0);
    let task = TaskResources {
        cpus: 8,
        mem_mib: 16 * GIB,
        gpus: 2,
        nics: 1,
        ..TaskResources::default()
    };
    let strict = with(JobSpec::simple("alice", "ml", 2, task, Dur(100)), |s| {
        s.topology.numa = NumaPolicy::Strict
    });
    sim.submit(2, strict, 1);
    assert_eq!(started(&sim.pass(1)), [2]);
    let shape = sim.s.cluster().shape(NodeId(0)).clone();
    let alloc = sim.s.job(JobId(2)).unwrap().allocation.clone().unwrap();
    for t in &alloc.tasks {
        let d = shape
            .numa
            .iter()
            .find(|d| d.gpus.contains(&t.gpus[0]))
            .unwrap();
        assert!(t.gpus.iter().all(|g| d.gpus.contains(g)), "{t:?}");
        assert!(t.cores.iter().all(|c| d.cores.contains(c)), "{t:?}");
        assert!(t.nics.iter().all(|n| d.nics.contains(n)), "{t:?}");
        assert_eq!(t.nics.len(), 1);
    }
}

#[test]
fn exclusive_job_takes_a_whole_idle_node() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    sim.submit(1, job(1, 1, 1000), 0);
    assert_eq!(started(&sim.pass(0)), [1]);
    let shared = sim.nodes_of(1)[0];
    sim.submit(2, with(job(1, 1, 1000), |s| s.exclusive = true), 1);
    assert_eq!(started(&sim.pass(1)), [2]);
    assert_eq!(sim.nodes_of(2), [1 - shared]);
    assert_eq!(
        sim.s.job(JobId(2)).unwrap().per_node,
        [(NodeId(1 - shared), full_gpu_node())]
    );
    // Nothing else goes on the exclusive job's node, even with 7 GPUs idle there.
    sim.submit(3, job(1, 1, 1000), 2);
    sim.submit(4, with(job(1, 1, 1000), |s| s.exclusive = true), 2);
    assert_eq!(started(&sim.pass(2)), [3]);
    assert_eq!(sim.nodes_of(3), [shared]);
    assert_eq!(sim.reason(4), "Resources");
}

// ---------------------------------------------------------------------------------------
// 10. Determinism
// ---------------------------------------------------------------------------------------

fn scripted_scenario() -> Vec<(u64, Decision)> {
    let mut p = preempting();
    p.priority = PriorityWeights::default();
    p.fairshare.calc_period = Dur(0);
    let mut sim = Sim::new(load(TWO_LEAVES), p);
    let mut log = Vec::new();
    let mut record = |now: u64, ds: Vec<Decision>| log.extend(ds.into_iter().map(|d| (now, d)));
    for i in 0..12u64 {
        let mut spec = acct(
            job(
                1 + (i % 3) as u32,
                [1, 2, 4, 8][(i % 4) as usize],
                200 + 50 * i,
            ),
            ["a", "b", "c"][(i % 3) as usize],
            ["u", "v"][(i % 2) as usize],
        );
        if i % 5 == 0 {
            spec.priority_class = Some("low".into());
        }
        if i % 4 == 3 {
            spec.topology.span = NetworkSpan::OneLeaf;
        }
        sim.submit(i + 1, spec, i * 10);
    }
    record(120, sim.pass(120));
    sim.submit(20, high(job(2, 8, 300)), 130);
    record(130, sim.pass(130));
    record(140, sim.node(3, NodeAvail::Down, Some("dead"), 140));
    for t in (150..1500).step_by(50) {
        let active: Vec<(u64, bool)> = sim
            .s
            .jobs()
            .filter(|j| j.state.is_active())
            .map(|j| {
                (
                    j.id.0,
                    j.stopping.is_some() || j.end_time.is_some_and(|e| e.0 <= t),
                )
            })
            .collect();
        for (id, done) in active {
            if done {
                sim.end(id, JobState::Completed, t);
            }
        }
        record(t, sim.pass(t));
    }
    log
}

#[test]
fn same_script_gives_identical_decisions() {
    let first = scripted_scenario();
    let second = scripted_scenario();
    assert!(
        first.len() > 20,
        "the scenario does something: {} decisions",
        first.len()
    );
    assert!(
        first
            .iter()
            .any(|(_, d)| matches!(d, Decision::Preempt { .. }))
    );
    assert!(first.iter().any(|(_, d)| matches!(d, Decision::Reserve(_))));
    assert_eq!(first, second);
}

/// Regression: a victim cancelled by its user while being preempted ended as cancelled, and
/// its preemptor, which only learnt of ends of victims still marked preempted, waited for it
/// for ever (pending with reason Resources, never placed again).
#[test]
fn preemptor_starts_when_a_victim_is_cancelled_while_it_stops() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), preempting());
    sim.submit(
        1,
        with(job(1, 8, 10_000), |s| s.priority_class = Some("low".into())),
        0,
    );
    sim.pass(0);
    sim.submit(2, high(job(1, 8, 100)), 10);
    assert_eq!(summary(&sim.pass(10)), ["preempt 1 by 2"]);
    sim.event(Event::Cancel { id: JobId(1) }, 11);
    sim.end(1, JobState::Cancelled, 12);
    assert_eq!(sim.state(1), JobState::Cancelled);
    assert_eq!(started(&sim.pass(12)), [2]);
}

// ---------------------------------------------------------------------------------------
// 9. Crash recovery: jobs restored and adopted after a controller restart
// ---------------------------------------------------------------------------------------

/// The allocation a scheduler of `cluster` starts `spec` on: what a job found running
/// after a restart holds.
fn placed(cluster: Cluster, spec: &JobSpec) -> Allocation {
    let mut s = Scheduler::new(cluster, plain()).expect("test policy is valid");
    let submit = Event::Submit {
        id: JobId(999),
        spec: Box::new(spec.clone()),
    };
    s.handle(submit, Time(0)).expect("submission is accepted");
    match s.schedule(Time(0)).as_slice() {
        [Decision::Start { allocation, .. }] => allocation.clone(),
        other => panic!("expected one start, got {other:?}"),
    }
}

fn adopt_event(id: u64, spec: JobSpec, allocation: Allocation, start: u64) -> Event {
    Event::Adopt {
        id: JobId(id),
        spec: Box::new(spec),
        allocation,
        start_time: Time(start),
        requeues: 0,
    }
}

impl Sim {
    fn adopt(&mut self, id: u64, spec: JobSpec, alloc: Allocation, start: u64, now: u64) {
        let ds = self.event(adopt_event(id, spec, alloc, start), now);
        assert!(ds.is_empty(), "adopting on nodes not down decides nothing");
    }
}

#[test]
fn adopted_job_holds_its_gpus_so_a_new_job_waits_for_its_end() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    let spec = job(1, 6, 1000);
    let alloc = placed(Cluster::flat_gpu(1, 8), &spec);
    sim.adopt(1, spec, alloc.clone(), 0, 50);
    let j = sim.s.job(JobId(1)).expect("adopted");
    assert_eq!(j.state, JobState::Running);
    assert_eq!(j.allocation.as_ref(), Some(&alloc), "exactly what it held");
    assert_eq!(j.start_time, Some(Time(0)));
    assert_eq!(j.end_time, Some(Time(1000)), "start plus time limit");
    assert!(j.ever_started);
    assert_eq!(sim.s.active_count(), 1);
    assert_eq!(sim.free(0).gpu_milli, 2000);

    sim.submit(2, job(1, 4, 100), 50);
    let ds = sim.pass(50);
    assert!(started(&ds).is_empty(), "its GPUs are held: {ds:?}");
    assert_eq!(sim.reason(2), "Resources");
    let r = reserved(&ds);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].job, r[0].start),
        (JobId(2), Time(1000)),
        "reserved for when the adopted job reaches its limit"
    );
    // A small job backfills without touching the reservation.
    sim.submit(3, job(1, 2, 100), 50);
    assert_eq!(started(&sim.pass(51)), [3]);

    sim.end(1, JobState::Completed, 300);
    assert_eq!(sim.state(1), JobState::Completed);
    assert_eq!(started(&sim.pass(300)), [2]);
}

#[test]
fn two_adopted_jobs_claiming_one_gpu_is_an_error_and_changes_nothing() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    let spec = job(1, 2, 1000);
    let alloc = placed(Cluster::flat_gpu(1, 8), &spec);
    sim.adopt(1, spec.clone(), alloc.clone(), 0, 10);
    let free = sim.free(0);
    // Other cores, the same GPUs: only the GPUs conflict.
    let mut other = alloc.clone();
    for c in &mut other.tasks[0].cores {
        *c += 32;
    }
    let err = sim
        .try_event(adopt_event(2, spec.clone(), other, 0), 10)
        .unwrap_err();
    assert!(
        matches!(
            err,
            CoreError::Booking {
                id: JobId(2),
                source: BookingError::GpuBusy { .. }
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("job 2's allocation cannot be booked: gpu ")
    );
    assert!(sim.s.job(JobId(2)).is_none(), "the job is not kept");
    assert_eq!(sim.free(0), free);
    assert_eq!(sim.s.active_count(), 1);
    // The very same allocation twice conflicts too, and so does an id already known.
    let err = sim
        .try_event(adopt_event(3, spec.clone(), alloc.clone(), 0), 10)
        .unwrap_err();
    assert!(matches!(err, CoreError::Booking { .. }), "{err}");
    let err = sim
        .try_event(adopt_event(1, spec, alloc, 0), 10)
        .unwrap_err();
    assert_eq!(err, CoreError::DuplicateJob(JobId(1)));
}

#[test]
fn adoption_refuses_an_allocation_that_is_not_a_gang_of_its_spec() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    let spec = job(2, 4, 1000);
    let alloc = placed(Cluster::flat_gpu(2, 8), &spec);
    let mut part = alloc.clone();
    part.tasks.pop();
    let err = sim
        .try_event(adopt_event(1, spec.clone(), part, 0), 10)
        .unwrap_err();
    assert!(
        matches!(&err, CoreError::InvalidJob { what, .. } if what.contains("has 1 tasks placed")),
        "{err}"
    );
    let mut elsewhere = alloc;
    elsewhere.tasks[0].node = NodeId(7);
    let err = sim
        .try_event(adopt_event(1, spec, elsewhere, 0), 10)
        .unwrap_err();
    assert_eq!(err, CoreError::UnknownNode(7));
    assert_eq!(sim.s.active_count(), 0);
    assert_eq!(sim.free(0), full_gpu_node());
}

#[test]
fn adopted_job_holds_its_node_before_its_agent_reconnects() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    sim.node(0, NodeAvail::Unknown, None, 0);
    sim.node(1, NodeAvail::Unknown, None, 0);
    let spec = job(1, 8, 1000);
    let alloc = placed(Cluster::flat_gpu(2, 8), &spec);
    assert_eq!(alloc.nodes(), [NodeId(0)]);
    sim.adopt(1, spec, alloc, 0, 10);
    assert_eq!(sim.state(1), JobState::Running);
    // Both agents reconnect: only the node the adopted job does not hold is free.
    sim.node(0, NodeAvail::Up, None, 20);
    sim.node(1, NodeAvail::Up, None, 20);
    assert_eq!(sim.free(0).gpu_milli, 0);
    sim.submit(2, job(1, 8, 100), 20);
    sim.submit(3, job(1, 8, 100), 20);
    let ds = sim.pass(20);
    assert_eq!(started(&ds), [2]);
    assert_eq!(sim.nodes_of(2), [1]);
}

#[test]
fn adopted_job_on_a_node_already_down_is_stopped_and_requeued() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    sim.node(1, NodeAvail::Down, Some("gone"), 0);
    let spec = job(2, 8, 1000);
    let alloc = placed(Cluster::flat_gpu(2, 8), &spec);
    let mut event = adopt_event(1, spec, alloc, 0);
    if let Event::Adopt { requeues, .. } = &mut event {
        *requeues = 2;
    }
    let ds = sim.event(event, 10);
    assert_eq!(
        ds,
        [Decision::Stop {
            job: JobId(1),
            grace: Dur(0),
            why: StopReason::NodeFailure { node: NodeId(1) },
        }]
    );
    sim.end(1, JobState::Cancelled, 11);
    assert_eq!(sim.state(1), JobState::Pending);
    assert_eq!(sim.s.job(JobId(1)).unwrap().requeues, 3);
    assert_eq!(sim.free(0), full_gpu_node());
}

#[test]
fn adopted_job_counts_in_its_quota_even_above_a_limit_lowered_since() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), quota_policy());
    // Queue `qa` may use 4 + 2 borrowed GPUs; the job holds 8.
    let spec = acct(job(1, 8, 1000), "a", "ann");
    let alloc = placed(Cluster::flat_gpu(2, 8), &spec);
    sim.adopt(1, spec, alloc, 0, 10);
    let qa = sim.s.quota().queue_ix("qa").expect("queue qa");
    assert_eq!(sim.s.quota().used(qa).gpu_milli, 8000);
    sim.submit(2, acct(job(1, 1, 100), "a", "ann"), 10);
    assert!(started(&sim.pass(10)).is_empty());
    assert_eq!(
        sim.reason(2),
        "QOSGrpGRES",
        "held back by the borrowing limit"
    );
    sim.end(1, JobState::Completed, 20);
    assert_eq!(sim.s.quota().used(qa).gpu_milli, 0);
    assert_eq!(started(&sim.pass(20)), [2]);
}

#[test]
fn restored_pending_job_keeps_its_requeues_and_admin_hold() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    let spec = with(job(1, 1, 100), |s| s.hold = true);
    sim.event(
        Event::RestorePending {
            id: JobId(4),
            spec: Box::new(spec),
            requeues: 2,
            hold: Some(Hold::Admin),
        },
        0,
    );
    assert!(sim.pass(0).is_empty());
    assert_eq!(sim.reason(4), "JobHeldAdmin");
    assert_eq!(sim.s.job(JobId(4)).unwrap().requeues, 2);
    sim.event(Event::Release { id: JobId(4) }, 5);
    assert_eq!(started(&sim.pass(5)), [4]);

    // `spec.hold` is how it was submitted; `hold: None` says it was released since.
    let spec = with(job(1, 1, 100), |s| s.hold = true);
    sim.event(
        Event::RestorePending {
            id: JobId(5),
            spec: Box::new(spec),
            requeues: 0,
            hold: None,
        },
        6,
    );
    assert_eq!(started(&sim.pass(6)), [5]);
}

#[test]
fn a_restored_pending_job_keeps_its_age_from_its_submission_or_begin() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    let restore = |id: u64, requeues: u32, f: fn(&mut JobSpec)| Event::RestorePending {
        id: JobId(id),
        spec: Box::new(with(job(1, 1, 100), |s| {
            s.submit_time = Time(10);
            f(s)
        })),
        requeues,
        hold: None,
    };
    sim.event(restore(1, 0, |_| {}), 1000);
    sim.event(restore(2, 0, |s| s.begin = Some(Time(50))), 1000);
    // Went back to the queue at a time not kept: its age counts from the restore.
    sim.event(restore(3, 1, |_| {}), 1000);
    let since = |id: u64| sim.s.job(JobId(id)).unwrap().eligible_since;
    assert_eq!(
        [since(1), since(2), since(3)],
        [Some(Time(10)), Some(Time(50)), Some(Time(1000))]
    );
}

#[test]
fn restored_job_depends_on_a_job_that_ended_before_the_restart() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    let dependent = with(job(1, 1, 100), |s| {
        s.dependencies = vec![Dependency::On {
            kind: DependencyKind::AfterOk,
            job: JobId(1),
        }]
    });
    let restore = |spec: &JobSpec| Event::RestorePending {
        id: JobId(2),
        spec: Box::new(spec.clone()),
        requeues: 0,
        hold: None,
    };
    let err = sim.try_event(restore(&dependent), 0).unwrap_err();
    assert!(err.to_string().contains("dependency on job 1"), "{err}");
    let err = sim
        .try_event(
            Event::RestoreEnded {
                id: JobId(1),
                state: JobState::Running,
            },
            0,
        )
        .unwrap_err();
    assert!(err.to_string().contains("not a final state"), "{err}");
    sim.event(
        Event::RestoreEnded {
            id: JobId(1),
            state: JobState::Completed,
        },
        0,
    );
    sim.event(restore(&dependent), 0);
    assert_eq!(started(&sim.pass(0)), [2]);
}

// ---------------------------------------------------------------------------------------
// 10. Lost tasks
// ---------------------------------------------------------------------------------------

fn lost(id: u64, node: u32) -> Event {
    Event::Lost {
        id: JobId(id),
        node: NodeId(node),
    }
}

#[test]
fn lost_tasks_stop_the_rest_of_the_gang_and_requeue_it_whole() {
    let mut sim = Sim::new(Cluster::flat_gpu(3, 8), plain());
    sim.submit(1, job(2, 8, 1000), 0);
    sim.submit(2, job(1, 8, 1000), 0);
    assert_eq!(started(&sim.pass(0)), [1, 2]);
    let gang = sim.nodes_of(1);
    let ds = sim.event(lost(1, gang[1]), 10);
    assert_eq!(
        ds,
        [Decision::Stop {
            job: JobId(1),
            grace: Dur(0),
            why: StopReason::NodeFailure {
                node: NodeId(gang[1])
            },
        }],
        "the job alone is stopped; nothing else on the node"
    );
    assert_eq!(sim.state(1), JobState::Running, "until its tasks are gone");
    assert_eq!(
        sim.s.cluster().node(NodeId(gang[1])).avail,
        NodeAvail::Up,
        "the node itself did not fail"
    );
    sim.end(1, JobState::Failed, 11);
    assert_eq!(sim.state(1), JobState::Pending);
    assert_eq!(sim.s.job(JobId(1)).unwrap().requeues, 1);
    assert_eq!(sim.free(gang[0]), full_gpu_node());
    assert_eq!(sim.free(gang[1]), full_gpu_node());
    assert_eq!(sim.state(2), JobState::Running);
    assert_eq!(started(&sim.pass(12)), [1], "back whole on the freed nodes");
}

#[test]
fn lost_tasks_end_a_never_requeue_gang_node_fail() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    sim.submit(
        1,
        with(job(2, 8, 1000), |s| s.requeue = RequeuePolicy::Never),
        0,
    );
    sim.pass(0);
    assert_eq!(sim.event(lost(1, 0), 10).len(), 1);
    sim.end(1, JobState::Failed, 11);
    assert_eq!(sim.state(1), JobState::NodeFail);
    assert_eq!(sim.free(0), full_gpu_node());
    assert_eq!(sim.free(1), full_gpu_node());
}

#[test]
fn lost_tasks_of_a_cancelled_job_leave_it_cancelled() {
    let mut sim = Sim::new(Cluster::flat_gpu(1, 8), plain());
    sim.submit(1, job(1, 8, 1000), 0);
    sim.pass(0);
    sim.event(Event::Cancel { id: JobId(1) }, 5);
    assert_eq!(sim.event(lost(1, 0), 6).len(), 1);
    sim.end(1, JobState::Failed, 7);
    assert_eq!(sim.state(1), JobState::Cancelled);
}

#[test]
fn lost_tasks_of_a_job_not_active_or_not_on_the_node_are_errors() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    sim.submit(1, job(1, 8, 1000), 0);
    sim.submit(2, job(1, 8, 1000), 0);
    sim.submit(3, job(1, 8, 1000), 0);
    sim.pass(0);
    let on = sim.nodes_of(1)[0];
    let err = sim.try_event(lost(3, 0), 1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "job 3 is PENDING; only an active job's tasks can be lost"
    );
    let err = sim.try_event(lost(1, 1 - on), 1).unwrap_err();
    assert_eq!(
        err,
        CoreError::NotOnNode {
            id: JobId(1),
            node: format!("node{:03}", 2 - on),
        }
    );
    assert_eq!(sim.try_event(lost(1, 9), 1), Err(CoreError::UnknownNode(9)));
    assert_eq!(
        sim.try_event(lost(8, 0), 1),
        Err(CoreError::UnknownJob(JobId(8)))
    );
    assert_eq!(sim.state(1), JobState::Running);
    assert_eq!(sim.s.job(JobId(1)).unwrap().stopping, None);
}

#[test]
fn saved_fairshare_usage_comes_back_decayed_after_a_restart() {
    use cadre_core::cluster::Cluster;
    use cadre_core::job::{JobId, JobSpec, JobState};
    use cadre_core::policy::Policy;
    use cadre_core::resources::TaskResources;
    use cadre_core::scheduler::{Decision, Event, Scheduler};
    use cadre_core::time::{Dur, Time};
    let mut policy = Policy::preset("cadre").unwrap();
    policy.fairshare.half_life = Dur(3600);
    let cluster = Cluster::flat_gpu(1, 8);
    let mut s = Scheduler::new(cluster.clone(), policy.clone()).unwrap();
    let per_task = TaskResources {
        cpus: 1,
        gpus: 8,
        ..TaskResources::default()
    };
    let spec = JobSpec::simple("alice", "ml", 1, per_task, Dur(7200));
    s.handle(
        Event::Submit {
            id: JobId(1),
            spec: Box::new(spec),
        },
        Time(0),
    )
    .unwrap();
    let started = s
        .schedule(Time(0))
        .iter()
        .any(|d| matches!(d, Decision::Start { .. }));
    assert!(started);
    s.handle(
        Event::Ended {
            id: JobId(1),
            outcome: JobState::Completed,
        },
        Time(1000),
    )
    .unwrap();
    let saved = s.usage_snapshot(Time(1000));
    assert_eq!(saved.len(), 1);
    let (user, account, usage) = saved[0].clone();
    assert_eq!((user.as_str(), account.as_str()), ("alice", "ml"));
    assert!(usage > 0.0);
    // A new scheduler an hour (one half-life) later gets half of it back.
    let mut t = Scheduler::new(cluster, policy).unwrap();
    assert!(
        t.restore_usage("alice", "ml", usage, Time(1000), Time(4600))
            .unwrap()
    );
    let back = t.usage_snapshot(Time(4600));
    assert_eq!(back.len(), 1);
    assert!(
        (back[0].2 - usage / 2.0).abs() < usage * 1e-9,
        "{back:?} vs {usage}"
    );
}

/// A controller saves the fair-share usage every minute: the save changes nothing the
/// scheduler decides. The fair-share factors are computed again once a calc period (five
/// minutes here), not at each save (each used to compute them, and so every pending job's
/// priority, again).
#[test]
fn a_usage_snapshot_changes_no_priority_nor_decision() {
    let policy = Policy::preset("cadre").unwrap();
    let mut saving = Sim::new(Cluster::flat_gpu(1, 8), policy.clone());
    let mut not = Sim::new(Cluster::flat_gpu(1, 8), policy);
    for sim in [&mut saving, &mut not] {
        sim.submit(1, job(1, 8, 3600), 0);
        sim.submit(
            2,
            JobSpec::simple("bob", "ml", 1, gpu_task(8), Dur(3600)),
            0,
        );
        sim.submit(3, job(1, 8, 3600), 0);
    }
    let mut moved = false;
    for now in [0, 61, 130, 299, 301, 400, 610] {
        if now > 0 {
            let saved = saving.s.usage_snapshot(Time(now - 1));
            assert_eq!(saved.len(), 1, "alice's running job is charged: {saved:?}");
        }
        assert_eq!(saving.pass(now), not.pass(now), "at {now}");
        let priorities = |sim: &Sim| -> Vec<u64> {
            (2..=3)
                .map(|id| sim.s.priority(sim.s.job(JobId(id)).expect("pending")))
                .collect()
        };
        let got = priorities(&saving);
        assert_eq!(got, priorities(&not), "at {now}");
        // Bob (job 2) and alice's pending job 3 differ only by their users' usage, which
        // counts from the first computation of the factors after alice's job started.
        let (bob, alice) = (got[0], got[1]);
        if now < 300 {
            assert_eq!(bob, alice, "at {now}: the factors of the start still hold");
        } else {
            moved |= bob > alice;
        }
    }
    assert!(
        moved,
        "alice's usage moved her priority once the factors were computed again"
    );
}

#[test]
fn an_arrays_running_tasks_stay_within_its_percent_limit() {
    let mut sim = Sim::new(Cluster::flat_gpu(2, 8), plain());
    let task = |index| {
        with(job(1, 1, 100), |s| {
            s.array = Some(cadre_core::job::ArrayIndex {
                array_job: JobId(1),
                index,
                max_running: Some(2),
            })
        })
    };
    for i in 0..5u32 {
        sim.submit(u64::from(i) + 1, task(i), 0);
    }
    // Room for all five, but `%2`: two run, the others wait for them.
    assert_eq!(summary(&sim.pass(0)), ["start 1", "start 2"]);
    assert_eq!(sim.reason(3), "JobArrayTaskLimit");
    sim.end(1, JobState::Completed, 10);
    assert_eq!(summary(&sim.pass(10)), ["start 3"]);
    assert_eq!(sim.reason(4), "JobArrayTaskLimit");
    // Another job is not held back by the array's limit.
    sim.submit(9, job(1, 1, 100), 11);
    assert_eq!(summary(&sim.pass(11)), ["start 9"]);
}
