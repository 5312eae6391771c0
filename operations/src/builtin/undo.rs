//! `--undo`: the undo tables an operation run with it keeps (created at
//! enqueue, written in each sub-batch's transaction). What `show` says of
//! them and their retention (`prune`) are in `retention`; `revert.rs` puts
//! them back.

use sluice_store::{Enqueued, Store};
use sluice_target::{Assignments, Ident, Statement, UndoTable, radix36};

use super::{UpdateInBatches, UpdateInBatchesArguments, key_idents};
use crate::batching::range_predicate;
use crate::enqueue::EnqueueOptions;
use crate::error::OperationError;
use crate::operation::Registry;
use crate::sub_batch::{Bounds, SubBatch, SubBatchRows};

mod retention;

pub use retention::{PrunedUndo, UndoSummary, prune_undo, undo_summary};

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
