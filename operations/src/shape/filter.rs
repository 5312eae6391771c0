//! The scope of a [`crate::Shape`]: a conjunction of conditions on the
//! target table's columns, each value a bound parameter, or an operator's
//! own expression parsed as exactly one.

use sluice_target::{Condition, Dialect, Ident, IdentError, OperatorSqlError, SqlValue, Statement};

use crate::error::OperationError;
use crate::sqlite_time::sqlite_time_compare;

/// A conjunction of conditions on the target table's columns, with bound
/// values. Build it with [`Filter::new`] and the comparison methods; a
/// column name that is not a plain identifier is reported when the filter
/// is put into a shape.
///
/// A time (`chrono::DateTime<Utc>`) is compared in the column's own type:
/// on PostgreSQL by the server (a `timestamp` without time zone is read in
/// the session's `TimeZone`, UTC unless the store's
/// [`sluice_target::ConnectOptions::time_zone`] says otherwise); on SQLite,
/// whose time columns hold text, as the instant the text names, whatever
/// its separator, fraction or offset
/// ([`Dialect::compares_times_as_text`]), still
/// walking an index on the column.
///
/// ```
/// use sluice_operations::{Filter, Shape};
/// use sluice_target::Statement;
///
/// let filter = Filter::new().eq("user_id", 7).lt("score", 10).is_not_null("done_at");
/// let shape = Shape::range("todos", "id")?.scope(filter)?;
/// // Values are bound parameters, never written into the SQL.
/// let sql = shape.filter().and_to(Statement::new("SELECT id FROM todos WHERE TRUE"));
/// assert_eq!(
///     sql.text().as_str(),
///     r#"SELECT id FROM todos WHERE TRUE AND "user_id" = $1 AND "score" < $2 AND "done_at" IS NOT NULL"#
/// );
/// # Ok::<(), sluice_operations::OperationError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    pub(super) clauses: Vec<Clause>,
    pub(super) error: Option<FilterError>,
    pub(super) dialect: &'static dyn Dialect,
}

/// The first bad input a filter was given, reported by [`crate::Shape::scope`].
#[derive(Debug, Clone, PartialEq)]
pub(super) enum FilterError {
    Name(IdentError),
    Expression(OperatorSqlError),
}

