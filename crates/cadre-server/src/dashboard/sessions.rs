//! The dashboard's logins: one-time login links (`cadre ui`) and session cookies.
//!
//! **Given** a caller the API has already authenticated (who asks for a link), a link's
//! secret or a bearer token (who logs in), and the time. **Decided** here: whether a link
//! is good (unknown, used or expired links are not), which session a cookie names, and the
//! session's CSRF token. **Must hold**:
//! - a link logs in once, and not after [`LINK_TTL`];
//! - a session lasts at most [`SESSION_TTL`], and one made with a token ends when that
//!   token is revoked (the caller re-checks the token on every request: [`Login::Token`]);
//! - secrets are kept only as their SHA-256 ([`TokenHash`]): a memory dump or a log of
//!   this table gives no usable cookie or link;
//! - the tables are bounded: at most [`MAX_LINKS`] links and [`MAX_SESSIONS`] sessions in
//!   all, [`MAX_SESSIONS_PER_USER`] per user (a user's oldest goes first).
//!
//! Sessions live in the controller's memory: a restarted controller asks everyone to log
//! in again. Not here: the cookie's attributes and the CSRF check on requests
//! ([`super`]).

use cadre_store::TokenHash;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a `cadre ui` link stays good.
pub const LINK_TTL: Duration = Duration::from_secs(5 * 60);
/// How long a session lasts, however active.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
pub const MAX_LINKS: usize = 1024;
pub const MAX_SESSIONS: usize = 16_384;
pub const MAX_SESSIONS_PER_USER: usize = 64;

/// How a session was opened, which decides who it is on each request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Login {
    /// With a bearer token: the token's user and rights, while the token is not revoked.
    Token(TokenHash),
    /// With a one-time link made for this user (by the socket's peer credentials or a
    /// token at the time).
    Link { user: String, admin: bool },
}

/// A live session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub login: Login,
    /// The user the session was opened for (for the per-user bound).
    pub user: String,
    /// The token a request must carry in `X-CSRF-Token` to change anything.
    pub csrf: String,
    pub opened: Instant,
}

#[derive(Clone, Debug)]
struct Link {
    user: String,
    admin: bool,
    expires: Instant,
}

/// Why a link or a session could not be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    #[error("too many login links are outstanding ({MAX_LINKS}); try again in a few minutes")]
    TooManyLinks,
    #[error("too many dashboard sessions are open ({MAX_SESSIONS})")]
    TooManySessions,
}

/// The links and sessions, by the hash of their secrets.
#[derive(Default)]
pub struct Sessions {
    links: HashMap<TokenHash, Link>,
    sessions: HashMap<TokenHash, Session>,
}

/// A new session's secrets: the cookie's value and its CSRF token.
pub struct Opened {
    pub cookie: String,
    pub csrf: String,
}

impl Sessions {
    /// A one-time link's secret for `user`, good until `now + LINK_TTL`.
    pub fn new_link(
        &mut self,
        user: &str,
        admin: bool,
        now: Instant,
    ) -> Result<String, SessionError> {
        self.links.retain(|_, l| l.expires > now);
        if self.links.len() >= MAX_LINKS {
            return Err(SessionError::TooManyLinks);
        }
        let secret = crate::auth::random_secret("");
        self.links.insert(
            TokenHash::of(&secret),
            Link {
                user: user.to_owned(),
                admin,
                expires: now + LINK_TTL,
            },
        );
        Ok(secret)
    }

    /// Uses up the link `secret`: the user it logs in, if it is good.
    pub fn take_link(&mut self, secret: &str, now: Instant) -> Option<Login> {
        let link = self.links.remove(&TokenHash::of(secret))?;
        (link.expires > now).then_some(Login::Link {
            user: link.user,
            admin: link.admin,
        })
    }

