//! `sluice run`: a worker. It claims runnable operations from the store,
//! runs them with the health monitor live, and shows their progress; with
//! `--until-idle` it exits once no operation is pending or running anywhere
//! (work held by another node's lease counts as not done). Ctrl-C or SIGTERM
//! shut it down gracefully: sub-batches in flight finish, running operations
//! are given back as pending.

use clap::Args;
use sluice_runtime::RuntimeBuilder;
use sluice_store::{ListFilter, OperationStatus, Store};

use crate::failure::Failure;
use crate::progress::ProgressDisplay;

/// Options of `sluice run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Exit once no runnable work is left.
    #[arg(long, help_heading = "Work")]
    until_idle: bool,
    /// Operations run at once by this worker.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1_000), help_heading = "Work")]
    concurrency: u32,
    /// Sub-batches run at once by this worker.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256), help_heading = "Work")]
    pool_size: u32,
    /// Batches of one operation run at once across all workers started so.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64), help_heading = "Work")]
    parallel_batches: u32,
    /// This worker's name in leases and events (default: host and pid).
    #[arg(long, help_heading = "Work")]
    node: Option<String>,
    /// How long after a worker dies its operations are taken over.
    #[arg(long, default_value = "15s", value_parser = crate::parse_lease_ttl, help_heading = "Work")]
    lease_ttl: std::time::Duration,
    /// How often the planner is asked again how a batch query runs.
    #[arg(long, default_value = "30s", value_parser = crate::parse_plan_check_interval, help_heading = "Work")]
    plan_check_interval: std::time::Duration,
    /// A replica whose lag throttles and stops the work (repeatable).
    #[arg(long = "replica", value_name = "URL", help_heading = "Health")]
    replicas: Vec<String>,
    /// A targets file (a name, a URL and any replica=URL a line), whose
    /// URLs' passwords this worker connects to those targets with, and whose
    /// replicas' lag it watches.
    #[arg(long, value_name = "FILE", help_heading = "Work")]
    targets: Option<std::path::PathBuf>,
    /// Run without this built-in health indicator (repeatable).
    #[arg(long = "without-indicator", value_name = "ID", help_heading = "Health")]
    without_indicators: Vec<String>,
    /// A query returning the latency the application sees, in
    /// milliseconds (one row, one number), held to the latency budget
    /// beside the canary's p99 at every health poll, on each database
    /// worked on. One statement; it should only read.
    #[arg(long, value_name = "SQL", help_heading = "Health")]
    latency_query: Option<String>,
    /// Replica lag from which work slows down.
    #[arg(long, default_value = "5s", value_parser = crate::parse_duration, help_heading = "Health")]
    replica_lag_throttle: std::time::Duration,
    /// Replica lag from which no new sub-batch starts.
    #[arg(long, default_value = "30s", value_parser = crate::parse_duration, help_heading = "Health")]
    replica_lag_stop: std::time::Duration,
    /// Also serve the operator console on this address.
    #[arg(long, value_name = "ADDRESS", help_heading = "Console")]
    pub console: Option<std::net::SocketAddr>,
    #[command(flatten, next_help_heading = "Console")]
    console_tokens: crate::serve::Tokens,
    /// The runtime's instruments, collected for the console's `/metrics`
    /// (set by `main` when `--console` is given, before telemetry starts).
    #[arg(skip)]
    pub instruments: Option<sluice_telemetry::PrometheusReader>,
}

