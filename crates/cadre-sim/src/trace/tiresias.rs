//! The Tiresias (NSDI'19) simulator's inputs: job traces
//! `job_id,num_gpu,submit_time,iterations,model_name,duration,interval` and cluster specs
//! `num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node`.
//!
//! Jobs: `submit_time` and `duration` are seconds; `num_gpu` becomes the gang
//! ([`super::rows::gpu_job`]); the name is `<model_name>-<job_id>`. The trace has no users
//! or teams: every job is user `tiresias` in account `tiresias`. `iterations` and
//! `interval` (the gap to the next submit) are not used.
//!
//! Cluster specs become a [`Cluster`] with a real switch tree: `num_switch` leaf switches
//! `leaf1..`, each over `num_node_p_switch` nodes, and a `spine` above them when there is
//! more than one. It is built from generated TOML through [`load_cluster`], so it gets
//! every check of a hand-written cluster description.

use super::rows::{self, RawJob};
use super::{ImportOptions, TraceError, TraceJob};
use cadre_core::cluster::Cluster;
use cadre_core::config::load_cluster;
use std::fmt::Write as _;
use std::path::Path;

pub(crate) const COLUMNS: [&str; 7] = [
    "job_id",
    "num_gpu",
    "submit_time",
    "iterations",
    "model_name",
    "duration",
    "interval",
];

pub(crate) const SPEC_COLUMNS: [&str; 5] = [
    "num_switch",
    "num_node_p_switch",
    "num_gpu_p_node",
    "num_cpu_p_node",
    "mem_p_node",
];

pub(crate) fn import(
    text: &str,
    origin: &str,
    opts: &ImportOptions,
) -> Result<Vec<TraceJob>, TraceError> {
    rows::check_options(opts, origin)?;
    let rows = rows::rows(text, origin, &COLUMNS)?;
    let mut jobs = Vec::with_capacity(rows.len());
    for row in &rows {
        let id = row.name(0)?;
        let gpus = row.positive_u32(1)?;
        let submit = row.u64(2)?;
        let model = row.name(4)?;
        let duration = row.duration(5)?;
        let spec = rows::gpu_job(
            format!("{model}-{id}"),
            "tiresias",
            "tiresias",
            gpus,
            duration,
            opts,
        );
        jobs.push(RawJob {
            submit,
            duration,
            spec,
        });
    }
    Ok(rows::finish(jobs))
}

/// The GPU model the nodes of a Tiresias spec get: the specs do not say, so a neutral name.
pub const TIRESIAS_GPU_MODEL: &str = "gpu";

/// The memory of one GPU of a Tiresias spec (16 GiB): the specs do not say either.
pub const TIRESIAS_GPU_MEMORY: &str = "16G";

/// The cluster of a Tiresias spec file (header plus one row). Nodes are `node001..` (at
/// least three digits), in one default partition `gpu` with no time limit; each node has
/// `num_cpu_p_node` cores, `mem_p_node` GiB of memory (the README says GB; cadre counts
/// binary units) and `num_gpu_p_node` GPUs of model [`TIRESIAS_GPU_MODEL`] with
/// [`TIRESIAS_GPU_MEMORY`] each, in one NUMA domain.
pub fn tiresias_cluster(text: &str, origin: &str) -> Result<Cluster, TraceError> {
    let rows = rows::rows(text, origin, &SPEC_COLUMNS)?;
    let row = match rows.as_slice() {
        [row] => row,
        _ => {
            return Err(TraceError::File {
                origin: origin.to_string(),
                what: format!(
                    "a cluster spec has exactly one row after the header, found {}",
                    rows.len()
                ),
            });
        }
    };
    let switches = row.positive_u32(0)?;
    let per_switch = row.positive_u32(1)?;
    let gpus = row.u64(2)?;
    let cpus = row.positive_u32(3)?;
    let mem_gib = row.positive_u32(4)?;
    let nodes = u64::from(switches) * u64::from(per_switch);
    if nodes > 1_000_000 {
        return Err(row.error(1, format_args!("{nodes} nodes in all is too many")));
    }
    let width = nodes.to_string().len().max(3);
    let name = |i: u64| format!("node{:0width$}", i);
    let range = |from: u64, to: u64| {
        if from == to {
            name(from)
        } else {
            format!("node[{:0width$}-{:0width$}]", from, to)
        }
    };

    let mut toml = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(toml, "version = 1\nname = \"tiresias\"\n");
    let _ = writeln!(
        toml,
        "[[shape]]\nname = \"tiresias\"\ncores = {cpus}\nmemory = \"{mem_gib}G\""
    );
    if gpus > 0 {
        let _ = writeln!(
            toml,
            "gpus = {gpus}\ngpu_model = \"{TIRESIAS_GPU_MODEL}\"\ngpu_memory = \"{TIRESIAS_GPU_MEMORY}\""
        );
    }
    let _ = writeln!(
        toml,
        "\n[[nodes]]\nnames = \"{}\"\nshape = \"tiresias\"",
        range(1, nodes)
    );
    let _ = writeln!(
        toml,
        "\n[[partition]]\nname = \"gpu\"\nnodes = \"ALL\"\ndefault = true"
    );
    for s in 0..u64::from(switches) {
        let first = s * u64::from(per_switch) + 1;
        let last = first + u64::from(per_switch) - 1;
        let _ = writeln!(
            toml,
            "\n[[switch]]\nname = \"leaf{}\"\nnodes = \"{}\"",
            s + 1,
            range(first, last)
        );
    }
    if switches > 1 {
        let _ = writeln!(
            toml,
            "\n[[switch]]\nname = \"spine\"\nswitches = \"leaf[1-{switches}]\""
        );
    }
    load_cluster(&toml, origin).map_err(|e| TraceError::File {
        origin: origin.to_string(),
        what: format!("the cluster spec does not make a cluster: {e}"),
    })
}

/// [`tiresias_cluster`] of a file.
pub fn tiresias_cluster_file(path: &Path) -> Result<Cluster, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Read {
        path: path.display().to_string(),
        source,
    })?;
    tiresias_cluster(&text, &path.display().to_string())
}
