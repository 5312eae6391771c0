//! `delete-aged-rows`: the rows of a table older than a cutoff, deleted
//! (or, with `--undo`, moved into an undo table, whole aged partitions
//! kept beside it on PostgreSQL) in sub-batches, and partitions wholly
//! older than the cutoff dropped in one.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sluice_store::Store;
use sluice_target::{CursorValue, Ident, KeptPartitions, SqlValue, Statement};

use super::text_times::{iso_like, names_a_day, refuse_mixed_formats, refuse_other_units};
use super::{ArchiveRows, ArchiveRowsArguments, key_columns, undo, zoneless};
use crate::error::OperationError;
use crate::operation::Operation;
use crate::shape::{Filter, Shape};
use crate::sub_batch::{SubBatch, SubBatchRows};

/// `delete-aged-rows`: deletes the rows of `table` whose `column` is older
/// than the cutoff fixed when the operation was enqueued.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeleteAgedRows;

/// Arguments of [`DeleteAgedRows`]. Build them with [`DeleteAgedRows::arguments`],
/// which reads the column's type to write the cutoff the way the column stores time.
/// A field it does not know is refused, not ignored: a misspelt or
/// imagined one (a `where`) must not widen what is deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteAgedRowsArguments {
    /// The table.
    pub table: String,
    /// The timestamp column.
    pub column: String,
    /// The column naming each row once (usually the primary key), or
    /// several separated by commas (`id,created_at`) that together do.
    pub key: String,
    /// Rows whose `column` is below this are deleted.
    pub cutoff: Cutoff,
    /// The age asked for, in its largest whole unit (`90d`; `14d` and `2w`
    /// are both `2w`), when the cutoff was resolved from one: then it, not
    /// the cutoff, is what makes two requests the same operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than: Option<String>,
    /// On a table partitioned by ranges of `column` (PostgreSQL, MySQL), a
    /// partition wholly older than the cutoff is dropped in one sub-batch
    /// instead of deleted row by row ([`Shape::drop_partitions`]); with
    /// `undo`, detached and kept beside the undo table instead
    /// ([`Shape::keep_partitions_in`], PostgreSQL only: elsewhere
    /// [`DeleteAgedRows::enqueue`] clears it and every row is moved).
    /// [`DeleteAgedRows::arguments`] sets it where the table is so
    /// partitioned; `false` (`--no-drop-partitions`) keeps the row-by-row way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drop_partitions: bool,
    /// Move the aged rows into an undo table (a copy of the table's
    /// columns) instead of deleting them, in ranges of `key`, so that
    /// [`revert`](super::revert) can move them back. [`DeleteAgedRows::enqueue`] creates
    /// the table (and, where partitions are kept, its record of them); no
    /// partition is dropped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undo: bool,
    /// The undo table, named and created at enqueue (never given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_table: Option<String>,
    /// The columns copied into it (the table's at enqueue).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undo_columns: Vec<String>,
    /// How long after the operation ends `sluice prune` keeps its undo
    /// table (`7d`); by default as long as prune's `--older-than`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_undo: Option<String>,
}

/// A cutoff in the representation of the column it is compared with, so the
/// comparison is a plain index range on every backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cutoff {
    /// A time column: an instant, which the session (UTC, or the store's
    /// zone on PostgreSQL) compares the column with.
    Timestamp(DateTime<Utc>),
    /// A MySQL `DATETIME` or `DATE` column written in `zone` (the store's
    /// `--db-time-zone`): the zone's wall-clock time at the cutoff, which
    /// MySQL compares with the column as written.
    WallTime {
        /// The zone's time at the cutoff.
        at: chrono::NaiveDateTime,
        /// The zone (an IANA name).
        zone: String,
    },
    /// An integer column holding epoch seconds.
    EpochSeconds(i64),
    /// An ISO-8601 text column, the cutoff written in the column's own style
    /// (`T` or space separator, `Z`/`+00:00`/no suffix) so text order is time order.
    Text(String),
}

