//! The controller's end of the agent protocol ([`cadre_proto::agent`]): the WebSocket at
//! `/agent/v1/connect`. This module only carries messages; what they mean is the engine's.
//!
//! Each connection is an agent's in one of two ways: over TLS with its node's certificate
//! (mutual TLS: the certificate, issued at the node's enrolment, must be the node's live
//! one in the store, neither revoked nor expired, and the agent may then speak only for
//! that node), or with the cluster key as a bearer token (agents on the controller's
//! machine; 401 otherwise). The first message must be a `Hello` (within
//! [`HELLO_TIMEOUT`]); after it, the engine's messages for the node go out in order, and
//! the agent's events come in. A `Refused` closes the connection once sent; so does the
//! revocation of a certificate-identified node, and a lease without a frame from the agent,
//! which pings every sixth of it. When a connection closes, the engine is told when its
//! last frame came: the agent's lease is counted from then.

use crate::auth::{bearer, same_secret};
use crate::engine::{Command, EngineHandle};
use crate::listen::Transport;
use crate::state::AppState;
use axum::Extension;
use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cadre_proto::agent::{AgentMessage, ControllerMessage};
use cadre_tls::PeerCert;
use futures_util::{SinkExt, StreamExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long an agent has to say hello after connecting.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The read buffer of an agent's WebSocket.
const AGENT_READ_BUFFER: usize = 8 * 1024;

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// `GET /agent/v1/connect`.
pub async fn connect(
    State(state): State<AppState>,
    transport: Option<Extension<Transport>>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    let cert = transport.and_then(|Extension(t)| t.cert);
    // Before the certificate is checked: a revocation that lands in between is not missed.
    let revoked = state.revoked.subscribe();
    let identity = match cert {
        Some(cert) => match node_identity(&state, &cert).await {
            Ok(node) => Some(node),
            Err(why) => {
                tracing::warn!(node = %cert.name, serial = %cert.serial, %why, "agent refused");
                return (StatusCode::FORBIDDEN, format!("{why}\n")).into_response();
            }
        },
        None => {
            let given = bearer(
                headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok()),
            );
            if !given.is_some_and(|k| same_secret(k, &state.auth.agent_key)) {
                return (
                    StatusCode::UNAUTHORIZED,
                    "agents must show their node's certificate (cadre agent --join), or send the cluster key as `Authorization: Bearer <key>`\n",
                )
                    .into_response();
            }
            None
        }
    };
    let engine = state.engine.clone();
    let silence = state.agent_silence;
    // tungstenite reads through a buffer of 128 KiB by default, resident for every agent's
    // connection: 1.4 GiB at 10,000 agents (`cadre bench agents`). Agents' messages are
    // small, and a larger one is still read whole (the buffer grows for it).
    upgrade
        .read_buffer_size(AGENT_READ_BUFFER)
        .on_upgrade(move |socket| serve_agent(socket, engine, identity, revoked, silence))
}

/// The node a certificate-identified agent is: the certificate must be the node's live
/// one as the store records it.
async fn node_identity(state: &AppState, cert: &PeerCert) -> Result<String, String> {
    if !cert.client_auth {
        return Err("the certificate is not a node's (not for client authentication)".into());
    }
    let serial = cert.serial.clone();
    let record = state
        .reads
        .with(move |s| s.node_cert(&serial))
        .await
        .map_err(|e| e.message)?;
    let now = crate::engine::wall_now();
    match record {
        None => Err(format!(
            "certificate {} was not issued by this controller",
            cert.serial
        )),
        Some(r) if r.node != cert.name => Err(format!(
            "certificate {} was issued to node `{}`, not `{}`",
            cert.serial, r.node, cert.name
        )),
        Some(r) if r.revoked.is_some() => Err(format!(
            "the certificate of node `{}` is revoked: enrol it again with a new join token",
            r.node
        )),
        Some(r) if r.expires <= now => Err(format!(
            "the certificate of node `{}` has expired: enrol it again with a new join token",
            r.node
        )),
        Some(r) => Ok(r.node),
    }
}

