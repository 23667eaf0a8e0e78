//! A node's identity for an `https://` controller: its enrolment with a one-time join
//! token, and the files it is kept in.
//!
//! **Given** the controller's address, the cluster's CA (a file the administrator gave the
//! node), the node's name and a join token. **Decided** here: the node's key (made here,
//! never sent anywhere), its certificate request, and where the certificate and key are
//! kept: `tls/` in the agent's state directory (mode 0700), `node.key` 0600.
//! **Must hold**: the join token travels only inside TLS to a controller whose certificate
//! chains to the given CA; no file of the identity is read or written through a symbolic
//! link; the key is never readable by anyone but the agent's user.

use cadre_proto::api::{EnrolRequest, EnrolResponse, ErrorBody, PREFIX};
use cadre_tls::Identity;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The identity's directory in the agent's state directory.
pub const IDENTITY_DIR: &str = "tls";
const KEY_FILE: &str = "node.key";
const CERT_FILE: &str = "node.crt";
const CA_FILE: &str = "ca.crt";
/// The largest answer of the controller read at enrolment.
const MAX_ANSWER: usize = 1 << 20;

/// What went wrong, and where.
#[derive(Debug, thiserror::Error)]
pub enum EnrolError {
    #[error("failed to {what} `{path}`: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("`{path}` is not safe to keep a node's key in: {why}")]
    Unsafe { path: PathBuf, why: String },
    #[error("`{0}` is not an https://HOST:PORT address")]
    Address(String),
    #[error("failed to reach the controller at {address}: {why}")]
    Connect { address: String, why: String },
    #[error("the controller refused the enrolment (HTTP {status}): {message}")]
    Refused { status: u16, message: String },
    #[error(transparent)]
    Tls(#[from] cadre_tls::TlsError),
}

/// A node's certificate, its key and the cluster's CA, in PEM.
pub struct NodeIdentity {
    pub cert_pem: String,
    key_pem: String,
    pub ca_pem: String,
}

impl std::fmt::Debug for NodeIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeIdentity { key: <redacted>, .. }")
    }
}

fn io_err<'p>(
    what: &'static str,
    path: &'p Path,
) -> impl FnOnce(std::io::Error) -> EnrolError + 'p {
    move |source| EnrolError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// The identity directory of `state_dir`, made (0700) if missing; refused if it is a
