//! The agent's lease, as the agent counts it (fencing). Pure: instants are given.
//!
//! **Given**: the lease the controller's welcome grants, the instant the agent sent its
//! `Hello`, the pings it sends (each numbered in its payload) and the pongs that come
//! back on the current connection. **Decided**: when the lease ends, and so when the
//! agent starts stopping its runs: a kill wait before the end (SIGTERM then, SIGKILL at
//! the end), so that every task is dead when the lease is over.
//!
//! **Must hold**: the agent's lease never ends later than the lease as the controller
//! counts it. The controller counts from the last frame it heard from the agent; the
//! agent counts only from the instant it *sent* a frame that the controller provably
//! received: its `Hello` (proved by the `Welcome`), or one of its own pings (proved by a
//! pong carrying that ping's number). The controller heard that frame at or after it was
//! sent, so the agent's lease ends first. No other frame renews the lease: in an
//! asymmetric partition the controller may still reach an agent it no longer hears (its
//! orders, acknowledgements, the pong of an old ping), and none of that proves the
//! controller hears the agent. A pong whose payload is not the number of a ping still
//! outstanding on this connection renews nothing; one of an older ping than the last
//! renewal never moves the lease back.

use std::collections::VecDeque;
use std::time::Duration;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

/// Pings remembered while their pongs are awaited: a pong answers the newest ping the
/// controller had read when it wrote it (a WebSocket replaces an unsent pong by a newer
/// one), so a few suffice; a forgotten one's pong renews nothing (the safe side).
const OUTSTANDING_PINGS: usize = 8;

/// The shortest kill wait: SIGTERM at least this long before the lease's end.
const MIN_KILL_WAIT: Duration = Duration::from_millis(100);

/// The agent's lease and what can renew it.
#[derive(Clone, Debug)]
pub(crate) struct Lease {
    /// As the last welcome granted it; `None`: none (an older controller), no fencing.
    length: Option<Duration>,
    /// The send instant of the newest frame the controller is known to have heard.
    renewed_from: Instant,
    /// When the `Hello` of the current connection was sent.
    hello_sent: Option<Instant>,
    /// The pings of the current connection not answered yet: (number, sent at), oldest
    /// first.
    pings: VecDeque<(u64, Instant)>,
    next_ping: u64,
}

impl Lease {
    /// No lease yet (none until a welcome grants one).
    pub(crate) fn new(now: Instant) -> Lease {
        Lease {
            length: None,
            renewed_from: now,
            hello_sent: None,
            pings: VecDeque::new(),
            next_ping: 0,
        }
    }

    /// A connection opened, and its `Hello` is sent at `at` (or just after): pings of
    /// an earlier connection can no longer be answered.
    pub(crate) fn hello_sent(&mut self, at: Instant) {
        self.pings.clear();
        self.hello_sent = Some(at);
    }

    /// The connection dropped: nothing sent on it can be answered any more.
    pub(crate) fn disconnected(&mut self) {
        self.pings.clear();
        self.hello_sent = None;
    }

    /// The controller welcomed the `Hello` of this connection, granting `length`: the
    /// lease counts from the hello's sending. Whether it was renewed.
    pub(crate) fn welcomed(&mut self, length: Option<Duration>) -> bool {
        self.length = length;
        match self.hello_sent.take() {
            Some(at) => self.renew_from(at),
            None => false,
        }
    }

    /// A ping is sent at `at` (or just after): its payload, the ping's number.
    pub(crate) fn ping(&mut self, at: Instant) -> [u8; 8] {
        let n = self.next_ping;
        self.next_ping = self.next_ping.wrapping_add(1);
        if self.pings.len() == OUTSTANDING_PINGS {
            self.pings.pop_front();
        }
        self.pings.push_back((n, at));
        n.to_be_bytes()
    }

    /// A frame came from the controller: only a pong can renew the lease (a welcome does
    /// too, once decoded: [`Lease::welcomed`]). Whether it was renewed.
    pub(crate) fn heard(&mut self, frame: &Message) -> bool {
        match frame {
            Message::Pong(payload) => self.pong(payload),
            _ => false,
        }
    }

    /// A pong with `payload` came: the lease counts from its ping's sending if it
    /// answers one still outstanding (older ones are forgotten: the controller read them
    /// before). Whether it was renewed.
    pub(crate) fn pong(&mut self, payload: &[u8]) -> bool {
        let Ok(bytes) = <[u8; 8]>::try_from(payload) else {
            return false;
        };
        let n = u64::from_be_bytes(bytes);
        let Some(i) = self.pings.iter().position(|&(m, _)| m == n) else {
            return false;
        };
        let (_, sent) = self.pings[i];
        self.pings.drain(..=i);
        self.renew_from(sent)
    }

    fn renew_from(&mut self, at: Instant) -> bool {
        if at > self.renewed_from {
            self.renewed_from = at;
            return true;
        }
        false
    }

    /// The lease granted, if any.
    pub(crate) fn length(&self) -> Option<Duration> {
        self.length
    }

    /// When the lease ends, if there is one.
    pub(crate) fn end(&self) -> Option<Instant> {
        Some(self.renewed_from + self.length?)
    }

    /// How long before the end the runs are sent SIGTERM: a third of the lease, at
    /// least 100 ms (and at most the lease).
    pub(crate) fn kill_wait(&self) -> Option<Duration> {
        let length = self.length?;
        Some((length / 3).max(MIN_KILL_WAIT).min(length))
    }

