//! Checks an operation's target before anything is enqueued: its names are
//! plain identifiers, the table and columns exist in the database's
//! catalogue, and the statements it will run are served by an index.
//!
//! Every refusal is a [`TargetError`] whose message names the table, the
//! column and what to do; nothing is written by any check here.

use sluice_store::{
    Backend, CursorValue, Dialect, Ident, IdentError, Statement, Store, StoreError,
};

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
    /// A MySQL table whose engine has no transactions.
    #[error(
        "table `{table}` uses the {engine} engine, which has no transactions: a sub-batch's \
         change and its progress record could not commit together, so exactly-once cannot \
         hold; convert it first (ALTER TABLE {table} ENGINE = InnoDB)"
    )]
    NotTransactional {
        /// The table as given.
        table: String,
        /// Its engine.
        engine: String,
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
    /// On SQLite, a keyset's first column whose values are not all integers
    /// or all text (SQLite keeps any value in any column).
    #[error(
        "refusing `{table}` batched by `{column}`: its values run from {smallest} to {largest}, \
         and batches walk one kind of value, integers or text (SQLite keeps any value in any \
         column, whatever its declared type); fix those rows, or batch by another key with --key"
    )]
    KeyValues {
        /// The table.
        table: String,
        /// The key's first column.
        column: String,
        /// Its smallest value, as `a|an KIND (value)`.
        smallest: String,
        /// Its largest value, likewise.
        largest: String,
    },
    /// A time bound compared, on SQLite, with a column whose values are not
    /// all text naming a time in one format Sluice compares exactly.
    #[error(
        "refusing to compare column `{column}` of `{table}` with a time: {problem}; values seen: {}",
        .seen.join(", ")
    )]
    UnreadableTime {
        /// The table.
        table: String,
        /// The column compared.
        column: String,
        /// What is wrong and what to do.
        problem: TimeColumnProblem,
        /// Examples of the values found, one per format, with the format.
        seen: Vec<String>,
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
    if let Some(engine) = store.table_engine(&table_ident).await?
        && !engine.eq_ignore_ascii_case("InnoDB")
    {
        return Err(TargetError::NotTransactional {
            table: table.to_owned(),
            engine,
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

/// Why a time column cannot be compared with a time ([`TargetError::UnreadableTime`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimeColumnProblem {
    /// It holds numbers (or blobs), which SQLite would read as Julian days.
    #[error(
        "it holds values that are not text; compare with the value it stores instead \
         (e.g. `cutoff.timestamp()` for a column of epoch seconds)"
    )]
    NotText,
    /// It holds text that names no time in a known format.
    #[error(
        "it holds text in no time format Sluice compares (ISO-8601 `2025-07-01T12:00:00+00:00` \
         or SQLite's `2025-07-01 12:00:00`, with or without a fraction and an offset, or a date \
         `2025-07-01`); rewrite those values in one of them, or scope the operation otherwise"
    )]
    UnknownFormat,
    /// It holds times in more than one format.
    #[error(
        "it holds times in more than one format; rewrite them in one first (e.g. \
         `UPDATE <table> SET <column> = strftime('%Y-%m-%d %H:%M:%f', <column>)`)"
    )]
    MixedFormats,
}

/// The arguments of one `replace(…)` each, making every digit a 9.
const DIGITS: [&str; 9] = [
    ", '0', '9')",
    ", '1', '9')",
    ", '2', '9')",
    ", '3', '9')",
    ", '4', '9')",
    ", '5', '9')",
    ", '6', '9')",
    ", '7', '9')",
    ", '8', '9')",
];

/// How many values of a time column [`check_time_column`] reads.
pub const TIME_SAMPLE_ROWS: i64 = 10_000;

