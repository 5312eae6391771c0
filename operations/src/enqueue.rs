//! Accepting an operation: everything is checked before anything is written.
//!
//! [`enqueue`] binds the kind to its arguments, validates every name against
//! the database's catalogue, asks the planner how the first batch query would
//! run (a full scan of the target table is refused unless forced), counts the
//! rows in scope for progress estimates (or, past [`COUNT_EXACTLY_UP_TO`]
//! on PostgreSQL, takes the planner's estimate), and only then writes the operation
//! (or returns the active one with the same identity).

use std::collections::{HashMap, HashSet};

use sluice_telemetry::{stamp, traceparent};
use std::time::Duration;
use tracing::{Instrument, Span};

use sluice_store::{
    Enqueued, LatencyBudget, Limits, OperationSpec, Origin, Store, operation_target,
    spec::canonical_json,
};
use sluice_target::{Cursor, Statement};

use crate::batching::{BatchQueryPlan, LoopPick, explain_batch_query, next_batch_end, probe};
use crate::error::OperationError;
use crate::operation::{PreparedOperation, Registry};
use crate::shape::Strategy;
use crate::sub_batch::{Bounds, SubBatchRows};
use crate::target::{
    check_key, check_key_range, check_key_values, check_session_dependent_sql, check_target,
    check_time_column, check_transactional, full_scan_refusal,
};

mod bulk;
mod count;
mod fleet;
mod fleet_checks;
mod targets;

pub use bulk::{NewOperation, enqueue_many};
pub use count::{COUNT_EXACTLY_UP_TO, RowCount};
pub(crate) use count::{ScopeRows, count_rows, refused_sql};
pub use fleet::NamedTarget;
pub use targets::on_target;
use targets::with_targets;

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
    /// The daily hours it may work in: outside them no sub-batch starts,
    /// and workers pause it until the next opening. Stored beside the
    /// operation ([`Store::set_window`]) once it is enqueued.
    pub window: Option<crate::window::WindowOption>,
    /// At most this many rows a second, all workers together (a rate
    /// limit stored beside the operation, [`Store::set_rate_limit`]); for a
    /// fleet, all its targets together (`fleet:<key>`).
    pub max_rate: Option<i64>,
    /// For a fleet, at most this many rows a second on each target (a
    /// limit on each of its operations).
    pub max_rate_per_target: Option<i64>,
    /// For a fleet, at most this many of its targets worked on at once,
    /// across all workers.
    pub max_targets_at_once: Option<i64>,
    /// The foreground latency it may cost, as the canary's p99 on its
    /// table (stored beside the operation, [`Store::set_latency_budget`]);
    /// `None`: the one set for its kind or everything, else auto.
    pub latency_budget: Option<LatencyBudget>,
    /// The databases the operation works on when it is not the store's
    /// own (`enqueue --target`, `--targets FILE`): one operation on one,
    /// a fleet of one operation per target on several. A password in a
    /// URL is used to connect now and never stored ([`on_target`]). Not
    /// kept by a schedule.
    #[serde(skip)]
    pub targets: Vec<NamedTarget>,
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
            window: None,
            max_rate: None,
            max_rate_per_target: None,
            max_targets_at_once: None,
            latency_budget: None,
            targets: Vec::new(),
        }
    }
}

/// Runs every check [`enqueue()`] runs on an operation of `kind` with
/// `arguments` and `options` — names, catalogue, engines, key, the
/// planner's plan (a full scan refused unless forced), the operator's SQL
/// — and writes nothing. A schedule is checked so before it is stored.
///
/// Errors: those of [`enqueue()`].
pub async fn check(
    store: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &EnqueueOptions,
) -> Result<(), OperationError> {
    for (store, _) in with_targets(store, options).await? {
        checked_spec(
            &store,
            registry,
            kind,
            arguments,
            options,
            &mut Checked::default(),
        )
        .await?
        .spec
        .validate()?;
    }
    Ok(())
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
    let span = enqueue_span(kind);
    async {
        let window = match &options.window {
            Some(option) => Some(
                option
                    .parse()
                    .map_err(|e| OperationError::Arguments(e.to_string()))?
                    .text(),
            ),
            None => None,
        };
        for rate in [options.max_rate, options.max_rate_per_target]
            .into_iter()
            .flatten()
        {
            if rate < 1 {
                return Err(OperationError::Arguments(format!(
                    "the rate limit must be at least 1 row a second, not {rate}"
                )));
            }
        }
        if options.targets.len() > 1 {
            return fleet::enqueue_fleet(
                store,
                registry,
                kind,
                arguments,
                options,
                window.as_ref(),
            )
            .await;
        }
        let Some((store, name)) = with_targets(store, options).await?.into_iter().next() else {
            return Err(OperationError::Arguments("no database to work on".into()));
        };
        let mut checked = checked_spec(
            &store,
            registry,
            kind,
            arguments,
            options,
            &mut Checked::default(),
        )
        .await?;
        checked.spec.target_name = name;
        let rate = [options.max_rate, options.max_rate_per_target]
            .into_iter()
            .flatten()
            .min();
        record(&store, checked, options, window.as_ref(), rate).await
    }
    .instrument(span)
    .await
}

