//! What MySQL and MariaDB report about their own load.

use async_trait::async_trait;
use sqlx::Row as _;

use crate::dialect::health::{
    HEARTBEAT, HealthQueries, InnodbReport, LatencyQuery, Measure, ReplicaState, StatementTotals,
    applied_heartbeat, latency_ms_on,
};

/// Whether `performance_schema` is on, and whether this session is counted
/// in it (`NO`: left out; no row where it is off).
const DIGESTS_USABLE: &str = "SELECT CAST(@@performance_schema AS SIGNED), \
     (SELECT CAST(INSTRUMENTED AS CHAR) FROM performance_schema.threads \
      WHERE PROCESSLIST_ID = CONNECTION_ID())";

/// The digests of the statements naming the table (`?`, twice) as a
/// whole quoted name, run in this database or naming it as `db`.`table`:
/// executions and their time in milliseconds (the timer counts
/// picoseconds). Digests quote every name with backticks, whatever the
/// statement's own quoting. Statements sent as text are digested (what most
/// MySQL drivers send, bound values included); MariaDB leaves those
/// prepared on the server (the binary protocol) out of the digests.
const DIGEST_TOTALS: &str = "SELECT CAST(COALESCE(SUM(COUNT_STAR), 0) AS DOUBLE), \
     CAST(COALESCE(SUM(SUM_TIMER_WAIT), 0) AS DOUBLE) / 1e9 \
     FROM performance_schema.events_statements_summary_by_digest \
     WHERE (SCHEMA_NAME = DATABASE() AND LOCATE(CONCAT('`', ?, '`'), DIGEST_TEXT) > 0) \
        OR LOCATE(CONCAT('`', DATABASE(), '` . `', ?, '`'), DIGEST_TEXT) > 0";

/// The connections that are not Sluice's (left out of
/// `performance_schema`) nor this one, nor a replica's or the server's own,
/// in a statement now or back from one within `?` seconds.
const APPLICATION_SESSIONS: &str = "SELECT CAST(PROCESSLIST_ID AS SIGNED) \
     FROM performance_schema.threads \
     WHERE TYPE = 'FOREGROUND' AND INSTRUMENTED = 'YES' AND PROCESSLIST_ID IS NOT NULL \
       AND PROCESSLIST_ID <> CONNECTION_ID() \
       AND COALESCE(PROCESSLIST_COMMAND, '') NOT IN ('Binlog Dump', 'Binlog Dump GTID', 'Daemon') \
       AND (PROCESSLIST_COMMAND <> 'Sleep' OR PROCESSLIST_TIME IS NULL OR PROCESSLIST_TIME < ?)";

