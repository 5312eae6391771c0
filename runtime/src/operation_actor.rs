//! One actor per running operation: it owns the operation's state machine on
//! this node.
//!
//! Its loop: claim a batch of its operation left pending or orphaned, or plan
//! the next one from the persisted cursor (recorded before it runs); send the
//! batch's sub-batches to the pool one at a time, each starting where the
//! last committed one ended (the actor decides each next one); record the
//! batch's outcome; sleep the pause;
//! repeat until the scope is exhausted (`finished`), a limit is reached
//! (`yielded`, runnable again later), or the attempts run out (`failed`).
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

use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use sluice_operations::{
    OperationError, PreparedOperation, Strategy, SubBatchRequest,
    batching::{keyset_columns, next_batch_end, nth_after},
};
use sluice_store::{
    Backend, Batch, BatchLease, BatchStatus, Cursor, Effect, Event, Expected, Health, Lease,
    NextBatch, OperationStatus, Projection, StoreError,
};

use sluice_telemetry::metrics::Subject;
use sluice_telemetry::{continue_trace, stamp};
use tracing::Span;

use crate::context::{Progress, RuntimeContext};
use crate::health::{HealthMessage, HealthSnapshot, Signal};
use crate::pool::{SubBatchJob, SubBatchReport};
use crate::sizing::{BatchSizer, backoff, shrink_after_failure, throttled_pause, throttled_size};

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
    /// The pool ran a sub-batch (and may have gone on to the batch's next).
    SubBatchDone(SubBatchReport),
    /// The health signals changed.
    Health(HealthSnapshot),
    /// Renew leases, look for operator controls written elsewhere, check limits.
    Tick,
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

/// The actor's state, rebuilt from the store on every start.
pub struct OperationState {
    context: RuntimeContext,
    id: i64,
    /// This run's span: a child of the span that enqueued the operation
    /// (its persisted trace context), so every run, on any node, joins the
    /// operation's one trace. Batches are its children.
    run_span: Span,
    /// The operation's lease; `None` for a helper, which holds batch leases only.
    lease: Option<Lease>,
    /// A helper's last moment with a batch to run.
    helper_busy_at: Instant,
    projection: Projection,
    operation: Arc<dyn PreparedOperation>,
    batch: Option<ActiveBatch>,
    /// The batch after the open one, planned and claimed while the open
    /// one's last sub-batch runs (see [`OperationState::plan_following`]),
    /// so the pool goes straight on to it when that sub-batch ends.
    following: Option<ActiveBatch>,
    /// A batch whose sub-batches are all done, its outcome being recorded
    /// while the following batch's first sub-batch runs; kept until the
    /// write commits (a failed write is retried by the next step).
    closing: Option<ActiveBatch>,
    /// Since when the pool has been running a sub-batch of this actor's.
    in_flight: Option<Instant>,
    step_scheduled: bool,
    /// Whether a health reading for this table has arrived; no sub-batch
    /// starts before one has.
    health_known: bool,
    signal: Signal,
    sizer: BatchSizer,
    run_started: Instant,
    rows_this_run: i64,
    scope_exhausted: bool,
    /// The store may hold a batch of this operation to finish first (true at
    /// start unless the operation has planned none, after a retryable
    /// failure or a lost batch, and while the scope is exhausted but batches
    /// are unfinished): only then is a claim tried before planning, saving a
    /// query per batch otherwise.
    leftovers_possible: bool,
    stopping: Option<Stopping>,
    /// The operation's failure once decided, until the write recording it
    /// commits: a failed write is retried by the next step (or by the wind
    /// down), never dropped while the actor goes on planning batches.
    failing: Option<Event>,
    /// Sub-batches in a row that found the store unusable (reset by one
    /// that commits); sets the backoff before the next try.
    store_faults: u32,
    last_renewal: Instant,
}

struct ActiveBatch {
    lease: BatchLease,
    span: Span,
    end: Option<Cursor>,
    progress: Option<Cursor>,
    size: i64,
    sub_batch_size: i64,
    rows: i64,
    busy: Duration,
    /// Set once the batch's sub-batches stop (the last one done, or one
    /// failed), until the write recording its outcome commits: a failed
    /// write is retried by the next step, so the batch is not dropped to
    /// sit under its lease until the lease lapses and it is claimed again.
    ending: Option<Ending>,
}

impl ActiveBatch {
    /// Its sub-batches' size under a throttle to `percent`.
    fn sub_batch_size_at(&self, percent: u8) -> i64 {
        throttled_size(self.sub_batch_size, percent)
    }

    /// The batch size a succeeded batch's outcome sets, if any.
    ///
    /// Panics unless the batch's ending is [`Ending::Succeeded`]: only a
    /// succeeded batch is closed.
    fn next_size(&self) -> Option<i64> {
        match self.ending {
            Some(Ending::Succeeded { next_size }) => next_size,
            _ => unreachable!("a closing batch has succeeded"),
        }
    }
}

/// How a batch ended, kept until its outcome is recorded.
#[derive(Debug, Clone)]
enum Ending {
    /// Every sub-batch is done; `next_size` is the batch size its outcome
    /// sets (the sizer observed the batch once, when it ended).
    Succeeded { next_size: Option<i64> },
    /// A sub-batch failed: its attempt is recorded as failed, and the batch
    /// retried, split or — its attempts spent — the operation failed.
    Failed {
        /// The sub-batch's error, as recorded.
        message: String,
        /// Whether it ran out of time (only those split a range batch).
        timed_out: bool,
    },
}

