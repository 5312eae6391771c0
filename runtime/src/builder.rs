//! [`RuntimeBuilder`]: what a runtime runs (its store, operations, health
//! indicators, replicas, configuration) and starting it.

use std::sync::{Arc, RwLock};

use ractor::{Actor, OutputPort};
use sluice_operations::{Operation, Registry};
use sluice_store::{Store, StoreError};
use sluice_target::ConnectOptions;
use tokio::sync::broadcast;

use crate::config::RuntimeConfig;
use crate::context::RuntimeContext;
use crate::health::{HealthIndicator, Thresholds};
use crate::indicators::indicators_with_query;
use crate::latency;
use crate::replicas::{REPLICA_LAG_THRESHOLDS, ReplicaLag};
use crate::runtime::{Runtime, RuntimeError};
use crate::supervisor::{RuntimeSupervisor, SupervisorArgs};
use sluice_target::dialect::health::LatencyQuery;

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
    /// URLs of targets apart from the store, with their passwords and
    /// replicas ([`RuntimeBuilder::target_url`]).
    target_urls: Vec<crate::targets::GivenTarget>,
    /// The operator's latency query ([`RuntimeBuilder::latency_query`]).
    latency_query: Option<String>,
}

enum Source {
    Url(String),
    Store(Store),
}

impl RuntimeBuilder {
    /// A runtime on the database at `url` (`sqlite:PATH`, `postgres://…`),
    /// with the built-in operation kinds and health indicators.
    pub fn new(url: &str) -> Self {
        RuntimeBuilder::from_source(Source::Url(url.to_owned()))
    }

    /// The URL, password included, to reach a target apart from the store
    /// with: an operation whose stored target (its URL without a password)
    /// is this URL's connects with it, instead of the password this
    /// process's environment gives. Never stored or shown.
    pub fn target_url(mut self, url: &str) -> Self {
        self.target_urls.push(crate::targets::GivenTarget {
            url: url.to_owned(),
            replicas: Vec::new(),
        });
        self
    }

    /// A replica of a target apart from the store (the target given by its
    /// URL, with or without its password): its lag is watched on this node
    /// as the store's replicas' are ([`RuntimeBuilder::replica`], with
    /// [`RuntimeBuilder::replica_lag`]'s thresholds), stopping the
    /// operations on that target alone.
    pub fn target_replica(mut self, target: &str, replica: &str) -> Self {
        let shown = sluice_target::url_without_password(target);
        match self
            .target_urls
            .iter_mut()
            .find(|given| sluice_target::url_without_password(&given.url) == shown)
        {
            Some(given) => given.replicas.push(replica.to_owned()),
            None => self.target_urls.push(crate::targets::GivenTarget {
                url: target.to_owned(),
                replicas: vec![replica.to_owned()],
            }),
        }
        self
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
            target_urls: Vec::new(),
            latency_query: None,
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

    /// An operator's query returning the latency their application sees, in
    /// milliseconds (`sluice run --latency-query SQL`): run at every health
    /// poll on each database an operation works on, it is held to the
    /// latency budget beside the canary's p99 (the higher binds). One
    /// statement; it should only read. A query that does not return a
    /// number at start refuses the start; one that fails later makes the
    /// health unknown (a throttle, then a stop), never normal. Needs the
    /// latency budget's indicator (not left out).
    pub fn latency_query(mut self, sql: impl Into<String>) -> Self {
        self.latency_query = Some(sql.into());
        self
    }

    /// Connects (creating and migrating an SQLite file if needed), starts
    /// the actor tree and returns its handle.
    pub async fn start(self) -> Result<Runtime, RuntimeError> {
        let store = match self.source {
            Source::Store(store) => {
                refuse_url_settings(&self.connect)?;
                store
            }
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
        let latency_query = match &self.latency_query {
            Some(sql) => {
                let budgeted =
                    self.builtin_indicators && !self.without.iter().any(|id| id == latency::ID);
                if !budgeted {
                    return Err(RuntimeError::LatencyQuery(format!(
                        "the latency budget it feeds is off here (indicator `{}` left out)",
                        latency::ID
                    )));
                }
                Some(LatencyQuery::parse(sql).map_err(RuntimeError::LatencyQuery)?)
            }
            None => None,
        };
        let mut indicators = if self.builtin_indicators {
            builtin_indicators(&store, &self.without, latency_query.clone()).await?
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
        let targets = crate::targets::TargetDirectory::new(
            ConnectOptions {
                max_connections: (self.config.pool_size + 4) as u32,
                sub_batch_timeout: Some(self.config.sub_batch_timeout),
                one_pool: true,
                ..ConnectOptions::default()
            },
            self.target_urls,
            crate::targets::TargetHealth {
                builtin: self.builtin_indicators,
                without: self.without.clone(),
                interval: self.config.health_interval,
                clear_after: self.config.health_clear_after,
                replica_lag: self.replica_lag,
                latency_query,
            },
        );
        let context = RuntimeContext {
            store,
            registry: self.registry,
            config: Arc::new(self.config),
            health: Arc::new(OutputPort::default()),
            progress,
            ended,
            metrics: sluice_telemetry::Metrics::new(),
            services: Arc::new(RwLock::new(None)),
            targets,
            target_monitor: None,
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
    latency_query: Option<LatencyQuery>,
) -> Result<Vec<Arc<dyn HealthIndicator>>, RuntimeError> {
    let mut indicators = indicators_with_query(store, latency_query);
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

/// Refuses settings that only a runtime built from a URL applies, on a
/// runtime given a store: they would be ignored silently.
fn refuse_url_settings(connect: &ConnectOptions) -> Result<(), StoreError> {
    if let Some(schema) = &connect.schema {
        return Err(StoreError::bad_setting(format!(
            "schema `{schema}` is set when a runtime opens its own store (RuntimeBuilder::new); \
             a store on your pool keeps its tables in the sessions' current schema: put \
             `{schema}` first on the pool's search_path"
        )));
    }
    if let Some(zone) = &connect.time_zone {
        return Err(StoreError::bad_setting(format!(
            "time zone `{zone}` is set when a runtime opens its own store (RuntimeBuilder::new); \
             open the store with Store::connect_with and ConnectOptions::time_zone"
        )));
    }
    Ok(())
}
