//! Named regression tests for scheduler bugs.

use cadre_core::cluster::{Cluster, NodeAvail, NodeId};
use cadre_core::job::{JobId, JobSpec, JobState};
use cadre_core::policy::{Policy, PriorityClassConfig};
use cadre_core::resources::TaskResources;
use cadre_core::scheduler::{Decision, Event, PendingReason, Scheduler};
use cadre_core::time::{Dur, Time};

fn gpus(n: u32) -> TaskResources {
    TaskResources {
        cpus: 4,
        mem_mib: 1024,
        gpus: n,
        ..TaskResources::default()
    }
}

fn with_classes() -> Policy {
    Policy {
        priority_class: vec![
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
        ],
        ..Policy::default()
    }
}

fn submit(s: &mut Scheduler, id: u64, class: &str, n: u32, now: u64) {
    let mut spec = JobSpec::simple("u", "a", 1, gpus(n), Dur(3600));
    spec.priority_class = Some(class.into());
    spec.submit_time = Time(now);
    s.handle(
        Event::Submit {
            id: JobId(id),
            spec: Box::new(spec),
        },
        Time(now),
    )
    .unwrap();
    s.check_invariants().unwrap();
}

/// A victim whose preemption was overridden (cancelled, or its node went down) while it
/// stopped left its preemptor waiting for it forever.
#[test]
fn preemptor_starts_when_an_overridden_victim_ends() {
    for override_with in ["cancel", "node_down"] {
        let mut s = Scheduler::new(Cluster::flat_gpu(1, 8), with_classes()).unwrap();
        submit(&mut s, 1, "low", 8, 0);
        assert!(matches!(s.schedule(Time(0))[..], [Decision::Start { .. }]));
        submit(&mut s, 2, "high", 8, 10);
        let d = s.schedule(Time(10));
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
        s.check_invariants().unwrap();
        match override_with {
            "cancel" => {
                s.handle(Event::Cancel { id: JobId(1) }, Time(11)).unwrap();
            }
            _ => {
                s.handle(
                    Event::NodeAvail {
                        node: NodeId(0),
                        avail: NodeAvail::Down,
                        reason: None,
                    },
                    Time(11),
                )
                .unwrap();
                s.handle(
                    Event::NodeAvail {
                        node: NodeId(0),
                        avail: NodeAvail::Up,
                        reason: None,
                    },
                    Time(12),
                )
                .unwrap();
            }
        }
        s.handle(
            Event::Ended {
                id: JobId(1),
                outcome: JobState::Cancelled,
            },
            Time(20),
        )
        .unwrap();
        s.check_invariants().unwrap();
        let d = s.schedule(Time(21));
        assert!(
            d.iter()
                .any(|d| matches!(d, Decision::Start { job: JobId(2), .. })),
            "{override_with}: preemptor must start once its victim is gone: {d:?} ({:?})",
            s.job(JobId(2)).map(|j| &j.reason)
        );
        assert_ne!(
            s.job(JobId(2)).map(|j| j.reason.clone()),
            Some(PendingReason::Preempting)
        );
    }
}