/// Runs a worker until idle or until a shutdown signal.
pub async fn run(store: &Store, args: RunArgs) -> Result<(), Failure> {
    let config = sluice_runtime::RuntimeConfig {
        lease_ttl: args.lease_ttl,
        plan_check: Some(sluice_runtime::PlanCheckEvery {
            interval: args.plan_check_interval,
            ..sluice_runtime::PlanCheckEvery::default()
        }),
        ..sluice_runtime::RuntimeConfig::default()
    };
    let mut builder = RuntimeBuilder::with_store(store.clone())
        .config(config)
        .concurrency(args.concurrency as usize)
        .pool_size(args.pool_size as usize)
        .parallel_batches(args.parallel_batches);
    if let Some(node) = &args.node {
        if node.trim().is_empty() {
            return Err(Failure::BadInput("--node must not be empty".into()));
        }
        builder = builder.node(node);
    }
    if args.replica_lag_throttle >= args.replica_lag_stop {
        return Err(Failure::BadInput(format!(
            "--replica-lag-throttle ({:?}) must be below --replica-lag-stop ({:?})",
            args.replica_lag_throttle, args.replica_lag_stop
        )));
    }
    for id in &args.without_indicators {
        builder = builder.without_indicator(id);
    }
    if let Some(query) = &args.latency_query {
        builder = builder.latency_query(query);
    }
    for replica in &args.replicas {
        builder = builder.replica(replica);
    }
    if let Some(path) = &args.targets {
        for target in crate::enqueue::read_targets_file(path)? {
            builder = builder.target_url(&target.url);
            for replica in &target.replicas {
                builder = builder.target_replica(&target.url, replica);
            }
        }
    }
    builder = builder.replica_lag(sluice_runtime::health::Thresholds {
        throttle_at: args.replica_lag_throttle.as_secs_f64(),
        stop_at: args.replica_lag_stop.as_secs_f64(),
        ..sluice_runtime::REPLICA_LAG_THRESHOLDS
    });
    let started_at = chrono::Utc::now().timestamp_millis();
    let console = match args.console {
        Some(address) => {
            Some(crate::serve::start(store, address, args.console_tokens, args.instruments).await?)
        }
        None => None,
    };
    let runtime = builder.start().await.map_err(Failure::from)?;
    let node = runtime.config().node.clone();
    eprintln!("worker {node} started");
    let display = ProgressDisplay::start(runtime.subscribe());
    let outcome = if args.until_idle {
        tokio::select! {
            idle = runtime.run_until_idle() => idle.map(Some),
            _ = shutdown_signal() => Ok(None),
        }
    } else {
        shutdown_signal().await;
        Ok(None)
    };
    let stopped = runtime.shutdown().await;
    display.stop().await;
    if let Some(console) = console {
        console.stop().await?;
    }
    let idle = outcome
        .and_then(|idle| stopped.map(|()| idle))
        .map_err(Failure::from)?;
    eprintln!("worker {node} stopped");
    // Paused work is the operator's to resume, or resumes by itself at a
    // time (`pause --until`, a run window closed); say which.
    for left in idle.iter().flat_map(|idle| &idle.left) {
        if left.status == OperationStatus::Paused {
            match resumes_at(store, left.id, &left.kind).await? {
                Some(at) => eprintln!(
                    "operation {} ({}) is paused with work left until {}: a running worker \
                     resumes it then by itself (`sluice resume {}` to go on sooner)",
                    left.id,
                    left.kind,
                    chrono::DateTime::from_timestamp_millis(at).map_or_else(
                        || at.to_string(),
                        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
                    ),
                    left.id
                ),
                None => eprintln!(
                    "operation {} ({}) is paused with work left: `sluice resume {}` to go on",
                    left.id, left.kind, left.id
                ),
            }
        }
    }
    if args.until_idle {
        failed_here(store, &node, started_at).await?;
    }
    Ok(())
}

/// When operation `id` of `kind` resumes by itself: the earliest timed
/// resume of the operation, its kind or everything.
async fn resumes_at(store: &Store, id: i64, kind: &str) -> Result<Option<i64>, Failure> {
    let mut earliest: Option<i64> = None;
    for target in [
        sluice_store::operation_target(id),
        sluice_store::kind_target(kind),
        "*".to_owned(),
    ] {
        if let Some(resume) = store.timed_resume(&target).await? {
            earliest = Some(earliest.map_or(resume.resume_at, |e| e.min(resume.resume_at)));
        }
    }
    Ok(earliest)
}

/// A runtime failure naming the operations that failed on `node` since
/// `since` (epoch ms): a run that leaves failed work behind does not exit 0.
async fn failed_here(store: &Store, node: &str, since: i64) -> Result<(), Failure> {
    let filter = ListFilter {
        status: Some(OperationStatus::Failed),
        ..ListFilter::default()
    };
    let failed: Vec<String> = store
        .list(&filter)
        .await
        .map_err(Failure::from)?
        .into_iter()
        .filter(|r| {
            r.state.node.as_deref() == Some(node)
                && r.state.finished_at.is_some_and(|at| at >= since)
        })
        .map(|r| {
            let error = r.state.last_error.unwrap_or_default();
            format!("{} ({error})", r.id)
        })
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    Err(Failure::Runtime(anyhow::anyhow!(
        "{} operation(s) failed during this run: {}; see `sluice show <id>`, and `sluice retry <id>` once fixed",
        failed.len(),
        failed.join("; ")
    )))
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
