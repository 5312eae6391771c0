//! What an operation walks: its table, its batching strategy and the scope
//! filter that selects the rows it touches.
//!
//! Every name in a [`Shape`] is an [`Ident`] (validated, always quoted) and
//! every value in a [`Filter`] is a bound parameter, so no shape can put a
//! user's text into SQL. The one exception is [`Filter::expression`], an
//! operator's own SQL (the `update-in-batches --where` text), which is
//! parsed as exactly one expression ([`sluice_target::Condition`]) and parenthesised.

use sluice_target::{Assignments, Dialect, Ident, IdentError};

use crate::error::OperationError;

mod filter;

pub(crate) use filter::Comparison;
pub use filter::Filter;
use filter::read_alike;

/// An operation's table, batching strategy and scope.
///
/// ```
/// use sluice_operations::{Filter, Shape, Strategy};
///
/// // Ranges of `id`, over the rows of `events` whose status is 'stale'.
/// let shape = Shape::range("events", "id")?.scope(Filter::new().eq("status", "stale"))?;
/// assert_eq!(shape.table().name(), "events");
/// assert!(matches!(shape.strategy(), Strategy::Keyset(columns) if columns.len() == 1));
/// // A name that is not a plain identifier is refused, not quoted away.
/// assert!(Shape::range("events; DROP TABLE users", "id").is_err());
/// # Ok::<(), sluice_operations::OperationError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    table: Ident,
    strategy: Strategy,
    scope: Filter,
    seek: Option<Ident>,
    drops_partitions: bool,
    keeps_partitions_in: Option<Ident>,
}

/// How an operation's rows are divided into batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// Contiguous ranges in the order of one or more columns: one unique key
    /// (the default, a single-column range) or a keyset such as
    /// `(created_at, id)` whose last column makes the order total. Each batch
    /// is `(start, end]` of that order, recorded before it runs.
    Keyset(Vec<Ident>),
    /// `… LIMIT n` until fewer than `n` rows match: for changes that take a
    /// row out of the scope (a delete, or an update of the filtered column).
    /// `key` identifies rows. There is no cursor; the scope alone decides.
    Loop {
        /// The column, or columns together, naming each row once.
        key: Vec<Ident>,
    },
}

impl Shape {
    /// Ranges over a single unique column (`key`), the default strategy.
    pub fn range(table: &str, key: &str) -> Result<Self, OperationError> {
        Shape::keyset(table, &[key])
    }

    /// Ranges over the order of several columns, the last of which must make
    /// rows unique (`["created_at", "id"]`).
    pub fn keyset(table: &str, columns: &[&str]) -> Result<Self, OperationError> {
        if columns.is_empty() {
            return Err(OperationError::Arguments(
                "a keyset needs at least one column".into(),
            ));
        }
        Ok(Shape {
            table: Ident::parse(table)?,
            strategy: Strategy::Keyset(
                columns
                    .iter()
                    .map(|c| Ident::parse(c))
                    .collect::<Result<_, IdentError>>()?,
            ),
            scope: Filter::new(),
            seek: None,
            drops_partitions: false,
            keeps_partitions_in: None,
        })
    }

    /// `… LIMIT n` until fewer than `n` rows match; `key` names rows.
    pub fn loop_until_done(table: &str, key: &str) -> Result<Self, OperationError> {
        Shape::loop_until_done_by(table, &[key])
    }

    /// `… LIMIT n` until fewer than `n` rows match; the `key` columns
    /// together name rows (`["id", "created_at"]`, the primary key of a
    /// table partitioned by `created_at`).
    pub fn loop_until_done_by(table: &str, key: &[&str]) -> Result<Self, OperationError> {
        if key.is_empty() {
            return Err(OperationError::Arguments(
                "a loop needs at least one key column".into(),
            ));
        }
        Ok(Shape {
            table: Ident::parse(table)?,
            strategy: Strategy::Loop {
                key: key
                    .iter()
                    .map(|c| Ident::parse(c))
                    .collect::<Result<_, IdentError>>()?,
            },
            scope: Filter::new(),
            seek: None,
            drops_partitions: false,
            keeps_partitions_in: None,
        })
    }

    /// Restricts the operation to the rows `filter` matches.
    ///
    /// Errors: [`OperationError::Unsafe`] when the filter names a column that
    /// is not a plain identifier, [`OperationError::Expression`] for an
    /// expression that is not exactly one SQL expression.
    pub fn scope(mut self, filter: Filter) -> Result<Self, OperationError> {
        if let Some(error) = filter.error {
            return Err(error.into());
        }
        read_alike(self.scope.dialect, &filter.clauses)?;
        self.scope.clauses.extend(filter.clauses);
        Ok(self)
    }

