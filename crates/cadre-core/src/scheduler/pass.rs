//! One scheduling pass: order the eligible jobs, start what fits, preempt where allowed,
//! reserve for the top blocked jobs, and backfill around the reservations.

use super::free::FreeSummary;
#[cfg(doc)]
use super::kept::KeptOrder;
use super::queue::{PendingTable, PriorityMemo, Row};
use super::{
    Decision, Hold, Job, JobTable, PendingReason, Scheduler, backlog, held_gpu_milli, tail,
};
use crate::alloc::Allocation;
use crate::backfill::{EarlyEnd, Profile, Reservation};
use crate::cluster::{Cluster, NodeId, PartitionId};
use crate::job::{Dependency, DependencyKind, JobId, JobSpec, JobState};
use crate::placement;
use crate::policy::BackfillMode;
use crate::priority::{Factors, MAX_PRIORITY, SizeBasis, expansion_factor};
use crate::quota::QuotaBlock;
use crate::resources::{Amounts, MILLI_PER_GPU};
use crate::time::{Dur, Time};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

/// Whether a job's dependencies are met.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum DepState {
    Met,
    Waiting,
    Never,
}

/// The order in which eligible jobs are considered: preemptors first, partition tier and
/// priority class descending, then each partition's longest-waiting starving job (see
/// [`keep_oldest_starving`]), then priority descending, then submit time and id ascending.
pub(super) type OrderKey = (
    Reverse<bool>,
    Reverse<u32>,
    Reverse<i32>,
    Time,
    Reverse<u64>,
    Time,
    JobId,
);

/// A job of the pass's order, with what the pass reads of every job it considers, made
/// from its row ([`Row`]) as the order is, so that the many whose outcome follows from
/// these alone (their shape already failed in this pass, no quota to check) are decided
/// without looking the job up: on a deep queue those lookups, each a walk down a large
/// tree (or a probe of the pending table's index and a row of three cache lines), were
/// most of a pass.
pub(super) struct Candidate {
    pub(super) id: JobId,
    /// Its partition's priority tier and its priority class's value, which rank it for
    /// preemption.
    pub(super) tier: u32,
    pub(super) class_value: i32,
    /// It carries the starving mark (see [`keep_oldest_starving`]).
    starving: bool,
    /// An array task whose array limits its running tasks (`%N`).
    array_limited: bool,
    partition: PartitionId,
    shape: u32,
    time_limit: crate::time::Dur,
    awaiting_victims: bool,
    /// What [`Scheduler::may_preempt`] reads of the job (its QOS is read only if it has one).
    pub(super) class_preempting: bool,
    pub(super) has_qos: bool,
    /// Its reason before this pass ([`PendingReason::None`] for a limit's, which names the
    /// limit): a reason the pass decides is written only where it differs.
    reason_was: PendingReason,
    /// Plain: once its shape finds no room (and no reservation is left to make), the plain
    /// jobs of its shape after it in the order are decided as it was, and once a hold keeps
    /// its shape back, those that would end as late (see [`Order::by_shape`]). Not an
    /// array task with a `%N` limit, not awaiting victims, not carrying the starving mark.
    /// (Lanes are used only when no job may preempt.)
    plain: bool,
}

impl Candidate {
    fn of(id: JobId, row: &Row, tier: u32) -> Candidate {
        Candidate {
            id,
            tier,
            class_value: row.class_value,
            starving: false,
            array_limited: row.array_limited,
            partition: row.partition,
            shape: row.shape,
            time_limit: row.time_limit,
            awaiting_victims: row.awaiting_victims,
            class_preempting: row.class_preempting,
            has_qos: row.has_qos,
            reason_was: reason_was(&row.reason),
            // Not starving yet: the mark is set later, and takes this back.
            plain: !row.array_limited && !row.awaiting_victims,
        }
    }
}

/// The reason of an array task held back by its array's `%N` limit.
fn array_task_limit() -> PendingReason {
    PendingReason::Limit("JobArrayTaskLimit".into())
}

/// A reason as a pass compares it with the one it decides: a quota's names the quota and
/// is always written again ([`PendingReason::None`] stands for it).
fn reason_was(reason: &PendingReason) -> PendingReason {
    match reason {
        PendingReason::Limit(_) => PendingReason::None,
        r => r.clone(),
    }
}

/// Per partition, what is free now and the releases to come, gathered once per pass.
type ReleaseSeries = BTreeMap<PartitionId, Releases>;

/// What is free on a partition's nodes now, and the releases to come there (see
/// [`Profile::releases_on`]) in time order, sorted only as far as they are read: a
/// reservation is usually found well before the end (in the 12,500-node bench, some 500
/// releases read a pass, of tens of thousands, where sorting them all was 4% of the pass).
struct Releases {
    base: Amounts,
    /// Every release, in no order.
    all: Vec<(Time, Amounts)>,
    /// Those read, in time order (equal times in the order gathered: a reader sums them).
    read: Vec<(Time, Amounts)>,
    /// The others' times and places in `all`.
    rest: Keys<(Time, usize)>,
}

impl Releases {
    /// Releases taken from the heap before the rest may be sorted (see [`Keys`]).
    const HEAP_TAKES: usize = 512;

    fn of(base: Amounts, all: Vec<(Time, Amounts)>) -> Releases {
        let keys = (all.iter().enumerate())
            .map(|(at, &(t, _))| (t, at))
            .collect();
        Releases {
            base,
            all,
            read: Vec::new(),
            rest: Keys::new(keys, Releases::HEAP_TAKES),
        }
    }

    /// The `i`th release in time order, if there are that many.
    fn get(&mut self, i: usize) -> Option<(Time, Amounts)> {
        while self.read.len() <= i {
            let (t, at) = self.rest.pop()?;
            self.read.push((t, self.all[at].1));
        }
        Some(self.read[i])
    }
}

/// Why a shape failed earlier in the pass.
enum Failed {
    /// Placement found no room.
    Placement(placement::PlacementFailure),
    /// Placement found room, but only by taking what a hold counts on, for jobs ending at
    /// or after `end`.
    Holds { end: Time },
}

/// Amounts a job holds per node for an allocation: whole nodes for exclusive jobs.
pub(super) fn per_node_amounts(cluster: &Cluster, alloc: &Allocation) -> Vec<(NodeId, Amounts)> {
    let mut per_node = alloc.amounts_by_node();
    if alloc.exclusive {
        for (n, a) in &mut per_node {
            *a = cluster.shape(*n).capacity();
        }
    }
    per_node
}

/// Keeps the starving mark (the key's eligibility time, [`Time::NEVER`] for a job that is
/// not starving) on each partition's longest-waiting starving job alone, so that it is
/// considered first and, if it cannot start, gets a reservation (on top of the
/// `reservation_depth` of the jobs in priority order).
///
/// Only one per partition: ordering every starving job by its wait turns a long backlog
/// into first-come first-served, which on the Philly trace doubled the mean wait (see
/// docs/simulator.md), while one at a time bounds the longest wait just as well.
///
/// A job that its partition's backlog waits on once work stops arriving carries the mark
/// too, with its own eligibility time (see [`super::tail`]).
///
/// `starving` holds the keys that carry the mark, each with its job's partition (and a
/// value of the caller's); the jobs left with it are returned.
fn keep_oldest_starving<T>(starving: &mut [(PartitionId, T, OrderKey)]) -> Vec<JobId> {
    let mut oldest: BTreeMap<PartitionId, (Time, JobId)> = BTreeMap::new();
    for (p, _, k) in starving.iter() {
        let e = oldest.entry(*p).or_insert((k.3, k.6));
        *e = (*e).min((k.3, k.6));
    }
    for (p, _, k) in starving.iter_mut() {
        if oldest.get(p).is_some_and(|&(_, id)| id != k.6) {
            k.3 = Time::NEVER;
        }
    }
    oldest.into_values().map(|(_, id)| id).collect()
}

/// An order key packed into three integers that compare as the keys do (see [`Packer`]),
/// the last the job's id; then the job's place among the pass's candidates and its tag
/// (see [`tag`]), which take no part in the order, the ids being unique.
type Packed = (u64, u64, u64, u32, u32);

/// What a packed key tells of its job, so that jobs a pass decides without reading them
/// (see [`Order::drop_lane`] and [`Order::thin_lane`]) are looked up only when the code
/// cannot tell: its reason before the pass, as a code (the top two bits), and its time
/// limit in seconds (the others).
mod tag {
    use super::PendingReason;
    use crate::time::{Dur, Time};

    pub(super) const PRIORITY: u32 = 0;
    pub(super) const RESOURCES: u32 = 1;
    /// Another reason: only the job's candidate tells which.
    pub(super) const OTHER: u32 = 2;
    /// A time limit too long for the tag.
    const UNKNOWN: u32 = (1 << 30) - 1;

    pub(super) fn code(reason: &PendingReason) -> u32 {
        match reason {
            PendingReason::Priority => PRIORITY,
            PendingReason::Resources => RESOURCES,
            _ => OTHER,
        }
    }

    pub(super) fn new(reason: &PendingReason, limit: Dur) -> u32 {
        let limit = u32::try_from(limit.0).map_or(UNKNOWN, |l| l.min(UNKNOWN));
        code(reason) << 30 | limit
    }

    pub(super) fn reason(tag: u32) -> u32 {
        tag >> 30
    }

    /// The job's end were it to start at `now`, when the tag tells its time limit.
    pub(super) fn end(tag: u32, now: Time) -> Option<Time> {
        let limit = tag & UNKNOWN;
        (limit != UNKNOWN).then(|| super::super::end_of(now, Dur(u64::from(limit))))
    }
}

/// The first four parts of an order key: preemptor, tier, class, starving mark.
type Lead = (Reverse<bool>, Reverse<u32>, Reverse<i32>, Time);

/// Packs order keys as the pass makes them into integers that compare as the keys do. The
/// leads of the keys take few distinct values in a pass: each is replaced by its rank among
/// those values, which goes with the priority (at most [`MAX_PRIORITY`], 32 bits) into one
/// integer; the submit time and the id follow. Smaller than the keys, they sort faster.
/// The ranks are known once every key is packed: until then a lead stands by the number
/// of its first appearance ([`Packer::finish`] puts the ranks in).
#[derive(Default)]
struct Packer {
    numbers: HashMap<Lead, u64>,
    /// The leads by number.
    leads: Vec<Lead>,
    /// The last lead met and its number: keys come in long runs of one lead.
    last: Option<(Lead, u64)>,
}

impl Packer {
    #[inline(always)]
    fn pack(&mut self, k: &OrderKey, place: u32, tag: u32) -> Packed {
        let lead = (k.0, k.1, k.2, k.3);
        let number = match self.last {
            Some((was, n)) if was == lead => n,
            _ => {
                let next = self.leads.len() as u64;
                let n = *self.numbers.entry(lead).or_insert(next);
                if n == next {
                    self.leads.push(lead);
                }
                self.last = Some((lead, n));
                n
            }
        };
        debug_assert!(k.4.0 <= MAX_PRIORITY, "priorities are at most MAX_PRIORITY");
        let priority = u32::try_from(k.4.0).unwrap_or(u32::MAX);
        (
            number << 32 | u64::from(u32::MAX - priority),
            k.5.0,
            k.6.0,
            place,
            tag,
        )
    }

