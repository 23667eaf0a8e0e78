//! From the three files as read to a [`Cluster`]: node shapes, nodes, partitions, the
//! switch tree and blocks, with every check that needs more than one line.
//!
//! **Given** `slurm.conf`'s nodes, node sets, down nodes and partitions, `gres.conf`'s
//! lines and `topology.conf`'s switches or blocks.
//!
//! **Decided**
//! - one shape per distinct node hardware: CPUs, NUMA domains (one per socket, CPUs split
//!   evenly), memory (`RealMemory`, split evenly over the domains), GPUs (index, model,
//!   NUMA domain) and other GRES as named countable resources; shapes are named after what
//!   they hold (`64cpu-2numa-515000M-8xa100`);
//! - each GPU's NUMA domain: the one socket its gres.conf `Cores=` lie in; GPUs with no
//!   such line, or whose cores span sockets, are spread: evenly in index order when no GPU
//!   of the node has an affinity, else each to the domain with the fewest GPUs so far;
//! - a GPU's model is its GRES type, lowercase; untyped GPUs have an empty model (any
//!   `--gpus=N` matches them, no `--gpus=type:N` does). GPU memory is unknown to Slurm's
//!   files and left 0 (cadre does not schedule on it);
//! - partition members in node order (Slurm keeps them in a node bitmap), without
//!   duplicates.
//!
//! **Must hold** (each an error at the line at fault): every node is described once; every
//! name in a partition, node set, down nodes, gres.conf or topology.conf line is a node (or
//! a node set where Slurm allows one); gres.conf agrees with each node's `Gres=` in count
//! and type; every GRES name is in `GresTypes`; at most one partition is the default; the
//! switches form a forest with every node under exactly one leaf; no node is in two
//! blocks; `BlockSizes` grow by powers of two.

use crate::Location;
use crate::error::{Item, Problem, SlurmConfError};
use crate::gres_conf::{Devices, GresConf, GresLine};
use crate::slurm_conf::{GresSpec, NodeLine, SlurmConf};
use crate::syntax::{Loc, Pair};
use crate::topology_conf::TopologyConf;
use cadre_core::cluster::{
    Block, BlockId, Cluster, GpuDevice, Node, NodeId, NodeShape, NumaDomain, Partition, ShapeId,
    Switch, SwitchId,
};
use cadre_core::hostlist;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// GPUs one node may have (Slurm caps device files per node at 1024).
const MAX_GPUS: u32 = 1024;

/// The files' paths, for problems of a whole file.
pub(crate) struct Paths {
    pub slurm_conf: PathBuf,
    pub topology_conf: PathBuf,
}

pub(crate) struct Built {
    pub cluster: Cluster,
    /// The NodeName line of each node.
    pub origins: BTreeMap<String, Location>,
}

fn in_file(file: &std::path::Path, problem: Problem) -> SlurmConfError {
    SlurmConfError::InFile {
        file: file.to_path_buf(),
        problem: Box::new(problem),
    }
}

fn expand(p: &Pair, item: &Item) -> Result<Vec<String>, SlurmConfError> {
    hostlist::expand(&p.value).map_err(|error| {
        p.at.error(Problem::Hostlist {
            item: item.clone(),
            key: p.key.clone(),
            error,
        })
    })
}

