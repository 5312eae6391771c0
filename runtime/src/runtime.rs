//! The embedding API: [`crate::RuntimeBuilder`] starts a runtime, [`Runtime`] is
//! the handle an application keeps.

use std::time::Duration;

use ractor::{ActorRef, call_t};
use sluice_operations::builtin::enqueue_kind;
use sluice_operations::{EnqueueOptions, NewOperation, Operation, OperationError, enqueue_many};
use sluice_store::{Enqueued, ListFilter, OperationRecord, OperationStatus, Store, StoreError};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::config::RuntimeConfig;
use crate::context::{Progress, RuntimeContext};
use crate::control::{Action, ControlError, Controlled, Selection, control};
use crate::replicas::ReplicaError;
use crate::schedule::{ScheduleError, ScheduleSpec, add_schedule, set_enabled};
use crate::supervisor::SupervisorMessage;

/// A running runtime: enqueue and control operations, wait for them, watch
/// progress, shut down. Dropping it without [`Runtime::shutdown`] stops the
/// actors abruptly (in-flight sub-batches roll back; leases lapse and the
/// work is resumed later, by this or another node).
///
/// ```no_run
/// # async fn example() -> Result<(), sluice_runtime::RuntimeError> {
/// use std::time::Duration;
/// use sluice_runtime::{EnqueueOptions, RuntimeBuilder, Selection};
///
/// let runtime = RuntimeBuilder::new("sqlite:app.sqlite").start().await?;
/// let arguments = serde_json::json!({
///     "table": "events", "column": "created_at", "older_than": "90d",
/// });
/// let op = runtime
///     .enqueue_json("delete-aged-rows", &arguments, &EnqueueOptions::default())
///     .await?;
/// runtime.pause(&Selection::One(op.id), "the nightly report runs").await?;
/// runtime.resume(&Selection::One(op.id)).await?;
/// let done = runtime.wait(op.id, Duration::from_secs(3_600)).await?;
/// println!("{} rows deleted", done.state.rows_done);
/// runtime.shutdown().await?;
/// # Ok(()) }
/// ```
pub struct Runtime {
    pub(crate) context: RuntimeContext,
    pub(crate) supervisor: ActorRef<SupervisorMessage>,
    pub(crate) task: JoinHandle<()>,
}

/// Why a runtime call failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An operation was refused or failed to prepare.
    #[error(transparent)]
    Operation(#[from] OperationError),
    /// An operator control was refused.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// A replica to watch could not be.
    #[error(transparent)]
    Replica(#[from] ReplicaError),
    /// The actor system could not start or answer.
    #[error("actor runtime: {0}")]
    Actors(String),
    /// A built-in health indicator this worker cannot read: it would never
    /// slow or stop the work.
    #[error(
        "the {name} health indicator cannot be read: {reason}; or run without it \
         (--without-indicator {id})"
    )]
    IndicatorUnreadable {
        /// Its name.
        name: String,
        /// Its id, for `--without-indicator`.
        id: String,
        /// What is missing.
        reason: String,
    },
    /// The operator's latency query cannot be used: it is not one
    /// statement, or the budget it feeds is off.
    #[error("--latency-query: {0}")]
    LatencyQuery(String),
    /// `without_indicator` named no built-in indicator of this backend.
    #[error("no built-in health indicator is called `{id}` here (there are: {})", .known.join(", "))]
    UnknownIndicator {
        /// The id given.
        id: String,
        /// The ids there are.
        known: Vec<String>,
    },
    /// A wait ran out of time.
    #[error("operation {id} did not end within {waited:?} (it is {status})")]
    Timeout {
        /// The operation.
        id: i64,
        /// How long was waited.
        waited: Duration,
        /// Its status when the wait ended.
        status: &'static str,
    },
}

/// What [`Runtime::run_until_idle`] left undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idle {
    /// Operations with work left, by id: paused and failed ones, and when
    /// the wait ran out of time, pending and running ones too.
    pub left: Vec<Left>,
    /// True when the wait's deadline passed before the runtime was idle.
    pub timed_out: bool,
}

impl Idle {
    /// True when every operation ended with its work done (finished or
    /// cancelled) and the wait did not run out of time.
    pub fn is_empty(&self) -> bool {
        self.left.is_empty() && !self.timed_out
    }
}

/// One operation with work left ([`Idle::left`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// Its id.
    pub id: i64,
    /// Its kind.
    pub kind: String,
    /// Its status: paused or failed (waiting for an operator), or pending or
    /// running when the wait ran out of time.
    pub status: OperationStatus,
    /// The node holding its lease (this one or another), if any.
    pub held_by: Option<String>,
    /// Rows changed so far (committed).
    pub rows_done: i64,
    /// Rows in scope at enqueue, when counted or estimated.
    pub estimated_rows: Option<i64>,
    /// Why it last failed, if it did.
    pub last_error: Option<String>,
}

impl Runtime {
    /// The store this runtime works on.
    pub fn store(&self) -> &Store {
        &self.context.store
    }

