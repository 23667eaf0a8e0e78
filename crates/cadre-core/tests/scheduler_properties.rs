//! Property tests of the scheduler over random clusters, jobs and event orders.
//!
//! A recording executor plays the part of the controller and agents: it starts what the
//! scheduler starts, ends jobs at random times, stops what it is told to stop, drains and
//! downs nodes. After every event and every pass the scheduler's own invariants are checked,
//! and these properties independently of its code:
//! - every started allocation is a whole gang that books cleanly;
//! - the running jobs of each queue stay within its nominal quota plus borrowing limit, a
//!   cohort within the nominal quotas of its members, and each user within its per-user
//!   limit (counted from the allocations, not the quota book);
//! - reservations and the jobs running beside them never oversubscribe a node at any
//!   reservation's start (so a backfilled job never delays a reservation);
//! - the same events at the same times give the same decisions, bit for bit;
//! - a scheduler rebuilt mid-run as a restarted controller rebuilds it (nodes' states, ended
//!   jobs, running jobs adopted with their allocations, pending jobs restored, in id order)
//!   holds exactly what the old one held: the same usage on every node, the same quota
//!   use, the same jobs with the same allocations, ends, requeue counts and holds.

use cadre_core::backfill::Reservation;
use cadre_core::cluster::{Cluster, NodeAvail, NodeId};
use cadre_core::job::{JobId, JobSpec, JobState, NetworkSpan, NumaPolicy, TaskGroup};
use cadre_core::policy::{BackfillMode, Policy, PriorityClassConfig, QosConfig};
use cadre_core::quota::{QueueConfig, QuotaAmounts, QuotaConfig};
use cadre_core::resources::{Amounts, TaskResources};
use cadre_core::scheduler::{Decision, Event, Scheduler};
use cadre_core::time::{Dur, Time};
use proptest::prelude::*;
use std::collections::BTreeMap;

const CLUSTER_WITH_TREE: &str = r#"
version = 1
name = "prop"

[[shape]]
name = "g4"
cores = 16
memory = "256G"
gpu_model = "h100"
gpu_memory = "80G"
numa = 2
gpus = 4
nics = 2

[[nodes]]
names = "n[1-6]"
shape = "g4"

[[partition]]
name = "gpu"
nodes = "ALL"
default = true

[[switch]]
name = "leaf1"
nodes = "n[1-3]"

[[switch]]
name = "leaf2"
nodes = "n[4-6]"

[[switch]]
name = "spine"
switches = "leaf[1-2]"
"#;

/// Six 4-GPU nodes in two partitions over the same nodes: `lo` (tier 1, default) and `hi`
/// (tier 2, which may preempt `lo`).
const CLUSTER_WITH_TIERS: &str = r#"
version = 1
name = "tiers"

[[shape]]
name = "g4"
cores = 16
memory = "256G"
gpu_model = "h100"
gpu_memory = "80G"
numa = 2
gpus = 4
nics = 2

[[nodes]]
names = "n[1-6]"
shape = "g4"

[[partition]]
name = "lo"
nodes = "ALL"
default = true
priority_tier = 1

[[partition]]
name = "hi"
nodes = "n[3-6]"
priority_tier = 2
priority_job_factor = 2
"#;

#[derive(Clone, Debug)]
struct JobGen {
    groups: Vec<(u32, Option<u32>, u32, u32)>, // count, min, gpus per task, cpus per task
    limit: u64,
    run: u64,
    numa: u8,
    span: u8,
    exclusive: bool,
    class: u8,
    account: u8,
    submit: u64,
    /// Which user of the account (two per account).
    user: u8,
    /// No QOS, `scavenger`, `normal` or `urgent` (which may preempt `scavenger`).
    qos: u8,
    /// The `hi` partition, where the cluster has one.
    hi: bool,
}

fn job_gen(max_gpus: u32) -> impl Strategy<Value = JobGen> {
    let group = (
        1u32..4,
        prop::option::of(1u32..3),
        0..=max_gpus.min(4),
        1u32..9,
    );
    (
        prop::collection::vec(group, 1..3),
        60u64..2000,
        1u64..2500,
        0u8..3,
        0u8..4,
        prop::bool::weighted(0.1),
        0u8..3,
        0u8..3,
        0u64..3000,
        (0u8..2, 0u8..4, prop::bool::weighted(0.3)),
    )
        .prop_map(
            |(
                groups,
                limit,
                run,
                numa,
                span,
                exclusive,
                class,
                account,
                submit,
                (user, qos, hi),
            )| {
                JobGen {
                    groups,
                    limit,
                    run,
                    numa,
                    span,
                    exclusive,
                    class,
                    account,
                    submit,
                    user,
                    qos,
                    hi,
                }
            },
        )
}

