//! Partitions an operation detached and kept instead of dropping them
//! (`delete-aged-rows --undo` on PostgreSQL): each is renamed beside the
//! undo table and recorded — kept name, original name, bound and rows — in
//! a table of Sluice's, so that a revert attaches it back as it was.
//!
//! A partition bound is the one piece of SQL here that is not a code-written
//! fragment, a quoted name or a bound value: `ATTACH PARTITION … FOR VALUES`
//! takes no parameters. The bound is the text PostgreSQL itself wrote
//! (`pg_get_expr`), and is used only once [`RangeBound::parse`] has read it
//! as exactly `FOR VALUES FROM (v) TO (v)` of single literals, and written
//! it again with its own quoting.

use crate::sql::{Ident, IdentError, SqlText, SqlValue, Statement};

/// The record of the partitions one operation kept: the table
/// `<undo table>_parts` beside its undo table, and the statements that keep
/// a partition, take one back, and list them (PostgreSQL's SQL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptPartitions {
    live: Ident,
    undo: Ident,
    record: Ident,
}

/// One kept partition as its record holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptPartition {
    /// The detached partition under its kept name.
    pub kept: Ident,
    /// Its name while it was a partition (no schema: it keeps its own).
    pub name: Ident,
    /// Its bound, as PostgreSQL wrote it.
    pub bound: String,
    /// The rows it held when it was detached.
    pub rows: i64,
}

impl KeptPartitions {
    /// The record of the partitions of `live` kept beside the undo table
    /// `undo`. Errors when `<undo>_parts` would not be a plain identifier.
    pub fn of(live: &Ident, undo: &Ident) -> Result<Self, IdentError> {
        Ok(KeptPartitions {
            live: live.clone(),
            undo: undo.clone(),
            record: undo.beside(&format!("{}_parts", undo.name()))?,
        })
    }

    /// The table of records.
    pub fn record(&self) -> &Ident {
        &self.record
    }

    /// The name `partition` is kept under: the undo table's name and the
    /// partition's object id in base 36, in the partition's own schema —
    /// unique while the partition exists, and no longer than 62 characters
    /// for an undo table name of 54. Errors when it would not be a plain
    /// identifier.
    pub fn kept_name(&self, partition: &Ident, oid: i64) -> Result<Ident, IdentError> {
        let oid = u64::try_from(oid).unwrap_or(0);
        partition.beside(&format!("{}_{}", self.undo.name(), radix36(oid)))
    }

    /// Creates the table of records, empty.
    pub fn create(&self) -> Statement {
        Statement::new("CREATE TABLE ").ident(&self.record).push(
            " (kept TEXT PRIMARY KEY, name TEXT NOT NULL, bound TEXT NOT NULL, \
             rows BIGINT NOT NULL)",
        )
    }

    /// Drops one kept table (`sluice prune`), by its kept name.
    pub fn drop_kept(partition: &KeptPartition) -> Statement {
        Statement::new("DROP TABLE IF EXISTS ").ident(&partition.kept)
    }

    /// Drops the table of records (the kept tables are dropped by name).
    pub fn drop_statement(&self) -> Statement {
        Statement::new("DROP TABLE IF EXISTS ").ident(&self.record)
    }

    /// Reads `partition`'s object id and bound, as `(BIGINT, TEXT)`; to run
    /// before it is detached (a detached table has no bound).
    pub fn describe(partition: &Ident) -> Statement {
        Statement::new(
            "SELECT c.oid::bigint, pg_catalog.pg_get_expr(c.relpartbound, c.oid) \
             FROM pg_catalog.pg_class c WHERE c.oid = to_regclass(",
        )
        .value(SqlValue::Text(partition.quoted()))
        .push(")")
    }

    /// After `partition` was detached: renames it to `kept` (in its own
    /// schema) and records it, in that order.
    pub fn keep(&self, partition: &Ident, kept: &Ident, bound: &str, rows: i64) -> [Statement; 2] {
        let bare = Ident::parse(kept.name()).expect("a part of an identifier is one");
        [
            Statement::new("ALTER TABLE ")
                .ident(partition)
                .push(" RENAME TO ")
                .ident(&bare),
            Statement::new("INSERT INTO ")
                .ident(&self.record)
                .push(" (kept, name, bound, rows) VALUES (")
                .value(SqlValue::Text(kept.to_string()))
                .push(", ")
                .value(SqlValue::Text(partition.name().to_owned()))
                .push(", ")
                .value(SqlValue::Text(bound.to_owned()))
                .push(", ")
                .value(SqlValue::Int(rows))
                .push(")"),
        ]
    }