pub(crate) fn build(
    paths: &Paths,
    conf: SlurmConf,
    gres: &GresConf,
    topology: Option<&TopologyConf>,
) -> Result<Built, SlurmConfError> {
    let Some(name) = &conf.cluster_name else {
        return Err(in_file(&paths.slurm_conf, Problem::NoClusterName));
    };
    // Slurm maps the cluster name to lower case.
    let cluster_name = name.value.trim().to_ascii_lowercase();
    if conf.nodes.is_empty() {
        return Err(in_file(&paths.slurm_conf, Problem::NoNodes));
    }

    // Node names, in file order.
    let mut index: BTreeMap<String, (NodeId, usize)> = BTreeMap::new();
    let mut order: Vec<(String, usize)> = Vec::new();
    for (l, line) in conf.nodes.iter().enumerate() {
        for name in &line.names {
            if let Some(&(_, first)) = index.get(name) {
                return Err(line.at.error(Problem::DuplicateNode {
                    node: name.clone(),
                    first: conf.nodes[first].at.location(),
                }));
            }
            index.insert(name.clone(), (NodeId(order.len() as u32), l));
            order.push((name.clone(), l));
        }
    }
    let node_id = |item: &Item, p: &Pair, name: &str| -> Result<NodeId, SlurmConfError> {
        index.get(name).map(|&(id, _)| id).ok_or_else(|| {
            p.at.error(Problem::UnknownNode {
                item: item.clone(),
                node: name.to_string(),
            })
        })
    };

    check_gres_types(&conf, gres)?;
    for line in &gres.lines {
        if let Some((names, pair)) = &line.nodes {
            for n in names {
                node_id(&Item::of("NodeName", &pair.value), pair, n)?;
            }
        }
    }
    for auto in &gres.autodetect {
        for n in auto.nodes.iter().flatten() {
            if !index.contains_key(n) {
                return Err(auto.at.error(Problem::UnknownNode {
                    item: Item::none(),
                    node: n.clone(),
                }));
            }
        }
    }

    // Shapes and nodes.
    let mut shapes: Vec<NodeShape> = Vec::new();
    let mut nodes: Vec<Node> = Vec::with_capacity(order.len());
    let mut origins = BTreeMap::new();
    for (name, l) in &order {
        let line = &conf.nodes[*l];
        let shape = node_shape(line, name, gres)?;
        let id = match shapes.iter().position(|s| *s == shape) {
            Some(i) => i,
            None => {
                shapes.push(shape);
                shapes.len() - 1
            }
        };
        let mut node = Node::new(name.clone(), ShapeId(id as u16), &shapes[id]);
        node.features = line.features.clone();
        node.avail = line.avail;
        node.reason = line.reason.clone();
        nodes.push(node);
        origins.insert(name.clone(), line.at.location());
    }
    name_shapes(&mut shapes);

    // Node sets.
    let mut nodesets: BTreeMap<String, (Vec<NodeId>, Loc)> = BTreeMap::new();
    for set in &conf.nodesets {
        if index.contains_key(&set.name) {
            return Err(set.at.error(Problem::NodeSetNamedLikeNode {
                item: set.item.clone(),
                name: set.name.clone(),
            }));
        }
        if let Some((_, first)) = nodesets.get(&set.name) {
            return Err(set.at.error(Problem::DuplicateNodeSet {
                name: set.name.clone(),
                first: first.location(),
            }));
        }
        let mut members = BTreeSet::new();
        if let Some(p) = &set.nodes {
            for n in expand(p, &set.item)? {
                members.insert(node_id(&set.item, p, &n)?);
            }
        }
        if let Some(feature) = &set.feature {
            for (i, node) in nodes.iter().enumerate() {
                if node.features.iter().any(|f| f == feature) {
                    members.insert(NodeId(i as u32));
                }
            }
        }
        nodesets.insert(
            set.name.clone(),
            (members.into_iter().collect(), set.at.clone()),
        );
    }

    // Down nodes.
    for down in &conf.down {
        for n in expand(&down.names, &down.item)? {
            let id = node_id(&down.item, &down.names, &n)?;
            let node = &mut nodes[id.0 as usize];
            node.avail = down.avail;
            node.reason = down.reason.clone();
        }
    }

    // Partitions.
    if conf.partitions.is_empty() {
        return Err(in_file(&paths.slurm_conf, Problem::NoPartitions));
    }
    let mut partitions: Vec<Partition> = Vec::with_capacity(conf.partitions.len());
    let mut partition_at: Vec<&Loc> = Vec::new();
    for p in &conf.partitions {
        if let Some(i) = partitions.iter().position(|q| q.name == p.name) {
            return Err(p.at.error(Problem::DuplicatePartition {
                name: p.name.clone(),
                first: partition_at[i].location(),
            }));
        }
        let mut members = BTreeSet::new();
        if let Some(pair) = &p.nodes {
            if pair.value.trim().eq_ignore_ascii_case("all") {
                members.extend((0..nodes.len() as u32).map(NodeId));
            } else {
                for n in expand(pair, &p.item)? {
                    if n.eq_ignore_ascii_case("all") {
                        members.extend((0..nodes.len() as u32).map(NodeId));
                    } else if let Some((set, _)) = nodesets.get(&n) {
                        members.extend(set.iter().copied());
                    } else {
                        members.insert(node_id(&p.item, pair, &n)?);
                    }
                }
            }
        }
        if members.is_empty() {
            let at = p.nodes.as_ref().map_or(&p.at, |pair| &pair.at);
            return Err(at.error(Problem::EmptyPartition {
                item: p.item.clone(),
            }));
        }
        if p.default {
            if let Some(i) = partitions.iter().position(|q| q.default) {
                return Err(p.at.error(Problem::TwoDefaults {
                    first: partitions[i].name.clone(),
                    first_at: partition_at[i].location(),
                    second: p.name.clone(),
                }));
            }
        }
        partitions.push(Partition {
            name: p.name.clone(),
            nodes: members.into_iter().collect(),
            default: p.default,
            priority_tier: p.priority_tier,
            priority_job_factor: p.priority_job_factor,
            max_time: p.max_time,
            default_time: p.default_time,
            up: p.up,
        });
        partition_at.push(&p.at);
    }

    // Topology.
    let (mut switches, mut blocks, mut block_sizes) = (Vec::new(), Vec::new(), Vec::new());
    if let Some(topo) = topology {
        switches = build_switches(topo, &mut nodes, &node_id)?;
        if !switches.is_empty() {
            if let Some(n) = nodes.iter().find(|n| n.leaf.is_none()) {
                return Err(in_file(
                    &paths.topology_conf,
                    Problem::NodeUnderNoLeaf {
                        node: n.name.clone(),
                    },
                ));
            }
        }
        blocks = build_blocks(topo, &mut nodes, &node_id)?;
        if let Some((sizes, pair)) = &topo.block_sizes {
            check_block_sizes(sizes, pair, !blocks.is_empty())?;
            block_sizes = sizes.clone();
        }
    }

    Ok(Built {
        cluster: Cluster::from_parts(
            cluster_name,
            shapes,
            nodes,
            partitions,
            switches,
            blocks,
            block_sizes,
        ),
        origins,
    })
}

