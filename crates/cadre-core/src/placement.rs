//! Topology-aware placement: where every task of a gang runs, down to its cores, GPUs and NICs.
//!
//! # Given
//! A [`Cluster`] with its live usage, a [`JobSpec`] (one or more task groups) and the nodes
//! the job may use (its partition's nodes). [`place`] works on the devices free now;
//! [`select_nodes`] works on aggregate free [`Amounts`] per node supplied by the caller (the
//! backfill planner asks about a future time, where only amounts are known).
//!
//! # Decided
//! An [`Allocation`] for the whole gang, every group from the same free pool so that no device
//! is handed out twice, or a [`PlacementFailure`] that says whether the job could ever fit
//! ([`PlacementFailure::reason`]: `BadConstraints` never, `ReqNodeNotAvail` not with the nodes
//! that are up, `Resources` not now).
//!
//! # Rules
//! - A node is usable if it is up, not held by an exclusive job, has every feature and label
//!   the job asks for and, for a group that names a GPU model, GPUs of that model (and every
//!   named resource the group asks for). An exclusive job uses only nodes with nothing on
//!   them; its [`Allocation::exclusive`] flag then keeps every other job off those nodes
//!   (its tasks get the devices they asked for; the node is held whole by the flag).
//! - Whole GPUs are distinct idle devices. A GPU share (`gpu_share_milli`) goes to one device
//!   with enough milli-GPUs free, the one with the least free (best fit), so that idle GPUs
//!   stay idle. NICs are devices; memory and named resources are counted per node.
//! - NUMA, per task: `Strict` takes the task's GPUs, cores and NICs from one domain or does
//!   not use the node; `Preferred` and `None` behave alike: one domain when one can hold the
//!   whole task (locality costs nothing), else GPUs from the domains with most free GPUs and
//!   cores and NICs from the GPUs' domains first. Among domains that can hold a task, the
//!   fullest one is used (fewest free GPUs left, then cores), so that whole free domains stay
//!   whole; a CPU-only task thus prefers cores away from free GPUs.
//! - Per group: `tasks_per_node = k` puts exactly `k` tasks on every node used, but one node
//!   that takes the remainder when the count is not a multiple of `k`; `nodes = n` uses
//!   exactly `n` nodes with at least one task each; both together need `count = n * k`.
//!   `one_task_per_node` puts at most one task of the whole job on a node.
//! - Span: `OneLeaf` puts every node of the job under one leaf switch, `OneBlock` in one NVLink
//!   block, `MaxSwitches(n)` under at most `n` leaf switches. Nodes without a leaf (without a
//!   block) count as one leaf (one block) of their own, so on a cluster with no switch tree
//!   (no blocks) `OneLeaf` (`OneBlock`) is satisfied by any nodes. Block sizes
//!   ([`Cluster::block_sizes`]) are not enforced here.
//! - Elastic groups: the largest gang found by bisection on a common number of tasks above
//!   every group's minimum (group sizes are capped at their `count`); never below the
//!   minimum. Groups with both `nodes` and `tasks_per_node` keep their full count.
//!
//! # Preference among feasible placements
//! Groups are placed one after the other, the biggest tasks first (GPUs, GPU share, cores,
//! memory, then group order), each on what the earlier ones left. Within a group: one node
//! if one node can hold it, the best-fitting one; otherwise the roomiest nodes until the
//! remainder fits on one node, which is then the best-fitting one (`tasks_per_node`: the
//! best-fitting nodes that hold `k` tasks). A node fits better when it (1) is already in use
//! rather than idle, (2) has fewer milli-GPUs left free afterwards, (3) fewer cores left
//! free afterwards, (4) has the lower id.
//!
//! Whole placements are tried per leaf switch (per block for `OneBlock`), on all the nodes,
//! and, for a job that fits under no single leaf, on leaves added roomiest first. Among the
//! placements found, the first in this order wins:
//! 1. least fragmentation: fewest idle nodes broken into; then fewest milli-GPUs, then
//!    fewest cores left free on the nodes used (the job fills what it touches);
//! 2. most compact: fewest leaf switches, then fewest blocks;
//! 3. fewest idle nodes left under the leaves used (keep whole free leaves whole);
//! 4. lowest node ids.
//!
//! So a multi-node job that needs whole nodes takes whole nodes under as few leaves as
//! possible, in the fullest leaf that has room, and a 1-GPU job goes to a partly used node.
//!
//! # The fragmentation preference ([`place_with_profile`])
//! Given a [`WorkloadProfile`] (the task sizes the caller expects: one class per GPU demand,
//! weighted, e.g. the tasks seen so far), the per-node choice above puts one criterion first:
//! the rise in *fragmentation* of the node's free GPUs, that is the weighted sum over the
//! classes of the free milli-GPUs a task of the class could not use (all of them when a task
//! of the class does not fit there; else those on devices with less free than it needs per
//! GPU, and those beyond what the node's free cores and memory can accompany with tasks of
//! the class). A share then goes where its leftover is least useful anyway, whole GPUs stay
//! whole, and CPU-only tasks keep cores next to free GPUs. Ties fall back to the best-fit key.
//! In the spirit of FGD (Weng et al., ATC'23), in integers; the score is computed from the
//! devices of a node and the task placed, once per distinct node state in a call (idle nodes
//! of one shape are one state). Nodes with more than 16 GPUs are not scored (0). Tasks of
//! earlier groups of the same job on a node count in its cores and memory, not its devices.
//!
//! # Must hold
//! Every allocation returned books with [`Cluster::book`] (no device twice, nothing on a node
//! that is not up), gives every task exactly what it asked for, and satisfies the job's NUMA
//! and span requirements; the same input gives the same output. If [`place`] succeeds,
//! [`select_nodes`] with today's free amounts succeeds too (the aggregate view is never
//! stricter than the device view). These are property-tested.
//!
//! # Cost
//! One pass over the eligible nodes counts, per node and group, how many tasks fit (bit
//! counts, no allocation per node); trials then work on those counts and only recount nodes
//! that earlier groups of the same job touched. Devices are picked only for the winning plan.
//! A caller that keeps nodes grouped by what placement sees of them ([`place_scanning`])
//! passes only the first few nodes of each group, each standing for the ones left out: on a
//! large cluster a placement then costs the number of distinct node states, not of nodes.
//! For a job that goes on one node ([`OneNode`]) such a caller can also remember what each
//! group of nodes offers the job while the group is unchanged, and have
//! [`one_node_choice`] name the node: a placement then costs what changed since the last.

mod device;
mod frag;
mod select;

#[cfg(test)]
mod tests;

use crate::alloc::Allocation;
use crate::cluster::{Cluster, NodeAvail, NodeId, NodeUsage};
use crate::job::{JobId, JobSpec, NetworkSpan, NumaPolicy, TaskGroup};
use crate::resources::{Amounts, MILLI_PER_GPU, TaskResources};
use device::{Layout, Shortage, UsageRef, Work};
use select::{Cand, Engine, Frag, Plan, Pool, slot_key};

pub use frag::WorkloadProfile;
use std::borrow::Cow;
use std::fmt;

