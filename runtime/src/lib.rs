//! Sluice's actor runtime, on ractor.
//!
//! The tree, under the [`supervisor::RuntimeSupervisor`]:
//! - the [`reconciler::Reconciler`] claims runnable operations from the store
//!   at start-up and on a short period;
//! - one [`operation::OperationActor`] per running operation plans its
//!   batches from the persisted cursor, records them before they run, and
//!   sends their sub-batches to the pool;
//! - the [`health::HealthMonitor`] polls health indicators and broadcasts
//!   normal / throttle / stop, globally or per table, with hysteresis;
//! - the [`pool::SubBatchPool`] runs sub-batch SQL on a fixed number of
//!   supervised workers, with a statement timeout; operation actors hand
//!   jobs to its workers through its shared [`pool::SubBatchQueue`];
//! - the [`schedule::Scheduler`] fires due schedules ([`schedule::fire_due`]);
//! - with replicas named, [`replicas::ReplicaLag`] is one of the monitor's
//!   indicators: it writes a heartbeat and reads it back on each replica.
//!
//! State lives in the store, never only in a mailbox: every actor rebuilds
//! what it needs from the store when it starts, so a restart or a lost
//! message never loses work. [`RuntimeBuilder`] starts a runtime and returns
//! the [`Runtime`] handle.
#![warn(missing_docs)]

mod announce;
mod builder;
pub mod config;
pub mod context;
pub mod control;
pub mod health;
pub mod indicators;
pub mod innodb_status;
pub mod latency;
pub mod operation;
pub mod pool;
pub mod reconciler;
pub mod replicas;
mod runtime;
pub mod schedule;
pub mod sizing;
pub mod supervisor;
mod targets;

pub use builder::RuntimeBuilder;
pub use config::RuntimeConfig;
pub use context::Progress;
pub use control::{
    Action, ControlError, Controlled, Selection, close_windows, control, is_known_kind,
    pause_until, resume_due,
};
pub use health::{HealthIndicator, Signal, indicator_fn};
pub use operation::PlanCheckEvery;
pub use replicas::{REPLICA_LAG_THRESHOLDS, ReplicaError, ReplicaLag};
pub use runtime::{Idle, Left, Runtime, RuntimeError};
pub use schedule::{Fired, ScheduleError, ScheduleSpec};
pub use sluice_operations::{EnqueueOptions, NewOperation, Operation};
