//! What PostgreSQL report about their own load.

use async_trait::async_trait;

use crate::dialect::health::{
    HEARTBEAT, HealthQueries, LatencyQuery, Measure, ReplicaState, StatementTotals, TableActivity,
    applied_heartbeat, latency_ms_on,
};

/// Per target table (`$1`: a JSON array of `[name as given, quoted name]`):
/// the sessions waiting for a lock on it, whether a vacuum is working on
/// it, its dead rows, and how many dead rows start autovacuum on it. The
/// dead rows come from `pg_stat_get_dead_tuples`, not the
/// `pg_stat_all_tables` view, which the planner builds for every relation
/// of the database before the join (over 100 ms a poll with a few hundred
/// tables, against about 1 ms).
const TABLE_ACTIVITY: &str = "\
    SELECT t.name, \
      (SELECT count(*) FROM pg_locks l WHERE NOT l.granted AND l.relation = c.oid), \
      EXISTS (SELECT 1 FROM pg_stat_progress_vacuum v WHERE v.relid = c.oid), \
      pg_stat_get_dead_tuples(c.oid), \
      (COALESCE(own.threshold, current_setting('autovacuum_vacuum_threshold')::float8) \
       + COALESCE(own.scale, current_setting('autovacuum_vacuum_scale_factor')::float8) \
         * GREATEST(c.reltuples, 0))::float8, \
      current_setting('autovacuum')::bool AND COALESCE(own.enabled, true) \
    FROM jsonb_array_elements($1::jsonb) AS e(pair) \
    CROSS JOIN LATERAL (SELECT e.pair->>0 AS name, e.pair->>1 AS quoted) AS t \
    JOIN pg_class c ON c.oid = to_regclass(t.quoted) \
    CROSS JOIN LATERAL ( \
      SELECT max(CASE WHEN o.option_name = 'autovacuum_vacuum_threshold' \
                      THEN o.option_value::float8 END) AS threshold, \
             max(CASE WHEN o.option_name = 'autovacuum_vacuum_scale_factor' \
                      THEN o.option_value::float8 END) AS scale, \
             bool_and(CASE WHEN o.option_name = 'autovacuum_enabled' \
                      THEN o.option_value::bool END) AS enabled \
      FROM pg_options_to_table(c.reloptions) o) AS own";

/// The schema `pg_stat_statements` is installed in, in this database.
const STATEMENTS_SCHEMA: &str = "SELECT n.nspname::text FROM pg_extension e \
     JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_stat_statements'";

/// The statements of this database naming the table (`$1`, a whole-word
/// regular expression) run by other roles than the connection's: their
/// executions and time. `{schema}` is where the view is.
const STATEMENT_TOTALS: &str = "\
    SELECT COALESCE(sum(s.calls), 0)::float8, COALESCE(sum(s.total_exec_time), 0)::float8 \
    FROM {schema}.pg_stat_statements s \
    WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
      AND s.userid <> (SELECT oid FROM pg_roles WHERE rolname = current_user) \
      AND s.query ~* $1";

/// Client sessions on the server, of any database, that are not Sluice's
/// (named `sluice…`) nor this one, in a statement or a transaction now or
/// back from one within `$1` seconds; a session whose state this role may
/// not read (NULL) counts.
const APPLICATION_SESSIONS: &str = "\
    SELECT pid::int8 FROM pg_stat_activity \
    WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() \
      AND application_name NOT LIKE 'sluice%' \
      AND (state IS NULL OR state <> 'idle' OR state_change IS NULL \
           OR state_change > clock_timestamp() - make_interval(secs => $1))";

/// The view errs with this state when the library is not loaded at start
/// (`shared_preload_libraries`): installed, it keeps nothing.
const NOT_LOADED: &str = "55000";

