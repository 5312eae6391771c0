//! PostgreSQL's table activity: lock waits, autovacuum and cleanup debt
//! on each target table, the housekeeping throttles gated by the latency
//! canary.

use std::collections::HashSet;
use std::sync::Mutex;

use async_trait::async_trait;
use sluice_store::Store;

use super::{named_and_quoted, sees_all_sessions, unreadable};
use crate::health::{HealthContext, HealthIndicator, Reading, Scope, Signal};
use crate::latency::CanaryView;

/// PostgreSQL, per target table: sessions waiting for a lock on it stop its
/// operations (they would only add to the queue); autovacuum working on it
/// throttles them to half speed, and so does cleanup debt: dead rows
/// numbering twice what starts autovacuum on the table (the vacuum
/// threshold plus the scale factor times its rows, the table's own
/// settings first) and at least a floor mean it is dirtied faster than it
/// is cleaned. The debt lasts until the dead rows fall below what starts
/// autovacuum (hysteresis: in at 2×, out at 1×). Where autovacuum is off
/// (for the server or the table) nothing will pay the debt, so it does not
/// throttle: that is logged once, with the remedy.
///
/// Gated by the latency canary ([`TableActivity::gated_by`], as the
/// default indicators are), the autovacuum and cleanup-debt throttles hold
/// only while the canary's p99 on the table is over its latency budget, or
/// there is no reading or no budget to judge by: housekeeping that keeps
/// the application's queries within what the operator accepts costs the
/// work no speed. Lock waits stop the work whatever the canary says.
pub struct TableActivity {
    min_dead_rows: i64,
    /// The canary that gates the housekeeping throttles, if any.
    canary: Option<CanaryView>,
    in_debt: Mutex<HashSet<String>>,
    /// Tables in debt without autovacuum, already said.
    told: Mutex<HashSet<String>>,
}

impl TableActivity {
    /// The default floor of cleanup debt: fewer dead rows are never worth
    /// slowing down for, whatever a small table's trigger is.
    pub const MIN_DEAD_ROWS: i64 = 100_000;

    /// Lock waits, autovacuum, and cleanup debt of at least
    /// [`TableActivity::MIN_DEAD_ROWS`] dead rows.
    pub fn new() -> Self {
        Self::with_min_dead_rows(Self::MIN_DEAD_ROWS)
    }

    /// The same with cleanup debt from `min_dead_rows` dead rows.
    pub fn with_min_dead_rows(min_dead_rows: i64) -> Self {
        TableActivity {
            min_dead_rows,
            canary: None,
            in_debt: Mutex::new(HashSet::new()),
            told: Mutex::new(HashSet::new()),
        }
    }
}

impl TableActivity {
    /// The same, its autovacuum and cleanup-debt throttles held only while
    /// `view`'s canary is over the table's latency budget (or has no
    /// reading or budget to judge by).
    pub fn gated_by(mut self, view: CanaryView) -> Self {
        self.canary = Some(view);
        self
    }

    /// Whether a housekeeping throttle on `table` holds now, and the words
    /// its reason ends with.
    fn housekeeping_holds(&self, table: &str) -> Option<&'static str> {
        match self.canary.as_ref().map(|view| view.over_budget(table)) {
            None | Some(None) => Some(""),
            Some(Some(true)) => Some("; the latency canary is over its budget"),
            Some(Some(false)) => None,
        }
    }
}

impl Default for TableActivity {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl HealthIndicator for TableActivity {
    fn name(&self) -> &str {
        "lock waits, autovacuum and cleanup debt"
    }

    fn id(&self) -> &str {
        "table-activity"
    }

    async fn readable(&self, store: &Store) -> Result<(), String> {
        sees_all_sessions(store).await?;
        match store.target().health().table_activity("[]").await {
            Ok(_) => Ok(()),
            Err(error) => Err(unreadable(store, &error).await),
        }
    }

