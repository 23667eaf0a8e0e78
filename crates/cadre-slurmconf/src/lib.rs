//! cadre-slurmconf: a Slurm site's `slurm.conf`, with `gres.conf` and `topology.conf`
//! beside it, read as a cadre cluster description ([`Cluster`]), so that a site can bring
//! its cluster over as it is described today (`cadre up --slurm-conf FILE`).
//!
//! Lives here: the three files' syntax (`syntax`), what each key means or why it is
//! ignored or refused (`keys`), and the mapping to cadre's cluster (`build`). Not here:
//! cadre's own TOML description (`cadre_core::config`), scheduling policy (Slurm's
//! priority, backfill and preemption parameters map to cadre's policy file, which a site
//! writes itself), and Slurm's commands.
//!
//! # What is read
//!
//! - `slurm.conf` (and the files it `Include`s): `ClusterName`, `GresTypes`,
//!   `TopologyPlugin`; `NodeName` lines (hostlists; `CPUs`/`Procs`, `Boards`,
//!   `SocketsPerBoard`, `Sockets`, `CoresPerSocket`, `ThreadsPerCore`, `RealMemory`,
//!   `Gres`, `Features`, `State`, `Reason`; `NodeName=DEFAULT`); `PartitionName` lines
//!   (`Nodes` with hostlists, node sets and `ALL`, `Default`, `MaxTime`, `DefaultTime`,
//!   `State`, `PriorityTier`, `PriorityJobFactor`, the older `Priority`;
//!   `PartitionName=DEFAULT`); `NodeSet` and `DownNodes` lines.
//! - `gres.conf` beside it, if it exists: `Name`, `Type`, `File`, `Count`, `Cores` (or the
//!   older `CPUs`), scoped by `NodeName`; `AutoDetect`, `Links` and `Flags` accepted.
//! - `topology.conf` beside it when `TopologyPlugin` is `topology/tree` (`SwitchName` with
//!   `Nodes` or `Switches`) or `topology/block` (`BlockName`, `BlockSizes`).
//!
//! Every other key is either in the explicit lists of the `keys` module (accepted and ignored,
//! accepted with a note saying where cadre sets the same thing, or refused with the
//! reason) or an error naming the file, line and key. The mapping decisions (CPUs as
//! Slurm counts them, one NUMA domain per socket, GPU placement from `Cores=`, untyped GPUs)
//! are documented in the `slurm_conf` and `build` modules; the user-facing reference is
//! `docs/slurm-conf.md`.

mod build;
mod error;
mod gres_conf;
mod keys;
mod slurm_conf;
mod syntax;
mod topology_conf;
mod values;

pub use error::{Item, Problem, SlurmConfError};
pub use syntax::{ConfFiles, DiskFiles};

use cadre_core::cluster::Cluster;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use topology_conf::Plugin;

/// A line of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub line: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// Something accepted that does not do in cadre what it does in Slurm: a key cadre sets
/// elsewhere, a partition state cadre approximates, a value it ignores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub at: Location,
    pub message: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// A Slurm configuration read as a cadre cluster.
#[derive(Clone, Debug)]
pub struct SlurmCluster {
    pub cluster: Cluster,
    /// What was accepted with a different or no effect, in file order.
    pub notes: Vec<Note>,
    /// Every file read: `slurm.conf`, what it includes, `gres.conf` and `topology.conf`.
    pub files: Vec<PathBuf>,
    origins: BTreeMap<String, Location>,
}

impl SlurmCluster {
    /// The NodeName line that describes a node.
    pub fn origin(&self, node: &str) -> Option<&Location> {
        self.origins.get(node)
    }
}

/// Reads `slurm.conf` at `path`, with `gres.conf` and `topology.conf` from its directory.
///
/// # Errors
///
/// A [`SlurmConfError`] naming the file and line at fault: unreadable files, syntax, unknown
/// or refused keys, bad values, and a description that is not consistent (see
/// [`Problem`]).
pub fn load(path: &Path) -> Result<SlurmCluster, SlurmConfError> {
    load_with(path, &DiskFiles)
}

/// [`load`], reading files through `files`.
///
/// # Errors
///
/// As [`load`].
pub fn load_with(path: &Path, files: &dyn ConfFiles) -> Result<SlurmCluster, SlurmConfError> {
    // A bare file name's directory is empty: the files beside it are bare names too.
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut notes = Vec::new();
    let mut reader = syntax::Reader::new(files, dir.clone());
    let lines = reader.read_file(path, false)?.unwrap_or_default();
    let conf = slurm_conf::read(&lines, &mut notes)?;

    let gres_path = dir.join("gres.conf");
    let gres = match reader.read_file(&gres_path, true)? {
        Some(lines) => gres_conf::read(&lines, &mut notes)?,
        None => gres_conf::GresConf::default(),
    };

    let topology_path = dir.join("topology.conf");
    let plugin = match &conf.topology_plugin {
        None => None,
        Some(p) => match p.value.trim().to_ascii_lowercase().as_str() {
            "topology/tree" => Some((Plugin::Tree, p)),
            "topology/block" => Some((Plugin::Block, p)),
            "topology/none" | "topology/default" | "topology/flat" | "" => None,
            _ => {
                return Err(p.at.error(Problem::RefusedValue {
                    item: Item::none(),
                    key: p.key.clone(),
                    value: p.value.clone(),
                    why: "cadre reads the topologies of topology/tree and topology/block",
                }));
            }
        },
    };
    let topology = match plugin {
        None => {
            if files.read(&topology_path).is_ok() {
                let at = conf.topology_plugin.as_ref().map_or_else(
                    || Location {
                        file: path.to_path_buf(),
                        line: 1,
                    },
                    |p| p.at.location(),
                );
                notes.push(Note {
                    at,
                    message: format!(
                        "{} is not read: TopologyPlugin is not topology/tree or topology/block",
                        topology_path.display()
                    ),
                });
            }
            None
        }
        Some((plugin, pair)) => match reader.read_file(&topology_path, true)? {
            Some(lines) => Some(topology_conf::read(&lines, plugin)?),
            None => {
                let yaml = dir.join("topology.yaml");
                let problem = if files.read(&yaml).is_ok() {
                    Problem::TopologyYaml {
                        plugin: pair.value.clone(),
                        path: topology_path.clone(),
                    }
                } else {
                    Problem::NoTopologyConf {
                        plugin: pair.value.clone(),
                        path: topology_path.clone(),
                    }
                };
                return Err(pair.at.error(problem));
            }
        },
    };

    let paths = build::Paths {
        slurm_conf: path.to_path_buf(),
        topology_conf: topology_path,
    };
    let built = build::build(&paths, conf, &gres, topology.as_ref())?;
    Ok(SlurmCluster {
        cluster: built.cluster,
        notes,
        files: reader.read,
        origins: built.origins,
    })
}

#[cfg(test)]
mod tests;
