//! The latency budget: a canary times what the application's queries see
//! on each target table, and a controller paces the table's operations so
//! that the canary's p99 stays within their budget, as fast as it allows.
//!
//! The canary, at every health poll, on a pooled connection no sub-batch
//! holds: a primary-key point read of the target table, then a one-row
//! write of Sluice's in its own transaction (`sluice_canaries`, the
//! reading itself; on a target apart from the store, the target's
//! `sluice_heartbeat`, the reading then stored once a poll), timed end to
//! end — a commit is what a purge slows first.
//! Its p99 is taken over the round trips since the controller last
//! changed the pace (at most [`WINDOW`]), so a decision never reads
//! latencies the previous pace caused.
//!
//! The budget: the strictest of the table's operations' budgets
//! ([`LatencyBudget`]). `auto` is the p99 of a burst of round trips when a
//! table is first watched (again after its operations all stopped) × 1.5,
//! and at least 1 ms above it.
//!
//! Where the database counts its statements (PostgreSQL with
//! `pg_stat_statements`), the application's own statements on the table
//! (those of roles other than the worker's) are held to the budget too:
//! their mean over the same span as the canary's p99, against the budget
//! (`auto`: × 1.5 their mean when first watched). The pace follows whichever
//! is further over.
//!
//! The budget protects the application's queries: while no session of the
//! application's has run a statement on the server for
//! [`APPLICATION_WITHIN`] (where the database can tell its sessions from
//! Sluice's: `HealthQueries::application_sessions`), nothing waits for the
//! work to go slower, and the budget holds no pace. The canary then takes
//! one round trip a poll (its reading and, on a target apart, the
//! heartbeat stay fresh), and the first poll that sees a session again
//! takes a burst, so the pace is judged at once on the latency the work
//! causes.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use async_trait::async_trait;
use sluice_store::{LatencyBudget, Store, budget_for};
use sluice_target::dialect::health::LatencyQuery;

use crate::health::{HealthContext, HealthIndicator, Reading, Scope};

mod controller;
mod table;

use table::TableCanary;

pub use controller::BudgetController;

/// The indicator's id (`--without-indicator latency-budget` turns the
/// budget off for every operation on the worker).
pub const ID: &str = "latency-budget";

/// The longest span of round trips a p99 is taken over.
pub const WINDOW: Duration = Duration::from_secs(8);

/// Round trips a decision needs since the last change: enough that their
/// p99 is not simply the worst of them.
pub const MIN_SAMPLES: usize = 100;

/// Round trips per poll.
pub const PER_POLL: usize = 8;

/// Statements of the application a mean needs, over a span or since the
/// statistics were reset (for `auto`'s idle value).
const MIN_STATEMENT_CALLS: f64 = 20.0;

/// Round trips of the burst that measures the idle p99: as many as a
/// decision's p99 takes, so that one slow round trip is not the idle value
/// (of 20, the p99 was their worst).
const BASELINE_SAMPLES: usize = MIN_SAMPLES;

/// The longest the idle burst takes (the first sub-batch waits for it):
/// on a database slower than 2.5 ms a round trip, the p99 of fewer.
const BASELINE_WITHIN: Duration = Duration::from_millis(250);

/// How often a canary re-reads the operators' budgets from the store, and
/// stores its reading on a target apart from the store (each a
/// coordinator statement, a fleet's per target).
const STORE_EVERY: Duration = Duration::from_secs(1);

/// How recently a session of the application's must have run a statement
/// for the budget to pace the work: long enough that an application
/// between two requests still counts as there.
pub const APPLICATION_WITHIN: Duration = Duration::from_secs(30);

/// The paces the controller moves between, as percentages of full speed.
pub const LADDER: [u8; 10] = [100, 75, 55, 40, 30, 20, 14, 10, 7, 5];

