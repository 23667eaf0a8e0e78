//! `slurm.conf`: its lines read into nodes, partitions, node sets, down nodes and the few
//! top-level parameters that describe the cluster (`ClusterName`, `GresTypes`,
//! `TopologyPlugin`).
//!
//! Lives here: each line's keys and values, `NodeName=DEFAULT` and `PartitionName=DEFAULT`
//! (each applies to the lines after it and adds to the defaults before it), and the node
//! layout (boards, sockets, cores, threads, CPUs). Not here: anything that needs more than
//! one line (duplicate nodes, partition members, GRES against `gres.conf`), which
//! [`crate::build`] checks.
//!
//! # CPUs and NUMA domains
//!
//! A cadre shape counts CPUs the way Slurm's `CPUs=` does: what the scheduler hands out,
//! threads when `CPUs` is the thread count (the default: `Boards x Sockets x CoresPerSocket
//! x ThreadsPerCore`), cores when a site sets `CPUs` to the core count to schedule whole
//! cores. Any other `CPUs` is refused. Core ids of the shape are Slurm's abstract CPU ids:
//! socket by socket, so that socket `s` holds CPUs `s*n .. (s+1)*n`.
//!
//! Each socket is one NUMA domain. When a line gives no layout at all (no `Boards`,
//! `Sockets`, `SocketsPerBoard`, `CoresPerSocket` or `ThreadsPerCore`, only `CPUs` or
//! nothing), Slurm infers one socket per CPU, which says nothing about the hardware; cadre
//! makes one NUMA domain instead.

use crate::Note;
use crate::error::{Item, Problem, SlurmConfError};
use crate::keys;
use crate::syntax::{Line, Loc, Pair};
use crate::values::{
    self, Fields, check_keys, count_u32, fields, positive, priority, time_limit, yes_no,
};
use cadre_core::cluster::NodeAvail;
use cadre_core::hostlist;
use cadre_core::time::Dur;

/// The largest CPU count of a node: cadre's core sets are sized by it.
pub(crate) const MAX_CPUS: u32 = 1 << 16;

/// `slurm.conf` as read.
#[derive(Debug, Default)]
pub(crate) struct SlurmConf {
    pub cluster_name: Option<Pair>,
    /// Lowercase GRES names.
    pub gres_types: Option<(Vec<String>, Pair)>,
    pub topology_plugin: Option<Pair>,
    pub nodes: Vec<NodeLine>,
    pub nodesets: Vec<NodeSetLine>,
    pub down: Vec<DownLine>,
    pub partitions: Vec<PartitionLine>,
}

/// A node's processors as `slurm.conf` lays them out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// What the scheduler hands out: cadre's cores.
    pub cpus: u32,
    pub sockets: u32,
    pub cores_per_socket: u32,
    /// NUMA domains of the shape: `sockets`, or 1 when the line gave no layout.
    pub numa: u32,
}

impl Layout {
    /// Physical cores (the ids `Cores=` of gres.conf counts).
    pub fn cores(&self) -> u32 {
        self.sockets * self.cores_per_socket
    }

    /// The NUMA domain of a physical core id.
    pub fn domain_of_core(&self, core: u32) -> u32 {
        self.domain_of_socket(core / self.cores_per_socket)
    }

    /// The NUMA domain of a CPU id (an id of the shape's cores).
    pub fn domain_of_cpu(&self, cpu: u32) -> u32 {
        self.domain_of_socket(cpu / (self.cpus / self.sockets))
    }

    fn domain_of_socket(&self, socket: u32) -> u32 {
        if self.numa == self.sockets { socket } else { 0 }
    }
}

/// One GRES of a node line: `gpu:a100:8`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GresSpec {
    /// Lowercase.
    pub name: String,
    /// As written.
    pub gtype: Option<String>,
    pub count: u64,
}

/// A NodeName line, with the defaults before it applied.
#[derive(Clone, Debug)]
pub(crate) struct NodeLine {
    pub at: Loc,
    pub item: Item,
    pub names: Vec<String>,
    pub layout: Layout,
    pub mem_mib: u64,
    pub gres: Vec<GresSpec>,
    /// Where `Gres=` was given (this line or a DEFAULT line).
    pub gres_at: Option<Loc>,
    pub features: Vec<String>,
    pub avail: NodeAvail,
    pub reason: Option<String>,
}

/// `NodeSet=name Nodes=... Feature=...`.
#[derive(Clone, Debug)]
pub(crate) struct NodeSetLine {
    pub at: Loc,
    pub item: Item,
    pub name: String,
    pub nodes: Option<Pair>,
    pub feature: Option<String>,
}

