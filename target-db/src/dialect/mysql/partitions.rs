//! MySQL's and MariaDB's range partitioning: how a table is partitioned
//! (`information_schema.partitions`: `RANGE COLUMNS` on one column, or
//! `RANGE` of one column or of a non-decreasing function of it), which
//! partitions lie wholly below a bound, what forbids dropping them, and
//! the statements that drop one under a table lock
//! ([`LockedPartitionDrop`]): MySQL's `ALTER TABLE … DROP PARTITION`
//! commits on its own, so it cannot share a transaction with its record.

use sqlx::MySqlPool;

use crate::dialect::LockedPartitionDrop;
use crate::error::DatabaseError;
use crate::positional;
use crate::sql::{Ident, SqlValue, Statement, bind_values};
use crate::target_table::{RangePartition, RangePartitions, at_positions};

/// How long the table lock and the drop wait for the table's metadata
/// lock, in whole seconds: none on MariaDB (a lock not free at once is
/// tried again after a backoff, while the rows go one by one), the least
/// MySQL accepts there (it reads 0 as 1). Queries arriving meanwhile queue
/// behind the waiting lock at most this long.
const LOCK_TIMEOUT: &str = "SET SESSION lock_wait_timeout = 0";

/// The functions of a column a `PARTITION BY RANGE (f(column))` may bound
/// for Sluice to drop its partitions: each never decreases as the column
/// grows, so `f(column) < bound <= f(cutoff)` means `column < cutoff`.
const NON_DECREASING: [&str; 4] = ["TO_DAYS", "TO_SECONDS", "UNIX_TIMESTAMP", "YEAR"];

/// A partition as `information_schema.partitions` lists it: name, method,
/// expression, description (its bound) and subpartitioning method.
type PartitionRow = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
);

pub(crate) async fn range_partitions(
    pool: &MySqlPool,
    table: &Ident,
) -> Result<Option<RangePartitions>, DatabaseError> {
    let rows: Vec<PartitionRow> = positional::query_as(
        "SELECT CAST(partition_name AS CHAR), CAST(partition_method AS CHAR), \
             CAST(partition_expression AS CHAR), CAST(partition_description AS CHAR), \
             CAST(subpartition_method AS CHAR) FROM information_schema.partitions \
             WHERE table_schema = COALESCE($1, DATABASE()) AND BINARY table_name = BINARY $2 \
             AND partition_name IS NOT NULL ORDER BY partition_ordinal_position",
    )
    .bind(table.schema())
    .bind(table.name())
    .fetch_all(pool)
    .await?;
    let Some((_, method, Some(expression), _, _)) = rows.first() else {
        return Ok(None);
    };
    let ranges = rows
        .iter()
        .all(|(_, m, e, _, sub)| m == method && e.as_ref() == Some(expression) && sub.is_none());
    let Some((column, function)) = ranges.then(|| partition_key(method, expression)).flatten()
    else {
        return Ok(None);
    };
    let column_type: Option<String> = positional::query_scalar(
        "SELECT CAST(column_type AS CHAR) FROM information_schema.columns \
         WHERE table_schema = COALESCE($1, DATABASE()) AND BINARY table_name = BINARY $2 \
         AND column_name = $3",
    )
    .bind(table.schema())
    .bind(table.name())
    .bind(column.clone())
    .fetch_optional(pool)
    .await?;
    let Some(column_type) = column_type else {
        return Ok(None);
    };
    let partitions = rows
        .into_iter()
        .map(|(name, _, _, description, _)| RangePartition {
            upper: description.as_deref().and_then(upper_bound),
            default: false,
            name,
        })
        .collect();
    Ok(Some(RangePartitions {
        column,
        column_type,
        function,
        partitions,
    }))
}

