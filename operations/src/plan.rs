//! What an operation would do, found without changing anything: the rows in
//! scope, the batch query's plan and index, the batches, a duration and a
//! log volume measured by a probe that is rolled back, and advice where
//! batching is the wrong tool.

use std::time::Duration;

use serde::Serialize;
use sluice_store::Store;
use sluice_target::{Probe, Statement};

use crate::batching::BatchQueryPlan;
use crate::enqueue::{
    Checked, CheckedSpec, EnqueueOptions, RowCount, ScopeRows, checked_spec, count_rows,
    refused_sql,
};
use crate::error::OperationError;
use crate::operation::Registry;
use crate::shape::Shape;
use sluice_store::spec::canonical_json;

/// How many times the probe runs the first sub-batch (each rolled back);
/// its median run is the one reported.
pub const PROBE_RUNS: u32 = 3;

/// Above this share of its table's rows, an operation deleting or rewriting
/// rows one batch at a time gets advice to do it another way.
pub const MOST_OF_A_TABLE: f64 = 0.5;

/// What enqueuing an operation would do. Building it changes nothing: the
/// probe's transactions are rolled back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// The operation's kind.
    pub kind: String,
    /// Its target table.
    pub table: String,
    /// The rows in scope.
    pub rows_in_scope: RowCount,
    /// All the rows of the table.
    pub table_rows: RowCount,
    /// The first batch query, as the planner was shown it.
    pub batch_query: String,
    /// The planner's plan of it, one line per node.
    pub query_plan: Vec<String>,
    /// The index the plan reads, when it names one.
    pub index: Option<String>,
    /// Why `enqueue` would refuse the operation (its batch query reads the
    /// whole table and `--force` was not given).
    pub refusal: Option<String>,
    /// Batches it would take (each a transaction-free unit of progress).
    pub batches: Option<i64>,
    /// Sub-batches it would take (one transaction each).
    pub sub_batches: Option<i64>,
    /// The statement the first sub-batch runs, when the work is one statement.
    pub sub_batch_statement: Option<String>,
    /// What running that statement (rolled back) measured; `None` when it
    /// was not run, with the reason in `probe_skipped`.
    pub probe: Option<ProbeReport>,
    /// Why there is no probe.
    pub probe_skipped: Option<String>,
    /// Time the work would take at the probe's pace, pauses included,
    /// without health throttling or stops (milliseconds).
    pub predicted_ms: Option<u64>,
    /// Log the work would write at the probe's rate per row, in bytes.
    pub predicted_log_bytes: Option<u64>,
    /// Which log `predicted_log_bytes` counts: `"WAL"` or `"redo log"`.
    pub log_name: Option<&'static str>,
    /// The triggers (and PostgreSQL rules) that fire as the work changes
    /// rows — on the table, and on the tables its foreign keys change with
    /// it — as `` `name` on `table` (AFTER DELETE) ``: they run for every
    /// row of the real run too, and the probe is not run where they are.
    pub triggers: Vec<String>,
    /// The partitions a delete would drop whole instead of deleting their
    /// rows one by one ([`crate::Shape::drop_partitions`]), when the shape
    /// allows drops and the table is partitioned by the scope's bound.
    pub partitions: Option<PartitionDrops>,
    /// Another way to do it that is far cheaper, or something to fix first.
    pub advice: Vec<String>,
}

/// The partitions a run would drop whole ([`Plan::partitions`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionDrops {
    /// The partitions whose whole range lies below the scope's bound,
    /// oldest first, with their rows. A run still checks, under each one's
    /// lock, that every row of it is in scope before it drops it.
    pub dropped: Vec<PartitionRows>,
    /// Why none is dropped after all (a `DELETE` trigger, a publication, a
    /// foreign key referring to the table), when something forbids it.
    pub blocked: Option<String>,
    /// They are detached and kept beside an undo table instead of dropped
    /// (`delete-aged-rows --undo` on PostgreSQL); the plan of the change
    /// itself is the same. Set when the arguments ask for `undo`.
    pub kept: bool,
}

/// One partition of [`PartitionDrops`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionRows {
    /// Its name.
    pub name: String,
    /// Its rows.
    pub rows: RowCount,
}

