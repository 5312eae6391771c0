//! Undo tables: what an operation run with `--undo` keeps of each row it
//! changes, so that a later revert can put the row back exactly once.
//!
//! An undo table holds, per changed row, the live table's key under the
//! key's own column names, then for each column the operation writes its
//! value before (`sluice_old_N`) and after (`sluice_new_N`) the change, and
//! `sluice_state`: `NULL` until a revert reaches the row, then `reverted`,
//! or `conflict` when the row was changed again (or deleted) since and the
//! revert left it alone. The key is the undo table's primary key, so a row
//! is kept once and a revert walks the undo table in ranges of it.
//!
//! Every statement here runs inside a sub-batch's transaction, with the
//! change and the progress record: the images and the change commit
//! together or not at all. What differs between databases (creating the
//! table, joining two tables in an `UPDATE`, comparing values with `NULL`s
//! equal, the PostgreSQL form that keeps and changes in one statement) is
//! asked of the [`Dialect`].

use crate::dialect::{Dialect, join_key};
use crate::operator_sql::Assignments;
use crate::sql::{Ident, Statement};

mod moves;
#[cfg(test)]
mod tests;

pub use moves::MoveBack;

/// The undo table of one operation and the live table it mirrors: which
/// columns it keeps and the statements that fill it and read it back.
/// Built only from plain identifiers; no name of its own (`sluice_…`) may be
/// one of the live table's key columns.
#[derive(Debug, Clone, PartialEq)]
pub struct UndoTable {
    live: Ident,
    undo: Ident,
    key: Vec<Ident>,
    columns: Vec<Ident>,
}

/// Why an undo table cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UndoTableError {
    /// A key column is named like the undo table's own columns.
    #[error(
        "key column `{0}` is named like an undo table's own columns (sluice_…): --undo \
         cannot keep the images of this table's rows"
    )]
    OwnName(String),
    /// Nothing would be kept.
    #[error("an undo table keeps the columns an operation writes, and it writes none")]
    NoColumns,
}

/// A range of the undo table's rows, in its key's order: given a statement
/// ending inside a `WHERE` and the key's columns as the statement names
/// them, appends ` AND …` limiting it to the sub-batch's range.
pub type KeyRange<'a> = &'a dyn Fn(Statement, &[Ident]) -> Statement;

/// The state a revert leaves on a row it put back.
pub const REVERTED: &str = "reverted";
/// The state a revert leaves on a row it did not touch: changed again (or
/// deleted) since the operation wrote it.
pub const CONFLICT: &str = "conflict";

impl UndoTable {
    /// An undo table `undo` keeping `columns` of `live`'s rows by `key`.
    ///
    /// Errors: [`UndoTableError`] when a key column is named like one of
    /// the undo table's own columns (`sluice_…`), or no column is kept.
    pub fn new(
        live: Ident,
        undo: Ident,
        key: Vec<Ident>,
        columns: Vec<Ident>,
    ) -> Result<Self, UndoTableError> {
        if let Some(own) = key.iter().find(|k| k.name().starts_with("sluice_")) {
            return Err(UndoTableError::OwnName(own.name().to_owned()));
        }
        if columns.is_empty() {
            return Err(UndoTableError::NoColumns);
        }
        Ok(UndoTable {
            live,
            undo,
            key,
            columns,
        })
    }

    /// An undo table of keys alone: the rows an operation moved out of
    /// `live` (into an archive table, or into a copy of `live` itself) by
    /// their `key`, and the state a revert leaves on each.
    ///
    /// Errors: [`UndoTableError::OwnName`] as for [`UndoTable::new`].
    pub fn keys_only(live: Ident, undo: Ident, key: Vec<Ident>) -> Result<Self, UndoTableError> {
        if let Some(own) = key.iter().find(|k| k.name().starts_with("sluice_")) {
            return Err(UndoTableError::OwnName(own.name().to_owned()));
        }
        Ok(UndoTable {
            live,
            undo,
            key,
            columns: Vec::new(),
        })
    }

    /// The undo table.
    pub fn undo(&self) -> &Ident {
        &self.undo
    }

    /// The live table.
    pub fn live(&self) -> &Ident {
        &self.live
    }

    /// The live table's key columns (also the undo table's primary key).
    pub fn key(&self) -> &[Ident] {
        &self.key
    }

    /// The live table's columns whose images are kept.
    pub fn columns(&self) -> &[Ident] {
        &self.columns
    }

    /// The undo column holding the value of the `i`-th kept column before
    /// the change.
    pub fn old(&self, i: usize) -> Ident {
        own(&format!("sluice_old_{}", i + 1))
    }

