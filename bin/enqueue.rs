//! `sluice enqueue <kind> …`: the built-in operations from the command line.
//! Every check (names, catalogue, plan, sizes) runs before anything is
//! written; a refusal is bad input (exit 2) and changes nothing.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;
use sluice_operations::{
    EnqueueOptions, NamedTarget, Registry,
    builtin::{UpdateInBatchesArguments, enqueue_kind},
    plan,
    window::WindowOption,
};
use sluice_store::{LatencyBudget, Limits, OperationRecord, Store, operation_target};

use crate::failure::Failure;
use crate::render;

/// The kinds `sluice enqueue` knows.
#[derive(Debug, Subcommand)]
pub enum EnqueueCommand {
    /// Delete rows whose timestamp column is older than a duration, LIMIT n at
    /// a time until fewer than n match.
    DeleteAgedRows {
        /// The table.
        #[arg(long)]
        table: String,
        /// The timestamp column (timestamp/timestamptz, ISO-8601 text, or integer epoch seconds).
        #[arg(long)]
        column: String,
        /// Delete rows older than this (e.g. 90d, 12h, 30m).
        #[arg(long, value_parser = duration_as_typed, allow_hyphen_values = true)]
        older_than: String,
        /// On a table partitioned by ranges of the column (PostgreSQL, MySQL), delete
        /// the rows of partitions wholly older than the cutoff one by one
        /// too, instead of dropping those partitions.
        #[arg(long)]
        no_drop_partitions: bool,
        /// Move the aged rows into an undo table beside the table instead of
        /// deleting them, so `sluice revert <id>` can move them back (no
        /// partition is dropped).
        #[arg(long)]
        undo: bool,
        /// With --undo: how long after the operation ends `sluice prune`
        /// keeps its undo table (e.g. 7d; by default prune's --older-than).
        #[arg(long, requires = "undo", value_parser = duration_as_typed, allow_hyphen_values = true)]
        keep_undo: Option<String>,
        #[command(flatten)]
        common: CommonOptions,
    },
    /// Run an UPDATE's SET over the rows matching a WHERE, in ranges of a unique key.
    UpdateInBatches {
        /// The table.
        #[arg(long)]
        table: String,
        /// The SET list, e.g. "counter = counter + 1" (your own SQL).
        #[arg(long)]
        set: String,
        /// The condition, e.g. "status = 'stale'" (your own SQL; every row when omitted).
        #[arg(long = "where")]
        condition: Option<String>,
        /// Keep each changed row's values before and after the change in an
        /// undo table beside the table, so `sluice revert <id>` can put them back.
        #[arg(long)]
        undo: bool,
        /// With --undo: how long after the operation ends `sluice prune`
        /// keeps its undo table (e.g. 7d; by default prune's --older-than).
        #[arg(long, requires = "undo", value_parser = duration_as_typed, allow_hyphen_values = true)]
        keep_undo: Option<String>,
        #[command(flatten)]
        common: CommonOptions,
    },
    /// Move the rows matching a WHERE into an archive table (created with
    /// the same columns if absent), in ranges of a unique key: each
    /// sub-batch copies and deletes its rows in one transaction, so every
    /// row ends in exactly one of the two tables.
    ArchiveRows {
        /// The table rows are moved out of.
        #[arg(long)]
        table: String,
        /// The archive table they are moved into.
        #[arg(long)]
        into: String,
        /// The condition, e.g. "status = 'closed'" (your own SQL; every row
        /// when omitted and no time scope is given).
        #[arg(long = "where")]
        condition: Option<String>,
        /// A time scope, as delete-aged-rows takes: the time column…
        #[arg(long, requires = "older_than")]
        column: Option<String>,
        /// …and rows older than this are moved (e.g. 90d), measured at each
        /// enqueue (each fire, for a schedule).
        #[arg(long, requires = "column", value_parser = duration_as_typed, allow_hyphen_values = true)]
        older_than: Option<String>,
        /// Keep the keys of the rows moved in an undo table, so `sluice
        /// revert <id>` can move exactly them back.
        #[arg(long)]
        undo: bool,
        /// With --undo: how long after the operation ends `sluice prune`
        /// keeps its undo table (e.g. 7d; by default prune's --older-than).
        #[arg(long, requires = "undo", value_parser = duration_as_typed, allow_hyphen_values = true)]
        keep_undo: Option<String>,
        #[command(flatten)]
        common: CommonOptions,
    },
}

