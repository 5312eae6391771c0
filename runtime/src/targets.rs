//! The databases apart from the store that this node's operations work on
//! (`enqueue --target`), each opened once, with a health monitor of its
//! own, and shared by the operations on it: [`TargetDirectory`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef, ActorStatus, OutputPort};
use sluice_operations::OperationError;
use sluice_store::Store;
use sluice_target::ConnectOptions;
use tokio::sync::Mutex;

use crate::health::{HealthMessage, HealthMonitor, HealthMonitorArgs, HealthSnapshot};

/// The handles ([`Store::on_target`]) this node opened on targets apart
/// from its store, by stored URL (without a password). A target is opened
/// when the first operation on it starts here, with the password of the
/// URL this node was given for it (`run --targets FILE`,
/// [`crate::RuntimeBuilder::target_url`]), else the one its environment
/// gives ([`sluice_target::with_password_from_env`]; PostgreSQL's
/// `PGPASSWORD` and `.pgpass`), and kept while operations here use it
/// ([`TargetUse`]): [`IDLE_GRACE`] after the last one ends it is closed,
/// its connections given back to the server (a fleet's workers would
/// otherwise each hold connections to every target they ever worked on).
/// Each has its own [`HealthMonitor`] reading the target's built-in
/// indicators (the store's monitor reads the store's database), started
/// with it and again if it stopped, and stopped when it is closed or with
/// the runtime ([`TargetDirectory::stop`]).
#[derive(Clone)]
pub(crate) struct TargetDirectory {
    opened: Arc<Mutex<HashMap<String, Opened>>>,
    options: ConnectOptions,
    /// Given URLs, passwords included, and replicas, by the URL without a
    /// password.
    given: Arc<HashMap<String, GivenTarget>>,
    health: TargetHealth,
}

/// What a worker was given for a target apart from the store (`run
/// --targets FILE`): its URL with its password, and its replicas.
#[derive(Debug, Clone, Default)]
pub(crate) struct GivenTarget {
    pub(crate) url: String,
    pub(crate) replicas: Vec<String>,
}

/// How the targets' monitors run: the runtime's settings.
#[derive(Clone)]
pub(crate) struct TargetHealth {
    /// Whether the built-in indicators run at all.
    pub(crate) builtin: bool,
    /// Built-in indicators left out, by id.
    pub(crate) without: Vec<String>,
    /// Time between polls.
    pub(crate) interval: Duration,
    /// Polls a better signal must be seen in a row before it holds.
    pub(crate) clear_after: u32,
    /// The replica lag a target's replicas are held to.
    pub(crate) replica_lag: crate::health::Thresholds,
    /// The operator's latency query, run on each target too.
    pub(crate) latency_query: Option<sluice_target::dialect::health::LatencyQuery>,
}

/// How long a target no operation here uses stays open, for the next
/// one (a fleet's next batch, a paused operation resumed).
pub(crate) const IDLE_GRACE: Duration = Duration::from_secs(10);

/// A target this node opened, and how many operations here use it.
struct Opened {
    handle: TargetHandle,
    users: usize,
}

/// One operation's use of a target this node opened ([`TargetDirectory::
/// handle_for`]): the target stays open while any is held, and is closed
/// [`IDLE_GRACE`] after the last is dropped unless another operation on it
/// started meanwhile.
pub(crate) struct TargetUse {
    directory: TargetDirectory,
    url: String,
}

impl Drop for TargetUse {
    fn drop(&mut self) {
        let (directory, url) = (self.directory.clone(), std::mem::take(&mut self.url));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { directory.release(&url).await });
        }
    }
}

/// One target as this node opened it: the store's handle on it, and its
/// health monitor with the port it publishes on.
#[derive(Clone)]
pub(crate) struct TargetHandle {
    pub(crate) store: Store,
    pub(crate) port: Arc<OutputPort<HealthSnapshot>>,
    pub(crate) monitor: ActorRef<HealthMessage>,
}

impl TargetDirectory {
    /// A directory opening targets with `options` (the runtime's pool
    /// size and sub-batch timeout), the URLs it was `given`, and its
    /// monitors run as `health` says.
    pub(crate) fn new(
        options: ConnectOptions,
        given: Vec<GivenTarget>,
        health: TargetHealth,
    ) -> Self {
        let given = given
            .into_iter()
            .map(|target| (sluice_target::url_without_password(&target.url), target))
            .collect();
        TargetDirectory {
            opened: Arc::default(),
            options,
            given: Arc::new(given),
            health,
        }
    }

