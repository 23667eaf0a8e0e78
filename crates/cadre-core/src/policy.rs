//! The policy: every knob of the scheduler, as one versioned TOML document.
//!
//! A policy file starts with `version = 1` and rejects unknown keys everywhere, so a typo is
//! an error rather than a silently ignored setting. Every section is optional; what is left
//! out takes cadre's defaults ([`Policy::default`]). Durations are whole seconds or a number
//! with a unit: `90s`, `30m`, `12h`, `7d`. Presets for comparisons: [`Policy::fifo`],
//! [`Policy::slurm`] and [`Policy::default`] (cadre's own).

use crate::priority::PriorityWeights;
use crate::time::{Dur, secs};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The version of the policy format this build reads.
pub const POLICY_VERSION: u32 = 1;

/// The largest `[priority] largest_first_gaps_percent` a policy may set: a hundred times
/// the gaps (above that, any gap at all would order a partition largest first).
pub const MAX_GAPS_PERCENT: u32 = 10_000;

/// Errors reading a policy document.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("failed to parse policy {origin}: {source}")]
    Syntax {
        origin: String,
        #[source]
        source: toml::de::Error,
    },
    #[error("policy {origin} has version {found}; this build reads version {POLICY_VERSION}")]
    Version { origin: String, found: u32 },
    #[error("policy {origin}: {what}")]
    Invalid { origin: String, what: String },
}

/// All scheduler settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    pub version: u32,
    /// Start jobs strictly in priority order: the first job that cannot start blocks every
    /// job behind it in its partition (no backfill). The `fifo` baseline.
    pub strict_order: bool,
    pub priority: PriorityWeights,
    pub fairshare: FairShareSettings,
    pub billing: BillingWeights,
    pub backfill: BackfillSettings,
    pub preemption: PreemptionSettings,
    pub qos: Vec<QosConfig>,
    pub priority_class: Vec<PriorityClassConfig>,
    pub account: Vec<AccountConfig>,
    /// Queues, cohorts and limits (Kueue's quotas, Volcano's capability, Slurm's GrpTRES and
    /// MaxTRESPerUser).
    pub quotas: crate::quota::QuotaConfig,
    /// Create a missing account (under root) or user association with 1 share on first
    /// submission, instead of refusing the job.
    pub auto_associations: bool,
    /// How placement chooses among the nodes a job fits on.
    pub placement: PlacementRule,
}

/// How placement chooses among feasible nodes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementRule {
    /// Least leftover first (whole idle nodes kept whole), then compactness.
    BestFit,
    /// The node whose free GPUs stay most useful to the task sizes submitted so far (the
    /// idea of FGD, ATC'23), then best fit.
    #[default]
    Fragmentation,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            version: POLICY_VERSION,
            strict_order: false,
            priority: PriorityWeights::default(),
            fairshare: FairShareSettings::default(),
            billing: BillingWeights::default(),
            backfill: BackfillSettings::default(),
            preemption: PreemptionSettings::default(),
            qos: Vec::new(),
            priority_class: Vec::new(),
            account: Vec::new(),
            quotas: crate::quota::QuotaConfig::default(),
            auto_associations: true,
            placement: PlacementRule::Fragmentation,
        }
    }
}

impl Policy {
    /// Strict first-come first-served: submit order, no backfill, no preemption.
    pub fn fifo() -> Policy {
        Policy {
            strict_order: true,
            priority: PriorityWeights {
                age: 1000,
                fairshare: 0,
                job_size: 0,
                partition: 0,
                qos: 0,
                expansion: 0,
                max_age: Dur::days(365),
                favor_small: false,
                size_basis: crate::priority::SizeBasis::Resources,
                largest_first_within: Dur(0),
                largest_first_gaps_percent: 0,
            },
            backfill: BackfillSettings {
                enabled: false,
                starvation_wait: Dur(0),
                drain_longest_first: false,
                ..BackfillSettings::default()
            },
            preemption: PreemptionSettings {
                enabled: false,
                ..PreemptionSettings::default()
            },
            ..Policy::default()
        }
    }

