//! The built-in operations an operator runs from the command line.
//!
//! - [`DeleteAgedRows`]: deletes rows whose timestamp column is older than a
//!   cutoff, `LIMIT n` at a time until fewer than `n` match (the loop
//!   strategy: deleted rows leave the scope, new rows are young and never
//!   enter it).
//! - [`UpdateInBatches`]: runs an operator's `SET` over the rows matching an
//!   operator's `WHERE`, in ranges of a unique key, each row once.
//! - [`ArchiveRows`]: moves the rows matching an operator's `WHERE` into an
//!   archive table, in ranges of a unique key: each sub-batch copies and
//!   deletes its rows in the transaction that records its progress, so
//!   every row ends in exactly one of the two tables.

use sluice_target::Ident;

use crate::error::OperationError;

mod archive;
mod delete;
mod revert;
mod text_times;
mod undo;
mod update;
mod zoneless;

pub use archive::{ArchiveRows, ArchiveRowsArguments, enqueue_kind};
pub use delete::{Cutoff, DeleteAgedRows, DeleteAgedRowsArguments};
pub use revert::{Revert, RevertArguments, revert, revert_options};
pub use text_times::{EPOCH_SECONDS_CEILING, EPOCH_SECONDS_FLOOR};
pub use undo::{PrunedUndo, UndoSummary, prune_undo, undo_summary};
pub use update::{UpdateInBatches, UpdateInBatchesArguments};

/// The columns of a `--key` list: one column, or several separated by
/// commas (`id,created_at`) that together name each row once. Each must be
/// a plain identifier; an empty or repeated one is refused.
pub fn key_columns(key: &str) -> Result<Vec<String>, OperationError> {
    let columns: Vec<String> = key.split(',').map(|c| c.trim().to_owned()).collect();
    for (i, column) in columns.iter().enumerate() {
        if column.is_empty() {
            return Err(OperationError::Arguments(format!(
                "key `{key}` has an empty column: name the key's columns separated by commas \
                 (id,created_at)"
            )));
        }
        Ident::parse(column)?;
        if columns[..i].contains(column) {
            return Err(OperationError::Arguments(format!(
                "key `{key}` names column `{column}` twice"
            )));
        }
    }
    Ok(columns)
}

/// The key's columns (`--key a,b`) as identifiers.
pub(crate) fn key_idents(key: &str) -> Result<Vec<Ident>, OperationError> {
    key_columns(key)?
        .iter()
        .map(|column| Ident::parse(column).map_err(OperationError::from))
        .collect()
}

#[cfg(test)]
mod tests;
