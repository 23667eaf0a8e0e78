//! cadre-core: the model and the scheduler. Pure, synchronous, deterministic.
//!
//! Everything else in cadre (the simulator, the controller, the Slurm and Kubernetes front
//! ends) is built on this crate, and the simulator and the live controller run the very same
//! code. Nothing here reads a clock, sleeps, spawns, does I/O or draws a random number: time
//! comes in as [`time::Time`], iteration is over ordered collections, and ties are broken by
//! ids.
//!
//! # The scheduling problem
//!
//! **Given**
//! - a cluster ([`cluster::Cluster`]): nodes of known shapes (NUMA domains, each with its
//!   cores, GPUs and RDMA NICs; memory; named countable resources), grouped into
//!   partitions, hung off a switch tree (spine > leaf > node) and NVLink blocks; every node
//!   up, draining, down or unknown, and what is in use on it, device by device;
//! - jobs ([`job::JobSpec`]), each a gang of task groups (launcher + workers, master +
//!   workers, or the N tasks of a Slurm job) with per-task resources, optional tasks per node
//!   and node counts, an optional minimum count (elastic gangs), a time limit, an account and
//!   user, a partition, QOS, priority class, dependencies, and a topology requirement
//!   (per task: GPUs, cores and NICs from one NUMA domain, strict or preferred; per job: one
//!   leaf switch, one block, or at most N switches);
//! - a policy ([`policy::Policy`]): priority weights, the fair-share tree and its decay,
//!   billing weights, queues and quotas, backfill and preemption settings;
//! - events in time order ([`scheduler::Event`]): submissions, cancellations, holds, job
//!   ends, failed launches, lost tasks, node state changes, and after a controller restart
//!   the jobs restored from its store (running ones adopted with their allocations).
//!
//! **Decided** by [`scheduler::Scheduler::schedule`], each pass:
//! - which pending jobs start now, each with a full allocation ([`alloc::Allocation`]): for
//!   each task its node, cores, GPU devices (or a share of one), NICs and memory;
//! - which running jobs are preempted, and for which job;
//! - for the top blocked jobs, a reservation: the earliest time their gang fits and where;
//! - for every pending job, a Slurm-style reason, and on request the per-node why-not
//!   ([`scheduler::Scheduler::explain`]).
//!
//! **Must always hold** (property-tested over random clusters, jobs and event orders; see
//! [`scheduler::Scheduler::check_invariants`]):
//! - no core, GPU (beyond its whole) or NIC is ever in two allocations; allocations stay
//!   within node capacity and nothing new is booked on a node that is not up;
//! - no gang is ever partially started: every task group of a started job is placed whole
//!   (an elastic one at least at its minimum), in one decision;
//! - no quota is exceeded beyond what borrowing allows;
//! - a job started by backfill never delays a reservation made for a higher-priority job
//!   (assuming running jobs run to their time limits);
//! - the same cluster, policy, events and times give the same decisions, bit for bit.
//!
//! # Where things live
//! - [`cluster`], [`job`], [`resources`], [`alloc`], [`time`]: the model; [`ids`]: the
//!   indices of the cluster's tables, which every part of it names.
//! - [`config`]: the cluster description (versioned TOML); [`time`] also holds Slurm's
//!   duration syntax, its one parser and formatter;
//!   [`hostlist`]: Slurm hostlist expressions.
//! - [`policy`]: every knob, as versioned TOML; [`priority`]: multifactor priority;
//!   [`fairshare`]: the account tree, usage decay, Fair Tree and classic factors;
//!   [`quota`]: queues, cohorts, borrowing and lending, hard caps and per-user limits.
//! - [`placement`]: topology-aware placement of a gang on what is free;
//!   [`backfill`]: the time profile and reservations; [`scheduler`]: the state machine, the
//!   pass, preemption and explain.
//!
//! # Features
//! - `openapi`: `utoipa::ToSchema` on the types the REST API carries ([`job::JobSpec`] and
//!   everything in it, [`run::RunSpec`], [`job::JobState`], [`alloc::Allocation`],
//!   [`cluster::NodeAvail`], [`cluster::NodeState`], [`scheduler::PendingReason`],
//!   [`resources::Amounts`]), following their serde shapes.

pub mod alloc;
pub mod backfill;
pub mod cluster;
pub mod config;
pub mod fairshare;
pub mod hostlist;
pub mod ids;
pub mod job;
pub mod placement;
pub mod policy;
pub mod priority;
pub mod quota;
pub mod resources;
pub mod run;
pub mod scheduler;
pub mod time;

#[cfg(all(test, feature = "openapi"))]
mod openapi_tests;
