//! One HTTP/1.1 connection to the controller ([`Connection`]), and its blocking form
//! ([`Client`]).

use crate::{ApiFailure, BoxError, Error, Result, Target};
use cadre_proto::api::PREFIX;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The CA a TLS client trusts: `ca`, else `$CADRE_CA`, else the `ca.crt` the controller of
/// the default data directory puts in its run directory.
fn tls_config(
    target: &Target,
    ca: Option<&std::path::Path>,
) -> Result<std::sync::Arc<rustls::ClientConfig>> {
    let path = match ca {
        Some(p) => p.to_path_buf(),
        None => match std::env::var_os("CADRE_CA") {
            Some(p) if !p.is_empty() => std::path::PathBuf::from(p),
            _ => crate::locate::run_dir_of(&crate::locate::default_data_dir()).join("ca.crt"),
        },
    };
    let trust = |why: String| Error::Trust {
        target: target.clone(),
        why,
    };
    let pem = std::fs::read_to_string(&path)
        .map_err(|e| trust(format!("cannot read the CA {}: {e}", path.display())))?;
    cadre_tls::client_config(&pem, &path, None).map_err(|e| trust(e.to_string()))
}

/// How long a client waits through a failover of replicated controllers (a standby's
/// `not_leader` with no leader yet, or the leader gone mid-request) before it gives up.
const FAILOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// One HTTP/1.1 connection to the controller, kept open across requests.
pub struct Connection {
    /// The controller connected to.
    target: Target,
    /// Every controller it may reach (replicas), `target` among them.
    each: Vec<Target>,
    token: Option<String>,
    sender: SendRequest<Full<Bytes>>,
}

/// Whether an answer is a failover's: a standby's (with the leader it names), or a leader
/// that is stopping or lost its store (503 `unavailable`).
fn not_leader(status: StatusCode, bytes: &[u8]) -> Option<Option<String>> {
    use cadre_proto::api::ErrorReason;
    if status != StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    let f = ApiFailure::of_answer(status, bytes);
    match f.reason {
        Some(ErrorReason::NotLeader) => Some(f.subject),
        Some(ErrorReason::Unavailable) => Some(None),
        _ => None,
    }
}

/// A key that makes a request's retries one request to the controller (a submission
/// retried after a failover is committed once): this process, now, and a counter.
fn idempotency_key() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{:x}-{nanos:x}-{n:x}", std::process::id())
}

impl Connection {
    /// Connects to `target` (the first of its controllers that answers), sending `token`
    /// (if any) as the bearer of every request.
    pub async fn open(target: &Target, token: Option<String>) -> Result<Connection> {
        let each = target.each();
        let mut last = None;
        for t in &each {
            match Connection::open_one(t, token.clone()).await {
                Ok(mut c) => {
                    c.each = each.clone();
                    return Ok(c);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::UnsupportedAddress {
            address: target.to_string(),
        }))
    }

    /// Connects again after a failover: to the leader a standby named, if it is one of
    /// this client's controllers, else to the next that answers after the current one.
    async fn reconnect(&mut self, hint: Option<&str>) -> Result<()> {
        let n = self.each.len();
        let at = self
            .each
            .iter()
            .position(|t| *t == self.target)
            .unwrap_or(0);
        let mut order: Vec<Target> = Vec::with_capacity(n);
        if let Some(h) = hint
            && let Some(t) = self
                .each
                .iter()
                .find(|t| t.to_string() == h.trim_end_matches('/'))
        {
            order.push(t.clone());
        }
        order.extend((1..=n).map(|i| self.each[(at + i) % n].clone()));
        let mut last = None;
        for t in order {
            match Connection::open_one(&t, self.token.clone()).await {
                Ok(c) => {
                    self.target = c.target;
                    self.sender = c.sender;
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::UnsupportedAddress {
            address: self.target.to_string(),
        }))
    }

    /// Connects to one controller. The one place where the transport is chosen.
    async fn open_one(target: &Target, token: Option<String>) -> Result<Connection> {
        let unreachable = |source| Error::Unreachable {
            target: target.clone(),
            source,
        };
        let sender = match target {
            Target::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(unreachable)?;
                handshake(QuietUnixStream(stream)).await?
            }
            Target::Tcp(addr) => {
                let stream = tokio::net::TcpStream::connect(addr)
                    .await
                    .map_err(unreachable)?;
                stream.set_nodelay(true).map_err(|source| Error::Socket {
                    target: target.clone(),
                    source,
                })?;
                handshake(stream).await?
            }
            Target::Any(all) => {
                return Err(Error::UnsupportedAddress {
                    address: format!("a list within a list ({})", Target::Any(all.clone())),
                });
            }
            Target::Https {
                authority,
                host,
                ca,
            } => {
                let config = tls_config(target, ca.as_deref())?;
                let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| {
                    Error::Trust {
                        target: target.clone(),
                        why: format!("`{host}` is not a host name or address: {e}"),
                    }
                })?;
                let stream = tokio::net::TcpStream::connect(authority)
                    .await
                    .map_err(unreachable)?;
                stream.set_nodelay(true).map_err(|source| Error::Socket {
                    target: target.clone(),
                    source,
                })?;
                let stream = tokio_rustls::TlsConnector::from(config)
                    .connect(name, stream)
                    .await
                    .map_err(|source| Error::Tls {
                        target: target.clone(),
                        source,
                    })?;
                handshake(stream).await?
            }
        };
        Ok(Connection {
            target: target.clone(),
            each: vec![target.clone()],
            token,
            sender,
        })
    }

