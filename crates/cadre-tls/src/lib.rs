//! cadre-tls: TLS for every TCP connection of a cluster.
//!
//! **Given** the controller's data directory (where the cluster's certificate authority
//! lives), the names the controller is reached by, and nodes' certificate requests.
//! **Decided** here: the CA (made on first start, or the site's, taken from files), the
//! controller's certificate (made at each start for its names, signed by the CA), each
//! node's certificate, and the rustls configurations of the three sides: the controller
//! (server; a client certificate is asked for and, when given, must chain to the CA), a
//! client (trusts the CA alone), an agent (trusts the CA alone and shows its node's
//! certificate).
//! **Must hold**:
//! - the CA's key is written once, 0600, through `O_CREAT|O_EXCL|O_NOFOLLOW`, in the
//!   controller's private data directory, and never leaves it;
//! - a node's key is made on the node and never leaves it: the controller signs a request,
//!   taking nothing from it but its public key (not its names, not its usages, not a CA
//!   flag); the certificate names the node the join token was for;
//! - a node certificate is for client authentication only, names one node (its common
//!   name and its one DNS name), carries a random serial the controller records, and
//!   expires; a server certificate is for server authentication only;
//! - only TLS 1.2 and 1.3 with rustls's safe defaults (ring as the crypto provider).

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use time::Duration;
pub use time::OffsetDateTime;

/// The CA's certificate in the controller's data directory (public: clients need it).
pub const CA_CERT_FILE: &str = "ca.crt";
/// The CA's key in the controller's data directory (0600).
pub const CA_KEY_FILE: &str = "ca.key";
/// How long a CA made by the controller is valid.
pub const CA_DAYS: i64 = 3650;
/// How long a node's certificate is valid (it enrols again with a new join token after).
pub const NODE_CERT_DAYS: i64 = 365;
/// How long the controller's certificate is valid (it is made again at each start).
pub const SERVER_CERT_DAYS: i64 = 90;
/// The longest node name a certificate carries (a DNS label of a host name is 63; a
/// cluster's node names are host names).
pub const MAX_NODE_NAME: usize = 253;
/// The largest certificate request the controller reads.
pub const MAX_REQUEST_PEM: usize = 16 * 1024;

/// What went wrong, and where.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("failed to {what} `{path}`: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("`{path}` holds no usable {what}: {why}")]
    BadFile {
        path: PathBuf,
        what: &'static str,
        why: String,
    },
    #[error(
        "the CA's key `{path}` may be read by others (mode {mode:o}); it must be readable by its owner alone (chmod 600)"
    )]
    KeyExposed { path: PathBuf, mode: u32 },
    #[error("the certificate request is refused: {0}")]
    BadRequest(String),
    #[error("failed to make a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("TLS configuration: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// A certificate chain and its key: what one side shows.
#[derive(Debug)]
pub struct Identity {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Identity {
        Identity {
            certs: self.certs.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl Identity {
    /// From PEM texts (`what` names them in errors).
    pub fn from_pem(cert_pem: &str, key_pem: &str, what: &Path) -> Result<Identity, TlsError> {
        let certs = certs_from_pem(cert_pem, what)?;
        let key =
            PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| TlsError::BadFile {
                path: what.to_path_buf(),
                what: "private key",
                why: e.to_string(),
            })?;
        Ok(Identity { certs, key })
    }
}

fn certs_from_pem(pem: &str, what: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::BadFile {
            path: what.to_path_buf(),
            what: "certificate",
            why: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::BadFile {
            path: what.to_path_buf(),
            what: "certificate",
            why: "no PEM certificate in it".into(),
        });
    }
    Ok(certs)
}

/// The cluster's certificate authority.
pub struct Ca {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

/// A node's certificate as the controller signed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCert {
    pub pem: String,
    /// Its serial number, in hexadecimal: what the controller records as the node's.
    pub serial: String,
    pub not_after: i64,
}

/// What a peer's certificate says of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerCert {
    /// Its common name: for a node's certificate, the node's name.
    pub name: String,
    /// Its serial number in hexadecimal.
    pub serial: String,
    /// Whether it is for client authentication (a node's), not a server's.
    pub client_auth: bool,
}