/// `DownNodes=... State=... Reason=...`.
#[derive(Clone, Debug)]
pub(crate) struct DownLine {
    pub item: Item,
    pub names: Pair,
    pub avail: NodeAvail,
    pub reason: Option<String>,
}

/// A PartitionName line, with the defaults before it applied.
#[derive(Clone, Debug)]
pub(crate) struct PartitionLine {
    pub at: Loc,
    pub item: Item,
    pub name: String,
    /// `Nodes=` as written (hostlists, node sets, `ALL`); `None` when not given.
    pub nodes: Option<Pair>,
    pub default: bool,
    pub max_time: Option<Dur>,
    pub default_time: Option<Dur>,
    pub up: bool,
    pub priority_tier: u32,
    pub priority_job_factor: u32,
}

/// Reads the lines of `slurm.conf` (its includes already in place).
pub(crate) fn read(lines: &[Line], notes: &mut Vec<Note>) -> Result<SlurmConf, SlurmConfError> {
    let mut conf = SlurmConf::default();
    let mut node_defaults = Fields::new();
    let mut partition_defaults = Fields::new();
    for line in lines {
        let head = line.head();
        for p in &line.pairs[1..] {
            if [
                "nodename",
                "partitionname",
                "nodeset",
                "downnodes",
                "frontendname",
            ]
            .contains(&p.key.to_ascii_lowercase().as_str())
            {
                return Err(p.at.error(Problem::MisplacedHead {
                    item: Item::none(),
                    key: p.key.clone(),
                }));
            }
        }
        match head.key.to_ascii_lowercase().as_str() {
            "nodename" => {
                let item = Item::of("NodeName", &head.value);
                check_keys(keys::NODE, &line.pairs, &item, notes)?;
                let own = fields(&line.pairs, &item)?;
                if head.value.eq_ignore_ascii_case("default") {
                    node_defaults.extend(own.into_iter().filter(|(k, _)| k != "nodename"));
                    continue;
                }
                let mut all = node_defaults.clone();
                all.extend(own);
                conf.nodes.push(node_line(line, item, &all, notes)?);
            }
            "partitionname" => {
                let item = Item::of("PartitionName", &head.value);
                check_keys(keys::PARTITION, &line.pairs, &item, notes)?;
                let own = fields(&line.pairs, &item)?;
                if head.value.eq_ignore_ascii_case("default") {
                    partition_defaults
                        .extend(own.into_iter().filter(|(k, _)| k != "partitionname"));
                    continue;
                }
                let mut all = partition_defaults.clone();
                all.extend(own);
                conf.partitions
                    .push(partition_line(line, item, &all, notes)?);
            }
            "nodeset" => conf.nodesets.push(nodeset_line(line)?),
            "downnodes" => conf.down.push(down_line(line)?),
            "frontendname" => {
                return Err(head.at.error(Problem::Refused {
                    item: Item::none(),
                    key: head.key.clone(),
                    why: "front-end nodes are not supported; cadre runs batch scripts on \
                          the job's first node",
                }));
            }
            _ => {
                check_keys(keys::GLOBAL, &line.pairs, &Item::none(), notes)?;
                for p in &line.pairs {
                    global(&mut conf, p)?;
                }
            }
        }
    }
    Ok(conf)
}

fn global(conf: &mut SlurmConf, p: &Pair) -> Result<(), SlurmConfError> {
    let twice = |p: &Pair| {
        p.at.error(Problem::DuplicateKey {
            item: Item::none(),
            key: p.key.clone(),
        })
    };
    match p.key.to_ascii_lowercase().as_str() {
        "clustername" => {
            if conf.cluster_name.is_some() {
                return Err(twice(p));
            }
            let name = p.value.trim();
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(p.at.error(Problem::BadClusterName {
                    name: p.value.clone(),
                }));
            }
            conf.cluster_name = Some(p.clone());
        }
        "grestypes" => {
            if conf.gres_types.is_some() {
                return Err(twice(p));
            }
            let names = values::list(&p.value)
                .into_iter()
                .map(|n| n.to_ascii_lowercase())
                .collect();
            conf.gres_types = Some((names, p.clone()));
        }
        "topologyplugin" => {
            if conf.topology_plugin.is_some() {
                return Err(twice(p));
            }
            conf.topology_plugin = Some(p.clone());
        }
        _ => {}
    }
    Ok(())
}

