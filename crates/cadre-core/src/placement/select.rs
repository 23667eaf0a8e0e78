//! Node selection: which nodes, and how many tasks of each group on each, for a gang.
//!
//! Given: candidate nodes (already filtered for state, features and labels) with, per task
//! group, how many tasks fit on each now, and a [`Pool`] that recounts a node once earlier
//! groups of the same job have been put on it. Decided: a [`Plan`], or nothing. Must hold:
//! every count in a plan is within what the pool said fits; `tasks_per_node`, `nodes`,
//! `one_task_per_node` and the network span are honoured; the answer depends only on the
//! input (ties end on node ids, leaves are visited in id order).
//!
//! Both [`super::place`] (device-level pool) and [`super::select_nodes`] (aggregate pool)
//! run this same code; only the way a node is counted differs.

use super::GroupReq;
use super::frag::{ClassNeed, FreeState, RiseMap, WorkloadProfile};
use crate::cluster::{Cluster, NodeId};
use crate::job::{JobSpec, NetworkSpan};
use crate::resources::Amounts;
use std::cell::RefCell;
use std::cmp::Reverse;

/// A node that can take at least one task of some group.
#[derive(Clone, Debug)]
pub(super) struct Cand {
    pub node: NodeId,
    /// Dense leaf key, below [`Engine::slots`]: see [`slot_key`].
    pub leaf_key: u32,
    /// Dense block key, below [`Engine::slots`].
    pub block_key: u32,
    /// Nothing runs on it.
    pub idle: bool,
    /// Aggregate free amounts, for the best-fit order.
    pub free: Amounts,
    /// Eligible nodes this candidate stands for, itself included: equal nodes of higher ids
    /// left out of the candidates count here where placement counts over whole leaves.
    pub weight: u32,
}

/// Recounts a node in the middle of a trial.
pub(super) trait Pool {
    /// Tasks of group `g` (processing order) that fit on candidate `i` once `placed` (tasks
    /// of earlier groups of this trial: (group, count), in the order they were placed) are
    /// there.
    fn recap(&self, i: usize, g: usize, placed: &[(usize, u32)]) -> u32;
}

/// Tasks per node per group: (candidate, group in processing order, tasks), in the order
/// they were chosen (groups in processing order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Plan {
    pub entries: Vec<(usize, usize, u32)>,
}

/// How good a plan is; lower is better. Field order is the preference order written in the
/// module doc of [`super`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Score {
    /// Idle nodes the job breaks into.
    idle_taken: u32,
    /// Milli-GPUs left free on the nodes the job uses (best fit on GPUs).
    gpu_left: u64,
    /// Cores left free on the nodes the job uses.
    cores_left: u64,
    leaves: u32,
    blocks: u32,
    /// Idle nodes left under the leaves the job uses: fuller leaves first, so that whole
    /// free leaves stay whole.
    leaf_idle_left: u32,
    /// The nodes used, ascending: the final tie-break.
    nodes: Vec<NodeId>,
}

type Best = Option<(Score, Plan)>;

/// Tries one domain of candidates under a leaf limit; true if the job fits there.
type Consider<'c> = dyn FnMut(&[usize], u32, &mut Scratch, &mut Best) -> bool + 'c;

/// One candidate node of one group in a trial.
#[derive(Clone, Copy, Debug)]
struct Opt {
    i: usize,
    cap: u32,
    take: u32,
    key: FitKey,
}

/// Best fit of one node for some tasks: the rise in fragmentation (0 without a profile),
/// then whether it breaks an idle node, then milli-GPUs and cores left on it afterwards, then
/// idle nodes under its leaf (fuller leaves first), then its id.
type FitKey = (i128, bool, u64, u64, u32, NodeId);

/// The part of a [`FitKey`] that depends on the node alone (not on the other candidates):
/// all of it but the idle nodes under its leaf and its id.
pub(super) type FitHead = (i128, bool, u64, u64);