    /// Slurm as commonly deployed: multifactor priority with Fair Tree, EASY-like backfill
    /// over a 500-job test depth reserving for the top job, no preemption.
    pub fn slurm() -> Policy {
        Policy {
            priority: PriorityWeights {
                age: 1000,
                fairshare: 10_000,
                job_size: 1000,
                partition: 1000,
                qos: 1000,
                expansion: 0,
                max_age: Dur::days(7),
                favor_small: false,
                size_basis: crate::priority::SizeBasis::Resources,
                largest_first_within: Dur(0),
                largest_first_gaps_percent: 0,
            },
            backfill: BackfillSettings {
                enabled: true,
                mode: BackfillMode::Easy,
                reservation_depth: 1,
                max_job_test: 500,
                window: Dur::days(1),
                starvation_wait: Dur(0),
                drain_longest_first: false,
            },
            preemption: PreemptionSettings {
                enabled: false,
                ..PreemptionSettings::default()
            },
            // Slurm's PriorityDecayHalfLife default.
            fairshare: FairShareSettings {
                half_life: Dur::days(7),
                ..FairShareSettings::default()
            },
            // Slurm's select/cons_tres picks the best-fitting nodes.
            placement: PlacementRule::BestFit,
            ..Policy::default()
        }
    }

    /// A preset by name: `fifo`, `slurm` or `cadre`.
    pub fn preset(name: &str) -> Option<Policy> {
        match name {
            "fifo" => Some(Policy::fifo()),
            "slurm" => Some(Policy::slurm()),
            "cadre" | "default" => Some(Policy::default()),
            _ => None,
        }
    }

    /// Reads a policy document; `origin` names it in errors (a file path).
    pub fn from_toml(text: &str, origin: &str) -> Result<Policy, PolicyError> {
        #[derive(Deserialize)]
        struct VersionOnly {
            version: Option<u32>,
        }
        let syntax = |source| PolicyError::Syntax {
            origin: origin.to_string(),
            source,
        };
        let probe: toml::Table = toml::from_str(text).map_err(syntax)?;
        let found = VersionOnly::deserialize(probe).map_err(syntax)?.version;
        match found {
            Some(POLICY_VERSION) => {}
            Some(found) => {
                return Err(PolicyError::Version {
                    origin: origin.into(),
                    found,
                });
            }
            None => {
                return Err(PolicyError::Invalid {
                    origin: origin.into(),
                    what: format!("missing `version = {POLICY_VERSION}` at the top"),
                });
            }
        }
        let policy: Policy = toml::from_str(text).map_err(syntax)?;
        policy.validate().map_err(|what| PolicyError::Invalid {
            origin: origin.into(),
            what,
        })?;
        Ok(policy)
    }

    fn validate(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        for q in &self.qos {
            if !seen.insert(q.name.as_str()) {
                return Err(format!("qos `{}` is defined twice", q.name));
            }
        }
        for q in &self.qos {
            if let Some(p) = q.preempt.iter().find(|p| !seen.contains(p.as_str())) {
                return Err(format!(
                    "qos `{}` may preempt `{p}`, which is not defined",
                    q.name
                ));
            }
        }
        let mut classes = std::collections::BTreeSet::new();
        for c in &self.priority_class {
            if !classes.insert(c.name.as_str()) {
                return Err(format!("priority class `{}` is defined twice", c.name));
            }
        }
        let gaps = self.priority.largest_first_gaps_percent;
        if gaps > MAX_GAPS_PERCENT {
            return Err(format!(
                "priority.largest_first_gaps_percent must be at most {MAX_GAPS_PERCENT}, not {gaps}"
            ));
        }
        if self.backfill.enabled && self.backfill.max_job_test == 0 {
            return Err("backfill.max_job_test must be at least 1".into());
        }
        Ok(())
    }

    pub fn qos(&self, name: &str) -> Option<&QosConfig> {
        self.qos.iter().find(|q| q.name == name)
    }

    pub fn priority_class(&self, name: &str) -> Option<&PriorityClassConfig> {
        self.priority_class.iter().find(|c| c.name == name)
    }
}

/// Which fair-share algorithm ranks users.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FairShareMode {
    /// Slurm's Fair Tree (the default since Slurm 19.05).
    #[default]
    FairTree,
    /// Classic `2^(-U/S)` (Slurm `PriorityFlags=NO_FAIR_TREE`).
    Classic,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FairShareSettings {
    pub algorithm: FairShareMode,
    /// Usage halves after this long (Slurm `PriorityDecayHalfLife`); 0 = never decays.
    #[serde(with = "secs")]
    pub half_life: Dur,
    /// How often fair-share factors are recomputed (Slurm `PriorityCalcPeriod`).
    #[serde(with = "secs")]
    pub calc_period: Dur,
    /// Classic fair-share's dampening factor (Slurm `FairShareDampeningFactor`), at least 1.
    pub dampening: std::num::NonZeroU32,
}

