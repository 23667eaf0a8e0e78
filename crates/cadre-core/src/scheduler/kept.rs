//! The order of the eligible pending jobs kept between passes, under strict order.
//!
//! A strict-order pass (the `fifo` preset) reads the head of the order: it starts jobs
//! while they fit and stops at the first that does not, and every job behind it waits on
//! `Priority`. Making the order afresh read every pending job at every pass, and on a deep
//! backlog that was most of such a pass, dearer than a whole pass under the default policy
//! on the same trace. Kept between passes, the order costs a pass only the jobs that
//! changed: a job's key and whether it is eligible follow from its row, the time and the
//! jobs it depends on, so a pass assesses again ([`Scheduler::assess`]) only
//!
//! - the jobs touched since the last pass: changed, entering or leaving the queue (the
//!   pending table names them, see [`PendingTable::refresh`]);
//! - the jobs whose time came: a priority that stops holding ([`PriorityMemo::until`]), a
//!   begin time reached;
//! - the jobs with dependencies, at every pass: another job's start or end, or a singleton
//!   starting, may change whether they are eligible (few jobs have them);
//! - a job that stopped being eligible with a priority computed from its old eligibility
//!   time, once more: from then on its priority weighs no age.
//!
//! Everything else an assessment reads is fixed for the scheduler's life (the weights, the
//! partitions) or changes only with a change to every pending job, which touches them all.
//! Time is taken to go forward: should a pass come at an earlier time than the last (the
//! controller passes the wall clock, which may be set back), every job is assessed again.
//! The reference scheduler makes the order afresh at every pass; the equivalence tests
//! compare the two pass by pass, and `check_invariants` assesses every job again at the
//! last pass's time and compares.
//!
//! [`Scheduler::assess`]: super::Scheduler
//! [`PriorityMemo::until`]: super::queue::PriorityMemo::until

use super::pass::OrderKey;
use super::queue::{PendingTable, Row};
use crate::job::JobId;
use crate::time::Time;
use foldhash::fast::FixedState;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::ops::Bound;

/// The kept order (see the module's documentation).
#[derive(Clone, Debug, Default)]
pub(super) struct KeptOrder {
    /// The keys of the eligible pending jobs.
    order: BTreeSet<OrderKey>,
    /// Each eligible job's key in `order`.
    keys: HashMap<JobId, OrderKey, FixedState>,
    /// The eligible jobs whose reason is not `Priority`, or that are array tasks with a
    /// `%N` limit: once every job left waits on `Priority`, the only ones whose outcome
    /// may be another reason or a change of reason.
    unusual: BTreeSet<JobId>,
    /// When a job is to be assessed again (some entries are stale: assessing a job again
    /// early only costs the assessment).
    due: BinaryHeap<Reverse<(Time, JobId)>>,
    /// The jobs with dependencies, assessed at every pass.
    watched: BTreeSet<JobId>,
    /// It holds every pending job's assessment (otherwise the next pass assesses them all).
    whole: bool,
    /// The time of the last pass.
    last: Option<Time>,
    /// The keys noted while it is made afresh, put in `order` at once at the end of the
    /// pass (a sort, and a tree built from sorted keys: a third of the cost of inserting
    /// them one by one).
    added: Option<Vec<OrderKey>>,
}

/// The share of the pending jobs above which a pass assesses every job and makes the kept
/// order afresh rather than changing it job by job, if they are more than [`REMAKE_MIN`].
const REMAKE_SHARE: usize = 2;
/// (Small in tests, whose queues are short, so that they make the order afresh now and
/// then as well as change it.)
const REMAKE_MIN: usize = if cfg!(test) { 24 } else { 1024 };

/// How many more entries than twice the pending jobs the heap of when to look at jobs
/// again may hold before the next pass makes the order afresh (dropping the stale ones).
const DUE_SLACK: usize = if cfg!(test) { 16 } else { 1024 };

impl KeptOrder {
    /// The pending jobs a pass at `now` assesses again, given the jobs the pending table
    /// touched since the last pass (`None`: all of them), sorted, each once. Forgets what
    /// it holds of them (and of the jobs that left the queue); when they are many (or it
    /// does not hold every job), every pending job, and it is made afresh.
    pub(super) fn take_stale(
        &mut self,
        touched: Option<Vec<JobId>>,
        table: &PendingTable,
        now: Time,
    ) -> Vec<JobId> {
        let remake = |kept: &mut KeptOrder| {
            *kept = KeptOrder {
                whole: true,
                last: Some(now),
                added: Some(Vec::with_capacity(table.len())),
                ..KeptOrder::default()
            };
            kept.keys.reserve(table.len());
            let mut all: Vec<JobId> = table.ids().collect();
            all.sort_unstable();
            all
        };
        let back = self.last.is_some_and(|last| now < last);
        self.last = Some(now);
        let mut ids = match touched {
            Some(touched) if self.whole && !back => touched,
            _ => return remake(self),
        };
        while let Some(&Reverse((at, id))) = self.due.peek() {
            if at > now {
                break;
            }
            self.due.pop();
            ids.push(id);
        }
        ids.extend(self.watched.iter().copied());
        ids.sort_unstable();
        ids.dedup();
        for &id in &ids {
            if let Some(key) = self.keys.remove(&id) {
                self.order.remove(&key);
            }
            self.unusual.remove(&id);
            self.watched.remove(&id);
        }
        // Those that left the queue are forgotten, and that is all (after a pass that
        // started many jobs, most).
        ids.retain(|&id| table.row(id).is_some());
        if ids.len() > REMAKE_MIN.max(table.len() / REMAKE_SHARE) {
            return remake(self);
        }
        ids
    }

