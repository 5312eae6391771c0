//! `--undo` and `revert`: an `update-in-batches` run with `--undo` keeps
//! each changed row's values before and after the change in an undo table,
//! in the sub-batch's own transaction; `revert` enqueues an operation that
//! walks that table in ranges of the key and puts the before-images back,
//! exactly once, over the rows still holding what the operation wrote.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sluice_store::{Enqueued, Event, Expected, OperationStatus, Store, StoreError};
use sluice_target::{Assignments, CursorValue, Ident, Statement, UndoTable};

use super::{UpdateInBatches, UpdateInBatchesArguments, key_idents};
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
/// since is left as it is, counted and listed ([`undo_summary`]).
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
}

impl RevertArguments {
    /// The undo table these arguments walk: an update's (images of
    /// `columns`) or a move's (keys alone).
    fn undo_table(&self) -> Result<UndoTable, OperationError> {
        match &self.held_in {
            Some(_) => keys_of(&self.table, &self.key, &self.undo_table),
            None => undo_of(&self.table, &self.key, &self.undo_table, &self.columns),
        }
    }
}

/// The revert of an operation of `kind` with `arguments` (stored as text):
/// `None` when it ran without `--undo`. Errors: a kind that keeps no undo;
/// `force` on a move (a row whose key is live again is never overwritten).
fn what_reverts(
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

impl UpdateInBatches {
    /// Enqueues `update-in-batches` with `arguments`. With `undo`, every
    /// check runs first, then its undo table is created beside the live
    /// table (named `<table>_undo_<time>`), then the operation is enqueued
    /// naming it; a refusal, or an identical operation already active,
    /// drops the new table again, so nothing is left behind.
    pub async fn enqueue(
        store: &Store,
        registry: &Registry,
        arguments: &serde_json::Value,
        options: &EnqueueOptions,
    ) -> Result<Enqueued, OperationError> {
        const KIND: &str = "update-in-batches";
        let mut parsed: UpdateInBatchesArguments = serde_json::from_value(arguments.clone())
            .map_err(|e| OperationError::Arguments(format!("{KIND}: {e}")))?;
        if !parsed.undo {
            return crate::enqueue::enqueue(store, registry, KIND, arguments, options).await;
        }
        if parsed.undo_table.is_some() || !parsed.undo_columns.is_empty() {
            return Err(OperationError::Arguments(
                "update-in-batches: undo_table and undo_columns are named at enqueue, not given"
                    .into(),
            ));
        }
        let plain = UpdateInBatchesArguments {
            undo: false,
            keep_undo: None,
            ..parsed.clone()
        };
        let plain = serde_json::to_value(plain).expect("arguments serialise");
        crate::enqueue::check(store, registry, KIND, &plain, options).await?;
        let undo = create_undo_table(store, &parsed).await?;
        parsed.undo_table = Some(undo.undo().to_string());
        parsed.undo_columns = undo.columns().iter().map(|c| c.name().to_owned()).collect();
        let arguments = serde_json::to_value(parsed).expect("arguments serialise");
        let enqueued = crate::enqueue::enqueue(store, registry, KIND, &arguments, options).await;
        if !matches!(enqueued, Ok(Enqueued { created: true, .. })) {
            store.target().execute(&undo.drop_statement()).await?;
        }
        enqueued
    }
}

/// Runs one sub-batch of `update-in-batches --undo`: keeps the images of
/// its rows and changes them ([`UndoTable::keep_and_update`]).
pub(super) async fn keep_and_update(
    arguments: &UpdateInBatchesArguments,
    sub_batch: &mut SubBatch<'_>,
) -> Result<u64, OperationError> {
    let statements = keep_and_update_statements(arguments, sub_batch.rows())?;
    run_counting_first(sub_batch, &statements).await
}

/// The one statement of a sub-batch of `update-in-batches --undo`, where
/// the dialect has one ([`sluice_target::Dialect::keeps_and_updates_in_one_statement`]).
pub(super) fn keep_and_update_statement(
    arguments: &UpdateInBatchesArguments,
    rows: &SubBatchRows<'_>,
) -> Result<Option<Statement>, OperationError> {
    if !rows.shape().dialect().keeps_and_updates_in_one_statement() {
        return Ok(None);
    }
    Ok(keep_and_update_statements(arguments, rows)?.pop())
}

/// The statements of a sub-batch of `update-in-batches --undo` over `rows`.
fn keep_and_update_statements(
    arguments: &UpdateInBatchesArguments,
    rows: &SubBatchRows<'_>,
) -> Result<Vec<Statement>, OperationError> {
    let (Some(undo_table), false) = (&arguments.undo_table, arguments.undo_columns.is_empty())
    else {
        return Err(OperationError::Failed(
            "update-in-batches --undo has no undo table: enqueue it with UpdateInBatches::enqueue"
                .into(),
        ));
    };
    let undo = undo_of(
        &arguments.table,
        &arguments.key,
        undo_table,
        &arguments.undo_columns,
    )?;
    let set = rows.shape().checked_set(&arguments.set)?;
    let Bounds::Range { start, end } = rows.bounds().clone() else {
        return Err(OperationError::Failed(
            "update-in-batches runs over ranges of its key".into(),
        ));
    };
    let range = |statement: Statement, key: &[Ident]| {
        range_predicate(statement, key, start.as_ref(), Some(&end))
    };
    let selected = |head: Statement| rows.rows_where(head);
    Ok(undo.keep_and_update(rows.shape().dialect(), &set, &selected, &range))
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

/// Refuses a `keep_undo` that is not a duration, or one given without
/// `undo`.
pub(super) fn check_keep_undo(undo: bool, keep_undo: Option<&str>) -> Result<(), OperationError> {
    let Some(keep) = keep_undo else {
        return Ok(());
    };
    if !undo {
        return Err(OperationError::Arguments(
            "keep_undo (--keep-undo) says how long an undo table is kept; it needs undo (--undo)"
                .into(),
        ));
    }
    crate::duration::parse_duration(keep)
        .map(|_| ())
        .map_err(|e| OperationError::Arguments(format!("keep_undo: {e}")))
}

/// An undo table [`prune_undo`] dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrunedUndo {
    /// The operation it kept the undo of.
    pub operation: i64,
    /// The table.
    pub table: String,
}

/// Drops the undo tables of the operations run with `--undo` that ended
/// (finished or cancelled) more than their `keep_undo`, else `older_than`,
/// before `now`, unless a revert of them is pending, running or paused.
/// A failed operation keeps its table: a retry goes on writing it. After
/// this its revert is refused ("pruned").
pub async fn prune_undo(
    store: &Store,
    older_than: std::time::Duration,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<PrunedUndo>, OperationError> {
    let mut pruned = Vec::new();
    for kind in [
        UpdateInBatches.kind(),
        super::ArchiveRows.kind(),
        super::DeleteAgedRows.kind(),
    ] {
        for status in [OperationStatus::Finished, OperationStatus::Cancelled] {
            let ended = store
                .list(&sluice_store::ListFilter {
                    status: Some(status),
                    kind: Some(kind.to_owned()),
                    limit: Some(i64::MAX),
                    ..Default::default()
                })
                .await?;
            for record in ended {
                let state = &record.state;
                let Ok(Some(reverted)) = what_reverts(kind, &state.arguments, record.id, false)
                else {
                    continue;
                };
                let keep = serde_json::from_str::<serde_json::Value>(&state.arguments)
                    .ok()
                    .and_then(|a| a.get("keep_undo")?.as_str().map(str::to_owned))
                    .and_then(|keep| crate::duration::parse_duration(&keep).ok())
                    .unwrap_or(older_than);
                let keep = chrono::Duration::from_std(keep).unwrap_or(chrono::Duration::MAX);
                let until = state
                    .finished_at
                    .unwrap_or(i64::MAX)
                    .saturating_add(keep.num_milliseconds());
                if until > now.timestamp_millis() || reverting(store, record.id).await? {
                    continue;
                }
                let undo = reverted.undo_table()?;
                if store.target().table_columns(undo.undo()).await?.is_empty() {
                    continue;
                }
                store.target().execute(&undo.drop_statement()).await?;
                pruned.push(PrunedUndo {
                    operation: record.id,
                    table: reverted.undo_table,
                });
            }
        }
    }
    Ok(pruned)
}

/// True when a revert of operation `id` may still run: pending, running,
/// paused, or failed (a retry goes on).
async fn reverting(store: &Store, id: i64) -> Result<bool, OperationError> {
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

/// What an undo table holds: the rows kept, and how a revert left them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UndoSummary {
    /// The undo table.
    pub table: String,
    /// Rows whose images it keeps.
    pub rows: i64,
    /// Rows a revert put back.
    pub reverted: i64,
    /// Rows a revert left alone: changed again, or deleted, since.
    pub conflicts: i64,
    /// The keys of the first of those, in key order (at most 10).
    pub first_conflicts: Vec<String>,
}

/// The [`UndoSummary`] of an operation's undo table, for
/// `update-in-batches --undo` and its `revert`s (`None` for any other, or
/// when the table is gone).
pub async fn undo_summary(
    store: &Store,
    kind: &str,
    arguments: &str,
) -> Result<Option<UndoSummary>, OperationError> {
    let undo = if kind == Revert.kind() {
        let Ok(a) = serde_json::from_str::<RevertArguments>(arguments) else {
            return Ok(None);
        };
        a.undo_table()?
    } else {
        match what_reverts(kind, arguments, 0, false) {
            Ok(Some(a)) => a.undo_table()?,
            _ => return Ok(None),
        }
    };
    if store.target().table_columns(undo.undo()).await?.is_empty() {
        return Ok(None);
    }
    let counts = store.target().fetch_cursor(&undo.summary(), 3).await?;
    let count = |i: usize| match counts.as_ref().and_then(|c| c.0.get(i)) {
        Some(CursorValue::Int(n)) => *n,
        _ => 0,
    };
    let mut first_conflicts = Vec::new();
    if count(2) > 0 {
        let conflicts = undo.conflicts(10);
        for key in store
            .target()
            .fetch_cursors(&conflicts, undo.key().len())
            .await?
        {
            first_conflicts.push(key.to_string());
        }
    }
    Ok(Some(UndoSummary {
        table: undo.undo().to_string(),
        rows: count(0),
        reverted: count(1),
        conflicts: count(2),
        first_conflicts,
    }))
}

/// Creates the undo table of `arguments` (an `update-in-batches` with
/// `--undo`): beside its live table, named `<table>_undo_<time>`, keeping
/// the columns its `SET` writes, as the table spells them.
async fn create_undo_table(
    store: &Store,
    arguments: &UpdateInBatchesArguments,
) -> Result<UndoTable, OperationError> {
    let live = Ident::parse(&arguments.table)?;
    let named = store.target().table_columns(&live).await?;
    let set = Assignments::parse(&arguments.set)?;
    let mut columns = Vec::new();
    for written in set.columns() {
        let spelled = named
            .iter()
            .find(|c| c.eq_ignore_ascii_case(written))
            .ok_or_else(|| {
                OperationError::Arguments(format!(
                    "`{}` has no column `{written}` to keep for --undo",
                    arguments.table
                ))
            })?;
        if !columns.contains(spelled) {
            columns.push(spelled.clone());
        }
    }
    let name = undo_table_name(store, &live).await?;
    let undo = undo_of(&arguments.table, &arguments.key, &name, &columns)?;
    let mut declared = Vec::new();
    for column in undo.key().iter().chain(undo.columns()) {
        declared.push(
            store
                .target()
                .column_type(&live, column.name())
                .await?
                .unwrap_or_default(),
        );
    }
    create(store, &undo, &declared).await?;
    Ok(undo)
}

/// A new undo table's name for `live`: `<table>_undo_<time>`, in the
/// schema `live` is found in (PostgreSQL), never in Sluice's own.
async fn undo_table_name(store: &Store, live: &Ident) -> Result<String, OperationError> {
    let stamp = chrono::Utc::now().timestamp_millis();
    let base: String = live.name().chars().take(40).collect();
    let name = format!("{base}_undo_{}", radix36(stamp as u64));
    let schema = match live.schema() {
        Some(schema) => Some(schema.to_owned()),
        None => store.target().schema_of(live).await?,
    };
    Ok(match schema {
        Some(schema) => format!("{schema}.{name}"),
        None => name,
    })
}

/// Creates the undo table of `archive-rows --undo`: the keys of `table`'s
/// rows by `key`, and a state, beside `table`.
pub(super) async fn create_keys_table(
    store: &Store,
    table: &str,
    key: &str,
) -> Result<UndoTable, OperationError> {
    let live = Ident::parse(table)?;
    let name = undo_table_name(store, &live).await?;
    let undo = keys_of(table, key, &name)?;
    let mut declared = Vec::new();
    for column in undo.key() {
        declared.push(
            store
                .target()
                .column_type(&live, column.name())
                .await?
                .unwrap_or_default(),
        );
    }
    create(store, &undo, &declared).await?;
    Ok(undo)
}

/// Creates the undo table of `delete-aged-rows --undo`: a copy of
/// `table`'s columns (as an archive table is made) with a state, and a
/// unique key; returns its name and the columns copied.
pub(super) async fn create_rows_table(
    store: &Store,
    table: &str,
    key: &str,
) -> Result<(UndoTable, Vec<String>), OperationError> {
    let live = Ident::parse(table)?;
    let name = undo_table_name(store, &live).await?;
    let undo = keys_of(table, key, &name)?;
    let columns = store.target().table_columns(&live).await?;
    if columns.is_empty() {
        return Err(crate::target::TargetError::UnknownTable {
            table: table.to_owned(),
        }
        .into());
    }
    let dialect = store.backend().dialect();
    if dialect.create_table_like(undo.undo(), &live).is_none() {
        // Declared column by column, the key NOT NULL.
        let idents = columns
            .iter()
            .map(|c| Ident::parse(c))
            .collect::<Result<Vec<_>, _>>()?;
        let mut declared = Vec::new();
        for column in &columns {
            declared.push(
                store
                    .target()
                    .column_type(&live, column)
                    .await?
                    .unwrap_or_default(),
            );
        }
        let create = undo.declared_rows(&idents, &declared).ok_or_else(|| {
            OperationError::Arguments(format!(
                "a column type of `{table}` cannot be declared in an undo table"
            ))
        })?;
        store.target().execute(&create).await?;
        return Ok((undo, columns));
    }
    let copy = super::ArchiveRowsArguments {
        table: table.to_owned(),
        into: undo.undo().to_string(),
        key: key.to_owned(),
        condition: None,
        column: None,
        older_than: None,
        cutoff: None,
        columns: columns.clone(),
        undo: false,
        undo_table: None,
        keep_undo: None,
    };
    super::ArchiveRows::create_archive(store, &copy).await?;
    let state = Statement::new("ALTER TABLE ")
        .ident(undo.undo())
        .push(" ADD COLUMN ")
        .ident(&undo.state())
        .push(" CHAR(8)");
    if let Err(error) = store.target().execute(&state).await {
        let _ = store.target().execute(&undo.drop_statement()).await;
        return Err(error.into());
    }
    Ok((undo, columns))
}

/// Runs `undo`'s creating statements, dropping what the first made when a
/// later one fails.
async fn create(
    store: &Store,
    undo: &UndoTable,
    declared: &[String],
) -> Result<(), OperationError> {
    let dialect = store.backend().dialect();
    let create = undo.create(dialect, declared).ok_or_else(|| {
        OperationError::Arguments(format!(
            "a column type of `{}` cannot be declared in an undo table",
            undo.live()
        ))
    })?;
    for (i, statement) in create.iter().enumerate() {
        if let Err(error) = store.target().execute(statement).await {
            if i > 0 {
                let _ = store.target().execute(&undo.drop_statement()).await;
            }
            return Err(error.into());
        }
    }
    Ok(())
}

/// The keys-only [`UndoTable`] `undo_table` of `table`'s rows by `key`
/// (or the rows themselves, for `delete-aged-rows --undo`).
pub(super) fn keys_of(
    table: &str,
    key: &str,
    undo_table: &str,
) -> Result<UndoTable, OperationError> {
    UndoTable::keys_only(
        Ident::parse(table)?,
        Ident::parse(undo_table)?,
        key_idents(key)?,
    )
    .map_err(|e| OperationError::Arguments(e.to_string()))
}

/// The [`UndoTable`] of `undo_table` keeping `columns` of `table` by `key`.
pub(super) fn undo_of(
    table: &str,
    key: &str,
    undo_table: &str,
    columns: &[String],
) -> Result<UndoTable, OperationError> {
    let columns = columns
        .iter()
        .map(|c| Ident::parse(c))
        .collect::<Result<Vec<_>, _>>()?;
    UndoTable::new(
        Ident::parse(table)?,
        Ident::parse(undo_table)?,
        key_idents(key)?,
        columns,
    )
    .map_err(|e| OperationError::Arguments(e.to_string()))
}

/// Runs `statements` in order in the sub-batch's transaction; returns the
/// first one's count (the rows kept, or put back).
async fn run_counting_first(
    sub_batch: &mut SubBatch<'_>,
    statements: &[Statement],
) -> Result<u64, OperationError> {
    let mut counted = None;
    for statement in statements {
        let rows = sub_batch.execute(statement).await?;
        counted.get_or_insert(rows);
    }
    Ok(counted.unwrap_or(0))
}

/// `n` in base 36, lowercase: a short, sortable suffix.
fn radix36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}