    /// Puts the leads' ranks in place of their numbers in `keys`, all packed by this packer.
    fn finish(self, keys: &mut [Packed]) {
        let mut by_rank: Vec<usize> = (0..self.leads.len()).collect();
        by_rank.sort_unstable_by_key(|&n| self.leads[n]);
        if by_rank.iter().enumerate().all(|(rank, &n)| rank == n) {
            return;
        }
        let mut rank = vec![0u64; by_rank.len()];
        for (r, &n) in by_rank.iter().enumerate() {
            rank[n] = r as u64;
        }
        for k in keys {
            k.0 = rank[(k.0 >> 32) as usize] << 32 | (k.0 & u64::from(u32::MAX));
        }
    }
}

/// `keys` packed (see [`Packer`]).
#[cfg(test)]
fn packed_keys(keys: &[OrderKey]) -> Vec<Packed> {
    let mut packer = Packer::default();
    let mut packed: Vec<Packed> = keys
        .iter()
        .zip(0..)
        .map(|(k, i)| packer.pack(k, i, 0))
        .collect();
    packer.finish(&mut packed);
    packed
}

/// The pass's order: its candidates, taken one at a time in order.
///
/// A pass reads either the whole order or a short head of it. Under the default policy
/// (`max_job_test` 100,000) it reads every job: one sort of the packed keys costs the
/// least. Under strict order it usually reads one job, under a small `max_job_test` a few
/// hundred, and then every job left waits on `Priority` (see [`Scheduler::schedule`]):
/// sorting them all cost more than anything else such a pass did. For those the keys are
/// made a heap (linear), each job taken costs a logarithm, and should the pass read on
/// well past the head it was expected to, what is left is sorted then ([`Keys`]).
///
/// When the pass may read every job, the order may come in lanes ([`Order::by_shape`]): one
/// per shape for the plain jobs of that shape, one for the others, merged by key. Once a
/// plain job's shape finds no room, every plain job of its shape after it would be decided
/// as it was: its lane is dropped ([`Order::drop_lane`]), its jobs left noted from their
/// keys' tags (read only when the tag cannot tell) and sorted no further. Once a hold
/// keeps its shape back, the plain jobs of its shape that would end as late are taken out
/// of its lane likewise ([`Order::thin_lane`]).
struct Order {
    lanes: Vec<Lane>,
    /// With several lanes, the next key of each lane, with the lane (a dropped lane's stays
    /// here, passed over).
    heads: BinaryHeap<Reverse<(Packed, u32)>>,
    /// Per shape, the lane of its plain jobs ([`NO_LANE`]: none).
    shape_lanes: Vec<u32>,
    /// The candidates, by their place (the last part of their keys), until taken.
    candidates: Vec<Option<Candidate>>,
    /// The jobs that carry the starving mark.
    starving: Vec<JobId>,
    /// The places of the candidates whose outcome, once every job left waits on
    /// `Priority`, may be another reason or a change of reason: those that had another
    /// reason, and array tasks with a `%N` limit. The others keep theirs: nothing is
    /// written for them.
    unusual: Vec<u32>,
    /// Read from the order kept between passes ([`KeptOrder`]): it is fed as it is read.
    cursor: Option<Cursor>,
}

/// Where a pass reads the order kept between passes ([`KeptOrder`]).
#[derive(Default)]
struct Cursor {
    /// The key of the last job fed to the order (none yet: from the first).
    after: Option<OrderKey>,
    /// How many were fed.
    fed: usize,
    /// Every job was fed.
    done: bool,
}

/// Jobs fed to an order read from the kept order at first; then as many as were fed.
const FEED_FIRST: usize = 16;

/// No lane (see [`Order::shape_lanes`]).
const NO_LANE: u32 = u32::MAX;

/// Jobs taken from a lane's heap before the keys left in it may be sorted.
const HEAP_TAKES: usize = 256;

/// How many times as many keys as were taken a heap must hold to be kept on (see [`Keys`]).
const HEAP_SHARE: usize = 8;

/// Some of the order's keys (see [`Order`]).
struct Lane {
    keys: Keys,
    /// The key of the lane's next job when it waits in [`Order::heads`] (taken out of
    /// `keys`).
    head: Option<Packed>,
    dropped: bool,
    /// The earliest end the lane was thinned at ([`Order::thin_lane`]): no key left in
    /// `keys` is one a thinning at that end or later would take (a lane lives for one
    /// pass, whose `now` every thinning is given).
    thinned: Option<Time>,
}

impl Lane {
    fn of(keys: Keys) -> Lane {
        Lane {
            keys,
            head: None,
            dropped: false,
            thinned: None,
        }
    }

    /// Takes the keys of the jobs left in the lane, in no particular order.
    fn take(&mut self) -> impl Iterator<Item = Packed> + use<> {
        let keys = std::mem::replace(&mut self.keys, Keys::Sorted(Vec::new()));
        self.head.take().into_iter().chain(keys.into_keys())
    }

    fn left(&self) -> usize {
        self.keys.len() + usize::from(self.head.is_some())
    }
}

/// The keys of the jobs left (reversed: the heap is a max-heap).
///
/// A heap costs a logarithm per job taken, a sort a logarithm per job left: the heap is
/// kept while the jobs taken from it are few beside those left. Each time its allowance
/// runs out, while at least [`HEAP_SHARE`] times as many jobs as were taken are left, it
/// is renewed for as many jobs as were taken so far (so the jobs taken double); otherwise
/// the keys left are sorted. A pass that reads a few thousand jobs of a lane of tens of
/// thousands, and drops the rest, never sorts that lane.
enum Keys<T = Packed> {
    /// A heap, how many more jobs to take from it before looking again, and how many were
    /// taken.
    Heap(BinaryHeap<Reverse<T>>, usize, usize),
    /// Sorted so that the next is last.
    Sorted(Vec<Reverse<T>>),
}

impl<T: Ord + Copy> Keys<T> {
    fn sorted(mut keys: Vec<Reverse<T>>) -> Keys<T> {
        keys.sort_unstable();
        Keys::Sorted(keys)
    }

    /// The keys as a heap for the first `heap_for` taken, and on while it is large (none:
    /// sorted at once).
    fn new(keys: Vec<T>, heap_for: usize) -> Keys<T> {
        let keys: Vec<Reverse<T>> = keys.into_iter().map(Reverse).collect();
        match heap_for {
            0 => Keys::sorted(keys),
            n => Keys::Heap(BinaryHeap::from(keys), n, 0),
        }
    }

    /// Takes the next key.
    fn pop(&mut self) -> Option<T> {
        let key = match self {
            Keys::Heap(heap, left, taken) => {
                if *left == 0 {
                    if heap.len() < taken.saturating_mul(HEAP_SHARE) {
                        let rest = std::mem::take(heap).into_vec();
                        *self = Keys::sorted(rest);
                        return self.pop();
                    }
                    *left = (*taken).max(1);
                }
                *left -= 1;
                *taken += 1;
                heap.pop()
            }
            Keys::Sorted(keys) => keys.pop(),
        };
        key.map(|Reverse(k)| k)
    }

    fn len(&self) -> usize {
        match self {
            Keys::Heap(heap, ..) => heap.len(),
            Keys::Sorted(keys) => keys.len(),
        }
    }

    fn into_keys(self) -> impl Iterator<Item = T> {
        let keys = match self {
            Keys::Heap(heap, ..) => heap.into_vec(),
            Keys::Sorted(keys) => keys,
        };
        keys.into_iter().map(|Reverse(k)| k)
    }

    /// Takes out the keys for which `out` holds, in no particular order: returns those of
    /// them for which `tell` holds too.
    fn take_if(
        &mut self,
        mut out: impl FnMut(&T) -> bool,
        mut tell: impl FnMut(&T) -> bool,
    ) -> Vec<T> {
        let mut taken = Vec::new();
        let keep = |k: &Reverse<T>| {
            let take = out(&k.0);
            if take && tell(&k.0) {
                taken.push(k.0);
            }
            !take
        };
        match self {
            Keys::Heap(heap, ..) => heap.retain(keep),
            Keys::Sorted(keys) => keys.retain(keep),
        }
        taken
    }
}

impl Order {
    /// The order of `keys` (each ending with its candidate's place in `candidates`), a
    /// heap for the first `heap_for` jobs taken and on while it is large (none: sorted at
    /// once; see [`Keys`]).
    fn new(
        keys: Vec<Packed>,
        candidates: Vec<Candidate>,
        heap_for: usize,
        starving: Vec<JobId>,
        unusual: Vec<u32>,
    ) -> Order {
        Order {
            lanes: vec![Lane::of(Keys::new(keys, heap_for))],
            heads: BinaryHeap::new(),
            shape_lanes: Vec::new(),
            candidates: candidates.into_iter().map(Some).collect(),
            starving,
            unusual,
            cursor: None,
        }
    }

    /// An order read from the order kept between passes, fed as it is read
    /// ([`Order::wants`], [`Order::feed`]).
    fn kept() -> Order {
        let mut order = Order::new(Vec::new(), Vec::new(), 0, Vec::new(), Vec::new());
        order.cursor = Some(Cursor::default());
        order
    }

    /// When read from the kept order and every job fed was taken: after which key to feed
    /// it, and how many.
    fn wants(&self) -> Option<(Option<OrderKey>, usize)> {
        let cursor = self.cursor.as_ref().filter(|c| !c.done)?;
        match self.lanes[0].keys.len() {
            0 => Some((cursor.after, cursor.fed.max(FEED_FIRST))),
            _ => None,
        }
    }

    /// Feeds the order the next jobs of the kept order: their keys, with the candidates
    /// and tags of those still pending, after every job fed before was taken; `asked`
    /// were asked for.
    fn feed(&mut self, batch: Vec<(OrderKey, Option<(Candidate, u32)>)>, asked: usize) {
        let cursor = self.cursor.as_mut().expect("read from the kept order");
        cursor.done = batch.len() < asked;
        cursor.fed += batch.len();
        cursor.after = batch.last().map(|b| b.0).or(cursor.after);
        let mut keys = Vec::with_capacity(batch.len());
        for (n, (_, c)) in (0u64..).zip(batch) {
            let Some((c, tag)) = c else { continue };
            let place = u32::try_from(self.candidates.len()).expect("fewer than 2^32 jobs");
            self.candidates.push(Some(c));
            keys.push(Reverse((n, 0, 0, place, tag)));
        }
        keys.reverse();
        self.lanes[0].keys = Keys::Sorted(keys);
    }