pub(crate) async fn partitions_below(
    pool: &MySqlPool,
    layout: &RangePartitions,
    bound: &SqlValue,
) -> Result<Vec<Ident>, DatabaseError> {
    let candidates = layout.bounded();
    let Some(cast) = cast_type(layout) else {
        return Ok(Vec::new()); // a type no cast names: nothing is dropped
    };
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    // `SELECT v.n FROM (SELECT 0 AS n, '2026-01-01' AS upper UNION ALL …)
    // AS v WHERE CAST(v.upper AS T) <= f(bound)`: the server reads each
    // bound as it reads the partition's.
    let mut statement = Statement::new("SELECT v.n FROM (");
    for (i, (_, upper)) in candidates.iter().enumerate() {
        if i > 0 {
            statement = statement.push(" UNION ALL ");
        }
        statement = statement
            .push("SELECT CAST(")
            .value(SqlValue::Int(i as i64))
            .push(" AS SIGNED) AS n, ")
            .value(SqlValue::Text((*upper).clone()))
            .push(" AS upper");
    }
    statement = statement
        .push(") AS v WHERE CAST(v.upper AS ")
        .push(cast)
        .push(") <= ");
    statement = match layout.function {
        Some(function) => statement
            .push(function)
            .push("(")
            .value(bound.clone())
            .push(")"),
        None => statement
            .push("CAST(")
            .value(bound.clone())
            .push(" AS ")
            .push(cast)
            .push(")"),
    };
    let statement = statement
        .push(" ORDER BY CAST(v.upper AS ")
        .push(cast)
        .push(")");
    let query = statement.text().to_sqlx();
    let below: Vec<i64> = bind_values!(positional::query_scalar(query), statement.params())
        .fetch_all(pool)
        .await?;
    Ok(at_positions(&candidates, below))
}

pub(crate) async fn partition_drop_blocker(
    pool: &MySqlPool,
    table: &Ident,
) -> Result<Option<String>, DatabaseError> {
    let triggers: Option<String> = positional::query_scalar(
        "SELECT CAST(GROUP_CONCAT(trigger_name ORDER BY trigger_name SEPARATOR ', ') AS CHAR) \
         FROM information_schema.triggers WHERE event_object_schema = COALESCE($1, DATABASE()) \
         AND BINARY event_object_table = BINARY $2 AND event_manipulation = 'DELETE'",
    )
    .bind(table.schema())
    .bind(table.name())
    .fetch_one(pool)
    .await?;
    Ok(triggers.map(|names| {
        format!(
            "DELETE triggers ({names}) fire for each deleted row, and a dropped partition fires none"
        )
    }))
}

/// The statements dropping `partition` of `table` ([`LockedPartitionDrop`]).
pub(crate) fn partition_drop(table: &Ident, partition: &Ident) -> LockedPartitionDrop {
    let schema = table
        .schema()
        .map_or(SqlValue::Null, |s| SqlValue::Text(s.to_owned()));
    LockedPartitionDrop {
        lock_timeout: Statement::new(LOCK_TIMEOUT),
        lock_wait: Statement::new("SELECT CAST(@@SESSION.lock_wait_timeout AS SIGNED)"),
        lock: Statement::new("LOCK TABLES ").ident(table).push(" WRITE"),
        drop: Statement::new("ALTER TABLE ")
            .ident(table)
            .push(" DROP PARTITION ")
            .ident(partition),
        unlock: Statement::new("UNLOCK TABLES"),
        listed: Statement::new(
            "SELECT COUNT(*) FROM information_schema.partitions \
             WHERE table_schema = COALESCE(",
        )
        .value(schema)
        .push(", DATABASE()) AND BINARY table_name = BINARY ")
        .value(SqlValue::Text(table.name().to_owned()))
        .push(" AND BINARY partition_name = BINARY ")
        .value(SqlValue::Text(partition.name().to_owned())),
    }
}