fn spec_of(g: &JobGen, tiers: bool) -> JobSpec {
    let mut spec = JobSpec::simple(
        &format!("user{}{}", g.account, g.user),
        &format!("acct{}", g.account),
        1,
        TaskResources::default(),
        Dur(g.limit),
    );
    spec.groups = g
        .groups
        .iter()
        .enumerate()
        .map(|(i, &(count, min, gpus, cpus))| TaskGroup {
            name: format!("g{i}"),
            count,
            min_count: min.map(|m| m.min(count)),
            per_task: TaskResources {
                cpus,
                mem_mib: 1024,
                gpus,
                ..TaskResources::default()
            },
            tasks_per_node: None,
            nodes: None,
        })
        .collect();
    spec.submit_time = Time(g.submit);
    spec.exclusive = g.exclusive;
    spec.topology.numa =
        [NumaPolicy::None, NumaPolicy::Preferred, NumaPolicy::Strict][g.numa as usize];
    spec.topology.span = [
        NetworkSpan::Any,
        NetworkSpan::OneLeaf,
        NetworkSpan::MaxSwitches(1),
        NetworkSpan::Any,
    ][g.span as usize];
    spec.priority_class = match g.class {
        1 => Some("low".into()),
        2 => Some("high".into()),
        _ => None,
    };
    spec.qos = match g.qos {
        1 => Some("scavenger".into()),
        2 => Some("normal".into()),
        3 => Some("urgent".into()),
        _ => None,
    };
    if tiers && g.hi {
        spec.partition = Some("hi".into());
    }
    spec
}

/// Queues `qa` (account acct0) and `qb` (acct1) in one cohort with small nominal quotas;
/// `qa` may borrow 2 GPUs and 8 cores; each user of `qb` may use 3 GPUs. acct2 has no queue.
fn quotas() -> QuotaConfig {
    let queue = |name: &str, account: &str, gpus: u64, cpus: u64| QueueConfig {
        name: name.into(),
        cohort: Some("c".into()),
        nominal: QuotaAmounts {
            cpus: Some(cpus),
            ..QuotaAmounts::gpus(gpus)
        },
        borrowing_limit: None,
        lending_limit: None,
        capability: None,
        weight: 1,
        accounts: vec![account.into()],
        max_per_user: None,
        max_running_jobs_per_user: None,
    };
    QuotaConfig {
        queues: vec![
            QueueConfig {
                borrowing_limit: Some(QuotaAmounts {
                    cpus: Some(8),
                    ..QuotaAmounts::gpus(2)
                }),
                ..queue("qa", "acct0", 4, 24)
            },
            QueueConfig {
                max_per_user: Some(QuotaAmounts::gpus(3)),
                ..queue("qb", "acct1", 4, 16)
            },
        ],
        accounts: vec![],
        namespaces: vec![],
    }
}

/// Checks the quotas of [`quotas`] against the allocations of the active jobs, independently
/// of the quota book.
fn check_quotas(sched: &Scheduler) -> Result<(), String> {
    if sched.policy().quotas.queues.is_empty() {
        return Ok(());
    }
    let mut by_account: BTreeMap<&str, Amounts> = BTreeMap::new();
    let mut by_user: BTreeMap<(&str, &str), Amounts> = BTreeMap::new();
    for job in sched.jobs().filter(|j| j.state.is_active()) {
        let a = job.spec_amounts_held();
        *by_account.entry(job.spec.account.as_str()).or_default() += a;
        *by_user
            .entry((job.spec.account.as_str(), job.spec.user.as_str()))
            .or_default() += a;
    }
    let used = |acct: &str| by_account.get(acct).copied().unwrap_or_default();
    let (qa, qb) = (used("acct0"), used("acct1"));
    if qa.gpu_milli > 6000 || qa.cpus > 32 {
        return Err(format!(
            "queue qa uses {qa:?}, above nominal plus borrowing limit"
        ));
    }
    if qa.gpu_milli + qb.gpu_milli > 8000 || qa.cpus + qb.cpus > 40 {
        return Err(format!(
            "cohort c uses {qa:?} + {qb:?}, above its nominal quotas"
        ));
    }
    for ((acct, user), a) in by_user {
        if acct == "acct1" && a.gpu_milli > 3000 {
            return Err(format!(
                "user {user} uses {a:?} in qb, above its max_per_user"
            ));
        }
    }
    Ok(())
}