    /// The order of `keys` in lanes: one per shape (below `shapes`) for the candidates
    /// marked [`Candidate::plain`], one for the others.
    fn by_shape(
        keys: Vec<Packed>,
        candidates: Vec<Candidate>,
        shapes: usize,
        starving: Vec<JobId>,
        unusual: Vec<u32>,
    ) -> Order {
        let mut shape_lanes = vec![NO_LANE; shapes];
        // Each key's lane, and each lane's size: the lanes are made at their size (grown
        // key by key, the largest were copied over and over).
        let mut sizes = vec![0usize];
        let lane_of: Vec<u32> = (keys.iter())
            .map(|key| {
                let c = &candidates[key.3 as usize];
                let lane = match shape_lanes.get_mut(c.shape as usize) {
                    Some(lane) if c.plain => {
                        if *lane == NO_LANE {
                            *lane = sizes.len() as u32;
                            sizes.push(0);
                        }
                        *lane
                    }
                    _ => 0,
                };
                sizes[lane as usize] += 1;
                lane
            })
            .collect();
        let mut parts: Vec<Vec<Packed>> = sizes.into_iter().map(Vec::with_capacity).collect();
        for (key, lane) in keys.into_iter().zip(lane_of) {
            parts[lane as usize].push(key);
        }
        if parts.len() == 1 {
            // No plain job: one lane, which the pass reads whole.
            let keys = parts.pop().expect("one lane");
            return Order::new(keys, candidates, 0, starving, unusual);
        }
        let candidates = candidates.into_iter().map(Some).collect();
        let mut heads = BinaryHeap::with_capacity(parts.len());
        let lanes = parts
            .into_iter()
            .zip(0..)
            .map(|(keys, l)| {
                let mut lane = Lane::of(Keys::new(keys, HEAP_TAKES));
                lane.head = lane.keys.pop().inspect(|&k| heads.push(Reverse((k, l))));
                lane
            })
            .collect();
        Order {
            lanes,
            heads,
            shape_lanes,
            candidates,
            starving,
            unusual,
            cursor: None,
        }
    }

    /// The next candidate in order.
    fn next(&mut self) -> Option<Candidate> {
        let place = match self.lanes.as_mut_slice() {
            // One lane: its keys alone (it has no head).
            [only] => only.keys.pop()?.3,
            lanes => loop {
                let Reverse((key, l)) = self.heads.pop()?;
                let lane = &mut lanes[l as usize];
                if lane.dropped {
                    continue;
                }
                lane.head = lane
                    .keys
                    .pop()
                    .inspect(|&k| self.heads.push(Reverse((k, l))));
                break key.3;
            },
        };
        let mut c = self.candidates[place as usize].take()?;
        c.starving = self.starving.contains(&c.id);
        Some(c)
    }

    /// The lane of the plain jobs of shape `shape`, if it is not dropped.
    fn lane(&mut self, shape: u32) -> Option<&mut Lane> {
        let l = *self.shape_lanes.get(shape as usize)?;
        self.lanes.get_mut(l as usize).filter(|lane| !lane.dropped)
    }

    /// Drops the lane of the plain jobs of shape `shape`, whose jobs left are decided alike,
    /// with a reason of code `code` ([`tag`]), without being read: returns the keys of
    /// those whose reason before the pass may be another.
    fn drop_lane(&mut self, shape: u32, code: u32) -> Vec<Packed> {
        let Some(lane) = self.lane(shape) else {
            return Vec::new();
        };
        lane.dropped = true;
        let keys = lane.take();
        match code {
            tag::OTHER => keys.collect(),
            _ => keys.filter(|k| tag::reason(k.4) != code).collect(),
        }
    }

    /// Takes out of the lane of the plain jobs of shape `shape` (but its head) those that
    /// would end at or after `end` were they to start at `now`, which wait on `Priority`
    /// unread: returns the keys of those whose reason before the pass was another. A lane
    /// thinned at an end as early already has none such left but its head: it is not read
    /// again (the head, when taken, is often the next job of the shape to be thinned for).
    fn thin_lane(&mut self, shape: u32, now: Time, end: Time) -> Vec<Packed> {
        let Some(lane) = self.lane(shape) else {
            return Vec::new();
        };
        if lane.thinned.is_some_and(|t| end >= t) {
            return Vec::new();
        }
        lane.thinned = Some(end);
        lane.keys.take_if(
            |k| tag::end(k.4, now).is_some_and(|e| e >= end),
            |k| tag::reason(k.4) != tag::PRIORITY,
        )
    }

    /// The candidate at `place`, if not taken.
    fn take(&mut self, place: u32) -> Option<Candidate> {
        self.candidates.get_mut(place as usize)?.take()
    }

    /// The candidates not taken yet whose outcome may not be to keep waiting on `Priority`
    /// (see [`Order::unusual`]), or all those not taken when they are fewer; in no
    /// particular order. In lanes, all those left in the lanes not dropped (the others were
    /// decided). Read from the kept order, those fed and not taken: the unusual jobs not
    /// fed yet come from the kept order ([`Scheduler::kept_rest`]).
    fn rest(mut self) -> Vec<Candidate> {
        let left: usize = self
            .lanes
            .iter()
            .filter(|l| !l.dropped)
            .map(Lane::left)
            .sum();
        let all_left = !self.shape_lanes.is_empty() || self.cursor.is_some();
        let places: Vec<u32> = if all_left || left <= self.unusual.len() {
            let lanes = self.lanes.iter_mut().filter(|l| !l.dropped);
            lanes.flat_map(Lane::take).map(|k| k.3).collect()
        } else {
            let mut unusual = std::mem::take(&mut self.unusual);
            unusual.retain(|&p| self.candidates[p as usize].is_some());
            unusual
        };
        places.into_iter().filter_map(|p| self.take(p)).collect()
    }
}

/// Notes the reason the pass decided for a candidate, unless it had that reason already: on
/// a deep queue most keep theirs, and writing them all cost a sweep over the job table.
fn note(reasons: &mut Vec<(JobId, PendingReason)>, c: &Candidate, reason: PendingReason) {
    if c.reason_was != reason {
        reasons.push((c.id, reason));
    }
}

/// Writes the rows of the jobs `ids` (sorted) back to the job table ([`Row::write_to`]):
/// those whose assessment changed a value the table holds too.
fn write_back(jobs: &mut JobTable, queue: &PendingTable, ids: Vec<JobId>) {
    update_sorted(jobs, ids.into_iter().map(|id| (id, ())), |job, ()| {
        if let Some(row) = queue.row(job.id) {
            row.write_to(job);
        }
    });
}

/// Applies `f` to the entries of `map` named in `items`, which are sorted by id (an id may
/// come more than once: each is applied in turn): by a search per item when they are few,
/// otherwise in one sweep over the map in id order from the first id named, which on a
/// large map costs less than the searches.
fn update_sorted<V, T>(
    map: &mut BTreeMap<JobId, V>,
    items: impl IntoIterator<Item = (JobId, T)>,
    mut f: impl FnMut(&mut V, T),
) {
    let items: Vec<(JobId, T)> = items.into_iter().collect();
    debug_assert!(items.windows(2).all(|w| w[0].0 <= w[1].0), "sorted by id");
    if items.len() < map.len() / 16 {
        for (id, item) in items {
            if let Some(v) = map.get_mut(&id) {
                f(v, item);
            }
        }
        return;
    }
    let Some(&(first, _)) = items.first() else {
        return;
    };
    let mut items = items.into_iter().peekable();
    for (id, v) in map.range_mut(first..) {
        // Items naming no entry of the map are passed over.
        while items.next_if(|r| r.0 < *id).is_some() {}
        if items.peek().is_none() {
            break;
        }
        while let Some((_, item)) = items.next_if(|r| r.0 == *id) {
            f(v, item);
        }
    }
}

/// `reasons` by id, each job once with the last reason it was given (the one that holds).
///
/// Most passes give reasons to a few thousand jobs; some give one to nearly every pending
/// job (on a full cluster the jobs of every shape turn from `Priority`, held back by a
/// reservation, to `Resources`, finding no room, and back as room is freed and taken). The
/// ids named then span little more than their number: each id's last place is marked in a
/// table as long as that span ([`DENSE_SPAN`] times the reasons at most), read in id order.
/// Otherwise each reason's id and place, packed in a `u128`, are sorted, and the last of
/// each id kept. Sorting the reasons themselves (32 bytes each) stably was 7% of a pass's
/// instructions at 12,500 nodes with 100,000 pending; the packed sort and gathering were
/// still 5% of six passes after the first, three of which gave nearly every job a reason.
fn by_id(mut reasons: Vec<(JobId, PendingReason)>) -> Vec<(JobId, PendingReason)> {
    let (Some(lo), Some(hi)) = (
        reasons.iter().map(|r| r.0.0).min(),
        reasons.iter().map(|r| r.0.0).max(),
    ) else {
        return reasons;
    };
    let n = u32::try_from(reasons.len()).expect("fewer than 2^32 reasons");
    let take = |reasons: &mut [(JobId, PendingReason)], place: usize| {
        let r = &mut reasons[place];
        (r.0, std::mem::replace(&mut r.1, PendingReason::None))
    };
    let span = (hi - lo).saturating_add(1);
    if span <= DENSE_SPAN.saturating_mul(u64::from(n)) {
        // Each id's last place plus one (0: not named).
        let mut last = vec![0u32; span as usize];
        let mut ids = 0;
        for (r, place) in reasons.iter().zip(1u32..) {
            let slot = &mut last[(r.0.0 - lo) as usize];
            ids += usize::from(*slot == 0);
            *slot = place;
        }
        let mut out = Vec::with_capacity(ids);
        let places = last.into_iter().filter(|&p| p != 0);
        out.extend(places.map(|p| take(&mut reasons, p as usize - 1)));
        return out;
    }
    let mut places: Vec<u128> = (reasons.iter().zip(0u32..n))
        .map(|(r, i)| (u128::from(r.0.0) << 64) | u128::from(i))
        .collect();
    places.sort_unstable();
    let id_of = |p: u128| (p >> 64) as u64;
    let last = (0..places.len())
        .filter(|&i| (places.get(i + 1)).is_none_or(|&q| id_of(q) != id_of(places[i])));
    last.map(|i| take(&mut reasons, places[i] as u64 as usize))
        .collect()
}

/// How many times the reasons of a pass the span of their ids may be for [`by_id`] to mark
/// them in a table that long.
const DENSE_SPAN: u64 = 4;

/// Whether the jobs of shape `shape` are held back for want of room in the rest of the
/// pass, whatever their time limit.
fn failed_placing(failed: &[Option<Failed>], shape: u32) -> bool {
    matches!(failed.get(shape as usize), Some(Some(Failed::Placement(_))))
}

/// Decides the plain jobs of `c`'s shape left in the order as `c` was, with `reason`,
/// unread (see [`Order::drop_lane`]).
fn drop_lane(
    order: &mut Order,
    c: &Candidate,
    reason: &PendingReason,
    reasons: &mut Vec<(JobId, PendingReason)>,
) {
    let keys = order.drop_lane(c.shape, tag::code(reason));
    note_keys(order, keys, reason, reasons);
}

/// Notes `reason` for the jobs of `keys`, taken out of the order, whose reason before the
/// pass may be another: told by their tags, or else by their candidates.
fn note_keys(
    order: &mut Order,
    keys: Vec<Packed>,
    reason: &PendingReason,
    reasons: &mut Vec<(JobId, PendingReason)>,
) {
    let code = tag::code(reason);
    for k in keys {
        match tag::reason(k.4) {
            was if was == tag::OTHER || code == tag::OTHER => {
                if let Some(c) = order.take(k.3) {
                    note(reasons, &c, reason.clone());
                }
            }
            was if was != code => reasons.push((JobId(k.2), reason.clone())),
            _ => {}
        }
    }
}