impl From<FilterError> for OperationError {
    fn from(error: FilterError) -> Self {
        match error {
            FilterError::Name(e) => OperationError::Unsafe(e),
            FilterError::Expression(e) => OperationError::Expression(e),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Clause {
    Compare {
        column: Ident,
        operator: Comparison,
        value: SqlValue,
    },
    Null {
        column: Ident,
        negated: bool,
    },
    Expression(Condition),
}

impl Filter {
    /// Matches every row.
    pub fn new() -> Self {
        Filter::default()
    }

    /// `column = value`.
    pub fn eq(self, column: &str, value: impl Into<SqlValue>) -> Self {
        self.compare(column, Comparison::Eq, value.into())
    }

    /// `column <> value`.
    pub fn ne(self, column: &str, value: impl Into<SqlValue>) -> Self {
        self.compare(column, Comparison::Ne, value.into())
    }

    /// `column < value`.
    pub fn lt(self, column: &str, value: impl Into<SqlValue>) -> Self {
        self.compare(column, Comparison::Lt, value.into())
    }

    /// `column <= value`.
    pub fn le(self, column: &str, value: impl Into<SqlValue>) -> Self {
        self.compare(column, Comparison::Le, value.into())
    }

    /// `column > value`.
    pub fn gt(self, column: &str, value: impl Into<SqlValue>) -> Self {
        self.compare(column, Comparison::Gt, value.into())
    }

    /// `column >= value`.
    pub fn ge(self, column: &str, value: impl Into<SqlValue>) -> Self {
        self.compare(column, Comparison::Ge, value.into())
    }

    /// `column IS NULL`.
    pub fn is_null(self, column: &str) -> Self {
        self.null(column, false)
    }

    /// `column IS NOT NULL`.
    pub fn is_not_null(self, column: &str) -> Self {
        self.null(column, true)
    }

    /// An operator's own SQL condition (`update-in-batches --where`), parsed
    /// as exactly one expression ([`Condition::parse`]). It runs with the
    /// operator's privileges and must never come from an untrusted user.
    pub fn expression(mut self, sql: &str) -> Self {
        match Condition::parse(sql) {
            Ok(condition) => self.clauses.push(Clause::Expression(condition)),
            Err(e) => {
                self.error.get_or_insert(FilterError::Expression(e));
            }
        }
        self
    }

    /// The value this filter keeps `column` below (a `column < value`
    /// clause), if it has one.
    pub fn below(&self, column: &str) -> Option<&SqlValue> {
        self.clauses.iter().find_map(|clause| match clause {
            Clause::Compare {
                column: c,
                operator: Comparison::Lt,
                value,
            } if c.name() == column => Some(value),
            _ => None,
        })
    }

    /// The columns this filter compares with a time.
    pub fn time_bounds(&self) -> impl Iterator<Item = &Ident> {
        self.clauses.iter().filter_map(|clause| match clause {
            Clause::Compare {
                column,
                value: SqlValue::Timestamp(_),
                ..
            } => Some(column),
            _ => None,
        })
    }

    /// Appends ` AND <clause>` for every clause to `statement`.
    pub fn and_to(&self, mut statement: Statement) -> Statement {
        for clause in &self.clauses {
            statement = statement.push(" AND ");
            statement = match clause {
                Clause::Compare {
                    column,
                    operator,
                    value: SqlValue::Timestamp(at),
                } if self.dialect.compares_times_as_text() => {
                    sqlite_time_compare(statement, column, *operator, *at)
                }
                Clause::Compare {
                    column,
                    operator,
                    value,
                } => statement
                    .ident(column)
                    .push(operator.sql())
                    .value(value.clone()),
                Clause::Null { column, negated } => {
                    statement
                        .ident(column)
                        .push(if *negated { " IS NOT NULL" } else { " IS NULL" })
                }
                Clause::Expression(condition) => statement.operator_expression(condition),
            };
        }
        statement
    }

    pub(super) fn columns(&self) -> impl Iterator<Item = &Ident> {
        self.clauses.iter().filter_map(|c| match c {
            Clause::Compare { column, .. } | Clause::Null { column, .. } => Some(column),
            Clause::Expression(_) => None,
        })
    }

    fn compare(mut self, column: &str, operator: Comparison, value: SqlValue) -> Self {
        match Ident::parse(column) {
            Ok(column) => self.clauses.push(Clause::Compare {
                column,
                operator,
                value,
            }),
            Err(e) => {
                self.error.get_or_insert(FilterError::Name(e));
            }
        }
        self
    }

    fn null(mut self, column: &str, negated: bool) -> Self {
        match Ident::parse(column) {
            Ok(column) => self.clauses.push(Clause::Null { column, negated }),
            Err(e) => {
                self.error.get_or_insert(FilterError::Name(e));
            }
        }
        self
    }
}

/// A comparison operator of a [`Filter`] clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Comparison {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Comparison {
    pub(crate) fn sql(self) -> &'static str {
        match self {
            Comparison::Eq => " = ",
            Comparison::Ne => " <> ",
            Comparison::Lt => " < ",
            Comparison::Le => " <= ",
            Comparison::Gt => " > ",
            Comparison::Ge => " >= ",
        }
    }
}

/// Refuses an operator's condition among `clauses` that `dialect`'s
/// sessions would read otherwise than the operator's own do.
pub(super) fn read_alike(
    dialect: &dyn Dialect,
    clauses: &[Clause],
) -> Result<(), OperatorSqlError> {
    for clause in clauses {
        if let Clause::Expression(condition) = clause {
            dialect.read_alike(condition)?;
        }
    }
    Ok(())
}
