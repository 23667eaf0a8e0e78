//! The pending table: what a pass reads of each pending job, one small row per job, kept
//! apart from the job table.
//!
//! Ordering a deep queue reads a few fields of every pending job. Read from the job table,
//! each job cost a walk to a large value and several cache lines of it: on a 100,000-job
//! queue that was most of the pass's ordering. The rows hold those fields packed together
//! in one array (with an index by id).
//!
//! A pending job's priority is the row's alone: where fair-share is weighed most priorities
//! change whenever the fair-share factors are computed again (once a calc period), and
//! writing them back cost as much as reading the jobs (in between, and where fair-share is
//! not weighed, a row keeps its priority for as long as it holds, see [`PriorityMemo`]).
//! The job table's [`Job::priority`] is the one the job had when it last left the queue;
//! read a job's priority with [`Scheduler::priority`](super::Scheduler::priority). The
//! other values a pass sets (eligibility, starving mark, reason) change seldom: the row
//! holds them as the job has them, and a pass writes back to the job table only those that
//! changed.
//!
//! Apart from the priority and how long it holds, a row is a copy: a job entering the
//! queue gets its row made from it ([`PendingTable::insert`]), one leaving has it taken
//! out ([`PendingTable::take`]), and every other change to a pending job (or a job coming
//! back to the queue) touches it ([`PendingTable::touch`]); the touched rows are made
//! again from the job table before a pass reads them ([`PendingTable::refresh`]).
//! [`PendingTable::check`] (from
//! [`Scheduler::check_invariants`](super::Scheduler::check_invariants)) compares every
//! untouched row with the row made afresh from its job.

use super::backlog::PendingWork;
use super::{Hold, IdSet, Job, JobTable, PendingReason};
use crate::cluster::PartitionId;
use crate::fairshare::AssocIx;
use crate::job::JobId;
#[cfg(doc)]
use crate::priority::PriorityWeights;
use crate::priority::SizeBasis;
use crate::resources::MILLI_PER_GPU;
use crate::time::{Dur, Time};
use foldhash::fast::FixedState;
use indexmap::IndexMap;
use std::collections::BTreeSet;

/// What a pass reads of a pending job, and the values it writes, as the job has them.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Row {
    pub(super) partition: PartitionId,
    pub(super) shape: u32,
    pub(super) assoc: AssocIx,
    pub(super) hold: Option<Hold>,
    pub(super) begin: Option<Time>,
    pub(super) queue_missing: bool,
    pub(super) time_limit: Dur,
    /// The job has dependencies (`after...` or `singleton`): reading them looks the job up.
    pub(super) has_dependencies: bool,
    /// An array task whose array limits its running tasks (`%N`).
    pub(super) array_limited: bool,
    pub(super) class_value: i32,
    pub(super) class_preempting: bool,
    pub(super) qos_factor: f64,
    pub(super) has_qos: bool,
    pub(super) nice: i32,
    pub(super) submit_time: Time,
    /// The gang's GPUs (in thousandths) and cores at full size, for the job-size factor.
    pub(super) want_gpu_milli: u64,
    pub(super) want_cpus: u64,
    /// Victims preempted for it still stop ([`Job::awaiting_victims`] is not empty).
    pub(super) awaiting_victims: bool,
    /// It holds what its victims freed ([`Job::victims_held`] is not empty).
    pub(super) holds_victims: bool,
    /// The priority the last pass gave it (see the module's documentation).
    pub(super) priority: u64,
    /// Until when that priority holds.
    pub(super) memo: PriorityMemo,
    pub(super) eligible_since: Option<Time>,
    pub(super) starving_since: Option<Time>,
    pub(super) reason: PendingReason,
    /// The logarithm of the job's work by its own limit ([`work_ln`] of its GPUs, or cores
    /// when it asks for no GPU), for the job-size factor's work basis, which every pass
    /// would otherwise compute for every pending job; 0 for a job without a limit.
    pub(super) work_ln: f64,
}

