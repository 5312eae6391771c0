//! What SQLite report about their own load.

use async_trait::async_trait;

use crate::dialect::health::{HealthQueries, LatencyQuery, Measure, latency_ms_on};

#[async_trait]
impl HealthQueries for sqlx::SqlitePool {
    fn measures(&self) -> &'static [Measure] {
        &[Measure::SqliteWalBacklogPages]
    }

    async fn latency_ms(&self, query: &LatencyQuery) -> Result<Option<f64>, sqlx::Error> {
        latency_ms_on!(self, query)
    }

    async fn measure(&self, measure: Measure) -> Result<Option<f64>, sqlx::Error> {
        let pool = self;
        Ok(match measure {
            Measure::SqliteWalBacklogPages => {
                let (_busy, log, done): (i64, i64, i64) =
                    sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                        .fetch_one(pool)
                        .await?;
                Some((log - done).max(0) as f64)
            }
            _ => None,
        })
    }
}
