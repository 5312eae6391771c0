//! Operator controls: pause, resume, cancel and retry one operation, every
//! operation of a kind, or every operation. Each is an event appended through
//! the state machine, so a control that does not apply (resuming a running
//! operation) is refused for one operation; a bulk action only looks at the
//! statuses the state machine accepts the event in.

use clap::Args;
use sluice_runtime::{Selection, control, pause_until};
use sluice_store::{LatencyBudget, Store};

use crate::failure::Failure;
use crate::render;

/// Which operations a control applies to: exactly one of an id, `--kind`, `--all`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(false).args(["id", "kind", "all"])))]
pub struct ControlArgs {
    /// The operation's id.
    id: Option<i64>,
    /// Every operation of this kind.
    #[arg(long)]
    kind: Option<String>,
    /// Every operation.
    #[arg(long)]
    all: bool,
    /// With an id of a fleet's operation: only the fleet's operation on
    /// this target (by name). Without it, an id of a fleet's operation
    /// names the whole fleet.
    #[arg(long, value_name = "NAME", requires = "id")]
    target: Option<String>,
    /// Recorded in the event (pause and cancel).
    #[arg(long, default_value = "operator")]
    reason: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `sluice pause`: the target, and optionally when it resumes by itself.
#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    target: ControlArgs,
    /// Resume by itself then: a time (2026-12-01T06:00Z, RFC 3339 with or
    /// without seconds) or a duration from now (2h). A running worker
    /// resumes it, recording `resumed`; any later pause or resume of the
    /// same target cancels it.
    #[arg(long, value_parser = parse_until)]
    until: Option<chrono::DateTime<chrono::Utc>>,
}

/// `sluice limit`: a rate limit shared by every worker, or a latency budget.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("limit").required(true).multiple(true).args(["rate", "clear", "latency_budget"])))]
pub struct LimitArgs {
    /// The operation's id.
    id: Option<i64>,
    /// Every operation of this kind, together.
    #[arg(long)]
    kind: Option<String>,
    /// Every operation, together.
    #[arg(long)]
    all: bool,
    /// Rows a second (e.g. 5000/s).
    #[arg(long, value_parser = crate::parse_rate)]
    rate: Option<i64>,
    /// The foreground latency it may cost, as the canary's p99 on its
    /// table: auto, off, or e.g. 5ms (with --clear: remove the budget set,
    /// leaving the kind's, everyone's or auto).
    #[arg(long, value_name = "auto|off|DURATION", num_args = 0..=1, default_missing_value = "auto")]
    latency_budget: Option<LatencyBudget>,
    /// Remove the limit (the rate limit, or with --latency-budget the budget).
    #[arg(long)]
    clear: bool,
}

/// Sets or removes a rate limit. An operation already running obeys a new
/// one from its next run; its own limit is best given at enqueue
/// (`--max-rate`).
pub async fn limit(store: &Store, args: &LimitArgs) -> Result<(), Failure> {
    let selection = match (&args.id, &args.kind, args.all) {
        (Some(id), None, false) => {
            store.operation(*id).await?;
            Selection::One(*id)
        }
        (None, Some(kind), false) if !kind.trim().is_empty() => {
            // Setting needs a kind that exists; clearing takes any, so a
            // limit stored for a kind since gone can still be removed.
            if args.rate.is_some() || (args.latency_budget.is_some() && !args.clear) {
                known_kind(store, kind).await?;
            }
            Selection::Kind(kind.clone())
        }
        (None, None, true) => Selection::All,
        _ => {
            return Err(Failure::BadInput(
                "name exactly one of an operation id, --kind K or --all".into(),
            ));
        }
    };
    let target = selection.target();
    if args.rate.is_some() && args.clear {
        return Err(Failure::BadInput(
            "give --rate to set a rate limit or --clear to remove it, not both".into(),
        ));
    }
    if let Some(budget) = args.latency_budget {
        if args.rate.is_some() {
            return Err(Failure::BadInput(
                "set a rate limit and a latency budget one at a time".into(),
            ));
        }
        if args.clear {
            let removed = store.clear_latency_budget(&target).await?;
            let what = if removed {
                "latency budget removed"
            } else {
                "had no latency budget"
            };
            println!("{target}: {what}");
        } else {
            store.set_latency_budget(&target, budget).await?;
            println!("{target}: latency budget {budget} (the canary's p99 on its table)");
        }
        return Ok(());
    }
    match args.rate {
        Some(rate) => {
            store.set_rate_limit(&target, rate).await?;
            println!("{target}: at most {rate} rows/s, all workers together");
        }
        None => {
            let removed = store.clear_rate_limit(&target).await?;
            println!(
                "{target}: {}",
                if removed {
                    "rate limit removed"
                } else {
                    "had no rate limit"
                }
            );
        }
    }
    Ok(())
}

/// `kind` is one a limit can hold: a built-in, or one the store has an
/// operation or a schedule of (an embedding application's own). A typo
/// (`delete-aged-row`) would otherwise set a limit that holds nothing.
async fn known_kind(store: &Store, kind: &str) -> Result<(), Failure> {
    let builtins = sluice_operations::Registry::with_builtins().kinds();
    if sluice_runtime::is_known_kind(store, &builtins, kind).await? {
        return Ok(());
    }
    Err(Failure::BadInput(format!(
        "unknown kind `{kind}`: not a built-in ({}) and no operation or schedule of it in the store",
        builtins.join(", ")
    )))
}

