//! A table's columns as another table must copy them to hold the same
//! values and compare them alike: the full type (with its length or
//! precision) and the collation ([`Target::column_definitions`]).

use sqlparser::ast::{ColumnOption, CreateTable, Statement as Parsed};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;

use crate::connection::Target;
use crate::error::DatabaseError;
use crate::sql::Ident;

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

impl Target {
    /// The columns of `table` in table order (generated ones included);
    /// empty when there is no such table.
    ///
    /// Errors: the database's, on reading its catalogue.
    pub async fn column_definitions(
        &self,
        table: &Ident,
    ) -> Result<Vec<ColumnDefinition>, DatabaseError> {
        let rows: Vec<(String, String, Option<String>)> =
            self.catalogue().column_definition_rows(table).await?;
        Ok(rows
            .into_iter()
            .map(|(name, full_type, collation)| ColumnDefinition {
                name,
                full_type,
                collation,
            })
            .collect())
    }

    /// `table`'s definition as the checks of an enqueue read it, as one
    /// text: two tables (in two databases of a fleet) with the same text
    /// pass or fail the checks that read only the schema alike, so one
    /// checked in full vouches for the other. `None` where those checks
    /// read more than the text holds (triggers, foreign keys, partitions,
    /// views; on SQLite, every table): such a table is checked in full.
    ///
    /// Errors: the database's, on reading its catalogue.
    pub async fn table_definition(&self, table: &Ident) -> Result<Option<String>, DatabaseError> {
        self.catalogue().table_definition(table).await
    }
}

/// The columns an SQLite `CREATE TABLE` text declares with a `COLLATE`,
/// and their collations (upper case, as SQLite compares them); empty
/// when the text does not parse.
pub(crate) fn sqlite_collations(create: &str) -> Vec<(String, String)> {
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
