//! Where the controller listens: a `$CADRE_SERVER` address, or a data directory's socket.

use crate::{Error, Result, locate};
use std::path::{Path, PathBuf};

/// Where the controller listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Unix(PathBuf),
    /// `host:port` in plain TCP (an `--insecure` controller).
    Tcp(String),
    /// `host:port` over TLS: the certificate must name `host` and chain to the CA of `ca`
    /// (else of `$CADRE_CA`, else the `ca.crt` of the default run directory).
    Https {
        authority: String,
        host: String,
        ca: Option<PathBuf>,
    },
    /// Replicated controllers (`https://a:p,https://b:p`): whichever leads. A client
    /// connects to the first that answers and follows a standby's `not_leader` to the
    /// leader it names.
    Any(Vec<Target>),
}

impl Target {
    /// `unix:///path`, `https://host[:port]`, `http://host:port`, or a bare socket path;
    /// several, separated by commas, for replicated controllers.
    pub fn parse(text: &str) -> Result<Target> {
        if text.contains(',') {
            let all = text
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(Target::parse_one)
                .collect::<Result<Vec<_>>>()?;
            return Ok(match all.len() {
                1 => all.into_iter().next().unwrap_or(Target::Any(Vec::new())),
                _ => Target::Any(all),
            });
        }
        Target::parse_one(text)
    }

    /// Each controller this target may reach, in the order to try them.
    pub fn each(&self) -> Vec<Target> {
        match self {
            Target::Any(all) => all.clone(),
            one => vec![one.clone()],
        }
    }

    fn parse_one(text: &str) -> Result<Target> {
        if let Some(path) = text.strip_prefix("unix://") {
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        if let Some(rest) = text.strip_prefix("https://") {
            let authority = rest.trim_end_matches('/');
            let bad = || Error::UnsupportedAddress {
                address: text.to_owned(),
            };
            if authority.contains('/') {
                return Err(bad());
            }
            let hp = cadre_proto::address::host_port(authority, 443).map_err(|_| bad())?;
            return Ok(Target::Https {
                authority: hp.authority,
                host: hp.host,
                ca: None,
            });
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

    /// The same target, trusting the CA of `ca` over TLS.
    pub fn with_ca(self, ca: Option<PathBuf>) -> Target {
        match (self, ca) {
            (Target::Any(all), ca) => {
                Target::Any(all.into_iter().map(|t| t.with_ca(ca.clone())).collect())
            }
            (
                Target::Https {
                    authority, host, ..
                },
                Some(ca),
            ) => Target::Https {
                authority,
                host,
                ca: Some(ca),
            },
            (other, _) => other,
        }
    }

    /// The controller of a data directory: the socket in its run directory
    /// ([`locate::run_dir_of`]), and those of the other replicas of `cadre up --replicas`
    /// that are there ([`locate::replica_socket_in`]).
    pub fn of_data_dir(dir: &Path) -> Target {
        let run = locate::run_dir_of(dir);
        let mut all = vec![Target::Unix(locate::socket_in(&run))];
        for i in 2..=locate::MAX_LOCAL_REPLICAS {
            let socket = locate::replica_socket_in(&run, i);
            if socket.exists() {
                all.push(Target::Unix(socket));
            }
        }
        match all.len() {
            1 => all.remove(0),
            _ => Target::Any(all),
        }
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
            Target::Https { authority, .. } => write!(f, "https://{authority}"),
            Target::Any(all) => {
                let each: Vec<String> = all.iter().map(Target::to_string).collect();
                f.write_str(&each.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_addresses_parse_with_their_host_and_default_port() {
        let https = |authority: &str, host: &str| Target::Https {
            authority: authority.into(),
            host: host.into(),
            ca: None,
        };
        assert_eq!(
            Target::parse("https://ctl.example:6817").unwrap(),
            https("ctl.example:6817", "ctl.example")
        );
        assert_eq!(
            Target::parse("https://ctl/").unwrap(),
            https("ctl:443", "ctl")
        );
        assert_eq!(
            Target::parse("https://[::1]:7").unwrap(),
            https("[::1]:7", "::1")
        );
        assert!(Target::parse("https://ctl:x").is_err());
        assert!(Target::parse("https://ctl:1/api").is_err());
        assert_eq!(
            Target::parse("https://ctl:1").unwrap().to_string(),
            "https://ctl:1"
        );
    }

    #[test]
    fn replicated_controllers_are_a_list_tried_in_order() {
        let t = Target::parse("https://a:1, https://b:2").unwrap();
        assert_eq!(t.each().len(), 2);
        assert_eq!(t.to_string(), "https://a:1,https://b:2");
        assert_eq!(
            Target::parse("https://a:1,").unwrap(),
            Target::parse("https://a:1").unwrap()
        );
        assert!(Target::parse("https://a:1,ftp://b").is_err());
    }

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
            Target::parse("ftp://x:1"),
            Err(Error::UnsupportedAddress { .. })
        ));
        assert!(matches!(
            Target::parse("http://"),
            Err(Error::BadHttpAddress { .. })
        ));
    }
}