fn node_line(
    line: &Line,
    item: Item,
    f: &Fields,
    notes: &mut Vec<Note>,
) -> Result<NodeLine, SlurmConfError> {
    let head = line.head();
    let names = hostlist::expand(&head.value).map_err(|error| {
        head.at.error(Problem::Hostlist {
            item: item.clone(),
            key: head.key.clone(),
            error,
        })
    })?;
    if names.is_empty() {
        return Err(head.at.error(Problem::NoNodeNames { item }));
    }
    if names.iter().any(|n| n.eq_ignore_ascii_case("all")) {
        return Err(head.at.error(Problem::NodeNamedAll));
    }
    let layout = layout(line, &item, f)?;
    let mem_mib = match f.get("realmemory") {
        Some(p) => positive(p, &item)?,
        // Slurm's default: one megabyte.
        None => 1,
    };
    let gres = match f.get("gres") {
        Some(p) => gres_list(p, &item)?,
        None => Vec::new(),
    };
    let features = match (f.get("features"), f.get("availablefeatures")) {
        (Some(a), Some(b)) => return Err(same_setting(&item, a, b)),
        (Some(p), None) | (None, Some(p)) => {
            let list = values::list(&p.value);
            if let Some(bad) = list.iter().find(|f| !values::valid_feature(f)) {
                return Err(p.at.error(Problem::BadFeature {
                    item,
                    feature: bad.clone(),
                }));
            }
            list
        }
        (None, None) => Vec::new(),
    };
    let avail = match f.get("state") {
        Some(p) => node_state(p, &item, false)?,
        None => NodeAvail::Up,
    };
    let mut reason = f.get("reason").map(|p| p.value.clone());
    if avail == NodeAvail::Up {
        if let Some(p) = f.get("reason") {
            notes.push(Note {
                at: p.at.location(),
                message: format!("{item}Reason is ignored: the node is not down or drained"),
            });
            reason = None;
        }
    }
    Ok(NodeLine {
        at: line.at.clone(),
        item,
        names,
        layout,
        mem_mib,
        gres,
        gres_at: f.get("gres").map(|p| p.at.clone()),
        features,
        avail,
        reason,
    })
}

/// Two names of one setting (`CPUs` and `Procs`) both given: an error at the later one.
fn same_setting(item: &Item, a: &Pair, b: &Pair) -> SlurmConfError {
    let (first, later) = if (a.at.line, a.key.len()) <= (b.at.line, b.key.len()) {
        (a, b)
    } else {
        (b, a)
    };
    later.at.error(Problem::SameSetting {
        item: item.clone(),
        key: first.key.clone(),
        other: later.key.clone(),
    })
}

/// Boards, sockets, cores, threads and CPUs, as described in the module documentation.
fn layout(line: &Line, item: &Item, f: &Fields) -> Result<Layout, SlurmConfError> {
    let get = |k: &str| f.get(k).map(|p| count_u32(p, item)).transpose();
    let cpus_pair = match (f.get("cpus"), f.get("procs")) {
        (Some(a), Some(b)) => return Err(same_setting(item, a, b)),
        (a, b) => a.or(b),
    };
    let cpus = cpus_pair.map(|p| count_u32(p, item)).transpose()?;
    let boards = get("boards")?;
    let sockets_per_board = get("socketsperboard")?;
    let sockets = get("sockets")?;
    let cores = get("corespersocket")?;
    let threads = get("threadspercore")?;
    if sockets.is_some() && sockets_per_board.is_some() {
        let p = &f["socketsperboard"];
        return Err(p
            .at
            .error(Problem::SocketsAndSocketsPerBoard { item: item.clone() }));
    }
    let described = boards.is_some()
        || sockets_per_board.is_some()
        || sockets.is_some()
        || cores.is_some()
        || threads.is_some();
    let boards_n = u64::from(boards.unwrap_or(1));
    let cores_n = u64::from(cores.unwrap_or(1));
    let threads_n = u64::from(threads.unwrap_or(1));
    let at = cpus_pair.map_or(&line.at, |p| &p.at);
    let socket_count: u64 = match (sockets_per_board, sockets) {
        (Some(s), _) => boards_n * u64::from(s),
        // With Boards, Sockets is the count per board (Slurm's rule).
        (None, Some(s)) => boards_n * u64::from(s),
        (None, None) => match cpus {
            Some(c) => {
                let c = u64::from(c);
                let per_socket_threads = boards_n * cores_n * threads_n;
                let per_socket_cores = boards_n * cores_n;
                if c % per_socket_threads == 0 {
                    boards_n * (c / per_socket_threads)
                } else if c % per_socket_cores == 0 {
                    boards_n * (c / per_socket_cores)
                } else {
                    return Err(at.error(Problem::CpusNotWholeSockets {
                        item: item.clone(),
                        cpus: c as u32,
                        cores: cores_n as u32,
                        threads_per_core: threads_n as u32,
                    }));
                }
            }
            None => boards_n,
        },
    };
    let threads_total = socket_count * cores_n * threads_n;
    let cores_total = socket_count * cores_n;
    if threads_total > u64::from(MAX_CPUS) {
        return Err(at.error(Problem::TooManyCpus {
            item: item.clone(),
            count: threads_total,
            limit: MAX_CPUS,
        }));
    }
    let cpus = match cpus {
        None => threads_total,
        Some(c) if u64::from(c) == threads_total || u64::from(c) == cores_total => u64::from(c),
        Some(c) => {
            return Err(at.error(Problem::CpusMismatch {
                item: item.clone(),
                cpus: c,
                sockets: socket_count as u32,
                cores: cores_n as u32,
                threads_per_core: threads_n as u32,
                threads: threads_total as u32,
                physical: cores_total as u32,
            }));
        }
    };
    let sockets = socket_count as u32;
    Ok(Layout {
        cpus: cpus as u32,
        sockets,
        cores_per_socket: cores_n as u32,
        numa: if described { sockets } else { 1 },
    })
}

