//! Serving HTTP/1.1 connections on the Unix socket and the TCP address: the accept loop,
//! how long a connection may keep the controller waiting, and how many one peer may hold.
//!
//! **Given** connections as they are accepted, and [`ConnectionLimits`]. **Decided** here:
//! which connections are refused (a TCP peer's beyond its cap, closed at once) and when a
//! connection is closed for waiting too long. **Must hold**:
//! - a connection whose request head is not complete within the header timeout of its
//!   first byte is closed; one with no request in flight and no byte of the next one is
//!   closed after the idle timeout (keep-alive);
//! - a request being served is never timed out: `srun`'s step output streams and answers
//!   being written stay open as long as they run, and a WebSocket (the agents') leaves
//!   this watch once upgraded;
//! - a TCP peer (by IP address) holds at most `max_per_peer` connections at once, upgraded
//!   ones included; the Unix socket has no cap (its peers are local and authenticated by
//!   the kernel).
//!
//! - on a TLS listener, a connection's handshake must end within the header timeout; what
//!   its peer's certificate says (verified against the cluster's CA by rustls) goes with
//!   each of its requests as a [`Transport`].
//!
//! Each connection's watch is an explicit `Phase` with one transition function,
//! `Phase::on`; its deadline is a pure function of the phase and the limits.

use crate::auth::Peer;
use axum::Router;
use axum::body::{Body, HttpBody};
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// How long a connection may keep the controller waiting, and how many one TCP peer may
/// hold (`cadre server --header-timeout`, `--idle-timeout`, `--max-connections-per-peer`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From a request's first byte to the end of its head.
    pub header_timeout: Duration,
    /// With no request in flight and no byte of the next one (keep-alive).
    pub idle_timeout: Duration,
    /// Live connections of one TCP peer (IP address) at once.
    pub max_per_peer: usize,
}

impl ConnectionLimits {
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
    pub const DEFAULT_MAX_PER_PEER: usize = 1024;
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            max_per_peer: Self::DEFAULT_MAX_PER_PEER,
        }
    }
}

/// Where a connection is, as its watch sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No request in flight and no byte of the next one read, since then.
    Idle { since: Instant },
    /// Bytes of a request's head read since then; the head is not complete.
    ReadingHead { since: Instant },
    /// This many requests are being served (read, answered, their answers streamed).
    Busy { requests: usize },
}

/// What happens on a connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum ConnEvent {
    /// Bytes were read from the peer.
    BytesRead,
    /// A request's head is complete: it is being served.
    RequestStarted,
    /// A request's answer is written to its end, or dropped.
    ResponseDone,
}

/// A transition [`Phase::on`] does not allow: only a bug gets here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a connection that is {from:?} cannot take {event:?}")]
pub(crate) struct IllegalTransition {
    from: Phase,
    event: ConnEvent,
}

impl Phase {
    /// The one transition function of a connection's watch.
    pub(crate) fn on(self, event: ConnEvent, now: Instant) -> Result<Phase, IllegalTransition> {
        use ConnEvent::*;
        match (self, event) {
            (Phase::Idle { .. }, BytesRead) => Ok(Phase::ReadingHead { since: now }),
            (Phase::ReadingHead { .. } | Phase::Busy { .. }, BytesRead) => Ok(self),
            // A head read with the previous request's bytes arrives with no read of its own.
            (Phase::Idle { .. } | Phase::ReadingHead { .. }, RequestStarted) => {
                Ok(Phase::Busy { requests: 1 })
            }
            (Phase::Busy { requests }, RequestStarted) => Ok(Phase::Busy {
                requests: requests + 1,
            }),
            (Phase::Busy { requests: 1 }, ResponseDone) => Ok(Phase::Idle { since: now }),
            (Phase::Busy { requests }, ResponseDone) if requests > 1 => Ok(Phase::Busy {
                requests: requests - 1,
            }),
            (from, event) => Err(IllegalTransition { from, event }),
        }
    }

    /// When the connection is to be closed if nothing happens; `None` while it serves.
    pub(crate) fn deadline(self, limits: &ConnectionLimits) -> Option<Instant> {
        match self {
            Phase::Idle { since } => Some(since + limits.idle_timeout),
            Phase::ReadingHead { since } => Some(since + limits.header_timeout),
            Phase::Busy { .. } => None,
        }
    }
}

