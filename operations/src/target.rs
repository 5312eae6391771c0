//! Checks an operation's target before anything is enqueued: its names are
//! plain identifiers, the table and columns exist in the database's
//! catalogue, and the statements it will run are served by an index.
//!
//! Every refusal is a [`TargetError`] whose message names the table, the
//! column and what to do; nothing is written by any check here.

use chrono::{DateTime, Utc};
use sluice_store::{Backend, CursorValue, Ident, IdentError, Statement, Store, StoreError};

/// A table and batching columns, validated against the catalogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The table.
    pub table: Ident,
    /// The batching (or predicate) columns, in the order given.
    pub columns: Vec<Ident>,
}

/// Why a target is refused.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A name is not a plain identifier.
    #[error(transparent)]
    Unsafe(#[from] IdentError),
    /// The table does not exist.
    #[error("unknown table `{table}`")]
    UnknownTable {
        /// The table as given.
        table: String,
    },
    /// A column does not exist in the table.
    #[error("table `{table}` has no column `{column}` (its columns: {})", .available.join(", "))]
    UnknownColumn {
        /// The table.
        table: String,
        /// The missing column.
        column: String,
        /// The columns it does have.
        available: Vec<String>,
    },
    /// The planner would read the whole table.
    #[error(
        "refusing a full scan of table `{table}`: no index serves `{column}` (plan: {plan}); \
         create one, e.g. CREATE INDEX {index_name} ON {table} ({column}), or pass --force"
    )]
    FullScan {
        /// The table.
        table: String,
        /// The column the statement filters or orders on.
        column: String,
        /// A name for the suggested index.
        index_name: String,
        /// The plan line that scans the table.
        plan: String,
    },
    /// The batching key does not provably name one row each.
    #[error(
        "refusing `{table}` batched by ({}): {reason}; the table's indexes: {}",
        .key.join(", "),
        if .indexes.is_empty() { "none".to_owned() } else { .indexes.join(", ") }
    )]
    KeyNotProven {
        /// The table.
        table: String,
        /// The batching (or loop key) columns.
        key: Vec<String>,
        /// What is missing.
        reason: String,
        /// The table's indexes, as `name (columns) unique|not unique`.
        indexes: Vec<String>,
    },
    /// A time bound compared with a column whose stored values do not sort
    /// as the bound is written (SQLite compares text character by character).
    #[error(
        "refusing to compare column `{column}` of `{table}` with a time: it holds `{found}`, \
         but the bound is written `{bound}`, and text compares character by character (a space \
         sorts before `T`, a number before any text), so rows on the wrong side of the bound \
         would match; compare with a text value in the column's own format (e.g. \
         `cutoff.format(\"%Y-%m-%d %H:%M:%S\").to_string()`), or store every value as \
         ISO-8601 text with `T` first"
    )]
    MisorderedTime {
        /// The table.
        table: String,
        /// The column compared.
        column: String,
        /// A stored value in another format (or of another type).
        found: String,
        /// The bound as it would be bound.
        bound: String,
    },
    /// The database could not be asked.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl TargetError {
    /// True when the target itself is at fault (the user's input), false when
    /// the database could not be consulted.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, TargetError::Store(_))
    }
}

/// Validates `table` and `columns` as identifiers, then against the catalogue.
pub async fn check_target(
    store: &Store,
    table: &str,
    columns: &[&str],
) -> Result<Target, TargetError> {
    let table_ident = Ident::parse(table)?;
    let column_idents = columns
        .iter()
        .map(|c| Ident::parse(c))
        .collect::<Result<Vec<_>, _>>()?;
    let available = store.table_columns(&table_ident).await?;
    if available.is_empty() {
        return Err(TargetError::UnknownTable {
            table: table.to_owned(),
        });
    }
    for column in &column_idents {
        if column.schema().is_some() || !available.iter().any(|a| a == column.name()) {
            return Err(TargetError::UnknownColumn {
                table: table.to_owned(),
                column: column.to_string(),
                available,
            });
        }
    }
    Ok(Target {
        table: table_ident,
        columns: column_idents,
    })
}