/// On SQLite, samples the first [`TIME_SAMPLE_ROWS`] values of `column`
/// and refuses comparing it with a time unless every one is text in one
/// known format ([`time_text_format`]). The comparison itself is exact for
/// any value SQLite reads as a time and never matches one it cannot read
/// (see [`crate::Filter`]), so a value outside the sample in another format
/// is judged right or left alone; the check stops an operator whose column
/// does not hold what they think it does. PostgreSQL compares in the
/// column's type and refuses a type that is not a time when it plans.
pub async fn check_time_column(
    store: &Store,
    table: &Ident,
    column: &Ident,
) -> Result<(), TargetError> {
    let Backend::Sqlite(_) = store.backend() else {
        return Ok(());
    };
    // One example per (storage class, shape with every digit a 9).
    let examples = Statement::new(
        "SELECT group_concat(example, char(10)) FROM (SELECT typeof(v) || ' ' || CAST(min(v) AS TEXT) \
         AS example FROM (SELECT ",
    )
    .ident(column)
    .push(" AS v FROM ")
    .ident(table)
    .push(" WHERE ")
    .ident(column)
    .push(" IS NOT NULL LIMIT ")
    .value(TIME_SAMPLE_ROWS.into())
    .push(") GROUP BY typeof(v), ");
    let examples = DIGITS
        .iter()
        .fold(examples, |s, _| s.push("replace("))
        .push("CAST(v AS TEXT)");
    let examples = DIGITS
        .iter()
        .fold(examples, |s, digit| s.push(digit))
        .push(" LIMIT 8)");
    let Some(CursorValue::Text(examples)) = store
        .fetch_cursor(&examples, 1)
        .await?
        .and_then(|c| c.0.into_iter().next())
    else {
        return Ok(());
    };
    let mut seen = Vec::new();
    let mut formats = Vec::new();
    let mut problem = None;
    for example in examples.lines() {
        let (storage, value) = example.split_once(' ').unwrap_or((example, ""));
        let format = (storage == "text")
            .then(|| time_text_format(value))
            .flatten();
        seen.push(match format {
            Some(format) => format!("`{value}` ({format})"),
            None if storage == "text" => format!("`{value}`"),
            None => format!("`{value}` ({storage})"),
        });
        match format {
            _ if storage != "text" => problem = Some(TimeColumnProblem::NotText),
            None => {
                problem.get_or_insert(TimeColumnProblem::UnknownFormat);
            }
            Some(format) if !formats.contains(&format) => formats.push(format),
            Some(_) => {}
        }
    }
    if problem.is_none() && formats.len() > 1 {
        problem = Some(TimeColumnProblem::MixedFormats);
    }
    match problem {
        Some(problem) => Err(TargetError::UnreadableTime {
            table: table.to_string(),
            column: column.to_string(),
            problem,
            seen,
        }),
        None => Ok(()),
    }
}

/// The format of a text time Sluice compares exactly on SQLite, by name, or
/// `None`: a `YYYY-MM-DD` date, alone or followed by `T` or a space, then
/// `HH:MM`, optional `:SS`, an optional fraction and an optional offset
/// (`Z` or `±HH:MM`). Two values are in the same format when they share
/// the date–time separator and whether they carry an offset.
pub fn time_text_format(value: &str) -> Option<&'static str> {
    let b = value.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        b.get(range.clone())
            .is_some_and(|d| d.len() == range.len() && d.iter().all(u8::is_ascii_digit))
    };
    let date = digits(0..4) && b.get(4) == Some(&b'-') && digits(5..7) && b.get(7) == Some(&b'-');
    if !date || !digits(8..10) {
        return None;
    }
    if b.len() == 10 {
        return Some("a date");
    }
    let iso = match b[10] {
        b'T' => true,
        b' ' => false,
        _ => return None,
    };
    if !(digits(11..13) && b.get(13) == Some(&b':') && digits(14..16)) {
        return None;
    }
    let mut at = 16;
    if b.get(at) == Some(&b':') {
        if !digits(at + 1..at + 3) {
            return None;
        }
        at += 3;
        if b.get(at) == Some(&b'.') {
            let fraction = b[at + 1..]
                .iter()
                .take_while(|d| d.is_ascii_digit())
                .count();
            if fraction == 0 {
                return None;
            }
            at += 1 + fraction;
        }
    }
    let offset = match &b[at..] {
        [] => false,
        [b'Z'] => true,
        [b'+' | b'-', ..] if b.len() == at + 6 => {
            digits(at + 1..at + 3) && b[at + 3] == b':' && digits(at + 4..at + 6) || return None
        }
        _ => return None,
    };
    Some(match (iso, offset) {
        (true, true) => "ISO-8601 with `T` and an offset",
        (true, false) => "ISO-8601 with `T`, no offset",
        (false, true) => "SQLite's `YYYY-MM-DD HH:MM:SS` with an offset",
        (false, false) => "SQLite's `YYYY-MM-DD HH:MM:SS`",
    })
}