/// A job's GPUs from its thousandths.
fn gpus(milli: u64) -> f64 {
    milli as f64 / f64::from(MILLI_PER_GPU)
}

/// The logarithm of `amount` held for `limit` (at least 1): the job-size factor's work.
fn work_ln(amount: f64, limit: Dur) -> f64 {
    (amount * limit.0 as f64).max(1.0).ln()
}

/// What the job-size factor divides a job's size by: the cluster's GPUs and cores, and for
/// its work basis the logarithm of the most work on each (all of them for `max_age`).
/// Made once, as a scheduler's nodes and priority weights stay as they were made.
#[derive(Clone, Copy, Debug)]
pub(super) struct SizeScale {
    pub(super) gpus: u64,
    cpus: u64,
    max_age: Dur,
    /// On GPUs, then on cores.
    most_ln: [f64; 2],
}

impl SizeScale {
    pub(super) fn new(gpus: u64, cpus: u64, max_age: Dur) -> SizeScale {
        let most_ln = |total: u64| (total as f64 * max_age.0.max(1) as f64).max(2.0).ln();
        SizeScale {
            gpus,
            cpus,
            max_age,
            most_ln: [most_ln(gpus), most_ln(cpus)],
        }
    }
}

impl Row {
    /// Whether its job, eligible, is unusual to a pass: its reason is not `Priority` (a
    /// quota's, which is always written again, is not), or it is an array task with a
    /// `%N` limit. Once every job left waits on `Priority`, the unusual ones are the only
    /// jobs whose outcome may be another reason or a change of reason.
    pub(super) fn unusual(&self) -> bool {
        self.array_limited || self.reason != PendingReason::Priority
    }

    /// Whether the starving mark can help its job: not one the last pass found never fits
    /// or held back by a limit (a quota, an array's `%N`), which would keep the mark from
    /// the rest of its partition for as long as it waits.
    pub(super) fn may_be_marked(&self) -> bool {
        !self.array_limited
            && !matches!(
                self.reason,
                PendingReason::BadConstraints | PendingReason::Limit(_)
            )
    }

    pub(super) fn of(job: &Job) -> Row {
        Row {
            partition: job.partition,
            shape: job.shape,
            assoc: job.assoc,
            hold: job.hold,
            begin: job.spec.begin,
            queue_missing: job.queue_missing,
            time_limit: job.spec.time_limit,
            has_dependencies: !job.spec.dependencies.is_empty(),
            array_limited: job.spec.array.is_some_and(|a| a.max_running.is_some()),
            class_value: job.class_value,
            class_preempting: job.class_preempting,
            qos_factor: job.qos_factor,
            has_qos: job.spec.qos.is_some(),
            nice: job.spec.nice,
            submit_time: job.spec.submit_time,
            want_gpu_milli: job.want.gpu_milli,
            want_cpus: job.want.cpus,
            awaiting_victims: !job.awaiting_victims.is_empty(),
            holds_victims: !job.victims_held.is_empty(),
            priority: job.priority,
            memo: PriorityMemo::NONE,
            eligible_since: job.eligible_since,
            starving_since: job.starving_since,
            reason: job.reason.clone(),
            work_ln: match job.spec.time_limit {
                Dur(0) => 0.0,
                limit if job.want.gpu_milli > 0 => work_ln(gpus(job.want.gpu_milli), limit),
                limit => work_ln(job.want.cpus as f64, limit),
            },
        }
    }