/// One connection's phase, shared by its reads, its requests and its watchdog.
struct Watch {
    phase: Mutex<Phase>,
    changed: Notify,
}

impl Watch {
    fn new(now: Instant) -> Watch {
        Watch {
            phase: Mutex::new(Phase::Idle { since: now }),
            changed: Notify::new(),
        }
    }

    fn apply(&self, event: ConnEvent) {
        let Ok(mut phase) = self.phase.lock() else {
            return;
        };
        match phase.on(event, Instant::now()) {
            Ok(next) if next != *phase => {
                *phase = next;
                self.changed.notify_one();
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "connection watch"),
        }
    }

    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        self.phase.lock().ok().and_then(|p| p.deadline(limits))
    }
}

/// Live connections per TCP peer.
#[derive(Clone, Default)]
struct PeerCounts(Arc<Mutex<HashMap<IpAddr, usize>>>);

impl PeerCounts {
    /// One more connection of `ip`, unless it holds `max` already.
    fn acquire(&self, ip: IpAddr, max: usize) -> Option<PeerGuard> {
        let mut counts = self.0.lock().ok()?;
        let n = counts.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerGuard {
            counts: self.clone(),
            ip,
        })
    }
}

/// A connection counted for its peer, until it is dropped (with its socket, also after an
/// upgrade).
struct PeerGuard {
    counts: PeerCounts,
    ip: IpAddr,
}

