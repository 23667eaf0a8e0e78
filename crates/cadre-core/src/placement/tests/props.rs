//! Property tests of placement on random small clusters and jobs: every allocation books
//! cleanly and meets the job's requirements, answers are deterministic, failures say truly
//! whether the job could ever fit, and the aggregate selection agrees with the device one.

use super::super::*;
use crate::alloc::Allocation;
use crate::cluster::{Block, BlockId, Node, NodeShape, Partition, ShapeId, Switch, SwitchId};
use crate::job::TaskGroup;
use crate::time::Dur;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Clone, Debug)]
struct ShapeSpec {
    cores: u32,
    gpus: u32,
    nics: u32,
    domains: u16,
    license: u64,
}

#[derive(Clone, Debug)]
struct NodeSpec {
    shape: usize,
    leaf: Option<u32>,
    block: Option<u32>,
    ib: bool,
    up: bool,
}

fn shape_spec() -> impl Strategy<Value = ShapeSpec> {
    (2u32..=12, 0u32..=4, 0u32..=2, 1u16..=2, 0u64..=2).prop_map(
        |(cores, gpus, nics, domains, license)| ShapeSpec {
            cores,
            gpus,
            nics,
            domains,
            license,
        },
    )
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        0usize..2,
        proptest::option::weighted(0.7, 0u32..3),
        proptest::option::weighted(0.5, 0u32..2),
        any::<bool>(),
        proptest::bool::weighted(0.85),
    )
        .prop_map(|(shape, leaf, block, ib, up)| NodeSpec {
            shape,
            leaf,
            block,
            ib,
            up,
        })
}

fn build(shapes: &[ShapeSpec], nodes: &[NodeSpec]) -> Cluster {
    let shapes: Vec<NodeShape> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let model = if i == 0 { "h100" } else { "a100" };
            let mut shape = NodeShape::uniform(
                &format!("s{i}"),
                s.cores,
                8192,
                s.gpus,
                model,
                s.nics,
                s.domains,
            );
            if s.license > 0 {
                shape.named.push(("license".into(), s.license));
            }
            shape
        })
        .collect();
    let mut list: Vec<Node> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut node = Node::new(format!("n{i}"), ShapeId(n.shape as u16), &shapes[n.shape]);
            node.leaf = n.leaf.map(SwitchId);
            node.block = n.block.map(BlockId);
            if n.ib {
                node.features.push("ib".into());
            }
            if !n.up {
                node.avail = NodeAvail::Drain;
                node.reason = Some("test".into());
            }
            node
        })
        .collect();
    let switches = (0..3u32)
        .map(|l| Switch {
            name: format!("leaf{l}"),
            parent: None,
            level: 0,
            children: vec![],
            nodes: (0..list.len() as u32)
                .filter(|&i| list[i as usize].leaf == Some(SwitchId(l)))
                .map(NodeId)
                .collect(),
        })
        .collect();
    let blocks = (0..2u32)
        .map(|b| Block {
            name: format!("block{b}"),
            nodes: (0..list.len() as u32)
                .filter(|&i| list[i as usize].block == Some(BlockId(b)))
                .map(NodeId)
                .collect(),
        })
        .collect();
    let partition = Partition::default_over("all", list.len() as u32);
    for n in &mut list {
        n.partitions.clear();
    }
    Cluster::from_parts(
        "prop".into(),
        shapes,
        list,
        vec![partition],
        switches,
        blocks,
        vec![],
    )
}

