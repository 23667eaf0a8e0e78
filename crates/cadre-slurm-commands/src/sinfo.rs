//! `sinfo`: partitions and nodes, with Slurm's options, formats and exit codes.
//!
//! Nodes come from `GET /nodes`, partitions from `GET /partitions`. As in Slurm, each line
//! is a record: the nodes of one partition (or, with `-N`, one node) that show the same
//! value in every displayed field other than the node list and the counts, so that
//! `sinfo -o "%P %D"` gives one line per partition and the default format one per state.
//! Records are ordered by partition as configured, then by state (mixed, allocated,
//! idle, down, unknown), as Slurm's default sort `#P,-t`; with `-N`, by node name.
//!
//! GPUs are GRES `gpu:N`; GPUs that are declared (`cadre up --gpus-per-node` on a machine
//! without GPUs) rather than discovered are `gpu:emulated:N`: a GRES type, which is how
//! Slurm tells kinds of GPUs apart, so tools that read `gpu[:type]:count` still parse it and
//! no one takes emulated GPUs for real ones. A node whose agent is not connected has the
//! not-responding suffix `*` on its state, as in Slurm.
//!
//! What cadre does not track is shown as Slurm shows an unset value: CPU load and free
//! memory `N/A`, reason time stamps and users `Unknown`, no groups restriction (`all`).

use super::format::{self, Layout, parse_names, parse_percent};
use super::query::{self, Opt};
use cadre_proto::api::{NodeList, NodeView, PartitionList, PartitionView};
use cadre_proto::exit;
use cadre_slurm::getopt::ArgKind;
use cadre_slurm::time::format_duration_short;
use std::ffi::OsString;
use std::process::ExitCode;

const CMD: &str = "sinfo";

const OPTIONS: &[Opt] = &[
    Opt::new('a', "all", ArgKind::None),
    Opt::new('d', "dead", ArgKind::None),
    Opt::new('e', "exact", ArgKind::None),
    Opt::new('o', "format", ArgKind::Required),
    Opt::new('O', "Format", ArgKind::Required),
    Opt::long("help", ArgKind::None),
    Opt::long("hide", ArgKind::None),
    Opt::long("json", ArgKind::None),
    Opt::new('R', "list-reasons", ArgKind::None),
    Opt::long("local", ArgKind::None),
    Opt::new('l', "long", ArgKind::None),
    Opt::long("noconvert", ArgKind::None),
    Opt::new('N', "Node", ArgKind::None),
    Opt::new('n', "nodes", ArgKind::Required),
    Opt::new('h', "noheader", ArgKind::None),
    Opt::new('p', "partition", ArgKind::Required),
    Opt::new('r', "responding", ArgKind::None),
    Opt::new('S', "sort", ArgKind::Required),
    Opt::new('t', "states", ArgKind::Required),
    Opt::new('s', "summarize", ArgKind::None),
    Opt::long("usage", ArgKind::None),
    Opt::new('v', "verbose", ArgKind::None),
    Opt::new('V', "version", ArgKind::None),
];

const DEFAULT_FORMAT: &str = "%#P %.5a %.10l %.6D %.6t %N";
// sinfo(1) documents two spaces before the node list; Slurm 22.05 prints one.
const SUMMARIZE_FORMAT: &str = "%#P %.5a %.10l %.16F %N";
const LONG_FORMAT: &str = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N";
// As Slurm 22.05 prints them: in node-oriented output the partition is right-justified
// and the CPU count left-justified.
const NODE_FORMAT: &str = "%#N %.6D %.#P %6t";
const NODE_LONG_FORMAT: &str = "%#N %.6D %.#P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E";
const REASONS_FORMAT: &str = "%20E %9u %19H %N";
const REASONS_LONG_FORMAT: &str = "%20E %12U %19H %6t %N";