    /// This node's settings.
    pub fn config(&self) -> &RuntimeConfig {
        &self.context.config
    }

    /// Checks and enqueues an operation of a registered kind with typed
    /// arguments; returns the new operation, or the active one with the same
    /// kind and arguments (`created == false`).
    pub async fn enqueue<O: Operation>(
        &self,
        operation: &O,
        arguments: &O::Arguments,
        options: &EnqueueOptions,
    ) -> Result<Enqueued, RuntimeError> {
        let json = serde_json::to_value(arguments)
            .map_err(|e| OperationError::Arguments(e.to_string()))?;
        self.enqueue_json(operation.kind(), &json, options).await
    }

    /// Like [`Runtime::enqueue`], for a kind named at run time with JSON arguments.
    pub async fn enqueue_json(
        &self,
        kind: &str,
        arguments: &serde_json::Value,
        options: &EnqueueOptions,
    ) -> Result<Enqueued, RuntimeError> {
        // As the command line enqueues: what the kind resolves at enqueue
        // (a cutoff from an age, archive-rows' columns and archive table).
        let (store, registry) = (&self.context.store, &self.context.registry);
        let arguments = registry
            .arguments_at(kind, store, arguments.clone(), chrono::Utc::now())
            .await?;
        let enqueued = enqueue_kind(store, registry, kind, &arguments, options).await?;
        // This node can run it: claim it now, not at the next interval.
        let _ = self.supervisor.cast(SupervisorMessage::ReconcileNow);
        Ok(enqueued)
    }

    /// Enqueues the revert of operation `id`, which ran with `--undo`
    /// ([`sluice_operations::builtin::revert`]): a `revert` operation that
    /// puts back, in batches and exactly once, the values `id` replaced,
    /// leaving alone the rows changed again since unless `force`. Sized by
    /// `options`.
    ///
    /// Errors: [`OperationError::NotRevertible`] (nothing enqueued) for an
    /// unknown operation, a revert, one run without `--undo` or not ended.
    pub async fn revert(
        &self,
        id: i64,
        force: bool,
        options: &EnqueueOptions,
    ) -> Result<Enqueued, RuntimeError> {
        let (store, registry) = (&self.context.store, &self.context.registry);
        let enqueued =
            sluice_operations::builtin::revert(store, registry, id, force, options).await?;
        let _ = self.supervisor.cast(SupervisorMessage::ReconcileNow);
        Ok(enqueued)
    }

    /// Checks and enqueues many operations at once, written in chunks (one
    /// statement per chunk on PostgreSQL); see
    /// [`sluice_operations::enqueue_many`]. Returns one [`Enqueued`] per
    /// operation, in order. A refused operation is named by its position and
    /// nothing is written.
    ///
    /// ```no_run
    /// # async fn example(runtime: &sluice_runtime::Runtime) -> Result<(), sluice_runtime::RuntimeError> {
    /// use sluice_runtime::{EnqueueOptions, NewOperation};
    /// let cleanups: Vec<NewOperation> = (1..=10_000)
    ///     .map(|tenant| NewOperation {
    ///         kind: "delete-aged-rows".into(),
    ///         arguments: serde_json::json!({
    ///             "table": format!("events_{}", tenant % 4),
    ///             "column": "created_at",
    ///             "older_than": "90d",
    ///         }),
    ///         options: EnqueueOptions::default(),
    ///     })
    ///     .collect();
    /// let enqueued = runtime.enqueue_many(&cleanups).await?;
    /// assert_eq!(enqueued.len(), 10_000);
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_many(
        &self,
        operations: &[NewOperation],
    ) -> Result<Vec<Enqueued>, RuntimeError> {
        let enqueued =
            enqueue_many(&self.context.store, &self.context.registry, operations).await?;
        let _ = self.supervisor.cast(SupervisorMessage::ReconcileNow);
        Ok(enqueued)
    }

    /// Pauses one operation, a kind or everything (for a kind or everything
    /// also a persisted kill switch: see [`mod@crate::control`]).
    pub async fn pause(
        &self,
        selection: &Selection,
        reason: &str,
    ) -> Result<Controlled, RuntimeError> {
        Ok(control(&self.context.store, Action::Pause, selection, reason).await?)
    }

    /// Resumes paused operations (for a kind or everything, lifting its kill switch).
    pub async fn resume(&self, selection: &Selection) -> Result<Controlled, RuntimeError> {
        Ok(control(&self.context.store, Action::Resume, selection, "").await?)
    }

    /// Cancels operations for good.
    pub async fn cancel(
        &self,
        selection: &Selection,
        reason: &str,
    ) -> Result<Controlled, RuntimeError> {
        Ok(control(&self.context.store, Action::Cancel, selection, reason).await?)
    }

    /// Retries failed operations.
    pub async fn retry(&self, selection: &Selection) -> Result<Controlled, RuntimeError> {
        Ok(control(&self.context.store, Action::Retry, selection, "").await?)
    }

    /// Progress reports of every operation running on this node.
    pub fn subscribe(&self) -> broadcast::Receiver<Progress> {
        self.context.progress.subscribe()
    }