    /// The undo column holding the value of the `i`-th kept column after
    /// the change.
    pub fn new_value(&self, i: usize) -> Ident {
        own(&format!("sluice_new_{}", i + 1))
    }

    /// The undo column a revert marks each row in.
    pub fn state(&self) -> Ident {
        own("sluice_state")
    }

    /// The statements creating the undo table, empty, in order
    /// ([`Dialect::create_undo_table`]). `declared` are the live table's
    /// declared types of the key's columns, then of the kept columns
    /// (SQLite declares each column; the others copy the live table's).
    pub fn create(&self, dialect: &dyn Dialect, declared: &[String]) -> Option<Vec<Statement>> {
        dialect.create_undo_table(self, declared)
    }

    /// The statements a sub-batch runs, in its transaction, to keep the
    /// images of its rows and apply the operator's `set` to them
    /// ([`Dialect::keep_and_update`]): `rows` appends ` WHERE …` selecting
    /// the sub-batch's rows of the live table, `range` limits a statement
    /// to the sub-batch's range. The first statement's count is the rows
    /// changed.
    pub fn keep_and_update(
        &self,
        dialect: &dyn Dialect,
        set: &Assignments,
        rows: &dyn Fn(Statement) -> Statement,
        range: KeyRange<'_>,
    ) -> Vec<Statement> {
        dialect.keep_and_update(self, set, rows, range)
    }

    /// The three statements of [`UndoTable::keep_and_update`] where one
    /// cannot do it all: copy the rows' values into the undo table as both
    /// images (the rows locked as they are read when `lock`), apply `set`
    /// to the rows whose keys the undo table now holds in the range (the
    /// operator's scope is not evaluated twice), then copy the rows' new
    /// values over the after-images. The first's count is the rows changed
    /// (the second's may be fewer on MySQL, which counts only rows whose
    /// values differ).
    pub fn keep_in_three(
        &self,
        dialect: &dyn Dialect,
        set: &Assignments,
        rows: &dyn Fn(Statement) -> Statement,
        range: KeyRange<'_>,
        lock: bool,
    ) -> Vec<Statement> {
        let images: Vec<Ident> = (0..self.columns.len())
            .flat_map(|i| [self.old(i), self.new_value(i)])
            .collect();
        let mut read = Statement::new("INSERT INTO ")
            .ident(&self.undo)
            .push(" (")
            .idents(&self.key)
            .push(", ")
            .idents(&images)
            .push(") SELECT ")
            .idents(&self.key);
        for column in &self.columns {
            read = read.push(", ").ident(column).push(", ").ident(column);
        }
        let mut copy = rows(read.push(" FROM ").ident(&self.live));
        if lock {
            copy = copy.push(" FOR UPDATE");
        }
        let (open, close) = row_value(&self.key);
        let update = range(
            Statement::new("UPDATE ")
                .ident(&self.live)
                .push(" SET ")
                .operator_assignments(set)
                .push(" WHERE 1 = 1"),
            &self.key,
        )
        .push(" AND ")
        .push(open)
        .idents(&self.key)
        .push(close)
        .push(" IN (SELECT ")
        .idents(&self.key)
        .push(" FROM ")
        .ident(&self.undo)
        .push(" WHERE 1 = 1");
        let update = range(update, &self.key).push(")");
        let after: Vec<(Ident, Ident)> = (0..self.columns.len())
            .map(|i| (self.new_value(i), qualified(LIVE, &self.columns[i])))
            .collect();
        let fill = dialect.update_join((&self.undo, UNDO), (&self.live, LIVE), &self.key, &after);
        // Both sides bounded: a planner without statistics on the undo
        // table (SQLite) may walk the live table first.
        let fill = range(fill, &qualify_all(UNDO, &self.key));
        let fill = range(fill, &qualify_all(LIVE, &self.key));
        vec![copy, update, fill]
    }

