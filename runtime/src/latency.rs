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

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use async_trait::async_trait;
use sluice_store::latency::millis;
use sluice_store::{CanaryReading, LatencyBudget, Store, budget_for, canary_key};
use sluice_target::dialect::health::{LatencyQuery, StatementTotals};
use sluice_target::{Cursor, CursorValue, Ident, SqlValue, Statement};

use crate::health::{HealthContext, HealthIndicator, Reading, Scope, Signal};

mod controller;

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

/// Round trips of the burst that measures the idle p99 (their worst: the
/// first sub-batch waits for it, so it stays short).
const BASELINE_SAMPLES: usize = 20;

/// How often a canary re-reads the operators' budgets from the store, and
/// stores its reading on a target apart from the store (each a
/// coordinator statement, a fleet's per target).
const STORE_EVERY: Duration = Duration::from_secs(1);

/// The paces the controller moves between, as percentages of full speed.
pub const LADDER: [u8; 10] = [100, 75, 55, 40, 30, 20, 14, 10, 7, 5];

/// The canary and its controller, as a health indicator: a throttle per
/// table whose canary p99 is over its budget.
#[derive(Default)]
pub struct LatencyCanary {
    tables: Mutex<HashMap<String, TableCanary>>,
    /// The budgets set, as last read, and when.
    budgets: Mutex<Option<(Instant, Budgets)>>,
    /// Where it says what it feels, for the indicators it gates.
    view: CanaryView,
    /// The operator's latency query, held to the budget beside the p99.
    query: Option<LatencyQuery>,
}

/// The latency budgets set, by target (`Store::latency_budgets`).
type Budgets = Vec<(String, LatencyBudget)>;

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

/// One table's latest reading: its p99 now and the budget it is held to.
#[derive(Debug, Clone, Copy)]
struct Felt {
    now: Duration,
    budget: Option<Duration>,
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
    /// on the table has it off).
    pub fn over_budget(&self, table: &str) -> Option<bool> {
        let tables = self.tables.lock().expect("canary view lock");
        let felt = tables.get(table).filter(|f| f.at.elapsed() <= WINDOW)?;
        Some(felt.now > felt.budget?)
    }

    /// Records `table`'s p99 now and the budget it is held to.
    pub fn record(&self, table: &str, now: Duration, budget: Option<Duration>) {
        let mut tables = self.tables.lock().expect("canary view lock");
        tables.insert(
            table.to_owned(),
            Felt {
                now,
                budget,
                at: Instant::now(),
            },
        );
    }
}

/// What the canary keeps about one table.
#[derive(Debug)]
struct TableCanary {
    /// The point read (`None`: the table has no unique key to read by).
    probe: Option<Statement>,
    /// The idle p99, for `auto`: measured at first sight, raised to the
    /// floor the controller finds where slowing down stops lowering it.
    baseline: Duration,
    /// Round trips since the last change of pace.
    samples: VecDeque<(Instant, Duration)>,
    controller: BudgetController,
    /// When its reading was last stored (a target apart from the store).
    stored: Option<Instant>,
    /// The last p99 taken over enough round trips (the idle one at first).
    last: Duration,
    /// The latency the controller last judged the pace by, from at least
    /// [`MIN_SAMPLES`] round trips (the idle p99 at first): what the
    /// housekeeping throttles it gates feel, so that they never hold on
    /// fewer round trips than the controller would act on.
    judged: Duration,
    /// The application's own statements on the table, where the database
    /// counts them.
    statements: StatementWatch,
}

/// The application's statements on one table, from the database's own
/// statistics ([`StatementTotals`]).
#[derive(Debug, Default)]
struct StatementWatch {
    /// The database counts them (found at first sight; never asked again
    /// when it does not).
    counted: bool,
    /// Their mean when the table was first watched, over every statement
    /// since the statistics were reset: the idle value `auto` scales.
    baseline: Option<Duration>,
    /// Readings since the last change of pace, at most [`WINDOW`] old.
    readings: VecDeque<(Instant, StatementTotals)>,
}

