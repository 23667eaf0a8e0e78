//! What a caller may set in a job's spec: the one function that both a submission and an
//! update (`PATCH /jobs/{id}`, `scontrol update`) go through, so that submitting a job can
//! never do what changing it may not.
//!
//! **Given** the caller, the job's spec as it is (`None` for a submission) and the spec
//! asked for. **Decided**: whether the caller may make that change. **Must hold**: a rule
//! of one path is a rule of the other: a non-administrator neither submits nor changes a
//! job of another user, never sets a negative nice value, never raises a time limit (at
//! submission there is none to raise) nor sets one beyond [`MAX_TIME_LIMIT_SECS`].
//!
//! Array membership is not the caller's to set at all ([`check_arrays`]): a job is a task
//! of an array only of one submitted in the same request, whose id the controller gives.
//!
//! Not here: what the scheduler checks of any spec whoever asks (the partition, QOS and
//! priority class exist, the user has an association with the account unless associations
//! are created on demand, the queue exists): `Scheduler::validate` at submission. No update
//! changes those fields today; one that does must add its rule here.

use crate::api_error::ApiError;
use crate::auth::Principal;
use crate::limits::{LimitError, MAX_TIME_LIMIT_SECS};
use cadre_core::job::JobSpec;
use cadre_proto::api::{ErrorCode, ErrorReason};
use cadre_store::NewJob;

/// Whether `who` may make a job's spec `wanted`: a new job (`current` is `None`), or a
/// change of the job whose spec is `current`. Only what changes is judged.
pub fn check_spec_change(
    who: &Principal,
    current: Option<&JobSpec>,
    wanted: &JobSpec,
) -> Result<(), ApiError> {
    let forbidden = |message: String| Err(ApiError::new(ErrorCode::Forbidden, message));
    if !who.admin && wanted.user != who.user {
        return forbidden(format!(
            "`{}` may not submit or change a job of user `{}`",
            who.user, wanted.user
        ));
    }
    if wanted.time_limit.0 > MAX_TIME_LIMIT_SECS
        && current.is_none_or(|c| c.time_limit != wanted.time_limit)
    {
        return Err(LimitError::new(
            "time_limit",
            wanted.time_limit.0,
            format!("at most {MAX_TIME_LIMIT_SECS} seconds (0: none)"),
        )
        .answer(""));
    }
    if who.admin {
        return Ok(());
    }
    let forbidden_field = |field: &str, message: String| {
        Err(ApiError::because(ErrorReason::ForbiddenField, message).about(field))
    };
    if wanted.nice < 0 && current.is_none_or(|c| c.nice != wanted.nice) {
        return forbidden_field(
            "nice",
            format!(
                "only an administrator may set a negative nice value (nice {})",
                wanted.nice
            ),
        );
    }
    if let Some(c) = current {
        let (now, asked) = (c.time_limit.0, wanted.time_limit.0);
        if now != 0 && (asked == 0 || asked > now) {
            return forbidden_field(
                "time_limit",
                format!(
                    "only an administrator may raise job time limits (this one is {now} s, {asked} s asked)"
                ),
            );
        }
    }
    Ok(())
}

/// Whether the arrays of a submission's `jobs` (users resolved) are ones the controller
/// assigns. A job is a task of an array only through `array_of`: the position in the same
/// request of the array's first task, whose own `array_of` is itself and whose user is
/// the same; the controller then sets `spec.array.array_job` to that task's id. An
/// `array_job` the client names itself, without `array_of`, is refused: naming an existing
/// array (another user's) would make the job a task of it, in that array's `squeue`,
/// `scancel` and dependencies and under its `%N` limit.
pub fn check_arrays(jobs: &[NewJob]) -> Result<(), ApiError> {
    let count = jobs.len();
    let invalid = |message: String| Err(ApiError::new(ErrorCode::InvalidRequest, message));
    for (i, job) in jobs.iter().enumerate() {
        let Some(p) = job.array_of else {
            if let Some(a) = &job.spec.array {
                return invalid(format!(
                    "jobs[{i}].spec.array: names array {} without `array_of`: a job is a \
                     task of an array only of one submitted in the same request (`array_of`: \
                     the position of its first task), whose id the controller gives",
                    a.array_job
                ));
            }
            continue;
        };
        if p >= count || job.spec.array.is_none() {
            return invalid(format!(
                "jobs[{i}].array_of: {p} must name a job of this request ({count} jobs), and \
                 the job must have `spec.array`"
            ));
        }
        let first = &jobs[p];
        if first.array_of != Some(p) {
            return invalid(format!(
                "jobs[{i}].array_of: jobs[{p}] is not the first task of an array (its own \
                 `array_of` must be {p})"
            ));
        }
        if first.spec.user != job.spec.user {
            return invalid(format!(
                "jobs[{i}].array_of: jobs[{p}]'s array is of user `{}`, not `{}`",
                first.spec.user, job.spec.user
            ));
        }
    }
    Ok(())
}

