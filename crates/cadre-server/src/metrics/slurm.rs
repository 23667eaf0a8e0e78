//! The series of Slurm 25.11's OpenMetrics endpoints (`/metrics/jobs`, `/metrics/nodes`,
//! `/metrics/partitions`, `/metrics/scheduler`) whose meaning cadre has, under Slurm's names
//! and labels, so that dashboards and alerts built for Slurm read cadre's `/metrics`
//! unchanged. Served beside cadre's own `cadre_*` series, computed from the same live
//! state at each scrape.
//!
//! What maps: jobs by state (`slurm_jobs_pending`, `slurm_jobs_running`, `slurm_jobs_hold`
//! for held pending jobs, ...); what running jobs hold (`slurm_jobs_gpus_alloc`,
//! `slurm_jobs_cpus_alloc`); nodes by state (`slurm_nodes_idle`, `slurm_nodes_mixed`,
//! `slurm_nodes_alloc`, `slurm_nodes_drain` for drained and draining, `slurm_nodes_down`,
//! ...); per node (`slurm_node_cpus`, `slurm_node_gpus`, `slurm_node_gpus_alloc`,
//! `slurm_node_memory_bytes`, ... with `node`); per partition (`slurm_partition_gpus`,
//! `slurm_partition_jobs_gpus_alloc`, `slurm_partition_jobs_pending`, ... with
//! `partition`); scheduling passes (`slurm_schedule_cycle_last`, `_max`, `_cnt`, `_tot` and
//! `slurm_sched_mean_cycle`, in microseconds as `sdiag` gives them, updated as passes end:
//! [`CycleStats`]). Backfill runs inside cadre's one pass, so Slurm's separate `slurm_bf_*`
//! cycle series have no counterpart and are not served.

use cadre_core::cluster::{NodeId, NodeState};
use cadre_core::job::JobState;
use cadre_core::resources::MILLI_PER_GPU;
use cadre_core::scheduler::Scheduler;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

type FGauge = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabel {
    partition: String,
}

/// Scheduling passes as `sdiag` counts them (microseconds), updated as each pass ends.
#[derive(Clone, Default)]
pub struct CycleStats {
    last: Gauge,
    max: Gauge,
    count: Gauge,
    total: Gauge,
    mean: Gauge,
}

impl CycleStats {
    pub fn register(&self, registry: &mut Registry) {
        let r = registry;
        r.register(
            "slurm_schedule_cycle_last",
            "Duration of the last scheduling pass (microseconds)",
            self.last.clone(),
        );
        r.register(
            "slurm_schedule_cycle_max",
            "Longest scheduling pass (microseconds)",
            self.max.clone(),
        );
        r.register(
            "slurm_schedule_cycle_cnt",
            "Scheduling passes run",
            self.count.clone(),
        );
        r.register(
            "slurm_schedule_cycle_tot",
            "Sum of the scheduling passes' durations (microseconds)",
            self.total.clone(),
        );
        r.register(
            "slurm_sched_mean_cycle",
            "Mean duration of the scheduling passes (microseconds)",
            self.mean.clone(),
        );
    }

    /// (passes, last, max, mean) with the durations in microseconds.
    pub fn summary(&self) -> (i64, i64, i64, i64) {
        (
            self.count.get(),
            self.last.get(),
            self.max.get(),
            self.mean.get(),
        )
    }

    pub fn observe(&self, took: Duration) {
        let us = i64::try_from(took.as_micros()).unwrap_or(i64::MAX);
        self.last.set(us);
        if us > self.max.get() {
            self.max.set(us);
        }
        let n = self.count.inc() + 1;
        let total = self.total.inc_by(us).saturating_add(us);
        self.mean.set(total / n.max(1));
    }
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: f64) {
    let g = FGauge::default();
    g.set(value);
    registry.register(name, help, g);
}