/// Records a checked operation: its rows counted, its trace started, then
/// its window, rate limit and latency budget stored beside it.
async fn record(
    store: &Store,
    checked: CheckedSpec,
    options: &EnqueueOptions,
    window: Option<&(String, String)>,
    rate: Option<i64>,
) -> Result<Enqueued, OperationError> {
    let CheckedSpec {
        mut spec, scope, ..
    } = checked;
    spec.estimated_rows = count_rows(store, &scope).await?.rows;
    spec.validate()?;
    // The operation's trace starts here; every run of it joins it.
    spec.trace_context = traceparent(&Span::current());
    let enqueued = store.enqueue(spec).await?;
    Span::current().record("sluice.operation.id", enqueued.id);
    settle(store, enqueued, options, window, rate).await?;
    Ok(enqueued)
}

/// What a new operation is held to beside its spec, stored right after it
/// (a worker that starts it within these milliseconds obeys them from its
/// next run; a closed window from its scheduler's next tick, which pauses
/// it): its window, rate limit and latency budget. An operation that
/// existed already keeps its own.
async fn settle(
    store: &Store,
    enqueued: Enqueued,
    options: &EnqueueOptions,
    window: Option<&(String, String)>,
    rate: Option<i64>,
) -> Result<(), OperationError> {
    if !enqueued.created {
        return Ok(());
    }
    let target = operation_target(enqueued.id);
    if let Some((hours, time_zone)) = window {
        store.set_window(&target, hours, time_zone).await?;
    }
    if let Some(rate) = rate {
        store.set_rate_limit(&target, rate).await?;
    }
    if let Some(budget) = options.latency_budget {
        store.set_latency_budget(&target, budget).await?;
    }
    Ok(())
}

