//! Replicated controllers (`cadre server --replica`): two or three on one PostgreSQL
//! database, one leading, the others standing by.
//!
//! **Given** the controller's settings, this replica's name and the address it serves at
//! (`--advertise`), and the leader lease's length. **Decided** here: when this replica
//! serves as the controller, and what it answers while it stands by. **Must hold**: at most
//! one replica writes (the store fences the leader's writes with its epoch:
//! [`cadre_store::LeaderLease`]); a standby never answers as the controller.
//!
//! The cycle:
//! - **standby**: on its addresses, `/livez` and `/healthz` answer 200, `/readyz` 503, and
//!   every other request 503 `not_leader` naming the leader's address, so that clients and
//!   agents go there. It tries to take the lease every quarter of a lease.
//! - **leader**: it takes the lease (a new epoch), gives its addresses up as a standby and
//!   serves as a restarted controller does ([`crate::serve`]: the state rebuilt from the
//!   store, the agents reconciled as they reconnect, no node declared lost before a whole
//!   node lease has passed), its writes fenced by its epoch. A thread renews the lease every
//!   quarter of a lease.
//! - **deposed**: a renewal that finds another epoch, a write the store refuses for the
//!   epoch, or no renewal confirmed for a whole lease (the database unreachable): it stops
//!   serving at once and stands by again.
//! - **stopped** (SIGTERM): it stops serving and resigns the lease, so that a standby takes
//!   over at once rather than after a lease.

use crate::api_error::ApiError;
use crate::{ServerConfig, ServerError, listen};
use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use cadre_proto::api::ErrorReason;
use cadre_proto::api::{ControllerStatus, LeaderStatus};
use cadre_store::{LeaderInfo, LeaderLease, Taken};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How a replica takes part.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    /// Its name in the lease (`host:pid`), for `cadre status` and the logs.
    pub name: String,
    /// Where clients and agents reach it (`https://host:port`), told to them by standbys.
    pub advertise: String,
    /// The leader lease: a leader that has not renewed it for this long may be replaced.
    pub lease: Duration,
}

/// What a standby knows of the leader, for its answers.
#[derive(Clone, Debug, Default)]
struct Known(Arc<Mutex<Option<LeaderInfo>>>);

impl Known {
    fn set(&self, info: Option<LeaderInfo>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = info;
    }

    fn leader(&self) -> Option<LeaderInfo> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(LeaderInfo::live)
    }
}

/// The probes every replica answers, leader or not: alive (`/livez`), healthy
/// (`/healthz`: it runs and reaches what it needs), ready to serve as the controller
/// (`/readyz`: the leader only).
pub fn probes(ready: bool) -> Router {
    let status = move || async move {
        if ready {
            (StatusCode::OK, "ok\n")
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "standby: not the leader\n")
        }
    };
    Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(status))
}

/// What a standby answers to anything but its probes.
fn not_leader(known: &Known) -> Response {
    let err = match known.leader() {
        Some(l) => ApiError::because(
            ErrorReason::NotLeader,
            format!(
                "this controller is a standby; the leader is {} at {} (epoch {})",
                l.holder, l.address, l.epoch
            ),
        )
        .about(&l.address),
        None => ApiError::because(
            ErrorReason::NotLeader,
            "this controller is a standby and no leader holds the lease now (a failover is \
             under way): try again in a moment",
        ),
    };
    err.into_response()
}

/// Runs this replica until `shutdown` resolves: standing by, leading, standing by again.
pub async fn serve_replica(
    config: ServerConfig,
    replica: ReplicaConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |rx: &tokio::sync::watch::Receiver<bool>| *rx.borrow();
    loop {
        let Some((lease, taken)) = stand_by(&config, &replica, stop_rx.clone()).await? else {
            return Ok(());
        };
        let epoch = taken.epoch;
        tracing::warn!(replica = %replica.name, epoch, advertise = %replica.advertise, "took the leader lease: serving as the controller");
        let (result, lease) = lead(&config, &replica, lease, taken, stop_rx.clone()).await;
        if stopped(&stop_rx) {
            if let Some(mut lease) = lease {
                let resigned = tokio::task::spawn_blocking(move || lease.resign(epoch)).await;
                if let Ok(Err(e)) = resigned {
                    tracing::warn!(error = %e, "could not resign the leader lease: a standby takes over once it lapses");
                }
            }
            return result;
        }
        drop_blocking(lease).await;
        match result {
            Ok(()) => tracing::warn!(epoch, "deposed: stepping down to standby"),
            Err(e) => {
                tracing::error!(epoch, error = %e, "stopped leading: stepping down to standby")
            }
        }
    }
}