/// Every GRES name of `slurm.conf` and `gres.conf` must be in `GresTypes`.
fn check_gres_types(conf: &SlurmConf, gres: &GresConf) -> Result<(), SlurmConfError> {
    let types = conf.gres_types.as_ref();
    let listed = |name: &str| types.is_some_and(|(t, _)| t.iter().any(|x| x == name));
    let given = types.map(|(_, p)| format!("GresTypes={}", p.value));
    for line in &conf.nodes {
        for g in &line.gres {
            if !listed(&g.name) {
                let at = line.gres_at.as_ref().unwrap_or(&line.at);
                return Err(at.error(Problem::GresNotInTypes {
                    item: line.item.clone(),
                    name: g.name.clone(),
                    given,
                }));
            }
        }
    }
    for line in &gres.lines {
        if !listed(&line.name) {
            return Err(line.at.error(Problem::GresNotInTypes {
                item: Item::none(),
                name: line.name.clone(),
                given,
            }));
        }
    }
    Ok(())
}

/// One GPU before it is placed: its index, model and the NUMA domain its cores say.
struct Gpu {
    index: u32,
    model: String,
    domain: Option<u32>,
}

/// The shape of one node of `line`, with the gres.conf lines that apply to it.
fn node_shape(line: &NodeLine, node: &str, gres: &GresConf) -> Result<NodeShape, SlurmConfError> {
    let layout = line.layout;
    let lines: Vec<&GresLine> = gres.lines.iter().filter(|g| g.applies_to(node)).collect();
    let gres_at = line.gres_at.as_ref().unwrap_or(&line.at);

    // gres.conf names a resource the node's Gres= does not have.
    for g in &lines {
        if !line.gres.iter().any(|s| s.name == g.name) {
            return Err(g.at.error(Problem::GresNotOnNode {
                node: node.to_string(),
                name: g.name.clone(),
            }));
        }
    }

    // Named resources: every GRES but gpu, counts checked against gres.conf.
    let mut named = Vec::new();
    for spec in line.gres.iter().filter(|s| s.name != "gpu") {
        let conf_lines: Vec<&&GresLine> = lines.iter().filter(|g| g.name == spec.name).collect();
        if let Some(first) = conf_lines.first() {
            let conf: u64 = conf_lines.iter().map(|g| g.count()).sum();
            if conf != spec.count {
                return Err(first.at.error(Problem::GresCountMismatch {
                    node: node.to_string(),
                    what: spec.name.clone(),
                    conf,
                    slurm: spec.count,
                    line: gres_at.location(),
                }));
            }
        }
        named.push((spec.name.clone(), spec.count));
    }

    // GPUs.
    let specs: Vec<&GresSpec> = line.gres.iter().filter(|s| s.name == "gpu").collect();
    let total: u64 = specs.iter().map(|s| s.count).sum();
    if total > u64::from(MAX_GPUS) {
        return Err(gres_at.error(Problem::TooManyGpus {
            item: line.item.clone(),
            limit: MAX_GPUS,
        }));
    }
    let gpu_lines: Vec<&GresLine> = lines.iter().copied().filter(|g| g.name == "gpu").collect();
    let mut gpus: Vec<Gpu> = Vec::new();
    if gpu_lines.is_empty() {
        let mut index = 0;
        for s in &specs {
            for _ in 0..s.count {
                gpus.push(Gpu {
                    index,
                    model: s.gtype.clone().unwrap_or_default().to_ascii_lowercase(),
                    domain: None,
                });
                index += 1;
            }
        }
    } else {
        check_gpu_counts(node, &specs, &gpu_lines, gres_at)?;
        let mut next = 0u32;
        let mut taken: BTreeMap<u32, &Loc> = BTreeMap::new();
        for g in &gpu_lines {
            let model = g.gtype.clone().unwrap_or_default().to_ascii_lowercase();
            let domain = affinity_domain(g, line, node)?;
            let indices: Vec<(u32, String)> = match &g.devices {
                Devices::Files(files) => files
                    .iter()
                    .enumerate()
                    .map(|(i, (file, minor))| {
                        (minor.unwrap_or(next + i as u32), format!("`{file}`"))
                    })
                    .collect(),
                Devices::Count(n) => (0..*n as u32)
                    .map(|i| (next + i, format!("GPU {}", next + i)))
                    .collect(),
            };
            for (index, file) in indices {
                if let Some(first) = taken.get(&index) {
                    return Err(g.at.error(Problem::GresFileTwice {
                        what: file,
                        node: node.to_string(),
                        first: first.location(),
                    }));
                }
                taken.insert(index, &g.at);
                next = next.max(index + 1);
                gpus.push(Gpu {
                    index,
                    model: model.clone(),
                    domain,
                });
            }
        }
        gpus.sort_by_key(|g| g.index);
    }

    // Each GPU's domain.
    let n = layout.numa;
    let mut per_domain = vec![0u32; n as usize];
    let placed: Vec<u32> = if gpus.iter().all(|g| g.domain.is_none()) {
        let count = gpus.len() as u32;
        (0..count)
            .map(|i| {
                // Even split in index order, the first domains taking one more.
                let (per, extra) = (count / n, count % n);
                let mut start = 0;
                let mut d = 0;
                loop {
                    let size = per + u32::from(d < extra);
                    if i < start + size || d + 1 == n {
                        break d;
                    }
                    start += size;
                    d += 1;
                }
            })
            .collect()
    } else {
        for g in &gpus {
            if let Some(d) = g.domain {
                per_domain[d as usize] += 1;
            }
        }
        gpus.iter()
            .map(|g| match g.domain {
                Some(d) => d,
                None => {
                    let d = (0..n)
                        .min_by_key(|&d| (per_domain[d as usize], d))
                        .unwrap_or(0);
                    per_domain[d as usize] += 1;
                    d
                }
            })
            .collect()
    };

    let per_cpu = layout.cpus / n;
    let numa = (0..n)
        .map(|d| NumaDomain {
            cores: (d * per_cpu..(d + 1) * per_cpu).collect(),
            gpus: placed
                .iter()
                .enumerate()
                .filter(|&(_, &gd)| gd == d)
                .map(|(pos, _)| pos as u32)
                .collect(),
            nics: Vec::new(),
            mem_mib: line.mem_mib / u64::from(n),
        })
        .collect();
    Ok(NodeShape {
        name: String::new(),
        cores: layout.cpus,
        mem_mib: line.mem_mib,
        numa,
        gpus: gpus
            .iter()
            .zip(&placed)
            .map(|(g, &d)| GpuDevice {
                index: g.index,
                model: g.model.clone(),
                mem_mib: 0,
                numa: d as u16,
            })
            .collect(),
        nics: Vec::new(),
        named,
    })
}