/// Refuses, on SQLite, comparing `column` with the time `bound` when a
/// stored value of `column` is not ISO-8601 text with a `T` (as sqlx writes
/// the bound: `2025-07-01T00:00:00+00:00`): SQLite compares a text column
/// with a text bound character by character, so SQLite's own
/// `2025-07-01 12:00:00` sorts before every bound of that day, and any
/// number before any text. Values in the bound's style compare in time
/// order to the second (a value at the bound's second with another suffix
/// may fall on either side). PostgreSQL compares in the column's type.
pub async fn refuse_misordered_time(
    store: &Store,
    table: &Ident,
    column: &Ident,
    bound: &DateTime<Utc>,
) -> Result<(), TargetError> {
    let Backend::Sqlite(_) = store.backend() else {
        return Ok(());
    };
    let other = Statement::new("SELECT CAST(")
        .ident(column)
        .push(" AS TEXT) || ' (' || typeof(")
        .ident(column)
        .push(") || ')' FROM ")
        .ident(table)
        .push(" WHERE ")
        .ident(column)
        .push(" IS NOT NULL AND (typeof(")
        .ident(column)
        .push(") <> 'text' OR length(")
        .ident(column)
        .push(") < 19 OR substr(")
        .ident(column)
        .push(", 11, 1) <> 'T') LIMIT 1");
    match store
        .fetch_cursor(&other, 1)
        .await?
        .and_then(|c| c.0.into_iter().next())
    {
        Some(CursorValue::Text(found)) => Err(TargetError::MisorderedTime {
            table: table.to_string(),
            column: column.to_string(),
            found,
            bound: bound.to_rfc3339(),
        }),
        _ => Ok(()),
    }
}

/// Refuses a batching key (the keyset's columns, or a loop's key) that the
/// catalogue does not prove names one row each: every column NOT NULL (a
/// row with a NULL is in no range) and a unique index over some of them (a
/// shared key would reach rows it must not, or make a batch's count wrong).
pub async fn check_key(store: &Store, table: &Ident, key: &[Ident]) -> Result<(), TargetError> {
    let keys = store.table_keys(table).await?;
    let names: Vec<&str> = key.iter().map(Ident::name).collect();
    if keys.proves_distinct(&names) {
        return Ok(());
    }
    let reason = match names
        .iter()
        .find(|c| !keys.not_null.iter().any(|n| n == *c))
    {
        Some(nullable) => format!(
            "column `{nullable}` can hold NULL, and a row whose key is NULL is in no batch \
             (declare it NOT NULL, or batch by the primary key with --key)"
        ),
        None => format!(
            "no unique index covers only these columns, so two rows may share a key and a \
             statement reaching one would reach both (create one, e.g. CREATE UNIQUE INDEX \
             {}_{}_key ON {table} ({}), or batch by the primary key with --key)",
            table.name(),
            names.join("_"),
            names.join(", ")
        ),
    };
    Err(TargetError::KeyNotProven {
        table: table.to_string(),
        key: names.iter().map(|n| n.to_string()).collect(),
        reason,
        indexes: keys
            .indexes
            .iter()
            .map(|i| {
                format!(
                    "{} ({}) {}",
                    i.name,
                    i.columns.join(", "),
                    if i.unique { "unique" } else { "not unique" }
                )
            })
            .collect(),
    })
}

/// Refuses `probe` (a statement the operation will run, filtering or ordering
/// on `column`) when the planner would scan all of `table` to run it.
pub async fn check_index(
    store: &Store,
    table: &Ident,
    column: &Ident,
    probe: &Statement,
) -> Result<(), TargetError> {
    let plan = store.explain(probe).await?;
    refuse_full_scan(store, table, column, &plan)
}

