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

/// One HTTP/1.1 connection to the controller, kept open across requests.
pub struct Connection {
    target: Target,
    token: Option<String>,
    sender: SendRequest<Full<Bytes>>,
}

impl Connection {
    /// Connects to `target`, sending `token` (if any) as the bearer of every request. The
    /// one place where the transport is chosen.
    pub async fn open(target: &Target, token: Option<String>) -> Result<Connection> {
        let unreachable = |source| Error::Unreachable {
            target: target.clone(),
            source,
        };
        let sender = match target {
            Target::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path)
                    .await
                    .map_err(unreachable)?;
                handshake(stream).await?
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
    ) -> Result<hyper::Response<hyper::body::Incoming>> {
        let req = self.request(method, uri, body)?;
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
    /// as they are) and returns the status and body, whatever the status.
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
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|source| Error::Cut {
                target: self.target.clone(),
                source,
            })?
            .to_bytes();
        Ok((status, bytes))
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
        let body = encode(path, body)?;
        let resp = self.exchange(Method::POST, &uri, Some(body)).await?;
        let status = resp.status();
        let mut body = resp.into_body();
        let cut = |source| Error::Cut {
            target: self.target.clone(),
            source,
        };
        if !status.is_success() {
            let bytes = body.collect().await.map_err(cut)?.to_bytes();
            return Err(ApiFailure::of_answer(status, &bytes).into());
        }
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
