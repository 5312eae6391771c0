//! What a batch transaction writes besides its statements: a succeeded
//! batch's report, a planned batch's row and event, and the legality check
//! and error a fenced write answers with.

use super::*;

/// What a batch that succeeded reports ([`Event::BatchSucceeded`]).
pub(crate) struct BatchDone {
    pub(crate) rows: i64,
    pub(crate) duration_ms: i64,
    pub(crate) next_batch_size: Option<i64>,
}

impl BatchDone {
    /// `rows` changed in `duration`, setting the batch size to `next_batch_size`.
    pub(crate) fn new(
        rows: i64,
        duration: std::time::Duration,
        next_batch_size: Option<i64>,
    ) -> Self {
        BatchDone {
            rows,
            duration_ms: millis(duration),
            next_batch_size,
        }
    }
}

/// The batch an owner plans next: from the operation's cursor to the end it
/// asked for, numbered after the last one planned.
pub(crate) struct PlannedBatch {
    pub(crate) ordinal: i64,
    pub(crate) start: Option<Cursor>,
    pub(crate) end: Option<Cursor>,
    pub(crate) size: i64,
    pub(crate) sub_batch_size: i64,
}

impl PlannedBatch {
    pub(crate) fn after(record: &OperationRecord, end: Option<Cursor>, size: i64) -> Self {
        PlannedBatch {
            ordinal: record.state.batches_planned + 1,
            start: record.state.cursor.clone(),
            end,
            size,
            sub_batch_size: record.state.sub_batch_size.min(size),
        }
    }

    pub(crate) fn event(&self) -> Event {
        Event::BatchPlanned {
            ordinal: self.ordinal,
            start: self.start.clone(),
            end: self.end.clone(),
            size: self.size,
        }
    }
}

/// Whether the state machine takes `then` right after `first` on `state`:
/// the trial run before a second event is appended with the first, so a
/// refused one is left out rather than refusing both.
pub(crate) fn legal_after(
    state: &machine::Projection,
    first: &Event,
    then: &Event,
    now: i64,
) -> bool {
    machine::apply(Some(state), first, now)
        .and_then(|(state, _)| machine::apply(Some(&state), then, now))
        .is_ok()
}

/// The error for a write refused because `lease` no longer holds its batch.
pub(crate) fn batch_lease_lost(lease: &BatchLease) -> StoreError {
    StoreError::BatchLeaseLost {
        batch_id: lease.batch_id,
        epoch: lease.epoch,
    }
}