    /// Waits until operation `id` is finished, failed or cancelled (or
    /// `timeout` passes) and returns it.
    pub async fn wait(&self, id: i64, timeout: Duration) -> Result<OperationRecord, RuntimeError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut ended = self.context.ended.subscribe();
        loop {
            let record = self.context.store.operation(id).await?;
            if matches!(
                record.state.status,
                OperationStatus::Finished | OperationStatus::Failed | OperationStatus::Cancelled
            ) {
                return Ok(record);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RuntimeError::Timeout {
                    id,
                    waited: timeout,
                    status: record.state.status.as_str(),
                });
            }
            // Woken by this node's word that it ended, or by the clock
            // (changes made elsewhere).
            let _ = tokio::time::timeout(Duration::from_millis(250), async {
                loop {
                    match ended.recv().await {
                        Ok(ended) if ended == id => return,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => {
                            std::future::pending::<()>().await
                        }
                    }
                }
            })
            .await;
        }
    }

    /// Checks and stores a schedule ([`crate::schedule::add_schedule`]);
    /// every runtime on the store fires it, exactly one per tick.
    pub async fn add_schedule(
        &self,
        spec: &ScheduleSpec,
    ) -> Result<sluice_store::Schedule, ScheduleError> {
        add_schedule(&self.context.store, &self.context.registry, spec).await
    }

    /// Removes a schedule (its recorded fires stay).
    pub async fn remove_schedule(&self, name: &str) -> Result<(), ScheduleError> {
        Ok(self.context.store.remove_schedule(name).await?)
    }

    /// Enables (from the next due time after now) or disables a schedule.
    pub async fn set_schedule_enabled(
        &self,
        name: &str,
        enabled: bool,
    ) -> Result<(), ScheduleError> {
        set_enabled(&self.context.store, name, enabled).await
    }

    /// Every schedule, by name.
    pub async fn schedules(&self) -> Result<Vec<sluice_store::Schedule>, RuntimeError> {
        Ok(self.context.store.schedules().await?)
    }

    /// Runs until no operation is pending or running anywhere (work held by
    /// another node's live or lapsed lease counts as not done), then says
    /// what is left undone: paused and failed operations, which no runtime
    /// runs until an operator resumes or retries them. A runtime that is
    /// idle with nothing left returns [`Idle::is_empty`].
    pub async fn run_until_idle(&self) -> Result<Idle, RuntimeError> {
        self.wait_idle(None).await
    }

    /// [`Runtime::run_until_idle`], returning after `deadline` at the latest:
    /// then [`Idle::timed_out`] is true and the operations still pending or
    /// running are among those left, each with the node holding it.
    pub async fn run_until_idle_within(&self, deadline: Duration) -> Result<Idle, RuntimeError> {
        self.wait_idle(Some(tokio::time::Instant::now() + deadline))
            .await
    }

    async fn wait_idle(
        &self,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Idle, RuntimeError> {
        loop {
            let running = call_t!(self.supervisor, SupervisorMessage::Running, 5_000)
                .map_err(|e| RuntimeError::Actors(e.to_string()))?;
            let active = self
                .operations_in(&[OperationStatus::Pending, OperationStatus::Running])
                .await?;
            let timed_out = deadline.is_some_and(|at| tokio::time::Instant::now() >= at);
            if (running.is_empty() && active.is_empty()) || timed_out {
                let mut left = self
                    .operations_in(&[OperationStatus::Paused, OperationStatus::Failed])
                    .await?;
                if timed_out {
                    left.extend(active);
                }
                left.sort_by_key(|l| l.id);
                return Ok(Idle { left, timed_out });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The operations in any of `statuses` (at most 1,000 each), as left work.
    async fn operations_in(&self, statuses: &[OperationStatus]) -> Result<Vec<Left>, RuntimeError> {
        let mut left = Vec::new();
        for status in statuses {
            let filter = ListFilter {
                status: Some(*status),
                kind: None,
                limit: Some(1_000),
                ..Default::default()
            };
            left.extend(
                self.context
                    .store
                    .list(&filter)
                    .await?
                    .into_iter()
                    .map(|record| Left {
                        id: record.id,
                        kind: record.state.kind.clone(),
                        status: record.state.status,
                        held_by: record.lease.map(|lease| lease.node),
                        rows_done: record.state.rows_done,
                        estimated_rows: record.state.estimated_rows,
                        last_error: record.state.last_error.clone(),
                    }),
            );
        }
        Ok(left)
    }

    /// Stops claiming, lets every sub-batch in flight finish, gives running
    /// operations back as pending (resumed by the next runtime that runs),
    /// and stops the actors.
    pub async fn shutdown(self) -> Result<(), RuntimeError> {
        let stopped = call_t!(self.supervisor, SupervisorMessage::Shutdown, 120_000);
        if let Err(e) = stopped {
            self.supervisor.stop(None);
            return Err(RuntimeError::Actors(e.to_string()));
        }
        let _ = self.task.await;
        Ok(())
    }
}
