//! `--undo`: the undo tables an operation run with it keeps (created at
//! enqueue, written in each sub-batch's transaction), what `show` says of
//! them, and their retention (`prune`). `revert.rs` puts them back.

use serde::Serialize;
use sluice_store::{Enqueued, OperationStatus, Store};
use sluice_target::{
    Assignments, CursorValue, Ident, KeptPartition, KeptPartitions, Statement, UndoTable, radix36,
};

use super::revert::{Revert, RevertArguments, reverting, what_reverts};
use super::{UpdateInBatches, UpdateInBatchesArguments, key_idents};
use crate::batching::range_predicate;
use crate::enqueue::EnqueueOptions;
use crate::error::OperationError;
use crate::operation::{Operation, Registry};
use crate::sub_batch::{Bounds, SubBatch, SubBatchRows};

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
        enqueue_keeping(store, registry, KIND, &arguments, options, &undo, &[]).await
    }
}

/// Enqueues `kind` with `arguments`, which name the undo table `undo` just
/// created (and `also`, more tables created with it: a record of kept
/// partitions): they are dropped again unless a new operation was
/// enqueued (a refusal, or an identical operation already active, keeps
/// its own), so nothing is left behind.
pub(super) async fn enqueue_keeping(
    store: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &EnqueueOptions,
    undo: &UndoTable,
    also: &[Statement],
) -> Result<Enqueued, OperationError> {
    let enqueued = crate::enqueue::enqueue(store, registry, kind, arguments, options).await;
    if !matches!(enqueued, Ok(Enqueued { created: true, .. })) {
        for drop in also {
            store.target().execute(drop).await?;
        }
        store.target().execute(&undo.drop_statement()).await?;
    }
    enqueued
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
                // The kept partitions first: while the undo table is there,
                // a prune run again finds them.
                if let Some(kept) = reverted.kept()? {
                    for partition in kept_partitions(store, &kept).await? {
                        store
                            .target()
                            .execute(&KeptPartitions::drop_kept(&partition))
                            .await?;
                    }
                    store.target().execute(&kept.drop_statement()).await?;
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
    /// Partitions detached and kept whole beside it, not yet attached back
    /// (`delete-aged-rows --undo` on PostgreSQL): their kept names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept_partitions: Vec<String>,
    /// The rows those partitions held when they were detached.
    #[serde(skip_serializing_if = "is_zero")]
    pub kept_partition_rows: i64,
}

/// The [`UndoSummary`] of an operation's undo table, for
/// `update-in-batches --undo` and its `revert`s (`None` for any other, or
/// when the table is gone).
pub async fn undo_summary(
    store: &Store,
    kind: &str,
    arguments: &str,
) -> Result<Option<UndoSummary>, OperationError> {
    let reverted = if kind == Revert.kind() {
        let Ok(a) = serde_json::from_str::<RevertArguments>(arguments) else {
            return Ok(None);
        };
        a
    } else {
        match what_reverts(kind, arguments, 0, false) {
            Ok(Some(a)) => a,
            _ => return Ok(None),
        }
    };
    let undo = reverted.undo_table()?;
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
    let kept = match reverted.kept()? {
        Some(kept) => kept_partitions(store, &kept).await?,
        None => Vec::new(),
    };
    Ok(Some(UndoSummary {
        table: undo.undo().to_string(),
        rows: count(0),
        reverted: count(1),
        conflicts: count(2),
        first_conflicts,
        kept_partition_rows: kept.iter().map(|p| p.rows).sum(),
        kept_partitions: kept.into_iter().map(|p| p.kept.to_string()).collect(),
    }))
}

/// The partitions `kept` records, oldest kept name first.
async fn kept_partitions(
    store: &Store,
    kept: &KeptPartitions,
) -> Result<Vec<KeptPartition>, OperationError> {
    let mut partitions = Vec::new();
    for row in store.target().fetch_cursors(&kept.list(), 4).await? {
        let [
            CursorValue::Text(name),
            CursorValue::Text(was),
            CursorValue::Text(bound),
            CursorValue::Int(rows),
        ] = row.0.as_slice()
        else {
            continue;
        };
        partitions.push(
            KeptPartition::from_row(name, was, bound.clone(), *rows)
                .map_err(|e| OperationError::Failed(e.to_string()))?,
        );
    }
    Ok(partitions)
}

fn is_zero(n: &i64) -> bool {
    *n == 0
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
    let dialect = store.target().dialect();
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
    let dialect = store.target().dialect();
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
pub(super) async fn run_counting_first(
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