/// The [`FitHead`] of `n` tasks of group `g` (processing order) on candidate `c`, where
/// earlier groups of the same job already take `used` and `fresh` says none of them is there.
pub(super) fn fit_head(
    frag: Option<&Frag<'_>>,
    c: &Cand,
    group: &GroupReq<'_>,
    g: usize,
    n: u32,
    used: &Amounts,
    fresh: bool,
) -> FitHead {
    let after = c
        .free
        .saturating_sub(used)
        .saturating_sub(&(group.res.amounts() * u64::from(n)));
    let rise = frag.map_or(0, |f| f.rise(c, group, g, n, used));
    (rise, c.idle && fresh, after.gpu_milli, after.cpus)
}

/// The fragmentation preference of [`super::place_with_profile`]: the profile's classes and
/// the cluster whose device usage the candidates are scored on.
pub(super) struct Frag<'a> {
    pub classes: Vec<ClassNeed>,
    pub cluster: &'a Cluster,
    /// Rises already computed under the profile ([`super::frag::RiseMemo`]): nodes in the
    /// same state (idle nodes of a shape, full-but-one nodes) are scored once.
    pub memo: RefCell<std::sync::MutexGuard<'a, RiseMap>>,
    /// Rises on idle nodes, by (shape, group, tasks).
    pub idle_memo: RefCell<Vec<(IdleKey, i128)>>,
}

/// An idle node's score key: (shape, group, tasks).
pub(super) type IdleKey = (u16, usize, u32);

impl<'a> Frag<'a> {
    /// The preference of `profile` on `cluster`'s usage; `None` for an empty profile.
    pub(super) fn of(profile: &'a WorkloadProfile, cluster: &'a Cluster) -> Option<Frag<'a>> {
        (!profile.is_empty()).then(|| Frag {
            classes: profile.needs(),
            cluster,
            memo: RefCell::new(profile.rises().lock()),
            idle_memo: Default::default(),
        })
    }

    /// How much `n` more tasks of `g` on candidate `c` raise its fragmentation; `used`: what
    /// earlier groups of the job already take there (counted in cores and memory only).
    fn rise(&self, c: &Cand, g: &GroupReq<'_>, gi: usize, n: u32, used: &Amounts) -> i128 {
        let node = self.cluster.node(c.node);
        // An idle node's state is its shape's: scored once per shape, without building it.
        let idle_key = (c.idle && used.is_zero()).then_some((node.shape.0, gi, n));
        if let Some(k) = idle_key {
            if let Some(&(_, rise)) = self.idle_memo.borrow().iter().find(|(key, _)| *key == k) {
                return rise;
            }
        }
        let usage = &node.usage;
        let free = c.free.saturating_sub(used);
        let frees = usage
            .gpu_milli
            .iter()
            .map(|&m| crate::resources::MILLI_PER_GPU.saturating_sub(m));
        let Some(before) = FreeState::new(frees, free.cpus, free.mem_mib) else {
            return 0;
        };
        let r = g.res;
        let key = (before, (r.gpus, g.share, r.cpus, r.mem_mib), n);
        if let Some(&rise) = self.memo.borrow().get(&key) {
            return rise;
        }
        let mut after = before;
        let rise = if after.take(r.gpus, g.share, n) {
            after.take_host(r.cpus, r.mem_mib, n);
            after.fragmentation(&self.classes) as i128 - before.fragmentation(&self.classes) as i128
        } else {
            0
        };
        self.memo.borrow_mut().insert(key, rise);
        if let Some(k) = idle_key {
            self.idle_memo.borrow_mut().push((k, rise));
        }
        rise
    }
}

pub(super) struct Engine<'a> {
    pub job: &'a JobSpec,
    /// In processing order.
    pub groups: &'a [GroupReq<'a>],
    pub cands: &'a [Cand],
    /// `caps[i * groups.len() + g]`: tasks of group `g` that fit on candidate `i`.
    pub caps: &'a [u32],
    /// Bound of the leaf and block keys.
    pub slots: usize,
    /// The fragmentation preference, when the caller gave a profile (device view only).
    pub frag: Option<Frag<'a>>,
}

/// The dense key of an optional leaf or block id among `len` of them: 0 for none, the id
/// plus one, or `len + 1` for an id out of range (lumped together rather than dropped).
pub(super) fn slot_key(id: Option<u32>, len: usize) -> u32 {
    match id {
        None => 0,
        Some(x) if (x as usize) < len => x + 1,
        Some(_) => len as u32 + 1,
    }
}

