//! A pace measured over a window of sub-batches: rows committed since a
//! moment, over all the time it took (work, pauses and throttle waits).

use super::*;

/// Rows committed since a moment: a pace measured over all it took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaceWindow {
    /// When the window's first sub-batch started.
    pub since: Instant,
    /// Rows committed since.
    pub rows: i64,
    /// When the last of them committed.
    pub until: Instant,
}

impl PaceWindow {
    /// Rows a second over the window, once it spans 200 ms.
    pub fn pace(&self) -> Option<f64> {
        let span = self.until.saturating_duration_since(self.since);
        (span >= std::time::Duration::from_millis(200) && self.rows > 0)
            .then(|| self.rows as f64 / span.as_secs_f64())
    }

    /// The window over about its last 5 s once it spans 10 s: its rows
    /// scaled to that span, so the pace follows the database's.
    pub fn recent(self) -> Self {
        let span = self.until.saturating_duration_since(self.since);
        let keep = std::time::Duration::from_secs(5);
        if span <= std::time::Duration::from_secs(10) {
            return self;
        }
        PaceWindow {
            since: self.until.checked_sub(keep).unwrap_or(self.since),
            rows: (self.rows as f64 * keep.as_secs_f64() / span.as_secs_f64()) as i64,
            until: self.until,
        }
    }

    /// How long to wait from `now` so that the window's rows were
    /// committed at `aimed` rows a second.
    pub fn wait(&self, aimed: f64, now: Instant) -> std::time::Duration {
        let due =
            std::time::Duration::from_secs_f64((self.rows as f64 / aimed.max(1e-6)).min(3_600.0));
        (self.since + due).saturating_duration_since(now)
    }
}