/// The jobs', nodes' and partitions' series, from the scheduler's live state.
pub fn register_state(sched: &Scheduler, registry: &mut Registry) {
    let cluster = sched.cluster();
    let mut by_state: BTreeMap<JobState, f64> = BTreeMap::new();
    let (mut held, mut gpus, mut cpus, mut jobs) = (0.0, 0.0, 0.0, 0.0);
    let mut part_pending: BTreeMap<u16, f64> = BTreeMap::new();
    let mut part_running: BTreeMap<u16, f64> = BTreeMap::new();
    let mut part_gpus_alloc: BTreeMap<u16, f64> = BTreeMap::new();
    for j in sched.jobs() {
        jobs += 1.0;
        *by_state.entry(j.state).or_default() += 1.0;
        if j.state == JobState::Pending {
            *part_pending.entry(j.partition.0).or_default() += 1.0;
            if j.hold.is_some() {
                held += 1.0;
            }
        }
        if let Some(a) = &j.allocation {
            let amounts = a.amounts();
            let g = amounts.gpu_milli as f64 / f64::from(MILLI_PER_GPU);
            gpus += g;
            cpus += amounts.cpus as f64;
            *part_gpus_alloc.entry(j.partition.0).or_default() += g;
        }
        if j.state == JobState::Running {
            *part_running.entry(j.partition.0).or_default() += 1.0;
        }
    }
    let state_count = |s: JobState| by_state.get(&s).copied().unwrap_or(0.0);
    for (name, help, value) in [
        ("slurm_jobs", "Jobs in the scheduler", jobs),
        (
            "slurm_jobs_pending",
            "Jobs pending",
            state_count(JobState::Pending),
        ),
        (
            "slurm_jobs_running",
            "Jobs running",
            state_count(JobState::Running),
        ),
        ("slurm_jobs_hold", "Pending jobs held", held),
        (
            "slurm_jobs_completing",
            "Jobs being stopped (preempted, ending)",
            state_count(JobState::Preempting),
        ),
        ("slurm_jobs_gpus_alloc", "GPUs allocated to jobs", gpus),
        ("slurm_jobs_cpus_alloc", "CPUs allocated to jobs", cpus),
    ] {
        gauge(registry, name, help, value);
    }

    let mut nodes_by_state: BTreeMap<NodeState, f64> = BTreeMap::new();
    let node_cpus = Family::<NodeLabel, FGauge>::default();
    let node_cpus_alloc = Family::<NodeLabel, FGauge>::default();
    let node_gpus = Family::<NodeLabel, FGauge>::default();
    let node_gpus_alloc = Family::<NodeLabel, FGauge>::default();
    let node_mem = Family::<NodeLabel, FGauge>::default();
    let node_mem_alloc = Family::<NodeLabel, FGauge>::default();
    for i in 0..cluster.nodes.len() {
        let id = NodeId(i as u32);
        let node = cluster.node(id);
        *nodes_by_state.entry(cluster.node_state(id)).or_default() += 1.0;
        let cap = cluster.shape(id).capacity();
        let used = node.usage.amounts();
        let l = NodeLabel {
            node: node.name.clone(),
        };
        node_cpus.get_or_create(&l).set(cap.cpus as f64);
        node_cpus_alloc.get_or_create(&l).set(used.cpus as f64);
        node_gpus
            .get_or_create(&l)
            .set((cap.gpu_milli / u64::from(MILLI_PER_GPU)) as f64);
        node_gpus_alloc
            .get_or_create(&l)
            .set(used.gpu_milli as f64 / f64::from(MILLI_PER_GPU));
        node_mem
            .get_or_create(&l)
            .set(cap.mem_mib as f64 * 1024.0 * 1024.0);
        node_mem_alloc
            .get_or_create(&l)
            .set(used.mem_mib as f64 * 1024.0 * 1024.0);
    }
    let node_count = |s: NodeState| nodes_by_state.get(&s).copied().unwrap_or(0.0);
    for (name, help, value) in [
        ("slurm_nodes", "Nodes", cluster.nodes.len() as f64),
        (
            "slurm_nodes_idle",
            "Nodes idle",
            node_count(NodeState::Idle),
        ),
        (
            "slurm_nodes_mixed",
            "Nodes partly allocated",
            node_count(NodeState::Mixed),
        ),
        (
            "slurm_nodes_alloc",
            "Nodes fully allocated",
            node_count(NodeState::Allocated),
        ),
        (
            "slurm_nodes_drain",
            "Nodes with the drain flag (draining or drained)",
            node_count(NodeState::Draining) + node_count(NodeState::Drained),
        ),
        (
            "slurm_nodes_drained",
            "Nodes drained",
            node_count(NodeState::Drained),
        ),
        (
            "slurm_nodes_draining",
            "Nodes draining (jobs still running)",
            node_count(NodeState::Draining),
        ),
        (
            "slurm_nodes_down",
            "Nodes down",
            node_count(NodeState::Down),
        ),
        (
            "slurm_nodes_unknown",
            "Nodes in an unknown state",
            node_count(NodeState::Unknown),
        ),
    ] {
        gauge(registry, name, help, value);
    }
    registry.register("slurm_node_cpus", "CPUs of the node", node_cpus);
    registry.register(
        "slurm_node_cpus_alloc",
        "CPUs allocated on the node",
        node_cpus_alloc,
    );
    registry.register("slurm_node_gpus", "GPUs of the node", node_gpus);
    registry.register(
        "slurm_node_gpus_alloc",
        "GPUs allocated on the node (fractions for shared GPUs)",
        node_gpus_alloc,
    );
    registry.register("slurm_node_memory_bytes", "Memory of the node", node_mem);
    registry.register(
        "slurm_node_memory_alloc_bytes",
        "Memory allocated on the node",
        node_mem_alloc,
    );

    let p_gpus = Family::<PartitionLabel, FGauge>::default();
    let p_nodes = Family::<PartitionLabel, FGauge>::default();
    let p_gpus_alloc = Family::<PartitionLabel, FGauge>::default();
    let p_pending = Family::<PartitionLabel, FGauge>::default();
    let p_running = Family::<PartitionLabel, FGauge>::default();
    for (i, part) in cluster.partitions.iter().enumerate() {
        let l = PartitionLabel {
            partition: part.name.clone(),
        };
        let i = i as u16;
        let total: u64 = part
            .nodes
            .iter()
            .map(|&n| cluster.shape(n).capacity().gpu_milli / u64::from(MILLI_PER_GPU))
            .sum();
        p_gpus.get_or_create(&l).set(total as f64);
        p_nodes.get_or_create(&l).set(part.nodes.len() as f64);
        let get = |m: &BTreeMap<u16, f64>| m.get(&i).copied().unwrap_or(0.0);
        p_gpus_alloc.get_or_create(&l).set(get(&part_gpus_alloc));
        p_pending.get_or_create(&l).set(get(&part_pending));
        p_running.get_or_create(&l).set(get(&part_running));
    }
    registry.register("slurm_partitions", "Partitions", {
        let g = FGauge::default();
        g.set(cluster.partitions.len() as f64);
        g
    });
    registry.register(
        "slurm_partition_gpus",
        "GPUs of the partition's nodes",
        p_gpus,
    );
    registry.register("slurm_partition_nodes", "Nodes of the partition", p_nodes);
    registry.register(
        "slurm_partition_jobs_gpus_alloc",
        "GPUs allocated to the partition's jobs",
        p_gpus_alloc,
    );
    registry.register(
        "slurm_partition_jobs_pending",
        "The partition's jobs pending",
        p_pending,
    );
    registry.register(
        "slurm_partition_jobs_running",
        "The partition's jobs running",
        p_running,
    );
}