impl StatementWatch {
    /// Their mean between the first and the last reading kept.
    fn mean(&self) -> Option<Duration> {
        let (_, first) = self.readings.front()?;
        let (_, last) = self.readings.back()?;
        let ms = last.mean_since(first, MIN_STATEMENT_CALLS)?;
        Some(Duration::from_secs_f64(ms / 1_000.0))
    }

    /// Takes a reading at `now`, dropping those older than [`WINDOW`].
    async fn read(&mut self, store: &Store, table: &str, now: Instant) -> Result<(), String> {
        if !self.counted {
            return Ok(());
        }
        if let Some(totals) = statement_totals(store, table).await? {
            self.readings.push_back((now, totals));
        }
        while self.readings.len() > 1
            && self
                .readings
                .front()
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) > WINDOW)
        {
            self.readings.pop_front();
        }
        Ok(())
    }

    /// Starts a new span at the last reading (after a change of pace).
    fn restart(&mut self) {
        while self.readings.len() > 1 {
            self.readings.pop_front();
        }
    }
}

/// What a table's pace answers to at a poll.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Binding {
    /// The canary's p99.
    Canary,
    /// The operator's latency query.
    Query,
    /// The application's statements: their mean, and what it is held to.
    Statements { mean: Duration, held: Duration },
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
        let budgets = self.budgets(store).await?;
        let queried = match &self.query {
            Some(query) if !context.tables.is_empty() => {
                Some(operator_latency(store, query).await?)
            }
            _ => None,
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
                .filter_map(|b| held_to(b, Some(canary.baseline)))
                .min();
            let statement_budget = held
                .iter()
                .filter_map(|b| held_to(b, canary.statements.baseline))
                .min();
            let signal = canary
                .poll(store, table, budget, queried, statement_budget)
                .await?;
            self.view.record(table, canary.judged, budget);
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
    /// The budgets set, read from the store at most every [`STORE_EVERY`].
    async fn budgets(&self, store: &Store) -> Result<Budgets, String> {
        let mut read = self.budgets.lock().await;
        match read.as_ref() {
            Some((at, budgets)) if at.elapsed() < STORE_EVERY => Ok(budgets.clone()),
            _ => {
                let budgets = store.latency_budgets().await.map_err(|e| e.to_string())?;
                *read = Some((Instant::now(), budgets.clone()));
                Ok(budgets)
            }
        }
    }
}

impl TableCanary {
    /// Finds the table's point read and measures its idle p99 (over at
    /// most [`BASELINE_SAMPLES`] round trips, or a second's worth).
    async fn first_sight(store: &Store, table: &str) -> Result<Self, String> {
        let probe = point_read(store, table).await.map_err(|e| e.to_string())?;
        let mut statements = StatementWatch::default();
        if let Some(totals) = statement_totals(store, table).await? {
            statements.counted = true;
            statements.baseline = totals
                .mean(MIN_STATEMENT_CALLS)
                .map(|ms| Duration::from_secs_f64(ms / 1_000.0));
            statements.readings.push_back((Instant::now(), totals));
        }
        let mut canary = TableCanary {
            probe,
            baseline: Duration::ZERO,
            samples: VecDeque::new(),
            controller: BudgetController::default(),
            stored: None,
            last: Duration::ZERO,
            judged: Duration::ZERO,
            statements,
        };
        let mut burst = Vec::with_capacity(BASELINE_SAMPLES);
        let reading = canary.reading(store, table, None);
        let started = Instant::now();
        while burst.len() < BASELINE_SAMPLES && started.elapsed() < Duration::from_secs(1) {
            burst.push(canary.round_trip(store, &reading).await?);
        }
        canary.baseline = p99(&burst);
        canary.last = canary.baseline;
        canary.judged = canary.baseline;
        Ok(canary)
    }

