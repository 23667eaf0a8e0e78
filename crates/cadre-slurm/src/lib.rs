//! Slurm compatibility: what it takes for a site's `sbatch` scripts and habits to work
//! unchanged on cadre, as a library with no I/O.
//!
//! - [`getopt`]: command lines split with GNU `getopt_long`'s rules and messages;
//! - [`options`]: `sbatch`'s option table and [`options::BatchOptions`], the options of one
//!   submission, each value checked as Slurm checks it;
//! - [`script`]: batch scripts and their `#SBATCH` directives; [`env`]: the `SBATCH_*`
//!   input variables; [`sbatch`]: the three sources in Slurm's order of precedence;
//! - [`time`], [`size`], [`gres`], [`array`], [`dependency`]: Slurm's value syntaxes;
//! - [`convert`]: options into the [`cadre_proto::api::JobSubmission`]s cadre runs (one per
//!   array task), with the request's Slurm form recorded in the spec's annotations;
//! - [`launch`]: `srun`'s and `salloc`'s option tables;
//! - [`show`]: `scontrol show job`'s key=value records; [`state`]: job states as Slurm
//!   names them;
//! - [`error`]: what goes wrong, in Slurm's words, and the exit codes; [`refusal`]: the
//!   controller's refusals (by the API's reason) as Slurm's errors, in one table.
//!
//! Not here: reading files, the environment or the clock, and talking to the controller
//! (`cadre-slurm-commands`, beside this crate, does those).
//!
//! Behaviour is re-derived from Slurm's documentation and from running Slurm 22.05; where
//! current Slurm differs (TRES strings `gres/gpu:2`, `scontrol show hostnames` reading
//! `SLURM_JOB_NODELIST`), cadre follows current Slurm.
//!
//! [`array`]: mod@array
//! [`env`]: mod@env

pub mod array;
pub mod convert;
pub mod dependency;
pub mod env;
pub mod error;
pub mod getopt;
pub mod gres;
pub mod launch;
pub mod options;
pub mod refusal;
pub mod sbatch;
pub mod script;
pub mod show;
pub mod size;
pub mod state;
pub mod time;

pub use error::SlurmError;
