//! Accepting an operation: everything is checked before anything is written.
//!
//! [`enqueue`] binds the kind to its arguments, validates every name against
//! the database's catalogue, asks the planner how the first batch query would
//! run (a full scan of the target table is refused unless forced), counts the
//! rows in scope for progress estimates, and only then writes the operation
//! (or returns the active one with the same identity).

use std::time::Duration;

use sluice_store::{
    Enqueued, Limits, OperationSpec, Origin, Statement, Store, StoreError, spec::canonical_json,
};

use crate::batching::probe;
use crate::error::OperationError;
use crate::operation::Registry;
use crate::shape::Strategy;
use crate::target::{check_target, refuse_full_scan};

/// How an operation is to run, beside its arguments. Serialisable so a
/// schedule can keep it (missing fields take their defaults).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct EnqueueOptions {
    /// Rows per batch (adapted at run time toward the target batch duration).
    pub batch_size: i64,
    /// Rows per sub-batch (one transaction each).
    pub sub_batch_size: i64,
    /// Sleep between sub-batches.
    pub pause: Duration,
    /// Run-time and row limits per run.
    pub limits: Limits,
    /// Higher runs first within its origin class.
    pub priority: i32,
    /// Who asked for it.
    pub origin: Origin,
    /// The tenant it belongs to, part of its identity.
    pub tenant_id: Option<String>,
    /// Accept it even when its batch query would scan the whole table.
    pub force: bool,
}

impl Default for EnqueueOptions {
    fn default() -> Self {
        EnqueueOptions {
            batch_size: 1_000,
            sub_batch_size: 100,
            pause: Duration::ZERO,
            limits: Limits::default(),
            priority: 0,
            origin: Origin::User,
            tenant_id: None,
            force: false,
        }
    }
}

/// Checks and enqueues an operation of `kind` with `arguments`.
///
/// Errors (nothing is written): [`OperationError::UnknownKind`],
/// [`OperationError::Arguments`], [`OperationError::Unsafe`],
/// [`OperationError::Target`] (unknown table or column, full scan),
/// [`OperationError::InvalidSql`] (an operator expression the database
/// refuses), [`OperationError::Spec`] (non-positive sizes);
/// [`OperationError::Store`] when the database fails.
pub async fn enqueue(
    store: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &EnqueueOptions,
) -> Result<Enqueued, OperationError> {
    let canonical = canonical_json(arguments);
    let prepared = registry.prepare(kind, &canonical)?;
    let shape = prepared.shape();
    let names: Vec<String> = shape.columns().iter().map(|c| c.to_string()).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    check_target(store, &shape.table().to_string(), &names).await?;

    let first = match shape.strategy() {
        Strategy::Keyset(columns) => {
            let any_row = Statement::new("SELECT ")
                .idents(columns)
                .push(" FROM ")
                .ident(shape.table())
                .push(" LIMIT 1");
            store.fetch_cursor(&any_row, columns.len()).await?
        }
        Strategy::Loop { .. } => None,
    };
    let query = probe(shape, first.as_ref(), options.batch_size);
    // Explained even with --force: the database checks the operator's SQL.
    let plan = store.explain(&query).await.map_err(refused_sql)?;
    if !options.force {
        refuse_full_scan(store, shape.table(), shape.indexed_column(), &plan)?;
    }

    let count = shape.filter().and_to(
        Statement::new("SELECT COUNT(*) FROM ")
            .ident(shape.table())
            .push(" WHERE 1 = 1"),
    );
    let estimated = store.fetch_int(&count).await.map_err(refused_sql)?;

    let mut spec = OperationSpec::new(
        kind,
        shape.table().to_string(),
        shape
            .batching_columns()
            .iter()
            .map(|c| c.to_string())
            .collect(),
    )
    .with_arguments(arguments);
    spec.batch_size = options.batch_size;
    spec.sub_batch_size = options.sub_batch_size;
    spec.pause_ms = i64::try_from(options.pause.as_millis()).unwrap_or(i64::MAX);
    spec.limits = options.limits;
    spec.priority = options.priority;
    spec.origin = options.origin;
    spec.tenant_id = options.tenant_id.clone();
    spec.estimated_rows = estimated;
    spec.validate()?;
    Ok(store.enqueue(spec).await?)
}

/// A database error while explaining or counting is the operator's SQL at
/// fault (a syntax error, an unknown function) unless the database itself is
/// unreachable.
fn refused_sql(error: StoreError) -> OperationError {
    match &error {
        StoreError::Database(sqlx::Error::Database(db)) if !error.is_transient() => {
            OperationError::InvalidSql(db.message().to_owned())
        }
        _ => OperationError::Store(error),
    }
}
