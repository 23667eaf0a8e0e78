//! The controller's end of the agent protocol ([`cadre_proto::agent`]): the WebSocket at
//! `/agent/v1/connect`. This module only carries messages; what they mean is the engine's.
//!
//! Each connection: the upgrade request must carry the cluster key (401 otherwise); the
//! first message must be a `Hello` (within [`HELLO_TIMEOUT`]); after it, the engine's
//! messages for the node go out in order, and the agent's events come in. A `Refused`
//! closes the connection once sent.

use crate::auth::{bearer, same_secret};
use crate::engine::{Command, EngineHandle};
use crate::state::AppState;
use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cadre_proto::agent::{AgentMessage, ControllerMessage};
use futures_util::{SinkExt, StreamExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long an agent has to say hello after connecting.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// `GET /agent/v1/connect`.
pub async fn connect(
    State(state): State<AppState>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    let given = bearer(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    );
    if !given.is_some_and(|k| same_secret(k, &state.auth.agent_key)) {
        return (
            StatusCode::UNAUTHORIZED,
            "agents must send the cluster key as `Authorization: Bearer <key>`\n",
        )
            .into_response();
    }
    let engine = state.engine.clone();
    upgrade.on_upgrade(move |socket| serve_agent(socket, engine))
}

async fn serve_agent(socket: WebSocket, engine: EngineHandle) {
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
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ControllerMessage>();
    if engine
        .send(Command::AgentHello { conn, hello, tx })
        .is_err()
    {
        return;
    }
    let writer = tokio::spawn(async move {
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
    while let Some(frame) = stream.next().await {
        match frame {
            Ok(Message::Text(text)) => match serde_json::from_str::<AgentMessage>(&text) {
                Ok(AgentMessage::Event(event)) => {
                    if engine.send(Command::AgentEvent { conn, event }).is_err() {
                        break;
                    }
                }
                Ok(AgentMessage::Output(chunk)) => engine.io().output(chunk),
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
    writer.abort();
    let _ = engine.send(Command::AgentGone { conn });
}
