//! The account a task runs as ([`RunAs`]), from the node's user database; re-exported by
//! [`crate::launch`], which decides whether the agent may run a task as it.
//!
//! A module of its own because the task's environment ([`crate::jobenv`]) is made for it
//! too.

use crate::launch_error::LaunchError;
use nix::unistd::User;
use std::path::PathBuf;

/// The account a task runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: Option<PathBuf>,
    pub shell: Option<PathBuf>,
}

impl RunAs {
    /// The account named `name`, from the node's user database.
    pub fn lookup(name: &str) -> Result<RunAs, LaunchError> {
        let user = User::from_name(name)
            .map_err(|source| LaunchError::UserLookup {
                user: name.to_string(),
                source,
            })?
            .ok_or_else(|| LaunchError::UnknownUser {
                user: name.to_string(),
            })?;
        Ok(RunAs::from_user(user))
    }

    /// The account the agent runs as.
    pub fn current() -> Result<RunAs, LaunchError> {
        let uid = nix::unistd::geteuid();
        let user = User::from_uid(uid)
            .map_err(|source| LaunchError::UserLookup {
                user: format!("uid {uid}"),
                source,
            })?
            .ok_or_else(|| LaunchError::UnknownUser {
                user: format!("uid {uid}"),
            })?;
        Ok(RunAs::from_user(user))
    }

    fn from_user(user: User) -> RunAs {
        RunAs {
            name: user.name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            home: Some(user.dir),
            shell: Some(user.shell),
        }
    }

    /// `HOME`, `USER`, `LOGNAME`, `SHELL` for a task that exports nothing.
    pub(crate) fn account_env(&self) -> Vec<(String, String)> {
        let mut out = vec![
            ("USER".to_string(), self.name.clone()),
            ("LOGNAME".to_string(), self.name.clone()),
        ];
        if let Some(home) = &self.home {
            out.push(("HOME".into(), home.display().to_string()));
        }
        if let Some(shell) = &self.shell {
            out.push(("SHELL".into(), shell.display().to_string()));
        }
        out
    }
}
