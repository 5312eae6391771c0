//! The embedding API: [`RuntimeBuilder`] starts a runtime, [`Runtime`] is
//! the handle an application keeps.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use ractor::{Actor, ActorRef, OutputPort, call_t};
use sluice_operations::{
    EnqueueOptions, NewOperation, Operation, OperationError, Registry, enqueue, enqueue_many,
};
use sluice_store::{
    ConnectOptions, Enqueued, ListFilter, OperationRecord, OperationStatus, Store, StoreError,
};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::config::RuntimeConfig;
use crate::context::{Progress, RuntimeContext};
use crate::control::{Action, ControlError, Controlled, Selection, control};
use crate::health::{HealthIndicator, Thresholds};
use crate::indicators::default_indicators;
use crate::replicas::{REPLICA_LAG_THRESHOLDS, ReplicaError, ReplicaLag};
use crate::schedule::{ScheduleError, ScheduleSpec, add_schedule, set_enabled};
use crate::supervisor::{RuntimeSupervisor, SupervisorArgs, SupervisorMessage};

/// Configures and starts a [`Runtime`].
///
/// ```no_run
/// # async fn example() -> Result<(), sluice_runtime::RuntimeError> {
/// let runtime = sluice_runtime::RuntimeBuilder::new("sqlite:app.sqlite")
///     .concurrency(4)
///     .start()
///     .await?;
/// runtime.shutdown().await?;
/// # Ok(()) }
/// ```
pub struct RuntimeBuilder {
    source: Source,
    registry: Registry,
    config: RuntimeConfig,
    indicators: Vec<Arc<dyn HealthIndicator>>,
    builtin_indicators: bool,
    without: Vec<String>,
    /// Replica URLs whose lag is watched ([`RuntimeBuilder::replica`]).
    replicas: Vec<String>,
    replica_lag: Thresholds,
    /// Connection settings for a runtime built from a URL (its pool size and
    /// sub-batch sessions are the runtime's own).
    connect: ConnectOptions,
}

enum Source {
    Url(String),
    Store(Store),
}

/// A running runtime: enqueue and control operations, wait for them, watch
/// progress, shut down. Dropping it without [`Runtime::shutdown`] stops the
/// actors abruptly (in-flight sub-batches roll back; leases lapse and the
/// work is resumed later, by this or another node).
pub struct Runtime {
    context: RuntimeContext,
    supervisor: ActorRef<SupervisorMessage>,
    task: JoinHandle<()>,
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

impl RuntimeBuilder {
    /// A runtime on the database at `url` (`sqlite:PATH`, `postgres://…`),
    /// with the built-in operation kinds and health indicators.
    pub fn new(url: &str) -> Self {
        RuntimeBuilder::from_source(Source::Url(url.to_owned()))
    }

    /// A runtime on an existing store (e.g. from an application's sqlx pool
    /// through [`Store::sqlite`] or [`Store::postgres`]).
    pub fn with_store(store: Store) -> Self {
        RuntimeBuilder::from_source(Source::Store(store))
    }

    fn from_source(source: Source) -> Self {
        RuntimeBuilder {
            source,
            registry: Registry::with_builtins(),
            config: RuntimeConfig::default(),
            indicators: Vec::new(),
            builtin_indicators: true,
            without: Vec::new(),
            replicas: Vec::new(),
            replica_lag: REPLICA_LAG_THRESHOLDS,
            connect: ConnectOptions::default(),
        }
    }

    /// Registers an operation kind.
    pub fn register<O: Operation>(mut self, operation: O) -> Self {
        self.registry.register(operation);
        self
    }

    /// Replaces the whole configuration.
    pub fn config(mut self, config: RuntimeConfig) -> Self {
        self.config = config;
        self
    }

    /// This node's name (default: host name and process id).
    pub fn node(mut self, node: &str) -> Self {
        self.config.node = node.to_owned();
        self
    }

    /// Operations running at once on this node.
    pub fn concurrency(mut self, operations: usize) -> Self {
        self.config.concurrency = operations.max(1);
        self
    }

    /// Sub-batch workers.
    pub fn pool_size(mut self, workers: usize) -> Self {
        self.config.pool_size = workers.max(1);
        self
    }

    /// Batches of one operation that may run at once across all nodes
    /// ([`RuntimeConfig::parallel_batches`]); at least 1.
    pub fn parallel_batches(mut self, batches: u32) -> Self {
        self.config.parallel_batches = batches.max(1);
        self
    }

    /// Adds a health indicator (see [`crate::health::indicator_fn`] for closures).
    pub fn indicator(mut self, indicator: Arc<dyn HealthIndicator>) -> Self {
        self.indicators.push(indicator);
        self
    }

