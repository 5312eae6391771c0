//! The sub-batch pool: a fixed number of supervised worker actors that run
//! sub-batch SQL, with a queue in front of them.
//!
//! Guarantees: at most `size` sub-batches run at once on this node; every
//! job gets exactly one reply (a [`SubBatchReport`]), also when
//! its worker panics (the reply is then an error and the worker is replaced);
//! a sub-batch whose worker dies commits nothing, because its transaction is
//! dropped with it.
//!
//! The queue is shared ([`SubBatchQueue`]): an operation actor hands its job
//! straight to an idle worker, and a worker that finishes takes the next
//! queued job itself, so a sub-batch goes from its operation actor to a
//! worker in one message. The [`SubBatchPool`] actor starts the workers,
//! supervises them and replaces the ones that die.
//!
//! A job is one sub-batch: the operation actor decides every next one, so
//! a stop, a throttle change, a pause or a failure takes effect before the
//! next sub-batch starts, and operations sharing the pool take turns
//! sub-batch by sub-batch.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, DerivedActorRef, SupervisionEvent};
use sluice_operations::{
    OperationError, PreparedOperation, SubBatchOutcome, SubBatchRequest, run_sub_batch,
};
use sluice_store::{Store, SubBatchSession};
use tracing::Instrument;

/// The pool actor: starts, supervises and replaces the workers.
#[derive(Debug)]
pub struct SubBatchPool;

/// One sub-batch to run and whom to tell.
pub struct SubBatchJob {
    /// The sub-batch.
    pub request: SubBatchRequest,
    /// The operation's code and shape.
    pub operation: Arc<dyn PreparedOperation>,
    /// The operation actor waiting for the outcome.
    pub reply: DerivedActorRef<SubBatchReport>,
    /// The batch's span (in its operation's trace): each sub-batch runs in
    /// a span of its own under it.
    pub batch_span: tracing::Span,
    /// The operation's handle on its target when that is a database apart
    /// from the store ([`Store::on_target`]); `None`: the store's own.
    pub apart: Option<Store>,
}

/// What a worker reports after its sub-batch.
pub struct SubBatchReport {
    /// The sub-batch's outcome.
    pub outcome: Result<SubBatchOutcome, OperationError>,
    /// How long it ran on its worker.
    pub took: Duration,
}

/// The pool's queue and its workers' places, shared by the pool actor, its
/// workers and the operation actors. A job is either queued or held by
/// exactly one busy worker, whose place remembers whom to answer.
#[derive(Clone)]
pub struct SubBatchQueue(Arc<Mutex<Roster>>);

/// A running pool: its actor (whose death the runtime supervisor watches)
/// and the queue operation actors hand their jobs to.
#[derive(Clone)]
pub struct RunningPool {
    /// The pool actor.
    pub actor: ActorRef<PoolMessage>,
    /// Its queue.
    pub queue: SubBatchQueue,
}

/// Messages of [`SubBatchPool`]: none; it acts on supervision events only.
pub enum PoolMessage {}

/// Arguments of [`SubBatchPool`].
pub struct PoolArgs {
    /// The store the sub-batches write through.
    pub store: Store,
    /// The queue the workers take their jobs from: one worker per place.
    pub queue: SubBatchQueue,
}

/// The pool's state.
pub struct PoolState {
    store: Store,
    queue: SubBatchQueue,
}

struct Roster {
    places: Vec<Place>,
    jobs: VecDeque<SubBatchJob>,
    /// The pool stopped: no job is taken any more.
    closed: bool,
}

/// A worker's place: the worker now in it (none while it is being
/// replaced) and, while it runs a job, whom to answer.
#[derive(Default)]
struct Place {
    worker: Option<ActorRef<WorkerMessage>>,
    busy: Option<DerivedActorRef<SubBatchReport>>,
}

impl SubBatchReport {
    /// The report of a job that never ran (its pool stopped or its worker
    /// died): an error.
    pub fn failed(error: OperationError) -> Self {
        SubBatchReport {
            outcome: Err(error),
            took: Duration::ZERO,
        }
    }
}

