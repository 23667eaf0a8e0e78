//! What can fail when talking to the controller: the address, the connection, the
//! exchange, or the API's own answer ([`ApiFailure`]).

use crate::Target;
use cadre_proto::api::{ErrorCode, ErrorReason};

/// An error of any kind, from a caller's handler of streamed lines.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failure to talk to the controller, or its refusal.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the server address `{address}` must be `http://host:port`")]
    BadHttpAddress { address: String },
    #[error(
        "the server address `{address}` must be `unix:///path/to/cadre.sock`, `https://host:port` or `http://host:port`"
    )]
    UnsupportedAddress { address: String },
    #[error(
        "cannot trust the controller at {target}: {why} (give the cluster's CA with --ca FILE or CADRE_CA; the controller keeps it as ca.crt in its data and run directories)"
    )]
    Trust { target: Target, why: String },
    #[error("TLS with the controller at {target} failed: {source}")]
    Tls {
        target: Target,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot reach the controller at {target} (is it running? start one with `cadre up`)")]
    Unreachable {
        target: Target,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to set up the connection to the controller at {target}")]
    Socket {
        target: Target,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP handshake with the controller failed")]
    Handshake(#[source] hyper::Error),
    #[error("the connection to the controller at {target} closed")]
    Closed {
        target: Target,
        #[source]
        source: hyper::Error,
    },
    #[error("request {uri} to the controller failed")]
    Request {
        uri: String,
        #[source]
        source: hyper::Error,
    },
    #[error("failed to build the request {uri}")]
    BadRequest {
        uri: String,
        #[source]
        source: hyper::http::Error,
    },
    #[error("failed to encode the body of the request {path}")]
    Encode {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the controller at {target} stopped answering")]
    Cut {
        target: Target,
        #[source]
        source: hyper::Error,
    },
    #[error("the controller's answer to {path} is not what was expected")]
    UnexpectedAnswer {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("failed to handle a line of the controller's answer to {path}")]
    Line {
        path: String,
        #[source]
        source: BoxError,
    },
    #[error("failed to start the client's runtime")]
    Runtime(#[source] std::io::Error),
    /// The API refused.
    #[error(transparent)]
    Api(#[from] ApiFailure),
}

impl Error {
    /// The API's refusal, if that is what this is.
    /// Whether the controller went away before answering (the request may or may not have
    /// been carried out): what a failover looks like from a client.
    pub fn is_lost_connection(&self) -> bool {
        matches!(
            self,
            Error::Unreachable { .. }
                | Error::Closed { .. }
                | Error::Request { .. }
                | Error::Cut { .. }
                | Error::Tls { .. }
                | Error::Handshake(_)
        )
    }

    pub fn api_failure(&self) -> Option<&ApiFailure> {
        match self {
            Error::Api(f) => Some(f),
            _ => None,
        }
    }

    /// The API's refusal that `err` is or was caused by, whatever wraps it.
    pub fn api_failure_in<'a>(
        err: &'a (dyn std::error::Error + 'static),
    ) -> Option<&'a ApiFailure> {
        std::iter::successors(Some(err), |e| e.source()).find_map(|e| {
            e.downcast_ref::<ApiFailure>()
                .or_else(|| e.downcast_ref::<Error>().and_then(Error::api_failure))
        })
    }
}

/// An error answer of the API.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ApiFailure {
    pub status: u16,
    /// The API's code and reason (`None`: the answer was not the API's error body).
    pub code: Option<ErrorCode>,
    pub reason: Option<ErrorReason>,
    /// What the reason is about (the partition's name of `unknown_partition`).
    pub subject: Option<String>,
    pub message: String,
}

impl ApiFailure {
    /// The failure an answer of `status` with body `bytes` tells.
    pub(crate) fn of_answer(status: hyper::StatusCode, bytes: &[u8]) -> ApiFailure {
        match serde_json::from_slice::<cadre_proto::api::ErrorBody>(bytes) {
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
}