    /// Where this connection goes.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// A request to `uri` with the connection's token, and a JSON body if given.
    fn request(
        &self,
        method: Method,
        uri: &str,
        body: Option<Vec<u8>>,
        key: Option<&str>,
    ) -> Result<Request<Full<Bytes>>> {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, "cadre");
        if let Some(key) = key {
            req = req.header(cadre_proto::api::IDEMPOTENCY_KEY, key);
        }
        if let Some(token) = &self.token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        req.body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|source| Error::BadRequest {
                uri: uri.to_owned(),
                source,
            })
    }

    /// Sends a request to `uri` and waits for the answer's head (its body still to read).
    async fn exchange(
        &mut self,
        method: Method,
        uri: &str,
        body: Option<Vec<u8>>,
        key: Option<&str>,
    ) -> Result<hyper::Response<hyper::body::Incoming>> {
        let req = self.request(method, uri, body, key)?;
        self.sender.ready().await.map_err(|source| Error::Closed {
            target: self.target.clone(),
            source,
        })?;
        self.sender
            .send_request(req)
            .await
            .map_err(|source| Error::Request {
                uri: uri.to_owned(),
                source,
            })
    }

    /// Sends a request to `PREFIX + path` (`/metrics` and paths already under the prefix
    /// as they are) and returns the status and body, whatever the status. With replicated
    /// controllers, a standby's `not_leader` is followed to the leader, and a request the
    /// leader refused as `unavailable` (stopping, its store lost) or did not answer (it went
    /// away) is sent again to the next one, for up to
    /// `FAILOVER_WAIT`: reads and `POST`s (which carry an idempotency key, so that the
    /// controller runs a retried submission once); other writes only when refused.
    pub async fn send_raw(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes)> {
        let key = (method == Method::POST).then(idempotency_key);
        let retry_lost = method == Method::GET || method == Method::POST;
        let until = std::time::Instant::now() + FAILOVER_WAIT;
        loop {
            let sent = self
                .send_once(method.clone(), path, body.clone(), key.as_deref())
                .await;
            let hint = match &sent {
                // With one controller, a standby's answer is the answer.
                Ok((status, bytes)) if self.each.len() > 1 => match not_leader(*status, bytes) {
                    Some(hint) => hint,
                    None => return sent,
                },
                Ok(_) => return sent,
                Err(e) if retry_lost && e.is_lost_connection() && self.each.len() > 1 => None,
                Err(_) => return sent,
            };
            if std::time::Instant::now() >= until {
                return sent;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            // No controller answering yet is a failover under way: keep trying.
            let _ = self.reconnect(hint.as_deref()).await;
        }
    }

    async fn send_once(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        key: Option<&str>,
    ) -> Result<(StatusCode, Bytes)> {
        let uri = if path.starts_with('/') && !path.starts_with(PREFIX) && path != "/metrics" {
            format!("{PREFIX}{path}")
        } else {
            path.to_owned()
        };
        let resp = self.exchange(method, &uri, body, key).await?;
        let status = resp.status();
        Ok((status, self.whole(resp.into_body()).await?))
    }

    /// The whole of an answer's body.
    async fn whole(&self, body: hyper::body::Incoming) -> Result<Bytes> {
        let collected = body.collect().await.map_err(|source| Error::Cut {
            target: self.target.clone(),
            source,
        })?;
        Ok(collected.to_bytes())
    }

    /// Sends a JSON request whose answer is a stream of JSON lines, handing each line to
    /// `on_line` as it arrives. An error answer is returned as the API's error; a stream
    /// cut short is an error too.
    pub async fn stream_lines<B: Serialize, E: Into<BoxError>>(
        &mut self,
        path: &str,
        body: &B,
        mut on_line: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<()> {
        let uri = format!("{PREFIX}{path}");
        let request = encode(path, body)?;
        let until = std::time::Instant::now() + FAILOVER_WAIT;
        // A standby's refusal (or a leader's that is stopping) is followed to the leader,
        // as [`Connection::send_raw`] does, and a refusal as unavailable (a step's agent
        // not reconnected yet after a restart) is sent again, with one controller too; a
        // stream cut is not sent again: what it started may be under way.
        let mut body = loop {
            let resp = self
                .exchange(Method::POST, &uri, Some(request.clone()), None)
                .await?;
            let status = resp.status();
            let body = resp.into_body();
            if status.is_success() {
                break body;
            }
            let bytes = self.whole(body).await?;
            match not_leader(status, &bytes) {
                Some(hint)
                    if (self.each.len() > 1 || hint.is_none())
                        && std::time::Instant::now() < until =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    let _ = self.reconnect(hint.as_deref()).await;
                }
                _ => return Err(ApiFailure::of_answer(status, &bytes).into()),
            }
        };
        let cut = |source| Error::Cut {
            target: self.target.clone(),
            source,
        };
        let mut handle = |line: &[u8]| {
            on_line(line).map_err(|e| Error::Line {
                path: path.to_owned(),
                source: e.into(),
            })
        };
        let mut pending: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(cut)?;
            if let Some(data) = frame.data_ref() {
                pending.extend_from_slice(data);
                while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    handle(&line[..line.len() - 1])?;
                }
            }
        }
        if !pending.is_empty() {
            handle(&pending)?;
        }
        Ok(())
    }

    /// Sends a JSON request and decodes a JSON answer (or the API's error).
    pub async fn call<B: Serialize, R: DeserializeOwned>(
        &mut self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<R> {
        let body = body.map(|b| encode(path, b)).transpose()?;
        let (status, bytes) = self.send_raw(method, path, body).await?;
        if !status.is_success() {
            return Err(ApiFailure::of_answer(status, &bytes).into());
        }
        let text = if bytes.is_empty() {
            &b"null"[..]
        } else {
            &bytes[..]
        };
        serde_json::from_slice(text).map_err(|source| Error::UnexpectedAnswer {
            path: path.to_owned(),
            source,
        })
    }
}