impl Cutoff {
    /// The bound value rows are compared with.
    pub fn value(&self) -> SqlValue {
        match self {
            Cutoff::Timestamp(at) => SqlValue::Timestamp(*at),
            // Bound as the UTC session writes a time: the same wall clock.
            Cutoff::WallTime { at, .. } => SqlValue::Timestamp(at.and_utc()),
            Cutoff::EpochSeconds(s) => SqlValue::Int(*s),
            Cutoff::Text(t) => SqlValue::Text(t.clone()),
        }
    }
}

impl DeleteAgedRows {
    /// Arguments deleting rows of `table` older than `older_than` before
    /// `now`, with the cutoff written the way `column` stores time: a
    /// timestamp on PostgreSQL timestamp columns, epoch seconds on integer
    /// columns, ISO-8601 text in the style of the column's existing values.
    ///
    /// Errors: [`OperationError::Unsafe`] for names that are not plain
    /// identifiers, [`OperationError::Arguments`] for an unknown column or a
    /// column type that holds no time.
    pub async fn arguments(
        store: &Store,
        table: &str,
        column: &str,
        key: &str,
        older_than: Duration,
        now: DateTime<Utc>,
    ) -> Result<DeleteAgedRowsArguments, OperationError> {
        let table_ident = Ident::parse(table)?;
        let column_ident = Ident::parse(column)?;
        let key_columns = key_columns(key)?;
        let asked = crate::duration::format_duration(older_than);
        // Measured from the earlier of the caller's clock and the database's:
        // a clock running ahead of the one that wrote the rows (a machine
        // whose clock drifted, a VM restored from a snapshot) would count
        // young rows as aged. One behind deletes fewer rows, left for later.
        let database_now = store.target().database_now().await?;
        if now - database_now > chrono::Duration::minutes(1) {
            tracing::warn!(
                ahead = %(now - database_now),
                "this machine's clock is ahead of the database's: the cutoff is measured from the database's"
            );
        }
        let now = now.min(database_now);
        let older_than = chrono::Duration::from_std(older_than)
            .map_err(|_| OperationError::Arguments("--older-than is too large".into()))?;
        let at = now
            .checked_sub_signed(older_than)
            .ok_or_else(|| OperationError::Arguments("--older-than is too large".into()))?;
        let mut named = vec![column];
        named.extend(key_columns.iter().map(String::as_str));
        crate::target::check_target(store, table, &named).await?;
        refuse_reaching_itself(store, &table_ident).await?;
        let declared = store
            .target()
            .column_type(&table_ident, column)
            .await?
            .unwrap_or_default()
            .to_ascii_lowercase();
        // Only SQLite has no column types of its own to go by.
        let typed = store.target().dialect().has_column_types();
        let cutoff = if store.target().dialect().is_zoneless(&declared) {
            zoneless::cutoff(store, table, column, &declared, at, now, &asked).await?
        } else if declared.contains("timestamp") || declared == "date" || declared == "datetime" {
            Cutoff::Timestamp(at)
        } else if declared.contains("int") {
            Cutoff::EpochSeconds(at.timestamp())
        } else if typed && !(declared.contains("text") || declared.contains("char")) {
            return Err(OperationError::Arguments(format!(
                "column `{column}` of `{table}` has type {declared}; delete-aged-rows needs a timestamp, \
                 an integer of epoch seconds or ISO-8601 text"
            )));
        } else {
            let sample = Statement::new("SELECT ")
                .ident(&column_ident)
                .push(" FROM ")
                .ident(&table_ident)
                .push(" WHERE ")
                .ident(&column_ident)
                .push(" IS NOT NULL LIMIT 1");
            let first = store.target().fetch_cursor(&sample, 1).await?;
            match first.and_then(|c| c.0.into_iter().next()) {
                Some(CursorValue::Int(_)) => Cutoff::EpochSeconds(at.timestamp()),
                // A date names a whole day: older only when all of it is,
                // so the cutoff is the start of its day (UTC).
                Some(CursorValue::Text(example)) if names_a_day(&example) => {
                    if typed {
                        refuse_mixed_formats(store, &table_ident, &column_ident, &example).await?;
                    }
                    Cutoff::Text(at.format("%Y-%m-%d").to_string())
                }
                // SQLite compares a time with text as the instant the text
                // names, whatever its format ([`Filter`]).
                Some(CursorValue::Timestamp(_)) | Some(CursorValue::Text(_)) | None if !typed => {
                    Cutoff::Timestamp(at)
                }
                Some(CursorValue::Timestamp(_)) => Cutoff::Timestamp(at),
                Some(CursorValue::Text(example)) => {
                    refuse_mixed_formats(store, &table_ident, &column_ident, &example).await?;
                    Cutoff::Text(iso_like(&example, at))
                }
                None => Cutoff::Text(at.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
                Some(CursorValue::Bytes(_)) => {
                    return Err(OperationError::Arguments(format!(
                        "column `{column}` of `{table}` holds bytes; delete-aged-rows needs a \
                         timestamp, an integer of epoch seconds or ISO-8601 text"
                    )));
                }
            }
        };
        if let Cutoff::EpochSeconds(_) = cutoff {
            refuse_other_units(store, &table_ident, &column_ident, &asked).await?;
        }
        let dialect = store.target().dialect();
        let drop_partitions = dialect.drops_partitions()
            && store
                .target()
                .range_partitions(&table_ident)
                .await?
                .is_some_and(|layout| layout.column == column);
        Ok(DeleteAgedRowsArguments {
            table: table.to_owned(),
            column: column.to_owned(),
            key: key.to_owned(),
            cutoff,
            older_than: Some(asked),
            drop_partitions,
            undo: false,
            undo_table: None,
            undo_columns: Vec::new(),
            keep_undo: None,
        })
    }
}

#[async_trait]
impl Operation for DeleteAgedRows {
    type Arguments = DeleteAgedRowsArguments;

