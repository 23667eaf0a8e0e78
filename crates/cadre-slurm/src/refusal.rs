//! The controller's refusals in Slurm's words: the one table from the API's reason (an
//! [`ErrorReason`], never its message text or its HTTP status alone) to the error Slurm
//! reports for the same refusal, and the exit code the command ends with.
//!
//! Given: the reason of the API's answer (none when the answer was not the API's error
//! body, such as a proxy's page), and what the command asked for ([`Request`]): a
//! `not_found` of `scontrol update NodeName=` is an unknown node, of `scancel` an unknown
//! job. Decided: Slurm's error ([`SlurmErrno`], whose text is `slurm_strerror`'s), or none
//! where Slurm has no words for it and the controller's message is printed as it is; and
//! the exit code. Each command prints the text in its own frame (`scancel: error: Kill job
//! error on job id 12: ...`, `slurm_update error: ...`, `Batch job submission failed: ...`).

use cadre_proto::api::ErrorReason;
use cadre_proto::exit::ERROR as EXIT_ERROR;

/// What a command asked the controller for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// A submission (`sbatch`, `srun`, `salloc`) and what it reads to prepare one.
    Submit,
    /// A job's or a step's cancellation or signal (`scancel`).
    Cancel,
    /// A change to a job (`scontrol update JobId=`, `hold`, `release`, `requeue`, ...);
    /// `ended`: the command saw the job ended before it asked.
    ChangeJob { ended: bool },
    /// A change to a node (`scontrol update NodeName=`).
    ChangeNode,
}

/// An error of Slurm's API (`ESLURM_*`), by the text `slurm_strerror` gives it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SlurmErrno {
    /// `ESLURM_INVALID_JOB_ID`.
    InvalidJobId,
    /// `ESLURM_INVALID_NODE_NAME`.
    InvalidNodeName,
    /// `ESLURM_ACCESS_DENIED`.
    AccessDenied,
    /// `ESLURM_ALREADY_DONE`.
    AlreadyDone,
    /// `ESLURM_JOB_FINISHED`.
    JobFinished,
    /// `ESLURM_INVALID_QOS`.
    InvalidQos,
    /// `ESLURM_DEPENDENCY`.
    DependencyProblem,
    /// `ESLURM_INVALID_PARTITION_NAME`.
    InvalidPartitionName,
    /// `ESLURM_INVALID_FEATURE`.
    InvalidFeature,
}

impl SlurmErrno {
    /// The text Slurm prints for the error.
    pub fn text(self) -> &'static str {
        match self {
            SlurmErrno::InvalidJobId => "Invalid job id specified",
            SlurmErrno::InvalidNodeName => "Invalid node name specified",
            SlurmErrno::AccessDenied => "Access/permission denied",
            SlurmErrno::AlreadyDone => "Job/step already completing or completed",
            SlurmErrno::JobFinished => "Job has already finished",
            SlurmErrno::InvalidQos => "Invalid qos specification",
            SlurmErrno::DependencyProblem => "Job dependency problem",
            SlurmErrno::InvalidPartitionName => "Invalid partition name specified",
            SlurmErrno::InvalidFeature => "Invalid feature specification",
        }
    }
}

impl std::fmt::Display for SlurmErrno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

/// A refusal as a Slurm command reports it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Slurm's error, or `None`: the controller's message is printed as it is.
    pub errno: Option<SlurmErrno>,
    /// The command's exit code.
    pub exit_code: u8,
}

/// The table: the refusal `reason` of `request` in Slurm's terms. `exit_error` is
/// `$SLURM_EXIT_ERROR`, which Slurm applies to failed submissions only.
pub fn refusal(reason: Option<ErrorReason>, request: Request, exit_error: Option<u8>) -> Refusal {
    use ErrorReason as R;
    use Request::*;
    use SlurmErrno as E;
    let errno = match (reason, request) {
        (Some(R::UnknownQos), _) => Some(E::InvalidQos),
        (Some(R::DependencyNotFound), _) => Some(E::DependencyProblem),
        (Some(R::UnknownPartition), _) => Some(E::InvalidPartitionName),
        (Some(R::Forbidden | R::ForbiddenField), _) => Some(E::AccessDenied),
        (Some(R::NotFound), Cancel | ChangeJob { .. }) => Some(E::InvalidJobId),
        (Some(R::NotFound), ChangeNode) => Some(E::InvalidNodeName),
        // A job that cannot be cancelled any more has ended or is ending; a change refused
        // by state is that only when the job has ended (not a hold of a running job: there
        // the controller's message says why).
        (Some(R::Conflict), Cancel) => Some(E::AlreadyDone),
        (Some(R::Conflict), ChangeJob { ended: true }) => Some(E::JobFinished),
        _ => None,
    };
    Refusal {
        errno,
        exit_code: request.exit_code(exit_error),
    }
}

impl Request {
    /// The exit code of a command whose request failed, whatever the reason.
    /// `exit_error` is `$SLURM_EXIT_ERROR`, which Slurm applies to failed submissions only.
    pub fn exit_code(self, exit_error: Option<u8>) -> u8 {
        match self {
            Request::Submit => exit_error.unwrap_or(EXIT_ERROR),
            Request::Cancel | Request::ChangeJob { .. } | Request::ChangeNode => EXIT_ERROR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_map_to_slurms_errors_by_what_was_asked() {
        let errno = |r, q| refusal(Some(r), q, None).errno;
        assert_eq!(
            errno(ErrorReason::NotFound, Request::Cancel),
            Some(SlurmErrno::InvalidJobId)
        );
        assert_eq!(
            errno(ErrorReason::NotFound, Request::ChangeNode),
            Some(SlurmErrno::InvalidNodeName)
        );
        assert_eq!(errno(ErrorReason::NotFound, Request::Submit), None);
        assert_eq!(
            errno(ErrorReason::Conflict, Request::Cancel),
            Some(SlurmErrno::AlreadyDone)
        );
        assert_eq!(
            errno(ErrorReason::Conflict, Request::ChangeJob { ended: false }),
            None
        );
        assert_eq!(
            errno(ErrorReason::Conflict, Request::ChangeJob { ended: true }),
            Some(SlurmErrno::JobFinished)
        );
        assert_eq!(
            errno(
                ErrorReason::ForbiddenField,
                Request::ChangeJob { ended: false }
            ),
            Some(SlurmErrno::AccessDenied)
        );
        assert_eq!(
            errno(ErrorReason::UnknownPartition, Request::Submit),
            Some(SlurmErrno::InvalidPartitionName)
        );
        assert_eq!(errno(ErrorReason::InvalidJobSpec, Request::Submit), None);
        assert_eq!(refusal(None, Request::Cancel, None).errno, None);
    }

    #[test]
    fn only_submissions_take_slurm_exit_error() {
        let r = |q, e| refusal(Some(ErrorReason::InvalidJobSpec), q, e).exit_code;
        assert_eq!(r(Request::Submit, None), 1);
        assert_eq!(r(Request::Submit, Some(7)), 7);
        assert_eq!(r(Request::Cancel, Some(7)), 1);
        assert_eq!(r(Request::ChangeNode, Some(7)), 1);
    }
}