fn encode<B: Serialize>(path: &str, body: &B) -> Result<Vec<u8>> {
    serde_json::to_vec(body).map_err(|source| Error::Encode {
        path: path.to_owned(),
        source,
    })
}

/// A Unix stream whose writes to a controller that went away fail with `EPIPE` instead of
/// raising SIGPIPE: the Slurm commands take SIGPIPE's default (they end quietly when their
/// output is closed, as Slurm's do), and one holding a connection to a controller killed
/// meanwhile (salloc, srun, during a failover) must not be ended by it. Its writes are
/// never vectored (hyper then writes with `writev`, which has no such flag); the standard
/// library's TCP and Unix streams send with `MSG_NOSIGNAL` otherwise.
struct QuietUnixStream(tokio::net::UnixStream);

impl tokio::io::AsyncRead for QuietUnixStream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for QuietUnixStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::os::fd::AsRawFd;
        use std::task::Poll;
        loop {
            match self.0.poll_write_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            let fd = self.0.as_raw_fd();
            let sent = self.0.try_io(tokio::io::Interest::WRITABLE, || {
                // SAFETY: `buf` is valid for reads of `buf.len()` bytes, and `fd` is the
                // stream's own descriptor, open as long as `self` is.
                let n =
                    unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
                usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
            });
            match sent {
                // Not writable after all: `try_io` cleared the readiness, so the next
                // `poll_write_ready` waits for it (and registers this task's waker).
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

async fn handshake<S>(stream: S) -> Result<SendRequest<Full<Bytes>>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(Error::Handshake)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// A blocking client for one command-line invocation (or one test's request).
pub struct Client {
    rt: tokio::runtime::Runtime,
    conn: Connection,
}

impl Client {
    pub fn connect(target: &Target, token: Option<String>) -> Result<Client> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        let conn = rt.block_on(Connection::open(target, token))?;
        Ok(Client { rt, conn })
    }

    pub fn get<R: DeserializeOwned>(&mut self, path: &str) -> Result<R> {
        self.rt
            .block_on(self.conn.call::<(), R>(Method::GET, path, None))
    }

    pub fn send<B: Serialize, R: DeserializeOwned>(
        &mut self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<R> {
        self.rt.block_on(self.conn.call(method, path, body))
    }

    /// The controller this client is connected to now (the leader, of replicated ones).
    pub fn target(&self) -> &Target {
        self.conn.target()
    }

    /// Sends a request and returns the status and body, whatever the status.
    pub fn send_raw(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes)> {
        self.rt.block_on(self.conn.send_raw(method, path, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that takes SIGPIPE's default (as the Slurm commands do) and writes to a
    /// controller that went away gets an error it can fail over on, not SIGPIPE's death
    /// (salloc died so when its leader was killed).
    #[test]
    fn a_write_to_a_controller_that_went_away_fails_without_sigpipe() {
        use tokio::io::AsyncWriteExt;
        // SAFETY: only the disposition of SIGPIPE changes; nothing else in this test
        // binary writes to a closed pipe.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
            drop(theirs);
            let mut stream = QuietUnixStream(ours);
            assert!(!tokio::io::AsyncWrite::is_write_vectored(&stream));
            // As hyper writes a request: vectored (`writev`, which raises SIGPIPE where
            // `send` with `MSG_NOSIGNAL` does not).
            let parts = [
                std::io::IoSlice::new(b"GET / HTTP/1.1\r\n"),
                std::io::IoSlice::new(b"\r\n"),
            ];
            let err = stream.write_vectored(&parts).await.unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe, "{err}");
        });
    }
}