impl SubBatchQueue {
    /// An empty queue for a pool of `size` workers (at least one).
    pub fn new(size: usize) -> Self {
        let places = (0..size.max(1)).map(|_| Place::default()).collect();
        SubBatchQueue(Arc::new(Mutex::new(Roster {
            places,
            jobs: VecDeque::new(),
            closed: false,
        })))
    }

    /// Hands `job` to an idle worker, or queues it until one is free; it
    /// is then answered exactly once. False when the pool has stopped: the
    /// job is dropped unanswered (the pool's replacement has a queue of
    /// its own).
    pub fn submit(&self, job: SubBatchJob) -> bool {
        let mut roster = self.lock();
        if roster.closed {
            return false;
        }
        roster.jobs.push_back(job);
        roster.dispatch();
        true
    }

    /// How many workers the queue has places for.
    fn places(&self) -> usize {
        self.lock().places.len()
    }

    /// Worker `index` finished its job: its place is free, and it takes the
    /// next queued job if there is one.
    fn finished(&self, index: usize) {
        let mut roster = self.lock();
        if let Some(place) = roster.places.get_mut(index) {
            place.busy = None;
        }
        roster.dispatch();
    }

    /// The worker at `index` died: whom it was answering (if anyone), and
    /// its place left empty until [`Self::replaced`].
    fn died(&self, index: usize) -> Option<DerivedActorRef<SubBatchReport>> {
        let mut roster = self.lock();
        let place = roster.places.get_mut(index)?;
        place.worker = None;
        place.busy.take()
    }

    /// `worker` takes place `index` and the queue goes on.
    fn replaced(&self, index: usize, worker: ActorRef<WorkerMessage>) {
        let mut roster = self.lock();
        if let Some(place) = roster.places.get_mut(index) {
            place.worker = Some(worker);
        }
        roster.dispatch();
    }

    /// The place of the worker with this actor id, if it is one of ours.
    fn place_of(&self, id: ractor::ActorId) -> Option<usize> {
        self.lock()
            .places
            .iter()
            .position(|p| p.worker.as_ref().is_some_and(|w| w.get_id() == id))
    }

    /// No job is taken any more; queued ones are answered with an error
    /// (nothing of them ran), so no operation actor waits on them.
    fn close(&self) {
        let queued: Vec<SubBatchJob> = {
            let mut roster = self.lock();
            roster.closed = true;
            roster.jobs.drain(..).collect()
        };
        for job in queued {
            let error = OperationError::Failed("the sub-batch pool stopped".into());
            let report = SubBatchReport::failed(error);
            let _ = job.reply.send_message(report);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Roster> {
        // A panic while holding the lock leaves the roster consistent (every
        // change under it is one assignment), so a poisoned lock is used as is.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Roster {
    /// Gives queued jobs to idle workers, first come first served.
    fn dispatch(&mut self) {
        for place in self.places.iter_mut() {
            if place.busy.is_some() {
                continue;
            }
            let Some(worker) = &place.worker else {
                continue;
            };
            let Some(job) = self.jobs.pop_front() else {
                return;
            };
            place.busy = Some(job.reply.clone());
            if let Err(e) = worker.cast(WorkerMessage::Run(job)) {
                // The worker is gone; its supervision event answers the job
                // and replaces it.
                tracing::warn!(error = %e, "could not hand a job to a sub-batch worker");
            }
        }
    }
}

impl Drop for PoolState {
    /// However the pool ends, its queue takes no more jobs. `post_stop`
    /// closes it first on a stop (before the workers are stopped, so none
    /// is handed a job it would drop); this covers a pool that panicked or
    /// was killed, for which ractor does not call `post_stop`.
    fn drop(&mut self) {
        self.queue.close();
    }
}

impl Actor for SubBatchPool {
    type Msg = PoolMessage;
    type State = PoolState;
    type Arguments = PoolArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: PoolArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let state = PoolState {
            store: args.store,
            queue: args.queue,
        };
        for index in 0..state.queue.places() {
            let worker = spawn_worker(&myself, &state, index).await?;
            state.queue.replaced(index, worker);
        }
        Ok(state)
    }

    /// Stops the workers and waits for them (a stopped worker finishes its
    /// sub-batch; one killed mid-`BEGIN` could leave its pooled connection
    /// inside a transaction).
    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut PoolState,
    ) -> Result<(), ActorProcessingErr> {
        state.queue.close();
        myself
            .stop_children_and_wait(Some("pool stopping".into()), None)
            .await;
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: PoolMessage,
        _state: &mut PoolState,
    ) -> Result<(), ActorProcessingErr> {
        match message {}
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut PoolState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, why) = match event {
            SupervisionEvent::ActorFailed(cell, error) => (cell, error.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, reason.unwrap_or_else(|| "stopped".into()))
            }
            _ => return Ok(()),
        };
        let Some(index) = state.queue.place_of(cell.get_id()) else {
            return Ok(());
        };
        tracing::warn!(worker = index, %why, "sub-batch worker died; replacing it");
        if let Some(reply) = state.queue.died(index) {
            let error = OperationError::Failed(format!("sub-batch worker died: {why}"));
            let _ = reply.send_message(SubBatchReport::failed(error));
        }
        let worker = spawn_worker(&myself, state, index).await?;
        state.queue.replaced(index, worker);
        Ok(())
    }
}