    /// When fencing starts: a kill wait before the end.
    pub(crate) fn fence_at(&self) -> Option<Instant> {
        Some(self.end()? - self.kill_wait()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(30);
    const S: Duration = Duration::from_secs(1);

    /// A lease welcomed at `t0` (its hello sent then).
    fn welcomed(t0: Instant) -> Lease {
        let mut l = Lease::new(t0);
        l.hello_sent(t0);
        l.welcomed(Some(LEASE));
        l
    }

    #[test]
    fn no_lease_until_a_welcome_grants_one_and_it_counts_from_the_hello() {
        let t0 = Instant::now();
        let mut l = Lease::new(t0);
        assert_eq!(l.end(), None);
        assert_eq!(l.fence_at(), None);
        l.hello_sent(t0 + S);
        // The welcome comes 5 s later: the lease still counts from the hello's sending.
        assert!(l.welcomed(Some(LEASE)));
        assert_eq!(l.end(), Some(t0 + S + LEASE));
        // An older controller grants none: no fencing.
        l.hello_sent(t0 + 2 * S);
        l.welcomed(None);
        assert_eq!(l.end(), None);
    }

    #[test]
    fn fencing_starts_a_third_of_the_lease_before_its_end() {
        let t0 = Instant::now();
        let l = welcomed(t0);
        assert_eq!(l.kill_wait(), Some(10 * S));
        assert_eq!(l.fence_at(), Some(t0 + 20 * S));
        let mut short = Lease::new(t0);
        short.hello_sent(t0);
        short.welcomed(Some(Duration::from_millis(150)));
        assert_eq!(short.kill_wait(), Some(Duration::from_millis(100)));
        short.welcomed(Some(Duration::from_millis(60)));
        assert_eq!(short.kill_wait(), Some(Duration::from_millis(60)));
    }

    #[test]
    fn a_pong_renews_the_lease_from_its_ping_s_sending_not_from_its_arrival() {
        let t0 = Instant::now();
        let mut l = welcomed(t0);
        let first = l.ping(t0 + 5 * S);
        let second = l.ping(t0 + 10 * S);
        // The pong of the first ping arrives late, after the second was sent.
        assert!(l.pong(&first));
        assert_eq!(l.end(), Some(t0 + 5 * S + LEASE));
        assert!(l.pong(&second));
        assert_eq!(l.end(), Some(t0 + 10 * S + LEASE));
        // Each pong counts once.
        assert!(!l.pong(&second));
    }

    #[test]
    fn a_pong_of_an_older_ping_never_moves_the_lease_back_and_a_newer_one_forgets_the_older() {
        let t0 = Instant::now();
        let mut l = welcomed(t0);
        let old = l.ping(t0 + S);
        let new = l.ping(t0 + 2 * S);
        assert!(l.pong(&new));
        assert!(!l.pong(&old), "forgotten once a newer ping is answered");
        assert_eq!(l.end(), Some(t0 + 2 * S + LEASE));
    }

    #[test]
    fn no_frame_but_a_pong_of_its_own_ping_renews_the_lease() {
        use cadre_proto::agent::ControllerMessage;
        let t0 = Instant::now();
        let mut l = welcomed(t0);
        let ping = l.ping(t0 + S);
        let end = l.end();
        // The controller's orders and acknowledgements, its pings, a close: none renews
        // (in an asymmetric partition they still reach an agent the controller no longer
        // hears).
        let stop = ControllerMessage::Stop {
            run: cadre_proto::agent::RunRef::job_run(cadre_core::job::JobId(7), 0),
            kill_wait_secs: 30,
        };
        for frame in [
            Message::text(serde_json::to_string(&stop).unwrap()),
            Message::text(serde_json::to_string(&ControllerMessage::Ack { seq: 3 }).unwrap()),
            Message::Ping(ping.to_vec().into()),
            Message::Close(None),
        ] {
            assert!(!l.heard(&frame), "{frame:?}");
            assert_eq!(l.end(), end, "{frame:?}");
        }
        assert!(l.heard(&Message::Pong(ping.to_vec().into())));
        assert_eq!(l.end(), Some(t0 + S + LEASE));
    }

    #[test]
    fn unknown_or_malformed_pongs_renew_nothing() {
        let t0 = Instant::now();
        let mut l = welcomed(t0);
        let ping = l.ping(t0 + S);
        let end = l.end();
        assert!(!l.pong(&[]), "an empty pong (an older agent's ping)");
        assert!(!l.pong(&[1, 2, 3]));
        assert!(!l.pong(&42u64.to_be_bytes()), "a number never sent");
        let mut longer = ping.to_vec();
        longer.push(0);
        assert!(!l.pong(&longer));
        assert_eq!(l.end(), end);
        // A ping of a connection since dropped is not answered on the next one.
        l.disconnected();
        l.hello_sent(t0 + 2 * S);
        assert!(!l.pong(&ping));
        assert_eq!(l.end(), end);
    }

    #[test]
    fn only_the_last_few_pings_are_remembered() {
        let t0 = Instant::now();
        let mut l = welcomed(t0);
        let first = l.ping(t0 + S);
        for i in 0..OUTSTANDING_PINGS as u32 {
            l.ping(t0 + S * (2 + i));
        }
        assert!(!l.pong(&first), "forgotten: renews nothing");
        assert_eq!(l.end(), Some(t0 + LEASE));
    }

    #[test]
    fn a_welcome_without_its_hello_renews_nothing() {
        let t0 = Instant::now();
        let mut l = welcomed(t0);
        l.disconnected();
        assert!(!l.welcomed(Some(LEASE)));
        assert_eq!(l.end(), Some(t0 + LEASE));
    }
}
