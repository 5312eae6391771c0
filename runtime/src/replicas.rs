//! Replica lag measured on the replicas themselves.
//!
//! [`ReplicaLag`] writes a heartbeat on the primary at every health poll
//! (the time, in the one-row table `sluice_heartbeat`) and reads it back on
//! each replica the operator named. A replica's lag is how long the oldest
//! heartbeat it has not applied yet has been waiting: sub-second, and true
//! whatever the replica reports about itself, so a replica whose SQL thread
//! (MySQL) or WAL replay (PostgreSQL) is stopped shows a lag that grows
//! with the clock rather than zero. A replica that cannot be reached, is not
//! replicating, or reports a replication error is a stop with that reason.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use sluice_store::Store;
use sluice_target::{Backend, SqlValue, Statement, redact_url};

use crate::health::{HealthContext, HealthIndicator, Reading, Scope, Signal, Thresholds};

/// The replica-lag indicator over the replicas named at start.
///
/// Guarantees: a replica it cannot read, one that is not replicating, and
/// one whose replication reports an error each give [`Signal::Stop`] naming
/// the replica (its URL without password) and why; otherwise the largest
/// lag is classified by its [`Thresholds`] (seconds).
pub struct ReplicaLag {
    replicas: Vec<Replica>,
    thresholds: Thresholds,
    /// The heartbeats this indicator wrote, oldest first (the last hour's).
    beats: Mutex<VecDeque<i64>>,
    previous: Mutex<Signal>,
}

/// One replica: where it is (for messages) and its connections.
struct Replica {
    shown: String,
    pool: Backend,
}

/// Default thresholds, in seconds of lag: throttled from 5, stopped from 30.
pub const REPLICA_LAG_THRESHOLDS: Thresholds = Thresholds {
    throttle_at: 5.0,
    stop_at: 30.0,
    release: 0.6,
};

/// How long a replica may take to answer before it counts as away (the
/// replicas are read at once, within the monitor's two seconds per
/// indicator).
const REPLICA_TIMEOUT: Duration = Duration::from_secs(1);

/// Why replicas cannot be watched.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The replica did not answer at start-up.
    #[error("cannot reach the replica at {url}: {reason}")]
    Unreachable {
        /// The URL without its password.
        url: String,
        /// What failed.
        reason: String,
    },
    /// The replica's URL does not parse.
    #[error("invalid replica URL {url}: {reason}")]
    BadUrl {
        /// The URL without its password.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The replica's URL is not one of the store's backend.
    #[error("the replica at {url} is not a {expected} database, as the store is")]
    OtherBackend {
        /// The URL without its password.
        url: String,
        /// The store's backend.
        expected: &'static str,
    },
    /// SQLite has no replicas.
    #[error("replicas are a PostgreSQL and MySQL setting: an SQLite store has none")]
    NoReplicasOnSqlite,
}

impl ReplicaError {
    /// True when the operator's input is at fault (not the replica's state).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, ReplicaError::Unreachable { .. })
    }
}

impl ReplicaLag {
    /// Connects to each replica in `urls` (of the store's backend) and
    /// checks it answers.
    ///
    /// Errors: [`ReplicaError`] when one cannot be reached now, is of
    /// another backend, or the store is SQLite; nothing is written then.
    pub async fn connect(
        store: &Store,
        urls: &[String],
        thresholds: Thresholds,
    ) -> Result<Self, ReplicaError> {
        let mut replicas = Vec::new();
        for url in urls {
            // Without its password, nor its parameters (a search path).
            let shown = redact_url(url.split('?').next().unwrap_or(url));
            let unreachable = |e: sqlx::Error| match e {
                sqlx::Error::Configuration(_) => ReplicaError::BadUrl {
                    url: shown.clone(),
                    reason: e.to_string(),
                },
                _ => ReplicaError::Unreachable {
                    url: shown.clone(),
                    reason: e.to_string(),
                },
            };
            let dialect = store.target().dialect();
            if !dialect.has_replicas() {
                return Err(ReplicaError::NoReplicasOnSqlite);
            }
            if !dialect.speaks_url(url) {
                return Err(ReplicaError::OtherBackend {
                    url: shown,
                    expected: dialect.display_name(),
                });
            }
            let pool = store
                .target()
                .backend()
                .open_like(url, REPLICA_TIMEOUT)
                .await
                .map_err(unreachable)?;
            replicas.push(Replica { shown, pool });
        }
        Ok(ReplicaLag {
            replicas,
            thresholds,
            beats: Mutex::new(VecDeque::new()),
            previous: Mutex::new(Signal::Normal),
        })
    }

    /// Writes the next heartbeat on the primary and remembers it.
    async fn beat(&self, store: &Store) -> Result<(), String> {
        let now = store.clock().now_ms();
        store
            .target()
            .execute(&heartbeat(now))
            .await
            .map_err(|e| e.to_string())?;
        let mut beats = self.beats.lock().expect("heartbeat lock");
        beats.push_back(now);
        while beats.front().is_some_and(|b| *b < now - 3_600_000) {
            beats.pop_front();
        }
        Ok(())
    }

