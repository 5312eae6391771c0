//! Foreign keys that reach a target table and act when its rows are
//! deleted (`ON DELETE CASCADE`, `SET NULL`, `SET DEFAULT`): deleting a row
//! of the table then deletes or changes rows elsewhere — in other tables,
//! or in the same table when the key refers to it ([`Target::delete_actions`]).

use crate::connection::Target;
use crate::error::DatabaseError;
use crate::sql::Ident;

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

impl Target {
    /// The foreign keys referring to `table` that delete or change their
    /// rows when a row of `table` is deleted, by table and name. SQLite's
    /// are listed as declared (Sluice's connections enforce them: sqlx
    /// turns `foreign_keys` on); only those of its main database.
    ///
    /// Errors: the database's, on reading its catalogue.
    pub async fn delete_actions(&self, table: &Ident) -> Result<Vec<DeleteAction>, DatabaseError> {
        let rows: Vec<(String, String, String)> =
            self.catalogue().delete_action_rows(table).await?;
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
