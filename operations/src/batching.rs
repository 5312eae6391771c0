//! The batching strategies' SQL: where the next batch ends, where a
//! sub-batch inside it ends, and the predicate that selects exactly a range's
//! rows. Operations never write paging SQL themselves.
//!
//! A keyset range is `(start, end]` in the order of the batching columns:
//! `(a, b) > (start) AND (a, b) <= (end)`, plus the scope. Batches are
//! contiguous, so every row in scope at the time its range runs is in exactly
//! one batch. A row inserted later lands either in a range not yet run (and is
//! processed) or in one already run (and is out of scope for this operation,
//! provably: its key is at or below the cursor).

use sluice_store::{Store, StoreError};
pub use sluice_target::LoopPick;
use sluice_target::{Cursor, Ident, Statement};

use crate::error::OperationError;
use crate::shape::{Shape, Strategy};

/// Where the next batch of `shape` after `after` ends so that it holds `size`
/// rows in scope (fewer when fewer remain), or `None` when no row is left.
pub async fn next_batch_end(
    store: &Store,
    shape: &Shape,
    after: Option<&Cursor>,
    size: i64,
) -> Result<Option<Cursor>, OperationError> {
    let columns = keyset_columns(shape)?;
    let width = columns.len();
    if let Some(end) = store
        .target()
        .fetch_cursor(&nth_after(shape, columns, after, None, size), width)
        .await?
    {
        return Ok(Some(end));
    }
    Ok(store
        .target()
        .fetch_cursor(&last_after(shape, columns, after), width)
        .await?)
}

/// The batch query a run would issue next and the planner's plan of it.
#[derive(Debug, Clone)]
pub struct BatchQueryPlan {
    /// The query, from the operation's cursor (or, before its first batch,
    /// from the first row of a keyset: an ordered walk from nowhere has no
    /// range to look up).
    pub query: Statement,
    /// The planner's plan, one line per node.
    pub plan: Vec<String>,
    /// The plan's line that reads the whole target table, when it has one
    /// (never for an empty table walked by keyset: it has nothing to scan).
    pub full_scan: Option<String>,
    /// The row a keyset walk started from when no cursor was given.
    pub first: Option<Cursor>,
}

/// Asks the planner how it would run `shape`'s next batch query of `size`
/// rows after `cursor`. Runs nothing but `EXPLAIN` (and, for a keyset with
/// no cursor, a one-row read of where the table starts).
pub async fn explain_batch_query(
    store: &Store,
    shape: &Shape,
    cursor: Option<&Cursor>,
    size: i64,
) -> Result<BatchQueryPlan, StoreError> {
    let first = match (shape.strategy(), cursor) {
        (Strategy::Keyset(columns), None) => {
            let any_row = Statement::new("SELECT ")
                .idents(columns)
                .push(" FROM ")
                .ident(shape.table())
                .push(" LIMIT 1");
            store.target().fetch_cursor(&any_row, columns.len()).await?
        }
        _ => None,
    };
    let from = cursor.or(first.as_ref());
    let query = probe(shape, from, size);
    let plan = store.target().explain(&query).await?;
    let nothing_to_scan = from.is_none() && matches!(shape.strategy(), Strategy::Keyset(_));
    let full_scan = store
        .target()
        .dialect()
        .full_scan_line(&plan, shape.table().name())
        .filter(|_| !nothing_to_scan);
    Ok(BatchQueryPlan {
        query,
        plan,
        full_scan,
        first,
    })
}

/// The statement finding the `n`th row in scope after `after` (and at or
/// before `until`, when given), in batching order.
pub fn nth_after(
    shape: &Shape,
    columns: &[Ident],
    after: Option<&Cursor>,
    until: Option<&Cursor>,
    n: i64,
) -> Statement {
    in_order(shape, columns, after, until, "")
        .push(" LIMIT 1 OFFSET ")
        .value((n.max(1) - 1).into())
}

