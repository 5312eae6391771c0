//! The extension point: one trait a new operation implements, and the
//! registry the runtime looks kinds up in.
//!
//! An operation says which table and rows it walks ([`Operation::shape`]) and
//! what it does to one sub-batch ([`Operation::run`]); the framework does the
//! paging, the batching, the throttling, the retries and the bookkeeping.
//!
//! ```
//! use async_trait::async_trait;
//! use chrono::{DateTime, Utc};
//! use serde::{Deserialize, Serialize};
//! use sluice_operations::{Filter, Operation, OperationError, Shape, SubBatch};
//!
//! /// Deletes one user's done todos completed before a time.
//! struct DeleteDoneTodos;
//!
//! #[derive(Serialize, Deserialize)]
//! struct Args {
//!     user_id: i64,
//!     before: DateTime<Utc>,
//! }
//!
//! #[async_trait]
//! impl Operation for DeleteDoneTodos {
//!     type Arguments = Args;
//!
//!     fn kind(&self) -> &'static str {
//!         "delete-done-todos"
//!     }
//!
//!     fn shape(&self, args: &Args) -> Result<Shape, OperationError> {
//!         Shape::range("todos", "id")?.scope(
//!             Filter::new()
//!                 .eq("user_id", args.user_id)
//!                 .eq("done", true)
//!                 .lt("completed_at", args.before),
//!         )
//!     }
//!
//!     async fn run(&self, _: &Args, batch: &mut SubBatch<'_>) -> Result<u64, OperationError> {
//!         batch.delete().await
//!     }
//! }
//!
//! let mut registry = sluice_operations::Registry::new();
//! registry.register(DeleteDoneTodos);
//! assert!(registry.kinds().contains(&"delete-done-todos"));
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_store::Store;
use sluice_target::{Dialect, Statement};

use crate::error::OperationError;
use crate::shape::Shape;
use crate::sub_batch::{SubBatch, SubBatchRows};

/// A kind of batched operation.
///
/// Implementations must be idempotent per sub-batch only in the sense the
/// framework needs: [`Operation::run`] changes exactly the rows of the
/// sub-batch it is given (use [`SubBatch::delete`], [`SubBatch::update`] or
/// [`SubBatch::rows_where`]); the framework commits that change together
/// with the batch's progress, so it is applied once. With
/// [`Shape::loop_until_done`], `run` must take the rows it touches out of the
/// scope (delete them, or change a filtered column), or the loop never ends.
#[async_trait]
pub trait Operation: Send + Sync + 'static {
    /// The operation's typed arguments, stored as canonical JSON with the
    /// operation (two enqueues with equal arguments are the same operation
    /// while one is active).
    type Arguments: Serialize + DeserializeOwned + Send + Sync + 'static;

    /// The kind's stable name (`delete-aged-rows`), stored with every operation.
    fn kind(&self) -> &'static str;

    /// The table, batching strategy and scope for these arguments.
    fn shape(&self, arguments: &Self::Arguments) -> Result<Shape, OperationError>;

    /// Does the work for one sub-batch inside its transaction; returns the
    /// rows changed. By default it runs [`Operation::sub_batch_statement`]'s
    /// statement, so an operation that gives one need not write `run`; one
    /// that gives neither fails its first sub-batch, naming its kind.
    async fn run(
        &self,
        arguments: &Self::Arguments,
        sub_batch: &mut SubBatch<'_>,
    ) -> Result<u64, OperationError> {
        match self.sub_batch_statement(arguments, sub_batch.rows())? {
            Some(statement) => sub_batch.execute(&statement).await,
            None => Err(OperationError::Arguments(format!(
                "operation kind `{}` gives neither `run` nor `sub_batch_statement`",
                self.kind()
            ))),
        }
    }

    /// The one statement a sub-batch runs, when the whole of
    /// [`Operation::run`] is that statement (built from `rows`, e.g.
    /// `Ok(Some(rows.delete_statement()))`). Given it, the runtime sends the
    /// change and the record that the sub-batch is done as one statement on
    /// PostgreSQL — one round trip, like a hand-written loop, instead of a
    /// transaction of four — and does not call `run`. The statement must
    /// end inside its top-level `WHERE`, as those `rows` builds do (the
    /// store adds a fence to it, or a `RETURNING`). By default `None`:
    /// `run` is always called.
    fn sub_batch_statement(
        &self,
        _arguments: &Self::Arguments,
        _rows: &SubBatchRows<'_>,
    ) -> Result<Option<Statement>, OperationError> {
        Ok(None)
    }

    /// The columns of the shape's table a sub-batch sets (an `UPDATE`'s
    /// `SET` list): each must be a column the database lets a statement
    /// write — not a generated one, whose write MariaDB ignores with a
    /// warning — which enqueue checks. By default none.
    fn columns_written(&self, _arguments: &Self::Arguments) -> Vec<String> {
        Vec::new()
    }

    /// The tables a sub-batch writes beside the shape's table (an archive
    /// table, say). Each must be transactional as the target must: they are
    /// checked at enqueue and when a worker starts the operation
    /// ([`crate::check_transactional`]). By default none.
    fn other_tables_written(&self, _arguments: &Self::Arguments) -> Vec<String> {
        Vec::new()
    }

    /// The table whose health paces the operation, when it is not the
    /// shape's: the table of the application's that a sub-batch writes,
    /// named as the operation names its tables (a revert walks its undo
    /// table, which the application never reads, and writes the live
    /// one). Its health indicators, latency canary and throttles are the
    /// ones that apply. By default the shape's table.
    fn paced_by(&self, _arguments: &Self::Arguments) -> Option<String> {
        None
    }

    /// What the uniqueness rule compares for these arguments: by default
    /// all of them. A kind whose arguments hold something resolved at
    /// enqueue from what was asked (a cutoff from `older_than: "90d"`)
    /// returns what was asked, so two identical requests a second apart are
    /// one operation.
    fn identity(&self, arguments: &Self::Arguments) -> serde_json::Value {
        serde_json::to_value(arguments).unwrap_or(serde_json::Value::Null)
    }

    /// Turns a schedule's stored arguments into the arguments of the
    /// operation one of its fires enqueues at `now`: a relative age, say,
    /// becomes a cutoff measured from the fire. By default the stored
    /// arguments are used as they are.
    async fn arguments_at(
        &self,
        _store: &Store,
        stored: serde_json::Value,
        _now: DateTime<Utc>,
    ) -> Result<serde_json::Value, OperationError> {
        Ok(stored)
    }
}