/// The rows whose jobs count in partition `p`'s pending work (held jobs and jobs without
/// GPUs left out), for the reference scheduler's walks.
fn pending_rows(queue: &PendingTable, p: PartitionId) -> impl Iterator<Item = &Row> {
    (queue.rows().map(|(_, row)| row))
        .filter(move |row| row.partition == p && row.hold.is_none() && row.want_gpu_milli > 0)
}

fn job_elastic(job: &Job) -> bool {
    job.min_want != job.want
}

impl Scheduler {
    /// Runs one scheduling pass at `now` and returns its decisions, in order: starts and
    /// preemptions as they were decided, then the reservations.
    pub fn schedule(&mut self, now: Time) -> Vec<Decision> {
        self.accrue(now);
        self.class_fits.forget();
        let mut order = self.eligible_order(now);
        let mut out = Vec::new();
        let mut profile: Option<Profile> = None;
        let mut reservations: Vec<Reservation> = Vec::new();
        let mut blocked_partitions: BTreeSet<PartitionId> = BTreeSet::new();
        let mut release_series = ReleaseSeries::new();
        let backfill = self.policy.backfill.clone();
        let preempt_on = self.policy.preemption.enabled;
        let mut blocked_seen = 0u32;
        let mut starving_blocked = false;
        // Indexed by the jobs' interned shapes.
        let mut failed: Vec<Option<Failed>> = (0..self.shapes.len()).map(|_| None).collect();
        let mut victims = None;
        // Pending reasons decided in this pass, written once it is over in one sweep over
        // the job table (nothing in the pass reads a pending job's reason).
        let mut reasons: Vec<(JobId, PendingReason)> = Vec::new();

        let mut head = None;
        // Running tasks of arrays with a `%N` limit, counted when first needed.
        let mut array_running: HashMap<JobId, u32> = HashMap::new();
        let partitions = self.cluster.partitions.len();
        for tested in 0usize.. {
            // Like Slurm: jobs are started in order while they fit; once one is held back,
            // only the first `max_job_test` jobs of the order are tried (bf_max_job_test).
            let anything_blocked =
                blocked_seen > 0 || starving_blocked || !blocked_partitions.is_empty();
            let past_depth = tested >= backfill.max_job_test as usize && anything_blocked;
            // Strict order with every partition blocked: every job left waits on `Priority`.
            let all_blocked = self.policy.strict_order && blocked_partitions.len() == partitions;
            // From here on nothing starts and every job left waits on `Priority` (but an
            // array task at its array's limit, which says so), whatever its place in the
            // order: they are decided without sorting them, looking only at those whose
            // reason may change (see `Order::rest`). This keeps a pass on a deep queue, and
            // a strict-order pass above all, cheap. The reference scheduler goes on in order.
            if (past_depth || all_blocked) && !self.reference {
                for c in self.kept_rest(order) {
                    let at_limit = c.array_limited
                        && self
                            .array_limit(c.id, &mut array_running)
                            .is_some_and(|l| l.1);
                    let reason = match at_limit {
                        true => array_task_limit(),
                        false => PendingReason::Priority,
                    };
                    note(&mut reasons, &c, reason);
                }
                break;
            }
            while let Some((after, n)) = order.wants() {
                let batch = self.kept_batch(after.as_ref(), n);
                order.feed(batch, n);
            }
            let Some(c) = order.next() else {
                break;
            };
            head.get_or_insert(c.id);
            let id = c.id;
            if all_blocked && !c.array_limited {
                note(&mut reasons, &c, PendingReason::Priority);
                continue;
            }
            let part = c.partition;
            let limited = match c.array_limited {
                true => self.array_limit(id, &mut array_running),
                false => None,
            };
            if let Some((_, true)) = limited {
                note(&mut reasons, &c, array_task_limit());
                continue;
            }
            if past_depth {
                note(&mut reasons, &c, PendingReason::Priority);
                continue;
            }
            if self.policy.strict_order && blocked_partitions.contains(&part) {
                note(&mut reasons, &c, PendingReason::Priority);
                continue;
            }
            if c.awaiting_victims {
                // Victims are still stopping; their resources become this job's when they end.
                let p = profile.get_or_insert_with(|| self.profile(now));
                self.hold_for_preemptor(p, id, now);
                note(&mut reasons, &c, PendingReason::Preempting);
                blocked_partitions.insert(part);
                continue;
            }
            if self.quota_enforced {
                let job = &self.jobs[&id];
                let check = self.quota.check_in(
                    job.queue,
                    &job.spec.account,
                    &job.spec.user,
                    job.spec.namespace.as_deref(),
                    job.min_want,
                );
                if let Err(block) = check {
                    let reclaimable = matches!(block, QuotaBlock::CohortExhausted { reclaimable, .. } if reclaimable > 0);
                    if preempt_on && self.policy.preemption.reclaim_within_cohort && reclaimable {
                        let decisions = self.try_reclaim(id, now);
                        if !decisions.is_empty() {
                            victims = None;
                            out.extend(decisions);
                            note(&mut reasons, &c, PendingReason::Preempting);
                            let p = profile.get_or_insert_with(|| self.profile(now));
                            self.hold_for_preemptor(p, id, now);
                            continue;
                        }
                    }
                    note(
                        &mut reasons,
                        &c,
                        PendingReason::Limit(block.reason().to_string()),
                    );
                    continue;
                }
            }
            let nodes = &self.cluster.partition(part).nodes;
            let key = c.shape;
            let end = super::end_of(now, c.time_limit);
            // Set when the job is read to be placed: an elastic gang whose full size is
            // above its quota is placed at the largest size its quota allows (its minimum
            // was checked above).
            let mut capped = None;
            let placed = match &failed[key as usize] {
                Some(Failed::Placement(fail)) => Err(fail.clone()),
                Some(Failed::Holds { end: failed_end }) if end >= *failed_end => {
                    note(&mut reasons, &c, PendingReason::Priority);
                    // So would every plain job of its shape that would end as late: they
                    // are taken out of the order unread.
                    if c.plain {
                        let keys = order.thin_lane(c.shape, now, *failed_end);
                        note_keys(&mut order, keys, &PendingReason::Priority, &mut reasons);
                    }
                    continue;
                }
                // Whether the job may fit is its shape's ([`Need`]): a job that certainly
                // does not fit now, most of those read when the cluster is full, is not
                // read from the job table unless placement must say why.
                _ if self.free.may_fit(part, &self.shape_needs[key as usize]) => {
                    let job = &self.jobs[&id];
                    capped = self.capped_spec(job);
                    let spec = capped.as_ref().unwrap_or(&job.spec);
                    match capped {
                        // The job's own spec: of the job's shape.
                        None => self.place_shaped(spec, part, key),
                        Some(_) => self.place_in(spec, part),
                    }
                }
                _ => {
                    // Busy only if it could fit were the up nodes idle; otherwise
                    // placement says why it never fits or which nodes it waits for.
                    let idle = self
                        .idle_free
                        .get_or_insert_with(|| FreeSummary::idle_up(&self.cluster));
                    let busy = idle.may_fit(part, &self.shape_needs[key as usize]);
                    if let Some(never) = self.never_fits.get(&key).filter(|_| busy) {
                        Err(never.clone())
                    } else if busy && !self.checked_shapes.insert(key) {
                        Err(placement::PlacementFailure::Busy { nodes: nodes.len() })
                    } else {
                        // When busy, totals fit the idle up nodes, but span or NUMA rules
                        // may still rule the shape out: placement tells, once per shape
                        // until nodes change.
                        let job = &self.jobs[&id];
                        capped = self.capped_spec(job);
                        let placed = self.place(capped.as_ref().unwrap_or(&job.spec), nodes);
                        if let Err(fail) = &placed
                            && busy
                            && fail.is_permanent()
                        {
                            self.never_fits.insert(key, fail.clone());
                        }
                        placed
                    }
                }
            };
            if let Err(fail) = &placed {
                failed[key as usize].get_or_insert_with(|| Failed::Placement(fail.clone()));
            }
            match placed {
                Ok(alloc) => {
                    let spec = match &capped {
                        Some(spec) => spec,
                        None => &self.jobs[&id].spec,
                    };
                    let mut per_node = per_node_amounts(&self.cluster, &alloc);
                    let mut alloc = Some(alloc);
                    if let Some(p) = &profile {
                        if !p.fits(&per_node, now, end) {
                            // Try once more on the nodes whose holds it would not touch.
                            alloc = self
                                .place_untouched(spec, part, p, end)
                                .filter(|a| p.fits(&per_node_amounts(&self.cluster, a), now, end));
                            if let Some(a) = &alloc {
                                per_node = per_node_amounts(&self.cluster, a);
                            }
                        }
                    }
                    match alloc {
                        Some(alloc) => {
                            if let Some(p) = profile.as_mut() {
                                p.hold(&per_node, now, end);
                            }
                            out.extend(self.start(id, alloc, per_node, now));
                            if let Some((array, _)) = limited {
                                *array_running.get_mut(&array).expect("counted") += 1;
                            }
                        }
                        None => {
                            note(&mut reasons, &c, PendingReason::Priority);
                            blocked_partitions.insert(part);
                            let least = match &failed[key as usize] {
                                Some(Failed::Holds { end: e }) => end.min(*e),
                                _ => end,
                            };
                            failed[key as usize] = Some(Failed::Holds { end: least });
                        }
                    }
                }
                Err(fail) if fail.is_permanent() => {
                    let reason = PendingReason::from_placement(&fail);
                    note(&mut reasons, &c, reason.clone());
                    if c.plain && failed_placing(&failed, key) {
                        drop_lane(&mut order, &c, &reason, &mut reasons);
                    }
                }
                Err(fail) => {
                    let reason = PendingReason::from_placement(&fail);
                    if self.policy.strict_order {
                        note(&mut reasons, &c, reason);
                        blocked_partitions.insert(part);
                        continue;
                    }
                    // Whether the job could outrank a running job at all: its class, its
                    // partition's tier or its QOS (the running jobs are summed up only for a
                    // job that has one of these). `may_preempt` reads the candidate, not the
                    // job (but for its QOS).
                    let may_outrank =
                        c.class_preempting || c.has_qos || self.policy.preemption.partition_tier;
                    if preempt_on
                        && may_outrank
                        && self
                            .may_preempt(&c, victims.get_or_insert_with(|| self.victim_summary()))
                    {
                        // Victims are chosen only where no higher job's reservation
                        // starts before this job would end.
                        let end = super::end_of(
                            now + self.policy.preemption.grace,
                            self.jobs[&id].spec.time_limit,
                        );
                        let allowed: Option<BTreeSet<NodeId>> = profile.as_ref().map(|p| {
                            let nodes = &self.cluster.partition(part).nodes;
                            nodes
                                .iter()
                                .copied()
                                .filter(|&n| p.unreserved_until(n, end))
                                .collect()
                        });
                        let decisions = self.try_preempt(id, now, allowed.as_ref());
                        if !decisions.is_empty() {
                            victims = None;
                            out.extend(decisions);
                            note(&mut reasons, &c, PendingReason::Preempting);
                            let p = profile.get_or_insert_with(|| self.profile(now));
                            self.hold_for_preemptor(p, id, now);
                            continue;
                        }
                    }
                    note(&mut reasons, &c, reason.clone());
                    // A starving job's reservation comes on top of the
                    // `reservation_depth` of the jobs in priority order.
                    let starving = c.starving;
                    let reserve = backfill.enabled
                        && (starving
                            || match backfill.mode {
                                BackfillMode::Easy => blocked_seen < backfill.reservation_depth,
                                BackfillMode::Conservative => true,
                            });
                    if starving {
                        starving_blocked = true;
                    } else {
                        blocked_seen += 1;
                    }
                    if reserve {
                        let p = profile.get_or_insert_with(|| self.profile(now));
                        if let Some(r) = self.plan_reservation(p, id, now, &mut release_series) {
                            p.reserve(&r.nodes, r.start, r.end);
                            out.push(Decision::Reserve(r.clone()));
                            reservations.push(r);
                        }
                    }
                    // Once no reservation is left to make, the plain jobs of its shape after
                    // it would go the same way: held back, without one.
                    let no_more_reserved = !backfill.enabled
                        || (backfill.mode == BackfillMode::Easy
                            && blocked_seen >= backfill.reservation_depth);
                    // (Dropped, they do not count in `blocked_seen`, which no longer
                    // matters: past the depth, or no backfill.)
                    if c.plain && no_more_reserved && failed_placing(&failed, key) {
                        drop_lane(&mut order, &c, &reason, &mut reasons);
                    }
                }
            }
        }
        self.reservations = reservations;
        self.write_reasons(reasons);
        self.head_blocked = head.is_some_and(|id| {
            self.jobs.get(&id).is_some_and(|j| {
                j.state == JobState::Pending
                    && matches!(
                        j.reason,
                        PendingReason::Resources | PendingReason::Preempting
                    )
            })
        });
        out
    }

