//! One target table under the canary ([`TableCanary`]): its point read,
//! the round trips each poll times, the p99 over them, the application's
//! statements where the database counts them, and the controller that
//! turns them into the table's pace.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use sluice_store::latency::millis;
use sluice_store::{CanaryReading, Store, canary_key};
use sluice_target::dialect::health::StatementTotals;
use sluice_target::{Cursor, CursorValue, Ident, SqlValue, Statement};

use super::{
    BASELINE_SAMPLES, BASELINE_WITHIN, BudgetController, MIN_SAMPLES, MIN_STATEMENT_CALLS,
    PER_POLL, STORE_EVERY, WINDOW, p99,
};
use crate::health::Signal;

/// What the canary keeps about one table.
#[derive(Debug)]
pub(super) struct TableCanary {
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
    /// Whether the last poll saw a session of the application's.
    application: bool,
    /// Polls taken since first sight.
    polls: u64,
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

impl TableCanary {
    /// The idle p99 `auto` scales.
    pub(super) fn idle(&self) -> Duration {
        self.baseline
    }

    /// The application's statements' idle mean, where they are counted.
    pub(super) fn statements_idle(&self) -> Option<Duration> {
        self.statements.baseline
    }

    /// The latency the controller last judged the pace by.
    pub(super) fn judged(&self) -> Duration {
        self.judged
    }

    /// Finds the table's point read and measures its idle p99 (over at
    /// most [`BASELINE_SAMPLES`] round trips, or [`BASELINE_WITHIN`]'s worth).
    pub(super) async fn first_sight(store: &Store, table: &str) -> Result<Self, String> {
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
            application: true,
            polls: 0,
        };
        let mut burst = Vec::with_capacity(BASELINE_SAMPLES);
        let reading = canary.reading(store, table, None);
        let started = Instant::now();
        while burst.len() < BASELINE_SAMPLES && started.elapsed() < BASELINE_WITHIN {
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
    ///
    /// With no session of the application's (`application` false) it takes
    /// one round trip. On the poll that sees one again, and on the first
    /// poll after first sight (the first the work runs under: the first
    /// poll answers before any sub-batch starts), as many more as a
    /// decision needs (within [`BASELINE_WITHIN`]): the pace is judged on
    /// what the application meets now, not seconds later, so a short purge
    /// is paced from its first quarter second.
    pub(super) async fn poll(
        &mut self,
        store: &Store,
        table: &str,
        budget: Option<Duration>,
        application: bool,
        queried: Option<Duration>,
        statement_budget: Option<Duration>,
    ) -> Result<Signal, String> {
        let now = Instant::now();
        let reading = self.reading(store, table, budget);
        let arrived = application && (!self.application || self.polls == 1);
        self.application = application;
        self.polls += 1;
        let trips = match (application, arrived) {
            (false, _) => 1,
            (true, false) => PER_POLL,
            (true, true) => MIN_SAMPLES.saturating_sub(self.samples.len()).max(PER_POLL),
        };
        let started = Instant::now();
        for taken in 0..trips {
            if taken >= PER_POLL && started.elapsed() >= BASELINE_WITHIN {
                break;
            }
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
