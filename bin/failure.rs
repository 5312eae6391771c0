//! How a command fails: bad input (exit 2) or a runtime failure (exit 1),
//! always as one line on stderr, never a panic or a backtrace.

use std::process::ExitCode;

use sluice_operations::OperationError;
use sluice_runtime::{ControlError, RuntimeError};
use sluice_store::StoreError;

/// A command's failure.
#[derive(Debug)]
pub enum Failure {
    /// The user asked for something that cannot be done as asked; nothing changed.
    BadInput(String),
    /// Something outside the user's input failed (the database, the machine).
    Runtime(anyhow::Error),
}

impl Failure {
    /// Prints the one-line message and returns the exit code.
    pub fn report(self) -> ExitCode {
        match self {
            Failure::BadInput(message) => {
                eprintln!("error: {message}");
                ExitCode::from(2)
            }
            Failure::Runtime(error) => {
                eprintln!("error: {error}");
                ExitCode::from(1)
            }
        }
    }
}

impl From<sluice_target::DatabaseError> for Failure {
    fn from(error: sluice_target::DatabaseError) -> Self {
        StoreError::from(error).into()
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Database(sqlx::Error::Configuration(_)) => {
                Failure::BadInput(format!("invalid database URL: {error}"))
            }
            e if e.is_bad_input() => Failure::BadInput(e.to_string()),
            e if e.is_read_only() => Failure::BadInput(format!(
                "the database is read-only, nothing was changed: point --database-url at one Sluice can write to ({e})"
            )),
            other => Failure::Runtime(other.into()),
        }
    }
}

impl From<OperationError> for Failure {
    fn from(error: OperationError) -> Self {
        if error.is_bad_input() {
            return Failure::BadInput(error.to_string());
        }
        match error {
            OperationError::Store(e) => e.into(),
            other => Failure::Runtime(other.into()),
        }
    }
}

impl From<RuntimeError> for Failure {
    fn from(error: RuntimeError) -> Self {
        match error {
            RuntimeError::Store(e) => e.into(),
            RuntimeError::Operation(e) => e.into(),
            RuntimeError::Control(e) => e.into(),
            RuntimeError::Replica(e) if e.is_bad_input() => Failure::BadInput(e.to_string()),
            e @ (RuntimeError::UnknownIndicator { .. } | RuntimeError::LatencyQuery(_)) => {
                Failure::BadInput(e.to_string())
            }
            // Only the operator's latency query makes the budget unreadable.
            RuntimeError::IndicatorUnreadable { ref id, .. }
                if id == sluice_runtime::latency::ID =>
            {
                Failure::BadInput(error.to_string())
            }
            other => Failure::Runtime(other.into()),
        }
    }
}

impl From<ControlError> for Failure {
    fn from(error: ControlError) -> Self {
        match error {
            ControlError::Store(e) => e.into(),
            other => Failure::BadInput(other.to_string()),
        }
    }
}

impl From<sluice_runtime::ScheduleError> for Failure {
    fn from(error: sluice_runtime::ScheduleError) -> Self {
        if error.is_bad_input() {
            return Failure::BadInput(error.to_string());
        }
        Failure::Runtime(error.into())
    }
}