/// Why a job cannot be placed. [`PlacementFailure::reason`] says whether it never can
/// (`BadConstraints`), cannot with the nodes that are up (`ReqNodeNotAvail`), or cannot now
/// (`Resources`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementFailure {
    #[error("job has no task to place")]
    NoTasks,
    #[error("task group `{group}` is invalid: {what}")]
    InvalidGroup { group: String, what: String },
    #[error("no eligible node was given for the job")]
    NoEligibleNodes,
    #[error("no eligible node has {what}")]
    NoMatchingNode { what: String },
    #[error("a task of group `{group}` fits on no eligible node even when it is idle: {why}")]
    TaskTooBig { group: String, why: NodeRefusal },
    #[error(
        "the job does not fit on the {nodes} eligible nodes even when they are idle (span {span:?}, numa {numa:?})"
    )]
    NeverFits {
        nodes: usize,
        span: NetworkSpan,
        numa: NumaPolicy,
    },
    #[error("the job fits only if some of the {unavailable} eligible nodes that are not up return")]
    NodesNotAvailable { unavailable: usize },
    #[error("not enough free resources on the {nodes} eligible nodes now")]
    Busy { nodes: usize },
}

impl PlacementFailure {
    /// The Slurm pending reason: `BadConstraints` (never fits), `ReqNodeNotAvail` (fits only
    /// with nodes that are down, drained or unknown), `Resources` (fits, not now).
    pub fn reason(&self) -> &'static str {
        match self {
            PlacementFailure::Busy { .. } => "Resources",
            PlacementFailure::NodesNotAvailable { .. } => "ReqNodeNotAvail",
            _ => "BadConstraints",
        }
    }

    /// The job can never start on these nodes as they are configured.
    pub fn is_permanent(&self) -> bool {
        self.reason() == "BadConstraints"
    }
}

/// Why a job's tasks cannot use one node right now (see [`why_not`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeRefusal {
    NotUp {
        avail: NodeAvail,
        reason: Option<String>,
    },
    HeldExclusively {
        holder: JobId,
    },
    /// The job is exclusive and the node runs other jobs.
    InUse {
        jobs: usize,
    },
    LacksFeature(String),
    LacksLabel {
        key: String,
        value: String,
    },
    NoGpuModel(String),
    LacksNamed(String),
    Gpus {
        free: u32,
        total: u32,
        want: u32,
    },
    GpuShare {
        want_milli: u32,
    },
    Cores {
        free: u32,
        total: u32,
        want: u32,
    },
    Memory {
        free_mib: u64,
        want_mib: u64,
    },
    Nics {
        free: u32,
        total: u32,
        want: u32,
    },
    Named {
        name: String,
        free: u64,
        want: u64,
    },
    NoNumaDomain {
        gpus: u32,
        share_milli: Option<u32>,
        cores: u32,
        nics: u32,
    },
}

impl fmt::Display for NodeRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeRefusal::NotUp { avail, reason } => {
                let state = match avail {
                    NodeAvail::Up => "up",
                    NodeAvail::Drain => "drained",
                    NodeAvail::Down => "down",
                    NodeAvail::Unknown => "not responding",
                };
                match reason {
                    Some(r) => write!(f, "node is {state}: {r}"),
                    None => write!(f, "node is {state}"),
                }
            }
            NodeRefusal::HeldExclusively { holder } => {
                write!(f, "node is held exclusively by job {holder}")
            }
            NodeRefusal::InUse { jobs } => {
                write!(f, "job wants whole nodes and {jobs} other jobs run here")
            }
            NodeRefusal::LacksFeature(x) => write!(f, "lacks feature {x}"),
            NodeRefusal::LacksLabel { key, value } => write!(f, "lacks label {key}={value}"),
            NodeRefusal::NoGpuModel(m) => write!(f, "has no {m} GPUs"),
            NodeRefusal::LacksNamed(n) => write!(f, "has no `{n}`"),
            NodeRefusal::Gpus { free, total, want } => {
                write!(f, "{free} of {total} GPUs free, a task needs {want}")
            }
            NodeRefusal::GpuShare { want_milli } => {
                write!(f, "no GPU has {want_milli} milli-GPUs free")
            }
            NodeRefusal::Cores { free, total, want } => {
                write!(f, "{free} of {total} cores free, a task needs {want}")
            }
            NodeRefusal::Memory { free_mib, want_mib } => {
                write!(f, "{free_mib} MiB of memory free, a task needs {want_mib}")
            }
            NodeRefusal::Nics { free, total, want } => {
                write!(f, "{free} of {total} NICs free, a task needs {want}")
            }
            NodeRefusal::Named { name, free, want } => {
                write!(f, "{free} of `{name}` free, a task needs {want}")
            }
            NodeRefusal::NoNumaDomain {
                gpus,
                share_milli,
                cores,
                nics,
            } => {
                write!(f, "no NUMA domain has ")?;
                match share_milli {
                    Some(m) => write!(f, "a GPU with {m} milli-GPUs free")?,
                    None => write!(f, "{gpus} free GPUs")?,
                }
                write!(f, " with {cores} cores")?;
                if *nics > 0 {
                    write!(f, " and {nics} NICs")?;
                }
                Ok(())
            }
        }
    }
}

/// One task group as placement uses it.
pub(crate) struct GroupReq<'a> {
    /// Position in [`JobSpec::groups`].
    index: u16,
    group: &'a TaskGroup,
    res: &'a TaskResources,
    /// Milli-GPUs of one shared device, for a task that asks for a share.
    share: Option<u32>,
}

/// What the job is placed against.
#[derive(Copy, Clone, PartialEq, Eq)]
enum View {
    /// Live usage; only nodes that are up and not held exclusively.
    Now,
    /// Nodes as if idle; only nodes that are up.
    IdleUp,
    /// Nodes as if idle and up.
    IdleAll,
}

/// A job's groups in the order placement takes them: the largest tasks first.
fn processing_order(job: &JobSpec) -> Vec<GroupReq<'_>> {
    let mut groups: Vec<GroupReq<'_>> = job
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| GroupReq {
            index: i as u16,
            group: g,
            res: &g.per_task,
            share: g.per_task.gpu_share_milli,
        })
        .collect();
    groups.sort_by_key(|g| {
        let r = g.res;
        (
            std::cmp::Reverse((r.gpus, g.share.unwrap_or(0), r.cpus, r.mem_mib)),
            g.index,
        )
    });
    groups
}

/// What placement resolves of a job's task groups on the cluster's node shapes (per NUMA
/// domain, the GPUs of each group's model; the positions of its named resources): the same
/// for every job whose groups ask for the same, on the same shapes. A caller placing many
/// such jobs makes it once and passes it ([`OneNode::new`]); making it for each job was a
/// twelfth of a pass on a busy cluster.
#[derive(Debug)]
pub struct JobLayout(Layout);

impl JobLayout {
    pub fn new(cluster: &Cluster, job: &JobSpec) -> JobLayout {
        JobLayout(Layout::new(&cluster.shapes, &processing_order(job)))
    }
}

