//! When the planner's statistics of a target table last changed: a version
//! that differs after every `ANALYZE` (manual or automatic) the database
//! reports, so the plan-drift guard can look at the batch query's plan
//! again as soon as the planner may choose another one.

use crate::connection::Target;
use crate::error::DatabaseError;
use crate::sql::Ident;

impl Target {
    /// A version of `table`'s planner statistics, or `None` when the
    /// database keeps none that can be read:
    /// - PostgreSQL: the analyze count (manual and automatic) with the
    ///   row and page estimates `ANALYZE` and `VACUUM` write to `pg_class`;
    /// - MySQL and MariaDB: when InnoDB's persistent statistics were last
    ///   written (`mysql.innodb_table_stats`, to the second);
    /// - SQLite: the table's rows of `sqlite_stat1`, which `ANALYZE` writes.
    ///
    /// A catalogue the role may not read is `None`, not an error: the
    /// guard's periodic look still runs. Other errors are returned.
    pub async fn statistics_version(&self, table: &Ident) -> Result<Option<String>, DatabaseError> {
        match self.catalogue().statistics_version(table).await {
            Ok(version) => Ok(version),
            Err(error) if is_not_allowed(&error) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }
}

/// The role may not read that catalogue (PostgreSQL 42501, MySQL 1142).
fn is_not_allowed(error: &sqlx::Error) -> bool {
    error.as_database_error().is_some_and(|d| {
        matches!(
            d.code().as_deref(),
            Some("42501") | Some("1142") | Some("42000")
        )
    })
}