/// Options every kind takes.
#[derive(Debug, Args)]
pub struct CommonOptions {
    /// The unique, indexed column naming rows, or several: a,b.
    #[arg(long, default_value = "id", help_heading = "Batching")]
    key: String,
    /// Rows per batch (adapted toward the target batch duration as it runs).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(i64).range(1..=10_000_000), allow_hyphen_values = true, help_heading = "Batching")]
    batch_size: i64,
    /// Rows per sub-batch (one transaction each).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=1_000_000), allow_hyphen_values = true, help_heading = "Batching")]
    sub_batch_size: i64,
    /// Sleep between sub-batches (e.g. 50ms).
    #[arg(long, default_value = "0ms", value_parser = crate::parse_pause, allow_hyphen_values = true, help_heading = "Pace and limits")]
    pause: Duration,
    /// Stop each run after this long and continue later (e.g. 30m).
    #[arg(long, value_parser = crate::parse_max_runtime, allow_hyphen_values = true, help_heading = "Pace and limits")]
    max_runtime: Option<Duration>,
    /// Stop each run after this many rows and continue later (no helpers).
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..), allow_hyphen_values = true, help_heading = "Pace and limits")]
    max_rows: Option<i64>,
    /// Higher runs earlier.
    #[arg(
        long,
        default_value_t = 0,
        allow_hyphen_values = true,
        help_heading = "Pace and limits"
    )]
    priority: i32,
    /// Accept it even though its batch query would scan the whole table.
    #[arg(long, help_heading = "Batching")]
    force: bool,
    /// Work only in these daily hours (e.g. 00:00-06:00, 22:00-04:00).
    #[arg(long, value_name = "HH:MM-HH:MM", help_heading = "When")]
    window: Option<String>,
    /// At most this many rows a second, all workers together (e.g. 5000/s);
    /// over several targets, all of them together.
    #[arg(long, value_parser = crate::parse_rate, allow_hyphen_values = true, help_heading = "Pace and limits")]
    max_rate: Option<i64>,
    /// Over several targets: at most this many rows a second on each.
    #[arg(long, value_parser = crate::parse_rate, allow_hyphen_values = true, help_heading = "Pace and limits")]
    max_rate_per_target: Option<i64>,
    /// Over several targets: at most this many worked on at once, by all workers.
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..), help_heading = "Pace and limits")]
    max_targets_at_once: Option<i64>,
    /// The foreground p99 latency it may cost: auto (default), off, or e.g. 5ms.
    #[arg(
        long,
        value_name = "auto|off|DURATION",
        help_heading = "Pace and limits"
    )]
    latency_budget: Option<LatencyBudget>,
    /// A database to work on apart from the store's (a URL; repeat it for
    /// a fleet, one operation per target). A password in it is never
    /// stored: workers take theirs from MYSQL_PWD, PGPASSWORD or .pgpass.
    #[arg(long, value_name = "URL", help_heading = "Where")]
    target: Vec<String>,
    /// A file listing the databases to work on, one a line: a name and a URL.
    #[arg(long, value_name = "FILE", help_heading = "Where")]
    targets: Option<std::path::PathBuf>,
    /// The IANA time zone `--window` is read in.
    #[arg(
        long,
        default_value = "UTC",
        requires = "window",
        help_heading = "When"
    )]
    time_zone: String,
    /// Print the operation (or the plan) as JSON.
    #[arg(long, help_heading = "Output")]
    json: bool,
    /// Change nothing: print what enqueuing would do (as `sluice plan`).
    #[arg(long, help_heading = "Output")]
    dry_run: bool,
    /// Planning: do not run the first sub-batch (rolled back) to measure it.
    #[arg(long, help_heading = "Output")]
    no_probe: bool,
}

/// What an `enqueue` (or `schedule add`) command line asks for: the kind,
/// its arguments as a schedule stores them (a relative age for
/// `delete-aged-rows`), and how to run it.
pub struct Recipe {
    /// The kind.
    pub kind: &'static str,
    /// The stored arguments, resolved at enqueue time by the kind.
    pub arguments: serde_json::Value,
    /// How it runs.
    pub options: EnqueueOptions,
    /// `--json` was given.
    pub json: bool,
    /// `--dry-run` was given.
    pub dry_run: bool,
    /// Planning may probe (no `--no-probe`).
    pub probe: bool,
    /// `--target` URLs, in order.
    pub target_urls: Vec<String>,
    /// `--targets FILE`.
    pub targets_file: Option<std::path::PathBuf>,
}

