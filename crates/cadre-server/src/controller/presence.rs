//! Where a node's agent is, and the one function that moves it.
//!
//! **Given** the agent's connections coming and going (each going with the instant from
//! which the agent's lease is counted: its last frame heard), and time passing.
//! **Decided** here: the node's presence after each. **Must hold**: a node is `Connected`
//! through exactly one connection (the newest); it goes `Away` (suspect: nothing new
//! starts on it) only when that connection goes; it is `Lost` only once the agent's lease,
//! counted from its last frame, has surely expired: `grace` (the lease plus the margin)
//! after it; any other move is refused.

use std::time::Duration;

/// Where a node's agent is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Its agent is connected through this connection.
    Connected { conn: u64 },
    /// Not connected (suspect); its agent's lease counts from this instant of the
    /// controller's monotonic clock (the last frame heard from it, or the controller's
    /// start).
    Away { since: Duration },
    /// Away longer than the lease and its margin: the node is down.
    Lost,
}

/// What happens to a node's agent.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PresenceEvent {
    /// The agent said hello on this connection (a newer connection replaces an older one).
    Hello { conn: u64 },
    /// This connection closed; the agent's lease counts from `since` (no later than the
    /// closing).
    Gone { conn: u64, since: Duration },
    /// The lease is checked at `now`: lost once `grace` (lease + margin) has passed.
    Timeout { now: Duration, grace: Duration },
}

/// A move the presence of a node cannot make.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a node's presence cannot go from {from:?} on {event:?}")]
pub struct IllegalPresence {
    pub from: Presence,
    pub event: PresenceEvent,
}

impl Presence {
    /// The presence after `event`, or why the event cannot happen now.
    pub fn next(self, event: PresenceEvent, now: Duration) -> Result<Presence, IllegalPresence> {
        let illegal = Err(IllegalPresence { from: self, event });
        match (self, event) {
            (_, PresenceEvent::Hello { conn }) => Ok(Presence::Connected { conn }),
            (Presence::Connected { conn }, PresenceEvent::Gone { conn: gone, since })
                if conn == gone =>
            {
                Ok(Presence::Away {
                    since: since.min(now),
                })
            }
            (Presence::Away { .. }, PresenceEvent::Timeout { now, grace })
                if self.timed_out(now, grace) =>
            {
                Ok(Presence::Lost)
            }
            _ => illegal,
        }
    }

    /// The connection its agent is reached through, if connected.
    pub fn conn(self) -> Option<u64> {
        match self {
            Presence::Connected { conn } => Some(conn),
            Presence::Away { .. } | Presence::Lost => None,
        }
    }

    /// When it is to be declared lost, `grace` after its lease began, if away.
    pub fn lost_at(self, grace: Duration) -> Option<Duration> {
        match self {
            Presence::Away { since } => Some(since.saturating_add(grace)),
            Presence::Connected { .. } | Presence::Lost => None,
        }
    }

    /// Whether it has been away for the whole `grace` at `now`.
    pub fn timed_out(self, now: Duration, grace: Duration) -> bool {
        self.lost_at(grace).is_some_and(|at| now >= at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_hello_connects_from_anywhere_and_a_newer_connection_replaces_the_older() {
        for from in [
            Presence::Away { since: S },
            Presence::Lost,
            Presence::Connected { conn: 1 },
        ] {
            assert_eq!(
                from.next(PresenceEvent::Hello { conn: 2 }, S),
                Ok(Presence::Connected { conn: 2 })
            );
        }
    }

    #[test]
    fn only_the_current_connection_going_makes_a_node_away_since_its_last_frame() {
        let c = Presence::Connected { conn: 3 };
        let gone = |conn, since| PresenceEvent::Gone { conn, since };
        // Closed at 5 s, last heard at 2 s: the lease counts from 2 s.
        assert_eq!(
            c.next(gone(3, 2 * S), 5 * S),
            Ok(Presence::Away { since: 2 * S })
        );
        // Never from later than the closing.
        assert_eq!(
            c.next(gone(3, 9 * S), 5 * S),
            Ok(Presence::Away { since: 5 * S })
        );
        assert!(c.next(gone(2, S), 5 * S).is_err());
        assert!(Presence::Lost.next(gone(3, S), S).is_err());
        assert!(Presence::Away { since: S }.next(gone(3, S), S).is_err());
    }

    #[test]
    fn a_node_is_lost_only_once_its_lease_and_margin_have_passed_since_its_last_frame() {
        // Last heard at 1 s, closed (silent for the lease) at 31 s.
        let away = Presence::Connected { conn: 1 }
            .next(PresenceEvent::Gone { conn: 1, since: S }, 31 * S)
            .unwrap();
        let grace = 30 * S + 2 * S;
        assert_eq!(away.lost_at(grace), Some(33 * S));
        let early = PresenceEvent::Timeout { now: 32 * S, grace };
        let due = PresenceEvent::Timeout { now: 33 * S, grace };
        assert!(away.next(early, 32 * S).is_err());
        assert!(!away.timed_out(32 * S, grace));
        assert_eq!(away.next(due, 33 * S), Ok(Presence::Lost));
        assert!(away.timed_out(33 * S, grace));
        assert!(Presence::Connected { conn: 1 }.next(due, 33 * S).is_err());
        assert!(Presence::Lost.next(due, 33 * S).is_err());
        assert_eq!(Presence::Lost.lost_at(grace), None);
        assert_eq!(Presence::Connected { conn: 1 }.lost_at(grace), None);
    }
}