/// gres.conf's GPU lines for a node must agree with its `Gres=gpu...` in count, per type
/// when `slurm.conf` gives types.
fn check_gpu_counts(
    node: &str,
    specs: &[&GresSpec],
    gpu_lines: &[&GresLine],
    gres_at: &Loc,
) -> Result<(), SlurmConfError> {
    let first = gpu_lines[0];
    let mismatch = |at: &Loc, what: String, conf: u64, slurm: u64| {
        at.error(Problem::GresCountMismatch {
            node: node.to_string(),
            what,
            conf,
            slurm,
            line: gres_at.location(),
        })
    };
    if specs.is_empty() {
        return Err(first.at.error(Problem::GresNotOnNode {
            node: node.to_string(),
            name: "gpu".into(),
        }));
    }
    let typed = specs.iter().any(|s| s.gtype.is_some());
    if !typed {
        let conf: u64 = gpu_lines.iter().map(|g| g.count()).sum();
        let slurm: u64 = specs.iter().map(|s| s.count).sum();
        if conf != slurm {
            return Err(mismatch(&first.at, "gpu".into(), conf, slurm));
        }
        return Ok(());
    }
    if let Some(g) = gpu_lines.iter().find(|g| g.gtype.is_none()) {
        return Err(g.at.error(Problem::GresUntypedLine {
            node: node.to_string(),
        }));
    }
    let mut types: BTreeMap<String, (u64, u64, &Loc)> = BTreeMap::new();
    for s in specs {
        let t = s.gtype.clone().unwrap_or_default().to_ascii_lowercase();
        types.entry(t).or_insert((0, 0, &first.at)).1 += s.count;
    }
    for g in gpu_lines {
        let t = g.gtype.clone().unwrap_or_default().to_ascii_lowercase();
        let e = types.entry(t).or_insert((0, 0, &g.at));
        if e.0 == 0 {
            e.2 = &g.at;
        }
        e.0 += g.count();
    }
    for (t, (conf, slurm, at)) in types {
        if conf != slurm {
            return Err(mismatch(at, format!("gpu:{t}"), conf, slurm));
        }
    }
    Ok(())
}

