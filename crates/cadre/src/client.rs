//! The command line's client of the controller's REST API: HTTP/1.1 over the Unix socket
//! (the kernel tells the controller who we are) or over TCP with a bearer token.
//!
//! Where the controller is: `--server`/`$CADRE_SERVER` (`unix:///path/cadre.sock` or
//! `http://host:port`), else the socket in the data directory's run directory
//! ([`crate::paths`]).

use anyhow::{Context, Result};
use cadre_proto::api::{ErrorBody, PREFIX};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;
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
            anyhow::ensure!(
                !host.is_empty() && !host.contains('/'),
                "the server address `{text}` must be `http://host:port`"
            );
            return Ok(Target::Tcp(host.to_owned()));
        }
        anyhow::ensure!(
            !text.contains("://"),
            "the server address `{text}` must be `unix:///path/to/cadre.sock` or `http://host:port` (https is not supported yet)"
        );
        Ok(Target::Unix(PathBuf::from(text)))
    }

    /// The controller of a data directory: the socket in its run directory
    /// ([`crate::paths::run_dir_of`]).
    pub fn of_data_dir(dir: &Path) -> Target {
        Target::Unix(crate::paths::socket_in(&crate::paths::run_dir_of(dir)))
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

/// An error answer of the API.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiFailure {
    pub status: u16,
    /// The API's code and reason (`None`: the answer was not the API's error body).
    pub code: Option<cadre_proto::api::ErrorCode>,
    pub reason: Option<cadre_proto::api::ErrorReason>,
    /// What the reason is about (the partition's name of `unknown_partition`).
    pub subject: Option<String>,
    pub message: String,
}

/// One HTTP/1.1 connection to the controller, kept open across requests.
pub struct Connection {
    target: Target,
    token: Option<String>,
    sender: SendRequest<Full<Bytes>>,
}

impl Connection {
    pub async fn open(target: &Target, token: Option<String>) -> Result<Connection> {
        let unreachable = || {
            format!(
                "cannot reach the controller at {target} (is it running? start one with `cadre up`)"
            )
        };
        let sender = match target {
            Target::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .with_context(unreachable)?;
                handshake(stream).await?
            }
            Target::Tcp(addr) => {
                let stream = tokio::net::TcpStream::connect(addr)
                    .await
                    .with_context(unreachable)?;
                stream.set_nodelay(true)?;
                handshake(stream).await?
            }
        };
        Ok(Connection {
            target: target.clone(),
            token,
            sender,
        })
    }

    /// A request to `uri` with the connection's token, and a JSON body if given.
    fn request(
        &self,
        method: Method,
        uri: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Request<Full<Bytes>>> {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, "cadre");
        if let Some(token) = &self.token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        Ok(req.body(Full::new(Bytes::from(body.unwrap_or_default())))?)
    }

    /// Sends a request to `uri` and waits for the answer's head (its body still to read).
    async fn exchange(
        &mut self,
        method: Method,
        uri: &str,
        body: Option<Vec<u8>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>> {
        let req = self.request(method, uri, body)?;
        self.sender.ready().await.with_context(|| {
            format!("the connection to the controller at {} closed", self.target)
        })?;
        self.sender
            .send_request(req)
            .await
            .with_context(|| format!("request {uri} to the controller failed"))
    }

    /// Sends a request to `PREFIX + path` and returns the status and body.
    pub async fn send_raw(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes)> {
        let uri = if path.starts_with('/') && !path.starts_with(PREFIX) && path != "/metrics" {
            format!("{PREFIX}{path}")
        } else {
            path.to_owned()
        };
        let resp = self.exchange(method, &uri, body).await?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await?.to_bytes();
        Ok((status, bytes))
    }

    /// Sends a JSON request whose answer is a stream of JSON lines, handing each line to
    /// `on_line` as it arrives. An error answer is returned as the API's error; a stream
    /// cut short is an error too.
    pub async fn stream_lines<B: Serialize>(
        &mut self,
        path: &str,
        body: &B,
        mut on_line: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let uri = format!("{PREFIX}{path}");
        let resp = self
            .exchange(Method::POST, &uri, Some(serde_json::to_vec(body)?))
            .await?;
        let status = resp.status();
        let mut body = resp.into_body();
        if !status.is_success() {
            let bytes = body.collect().await?.to_bytes();
            return Err(failure(status, &bytes).into());
        }
        let mut pending: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame
                .with_context(|| format!("the controller at {} stopped answering", self.target))?;
            if let Some(data) = frame.data_ref() {
                pending.extend_from_slice(data);
                while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    on_line(&line[..line.len() - 1])?;
                }
            }
        }
        if !pending.is_empty() {
            on_line(&pending)?;
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
        let body = body.map(serde_json::to_vec).transpose()?;
        let (status, bytes) = self.send_raw(method, path, body).await?;
        if !status.is_success() {
            return Err(failure(status, &bytes).into());
        }
        let text = if bytes.is_empty() {
            &b"null"[..]
        } else {
            &bytes[..]
        };
        serde_json::from_slice(text)
            .with_context(|| format!("the controller's answer to {path} is not what was expected"))
    }
}

fn failure(status: StatusCode, bytes: &[u8]) -> ApiFailure {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => ApiFailure {
            status: status.as_u16(),
            code: Some(body.error.code),
            reason: Some(body.error.reason),
            subject: body.error.subject,
            message: body.error.message,
        },
        Err(_) => ApiFailure {
            status: status.as_u16(),
            code: None,
            reason: None,
            subject: None,
            message: format!(
                "the controller answered {status}: {}",
                String::from_utf8_lossy(bytes).trim()
            ),
        },
    }
}

async fn handshake<S>(stream: S) -> Result<SendRequest<Full<Bytes>>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .context("HTTP handshake with the controller failed")?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// A blocking client for one command-line invocation.
pub struct Client {
    rt: tokio::runtime::Runtime,
    conn: Connection,
}

impl Client {
    pub fn connect(target: &Target, token: Option<String>) -> Result<Client> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
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
        assert!(Target::parse("https://x:1").is_err());
        assert!(Target::parse("http://").is_err());
    }
}