/// The probe the index check explains for a shape: the batch query a run
/// would issue first.
pub fn probe(shape: &Shape, first: Option<&Cursor>, size: i64) -> Statement {
    match shape.strategy() {
        Strategy::Keyset(columns) => nth_after(shape, columns, first, None, size),
        // The rows a loop sub-batch takes are found by this inner query; the
        // outer statement then reaches them by key.
        Strategy::Loop { key } => shape
            .filter()
            .and_to(
                Statement::new("SELECT ")
                    .idents(key)
                    .push(" FROM ")
                    .ident(shape.table())
                    .push(" WHERE 1 = 1"),
            )
            .push(" LIMIT ")
            .value(size.into()),
    }
}

/// Appends ` AND (cols) > (after) AND (cols) <= (until)` for the bounds given.
pub fn range_predicate(
    mut statement: Statement,
    columns: &[Ident],
    after: Option<&Cursor>,
    until: Option<&Cursor>,
) -> Statement {
    if let Some(after) = after {
        statement = statement.push(" AND ");
        statement = row_compare(statement, columns, " > ", after);
    }
    if let Some(until) = until {
        statement = statement.push(" AND ");
        statement = row_compare(statement, columns, " <= ", until);
    }
    statement
}

/// Where a seeking loop sub-batch's rows lie ([`Shape::seek_by`]): between
/// `from` (inclusive; the beginning when `None`) and `to` (inclusive) in the
/// order of the seek column, with keys between the two of `keys`.
#[derive(Debug, Clone, PartialEq)]
pub struct Seek {
    /// Where the batch's last sub-batch stopped.
    pub from: Option<Cursor>,
    /// The value `n` rows on in scope.
    pub to: Cursor,
    /// The least and the greatest key of those `n` rows (of its first
    /// column, for a key of several). Named in the
    /// change beside the seek column's bounds, it lets the database walk
    /// the key's index instead when the rows' keys lie close together (a
    /// log table, whose key grows with its time): on InnoDB the table's
    /// own order, about half the work per row of a walk through another
    /// index. Either way the rows are those in scope between `from` and
    /// `to`.
    pub keys: Option<(Cursor, Cursor)>,
}

/// `SELECT MAX(column), MIN(key), MAX(key) FROM (SELECT column, key …
/// WHERE column >= from AND scope ORDER BY column LIMIT n) AS picked HAVING
/// COUNT(*) = n`: where a seeking loop sub-batch of `n` rows ends, and the
/// keys its rows lie between ([`Seek`]); no row when fewer than `n` are
/// left. `>=`, not `>`: rows sharing the value the last sub-batch stopped
/// at may remain.
pub fn seek_end(
    shape: &Shape,
    column: &Ident,
    key: &Ident,
    from: Option<&Cursor>,
    n: i64,
) -> Statement {
    let columns = std::slice::from_ref(column);
    let mut statement =
        Statement::new("SELECT MAX(sluice_seek), MIN(sluice_key), MAX(sluice_key) FROM (SELECT ")
            .ident(column)
            .push(" AS sluice_seek, ")
            .ident(key)
            .push(" AS sluice_key FROM ")
            .ident(shape.table())
            .push(" WHERE 1 = 1");
    if let Some(from) = from {
        statement = row_compare(statement.push(" AND "), columns, " >= ", from);
    }
    let n = n.max(1);
    shape
        .filter()
        .and_to(statement)
        .push(" ORDER BY ")
        .ident(column)
        .push(" LIMIT ")
        .value(n.into())
        .push(") AS picked HAVING COUNT(*) = ")
        .value(n.into())
}

