//! Multifactor priority with Slurm's semantics.
//!
//! Given the factors of a pending job, each a number in [0, 1], and integer weights, the
//! priority is the weighted sum minus the job's nice value, clamped to [1, 2^32 - 1] as
//! Slurm's is (0 is Slurm's "held"). Factors:
//! - age: time eligible in the queue over `max_age`, capped at 1;
//! - fair-share: from the fair-share tree ([`crate::fairshare`]);
//! - job size: the job's GPUs (CPUs for CPU-only jobs) over the cluster's, or one minus that
//!   with `favor_small`;
//! - partition: the partition's `priority_job_factor` over the highest of all partitions;
//! - QOS: the QOS's priority over the highest of all QOS;
//! - expansion (cadre's, not Slurm's): how long the job has waited against its time limit,
//!   the expansion factor `(wait + limit) / limit` on a log scale, 1/8 per doubling, 1 from
//!   256 (Moab's `XFACTOR` weighs the same ratio); a job without a time limit counts
//!   `max_age` as its limit, as the work basis of the job-size factor does.
//!
//! Only configured (non-zero) weights count, as in Slurm.

use crate::time::Dur;
use serde::{Deserialize, Serialize};

/// Weights of the priority factors and the age cap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PriorityWeights {
    pub age: u32,
    pub fairshare: u32,
    pub job_size: u32,
    pub partition: u32,
    pub qos: u32,
    /// Weight of the expansion factor (see the module's documentation): a short job that
    /// has waited many times its time limit catches up with longer jobs that have waited
    /// as long, whatever the work order says. 0 in every preset (docs/simulator.md,
    /// experiment 9, measured it as a default).
    pub expansion: u32,
    /// Age at which the age factor reaches 1 (Slurm `PriorityMaxAge`: Slurm's default and
    /// the `slurm` preset's 7 days, cadre's 14). With the work basis, also the top of the
    /// work scale (the whole cluster for `max_age`).
    #[serde(with = "crate::time::secs")]
    pub max_age: Dur,
    /// Small jobs get the larger job-size factor (Slurm `PriorityFavorSmall`).
    pub favor_small: bool,
    /// What "size" means for the job-size factor.
    pub size_basis: SizeBasis,
    /// While a partition's backlog is this shallow or less, its job-size factor favours
    /// larger jobs, by their GPUs over the cluster's (cores for CPU-only jobs: Slurm's job
    /// size), whatever `favor_small` and `size_basis` say. The backlog is the partition's
    /// outstanding work by time limits, the pending jobs' GPUs times their limits (held
    /// jobs left out) and the running jobs' GPUs times what is left of theirs (nothing,
    /// past it), over the GPUs of its up nodes, each partition reckoned alone: how long
    /// its GPUs would take to run what is queued and running were every job to use its
    /// whole limit. Small work first gives the shortest waits in a backlog of days; in a
    /// short one every job starts soon anyway, and largest first packs the gangs and ends
    /// the backlog soonest (docs/simulator.md, experiment 13). A job without a time
    /// limit, pending or running, leaves its partition's backlog unknown: never shallow.
    /// cadre's default 4 hours; 0 turns it off (the `slurm` and `fifo` presets).
    #[serde(with = "crate::time::secs")]
    pub largest_first_within: Dur,
    /// A partition's job-size factor also favours larger jobs while the small work left
    /// could not fill around its gangs: while the pending work (GPUs times limits) of the
    /// jobs that leave no gap, those whose GPUs divide the partition's (small or not), is
    /// at most this percentage of the gaps the
    /// other pending jobs would leave. A job of `w` GPUs on a partition of `C` runs
    /// `C / w` (rounded down) side by side with jobs like it and leaves `C mod w` GPUs idle
    /// among them: its gap is its share of those, for its time limit. Late in a burst,
    /// small work first leaves the gangs that cannot run two at a time for the end, with
    /// GPUs idle beside them; starting them while small jobs remain fills those GPUs
    /// (docs/simulator.md, experiment 17). Held jobs, jobs without a limit and jobs wider
    /// than the partition's up nodes are not counted. cadre's default 50; 0 turns it off
    /// (the `slurm` and `fifo` presets).
    pub largest_first_gaps_percent: u32,
}

/// What the job-size factor measures.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SizeBasis {
    /// The job's GPUs (cores for CPU-only jobs) over the cluster's, as Slurm's job size.
    #[default]
    Resources,
    /// The job's work, GPUs (or cores) times its time limit, on a logarithmic scale from
    /// one GPU-second to the whole cluster for `max_age`: with `favor_small`, short narrow
    /// jobs first, as Slurm's `SMALL_RELATIVE_TO_TIME` intends, without letting one huge
    /// job flatten the scale for the rest.
    Work,
}

