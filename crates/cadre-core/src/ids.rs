//! The indices of a cluster's tables ([`NodeId`], [`SwitchId`], [`BlockId`],
//! [`PartitionId`], [`ShapeId`]), re-exported by [`crate::cluster`].
//!
//! They live apart from the cluster because the model's other parts name nodes too: an
//! allocation says which node each task is on, and the cluster books allocations, so with
//! the indices in `cluster` the two modules would import each other.

use serde::{Deserialize, Serialize};

/// Index of a node in [`crate::cluster::Cluster::nodes`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct NodeId(pub u32);

/// Index of a switch in [`crate::cluster::Cluster::switches`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SwitchId(pub u32);

/// Index of an NVLink block in [`crate::cluster::Cluster::blocks`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BlockId(pub u32);

/// Index of a partition in [`crate::cluster::Cluster::partitions`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PartitionId(pub u16);

/// Index of a node shape in [`crate::cluster::Cluster::shapes`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ShapeId(pub u16);
