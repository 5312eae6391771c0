//! Durable state for Sluice: the operation state machine, its append-only
//! event log and projection, batches, leases and retention, on SQLite (the
//! embedded default) and PostgreSQL (several worker processes).
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
pub mod connection;
pub mod cursor;
pub mod dialect;
mod enqueuing_session;
pub mod error;
pub mod event;
pub mod latency;
pub mod machine;
mod operation_row;
pub mod operator_sql;
pub mod pace;
mod positional;
mod probe;
mod queries;
pub mod rate_limit;
pub mod record;
pub mod schedule;
mod session_defaults;
pub mod spec;
pub mod sql;
mod statements;
mod statistics;
mod store;

mod sub_batch;
mod sub_batch_session;
pub mod target_table;

pub use announce::{Announced, CONTROL_CHANNEL};
pub use batch_machine::{BatchChange, IllegalBatchChange, next_status};
pub use clock::{Clock, ManualClock, SystemClock};
pub use connection::{Backend, ConnectOptions, redact_url};
pub use cursor::{Cursor, CursorValue};
pub use dialect::mysql::sessions::mysql_sessions;
pub use dialect::{Dialect, LoopPick};
pub use enqueuing_session::SessionMismatch;
pub use error::StoreError;
pub use event::{Event, RecordedEvent};
pub use latency::{
    BudgetError, CANARY_FRESH_MS, CanaryReading, LatencyBudget, budget_and_target, budget_for,
};
pub use machine::{Effect, Health, IllegalTransition, OperationStatus, Projection};
pub use operator_sql::{Assignments, Condition, OperatorSqlError};
pub use pace::{PACE_WINDOW_MS, RecentPace};
pub use probe::Probe;
pub use queries::{Appended, Expected, PROMOTE_AFTER_MS};
pub use rate_limit::{HOLD_GRACE_MS, RateLimit, RowsTaken, binding_limit};
pub use record::{Batch, BatchLease, BatchStatus, Lease, NextBatch, OperationRecord};
pub use schedule::{
    FireOutcome, Schedule, ScheduleFire, StoredWindow, Switch, TimedResume, kind_target,
    operation_target,
};
pub use session_defaults::SessionsZone;
pub use spec::{Limits, OperationSpec, Origin, SpecError};
pub use sql::{Ident, IdentError, SqlText, SqlValue, Statement};
pub use store::{Enqueued, ListFilter, Store};
pub use sub_batch::SubBatchTx;
pub use sub_batch_session::{SessionConnection, SubBatchSession};
pub use target_table::{
    ColumnDefinition, DeleteAction, Index, NonTransactional, TableKeys, Trigger,
};
