//! The runtime's settings and the context every actor shares.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use ractor::{ActorRef, OutputPort};
use sluice_operations::Registry;
use sluice_store::{OperationStatus, Store};
use sluice_telemetry::Metrics;
use tokio::sync::broadcast;

use crate::health::{HealthMessage, HealthSnapshot};
use crate::pool::{RunningPool, SubBatchQueue};

/// How a runtime runs. [`RuntimeConfig::default`] suits an embedded SQLite
/// runtime; every field can be set on the builder.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeConfig {
    /// This node's name in leases and events (unique per process).
    pub node: String,
    /// Operations run at once on this node.
    pub concurrency: usize,
    /// Sub-batch workers (sub-batches running at once on this node).
    pub pool_size: usize,
    /// Batches of one keyset operation that may run at once across all
    /// nodes. Above 1, the node holding an operation plans batches ahead
    /// until this many are unfinished, and every other node runs a helper
    /// per such operation that claims them (one batch at a time, under the
    /// batch's lease). 1 (the default): an operation's batches run one after
    /// another on the node holding it.
    pub parallel_batches: u32,
    /// Lease length; renewed every third of it. A dead node's work is taken
    /// over once its leases lapse.
    pub lease_ttl: Duration,
    /// How often the reconciler looks for runnable operations.
    pub reconcile_interval: Duration,
    /// How often the scheduler fires due schedules.
    pub schedule_interval: Duration,
    /// How often operation actors check the store for operator controls
    /// written elsewhere (pause, cancel) — the bound on how late they notice.
    pub control_interval: Duration,
    /// How often health indicators are polled.
    pub health_interval: Duration,
    /// Polls a better health signal must hold before it takes effect.
    pub health_clear_after: u32,
    /// A sub-batch's time limit (statement timeout on PostgreSQL).
    pub sub_batch_timeout: Duration,
    /// Attempts of one batch before the operation fails.
    pub max_attempts: u32,
    /// First retry delay (doubling per attempt, with jitter).
    pub retry_base: Duration,
    /// Longest retry delay.
    pub retry_cap: Duration,
    /// The batch duration the adaptive sizer aims at.
    pub target_batch_duration: Duration,
    /// Smallest batch size the sizer may choose.
    pub min_batch_size: i64,
    /// Largest batch size the sizer may choose.
    pub max_batch_size: i64,
    /// Failed batches over planned batches above which the operation fails
    /// (checked once at least 10 batches were planned).
    pub max_failure_ratio: f64,
    /// Restarts of one operation actor allowed within `restart_window`
    /// before the operation is failed.
    pub restart_budget: u32,
    /// The window of `restart_budget`.
    pub restart_window: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            node: format!("{}-{}", hostname(), std::process::id()),
            concurrency: 8,
            pool_size: 4,
            parallel_batches: 1,
            lease_ttl: Duration::from_secs(15),
            reconcile_interval: Duration::from_millis(500),
            schedule_interval: Duration::from_secs(1),
            control_interval: Duration::from_millis(250),
            health_interval: Duration::from_millis(250),
            health_clear_after: 3,
            sub_batch_timeout: Duration::from_secs(30),
            max_attempts: 5,
            retry_base: Duration::from_millis(200),
            retry_cap: Duration::from_secs(10),
            target_batch_duration: Duration::from_secs(1),
            min_batch_size: 100,
            max_batch_size: 50_000,
            max_failure_ratio: 0.5,
            restart_budget: 3,
            restart_window: Duration::from_secs(60),
        }
    }
}

/// What an operation actor reports as it goes, for progress displays and
/// embedding applications ([`crate::Runtime::subscribe`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The operation.
    pub operation_id: i64,
    /// Its kind.
    pub kind: String,
    /// Its status now.
    pub status: OperationStatus,
    /// Rows changed so far (committed).
    pub rows_done: i64,
    /// Rows in scope when it was enqueued, if counted.
    pub estimated_rows: Option<i64>,
    /// Batches succeeded.
    pub batches: i64,
    /// The current batch size (after adaptation).
    pub batch_size: i64,
    /// `Some(reason)` while throttled or stopped by a health signal.
    pub held_back: Option<String>,
}

/// What every actor of one runtime shares.
#[derive(Clone)]
pub struct RuntimeContext {
    /// The store.
    pub store: Store,
    /// The kinds this node runs.
    pub registry: Registry,
    /// The settings.
    pub config: Arc<RuntimeConfig>,
    /// Health snapshots, published by the monitor.
    pub health: Arc<OutputPort<HealthSnapshot>>,
    /// Progress reports.
    pub progress: broadcast::Sender<Progress>,
    /// The id of each operation that ended here (finished, failed or
    /// cancelled), sent with its last progress report: what
    /// [`crate::Runtime::wait`] listens to, so a waiter is not woken by
    /// every sub-batch's report.
    pub(crate) ended: broadcast::Sender<i64>,
    /// Metrics instruments (from the global meter provider at start).
    pub metrics: Metrics,
    /// The current pool and monitor (replaced when the supervisor restarts one).
    pub(crate) services: Arc<RwLock<Option<Services>>>,
}

/// The node's shared actors, as the supervisor last started them.
#[derive(Clone)]
pub(crate) struct Services {
    pub(crate) pool: RunningPool,
    pub(crate) monitor: ActorRef<HealthMessage>,
}

impl RuntimeContext {
    /// The queue of the sub-batch pool in service now.
    pub(crate) fn pool(&self) -> Option<SubBatchQueue> {
        self.services
            .read()
            .ok()?
            .as_ref()
            .map(|s| s.pool.queue.clone())
    }

    /// The health monitor in service now.
    pub(crate) fn monitor(&self) -> Option<ActorRef<HealthMessage>> {
        self.services
            .read()
            .ok()?
            .as_ref()
            .map(|s| s.monitor.clone())
    }
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "sluice".to_owned())
}