impl Recipe {
    /// The databases apart from the store it names (`--target`, then the
    /// lines of `--targets FILE`); none: the store's own.
    pub fn named_targets(&self) -> Result<Vec<NamedTarget>, Failure> {
        let mut named = self
            .target_urls
            .iter()
            .map(|url| NamedTarget::from_url(url))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Failure::BadInput(e.to_string()))?;
        if let Some(path) = &self.targets_file {
            named.extend(read_targets_file(path)?);
        }
        Ok(named)
    }
}

/// The targets a targets file lists ([`NamedTarget::parse_file`]); a file
/// that cannot be read or parsed is bad input, named.
pub fn read_targets_file(path: &std::path::Path) -> Result<Vec<NamedTarget>, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::BadInput(format!(
            "cannot read the targets file `{}`: {e}",
            path.display()
        ))
    })?;
    NamedTarget::parse_file(&text)
        .map_err(|e| Failure::BadInput(format!("`{}`: {e}", path.display())))
}

impl From<EnqueueCommand> for Recipe {
    fn from(command: EnqueueCommand) -> Self {
        let (kind, arguments, common) = match command {
            EnqueueCommand::DeleteAgedRows {
                table,
                column,
                older_than,
                no_drop_partitions,
                undo,
                keep_undo,
                common,
            } => {
                let mut arguments = json!({
                    "table": table,
                    "column": column,
                    "key": common.key,
                    "older_than": older_than,
                });
                if no_drop_partitions {
                    arguments["drop_partitions"] = false.into();
                }
                if undo {
                    arguments["undo"] = true.into();
                }
                if let Some(keep) = keep_undo {
                    arguments["keep_undo"] = keep.into();
                }
                ("delete-aged-rows", arguments, common)
            }
            EnqueueCommand::UpdateInBatches {
                table,
                set,
                condition,
                undo,
                keep_undo,
                common,
            } => {
                let arguments = UpdateInBatchesArguments {
                    table,
                    key: common.key.clone(),
                    set,
                    condition,
                    undo,
                    undo_table: None,
                    undo_columns: Vec::new(),
                    keep_undo,
                };
                (
                    "update-in-batches",
                    serde_json::to_value(arguments).expect("arguments serialise"),
                    common,
                )
            }
            EnqueueCommand::ArchiveRows {
                table,
                into,
                condition,
                column,
                older_than,
                undo,
                keep_undo,
                common,
            } => {
                let mut arguments = json!({
                    "table": table,
                    "into": into,
                    "key": common.key,
                    "where": condition,
                });
                if undo {
                    arguments["undo"] = true.into();
                }
                if let Some(keep) = keep_undo {
                    arguments["keep_undo"] = keep.into();
                }
                if let (Some(column), Some(older_than)) = (column, older_than) {
                    arguments["column"] = column.into();
                    arguments["older_than"] = older_than.into();
                }
                ("archive-rows", arguments, common)
            }
        };
        let millis = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let options = EnqueueOptions {
            batch_size: common.batch_size,
            sub_batch_size: common.sub_batch_size,
            pause: common.pause,
            limits: Limits {
                max_runtime_ms: common.max_runtime.map(millis),
                max_rows_per_run: common.max_rows,
            },
            priority: common.priority,
            force: common.force,
            max_rate: common.max_rate,
            max_rate_per_target: common.max_rate_per_target,
            max_targets_at_once: common.max_targets_at_once,
            latency_budget: common.latency_budget,
            window: common.window.map(|hours| WindowOption {
                hours,
                time_zone: common.time_zone,
            }),
            ..EnqueueOptions::default()
        };
        Recipe {
            kind,
            arguments,
            options,
            json: common.json,
            dry_run: common.dry_run,
            probe: !common.no_probe,
            target_urls: common.target,
            targets_file: common.targets,
        }
    }
}

/// A duration kept as the operator typed it (checked like every other), so
/// it is what identifies the request.
fn duration_as_typed(text: &str) -> Result<String, String> {
    crate::parse_age(text).map(|_| text.trim().to_owned())
}