    /// Takes this poll's round trips and decides the table's pace, on
    /// whichever is further over its budget: their p99, the operator's
    /// latency `queried`, or the application's statements' mean against
    /// `statement_budget`.
    async fn poll(
        &mut self,
        store: &Store,
        table: &str,
        budget: Option<Duration>,
        queried: Option<Duration>,
        statement_budget: Option<Duration>,
    ) -> Result<Signal, String> {
        let now = Instant::now();
        let reading = self.reading(store, table, budget);
        for _ in 0..PER_POLL {
            let took = self.round_trip(store, &reading).await?;
            self.samples.push_back((now, took));
        }
        self.statements.read(store, table, now).await?;
        // On a target apart, the round trips wrote the target's heartbeat;
        // the reading goes to the store untimed, for `show`, at most every
        // [`STORE_EVERY`].
        if store.target_apart().is_some()
            && self.stored.is_none_or(|at| at.elapsed() >= STORE_EVERY)
        {
            store
                .record_canary(&reading)
                .await
                .map_err(|e| e.to_string())?;
            self.stored = Some(Instant::now());
        }
        while self
            .samples
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) > WINDOW)
        {
            self.samples.pop_front();
        }
        let Some(budget) = budget else {
            self.controller = BudgetController::default();
            return Ok(Signal::Normal);
        };
        let trips: Vec<Duration> = self.samples.iter().map(|(_, d)| *d).collect();
        let own = p99(&trips);
        self.last = self.p99_now().unwrap_or(self.last);
        let mut p99 = own;
        let mut binding = Binding::Canary;
        if let Some(queried) = queried.filter(|q| *q > p99) {
            (p99, binding) = (queried, Binding::Query);
        }
        if let Some((mean, held)) = self.statements.mean().zip(statement_budget) {
            // The statements' mean over its own budget, as a latency over
            // the canary's budget by the same ratio.
            let scaled = budget.mul_f64(mean.as_secs_f64() / held.as_secs_f64().max(1e-6));
            if scaled > p99 {
                (p99, binding) = (scaled, Binding::Statements { mean, held });
            }
        }
        if trips.len() >= MIN_SAMPLES {
            self.judged = p99;
        }
        let floor_before = self.controller.floor();
        if trips.len() >= MIN_SAMPLES && self.controller.decide(p99, budget) {
            self.samples.clear();
            self.statements.restart();
            // Slowing down stopped lowering the canary: what is left is the
            // database's own latency now, the idle value `auto` scales.
            if let Some(floor) = self.controller.floor().filter(|_| floor_before.is_none())
                && binding == Binding::Canary
                && floor > self.baseline
            {
                tracing::info!(
                    table,
                    p99 = %millis(floor),
                    was = %millis(self.baseline),
                    "slowing down no longer lowers the canary's p99: its idle value for \
                     `auto` is now this p99"
                );
                self.baseline = floor;
            }
            if self.controller.gave_up() && matches!(binding, Binding::Statements { .. }) {
                tracing::warn!(
                    table,
                    "latency budget let go: slowing down did not lower the mean of the \
                     application's statements on the table; what slows them is not this work"
                );
            } else if self.controller.gave_up() && binding == Binding::Query {
                tracing::warn!(
                    table,
                    latency = %millis(p99),
                    budget = %millis(budget),
                    "latency budget let go: slowing down did not lower the latency query's \
                     figure; what raises it is not this work"
                );
            } else if self.controller.gave_up() {
                tracing::warn!(
                    table,
                    p99 = %millis(p99),
                    budget = %millis(budget),
                    "latency budget let go: slowing down did not lower the canary's p99; \
                     what it waits for is each sub-batch's own length (a smaller \
                     --sub-batch-size shortens it)"
                );
            }
        }
        let signal = match self.controller.percent() {
            100 => Signal::Normal,
            percent => Signal::Throttle {
                percent,
                reason: match binding {
                    Binding::Statements { mean, held } => format!(
                        "latency: the application's statements on {table}, mean {} over a {} \
                         budget",
                        millis(mean),
                        millis(held)
                    ),
                    other => {
                        let what = match other {
                            Binding::Query => "the latency query's",
                            _ => "canary p99",
                        };
                        match self.controller.over.filter(|over| *over > budget) {
                            Some(over) => format!(
                                "latency: {what} {} over a {} budget",
                                millis(over),
                                millis(budget)
                            ),
                            // The budget rose to a floor found since.
                            None => format!(
                                "latency: {what} {} under a {} budget, speeding back up",
                                millis(p99),
                                millis(budget)
                            ),
                        }
                    }
                },
            },
        };
        Ok(signal)
    }

    /// The p99 of the round trips in the window, once there are enough of
    /// them to say more than the last poll's worst.
    fn p99_now(&self) -> Option<Duration> {
        let trips: Vec<Duration> = self.samples.iter().map(|(_, d)| *d).collect();
        (trips.len() >= 2 * PER_POLL).then(|| p99(&trips))
    }

    /// What this poll's writes record: the p99 so far (the last one taken
    /// while too few round trips are in since a change of pace), held to
    /// `budget`.
    fn reading(&self, store: &Store, table: &str, budget: Option<Duration>) -> CanaryReading {
        let trips: Vec<Duration> = self.samples.iter().map(|(_, d)| *d).collect();
        CanaryReading {
            table_name: canary_key(table, store.target_apart()),
            p99_us: micros(self.p99_now().unwrap_or(self.last)),
            budget_us: budget.map(micros),
            samples: trips.len() as i64,
            measured_at: store.clock().now_ms(),
        }
    }

    /// One round trip: the point read, then a one-row write in its own
    /// transaction, timed together. The write is `reading`, into the
    /// store's table when the target is the store's database, else a
    /// heartbeat into the target's `sluice_heartbeat` (the coordinator's
    /// latency is not the target's).
    async fn round_trip(&self, store: &Store, reading: &CanaryReading) -> Result<Duration, String> {
        let started = Instant::now();
        if let Some(probe) = &self.probe {
            store
                .target()
                .fetch_cursor(probe, 1)
                .await
                .map_err(|e| e.to_string())?;
        }
        let written = match store.target_apart() {
            None => store.record_canary(reading).await,
            Some(_) => store
                .target()
                .execute(&crate::replicas::heartbeat(store.clock().now_ms()))
                .await
                .map(drop)
                .map_err(Into::into),
        };
        written.map_err(|e| e.to_string())?;
        Ok(started.elapsed())
    }
}

