//! Nodes grouped by everything placement sees of them, kept up to date between passes, so
//! that a placement looks at a few nodes of each kind instead of every node.
//!
//! # Given
//! The cluster and its live usage. Placement decides on a node from its shape, leaf switch,
//! NVLink block, features, labels, state, whether an exclusive job holds it, whether
//! anything runs on it, and which cores, GPUs (milli-GPUs per device), NICs, memory and
//! named resources are in use ([`crate::placement`]). Two nodes equal in all of these are
//! the same to it but for their ids.
//!
//! # Decided
//! A class per distinct such state, with its members in node order; for a job that can use
//! at most `m` nodes, the first `m` members of each class (of its partition) stand for the
//! class, the last one counting for the members left out ([`NodeClasses::representatives`]).
//! For a job that goes on one node, what each class offers its shape, remembered while the
//! class keeps its state ([`ClassFits`], by the class's stamp).
//!
//! # Must hold
//! Placement on the representatives gives the allocation placement on every node gives:
//! within a class the nodes differ in their id alone, every choice placement makes among
//! equal nodes falls on the lowest ids (its keys end on the node id), and a job never uses
//! more nodes than it has tasks, so the nodes it uses in a class are always among the first
//! `m`. What placement counts over whole leaves (idle nodes under a leaf, the room of a
//! leaf) comes from the weights. The scheduler's equivalence test checks decisions against
//! a scheduler without this index; [`NodeClasses::check`] checks the index against the
//! cluster.

use crate::cluster::{Cluster, NodeAvail, NodeId, PartitionId};
use crate::placement::{DeviceScratch, JobLayout, NodeFit, OneNodeChoice};
use foldhash::fast::FixedState;
use hashbrown::HashTable;
use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard};

/// What never changes while a node is up, but by an administrator's hand: interned per
/// node so that a usage change hashes no strings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct StaticKey {
    shape: u16,
    leaf: Option<u32>,
    block: Option<u32>,
    features: Vec<String>,
    labels: Vec<(String, String)>,
}

/// A node as placement sees it, but for its id: a class's state.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ClassKey {
    kind: u32,
    avail: NodeAvail,
    idle: bool,
    exclusive: bool,
    cores: Vec<usize>,
    gpu_milli: Vec<u32>,
    nics: Vec<usize>,
    mem_mib: u64,
    named: Vec<u64>,
}

/// A [`ClassKey`] read in place: a node's, which every start and end looks up for each of
/// its nodes (making the key cost four vectors each time), or a class's. Classes are found
/// by its hash.
#[derive(Debug, PartialEq, Eq, Hash)]
struct KeyView<'a> {
    kind: u32,
    avail: NodeAvail,
    idle: bool,
    exclusive: bool,
    cores: &'a [usize],
    gpu_milli: &'a [u32],
    nics: &'a [usize],
    mem_mib: u64,
    named: &'a [u64],
}

impl ClassKey {
    fn view(&self) -> KeyView<'_> {
        KeyView {
            kind: self.kind,
            avail: self.avail,
            idle: self.idle,
            exclusive: self.exclusive,
            cores: &self.cores,
            gpu_milli: &self.gpu_milli,
            nics: &self.nics,
            mem_mib: self.mem_mib,
            named: &self.named,
        }
    }
}

