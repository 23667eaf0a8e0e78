//! Who is calling: local clients on the Unix socket by the kernel's peer credentials,
//! remote ones by bearer tokens (stored hashed), agents by the cluster key.
//!
//! An administrator is root, the user the controller runs as (the cluster's owner, as
//! `SlurmUser` is Slurm's), or the holder of an admin token. Everyone else sees and changes
//! only their own jobs. A request with no valid credentials gets 401 and nothing else.

use cadre_core::job::JobId;
use cadre_proto::api::ErrorCode;
use cadre_store::TokenHash;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::api_error::ApiError;
use crate::read_store::ReadStore;

/// Where a connection comes from.
#[derive(Clone, Debug)]
pub enum Peer {
    /// A local client on the Unix socket, with the uid the kernel vouches for (`None` if
    /// the kernel would not say).
    Unix {
        uid: Option<u32>,
    },
    Tcp(SocketAddr),
}

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    pub user: String,
    pub admin: bool,
    pub via: Via,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Via {
    PeerCredentials,
    Token,
    /// A job's token ([`cadre_proto::job_token`]): its tasks act as its user while it runs,
    /// on that job only ([`job_token_reaches`]).
    JobToken(JobId),
    /// The dashboard's session cookie ([`crate::ui`]): the user it was opened for.
    Session,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::PeerCredentials => "peer-credentials",
            Via::Token => "token",
            Via::JobToken(_) => "job-token",
            Via::Session => "session",
        }
    }
}

/// What authentication needs: the token store and who owns the cluster.
pub struct Authenticator {
    pub tokens: ReadStore,
    /// The uid the controller runs as: its user is an administrator.
    pub owner_uid: u32,
    /// The agents' shared key.
    pub agent_key: String,
}

/// Whether a request with job `job`'s token may go to `path` (under the API's prefix):
/// what `cadre rsh` and `srun` in the job need, and nothing else: who it is, the nodes,
/// the job itself, and its steps (create, list, cancel).
pub fn job_token_reaches(job: JobId, method: &axum::http::Method, path: &str) -> bool {
    use axum::http::Method;
    let own = format!("/jobs/{job}");
    let Some(rest) = path.strip_prefix(own.as_str()) else {
        return *method == Method::GET && (path == "/whoami" || path == "/nodes");
    };
    let step_cancel = rest
        .strip_prefix("/steps/")
        .and_then(|r| r.strip_suffix("/cancel"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    match *method {
        Method::GET => rest.is_empty() || rest == "/steps",
        Method::POST => rest == "/steps" || step_cancel,
        _ => false,
    }
}

fn unauthenticated(message: &str) -> ApiError {
    ApiError::new(ErrorCode::Unauthenticated, message)
}

/// The bearer token of an `Authorization` header value.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let value = header?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Compares secrets in time independent of where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Authenticator {
    /// Identifies the caller: a bearer token if one is given, else the socket's peer.
    pub async fn identify(
        self: &Arc<Self>,
        peer: &Peer,
        authorization: Option<&str>,
    ) -> Result<Principal, ApiError> {
        if let Some(token) = bearer(authorization)
            && cadre_proto::job_token::is_job_token(token)
        {
            let Some((job, run)) = cadre_proto::job_token::verify(&self.agent_key, token) else {
                return Err(unauthenticated("the job token is not valid"));
            };
            let found = self.tokens.with(move |s| s.job(job)).await?;
            // The token of one run: worth nothing once that run has ended, also when the
            // job runs again (its requeue count has moved on).
            return match found {
                Some(j) if j.status.state.is_active() && j.status.requeues == run => {
                    Ok(Principal {
                        user: j.spec.user,
                        admin: false,
                        via: Via::JobToken(job),
                    })
                }
                Some(j) if j.status.state.is_active() => Err(unauthenticated(&format!(
                    "the job token is of run {run} of job {job}, which has ended (the job runs again as run {})",
                    j.status.requeues
                ))),
                _ => Err(unauthenticated(&format!(
                    "the job token is of job {job}, which is not running"
                ))),
            };
        }
        if let Some(token) = bearer(authorization) {
            let hash = TokenHash::of(token);
            let found = self.tokens.with(move |s| s.active_token(&hash)).await?;
            return match found {
                Some(t) => Ok(Principal {
                    user: t.user,
                    admin: t.admin,
                    via: Via::Token,
                }),
                None => Err(unauthenticated(
                    "the bearer token is not valid (unknown or revoked)",
                )),
            };
        }
        match peer {
            Peer::Unix { uid: Some(uid) } => Ok(Principal {
                user: cadre_proto::user::name_of_uid(*uid),
                admin: *uid == 0 || *uid == self.owner_uid,
                via: Via::PeerCredentials,
            }),
            Peer::Unix { uid: None } => Err(unauthenticated(
                "the kernel gave no peer credentials for this connection",
            )),
            Peer::Tcp(_) => Err(unauthenticated(
                "authentication required: send `Authorization: Bearer <token>` (see `cadre token create`)",
            )),
        }
    }
}

/// A fresh random secret: `prefix` and 64 hexadecimal digits (256 bits from the OS).
pub fn random_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    // The OS's random source does not fail on Linux once booted; a failure here would make
    // every secret predictable, so it must not be ignored.
    getrandom::fill(&mut bytes).expect("the operating system's random source failed");
    let mut out = String::with_capacity(prefix.len() + 64);
    out.push_str(prefix);
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_token_reaches_its_own_job_s_steps_only() {
        use axum::http::Method;
        let j = JobId(12);
        for (m, p) in [
            (Method::GET, "/whoami"),
            (Method::GET, "/nodes"),
            (Method::GET, "/jobs/12"),
            (Method::GET, "/jobs/12/steps"),
            (Method::POST, "/jobs/12/steps"),
            (Method::POST, "/jobs/12/steps/3/cancel"),
        ] {
            assert!(job_token_reaches(j, &m, p), "{m} {p}");
        }
        for (m, p) in [
            (Method::GET, "/jobs"),
            (Method::GET, "/jobs/13"),
            (Method::GET, "/jobs/123/steps"),
            (Method::POST, "/jobs/13/steps"),
            (Method::DELETE, "/jobs/12"),
            (Method::POST, "/jobs/12/cancel"),
            (Method::POST, "/jobs"),
            (Method::POST, "/tokens"),
            (Method::POST, "/jobs/12/steps/x/cancel"),
            (Method::GET, "/usage"),
        ] {
            assert!(!job_token_reaches(j, &m, p), "{m} {p}");
        }
    }

    #[test]
    fn bearer_tokens_are_read_from_the_header() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer")), None);
        assert_eq!(bearer(None), None);
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
    }
}
