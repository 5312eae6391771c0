//! One actor per running operation: it owns the operation's state machine on
//! this node.
//!
//! Its loop: claim a batch of its operation left pending or orphaned, or plan
//! the next one from the persisted cursor (recorded before it runs); send the
//! batch's sub-batches to the pool one at a time, each starting where the
//! last committed one ended; record the batch's outcome; sleep the pause;
//! repeat until the scope is exhausted (`finished`), a limit is reached
//! (`yielded`, runnable again later), or the attempts run out (`failed`).
//!
//! Every decision is the [`Driver`]'s: a synchronous state machine with no
//! I/O, unit-tested beside it. The actor is its shell: it turns messages and
//! store answers into the driver's [`Input`]s and carries out its
//! [`Command`]s (`exec`).
//!
//! With [`crate::RuntimeConfig::parallel_batches`] above 1 the actor holding
//! the operation (its owner) plans range batches ahead, and helper actors —
//! one per such operation on every other node — claim and run them under
//! the batches' own leases; the owner alone plans, yields and finishes.
//!
//! Everything it knows is reloaded from the store when it starts, so a
//! restart (after a panic, or on another node) continues exactly where the
//! committed state is. What it guarantees about timing:
//! - a health stop: no sub-batch starts after the actor receives it; the
//!   one in flight finishes;
//! - an operator's pause or cancel written anywhere: noticed within
//!   `control_interval`, then no new sub-batch starts;
//! - a lost lease (another node took over): no further write of this actor
//!   is accepted by the store, and it stops.

mod answer;
mod control;
mod driver;
mod exec;
mod failure;
mod phase;
mod plan_watch;
mod protocol;
mod step;
#[cfg(test)]
mod tests;
mod trace;

use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use sluice_operations::{PreparedOperation, Strategy};
use sluice_store::{BatchStatus, Event, Expected, OperationStatus, Projection};
use sluice_telemetry::{continue_trace, stamp};
use tracing::Span;

pub use driver::{Driver, Now, Settings};
pub use phase::{ActiveBatch, Ending, Phase, Role, Stopping};
pub use plan_watch::PlanCheckEvery;
pub use protocol::{Answer, Command, Input, NextPlan};
pub use trace::Note;

use crate::context::RuntimeContext;
use crate::health::{HealthMessage, HealthSnapshot, Signal, Watched};
use crate::pool::SubBatchReport;
use crate::sizing::BatchSizer;
use crate::supervisor::UNREACHABLE;
use sluice_operations::window::RunWindow;

/// The operation actor.
#[derive(Debug)]
pub struct OperationActor;

/// Arguments of [`OperationActor`].
pub struct OperationArgs {
    /// The runtime's shared context.
    pub context: RuntimeContext,
    /// The operation: claimed by this node, or (for a helper) running
    /// anywhere.
    pub operation_id: i64,
    /// Run batches its owner planned ahead instead of owning the operation:
    /// no operation lease is held, nothing is planned, and the actor stops
    /// once no batch has been left to claim for a while.
    pub helper: bool,
}

/// Messages of [`OperationActor`].
pub enum OperationMessage {
    /// Make progress if nothing holds the operation back.
    Step,
    /// The pool ran a sub-batch.
    SubBatchDone(SubBatchReport),
    /// The health signals changed.
    Health(HealthSnapshot),
    /// Renew leases, look for operator controls written elsewhere, check limits.
    Tick,
    /// An operator control was announced for this operation: look now (a
    /// tick that does not re-arm the timer).
    Controlled,
    /// Stop after the sub-batch in flight, giving the operation back as pending.
    Shutdown,
}

impl From<SubBatchReport> for OperationMessage {
    fn from(report: SubBatchReport) -> Self {
        OperationMessage::SubBatchDone(report)
    }
}

/// The pool's replies reach the actor as [`SubBatchReport`]s (through a
/// derived reference), so the pool need not know this actor's messages.
impl TryFrom<OperationMessage> for SubBatchReport {
    type Error = ();