/// The canary and its controller, as a health indicator: a throttle per
/// table whose canary p99 is over its budget.
#[derive(Default)]
pub struct LatencyCanary {
    tables: Mutex<HashMap<String, TableCanary>>,
    /// The budgets set, as last read, when, and the operations watched
    /// then.
    budgets: Mutex<Option<BudgetsRead>>,
    /// Where it says what it feels, for the indicators it gates.
    view: CanaryView,
    /// The operator's latency query, held to the budget beside the p99.
    query: Option<LatencyQuery>,
    /// Whether the last poll saw a session of the application's.
    application: Mutex<Option<bool>>,
}

/// The latency budgets set, by target (`Store::latency_budgets`).
type Budgets = Vec<(String, LatencyBudget)>;

/// One read of the budgets.
struct BudgetsRead {
    at: Instant,
    budgets: Budgets,
    /// The operations watched when they were read: one watched since may
    /// have a budget of its own the read predates.
    operations: std::collections::BTreeSet<i64>,
}

impl BudgetsRead {
    /// Whether it still answers for `operations` now: read within
    /// [`STORE_EVERY`], and after each of them was watched (a new
    /// operation's own budget, `off` say, holds from its first poll).
    fn answers_for(&self, operations: &[crate::health::Watched]) -> bool {
        self.at.elapsed() < STORE_EVERY
            && operations.iter().all(|o| self.operations.contains(&o.id))
    }
}

/// What the canary feels on each table lately, shared with the indicators
/// whose throttles answer the database's own housekeeping (autovacuum,
/// cleanup debt: `TableActivity`): they hold only while the canary's p99
/// is over the table's latency budget, so housekeeping that keeps the
/// application's queries within what the operator accepts costs the work
/// no speed. Cheap to clone; clones share the readings.
#[derive(Debug, Clone, Default)]
pub struct CanaryView {
    tables: Arc<std::sync::Mutex<HashMap<String, Felt>>>,
}

/// One table's latest reading: its p99 now, the budget it is held to, and
/// whether a session of the application's was there to feel it.
#[derive(Debug, Clone, Copy)]
struct Felt {
    now: Duration,
    budget: Option<Duration>,
    application: bool,
    at: Instant,
}

impl CanaryView {
    /// A view with no reading yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the latency the canary's controller last judged `table` by
    /// (its p99 over at least [`MIN_SAMPLES`] round trips, or what binds
    /// beside it; the idle p99 until then) is over its latency budget:
    /// `None` without a reading from the last [`WINDOW`] (no canary runs,
    /// or it cannot read the table) or without a budget (every operation
    /// on the table has it off); never over while no session of the
    /// application's is there to feel it.
    pub fn over_budget(&self, table: &str) -> Option<bool> {
        let tables = self.tables.lock().expect("canary view lock");
        let felt = tables.get(table).filter(|f| f.at.elapsed() <= WINDOW)?;
        let budget = felt.budget?;
        Some(felt.application && felt.now > budget)
    }

    /// Records `table`'s p99 now, the budget it is held to, and whether a
    /// session of the application's was seen (`application`).
    pub fn record(&self, table: &str, now: Duration, budget: Option<Duration>, application: bool) {
        let mut tables = self.tables.lock().expect("canary view lock");
        tables.insert(
            table.to_owned(),
            Felt {
                now,
                budget,
                application,
                at: Instant::now(),
            },
        );
    }
}

impl LatencyCanary {
    /// A canary watching no table yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A canary that says what it feels in `view`.
    pub fn with_view(view: CanaryView) -> Self {
        LatencyCanary {
            view,
            ..Self::default()
        }
    }

    /// This canary, also running the operator's latency `query` at every
    /// poll: the budget binds on the higher of the canary's p99 and the
    /// query's figure.
    pub fn with_query(self, query: Option<LatencyQuery>) -> Self {
        LatencyCanary { query, ..self }
    }
}

#[async_trait]
impl HealthIndicator for LatencyCanary {
    fn name(&self) -> &str {
        "latency budget"
    }

