//! `revert`: the operation that puts back what an operation run with
//! `--undo` changed, and [`revert`], which enqueues it from that
//! operation's arguments.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sluice_store::{
    Enqueued, Event, Expected, OperationRecord, OperationStatus, Store, StoreError,
};
use sluice_target::{Ident, KeptPartitions, Statement, UndoTable};

use super::undo::{keys_of, run_counting_first, undo_of};
use super::{UpdateInBatches, UpdateInBatchesArguments};
use crate::batching::range_predicate;
use crate::enqueue::EnqueueOptions;
use crate::error::OperationError;
use crate::operation::{Operation, Registry};
use crate::shape::Shape;
use crate::sub_batch::{Bounds, SubBatch, SubBatchRows};

/// `revert`: puts back the values an operation run with `--undo` replaced,
/// in ranges of its undo table's key. Each sub-batch, in one transaction
/// with its progress record, restores the rows of its range that still
/// hold the values the operation wrote (every row, with `force`) and marks
/// each row of the range `reverted` or `conflict`: a row changed again
/// since is left as it is, counted and listed ([`super::undo_summary`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Revert;

/// Arguments of [`Revert`], filled by [`revert`] from the operation reverted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevertArguments {
    /// The operation whose changes are put back.
    pub of: i64,
    /// Its table.
    pub table: String,
    /// Its key (one column, or several separated by commas).
    pub key: String,
    /// Its undo table.
    pub undo_table: String,
    /// The columns it changed, as the table names them.
    pub columns: Vec<String>,
    /// Put back rows changed again since, too (an update's revert).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
    /// Where the rows moved out are (the archive table of `archive-rows`,
    /// the undo table itself for `delete-aged-rows`): the revert moves
    /// them back into `table`, copying `columns`. `None`: an update's
    /// revert, which puts values back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_in: Option<String>,
    /// The operation detached and kept whole partitions beside its undo
    /// table (`delete-aged-rows --undo` on PostgreSQL), recorded in
    /// `<undo table>_parts`: [`revert`] attaches them back before any row
    /// moves back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kept_partitions: bool,
}

impl RevertArguments {
    /// The undo table these arguments walk: an update's (images of
    /// `columns`) or a move's (keys alone).
    pub(super) fn undo_table(&self) -> Result<UndoTable, OperationError> {
        match &self.held_in {
            Some(_) => keys_of(&self.table, &self.key, &self.undo_table),
            None => undo_of(&self.table, &self.key, &self.undo_table, &self.columns),
        }
    }

    /// The record of the partitions the operation kept, when it kept any.
    pub(super) fn kept(&self) -> Result<Option<KeptPartitions>, OperationError> {
        if !self.kept_partitions {
            return Ok(None);
        }
        let live = Ident::parse(&self.table)?;
        Ok(Some(KeptPartitions::of(
            &live,
            &Ident::parse(&self.undo_table)?,
        )?))
    }
}