pub use sluice_runtime::Action;

/// Pauses what `args` name, until `--until` when given.
pub async fn pause(store: &Store, args: &PauseArgs) -> Result<(), Failure> {
    let Some(until) = args.until else {
        return apply(store, Action::Pause, &args.target).await;
    };
    if let Some(kind) = args.target.kind.as_ref().filter(|k| !k.trim().is_empty()) {
        known_kind(store, kind).await?;
    }
    if until <= chrono::Utc::now() {
        return Err(Failure::BadInput(format!(
            "--until {} is already past",
            until.format("%Y-%m-%dT%H:%M:%SZ")
        )));
    }
    let target = &args.target;
    let reason = format!(
        "{} (until {})",
        target.reason,
        until.format("%Y-%m-%dT%H:%M:%SZ")
    );
    let mut outcome = sluice_runtime::Controlled::default();
    for selection in target.selections(store).await? {
        let done = pause_until(store, &selection, &reason, until.timestamp_millis()).await?;
        outcome.changed.extend(done.changed);
        outcome.skipped.extend(done.skipped);
    }
    render::controlled("pause", &outcome.changed, &outcome.skipped, target.json)
}

/// A time to resume at: RFC 3339 (seconds optional) or a duration from now.
fn parse_until(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let text = text.trim();
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&chrono::Utc));
    }
    // `2026-12-01T06:00Z` / `+01:00`: RFC 3339 without seconds.
    if let Some(split) = text.rfind(['Z', '+', '-']).filter(|&i| i > 10) {
        let (minutes, zone) = text.split_at(split);
        if let Ok(at) = chrono::DateTime::parse_from_rfc3339(&format!("{minutes}:00{zone}")) {
            return Ok(at.with_timezone(&chrono::Utc));
        }
    }
    match sluice_operations::parse_duration(text) {
        Ok(after) => chrono::Duration::from_std(after)
            .ok()
            .and_then(|after| chrono::Utc::now().checked_add_signed(after))
            .ok_or_else(|| format!("`{text}` is too far ahead")),
        Err(_) => Err(format!(
            "`{text}` is neither a time (2026-12-01T06:00Z) nor a duration (2h)"
        )),
    }
}

/// Applies `action` to the operations `args` name and reports what changed.
pub async fn apply(store: &Store, action: Action, args: &ControlArgs) -> Result<(), Failure> {
    // A kill switch, a cancel or a retry for a kind nobody knows is a typo
    // (its switch would hold nothing); a resume takes any, so a switch set
    // for a kind since gone can still be lifted.
    if let Some(kind) = &args.kind
        && action != Action::Resume
        && !kind.trim().is_empty()
    {
        known_kind(store, kind).await?;
    }
    let selections = args.selections(store).await?;
    // One operation named alone is refused when the control does not apply
    // to it; a fleet's operations are told apart as a kind's are.
    if let [one] = selections.as_slice() {
        let outcome = control(store, action, one, &args.reason).await?;
        return render::controlled(action.verb(), &outcome.changed, &outcome.skipped, args.json);
    }
    let mut changed = Vec::new();
    let mut skipped = Vec::new();
    for selection in &selections {
        match control(store, action, selection, &args.reason).await {
            Ok(outcome) => {
                changed.extend(outcome.changed);
                skipped.extend(outcome.skipped);
            }
            Err(sluice_runtime::ControlError::NotApplicable { id, .. }) => skipped.push(id),
            Err(error) => return Err(error.into()),
        }
    }
    render::controlled(action.verb(), &changed, &skipped, args.json)
}

impl ControlArgs {
    /// The operations named: an id alone, or each operation of the fleet an
    /// id belongs to (only the one on `--target` when given), a kind, or
    /// every operation.
    async fn selections(&self, store: &Store) -> Result<Vec<Selection>, Failure> {
        let Some(id) = self.id else {
            return Ok(vec![match &self.kind {
                Some(kind) => Selection::Kind(kind.clone()),
                None => Selection::All,
            }]);
        };
        let record = store.operation(id).await?;
        let Some(fleet) = &record.state.fleet else {
            return match &self.target {
                Some(name) if record.state.target_name.as_deref() != Some(name) => {
                    Err(Failure::BadInput(format!(
                        "operation {id} is not in a fleet and does not work on target `{name}`"
                    )))
                }
                _ => Ok(vec![Selection::One(id)]),
            };
        };
        let members = store.fleet(fleet).await?;
        let chosen: Vec<Selection> = members
            .iter()
            .filter(|m| {
                self.target
                    .as_ref()
                    .is_none_or(|name| m.state.target_name.as_ref() == Some(name))
            })
            .map(|m| Selection::One(m.id))
            .collect();
        if chosen.is_empty() {
            let names: Vec<&str> = members
                .iter()
                .filter_map(|m| m.state.target_name.as_deref())
                .collect();
            return Err(Failure::BadInput(format!(
                "operation {id}'s fleet has no target `{}`: its targets are {}",
                self.target.as_deref().unwrap_or_default(),
                names.join(", ")
            )));
        }
        Ok(chosen)
    }
}
