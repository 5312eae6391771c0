//! Built-in health indicators.
//!
//! PostgreSQL: long-running transactions, lock waits on target tables,
//! autovacuum on target tables, cleanup debt (dead rows autovacuum has not
//! caught up with) on target tables, replication lag of connected replicas
//! (none connected: silent), connection saturation. SQLite: the write-ahead log's
//! un-checkpointed backlog (a growing WAL means writers outpace checkpoints).
//! MySQL and MariaDB: long-running transactions and lock waits on target
//! tables (from InnoDB's status report), `Threads_running`, and InnoDB's
//! history list length (purge lag).
//! Each reads system views with static SQL; thresholds are plain fields.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sluice_store::Store;
use sluice_target::Ident;
pub use sluice_target::dialect::health::Measure;
use sluice_target::dialect::health::{InnodbReport, LatencyQuery};

use crate::health::{HealthContext, HealthIndicator, Reading, Scope, Signal, Thresholds};
use crate::innodb_status::InnodbTransactions;
use crate::latency::CanaryView;

mod table_activity;

pub use table_activity::TableActivity;

/// The built-in indicators for the store's target database (the store's
/// own, or a target apart from it: [`sluice_store::Store::on_target`]),
/// with default thresholds, and the latency canary, which gates the
/// table-activity throttles.
pub fn default_indicators(store: &Store) -> Vec<Arc<dyn HealthIndicator>> {
    indicators_with_query(store, None)
}

/// [`default_indicators`], the canary also holding the operator's latency
/// `query` to the budget ([`crate::RuntimeBuilder::latency_query`]).
pub fn indicators_with_query(
    store: &Store,
    query: Option<LatencyQuery>,
) -> Vec<Arc<dyn HealthIndicator>> {
    let view = CanaryView::new();
    let mut indicators = backend_indicators(store, &view);
    let canary = crate::latency::LatencyCanary::with_view(view).with_query(query);
    indicators.push(Arc::new(canary));
    indicators
}

/// The indicators that read the database's own reports, in the order
/// the database lists its measures.
fn backend_indicators(store: &Store, view: &CanaryView) -> Vec<Arc<dyn HealthIndicator>> {
    let health = store.target().health();
    let mut indicators: Vec<Arc<dyn HealthIndicator>> = Vec::new();
    if health.has_innodb_report() {
        indicators.push(Arc::new(InnodbActivity::new(LONGEST_TRANSACTION)));
    }
    for measure in health.measures() {
        indicators.push(Arc::new(ValueIndicator::new(
            *measure,
            default_thresholds(*measure),
        )));
    }
    if health.has_table_activity() {
        indicators.push(Arc::new(TableActivity::new().gated_by(view.clone())));
    }
    indicators
}

/// Each measure's default thresholds.
fn default_thresholds(measure: Measure) -> Thresholds {
    match measure {
        Measure::LongestTransactionSeconds => LONGEST_TRANSACTION,
        Measure::ReplicationLagSeconds => Thresholds {
            throttle_at: 5.0,
            stop_at: 30.0,
            release: 0.6,
        },
        Measure::ConnectionsUsedPercent => Thresholds {
            throttle_at: 80.0,
            stop_at: 95.0,
            release: 0.9,
        },
        Measure::MySqlThreadsRunning => Thresholds {
            throttle_at: 25.0,
            stop_at: 50.0,
            release: 0.8,
        },
        Measure::MySqlHistoryListLength => Thresholds {
            throttle_at: 1_000_000.0,
            stop_at: 5_000_000.0,
            release: 0.5,
        },
        Measure::SqliteWalBacklogPages => Thresholds {
            throttle_at: 20_000.0,
            stop_at: 80_000.0,
            release: 0.5,
        },
    }
}

/// Long-running transactions: throttled past a minute, stopped past five.
const LONGEST_TRANSACTION: Thresholds = Thresholds {
    throttle_at: 60.0,
    stop_at: 300.0,
    release: 0.8,
};

/// A global indicator from one measured value and its thresholds.
pub struct ValueIndicator {
    measure: Measure,
    thresholds: Thresholds,
    previous: Mutex<Signal>,
}

impl ValueIndicator {
    /// Measures `measure` against `thresholds`.
    pub fn new(measure: Measure, thresholds: Thresholds) -> Self {
        ValueIndicator {
            measure,
            thresholds,
            previous: Mutex::new(Signal::Normal),
        }
    }

    async fn measure(&self, store: &Store) -> Result<Option<f64>, sqlx::Error> {
        store.target().health().measure(self.measure).await
    }
}

#[async_trait]
impl HealthIndicator for ValueIndicator {
    fn id(&self) -> &str {
        self.measure.id()
    }