/// What a column shows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    Avail,
    NodesAi,
    FeaturesActive,
    MaxCpus,
    Cpus,
    CpusState,
    Disk,
    Nodes,
    FreeMem,
    Reason,
    Features,
    NodesAiot,
    Groups,
    Gres,
    GresUsed,
    OverSubscribe,
    Timestamp,
    PrioJobFactor,
    TimeLimit,
    DefaultTime,
    Memory,
    AllocMem,
    PreemptMode,
    Hostnames,
    NodeList,
    NodeAddr,
    CpuLoad,
    PrioTier,
    Partition,
    Root,
    PartitionName,
    Size,
    StateCompact,
    StateLong,
    StateComplete,
    User,
    UserLong,
    Version,
    Weight,
    Sockets,
    Cores,
    Threads,
    Sct,
}

fn letter(c: char) -> Option<Field> {
    use Field::*;
    Some(match c {
        'a' => Avail,
        'A' => NodesAi,
        'b' => FeaturesActive,
        'B' => MaxCpus,
        'c' => Cpus,
        'C' => CpusState,
        'd' => Disk,
        'D' => Nodes,
        'e' => FreeMem,
        'E' => Reason,
        'f' => Features,
        'F' => NodesAiot,
        'g' => Groups,
        'G' => Gres,
        'h' => OverSubscribe,
        'H' => Timestamp,
        'I' => PrioJobFactor,
        'l' => TimeLimit,
        'L' => DefaultTime,
        'm' => Memory,
        'M' => PreemptMode,
        'n' => Hostnames,
        'N' => NodeList,
        'o' => NodeAddr,
        'O' => CpuLoad,
        'p' => PrioTier,
        'P' => Partition,
        'r' => Root,
        'R' => PartitionName,
        's' => Size,
        't' => StateCompact,
        'T' => StateLong,
        'u' => User,
        'U' => UserLong,
        'v' => Version,
        'w' => Weight,
        'X' => Sockets,
        'Y' => Cores,
        'Z' => Threads,
        'z' => Sct,
        _ => return None,
    })
}

fn named(name: &str) -> Option<Field> {
    use Field::*;
    Some(match name {
        "available" => Avail,
        "nodeai" => NodesAi,
        "features_act" => FeaturesActive,
        "maxcpuspernode" => MaxCpus,
        "cpus" => Cpus,
        "cpusstate" => CpusState,
        "disk" => Disk,
        "nodes" => Nodes,
        "freemem" => FreeMem,
        "reason" => Reason,
        "features" => Features,
        "nodeaiot" => NodesAiot,
        "groups" => Groups,
        "gres" => Gres,
        "gresused" => GresUsed,
        "oversubscribe" => OverSubscribe,
        "timestamp" => Timestamp,
        "priorityjobfactor" => PrioJobFactor,
        "time" => TimeLimit,
        "defaulttime" => DefaultTime,
        "memory" => Memory,
        "allocmem" => AllocMem,
        "preemptmode" => PreemptMode,
        "nodehost" => Hostnames,
        "nodelist" => NodeList,
        "nodeaddr" => NodeAddr,
        "cpusload" => CpuLoad,
        "prioritytier" => PrioTier,
        "partition" => Partition,
        "root" => Root,
        "partitionname" => PartitionName,
        "size" => Size,
        "statecompact" => StateCompact,
        "statelong" => StateLong,
        "statecomplete" => StateComplete,
        "user" => User,
        "userlong" => UserLong,
        "version" => Version,
        "weight" => Weight,
        "sockets" => Sockets,
        "cores" => Cores,
        "threads" => Threads,
        "socketcorethread" => Sct,
        _ => return None,
    })
}

