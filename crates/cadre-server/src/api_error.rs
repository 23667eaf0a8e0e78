//! The error every part of the controller answers an API caller with ([`ApiError`]): a
//! code of the API's ([`ErrorCode`]), which [`crate::api`] maps to an HTTP status in one
//! place, and a message.
//!
//! A module of its own because the engine, authentication, the authority checks and the
//! read store all fail with it, and some of them use one another.

use cadre_proto::api::ErrorCode;
use cadre_store::StoreError;

/// An error answered to an API caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            // A number of the request (a job id, a time) beyond what the store keeps: the
            // request's fault, not the store's.
            StoreError::OutOfRange { .. } => {
                ApiError::new(ErrorCode::InvalidRequest, e.to_string())
            }
            e => ApiError::new(ErrorCode::Unavailable, format!("the store failed: {e}")),
        }
    }
}