/// Per-run scratch, reset between trials.
struct Scratch {
    used: Vec<Amounts>,
    tasks_on: Vec<u32>,
    touched: Vec<usize>,
    opts: Vec<Opt>,
    placed: Vec<(usize, u32)>,
    /// Idle candidates per leaf key.
    leaf_idle: Vec<u32>,
}

impl Engine<'_> {
    fn cap(&self, i: usize, g: usize) -> u32 {
        self.caps[i * self.groups.len() + g]
    }

    /// The best plan for the given task counts (per group, processing order), or `None`.
    pub(super) fn run(&self, pool: &dyn Pool, counts: &[u32]) -> Option<Plan> {
        if counts.iter().all(|&c| c == 0) {
            return None;
        }
        let n = self.cands.len();
        let mut s = Scratch {
            used: vec![Amounts::ZERO; n],
            tasks_on: vec![0; n],
            touched: Vec::new(),
            opts: Vec::with_capacity(n),
            placed: Vec::new(),
            leaf_idle: vec![0; self.slots],
        };
        for c in self.cands {
            s.leaf_idle[c.leaf_key as usize] += u32::from(c.idle) * c.weight;
        }
        let span = self.job.topology.span;
        let limit = match span {
            NetworkSpan::MaxSwitches(m) => m.max(1),
            NetworkSpan::OneLeaf => 1,
            _ => u32::MAX,
        };
        // All candidates first: a plan on one node is the best plan of every span (the fit
        // key already prefers fuller leaves), so the per-leaf trials are not needed.
        let all: Vec<usize> = (0..n).collect();
        let mut best: Option<(Score, Plan)> = None;
        let mut consider = |dom: &[usize], max_leaves: u32, s: &mut Scratch, best: &mut Best| {
            let Some(plan) = self.trial(pool, dom, counts, s) else {
                return false;
            };
            let score = self.score(&plan, &s.leaf_idle);
            if score.leaves > max_leaves {
                return false;
            }
            if best.as_ref().is_none_or(|(b, _)| score < *b) {
                *best = Some((score, plan));
            }
            true
        };
        if span != NetworkSpan::OneBlock || self.block_count() <= 1 {
            consider(&all, limit, &mut s, &mut best);
        }
        if best
            .as_ref()
            .is_some_and(|(score, _)| score.nodes.len() == 1)
        {
            return best.map(|(_, plan)| plan);
        }
        if span == NetworkSpan::OneBlock {
            for dom in self.buckets(|c| c.block_key) {
                consider(&dom, u32::MAX, &mut s, &mut best);
            }
            return best.map(|(_, plan)| plan);
        }
        let leaves = self.buckets(|c| c.leaf_key);
        if leaves.len() > 1 {
            let mut one_leaf = false;
            for dom in &leaves {
                one_leaf |= consider(dom, 1, &mut s, &mut best);
            }
            if !one_leaf && limit > 1 {
                self.leaf_greedy(counts, &leaves, limit, &mut s, &mut best, &mut consider);
            }
        }
        best.map(|(_, plan)| plan)
    }

    fn block_count(&self) -> usize {
        let mut seen = vec![false; self.slots];
        self.cands
            .iter()
            .for_each(|c| seen[c.block_key as usize] = true);
        seen.iter().filter(|&&b| b).count()
    }

    /// Candidates grouped by a dense key (leaf or block), groups in key order, each group
    /// in candidate order.
    fn buckets(&self, key: impl Fn(&Cand) -> u32) -> Vec<Vec<usize>> {
        let mut out: Vec<Vec<usize>> = vec![Vec::new(); self.slots];
        for (i, c) in self.cands.iter().enumerate() {
            out[key(c) as usize].push(i);
        }
        out.retain(|b| !b.is_empty());
        out
    }

    /// A job too big for one leaf: leaves with the most room for it first (ties by leaf id),
    /// added one at a time until the job fits or `limit` leaves are used.
    fn leaf_greedy(
        &self,
        counts: &[u32],
        leaves: &[Vec<usize>],
        limit: u32,
        s: &mut Scratch,
        best: &mut Best,
        consider: &mut Consider<'_>,
    ) {
        let Some(main) = counts.iter().position(|&c| c > 0) else {
            return;
        };
        // A leaf's room is what `choose` could take there: with `tasks_per_node = k`,
        // k tasks on each node that holds k, and the remainder on one node that holds it;
        // one task a node with `one_task_per_node`; otherwise what the nodes hold.
        let group = self.groups[main].group;
        let per_node = match self.job.one_task_per_node {
            true => Some(1),
            false => group.tasks_per_node.filter(|&k| k > 0),
        };
        let need = counts[main];
        let room_of = |dom: &[usize]| -> u64 {
            let weighted =
                |i: usize, tasks: u32| u64::from(tasks) * u64::from(self.cands[i].weight);
            let Some(k) = per_node else {
                return dom.iter().map(|&i| weighted(i, self.cap(i, main))).sum();
            };
            let full: u64 = (dom.iter())
                .filter(|&&i| self.cap(i, main) >= k)
                .map(|&i| weighted(i, k))
                .sum();
            let rem = need % k;
            let rest = rem > 0 && dom.iter().any(|&i| (rem..k).contains(&self.cap(i, main)));
            full + if rest { u64::from(rem) } else { 0 }
        };
        let mut room: Vec<(u64, usize)> = leaves
            .iter()
            .enumerate()
            .map(|(leaf, dom)| (room_of(dom), leaf))
            .collect();
        room.sort_by_key(|&(r, leaf)| (Reverse(r), leaf));
        let mut dom: Vec<usize> = Vec::new();
        let mut total = 0u64;
        for (k, (r, leaf)) in room.iter().enumerate() {
            if k as u32 >= limit || *r == 0 {
                break;
            }
            dom.extend_from_slice(&leaves[*leaf]);
            total += r;
            if total < u64::from(counts[main]) || k == 0 {
                continue;
            }
            dom.sort_unstable();
            if consider(&dom, limit, s, best) {
                return;
            }
        }
    }

    fn score(&self, plan: &Plan, leaf_idle: &[u32]) -> Score {
        let mut nodes: Vec<usize> = plan.entries.iter().map(|e| e.0).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let mut used = vec![Amounts::ZERO; nodes.len()];
        for &(i, g, n) in &plan.entries {
            if let Ok(k) = nodes.binary_search(&i) {
                used[k] += self.groups[g].res.amounts() * u64::from(n);
            }
        }
        let mut leaves: Vec<u32> = nodes.iter().map(|&i| self.cands[i].leaf_key).collect();
        leaves.sort_unstable();
        leaves.dedup();
        let mut blocks: Vec<u32> = nodes.iter().map(|&i| self.cands[i].block_key).collect();
        blocks.sort_unstable();
        blocks.dedup();
        let idle_taken = nodes.iter().filter(|&&i| self.cands[i].idle).count() as u32;
        let idle_in_leaves: u32 = leaves.iter().map(|&l| leaf_idle[l as usize]).sum();
        Score {
            idle_taken,
            gpu_left: nodes
                .iter()
                .zip(&used)
                .map(|(&i, u)| self.cands[i].free.gpu_milli.saturating_sub(u.gpu_milli))
                .sum(),
            cores_left: nodes
                .iter()
                .zip(&used)
                .map(|(&i, u)| self.cands[i].free.cpus.saturating_sub(u.cpus))
                .sum(),
            leaves: leaves.len() as u32,
            blocks: blocks.len() as u32,
            leaf_idle_left: idle_in_leaves.saturating_sub(idle_taken),
            nodes: nodes.iter().map(|&i| self.cands[i].node).collect(),
        }
    }

    /// Places every group within `dom` (candidate indices, ascending), in processing order;
    /// when a later group does not fit on what the earlier ones left, it is moved to the
    /// front and the trial starts over (at most once per group).
    fn trial(
        &self,
        pool: &dyn Pool,
        dom: &[usize],
        counts: &[u32],
        s: &mut Scratch,
    ) -> Option<Plan> {
        let mut order: Vec<usize> = (0..counts.len()).filter(|&g| counts[g] > 0).collect();
        for _ in 0..order.len() {
            match self.trial_in_order(pool, dom, counts, &order, s) {
                Ok(plan) => return Some(plan),
                Err(0) => return None,
                Err(p) => {
                    let g = order.remove(p);
                    order.insert(0, g);
                }
            }
        }
        None
    }

    /// One trial with the groups in `order`; `Err(p)`: the group at position `p` failed.
    fn trial_in_order(
        &self,
        pool: &dyn Pool,
        dom: &[usize],
        counts: &[u32],
        order: &[usize],
        s: &mut Scratch,
    ) -> Result<Plan, usize> {
        for &i in &s.touched {
            s.used[i] = Amounts::ZERO;
            s.tasks_on[i] = 0;
        }
        s.touched.clear();
        let mut plan = Plan::default();
        for (pos, &g) in order.iter().enumerate() {
            let need = counts[g];
            s.opts.clear();
            for &i in dom {
                let mut cap = if s.tasks_on[i] > 0 {
                    if self.job.one_task_per_node {
                        continue;
                    }
                    s.placed.clear();
                    s.placed.extend(
                        plan.entries
                            .iter()
                            .filter(|e| e.0 == i)
                            .map(|&(_, pg, pn)| (pg, pn)),
                    );
                    pool.recap(i, g, &s.placed)
                } else {
                    self.cap(i, g)
                };
                if self.job.one_task_per_node {
                    cap = cap.min(1);
                }
                if cap > 0 {
                    s.opts.push(Opt {
                        i,
                        cap,
                        take: 0,
                        key: (0, false, 0, 0, 0, NodeId(0)),
                    });
                }
            }
            let start = plan.entries.len();
            if !self.choose(g, need, s, &mut plan) {
                return Err(pos);
            }
            for &(i, _, n) in &plan.entries[start..] {
                if s.tasks_on[i] == 0 {
                    s.touched.push(i);
                }
                s.tasks_on[i] += n;
                s.used[i] += self.groups[g].res.amounts() * u64::from(n);
            }
        }
        Ok(plan)
    }

    fn key(&self, i: usize, g: usize, n: u32, s: &Scratch) -> FitKey {
        let c = &self.cands[i];
        let fresh = s.tasks_on[i] == 0;
        let head = fit_head(
            self.frag.as_ref(),
            c,
            &self.groups[g],
            g,
            n,
            &s.used[i],
            fresh,
        );
        (
            head.0,
            head.1,
            head.2,
            head.3,
            s.leaf_idle[c.leaf_key as usize],
            c.node,
        )
    }

    /// Chooses the nodes of group `g` for `need` tasks among `s.opts`.
    fn choose(&self, g: usize, need: u32, s: &mut Scratch, plan: &mut Plan) -> bool {
        let group = self.groups[g].group;
        let mut opts = std::mem::take(&mut s.opts);
        let ok = match (group.nodes, group.tasks_per_node) {
            (Some(nn), Some(k)) => {
                // Exactly `nn` nodes of exactly `k` tasks.
                need == nn.saturating_mul(k) && self.take_full(g, k, nn, &mut opts, s, plan)
            }
            (None, Some(k)) => {
                let (full, rem) = (need / k, need % k);
                self.take_full(g, k, full, &mut opts, s, plan)
                    && (rem == 0 || self.take_best(g, rem, &opts, s, plan))
            }
            (Some(nn), None) => self.take_spread(g, need, nn, &mut opts, s, plan),
            (None, None) => {
                // One node if one can hold the group; else the roomiest nodes until the rest
                // fits on one node, which is then the best-fitting one.
                if self.take_best(g, need, &opts, s, plan) {
                    true
                } else {
                    for o in opts.iter_mut() {
                        o.take = o.cap.min(need);
                        o.key = self.key(o.i, g, o.take, s);
                    }
                    opts.sort_unstable_by_key(|o| (Reverse(o.take), o.key));
                    let mut rest = need;
                    let mut pos = 0;
                    loop {
                        let Some(o) = opts.get(pos) else {
                            break false;
                        };
                        if o.take >= rest {
                            let end = opts[pos..]
                                .iter()
                                .position(|o| o.take < rest)
                                .map_or(opts.len(), |k| pos + k);
                            let best = opts[pos..end]
                                .iter()
                                .min_by_key(|o| self.key(o.i, g, rest, s))
                                .map(|o| o.i);
                            if let Some(i) = best {
                                plan.entries.push((i, g, rest));
                            }
                            break best.is_some();
                        }
                        plan.entries.push((o.i, g, o.take));
                        rest -= o.take;
                        pos += 1;
                    }
                }
            }
        };
        opts.clear();
        s.opts = opts;
        ok
    }

    /// The best-fitting single node for `n` tasks of group `g`, not yet in this group.
    fn take_best(&self, g: usize, n: u32, opts: &[Opt], s: &Scratch, plan: &mut Plan) -> bool {
        let taken = |i: usize| plan.entries.iter().any(|e| e.0 == i && e.1 == g);
        // Untouched idle nodes of one shape under one leaf differ in their key by their id
        // alone (same capacity, fragmentation rise, leftovers and idle nodes under the
        // leaf), and opts are in id order: only the first of each such class can win.
        let shapes = self.frag.as_ref().map_or(0, |f| f.cluster.shapes.len());
        let mut idle_seen = vec![false; if shapes > 0 { shapes * self.slots } else { 0 }];
        let mut first_of_class = |o: &Opt| -> bool {
            let c = &self.cands[o.i];
            if shapes == 0 || !c.idle || s.tasks_on[o.i] > 0 {
                return true;
            }
            let Some(f) = &self.frag else {
                return true;
            };
            let class = f.cluster.node(c.node).shape.0 as usize * self.slots + c.leaf_key as usize;
            !std::mem::replace(&mut idle_seen[class], true)
        };
        let best = opts
            .iter()
            .filter(|o| o.cap >= n && !taken(o.i) && first_of_class(o))
            .min_by_key(|o| self.key(o.i, g, n, s));
        match best {
            Some(o) => {
                plan.entries.push((o.i, g, n));
                true
            }
            None => false,
        }
    }

    /// `count` nodes of `k` tasks each, best-fitting first.
    fn take_full(
        &self,
        g: usize,
        k: u32,
        count: u32,
        opts: &mut Vec<Opt>,
        s: &Scratch,
        plan: &mut Plan,
    ) -> bool {
        if count == 0 {
            return true;
        }
        opts.retain(|o| o.cap >= k);
        if (opts.len() as u64) < u64::from(count) {
            return false;
        }
        for o in opts.iter_mut() {
            o.key = self.key(o.i, g, k, s);
        }
        let count = count as usize;
        if count < opts.len() {
            opts.select_nth_unstable_by_key(count - 1, |o| o.key);
        }
        let mut chosen: Vec<usize> = opts[..count].iter().map(|o| o.i).collect();
        chosen.sort_unstable_by_key(|&i| self.cands[i].node);
        plan.entries.extend(chosen.into_iter().map(|i| (i, g, k)));
        opts.drain(..count);
        true
    }

    /// Exactly `nn` nodes with at least one task each: the roomiest (then best-fitting)
    /// nodes, filled in that order after each got its first task.
    fn take_spread(
        &self,
        g: usize,
        need: u32,
        nn: u32,
        opts: &mut [Opt],
        s: &Scratch,
        plan: &mut Plan,
    ) -> bool {
        if nn == 0 || nn > need || (opts.len() as u64) < u64::from(nn) {
            return false;
        }
        let most = need - (nn - 1);
        for o in opts.iter_mut() {
            o.take = o.cap.min(most);
            o.key = self.key(o.i, g, o.take, s);
        }
        opts.sort_unstable_by_key(|o| (Reverse(o.take), o.key));
        let chosen = &opts[..nn as usize];
        let room: u64 = chosen.iter().map(|o| u64::from(o.take)).sum();
        if room < u64::from(need) {
            return false;
        }
        let mut extra = need - nn;
        for o in chosen {
            let more = (o.take - 1).min(extra);
            extra -= more;
            plan.entries.push((o.i, g, 1 + more));
        }
        true
    }
}
