//! Nodes' enrolment over the API: an administrator makes a one-time join token
//! (`POST /nodes/join-tokens`), a new node's agent trades it with a certificate request for
//! its node certificate (`POST /nodes/enrol`), and an administrator cuts a node off
//! (`POST /nodes/{name}/revoke`).
//!
//! **Must hold**: a join token is shown once, kept hashed, enrols one node once before it
//! expires; an enrolment comes over TLS (or the Unix socket), never plain TCP, since the
//! token is a secret; the node named is one of the cluster's; the certificate names that
//! node and nothing the request asked for; revoking a node closes its agents' live
//! connections and refuses its certificate from then on.

use super::{Body, admin_only, read_store};
use crate::api_error::ApiError;
use crate::auth::{Peer, Principal};
use crate::engine::wall_now;
use crate::listen::Transport;
use crate::state::AppState;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use cadre_core::time::Time;
use cadre_proto::api::{
    EnrolRequest, EnrolResponse, ErrorBody, ErrorCode, ErrorReason, JoinTokenRequest,
    JoinTokenView, RevokeResponse,
};
use cadre_store::{NewJoinToken, NodeCertRecord, TokenHash};

/// How long a join token lasts when the request does not say.
pub const DEFAULT_JOIN_TTL_SECS: u64 = 3600;
/// The longest a join token may last.
pub const MAX_JOIN_TTL_SECS: u64 = 30 * 24 * 3600;
/// The prefix of join tokens (what tells them from API tokens in logs and files).
pub const JOIN_TOKEN_PREFIX: &str = "cadre-join-";

/// Whether the node is one of the cluster's.
async fn known_node(st: &AppState, node: &str) -> Result<(), ApiError> {
    let name = node.to_owned();
    let known = st
        .engine
        .read(move |c| c.sched().cluster().node_id(&name).is_some())
        .await?;
    if known {
        Ok(())
    } else {
        Err(ApiError::because(
            ErrorReason::UnknownNode,
            format!("node `{node}` is not in the cluster"),
        )
        .about(node))
    }
}

/// Makes a one-time join token (administrators). The secret is in this answer only.
#[utoipa::path(post, path = "/nodes/join-tokens", request_body = JoinTokenRequest,
    responses((status = 201, body = JoinTokenView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(super) async fn create_join_token(
    State(st): State<AppState>,
    who: Principal,
    Body(req): Body<JoinTokenRequest>,
) -> Result<(StatusCode, Json<JoinTokenView>), ApiError> {
    admin_only(&who, "make join tokens")?;
    let ttl = req.ttl_secs.unwrap_or(DEFAULT_JOIN_TTL_SECS);
    if ttl == 0 || ttl > MAX_JOIN_TTL_SECS {
        return Err(ApiError::because(
            ErrorReason::OutOfRange,
            format!("ttl_secs is {ttl}; a join token lasts 1 to {MAX_JOIN_TTL_SECS} seconds"),
        ));
    }
    if let Some(node) = &req.node {
        known_node(&st, node).await?;
    }
    let secret = crate::state::random_secret(JOIN_TOKEN_PREFIX);
    let now = wall_now();
    let new = NewJoinToken {
        hash: TokenHash::of(&secret),
        node: req.node.clone(),
        created: now,
        expires: Time(now.0 + ttl),
    };
    let expires_at = new.expires.0;
    read_store(&st, move |s| s.create_join_token(&new)).await?;
    tracing::info!(node = ?req.node, ttl, "join token made");
    Ok((
        StatusCode::CREATED,
        Json(JoinTokenView {
            token: secret,
            node: req.node,
            expires_at,
        }),
    ))
}

/// Trades a join token and a certificate request for the node's certificate. No other
/// credentials: the token is the proof. Over TLS or the Unix socket only.
#[utoipa::path(post, path = "/nodes/enrol", request_body = EnrolRequest,
    responses((status = 201, body = EnrolResponse), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(super) async fn enrol(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    transport: Option<Extension<Transport>>,
    Body(req): Body<EnrolRequest>,
) -> Result<(StatusCode, Json<EnrolResponse>), ApiError> {
    let over_tls = transport.is_some_and(|Extension(t)| t.tls);
    if matches!(peer, Peer::Tcp(_)) && !over_tls {
        return Err(ApiError::because(
            ErrorReason::TlsRequired,
            "a join token is a secret: enrol over https (or the controller's Unix socket)",
        ));
    }
    let Some(tls) = st.tls.clone() else {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "this controller has no TLS (it was started with --insecure): nodes cannot enrol",
        ));
    };
    let mut req = req;
    if req.node.is_empty() {
        // The name its join token was made for (`cadre node token create --node NAME`).
        let hash = TokenHash::of(&req.token);
        req.node = read_store(&st, move |s| s.join_token_node(&hash))
            .await?
            .or(req.host_node.take())
            .ok_or_else(|| {
                ApiError::because(
                    ErrorReason::JoinRefused,
                    "the join token names no node (or is not one): give the agent its name (--node NAME)",
                )
            })?;
    }
    cadre_tls::check_node_name(&req.node)
        .map_err(|e| ApiError::because(ErrorReason::InvalidRequest, e.to_string()))?;
    known_node(&st, &req.node).await?;
    let cert = tls
        .ca
        .sign_node(&req.node, &req.csr_pem)
        .map_err(|e| ApiError::because(ErrorReason::InvalidRequest, e.to_string()))?;
    let now = wall_now();
    let record = NodeCertRecord {
        serial: cert.serial.clone(),
        node: req.node.clone(),
        issued: now,
        expires: Time(u64::try_from(cert.not_after).unwrap_or(0)),
        revoked: None,
    };
    let hash = TokenHash::of(&req.token);
    let taken = read_store(&st, move |s| s.enrol_node(&hash, &record)).await?;
    if let Err(why) = taken {
        tracing::warn!(node = %req.node, %why, "enrolment refused");
        return Err(ApiError::because(
            ErrorReason::JoinRefused,
            format!("node `{}` cannot enrol: {why}", req.node),
        )
        .about(&req.node));
    }
    // A certificate issued before (if the node enrolled again) is revoked by now: its
    // connections close.
    let _ = st.revoked.send(req.node.clone());
    tracing::info!(node = %req.node, serial = %cert.serial, "node enrolled");
    Ok((
        StatusCode::CREATED,
        Json(EnrolResponse {
            node: req.node,
            cert_pem: cert.pem,
            ca_pem: tls.ca.cert_pem().to_owned(),
            expires_at: u64::try_from(cert.not_after).unwrap_or(0),
        }),
    ))
}

/// Revokes a node's certificates and closes its agents' connections (administrators).
#[utoipa::path(post, path = "/nodes/{name}/revoke", params(("name" = String, Path, description = "node name")),
    responses((status = 200, body = RevokeResponse), (status = 403, body = ErrorBody)))]
pub(super) async fn revoke(
    State(st): State<AppState>,
    who: Principal,
    Path(name): Path<String>,
) -> Result<Json<RevokeResponse>, ApiError> {
    admin_only(&who, "revoke nodes")?;
    let now = wall_now();
    let node = name.clone();
    let revoked = read_store(&st, move |s| s.revoke_node_certs(&node, now)).await?;
    let _ = st.revoked.send(name.clone());
    tracing::warn!(node = %name, revoked, "node certificates revoked");
    Ok(Json(RevokeResponse {
        node: name,
        revoked,
    }))
}
