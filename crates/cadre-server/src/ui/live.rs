//! Live updates: `GET /ui/live`, a stream of server-sent events that says when what the
//! pages show has changed, so that they fetch it again without a reload.
//!
//! **Given** the controller's live state, read on the engine thread. **Decided** here: a
//! digest of what the pages show (each job's state, hold and reason; each node's state,
//! reason, connection and GPUs in use), taken every [`PERIOD`] while a page listens and
//! never otherwise; an event (`change`, the digest as data) to every listener when it moves.
//! One watcher serves every listener: the engine's cost does not grow with the number of
//! open pages. **Must hold**: a change of what the digest covers reaches every listener
//! within a period and the time of one read.

use crate::api_error::ApiError;
use crate::auth::{Peer, Principal, Via};
use crate::controller::Controller;
use crate::dashboard::{session_cookie, session_who};
use crate::engine::EngineHandle;
use crate::state::AppState;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use cadre_core::cluster::NodeId;
use cadre_proto::api::ErrorCode;
use futures_util::Stream;
use std::convert::Infallible;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

/// How often the watcher looks while a page listens.
pub const PERIOD: Duration = Duration::from_millis(250);

/// The digest of what the pages show.
pub fn digest(c: &Controller) -> u64 {
    let mut h = DefaultHasher::new();
    let sched = c.sched();
    for j in sched.jobs() {
        (j.id.0, j.state, j.hold.is_some(), j.reason.as_str()).hash(&mut h);
    }
    let cluster = sched.cluster();
    for i in 0..cluster.nodes.len() {
        let id = NodeId(i as u32);
        let node = cluster.node(id);
        (
            cluster.node_state(id),
            &node.reason,
            c.is_connected(id),
            &node.usage.gpu_milli,
            node.usage.amounts().cpus,
        )
            .hash(&mut h);
    }
    h.finish()
}

/// Watches the controller for as long as it answers, looking only while a page listens.
pub async fn watch_changes(
    engine: EngineHandle,
    dashboard: std::sync::Arc<crate::dashboard::Dashboard>,
) {
    let mut ticker = tokio::time::interval(PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if dashboard.changes.receiver_count() == 0 {
            continue;
        }
        let Ok(d) = engine.read(digest).await else {
            return;
        };
        dashboard.changes.send_if_modified(|old| {
            let moved = *old != d;
            *old = d;
            moved
        });
    }
}

/// How often a stream checks that what it was opened with still holds.
pub const SESSION_CHECK: Duration = Duration::from_secs(5);

/// What a stream checks again while it lasts.
enum Credentials {
    /// The dashboard session of this cookie.
    Session(String),
    /// This `Authorization` header (an API token, or a job's), from this peer.
    Bearer { peer: Peer, authorization: String },
    /// The peer's credentials on the local socket: nothing to revoke.
    Standing,
}

impl Credentials {
    /// Whether they still hold. A check that cannot be made (the store does not answer)
    /// counts as holding: the next one decides, and the streams do not all end at once
    /// over one error.
    async fn hold(&self, st: &AppState) -> bool {
        let who = match self {
            Credentials::Session(cookie) => session_who(&st.dashboard, &st.reads, cookie).await,
            Credentials::Bearer {
                peer,
                authorization,
            } => st.auth.identify(peer, Some(authorization)).await,
            Credentials::Standing => return true,
        };
        who.map_or_else(|e| e.code != ErrorCode::Unauthenticated, |_| true)
    }
}

/// `GET /ui/live`: `change` events for as long as the page stays and what it was opened
/// with holds: the stream ends within [`SESSION_CHECK`] of a logout, a session's expiry,
/// or the revocation of the token the session or the request was opened with, and the
/// page, asking again, is refused. Checked on that clock, not at each change (which may
/// come every [`PERIOD`]): a change delivered meanwhile carries only the digest, and the
/// page's requests for what changed are refused.
pub async fn stream(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    who: Principal,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let rx = st.dashboard.changes.subscribe();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let credentials = match (who.via, authorization) {
        (Via::Session, _) => session_cookie(&headers).map_or(Credentials::Standing, |c| {
            Credentials::Session(c.to_owned())
        }),
        (Via::Token | Via::JobToken(_), Some(authorization)) => Credentials::Bearer {
            peer,
            authorization: authorization.to_owned(),
        },
        _ => Credentials::Standing,
    };
    let checks = !matches!(credentials, Credentials::Standing);
    // The first check one period on: the extractor has just made it.
    let mut check =
        tokio::time::interval_at(tokio::time::Instant::now() + SESSION_CHECK, SESSION_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let state = (rx, check, credentials, st);
    let events = futures_util::stream::unfold(
        state,
        move |(mut rx, mut check, credentials, st)| async move {
            loop {
                tokio::select! {
                    changed = rx.changed() => {
                        changed.ok()?;
                        let d = *rx.borrow_and_update();
                        let event = Event::default().event("change").data(d.to_string());
                        return Some((Ok(event), (rx, check, credentials, st)));
                    }
                    _ = check.tick(), if checks => {
                        if !credentials.hold(&st).await {
                            return None;
                        }
                    }
                }
            }
        },
    );
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
