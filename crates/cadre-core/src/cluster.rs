//! The cluster: node shapes, nodes, partitions, the switch tree and NVLink blocks, and what
//! is in use on every node right now.
//!
//! Given: a [`Cluster`] built from a cluster description ([`crate::config`]) or from flags
//! ([`Cluster::flat`]). Node shapes are shared by node groups; every node has a state set by
//! the administrator or its agent ([`NodeAvail`]) and a usage ([`NodeUsage`]) that only the
//! scheduler changes, by booking and releasing [`crate::alloc::Allocation`]s.
//!
//! Must hold: a core, GPU (beyond its 1000 milli) or NIC is never booked twice; usage never
//! exceeds a node's capacity; nothing is booked on a node that is not up (checked by
//! [`Cluster::check_invariants`]).

use crate::alloc::{Allocation, TaskAlloc};
use crate::job::JobId;
use crate::resources::{Amounts, MILLI_PER_GPU};
use fixedbitset::FixedBitSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

pub use crate::ids::{BlockId, NodeId, PartitionId, ShapeId, SwitchId};

/// One GPU device of a node shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuDevice {
    /// The device index (`nvidia-smi` order, what `CUDA_VISIBLE_DEVICES` names).
    pub index: u32,
    /// The model or device kind (`h100`, `a100`, `mig-1g.10gb`), lowercase.
    pub model: String,
    pub mem_mib: u64,
    /// The NUMA domain the device hangs off.
    pub numa: u16,
}

/// One RDMA NIC of a node shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicDevice {
    /// Device name (`mlx5_0`).
    pub name: String,
    pub numa: u16,
}

/// One NUMA domain: the cores, GPUs and NICs local to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaDomain {
    /// Core ids (indices into the node's cores).
    pub cores: Vec<u32>,
    /// Positions in [`NodeShape::gpus`].
    pub gpus: Vec<u32>,
    /// Positions in [`NodeShape::nics`].
    pub nics: Vec<u32>,
    pub mem_mib: u64,
}

/// The hardware of a node group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeShape {
    pub name: String,
    /// Number of cores; core ids are `0..cores`.
    pub cores: u32,
    pub mem_mib: u64,
    pub numa: Vec<NumaDomain>,
    pub gpus: Vec<GpuDevice>,
    pub nics: Vec<NicDevice>,
    /// Named countable resources and their capacity.
    pub named: Vec<(String, u64)>,
}

impl NodeShape {
    /// A shape of `numa_domains` equal domains holding `cores`, `gpus` and `nics` split evenly.
    pub fn uniform(
        name: &str,
        cores: u32,
        mem_mib: u64,
        gpus: u32,
        gpu_model: &str,
        nics: u32,
        numa_domains: u16,
    ) -> NodeShape {
        let n = u32::from(numa_domains.max(1));
        let split = |total: u32, d: u32| -> std::ops::Range<u32> {
            let per = total / n;
            let extra = total % n;
            let start = d * per + d.min(extra);
            start..start + per + u32::from(d < extra)
        };
        let numa = (0..n)
            .map(|d| NumaDomain {
                cores: split(cores, d).collect(),
                gpus: split(gpus, d).collect(),
                nics: split(nics, d).collect(),
                mem_mib: mem_mib / u64::from(n),
            })
            .collect::<Vec<_>>();
        let numa_of = |kind: fn(&NumaDomain) -> &Vec<u32>, i: u32| -> u16 {
            numa.iter().position(|d| kind(d).contains(&i)).unwrap_or(0) as u16
        };
        NodeShape {
            name: name.to_string(),
            cores,
            mem_mib,
            gpus: (0..gpus)
                .map(|i| GpuDevice {
                    index: i,
                    model: gpu_model.to_string(),
                    mem_mib: 81_920,
                    numa: numa_of(|d| &d.gpus, i),
                })
                .collect(),
            nics: (0..nics)
                .map(|i| NicDevice {
                    name: format!("mlx5_{i}"),
                    numa: numa_of(|d| &d.nics, i),
                })
                .collect(),
            numa,
            named: Vec::new(),
        }
    }

