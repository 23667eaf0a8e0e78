//! Why a Slurm configuration could not be read as a cadre cluster.
//!
//! Every error names the file and, where one line is at fault, the line:
//! ``/etc/slurm/slurm.conf:41: NodeName=gpu[001-128]: unknown key `Cpus_` ``. The file is the
//! one the line is in: an included file, `gres.conf` or `topology.conf` beside
//! `slurm.conf`. [`Problem`] says what is wrong, with structured fields; its messages are
//! lowercase and name the key or item at fault.

use crate::Location;
use cadre_core::hostlist::HostlistError;
use cadre_core::time::DurationError;
use std::io;
use std::path::PathBuf;

/// Why a Slurm configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SlurmConfError {
    /// The named file (`slurm.conf`, or `gres.conf`/`topology.conf` that exist but cannot
    /// be read) could not be read.
    #[error("failed to read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A line of a file is at fault.
    #[error("{}:{line}: {problem}", file.display())]
    At {
        file: PathBuf,
        line: usize,
        problem: Box<Problem>,
    },
    /// The file as a whole is at fault (something missing from it).
    #[error("{}: {problem}", file.display())]
    InFile {
        file: PathBuf,
        problem: Box<Problem>,
    },
}

impl SlurmConfError {
    /// The problem, whichever file and line it is at; `None` for a file that could not be
    /// read.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            SlurmConfError::Read { .. } => None,
            SlurmConfError::At { problem, .. } | SlurmConfError::InFile { problem, .. } => {
                Some(problem)
            }
        }
    }
}

