//! Where the controller listens: a `$CADRE_SERVER` address, or a data directory's socket.

use crate::{Error, Result, locate};
use std::path::{Path, PathBuf};

/// Where the controller listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Unix(PathBuf),
    Tcp(String),
}

impl Target {
    /// `unix:///path`, `http://host:port`, or a bare socket path.
    pub fn parse(text: &str) -> Result<Target> {
        if let Some(path) = text.strip_prefix("unix://") {
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        if let Some(rest) = text.strip_prefix("http://") {
            let host = rest.trim_end_matches('/');
            if host.is_empty() || host.contains('/') {
                return Err(Error::BadHttpAddress {
                    address: text.to_owned(),
                });
            }
            return Ok(Target::Tcp(host.to_owned()));
        }
        if text.contains("://") {
            return Err(Error::UnsupportedAddress {
                address: text.to_owned(),
            });
        }
        Ok(Target::Unix(PathBuf::from(text)))
    }

    /// The controller of a data directory: the socket in its run directory
    /// ([`locate::run_dir_of`]).
    pub fn of_data_dir(dir: &Path) -> Target {
        Target::Unix(locate::socket_in(&locate::run_dir_of(dir)))
    }

    /// The controller a client means: `server` (`--server`, `$CADRE_SERVER`) if given, else
    /// the socket of data directory `data_dir` or of [`locate::default_data_dir`].
    pub fn resolve(server: Option<&str>, data_dir: Option<&Path>) -> Result<Target> {
        match server {
            Some(s) => Target::parse(s),
            None => Ok(match data_dir {
                Some(dir) => Target::of_data_dir(dir),
                None => Target::of_data_dir(&locate::default_data_dir()),
            }),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Unix(p) => write!(f, "unix://{}", p.display()),
            Target::Tcp(a) => write!(f, "http://{a}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_parse() {
        assert_eq!(
            Target::parse("unix:///tmp/c.sock").unwrap(),
            Target::Unix("/tmp/c.sock".into())
        );
        assert_eq!(
            Target::parse("http://127.0.0.1:6817").unwrap(),
            Target::Tcp("127.0.0.1:6817".into())
        );
        assert_eq!(
            Target::parse("/tmp/c.sock").unwrap(),
            Target::Unix("/tmp/c.sock".into())
        );
        assert!(matches!(
            Target::parse("https://x:1"),
            Err(Error::UnsupportedAddress { .. })
        ));
        assert!(matches!(
            Target::parse("http://"),
            Err(Error::BadHttpAddress { .. })
        ));
    }
}