#[async_trait]
impl HealthQueries for sqlx::PgPool {
    fn measures(&self) -> &'static [Measure] {
        &[
            Measure::LongestTransactionSeconds,
            Measure::ReplicationLagSeconds,
            Measure::ConnectionsUsedPercent,
        ]
    }

    fn has_table_activity(&self) -> bool {
        true
    }

    async fn table_activity(
        &self,
        tables: &str,
    ) -> Result<Option<Vec<TableActivity>>, sqlx::Error> {
        let rows: Vec<(String, i64, bool, i64, f64, bool)> = sqlx::query_as(TABLE_ACTIVITY)
            .bind(tables)
            .fetch_all(self)
            .await?;
        Ok(Some(
            rows.into_iter()
                .map(
                    |(table, waiting, vacuuming, dead, trigger, autovacuum)| TableActivity {
                        table,
                        waiting,
                        vacuuming,
                        dead,
                        trigger,
                        autovacuum,
                    },
                )
                .collect(),
        ))
    }

    async fn blind_role(&self) -> Result<Option<String>, sqlx::Error> {
        let (sees, role): (bool, String) =
            sqlx::query_as("SELECT pg_has_role('pg_read_all_stats', 'USAGE'), current_user::text")
                .fetch_one(self)
                .await?;
        Ok((!sees).then_some(role))
    }

    /// A permission refused (42501): `pg_monitor` reads every statistic.
    async fn privilege_remedy(&self, error: &sqlx::Error) -> Option<String> {
        let code = error.as_database_error()?.code()?;
        (code == "42501").then(|| {
            format!(
                "the worker's role may not read it ({error}); grant it: GRANT pg_monitor TO <role>"
            )
        })
    }

    async fn latency_ms(&self, query: &LatencyQuery) -> Result<Option<f64>, sqlx::Error> {
        latency_ms_on!(self, query)
    }

    async fn application_sessions(
        &self,
        within: std::time::Duration,
    ) -> Result<Option<Vec<i64>>, sqlx::Error> {
        let sessions = sqlx::query_scalar(APPLICATION_SESSIONS)
            .bind(within.as_secs_f64())
            .fetch_all(self)
            .await?;
        Ok(Some(sessions))
    }

    async fn statement_totals(&self, table: &str) -> Result<Option<StatementTotals>, sqlx::Error> {
        let Some(schema): Option<String> = sqlx::query_scalar(STATEMENTS_SCHEMA)
            .fetch_optional(self)
            .await?
        else {
            return Ok(None);
        };
        let sql = STATEMENT_TOTALS.replace("{schema}", &quote_name(&schema));
        let read: Result<(f64, f64), sqlx::Error> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(whole_word(table))
            .fetch_one(self)
            .await;
        match read {
            Ok((calls, total_ms)) => Ok(Some(StatementTotals { calls, total_ms })),
            Err(e)
                if e.as_database_error().and_then(|d| d.code()).as_deref() == Some(NOT_LOADED) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    async fn measure(&self, measure: Measure) -> Result<Option<f64>, sqlx::Error> {
        let pool = self;
        Ok(match measure {
            Measure::LongestTransactionSeconds => {
                sqlx::query_scalar(
                    "SELECT COALESCE(EXTRACT(EPOCH FROM max(now() - xact_start)), 0)::float8 \
                     FROM pg_stat_activity WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid() \
                     AND state <> 'idle' AND backend_type = 'client backend'",
                )
                .fetch_one(pool)
                .await?
            }
            Measure::ReplicationLagSeconds => {
                sqlx::query_scalar(
                    "SELECT COALESCE(EXTRACT(EPOCH FROM max(replay_lag)), 0)::float8 FROM pg_stat_replication",
                )
                .fetch_one(pool)
                .await?
            }
            Measure::ConnectionsUsedPercent => {
                sqlx::query_scalar(
                    "SELECT (100.0 * count(*) / current_setting('max_connections')::float8)::float8 \
                     FROM pg_stat_activity WHERE backend_type = 'client backend'",
                )
                .fetch_one(pool)
                .await?
            }
            _ => None,
        })
    }

    async fn replica_state(&self) -> Result<ReplicaState, sqlx::Error> {
        let pool = self;
        let (recovering, paused): (bool, bool) = sqlx::query_as(
            "SELECT pg_is_in_recovery(), \
                     CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END",
        )
        .fetch_one(pool)
        .await?;
        let applied = applied_heartbeat(sqlx::query_scalar(HEARTBEAT).fetch_optional(pool).await)?;
        Ok(ReplicaState {
            applied,
            reported_lag: None,
            broken: (!recovering).then(|| "not a standby (not in recovery)".to_owned()),
            note: paused.then(|| "WAL replay paused".to_owned()),
        })
    }
}

/// `name` as a quoted PostgreSQL identifier, whatever it holds.
fn quote_name(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A regular expression matching `name` as a whole word (PostgreSQL's
/// `\m`, `\M`), any character but a letter, digit or `_` escaped.
fn whole_word(name: &str) -> String {
    let mut pattern = String::from("\\m");
    for c in name.chars() {
        if !(c.is_ascii_alphanumeric() || c == '_') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str("\\M");
    pattern
}

#[cfg(test)]
mod tests {
    use super::{quote_name, whole_word};

    #[test]
    fn names_are_quoted_and_matched_as_whole_words() {
        assert_eq!(quote_name("public"), "\"public\"");
        assert_eq!(quote_name("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(whole_word("items"), "\\mitems\\M");
        assert_eq!(whole_word("a.b$"), "\\ma\\.b\\$\\M");
    }
}