/// link, another user's, or open to others.
fn identity_dir(state_dir: &Path, create: bool) -> Result<Option<PathBuf>, EnrolError> {
    let dir = state_dir.join(IDENTITY_DIR);
    if create {
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("create", &dir)(e)),
        }
    }
    let meta = match std::fs::symlink_metadata(&dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("inspect", &dir)(e)),
    };
    let unsafe_dir = |why: String| EnrolError::Unsafe {
        path: dir.clone(),
        why,
    };
    if !meta.is_dir() {
        return Err(unsafe_dir(
            "it is a symbolic link or not a directory".into(),
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(unsafe_dir(format!(
            "it belongs to uid {}, not to the agent's user (uid {me})",
            meta.uid()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(unsafe_dir(format!(
            "its mode is {:o}; it must be 0700",
            meta.permissions().mode() & 0o777
        )));
    }
    Ok(Some(dir))
}

fn read_nofollow(path: &Path) -> Result<Option<String>, EnrolError> {
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read", path)(e)),
    };
    let mut text = String::new();
    std::io::Read::read_to_string(&mut &f, &mut text).map_err(io_err("read", path))?;
    Ok(Some(text))
}

/// Replaces `name` in `dir` with `contents` (mode `mode`): written to a new file beside it
/// (`O_EXCL|O_NOFOLLOW`), synced, then renamed over it.
fn replace(dir: &Path, name: &str, contents: &str, mode: u32) -> Result<(), EnrolError> {
    let tmp = dir.join(format!(".{name}.new"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(io_err("create", &tmp))?;
    f.write_all(contents.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io_err("write", &tmp))?;
    let path = dir.join(name);
    std::fs::rename(&tmp, &path).map_err(io_err("replace", &path))
}

impl NodeIdentity {
    /// The identity kept in `state_dir`, if the node has enrolled.
    pub fn load(state_dir: &Path) -> Result<Option<NodeIdentity>, EnrolError> {
        let Some(dir) = identity_dir(state_dir, false)? else {
            return Ok(None);
        };
        let (Some(cert_pem), Some(key_pem), Some(ca_pem)) = (
            read_nofollow(&dir.join(CERT_FILE))?,
            read_nofollow(&dir.join(KEY_FILE))?,
            read_nofollow(&dir.join(CA_FILE))?,
        ) else {
            return Ok(None);
        };
        Ok(Some(NodeIdentity {
            cert_pem,
            key_pem,
            ca_pem,
        }))
    }

    /// The node its certificate names.
    pub fn node(&self) -> Option<String> {
        cadre_tls::node_of_pem(&self.cert_pem)
    }

    /// Keeps the identity in `state_dir` (the key first, 0600).
    pub fn save(&self, state_dir: &Path) -> Result<(), EnrolError> {
        let dir = identity_dir(state_dir, true)?.ok_or_else(|| EnrolError::Unsafe {
            path: state_dir.join(IDENTITY_DIR),
            why: "it vanished as it was made".into(),
        })?;
        replace(&dir, KEY_FILE, &self.key_pem, 0o600)?;
        replace(&dir, CERT_FILE, &self.cert_pem, 0o644)?;
        replace(&dir, CA_FILE, &self.ca_pem, 0o644)
    }

    /// The agent's TLS configuration: trust the cluster's CA, show the node's certificate.
    pub fn client_config(&self, state_dir: &Path) -> Result<Arc<rustls::ClientConfig>, EnrolError> {
        let dir = state_dir.join(IDENTITY_DIR);
        let identity = Identity::from_pem(&self.cert_pem, &self.key_pem, &dir.join(CERT_FILE))?;
        Ok(cadre_tls::client_config(
            &self.ca_pem,
            &dir.join(CA_FILE),
            Some(identity),
        )?)
    }
}

/// `https://host[:port]` as (host, host:port).
fn https_authority(controller: &str) -> Result<(String, String), EnrolError> {
    let bad = || EnrolError::Address(controller.to_owned());
    let rest = controller
        .strip_prefix("https://")
        .or_else(|| controller.strip_prefix("wss://"))
        .ok_or_else(bad)?;
    let rest = rest.trim_end_matches('/');
    if rest.contains('/') {
        return Err(bad());
    }
    let hp = cadre_proto::address::host_port(rest, 443).map_err(|_| bad())?;
    Ok((hp.host, hp.authority))
}

/// Enrols node `node` with the controller at `controller` (`https://`), trusting the CA of
/// `ca_pem` alone: makes the node's key, sends its certificate request with the join token,
/// and returns the identity (to [`NodeIdentity::save`]). `node` empty: the node the join
/// token was made for, else `host_node`.
#[allow(clippy::too_many_arguments)]
pub async fn enrol(
    controller: &str,
    node: &str,
    host_node: Option<&str>,
    token: &str,
    ca_pem: &str,
    ca_path: &Path,
    timeout: Duration,
) -> Result<NodeIdentity, EnrolError> {
    let (host, authority) = https_authority(controller)?;
    // The controller takes only the request's key and names the certificate itself: a node
    // whose name comes from its join token asks under a placeholder.
    let (csr_pem, key_pem) = cadre_tls::node_request(if node.is_empty() { "node" } else { node })?;
    let config = cadre_tls::client_config(ca_pem, ca_path, None)?;
    let connect = |why: String| EnrolError::Connect {
        address: controller.to_owned(),
        why,
    };
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let name = rustls::pki_types::ServerName::try_from(bare)
        .map_err(|e| connect(format!("`{host}` is not a host name or address: {e}")))?;
    let body = serde_json::to_vec(&EnrolRequest {
        token: token.to_owned(),
        node: node.to_owned(),
        host_node: host_node.filter(|_| node.is_empty()).map(str::to_owned),
        csr_pem,
    })
    .map_err(|e| connect(e.to_string()))?;
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(&authority)
            .await
            .map_err(|e| connect(e.to_string()))?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| connect(format!("TLS: {e}")))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| connect(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let request = hyper::Request::post(format!("{PREFIX}/nodes/enrol"))
            .header(hyper::header::HOST, &authority)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(hyper::body::Bytes::from(body)))
            .map_err(|e| connect(e.to_string()))?;
        let answer = sender
            .send_request(request)
            .await
            .map_err(|e| connect(e.to_string()))?;
        let status = answer.status().as_u16();
        let bytes = Limited::new(answer.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| connect(e.to_string()))?
            .to_bytes();
        Ok::<_, EnrolError>((status, bytes))
    };
    let (status, bytes) = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| connect(format!("no answer within {timeout:?}")))??;
    if status != 201 {
        let message = serde_json::from_slice::<ErrorBody>(&bytes)
            .map(|b| b.error.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
        return Err(EnrolError::Refused { status, message });
    }
    let answer: EnrolResponse =
        serde_json::from_slice(&bytes).map_err(|e| connect(format!("unreadable answer: {e}")))?;
    if !node.is_empty() && answer.node != node {
        return Err(connect(format!(
            "the certificate is for node `{}`, not `{node}`",
            answer.node
        )));
    }
    Ok(NodeIdentity {
        cert_pem: answer.cert_pem,
        key_pem,
        ca_pem: answer.ca_pem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_addresses() {
        assert_eq!(
            https_authority("https://ctl:6817").unwrap(),
            ("ctl".into(), "ctl:6817".into())
        );
        assert_eq!(
            https_authority("https://ctl/").unwrap(),
            ("ctl".into(), "ctl:443".into())
        );
        assert_eq!(
            https_authority("https://[::1]:7").unwrap(),
            ("::1".into(), "[::1]:7".into())
        );
        assert!(https_authority("http://ctl:1").is_err());
        assert!(https_authority("https://ctl:x").is_err());
        assert!(https_authority("https://ctl:1/api").is_err());
    }

    #[test]
    fn an_identity_is_kept_private_and_not_read_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, _) = cadre_tls::Ca::create(cadre_tls::OffsetDateTime::now_utc()).unwrap();
        let (csr, key_pem) = cadre_tls::node_request("n1").unwrap();
        let cert = ca.sign_node("n1", &csr).unwrap();
        let id = NodeIdentity {
            cert_pem: cert.pem,
            key_pem,
            ca_pem: ca.cert_pem().to_owned(),
        };
        assert!(NodeIdentity::load(dir.path()).unwrap().is_none());
        id.save(dir.path()).unwrap();
        let tls = dir.path().join(IDENTITY_DIR);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&tls), 0o700);
        assert_eq!(mode(&tls.join(KEY_FILE)), 0o600);
        let back = NodeIdentity::load(dir.path()).unwrap().unwrap();
        assert_eq!(back.cert_pem, id.cert_pem);
        back.client_config(dir.path()).unwrap();
        // Saved again (a new enrolment): replaced.
        id.save(dir.path()).unwrap();
        // A key that is a link is not read.
        std::fs::remove_file(tls.join(KEY_FILE)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", tls.join(KEY_FILE)).unwrap();
        assert!(NodeIdentity::load(dir.path()).is_err());
        // A directory open to others is refused.
        std::fs::set_permissions(&tls, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = NodeIdentity::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("must be 0700"), "{err}");
    }
}
