//! `archive-rows`: moves the rows in scope into an archive table, exactly
//! once whatever crashes, and what enqueueing it needs first (its table).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sluice_store::Store;
use sluice_target::{Ident, Statement};

use super::{Cutoff, DeleteAgedRows, key_idents};
use crate::batching::range_predicate;
use crate::error::OperationError;
use crate::operation::Operation;
use crate::shape::{Filter, Shape};
use crate::sub_batch::{Bounds, SubBatch};

mod table;
mod targets;
#[cfg(test)]
mod tests;

use table::{check_archive, drop_created, in_schema, refuse_delete_actions};

/// `archive-rows`: moves the rows of `table` matching `where` into `into`
/// (`INSERT … SELECT` and `DELETE` of the same rows, or on PostgreSQL one
/// `DELETE … RETURNING` feeding the `INSERT`), in ranges of `key`. Each
/// sub-batch's copy, delete and progress record commit together, and on
/// MySQL and SQLite a copy and a delete that disagree on how many rows
/// they saw roll the sub-batch back: whatever crashes, every row is in
/// exactly one of the two tables.
#[derive(Debug, Clone, Copy, Default)]
pub struct ArchiveRows;

/// Arguments of [`ArchiveRows`]. `columns` is filled when the operation is
/// enqueued ([`Operation::arguments_at`]): the live table's columns then,
/// each of which the archive table must have with the same type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveRowsArguments {
    /// The live table rows are moved out of.
    pub table: String,
    /// The archive table they are moved into.
    pub into: String,
    /// A unique, indexed column the ranges walk (usually the primary key).
    pub key: String,
    /// The operator's condition (`None`: every row, or the time scope).
    #[serde(rename = "where")]
    pub condition: Option<String>,
    /// A time scope, as `delete-aged-rows` takes: the time column…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// …the age asked for (`90d`), resolved into `cutoff` at each enqueue…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than: Option<String>,
    /// …and rows whose `column` is below this are in scope (with `where`,
    /// both must hold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cutoff: Option<Cutoff>,
    /// The live table's columns, in table order: the columns copied, by name.
    #[serde(default)]
    pub columns: Vec<String>,
    /// Keep the keys of the rows moved in an undo table, in the sub-batch's
    /// transaction, so that [`super::revert`] can move exactly them back.
    /// [`ArchiveRows::enqueue`] creates the table.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undo: bool,
    /// The undo table, named and created at enqueue (never given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_table: Option<String>,
    /// How long after the operation ends `sluice prune` keeps its undo
    /// table (`7d`); by default as long as prune's `--older-than`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_undo: Option<String>,
}

#[async_trait]
impl Operation for ArchiveRows {
    type Arguments = ArchiveRowsArguments;