async fn spawn_worker(
    pool: &ActorRef<PoolMessage>,
    state: &PoolState,
    index: usize,
) -> Result<ActorRef<WorkerMessage>, ActorProcessingErr> {
    let (worker, _) = Actor::spawn_linked(
        None,
        SubBatchWorker,
        WorkerArgs {
            index,
            queue: state.queue.clone(),
            // Its connection is kept while the store has a place for it
            // (see `SubBatchSession`: a share of the store's connections,
            // for all workers together).
            session: state.store.sub_batch_session(true),
        },
        pool.get_cell(),
    )
    .await?;
    Ok(worker)
}

/// One worker of the pool: runs one sub-batch at a time, a job's run of
/// them one after another.
#[derive(Debug)]
pub struct SubBatchWorker;

/// Messages of [`SubBatchWorker`].
pub enum WorkerMessage {
    /// Run this job and reply.
    Run(SubBatchJob),
}

/// Arguments and state of [`SubBatchWorker`].
pub struct WorkerArgs {
    index: usize,
    queue: SubBatchQueue,
    /// Where its one-statement sub-batches on the store's database run (a
    /// connection it may keep).
    session: SubBatchSession,
}

impl Actor for SubBatchWorker {
    type Msg = WorkerMessage;
    type State = WorkerArgs;
    type Arguments = WorkerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: WorkerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: WorkerMessage,
        state: &mut WorkerArgs,
    ) -> Result<(), ActorProcessingErr> {
        let WorkerMessage::Run(job) = message;
        let span = sub_batch_span(&job.batch_span, &job.request);
        let started = Instant::now();
        // On a target apart from the store, a session that keeps no
        // connection between jobs: the operation's handle on the target may
        // be closed once no operation here uses it, which waits for every
        // connection to come back.
        let mut apart;
        let session = match &job.apart {
            Some(store) => {
                apart = store.sub_batch_session(false);
                &mut apart
            }
            None => &mut state.session,
        };
        let outcome = run_sub_batch(session, job.operation.as_ref(), &job.request)
            .instrument(span.clone())
            .await;
        let took = started.elapsed();
        match &outcome {
            Ok(done) => {
                span.record("sluice.rows", done.rows);
            }
            Err(error) => {
                span.record("otel.status_code", "error");
                span.record("otel.status_description", error.to_string());
            }
        }
        // Free the place first, so the answer's next sub-batch finds it.
        state.queue.finished(state.index);
        let _ = job.reply.send_message(SubBatchReport { outcome, took });
        Ok(())
    }
}

/// A sub-batch's span: a child of its batch's span, in its operation's trace.
fn sub_batch_span(batch: &tracing::Span, request: &SubBatchRequest) -> tracing::Span {
    tracing::info_span!(
        parent: batch,
        "sub_batch",
        otel.name = "sub-batch",
        sluice.sub_batch.size = request.size,
        sluice.batch.attempt = request.lease.attempt,
        sluice.rows = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    )
}