/// A preemptor evaluated after a higher job's reservation chose victims on the reserved
/// node, so that it would have run over the reservation; victims now come only from nodes
/// no earlier reservation needs while the preemptor runs.
#[test]
fn preemptor_leaves_a_higher_jobs_reserved_node_alone() {
    use cadre_core::policy::QosConfig;
    use cadre_core::priority::PriorityWeights;
    let policy = Policy {
        priority: PriorityWeights {
            age: 0,
            fairshare: 0,
            job_size: 0,
            partition: 0,
            qos: 0,
            ..PriorityWeights::default()
        },
        qos: vec![
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
        ],
        ..Policy::default()
    };
    let mut s = Scheduler::new(Cluster::flat_gpu(2, 8), policy).unwrap();
    let submit = |s: &mut Scheduler, id: u64, qos: &str, limit: u64, at: u64| {
        let mut spec = JobSpec::simple("u", "a", 1, gpus(8), Dur(limit));
        spec.qos = Some(qos.into());
        spec.submit_time = Time(at);
        s.handle(
            Event::Submit {
                id: JobId(id),
                spec: Box::new(spec),
            },
            Time(at),
        )
        .unwrap();
        s.check_invariants().unwrap();
    };
    // Scavengers on both nodes: job 1 (ends by t=1000) starts first, job 2 (ends by t=101)
    // a second later, so job 2 is the younger, cheaper victim.
    submit(&mut s, 1, "scavenger", 1000, 0);
    s.schedule(Time(0));
    submit(&mut s, 2, "scavenger", 100, 1);
    s.schedule(Time(1));
    let node_of = |s: &Scheduler, id: u64| {
        s.job(JobId(id))
            .and_then(|j| j.allocation.as_ref())
            .map(|a| a.nodes()[0])
    };
    let young_node = node_of(&s, 2).unwrap();
    // A normal job, first in order, is reserved on job 2's node when job 2 ends.
    submit(&mut s, 3, "normal", 500, 2);
    // An urgent job, after it in order (same priority, later submit), may preempt scavengers.
    submit(&mut s, 4, "urgent", 500, 3);
    let d = s.schedule(Time(3));
    let reserved = d.iter().find_map(|d| match d {
        Decision::Reserve(r) if r.job == JobId(3) => Some(r.nodes[0].0),
        _ => None,
    });
    assert_eq!(reserved, Some(young_node), "{d:?}");
    let victims: Vec<JobId> = d
        .iter()
        .filter_map(|d| {
            if let Decision::Preempt { victim, .. } = d {
                Some(*victim)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        victims,
        vec![JobId(1)],
        "the victim on the unreserved node: {d:?}"
    );
    s.check_invariants().unwrap();
}

/// A job whose totals fit the idle cluster but whose span rule never can (three nodes under
/// one leaf of two) showed `Resources` while the cluster was busy; placement now says
/// `BadConstraints` once per shape, as it does on an idle cluster.
#[test]
fn span_that_can_never_be_met_is_bad_constraints_even_on_a_busy_cluster() {
    use cadre_core::job::NetworkSpan;
    let toml = r#"
version = 1
name = "regression"
[[shape]]
name = "g8"
cores = 64
memory = "512G"
gpu_model = "h100"
gpu_memory = "80G"
numa = 2
gpus = 8
nics = 4
[[nodes]]
names = "n[1-4]"
shape = "g8"
[[partition]]
name = "gpu"
nodes = "ALL"
default = true
[[switch]]
name = "leaf1"
nodes = "n[1-2]"
[[switch]]
name = "leaf2"
nodes = "n[3-4]"
[[switch]]
name = "spine"
switches = "leaf[1-2]"
"#;
    let cluster = cadre_core::config::load_cluster(toml, "regression.toml").unwrap();
    let mut s = Scheduler::new(cluster, Policy::default()).unwrap();
    // Fill every GPU, then ask for three whole nodes under one leaf.
    let mut busy = JobSpec::simple("u", "a", 4, gpus(8), Dur(3600));
    busy.groups[0].tasks_per_node = Some(1);
    s.handle(
        Event::Submit {
            id: JobId(1),
            spec: Box::new(busy),
        },
        Time(0),
    )
    .unwrap();
    assert!(matches!(s.schedule(Time(0))[..], [Decision::Start { .. }]));
    let mut wide = JobSpec::simple("u", "a", 3, gpus(8), Dur(3600));
    wide.groups[0].tasks_per_node = Some(1);
    wide.topology.span = NetworkSpan::OneLeaf;
    s.handle(
        Event::Submit {
            id: JobId(2),
            spec: Box::new(wide),
        },
        Time(1),
    )
    .unwrap();
    s.schedule(Time(1));
    assert_eq!(
        s.job(JobId(2)).map(|j| j.reason.clone()),
        Some(PendingReason::BadConstraints)
    );
    // The answer is kept, not recomputed, on later passes.
    s.schedule(Time(2));
    assert_eq!(
        s.job(JobId(2)).map(|j| j.reason.clone()),
        Some(PendingReason::BadConstraints)
    );
    s.check_invariants().unwrap();
}
