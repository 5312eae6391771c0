//! Sluice: durable, throttled, batched background operations over database
//! tables, as one dependency.
//!
//! `use sluice::prelude::*;` brings what an operation and an embedding
//! application need: the [`Operation`](prelude::Operation) trait and what it
//! returns ([`Shape`](prelude::Shape), [`Filter`](prelude::Filter),
//! [`SubBatch`](prelude::SubBatch)), the runtime
//! ([`RuntimeBuilder`](prelude::RuntimeBuilder)), the store and its SQL
//! building blocks, and the derive and attribute macros an operation is
//! written with. The crates it is made of are re-exported whole as
//! [`operations`], [`runtime`], [`store`] and [`console`] (the operator
//! console's HTTP API, an axum router to mount).
//!
//! An operation's arguments derive `Serialize` and `Deserialize`: serde's
//! derive names the `serde` crate, so either depend on `serde` too or write
//! `#[serde(crate = "sluice::serde")]` on the type.
#![warn(missing_docs)]

pub use async_trait;
pub use axum;
pub use chrono;
pub use serde;
pub use serde_json;
pub use sluice_console as console;
pub use sluice_operations as operations;
pub use sluice_runtime as runtime;
pub use sluice_store as store;
pub use sluice_target as target;
pub use sqlx;

/// Everything an operation and an embedding need, in one `use`.
pub mod prelude {
    pub use std::time::Duration;

    pub use async_trait::async_trait;
    pub use chrono::{DateTime, Duration as TimeDelta, Utc};
    pub use serde::{Deserialize, Serialize};
    pub use serde_json::json;
    pub use sluice_operations::NewOperation;
    pub use sluice_operations::{
        EnqueueOptions, Filter, Operation, OperationError, Registry, Shape, SubBatch, SubBatchRows,
    };
    pub use sluice_runtime::health::{Signal, indicator_fn};
    pub use sluice_runtime::{
        Idle, Left, Progress, Runtime, RuntimeBuilder, RuntimeConfig, RuntimeError, ScheduleSpec,
        Selection,
    };
    pub use sluice_store::{Limits, OperationRecord, OperationStatus, Store};
    pub use sluice_target::{ConnectOptions, Ident, SqlValue, Statement};
}
