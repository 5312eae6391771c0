//! Sluice's operations: what a batched operation does to its table.
//!
//! - [`Operation`]: the extension point a new kind implements (its typed
//!   arguments, its [`Shape`] — table, batching strategy, scope — and what it
//!   does to one [`SubBatch`]), registered in a [`Registry`].
//! - [`batching`]: the strategies' SQL (keyset ranges over one or several
//!   columns, loop `LIMIT n` until exhausted), so no operation writes paging.
//! - [`builtin`]: `delete-aged-rows` and `update-in-batches`.
//! - [`enqueue()`]: the checks before an operation is accepted (names against
//!   the catalogue, the planner's plan against full scans).
//! - [`plan()`]: what enqueuing would do, measured without changing anything.
#![warn(missing_docs)]

pub mod batching;
pub mod builtin;
pub mod duration;
mod enqueue;
mod error;
mod operation;
pub mod plan;
mod shape;
mod sqlite_time;
mod sub_batch;
pub mod target;
pub mod window;

pub use builtin::{ArchiveRows, DeleteAgedRows, UpdateInBatches};
pub use duration::{DurationError, format_duration, parse_duration};
pub use enqueue::{
    COUNT_EXACTLY_UP_TO, EnqueueOptions, NamedTarget, NewOperation, RowCount, check, enqueue,
    enqueue_many, on_target,
};
pub use error::OperationError;
pub use operation::{Operation, PreparedOperation, Registry};
pub use plan::{Plan, plan};
pub use shape::{Filter, Shape, Strategy};
pub use sub_batch::{
    Bounds, SubBatch, SubBatchOutcome, SubBatchRequest, SubBatchRows, run_sub_batch,
};
pub use target::{Target, TargetError, check_index, check_target, check_transactional};
