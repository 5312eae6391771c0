//! Foreign keys that reach a target table and act when its rows are
//! deleted (`ON DELETE CASCADE`, `SET NULL`, `SET DEFAULT`): deleting a row
//! of the table then deletes or changes rows elsewhere — in other tables,
//! or in the same table when the key refers to it ([`Store::delete_actions`]).

use crate::connection::Backend;
use crate::error::StoreError;
use crate::sql::Ident;
use crate::store::Store;

/// A foreign key that changes other rows when a row it refers to is deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteAction {
    /// The table holding the foreign key (the one whose rows change).
    pub table: String,
    /// The foreign key's name.
    pub constraint: String,
    /// What it does: `CASCADE`, `SET NULL` or `SET DEFAULT`.
    pub action: String,
}

impl std::fmt::Display for DeleteAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` ({}: ON DELETE {})",
            self.table, self.constraint, self.action
        )
    }
}

impl Store {
    /// The foreign keys referring to `table` that delete or change their
    /// rows when a row of `table` is deleted, by table and name. SQLite's
    /// are listed as declared (Sluice's connections enforce them: sqlx
    /// turns `foreign_keys` on); only those of its main database.
    ///
    /// Errors: the database's, on reading its catalogue.
    pub async fn delete_actions(&self, table: &Ident) -> Result<Vec<DeleteAction>, StoreError> {
        let rows: Vec<(String, String, String)> = match self.backend() {
            Backend::Sqlite(pool) => {
                sqlx::query_as(
                    "SELECT m.name, 'foreign key ' || p.id || ' (' || group_concat(p.\"from\", ', ') || ')', \
                     p.on_delete FROM sqlite_schema m, pragma_foreign_key_list(m.name) p \
                     WHERE m.type = 'table' AND p.\"table\" = $1 COLLATE NOCASE \
                     AND p.on_delete IN ('CASCADE', 'SET NULL', 'SET DEFAULT') \
                     GROUP BY m.name, p.id ORDER BY m.name, p.id",
                )
                .bind(table.name())
                .fetch_all(pool)
                .await?
            }
            Backend::Postgres(pool) => {
                sqlx::query_as(
                    "SELECT c.conrelid::regclass::text, c.conname::text, \
                     CASE c.confdeltype WHEN 'c' THEN 'CASCADE' WHEN 'n' THEN 'SET NULL' \
                     ELSE 'SET DEFAULT' END \
                     FROM pg_catalog.pg_constraint c \
                     WHERE c.contype = 'f' AND c.confrelid = to_regclass($1) \
                     AND c.confdeltype IN ('c', 'n', 'd') AND c.conparentid = 0 \
                     ORDER BY 1, 2",
                )
                .bind(table.quoted())
                .fetch_all(pool)
                .await?
            }
            Backend::MySql(pool) => {
                crate::positional::query_as(
                    "SELECT CAST(IF(constraint_schema = COALESCE($1, DATABASE()), table_name, \
                     CONCAT(constraint_schema, '.', table_name)) AS CHAR), \
                     CAST(constraint_name AS CHAR), CAST(delete_rule AS CHAR) \
                     FROM information_schema.referential_constraints \
                     WHERE unique_constraint_schema = COALESCE($1, DATABASE()) \
                     AND BINARY referenced_table_name = BINARY $2 \
                     AND delete_rule IN ('CASCADE', 'SET NULL', 'SET DEFAULT') \
                     ORDER BY 1, 2",
                )
                .bind(table.schema())
                .bind(table.name())
                .fetch_all(pool)
                .await?
            }
        };
        Ok(rows
            .into_iter()
            .map(|(table, constraint, action)| DeleteAction {
                table,
                constraint,
                action,
            })
            .collect())
    }
}
