//! The fragmentation preference: among nodes that can take a task, the one whose free GPUs
//! stay most useful to the tasks the cluster expects (the idea of Fragmentation Gradient
//! Descent, Weng et al., USENIX ATC'23), computed in integers and in a few dozen operations
//! per node.
//!
//! # Given
//! A [`WorkloadProfile`]: task classes (GPUs per task and milli-GPUs per GPU; the mean cores
//! and memory of the class) with a weight each, e.g. how many tasks of each class arrived
//! so far; and, per candidate node, what is free: milli-GPUs per device, cores, memory.
//!
//! # Decided
//! The *fragmentation* of a node's free resources for the profile:
//! `sum over classes m of weight(m) * lost(m)` where `lost(m)` is, in milli-GPUs,
//! - every free milli-GPU of the node when a task of class `m` does not fit there (too few
//!   cores or memory, no GPU with the share free, or fewer whole free GPUs than it needs);
//! - otherwise the free milli-GPUs on devices that cannot serve it: devices with less free
//!   than its share, or, for whole-GPU classes, partly used devices.
//!
//! A node is preferred when placing the task there raises its fragmentation least (the
//! difference after minus before; it can be negative). Classes without GPUs lose no GPU and
//! are not recorded. GPU models are not in the profile.
//!
//! # Must hold
//! Integer arithmetic only (the same input gives the same order on every machine); the score
//! is a preference among nodes where the task fits and never changes what fits.

use crate::resources::{MILLI_PER_GPU, TaskResources};

/// Nodes with more GPUs than this get no fragmentation score (0): their devices would not fit
/// the small fixed buffer the score works in (copied twice per node scored, never allocated).
pub(super) const MAX_SCORED_GPUS: usize = 16;

/// The task sizes a cluster expects, for [`super::place_with_profile`]: one class per GPU
/// demand (whole GPUs per task, or the share of one GPU), with the mean cores and memory of
/// the tasks recorded in it and their count as weight.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadProfile {
    /// Sorted by (milli-GPUs per GPU, GPUs): shares before whole GPUs.
    classes: Vec<Class>,
    /// Rises already scored under these classes, for every placement until they change.
    rises: RiseMemo,
}

/// Rises in fragmentation scored under a profile, by (free state before, the task's
/// request, tasks): placements one after another (a scheduling pass starting thousands of
/// jobs on a large cluster) meet the same node states again and again. Forgotten whenever
/// the profile changes, and when it grows past [`RiseMemo::MAX`] entries. Not part of the
/// profile's value: clones start empty, and any two compare equal.
#[derive(Default)]
pub(super) struct RiseMemo(std::sync::Mutex<RiseMap>);

/// A task's request as far as its rise depends on it: whole GPUs, share of one GPU, cores
/// and memory.
pub(super) type TaskKey = (u32, Option<u32>, u32, u64);

pub(super) type RiseMap = std::collections::HashMap<
    (FreeState, TaskKey, u32),
    i128,
    std::hash::BuildHasherDefault<MemoHasher>,
>;

impl RiseMemo {
    const MAX: usize = 1 << 16;

    /// The memo, for one placement; emptied first when it grew past its bound.
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, RiseMap> {
        // A panic elsewhere while it was held leaves only scores, each complete.
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if memo.len() > Self::MAX {
            memo.clear();
        }
        memo
    }