    /// Two statements for [`UndoTable::keep_and_update`] where a sub-batch
    /// holds the database's only write lock (SQLite), so no row changes
    /// between them: copy each row's key, its values and the values `set`
    /// gives them (each expression evaluated on the row as it was, as an
    /// `UPDATE` evaluates it) into the undo table, then write those new
    /// values from the undo table over the rows it now holds in the range:
    /// a row gets exactly the after-image kept, whatever its expression
    /// (`random()` too). The first's count is the rows changed. `None` when
    /// `set` does not give one expression per kept column (a tuple
    /// assignment): then [`UndoTable::keep_in_three`].
    pub fn keep_in_two(
        &self,
        dialect: &dyn Dialect,
        set: &Assignments,
        rows: &dyn Fn(Statement) -> Statement,
        range: KeyRange<'_>,
    ) -> Option<Vec<Statement>> {
        let written = set.columns();
        set.values()?;
        if written.len() != self.columns.len() {
            return None;
        }
        // Each kept column's place in `set`, found once.
        let mut places = Vec::with_capacity(self.columns.len());
        for column in &self.columns {
            let mut found = written
                .iter()
                .enumerate()
                .filter(|(_, w)| w.eq_ignore_ascii_case(column.name()));
            let (place, _) = found.next()?;
            if found.next().is_some() {
                return None;
            }
            places.push(place);
        }
        let images: Vec<Ident> = (0..self.columns.len())
            .flat_map(|i| [self.old(i), self.new_value(i)])
            .collect();
        let mut read = Statement::new("INSERT INTO ")
            .ident(&self.undo)
            .push(" (")
            .idents(&self.key)
            .push(", ")
            .idents(&images)
            .push(") SELECT ")
            .idents(&self.key);
        for (column, place) in self.columns.iter().zip(&places) {
            read = read
                .push(", ")
                .ident(column)
                .push(", ")
                .operator_value(set, *place);
        }
        let copy = rows(read.push(" FROM ").ident(&self.live));
        let after: Vec<(Ident, Ident)> = (0..self.columns.len())
            .map(|i| (self.columns[i].clone(), qualified(UNDO, &self.new_value(i))))
            .collect();
        let update = dialect.update_join((&self.live, LIVE), (&self.undo, UNDO), &self.key, &after);
        let update = range(update, &qualify_all(UNDO, &self.key));
        let update = range(update, &qualify_all(LIVE, &self.key));
        Some(vec![copy, update])
    }

    /// The three statements of a revert's sub-batch over a range of the
    /// undo table, in order: put the before-images back over the rows not
    /// yet reverted whose values are still the after-images (every such
    /// row with `force`), counting them; mark `reverted` the rows now
    /// holding their before-images; mark `conflict` the rest (changed
    /// again, or deleted, since). Each row's state is set once: a range run
    /// again finds no row left to revert.
    pub fn restore(
        &self,
        dialect: &dyn Dialect,
        force: bool,
        range: KeyRange<'_>,
    ) -> Vec<Statement> {
        let state = self.state();
        let before: Vec<(Ident, Ident)> = (0..self.columns.len())
            .map(|i| (self.columns[i].clone(), qualified(UNDO, &self.old(i))))
            .collect();
        let mut put_back = dialect
            .update_join((&self.live, LIVE), (&self.undo, UNDO), &self.key, &before)
            .push(" AND ")
            .ident(&qualified(UNDO, &state))
            .push(" IS NULL");
        if !force {
            for (i, column) in self.columns.iter().enumerate() {
                put_back = dialect.same_value(
                    put_back.push(" AND "),
                    &qualified(LIVE, column),
                    &qualified(UNDO, &self.new_value(i)),
                );
            }
        }
        let put_back = range(put_back, &qualify_all(UNDO, &self.key));
        let put_back = range(put_back, &qualify_all(LIVE, &self.key));
        let mark = |value: &'static str| self.mark(value, range);
        let mut reverted = mark("'reverted'")
            .push(" AND EXISTS (SELECT 1 FROM ")
            .ident(&self.live)
            .push(" AS ")
            .ident(&own(LIVE))
            .push(" WHERE ");
        // The undo table by its own name: the statement updates it unaliased.
        reverted = join_key(reverted, LIVE, self.undo.name(), &self.key);
        for (i, column) in self.columns.iter().enumerate() {
            reverted = dialect.same_value(
                reverted.push(" AND "),
                &qualified(LIVE, column),
                &qualified(self.undo.name(), &self.old(i)),
            );
        }
        vec![put_back, reverted.push(")"), mark("'conflict'")]
    }