/// Appends ` WHERE key IN (SELECT key FROM table WHERE scope LIMIT n) AND
/// scope` (or its `= ANY (ARRAY(…))` form, see [`LoopPick`]) to `head`: the
/// rows of one loop sub-batch, each still in scope when it is changed. With
/// `seek` (MySQL's `LIMIT` form only), also between its two values, and
/// its keys' if it has them. A key of several columns is compared as a row
/// (`(a, b) IN (SELECT a, b …)`); on PostgreSQL its picked values come back
/// as one array per column, zipped, so each is reached through the key's
/// index.
pub fn loop_rows(
    shape: &Shape,
    key: &[Ident],
    limit: i64,
    pick: LoopPick,
    seek: Option<&Seek>,
    head: Statement,
) -> Statement {
    let (head, close) = match (pick, key) {
        (LoopPick::Limit, _) => {
            let mut statement = shape.filter().and_to(head.push(" WHERE 1 = 1"));
            if let (Some(seek), Some(column)) = (seek, shape.seek_column()) {
                let columns = std::slice::from_ref(column);
                if let Some(from) = &seek.from {
                    statement = row_compare(statement.push(" AND "), columns, " >= ", from);
                }
                statement = row_compare(statement.push(" AND "), columns, " <= ", &seek.to);
                if let Some((least, greatest)) = &seek.keys {
                    let keys = &key[..1];
                    statement = row_compare(statement.push(" AND "), keys, " >= ", least);
                    statement = row_compare(statement.push(" AND "), keys, " <= ", greatest);
                }
            }
            return statement.push(" LIMIT ").value(limit.into());
        }
        (LoopPick::KeyArray, [key]) => (
            head.push(" WHERE ")
                .ident(key)
                .push(" = ANY (CASE WHEN ")
                .guard()
                .push(" THEN ARRAY(SELECT "),
            ") END)",
        ),
        (LoopPick::KeyArray, _) => {
            let picked = composite_key_array(shape, key, limit, head);
            return shape.filter().and_to(picked);
        }
        (LoopPick::InSubquery, _) => (row_of(head.push(" WHERE "), key).push(" IN (SELECT "), ")"),
    };
    let picked = in_scope(shape, head.idents(key), limit).push(close);
    // The scope again on the rows reached by key: should the key not be
    // unique after all, a row sharing a picked key but outside the scope
    // is still not touched.
    shape.filter().and_to(picked)
}

/// Appends ` WHERE (a, b) IN (SELECT unnest(keys.a), unnest(keys.b) FROM
/// (SELECT array_agg(a) AS a, array_agg(b) AS b FROM (SELECT a, b FROM table WHERE
/// scope LIMIT n) AS picked) AS keys WHERE <guard>)` to `head`: PostgreSQL's
/// loop pick for a key of several columns. The arrays hold the picked keys
/// as one value a row, so the planner expects a handful of rows and reaches
/// each through the key's index, whatever `n` is (`(a, b) IN (SELECT a, b
/// … LIMIT n)` hash-joins the pick against a scan of the table once `n`
/// is a few thousand; an array of row values is not indexable at all). The
/// guard ([`Statement::guard`]) stands where it is tested once.
fn composite_key_array(shape: &Shape, key: &[Ident], limit: i64, head: Statement) -> Statement {
    let statement = row_of(head.push(" WHERE "), key).push(" IN (SELECT ");
    let statement = listed(statement, key, |s, column| {
        s.push("unnest(sluice_keys.").ident(column).push(")")
    });
    let statement = listed(statement.push(" FROM (SELECT "), key, |s, column| {
        s.push("array_agg(")
            .ident(column)
            .push(") AS ")
            .ident(column)
    });
    in_scope(shape, statement.push(" FROM (SELECT ").idents(key), limit)
        .push(") AS sluice_picked) AS sluice_keys WHERE ")
        .guard()
        .push(")")
}

/// Appends ` FROM table WHERE 1 = 1 AND <scope> LIMIT n` to `head` (a
/// `SELECT` of what a loop picks).
fn in_scope(shape: &Shape, head: Statement, limit: i64) -> Statement {
    let statement = head
        .push(" FROM ")
        .ident(shape.table())
        .push(" WHERE 1 = 1");
    shape
        .filter()
        .and_to(statement)
        .push(" LIMIT ")
        .value(limit.into())
}

/// Appends `item` for each of `columns`, separated by commas.
fn listed(
    mut statement: Statement,
    columns: &[Ident],
    item: impl Fn(Statement, &Ident) -> Statement,
) -> Statement {
    for (i, column) in columns.iter().enumerate() {
        if i > 0 {
            statement = statement.push(", ");
        }
        statement = item(statement, column);
    }
    statement
}

/// Appends `column` to `statement`, or `(a, b)` for several.
fn row_of(statement: Statement, columns: &[Ident]) -> Statement {
    match columns {
        [column] => statement.ident(column),
        _ => statement.push("(").idents(columns).push(")"),
    }
}

