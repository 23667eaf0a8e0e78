//! Why a job is pending, in Slurm's words.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A pending job's reason, named as Slurm's `squeue` names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum PendingReason {
    /// Not yet looked at by a scheduling pass.
    None,
    /// It would fit, but higher-priority jobs come first (reservations, strict order).
    Priority,
    /// Not enough free resources now.
    Resources,
    /// Waiting on another job.
    Dependency,
    /// Its dependency can never be satisfied.
    DependencyNeverSatisfied,
    /// Held by its user.
    JobHeldUser,
    /// Held by an administrator.
    JobHeldAdmin,
    /// Its `--begin` time has not come.
    BeginTime,
    /// Its partition is down.
    PartitionDown,
    /// Its time limit exceeds the partition's.
    PartitionTimeLimit,
    /// The nodes it could use are down or drained.
    ReqNodeNotAvail,
    /// It can never run on this cluster as asked.
    BadConstraints,
    /// A quota or limit holds it back: the reason name from [`crate::quota`].
    Limit(String),
    /// The queue it names was deleted while it waited.
    InvalidQueue,
    /// A job of the same name and user is running (`--dependency=singleton`).
    SingletonDependency,
    /// Resources are being freed by preempting other jobs for it.
    Preempting,
}

impl PendingReason {
    /// The reason as `squeue` prints it.
    pub fn as_str(&self) -> &str {
        match self {
            PendingReason::None => "None",
            PendingReason::Priority => "Priority",
            PendingReason::Resources => "Resources",
            PendingReason::Dependency => "Dependency",
            PendingReason::DependencyNeverSatisfied => "DependencyNeverSatisfied",
            PendingReason::JobHeldUser => "JobHeldUser",
            PendingReason::JobHeldAdmin => "JobHeldAdmin",
            PendingReason::BeginTime => "BeginTime",
            PendingReason::PartitionDown => "PartitionDown",
            PendingReason::PartitionTimeLimit => "PartitionTimeLimit",
            PendingReason::ReqNodeNotAvail => "ReqNodeNotAvail",
            PendingReason::BadConstraints => "BadConstraints",
            PendingReason::Limit(name) => name,
            PendingReason::InvalidQueue => "InvalidQueue",
            PendingReason::SingletonDependency => "Dependency",
            PendingReason::Preempting => "Resources",
        }
    }
}

impl PendingReason {
    /// The reason for a job that placement could not place.
    pub fn from_placement(fail: &crate::placement::PlacementFailure) -> PendingReason {
        match fail.reason() {
            "Resources" => PendingReason::Resources,
            "ReqNodeNotAvail" => PendingReason::ReqNodeNotAvail,
            _ => PendingReason::BadConstraints,
        }
    }
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
