//! The runtime's settings: what an embedding application or `sluice run`
//! can set, with defaults for an embedded SQLite runtime.

use std::time::Duration;

use crate::operation::PlanCheckEvery;

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
    /// On PostgreSQL, listen for announced operator controls (`LISTEN`), so
    /// a pause or cancel written anywhere is acted on when it commits; the
    /// control poll stays as the fallback. Off, only the poll notices.
    pub announced_controls: bool,
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
    /// How often an operation's owner asks the planner again how it runs
    /// the batch query, failing the operation if it turned into a full
    /// scan of the target (`None`: never).
    pub plan_check: Option<PlanCheckEvery>,
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
            announced_controls: true,
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
            plan_check: Some(PlanCheckEvery::default()),
        }
    }
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "sluice".to_owned())
}