    /// On PostgreSQL, keeps Sluice's tables in `schema`, created if absent
    /// ([`ConnectOptions::schema`]); for a runtime built from a URL.
    pub fn schema(mut self, schema: &str) -> Self {
        self.connect.schema = Some(schema.to_owned());
        self
    }

    /// On PostgreSQL, the zone a `timestamp` without time zone is read in
    /// ([`ConnectOptions::time_zone`]; UTC by default); for a runtime built
    /// from a URL.
    pub fn time_zone(mut self, zone: &str) -> Self {
        self.connect.time_zone = Some(zone.to_owned());
        self
    }

    /// Watches the lag of the replica at `url` (PostgreSQL or MySQL, as the
    /// store): a heartbeat written on the primary at each health poll and
    /// read back there ([`ReplicaLag`]). Repeatable. [`RuntimeBuilder::start`]
    /// fails if a replica cannot be reached then.
    pub fn replica(mut self, url: &str) -> Self {
        self.replicas.push(url.to_owned());
        self
    }

    /// Replica lag thresholds in seconds (default
    /// [`REPLICA_LAG_THRESHOLDS`]: throttled from 5, stopped from 30).
    pub fn replica_lag(mut self, thresholds: Thresholds) -> Self {
        self.replica_lag = thresholds;
        self
    }

    /// Leaves out the built-in indicators for the store's backend.
    pub fn without_builtin_indicators(mut self) -> Self {
        self.builtin_indicators = false;
        self
    }

    /// Leaves out the built-in indicator named `id` (`long-transactions`,
    /// `innodb-activity` …: [`crate::health::HealthIndicator::id`]), as an
    /// operator who knows this worker cannot read it decides. Without it,
    /// [`RuntimeBuilder::start`] refuses to start with a built-in indicator
    /// it cannot read; an id no built-in indicator of the store's backend
    /// has is refused too.
    pub fn without_indicator(mut self, id: impl Into<String>) -> Self {
        self.without.push(id.into());
        self
    }

    /// Connects (creating and migrating an SQLite file if needed), starts
    /// the actor tree and returns its handle.
    pub async fn start(self) -> Result<Runtime, RuntimeError> {
        let store = match self.source {
            Source::Store(store) => store,
            Source::Url(url) => {
                let options = ConnectOptions {
                    max_connections: (self.config.pool_size + 4) as u32,
                    // Sessions of its own bounded by the sub-batch timeout:
                    // a one-statement sub-batch is then one round trip.
                    sub_batch_timeout: Some(self.config.sub_batch_timeout),
                    ..self.connect
                };
                Store::connect_with(&url, &options).await?
            }
        };
        let mut indicators = if self.builtin_indicators {
            builtin_indicators(&store, &self.without).await?
        } else {
            Vec::new()
        };
        indicators.extend(self.indicators);
        if !self.replicas.is_empty() {
            let watched = ReplicaLag::connect(&store, &self.replicas, self.replica_lag).await?;
            indicators.push(Arc::new(watched));
        }
        let (progress, _) = broadcast::channel(1_024);
        let (ended, _) = broadcast::channel(1_024);
        let context = RuntimeContext {
            store,
            registry: self.registry,
            config: Arc::new(self.config),
            health: Arc::new(OutputPort::default()),
            progress,
            ended,
            metrics: sluice_telemetry::Metrics::new(),
            services: Arc::new(RwLock::new(None)),
        };
        let args = SupervisorArgs {
            context: context.clone(),
            indicators,
        };
        let (supervisor, task) = Actor::spawn(None, RuntimeSupervisor, args)
            .await
            .map_err(|e| RuntimeError::Actors(e.to_string()))?;
        Ok(Runtime {
            context,
            supervisor,
            task,
        })
    }
}

/// The built-in indicators of `store`'s backend but those named in
/// `without`, each checked readable by this worker.
async fn builtin_indicators(
    store: &Store,
    without: &[String],
) -> Result<Vec<Arc<dyn HealthIndicator>>, RuntimeError> {
    let mut indicators = default_indicators(store);
    let known: Vec<String> = indicators.iter().map(|i| i.id().to_owned()).collect();
    if let Some(id) = without.iter().find(|id| !known.contains(id)) {
        return Err(RuntimeError::UnknownIndicator {
            id: id.clone(),
            known,
        });
    }
    indicators.retain(|i| !without.iter().any(|id| id == i.id()));
    for indicator in &indicators {
        indicator
            .readable(store)
            .await
            .map_err(|reason| RuntimeError::IndicatorUnreadable {
                name: indicator.name().to_owned(),
                id: indicator.id().to_owned(),
                reason,
            })?;
    }
    Ok(indicators)
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
        let enqueued = enqueue(
            &self.context.store,
            &self.context.registry,
            kind,
            arguments,
            options,
        )
        .await?;
        // This node can run it: claim it now, not at the next interval.
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