impl Default for FairShareSettings {
    /// cadre's defaults: Fair Tree with usage halving every day. Slurm's default half-life
    /// (7 days, the `slurm` preset's) remembers a team's burst for weeks; a day lets the
    /// factor follow who is using the cluster now. On the Philly trace at 512 GPUs this,
    /// with the fair-share weight of [`PriorityWeights::default`], cut the mean wait from
    /// 23,229 s to 16,304 s (docs/simulator.md, experiment 1).
    fn default() -> Self {
        FairShareSettings {
            algorithm: FairShareMode::FairTree,
            half_life: Dur::days(1),
            calc_period: Dur::minutes(5),
            dampening: std::num::NonZeroU32::MIN,
        }
    }
}

/// What one second of use costs in billing units (Slurm `TRESBillingWeights`, summed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BillingWeights {
    /// Per GPU (whole; a shared GPU bills its share).
    pub gpu: f64,
    /// Per CPU core.
    pub cpu: f64,
    /// Per GiB of memory.
    pub mem_gib: f64,
    /// Per-model GPU weights that replace `gpu` for that model (`h100 = 2.0`).
    pub gpu_models: BTreeMap<String, f64>,
}

impl Default for BillingWeights {
    /// A GPU bills 1; 16 cores bill as much as one GPU, so CPU-only work is not free.
    fn default() -> Self {
        BillingWeights {
            gpu: 1.0,
            cpu: 1.0 / 16.0,
            mem_gib: 0.0,
            gpu_models: BTreeMap::new(),
        }
    }
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackfillMode {
    /// Reservations for the top `reservation_depth` blocked jobs only.
    #[default]
    Easy,
    /// A reservation for every blocked job tested.
    Conservative,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackfillSettings {
    pub enabled: bool,
    pub mode: BackfillMode,
    /// With `easy`: how many of the top blocked jobs get reservations.
    pub reservation_depth: u32,
    /// Pending jobs considered per pass (Slurm `bf_max_job_test`).
    pub max_job_test: u32,
    /// How far ahead reservations are planned (Slurm `bf_window`).
    #[serde(with = "secs")]
    pub window: Dur,
    /// A job eligible for at least this long is starving. Each partition's longest-waiting
    /// starving job is considered first within its partition tier and priority class (after
    /// the jobs that preempted others) and, if it cannot start, gets a reservation of its
    /// own on top of `reservation_depth`, whatever its priority: a large job with a low
    /// priority then waits until what it needs is free, not while smaller jobs keep
    /// backfilling around it. Jobs that the last pass found never fit, or held back by a
    /// limit (a quota, an array's `%N`), are not marked; neither is any job under
    /// `strict_order`. Eligibility counts from the controller's start after a restart, as
    /// age does. 0 turns it off (the `slurm` and `fifo` presets).
    #[serde(with = "secs")]
    pub starvation_wait: Dur,
    /// Once work has stopped arriving at a partition (under a tenth of its GPUs' capacity,
    /// averaged over a day, counting the time limits at the share of them that the jobs
    /// that ended ran), a pending job whose time limit is at least the time the rest
    /// of its backlog needs (the other pending jobs' and the running jobs' work by time
    /// limits, over the capacity left) is marked as a starving job is, so that the backlog
    /// ends as soon as it can instead of with that job running alone. GPU jobs only; not
    /// under `strict_order`; the rate is known only a day after the controller starts.
    /// Off in the `slurm` and `fifo` presets.
    pub drain_longest_first: bool,
}

impl BackfillSettings {
    /// Whether a job eligible for `waited` is starving by `starvation_wait`.
    pub fn starving_after(&self, waited: Dur) -> bool {
        self.starvation_wait.0 > 0 && waited >= self.starvation_wait
    }
}

impl Default for BackfillSettings {
    fn default() -> Self {
        BackfillSettings {
            enabled: true,
            mode: BackfillMode::Easy,
            reservation_depth: 1,
            max_job_test: 100_000,
            window: Dur::days(14),
            starvation_wait: Dur::days(28),
            drain_longest_first: true,
        }
    }
}

/// What happens to a preempted job.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PreemptMode {
    /// Back to the queue (if the job allows requeue; cancelled otherwise).
    #[default]
    Requeue,
    Cancel,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PreemptionSettings {
    pub enabled: bool,
    pub mode: PreemptMode,
    /// Time a victim gets between the signal and the kill (Slurm `GraceTime`).
    #[serde(with = "secs")]
    pub grace: Dur,
    /// A job is not preempted before it has run this long (Slurm `PreemptExemptTime`).
    #[serde(with = "secs")]
    pub exempt_time: Dur,
    /// A partition of a higher `priority_tier` may preempt jobs of lower tiers
    /// (Slurm `preempt/partition_prio`).
    pub partition_tier: bool,
    /// A queue held back because others in its cohort borrow its quota takes it back by
    /// preempting their jobs (Kueue `reclaimWithinCohort: Any`).
    pub reclaim_within_cohort: bool,
}

impl Default for PreemptionSettings {
    fn default() -> Self {
        PreemptionSettings {
            enabled: true,
            mode: PreemptMode::Requeue,
            grace: Dur::secs(60),
            exempt_time: Dur::secs(0),
            partition_tier: true,
            reclaim_within_cohort: true,
        }
    }
}

/// A quality of service (Slurm QOS).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosConfig {
    pub name: String,
    /// The QOS priority factor (normalised over all QOS).
    #[serde(default)]
    pub priority: u32,
    /// QOS whose jobs this QOS may preempt (Slurm `Preempt=`).
    #[serde(default)]
    pub preempt: Vec<String>,
}

/// A priority class (Kubernetes `PriorityClass`): higher values schedule first, and a
/// `preempting` class may preempt jobs of lower classes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityClassConfig {
    pub name: String,
    pub value: i32,
    #[serde(default = "yes")]
    pub preempting: bool,
}