/// Everything a call resolves once.
struct Ctx<'a> {
    cluster: &'a Cluster,
    job: &'a JobSpec,
    groups: Vec<GroupReq<'a>>,
    layout: Cow<'a, Layout>,
    /// The eligible nodes, ascending, without duplicates: the caller's list when it is so
    /// already (a partition's nodes are), so that a call on a large cluster copies nothing.
    eligible: Cow<'a, [NodeId]>,
    /// The nodes scanned for the live view, ascending, each with the number of eligible
    /// nodes it stands for, when the caller knows that the eligible nodes left out take no
    /// task now or lose to an equal node scanned (see [`place_scanning`]).
    scan: Option<Vec<(NodeId, u32)>>,
}

impl<'a> Ctx<'a> {
    /// `ascending`: the caller knows `eligible` is ascending with each node once (a
    /// partition's nodes, see [`Cluster::from_parts`]), which is then not checked node by
    /// node (a twelfth of a placement's time on 12,500 nodes).
    fn new(
        cluster: &'a Cluster,
        job: &'a JobSpec,
        eligible: &'a [NodeId],
        ascending: bool,
    ) -> Result<Ctx<'a>, PlacementFailure> {
        Ctx::with_layout(cluster, job, eligible, ascending, None)
    }

    /// [`Ctx::new`], with the job's layout when the caller made it already.
    fn with_layout(
        cluster: &'a Cluster,
        job: &'a JobSpec,
        eligible: &'a [NodeId],
        ascending: bool,
        layout: Option<&'a JobLayout>,
    ) -> Result<Ctx<'a>, PlacementFailure> {
        validate(job)?;
        let groups = processing_order(job);
        let layout = match layout {
            Some(JobLayout(made)) => {
                debug_assert!(
                    *made == Layout::new(&cluster.shapes, &groups),
                    "the layout given is another job's"
                );
                Cow::Borrowed(made)
            }
            None => Cow::Owned(Layout::new(&cluster.shapes, &groups)),
        };
        let in_range = |n: &NodeId| (n.0 as usize) < cluster.nodes.len();
        debug_assert!(!ascending || eligible.windows(2).all(|w| w[0] < w[1]));
        let ready = (ascending || eligible.windows(2).all(|w| w[0] < w[1]))
            && eligible.last().is_none_or(in_range);
        let eligible = if ready {
            Cow::Borrowed(eligible)
        } else {
            let mut owned: Vec<NodeId> = eligible.iter().copied().filter(in_range).collect();
            owned.sort_unstable();
            owned.dedup();
            Cow::Owned(owned)
        };
        Ok(Ctx {
            cluster,
            job,
            groups,
            layout,
            eligible,
            scan: None,
        })
    }

    /// Bound of the dense leaf and block keys.
    fn slots(&self) -> usize {
        self.cluster.switches.len().max(self.cluster.blocks.len()) + 2
    }

    fn shape_id(&self, node: NodeId) -> usize {
        self.cluster.node(node).shape.0 as usize
    }

    fn usage(&self, node: NodeId, view: View) -> UsageRef<'a> {
        match view {
            View::Now => UsageRef::of(&self.cluster.node(node).usage),
            View::IdleUp | View::IdleAll => UsageRef::IDLE,
        }
    }

    fn capacity(&self, node: NodeId, u: UsageRef<'_>, gi: usize) -> u32 {
        let sid = self.shape_id(node);
        self.layout.task_capacity(
            sid,
            &self.cluster.shapes[sid],
            u,
            &self.groups[gi],
            gi,
            self.job.topology.numa,
        )
    }

    /// Task counts per group (processing order) for an elastic step `k` above the minimums.
    fn counts(&self, k: Option<u32>) -> Vec<u32> {
        self.groups
            .iter()
            .map(|g| {
                let t = g.group;
                match k {
                    Some(k) if !(t.nodes.is_some() && t.tasks_per_node.is_some()) => {
                        t.min_tasks().saturating_add(k).min(t.count)
                    }
                    _ => t.count,
                }
            })
            .collect()
    }

    /// Whether a node takes the job's tasks under `view`, before counting resources.
    fn refusal(&self, node: NodeId, view: View) -> Option<NodeRefusal> {
        let n = self.cluster.node(node);
        if view != View::IdleAll && n.avail != NodeAvail::Up {
            return Some(NodeRefusal::NotUp {
                avail: n.avail,
                reason: n.reason.clone(),
            });
        }
        if view == View::Now {
            if let Some(holder) = n.usage.exclusive {
                return Some(NodeRefusal::HeldExclusively { holder });
            }
            if self.job.exclusive && !n.usage.jobs.is_empty() {
                return Some(NodeRefusal::InUse {
                    jobs: n.usage.jobs.len(),
                });
            }
        }
        static_refusal(self.cluster, self.job, node)
    }

    /// The candidates and their counts for a view.
    fn candidates(&self, view: View) -> (Vec<Cand>, Vec<u32>) {
        let ng = self.groups.len();
        let mut cands = Vec::new();
        let mut caps = Vec::new();
        let nodes: Box<dyn Iterator<Item = (NodeId, u32)> + '_> = match (&self.scan, view) {
            (Some(scan), View::Now) => Box::new(scan.iter().copied()),
            _ => Box::new(self.eligible.iter().map(|&n| (n, 1))),
        };
        // Nodes with nothing on them count as idle ones of their shape: counted once per
        // shape (most of the nodes on a cluster filling up).
        let mut idle_caps: Vec<Option<u32>> = vec![None; self.cluster.shapes.len() * ng];
        for (node, weight) in nodes {
            if self.refusal_fast(node, view) {
                continue;
            }
            let n = self.cluster.node(node);
            let idle = view != View::Now || n.usage.jobs.is_empty();
            let u = self.usage(node, view);
            let start = caps.len();
            let mut any = false;
            for gi in 0..ng {
                let c = if idle {
                    let slot = self.shape_id(node) * ng + gi;
                    *idle_caps[slot].get_or_insert_with(|| self.capacity(node, UsageRef::IDLE, gi))
                } else {
                    self.capacity(node, u, gi)
                };
                debug_assert_eq!(
                    c,
                    self.capacity(node, u, gi),
                    "idle {node:?} counted as idle"
                );
                any |= c > 0;
                caps.push(c);
            }
            if !any {
                caps.truncate(start);
                continue;
            }
            cands.push(self.cand(node, idle, view, weight));
        }
        (cands, caps)
    }

    /// Node `node` as a candidate standing for `weight` nodes; `idle`: nothing runs on it
    /// (in `view`).
    fn cand(&self, node: NodeId, idle: bool, view: View, weight: u32) -> Cand {
        let n = self.cluster.node(node);
        let shape = self.cluster.shape(node);
        let free = match view {
            View::Now if !idle => shape.capacity().saturating_sub(&n.usage.amounts()),
            _ => shape.capacity(),
        };
        Cand {
            node,
            leaf_key: slot_key(n.leaf.map(|l| l.0), self.cluster.switches.len()),
            block_key: slot_key(n.block.map(|b| b.0), self.cluster.blocks.len()),
            idle,
            free,
            weight,
        }
    }

    /// [`Ctx::refusal`] without building the message: the hot path.
    fn refusal_fast(&self, node: NodeId, view: View) -> bool {
        let n = self.cluster.node(node);
        if view != View::IdleAll && n.avail != NodeAvail::Up {
            return true;
        }
        if view == View::Now
            && (n.usage.exclusive.is_some() || (self.job.exclusive && !n.usage.jobs.is_empty()))
        {
            return true;
        }
        if refuses_none(self.job) {
            return false;
        }
        static_refusal(self.cluster, self.job, node).is_some()
    }

    /// Runs the engine on a view with the device-level pool; elastic jobs by bisection. A
    /// profile adds the fragmentation preference (live usage only).
    fn plan(&self, view: View, profile: Option<&WorkloadProfile>) -> Option<(Vec<Cand>, Plan)> {
        let (cands, caps) = self.candidates(view);
        if cands.is_empty() {
            return None;
        }
        let engine = Engine {
            job: self.job,
            groups: &self.groups,
            cands: &cands,
            caps: &caps,
            slots: self.slots(),
            frag: profile
                .filter(|_| view == View::Now)
                .and_then(|p| Frag::of(p, self.cluster)),
        };
        let pool = DevicePool {
            ctx: self,
            cands: &cands,
            view,
        };
        let plan = run_elastic(self, &engine, &pool);
        // The engine holds the profile's memo (a lock) and borrows the candidates.
        drop(engine);
        Some((cands, plan?))
    }

    /// Picks the devices of a plan's tasks.
    fn allocation(&self, cands: &[Cand], plan: &Plan) -> Option<Allocation> {
        self.allocation_in(cands, plan, &mut DeviceScratch::default())
    }

    /// [`Ctx::allocation`], its working copies of the nodes' usage made in `scratch`.
    fn allocation_in(
        &self,
        cands: &[Cand],
        plan: &Plan,
        scratch: &mut DeviceScratch,
    ) -> Option<Allocation> {
        // The nodes used: one or a few, at every start.
        let mut order: smallvec::SmallVec<[usize; 4]> = plan.entries.iter().map(|e| e.0).collect();
        order.sort_unstable();
        order.dedup();
        let mut tasks = Vec::with_capacity(plan.entries.iter().map(|e| e.2 as usize).sum());
        for i in order {
            let node = cands[i].node;
            let sid = self.shape_id(node);
            let shape = &self.cluster.shapes[sid];
            let work = scratch.work(&self.cluster.node(node).usage);
            for &(_, g, n) in plan.entries.iter().filter(|e| e.0 == i) {
                for _ in 0..n {
                    let t = work.assign(
                        &self.layout,
                        sid,
                        shape,
                        &self.groups[g],
                        g,
                        self.job.topology.numa,
                        node,
                    )?;
                    tasks.push(t);
                }
            }
        }
        tasks.sort_by_key(|t| (t.group, t.node));
        let mut rank = 0;
        for k in 0..tasks.len() {
            if k > 0 && tasks[k - 1].group != tasks[k].group {
                rank = 0;
            }
            tasks[k].rank = rank;
            rank += 1;
        }
        Some(Allocation {
            tasks,
            exclusive: self.job.exclusive,
        })
    }

    /// The job placed on what is free now, if it fits.
    fn place_now(&self, profile: Option<&WorkloadProfile>) -> Option<Allocation> {
        let (cands, plan) = self.plan(View::Now, profile)?;
        self.allocation(&cands, &plan)
    }

    /// Classifies a failure to place now.
    fn failure(&self) -> PlacementFailure {
        if self.eligible.is_empty() {
            return PlacementFailure::NoEligibleNodes;
        }
        // A job that names no feature or label is refused by no node outright: on a large
        // partition, the list would be a copy of every eligible node.
        let statically_ok: Cow<[NodeId]> = if refuses_none(self.job) {
            Cow::Borrowed(&self.eligible)
        } else {
            let ok = self.eligible.iter().copied();
            ok.filter(|&n| static_refusal(self.cluster, self.job, n).is_none())
                .collect()
        };
        if statically_ok.is_empty() {
            let what = match static_refusal(self.cluster, self.job, self.eligible[0]) {
                Some(r @ NodeRefusal::LacksFeature(_)) => format!("the features {}", r_what(&r)),
                Some(r) => r_what(&r),
                None => "the job's features".into(),
            };
            return PlacementFailure::NoMatchingNode { what };
        }
        // On idle nodes a node's capacity depends on its shape only.
        let ng = self.groups.len();
        let mut idle_caps: Vec<Option<u32>> = vec![None; self.cluster.shapes.len() * ng];
        let mut idle_cap = |node: NodeId, gi: usize| -> u32 {
            let slot = self.shape_id(node) * ng + gi;
            *idle_caps[slot].get_or_insert_with(|| self.capacity(node, UsageRef::IDLE, gi))
        };
        // An elastic group that may start empty is no reason for "never", unless every group
        // may (a gang starts with at least one task) and none fits anywhere.
        let all_optional = self.groups.iter().all(|g| g.group.min_tasks() == 0);
        let mut any_fits = false;
        for (gi, g) in self.groups.iter().enumerate() {
            if g.group.count == 0 {
                continue;
            }
            let fits = statically_ok.iter().any(|&n| idle_cap(n, gi) > 0);
            any_fits |= fits;
            let last = gi + 1 == self.groups.len();
            let report = if all_optional {
                last && !any_fits
            } else {
                !fits && g.group.min_tasks() > 0
            };
            if report {
                let gi = if all_optional {
                    self.groups
                        .iter()
                        .position(|g| g.group.count > 0)
                        .unwrap_or(gi)
                } else {
                    gi
                };
                let g = &self.groups[gi];
                let n = statically_ok[0];
                let why = self.explain(n, UsageRef::IDLE, gi);
                if let (Some(model), NodeRefusal::NoGpuModel(_)) = (&g.res.gpu_model, &why) {
                    return PlacementFailure::NoMatchingNode {
                        what: format!("{model} GPUs"),
                    };
                }
                return PlacementFailure::TaskTooBig {
                    group: g.group.name.clone(),
                    why,
                };
            }
        }
        // The common case without running the engine: one group whose minimum fits on one
        // idle node that is up (one node satisfies every span).
        let busy = PlacementFailure::Busy {
            nodes: self.eligible.len(),
        };
        let mut active = self
            .groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.group.count > 0);
        if let (Some((gi, g)), None) = (active.next(), active.next()) {
            let t = g.group;
            let need = self.counts(Some(0))[gi].max(1);
            let one_node = t.nodes.is_none_or(|n| n == 1)
                && t.tasks_per_node.is_none_or(|k| k >= need)
                && (!self.job.one_task_per_node || need == 1);
            if one_node
                && statically_ok.iter().any(|&n| {
                    self.cluster.node(n).avail == NodeAvail::Up && idle_cap(n, gi) >= need
                })
            {
                return busy;
            }
        }
        if self.plan(View::IdleAll, None).is_none() {
            return PlacementFailure::NeverFits {
                nodes: self.eligible.len(),
                span: self.job.topology.span,
                numa: self.job.topology.numa,
            };
        }
        let all_up = self
            .eligible
            .iter()
            .all(|&n| self.cluster.node(n).avail == NodeAvail::Up);
        if !all_up && self.plan(View::IdleUp, None).is_none() {
            let unavailable = self
                .eligible
                .iter()
                .filter(|&&n| self.cluster.node(n).avail != NodeAvail::Up)
                .count();
            return PlacementFailure::NodesNotAvailable { unavailable };
        }
        busy
    }

    /// Why one task of group `gi` does not fit on `node` with usage `u`.
    fn explain(&self, node: NodeId, u: UsageRef<'_>, gi: usize) -> NodeRefusal {
        let sid = self.shape_id(node);
        let g = &self.groups[gi];
        let r = g.res;
        match self
            .layout
            .shortage(sid, &self.cluster.shapes[sid], u, g, gi)
        {
            Shortage::NoGpuModel => {
                NodeRefusal::NoGpuModel(r.gpu_model.clone().unwrap_or_default())
            }
            Shortage::NoNamed(k) => NodeRefusal::LacksNamed(r.named[k].0.clone()),
            Shortage::Gpus { free, total } => NodeRefusal::Gpus {
                free,
                total,
                want: r.gpus,
            },
            Shortage::GpuShare => NodeRefusal::GpuShare {
                want_milli: g.share.unwrap_or(0),
            },
            Shortage::Cores { free, total } => NodeRefusal::Cores {
                free,
                total,
                want: r.cpus,
            },
            Shortage::Memory { free } => NodeRefusal::Memory {
                free_mib: free,
                want_mib: r.mem_mib,
            },
            Shortage::Nics { free, total } => NodeRefusal::Nics {
                free,
                total,
                want: r.nics,
            },
            Shortage::Named { index, free } => NodeRefusal::Named {
                name: r.named[index].0.clone(),
                free,
                want: r.named[index].1,
            },
            Shortage::NumaDomain => NodeRefusal::NoNumaDomain {
                gpus: r.gpus,
                share_milli: g.share,
                cores: r.cpus,
                nics: r.nics,
            },
        }
    }
}

