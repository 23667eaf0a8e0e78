//! The device-level view of one node: how many tasks of a group fit on it, and which cores,
//! GPUs and NICs a task gets.
//!
//! Given: a node's shape and a usage (the node's real usage, a working copy of it, or none
//! for an idle node). Decided: per task group, the number of tasks that still fit (exactly,
//! not an estimate), and for one task the devices it gets. Must hold: [`Layout::task_capacity`]
//! is at least 1 exactly when [`Work::assign`] succeeds for one more task, and assigning one
//! task lowers the capacity of its own group by exactly one, so that node selection (which
//! counts) and device assignment (which picks) never disagree.

use super::GroupReq;
use crate::alloc::TaskAlloc;
use crate::cluster::{NodeId, NodeShape, NodeUsage};
use crate::job::NumaPolicy;
use crate::resources::MILLI_PER_GPU;
use fixedbitset::FixedBitSet;
use smallvec::SmallVec;

/// Tasks of a group that need none of a resource are not limited by it.
const UNLIMITED: u32 = u32::MAX;

/// The cores of a NUMA domain: a range when contiguous (counted with one popcount).
#[derive(Clone, Debug, PartialEq)]
enum CoreSet {
    Range(usize, usize),
    List(Vec<u32>),
}

/// One NUMA domain of a shape, as placement walks it.
#[derive(Clone, Debug, PartialEq)]
struct DomainLayout {
    cores: CoreSet,
    /// NIC positions local to the domain.
    nics: Vec<u32>,
}

/// How one task group sees one shape.
#[derive(Clone, Debug, PartialEq)]
struct GroupOnShape {
    /// The shape has GPUs of the group's model (when it asks for one) and every named
    /// resource the group asks for.
    usable: bool,
    /// Per domain, the positions of GPUs of the wanted model.
    gpus: Vec<Vec<u32>>,
    /// Positions in [`NodeShape::named`] of the group's named resources, in request order.
    named: Vec<usize>,
    /// Every GPU of the shape is of the wanted model.
    all_gpus: bool,
}

#[derive(Clone, Debug, PartialEq)]
struct ShapeLayout {
    domains: Vec<DomainLayout>,
    groups: Vec<GroupOnShape>,
    /// Every core is in exactly one domain, so free cores can be counted on the whole set.
    cores_covered: bool,
}

/// Index of the shapes for the job's groups: built once per call (or once for every job of
/// the same groups, see [`super::JobLayout`]), so that the per node work is counting bits
/// and never allocating.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Layout {
    shapes: Vec<ShapeLayout>,
}

/// A read-only view of what is in use on a node; empty slices and `None` mean nothing.
#[derive(Clone, Copy)]
pub(super) struct UsageRef<'a> {
    cores: Option<&'a FixedBitSet>,
    gpu_milli: &'a [u32],
    nics: Option<&'a FixedBitSet>,
    mem_mib: u64,
    named: &'a [u64],
}

impl<'a> UsageRef<'a> {
    pub(super) const IDLE: UsageRef<'static> = UsageRef {
        cores: None,
        gpu_milli: &[],
        nics: None,
        mem_mib: 0,
        named: &[],
    };

    pub(super) fn of(usage: &'a NodeUsage) -> UsageRef<'a> {
        UsageRef {
            cores: Some(&usage.cores),
            gpu_milli: &usage.gpu_milli,
            nics: Some(&usage.nics),
            mem_mib: usage.mem_mib,
            named: &usage.named,
        }
    }

    fn core_used(&self, c: u32) -> bool {
        self.cores.is_some_and(|b| b.contains(c as usize))
    }

    fn cores_used_in(&self, a: usize, b: usize) -> usize {
        self.cores
            .map_or(0, |set| set.count_ones(a..b.min(set.len())))
    }

    fn gpu_used(&self, p: u32) -> u32 {
        self.gpu_milli.get(p as usize).copied().unwrap_or(0)
    }

    fn nic_used(&self, p: u32) -> bool {
        self.nics.is_some_and(|b| b.contains(p as usize))
    }

    fn named_used(&self, p: usize) -> u64 {
        self.named.get(p).copied().unwrap_or(0)
    }
}

/// Free resources of one domain for one group.
#[derive(Clone, Copy, Debug, Default)]
struct DomainFree {
    /// Idle GPUs of the wanted model.
    whole_gpus: u32,
    /// Tasks of the group's GPU share that the domain's GPUs can still take.
    share_slots: u32,
    cores: u32,
    nics: u32,
}