/// The NUMA domain a gres.conf line's `Cores=` (or `CPUs=`) put its devices in: the one
/// socket they all lie in, else none.
fn affinity_domain(
    g: &GresLine,
    line: &NodeLine,
    node: &str,
) -> Result<Option<u32>, SlurmConfError> {
    let Some(a) = &g.affinity else {
        return Ok(None);
    };
    let layout = line.layout;
    let (count, what) = if a.cores {
        (layout.cores(), "core")
    } else {
        (layout.cpus, "CPU")
    };
    let mut domains = BTreeSet::new();
    for &id in &a.ids {
        if id >= count {
            return Err(a.pair.at.error(Problem::GresCoresOutOfRange {
                node: node.to_string(),
                key: a.pair.key.clone(),
                value: a.pair.value.clone(),
                what,
                id,
                count,
            }));
        }
        domains.insert(if a.cores {
            layout.domain_of_core(id)
        } else {
            layout.domain_of_cpu(id)
        });
    }
    Ok(if domains.len() == 1 {
        domains.first().copied()
    } else {
        None
    })
}

/// Names each shape after what it holds, `-2`, `-3` ... where two differ only in what the
/// name does not say (GPU placement, GPU indices).
fn name_shapes(shapes: &mut [NodeShape]) {
    let mut used: BTreeMap<String, u32> = BTreeMap::new();
    for s in shapes.iter_mut() {
        let mut name = format!("{}cpu", s.cores);
        if s.numa.len() > 1 {
            name += &format!("-{}numa", s.numa.len());
        }
        name += &format!("-{}M", s.mem_mib);
        let mut models: Vec<(String, u32)> = Vec::new();
        for g in &s.gpus {
            match models.iter_mut().find(|(m, _)| *m == g.model) {
                Some((_, n)) => *n += 1,
                None => models.push((g.model.clone(), 1)),
            }
        }
        for (model, n) in models {
            let model = if model.is_empty() {
                "gpu".into()
            } else {
                model
            };
            name += &format!("-{n}x{model}");
        }
        for (res, n) in &s.named {
            name += &format!("-{n}{res}");
        }
        let seen = used.entry(name.clone()).or_insert(0);
        *seen += 1;
        s.name = if *seen == 1 {
            name
        } else {
            format!("{name}-{seen}")
        };
    }
}