/// An operation bound to its decoded arguments, as the runtime runs it.
#[async_trait]
pub trait PreparedOperation: Send + Sync {
    /// The kind's name.
    fn kind(&self) -> &'static str;

    /// The shape its arguments give.
    fn shape(&self) -> &Shape;

    /// Runs one sub-batch.
    async fn run(&self, sub_batch: &mut SubBatch<'_>) -> Result<u64, OperationError>;

    /// The sub-batch as one statement ([`Operation::sub_batch_statement`]).
    fn sub_batch_statement(
        &self,
        rows: &SubBatchRows<'_>,
    ) -> Result<Option<Statement>, OperationError>;

    /// What the uniqueness rule compares ([`Operation::identity`]).
    fn identity(&self) -> serde_json::Value;

    /// Every table a sub-batch writes: the shape's, then
    /// [`Operation::other_tables_written`] (those that are not plain
    /// identifiers are left out; the operation's shape refuses them).
    fn tables_written(&self) -> Vec<sluice_target::Ident>;

    /// The columns of the shape's table a sub-batch sets
    /// ([`Operation::columns_written`]).
    fn columns_written(&self) -> Vec<String>;

    /// The table whose health paces it, when not the shape's
    /// ([`Operation::paced_by`]).
    fn paced_by(&self) -> Option<String>;
}

/// The operation kinds a runtime (or the CLI) knows, by name.
#[derive(Clone, Default)]
pub struct Registry {
    kinds: BTreeMap<&'static str, Arc<dyn ErasedOperation>>,
}

impl Registry {
    /// A registry with no kinds.
    pub fn new() -> Self {
        Registry::default()
    }

    /// A registry with the built-in kinds (`delete-aged-rows`,
    /// `update-in-batches`, `archive-rows`, and `revert`, which
    /// [`crate::builtin::revert`] enqueues).
    pub fn with_builtins() -> Self {
        let mut registry = Registry::new();
        registry.register(crate::builtin::DeleteAgedRows);
        registry.register(crate::builtin::UpdateInBatches);
        registry.register(crate::builtin::ArchiveRows);
        registry.register(crate::builtin::Revert);
        registry
    }

    /// Registers `operation` under its kind, replacing one of the same name.
    pub fn register<O: Operation>(&mut self, operation: O) -> &mut Self {
        self.kinds
            .insert(operation.kind(), Arc::new(Typed(Arc::new(operation))));
        self
    }

    /// The registered kinds' names, sorted.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.kinds.keys().copied().collect()
    }

    /// Binds the kind named `kind` to `arguments` (JSON), its shape writing
    /// SQL for `dialect` (the store's: [`sluice_target::Backend::dialect`]).
    ///
    /// Errors: [`OperationError::UnknownKind`], or
    /// [`OperationError::Arguments`] when the JSON does not fit the kind.
    pub fn prepare(
        &self,
        kind: &str,
        arguments: &str,
        dialect: &'static dyn Dialect,
    ) -> Result<Arc<dyn PreparedOperation>, OperationError> {
        let operation = self.lookup(kind)?;
        operation.prepare(arguments, dialect)
    }

