//! What a PostgreSQL operation's SQL means depends on the session reading
//! it. An unqualified name — its table, a table its `--where` reads — is
//! the first table of that name along the session's search path, and two
//! roles can have different paths (`"$user", public` with a schema per
//! role, a path set per role or in the URL); a table with row-level
//! security shows each role its own rows, and none to a role that bypasses
//! it. The session that enqueues an operation records its effective path
//! and its role with it (the columns' defaults); a worker whose sessions
//! would read the SQL otherwise would check one set of rows and change
//! another, so it refuses the operation ([`Target::session_mismatch`]).
//!
//! The store keeps what the enqueuing session was ([`EnqueuingSession`]);
//! the target compares its own sessions with it.

use crate::connection::Target;
use crate::error::DatabaseError;
use crate::sql::Ident;

/// What the session that enqueued an operation resolved its SQL through,
/// as the store recorded it (PostgreSQL; `None` fields where nothing was
/// recorded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnqueuingSession {
    /// Its effective search path, a JSON array of schema names.
    pub search_path: Option<String>,
    /// Its role.
    pub role: Option<String>,
}

/// How this store's sessions would read an operation's SQL otherwise than
/// the session that enqueued it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionMismatch {
    /// Names resolve through other schemas here.
    SearchPath {
        /// The schemas the enqueuing session resolved names through, in order.
        enqueued: Vec<String>,
        /// The schemas this store's sessions resolve them through.
        here: Vec<String>,
    },
    /// The operation's table has row-level security, and this store's
    /// sessions run as another role than the enqueuing session did.
    RowSecurity {
        /// The table.
        table: String,
        /// The enqueuing session's role.
        enqueued_by: String,
        /// This store's sessions' role.
        here: String,
    },
}

impl std::fmt::Display for SessionMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionMismatch::SearchPath { enqueued, here } => {
                let shown = |schemas: &[String]| match schemas {
                    [] => "no schema".to_owned(),
                    _ => schemas.join(", "),
                };
                write!(
                    f,
                    "it was enqueued where names resolve through the schemas {}, and this \
                     worker's sessions resolve them through {}, where its SQL may name other \
                     tables: run the worker with the same search_path (the same role, or \
                     options=-csearch_path=… in its URL), or name each table with its schema",
                    shown(enqueued),
                    shown(here)
                )
            }
            SessionMismatch::RowSecurity {
                table,
                enqueued_by,
                here,
            } => write!(
                f,
                "table `{table}` has row-level security and the operation was enqueued by role \
                 `{enqueued_by}`, but this worker runs as `{here}`, which may see other rows: \
                 run the worker as `{enqueued_by}`"
            ),
        }
    }
}

impl Target {
    /// On PostgreSQL, how this target's sessions would read the SQL of an
    /// operation enqueued by `enqueued`, over `table`, otherwise than that
    /// session did: through another search path, or as another role where
    /// `table` has row-level security. `None` when they read it alike, the
    /// enqueuing session is unknown, or on SQLite and MySQL, where a
    /// database's sessions all share its file or database.
    pub async fn session_mismatch(
        &self,
        enqueued: &EnqueuingSession,
        table: &Ident,
    ) -> Result<Option<SessionMismatch>, DatabaseError> {
        self.catalogue().session_mismatch(enqueued, table).await
    }
}
