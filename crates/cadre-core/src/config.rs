//! The cluster description: a versioned TOML file that says which nodes exist, what hardware
//! they have, how they are grouped into partitions and how they are wired (switch tree and
//! NVLink blocks). [`load_cluster`] turns it into a [`Cluster`].
//!
//! Lives here: the file format, its parsing and validation. Not here: Slurm's duration
//! syntax ([`crate::time::parse_slurm_duration`], which partition times go through), live state (node
//! usage, jobs), which the file never describes, and the scheduler's use of the topology.
//!
//! The full reference with examples is `docs/cluster.md` at the repository root; example
//! files are in `examples/clusters/`. In brief:
//!
//! ```toml
//! version = 1                  # required; other versions are rejected
//! name = "example"
//!
//! [[shape]]                    # the hardware of a kind of node
//! name = "hgx"
//! cores = 112
//! memory = "2T"                # MiB as an integer, or "512G", "1T", "2048M"
//! numa = 2                     # shorthand: cores, gpus and nics split evenly over 2 domains
//! gpus = 8
//! gpu_model = "h100"
//! gpu_memory = "80G"
//! nics = 4                     # a count (named mlx5_0..) or a list of names
//! gres = { nvme = 4 }          # named countable resources
//!
//! [[shape]]                    # the same with the domains written out
//! name = "hgx-explicit"
//! cores = 112
//! memory = "2T"
//! gpu_model = "h100"
//! gpu_memory = "80G"
//! [[shape.numa]]
//! cores = "0-55"               # a count, a list [0, 1, 2] or a cpulist string
//! gpus = "0-3"                 # device indices: a count, a list or a range string
//! nics = ["mlx5_0", "mlx5_1"]
//! [[shape.numa]]
//! cores = 56                   # a count continues after the highest core so far
//! gpus = 4
//! nics = ["mlx5_2", "mlx5_3"]
//!
//! [[nodes]]                    # a node group
//! names = "gpu[001-064]"       # a Slurm hostlist expression
//! shape = "hgx"
//! features = ["h100", "ib"]
//! labels = { rack = "r1" }
//! state = "up"                 # up (default), drain, down or unknown
//!
//! [[partition]]
//! name = "gpu"
//! nodes = "ALL"                # a hostlist, or ALL
//! default = true
//! max_time = "2-00:00:00"      # Slurm time syntax; UNLIMITED (default) for no limit
//!
//! [[switch]]                   # Slurm topology.conf: a leaf lists nodes ...
//! name = "leaf1"
//! nodes = "gpu[001-032]"
//! [[switch]]                   # ... an upper switch lists switches
//! name = "spine"
//! switches = "leaf[1-2]"
//!
//! [[block]]                    # Slurm topology/block base blocks
//! name = "nvl1"
//! nodes = "gpu[001-032]"
//! # block_sizes = [32, 64]     (a top-level key, before the first table)
//! ```
//!
//! Must hold after loading (checked here, reported with the file, line and item): every node
//! is in exactly one node group; partitions, switches and blocks name only defined nodes; at
//! most one partition is the default; the NUMA domains of a shape partition its cores, GPUs
//! and NICs (every core in exactly one domain, no GPU index or NIC in two); the switches form
//! a forest (no cycles, no node under two leaves, no switch under two parents); no node is in
//! two blocks; `block_sizes` grow by powers of two.

use crate::cluster::{
    Block, BlockId, Cluster, GpuDevice, NicDevice, Node, NodeAvail, NodeId, NodeShape, NumaDomain,
    Partition, ShapeId, Switch, SwitchId,
};
use crate::hostlist::{self, HostlistError};
use crate::time::{Dur, DurationError, parse_slurm_duration};
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The version of the cluster description format this code reads.
pub const CLUSTER_CONFIG_VERSION: i64 = 1;

/// A place in the cluster description, counted from 1 (columns in characters).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl Position {
    fn of(text: &str, offset: usize) -> Position {
        let offset = offset.min(text.len());
        let before = text.get(..offset).unwrap_or(text);
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Position {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }
}

/// Formats an optional position as `:line:column` after the origin.
struct At(Option<Position>);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(p) => write!(f, ":{}:{}", p.line, p.column),
            None => Ok(()),
        }
    }
}

/// Why a cluster description could not be loaded. Every variant names the file (`origin`)
/// and, where the TOML parser or the item's span tells it, the line and column.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to read cluster description {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key, a wrong type or a malformed value (memory size, core
    /// list).
    #[error("{origin}{}: {message}", At(*at))]
    Toml {
        origin: String,
        at: Option<Position>,
        message: String,
    },
    #[error(
        "{origin}: missing `version = {CLUSTER_CONFIG_VERSION}` (every cluster description \
         starts with the version of its format)"
    )]
    MissingVersion { origin: String },
    #[error(
        "{origin}{}: unsupported version {found}; this cadre reads cluster descriptions of \
         version {CLUSTER_CONFIG_VERSION}",
        At(*at)
    )]
    UnsupportedVersion {
        origin: String,
        at: Option<Position>,
        found: String,
    },
    /// The file parsed but does not describe a consistent cluster.
    #[error("{origin}{}: {problem}", At(*at))]
    Invalid {
        origin: String,
        at: Option<Position>,
        problem: Box<ClusterProblem>,
    },
}

/// What is inconsistent in a cluster description that parsed. Items are named as
/// `shape "dgx"`, `node group 2` (counted from 1 in file order), `partition "gpu"`,
/// `switch "leaf1"`, `block "nvl1"`; NUMA domains are counted from 0 as Linux numbers them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterProblem {
    #[error("the cluster name is empty")]
    EmptyClusterName,
    #[error("{item}: the name is empty")]
    EmptyName { item: String },
    #[error("{item}: name `{name}` may not contain `,`, brackets or whitespace")]
    BadName { item: String, name: String },
    #[error("duplicate {kind} name \"{name}\"")]
    DuplicateName { kind: &'static str, name: String },
    #[error("{item}: {error}")]
    Hostlist { item: String, error: HostlistError },
    #[error("{item} lists no {what}")]
    EmptyList { item: String, what: &'static str },

    #[error("shape \"{shape}\": cores must be positive")]
    ZeroCores { shape: String },
    #[error("shape \"{shape}\": numa must be at least 1")]
    ZeroNuma { shape: String },
    #[error("shape \"{shape}\": {numa} numa domains but only {cores} cores")]
    TooManyNuma {
        shape: String,
        numa: u32,
        cores: u32,
    },
    #[error(
        "shape \"{shape}\": `{key}` goes into each [[shape.numa]] when the numa domains are \
         listed"
    )]
    DeviceKeyOutsideDomains { shape: String, key: &'static str },
    #[error(
        "shape \"{shape}\": numa domain {domain} lists core {core} but the shape has {cores} cores"
    )]
    CoreOutOfRange {
        shape: String,
        domain: usize,
        core: u32,
        cores: u32,
    },
    #[error(
        "shape \"{shape}\": core {core} is in numa domain {first} and again in numa domain {second}"
    )]
    CoreOverlap {
        shape: String,
        core: u32,
        first: usize,
        second: usize,
    },
    #[error("shape \"{shape}\": cores {cores} are in no numa domain")]
    CoresUncovered { shape: String, cores: String },
    #[error(
        "shape \"{shape}\": gpu index {index} is in numa domain {first} and again in numa domain \
         {second}"
    )]
    GpuOverlap {
        shape: String,
        index: u32,
        first: usize,
        second: usize,
    },
    #[error(
        "shape \"{shape}\": nic \"{nic}\" is in numa domain {first} and again in numa domain {second}"
    )]
    NicOverlap {
        shape: String,
        nic: String,
        first: usize,
        second: usize,
    },
    #[error(
        "shape \"{shape}\": the numa domains have {sum} MiB of memory, more than the shape's {memory} MiB"
    )]
    NumaMemoryTooLarge {
        shape: String,
        sum: u64,
        memory: u64,
    },
    #[error("shape \"{shape}\": gpus need `{key}` (on the shape or in their numa domain)")]
    MissingGpuKey { shape: String, key: &'static str },
    #[error("shape \"{shape}\": `{key}` is given but the shape has no gpus")]
    GpuKeyWithoutGpus { shape: String, key: &'static str },
    #[error("shape \"{shape}\": gres \"{name}\" must have a positive count")]
    ZeroGres { shape: String, name: String },
    #[error("shape \"{shape}\": gres \"gpu\" is not allowed; gpus are described by `gpus`")]
    GresGpu { shape: String },

    #[error("no node group defined; add a [[nodes]] section")]
    NoNodes,
    #[error("node group {group}: shape \"{shape}\" is not defined")]
    UnknownShape { group: usize, shape: String },
    #[error("duplicate node name \"{node}\" (node groups {first} and {second})")]
    DuplicateNode {
        node: String,
        first: usize,
        second: usize,
    },
    #[error(
        "node group {group}: feature `{feature}` may only contain letters, digits, `_`, `-`, `.` and `:`"
    )]
    BadFeature { group: usize, feature: String },
    #[error("node group {group}: label names must not be empty")]
    EmptyLabel { group: usize },
    #[error("node group {group}: a reason is given but the state is up")]
    ReasonWhileUp { group: usize },

    #[error("no partition defined; add a [[partition]] section")]
    NoPartitions,
    #[error("{item}: node \"{node}\" is not defined")]
    UnknownNode { item: String, node: String },
    #[error("{item} lists node \"{node}\" twice")]
    NodeTwice { item: String, node: String },
    #[error("partitions \"{first}\" and \"{second}\" are both marked default; at most one may be")]
    TwoDefaults { first: String, second: String },
    #[error("partition \"{partition}\": {key}: {error}")]
    BadTime {
        partition: String,
        key: &'static str,
        error: DurationError,
    },
    #[error("partition \"{partition}\": {key} must be positive (write \"UNLIMITED\" for no limit)")]
    ZeroTime {
        partition: String,
        key: &'static str,
    },
    #[error(
        "partition \"{partition}\": default_time {default_time} is longer than max_time {max_time}"
    )]
    DefaultAboveMax {
        partition: String,
        default_time: Dur,
        max_time: Dur,
    },

    #[error(
        "switch \"{switch}\": give either `nodes` (a leaf switch) or `switches` (an upper \
         switch), not both"
    )]
    SwitchBoth { switch: String },
    #[error("switch \"{switch}\": give `nodes` (a leaf switch) or `switches` (an upper switch)")]
    SwitchNeither { switch: String },
    #[error("{item}: switch \"{switch}\" is not defined")]
    UnknownSwitch { item: String, switch: String },
    #[error("switch \"{switch}\" and switch \"{other}\" both list node \"{node}\"")]
    NodeUnderTwoLeaves {
        switch: String,
        other: String,
        node: String,
    },
    #[error("switch \"{switch}\" and switch \"{other}\" both list switch \"{child}\"")]
    SwitchUnderTwoParents {
        switch: String,
        other: String,
        child: String,
    },
    #[error(
        "node \"{node}\" (node group {group}) is under no leaf switch; when switches are \
         given, every node must hang off one"
    )]
    NodeUnderNoLeaf { node: String, group: usize },
    #[error("switches form a cycle: {path}")]
    SwitchCycle { path: String },

    #[error("block \"{block}\" and block \"{other}\" both list node \"{node}\"")]
    NodeInTwoBlocks {
        block: String,
        other: String,
        node: String,
    },
    #[error("block_sizes is given but no [[block]] is defined")]
    BlockSizesWithoutBlocks,
    #[error("block_sizes {sizes:?}: {why}")]
    BadBlockSizes { sizes: Vec<u32>, why: &'static str },
}