    /// Seconds the oldest heartbeat `applied` does not cover has waited by
    /// `now` (0 when the replica has every heartbeat written here).
    fn lag_seconds(&self, applied: i64, now: i64) -> f64 {
        let beats = self.beats.lock().expect("heartbeat lock");
        lag_seconds(&beats, applied, now)
    }
}

#[async_trait]
impl HealthIndicator for ReplicaLag {
    fn name(&self) -> &str {
        "replica lag"
    }

    async fn check(&self, context: &HealthContext) -> Result<Vec<Reading>, String> {
        self.beat(&context.store).await?;
        let now = context.store.clock().now_ms();
        let mut reads = tokio::task::JoinSet::new();
        for (index, replica) in self.replicas.iter().enumerate() {
            let pool = replica.pool.clone();
            reads.spawn(async move {
                (
                    index,
                    tokio::time::timeout(REPLICA_TIMEOUT, pool.health().replica_state()).await,
                )
            });
        }
        let mut answers: Vec<_> = reads.join_all().await;
        answers.sort_by_key(|(index, _)| *index);
        let mut worst: Option<(f64, String)> = None;
        for (index, answer) in answers {
            let replica = &self.replicas[index];
            let state = match answer {
                Ok(Ok(state)) => state,
                Ok(Err(e)) => {
                    return Ok(stop(format!("replica {} unreachable: {e}", replica.shown)));
                }
                Err(_) => {
                    return Ok(stop(format!(
                        "replica {} did not answer within {REPLICA_TIMEOUT:?}",
                        replica.shown
                    )));
                }
            };
            if let Some(broken) = state.broken {
                return Ok(stop(format!("replica {}: {broken}", replica.shown)));
            }
            let lag = match state.applied {
                Some(applied) => self.lag_seconds(applied, now),
                None => match state.reported_lag {
                    Some(seconds) => seconds,
                    None => {
                        return Ok(stop(format!(
                            "replica {} has no heartbeat and reports no lag",
                            replica.shown
                        )));
                    }
                },
            };
            let what = match &state.note {
                Some(note) => format!("lag of replica {} ({note}), s", replica.shown),
                None => format!("lag of replica {}, s", replica.shown),
            };
            if worst.as_ref().is_none_or(|(most, _)| lag > *most) {
                worst = Some((lag, what));
            }
        }
        let Some((lag, what)) = worst else {
            return Ok(Vec::new());
        };
        let mut previous = self.previous.lock().expect("indicator state lock");
        let signal = self.thresholds.classify(lag, &previous, &what);
        *previous = signal.clone();
        Ok(vec![Reading {
            scope: Scope::Global,
            signal,
        }])
    }
}

fn stop(reason: String) -> Vec<Reading> {
    vec![Reading {
        scope: Scope::Global,
        signal: Signal::Stop { reason },
    }]
}

/// The write of heartbeat `now_ms` on a primary (the latency canary's
/// write on a target apart from the store, too: each of its round trips
/// is a heartbeat, later than the last this worker wrote).
pub(crate) fn heartbeat(now_ms: i64) -> Statement {
    Statement::new("UPDATE sluice_heartbeat SET beat_ms = ")
        .value(SqlValue::Int(now_ms))
        .push(" WHERE id = 1")
}

/// The lag of a replica that has applied heartbeat `applied`, given the
/// heartbeats written here (oldest first): how long the first one after
/// `applied` has waited by `now`, in seconds; 0 when there is none (it has
/// them all, or a newer one another worker wrote).
fn lag_seconds(beats: &VecDeque<i64>, applied: i64, now: i64) -> f64 {
    match beats.iter().find(|beat| **beat > applied) {
        Some(waiting) => (now - waiting).max(0) as f64 / 1_000.0,
        None => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_the_wait_of_the_oldest_heartbeat_not_applied() {
        let beats: VecDeque<i64> = [1_000, 2_000, 3_000].into();
        // Up to date, or ahead through another worker's heartbeat.
        assert_eq!(lag_seconds(&beats, 3_000, 3_400), 0.0);
        assert_eq!(lag_seconds(&beats, 3_500, 3_600), 0.0);
        // Behind: the first beat it lacks has waited since it was written.
        assert_eq!(lag_seconds(&beats, 2_000, 3_400), 0.4);
        assert_eq!(lag_seconds(&beats, 1_000, 9_000), 7.0);
        // Older than anything written here (a stale row): from the oldest.
        assert_eq!(lag_seconds(&beats, 0, 4_000), 3.0);
        assert_eq!(lag_seconds(&VecDeque::new(), 0, 4_000), 0.0);
    }
}
