//! How many rows an operation has in scope at enqueue: an exact count, or
//! past [`COUNT_EXACTLY_UP_TO`] the planner's estimate; and how a
//! database's refusal of the operator's SQL reads.

use sluice_store::{Store, StoreError};
use sluice_target::Statement;

use crate::error::OperationError;

/// Above this many rows in scope by the planner's estimate, the estimate is
/// the operation's `estimated_rows` and nothing is counted: an exact count
/// reads every row in scope before the first batch runs (seconds to minutes
/// on the tables batching is for), where the estimate costs one `EXPLAIN`.
pub const COUNT_EXACTLY_UP_TO: i64 = 100_000;

/// The statements about a set of rows (an operation's rows in scope, or a
/// whole table).
#[derive(Clone)]
pub(crate) struct ScopeRows {
    /// Counts them.
    pub(crate) count: Statement,
    /// Selects them (for the planner's estimate).
    pub(crate) select: Statement,
}

/// How many rows a set holds, and whether that is the planner's estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RowCount {
    /// The number (`None` when the count returned nothing).
    pub rows: Option<i64>,
    /// True when it is the planner's estimate rather than a count.
    pub estimated: bool,
}

/// How many rows are in `scope`: the planner's estimate when it expects
/// more than [`COUNT_EXACTLY_UP_TO`], else an exact count (on SQLite and
/// MySQL, whose planners give no estimate here, always exact).
pub(crate) async fn count_rows(
    store: &Store,
    scope: &ScopeRows,
) -> Result<RowCount, OperationError> {
    let estimate = store
        .target()
        .estimate_rows(&scope.select)
        .await
        .map_err(refused_sql)?;
    if let Some(estimate) = estimate.filter(|rows| *rows > COUNT_EXACTLY_UP_TO) {
        return Ok(RowCount {
            rows: Some(estimate),
            estimated: true,
        });
    }
    Ok(RowCount {
        rows: store
            .target()
            .fetch_int(&scope.count)
            .await
            .map_err(refused_sql)?,
        estimated: false,
    })
}

/// A database error while explaining or counting is the operator's SQL at
/// fault (a syntax error, an unknown function) unless the database itself is
/// unreachable.
pub(crate) fn refused_sql(error: impl Into<StoreError>) -> OperationError {
    let error: StoreError = error.into();
    match &error {
        StoreError::Database(sqlx::Error::Database(db)) if !error.is_transient() => {
            OperationError::InvalidSql(db.message().to_owned())
        }
        _ => OperationError::Store(error),
    }
}
