//! Interval messages that never back a mailbox up.
//!
//! `send_interval` queues a message every period whether or not the last one
//! has been handled. When handling one takes longer than the period (a slow
//! database, a busy machine), the queue grows without end and whatever else
//! the actor is sent — a sub-batch's outcome, a health change — waits
//! behind it.

use std::time::{Duration, Instant};

/// Tells an actor which of its interval messages to act on: one that
/// arrives less than half a period after the last was handled queued while
/// that one ran, carries nothing new, and is skipped at the cost of a
/// comparison. So the actor acts at most about twice a period, and a
/// backlog drains at once.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    period: Duration,
    last_handled: Option<Instant>,
}

impl Pacer {
    /// A pacer for messages sent every `period`.
    pub(crate) fn new(period: Duration) -> Self {
        Pacer {
            period,
            last_handled: None,
        }
    }

    /// Whether the message now dequeued is worth acting on.
    pub(crate) fn due(&self) -> bool {
        self.last_handled
            .is_none_or(|at| at.elapsed() >= self.period / 2)
    }

    /// Notes that a message was acted on, as the handling ends.
    pub(crate) fn handled(&mut self) {
        self.last_handled = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_queued_while_one_was_handled_are_skipped() {
        let mut pacer = Pacer::new(Duration::from_secs(3_600));
        assert!(pacer.due(), "the first message is acted on");
        pacer.handled();
        assert!(!pacer.due(), "one right behind it is not");
        let mut quick = Pacer::new(Duration::ZERO);
        quick.handled();
        assert!(quick.due(), "a zero period paces nothing");
    }
}
