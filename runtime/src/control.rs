//! Operator controls: pause, resume, cancel and retry one operation, every
//! operation of a kind, or every operation.
//!
//! Pausing or resuming a kind (or everything) is also a kill switch, kept in
//! the store: while it is set no node starts an operation of that kind (a
//! new one waits as pending) and scheduled fires of it are refused with the
//! reason; resuming lifts it and resumes the kind's paused operations.
//!
//! A pause may carry an end ([`pause_until`]): the store keeps it, and a
//! worker's scheduler resumes the target once it has passed
//! ([`resume_due`]), recording `resumed` as any resume does. Any later
//! pause or resume of the same target cancels it.
//!
//! A run window works through the same pauses: outside it the target is
//! paused until its next opening ([`close_windows`]).
//!
//! Each control is an event appended through the state machine, so it works
//! from any process (a running worker notices within its control interval;
//! on PostgreSQL it is also announced, and listening workers act at once)
//! and a control that does not apply is refused for one operation. A bulk
//! control looks only at the statuses its event is legal in and reports
//! which operations changed and which were skipped because their status
//! changed meanwhile.

use sluice_store::{
    Event, Expected, ListFilter, OperationStatus, Store, StoreError, kind_target, operation_target,
};

use sluice_operations::window::RunWindow;

/// An operator control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Start no new sub-batch until resumed.
    Pause,
    /// Lift a pause.
    Resume,
    /// Stop for good.
    Cancel,
    /// Run a failed operation again from its cursor and failed batches.
    Retry,
}

/// Which operations a control applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// One operation.
    One(i64),
    /// Every operation of a kind.
    Kind(String),
    /// Every operation.
    All,
}

impl Selection {
    /// How the store names the selection's timed resume: `operation:<id>`,
    /// `kind:<kind>` or `*`.
    pub fn target(&self) -> String {
        match self {
            Selection::One(id) => operation_target(*id),
            Selection::Kind(kind) => kind_target(kind),
            Selection::All => "*".to_owned(),
        }
    }

    /// The selection [`Selection::target`] named, if `target` is one.
    pub fn from_target(target: &str) -> Option<Selection> {
        if target == "*" {
            return Some(Selection::All);
        }
        if let Some(id) = target.strip_prefix("operation:") {
            return id.parse().ok().map(Selection::One);
        }
        target
            .strip_prefix("kind:")
            .filter(|kind| !kind.is_empty())
            .map(|kind| Selection::Kind(kind.to_owned()))
    }
}

/// What a control did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Controlled {
    /// Operations the event was appended to.
    pub changed: Vec<i64>,
    /// Operations listed but whose status no longer allowed it.
    pub skipped: Vec<i64>,
}

