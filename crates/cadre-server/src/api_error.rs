//! The error every part of the controller answers an API caller with ([`ApiError`]): a
//! code of the API's ([`ErrorCode`]), which [`crate::api`] maps to an HTTP status in one
//! place, a stable reason ([`ErrorReason`], finer than the code: what clients decide on),
//! what the reason is about where there is one thing, and a message.
//!
//! A module of its own because the engine, authentication, the authority checks and the
//! read store all fail with it, and some of them use one another.

use cadre_proto::api::{ErrorCode, ErrorReason};
use cadre_store::StoreError;

/// An error answered to an API caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub reason: ErrorReason,
    pub subject: Option<String>,
    pub message: String,
}

impl ApiError {
    /// An error of `code` whose reason is the code's own (no client tells it apart).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason: ErrorReason::of_code(code),
            subject: None,
            message: message.into(),
        }
    }

    /// An error for `reason` (its code follows from it).
    pub fn because(reason: ErrorReason, message: impl Into<String>) -> ApiError {
        ApiError {
            code: reason.code(),
            reason,
            subject: None,
            message: message.into(),
        }
    }

    /// The one name or value the reason is about.
    pub fn about(mut self, subject: impl Into<String>) -> ApiError {
        self.subject = Some(subject.into());
        self
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            // A number of the request (a job id, a time) beyond what the store keeps: the
            // request's fault, not the store's.
            StoreError::OutOfRange { .. } => {
                ApiError::because(ErrorReason::OutOfRange, e.to_string())
            }
            e => ApiError::new(ErrorCode::Unavailable, format!("the store failed: {e}")),
        }
    }
}