    fn id(&self) -> &str {
        ID
    }

    async fn check(&self, context: &HealthContext) -> Result<Vec<Reading>, String> {
        let store = &context.store;
        let budgets = self.budgets(store, &context.operations).await?;
        let queried = match &self.query {
            Some(query) if !context.tables.is_empty() => {
                Some(operator_latency(store, query).await?)
            }
            _ => None,
        };
        let application = match context.tables.is_empty() {
            true => true,
            false => self.application_seen(store).await,
        };
        // Held across the round trips: a check cut short by the monitor's
        // time limit leaves every table's state as far as it got.
        let mut known = self.tables.lock().await;
        known.retain(|table, _| context.tables.contains(table));
        let mut readings = Vec::new();
        for table in &context.tables {
            if !known.contains_key(table) {
                let canary = TableCanary::first_sight(store, table).await?;
                known.insert(table.clone(), canary);
            }
            let canary = known.get_mut(table).expect("inserted above");
            let held: Vec<LatencyBudget> = context
                .operations
                .iter()
                .filter(|o| &o.table == table)
                .map(|o| budget_for(&budgets, o.id, &o.kind))
                .collect();
            let budget = held
                .iter()
                .filter_map(|b| held_to(b, Some(canary.idle())))
                .min();
            let statement_budget = held
                .iter()
                .filter_map(|b| held_to(b, canary.statements_idle()))
                .min();
            // With no one to feel it, no budget binds (the canary still
            // times its round trips, for the first poll that sees someone).
            let applied = budget.filter(|_| application);
            let signal = canary
                .poll(
                    store,
                    table,
                    applied,
                    application,
                    queried,
                    statement_budget,
                )
                .await?;
            self.view
                .record(table, canary.judged(), budget, application);
            readings.push(Reading {
                scope: Scope::Table(table.clone()),
                signal,
            });
        }
        Ok(readings)
    }

    async fn readable(&self, store: &Store) -> Result<(), String> {
        match &self.query {
            Some(query) => operator_latency(store, query).await.map(drop),
            None => Ok(()),
        }
    }
}

/// The latency a table is held to under `budget`, when the idle latency
/// `auto` scales is `idle`; `None` when off (or `auto` with no idle value).
fn held_to(budget: &LatencyBudget, idle: Option<Duration>) -> Option<Duration> {
    match budget {
        LatencyBudget::Off => None,
        LatencyBudget::Fixed(p99) => Some(*p99),
        LatencyBudget::Auto => idle.map(auto_budget),
    }
}

/// The operator's latency `query` on `store`'s target: its number of
/// milliseconds, or why there is none.
async fn operator_latency(store: &Store, query: &LatencyQuery) -> Result<Duration, String> {
    let ms = store
        .target()
        .health()
        .latency_ms(query)
        .await
        .map_err(|e| format!("the latency query `{}` failed: {e}", query.as_str()))?;
    match ms {
        Some(ms) if (0.0..3_600_000.0).contains(&ms) => Ok(Duration::from_secs_f64(ms / 1_000.0)),
        Some(ms) => Err(format!(
            "the latency query `{}` returned {ms}, not a latency in milliseconds",
            query.as_str()
        )),
        None => Err(format!(
            "the latency query `{}` returned no number of milliseconds (it must return \
             one row whose first column is a number: cast it to a floating-point type)",
            query.as_str()
        )),
    }
}