    async fn check(&self, context: &HealthContext) -> Result<Vec<Reading>, String> {
        if context.tables.is_empty() {
            return Ok(Vec::new());
        }
        let tables =
            serde_json::to_string(&named_and_quoted(&context.tables)).map_err(|e| e.to_string())?;
        let Some(rows) = context
            .store
            .target()
            .health()
            .table_activity(&tables)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(Vec::new());
        };
        let mut in_debt = self.in_debt.lock().expect("indicator state lock");
        let mut told = self.told.lock().expect("indicator state lock");
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                let (table, waiting, vacuuming, dead, trigger, autovacuum) = (
                    row.table,
                    row.waiting,
                    row.vacuuming,
                    row.dead,
                    row.trigger,
                    row.autovacuum,
                );
                let owed = in_cleanup_debt(dead, trigger, self.min_dead_rows, in_debt.contains(&table));
                if owed {
                    in_debt.insert(table.clone());
                } else {
                    in_debt.remove(&table);
                    told.remove(&table);
                }
                // Without autovacuum nothing will pay the debt: a throttle
                // would wait forever. Said once, with the remedy.
                let owed = owed && autovacuum;
                if in_debt.contains(&table) && !autovacuum && told.insert(table.clone()) {
                    tracing::warn!(%table, dead, "cleanup debt, but autovacuum is off for this table: not throttling for it; VACUUM the table, or turn autovacuum on");
                }
                let signal = if waiting > 0 {
                    Signal::Stop {
                        reason: format!("{waiting} session(s) waiting for a lock on {table}"),
                    }
                } else if let (true, Some(felt)) = (vacuuming, self.housekeeping_holds(&table)) {
                    Signal::Throttle {
                        percent: 50,
                        reason: format!("autovacuum is working on {table}{felt}"),
                    }
                } else if let (true, Some(felt)) = (owed, self.housekeeping_holds(&table)) {
                    Signal::Throttle {
                        percent: 50,
                        reason: format!(
                            "cleanup debt on {table}: {dead} dead rows, {:.1}× what starts autovacuum ({trigger:.0}){felt}",
                            dead as f64 / trigger.max(1.0)
                        ),
                    }
                } else {
                    return None;
                };
                Some(Reading {
                    scope: Scope::Table(table),
                    signal,
                })
            })
            .collect())
    }
}

/// Whether a table with `dead` dead rows, whose autovacuum starts at
/// `trigger`, is in cleanup debt, given whether it `was` at the last poll.
fn in_cleanup_debt(dead: i64, trigger: f64, min_dead_rows: i64, was: bool) -> bool {
    let dead_f = dead as f64;
    if was {
        dead_f >= trigger
    } else {
        dead >= min_dead_rows && dead_f >= 2.0 * trigger
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{CanaryView, TableActivity, in_cleanup_debt};

    #[test]
    fn housekeeping_throttles_hold_only_while_the_canary_feels_them() {
        let ms = Duration::from_millis;
        assert_eq!(
            TableActivity::new().housekeeping_holds("events"),
            Some(""),
            "ungated: always"
        );
        let view = CanaryView::new();
        let gated = TableActivity::new().gated_by(view.clone());
        assert!(
            gated.housekeeping_holds("events").is_some(),
            "no reading: held"
        );
        view.record("events", ms(1), Some(ms(2)), true);
        assert_eq!(
            gated.housekeeping_holds("events"),
            None,
            "within the budget: let go"
        );
        view.record("events", ms(3), Some(ms(2)), true);
        assert!(
            gated.housekeeping_holds("events").is_some(),
            "over the budget: held"
        );
        view.record("events", ms(3), None, true);
        assert!(
            gated.housekeeping_holds("events").is_some(),
            "no budget: held"
        );
        view.record("events", ms(3), Some(ms(2)), false);
        assert_eq!(
            gated.housekeeping_holds("events"),
            None,
            "over the budget, but no application there to feel it: let go"
        );
        assert!(
            gated.housekeeping_holds("other").is_some(),
            "another table: its own reading"
        );
    }

    #[test]
    fn cleanup_debt_starts_at_twice_the_trigger_and_ends_below_it() {
        // Not in debt: needs both twice the trigger and the floor.
        assert!(!in_cleanup_debt(150_000, 100_000.0, 100_000, false));
        assert!(in_cleanup_debt(200_000, 100_000.0, 100_000, false));
        assert!(
            !in_cleanup_debt(90_000, 10_000.0, 100_000, false),
            "under the floor"
        );
        // In debt: stays until under the trigger itself.
        assert!(in_cleanup_debt(150_000, 100_000.0, 100_000, true));
        assert!(in_cleanup_debt(100_000, 100_000.0, 100_000, true));
        assert!(!in_cleanup_debt(99_999, 100_000.0, 100_000, true));
    }
}
