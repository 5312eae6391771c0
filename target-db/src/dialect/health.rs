//! What a database reports about its own load, for the runtime's health
//! indicators: the queries, one implementation per dialect
//! (`{sqlite,postgres,mysql}/health.rs`) on the database's own pool,
//! reached through [`crate::Backend::health`]. The indicators' thresholds
//! and signals stay in the runtime; what to read and how is here.

use async_trait::async_trait;

/// What a value indicator of the runtime measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// PostgreSQL: age in seconds of the oldest open transaction of another
    /// session (on MySQL, the runtime's InnoDB activity indicator reads it).
    LongestTransactionSeconds,
    /// The largest replay lag of a connected replica, in seconds (0 without replicas).
    ReplicationLagSeconds,
    /// Sessions as a percentage of `max_connections`.
    ConnectionsUsedPercent,
    /// SQLite: WAL frames not yet checkpointed (after a passive checkpoint).
    SqliteWalBacklogPages,
    /// MySQL: threads executing a statement now (`Threads_running`, as
    /// gh-ost's `--max-load` reads it).
    MySqlThreadsRunning,
    /// MySQL: InnoDB's history list length, the undo records purge has yet
    /// to clean (a mass delete drives it up).
    MySqlHistoryListLength,
}

impl Measure {
    /// The indicator's id, as `--without-indicator` takes it.
    pub fn id(self) -> &'static str {
        match self {
            Measure::LongestTransactionSeconds => "long-transactions",
            Measure::ReplicationLagSeconds => "replication-lag",
            Measure::ConnectionsUsedPercent => "connections",
            Measure::SqliteWalBacklogPages => "wal-backlog",
            Measure::MySqlThreadsRunning => "threads-running",
            Measure::MySqlHistoryListLength => "history-list",
        }
    }

    /// Whether reading it needs PostgreSQL's statistics of other sessions,
    /// which a role without `pg_read_all_stats` (or `pg_monitor`) sees
    /// emptied: a silent zero, not an error.
    pub fn needs_all_stats(self) -> bool {
        matches!(
            self,
            Measure::LongestTransactionSeconds | Measure::ReplicationLagSeconds
        )
    }
}

/// One target table's activity (PostgreSQL): who waits for it, whether a
/// vacuum works on it, and its cleanup debt.
#[derive(Debug, Clone, PartialEq)]
pub struct TableActivity {
    /// The table as it was given.
    pub table: String,
    /// Sessions waiting for a lock on it.
    pub waiting: i64,
    /// A vacuum is working on it now.
    pub vacuuming: bool,
    /// Its dead rows.
    pub dead: i64,
    /// How many dead rows start autovacuum on it.
    pub trigger: f64,
    /// Autovacuum is on for it (the server's setting and its own).
    pub autovacuum: bool,
}

/// InnoDB's status report (`SHOW ENGINE INNODB STATUS`) and the session's
/// database, which unqualified table names are in.
#[derive(Debug, Clone, PartialEq)]
pub struct InnodbReport {
    /// The report's text.
    pub report: String,
    /// `DATABASE()`.
    pub database: Option<String>,
}

/// The application's statements on one table as the database itself counts
/// them (PostgreSQL's `pg_stat_statements`, MySQL's and MariaDB's
/// `performance_schema` digests): executions and their time,
/// summed since its statistics were last reset. A latency over an interval
/// is the difference of two readings ([`StatementTotals::mean_since`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StatementTotals {
    /// Executions.
    pub calls: f64,
    /// Their execution time, in milliseconds.
    pub total_ms: f64,
}

impl StatementTotals {
    /// The mean execution time of the statements run between `earlier` and
    /// this reading; `None` with fewer than `min_calls` of them, or when the
    /// statistics went back (reset, or entries evicted) in between.
    pub fn mean_since(&self, earlier: &StatementTotals, min_calls: f64) -> Option<f64> {
        let calls = self.calls - earlier.calls;
        let time = self.total_ms - earlier.total_ms;
        (calls >= min_calls.max(1.0) && time >= 0.0).then(|| time / calls)
    }

    /// The mean execution time over every statement counted; `None` with
    /// fewer than `min_calls`.
    pub fn mean(&self, min_calls: f64) -> Option<f64> {
        self.mean_since(&StatementTotals::default(), min_calls)
    }
}

