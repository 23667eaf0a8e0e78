//! The dashboard's state that the API shares ([`Dashboard`]): the login links and
//! sessions ([`sessions`]), who a request's session cookie is ([`session_principal`], which
//! the API's extractor asks when no `Authorization` header is given), `cadre ui`'s links
//! ([`create_link`]), and the channel of live updates.
//!
//! A session stands for its user exactly as a token would: the API's handlers decide what
//! it may see and change. A request that changes anything must also carry the session's
//! CSRF token in `X-CSRF-Token` (the cookie alone, which a browser adds by itself, is not
//! enough). The cookie is `HttpOnly` and `SameSite=Strict`, and `Secure` when the
//! controller serves TLS on its TCP address ([`Dashboard::secure_cookies`]).
//!
//! Not here: the pages and their routes ([`crate::ui`]).

pub mod sessions;

use crate::api_error::ApiError;
use crate::auth::{Principal, Via};
use crate::read_store::ReadStore;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use cadre_proto::api::{ErrorCode, UiLinkView};
use sessions::{Login, Session, Sessions};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Instant;
use tokio::sync::watch;

/// The session cookie's name.
pub const COOKIE: &str = "cadre_session";
/// The header a session's changing request carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The dashboard's shared state.
pub struct Dashboard {
    sessions: Mutex<Sessions>,
    /// The TCP address the dashboard is served on (`--listen`), for `cadre ui`'s link.
    pub listen: Option<SocketAddr>,
    /// Whether cookies are marked `Secure`: when the controller serves TLS on its TCP
    /// address (and so the dashboard is `https://`).
    pub secure_cookies: bool,
    /// The digest of what the pages show ([`crate::ui::live`]): its watcher sends, each
    /// open page's stream receives.
    pub changes: watch::Sender<u64>,
}

impl Dashboard {
    pub fn new(listen: Option<SocketAddr>, secure_cookies: bool) -> Dashboard {
        Dashboard {
            sessions: Mutex::new(Sessions::default()),
            listen,
            secure_cookies,
            changes: watch::channel(0).0,
        }
    }

    /// The session table.
    pub fn sessions(&self) -> Result<std::sync::MutexGuard<'_, Sessions>, ApiError> {
        self.sessions
            .lock()
            .map_err(|_| ApiError::new(ErrorCode::Internal, "the session table is poisoned"))
    }

    /// A `Set-Cookie` value for the session cookie.
    pub fn set_cookie(&self, value: &str, max_age: u64) -> HeaderValue {
        let secure = if self.secure_cookies { "; Secure" } else { "" };
        let text = format!(
            "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
        );
        // Our own secrets are hexadecimal: always a valid header value.
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

/// The value of the session cookie among a request's `Cookie` headers.
pub fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == COOKIE && !value.is_empty()).then_some(value)
        })
}

fn safe_method(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn unauthenticated(message: &str) -> ApiError {
    ApiError::new(ErrorCode::Unauthenticated, message)
}

/// Who the session cookie of a request is, if it carries one: the API's extractor calls
/// this when no `Authorization` header is given. A request that is not a read must carry
/// the session's CSRF token.
pub async fn session_principal(
    dashboard: &Dashboard,
    reads: &ReadStore,
    parts: &Parts,
) -> Option<Result<Principal, ApiError>> {
    let cookie = session_cookie(&parts.headers)?;
    Some(principal_of(dashboard, reads, cookie, parts).await)
}

async fn principal_of(
    dashboard: &Dashboard,
    reads: &ReadStore,
    cookie: &str,
    parts: &Parts,
) -> Result<Principal, ApiError> {
    let session = open_session(dashboard, cookie)?;
    if !safe_method(&parts.method) {
        let sent = parts
            .headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !crate::auth::same_secret(sent, &session.csrf) {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "a dashboard session's change needs its CSRF token (X-CSRF-Token)",
            ));
        }
    }
    login_principal(dashboard, reads, session.login).await
}

/// The open session a cookie's value names.
fn open_session(dashboard: &Dashboard, cookie: &str) -> Result<Session, ApiError> {
    dashboard
        .sessions()?
        .get(cookie, Instant::now())
        .ok_or_else(|| unauthenticated("the dashboard session has ended: log in again"))
}

/// Who the session a cookie's value names is now, without the CSRF check of a change:
/// an error if it has ended or the token it was opened with is revoked. What a live
/// stream asks while it lasts ([`crate::ui::live`]).
pub async fn session_who(
    dashboard: &Dashboard,
    reads: &ReadStore,
    cookie: &str,
) -> Result<Principal, ApiError> {
    let session = open_session(dashboard, cookie)?;
    login_principal(dashboard, reads, session.login).await
}

/// Who an open session's login is now.
async fn login_principal(
    dashboard: &Dashboard,
    reads: &ReadStore,
    login: Login,
) -> Result<Principal, ApiError> {
    match login {
        Login::Link { user, admin } => Ok(Principal {
            user,
            admin,
            via: Via::Session,
        }),
        // The token's rights now: a revoked token ends its sessions.
        Login::Token(hash) => match reads.with(move |s| s.active_token(&hash)).await? {
            Some(t) => Ok(Principal {
                user: t.user,
                admin: t.admin,
                via: Via::Session,
            }),
            None => {
                dashboard.sessions()?.close_token(&hash);
                Err(unauthenticated(
                    "the token this dashboard session was opened with is revoked",
                ))
            }
        },
    }
}

/// `POST /api/v1/ui/links`: a one-time login link for the caller.
pub fn create_link(dashboard: &Dashboard, who: &Principal) -> Result<UiLinkView, ApiError> {
    if !matches!(who.via, Via::PeerCredentials | Via::Token) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "a login link is made with the socket's credentials or a token",
        ));
    }
    let now = Instant::now();
    let secret = dashboard
        .sessions()?
        .new_link(&who.user, who.admin, now)
        .map_err(|e| ApiError::new(ErrorCode::Unavailable, e.to_string()))?;
    Ok(UiLinkView {
        path: format!("/ui/login?once={secret}"),
        expires: crate::engine::wall_now().0 + sessions::LINK_TTL.as_secs(),
        listen: dashboard.listen.map(|a| a.to_string()),
        tls: dashboard.secure_cookies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("a=1; b=2"));
        assert_eq!(session_cookie(&h), None);
        h.append(
            header::COOKIE,
            HeaderValue::from_static("x=y; cadre_session=abc ; z=1"),
        );
        assert_eq!(session_cookie(&h), Some("abc"));
        let mut h = HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("cadre_session="));
        assert_eq!(session_cookie(&h), None);
    }

    #[test]
    fn the_cookie_is_http_only_and_same_site_strict_and_secure_with_tls() {
        let ui = Dashboard::new(None, false);
        let c = ui.set_cookie("abc", 60);
        let c = c.to_str().unwrap();
        assert!(c.starts_with("cadre_session=abc;"), "{c}");
        assert!(
            c.contains("HttpOnly") && c.contains("SameSite=Strict"),
            "{c}"
        );
        assert!(!c.contains("Secure"), "{c}");
        let tls = Dashboard::new(None, true);
        assert!(
            tls.set_cookie("abc", 60)
                .to_str()
                .unwrap()
                .ends_with("; Secure")
        );
    }
}
