//! What the [`super::Driver`] knows about where its operation is: the
//! actor's mode ([`Phase`]), its role ([`Role`]), the open batch and how it
//! ended, and why the actor winds down.

use std::time::{Duration, Instant};

use sluice_operations::OperationError;
use sluice_store::{Batch, BatchLease, Lease};
use sluice_target::Cursor;

/// The actor's mode. Exactly one batch at a time is this actor's, and it
/// lives inside the phase that works on it, so no batch can be open while
/// the actor is idle or failing.
#[derive(Debug)]
pub enum Phase {
    /// No reading from the health monitor yet: nothing starts on a database
    /// whose health is unknown.
    AwaitingHealth,
    /// No batch is open; the next step opens one.
    Idle,
    /// A step is taking a batch to work on (claiming, planning, or finding
    /// that the operation is done), and what it has learned so far.
    Opening(Opening),
    /// A batch is open; `in_flight` says since when the pool has been
    /// running one of its sub-batches (no second one is sent meanwhile).
    Running {
        /// The open batch.
        batch: ActiveBatch,
        /// When its sub-batch in flight was sent, if one is.
        in_flight: Option<Instant>,
    },
    /// The open batch's sub-batches stopped; its outcome is recorded (and
    /// retried by the next step until the write commits).
    Ending {
        /// The batch whose outcome is recorded.
        batch: ActiveBatch,
        /// How it ended.
        ending: Ending,
    },
    /// The operation's failure is decided; recorded at the next chance and
    /// never dropped (the wind-down records it too).
    Failing {
        /// The error it fails with.
        error: String,
    },
    /// Giving back what the actor holds: its batch, and the operation as
    /// yielded when a limit or a shutdown stopped it.
    WindingDown,
    /// Nothing more happens; the actor stops.
    Stopped,
}

/// What a step opening a batch has learned, so that each store answer
/// resumes the step where it was instead of asking again.
#[derive(Debug, Default)]
pub struct Opening {
    /// The owner reloaded the projection (helpers record their batches there).
    pub reloaded: bool,
    /// Batches for helpers are planned ahead as far as they may be.
    pub ahead_done: bool,
    /// This step planned a batch for anyone to claim (another node may take
    /// it first; then the step waits rather than planning more).
    pub planned: bool,
    /// Where finding the operation done stands.
    pub finish: Finish,
}

/// Finding that an operation is done: every planned batch must have
/// succeeded, counted from the store (helpers record their own).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Not looking.
    #[default]
    No,
    /// The counts are being reloaded.
    Counting,
    /// Every planned batch succeeded: `finished` is recorded.
    Counted,
}

/// Whether this actor holds the operation or helps its holder.
#[derive(Debug, Clone)]
pub enum Role {
    /// Holds the operation's lease: plans batches, records health, yields,
    /// finishes.
    Owner {
        /// The operation's lease, renewed every third of its time to live.
        lease: Lease,
    },
    /// Runs batches the owner planned ahead under their own leases; stops
    /// when none has been left to claim for a third of a lease.
    Helper {
        /// The last moment it had a batch to run.
        busy_at: Instant,
    },
}

/// The batch this actor works on: its claim, its range and how far its
/// committed sub-batches got.
#[derive(Debug, Clone)]
pub struct ActiveBatch {
    /// The claim that fences its writes.
    pub lease: BatchLease,
    /// The range's inclusive end (`None` for a loop batch).
    pub end: Option<Cursor>,
    /// Where the next sub-batch starts.
    pub progress: Option<Cursor>,
    /// Rows in the batch at planning time.
    pub size: i64,
    /// Rows per sub-batch before a throttle.
    pub sub_batch_size: i64,
    /// Rows its committed sub-batches changed.
    pub rows: i64,
    /// Time its sub-batches spent on a worker in this claim.
    pub busy: Duration,
    /// A sub-batch took a whole partition out in this claim (a range batch
    /// goes on after it): its time and rows say nothing of what a batch
    /// of row-by-row changes costs, so it sets no batch size.
    pub took_partition: bool,
}

impl ActiveBatch {
    /// A batch the store just gave this actor (claimed, or planned and
    /// claimed). Refused unless it is running under a lease.
    pub fn claimed(batch: Batch) -> Result<Self, OperationError> {
        let lease = batch.lease().ok_or_else(|| {
            OperationError::Failed(format!(
                "batch {} of operation {} was handed over without a claim",
                batch.ordinal, batch.operation_id
            ))
        })?;
        Ok(ActiveBatch {
            lease,
            progress: batch.progress.or(batch.start),
            end: batch.end,
            size: batch.batch_size,
            sub_batch_size: batch.sub_batch_size,
            rows: batch.rows_affected,
            busy: Duration::ZERO,
            took_partition: false,
        })
    }
}

/// How a batch ended, kept until its outcome is recorded.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// Every sub-batch is done; `next_size` is the batch size its outcome
    /// sets (the sizer observed the batch once, when it ended).
    Succeeded {
        /// The adapted batch size, if this batch adapts it.
        next_size: Option<i64>,
    },
    /// A sub-batch failed: the attempt is recorded as failed, and the batch
    /// retried, split or — its attempts spent — the operation failed.
    Failed {
        /// The sub-batch's error, as recorded.
        message: String,
        /// Whether it ran out of time (only those split a range batch).
        timed_out: bool,
        /// The range could not be cut in two (fewer than two rows left).
        uncut: bool,
    },
}

/// Why the actor is winding down.
#[derive(Debug, Clone, PartialEq)]
pub enum Stopping {
    /// The node shuts down: give the operation back (`yielded`).
    Shutdown,
    /// A run limit was reached: give it back (`yielded`) to continue later.
    Yield(String),
    /// Someone or something else decided (paused, cancelled, taken over,
    /// finished, failed): just stop.
    Released(String),
}