    async fn readable(&self, store: &Store) -> Result<(), String> {
        if self.measure.needs_all_stats() {
            sees_all_sessions(store).await?;
        }
        match self.measure(store).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err("the database answers nothing for it".into()),
            Err(error) => Err(unreadable(store, &error).await),
        }
    }

    fn name(&self) -> &str {
        match self.measure {
            Measure::LongestTransactionSeconds => "long-running transactions",
            Measure::ReplicationLagSeconds => "replication lag",
            Measure::ConnectionsUsedPercent => "connection saturation",
            Measure::SqliteWalBacklogPages => "WAL backlog",
            Measure::MySqlThreadsRunning => "threads running",
            Measure::MySqlHistoryListLength => "InnoDB history list length",
        }
    }

    async fn check(&self, context: &HealthContext) -> Result<Vec<Reading>, String> {
        let Some(value) = self
            .measure(&context.store)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Err("the database answered nothing".into());
        };
        let mut previous = self.previous.lock().expect("indicator state lock");
        let signal = self.thresholds.classify(value, &previous, self.name());
        *previous = signal.clone();
        Ok(vec![Reading {
            scope: Scope::Global,
            signal,
        }])
    }
}

/// Each table name as given (the scope its readings carry) and quoted, so
/// `to_regclass` finds `"rp_LockMe"` and `"app"."events"` as created.
fn named_and_quoted(tables: &[String]) -> Vec<(&str, String)> {
    tables
        .iter()
        .filter_map(|t| Some((t.as_str(), Ident::parse(t).ok()?.quoted())))
        .collect()
}

/// MySQL and MariaDB, from one `SHOW ENGINE INNODB STATUS` per poll (it
/// needs the `PROCESS` privilege): the oldest open transaction, against
/// `thresholds` like PostgreSQL's long-running transactions (a global
/// reading), and per target table the sessions waiting for a lock on it,
/// which stop its operations as on PostgreSQL. The report is read rather
/// than `information_schema.innodb_trx`, a cache that frequent pollers keep
/// from refreshing ([`crate::innodb_status`]).
pub struct InnodbActivity {
    thresholds: Thresholds,
    previous: Mutex<Signal>,
}

impl InnodbActivity {
    /// Long-running transactions measured against `thresholds` (seconds).
    pub fn new(thresholds: Thresholds) -> Self {
        InnodbActivity {
            thresholds,
            previous: Mutex::new(Signal::Normal),
        }
    }
}

#[async_trait]
impl HealthIndicator for InnodbActivity {
    fn name(&self) -> &str {
        "long-running transactions and lock waits"
    }

    fn id(&self) -> &str {
        "innodb-activity"
    }

    async fn readable(&self, store: &Store) -> Result<(), String> {
        match store.target().health().innodb_report().await {
            Ok(_) => Ok(()),
            Err(error) => Err(unreadable(store, &error).await),
        }
    }

    async fn check(&self, context: &HealthContext) -> Result<Vec<Reading>, String> {
        let Some(InnodbReport { report, database }) = context
            .store
            .target()
            .health()
            .innodb_report()
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(Vec::new());
        };
        let transactions = InnodbTransactions::parse(&report);
        let global = {
            let mut previous = self.previous.lock().expect("indicator state lock");
            *previous = self.thresholds.classify(
                transactions.longest_seconds as f64,
                &previous,
                "long-running transactions",
            );
            previous.clone()
        };
        let mut readings = vec![Reading {
            scope: Scope::Global,
            signal: global,
        }];
        for table in &context.tables {
            let Ok(ident) = Ident::parse(table) else {
                continue;
            };
            let Some(schema) = ident.schema().or(database.as_deref()) else {
                continue;
            };
            let waiting = transactions.waits_on(schema, ident.name());
            if waiting > 0 {
                readings.push(Reading {
                    scope: Scope::Table(table.clone()),
                    signal: Signal::Stop {
                        reason: format!("{waiting} session(s) waiting for a lock on {table}"),
                    },
                });
            }
        }
        Ok(readings)
    }
}

/// PostgreSQL: refuses a role that sees other sessions' statistics emptied
/// (`pg_stat_activity`'s times, `pg_stat_replication`'s lags, vacuum
/// progress): without `pg_read_all_stats` they read as an idle database.
async fn sees_all_sessions(store: &Store) -> Result<(), String> {
    let blind = store.target().health().blind_role().await;
    match blind.map_err(|e| e.to_string())? {
        None => Ok(()),
        Some(role) => Err(format!(
            "role {role} sees other sessions' statistics emptied, so this indicator would always \
             read as normal; grant it: GRANT pg_monitor TO {role}"
        )),
    }
}

/// What a failed read of an indicator means, with the grant it needs when
/// the database refused a privilege (MySQL's `PROCESS`, error 1227; a
/// PostgreSQL permission, 42501).
async fn unreadable(store: &Store, error: &sqlx::Error) -> String {
    match store.target().health().privilege_remedy(error).await {
        Some(remedy) => remedy,
        None => error.to_string(),
    }
}
