//! `sluice schedule …`: recurring operations stored in the database, fired by
//! every `sluice run` worker (one fire per tick across all of them).

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;
use sluice_operations::Registry;
use sluice_runtime::ScheduleSpec;
use sluice_runtime::schedule::{add_schedule, set_enabled};
use sluice_store::{Schedule, Store};

use crate::enqueue::{EnqueueCommand, Recipe};
use crate::failure::Failure;

/// The schedule commands.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Add a schedule: `schedule add --name N --cron EXPR <kind> [the kind's enqueue options]`.
    Add(Box<AddArgs>),
    /// List the schedules.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a schedule (its recorded fires stay).
    Remove {
        /// The schedule's name.
        name: String,
    },
    /// Enable a schedule; it next fires at its first due time from now.
    Enable {
        /// The schedule's name.
        name: String,
    },
    /// Disable a schedule.
    Disable {
        /// The schedule's name.
        name: String,
    },
}

/// `schedule add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// Unique name (letters, digits, `-`, `_`, `.`).
    #[arg(long)]
    name: String,
    /// Cron expression: five fields, or six with seconds first, e.g. "0 3 * * *".
    #[arg(long, allow_hyphen_values = true)]
    cron: String,
    /// IANA time zone the expression is read in.
    #[arg(long, default_value = "UTC")]
    time_zone: String,
    /// Spread each fire's start uniformly over this window (e.g. 5m).
    #[arg(long, default_value = "0ms", value_parser = crate::parse_jitter, allow_hyphen_values = true)]
    jitter: Duration,
    /// The kind to enqueue at each fire, with its options.
    #[command(subcommand)]
    kind: EnqueueCommand,
}

/// Runs a schedule command.
pub async fn run(store: &Store, command: ScheduleCommand) -> Result<(), Failure> {
    match command {
        ScheduleCommand::Add(args) => {
            let args = *args;
            let recipe = Recipe::from(args.kind);
            if !recipe.target_urls.is_empty() || recipe.targets_file.is_some() {
                return Err(Failure::BadInput(
                    "a schedule works on the store's database: --target and --targets are for enqueue".into(),
                ));
            }
            if recipe.dry_run {
                return Err(Failure::BadInput(
                    "--dry-run plans an enqueue, not a schedule: run `sluice plan` with the same arguments".into(),
                ));
            }
            let spec = ScheduleSpec {
                name: args.name,
                kind: recipe.kind.to_owned(),
                arguments: recipe.arguments,
                cron: args.cron,
                time_zone: Some(args.time_zone),
                jitter: args.jitter,
                options: recipe.options,
            };
            let schedule = add_schedule(store, &Registry::with_builtins(), &spec).await?;
            if recipe.json {
                println!("{}", schedule_json(&schedule));
            } else {
                println!(
                    "added schedule {}: {} at \"{}\" ({}), next fire {}",
                    schedule.name,
                    schedule.kind,
                    schedule.cron,
                    schedule.time_zone,
                    time(schedule.fire_at)
                );
            }
        }
        ScheduleCommand::List { json } => {
            let schedules = store.schedules().await?;
            if json {
                let list: Vec<_> = schedules.iter().map(schedule_json).collect();
                println!("{}", serde_json::Value::Array(list));
            } else if schedules.is_empty() {
                println!("no schedules");
            } else {
                println!(
                    "{:<24} {:<20} {:<18} {:<8} {:<8} next fire",
                    "NAME", "KIND", "CRON", "JITTER", "ENABLED"
                );
                for s in &schedules {
                    println!(
                        "{:<24} {:<20} {:<18} {:<8} {:<8} {}",
                        s.name,
                        s.kind,
                        s.cron,
                        format!("{}s", s.jitter_ms / 1000),
                        if s.enabled { "yes" } else { "no" },
                        if s.enabled {
                            time(s.fire_at)
                        } else {
                            "-".into()
                        }
                    );
                }
            }
        }
        ScheduleCommand::Remove { name } => {
            store.remove_schedule(&name).await?;
            println!("removed schedule {name}");
        }
        ScheduleCommand::Enable { name } => {
            set_enabled(store, &name, true).await?;
            println!("enabled schedule {name}");
        }
        ScheduleCommand::Disable { name } => {
            set_enabled(store, &name, false).await?;
            println!("disabled schedule {name}");
        }
    }
    Ok(())
}

fn schedule_json(s: &Schedule) -> serde_json::Value {
    json!({
        "name": s.name,
        "kind": s.kind,
        "arguments": serde_json::from_str::<serde_json::Value>(&s.arguments).unwrap_or_default(),
        "cron": s.cron,
        "time_zone": s.time_zone,
        "jitter_ms": s.jitter_ms,
        "enabled": s.enabled,
        "due_at": s.due_at,
        "fire_at": s.fire_at,
        "last_operation_id": s.last_operation_id,
    })
}

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}