/// The revert of an operation of `kind` with `arguments` (stored as text):
/// `None` when it ran without `--undo`. Errors: a kind that keeps no undo;
/// `force` on a move (a row whose key is live again is never overwritten).
pub(super) fn what_reverts(
    kind: &str,
    arguments: &str,
    id: i64,
    force: bool,
) -> Result<Option<RevertArguments>, OperationError> {
    let unreadable = |e: serde_json::Error| {
        OperationError::Arguments(format!("operation {id}'s arguments: {e}"))
    };
    let reverted = if kind == UpdateInBatches.kind() {
        let a: UpdateInBatchesArguments = serde_json::from_str(arguments).map_err(unreadable)?;
        a.undo_table.map(|undo_table| RevertArguments {
            of: id,
            table: a.table,
            key: a.key,
            undo_table,
            columns: a.undo_columns,
            force,
            held_in: None,
            kept_partitions: false,
        })
    } else if kind == super::ArchiveRows.kind() {
        let a: super::ArchiveRowsArguments = serde_json::from_str(arguments).map_err(unreadable)?;
        a.undo_table.map(|undo_table| RevertArguments {
            of: id,
            table: a.table,
            key: a.key,
            undo_table,
            columns: a.columns,
            force,
            held_in: Some(a.into),
            kept_partitions: false,
        })
    } else if kind == super::DeleteAgedRows.kind() {
        let a: super::DeleteAgedRowsArguments =
            serde_json::from_str(arguments).map_err(unreadable)?;
        a.undo_table.map(|undo_table| RevertArguments {
            of: id,
            table: a.table,
            key: a.key,
            held_in: Some(undo_table.clone()),
            undo_table,
            columns: a.undo_columns,
            force,
            kept_partitions: a.drop_partitions,
        })
    } else {
        return Err(OperationError::NotRevertible(format!(
            "operation {id} is {kind}, which keeps no undo (update-in-batches, archive-rows and \
             delete-aged-rows do, run with --undo)"
        )));
    };
    if force && reverted.as_ref().is_some_and(|r| r.held_in.is_some()) {
        return Err(OperationError::NotRevertible(format!(
            "--force puts back values over rows changed since; operation {id} moved rows, and a \
             row whose key is live again is never overwritten"
        )));
    }
    Ok(reverted)
}

#[async_trait]
impl Operation for Revert {
    type Arguments = RevertArguments;

    fn kind(&self) -> &'static str {
        "revert"
    }

    fn shape(&self, arguments: &Self::Arguments) -> Result<Shape, OperationError> {
        let key = super::key_columns(&arguments.key)?;
        let key: Vec<&str> = key.iter().map(String::as_str).collect();
        arguments.undo_table()?;
        for column in &arguments.columns {
            Ident::parse(column)?;
        }
        if let Some(held_in) = &arguments.held_in {
            Ident::parse(held_in)?;
        }
        Shape::keyset(&arguments.undo_table, &key)
    }

    fn other_tables_written(&self, arguments: &Self::Arguments) -> Vec<String> {
        let mut tables = vec![arguments.table.clone()];
        tables.extend(
            arguments
                .held_in
                .iter()
                .filter(|held_in| **held_in != arguments.undo_table)
                .cloned(),
        );
        tables
    }

    /// The live table: the undo table is Sluice's alone, and its dead
    /// rows and vacuum slow no query of the application's.
    fn paced_by(&self, arguments: &Self::Arguments) -> Option<String> {
        Some(arguments.table.clone())
    }

    fn columns_written(&self, _: &Self::Arguments) -> Vec<String> {
        vec!["sluice_state".into()]
    }

    /// An update's revert as one statement where the database has one
    /// (PostgreSQL), sent with the sub-batch's record; else `None`.
    fn sub_batch_statement(
        &self,
        arguments: &Self::Arguments,
        rows: &SubBatchRows<'_>,
    ) -> Result<Option<Statement>, OperationError> {
        if arguments.held_in.is_some() {
            return Ok(None);
        }
        let undo = arguments.undo_table()?;
        let Bounds::Range { start, end } = rows.bounds().clone() else {
            return Ok(None);
        };
        let range = |statement: Statement, key: &[Ident]| {
            range_predicate(statement, key, start.as_ref(), Some(&end))
        };
        let dialect = rows.shape().dialect();
        Ok(dialect.restore_in_one_statement(&undo, arguments.force, &range))
    }

    async fn run(
        &self,
        arguments: &Self::Arguments,
        sub_batch: &mut SubBatch<'_>,
    ) -> Result<u64, OperationError> {
        let undo = arguments.undo_table()?;
        let Bounds::Range { start, end } = sub_batch.bounds().clone() else {
            return Err(OperationError::Failed(
                "revert runs over ranges of its undo table's key".into(),
            ));
        };
        let range = |statement: Statement, key: &[Ident]| {
            range_predicate(statement, key, start.as_ref(), Some(&end))
        };
        let Some(held_in) = &arguments.held_in else {
            let statements = undo.restore(sub_batch.dialect(), arguments.force, &range);
            return run_counting_first(sub_batch, &statements).await;
        };
        let held_in = Ident::parse(held_in)?;
        let columns = arguments
            .columns
            .iter()
            .map(|c| Ident::parse(c))
            .collect::<Result<Vec<_>, _>>()?;
        let overriding = sub_batch.dialect().insert_overriding();
        let back = undo.move_back(&held_in, &columns, overriding, &range);
        sub_batch.execute(&back.conflict).await?;
        let copied = sub_batch.execute(&back.copy).await?;
        let deleted = match &back.delete {
            Some(delete) => sub_batch.execute(delete).await?,
            None => copied,
        };
        if copied != deleted {
            return Err(OperationError::Failed(format!(
                "revert copied {copied} rows back into `{}` but found {deleted} to delete from \
                 `{held_in}` (rows changed meanwhile); rolled back, to be tried again",
                arguments.table
            )));
        }
        sub_batch.execute(&back.reverted).await?;
        Ok(copied)
    }
}