    /// The handle on `store` for the target stored as `url`, opened now
    /// if this node has none open (its monitor started again if it
    /// stopped), and the caller's use of it, to hold while it works on the
    /// target. Errors: the target cannot be reached or prepared (named
    /// without a password).
    pub(crate) async fn handle_for(
        &self,
        store: &Store,
        url: &str,
    ) -> Result<(TargetHandle, TargetUse), OperationError> {
        let mut opened = self.opened.lock().await;
        let handle = match opened.get_mut(url) {
            Some(open) => {
                if open.handle.monitor.get_status() != ActorStatus::Running {
                    let handle = &open.handle;
                    open.handle.monitor =
                        self.start_monitor(url, &handle.store, &handle.port).await?;
                }
                open.users += 1;
                open.handle.clone()
            }
            None => {
                let with_password = self.given.get(url).map_or(url, |given| given.url.as_str());
                let apart =
                    sluice_operations::on_target(store, with_password, &self.options).await?;
                let port = Arc::new(OutputPort::default());
                let monitor = self.start_monitor(url, &apart, &port).await?;
                let handle = TargetHandle {
                    store: apart,
                    port,
                    monitor,
                };
                let open = Opened {
                    handle: handle.clone(),
                    users: 1,
                };
                opened.insert(url.to_owned(), open);
                handle
            }
        };
        let used = TargetUse {
            directory: self.clone(),
            url: url.to_owned(),
        };
        Ok((handle, used))
    }

    /// One use of the target stored as `url` ended: when it was the last,
    /// the target is closed [`IDLE_GRACE`] later if no use began since.
    async fn release(&self, url: &str) {
        {
            let mut opened = self.opened.lock().await;
            let Some(open) = opened.get_mut(url) else {
                return;
            };
            open.users = open.users.saturating_sub(1);
            if open.users > 0 {
                return;
            }
        }
        tokio::time::sleep(IDLE_GRACE).await;
        let idle = {
            let mut opened = self.opened.lock().await;
            match opened.get(url) {
                Some(open) if open.users == 0 => opened.remove(url),
                _ => None,
            }
        };
        if let Some(idle) = idle {
            idle.handle.monitor.stop(None);
            idle.handle.store.target().close().await;
            tracing::debug!(target_url = %url, "closed a target no operation here uses");
        }
    }

    /// Stops every target's monitor (the runtime shuts down).
    pub(crate) async fn stop(&self) {
        for open in self.opened.lock().await.values() {
            open.handle.monitor.stop(None);
        }
    }

    /// A monitor of `apart`'s target (stored as `url`) publishing on
    /// `port`: the target's built-in indicators as the runtime runs its own
    /// (its latency canary included, timing a write on the target), none
    /// when they are off; and the lag of the replicas this node was
    /// given for it, measured by a heartbeat written on the target. A
    /// replica that cannot be reached is the target's error.
    async fn start_monitor(
        &self,
        url: &str,
        apart: &Store,
        port: &Arc<OutputPort<HealthSnapshot>>,
    ) -> Result<ActorRef<HealthMessage>, OperationError> {
        let mut indicators: Vec<Arc<dyn crate::health::HealthIndicator>> = match self.health.builtin
        {
            true => {
                crate::indicators::indicators_with_query(apart, self.health.latency_query.clone())
                    .into_iter()
                    .filter(|i| !self.health.without.iter().any(|id| id == i.id()))
                    .collect()
            }
            false => Vec::new(),
        };
        if let Some(given) = self.given.get(url).filter(|g| !g.replicas.is_empty()) {
            let lag = crate::replicas::ReplicaLag::connect(
                apart,
                &given.replicas,
                self.health.replica_lag,
            )
            .await
            .map_err(|e| OperationError::OnTarget {
                target: url.to_owned(),
                source: sluice_store::StoreError::bad_setting(e.to_string()),
            })?;
            indicators.push(Arc::new(lag));
        }
        let args = HealthMonitorArgs {
            store: apart.clone(),
            indicators,
            interval: self.health.interval,
            clear_after: self.health.clear_after,
            port: Arc::clone(port),
        };
        let (monitor, _) = Actor::spawn(None, HealthMonitor, args)
            .await
            .map_err(|e| OperationError::Failed(format!("a target's health monitor: {e}")))?;
        Ok(monitor)
    }
}