/// Whether `who` may submit a workload that mounts paths of the node (`hostPath` volumes):
/// an administrator only, since the root agent binds the path for the task whatever the
/// permissions of the directories above it.
pub fn check_host_paths(who: &Principal, run: &cadre_core::run::RunSpec) -> Result<(), ApiError> {
    if who.admin {
        return Ok(());
    }
    let Ok(Some(t)) = cadre_k8s::workload_of(run) else {
        return Ok(());
    };
    match cadre_k8s::storage::host_paths_of(&t).first() {
        None => Ok(()),
        Some(p) => Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "hostPath volume `{p}`: only an administrator's workloads mount paths of the \
                 node (a root agent would bind it past the permissions of the directories \
                 above it); `{}` is not one: use a PersistentVolumeClaim",
                who.user
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Via;
    use cadre_core::resources::TaskResources;
    use cadre_core::time::Dur;

    fn who(admin: bool) -> Principal {
        Principal {
            user: "alice".into(),
            admin,
            via: Via::Token,
        }
    }

    fn spec(nice: i32, limit: u64) -> JobSpec {
        let mut s = JobSpec::simple("alice", "alice", 1, TaskResources::default(), Dur(limit));
        s.nice = nice;
        s
    }

    fn code(r: Result<(), ApiError>) -> Option<ErrorCode> {
        r.err().map(|e| e.code)
    }

    /// A job of `user`: a task (`index`) of an array when `array` is given, with `array_of`.
    fn job(user: &str, array: Option<(u64, u32)>, array_of: Option<usize>) -> NewJob {
        let mut spec = spec(0, 60);
        spec.user = user.into();
        spec.array = array.map(|(id, index)| cadre_core::job::ArrayIndex {
            array_job: cadre_core::job::JobId(id),
            index,
            max_running: None,
        });
        NewJob {
            spec,
            run: cadre_core::run::RunSpec::command(vec!["true".into()], "/tmp".into()),
            partition: String::new(),
            array_of,
        }
    }

    fn message(r: Result<(), ApiError>) -> String {
        r.err().map(|e| e.message).unwrap_or_default()
    }

    /// Regression (issue 14): a submission whose `spec.array.array_job` named an existing
    /// array, without `array_of`, made the job a task of that array, another user's too.
    #[test]
    fn a_job_joins_only_an_array_of_its_own_request() {
        // What `sbatch --array` sends: every task names the first, the first itself.
        let array = [
            job("alice", Some((0, 0)), Some(0)),
            job("alice", Some((0, 1)), Some(0)),
            job("alice", Some((0, 2)), Some(0)),
        ];
        assert_eq!(code(check_arrays(&array)), None);
        assert_eq!(code(check_arrays(&[job("alice", None, None)])), None);
        // An array named by its id: refused, whoever's it is.
        let joins = [job("bob", Some((7, 3)), None)];
        assert_eq!(
            message(check_arrays(&joins)),
            "jobs[0].spec.array: names array 7 without `array_of`: a job is a task of an \
             array only of one submitted in the same request (`array_of`: the position of \
             its first task), whose id the controller gives"
        );
        assert_eq!(code(check_arrays(&joins)), Some(ErrorCode::InvalidRequest));
        // `array_of` out of the request, on a job with no `spec.array`, at a job that is
        // not an array's first task, or at another user's.
        for (jobs, field) in [
            (
                vec![job("a", Some((0, 0)), Some(1))],
                "jobs[0].array_of: 1 must",
            ),
            (vec![job("a", None, Some(0))], "jobs[0].array_of: 0 must"),
            (
                vec![job("a", None, None), job("a", Some((0, 1)), Some(0))],
                "jobs[1].array_of: jobs[0] is not the first task",
            ),
            (
                vec![
                    job("a", Some((0, 0)), Some(1)),
                    job("a", Some((0, 1)), Some(0)),
                ],
                "jobs[0].array_of: jobs[1] is not the first task",
            ),
            (
                vec![
                    job("a", Some((0, 0)), Some(0)),
                    job("b", Some((0, 1)), Some(0)),
                ],
                "jobs[1].array_of: jobs[0]'s array is of user `a`, not `b`",
            ),
        ] {
            let said = message(check_arrays(&jobs));
            assert!(said.starts_with(field), "{said}");
        }
    }

    #[test]
    fn a_submission_is_held_to_the_rules_of_an_update() {
        let (user, admin) = (who(false), who(true));
        let forbidden = Some(ErrorCode::Forbidden);
        // Nice: negative only by an administrator, submitted or set.
        let bad = spec(i32::MIN, 60);
        assert_eq!(code(check_spec_change(&user, None, &bad)), forbidden);
        assert_eq!(
            code(check_spec_change(&user, Some(&spec(0, 60)), &bad)),
            forbidden
        );
        assert_eq!(code(check_spec_change(&admin, None, &bad)), None);
        assert_eq!(code(check_spec_change(&user, None, &spec(10, 60))), None);
        // Time limit: raised only by an administrator; bounded for everyone.
        assert_eq!(
            code(check_spec_change(&user, Some(&spec(0, 60)), &spec(0, 120))),
            forbidden
        );
        assert_eq!(
            code(check_spec_change(&user, Some(&spec(0, 60)), &spec(0, 30))),
            None
        );
        assert_eq!(
            code(check_spec_change(&admin, None, &spec(0, u64::MAX))),
            Some(ErrorCode::InvalidRequest)
        );
        // Another user's job.
        let mut bobs = spec(0, 60);
        bobs.user = "bob".into();
        assert_eq!(code(check_spec_change(&user, None, &bobs)), forbidden);
        assert_eq!(code(check_spec_change(&admin, None, &bobs)), None);
    }
}
