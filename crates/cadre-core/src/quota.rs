//! Queues and quotas: whether a gang may start now as far as quotas and per-user limits go,
//! and the running count those decisions are made against.
//!
//! This module knows nothing about nodes, placement, priorities or time; the scheduler asks
//! it "may this whole gang be admitted?" and tells it when a gang starts and when it ends.
//! Fair ordering between queues (Volcano weights) and the choice of preemption victims are
//! the scheduler's; this module only keeps the numbers they need.
//!
//! # Given
//!
//! A [`QuotaConfig`] (part of the policy TOML) with
//! - **queues** (Kueue ClusterQueue / Volcano Queue): a `nominal` quota; an optional flat
//!   `cohort` whose members borrow each other's unused quota; a `borrowing_limit` (at most
//!   this much above nominal); a `lending_limit` (at most this much of the nominal quota is
//!   lent; the rest, `nominal - lending_limit`, is a reserve no other queue can use); a
//!   `capability` (Volcano's hard cap on the queue's total use, borrowing included); a
//!   `weight` (stored for fair ordering, unused here); per-user limits `max_per_user`
//!   (Slurm QOS MaxTRESPerUser) and `max_running_jobs_per_user` (QOS MaxJobsPerUser); and the
//!   `accounts` whose jobs go to the queue by default;
//! - **accounts** (Slurm associations): `grp` (GrpTRES, the account's total),
//!   `max_per_user` (GrpTRES of each user's association under the account) and
//!   `max_running_jobs_per_user` (MaxJobs of each user's association).
//!
//! - **namespaces** (Kubernetes ResourceQuota objects): `hard`, a namespace's total use
//!   by the running gangs of jobs that name it (`JobSpec::namespace`), whatever their
//!   queue or account; a namespace may have several, each checked, last of all.
//!
//! Amounts are [`Amounts`] (cpus, mem_mib, gpu_milli, nics). In a limit ([`QuotaAmounts`])
//! each component is optional: **a component that is not written is not limited** (Slurm:
//! a TRES not named in a limit is unlimited). In a queue's `nominal`, a component that is
//! not written is **not managed** by the queue: its use is unlimited (unless `capability`
//! caps it), it is never borrowed or lent, and `borrowing_limit` / `lending_limit` may not
//! name it. A component written as 0 is managed with no quota of its own: the queue can use
//! it only by borrowing. GPUs may be written as whole GPUs (`gpus = 64`) or in thousandths
//! (`gpu_milli = 500`); memory as `mem_mib` or `mem_gib`.
//!
//! # Decided
//!
//! Which queue a gang counts against: the queue the job names if any, else the queue its
//! account is mapped to, else none (then only the account's limits apply). A queue's
//! `accounts` list is that mapping only; it does not restrict who may name the queue.
//!
//! Whether a gang of total `want` may be admitted now ([`QuotaBook::check`]). Quota counts
//! whole gangs: `want` is the sum over all tasks, and the gang is admitted whole or not at
//! all. With `u` the queue's use, `n` its nominal, `l` its lending limit (default `n`),
//! `g = n - l` its reserve, `b` its borrowing limit, per managed component (Kueue semantics):
//! - `u + want <= n + b` (borrowing limit, when set);
//! - the cohort: each member `p` puts `l_p` into a shared pool and draws
//!   `max(0, u_p - g_p)` from it; the gang's extra draw
//!   `max(0, u + want - g) - max(0, u - g)` must fit in what the pool has left. Equivalently,
//!   the pool open to borrowers is the sum over members of `min(unused nominal, lending
//!   limit)` minus what other members already borrow. A queue in no cohort is a cohort of
//!   one, which reduces to `u + want <= n`.
//!
//! and per component whether managed or not: `u + want <= capability`. Then the per-user
//! and per-account limits. The first limit hit, in the order of [`QuotaBlock`]'s variants,
//! is reported.
//!
//! A queue *borrows* what it uses above its nominal quota ([`QuotaBook::borrowed`]). When a
//! queue's own nominal quota is in use by borrowers (it lent it while idle), the check fails
//! with [`QuotaBlock::CohortExhausted`] whose `reclaimable` says how much of its nominal is
//! lent out; [`QuotaBook::reclaimable`] and [`QuotaBook::borrowers_in_cohort`] let the
//! scheduler find victims among borrowing queues (Kueue's reclaimWithinCohort). To test a
//! preemption plan, clone the book, release the victims and check again.
//!
//! # Always holds
//!
//! For a book changed only through [`QuotaBook::admit`] and [`QuotaBook::release`] (and
//! [`QuotaBook::restore`] of gangs the limits admit) ([`QuotaBook::check_invariants`]):
//! every queue within nominal + borrowing limit and within capability; in every cohort, the
//! draws within the pool (so the cohort's total use within its total nominal quota); every
//! per-user, per-account and job-count limit met; and every counter equal to the sum over
//! the admitted gangs. A gang restored above a limit (a job found running after a restart
//! under a lowered quota) leaves only the last of these ([`QuotaBook::check_counts`]) until
//! it is released. Iteration is in config order or BTreeMap order; nothing here reads a
//! clock.

use crate::resources::{Amounts, MILLI_PER_GPU};
use foldhash::fast::RandomState;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

const N: usize = 4;
type Vec4 = [u64; N];
type Lim = [Option<u64>; N];

fn to4(a: &Amounts) -> Vec4 {
    [a.cpus, a.mem_mib, a.gpu_milli, a.nics]
}

fn from4(v: Vec4) -> Amounts {
    Amounts {
        cpus: v[0],
        mem_mib: v[1],
        gpu_milli: v[2],
        nics: v[3],
    }
}

fn add4(a: &mut Vec4, b: &Vec4) {
    for c in 0..N {
        a[c] = a[c].saturating_add(b[c]);
    }
}

fn sub4(a: &mut Vec4, b: &Vec4) {
    for c in 0..N {
        debug_assert!(a[c] >= b[c], "quota counter underflow");
        a[c] = a[c].saturating_sub(b[c]);
    }
}

/// One component of [`Amounts`], as quota messages name it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Cpus,
    Memory,
    Gpus,
    Nics,
}

impl Resource {
    pub const ALL: [Resource; N] = [
        Resource::Cpus,
        Resource::Memory,
        Resource::Gpus,
        Resource::Nics,
    ];

    fn ix(self) -> usize {
        match self {
            Resource::Cpus => 0,
            Resource::Memory => 1,
            Resource::Gpus => 2,
            Resource::Nics => 3,
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resource::Cpus => "cpus",
            Resource::Memory => "memory",
            Resource::Gpus => "gpus",
            Resource::Nics => "nics",
        })
    }
}

/// An amount of one resource, displayed in its unit (GPUs as whole GPUs, decimals if shared).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Qty(pub Resource, pub u64);

impl fmt::Display for Qty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Qty(r, v) = *self;
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        match r {
            Resource::Cpus => write!(f, "{v} cpu{}", plural(v)),
            Resource::Memory => write!(f, "{v} MiB"),
            Resource::Nics => write!(f, "{v} nic{}", plural(v)),
            Resource::Gpus => {
                let per = u64::from(MILLI_PER_GPU);
                if v % per == 0 {
                    write!(f, "{} gpu{}", v / per, plural(v / per))
                } else {
                    let frac = format!("{:03}", v % per);
                    write!(f, "{}.{} gpus", v / per, frac.trim_end_matches('0'))
                }
            }
        }
    }
}

fn qty(r: &Resource, v: &u64) -> Qty {
    Qty(*r, *v)
}

fn after(r: &Resource, used: &u64, want: &u64) -> Qty {
    Qty(*r, used.saturating_add(*want))
}

fn over(r: &Resource, used: &u64, want: &u64, limit: &u64) -> Qty {
    Qty(*r, used.saturating_add(*want).saturating_sub(*limit))
}

fn fmt_amounts(a: &Amounts) -> String {
    let v = to4(a);
    Resource::ALL
        .iter()
        .map(|r| Qty(*r, v[r.ix()]).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A limit or quota as written in the config: each component optional (see the module doc
/// for what an unwritten component means). GPUs in thousandths, like [`Amounts`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "QuotaAmountsToml", into = "QuotaAmountsToml")]
pub struct QuotaAmounts {
    pub cpus: Option<u64>,
    pub mem_mib: Option<u64>,
    pub gpu_milli: Option<u64>,
    pub nics: Option<u64>,
}

impl QuotaAmounts {
    /// Nothing limited.
    pub const UNLIMITED: QuotaAmounts = QuotaAmounts {
        cpus: None,
        mem_mib: None,
        gpu_milli: None,
        nics: None,
    };

    /// Only whole GPUs limited.
    pub fn gpus(n: u64) -> QuotaAmounts {
        QuotaAmounts {
            gpu_milli: Some(n.saturating_mul(u64::from(MILLI_PER_GPU))),
            ..QuotaAmounts::UNLIMITED
        }
    }

    fn lim(&self) -> Lim {
        [self.cpus, self.mem_mib, self.gpu_milli, self.nics]
    }
}

/// Every component limited to the given amount.
impl From<Amounts> for QuotaAmounts {
    fn from(a: Amounts) -> QuotaAmounts {
        QuotaAmounts {
            cpus: Some(a.cpus),
            mem_mib: Some(a.mem_mib),
            gpu_milli: Some(a.gpu_milli),
            nics: Some(a.nics),
        }
    }
}

/// The TOML shape of [`QuotaAmounts`]: `{ cpus = 512, mem_gib = 4096, gpus = 64 }`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaAmountsToml {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cpus: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mem_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mem_gib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gpus: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gpu_milli: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nics: Option<u64>,
}

fn one_of(
    exact: Option<u64>,
    exact_name: &'static str,
    scaled: Option<u64>,
    scaled_name: &'static str,
    factor: u64,
) -> Result<Option<u64>, QuotaError> {
    match (exact, scaled) {
        (Some(_), Some(_)) => Err(QuotaError::AmountTwice {
            first: exact_name,
            second: scaled_name,
        }),
        (Some(v), None) => Ok(Some(v)),
        (None, Some(v)) => v
            .checked_mul(factor)
            .map(Some)
            .ok_or(QuotaError::AmountTooLarge {
                field: scaled_name,
                value: v,
            }),
        (None, None) => Ok(None),
    }
}

impl TryFrom<QuotaAmountsToml> for QuotaAmounts {
    type Error = QuotaError;
    fn try_from(t: QuotaAmountsToml) -> Result<QuotaAmounts, QuotaError> {
        Ok(QuotaAmounts {
            cpus: t.cpus,
            mem_mib: one_of(t.mem_mib, "mem_mib", t.mem_gib, "mem_gib", 1024)?,
            gpu_milli: one_of(
                t.gpu_milli,
                "gpu_milli",
                t.gpus,
                "gpus",
                u64::from(MILLI_PER_GPU),
            )?,
            nics: t.nics,
        })
    }
}

impl From<QuotaAmounts> for QuotaAmountsToml {
    fn from(q: QuotaAmounts) -> QuotaAmountsToml {
        let per = u64::from(MILLI_PER_GPU);
        let (gpus, gpu_milli) = match q.gpu_milli {
            Some(m) if m % per == 0 => (Some(m / per), None),
            other => (None, other),
        };
        QuotaAmountsToml {
            cpus: q.cpus,
            mem_mib: q.mem_mib,
            mem_gib: None,
            gpus,
            gpu_milli,
            nics: q.nics,
        }
    }
}

/// The quota section of the policy file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuotaConfig {
    pub queues: Vec<QueueConfig>,
    pub accounts: Vec<AccountConfig>,
    /// Hard limits on the jobs of a namespace (Kubernetes ResourceQuota objects).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<NamespaceQuotaConfig>,
}

/// One namespace quota (a Kubernetes ResourceQuota): every running gang of the namespace
/// counts against `hard`, whatever its queue or account. A namespace may have several;
/// each is checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceQuotaConfig {
    pub namespace: String,
    /// The quota's own name (the ResourceQuota's), which messages give.
    pub name: String,
    /// Unwritten components are not limited.
    pub hard: QuotaAmounts,
}

impl QuotaConfig {
    /// Whether any queue, account limit or namespace quota is configured (without, a
    /// scheduler need not ask the book).
    pub fn limits_anything(&self) -> bool {
        !self.queues.is_empty() || !self.accounts.is_empty() || !self.namespaces.is_empty()
    }
}

fn default_weight() -> u32 {
    1
}