/// One probe of the first sub-batch ([`sluice_target::Target::probe_rolled_back`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeReport {
    /// Runs, each rolled back.
    pub runs: u32,
    /// Rows one run changed.
    pub rows: u64,
    /// The median run's time, in milliseconds.
    pub took_ms: f64,
    /// Log one run wrote, in bytes.
    pub log_bytes: Option<u64>,
}

/// Plans `kind` with `arguments` and `options` as [`crate::enqueue()`] would
/// accept it, and writes nothing: the same checks run (an unknown table,
/// an unsafe name or SQL the database refuses is the same error), except
/// that a batch query reading the whole table is reported in
/// [`Plan::refusal`] instead of refused. With `probe`, the first sub-batch
/// runs [`PROBE_RUNS`] times inside transactions that are rolled back.
///
/// Errors: those of [`crate::enqueue()`], the full scan aside.
pub async fn plan(
    store: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &EnqueueOptions,
    probe: bool,
) -> Result<Plan, OperationError> {
    if let Some(window) = &options.window {
        window
            .parse()
            .map_err(|e| OperationError::Arguments(e.to_string()))?;
    }
    // The change planned as it would run: an undo table is made at
    // enqueue, so the plan is of the change itself, with partitions kept
    // where the database can keep them and every other row moved.
    let (arguments, undo) = &without_undo(store, arguments);
    refuse_writing_scope(store, registry, kind, arguments).await?;
    let mut checked = Checked::for_plan();
    let CheckedSpec {
        spec,
        scope,
        table,
        explained,
        sub_batch,
    } = checked_spec(store, registry, kind, arguments, options, &mut checked).await?;
    let BatchQueryPlan {
        query: batch_query,
        plan: query_plan,
        full_scan,
        ..
    } = explained.expect("a fresh check explains the batch query");
    let dialect = store.target().dialect();
    let table_name = spec.table.clone();
    let refusal = full_scan.as_ref().filter(|_| !options.force).map(|line| {
        format!("its batch query reads all of `{table_name}` ({line}); add an index on the column it filters by, or enqueue with --force")
    });
    let rows_in_scope = count_rows(store, &scope).await?;
    let table_rows = count_rows(store, &table).await?;
    let prepared = registry.prepare(kind, &canonical_json(arguments), dialect)?;
    let partitions = partition_drops(store, prepared.shape())
        .await?
        .map(|drops| PartitionDrops {
            kept: *undo,
            ..drops
        });
    // Rows left to sub-batches of rows: those in scope but the dropped ones.
    let dropped_rows: i64 = partitions
        .iter()
        .filter(|p| p.blocked.is_none())
        .flat_map(|p| &p.dropped)
        .filter_map(|p| p.rows.rows)
        .sum();
    let row_by_row = rows_in_scope.rows.map(|rows| (rows - dropped_rows).max(0));
    // Keyset ranges and loop picks alike hold a batch's rows in scope.
    let batches = row_by_row.map(|rows| pieces(rows, options.batch_size));
    let sub_batches = row_by_row.map(|rows| {
        let full = rows / options.batch_size;
        let last = rows % options.batch_size;
        full * pieces(options.batch_size, options.sub_batch_size)
            + pieces(last, options.sub_batch_size)
    });

    let triggers = triggers_fired(store, &spec.table).await?;
    let writing = match &sub_batch {
        Some(statement) => {
            store
                .target()
                .functions_that_may_write(&statement.functions_called())
                .await?
        }
        None => Vec::new(),
    };
    let (measured, probe_skipped) = match (&sub_batch, probe) {
        (_, false) => (None, Some("--no-probe".to_owned())),
        (None, true) => (
            None,
            Some("the operation's work is code, or its table is empty".to_owned()),
        ),
        (Some(_), true) if full_scan.is_some() => (
            None,
            Some("its batch query reads the whole table".to_owned()),
        ),
        // A rolled-back probe still fires triggers, and what they write
        // to a table without transactions, a sequence they advance, stays.
        (Some(_), true) if !triggers.is_empty() => (
            None,
            Some(format!(
                "the table has triggers ({}), which would fire inside the probe and could \
                 leave a trace its rollback does not undo",
                triggers.join(", ")
            )),
        ),
        (Some(_), true) if !writing.is_empty() => (
            None,
            Some(format!(
                "its statement calls {}, which may leave a trace a rollback does not undo (a \
                 sequence advanced, a lock held, a write elsewhere)",
                quoted_list(&writing)
            )),
        ),
        (Some(statement), true) => (
            Some(
                store
                    .target()
                    .probe_rolled_back(statement, PROBE_RUNS)
                    .await
                    .map_err(refused_sql)?,
            ),
            None,
        ),
    };
    let pause = Duration::from_millis(u64::try_from(spec.pause_ms).unwrap_or(0));
    let (predicted_ms, predicted_log_bytes) =
        predicted(measured.as_ref(), sub_batches, row_by_row, pause);
    let advice = advice(
        sub_batch.as_ref(),
        &table_name,
        row_by_row,
        table_rows.rows,
        refusal.is_some(),
    );
    Ok(Plan {
        kind: kind.to_owned(),
        table: table_name,
        rows_in_scope,
        table_rows,
        batch_query: batch_query.text().as_str().to_owned(),
        index: sluice_target::dialect::index_in_plan(&query_plan, dialect),
        query_plan,
        refusal,
        batches,
        sub_batches,
        sub_batch_statement: sub_batch.map(|s| s.text().as_str().to_owned()),
        probe: measured.map(|p| ProbeReport {
            runs: p.runs,
            rows: p.rows,
            took_ms: p.took.as_secs_f64() * 1_000.0,
            log_bytes: p.log_bytes,
        }),
        probe_skipped,
        triggers,
        predicted_ms,
        predicted_log_bytes,
        log_name: dialect.log_name(),
        partitions,
        advice,
    })
}

