//! The controller's metrics, declared in one place and served at `/metrics` in the
//! Prometheus text format (OpenMetrics).
//!
//! Counters and histograms are updated as things happen ([`Metrics`]); the state gauges
//! (jobs by state and partition, GPUs per partition, nodes by state, which GPU runs which
//! job) are computed from the engine's live state at each scrape ([`scrape_state`]), so that
//! they can never drift from what the scheduler holds.
//!
//! `cadre_gpu_job_info{node,gpu,job,user}` maps every allocated GPU to its job: the mapping
//! that DCGM's HPC job mapping gives Slurm sites, from which per-job GPU usage is joined.
//! It says who runs what where, so it is shown only to authenticated scrapers
//! ([`Scope::WithJobs`]); anonymous ones get every other series.
//! Utilisation and memory per GPU (`cadre_gpu_utilization_ratio`, `cadre_gpu_memory_used_bytes`,
//! `cadre_gpu_memory_total_bytes`, labelled by node and GPU index) come from the agents of
//! nodes where NVML reads real GPUs, every 15 s; nodes without (emulated GPUs, no driver)
//! have no such series.
//!
//! Beside cadre's own series, the ones of Slurm's OpenMetrics endpoints whose meaning cadre
//! has, under Slurm's names ([`slurm`]), for dashboards built for Slurm.

use cadre_core::cluster::NodeState;
use cadre_core::resources::MILLI_PER_GPU;
use cadre_core::scheduler::Scheduler;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

pub mod slurm;

/// Metrics updated as events happen.
pub struct Metrics {
    registry: Registry,
    cycle: Histogram,
    wait: Histogram,
    submitted: Counter,
    cycles: slurm::CycleStats,
    leader_epoch: Gauge,
    leader_since: Gauge,
    takeover: Gauge<f64, AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        // 100 µs to ~6.5 s.
        let cycle = Histogram::new([
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            2.5, 5.0,
        ]);
        // 1 s to ~3 days.
        let wait = Histogram::new([
            1.0,
            5.0,
            15.0,
            60.0,
            300.0,
            900.0,
            3600.0,
            4.0 * 3600.0,
            12.0 * 3600.0,
            86400.0,
            3.0 * 86400.0,
        ]);
        let submitted = Counter::default();
        registry.register(
            "cadre_scheduler_cycle_seconds",
            "Duration of scheduling passes",
            cycle.clone(),
        );
        registry.register(
            "cadre_jobs_queue_wait_seconds",
            "Time from eligibility to start of started jobs",
            wait.clone(),
        );
        registry.register(
            "cadre_jobs_submitted",
            "Jobs submitted and committed",
            submitted.clone(),
        );
        let cycles = slurm::CycleStats::default();
        cycles.register(&mut registry);
        let leader_epoch = Gauge::default();
        let leader_since = Gauge::default();
        let takeover = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "cadre_replica_leader_epoch",
            "Epoch of the leader lease this replicated controller leads under (0: not replicated)",
            leader_epoch.clone(),
        );
        registry.register(
            "cadre_replica_leader_since_seconds",
            "When this replicated controller took the leader lease, in seconds since the Unix epoch (0: not replicated)",
            leader_since.clone(),
        );
        registry.register(
            "cadre_replica_takeover_seconds",
            "Time the cluster went without a leader before this replica took over: from the previous leader's last renewal (0: none before, or it resigned)",
            takeover.clone(),
        );
        Metrics {
            registry,
            cycles,
            leader_epoch,
            leader_since,
            takeover,
            cycle,
            wait,
            submitted,
        }
    }

    /// This controller leads replicated ones under `epoch`, since `since` (seconds since
    /// the Unix epoch), after `gap` without a leader.
    pub fn set_leader(&self, epoch: u64, since: u64, gap: Option<Duration>) {
        self.leader_epoch
            .set(i64::try_from(epoch).unwrap_or(i64::MAX));
        self.leader_since
            .set(i64::try_from(since).unwrap_or(i64::MAX));
        self.takeover.set(gap.map_or(0.0, |g| g.as_secs_f64()));
    }

    pub fn observe_cycle(&self, took: Duration) {
        self.cycle.observe(took.as_secs_f64());
        self.cycles.observe(took);
    }

    pub fn observe_wait(&self, waited: Duration) {
        self.wait.observe(waited.as_secs_f64());
    }

    /// Scheduling passes as [`slurm::CycleStats::summary`] gives them.
    pub fn cycle_summary(&self) -> (i64, i64, i64, i64) {
        self.cycles.summary()
    }

    /// Jobs submitted since the controller started.
    pub fn submitted_total(&self) -> u64 {
        self.submitted.get()
    }

    pub fn submitted(&self, n: u64) {
        self.submitted.inc_by(n);
    }

    /// The whole exposition: these metrics, then the state computed by `state`.
    pub fn render(&self, state: &Registry) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_registry(&mut out, &self.registry);
        let _ = prometheus_client::encoding::text::encode_registry(&mut out, state);
        let _ = prometheus_client::encoding::text::encode_eof(&mut out);
        out
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    state: String,
    partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    node: String,
    gpu: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuJobLabels {
    node: String,
    gpu: String,
    job: String,
    user: String,
}