    /// Everything the node has, as amounts.
    pub fn capacity(&self) -> Amounts {
        Amounts {
            cpus: u64::from(self.cores),
            mem_mib: self.mem_mib,
            gpu_milli: self.gpus.len() as u64 * u64::from(MILLI_PER_GPU),
            nics: self.nics.len() as u64,
        }
    }
}

/// What the administrator or the node's agent says about a node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum NodeAvail {
    /// Usable.
    Up,
    /// Takes no new work; running work finishes.
    Drain,
    /// Not usable; work on it has failed.
    Down,
    /// Not heard from yet.
    Unknown,
}

/// The state a node shows (Slurm's base states), derived from [`NodeAvail`] and usage.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    Idle,
    Mixed,
    Allocated,
    Draining,
    Drained,
    Down,
    Unknown,
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NodeState::Idle => "idle",
            NodeState::Mixed => "mixed",
            NodeState::Allocated => "allocated",
            NodeState::Draining => "draining",
            NodeState::Drained => "drained",
            NodeState::Down => "down",
            NodeState::Unknown => "unknown",
        })
    }
}

/// What is in use on a node now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeUsage {
    /// Cores in use.
    pub cores: FixedBitSet,
    /// Milli-GPUs in use, per position in [`NodeShape::gpus`].
    pub gpu_milli: Vec<u32>,
    /// NICs in use, per position in [`NodeShape::nics`].
    pub nics: FixedBitSet,
    pub mem_mib: u64,
    /// Named resources in use, in the order of [`NodeShape::named`].
    pub named: Vec<u64>,
    /// The jobs with tasks here, and how many tasks each.
    pub jobs: BTreeMap<JobId, u32>,
    /// Set while an exclusive job holds the whole node.
    pub exclusive: Option<JobId>,
}

impl NodeUsage {
    fn empty(shape: &NodeShape) -> NodeUsage {
        NodeUsage {
            cores: FixedBitSet::with_capacity(shape.cores as usize),
            gpu_milli: vec![0; shape.gpus.len()],
            nics: FixedBitSet::with_capacity(shape.nics.len()),
            mem_mib: 0,
            named: vec![0; shape.named.len()],
            jobs: BTreeMap::new(),
            exclusive: None,
        }
    }

    /// Aggregate amounts in use.
    pub fn amounts(&self) -> Amounts {
        Amounts {
            cpus: self.cores.count_ones(..) as u64,
            mem_mib: self.mem_mib,
            gpu_milli: self.gpu_milli.iter().map(|&m| u64::from(m)).sum(),
            nics: self.nics.count_ones(..) as u64,
        }
    }
}

/// A node of the cluster.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub shape: ShapeId,
    /// Features (Slurm `Features=`, matched by `--constraint`).
    pub features: Vec<String>,
    /// Labels (Kubernetes node labels, matched by node selectors).
    pub labels: BTreeMap<String, String>,
    /// The leaf switch the node hangs off, if the cluster has a switch tree.
    pub leaf: Option<SwitchId>,
    /// The NVLink block the node belongs to, if the cluster has blocks.
    pub block: Option<BlockId>,
    /// Partitions that contain the node.
    pub partitions: Vec<PartitionId>,
    pub avail: NodeAvail,
    /// Why the node is drained or down, as the administrator or agent said.
    pub reason: Option<String>,
    pub usage: NodeUsage,
}

/// A switch of the switch tree (Slurm's topology.conf): leaves hold nodes, upper switches
/// hold switches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switch {
    pub name: String,
    pub parent: Option<SwitchId>,
    /// Distance from the leaves: 0 for a leaf switch.
    pub level: u16,
    pub children: Vec<SwitchId>,
    pub nodes: Vec<NodeId>,
}

/// An NVLink/IMEX block (Slurm's topology/block).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub name: String,
    pub nodes: Vec<NodeId>,
}

