//! PostgreSQL's declarative range partitioning: how a table is partitioned
//! (`pg_partitioned_table`, each partition's bound as `pg_get_expr` writes
//! it), which partitions lie wholly below a bound, what forbids dropping
//! them, and the statements that drop one inside a sub-batch's transaction.

use sqlx::{AssertSqlSafe, PgPool};

use crate::dialect::PartitionDrop;
use crate::error::DatabaseError;
use crate::kept_partitions::RangeBound;
use crate::sql::{Ident, SqlValue, Statement, bind_values};
use crate::target_table::{RangePartition, RangePartitions, at_positions};

/// How long a partition drop waits for each lock before it gives way: the
/// queries that queue behind a waiting `ALTER TABLE` wait at most this long.
pub(crate) const LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '100ms'";

/// The parent's relations: itself and every partition (`$1` the table).
const FAMILY: &str = "(SELECT to_regclass($1) UNION ALL \
     SELECT inhrelid FROM pg_catalog.pg_inherits WHERE inhparent = to_regclass($1))";

pub(crate) async fn range_partitions(
    pool: &PgPool,
    table: &Ident,
) -> Result<Option<RangePartitions>, DatabaseError> {
    let key: Option<(String, String)> = sqlx::query_as(
        "SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod) \
         FROM pg_catalog.pg_partitioned_table p \
         JOIN pg_catalog.pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0] \
         WHERE p.partrelid = to_regclass($1) AND p.partstrat = 'r' AND p.partnatts = 1",
    )
    .bind(table.quoted())
    .fetch_optional(pool)
    .await?;
    let Some((column, column_type)) = key else {
        return Ok(None);
    };
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT n.nspname || '.' || c.relname, pg_catalog.pg_get_expr(c.relpartbound, c.oid) \
         FROM pg_catalog.pg_inherits i \
         JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE i.inhparent = to_regclass($1) ORDER BY 1",
    )
    .bind(table.quoted())
    .fetch_all(pool)
    .await?;
    let partitions = rows
        .into_iter()
        .map(|(name, bound)| RangePartition {
            upper: upper_bound(&bound),
            default: bound == "DEFAULT",
            name,
        })
        .collect();
    Ok(Some(RangePartitions {
        column,
        column_type,
        function: None,
        partitions,
    }))
}

pub(crate) async fn partitions_below(
    pool: &PgPool,
    layout: &RangePartitions,
    bound: &SqlValue,
) -> Result<Vec<Ident>, DatabaseError> {
    let candidates = layout.bounded();
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    // `SELECT v.n FROM (VALUES ($1, $2), …) AS v(n, upper) WHERE
    // CAST(v.upper AS type) <= $k ORDER BY CAST(v.upper AS type)`: the
    // database reads each bound in the column's type.
    let mut statement = Statement::new("SELECT v.n FROM (VALUES ");
    for (i, (_, upper)) in candidates.iter().enumerate() {
        if i > 0 {
            statement = statement.push(", ");
        }
        statement = statement
            .push("(")
            .value(SqlValue::Int(i as i64))
            .push(", ")
            .value(SqlValue::Text((*upper).clone()))
            .push(")");
    }
    let cast = |statement: Statement| {
        statement
            .push("CAST(v.upper AS ")
            .declared_type(&layout.column_type)
            .map(|s| s.push(")"))
    };
    let Some(statement) = cast(statement.push(") AS v(n, upper) WHERE ")) else {
        return Ok(Vec::new()); // a type no cast can name: nothing is dropped
    };
    let Some(statement) = cast(
        statement
            .push(" <= ")
            .value(bound.clone())
            .push(" ORDER BY "),
    ) else {
        return Ok(Vec::new());
    };
    let query = sqlx::query_scalar(AssertSqlSafe(statement.text().as_str().to_owned()));
    let below: Vec<i64> = bind_values!(query, statement.params())
        .fetch_all(pool)
        .await?;
    Ok(at_positions(&candidates, below))
}

