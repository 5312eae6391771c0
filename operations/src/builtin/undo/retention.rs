//! What is left of an undo table after its operation: what `show` says
//! of it ([`undo_summary`]) and its retention ([`prune_undo`]).

use serde::Serialize;
use sluice_store::{OperationStatus, Store};
use sluice_target::{CursorValue, KeptPartition, KeptPartitions};

use super::super::revert::{Revert, RevertArguments, reverting, what_reverts};
use super::super::{ArchiveRows, DeleteAgedRows, UpdateInBatches};
use crate::error::OperationError;
use crate::operation::Operation;

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
        ArchiveRows.kind(),
        DeleteAgedRows.kind(),
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
