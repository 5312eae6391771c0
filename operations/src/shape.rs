//! What an operation walks: its table, its batching strategy and the scope
//! filter that selects the rows it touches.
//!
//! Every name in a [`Shape`] is an [`Ident`] (validated, always quoted) and
//! every value in a [`Filter`] is a bound parameter, so no shape can put a
//! user's text into SQL. The one exception is [`Filter::expression`], an
//! operator's own SQL (the `update-in-batches --where` text), which is
//! refused when it holds a statement separator or a comment marker.

use sluice_store::{Ident, IdentError, SqlValue, Statement};

use crate::error::OperationError;

/// An operation's table, batching strategy and scope.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    table: Ident,
    strategy: Strategy,
    scope: Filter,
}

/// How an operation's rows are divided into batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// Contiguous ranges in the order of one or more columns: one unique key
    /// (the default, a single-column range) or a keyset such as
    /// `(created_at, id)` whose last column makes the order total. Each batch
    /// is `(start, end]` of that order, recorded before it runs.
    Keyset(Vec<Ident>),
    /// `… LIMIT n` until fewer than `n` rows match: for changes that take a
    /// row out of the scope (a delete, or an update of the filtered column).
    /// `key` identifies rows. There is no cursor; the scope alone decides.
    Loop {
        /// A unique column naming each row.
        key: Ident,
    },
}

/// A conjunction of conditions on the target table's columns, with bound
/// values. Build it with [`Filter::new`] and the comparison methods; a
/// column name that is not a plain identifier is reported when the filter
/// is put into a shape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    clauses: Vec<Clause>,
    error: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Clause {
    Compare {
        column: Ident,
        operator: &'static str,
        value: SqlValue,
    },
    Null {
        column: Ident,
        negated: bool,
    },
    Expression(String),
}

impl Shape {
    /// Ranges over a single unique column (`key`), the default strategy.
    pub fn range(table: &str, key: &str) -> Result<Self, OperationError> {
        Shape::keyset(table, &[key])
    }

    /// Ranges over the order of several columns, the last of which must make
    /// rows unique (`["created_at", "id"]`).
    pub fn keyset(table: &str, columns: &[&str]) -> Result<Self, OperationError> {
        if columns.is_empty() {
            return Err(OperationError::Arguments(
                "a keyset needs at least one column".into(),
            ));
        }
        Ok(Shape {
            table: Ident::parse(table)?,
            strategy: Strategy::Keyset(
                columns
                    .iter()
                    .map(|c| Ident::parse(c))
                    .collect::<Result<_, IdentError>>()?,
            ),
            scope: Filter::new(),
        })
    }

    /// `… LIMIT n` until fewer than `n` rows match; `key` names rows.
    pub fn loop_until_done(table: &str, key: &str) -> Result<Self, OperationError> {
        Ok(Shape {
            table: Ident::parse(table)?,
            strategy: Strategy::Loop {
                key: Ident::parse(key)?,
            },
            scope: Filter::new(),
        })
    }

    /// Restricts the operation to the rows `filter` matches.
    ///
    /// Errors: [`OperationError::Unsafe`] when the filter names a column that
    /// is not a plain identifier, [`OperationError::Arguments`] for an
    /// expression holding `;` or a comment marker.
    pub fn scope(mut self, filter: Filter) -> Result<Self, OperationError> {
        if let Some(error) = filter.error {
            return Err(OperationError::Arguments(error));
        }
        self.scope.clauses.extend(filter.clauses);
        Ok(self)
    }

    /// The target table.
    pub fn table(&self) -> &Ident {
        &self.table
    }

    /// The batching strategy.
    pub fn strategy(&self) -> &Strategy {
        &self.strategy
    }

    /// The scope filter.
    pub fn filter(&self) -> &Filter {
        &self.scope
    }

    /// The columns a batch cursor spans (none for a loop).
    pub fn batching_columns(&self) -> &[Ident] {
        match &self.strategy {
            Strategy::Keyset(columns) => columns,
            Strategy::Loop { .. } => &[],
        }
    }

    /// Every column the shape names, for the catalogue check: the batching
    /// columns or loop key, then the filter's columns.
    pub fn columns(&self) -> Vec<&Ident> {
        let mut columns: Vec<&Ident> = match &self.strategy {
            Strategy::Keyset(columns) => columns.iter().collect(),
            Strategy::Loop { key } => vec![key],
        };
        for column in self.scope.columns() {
            if !columns.contains(&column) {
                columns.push(column);
            }
        }
        columns
    }

    /// The column an index must serve for this shape's batch query: the
    /// first batching column, or for a loop the first filtered column.
    pub fn indexed_column(&self) -> &Ident {
        match &self.strategy {
            Strategy::Keyset(columns) => &columns[0],
            Strategy::Loop { key } => self.scope.columns().next().unwrap_or(key),
        }
    }
}

impl Filter {
    /// Matches every row.
    pub fn new() -> Self {
        Filter::default()
    }

    /// `column = value`.
    pub fn eq(self, column: &str, value: impl Into<SqlValue>) -> Self {
        self.compare(column, " = ", value.into())
    }

    /// `column <> value`.
    pub fn ne(self, column: &str, value: impl Into<SqlValue>) -> Self {
        self.compare(column, " <> ", value.into())
    }

    /// `column < value`.
    pub fn lt(self, column: &str, value: impl Into<SqlValue>) -> Self {
        self.compare(column, " < ", value.into())
    }

