//! Checking a fleet's targets at enqueue: each reachable, its table as the
//! kind requires, and alike on every target. A target whose table has the
//! same definition ([`sluice_target::Target::table_definition`]) as one
//! checked in full is vouched for by it: only what depends on its own data
//! and settings is checked again (its key's values, the SQL's reading of
//! its sessions' clock and dates), the first sub-batch's statement is
//! planned there and its rows counted — a few statements where a full
//! check runs a score.

use std::sync::Arc;

use sluice_store::Store;
use sluice_store::spec::canonical_json;
use sluice_target::{ColumnDefinition, ConnectOptions, Ident};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::fleet::NamedTarget;
use super::{
    Checked, CheckedSpec, EnqueueOptions, checked_spec, count_rows, on_target, refused_sql,
};
use crate::batching::probe;
use crate::error::OperationError;
use crate::operation::Registry;
use crate::shape::Strategy;
use crate::target::{
    check_key_range, check_key_values, check_session_dependent_sql, check_time_column,
};

/// How many targets of a fleet are checked at once at enqueue.
const CHECKED_AT_ONCE: usize = 16;

/// A target checked for a fleet: its checked spec (rows counted), its
/// table's columns, to compare, and its table's definition when it has
/// one, to vouch for targets with the same.
pub(super) struct CheckedTarget {
    pub(super) checked: CheckedSpec,
    pub(super) dialect: &'static str,
    pub(super) columns: Vec<ColumnDefinition>,
    definition: Option<String>,
}

/// Checks each of `options.targets` as its own enqueue would: the first in
/// full, then the others, at most [`CHECKED_AT_ONCE`] at a time, each in
/// full unless the first's table definition vouches for it. The checked
/// targets in the targets' order, or the refusal of the first one (in that
/// order) refused, naming it.
pub(super) async fn check_all(
    store: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &EnqueueOptions,
) -> Result<Vec<CheckedTarget>, OperationError> {
    let Some((head, tail)) = options.targets.split_first() else {
        return Ok(Vec::new());
    };
    let named = |target: &NamedTarget| {
        let name = target.name.clone();
        move |e: OperationError| OperationError::Arguments(format!("target `{name}`: {e}"))
    };
    let first = check_one(store, registry, kind, arguments, options, head, None)
        .await
        .map_err(named(head))?;
    let first = Arc::new(first);
    let permits = Arc::new(Semaphore::new(CHECKED_AT_ONCE));
    let mut checks = JoinSet::new();
    for (index, target) in tail.iter().enumerate() {
        let (store, registry, kind) = (store.clone(), registry.clone(), kind.to_owned());
        let (arguments, options, target) = (arguments.clone(), options.clone(), target.clone());
        let (permits, first) = (Arc::clone(&permits), Arc::clone(&first));
        checks.spawn(
            async move {
                let _permit = permits.acquire_owned().await;
                let checked = check_one(
                    &store,
                    &registry,
                    &kind,
                    &arguments,
                    &options,
                    &target,
                    Some(&first),
                )
                .await
                .map_err(named(&target));
                (index, checked)
            }
            .in_current_span(),
        );
    }
    let mut results: Vec<Option<Result<CheckedTarget, OperationError>>> =
        tail.iter().map(|_| None).collect();
    while let Some(joined) = checks.join_next().await {
        let (index, checked) =
            joined.map_err(|e| OperationError::Failed(format!("checking a target: {e}")))?;
        results[index] = Some(checked);
    }
    let first = Arc::into_inner(first).expect("every check has ended");
    std::iter::once(Ok(first))
        .chain(results.into_iter().map(|r| {
            r.unwrap_or_else(|| Err(OperationError::Failed("a target went unchecked".into())))
        }))
        .collect()
}

/// One target checked — vouched for by `first` when their tables'
/// definitions are the same, else in full — then its connections closed
/// (a fleet of a thousand targets must not hold a thousand pools).
async fn check_one(
    store: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &EnqueueOptions,
    target: &NamedTarget,
    first: Option<&CheckedTarget>,
) -> Result<CheckedTarget, OperationError> {
    let apart = on_target(store, &target.url, &ConnectOptions::default()).await?;
    let checked = match first {
        Some(first) => match vouched(&apart, registry, kind, arguments, options, first).await? {
            Some(checked) => Ok(checked),
            None => in_full(&apart, registry, kind, arguments, options).await,
        },
        None => in_full(&apart, registry, kind, arguments, options).await,
    };
    apart.target().close().await;
    checked
}

/// The target `apart` checked in full, as a lone enqueue checks it, its
/// rows counted and its table's columns and definition read.
async fn in_full(
    apart: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &EnqueueOptions,
) -> Result<CheckedTarget, OperationError> {
    let mut checked = checked_spec(
        apart,
        registry,
        kind,
        arguments,
        options,
        &mut Checked::default(),
    )
    .await?;
    checked.spec.estimated_rows = count_rows(apart, &checked.scope).await?.rows;
    let table = parsed_table(&checked.spec.table)?;
    Ok(CheckedTarget {
        columns: apart.target().column_definitions(&table).await?,
        definition: apart.target().table_definition(&table).await?,
        dialect: apart.target().dialect().name(),
        checked,
    })
}

