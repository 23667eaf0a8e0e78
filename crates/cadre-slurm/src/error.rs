//! What goes wrong between a Slurm command line and a job, and how the command says it.
//!
//! The texts are Slurm's (the same kind of line a user of `sbatch` already knows and a
//! script may grep for), not cadre's usual lowercase style: compatibility wins here. Where
//! cadre refuses something Slurm would take, the message says so in cadre's words
//! ([`SlurmError::Unsupported`]). [`SlurmError::exit_code`] is the one place errors map to
//! exit codes; the codes are the ones Slurm 22.05 returns (measured, see the tests). The
//! controller's refusals are put in Slurm's words by [`crate::refusal`].

use crate::getopt::GetoptError;
use crate::refusal::Request;
use cadre_proto::exit::{ERROR as EXIT_ERROR, SLURM_USAGE as EXIT_USAGE};

/// An error of a Slurm command, rendered as Slurm renders it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlurmError {
    /// The command line (or a directive) does not parse as options.
    #[error("{0}")]
    Getopt(#[from] GetoptError),
    /// The same in a `#SBATCH` directive, which Slurm reports under the command's name
    /// rather than the program's path.
    #[error("{0}")]
    DirectiveGetopt(GetoptError),
    /// A value `sbatch` refuses while reading its options: `Invalid --time specification`.
    #[error("Invalid --{option} specification")]
    InvalidSpec { option: &'static str },
    /// A number that does not parse or is out of range: exit 1, as Slurm's `parse_int`.
    #[error("Invalid numeric value \"{value}\" for --{option}.")]
    InvalidNumber { option: &'static str, value: String },
    /// `--nodes` that is not a count or a range of counts.
    #[error("\"{0}\" is not a valid node count")]
    InvalidNodeCount(String),
    /// `--nodes=max-min`.
    #[error("Maximum node count {max} is less than minimum node count {min}")]
    NodeRange { min: u32, max: u32 },
    /// A value refused with exit 1 and a message of its own (`--hint`, GRES shapes).
    #[error("{0}")]
    Refused(String),
    /// Options that cannot go together; Slurm says `fatal`.
    #[error("{0}")]
    Fatal(String),
    /// A `#SBATCH` line that is not an option.
    #[error("Invalid directive found in batch script: {0}")]
    InvalidDirective(String),
    /// The batch script cannot be used.
    #[error("{0}")]
    Script(ScriptProblem),
    /// The controller (or, for what cadre checks before sending, the front end on its
    /// behalf) refused the job: `Batch job submission failed: ...`.
    #[error("Batch job submission failed: {reason}")]
    Submission {
        /// A line Slurm prints before the failure, if any (`invalid partition specified: x`).
        preface: Option<String>,
        reason: String,
    },
    /// Something Slurm does that cadre does not.
    #[error("{what} is not supported by cadre")]
    Unsupported { what: String },
}

/// Why a batch script cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScriptProblem {
    #[error("Unable to open file {0}")]
    Unreadable(String),
    #[error("Batch script is empty!")]
    Empty,
    #[error(
        "This does not look like a batch script.  The first\nline must start with #! followed by the path to an interpreter.\nFor instance: #!/bin/sh"
    )]
    NoShebang,
    #[error(
        "Batch script contains DOS line breaks (\\r\\n)\ninstead of expected UNIX line breaks (\\n)."
    )]
    DosLineBreaks,
    #[error("Batch script contains NULL character")]
    NulByte,
    #[error("Script arguments not permitted with --wrap option")]
    ArgsWithWrap,
}

impl SlurmError {
    /// A refusal as the controller words it, with no preface line.
    pub fn submission(reason: impl Into<String>) -> SlurmError {
        SlurmError::Submission {
            preface: None,
            reason: reason.into(),
        }
    }

    pub fn unsupported(what: impl Into<String>) -> SlurmError {
        SlurmError::Unsupported { what: what.into() }
    }

    /// The text on standard error, without a trailing newline. `cmd` is the command's name
    /// (`sbatch`); `prog` is how it was invoked (`argv[0]`), which getopt's own messages use.
    pub fn render(&self, cmd: &str, prog: &str) -> String {
        let prefixed = |text: &str, kind: &str| {
            text.lines()
                .map(|l| format!("{cmd}: {kind}: {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        match self {
            SlurmError::Getopt(e) => {
                format!("{prog}: {e}\nTry \"{cmd} --help\" for more information")
            }
            SlurmError::DirectiveGetopt(e) => {
                format!("{cmd}: {e}\nTry \"{cmd} --help\" for more information")
            }
            SlurmError::Fatal(m) => prefixed(m, "fatal"),
            SlurmError::Submission {
                preface: Some(p), ..
            } => format!(
                "{}\n{}",
                prefixed(p, "error"),
                prefixed(&self.to_string(), "error")
            ),
            other => prefixed(&other.to_string(), "error"),
        }
    }

    /// The command's exit code. `exit_error` is `$SLURM_EXIT_ERROR`, which Slurm applies to
    /// failed submissions only.
    pub fn exit_code(&self, exit_error: Option<u8>) -> u8 {
        match self {
            SlurmError::Getopt(_)
            | SlurmError::DirectiveGetopt(_)
            | SlurmError::InvalidSpec { .. }
            | SlurmError::InvalidNodeCount(_)
            | SlurmError::NodeRange { .. }
            | SlurmError::InvalidDirective(_) => EXIT_USAGE,
            SlurmError::Submission { .. } => Request::Submit.exit_code(exit_error),
            SlurmError::InvalidNumber { .. }
            | SlurmError::Refused(_)
            | SlurmError::Fatal(_)
            | SlurmError::Script(_)
            | SlurmError::Unsupported { .. } => EXIT_ERROR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_render_with_slurms_prefixes_and_exit_codes() {
        let e = SlurmError::InvalidSpec { option: "time" };
        assert_eq!(
            e.render("sbatch", "/usr/bin/sbatch"),
            "sbatch: error: Invalid --time specification"
        );
        assert_eq!(e.exit_code(None), 255);
        let e = SlurmError::Getopt(GetoptError::Unrecognized("--foo".into()));
        assert_eq!(
            e.render("sbatch", "sbatch"),
            "sbatch: unrecognized option '--foo'\nTry \"sbatch --help\" for more information"
        );
        assert_eq!(e.exit_code(Some(7)), 255);
        let e = SlurmError::Submission {
            preface: Some("invalid partition specified: x".into()),
            reason: "Invalid partition name specified".into(),
        };
        assert_eq!(
            e.render("sbatch", "sbatch"),
            "sbatch: error: invalid partition specified: x\nsbatch: error: Batch job submission failed: Invalid partition name specified"
        );
        assert_eq!(e.exit_code(None), 1);
        assert_eq!(e.exit_code(Some(7)), 7);
        let e = SlurmError::Script(ScriptProblem::DosLineBreaks);
        assert_eq!(
            e.render("sbatch", "sbatch"),
            "sbatch: error: Batch script contains DOS line breaks (\\r\\n)\nsbatch: error: instead of expected UNIX line breaks (\\n)."
        );
        let e = SlurmError::Fatal(
            "--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.".into(),
        );
        assert!(
            e.render("sbatch", "sbatch")
                .starts_with("sbatch: fatal: --mem")
        );
        assert_eq!(e.exit_code(None), 1);
        let e = SlurmError::InvalidNumber {
            option: "ntasks",
            value: "x".into(),
        };
        assert_eq!(
            e.render("sbatch", "sbatch"),
            "sbatch: error: Invalid numeric value \"x\" for --ntasks."
        );
        assert_eq!(e.exit_code(None), 1);
    }
}