fn r_what(r: &NodeRefusal) -> String {
    match r {
        NodeRefusal::LacksFeature(f) => f.clone(),
        NodeRefusal::LacksLabel { key, value } => format!("the label {key}={value}"),
        other => other.to_string(),
    }
}

/// Whether [`static_refusal`] refuses `job` on no node: it names no feature and no label.
fn refuses_none(job: &JobSpec) -> bool {
    job.features.is_empty() && job.node_selector.is_empty()
}

/// Features and labels: what never changes while the job waits.
fn static_refusal(cluster: &Cluster, job: &JobSpec, node: NodeId) -> Option<NodeRefusal> {
    let n = cluster.node(node);
    for f in &job.features {
        if !n.features.iter().any(|x| x == f) {
            return Some(NodeRefusal::LacksFeature(f.clone()));
        }
    }
    for (k, v) in &job.node_selector {
        if n.labels.get(k) != Some(v) {
            return Some(NodeRefusal::LacksLabel {
                key: k.clone(),
                value: v.clone(),
            });
        }
    }
    None
}

/// Checks what no cluster could satisfy.
fn validate(job: &JobSpec) -> Result<(), PlacementFailure> {
    if job.groups.iter().all(|g| g.count == 0) {
        return Err(PlacementFailure::NoTasks);
    }
    if job.groups.len() > usize::from(u16::MAX) {
        return Err(PlacementFailure::InvalidGroup {
            group: job.groups[0].name.clone(),
            what: format!("{} task groups, at most {}", job.groups.len(), u16::MAX),
        });
    }
    for g in &job.groups {
        let bad = |what: String| {
            Err(PlacementFailure::InvalidGroup {
                group: g.name.clone(),
                what,
            })
        };
        let r = &g.per_task;
        if let Some(s) = r.gpu_share_milli {
            if r.gpus > 0 {
                return bad("asks for whole GPUs and a GPU share".into());
            }
            if s == 0 || s >= MILLI_PER_GPU {
                return bad(format!("GPU share of {s} milli-GPUs is not in 1..=999"));
            }
        }
        if g.count == 0 {
            continue;
        }
        if g.tasks_per_node == Some(0) {
            return bad("tasks_per_node is 0".into());
        }
        if g.nodes == Some(0) {
            return bad("nodes is 0".into());
        }
        if let Some(n) = g.nodes {
            if n > g.min_tasks() {
                return bad(format!("{n} nodes for {} tasks", g.min_tasks()));
            }
            if let Some(k) = g.tasks_per_node {
                if u64::from(n) * u64::from(k) != u64::from(g.count) {
                    return bad(format!(
                        "{n} nodes of {k} tasks each is not the count of {}",
                        g.count
                    ));
                }
            }
        }
        if job.one_task_per_node && g.tasks_per_node.is_some_and(|k| k > 1) {
            return bad("tasks_per_node above 1 with one task per node".into());
        }
    }
    Ok(())
}