    /// For an array task whose array limits its running tasks (`%N`), the array and whether
    /// it is at its limit; `array_running` keeps the running tasks of the arrays counted so
    /// far in the pass.
    fn array_limit(
        &self,
        id: JobId,
        array_running: &mut HashMap<JobId, u32>,
    ) -> Option<(JobId, bool)> {
        let (array, max) = self.jobs[&id]
            .spec
            .array
            .and_then(|a| Some((a.array_job, a.max_running?)))?;
        let running = *array_running.entry(array).or_insert_with(|| {
            self.jobs
                .values()
                .filter(|j| {
                    j.state.is_active() && j.spec.array.is_some_and(|a| a.array_job == array)
                })
                .count() as u32
        });
        Some((array, running >= max))
    }

    /// The spec to place a job by: its own (`None`), or, for an elastic gang whose full
    /// size is above its quota, the largest size its quota allows.
    fn capped_spec(&self, job: &Job) -> Option<JobSpec> {
        if self.quota_enforced && job_elastic(job) {
            self.quota_sized_spec(job)
        } else {
            None
        }
    }

    /// For an elastic gang whose full size its quota does not admit, the spec cut down to
    /// the largest size it does (later groups shrink first, each to no less than its
    /// minimum); `None` when the full size is admitted. Quota use only grows with size, so
    /// each group's largest admitted count is found by bisection.
    fn quota_sized_spec(&self, job: &Job) -> Option<JobSpec> {
        let admits = |spec: &JobSpec| {
            self.quota
                .check_in(
                    job.queue,
                    &job.spec.account,
                    &job.spec.user,
                    job.spec.namespace.as_deref(),
                    spec.amounts(),
                )
                .is_ok()
        };
        if admits(&job.spec) {
            return None;
        }
        let mut spec = job.spec.clone();
        for gi in (0..spec.groups.len()).rev() {
            let (min, count) = (spec.groups[gi].min_tasks(), spec.groups[gi].count);
            spec.groups[gi].count = min;
            if !admits(&spec) {
                continue;
            }
            // Largest count in [min, count] admitted: `lo` is admitted, `hi + 1` is not.
            let (mut lo, mut hi) = (min, count - 1);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                spec.groups[gi].count = mid;
                if admits(&spec) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            spec.groups[gi].count = lo;
            break;
        }
        Some(spec)
    }

    /// Sets the pending reasons decided in a pass (a job may be named more than once: the
    /// last reason holds), in the job table and in the pending table.
    fn write_reasons(&mut self, reasons: Vec<(JobId, PendingReason)>) {
        let reasons = by_id(reasons);
        let keeping = self.keeps_order();
        for (id, reason) in &reasons {
            if let Some(row) = self.queue.row_mut(*id) {
                row.reason.clone_from(reason);
                if keeping {
                    self.kept.note_reason(*id, row);
                }
            }
        }
        update_sorted(&mut self.jobs, reasons, |job, r| job.reason = r);
    }

    /// The eligible pending jobs in scheduling order; sets the reason of the others.
    ///
    /// The jobs are read from the pending table ([`super::queue::PendingTable`]), not the
    /// job table: on a deep queue, reading every pending job in the job table cost more
    /// than everything else the ordering does. The priorities stay in the table; the jobs
    /// whose eligibility, starving mark or reason changed are written back to the job table.
    ///
    /// Each job comes with what the pass reads of it ([`Candidate`]).
    fn eligible_order(&mut self, now: Time) -> Order {
        if self.keeps_order() {
            return self.kept_order(now);
        }
        // The reference scheduler makes every row afresh from its job.
        if self.reference {
            self.queue.touch_all();
        }
        let mut queue = std::mem::take(&mut self.queue);
        queue.refresh(&self.jobs, &self.pending);
        let largest_first = self.largest_first_partitions(&queue, now);
        // Moved when a partition's factor turns round, not when only the reason changes.
        let flipped = (largest_first.iter().map(Option::is_some))
            .ne(self.largest_first.iter().map(Option::is_some));
        self.largest_first_moved = flipped;
        self.largest_first = largest_first;
        let mut keys = Vec::with_capacity(self.pending.len());
        let mut changed = Vec::new();
        let mut starving = Vec::new();
        let mut unusual = Vec::new();
        let mut candidates = Vec::with_capacity(self.pending.len());
        let mut packer = Packer::default();
        // Whether a job may preempt none of the jobs that could run in the pass (see
        // `Candidate::plain`): those run now, or have a class of the policy and a partition.
        let preemption = &self.policy.preemption;
        let (running_class, running_tier) = self.running_ranks.lowest();
        let class_floor = (self.policy.priority_class.iter())
            .chain(&self.runtime_classes)
            .map(|c| c.value)
            .chain(running_class)
            .fold(0, i32::min);
        let tier_floor = (self.cluster.partitions.iter())
            .map(|p| p.priority_tier)
            .chain(running_tier)
            .min()
            .unwrap_or(0);
        let cannot_preempt = |c: &Candidate| {
            let by_class = c.class_preempting && c.class_value > class_floor;
            let by_tier = preemption.partition_tier && c.tier > tier_floor;
            !preemption.enabled || !(c.has_qos || by_class || by_tier)
        };
        // The lowest class value of a job that may run in the pass, and whether no job may
        // preempt: then no job's decision hangs on when the running jobs are summed up
        // (a summary is kept until a preemption, not renewed at each start).
        let mut lowest_class = i32::MAX;
        let mut none_preempts = true;
        // Partitions where work has stopped arriving; there, the pending work, and the jobs
        // that may be the one their backlog waits on, with their work and eligibility.
        let mut quiet = self.quiet_partitions(now);
        let any_quiet = !quiet.is_empty();
        let mut may_end_backlog = Vec::new();
        for (&id, row) in queue.rows_mut() {
            let (key, wrote) = self.assess(id, row, now);
            if let Some(key) = key {
                let place = u32::try_from(keys.len()).expect("fewer than 2^32 pending jobs");
                if let Some(q) = any_quiet.then(|| quiet.get_mut(&row.partition)).flatten() {
                    let work = tail::work(row.want_gpu_milli, row.time_limit);
                    q.pending = q.pending.saturating_add(work);
                    if key.3 == Time::NEVER && row.may_be_marked() {
                        let since = row.eligible_since.unwrap_or(now);
                        may_end_backlog.push((keys.len(), work, row.time_limit, since, key));
                    }
                }
                if key.3 != Time::NEVER {
                    starving.push((row.partition, keys.len(), key));
                }
                if row.unusual() {
                    unusual.push(place);
                }
                let tag = tag::new(&row.reason, row.time_limit);
                keys.push(packer.pack(&key, place, tag));
                // The tier is the key's (`assess` looked it up).
                let c = Candidate::of(id, row, key.1.0);
                none_preempts &= cannot_preempt(&c);
                lowest_class = lowest_class.min(c.class_value);
                candidates.push(c);
            }
            if wrote {
                changed.push(id);
            }
        }
        changed.sort_unstable();
        write_back(&mut self.jobs, &queue, changed);
        self.queue = queue;
        // Per quiet partition, the job its backlog waits on longest: the longest limit,
        // then the earliest in the order.
        let mut longest: BTreeMap<PartitionId, (Reverse<Dur>, usize, Time, OrderKey)> =
            BTreeMap::new();
        for (i, work, limit, since, key) in may_end_backlog {
            let p = candidates[i].partition;
            if quiet[&p].ends_backlog(work, limit) {
                let e = longest.entry(p).or_insert((Reverse(limit), i, since, key));
                if (Reverse(limit), key) < (e.0, e.3) {
                    *e = (Reverse(limit), i, since, key);
                }
            }
        }
        for (p, (_, i, since, mut key)) in longest {
            key.3 = since;
            starving.push((p, i, key));
        }
        let oldest = keep_oldest_starving(&mut starving);
        for (_, i, key) in &starving {
            keys[*i] = packer.pack(key, keys[*i].3, keys[*i].4);
            if key.3 != Time::NEVER {
                candidates[*i].plain = false;
            }
        }
        packer.finish(&mut keys);
        let starving = oldest;
        // At most one a partition: a few lookups.
        for &id in &starving {
            let Some(row) = self.queue.row_mut(id) else {
                continue;
            };
            row.starving_since = row.eligible_since;
            if let Some(job) = self.jobs.get_mut(&id) {
                job.starving_since = row.eligible_since;
            }
        }
        // Keys are unique (they end with the id). Packed, they are smaller and compare
        // faster than the keys. A pass reads only the head of the order under strict order
        // or when it tests few jobs (then every job left waits on `Priority`), unless all
        // it reads start; otherwise it reads them all.
        let backfill = &self.policy.backfill;
        let test = backfill.max_job_test as usize;
        // In lanes by shape when the pass may read every job (its tail then comes only once
        // every job was read or dropped) and a job held back is decided from its shape
        // alone: no reservation once the first ones are made (easy backfill) or none at
        // all, no quota, no job able to preempt (nor of a class below those counted).
        let by_shape = !self.reference
            && !self.policy.strict_order
            && !self.quota_enforced
            && (!backfill.enabled || backfill.mode == BackfillMode::Easy)
            && keys.len() <= test
            && none_preempts
            && lowest_class >= class_floor;
        if by_shape {
            return Order::by_shape(keys, candidates, self.shapes.len(), starving, unusual);
        }
        let heap_for = match self.policy.strict_order {
            true => HEAP_TAKES,
            false if test.saturating_mul(8) < keys.len() => test.max(HEAP_TAKES),
            false => 0,
        };
        Order::new(keys, candidates, heap_for, starving, unusual)
    }