/// The partitions a run of `shape` would drop ([`Plan::partitions`]), with
/// their rows; `None` where it drops none.
async fn partition_drops(
    store: &Store,
    shape: &Shape,
) -> Result<Option<PartitionDrops>, OperationError> {
    if !shape.drops_partitions() {
        return Ok(None);
    }
    let table = shape.table();
    let Some(layout) = store.target().range_partitions(table).await? else {
        return Ok(None);
    };
    let Some(bound) = shape.filter().below(&layout.column) else {
        return Ok(None);
    };
    let blocked = store.target().partition_drop_blocker(table).await?;
    let mut dropped = Vec::new();
    for partition in store.target().partitions_below(&layout, bound).await? {
        let dialect = store.target().dialect();
        let rows =
            |head: &'static str| dialect.partition_rows(Statement::new(head), table, &partition);
        let all = ScopeRows {
            count: rows("SELECT COUNT(*) FROM "),
            select: rows("SELECT 1 FROM "),
        };
        dropped.push(PartitionRows {
            name: partition.to_string(),
            rows: count_rows(store, &all).await?,
        });
    }
    Ok(Some(PartitionDrops {
        dropped,
        blocked,
        kept: false,
    }))
}

/// `arguments` without `undo` and `keep_undo`, and whether `undo` was
/// set; with it, on a database that cannot keep partitions, without
/// `drop_partitions` too (every aged row is moved into the undo table).
fn without_undo(store: &Store, arguments: &serde_json::Value) -> (serde_json::Value, bool) {
    let mut arguments = arguments.clone();
    let mut undo = false;
    if let Some(fields) = arguments.as_object_mut() {
        undo = fields.remove("undo") == Some(true.into());
        fields.remove("keep_undo");
        if undo && !store.target().dialect().keeps_partitions() {
            fields.remove("drop_partitions");
        }
    }
    (arguments, undo)
}