/// A partition: a named set of nodes with its own limits and priority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    pub nodes: Vec<NodeId>,
    /// Jobs that name no partition go to the default one.
    pub default: bool,
    /// Higher tiers are scheduled first and may preempt lower tiers (Slurm `PriorityTier`).
    pub priority_tier: u32,
    /// The partition factor of multifactor priority (Slurm `PriorityJobFactor`).
    pub priority_job_factor: u32,
    /// Longest time limit a job may ask for here.
    pub max_time: Option<crate::time::Dur>,
    /// Time limit of jobs that give none.
    pub default_time: Option<crate::time::Dur>,
    /// Whether the partition accepts new jobs for scheduling.
    pub up: bool,
}

impl Partition {
    /// The default partition over nodes `0..nodes`, with Slurm's default settings (tier 1,
    /// factor 1, no time limits, up).
    pub fn default_over(name: &str, nodes: u32) -> Partition {
        Partition {
            name: name.to_string(),
            nodes: (0..nodes).map(NodeId).collect(),
            default: true,
            priority_tier: 1,
            priority_job_factor: 1,
            max_time: None,
            default_time: None,
            up: true,
        }
    }
}

/// Errors of booking and releasing allocations: each one is a bug in the caller, reported
/// with what was wrong rather than silently corrupting usage.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BookingError {
    #[error("node {node} is not up ({avail:?}); cannot book job {job}")]
    NodeNotUp {
        node: String,
        avail: NodeAvail,
        job: JobId,
    },
    #[error("core {core} of node {node} is already in use; cannot book job {job}")]
    CoreBusy { node: String, core: u32, job: JobId },
    #[error("gpu {gpu} of node {node} has not {want} milli-GPUs free; cannot book job {job}")]
    GpuBusy {
        node: String,
        gpu: u32,
        want: u32,
        job: JobId,
    },
    #[error("nic {nic} of node {node} is already in use; cannot book job {job}")]
    NicBusy { node: String, nic: u32, job: JobId },
    #[error("node {node} has not {want} MiB of memory free; cannot book job {job}")]
    MemoryFull { node: String, want: u64, job: JobId },
    #[error("node {node} has not {want} of `{resource}` free; cannot book job {job}")]
    NamedFull {
        node: String,
        resource: String,
        want: u64,
        job: JobId,
    },
    #[error("node {node} is held exclusively by job {holder}; cannot book job {job}")]
    Exclusive {
        node: String,
        holder: JobId,
        job: JobId,
    },
    #[error("device index {index} is not on node {node}; cannot book job {job}")]
    NoSuchDevice {
        node: String,
        index: u32,
        job: JobId,
    },
}

/// A broken invariant of the cluster's usage, found by [`Cluster::check_invariants`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("cluster invariant broken on node {node}: {what}")]
pub struct UsageViolation {
    pub node: String,
    pub what: String,
}

/// The whole cluster: static description plus live usage.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub name: String,
    pub shapes: Vec<NodeShape>,
    pub nodes: Vec<Node>,
    pub partitions: Vec<Partition>,
    pub switches: Vec<Switch>,
    pub blocks: Vec<Block>,
    /// Allowed block aggregate sizes in nodes (Slurm `BlockSizes`); empty: any size.
    pub block_sizes: Vec<u32>,
    node_by_name: BTreeMap<String, NodeId>,
}