/// Refuses a batching key (the keyset's columns, or a loop's key) that the
/// catalogue does not prove names one row each: every column NOT NULL (a
/// row with a NULL is in no range) and a unique index over some of them (a
/// shared key would reach rows it must not, or make a batch's count wrong),
/// and none a column the database writes itself on UPDATE (generated, or
/// `ON UPDATE`), which would carry an updated row into a range not yet run.
pub async fn check_key(store: &Store, table: &Ident, key: &[Ident]) -> Result<(), TargetError> {
    let keys = store.table_keys(table).await?;
    let names: Vec<&str> = key.iter().map(Ident::name).collect();
    let moved = keys
        .written_by_database
        .iter()
        .find(|(column, _)| names.contains(&column.as_str()));
    if moved.is_none() && keys.proves_distinct(&names) {
        return Ok(());
    }
    let nullable = names
        .iter()
        .find(|c| !keys.not_null.iter().any(|n| n == *c));
    let reason = match (moved, nullable) {
        (Some((column, how)), _) => format!(
            "column `{column}` {how}, so an UPDATE can move a row to a range not yet run, \
             where it would be changed again (batch by a key the database does not write, \
             e.g. the primary key, with --key)"
        ),
        (None, Some(nullable)) => format!(
            "column `{nullable}` can hold NULL, and a row whose key is NULL is in no batch \
             (declare it NOT NULL, or batch by the primary key with --key)"
        ),
        (None, None) => format!(
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

/// On SQLite, refuses a keyset whose first column holds values of two
/// kinds, or of a kind no cursor holds (REAL, BLOB). It reads the column's
/// smallest and largest values through the index the walk itself uses;
/// SQLite sorts numbers, then text, then blobs, so when both ends are
/// integers, or both text, so is every value between — but for a REAL
/// between two integers, changed with its range like any row, or, where a
/// batch or sub-batch would end on it, failing the operation with the
/// column named (no cursor holds it). Other databases hold a column's
/// declared type only.
pub async fn check_key_values(
    store: &Store,
    table: &Ident,
    column: &Ident,
) -> Result<(), TargetError> {
    let Backend::Sqlite(_) = store.backend() else {
        return Ok(());
    };
    let end = |statement: Statement, order: &'static str| {
        statement
            .push("(SELECT typeof(")
            .ident(column)
            .push(") || ' ' || substr(quote(")
            .ident(column)
            .push("), 1, 40) FROM ")
            .ident(table)
            .push(" ORDER BY ")
            .ident(column)
            .push(order)
            .push(" LIMIT 1)")
    };
    let ends = end(Statement::new("SELECT "), "").push(" || char(10) || ");
    let ends = end(ends, " DESC");
    let Some(CursorValue::Text(ends)) = store
        .fetch_cursor(&ends, 1)
        .await?
        .and_then(|c| c.0.into_iter().next())
    else {
        return Ok(()); // an empty table
    };
    let (smallest, largest) = ends.split_once('\n').unwrap_or((&ends, &ends));
    let kind = |end: &str| end.split_once(' ').map_or(end, |(kind, _)| kind).to_owned();
    if kind(smallest) == kind(largest) && matches!(kind(smallest).as_str(), "integer" | "text") {
        return Ok(());
    }
    let described = |end: &str| {
        let (kind, value) = end.split_once(' ').unwrap_or((end, ""));
        let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        format!("{article} {kind} ({value})")
    };
    Err(TargetError::KeyValues {
        table: table.to_string(),
        column: column.to_string(),
        smallest: described(smallest),
        largest: described(largest),
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
    match full_scan_line(plan, table.name(), store.backend().dialect()) {
        Some(line) => Err(full_scan_refusal(table, column, &line)),
        None => Ok(()),
    }
}

/// The refusal of a statement over `table` filtering or ordering on
/// `column` whose plan reads the whole table at `line`, naming the index
/// that would serve it.
pub(crate) fn full_scan_refusal(table: &Ident, column: &Ident, line: &str) -> TargetError {
    TargetError::FullScan {
        table: table.to_string(),
        column: column.to_string(),
        index_name: format!("{}_{}_idx", table.name(), column.name()),
        plan: line.to_owned(),
    }
}

/// The plan line that reads all of `table`, if any.
///
/// SQLite: a `SCAN table` detail (a `SEARCH` uses an index or the rowid).
/// PostgreSQL: a `Seq Scan on table`, or an index scan on it without an
/// `Index Cond` (walking a whole index only for its order reads every row).
/// MySQL: access type `ALL` on the table with no index it could use
/// ([`Store::explain`]'s `table T access A possible_keys P …` lines). A scan
/// beside a usable index is the optimizer's choice for a small table, not a
/// missing index.
pub(crate) fn full_scan_line(plan: &[String], table: &str, dialect: Dialect) -> Option<String> {
    let node = |line: &str| line.trim_start().trim_start_matches("->").trim().to_owned();
    match dialect {
        Dialect::Sqlite => {
            return plan.iter().map(|l| node(l)).find(|l| {
                l.strip_prefix("SCAN ")
                    .and_then(|rest| rest.split_whitespace().next())
                    == Some(table)
            });
        }
        Dialect::MySql => {
            let full = format!("table {table} access ALL possible_keys NULL ");
            return plan.iter().find(|l| l.starts_with(&full)).cloned();
        }
        Dialect::Postgres => {}
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
    use sluice_store::Dialect;

    use super::{full_scan_line, time_text_format};

    fn plan(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn sqlite_scan_is_full_and_search_is_not() {
        assert_eq!(
            full_scan_line(&plan(&["SCAN events"]), "events", Dialect::Sqlite).as_deref(),
            Some("SCAN events")
        );
        assert_eq!(
            full_scan_line(
                &plan(&["SEARCH events USING INDEX e_created (created_at<?)"]),
                "events",
                Dialect::Sqlite
            ),
            None
        );
        assert_eq!(
            full_scan_line(
                &plan(&["SEARCH events USING INTEGER PRIMARY KEY (rowid>?)"]),
                "events",
                Dialect::Sqlite
            ),
            None
        );
        assert_eq!(
            full_scan_line(&plan(&["SCAN other"]), "events", Dialect::Sqlite),
            None
        );
    }

    #[test]
    fn mysql_access_all_without_a_usable_index_is_full() {
        let all = plan(&["table events access ALL possible_keys NULL key NULL Using where"]);
        assert_eq!(
            full_scan_line(&all, "events", Dialect::MySql).as_deref(),
            Some("table events access ALL possible_keys NULL key NULL Using where")
        );
        let range = plan(&[
            "table events access range possible_keys events_created key events_created Using where",
        ]);
        assert_eq!(full_scan_line(&range, "events", Dialect::MySql), None);
        // A small table scanned although an index could serve it.
        let chosen =
            plan(&["table events access ALL possible_keys events_created key NULL Using where"]);
        assert_eq!(full_scan_line(&chosen, "events", Dialect::MySql), None);
        assert_eq!(full_scan_line(&all, "other", Dialect::MySql), None);
    }

    #[test]
    fn postgres_seq_scans_and_filter_only_index_walks_are_full() {
        let seq = plan(&[
            "Limit  (cost=0.00..1.00 rows=1 width=8)",
            "  ->  Seq Scan on events  (cost=…)",
            "        Filter: (created_at < $1)",
        ]);
        assert_eq!(
            full_scan_line(&seq, "events", Dialect::Postgres).as_deref(),
            Some("Seq Scan on events  (cost=…)")
        );
        let walk = plan(&[
            "Limit",
            "  ->  Index Scan using events_pkey on events  (cost=…)",
            "        Filter: (created_at < $1)",
        ]);
        assert!(full_scan_line(&walk, "events", Dialect::Postgres).is_some());
        let served = plan(&[
            "Limit",
            "  ->  Index Scan using events_created on events  (cost=…)",
            "        Index Cond: (created_at < $1)",
        ]);
        assert_eq!(full_scan_line(&served, "events", Dialect::Postgres), None);
        let bitmap = plan(&[
            "Bitmap Heap Scan on events",
            "  Recheck Cond: (created_at < $1)",
            "  ->  Bitmap Index Scan on events_created",
            "        Index Cond: (created_at < $1)",
        ]);
        assert_eq!(full_scan_line(&bitmap, "events", Dialect::Postgres), None);
        assert_eq!(full_scan_line(&seq, "other", Dialect::Postgres), None);
    }

    #[test]
    fn known_time_formats_are_named_and_anything_else_is_not() {
        for (value, format) in [
            ("2025-07-01", "a date"),
            ("2025-07-01 12:00:00", "SQLite's `YYYY-MM-DD HH:MM:SS`"),
            ("2025-07-01 12:00:00.125", "SQLite's `YYYY-MM-DD HH:MM:SS`"),
            ("2025-07-01 12:00", "SQLite's `YYYY-MM-DD HH:MM:SS`"),
            (
                "2025-07-01 12:00:00+02:00",
                "SQLite's `YYYY-MM-DD HH:MM:SS` with an offset",
            ),
            ("2025-07-01T12:00:00Z", "ISO-8601 with `T` and an offset"),
            (
                "2025-07-01T12:00:00.123456-05:30",
                "ISO-8601 with `T` and an offset",
            ),
            ("2025-07-01T12:00:00", "ISO-8601 with `T`, no offset"),
        ] {
            assert_eq!(time_text_format(value), Some(format), "{value}");
        }
        for value in [
            "",
            "yesterday",
            "1751328000",
            "2025-7-01",
            "2025-07-01x",
            "2025-07-01T12",
            "2025-07-01T12:00:00.",
            "2025-07-01T12:00:00+0200",
            "2025-07-01T12:00:00 UTC",
            "2025-07-01T12:00:00Zjunk",
        ] {
            assert_eq!(time_text_format(value), None, "{value}");
        }
    }
}
