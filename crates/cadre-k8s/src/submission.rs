//! What a translated workload is submitted as: a job spec and a run spec that carries the
//! translation itself, for the agent.
//!
//! **Why the translation and not the manifest.** The per-rank contracts (names, variables,
//! host files, programs) are computed where the tasks land, by the agent, from the
//! [`Translated`] job and the placement ([`crate::contract`]). The agent gets the
//! translation made at submission rather than the manifest to translate again: what was
//! checked and accepted at `cadre apply` is exactly what runs, whatever version of this
//! crate the agent has, and the agent never parses YAML. The translation travels as JSON
//! in the run spec's `kubernetes` field, as a [`WorkloadRun`] with a version number
//! ([`WORKLOAD_RUN_VERSION`]); a reader refuses a version it does not know, and a new
//! field of the translation means a new version.
//!
//! The run spec itself holds what does not depend on the rank (the first group's program
//! and working directory, for display; no exported submitter environment; output in
//! `<name>-<job id>-<rank>.out`; the kill wait) and the groups whose success completes the
//! job ([`cadre_core::run::RunSpec::completing_groups`]).

use crate::contract::completing_groups;
use crate::error::K8sError;
use crate::model::{Completion, Program, Translated};
use cadre_core::job::JobSpec;
use cadre_core::run::RunSpec;
use serde::{Deserialize, Serialize};

/// The version of [`WorkloadRun`] this crate writes. Version 2 added containers
/// ([`Translated::containers`], [`crate::Program::Image`], pull policies); a version-1
/// translation, which has none, reads as one that runs on the host.
pub const WORKLOAD_RUN_VERSION: u32 = 2;

/// The versions this crate reads.
const READS: [u64; 2] = [1, 2];

/// A job's translation as its run spec carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadRun {
    pub version: u32,
    pub workload: Translated,
}

/// The job spec and run spec of a translated workload: the spec with the workload's
/// identity in its annotations (`k8s.kind`, `k8s.namespace`, `k8s.name`), and the run
/// spec carrying the translation. Refused when a group runs in its image in a workload
/// whose containers run on the host (a translation no `translate` makes).
pub fn submission(t: &Translated) -> Result<(JobSpec, RunSpec), K8sError> {
    if !t.containers
        && let Some(g) = t
            .groups
            .iter()
            .position(|run| matches!(run.program, Program::Image { .. }))
    {
        return Err(K8sError::Contract {
            what: format!(
                "group `{}` of `{}` runs in its image, but the workload was translated to run on \
                 the host",
                t.spec.groups.get(g).map_or("", |x| x.name.as_str()),
                t.name
            ),
        });
    }
    let mut spec = t.spec.clone();
    spec.annotations.insert("k8s.name".into(), t.name.clone());
    spec.annotations
        .insert("k8s.namespace".into(), t.namespace.clone());
    let mut run = t.run_spec(0).ok_or_else(|| K8sError::Contract {
        what: format!("`{}` has no task group", t.name),
    })?;
    run.completing_groups = match &t.completion {
        Completion::AllTasks => None,
        Completion::Groups(_) => Some(
            completing_groups(t)
                .into_iter()
                .map(|g| u16::try_from(g).unwrap_or(u16::MAX))
                .collect(),
        ),
    };
    let carried = WorkloadRun {
        version: WORKLOAD_RUN_VERSION,
        workload: t.clone(),
    };
    run.kubernetes = Some(
        serde_json::to_value(&carried).map_err(|e| K8sError::Payload {
            what: e.to_string(),
        })?,
    );
    Ok((spec, run))
}

/// The translation a run spec carries, if any; an unknown version or a malformed one is an
/// error that says which.
pub fn workload_of(run: &RunSpec) -> Result<Option<Translated>, K8sError> {
    let Some(value) = &run.kubernetes else {
        return Ok(None);
    };
    let version = value.get("version").and_then(serde_json::Value::as_u64);
    if !version.is_some_and(|v| READS.contains(&v)) {
        return Err(K8sError::Payload {
            what: match version {
                Some(v) => {
                    format!("it is version {v}; this cadre reads versions 1 and 2")
                }
                None => "it has no version number".into(),
            },
        });
    }
    let carried: WorkloadRun =
        serde_json::from_value(value.clone()).map_err(|e| K8sError::Payload {
            what: e.to_string(),
        })?;
    Ok(Some(carried.workload))
}