/// Full size first; for an elastic job, the largest common step above the minimums found by
/// bisection.
fn run_elastic(ctx: &Ctx<'_>, engine: &Engine<'_>, pool: &dyn Pool) -> Option<Plan> {
    if let Some(plan) = engine.run(pool, &ctx.counts(None)) {
        return Some(plan);
    }
    let max_step = ctx
        .groups
        .iter()
        .map(|g| g.group.count - g.group.min_tasks())
        .max()
        .unwrap_or(0);
    if max_step == 0 {
        return None;
    }
    // A gang starts with at least one task, even if every group's minimum is 0.
    let first = u32::from(ctx.counts(Some(0)).iter().all(|&c| c == 0));
    if first > max_step {
        return None;
    }
    let mut best = engine.run(pool, &ctx.counts(Some(first)))?;
    let (mut lo, mut hi) = (first, max_step);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match engine.run(pool, &ctx.counts(Some(mid))) {
            Some(plan) => {
                best = plan;
                lo = mid;
            }
            None => hi = mid,
        }
    }
    Some(best)
}

/// Counts nodes from their devices.
struct DevicePool<'c, 'a> {
    ctx: &'c Ctx<'a>,
    cands: &'c [Cand],
    view: View,
}

impl Pool for DevicePool<'_, '_> {
    fn recap(&self, i: usize, g: usize, placed: &[(usize, u32)]) -> u32 {
        let ctx = self.ctx;
        let node = self.cands[i].node;
        let sid = ctx.shape_id(node);
        let shape = &ctx.cluster.shapes[sid];
        let usage = match self.view {
            View::Now => Some(&ctx.cluster.node(node).usage),
            _ => None,
        };
        let mut work = Work::new(shape, usage);
        for &(pg, pn) in placed {
            for _ in 0..pn {
                let numa = ctx.job.topology.numa;
                if work
                    .assign(&ctx.layout, sid, shape, &ctx.groups[pg], pg, numa, node)
                    .is_none()
                {
                    debug_assert!(false, "a counted task did not fit on {node:?}");
                    return 0;
                }
            }
        }
        ctx.capacity(node, work.view(), g)
    }
}