fn random_serial() -> Result<SerialNumber, TlsError> {
    let mut bytes = [0u8; 16];
    getrandom(&mut bytes)?;
    // Positive, as DER integers of serials must be.
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    Ok(SerialNumber::from_slice(&bytes))
}

fn getrandom(buf: &mut [u8]) -> Result<(), TlsError> {
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(buf)
        .map_err(|_| TlsError::Rcgen(rcgen::Error::RingUnspecified))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn days(from: OffsetDateTime, n: i64) -> OffsetDateTime {
    from + Duration::days(n)
}

/// Writes a new file readable by its owner alone, refusing to follow a link or to replace
/// anything.
fn write_new(path: &Path, contents: &str, mode: u32) -> Result<(), TlsError> {
    let io = |what, source| TlsError::Io {
        what,
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| io("create", e))?;
    f.write_all(contents.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| io("write", e))
}

/// Reads a file, refusing a link.
fn read_file(path: &Path) -> Result<(String, std::fs::Metadata), TlsError> {
    let io = |source| TlsError::Io {
        what: "read",
        path: path.to_path_buf(),
        source,
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut &f, &mut text).map_err(io)?;
    Ok((text, meta))
}

impl Ca {
    /// The CA in `dir` (`ca.crt`, `ca.key`), made there first if neither exists.
    pub fn load_or_create(dir: &Path) -> Result<Ca, TlsError> {
        let cert = dir.join(CA_CERT_FILE);
        let key = dir.join(CA_KEY_FILE);
        if !cert.exists() && !key.exists() {
            let (ca, key_pem) = Ca::create(OffsetDateTime::now_utc())?;
            // The key first: a certificate without its key is no CA.
            write_new(&key, &key_pem, 0o600)?;
            write_new(&cert, &ca.cert_pem, 0o644)?;
            return Ok(ca);
        }
        Ca::load(&cert, &key)
    }

    /// A site's CA, from its certificate and key files.
    pub fn load(cert: &Path, key: &Path) -> Result<Ca, TlsError> {
        let (key_pem, meta) = read_file(key)?;
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(TlsError::KeyExposed {
                path: key.to_path_buf(),
                mode,
            });
        }
        let (cert_pem, _) = read_file(cert)?;
        let bad = |path: &Path, what, why: String| TlsError::BadFile {
            path: path.to_path_buf(),
            what,
            why,
        };
        let key_pair =
            KeyPair::from_pem(&key_pem).map_err(|e| bad(key, "private key", e.to_string()))?;
        let cert_der = certs_from_pem(&cert_pem, cert)?.remove(0);
        let issuer = Issuer::from_ca_cert_der(&cert_der, key_pair)
            .map_err(|e| bad(cert, "CA certificate", e.to_string()))?;
        Ok(Ca {
            cert_pem,
            cert_der,
            issuer,
        })
    }

    /// A new CA, and its key in PEM.
    pub fn create(now: OffsetDateTime) -> Result<(Ca, String), TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "cadre cluster CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = now - Duration::minutes(5);
        params.not_after = days(now, CA_DAYS);
        params.serial_number = Some(random_serial()?);
        let cert = params.self_signed(&key)?;
        let key_pem = key.serialize_pem();
        let cert_pem = cert.pem();
        let cert_der = cert.der().clone();
        Ok((
            Ca {
                cert_pem,
                cert_der,
                issuer: Issuer::new(params, key),
            },
            key_pem,
        ))
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The controller's certificate for `names` (host names and addresses), with a key of
    /// its own that is kept in memory only.
    pub fn server_identity(&self, names: &[String]) -> Result<Identity, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names.to_vec())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "cadre controller");
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::minutes(5);
        params.not_after = days(now, SERVER_CERT_DAYS);
        params.serial_number = Some(random_serial()?);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Identity {
            certs: vec![cert.der().clone(), self.cert_der.clone()],
            key: PrivateKeyDer::try_from(key.serialize_der())
                .map_err(|e| TlsError::BadRequest(e.to_string()))?,
        })
    }

    /// Signs node `node`'s certificate request: only its public key is taken.
    pub fn sign_node(&self, node: &str, request_pem: &str) -> Result<NodeCert, TlsError> {
        check_node_name(node)?;
        if request_pem.len() > MAX_REQUEST_PEM {
            return Err(TlsError::BadRequest(format!(
                "the request is {} bytes, more than {MAX_REQUEST_PEM}",
                request_pem.len()
            )));
        }
        let mut request = CertificateSigningRequestParams::from_pem(request_pem)
            .map_err(|e| TlsError::BadRequest(e.to_string()))?;
        let serial = random_serial()?;
        let serial_hex = hex(&serial.to_bytes());
        let mut params = CertificateParams::new(vec![node.to_owned()])?;
        params.distinguished_name.push(DnType::CommonName, node);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::minutes(5);
        params.not_after = days(now, NODE_CERT_DAYS);
        params.serial_number = Some(serial);
        let not_after = params.not_after.unix_timestamp();
        request.params = params;
        let cert = request.signed_by(&self.issuer)?;
        Ok(NodeCert {
            pem: cert.pem(),
            serial: serial_hex,
            not_after,
        })
    }
}

