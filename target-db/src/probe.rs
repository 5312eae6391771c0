//! Measuring a statement without keeping its effect: [`Target::probe_rolled_back`]
//! runs it inside transactions that are always rolled back, so a plan can
//! say how long a sub-batch takes and how much log it writes before the
//! operation exists.

use std::time::Duration;

use crate::connection::Target;
use crate::error::DatabaseError;
use crate::sql::Statement;

/// What running a statement (and rolling it back) measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// How many times it ran, each in its own rolled-back transaction.
    pub runs: u32,
    /// Rows the statement changed in its last run (none of them kept).
    pub rows: u64,
    /// The median time one run took.
    pub took: Duration,
    /// Write-ahead log one run generated, in bytes (the median): PostgreSQL's
    /// WAL insert position, or InnoDB's redo log sequence number on MySQL
    /// and MariaDB (a server-wide counter: other sessions' writes in the
    /// same moment are counted too). `None` on SQLite, which writes its log
    /// only at commit.
    pub log_bytes: Option<u64>,
}

impl Target {
    /// Runs `statement` (a data change) `runs` times, each in a transaction
    /// of its own that is rolled back whatever happens, and returns what it
    /// measured. The rows it touched are locked while it runs, as the real
    /// statement would lock them; nothing it changed is kept.
    ///
    /// Errors: the database's, after the transaction is rolled back.
    pub async fn probe_rolled_back(
        &self,
        statement: &Statement,
        runs: u32,
    ) -> Result<Probe, DatabaseError> {
        let runs = runs.max(1);
        let mut took = Vec::with_capacity(runs as usize);
        let mut logged = Vec::with_capacity(runs as usize);
        let mut rows = 0;
        for _ in 0..runs {
            let (changed, elapsed, log_bytes) = self.run_and_roll_back(statement).await?;
            rows = changed;
            took.push(elapsed);
            logged.extend(log_bytes);
        }
        Ok(Probe {
            runs,
            rows,
            took: median(&mut took),
            log_bytes: (!logged.is_empty()).then(|| median(&mut logged)),
        })
    }

    /// One run of [`Target::probe_rolled_back`]: rows changed, time taken,
    /// log written.
    async fn run_and_roll_back(
        &self,
        statement: &Statement,
    ) -> Result<(u64, Duration, Option<u64>), DatabaseError> {
        self.catalogue().run_and_roll_back(statement).await
    }
}

/// The middle value of `values` (not empty).
fn median<T: Ord + Copy>(values: &mut [T]) -> T {
    values.sort_unstable();
    values[values.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_is_the_middle_value_whatever_the_order() {
        assert_eq!(median(&mut [3, 1, 2]), 2);
        assert_eq!(median(&mut [9]), 9);
        assert_eq!(median(&mut [5, 1, 9, 7]), 7);
    }
}