/// Counts nodes from aggregate free amounts.
struct AmountsPool<'c> {
    cluster: &'c Cluster,
    groups: &'c [GroupReq<'c>],
    cands: &'c [Cand],
}

impl Pool for AmountsPool<'_> {
    fn recap(&self, i: usize, g: usize, placed: &[(usize, u32)]) -> u32 {
        let shape = self.cluster.shape(self.cands[i].node);
        let mut free = self.cands[i].free;
        let mut named: Vec<(&str, u64)> =
            shape.named.iter().map(|(n, c)| (n.as_str(), *c)).collect();
        for &(pg, pn) in placed {
            let r = self.groups[pg].res;
            free = free.saturating_sub(&(r.amounts() * u64::from(pn)));
            for (name, want) in &r.named {
                if let Some(slot) = named.iter_mut().find(|(n, _)| n == name) {
                    slot.1 = slot.1.saturating_sub(want.saturating_mul(u64::from(pn)));
                }
            }
        }
        let g = &self.groups[g];
        g.res
            .named
            .iter()
            .fold(aggregate_capacity(&free, g), |cap, (name, want)| {
                let have = named.iter().find(|(n, _)| n == name).map_or(0, |s| s.1);
                cap.min(
                    have.checked_div(*want)
                        .map_or(u32::MAX, |q| u32::try_from(q).unwrap_or(u32::MAX)),
                )
            })
    }
}

/// Tasks of a group that fit in aggregate amounts. Named resources are not in [`Amounts`]:
/// callers count them at the shape's capacity (what is in use at a future time is unknown).
fn aggregate_capacity(free: &Amounts, g: &GroupReq<'_>) -> u32 {
    let r = g.res;
    let per = |have: u64, want: u64| -> u32 {
        have.checked_div(want)
            .map_or(u32::MAX, |q| u32::try_from(q).unwrap_or(u32::MAX))
    };
    let gpu = match g.share {
        Some(s) => per(free.gpu_milli, u64::from(s)),
        None => per(free.gpu_milli / u64::from(MILLI_PER_GPU), u64::from(r.gpus)),
    };
    gpu.min(per(free.cpus, u64::from(r.cpus)))
        .min(per(free.mem_mib, r.mem_mib))
        .min(per(free.nics, u64::from(r.nics)))
}

/// Places the whole gang on the devices free now on the `eligible` nodes (see the module doc
/// for the rules and the preference order).
pub fn place(
    cluster: &Cluster,
    job: &JobSpec,
    eligible: &[NodeId],
) -> Result<Allocation, PlacementFailure> {
    place_inner(cluster, job, eligible, None, None, false)
}

/// [`place`] with the fragmentation preference: among nodes that fit a task, the one where
/// it raises the fragmentation of the free GPUs least for the task sizes in `profile` comes
/// first (see the module doc). The rules of what may be placed where, and the failure when
/// nothing fits, are those of [`place`]; a single-group job without a span requirement fits
/// exactly when it fits with [`place`]; an empty profile gives [`place`]'s answer.
pub fn place_with_profile(
    cluster: &Cluster,
    job: &JobSpec,
    eligible: &[NodeId],
    profile: &WorkloadProfile,
) -> Result<Allocation, PlacementFailure> {
    place_inner(cluster, job, eligible, Some(profile), None, false)
}

/// [`place`] (with a profile, [`place_with_profile`]) on a partition's nodes (`eligible`:
/// ascending, each once, as [`Cluster::from_parts`] keeps them) that looks for room only on
/// the nodes of `scan` (ascending; those not eligible are ignored), each with the number of
/// eligible
/// nodes it stands for (itself included). The caller knows that every eligible node left
/// out either takes no task of the job now (say, it has fewer whole GPUs free than any task
/// asks for), or is equal to a scanned node of a lower id that stands for it, in everything
/// placement sees but the id, with at least as many scanned nodes of that kind as the job
/// has tasks. Such a node would not have been chosen (equal nodes are chosen lowest id
/// first, and a job uses at most one node per task), and the counts placement takes over
/// whole leaves come from the weights, so the answer, failure included (judged on all of
/// `eligible`), is that of [`place`] (or [`place_with_profile`]); only the work is less.
pub fn place_scanning(
    cluster: &Cluster,
    job: &JobSpec,
    eligible: &[NodeId],
    profile: Option<&WorkloadProfile>,
    scan: Vec<(NodeId, u32)>,
) -> Result<Allocation, PlacementFailure> {
    place_inner(cluster, job, eligible, profile, Some(scan), true)
}

/// What a node offers a job that [`place`] puts on one node if one node can hold it
/// ([`OneNode`]): the tasks that fit there now, and whether nothing runs there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeFit {
    /// Tasks of the job that fit on the node now (0 on a node the job cannot use).
    cap: u32,
    idle: bool,
    /// The node's leaf switch, as the preference counts idle nodes under it.
    leaf_key: u32,
    /// How well the whole job fits there, when it does ([`select::FitHead`]).
    head: Option<select::FitHead>,
}

/// The device-level placement of a job of one group of tasks, none of them elastic, with
/// no rule that spreads them over nodes and no `OneBlock` span, asked of one node at a time:
/// such a job goes on the node that fits it best when one node can hold it, and a node's
/// fit depends on that node alone. A caller that keeps nodes grouped by what placement sees
/// of them can then remember a group's [`NodeFit`] while the group is unchanged, and
/// [`one_node_choice`] names the node [`place`] (with this profile) would choose, where
/// [`OneNode::allocation`] picks the devices.
pub struct OneNode<'a> {
    ctx: Ctx<'a>,
    /// Holds the profile's memo of rises (a lock) while it lives.
    frag: Option<Frag<'a>>,
    count: u32,
}

impl<'a> OneNode<'a> {
    /// Whether the job is of that kind.
    pub fn suits(job: &JobSpec) -> bool {
        let [group] = job.groups.as_slice() else {
            return false;
        };
        group.nodes.is_none()
            && group.tasks_per_node.is_none()
            && group.min_tasks() == group.count
            && group.count > 0
            && !job.exclusive
            && (!job.one_task_per_node || group.count == 1)
            && job.topology.span != NetworkSpan::OneBlock
    }

