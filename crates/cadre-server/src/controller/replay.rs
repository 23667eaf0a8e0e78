//! Each agent event applied at most once, though an agent may send it again.
//!
//! Given: an agent numbers its events (`seq`, increasing over its life) and keeps them
//! until acknowledged; the controller acknowledges only after committing what they say,
//! so an event applied just before its connection dropped comes again in the next
//! hello's outbox. Each event is otherwise sent once: a repeat only ever comes in a hello.
//! Its hello names its life ([`cadre_proto::agent::Hello::life`]; older agents do not).
//!
//! Decided: per node, the life of its agent and the last `seq` applied in it. An event of
//! a hello's outbox up to that `seq` was applied already: it is skipped (and acknowledged
//! with the rest). A hello of another life forgets the last `seq` (a new life numbers
//! afresh, maybe lower: its numbers come from its start time, and a clock may step back).
//!
//! Why it matters: most events are harmless twice (a run ends once), but an `Ended` that
//! drains its node is not: applied again after an administrator resumed the node, it
//! drained it again.
//!
//! Not covered: a restarted controller remembers nothing, and applies a replay of what
//! its previous life applied but had not acknowledged yet. An older agent (no life) that
//! restarts with a clock stepped back and events in its first hello's outbox would have
//! those skipped; a first hello's outbox is empty in practice (a run needs a launch,
//! which needs a connection).

/// What a node's agent has had applied.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct AppliedEvents {
    /// The agent's life as of its last hello (`None`: it did not say).
    life: Option<u64>,
    /// The last `seq` applied in that life.
    last: Option<u64>,
}

impl AppliedEvents {
    /// A hello of the agent's life `life`; whether it is surely the life of the last hello
    /// (both named, and equal): a reconnection, not a restart.
    pub(crate) fn hello(&mut self, life: Option<u64>) -> bool {
        let same = life.is_some() && life == self.life;
        // A change either way is a restart (an agent changes its version only by one);
        // `None` twice may be one life or two, and is taken for one.
        if life != self.life {
            self.last = None;
        }
        self.life = life;
        same
    }

    /// Whether the event `seq` of a hello's outbox is still to apply.
    pub(crate) fn is_new(&self, seq: u64) -> bool {
        self.last.is_none_or(|last| seq > last)
    }

    /// The event `seq` has been applied.
    pub(crate) fn applied(&mut self, seq: u64) {
        // Within one life, events come in order of their `seq`: the last is the highest.
        self.last = Some(seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_of_the_same_life_is_skipped_and_a_new_life_starts_afresh() {
        let mut a = AppliedEvents::default();
        a.hello(Some(1000));
        assert!(a.is_new(1000));
        a.applied(1000);
        a.applied(1001);
        // Reconnected: the same life replays what it had not seen acknowledged.
        a.hello(Some(1000));
        assert!(!a.is_new(1000) && !a.is_new(1001));
        assert!(a.is_new(1002));
        // Restarted with a clock stepped back: lower numbers, all new.
        a.hello(Some(500));
        assert!(a.is_new(500));
        a.applied(500);
        // An older agent (no life) is a restart too; then its replays are skipped.
        a.hello(None);
        assert!(a.is_new(500));
        a.applied(7);
        a.hello(None);
        assert!(!a.is_new(7) && a.is_new(8));
    }
}