    /// Notes a job's assessment at `now`: its row and its key if it is eligible.
    pub(super) fn note(&mut self, id: JobId, row: &Row, key: Option<OrderKey>, now: Time) {
        // A job with dependencies is assessed at every pass: no time to note for it.
        let timed = !row.has_dependencies;
        if !timed {
            self.watched.insert(id);
        }
        match key {
            Some(key) => {
                match &mut self.added {
                    Some(added) => added.push(key),
                    None => _ = self.order.insert(key),
                }
                self.keys.insert(id, key);
                self.note_reason(id, row);
                let until = row.memo.until();
                if timed && until != Time::NEVER {
                    self.due.push(Reverse((until, id)));
                }
            }
            None if timed => {
                if let Some(begin) = row.begin.filter(|&b| b > now) {
                    self.due.push(Reverse((begin, id)));
                }
                // A job no longer eligible has the priority of a job that waited for no
                // time from the next pass on, which weighs no age: once more, then it holds.
                if row.memo.since() != now {
                    self.due.push(Reverse((now, id)));
                }
            }
            None => {}
        }
    }

    /// Notes a reason written to a job's row.
    pub(super) fn note_reason(&mut self, id: JobId, row: &Row) {
        if !self.keys.contains_key(&id) {
            return;
        }
        match row.unusual() {
            true => self.unusual.insert(id),
            false => self.unusual.remove(&id),
        };
    }

    /// Ends the assessments of a pass over `rows` pending jobs. Should the heap of when to
    /// assess jobs again hold more than twice as many entries as there are jobs (and
    /// [`DUE_SLACK`] more; the stale ones of jobs assessed again early, or gone), the next
    /// pass assesses every job, which drops them.
    pub(super) fn end_pass(&mut self, rows: usize) {
        if let Some(mut added) = self.added.take() {
            // Sorted unstably first (keys are unique): the tree's own sort is a stable
            // one, dearer on these keys, and finds them in order.
            added.sort_unstable();
            self.order = added.into_iter().collect();
        }
        if self.due.len() > 2 * rows + DUE_SLACK {
            self.whole = false;
        }
    }

    /// Up to `n` keys after `after` (from the first without), in order.
    pub(super) fn after(&self, after: Option<&OrderKey>, n: usize) -> Vec<OrderKey> {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let keys = self.order.range((from, Bound::Unbounded));
        keys.take(n).copied().collect()
    }

    /// The keys of the unusual jobs (see [`KeptOrder::unusual`]) after `after` (all without).
    pub(super) fn unusual_after(&self, after: Option<&OrderKey>) -> Vec<OrderKey> {
        let keys = self.unusual.iter().filter_map(|id| self.keys.get(id));
        keys.filter(|k| after.is_none_or(|a| *k > a))
            .copied()
            .collect()
    }

    /// Whether what it holds agrees with the pending table (jobs touched since the last
    /// pass excepted): every job kept is pending, and every unusual one is kept; and
    /// assessed again at the last pass's time (by `assess`, on a copy of its row), every
    /// pending job without dependencies (which may have been decided since) is kept with
    /// the key it gets, or not kept if it gets none, and is kept as unusual if its row
    /// says so.
    pub(super) fn check(
        &self,
        table: &PendingTable,
        assess: impl Fn(JobId, &Row, Time) -> Option<OrderKey>,
    ) -> Result<(), String> {
        let (true, Some(touched), Some(now)) = (self.whole, table.touched(true), self.last) else {
            return Ok(());
        };
        if self.keys.len() != self.order.len() {
            return Err(format!(
                "the kept order holds {} keys for {} jobs",
                self.order.len(),
                self.keys.len()
            ));
        }
        for (&id, key) in &self.keys {
            let pending = table.row(id).is_some() || touched.contains(&id);
            if !pending || !self.order.contains(key) {
                return Err(format!(
                    "job {id}'s kept key {key:?} is not pending or not in order"
                ));
            }
        }
        for (id, row) in table.rows() {
            if touched.contains(&id) || row.has_dependencies {
                continue;
            }
            let key = assess(id, row, now);
            let kept = self.keys.get(&id).copied();
            if key != kept {
                return Err(format!(
                    "job {id} is kept with key {kept:?}, but assessed again at {now:?} gets {key:?}"
                ));
            }
            if key.is_some() && row.unusual() != self.unusual.contains(&id) {
                return Err(format!("job {id} is wrongly kept as unusual or not"));
            }
        }
        if let Some(id) = self.unusual.iter().find(|id| !self.keys.contains_key(id)) {
            return Err(format!("job {id} is kept as unusual but has no key"));
        }
        Ok(())
    }
}