/// How a revert of `original` runs unless told otherwise: in batches and
/// sub-batches of the sizes `original` ran with, and with its pause; a
/// size given replaces the original's.
pub fn revert_options(
    original: &OperationRecord,
    batch_size: Option<i64>,
    sub_batch_size: Option<i64>,
) -> EnqueueOptions {
    let state = &original.state;
    EnqueueOptions {
        batch_size: batch_size.unwrap_or(state.batch_size),
        sub_batch_size: sub_batch_size.unwrap_or(state.sub_batch_size),
        pause: std::time::Duration::from_millis(u64::try_from(state.pause_ms).unwrap_or(0)),
        ..EnqueueOptions::default()
    }
}

/// Enqueues the revert of operation `id` ([`Revert`]), with `force` putting
/// back rows changed again since too, and notes it in `id`'s log
/// ([`Event::Reverted`]). A revert of `id` already active is returned as it
/// is (`created: false`).
///
/// Errors ([`OperationError::NotRevertible`], nothing enqueued): no such
/// operation; a revert; a kind that keeps no undo, or an operation run
/// without `--undo`; one pending, running, paused or failed (cancel a
/// failed one first); one reverted by a finished revert; an undo table
/// removed since. Those of [`crate::enqueue()`] otherwise.
pub async fn revert(
    store: &Store,
    registry: &Registry,
    id: i64,
    force: bool,
    options: &EnqueueOptions,
) -> Result<Enqueued, OperationError> {
    let refuse = |why: String| Err(OperationError::NotRevertible(why));
    let record = match store.operation(id).await {
        Ok(record) => record,
        Err(StoreError::NotFound(_)) => return refuse(format!("there is no operation {id}")),
        Err(e) => return Err(e.into()),
    };
    let state = &record.state;
    if state.kind == Revert.kind() {
        return refuse(format!(
            "operation {id} is itself a revert; a revert is not reverted"
        ));
    }
    let Some(mut arguments) = what_reverts(state.kind.as_str(), &state.arguments, id, force)?
    else {
        return refuse(format!(
            "operation {id} ran without --undo: it kept nothing to put back"
        ));
    };
    match state.status {
        OperationStatus::Finished | OperationStatus::Cancelled => {}
        OperationStatus::Failed => {
            return refuse(format!(
                "operation {id} failed: retry it to the end, or cancel it (sluice cancel {id}), \
                 then revert what it did"
            ));
        }
        status => {
            return refuse(format!(
                "operation {id} is {}: let it finish, or cancel it (sluice cancel {id}), \
                 then revert",
                status.as_str()
            ));
        }
    }
    for event in store.events(id, 0).await? {
        if let Event::Reverted { by } = event.event {
            let earlier = store.operation(by).await?;
            match earlier.state.status {
                OperationStatus::Finished => {
                    return refuse(format!(
                        "operation {id} was reverted already, by operation {by}"
                    ));
                }
                status if !status.is_terminal() => {
                    return Ok(Enqueued {
                        id: by,
                        created: false,
                    });
                }
                // A cancelled or failed revert: a new one puts back the rest.
                _ => {}
            }
        }
    }
    let undo = arguments.undo_table()?;
    if store.target().table_columns(undo.undo()).await?.is_empty() {
        return refuse(format!(
            "the undo table {} of operation {id} is gone (pruned)",
            arguments.undo_table
        ));
    }
    if arguments.held_in.is_some() {
        // Moved rows go back whole: every column but those the live
        // table computes itself (its key, whatever computes it, included).
        let live = Ident::parse(&arguments.table)?;
        let generated = store.target().generated_columns(&live).await?;
        let key = super::key_columns(&arguments.key)?;
        arguments
            .columns
            .retain(|c| key.contains(c) || !generated.iter().any(|g| g.eq_ignore_ascii_case(c)));
    }
    if let Some(kept) = arguments.kept()? {
        attach_kept_partitions(store, &arguments, &kept).await?;
    }
    let arguments = serde_json::to_value(arguments).expect("arguments serialise");
    let enqueued =
        crate::enqueue::enqueue(store, registry, Revert.kind(), &arguments, options).await?;
    if enqueued.created {
        store
            .append(
                id,
                Expected::Any,
                None,
                &[Event::Reverted { by: enqueued.id }],
            )
            .await?;
    }
    Ok(enqueued)
}