    /// Lets a loop seek on MySQL: each sub-batch first reads the value of
    /// `column` (an indexed column of the scope) `n` rows on from where the
    /// batch's last sub-batch stopped, and changes only rows in scope
    /// between the two, so no statement walks the index entries earlier
    /// sub-batches deleted and purge has not yet removed. The bound only
    /// narrows a statement: the loop still ends only when a sub-batch
    /// without one finds fewer than `n` rows, so a row the seek passed by
    /// (inserted behind it meanwhile) is still reached. Other databases, and
    /// keyset shapes, ignore it.
    ///
    /// Errors: [`OperationError::Unsafe`] when `column` is not a plain
    /// identifier.
    pub fn seek_by(mut self, column: &str) -> Result<Self, OperationError> {
        self.seek = Some(Ident::parse(column)?);
        Ok(self)
    }

    /// Lets a loop's sub-batch drop a whole partition of the table in place
    /// of deleting its rows one by one, in the sub-batch's transaction
    /// (PostgreSQL) or recorded before and after under a lock on the table
    /// (MySQL, whose drop commits on its own): on a table partitioned by
    /// ranges of a column the scope bounds from above (`column < value`),
    /// a partition whose whole range lies below that bound, once a check
    /// under its lock finds every row of it in scope. Only for an operation
    /// whose sub-batches delete every row they are given: a drop is what
    /// such a sub-batch would have done to those rows. Keyset shapes ignore
    /// it.
    pub fn drop_partitions(mut self) -> Self {
        self.drops_partitions = true;
        self
    }

    /// Lets a sub-batch, of a loop or a keyset, take a whole partition out
    /// of the table as [`Shape::drop_partitions`] would, but keep it: it is
    /// detached, renamed beside `undo` and recorded in `<undo>_parts`
    /// ([`sluice_target::KeptPartitions`]), in the sub-batch's transaction
    /// with the batch's record, so that a revert attaches it back. Only
    /// where the dialect keeps partitions (PostgreSQL), and only for an
    /// operation whose sub-batches take every row in scope out of the table
    /// into `undo`: a kept partition is what such sub-batches would have
    /// done to its rows. A keyset batch goes on over its range after it.
    ///
    /// Errors: [`OperationError::Unsafe`] when `undo` is not a plain
    /// identifier.
    pub fn keep_partitions_in(mut self, undo: &str) -> Result<Self, OperationError> {
        self.keeps_partitions_in = Some(Ident::parse(undo)?);
        Ok(self)
    }

    /// True when a sub-batch may take a whole partition out of the table:
    /// dropped ([`Shape::drop_partitions`], loops alone) or kept
    /// ([`Shape::keep_partitions_in`]).
    pub fn drops_partitions(&self) -> bool {
        (self.drops_partitions && matches!(self.strategy, Strategy::Loop { .. }))
            || self.keeps_partitions_in.is_some()
    }

    /// The undo table beside which partitions are kept instead of dropped
    /// ([`Shape::keep_partitions_in`]), if any.
    pub fn partitions_kept_in(&self) -> Option<&Ident> {
        self.keeps_partitions_in.as_ref()
    }

    /// The column a loop seeks by ([`Shape::seek_by`]), if any.
    pub fn seek_column(&self) -> Option<&Ident> {
        match self.strategy {
            Strategy::Loop { .. } => self.seek.as_ref(),
            Strategy::Keyset(_) => None,
        }
    }

    /// The target table.
    pub fn table(&self) -> &Ident {
        &self.table
    }

    /// The batching strategy.
    pub fn strategy(&self) -> &Strategy {
        &self.strategy
    }

    /// The scope filter.
    pub fn filter(&self) -> &Filter {
        &self.scope
    }

