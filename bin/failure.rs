//! How a command fails: bad input (exit 2) or a runtime failure (exit 1),
//! always as one line on stderr, never a panic or a backtrace.

use std::process::ExitCode;

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

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound(_)
            | StoreError::UnsupportedUrl { .. }
            | StoreError::InvalidSpec(_)
            | StoreError::Illegal { .. } => Failure::BadInput(error.to_string()),
            StoreError::Database(sqlx::Error::Configuration(_)) => {
                Failure::BadInput(format!("invalid database URL: {error}"))
            }
            other => Failure::Runtime(other.into()),
        }
    }
}