/// What one replica says about itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplicaState {
    /// The heartbeat it has applied, if it has the table.
    pub applied: Option<i64>,
    /// The lag it reports (MySQL's `Seconds_Behind_Master`), in seconds.
    pub reported_lag: Option<f64>,
    /// Why it cannot be trusted at all (not replicating, an error).
    pub broken: Option<String>,
    /// Something an operator should read beside the lag (a stopped thread).
    pub note: Option<String>,
}

/// The queries behind the health indicators, on one database's pool. A
/// database without a report keeps the default: nothing to read.
#[async_trait]
pub trait HealthQueries: Send + Sync {
    /// The measures this database reports, in the order the built-in
    /// indicators list them.
    fn measures(&self) -> &'static [Measure];

    /// True when [`HealthQueries::table_activity`] reports.
    fn has_table_activity(&self) -> bool {
        false
    }

    /// True when [`HealthQueries::innodb_report`] reports.
    fn has_innodb_report(&self) -> bool {
        false
    }

    /// `measure` now; `None` when the database does not report it.
    async fn measure(&self, measure: Measure) -> Result<Option<f64>, sqlx::Error>;

    /// Per target table (`tables`: a JSON array of `[name as given, quoted
    /// name]`), its activity; `None` where the database reports none.
    async fn table_activity(
        &self,
        tables: &str,
    ) -> Result<Option<Vec<TableActivity>>, sqlx::Error> {
        let _ = tables;
        Ok(None)
    }

    /// InnoDB's status report; `None` where there is none.
    async fn innodb_report(&self) -> Result<Option<InnodbReport>, sqlx::Error> {
        Ok(None)
    }

    /// The role's name when it sees other sessions' statistics emptied
    /// (PostgreSQL without `pg_read_all_stats`), so an indicator reading
    /// them would always read as an idle database; `None` when it sees
    /// them, or the database has no such restriction.
    async fn blind_role(&self) -> Result<Option<String>, sqlx::Error> {
        Ok(None)
    }

    /// The grant an operator must give when `error` is the database
    /// refusing a privilege an indicator needs; `None` for other errors.
    async fn privilege_remedy(&self, error: &sqlx::Error) -> Option<String> {
        let _ = error;
        None
    }

    /// The statements that name `table` (a plain name, matched as a whole
    /// word, any schema) run in this database by others than Sluice, as the
    /// database counts them; `None` where it keeps no such statistics or
    /// cannot tell Sluice's own apart (PostgreSQL without
    /// `pg_stat_statements` installed and loaded: other roles than this
    /// connection's count; MySQL and MariaDB without `performance_schema`,
    /// or whose user may not leave Sluice's sessions out of it; SQLite).
    async fn statement_totals(&self, table: &str) -> Result<Option<StatementTotals>, sqlx::Error> {
        let _ = table;
        Ok(None)
    }

    /// The application's sessions on this database's server: those that
    /// are not Sluice's own nor this one, running a statement now or that
    /// ran one within `within`, by their id (PostgreSQL's backend pid,
    /// MySQL's and MariaDB's connection id). The latency budget holds no
    /// pace while there is none: nothing waits for the work to go slower.
    /// `None` where the database cannot tell Sluice's sessions from the
    /// application's (SQLite; MySQL and MariaDB without
    /// `performance_schema`, or whose user may not leave Sluice's sessions
    /// out of it), which the budget reads as an application present.
    ///
    /// Sluice's own sessions: on PostgreSQL, those whose `application_name`
    /// begins with `sluice` (what Sluice names its sessions when the URL
    /// names none); on MySQL and MariaDB, those left out of
    /// `performance_schema` (as Sluice's pools ask to be). A session whose
    /// state another role may not read counts as the application's.
    async fn application_sessions(
        &self,
        within: std::time::Duration,
    ) -> Result<Option<Vec<i64>>, sqlx::Error> {
        let _ = within;
        Ok(None)
    }

    /// The number the operator's latency `query` returns (its first row's
    /// first column, milliseconds; [`LatencyQuery`]); `None` when it
    /// returns no row, NULL, or a value that is not a number.
    async fn latency_ms(&self, query: &LatencyQuery) -> Result<Option<f64>, sqlx::Error>;

    /// What this database says about itself as a replica: whether it
    /// replicates, the heartbeat it has applied, the lag it reports.
    async fn replica_state(&self) -> Result<ReplicaState, sqlx::Error> {
        Ok(ReplicaState {
            broken: Some("this database has no replicas".to_owned()),
            ..ReplicaState::default()
        })
    }
}

/// An operator's query returning the latency their application sees, in
/// milliseconds (from a metrics table, a Prometheus-backed foreign table,
/// the database's own statistics): one statement, as given, run on the
/// database an operation works on at every health poll. It is the
/// operator's SQL, run as written: it should only read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencyQuery(String);