    fn kind(&self) -> &'static str {
        "archive-rows"
    }

    fn shape(&self, arguments: &Self::Arguments) -> Result<Shape, OperationError> {
        let key = super::key_columns(&arguments.key)?;
        let key: Vec<&str> = key.iter().map(String::as_str).collect();
        let shape = Shape::keyset(&arguments.table, &key)?;
        let into = Ident::parse(&arguments.into)?;
        if into == *shape.table() {
            return Err(OperationError::Arguments(format!(
                "archive-rows needs another table to move rows into than `{}`",
                arguments.table
            )));
        }
        if arguments.columns.is_empty() {
            return Err(OperationError::Arguments(
                "archive-rows needs the live table's columns (filled at enqueue)".into(),
            ));
        }
        for column in &arguments.columns {
            Ident::parse(column)?;
        }
        if arguments.undo != arguments.undo_table.is_some() {
            return Err(OperationError::Arguments(
                "archive-rows --undo needs the undo table its enqueue creates \
                 (ArchiveRows::enqueue)"
                    .into(),
            ));
        }
        super::undo::check_keep_undo(arguments.undo, arguments.keep_undo.as_deref())?;
        if let Some(undo_table) = &arguments.undo_table {
            super::undo::keys_of(&arguments.table, &arguments.key, undo_table)?;
        }
        let mut scope = Filter::new();
        if let Some(condition) = &arguments.condition {
            scope = scope.expression(condition);
        }
        match (&arguments.column, &arguments.cutoff) {
            (Some(column), Some(cutoff)) => scope = scope.lt(column, cutoff.value()),
            (None, None) => {}
            _ => {
                return Err(OperationError::Arguments(
                    "archive-rows takes a time scope as a column and an age (--column with \
                     --older-than)"
                        .into(),
                ));
            }
        }
        shape.scope(scope)
    }

    fn other_tables_written(&self, arguments: &Self::Arguments) -> Vec<String> {
        let mut tables = vec![arguments.into.clone()];
        tables.extend(arguments.undo_table.iter().cloned());
        tables
    }

    /// With a time scope, the request as asked (the age), not the cutoff
    /// resolved from it; nor the undo table's name, chosen at each enqueue.
    fn identity(&self, arguments: &Self::Arguments) -> serde_json::Value {
        let mut asked = arguments.clone();
        if asked.older_than.is_some() {
            asked.cutoff = None;
        }
        asked.undo_table = None;
        serde_json::to_value(asked).unwrap_or_default()
    }

    async fn run(
        &self,
        arguments: &Self::Arguments,
        sub_batch: &mut SubBatch<'_>,
    ) -> Result<u64, OperationError> {
        let into = Ident::parse(&arguments.into)?;
        let columns = arguments
            .columns
            .iter()
            .map(|c| Ident::parse(c))
            .collect::<Result<Vec<_>, _>>()?;
        let table = sub_batch.table().clone();
        let undo = match &arguments.undo_table {
            Some(undo_table) => Some(super::undo::keys_of(
                &arguments.table,
                &arguments.key,
                undo_table,
            )?),
            None => None,
        };
        // The columns enqueue saw, named on both sides: a column moved in
        // the live table since is copied into its own column still.
        let insert = || {
            Statement::new("INSERT INTO ")
                .ident(&into)
                .push(" (")
                .idents(&columns)
                .push(") ")
        };
        if sub_batch.dialect().moves_rows_in_one_statement() {
            // One statement: the rows deleted are exactly the rows copied
            // (and, with an undo table, the keys kept).
            let mut statement = sub_batch
                .rows_where(Statement::new("WITH moved AS (DELETE FROM ").ident(&table))
                .push(" RETURNING ")
                .idents(&columns)
                .push(")");
            if let Some(undo) = &undo {
                statement = statement
                    .push(", sluice_kept AS (INSERT INTO ")
                    .ident(undo.undo())
                    .push(" (")
                    .idents(undo.key())
                    .push(") SELECT ")
                    .idents(undo.key())
                    .push(" FROM moved)");
            }
            let statement = statement
                .push(" INSERT INTO ")
                .ident(&into)
                .push(" (")
                .idents(&columns)
                .push(") SELECT ")
                .idents(&columns)
                .push(" FROM moved");
            let moved = sub_batch.execute(&statement).await?;
            refuse_new_columns(sub_batch, &table, &columns).await?;
            return Ok(moved);
        }
        // The keys first, the rows locked as they are read: the copy then
        // reads the same rows.
        let kept = match &undo {
            Some(undo) => {
                let lock = sub_batch.dialect().locks_rows_read();
                let keep = undo.keep_keys(&|head| sub_batch.rows_where(head), lock);
                Some(sub_batch.execute(&keep).await?)
            }
            None => None,
        };
        let copied = sub_batch
            .execute(
                &sub_batch.rows_where(
                    insert()
                        .push("SELECT ")
                        .idents(&columns)
                        .push(" FROM ")
                        .ident(&table),
                ),
            )
            .await?;
        refuse_new_columns(sub_batch, &table, &columns).await?;
        // The rows to delete are those whose keys the archive now holds in
        // this range: the scope is not evaluated a second time (one that can
        // answer otherwise, `RAND() < 0.5`, would delete other rows than it
        // copied). They include every row copied, so equal counts mean the
        // same rows; an archive already holding a key of this range makes
        // them differ, and nothing is kept.
        let Bounds::Range { start, end } = sub_batch.bounds().clone() else {
            return Err(OperationError::Failed(
                "archive-rows runs over ranges of its key".into(),
            ));
        };
        let key = key_idents(&arguments.key)?;
        let in_range = |statement: Statement| {
            range_predicate(
                statement.push(" WHERE 1 = 1"),
                &key,
                start.as_ref(),
                Some(&end),
            )
        };
        // `(a, b) IN (SELECT a, b …)` for a key of several columns: a row
        // value every dialect compares column by column.
        let (open, close) = if key.len() > 1 { ("(", ")") } else { ("", "") };
        let delete = in_range(Statement::new("DELETE FROM ").ident(&table))
            .push(" AND ")
            .push(open)
            .idents(&key)
            .push(close)
            .push(" IN (SELECT ")
            .idents(&key)
            .push(" FROM ")
            .ident(&into);
        let delete = in_range(delete).push(")");
        let deleted = sub_batch.execute(&delete).await?;
        if copied != deleted || kept.is_some_and(|kept| kept != copied) {
            return Err(OperationError::Failed(format!(
                "archive-rows copied {copied} rows into `{into}` but found {deleted} to delete \
                 from `{table}`{} (rows changed meanwhile); rolled back, to be tried again",
                kept.map_or(String::new(), |kept| format!(" and kept {kept} keys"))
            )));
        }
        Ok(deleted)
    }

    /// Fills `columns` from the live table as it is now, resolves a time
    /// scope's age into a cutoff from `now` (as `delete-aged-rows` does),
    /// and checks the archive table, if it exists, has each column with the
    /// same type.
    async fn arguments_at(
        &self,
        store: &Store,
        stored: serde_json::Value,
        now: DateTime<Utc>,
    ) -> Result<serde_json::Value, OperationError> {
        let mut arguments: ArchiveRowsArguments = serde_json::from_value(stored)
            .map_err(|e| OperationError::Arguments(format!("archive-rows: {e}")))?;
        let table = Ident::parse(&arguments.table)?;
        let mut into = Ident::parse(&arguments.into)?;
        super::key_columns(&arguments.key)?;
        // PostgreSQL: an unqualified archive is the one the search path
        // finds, or else a new one beside the live table — never one in the
        // schema of Sluice's own tables, which may come first in the path
        // (dropping that schema must not drop archived rows). On targets
        // apart from the store it stays unqualified, so each target's
        // search path finds its own (a fleet's targets may keep their
        // tables in schemas of their own); enqueue creates it beside each
        // target's live table.
        if into.schema().is_none()
            && store.target_apart().is_none()
            && let Some(schema) = match store.target().schema_of(&into).await? {
                Some(schema) => Some(schema),
                None => store.target().schema_of(&table).await?,
            }
        {
            into = in_schema(&schema, &into, &arguments.table)?;
            arguments.into = into.to_string();
        }
        if let Some(older_than) = &arguments.older_than {
            let Some(column) = &arguments.column else {
                return Err(OperationError::Arguments(
                    "archive-rows: --older-than needs --column, the time column it measures".into(),
                ));
            };
            let age = crate::duration::parse_duration(older_than)
                .map_err(|e| OperationError::Arguments(format!("older_than: {e}")))?;
            let aged = DeleteAgedRows::arguments(
                store,
                &arguments.table,
                column,
                &arguments.key,
                age,
                now,
            )
            .await?;
            arguments.cutoff = Some(aged.cutoff);
        }
        let columns = store.target().table_columns(&table).await?;
        if columns.is_empty() {
            return Err(crate::target::TargetError::UnknownTable {
                table: arguments.table.clone(),
            }
            .into());
        }
        check_archive(store, &table, &into, &columns).await?;
        refuse_delete_actions(store, &table).await?;
        arguments.columns = columns;
        serde_json::to_value(arguments).map_err(|e| OperationError::Arguments(e.to_string()))
    }
}

