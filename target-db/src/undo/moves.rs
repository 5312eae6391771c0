//! Undo of moved rows (`archive-rows`, `delete-aged-rows`): the keys kept
//! as rows leave the live table, and a revert's sub-batch moving them back.

use super::{KeyRange, LIVE, UndoTable, own, row_value};
use crate::dialect::join_key;
use crate::sql::{Ident, Statement};

/// A revert's sub-batch moving rows back ([`UndoTable::move_back`]), run
/// in this order in one transaction.
#[derive(Debug, Clone)]
pub struct MoveBack {
    /// Marks `conflict` the rows whose key is live again, or which the
    /// table holding them no longer holds: they are left where they are.
    pub conflict: Statement,
    /// Copies the other rows back into the live table; its count is the
    /// rows put back.
    pub copy: Statement,
    /// Deletes them from the archive table (`None` when the undo table
    /// itself holds them: it keeps them, marked, until pruned). A count
    /// other than the copy's must roll the sub-batch back: then every row
    /// is in exactly one of the two tables.
    pub delete: Option<Statement>,
    /// Marks them `reverted`.
    pub reverted: Statement,
}

impl UndoTable {
    /// `INSERT INTO undo (<key>) SELECT <key> FROM live WHERE <rows>`: the
    /// keys of the rows a sub-batch moves out of the live table, read (and
    /// locked, with `lock`) before they are moved.
    pub fn keep_keys(&self, rows: &dyn Fn(Statement) -> Statement, lock: bool) -> Statement {
        let keep = rows(
            Statement::new("INSERT INTO ")
                .ident(&self.undo)
                .push(" (")
                .idents(&self.key)
                .push(") SELECT ")
                .idents(&self.key)
                .push(" FROM ")
                .ident(&self.live),
        );
        if lock { keep.push(" FOR UPDATE") } else { keep }
    }

    /// The statements of a revert's sub-batch that moves rows back from
    /// `held_in` (an archive table, or this undo table itself when it holds
    /// the rows) into the live table, over a range of this table's keys not
    /// yet reverted ([`MoveBack`]). `overriding` follows the copy's column
    /// list (PostgreSQL's `OVERRIDING SYSTEM VALUE`, so an identity key
    /// keeps its value).
    pub fn move_back(
        &self,
        held_in: &Ident,
        columns: &[Ident],
        overriding: &'static str,
        range: KeyRange<'_>,
    ) -> MoveBack {
        let state = self.state();
        let mark = |value: &'static str| self.mark(value, range);
        let exists = |statement: Statement, table: &Ident| {
            let statement = statement
                .push("EXISTS (SELECT 1 FROM ")
                .ident(table)
                .push(" AS ")
                .ident(&own(LIVE))
                .push(" WHERE ");
            join_key(statement, LIVE, self.undo.name(), &self.key).push(")")
        };
        let mut conflict = exists(mark("'conflict'").push(" AND ("), &self.live);
        if held_in != &self.undo {
            conflict = exists(conflict.push(" OR NOT "), held_in);
        }
        let conflict = conflict.push(")");
        // The keys of the range not yet reverted, through a derived table:
        // MySQL reads no table in a subquery of a statement changing it.
        let (open, close) = row_value(&self.key);
        // The range on the table read too: MariaDB runs `IN (…)` row by
        // row over what the rest selects, which must not be the whole
        // table (every row of it locked).
        let pending = |statement: Statement| {
            let statement = range(statement.push(" WHERE 1 = 1"), &self.key)
                .push(" AND ")
                .push(open)
                .idents(&self.key)
                .push(close)
                .push(" IN (SELECT ")
                .idents(&self.key)
                .push(" FROM (SELECT ")
                .idents(&self.key)
                .push(" FROM ")
                .ident(&self.undo)
                .push(" WHERE ")
                .ident(&state)
                .push(" IS NULL");
            range(statement, &self.key).push(") AS sluice_keys)")
        };
        let copy = pending(
            Statement::new("INSERT INTO ")
                .ident(&self.live)
                .push(" (")
                .idents(columns)
                .push(")")
                .push(overriding)
                .push(" SELECT ")
                .idents(columns)
                .push(" FROM ")
                .ident(held_in),
        );
        let delete =
            (held_in != &self.undo).then(|| pending(Statement::new("DELETE FROM ").ident(held_in)));
        MoveBack {
            conflict,
            copy,
            delete,
            reverted: mark("'reverted'"),
        }
    }

    /// `CREATE TABLE undo (<each of columns> <declared>, state, PRIMARY
    /// KEY (<key>))`, the key's columns `NOT NULL`: a copy of the live
    /// table's rows where tables are declared column by column (SQLite,
    /// whose primary key alone does not forbid `NULL`); `None` when a
    /// declared type is not a type.
    pub fn declared_rows(&self, columns: &[Ident], declared: &[String]) -> Option<Statement> {
        if columns.len() != declared.len() {
            return None;
        }
        let mut create = Statement::new("CREATE TABLE ").ident(&self.undo).push(" (");
        for (column, declared) in columns.iter().zip(declared) {
            create = create.ident(column).push(" ").declared_type(declared)?;
            if self.key.contains(column) {
                create = create.push(" NOT NULL");
            }
            create = create.push(", ");
        }
        Some(
            create
                .ident(&self.state())
                .push(" CHAR(8), PRIMARY KEY (")
                .idents(&self.key)
                .push("))"),
        )
    }
}