impl KeyView<'_> {
    fn owned(&self) -> ClassKey {
        ClassKey {
            kind: self.kind,
            avail: self.avail,
            idle: self.idle,
            exclusive: self.exclusive,
            cores: self.cores.to_vec(),
            gpu_milli: self.gpu_milli.to_vec(),
            nics: self.nics.to_vec(),
            mem_mib: self.mem_mib,
            named: self.named.to_vec(),
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Class {
    members: BTreeSet<NodeId>,
    /// The first of the members, kept beside them: looking it up in the set, for every
    /// class at every one-node start, was most of the cost of choosing the node.
    first: Option<NodeId>,
    /// Whole GPUs free on each member (0 on a node that is not up or is held exclusively).
    whole_gpus: u32,
}

/// The classes of the cluster's nodes.
#[derive(Clone, Debug, Default)]
pub(super) struct NodeClasses {
    kinds: HashMap<StaticKey, u32, FixedState>,
    kind_of: Vec<u32>,
    /// The ids of the classes with members, by the hashes of their keys (foldhash, fixed
    /// seed: `hasher`): every start and end looks its nodes' states up.
    by_key: HashTable<u32>,
    hasher: FixedState,
    /// Indexed by class id; a class without members is free for reuse.
    classes: Vec<Class>,
    /// Per class id, its key while it has members.
    keys: Vec<Option<ClassKey>>,
    unused: Vec<u32>,
    /// The ids of the classes with members, by their nodes' whole GPUs free: on a busy
    /// cluster almost every node is in a class of its own, most of them with no whole GPU
    /// free, and a job that needs some looks at the others alone.
    by_whole: Vec<BTreeSet<u32>>,
    class_of: Vec<u32>,
    /// Per class id, a number given when the id last took a state, never given twice: what
    /// is remembered of a class ([`ClassFits`]) holds while its stamp is the same.
    stamps: Vec<u64>,
    next_stamp: u64,
}

fn static_key(cluster: &Cluster, n: NodeId) -> StaticKey {
    let node = cluster.node(n);
    StaticKey {
        shape: node.shape.0,
        leaf: node.leaf.map(|l| l.0),
        block: node.block.map(|b| b.0),
        features: node.features.clone(),
        labels: node
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

fn whole_gpus(cluster: &Cluster, n: NodeId) -> u32 {
    let node = cluster.node(n);
    if node.avail != NodeAvail::Up || node.usage.exclusive.is_some() {
        return 0;
    }
    node.usage.gpu_milli.iter().filter(|&&m| m == 0).count() as u32
}

impl NodeClasses {
    pub(super) fn new(cluster: &Cluster) -> NodeClasses {
        let n = cluster.nodes.len();
        let mut classes = NodeClasses {
            kind_of: vec![0; n],
            class_of: vec![u32::MAX; n],
            ..NodeClasses::default()
        };
        for i in 0..n as u32 {
            classes.set_kind(cluster, NodeId(i));
            classes.place(cluster, NodeId(i));
        }
        classes
    }

    fn set_kind(&mut self, cluster: &Cluster, n: NodeId) {
        let key = static_key(cluster, n);
        let next = self.kinds.len() as u32;
        self.kind_of[n.0 as usize] = *self.kinds.entry(key).or_insert(next);
    }

    /// Node `n`'s state, read in place.
    fn view<'a>(&self, cluster: &'a Cluster, n: NodeId) -> KeyView<'a> {
        let node = cluster.node(n);
        let u = &node.usage;
        KeyView {
            kind: self.kind_of[n.0 as usize],
            avail: node.avail,
            idle: u.jobs.is_empty(),
            exclusive: u.exclusive.is_some(),
            cores: u.cores.as_slice(),
            gpu_milli: &u.gpu_milli,
            nics: u.nics.as_slice(),
            mem_mib: u.mem_mib,
            named: &u.named,
        }
    }

    /// The class with state `view` (whose hash is `hash`), if there is one.
    fn find(&self, view: &KeyView<'_>, hash: u64) -> Option<u32> {
        let keys = &self.keys;
        (self.by_key)
            .find(hash, |&id| {
                keys[id as usize]
                    .as_ref()
                    .is_some_and(|k| k.view() == *view)
            })
            .copied()
    }

    /// Puts a node that is in no class into the class of its state.
    fn place(&mut self, cluster: &Cluster, n: NodeId) {
        let view = self.view(cluster, n);
        let hash = self.hasher.hash_one(&view);
        let id = match self.find(&view, hash) {
            Some(id) => id,
            None => {
                let id = match self.unused.pop() {
                    Some(id) => id,
                    None => {
                        self.classes.push(Class::default());
                        self.keys.push(None);
                        self.stamps.push(0);
                        self.classes.len() as u32 - 1
                    }
                };
                self.stamps[id as usize] = self.next_stamp;
                self.next_stamp += 1;
                let whole = whole_gpus(cluster, n);
                self.classes[id as usize].whole_gpus = whole;
                let bucket = whole as usize;
                if self.by_whole.len() <= bucket {
                    self.by_whole.resize_with(bucket + 1, BTreeSet::new);
                }
                self.by_whole[bucket].insert(id);
                self.keys[id as usize] = Some(view.owned());
                let (keys, hasher) = (&self.keys, &self.hasher);
                self.by_key.insert_unique(hash, id, |&id| {
                    let key = keys[id as usize].as_ref();
                    hasher.hash_one(key.expect("a listed class has its key").view())
                });
                id
            }
        };
        let class = &mut self.classes[id as usize];
        class.members.insert(n);
        class.first = Some(class.first.map_or(n, |f| f.min(n)));
        self.class_of[n.0 as usize] = id;
    }

    /// Moves nodes whose usage or state changed to the class of their new state.
    pub(super) fn refresh(&mut self, cluster: &Cluster, nodes: &[NodeId]) {
        for &n in nodes {
            let old = self.class_of[n.0 as usize];
            let class = &mut self.classes[old as usize];
            class.members.remove(&n);
            if class.first == Some(n) {
                class.first = class.members.first().copied();
            }
            if class.members.is_empty() {
                if let Some(key) = self.keys[old as usize].take() {
                    let hash = self.hasher.hash_one(key.view());
                    match self.by_key.find_entry(hash, |&id| id == old) {
                        Ok(listed) => {
                            listed.remove();
                        }
                        Err(_) => debug_assert!(false, "class {old} is not found by its key"),
                    }
                }
                self.by_whole[class.whole_gpus as usize].remove(&old);
                self.unused.push(old);
            }
            self.place(cluster, n);
        }
    }

    /// A node's features changed: its kind, and so its class, may differ.
    pub(super) fn refresh_static(&mut self, cluster: &Cluster, n: NodeId) {
        self.set_kind(cluster, n);
        self.refresh(cluster, &[n]);
    }

    /// The classes whose nodes have at least `gpus` whole GPUs free (any class for 0), each
    /// with its id, its nodes in partition `p` (and in `keep`, when given), ascending, and
    /// how many those are when that is known without counting them (`p` holds every node
    /// and `keep` is not given); by whole GPUs free, then by id.
    fn in_partition<'a>(
        &'a self,
        cluster: &'a Cluster,
        p: PartitionId,
        gpus: u32,
        keep: Option<&'a dyn Fn(NodeId) -> bool>,
    ) -> impl Iterator<Item = (u32, impl Iterator<Item = NodeId> + 'a, Option<usize>)> + 'a {
        let whole_cluster =
            keep.is_none() && cluster.partition(p).nodes.len() == cluster.nodes.len();
        let in_p = move |n: &NodeId| {
            whole_cluster
                || (cluster.node(*n).partitions.contains(&p) && keep.is_none_or(|k| k(*n)))
        };
        let buckets = self.by_whole.get(gpus as usize..).unwrap_or_default();
        buckets.iter().flatten().map(move |&id| {
            let class = &self.classes[id as usize];
            let members = class.members.iter().copied().filter(in_p);
            (id, members, whole_cluster.then_some(class.members.len()))
        })
    }

    /// For each class whose nodes have at least `gpus` whole GPUs free (any class for 0)
    /// and some node in partition `p`: its first node in `p`, how many of its nodes are in
    /// `p`, its id and its stamp; by whole GPUs free, then by id.
    pub(super) fn firsts<'a>(
        &'a self,
        cluster: &'a Cluster,
        p: PartitionId,
        gpus: u32,
    ) -> impl Iterator<Item = (NodeId, u32, u32, u64)> + 'a {
        self.in_partition(cluster, p, gpus, None)
            .filter_map(|(id, mut members, all)| {
                let (first, count) = match all {
                    // Every member is in the partition.
                    Some(all) => (self.classes[id as usize].first?, all),
                    None => {
                        let first = members.next()?;
                        (first, members.count() + 1)
                    }
                };
                Some((first, count as u32, id, self.stamps[id as usize]))
            })
    }

    /// For each class whose nodes have at least `gpus` whole GPUs free (any class for 0),
    /// its first `per_class` nodes in partition `p` (and in `keep`, when given), each
    /// weighing 1 but the last, which also counts the class's nodes in `p` (and `keep`)
    /// left out. Ascending by node.
    pub(super) fn representatives(
        &self,
        cluster: &Cluster,
        p: PartitionId,
        gpus: u32,
        per_class: u32,
        keep: Option<&dyn Fn(NodeId) -> bool>,
    ) -> Vec<(NodeId, u32)> {
        let per_class = per_class.max(1) as usize;
        let mut out = Vec::new();
        for (_, mut members, all) in self.in_partition(cluster, p, gpus, keep) {
            let start = out.len();
            out.extend(members.by_ref().take(per_class).map(|n| (n, 1)));
            let taken = out.len() - start;
            if taken == 0 {
                continue;
            }
            let rest = all.map_or_else(|| members.count(), |all| all - taken);
            if let Some(last) = out.last_mut() {
                last.1 += rest as u32;
            }
        }
        out.sort_unstable();
        out
    }

    /// Whether every node is in the class of its state, and the classes hold nothing else.
    pub(super) fn check(&self, cluster: &Cluster) -> Result<(), String> {
        for i in 0..cluster.nodes.len() {
            let n = NodeId(i as u32);
            let ours = self.class_of[i] as usize;
            if !self.classes[ours].members.contains(&n) {
                return Err(format!("node {n:?} is missing from its class"));
            }
            let view = self.view(cluster, n);
            let hash = self.hasher.hash_one(&view);
            if self.keys[ours].as_ref().map(ClassKey::view).as_ref() != Some(&view)
                || self.find(&view, hash) != Some(ours as u32)
            {
                return Err(format!("node {n:?} is in the class of another state"));
            }
            if self.classes[ours].whole_gpus != whole_gpus(cluster, n) {
                return Err(format!("node {n:?}'s class counts other whole GPUs"));
            }
        }
        for (id, class) in self.classes.iter().enumerate() {
            if class.first != class.members.first().copied() {
                return Err(format!(
                    "class {id} names another first member than its own"
                ));
            }
            let listed: Vec<bool> = (self.by_whole.iter())
                .map(|b| b.contains(&(id as u32)))
                .collect();
            let expected: Vec<bool> = (0..self.by_whole.len())
                .map(|w| !class.members.is_empty() && w == class.whole_gpus as usize)
                .collect();
            if listed != expected {
                return Err(format!(
                    "class {id} is listed under other whole GPUs than its own"
                ));
            }
        }
        let keyed = self.keys.iter().filter(|k| k.is_some()).count();
        if self.by_key.len() != keyed {
            return Err(format!(
                "{} classes are found by their keys, {keyed} have keys",
                self.by_key.len()
            ));
        }
        let members: usize = self.classes.iter().map(|c| c.members.len()).sum();
        if members != cluster.nodes.len() {
            return Err(format!(
                "the node classes hold {members} nodes, the cluster has {}",
                cluster.nodes.len()
            ));
        }
        Ok(())
    }
}

