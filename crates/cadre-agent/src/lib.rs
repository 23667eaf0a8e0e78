//! cadre-agent: the node agent's library part. What runs on every node, the `slurmd` and
//! `slurmstepd` role: find out what the node has, and run the tasks the controller places
//! on it exactly as their allocation says.
//!
//! Lives here:
//! - [`discovery`]: the node's hardware as a [`cadre_core::cluster::NodeShape`] (cores and
//!   NUMA domains from sysfs, memory from procfs, RDMA NICs, GPUs through NVML), with
//!   emulated GPUs on machines that have none, and a report of what was found.
//! - [`jobenv`]: what the controller tells the agent about a job ([`jobenv::JobLaunch`]),
//!   what the agent knows about its node ([`jobenv::LocalNode`]), and the environment a
//!   task sees (the Slurm job variables, `CUDA_VISIBLE_DEVICES`).
//! - [`pattern`]: Slurm's output file name patterns (`slurm-%j.out`).
//! - [`launch`]: starting one task: user switch, CPU pinning, working directory, output
//!   files, process group, optional cgroup; with [`run_as`] (the account a task runs as),
//!   [`launch_error`] (what goes wrong launching or supervising it) and `fork` (the lock
//!   around task forks), modules of their own since the others use them too.
//! - [`supervise`]: a running task's time limit, `--signal` before the end, cancellation,
//!   and its outcome as a [`cadre_core::job::JobState`].
//! - [`gang`]: starting all of a job's tasks on this node, or none.
//! - [`keeper`]: the process between the agent and each task, which keeps the task's exit
//!   status for a restarted agent and kills the task when the agent's lease runs out.
//! - [`cgroup`]: one cgroup v2 per task where the agent is given one, for out-of-memory
//!   detection.
//! - [`workload`]: a Kubernetes workload's contracts on this node: each task's program and
//!   variables, the job's hosts, MPI and Volcano files, and the bind mounts that put them
//!   where the programs look.
//! - [`rundir`]: a run's directory on the node and the job's files in it, made and
//!   mounted so that a root agent never acts on what a user could place or replace.
//! - [`service`]: the agent process ([`service::run`]): the connection to the controller
//!   and the agent protocol, launching and supervising each run in a thread of its own.
//!
//! Not here (yet): log shipping. Only [`service`] is async (tokio); the
//! rest is blocking: supervision is a state machine ([`supervise::Supervisor`]) driven by
//! the caller's clock readings, with blocking convenience loops on top.

pub mod cgroup;
pub mod claimdir;
pub mod container;
pub mod discovery;
pub mod enrol;
mod fork;
pub mod gang;
pub mod gpu;
pub mod health;
pub mod jobenv;
pub mod keeper;
pub mod launch;
pub mod launch_error;
pub mod mountns;
pub mod output;
pub mod pattern;
pub mod prolog;
pub mod run_as;
pub mod rundir;
pub mod service;
pub mod supervise;
mod trust;
pub mod workload;
