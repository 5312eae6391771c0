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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::{MYSQL, POSTGRES, SQLITE};

    fn undo() -> UndoTable {
        let ident = |name: &str| Ident::parse(name).unwrap();
        UndoTable::new(
            ident("items"),
            ident("items_undo_x"),
            vec![ident("site"), ident("seq")],
            vec![ident("n")],
        )
        .unwrap()
    }

    /// ` AND (site, seq) > (…)` as a sub-batch's range appends it.
    fn range(statement: Statement, key: &[Ident]) -> Statement {
        statement
            .push(" AND (")
            .idents(key)
            .push(") > (")
            .value(1.into())
            .push(", ")
            .value(2.into())
            .push(")")
    }

    fn rows(head: Statement) -> Statement {
        head.push(" WHERE grp = 1")
    }

    #[test]
    fn postgresql_keeps_the_locked_rows_images_in_the_statement_that_changes_them() {
        let set = Assignments::parse("n = n + 1").unwrap();
        let statements = undo().keep_and_update(&POSTGRES, &set, &rows, &range);
        assert_eq!(statements.len(), 1);
        assert_eq!(
            statements[0].text().as_str(),
            "WITH sluice_changed AS (UPDATE \"items\" AS \"sluice_live\" SET n = n + 1 FROM \
             (SELECT \"site\" AS \"sluice_key_1\", \"seq\" AS \"sluice_key_2\", \"n\" AS \
             \"sluice_old_1\" FROM \"items\" WHERE grp = 1 FOR UPDATE) AS \"sluice_before\" \
             WHERE \"sluice_live\".\"site\" = \"sluice_before\".\"sluice_key_1\" AND \
             \"sluice_live\".\"seq\" = \"sluice_before\".\"sluice_key_2\" RETURNING \
             \"sluice_before\".\"sluice_key_1\", \"sluice_before\".\"sluice_key_2\", \
             \"sluice_before\".\"sluice_old_1\", \"sluice_live\".\"n\") INSERT INTO \
             \"items_undo_x\" (\"site\", \"seq\", \"sluice_old_1\", \"sluice_new_1\") SELECT * \
             FROM sluice_changed"
        );
    }

    #[test]
    fn mysql_locks_the_rows_it_copies_and_changes_only_the_rows_copied() {
        let set = Assignments::parse("n = n + 1").unwrap();
        let statements = undo().keep_and_update(&MYSQL, &set, &rows, &range);
        let texts: Vec<&str> = statements.iter().map(|s| s.text().as_str()).collect();
        assert!(
            texts[0].ends_with("WHERE grp = 1 FOR UPDATE"),
            "{}",
            texts[0]
        );
        assert!(
            texts[1].contains(
                "AND (\"site\", \"seq\") IN (SELECT \"site\", \"seq\" FROM \"items_undo_x\" WHERE \
                 1 = 1 AND (\"site\", \"seq\") > ($3, $4))"
            ),
            "{}",
            texts[1]
        );
        assert!(
            texts[2].starts_with(
                "UPDATE \"items_undo_x\" AS \"sluice_undo\" JOIN \"items\" AS \"sluice_live\" ON"
            ),
            "{}",
            texts[2]
        );
        let sqlite = undo().keep_and_update(&SQLITE, &set, &rows, &range);
        assert!(!sqlite[0].text().as_str().contains("FOR UPDATE"));
    }

    #[test]
    fn a_revert_puts_back_only_rows_still_as_written_unless_forced() {
        let texts = |dialect: &dyn Dialect, force: bool| -> Vec<String> {
            undo()
                .restore(dialect, force, &range)
                .iter()
                .map(|s| s.text().as_str().to_owned())
                .collect()
        };
        let postgres = texts(&POSTGRES, false);
        assert!(
            postgres[0].contains(
                "\"sluice_live\".\"n\"::text IS NOT DISTINCT FROM \"sluice_undo\".\"sluice_new_1\"::text"
            ),
            "{}",
            postgres[0]
        );
        assert!(postgres[0].contains("\"sluice_undo\".\"sluice_state\" IS NULL"));
        assert!(!texts(&POSTGRES, true)[0].contains("sluice_new_1"));
        assert!(texts(&MYSQL, false)[0].contains("<=> \"sluice_undo\".\"sluice_new_1\""));
        assert!(texts(&SQLITE, false)[0].contains(" IS \"sluice_undo\".\"sluice_new_1\""));
        // Every row of the range is marked once: reverted, else conflict.
        assert!(postgres[1].starts_with(
            "UPDATE \"items_undo_x\" SET \"sluice_state\" = 'reverted' WHERE \"sluice_state\" IS NULL"
        ));
        assert!(postgres[2].starts_with(
            "UPDATE \"items_undo_x\" SET \"sluice_state\" = 'conflict' WHERE \"sluice_state\" IS NULL"
        ));
    }

    #[test]
    fn postgresql_s_single_statements_hoist_their_own_with_when_fused() {
        let set = Assignments::parse("n = n + 1").unwrap();
        let keep = undo()
            .keep_and_update(&POSTGRES, &set, &rows, &range)
            .remove(0);
        let (lead, main) = keep.split_main();
        assert!(
            lead.unwrap()
                .as_str()
                .starts_with("WITH sluice_changed AS (UPDATE")
        );
        assert!(main.as_str().starts_with("INSERT INTO \"items_undo_x\""));
        let restore = POSTGRES
            .restore_in_one_statement(&undo(), false, &range)
            .unwrap();
        let (lead, main) = restore.split_main();
        let lead = lead.unwrap();
        assert!(
            lead.as_str()
                .starts_with("WITH sluice_put_back AS (UPDATE \"items\"")
        );
        assert!(
            lead.as_str()
                .contains("sluice_conflict AS (UPDATE \"items_undo_x\" SET")
        );
        assert!(
            main.as_str()
                .starts_with("UPDATE \"items_undo_x\" SET \"sluice_state\" = 'reverted' WHERE"),
            "{}",
            main.as_str()
        );
        assert!(
            SQLITE
                .restore_in_one_statement(&undo(), false, &range)
                .is_none()
        );
    }

    #[test]
    fn an_undo_table_refuses_a_key_named_like_its_own_columns() {
        let ident = |name: &str| Ident::parse(name).unwrap();
        let refused = UndoTable::new(
            ident("t"),
            ident("t_undo"),
            vec![ident("sluice_state")],
            vec![ident("n")],
        );
        assert_eq!(refused, Err(UndoTableError::OwnName("sluice_state".into())));
        assert_eq!(
            UndoTable::new(ident("t"), ident("t_undo"), vec![ident("id")], vec![]),
            Err(UndoTableError::NoColumns)
        );
    }
}
