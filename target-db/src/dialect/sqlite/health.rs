//! What SQLite report about their own load.

use async_trait::async_trait;

use crate::dialect::health::{HealthQueries, Measure};

#[async_trait]
impl HealthQueries for sqlx::SqlitePool {
    fn measures(&self) -> &'static [Measure] {
        &[Measure::SqliteWalBacklogPages]
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
