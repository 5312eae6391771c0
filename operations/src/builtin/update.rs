//! `update-in-batches`: an operator's `SET` over the rows matching an
//! operator's `WHERE`, in ranges of a unique key, each row once (with
//! `--undo`, keeping what it replaced).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sluice_target::Statement;

use super::{key_columns, undo};
use crate::error::OperationError;
use crate::operation::Operation;
use crate::shape::{Filter, Shape};
use crate::sub_batch::{SubBatch, SubBatchRows};

/// `update-in-batches`: `UPDATE table SET <set> WHERE <where>` in ranges of
/// `key`, each matching row updated once.
#[derive(Debug, Clone, Copy, Default)]
pub struct UpdateInBatches;

/// Arguments of [`UpdateInBatches`]. A field it does not know is refused,
/// not ignored: a condition sent as `condition` instead of `where` would
/// otherwise update every row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateInBatchesArguments {
    /// The table.
    pub table: String,
    /// The unique, indexed column the ranges walk (usually the primary
    /// key), or several separated by commas (`id,created_at`) that
    /// together name each row once, walked in that order.
    pub key: String,
    /// The operator's SET list, e.g. `counter = counter + 1`.
    pub set: String,
    /// The operator's condition (`None`: every row).
    #[serde(rename = "where")]
    pub condition: Option<String>,
    /// Keep each changed row's values before and after the change in an
    /// undo table, in the sub-batch's transaction, so that [`super::revert`] can
    /// put them back. Enqueue it with [`UpdateInBatches::enqueue`] (or
    /// [`super::enqueue_kind`]), which creates the table.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undo: bool,
    /// The undo table, named and created at enqueue (never given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_table: Option<String>,
    /// The columns the undo table keeps (those `set` writes, as the table
    /// spells them), filled at enqueue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undo_columns: Vec<String>,
    /// How long after the operation ends `sluice prune` keeps its undo
    /// table (`7d`); by default as long as prune's `--older-than`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_undo: Option<String>,
}

#[async_trait]
impl Operation for UpdateInBatches {
    type Arguments = UpdateInBatchesArguments;

    fn kind(&self) -> &'static str {
        "update-in-batches"
    }

    fn shape(&self, arguments: &Self::Arguments) -> Result<Shape, OperationError> {
        let columns = key_columns(&arguments.key)?;
        let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
        let shape = Shape::keyset(&arguments.table, &columns)?;
        shape.checked_set(&arguments.set)?;
        undo::check_keep_undo(arguments.undo, arguments.keep_undo.as_deref())?;
        if let Some(undo_table) = &arguments.undo_table {
            undo::undo_of(
                &arguments.table,
                &arguments.key,
                undo_table,
                &arguments.undo_columns,
            )?;
        }
        if arguments.undo != arguments.undo_table.is_some() {
            return Err(OperationError::Arguments(
                "update-in-batches --undo needs the undo table its enqueue creates \
                 (UpdateInBatches::enqueue)"
                    .into(),
            ));
        }
        match &arguments.condition {
            Some(condition) => shape.scope(Filter::new().expression(condition)),
            None => Ok(shape),
        }
    }

    /// The `UPDATE` alone; with `--undo`, the statement that keeps the
    /// images and updates where the database has one (PostgreSQL), else
    /// `None`: [`Operation::run`] runs the several it takes.
    fn sub_batch_statement(
        &self,
        arguments: &Self::Arguments,
        rows: &SubBatchRows<'_>,
    ) -> Result<Option<Statement>, OperationError> {
        if arguments.undo {
            return undo::keep_and_update_statement(arguments, rows);
        }
        rows.update_expression_statement(&arguments.set).map(Some)
    }

    async fn run(
        &self,
        arguments: &Self::Arguments,
        sub_batch: &mut SubBatch<'_>,
    ) -> Result<u64, OperationError> {
        if arguments.undo {
            return undo::keep_and_update(arguments, sub_batch).await;
        }
        sub_batch.update_expression(&arguments.set).await
    }

    fn other_tables_written(&self, arguments: &Self::Arguments) -> Vec<String> {
        arguments.undo_table.iter().cloned().collect()
    }

    /// The request as asked: the undo table's name, chosen at each
    /// enqueue, is not part of it.
    fn identity(&self, arguments: &Self::Arguments) -> serde_json::Value {
        let asked = UpdateInBatchesArguments {
            undo_table: None,
            undo_columns: Vec::new(),
            ..arguments.clone()
        };
        serde_json::to_value(asked).unwrap_or_default()
    }

    fn columns_written(&self, arguments: &Self::Arguments) -> Vec<String> {
        sluice_target::Assignments::parse(&arguments.set)
            .map(|set| set.columns().to_vec())
            .unwrap_or_default()
    }
}
