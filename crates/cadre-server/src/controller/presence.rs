//! Where a node's agent is, and the one function that moves it.
//!
//! **Given** the agent's connections coming and going, and time passing. **Decided** here:
//! the node's presence after each. **Must hold**: a node is `Connected` through exactly one
//! connection (the newest); it goes `Away` only when that connection goes; it is `Lost`
//! only once it has been away for the whole node timeout; any other move is refused.

use std::time::Duration;

/// Where a node's agent is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Its agent is connected through this connection.
    Connected { conn: u64 },
    /// Not connected since this instant of the controller's monotonic clock (its start,
    /// or the disconnection).
    Away { since: Duration },
    /// Away longer than the node timeout: the node is down.
    Lost,
}

/// What happens to a node's agent.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PresenceEvent {
    /// The agent said hello on this connection (a newer connection replaces an older one).
    Hello { conn: u64 },
    /// This connection closed.
    Gone { conn: u64 },
    /// The node timeout is checked at `now`.
    Timeout { now: Duration, timeout: Duration },
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
            (Presence::Connected { conn }, PresenceEvent::Gone { conn: gone }) if conn == gone => {
                Ok(Presence::Away { since: now })
            }
            (Presence::Away { since }, PresenceEvent::Timeout { now, timeout })
                if now.saturating_sub(since) >= timeout =>
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

    /// Whether it has been away for the whole `timeout` at `now`.
    pub fn timed_out(self, now: Duration, timeout: Duration) -> bool {
        matches!(self, Presence::Away { since } if now.saturating_sub(since) >= timeout)
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
    fn only_the_current_connection_going_makes_a_node_away() {
        let c = Presence::Connected { conn: 3 };
        assert_eq!(
            c.next(PresenceEvent::Gone { conn: 3 }, 5 * S),
            Ok(Presence::Away { since: 5 * S })
        );
        assert!(c.next(PresenceEvent::Gone { conn: 2 }, 5 * S).is_err());
        assert!(
            Presence::Lost
                .next(PresenceEvent::Gone { conn: 3 }, S)
                .is_err()
        );
        assert!(
            Presence::Away { since: S }
                .next(PresenceEvent::Gone { conn: 3 }, S)
                .is_err()
        );
    }

    #[test]
    fn a_node_is_lost_only_after_the_whole_timeout_away() {
        let away = Presence::Away { since: S };
        let timeout = 10 * S;
        let early = PresenceEvent::Timeout {
            now: 10 * S,
            timeout,
        };
        let due = PresenceEvent::Timeout {
            now: 11 * S,
            timeout,
        };
        assert!(away.next(early, 10 * S).is_err());
        assert!(!away.timed_out(10 * S, timeout));
        assert_eq!(away.next(due, 11 * S), Ok(Presence::Lost));
        assert!(away.timed_out(11 * S, timeout));
        assert!(Presence::Connected { conn: 1 }.next(due, 11 * S).is_err());
        assert!(Presence::Lost.next(due, 11 * S).is_err());
    }
}