    /// Per partition, whether its job-size factor favours larger jobs, and why: its backlog
    /// drains within the policy's `largest_first_within`, or the small work left could not
    /// fill the gaps its gangs would leave, `largest_first_gaps_percent` (see
    /// [`super::backlog`]); none unless the policy sets one, weighs job size and does not
    /// keep strict order.
    fn largest_first_partitions(
        &mut self,
        queue: &PendingTable,
        now: Time,
    ) -> Vec<Option<backlog::LargestFirst>> {
        let w = &self.policy.priority;
        if !w.size_may_flip() || self.policy.strict_order {
            return Vec::new();
        }
        let (horizon, percent) = (w.largest_first_within, w.largest_first_gaps_percent);
        // Taken out while the partitions are read, which borrow the scheduler, and put back.
        let up = (self.idle_free.take()).unwrap_or_else(|| FreeSummary::idle_up(&self.cluster));
        let partitions = (self.cluster.partition_ids())
            .map(|id| {
                let capacity = up.total(id).gpu_milli;
                let shallow = horizon.0 != 0 && {
                    let (pending, running) =
                        (self.pending_work(queue, id), self.running_left(id, now));
                    backlog::drains_within(pending, running, capacity, horizon)
                };
                if shallow {
                    Some(backlog::LargestFirst::Shallow)
                } else if percent != 0 && self.gaps_unfilled(queue, id, capacity, percent) {
                    Some(backlog::LargestFirst::Gaps)
                } else {
                    None
                }
            })
            .collect();
        self.idle_free = Some(up);
        partitions
    }

    /// Whether the small work pending in partition `p` could not fill the gaps its other
    /// pending jobs would leave on `capacity` GPU thousandths (`backlog::gaps_unfilled`),
    /// read from the pending work by width that the queue keeps; the reference scheduler
    /// adds it up afresh from the rows, so that the equivalence tests check the kept sums.
    fn gaps_unfilled(
        &self,
        queue: &PendingTable,
        p: PartitionId,
        capacity: u64,
        percent: u32,
    ) -> bool {
        if !self.reference {
            let widths = backlog::pending_by_width(queue.work(), p);
            return backlog::gaps_unfilled(widths, capacity, percent);
        }
        let mut widths: BTreeMap<u64, u128> = BTreeMap::new();
        for row in pending_rows(queue, p).filter(|row| row.time_limit.0 > 0) {
            *widths.entry(row.want_gpu_milli).or_default() +=
                tail::work(row.want_gpu_milli, row.time_limit);
        }
        backlog::gaps_unfilled(widths, capacity, percent)
    }

    /// Partition `p`'s pending work by time limits, the GPUs its jobs ask for times their
    /// limits, held jobs and jobs without GPUs left out (`None`: a job without a limit),
    /// read from the sum the queue keeps; the reference scheduler adds it up afresh from
    /// the rows, so that the equivalence tests check the kept sum's arithmetic.
    fn pending_work(&self, queue: &PendingTable, p: PartitionId) -> Option<u128> {
        if !self.reference {
            return backlog::pending_work(queue.work(), p);
        }
        pending_rows(queue, p).try_fold(0u128, |sum, row| {
            let limit = row.time_limit;
            (limit.0 > 0).then(|| sum + tail::work(row.want_gpu_milli, limit))
        })
    }

    /// The running jobs' remaining work in partition `p` at `now`, the GPUs they hold times
    /// what is left of their time limits (`None`: a job without a limit), read from the sums
    /// kept as jobs start and end (`backlog::running_left`); the reference scheduler adds it
    /// up afresh from the active jobs, so that the equivalence tests check the kept sums.
    fn running_left(&self, p: PartitionId, now: Time) -> Option<u128> {
        if !self.reference {
            return backlog::running_left(&self.running_work, p, now);
        }
        (self.active.iter().map(|id| &self.jobs[id]))
            .filter(|job| job.partition == p)
            .map(|job| (held_gpu_milli(&job.per_node), job.limit_end()))
            .filter(|&(gpus, _)| gpus > 0)
            .try_fold(0u128, |sum, (gpus, end)| {
                let left = end.0.saturating_sub(now.0);
                (end != Time::NEVER).then(|| sum + u128::from(gpus) * u128::from(left))
            })
    }

    /// The partitions where work has stopped arriving (see [`super::tail`]), each with the
    /// capacity the arrivals leave and the running jobs' remaining work; none unless the
    /// policy drains longest first and does not keep strict order.
    fn quiet_partitions(&self, now: Time) -> BTreeMap<PartitionId, tail::Quiet> {
        let mut quiet = BTreeMap::new();
        if !self.policy.backfill.drain_longest_first || self.policy.strict_order {
            return quiet;
        }
        let mut up: Option<FreeSummary> = None;
        // No partition has more GPUs than the cluster: most passes stop at this bound.
        let cluster = (self.size_scale.gpus * u64::from(MILLI_PER_GPU)) as f64;
        for id in self.cluster.partition_ids() {
            let Some(rate) = self.arrivals.rate(id, now) else {
                return quiet;
            };
            if rate > tail::QUIET_SHARE * cluster {
                continue;
            }
            let up = match (&self.idle_free, &mut up) {
                (Some(idle), _) => idle,
                (None, up) => up.get_or_insert_with(|| FreeSummary::idle_up(&self.cluster)),
            };
            let capacity = up.total(id).gpu_milli as f64;
            if capacity > 0.0 && rate <= tail::QUIET_SHARE * capacity {
                quiet.insert(id, tail::Quiet::new(capacity - rate));
            }
        }
        for (&id, q) in &mut quiet {
            q.running = self.running_left(id, now).unwrap_or(u128::MAX);
        }
        quiet
    }

    /// Whether the order of the eligible jobs is kept between passes ([`KeptOrder`]): under
    /// strict order when neither fair-share nor expansion is weighed (either moves every
    /// priority at once: expansion at every pass, fair-share once a calc period), but in
    /// the reference scheduler.
    pub(super) fn keeps_order(&self) -> bool {
        super::keeps_order(&self.policy) && !self.reference
    }

    /// The order of the eligible pending jobs, read from the order kept between passes,
    /// which is brought up to date first: the jobs that may have changed since the last
    /// pass are assessed again (see [`KeptOrder`]); sets the reason of those not eligible.
    fn kept_order(&mut self, now: Time) -> Order {
        let mut queue = std::mem::take(&mut self.queue);
        let mut kept = std::mem::take(&mut self.kept);
        let touched = queue.refresh(&self.jobs, &self.pending);
        let mut changed = Vec::new();
        for id in kept.take_stale(touched, &queue, now) {
            let Some(row) = queue.row_mut(id) else {
                continue;
            };
            let (key, wrote) = self.assess(id, row, now);
            kept.note(id, row, key, now);
            if wrote {
                changed.push(id);
            }
        }
        kept.end_pass(queue.len());
        write_back(&mut self.jobs, &queue, changed);
        self.queue = queue;
        self.kept = kept;
        Order::kept()
    }

    /// Whether the kept order agrees with the pending jobs (see [`KeptOrder::check`]).
    pub(super) fn check_kept(&self) -> Result<(), String> {
        self.kept.check(&self.queue, |id, row, now| {
            self.assess(id, &mut row.clone(), now).0
        })
    }

    /// Up to `n` jobs of the kept order after the key `after`: each key, with the job's
    /// candidate and tag if it is still pending (one that started in this pass is not).
    fn kept_batch(
        &self,
        after: Option<&OrderKey>,
        n: usize,
    ) -> Vec<(OrderKey, Option<(Candidate, u32)>)> {
        let batch = self.kept.after(after, n).into_iter();
        batch.map(|key| (key, self.kept_candidate(&key))).collect()
    }

    /// The candidate of the job of a kept key, and its tag, if it is still pending.
    fn kept_candidate(&self, key: &OrderKey) -> Option<(Candidate, u32)> {
        let id = key.6;
        let row = self.queue.row(id)?;
        let c = Candidate::of(id, row, key.1.0);
        Some((c, tag::new(&row.reason, row.time_limit)))
    }

    /// The candidates of `order` left whose outcome, once every job left waits on
    /// `Priority`, may be another (see [`Order::rest`]): read from the kept order, those
    /// fed and not taken, and the unusual jobs after them.
    fn kept_rest(&self, order: Order) -> Vec<Candidate> {
        let after = order.cursor.as_ref().map(|c| (c.after, c.done));
        let mut rest = order.rest();
        if let Some((after, false)) = after {
            let unusual = self.kept.unusual_after(after.as_ref());
            rest.extend(
                unusual
                    .iter()
                    .filter_map(|k| Some(self.kept_candidate(k)?.0)),
            );
        }
        rest
    }

    /// Sets a pending job's priority, and its reason where something keeps it from being
    /// considered; otherwise its place in the order. Works on the job's row, and says
    /// whether it changed a value the job table holds too (all but the priority).
    #[inline(always)]
    fn assess(&self, id: JobId, row: &mut Row, now: Time) -> (Option<OrderKey>, bool) {
        let before = (row.eligible_since, row.starving_since);
        let blocker = self.blocker(id, row, now);
        let since = row.eligible_since.unwrap_or(now);
        let w = &self.policy.priority;
        // The fair-share factors it was computed with, when fair-share is weighed.
        let fairshare = (w.fairshare != 0).then_some(self.fairshare_count);
        if self.largest_first_moved || !row.memo.holds(since, now, fairshare) {
            let factors = self.job_factors(row, since, now, true);
            let steady;
            (row.priority, steady) = w.priority_steady(&factors, now.since(since));
            row.memo = PriorityMemo::new(since, now, steady, fairshare);
        }
        row.starving_since = None;
        if let Some(reason) = blocker {
            if !matches!(
                reason,
                PendingReason::Dependency | PendingReason::SingletonDependency
            ) {
                row.eligible_since = None;
            }
            let changed =
                before != (row.eligible_since, row.starving_since) || row.reason != reason;
            row.reason = reason;
            return (None, changed);
        }
        let since = *row.eligible_since.get_or_insert(now);
        let changed = before != (row.eligible_since, row.starving_since);
        let tier = self.cluster.partition(row.partition).priority_tier;
        // A starving job is marked with when it became eligible (`Time::NEVER`, which sorts
        // last, for the others); see `keep_oldest_starving`. Only a job the mark can help is
        // marked: not one the last pass found never fits or held back by a limit (a quota,
        // an array's `%N`), which would keep the mark from the rest of its partition for as
        // long as it waits; and not under strict order, whose head job is the one waiting
        // longest already.
        let may_starve = !self.policy.strict_order && row.may_be_marked();
        let starving = may_starve && self.policy.backfill.starving_after(now.since(since));
        let starving_since = if starving { since } else { Time::NEVER };
        // A job that preempted others goes first, as Slurm evaluates preemptors first: what
        // its victims freed is its own, and no lower job takes it back.
        let key = (
            Reverse(row.holds_victims),
            Reverse(tier),
            Reverse(row.class_value),
            starving_since,
            Reverse(row.priority),
            row.submit_time,
            id,
        );
        (Some(key), changed)
    }

