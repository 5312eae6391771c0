//! Operator controls: pause, resume, cancel and retry one operation, every
//! operation of a kind, or every operation. Each is an event appended through
//! the state machine, so a control that does not apply (resuming a running
//! operation) is refused for one operation; a bulk action only looks at the
//! statuses the state machine accepts the event in.

use clap::Args;
use sluice_runtime::{Selection, control};
use sluice_store::Store;

use crate::failure::Failure;
use crate::render;

/// Which operations a control applies to: exactly one of an id, `--kind`, `--all`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).multiple(false).args(["id", "kind", "all"])))]
pub struct ControlArgs {
    /// The operation's id.
    id: Option<i64>,
    /// Every operation of this kind.
    #[arg(long)]
    kind: Option<String>,
    /// Every operation.
    #[arg(long)]
    all: bool,
    /// Recorded in the event (pause and cancel).
    #[arg(long, default_value = "operator")]
    reason: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub use sluice_runtime::Action;

/// Applies `action` to the operations `args` name and reports what changed.
pub async fn apply(store: &Store, action: Action, args: &ControlArgs) -> Result<(), Failure> {
    let selection = match (&args.id, &args.kind) {
        (Some(id), _) => Selection::One(*id),
        (None, Some(kind)) => Selection::Kind(kind.clone()),
        (None, None) => Selection::All,
    };
    let outcome = control(store, action, &selection, &args.reason).await?;
    render::controlled(action.verb(), &outcome.changed, &outcome.skipped, args.json)
}
