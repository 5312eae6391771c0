//! What the driver hears and says: its inputs, the answers to its requests
//! and the commands the actor carries out.

use std::time::Duration;

use sluice_operations::{OperationError, SubBatchOutcome, SubBatchRequest};
use sluice_store::{BatchLease, Event, Lease, Projection, RowsTaken};
use sluice_target::Cursor;

use super::phase::ActiveBatch;
use super::trace::Note;
use crate::health::Signal;

/// What happened, as the driver sees it. (An answer carries a projection,
/// so inputs are large; each is moved once per message, never stored.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Input {
    /// The actor started.
    Start,
    /// Make progress if nothing holds the operation back.
    Step,
    /// The pool ran a sub-batch, which took this long on its worker.
    SubBatchDone(Result<SubBatchOutcome, OperationError>, Duration),
    /// The health signal for the operation's table.
    Health(Signal),
    /// Renew leases, look for controls written elsewhere, check limits.
    Tick,
    /// The node shuts down.
    Shutdown,
    /// The answer to the last request.
    Answer(Result<Answer, OperationError>),
}

/// The answer to a request, one variant per request.
#[derive(Debug)]
pub enum Answer {
    /// `Record`: the event and the projection after it.
    Appended {
        /// The event recorded.
        event: Event,
        /// The projection after it.
        state: Projection,
    },
    /// `Reload`: the stored projection, and the epoch of whoever holds the
    /// operation.
    Reloaded {
        /// The stored projection.
        state: Projection,
        /// The holder's lease epoch, if held.
        holder: Option<i64>,
    },
    /// `Claim`: a batch of this operation left pending or orphaned, if any.
    Claimed(Option<ActiveBatch>),
    /// `PlanAhead`: the projection after planning, `None` when no row is left.
    PlannedAhead(Option<Projection>),
    /// `PlanAndClaim`: the batch and the projection, `None` when no row is left.
    PlannedClaimed(Option<(ActiveBatch, Projection)>),
    /// `Complete`: the projection after the outcome, and the next batch when
    /// one was planned and claimed in the same commit.
    Completed {
        /// The projection after it.
        state: Projection,
        /// The next batch, if planned with it.
        next: Option<ActiveBatch>,
    },
    /// `FailBatch`: the projection after the failed attempt.
    BatchFailed(Projection),
    /// `Split`: the projection after the split, `None` when the range has
    /// fewer than two rows left to cut.
    BatchSplit(Option<Projection>),
    /// `FailBatchAndOperation`: the projection after, and whether this
    /// batch's failure is what failed the operation.
    OperationFailed {
        /// The projection after it.
        state: Projection,
        /// Whether the operation failed by this write.
        by_this: bool,
    },
    /// `RenewLease`: the renewed lease.
    Renewed(Lease),
    /// `Dispatch`: whether the pool took the sub-batch.
    Submitted(bool),
    /// `TakeRows`: the wait before the rows may start, and the binding limit.
    RowsTaken(RowsTaken),
    /// `ReadSettings`: what it read.
    SettingsRead {
        /// A rate limit applies.
        rate_limited: bool,
        /// The target's statistics version, when asked for and kept.
        statistics: Option<String>,
    },
    /// `CheckPlan`: the batch query's plan now.
    PlanChecked {
        /// The plan's line that reads the whole target table, if any.
        full_scan: Option<String>,
        /// The whole plan, one line per node.
        plan: Vec<String>,
    },
}

