//! PostgreSQL sessions: what every session of a store sets when it
//! connects (its schema first on the `search_path`, its `TimeZone`), the
//! check that an application's pool keeps Sluice's tables where it says,
//! and whether this database's sessions read an operation's SQL as the
//! session that enqueued it did.

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::connection::ConnectOptions;
use crate::enqueuing_session::SessionMismatch;
use crate::error::DatabaseError;
use crate::sql::Ident;

/// The `application_name` of Sluice's own sessions when the URL names
/// none: the latency budget counts sessions not so named (not beginning
/// with `sluice`) as the application's
/// ([`crate::dialect::health::HealthQueries::application_sessions`]).
pub const SESSION_NAME: &str = "sluice";

/// `connect`, its sessions named [`SESSION_NAME`] unless it names them.
pub(crate) fn named(connect: PgConnectOptions) -> PgConnectOptions {
    match connect.get_application_name() {
        Some(_) => connect,
        None => connect.application_name(SESSION_NAME),
    }
}

/// What every PostgreSQL session of a store sets when it connects
/// ([`ConnectOptions::schema`], [`ConnectOptions::time_zone`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionSettings {
    /// The schema asked for.
    schema: Option<crate::sql::Ident>,
    /// `search_path`, when a schema is asked for: it first, then the
    /// sessions' own (known once [`SessionSettings::prepare`] has run).
    search_path: Option<String>,
    /// `TimeZone`, when one is asked for.
    time_zone: Option<String>,
}

impl SessionSettings {
    /// The settings `options` asks for; an unsafe schema name is refused.
    pub(crate) fn of(options: &ConnectOptions) -> Result<Self, DatabaseError> {
        let schema = match &options.schema {
            Some(schema) => Some(
                crate::sql::Ident::parse(schema)
                    .ok()
                    .filter(|i| i.schema().is_none())
                    .ok_or_else(|| {
                        DatabaseError::BadSetting(format!(
                            "schema `{schema}` is not a plain identifier (letters, digits, `_`)"
                        ))
                    })?,
            ),
            None => None,
        };
        Ok(SessionSettings {
            // Completed by `prepare` with the sessions' own search_path.
            search_path: None,
            schema,
            time_zone: options.time_zone.clone(),
        })
    }

    /// `pool` setting these on each connection it opens.
    pub(crate) fn apply(&self, pool: PgPoolOptions) -> PgPoolOptions {
        if self.search_path.is_none() && self.time_zone.is_none() {
            return pool;
        }
        let settings = self.clone();
        pool.after_connect(move |connection, _| {
            let settings = settings.clone();
            Box::pin(async move { settings.set(connection).await })
        })
    }
}

impl SessionSettings {
    /// On one connection of its own, before any pool opens: creates the
    /// schema if it does not exist (a role that may not create schemas can
    /// still use one made for it; two processes creating it at once both go
    /// on), then applies the settings, so a zone the server does not know
    /// fails here, naming it, rather than as a pool that never connects.
    pub(crate) async fn prepare(
        &mut self,
        connect: &PgConnectOptions,
    ) -> Result<(), DatabaseError> {
        use sqlx::{ConnectOptions as _, Connection as _};
        if self.schema.is_none() && self.time_zone.is_none() {
            return Ok(());
        }
        let mut connection = connect.connect().await?;
        let prepared = async {
            if let Some(schema) = &self.schema {
                let own: String = sqlx::query_scalar("SELECT current_setting('search_path')")
                    .fetch_one(&mut connection)
                    .await?;
                self.search_path = Some(format!("{}, {own}", schema.quoted()));
                let exists: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)",
                )
                .bind(schema.name())
                .fetch_one(&mut connection)
                .await?;
                if !exists {
                    let create = format!("CREATE SCHEMA IF NOT EXISTS {}", schema.quoted());
                    if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(create))
                        .execute(&mut connection)
                        .await
                        && e.as_database_error().and_then(|d| d.code()).as_deref() != Some("23505")
                    {
                        return Err(DatabaseError::from(e));
                    }
                }
            }
            self.set(&mut connection)
                .await
                .map_err(|e| match e.as_database_error() {
                    Some(db) => DatabaseError::BadSetting(db.message().to_owned()),
                    None => DatabaseError::Database(e),
                })
        }
        .await;
        connection.close().await?;
        prepared
    }

    /// Sets the session settings on `connection`.
    pub(crate) async fn set(&self, connection: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
        for (name, value) in [
            ("search_path", &self.search_path),
            ("TimeZone", &self.time_zone),
        ] {
            if let Some(value) = value {
                sqlx::query("SELECT set_config($1, $2, false)")
                    .bind(name)
                    .bind(value)
                    .execute(&mut *connection)
                    .await?;
            }
        }
        Ok(())
    }
}

/// Refuses an application's PostgreSQL pool whose `search_path` names a
/// schema that does not exist ahead of the one its sessions use: Sluice's
/// tables would silently go in the next one (the application's own).
pub async fn check_postgres_search_path(pool: &PgPool) -> Result<(), DatabaseError> {
    let (path, current): (String, Option<String>) =
        sqlx::query_as("SELECT current_setting('search_path'), current_schema()::text")
            .fetch_one(pool)
            .await?;
    let existing: Vec<String> = sqlx::query_scalar("SELECT nspname::text FROM pg_namespace")
        .fetch_all(pool)
        .await?;
    for named in path.split(',').map(|s| s.trim().trim_matches('"')) {
        if Some(named) == current.as_deref() {
            return Ok(());
        }
        if named != "$user" && !named.is_empty() && !existing.iter().any(|e| e == named) {
            return Err(DatabaseError::BadSetting(format!(
                "schema `{named}`, first on the pool's search_path ({path}), does not exist: \
                 Sluice's tables would go in `{}`; create it first",
                current.as_deref().unwrap_or("no schema")
            )));
        }
    }
    Ok(())
}

/// How this database's sessions would read the SQL of an operation
/// `enqueued` by another session, over `table`, otherwise than it did
/// ([`crate::Target::session_mismatch`]).
pub(crate) async fn session_mismatch(
    pool: &sqlx::PgPool,
    enqueued: &crate::EnqueuingSession,
    table: &Ident,
) -> Result<Option<SessionMismatch>, DatabaseError> {
    let (path_here, role_here, row_security): (String, String, bool) = sqlx::query_as(SESSIONS)
        .bind(table.quoted())
        .fetch_one(pool)
        .await?;
    let enqueued_by = enqueued.role.clone();
    if let Some(path) = enqueued
        .search_path
        .clone()
        .filter(|path| *path != path_here)
    {
        let schemas = |json: &str| serde_json::from_str::<Vec<String>>(json).unwrap_or_default();
        return Ok(Some(SessionMismatch::SearchPath {
            enqueued: schemas(&path),
            here: schemas(&path_here),
        }));
    }
    Ok(enqueued_by
        .filter(|role| row_security && *role != role_here)
        .map(|enqueued_by| SessionMismatch::RowSecurity {
            table: table.to_string(),
            enqueued_by,
            here: role_here,
        }))
}

/// This session's path (a JSON array) and role, and whether table `$1`
/// (quoted, resolved along this session's path) has row-level security.
const SESSIONS: &str = "SELECT to_json(current_schemas(false))::text, current_user::text, \
       COALESCE((SELECT c.relrowsecurity FROM pg_catalog.pg_class c \
                 WHERE c.oid = to_regclass($1)), false)";