    fn kind(&self) -> &'static str {
        "delete-aged-rows"
    }

    /// Deleting: the loop (`LIMIT n` until fewer match). With `undo`:
    /// ranges of the key, as `archive-rows` moves rows.
    fn shape(&self, arguments: &Self::Arguments) -> Result<Shape, OperationError> {
        let cutoff = arguments.cutoff.value();
        let key = key_columns(&arguments.key)?;
        let key: Vec<&str> = key.iter().map(String::as_str).collect();
        if arguments.undo != arguments.undo_table.is_some() {
            return Err(OperationError::Arguments(
                "delete-aged-rows --undo needs the undo table its enqueue creates \
                 (DeleteAgedRows::enqueue)"
                    .into(),
            ));
        }
        undo::check_keep_undo(arguments.undo, arguments.keep_undo.as_deref())?;
        if let Some(undo_table) = &arguments.undo_table {
            undo::keys_of(&arguments.table, &arguments.key, undo_table)?;
            let shape = Shape::keyset(&arguments.table, &key)?
                .scope(Filter::new().lt(&arguments.column, cutoff))?;
            return match arguments.drop_partitions {
                true => shape.keep_partitions_in(undo_table),
                false => Ok(shape),
            };
        }
        let shape = Shape::loop_until_done_by(&arguments.table, &key)?
            .seek_by(&arguments.column)?
            .scope(Filter::new().lt(&arguments.column, cutoff))?;
        Ok(match arguments.drop_partitions {
            true => shape.drop_partitions(),
            false => shape,
        })
    }

