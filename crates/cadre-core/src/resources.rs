//! Countable resources: what one task asks for, and aggregate amounts.
//!
//! A task asks for CPU cores, memory, GPUs (whole devices, or a share of one device),
//! RDMA NICs and named countable resources (Slurm GRES / Kubernetes extended resources).
//! [`Amounts`] is the aggregate view that quotas, limits and the backfill profile count;
//! placement works on the devices themselves (see [`crate::placement`]).

use serde::{Deserialize, Serialize};
use std::ops::{Add, AddAssign, Mul, Sub, SubAssign};

/// One thousandth of a GPU: the unit of GPU amounts, so that shared GPUs count exactly.
pub const MILLI_PER_GPU: u32 = 1000;

/// What one task of a task group asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct TaskResources {
    /// CPU cores (hardware threads as the node shape counts them).
    pub cpus: u32,
    /// Memory in MiB.
    pub mem_mib: u64,
    /// Whole GPUs, as distinct devices.
    pub gpus: u32,
    /// A share of one GPU in milli-GPUs (1..=999), for GPUs shared by several tasks
    /// (Slurm shards, fractional GPUs). Mutually exclusive with `gpus`.
    pub gpu_share_milli: Option<u32>,
    /// The GPU model or device kind wanted (`a100`, `h100`, `mig-1g.10gb`); any if unset.
    pub gpu_model: Option<String>,
    /// RDMA NICs, allocated as devices (NUMA-local to the task where the topology asks).
    pub nics: u32,
    /// Named countable resources (GRES / extended resources) and their counts.
    pub named: Vec<(String, u64)>,
}

impl TaskResources {
    /// The aggregate amount this task counts for.
    pub fn amounts(&self) -> Amounts {
        Amounts {
            cpus: u64::from(self.cpus),
            mem_mib: self.mem_mib,
            gpu_milli: u64::from(self.gpus) * u64::from(MILLI_PER_GPU)
                + u64::from(self.gpu_share_milli.unwrap_or(0)),
            nics: u64::from(self.nics),
        }
    }

    /// Whether the task uses any GPU, whole or shared.
    pub fn wants_gpu(&self) -> bool {
        self.gpus > 0 || self.gpu_share_milli.is_some()
    }
}

/// Aggregate amounts of the countable device resources.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct Amounts {
    pub cpus: u64,
    pub mem_mib: u64,
    /// GPUs in thousandths (see [`MILLI_PER_GPU`]).
    pub gpu_milli: u64,
    pub nics: u64,
}

impl Amounts {
    pub const ZERO: Amounts = Amounts {
        cpus: 0,
        mem_mib: 0,
        gpu_milli: 0,
        nics: 0,
    };

    /// Whole GPUs, rounded up: a shared GPU still occupies a device.
    pub fn gpus_ceil(&self) -> u64 {
        self.gpu_milli.div_ceil(u64::from(MILLI_PER_GPU))
    }

    /// Every component of `self` is at most the same component of `other`.
    pub fn fits_in(&self, other: &Amounts) -> bool {
        self.cpus <= other.cpus
            && self.mem_mib <= other.mem_mib
            && self.gpu_milli <= other.gpu_milli
            && self.nics <= other.nics
    }

    /// Component-wise subtraction that stops at zero.
    pub fn saturating_sub(&self, other: &Amounts) -> Amounts {
        Amounts {
            cpus: self.cpus.saturating_sub(other.cpus),
            mem_mib: self.mem_mib.saturating_sub(other.mem_mib),
            gpu_milli: self.gpu_milli.saturating_sub(other.gpu_milli),
            nics: self.nics.saturating_sub(other.nics),
        }
    }

    /// Component-wise minimum.
    pub fn component_min(&self, other: &Amounts) -> Amounts {
        Amounts {
            cpus: self.cpus.min(other.cpus),
            mem_mib: self.mem_mib.min(other.mem_mib),
            gpu_milli: self.gpu_milli.min(other.gpu_milli),
            nics: self.nics.min(other.nics),
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == Amounts::ZERO
    }
}

impl Add for Amounts {
    type Output = Amounts;
    fn add(self, o: Amounts) -> Amounts {
        Amounts {
            cpus: self.cpus + o.cpus,
            mem_mib: self.mem_mib + o.mem_mib,
            gpu_milli: self.gpu_milli + o.gpu_milli,
            nics: self.nics + o.nics,
        }
    }
}

impl AddAssign for Amounts {
    fn add_assign(&mut self, o: Amounts) {
        *self = *self + o;
    }
}

/// Panics in debug builds on underflow: callers subtract only what they added.
impl Sub for Amounts {
    type Output = Amounts;
    fn sub(self, o: Amounts) -> Amounts {
        debug_assert!(o.fits_in(&self), "amount underflow: {self:?} - {o:?}");
        self.saturating_sub(&o)
    }
}

impl SubAssign for Amounts {
    fn sub_assign(&mut self, o: Amounts) {
        *self = *self - o;
    }
}

impl Mul<u64> for Amounts {
    type Output = Amounts;
    fn mul(self, n: u64) -> Amounts {
        Amounts {
            cpus: self.cpus * n,
            mem_mib: self.mem_mib * n,
            gpu_milli: self.gpu_milli * n,
            nics: self.nics * n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_gpu_counts_in_thousandths_and_occupies_a_device() {
        let t = TaskResources {
            cpus: 2,
            gpu_share_milli: Some(250),
            ..Default::default()
        };
        assert_eq!(t.amounts().gpu_milli, 250);
        assert_eq!(t.amounts().gpus_ceil(), 1);
        assert!(t.wants_gpu());
    }

    #[test]
    fn fits_in_is_component_wise() {
        let a = Amounts {
            cpus: 4,
            mem_mib: 10,
            gpu_milli: 1000,
            nics: 0,
        };
        let b = Amounts {
            cpus: 8,
            mem_mib: 5,
            gpu_milli: 8000,
            nics: 1,
        };
        assert!(!a.fits_in(&b));
        assert!(a.component_min(&b).fits_in(&b));
        assert_eq!((a * 2).gpu_milli, 2000);
    }
}