/// What is wrong. Items are named as Slurm's files name them: `NodeName=gpu[001-004]`,
/// `PartitionName=gpu`, `SwitchName=leaf1`, `BlockName=b1`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    // --- Line syntax --------------------------------------------------------------------
    #[error("expected KEY=VALUE, found `{word}` (no spaces around `=`)")]
    NotKeyValue { word: String },
    #[error("`{word}` has no key before `=`")]
    EmptyKey { word: String },
    #[error("the value of `{key}` opens a quote that is not closed on its line")]
    UnterminatedQuote { key: String },
    #[error(
        "the quoted value of `{key}` is followed by text; put whitespace after the closing quote"
    )]
    TextAfterQuote { key: String },
    #[error("`Include` names no file")]
    IncludeWithoutFile,
    #[error("failed to read included file {}: {source}", path.display())]
    Include {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("`Include {}` includes itself (through the files that include it)", path.display())]
    IncludeLoop { path: PathBuf },
    #[error("`Include` nests more than {limit} files deep")]
    IncludeTooDeep { limit: usize },
    #[error("`Include {name}` uses %c but no ClusterName is given before it")]
    IncludeClusterName { name: String },
    #[error(
        "`Include {name}`: unknown modifier `%{modifier}` (only %c, the cluster name, is known)"
    )]
    IncludeModifier { name: String, modifier: String },
    #[error("`Include {name}`: wildcards are not supported; include each file by name")]
    IncludeWildcard { name: String },

    // --- Keys and values ----------------------------------------------------------------
    #[error("{item}unknown key `{key}`")]
    UnknownKey { item: Item, key: String },
    #[error("{item}`{key}` is not supported: {why}")]
    Refused {
        item: Item,
        key: String,
        why: &'static str,
    },
    #[error("{item}`{key}` is given twice")]
    DuplicateKey { item: Item, key: String },
    #[error("{item}`{key}` and `{other}` are both given; they are two names of one setting")]
    SameSetting {
        item: Item,
        key: String,
        other: String,
    },
    #[error("{item}`{key}` must start its line (it names what the line describes)")]
    MisplacedHead { item: Item, key: String },
    #[error("{item}invalid {key} `{value}`: {expected}")]
    BadValue {
        item: Item,
        key: String,
        value: String,
        expected: &'static str,
    },
    #[error("{item}{key}: {error}")]
    BadTime {
        item: Item,
        key: String,
        error: DurationError,
    },
    #[error("{item}{key}: {error}")]
    Hostlist {
        item: Item,
        key: String,
        error: HostlistError,
    },
    #[error("{item}`{key}` is not supported with the value `{value}`: {why}")]
    RefusedValue {
        item: Item,
        key: String,
        value: String,
        why: &'static str,
    },

    // --- slurm.conf as a whole ----------------------------------------------------------
    #[error("ClusterName is not set (Slurm requires it; it becomes the cluster's name)")]
    NoClusterName,
    #[error("no NodeName line describes a node")]
    NoNodes,
    #[error("no PartitionName line defines a partition")]
    NoPartitions,
    #[error("`{name}` is not a valid ClusterName: it must not be empty or contain whitespace")]
    BadClusterName { name: String },

    // --- Nodes --------------------------------------------------------------------------
    #[error("NodeName=ALL is reserved by Slurm and cannot name a node")]
    NodeNamedAll,
    #[error("{item}no node names")]
    NoNodeNames { item: Item },
    #[error("node \"{node}\" is described twice (first at {first})")]
    DuplicateNode { node: String, first: Location },
    #[error("{item}Sockets and SocketsPerBoard are both given; they are mutually exclusive")]
    SocketsAndSocketsPerBoard { item: Item },
    #[error(
        "{item}CPUs={cpus} matches neither the threads ({threads} = {sockets} sockets x \
         {cores} cores x {threads_per_core} threads) nor the cores ({physical}) of the layout"
    )]
    CpusMismatch {
        item: Item,
        cpus: u32,
        sockets: u32,
        cores: u32,
        threads_per_core: u32,
        threads: u32,
        physical: u32,
    },
    #[error(
        "{item}CPUs={cpus} is not a whole number of sockets of {cores} cores x \
         {threads_per_core} threads (give Sockets)"
    )]
    CpusNotWholeSockets {
        item: Item,
        cpus: u32,
        cores: u32,
        threads_per_core: u32,
    },
    #[error("{item}the layout has {count} CPUs, more than cadre supports ({limit})")]
    TooManyCpus { item: Item, count: u64, limit: u32 },
    #[error("{item}feature `{feature}` may only contain letters, digits, `_`, `-`, `.` and `:`")]
    BadFeature { item: Item, feature: String },
    #[error("{item}node \"{node}\" is not defined by any NodeName line")]
    UnknownNode { item: Item, node: String },
    #[error("{item}NodeSet \"{name}\" has the name of a node")]
    NodeSetNamedLikeNode { item: Item, name: String },
    #[error("NodeSet \"{name}\" is defined twice (first at {first})")]
    DuplicateNodeSet { name: String, first: Location },

    // --- GRES ---------------------------------------------------------------------------
    #[error("{item}GRES `{name}` is not listed in GresTypes{}", given.as_ref().map_or_else(|| " (GresTypes is not set)".to_string(), |g| format!(" ({g})")))]
    GresNotInTypes {
        item: Item,
        name: String,
        given: Option<String>,
    },
    #[error("{item}invalid GRES `{spec}`: expected name[:type]:count, such as gpu:a100:8")]
    BadGres { item: Item, spec: String },
    #[error("{item}GRES `{name}` is given both with and without a type; Slurm forbids that")]
    GresTypedAndUntyped { item: Item, name: String },
    #[error("{item}GRES `{spec}` is given twice")]
    GresTwice { item: Item, spec: String },
    #[error(
        "{item}GRES `{name}` shares GPUs (MPS or shards), which cadre does not read; cadre \
         shares a GPU by fractions of it (a job's GPU share), without MPS or shard counts"
    )]
    GresSharing { item: Item, name: String },
    #[error(
        "{item}GRES `{spec}` is no_consume; cadre's countable resources are always consumed \
         (leave the resource out, or give it a count jobs use up)"
    )]
    GresNoConsume { item: Item, spec: String },
    #[error(
        "{item}typed GRES `{spec}` is only supported for gpu; cadre's other countable \
         resources have a name and a count, no type"
    )]
    GresTypedNotGpu { item: Item, spec: String },
    #[error(
        "{item}socket affinity in Gres (`{spec}`) is not read; give the GPUs' Cores= in gres.conf"
    )]
    GresSocketAffinity { item: Item, spec: String },
    #[error("{item}more than {limit} GPUs on one node")]
    TooManyGpus { item: Item, limit: u32 },

    // --- gres.conf ----------------------------------------------------------------------
    #[error("a gres.conf line must give Name= (or be an AutoDetect line)")]
    GresLineWithoutName,
    #[error("Count={count} but File= names {files} device files; they must agree")]
    GresCountAndFiles { count: u64, files: usize },
    #[error("node \"{node}\": {what} is given twice (first at {first})")]
    GresFileTwice {
        what: String,
        node: String,
        first: Location,
    },
    #[error("node \"{node}\": gres.conf gives {name} but its NodeName line has no Gres={name}")]
    GresNotOnNode { node: String, name: String },
    #[error(
        "node \"{node}\": gres.conf gives {conf} {what} but its NodeName line ({line}) gives {slurm}"
    )]
    GresCountMismatch {
        node: String,
        what: String,
        conf: u64,
        slurm: u64,
        line: Location,
    },
    #[error(
        "node \"{node}\": gres.conf gives a GPU without Type while the NodeName line types \
         its GPUs; give Type= on every gpu line"
    )]
    GresUntypedLine { node: String },
    #[error("node \"{node}\": {key}={value} names {what} {id}, but the node has {count} {what}s")]
    GresCoresOutOfRange {
        node: String,
        key: String,
        value: String,
        what: &'static str,
        id: u32,
        count: u32,
    },

    // --- Partitions ---------------------------------------------------------------------
    #[error("partition \"{name}\" is defined twice (first at {first})")]
    DuplicatePartition { name: String, first: Location },
    #[error(
        "{item}`{name}` is not a valid partition name: it must not be empty or contain `,`, brackets or whitespace"
    )]
    BadPartitionName { item: Item, name: String },
    #[error("{item}the partition has no nodes; cadre needs at least one")]
    EmptyPartition { item: Item },
    #[error(
        "partitions \"{first}\" (at {first_at}) and \"{second}\" are both Default=YES; at most one may be"
    )]
    TwoDefaults {
        first: String,
        first_at: Location,
        second: String,
    },
    #[error("{item}{key} must be positive (write UNLIMITED for no limit)")]
    ZeroTime { item: Item, key: String },
    #[error("{item}DefaultTime {default_time} is longer than MaxTime {max_time}")]
    DefaultAboveMax {
        item: Item,
        default_time: String,
        max_time: String,
    },

    // --- topology.conf ------------------------------------------------------------------
    #[error(
        "TopologyPlugin={plugin} needs topology.conf beside slurm.conf ({}), which does not exist",
        path.display()
    )]
    NoTopologyConf { plugin: String, path: PathBuf },
    #[error(
        "TopologyPlugin={plugin}: topology.yaml is not read; describe the topology in \
         topology.conf ({})",
        path.display()
    )]
    TopologyYaml { plugin: String, path: PathBuf },
    #[error("{key} lines describe topology/{wants}, but TopologyPlugin is {plugin}")]
    WrongTopologyLine {
        key: String,
        wants: &'static str,
        plugin: String,
    },
    #[error("{item}give Nodes= (a leaf switch) or Switches= (an upper switch), not both")]
    SwitchBoth { item: Item },
    #[error("{item}give Nodes= (a leaf switch) or Switches= (an upper switch)")]
    SwitchNeither { item: Item },
    #[error("switch \"{name}\" is defined twice (first at {first})")]
    DuplicateSwitch { name: String, first: Location },
    #[error("{item}switch \"{switch}\" is not defined by any SwitchName line")]
    UnknownSwitch { item: Item, switch: String },
    #[error("{item}node \"{node}\" is already under switch \"{other}\" (at {other_at})")]
    NodeUnderTwoLeaves {
        item: Item,
        node: String,
        other: String,
        other_at: Location,
    },
    #[error("{item}switch \"{child}\" is already under switch \"{other}\" (at {other_at})")]
    SwitchUnderTwoParents {
        item: Item,
        child: String,
        other: String,
        other_at: Location,
    },
    #[error("switches form a cycle: {path}")]
    SwitchCycle { path: String },
    #[error(
        "node \"{node}\" is under no leaf switch; with topology/tree every node must hang \
         off one (Slurm: all nodes must be connected to at least one switch)"
    )]
    NodeUnderNoLeaf { node: String },
    #[error("{item}Nodes= is required")]
    BlockWithoutNodes { item: Item },
    #[error("block \"{name}\" is defined twice (first at {first})")]
    DuplicateBlock { name: String, first: Location },
    #[error("{item}node \"{node}\" is already in block \"{other}\" (at {other_at})")]
    NodeInTwoBlocks {
        item: Item,
        node: String,
        other: String,
        other_at: Location,
    },
    #[error("BlockSizes is given but no BlockName line defines a block")]
    BlockSizesWithoutBlocks,
    #[error("BlockSizes={sizes}: {why}")]
    BadBlockSizes { sizes: String, why: &'static str },
    #[error("{item}the name is empty or holds `,`, brackets or whitespace")]
    BadName { item: Item },
}

/// The item a problem is in, printed as a prefix (`NodeName=gpu[001-004]: `); empty for a
/// problem of a line with no item (a parameter of slurm.conf).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Item(pub Option<String>);

impl Item {
    /// No item: a top-level parameter.
    pub fn none() -> Item {
        Item(None)
    }

    /// `Kind=name`, as the line starts.
    pub fn of(kind: &str, name: &str) -> Item {
        Item(Some(format!("{kind}={name}")))
    }
}

impl std::fmt::Display for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(item) => write!(f, "{item}: "),
            None => Ok(()),
        }
    }
}