    /// `None` for a job that is not of that kind, or that no cluster could hold. `layout`:
    /// the job's, when the caller made it already ([`JobLayout::new`] for this job, or one
    /// whose groups ask for the same).
    pub fn new(
        cluster: &'a Cluster,
        job: &'a JobSpec,
        profile: Option<&'a WorkloadProfile>,
        layout: Option<&'a JobLayout>,
    ) -> Option<OneNode<'a>> {
        if !OneNode::suits(job) {
            return None;
        }
        let ctx = Ctx::with_layout(cluster, job, &[], true, layout).ok()?;
        Some(OneNode {
            frag: profile.and_then(|p| Frag::of(p, cluster)),
            ctx,
            count: job.groups[0].count,
        })
    }

    /// What `node` offers the job now.
    pub fn fit(&self, node: NodeId) -> NodeFit {
        let none = NodeFit {
            cap: 0,
            idle: false,
            leaf_key: 0,
            head: None,
        };
        if self.ctx.refusal_fast(node, View::Now) {
            return none;
        }
        let n = self.ctx.cluster.node(node);
        let idle = n.usage.jobs.is_empty();
        let cap = self.ctx.capacity(node, UsageRef::of(&n.usage), 0);
        if cap == 0 {
            return none;
        }
        let c = self.ctx.cand(node, idle, View::Now, 1);
        let head = (cap >= self.count).then(|| {
            let g = &self.ctx.groups[0];
            select::fit_head(
                self.frag.as_ref(),
                &c,
                g,
                0,
                self.count,
                &Amounts::ZERO,
                true,
            )
        });
        NodeFit {
            cap,
            idle,
            leaf_key: c.leaf_key,
            head,
        }
    }

    /// The allocation [`place`] makes on `node`, the node it chose ([`one_node_choice`]):
    /// every task there, its devices picked as [`place`] picks them. `None` when the node
    /// cannot hold the whole job now.
    pub fn allocation(&self, node: NodeId) -> Option<Allocation> {
        self.allocation_fitting(node, &self.fit(node), &mut DeviceScratch::default())
    }

    /// [`OneNode::allocation`] on a node whose fit the caller knows already: what
    /// [`OneNode::fit`] gives for it now (as [`OneNodeChoice::chosen`] gives the chosen
    /// node's, when the fits it was fed are the nodes' now). Working the fit out again was
    /// 1.4% of a busy pass. The devices are picked in `scratch`.
    ///
    /// What the node refuses outright (not up, held exclusively, lacking a feature the job
    /// asks for) is looked at again, cheaply, so that a fit remembered wrongly cannot put
    /// the job there; the devices' own assignment fails where the node lacks room. Debug
    /// builds check the fit against the node's now.
    pub(crate) fn allocation_fitting(
        &self,
        node: NodeId,
        fit: &NodeFit,
        scratch: &mut DeviceScratch,
    ) -> Option<Allocation> {
        fit.head?;
        if self.ctx.refusal_fast(node, View::Now) {
            return None;
        }
        debug_assert!(
            {
                let now = self.fit(node);
                (now.cap, now.idle, now.leaf_key, now.head.is_some())
                    == (fit.cap, fit.idle, fit.leaf_key, true)
            },
            "the fit given is not node {node:?}'s now"
        );
        let cand = self.ctx.cand(node, fit.idle, View::Now, 1);
        let plan = Plan {
            entries: vec![(0, 0, self.count)],
        };
        self.ctx.allocation_in(&[cand], &plan, scratch)
    }
}

/// Room for the working copy of a node's usage that devices are picked in, kept by a
/// caller that places job after job (one-node jobs at every start of a busy pass), so that
/// each placement copies the usage into it instead of allocating a copy.
#[derive(Debug, Default)]
pub(crate) struct DeviceScratch(Work);

impl DeviceScratch {
    /// The working copy of a node with `usage`.
    fn work(&mut self, usage: &NodeUsage) -> &mut Work {
        self.0.copy_from(usage);
        &mut self.0
    }
}

/// The node [`place`] chooses for a job of [`OneNode`]'s kind among `fits`: each node with
/// what it offers, ascending, standing for `weight` nodes of its partition (itself and equal
/// nodes of higher ids); `None` when no node holds the whole job (the job then needs
/// several nodes, or does not fit now).
pub fn one_node_choice(fits: &[(NodeId, u32, NodeFit)]) -> Option<NodeId> {
    let mut choice = OneNodeChoice::default();
    for (node, weight, fit) in fits {
        choice.add(*node, *weight, fit);
    }
    choice.node()
}

/// [`one_node_choice`] fed one node at a time, in any order, without a list of them all:
/// a caller that reads the nodes' fits from what it remembers chooses as it reads.
///
/// The best fit is the least head (how well the node alone fits the job, in its
/// [`NodeFit`]), then the fewest idle nodes that take a task under its leaf, then the
/// lowest id. Those idle counts are known only once every node is in, so the nodes tied on
/// the least head are kept until then: on a busy cluster a few of them, where a list of
/// every fit held as many as the cluster has node states.
#[derive(Debug, Default)]
pub struct OneNodeChoice {
    /// Idle nodes that take a task, under each leaf.
    leaf_idle: Vec<u32>,
    /// The least head seen, and the nodes that have it, with what they offer.
    best: Option<select::FitHead>,
    tied: Vec<(NodeId, NodeFit)>,
}

impl OneNodeChoice {
    /// Forgets every node added, keeping the room it took (a caller choosing again and
    /// again makes one choice and clears it each time).
    pub fn clear(&mut self) {
        self.leaf_idle.fill(0);
        self.best = None;
        self.tied.clear();
    }

    /// Counts `node`, standing for `weight` nodes, with what it offers. Inlined: a pass
    /// adds every class of nodes at every start of a one-node job.
    #[inline]
    pub fn add(&mut self, node: NodeId, weight: u32, fit: &NodeFit) {
        let leaf = fit.leaf_key as usize;
        if fit.idle && fit.cap > 0 {
            if self.leaf_idle.len() <= leaf {
                self.leaf_idle.resize(leaf + 1, 0);
            }
            self.leaf_idle[leaf] += weight;
        }
        let Some(head) = fit.head else {
            return;
        };
        match self.best.map(|best| head.cmp(&best)) {
            Some(std::cmp::Ordering::Greater) => {}
            Some(std::cmp::Ordering::Equal) => self.tied.push((node, *fit)),
            Some(std::cmp::Ordering::Less) | None => {
                self.best = Some(head);
                self.tied.clear();
                self.tied.push((node, *fit));
            }
        }
    }

    /// The node chosen among those added; `None` when none holds the whole job.
    pub fn node(&self) -> Option<NodeId> {
        self.chosen().map(|(node, _)| node)
    }

    /// The node chosen among those added, with the fit it was added with.
    pub fn chosen(&self) -> Option<(NodeId, NodeFit)> {
        let idle = |leaf: u32| self.leaf_idle.get(leaf as usize).copied().unwrap_or(0);
        (self.tied.iter())
            .min_by_key(|&&(node, fit)| (idle(fit.leaf_key), node))
            .copied()
    }
}

/// [`place_scanning`] when the caller has no use for why the job is not placed: `None` then
/// (nothing fits, or the job is invalid), without the work of classifying the failure (on
/// a large partition, a look at every eligible node).
pub fn place_scanning_quietly(
    cluster: &Cluster,
    job: &JobSpec,
    eligible: &[NodeId],
    profile: Option<&WorkloadProfile>,
    scan: Vec<(NodeId, u32)>,
) -> Option<Allocation> {
    let ctx = scanning_ctx(cluster, job, eligible, Some(scan), true).ok()?;
    ctx.place_now(profile)
}

