//! What every actor of one runtime shares ([`RuntimeContext`]: the store,
//! the registry, the settings, the output ports and the services in use
//! now), and the progress reports they publish ([`Progress`]).

use std::sync::{Arc, RwLock};

use ractor::{ActorRef, OutputPort};
use sluice_operations::Registry;
use sluice_store::{OperationStatus, Store};
use sluice_telemetry::Metrics;
use tokio::sync::broadcast;

use crate::config::RuntimeConfig;
use crate::health::{HealthMessage, HealthSnapshot};
use crate::pool::{RunningPool, SubBatchQueue};

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
    /// The targets apart from the store this node opened.
    pub(crate) targets: crate::targets::TargetDirectory,
    /// For an operation on a target apart from the store: that target's
    /// health monitor (its snapshots come on [`RuntimeContext::health`],
    /// then that target's port).
    pub(crate) target_monitor: Option<ActorRef<HealthMessage>>,
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

    /// The health monitor in service now: its target's, for an operation
    /// on a target apart from the store.
    pub(crate) fn monitor(&self) -> Option<ActorRef<HealthMessage>> {
        if let Some(monitor) = &self.target_monitor {
            return Some(monitor.clone());
        }
        self.services
            .read()
            .ok()?
            .as_ref()
            .map(|s| s.monitor.clone())
    }
}