/// Enqueues `kind` as [`crate::enqueue()`] does, after what a built-in
/// kind needs first: `archive-rows` gets its archive table
/// ([`ArchiveRows::enqueue`]), a kind run with `--undo` its undo table
/// ([`super::UpdateInBatches::enqueue`], [`DeleteAgedRows::enqueue`]); a
/// `revert` is refused here ([`super::revert`] enqueues it). The command line and schedules enqueue
/// through it.
pub async fn enqueue_kind(
    store: &Store,
    registry: &crate::operation::Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &crate::EnqueueOptions,
) -> Result<sluice_store::Enqueued, OperationError> {
    let undo = arguments.get("undo").and_then(serde_json::Value::as_bool) == Some(true);
    if undo && !options.targets.is_empty() {
        return Err(OperationError::Arguments(format!(
            "{kind} --undo works on the store's database only, not on a target apart from it \
             (--target, --targets): run it without --undo, or with the store in the target"
        )));
    }
    if kind == super::Revert.kind() {
        Err(OperationError::NotRevertible(
            "a revert is enqueued by `sluice revert <id>` (Runtime::revert), which takes its \
             arguments from the operation it reverts"
                .into(),
        ))
    } else if kind == ArchiveRows.kind() {
        ArchiveRows::enqueue(store, registry, arguments, options).await
    } else if kind == super::UpdateInBatches.kind() {
        super::UpdateInBatches::enqueue(store, registry, arguments, options).await
    } else if kind == DeleteAgedRows.kind() {
        DeleteAgedRows::enqueue(store, registry, arguments, options).await
    } else {
        crate::enqueue::enqueue(store, registry, kind, arguments, options).await
    }
}