/// Each node's latest GPU use, by node name (the agents' connections keep it).
pub type GpuUsageByNode = std::collections::BTreeMap<String, Vec<cadre_proto::agent::GpuUsage>>;

/// Who scrapes, and so which series they get.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// No valid credentials: everything but which user and job hold each GPU.
    Anonymous,
    /// A token, or the Unix socket's peer credentials: everything.
    WithJobs,
}

/// The state gauges, computed from the engine's live state: its scheduler, and whether the
/// cluster's GPUs are declared rather than discovered.
pub fn scrape_state(
    sched: &Scheduler,
    emulated_gpus: bool,
    gpu_usage: &GpuUsageByNode,
    scope: Scope,
) -> Registry {
    let cluster = sched.cluster();
    let mut registry = Registry::default();
    let jobs = Family::<JobLabels, Gauge>::default();
    for job in sched.jobs() {
        let partition = cluster.partition(job.partition).name.clone();
        jobs.get_or_create(&JobLabels {
            state: job.state.to_string(),
            partition,
        })
        .inc();
    }
    let total = Family::<PartitionLabels, Gauge>::default();
    let emulated = Family::<PartitionLabels, Gauge>::default();
    let allocated = Family::<PartitionLabels, Gauge<f64, AtomicU64>>::default();
    for part in &cluster.partitions {
        let labels = PartitionLabels {
            partition: part.name.clone(),
        };
        let gpus: u64 = part
            .nodes
            .iter()
            .map(|&n| cluster.shape(n).capacity().gpu_milli / u64::from(MILLI_PER_GPU))
            .sum();
        let used: u64 = part
            .nodes
            .iter()
            .map(|&n| cluster.node(n).usage.amounts().gpu_milli)
            .sum();
        total.get_or_create(&labels).set(gpus as i64);
        emulated
            .get_or_create(&labels)
            .set(if emulated_gpus { gpus as i64 } else { 0 });
        allocated
            .get_or_create(&labels)
            .set(used as f64 / MILLI_PER_GPU as f64);
    }
    let nodes = Family::<NodeLabels, Gauge>::default();
    for n in 0..cluster.nodes.len() {
        let state: NodeState = cluster.node_state(cadre_core::cluster::NodeId(n as u32));
        nodes
            .get_or_create(&NodeLabels {
                state: state.to_string(),
            })
            .inc();
    }
    let gpu_jobs = Family::<GpuJobLabels, Gauge>::default();
    for job in sched.jobs().filter(|_| scope == Scope::WithJobs) {
        let Some(alloc) = &job.allocation else {
            continue;
        };
        for task in &alloc.tasks {
            let shape = cluster.shape(task.node);
            for &g in &task.gpus {
                let gpu = shape
                    .gpus
                    .get(g as usize)
                    .map_or_else(|| g.to_string(), |d| d.index.to_string());
                gpu_jobs
                    .get_or_create(&GpuJobLabels {
                        node: cluster.node(task.node).name.clone(),
                        gpu,
                        job: job.id.to_string(),
                        user: job.spec.user.clone(),
                    })
                    .set(1);
            }
        }
    }
    registry.register(
        "cadre_jobs",
        "Jobs in the scheduler by state and partition",
        jobs,
    );
    registry.register("cadre_gpus", "GPUs per partition", total);
    registry.register(
        "cadre_gpus_emulated",
        "GPUs per partition that are declared, not discovered",
        emulated,
    );
    registry.register(
        "cadre_gpus_allocated",
        "GPUs allocated per partition (fractions for shared GPUs)",
        allocated,
    );
    registry.register("cadre_nodes", "Nodes by state", nodes);
    if scope == Scope::WithJobs {
        registry.register(
            "cadre_gpu_job_info",
            "Which job holds which GPU (1 per allocated GPU)",
            gpu_jobs,
        );
    }
    let utilization = Family::<GpuLabels, Gauge<f64, AtomicU64>>::default();
    let memory_used = Family::<GpuLabels, Gauge>::default();
    let memory_total = Family::<GpuLabels, Gauge>::default();
    for (node, gpus) in gpu_usage {
        for g in gpus {
            let labels = GpuLabels {
                node: node.clone(),
                gpu: g.index.to_string(),
            };
            utilization
                .get_or_create(&labels)
                .set(f64::from(g.utilization_percent) / 100.0);
            let bytes = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
            memory_used
                .get_or_create(&labels)
                .set(bytes(g.memory_used_bytes));
            memory_total
                .get_or_create(&labels)
                .set(bytes(g.memory_total_bytes));
        }
    }
    registry.register(
        "cadre_gpu_utilization_ratio",
        "Share of the last sample period in which a kernel ran on the GPU (NVML)",
        utilization,
    );
    registry.register(
        "cadre_gpu_memory_used_bytes",
        "GPU memory in use (NVML)",
        memory_used,
    );
    registry.register(
        "cadre_gpu_memory_total_bytes",
        "GPU memory in all (NVML)",
        memory_total,
    );
    slurm::register_state(sched, &mut registry);
    registry
}
