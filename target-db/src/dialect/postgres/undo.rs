//! PostgreSQL's undo statements: the images kept and the change made in
//! one statement.

use crate::operator_sql::Assignments;
use crate::sql::{Ident, Statement};
use crate::undo::{KeyRange, LIVE, UndoTable, qualified};

use super::super::alias;

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
            .push(") INSERT INTO ")
            .ident(undo.undo())
            .push(" (")
            .idents(undo.key())
            .push(", ")
            .idents(&images)
            .push(") SELECT * FROM sluice_changed"),
    ]
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
