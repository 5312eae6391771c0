//! Database health: the indicator trait, the signals, and the
//! [`HealthMonitor`] actor that polls indicators and broadcasts what
//! operations must do.
//!
//! A signal is [`Signal::Normal`], [`Signal::Throttle`] (a speed percentage
//! and a reason) or [`Signal::Stop`] (a reason), for every table
//! ([`Scope::Global`]) or one table. An operation obeys the worst of the
//! global signal and its table's.
//!
//! Hysteresis: a worse signal takes effect at the poll that sees it; a
//! better one only after it has been seen on `clear_after` consecutive polls,
//! so a reading hovering at a threshold does not flap. Built-in indicators
//! add a second guard: once over a threshold, a value must fall clearly
//! below it ([`Thresholds`]) before the indicator lets go.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ractor::{Actor, ActorProcessingErr, ActorRef, OutputPort};
use sluice_store::Store;

/// What operations must do about database health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// Full speed.
    Normal,
    /// Slow down to `percent` of the unthrottled pace (waits between
    /// sub-batches; sizes unchanged).
    Throttle {
        /// Speed as a percentage of normal, 1 to 99.
        percent: u8,
        /// Why, for the event log and the progress display.
        reason: String,
    },
    /// Start no new sub-batch until the signal clears (in-flight ones finish).
    Stop {
        /// Why.
        reason: String,
    },
}

/// Which operations a reading is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Every operation.
    Global,
    /// Operations on this table (as named in the operation).
    Table(String),
}

/// One indicator's verdict for one scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// What it is about.
    pub scope: Scope,
    /// What to do.
    pub signal: Signal,
}

/// What an indicator may look at: the store's database, the tables the
/// running operations work on, and those operations.
#[derive(Debug, Clone)]
pub struct HealthContext {
    /// The store (and through it, the database).
    pub store: Store,
    /// Target tables of the operations running on this node.
    pub tables: Vec<String>,
    /// The operations running on this node (each once).
    pub operations: Vec<Watched>,
}

/// An operation running on this node, as the monitor watches it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Watched {
    /// Its id.
    pub id: i64,
    /// Its kind.
    pub kind: String,
    /// Its target table, as the operation names it.
    pub table: String,
}

/// A source of health readings. Implement it for an application's own
/// signal, or wrap an async closure with [`indicator_fn`].
#[async_trait]
pub trait HealthIndicator: Send + Sync + 'static {
    /// A short name for logs.
    fn name(&self) -> &str;

    /// The name that turns it off (`sluice run --without-indicator ID`,
    /// [`crate::RuntimeBuilder::without_indicator`]); by default its name.
    fn id(&self) -> &str {
        self.name()
    }

    /// The current readings. An error never reads as normal: the health of
    /// every operation is unknown, throttled to [`UNKNOWN_THROTTLE_PERCENT`]
    /// at once and stopped after [`UNKNOWN_STOP_AFTER`] failed polls in a
    /// row, until the indicator reads again.
    async fn check(&self, context: &HealthContext) -> Result<Vec<Reading>, String>;

    /// Whether this worker can read it at all; the error says what is
    /// missing (a privilege, and the grant that gives it). A runtime does
    /// not start with a built-in indicator it cannot read. By default `Ok`.
    async fn readable(&self, _store: &Store) -> Result<(), String> {
        Ok(())
    }
}

/// Speed while an indicator cannot be read, as a percentage: an unknown
/// health never reads as normal.
pub const UNKNOWN_THROTTLE_PERCENT: u8 = 50;

/// Failed polls in a row of one indicator after which every operation
/// stops until it reads again.
pub const UNKNOWN_STOP_AFTER: u32 = 3;

/// The signal while `indicator` has failed `failures` polls in a row, the
/// last with `error`: throttled, then stopped. Its reason starts with
/// `health unknown`, which `show`, `list` and the console display as such.
pub fn unknown_health(indicator: &str, failures: u32, error: &str) -> Signal {
    if failures >= UNKNOWN_STOP_AFTER {
        Signal::Stop {
            reason: format!(
                "health unknown: {indicator} has not been read for {failures} polls ({error})"
            ),
        }
    } else {
        Signal::Throttle {
            percent: UNKNOWN_THROTTLE_PERCENT,
            reason: format!("health unknown: {indicator} cannot be read ({error})"),
        }
    }
}

/// The signals in force: global and per table. Operations receive it
/// whenever it changes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HealthSnapshot {
    /// For every operation.
    pub global: Option<Signal>,
    /// For operations on one table.
    pub tables: BTreeMap<String, Signal>,
}

/// The health-signal actor.
#[derive(Debug)]
pub struct HealthMonitor;