/// Why a control was refused.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The one operation named is not in a status the control applies to.
    #[error("cannot {verb} operation {id}: {reason}")]
    NotApplicable {
        /// The control.
        verb: &'static str,
        /// The operation.
        id: i64,
        /// The state machine's reason.
        reason: String,
    },
    /// `--kind` was empty.
    #[error("the kind must not be empty")]
    EmptyKind,
    /// The store failed (or the operation does not exist: `NotFound`).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Action {
    /// The event this control appends.
    pub fn event(self, reason: &str) -> Event {
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

/// Whether `kind` names work a control can hold: one of `registered` (the
/// kinds this process runs), or a kind the store has an operation or a
/// schedule of (an embedding application's own). A misspelt kind
/// (`delete-aged-row`) would otherwise set a kill switch or limit that
/// holds nothing, and say it succeeded.
pub async fn is_known_kind(
    store: &Store,
    registered: &[&str],
    kind: &str,
) -> Result<bool, StoreError> {
    if registered.contains(&kind) {
        return Ok(true);
    }
    let filter = ListFilter {
        kind: Some(kind.to_owned()),
        limit: Some(1),
        ..Default::default()
    };
    Ok(!store.list(&filter).await?.is_empty()
        || store.schedules().await?.iter().any(|s| s.kind == kind))
}

/// Applies `action` (with `reason`, recorded for pause and cancel) to the
/// operations `selection` names. A pause or resume also cancels the
/// selection's timed resume, if it had one.
pub async fn control(
    store: &Store,
    action: Action,
    selection: &Selection,
    reason: &str,
) -> Result<Controlled, ControlError> {
    let outcome = apply(store, action, selection, reason).await?;
    if matches!(action, Action::Pause | Action::Resume) {
        store.clear_timed_resume(&selection.target()).await?;
    }
    Ok(outcome)
}

/// Pauses what `selection` names (as [`control`]) until `until` (epoch
/// milliseconds), when a worker's scheduler resumes it ([`resume_due`]).
pub async fn pause_until(
    store: &Store,
    selection: &Selection,
    reason: &str,
    until: i64,
) -> Result<Controlled, ControlError> {
    let outcome = control(store, Action::Pause, selection, reason).await?;
    store.set_timed_resume(&selection.target(), until).await?;
    Ok(outcome)
}

/// Resumes every target whose timed resume has come (by the store's
/// clock), as an operator's resume would, and forgets it; an operation no
/// longer paused is left as it is. Returns the targets and what resuming
/// them did. Two workers doing it at once resume each target once (the
/// state machine refuses the second `resumed`).
pub async fn resume_due(store: &Store) -> Result<Vec<(String, Controlled)>, ControlError> {
    let mut resumed = Vec::new();
    for due in store.due_timed_resumes().await? {
        let Some(selection) = Selection::from_target(&due.target) else {
            store.clear_timed_resume(&due.target).await?;
            continue;
        };
        let outcome = match control(store, Action::Resume, &selection, "").await {
            Ok(outcome) => outcome,
            Err(ControlError::NotApplicable { .. }) => {
                store.clear_timed_resume(&due.target).await?;
                Controlled::default()
            }
            Err(other) => return Err(other),
        };
        resumed.push((due.target, outcome));
    }
    Ok(resumed)
}

/// Pauses each target whose run window ([`RunWindow`]) is closed at the
/// store's clock until its next opening ([`pause_until`]), reason
/// `outside its run window 00:00-06:00 Europe/Paris (until …)`; the timed
/// resume brings it back then. A target already held (an operation paused
/// or failed, a kind or everything switched off) is left alone, and the
/// window of an operation that ended is removed. Returns the targets paused
/// and what pausing them did.
pub async fn close_windows(store: &Store) -> Result<Vec<(String, Controlled)>, ControlError> {
    let now = chrono::DateTime::from_timestamp_millis(store.clock().now_ms())
        .unwrap_or_else(chrono::Utc::now);
    let mut closed = Vec::new();
    for stored in store.windows().await? {
        let Ok(window) = RunWindow::parse(&stored.run_window, &stored.time_zone) else {
            continue;
        };
        let Some(selection) = Selection::from_target(&stored.target) else {
            continue;
        };
        if window.is_open(now) {
            continue;
        }
        let held = match &selection {
            Selection::One(id) => match store.operation(*id).await {
                Ok(record) if record.state.status.is_terminal() => {
                    store.clear_window(&stored.target).await?;
                    continue;
                }
                Ok(record) => !matches!(
                    record.state.status,
                    OperationStatus::Pending | OperationStatus::Running
                ),
                Err(StoreError::NotFound(_)) => {
                    store.clear_window(&stored.target).await?;
                    continue;
                }
                Err(other) => return Err(other.into()),
            },
            Selection::Kind(kind) => store.switch_for(kind).await?.is_some(),
            Selection::All => store.switches().await?.iter().any(|s| s.scope == "*"),
        };
        if held {
            continue;
        }
        let until = window.next_opening(now);
        let (hours, zone) = window.text();
        let reason = format!(
            "outside its run window {hours} {zone} (until {})",
            until.format("%Y-%m-%dT%H:%M:%SZ")
        );
        match pause_until(store, &selection, &reason, until.timestamp_millis()).await {
            Ok(outcome) => closed.push((stored.target, outcome)),
            // Its status changed meanwhile: the next tick looks again.
            Err(ControlError::NotApplicable { .. }) => {}
            Err(other) => return Err(other),
        }
    }
    Ok(closed)
}

/// [`control`] without touching timed resumes.
async fn apply(
    store: &Store,
    action: Action,
    selection: &Selection,
    reason: &str,
) -> Result<Controlled, ControlError> {
    let event = action.event(reason);
    let kind = match selection {
        Selection::One(id) => {
            return match store
                .append(*id, Expected::Any, None, std::slice::from_ref(&event))
                .await
            {
                Ok(appended) => Ok(announced(
                    store,
                    Controlled {
                        changed: vec![appended.record.id],
                        skipped: Vec::new(),
                    },
                )
                .await),
                Err(StoreError::Illegal { source, .. }) => Err(ControlError::NotApplicable {
                    verb: action.verb(),
                    id: *id,
                    reason: source.to_string(),
                }),
                Err(other) => Err(other.into()),
            };
        }
        Selection::Kind(kind) if kind.trim().is_empty() => return Err(ControlError::EmptyKind),
        Selection::Kind(kind) => Some(kind.clone()),
        Selection::All => None,
    };
    let scope = kind.as_deref().unwrap_or("*");
    match action {
        Action::Pause => store.set_switch(scope, reason).await?,
        Action::Resume => {
            store.clear_switch(scope).await?;
        }
        Action::Cancel | Action::Retry => {}
    }
    let mut candidates = Vec::new();
    for status in event.legal_from() {
        let filter = ListFilter {
            status: Some(*status),
            kind: kind.clone(),
            limit: Some(i64::MAX),
            ..Default::default()
        };
        candidates.extend(store.list(&filter).await?.into_iter().map(|r| r.id));
    }
    candidates.sort_unstable();
    let mut outcome = Controlled::default();
    for id in candidates {
        // The status may have changed since the listing; the state machine decides.
        match store
            .append(id, Expected::Any, None, std::slice::from_ref(&event))
            .await
        {
            Ok(_) => outcome.changed.push(id),
            Err(StoreError::Illegal { .. }) => outcome.skipped.push(id),
            Err(other) => return Err(other.into()),
        }
    }
    Ok(announced(store, outcome).await)
}

/// `outcome`, once its changes are announced to the workers listening
/// ([`Store::announce_controls`]). The control has committed either way: a
/// failed announcement is logged, and the workers' control poll finds it.
async fn announced(store: &Store, outcome: Controlled) -> Controlled {
    if let Err(error) = store.announce_controls(&outcome.changed).await {
        tracing::warn!(%error, "control not announced; workers find it at their next control poll");
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::Selection;

    #[test]
    fn a_selection_s_target_names_it_back() {
        for selection in [
            Selection::One(42),
            Selection::Kind("delete-aged-rows".into()),
            Selection::All,
        ] {
            assert_eq!(Selection::from_target(&selection.target()), Some(selection));
        }
        for unknown in ["", "operation:", "operation:x", "kind:", "everything"] {
            assert_eq!(Selection::from_target(unknown), None, "{unknown}");
        }
    }
}