    /// `CREATE TABLE undo <options> AS SELECT <key>, <each kept column
    /// twice>, <a NULL state> FROM live WHERE 1 = 0` and `ALTER TABLE undo
    /// ADD PRIMARY KEY (<key>)`: columns of the live table's own types (and
    /// collations), none of its defaults or generated values.
    pub fn copied_columns(&self, options: &'static str) -> Vec<Statement> {
        let mut create = Statement::new("CREATE TABLE ")
            .ident(&self.undo)
            .push(options)
            .push(" AS SELECT ")
            .idents(&self.key);
        for (i, column) in self.columns.iter().enumerate() {
            create = create
                .push(", ")
                .ident(column)
                .push(" AS ")
                .ident(&self.old(i))
                .push(", ")
                .ident(column)
                .push(" AS ")
                .ident(&self.new_value(i));
        }
        let create = create
            .push(", CAST(NULL AS CHAR(8)) AS ")
            .ident(&self.state())
            .push(" FROM ")
            .ident(&self.live)
            .push(" WHERE 1 = 0");
        let key = Statement::new("ALTER TABLE ")
            .ident(&self.undo)
            .push(" ADD PRIMARY KEY (")
            .idents(&self.key)
            .push(")");
        vec![create, key]
    }

    /// `CREATE TABLE undo (<key> NOT NULL, <images>, state, PRIMARY KEY
    /// (<key>))`, each column declared as `declared` says (the key's, then
    /// the kept columns'); `None` when one is not a type.
    pub fn declared_columns(&self, declared: &[String]) -> Option<Vec<Statement>> {
        if declared.len() != self.key.len() + self.columns.len() {
            return None;
        }
        let mut create = Statement::new("CREATE TABLE ").ident(&self.undo).push(" (");
        for (column, declared) in self.key.iter().zip(declared) {
            create = create
                .ident(column)
                .push(" ")
                .declared_type(declared)?
                .push(" NOT NULL, ");
        }
        let kept = &declared[self.key.len()..];
        for (i, declared) in kept.iter().enumerate() {
            for image in [self.old(i), self.new_value(i)] {
                create = create
                    .ident(&image)
                    .push(" ")
                    .declared_type(declared)?
                    .push(", ");
            }
        }
        Some(vec![
            create
                .ident(&self.state())
                .push(" TEXT, PRIMARY KEY (")
                .idents(&self.key)
                .push("))"),
        ])
    }

    /// `UPDATE undo SET state = <value> WHERE state IS NULL AND <range>`:
    /// the range's rows not yet marked (`value` a code-written literal).
    fn mark(&self, value: &'static str, range: KeyRange<'_>) -> Statement {
        let state = self.state();
        let head = Statement::new("UPDATE ")
            .ident(&self.undo)
            .push(" SET ")
            .ident(&state)
            .push(" = ")
            .push(value)
            .push(" WHERE ")
            .ident(&state)
            .push(" IS NULL");
        range(head, &self.key)
    }

    /// `SELECT COUNT(*), COUNT(CASE WHEN state = 'reverted' …), COUNT(CASE
    /// WHEN state = 'conflict' …) FROM undo`: the rows kept, and how a
    /// revert left them.
    pub fn summary(&self) -> Statement {
        let state = self.state();
        Statement::new("SELECT COUNT(*), COUNT(CASE WHEN ")
            .ident(&state)
            .push(" = 'reverted' THEN 1 END), COUNT(CASE WHEN ")
            .ident(&state)
            .push(" = 'conflict' THEN 1 END) FROM ")
            .ident(&self.undo)
    }

    /// The keys of the first `limit` rows a revert left alone, in key order.
    pub fn conflicts(&self, limit: i64) -> Statement {
        Statement::new("SELECT ")
            .idents(&self.key)
            .push(" FROM ")
            .ident(&self.undo)
            .push(" WHERE ")
            .ident(&self.state())
            .push(" = 'conflict' ORDER BY ")
            .idents(&self.key)
            .push(" LIMIT ")
            .value(limit.into())
    }

    /// `DROP TABLE undo`.
    pub fn drop_statement(&self) -> Statement {
        Statement::new("DROP TABLE ").ident(&self.undo)
    }
}

/// The alias of the live table in the statements joining the two.
pub const LIVE: &str = "sluice_live";
/// The alias of the undo table in the statements joining the two.
pub const UNDO: &str = "sluice_undo";

/// `alias.column`.
pub fn qualified(alias: &str, column: &Ident) -> Ident {
    own(&format!("{alias}.{}", column.name()))
}

fn qualify_all(alias: &str, columns: &[Ident]) -> Vec<Ident> {
    columns.iter().map(|c| qualified(alias, c)).collect()
}

/// The parentheses around a row value of `columns` (none for one column).
fn row_value(columns: &[Ident]) -> (&'static str, &'static str) {
    if columns.len() > 1 {
        ("(", ")")
    } else {
        ("", "")
    }
}

/// A name this module writes itself from plain parts.
fn own(name: &str) -> Ident {
    Ident::parse(name).expect("undo names are built from plain identifiers")
}