/// Reads and loads a cluster description file; errors name the file by its path.
///
/// # Errors
///
/// [`ConfigError::Read`] if the file cannot be read, otherwise as [`load_cluster`].
pub fn load_cluster_file(path: &Path) -> Result<Cluster, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    load_cluster(&text, &path.display().to_string())
}

/// Loads a cluster description from its text. `origin` names it in errors (a path, or
/// something like `<inline>`).
///
/// Nodes are numbered in file order (node groups in order, each group's names in the order
/// its hostlist expands to); shapes, partitions, switches and blocks in file order.
///
/// # Errors
///
/// A [`ConfigError`] naming `origin`, with the line and column where known: TOML syntax,
/// unknown keys and wrong types ([`ConfigError::Toml`]), a missing or other version, and
/// inconsistencies ([`ConfigError::Invalid`] with a [`ClusterProblem`]).
pub fn load_cluster(text: &str, origin: &str) -> Result<Cluster, ConfigError> {
    let toml_error = |e: toml::de::Error| ConfigError::Toml {
        origin: origin.to_string(),
        at: e.span().map(|s| Position::of(text, s.start)),
        message: e.message().trim_end().to_string(),
    };
    // The version first, so that a file of another version fails on its version rather than
    // on keys this version does not know.
    let table: toml::Table = toml::from_str(text).map_err(toml_error)?;
    match table.get("version") {
        None => {
            return Err(ConfigError::MissingVersion {
                origin: origin.to_string(),
            });
        }
        Some(toml::Value::Integer(CLUSTER_CONFIG_VERSION)) => {}
        Some(other) => {
            let at = toml::from_str::<VersionOnly>(text)
                .ok()
                .map(|v| Position::of(text, v.version.span().start));
            return Err(ConfigError::UnsupportedVersion {
                origin: origin.to_string(),
                at,
                found: other.to_string(),
            });
        }
    }
    let raw: RawCluster = toml::from_str(text).map_err(toml_error)?;
    build(raw).map_err(|(span, problem)| ConfigError::Invalid {
        origin: origin.to_string(),
        at: span.map(|s| Position::of(text, s.start)),
        problem: Box::new(problem),
    })
}

#[derive(Deserialize)]
struct VersionOnly {
    version: Spanned<toml::Value>,
}