    fn forget(&mut self) {
        self.0.get_mut().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

impl Clone for RiseMemo {
    fn clone(&self) -> Self {
        RiseMemo::default()
    }
}

impl PartialEq for RiseMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for RiseMemo {}

impl std::fmt::Debug for RiseMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RiseMemo")
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Class {
    /// Milli-GPUs the task takes on each of its GPUs: its share, or 1000 for whole GPUs.
    per_gpu: u32,
    gpus: u32,
    weight: u64,
    cpus_sum: u64,
    mem_sum: u64,
}

/// A class as the score uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ClassNeed {
    per_gpu: u32,
    gpus: u32,
    /// Milli-GPUs of one task: `gpus * per_gpu`.
    unit: u64,
    cpus: u32,
    mem_mib: u32,
    weight: u64,
}

impl WorkloadProfile {
    /// Records `count` tasks of this size; tasks without GPUs are not recorded.
    pub fn record(&mut self, task: &TaskResources, count: u32) {
        self.rises.forget();
        let (per_gpu, gpus) = match task.gpu_share_milli {
            Some(s) => (s.min(MILLI_PER_GPU), 1),
            None => (MILLI_PER_GPU, task.gpus),
        };
        if gpus == 0 || per_gpu == 0 || count == 0 {
            return;
        }
        let n = u64::from(count);
        let key = (per_gpu, gpus);
        let pos = self
            .classes
            .binary_search_by_key(&key, |c| (c.per_gpu, c.gpus));
        let i = match pos {
            Ok(i) => i,
            Err(i) => {
                self.classes.insert(
                    i,
                    Class {
                        per_gpu,
                        gpus,
                        weight: 0,
                        cpus_sum: 0,
                        mem_sum: 0,
                    },
                );
                i
            }
        };
        let c = &mut self.classes[i];
        c.weight = c.weight.saturating_add(n);
        c.cpus_sum = c.cpus_sum.saturating_add(u64::from(task.cpus) * n);
        c.mem_sum = c.mem_sum.saturating_add(task.mem_mib.saturating_mul(n));
    }

    /// A profile of these tasks, one each.
    pub fn from_tasks<'t>(tasks: impl IntoIterator<Item = &'t TaskResources>) -> Self {
        let mut p = WorkloadProfile::default();
        for t in tasks {
            p.record(t, 1);
        }
        p
    }

    /// The tasks recorded, over all classes.
    pub fn total_weight(&self) -> u64 {
        self.classes.iter().map(|c| c.weight).sum()
    }

    /// Halves every weight (and the sums behind the means), dropping classes that reach
    /// zero: a profile fed for a long time forgets old demand this way.
    pub fn halve(&mut self) {
        self.rises.forget();
        for c in &mut self.classes {
            let before = c.weight;
            c.weight /= 2;
            c.cpus_sum = c.cpus_sum.checked_div(before).unwrap_or(0) * c.weight;
            c.mem_sum = c.mem_sum.checked_div(before).unwrap_or(0) * c.weight;
        }
        self.classes.retain(|c| c.weight > 0);
    }

    /// No class recorded: the preference falls back to best fit.
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    pub(super) fn rises(&self) -> &RiseMemo {
        &self.rises
    }

    /// The number of classes (distinct GPU demands) recorded.
    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// The classes with their mean cores and memory (rounded up), in score order.
    pub(super) fn needs(&self) -> Vec<ClassNeed> {
        self.classes
            .iter()
            .map(|c| ClassNeed {
                per_gpu: c.per_gpu,
                gpus: c.gpus,
                unit: u64::from(c.gpus) * u64::from(c.per_gpu),
                cpus: saturate(c.cpus_sum.div_ceil(c.weight.max(1))),
                mem_mib: saturate(c.mem_sum.div_ceil(c.weight.max(1))),
                weight: c.weight,
            })
            .collect()
    }
}

fn saturate(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// What is free on a node, as the score sees it: free milli-GPUs per device, ascending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct FreeState {
    gpus: [u16; MAX_SCORED_GPUS],
    len: u8,
    cpus: u32,
    mem_mib: u32,
}

impl FreeState {
    /// `None` when the node has more GPUs than the score handles.
    pub(super) fn new(
        free_per_gpu: impl Iterator<Item = u32>,
        cpus: u64,
        mem_mib: u64,
    ) -> Option<Self> {
        let mut s = FreeState {
            gpus: [0; MAX_SCORED_GPUS],
            len: 0,
            cpus: saturate(cpus),
            mem_mib: saturate(mem_mib),
        };
        for f in free_per_gpu {
            if usize::from(s.len) == MAX_SCORED_GPUS {
                return None;
            }
            s.gpus[usize::from(s.len)] = f.min(MILLI_PER_GPU) as u16;
            s.len += 1;
        }
        s.gpus[..usize::from(s.len)].sort_unstable();
        Some(s)
    }