impl LatencyCanary {
    /// Whether a session of the application's ran a statement on `store`'s
    /// target within [`APPLICATION_WITHIN`]; true where the database cannot
    /// tell, or the question fails (the budget then stays in force). Says
    /// so in the log when it changes.
    async fn application_seen(&self, store: &Store) -> bool {
        let sessions = store
            .target()
            .health()
            .application_sessions(APPLICATION_WITHIN)
            .await;
        let seen = match sessions {
            Ok(Some(sessions)) => !sessions.is_empty(),
            Ok(None) => true,
            Err(e) => {
                tracing::debug!(error = %e, "the application's sessions cannot be read: the latency budget stays in force");
                true
            }
        };
        let mut last = self.application.lock().await;
        if *last != Some(seen) {
            match (seen, last.is_some()) {
                (false, _) => tracing::info!(
                    within = ?APPLICATION_WITHIN,
                    "no session of the application's ran a statement lately: the latency \
                     budget holds no pace until one does"
                ),
                (true, true) => tracing::info!(
                    "a session of the application's ran a statement: the latency budget \
                     paces the work again"
                ),
                (true, false) => {}
            }
            *last = Some(seen);
        }
        seen
    }

    /// The budgets set, read from the store at most every [`STORE_EVERY`],
    /// and again at once when one of `operations` is new since.
    async fn budgets(
        &self,
        store: &Store,
        operations: &[crate::health::Watched],
    ) -> Result<Budgets, String> {
        let mut read = self.budgets.lock().await;
        match read.as_ref() {
            Some(last) if last.answers_for(operations) => Ok(last.budgets.clone()),
            _ => {
                let budgets = store.latency_budgets().await.map_err(|e| e.to_string())?;
                *read = Some(BudgetsRead {
                    at: Instant::now(),
                    budgets: budgets.clone(),
                    operations: operations.iter().map(|o| o.id).collect(),
                });
                Ok(budgets)
            }
        }
    }
}

/// The budget `auto` sets over an idle p99 of `baseline`: ×1.5, and at
/// least 1 ms above it.
pub fn auto_budget(baseline: Duration) -> Duration {
    baseline
        .mul_f64(1.5)
        .max(baseline + Duration::from_millis(1))
}

/// The nearest-rank 99th percentile of `samples` (zero when empty).
pub fn p99(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() as f64 * 0.99).ceil() as usize;
    sorted
        .get(rank.saturating_sub(1))
        .copied()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_view_says_whether_the_canary_is_over_its_budget() {
        let view = CanaryView::new();
        assert_eq!(view.over_budget("events"), None, "no reading");
        view.record("events", ms(3), Some(ms(2)), true);
        assert_eq!(view.over_budget("events"), Some(true));
        view.clone().record("events", ms(2), Some(ms(2)), true);
        assert_eq!(
            view.over_budget("events"),
            Some(false),
            "clones share readings"
        );
        view.record("events", ms(9), None, true);
        assert_eq!(view.over_budget("events"), None, "no budget");
        assert_eq!(view.over_budget("other"), None);
        view.record("events", ms(9), Some(ms(2)), false);
        assert_eq!(
            view.over_budget("events"),
            Some(false),
            "no application there to feel it"
        );
    }

    #[test]
    fn budgets_are_read_again_for_an_operation_watched_since() {
        let watched = |id: i64| crate::health::Watched {
            id,
            kind: "delete-aged-rows".into(),
            table: "events".into(),
        };
        let read = BudgetsRead {
            at: Instant::now(),
            budgets: Vec::new(),
            operations: [1].into(),
        };
        assert!(read.answers_for(&[watched(1)]));
        assert!(read.answers_for(&[]));
        assert!(!read.answers_for(&[watched(1), watched(2)]));
        let old = BudgetsRead {
            at: Instant::now() - STORE_EVERY,
            ..read
        };
        assert!(!old.answers_for(&[watched(1)]));
    }

    #[test]
    fn p99_is_the_nearest_rank() {
        assert_eq!(p99(&[]), Duration::ZERO);
        let hundred: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(p99(&hundred), ms(99));
        let few = [ms(3), ms(1), ms(2)];
        assert_eq!(p99(&few), ms(3));
    }

    #[test]
    fn auto_is_half_again_and_at_least_a_millisecond_more() {
        assert_eq!(
            auto_budget(Duration::from_micros(400)),
            Duration::from_micros(1_400)
        );
        assert_eq!(auto_budget(ms(4)), ms(6));
    }
}