/// Refuses to plan an operation whose scope calls a function that may
/// write ([`sluice_target::Target::functions_that_may_write`]): counting and walking the
/// rows in scope would call it, and a plan changes nothing. Checked before
/// anything reads the scope.
async fn refuse_writing_scope(
    store: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
) -> Result<(), OperationError> {
    let canonical = sluice_store::spec::canonical_json(arguments);
    let prepared = registry.prepare(kind, &canonical, store.target().dialect())?;
    let shape = prepared.shape();
    let scope = shape.filter().and_to(
        Statement::new("SELECT 1 FROM ")
            .ident(shape.table())
            .push(" WHERE 1 = 1"),
    );
    let writing = store
        .target()
        .functions_that_may_write(&scope.functions_called())
        .await?;
    if writing.is_empty() {
        return Ok(());
    }
    Err(OperationError::Arguments(format!(
        "cannot plan this without changing something: its scope calls {}, which may write or \
         leave a trace (a sequence advanced, a lock held), and counting the rows in scope would \
         call it; nothing was read. If it only reads, declare it so (PostgreSQL: STABLE; MySQL: \
         READS SQL DATA)",
        quoted_list(&writing)
    )))
}

/// The triggers that fire when the rows of `table` change: its own, and
/// those of the tables its foreign keys delete or change rows of.
async fn triggers_fired(store: &Store, table: &str) -> Result<Vec<String>, OperationError> {
    let table = sluice_target::Ident::parse(table)?;
    let mut fired = store.target().triggers(&table).await?;
    for action in store.target().delete_actions(&table).await? {
        if let Ok(other) = sluice_target::Ident::parse(&action.table) {
            fired.extend(store.target().triggers(&other).await?);
        }
    }
    Ok(fired.iter().map(ToString::to_string).collect())
}

/// `` `a`, `b` `` for names.
fn quoted_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How many pieces of at most `size` make `rows` (`size` > 0).
pub fn pieces(rows: i64, size: i64) -> i64 {
    (rows.max(0) + size - 1) / size
}

/// The work's duration (every sub-batch at the probe's median, plus the
/// pause after each) and its log volume (the probe's log per row, times the
/// rows in scope); `None` where the probe measured nothing to scale.
fn predicted(
    probe: Option<&Probe>,
    sub_batches: Option<i64>,
    rows_in_scope: Option<i64>,
    pause: Duration,
) -> (Option<u64>, Option<u64>) {
    let Some(probe) = probe else {
        return (None, None);
    };
    let duration = sub_batches.map(|n| {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let total = probe.took.saturating_mul(n) + pause.saturating_mul(n);
        u64::try_from(total.as_millis()).unwrap_or(u64::MAX)
    });
    let log = match (probe.log_bytes, rows_in_scope) {
        (Some(bytes), Some(rows)) if probe.rows > 0 => {
            Some((bytes as f64 / probe.rows as f64 * rows.max(0) as f64).round() as u64)
        }
        _ => None,
    };
    (duration, log)
}

/// What to tell the operator beside the plan: a batch query that would be
/// refused, nothing in scope, or most of the table going (another method
/// is far cheaper than changing it row by row).
fn advice(
    sub_batch: Option<&Statement>,
    table: &str,
    in_scope: Option<i64>,
    table_rows: Option<i64>,
    refused: bool,
) -> Vec<String> {
    let mut advice = Vec::new();
    if refused {
        advice.push(format!(
            "create an index on the column the batch query filters `{table}` by before enqueuing: without one, every batch reads the whole table"
        ));
    }
    let (Some(in_scope), Some(total)) = (in_scope, table_rows) else {
        return advice;
    };
    if in_scope == 0 {
        advice.push("no row is in scope now: the operation would finish at once".to_owned());
        return advice;
    }
    let share = in_scope as f64 / total.max(1) as f64;
    if share < MOST_OF_A_TABLE {
        return advice;
    }
    let percent = (share * 100.0).round().min(100.0);
    let verb = sub_batch
        .map(|s| s.text().as_str().trim_start().to_ascii_uppercase())
        .unwrap_or_default();
    if verb.starts_with("DELETE") {
        let keep = (total - in_scope).max(0);
        advice.push(format!(
            "{percent} % of `{table}` would be deleted row by row: copying the {keep} rows to keep into a new table and swapping it in is far cheaper; if `{table}` is partitioned by this column, detaching or dropping the old partitions removes them at once"
        ));
    } else if verb.starts_with("UPDATE") {
        advice.push(format!(
            "{percent} % of `{table}` would be rewritten row by row: building a new table with the new values (CREATE TABLE … AS SELECT) and swapping it in writes each row once, without the dead versions batches leave behind"
        ));
    }
    advice
}

#[cfg(test)]
mod tests;
