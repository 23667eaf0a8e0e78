//! `--dependency`: `type:job[:job...]` terms joined by `,` (all must hold) or `?` (any
//! may), never both; a bare job id is `afterany`; targets may be array tasks (`12_3`) and
//! `after` targets may wait minutes more (`after:12+5`); `singleton`.
//!
//! Slurm refuses a malformed list in the controller ("Job dependency problem"), so errors
//! here are submission failures. `aftercorr` and `afterburstbuffer` parse but cadre's
//! scheduler has no equivalent; the converter refuses them.

use crate::error::SlurmError;
use std::fmt;

/// The kinds of dependency Slurm knows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DepKind {
    After,
    AfterAny,
    AfterOk,
    AfterNotOk,
    AfterCorr,
    AfterBurstBuffer,
    Singleton,
}

impl DepKind {
    fn name(self) -> &'static str {
        match self {
            DepKind::After => "after",
            DepKind::AfterAny => "afterany",
            DepKind::AfterOk => "afterok",
            DepKind::AfterNotOk => "afternotok",
            DepKind::AfterCorr => "aftercorr",
            DepKind::AfterBurstBuffer => "afterburstbuffer",
            DepKind::Singleton => "singleton",
        }
    }
}

/// One job (or array task) a dependency waits on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DepTarget {
    pub job: u64,
    /// An array task of `job` (`12_3`).
    pub task: Option<u32>,
    /// `after:12+5`: minutes after the other job started.
    pub plus_minutes: Option<u32>,
}

/// One dependency on one target (Slurm shows each target as its own entry).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DepEntry {
    pub kind: DepKind,
    /// `None` for `singleton`.
    pub target: Option<DepTarget>,
}

impl fmt::Display for DepEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        if let Some(t) = self.target {
            write!(f, ":{}", t.job)?;
            if let Some(task) = t.task {
                write!(f, "_{task}")?;
            }
            if let Some(m) = t.plus_minutes {
                write!(f, "+{m}")?;
            }
        }
        Ok(())
    }
}

/// A parsed `--dependency` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DependencySpec {
    pub entries: Vec<DepEntry>,
    /// Joined by `?`: any entry satisfies the job.
    pub any: bool,
}

impl DependencySpec {
    /// The separator Slurm shows between entries.
    pub fn separator(&self) -> char {
        if self.any { '?' } else { ',' }
    }
}

fn problem() -> SlurmError {
    SlurmError::submission("Job dependency problem")
}

fn parse_target(text: &str, kind: DepKind) -> Result<DepTarget, SlurmError> {
    let (id, plus) = match text.split_once('+') {
        Some((id, m)) if kind == DepKind::After => (id, Some(m.parse().map_err(|_| problem())?)),
        Some(_) => return Err(problem()),
        None => (text, None),
    };
    let (job, task) = match id.split_once('_') {
        Some((j, t)) => (j, Some(t.parse::<u32>().map_err(|_| problem())?)),
        None => (id, None),
    };
    if job.is_empty() || !job.bytes().all(|b| b.is_ascii_digit()) {
        return Err(problem());
    }
    let job: u64 = job.parse().map_err(|_| problem())?;
    if job == 0 {
        return Err(problem());
    }
    Ok(DepTarget {
        job,
        task,
        plus_minutes: plus,
    })
}

/// Parses a `--dependency` value.
pub fn parse_dependency(value: &str) -> Result<DependencySpec, SlurmError> {
    let any = value.contains('?');
    if any && value.contains(',') {
        return Err(problem());
    }
    let mut entries = Vec::new();
    for term in value.split([',', '?']) {
        if term == "singleton" {
            entries.push(DepEntry {
                kind: DepKind::Singleton,
                target: None,
            });
            continue;
        }
        let parts: Vec<&str> = term.split(':').collect();
        let kind = match parts[0] {
            "after" => DepKind::After,
            "afterany" => DepKind::AfterAny,
            "afterok" => DepKind::AfterOk,
            "afternotok" => DepKind::AfterNotOk,
            "aftercorr" => DepKind::AfterCorr,
            "afterburstbuffer" => DepKind::AfterBurstBuffer,
            _ if parts.len() == 1 => {
                entries.push(DepEntry {
                    kind: DepKind::AfterAny,
                    target: Some(parse_target(parts[0], DepKind::AfterAny)?),
                });
                continue;
            }
            _ => return Err(problem()),
        };
        if parts.len() < 2 {
            return Err(problem());
        }
        for t in &parts[1..] {
            entries.push(DepEntry {
                kind,
                target: Some(parse_target(t, kind)?),
            });
        }
    }
    Ok(DependencySpec { entries, any })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(v: &str) -> String {
        let d = parse_dependency(v).unwrap();
        d.entries
            .iter()
            .map(|e| format!("{e}(unfulfilled)"))
            .collect::<Vec<_>>()
            .join(&d.separator().to_string())
    }

    #[test]
    fn dependencies_show_one_entry_per_target_as_slurm_does() {
        assert_eq!(
            shown("afterok:1:2,afterany:3"),
            "afterok:1(unfulfilled),afterok:2(unfulfilled),afterany:3(unfulfilled)"
        );
        assert_eq!(
            shown("afterok:1?afternotok:2"),
            "afterok:1(unfulfilled)?afternotok:2(unfulfilled)"
        );
        assert_eq!(shown("singleton"), "singleton(unfulfilled)");
        assert_eq!(shown("after:1+5"), "after:1+5(unfulfilled)");
        assert_eq!(shown("1"), "afterany:1(unfulfilled)");
        assert_eq!(shown("afterany:1_2"), "afterany:1_2(unfulfilled)");
    }

    #[test]
    fn malformed_dependencies_are_a_dependency_problem() {
        for bad in [
            "1:2",
            "foo",
            "afterok",
            "afterok:",
            "afterok:x",
            "afterok:1,afterany:2?afterok:3",
            "afterok:1+5",
            "afterok:0",
        ] {
            assert_eq!(
                parse_dependency(bad).unwrap_err().to_string(),
                "Batch job submission failed: Job dependency problem",
                "{bad}"
            );
        }
    }
}