impl Drop for PeerGuard {
    fn drop(&mut self) {
        if let Ok(mut counts) = self.counts.0.lock()
            && let Some(n) = counts.get_mut(&self.ip)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// A connection's socket, telling its watch of every read and holding its peer's count.
struct Watched<S> {
    inner: S,
    watch: Arc<Watch>,
    _counted: Option<PeerGuard>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.watch.apply(ConnEvent::BytesRead);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Tells the watch that a request's answer is done when dropped: with its body, once
/// written to its end or abandoned (also when the request's handling is dropped).
struct AnswerDone(Arc<Watch>);

impl Drop for AnswerDone {
    fn drop(&mut self) {
        self.0.apply(ConnEvent::ResponseDone);
    }
}

/// An answer's body, keeping its request counted as served until it ends.
struct TrackedBody {
    body: Body,
    _done: AnswerDone,
}

impl HttpBody for TrackedBody {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// How a request's connection came: over TLS or not, and what its peer's certificate says
/// (an agent's node certificate; users show none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transport {
    pub tls: bool,
    pub cert: Option<cadre_tls::PeerCert>,
}

/// A listener of connections: the TCP address or the Unix socket.
pub(crate) trait Accept: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept_peer(&self) -> impl Future<Output = std::io::Result<(Self::Io, Peer)>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept_peer(&self) -> std::io::Result<(Self::Io, Peer)> {
        let (stream, addr) = self.accept().await?;
        Ok((stream, Peer::Tcp(addr)))
    }
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept_peer(&self) -> std::io::Result<(Self::Io, Peer)> {
        let (stream, _) = self.accept().await?;
        let uid = stream.peer_cred().ok().map(|c| c.uid());
        Ok((stream, Peer::Unix { uid }))
    }
}

/// Serves `app` on `listener` until `stop` turns true, then lets the connections finish
/// their requests.
pub(crate) async fn serve(
    listener: impl Accept,
    app: Router,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let peers = PeerCounts::default();
    let mut conns = tokio::task::JoinSet::new();
    let for_conns = stop.clone();
    loop {
        tokio::select! {
            accepted = listener.accept_peer() => {
                let (io, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors, most likely: let some close.
                        tracing::warn!(error = %e, "failed to accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let counted = match &peer {
                    Peer::Tcp(addr) => match peers.acquire(addr.ip(), limits.max_per_peer) {
                        Some(guard) => Some(guard),
                        None => {
                            tracing::debug!(peer = %addr, max = limits.max_per_peer, "connection refused: the peer holds its most");
                            continue;
                        }
                    },
                    Peer::Unix { .. } => None,
                };
                let (app, limits, stop) = (app.clone(), limits.clone(), for_conns.clone());
                match tls.clone() {
                    None => {
                        conns.spawn(serve_connection(io, peer, Transport::default(), counted, app, limits, stop));
                    }
                    Some(acceptor) => {
                        conns.spawn(async move {
                            let handshake = tokio::time::timeout(limits.header_timeout, acceptor.accept(io));
                            let stream = match handshake.await {
                                Ok(Ok(stream)) => stream,
                                Ok(Err(e)) => {
                                    tracing::debug!(?peer, error = %e, "TLS handshake failed");
                                    return;
                                }
                                Err(_) => {
                                    tracing::debug!(?peer, "TLS handshake took too long");
                                    return;
                                }
                            };
                            let cert = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .and_then(cadre_tls::peer_cert);
                            let transport = Transport { tls: true, cert };
                            serve_connection(stream, peer, transport, counted, app, limits, stop).await;
                        });
                    }
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            () = stopped(&mut stop) => break,
        }
    }
    // The address is free at once (a replica that steps down binds it again to stand
    // by), while connections that linger end by their own deadlines.
    drop(listener);
    while conns.join_next().await.is_some() {}
}

/// Resolves once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Serves one connection: HTTP/1.1 with upgrades, closed by its watch's deadlines.
async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: S,
    peer: Peer,
    transport: Transport,
    counted: Option<PeerGuard>,
    app: Router,
    limits: ConnectionLimits,
    mut stop: watch::Receiver<bool>,
) {
    let watch = Arc::new(Watch::new(Instant::now()));
    let io = TokioIo::new(Watched {
        inner: io,
        watch: watch.clone(),
        _counted: counted,
    });
    let service = {
        let watch = watch.clone();
        hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer.clone()));
            req.extensions_mut().insert(transport.clone());
            watch.apply(ConnEvent::RequestStarted);
            let done = AnswerDone(watch.clone());
            let mut app = app.clone();
            async move {
                let answer = tower_service::Service::call(&mut app, req).await;
                answer.map(|a| a.map(|body| TrackedBody { body, _done: done }))
            }
        })
    };
    // The controller's own deadlines replace hyper's header timeout, which also runs
    // while a keep-alive connection waits for its next request.
    let conn = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        .serve_connection(io, service)
        .with_upgrades();
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        let deadline = watch.deadline(&limits);
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(error = %e, "connection ended");
                }
                return;
            }
            () = watch.changed.notified() => {}
            () = sleep_until(deadline) => {
                if watch.deadline(&limits).is_some_and(|d| d <= Instant::now()) {
                    // Dropping the connection closes it.
                    tracing::debug!(phase = ?watch.phase.lock().ok().map(|p| *p), "connection closed: it waited too long");
                    return;
                }
            }
            () = stopped(&mut stop), if !stopping => {
                conn.as_mut().graceful_shutdown();
                stopping = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConnEvent::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            max_per_peer: 2,
        }
    }

    #[test]
    fn a_connection_is_timed_out_waiting_never_while_it_serves() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let l = limits();
        let idle = Phase::Idle { since: t0 };
        assert_eq!(idle.deadline(&l), Some(t0 + l.idle_timeout));
        let reading = idle.on(BytesRead, t1).unwrap();
        assert_eq!(reading.deadline(&l), Some(t1 + l.header_timeout));
        assert_eq!(reading.on(BytesRead, t1 + l.idle_timeout), Ok(reading));
        let busy = reading.on(RequestStarted, t1).unwrap();
        assert_eq!(busy.deadline(&l), None);
        assert_eq!(busy.on(BytesRead, t1), Ok(busy));
        let two = busy.on(RequestStarted, t1).unwrap();
        assert_eq!(two.on(ResponseDone, t1), Ok(busy));
        assert_eq!(busy.on(ResponseDone, t1), Ok(Phase::Idle { since: t1 }));
        assert!(idle.on(ResponseDone, t1).is_err());
        assert!(reading.on(ResponseDone, t1).is_err());
    }

    #[test]
    fn a_peer_holds_at_most_its_cap_and_gets_its_slots_back() {
        let counts = PeerCounts::default();
        let ip: IpAddr = [127, 0, 0, 1].into();
        let other: IpAddr = [127, 0, 0, 2].into();
        let a = counts.acquire(ip, 2).expect("first");
        let _b = counts.acquire(ip, 2).expect("second");
        assert!(counts.acquire(ip, 2).is_none(), "a third beyond the cap");
        assert!(
            counts.acquire(other, 2).is_some(),
            "another peer has its own"
        );
        drop(a);
        assert!(counts.acquire(ip, 2).is_some(), "a slot is back");
    }
}