fn policy_with(mode: u8, with_quotas: bool) -> Policy {
    let mut p = policy(mode);
    if with_quotas {
        p.quotas = quotas();
    }
    p
}

fn policy(mode: u8) -> Policy {
    let mut p = match mode {
        0 => Policy::default(),
        1 => Policy::slurm(),
        _ => Policy::fifo(),
    };
    if mode == 3 {
        p = Policy::default();
        p.backfill.mode = BackfillMode::Conservative;
    }
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
    p.qos = vec![
        QosConfig {
            name: "scavenger".into(),
            priority: 0,
            preempt: vec![],
        },
        QosConfig {
            name: "normal".into(),
            priority: 10,
            preempt: vec![],
        },
        QosConfig {
            name: "urgent".into(),
            priority: 20,
            preempt: vec!["scavenger".into()],
        },
    ];
    p.preemption.grace = Dur(30);
    p
}

/// What the executor does between passes.
#[derive(Clone, Debug)]
enum Act {
    Drain(u32),
    Down(u32),
    Up(u32),
    Cancel(u64),
    /// The controller restarts: the scheduler is rebuilt from what a store would hold.
    Restart,
    /// The quotas are replaced while jobs run ([`replaced_quotas`]).
    SetQuotas(u8),
}

/// The quota configurations the properties switch between: [`quotas`]; both queues lowered
/// to 2 GPUs without borrowing; `qb` deleted; no quotas at all; both queues out of their
/// cohort.
fn replaced_quotas(which: u8) -> QuotaConfig {
    let mut q = quotas();
    match which % 5 {
        0 => {}
        1 => {
            for queue in &mut q.queues {
                queue.nominal.gpu_milli = Some(2000);
                queue.borrowing_limit = None;
            }
        }
        2 => q.queues.retain(|x| x.name != "qb"),
        3 => q = QuotaConfig::default(),
        _ => {
            for queue in &mut q.queues {
                queue.cohort = None;
                queue.borrowing_limit = None;
            }
        }
    }
    q
}

fn act_gen() -> impl Strategy<Value = Act> {
    prop_oneof![
        (0u32..6).prop_map(Act::Drain),
        (0u32..6).prop_map(Act::Down),
        (0u32..6).prop_map(Act::Up),
        (1u64..25).prop_map(Act::Cancel),
        Just(Act::Restart),
        (0u8..5).prop_map(Act::SetQuotas),
    ]
}

/// Checks reservations against the jobs running beside them, independently of the
/// scheduler's profile code: at every reservation's start, on every node, what running jobs
/// still hold plus what reservations cover must fit in the node.
fn check_reservations(
    sched: &Scheduler,
    reservations: &[Reservation],
    now: Time,
    grace: Dur,
) -> Result<(), String> {
    let cluster = sched.cluster();
    let mut times: Vec<Time> = reservations.iter().map(|r| r.start).collect();
    times.push(now);
    for &t in &times {
        let mut load: BTreeMap<NodeId, Amounts> = BTreeMap::new();
        for job in sched.jobs().filter(|j| j.state.is_active()) {
            // A job asked to stop ends within its grace time, or at its time limit.
            let limit_end = job.end_time.unwrap_or(Time::NEVER);
            let end = if job.state == JobState::Preempting || job.stopping.is_some() {
                limit_end.min(now + grace)
            } else {
                limit_end
            };
            if end > t {
                for &(n, a) in &job.per_node {
                    *load.entry(n).or_default() += a;
                }
            }
        }
        for r in reservations.iter().filter(|r| r.start <= t && t < r.end) {
            for &(n, a) in &r.nodes {
                if cluster.node(n).avail != NodeAvail::Up {
                    return Err(format!(
                        "reservation of job {} is on node {} which is not up",
                        r.job, n.0
                    ));
                }
                *load.entry(n).or_default() += a;
            }
        }
        for (n, a) in load {
            let cap = cluster.shape(n).capacity();
            if !a.fits_in(&cap) {
                let jobs: Vec<String> = sched
                    .jobs()
                    .filter(|j| j.state.is_active() && j.per_node.iter().any(|(m, _)| *m == n))
                    .map(|j| {
                        format!(
                            "job {} {} ends {:?} gpus {}",
                            j.id,
                            j.state,
                            j.end_time,
                            j.spec_amounts_held().gpu_milli
                        )
                    })
                    .collect();
                let res: Vec<String> = reservations
                    .iter()
                    .filter(|r| r.nodes.iter().any(|(m, _)| *m == n))
                    .map(|r| format!("resv job {} {}..{} {:?}", r.job, r.start, r.end, r.nodes))
                    .collect();
                return Err(format!(
                    "at {t} (now {now}) node {} would hold {a:?} of {cap:?}; running: {jobs:?}; reservations: {res:?}",
                    n.0
                ));
            }
        }
    }
    Ok(())
}