    fn devices(&self) -> &[u16] {
        &self.gpus[..usize::from(self.len)]
    }

    /// Takes cores and memory of `n` tasks.
    pub(super) fn take_host(&mut self, cpus: u32, mem_mib: u64, n: u32) {
        let n64 = u64::from(n);
        self.cpus = saturate(u64::from(self.cpus).saturating_sub(u64::from(cpus) * n64));
        self.mem_mib =
            saturate(u64::from(self.mem_mib).saturating_sub(mem_mib.saturating_mul(n64)));
    }

    /// Takes `n` tasks of `per_gpu` milli-GPUs on each of `gpus` devices, as device
    /// assignment does: a share on the device with the least free that takes it, whole GPUs
    /// on fully free devices. `false` if they do not fit (the state is then unspecified).
    pub(super) fn take(&mut self, gpus: u32, share: Option<u32>, n: u32) -> bool {
        let len = usize::from(self.len);
        for _ in 0..n {
            match share {
                Some(s) => {
                    let Ok(s) = u16::try_from(s) else {
                        return false;
                    };
                    let d = &mut self.gpus[..len];
                    let Some(k) = d.iter().position(|&f| f >= s) else {
                        return false;
                    };
                    d[k] -= s;
                    // Keep ascending: the lowered value moves left.
                    let mut j = k;
                    while j > 0 && d[j - 1] > d[j] {
                        d.swap(j - 1, j);
                        j -= 1;
                    }
                }
                None => {
                    for _ in 0..gpus {
                        let d = &mut self.gpus[..len];
                        // Fully free devices sit at the end; take the first of them and move
                        // the 0 to the front.
                        let Some(k) = d.iter().position(|&f| u32::from(f) >= MILLI_PER_GPU) else {
                            return false;
                        };
                        d[k] = 0;
                        d[..=k].rotate_right(1);
                    }
                }
            }
        }
        true
    }

    /// The fragmentation of this state for the classes (see the module doc).
    pub(super) fn fragmentation(&self, classes: &[ClassNeed]) -> u128 {
        let d = self.devices();
        let total: u64 = d.iter().map(|&f| u64::from(f)).sum();
        if total == 0 {
            return 0;
        }
        let max = u32::from(d.last().copied().unwrap_or(0));
        let whole = d
            .iter()
            .rev()
            .take_while(|&&f| u32::from(f) >= MILLI_PER_GPU)
            .count() as u32;
        let mut frag: u128 = 0;
        // Free milli-GPUs on devices with less free than the current class's per-GPU need.
        let mut below = 0u64;
        let mut j = 0;
        for c in classes {
            while j < d.len() && u32::from(d[j]) < c.per_gpu {
                below += u64::from(d[j]);
                j += 1;
            }
            let gpu_fits = if c.per_gpu < MILLI_PER_GPU {
                max >= c.per_gpu
            } else {
                whole >= c.gpus
            };
            let lost = if !gpu_fits {
                total
            } else {
                // Usable devices beyond what the node's cores and memory can accompany with
                // tasks of this class are lost too (CPUs per free GPU).
                let usable = total - below;
                let tasks = self.tasks_hosted(c, usable.div_ceil(c.unit.max(1)));
                if tasks == 0 {
                    total
                } else {
                    below + usable.saturating_sub(tasks * c.unit)
                }
            };
            frag += u128::from(c.weight) * u128::from(lost);
        }
        frag
    }

    /// Tasks of class `c` that the free cores and memory hold, counted up to `enough` (the
    /// common case, enough room for every usable GPU, costs multiplications, not divisions).
    fn tasks_hosted(&self, c: &ClassNeed, enough: u64) -> u64 {
        let enough32 = saturate(enough);
        let room = |have: u32, each: u32| -> u32 {
            if u64::from(each) * u64::from(enough32) <= u64::from(have) {
                enough32
            } else {
                have / each
            }
        };
        u64::from(room(self.cpus, c.cpus).min(room(self.mem_mib, c.mem_mib)))
    }
}

