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
//! Not here: what the scheduler checks of any spec whoever asks (the partition, QOS and
//! priority class exist, the user has an association with the account unless associations
//! are created on demand, the queue exists): `Scheduler::validate` at submission. No update
//! changes those fields today; one that does must add its rule here.

use crate::api_error::ApiError;
use crate::auth::Principal;
use crate::limits::{LimitError, MAX_TIME_LIMIT_SECS};
use cadre_core::job::JobSpec;
use cadre_proto::api::ErrorCode;

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
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            LimitError::new(
                "time_limit",
                wanted.time_limit.0,
                format!("at most {MAX_TIME_LIMIT_SECS} seconds (0: none)"),
            )
            .to_string(),
        ));
    }
    if who.admin {
        return Ok(());
    }
    if wanted.nice < 0 && current.is_none_or(|c| c.nice != wanted.nice) {
        return forbidden(format!(
            "only an administrator may set a negative nice value (nice {})",
            wanted.nice
        ));
    }
    if let Some(c) = current {
        let (now, asked) = (c.time_limit.0, wanted.time_limit.0);
        if now != 0 && (asked == 0 || asked > now) {
            return forbidden(format!(
                "only an administrator may raise job time limits (this one is {now} s, {asked} s asked)"
            ));
        }
    }
    Ok(())
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