/// One queue (Kueue ClusterQueue, Volcano Queue).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    pub name: String,
    /// Flat cohort the queue borrows from and lends to; `None`: it uses its nominal only.
    #[serde(default)]
    pub cohort: Option<String>,
    /// Kueue nominalQuota. Unwritten components are not managed by this queue.
    pub nominal: QuotaAmounts,
    /// At most this much above `nominal`. `None` (or an unwritten component): the queue may
    /// borrow all the cohort has unused. Only in a cohort, only on managed components.
    #[serde(default)]
    pub borrowing_limit: Option<QuotaAmounts>,
    /// At most this much of `nominal` is lent; `nominal - lending_limit` is kept for this
    /// queue alone. `None` (or an unwritten component): all unused nominal quota is lent.
    /// Only in a cohort, only on managed components, never above `nominal`.
    #[serde(default)]
    pub lending_limit: Option<QuotaAmounts>,
    /// Volcano capability: hard cap on the queue's total use, borrowing included. Never
    /// below `nominal`.
    #[serde(default)]
    pub capability: Option<QuotaAmounts>,
    /// Volcano queue weight (1..), kept for the scheduler's fair ordering.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Accounts whose jobs go to this queue when they name no queue.
    #[serde(default)]
    pub accounts: Vec<String>,
    /// Slurm QOS MaxTRESPerUser: one user's total use in this queue.
    #[serde(default)]
    pub max_per_user: Option<QuotaAmounts>,
    /// Slurm QOS MaxJobsPerUser: one user's running gangs in this queue.
    #[serde(default)]
    pub max_running_jobs_per_user: Option<u32>,
}

/// Limits of one account (Slurm association), whatever queue its jobs run in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountConfig {
    pub name: String,
    /// Slurm GrpTRES: the account's total use.
    #[serde(default)]
    pub grp: Option<QuotaAmounts>,
    /// GrpTRES of each user's association under this account: one user's total use.
    #[serde(default)]
    pub max_per_user: Option<QuotaAmounts>,
    /// MaxJobs of each user's association under this account: one user's running gangs.
    #[serde(default)]
    pub max_running_jobs_per_user: Option<u32>,
}

/// Errors building a [`QuotaBook`] or releasing a gang it does not hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    #[error("queue `{name}` is defined twice")]
    DuplicateQueue { name: String },
    #[error("account `{name}` has limits defined twice")]
    DuplicateAccount { name: String },
    #[error("namespace `{namespace}` has quota `{name}` defined twice")]
    DuplicateNamespaceQuota { namespace: String, name: String },
    #[error("account `{account}` is mapped to two queues, `{first}` and `{second}`")]
    AccountMappedTwice {
        account: String,
        first: String,
        second: String,
    },
    #[error("a {what} name is empty")]
    EmptyName { what: &'static str },
    #[error("queue `{queue}` has weight 0; weights start at 1")]
    ZeroWeight { queue: String },
    #[error("queue `{queue}` sets {limit} but is in no cohort; only cohort members borrow or lend")]
    LimitWithoutCohort { queue: String, limit: &'static str },
    #[error(
        "queue `{queue}` sets {limit} for {resource}, which its nominal quota does not cover; \
         write a nominal {resource} quota or drop the limit"
    )]
    LimitOnUnmanagedResource {
        queue: String,
        limit: &'static str,
        resource: Resource,
    },
    #[error(
        "queue `{queue}` has a lending limit of {} above its nominal quota of {}",
        qty(.resource, .lending),
        qty(.resource, .nominal)
    )]
    LendingAboveNominal {
        queue: String,
        resource: Resource,
        lending: u64,
        nominal: u64,
    },
    #[error(
        "queue `{queue}` has a capability of {} below its nominal quota of {}",
        qty(.resource, .capability),
        qty(.resource, .nominal)
    )]
    CapabilityBelowNominal {
        queue: String,
        resource: Resource,
        capability: u64,
        nominal: u64,
    },
    #[error("quota amount sets both `{first}` and `{second}`; write only one")]
    AmountTwice {
        first: &'static str,
        second: &'static str,
    },
    #[error("quota amount `{field} = {value}` is too large")]
    AmountTooLarge { field: &'static str, value: u64 },
    #[error(
        "cannot release a gang of {} for user `{user}` of account `{account}` in {queue}: \
         no such gang is admitted",
        fmt_amounts(.amounts)
    )]
    NotAdmitted {
        /// `queue `name`` or `no queue`.
        queue: String,
        account: String,
        user: String,
        amounts: Amounts,
    },
    #[error("queue index {index} does not belong to this quota book")]
    UnknownQueueIndex { index: usize },
}

/// Why a gang may not be admitted now. [`QuotaBlock::reason`] gives the Slurm pending
/// reason; the message says which limit and by how much. Checks run in variant order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuotaBlock {
    #[error("queue index {index} does not belong to this quota book")]
    UnknownQueue { index: usize },
    /// Adding the gang would overflow a 64-bit counter (a nonsensical request).
    #[error("a gang of {} overflows the quota counters", qty(.resource, .want))]
    Overflow { resource: Resource, want: u64 },
    #[error(
        "user `{user}` already runs {limit} jobs in queue `{queue}`, its max_running_jobs_per_user"
    )]
    QueueUserJobs {
        queue: String,
        user: String,
        limit: u32,
    },
    #[error(
        "user `{user}` would use {} in queue `{queue}`, above its max_per_user of {} by {}",
        after(.resource, .used, .want), qty(.resource, .limit), over(.resource, .used, .want, .limit)
    )]
    QueueUserLimit {
        queue: String,
        user: String,
        resource: Resource,
        limit: u64,
        used: u64,
        want: u64,
    },
    #[error(
        "queue `{queue}` would use {}, above its capability of {} by {}",
        after(.resource, .used, .want), qty(.resource, .limit), over(.resource, .used, .want, .limit)
    )]
    QueueCapability {
        queue: String,
        resource: Resource,
        limit: u64,
        used: u64,
        want: u64,
    },
    #[error(
        "queue `{queue}` would use {}, above its nominal quota of {} plus borrowing limit of {} by {}",
        after(.resource, .used, .want), qty(.resource, .nominal), qty(.resource, .borrowing_limit),
        over(.resource, .used, .want, &.nominal.saturating_add(*.borrowing_limit))
    )]
    QueueBorrowingLimit {
        queue: String,
        resource: Resource,
        nominal: u64,
        borrowing_limit: u64,
        used: u64,
        want: u64,
    },
    /// A queue in no cohort asks for more than its nominal quota.
    #[error(
        "queue `{queue}` would use {}, above its nominal quota of {} by {} (it is in no cohort, so it cannot borrow)",
        after(.resource, .used, .want), qty(.resource, .nominal), over(.resource, .used, .want, .nominal)
    )]
    QueueNominal {
        queue: String,
        resource: Resource,
        nominal: u64,
        used: u64,
        want: u64,
    },
    /// The cohort's shared pool has too little left. `reclaimable` is how much of the
    /// queue's own nominal quota other queues are borrowing (what preempting borrowers
    /// could give back).
    #[error(
        "queue `{queue}` needs {} from the shared quota of cohort `{cohort}`, which has {} left (short by {}); \
         {} of the queue's own nominal quota is lent to other queues",
        qty(.resource, .need), qty(.resource, .available),
        qty(.resource, &.need.saturating_sub(*.available)), qty(.resource, .reclaimable)
    )]
    CohortExhausted {
        queue: String,
        cohort: String,
        resource: Resource,
        need: u64,
        available: u64,
        reclaimable: u64,
    },
    #[error(
        "account `{account}` would use {}, above its grp limit of {} by {}",
        after(.resource, .used, .want), qty(.resource, .limit), over(.resource, .used, .want, .limit)
    )]
    AccountGrp {
        account: String,
        resource: Resource,
        limit: u64,
        used: u64,
        want: u64,
    },
    #[error(
        "user `{user}` would use {} in account `{account}`, above its max_per_user of {} by {}",
        after(.resource, .used, .want), qty(.resource, .limit), over(.resource, .used, .want, .limit)
    )]
    AccountUserLimit {
        account: String,
        user: String,
        resource: Resource,
        limit: u64,
        used: u64,
        want: u64,
    },
    #[error(
        "user `{user}` already runs {limit} jobs in account `{account}`, its max_running_jobs_per_user"
    )]
    AccountUserJobs {
        account: String,
        user: String,
        limit: u32,
    },
    /// Kubernetes' wording for a ResourceQuota, with cadre's units.
    #[error(
        "exceeded quota: {quota} in namespace {namespace}, requested: {}, used: {}, limited: {}",
        qty(.resource, .want), qty(.resource, .used), qty(.resource, .limit)
    )]
    NamespaceQuota {
        namespace: String,
        quota: String,
        resource: Resource,
        limit: u64,
        used: u64,
        want: u64,
    },
}

impl QuotaBlock {
    /// The Slurm pending reason (`squeue` REASON column). Queue limits map to the QOS
    /// reasons (a queue plays the part of a QOS), account limits to the association ones;
    /// GPUs and NICs are GRES. A cohort short of quota has no Slurm counterpart:
    /// `CohortQuotaExhausted`.
    pub fn reason(&self) -> &'static str {
        use Resource::*;
        match self {
            QuotaBlock::Overflow { .. } => "AccountingPolicy",
            QuotaBlock::UnknownQueue { .. } => "InvalidQOS",
            QuotaBlock::QueueUserJobs { .. } => "QOSMaxJobsPerUserLimit",
            QuotaBlock::QueueUserLimit { resource, .. } => match resource {
                Cpus => "QOSMaxCpuPerUserLimit",
                Memory => "QOSMaxMemoryPerUser",
                Gpus | Nics => "QOSMaxGRESPerUser",
            },
            QuotaBlock::QueueCapability { resource, .. }
            | QuotaBlock::QueueBorrowingLimit { resource, .. }
            | QuotaBlock::QueueNominal { resource, .. } => match resource {
                Cpus => "QOSGrpCpuLimit",
                Memory => "QOSGrpMemLimit",
                Gpus | Nics => "QOSGrpGRES",
            },
            QuotaBlock::CohortExhausted { .. } => "CohortQuotaExhausted",
            QuotaBlock::AccountGrp { resource, .. }
            | QuotaBlock::AccountUserLimit { resource, .. } => match resource {
                Cpus => "AssocGrpCpuLimit",
                Memory => "AssocGrpMemLimit",
                Gpus | Nics => "AssocGrpGRES",
            },
            QuotaBlock::AccountUserJobs { .. } => "AssocMaxJobsLimit",
            QuotaBlock::NamespaceQuota { .. } => "NamespaceQuota",
        }
    }
}

/// A broken invariant of a [`QuotaBook`] (a bug, never a user error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuotaViolation {
    #[error(
        "queue `{queue}` uses {}, above its nominal quota of {} plus borrowing limit of {}",
        qty(.resource, .used), qty(.resource, .nominal), qty(.resource, .borrowing_limit)
    )]
    AboveBorrowingLimit {
        queue: String,
        resource: Resource,
        used: u64,
        nominal: u64,
        borrowing_limit: u64,
    },
    #[error("queue `{queue}` uses {}, above its capability of {}", qty(.resource, .used), qty(.resource, .capability))]
    AboveCapability {
        queue: String,
        resource: Resource,
        used: u64,
        capability: u64,
    },
    #[error("queue `{queue}` (in no cohort) uses {}, above its nominal quota of {}", qty(.resource, .used), qty(.resource, .nominal))]
    AboveNominal {
        queue: String,
        resource: Resource,
        used: u64,
        nominal: u64,
    },
    #[error(
        "cohort `{cohort}` members draw {} from a shared pool of {}",
        qty(.resource, .drawn), qty(.resource, .pool)
    )]
    CohortOverdrawn {
        cohort: String,
        resource: Resource,
        drawn: u64,
        pool: u64,
    },
    #[error("cohort `{cohort}` uses {}, above its total nominal quota of {}", qty(.resource, .used), qty(.resource, .nominal))]
    CohortAboveNominal {
        cohort: String,
        resource: Resource,
        used: u64,
        nominal: u64,
    },
    #[error("user `{user}` uses {} in queue `{queue}`, above its max_per_user of {}", qty(.resource, .used), qty(.resource, .limit))]
    QueueUserAboveLimit {
        queue: String,
        user: String,
        resource: Resource,
        used: u64,
        limit: u64,
    },
    #[error("user `{user}` runs {jobs} jobs in queue `{queue}`, above its limit of {limit}")]
    QueueUserJobsAboveLimit {
        queue: String,
        user: String,
        jobs: u64,
        limit: u32,
    },
    #[error("account `{account}` uses {}, above its grp limit of {}", qty(.resource, .used), qty(.resource, .limit))]
    AccountAboveGrp {
        account: String,
        resource: Resource,
        used: u64,
        limit: u64,
    },
    #[error("user `{user}` uses {} in account `{account}`, above its max_per_user of {}", qty(.resource, .used), qty(.resource, .limit))]
    AccountUserAboveLimit {
        account: String,
        user: String,
        resource: Resource,
        used: u64,
        limit: u64,
    },
    #[error("user `{user}` runs {jobs} jobs in account `{account}`, above its limit of {limit}")]
    AccountUserJobsAboveLimit {
        account: String,
        user: String,
        jobs: u64,
        limit: u32,
    },
    #[error("namespace `{namespace}` uses {}, above its quota `{quota}` of {}", qty(.resource, .used), qty(.resource, .limit))]
    NamespaceAboveQuota {
        namespace: String,
        quota: String,
        resource: Resource,
        used: u64,
        limit: u64,
    },
    #[error(
        "{what} counts {} in {counted_jobs} jobs, but its admitted gangs sum to {} in {admitted_jobs} jobs",
        fmt_amounts(.counted), fmt_amounts(.admitted)
    )]
    CountMismatch {
        what: String,
        counted: Amounts,
        counted_jobs: u64,
        admitted: Amounts,
        admitted_jobs: u64,
    },
}

