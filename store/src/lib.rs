//! Sluice's own durable state: the operation state machine, its append-only
//! event log and projection, batches, leases, schedules, switches, limits,
//! windows and retention, on SQLite (the embedded default), PostgreSQL and
//! MySQL/MariaDB (several worker processes).
//!
//! What Sluice knows about the database it works on is the
//! `sluice-target` crate's; the store lives in such a database and answers
//! it as [`Store::target`]. A sub-batch's change and its record commit in
//! one transaction of that database: the store gives the record
//! ([`SubBatchTx`]) to the target's transaction, which commits both or
//! neither.
//!
//! The one entry point is [`Store`]. The state machines — the operation's
//! ([`machine::apply`]) and the batch's ([`batch_machine::next_status`]) —
//! are pure and usable without a database.
#![warn(missing_docs)]

mod announce;
pub mod batch_machine;
mod batch_queries;
mod bulk_enqueue;
pub mod clock;
mod dialect;
pub mod error;
pub mod event;
pub mod latency;
pub mod machine;
mod operation_row;
pub mod pace;
mod partition_drops;
mod queries;
pub mod rate_limit;
pub mod record;
pub mod schedule;
pub mod spec;
mod store;

mod sub_batch;
mod sub_batch_session;
mod target_progress;

pub use announce::{Announced, CONTROL_CHANNEL};
pub use batch_machine::{BatchChange, IllegalBatchChange, next_status};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::StoreError;
pub use event::{Event, RecordedEvent};
pub use latency::{
    BudgetError, CANARY_FRESH_MS, CanaryReading, LatencyBudget, budget_and_target, budget_for,
    canary_key,
};
pub use machine::{Effect, Health, IllegalTransition, OperationStatus, Projection};
pub use pace::{PACE_WINDOW_MS, RecentPace};
pub use partition_drops::DropIntent;
pub use queries::{Appended, Expected, PROMOTE_AFTER_MS};
pub use rate_limit::{HOLD_GRACE_MS, RateLimit, RowsTaken, binding_limit, fleet_target};
pub use record::{Batch, BatchLease, BatchStatus, Lease, NextBatch, OperationRecord};
pub use schedule::{
    FireOutcome, Schedule, ScheduleFire, StoredWindow, Switch, TimedResume, kind_target,
    operation_target,
};
pub use spec::{Limits, OperationSpec, Origin, SpecError};
pub use store::{Enqueued, ListFilter, Store};
pub use sub_batch::SubBatchTx;
pub use sub_batch_session::{SessionConnection, SubBatchSession};
