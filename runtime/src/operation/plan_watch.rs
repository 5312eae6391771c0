//! The plan-drift guard's bookkeeping, with no I/O: when the owner asks the
//! planner again how it would run the batch query, and what an answer means.
//!
//! Enqueue refuses a batch query the planner would run as a full scan of
//! the target, but a plan is chosen again for every statement: after an
//! `ANALYZE` changes the statistics, an index is dropped, or a setting
//! changes, the same query can read the whole table for every batch. The
//! owner looks again at the start of its run, every
//! [`PlanCheckEvery::batches`] batches planned and at least every
//! [`PlanCheckEvery::interval`]; a look that finds a full scan where the
//! last one found none stops the operation (it fails, naming the plan)
//! instead of going on at full-scan cost.

use std::time::{Duration, Instant};

/// How often the batch query's plan is looked at again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanCheckEvery {
    /// At least this often while the operation runs: a plan changed by an
    /// `ANALYZE` (or a dropped index) is caught within it.
    pub interval: Duration,
    /// And after this many batches planned, however fast they go.
    pub batches: i64,
}

impl Default for PlanCheckEvery {
    fn default() -> Self {
        PlanCheckEvery {
            interval: Duration::from_secs(30),
            batches: 100,
        }
    }
}

/// What one owner's run has seen of its batch query's plan.
#[derive(Debug, Clone, Default)]
pub struct PlanWatch {
    /// When it last looked, and the batches planned by then.
    last: Option<(Instant, i64)>,
    /// Whether the last look found a full scan.
    scanning: bool,
    /// The target's statistics version last read (`Some(None)`: read, and
    /// the database keeps none).
    statistics: Option<Option<String>>,
    /// The statistics changed since the last look: one is due now.
    stale: bool,
}

/// What a look at the plan means for the operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanVerdict {
    /// Nothing changed for the worse.
    Fine,
    /// The run's first look already finds a full scan: enqueued with
    /// `--force` (which the store does not keep), or changed before this
    /// run. Told, not stopped.
    ScansFromTheStart,
    /// A plan that used an index now reads the whole table: stop.
    TurnedIntoFullScan,
}

impl PlanWatch {
    /// Whether a look is due at `now`, with `batches_planned` batches
    /// planned so far: never looked in this run, or `every` has passed.
    pub fn due(&self, every: PlanCheckEvery, now: Instant, batches_planned: i64) -> bool {
        if self.stale {
            return true;
        }
        match self.last {
            None => true,
            Some((at, planned)) => {
                now.saturating_duration_since(at) >= every.interval
                    || batches_planned - planned >= every.batches
            }
        }
    }

    /// Takes the target's statistics version, as read now: one that
    /// differs from the last read (an `ANALYZE` since) makes a look due.
    pub fn statistics_read(&mut self, version: Option<String>) {
        if self
            .statistics
            .as_ref()
            .is_some_and(|seen| *seen != version)
        {
            self.stale = true;
        }
        self.statistics = Some(version);
    }

    /// Takes a look's outcome (`full_scan`: the plan reads the whole
    /// table) made at `now` with `batches_planned` batches planned.
    pub fn looked(&mut self, full_scan: bool, now: Instant, batches_planned: i64) -> PlanVerdict {
        let first = self.last.is_none();
        let was_scanning = self.scanning;
        self.stale = false;
        self.last = Some((now, batches_planned));
        self.scanning = full_scan;
        match (full_scan, first, was_scanning) {
            (false, _, _) => PlanVerdict::Fine,
            (true, true, _) => PlanVerdict::ScansFromTheStart,
            (true, false, true) => PlanVerdict::Fine,
            (true, false, false) => PlanVerdict::TurnedIntoFullScan,
        }
    }
}

/// The error an operation fails with when its batch query's plan turned
/// into a full scan of `table`: the line that scans and the whole plan.
pub fn drift_error(table: &str, line: &str, plan: &[String]) -> String {
    let plan: Vec<&str> = plan.iter().map(|l| l.trim()).collect();
    format!(
        "plan drift: the batch query now reads all of `{table}` ({line}), where it used an \
         index earlier in this run; stopped rather than scan the table for every batch. \
         Restore the index (or ANALYZE the table) and `sluice retry` the operation. \
         Plan: {}",
        plan.join(" | ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: PlanCheckEvery = PlanCheckEvery {
        interval: Duration::from_secs(30),
        batches: 10,
    };

    #[test]
    fn a_run_looks_first_then_after_the_interval_or_the_batches() {
        let start = Instant::now();
        let mut watch = PlanWatch::default();
        assert!(watch.due(EVERY, start, 0), "the first look is due at once");
        assert_eq!(watch.looked(false, start, 0), PlanVerdict::Fine);
        assert!(!watch.due(EVERY, start + Duration::from_secs(29), 9));
        assert!(watch.due(EVERY, start + Duration::from_secs(30), 9));
        assert!(watch.due(EVERY, start + Duration::from_secs(1), 10));
        assert_eq!(
            watch.looked(false, start + Duration::from_secs(1), 10),
            PlanVerdict::Fine
        );
        assert!(!watch.due(EVERY, start + Duration::from_secs(2), 19));
    }

    #[test]
    fn only_a_change_from_an_index_to_a_full_scan_stops() {
        let now = Instant::now();
        let mut watch = PlanWatch::default();
        assert_eq!(watch.looked(false, now, 0), PlanVerdict::Fine);
        assert_eq!(watch.looked(true, now, 5), PlanVerdict::TurnedIntoFullScan);

        let mut forced = PlanWatch::default();
        assert_eq!(forced.looked(true, now, 0), PlanVerdict::ScansFromTheStart);
        assert_eq!(forced.looked(true, now, 5), PlanVerdict::Fine);
        // An index that appears and goes again is a change once more.
        assert_eq!(forced.looked(false, now, 6), PlanVerdict::Fine);
        assert_eq!(forced.looked(true, now, 7), PlanVerdict::TurnedIntoFullScan);
    }

    #[test]
    fn the_drift_error_names_the_table_the_scan_and_the_plan() {
        let plan = vec![
            "Limit  (cost=0.00..2.00 rows=100 width=8)".to_owned(),
            "  ->  Seq Scan on items  (cost=0.00..400.00 rows=20000 width=8)".to_owned(),
        ];
        let error = drift_error("items", "Seq Scan on items", &plan);
        assert!(error.starts_with("plan drift: the batch query now reads all of `items`"));
        assert!(error.contains("(Seq Scan on items)"));
        assert!(error.ends_with(
            "Plan: Limit  (cost=0.00..2.00 rows=100 width=8) | ->  Seq Scan on items  \
             (cost=0.00..400.00 rows=20000 width=8)"
        ));
    }

    #[test]
    fn a_change_of_statistics_makes_a_look_due_at_once() {
        let start = Instant::now();
        let mut watch = PlanWatch::default();
        watch.statistics_read(None);
        assert_eq!(watch.looked(false, start, 0), PlanVerdict::Fine);
        let soon = start + Duration::from_secs(1);
        watch.statistics_read(None);
        assert!(!watch.due(EVERY, soon, 1), "nothing kept, nothing changed");
        watch.statistics_read(Some("1".into()));
        assert!(watch.due(EVERY, soon, 1), "the first ANALYZE");
        assert_eq!(watch.looked(false, soon, 1), PlanVerdict::Fine);
        watch.statistics_read(Some("1".into()));
        assert!(!watch.due(EVERY, soon, 1), "looked since");
        watch.statistics_read(Some("2".into()));
        assert!(watch.due(EVERY, soon, 1));
    }
}