fn yes() -> bool {
    true
}

/// An account of the fair-share tree and the users under it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountConfig {
    pub name: String,
    /// The parent account; `root` if unset.
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default = "one")]
    pub shares: u32,
    /// Users and their shares.
    #[serde(default)]
    pub users: BTreeMap<String, u32>,
}

fn one() -> u32 {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_versioned_policy_is_the_default() {
        assert_eq!(
            Policy::from_toml("version = 1\n", "t.toml").unwrap(),
            Policy::default()
        );
    }

    #[test]
    fn expansion_is_read_from_the_priority_section_and_off_by_default() {
        let p = Policy::from_toml("version = 1\n[priority]\nexpansion = 10000\n", "t.toml");
        assert_eq!(p.unwrap().priority.expansion, 10_000);
        assert_eq!(Policy::default().priority.expansion, 0);
        let err = Policy::from_toml("version = 1\n[priority]\nexpansion = -1\n", "t.toml");
        assert!(err.unwrap_err().to_string().contains("expansion"));
    }

    #[test]
    fn the_gaps_percent_is_read_and_bounded() {
        let text = "version = 1\n[priority]\nlargest_first_gaps_percent = 200\n";
        let p = Policy::from_toml(text, "t.toml").unwrap();
        assert_eq!(p.priority.largest_first_gaps_percent, 200);
        let text = "version = 1\n[priority]\nlargest_first_gaps_percent = 10001\n";
        assert_eq!(
            Policy::from_toml(text, "t.toml").unwrap_err().to_string(),
            "policy t.toml: priority.largest_first_gaps_percent must be at most 10000, not 10001"
        );
        let text = "version = 1\n[priority]\nlargest_first_gaps_percent = -5\n";
        let msg = Policy::from_toml(text, "t.toml").unwrap_err().to_string();
        assert!(msg.contains("largest_first_gaps_percent"), "{msg}");
    }

    #[test]
    fn unknown_keys_and_versions_are_refused_with_their_place() {
        let err =
            Policy::from_toml("version = 1\n[backfill]\nbf_interval = 3\n", "p.toml").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("p.toml") && msg.contains("bf_interval"),
            "{msg}"
        );
        assert!(msg.contains("line 3"), "{msg}");
        let err = Policy::from_toml("version = 2\n", "p.toml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy p.toml has version 2; this build reads version 1"
        );
        let err = Policy::from_toml("[backfill]\n", "p.toml").unwrap_err();
        assert!(err.to_string().contains("missing `version = 1`"));
    }

    #[test]
    fn durations_take_units() {
        let p = Policy::from_toml(
            "version = 1\n[fairshare]\nhalf_life = \"2d\"\ncalc_period = 30\n[preemption]\ngrace = \"5m\"\n",
            "p",
        )
        .unwrap();
        assert_eq!(p.fairshare.half_life, Dur::days(2));
        assert_eq!(p.fairshare.calc_period, Dur(30));
        assert_eq!(p.preemption.grace, Dur(300));
        assert!(Policy::from_toml("version = 1\n[preemption]\ngrace = \"5y\"\n", "p").is_err());
    }

    #[test]
    fn qos_preempting_an_undefined_qos_is_refused() {
        let text = "version = 1\n[[qos]]\nname = \"high\"\npreempt = [\"scavenger\"]\n";
        let err = Policy::from_toml(text, "p").unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy p: qos `high` may preempt `scavenger`, which is not defined"
        );
    }

    #[test]
    fn presets_by_name() {
        assert!(Policy::preset("fifo").unwrap().strict_order);
        assert_eq!(Policy::preset("slurm").unwrap().backfill.max_job_test, 500);
        assert!(Policy::preset("lottery").is_none());
    }
}
