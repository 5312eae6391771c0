//! A table partitioned by ranges of one column, as the catalogue shows it
//! ([`Target::range_partitions`]), and the partitions whose whole range lies
//! below a bound ([`Target::partitions_below`]): the ones an operation
//! deleting every row under that bound may drop at once instead of row by
//! row. PostgreSQL's declarative partitioning, and MySQL's `PARTITION BY
//! RANGE COLUMNS` on one column or `RANGE` of one column or of a
//! non-decreasing function of it; SQLite answers that no table is
//! partitioned.

use crate::connection::Target;
use crate::error::DatabaseError;
use crate::sql::{Ident, SqlValue};

/// A table partitioned by ranges of one column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangePartitions {
    /// The partition key's column.
    pub column: String,
    /// Its type, as the catalogue spells it (`timestamp with time zone`).
    pub column_type: String,
    /// The function of the column the ranges bound, where they bound one
    /// (MySQL's `PARTITION BY RANGE (TO_DAYS(created_at))`: `TO_DAYS`), one
    /// that never decreases as the column grows; `None` when they bound the
    /// column itself.
    pub function: Option<&'static str>,
    /// The partitions, as the catalogue lists them.
    pub partitions: Vec<RangePartition>,
}

/// One partition of a [`RangePartitions`] table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangePartition {
    /// Its name (in the table's schema, or qualified when it is elsewhere).
    pub name: String,
    /// Its exclusive upper bound as the catalogue writes the value
    /// (`2026-01-01 00:00:00+00`); `None` for `MAXVALUE` and the default
    /// partition, which no bound closes.
    pub upper: Option<String>,
    /// True for the default partition (rows no range takes).
    pub default: bool,
}

impl Target {
    /// How `table` is partitioned when it is partitioned by ranges of one
    /// plain column (MySQL: or of a non-decreasing function of one), with
    /// its partitions; `None` for any other table, and on SQLite.
    ///
    /// Errors: the database's, on reading its catalogue.
    pub async fn range_partitions(
        &self,
        table: &Ident,
    ) -> Result<Option<RangePartitions>, DatabaseError> {
        self.catalogue().range_partitions(table).await
    }

    /// The partitions of a table ([`Target::range_partitions`]'s `layout`
    /// of it) whose whole range lies below `bound` — their exclusive upper
    /// bound is at most `bound`, compared by the database in the partition
    /// column's type, as a statement's `column < bound` compares — oldest
    /// first. A partition whose name is not a plain identifier is left out.
    ///
    /// Errors: the database's.
    pub async fn partitions_below(
        &self,
        layout: &RangePartitions,
        bound: &SqlValue,
    ) -> Result<Vec<Ident>, DatabaseError> {
        self.catalogue().partitions_below(layout, bound).await
    }

    /// Takes one partition kept in `kept`'s record
    /// ([`crate::KeptPartitions`]) and attaches it back to its table under
    /// its name, in one transaction: the record goes if and only if the
    /// partition is attached again, so each is attached exactly once
    /// whatever fails. Lock waits are bounded (`lock_timeout`), so an
    /// attach never queues every query on the table behind a long
    /// transaction; a lock not granted is a transient error, to retry.
    /// `None` when no record is left (and always on SQLite and MySQL).
    ///
    /// Errors: the database's (an `ATTACH` it refuses: a default partition
    /// holding rows in the range, rows of the kept table outside it);
    /// [`DatabaseError::KeptPartition`] for a record that cannot be
    /// attached as it is. Nothing changes on error.
    pub async fn attach_kept_partition(
        &self,
        kept: &crate::KeptPartitions,
    ) -> Result<Option<crate::KeptPartition>, DatabaseError> {
        self.catalogue().attach_kept_partition(kept).await
    }

    /// Why the partitions of `table` must not be dropped in place of
    /// deleting their rows, if they must not: a trigger or rule that fires
    /// on `DELETE` (a drop fires none), a publication the table is in (a
    /// subscriber would keep the rows a drop removes), a foreign key that
    /// refers to it (a detach refuses it). `None` when a drop removes the
    /// rows as deleting them would.
    ///
    /// Errors: the database's.
    pub async fn partition_drop_blocker(
        &self,
        table: &Ident,
    ) -> Result<Option<String>, DatabaseError> {
        self.catalogue().partition_drop_blocker(table).await
    }
}

impl RangePartitions {
    /// The partitions with an upper bound and a name Sluice can write, in
    /// catalogue order: the candidates [`Target::partitions_below`] weighs.
    pub(crate) fn bounded(&self) -> Vec<(Ident, &String)> {
        self.partitions
            .iter()
            .filter_map(|p| Some((Ident::parse(&p.name).ok()?, p.upper.as_ref()?)))
            .collect()
    }
}

/// The partitions at `positions` (as the database returned them) of
/// `candidates` ([`RangePartitions::bounded`]).
pub(crate) fn at_positions(candidates: &[(Ident, &String)], positions: Vec<i64>) -> Vec<Ident> {
    positions
        .into_iter()
        .filter_map(|i| {
            candidates
                .get(usize::try_from(i).ok()?)
                .map(|c| c.0.clone())
        })
        .collect()
}