/// What a node lacks for one task of a group, for [`super::why_not`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Shortage {
    NoGpuModel,
    NoNamed(usize),
    Gpus { free: u32, total: u32 },
    GpuShare,
    Cores { free: u32, total: u32 },
    Memory { free: u64 },
    Nics { free: u32, total: u32 },
    Named { index: usize, free: u64 },
    NumaDomain,
}

impl Layout {
    pub(super) fn new(shapes: &[NodeShape], groups: &[GroupReq<'_>]) -> Layout {
        let shapes = shapes
            .iter()
            .map(|shape| {
                let nd = shape.numa.len().max(1);
                let domains = if shape.numa.is_empty() {
                    vec![DomainLayout {
                        cores: CoreSet::Range(0, shape.cores as usize),
                        nics: (0..shape.nics.len() as u32).collect(),
                    }]
                } else {
                    shape
                        .numa
                        .iter()
                        .enumerate()
                        .map(|(d, dom)| DomainLayout {
                            cores: core_set(&dom.cores, shape.cores),
                            nics: (0..shape.nics.len() as u32)
                                .filter(|&p| domain_of(shape.nics[p as usize].numa, nd) == d)
                                .collect(),
                        })
                        .collect()
                };
                let groups = groups
                    .iter()
                    .map(|g| {
                        let mut gpus = vec![Vec::new(); nd];
                        for (p, dev) in shape.gpus.iter().enumerate() {
                            let wanted = g
                                .res
                                .gpu_model
                                .as_deref()
                                .is_none_or(|m| dev.model.eq_ignore_ascii_case(m));
                            if wanted {
                                gpus[domain_of(dev.numa, nd)].push(p as u32);
                            }
                        }
                        let has_model = g.res.gpu_model.is_none()
                            || !g.res.wants_gpu()
                            || gpus.iter().any(|d| !d.is_empty());
                        let named: Vec<Option<usize>> = g
                            .res
                            .named
                            .iter()
                            .map(|(name, _)| shape.named.iter().position(|(n, _)| n == name))
                            .collect();
                        let named_ok = named.iter().all(Option::is_some);
                        GroupOnShape {
                            usable: has_model && named_ok,
                            all_gpus: gpus.iter().map(Vec::len).sum::<usize>() == shape.gpus.len(),
                            gpus,
                            named: named.into_iter().map(|p| p.unwrap_or(usize::MAX)).collect(),
                        }
                    })
                    .collect();
                let mut seen = FixedBitSet::with_capacity(shape.cores as usize);
                let mut listed = 0usize;
                for d in &domains {
                    match &d.cores {
                        CoreSet::Range(a, b) => {
                            listed += b - a;
                            seen.insert_range(*a..*b);
                        }
                        CoreSet::List(l) => {
                            listed += l.len();
                            l.iter().for_each(|&c| seen.insert(c as usize));
                        }
                    }
                }
                let cores_covered = listed == shape.cores as usize && seen.count_ones(..) == listed;
                ShapeLayout {
                    domains,
                    groups,
                    cores_covered,
                }
            })
            .collect();
        Layout { shapes }
    }

    /// How many more tasks of group `gi` fit on a node of shape `shape_id` with usage `u`.
    pub(super) fn task_capacity(
        &self,
        shape_id: usize,
        shape: &NodeShape,
        u: UsageRef<'_>,
        g: &GroupReq<'_>,
        gi: usize,
        numa: NumaPolicy,
    ) -> u32 {
        let sl = &self.shapes[shape_id];
        let gs = &sl.groups[gi];
        if !gs.usable {
            return 0;
        }
        let r = g.res;
        let mut cap = per(shape.mem_mib.saturating_sub(u.mem_mib), r.mem_mib);
        for (k, (_, want)) in r.named.iter().enumerate() {
            let p = gs.named[k];
            let total = shape.named.get(p).map_or(0, |(_, c)| *c);
            cap = cap.min(per(total.saturating_sub(u.named_used(p)), *want));
        }
        if cap == 0 {
            return 0;
        }
        let domain_cap = |f: DomainFree| -> u32 {
            let gpu = if let Some(q) = f.whole_gpus.checked_div(r.gpus) {
                q
            } else if g.share.is_some() {
                f.share_slots
            } else {
                UNLIMITED
            };
            gpu.min(per(u64::from(f.cores), u64::from(r.cpus)))
                .min(per(u64::from(f.nics), u64::from(r.nics)))
        };
        if numa == NumaPolicy::Strict {
            let mut sum = 0u32;
            for d in 0..sl.domains.len() {
                sum = sum.saturating_add(domain_cap(self.domain_free(sl, gs, d, u, g)));
            }
            cap.min(sum)
        } else if sl.cores_covered && gs.all_gpus && g.share.is_none() {
            // The common case, counted on whole sets rather than domain by domain.
            let busy_gpus = u.gpu_milli.iter().filter(|&&m| m > 0).count();
            let busy_cores = u.cores.map_or(0, |c| c.count_ones(..));
            let busy_nics = u.nics.map_or(0, |c| c.count_ones(..));
            cap.min(domain_cap(DomainFree {
                whole_gpus: (shape.gpus.len() - busy_gpus.min(shape.gpus.len())) as u32,
                share_slots: 0,
                cores: (shape.cores as usize).saturating_sub(busy_cores) as u32,
                nics: shape.nics.len().saturating_sub(busy_nics) as u32,
            }))
        } else {
            let mut total = DomainFree::default();
            for d in 0..sl.domains.len() {
                let f = self.domain_free(sl, gs, d, u, g);
                total.whole_gpus += f.whole_gpus;
                total.share_slots += f.share_slots;
                total.cores += f.cores;
                total.nics += f.nics;
            }
            cap.min(domain_cap(total))
        }
    }

    fn domain_free(
        &self,
        sl: &ShapeLayout,
        gs: &GroupOnShape,
        d: usize,
        u: UsageRef<'_>,
        g: &GroupReq<'_>,
    ) -> DomainFree {
        let dl = &sl.domains[d];
        let mut f = DomainFree::default();
        if g.res.gpus > 0 {
            f.whole_gpus = gs.gpus[d].iter().filter(|&&p| u.gpu_used(p) == 0).count() as u32;
        } else if let Some(s) = g.share {
            f.share_slots = gs.gpus[d]
                .iter()
                .map(|&p| MILLI_PER_GPU.saturating_sub(u.gpu_used(p)) / s)
                .sum();
        }
        if g.res.cpus > 0 {
            f.cores = match &dl.cores {
                CoreSet::Range(a, b) => (b - a - u.cores_used_in(*a, *b)) as u32,
                CoreSet::List(l) => l.iter().filter(|&&c| !u.core_used(c)).count() as u32,
            };
        }
        if g.res.nics > 0 {
            f.nics = dl.nics.iter().filter(|&&p| !u.nic_used(p)).count() as u32;
        }
        f
    }

    /// What the node lacks for one task of group `gi`, when [`Layout::task_capacity`] is 0.
    pub(super) fn shortage(
        &self,
        shape_id: usize,
        shape: &NodeShape,
        u: UsageRef<'_>,
        g: &GroupReq<'_>,
        gi: usize,
    ) -> Shortage {
        let sl = &self.shapes[shape_id];
        let gs = &sl.groups[gi];
        let r = g.res;
        if let Some(k) = gs.named.iter().position(|&p| p == usize::MAX) {
            return Shortage::NoNamed(k);
        }
        if !gs.usable {
            return Shortage::NoGpuModel;
        }
        let mut total = DomainFree::default();
        let (mut gpus, mut cores, mut nics) = (0u32, 0u32, 0u32);
        for d in 0..sl.domains.len() {
            let f = self.domain_free(sl, gs, d, u, g);
            total.whole_gpus += f.whole_gpus;
            total.share_slots += f.share_slots;
            total.cores += f.cores;
            total.nics += f.nics;
            gpus += gs.gpus[d].len() as u32;
            cores += match &sl.domains[d].cores {
                CoreSet::Range(a, b) => (b - a) as u32,
                CoreSet::List(l) => l.len() as u32,
            };
            nics += sl.domains[d].nics.len() as u32;
        }
        if r.gpus > total.whole_gpus {
            return Shortage::Gpus {
                free: total.whole_gpus,
                total: gpus,
            };
        }
        if g.share.is_some() && total.share_slots == 0 {
            return Shortage::GpuShare;
        }
        if r.cpus > total.cores {
            return Shortage::Cores {
                free: total.cores,
                total: cores,
            };
        }
        let mem_free = shape.mem_mib.saturating_sub(u.mem_mib);
        if r.mem_mib > mem_free {
            return Shortage::Memory { free: mem_free };
        }
        if r.nics > total.nics {
            return Shortage::Nics {
                free: total.nics,
                total: nics,
            };
        }
        for (k, (_, want)) in r.named.iter().enumerate() {
            let p = gs.named[k];
            let cap = shape.named.get(p).map_or(0, |(_, c)| *c);
            let free = cap.saturating_sub(u.named_used(p));
            if *want > free {
                return Shortage::Named { index: k, free };
            }
        }
        Shortage::NumaDomain
    }
}

/// A working copy of a node's usage that tasks are assigned into.
#[derive(Clone, Debug, Default)]
pub(super) struct Work {
    cores: FixedBitSet,
    gpu_milli: Vec<u32>,
    nics: FixedBitSet,
    mem_mib: u64,
    named: Vec<u64>,
}

impl Work {
    pub(super) fn new(shape: &NodeShape, usage: Option<&NodeUsage>) -> Work {
        match usage {
            Some(u) => {
                let mut work = Work::default();
                work.copy_from(u);
                work
            }
            None => Work {
                cores: FixedBitSet::with_capacity(shape.cores as usize),
                gpu_milli: vec![0; shape.gpus.len()],
                nics: FixedBitSet::with_capacity(shape.nics.len()),
                mem_mib: 0,
                named: vec![0; shape.named.len()],
            },
        }
    }