/// What the classes' nodes offer the jobs of each shape that go on one node
/// ([`crate::placement::OneNode`]), by shape and class id, each with the stamp of the class it was
/// found for; and the shape's [`JobLayout`]. Forgotten as every pass begins: the fits include
/// the workload profile's fragmentation preference, which changes only between passes (as
/// jobs are submitted). Not part of the scheduler's value: clones start empty.
#[derive(Default)]
pub(super) struct ClassFits(Mutex<Fits>);

#[derive(Default)]
pub(super) struct Fits {
    /// Per shape, what is remembered of it.
    pub(super) by_shape: HashMap<u32, ShapeFits>,
    /// Where a one-node placement chooses its node, cleared for each: made afresh, its
    /// counts were allocated again at every start.
    pub(super) choice: OneNodeChoice,
    /// Where such a placement picks its devices, likewise.
    pub(super) devices: DeviceScratch,
}

#[derive(Default)]
pub(super) struct ShapeFits {
    /// Per class id: the class's stamp and what it offers.
    pub(super) classes: Vec<Option<(u64, NodeFit)>>,
    /// Made at the shape's first one-node placement in the pass.
    pub(super) layout: Option<JobLayout>,
}

impl ClassFits {
    pub(super) fn lock(&self) -> MutexGuard<'_, Fits> {
        // A panic elsewhere while it was held leaves only fits, each complete.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn forget(&mut self) {
        (self.0.get_mut().unwrap_or_else(|e| e.into_inner()))
            .by_shape
            .clear();
    }
}