    /// Takes one record out (the first by kept name), locking it until the
    /// transaction ends: `kept, name, bound, rows`, or no row when none is
    /// left.
    pub fn take_one(&self) -> Statement {
        Statement::new("DELETE FROM ")
            .ident(&self.record)
            .push(" WHERE kept = (SELECT kept FROM ")
            .ident(&self.record)
            .push(" ORDER BY kept LIMIT 1 FOR UPDATE) RETURNING kept, name, bound, rows")
    }

    /// Every record: `kept, name, bound, rows`.
    pub fn list(&self) -> Statement {
        Statement::new("SELECT kept, name, bound, rows FROM ")
            .ident(&self.record)
            .push(" ORDER BY kept")
    }

    /// Attaches `partition` back under its name: renamed, then attached to
    /// the live table with its bound. Errors when the bound is not one
    /// [`RangeBound::parse`] reads.
    pub fn attach(&self, partition: &KeptPartition) -> Result<[Statement; 2], KeptPartitionError> {
        let bound =
            RangeBound::parse(&partition.bound).ok_or_else(|| KeptPartitionError::Bound {
                kept: partition.kept.to_string(),
                bound: partition.bound.clone(),
            })?;
        let named = partition
            .kept
            .beside(partition.name.name())
            .map_err(|e| KeptPartitionError::Name(e.to_string()))?;
        let attach = Statement::new("ALTER TABLE ")
            .ident(&self.live)
            .push(" ATTACH PARTITION ")
            .ident(&named)
            .push(" ");
        Ok([
            Statement::new("ALTER TABLE ")
                .ident(&partition.kept)
                .push(" RENAME TO ")
                .ident(&partition.name),
            Statement::with_text(attach.text().clone().append(&bound.text()), Vec::new()),
        ])
    }
}

impl KeptPartition {
    /// A record as [`KeptPartitions::take_one`] or [`KeptPartitions::list`]
    /// read it.
    pub fn from_row(
        kept: &str,
        name: &str,
        bound: String,
        rows: i64,
    ) -> Result<Self, KeptPartitionError> {
        let parse = |s: &str| Ident::parse(s).map_err(|e| KeptPartitionError::Name(e.to_string()));
        Ok(KeptPartition {
            kept: parse(kept)?,
            name: parse(name)?,
            bound,
            rows,
        })
    }
}

/// A record of a kept partition that cannot be attached back as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeptPartitionError {
    /// The bound is not `FOR VALUES FROM (v) TO (v)` of single literals.
    #[error("the kept partition `{kept}` has a bound Sluice does not read: {bound}")]
    Bound {
        /// The kept table.
        kept: String,
        /// Its recorded bound.
        bound: String,
    },
    /// A recorded name is not a plain identifier.
    #[error("a kept partition's record: {0}")]
    Name(String),
}

/// A range partition's bound of one column, read from PostgreSQL's own
/// text: `FOR VALUES FROM (lower) TO (upper)`, each a quoted literal, a
/// number, `MINVALUE` or `MAXVALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeBound {
    lower: BoundValue,
    upper: BoundValue,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum BoundValue {
    Quoted(String),
    Number(String),
    Min,
    Max,
}

impl RangeBound {
    /// Reads `text`; `None` for anything else than the form above (a list,
    /// a default partition, several columns, an expression).
    pub fn parse(text: &str) -> Option<Self> {
        let inner = text.strip_prefix("FOR VALUES FROM (")?.strip_suffix(')')?;
        let (lower, upper) = split_values(inner)?;
        Some(RangeBound {
            lower: BoundValue::parse(lower)?,
            upper: BoundValue::parse(upper)?,
        })
    }

    /// The upper value as written, unquoted; `None` for `MINVALUE` and
    /// `MAXVALUE`.
    pub fn upper(&self) -> Option<String> {
        match &self.upper {
            BoundValue::Quoted(value) | BoundValue::Number(value) => Some(value.clone()),
            BoundValue::Min | BoundValue::Max => None,
        }
    }

    /// The bound written again, each literal quoted here.
    fn text(&self) -> SqlText {
        let mut out = String::from("FOR VALUES FROM (");
        self.lower.write(&mut out);
        out.push_str(") TO (");
        self.upper.write(&mut out);
        out.push(')');
        SqlText::written_here(out)
    }
}

impl BoundValue {
    fn parse(value: &str) -> Option<Self> {
        if let Some(quoted) = value.strip_prefix('\'') {
            let inner = quoted.strip_suffix('\'')?;
            // One quoted value: every quote inside it is doubled.
            if inner.replace("''", "").contains('\'') {
                return None;
            }
            return Some(BoundValue::Quoted(inner.replace("''", "'")));
        }
        if value.eq_ignore_ascii_case("MINVALUE") {
            return Some(BoundValue::Min);
        }
        if value.eq_ignore_ascii_case("MAXVALUE") {
            return Some(BoundValue::Max);
        }
        let number = !value.is_empty()
            && value
                .chars()
                .all(|c| c.is_ascii_digit() || "-+.eE".contains(c))
            && value.chars().any(|c| c.is_ascii_digit());
        number.then(|| BoundValue::Number(value.to_owned()))
    }