/// A queue of a [`QuotaBook`]: its position in the config.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueIx(usize);

impl QueueIx {
    pub fn index(self) -> usize {
        self.0
    }
}

/// A gang may be admitted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Admit {
    /// The queue the gang counts against (see the module doc), if any.
    pub queue: Option<QueueIx>,
    /// How much of `want` lies above the queue's nominal quota, i.e. is borrowed from the
    /// cohort. Zero without a queue.
    pub borrowed: Amounts,
}

/// One line of `cadre queues`: a queue's quota and use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRow {
    pub queue: String,
    pub cohort: Option<String>,
    pub weight: u32,
    pub nominal: QuotaAmounts,
    pub used: Amounts,
    /// Use above nominal, on managed components.
    pub borrowed: Amounts,
    /// What other members could borrow from this queue now: min(unused nominal, lending
    /// limit), on managed components.
    pub lendable: Amounts,
    pub running_jobs: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Usage {
    amounts: Vec4,
    jobs: u64,
}

impl Usage {
    fn add(&mut self, a: &Vec4) {
        add4(&mut self.amounts, a);
        self.jobs += 1;
    }
    fn sub(&mut self, a: &Vec4) {
        sub4(&mut self.amounts, a);
        self.jobs = self.jobs.saturating_sub(1);
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct AccountUsage {
    total: Usage,
    users: BTreeMap<String, Usage>,
}

#[derive(Clone, Debug)]
struct Queue {
    name: String,
    cohort: Option<String>,
    group: usize,
    weight: u32,
    nominal_cfg: QuotaAmounts,
    nominal: Lim,
    /// Some exactly where `nominal` is: the resolved lending limit.
    lending: Lim,
    borrowing: Lim,
    capability: Lim,
    max_per_user: Lim,
    max_jobs_per_user: Option<u32>,
    usage: Usage,
    users: BTreeMap<String, Usage>,
}

impl Queue {
    /// What only this queue may use: nominal - lending limit.
    fn reserve(&self, c: usize) -> Option<u64> {
        Some(self.nominal[c]?.saturating_sub(self.lending[c]?))
    }

    /// What this queue takes from its cohort's pool at use `u`.
    fn draw_at(&self, c: usize, u: u64) -> u64 {
        self.reserve(c).map_or(0, |g| u.saturating_sub(g))
    }
}

#[derive(Clone, Debug)]
struct AccountLimits {
    grp: Lim,
    max_per_user: Lim,
    max_jobs_per_user: Option<u32>,
}

/// The queues of one cohort (a queue in no cohort forms a group of its own).
#[derive(Clone, Debug)]
struct Group {
    cohort: Option<String>,
    members: Vec<usize>,
}

/// One admitted gang, as `admit` was told it (queue resolved).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Charge {
    queue: Option<usize>,
    account: String,
    user: String,
    namespace: Option<String>,
    amounts: Amounts,
}

/// A [`Charge`] borrowed, to look one up without making its strings (every start and end
/// of a job does). Its fields hash as the charge's do: a `String` hashes as its `str`.
#[derive(Hash)]
struct ChargeRef<'a> {
    queue: Option<usize>,
    account: &'a str,
    user: &'a str,
    namespace: Option<&'a str>,
    amounts: Amounts,
}

impl ChargeRef<'_> {
    fn owned(&self) -> Charge {
        Charge {
            queue: self.queue,
            account: self.account.to_owned(),
            user: self.user.to_owned(),
            namespace: self.namespace.map(str::to_owned),
            amounts: self.amounts,
        }
    }
}

impl hashbrown::Equivalent<Charge> for ChargeRef<'_> {
    fn equivalent(&self, c: &Charge) -> bool {
        self.queue == c.queue
            && self.account == c.account
            && self.user == c.user
            && self.namespace == c.namespace.as_deref()
            && self.amounts == c.amounts
    }
}

/// A namespace quota, resolved.
#[derive(Clone, Debug)]
struct NamespaceQuota {
    namespace: String,
    name: String,
    hard: Lim,
}

/// The quota configuration and the running gangs counted against it.
#[derive(Clone, Debug)]
pub struct QuotaBook {
    queues: Vec<Queue>,
    queue_by_name: BTreeMap<String, usize>,
    groups: Vec<Group>,
    account_queue: BTreeMap<String, usize>,
    account_limits: BTreeMap<String, AccountLimits>,
    account_usage: BTreeMap<String, AccountUsage>,
    namespace_quotas: Vec<NamespaceQuota>,
    namespace_usage: BTreeMap<String, Usage>,
    total: Vec4,
    /// Admitted gangs and how many of each: the source of truth for `check_invariants`. In
    /// a hash table looked up by a borrowed key: a tree ordered by the charges compared
    /// their strings at every level, and an owned key made two strings, at every start and
    /// end (together 3% of a busy pass's instructions). Seeded at random: its keys hold
    /// names users choose, and nothing reads the table in its order but sums.
    ledger: hashbrown::HashMap<Charge, u64, RandomState>,
}

fn non_empty(name: &str, what: &'static str) -> Result<(), QuotaError> {
    if name.trim().is_empty() {
        Err(QuotaError::EmptyName { what })
    } else {
        Ok(())
    }
}

impl QuotaBook {
    /// Validates the config and builds an empty book.
    pub fn new(config: &QuotaConfig) -> Result<QuotaBook, QuotaError> {
        let mut queues: Vec<Queue> = Vec::with_capacity(config.queues.len());
        let mut queue_by_name = BTreeMap::new();
        let mut account_queue: BTreeMap<String, usize> = BTreeMap::new();
        let mut groups: Vec<Group> = Vec::new();
        let mut group_by_cohort: BTreeMap<String, usize> = BTreeMap::new();

        for (i, qc) in config.queues.iter().enumerate() {
            non_empty(&qc.name, "queue")?;
            if queue_by_name.insert(qc.name.clone(), i).is_some() {
                return Err(QuotaError::DuplicateQueue {
                    name: qc.name.clone(),
                });
            }
            if qc.weight == 0 {
                return Err(QuotaError::ZeroWeight {
                    queue: qc.name.clone(),
                });
            }
            if qc.cohort.is_none() {
                for (set, limit) in [
                    (qc.borrowing_limit.is_some(), "borrowing_limit"),
                    (qc.lending_limit.is_some(), "lending_limit"),
                ] {
                    if set {
                        return Err(QuotaError::LimitWithoutCohort {
                            queue: qc.name.clone(),
                            limit,
                        });
                    }
                }
            }
            let nominal = qc.nominal.lim();
            let borrowing = qc.borrowing_limit.unwrap_or_default().lim();
            let lending_cfg = qc.lending_limit.unwrap_or_default().lim();
            let capability = qc.capability.unwrap_or_default().lim();
            let mut lending = [None; N];
            for r in Resource::ALL {
                let c = r.ix();
                match nominal[c] {
                    None => {
                        for (set, limit) in [
                            (borrowing[c].is_some(), "borrowing_limit"),
                            (lending_cfg[c].is_some(), "lending_limit"),
                        ] {
                            if set {
                                return Err(QuotaError::LimitOnUnmanagedResource {
                                    queue: qc.name.clone(),
                                    limit,
                                    resource: r,
                                });
                            }
                        }
                    }
                    Some(n) => {
                        let l = lending_cfg[c].unwrap_or(n);
                        if l > n {
                            return Err(QuotaError::LendingAboveNominal {
                                queue: qc.name.clone(),
                                resource: r,
                                lending: l,
                                nominal: n,
                            });
                        }
                        lending[c] = Some(l);
                        if let Some(cap) = capability[c] {
                            if cap < n {
                                return Err(QuotaError::CapabilityBelowNominal {
                                    queue: qc.name.clone(),
                                    resource: r,
                                    capability: cap,
                                    nominal: n,
                                });
                            }
                        }
                    }
                }
            }
            for account in &qc.accounts {
                non_empty(account, "account")?;
                if let Some(prev) = account_queue.insert(account.clone(), i) {
                    let first = queues
                        .get(prev)
                        .map_or_else(|| qc.name.clone(), |q| q.name.clone());
                    return Err(QuotaError::AccountMappedTwice {
                        account: account.clone(),
                        first,
                        second: qc.name.clone(),
                    });
                }
            }
            let group = match &qc.cohort {
                Some(cohort) => {
                    non_empty(cohort, "cohort")?;
                    *group_by_cohort.entry(cohort.clone()).or_insert_with(|| {
                        groups.push(Group {
                            cohort: Some(cohort.clone()),
                            members: Vec::new(),
                        });
                        groups.len() - 1
                    })
                }
                None => {
                    groups.push(Group {
                        cohort: None,
                        members: Vec::new(),
                    });
                    groups.len() - 1
                }
            };
            groups[group].members.push(i);
            queues.push(Queue {
                name: qc.name.clone(),
                cohort: qc.cohort.clone(),
                group,
                weight: qc.weight,
                nominal_cfg: qc.nominal,
                nominal,
                lending,
                borrowing,
                capability,
                max_per_user: qc.max_per_user.unwrap_or_default().lim(),
                max_jobs_per_user: qc.max_running_jobs_per_user,
                usage: Usage::default(),
                users: BTreeMap::new(),
            });
        }

        let mut account_limits = BTreeMap::new();
        for ac in &config.accounts {
            non_empty(&ac.name, "account")?;
            let limits = AccountLimits {
                grp: ac.grp.unwrap_or_default().lim(),
                max_per_user: ac.max_per_user.unwrap_or_default().lim(),
                max_jobs_per_user: ac.max_running_jobs_per_user,
            };
            if account_limits.insert(ac.name.clone(), limits).is_some() {
                return Err(QuotaError::DuplicateAccount {
                    name: ac.name.clone(),
                });
            }
        }

        let mut namespace_quotas: Vec<NamespaceQuota> = Vec::new();
        for nq in &config.namespaces {
            non_empty(&nq.namespace, "namespace")?;
            non_empty(&nq.name, "namespace quota")?;
            if namespace_quotas
                .iter()
                .any(|x| x.namespace == nq.namespace && x.name == nq.name)
            {
                return Err(QuotaError::DuplicateNamespaceQuota {
                    namespace: nq.namespace.clone(),
                    name: nq.name.clone(),
                });
            }
            namespace_quotas.push(NamespaceQuota {
                namespace: nq.namespace.clone(),
                name: nq.name.clone(),
                hard: nq.hard.lim(),
            });
        }

        Ok(QuotaBook {
            queues,
            queue_by_name,
            groups,
            account_queue,
            account_limits,
            account_usage: BTreeMap::new(),
            namespace_quotas,
            namespace_usage: BTreeMap::new(),
            total: [0; N],
            ledger: Default::default(),
        })
    }

    /// The queue called `name`.
    pub fn queue_ix(&self, name: &str) -> Option<QueueIx> {
        self.queue_by_name.get(name).map(|&i| QueueIx(i))
    }

    /// The queue `account`'s jobs go to when they name none.
    pub fn queue_of_account(&self, account: &str) -> Option<QueueIx> {
        self.account_queue.get(account).map(|&i| QueueIx(i))
    }