pub(crate) async fn partition_drop_blocker(
    pool: &PgPool,
    table: &Ident,
) -> Result<Option<String>, DatabaseError> {
    let text = format!(
        "SELECT (SELECT string_agg(DISTINCT tgname::text, ', ') FROM pg_catalog.pg_trigger \
           WHERE tgrelid IN {FAMILY} AND NOT tgisinternal AND tgtype & 8 <> 0), \
         (SELECT string_agg(DISTINCT rulename::text, ', ') FROM pg_catalog.pg_rewrite \
           WHERE ev_class IN {FAMILY} AND ev_type = '4'), \
         (SELECT string_agg(DISTINCT pubname::text, ', ') FROM pg_catalog.pg_publication_tables \
           WHERE to_regclass(quote_ident(schemaname) || '.' || quote_ident(tablename)) IN {FAMILY}), \
         (SELECT string_agg(DISTINCT conname::text, ', ') FROM pg_catalog.pg_constraint \
           WHERE contype = 'f' AND confrelid IN {FAMILY})"
    );
    let (triggers, rules, publications, references): (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ) = sqlx::query_as(AssertSqlSafe(text))
        .bind(table.quoted())
        .fetch_one(pool)
        .await?;
    if let Some(reason) = partman_keeps_tables(pool, table).await? {
        return Ok(Some(reason));
    }
    Ok(if let Some(names) = triggers {
        Some(format!(
            "DELETE triggers ({names}) fire for each deleted row, and a dropped partition fires none"
        ))
    } else if let Some(names) = rules {
        Some(format!(
            "DELETE rules ({names}) act on each deleted row, and a dropped partition triggers none"
        ))
    } else if let Some(names) = publications {
        Some(format!(
            "it is published ({names}): a subscriber applies deleted rows, but would keep the \
             rows of a dropped partition"
        ))
    } else {
        references.map(|names| {
            format!(
                "foreign keys ({names}) refer to it, and a partition they reach cannot be detached"
            )
        })
    })
}

/// When pg_partman manages `table` with a retention that keeps the
/// partitions it retires as tables (`part_config.retention` set and
/// `retention_keep_table` true), why Sluice must not drop them: the
/// operator's configuration says old partitions are kept. Otherwise (no
/// pg_partman, another table, no retention, or one that drops) `None`:
/// a drop of a partition wholly older than the cutoff is what pg_partman's
/// own retention does, and the partitions it makes ahead of time (its
/// `premake`) and its default partition are never older than a cutoff.
async fn partman_keeps_tables(
    pool: &PgPool,
    table: &Ident,
) -> Result<Option<String>, DatabaseError> {
    let schema: Option<String> = sqlx::query_scalar(
        "SELECT n.nspname::text FROM pg_catalog.pg_extension e \
         JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_partman'",
    )
    .fetch_optional(pool)
    .await?;
    let Some(schema) = schema.and_then(|s| Ident::parse(&s).ok()) else {
        return Ok(None);
    };
    let query = format!(
        "SELECT retention FROM {}.part_config \
         WHERE retention IS NOT NULL AND retention_keep_table \
         AND parent_table = (SELECT n.nspname || '.' || c.relname FROM pg_catalog.pg_class c \
           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1))",
        schema.quoted()
    );
    let retention: Option<String> = sqlx::query_scalar(AssertSqlSafe(query))
        .bind(table.quoted())
        .fetch_optional(pool)
        .await?;
    Ok(retention.map(|retention| {
        format!(
            "pg_partman manages it and retires partitions older than {retention} by detaching \
             them and keeping the tables (retention_keep_table), so Sluice does not drop them; \
             set retention_keep_table = false in {schema}.part_config to let it"
        )
    }))
}

/// The statements dropping `partition` of `table` ([`PartitionDrop`]).
pub(crate) fn partition_drop(table: &Ident, partition: &Ident) -> PartitionDrop {
    PartitionDrop {
        lock_timeout: Statement::new(LOCK_TIMEOUT),
        hold: Statement::new("LOCK TABLE ")
            .ident(partition)
            .push(" IN SHARE MODE"),
        detach: Statement::new("ALTER TABLE ")
            .ident(table)
            .push(" DETACH PARTITION ")
            .ident(partition),
        drop: Statement::new("DROP TABLE ").ident(partition),
    }
}

/// The value of `FOR VALUES FROM (…) TO (value)` as written, unquoted;
/// `None` for `MAXVALUE`, a default partition or a bound of several values.
fn upper_bound(bound: &str) -> Option<String> {
    RangeBound::parse(bound)?.upper()
}

#[cfg(test)]
mod tests {
    use super::upper_bound;

    #[test]
    fn an_upper_bound_is_read_as_written() {
        assert_eq!(
            upper_bound("FOR VALUES FROM ('2025-01-01 00:00:00+00') TO ('2026-01-01 00:00:00+00')")
                .as_deref(),
            Some("2026-01-01 00:00:00+00")
        );
        assert_eq!(
            upper_bound("FOR VALUES FROM (0) TO (1000)").as_deref(),
            Some("1000")
        );
        assert_eq!(
            upper_bound("FOR VALUES FROM ('a''b') TO ('it''s')").as_deref(),
            Some("it's")
        );
        assert_eq!(
            upper_bound("FOR VALUES FROM (MINVALUE) TO (MAXVALUE)"),
            None
        );
        assert_eq!(upper_bound("DEFAULT"), None);
        // Two columns: not one value.
        assert_eq!(upper_bound("FOR VALUES FROM (1, 'a') TO (2, 'b')"), None);
        assert_eq!(upper_bound("FOR VALUES FROM ('a') TO ('x', 'y')"), None);
    }
}