#[async_trait]
impl HealthQueries for sqlx::MySqlPool {
    fn measures(&self) -> &'static [Measure] {
        &[
            Measure::MySqlThreadsRunning,
            Measure::MySqlHistoryListLength,
        ]
    }

    fn has_innodb_report(&self) -> bool {
        true
    }

    /// Over the text protocol: MySQL 8 prepares no `SHOW ENGINE`.
    async fn innodb_report(&self) -> Result<Option<InnodbReport>, sqlx::Error> {
        let report: String = sqlx::raw_sql("SHOW ENGINE INNODB STATUS")
            .fetch_one(self)
            .await
            .and_then(|row| row.try_get(2))?;
        let database: Option<String> = sqlx::query_scalar("SELECT DATABASE()")
            .fetch_one(self)
            .await?;
        Ok(Some(InnodbReport { report, database }))
    }

    /// `SHOW ENGINE INNODB STATUS` needs the `PROCESS` privilege.
    async fn privilege_remedy(&self, error: &sqlx::Error) -> Option<String> {
        if !error.to_string().contains("PROCESS") {
            return None;
        }
        let user: String = sqlx::query_scalar("SELECT CAST(CURRENT_USER() AS CHAR)")
            .fetch_one(self)
            .await
            .unwrap_or_else(|_| "the worker's user".into());
        let (name, host) = user.split_once('@').unwrap_or((&user, "%"));
        Some(format!(
            "the worker's user lacks the PROCESS privilege ({error}); grant it: GRANT PROCESS \
             ON *.* TO '{name}'@'{host}'"
        ))
    }

    async fn latency_ms(&self, query: &LatencyQuery) -> Result<Option<f64>, sqlx::Error> {
        latency_ms_on!(self, query)
    }

    /// From `performance_schema`'s statement digests (MariaDB's and MySQL
    /// 8's), where it is on and this session is left out of it (Sluice's
    /// own pools ask to be: its statements would count as the
    /// application's). Not counted: statements MariaDB runs prepared on the
    /// server (its digests leave them out), and one naming the table only
    /// past the digest's length (`performance_schema_max_digest_length`,
    /// 1,024 bytes).
    async fn statement_totals(&self, table: &str) -> Result<Option<StatementTotals>, sqlx::Error> {
        let (on, observed): (i64, Option<String>) =
            sqlx::query_as(DIGESTS_USABLE).fetch_one(self).await?;
        if on != 1 || observed.as_deref() != Some("NO") {
            return Ok(None);
        }
        let (calls, total_ms): (f64, f64) = sqlx::query_as(DIGEST_TOTALS)
            .bind(table)
            .bind(table)
            .fetch_one(self)
            .await?;
        Ok(Some(StatementTotals { calls, total_ms }))
    }

    /// Where `performance_schema` is on and this session is left out of it
    /// (as Sluice's pools ask to be: then so are its other sessions).
    async fn application_sessions(
        &self,
        within: std::time::Duration,
    ) -> Result<Option<Vec<i64>>, sqlx::Error> {
        let (on, observed): (i64, Option<String>) =
            sqlx::query_as(DIGESTS_USABLE).fetch_one(self).await?;
        if on != 1 || observed.as_deref() != Some("NO") {
            return Ok(None);
        }
        let sessions = sqlx::query_scalar(APPLICATION_SESSIONS)
            .bind(within.as_secs_f64().ceil() as i64)
            .fetch_all(self)
            .await?;
        Ok(Some(sessions))
    }

    async fn measure(&self, measure: Measure) -> Result<Option<f64>, sqlx::Error> {
        let pool = self;
        Ok(match measure {
            Measure::MySqlThreadsRunning => {
                // `SHOW`, not `information_schema.global_status` (gone in
                // MySQL 8), over the text protocol (MySQL 8 prepares no
                // `SHOW STATUS`).
                use sqlx::Row as _;
                let running = sqlx::raw_sql("SHOW GLOBAL STATUS LIKE 'Threads_running'")
                    .fetch_optional(pool)
                    .await?;
                running.and_then(|row| row.try_get::<String, _>(1).ok()?.parse().ok())
            }
            Measure::MySqlHistoryListLength => {
                let length: Option<i64> = sqlx::query_scalar(
                    "SELECT CAST(count AS SIGNED) FROM information_schema.innodb_metrics \
                     WHERE name = 'trx_rseg_history_len'",
                )
                .fetch_optional(pool)
                .await?;
                length.map(|n| n as f64)
            }
            _ => None,
        })
    }

    async fn replica_state(&self) -> Result<ReplicaState, sqlx::Error> {
        let pool = self;
        let status = sqlx::raw_sql("SHOW REPLICA STATUS")
            .fetch_optional(pool)
            .await?;
        let Some(status) = status else {
            return Ok(ReplicaState {
                applied: None,
                reported_lag: None,
                broken: Some("not replicating (no replica status)".to_owned()),
                note: None,
            });
        };
        // MariaDB names the columns Slave_…/…_Master, MySQL 8
        // Replica_…/…_Source.
        let text = |names: [&str; 2]| {
            names.iter().find_map(|name| {
                status
                    .try_get::<Option<String>, _>(*name)
                    .ok()
                    .flatten()
                    .or_else(|| {
                        let number = status.try_get::<Option<i64>, _>(*name).ok();
                        number.flatten().map(|n| n.to_string())
                    })
            })
        };
        let io = text(["Slave_IO_Running", "Replica_IO_Running"]);
        let sql = text(["Slave_SQL_Running", "Replica_SQL_Running"]);
        let error = [
            text(["Last_IO_Error", "Last_IO_Error"]),
            text(["Last_SQL_Error", "Last_SQL_Error"]),
        ]
        .into_iter()
        .flatten()
        .find(|e| !e.is_empty());
        let reported_lag =
            text(["Seconds_Behind_Master", "Seconds_Behind_Source"]).and_then(|s| s.parse().ok());
        let applied = applied_heartbeat(sqlx::query_scalar(HEARTBEAT).fetch_optional(pool).await)?;
        let broken = match (&error, io.as_deref()) {
            (Some(error), _) => Some(format!("replication error: {error}")),
            (None, Some("No")) => Some("replication stopped (I/O thread not running)".to_owned()),
            _ => None,
        };
        Ok(ReplicaState {
            applied,
            reported_lag,
            broken,
            note: (sql.as_deref() == Some("No")).then(|| "SQL thread stopped".to_owned()),
        })
    }
}