    /// Opens a session for `user`, logged in by `login`.
    pub fn open(&mut self, login: Login, user: &str, now: Instant) -> Result<Opened, SessionError> {
        self.sessions
            .retain(|_, s| now.saturating_duration_since(s.opened) < SESSION_TTL);
        let mine: Vec<(TokenHash, Instant)> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.user == user)
            .map(|(k, s)| (*k, s.opened))
            .collect();
        if mine.len() >= MAX_SESSIONS_PER_USER
            && let Some((oldest, _)) = mine.iter().min_by_key(|(_, opened)| *opened)
        {
            self.sessions.remove(oldest);
        }
        if self.sessions.len() >= MAX_SESSIONS {
            return Err(SessionError::TooManySessions);
        }
        let cookie = crate::auth::random_secret("");
        let csrf = crate::auth::random_secret("");
        self.sessions.insert(
            TokenHash::of(&cookie),
            Session {
                login,
                user: user.to_owned(),
                csrf: csrf.clone(),
                opened: now,
            },
        );
        Ok(Opened { cookie, csrf })
    }

    /// The session a cookie's value names, if it is open.
    pub fn get(&mut self, cookie: &str, now: Instant) -> Option<Session> {
        let key = TokenHash::of(cookie);
        let s = self.sessions.get(&key)?;
        if now.saturating_duration_since(s.opened) >= SESSION_TTL {
            self.sessions.remove(&key);
            return None;
        }
        Some(s.clone())
    }

    /// Ends the session a cookie's value names.
    pub fn close(&mut self, cookie: &str) {
        self.sessions.remove(&TokenHash::of(cookie));
    }

    /// Ends every session opened with a token.
    pub fn close_token(&mut self, token: &TokenHash) {
        self.sessions.retain(|_, s| s.login != Login::Token(*token));
    }

    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_logs_in_once() {
        let mut s = Sessions::default();
        let now = Instant::now();
        let secret = s.new_link("alice", false, now).unwrap();
        assert_eq!(
            s.take_link(&secret, now),
            Some(Login::Link {
                user: "alice".into(),
                admin: false
            })
        );
        assert_eq!(s.take_link(&secret, now), None, "a link is good once");
        assert_eq!(s.take_link("not-a-link", now), None);
    }

    #[test]
    fn a_link_expires() {
        let mut s = Sessions::default();
        let now = Instant::now();
        let secret = s.new_link("alice", true, now).unwrap();
        assert_eq!(s.take_link(&secret, now + LINK_TTL), None);
        let secret = s.new_link("alice", true, now).unwrap();
        assert!(
            s.take_link(&secret, now + LINK_TTL - Duration::from_secs(1))
                .is_some()
        );
    }

    #[test]
    fn outstanding_links_are_bounded_and_expired_ones_make_room() {
        let mut s = Sessions::default();
        let now = Instant::now();
        for _ in 0..MAX_LINKS {
            s.new_link("mallory", false, now).unwrap();
        }
        assert_eq!(
            s.new_link("mallory", false, now),
            Err(SessionError::TooManyLinks)
        );
        assert!(s.new_link("alice", false, now + LINK_TTL).is_ok());
    }

    #[test]
    fn a_session_is_found_by_its_cookie_until_it_expires_or_closes() {
        let mut s = Sessions::default();
        let now = Instant::now();
        let login = Login::Link {
            user: "bob".into(),
            admin: false,
        };
        let o = s.open(login.clone(), "bob", now).unwrap();
        let got = s.get(&o.cookie, now).unwrap();
        assert_eq!(got.login, login);
        assert_eq!(got.csrf, o.csrf);
        assert_ne!(o.cookie, o.csrf);
        assert!(s.get(&o.csrf, now).is_none(), "the CSRF token is no cookie");
        assert!(s.get(&o.cookie, now + SESSION_TTL).is_none());
        assert!(
            s.get(&o.cookie, now).is_none(),
            "an expired session is gone"
        );
        let o = s.open(login, "bob", now).unwrap();
        s.close(&o.cookie);
        assert!(s.get(&o.cookie, now).is_none());
    }

    #[test]
    fn a_user_s_oldest_session_goes_first_past_the_bound() {
        let mut s = Sessions::default();
        let t0 = Instant::now();
        let login = Login::Link {
            user: "carol".into(),
            admin: false,
        };
        let first = s.open(login.clone(), "carol", t0).unwrap();
        for i in 1..=MAX_SESSIONS_PER_USER {
            s.open(login.clone(), "carol", t0 + Duration::from_secs(i as u64))
                .unwrap();
        }
        assert_eq!(s.session_count(), MAX_SESSIONS_PER_USER);
        assert!(s.get(&first.cookie, t0).is_none());
        let other = s
            .open(
                Login::Link {
                    user: "dave".into(),
                    admin: false,
                },
                "dave",
                t0,
            )
            .unwrap();
        assert!(s.get(&other.cookie, t0).is_some());
    }

    #[test]
    fn closing_a_token_s_sessions_leaves_the_others() {
        let mut s = Sessions::default();
        let now = Instant::now();
        let t = TokenHash::of("cadre_x");
        let a = s.open(Login::Token(t), "alice", now).unwrap();
        let b = s
            .open(Login::Token(TokenHash::of("cadre_y")), "alice", now)
            .unwrap();
        s.close_token(&t);
        assert!(s.get(&a.cookie, now).is_none());
        assert!(s.get(&b.cookie, now).is_some());
    }
}