    /// `column <= value`.
    pub fn le(self, column: &str, value: impl Into<SqlValue>) -> Self {
        self.compare(column, " <= ", value.into())
    }

    /// `column > value`.
    pub fn gt(self, column: &str, value: impl Into<SqlValue>) -> Self {
        self.compare(column, " > ", value.into())
    }

    /// `column >= value`.
    pub fn ge(self, column: &str, value: impl Into<SqlValue>) -> Self {
        self.compare(column, " >= ", value.into())
    }

    /// `column IS NULL`.
    pub fn is_null(self, column: &str) -> Self {
        self.null(column, false)
    }

    /// `column IS NOT NULL`.
    pub fn is_not_null(self, column: &str) -> Self {
        self.null(column, true)
    }

    /// An operator's own SQL condition (`update-in-batches --where`). It runs
    /// with the operator's privileges and must never come from an untrusted
    /// user; `;` and comment markers are refused.
    pub fn expression(mut self, sql: &str) -> Self {
        match check_expression("WHERE", sql) {
            Ok(()) => self.clauses.push(Clause::Expression(sql.trim().to_owned())),
            Err(message) => {
                self.error.get_or_insert(message);
            }
        }
        self
    }

    /// Appends ` AND <clause>` for every clause to `statement`.
    pub fn and_to(&self, mut statement: Statement) -> Statement {
        for clause in &self.clauses {
            statement = statement.push(" AND ");
            statement = match clause {
                Clause::Compare {
                    column,
                    operator,
                    value,
                } => statement.ident(column).push(operator).value(value.clone()),
                Clause::Null { column, negated } => {
                    statement
                        .ident(column)
                        .push(if *negated { " IS NOT NULL" } else { " IS NULL" })
                }
                Clause::Expression(sql) => statement.operator_expression(sql),
            };
        }
        statement
    }

    fn columns(&self) -> impl Iterator<Item = &Ident> {
        self.clauses.iter().filter_map(|c| match c {
            Clause::Compare { column, .. } | Clause::Null { column, .. } => Some(column),
            Clause::Expression(_) => None,
        })
    }

    fn compare(mut self, column: &str, operator: &'static str, value: SqlValue) -> Self {
        match Ident::parse(column) {
            Ok(column) => self.clauses.push(Clause::Compare {
                column,
                operator,
                value,
            }),
            Err(e) => {
                self.error.get_or_insert(e.to_string());
            }
        }
        self
    }

    fn null(mut self, column: &str, negated: bool) -> Self {
        match Ident::parse(column) {
            Ok(column) => self.clauses.push(Clause::Null { column, negated }),
            Err(e) => {
                self.error.get_or_insert(e.to_string());
            }
        }
        self
    }
}

/// Refuses an operator SQL expression that is empty or could smuggle a second
/// statement or hide text in a comment. `what` names the option in the error.
pub fn check_expression(what: &str, sql: &str) -> Result<(), String> {
    if sql.trim().is_empty() {
        return Err(format!("the {what} expression is empty"));
    }
    for marker in [";", "--", "/*", "*/"] {
        if sql.contains(marker) {
            return Err(format!(
                "the {what} expression `{sql}` contains `{marker}`: give one SQL expression, without statement separators or comments"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_bind_values_and_quote_columns() {
        let shape = Shape::range("todos", "id")
            .unwrap()
            .scope(Filter::new().eq("user_id", 7_i64).lt("done_at", "2026"))
            .unwrap();
        let s = shape
            .filter()
            .and_to(Statement::new("SELECT 1 WHERE 1 = 1"));
        assert_eq!(
            s.text().as_str(),
            "SELECT 1 WHERE 1 = 1 AND \"user_id\" = $1 AND \"done_at\" < $2"
        );
        assert_eq!(
            s.params(),
            &[SqlValue::Int(7), SqlValue::Text("2026".into())]
        );
        let names: Vec<String> = shape.columns().iter().map(|c| c.to_string()).collect();
        assert_eq!(names, ["id", "user_id", "done_at"]);
    }

    #[test]
    fn unsafe_names_and_expressions_are_refused() {
        assert!(matches!(
            Shape::range("todos; DROP TABLE x", "id"),
            Err(OperationError::Unsafe(_))
        ));
        let bad_column = Shape::range("todos", "id")
            .unwrap()
            .scope(Filter::new().eq("user id", 1_i64));
        assert!(bad_column.unwrap_err().to_string().contains("`user id`"));
        for bad in ["a = 1; DELETE FROM t", "a = 1 -- x", "a /* x */ = 1", "  "] {
            let err = Shape::range("t", "id")
                .unwrap()
                .scope(Filter::new().expression(bad))
                .unwrap_err();
            assert!(matches!(err, OperationError::Arguments(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn the_indexed_column_of_a_loop_is_its_first_filtered_column() {
        let shape = Shape::loop_until_done("events", "id")
            .unwrap()
            .scope(Filter::new().lt("created_at", 5_i64))
            .unwrap();
        assert_eq!(shape.indexed_column().name(), "created_at");
        assert!(shape.batching_columns().is_empty());
        let keyset = Shape::keyset("events", &["created_at", "id"]).unwrap();
        assert_eq!(keyset.batching_columns().len(), 2);
        assert_eq!(keyset.indexed_column().name(), "created_at");
    }
}