fn header(f: Field) -> &'static str {
    use Field::*;
    match f {
        Avail => "AVAIL",
        NodesAi => "NODES(A/I)",
        FeaturesActive => "ACTIVE_FEATURES",
        MaxCpus => "MAX_CPUS_PER_NODE",
        Cpus => "CPUS",
        CpusState => "CPUS(A/I/O/T)",
        Disk => "TMP_DISK",
        Nodes => "NODES",
        FreeMem => "FREE_MEM",
        Reason => "REASON",
        Features => "AVAIL_FEATURES",
        NodesAiot => "NODES(A/I/O/T)",
        Groups => "GROUPS",
        Gres => "GRES",
        GresUsed => "GRES_USED",
        OverSubscribe => "OVERSUBSCRIBE",
        Timestamp => "TIMESTAMP",
        PrioJobFactor => "PRIO_JOB_FACTOR",
        TimeLimit => "TIMELIMIT",
        DefaultTime => "DEFAULTTIME",
        Memory => "MEMORY",
        AllocMem => "ALLOCMEM",
        PreemptMode => "PREEMPT_MODE",
        Hostnames => "HOSTNAMES",
        NodeList => "NODELIST",
        NodeAddr => "NODE_ADDR",
        CpuLoad => "CPU_LOAD",
        PrioTier => "PRIO_TIER",
        Partition | PartitionName => "PARTITION",
        Root => "ROOT",
        Size => "JOB_SIZE",
        StateCompact | StateLong => "STATE",
        StateComplete => "STATECOMPLETE",
        User | UserLong => "USER",
        Version => "VERSION",
        Weight => "WEIGHT",
        Sockets => "SOCKETS",
        Cores => "CORES",
        Threads => "THREADS",
        Sct => "S:C:T",
    }
}

/// Fields that sum or list the nodes of a record rather than describe each of them.
fn aggregates(f: Field) -> bool {
    matches!(
        f,
        Field::NodeList
            | Field::Nodes
            | Field::CpusState
            | Field::NodesAi
            | Field::NodesAiot
            | Field::Hostnames
            | Field::NodeAddr
    )
}

/// Whether a node counts as allocated, idle or other (`%A`, `%F`, `%C`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Use {
    Allocated,
    Idle,
    Other,
}

fn node_use(n: &NodeView) -> Use {
    match n.state.as_str() {
        "allocated" | "mixed" => Use::Allocated,
        "idle" => Use::Idle,
        _ => Use::Other,
    }
}

/// Slurm's compact and long names of a node state, with `*` when not responding.
fn state_names(n: &NodeView) -> (String, String) {
    let (short, long) = match n.state.as_str() {
        "idle" => ("idle", "idle"),
        "mixed" => ("mix", "mixed"),
        "allocated" => ("alloc", "allocated"),
        "draining" => ("drng", "draining"),
        "drained" => ("drain", "drained"),
        "down" => ("down", "down"),
        _ => ("unk", "unknown"),
    };
    let star = if n.connected { "" } else { "*" };
    (format!("{short}{star}"), format!("{long}{star}"))
}

/// Where a state sorts: Slurm's base states, the busiest first (`-t` descending).
fn state_rank(n: &NodeView) -> u8 {
    match n.state.as_str() {
        "mixed" => 5,
        "allocated" | "draining" => 3,
        "idle" | "drained" => 2,
        "down" => 1,
        _ => 0,
    }
}

/// One line: some nodes, of one partition (or of none, for `-R`).
#[derive(Clone, Debug)]
pub(crate) struct Record<'a> {
    pub partition: Option<&'a PartitionView>,
    pub nodes: Vec<&'a NodeView>,
}

fn gres(n: &NodeView) -> String {
    if n.gpus == 0 {
        "(null)".into()
    } else {
        format::gpu_gres(n.gpus, n.emulated_gpus)
    }
}

fn gres_used(n: &NodeView) -> String {
    if n.gpus == 0 {
        return "(null)".into();
    }
    let used = format::whole_gpus(n.gpus_alloc);
    let kind = if n.emulated_gpus {
        "gpu:emulated"
    } else {
        "gpu"
    };
    format!("{kind}:{used}")
}

