//! The `cadre` binary answering as Slurm's commands: invoked as `squeue`, `sinfo`,
//! `sacct`, `scancel`, `sshare` or `sprio` (a link named so), it takes their options and
//! prints their formats, talking to cadre's controller.
//!
//! - [`format`]: the `-o` `%`-field and `-O` named-field engines, and how Slurm writes
//!   times, durations, states and job ids;
//! - [`getopt`]: GNU getopt_long parsing with glibc's messages;
//! - [`query`]: the controller, error reporting and exit codes, values derived from jobs;
//! - one module per command.
//!
//! Where Slurm releases differ, the commands follow current Slurm and say so in their
//! module docs; the reference they were compared with is Slurm 22.05.

pub mod format;
pub mod getopt;
pub mod query;
pub mod sacct;
pub mod scancel;
pub mod sinfo;
pub mod sprio;
pub mod squeue;
pub mod sshare;