/// `SELECT json_group_array(rowid) FROM (SELECT rowid FROM table WHERE
/// scope LIMIT n)`: the rowids of up to `limit` rows in scope as one JSON
/// array (SQLite), `rowid` being the name that reaches them
/// ([`sluice_store::SubBatchTx::rowid_name`]). Run inside a loop
/// sub-batch's write transaction, it picks the rows its change then names by
/// rowid ([`picked_rows`]): a change that calls no function, which SQLite
/// runs without a statement journal (the scope's time comparison calls
/// `GLOB` and `julianday`, and a statement calling a function inside a
/// transaction keeps the first image of every page it changes).
pub fn rowid_pick(shape: &Shape, rowid: &'static str, limit: i64) -> Statement {
    let head = Statement::new("SELECT json_group_array(")
        .push(rowid)
        .push(") FROM (SELECT ")
        .push(rowid);
    in_scope(shape, head, limit).push(")")
}

/// Appends ` WHERE rowid IN (SELECT value FROM json_each($n))` to `head`:
/// the rows whose rowids [`rowid_pick`] gave as `picked`, in the same
/// transaction (so they are still the rows it found in scope: nothing else
/// writes while SQLite's write lock is held).
pub fn picked_rows(rowid: &'static str, picked: &str, head: Statement) -> Statement {
    head.push(" WHERE ")
        .push(rowid)
        .push(" IN (SELECT value FROM json_each(")
        .value(picked.to_owned().into())
        .push("))")
}

/// Appends ` WHERE (cols) > (start) AND (cols) <= (end) AND scope` to `head`:
/// the rows of one keyset range.
pub fn range_rows(
    shape: &Shape,
    columns: &[Ident],
    start: Option<&Cursor>,
    end: &Cursor,
    head: Statement,
) -> Statement {
    let statement = range_predicate(head.push(" WHERE 1 = 1"), columns, start, Some(end));
    shape.filter().and_to(statement)
}

/// The batching columns of a keyset shape; an error for a loop.
pub fn keyset_columns(shape: &Shape) -> Result<&[Ident], OperationError> {
    match shape.strategy() {
        Strategy::Keyset(columns) => Ok(columns),
        Strategy::Loop { .. } => Err(OperationError::Arguments(
            "a loop-based operation has no cursor to plan ranges on".into(),
        )),
    }
}

fn last_after(shape: &Shape, columns: &[Ident], after: Option<&Cursor>) -> Statement {
    in_order(shape, columns, after, None, " DESC").push(" LIMIT 1")
}

/// `SELECT cols FROM table WHERE <range> AND <scope> ORDER BY cols <direction>`.
fn in_order(
    shape: &Shape,
    columns: &[Ident],
    after: Option<&Cursor>,
    until: Option<&Cursor>,
    direction: &'static str,
) -> Statement {
    let statement = Statement::new("SELECT ")
        .idents(columns)
        .push(" FROM ")
        .ident(shape.table())
        .push(" WHERE 1 = 1");
    let statement = range_predicate(statement, columns, after, until);
    let statement = shape.filter().and_to(statement).push(" ORDER BY ");
    columns_in_order(statement, columns, direction)
}

fn row_compare(
    mut statement: Statement,
    columns: &[Ident],
    operator: &'static str,
    cursor: &Cursor,
) -> Statement {
    if columns.len() == 1 {
        return statement
            .ident(&columns[0])
            .push(operator)
            .value((&cursor.0[0]).into());
    }
    statement = statement
        .push("(")
        .idents(columns)
        .push(")")
        .push(operator)
        .push("(");
    for (i, value) in cursor.0.iter().enumerate() {
        if i > 0 {
            statement = statement.push(", ");
        }
        statement = statement.value(value.into());
    }
    statement.push(")")
}

fn columns_in_order(
    mut statement: Statement,
    columns: &[Ident],
    direction: &'static str,
) -> Statement {
    for (i, column) in columns.iter().enumerate() {
        if i > 0 {
            statement = statement.push(", ");
        }
        statement = statement.ident(column).push(direction);
    }
    statement
}

#[cfg(test)]
mod tests;