/// Refuses `plan` (the planner's plan for a statement over `table` filtering
/// or ordering on `column`) when it reads the whole table, naming the index
/// that would serve it.
pub fn refuse_full_scan(
    store: &Store,
    table: &Ident,
    column: &Ident,
    plan: &[String],
) -> Result<(), TargetError> {
    let postgres = matches!(store.backend(), Backend::Postgres(_));
    match full_scan_line(plan, table.name(), postgres) {
        Some(line) => Err(TargetError::FullScan {
            table: table.to_string(),
            column: column.to_string(),
            index_name: format!("{}_{}_idx", table.name(), column.name()),
            plan: line,
        }),
        None => Ok(()),
    }
}

/// The plan line that reads all of `table`, if any.
///
/// SQLite: a `SCAN table` detail (a `SEARCH` uses an index or the rowid).
/// PostgreSQL: a `Seq Scan on table`, or an index scan on it without an
/// `Index Cond` (walking a whole index only for its order reads every row).
fn full_scan_line(plan: &[String], table: &str, postgres: bool) -> Option<String> {
    let node = |line: &str| line.trim_start().trim_start_matches("->").trim().to_owned();
    if !postgres {
        return plan.iter().map(|l| node(l)).find(|l| {
            l.strip_prefix("SCAN ")
                .and_then(|rest| rest.split_whitespace().next())
                == Some(table)
        });
    }
    let on_table = |line: &str| {
        line.split(" on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            == Some(table)
    };
    for (i, raw) in plan.iter().enumerate() {
        let line = node(raw);
        if line.contains("Seq Scan on ") && on_table(&line) {
            return Some(line);
        }
        if (line.starts_with("Index Scan using ") || line.starts_with("Index Only Scan using "))
            && on_table(&line)
        {
            // Its detail lines run until the next plan node.
            let details = plan[i + 1..]
                .iter()
                .take_while(|l| !l.trim_start().starts_with("->"));
            if !details
                .map(|l| l.trim())
                .any(|l| l.starts_with("Index Cond:"))
            {
                return Some(line);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::full_scan_line;

    fn plan(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn sqlite_scan_is_full_and_search_is_not() {
        assert_eq!(
            full_scan_line(&plan(&["SCAN events"]), "events", false).as_deref(),
            Some("SCAN events")
        );
        assert_eq!(
            full_scan_line(
                &plan(&["SEARCH events USING INDEX e_created (created_at<?)"]),
                "events",
                false
            ),
            None
        );
        assert_eq!(
            full_scan_line(
                &plan(&["SEARCH events USING INTEGER PRIMARY KEY (rowid>?)"]),
                "events",
                false
            ),
            None
        );
        assert_eq!(
            full_scan_line(&plan(&["SCAN other"]), "events", false),
            None
        );
    }

    #[test]
    fn postgres_seq_scans_and_filter_only_index_walks_are_full() {
        let seq = plan(&[
            "Limit  (cost=0.00..1.00 rows=1 width=8)",
            "  ->  Seq Scan on events  (cost=…)",
            "        Filter: (created_at < $1)",
        ]);
        assert_eq!(
            full_scan_line(&seq, "events", true).as_deref(),
            Some("Seq Scan on events  (cost=…)")
        );
        let walk = plan(&[
            "Limit",
            "  ->  Index Scan using events_pkey on events  (cost=…)",
            "        Filter: (created_at < $1)",
        ]);
        assert!(full_scan_line(&walk, "events", true).is_some());
        let served = plan(&[
            "Limit",
            "  ->  Index Scan using events_created on events  (cost=…)",
            "        Index Cond: (created_at < $1)",
        ]);
        assert_eq!(full_scan_line(&served, "events", true), None);
        let bitmap = plan(&[
            "Bitmap Heap Scan on events",
            "  Recheck Cond: (created_at < $1)",
            "  ->  Bitmap Index Scan on events_created",
            "        Index Cond: (created_at < $1)",
        ]);
        assert_eq!(full_scan_line(&bitmap, "events", true), None);
        assert_eq!(full_scan_line(&seq, "other", true), None);
    }
}