/// How many times an attach whose lock was not granted is tried.
const ATTACH_ATTEMPTS: u32 = 8;

/// Attaches back every partition the operation `arguments` reverts kept
/// whole, before any of its rows moves back (a row whose range is still
/// detached would have no partition to go to). Each attach commits with
/// the removal of its record ([`sluice_target::Target::attach_kept_partition`]),
/// so a revert run again after a failure or a crash attaches the rest.
/// Each waits for its locks a short while only, and is tried again with a
/// backoff while they are not granted.
///
/// Errors: the locks not granted after [`ATTACH_ATTEMPTS`]; an attach the
/// database refuses (a default partition holding rows in the kept
/// partition's range): the error names the kept table, and nothing of it
/// changed.
async fn attach_kept_partitions(
    store: &Store,
    arguments: &RevertArguments,
    kept: &KeptPartitions,
) -> Result<(), OperationError> {
    let mut attempts = 0;
    let mut attached = 0;
    loop {
        match store.target().attach_kept_partition(kept).await {
            Ok(Some(partition)) => {
                attempts = 0;
                attached += 1;
                tracing::info!(
                    table = %arguments.table,
                    partition = %partition.name,
                    rows = partition.rows,
                    "attached back a partition operation {} kept", arguments.of
                );
            }
            Ok(None) => return Ok(()),
            Err(e) if e.is_transient() && attempts + 1 < ATTACH_ATTEMPTS => {
                attempts += 1;
                let backoff = std::time::Duration::from_millis(250 << attempts.min(5));
                tokio::time::sleep(backoff).await;
            }
            Err(e) => {
                let first = store.target().fetch_cursor(&kept.list(), 1).await?;
                let first = match first.as_ref().and_then(|c| c.0.first()) {
                    Some(sluice_target::CursorValue::Text(kept)) => kept.clone(),
                    _ => String::new(),
                };
                return Err(OperationError::Failed(format!(
                    "operation {} kept partitions of `{}`; {attached} were attached back, but \
                     not the kept table `{first}` ({e}); no row was moved back: the rest stay \
                     kept, listed in `{}`, and `sluice revert {}` tries again",
                    arguments.of,
                    arguments.table,
                    kept.record(),
                    arguments.of
                )));
            }
        }
    }
}

/// True when a revert of operation `id` may still run: pending, running,
/// paused, or failed (a retry goes on).
pub(super) async fn reverting(store: &Store, id: i64) -> Result<bool, OperationError> {
    for event in store.events(id, 0).await? {
        if let Event::Reverted { by } = event.event
            && !matches!(
                store.operation(by).await?.state.status,
                OperationStatus::Finished | OperationStatus::Cancelled
            )
        {
            return Ok(true);
        }
    }
    Ok(false)
}