/// `Gres=gpu:a100:8,nvme:2`.
fn gres_list(p: &Pair, item: &Item) -> Result<Vec<GresSpec>, SlurmConfError> {
    let mut out: Vec<GresSpec> = Vec::new();
    for spec in values::list(&p.value) {
        let err = |problem: Problem| p.at.error(problem);
        if spec.contains('(') {
            return Err(err(Problem::GresSocketAffinity {
                item: item.clone(),
                spec,
            }));
        }
        let parts: Vec<&str> = spec.split(':').collect();
        let bad = || {
            err(Problem::BadGres {
                item: item.clone(),
                spec: spec.clone(),
            })
        };
        if parts.len() < 2 || parts.len() > 4 || parts.iter().any(|s| s.trim().is_empty()) {
            return Err(bad());
        }
        let name = parts[0].trim().to_ascii_lowercase();
        let count = values::suffixed_count(parts[parts.len() - 1]).ok_or_else(bad)?;
        let middle = &parts[1..parts.len() - 1];
        if middle.iter().any(|m| m.eq_ignore_ascii_case("no_consume")) {
            return Err(err(Problem::GresNoConsume {
                item: item.clone(),
                spec,
            }));
        }
        let gtype = match middle {
            [] => None,
            [t] => Some(t.trim().to_string()),
            _ => return Err(bad()),
        };
        if name == "mps" || name == "shard" {
            return Err(err(Problem::GresSharing {
                item: item.clone(),
                name,
            }));
        }
        if gtype.is_some() && name != "gpu" {
            return Err(err(Problem::GresTypedNotGpu {
                item: item.clone(),
                spec,
            }));
        }
        if let Some(other) = out.iter().find(|g| g.name == name) {
            if other.gtype.is_some() != gtype.is_some() {
                return Err(err(Problem::GresTypedAndUntyped {
                    item: item.clone(),
                    name,
                }));
            }
            if other.gtype == gtype {
                return Err(err(Problem::GresTwice {
                    item: item.clone(),
                    spec,
                }));
            }
        }
        out.push(GresSpec { name, gtype, count });
    }
    Ok(out)
}

/// A node's `State=` (NodeName lines) or a DownNodes line's.
fn node_state(p: &Pair, item: &Item, down_line: bool) -> Result<NodeAvail, SlurmConfError> {
    match p.value.trim().to_ascii_lowercase().as_str() {
        "unknown" | "idle" if !down_line => Ok(NodeAvail::Up),
        "down" => Ok(NodeAvail::Down),
        // FAIL and FAILING take no new work, as a drained node.
        "drain" | "fail" | "failing" => Ok(NodeAvail::Drain),
        "future" | "cloud" => Err(p.at.error(Problem::RefusedValue {
            item: item.clone(),
            key: p.key.clone(),
            value: p.value.clone(),
            why: "cadre has no future or cloud nodes; describe the nodes that exist, or \
                  give them State=DOWN",
        })),
        _ => Err(p.at.error(Problem::BadValue {
            item: item.clone(),
            key: p.key.clone(),
            value: p.value.clone(),
            expected: if down_line {
                "expected DOWN, DRAIN, FAIL or FAILING"
            } else {
                "expected UNKNOWN, DOWN, DRAIN, FAIL or FAILING"
            },
        })),
    }
}