    /// The table whose health paces an operation of `kind` with the
    /// stored `arguments` ([`Operation::paced_by`]), else `table`, its
    /// own: where its canary reading is found.
    pub fn paced_by(&self, kind: &str, arguments: &str, table: &str) -> String {
        self.kinds
            .get(kind)
            .and_then(|operation| operation.paced_by(arguments))
            .unwrap_or_else(|| table.to_owned())
    }

    /// The arguments a fire of a schedule of `kind` enqueues at `now`
    /// ([`Operation::arguments_at`]). Errors: [`OperationError::UnknownKind`]
    /// and the kind's own.
    pub async fn arguments_at(
        &self,
        kind: &str,
        store: &Store,
        stored: serde_json::Value,
        now: DateTime<Utc>,
    ) -> Result<serde_json::Value, OperationError> {
        let operation = self.lookup(kind)?;
        operation.arguments_at(store, stored, now).await
    }
}

impl Registry {
    fn lookup(&self, kind: &str) -> Result<&Arc<dyn ErasedOperation>, OperationError> {
        self.kinds
            .get(kind)
            .ok_or_else(|| OperationError::UnknownKind {
                kind: kind.to_owned(),
                known: self.kinds().iter().map(|k| k.to_string()).collect(),
            })
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.kinds.keys()).finish()
    }
}

/// An operation with its argument type erased, so kinds of different
/// argument types live in one registry.
#[async_trait]
trait ErasedOperation: Send + Sync {
    fn prepare(
        &self,
        arguments: &str,
        dialect: &'static dyn Dialect,
    ) -> Result<Arc<dyn PreparedOperation>, OperationError>;

    async fn arguments_at(
        &self,
        store: &Store,
        stored: serde_json::Value,
        now: DateTime<Utc>,
    ) -> Result<serde_json::Value, OperationError>;

    fn paced_by(&self, arguments: &str) -> Option<String>;
}

struct Typed<O>(Arc<O>);

struct Prepared<O: Operation> {
    operation: Arc<O>,
    arguments: O::Arguments,
    shape: Shape,
}

#[async_trait]
impl<O: Operation> ErasedOperation for Typed<O> {
    async fn arguments_at(
        &self,
        store: &Store,
        stored: serde_json::Value,
        now: DateTime<Utc>,
    ) -> Result<serde_json::Value, OperationError> {
        self.0.arguments_at(store, stored, now).await
    }

    fn paced_by(&self, arguments: &str) -> Option<String> {
        let arguments: O::Arguments = serde_json::from_str(arguments).ok()?;
        self.0.paced_by(&arguments)
    }

    fn prepare(
        &self,
        arguments: &str,
        dialect: &'static dyn Dialect,
    ) -> Result<Arc<dyn PreparedOperation>, OperationError> {
        let arguments: O::Arguments = serde_json::from_str(arguments)
            .map_err(|e| OperationError::Arguments(format!("for `{}`: {e}", self.0.kind())))?;
        let shape = self.0.shape(&arguments)?.for_dialect(dialect)?;
        Ok(Arc::new(Prepared {
            operation: Arc::clone(&self.0),
            arguments,
            shape,
        }))
    }
}

#[async_trait]
impl<O: Operation> PreparedOperation for Prepared<O> {
    fn kind(&self) -> &'static str {
        self.operation.kind()
    }

    fn shape(&self) -> &Shape {
        &self.shape
    }

    async fn run(&self, sub_batch: &mut SubBatch<'_>) -> Result<u64, OperationError> {
        self.operation.run(&self.arguments, sub_batch).await
    }

    fn sub_batch_statement(
        &self,
        rows: &SubBatchRows<'_>,
    ) -> Result<Option<Statement>, OperationError> {
        self.operation.sub_batch_statement(&self.arguments, rows)
    }

    fn identity(&self) -> serde_json::Value {
        self.operation.identity(&self.arguments)
    }

    fn columns_written(&self) -> Vec<String> {
        self.operation.columns_written(&self.arguments)
    }

    fn paced_by(&self) -> Option<String> {
        self.operation.paced_by(&self.arguments)
    }

    fn tables_written(&self) -> Vec<sluice_target::Ident> {
        let others = self.operation.other_tables_written(&self.arguments);
        std::iter::once(self.shape.table().clone())
            .chain(
                others
                    .iter()
                    .filter_map(|t| sluice_target::Ident::parse(t).ok()),
            )
            .collect()
    }
}