fn group() -> impl Strategy<Value = TaskGroup> {
    (
        (1u32..=4, proptest::option::weighted(0.3, 0u32..=3)),
        (0u32..=3, proptest::option::weighted(0.2, 100u32..=900)),
        (1u32..=4, 0u64..=2048, 0u32..=1),
        prop_oneof![
            4 => Just(None),
            1 => Just(Some("h100".to_string())),
            1 => Just(Some("a100".to_string())),
        ],
        proptest::bool::weighted(0.15),
        proptest::option::weighted(0.2, 1u32..=2),
        proptest::option::weighted(0.15, 1u32..=2),
    )
        .prop_map(
            |((count, min), (gpus, share), (cpus, mem_mib, nics), model, license, tpn, nodes)| {
                let share = if gpus == 0 { share } else { None };
                TaskGroup {
                    name: "g".into(),
                    count,
                    min_count: min.map(|m| m.min(count)),
                    per_task: TaskResources {
                        cpus,
                        mem_mib,
                        gpus,
                        gpu_share_milli: share,
                        gpu_model: model,
                        nics,
                        named: if license {
                            vec![("license".into(), 1)]
                        } else {
                            vec![]
                        },
                    },
                    tasks_per_node: tpn,
                    nodes: nodes.filter(|&n| {
                        n <= count.min(min.unwrap_or(count)) && tpn.is_none_or(|k| n * k == count)
                    }),
                }
            },
        )
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    (
        proptest::collection::vec(group(), 1..=2),
        proptest::bool::weighted(0.15),
        proptest::bool::weighted(0.15),
        prop_oneof![
            Just(NumaPolicy::None),
            Just(NumaPolicy::Preferred),
            Just(NumaPolicy::Strict)
        ],
        prop_oneof![
            3 => Just(NetworkSpan::Any),
            1 => Just(NetworkSpan::OneLeaf),
            1 => Just(NetworkSpan::OneBlock),
            1 => (1u32..=2).prop_map(NetworkSpan::MaxSwitches),
        ],
        proptest::bool::weighted(0.2),
    )
        .prop_map(|(groups, exclusive, one_per_node, numa, span, ib)| {
            let mut j = JobSpec::simple("u", "a", 1, TaskResources::default(), Dur::hours(1));
            j.groups = groups
                .into_iter()
                .map(|mut g| {
                    if one_per_node {
                        g.tasks_per_node = g.tasks_per_node.map(|_| 1);
                        g.nodes = g.nodes.filter(|&n| n == g.count);
                    }
                    g
                })
                .collect();
            j.exclusive = exclusive;
            j.one_task_per_node = one_per_node;
            j.topology.numa = numa;
            j.topology.span = span;
            if ib {
                j.features = vec!["ib".into()];
            }
            j
        })
}

fn scenario() -> impl Strategy<Value = (Vec<ShapeSpec>, Vec<NodeSpec>, Vec<JobSpec>, JobSpec)> {
    (
        proptest::collection::vec(shape_spec(), 2),
        proptest::collection::vec(node_spec(), 1..=6),
        proptest::collection::vec(job_spec(), 0..=4),
        job_spec(),
    )
}

/// Places and books the background jobs that fit, returning their allocations.
fn load(c: &mut Cluster, background: &[JobSpec]) -> Vec<(JobId, Allocation)> {
    let nodes: Vec<NodeId> = (0..c.nodes.len() as u32).map(NodeId).collect();
    let mut out = Vec::new();
    for (k, j) in background.iter().enumerate() {
        if let Ok(a) = place(c, j, &nodes) {
            let id = JobId(1000 + k as u64);
            c.book(id, &a).expect("background placement books");
            out.push((id, a));
        }
    }
    out
}

fn domain_of_core(c: &Cluster, node: NodeId, core: u32) -> Option<usize> {
    c.shape(node)
        .numa
        .iter()
        .position(|d| d.cores.contains(&core))
}