    /// The job's GPUs (or cores, for CPU-only jobs) over the cluster's: the job-size share.
    pub(super) fn size_share(&self, basis: SizeBasis, scale: &SizeScale) -> f64 {
        let on_gpus = self.want_gpu_milli > 0 && scale.gpus > 0;
        let (amount, total, most_ln) = if on_gpus {
            (
                gpus(self.want_gpu_milli),
                scale.gpus as f64,
                scale.most_ln[0],
            )
        } else if scale.cpus > 0 {
            (self.want_cpus as f64, scale.cpus as f64, scale.most_ln[1])
        } else {
            return 0.0;
        };
        match basis {
            SizeBasis::Resources => amount / total,
            SizeBasis::Work => {
                // The row's own, when it was made on the same amount and limit.
                let kept = self.time_limit.0 != 0 && on_gpus == (self.want_gpu_milli > 0);
                let work_ln = match kept {
                    true => self.work_ln,
                    false => work_ln(amount, self.limit_or(scale.max_age)),
                };
                (work_ln / most_ln).clamp(0.0, 1.0)
            }
        }
    }

    /// The job's time limit, or `max_age` for a job without one (how long the priority's
    /// job-size work basis and expansion factor take it to run).
    pub(super) fn limit_or(&self, max_age: Dur) -> Dur {
        match self.time_limit {
            Dur(0) => max_age,
            limit => limit,
        }
    }

    /// Writes the values a pass sets back to the job, but the priority.
    pub(super) fn write_to(&self, job: &mut Job) {
        job.eligible_since = self.eligible_since;
        job.starving_since = self.starving_since;
        job.reason.clone_from(&self.reason);
    }
}

/// How long a row's priority holds as it is ([`PriorityWeights::steady_for`]): from the
/// pass that computed it, for a job eligible since `since`, until `until`, while the row is
/// not made again, and, where fair-share is weighed, while the fair-share factors are
/// those it was computed with (they are computed again once a calc period, five minutes by
/// default). Every other input of the priority is the row's own or fixed for the
/// scheduler's life (the weights, the cluster's size, the partitions' factors). A pass
/// reads a priority that holds instead of computing it: under a policy that does not weigh
/// expansion, a job's priority changes only as its age adds a whole unit (under `fifo`'s
/// weights about every 8.8 hours, under the default's about every 4 minutes) or as the
/// fair-share factors are computed again, while passes come seconds apart, and computing
/// every pending job's priority was most of a first-come-first-served pass on a deep queue
/// and a tenth of the default policy's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct PriorityMemo {
    since: Time,
    from: Time,
    until: Time,
    /// The count of the fair-share factors' computations it was computed with, when
    /// fair-share is weighed: it holds only with the same factors.
    fairshare: Option<u32>,
}

impl PriorityMemo {
    /// Holds never.
    pub(super) const NONE: PriorityMemo = PriorityMemo {
        since: Time::NEVER,
        from: Time::NEVER,
        until: Time(0),
        fairshare: None,
    };

    /// A priority computed at `now` for a job eligible since `since`, the same for
    /// `steady` (`None`: while nothing else changes), with the fair-share factors of count
    /// `fairshare` when fair-share is weighed.
    pub(super) fn new(
        since: Time,
        now: Time,
        steady: Option<Dur>,
        fairshare: Option<u32>,
    ) -> PriorityMemo {
        PriorityMemo {
            since,
            from: now,
            until: steady.map_or(Time::NEVER, |d| now + d),
            fairshare,
        }
    }

    /// Whether the priority holds at `now` for a job eligible since `since`, with the
    /// fair-share factors of count `fairshare` when fair-share is weighed.
    pub(super) fn holds(&self, since: Time, now: Time, fairshare: Option<u32>) -> bool {
        self.since == since && self.from <= now && now < self.until && self.fairshare == fairshare
    }

    /// The time the job was eligible since when it was computed.
    pub(super) fn since(&self) -> Time {
        self.since
    }

    /// When it stops holding ([`Time::NEVER`]: while nothing else changes).
    pub(super) fn until(&self) -> Time {
        self.until
    }
}

