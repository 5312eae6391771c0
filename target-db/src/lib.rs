//! What Sluice knows and checks about the database it works on — the
//! *target* — apart from Sluice's own state (the `sluice-store` crate).
//!
//! - [`Target`]: one database and its connection policy (the pool, the
//!   PostgreSQL sessions bounded for sub-batches, how many connections
//!   workers keep, the zone zoneless times are written in).
//! - [`dialect`]: one module per database behind [`Dialect`], the
//!   catalogue and the health reads; code outside it asks, it does not
//!   match on the database.
//! - [`Ident`], [`Statement`], [`SqlValue`]: SQL built from validated,
//!   quoted names and bound values, never from formatted input.
//! - [`dialect::TargetTx`]: a sub-batch's transaction, which commits its
//!   change only together with the record of it ([`ProgressRecord`]), in
//!   one transaction on one connection.
#![warn(missing_docs)]

pub mod connection;
pub mod cursor;
pub mod dialect;
mod enqueuing_session;
pub mod error;
pub mod kept_partitions;
pub mod operator_sql;
#[doc(hidden)]
pub mod positional;
mod probe;
pub mod progress;
mod session_defaults;
pub mod sql;
mod statistics;
pub mod target_table;
pub mod undo;

pub use connection::{
    Backend, ConnectOptions, KeptPlace, Target, redact_url, url_without_password,
    with_password_from_env,
};
pub use cursor::{Cursor, CursorValue};
pub use dialect::mysql::sessions::mysql_sessions;
pub use dialect::postgres::sessions::SESSION_NAME;
pub use dialect::{
    Dialect, LockedPartitionDrop, LoopPick, PartitionDrop, ProgressRecord, Recorded,
    TargetConnection, TargetTx,
};
pub use enqueuing_session::{EnqueuingSession, SessionMismatch};
pub use error::DatabaseError;
pub use kept_partitions::{KeptPartition, KeptPartitionError, KeptPartitions, RangeBound, radix36};
pub use operator_sql::{Assignments, Condition, OperatorSqlError};
pub use probe::Probe;
pub use progress::{Adopted, ProgressOwner};
pub use session_defaults::SessionsZone;
pub use sql::{Ident, IdentError, SqlText, SqlValue, Statement};
pub use target_table::{
    ColumnDefinition, DeleteAction, Index, NonTransactional, RangePartition, RangePartitions,
    TableKeys, Trigger,
};
pub use undo::{MoveBack, UndoTable, UndoTableError};