/// A small, fast hasher for the memo of scores (keys are a few dozen bytes of
/// integers; the memo is only looked up, never iterated, so the order it would give does not
/// matter).
#[derive(Default)]
pub(super) struct MemoHasher(u64);

impl std::hash::Hasher for MemoHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }

    fn write_u16(&mut self, x: u16) {
        self.write_u64(u64::from(x));
    }

    fn write_u8(&mut self, x: u8) {
        self.write_u64(u64::from(x));
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(milli: u32, cpus: u32) -> TaskResources {
        TaskResources {
            cpus,
            mem_mib: 1024,
            gpu_share_milli: Some(milli),
            ..TaskResources::default()
        }
    }

    fn whole(gpus: u32, cpus: u32) -> TaskResources {
        TaskResources {
            cpus,
            mem_mib: 1024,
            gpus,
            ..TaskResources::default()
        }
    }

    fn state(gpus: &[u32], cpus: u64) -> FreeState {
        // Memory is plentiful in these tests.
        FreeState::new(gpus.iter().copied(), cpus, 1 << 20).unwrap()
    }

    #[test]
    fn profile_keeps_one_class_per_gpu_demand_with_mean_cores() {
        let mut p = WorkloadProfile::default();
        p.record(&whole(1, 4), 1);
        p.record(&whole(1, 8), 1);
        p.record(&share(500, 2), 3);
        p.record(&whole(0, 64), 5);
        assert_eq!(p.class_count(), 2, "CPU-only tasks are not recorded");
        let needs = p.needs();
        assert_eq!(
            (needs[0].per_gpu, needs[0].weight, needs[0].cpus),
            (500, 3, 2)
        );
        assert_eq!(
            (needs[1].per_gpu, needs[1].gpus, needs[1].cpus),
            (1000, 1, 6)
        );
    }

    #[test]
    fn free_gpus_a_class_cannot_use_are_lost_to_it() {
        let p = WorkloadProfile::from_tasks(&[whole(2, 1)]);
        let classes = p.needs();
        // Two whole free GPUs: nothing lost; a partly used one is lost.
        assert_eq!(state(&[1000, 1000, 300], 8).fragmentation(&classes), 300);
        // One whole free GPU: a 2-GPU task does not fit, every free milli-GPU is lost.
        assert_eq!(state(&[1000, 300], 8).fragmentation(&classes), 1300);
        // Enough GPUs but no cores: all lost.
        assert_eq!(state(&[1000, 1000], 0).fragmentation(&classes), 2000);
        let p = WorkloadProfile::from_tasks(&[share(400, 1)]);
        let classes = p.needs();
        assert_eq!(state(&[100, 350, 500], 8).fragmentation(&classes), 450);
    }

    #[test]
    fn free_gpus_without_cores_to_go_with_them_are_lost() {
        let p = WorkloadProfile::from_tasks(&[whole(1, 4)]);
        let classes = p.needs();
        assert_eq!(state(&[1000; 4], 16).fragmentation(&classes), 0);
        // Cores for two 1-GPU tasks: the other two GPUs are lost.
        assert_eq!(state(&[1000; 4], 8).fragmentation(&classes), 2000);
        assert_eq!(state(&[1000; 4], 3).fragmentation(&classes), 4000);
    }

    #[test]
    fn taking_mirrors_device_assignment() {
        let mut s = state(&[1000, 200, 1000, 700], 8);
        assert!(s.take(0, Some(500), 1));
        // Best fit: the 700 becomes 200.
        assert_eq!(s.devices(), [200, 200, 1000, 1000]);
        assert!(s.take(2, None, 1));
        assert_eq!(s.devices(), [0, 0, 200, 200]);
        assert!(!s.take(1, None, 1));
        let mut t = state(&[100], 1);
        assert!(!t.take(0, Some(200), 1));
    }

    #[test]
    fn too_many_gpus_get_no_state() {
        assert!(FreeState::new(std::iter::repeat_n(1000, MAX_SCORED_GPUS + 1), 1, 1).is_none());
    }
}