    /// All queues, in config order.
    pub fn queues(&self) -> impl Iterator<Item = QueueIx> + '_ {
        (0..self.queues.len()).map(QueueIx)
    }

    /// The queue's name; `None` for an index from another book.
    pub fn queue_name(&self, q: QueueIx) -> Option<&str> {
        self.queues.get(q.0).map(|x| x.name.as_str())
    }

    /// The queue's cohort, if it has one.
    pub fn cohort(&self, q: QueueIx) -> Option<&str> {
        self.queues.get(q.0).and_then(|x| x.cohort.as_deref())
    }

    /// The queue's Volcano weight (0 for an index from another book).
    pub fn weight(&self, q: QueueIx) -> u32 {
        self.queues.get(q.0).map_or(0, |x| x.weight)
    }

    /// The queue a gang counts against: `named`, else the account's queue, else none.
    pub fn resolve(&self, named: Option<QueueIx>, account: &str) -> Option<QueueIx> {
        named.or_else(|| self.queue_of_account(account))
    }

    fn resolve_ix(&self, named: Option<QueueIx>, account: &str) -> Result<Option<usize>, usize> {
        match self.resolve(named, account) {
            Some(QueueIx(i)) if i >= self.queues.len() => Err(i),
            other => Ok(other.map(|q| q.0)),
        }
    }

    /// What the cohort pool of `group` has left in component `c`: Σ lending - Σ draws.
    fn group_free(&self, group: usize, c: usize) -> u64 {
        let (pool, drawn) = self.group_pool(group, c);
        pool.saturating_sub(drawn)
    }

    /// (pool, drawn) of a group in component `c`.
    fn group_pool(&self, group: usize, c: usize) -> (u64, u64) {
        let mut pool = 0u64;
        let mut drawn = 0u64;
        for &p in &self.groups[group].members {
            let qp = &self.queues[p];
            if let Some(l) = qp.lending[c] {
                pool = pool.saturating_add(l);
                drawn = drawn.saturating_add(qp.draw_at(c, qp.usage.amounts[c]));
            }
        }
        (pool, drawn)
    }

    /// Whether a whole gang of total `want`, for `user` of `account`, may be admitted now
    /// into `queue` (resolved as in [`QuotaBook::resolve`]). Nothing is counted. A gang of
    /// no namespace: see [`QuotaBook::check_in`].
    pub fn check(
        &self,
        queue: Option<QueueIx>,
        account: &str,
        user: &str,
        want: Amounts,
    ) -> Result<Admit, QuotaBlock> {
        self.check_in(queue, account, user, None, want)
    }

    /// [`QuotaBook::check`] for a gang of `namespace`, which its quotas limit too (checked
    /// last).
    pub fn check_in(
        &self,
        queue: Option<QueueIx>,
        account: &str,
        user: &str,
        namespace: Option<&str>,
        want: Amounts,
    ) -> Result<Admit, QuotaBlock> {
        let q = self
            .resolve_ix(queue, account)
            .map_err(|index| QuotaBlock::UnknownQueue { index })?;
        let w = to4(&want);
        for r in Resource::ALL {
            if self.total[r.ix()].checked_add(w[r.ix()]).is_none() {
                return Err(QuotaBlock::Overflow {
                    resource: r,
                    want: w[r.ix()],
                });
            }
        }
        let mut borrowed = [0u64; N];
        if let Some(qi) = q {
            borrowed = self.check_queue(qi, user, &w)?;
        }
        self.check_account(account, user, &w)?;
        if let Some(ns) = namespace {
            self.check_namespace(ns, &w)?;
        }
        Ok(Admit {
            queue: q.map(QueueIx),
            borrowed: from4(borrowed),
        })
    }

    fn check_queue(&self, qi: usize, user: &str, w: &Vec4) -> Result<Vec4, QuotaBlock> {
        let qs = &self.queues[qi];
        let zero = Usage::default();
        let uu = qs.users.get(user).unwrap_or(&zero);
        if let Some(limit) = qs.max_jobs_per_user {
            if uu.jobs >= u64::from(limit) {
                return Err(QuotaBlock::QueueUserJobs {
                    queue: qs.name.clone(),
                    user: user.to_string(),
                    limit,
                });
            }
        }
        for r in Resource::ALL {
            let c = r.ix();
            if let Some(limit) = qs.max_per_user[c] {
                if uu.amounts[c] + w[c] > limit {
                    return Err(QuotaBlock::QueueUserLimit {
                        queue: qs.name.clone(),
                        user: user.to_string(),
                        resource: r,
                        limit,
                        used: uu.amounts[c],
                        want: w[c],
                    });
                }
            }
        }
        let u = &qs.usage.amounts;
        for r in Resource::ALL {
            let c = r.ix();
            if let Some(limit) = qs.capability[c] {
                if u[c] + w[c] > limit {
                    return Err(QuotaBlock::QueueCapability {
                        queue: qs.name.clone(),
                        resource: r,
                        limit,
                        used: u[c],
                        want: w[c],
                    });
                }
            }
        }
        for r in Resource::ALL {
            let c = r.ix();
            if let (Some(n), Some(b)) = (qs.nominal[c], qs.borrowing[c]) {
                if u[c] + w[c] > n.saturating_add(b) {
                    return Err(QuotaBlock::QueueBorrowingLimit {
                        queue: qs.name.clone(),
                        resource: r,
                        nominal: n,
                        borrowing_limit: b,
                        used: u[c],
                        want: w[c],
                    });
                }
            }
        }
        let mut borrowed = [0u64; N];
        for r in Resource::ALL {
            let c = r.ix();
            let Some(n) = qs.nominal[c] else { continue };
            let need = qs.draw_at(c, u[c] + w[c]) - qs.draw_at(c, u[c]);
            let available = self.group_free(qs.group, c);
            if need > available {
                return Err(match &qs.cohort {
                    None => QuotaBlock::QueueNominal {
                        queue: qs.name.clone(),
                        resource: r,
                        nominal: n,
                        used: u[c],
                        want: w[c],
                    },
                    Some(cohort) => QuotaBlock::CohortExhausted {
                        queue: qs.name.clone(),
                        cohort: cohort.clone(),
                        resource: r,
                        need,
                        available,
                        reclaimable: self.reclaimable_ix(qi, c),
                    },
                });
            }
            borrowed[c] = (u[c] + w[c]).saturating_sub(n) - u[c].saturating_sub(n);
        }
        Ok(borrowed)
    }

    fn check_account(&self, account: &str, user: &str, w: &Vec4) -> Result<(), QuotaBlock> {
        let Some(limits) = self.account_limits.get(account) else {
            return Ok(());
        };
        let zero_acc = AccountUsage::default();
        let zero = Usage::default();
        let au = self.account_usage.get(account).unwrap_or(&zero_acc);
        let uu = au.users.get(user).unwrap_or(&zero);
        for r in Resource::ALL {
            let c = r.ix();
            if let Some(limit) = limits.grp[c] {
                if au.total.amounts[c] + w[c] > limit {
                    return Err(QuotaBlock::AccountGrp {
                        account: account.to_string(),
                        resource: r,
                        limit,
                        used: au.total.amounts[c],
                        want: w[c],
                    });
                }
            }
        }
        for r in Resource::ALL {
            let c = r.ix();
            if let Some(limit) = limits.max_per_user[c] {
                if uu.amounts[c] + w[c] > limit {
                    return Err(QuotaBlock::AccountUserLimit {
                        account: account.to_string(),
                        user: user.to_string(),
                        resource: r,
                        limit,
                        used: uu.amounts[c],
                        want: w[c],
                    });
                }
            }
        }
        if let Some(limit) = limits.max_jobs_per_user {
            if uu.jobs >= u64::from(limit) {
                return Err(QuotaBlock::AccountUserJobs {
                    account: account.to_string(),
                    user: user.to_string(),
                    limit,
                });
            }
        }
        Ok(())
    }

    fn check_namespace(&self, namespace: &str, w: &Vec4) -> Result<(), QuotaBlock> {
        let zero = Usage::default();
        let used = self.namespace_usage.get(namespace).unwrap_or(&zero);
        for nq in self
            .namespace_quotas
            .iter()
            .filter(|x| x.namespace == namespace)
        {
            for r in Resource::ALL {
                let c = r.ix();
                if let Some(limit) = nq.hard[c]
                    && used.amounts[c] + w[c] > limit
                {
                    return Err(QuotaBlock::NamespaceQuota {
                        namespace: namespace.to_string(),
                        quota: nq.name.clone(),
                        resource: r,
                        limit,
                        used: used.amounts[c],
                        want: w[c],
                    });
                }
            }
        }
        Ok(())
    }

    /// Checks, then counts the gang as running. Call [`QuotaBook::release`] with the same
    /// arguments when it ends (or is preempted).
    pub fn admit(
        &mut self,
        queue: Option<QueueIx>,
        account: &str,
        user: &str,
        amounts: Amounts,
    ) -> Result<Admit, QuotaBlock> {
        self.admit_in(queue, account, user, None, amounts)
    }

    /// [`QuotaBook::admit`] for a gang of `namespace`; release it with
    /// [`QuotaBook::release_in`].
    pub fn admit_in(
        &mut self,
        queue: Option<QueueIx>,
        account: &str,
        user: &str,
        namespace: Option<&str>,
        amounts: Amounts,
    ) -> Result<Admit, QuotaBlock> {
        let admit = self.check_in(queue, account, user, namespace, amounts)?;
        self.count(admit.queue.map(|q| q.0), account, user, namespace, amounts);
        Ok(admit)
    }

    fn count(
        &mut self,
        q: Option<usize>,
        account: &str,
        user: &str,
        namespace: Option<&str>,
        amounts: Amounts,
    ) {
        let w = to4(&amounts);
        add4(&mut self.total, &w);
        if let Some(qi) = q {
            let qs = &mut self.queues[qi];
            qs.usage.add(&w);
            with_entry(&mut qs.users, user, |u| u.add(&w));
        }
        with_entry(&mut self.account_usage, account, |au| {
            au.total.add(&w);
            with_entry(&mut au.users, user, |u| u.add(&w));
        });
        if let Some(ns) = namespace {
            with_entry(&mut self.namespace_usage, ns, |u| u.add(&w));
        }
        let key = ChargeRef {
            queue: q,
            account,
            user,
            namespace,
            amounts,
        };
        match self.ledger.get_mut(&key) {
            Some(n) => *n += 1,
            None => _ = self.ledger.insert(key.owned(), 1),
        }
    }

    /// Counts a gang that already runs, whether or not the limits admit it now (a job
    /// adopted after a restart, under a policy that may have changed): the limit it is over,
    /// if any, is returned, and the book's limits are then not an invariant
    /// ([`QuotaBook::check_counts`] still holds) until it is released. Errors when the
    /// gang cannot be counted at all (an unknown queue index, a counter overflow).
    pub fn restore(
        &mut self,
        queue: Option<QueueIx>,
        account: &str,
        user: &str,
        amounts: Amounts,
    ) -> Result<Option<QuotaBlock>, QuotaBlock> {
        self.restore_in(queue, account, user, None, amounts)
    }

    /// [`QuotaBook::restore`] for a gang of `namespace`.
    pub fn restore_in(
        &mut self,
        queue: Option<QueueIx>,
        account: &str,
        user: &str,
        namespace: Option<&str>,
        amounts: Amounts,
    ) -> Result<Option<QuotaBlock>, QuotaBlock> {
        let q = self
            .resolve_ix(queue, account)
            .map_err(|index| QuotaBlock::UnknownQueue { index })?;
        let over = match self.check_in(queue, account, user, namespace, amounts) {
            Ok(_) => None,
            Err(block @ (QuotaBlock::UnknownQueue { .. } | QuotaBlock::Overflow { .. })) => {
                return Err(block);
            }
            Err(block) => Some(block),
        };
        self.count(q, account, user, namespace, amounts);
        Ok(over)
    }

    /// Stops counting a gang admitted with the same arguments.
    pub fn release(
        &mut self,
        queue: Option<QueueIx>,
        account: &str,
        user: &str,
        amounts: Amounts,
    ) -> Result<(), QuotaError> {
        self.release_in(queue, account, user, None, amounts)
    }

    /// Stops counting a gang admitted with the same arguments by [`QuotaBook::admit_in`].
    pub fn release_in(
        &mut self,
        queue: Option<QueueIx>,
        account: &str,
        user: &str,
        namespace: Option<&str>,
        amounts: Amounts,
    ) -> Result<(), QuotaError> {
        let q = self
            .resolve_ix(queue, account)
            .map_err(|index| QuotaError::UnknownQueueIndex { index })?;
        let key = ChargeRef {
            queue: q,
            account,
            user,
            namespace,
            amounts,
        };
        match self.ledger.get_mut(&key) {
            None => {
                return Err(QuotaError::NotAdmitted {
                    queue: q.map_or_else(
                        || "no queue".to_string(),
                        |i| format!("queue `{}`", self.queues[i].name),
                    ),
                    account: account.to_string(),
                    user: user.to_string(),
                    amounts,
                });
            }
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.ledger.remove(&key);
            }
        }
        let w = to4(&amounts);
        sub4(&mut self.total, &w);
        if let Some(qi) = q {
            let qs = &mut self.queues[qi];
            qs.usage.sub(&w);
            release_user(&mut qs.users, user, &w);
        }
        if let Some(au) = self.account_usage.get_mut(account) {
            au.total.sub(&w);
            release_user(&mut au.users, user, &w);
            if au.total.jobs == 0 {
                self.account_usage.remove(account);
            }
        }
        if let Some(ns) = namespace
            && let Some(u) = self.namespace_usage.get_mut(ns)
        {
            u.sub(&w);
            if u.jobs == 0 {
                self.namespace_usage.remove(ns);
            }
        }
        Ok(())
    }

    /// What the running gangs of `namespace` use together.
    pub fn namespace_used(&self, namespace: &str) -> Amounts {
        self.namespace_usage
            .get(namespace)
            .map_or(Amounts::ZERO, |u| from4(u.amounts))
    }

    /// The queue's total use.
    pub fn used(&self, q: QueueIx) -> Amounts {
        self.queues
            .get(q.0)
            .map_or(Amounts::ZERO, |x| from4(x.usage.amounts))
    }

    /// What the queue uses above its nominal quota (managed components only): what it
    /// borrows from its cohort, and what reclaiming lenders may take back by preempting it.
    pub fn borrowed(&self, q: QueueIx) -> Amounts {
        let Some(qs) = self.queues.get(q.0) else {
            return Amounts::ZERO;
        };
        let mut v = [0; N];
        for (c, out) in v.iter_mut().enumerate() {
            if let Some(n) = qs.nominal[c] {
                *out = qs.usage.amounts[c].saturating_sub(n);
            }
        }
        from4(v)
    }

    fn reclaimable_ix(&self, qi: usize, c: usize) -> u64 {
        let qs = &self.queues[qi];
        let Some(l) = qs.lending[c] else { return 0 };
        // Growing to nominal draws l - draw(u) more from the pool; the part the pool cannot
        // give is held by other members' borrowing.
        let to_nominal = l.saturating_sub(qs.draw_at(c, qs.usage.amounts[c]));
        to_nominal.saturating_sub(self.group_free(qs.group, c))
    }

    /// How much of the queue's unused nominal quota it cannot use now because other members
    /// of its cohort borrow it: what preempting borrowers ([`QuotaBook::borrowers_in_cohort`])
    /// would give back (Kueue reclaimWithinCohort). Zero outside a cohort.
    pub fn reclaimable(&self, q: QueueIx) -> Amounts {
        if q.0 >= self.queues.len() {
            return Amounts::ZERO;
        }
        let mut v = [0; N];
        for (c, out) in v.iter_mut().enumerate() {
            *out = self.reclaimable_ix(q.0, c);
        }
        from4(v)
    }

    /// The other queues of `q`'s cohort that borrow (use above nominal), with what they
    /// borrow, in config order. Their gangs are the candidates when `q` reclaims.
    pub fn borrowers_in_cohort(&self, q: QueueIx) -> Vec<(QueueIx, Amounts)> {
        let Some(qs) = self.queues.get(q.0) else {
            return Vec::new();
        };
        self.groups[qs.group]
            .members
            .iter()
            .filter(|&&p| p != q.0)
            .map(|&p| (QueueIx(p), self.borrowed(QueueIx(p))))
            .filter(|(_, b)| !b.is_zero())
            .collect()
    }

    /// How much more the queue could admit now as far as queue-level limits go (nominal,
    /// cohort, borrowing limit, capability), ignoring per-user and account limits;
    /// `u64::MAX` in a component nothing limits. Components are independent: a gang fits
    /// the queue's limits iff it fits in this.
    pub fn headroom(&self, q: QueueIx) -> Amounts {
        let Some(qs) = self.queues.get(q.0) else {
            return Amounts::ZERO;
        };
        let mut v = [u64::MAX; N];
        for (c, out) in v.iter_mut().enumerate() {
            let u = qs.usage.amounts[c];
            if let Some(cap) = qs.capability[c] {
                *out = (*out).min(cap.saturating_sub(u));
            }
            if let Some(n) = qs.nominal[c] {
                if let Some(b) = qs.borrowing[c] {
                    *out = (*out).min(n.saturating_add(b).saturating_sub(u));
                }
                let g = qs.reserve(c).unwrap_or(0);
                let cohort = g
                    .saturating_sub(u)
                    .saturating_add(self.group_free(qs.group, c));
                *out = (*out).min(cohort);
            }
        }
        from4(v)
    }

    /// One row per queue, in config order.
    pub fn rows(&self) -> Vec<QueueRow> {
        self.queues()
            .map(|q| {
                let qs = &self.queues[q.0];
                let mut lendable = [0; N];
                for (c, out) in lendable.iter_mut().enumerate() {
                    if let (Some(n), Some(l)) = (qs.nominal[c], qs.lending[c]) {
                        *out = n.saturating_sub(qs.usage.amounts[c]).min(l);
                    }
                }
                QueueRow {
                    queue: qs.name.clone(),
                    cohort: qs.cohort.clone(),
                    weight: qs.weight,
                    nominal: qs.nominal_cfg,
                    used: from4(qs.usage.amounts),
                    borrowed: self.borrowed(q),
                    lendable: from4(lendable),
                    running_jobs: qs.usage.jobs,
                }
            })
            .collect()
    }

    /// Checks every limit against the counters, and the counters against the admitted
    /// gangs. See the module doc.
    pub fn check_invariants(&self) -> Result<(), QuotaViolation> {
        self.check_counts()?;
        for nq in &self.namespace_quotas {
            let Some(u) = self.namespace_usage.get(&nq.namespace) else {
                continue;
            };
            for r in Resource::ALL {
                if let Some(limit) = nq.hard[r.ix()]
                    && u.amounts[r.ix()] > limit
                {
                    return Err(QuotaViolation::NamespaceAboveQuota {
                        namespace: nq.namespace.clone(),
                        quota: nq.name.clone(),
                        resource: r,
                        used: u.amounts[r.ix()],
                        limit,
                    });
                }
            }
        }
        for qs in &self.queues {
            for r in Resource::ALL {
                let c = r.ix();
                let used = qs.usage.amounts[c];
                if let (Some(nominal), Some(b)) = (qs.nominal[c], qs.borrowing[c]) {
                    if used > nominal.saturating_add(b) {
                        return Err(QuotaViolation::AboveBorrowingLimit {
                            queue: qs.name.clone(),
                            resource: r,
                            used,
                            nominal,
                            borrowing_limit: b,
                        });
                    }
                }
                if let Some(capability) = qs.capability[c] {
                    if used > capability {
                        return Err(QuotaViolation::AboveCapability {
                            queue: qs.name.clone(),
                            resource: r,
                            used,
                            capability,
                        });
                    }
                }
                for (user, uu) in &qs.users {
                    if let Some(limit) = qs.max_per_user[c] {
                        if uu.amounts[c] > limit {
                            return Err(QuotaViolation::QueueUserAboveLimit {
                                queue: qs.name.clone(),
                                user: user.clone(),
                                resource: r,
                                used: uu.amounts[c],
                                limit,
                            });
                        }
                    }
                }
            }
            if let Some(limit) = qs.max_jobs_per_user {
                for (user, uu) in &qs.users {
                    if uu.jobs > u64::from(limit) {
                        return Err(QuotaViolation::QueueUserJobsAboveLimit {
                            queue: qs.name.clone(),
                            user: user.clone(),
                            jobs: uu.jobs,
                            limit,
                        });
                    }
                }
            }
        }
        for (gi, group) in self.groups.iter().enumerate() {
            for r in Resource::ALL {
                let c = r.ix();
                let (pool, drawn) = self.group_pool(gi, c);
                let (mut used, mut nominal) = (0u64, 0u64);
                for &p in &group.members {
                    if let Some(n) = self.queues[p].nominal[c] {
                        used = used.saturating_add(self.queues[p].usage.amounts[c]);
                        nominal = nominal.saturating_add(n);
                    }
                }
                match &group.cohort {
                    None => {
                        if used > nominal {
                            let qs = &self.queues[group.members[0]];
                            return Err(QuotaViolation::AboveNominal {
                                queue: qs.name.clone(),
                                resource: r,
                                used,
                                nominal,
                            });
                        }
                    }
                    Some(cohort) => {
                        if used > nominal {
                            return Err(QuotaViolation::CohortAboveNominal {
                                cohort: cohort.clone(),
                                resource: r,
                                used,
                                nominal,
                            });
                        }
                        if drawn > pool {
                            return Err(QuotaViolation::CohortOverdrawn {
                                cohort: cohort.clone(),
                                resource: r,
                                drawn,
                                pool,
                            });
                        }
                    }
                }
            }
        }
        for (account, limits) in &self.account_limits {
            let Some(au) = self.account_usage.get(account) else {
                continue;
            };
            for r in Resource::ALL {
                let c = r.ix();
                if let Some(limit) = limits.grp[c] {
                    if au.total.amounts[c] > limit {
                        return Err(QuotaViolation::AccountAboveGrp {
                            account: account.clone(),
                            resource: r,
                            used: au.total.amounts[c],
                            limit,
                        });
                    }
                }
                for (user, uu) in &au.users {
                    if let Some(limit) = limits.max_per_user[c] {
                        if uu.amounts[c] > limit {
                            return Err(QuotaViolation::AccountUserAboveLimit {
                                account: account.clone(),
                                user: user.clone(),
                                resource: r,
                                used: uu.amounts[c],
                                limit,
                            });
                        }
                    }
                }
            }
            if let Some(limit) = limits.max_jobs_per_user {
                for (user, uu) in &au.users {
                    if uu.jobs > u64::from(limit) {
                        return Err(QuotaViolation::AccountUserJobsAboveLimit {
                            account: account.clone(),
                            user: user.clone(),
                            jobs: uu.jobs,
                            limit,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Recomputes every counter from the ledger and compares (the part of
    /// [`QuotaBook::check_invariants`] that holds even with gangs counted over a limit by
    /// [`QuotaBook::restore`]).
    pub fn check_counts(&self) -> Result<(), QuotaViolation> {
        let mut total = Usage::default();
        let mut queues: Vec<Usage> = vec![Usage::default(); self.queues.len()];
        let mut queue_users: BTreeMap<(usize, &str), Usage> = BTreeMap::new();
        let mut accounts: BTreeMap<&str, Usage> = BTreeMap::new();
        let mut account_users: BTreeMap<(&str, &str), Usage> = BTreeMap::new();
        let mut namespaces: BTreeMap<&str, Usage> = BTreeMap::new();
        for (charge, &n) in &self.ledger {
            let mut w = to4(&charge.amounts);
            for x in w.iter_mut() {
                *x = x.saturating_mul(n);
            }
            let add = |u: &mut Usage| {
                add4(&mut u.amounts, &w);
                u.jobs += n;
            };
            add(&mut total);
            if let Some(qi) = charge.queue {
                match queues.get_mut(qi) {
                    Some(u) => add(u),
                    None => {
                        return Err(mismatch(
                            format!("the ledger's queue index {qi}"),
                            &Usage::default(),
                            &Usage::default(),
                        ));
                    }
                }
                add(queue_users.entry((qi, charge.user.as_str())).or_default());
            }
            add(accounts.entry(charge.account.as_str()).or_default());
            add(account_users
                .entry((charge.account.as_str(), charge.user.as_str()))
                .or_default());
            if let Some(ns) = &charge.namespace {
                add(namespaces.entry(ns.as_str()).or_default());
            }
        }
        let counted_total = Usage {
            amounts: self.total,
            jobs: total.jobs,
        };
        if counted_total.amounts != total.amounts {
            return Err(mismatch("the book's total".into(), &counted_total, &total));
        }
        let zero = Usage::default();
        for (qi, qs) in self.queues.iter().enumerate() {
            if qs.usage != queues[qi] {
                return Err(mismatch(
                    format!("queue `{}`", qs.name),
                    &qs.usage,
                    &queues[qi],
                ));
            }
            for (user, uu) in &qs.users {
                let admitted = queue_users.get(&(qi, user.as_str())).unwrap_or(&zero);
                if uu != admitted || uu.jobs == 0 {
                    return Err(mismatch(
                        format!("user `{user}` in queue `{}`", qs.name),
                        uu,
                        admitted,
                    ));
                }
            }
        }
        for ((qi, user), admitted) in &queue_users {
            if !self.queues[*qi].users.contains_key(*user) {
                return Err(mismatch(
                    format!("user `{user}` in queue `{}`", self.queues[*qi].name),
                    &zero,
                    admitted,
                ));
            }
        }
        for (account, admitted) in &accounts {
            let au = self.account_usage.get(*account);
            let counted = au.map_or(&zero, |a| &a.total);
            if counted != admitted {
                return Err(mismatch(format!("account `{account}`"), counted, admitted));
            }
        }
        for ((account, user), admitted) in &account_users {
            let counted = self
                .account_usage
                .get(*account)
                .and_then(|a| a.users.get(*user))
                .unwrap_or(&zero);
            if counted != admitted {
                return Err(mismatch(
                    format!("user `{user}` in account `{account}`"),
                    counted,
                    admitted,
                ));
            }
        }
        for (account, au) in &self.account_usage {
            if !accounts.contains_key(account.as_str()) {
                return Err(mismatch(format!("account `{account}`"), &au.total, &zero));
            }
            for (user, uu) in &au.users {
                if !account_users.contains_key(&(account.as_str(), user.as_str())) {
                    return Err(mismatch(
                        format!("user `{user}` in account `{account}`"),
                        uu,
                        &zero,
                    ));
                }
            }
        }
        let counted: BTreeMap<&str, &Usage> = self
            .namespace_usage
            .iter()
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        let admitted: BTreeMap<&str, &Usage> = namespaces.iter().map(|(k, v)| (*k, v)).collect();
        if counted != admitted {
            let ns = counted
                .keys()
                .chain(admitted.keys())
                .find(|k| counted.get(*k) != admitted.get(*k))
                .copied()
                .unwrap_or_default();
            return Err(mismatch(
                format!("namespace `{ns}`"),
                counted.get(ns).copied().unwrap_or(&zero),
                admitted.get(ns).copied().unwrap_or(&zero),
            ));
        }
        Ok(())
    }
}

/// Applies `f` to the value of `key` in `map`, made when missing: a start makes no string
/// of a name counted already (most starts).
fn with_entry<V: Default, R>(
    map: &mut BTreeMap<String, V>,
    key: &str,
    f: impl FnOnce(&mut V) -> R,
) -> R {
    match map.get_mut(key) {
        Some(v) => f(v),
        None => f(map.entry(key.to_string()).or_default()),
    }
}

fn release_user(users: &mut BTreeMap<String, Usage>, user: &str, w: &Vec4) {
    if let Some(uu) = users.get_mut(user) {
        uu.sub(w);
        if uu.jobs == 0 {
            users.remove(user);
        }
    }
}

fn mismatch(what: String, counted: &Usage, admitted: &Usage) -> QuotaViolation {
    QuotaViolation::CountMismatch {
        what,
        counted: from4(counted.amounts),
        counted_jobs: counted.jobs,
        admitted: from4(admitted.amounts),
        admitted_jobs: admitted.jobs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gpus(n: u64) -> Amounts {
        Amounts {
            gpu_milli: n * u64::from(MILLI_PER_GPU),
            ..Amounts::ZERO
        }
    }

    fn cpus(n: u64) -> Amounts {
        Amounts {
            cpus: n,
            ..Amounts::ZERO
        }
    }

    fn config(src: &str) -> QuotaConfig {
        toml::from_str(src).expect("test config parses")
    }

    fn book(src: &str) -> QuotaBook {
        QuotaBook::new(&config(src)).expect("test config is valid")
    }

    fn ix(b: &QuotaBook, name: &str) -> Option<QueueIx> {
        Some(b.queue_ix(name).expect("queue exists"))
    }

    fn build_err(src: &str) -> QuotaError {
        QuotaBook::new(&config(src)).expect_err("config must be refused")
    }

    /// Two queues sharing cohort `c`, 8 GPUs each; `a` may borrow 4.
    const PAIR: &str = r#"
        [[queues]]
        name = "a"
        cohort = "c"
        nominal = { gpus = 8 }
        borrowing_limit = { gpus = 4 }
        accounts = ["acct-a"]

        [[queues]]
        name = "b"
        cohort = "c"
        nominal = { gpus = 8 }
    "#;

    #[test]
    fn a_namespace_quota_limits_its_gangs_whatever_their_queue_and_is_checked_last() {
        let mut b = book(
            r#"
            [[queues]]
            name = "q"
            nominal = { gpus = 32 }

            [[namespaces]]
            namespace = "team"
            name = "gpus"
            hard = { gpus = 16 }

            [[namespaces]]
            namespace = "team"
            name = "cpus"
            hard = { cpus = 100 }
            "#,
        );
        let q = b.queue_ix("q");
        let team = Some("team");
        b.admit_in(q, "a", "u", team, gpus(8)).expect("8 of 16");
        b.admit_in(None, "a", "v", team, gpus(6))
            .expect("no queue: 14 of 16");
        let block = b.check_in(q, "a", "u", team, gpus(6)).unwrap_err();
        assert_eq!(
            block.to_string(),
            "exceeded quota: gpus in namespace team, requested: 6 gpus, used: 14 gpus, \
             limited: 16 gpus"
        );
        assert_eq!(block.reason(), "NamespaceQuota");
        // Another namespace, and no namespace, are not limited by it.
        b.admit_in(q, "a", "u", Some("other"), gpus(6))
            .expect("other namespace");
        b.admit_in(q, "a", "u", None, gpus(6))
            .expect("no namespace");
        // The queue's own limit is reported before the namespace's.
        let block = b.check_in(q, "a", "u", team, gpus(20)).unwrap_err();
        assert!(matches!(block, QuotaBlock::QueueNominal { .. }), "{block}");
        b.check_invariants().expect("invariants");
        b.release_in(q, "a", "u", team, gpus(8)).expect("admitted");
        b.check_in(q, "a", "u", team, gpus(8)).expect("room again");
        assert!(
            b.release_in(q, "a", "u", None, gpus(6)).is_ok(),
            "the no-namespace gang is its own charge"
        );
        assert!(b.release_in(q, "a", "u", team, gpus(6)).is_err());
        b.check_invariants().expect("invariants");
        let over = b.restore_in(q, "a", "w", team, gpus(20)).expect("counted");
        assert!(
            matches!(over, Some(QuotaBlock::NamespaceQuota { .. })),
            "{over:?}"
        );
        assert!(b.check_invariants().is_err(), "above the namespace quota");
        b.check_counts().expect("the counts hold");
        assert_eq!(
            build_err(
                "[[namespaces]]\nnamespace = \"t\"\nname = \"x\"\nhard = {}\n\
                 [[namespaces]]\nnamespace = \"t\"\nname = \"x\"\nhard = {}\n"
            ),
            QuotaError::DuplicateNamespaceQuota {
                namespace: "t".into(),
                name: "x".into()
            }
        );
    }

    #[test]
    fn toml_takes_whole_gpus_and_gib() {
        let cfg = config(
            r#"
            [[queues]]
            name = "a"
            nominal = { gpus = 64, cpus = 512, mem_gib = 2 }
            capability = { gpu_milli = 64500 }
            "#,
        );
        let q = &cfg.queues[0];
        assert_eq!(q.nominal.gpu_milli, Some(64_000));
        assert_eq!(q.nominal.mem_mib, Some(2048));
        assert_eq!(q.nominal.nics, None);
        assert_eq!(q.weight, 1);
        assert_eq!(q.capability.and_then(|c| c.gpu_milli), Some(64_500));
        // Round trip: whole GPUs are written back as `gpus`.
        let back = toml::to_string(&cfg).expect("serialises");
        assert!(back.contains("gpus = 64"), "{back}");
        assert_eq!(config(&back), cfg);
    }

    #[test]
    fn toml_refuses_unknown_keys_and_double_units() {
        for src in [
            "[[queues]]\nname = \"a\"\nnominal = { gpu = 1 }\n",
            "[[queues]]\nname = \"a\"\nnominal = {}\nborrow = 1\n",
            "[[queue]]\nname = \"a\"\n",
        ] {
            assert!(toml::from_str::<QuotaConfig>(src).is_err(), "{src}");
        }
        let err = toml::from_str::<QuotaConfig>(
            "[[queues]]\nname = \"a\"\nnominal = { gpus = 1, gpu_milli = 1000 }\n",
        )
        .expect_err("both gpu units");
        assert!(
            err.to_string()
                .contains("sets both `gpu_milli` and `gpus`; write only one"),
            "{err}"
        );
        let err = toml::from_str::<QuotaConfig>(
            "[[queues]]\nname = \"a\"\nnominal = { gpus = 18446744073709551615 }\n",
        )
        .expect_err("too many gpus");
        assert!(err.to_string().contains("is too large"), "{err}");
    }

    #[test]
    fn config_errors_name_what_is_wrong() {
        let q = |name: &str, extra: &str| {
            format!("[[queues]]\nname = \"{name}\"\nnominal = {{ gpus = 8 }}\n{extra}\n")
        };
        assert_eq!(
            build_err(&(q("a", "") + &q("a", ""))),
            QuotaError::DuplicateQueue { name: "a".into() }
        );
        assert_eq!(
            build_err(&q("a", "cohort = \"c\"\nlending_limit = { gpus = 9 }")),
            QuotaError::LendingAboveNominal {
                queue: "a".into(),
                resource: Resource::Gpus,
                lending: 9000,
                nominal: 8000
            }
        );
        assert_eq!(
            build_err(&(q("a", "accounts = [\"x\"]") + &q("b", "accounts = [\"x\"]"))),
            QuotaError::AccountMappedTwice {
                account: "x".into(),
                first: "a".into(),
                second: "b".into()
            }
        );
        assert_eq!(
            build_err(&q("a", "borrowing_limit = { gpus = 1 }")),
            QuotaError::LimitWithoutCohort {
                queue: "a".into(),
                limit: "borrowing_limit"
            }
        );
        assert_eq!(
            build_err(&q("a", "cohort = \"c\"\nborrowing_limit = { cpus = 1 }")),
            QuotaError::LimitOnUnmanagedResource {
                queue: "a".into(),
                limit: "borrowing_limit",
                resource: Resource::Cpus
            }
        );
        assert_eq!(
            build_err(&q("a", "capability = { gpus = 7 }")),
            QuotaError::CapabilityBelowNominal {
                queue: "a".into(),
                resource: Resource::Gpus,
                capability: 7000,
                nominal: 8000
            }
        );
        assert_eq!(
            build_err(&q("a", "weight = 0")),
            QuotaError::ZeroWeight { queue: "a".into() }
        );
        assert_eq!(
            build_err("[[accounts]]\nname = \"x\"\n[[accounts]]\nname = \"x\"\n"),
            QuotaError::DuplicateAccount { name: "x".into() }
        );
        assert_eq!(
            build_err(&q(" ", "")),
            QuotaError::EmptyName { what: "queue" }
        );
        insta::assert_snapshot!(
            build_err(&q("a", "cohort = \"c\"\nlending_limit = { gpus = 9 }")),
            @"queue `a` has a lending limit of 9 gpus above its nominal quota of 8 gpus"
        );
    }

    #[test]
    fn borrows_within_the_borrowing_limit() {
        let mut b = book(PAIR);
        let a = ix(&b, "a");
        let admit = b
            .admit(a, "acct-a", "u", gpus(10))
            .expect("8 own + 2 borrowed");
        assert_eq!(admit.borrowed, gpus(2));
        assert_eq!(b.borrowed(a.unwrap()), gpus(2));
        let admit = b.admit(a, "acct-a", "u", gpus(1)).expect("3 borrowed");
        assert_eq!(admit.borrowed, gpus(1));
        assert_eq!(b.borrowed(a.unwrap()), gpus(3));
        b.check_invariants().expect("invariants");
    }

    #[test]
    fn borrowing_limit_stops_the_borrower() {
        let mut b = book(PAIR);
        let a = ix(&b, "a");
        b.admit(a, "acct-a", "u", gpus(12))
            .expect("8 own + 4 borrowed");
        let block = b.check(a, "acct-a", "u", gpus(1)).expect_err("limit hit");
        assert!(
            matches!(block, QuotaBlock::QueueBorrowingLimit { .. }),
            "{block:?}"
        );
        assert_eq!(block.reason(), "QOSGrpGRES");
        insta::assert_snapshot!(
            block,
            @"queue `a` would use 13 gpus, above its nominal quota of 8 gpus plus borrowing limit of 4 gpus by 1 gpu"
        );
        // `b` has no borrowing limit: it may take all `a` leaves unused... of which none
        // is left beyond its own 8 - 4 = 4.
        let bq = ix(&b, "b");
        b.admit(bq, "x", "v", gpus(4)).expect("own quota");
        let block = b
            .check(bq, "x", "v", gpus(1))
            .expect_err("a borrows the rest");
        assert_eq!(block.reason(), "CohortQuotaExhausted");
    }

    #[test]
    fn cohort_exhaustion_reports_what_is_lent_out() {
        let mut b = book(PAIR);
        let (a, bq) = (ix(&b, "a"), ix(&b, "b"));
        b.admit(a, "acct-a", "u", gpus(12))
            .expect("a borrows 4 of b's");
        let block = b.check(bq, "x", "v", gpus(5)).expect_err("only 4 left");
        assert_eq!(
            block,
            QuotaBlock::CohortExhausted {
                queue: "b".into(),
                cohort: "c".into(),
                resource: Resource::Gpus,
                need: 5000,
                available: 4000,
                reclaimable: 4000,
            }
        );
        assert_eq!(b.reclaimable(bq.unwrap()), gpus(4));
        assert_eq!(
            b.borrowers_in_cohort(bq.unwrap()),
            vec![(a.unwrap(), gpus(4))]
        );
        assert_eq!(b.headroom(bq.unwrap()).gpu_milli, 4000);
        // A preemption plan: release the borrower, and b fits.
        let mut plan = b.clone();
        plan.release(a, "acct-a", "u", gpus(12))
            .expect("admitted before");
        plan.check(bq, "x", "v", gpus(5)).expect("reclaimed");
    }

    #[test]
    fn lending_limit_keeps_a_reserve() {
        let mut b = book(
            r#"
            [[queues]]
            name = "a"
            cohort = "c"
            nominal = { gpus = 4 }

            [[queues]]
            name = "b"
            cohort = "c"
            nominal = { gpus = 8 }
            lending_limit = { gpus = 2 }
            "#,
        );
        let (a, bq) = (ix(&b, "a"), ix(&b, "b"));
        // b is idle, yet a borrows only the 2 b lends.
        let block = b.check(a, "x", "u", gpus(7)).expect_err("6 at most");
        assert!(
            matches!(
                block,
                QuotaBlock::CohortExhausted {
                    need: 7000,
                    available: 6000,
                    ..
                }
            ),
            "{block:?}"
        );
        assert_eq!(
            b.admit(a, "x", "u", gpus(6)).expect("4 + 2").borrowed,
            gpus(2)
        );
        // b still has its reserve of 6 but not the 2 it lent.
        b.admit(bq, "y", "v", gpus(6)).expect("the reserve");
        let block = b.check(bq, "y", "v", gpus(1)).expect_err("lent out");
        assert!(
            matches!(
                block,
                QuotaBlock::CohortExhausted {
                    reclaimable: 2000,
                    ..
                }
            ),
            "{block:?}"
        );
        assert_eq!(b.reclaimable(bq.unwrap()), gpus(2));
        b.release(a, "x", "u", gpus(6)).expect("admitted before");
        assert_eq!(b.reclaimable(bq.unwrap()), Amounts::ZERO);
        b.admit(bq, "y", "v", gpus(2)).expect("back to nominal");
        b.check_invariants().expect("invariants");
        let rows = b.rows();
        assert_eq!(rows[1].used, gpus(8));
        assert_eq!(rows[1].lendable, Amounts::ZERO);
        assert_eq!(rows[0].lendable, gpus(4));
    }

    #[test]
    fn capability_caps_total_use() {
        let mut b = book(
            r#"
            [[queues]]
            name = "a"
            cohort = "c"
            nominal = { gpus = 4 }
            capability = { gpus = 6, cpus = 10 }

            [[queues]]
            name = "b"
            cohort = "c"
            nominal = { gpus = 8 }
            "#,
        );
        let a = ix(&b, "a");
        b.admit(a, "x", "u", gpus(6)).expect("within capability");
        let block = b.check(a, "x", "u", gpus(1)).expect_err("capability");
        assert!(
            matches!(block, QuotaBlock::QueueCapability { .. }),
            "{block:?}"
        );
        assert_eq!(block.reason(), "QOSGrpGRES");
        // cpus are not managed by `a` (no nominal), but the capability still caps them.
        b.admit(a, "x", "u", cpus(10))
            .expect("unmanaged but capped at 10");
        let block = b.check(a, "x", "u", cpus(1)).expect_err("cpu capability");
        assert_eq!(block.reason(), "QOSGrpCpuLimit");
        assert_eq!(b.headroom(a.unwrap()).cpus, 0);
        assert_eq!(b.headroom(a.unwrap()).nics, u64::MAX);
    }

    #[test]
    fn unmanaged_resources_are_unlimited_and_not_shared() {
        let mut b = book(PAIR);
        let a = ix(&b, "a");
        let huge = Amounts {
            cpus: 1_000_000,
            mem_mib: 1 << 40,
            gpu_milli: 0,
            nics: 64,
        };
        let admit = b.admit(a, "acct-a", "u", huge).expect("no cpu quota");
        assert_eq!(admit.borrowed, Amounts::ZERO);
        assert_eq!(b.borrowed(a.unwrap()), Amounts::ZERO);
        b.check_invariants().expect("invariants");
    }

    #[test]
    fn queue_in_no_cohort_stops_at_nominal() {
        let mut b = book("[[queues]]\nname = \"solo\"\nnominal = { gpus = 2, cpus = 8 }\n");
        let q = ix(&b, "solo");
        b.admit(q, "x", "u", gpus(2)).expect("nominal");
        let block = b.check(q, "x", "u", gpus(1)).expect_err("no cohort");
        assert!(
            matches!(block, QuotaBlock::QueueNominal { .. }),
            "{block:?}"
        );
        assert_eq!(block.reason(), "QOSGrpGRES");
        assert_eq!(
            b.check(q, "x", "u", cpus(9)).expect_err("cpus").reason(),
            "QOSGrpCpuLimit"
        );
        assert_eq!(b.reclaimable(q.unwrap()), Amounts::ZERO);
    }

    #[test]
    fn per_user_limits_of_queue_and_account() {
        let mut b = book(
            r#"
            [[queues]]
            name = "a"
            nominal = { gpus = 64 }
            max_per_user = { gpus = 2, cpus = 16, mem_mib = 100 }
            accounts = ["ml"]

            [[accounts]]
            name = "ml"
            max_per_user = { nics = 1 }
            grp = { gpus = 3 }
            "#,
        );
        b.admit(None, "ml", "alice", gpus(2)).expect("alice's 2");
        let block = b
            .check(None, "ml", "alice", gpus(1))
            .expect_err("alice is at 2");
        assert_eq!(block.reason(), "QOSMaxGRESPerUser");
        insta::assert_snapshot!(
            block,
            @"user `alice` would use 3 gpus in queue `a`, above its max_per_user of 2 gpus by 1 gpu"
        );
        assert_eq!(
            b.check(None, "ml", "alice", cpus(17))
                .expect_err("cpus")
                .reason(),
            "QOSMaxCpuPerUserLimit"
        );
        let mem = Amounts {
            mem_mib: 101,
            ..Amounts::ZERO
        };
        assert_eq!(
            b.check(None, "ml", "alice", mem).expect_err("mem").reason(),
            "QOSMaxMemoryPerUser"
        );
        b.admit(None, "ml", "bob", gpus(1))
            .expect("bob has his own limit");
        // The account's total: 3 GPUs.
        let block = b
            .check(None, "ml", "carol", gpus(1))
            .expect_err("account total");
        assert_eq!(block.reason(), "AssocGrpGRES");
        let nic = Amounts {
            nics: 2,
            ..Amounts::ZERO
        };
        let block = b
            .check(None, "ml", "carol", nic)
            .expect_err("account per user");
        assert!(
            matches!(block, QuotaBlock::AccountUserLimit { .. }),
            "{block:?}"
        );
        assert_eq!(block.reason(), "AssocGrpGRES");
        b.check_invariants().expect("invariants");
    }

    #[test]
    fn job_count_limits() {
        let mut b = book(
            r#"
            [[queues]]
            name = "a"
            nominal = {}
            max_running_jobs_per_user = 2

            [[accounts]]
            name = "small"
            max_running_jobs_per_user = 1
            "#,
        );
        let a = ix(&b, "a");
        b.admit(a, "big", "u", cpus(1)).expect("first");
        b.admit(a, "big", "u", cpus(1)).expect("second");
        let block = b.check(a, "big", "u", cpus(1)).expect_err("third");
        assert_eq!(block.reason(), "QOSMaxJobsPerUserLimit");
        b.admit(a, "big", "v", cpus(1)).expect("another user");
        // Account limit, with and without a queue.
        b.admit(None, "small", "w", cpus(1))
            .expect("first in account");
        let block = b
            .check(a, "small", "w", cpus(1))
            .expect_err("account job limit");
        assert_eq!(block.reason(), "AssocMaxJobsLimit");
        b.release(None, "small", "w", cpus(1))
            .expect("admitted before");
        b.admit(a, "small", "w", cpus(1)).expect("freed");
        b.check_invariants().expect("invariants");
    }

    #[test]
    fn release_frees_quota_and_refuses_unknown_gangs() {
        let mut b = book(PAIR);
        let a = ix(&b, "a");
        b.admit(a, "acct-a", "u", gpus(12)).expect("full");
        assert!(b.check(a, "acct-a", "u", gpus(1)).is_err());
        assert_eq!(
            b.release(a, "acct-a", "u", gpus(11)),
            Err(QuotaError::NotAdmitted {
                queue: "queue `a`".into(),
                account: "acct-a".into(),
                user: "u".into(),
                amounts: gpus(11),
            })
        );
        // Released under the account's queue (named or not, the same queue).
        b.release(None, "acct-a", "u", gpus(12))
            .expect("admitted before");
        assert_eq!(b.used(a.unwrap()), Amounts::ZERO);
        assert!(b.release(a, "acct-a", "u", gpus(12)).is_err(), "only once");
        b.admit(a, "acct-a", "u", gpus(12)).expect("free again");
        b.check_invariants().expect("invariants");
    }

    #[test]
    fn whole_gangs_count_or_nothing_does() {
        let mut b = book(PAIR);
        let bq = ix(&b, "b");
        b.admit(ix(&b, "a"), "acct-a", "u", gpus(8))
            .expect("a's own");
        // 8 of b's GPUs are free but a gang of 12 (in one or more task groups) is one unit.
        let before = b.rows();
        assert!(b.admit(bq, "x", "v", gpus(12)).is_err());
        assert_eq!(b.rows(), before, "a refused gang leaves no trace");
        b.admit(bq, "x", "v", gpus(8)).expect("fits whole");
        assert_eq!(b.rows()[1].running_jobs, 1);
    }

    #[test]
    fn queue_resolution() {
        let mut b = book(
            r#"
            [[queues]]
            name = "a"
            nominal = { gpus = 1 }
            accounts = ["mapped"]

            [[queues]]
            name = "b"
            nominal = { gpus = 1 }

            [[accounts]]
            name = "loose"
            grp = { gpus = 5 }
            "#,
        );
        let (a, bq) = (ix(&b, "a"), ix(&b, "b"));
        assert_eq!(b.resolve(None, "mapped"), a);
        assert_eq!(b.resolve(bq, "mapped"), bq, "the named queue wins");
        assert_eq!(b.resolve(None, "loose"), None);
        assert_eq!(b.admit(None, "mapped", "u", gpus(1)).expect("a").queue, a);
        assert_eq!(
            b.admit(None, "loose", "u", gpus(5))
                .expect("no queue")
                .queue,
            None
        );
        assert_eq!(
            b.check(None, "loose", "u", gpus(1))
                .expect_err("grp")
                .reason(),
            "AssocGrpGRES"
        );
        assert_eq!(
            b.admit(None, "nobody", "u", gpus(1000))
                .expect("no limits")
                .borrowed,
            Amounts::ZERO
        );
        b.check_invariants().expect("invariants");
    }

    #[test]
    fn check_invariants_catches_counts_that_drift() {
        let mut b = book(PAIR);
        b.admit(ix(&b, "a"), "acct-a", "u", gpus(1)).expect("fits");
        b.queues[0].usage.amounts[2] += 1;
        assert!(matches!(
            b.check_invariants(),
            Err(QuotaViolation::CountMismatch { .. })
        ));
        let mut b = book(PAIR);
        b.count(Some(0), "acct-a", "u", None, gpus(13));
        assert!(matches!(
            b.check_invariants(),
            Err(QuotaViolation::AboveBorrowingLimit { .. })
        ));
        let mut b = book(PAIR);
        b.count(Some(1), "x", "u", None, gpus(17));
        assert!(matches!(
            b.check_invariants(),
            Err(QuotaViolation::CohortAboveNominal { .. })
        ));
    }

    #[test]
    fn restore_counts_a_running_gang_over_a_limit_and_says_which() {
        let mut b = book(PAIR);
        let a = ix(&b, "a");
        assert_eq!(b.restore(a, "acct-a", "u", gpus(8)), Ok(None));
        b.check_invariants().expect("within the limits");
        // Nominal 8 + borrowing 4: 6 more is above the borrowing limit, and counted anyway.
        let over = b.restore(a, "acct-a", "u", gpus(6)).expect("counted");
        assert!(
            matches!(over, Some(QuotaBlock::QueueBorrowingLimit { .. })),
            "{over:?}"
        );
        assert_eq!(b.used(a.expect("queue a")), gpus(14));
        assert!(b.check_invariants().is_err(), "the limit is broken");
        b.check_counts().expect("the counts still hold");
        assert!(
            b.check(a, "acct-a", "u", gpus(1)).is_err(),
            "nothing more fits"
        );
        b.release(a, "acct-a", "u", gpus(6))
            .expect("restored gangs release");
        b.check_invariants().expect("within the limits again");
        assert!(matches!(
            b.restore(Some(QueueIx(9)), "acct-a", "u", gpus(1)),
            Err(QuotaBlock::UnknownQueue { index: 9 })
        ));
    }

    #[test]
    fn quantities_read_as_units() {
        assert_eq!(Qty(Resource::Gpus, 1000).to_string(), "1 gpu");
        assert_eq!(Qty(Resource::Gpus, 2500).to_string(), "2.5 gpus");
        assert_eq!(Qty(Resource::Gpus, 125).to_string(), "0.125 gpus");
        assert_eq!(Qty(Resource::Cpus, 1).to_string(), "1 cpu");
        assert_eq!(Qty(Resource::Memory, 4096).to_string(), "4096 MiB");
        let block = QuotaBlock::CohortExhausted {
            queue: "b".into(),
            cohort: "c".into(),
            resource: Resource::Gpus,
            need: 5000,
            available: 4000,
            reclaimable: 4000,
        };
        insta::assert_snapshot!(
            block,
            @"queue `b` needs 5 gpus from the shared quota of cohort `c`, which has 4 gpus left (short by 1 gpu); 4 gpus of the queue's own nominal quota is lent to other queues"
        );
    }

    #[test]
    fn overflowing_requests_are_refused() {
        let mut b = book(PAIR);
        b.admit(None, "x", "u", cpus(u64::MAX)).expect("no limits");
        let block = b.check(None, "x", "u", cpus(1)).expect_err("overflow");
        assert_eq!(block.reason(), "AccountingPolicy");
    }

    // ---- property test -------------------------------------------------------------

    fn opt_lim(v: Option<(u64, u64)>) -> Option<QuotaAmounts> {
        v.map(|(g, c)| QuotaAmounts {
            cpus: Some(c),
            gpu_milli: Some(g * 1000),
            ..QuotaAmounts::UNLIMITED
        })
    }

    prop_compose! {
        fn arb_queue(i: usize, in_cohort: bool)(
            nominal in (0u64..8, 0u64..16),
            borrow in proptest::option::of((0u64..8, 0u64..16)),
            lend_frac in proptest::option::of((0u64..=100, 0u64..=100)),
            cap_extra in proptest::option::of((0u64..8, 0u64..16)),
            per_user in proptest::option::of((1u64..10, 1u64..20)),
            jobs in proptest::option::of(1u32..4),
            cpus_managed in any::<bool>(),
        ) -> QueueConfig {
            let unmanage = |q: Option<QuotaAmounts>| q.map(|q| QuotaAmounts {
                cpus: q.cpus.filter(|_| cpus_managed),
                ..q
            });
            let q = QueueConfig {
                name: format!("q{i}"),
                cohort: in_cohort.then(|| "c".to_string()),
                nominal: opt_lim(Some(nominal)).unwrap_or_default(),
                borrowing_limit: if in_cohort { opt_lim(borrow) } else { None },
                lending_limit: if in_cohort {
                    lend_frac.map(|(g, c)| QuotaAmounts {
                        cpus: Some(nominal.1 * c / 100),
                        gpu_milli: Some(nominal.0 * 1000 * g / 100),
                        ..QuotaAmounts::UNLIMITED
                    })
                } else {
                    None
                },
                capability: opt_lim(cap_extra.map(|(g, c)| (nominal.0 + g, nominal.1 + c))),
                weight: 1,
                accounts: if i == 0 { vec!["x".into()] } else { vec![] },
                max_per_user: opt_lim(per_user),
                max_running_jobs_per_user: jobs,
            };
            QueueConfig {
                nominal: unmanage(Some(q.nominal)).unwrap_or_default(),
                borrowing_limit: unmanage(q.borrowing_limit),
                lending_limit: unmanage(q.lending_limit),
                ..q
            }
        }
    }

    fn arb_config() -> impl Strategy<Value = QuotaConfig> {
        (
            arb_queue(0, true),
            arb_queue(1, true),
            arb_queue(2, true),
            arb_queue(3, false),
            proptest::option::of((0u64..16, 0u64..32)),
            proptest::option::of((0u64..8, 0u64..16)),
            proptest::option::of(1u32..4),
            proptest::option::of((0u64..12, 0u64..24)),
        )
            .prop_map(|(q0, q1, q2, q3, grp, per_user, jobs, ns)| QuotaConfig {
                queues: vec![q0, q1, q2, q3],
                accounts: vec![AccountConfig {
                    name: "y".into(),
                    grp: opt_lim(grp),
                    max_per_user: opt_lim(per_user),
                    max_running_jobs_per_user: jobs,
                }],
                namespaces: opt_lim(ns)
                    .map(|hard| NamespaceQuotaConfig {
                        namespace: "team".into(),
                        name: "quota".into(),
                        hard,
                    })
                    .into_iter()
                    .collect(),
            })
    }

    #[derive(Clone, Debug)]
    enum Op {
        Admit {
            queue: Option<usize>,
            account: usize,
            user: usize,
            namespace: usize,
            gpus: u64,
            cpus: u64,
        },
        Release(usize),
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (proptest::option::of(0usize..4), 0usize..3, 0usize..3, 0usize..3, 0u64..6, 0u64..8).prop_map(
                |(queue, account, user, namespace, gpus, cpus)| Op::Admit { queue, account, user, namespace, gpus, cpus }
            ),
            1 => any::<usize>().prop_map(Op::Release),
        ]
    }

    const ACCOUNTS: [&str; 3] = ["x", "y", "z"];
    const USERS: [&str; 3] = ["alice", "bob", "carol"];
    /// A gang admitted: queue, account, user, namespace, amounts.
    type Admitted = (
        Option<QueueIx>,
        &'static str,
        &'static str,
        Option<&'static str>,
        Amounts,
    );

    /// No namespace, the one with a quota (when generated), one without.
    const NAMESPACES: [Option<&str>; 3] = [None, Some("team"), Some("other")];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A borrowed charge hashes as the charge it borrows, and is equivalent to it alone.
        #[test]
        fn a_borrowed_charge_finds_its_charge(
            queue in proptest::option::of(0usize..3),
            account in "[a-c]{0,2}",
            user in "[a-c]{0,2}",
            namespace in proptest::option::of("[a-c]{0,2}"),
            other in "[a-c]{0,2}",
            g in 0u64..4,
        ) {
            use std::hash::BuildHasher;
            let key = ChargeRef {
                queue,
                account: &account,
                user: &user,
                namespace: namespace.as_deref(),
                amounts: gpus(g),
            };
            let charge = key.owned();
            let hasher = RandomState::default();
            prop_assert_eq!(hasher.hash_one(&key), hasher.hash_one(&charge));
            let same = |c: &Charge| hashbrown::Equivalent::equivalent(&key, c);
            prop_assert!(same(&charge));
            // One field another: not equivalent (the hash may collide).
            let other_queue = queue.map_or(Some(0), |q| (q > 0).then(|| q - 1));
            let queue_moved = Charge { queue: other_queue, ..charge.clone() };
            prop_assert!(!same(&queue_moved));
            let account_moved = Charge { account: other.clone(), ..charge.clone() };
            prop_assert_eq!(same(&account_moved), other == account);
            let user_moved = Charge { user: other.clone(), ..charge.clone() };
            prop_assert_eq!(same(&user_moved), other == user);
            let ns_moved = Charge { namespace: Some(other.clone()), ..charge.clone() };
            prop_assert_eq!(same(&ns_moved), namespace == Some(other));
            let ns_none = Charge { namespace: None, ..charge.clone() };
            prop_assert_eq!(same(&ns_none), namespace.is_none());
            let amounts_moved = Charge { amounts: gpus(g + 1), ..charge };
            prop_assert!(!same(&amounts_moved));
        }

        /// check ⇔ the state after admitting satisfies every limit; admit/release keep the
        /// invariants; `borrowed` moves by exactly what `Admit` says; headroom agrees.
        #[test]
        fn admissions_keep_every_limit(cfg in arb_config(), ops in proptest::collection::vec(arb_op(), 1..60)) {
            let mut book = QuotaBook::new(&cfg).expect("generated configs are valid");
            let mut running: Vec<Admitted> = Vec::new();
            for op in ops {
                match op {
                    Op::Admit { queue, account, user, namespace, gpus: g, cpus: c } => {
                        let queue = queue.map(QueueIx);
                        let (account, user, ns) = (ACCOUNTS[account], USERS[user], NAMESPACES[namespace]);
                        let want = gpus(g) + cpus(c);
                        let checked = book.check_in(queue, account, user, ns, want);
                        let target = book.resolve(queue, account);
                        let mut forced = book.clone();
                        forced.count(target.map(|q| q.0), account, user, ns, want);
                        prop_assert_eq!(checked.is_ok(), forced.check_invariants().is_ok(),
                            "check {:?} disagrees with the invariants {:?}", checked, forced.check_invariants());
                        if let Some(q) = target {
                            let queue_level = matches!(checked, Err(QuotaBlock::QueueCapability { .. }
                                | QuotaBlock::QueueBorrowingLimit { .. }
                                | QuotaBlock::QueueNominal { .. }
                                | QuotaBlock::CohortExhausted { .. }));
                            // Queue checks come before account checks, so a fit in headroom
                            // means no queue-level block.
                            let fits = want.fits_in(&book.headroom(q));
                            if checked.is_ok() { prop_assert!(fits); }
                            if queue_level { prop_assert!(!fits); }
                        }
                        let before = book.rows();
                        let borrowed_before = target.map(|q| book.borrowed(q));
                        let admitted = book.admit_in(queue, account, user, ns, want);
                        prop_assert_eq!(&admitted, &checked);
                        match admitted {
                            Ok(admit) => {
                                if let (Some(q), Some(bb)) = (target, borrowed_before) {
                                    prop_assert_eq!(book.borrowed(q), bb + admit.borrowed);
                                    let qs = &book.queues[q.0];
                                    for c in 0..N {
                                        if let (Some(n), Some(b)) = (qs.nominal[c], qs.borrowing[c]) {
                                            prop_assert!(qs.usage.amounts[c] <= n + b);
                                        }
                                    }
                                } else {
                                    prop_assert_eq!(admit.borrowed, Amounts::ZERO);
                                }
                                running.push((queue, account, user, ns, want));
                            }
                            Err(_) => prop_assert_eq!(book.rows(), before),
                        }
                    }
                    Op::Release(pick) => {
                        if running.is_empty() {
                            continue;
                        }
                        let (queue, account, user, ns, want) = running.swap_remove(pick % running.len());
                        book.release_in(queue, account, user, ns, want).expect("admitted before");
                    }
                }
                book.check_invariants().map_err(|v| TestCaseError::fail(v.to_string()))?;
            }
            for (queue, account, user, ns, want) in running {
                book.release_in(queue, account, user, ns, want).expect("admitted before");
            }
            prop_assert!(book.queues().all(|q| book.used(q).is_zero()));
            prop_assert!(book.ledger.is_empty() && book.account_usage.is_empty());
            prop_assert!(book.namespace_usage.is_empty());
            book.check_invariants().map_err(|v| TestCaseError::fail(v.to_string()))?;
        }
    }
}