/// The rows of the pending jobs, and the jobs touched since their rows were made. The index
/// hashes ids with foldhash (fixed seed): the default hasher was a tenth of a start's cost.
#[derive(Clone, Debug, Default)]
pub(super) struct PendingTable {
    /// In no particular order (a row leaving takes the place of the last): a pass sorts
    /// the jobs it reads, and what it writes back is sorted by id.
    rows: IndexMap<JobId, Row, FixedState>,
    /// Jobs changed, queued or taken out of the queue since the rows were last refreshed.
    touched: IdLog,
    /// Every row is to be made again.
    all: bool,
    /// With [`PendingTable::keep_changes`], the jobs whose rows were made as they entered
    /// the queue or taken out as they left it since the last refresh (which need no making
    /// again), so that [`PendingTable::refresh`] names every row that changed.
    moved: Option<IdLog>,
    /// The rows' work by time limits per partition (held jobs left out), for
    /// `largest_first_within`.
    work: PendingWork,
}

/// Counts a row's job in (`add`) or out of `work`, unless it is held.
fn count(work: &mut PendingWork, row: &Row, add: bool) {
    if row.hold.is_none() {
        work.count(row.partition, row.want_gpu_milli, row.time_limit, add);
    }
}

/// The work of `rows`, counted afresh.
fn work_of<'a>(rows: impl Iterator<Item = &'a Row>) -> PendingWork {
    let mut work = PendingWork::default();
    for row in rows {
        count(&mut work, row, true);
    }
    work
}

/// Jobs noted, some perhaps more than once. Between passes (scheduling may be paused for
/// long) the list stays within about twice the jobs it names.
#[derive(Clone, Debug, Default)]
struct IdLog {
    ids: Vec<JobId>,
    /// The length at which `ids` is next rid of its repeats.
    compact_at: usize,
}

impl IdLog {
    fn push(&mut self, id: JobId) {
        self.ids.push(id);
        if self.ids.len() >= self.compact_at.max(1024) {
            self.ids.sort_unstable();
            self.ids.dedup();
            self.compact_at = 2 * self.ids.len();
        }
    }