/// Why the actor is winding down.
#[derive(Debug, Clone, PartialEq)]
enum Stopping {
    /// The node shuts down: give the operation back (`yielded`).
    Shutdown,
    /// A run limit was reached: give it back (`yielded`) to continue later.
    Yield(String),
    /// Someone else changed it (paused, cancelled, taken over): just stop.
    Released(String),
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
        let context = args.context;
        let store = &context.store;
        let record = store.operation(args.operation_id).await?;
        let node = &context.config.node;
        if record.state.status != OperationStatus::Running {
            return Err(format!("operation {} is not running", record.id).into());
        }
        let lease = if args.helper {
            None
        } else {
            Some(
                record
                    .lease
                    .clone()
                    .filter(|l| &l.node == node)
                    .ok_or_else(|| format!("operation {} is not held by node {node}", record.id))?,
            )
        };
        let operation = match context
            .registry
            .prepare(&record.state.kind, &record.state.arguments)
        {
            Ok(operation) => operation,
            // A helper leaves the verdict to the owner.
            Err(error) if args.helper => return Err(error.into()),
            Err(error) => {
                let failed = Event::Failed {
                    error: format!("cannot run this operation: {error}"),
                };
                store
                    .append(record.id, Expected::Any, lease.as_ref(), &[failed])
                    .await?;
                return Err(error.into());
            }
        };
        // Batch rows exist only once planned (each is planned as ordinal
        // `batches_planned + 1`, by the owner alone): an operation that has
        // planned none, a fresh one, has no batch to give back or to finish
        // first, and its start skips both queries.
        let planned_any = record.state.batches_planned > 0;
        // A batch this node held before a restart may still have a sub-batch
        // of the previous actor in the pool: give it back so that sub-batch's
        // commit is refused and the batch is claimed afresh (a new epoch).
        // (A helper of this node may lose its batch the same way; its next
        // commit is refused and it claims another.)
        if !args.helper && planned_any {
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
        let health_known = match context.monitor() {
            Some(monitor) => monitor
                .cast(HealthMessage::Watch(record.state.table.clone()))
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
        let run_span = tracing::info_span!(
            parent: None,
            "operation.run",
            otel.name = %format!("run {} {}", record.state.kind, record.id),
            sluice.operation.id = record.id,
            sluice.operation.kind = %record.state.kind,
            db.collection.name = %record.state.table,
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
        Ok(OperationState {
            id: record.id,
            run_span,
            lease,
            helper_busy_at: Instant::now(),
            projection: record.state,
            operation,
            batch: None,
            following: None,
            closing: None,
            in_flight: None,
            step_scheduled: false,
            health_known,
            signal: Signal::Normal,
            sizer,
            run_started: Instant::now(),
            rows_this_run: 0,
            scope_exhausted: false,
            leftovers_possible: planned_any,
            stopping: None,
            failing: None,
            store_faults: 0,
            last_renewal: Instant::now(),
            context,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut OperationState,
    ) -> Result<(), ActorProcessingErr> {
        state.schedule_step(&myself, Duration::ZERO);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut OperationState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(monitor) = state.context.monitor() {
            let _ = monitor.cast(HealthMessage::Unwatch(state.projection.table.clone()));
        }
        if let Ok(record) = state.context.store.operation(state.id).await {
            state.projection = record.state;
        }
        state.run_span.record("sluice.rows", state.rows_this_run);
        if state.is_owner() {
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
        let outcome = match message {
            OperationMessage::Step => {
                state.step_scheduled = false;
                state.step(&myself).await
            }
            OperationMessage::SubBatchDone(report) => {
                state.in_flight = None;
                state.sub_batch_done(&myself, report).await
            }
            OperationMessage::Health(snapshot) => state.health(&myself, &snapshot).await,
            OperationMessage::Tick => {
                let ticked = state.tick().await;
                myself.send_after(state.context.config.control_interval, || {
                    OperationMessage::Tick
                });
                ticked
            }
            OperationMessage::Shutdown => {
                state.stopping.get_or_insert(Stopping::Shutdown);
                Ok(())
            }
        };
        if let Err(error) = outcome {
            state.recover(&myself, error)?;
        }
        if state.stopping.is_some() && state.in_flight.is_none() {
            state.wind_down().await;
            myself.stop(None);
        }
        Ok(())
    }
}

impl OperationState {
    /// Starts the next sub-batch unless something holds the operation back.
    async fn step(&mut self, myself: &ActorRef<OperationMessage>) -> Result<(), OperationError> {
        if self.in_flight.is_some() || self.stopping.is_some() || !self.health_known {
            // Resumed by the sub-batch's outcome or the first health reading.
            return Ok(());
        }
        self.record_health().await?;
        if matches!(self.signal, Signal::Stop { .. }) {
            // Resumed by the health message that lifts the stop.
            return Ok(());
        }
        if let Some(failed) = self.failing.clone() {
            return self.fail(failed).await;
        }
        self.close_previous().await?;
        match self.batch.as_ref().and_then(|b| b.ending.as_ref()) {
            Some(Ending::Succeeded { .. }) => self.close_batch().await?,
            Some(Ending::Failed { .. }) => return self.record_failure(myself).await,
            None => {}
        }
        if self.batch.is_none() && !self.open_batch(myself).await? {
            return Ok(());
        }
        let size = self.dispatch(myself);
        self.plan_following(size).await;
        Ok(())
    }

    /// Sends the open batch's next sub-batch to the pool, starting where the
    /// last committed one ended, and returns its size. A pool that cannot
    /// take it (it is being replaced) is tried again after `retry_base`.
    fn dispatch(&mut self, myself: &ActorRef<OperationMessage>) -> i64 {
        let batch = self.batch.as_ref().expect("a batch is open");
        let request = SubBatchRequest {
            lease: batch.lease.clone(),
            from: batch.progress.clone(),
            end: batch.end.clone(),
            size: batch.sub_batch_size_at(self.percent()),
            timeout: self.context.config.sub_batch_timeout,
        };
        let size = request.size;
        let job = SubBatchJob {
            request,
            operation: Arc::clone(&self.operation),
            reply: myself.get_derived(),
            batch_span: batch.span.clone(),
        };
        self.in_flight = Some(Instant::now());
        let sent = self.context.pool().is_some_and(|pool| pool.submit(job));
        if !sent {
            self.in_flight = None;
            self.schedule_step(myself, self.context.config.retry_base);
        }
        size
    }

    /// Takes a batch to work on: one of this operation's left pending (a
    /// retry) or orphaned by a dead node, else the next one planned from the
    /// cursor. Returns false when there is none and the operation ended or
    /// yielded.
    async fn open_batch(
        &mut self,
        myself: &ActorRef<OperationMessage>,
    ) -> Result<bool, OperationError> {
        if !self.is_owner() {
            return self.help(myself).await;
        }
        if self.plans_ahead() {
            self.projection = self.context.store.operation(self.id).await?.state;
            self.plan_ahead().await?;
            self.leftovers_possible = true;
        }
        let store = &self.context.store;
        let config = &self.context.config;
        let node = &config.node;
        if self.leftovers_possible {
            if let Some(batch) = store
                .claim_batches(node, Some(self.id), 1, config.lease_ttl)
                .await?
                .into_iter()
                .next()
            {
                self.batch = Some(self.activate(batch));
                return Ok(true);
            }
            self.leftovers_possible = false;
        }
        if let Some(reason) = self.limit_reached() {
            self.stopping = Some(Stopping::Yield(reason));
            return Ok(false);
        }
        if let Some(following) = self.following.take() {
            // Planned while the last batch ran; on an exhausted scope it
            // still runs (and finds nothing), so it is recorded as done.
            self.batch = Some(following);
            return Ok(true);
        }
        if self.plans_ahead()
            && !self.scope_exhausted
            && self.projection.batches_planned - self.projection.batches_succeeded
                >= i64::from(config.parallel_batches)
        {
            // Every unfinished batch is held by a helper: wait for one.
            self.schedule_step(myself, config.retry_base);
            return Ok(false);
        }
        let size = throttled_size(self.projection.batch_size, self.percent());
        let end = match self.operation.shape().strategy() {
            Strategy::Keyset(_) if self.scope_exhausted => return self.finish(myself).await,
            Strategy::Keyset(_) => {
                let (_, end) = self.next_range(self.projection.batch_size).await?;
                if end.is_none() {
                    return self.finish(myself).await;
                }
                end
            }
            Strategy::Loop { .. } if self.scope_exhausted => return self.finish(myself).await,
            Strategy::Loop { .. } => None,
        };
        let lease = self.lease.as_ref().expect("an owner holds the lease");
        let next = NextBatch {
            end,
            size,
            ttl: config.lease_ttl,
        };
        if self.plans_ahead() {
            // Helpers may take it: plan it pending, then claim the first.
            let (_, appended) = store.plan_batch(lease, next.end, next.size).await?;
            self.projection = appended.record.state;
            self.transitioned(&["batch_planned"]);
            return match store
                .claim_batches(node, Some(self.id), 1, config.lease_ttl)
                .await?
                .into_iter()
                .next()
            {
                Some(batch) => {
                    self.batch = Some(self.activate(batch));
                    Ok(true)
                }
                // Another node's worker took it; look again shortly.
                None => {
                    self.schedule_step(myself, config.retry_base);
                    Ok(false)
                }
            };
        }
        let (batch, appended) = store.plan_claimed_batch(lease, &next).await?;
        self.projection = appended.record.state;
        self.batch = Some(self.planned(batch));
        Ok(true)
    }

    /// Whether this actor holds the operation's lease (else it is a helper).
    fn is_owner(&self) -> bool {
        self.lease.is_some()
    }

    /// Whether this owner keeps batches planned ahead for helpers: with
    /// `parallel_batches` above 1, for range (keyset) batches only — loop
    /// batches take "the next rows that match", which two workers cannot
    /// split.
    fn plans_ahead(&self) -> bool {
        self.is_owner()
            && self.context.config.parallel_batches > 1
            && matches!(self.operation.shape().strategy(), Strategy::Keyset(_))
    }

    /// Plans batches from the cursor until `parallel_batches` are
    /// unfinished, the scope is exhausted or a run limit is reached. The
    /// count comes from `self.projection`, which the caller has just taken
    /// from the store (helpers record their batches there).
    async fn plan_ahead(&mut self) -> Result<(), OperationError> {
        let store = &self.context.store;
        let parallel = i64::from(self.context.config.parallel_batches);
        let lease = self.lease.as_ref().expect("an owner holds the lease");
        while !self.scope_exhausted
            && self.limit_reached().is_none()
            && self.projection.batches_planned - self.projection.batches_succeeded < parallel
        {
            let (size, end) = self.next_range(self.projection.batch_size).await?;
            if end.is_none() {
                self.scope_exhausted = true;
                break;
            }
            let (_, appended) = store.plan_batch(lease, end, size).await?;
            self.projection = appended.record.state;
            self.transitioned(&["batch_planned"]);
        }
        Ok(())
    }

    /// The batch to plan and claim in the same commit as the outcome of the
    /// one just done (`next_size`: the size it set, if any), so the pool
    /// waits on one commit between batches, not three. `None` when the next
    /// batch is not this owner's to take at once: helpers share the
    /// operation, the next batch is planned already (`following`), a batch
    /// may be left over from a retry, the scope is
    /// exhausted, the operation is stopping, stopped by the health signal,
    /// or at a run limit. Then the next step decides, as for a first batch;
    /// it also meets any error finding the next range (this one's outcome
    /// is recorded first, whatever happens to the lookup).
    async fn next_batch_now(&self, next_size: Option<i64>) -> Option<NextBatch> {
        if !self.is_owner()
            || self.plans_ahead()
            || self.following.is_some()
            || self.leftovers_possible
            || self.scope_exhausted
            || self.stopping.is_some()
            || matches!(self.signal, Signal::Stop { .. })
            || self.limit_reached().is_some()
        {
            return None;
        }
        let base = next_size.unwrap_or(self.projection.batch_size);
        let (size, end) = match self.operation.shape().strategy() {
            Strategy::Keyset(_) => match self.next_range(base).await {
                Ok((size, Some(end))) => (size, Some(end)),
                Ok((_, None)) | Err(_) => return None,
            },
            Strategy::Loop { .. } => (throttled_size(base, self.percent()), None),
        };
        Some(NextBatch {
            end,
            size,
            ttl: self.context.config.lease_ttl,
        })
    }

    /// On PostgreSQL, plans and claims the batch after the open one while
    /// the open one's last sub-batch (of `size` rows) runs, so that when it
    /// ends the pool goes straight on to the next batch and the open one's
    /// outcome is recorded while that runs: the boundary's commits overlap
    /// sub-batches instead of stalling the pool. Which sub-batch is the last
    /// is foreseen by count; a wrong guess costs nothing but the overlap
    /// (the following batch waits its turn). SQLite has one writer, so the
    /// two writes would only queue for it: there the boundary stays one
    /// commit between batches ([`Self::close_batch`]). Planning ahead is an
    /// optimisation: when it fails, the batch is planned at the boundary as
    /// usual, and meets the error there.
    async fn plan_following(&mut self, size: i64) {
        let Some(batch) = self.batch.as_ref() else {
            return;
        };
        if self.following.is_some()
            || batch.rows + size < batch.size
            || !matches!(self.context.store.backend(), Backend::Postgres(_))
        {
            return;
        }
        let Some(next) = self.next_batch_now(None).await else {
            return;
        };
        let lease = self.lease.as_ref().expect("next_batch_now is an owner's");
        match self.context.store.plan_claimed_batch(lease, &next).await {
            Ok((planned, appended)) => {
                self.projection = appended.record.state;
                self.following = Some(self.planned(planned));
            }
            Err(error) => {
                tracing::debug!(operation = self.id, error = %error, "could not plan the next batch ahead; it is planned at the boundary");
            }
        }
    }

    /// A batch this owner just planned and claimed (the projection after it
    /// already taken), ready to run.
    fn planned(&mut self, batch: Batch) -> ActiveBatch {
        self.transitioned(&["batch_planned"]);
        self.activate(batch)
    }

    /// Whether the batch just done hands over to the following one at once:
    /// one is planned, no pause is due, and nothing holds the operation
    /// back (a stop, a limit, a failure to record, a wind-down) — those go
    /// through [`Self::step`], which decides.
    fn goes_straight_on(&self) -> bool {
        self.following.is_some()
            && self.closing.is_none()
            && self.failing.is_none()
            && self.stopping.is_none()
            && !matches!(self.signal, Signal::Stop { .. })
            && self.pause().is_zero()
            && self.limit_reached().is_none()
    }

    /// The next range batch from the cursor at `base_size` throttled: its
    /// size and its end, `None` when no row is left.
    async fn next_range(&self, base_size: i64) -> Result<(i64, Option<Cursor>), OperationError> {
        let size = throttled_size(base_size, self.percent());
        let end = next_batch_end(
            &self.context.store,
            self.operation.shape(),
            self.projection.cursor.as_ref(),
            size,
        )
        .await?;
        Ok((size, end))
    }

    /// A helper's next batch: one its owner planned ahead (or a dead node
    /// left). With none for a while (a third of the lease), the helper
    /// stops; the reconciler starts another when there is work again.
    async fn help(&mut self, myself: &ActorRef<OperationMessage>) -> Result<bool, OperationError> {
        let config = &self.context.config;
        let claimed = self
            .context
            .store
            .claim_batches(&config.node, Some(self.id), 1, config.lease_ttl)
            .await?
            .into_iter()
            .next();
        if let Some(batch) = claimed {
            self.helper_busy_at = Instant::now();
            self.batch = Some(self.activate(batch));
            return Ok(true);
        }
        if self.helper_busy_at.elapsed() >= config.lease_ttl / 3 {
            self.stopping = Some(Stopping::Released("no batch left to help with".into()));
        } else {
            self.schedule_step(myself, config.control_interval / 4);
        }
        Ok(false)
    }

    /// Records `finished` once every planned batch succeeded; otherwise waits
    /// for the batches still held elsewhere.
    async fn finish(
        &mut self,
        myself: &ActorRef<OperationMessage>,
    ) -> Result<bool, OperationError> {
        // Helpers record their batches' outcomes: count from the store.
        self.projection = self.context.store.operation(self.id).await?.state;
        let planned = self.projection.batches_planned;
        if self.projection.batches_succeeded < planned {
            // Batches not done yet are pending or held under a lease that
            // has not lapsed: claim them when it does.
            self.leftovers_possible = true;
            self.schedule_step(myself, self.context.config.retry_base);
            return Ok(false);
        }
        self.record(Event::Finished).await?;
        tracing::info!(
            operation = self.id,
            rows = self.projection.rows_done,
            "operation finished"
        );
        self.stopping = Some(Stopping::Released("finished".into()));
        Ok(false)
    }

    /// Takes a sub-batch's report: its rows into the batch's count and
    /// progress; then, when its worker went on to the next, only plans the
    /// following batch if that one is foreseen to be the last; otherwise
    /// decides what comes next (the next sub-batch, the batch's outcome, a
    /// retry).
    async fn sub_batch_done(
        &mut self,
        myself: &ActorRef<OperationMessage>,
        report: SubBatchReport,
    ) -> Result<(), OperationError> {
        if self.batch.is_none() {
            return Ok(());
        }
        let took = report.took;
        let outcome = match report.outcome {
            Ok(outcome) => outcome,
            Err(error) => {
                self.context.metrics.sub_batch_failed(self.subject(), took);
                return self.sub_batch_failed(myself, error).await;
            }
        };
        self.store_faults = 0;
        self.context
            .metrics
            .sub_batch(self.subject(), outcome.rows, took);
        let batch = self.batch.as_mut().expect("checked above");
        batch.busy += took;
        let rows = i64::try_from(outcome.rows).unwrap_or(i64::MAX);
        batch.rows += rows;
        self.rows_this_run += rows;
        if outcome.reached.is_some() {
            batch.progress = outcome.reached;
        }
        let is_loop = batch.end.is_none();
        if is_loop && outcome.last {
            self.scope_exhausted = true;
        }
        let done = outcome.last || (is_loop && batch.rows >= batch.size);
        let (batch_rows, busy, size) = (batch.rows, batch.busy, batch.size);
        if done {
            // Adapt on full batches only, normalised to the unthrottled size.
            // (A helper leaves the batch size to the owner.)
            let base = self.projection.batch_size;
            let adapts = self.is_owner() && batch_rows * 2 >= size;
            let next_size = adapts.then(|| {
                let scaled = busy.mul_f64(base as f64 / size.max(1) as f64);
                self.sizer.observe(base, scaled)
            });
            if let Some(batch) = self.batch.as_mut() {
                batch.ending = Some(Ending::Succeeded { next_size });
            }
            if self.goes_straight_on() {
                // The next sub-batch first, then this batch's outcome,
                // recorded while it runs.
                self.closing = self.batch.take();
                self.batch = self.following.take();
                self.dispatch(myself);
                self.close_previous().await?;
                self.report();
                return Ok(());
            }
            self.close_batch().await?;
        }
        let pause = self.pause();
        if pause.is_zero() && !done {
            // No pause due: the next sub-batch now, as a step would start
            // it, rather than after a message to itself.
            self.step(myself).await?;
        } else {
            self.schedule_step(myself, pause);
        }
        self.report();
        Ok(())
    }

    /// Records the outcome of the open batch, whose sub-batches are all done
    /// (its ending is [`Ending::Succeeded`]) — with the next batch planned
    /// and claimed in the same commit when [`Self::next_batch_now`] has one.
    /// The batch stays open until the write succeeds, so an error leaves it
    /// for the next step to record again rather than losing it.
    async fn close_batch(&mut self) -> Result<(), OperationError> {
        let batch = self.batch.as_ref().expect("a batch is closing");
        let next_size = batch.next_size();
        let store = &self.context.store;
        let (appended, planned) = match (self.next_batch_now(next_size).await, &self.lease) {
            (Some(next), Some(owner)) => {
                store
                    .complete_and_plan_batch(
                        &batch.lease,
                        batch.rows,
                        batch.busy,
                        next_size,
                        owner,
                        &next,
                    )
                    .await?
            }
            _ => {
                let appended = store
                    .complete_batch(&batch.lease, batch.rows, batch.busy, next_size)
                    .await?;
                (appended, None)
            }
        };
        let batch = self.batch.take().expect("a batch is closing");
        self.closed(&batch, appended.record.state);
        if let Some(planned) = planned {
            self.batch = Some(self.planned(planned));
        }
        Ok(())
    }

    /// Records the outcome of the batch handed over to the following one
    /// ([`Self::goes_straight_on`]). It stays in `closing` until the write
    /// commits; a batch taken over meanwhile is let go (its committed
    /// sub-batches stand; the store holds it for whoever claimed it).
    async fn close_previous(&mut self) -> Result<(), OperationError> {
        let Some(batch) = self.closing.as_ref() else {
            return Ok(());
        };
        let store = &self.context.store;
        match store
            .complete_batch(&batch.lease, batch.rows, batch.busy, batch.next_size())
            .await
        {
            Ok(appended) => {
                let batch = self.closing.take().expect("checked above");
                self.closed(&batch, appended.record.state);
                Ok(())
            }
            Err(StoreError::BatchLeaseLost { .. }) => {
                let batch = self.closing.take().expect("checked above");
                tracing::warn!(
                    operation = self.id,
                    ordinal = batch.lease.ordinal,
                    "batch taken over before its outcome was recorded"
                );
                self.leftovers_possible = true;
                Ok(())
            }
            Err(other) => Err(other.into()),
        }
    }

    /// A batch's outcome is recorded (`state`: the projection after it).
    fn closed(&mut self, batch: &ActiveBatch, state: Projection) {
        self.projection = state;
        self.transitioned(&["batch_succeeded"]);
        batch.span.record("sluice.rows", batch.rows);
        self.context
            .metrics
            .batch(self.subject(), batch.busy, self.projection.batch_size);
    }

    /// A failed sub-batch: the batch takes it as its ending (see
    /// [`Self::record_failure`]), unless the batch was taken over, which
    /// leaves nothing to record.
    async fn sub_batch_failed(
        &mut self,
        myself: &ActorRef<OperationMessage>,
        error: OperationError,
    ) -> Result<(), OperationError> {
        if let OperationError::Store(StoreError::BatchLeaseLost { .. }) = error {
            let batch = self.batch.take().expect("a batch is open");
            self.leftovers_possible = true;
            tracing::warn!(
                operation = self.id,
                ordinal = batch.lease.ordinal,
                "batch taken over"
            );
            self.schedule_step(myself, Duration::ZERO);
            return Ok(());
        }
        if let OperationError::Store(e) = &error
            && e.is_unavailable()
        {
            // Not the batch's fault: nothing was kept, and the same
            // sub-batch is tried again once the store answers.
            self.store_faults = self.store_faults.saturating_add(1);
            let config = &self.context.config;
            let wait = backoff(
                self.store_faults,
                config.retry_base,
                config.retry_cap,
                jitter(),
            );
            tracing::warn!(operation = self.id, faults = self.store_faults, ?wait, error = %e, "the store cannot be used; trying the sub-batch again later");
            self.schedule_step(myself, wait);
            return Ok(());
        }
        let batch = self.batch.as_mut().expect("a batch is open");
        let message = error.to_string();
        batch.span.record("otel.status_code", "error");
        batch
            .span
            .record("otel.status_description", message.as_str());
        tracing::warn!(parent: &batch.span, operation = self.id, ordinal = batch.lease.ordinal, attempt = batch.lease.attempt, error = %message, "sub-batch failed");
        batch.ending = Some(Ending::Failed {
            message,
            timed_out: error.is_timeout(),
        });
        self.record_failure(myself).await
    }

    /// Records the open batch's failed attempt (its ending is
    /// [`Ending::Failed`]) and what follows from it: the batch retried after
    /// a backoff with smaller sub-batches, a range that keeps timing out
    /// split in halves, or — its attempts spent, or too many batches failing
    /// — the operation failed. The batch is let go only once the write
    /// commits; until then the next step tries again.
    async fn record_failure(
        &mut self,
        myself: &ActorRef<OperationMessage>,
    ) -> Result<(), OperationError> {
        let batch = self.batch.as_ref().expect("a batch is failing");
        let Some(Ending::Failed { message, timed_out }) = batch.ending.clone() else {
            unreachable!("a failing batch has failed")
        };
        let (lease, span) = (batch.lease.clone(), batch.span.clone());
        let config = &self.context.config;
        let attempt = u32::try_from(lease.attempt).unwrap_or(u32::MAX);
        let store = &self.context.store;
        let smaller = Some(shrink_after_failure(batch.sub_batch_size));
        let wait = backoff(attempt, config.retry_base, config.retry_cap, jitter());
        if attempt >= config.max_attempts
            && timed_out
            && let Some(at) = self.split_point(batch).await?
        {
            // A range that keeps running out of time: its halves are retried
            // separately, each with a fresh attempt budget.
            let appended = store.split_batch(&lease, &at, &message, smaller).await?;
            self.let_go_of_failed_batch(appended.record.state, &["batch_failed", "batch_split"]);
            tracing::warn!(parent: &span, operation = self.id, ordinal = lease.ordinal, at = %at, "batch split in two after timing out {attempt} times");
            self.schedule_step(myself, wait);
            return Ok(());
        }
        if attempt >= config.max_attempts {
            // The batch and the operation fail in one commit.
            let error = format!(
                "batch {} failed {attempt} times; last error: {message}",
                lease.ordinal
            );
            let appended = store
                .fail_batch_and_operation(&lease, &message, &error)
                .await?;
            let events: &[&str] = if appended
                .effects
                .contains(&Effect::NotifyTerminal(OperationStatus::Failed))
            {
                &["batch_failed", "failed"]
            } else {
                &["batch_failed"]
            };
            self.let_go_of_failed_batch(appended.record.state, events);
            if self.projection.status == OperationStatus::Failed {
                // By this batch, or already by another node's.
                self.failed();
            } else {
                // Paused or cancelled meanwhile: the next step or tick finds out.
                self.schedule_step(myself, wait);
            }
            return Ok(());
        }
        // Every failure retries with smaller sub-batches: less work per
        // transaction is what helps a timeout, and costs little otherwise.
        let appended = store.fail_batch(&lease, &message, true, smaller).await?;
        self.let_go_of_failed_batch(appended.record.state, &["batch_failed"]);
        let p = &self.projection;
        let max_ratio = self.context.config.max_failure_ratio;
        if p.batches_planned >= 10 && p.batch_failures as f64 / p.batches_planned as f64 > max_ratio
        {
            let failed = Event::Failed {
                error: format!(
                    "{} failed attempts over {} batches exceed the allowed ratio {max_ratio}; last error: {message}",
                    p.batch_failures, p.batches_planned
                ),
            };
            return self.fail(failed).await;
        }
        self.schedule_step(myself, wait);
        Ok(())
    }

    /// The open batch's failure is recorded (`events` appended, `state` the
    /// projection after them): the batch is no longer this actor's to run,
    /// and the store may hold it (or its halves) as a leftover to claim.
    fn let_go_of_failed_batch(&mut self, state: Projection, events: &[&'static str]) {
        self.batch = None;
        self.leftovers_possible = true;
        self.projection = state;
        self.transitioned(events);
    }

    /// Where to cut a range batch's remaining rows in half: the middle row
    /// after its progress. `None` for a loop batch (no range) or when fewer
    /// than two rows remain.
    async fn split_point(&self, batch: &ActiveBatch) -> Result<Option<Cursor>, OperationError> {
        let Some(end) = &batch.end else {
            return Ok(None);
        };
        let shape = self.operation.shape();
        let columns = keyset_columns(shape)?;
        let half = ((batch.size - batch.rows) / 2).max(1);
        let middle = nth_after(shape, columns, batch.progress.as_ref(), Some(end), half);
        let at = self
            .context
            .store
            .fetch_cursor(&middle, columns.len())
            .await?;
        Ok(at.filter(|at| at < end))
    }

    /// Fails the operation with `failed` (an [`Event::Failed`]); kept in
    /// `failing` until the write commits.
    async fn fail(&mut self, failed: Event) -> Result<(), OperationError> {
        self.failing = Some(failed.clone());
        self.record(failed).await?;
        self.failing = None;
        self.failed();
        Ok(())
    }

    /// The operation is failed in the store: say so on the run's span and stop.
    fn failed(&mut self) {
        self.run_span.record("otel.status_code", "error");
        if let Some(error) = &self.projection.last_error {
            self.run_span
                .record("otel.status_description", error.as_str());
        }
        tracing::error!(parent: &self.run_span, operation = self.id, error = ?self.projection.last_error, "operation failed");
        self.stopping = Some(Stopping::Released("failed".into()));
    }

    async fn health(
        &mut self,
        myself: &ActorRef<OperationMessage>,
        snapshot: &HealthSnapshot,
    ) -> Result<(), OperationError> {
        let signal = snapshot.for_table(&self.projection.table);
        if !self.health_known {
            self.health_known = true;
            self.signal = signal;
            self.schedule_step(myself, Duration::ZERO);
            return Ok(());
        }
        if signal == self.signal {
            return Ok(());
        }
        let was_stopped = matches!(self.signal, Signal::Stop { .. });
        self.signal = signal;
        // Obeyed from here on: say so before the record (which, on SQLite,
        // waits for a sub-batch in flight to commit).
        self.report();
        self.record_health().await?;
        if was_stopped && self.in_flight.is_none() {
            self.schedule_step(myself, Duration::ZERO);
        }
        Ok(())
    }

    /// Appends `throttled` when the signal obeyed differs from the one last
    /// recorded (the owner's job: a helper obeys without recording).
    async fn record_health(&mut self) -> Result<(), OperationError> {
        if !self.is_owner() {
            return Ok(());
        }
        let (health, reason) = match &self.signal {
            Signal::Normal => (Health::Normal, None),
            Signal::Throttle { percent, reason } => (
                Health::Throttled {
                    percent: (*percent).clamp(1, 99),
                },
                Some(reason.clone()),
            ),
            Signal::Stop { reason } => (Health::Stopped, Some(reason.clone())),
        };
        if health == self.projection.health || self.projection.status != OperationStatus::Running {
            return Ok(());
        }
        self.record(Event::Throttled { health, reason }).await?;
        self.context.metrics.throttle(
            self.subject(),
            match self.signal {
                Signal::Stop { .. } => 0,
                _ => self.percent(),
            },
        );
        Ok(())
    }

    /// Renews leases, notices controls written elsewhere, and watches the
    /// in-flight sub-batch's deadline.
    async fn tick(&mut self) -> Result<(), OperationError> {
        let store = &self.context.store;
        let config = &self.context.config;
        if self.last_renewal.elapsed() >= config.lease_ttl / 3 {
            if let Some(lease) = &self.lease {
                match store.renew_lease(lease, config.lease_ttl).await {
                    Ok(lease) => self.lease = Some(lease),
                    Err(StoreError::LeaseLost { .. }) => {
                        self.stopping
                            .get_or_insert(Stopping::Released("lease lost".into()));
                    }
                    Err(other) => return Err(other.into()),
                }
            }
            for batch in [&self.batch, &self.following, &self.closing]
                .into_iter()
                .flatten()
            {
                let _ = store
                    .renew_batch_lease(&batch.lease, config.lease_ttl)
                    .await;
            }
            self.last_renewal = Instant::now();
        }
        let record = store.operation(self.id).await?;
        // A helper works for whoever holds the operation.
        let ours = match &self.lease {
            Some(lease) => record.lease.as_ref().map(|l| l.epoch) == Some(lease.epoch),
            None => true,
        };
        if record.state.status != OperationStatus::Running || !ours {
            let why = if ours {
                record.state.status.as_str().to_owned()
            } else {
                "taken over".to_owned()
            };
            self.stopping.get_or_insert(Stopping::Released(why));
        }
        if self.is_owner()
            && let Some(reason) = self.limit_reached()
        {
            self.stopping.get_or_insert(Stopping::Yield(reason));
        }
        // A pool that lost a job (it was replaced) never answers: give up on
        // the sub-batch; its transaction is gone with its worker.
        if let Some(started) = self.in_flight
            && started.elapsed() > config.sub_batch_timeout + config.lease_ttl
        {
            self.in_flight = None;
            self.batch = None;
            self.leftovers_possible = true;
        }
        if self.stopping.is_none() && self.plans_ahead() {
            // Refill what helpers took while the owner works on its own
            // batch, from the record just read (helpers record there).
            self.projection = record.state;
            self.plan_ahead().await?;
        }
        Ok(())
    }

    /// Gives back what this actor holds as it stops.
    async fn wind_down(&mut self) {
        if let Err(e) = self.close_previous().await {
            tracing::warn!(operation = self.id, error = %e, "could not record a done batch's outcome; it is given back to run again");
        }
        let store = &self.context.store;
        for batch in [
            self.batch.take(),
            self.following.take(),
            self.closing.take(),
        ]
        .into_iter()
        .flatten()
        {
            let _ = store.release_batch(&batch.lease).await;
        }
        tracing::info!(parent: &self.run_span, operation = self.id, why = ?self.stopping, "operation actor stopping");
        if let Some(failed) = self.failing.take() {
            // A failure decided but not yet recorded goes in before anything
            // else: the operation must not be given back as runnable.
            if let Err(e) = self.record(failed).await {
                tracing::warn!(operation = self.id, error = %e, "could not record the operation's failure; its batch's failure is recorded for the next run to see");
            }
            return;
        }
        if !self.is_owner() {
            // A helper gives back its batch only; the owner speaks for the operation.
            return;
        }
        let event = match self.stopping.clone() {
            Some(Stopping::Shutdown) => Event::Yielded {
                reason: "node shutting down".into(),
            },
            Some(Stopping::Yield(reason)) => Event::Yielded { reason },
            _ => return,
        };
        if let Err(e) = self.record(event).await {
            tracing::warn!(operation = self.id, error = %e, "could not yield");
        }
    }

    /// Appends `event` under this actor's lease and takes the new projection.
    async fn record(&mut self, event: Event) -> Result<(), StoreError> {
        let appended = self
            .context
            .store
            .append(
                self.id,
                Expected::Any,
                self.lease.as_ref(),
                std::slice::from_ref(&event),
            )
            .await?;
        self.projection = appended.record.state;
        // A span event on the run: what happened, and the status after it
        // (health decisions carry their reason).
        match &event {
            Event::Throttled { health, reason } => tracing::info!(
                parent: &self.run_span,
                event = event.kind(),
                health = ?health,
                reason = reason.as_deref().unwrap_or(""),
                "health decision"
            ),
            _ => self.transitioned(&[event.kind()]),
        }
        Ok(())
    }

    /// A span event on the run for each event the store just appended, with
    /// the operation's status after them.
    fn transitioned(&self, events: &[&'static str]) {
        for event in events {
            tracing::info!(
                parent: &self.run_span,
                event,
                status = self.projection.status.as_str(),
                "state transition"
            );
        }
    }

    /// Who a measurement is about.
    fn subject(&self) -> Subject<'_> {
        Subject {
            operation_id: self.id,
            kind: &self.projection.kind,
            table: &self.projection.table,
        }
    }

    /// Handles an error from a step: transient database trouble is retried
    /// after a backoff; a lost lease stops the actor; anything else fails
    /// the actor so its supervisor restarts it from the store.
    fn recover(
        &mut self,
        myself: &ActorRef<OperationMessage>,
        error: OperationError,
    ) -> Result<(), ActorProcessingErr> {
        let OperationError::Store(error) = error else {
            return Err(error.into());
        };
        match error {
            StoreError::LeaseLost { .. } => {
                self.stopping
                    .get_or_insert(Stopping::Released("lease lost".into()));
                Ok(())
            }
            StoreError::BatchLeaseLost { .. } => {
                self.batch = None;
                self.leftovers_possible = true;
                self.schedule_step(myself, Duration::ZERO);
                Ok(())
            }
            e if e.is_transient() => {
                tracing::warn!(operation = self.id, error = %e, "database trouble; retrying");
                let config = &self.context.config;
                self.schedule_step(
                    myself,
                    backoff(2, config.retry_base, config.retry_cap, jitter()),
                );
                Ok(())
            }
            other => Err(other.into()),
        }
    }

    fn limit_reached(&self) -> Option<String> {
        let limits = self.projection.limits;
        if let Some(ms) = limits.max_runtime_ms
            && self.run_started.elapsed() >= Duration::from_millis(ms.unsigned_abs())
        {
            return Some(format!("ran for its limit of {ms} ms"));
        }
        if let Some(rows) = limits.max_rows_per_run
            && self.rows_this_run >= rows
        {
            return Some(format!("changed its limit of {rows} rows in this run"));
        }
        None
    }

    fn schedule_step(&mut self, myself: &ActorRef<OperationMessage>, after: Duration) {
        if self.step_scheduled {
            return;
        }
        self.step_scheduled = true;
        if after.is_zero() {
            let _ = myself.cast(OperationMessage::Step);
        } else {
            myself.send_after(after, || OperationMessage::Step);
        }
    }

    /// The pause due after a sub-batch: the operation's, lengthened by a
    /// throttle.
    fn pause(&self) -> Duration {
        let pause = Duration::from_millis(u64::try_from(self.projection.pause_ms).unwrap_or(0));
        throttled_pause(pause, self.percent())
    }

    fn percent(&self) -> u8 {
        match self.signal {
            Signal::Throttle { percent, .. } => percent.clamp(1, 99),
            _ => 100,
        }
    }

    fn report(&self) {
        let p = &self.projection;
        let in_batch = self.batch.as_ref().map_or(0, |b| b.rows);
        let held_back = match &self.signal {
            Signal::Normal => None,
            Signal::Throttle { percent, reason } => {
                Some(format!("throttled to {percent}%: {reason}"))
            }
            Signal::Stop { reason } => Some(format!("stopped: {reason}")),
        };
        let _ = self.context.progress.send(Progress {
            operation_id: self.id,
            kind: p.kind.clone(),
            status: p.status,
            rows_done: p.rows_done + in_batch,
            estimated_rows: p.estimated_rows,
            batches: p.batches_succeeded,
            batch_size: p.batch_size,
            held_back,
        });
        if p.status.is_terminal() {
            let _ = self.context.ended.send(self.id);
        }
    }
}

impl OperationState {
    /// A claimed batch as the one this actor works on, with its span (a
    /// child of the run's span).
    fn activate(&self, batch: Batch) -> ActiveBatch {
        let lease = batch.lease().expect("a claimed batch is running");
        let text =
            |cursor: &Option<Cursor>| cursor.as_ref().map_or_else(String::new, Cursor::to_string);
        let span = tracing::info_span!(
            parent: &self.run_span,
            "batch",
            otel.name = %format!("batch {}", batch.ordinal),
            sluice.batch.ordinal = batch.ordinal,
            sluice.batch.start = %text(&batch.start),
            sluice.batch.end = %text(&batch.end),
            sluice.batch.size = batch.batch_size,
            sluice.batch.attempt = lease.attempt,
            sluice.rows = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        ActiveBatch {
            lease,
            span,
            progress: batch.progress.or(batch.start),
            end: batch.end,
            size: batch.batch_size,
            sub_batch_size: batch.sub_batch_size,
            rows: batch.rows_affected,
            busy: Duration::ZERO,
            ending: None,
        }
    }
}

/// A jitter fraction in `[0, 1)` from the clock's sub-second noise (no RNG
/// dependency needed for spreading retries).
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1_000) / 1_000.0
}
