//! The web dashboard's pages under `/ui/`: plain HTML, CSS and JavaScript of our own,
//! embedded in the binary (nothing is fetched at build or run time, no library is used),
//! the logins that open a session ([`crate::dashboard`] keeps them), the views the REST
//! API has no equivalent of (which job holds each GPU, [`cluster`]; the scheduler's health,
//! [`scheduler`]; the first of the queue in priority order, [`queue`]), and the
//! live-update stream ([`live`]).
//!
//! The pages read and act through the REST API itself (`/api/v1`), with the session
//! cookie in place of a bearer token: a user sees and changes exactly what the API lets
//! that user see and change. Logins: a bearer token typed into the login form, or a
//! one-time link from `cadre ui` (`POST /api/v1/ui/links`).
//!
//! Not here: authorisation (the API's handlers decide), the sessions themselves.

pub mod cluster;
pub mod live;
pub mod queue;
pub mod scheduler;

use crate::api_error::ApiError;
use crate::auth::{Principal, Via};
use crate::dashboard::session_cookie;
use crate::dashboard::sessions::{self, Login};
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use cadre_proto::api::ErrorCode;
use cadre_store::TokenHash;
use serde::{Deserialize, Serialize};
use std::time::Instant;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

fn unauthenticated(message: &str) -> ApiError {
    ApiError::new(ErrorCode::Unauthenticated, message)
}

/// The dashboard's routes: its pages, logins, the cluster view and the live stream.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(index))
        .route("/ui/app.js", get(app_js))
        .route("/ui/app.css", get(app_css))
        .route("/ui/login", get(login_with_link).post(login_with_token))
        .route("/ui/logout", post(logout))
        .route("/ui/session", get(session))
        .route("/ui/cluster", get(cluster::cluster))
        .route("/ui/scheduler", get(scheduler::scheduler))
        .route("/ui/queue", get(queue::queue))
        .route("/ui/live", get(live::stream))
        .with_state(state)
}

/// Headers every dashboard answer carries: no framing, no sniffing, no referrer (a link's
/// secret must not leak to anything the page loads), no caching of what is personal.
fn hardened(mut resp: Response, content_type: &'static str) -> Response {
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn index() -> Response {
    let mut resp = hardened(INDEX_HTML.into_response(), "text/html; charset=utf-8");
    resp.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        ),
    );
    resp
}

async fn app_js() -> Response {
    hardened(APP_JS.into_response(), "text/javascript; charset=utf-8")
}

async fn app_css() -> Response {
    hardened(APP_CSS.into_response(), "text/css; charset=utf-8")
}

#[derive(Deserialize)]
struct LinkQuery {
    once: String,
}

/// The cookie of a new session, and the answer that sets it.
fn opened(st: &AppState, login: Login, user: &str, then: Response) -> Result<Response, ApiError> {
    let o = st
        .dashboard
        .sessions()?
        .open(login, user, Instant::now())
        .map_err(|e| ApiError::new(ErrorCode::Unavailable, e.to_string()))?;
    let mut resp = hardened(then, "text/plain; charset=utf-8");
    resp.headers_mut().insert(
        header::SET_COOKIE,
        st.dashboard
            .set_cookie(&o.cookie, sessions::SESSION_TTL.as_secs()),
    );
    Ok(resp)
}

/// `GET /ui/login?once=SECRET`: a `cadre ui` link. Good once; then to the dashboard.
async fn login_with_link(
    State(st): State<AppState>,
    q: Result<Query<LinkQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let login = q.ok().and_then(|Query(q)| {
        // A bound on what is hashed: links are 64 hexadecimal digits.
        (q.once.len() <= 128)
            .then(|| {
                st.dashboard
                    .sessions()
                    .ok()?
                    .take_link(&q.once, Instant::now())
            })
            .flatten()
    });
    let Some(login) = login else {
        let page = (
            StatusCode::UNAUTHORIZED,
            "This login link is not valid: it was used already, has expired, or was never \
             made. Run `cadre ui` again for a new one, or log in with a token at /ui/.\n",
        )
            .into_response();
        return hardened(page, "text/plain; charset=utf-8");
    };
    let user = match &login {
        Login::Link { user, .. } => user.clone(),
        Login::Token(_) => String::new(),
    };
    tracing::info!(%user, "dashboard login with a one-time link");
    opened(
        &st,
        login,
        &user,
        Redirect::to("/ui/#/cluster").into_response(),
    )
    .unwrap_or_else(IntoResponse::into_response)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenLogin {
    token: String,
}

/// `POST /ui/login` with `{"token": ...}` (JSON, so that another site's form cannot post
/// it: a cross-site JSON request needs a preflight the controller never grants).
async fn login_with_token(
    State(st): State<AppState>,
    crate::api::Body(req): crate::api::Body<TokenLogin>,
) -> Result<Response, ApiError> {
    let token = req.token.trim().to_owned();
    if token.is_empty() || token.len() > 256 || cadre_proto::job_token::is_job_token(&token) {
        return Err(unauthenticated("the token is not valid"));
    }
    let hash = TokenHash::of(&token);
    let found = st.reads.with(move |s| s.active_token(&hash)).await?;
    let Some(t) = found else {
        return Err(unauthenticated(
            "the token is not valid (unknown or revoked)",
        ));
    };
    tracing::info!(user = %t.user, token = t.id, "dashboard login with a token");
    opened(
        &st,
        Login::Token(hash),
        &t.user,
        StatusCode::NO_CONTENT.into_response(),
    )
}

/// `POST /ui/logout`: ends the session (with its CSRF token).
async fn logout(State(st): State<AppState>, who: Principal, headers: HeaderMap) -> Response {
    if who.via == Via::Session
        && let Some(cookie) = session_cookie(&headers)
        && let Ok(mut s) = st.dashboard.sessions()
    {
        s.close(cookie);
    }
    let mut resp = hardened(
        StatusCode::NO_CONTENT.into_response(),
        "text/plain; charset=utf-8",
    );
    resp.headers_mut()
        .insert(header::SET_COOKIE, st.dashboard.set_cookie("", 0));
    resp
}

/// Who the session is, and its CSRF token (which only a page of this origin can read).
#[derive(Serialize)]
struct SessionView {
    user: String,
    admin: bool,
    csrf: String,
}

async fn session(
    State(st): State<AppState>,
    who: Principal,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let csrf = match (who.via, session_cookie(&headers)) {
        (Via::Session, Some(cookie)) => st
            .dashboard
            .sessions()?
            .get(cookie, Instant::now())
            .map(|s| s.csrf)
            .unwrap_or_default(),
        _ => {
            return Err(unauthenticated(
                "the dashboard needs a session: log in with a token or a `cadre ui` link",
            ));
        }
    };
    let body = Json(SessionView {
        user: who.user,
        admin: who.admin,
        csrf,
    });
    Ok(hardened(body.into_response(), "application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pages_load_nothing_from_elsewhere() {
        for (name, text) in [
            ("index.html", INDEX_HTML),
            ("app.js", APP_JS),
            ("app.css", APP_CSS),
        ] {
            for bad in [
                "http://", "https://", "//cdn", "<script>", "style=\"", "eval(",
            ] {
                assert!(!text.contains(bad), "{name} contains `{bad}`");
            }
        }
    }
}