/// What the actor carries out. The first fourteen are requests: the store (or
/// the pool) answers them with an [`Answer`].
#[derive(Debug)]
pub enum Command {
    /// Append `event` under the operation's lease (`None`: a helper's).
    Record {
        /// The event.
        event: Event,
        /// The lease it is fenced by.
        lease: Option<Lease>,
    },
    /// Read the operation's row.
    Reload,
    /// Claim one batch of this operation left pending or orphaned.
    Claim,
    /// Plan the next range batch, pending, for anyone to claim.
    PlanAhead(NextPlan),
    /// Plan the next batch and claim it in one commit.
    PlanAndClaim(NextPlan),
    /// Record the batch's success (and plan and claim `then_plan` with it).
    Complete {
        /// The batch's claim.
        lease: BatchLease,
        /// Rows its sub-batches changed.
        rows: i64,
        /// Time they took.
        busy: Duration,
        /// The batch size it sets, if any.
        next_size: Option<i64>,
        /// The next batch, planned in the same commit when rows are left.
        then_plan: Option<NextPlan>,
    },
    /// Cut a range batch's remaining rows in two halves, each retried with
    /// a fresh attempt budget; answered `None` when they cannot be cut.
    Split {
        /// The batch's claim.
        lease: BatchLease,
        /// Where its remaining rows start.
        from: Option<Cursor>,
        /// Its inclusive end.
        end: Cursor,
        /// Rows in the first half.
        half: i64,
        /// The attempt's error.
        message: String,
        /// Sub-batch size of the halves.
        smaller: Option<i64>,
    },
    /// Record the batch's failed attempt; it is retried.
    FailBatch {
        /// The batch's claim.
        lease: BatchLease,
        /// The attempt's error.
        message: String,
        /// Sub-batch size of the retry.
        smaller: Option<i64>,
    },
    /// Record the batch's last failed attempt and the operation's failure in
    /// one commit.
    FailBatchAndOperation {
        /// The batch's claim.
        lease: BatchLease,
        /// The attempt's error.
        message: String,
        /// The operation's error.
        error: String,
    },
    /// Renew the operation's lease.
    RenewLease(Lease),
    /// Send a sub-batch to the pool.
    Dispatch(SubBatchRequest),
    /// Take a sub-batch's rows from the operation's rate limits (shared by
    /// every worker through the store).
    TakeRows {
        /// The rows the next sub-batch may change.
        rows: i64,
    },
    /// Read again what may change while the operation runs: whether a
    /// rate limit applies (its own, its kind's or everyone's), and with
    /// `statistics` the version of its target's planner statistics.
    ReadSettings {
        /// Read the statistics version too (the owner's plan-drift guard).
        statistics: bool,
    },
    /// Ask the planner how it would run the batch query of `size` rows
    /// after `from` (the plan-drift guard's look; nothing is run).
    CheckPlan {
        /// The operation's cursor.
        from: Option<Cursor>,
        /// The batch size.
        size: i64,
    },
    /// Renew a batch's lease (best effort).
    RenewBatchLease(BatchLease),
    /// Give a batch back to be claimed again (best effort).
    ReleaseBatch(BatchLease),
    /// Send `Step` to the actor after this long.
    ScheduleStep(Duration),
    /// Publish the operation's progress.
    Report,
    /// Say what happened: a span event, a log line, a metric.
    Trace(Note),
    /// Stop the actor.
    Stop,
    /// Fail the actor: its supervisor restarts it from the store.
    Crash(OperationError),
}

impl Command {
    /// Whether the command is answered by an [`Answer`].
    pub fn is_request(&self) -> bool {
        matches!(
            self,
            Command::Record { .. }
                | Command::Reload
                | Command::Claim
                | Command::PlanAhead(_)
                | Command::PlanAndClaim(_)
                | Command::Complete { .. }
                | Command::Split { .. }
                | Command::FailBatch { .. }
                | Command::FailBatchAndOperation { .. }
                | Command::RenewLease(_)
                | Command::Dispatch(_)
                | Command::CheckPlan { .. }
                | Command::TakeRows { .. }
                | Command::ReadSettings { .. }
        )
    }
}

/// The next batch to plan: after `from`, `size` rows, under the owner's lease.
#[derive(Debug, Clone, PartialEq)]
pub struct NextPlan {
    /// The owner's lease.
    pub owner: Lease,
    /// The cursor the batch starts after.
    pub from: Option<Cursor>,
    /// Rows in it.
    pub size: i64,
}