/// A scheduler rebuilt from `old`'s jobs as a restarted controller rebuilds it from its
/// store, with the decisions the rebuild gave.
fn rebuild(
    old: &Scheduler,
    cluster: &Cluster,
    policy: &Policy,
    ids: u64,
    now: Time,
) -> Result<(Scheduler, Vec<Decision>), String> {
    let mut new = Scheduler::new(cluster.clone(), policy.clone()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut apply = |new: &mut Scheduler, e: Event| -> Result<(), String> {
        let what = format!("{e:?}");
        let ds = new
            .handle(e, now)
            .map_err(|err| format!("rebuild: {what} refused: {err}"))?;
        new.check_invariants()?;
        out.extend(ds);
        Ok(())
    };
    // The quotas in force (replaced since the start, maybe) come back before any job.
    let quotas = Box::new(old.policy().quotas.clone());
    apply(&mut new, Event::SetQuotas { quotas })?;
    for (i, node) in old.cluster().nodes.iter().enumerate() {
        if node.avail != NodeAvail::Up {
            let e = Event::NodeAvail {
                node: NodeId(i as u32),
                avail: node.avail,
                reason: node.reason.clone(),
            };
            apply(&mut new, e)?;
        }
    }
    for id in (1..=ids).map(JobId) {
        if let Some(state) = old.ended_state(id) {
            apply(&mut new, Event::RestoreEnded { id, state })?;
            continue;
        }
        let Some(job) = old.job(id) else { continue };
        let spec = Box::new(job.spec.clone());
        let e = match (&job.allocation, job.start_time) {
            (Some(allocation), Some(start_time)) if job.state.is_active() => Event::Adopt {
                id,
                spec,
                allocation: allocation.clone(),
                start_time,
                requeues: job.requeues,
            },
            _ => Event::RestorePending {
                id,
                spec,
                requeues: job.requeues,
                hold: job.hold,
            },
        };
        apply(&mut new, e)?;
    }
    same_holdings(old, &new)?;
    Ok((new, out))
}

/// Whether two schedulers hold the same: node usage and state, quota use, and every job's
/// activity, allocation, ends, requeue count and hold.
fn same_holdings(old: &Scheduler, new: &Scheduler) -> Result<(), String> {
    for (a, b) in old.cluster().nodes.iter().zip(&new.cluster().nodes) {
        if a.usage != b.usage || a.avail != b.avail {
            return Err(format!("node {} differs after a rebuild", a.name));
        }
    }
    for n in 0..old.cluster().nodes.len() as u32 {
        let (a, b) = (
            old.cluster().free_amounts(NodeId(n)),
            new.cluster().free_amounts(NodeId(n)),
        );
        if a != b {
            return Err(format!("node {n} frees {b:?} after a rebuild, not {a:?}"));
        }
    }
    if old.quota().rows() != new.quota().rows() {
        return Err(format!(
            "quota use differs after a rebuild: {:?} vs {:?}",
            old.quota().rows(),
            new.quota().rows()
        ));
    }
    if (old.pending_count(), old.active_count()) != (new.pending_count(), new.active_count()) {
        return Err("pending or active counts differ after a rebuild".into());
    }
    for a in old.jobs() {
        let b = new
            .job(a.id)
            .ok_or_else(|| format!("job {} lost in a rebuild", a.id))?;
        let view = |j: &cadre_core::scheduler::Job| {
            (
                j.state.is_active(),
                j.allocation.clone(),
                j.per_node.clone(),
                j.start_time,
                j.end_time,
                j.requeues,
                j.hold,
            )
        };
        if view(a) != view(b) {
            return Err(format!(
                "job {} differs after a rebuild: {:?} vs {:?}",
                a.id,
                view(a),
                view(b)
            ));
        }
    }
    Ok(())
}

/// Runs a scenario and returns every decision with its time.
fn run(
    cluster: &Cluster,
    policy: &Policy,
    jobs: &[JobGen],
    acts: &[Act],
) -> Result<Vec<(Time, Decision)>, String> {
    let grace = policy.preemption.grace;
    let tiers = cluster.partition_id("hi").is_some();
    let mut sched = Scheduler::new(cluster.clone(), policy.clone()).map_err(|e| e.to_string())?;
    let mut log = Vec::new();
    // Executor state: when each running job ends by itself, and jobs asked to stop.
    let mut ends: BTreeMap<JobId, Time> = BTreeMap::new();
    let mut submits: Vec<(Time, JobId, &JobGen)> = jobs
        .iter()
        .enumerate()
        .map(|(i, g)| (Time(g.submit), JobId(i as u64 + 1), g))
        .collect();
    submits.sort_by_key(|(t, id, _)| (*t, *id));
    let mut next_submit = 0;
    let mut acts = acts.iter();
    let mut runs: BTreeMap<JobId, u64> = BTreeMap::new();
    let mut replaced = false;
    for step in 0..60u64 {
        let now = Time(step * 100);
        while next_submit < submits.len() && submits[next_submit].0 <= now {
            let (t, id, g) = submits[next_submit];
            runs.insert(id, g.run);
            sched
                .handle(
                    Event::Submit {
                        id,
                        spec: Box::new(spec_of(g, tiers)),
                    },
                    t.max(Time(0)),
                )
                .map_err(|e| e.to_string())?;
            sched.check_invariants()?;
            next_submit += 1;
        }
        // Jobs whose time has come end: by themselves, by time limit, or after a stop.
        let due: Vec<(JobId, Time)> = ends
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(j, t)| (*j, *t))
            .collect();
        for (id, _) in due {
            ends.remove(&id);
            let outcome = match sched.job(id) {
                Some(j) if j.state.is_active() => {
                    if j.stopping.is_some() {
                        JobState::Cancelled
                    } else if runs[&id] > j.spec.time_limit.0 {
                        JobState::Timeout
                    } else {
                        JobState::Completed
                    }
                }
                _ => continue,
            };
            sched
                .handle(Event::Ended { id, outcome }, now)
                .map_err(|e| e.to_string())?;
            sched.check_invariants()?;
        }
        if step % 3 == 1 {
            if let Some(act) = acts.next() {
                let decisions = match act {
                    Act::Drain(n) => sched.handle(
                        Event::NodeAvail {
                            node: NodeId(*n % cluster.nodes.len() as u32),
                            avail: NodeAvail::Drain,
                            reason: Some("maint".into()),
                        },
                        now,
                    ),
                    Act::Down(n) => sched.handle(
                        Event::NodeAvail {
                            node: NodeId(*n % cluster.nodes.len() as u32),
                            avail: NodeAvail::Down,
                            reason: Some("dead".into()),
                        },
                        now,
                    ),
                    Act::Up(n) => sched.handle(
                        Event::NodeAvail {
                            node: NodeId(*n % cluster.nodes.len() as u32),
                            avail: NodeAvail::Up,
                            reason: None,
                        },
                        now,
                    ),
                    Act::Cancel(id) => match sched.handle(Event::Cancel { id: JobId(*id) }, now) {
                        Ok(d) => Ok(d),
                        Err(_) => Ok(Vec::new()), // unknown or ended: the executor ignores it
                    },
                    Act::Restart => {
                        let (new, decisions) =
                            rebuild(&sched, cluster, policy, jobs.len() as u64, now)?;
                        sched = new;
                        Ok(decisions)
                    }
                    Act::SetQuotas(which) => {
                        replaced = true;
                        let active: Vec<(JobId, JobState)> = sched
                            .jobs()
                            .filter(|j| j.state.is_active())
                            .map(|j| (j.id, j.state))
                            .collect();
                        let quotas = Box::new(replaced_quotas(*which));
                        let ds = sched.handle(Event::SetQuotas { quotas }, now);
                        let still: Vec<(JobId, JobState)> = sched
                            .jobs()
                            .filter(|j| j.state.is_active())
                            .map(|j| (j.id, j.state))
                            .collect();
                        if active != still {
                            return Err(format!(
                                "replacing the quotas changed the running jobs: {active:?} -> {still:?}"
                            ));
                        }
                        if ds.as_ref().is_ok_and(|d| !d.is_empty()) {
                            return Err(format!("replacing the quotas decided {ds:?}"));
                        }
                        ds
                    }
                }
                .map_err(|e| e.to_string())?;
                for d in &decisions {
                    if let Decision::Stop { job, .. } = d {
                        ends.insert(*job, now + Dur(1));
                    }
                }
                log.extend(decisions.into_iter().map(|d| (now, d)));
                sched.check_invariants()?;
            }
        }
        let decisions = sched.schedule(now);
        sched.check_invariants()?;
        let mut reservations = Vec::new();
        for d in &decisions {
            match d {
                Decision::Start { job, allocation } => {
                    let mut scratch = cluster.clone();
                    scratch.book(*job, allocation).map_err(|e| {
                        format!("start of job {job} does not book on an empty cluster: {e}")
                    })?;
                    let spec = &sched.job(*job).ok_or("started job vanished")?.spec;
                    for (gi, g) in spec.groups.iter().enumerate() {
                        let n = allocation
                            .tasks
                            .iter()
                            .filter(|t| usize::from(t.group) == gi)
                            .count() as u32;
                        if n < g.min_tasks() || n > g.count {
                            return Err(format!("job {job} group {gi} started with {n} tasks"));
                        }
                    }
                    ends.insert(*job, now + Dur(runs[job].min(spec.time_limit.0).max(1)));
                }
                Decision::Preempt { victim, grace, .. } => {
                    ends.insert(*victim, now + *grace);
                }
                Decision::Stop { job, .. } => {
                    ends.insert(*job, now + Dur(1));
                }
                Decision::Reserve(r) => reservations.push(r.clone()),
            }
        }
        check_reservations(&sched, &reservations, now, grace)?;
        // Checked against `quotas()` only while they were never replaced: a replacement may
        // leave running jobs above the new limits (they are not stopped).
        if !replaced {
            check_quotas(&sched)?;
        }
        log.extend(decisions.into_iter().map(|d| (now, d)));
    }
    Ok(log)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_on_flat_clusters(
        nodes in 1u32..5,
        gpus in prop::sample::select(vec![0u32, 2, 4, 8]),
        mode in 0u8..4,
        jobs in prop::collection::vec(job_gen(8), 1..25),
        acts in prop::collection::vec(act_gen(), 0..8),
    ) {
        let cluster = Cluster::flat_gpu(nodes, gpus);
        let policy = policy(mode);
        let first = run(&cluster, &policy, &jobs, &acts);
        prop_assert!(first.is_ok(), "{}", first.unwrap_err());
        let second = run(&cluster, &policy, &jobs, &acts);
        prop_assert_eq!(first.unwrap(), second.unwrap(), "same events, same decisions");
    }

    #[test]
    fn invariants_hold_with_quotas_qos_and_partition_tiers(
        mode in 0u8..4,
        tiers in prop::bool::ANY,
        jobs in prop::collection::vec(job_gen(4), 1..25),
        acts in prop::collection::vec(act_gen(), 0..8),
    ) {
        let cluster = if tiers {
            cadre_core::config::load_cluster(CLUSTER_WITH_TIERS, "tiers.toml").unwrap()
        } else {
            Cluster::flat_gpu(3, 4)
        };
        let policy = policy_with(mode, true);
        let first = run(&cluster, &policy, &jobs, &acts);
        prop_assert!(first.is_ok(), "{}", first.unwrap_err());
        let second = run(&cluster, &policy, &jobs, &acts);
        prop_assert_eq!(first.unwrap(), second.unwrap(), "same events, same decisions");
    }

    #[test]
    fn invariants_hold_with_a_switch_tree_and_numa(
        mode in 0u8..4,
        jobs in prop::collection::vec(job_gen(4), 1..25),
        acts in prop::collection::vec(act_gen(), 0..8),
    ) {
        let cluster = cadre_core::config::load_cluster(CLUSTER_WITH_TREE, "prop.toml").unwrap();
        let result = run(&cluster, &policy(mode), &jobs, &acts);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}