/// Checks an allocation against the job and the cluster it was placed on.
fn check(c: &Cluster, j: &JobSpec, a: &Allocation) -> Result<(), TestCaseError> {
    let mut booked = c.clone();
    booked
        .book(JobId(1), a)
        .map_err(|e| TestCaseError::fail(format!("allocation does not book: {e}")))?;
    booked
        .check_invariants()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(a.exclusive, j.exclusive);
    for (gi, g) in j.groups.iter().enumerate() {
        let tasks: Vec<_> = a.tasks.iter().filter(|t| t.group as usize == gi).collect();
        let n = tasks.len() as u32;
        prop_assert!(
            n >= g.min_tasks() && n <= g.count,
            "group {} got {} tasks",
            gi,
            n
        );
        let ranks: Vec<u32> = tasks.iter().map(|t| t.rank).collect();
        prop_assert_eq!(ranks, (0..n).collect::<Vec<_>>());
        let r = &g.per_task;
        let mut per_node: BTreeMap<NodeId, u32> = BTreeMap::new();
        for t in &tasks {
            *per_node.entry(t.node).or_insert(0) += 1;
            let shape = c.shape(t.node);
            prop_assert_eq!(t.cores.len() as u32, r.cpus);
            prop_assert_eq!(t.mem_mib, r.mem_mib);
            prop_assert_eq!(t.nics.len() as u32, r.nics);
            prop_assert_eq!(&t.named, &r.named);
            match r.gpu_share_milli {
                Some(s) => {
                    prop_assert_eq!(t.gpus.len(), 1);
                    prop_assert_eq!(t.gpu_milli_each, s);
                }
                None => {
                    prop_assert_eq!(t.gpus.len() as u32, r.gpus);
                    prop_assert!(t.gpus.is_empty() || t.gpu_milli_each == MILLI_PER_GPU);
                }
            }
            if let Some(m) = &r.gpu_model {
                for &p in &t.gpus {
                    prop_assert_eq!(&shape.gpus[p as usize].model, m);
                }
            }
            if j.topology.numa == NumaPolicy::Strict {
                let mut doms: BTreeSet<usize> = BTreeSet::new();
                doms.extend(
                    t.gpus
                        .iter()
                        .map(|&p| usize::from(shape.gpus[p as usize].numa)),
                );
                doms.extend(
                    t.nics
                        .iter()
                        .map(|&p| usize::from(shape.nics[p as usize].numa)),
                );
                for &core in &t.cores {
                    doms.insert(domain_of_core(c, t.node, core).unwrap_or(usize::MAX));
                }
                prop_assert!(doms.len() <= 1, "strict task spans domains {:?}", doms);
            }
        }
        if let Some(k) = g.tasks_per_node {
            let short = per_node.values().filter(|&&m| m != k).count();
            prop_assert!(
                short <= 1 && per_node.values().all(|&m| m <= k),
                "{:?}",
                per_node
            );
            prop_assert!(short == 0 || n % k != 0);
        }
        if let Some(nn) = g.nodes {
            prop_assert_eq!(per_node.len() as u32, nn);
        }
    }
    let nodes = a.nodes();
    if j.one_task_per_node {
        prop_assert_eq!(nodes.len(), a.tasks.len());
    }
    for &n in &nodes {
        let node = c.node(n);
        prop_assert_eq!(node.avail, NodeAvail::Up);
        prop_assert!(j.features.iter().all(|f| node.features.contains(f)));
        if j.exclusive {
            prop_assert!(node.usage.jobs.is_empty(), "exclusive job on a busy node");
        }
    }
    let leaves: BTreeSet<_> = nodes.iter().map(|&n| c.node(n).leaf).collect();
    let blocks: BTreeSet<_> = nodes.iter().map(|&n| c.node(n).block).collect();
    match j.topology.span {
        NetworkSpan::Any => {}
        NetworkSpan::OneLeaf => prop_assert!(leaves.len() <= 1, "leaves {:?}", leaves),
        NetworkSpan::OneBlock => prop_assert!(blocks.len() <= 1, "blocks {:?}", blocks),
        NetworkSpan::MaxSwitches(m) => prop_assert!(leaves.len() as u32 <= m),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn fragmentation_preference_books_cleanly_and_fits_what_best_fit_fits(
        (shapes, nodes, background, j) in scenario()
    ) {
        let mut c = build(&shapes, &nodes);
        load(&mut c, &background);
        let all: Vec<NodeId> = (0..c.nodes.len() as u32).map(NodeId).collect();
        // The background and the job itself as the profile.
        let profile = WorkloadProfile::from_tasks(
            background.iter().chain([&j]).flat_map(|b| b.groups.iter().map(|g| &g.per_task)),
        );
        let with = place_with_profile(&c, &j, &all, &profile);
        let mut reversed = all.clone();
        reversed.reverse();
        prop_assert_eq!(
            &place_with_profile(&c, &j, &reversed, &profile), &with, "not deterministic"
        );
        if let Ok(a) = &with {
            check(&c, &j, a)?;
        }
        let plain = place(&c, &j, &all);
        if j.groups.len() == 1 && j.topology.span == NetworkSpan::Any {
            prop_assert_eq!(with.is_ok(), plain.is_ok(), "{:?} vs {:?}", with, plain);
        }
        if let (Err(a), Err(b)) = (&with, &plain) {
            prop_assert_eq!(a, b, "failures are classified alike");
        }
        prop_assert_eq!(
            place_with_profile(&c, &j, &all, &WorkloadProfile::default()), plain,
            "an empty profile is best fit"
        );
    }

    /// The scores a profile remembers from earlier placements change no later one: jobs
    /// placed and booked one after another under one profile, which records some of their
    /// tasks as it goes, are placed as under a copy of the profile, which remembers nothing.
    #[test]
    fn remembered_scores_change_no_placement((shapes, nodes, background, j) in scenario()) {
        let mut c = build(&shapes, &nodes);
        let all: Vec<NodeId> = (0..c.nodes.len() as u32).map(NodeId).collect();
        let mut profile = WorkloadProfile::from_tasks(
            background.iter().flat_map(|b| b.groups.iter().map(|g| &g.per_task)),
        );
        for (k, b) in background.iter().chain([&j]).enumerate() {
            let placed = place_with_profile(&c, b, &all, &profile);
            prop_assert_eq!(&placed, &place_with_profile(&c, b, &all, &profile.clone()));
            if let Ok(a) = &placed {
                c.book(JobId(1000 + k as u64), a).expect("placements book");
            }
            if k % 2 == 1 {
                profile.record(&b.groups[0].per_task, 1 << (4 * (k % 5)));
            }
        }
    }

    /// For a job of one group that goes on one node when one node can hold it, the node
    /// chosen from what each node offers alone is the node placement chooses, with and
    /// without a profile, and the allocation made there is placement's; and there is none
    /// when placement needs several nodes or fails.
    #[test]
    fn one_node_choice_is_placements_choice((shapes, nodes, background, j) in scenario()) {
        // The scenario's job, made of that kind.
        let mut j = j;
        j.groups.truncate(1);
        let g = &mut j.groups[0];
        (g.nodes, g.tasks_per_node, g.min_count) = (None, None, None);
        g.count = g.count.max(1);
        if j.one_task_per_node {
            g.count = 1;
        }
        j.exclusive = false;
        if j.topology.span == NetworkSpan::OneBlock {
            j.topology.span = NetworkSpan::Any;
        }
        prop_assert!(OneNode::suits(&j));
        let mut c = build(&shapes, &nodes);
        load(&mut c, &background);
        let all: Vec<NodeId> = (0..c.nodes.len() as u32).map(NodeId).collect();
        let profile = WorkloadProfile::from_tasks(
            background.iter().chain([&j]).flat_map(|b| b.groups.iter().map(|g| &g.per_task)),
        );
        // One choice cleared and fed again for each profile, as the scheduler reuses one.
        let mut reused = OneNodeChoice::default();
        for profile in [&profile, &WorkloadProfile::default()] {
            // The probe holds the profile's memo until it is dropped, before placing.
            let choice = OneNode::new(&c, &j, Some(profile), None).and_then(|probe| {
                let fits: Vec<_> = all.iter().map(|&n| (n, 1, probe.fit(n))).collect();
                // Fed other weights first: nothing of it may count once cleared.
                for (n, _, fit) in &fits {
                    reused.add(*n, n.0 * 7 + 1, fit);
                }
                reused.clear();
                for (n, weight, fit) in fits.iter().rev() {
                    reused.add(*n, *weight, fit);
                }
                assert_eq!(reused.node(), one_node_choice(&fits), "fed in another order");
                // The chosen node comes with the fit it was fed with.
                if let Some((n, fit)) = reused.chosen() {
                    assert_eq!(fit, probe.fit(n));
                }
                one_node_choice(&fits)
            });
            let placed = place_with_profile(&c, &j, &all, profile);
            let used: BTreeSet<NodeId> = placed
                .iter()
                .flat_map(|a| a.tasks.iter().map(|t| t.node))
                .collect();
            match choice {
                Some(n) => {
                    prop_assert_eq!(used, BTreeSet::from([n]), "{:?}", placed);
                    // With the layout made apart, as a caller that keeps it does.
                    let layout = JobLayout::new(&c, &j);
                    let one = OneNode::new(&c, &j, None, Some(&layout)).expect("the job is of the kind");
                    prop_assert_eq!(one.allocation(n), placed.clone().ok());
                    // In room used before for every node, as the scheduler reuses it.
                    let mut scratch = DeviceScratch::default();
                    for &m in all.iter().rev() {
                        let _ = one.allocation_fitting(m, &one.fit(m), &mut scratch);
                    }
                    prop_assert_eq!(one.allocation_fitting(n, &one.fit(n), &mut scratch), placed.ok());
                }
                None => prop_assert!(used.len() != 1, "placed on one node: {:?}", placed),
            }
        }
    }

    #[test]
    fn placements_book_cleanly_and_meet_the_job((shapes, nodes, background, j) in scenario()) {
        let mut c = build(&shapes, &nodes);
        load(&mut c, &background);
        let all: Vec<NodeId> = (0..c.nodes.len() as u32).map(NodeId).collect();
        let first = place(&c, &j, &all);
        let mut reversed = all.clone();
        reversed.reverse();
        prop_assert_eq!(&place(&c, &j, &reversed), &first, "not deterministic");
        if let Ok(a) = &first {
            check(&c, &j, a)?;
            let sel = select_nodes(&c, &j, &all, &|n| c.free_amounts(n));
            prop_assert!(sel.is_some(), "place fits but select_nodes does not");
            prop_assert_eq!(sel, select_nodes(&c, &j, &all, &|n| c.free_amounts(n)));
        }
    }

    #[test]
    fn failures_say_truly_whether_the_job_could_ever_fit(
        (shapes, nodes, background, j) in scenario()
    ) {
        let mut c = build(&shapes, &nodes);
        let loaded = load(&mut c, &background);
        let all: Vec<NodeId> = (0..c.nodes.len() as u32).map(NodeId).collect();
        let Err(err) = place(&c, &j, &all) else {
            return Ok(());
        };
        let mut idle = c.clone();
        for (id, a) in loaded.iter().rev() {
            idle.release(*id, a);
        }
        let on_idle = place(&idle, &j, &all);
        let mut all_up = idle.clone();
        for n in &mut all_up.nodes {
            n.avail = NodeAvail::Up;
        }
        let on_all_up = place(&all_up, &j, &all);
        match err.reason() {
            "Resources" => prop_assert!(on_idle.is_ok(), "{} but not on idle nodes", err),
            "ReqNodeNotAvail" => {
                prop_assert!(on_idle.is_err(), "{}", err);
                prop_assert!(on_all_up.is_ok(), "{} but not with all nodes up", err);
            }
            _ => prop_assert!(on_all_up.is_err(), "{} but fits on idle up nodes", err),
        }
    }

    #[test]
    fn why_not_agrees_with_node_task_capacity((shapes, nodes, background, j) in scenario()) {
        let mut c = build(&shapes, &nodes);
        load(&mut c, &background);
        for n in 0..c.nodes.len() as u32 {
            let node = NodeId(n);
            let fits_some = (0..j.groups.len())
                .any(|g| j.groups[g].count > 0 && node_task_capacity(&c, &j, node, g) > 0);
            let why = why_not(&c, &j, node);
            prop_assert_eq!(why.is_none(), fits_some, "{:?}", why);
            if let Some(w) = why {
                prop_assert!(!w.to_string().is_empty());
            }
        }
    }
}