type NodeLookup<'a> = dyn Fn(&Item, &Pair, &str) -> Result<NodeId, SlurmConfError> + 'a;

fn build_switches(
    topo: &TopologyConf,
    nodes: &mut [Node],
    node_id: &NodeLookup<'_>,
) -> Result<Vec<Switch>, SlurmConfError> {
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, s) in topo.switches.iter().enumerate() {
        if let Some(&first) = ids.get(s.name.as_str()) {
            return Err(s.at.error(Problem::DuplicateSwitch {
                name: s.name.clone(),
                first: topo.switches[first].at.location(),
            }));
        }
        ids.insert(&s.name, i);
    }
    let mut switches: Vec<Switch> = topo
        .switches
        .iter()
        .map(|s| Switch {
            name: s.name.clone(),
            parent: None,
            level: 0,
            children: Vec::new(),
            nodes: Vec::new(),
        })
        .collect();
    for (i, s) in topo.switches.iter().enumerate() {
        match (&s.nodes, &s.switches) {
            (Some(_), Some(_)) => {
                return Err(s.at.error(Problem::SwitchBoth {
                    item: s.item.clone(),
                }));
            }
            (None, None) => {
                return Err(s.at.error(Problem::SwitchNeither {
                    item: s.item.clone(),
                }));
            }
            (Some(p), None) => {
                let mut members = Vec::new();
                for n in expand(p, &s.item)? {
                    let id = node_id(&s.item, p, &n)?;
                    let node = &mut nodes[id.0 as usize];
                    match node.leaf {
                        Some(other) if other.0 as usize == i => continue,
                        Some(other) => {
                            return Err(p.at.error(Problem::NodeUnderTwoLeaves {
                                item: s.item.clone(),
                                node: n,
                                other: switches[other.0 as usize].name.clone(),
                                other_at: topo.switches[other.0 as usize].at.location(),
                            }));
                        }
                        None => {}
                    }
                    node.leaf = Some(SwitchId(i as u32));
                    members.push(id);
                }
                members.sort();
                switches[i].nodes = members;
            }
            (None, Some(p)) => {
                for child in expand(p, &s.item)? {
                    let Some(&c) = ids.get(child.as_str()) else {
                        return Err(p.at.error(Problem::UnknownSwitch {
                            item: s.item.clone(),
                            switch: child,
                        }));
                    };
                    if let Some(other) = switches[c].parent {
                        if other.0 as usize == i {
                            continue;
                        }
                        return Err(p.at.error(Problem::SwitchUnderTwoParents {
                            item: s.item.clone(),
                            child,
                            other: switches[other.0 as usize].name.clone(),
                            other_at: topo.switches[other.0 as usize].at.location(),
                        }));
                    }
                    switches[c].parent = Some(SwitchId(i as u32));
                    switches[i].children.push(SwitchId(c as u32));
                }
            }
        }
    }
    // Levels bottom-up; switches never reached are on or above a cycle.
    let n = switches.len();
    let mut pending: Vec<usize> = switches.iter().map(|s| s.children.len()).collect();
    let mut done = vec![false; n];
    let mut ready: Vec<usize> = (0..n).filter(|&s| pending[s] == 0).collect();
    while let Some(s) = ready.pop() {
        done[s] = true;
        switches[s].level = switches[s]
            .children
            .iter()
            .map(|c| switches[c.0 as usize].level + 1)
            .max()
            .unwrap_or(0);
        if let Some(p) = switches[s].parent {
            let p = p.0 as usize;
            pending[p] -= 1;
            if pending[p] == 0 {
                ready.push(p);
            }
        }
    }
    if let Some(start) = (0..n).find(|&s| !done[s]) {
        // Every switch not done has a child not done: walking down such children repeats a
        // switch, and the walk from its first visit is the cycle.
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
                let mut names: Vec<&str> = path[pos..]
                    .iter()
                    .map(|&p| switches[p].name.as_str())
                    .collect();
                names.push(&switches[next].name);
                return Err(topo.switches[next].at.error(Problem::SwitchCycle {
                    path: names.join(" -> "),
                }));
            }
            path.push(next);
            s = next;
        }
    }
    Ok(switches)
}