/// Arguments of [`HealthMonitor`].
pub struct HealthMonitorArgs {
    /// The store.
    pub store: Store,
    /// Indicators polled in order.
    pub indicators: Vec<Arc<dyn HealthIndicator>>,
    /// Time between polls.
    pub interval: Duration,
    /// Consecutive polls a better signal must be seen before it takes effect.
    pub clear_after: u32,
    /// Where changed snapshots are published.
    pub port: Arc<OutputPort<HealthSnapshot>>,
}

/// Messages of [`HealthMonitor`].
#[derive(Debug)]
pub enum HealthMessage {
    /// Poll the indicators now.
    Poll,
    /// An operation's actor (its owner's or a helper's) started here.
    Watch(Watched),
    /// One of its actors stopped here.
    Unwatch(Watched),
}

/// The monitor's state.
pub struct HealthState {
    args: HealthMonitorArgs,
    /// Actors running here, by operation.
    watched: HashMap<Watched, usize>,
    in_force: HashMap<Scope, Signal>,
    better_seen: HashMap<Scope, (Signal, u32)>,
    published: HealthSnapshot,
    /// Whether a poll has completed: the first one is always published, so
    /// operations waiting for a first reading learn it even when all is well.
    polled: bool,
    /// Failed polls in a row, by indicator.
    failures: HashMap<String, u32>,
}

impl Actor for HealthMonitor {
    type Msg = HealthMessage;
    type State = HealthState;
    type Arguments = HealthMonitorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: HealthMonitorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        // Re-armed once handled (not `send_interval`): a slow poll never
        // leaves polls queued behind it.
        myself.send_after(args.interval, || HealthMessage::Poll);
        Ok(HealthState {
            args,
            watched: HashMap::new(),
            in_force: HashMap::new(),
            better_seen: HashMap::new(),
            published: HealthSnapshot::default(),
            polled: false,
            failures: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: HealthMessage,
        state: &mut HealthState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            HealthMessage::Watch(operation) => {
                let new_table = !state.watched.keys().any(|w| w.table == operation.table);
                *state.watched.entry(operation).or_default() += 1;
                // A newcomer learns the signals in force at once; a new table
                // is read first, so its own indicators count from the start.
                if new_table || !state.polled {
                    state.poll().await;
                }
                state.args.port.send(state.published.clone());
            }
            HealthMessage::Unwatch(operation) => {
                if let Some(n) = state.watched.get_mut(&operation) {
                    *n -= 1;
                    if *n == 0 {
                        state.watched.remove(&operation);
                    }
                }
            }
            HealthMessage::Poll => {
                state.poll().await;
                myself.send_after(state.args.interval, || HealthMessage::Poll);
            }
        }
        Ok(())
    }
}

impl HealthState {
    async fn poll(&mut self) {
        let mut tables: Vec<String> = self.watched.keys().map(|w| w.table.clone()).collect();
        tables.sort();
        tables.dedup();
        let context = HealthContext {
            store: self.args.store.clone(),
            tables,
            operations: self.watched.keys().cloned().collect(),
        };
        let mut raw: HashMap<Scope, Signal> = HashMap::new();
        for indicator in &self.args.indicators {
            let checked =
                tokio::time::timeout(Duration::from_secs(2), indicator.check(&context)).await;
            let name = indicator.name();
            let error = match checked {
                Ok(Ok(readings)) => {
                    if self.failures.remove(name).is_some() {
                        tracing::info!(indicator = name, "health indicator reads again");
                    }
                    for reading in readings {
                        let slot = raw.entry(reading.scope).or_insert(Signal::Normal);
                        *slot = worst(slot, &reading.signal);
                    }
                    continue;
                }
                Ok(Err(error)) => error,
                Err(_) => "no answer within 2 s".to_owned(),
            };
            let failures = self.failures.entry(name.to_owned()).or_default();
            *failures += 1;
            // Logged when it starts failing and when it stops the work, not
            // at every poll.
            if *failures == 1 || *failures == UNKNOWN_STOP_AFTER {
                tracing::warn!(indicator = name, %error, failures = *failures, "health indicator cannot be read");
            }
            let signal = unknown_health(name, *failures, &error);
            let slot = raw.entry(Scope::Global).or_insert(Signal::Normal);
            *slot = worst(slot, &signal);
        }
        // Each scope once: a scope both read now and in force must be settled
        // once, with this poll's reading (settling it twice would count a
        // missing second reading as a better one).
        let scopes: std::collections::HashSet<Scope> =
            raw.keys().chain(self.in_force.keys()).cloned().collect();
        for scope in scopes {
            let seen = raw.remove(&scope).unwrap_or(Signal::Normal);
            self.settle(scope, seen);
        }
        let snapshot = HealthSnapshot {
            global: self.in_force.get(&Scope::Global).cloned(),
            tables: self
                .in_force
                .iter()
                .filter_map(|(scope, signal)| match scope {
                    Scope::Table(t) => Some((t.clone(), signal.clone())),
                    Scope::Global => None,
                })
                .collect(),
        };
        if snapshot != self.published || !self.polled {
            tracing::info!(?snapshot, "health signals changed");
            self.polled = true;
            self.published = snapshot.clone();
            self.args.port.send(snapshot);
        }
    }