/// Drops `t` off the async threads: a PostgreSQL client closes its connection blocking.
async fn drop_blocking<T: Send + 'static>(t: T) {
    let _ = tokio::task::spawn_blocking(move || drop(t)).await;
}

/// Stands by on the controller's addresses until this replica takes the lease (`None`:
/// stopped first).
async fn stand_by(
    config: &ServerConfig,
    replica: &ReplicaConfig,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Option<(LeaderLease, Taken)>, ServerError> {
    let known = Known::default();
    let status = {
        let (known, name) = (known.clone(), replica.name.clone());
        move || {
            let (known, name) = (known.clone(), name.clone());
            async move {
                axum::Json(ControllerStatus {
                    role: "standby".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    replica: Some(name),
                    leader: known.leader().map(|l| LeaderStatus {
                        name: l.holder,
                        address: l.address,
                        epoch: l.epoch,
                        since: l.since_ms / 1000,
                    }),
                })
            }
        }
    };
    let app = probes(false)
        .route(&format!("{}/status", cadre_proto::api::PREFIX), get(status))
        .fallback({
            let known = known.clone();
            move || {
                let known = known.clone();
                async move { not_leader(&known) }
            }
        });
    let (serving_tx, serving_rx) = tokio::sync::watch::channel(false);
    let socket = crate::bind_socket(&config.socket).await?;
    let mut tasks = vec![tokio::spawn(listen::serve(
        socket,
        app.clone(),
        config.connections.clone(),
        serving_rx.clone(),
        None,
    ))];
    if let Some(addr) = config.listen {
        let tcp = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Listen {
                what: addr.to_string(),
                source,
            })?;
        let acceptor = config
            .tls
            .as_ref()
            .map(|t| tokio_rustls::TlsAcceptor::from(t.server.clone()));
        tasks.push(tokio::spawn(listen::serve(
            tcp,
            app,
            config.connections.clone(),
            serving_rx,
            acceptor,
        )));
    }
    tracing::info!(replica = %replica.name, "standing by");
    let poll = replica.lease / 4;
    let mut lease: Option<LeaderLease> = None;
    let taken = loop {
        if *stop.borrow() {
            break None;
        }
        let attempt = {
            let (database, r) = (config.database.clone(), replica.clone());
            let held = lease.take();
            tokio::task::spawn_blocking(move || -> Result<_, cadre_store::StoreError> {
                let mut lease = match held {
                    Some(l) => l,
                    None => LeaderLease::connect(&database, &r.name, &r.advertise, r.lease)?,
                };
                let taken = lease.take()?;
                let info = lease.current().ok();
                Ok((lease, taken, info))
            })
            .await
            .map_err(|_| ServerError::EnginePanicked)?
        };
        match attempt {
            Ok((l, Some(taken), _)) => break Some((l, taken)),
            Ok((l, None, info)) => {
                known.set(info);
                lease = Some(l);
            }
            Err(e) => {
                // The database is away: nobody can lead; try again.
                tracing::warn!(error = %e, "standby cannot reach the leader lease");
                known.set(None);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = stop.changed() => {}
        }
    };
    if taken.is_none() {
        drop_blocking(lease).await;
    }
    let _ = serving_tx.send(true);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
    }
    let _ = std::fs::remove_file(&config.socket);
    Ok(taken)
}

