//! A table's columns as another table must copy them to hold the same
//! values and compare them alike: the full type (with its length or
//! precision) and the collation ([`Store::column_definitions`]).

use sqlparser::ast::{ColumnOption, CreateTable, Statement as Parsed};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;

use crate::connection::Backend;
use crate::error::StoreError;
use crate::sql::Ident;
use crate::store::Store;

/// One column of a table, as the catalogue defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDefinition {
    /// Its name.
    pub name: String,
    /// Its full type as the catalogue writes it: PostgreSQL
    /// `format_type` (`character varying(20)`), MySQL `column_type`
    /// (`varchar(20)`, `bigint unsigned`), SQLite the declared type.
    pub full_type: String,
    /// The collation its values are compared in, for a type that has one
    /// (PostgreSQL: `default` for the database's; SQLite: `BINARY` unless
    /// declared otherwise); `None` for numbers, times and the like.
    pub collation: Option<String>,
}

impl Store {
    /// The columns of `table` in table order (generated ones included);
    /// empty when there is no such table.
    ///
    /// Errors: the database's, on reading its catalogue.
    pub async fn column_definitions(
        &self,
        table: &Ident,
    ) -> Result<Vec<ColumnDefinition>, StoreError> {
        let rows: Vec<(String, String, Option<String>)> = match self.backend() {
            Backend::Sqlite(pool) => {
                let declared: Vec<(String, String)> = sqlx::query_as(
                    "SELECT name, type FROM pragma_table_xinfo($1, COALESCE($2, 'main')) \
                     WHERE hidden <> 1 ORDER BY cid",
                )
                .bind(table.name())
                .bind(table.schema())
                .fetch_all(pool)
                .await?;
                let create: Option<String> = sqlx::query_scalar(
                    "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = $1 COLLATE NOCASE",
                )
                .bind(table.name())
                .fetch_optional(pool)
                .await?;
                let collations = create.as_deref().map(sqlite_collations).unwrap_or_default();
                declared
                    .into_iter()
                    .map(|(name, declared)| {
                        let collation = collations
                            .iter()
                            .find(|(column, _)| column.eq_ignore_ascii_case(&name))
                            .map_or_else(|| "BINARY".to_owned(), |(_, c)| c.clone());
                        (name, declared, Some(collation))
                    })
                    .collect()
            }
            Backend::Postgres(pool) => {
                sqlx::query_as(concat!(
                    "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), \
                     (SELECT collname::text FROM pg_catalog.pg_collation WHERE oid = a.attcollation) ",
                    postgres_columns!(),
                    " ORDER BY a.attnum"
                ))
                .bind(table.schema())
                .bind(table.name())
                .fetch_all(pool)
                .await?
            }
            Backend::MySql(pool) => {
                crate::positional::query_as(concat!(
                    "SELECT CAST(column_name AS CHAR), CAST(column_type AS CHAR), \
                     CAST(collation_name AS CHAR) ",
                    mysql_columns!(),
                    " ORDER BY ordinal_position"
                ))
                .bind(table.schema())
                .bind(table.name())
                .fetch_all(pool)
                .await?
            }
        };
        Ok(rows
            .into_iter()
            .map(|(name, full_type, collation)| ColumnDefinition {
                name,
                full_type,
                collation,
            })
            .collect())
    }
}

/// The columns an SQLite `CREATE TABLE` text declares with a `COLLATE`,
/// and their collations (upper case, as SQLite compares them); empty
/// when the text does not parse.
fn sqlite_collations(create: &str) -> Vec<(String, String)> {
    let Ok(parsed) = Parser::parse_sql(&SQLiteDialect {}, create) else {
        return Vec::new();
    };
    let Some(Parsed::CreateTable(CreateTable { columns, .. })) = parsed.into_iter().next() else {
        return Vec::new();
    };
    columns
        .into_iter()
        .filter_map(|column| {
            column
                .options
                .iter()
                .find_map(|option| match &option.option {
                    ColumnOption::Collation(name) => Some((
                        column.name.value.clone(),
                        name.to_string().trim_matches('"').to_ascii_uppercase(),
                    )),
                    _ => None,
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_collations_are_read_from_the_create_text() {
        let found = sqlite_collations(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT COLLATE nocase NOT NULL, \
             \"Code\" VARCHAR(8) NOT NULL COLLATE RTRIM, n INT)",
        );
        assert_eq!(
            found,
            [
                ("name".to_owned(), "NOCASE".to_owned()),
                ("Code".to_owned(), "RTRIM".to_owned())
            ]
        );
        assert!(sqlite_collations("not sql at all").is_empty());
    }
}