    /// The dialect its SQL is written in ([`Shape::for_dialect`]).
    pub fn dialect(&self) -> &'static dyn Dialect {
        self.scope.dialect
    }

    /// The same shape writing its SQL for `dialect` (the runtime and
    /// enqueue set the store's; PostgreSQL's by default).
    ///
    /// Errors: [`OperationError::Expression`] when an operator's condition
    /// would mean something else in `dialect`'s sessions than in the
    /// operator's own ([`sluice_target::Condition::check_for_mysql`]).
    pub fn for_dialect(mut self, dialect: &'static dyn Dialect) -> Result<Self, OperationError> {
        read_alike(dialect, &self.scope.clauses)?;
        self.scope.dialect = dialect;
        Ok(self)
    }

    /// The columns a batch cursor spans (none for a loop).
    pub fn batching_columns(&self) -> &[Ident] {
        match &self.strategy {
            Strategy::Keyset(columns) => columns,
            Strategy::Loop { .. } => &[],
        }
    }

    /// Every column the shape names, for the catalogue check: the batching
    /// columns or loop key, then the filter's columns.
    pub fn columns(&self) -> Vec<&Ident> {
        let mut columns: Vec<&Ident> = match &self.strategy {
            Strategy::Keyset(columns) => columns.iter().collect(),
            Strategy::Loop { key } => key.iter().collect(),
        };
        for column in self.scope.columns() {
            if !columns.contains(&column) {
                columns.push(column);
            }
        }
        columns
    }

    /// Refuses an `UPDATE` that writes `written` (column names as the SET
    /// gives them) when it could meet a row it already changed: a keyset
    /// walk whose SET writes a batching column — by its name or by a name
    /// the database gives a row's id (`ROW_ID_ALIASES`), which an integer
    /// primary key is another name for — moves rows to ranges still
    /// ahead (or behind), and a loop re-reads its scope until it is empty,
    /// so an update either puts rows back in it or never empties it. Every
    /// other update of a keyset shape changes each row in scope once.
    ///
    /// Errors: [`OperationError::Arguments`] naming the column and why.
    pub fn check_update(&self, written: &[&str]) -> Result<(), OperationError> {
        match &self.strategy {
            Strategy::Loop { key } => Err(OperationError::Arguments(format!(
                "an UPDATE cannot run over `{}` with the loop strategy (LIMIT n until no row matches, by `{}`): \
                 it re-reads its scope until it is empty, so rows the SET leaves in scope are changed \
                 again and again; walk a range of a unique key instead",
                self.table,
                key.iter().map(Ident::name).collect::<Vec<_>>().join(", ")
            ))),
            Strategy::Keyset(columns) => {
                let hit = written.iter().find_map(|w| {
                    columns
                        .iter()
                        .find(|c| c.name().eq_ignore_ascii_case(w))
                        .map(|c| (*w, c))
                });
                let alias = written
                    .iter()
                    .find(|w| ROW_ID_ALIASES.iter().any(|a| a.eq_ignore_ascii_case(w)));
                match (hit, alias) {
                    (Some((written, column)), _) => Err(OperationError::Arguments(format!(
                        "the SET writes `{written}`, which the batches of `{}` walk by (`{column}`): \
                         a changed row would move to a range not yet run and be changed again; \
                         batch by another unique key or leave `{column}` out of the SET",
                        self.table
                    ))),
                    (None, Some(alias)) => Err(OperationError::Arguments(format!(
                        "the SET writes `{alias}`, a name SQLite (`rowid`, `oid`, `_rowid_`) or \
                         MySQL (`_rowid`) gives a row's id — the batching key itself when it is an \
                         integer primary key, so a changed row could move to a range not yet run \
                         and be changed again; leave `{alias}` out of the SET"
                    ))),
                    (None, None) => Ok(()),
                }
            }
        }
    }

    /// Parses an operator's SET list and refuses it when it writes a column
    /// this shape walks by ([`Shape::check_update`]).
    ///
    /// Errors: [`OperationError::Expression`] when `set` is not one SET
    /// list; [`OperationError::Arguments`] as [`Shape::check_update`].
    pub fn checked_set(&self, set: &str) -> Result<Assignments, OperationError> {
        let set = Assignments::parse(set)?;
        self.scope.dialect.read_alike_set(&set)?;
        let written: Vec<&str> = set.columns().iter().map(String::as_str).collect();
        self.check_update(&written)?;
        Ok(set)
    }

    /// The column an index must serve for this shape's batch query: the
    /// first batching column, or for a loop the first filtered column.
    pub fn indexed_column(&self) -> &Ident {
        match &self.strategy {
            Strategy::Keyset(columns) => &columns[0],
            Strategy::Loop { key } => self.scope.columns().next().unwrap_or(&key[0]),
        }
    }
}

/// Names that SQLite (`rowid`, `oid`, `_rowid_`) and MySQL (`_rowid`, for a
/// one-column integer primary key) accept for a row's id, in a SET too:
/// writing one writes an integer primary key under another name. A real
/// column of that name is refused as well (it cannot be told from the
/// alias without the catalogue).
pub const ROW_ID_ALIASES: [&str; 4] = ["rowid", "oid", "_rowid_", "_rowid"];

#[cfg(test)]
mod tests;