impl Clone for ClassFits {
    fn clone(&self) -> Self {
        ClassFits::default()
    }
}

impl std::fmt::Debug for ClassFits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClassFits")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_cluster;
    use crate::job::{JobId, JobSpec};
    use crate::placement;
    use crate::resources::TaskResources;
    use crate::time::Dur;

    /// The equivalence tests' cluster (two partitions, one over half the nodes), its nodes
    /// left in a few distinct states.
    fn busy_cluster() -> Cluster {
        let mut cluster = load_cluster(super::super::equivalence::CLUSTER, "classes").unwrap();
        let all: Vec<NodeId> = (0..cluster.nodes.len() as u32).map(NodeId).collect();
        for (k, gpus) in [8, 1, 2, 1, 4, 1, 3].into_iter().enumerate() {
            let task = TaskResources {
                cpus: 2,
                mem_mib: 1024,
                gpus,
                ..TaskResources::default()
            };
            let spec = JobSpec::simple("u", "a", 1, task, Dur(60));
            let alloc = placement::place(&cluster, &spec, &all).unwrap();
            cluster.book(JobId(k as u64 + 1), &alloc).unwrap();
        }
        cluster
    }

    /// The representatives of each class weigh, together, every node of the partition with
    /// enough whole GPUs free, whatever the number taken per class; with one per class they
    /// are the classes' first nodes and counts.
    #[test]
    fn representatives_and_firsts_count_every_node_of_the_partition() {
        let cluster = busy_cluster();
        let classes = NodeClasses::new(&cluster);
        classes.check(&cluster).unwrap();
        for (p, part) in cluster.partitions.iter().enumerate() {
            let p = PartitionId(p as u16);
            for gpus in [0, 1, 7, 8] {
                let eligible = part
                    .nodes
                    .iter()
                    .filter(|&&n| whole_gpus(&cluster, n) >= gpus)
                    .count() as u32;
                for per_class in [1, 2, 5] {
                    let reps = classes.representatives(&cluster, p, gpus, per_class, None);
                    let weight: u32 = reps.iter().map(|r| r.1).sum();
                    assert_eq!(weight, eligible, "{p:?}, {gpus} GPUs, {per_class} a class");
                }
                let mut firsts: Vec<(NodeId, u32)> = classes
                    .firsts(&cluster, p, gpus)
                    .map(|(n, count, _, _)| (n, count))
                    .collect();
                firsts.sort_unstable();
                assert_eq!(firsts, classes.representatives(&cluster, p, gpus, 1, None));
            }
        }
        let keep = |n: NodeId| n.0 % 2 == 0;
        let reps = classes.representatives(&cluster, PartitionId(0), 0, 2, Some(&keep));
        assert_eq!(reps.iter().map(|r| r.1).sum::<u32>(), 16, "{reps:?}");
        assert!(reps.iter().all(|r| keep(r.0)));
    }
}
