//! PostgreSQL's undo statements: the images kept and the change made in
//! one statement.

use crate::operator_sql::Assignments;
use crate::sql::{Ident, Statement};
use crate::undo::{KeyRange, LIVE, UNDO, UndoTable, qualified};

use super::super::{alias, join_key};

/// The alias of the locked rows' values before the change.
const BEFORE: &str = "sluice_before";

/// `WITH sluice_changed AS (UPDATE live AS sluice_live SET <set> FROM
/// (SELECT <key> AS sluice_key_N, <column> AS sluice_old_N FROM live WHERE
/// <rows> FOR UPDATE) AS sluice_before WHERE <keys equal> RETURNING <key>,
/// <old>, <new> …) INSERT INTO undo … SELECT * FROM sluice_changed`: the
/// rows are locked as they are read, so the before-image is the value the
/// change replaced (a row changed meanwhile is read again once its writer
/// commits), and one round trip keeps both images and changes the rows.
/// Its count is the rows changed.
pub(super) fn keep_and_update(
    undo: &UndoTable,
    set: &Assignments,
    rows: &dyn Fn(Statement) -> Statement,
    _range: KeyRange<'_>,
) -> Vec<Statement> {
    let keys: Vec<Ident> = (0..undo.key().len())
        .map(|i| alias(&format!("sluice_key_{}", i + 1)))
        .collect();
    let mut read = Statement::new("WITH sluice_changed AS (UPDATE ")
        .ident(undo.live())
        .push(" AS ")
        .ident(&alias(LIVE))
        .push(" SET ")
        .operator_assignments(set)
        .push(" FROM (SELECT ");
    for (i, (column, key)) in undo.key().iter().zip(&keys).enumerate() {
        if i > 0 {
            read = read.push(", ");
        }
        read = read.ident(column).push(" AS ").ident(key);
    }
    for (i, column) in undo.columns().iter().enumerate() {
        read = read
            .push(", ")
            .ident(column)
            .push(" AS ")
            .ident(&undo.old(i));
    }
    let mut statement = rows(read.push(" FROM ").ident(undo.live()))
        .push(" FOR UPDATE) AS ")
        .ident(&alias(BEFORE))
        .push(" WHERE ");
    for (i, (column, key)) in undo.key().iter().zip(&keys).enumerate() {
        if i > 0 {
            statement = statement.push(" AND ");
        }
        statement = statement
            .ident(&qualified(LIVE, column))
            .push(" = ")
            .ident(&qualified(BEFORE, key));
    }
    statement = statement.push(" RETURNING ");
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            statement = statement.push(", ");
        }
        statement = statement.ident(&qualified(BEFORE, key));
    }
    let mut images = Vec::new();
    for (i, column) in undo.columns().iter().enumerate() {
        statement = statement
            .push(", ")
            .ident(&qualified(BEFORE, &undo.old(i)))
            .push(", ")
            .ident(&qualified(LIVE, column));
        images.extend([undo.old(i), undo.new_value(i)]);
    }
    vec![
        statement
            .push(")")
            .main()
            .push(" INSERT INTO ")
            .ident(undo.undo())
            .push(" (")
            .idents(undo.key())
            .push(", ")
            .idents(&images)
            .push(") SELECT * FROM sluice_changed"),
    ]
}

/// A revert's sub-batch over a range of the undo table as one statement:
/// `WITH sluice_put_back AS (UPDATE live … FROM undo … RETURNING <key>),
/// sluice_conflict AS (UPDATE undo SET state = 'conflict' WHERE <the rest
/// of the range>) UPDATE undo SET state = 'reverted' WHERE <key> IN
/// (SELECT <key> FROM sluice_put_back)`, whose count is the rows put back;
/// the same rows put back and marked as [`UndoTable::restore`]'s three.
pub(super) fn restore(undo: &UndoTable, force: bool, range: KeyRange<'_>) -> Statement {
    let state = undo.state();
    let mut statement = Statement::new("WITH sluice_put_back AS (UPDATE ")
        .ident(undo.live())
        .push(" AS ")
        .ident(&alias(LIVE))
        .push(" SET ");
    for (i, column) in undo.columns().iter().enumerate() {
        if i > 0 {
            statement = statement.push(", ");
        }
        statement = statement
            .ident(column)
            .push(" = ")
            .ident(&qualified(UNDO, &undo.old(i)));
    }
    statement = statement
        .push(" FROM ")
        .ident(undo.undo())
        .push(" AS ")
        .ident(&alias(UNDO))
        .push(" WHERE ");
    statement = join_key(statement, LIVE, UNDO, undo.key())
        .push(" AND ")
        .ident(&qualified(UNDO, &state))
        .push(" IS NULL");
    if !force {
        for (i, column) in undo.columns().iter().enumerate() {
            statement = same_value(
                statement.push(" AND "),
                &qualified(LIVE, column),
                &qualified(UNDO, &undo.new_value(i)),
            );
        }
    }
    let undo_key: Vec<Ident> = undo.key().iter().map(|k| qualified(UNDO, k)).collect();
    let live_key: Vec<Ident> = undo.key().iter().map(|k| qualified(LIVE, k)).collect();
    statement = range(range(statement, &undo_key), &live_key)
        .push(" RETURNING ")
        .idents(&undo_key)
        .push("), sluice_conflict AS (UPDATE ")
        .ident(undo.undo())
        .push(" SET ")
        .ident(&state)
        .push(" = 'conflict' WHERE ")
        .ident(&state)
        .push(" IS NULL");
    statement =
        range(statement, undo.key()).push(" AND NOT EXISTS (SELECT 1 FROM sluice_put_back WHERE ");
    statement = join_key(statement, "sluice_put_back", undo.undo().name(), undo.key())
        .push("))")
        .main()
        .push(" UPDATE ")
        .ident(undo.undo())
        .push(" SET ")
        .ident(&state)
        .push(" = 'reverted' WHERE ")
        .ident(&state)
        .push(" IS NULL");
    let (open, close) = if undo.key().len() > 1 {
        ("(", ")")
    } else {
        ("", "")
    };
    range(statement, undo.key())
        .push(" AND ")
        .push(open)
        .idents(undo.key())
        .push(close)
        .push(" IN (SELECT ")
        .idents(undo.key())
        .push(" FROM sluice_put_back)")
}

/// `a::text IS NOT DISTINCT FROM b::text`: every type has a text form,
/// not every type an equality (`json`, `point`), and two copies of one
/// value print alike.
pub(super) fn same_value(statement: Statement, a: &Ident, b: &Ident) -> Statement {
    statement
        .ident(a)
        .push("::text IS NOT DISTINCT FROM ")
        .ident(b)
        .push("::text")
}