async fn serve_agent(
    socket: WebSocket,
    engine: EngineHandle,
    identity: Option<String>,
    mut revoked: tokio::sync::broadcast::Receiver<String>,
    silence: Duration,
) {
    let conn = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
    let (mut sink, mut stream) = socket.split();
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, stream.next()).await {
        Ok(Some(Ok(Message::Text(text)))) => match serde_json::from_str::<AgentMessage>(&text) {
            Ok(AgentMessage::Hello(hello)) => hello,
            Ok(other) => {
                tracing::warn!(conn, ?other, "agent spoke before saying hello");
                return;
            }
            Err(e) => {
                let reason = format!("the first message is not a hello: {e}");
                let msg = ControllerMessage::Refused { reason };
                if let Ok(text) = serde_json::to_string(&msg) {
                    let _ = sink.send(Message::Text(text.into())).await;
                }
                return;
            }
        },
        _ => {
            tracing::warn!(conn, "agent connected but did not say hello");
            return;
        }
    };
    if let Some(node) = &identity
        && hello.node != *node
    {
        tracing::warn!(conn, certificate = %node, hello = %hello.node, "agent refused: it spoke for another node");
        let reason = format!(
            "this connection's certificate is node `{node}`'s; it cannot speak for node `{}`",
            hello.node
        );
        if let Ok(text) = serde_json::to_string(&ControllerMessage::Refused { reason }) {
            let _ = sink.send(Message::Text(text.into())).await;
        }
        let _ = sink.close().await;
        return;
    }
    let node_name = hello.node.clone();
    // When the last frame came: the agent's lease, as the controller counts it, starts
    // there (a frame is read at or after its arrival, so this is never early).
    let mut last_heard = std::time::Instant::now();
    engine.io().heard(&node_name);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ControllerMessage>();
    let to_agent = tx.clone();
    engine
        .io()
        .reads()
        .link(&node_name, conn, hello.version, tx.clone());
    if engine
        .send(Command::AgentHello { conn, hello, tx })
        .is_err()
    {
        return;
    }
    let mut writer = tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            let refused = matches!(msg, ControllerMessage::Refused { .. });
            let Ok(text) = serde_json::to_string(&msg) else {
                continue;
            };
            if sink.send(Message::Text(text.into())).await.is_err() {
                break;
            }
            if refused {
                let _ = sink.close().await;
                break;
            }
        }
    });
    let mut watching = identity.is_some();
    let mut cut = false;
    loop {
        let frame = tokio::select! {
            frame = tokio::time::timeout(silence, stream.next()) => match frame {
                Ok(frame) => frame,
                Err(_) => {
                    // Its agent pings every third of the lease: it is cut off (or stopped).
                    tracing::warn!(conn, ?silence, "nothing from the agent for a lease: closing its connection");
                    None
                }
            },
            gone = revoked.recv(), if watching => {
                match gone {
                    Ok(node) if Some(&node) == identity.as_ref() => {
                        tracing::warn!(conn, %node, "node certificate revoked: closing its agent's connection");
                        let _ = to_agent.send(ControllerMessage::Refused {
                            reason: format!("the certificate of node `{node}` was revoked"),
                        });
                        // Cut now, whatever the agent sends after: the writer gets a moment
                        // to deliver the refusal, then the connection is dropped.
                        cut = true;
                        None
                    }
                    Ok(_) => continue,
                    // Revocations were missed: this connection may be of one of them. Closed:
                    // the agent reconnects, and its certificate is checked again.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        watching = false;
                        continue;
                    }
                }
            }
        };
        let Some(frame) = frame else {
            break;
        };
        // A read error (a connection reset) is no frame from the agent: its lease still
        // counts from the last one.
        if frame.is_err() {
            break;
        }
        last_heard = std::time::Instant::now();
        engine.io().heard(&node_name);
        match frame {
            Ok(Message::Text(text)) => match serde_json::from_str::<AgentMessage>(&text) {
                Ok(AgentMessage::Event(event)) => {
                    if engine.send(Command::AgentEvent { conn, event }).is_err() {
                        break;
                    }
                }
                Ok(AgentMessage::Output(chunk)) => engine.io().output(chunk, &node_name),
                Ok(AgentMessage::GpuUsage { gpus }) => engine.io().gpu_usage(&node_name, gpus),
                Ok(AgentMessage::OutputRead { request, answer }) => {
                    engine.io().reads().answered(&node_name, request, answer)
                }
                Ok(AgentMessage::Health { problem }) => {
                    if engine.send(Command::AgentHealth { conn, problem }).is_err() {
                        break;
                    }
                }
                Ok(AgentMessage::Hello(_)) => {
                    tracing::warn!(conn, "agent said hello twice: dropping the connection");
                    break;
                }
                Err(e) => {
                    tracing::warn!(conn, error = %e, "unreadable agent message: dropping the connection");
                    break;
                }
            },
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    drop(to_agent);
    engine.io().forget_gpu_usage(&node_name);
    engine.io().reads().unlink(&node_name, conn);
    if cut {
        let _ = tokio::time::timeout(Duration::from_secs(1), &mut writer).await;
    }
    writer.abort();
    let _ = engine.send(Command::AgentGone { conn, last_heard });
}
