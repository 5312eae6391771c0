//! Operator controls: pause, resume, cancel and retry one operation, every
//! operation of a kind, or every operation. Each is an event appended through
//! the state machine, so a control that does not apply (resuming a running
//! operation) is refused for one operation; a bulk action only looks at the
//! statuses the state machine accepts the event in.

use clap::Args;
use sluice_store::{Event, Expected, ListFilter, Store, StoreError};

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

/// An operator control.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    /// Stop starting sub-batches until resumed.
    Pause,
    /// Lift a pause.
    Resume,
    /// Stop for good.
    Cancel,
    /// Run a failed operation again.
    Retry,
}

impl Action {
    fn event(self, reason: &str) -> Event {
        match self {
            Action::Pause => Event::Paused {
                reason: reason.to_owned(),
            },
            Action::Resume => Event::Resumed,
            Action::Cancel => Event::Cancelled {
                reason: reason.to_owned(),
            },
            Action::Retry => Event::Retried,
        }
    }

    /// The verb, as printed.
    pub fn verb(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Cancel => "cancel",
            Action::Retry => "retry",
        }
    }
}

/// Applies `action` to the operations `args` name and reports what changed.
pub async fn apply(store: &Store, action: Action, args: &ControlArgs) -> Result<(), Failure> {
    let event = action.event(&args.reason);
    if let Some(id) = args.id {
        let appended = store
            .append(id, Expected::Any, None, std::slice::from_ref(&event))
            .await
            .map_err(|e| match e {
                StoreError::Illegal { source, .. } => {
                    Failure::BadInput(format!("cannot {} operation {id}: {source}", action.verb()))
                }
                other => other.into(),
            })?;
        return render::controlled(action.verb(), &[appended.record.id], &[], args.json);
    }
    if let Some(kind) = &args.kind
        && kind.trim().is_empty()
    {
        return Err(Failure::BadInput("--kind must not be empty".into()));
    }
    // Only the statuses the state machine accepts this event in: never a scan
    // of every operation that ever ran.
    let mut candidates = Vec::new();
    for status in event.legal_from() {
        let filter = ListFilter {
            status: Some(*status),
            kind: args.kind.clone(),
            limit: Some(i64::MAX),
        };
        candidates.extend(store.list(&filter).await?.into_iter().map(|r| r.id));
    }
    candidates.sort_unstable();
    let mut changed = Vec::new();
    let mut skipped = Vec::new();
    for id in candidates {
        // The status may have changed since the listing; the state machine decides.
        match store
            .append(id, Expected::Any, None, std::slice::from_ref(&event))
            .await
        {
            Ok(_) => changed.push(id),
            Err(StoreError::Illegal { .. }) => skipped.push(id),
            Err(other) => return Err(other.into()),
        }
    }
    render::controlled(action.verb(), &changed, &skipped, args.json)
}