/// A field's value for a record.
pub(crate) fn value(r: &Record<'_>, f: Field) -> String {
    use Field::*;
    let Some(first) = r.nodes.first() else {
        return String::new();
    };
    let part = r.partition;
    let count = |u: Use| r.nodes.iter().filter(|n| node_use(n) == u).count();
    let names: Vec<&str> = r.nodes.iter().map(|n| n.name.as_str()).collect();
    let features = if first.features.is_empty() {
        "(null)".into()
    } else {
        first.features.join(",")
    };
    match f {
        Avail => part
            .map_or("up", |p| if p.up { "up" } else { "down" })
            .into(),
        NodesAi => format!("{}/{}", count(Use::Allocated), count(Use::Idle)),
        NodesAiot => format!(
            "{}/{}/{}/{}",
            count(Use::Allocated),
            count(Use::Idle),
            count(Use::Other),
            r.nodes.len()
        ),
        CpusState => {
            let (mut a, mut i, mut o, mut t) = (0, 0, 0, 0);
            for n in &r.nodes {
                t += n.cpus;
                if node_use(n) == Use::Other {
                    o += n.cpus;
                } else {
                    a += n.cpus_alloc;
                    i += n.cpus.saturating_sub(n.cpus_alloc);
                }
            }
            format!("{a}/{i}/{o}/{t}")
        }
        Features | FeaturesActive => features,
        MaxCpus => "UNLIMITED".into(),
        Cpus => first.cpus.to_string(),
        Disk => "0".into(),
        Nodes => r.nodes.len().to_string(),
        FreeMem | CpuLoad => "N/A".into(),
        Reason => first.reason.clone().unwrap_or_else(|| "none".into()),
        Groups => "all".into(),
        Gres => gres(first),
        GresUsed => gres_used(first),
        OverSubscribe => "NO".into(),
        Timestamp | User => "Unknown".into(),
        UserLong => "Unknown".into(),
        PrioJobFactor => "1".into(),
        TimeLimit => part
            .and_then(|p| p.max_time)
            .map_or_else(|| "infinite".into(), format_duration_short),
        DefaultTime => part
            .and_then(|p| p.default_time)
            .map_or_else(|| "n/a".into(), format_duration_short),
        Memory => first.memory_mib.to_string(),
        AllocMem => first.memory_alloc_mib.to_string(),
        PreemptMode => "OFF".into(),
        Hostnames | NodeList | NodeAddr => cadre_core::hostlist::compress(&names),
        PrioTier => part.map_or(1, |p| p.priority_tier).to_string(),
        Partition => part.map_or_else(String::new, |p| {
            if p.default {
                format!("{}*", p.name)
            } else {
                p.name.clone()
            }
        }),
        PartitionName => part.map_or_else(String::new, |p| p.name.clone()),
        Root => "no".into(),
        Size => "1-infinite".into(),
        StateCompact => state_names(first).0,
        StateLong => state_names(first).1,
        StateComplete => {
            let base = match first.state.as_str() {
                "draining" => "mixed+drain",
                "drained" => "idle+drain",
                "mixed" | "allocated" | "idle" | "down" => first.state.as_str(),
                _ => "unknown",
            };
            if first.connected {
                base.to_owned()
            } else {
                format!("{base}+not_responding")
            }
        }
        Version => query::SLURM_VERSION.into(),
        Weight => "1".into(),
        Sockets | Threads => "1".into(),
        Cores => first.cpus.to_string(),
        Sct => format!("1:{}:1", first.cpus),
    }
}

/// What to show, from the command line.
#[derive(Clone, Debug, Default)]
pub(crate) struct Selection {
    pub partitions: Vec<String>,
    pub nodes: Vec<String>,
    /// Node states, any of which a node must be in (Slurm's names, lower case).
    pub states: Vec<String>,
    pub responding: bool,
    pub dead: bool,
    /// `-R`: only nodes with a reason (down, drained, draining).
    pub reasons: bool,
}

/// The state names `-t` takes, and which node states each stands for.
fn state_matches(name: &str, n: &NodeView) -> Option<bool> {
    let s = n.state.as_str();
    Some(match name {
        "alloc" | "allocated" => s == "allocated",
        "mix" | "mixed" => s == "mixed",
        "idle" => s == "idle",
        "drain" => s == "drained" || s == "draining",
        "drained" => s == "drained",
        "draining" | "drng" => s == "draining",
        "down" => s == "down",
        "unk" | "unknown" => s == "unknown",
        "no_respond" => !n.connected,
        "fail" | "failing" | "future" | "futr" | "maint" | "comp" | "completing" | "planned"
        | "reserved" | "resv" | "cloud" | "power_down" | "powered_down" | "powering_down"
        | "powering_up" | "reboot_issued" | "reboot_requested" | "npc" | "perfctrs" | "inval" => {
            false
        }
        _ => return None,
    })
}