    /// The multifactor factors of a job eligible since `since`; with `weighted_only`, those
    /// the policy weighs at zero are left at zero (they do not count in the priority), which
    /// spares a pass computing them for every pending job.
    fn job_factors(&self, row: &Row, since: Time, now: Time, weighted_only: bool) -> Factors {
        let w = &self.policy.priority;
        let counts = |weight: u32| weight != 0 || !weighted_only;
        let mut factors = Factors {
            nice: row.nice,
            ..Factors::default()
        };
        if counts(w.age) {
            factors.age = w.age_factor(now.since(since));
        }
        if counts(w.fairshare) {
            factors.fairshare = self.fairshare_factors.get(row.assoc).unwrap_or(1.0);
        }
        if counts(w.job_size) {
            // In a shallow backlog, larger jobs first by their GPUs (Slurm's job size).
            let largest_first = self.largest_first_in(row.partition).is_some();
            let basis = if largest_first {
                SizeBasis::Resources
            } else {
                w.size_basis
            };
            let share = row.size_share(basis, &self.size_scale);
            factors.job_size = if largest_first {
                share
            } else {
                w.job_size_factor(share)
            };
        }
        if counts(w.partition) {
            let part = self.cluster.partition(row.partition);
            factors.partition =
                f64::from(part.priority_job_factor) / f64::from(self.max_partition_factor);
        }
        if counts(w.qos) {
            factors.qos = row.qos_factor;
        }
        if counts(w.expansion) {
            factors.expansion = expansion_factor(now.since(since), row.limit_or(w.max_age));
        }
        factors
    }

    /// The multifactor factors of a pending job at `now` (for `sprio` and explain).
    pub fn factors(&self, id: JobId, now: Time) -> Option<Factors> {
        let job = self.jobs.get(&id)?;
        let row = Row::of(job);
        Some(self.job_factors(&row, job.eligible_since.unwrap_or(now), now, false))
    }

    /// Why a pending job cannot be considered at all now, if it cannot (`row` is its row).
    fn blocker(&self, id: JobId, row: &Row, now: Time) -> Option<PendingReason> {
        if let Some(hold) = row.hold {
            return Some(match hold {
                Hold::User => PendingReason::JobHeldUser,
                Hold::Admin => PendingReason::JobHeldAdmin,
            });
        }
        if row.begin.is_some_and(|b| b > now) {
            return Some(PendingReason::BeginTime);
        }
        if row.queue_missing {
            return Some(PendingReason::InvalidQueue);
        }
        let part = self.cluster.partition(row.partition);
        if !part.up {
            return Some(PendingReason::PartitionDown);
        }
        if let Some(max) = part.max_time {
            if row.time_limit.0 == 0 || row.time_limit > max {
                return Some(PendingReason::PartitionTimeLimit);
            }
        }
        if !row.has_dependencies {
            return None;
        }
        // Few jobs have dependencies: theirs are read from the job table.
        let spec = &self.jobs.get(&id)?.spec;
        match self.dependencies(spec) {
            DepState::Met => {}
            DepState::Waiting => return Some(PendingReason::Dependency),
            DepState::Never => return Some(PendingReason::DependencyNeverSatisfied),
        }
        // A job with a singleton dependency started the count when it entered the table.
        let running = |s: &super::Singletons| s.running(&spec.user, &spec.name);
        if spec.singleton() && self.singletons.as_ref().is_some_and(running) {
            return Some(PendingReason::SingletonDependency);
        }
        None
    }

    fn dependencies(&self, spec: &JobSpec) -> DepState {
        let states = spec.dependencies.iter().filter_map(|d| match d {
            Dependency::On { kind, job } => Some(self.dependency(*kind, *job)),
            Dependency::Singleton => None,
        });
        let (mut any_met, mut all_met, mut any_never, mut all_never, mut count) =
            (false, true, false, true, 0);
        for s in states {
            count += 1;
            any_met |= s == DepState::Met;
            all_met &= s == DepState::Met;
            any_never |= s == DepState::Never;
            all_never &= s == DepState::Never;
        }
        if count == 0 {
            return DepState::Met;
        }
        if spec.dependencies_any {
            if any_met {
                DepState::Met
            } else if all_never {
                DepState::Never
            } else {
                DepState::Waiting
            }
        } else if any_never {
            DepState::Never
        } else if all_met {
            DepState::Met
        } else {
            DepState::Waiting
        }
    }

    fn dependency(&self, kind: DependencyKind, other: JobId) -> DepState {
        let ended = self.ended.get(&other).copied();
        let started = ended.is_some() || self.jobs.get(&other).is_some_and(|j| j.ever_started);
        match (kind, ended) {
            (DependencyKind::After, _) if started => DepState::Met,
            (DependencyKind::After, _) => DepState::Waiting,
            (DependencyKind::AfterAny, Some(_)) => DepState::Met,
            (DependencyKind::AfterOk, Some(JobState::Completed)) => DepState::Met,
            (DependencyKind::AfterOk, Some(_)) => DepState::Never,
            (DependencyKind::AfterNotOk, Some(JobState::Completed)) => DepState::Never,
            (DependencyKind::AfterNotOk, Some(_)) => DepState::Met,
            (_, None) => DepState::Waiting,
        }
    }

    /// The profile of what will be free when, from the active jobs' end times: copied
    /// from the release lists kept as jobs start and end
    /// ([`NodeReleases`](crate::backfill::NodeReleases)); the reference scheduler gathers
    /// it from every active job.
    pub(super) fn profile(&self, now: Time) -> Profile {
        if self.reference {
            return self.profile_gathered(now);
        }
        let grace_end = now + self.policy.preemption.grace;
        let stopping: Vec<EarlyEnd> = self
            .stopping
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .map(|job| EarlyEnd {
                job: job.id,
                end: job.limit_end().min(grace_end),
                nodes: &job.per_node,
            })
            .collect();
        Profile::from_releases(&self.cluster, now, &self.releases, &stopping)
    }

    /// [`Scheduler::profile`] gathered from every active job.
    pub(super) fn profile_gathered(&self, now: Time) -> Profile {
        // One sweep over the job table, in id order.
        let running = (self.jobs.iter()).filter(|(id, _)| self.active.contains(*id));
        let ends = running.map(|(_, job)| {
            let limit_end = job.limit_end();
            let end = match job.stopping {
                // A job asked to stop ends within its grace time, or at its time limit.
                Some(_) => limit_end.min(now + self.policy.preemption.grace),
                None => limit_end,
            };
            (end, job.per_node.as_slice())
        });
        Profile::new(&self.cluster, now, ends)
    }

