//! Job states as Slurm names them: the long names (`squeue %T`, `sacct`'s `State`,
//! `scontrol show job`'s `JobState=`) and the compact codes (`squeue %t`), in Slurm's order.
//! The one table of them, for every Slurm command cadre implements.
//!
//! Not here: cadre's own names for its states (the API's, [`JobState`]'s `Display`). They
//! differ in one: a job stopping to make room for another is cadre's `PREEMPTING` and, since
//! its resources are still held, Slurm's `COMPLETING`.

use cadre_core::job::JobState;

/// A state's long name and compact code.
const fn names(s: JobState) -> (&'static str, &'static str) {
    match s {
        JobState::Pending => ("PENDING", "PD"),
        JobState::Running => ("RUNNING", "R"),
        JobState::Preempting => ("COMPLETING", "CG"),
        JobState::Completed => ("COMPLETED", "CD"),
        JobState::Failed => ("FAILED", "F"),
        JobState::Cancelled => ("CANCELLED", "CA"),
        JobState::Timeout => ("TIMEOUT", "TO"),
        JobState::NodeFail => ("NODE_FAIL", "NF"),
        JobState::OutOfMemory => ("OUT_OF_MEMORY", "OOM"),
        JobState::Preempted => ("PREEMPTED", "PR"),
    }
}

/// The long name (`PENDING`, `COMPLETING`).
pub const fn long(s: JobState) -> &'static str {
    names(s).0
}

/// The compact code (`PD`, `CG`).
pub const fn compact(s: JobState) -> &'static str {
    names(s).1
}

/// Every state, in Slurm's order (pending first, then running, then the ends).
pub const ALL: [JobState; 10] = [
    JobState::Pending,
    JobState::Running,
    JobState::Completed,
    JobState::Cancelled,
    JobState::Failed,
    JobState::Timeout,
    JobState::NodeFail,
    JobState::Preempted,
    JobState::OutOfMemory,
    JobState::Preempting,
];

/// Where a state sorts (`squeue`'s order by state: Slurm's own numbering).
pub fn rank(s: JobState) -> usize {
    ALL.iter().position(|&x| x == s).unwrap_or(0)
}

/// Job states Slurm names that cadre's jobs are never in (long and compact forms): a
/// filter on them is valid and selects nothing.
pub const OTHER: [(&str, &str); 14] = [
    ("SUSPENDED", "S"),
    ("BOOT_FAIL", "BF"),
    ("DEADLINE", "DL"),
    ("CONFIGURING", "CF"),
    ("RESIZING", "RS"),
    ("RESV_DEL_HOLD", "RD"),
    ("REQUEUED", "RQ"),
    ("REQUEUE_FED", "RF"),
    ("REQUEUE_HOLD", "RH"),
    ("REVOKED", "RV"),
    ("SIGNALING", "SI"),
    ("SPECIAL_EXIT", "SE"),
    ("STAGE_OUT", "SO"),
    ("STOPPED", "ST"),
];

/// Whether `text` names a Slurm job state that cadre's jobs are never in.
pub fn is_other(text: &str) -> bool {
    let t = text.trim().to_ascii_uppercase();
    OTHER.iter().any(|(long, short)| *long == t || *short == t)
}

/// A state name in either form, any case (`pd`, `Running`, `CG`). `None` if unknown.
pub fn parse(text: &str) -> Option<JobState> {
    let t = text.trim().to_ascii_uppercase();
    ALL.iter()
        .copied()
        .find(|&s| compact(s) == t || long(s) == t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_parse_in_both_forms_and_any_case() {
        assert_eq!(parse("pd"), Some(JobState::Pending));
        assert_eq!(parse("Running"), Some(JobState::Running));
        assert_eq!(parse("OOM"), Some(JobState::OutOfMemory));
        assert_eq!(parse("CG"), Some(JobState::Preempting));
        assert_eq!(parse("bogus"), None);
        for s in ALL {
            assert_eq!(parse(compact(s)), Some(s));
            assert_eq!(parse(long(s)), Some(s));
        }
    }

    #[test]
    fn cadre_and_slurm_names_differ_only_for_a_job_stopping_for_another() {
        for s in ALL {
            if s == JobState::Preempting {
                assert_eq!(
                    (long(s), s.to_string().as_str()),
                    ("COMPLETING", "PREEMPTING")
                );
            } else {
                assert_eq!(long(s), s.to_string());
            }
            assert!(!is_other(long(s)) && !is_other(compact(s)), "{s}");
        }
        assert!(is_other("st") && is_other("Suspended"));
    }
}