impl Selection {
    fn keeps(&self, n: &NodeView) -> bool {
        (self.nodes.is_empty() || self.nodes.contains(&n.name))
            && (self.states.is_empty()
                || self
                    .states
                    .iter()
                    .any(|s| state_matches(s, n).unwrap_or(false)))
            && (!self.responding || n.connected)
            && (!self.dead || !n.connected)
            && (!self.reasons || matches!(n.state.as_str(), "down" | "drained" | "draining"))
    }
}

/// The records to print: per partition (as configured) and per group of nodes alike in
/// every non-aggregate field of `layout`, or per node with `per_node`, or per reason with
/// `sel.reasons`.
pub(crate) fn records<'a>(
    layout: &Layout<Field>,
    parts: &'a [PartitionView],
    nodes: &'a [NodeView],
    sel: &Selection,
    per_node: bool,
) -> Vec<Record<'a>> {
    let shown: Vec<Field> = layout.kinds().filter(|&f| !aggregates(f)).collect();
    let key = |part: Option<&'a PartitionView>, n: &'a NodeView| -> Vec<String> {
        let one = Record {
            partition: part,
            nodes: vec![n],
        };
        shown.iter().map(|&f| value(&one, f)).collect()
    };
    let mut out: Vec<Record<'a>> = Vec::new();
    if sel.reasons {
        let mut keys: Vec<Vec<String>> = Vec::new();
        for n in nodes.iter().filter(|n| sel.keeps(n)) {
            let k = key(None, n);
            match keys.iter().position(|x| *x == k) {
                Some(i) => out[i].nodes.push(n),
                None => {
                    keys.push(k);
                    out.push(Record {
                        partition: None,
                        nodes: vec![n],
                    });
                }
            }
        }
        return out;
    }
    let parts: Vec<&PartitionView> = parts
        .iter()
        .filter(|p| sel.partitions.is_empty() || sel.partitions.contains(&p.name))
        .collect();
    if per_node {
        let mut sorted: Vec<&NodeView> = nodes.iter().filter(|n| sel.keeps(n)).collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        for n in sorted {
            for p in parts.iter().filter(|p| n.partitions.contains(&p.name)) {
                out.push(Record {
                    partition: Some(p),
                    nodes: vec![n],
                });
            }
        }
        return out;
    }
    for p in parts {
        let mut groups: Vec<(Vec<String>, Record<'a>)> = Vec::new();
        for n in nodes
            .iter()
            .filter(|n| n.partitions.contains(&p.name) && sel.keeps(n))
        {
            let k = key(Some(p), n);
            match groups.iter_mut().find(|(x, _)| *x == k) {
                Some((_, r)) => r.nodes.push(n),
                None => groups.push((
                    k,
                    Record {
                        partition: Some(p),
                        nodes: vec![n],
                    },
                )),
            }
        }
        groups.sort_by_key(|(_, r)| std::cmp::Reverse(state_rank(r.nodes[0])));
        out.extend(groups.into_iter().map(|(_, r)| r));
    }
    out
}

