//! cadre's benchmarks, run as `cadre bench ...` (the `cadre` binary hands its `bench`
//! subcommand to [`run`]):
//! - [`scheduler`]: full scheduling passes on a large cluster with a deep queue;
//! - [`openb`]: GPU allocation rate on the Alibaba openb trace (the FGD paper's packing
//!   protocol);
//! - [`policy`]: a scheduling policy against the `slurm` preset on every load of
//!   docs/simulator.md's table, and the figures it loses;
//! - [`api`]: the controller measured from outside: durable submissions per second through
//!   the API, and submit-to-first-instruction latency on an idle cluster;
//! - [`agents`]: many simulated agents speaking the real protocol over TLS to one
//!   controller: its CPU and memory at the default heartbeat, the time to enrol nodes,
//!   false losses, and the time to find a lost node;
//! - [`vs_slurm`]: the same workloads on cadre and on the reference Slurm running on this
//!   machine, one after the other.
//!
//! The benchmarks that need a controller start the running executable (`cadre server`,
//! `cadre up --detach`) as their own processes, so that they measure it as users meet it.
//! Not here: anything a test asserts (figures are measured and reported, never asserted).

pub mod agents;
pub mod api;
pub mod failover;
pub mod openb;
pub mod policy;
pub mod scheduler;
pub mod vs_slurm;

use anyhow::Result;
use clap::Subcommand;
use std::process::ExitCode;

/// `cadre bench`'s subcommands.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Time full scheduling passes on a large cluster with a deep queue.
    Scheduler(scheduler::SchedulerBenchArgs),
    /// GPU allocation rate on the Alibaba openb trace (the FGD paper's packing protocol).
    Openb(openb::OpenbBenchArgs),
    /// A scheduling policy against the `slurm` preset (or another) on the 25 loads of
    /// docs/simulator.md's table (or 45 held-out ones): each figure over the reference's,
    /// and the figures lost.
    Policy(policy::PolicyBenchArgs),
    /// Durable submissions per second through the API from concurrent clients, and the
    /// controller's memory with the queue they leave.
    Submit(api::SubmitBenchArgs),
    /// Submit-to-first-instruction latency of jobs on an idle cluster.
    Launch(api::LaunchBenchArgs),
    /// Many simulated agents speaking the real protocol over TLS to one controller: its
    /// CPU and memory at the default heartbeat, the time to enrol nodes, false losses,
    /// and the time to find a lost node.
    Agents(agents::AgentsBenchArgs),
    /// Replicated controllers on PostgreSQL, the leader killed again and again under a
    /// deep queue and many simulated agents: the time to the first accepted submission and
    /// to the first job started, nodes and jobs lost, beside a single controller's restart.
    Failover(failover::FailoverBenchArgs),
    /// The same workloads on cadre and on the reference Slurm running on this machine, one
    /// after the other: submission throughput, submit-to-start latency, a Philly trace
    /// replay and the largest pending queue that still starts a job within 1 s.
    VsSlurm(vs_slurm::VsSlurmArgs),
}

/// Runs the benchmark `command` and prints its figures.
pub fn run(command: &BenchCommand) -> Result<ExitCode> {
    match command {
        BenchCommand::Scheduler(args) => scheduler::run_scheduler(args),
        BenchCommand::Openb(args) => openb::run_openb(args),
        BenchCommand::Policy(args) => policy::run_policy(args),
        BenchCommand::Submit(args) => api::run_submit(args),
        BenchCommand::Launch(args) => api::run_launch(args),
        BenchCommand::Agents(args) => agents::run_agents(args),
        BenchCommand::Failover(args) => failover::run_failover(args),
        BenchCommand::VsSlurm(args) => vs_slurm::run(args),
    }
}

/// A cluster description of nodes `names` (a hostlist, `n[1-3]`) of one tiny shape (1 core,
/// 256 MiB) in one partition `all`, named `name`: what simulated agents report exactly, and
/// what the tests that run real agents on hosts of their own describe.
pub fn tiny_cluster(name: &str, names: &str) -> String {
    format!(
        r#"version = 1
name = "{name}"

[[shape]]
name = "tiny"
cores = 1
memory = "256M"

[[nodes]]
names = "{names}"
shape = "tiny"

[[partition]]
name = "all"
nodes = "ALL"
"#
    )
}
