//! Why an operation could not be accepted or a sub-batch could not run.

use sluice_store::{SpecError, StoreError};
use sluice_target::{IdentError, OperatorSqlError};

use crate::target::TargetError;

/// An operation-level failure. [`OperationError::is_bad_input`] separates the
/// caller's mistakes (nothing was changed; exit code 2 in the CLI) from
/// failures of the database or of the operation's own work.
#[derive(Debug, thiserror::Error)]
pub enum OperationError {
    /// A table or column name is not a plain identifier.
    #[error(transparent)]
    Unsafe(#[from] IdentError),
    /// No operation of this kind is registered.
    #[error("unknown operation kind `{kind}` (known kinds: {})", .known.join(", "))]
    UnknownKind {
        /// The kind asked for.
        kind: String,
        /// The registered kinds.
        known: Vec<String>,
    },
    /// An operator's SQL expression is not exactly one expression (or SET
    /// list) of the kind its option takes.
    #[error(transparent)]
    Expression(#[from] OperatorSqlError),
    /// The arguments do not fit the operation.
    #[error("invalid arguments: {0}")]
    Arguments(String),
    /// The operation's sizes or limits are out of range.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The target table, a column or the index check refused it.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The database refused an operator's SQL expression.
    #[error("the database refused the operation's SQL: {0}")]
    InvalidSql(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The sub-batch ran over its time limit (and was rolled back).
    #[error("the sub-batch took longer than its {0:?} limit and was rolled back")]
    TimedOut(std::time::Duration),
    /// The operation's own code reported a failure.
    #[error("{0}")]
    Failed(String),
    /// An operation cannot be reverted as asked (nothing was enqueued).
    #[error("cannot revert: {0}")]
    NotRevertible(String),
    /// A database apart from the store could not be opened or prepared
    /// ([`crate::on_target`]); named by its URL without a password.
    #[error("target `{target}`: {source}")]
    OnTarget {
        /// The target's URL, without its password.
        target: String,
        /// Why.
        source: StoreError,
    },
    /// One operation of a bulk enqueue was refused (nothing was written).
    #[error("operation {index} of the bulk enqueue: {source}")]
    InBulk {
        /// Its position in the list, from 0.
        index: usize,
        /// Why it was refused.
        source: Box<OperationError>,
    },
}

impl From<sluice_target::DatabaseError> for OperationError {
    /// The target's failure, read as the store reads it (a database error
    /// stays one, so it is judged transient or unavailable alike).
    fn from(error: sluice_target::DatabaseError) -> Self {
        OperationError::Store(error.into())
    }
}

impl OperationError {
    /// True when the work ran out of time: the runtime's sub-batch timer, a
    /// PostgreSQL statement timeout (SQLSTATE 57014) or lock timeout (55P03).
    /// Less work per attempt is what helps these.
    pub fn is_timeout(&self) -> bool {
        match self {
            OperationError::TimedOut(_) => true,
            OperationError::Store(StoreError::Database(e)) => e
                .as_database_error()
                .is_some_and(|d| matches!(d.code().as_deref(), Some("57014" | "55P03"))),
            _ => false,
        }
    }

    /// True when the caller's input is at fault and nothing was changed.
    pub fn is_bad_input(&self) -> bool {
        match self {
            OperationError::Unsafe(_)
            | OperationError::UnknownKind { .. }
            | OperationError::Arguments(_)
            | OperationError::Expression(_)
            | OperationError::Spec(_)
            | OperationError::InvalidSql(_)
            | OperationError::NotRevertible(_) => true,
            OperationError::Target(e) => e.is_bad_input(),
            OperationError::Store(e) => e.is_bad_input(),
            OperationError::OnTarget { source, .. } => source.is_bad_input(),
            OperationError::InBulk { source, .. } => source.is_bad_input(),
            OperationError::TimedOut(_) | OperationError::Failed(_) => false,
        }
    }

    /// True when a database could not be reached or used for now: the
    /// store unavailable, or a target apart from it that this worker could
    /// not open at all (unreachable, or refusing this worker's password,
    /// which another worker may have). Not the operation's fault, so it is
    /// waited out rather than counted as a failure.
    pub fn is_unavailable(&self) -> bool {
        match self {
            OperationError::Store(e) => e.is_unavailable(),
            OperationError::OnTarget { .. } => true,
            _ => false,
        }
    }
}
