//! What the driver says happened ([`Note`]), and how the actor tells it:
//! span events on the operation's run, log lines, metrics.

use std::time::Duration;

use sluice_store::{Health, OperationStatus};
use sluice_telemetry::metrics::Subject;

use super::OperationState;
use super::phase::Stopping;

/// Something worth telling about an operation's run.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// `events` were appended; the operation's status after them.
    Transitioned {
        /// The events' kinds.
        events: Vec<&'static str>,
        /// The status after them.
        status: OperationStatus,
    },
    /// A batch's outcome is recorded.
    BatchClosed {
        /// Its sub-batches' time on workers.
        busy: Duration,
        /// The batch size after it.
        batch_size: i64,
    },
    /// A sub-batch failed; its batch records the attempt.
    SubBatchFailed {
        /// The batch's ordinal.
        ordinal: i64,
        /// Its attempt.
        attempt: i32,
        /// The error.
        message: String,
    },
    /// The open batch was taken over by another worker.
    BatchTakenOver {
        /// Its ordinal.
        ordinal: i64,
    },
    /// The open batch's progress in the store is ahead of the sub-batch
    /// that failed (an earlier one committed though its answer was lost):
    /// the batch is claimed again from there.
    ProgressMoved {
        /// Its ordinal.
        ordinal: i64,
    },
    /// The store could not be used for a sub-batch; it is tried again.
    StoreFault {
        /// Faults in a row.
        faults: u32,
        /// The wait before the next try.
        wait: Duration,
        /// The error.
        error: String,
    },
    /// A range batch that kept timing out is cut in two.
    BatchSplit {
        /// Its ordinal.
        ordinal: i64,
        /// The attempts it took.
        attempt: i32,
    },
    /// The operation failed.
    OperationFailed {
        /// Its recorded error.
        error: Option<String>,
    },
    /// The operation finished.
    Finished {
        /// Rows it changed in all.
        rows: i64,
    },
    /// A health decision was recorded.
    HealthRecorded {
        /// The recorded health.
        health: Health,
        /// Why.
        reason: Option<String>,
        /// The speed obeyed, 0 under a stop.
        percent: u8,
    },
    /// A request met transient database trouble; it is retried.
    DatabaseTrouble {
        /// The error.
        error: String,
    },
    /// The actor winds down.
    Stopping {
        /// Why.
        why: Option<Stopping>,
    },
    /// Giving something back while winding down failed.
    WindDownTrouble {
        /// The error.
        error: String,
    },
    /// The batch query's plan turned into a full scan: the operation fails.
    PlanDrift {
        /// The error it fails with.
        error: String,
    },
    /// The batch query's plan reads the whole table from the run's start
    /// (forced at enqueue, or changed before the run): it goes on.
    PlanScans {
        /// The plan's line that scans.
        line: String,
    },
}

impl OperationState {
    /// Tells `note`.
    pub(super) fn tell(&self, note: Note) {
        let id = self.id;
        match note {
            Note::Transitioned { events, status } => {
                for event in events {
                    tracing::info!(parent: &self.run_span, event, status = status.as_str(), "state transition");
                }
            }
            Note::BatchClosed { busy, batch_size } => {
                self.context.metrics.batch(self.subject(), busy, batch_size);
            }
            Note::SubBatchFailed {
                ordinal,
                attempt,
                message,
            } => {
                let span = &self.batch_span;
                span.record("otel.status_code", "error");
                span.record("otel.status_description", message.as_str());
                tracing::warn!(parent: span, operation = id, ordinal, attempt, error = %message, "sub-batch failed");
            }
            Note::BatchTakenOver { ordinal } => {
                tracing::warn!(operation = id, ordinal, "batch taken over");
            }
            Note::ProgressMoved { ordinal } => {
                tracing::warn!(
                    operation = id,
                    ordinal,
                    "an earlier sub-batch committed though its answer was lost; claiming the batch again from its stored progress"
                );
            }
            Note::StoreFault {
                faults,
                wait,
                error,
            } => {
                tracing::warn!(operation = id, faults, ?wait, error = %error, "the store cannot be used; trying the sub-batch again later");
            }
            Note::BatchSplit { ordinal, attempt } => {
                tracing::warn!(parent: &self.batch_span, operation = id, ordinal, "batch split in two after timing out {attempt} times");
            }
            Note::OperationFailed { error } => {
                self.run_span.record("otel.status_code", "error");
                if let Some(error) = &error {
                    self.run_span
                        .record("otel.status_description", error.as_str());
                }
                tracing::error!(parent: &self.run_span, operation = id, error = ?error, "operation failed");
            }
            Note::Finished { rows } => {
                tracing::info!(operation = id, rows, "operation finished");
            }
            Note::HealthRecorded {
                health,
                reason,
                percent,
            } => {
                tracing::info!(parent: &self.run_span, event = "throttled", health = ?health, reason = reason.as_deref().unwrap_or(""), "health decision");
                self.context.metrics.throttle(self.subject(), percent);
            }
            Note::DatabaseTrouble { error } => {
                tracing::warn!(operation = id, error = %error, "database trouble; retrying");
            }
            Note::Stopping { why } => {
                tracing::info!(parent: &self.run_span, operation = id, why = ?why, "operation actor stopping");
            }
            Note::PlanDrift { error } => {
                tracing::error!(parent: &self.run_span, operation = id, error = %error, "the batch query's plan turned into a full scan");
            }
            Note::PlanScans { line } => {
                tracing::warn!(parent: &self.run_span, operation = id, plan = %line, "the batch query reads the whole table (enqueued with --force, or its index went before this run)");
            }
            Note::WindDownTrouble { error } => {
                tracing::warn!(operation = id, error = %error, "could not give back what the actor holds; the store's leases lapse instead");
            }
        }
    }

    /// Who a measurement is about.
    pub(super) fn subject(&self) -> Subject<'_> {
        let projection = self.driver.projection();
        Subject {
            operation_id: self.id,
            kind: &projection.kind,
            table: &projection.table,
        }
    }
}
