//! Enqueuing many operations at once: each checked as a single enqueue
//! checks it (its arguments resolved as the command line resolves them), the
//! whole refused by the position of the first refusal, then written in
//! chunks.

use super::*;

/// One operation of a bulk enqueue ([`enqueue_many`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NewOperation {
    /// A registered kind.
    pub kind: String,
    /// Its arguments.
    pub arguments: serde_json::Value,
    /// How it runs.
    pub options: EnqueueOptions,
}

/// Checks every operation, then writes them all in chunks (one statement
/// per chunk on PostgreSQL: [`Store::enqueue_many`]). Returns one
/// [`Enqueued`] per operation, in order (an operation whose kind and
/// arguments repeat an active or earlier one gets that one's id).
///
/// The checks are those of [`enqueue`], each distinct target and batch query
/// checked against the catalogue and the planner once, however many
/// operations share it; the rows in scope are not counted (a bulk-enqueued
/// operation shows progress in rows, without a percentage).
///
/// Errors: [`OperationError::InBulk`] naming the first operation refused
/// and why, before anything is written; [`OperationError::Store`] when the
/// database fails (chunks already committed stay, and calling again with
/// the same operations is safe).
pub async fn enqueue_many(
    store: &Store,
    registry: &Registry,
    operations: &[NewOperation],
) -> Result<Vec<Enqueued>, OperationError> {
    let mut checked = Checked::default();
    let mut specs = Vec::with_capacity(operations.len());
    if let Some(index) = operations.iter().position(|o| {
        o.options.window.is_some()
            || o.options.max_rate.is_some()
            || o.options.latency_budget.is_some()
    }) {
        return Err(OperationError::InBulk {
            index,
            source: Box::new(OperationError::Arguments(
                "a run window, rate limit or latency budget is not taken in a bulk enqueue; \
                 enqueue it alone (or set it for the kind with `sluice limit`)"
                    .into(),
            )),
        });
    }
    let now = chrono::Utc::now();
    for (index, operation) in operations.iter().enumerate() {
        let spec = async {
            if operation.kind == crate::Operation::kind(&crate::builtin::ArchiveRows) {
                return Err(OperationError::Arguments(
                    "archive-rows creates its archive table when it is enqueued: enqueue it \
                     alone (Runtime::enqueue)"
                        .into(),
                ));
            }
            // What the kind resolves at enqueue (a cutoff from an age), as
            // a single enqueue from the command line does.
            let arguments = registry
                .arguments_at(&operation.kind, store, operation.arguments.clone(), now)
                .await?;
            let CheckedSpec { mut spec, .. } = checked_spec(
                store,
                registry,
                &operation.kind,
                &arguments,
                &operation.options,
                &mut checked,
            )
            .await?;
            spec.validate()?;
            Ok(spec)
        }
        .await
        .map_err(|source: OperationError| match source {
            OperationError::Store(e) if !e.is_bad_input() => OperationError::Store(e),
            source => OperationError::InBulk {
                index,
                source: Box::new(source),
            },
        })?;
        specs.push(spec);
    }
    // One trace per operation, each starting in its own enqueue span.
    let spans: Vec<Span> = specs
        .iter_mut()
        .map(|spec| {
            let span = enqueue_span(&spec.kind);
            spec.trace_context = traceparent(&span);
            span
        })
        .collect();
    let enqueued = store.enqueue_many(&specs).await?;
    for (span, enqueued) in spans.iter().zip(&enqueued) {
        span.record("sluice.operation.id", enqueued.id);
    }
    Ok(enqueued)
}