    /// The jobs noted, sorted, each once; the log is left empty.
    fn take(&mut self) -> Vec<JobId> {
        self.compact_at = 0;
        let mut ids = std::mem::take(&mut self.ids);
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

impl PendingTable {
    /// Notes that job `id` changed, entered the queue or left it.
    pub(super) fn touch(&mut self, id: JobId) {
        self.touched.push(id);
    }

    /// Notes the jobs entering and leaving the queue from now on (see
    /// [`PendingTable::refresh`]).
    pub(super) fn keep_changes(&mut self) {
        self.moved = Some(IdLog::default());
    }

    /// Adds the row of a job entering the queue, made from the job as it enters.
    pub(super) fn insert(&mut self, id: JobId, job: &Job) {
        let row = Row::of(job);
        count(&mut self.work, &row, true);
        if let Some(was) = self.rows.insert(id, row) {
            count(&mut self.work, &was, false);
        }
        if let Some(moved) = &mut self.moved {
            moved.push(id);
        }
    }

    /// Takes out the row of a job leaving the queue.
    pub(super) fn take(&mut self, id: JobId) -> Option<Row> {
        if let Some(moved) = &mut self.moved {
            moved.push(id);
        }
        let row = self.rows.swap_remove(&id)?;
        count(&mut self.work, &row, false);
        Some(row)
    }

    /// The rows' work by time limits per partition (held jobs left out).
    pub(super) fn work(&self) -> &PendingWork {
        &self.work
    }

    /// Whether [`PendingTable::work`] is the rows' work.
    pub(super) fn check_work(&self) -> Result<(), String> {
        match work_of(self.rows.values()).same_as(&self.work) {
            true => Ok(()),
            false => Err("the pending work per partition differs from the queue's rows".into()),
        }
    }

    /// Notes that any pending job may have changed.
    pub(super) fn touch_all(&mut self) {
        self.all = true;
        self.touched = IdLog::default();
    }

    /// Makes the touched rows again from the job table (every row after
    /// [`PendingTable::touch_all`]), so that the table holds exactly the pending jobs. A
    /// row made again keeps its priority, but not how long it holds: the next pass computes
    /// it again.
    ///
    /// Returns the jobs touched, sorted, and with [`PendingTable::keep_changes`] those that
    /// entered or left the queue: every job whose row was made, made again or taken out
    /// since the last refresh; `None` when every row was made again.
    pub(super) fn refresh(&mut self, jobs: &JobTable, pending: &IdSet) -> Option<Vec<JobId>> {
        let moved = self.moved.as_mut().map(IdLog::take);
        let fresh = |id: &JobId, was: Option<&Row>| {
            let mut row = Row::of(jobs.get(id)?);
            if let Some(was) = was {
                row.priority = was.priority;
            }
            Some(row)
        };
        if std::mem::take(&mut self.all) {
            self.touched = IdLog::default();
            let was = std::mem::take(&mut self.rows);
            self.rows = super::in_id_order(pending)
                .iter()
                .filter_map(|id| Some((*id, fresh(id, was.get(id))?)))
                .collect();
            self.work = work_of(self.rows.values());
            return None;
        }
        let mut touched = self.touched.take();
        for &id in &touched {
            let was = match pending.get(&id).and_then(|id| fresh(id, self.rows.get(id))) {
                Some(row) => {
                    count(&mut self.work, &row, true);
                    self.rows.insert(id, row)
                }
                None => self.rows.swap_remove(&id),
            };
            if let Some(was) = was {
                count(&mut self.work, &was, false);
            }
        }
        if let Some(moved) = moved {
            touched.extend(moved);
            touched.sort_unstable();
            touched.dedup();
        }
        Some(touched)
    }

    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    /// The pending jobs, in no particular order.
    pub(super) fn ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.rows.keys().copied()
    }

    /// The jobs touched since the last refresh (`None`: every row is to be made again),
    /// and with `moved` those that entered or left the queue.
    pub(super) fn touched(&self, moved: bool) -> Option<BTreeSet<JobId>> {
        let moved = self.moved.iter().filter(|_| moved);
        let ids = self.touched.ids.iter().chain(moved.flat_map(|m| &m.ids));
        (!self.all).then(|| ids.copied().collect())
    }

    pub(super) fn rows(&self) -> impl Iterator<Item = (JobId, &Row)> {
        self.rows.iter().map(|(&id, row)| (id, row))
    }

    pub(super) fn rows_mut(&mut self) -> impl Iterator<Item = (&JobId, &mut Row)> {
        self.rows.iter_mut()
    }

    pub(super) fn row(&self, id: JobId) -> Option<&Row> {
        self.rows.get(&id)
    }

    /// The row of a pending job, to set a value the pass wrote to the job as well.
    pub(super) fn row_mut(&mut self, id: JobId) -> Option<&mut Row> {
        self.rows.get_mut(&id)
    }

    /// Whether every row not touched since it was made equals the row made afresh from its
    /// job (but for the priority and how long it holds, which are the row's), and the table
    /// holds no other job than the pending ones.
    pub(super) fn check(&self, jobs: &JobTable, pending: &IdSet) -> Result<(), String> {
        let Some(touched) = self.touched(false) else {
            return Ok(());
        };
        for (id, row) in &self.rows {
            if touched.contains(id) {
                continue;
            }
            if !pending.contains(id) {
                return Err(format!("job {id} has a pending row but is not pending"));
            }
            let job = jobs
                .get(id)
                .ok_or_else(|| format!("pending job {id} is not in the job table"))?;
            let fresh = Row {
                priority: row.priority,
                memo: row.memo,
                ..Row::of(job)
            };
            if *row != fresh {
                return Err(format!(
                    "job {id}'s pending row is stale: {row:?}, but the job gives {fresh:?}"
                ));
            }
        }
        if let Some(id) = pending
            .iter()
            .filter(|id| !self.rows.contains_key(*id) && !touched.contains(id))
            .min()
        {
            return Err(format!("pending job {id} has no pending row"));
        }
        Ok(())
    }
}