/// Checks and enqueues; prints the operation's id. With `--dry-run`, or
/// as `sluice plan` (`planning`), prints the plan instead and writes
/// nothing; a dry run that enqueue would refuse exits as bad input.
pub async fn run(store: &Store, command: EnqueueCommand, planning: bool) -> Result<(), Failure> {
    let mut recipe = Recipe::from(command);
    recipe.options.targets = recipe.named_targets()?;
    // On databases apart from the store, the kind resolves its arguments
    // (a cutoff from the database's clock) and plans on the first; every
    // target is checked at enqueue.
    let first = match recipe.options.targets.first() {
        Some(target) => Some(
            sluice_operations::on_target(
                store,
                &target.url,
                &sluice_target::ConnectOptions::default(),
            )
            .await?,
        ),
        None => None,
    };
    let on = first.as_ref().unwrap_or(store);
    let registry = Registry::with_builtins();
    let arguments = registry
        .arguments_at(
            recipe.kind,
            on,
            recipe.arguments.clone(),
            chrono::Utc::now(),
        )
        .await?;
    if planning || recipe.dry_run {
        if recipe.options.targets.len() > 1 {
            return Err(Failure::BadInput(
                "plan one target at a time: give one --target".into(),
            ));
        }
        let plan = plan(
            on,
            &registry,
            recipe.kind,
            &arguments,
            &recipe.options,
            recipe.probe,
        )
        .await?;
        render::plan(&plan, recipe.json)?;
        return match plan.refusal {
            Some(refusal) if !planning => Err(Failure::BadInput(format!(
                "enqueue would refuse this operation: {refusal}"
            ))),
            _ => Ok(()),
        };
    }
    let enqueued = enqueue_kind(store, &registry, recipe.kind, &arguments, &recipe.options).await?;
    let record = store.operation(enqueued.id).await?;
    // An existing operation returned keeps its own options.
    let not_applied = match enqueued.created {
        true => Vec::new(),
        false => options_it_lacks(store, &record, &recipe.options).await?,
    };
    if recipe.json {
        let value = json!({
            "id": enqueued.id,
            "created": enqueued.created,
            "kind": recipe.kind,
            "status": record.state.status.as_str(),
            "estimated_rows": record.state.estimated_rows,
            "not_applied": not_applied,
        });
        println!("{value}");
        return Ok(());
    }
    render::enqueued(&record, enqueued.created, &not_applied);
    Ok(())
}

/// The options `asked` sets (to other than their defaults), by their flags,
/// that the existing operation `record` does not have: another size,
/// pause, limit or priority, a run window or a rate limit of its own that
/// it lacks or holds otherwise.
async fn options_it_lacks(
    store: &Store,
    record: &OperationRecord,
    asked: &EnqueueOptions,
) -> Result<Vec<&'static str>, Failure> {
    let has = &record.state;
    let window = store.window_for(record.id, &has.kind).await?;
    let own_window = window.filter(|w| w.target == operation_target(record.id));
    let rates = store
        .rate_limits_for(record.id, &has.kind, has.fleet.as_deref())
        .await?;
    let own_rate = rates
        .iter()
        .find(|r| r.target == operation_target(record.id))
        .map(|r| r.rows_per_second);
    let budgets = store.latency_budgets().await?;
    let (budget, set_for) = sluice_store::budget_and_target(&budgets, record.id, &has.kind);
    let own_budget = (set_for == Some(operation_target(record.id))).then_some(budget);
    let default = EnqueueOptions::default();
    let set_otherwise = |asked: i64, default: i64, has: i64| asked != default && asked != has;
    let limit_otherwise = |asked: Option<i64>, has: Option<i64>| asked.is_some() && asked != has;
    let millis = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    Ok([
        (
            "--batch-size",
            set_otherwise(asked.batch_size, default.batch_size, has.batch_size),
        ),
        (
            "--sub-batch-size",
            set_otherwise(
                asked.sub_batch_size,
                default.sub_batch_size,
                has.sub_batch_size,
            ),
        ),
        (
            "--pause",
            set_otherwise(millis(asked.pause), millis(default.pause), has.pause_ms),
        ),
        (
            "--max-runtime",
            limit_otherwise(asked.limits.max_runtime_ms, has.limits.max_runtime_ms),
        ),
        (
            "--max-rows",
            limit_otherwise(asked.limits.max_rows_per_run, has.limits.max_rows_per_run),
        ),
        (
            "--priority",
            set_otherwise(
                asked.priority.into(),
                default.priority.into(),
                has.priority.into(),
            ),
        ),
        (
            "--window",
            asked.window.as_ref().is_some_and(|w| {
                own_window
                    .as_ref()
                    .is_none_or(|o| o.run_window != w.hours || o.time_zone != w.time_zone)
            }),
        ),
        (
            "--max-rate",
            asked.max_rate.is_some_and(|rate| own_rate != Some(rate)),
        ),
        (
            "--latency-budget",
            asked
                .latency_budget
                .is_some_and(|budget| own_budget != Some(budget)),
        ),
    ]
    .into_iter()
    .filter_map(|(flag, lacks)| lacks.then_some(flag))
    .collect())
}