fn partition_line(
    line: &Line,
    item: Item,
    f: &Fields,
    notes: &mut Vec<Note>,
) -> Result<PartitionLine, SlurmConfError> {
    let head = line.head();
    let name = head.value.trim().to_string();
    if !values::valid_name(&name) {
        return Err(head.at.error(Problem::BadPartitionName { item, name }));
    }
    let default = f.get("default").map(|p| yes_no(p, &item)).transpose()?;
    let max_time = f.get("maxtime").map(|p| time_limit(p, &item)).transpose()?;
    let default_time = f
        .get("defaulttime")
        .map(|p| time_limit(p, &item))
        .transpose()?;
    if let (Some(Some(d)), Some(Some(m))) = (default_time, max_time) {
        if d > m {
            return Err(f["defaulttime"].at.error(Problem::DefaultAboveMax {
                item,
                default_time: f["defaulttime"].value.clone(),
                max_time: f["maxtime"].value.clone(),
            }));
        }
    }
    let up = match f.get("state") {
        None => true,
        Some(p) => match p.value.trim().to_ascii_lowercase().as_str() {
            "up" => true,
            "down" => false,
            "drain" => {
                notes.push(Note {
                    at: p.at.location(),
                    message: format!(
                        "{item}State=DRAIN: cadre runs the partition's jobs as when it is up \
                         and does not refuse new submissions to it (Slurm does)"
                    ),
                });
                true
            }
            "inactive" => {
                notes.push(Note {
                    at: p.at.location(),
                    message: format!(
                        "{item}State=INACTIVE: the partition is down in cadre (its jobs do \
                         not start); new submissions wait instead of being refused"
                    ),
                });
                false
            }
            _ => {
                return Err(p.at.error(Problem::BadValue {
                    item,
                    key: p.key.clone(),
                    value: p.value.clone(),
                    expected: "expected UP, DOWN, DRAIN or INACTIVE",
                }));
            }
        },
    };
    // `Priority` is the older name that set both; the newer keys win where given.
    let legacy = f.get("priority").map(|p| priority(p, &item)).transpose()?;
    let tier = f
        .get("prioritytier")
        .map(|p| priority(p, &item))
        .transpose()?;
    let factor = f
        .get("priorityjobfactor")
        .map(|p| priority(p, &item))
        .transpose()?;
    Ok(PartitionLine {
        at: line.at.clone(),
        name,
        nodes: f.get("nodes").cloned(),
        default: default.unwrap_or(false),
        max_time: max_time.flatten(),
        // Slurm: without DefaultTime, a job that gives no time limit gets MaxTime.
        default_time: match default_time {
            Some(given) => given,
            None => max_time.flatten(),
        },
        up,
        priority_tier: tier.or(legacy).unwrap_or(1),
        priority_job_factor: factor.or(legacy).unwrap_or(1),
        item,
    })
}

fn nodeset_line(line: &Line) -> Result<NodeSetLine, SlurmConfError> {
    let head = line.head();
    let item = Item::of("NodeSet", &head.value);
    let f = fields(&line.pairs, &item)?;
    for p in &line.pairs[1..] {
        if !p.is("Nodes") && !p.is("Feature") {
            return Err(p.at.error(Problem::UnknownKey {
                item,
                key: p.key.clone(),
            }));
        }
    }
    let name = head.value.trim().to_string();
    if !values::valid_name(&name) {
        return Err(head.at.error(Problem::BadName { item }));
    }
    Ok(NodeSetLine {
        at: line.at.clone(),
        name,
        nodes: f.get("nodes").cloned(),
        feature: f.get("feature").map(|p| p.value.trim().to_string()),
        item,
    })
}

fn down_line(line: &Line) -> Result<DownLine, SlurmConfError> {
    let head = line.head();
    let item = Item::of("DownNodes", &head.value);
    let f = fields(&line.pairs, &item)?;
    for p in &line.pairs[1..] {
        if !p.is("State") && !p.is("Reason") {
            return Err(p.at.error(Problem::UnknownKey {
                item,
                key: p.key.clone(),
            }));
        }
    }
    let avail = match f.get("state") {
        Some(p) => node_state(p, &item, true)?,
        None => NodeAvail::Down,
    };
    Ok(DownLine {
        names: head.clone(),
        avail,
        reason: f.get("reason").map(|p| p.value.clone()),
        item,
    })
}