fn build_blocks(
    topo: &TopologyConf,
    nodes: &mut [Node],
    node_id: &NodeLookup<'_>,
) -> Result<Vec<Block>, SlurmConfError> {
    let mut blocks: Vec<Block> = Vec::with_capacity(topo.blocks.len());
    for (i, b) in topo.blocks.iter().enumerate() {
        if let Some(first) = blocks.iter().position(|x| x.name == b.name) {
            return Err(b.at.error(Problem::DuplicateBlock {
                name: b.name.clone(),
                first: topo.blocks[first].at.location(),
            }));
        }
        let mut members = Vec::new();
        for n in expand(&b.nodes, &b.item)? {
            let id = node_id(&b.item, &b.nodes, &n)?;
            let node = &mut nodes[id.0 as usize];
            match node.block {
                Some(other) if other.0 as usize == i => continue,
                Some(other) => {
                    return Err(b.nodes.at.error(Problem::NodeInTwoBlocks {
                        item: b.item.clone(),
                        node: n,
                        other: blocks[other.0 as usize].name.clone(),
                        other_at: topo.blocks[other.0 as usize].at.location(),
                    }));
                }
                None => {}
            }
            node.block = Some(BlockId(i as u32));
            members.push(id);
        }
        members.sort();
        blocks.push(Block {
            name: b.name.clone(),
            nodes: members,
        });
    }
    Ok(blocks)
}

/// Slurm: "Successive BlockSizes must be a power of two larger than the prior values."
fn check_block_sizes(sizes: &[u32], pair: &Pair, have_blocks: bool) -> Result<(), SlurmConfError> {
    if !have_blocks {
        return Err(pair.at.error(Problem::BlockSizesWithoutBlocks));
    }
    for w in sizes.windows(2) {
        if w[1] <= w[0] || w[1] % w[0] != 0 || !(w[1] / w[0]).is_power_of_two() {
            return Err(pair.at.error(Problem::BadBlockSizes {
                sizes: pair.value.clone(),
                why: "each size must be the previous one times a power of two",
            }));
        }
    }
    Ok(())
}