/// The application's statements on `table` as the target's database counts
/// them; `None` where it does not (or `table` is no plain name).
async fn statement_totals(store: &Store, table: &str) -> Result<Option<StatementTotals>, String> {
    let Ok(ident) = Ident::parse(table) else {
        return Ok(None);
    };
    store
        .target()
        .health()
        .statement_totals(ident.name())
        .await
        .map_err(|e| format!("the statements' statistics cannot be read: {e}"))
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

/// The table's point read: its first unique key's first column equal to
/// its highest value now (a row the work leaves for last, if at all).
/// `None` when the table has no unique key or no row.
async fn point_read(
    store: &Store,
    table: &str,
) -> Result<Option<Statement>, sluice_store::StoreError> {
    let Ok(ident) = Ident::parse(table) else {
        return Ok(None);
    };
    let keys = store.target().table_keys(&ident).await?;
    let Some(column) = keys
        .indexes
        .iter()
        .find(|i| i.unique && !i.columns.is_empty() && !i.columns[0].is_empty())
        .and_then(|i| Ident::parse(&i.columns[0]).ok())
    else {
        return Ok(None);
    };
    let highest = Statement::new("SELECT ")
        .ident(&column)
        .push(" FROM ")
        .ident(&ident)
        .push(" ORDER BY ")
        .ident(&column)
        .push(" DESC LIMIT 1");
    let Some(Cursor(values)) = store.target().fetch_cursor(&highest, 1).await? else {
        return Ok(None);
    };
    let value = match values.into_iter().next() {
        Some(CursorValue::Int(n)) => SqlValue::Int(n),
        Some(CursorValue::Text(t)) => SqlValue::Text(t),
        _ => return Ok(None),
    };
    Ok(Some(
        Statement::new("SELECT ")
            .ident(&column)
            .push(" FROM ")
            .ident(&ident)
            .push(" WHERE ")
            .ident(&column)
            .push(" = ")
            .value(value),
    ))
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
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
        view.record("events", ms(3), Some(ms(2)));
        assert_eq!(view.over_budget("events"), Some(true));
        view.clone().record("events", ms(2), Some(ms(2)));
        assert_eq!(
            view.over_budget("events"),
            Some(false),
            "clones share readings"
        );
        view.record("events", ms(9), None);
        assert_eq!(view.over_budget("events"), None, "no budget");
        assert_eq!(view.over_budget("other"), None);
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