impl ArchiveRows {
    /// Enqueues `archive-rows` with `arguments` (as [`Operation::arguments_at`]
    /// filled them): creates the archive table first when it does not
    /// exist ([`ArchiveRows::create_archive`]), and drops it again, still
    /// empty, when enqueue refuses the operation, so a refusal changes
    /// nothing.
    pub async fn enqueue(
        store: &Store,
        registry: &crate::operation::Registry,
        arguments: &serde_json::Value,
        options: &crate::EnqueueOptions,
    ) -> Result<sluice_store::Enqueued, OperationError> {
        let mut parsed: ArchiveRowsArguments = serde_json::from_value(arguments.clone())
            .map_err(|e| OperationError::Arguments(format!("archive-rows: {e}")))?;
        if parsed.undo_table.is_some() {
            return Err(OperationError::Arguments(
                "archive-rows: undo_table is named at enqueue, not given".into(),
            ));
        }
        if !options.targets.is_empty() {
            return targets::enqueue_on_targets(store, registry, &parsed, options).await;
        }
        let created = ArchiveRows::create_archive(store, &parsed).await?;
        let undo = match parsed.undo {
            true => {
                let keys = super::undo::create_keys_table(store, &parsed.table, &parsed.key).await;
                match keys {
                    Ok(undo) => Some(undo),
                    Err(error) => {
                        drop_created(store, created, &parsed.into).await?;
                        return Err(error);
                    }
                }
            }
            false => None,
        };
        parsed.undo_table = undo.as_ref().map(|u| u.undo().to_string());
        let arguments = serde_json::to_value(&parsed).expect("arguments serialise");
        let enqueued =
            crate::enqueue::enqueue(store, registry, "archive-rows", &arguments, options).await;
        if !matches!(enqueued, Ok(sluice_store::Enqueued { created: true, .. })) {
            if let Some(undo) = &undo {
                store.target().execute(&undo.drop_statement()).await?;
            }
            if enqueued.is_err() {
                drop_created(store, created, &parsed.into).await?;
            }
        }
        enqueued
    }
}

/// Fails the sub-batch (rolled back) when `table` has a column that
/// `columns`, the ones enqueue saw and the sub-batch copied, lack: its
/// values would be deleted with their rows, not archived. Read after the
/// sub-batch's statement, whose locks hold the table's columns as they are
/// until it commits (PostgreSQL's row-exclusive lock, MySQL's metadata
/// lock, SQLite's write lock); a column dropped since fails the statement
/// itself.
async fn refuse_new_columns(
    sub_batch: &mut SubBatch<'_>,
    table: &Ident,
    columns: &[Ident],
) -> Result<(), OperationError> {
    let listed = sub_batch.dialect().column_list(table);
    let now = sub_batch.fetch_text(&listed).await?.unwrap_or_default();
    let added: Vec<&str> = now
        .split(',')
        .filter(|name| !columns.iter().any(|c| c.name().eq_ignore_ascii_case(name)))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    Err(OperationError::Failed(format!(
        "`{table}` has columns archive-rows was not enqueued with ({}): their values would be \
         deleted, not archived; rolled back — add them to the archive table and enqueue again",
        added.join(", ")
    )))
}