// ---------------------------------------------------------------------------------------
// The file as written.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    #[allow(dead_code)] // checked before the full parse
    version: i64,
    name: String,
    block_sizes: Option<Spanned<Vec<u32>>>,
    #[serde(default)]
    shape: Vec<RawShape>,
    #[serde(default)]
    nodes: Vec<RawNodeGroup>,
    #[serde(default)]
    partition: Vec<RawPartition>,
    #[serde(default)]
    switch: Vec<RawSwitch>,
    #[serde(default)]
    block: Vec<RawBlock>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShape {
    name: Spanned<String>,
    cores: u32,
    memory: Memory,
    numa: Option<RawNuma>,
    gpus: Option<u32>,
    gpu_model: Option<String>,
    gpu_memory: Option<Memory>,
    nics: Option<RawNics>,
    #[serde(default)]
    gres: BTreeMap<String, u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNumaDomain {
    cores: IdList,
    memory: Option<Memory>,
    gpus: Option<IdList>,
    gpu_model: Option<String>,
    gpu_memory: Option<Memory>,
    nics: Option<RawNics>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum RawNodeState {
    Up,
    Drain,
    Down,
    Unknown,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNodeGroup {
    names: Spanned<String>,
    shape: Spanned<String>,
    #[serde(default)]
    features: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    state: Option<RawNodeState>,
    reason: Option<String>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum RawPartitionState {
    Up,
    Down,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPartition {
    name: Spanned<String>,
    nodes: Spanned<String>,
    #[serde(default)]
    default: bool,
    priority_tier: Option<u32>,
    priority_job_factor: Option<u32>,
    max_time: Option<Spanned<String>>,
    default_time: Option<Spanned<String>>,
    state: Option<RawPartitionState>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSwitch {
    name: Spanned<String>,
    nodes: Option<Spanned<String>>,
    switches: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBlock {
    name: Spanned<String>,
    nodes: Spanned<String>,
}

/// A memory size in MiB: an integer (MiB) or a string with a binary unit.
#[derive(Clone, Copy)]
struct Memory(u64);

/// Parses `"512G"`, `"1T"`, `"2048M"`, `"80Gi"`, `"4 GiB"` or `"1024"` (MiB) into MiB.
fn parse_memory_mib(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "invalid memory size `{s}`: expected a whole number and a unit (M, G, T or P)"
        ));
    }
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "m" | "mi" | "mib" => 0,
        "g" | "gi" | "gib" => 10,
        "t" | "ti" | "tib" => 20,
        "p" | "pi" | "pib" => 30,
        _ => {
            return Err(format!(
                "invalid memory size `{s}`: unknown unit `{}` (use M, G, T or P, binary)",
                unit.trim()
            ));
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid memory size `{s}`: too large"))?;
    let mib = n
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("invalid memory size `{s}`: too large"))?;
    if mib == 0 {
        return Err(format!("invalid memory size `{s}`: must be positive"));
    }
    Ok(mib)
}

impl<'de> Deserialize<'de> for Memory {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Memory, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Memory;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a memory size: MiB as an integer, or a string such as \"512G\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Memory, E> {
                match u64::try_from(v) {
                    Ok(m) if m > 0 => Ok(Memory(m)),
                    _ => Err(E::custom(format!(
                        "invalid memory size {v}: must be positive"
                    ))),
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Memory, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(-1))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Memory, E> {
                parse_memory_mib(v).map(Memory).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Cores or GPU indices of a NUMA domain: a count (continuing after the highest so far), a
/// list of ids, or a cpulist string (`"0-31,64-95"`).
#[derive(Clone)]
enum IdList {
    Count(u32),
    Ids(Vec<u32>),
}

/// Parses a Linux cpulist (`"0-31,64-95"`, `"3"`).
fn parse_id_ranges(s: &str) -> Result<Vec<u32>, String> {
    let mut ids = Vec::new();
    for part in s.split(',').map(str::trim) {
        let bad = || format!("invalid id list `{s}`: expected ranges such as \"0-31,64-95\"");
        let num = |x: &str| x.trim().parse::<u32>().map_err(|_| bad());
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (num(lo)?, num(hi)?);
                if lo > hi {
                    return Err(format!("invalid id list `{s}`: descending range `{part}`"));
                }
                if hi - lo >= 1 << 20 {
                    return Err(format!(
                        "invalid id list `{s}`: range `{part}` is too large"
                    ));
                }
                ids.extend(lo..=hi);
            }
            None => ids.push(num(part)?),
        }
    }
    Ok(ids)
}

impl<'de> Deserialize<'de> for IdList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<IdList, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IdList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a count, a list of ids, or a range string such as \"0-31\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IdList, E> {
                u32::try_from(v)
                    .map(IdList::Count)
                    .map_err(|_| E::custom(format!("invalid count {v}")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IdList, E> {
                u32::try_from(v)
                    .map(IdList::Count)
                    .map_err(|_| E::custom(format!("invalid count {v}")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IdList, E> {
                parse_id_ranges(v).map(IdList::Ids).map_err(E::custom)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IdList, A::Error> {
                let mut ids = Vec::new();
                while let Some(id) = seq.next_element::<u32>()? {
                    ids.push(id);
                }
                Ok(IdList::Ids(ids))
            }
        }
        d.deserialize_any(V)
    }
}

/// A count, or a list of items: NICs (a count, named `mlx5_<n>`, or device names) and NUMA
/// domains (`numa = 2` for a uniform split, or `[[shape.numa]]` tables).
#[derive(Clone)]
enum CountOr<T> {
    Count(u32),
    List(Vec<T>),
}

type RawNics = CountOr<String>;
type RawNuma = CountOr<RawNumaDomain>;

impl<'de, T: Deserialize<'de>> Deserialize<'de> for CountOr<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CountOr<T>, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = CountOr<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a count or a list")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<CountOr<T>, E> {
                u32::try_from(v)
                    .map(CountOr::Count)
                    .map_err(|_| E::custom(format!("invalid count {v}")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<CountOr<T>, E> {
                u32::try_from(v)
                    .map(CountOr::Count)
                    .map_err(|_| E::custom(format!("invalid count {v}")))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<CountOr<T>, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<T>()? {
                    items.push(item);
                }
                Ok(CountOr::List(items))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

// ---------------------------------------------------------------------------------------
// From the file to the cluster.

type Fail = (Option<Range<usize>>, ClusterProblem);

fn at<T>(s: &Spanned<T>) -> Option<Range<usize>> {
    Some(s.span())
}

fn check_name(item: impl Fn() -> String, name: &Spanned<String>) -> Result<(), Fail> {
    let n = name.get_ref();
    if n.is_empty() {
        return Err((at(name), ClusterProblem::EmptyName { item: item() }));
    }
    if n.contains(|c: char| c == ',' || c == '[' || c == ']' || c.is_whitespace()) {
        return Err((
            at(name),
            ClusterProblem::BadName {
                item: item(),
                name: n.clone(),
            },
        ));
    }
    Ok(())
}

fn expand(item: impl Fn() -> String, expr: &Spanned<String>) -> Result<Vec<String>, Fail> {
    hostlist::expand(expr.get_ref()).map_err(|error| {
        (
            at(expr),
            ClusterProblem::Hostlist {
                item: item(),
                error,
            },
        )
    })
}

fn build(raw: RawCluster) -> Result<Cluster, Fail> {
    if raw.name.trim().is_empty() {
        return Err((None, ClusterProblem::EmptyClusterName));
    }

    // Shapes.
    let mut shapes = Vec::with_capacity(raw.shape.len());
    let mut shape_ids = BTreeMap::new();
    for (i, s) in raw.shape.iter().enumerate() {
        check_name(|| format!("shape {}", i + 1), &s.name)?;
        let id = ShapeId(u16::try_from(i).unwrap_or(u16::MAX));
        if shape_ids.insert(s.name.get_ref().clone(), id).is_some() {
            return Err((
                at(&s.name),
                ClusterProblem::DuplicateName {
                    kind: "shape",
                    name: s.name.get_ref().clone(),
                },
            ));
        }
        shapes.push(build_shape(s).map_err(|p| (at(&s.name), p))?);
    }

    // Nodes.
    if raw.nodes.is_empty() {
        return Err((None, ClusterProblem::NoNodes));
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut node_ids: BTreeMap<String, (NodeId, usize)> = BTreeMap::new();
    for (g, group) in raw.nodes.iter().enumerate() {
        let gno = g + 1;
        let item = || format!("node group {gno}");
        let names = expand(item, &group.names)?;
        if names.is_empty() {
            return Err((
                at(&group.names),
                ClusterProblem::EmptyList {
                    item: item(),
                    what: "nodes",
                },
            ));
        }
        let Some(&shape_id) = shape_ids.get(group.shape.get_ref()) else {
            return Err((
                at(&group.shape),
                ClusterProblem::UnknownShape {
                    group: gno,
                    shape: group.shape.get_ref().clone(),
                },
            ));
        };
        for f in &group.features {
            let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':');
            if f.is_empty() || !f.chars().all(ok) {
                return Err((
                    at(&group.names),
                    ClusterProblem::BadFeature {
                        group: gno,
                        feature: f.clone(),
                    },
                ));
            }
        }
        if group.labels.keys().any(String::is_empty) {
            return Err((at(&group.names), ClusterProblem::EmptyLabel { group: gno }));
        }
        let avail = match group.state.unwrap_or(RawNodeState::Up) {
            RawNodeState::Up => NodeAvail::Up,
            RawNodeState::Drain => NodeAvail::Drain,
            RawNodeState::Down => NodeAvail::Down,
            RawNodeState::Unknown => NodeAvail::Unknown,
        };
        if avail == NodeAvail::Up && group.reason.is_some() {
            return Err((
                at(&group.names),
                ClusterProblem::ReasonWhileUp { group: gno },
            ));
        }
        let shape = &shapes[usize::from(shape_id.0)];
        for name in names {
            let id = NodeId(u32::try_from(nodes.len()).unwrap_or(u32::MAX));
            if let Some(&(_, first)) = node_ids.get(&name) {
                let problem = if first == gno {
                    ClusterProblem::NodeTwice {
                        item: item(),
                        node: name,
                    }
                } else {
                    ClusterProblem::DuplicateNode {
                        node: name,
                        first,
                        second: gno,
                    }
                };
                return Err((at(&group.names), problem));
            }
            node_ids.insert(name.clone(), (id, gno));
            let mut node = Node::new(name, shape_id, shape);
            node.features = group.features.clone();
            node.labels = group.labels.clone();
            node.avail = avail;
            node.reason = group.reason.clone();
            nodes.push(node);
        }
    }
    let lookup = |item: &dyn Fn() -> String,
                  expr: &Spanned<String>,
                  names: Vec<String>|
     -> Result<Vec<NodeId>, Fail> {
        let mut seen = BTreeSet::new();
        let mut ids = Vec::with_capacity(names.len());
        for name in names {
            let Some(&(id, _)) = node_ids.get(&name) else {
                return Err((
                    at(expr),
                    ClusterProblem::UnknownNode {
                        item: item(),
                        node: name,
                    },
                ));
            };
            if !seen.insert(id) {
                return Err((
                    at(expr),
                    ClusterProblem::NodeTwice {
                        item: item(),
                        node: name,
                    },
                ));
            }
            ids.push(id);
        }
        Ok(ids)
    };

    // Partitions.
    if raw.partition.is_empty() {
        return Err((None, ClusterProblem::NoPartitions));
    }
    let mut partitions: Vec<Partition> = Vec::with_capacity(raw.partition.len());
    for (i, p) in raw.partition.iter().enumerate() {
        check_name(|| format!("partition {}", i + 1), &p.name)?;
        let name = p.name.get_ref().clone();
        if partitions.iter().any(|q| q.name == name) {
            return Err((
                at(&p.name),
                ClusterProblem::DuplicateName {
                    kind: "partition",
                    name,
                },
            ));
        }
        let item = || format!("partition \"{name}\"");
        let members = if p.nodes.get_ref().trim() == "ALL" {
            (0..nodes.len()).map(|n| NodeId(n as u32)).collect()
        } else {
            let names = expand(item, &p.nodes)?;
            lookup(&item, &p.nodes, names)?
        };
        if members.is_empty() {
            return Err((
                at(&p.nodes),
                ClusterProblem::EmptyList {
                    item: item(),
                    what: "nodes",
                },
            ));
        }
        if p.default {
            if let Some(first) = partitions.iter().find(|q| q.default) {
                return Err((
                    at(&p.name),
                    ClusterProblem::TwoDefaults {
                        first: first.name.clone(),
                        second: name,
                    },
                ));
            }
        }
        let time = |key: &'static str, value: &Option<Spanned<String>>| match value {
            None => Ok(None),
            // Spaces around the value are the file's, not the duration's.
            Some(v) => match parse_slurm_duration(v.get_ref().trim()) {
                Ok(Some(Dur(0))) => Err((
                    at(v),
                    ClusterProblem::ZeroTime {
                        partition: name.clone(),
                        key,
                    },
                )),
                Ok(d) => Ok(d),
                Err(error) => Err((
                    at(v),
                    ClusterProblem::BadTime {
                        partition: name.clone(),
                        key,
                        error,
                    },
                )),
            },
        };
        let max_time = time("max_time", &p.max_time)?;
        let default_time = time("default_time", &p.default_time)?;
        if let (Some(d), Some(m)) = (default_time, max_time) {
            if d > m {
                return Err((
                    p.default_time.as_ref().and_then(at),
                    ClusterProblem::DefaultAboveMax {
                        partition: name,
                        default_time: d,
                        max_time: m,
                    },
                ));
            }
        }
        partitions.push(Partition {
            name,
            nodes: members,
            default: p.default,
            priority_tier: p.priority_tier.unwrap_or(1),
            priority_job_factor: p.priority_job_factor.unwrap_or(1),
            max_time,
            default_time,
            up: p.state.unwrap_or(RawPartitionState::Up) == RawPartitionState::Up,
        });
    }

    let switches = build_switches(&raw.switch, &mut nodes, &lookup)?;
    // Slurm's topology.conf: "All nodes in the network must be connected to at least one
    // switch"; a node outside the tree could never share a job with the others.
    if !switches.is_empty() {
        if let Some(n) = nodes.iter().find(|n| n.leaf.is_none()) {
            let group = node_ids.get(&n.name).map_or(0, |&(_, g)| g);
            return Err((
                raw.nodes.get(group.wrapping_sub(1)).map(|g| g.names.span()),
                ClusterProblem::NodeUnderNoLeaf {
                    node: n.name.clone(),
                    group,
                },
            ));
        }
    }
    let blocks = build_blocks(&raw.block, &mut nodes, &lookup)?;
    let block_sizes = raw
        .block_sizes
        .as_ref()
        .map(|s| s.get_ref().clone())
        .unwrap_or_default();
    check_block_sizes(&block_sizes, !blocks.is_empty())
        .map_err(|p| (raw.block_sizes.as_ref().and_then(at), p))?;

    Ok(Cluster::from_parts(
        raw.name,
        shapes,
        nodes,
        partitions,
        switches,
        blocks,
        block_sizes,
    ))
}

type Lookup<'a> =
    dyn Fn(&dyn Fn() -> String, &Spanned<String>, Vec<String>) -> Result<Vec<NodeId>, Fail> + 'a;

fn build_switches(
    raw: &[RawSwitch],
    nodes: &mut [Node],
    lookup: &Lookup<'_>,
) -> Result<Vec<Switch>, Fail> {
    let mut ids: BTreeMap<&str, SwitchId> = BTreeMap::new();
    for (i, s) in raw.iter().enumerate() {
        check_name(|| format!("switch {}", i + 1), &s.name)?;
        let id = SwitchId(u32::try_from(i).unwrap_or(u32::MAX));
        if ids.insert(s.name.get_ref(), id).is_some() {
            return Err((
                at(&s.name),
                ClusterProblem::DuplicateName {
                    kind: "switch",
                    name: s.name.get_ref().clone(),
                },
            ));
        }
    }
    let mut switches: Vec<Switch> = raw
        .iter()
        .map(|s| Switch {
            name: s.name.get_ref().clone(),
            parent: None,
            level: 0,
            children: Vec::new(),
            nodes: Vec::new(),
        })
        .collect();
    for (i, s) in raw.iter().enumerate() {
        let name = s.name.get_ref();
        let item = || format!("switch \"{name}\"");
        match (&s.nodes, &s.switches) {
            (Some(_), Some(_)) => {
                return Err((
                    at(&s.name),
                    ClusterProblem::SwitchBoth {
                        switch: name.clone(),
                    },
                ));
            }
            (None, None) => {
                return Err((
                    at(&s.name),
                    ClusterProblem::SwitchNeither {
                        switch: name.clone(),
                    },
                ));
            }
            (Some(expr), None) => {
                let names = expand(item, expr)?;
                if names.is_empty() {
                    return Err((
                        at(expr),
                        ClusterProblem::EmptyList {
                            item: item(),
                            what: "nodes",
                        },
                    ));
                }
                let members = lookup(&item, expr, names)?;
                for &n in &members {
                    let node = &mut nodes[n.0 as usize];
                    if let Some(other) = node.leaf {
                        return Err((
                            at(expr),
                            ClusterProblem::NodeUnderTwoLeaves {
                                switch: name.clone(),
                                other: switches[other.0 as usize].name.clone(),
                                node: node.name.clone(),
                            },
                        ));
                    }
                    node.leaf = Some(SwitchId(i as u32));
                }
                switches[i].nodes = members;
            }
            (None, Some(expr)) => {
                let names = expand(item, expr)?;
                if names.is_empty() {
                    return Err((
                        at(expr),
                        ClusterProblem::EmptyList {
                            item: item(),
                            what: "switches",
                        },
                    ));
                }
                for child_name in names {
                    let Some(&child) = ids.get(child_name.as_str()) else {
                        return Err((
                            at(expr),
                            ClusterProblem::UnknownSwitch {
                                item: item(),
                                switch: child_name,
                            },
                        ));
                    };
                    let c = child.0 as usize;
                    if let Some(other) = switches[c].parent {
                        return Err((
                            at(expr),
                            ClusterProblem::SwitchUnderTwoParents {
                                switch: name.clone(),
                                other: switches[other.0 as usize].name.clone(),
                                child: child_name,
                            },
                        ));
                    }
                    switches[c].parent = Some(SwitchId(i as u32));
                    switches[i].children.push(child);
                }
            }
        }
    }
    // Levels bottom-up: a switch's level is one more than its highest child's, so it is set
    // once all children are. Switches never reached are on (or above) a cycle.
    let n = switches.len();
    let mut pending: Vec<usize> = switches.iter().map(|s| s.children.len()).collect();
    let mut done = vec![false; n];
    let mut ready: Vec<usize> = (0..n).filter(|&s| pending[s] == 0).collect();
    while let Some(s) = ready.pop() {
        done[s] = true;
        let level = switches[s]
            .children
            .iter()
            .map(|c| switches[c.0 as usize].level + 1)
            .max()
            .unwrap_or(0);
        switches[s].level = level;
        if let Some(p) = switches[s].parent {
            let p = p.0 as usize;
            pending[p] -= 1;
            if pending[p] == 0 {
                ready.push(p);
            }
        }
    }
    if let Some(start) = (0..n).find(|&s| !done[s]) {
        // Every switch not done has a child not done; walking down such children must
        // repeat a switch, and the walk from its first visit is the cycle.
        let mut path = vec![start];
        let mut s = start;
        loop {
            let next = switches[s]
                .children
                .iter()
                .map(|c| c.0 as usize)
                .find(|&c| !done[c])
                .unwrap_or(start);
            if let Some(pos) = path.iter().position(|&p| p == next) {
                let mut cycle: Vec<&str> = path[pos..]
                    .iter()
                    .map(|&p| switches[p].name.as_str())
                    .collect();
                cycle.push(&switches[next].name);
                return Err((
                    at(&raw[next].name),
                    ClusterProblem::SwitchCycle {
                        path: cycle.join(" -> "),
                    },
                ));
            }
            path.push(next);
            s = next;
        }
    }
    Ok(switches)
}

fn build_blocks(
    raw: &[RawBlock],
    nodes: &mut [Node],
    lookup: &Lookup<'_>,
) -> Result<Vec<Block>, Fail> {
    let mut blocks: Vec<Block> = Vec::with_capacity(raw.len());
    for (i, b) in raw.iter().enumerate() {
        check_name(|| format!("block {}", i + 1), &b.name)?;
        let name = b.name.get_ref();
        if blocks.iter().any(|x| &x.name == name) {
            return Err((
                at(&b.name),
                ClusterProblem::DuplicateName {
                    kind: "block",
                    name: name.clone(),
                },
            ));
        }
        let item = || format!("block \"{name}\"");
        let names = expand(item, &b.nodes)?;
        if names.is_empty() {
            return Err((
                at(&b.nodes),
                ClusterProblem::EmptyList {
                    item: item(),
                    what: "nodes",
                },
            ));
        }
        let members = lookup(&item, &b.nodes, names)?;
        for &n in &members {
            let node = &mut nodes[n.0 as usize];
            if let Some(other) = node.block {
                return Err((
                    at(&b.nodes),
                    ClusterProblem::NodeInTwoBlocks {
                        block: name.clone(),
                        other: blocks[other.0 as usize].name.clone(),
                        node: node.name.clone(),
                    },
                ));
            }
            node.block = Some(BlockId(i as u32));
        }
        blocks.push(Block {
            name: name.clone(),
            nodes: members,
        });
    }
    Ok(blocks)
}

/// Slurm: "Successive BlockSizes must be a power of two larger than the prior values."
fn check_block_sizes(sizes: &[u32], have_blocks: bool) -> Result<(), ClusterProblem> {
    if sizes.is_empty() {
        return Ok(());
    }
    if !have_blocks {
        return Err(ClusterProblem::BlockSizesWithoutBlocks);
    }
    let bad = |why| {
        Err(ClusterProblem::BadBlockSizes {
            sizes: sizes.to_vec(),
            why,
        })
    };
    if sizes.contains(&0) {
        return bad("sizes must be positive");
    }
    for w in sizes.windows(2) {
        if w[1] <= w[0] || w[1] % w[0] != 0 || !(w[1] / w[0]).is_power_of_two() {
            return bad("each size must be the previous one times a power of two");
        }
    }
    Ok(())
}

/// Builds a shape: the uniform shorthand (`numa = n` or no `numa`) or listed domains.
fn build_shape(s: &RawShape) -> Result<NodeShape, ClusterProblem> {
    let shape = s.name.get_ref().clone();
    if s.cores == 0 {
        return Err(ClusterProblem::ZeroCores { shape });
    }
    let memory = s.memory.0;
    let mut named = Vec::with_capacity(s.gres.len());
    for (name, &count) in &s.gres {
        if name.eq_ignore_ascii_case("gpu") {
            return Err(ClusterProblem::GresGpu { shape });
        }
        if count == 0 {
            return Err(ClusterProblem::ZeroGres {
                shape,
                name: name.clone(),
            });
        }
        named.push((name.clone(), count));
    }

    // Per domain: cores, GPU indices with model and memory, NIC names, memory if given.
    struct Dom {
        cores: Vec<u32>,
        gpus: Vec<(u32, String, u64)>,
        nics: Vec<String>,
        memory: Option<u64>,
    }
    let gpu_attr = |model: &Option<String>, mem: &Option<Memory>, n: usize| {
        if n == 0 {
            return Ok((String::new(), 0));
        }
        let model = model.as_ref().or(s.gpu_model.as_ref());
        let mem = mem.as_ref().or(s.gpu_memory.as_ref());
        match (model, mem) {
            (None, _) => Err(ClusterProblem::MissingGpuKey {
                shape: shape.clone(),
                key: "gpu_model",
            }),
            (_, None) => Err(ClusterProblem::MissingGpuKey {
                shape: shape.clone(),
                key: "gpu_memory",
            }),
            (Some(model), Some(mem)) => Ok((model.to_ascii_lowercase(), mem.0)),
        }
    };
    let nic_names = |nics: &Option<RawNics>, next: &mut u32| -> Vec<String> {
        match nics {
            None => Vec::new(),
            Some(CountOr::List(names)) => names.clone(),
            Some(CountOr::Count(k)) => {
                let names = (*next..*next + k).map(|i| format!("mlx5_{i}")).collect();
                *next += k;
                names
            }
        }
    };

    let mut doms: Vec<Dom> = Vec::new();
    match &s.numa {
        None | Some(CountOr::Count(_)) => {
            let n = match &s.numa {
                Some(CountOr::Count(n)) => *n,
                _ => 1,
            };
            if n == 0 {
                return Err(ClusterProblem::ZeroNuma { shape });
            }
            if n > s.cores {
                return Err(ClusterProblem::TooManyNuma {
                    shape,
                    numa: n,
                    cores: s.cores,
                });
            }
            let gpus = s.gpus.unwrap_or(0);
            let (model, gmem) = gpu_attr(&None, &None, gpus as usize)?;
            let nics = nic_names(&s.nics, &mut 0);
            let split = |total: u32, d: u32| -> Range<u32> {
                let (per, extra) = (total / n, total % n);
                let start = d * per + d.min(extra);
                start..start + per + u32::from(d < extra)
            };
            for d in 0..n {
                let nic_range = split(nics.len() as u32, d);
                doms.push(Dom {
                    cores: split(s.cores, d).collect(),
                    gpus: split(gpus, d).map(|i| (i, model.clone(), gmem)).collect(),
                    nics: nics[nic_range.start as usize..nic_range.end as usize].to_vec(),
                    memory: None,
                });
            }
        }
        Some(CountOr::List(list)) => {
            if s.gpus.is_some() {
                return Err(ClusterProblem::DeviceKeyOutsideDomains { shape, key: "gpus" });
            }
            if s.nics.is_some() {
                return Err(ClusterProblem::DeviceKeyOutsideDomains { shape, key: "nics" });
            }
            if list.is_empty() {
                return Err(ClusterProblem::ZeroNuma { shape });
            }
            let (mut next_core, mut next_gpu, mut next_nic) = (0u32, 0u32, 0u32);
            for d in list {
                let cores = match &d.cores {
                    IdList::Count(k) => (next_core..next_core.saturating_add(*k)).collect(),
                    IdList::Ids(ids) => ids.clone(),
                };
                if let Some(&max) = cores.iter().max() {
                    next_core = next_core.max(max.saturating_add(1));
                }
                let gpu_ids: Vec<u32> = match &d.gpus {
                    None => Vec::new(),
                    Some(IdList::Count(k)) => (next_gpu..next_gpu.saturating_add(*k)).collect(),
                    Some(IdList::Ids(ids)) => ids.clone(),
                };
                if let Some(&max) = gpu_ids.iter().max() {
                    next_gpu = next_gpu.max(max.saturating_add(1));
                }
                let (model, gmem) = gpu_attr(&d.gpu_model, &d.gpu_memory, gpu_ids.len())?;
                doms.push(Dom {
                    cores,
                    gpus: gpu_ids
                        .into_iter()
                        .map(|i| (i, model.clone(), gmem))
                        .collect(),
                    nics: nic_names(&d.nics, &mut next_nic),
                    memory: d.memory.map(|m| m.0),
                });
            }
        }
    }

    // The domains must partition the cores, GPUs and NICs.
    let mut core_dom: Vec<Option<usize>> = vec![None; s.cores as usize];
    let mut gpu_dom: BTreeMap<u32, usize> = BTreeMap::new();
    let mut nic_dom: BTreeMap<&str, usize> = BTreeMap::new();
    for (d, dom) in doms.iter().enumerate() {
        for &c in &dom.cores {
            let Some(slot) = core_dom.get_mut(c as usize) else {
                return Err(ClusterProblem::CoreOutOfRange {
                    shape,
                    domain: d,
                    core: c,
                    cores: s.cores,
                });
            };
            if let Some(first) = *slot {
                return Err(ClusterProblem::CoreOverlap {
                    shape,
                    core: c,
                    first,
                    second: d,
                });
            }
            *slot = Some(d);
        }
        for (index, _, _) in &dom.gpus {
            if let Some(first) = gpu_dom.insert(*index, d) {
                return Err(ClusterProblem::GpuOverlap {
                    shape,
                    index: *index,
                    first,
                    second: d,
                });
            }
        }
        for nic in &dom.nics {
            if let Some(first) = nic_dom.insert(nic, d) {
                return Err(ClusterProblem::NicOverlap {
                    shape,
                    nic: nic.clone(),
                    first,
                    second: d,
                });
            }
        }
    }
    let uncovered: Vec<u32> = core_dom
        .iter()
        .enumerate()
        .filter(|(_, d)| d.is_none())
        .map(|(c, _)| c as u32)
        .collect();
    if !uncovered.is_empty() {
        return Err(ClusterProblem::CoresUncovered {
            shape,
            cores: compress_ids(&uncovered),
        });
    }
    if gpu_dom.is_empty() {
        for key in ["gpu_model", "gpu_memory"] {
            let given = match key {
                "gpu_model" => s.gpu_model.is_some(),
                _ => s.gpu_memory.is_some(),
            };
            if given {
                return Err(ClusterProblem::GpuKeyWithoutGpus { shape, key });
            }
        }
    }

    // Memory: domains without a size share what the others leave.
    let given: u64 = doms.iter().filter_map(|d| d.memory).sum();
    if given > memory {
        return Err(ClusterProblem::NumaMemoryTooLarge {
            shape,
            sum: given,
            memory,
        });
    }
    let unsized_doms = doms.iter().filter(|d| d.memory.is_none()).count() as u64;
    let share = (memory - given).checked_div(unsized_doms).unwrap_or(0);

    // GPUs are stored in device-index order; domains refer to their positions.
    let mut gpus: Vec<GpuDevice> = doms
        .iter()
        .enumerate()
        .flat_map(|(d, dom)| {
            dom.gpus.iter().map(move |(index, model, mem)| GpuDevice {
                index: *index,
                model: model.clone(),
                mem_mib: *mem,
                numa: d as u16,
            })
        })
        .collect();
    gpus.sort_by_key(|g| g.index);
    let nics: Vec<NicDevice> = doms
        .iter()
        .enumerate()
        .flat_map(|(d, dom)| {
            dom.nics.iter().map(move |name| NicDevice {
                name: name.clone(),
                numa: d as u16,
            })
        })
        .collect();
    let numa = doms
        .iter()
        .enumerate()
        .map(|(d, dom)| {
            let mut cores = dom.cores.clone();
            cores.sort_unstable();
            let mut gpu_pos: Vec<u32> = gpus
                .iter()
                .enumerate()
                .filter(|(_, g)| usize::from(g.numa) == d)
                .map(|(p, _)| p as u32)
                .collect();
            gpu_pos.sort_unstable();
            NumaDomain {
                cores,
                gpus: gpu_pos,
                nics: nics
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| usize::from(n.numa) == d)
                    .map(|(p, _)| p as u32)
                    .collect(),
                mem_mib: dom.memory.unwrap_or(share),
            }
        })
        .collect();
    Ok(NodeShape {
        name: shape,
        cores: s.cores,
        mem_mib: memory,
        numa,
        gpus,
        nics,
        named,
    })
}

/// Sorted ids as a cpulist: `[0, 1, 2, 5]` as `0-2,5`.
fn compress_ids(nums: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < nums.len() {
        let mut j = i;
        while j + 1 < nums.len() && nums[j + 1] == nums[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            nums[i].to_string()
        } else {
            format!("{}-{}", nums[i], nums[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::PartitionId;
    use crate::time::DurationProblem;

    const SMALL: &str = include_str!("../../../examples/clusters/small.toml");
    const SUPERPOD: &str = include_str!("../../../examples/clusters/superpod.toml");

    fn load(text: &str) -> Cluster {
        match load_cluster(text, "test.toml") {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    fn load_err(text: &str) -> String {
        match load_cluster(text, "test.toml") {
            Ok(_) => panic!("loaded a bad cluster description:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    /// A valid description to break in the error tests: two nodes, one shape, one partition.
    fn base(extra: &str) -> String {
        format!(
            "version = 1\nname = \"t\"\n\n[[shape]]\nname = \"s\"\ncores = 8\nmemory = \"64G\"\n\n\
             [[nodes]]\nnames = \"n[1-2]\"\nshape = \"s\"\n\n\
             [[partition]]\nname = \"p\"\nnodes = \"ALL\"\n{extra}"
        )
    }

    fn node(c: &Cluster, name: &str) -> NodeId {
        c.node_id(name)
            .unwrap_or_else(|| panic!("node {name} missing"))
    }

    #[test]
    fn small_example_loads_with_even_numa_split_and_drained_node() {
        let c = load(SMALL);
        assert_eq!(c.name, "lab");
        assert_eq!(c.nodes.len(), 4);
        assert_eq!(
            c.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
            ["node1", "node2", "node3", "node4"]
        );
        let shape = &c.shapes[0];
        assert_eq!(shape.mem_mib, 512 * 1024);
        assert_eq!(shape.numa.len(), 2);
        assert_eq!(shape.numa[1].cores, (32..64).collect::<Vec<_>>());
        assert_eq!(shape.numa[0].gpus, vec![0, 1]);
        assert_eq!(shape.numa[1].gpus, vec![2, 3]);
        assert_eq!(shape.numa[1].mem_mib, 256 * 1024);
        assert_eq!(shape.gpus[3].numa, 1);
        assert_eq!(shape.gpus[3].model, "a100");
        assert_eq!(shape.gpus[3].mem_mib, 40 * 1024);
        assert_eq!(shape.nics[1].name, "mlx5_1");
        assert_eq!(shape.nics[1].numa, 1);
        let n4 = c.node(node(&c, "node4"));
        assert_eq!(n4.avail, NodeAvail::Drain);
        assert_eq!(n4.reason.as_deref(), Some("fan replacement"));
        assert_eq!(c.node(node(&c, "node1")).avail, NodeAvail::Up);
        assert_eq!(c.partitions.len(), 1);
        let p = &c.partitions[0];
        assert!(p.default && p.up);
        assert_eq!(p.nodes.len(), 4);
        assert_eq!(p.max_time, Some(Dur::days(1)));
        assert_eq!(p.default_time, Some(Dur::hours(1)));
        assert!(c.switches.is_empty() && c.blocks.is_empty());
        assert_eq!(c.nodes[0].leaf, None);
    }

    #[test]
    fn superpod_example_loads_groups_tree_blocks_and_partitions() {
        let c = load(SUPERPOD);
        assert_eq!(c.nodes.len(), 128);
        assert_eq!(c.total_gpus(), 1024);
        assert_eq!(c.nodes[0].name, "gpu001");
        assert_eq!(c.nodes[127].name, "gpu128");

        let h100 = c.shape(node(&c, "gpu064"));
        let h200 = c.shape(node(&c, "gpu065"));
        assert_eq!(
            (h100.name.as_str(), h200.name.as_str()),
            ("hgx-h100", "hgx-h200")
        );
        assert_eq!(h100.numa[1].cores, (56..112).collect::<Vec<_>>());
        assert_eq!(h100.numa[1].gpus, vec![4, 5, 6, 7]);
        assert_eq!(h100.numa[1].nics, vec![2, 3]);
        assert_eq!(h100.nics[2].name, "mlx5_2");
        assert_eq!(h100.numa[0].mem_mib, 1024 * 1024);
        assert_eq!(h100.named, vec![("nvme".to_string(), 8)]);
        assert_eq!(h200.gpus[7].model, "h200");
        assert_eq!(h200.gpus[7].mem_mib, 141 * 1024);
        assert_eq!(h200.numa[0].nics, vec![0, 1]);
        let gpu001 = c.node(node(&c, "gpu001"));
        assert_eq!(gpu001.features, ["h100", "ib", "nvlink"]);
        assert_eq!(gpu001.labels["topology/pod"], "a");

        // The tree: 8 leaves of 16 nodes, 2 spines, 1 core.
        assert_eq!(c.switches.len(), 11);
        let by_name = |n: &str| {
            c.switches
                .iter()
                .position(|s| s.name == n)
                .map(|i| SwitchId(i as u32))
                .unwrap_or_else(|| panic!("switch {n} missing"))
        };
        let leaf3 = by_name("leaf3");
        assert_eq!(c.node(node(&c, "gpu033")).leaf, Some(leaf3));
        assert_eq!(c.node(node(&c, "gpu048")).leaf, Some(leaf3));
        let sw = |id: SwitchId| &c.switches[id.0 as usize];
        assert_eq!(sw(leaf3).nodes.len(), 16);
        assert_eq!(sw(leaf3).level, 0);
        assert_eq!(sw(leaf3).parent, Some(by_name("spine1")));
        assert_eq!(sw(by_name("spine2")).level, 1);
        assert_eq!(
            sw(by_name("spine2")).children,
            ["leaf5", "leaf6", "leaf7", "leaf8"].map(by_name)
        );
        assert_eq!(sw(by_name("core")).level, 2);
        assert_eq!(sw(by_name("core")).parent, None);
        assert!(c.nodes.iter().all(|n| n.leaf.is_some()));

        assert_eq!(c.blocks.len(), 4);
        assert_eq!(c.block_sizes, vec![32, 64, 128]);
        assert_eq!(c.node(node(&c, "gpu033")).block, Some(BlockId(1)));
        assert!(c.blocks.iter().all(|b| b.nodes.len() == 32));

        let names: Vec<&str> = c.partitions.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["gpu", "h200", "debug", "maint"]);
        assert_eq!(c.default_partition(), Some(PartitionId(0)));
        let h200p = c.partition(PartitionId(1));
        assert_eq!(h200p.nodes.len(), 64);
        assert_eq!(h200p.priority_tier, 2);
        assert_eq!(h200p.max_time, Some(Dur::days(7)));
        let debug = c.partition(PartitionId(2));
        assert_eq!(debug.max_time, Some(Dur::minutes(30)));
        assert_eq!(debug.priority_job_factor, 10);
        assert_eq!(debug.priority_tier, 1);
        let maint = c.partition(PartitionId(3));
        assert!(!maint.up);
        assert_eq!(maint.max_time, None);
        assert_eq!(
            c.node(node(&c, "gpu070")).partitions,
            vec![PartitionId(0), PartitionId(1), PartitionId(3)]
        );
        c.check_invariants().unwrap();
    }

    #[test]
    fn example_files_load_from_disk_and_missing_file_names_its_path() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/clusters");
        let c = load_cluster_file(&dir.join("superpod.toml")).unwrap();
        assert_eq!(c.nodes.len(), 128);
        let err = load_cluster_file(&dir.join("nope.toml")).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }), "{err}");
        assert!(err.to_string().contains("nope.toml"), "{err}");
    }

    #[test]
    fn shorthand_and_listed_numa_domains_give_the_same_shape() {
        let short = load(
            "version = 1\nname = \"t\"\n[[shape]]\nname = \"s\"\ncores = 16\nmemory = 1024\n\
             numa = 2\ngpus = 4\ngpu_model = \"H100\"\ngpu_memory = \"80G\"\nnics = 2\n\
             [[nodes]]\nnames = \"n1\"\nshape = \"s\"\n\
             [[partition]]\nname = \"p\"\nnodes = \"n1\"\n",
        );
        let long = load(
            "version = 1\nname = \"t\"\n[[shape]]\nname = \"s\"\ncores = 16\nmemory = \"1G\"\n\
             gpu_model = \"h100\"\ngpu_memory = 81920\n\
             [[shape.numa]]\ncores = \"0-7\"\ngpus = [0, 1]\nnics = 1\n\
             [[shape.numa]]\ncores = 8\ngpus = 2\nnics = [\"mlx5_1\"]\n\
             [[nodes]]\nnames = \"n1\"\nshape = \"s\"\n\
             [[partition]]\nname = \"p\"\nnodes = \"n1\"\n",
        );
        assert_eq!(short.shapes, long.shapes);
        assert_eq!(short.shapes[0].numa[1].cores, (8..16).collect::<Vec<_>>());
        assert_eq!(
            short.shapes[0].gpus[0].model, "h100",
            "models are lowercased"
        );
        // The uniform shape of the model code is the same split.
        let uniform = NodeShape::uniform("s", 16, 1024, 4, "h100", 2, 2);
        assert_eq!(short.shapes[0].numa, uniform.numa);
    }

    #[test]
    fn listed_gpu_indices_keep_their_numa_domain_and_are_stored_in_index_order() {
        let c = load(
            "version = 1\nname = \"t\"\n[[shape]]\nname = \"s\"\ncores = 4\nmemory = \"8G\"\n\
             gpu_model = \"l4\"\ngpu_memory = \"24G\"\n\
             [[shape.numa]]\ncores = [0, 2]\ngpus = [1, 3]\nmemory = \"6G\"\n\
             [[shape.numa]]\ncores = \"1,3\"\ngpus = \"0,2\"\ngpu_model = \"l40s\"\n\
             [[nodes]]\nnames = \"n1\"\nshape = \"s\"\n\
             [[partition]]\nname = \"p\"\nnodes = \"n1\"\n",
        );
        let s = &c.shapes[0];
        let idx: Vec<(u32, u16, &str)> = s
            .gpus
            .iter()
            .map(|g| (g.index, g.numa, g.model.as_str()))
            .collect();
        assert_eq!(
            idx,
            [(0, 1, "l40s"), (1, 0, "l4"), (2, 1, "l40s"), (3, 0, "l4")]
        );
        assert_eq!(s.numa[0].gpus, vec![1, 3]);
        assert_eq!(s.numa[1].cores, vec![1, 3]);
        assert_eq!(s.numa[0].mem_mib, 6 * 1024);
        assert_eq!(
            s.numa[1].mem_mib,
            2 * 1024,
            "the rest goes to the unsized domain"
        );
        assert!(s.nics.is_empty());
    }

    #[test]
    fn node_groups_keep_file_order_and_partitions_expand_hostlists() {
        let c = load(&base(
            "[[partition]]\nname = \"q\"\nnodes = \"n2\"\npriority_tier = 3\nstate = \"down\"\n",
        ));
        assert_eq!(c.nodes.len(), 2);
        assert_eq!(c.partitions[1].nodes, vec![NodeId(1)]);
        assert_eq!(c.nodes[1].partitions, vec![PartitionId(0), PartitionId(1)]);
        assert!(!c.partitions[1].up);
        assert_eq!(
            c.partitions[0].max_time, None,
            "no max_time means unlimited"
        );
        assert_eq!(c.shapes[0].numa.len(), 1, "no numa key means one domain");
        assert_eq!(c.shapes[0].numa[0].mem_mib, 64 * 1024);
    }

    #[test]
    fn memory_sizes_accept_binary_units_and_mib_integers() {
        assert_eq!(parse_memory_mib("512G"), Ok(512 * 1024));
        assert_eq!(parse_memory_mib("1T"), Ok(1 << 20));
        assert_eq!(parse_memory_mib("2048M"), Ok(2048));
        assert_eq!(parse_memory_mib("80Gi"), Ok(80 * 1024));
        assert_eq!(parse_memory_mib("4 GiB"), Ok(4096));
        assert_eq!(parse_memory_mib("100"), Ok(100));
        assert!(parse_memory_mib("0G").is_err());
        assert!(parse_memory_mib("1.5T").is_err());
        assert!(parse_memory_mib("12X").is_err());
        assert!(parse_memory_mib("G").is_err());
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_item() {
        let shape = |extra: &str| {
            format!(
                "version = 1\nname = \"t\"\n[[shape]]\nname = \"dgx\"\ncores = 64\nmemory = \"512G\"\n\
                 gpu_model = \"a100\"\ngpu_memory = \"80G\"\n{extra}\n\
                 [[nodes]]\nnames = \"n1\"\nshape = \"dgx\"\n\
                 [[partition]]\nname = \"p\"\nnodes = \"n1\"\n"
            )
        };
        let cases: Vec<(&str, String)> = vec![
            ("syntax", "version = 1\nname = \"t\n".to_string()),
            (
                "unknown top-level key",
                "version = 1\nname = \"t\"\nnodez = 3\n".to_string(),
            ),
            ("unknown key in a partition", base("maxtime = \"1:00\"\n")),
            (
                "unknown key in a numa domain",
                shape("[[shape.numa]]\ncores = 64\ngpu = 2\n"),
            ),
            ("missing version", "name = \"t\"\n".to_string()),
            (
                "wrong version",
                "version = 2\nname = \"t\"\nfuture = true\n".to_string(),
            ),
            (
                "version as string",
                "version = \"1\"\nname = \"t\"\n".to_string(),
            ),
            ("wrong type", base("priority_tier = \"high\"\n")),
            ("bad memory", shape("").replace("\"512G\"", "\"512X\"")),
            ("bad hostlist", base("").replace("n[1-2]", "n[1-2")),
            (
                "descending hostlist in a partition",
                base("[[partition]]\nname = \"q\"\nnodes = \"n[2-1]\"\n"),
            ),
            (
                "undefined node in a partition",
                base("[[partition]]\nname = \"gpu\"\nnodes = \"n[1-3]\"\n"),
            ),
            (
                "duplicate node",
                base("[[nodes]]\nnames = \"n[2-3]\"\nshape = \"s\"\n"),
            ),
            (
                "unknown shape",
                base("[[nodes]]\nnames = \"m1\"\nshape = \"dgx\"\n"),
            ),
            (
                "two default partitions",
                base(
                    "default = true\n[[partition]]\nname = \"q\"\nnodes = \"n1\"\ndefault = true\n",
                ),
            ),
            ("bad time", base("max_time = \"1:2:3:4\"\n")),
            (
                "default time above max",
                base("max_time = \"1:00:00\"\ndefault_time = \"2:00:00\"\n"),
            ),
            (
                "core out of range",
                shape("[[shape.numa]]\ncores = \"0-31\"\n[[shape.numa]]\ncores = \"32-69\"\n"),
            ),
            (
                "overlapping numa cores",
                shape("[[shape.numa]]\ncores = \"0-40\"\n[[shape.numa]]\ncores = \"32-63\"\n"),
            ),
            (
                "uncovered cores",
                shape("[[shape.numa]]\ncores = \"0-29\"\n[[shape.numa]]\ncores = \"32-61\"\n"),
            ),
            (
                "gpu index in two domains",
                shape(
                    "[[shape.numa]]\ncores = 32\ngpus = 4\n[[shape.numa]]\ncores = 32\ngpus = \"3-6\"\n",
                ),
            ),
            (
                "gpus beside listed domains",
                shape("gpus = 8\n[[shape.numa]]\ncores = 64\n"),
            ),
            (
                "gpus without model",
                shape("gpus = 2").replace("gpu_model = \"a100\"\n", ""),
            ),
            (
                "node under two leaves",
                base(
                    "[[switch]]\nname = \"leaf1\"\nnodes = \"n[1-2]\"\n\
                     [[switch]]\nname = \"leaf3\"\nnodes = \"n2\"\n",
                ),
            ),
            (
                "node under no leaf",
                base("[[switch]]\nname = \"leaf1\"\nnodes = \"n1\"\n"),
            ),
            (
                "unknown switch",
                base("[[switch]]\nname = \"top\"\nswitches = \"leaf[1-2]\"\n"),
            ),
            (
                "switch cycle",
                base(
                    "[[switch]]\nname = \"leaf\"\nnodes = \"n[1-2]\"\n\
                     [[switch]]\nname = \"a\"\nswitches = \"b\"\n\
                     [[switch]]\nname = \"b\"\nswitches = \"c\"\n\
                     [[switch]]\nname = \"c\"\nswitches = \"a\"\n",
                ),
            ),
            (
                "switch with nodes and switches",
                base("[[switch]]\nname = \"x\"\nnodes = \"n1\"\nswitches = \"y\"\n"),
            ),
            (
                "node in two blocks",
                base(
                    "[[block]]\nname = \"b1\"\nnodes = \"n[1-2]\"\n\
                     [[block]]\nname = \"b2\"\nnodes = \"n1\"\n",
                ),
            ),
            (
                "bad block sizes",
                base("[[block]]\nname = \"b1\"\nnodes = \"n[1-2]\"\n")
                    .replace("name = \"t\"\n", "name = \"t\"\nblock_sizes = [2, 6]\n"),
            ),
            ("missing key", base("").replace("cores = 8\n", "")),
            (
                "node twice in one group",
                base("").replace("n[1-2]", "n[1-2],n1"),
            ),
            (
                "no partitions",
                "version = 1\nname = \"t\"\n[[shape]]\nname = \"s\"\ncores = 1\nmemory = 1\n\
                 [[nodes]]\nnames = \"n1\"\nshape = \"s\"\n"
                    .to_string(),
            ),
        ];
        let report: String = cases
            .iter()
            .map(|(what, text)| format!("{what}:\n  {}\n", load_err(text)))
            .collect();
        insta::assert_snapshot!(report, @r#"
            syntax:
              test.toml:2:10: invalid basic string, expected `"`
            unknown top-level key:
              test.toml:3:1: unknown field `nodez`, expected one of `version`, `name`, `block_sizes`, `shape`, `nodes`, `partition`, `switch`, `block`
            unknown key in a partition:
              test.toml:16:1: unknown field `maxtime`, expected one of `name`, `nodes`, `default`, `priority_tier`, `priority_job_factor`, `max_time`, `default_time`, `state`
            unknown key in a numa domain:
              test.toml:11:1: unknown field `gpu`, expected one of `cores`, `memory`, `gpus`, `gpu_model`, `gpu_memory`, `nics`
            missing version:
              test.toml: missing `version = 1` (every cluster description starts with the version of its format)
            wrong version:
              test.toml:1:11: unsupported version 2; this cadre reads cluster descriptions of version 1
            version as string:
              test.toml:1:11: unsupported version "1"; this cadre reads cluster descriptions of version 1
            wrong type:
              test.toml:16:17: invalid type: string "high", expected u32
            bad memory:
              test.toml:6:10: invalid memory size `512X`: unknown unit `X` (use M, G, T or P, binary)
            bad hostlist:
              test.toml:10:9: node group 1: invalid hostlist `n[1-2`: unbalanced `[` at byte 1
            descending hostlist in a partition:
              test.toml:18:9: partition "q": invalid hostlist `n[2-1]`: descending range `2-1` at byte 2 (the first bound must not exceed the second)
            undefined node in a partition:
              test.toml:18:9: partition "gpu": node "n3" is not defined
            duplicate node:
              test.toml:17:9: duplicate node name "n2" (node groups 1 and 2)
            unknown shape:
              test.toml:18:9: node group 2: shape "dgx" is not defined
            two default partitions:
              test.toml:18:8: partitions "p" and "q" are both marked default; at most one may be
            bad time:
              test.toml:16:12: partition "p": max_time: failed to parse time `1:2:3:4`: expected minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes, days-hours:minutes:seconds or UNLIMITED
            default time above max:
              test.toml:17:16: partition "p": default_time 02:00:00 is longer than max_time 01:00:00
            core out of range:
              test.toml:4:8: shape "dgx": numa domain 1 lists core 64 but the shape has 64 cores
            overlapping numa cores:
              test.toml:4:8: shape "dgx": core 32 is in numa domain 0 and again in numa domain 1
            uncovered cores:
              test.toml:4:8: shape "dgx": cores 30-31,62-63 are in no numa domain
            gpu index in two domains:
              test.toml:4:8: shape "dgx": gpu index 3 is in numa domain 0 and again in numa domain 1
            gpus beside listed domains:
              test.toml:4:8: shape "dgx": `gpus` goes into each [[shape.numa]] when the numa domains are listed
            gpus without model:
              test.toml:4:8: shape "dgx": gpus need `gpu_model` (on the shape or in their numa domain)
            node under two leaves:
              test.toml:21:9: switch "leaf3" and switch "leaf1" both list node "n2"
            node under no leaf:
              test.toml:10:9: node "n2" (node group 1) is under no leaf switch; when switches are given, every node must hang off one
            unknown switch:
              test.toml:18:12: switch "top": switch "leaf1" is not defined
            switch cycle:
              test.toml:20:8: switches form a cycle: a -> b -> c -> a
            switch with nodes and switches:
              test.toml:17:8: switch "x": give either `nodes` (a leaf switch) or `switches` (an upper switch), not both
            node in two blocks:
              test.toml:21:9: block "b2" and block "b1" both list node "n1"
            bad block sizes:
              test.toml:3:15: block_sizes [2, 6]: each size must be the previous one times a power of two
            missing key:
              test.toml:4:1: missing field `cores`
            node twice in one group:
              test.toml:10:9: node group 1 lists node "n1" twice
            no partitions:
              test.toml: no partition defined; add a [[partition]] section
        "#);
    }

    #[test]
    fn partition_times_follow_slurm_and_ignore_surrounding_spaces() {
        let c = load(&base("max_time = \" 1-25:00 \"\ndefault_time = \"1:60\"\n"));
        let p = &c.partitions[0];
        assert_eq!(p.max_time, Some(Dur::days(2) + Dur::hours(1)));
        assert_eq!(p.default_time, Some(Dur::minutes(2)));
        let c = load(&base("max_time = \"-1\"\n"));
        assert_eq!(c.partitions[0].max_time, None);
    }

    #[test]
    fn error_variants_carry_structured_fields() {
        let err = load_cluster(&base("max_time = \"1:2:3:4\"\n"), "x.toml").unwrap_err();
        let ConfigError::Invalid {
            at: Some(at),
            problem,
            ..
        } = err
        else {
            panic!("{err}");
        };
        let ClusterProblem::BadTime {
            partition, error, ..
        } = *problem
        else {
            panic!("{problem}");
        };
        assert_eq!(partition, "p");
        assert_eq!(error.reason, DurationProblem::Malformed);
        assert_eq!(at.line, 16);
    }
}
