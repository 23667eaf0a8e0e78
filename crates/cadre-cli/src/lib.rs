//! What cadre's command front ends share, so that each crate of commands (the `cadre`
//! binary's own, Slurm's in `cadre-slurm-commands`, the benchmarks in `cadre-bench`) takes
//! them from one place rather than from another front end:
//! - [`ConnectArgs`]: how a command names the controller (`--server`, `--token`,
//!   `--data-dir` and their `CADRE_*` variables), made into a `cadre_client::Client`;
//! - [`PolicyArgs`]: how a command names a scheduling policy (a file, or a preset);
//!   [`named_policy`]: one named in a list (`cadre sim --compare`, `cadre bench policy`);
//! - [`error_chain`]: an error and its causes on one line, as the commands print them;
//! - [`paths`]: the checks a daemon (`cadre up`, `cadre server`, a benchmark's controller)
//!   makes on its data and run directories before it uses them.
//!
//! Not here: the commands themselves, printing, exit codes (`cadre_proto::exit`), and how
//! a client finds and talks to the controller (`cadre-client`).

pub mod paths;

use anyhow::{Context, Result};
use cadre_client::{Client, Target};
use cadre_core::policy::Policy;
use clap::Args;
use std::path::PathBuf;

/// How to reach the controller.
#[derive(Args, Debug, Clone)]
pub struct ConnectArgs {
    /// The controller: `unix:///path/cadre.sock`, `https://host:port`, or `http://host:port`
    /// of an --insecure one (default: the socket in the data directory's run directory,
    /// DATA_DIR.run/cadre.sock, or in $CADRE_RUN_DIR).
    #[arg(long, env = "CADRE_SERVER", global = true)]
    pub server: Option<String>,
    /// The cluster's CA certificate, trusted for an https:// controller (the controller's
    /// ca.crt) [default: ca.crt in the default run directory].
    #[arg(long, env = "CADRE_CA", global = true, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// A bearer token (`cadre token create`); needed over TCP.
    #[arg(long, env = "CADRE_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// The data directory whose socket to use.
    #[arg(long, env = "CADRE_DATA_DIR", global = true)]
    pub data_dir: Option<PathBuf>,
}

impl ConnectArgs {
    pub fn target(&self) -> Result<Target> {
        Ok(
            Target::resolve(self.server.as_deref(), self.data_dir.as_deref())?
                .with_ca(self.ca.clone()),
        )
    }

    pub fn client(&self) -> Result<Client> {
        Ok(Client::connect(&self.target()?, self.token.clone())?)
    }
}

/// Where the policy comes from: a file, or a preset.
#[derive(Args, Debug, Clone)]
pub struct PolicyArgs {
    /// A policy file (versioned TOML).
    #[arg(long, env = "CADRE_POLICY", conflicts_with = "preset")]
    pub policy: Option<PathBuf>,
    /// A built-in policy: `cadre` (the default), `slurm` or `fifo`.
    #[arg(long, default_value = "cadre")]
    pub preset: String,
}

impl PolicyArgs {
    pub fn load(&self) -> Result<Policy> {
        match &self.policy {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("failed to read policy file {}", path.display()))?;
                Ok(Policy::from_toml(&text, &path.display().to_string())?)
            }
            None => Policy::preset(&self.preset).with_context(|| {
                format!(
                    "unknown policy preset `{}`: use cadre, slurm or fifo",
                    self.preset
                )
            }),
        }
    }
}

/// A policy named as `cadre sim --compare` and the benchmarks name them: a preset's name
/// (`cadre`, `slurm`, `fifo`) or a policy file's path; with the name reports show (the
/// preset's, or the file's stem).
pub fn named_policy(spec: &str) -> Result<(String, Policy)> {
    if let Some(p) = Policy::preset(spec) {
        return Ok((spec.to_string(), p));
    }
    let path = std::path::Path::new(spec);
    if !path.exists() {
        anyhow::bail!("policy `{spec}` is neither a preset (cadre, slurm, fifo) nor a file");
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("failed to read policy file {spec}"))?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(spec)
        .to_string();
    Ok((name, Policy::from_toml(&text, spec)?))
}

/// The error and its causes on one line, each cause only where the message before it does
/// not already say it (library errors here carry their cause's text in their own message).
pub fn error_chain(err: &anyhow::Error) -> String {
    let mut out = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(text.trim()) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_is_added_only_where_the_message_does_not_say_it() {
        let io = std::io::Error::other("disk full");
        let e = anyhow::Error::new(io).context("failed to write x");
        assert_eq!(error_chain(&e), "failed to write x: disk full");
        let e = anyhow::anyhow!("inner").context("failed: inner");
        assert_eq!(error_chain(&e), "failed: inner");
    }
}
