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