/// The lines sinfo prints for `records` (the `%#` widths fitted to them).
pub(crate) fn render(layout: &Layout<Field>, records: &[Record<'_>], header: bool) -> Vec<String> {
    let mut layout = layout.clone();
    layout.fit(|f, i| value(&records[i], f), records.len());
    let mut out = Vec::with_capacity(records.len() + 1);
    if header {
        out.push(layout.render(|f| self::header(f).to_string()));
    }
    for r in records {
        out.push(layout.render(|f| value(r, f)));
    }
    out
}

fn json(nodes: &[NodeView]) -> serde_json::Value {
    let nodes: Vec<serde_json::Value> = nodes
        .iter()
        .map(|n| {
            serde_json::json!({
                "name": n.name,
                "hostname": n.name,
                "state": n.state,
                "partitions": n.partitions,
                "cpus": n.cpus,
                "alloc_cpus": n.cpus_alloc,
                "real_memory": n.memory_mib,
                "alloc_memory": n.memory_alloc_mib,
                "gres": gres(n),
                "gres_used": gres_used(n),
                "features": n.features.join(","),
                "reason": n.reason.clone().unwrap_or_default(),
            })
        })
        .collect();
    serde_json::json!({ "nodes": nodes })
}

fn usage() -> ExitCode {
    println!(
        "Usage: sinfo [-adelNRrsTv] [-i seconds] [-t states] [-p partition] [-n nodes]\n             [-S fields] [-o format] [-O Format] [--federation] [--local]\n             [--json] [--yaml]"
    );
    ExitCode::SUCCESS
}

/// `sinfo [OPTIONS]`.
pub fn run(args: Vec<OsString>) -> ExitCode {
    let p = match query::begin(CMD, args, OPTIONS, usage) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let env = query::env_var;
    let mut sel = Selection {
        partitions: p
            .value("partition")
            .map(str::to_owned)
            .or_else(|| env("SINFO_PARTITION"))
            .map(|s| query::list(&s))
            .unwrap_or_default(),
        responding: p.has("responding"),
        dead: p.has("dead"),
        reasons: p.has("list-reasons"),
        ..Selection::default()
    };
    if let Some(n) = p.value("nodes") {
        match cadre_core::hostlist::expand(n) {
            Ok(names) => sel.nodes = names,
            Err(e) => return query::fail(CMD, format!("Invalid node list: {e}")),
        }
    }
    if let Some(t) = p.value("states") {
        let probe = NodeView {
            name: String::new(),
            state: "idle".into(),
            avail: cadre_core::cluster::NodeAvail::Up,
            reason: None,
            connected: true,
            partitions: Vec::new(),
            cpus: 0,
            cpus_alloc: 0,
            memory_mib: 0,
            memory_alloc_mib: 0,
            gpus: 0,
            gpus_alloc: 0.0,
            gpu_model: None,
            emulated_gpus: false,
            features: Vec::new(),
            container_runtime: None,
            address: None,
            agent_version: None,
            agent_protocol: None,
            last_heard: None,
            cert_expires: None,
            health: None,
        };
        for s in t.split([',', '&']).filter(|s| !s.is_empty()) {
            let s = s.to_ascii_lowercase();
            if state_matches(&s, &probe).is_none() {
                eprintln!("{CMD}: error: Bad state string: \"{s}\"");
                eprintln!(
                    "{CMD}: error: valid states: unknown,down,idle,allocated,?,mixed,future,drain,drained,draining,no_respond,reserved,perfctrs,cloud,completing,powering_down,powered_down,power_down,powering_up,fail,maint,reboot,reboot^,unknown"
                );
                return ExitCode::from(exit::ERROR);
            }
            sel.states.push(s);
        }
    }
    let long = p.has("long");
    let per_node = p.has("Node");
    let layout = if let Some(f) = p
        .value("format")
        .map(str::to_owned)
        .or_else(|| env("SINFO_FORMAT"))
        .filter(|_| p.value("Format").is_none())
    {
        let (l, bad) = parse_percent(&f, letter);
        for c in bad {
            eprintln!("Invalid node format specification: {c}");
        }
        l
    } else if let Some(f) = p.value("Format") {
        let (l, bad) = parse_names(f, named);
        for n in bad {
            eprintln!("{CMD}: error: Invalid job format specification: {n}");
        }
        l
    } else {
        let f = match (sel.reasons, per_node, long, p.has("summarize")) {
            (true, _, false, _) => REASONS_FORMAT,
            (true, _, true, _) => REASONS_LONG_FORMAT,
            (false, true, false, _) => NODE_FORMAT,
            (false, true, true, _) => NODE_LONG_FORMAT,
            (false, false, _, true) => SUMMARIZE_FORMAT,
            (false, false, true, false) => LONG_FORMAT,
            (false, false, false, false) => DEFAULT_FORMAT,
        };
        parse_percent(f, letter).0
    };
    let mut client = match query::connect() {
        Ok(c) => c,
        Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e)),
    };
    let fetched: anyhow::Result<(NodeList, PartitionList)> =
        (|| Ok((client.get("/nodes")?, client.get("/partitions")?)))();
    let (nodes, parts) = match fetched {
        Ok(x) => x,
        Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e)),
    };
    if p.has("json") {
        println!(
            "{}",
            serde_json::to_string_pretty(&json(&nodes.nodes)).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    let recs = records(&layout, &parts.partitions, &nodes.nodes, &sel, per_node);
    if long && !p.has("noheader") {
        println!("{}", format::ctime(query::now()));
    }
    for line in render(&layout, &recs, !p.has("noheader")) {
        println!("{line}");
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::squeue::tests::framed;
    use cadre_core::cluster::NodeAvail;

    fn node(i: u32, state: &str, emulated: bool) -> NodeView {
        NodeView {
            name: format!("node{i:03}"),
            state: state.into(),
            avail: NodeAvail::Up,
            reason: (state == "drained").then(|| "bad dimm".to_string()),
            connected: state != "down",
            partitions: vec!["gpu".into()],
            cpus: 64,
            cpus_alloc: if state == "mixed" { 8 } else { 0 },
            memory_mib: 515_000,
            memory_alloc_mib: 0,
            gpus: 8,
            gpus_alloc: if state == "mixed" { 1.0 } else { 0.0 },
            gpu_model: Some("emulated".into()),
            emulated_gpus: emulated,
            features: Vec::new(),
            container_runtime: None,
            address: None,
            agent_version: None,
            agent_protocol: None,
            last_heard: None,
            cert_expires: None,
            health: None,
        }
    }

    fn partitions() -> Vec<PartitionView> {
        vec![
            PartitionView {
                name: "gpu".into(),
                default: true,
                up: true,
                nodes: "node[001-005]".into(),
                node_count: 5,
                max_time: None,
                default_time: None,
                priority_tier: 1,
                gpus: 40,
                gpus_alloc: 1.0,
            },
            PartitionView {
                name: "debug".into(),
                default: false,
                up: true,
                nodes: "node005".into(),
                node_count: 1,
                max_time: Some(1800),
                default_time: None,
                priority_tier: 1,
                gpus: 8,
                gpus_alloc: 0.0,
            },
        ]
    }

    fn nodes() -> Vec<NodeView> {
        let mut n = vec![
            node(1, "idle", true),
            node(2, "mixed", true),
            node(3, "idle", true),
            node(4, "drained", true),
            node(5, "down", true),
        ];
        n[4].partitions.push("debug".into());
        n
    }

    fn show(fmt: &str, sel: &Selection, per_node: bool) -> String {
        let (l, bad) = parse_percent(fmt, letter);
        assert!(bad.is_empty());
        let (parts, nodes) = (partitions(), nodes());
        framed(render(
            &l,
            &records(&l, &parts, &nodes, sel, per_node),
            true,
        ))
    }

    #[test]
    fn the_default_summary_groups_nodes_by_state_per_partition() {
        insta::assert_snapshot!(show(DEFAULT_FORMAT, &Selection::default(), false));
    }

    #[test]
    fn node_oriented_and_long_formats() {
        insta::assert_snapshot!(show(NODE_FORMAT, &Selection::default(), true));
        insta::assert_snapshot!(show(NODE_LONG_FORMAT, &Selection::default(), true));
        insta::assert_snapshot!(show(LONG_FORMAT, &Selection::default(), false));
        insta::assert_snapshot!(show(SUMMARIZE_FORMAT, &Selection::default(), false));
    }

    #[test]
    fn emulated_gpus_are_a_gres_type() {
        let sel = Selection::default();
        insta::assert_snapshot!(show("%P %D %G %C", &sel, false));
        let mut real = node(9, "idle", false);
        real.gpus = 4;
        assert_eq!(gres(&real), "gpu:4");
        let r = Record {
            partition: None,
            nodes: vec![&real],
        };
        assert_eq!(value(&r, Field::GresUsed), "gpu:0");
    }

    #[test]
    fn reasons_and_state_filters() {
        let reasons = Selection {
            reasons: true,
            ..Selection::default()
        };
        insta::assert_snapshot!(show(REASONS_FORMAT, &reasons, false));
        let idle = Selection {
            states: vec!["idle".into()],
            partitions: vec!["gpu".into()],
            ..Selection::default()
        };
        insta::assert_snapshot!(show(DEFAULT_FORMAT, &idle, false));
    }
}