/// The target `apart` checked by `first`'s word, when its table has the
/// same definition on the same kind of database: the checks that read its
/// data or its sessions' settings run again (its key's values, its time
/// column's, the SQL's reading of its clock and dates), its rows are
/// counted, and the rest is `first`'s, but for the plan of its first
/// sub-batch's statement (the operator's SQL may name another table or a
/// function). `None` when the definitions differ (or either table has
/// none), or `first` had no sub-batch statement to plan: the target needs
/// a full check.
async fn vouched(
    apart: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &EnqueueOptions,
    first: &CheckedTarget,
) -> Result<Option<CheckedTarget>, OperationError> {
    let target = apart.target();
    let (Some(definition), Some(sub_batch), true) = (
        &first.definition,
        &first.checked.sub_batch,
        target.dialect().name() == first.dialect,
    ) else {
        return Ok(None);
    };
    let table = parsed_table(&first.checked.spec.table)?;
    if target.table_definition(&table).await?.as_ref() != Some(definition) {
        return Ok(None);
    }
    // The operator's SQL may name what the table's definition does not
    // hold (another table, a function): planned here too, never run.
    target.explain(sub_batch).await.map_err(refused_sql)?;
    let prepared = registry.prepare(kind, &canonical_json(arguments), target.dialect())?;
    let shape = prepared.shape();
    let batching_key = match shape.strategy() {
        Strategy::Keyset(columns) => {
            check_key_values(apart, shape.table(), &columns[0]).await?;
            columns.as_slice()
        }
        Strategy::Loop { key } => key.as_slice(),
    };
    check_key_range(apart, shape.table(), &batching_key[0]).await?;
    for column in shape.filter().time_bounds() {
        check_time_column(apart, shape.table(), column).await?;
    }
    let query = probe(shape, None, options.batch_size);
    let run: Vec<_> = std::iter::once(&query)
        .chain(&first.checked.sub_batch)
        .collect();
    check_session_dependent_sql(apart, &run).await?;
    let mut spec = first.checked.spec.clone();
    spec.target = apart.target_apart().map(str::to_owned);
    spec.estimated_rows = count_rows(apart, &first.checked.scope).await?.rows;
    Ok(Some(CheckedTarget {
        checked: CheckedSpec {
            spec,
            scope: first.checked.scope.clone(),
            table: first.checked.table.clone(),
            explained: None,
            sub_batch: first.checked.sub_batch.clone(),
        },
        dialect: first.dialect,
        columns: first.columns.clone(),
        definition: first.definition.clone(),
    }))
}

fn parsed_table(table: &str) -> Result<Ident, OperationError> {
    Ident::parse(table).map_err(|e| OperationError::Arguments(e.to_string()))
}

/// How `columns` differ from `first`'s, if they do: a column missing or
/// added, by name; a column's type, when both tables are in the same kind
/// of database (each kind names its types its own way).
pub(super) fn table_difference(
    first: &[ColumnDefinition],
    columns: &[ColumnDefinition],
    same_dialect: bool,
) -> Option<String> {
    for column in first {
        match columns.iter().find(|c| c.name == column.name) {
            None => return Some(format!("it has no column `{}`", column.name)),
            Some(other) if same_dialect && other.full_type != column.full_type => {
                return Some(format!(
                    "column `{}` is {} there, {} here",
                    column.name, column.full_type, other.full_type
                ));
            }
            Some(_) => {}
        }
    }
    columns
        .iter()
        .find(|c| !first.iter().any(|f| f.name == c.name))
        .map(|extra| format!("it has a column `{}` the other lacks", extra.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_that_differ_are_told_apart() {
        let column = |name: &str, full_type: &str| ColumnDefinition {
            name: name.into(),
            full_type: full_type.into(),
            collation: None,
        };
        let first = vec![column("id", "bigint"), column("n", "integer")];
        assert_eq!(table_difference(&first, &first, true), None);
        let missing = vec![column("id", "bigint")];
        assert!(
            table_difference(&first, &missing, true)
                .unwrap()
                .contains("no column `n`")
        );
        let typed = vec![column("id", "bigint"), column("n", "text")];
        assert!(
            table_difference(&first, &typed, true)
                .unwrap()
                .contains("column `n`")
        );
        assert_eq!(table_difference(&first, &typed, false), None);
        let extra = vec![
            column("id", "bigint"),
            column("n", "integer"),
            column("x", "int"),
        ];
        assert!(
            table_difference(&first, &extra, true)
                .unwrap()
                .contains("`x`")
        );
    }
}