    fn write(&self, out: &mut String) {
        match self {
            BoundValue::Quoted(value) => {
                out.push('\'');
                out.push_str(&value.replace('\'', "''"));
                out.push('\'');
            }
            BoundValue::Number(value) => out.push_str(value),
            BoundValue::Min => out.push_str("MINVALUE"),
            BoundValue::Max => out.push_str("MAXVALUE"),
        }
    }
}

/// `n` in base 36, lowercase: a short suffix, sorting as `n` among
/// suffixes of one length.
pub fn radix36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ASCII digits")
}

/// `lower) TO (upper`, split at the one `) TO (` outside quotes.
fn split_values(inner: &str) -> Option<(&str, &str)> {
    let mut quoted = false;
    let bytes = inner.as_bytes();
    let separator = b") TO (";
    let mut found = None;
    for i in 0..bytes.len() {
        if bytes[i] == b'\'' {
            quoted = !quoted;
        } else if !quoted && bytes[i..].starts_with(separator) {
            if found.is_some() {
                return None;
            }
            found = Some(i);
        }
    }
    let at = found?;
    Some((&inner[..at], &inner[at + separator.len()..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_is_read_and_written_again_with_its_own_quoting() {
        let read = |s: &str| RangeBound::parse(s).map(|b| b.text().as_str().to_owned());
        let dated = "FOR VALUES FROM ('2025-01-01 00:00:00+00') TO ('2025-02-01 00:00:00+00')";
        assert_eq!(read(dated).as_deref(), Some(dated));
        assert_eq!(
            read("FOR VALUES FROM (MINVALUE) TO (1000)").as_deref(),
            Some("FOR VALUES FROM (MINVALUE) TO (1000)")
        );
        assert_eq!(
            read("FOR VALUES FROM ('a) TO (b') TO ('it''s')").as_deref(),
            Some("FOR VALUES FROM ('a) TO (b') TO ('it''s')")
        );
        for refused in [
            "DEFAULT",
            "FOR VALUES IN (1, 2)",
            "FOR VALUES FROM (1, 'a') TO (2, 'b')",
            "FOR VALUES FROM ('a') TO ('b'); DROP TABLE t; --')",
            "FOR VALUES FROM ('a') TO ('b'')",
            "FOR VALUES FROM (now()) TO ('b')",
            "FOR VALUES FROM (1) TO (2) TO (3)",
            "FOR VALUES FROM () TO (2)",
        ] {
            assert_eq!(read(refused), None, "{refused}");
        }
    }

    #[test]
    fn a_partition_is_kept_renamed_and_attached_back_under_its_name() {
        let live = Ident::parse("app.events").unwrap();
        let undo = Ident::parse("app.events_undo_abc").unwrap();
        let kept = KeptPartitions::of(&live, &undo).unwrap();
        assert_eq!(kept.record().to_string(), "app.events_undo_abc_parts");
        let partition = Ident::parse("app.events_2025_01").unwrap();
        let name = kept.kept_name(&partition, 69).unwrap();
        assert_eq!(name.to_string(), "app.events_undo_abc_1x");
        assert_eq!(radix36(u64::from(u32::MAX)), "1z141z3");
        let [rename, record] = kept.keep(&partition, &name, "FOR VALUES FROM (1) TO (2)", 7);
        assert_eq!(
            rename.text().as_str(),
            "ALTER TABLE \"app\".\"events_2025_01\" RENAME TO \"events_undo_abc_1x\""
        );
        assert_eq!(record.params().len(), 4);
        let back = KeptPartition::from_row(
            "app.events_undo_abc_1x",
            "events_2025_01",
            "FOR VALUES FROM (1) TO (2)".into(),
            7,
        )
        .unwrap();
        let [rename, attach] = kept.attach(&back).unwrap();
        assert_eq!(
            rename.text().as_str(),
            "ALTER TABLE \"app\".\"events_undo_abc_1x\" RENAME TO \"events_2025_01\""
        );
        assert_eq!(
            attach.text().as_str(),
            "ALTER TABLE \"app\".\"events\" ATTACH PARTITION \"app\".\"events_2025_01\" \
             FOR VALUES FROM (1) TO (2)"
        );
        let bad = KeptPartition {
            bound: "FOR VALUES FROM (1) TO (2); DROP TABLE x".into(),
            ..back
        };
        assert!(matches!(
            kept.attach(&bad),
            Err(KeptPartitionError::Bound { .. })
        ));
    }
}