    /// The earliest time the job's gang fits in the profile, as a reservation.
    fn plan_reservation(
        &self,
        profile: &Profile,
        id: JobId,
        now: Time,
        series_cache: &mut ReleaseSeries,
    ) -> Option<Reservation> {
        /// Candidate times tried with the full node selection before the search thins out.
        const DENSE_TRIES: u32 = 16;
        /// Node selections tried per reservation at most.
        const MAX_TRIES: u32 = 48;
        let job = &self.jobs[&id];
        let nodes = &self.cluster.partition(job.partition).nodes;
        let need = job.min_want;
        let horizon = now + self.policy.backfill.window;
        let series = series_cache.entry(job.partition).or_insert_with(|| {
            let (base, all) = profile.releases_on(nodes);
            Releases::of(base, all)
        });
        // Holds end too (reservations made earlier in this pass, jobs started in it): a job
        // that needs what an earlier reservation holds can start when that one ends.
        let hold_ends = profile.hold_ends(nodes);
        let mut free_total = series.base;
        let mut tries = 0u32;
        let mut skip = 0u32;
        let (mut i, mut j) = (0, 0);
        loop {
            let t = match (series.get(i), hold_ends.get(j)) {
                (Some((a, _)), Some(&b)) => a.min(b),
                (Some((a, _)), None) => a,
                (None, Some(&b)) => b,
                (None, None) => break,
            };
            while let Some((_, freed)) = series.get(i).filter(|r| r.0 == t) {
                free_total += freed;
                i += 1;
            }
            while j < hold_ends.len() && hold_ends[j] == t {
                j += 1;
            }
            if t <= now {
                continue;
            }
            if t > horizon || tries >= MAX_TRIES {
                break;
            }
            if !need.fits_in(&free_total) {
                continue;
            }
            if skip > 0 {
                skip -= 1;
                continue;
            }
            tries += 1;
            let end = super::end_of(t, job.spec.time_limit);
            let free = |n: NodeId| profile.min_free(n, t, end);
            if let Some(per_node) = placement::select_nodes(&self.cluster, &job.spec, nodes, &free)
            {
                return Some(Reservation {
                    job: id,
                    start: t,
                    end,
                    nodes: per_node,
                });
            }
            if tries >= DENSE_TRIES {
                skip = 1 << ((tries - DENSE_TRIES) / 4).min(10);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn candidate(id: JobId) -> Candidate {
        Candidate {
            id,
            tier: 0,
            class_value: 0,
            starving: false,
            array_limited: false,
            partition: PartitionId(0),
            shape: 0,
            time_limit: crate::time::Dur(0),
            awaiting_victims: false,
            class_preempting: false,
            has_qos: false,
            reason_was: PendingReason::None,
            plain: false,
        }
    }

    /// Sorted keys with distinct ids (as the pass's are: each is a job's), and the same
    /// keys shuffled by a fixed rule.
    fn unique(keys: Vec<OrderKey>) -> (Vec<OrderKey>, Vec<OrderKey>) {
        let mut keys = keys;
        keys.sort_unstable_by_key(|k| k.6);
        keys.dedup_by_key(|k| k.6);
        keys.sort_unstable();
        let mut shuffled: Vec<OrderKey> = keys.iter().rev().copied().collect();
        let third = shuffled.len() / 3;
        shuffled.rotate_left(third);
        (keys, shuffled)
    }

    /// Keys drawn from few values per part, so that ties reach the later parts, and
    /// from the extremes, where a packing could overflow.
    fn arb_key() -> impl Strategy<Value = OrderKey> {
        let u64s = || prop_oneof![0u64..4, Just(u64::MAX), Just(u64::MAX - 1), any::<u64>()];
        let priorities = prop_oneof![
            0u64..4,
            Just(MAX_PRIORITY),
            Just(MAX_PRIORITY - 1),
            0..=MAX_PRIORITY
        ];
        (
            any::<bool>(),
            prop_oneof![0u32..3, Just(u32::MAX)],
            prop_oneof![-2i32..2, Just(i32::MIN), Just(i32::MAX)],
            u64s(),
            priorities,
            u64s(),
            u64s(),
        )
            .prop_map(|(p, t, c, s, pr, sub, id)| {
                (
                    Reverse(p),
                    Reverse(t),
                    Reverse(c),
                    Time(s),
                    Reverse(pr),
                    Time(sub),
                    JobId(id),
                )
            })
    }

    /// Both ways of applying the items (a search each, a sweep) apply each in turn and pass
    /// over ids the map does not hold.
    #[test]
    fn update_sorted_applies_every_item_of_a_held_id() {
        let map: BTreeMap<JobId, Vec<u32>> = (0..64).map(|i| (JobId(i * 2), Vec::new())).collect();
        for items in [
            vec![(1, 9), (4, 1), (4, 2), (5, 9)],
            (0..60).map(|i| (i, i as u32)).collect(),
        ] {
            let mut got = map.clone();
            let items: Vec<(JobId, u32)> = items.into_iter().map(|(i, x)| (JobId(i), x)).collect();
            update_sorted(&mut got, items.clone(), |v, x| v.push(x));
            for (id, v) in &got {
                let want: Vec<u32> = items.iter().filter(|i| i.0 == *id).map(|i| i.1).collect();
                assert_eq!(*v, want, "job {id}");
            }
        }
    }

    /// Ids use all 64 bits of the packed sort key: ids that differ only in their high bits
    /// come before one another against the order they came in; a job named twice keeps
    /// its last reason.
    #[test]
    fn reasons_by_id_read_the_whole_id() {
        let ids = [1 << 63, 1 << 32, 0, u64::MAX, 1 << 63];
        let reasons = [
            PendingReason::Priority,
            PendingReason::Resources,
            PendingReason::Dependency,
            PendingReason::BeginTime,
            PendingReason::JobHeldUser,
        ];
        let got = by_id(ids.into_iter().map(JobId).zip(reasons.clone()).collect());
        let want = [(0, 2), (1 << 32, 1), (1 << 63, 4), (u64::MAX, 3)]
            .map(|(id, r)| (JobId(id), reasons[r].clone()));
        assert_eq!(got, want);
    }

    proptest! {
        /// Reasons come by id, each job once with its last reason, whether their ids are
        /// dense enough to be marked in a table or are sorted: as a stable sort gives them,
        /// the last of each id kept.
        #[test]
        fn reasons_by_id_keep_each_jobs_last(
            named in proptest::collection::vec((prop_oneof![0u64..8, 100u64..140, (u64::MAX - 8)..=u64::MAX, (1u64 << 32)..(1 << 32) + 8], 0usize..3), 0..300),
            narrow in proptest::bool::ANY,
        ) {
            let kinds = [PendingReason::Priority, PendingReason::Resources, PendingReason::Dependency];
            // Narrow: ids within 40 of one another, which are marked in a table when there
            // are at least 10 of them; wide: mostly sorted (a few ids from one range are
            // marked in a table too).
            let id = |id: u64| if narrow { 1_000 + id % 40 } else { id };
            let reasons: Vec<(JobId, PendingReason)> =
                named.into_iter().map(|(i, k)| (JobId(id(i)), kinds[k].clone())).collect();
            let mut want = reasons.clone();
            want.sort_by_key(|r| r.0);
            let want: Vec<_> = (want.iter().enumerate())
                .filter(|(i, r)| want.get(i + 1).is_none_or(|next| next.0 != r.0))
                .map(|(_, r)| r.clone())
                .collect();
            prop_assert_eq!(by_id(reasons), want);
        }

        /// Releases read in time order, from the heap or sorted, as often and as far as
        /// the reader asks: each time every release once, as a sort by time gives them
        /// (equal times in the order they were gathered).
        #[test]
        fn releases_are_read_in_time_order(
            times in proptest::collection::vec(0u64..400, 0..1500),
            reads in proptest::collection::vec(0usize..1600, 1..4),
        ) {
            let all: Vec<(Time, Amounts)> = (times.iter().enumerate())
                .map(|(i, &t)| (Time(t), Amounts { cpus: i as u64, ..Amounts::ZERO }))
                .collect();
            let mut want = all.clone();
            want.sort_by_key(|r| (r.0, r.1.cpus));
            let mut releases = Releases::of(Amounts::ZERO, all);
            for upto in reads {
                let got: Vec<(Time, Amounts)> = (0..upto).map_while(|i| releases.get(i)).collect();
                prop_assert_eq!(&got[..], &want[..upto.min(want.len())]);
            }
        }

        /// Sorting the packed keys orders the candidates as sorting their keys does.
        #[test]
        fn packed_keys_sort_as_the_keys(keys in proptest::collection::vec(arb_key(), 0..200)) {
            let (keys, shuffled) = unique(keys);
            let mut packed = packed_keys(&shuffled);
            packed.sort_unstable();
            let by_id: BTreeMap<JobId, OrderKey> = keys.iter().map(|k| (k.6, *k)).collect();
            let sorted: Vec<OrderKey> = packed.iter().map(|p| by_id[&JobId(p.2)]).collect();
            prop_assert_eq!(sorted, keys);
        }

        /// The order gives the jobs in key order, from a heap, sorted keys or both; then
        /// the jobs named unusual that were not taken.
        #[test]
        fn an_order_gives_its_jobs_in_key_order(
            keys in proptest::collection::vec(arb_key(), 0..300),
            heap_for in prop_oneof![Just(0usize), 1usize..40, Just(usize::MAX)],
            taken in 0usize..320,
        ) {
            let (keys, shuffled) = unique(keys);
            let ids: Vec<JobId> = keys.iter().map(|k| k.6).collect();
            let candidates: Vec<Candidate> = shuffled.iter().map(|k| candidate(k.6)).collect();
            let unusual: Vec<u32> = (0..shuffled.len() as u32).filter(|p| p % 3 == 0).collect();
            let unusual_ids: Vec<JobId> = unusual.iter().map(|&p| shuffled[p as usize].6).collect();
            let starving = ids.first().copied().into_iter().collect();
            let mut order = Order::new(packed_keys(&shuffled), candidates, heap_for, starving, unusual);
            let first: Vec<(JobId, bool)> =
                (0..taken).map_while(|_| order.next()).map(|c| (c.id, c.starving)).collect();
            let n = taken.min(keys.len());
            let want: Vec<(JobId, bool)> = ids[..n].iter().map(|&id| (id, Some(&id) == ids.first())).collect();
            prop_assert_eq!(first, want);
            let left = keys.len() - n;
            let mut rest: Vec<JobId> = order.rest().into_iter().map(|c| c.id).collect();
            rest.sort_unstable();
            // The unusual ones not taken, or every one not taken when they are fewer.
            let mut want: Vec<JobId> = match left <= unusual_ids.len() {
                true => ids[n..].to_vec(),
                false => unusual_ids.into_iter().filter(|id| !ids[..n].contains(id)).collect(),
            };
            want.sort_unstable();
            prop_assert_eq!(rest, want);
        }

        /// An order in lanes by shape gives the jobs in key order; a lane thinned gives
        /// back the keys of its jobs that would end too late whose reason was another than
        /// `Priority`, a lane dropped those whose reason was another than the one decided,
        /// and the order goes on without them.
        #[test]
        fn an_order_in_lanes_gives_its_jobs_in_key_order_but_those_taken_out(
            keys in proptest::collection::vec(arb_key(), 0..300),
            taken in 0usize..320,
            code in 0u32..3,
            end in 0u64..40,
            step in -3i64..3,
        ) {
            // Thinned twice: at `end`, then at an end near it, before and after.
            let end2 = end.saturating_add_signed(step);
            let (keys, shuffled) = unique(keys);
            let lane = |id: JobId| (id.0 % 3 != 0).then_some((id.0 % 4) as u32);
            let was = |id: JobId| (id.0 % 5 % 3) as u32;
            // One limit in 37 too long for a tag: its end is unknown, and no thinning takes it.
            let limit = |id: JobId| match id.0 % 37 {
                36 => 1 << 31,
                l => l,
            };
            let candidates: Vec<Candidate> = shuffled
                .iter()
                .map(|k| {
                    let mut c = candidate(k.6);
                    c.plain = lane(c.id).is_some();
                    c.shape = (k.6.0 % 4) as u32;
                    c
                })
                .collect();
            let mut packed = packed_keys(&shuffled);
            for k in &mut packed {
                let reason = [PendingReason::Priority, PendingReason::Resources, PendingReason::None];
                k.4 = tag::new(&reason[was(JobId(k.2)) as usize], crate::time::Dur(limit(JobId(k.2))));
            }
            let mut order = Order::by_shape(packed, candidates, 4, Vec::new(), Vec::new());
            let first: Vec<JobId> = (0..taken).map_while(|_| order.next()).map(|c| c.id).collect();
            let ids: Vec<JobId> = keys.iter().map(|k| k.6).collect();
            let n = taken.min(ids.len());
            prop_assert_eq!(&first, &ids[..n].to_vec());
            let sorted = |keys: Vec<Packed>| {
                let mut ids: Vec<JobId> = keys.into_iter().map(|k| JobId(k.2)).collect();
                ids.sort_unstable();
                ids
            };
            // Lane 2 thinned at `end` (a limit of 0 is no limit: it ends never), but for
            // its next job, which waits in the lanes' heads.
            let left2: Vec<JobId> = ids[n..].iter().copied().filter(|&id| lane(id) == Some(2)).collect();
            let ends_late = |id: JobId| limit(id) < 1 << 30 && (limit(id) == 0 || limit(id) >= end);
            let thinned: Vec<JobId> = left2.iter().skip(1).copied().filter(|&id| ends_late(id)).collect();
            let got = sorted(order.thin_lane(2, Time(0), Time(end)));
            let mut want: Vec<JobId> = thinned.iter().copied().filter(|&id| was(id) != tag::PRIORITY).collect();
            want.sort_unstable();
            prop_assert_eq!(got, want);
            // Thinned again, at `end2`: only what ends late for it and was left.
            let ends_late2 = |id: JobId| limit(id) < 1 << 30 && (limit(id) == 0 || limit(id) >= end2);
            let thinned2: Vec<JobId> = left2.iter().skip(1).copied().filter(|&id| ends_late2(id) && !ends_late(id)).collect();
            let got = sorted(order.thin_lane(2, Time(0), Time(end2)));
            let mut want: Vec<JobId> = thinned2.iter().copied().filter(|&id| was(id) != tag::PRIORITY).collect();
            want.sort_unstable();
            prop_assert_eq!(got, want);
            let left1: Vec<JobId> = ids[n..].iter().copied().filter(|&id| lane(id) == Some(1)).collect();
            let got = sorted(order.drop_lane(1, code));
            let mut want: Vec<JobId> = left1.iter().copied().filter(|&id| code == tag::OTHER || was(id) != code).collect();
            want.sort_unstable();
            prop_assert_eq!(got, want);
            let then: Vec<JobId> = std::iter::from_fn(|| order.next()).map(|c| c.id).collect();
            let want: Vec<JobId> = ids[n..]
                .iter()
                .copied()
                .filter(|&id| lane(id) != Some(1) && !thinned.contains(&id) && !thinned2.contains(&id))
                .collect();
            prop_assert_eq!(then, want);
        }
    }
}