impl Default for PriorityWeights {
    /// cadre's defaults. Fair-share dominates (twice the other factors together, so a
    /// team that has just used much of the cluster yields to the others); then work (GPUs
    /// x time limit, smaller first) and age at equal weight, age growing over two weeks,
    /// so that short narrow jobs go first but a large job that has waited catches up
    /// within about a week (a 128-GPU job of a week with a 1-GPU job of an hour, on 512
    /// GPUs: 6.9 days); then QOS and partition. Measured on the Philly trace on 512 GPUs
    /// against the `slurm` preset (see docs/simulator.md): lower mean, p95 and longest
    /// waits and bounded slowdown at higher utilization. Age over two weeks rather than
    /// Slurm's one (experiment 3 there) shortened the waits of synthetic loads above
    /// capacity on every seed tried and of the trace on smaller clusters.
    fn default() -> Self {
        PriorityWeights {
            age: 5000,
            fairshare: 20_000,
            job_size: 5000,
            partition: 1000,
            qos: 2000,
            expansion: 0,
            max_age: Dur::days(14),
            favor_small: true,
            size_basis: SizeBasis::Work,
            largest_first_within: Dur::hours(4),
            largest_first_gaps_percent: 50,
        }
    }
}

/// The factors of one job, each in [0, 1], plus its nice value.
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Factors {
    pub age: f64,
    pub fairshare: f64,
    pub job_size: f64,
    pub partition: f64,
    pub qos: f64,
    #[serde(default)]
    pub expansion: f64,
    pub nice: i32,
}

/// The doublings of the expansion factor over which its priority factor grows to 1.
const EXPANSION_DOUBLINGS: f64 = 8.0;

/// The highest priority a job can have.
pub const MAX_PRIORITY: u64 = u32::MAX as u64;

impl PriorityWeights {
    /// The age factor of a job eligible for `waited`.
    pub fn age_factor(&self, waited: Dur) -> f64 {
        if self.max_age.0 == 0 {
            return 1.0;
        }
        (waited.0 as f64 / self.max_age.0 as f64).min(1.0)
    }

    /// The job-size factor of a job holding `share` (in [0, 1]) of the cluster.
    pub fn job_size_factor(&self, share: f64) -> f64 {
        let s = share.clamp(0.0, 1.0);
        if self.favor_small { 1.0 - s } else { s }
    }

    /// Whether `largest_first_within` or `largest_first_gaps_percent` can change a job-size
    /// factor: one is set, job size is weighed, and the factor does not favour the larger
    /// jobs by their GPUs already.
    pub fn size_may_flip(&self) -> bool {
        let already = !self.favor_small && self.size_basis == SizeBasis::Resources;
        let set = self.largest_first_within.0 != 0 || self.largest_first_gaps_percent != 0;
        self.job_size != 0 && set && !already
    }

    /// The priority of a job with these factors.
    pub fn priority(&self, f: &Factors) -> u64 {
        of_sum(self.sum(f))
    }

    /// [`PriorityWeights::priority`] and [`PriorityWeights::steady_for`] together, the
    /// weighted sum computed once (a pass computes both for every pending job whose
    /// priority does not hold).
    pub fn priority_steady(&self, f: &Factors, waited: Dur) -> (u64, Option<Dur>) {
        let sum = self.sum(f);
        let priority = of_sum(sum);
        (priority, self.steady_after(sum, f.nice, waited, priority))
    }

    /// The weighted sum that [`PriorityWeights::priority`] rounds and clamps.
    fn sum(&self, f: &Factors) -> f64 {
        let term = |w: u32, x: f64| f64::from(w) * x.clamp(0.0, 1.0);
        term(self.age, f.age)
            + term(self.fairshare, f.fairshare)
            + term(self.job_size, f.job_size)
            + term(self.partition, f.partition)
            + term(self.qos, f.qos)
            + term(self.expansion, f.expansion)
            - f64::from(f.nice)
    }