impl LatencyQuery {
    /// `sql` as a latency query: not empty, one statement (a trailing `;`
    /// is dropped; any other is refused: a second statement would run
    /// too), at most 4,000 characters.
    pub fn parse(sql: &str) -> Result<Self, String> {
        let text = sql.trim().trim_end_matches(';').trim();
        if text.is_empty() {
            return Err("the latency query is empty".into());
        }
        if text.contains(';') {
            return Err(format!(
                "the latency query `{text}` holds more than one statement (a `;`): give one"
            ));
        }
        if text.chars().count() > 4_000 {
            return Err("the latency query is longer than 4,000 characters".into());
        }
        Ok(LatencyQuery(text.to_owned()))
    }

    /// The query's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The first column of `row` as a number, whichever numeric type (or text
/// holding a number) the database gave it.
pub(crate) fn first_number<R>(row: &R) -> Option<f64>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    for<'r> f64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> f32: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i32: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let number = row
        .try_get::<Option<f64>, _>(0)
        .ok()
        .or_else(|| Some(row.try_get::<Option<f32>, _>(0).ok()?.map(f64::from)))
        .or_else(|| Some(row.try_get::<Option<i64>, _>(0).ok()?.map(|n| n as f64)))
        .or_else(|| Some(row.try_get::<Option<i32>, _>(0).ok()?.map(f64::from)))
        .or_else(|| {
            let text = row.try_get::<Option<String>, _>(0).ok()?;
            Some(text.and_then(|t| t.trim().parse().ok()))
        })??;
    number.is_finite().then_some(number)
}

/// Runs the operator's latency `query` on `executor` and reads its number.
macro_rules! latency_ms_on {
    ($executor:expr, $query:expr) => {{
        let row = sqlx::query(sqlx::AssertSqlSafe($query.as_str().to_owned()))
            .fetch_optional($executor)
            .await?;
        Ok(row.as_ref().and_then($crate::dialect::health::first_number))
    }};
}
pub(crate) use latency_ms_on;

/// The heartbeat a replica has applied.
pub(crate) const HEARTBEAT: &str = "SELECT beat_ms FROM sluice_heartbeat WHERE id = 1";

/// The heartbeat a replica has applied, from its read: `None` while the
/// table has not reached it (the migration not yet replayed); any other
/// failure (on PostgreSQL, a read cancelled by a conflict with recovery) is
/// an error the replica is stopped for as such, not a missing heartbeat.
pub(crate) fn applied_heartbeat(
    read: Result<Option<i64>, sqlx::Error>,
) -> Result<Option<i64>, sqlx::Error> {
    match read {
        Err(sqlx::Error::Database(e)) if matches!(e.code().as_deref(), Some("42P01" | "42S02")) => {
            Ok(None)
        }
        read => read,
    }
}

#[cfg(test)]
mod tests {
    use super::{LatencyQuery, StatementTotals};

    #[test]
    fn a_statement_mean_is_read_from_the_difference_of_two_readings() {
        let at = |calls: f64, total_ms: f64| StatementTotals { calls, total_ms };
        let earlier = at(1_000.0, 1_000.0);
        assert_eq!(at(1_040.0, 1_400.0).mean_since(&earlier, 20.0), Some(10.0));
        assert_eq!(
            at(1_010.0, 1_400.0).mean_since(&earlier, 20.0),
            None,
            "too few statements in between"
        );
        assert_eq!(
            at(500.0, 400.0).mean_since(&earlier, 20.0),
            None,
            "statistics reset in between"
        );
        assert_eq!(
            at(1_040.0, 900.0).mean_since(&earlier, 20.0),
            None,
            "entries evicted in between"
        );
        assert_eq!(at(0.0, 0.0).mean_since(&at(0.0, 0.0), 0.0), None);
        assert_eq!(at(50.0, 100.0).mean(20.0), Some(2.0));
    }

    #[test]
    fn a_latency_query_is_one_statement() {
        assert_eq!(
            LatencyQuery::parse(" SELECT 3.5; ").unwrap().as_str(),
            "SELECT 3.5"
        );
        for bad in ["", " ; ", "SELECT 1; DROP TABLE t", "SELECT 1;;SELECT 2"] {
            assert!(LatencyQuery::parse(bad).is_err(), "{bad}");
        }
        assert!(LatencyQuery::parse(&"x".repeat(4_001)).is_err());
    }
}