fn place_inner(
    cluster: &Cluster,
    job: &JobSpec,
    eligible: &[NodeId],
    profile: Option<&WorkloadProfile>,
    scan: Option<Vec<(NodeId, u32)>>,
    ascending: bool,
) -> Result<Allocation, PlacementFailure> {
    let ctx = scanning_ctx(cluster, job, eligible, scan, ascending)?;
    ctx.place_now(profile).ok_or_else(|| ctx.failure())
}

/// The placement context of a job on `eligible`, looking for room only on the nodes of
/// `scan` if given (see [`place_scanning`]).
fn scanning_ctx<'a>(
    cluster: &'a Cluster,
    job: &'a JobSpec,
    eligible: &'a [NodeId],
    scan: Option<Vec<(NodeId, u32)>>,
    ascending: bool,
) -> Result<Ctx<'a>, PlacementFailure> {
    let mut ctx = Ctx::new(cluster, job, eligible, ascending)?;
    ctx.scan = scan.map(|mut scan| {
        debug_assert!(
            scan.windows(2).all(|w| w[0].0 < w[1].0),
            "scan is ascending"
        );
        // Both ascending: one merge keeps the eligible ones (all are, when every node is).
        if ctx.eligible.len() < cluster.nodes.len() {
            let mut rest = ctx.eligible.iter().peekable();
            scan.retain(|(n, _)| {
                while rest.next_if(|e| *e < n).is_some() {}
                rest.peek() == Some(&n)
            });
        }
        scan
    });
    Ok(ctx)
}

/// The node selection of [`place`] on aggregate free amounts per node (`free`, e.g. what the
/// backfill planner expects free at a future time): per node used, ascending, the amounts the
/// job's tasks (all groups together) hold there, whole nodes for an exclusive job; `None` if
/// the job does not fit.
///
/// Nodes that are not up, or lack the job's features, labels, GPU model or named resources,
/// are skipped; an exclusive job uses only nodes whose `free` is their whole capacity. NUMA
/// and device identity are not known here: GPUs count as free milli-GPUs (whole GPUs as
/// whole thousands of them, of any model), and named resources at the node's capacity
/// (their use at a future time is unknown), so this view is never stricter than [`place`]'s.
pub fn select_nodes(
    cluster: &Cluster,
    job: &JobSpec,
    eligible: &[NodeId],
    free: &dyn Fn(NodeId) -> Amounts,
) -> Option<Vec<(NodeId, Amounts)>> {
    let ctx = Ctx::new(cluster, job, eligible, false).ok()?;
    let ng = ctx.groups.len();
    let mut cands = Vec::new();
    let mut caps = Vec::new();
    for &node in ctx.eligible.iter() {
        if ctx.refusal_fast(node, View::IdleUp) {
            continue;
        }
        let f = free(node);
        let capacity = cluster.shape(node).capacity();
        let idle = f == capacity;
        if job.exclusive && !idle {
            continue;
        }
        let sid = ctx.shape_id(node);
        let start = caps.len();
        let mut any = false;
        for gi in 0..ng {
            // The node must be able to host the group at all (model, named resources).
            let static_cap = ctx.layout.task_capacity(
                sid,
                &cluster.shapes[sid],
                UsageRef::IDLE,
                &ctx.groups[gi],
                gi,
                job.topology.numa,
            );
            let named_cap = ctx.groups[gi]
                .res
                .named
                .iter()
                .fold(u32::MAX, |cap, (name, want)| {
                    let have = cluster.shapes[sid]
                        .named
                        .iter()
                        .find(|(n, _)| n == name)
                        .map_or(0, |(_, c)| *c);
                    cap.min(
                        have.checked_div(*want)
                            .map_or(u32::MAX, |q| u32::try_from(q).unwrap_or(u32::MAX)),
                    )
                });
            let c = if static_cap == 0 {
                0
            } else {
                aggregate_capacity(&f, &ctx.groups[gi]).min(named_cap)
            };
            any |= c > 0;
            caps.push(c);
        }
        if !any {
            caps.truncate(start);
            continue;
        }
        let n = cluster.node(node);
        cands.push(Cand {
            node,
            leaf_key: slot_key(n.leaf.map(|l| l.0), cluster.switches.len()),
            block_key: slot_key(n.block.map(|b| b.0), cluster.blocks.len()),
            idle,
            free: f,
            weight: 1,
        });
    }
    let engine = Engine {
        job,
        groups: &ctx.groups,
        cands: &cands,
        caps: &caps,
        slots: ctx.slots(),
        frag: None,
    };
    let pool = AmountsPool {
        cluster,
        groups: &ctx.groups,
        cands: &cands,
    };
    let plan = run_elastic(&ctx, &engine, &pool)?;
    let mut per_node: Vec<(NodeId, Amounts)> = Vec::new();
    for &(i, g, n) in &plan.entries {
        per_node.push((cands[i].node, ctx.groups[g].res.amounts() * u64::from(n)));
    }
    per_node.sort_unstable_by_key(|(node, _)| *node);
    let mut out: Vec<(NodeId, Amounts)> = Vec::with_capacity(per_node.len());
    for (node, a) in per_node {
        match out.last_mut() {
            Some((last, held)) if *last == node => *held += a,
            _ => out.push((node, a)),
        }
    }
    if job.exclusive {
        for (node, held) in &mut out {
            *held = cluster.shape(*node).capacity();
        }
    }
    Some(out)
}

/// Why none of the job's tasks can use `node` right now, or `None` if at least one task of
/// some group fits there (for `explain`). Span and task-count rules are about the whole job
/// and are not judged here.
pub fn why_not(cluster: &Cluster, job: &JobSpec, node: NodeId) -> Option<NodeRefusal> {
    if node.0 as usize >= cluster.nodes.len() {
        return None;
    }
    let one = [node];
    let ctx = match Ctx::new(cluster, job, &one, true) {
        Ok(ctx) => ctx,
        Err(_) => return None,
    };
    if let Some(r) = ctx.refusal(node, View::Now) {
        return Some(r);
    }
    let u = ctx.usage(node, View::Now);
    let mut first = None;
    for gi in 0..ctx.groups.len() {
        if ctx.groups[gi].group.count == 0 {
            continue;
        }
        if ctx.capacity(node, u, gi) > 0 {
            return None;
        }
        first.get_or_insert(gi);
    }
    first.map(|gi| ctx.explain(node, u, gi))
}

/// How many more tasks of group `group` (position in [`JobSpec::groups`]) fit on `node` now,
/// counted on its devices with the job's NUMA policy; 0 where the node refuses the job.
/// A cheap per-node summary for the scheduler.
pub fn node_task_capacity(cluster: &Cluster, job: &JobSpec, node: NodeId, group: usize) -> u32 {
    if node.0 as usize >= cluster.nodes.len() {
        return 0;
    }
    let one = [node];
    let Ok(ctx) = Ctx::new(cluster, job, &one, true) else {
        return 0;
    };
    if ctx.refusal_fast(node, View::Now) {
        return 0;
    }
    match ctx
        .groups
        .iter()
        .position(|g| usize::from(g.index) == group)
    {
        Some(gi) => ctx.capacity(node, ctx.usage(node, View::Now), gi),
        None => 0,
    }
}
