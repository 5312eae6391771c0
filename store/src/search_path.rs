//! Where a PostgreSQL operation's names resolve. An unqualified name in an
//! operation's SQL — its table, a table its `--where` reads — means the
//! first table of that name along the session's search path, and two roles
//! can have different paths (`"$user", public` with a schema per role, a
//! path set per role or in the URL). The session that enqueues an
//! operation records its effective path with it (the column's default,
//! `current_schemas(false)`); a worker whose sessions resolve names
//! through other schemas would check one table and change another, so it
//! refuses the operation ([`Store::search_path_mismatch`]).

use crate::connection::Backend;
use crate::error::StoreError;
use crate::store::Store;

/// The effective search paths of the session that enqueued an operation
/// and of this store's sessions, when they differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchPathMismatch {
    /// The schemas the enqueuing session resolved names through, in order.
    pub enqueued: Vec<String>,
    /// The schemas this store's sessions resolve them through.
    pub here: Vec<String>,
}

impl std::fmt::Display for SearchPathMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |schemas: &[String]| match schemas {
            [] => "no schema".to_owned(),
            _ => schemas.join(", "),
        };
        write!(
            f,
            "it was enqueued where names resolve through the schemas {}, and this worker's \
             sessions resolve them through {}, where its SQL may name other tables: run the \
             worker with the same search_path (the same role, or options=-csearch_path=… in \
             its URL), or name each table with its schema",
            shown(&self.enqueued),
            shown(&self.here)
        )
    }
}

/// The enqueuing session's path and this session's, as JSON arrays.
const SEARCH_PATHS: &str = "SELECT search_path, to_json(current_schemas(false))::text \
     FROM sluice_operations WHERE id = $1";

impl Store {
    /// On PostgreSQL, how the search path operation `id` was enqueued under
    /// differs from this store's sessions' (`None` when they are the same,
    /// the operation recorded none, or on SQLite and MySQL, where a store's
    /// sessions all share its file or database).
    ///
    /// Errors: [`StoreError::NotFound`] for an unknown id, or the database's.
    pub async fn search_path_mismatch(
        &self,
        id: i64,
    ) -> Result<Option<SearchPathMismatch>, StoreError> {
        let Backend::Postgres(pool) = self.backend() else {
            return Ok(None);
        };
        let (enqueued, here): (Option<String>, String) = sqlx::query_as(SEARCH_PATHS)
            .bind(id)
            .fetch_optional(pool)
            .await?
            .ok_or(StoreError::NotFound(id))?;
        let Some(enqueued) = enqueued.filter(|enqueued| *enqueued != here) else {
            return Ok(None);
        };
        let schemas = |json: &str| serde_json::from_str::<Vec<String>>(json).unwrap_or_default();
        Ok(Some(SearchPathMismatch {
            enqueued: schemas(&enqueued),
            here: schemas(&here),
        }))
    }
}
