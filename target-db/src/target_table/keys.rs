//! What the catalogue says makes a target table's rows distinct: its
//! unique indexes, its NOT NULL columns and the columns the database writes
//! itself on UPDATE ([`Target::table_keys`]).

use crate::connection::Target;
use crate::error::DatabaseError;
use crate::sql::Ident;

/// What the catalogue says makes a table's rows distinct
/// ([`Target::table_keys`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableKeys {
    /// Its indexes, the primary key's first on PostgreSQL.
    pub indexes: Vec<Index>,
    /// Its columns that can never hold NULL.
    pub not_null: Vec<String>,
    /// Its columns whose values the database itself writes when a row is
    /// updated, with how: generated from other columns (PostgreSQL, MySQL),
    /// or set to the time of each UPDATE (MySQL's `ON UPDATE`). SQLite's
    /// generated columns are not listed among a table's columns at all.
    pub written_by_database: Vec<(String, &'static str)>,
}

/// How [`TableKeys::written_by_database`] says a generated column is written.
pub(crate) const GENERATED: &str = "is generated from other columns";

/// How [`TableKeys::written_by_database`] says an `ON UPDATE` column is written.
pub(crate) const SET_ON_UPDATE: &str = "is set by the database on every UPDATE (ON UPDATE)";

/// One index of a table, as [`Target::table_keys`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// Its name.
    pub name: String,
    /// Its key columns, in order (empty text for an expression).
    pub columns: Vec<String>,
    /// True when it proves its columns' values distinct on every row
    /// (unique, valid, not partial, over plain columns).
    pub unique: bool,
}

impl TableKeys {
    /// True when no two rows can share values of `columns`: every one of
    /// them is NOT NULL and some unique index covers only columns among them.
    pub fn proves_distinct(&self, columns: &[&str]) -> bool {
        columns.iter().all(|c| self.not_null.iter().any(|n| n == c))
            && self.indexes.iter().any(|i| {
                i.unique
                    && !i.columns.is_empty()
                    && i.columns.iter().all(|ic| columns.contains(&ic.as_str()))
            })
    }
}

impl Target {
    /// What proves rows of `table` distinct: its indexes (name, columns,
    /// unique or not) and which of its columns can never be NULL. A partial
    /// index, an index over an expression and, on PostgreSQL, an index not
    /// yet valid are listed as not unique (they prove nothing for every
    /// row). SQLite's rowid alias (`id INTEGER PRIMARY KEY`) is listed as a
    /// unique index named `rowid` over its column, which is never NULL; any
    /// other primary key column is taken as not null while no row holds a
    /// NULL there (SQLite allows one unless the column says NOT NULL).
    pub async fn table_keys(&self, table: &Ident) -> Result<TableKeys, DatabaseError> {
        self.catalogue().table_keys(table).await
    }
}