/// The span an operation's trace starts with (a child of the caller's
/// current span, so an application's request that enqueued it shows it).
fn enqueue_span(kind: &str) -> Span {
    let span = tracing::info_span!(
        "operation.enqueue",
        otel.name = %format!("enqueue {kind}"),
        sluice.operation.kind = kind,
        sluice.operation.id = tracing::field::Empty,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    stamp(&span);
    span
}

/// What this call has checked already, so a bulk enqueue asks the database
/// once per shape and once per sub-batch statement.
#[derive(Default)]
pub(crate) struct Checked {
    /// Planning only: a batch query that scans the whole table is reported
    /// ([`CheckedSpec::explained`]) rather than refused.
    pub(crate) plan_only: bool,
    /// Targets and batch queries (by the SQL the planner was shown, and
    /// `--force`), with the row a keyset's first range ends at.
    targets: HashMap<(String, bool), Option<Cursor>>,
    /// Sub-batch statements the planner accepted (by their text).
    statements: HashSet<String>,
}

impl Checked {
    /// Checks for a plan: nothing checked yet, full scans reported.
    pub(crate) fn for_plan() -> Self {
        Checked {
            plan_only: true,
            ..Checked::default()
        }
    }
}

/// An operation that passed every check, with what the checks found.
pub(crate) struct CheckedSpec {
    /// The spec to store.
    pub(crate) spec: OperationSpec,
    /// The statements about its rows in scope.
    pub(crate) scope: ScopeRows,
    /// The same statements about every row of its table.
    pub(crate) table: ScopeRows,
    /// Its first batch query and the planner's plan of it, when this call
    /// asked the planner (not when an earlier operation of a bulk enqueue
    /// had the same one).
    pub(crate) explained: Option<BatchQueryPlan>,
    /// The statement its first sub-batch would run, when its work is one
    /// statement and there is a first range to write it over (when
    /// planning, the range a first sub-batch would really cover).
    pub(crate) sub_batch: Option<Statement>,
}

/// Binds `kind` to `arguments`, checks the target and the plan of its batch
/// query, and returns the spec to store with what the checks found.
pub(crate) async fn checked_spec(
    store: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &EnqueueOptions,
    checked: &mut Checked,
) -> Result<CheckedSpec, OperationError> {
    let canonical = canonical_json(arguments);
    let prepared = registry.prepare(kind, &canonical, store.target().dialect())?;
    let shape = prepared.shape();
    let names: Vec<String> = shape.columns().iter().map(|c| c.to_string()).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let query = probe(shape, None, options.batch_size);
    let key = (
        format!("{} {names:?} {}", shape.table(), query.text().as_str()),
        options.force,
    );
    let mut explained = None;
    if !checked.targets.contains_key(&key) {
        check_target(store, &shape.table().to_string(), &names).await?;
        for other in prepared.tables_written().iter().skip(1) {
            check_transactional(store, other).await?;
        }
        refuse_generated_writes(store, shape.table(), &prepared.columns_written()).await?;
        for column in shape.filter().time_bounds() {
            check_time_column(store, shape.table(), column).await?;
        }
        let batching_key = match shape.strategy() {
            Strategy::Keyset(columns) => columns.as_slice(),
            Strategy::Loop { key } => key.as_slice(),
        };
        check_key(store, shape.table(), batching_key).await?;
        if let Strategy::Keyset(columns) = shape.strategy() {
            check_key_values(store, shape.table(), &columns[0]).await?;
        }
        // Explained even with --force: the database checks the operator's SQL.
        let explained_now = explain_batch_query(store, shape, None, options.batch_size)
            .await
            .map_err(refused_sql)?;
        if !options.force
            && !checked.plan_only
            && let Some(line) = &explained_now.full_scan
        {
            return Err(full_scan_refusal(shape.table(), shape.indexed_column(), line).into());
        }
        // After the plan check: its MAX reads the index the walk uses.
        check_key_range(store, shape.table(), &batching_key[0]).await?;
        checked
            .targets
            .insert(key.clone(), explained_now.first.clone());
        explained = Some(explained_now);
    }
    let mut first_rows = checked.targets.get(&key).cloned().flatten();
    if checked.plan_only && first_rows.is_some() {
        // A plan probes the first sub-batch as it will run: a range holding
        // a sub-batch's rows in scope, not just any row's.
        first_rows = next_batch_end(store, shape, None, options.sub_batch_size).await?;
    }
    // The statement a sub-batch will run, planned (never run) by the
    // database: an unknown column, a type error or a view that cannot be
    // changed is refused now, not after five failed attempts.
    let sub_batch = first_sub_batch_statement(
        store,
        prepared.as_ref(),
        first_rows.as_ref(),
        options.sub_batch_size,
    )?;
    if let Some(statement) = &sub_batch
        && checked
            .statements
            .insert(statement.text().as_str().to_owned())
    {
        store
            .target()
            .explain(statement)
            .await
            .map_err(refused_sql)?;
    }
    let run: Vec<&Statement> = std::iter::once(&query).chain(&sub_batch).collect();
    check_session_dependent_sql(store, &run).await?;

    let rows = |head: &'static str| Statement::new(head).ident(shape.table());
    let in_scope = |head| shape.filter().and_to(rows(head).push(" WHERE 1 = 1"));
    let scope = ScopeRows {
        count: in_scope("SELECT COUNT(*) FROM "),
        select: in_scope("SELECT 1 FROM "),
    };
    let table = ScopeRows {
        count: rows("SELECT COUNT(*) FROM "),
        select: rows("SELECT 1 FROM "),
    };
    let mut spec = OperationSpec::new(
        kind,
        shape.table().to_string(),
        shape
            .batching_columns()
            .iter()
            .map(|c| c.to_string())
            .collect(),
    )
    .with_arguments(arguments)
    .with_identity(&prepared.identity());
    spec.batch_size = options.batch_size;
    spec.sub_batch_size = options.sub_batch_size;
    spec.pause_ms = i64::try_from(options.pause.as_millis()).unwrap_or(i64::MAX);
    spec.limits = options.limits;
    spec.priority = options.priority;
    spec.origin = options.origin;
    spec.tenant_id = options.tenant_id.clone();
    spec.target = store.target_apart().map(str::to_owned);
    Ok(CheckedSpec {
        spec,
        scope,
        table,
        explained,
        sub_batch,
    })
}

/// Refuses an operation setting a column of `table` the database computes
/// itself (generated, virtual or stored): PostgreSQL and SQLite refuse the
/// statement, but MariaDB ignores the value with a warning, so every
/// sub-batch would "succeed" having changed nothing.
async fn refuse_generated_writes(
    store: &Store,
    table: &sluice_target::Ident,
    written: &[String],
) -> Result<(), OperationError> {
    if written.is_empty() {
        return Ok(());
    }
    let generated = store.target().generated_columns(table).await?;
    match written
        .iter()
        .find(|w| generated.iter().any(|g| g.eq_ignore_ascii_case(w)))
    {
        None => Ok(()),
        Some(column) => Err(OperationError::Arguments(format!(
            "the SET writes `{column}`, which `{table}` computes itself (a generated column): \
             its value cannot be set; set the columns it is computed from instead"
        ))),
    }
}

/// The statement the first sub-batch of `operation` would run (for an
/// operation that gives its sub-batch as one statement), over a first range
/// ending at `first` (a keyset) or the first `size` rows (a loop); `None`
/// when the operation's work is code ([`crate::Operation::run`]) or a
/// keyset table is empty (there is no range to write).
fn first_sub_batch_statement(
    store: &Store,
    operation: &dyn PreparedOperation,
    first: Option<&Cursor>,
    size: i64,
) -> Result<Option<Statement>, OperationError> {
    let bounds = match (operation.shape().strategy(), first) {
        (Strategy::Loop { .. }, _) => Bounds::Loop {
            limit: size,
            seek: None,
        },
        (Strategy::Keyset(_), Some(end)) => Bounds::Range {
            start: None,
            end: end.clone(),
        },
        (Strategy::Keyset(_), None) => return Ok(None),
    };
    let rows = SubBatchRows::new(
        operation.shape(),
        bounds,
        LoopPick::for_target(store.target()),
    );
    operation.sub_batch_statement(&rows)
}