    /// How long the priority of a job eligible for `waited`, with factors `f` and so
    /// priority `priority`, stays the same while the job waits and nothing else changes:
    /// every factor but age is then fixed, but expansion, which grows faster the shorter the
    /// job (zero when it is weighed), and age only grows, by `age / max_age` a second until
    /// it reaches its cap. `None`: for as long as nothing else changes. The fair-share
    /// factor counts as fixed: it moves with everyone's usage, but only when the factors
    /// are computed again, which the caller follows. (A pass computes every priority again
    /// when `largest_first_within` has turned a partition's job-size factor round.)
    ///
    /// The priority is the sum rounded, and the sum only grows: it stays the same until the
    /// sum reaches `priority + 0.5`. The time that takes is cut by a margin far above the
    /// floating-point error of the sum (about 10^-15 of its terms' size), so that the
    /// priority computed at any whole second within it is exactly `priority`.
    pub fn steady_for(&self, f: &Factors, waited: Dur, priority: u64) -> Option<Dur> {
        self.steady_after(self.sum(f), f.nice, waited, priority)
    }

    /// [`PriorityWeights::steady_for`] from the factors' weighted sum `sum` and nice value.
    fn steady_after(&self, sum: f64, nice: i32, waited: Dur, priority: u64) -> Option<Dur> {
        if self.expansion != 0 {
            return Some(Dur(0));
        }
        if self.age == 0 || self.max_age.0 == 0 || waited >= self.max_age {
            return None;
        }
        if priority >= MAX_PRIORITY {
            return None;
        }
        let slope = f64::from(self.age) / self.max_age.0 as f64;
        let size = [
            self.age,
            self.fairshare,
            self.job_size,
            self.partition,
            self.qos,
        ]
        .into_iter()
        .map(f64::from)
        .sum::<f64>()
            + f64::from(nice).abs()
            + priority as f64;
        let room = (priority as f64 + 0.5) - sum - size * 1e-12;
        let secs = room / slope * (1.0 - 1e-9);
        // A NaN (from a NaN factor) holds for no time either.
        if secs.is_nan() || secs < 1.0 {
            return Some(Dur(0));
        }
        Some(Dur(secs.min(u64::MAX as f64 / 2.0) as u64))
    }
}

/// The priority of a job whose factors' weighted sum is `sum`: rounded, at least 1, at most
/// [`MAX_PRIORITY`].
fn of_sum(sum: f64) -> u64 {
    (round(sum).max(1.0) as u64).min(MAX_PRIORITY)
}

/// The expansion factor of a job eligible for `waited` with time limit `limit` (0, which the
/// pass never passes, gives 0): see the module's documentation.
pub fn expansion_factor(waited: Dur, limit: Dur) -> f64 {
    if limit.0 == 0 {
        return 0.0;
    }
    let ratio = 1.0 + waited.0 as f64 / limit.0 as f64;
    (ratio.log2() / EXPANSION_DOUBLINGS).min(1.0)
}

