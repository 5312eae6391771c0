//! `sluice`: the command line for Sluice's batched background operations.
//!
//! Exit codes: 0 on success, 2 on bad input (one line on stderr naming the
//! problem; nothing is changed), 1 on a runtime failure such as an
//! unreachable database.

mod control;
mod demo;
mod enqueue;
mod failure;
mod progress;
mod reference;
mod render;
mod run;
mod schedule;
mod serve;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use sluice_store::{OperationStatus, PACE_WINDOW_MS, RecentPace, Store};
use sluice_target::ConnectOptions;
use sluice_telemetry::export::{LogFormat, Telemetry, TelemetryConfig, TelemetryError};

use crate::failure::Failure;

/// Durable, throttled, batched background operations over database tables.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
struct Cli {
    /// Where Sluice keeps its state: sqlite:PATH, postgres://… or mysql://…
    #[arg(
        long,
        global = true,
        env = "SLUICE_DATABASE_URL",
        default_value = "sqlite:sluice.sqlite",
        help_heading = "Where Sluice's state is"
    )]
    database_url: String,

    /// On PostgreSQL, the schema Sluice's own tables live in (created if absent).
    #[arg(
        long,
        global = true,
        env = "SLUICE_SCHEMA",
        help_heading = "Where Sluice's state is"
    )]
    schema: Option<String>,

    /// The zone a `timestamp`/`DATETIME` without a zone is written in (default UTC).
    #[arg(
        long,
        global = true,
        env = "SLUICE_DB_TIME_ZONE",
        help_heading = "Where Sluice's state is"
    )]
    db_time_zone: Option<String>,

    /// How log lines on stderr are written: text, or json (with trace ids).
    #[arg(long, global = true, env = "SLUICE_LOG_FORMAT", default_value = "text", value_parser = parse_log_format, help_heading = "Where Sluice's state is")]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Fill a demo table with a million rows, delete the aged ones with a
    /// health stop midway, verify, and summarise.
    Demo(demo::DemoArgs),
    /// Check and enqueue an operation.
    #[command(subcommand)]
    Enqueue(enqueue::EnqueueCommand),
    /// Print what enqueuing an operation would do (rows in scope, the batch
    /// query's plan and index, batches, a duration and log volume measured by
    /// a rolled-back probe, advice); changes nothing.
    #[command(subcommand)]
    Plan(enqueue::EnqueueCommand),
    /// Run a worker: claim runnable operations and run them, and fire due schedules.
    Run(run::RunArgs),
    /// Recurring operations: add, list, remove, enable, disable.
    #[command(subcommand)]
    Schedule(schedule::ScheduleCommand),
    /// List operations, oldest first.
    List {
        /// Only operations in this status (pending, running, paused, failed, finished, cancelled).
        #[arg(long, value_parser = parse_status)]
        status: Option<OperationStatus>,
        /// Only operations of this kind.
        #[arg(long)]
        kind: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one operation: status, progress, cursor, sizes, errors.
    Show {
        /// The operation's id.
        id: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one operation's event log.
    Events {
        /// The operation's id.
        id: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Pause operations: no new sub-batch starts until they are resumed.
    /// With --kind or --all also a kill switch kept in the database: no
    /// worker starts an operation of the kind and its scheduled fires are refused.
    Pause(control::PauseArgs),
    /// Resume paused operations (with --kind or --all, lifting the kill switch).
    Resume(control::ControlArgs),
    /// Cancel operations for good.
    Cancel(control::ControlArgs),
    /// Retry failed operations from their persisted cursor and failed batches.
    Retry(control::ControlArgs),
    /// Put back what an operation run with --undo changed: enqueues a revert
    /// operation, which `sluice run` runs in batches, paced, exactly once.
    /// Rows changed again since are left alone and listed by `sluice show`.
    Revert(RevertArgs),
    /// Limit the rows a second of one operation, a kind or everything, all
    /// workers together (a token bucket in the database), or the foreground
    /// latency it may cost (--latency-budget).
    Limit(control::LimitArgs),
    /// Delete the batch records of operations finished or cancelled long ago (event logs are kept).
    Prune(PruneArgs),
    /// Serve the operator console's HTTP API (`/api`, `/metrics`, `/healthz`, `/readyz`).
    Serve(serve::ServeArgs),
    /// Print a shell completion script (needs no database).
    Completions(reference::CompletionsArgs),
    /// Print a manual page, of sluice or a subcommand, as roff: `sluice man enqueue | man -l -`.
    Man(reference::ManArgs),
}

#[derive(Debug, Args)]
struct RevertArgs {
    /// The operation to revert (finished or cancelled, run with --undo).
    id: i64,
    /// Put back rows changed again since the operation too, overwriting
    /// those changes.
    #[arg(long)]
    force: bool,
    /// Rows per batch (by default the reverted operation's).
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=10_000_000))]
    batch_size: Option<i64>,
    /// Rows per sub-batch (by default the reverted operation's).
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=1_000_000))]
    sub_batch_size: Option<i64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct PruneArgs {
    /// Prune operations that ended more than this long ago (e.g. 7d, 12h).
    #[arg(long, default_value = "7d", value_parser = parse_duration, allow_hyphen_values = true)]
    older_than: std::time::Duration,
    /// Rows deleted per statement.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(i64).range(1..))]
    chunk: i64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => return usage_error(&e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return Failure::Runtime(e.into()).report(),
    };
    match runtime.block_on(with_telemetry(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}

/// Installs logging (and, when the `OTEL_*` variables ask for it, OTLP
/// export of spans and metrics), runs the command, then exports what is
/// still buffered.
async fn with_telemetry(mut cli: Cli) -> Result<(), Failure> {
    // A worker serving the console collects its instruments for `/metrics`.
    let pull = match &mut cli.command {
        Command::Run(args) if args.console.is_some() => {
            let reader = sluice_telemetry::PrometheusReader::new();
            args.instruments = Some(reader.clone());
            Some(reader)
        }
        _ => None,
    };
    let config = TelemetryConfig {
        log_format: cli.log_format,
        pull,
        ..TelemetryConfig::default()
    };
    let telemetry = Telemetry::install(config).map_err(|e| match e {
        TelemetryError::Exporter(e) => Failure::BadInput(format!("OpenTelemetry export: {e}")),
        other => Failure::Runtime(other.into()),
    })?;
    let outcome = run(cli).await;
    if telemetry.is_exporting() {
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    }
    outcome
}

async fn run(cli: Cli) -> Result<(), Failure> {
    // What needs no database is answered without connecting to one.
    match &cli.command {
        Command::Completions(args) => return reference::completions(args),
        Command::Man(args) => return reference::man(args),
        _ => {}
    }
    let options = ConnectOptions {
        acquire_timeout: std::time::Duration::from_secs(5),
        max_connections: 16,
        // Workers (`run`, `demo`) send one-statement sub-batches on sessions
        // bounded by the sub-batch timeout (opened only when first used).
        sub_batch_timeout: Some(sluice_runtime::RuntimeConfig::default().sub_batch_timeout),
        schema: cli.schema.clone(),
        time_zone: cli.db_time_zone.clone(),
        ..ConnectOptions::default()
    };
    let store = Store::connect_with(&cli.database_url, &options)
        .await
        .map_err(|e| match e {
            e if e.is_transient() => Failure::Runtime(anyhow::anyhow!(
                "cannot reach the database at {}: {e}",
                sluice_target::redact_url(&cli.database_url)
            )),
            other => other.into(),
        })?;
    let outcome = dispatch(&store, cli.command).await;
    store.close().await;
    outcome
}

async fn dispatch(store: &Store, command: Command) -> Result<(), Failure> {
    match command {
        Command::Demo(args) => demo::run(store, args).await,
        Command::Enqueue(command) => enqueue::run(store, command, false).await,
        Command::Plan(command) => enqueue::run(store, command, true).await,
        Command::Run(args) => run::run(store, args).await,
        Command::Schedule(command) => schedule::run(store, command).await,
        Command::List {
            status,
            kind,
            limit,
            json,
        } => {
            let filter = sluice_store::ListFilter {
                status,
                kind,
                limit: Some(limit),
                ..Default::default()
            };
            let mut records = store.list(&filter).await?;
            let mut paces = Vec::with_capacity(records.len());
            for record in &mut records {
                record.state.rows_done += uncounted_rows(store, record).await?;
                // Only an operation with work ahead has a pace worth reading
                // its log for.
                paces.push(if record.state.status.is_active() {
                    Some(recent_pace(store, record).await?)
                } else {
                    None
                });
            }
            let binding = store.binding_rate_limits().await?;
            let canaries = store.canaries().await?;
            render::list(&records, &paces, &binding, &canaries, json)
        }
        Command::Show { id, json } => {
            let record = committed(store, id).await?;
            let pace = recent_pace(store, &record).await?;
            let target = sluice_store::operation_target(id);
            let kind = &record.state.kind;
            let fleet = record.state.fleet.as_deref();
            let binding = store.binding_rate_limits().await?;
            let held = render::Held {
                resume_at: store.timed_resume(&target).await?.map(|r| r.resume_at),
                window: store
                    .window_for(id, kind)
                    .await?
                    .map(|w| format!("{} {}", w.run_window, w.time_zone)),
                rate_limits: store.rate_limits_for(id, kind, fleet).await?,
                binding_limit: sluice_store::binding_limit(&binding, id, kind, fleet).cloned(),
                latency_budget: sluice_store::budget_and_target(
                    &store.latency_budgets().await?,
                    id,
                    kind,
                ),
                canary: store
                    .canaries()
                    .await?
                    .into_iter()
                    .find(|c| c.is_of(&paced_by(&record.state), &record.state)),
                undo: sluice_operations::builtin::undo_summary(
                    store,
                    &record.state.kind,
                    &record.state.arguments,
                )
                .await?,
                fleet: match &record.state.fleet {
                    Some(fleet) => {
                        let mut members = Vec::new();
                        for member in store.fleet(fleet).await? {
                            let pace = match member.state.status.is_active() {
                                true => Some(recent_pace(store, &member).await?.rows_per_second),
                                false => None,
                            };
                            let limit =
                                sluice_store::binding_limit(&binding, member.id, kind, Some(fleet));
                            let binds = render::Binding::of(&member, limit.cloned());
                            members.push((member, pace, binds));
                        }
                        members
                    }
                    None => Vec::new(),
                },
            };
            render::show(&record, &pace, held, json)
        }
        Command::Events { id, json } => {
            store.operation(id).await?;
            render::events(&store.events(id, 0).await?, json)
        }
        Command::Pause(args) => control::pause(store, &args).await,
        Command::Resume(args) => control::apply(store, control::Action::Resume, &args).await,
        Command::Cancel(args) => control::apply(store, control::Action::Cancel, &args).await,
        Command::Retry(args) => control::apply(store, control::Action::Retry, &args).await,
        Command::Revert(args) => revert(store, &args).await,
        Command::Limit(args) => control::limit(store, &args).await,
        Command::Serve(args) => serve::run(store, args).await,
        Command::Completions(_) | Command::Man(_) => unreachable!("answered before connecting"),
        Command::Prune(args) => {
            let deleted = store.prune(args.older_than, args.chunk).await?;
            let undo =
                sluice_operations::builtin::prune_undo(store, args.older_than, chrono::Utc::now())
                    .await?;
            render::pruned(deleted, &undo, args.older_than, args.json)
        }
    }
}

/// `sluice revert`: enqueues the revert, sized as the operation reverted
/// was unless told otherwise, and prints its id.
async fn revert(store: &Store, args: &RevertArgs) -> Result<(), Failure> {
    let registry = sluice_operations::Registry::with_builtins();
    let options = match store.operation(args.id).await {
        Ok(original) => sluice_operations::builtin::revert_options(
            &original,
            args.batch_size,
            args.sub_batch_size,
        ),
        // `revert` says what is wrong with the id.
        Err(_) => sluice_operations::EnqueueOptions::default(),
    };
    let enqueued =
        sluice_operations::builtin::revert(store, &registry, args.id, args.force, &options).await?;
    let record = store.operation(enqueued.id).await?;
    if args.json {
        let value = serde_json::json!({
            "id": enqueued.id,
            "created": enqueued.created,
            "reverts": args.id,
            "status": record.state.status.as_str(),
            "estimated_rows": record.state.estimated_rows,
        });
        println!("{value}");
        return Ok(());
    }
    render::enqueued(&record, enqueued.created, &[]);
    Ok(())
}

/// A command-line usage error as one line on stderr, exit code 2.
fn usage_error(error: &clap::Error) -> ExitCode {
    let text = error.to_string();
    let mut lines = text.lines().skip_while(|l| l.trim().is_empty());
    let first = lines.next().unwrap_or("invalid arguments");
    let first = first.trim_start_matches("error: ");
    // What clap lists under its first line (the arguments missing, the
    // companion an option needs), on the same line.
    let listed: Vec<&str> = lines
        .take_while(|l| l.starts_with(char::is_whitespace) && !l.trim().is_empty())
        .map(str::trim)
        .collect();
    if listed.is_empty() {
        eprintln!("error: {first} (see --help)");
    } else {
        eprintln!("error: {first} {} (see --help)", listed.join(", "));
    }
    ExitCode::from(2)
}

/// Logs to stderr at `warn` unless `RUST_LOG` says otherwise; ractor's actor
/// spans and sqlx's slow-statement notices (batches are meant to take a
/// while) stay quiet.
fn parse_log_format(name: &str) -> Result<LogFormat, String> {
    match name {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(format!(
            "unknown log format `{other}` (expected text or json)"
        )),
    }
}

fn parse_status(name: &str) -> Result<OperationStatus, String> {
    OperationStatus::parse(name).ok_or_else(|| {
        let names: Vec<&str> = OperationStatus::ALL.iter().map(|s| s.as_str()).collect();
        format!(
            "unknown status `{name}` (expected one of: {})",
            names.join(", ")
        )
    })
}

/// Operation `id` with `rows_done` counting every committed sub-batch (as
/// `list` counts them too): the
/// stored count grows when a batch succeeds, so the rows its unfinished
/// batches (open, paused, cancelled or failed part-way) already committed
/// are added here.
async fn committed(
    store: &sluice_store::Store,
    id: i64,
) -> Result<sluice_store::OperationRecord, sluice_store::StoreError> {
    let mut record = store.operation(id).await?;
    record.state.rows_done += uncounted_rows(store, &record).await?;
    Ok(record)
}

/// The rows `record`'s unfinished batches committed, which its stored
/// `rows_done` does not count yet (none for a finished operation, whose
/// batches all succeeded).
async fn uncounted_rows(
    store: &sluice_store::Store,
    record: &sluice_store::OperationRecord,
) -> Result<i64, sluice_store::StoreError> {
    if record.state.status == sluice_store::OperationStatus::Finished
        || record.state.batches_planned == 0
    {
        return Ok(0);
    }
    Ok(store
        .batches(record.id)
        .await?
        .iter()
        .filter(|b| b.status != sluice_store::BatchStatus::Succeeded)
        .map(|b| b.rows_affected)
        .sum())
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    sluice_operations::parse_duration(text).map_err(|e| e.to_string())
}

/// A duration no longer than `max` (written as `max_text` in the message).
fn bounded_duration(
    text: &str,
    max: std::time::Duration,
    max_text: &str,
) -> Result<std::time::Duration, String> {
    let duration = parse_duration(text)?;
    if duration > max {
        return Err(format!(
            "`{}` is longer than the most accepted, {max_text}",
            text.trim()
        ));
    }
    Ok(duration)
}

/// The pace of `record` over the last hour of its log, with an ETA while it
/// has work ahead.
async fn recent_pace(
    store: &Store,
    record: &sluice_store::OperationRecord,
) -> Result<RecentPace, Failure> {
    let state = &record.state;
    let left = state
        .estimated_rows
        .filter(|_| state.status.is_active())
        .map(|total| (total - state.rows_done).max(0));
    let now = chrono::Utc::now().timestamp_millis();
    let events = store.events(record.id, 0).await?;
    Ok(RecentPace::read(&events, left, now, PACE_WINDOW_MS))
}

/// A rate in rows a second: `5000` or `5000/s`, at least 1.
fn parse_rate(text: &str) -> Result<i64, String> {
    let number = text.trim().trim_end_matches("/s");
    match number.parse::<i64>() {
        Ok(rate) if rate >= 1 => Ok(rate),
        _ => Err(format!(
            "`{}` is not a rate: give rows a second, at least 1 (e.g. 5000/s)",
            text.trim()
        )),
    }
}

/// How often a plan is looked at again: from a second to an hour.
fn parse_plan_check_interval(text: &str) -> Result<std::time::Duration, String> {
    let interval = bounded_duration(text, std::time::Duration::from_secs(3_600), "1h")?;
    if interval < std::time::Duration::from_secs(1) {
        return Err(format!(
            "`{}` is shorter than the least accepted, 1s",
            text.trim()
        ));
    }
    Ok(interval)
}

/// A pause between sub-batches: at most an hour.
fn parse_pause(text: &str) -> Result<std::time::Duration, String> {
    let max = sluice_store::OperationSpec::MAX_PAUSE_MS as u64;
    bounded_duration(text, std::time::Duration::from_millis(max), "1h")
}

/// A run's time limit: at most thirty days.
fn parse_max_runtime(text: &str) -> Result<std::time::Duration, String> {
    let max = sluice_store::OperationSpec::MAX_RUNTIME_MS as u64;
    bounded_duration(text, std::time::Duration::from_millis(max), "30d")
}

/// A schedule's jitter: at most a day.
fn parse_jitter(text: &str) -> Result<std::time::Duration, String> {
    bounded_duration(text, std::time::Duration::from_secs(86_400), "1d")
}

/// A lease's time to live: from 300ms (it is renewed every third of it) to an hour.
fn parse_lease_ttl(text: &str) -> Result<std::time::Duration, String> {
    let ttl = bounded_duration(text, std::time::Duration::from_secs(3_600), "1h")?;
    if ttl < std::time::Duration::from_millis(300) {
        return Err(format!(
            "`{}` is shorter than the least accepted, 300ms (a lease is renewed every third of it)",
            text.trim()
        ));
    }
    Ok(ttl)
}

/// An age for `delete-aged-rows`: at most 100 years (36500d).
fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    bounded_duration(
        text,
        std::time::Duration::from_secs(36_500 * 86_400),
        "36500d",
    )
}

/// The table whose canary paces the operation in `state` (a revert's: the
/// live table it writes).
fn paced_by(state: &sluice_store::Projection) -> String {
    sluice_operations::Registry::with_builtins().paced_by(
        &state.kind,
        &state.arguments,
        &state.table,
    )
}