/// The column a partitioning expression bounds, and the function of it
/// when there is one: `` `created_at` `` (`RANGE COLUMNS` or `RANGE`) or
/// `` to_days(`created_at`) `` (`RANGE` only), or the same with double
/// quotes (an `ANSI_QUOTES` session's). `None` for several columns
/// or any other expression.
fn partition_key(method: &str, expression: &str) -> Option<(String, Option<&'static str>)> {
    // Quoted as the session quotes: backquotes, or `ANSI_QUOTES`' double
    // quotes.
    let column = |quoted: &str| {
        let quote = quoted.chars().next().filter(|q| matches!(q, '`' | '"'))?;
        let name = quoted.strip_prefix(quote)?.strip_suffix(quote)?;
        (!name.is_empty() && !name.contains(quote)).then(|| name.to_owned())
    };
    if let Some(name) = column(expression.trim()) {
        return matches!(method, "RANGE" | "RANGE COLUMNS").then_some((name, None));
    }
    if method != "RANGE" {
        return None;
    }
    let (function, rest) = expression.trim().split_once('(')?;
    let function = NON_DECREASING
        .into_iter()
        .find(|f| f.eq_ignore_ascii_case(function.trim()))?;
    Some((column(rest.strip_suffix(')')?.trim())?, Some(function)))
}

/// The type the bounds of `layout` are cast to for comparing: an integer
/// for a function's or an integer column's, else the column's own kind;
/// `None` for a type Sluice does not compare.
fn cast_type(layout: &RangePartitions) -> Option<&'static str> {
    if layout.function.is_some() {
        return Some("SIGNED");
    }
    let declared = layout.column_type.to_ascii_lowercase();
    let kind = declared.split(['(', ' ']).next().unwrap_or_default();
    match kind {
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" => Some("SIGNED"),
        "date" => Some("DATE"),
        "datetime" | "timestamp" => Some("DATETIME(6)"),
        "decimal" | "numeric" => Some("DECIMAL(65,30)"),
        _ => None,
    }
}

/// A partition's `VALUES LESS THAN` value as the catalogue writes it,
/// unquoted: `'2026-01-01'` or `739982`; `None` for `MAXVALUE` or a value
/// written in any other way.
fn upper_bound(description: &str) -> Option<String> {
    if let Some(quoted) = description.strip_prefix('\'') {
        let inner = quoted.strip_suffix('\'')?;
        return (!inner.contains(['\'', '\\'])).then(|| inner.to_owned());
    }
    let plain = !description.is_empty()
        && description
            .chars()
            .all(|c| c.is_ascii_digit() || "-+.".contains(c));
    plain.then(|| description.to_owned())
}

#[cfg(test)]
mod tests {
    use super::{partition_key, upper_bound};

    #[test]
    fn a_partition_key_is_one_column_or_a_non_decreasing_function_of_one() {
        assert_eq!(
            partition_key("RANGE COLUMNS", "`created_at`"),
            Some(("created_at".into(), None))
        );
        assert_eq!(
            partition_key("RANGE", "to_days(`created_at`)"),
            Some(("created_at".into(), Some("TO_DAYS")))
        );
        assert_eq!(
            partition_key("RANGE", "unix_timestamp(`at`)"),
            Some(("at".into(), Some("UNIX_TIMESTAMP")))
        );
        assert_eq!(partition_key("RANGE", "`id`"), Some(("id".into(), None)));
        assert_eq!(
            partition_key("RANGE", "to_days(\"at\")"),
            Some(("at".into(), Some("TO_DAYS")))
        );
        assert_eq!(partition_key("RANGE", "\"a`\""), Some(("a`".into(), None)));
        assert_eq!(partition_key("RANGE", "`a\"`"), Some(("a\"".into(), None)));
        assert_eq!(partition_key("RANGE", "``"), None);
        // Several columns, another function, another method: none.
        assert_eq!(partition_key("RANGE COLUMNS", "`a`,`b`"), None);
        assert_eq!(partition_key("RANGE", "month(`created_at`)"), None);
        assert_eq!(partition_key("RANGE", "`a` + `b`"), None);
        assert_eq!(partition_key("LIST", "`id`"), None);
        assert_eq!(partition_key("RANGE COLUMNS", "to_days(`c`)"), None);
    }

    #[test]
    fn an_upper_bound_is_read_as_written() {
        assert_eq!(upper_bound("'2027-01-01'").as_deref(), Some("2027-01-01"));
        assert_eq!(upper_bound("739982").as_deref(), Some("739982"));
        assert_eq!(upper_bound("MAXVALUE"), None);
        assert_eq!(upper_bound("'it''s'"), None);
        assert_eq!(upper_bound("'a\\'b'"), None);
        assert_eq!(upper_bound(""), None);
    }
}