    /// Makes this the working copy of a node with `usage`, in the room it has already.
    pub(super) fn copy_from(&mut self, usage: &NodeUsage) {
        self.cores.clone_from(&usage.cores);
        self.gpu_milli.clone_from(&usage.gpu_milli);
        self.nics.clone_from(&usage.nics);
        self.mem_mib = usage.mem_mib;
        self.named.clone_from(&usage.named);
    }

    pub(super) fn view(&self) -> UsageRef<'_> {
        UsageRef {
            cores: Some(&self.cores),
            gpu_milli: &self.gpu_milli,
            nics: Some(&self.nics),
            mem_mib: self.mem_mib,
            named: &self.named,
        }
    }

    /// Picks the devices of one task of group `gi` and marks them used; `None` if the task
    /// does not fit (never after a positive [`Layout::task_capacity`]).
    ///
    /// One NUMA domain holds the whole task when one can: the best-fitting one (fewest free
    /// GPUs left there, then fewest free cores left, then lowest index), so that whole free
    /// domains stay whole. Otherwise, unless the policy is strict, GPUs come from the
    /// domains with the most free GPUs and cores and NICs from the GPUs' domains first.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn assign(
        &mut self,
        layout: &Layout,
        shape_id: usize,
        shape: &NodeShape,
        g: &GroupReq<'_>,
        gi: usize,
        numa: NumaPolicy,
        node: NodeId,
    ) -> Option<TaskAlloc> {
        let sl = &layout.shapes[shape_id];
        let gs = &sl.groups[gi];
        let r = g.res;
        if !gs.usable || self.mem_mib + r.mem_mib > shape.mem_mib {
            return None;
        }
        for (k, (_, want)) in r.named.iter().enumerate() {
            let cap = shape.named.get(gs.named[k]).map_or(0, |(_, c)| *c);
            if self.named[gs.named[k]] + want > cap {
                return None;
            }
        }
        let nd = sl.domains.len();
        // Per NUMA domain (a node has a few): on the stack, as a task is placed at every
        // start.
        let frees: SmallVec<[DomainFree; 8]> = (0..nd)
            .map(|d| layout.domain_free(sl, gs, d, self.view(), g))
            .collect();
        // The best shared GPU of a domain: the one with the least free that still takes the
        // share, so that idle GPUs stay idle.
        let best_shared = |w: &Work, d: usize| -> Option<(u32, u32)> {
            let s = g.share?;
            gs.gpus[d]
                .iter()
                .map(|&p| (MILLI_PER_GPU.saturating_sub(w.gpu_milli[p as usize]), p))
                .filter(|&(free, _)| free >= s)
                .min()
        };
        let holds = |f: &DomainFree| {
            f.whole_gpus >= r.gpus
                && (g.share.is_none() || f.share_slots >= 1)
                && f.cores >= r.cpus
                && f.nics >= r.nics
        };
        let home = (0..nd).filter(|&d| holds(&frees[d])).min_by_key(|&d| {
            let gpu_left = match g.share {
                Some(s) => best_shared(self, d).map_or(0, |(free, _)| free - s),
                None => (frees[d].whole_gpus - r.gpus) * MILLI_PER_GPU,
            };
            (gpu_left, frees[d].cores - r.cpus, d)
        });
        let mut gpus: Vec<u32> = Vec::with_capacity(r.gpus as usize);
        let order: SmallVec<[usize; 8]> = match home {
            Some(d) => {
                if g.share.is_some() {
                    gpus.extend(best_shared(self, d).map(|(_, p)| p));
                } else {
                    gpus.extend(
                        gs.gpus[d]
                            .iter()
                            .copied()
                            .filter(|&p| self.gpu_milli[p as usize] == 0)
                            .take(r.gpus as usize),
                    );
                }
                std::iter::once(d)
                    .chain((0..nd).filter(|&e| e != d))
                    .collect()
            }
            None if numa == NumaPolicy::Strict => return None,
            None => {
                let mut used_domains: SmallVec<[usize; 8]> = SmallVec::new();
                if g.share.is_some() {
                    let (_, p, d) = (0..nd)
                        .filter_map(|d| best_shared(self, d).map(|(f, p)| (f, p, d)))
                        .min()?;
                    gpus.push(p);
                    used_domains.push(d);
                } else if r.gpus > 0 {
                    let mut by_free: SmallVec<[usize; 8]> = (0..nd).collect();
                    by_free.sort_by_key(|&d| (std::cmp::Reverse(frees[d].whole_gpus), d));
                    for d in by_free {
                        if gpus.len() == r.gpus as usize {
                            break;
                        }
                        let want = r.gpus as usize - gpus.len();
                        let before = gpus.len();
                        gpus.extend(
                            gs.gpus[d]
                                .iter()
                                .copied()
                                .filter(|&p| self.gpu_milli[p as usize] == 0)
                                .take(want),
                        );
                        if gpus.len() > before {
                            used_domains.push(d);
                        }
                    }
                    if gpus.len() < r.gpus as usize {
                        return None;
                    }
                }
                let mut order = used_domains.clone();
                let mut rest: SmallVec<[usize; 8]> =
                    (0..nd).filter(|d| !used_domains.contains(d)).collect();
                rest.sort_by_key(|&d| (std::cmp::Reverse(frees[d].cores), d));
                order.extend(rest);
                order
            }
        };
        let mut cores = Vec::with_capacity(r.cpus as usize);
        let mut nics = Vec::with_capacity(r.nics as usize);
        for &d in &order {
            if cores.len() < r.cpus as usize {
                let want = r.cpus as usize - cores.len();
                match &sl.domains[d].cores {
                    CoreSet::Range(a, b) => cores.extend(
                        (*a as u32..*b as u32)
                            .filter(|&c| !self.cores.contains(c as usize))
                            .take(want),
                    ),
                    CoreSet::List(l) => cores.extend(
                        l.iter()
                            .copied()
                            .filter(|&c| !self.cores.contains(c as usize))
                            .take(want),
                    ),
                }
            }
            if nics.len() < r.nics as usize {
                let want = r.nics as usize - nics.len();
                nics.extend(
                    sl.domains[d]
                        .nics
                        .iter()
                        .copied()
                        .filter(|&p| !self.nics.contains(p as usize))
                        .take(want),
                );
            }
        }
        if cores.len() < r.cpus as usize || nics.len() < r.nics as usize {
            return None;
        }
        cores.sort_unstable();
        nics.sort_unstable();
        gpus.sort_unstable();
        let each = g.share.unwrap_or(MILLI_PER_GPU);
        for &c in &cores {
            self.cores.insert(c as usize);
        }
        for &p in &gpus {
            self.gpu_milli[p as usize] += each;
        }
        for &p in &nics {
            self.nics.insert(p as usize);
        }
        self.mem_mib += r.mem_mib;
        for (k, (_, want)) in r.named.iter().enumerate() {
            self.named[gs.named[k]] += want;
        }
        Some(TaskAlloc {
            group: g.index,
            rank: 0,
            node,
            cores,
            gpus,
            gpu_milli_each: each,
            nics,
            mem_mib: r.mem_mib,
            named: r.named.clone(),
        })
    }
}

/// How many times `want` fits in `free`; unlimited when nothing is wanted.
fn per(free: u64, want: u64) -> u32 {
    free.checked_div(want)
        .map_or(UNLIMITED, |q| u32::try_from(q).unwrap_or(UNLIMITED))
}

/// The domain a device with NUMA id `numa` belongs to, among `n` domains (an out-of-range id
/// counts for the last domain rather than dropping the device).
fn domain_of(numa: u16, n: usize) -> usize {
    usize::from(numa).min(n.saturating_sub(1))
}

fn core_set(cores: &[u32], total: u32) -> CoreSet {
    let contiguous =
        cores.windows(2).all(|w| w[1] == w[0] + 1) && cores.last().is_none_or(|&c| c < total);
    match (cores.first(), contiguous) {
        (Some(&a), true) => CoreSet::Range(a as usize, a as usize + cores.len()),
        (None, _) => CoreSet::Range(0, 0),
        _ => CoreSet::List(cores.iter().copied().filter(|&c| c < total).collect()),
    }
}