impl Cluster {
    /// Builds a cluster from its parts, filling in the indexes and each node's partitions.
    /// Nodes start `Up` with nothing in use. The parts must already be consistent (the config
    /// loader checks that and reports errors with their location). Each partition's nodes
    /// are kept in ascending order, each once: placement takes them so without sorting
    /// them again at every call.
    pub fn from_parts(
        name: String,
        shapes: Vec<NodeShape>,
        mut nodes: Vec<Node>,
        mut partitions: Vec<Partition>,
        switches: Vec<Switch>,
        blocks: Vec<Block>,
        block_sizes: Vec<u32>,
    ) -> Cluster {
        for node in &mut nodes {
            node.partitions.clear();
        }
        for part in &mut partitions {
            part.nodes.sort_unstable();
            part.nodes.dedup();
        }
        for (p, part) in partitions.iter().enumerate() {
            for &n in &part.nodes {
                nodes[n.0 as usize].partitions.push(PartitionId(p as u16));
            }
        }
        let node_by_name = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), NodeId(i as u32)))
            .collect();
        Cluster {
            name,
            shapes,
            nodes,
            partitions,
            switches,
            blocks,
            block_sizes,
            node_by_name,
        }
    }

    /// A flat cluster: `nodes` nodes `node[001-N]` of one shape in one default partition
    /// `gpu`, with no switch tree. What `--nodes N --gpus-per-node G` means.
    pub fn flat(nodes: u32, shape: NodeShape) -> Cluster {
        let width = nodes.max(1).to_string().len().max(3);
        let list = (0..nodes)
            .map(|i| Node::new(format!("node{:0width$}", i + 1), ShapeId(0), &shape))
            .collect::<Vec<_>>();
        let partition = Partition::default_over("gpu", nodes);
        Cluster::from_parts(
            "cadre".into(),
            vec![shape],
            list,
            vec![partition],
            vec![],
            vec![],
            vec![],
        )
    }

    /// A flat cluster of `nodes` nodes with `gpus_per_node` GPUs each and a typical GPU
    /// server around them: 2 NUMA domains, 16 cores and 128 GiB per GPU, one NIC per 2 GPUs.
    pub fn flat_gpu(nodes: u32, gpus_per_node: u32) -> Cluster {
        let g = gpus_per_node;
        let cores = if g == 0 { 32 } else { 16 * g };
        let mem = u64::from(if g == 0 { 2 } else { g }) * 128 * 1024;
        let shape = NodeShape::uniform("gpu", cores, mem, g, "h100", g.div_ceil(2), 2);
        Cluster::flat(nodes, shape)
    }

    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.node_by_name.get(name).copied()
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0 as usize]
    }

    pub fn shape(&self, id: NodeId) -> &NodeShape {
        &self.shapes[self.node(id).shape.0 as usize]
    }

    pub fn partition_id(&self, name: &str) -> Option<PartitionId> {
        self.partitions
            .iter()
            .position(|p| p.name == name)
            .map(|i| PartitionId(i as u16))
    }

    /// The ids of the partitions, in order.
    pub fn partition_ids(&self) -> impl Iterator<Item = PartitionId> + '_ {
        (0..self.partitions.len())
            .map(|i| PartitionId(u16::try_from(i).expect("at most 2^16 partitions")))
    }

    pub fn partition(&self, id: PartitionId) -> &Partition {
        &self.partitions[id.0 as usize]
    }

    pub fn default_partition(&self) -> Option<PartitionId> {
        self.partitions
            .iter()
            .position(|p| p.default)
            .or(if self.partitions.len() == 1 {
                Some(0)
            } else {
                None
            })
            .map(|i| PartitionId(i as u16))
    }

    /// Total GPUs of the cluster.
    pub fn total_gpus(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| self.shapes[n.shape.0 as usize].gpus.len() as u64)
            .sum()
    }

    /// Total capacity of the nodes given.
    pub fn capacity_of(&self, nodes: &[NodeId]) -> Amounts {
        nodes
            .iter()
            .fold(Amounts::ZERO, |acc, &n| acc + self.shape(n).capacity())
    }

    /// The state a node shows.
    pub fn node_state(&self, id: NodeId) -> NodeState {
        let node = self.node(id);
        let busy = !node.usage.jobs.is_empty();
        match node.avail {
            NodeAvail::Down => NodeState::Down,
            NodeAvail::Unknown => NodeState::Unknown,
            NodeAvail::Drain if busy => NodeState::Draining,
            NodeAvail::Drain => NodeState::Drained,
            NodeAvail::Up if !busy => NodeState::Idle,
            NodeAvail::Up => {
                let shape = self.shape(id);
                let full = node.usage.exclusive.is_some()
                    || node.usage.cores.count_ones(..) == shape.cores as usize
                    || (!shape.gpus.is_empty()
                        && node.usage.gpu_milli.iter().all(|&m| m >= MILLI_PER_GPU));
                if full {
                    NodeState::Allocated
                } else {
                    NodeState::Mixed
                }
            }
        }
    }

    /// Amounts free on a node now (zero on a node that is not up or is held exclusively).
    pub fn free_amounts(&self, id: NodeId) -> Amounts {
        let node = self.node(id);
        if node.avail != NodeAvail::Up || node.usage.exclusive.is_some() {
            return Amounts::ZERO;
        }
        self.shape(id)
            .capacity()
            .saturating_sub(&node.usage.amounts())
    }

    /// Books an allocation: every task's devices become in use. All or nothing: on error
    /// nothing is booked.
    pub fn book(&mut self, job: JobId, alloc: &Allocation) -> Result<(), BookingError> {
        for (i, task) in alloc.tasks.iter().enumerate() {
            if let Err(e) = self.book_task(job, task, alloc.exclusive, true) {
                for done in alloc.tasks[..i].iter().rev() {
                    self.release_task(job, done, alloc.exclusive);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Books an allocation that already exists (a running job put back after a what-if, or
    /// found running after a restart), on nodes in any state. Device conflicts are still
    /// errors, and all or nothing.
    pub fn restore(&mut self, job: JobId, alloc: &Allocation) -> Result<(), BookingError> {
        for (i, task) in alloc.tasks.iter().enumerate() {
            if let Err(e) = self.book_task(job, task, alloc.exclusive, false) {
                for done in alloc.tasks[..i].iter().rev() {
                    self.release_task(job, done, alloc.exclusive);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Releases what [`Cluster::book`] booked.
    pub fn release(&mut self, job: JobId, alloc: &Allocation) {
        for task in &alloc.tasks {
            self.release_task(job, task, alloc.exclusive);
        }
    }

    fn book_task(
        &mut self,
        job: JobId,
        t: &TaskAlloc,
        exclusive: bool,
        require_up: bool,
    ) -> Result<(), BookingError> {
        let shape = &self.shapes[self.nodes[t.node.0 as usize].shape.0 as usize];
        let node = &mut self.nodes[t.node.0 as usize];
        let name = || node.name.clone();
        if require_up && node.avail != NodeAvail::Up {
            return Err(BookingError::NodeNotUp {
                node: node.name.clone(),
                avail: node.avail,
                job,
            });
        }
        if let Some(holder) = node.usage.exclusive.filter(|&h| h != job) {
            return Err(BookingError::Exclusive {
                node: node.name.clone(),
                holder,
                job,
            });
        }
        if exclusive && node.usage.jobs.keys().any(|&j| j != job) {
            let holder = *node.usage.jobs.keys().find(|&&j| j != job).unwrap_or(&job);
            return Err(BookingError::Exclusive {
                node: node.name.clone(),
                holder,
                job,
            });
        }
        for &c in &t.cores {
            if c >= shape.cores {
                return Err(BookingError::NoSuchDevice {
                    node: name(),
                    index: c,
                    job,
                });
            }
            if node.usage.cores.contains(c as usize) {
                return Err(BookingError::CoreBusy {
                    node: name(),
                    core: c,
                    job,
                });
            }
        }
        for &g in &t.gpus {
            let Some(used) = node.usage.gpu_milli.get(g as usize) else {
                return Err(BookingError::NoSuchDevice {
                    node: name(),
                    index: g,
                    job,
                });
            };
            if used + t.gpu_milli_each > MILLI_PER_GPU {
                return Err(BookingError::GpuBusy {
                    node: name(),
                    gpu: g,
                    want: t.gpu_milli_each,
                    job,
                });
            }
        }
        for &n in &t.nics {
            if n as usize >= shape.nics.len() {
                return Err(BookingError::NoSuchDevice {
                    node: name(),
                    index: n,
                    job,
                });
            }
            if node.usage.nics.contains(n as usize) {
                return Err(BookingError::NicBusy {
                    node: name(),
                    nic: n,
                    job,
                });
            }
        }
        if node.usage.mem_mib + t.mem_mib > shape.mem_mib {
            return Err(BookingError::MemoryFull {
                node: name(),
                want: t.mem_mib,
                job,
            });
        }
        let mut named_idx = Vec::with_capacity(t.named.len());
        for (res, want) in &t.named {
            let pos = shape.named.iter().position(|(n, _)| n == res);
            match pos {
                Some(p) if node.usage.named[p] + want <= shape.named[p].1 => named_idx.push(p),
                _ => {
                    return Err(BookingError::NamedFull {
                        node: name(),
                        resource: res.clone(),
                        want: *want,
                        job,
                    });
                }
            }
        }
        // Checked everything: now book.
        for &c in &t.cores {
            node.usage.cores.insert(c as usize);
        }
        for &g in &t.gpus {
            node.usage.gpu_milli[g as usize] += t.gpu_milli_each;
        }
        for &n in &t.nics {
            node.usage.nics.insert(n as usize);
        }
        node.usage.mem_mib += t.mem_mib;
        for (p, (_, want)) in named_idx.into_iter().zip(&t.named) {
            node.usage.named[p] += want;
        }
        *node.usage.jobs.entry(job).or_insert(0) += 1;
        if exclusive {
            node.usage.exclusive = Some(job);
        }
        Ok(())
    }

    fn release_task(&mut self, job: JobId, t: &TaskAlloc, exclusive: bool) {
        let shape = &self.shapes[self.nodes[t.node.0 as usize].shape.0 as usize];
        let node = &mut self.nodes[t.node.0 as usize];
        for &c in &t.cores {
            debug_assert!(node.usage.cores.contains(c as usize));
            node.usage.cores.set(c as usize, false);
        }
        for &g in &t.gpus {
            let used = &mut node.usage.gpu_milli[g as usize];
            debug_assert!(*used >= t.gpu_milli_each);
            *used = used.saturating_sub(t.gpu_milli_each);
        }
        for &n in &t.nics {
            node.usage.nics.set(n as usize, false);
        }
        node.usage.mem_mib = node.usage.mem_mib.saturating_sub(t.mem_mib);
        for (res, n) in &t.named {
            if let Some(p) = shape.named.iter().position(|(name, _)| name == res) {
                node.usage.named[p] = node.usage.named[p].saturating_sub(*n);
            }
        }
        if let Some(count) = node.usage.jobs.get_mut(&job) {
            *count -= 1;
            if *count == 0 {
                node.usage.jobs.remove(&job);
            }
        }
        if exclusive && node.usage.exclusive == Some(job) && !node.usage.jobs.contains_key(&job) {
            node.usage.exclusive = None;
        }
    }

    /// Checks that every node's usage is within its capacity. Whether usage matches the
    /// allocations of running jobs is checked by the scheduler, which knows them.
    pub fn check_invariants(&self) -> Result<(), UsageViolation> {
        for node in &self.nodes {
            let shape = &self.shapes[node.shape.0 as usize];
            let bad = |what: String| {
                Err(UsageViolation {
                    node: node.name.clone(),
                    what,
                })
            };
            if node.usage.cores.len() != shape.cores as usize {
                return bad(format!(
                    "core set sized {} for {} cores",
                    node.usage.cores.len(),
                    shape.cores
                ));
            }
            if let Some(g) = node.usage.gpu_milli.iter().position(|&m| m > MILLI_PER_GPU) {
                return bad(format!("gpu {g} booked {} milli", node.usage.gpu_milli[g]));
            }
            if node.usage.mem_mib > shape.mem_mib {
                return bad(format!(
                    "{} MiB booked of {}",
                    node.usage.mem_mib, shape.mem_mib
                ));
            }
            for (p, (res, cap)) in shape.named.iter().enumerate() {
                if node.usage.named[p] > *cap {
                    return bad(format!(
                        "{} of `{res}` booked of {cap}",
                        node.usage.named[p]
                    ));
                }
            }
            if node.usage.jobs.is_empty() && !node.usage.amounts().is_zero() {
                return bad("resources in use with no job on the node".into());
            }
            if let Some(holder) = node.usage.exclusive {
                if node.usage.jobs.keys().any(|&j| j != holder) {
                    return bad(format!("exclusive for {holder} but shared"));
                }
            }
        }
        Ok(())
    }
}

impl Node {
    /// A new node of a shape: up, nothing in use, no features or topology yet.
    pub fn new(name: String, shape_id: ShapeId, shape: &NodeShape) -> Node {
        Node {
            name,
            shape: shape_id,
            features: Vec::new(),
            labels: BTreeMap::new(),
            leaf: None,
            block: None,
            partitions: Vec::new(),
            avail: NodeAvail::Up,
            reason: None,
            usage: NodeUsage::empty(shape),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{Allocation, TaskAlloc};

    fn task(node: u32, cores: &[u32], gpus: &[u32]) -> TaskAlloc {
        TaskAlloc {
            group: 0,
            rank: 0,
            node: NodeId(node),
            cores: cores.to_vec(),
            gpus: gpus.to_vec(),
            gpu_milli_each: MILLI_PER_GPU,
            nics: vec![],
            mem_mib: 1024,
            named: vec![],
        }
    }

    #[test]
    fn flat_cluster_has_named_nodes_and_split_numa() {
        let c = Cluster::flat_gpu(12, 8);
        assert_eq!(c.nodes.len(), 12);
        assert_eq!(c.nodes[0].name, "node001");
        assert_eq!(c.nodes[11].name, "node012");
        assert_eq!(c.total_gpus(), 96);
        let shape = c.shape(NodeId(0));
        assert_eq!(shape.numa.len(), 2);
        assert_eq!(shape.numa[1].gpus, vec![4, 5, 6, 7]);
        assert_eq!(shape.gpus[5].numa, 1);
        assert_eq!(shape.nics.len(), 4);
        assert_eq!(c.default_partition(), Some(PartitionId(0)));
    }

    #[test]
    fn booking_twice_the_same_gpu_fails_and_books_nothing() {
        let mut c = Cluster::flat_gpu(2, 8);
        let a = Allocation {
            tasks: vec![task(0, &[0, 1], &[0])],
            exclusive: false,
        };
        c.book(JobId(1), &a).unwrap();
        let b = Allocation {
            tasks: vec![task(1, &[0], &[0]), task(0, &[5], &[0])],
            exclusive: false,
        };
        let err = c.book(JobId(2), &b).unwrap_err();
        assert!(matches!(err, BookingError::GpuBusy { gpu: 0, .. }), "{err}");
        assert!(
            c.nodes[1].usage.jobs.is_empty(),
            "first task must be rolled back"
        );
        assert_eq!(c.node_state(NodeId(0)), NodeState::Mixed);
        assert_eq!(c.node_state(NodeId(1)), NodeState::Idle);
        c.release(JobId(1), &a);
        assert_eq!(c.node_state(NodeId(0)), NodeState::Idle);
        c.check_invariants().unwrap();
    }

    #[test]
    fn drained_node_takes_no_booking_and_shows_draining_while_busy() {
        let mut c = Cluster::flat_gpu(1, 8);
        let a = Allocation {
            tasks: vec![task(0, &[0], &[0])],
            exclusive: false,
        };
        c.book(JobId(1), &a).unwrap();
        c.nodes[0].avail = NodeAvail::Drain;
        assert_eq!(c.node_state(NodeId(0)), NodeState::Draining);
        let b = Allocation {
            tasks: vec![task(0, &[1], &[1])],
            exclusive: false,
        };
        assert!(matches!(
            c.book(JobId(2), &b),
            Err(BookingError::NodeNotUp { .. })
        ));
        c.release(JobId(1), &a);
        assert_eq!(c.node_state(NodeId(0)), NodeState::Drained);
    }

    #[test]
    fn exclusive_job_keeps_others_off_the_node() {
        let mut c = Cluster::flat_gpu(1, 8);
        let a = Allocation {
            tasks: vec![task(0, &[0], &[0])],
            exclusive: true,
        };
        c.book(JobId(1), &a).unwrap();
        assert_eq!(c.node_state(NodeId(0)), NodeState::Allocated);
        assert_eq!(c.free_amounts(NodeId(0)), Amounts::ZERO);
        let b = Allocation {
            tasks: vec![task(0, &[1], &[1])],
            exclusive: false,
        };
        assert!(matches!(
            c.book(JobId(2), &b),
            Err(BookingError::Exclusive { .. })
        ));
        c.release(JobId(1), &a);
        assert_eq!(c.nodes[0].usage.exclusive, None);
    }
}