    /// With an `older_than`, the request as asked (table, column, key and
    /// age), not the cutoff resolved from it to the nanosecond.
    fn identity(&self, arguments: &Self::Arguments) -> serde_json::Value {
        let mut asked = match &arguments.older_than {
            Some(older_than) => serde_json::json!({
                "table": arguments.table,
                "column": arguments.column,
                "key": arguments.key,
                "older_than": older_than,
            }),
            None => serde_json::to_value(DeleteAgedRowsArguments {
                undo_table: None,
                undo_columns: Vec::new(),
                ..arguments.clone()
            })
            .unwrap_or_default(),
        };
        if arguments.undo {
            asked["undo"] = true.into();
        }
        asked
    }

    /// One statement: a loop sub-batch records the rows it is expected to
    /// delete with them, so no `DELETE … RETURNING` (which would re-read
    /// every deleted row) is needed to count them.
    fn sub_batch_statement(
        &self,
        arguments: &Self::Arguments,
        rows: &SubBatchRows<'_>,
    ) -> Result<Option<Statement>, OperationError> {
        Ok((!arguments.undo).then(|| rows.delete_statement()))
    }

    /// With `undo`, moves the sub-batch's rows into the undo table as
    /// `archive-rows` moves them (each in exactly one of the two tables).
    async fn run(
        &self,
        arguments: &Self::Arguments,
        sub_batch: &mut SubBatch<'_>,
    ) -> Result<u64, OperationError> {
        let Some(undo_table) = &arguments.undo_table else {
            return sub_batch.delete().await;
        };
        let moved = ArchiveRowsArguments {
            table: arguments.table.clone(),
            into: undo_table.clone(),
            key: arguments.key.clone(),
            condition: None,
            column: Some(arguments.column.clone()),
            older_than: None,
            cutoff: Some(arguments.cutoff.clone()),
            columns: arguments.undo_columns.clone(),
            undo: false,
            undo_table: None,
            keep_undo: None,
        };
        ArchiveRows.run(&moved, sub_batch).await
    }

    fn other_tables_written(&self, arguments: &Self::Arguments) -> Vec<String> {
        arguments.undo_table.iter().cloned().collect()
    }

    /// A schedule stores `{"table", "column", "key", "older_than": "90d"}`
    /// (and `"drop_partitions": false` to keep the row-by-row way on a
    /// partitioned table); each fire measures the age from its own time.
    /// Stored arguments with a cutoff are used as they are.
    async fn arguments_at(
        &self,
        store: &Store,
        stored: serde_json::Value,
        now: DateTime<Utc>,
    ) -> Result<serde_json::Value, OperationError> {
        let Some(older_than) = stored.get("older_than").and_then(|v| v.as_str()) else {
            return Ok(stored);
        };
        if stored.get("cutoff").is_some() {
            return Ok(stored);
        }
        // Refused, not ignored: an unknown field (a `where`) must not go
        // unnoticed while every aged row is deleted.
        if let Some(unknown) = stored.as_object().and_then(|fields| {
            fields.keys().find(|k| {
                ![
                    "table",
                    "column",
                    "key",
                    "older_than",
                    "drop_partitions",
                    "undo",
                    "keep_undo",
                ]
                .contains(&k.as_str())
            })
        }) {
            return Err(OperationError::Arguments(format!(
                "delete-aged-rows has no argument `{unknown}` (it takes table, column, key, \
                 older_than, drop_partitions, undo and keep_undo)"
            )));
        }
        let flag = |name: &str, default: bool| match stored.get(name) {
            None => Ok(default),
            Some(serde_json::Value::Bool(set)) => Ok(*set),
            Some(other) => Err(OperationError::Arguments(format!(
                "delete-aged-rows: {name} must be true or false, not {other}"
            ))),
        };
        let drop_partitions = flag("drop_partitions", true)?;
        let undo = flag("undo", false)?;
        let field = |name: &str| {
            stored.get(name).and_then(|v| v.as_str()).ok_or_else(|| {
                OperationError::Arguments(format!("delete-aged-rows needs a `{name}` string"))
            })
        };
        let age = crate::duration::parse_duration(older_than)
            .map_err(|e| OperationError::Arguments(format!("older_than: {e}")))?;
        let key = stored.get("key").and_then(|v| v.as_str()).unwrap_or("id");
        let mut resolved =
            DeleteAgedRows::arguments(store, field("table")?, field("column")?, key, age, now)
                .await?;
        resolved.drop_partitions &= drop_partitions;
        resolved.undo = undo;
        resolved.keep_undo = match stored.get("keep_undo") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(keep)) => Some(keep.clone()),
            Some(other) => {
                return Err(OperationError::Arguments(format!(
                    "delete-aged-rows: keep_undo must be a duration such as \"7d\", not {other}"
                )));
            }
        };
        serde_json::to_value(resolved).map_err(|e| OperationError::Arguments(e.to_string()))
    }
}

