//! Allocations: the full answer to "where does each task run".
//!
//! A decision to start a job carries one [`Allocation`]: for every task of every task group,
//! its node, cores, GPU device positions (with the share of each GPU it gets), NICs, memory
//! and named resources. The controller hands it to the agents unchanged; the store records it.

use crate::ids::NodeId;
use crate::resources::{Amounts, MILLI_PER_GPU};
use serde::{Deserialize, Serialize};

/// Where one task runs and what it holds there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskAlloc {
    /// Position of the task group in the job spec.
    pub group: u16,
    /// Rank of the task within its group.
    pub rank: u32,
    pub node: NodeId,
    /// Core ids on the node.
    pub cores: Vec<u32>,
    /// GPU positions in the node shape (what `CUDA_VISIBLE_DEVICES` is built from).
    pub gpus: Vec<u32>,
    /// Milli-GPUs the task holds on each of `gpus`: 1000 for whole GPUs, less for a share.
    pub gpu_milli_each: u32,
    /// NIC positions in the node shape.
    pub nics: Vec<u32>,
    pub mem_mib: u64,
    pub named: Vec<(String, u64)>,
}

impl TaskAlloc {
    pub fn amounts(&self) -> Amounts {
        Amounts {
            cpus: self.cores.len() as u64,
            mem_mib: self.mem_mib,
            gpu_milli: self.gpus.len() as u64 * u64::from(self.gpu_milli_each),
            nics: self.nics.len() as u64,
        }
    }
}

/// Every task of a gang, placed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Allocation {
    pub tasks: Vec<TaskAlloc>,
    /// The job holds its nodes whole (`--exclusive`).
    pub exclusive: bool,
}

impl Allocation {
    /// Indices into `tasks` in (group, rank) order: the global rank order, in which a
    /// task's position is its `SLURM_PROCID`.
    pub fn rank_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.tasks.len()).collect();
        order.sort_by_key(|&i| (self.tasks[i].group, self.tasks[i].rank));
        order
    }

    /// The task of global rank `procid` (see [`Allocation::rank_order`]).
    pub fn task_of_procid(&self, procid: u32) -> Option<&TaskAlloc> {
        let order = self.rank_order();
        order.get(procid as usize).map(|&i| &self.tasks[i])
    }

    /// The distinct nodes, in ascending order.
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> = self.tasks.iter().map(|t| t.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    pub fn amounts(&self) -> Amounts {
        self.tasks
            .iter()
            .fold(Amounts::ZERO, |acc, t| acc + t.amounts())
    }

    /// Amounts held on each node, in node order.
    pub fn amounts_by_node(&self) -> Vec<(NodeId, Amounts)> {
        // At most a node per task.
        let mut out: Vec<(NodeId, Amounts)> = Vec::with_capacity(self.tasks.len());
        let mut tasks: Vec<&TaskAlloc> = self.tasks.iter().collect();
        tasks.sort_by_key(|t| t.node);
        for t in tasks {
            match out.last_mut() {
                Some((n, a)) if *n == t.node => *a += t.amounts(),
                _ => out.push((t.node, t.amounts())),
            }
        }
        out
    }

    /// Whole GPUs held (a shared GPU counts as the share it is).
    pub fn gpus(&self) -> f64 {
        self.amounts().gpu_milli as f64 / f64::from(MILLI_PER_GPU)
    }
}
