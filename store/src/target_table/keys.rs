//! What the catalogue says makes a target table's rows distinct: its
//! unique indexes, its NOT NULL columns and the columns the database writes
//! itself on UPDATE ([`Store::table_keys`]).

use crate::connection::Backend;
use crate::error::StoreError;
use crate::sql::{Ident, Statement};
use crate::store::Store;

/// What the catalogue says makes a table's rows distinct
/// ([`Store::table_keys`]).
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
const GENERATED: &str = "is generated from other columns";

/// How [`TableKeys::written_by_database`] says an `ON UPDATE` column is written.
const SET_ON_UPDATE: &str = "is set by the database on every UPDATE (ON UPDATE)";

/// One index of a table, as [`Store::table_keys`] lists it.
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

impl Store {
    /// What proves rows of `table` distinct: its indexes (name, columns,
    /// unique or not) and which of its columns can never be NULL. A partial
    /// index, an index over an expression and, on PostgreSQL, an index not
    /// yet valid are listed as not unique (they prove nothing for every
    /// row). SQLite's rowid alias (`id INTEGER PRIMARY KEY`) is listed as a
    /// unique index named `rowid` over its column, which is never NULL; any
    /// other primary key column is taken as not null while no row holds a
    /// NULL there (SQLite allows one unless the column says NOT NULL).
    pub async fn table_keys(&self, table: &Ident) -> Result<TableKeys, StoreError> {
        match self.backend() {
            Backend::Sqlite(pool) => {
                let schema = table.schema().unwrap_or("main");
                let columns: Vec<(String, String, bool, i64)> = sqlx::query_as(
                    "SELECT name, type, \"notnull\", pk FROM pragma_table_xinfo($1, $2) \
                     WHERE hidden <> 1 ORDER BY cid",
                )
                .bind(table.name())
                .bind(schema)
                .fetch_all(pool)
                .await?;
                let mut keys = TableKeys {
                    written_by_database: self
                        .generated_columns(table)
                        .await?
                        .into_iter()
                        .map(|name| (name, GENERATED))
                        .collect(),
                    ..TableKeys::default()
                };
                let listed: Vec<(String, bool, String, bool)> = sqlx::query_as(
                    "SELECT name, \"unique\", origin, partial FROM pragma_index_list($1, $2) ORDER BY seq",
                )
                .bind(table.name())
                .bind(schema)
                .fetch_all(pool)
                .await?;
                for (name, unique, _, partial) in &listed {
                    let names: Vec<Option<String>> = sqlx::query_scalar(
                        "SELECT name FROM pragma_index_info($1, $2) ORDER BY seqno",
                    )
                    .bind(name)
                    .bind(schema)
                    .fetch_all(pool)
                    .await?;
                    let on_columns = names.iter().all(Option::is_some);
                    keys.indexes.push(Index {
                        name: name.clone(),
                        columns: names.into_iter().map(Option::unwrap_or_default).collect(),
                        unique: *unique && !*partial && on_columns,
                    });
                }
                let pk: Vec<&(String, String, bool, i64)> =
                    columns.iter().filter(|c| c.3 > 0).collect();
                let rowid_alias = pk.len() == 1
                    && pk[0].1.eq_ignore_ascii_case("INTEGER")
                    && !listed.iter().any(|l| l.2 == "pk");
                if rowid_alias {
                    keys.indexes.insert(
                        0,
                        Index {
                            name: "rowid".into(),
                            columns: vec![pk[0].0.clone()],
                            unique: true,
                        },
                    );
                }
                for (name, _, declared_not_null, pk) in &columns {
                    let not_null = *declared_not_null
                        || (*pk > 0 && (rowid_alias || !self.holds_null(table, name).await?));
                    if not_null {
                        keys.not_null.push(name.clone());
                    }
                }
                Ok(keys)
            }
            Backend::Postgres(pool) => {
                let indexes: Vec<(String, bool, Vec<Option<String>>)> = sqlx::query_as(
                    "SELECT i.relname::text, \
                       x.indisunique AND x.indisvalid AND x.indpred IS NULL AND x.indexprs IS NULL, \
                       ARRAY(SELECT a.attname::text FROM unnest(x.indkey[0:x.indnkeyatts - 1]) \
                             WITH ORDINALITY AS k(attnum, n) \
                             LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum \
                             ORDER BY k.n) \
                     FROM pg_catalog.pg_index x \
                     JOIN pg_catalog.pg_class c ON c.oid = x.indrelid \
                     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                     JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid \
                     WHERE c.oid = to_regclass(concat_ws('.', quote_ident($1), quote_ident($2))) \
                     ORDER BY x.indisprimary DESC, i.relname",
                )
                .bind(table.schema())
                .bind(table.name())
                .fetch_all(pool)
                .await?;
                let not_null: Vec<String> = sqlx::query_scalar(
                    "SELECT a.attname::text FROM pg_catalog.pg_attribute a \
                     JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
                     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                     WHERE c.oid = to_regclass(concat_ws('.', quote_ident($1), quote_ident($2))) \
                     AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull ORDER BY a.attnum",
                )
                .bind(table.schema())
                .bind(table.name())
                .fetch_all(pool)
                .await?;
                let generated: Vec<String> = sqlx::query_scalar(
                    "SELECT a.attname::text FROM pg_catalog.pg_attribute a \
                     WHERE a.attrelid = to_regclass(concat_ws('.', quote_ident($1), quote_ident($2))) \
                     AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> '' ORDER BY a.attnum",
                )
                .bind(table.schema())
                .bind(table.name())
                .fetch_all(pool)
                .await?;
                Ok(TableKeys {
                    written_by_database: generated
                        .into_iter()
                        .map(|name| (name, GENERATED))
                        .collect(),
                    indexes: indexes
                        .into_iter()
                        .map(|(name, unique, columns)| Index {
                            name,
                            unique: unique && columns.iter().all(Option::is_some),
                            columns: columns.into_iter().map(Option::unwrap_or_default).collect(),
                        })
                        .collect(),
                    not_null,
                })
            }
            Backend::MySql(pool) => {
                use crate::positional as sqlx;
                let parts: Vec<(String, i64, Option<String>)> = sqlx::query_as(concat!(
                    "SELECT CAST(index_name AS CHAR), CAST(non_unique = 0 AND sub_part IS NULL AS SIGNED), \
                     CAST(column_name AS CHAR) FROM information_schema.statistics ",
                    mysql_table!(),
                    " ORDER BY index_name = 'PRIMARY' DESC, index_name, seq_in_index"
                ))
                .bind(table.schema())
                .bind(table.name())
                .fetch_all(pool)
                .await?;
                let mut keys = TableKeys::default();
                for (name, unique, column) in parts {
                    match keys.indexes.last_mut() {
                        Some(index) if index.name == name => {
                            index.unique &= unique == 1 && column.is_some();
                            index.columns.push(column.unwrap_or_default());
                        }
                        _ => keys.indexes.push(Index {
                            name,
                            unique: unique == 1 && column.is_some(),
                            columns: vec![column.unwrap_or_default()],
                        }),
                    }
                }
                keys.not_null = sqlx::query_scalar(concat!(
                    "SELECT CAST(column_name AS CHAR) ",
                    mysql_columns!(),
                    " AND is_nullable = 'NO' ORDER BY ordinal_position"
                ))
                .bind(table.schema())
                .bind(table.name())
                .fetch_all(pool)
                .await?;
                // Not MySQL 8's `DEFAULT_GENERATED`: a default the database
                // computes when a row is inserted, not a value it writes.
                let extras: Vec<(String, String)> = sqlx::query_as(concat!(
                    "SELECT CAST(column_name AS CHAR), CAST(LOWER(extra) AS CHAR) ",
                    mysql_columns!(),
                    " AND (LOWER(extra) LIKE '%virtual generated%' \
                       OR LOWER(extra) LIKE '%stored generated%' \
                       OR LOWER(extra) LIKE '%on update%') ORDER BY ordinal_position"
                ))
                .bind(table.schema())
                .bind(table.name())
                .fetch_all(pool)
                .await?;
                keys.written_by_database = extras
                    .into_iter()
                    .map(|(name, extra)| {
                        let how = if extra.contains(" generated") {
                            GENERATED
                        } else {
                            SET_ON_UPDATE
                        };
                        (name, how)
                    })
                    .collect();
                Ok(keys)
            }
        }
    }

    /// SQLite: true when some row of `table` holds NULL in `column` (or the
    /// column's name cannot be quoted). SQLite lets a primary key that is
    /// not the rowid hold NULL unless declared NOT NULL; such a key is
    /// trusted as not null while no row holds one (an index lookup).
    async fn holds_null(&self, table: &Ident, column: &str) -> Result<bool, StoreError> {
        let Ok(column) = Ident::parse(column) else {
            return Ok(true);
        };
        let probe = Statement::new("SELECT 1 FROM ")
            .ident(table)
            .push(" WHERE ")
            .ident(&column)
            .push(" IS NULL LIMIT 1");
        Ok(self.fetch_cursor(&probe, 1).await?.is_some())
    }
}