/// A node name a certificate may carry: a host name's characters.
pub fn check_node_name(node: &str) -> Result<(), TlsError> {
    let ok = !node.is_empty()
        && node.len() <= MAX_NODE_NAME
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(TlsError::BadRequest(format!(
            "`{node}` is not a node name (letters, digits, `-`, `.`, `_`; at most {MAX_NODE_NAME})"
        )))
    }
}

/// A node's key and its certificate request, made on the node: `(request, key)` in PEM.
pub fn node_request(node: &str) -> Result<(String, String), TlsError> {
    check_node_name(node)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec![node.to_owned()])?;
    params.distinguished_name.push(DnType::CommonName, node);
    let request = params.serialize_request(&key)?;
    Ok((request.pem()?, key.serialize_pem()))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca_pem: &str, what: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certs_from_pem(ca_pem, what)? {
        roots.add(cert).map_err(|e| TlsError::BadFile {
            path: what.to_path_buf(),
            what: "CA certificate",
            why: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// The controller's configuration: its identity; a client certificate is asked for and,
/// when one is shown, must chain to the CA (agents show their node's; users with tokens
/// show none).
pub fn server_config(ca: &Ca, identity: Identity) -> Result<Arc<ServerConfig>, TlsError> {
    let roots = roots(&ca.cert_pem, Path::new(CA_CERT_FILE))?;
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .allow_unauthenticated()
            .build()?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.certs, identity.key)?;
    Ok(Arc::new(config))
}

/// A client's configuration: trusts the CA of `ca_pem` (read from `what`) alone, and shows
/// `identity` if given (an agent's node certificate).
pub fn client_config(
    ca_pem: &str,
    what: &Path,
    identity: Option<Identity>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = roots(ca_pem, what)?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let config = match identity {
        Some(id) => builder.with_client_auth_cert(id.certs, id.key)?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The node a certificate in PEM names (its common name), if it is one.
pub fn node_of_pem(pem: &str) -> Option<String> {
    let der = CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()?
        .ok()?;
    peer_cert(&der).map(|p| p.name)
}

/// What a peer's (already verified) certificate says of it.
pub fn peer_cert(cert: &CertificateDer<'_>) -> Option<PeerCert> {
    let (_, x509) = x509_parser::parse_x509_certificate(cert).ok()?;
    let name = x509
        .subject()
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_owned();
    let client_auth = x509
        .extended_key_usage()
        .ok()
        .flatten()
        .is_some_and(|eku| eku.value.client_auth);
    Some(PeerCert {
        name,
        serial: hex(x509.raw_serial()),
        client_auth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_made_once_with_its_key_private_and_loaded_after() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::load_or_create(dir.path()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = |f: &str| {
            std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(CA_KEY_FILE), 0o600);
        assert_eq!(mode(CA_CERT_FILE), 0o644);
        let again = Ca::load_or_create(dir.path()).unwrap();
        assert_eq!(ca.cert_pem(), again.cert_pem(), "not made twice");
        // A key others may read is refused, saying how to fix it.
        std::fs::set_permissions(
            dir.path().join(CA_KEY_FILE),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let err = Ca::load_or_create(dir.path()).err().unwrap().to_string();
        assert!(err.contains("chmod 600"), "{err}");
    }

    #[test]
    fn a_key_file_that_is_a_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        Ca::load_or_create(dir.path()).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::rename(dir.path().join(CA_KEY_FILE), &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.path().join(CA_KEY_FILE)).unwrap();
        assert!(Ca::load_or_create(dir.path()).is_err());
    }

    #[test]
    fn a_node_certificate_takes_only_the_public_key_of_the_request() {
        let (ca, _) = Ca::create(OffsetDateTime::now_utc()).unwrap();
        // A request that asks to be a CA, for the controller's name.
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["controller".to_string()]).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "controller");
        let request = params.serialize_request(&key).unwrap().pem().unwrap();
        let cert = ca.sign_node("gpu-007", &request).unwrap();
        let der = certs_from_pem(&cert.pem, Path::new("x")).unwrap().remove(0);
        let peer = peer_cert(&der).unwrap();
        assert_eq!(peer.name, "gpu-007");
        assert_eq!(peer.serial, cert.serial);
        assert!(peer.client_auth);
        let (_, x509) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert!(!x509.is_ca(), "the request's CA flag is not taken");
        let sans: Vec<String> = x509
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(sans, ["DNSName(gpu-007)"]);
        assert!(ca.sign_node("a b", &request).is_err());
        assert!(ca.sign_node("gpu-1", "not a request").is_err());
    }

    /// A TLS handshake between `client` and `server` in memory, to `localhost`: the name
    /// of the client's certificate as the server saw it, or the server's refusal.
    fn handshake(
        client: Arc<ClientConfig>,
        server: Arc<ServerConfig>,
    ) -> Result<Option<String>, rustls::Error> {
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut c = rustls::ClientConnection::new(client, name).unwrap();
        let mut s = rustls::ServerConnection::new(server).unwrap();
        for _ in 0..10 {
            let mut buf = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut buf).unwrap();
            }
            if !buf.is_empty() {
                s.read_tls(&mut buf.as_slice()).unwrap();
                s.process_new_packets()?;
            }
            let mut back = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut back).unwrap();
            }
            if !back.is_empty() {
                c.read_tls(&mut back.as_slice()).unwrap();
                let _ = c.process_new_packets();
            }
        }
        assert!(!c.is_handshaking() && !s.is_handshaking());
        Ok(s.peer_certificates()
            .and_then(|certs| peer_cert(&certs[0]))
            .map(|p| p.name))
    }

    #[test]
    fn node_requests_are_signed_into_a_working_mutual_tls_pair() {
        let (ca, _) = Ca::create(OffsetDateTime::now_utc()).unwrap();
        let (request, key) = node_request("gpu-1").unwrap();
        let cert = ca.sign_node("gpu-1", &request).unwrap();
        let node = Identity::from_pem(&cert.pem, &key, Path::new("node")).unwrap();
        let server = server_config(
            &ca,
            ca.server_identity(&["localhost".into(), "127.0.0.1".into()])
                .unwrap(),
        )
        .unwrap();
        let client = client_config(ca.cert_pem(), Path::new("ca"), Some(node)).unwrap();
        assert_eq!(handshake(client, server), Ok(Some("gpu-1".to_string())));
        // A node certificate of another CA is refused by the controller.
        let (other, _) = Ca::create(OffsetDateTime::now_utc()).unwrap();
        let (request, key) = node_request("gpu-1").unwrap();
        let foreign = other.sign_node("gpu-1", &request).unwrap();
        let foreign = Identity::from_pem(&foreign.pem, &key, Path::new("node")).unwrap();
        let client = client_config(ca.cert_pem(), Path::new("ca"), Some(foreign)).unwrap();
        let server =
            server_config(&ca, ca.server_identity(&["localhost".into()]).unwrap()).unwrap();
        assert!(
            handshake(client, server).is_err(),
            "a certificate of another CA is refused"
        );
    }
}