/// `x.round()` (halves away from zero) without the C library call that compiles to on
/// baseline x86-64, where a pass made one call per pending job: exact below 2^52 in
/// magnitude (where the truncation and the difference are exact), but for the sign of a
/// zero (-0.3 gives 0.0, not -0.0); `x.round()` beyond.
fn round(x: f64) -> f64 {
    const EXACT: f64 = 4_503_599_627_370_496.0;
    if x.is_nan() || x.abs() >= EXACT {
        return x.round();
    }
    let whole = x as i64 as f64;
    match x - whole {
        f if f >= 0.5 => whole + 1.0,
        f if f <= -0.5 => whole - 1.0,
        _ => whole,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A priority said to stay the same for a while is the same at its last second,
        /// and so, as the priority only grows with age, at every second before (the
        /// fair-share factor fixed, as it is between computations of the factors).
        #[test]
        fn a_steady_priority_is_the_same_to_its_last_second(
            age in prop_oneof![Just(0u32), 1u32..10, 1u32..100_000, Just(u32::MAX)],
            fairshare in prop_oneof![Just(0u32), 1u32..100_000, Just(u32::MAX)],
            job_size in prop_oneof![Just(0u32), 1u32..100_000, Just(u32::MAX)],
            partition in 0u32..10_000,
            qos in 0u32..10_000,
            max_age in prop_oneof![Just(0u64), 1u64..100, 1u64..40_000_000],
            share in 0.0f64..=1.0,
            size in 0.0f64..=1.0,
            part in 0.0f64..=1.0,
            q in 0.0f64..=1.0,
            nice in prop_oneof![Just(0i32), -10_000i32..10_000, Just(i32::MIN), Just(i32::MAX)],
            waited in 0u64..50_000_000,
        ) {
            let w = PriorityWeights {
                age,
                fairshare,
                job_size,
                partition,
                qos,
                expansion: 0,
                max_age: Dur(max_age),
                favor_small: false,
                size_basis: SizeBasis::Resources,
                largest_first_within: Dur(0),
                largest_first_gaps_percent: 0,
            };
            let at = |waited: u64| Factors {
                age: w.age_factor(Dur(waited)),
                fairshare: share,
                job_size: size,
                partition: part,
                qos: q,
                expansion: 0.0,
                nice,
            };
            let p = w.priority(&at(waited));
            let steady = w.steady_for(&at(waited), Dur(waited), p);
            prop_assert_eq!(w.priority_steady(&at(waited), Dur(waited)), (p, steady));
            match steady {
                Some(Dur(0)) => {}
                Some(Dur(d)) => {
                    prop_assert_eq!(w.priority(&at(waited + d - 1)), p);
                    prop_assert_eq!(w.priority(&at(waited + d / 2)), p);
                }
                None => {
                    let later = waited.saturating_add(1_000_000_000);
                    prop_assert_eq!(w.priority(&at(later)), p);
                }
            }
        }

        /// The pass's rounding is the standard library's, halves and extremes included.
        #[test]
        fn round_is_f64_round(
            x in prop_oneof![
                any::<f64>(),
                (-1e6f64..1e6),
                (-100_000i64..100_000).prop_map(|i| i as f64 + 0.5),
                (-100_000i64..100_000).prop_map(|i| i as f64 - 0.5),
                Just(0.499_999_999_999_999_94),
                Just(-0.499_999_999_999_999_94),
                Just(4_503_599_627_370_495.5),
                Just(f64::INFINITY),
                Just(f64::NEG_INFINITY),
            ]
        ) {
            let (got, want) = (round(x), x.round());
            prop_assert!(got == want || (got.is_nan() && want.is_nan()), "{x}: {got} != {want}");
        }
    }

    #[test]
    fn slurm_doc_example_partition_normalisation() {
        // Partition A factor 20, B factor 10, weight 5000 -> 5000 and 2500.
        let w = PriorityWeights {
            age: 0,
            fairshare: 0,
            job_size: 0,
            partition: 5000,
            qos: 0,
            ..Default::default()
        };
        let a = Factors {
            partition: 20.0 / 20.0,
            ..Default::default()
        };
        let b = Factors {
            partition: 10.0 / 20.0,
            ..Default::default()
        };
        assert_eq!(w.priority(&a), 5000);
        assert_eq!(w.priority(&b), 2500);
    }

    #[test]
    fn age_saturates_and_nice_lowers() {
        let w = PriorityWeights::default();
        assert_eq!(w.age_factor(Dur::days(14)), 1.0);
        assert_eq!(w.age_factor(Dur::days(0)), 0.0);
        let base = Factors {
            fairshare: 0.5,
            ..Default::default()
        };
        let nice = Factors { nice: 100, ..base };
        assert_eq!(w.priority(&base) - w.priority(&nice), 100);
        let very_nice = Factors {
            nice: i32::MAX,
            ..base
        };
        assert_eq!(w.priority(&very_nice), 1, "priority never reaches 0 (held)");
    }

    #[test]
    fn expansion_grows_an_eighth_per_doubling_of_wait_plus_limit_over_limit() {
        let f = expansion_factor;
        let hour = Dur::hours(1);
        assert_eq!(f(Dur(0), hour), 0.0);
        assert_eq!(f(hour, hour), 1.0 / 8.0);
        assert_eq!(f(Dur::hours(3), hour), 2.0 / 8.0);
        assert_eq!(f(Dur::hours(255), hour), 1.0);
        assert_eq!(f(Dur::days(365), hour), 1.0, "capped");
        assert_eq!(f(Dur::days(365), Dur(0)), 0.0, "a limit of 0 is no ratio");
        // A day-long job that waited an hour is far behind an hour-long one that did.
        assert!(f(hour, Dur::days(1)) < f(hour, hour) / 10.0);
        let w = PriorityWeights {
            expansion: 8000,
            fairshare: 0,
            ..Default::default()
        };
        let waited = Factors {
            expansion: f(hour, hour),
            ..Default::default()
        };
        assert_eq!(w.priority(&waited), 1000);
        assert_eq!(
            w.steady_for(&waited, hour, 1000),
            Some(Dur(0)),
            "moves every second"
        );
    }

    #[test]
    fn favor_small_inverts_size() {
        let w = PriorityWeights {
            favor_small: true,
            ..Default::default()
        };
        assert_eq!(w.job_size_factor(0.25), 0.75);
    }
}
