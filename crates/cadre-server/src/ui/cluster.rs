//! `GET /ui/cluster`: every node with every GPU as a cell, and the jobs holding them: what
//! the dashboard's cluster page draws.
//!
//! Which job and user hold each GPU is shown to any authenticated caller, as
//! `cadre_gpu_job_info` is at `/metrics`: it says who runs where, not what.

use crate::api_error::ApiError;
use crate::auth::Principal;
use crate::controller::Controller;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use cadre_core::cluster::NodeId;
use serde::Serialize;
use std::collections::BTreeMap;

/// The cluster page's data.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ClusterView {
    pub name: String,
    pub partitions: Vec<String>,
    pub nodes: Vec<NodeCells>,
    /// The jobs holding a GPU, by id.
    pub jobs: BTreeMap<u64, GpuJob>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NodeCells {
    pub name: String,
    /// `idle`, `mixed`, `allocated`, `draining`, `drained`, `down`, `unknown`.
    pub state: String,
    /// Why it is drained or down.
    pub reason: Option<String>,
    pub connected: bool,
    pub partitions: Vec<String>,
    /// The leaf switch and the NVLink block it is under, if the cluster has them.
    pub leaf: Option<String>,
    pub block: Option<String>,
    pub gpu_model: Option<String>,
    pub emulated: bool,
    pub cpus: u64,
    pub cpus_alloc: u64,
    pub gpus: Vec<GpuCell>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct GpuCell {
    /// The device index (`CUDA_VISIBLE_DEVICES`' number on the node).
    pub index: u32,
    /// The jobs on it and the milli-GPUs each holds (one whole job, or shares).
    pub holders: Vec<(u64, u32)>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct GpuJob {
    pub user: String,
    pub name: String,
    pub state: String,
}

/// The view from the controller's live state.
pub fn view(c: &Controller) -> ClusterView {
    let sched = c.sched();
    let cluster = sched.cluster();
    let mut nodes: Vec<NodeCells> = (0..cluster.nodes.len())
        .map(|i| {
            let id = NodeId(i as u32);
            let node = cluster.node(id);
            let shape = cluster.shape(id);
            NodeCells {
                name: node.name.clone(),
                state: cluster.node_state(id).to_string(),
                reason: node.reason.clone(),
                connected: c.is_connected(id),
                partitions: node
                    .partitions
                    .iter()
                    .map(|&p| cluster.partition(p).name.clone())
                    .collect(),
                leaf: node
                    .leaf
                    .map(|s| cluster.switches[s.0 as usize].name.clone()),
                block: node
                    .block
                    .map(|b| cluster.blocks[b.0 as usize].name.clone()),
                gpu_model: shape.gpus.first().map(|g| g.model.clone()),
                emulated: c.node_emulated(id) && !shape.gpus.is_empty(),
                cpus: shape.capacity().cpus,
                cpus_alloc: node.usage.amounts().cpus,
                gpus: shape
                    .gpus
                    .iter()
                    .map(|g| GpuCell {
                        index: g.index,
                        holders: Vec::new(),
                    })
                    .collect(),
            }
        })
        .collect();
    let mut jobs = BTreeMap::new();
    for job in sched.jobs() {
        let Some(alloc) = &job.allocation else {
            continue;
        };
        for task in alloc.tasks.iter().filter(|t| t.gpu_milli_each > 0) {
            let Some(node) = nodes.get_mut(task.node.0 as usize) else {
                continue;
            };
            for &g in &task.gpus {
                if let Some(cell) = node.gpus.get_mut(g as usize) {
                    match cell.holders.iter_mut().find(|(j, _)| *j == job.id.0) {
                        Some((_, milli)) => *milli += task.gpu_milli_each,
                        None => cell.holders.push((job.id.0, task.gpu_milli_each)),
                    }
                }
            }
            jobs.entry(job.id.0).or_insert_with(|| GpuJob {
                user: job.spec.user.clone(),
                name: job.spec.name.clone(),
                state: job.state.to_string(),
            });
        }
    }
    ClusterView {
        name: cluster.name.clone(),
        partitions: cluster.partitions.iter().map(|p| p.name.clone()).collect(),
        nodes,
        jobs,
    }
}

/// `GET /ui/cluster`.
pub async fn cluster(
    State(st): State<AppState>,
    _who: Principal,
) -> Result<Json<ClusterView>, ApiError> {
    Ok(Json(st.engine.read(view).await?))
}
