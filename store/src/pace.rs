//! An operation's recent pace, read from its event log: rows per second over
//! a recent window, how much of that window it was held (stopped by a health
//! signal or paused) or throttled, and an ETA at that pace — so an estimate
//! made while the database is unhealthy says so instead of promising the
//! healthy speed.

use crate::event::{Event, Health, RecordedEvent};

/// How far back [`RecentPace`] looks by default: one hour.
pub const PACE_WINDOW_MS: i64 = 3_600_000;

/// An operation's pace over a recent window ending now.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RecentPace {
    /// How long the window is: from `window_ms` ago, or from the
    /// operation's creation when that is later, to now (or its end).
    pub window_ms: i64,
    /// Rows its batches changed in the window.
    pub rows: i64,
    /// Rows per second over the whole window, holds included.
    pub rows_per_second: f64,
    /// Milliseconds of the window it was held: stopped by a health signal
    /// or paused by an operator.
    pub held_ms: i64,
    /// What held it longest in the window.
    pub held_by: Option<String>,
    /// Milliseconds of the window it ran throttled.
    pub throttled_ms: i64,
    /// Milliseconds until the rows left are done at this pace; `None` when
    /// nothing is known to be left or no row was done in the window.
    pub eta_ms: Option<i64>,
}

impl RecentPace {
    /// The pace of the operation whose log is `events` (in order), over the
    /// `window_ms` before `now_ms`, with `rows_left` rows still to do.
    pub fn read(
        events: &[RecordedEvent],
        rows_left: Option<i64>,
        now_ms: i64,
        window_ms: i64,
    ) -> RecentPace {
        let created = events.first().map_or(now_ms, |e| e.recorded_at);
        let ended = events
            .iter()
            .find(|e| matches!(e.event, Event::Finished | Event::Cancelled { .. }))
            .map_or(now_ms, |e| e.recorded_at.min(now_ms));
        let start = created.max(now_ms - window_ms);
        let mut hold = Hold::default();
        let mut held: Vec<(String, i64)> = Vec::new();
        let mut throttled_ms = 0;
        let mut rows = 0;
        let mut since = start;
        let mut account = |hold: &Hold, from: i64, to: i64, held: &mut Vec<(String, i64)>| {
            let span = (to.min(ended) - from.max(start)).max(0);
            if let Some(reason) = hold.reason() {
                match held.iter_mut().find(|(r, _)| *r == reason) {
                    Some((_, ms)) => *ms += span,
                    None => held.push((reason, span)),
                }
            } else if hold.throttled {
                throttled_ms += span;
            }
        };
        for recorded in events {
            let at = recorded.recorded_at;
            if at > start {
                account(&hold, since, at, &mut held);
                since = at;
                if let Event::BatchSucceeded { rows: done, .. } = recorded.event
                    && at <= ended
                {
                    rows += done;
                }
            }
            hold.apply(&recorded.event);
        }
        account(&hold, since, ended, &mut held);
        let window_ms = (ended - start).max(0);
        let rows_per_second = if window_ms > 0 {
            rows as f64 * 1_000.0 / window_ms as f64
        } else {
            0.0
        };
        let held_ms = held.iter().map(|(_, ms)| ms).sum();
        let held_by = held
            .into_iter()
            .filter(|(_, ms)| *ms > 0)
            .max_by_key(|(_, ms)| *ms)
            .map(|(reason, _)| reason);
        let eta_ms = rows_left
            .filter(|left| *left > 0 && rows > 0)
            .map(|left| (left as f64 / rows as f64 * window_ms as f64).round() as i64);
        RecentPace {
            window_ms,
            rows,
            rows_per_second,
            held_ms,
            held_by,
            throttled_ms,
            eta_ms,
        }
    }

    /// The share of the window it was held, 0 to 1.
    pub fn held_share(&self) -> f64 {
        if self.window_ms == 0 {
            0.0
        } else {
            self.held_ms as f64 / self.window_ms as f64
        }
    }
}

