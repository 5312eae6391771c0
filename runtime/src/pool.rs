//! The sub-batch pool: a fixed number of supervised worker actors that run
//! sub-batch SQL, with a queue in front of them.
//!
//! Guarantees: at most `size` sub-batches run at once on this node; every
//! job gets exactly one reply ([`OperationMessage::SubBatchDone`]), also when
//! its worker panics (the reply is then an error and the worker is replaced);
//! a sub-batch whose worker dies commits nothing, because its transaction is
//! dropped with it.

use std::collections::VecDeque;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use sluice_operations::{OperationError, PreparedOperation, SubBatchRequest, run_sub_batch};
use sluice_store::Store;
use tracing::Instrument;

use crate::operation_actor::OperationMessage;

/// The pool actor.
#[derive(Debug)]
pub struct SubBatchPool;

/// One sub-batch to run and whom to tell.
pub struct SubBatchJob {
    /// What to run.
    pub request: SubBatchRequest,
    /// The operation's code and shape.
    pub operation: Arc<dyn PreparedOperation>,
    /// The operation actor waiting for the outcome.
    pub reply: ActorRef<OperationMessage>,
    /// The sub-batch's span (a child of its batch's span, in its operation's
    /// trace): the worker runs the job inside it.
    pub span: tracing::Span,
}

/// Messages of [`SubBatchPool`].
pub enum PoolMessage {
    /// Queue a job.
    Run(SubBatchJob),
    /// Worker `index` finished its job.
    Idle(usize),
}

/// Arguments of [`SubBatchPool`].
pub struct PoolArgs {
    /// The store the sub-batches write through.
    pub store: Store,
    /// Number of workers.
    pub size: usize,
}

/// The pool's state.
pub struct PoolState {
    store: Store,
    workers: Vec<Worker>,
    queue: VecDeque<SubBatchJob>,
}

struct Worker {
    actor: ActorRef<WorkerMessage>,
    /// Whom to answer for the job it runs, if any.
    busy: Option<ActorRef<OperationMessage>>,
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
        let mut workers = Vec::with_capacity(args.size);
        for index in 0..args.size.max(1) {
            workers.push(Worker {
                actor: spawn_worker(&myself, &args.store, index).await?,
                busy: None,
            });
        }
        Ok(PoolState {
            store: args.store,
            workers,
            queue: VecDeque::new(),
        })
    }

    /// Stops the workers and waits for them (a stopped worker finishes its
    /// sub-batch; one killed mid-`BEGIN` could leave its pooled connection
    /// inside a transaction).
    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut PoolState,
    ) -> Result<(), ActorProcessingErr> {
        myself
            .stop_children_and_wait(Some("pool stopping".into()), None)
            .await;
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: PoolMessage,
        state: &mut PoolState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PoolMessage::Run(job) => state.queue.push_back(job),
            PoolMessage::Idle(index) => {
                if let Some(worker) = state.workers.get_mut(index) {
                    worker.busy = None;
                }
            }
        }
        state.dispatch();
        Ok(())
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
        let Some(index) = state
            .workers
            .iter()
            .position(|w| w.actor.get_id() == cell.get_id())
        else {
            return Ok(());
        };
        tracing::warn!(worker = index, %why, "sub-batch worker died; replacing it");
        if let Some(reply) = state.workers[index].busy.take() {
            let error = OperationError::Failed(format!("sub-batch worker died: {why}"));
            let _ = reply.cast(OperationMessage::SubBatchDone(Err(error)));
        }
        state.workers[index].actor = spawn_worker(&myself, &state.store, index).await?;
        state.dispatch();
        Ok(())
    }
}

impl PoolState {
    fn dispatch(&mut self) {
        for worker in self.workers.iter_mut().filter(|w| w.busy.is_none()) {
            let Some(job) = self.queue.pop_front() else {
                return;
            };
            worker.busy = Some(job.reply.clone());
            if let Err(e) = worker.actor.cast(WorkerMessage::Run(job)) {
                // The worker is gone; its supervision event replies and replaces it.
                tracing::warn!(error = %e, "could not hand a job to a sub-batch worker");
            }
        }
    }
}

async fn spawn_worker(
    pool: &ActorRef<PoolMessage>,
    store: &Store,
    index: usize,
) -> Result<ActorRef<WorkerMessage>, ActorProcessingErr> {
    let (worker, _) = Actor::spawn_linked(
        None,
        SubBatchWorker,
        WorkerArgs {
            index,
            pool: pool.clone(),
            store: store.clone(),
        },
        pool.get_cell(),
    )
    .await?;
    Ok(worker)
}

/// One worker of the pool: runs one sub-batch at a time.
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
    pool: ActorRef<PoolMessage>,
    store: Store,
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
        let outcome = run_sub_batch(&state.store, job.operation.as_ref(), &job.request)
            .instrument(job.span.clone())
            .await;
        match &outcome {
            Ok(done) => {
                job.span.record("sluice.rows", done.rows);
            }
            Err(error) => {
                job.span.record("otel.status_code", "error");
                job.span
                    .record("otel.status_description", error.to_string());
            }
        }
        let _ = job.reply.cast(OperationMessage::SubBatchDone(outcome));
        let _ = state.pool.cast(PoolMessage::Idle(state.index));
        Ok(())
    }
}
