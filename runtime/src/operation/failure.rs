//! What the driver does when a sub-batch fails: a batch taken over is let
//! go, one whose progress the store holds ahead is claimed again from
//! there, a store that cannot be used is waited out, and any other failure is
//! the batch's — retried smaller after a backoff, split when a range keeps
//! running out of time, or failing the operation once its attempts are
//! spent or too many batches fail.

use std::time::Duration;

use sluice_operations::OperationError;
use sluice_store::{Projection, StoreError};

use super::driver::{Driver, Now, Procedure};
use super::phase::{Ending, Phase};
use super::protocol::Command;
use super::trace::Note;
use crate::sizing::shrink_after_failure;

impl Driver {
    /// A sub-batch of the open batch failed with `error`.
    pub(super) fn sub_batch_failed(
        &mut self,
        error: OperationError,
        out: &mut Vec<Command>,
        now: Now,
    ) {
        let Some(batch) = self.batch() else {
            return;
        };
        let (ordinal, attempt) = (batch.lease.ordinal, batch.lease.attempt);
        match error {
            OperationError::Store(StoreError::BatchLeaseLost { .. }) => {
                // Another worker holds it now; nothing is left to record.
                self.phase = Phase::Idle;
                self.leftovers_possible = true;
                out.push(Command::Trace(Note::BatchTakenOver { ordinal }));
                self.schedule_step(out, Duration::ZERO);
            }
            OperationError::Store(StoreError::ProgressMoved { .. }) => {
                // An earlier sub-batch committed though its answer was lost
                // (the store went away as it committed): the store's
                // progress is ahead of this actor's, and this sub-batch kept
                // nothing. The batch is given back and claimed again from
                // the progress the store holds.
                let Phase::Running { batch, .. } = std::mem::replace(&mut self.phase, Phase::Idle)
                else {
                    return;
                };
                out.push(Command::ReleaseBatch(batch.lease));
                self.leftovers_possible = true;
                out.push(Command::Trace(Note::ProgressMoved { ordinal }));
                self.schedule_step(out, Duration::ZERO);
            }
            OperationError::Store(e) if e.is_unavailable() => {
                // Not the batch's fault: nothing was kept, and the same
                // sub-batch is tried again once the store answers.
                self.store_faults = self.store_faults.saturating_add(1);
                let wait = self.backoff(self.store_faults, now);
                out.push(Command::Trace(Note::StoreFault {
                    faults: self.store_faults,
                    wait,
                    error: e.to_string(),
                }));
                self.schedule_step(out, wait);
            }
            other => {
                let message = other.to_string();
                out.push(Command::Trace(Note::SubBatchFailed {
                    ordinal,
                    attempt,
                    message: message.clone(),
                }));
                let Phase::Running { batch, .. } = std::mem::replace(&mut self.phase, Phase::Idle)
                else {
                    return;
                };
                self.phase = Phase::Ending {
                    batch,
                    ending: Ending::Failed {
                        message,
                        timed_out: other.is_timeout(),
                        uncut: false,
                    },
                };
                self.procedure = Procedure::Settle;
                self.record_failure(out);
            }
        }
    }

    /// Records the failing batch's attempt and what follows from it. Every
    /// failure retries with smaller sub-batches: less work per transaction
    /// is what helps a timeout, and costs little otherwise.
    pub(super) fn record_failure(&mut self, out: &mut Vec<Command>) {
        let max_attempts = self.settings.max_attempts;
        let Phase::Ending {
            batch,
            ending:
                Ending::Failed {
                    message,
                    timed_out,
                    uncut,
                },
        } = &self.phase
        else {
            return;
        };
        let attempt = u32::try_from(batch.lease.attempt).unwrap_or(u32::MAX);
        let lease = batch.lease.clone();
        let message = message.clone();
        let smaller = Some(shrink_after_failure(batch.sub_batch_size));
        if attempt >= max_attempts
            && *timed_out
            && !*uncut
            && let Some(end) = batch.end.clone()
        {
            // A range that keeps running out of time: its halves are retried
            // separately, each with a fresh attempt budget.
            let command = Command::Split {
                lease,
                from: batch.progress.clone(),
                end,
                half: ((batch.size - batch.rows) / 2).max(1),
                message,
                smaller,
            };
            return self.request(out, command);
        }
        if attempt >= max_attempts {
            // The batch and the operation fail in one commit.
            let error = format!(
                "batch {} failed {attempt} times; last error: {message}",
                lease.ordinal
            );
            let command = Command::FailBatchAndOperation {
                lease,
                message,
                error,
            };
            return self.request(out, command);
        }
        self.request(
            out,
            Command::FailBatch {
                lease,
                message,
                smaller,
            },
        );
    }

    /// The failing batch's attempt is recorded (`state`, with `events`
    /// appended): the batch is no longer this actor's to run, and the store
    /// holds it (or its halves) as a leftover to claim. Returns the backoff
    /// due before that claim.
    pub(super) fn let_go_of_failed_batch(
        &mut self,
        state: Projection,
        events: &'static [&'static str],
        out: &mut Vec<Command>,
        now: Now,
    ) -> Duration {
        let attempt = match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Ending { batch, .. } => u32::try_from(batch.lease.attempt).unwrap_or(u32::MAX),
            _ => 1,
        };
        self.leftovers_possible = true;
        self.projection = state;
        self.procedure = Procedure::None;
        self.transitioned(out, events);
        self.backoff(attempt, now)
    }

    /// After a retried batch's failure: the operation fails when too many
    /// batches fail, else the retry waits out `wait`.
    pub(super) fn retry_or_fail(&mut self, wait: Duration, out: &mut Vec<Command>) {
        if let Some(error) = self.failure_ratio_exceeded() {
            self.phase = Phase::Failing { error };
            self.procedure = Procedure::Settle;
            return;
        }
        self.schedule_step(out, wait);
    }

    /// The operation's failure when too many of its batches' attempts
    /// failed: more than `max_failure_ratio` per planned batch, once ten
    /// batches are planned.
    pub(super) fn failure_ratio_exceeded(&self) -> Option<String> {
        let p = &self.projection;
        let max_ratio = self.settings.max_failure_ratio;
        let over = p.batches_planned >= 10
            && p.batch_failures as f64 / p.batches_planned as f64 > max_ratio;
        over.then(|| {
            format!(
                "{} failed attempts over {} batches exceed the allowed ratio {max_ratio}; last error: {}",
                p.batch_failures,
                p.batches_planned,
                p.last_error.as_deref().unwrap_or("")
            )
        })
    }

    /// The operation is failed in the store: say so, and stop.
    pub(super) fn operation_failed(&mut self, out: &mut Vec<Command>) {
        self.phase = Phase::Idle;
        self.procedure = Procedure::None;
        out.push(Command::Trace(Note::OperationFailed {
            error: self.projection.last_error.clone(),
        }));
        self.stopping = Some(super::phase::Stopping::Released("failed".into()));
    }
}