/// What holds an operation at one point of its log.
#[derive(Debug, Default)]
struct Hold {
    /// Stopped by a health signal, with its reason.
    stopped: Option<String>,
    /// Paused by an operator, with the reason given.
    paused: Option<String>,
    /// Throttled by a health signal.
    throttled: bool,
}

impl Hold {
    fn apply(&mut self, event: &Event) {
        match event {
            Event::Throttled { health, reason } => {
                self.stopped = (*health == Health::Stopped)
                    .then(|| reason.clone().unwrap_or_else(|| "a health signal".into()));
                self.throttled = matches!(health, Health::Throttled { .. });
            }
            Event::Paused { reason } => self.paused = Some(format!("paused: {reason}")),
            Event::Resumed | Event::Retried => self.paused = None,
            _ => {}
        }
    }

    /// What holds it now (an operator's pause first), if anything.
    fn reason(&self) -> Option<String> {
        self.paused.clone().or_else(|| self.stopped.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(recorded_at: i64, event: Event) -> RecordedEvent {
        RecordedEvent {
            operation_id: 1,
            seq: 0,
            recorded_at,
            event,
        }
    }

    fn succeeded(rows: i64) -> Event {
        Event::BatchSucceeded {
            ordinal: 1,
            rows,
            duration_ms: 1,
            next_batch_size: None,
        }
    }

    fn health(health: Health, reason: &str) -> Event {
        Event::Throttled {
            health,
            reason: Some(reason.into()),
        }
    }

    #[test]
    fn a_stop_counts_as_held_and_slows_the_eta() {
        // 100 s: 1,000 rows in the first 40 s, stopped by lag for 50 s, then
        // throttled for the last 10 s.
        let events = vec![
            at(0, Event::Resumed),
            at(40_000, succeeded(1_000)),
            at(40_000, health(Health::Stopped, "replica lag 12 s")),
            at(
                90_000,
                health(Health::Throttled { percent: 50 }, "autovacuum"),
            ),
        ];
        let pace = RecentPace::read(&events, Some(2_000), 100_000, PACE_WINDOW_MS);
        assert_eq!(pace.window_ms, 100_000);
        assert_eq!(pace.rows, 1_000);
        assert_eq!(pace.rows_per_second, 10.0);
        assert_eq!(pace.held_ms, 50_000);
        assert_eq!(pace.held_by.as_deref(), Some("replica lag 12 s"));
        assert_eq!(pace.throttled_ms, 10_000);
        assert_eq!(pace.held_share(), 0.5);
        assert_eq!(pace.eta_ms, Some(200_000), "2,000 rows at 10 rows/s");
    }

    #[test]
    fn only_the_window_counts_and_a_pause_is_held_until_resumed() {
        let events = vec![
            at(0, Event::Resumed),
            at(10_000, succeeded(500)),
            at(
                20_000,
                Event::Paused {
                    reason: "ops".into(),
                },
            ),
            at(80_000, Event::Resumed),
            at(90_000, succeeded(300)),
        ];
        // The last 60 s: 40 → 100 s; paused (since 20 s) until 80 s.
        let pace = RecentPace::read(&events, Some(0), 100_000, 60_000);
        assert_eq!(pace.window_ms, 60_000);
        assert_eq!(pace.rows, 300);
        assert_eq!(pace.held_ms, 40_000);
        assert_eq!(pace.held_by.as_deref(), Some("paused: ops"));
        assert_eq!(pace.eta_ms, None, "nothing left");
    }

    #[test]
    fn an_ended_operation_s_window_stops_at_its_end_and_no_rows_means_no_eta() {
        let events = vec![at(0, Event::Resumed), at(30_000, Event::Finished)];
        let pace = RecentPace::read(&events, Some(10), 100_000, PACE_WINDOW_MS);
        assert_eq!(pace.window_ms, 30_000);
        assert_eq!(pace.eta_ms, None);
        assert_eq!(pace.held_share(), 0.0);
        assert_eq!(RecentPace::read(&[], None, 5, 10).window_ms, 0);
    }
}