    fn try_from(message: OperationMessage) -> Result<Self, ()> {
        match message {
            OperationMessage::SubBatchDone(report) => Ok(report),
            _ => Err(()),
        }
    }
}

/// The actor's state: its driver and what carrying out its commands needs.
pub struct OperationState {
    context: RuntimeContext,
    id: i64,
    /// This run's span: a child of the span that enqueued the operation
    /// (its persisted trace context), so every run, on any node, joins the
    /// operation's one trace. Batches are its children.
    run_span: Span,
    /// The open batch's span (the last one activated).
    batch_span: Span,
    operation: Arc<dyn PreparedOperation>,
    /// The table whose health it obeys ([`PreparedOperation::paced_by`],
    /// else its own).
    paced_by: String,
    driver: Driver,
    /// Why its target apart from the store cannot be reached, since a
    /// sub-batch found it so: its health is a stop until a tick reaches
    /// the target again.
    target_down: Option<String>,
    /// Its use of its target apart from the store, which keeps the target
    /// open on this node until the actor's state is dropped.
    _target_use: Option<crate::targets::TargetUse>,
}

impl Actor for OperationActor {
    type Msg = OperationMessage;
    type State = OperationState;
    type Arguments = OperationArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: OperationArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut context = args.context;
        let record = context.store.operation(args.operation_id).await?;
        // On a target apart from the store, everything about its table is
        // asked of that database, and its sub-batches record there.
        let mut target_use = None;
        if let Some(url) = &record.state.target {
            let (target, used) = context.targets.handle_for(&context.store, url).await?;
            context.store = target.store;
            context.health = target.port;
            context.target_monitor = Some(target.monitor);
            target_use = Some(used);
        }
        let store = &context.store;
        let mut record = record;
        let node = &context.config.node;
        if record.state.status != OperationStatus::Running {
            return Err(format!("operation {} is not running", record.id).into());
        }
        // A run with a row ceiling is its owner's alone: the owner counts
        // the run's rows, and a helper's would go past the ceiling.
        if args.helper && record.state.limits.max_rows_per_run.is_some() {
            return Err(format!(
                "operation {} has a row ceiling per run: its owner runs it alone",
                record.id
            )
            .into());
        }
        let role = if args.helper {
            Role::Helper {
                busy_at: Instant::now(),
            }
        } else {
            let lease = record
                .lease
                .clone()
                .filter(|l| &l.node == node)
                .ok_or_else(|| format!("operation {} is not held by node {node}", record.id))?;
            Role::Owner { lease }
        };
        let operation = match context.registry.prepare(
            &record.state.kind,
            &record.state.arguments,
            store.target().dialect(),
        ) {
            Ok(operation) => operation,
            // A helper leaves the verdict to the owner.
            Err(error) if args.helper => return Err(error.into()),
            Err(error) => {
                let failed = Event::Failed {
                    error: format!("cannot run this operation: {error}"),
                };
                let lease = record.lease.as_ref();
                store
                    .append(record.id, Expected::Any, lease, &[failed])
                    .await?;
                return Err(error.into());
            }
        };
        // Its SQL must mean here what it meant where it was enqueued (names
        // resolved to the same tables, rows seen by the same role), or this
        // worker would change other rows than the ones checked; and every
        // table it writes must still be transactional (an `ALTER TABLE …
        // ENGINE =` or a new trigger may have come since it was enqueued).
        if let Some(refusal) = refusal_here(store, operation.as_ref(), record.id).await? {
            let error = format!("cannot run this operation here: {refusal}");
            if !args.helper {
                let failed = Event::Failed {
                    error: error.clone(),
                };
                store
                    .append(record.id, Expected::Any, record.lease.as_ref(), &[failed])
                    .await?;
            }
            return Err(error.into());
        }
        // Its target answers again: the stop recorded while it could not
        // be reached is lifted (the owner's; a helper leaves it).
        if !args.helper
            && record.state.health == sluice_store::Health::Stopped
            && record
                .state
                .health_reason
                .as_deref()
                .is_some_and(|r| r.starts_with(UNREACHABLE))
        {
            let normal = Event::Throttled {
                health: sluice_store::Health::Normal,
                reason: None,
            };
            store
                .append(record.id, Expected::Any, record.lease.as_ref(), &[normal])
                .await?;
            record = store.operation(record.id).await?;
        }
        // A batch this node held before a restart may still have a sub-batch
        // of the previous actor in the pool: give it back so that sub-batch's
        // commit is refused and the batch is claimed afresh (a new epoch).
        // (A helper of this node may lose its batch the same way; its next
        // commit is refused and it claims another.) An operation that has
        // planned no batch has none to give back.
        if !args.helper && record.state.batches_planned > 0 {
            for batch in store.batches(record.id).await? {
                if batch.status == BatchStatus::Running
                    && batch.claimed_by.as_deref() == Some(node)
                    && let Some(held) = batch.lease()
                {
                    let _ = store.release_batch(&held).await;
                }
            }
        }
        context.health.subscribe(myself.clone(), |snapshot| {
            Some(OperationMessage::Health(snapshot))
        });
        // With a monitor, nothing runs before its first reading for this
        // table arrives: an operation must not start on an unhealthy database.
        // On a target apart from the store, its target's monitor.
        let paced_by = operation
            .paced_by()
            .unwrap_or_else(|| record.state.table.clone());
        let health_known = match context.monitor() {
            Some(monitor) => monitor
                .cast(HealthMessage::Watch(watched(
                    record.id,
                    &record.state,
                    &paced_by,
                )))
                .is_err(),
            None => true,
        };
        // Re-armed once handled (not `send_interval`): a tick slowed by the
        // database never leaves ticks queued in front of a sub-batch's outcome.
        myself.send_after(context.config.control_interval, || OperationMessage::Tick);
        let config = &context.config;
        let sizer = BatchSizer::new(
            config.target_batch_duration,
            config.min_batch_size,
            config.max_batch_size,
        );
        let ranges = matches!(operation.shape().strategy(), Strategy::Keyset(_));
        let run_span = tracing::info_span!(
            parent: None,
            "operation.run",
            otel.name = %format!("run {} {}", record.state.kind, record.id),
            sluice.operation.id = record.id,
            sluice.operation.kind = %record.state.kind,
            db.collection.name = %record.state.table,
            sluice.target = record.state.target_name.as_deref().or(record.state.target.as_deref()),
            sluice.fleet = record.state.fleet.as_deref(),
            sluice.node = %node,
            sluice.helper = args.helper,
            sluice.rows = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
        );
        if let Some(enqueued) = &record.state.trace_context {
            continue_trace(&run_span, enqueued);
        }
        stamp(&run_span);
        tracing::info!(parent: &run_span, operation = record.id, kind = %record.state.kind, node = %node, "operation started");
        // Its run window as stored when it starts (a stored one that no
        // longer parses is ignored here; `sluice window` refuses those).
        let window = store
            .window_for(record.id, &record.state.kind)
            .await?
            .and_then(|w| RunWindow::parse(&w.run_window, &w.time_zone).ok());
        // Rate limits set when it starts (its own, its fleet's, its kind's,
        // everyone's).
        let rate_limited = !store
            .rate_limits_for(record.id, &record.state.kind, record.state.fleet.as_deref())
            .await?
            .is_empty();
        let driver = Driver::new(
            Settings {
                window,
                rate_limited,
                ..Settings::new(config, ranges)
            },
            sizer,
            role,
            record.state,
            health_known,
            Instant::now(),
        );
        Ok(OperationState {
            id: record.id,
            run_span,
            batch_span: Span::none(),
            operation,
            paced_by,
            driver,
            context,
            target_down: None,
            _target_use: target_use,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut OperationState,
    ) -> Result<(), ActorProcessingErr> {
        state.run(&myself, Input::Start).await
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut OperationState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(monitor) = state.context.monitor() {
            let _ = monitor.cast(HealthMessage::Unwatch(watched(
                state.id,
                state.driver.projection(),
                &state.paced_by,
            )));
        }
        if let Ok(record) = state.context.store.operation(state.id).await {
            state.driver.refreshed(record.state);
        }
        state
            .run_span
            .record("sluice.rows", state.driver.rows_this_run);
        if state.driver.is_owner() {
            state.report();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: OperationMessage,
        state: &mut OperationState,
    ) -> Result<(), ActorProcessingErr> {
        let input = match message {
            OperationMessage::Step => Input::Step,
            OperationMessage::SubBatchDone(report) => {
                match &report.outcome {
                    Ok(outcome) => {
                        state
                            .context
                            .metrics
                            .sub_batch(state.subject(), outcome.rows, report.took)
                    }
                    Err(_) => state
                        .context
                        .metrics
                        .sub_batch_failed(state.subject(), report.took),
                }
                let down = match &report.outcome {
                    Err(error)
                        if error.is_unavailable()
                            && state.context.store.target_apart().is_some() =>
                    {
                        Some(format!("{UNREACHABLE}: {error}"))
                    }
                    _ => None,
                };
                state
                    .run(&myself, Input::SubBatchDone(report.outcome, report.took))
                    .await?;
                let Some(reason) = down.filter(|_| state.target_down.is_none()) else {
                    return Ok(());
                };
                state.target_down = Some(reason.clone());
                Input::Health(Signal::Stop { reason })
            }
            OperationMessage::Health(snapshot) => match &state.target_down {
                Some(reason) => Input::Health(Signal::Stop {
                    reason: reason.clone(),
                }),
                None => Input::Health(snapshot.for_table(&state.paced_by)),
            },
            OperationMessage::Tick => {
                let interval = state.context.config.control_interval;
                myself.send_after(interval, || OperationMessage::Tick);
                if state.target_down.is_some() && target_answers(&state.context.store).await {
                    state.target_down = None;
                    state.run(&myself, Input::Tick).await?;
                    Input::Health(Signal::Normal)
                } else {
                    Input::Tick
                }
            }
            OperationMessage::Controlled => Input::Tick,
            OperationMessage::Shutdown => Input::Shutdown,
        };
        state.run(&myself, input).await
    }
}

/// True when the operation's target answers a trivial query.
async fn target_answers(store: &sluice_store::Store) -> bool {
    let probe = sluice_target::Statement::new("SELECT 1");
    store.target().fetch_int(&probe).await.is_ok()
}

/// Why operation `id` must not run on this worker, if it must not: its SQL
/// would resolve names or see rows otherwise than where it was enqueued
/// ([`sluice_target::Target::session_mismatch`]), or a table it writes no
/// longer rolls back ([`sluice_operations::check_transactional`]).
async fn refusal_here(
    store: &sluice_store::Store,
    operation: &dyn PreparedOperation,
    id: i64,
) -> Result<Option<String>, ActorProcessingErr> {
    // The enqueuing session recorded is the store's; a target apart from
    // it resolves names in its own sessions, checked at enqueue.
    let enqueued = store.enqueuing_session(id).await?;
    if store.target_apart().is_none()
        && let Some(mismatch) = store
            .target()
            .session_mismatch(&enqueued, operation.shape().table())
            .await?
    {
        return Ok(Some(mismatch.to_string()));
    }
    for table in operation.tables_written() {
        match sluice_operations::check_transactional(store, &table).await {
            Ok(()) => {}
            Err(sluice_operations::TargetError::Store(error)) => return Err(error.into()),
            Err(refusal) => return Ok(Some(refusal.to_string())),
        }
    }
    Ok(None)
}

/// How the health monitor knows operation `id`, whose state is
/// `projection`: by the table it is `paced_by`.
fn watched(id: i64, projection: &Projection, paced_by: &str) -> Watched {
    Watched {
        id,
        kind: projection.kind.clone(),
        table: paced_by.to_owned(),
    }
}