    /// Applies the hysteresis rule to one scope.
    fn settle(&mut self, scope: Scope, seen: Signal) {
        let current = self.in_force.get(&scope).cloned().unwrap_or(Signal::Normal);
        if severity(&seen) < severity(&current) {
            let count = match self.better_seen.get(&scope) {
                Some((signal, n)) if *signal == seen => n + 1,
                _ => 1,
            };
            if count < self.args.clear_after {
                self.better_seen.insert(scope, (seen, count));
                return;
            }
        }
        self.better_seen.remove(&scope);
        if seen == Signal::Normal {
            self.in_force.remove(&scope);
        } else {
            self.in_force.insert(scope, seen);
        }
    }
}

impl HealthSnapshot {
    /// The signal an operation on `table` obeys: the worse of the global one and its table's.
    pub fn for_table(&self, table: &str) -> Signal {
        let global = self.global.clone().unwrap_or(Signal::Normal);
        match self.tables.get(table) {
            Some(signal) => worst(&global, signal),
            None => global,
        }
    }
}

/// Wraps an async closure as an indicator whose signal applies to every
/// operation.
///
/// ```
/// use sluice_runtime::health::{indicator_fn, Signal};
/// let quiet_hours = indicator_fn("office-hours", || async {
///     Signal::Throttle { percent: 50, reason: "office hours".into() }
/// });
/// # let _ = quiet_hours;
/// ```
pub fn indicator_fn<F, Fut>(name: &str, check: F) -> Arc<dyn HealthIndicator>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Signal> + Send + 'static,
{
    Arc::new(FnIndicator {
        name: name.to_owned(),
        check: Box::new(move || Box::pin(check())),
    })
}

type BoxedCheck = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Signal> + Send>> + Send + Sync>;

struct FnIndicator {
    name: String,
    check: BoxedCheck,
}

#[async_trait]
impl HealthIndicator for FnIndicator {
    fn name(&self) -> &str {
        &self.name
    }

    async fn check(&self, _: &HealthContext) -> Result<Vec<Reading>, String> {
        Ok(vec![Reading {
            scope: Scope::Global,
            signal: (self.check)().await,
        }])
    }
}

/// Maps a measured value to a signal with threshold hysteresis: throttle at
/// `throttle_at`, stop at `stop_at`, and leave a state only once the value
/// is below `release` × its threshold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Value from which operations slow down.
    pub throttle_at: f64,
    /// Value from which operations stop.
    pub stop_at: f64,
    /// Fraction of a threshold the value must fall under to leave its state.
    pub release: f64,
}

impl Thresholds {
    /// The signal for `value`, given the signal this indicator gave last time.
    /// Throttle speed falls linearly from 50 % at `throttle_at` to 10 % near `stop_at`.
    pub fn classify(&self, value: f64, previous: &Signal, what: &str) -> Signal {
        let stop_line = match previous {
            Signal::Stop { .. } => self.stop_at * self.release,
            _ => self.stop_at,
        };
        let throttle_line = match previous {
            Signal::Normal => self.throttle_at,
            _ => self.throttle_at * self.release,
        };
        if value >= stop_line {
            Signal::Stop {
                reason: format!("{what} {value:.0} ≥ {:.0}", self.stop_at),
            }
        } else if value >= throttle_line {
            let span = (self.stop_at - self.throttle_at).max(f64::EPSILON);
            let depth = ((value - self.throttle_at) / span).clamp(0.0, 1.0);
            Signal::Throttle {
                percent: (50.0 - 40.0 * depth).round() as u8,
                reason: format!("{what} {value:.0} ≥ {:.0}", self.throttle_at),
            }
        } else {
            Signal::Normal
        }
    }
}

/// The worse of two signals (stop over throttle over normal; the slower throttle).
pub fn worst(a: &Signal, b: &Signal) -> Signal {
    if severity(b) > severity(a) {
        b.clone()
    } else {
        a.clone()
    }
}

fn severity(signal: &Signal) -> u32 {
    match signal {
        Signal::Normal => 0,
        Signal::Throttle { percent, .. } => 200 - u32::from(*percent),
        Signal::Stop { .. } => 1_000,
    }
}

#[cfg(test)]
mod tests;