impl DeleteAgedRows {
    /// Enqueues `delete-aged-rows` with `arguments` (as
    /// [`Operation::arguments_at`] resolved them). With `undo`, every check
    /// runs first, then its undo table is created beside the table (its
    /// columns, a state, the key unique), then the operation is enqueued
    /// naming it; a refusal, or an identical operation already active,
    /// drops the new table again.
    pub async fn enqueue(
        store: &Store,
        registry: &crate::operation::Registry,
        arguments: &serde_json::Value,
        options: &crate::EnqueueOptions,
    ) -> Result<sluice_store::Enqueued, OperationError> {
        const KIND: &str = "delete-aged-rows";
        let mut parsed: DeleteAgedRowsArguments = serde_json::from_value(arguments.clone())
            .map_err(|e| OperationError::Arguments(format!("{KIND}: {e}")))?;
        if !parsed.undo {
            return crate::enqueue::enqueue(store, registry, KIND, arguments, options).await;
        }
        if parsed.undo_table.is_some() || !parsed.undo_columns.is_empty() {
            return Err(OperationError::Arguments(
                "delete-aged-rows: undo_table and undo_columns are named at enqueue, not given"
                    .into(),
            ));
        }
        let (undo, columns) = undo::create_rows_table(store, &parsed.table, &parsed.key).await?;
        parsed.undo_table = Some(undo.undo().to_string());
        parsed.undo_columns = columns;
        // Partitions wholly aged are detached and kept beside the undo
        // table where the database allows it; else every row is moved.
        parsed.drop_partitions &= store.target().dialect().keeps_partitions();
        let kept = match parsed.drop_partitions {
            true => {
                let kept = KeptPartitions::of(&Ident::parse(&parsed.table)?, undo.undo())?;
                if let Err(e) = store.target().execute(&kept.create()).await {
                    store.target().execute(&undo.drop_statement()).await?;
                    return Err(e.into());
                }
                Some(kept)
            }
            false => None,
        };
        let arguments = serde_json::to_value(parsed).expect("arguments serialise");
        let also: Vec<Statement> = kept.iter().map(KeptPartitions::drop_statement).collect();
        undo::enqueue_keeping(store, registry, KIND, &arguments, options, &undo, &also).await
    }
}

/// Refuses to delete from `table` when a foreign key of `table` to itself
/// deletes or changes rows as the rows they refer to are deleted (`ON DELETE
/// CASCADE`, `SET NULL`): an aged row's young replies would go with it, or
/// lose their link, whatever their age. (Keys from other tables act as
/// their schema says: the rows deleted here are all in scope.)
async fn refuse_reaching_itself(store: &Store, table: &Ident) -> Result<(), OperationError> {
    for action in store.target().delete_actions(table).await? {
        let Ok(from) = Ident::parse(&action.table) else {
            continue;
        };
        if store.target().same_table(&from, table).await? {
            return Err(OperationError::Arguments(format!(
                "delete-aged-rows would change rows outside its scope: deleting a row of \
                 `{table}` also deletes or changes the rows of `{table}` that refer to it, \
                 whatever their age, through {action}; settle those rows first, or make the \
                 foreign key NO ACTION (a row still referred to then fails its sub-batch)"
            )));
        }
    }
    Ok(())
}