/// Serves as the controller under `epoch` until stopped or deposed. Returns how serving
/// ended, and the lease handle (for resigning) unless its renewal thread failed.
async fn lead(
    config: &ServerConfig,
    replica: &ReplicaConfig,
    lease: LeaderLease,
    taken: Taken,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (Result<(), ServerError>, Option<LeaderLease>) {
    let epoch = taken.epoch;
    let (deposed_tx, mut deposed_rx) = tokio::sync::watch::channel(false);
    let renewing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let every = replica.lease / 4;
    let limit = replica.lease;
    // When a renewal was last confirmed: the renewal thread sets it, and the serving side
    // steps down when it gets older than a lease, also while a renewal hangs on a
    // database that stopped answering (until TCP gives up, which takes far longer).
    let confirmed = Arc::new(Mutex::new(Instant::now()));
    let (handed_back, lease_back) = std::sync::mpsc::channel();
    let renewer = {
        let (renewing, confirmed) = (renewing.clone(), confirmed.clone());
        std::thread::Builder::new()
            .name("cadre-lease".into())
            .spawn(move || {
                let mut lease = lease;
                let last = || *confirmed.lock().unwrap_or_else(|p| p.into_inner());
                while renewing.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(every);
                    match lease.renew(epoch) {
                        Ok(true) => {
                            *confirmed.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now()
                        }
                        Ok(false) => {
                            tracing::error!(epoch, "the leader lease was taken by another replica");
                            let _ = deposed_tx.send(true);
                            break;
                        }
                        Err(e) if last().elapsed() >= limit => {
                            tracing::error!(epoch, error = %e, "the leader lease could not be renewed for a whole lease");
                            let _ = deposed_tx.send(true);
                            break;
                        }
                        Err(e) => tracing::warn!(epoch, error = %e, "leader lease renewal failed"),
                    }
                }
                let _ = handed_back.send(lease);
            })
    };
    match renewer {
        Ok(_) => {}
        // Without renewals the lease lapses and a standby takes over: this replica cannot
        // lead.
        Err(source) => {
            return (
                Err(ServerError::Listen {
                    what: "the lease renewal thread".into(),
                    source,
                }),
                None,
            );
        }
    };
    let mut cfg = config.clone();
    cfg.fence = Some(epoch);
    cfg.leading = Some((
        LeaderStatus {
            name: replica.name.clone(),
            address: replica.advertise.clone(),
            epoch,
            since: taken.since_ms / 1000,
        },
        taken.gap,
    ));
    if let Some(gap) = taken.gap {
        tracing::warn!(
            epoch,
            gap_ms = gap.as_millis() as u64,
            "the cluster went this long without a leader"
        );
    }
    let mut stop_for_serve = stop.clone();
    let unconfirmed = async move {
        loop {
            tokio::time::sleep(every).await;
            let last = *confirmed.lock().unwrap_or_else(|p| p.into_inner());
            if last.elapsed() >= limit {
                tracing::error!(
                    epoch,
                    "no renewal of the leader lease confirmed for a whole lease (the database \
                     does not answer): a standby may lead now"
                );
                return;
            }
        }
    };
    // Set when this replica must stop leading (not when it is asked to stop).
    let (gone_tx, mut gone_rx) = tokio::sync::watch::channel(false);
    let shutdown = async move {
        tokio::select! {
            _ = stop_for_serve.wait_for(|s| *s) => return,
            _ = deposed_rx.wait_for(|d| *d) => {}
            _ = unconfirmed => {}
        }
        let _ = gone_tx.send(true);
    };
    let mut serving = tokio::spawn(crate::serve(cfg, shutdown, || {}));
    // A deposed controller stops as a stopped one does, unless a store call of its engine
    // hangs on a database that does not answer: then it is left behind after a lease. It
    // cannot commit anything (its writes are fenced by an epoch that is no longer the
    // lease's), and the engine's thread ends whenever its call does.
    let abandon = async {
        if gone_rx.wait_for(|g| *g).await.is_err() {
            // Asked to stop: it stops in its own time.
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(limit).await;
    };
    let result = tokio::select! {
        r = &mut serving => r.unwrap_or(Err(ServerError::EnginePanicked)),
        () = abandon => {
            serving.abort();
            tracing::error!(epoch, "the deposed controller did not stop within a lease (a store call hangs): leaving it behind");
            Ok(())
        }
    };
    renewing.store(false, std::sync::atomic::Ordering::Relaxed);
    // The lease back from its thread once its renewal under way ends; not waited for
    // beyond a lease (it hangs on a database that stopped answering: the thread ends on
    // its own, and standing by connects afresh).
    let lease = tokio::task::spawn_blocking(move || lease_back.recv_timeout(limit).ok())
        .await
        .ok()
        .flatten();
    (result, lease)
}
