//! The exit codes of every cadre command, in one place: `cadre`'s own subcommands, the
//! Slurm commands the binary answers as (`sbatch`, `srun`, `salloc`, `squeue`, `sinfo`,
//! `scancel`, `sacct`, `scontrol`, `sshare`, `sprio`) and `cadre rsh`. Scripts branch on
//! them; the README lists them ("Exit codes"), and so do the commands' `--help`.
//!
//! Which code a refusal of the controller gives is decided from the API's reason, never from
//! its message: for `cadre`'s commands every refusal is [`ERROR`]; for Slurm's, the table
//! in `cadre_slurm::refusal`. A command that runs a program (`srun`, `salloc`,
//! `sbatch --wait`, `cadre rsh`) ends with that program's status; the codes here are the
//! ones the commands give of their own.

/// Success.
pub const SUCCESS: u8 = 0;

/// An error; the message on standard error says what and where. `cadre`'s commands: a
/// refusal of the controller (whatever its reason), a controller that cannot be reached, a
/// file that cannot be read or does not parse. Slurm's commands: Slurm's `exit(1)`, for an
/// invalid value, a refusal of the controller, an unknown job, a job or step that did not
/// complete, and the read-side commands' option errors.
pub const ERROR: u8 = 1;

/// `cadre wait`: a job ended without completing (failed, cancelled, timed out).
pub const JOB_NOT_COMPLETED: u8 = 1;

/// `cadre`'s usage errors: an unknown subcommand or option, a missing or invalid argument
/// (clap's code for them).
pub const USAGE: u8 = 2;

/// `sbatch`, `srun` and `salloc`: an option error (also in a `#SBATCH` directive), which
/// Slurm reports through `exit(-1)`.
pub const SLURM_USAGE: u8 = 255;

/// `srun` and `sbatch --wait`: a job or step whose exit code does not fit in one byte.
pub const STATUS_OUT_OF_RANGE: u8 = 255;

/// `cadre rsh`: the command could not be started on the job's node (ssh's code for it).
pub const RSH_CANNOT_RUN: u8 = 255;

/// The exit code of a job or step that ended with `code`: the code itself, or
/// [`STATUS_OUT_OF_RANGE`] when it does not fit.
pub fn of_status(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(STATUS_OUT_OF_RANGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_beyond_a_byte_are_out_of_range() {
        assert_eq!(of_status(0), SUCCESS);
        assert_eq!(of_status(3), 3);
        assert_eq!(of_status(255), 255);
        assert_eq!(of_status(256), STATUS_OUT_OF_RANGE);
        assert_eq!(of_status(-1), STATUS_OUT_OF_RANGE);
    }
}
