//! Progress kept where the data is. When an operation works on a database
//! apart from the store's (`enqueue --target`), the store is its
//! coordinator — plan, leases, events — and the target keeps the progress
//! of each batch run on it in a small table of Sluice's,
//! `sluice_target_progress`, which every sub-batch updates in its own
//! transaction, beside its change. What a target recorded is the truth of
//! what was applied there.
//!
//! A worker that claims a batch in the coordinator adopts it here
//! ([`Target::adopt_batch`]) before its first sub-batch: the row's epoch is
//! raised to the claim's, which fences every older holder out of this
//! database as the coordinator's epoch fences them out of the store, and
//! the worker goes on from the progress the row holds, not from the
//! coordinator's copy (which a crash may have left behind).

use crate::connection::Target;
use crate::cursor::Cursor;
use crate::error::DatabaseError;
use crate::sql::{SqlText, SqlValue, Statement};

/// The progress table; one row per batch of a coordinator, keyed by the
/// coordinator's name and the batch's id there.
pub(crate) const CREATE_PROGRESS_TABLE: &str = "CREATE TABLE IF NOT EXISTS sluice_target_progress (\
     coordinator VARCHAR(64) NOT NULL, id BIGINT NOT NULL, lease_epoch BIGINT NOT NULL, \
     status VARCHAR(16) NOT NULL, start_cursor TEXT, progress_cursor TEXT, \
     rows_affected BIGINT NOT NULL, PRIMARY KEY (coordinator, id))";

/// [`CREATE_PROGRESS_TABLE`] in InnoDB (MySQL, MariaDB).
pub(crate) const CREATE_PROGRESS_TABLE_INNODB: &str = "CREATE TABLE IF NOT EXISTS sluice_target_progress (\
     coordinator VARCHAR(64) NOT NULL, id BIGINT NOT NULL, lease_epoch BIGINT NOT NULL, \
     status VARCHAR(16) NOT NULL, start_cursor TEXT, progress_cursor TEXT, \
     rows_affected BIGINT NOT NULL, PRIMARY KEY (coordinator, id)) ENGINE = InnoDB";

/// The one-row heartbeat a worker watching a target's replicas writes on
/// the target and reads back on each replica, as the store's own.
pub(crate) const CREATE_HEARTBEAT_TABLE: &str = "CREATE TABLE IF NOT EXISTS sluice_heartbeat (\
     id INTEGER NOT NULL PRIMARY KEY CHECK (id = 1), beat_ms BIGINT NOT NULL)";

/// [`CREATE_HEARTBEAT_TABLE`] in InnoDB (MySQL, MariaDB).
pub(crate) const CREATE_HEARTBEAT_TABLE_INNODB: &str = "CREATE TABLE IF NOT EXISTS sluice_heartbeat (\
     id INTEGER NOT NULL PRIMARY KEY CHECK (id = 1), beat_ms BIGINT NOT NULL) ENGINE = InnoDB";

/// Its one row, when it is not there.
const FIRST_BEAT_ON_CONFLICT: &str =
    "INSERT INTO sluice_heartbeat (id, beat_ms) VALUES (1, 0) ON CONFLICT (id) DO NOTHING";
const FIRST_BEAT_IGNORE: &str = "INSERT IGNORE INTO sluice_heartbeat (id, beat_ms) VALUES (1, 0)";

/// A batch's row, written the first time a claim adopts it: from the
/// coordinator's copy, which is then the truth (no sub-batch can have
/// committed on the target without this row).
const FIRST_ADOPTION_ON_CONFLICT: &str = "INSERT INTO sluice_target_progress \
     (coordinator, id, lease_epoch, status, start_cursor, progress_cursor, rows_affected) \
     VALUES ($1, $2, $3, 'running', $4, $5, $6) ON CONFLICT (coordinator, id) DO NOTHING";
const FIRST_ADOPTION_IGNORE: &str = "INSERT IGNORE INTO sluice_target_progress \
     (coordinator, id, lease_epoch, status, start_cursor, progress_cursor, rows_affected) \
     VALUES ($1, $2, $3, 'running', $4, $5, $6)";

/// The claim takes the row: no older epoch's record matches it after this.
const RAISE_EPOCH: &str = "UPDATE sluice_target_progress SET lease_epoch = $3, status = 'running' \
     WHERE coordinator = $1 AND id = $2 AND lease_epoch <= $3";

/// The row's epoch and row count, then its progress.
const READ_EPOCH: &str = "SELECT lease_epoch, rows_affected FROM sluice_target_progress \
     WHERE coordinator = $1 AND id = $2";
const READ_PROGRESS: &str = "SELECT COALESCE(progress_cursor, start_cursor) \
     FROM sluice_target_progress WHERE coordinator = $1 AND id = $2";

/// Whose progress a row records: a coordinator (its name, random and fixed)
/// and one of its batches under one claim.
#[derive(Debug, Clone, Copy)]
pub struct ProgressOwner<'a> {
    /// The coordinator store's name.
    pub coordinator: &'a str,
    /// The batch's id in the coordinator.
    pub batch_id: i64,
    /// The claim's epoch.
    pub epoch: i64,
}

/// What a target's row said when a claim adopted its batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Adopted {
    /// How far the batch's committed sub-batches got on this target (its
    /// start when none did; `None` for a loop batch).
    pub progress: Option<Cursor>,
    /// The rows they changed.
    pub rows: i64,
}

/// One when both of Sluice's tables on a target are there, the
/// heartbeat's row too; an error when either is missing.
const PROGRESS_TABLES_READY: &str = "SELECT COUNT(*) FROM sluice_heartbeat WHERE id = 1 \
     AND NOT EXISTS (SELECT 1 FROM sluice_target_progress WHERE 1 = 0)";

impl Target {
    /// Creates the progress table and the heartbeat table (with its row)
    /// if they are not there: one read when they are (a fleet's targets
    /// after its first enqueue), the statements that create them when the
    /// read fails. A role that may not create them is refused with the
    /// grant it needs ([`DatabaseError::BadSetting`]), nothing changed.
    pub async fn prepare_progress_table(&self) -> Result<(), DatabaseError> {
        let dialect = self.dialect();
        let statement = |text: &'static str| Statement::with_text(SqlText::new(text), vec![]);
        if let Ok(Some(1)) = self.fetch_int(&statement(PROGRESS_TABLES_READY)).await {
            return Ok(());
        }
        let prepared = async {
            self.execute(&statement(dialect.create_progress_table()))
                .await?;
            self.execute(&statement(dialect.create_table_suffixed(
                CREATE_HEARTBEAT_TABLE,
                CREATE_HEARTBEAT_TABLE_INNODB,
            )))
            .await?;
            self.execute(&statement(
                dialect.upsert(FIRST_BEAT_ON_CONFLICT, FIRST_BEAT_IGNORE),
            ))
            .await
        };
        match prepared.await {
            Ok(_) => Ok(()),
            Err(DatabaseError::Database(error)) if is_permission_denied(&error) => {
                Err(DatabaseError::BadSetting(format!(
                    "the target's role may not create Sluice's tables \
                     `sluice_target_progress` and `sluice_heartbeat` ({error}): grant it CREATE on the target's \
                     schema or database (PostgreSQL: `GRANT CREATE ON SCHEMA <schema> TO <role>`; \
                     MySQL: `GRANT CREATE, INSERT, UPDATE, SELECT ON <database>.* TO <user>`), \
                     or create the tables as its owner"
                )))
            }
            Err(error) => Err(error),
        }
    }

    /// Adopts batch `owner.batch_id` for the claim `owner.epoch`, in one
    /// transaction: its row is created from the coordinator's copy
    /// (`start`, `progress`, `rows`) if this target has none, its epoch
    /// raised to the claim's, and what it holds read back. `None` when the
    /// row's epoch is above the claim's: a later claim adopted the batch,
    /// so this one is lost (nothing is changed).
    pub async fn adopt_batch(
        &self,
        owner: ProgressOwner<'_>,
        start: Option<&Cursor>,
        progress: Option<&Cursor>,
        rows: i64,
    ) -> Result<Option<Adopted>, DatabaseError> {
        let json = |cursor: Option<&Cursor>| cursor.map_or(SqlValue::Null, |c| c.to_json().into());
        let key = || -> Vec<SqlValue> {
            vec![
                owner.coordinator.to_owned().into(),
                owner.batch_id.into(),
                owner.epoch.into(),
            ]
        };
        let first = self
            .dialect()
            .upsert(FIRST_ADOPTION_ON_CONFLICT, FIRST_ADOPTION_IGNORE);
        let mut values = key();
        values.extend([json(start), json(progress), rows.into()]);
        let mut tx = self.begin_sub_batch(None).await?;
        tx.execute(&Statement::with_text(SqlText::new(first), values))
            .await?;
        tx.execute(&Statement::with_text(SqlText::new(RAISE_EPOCH), key()))
            .await?;
        let read =
            |text: &'static str| Statement::with_text(SqlText::new(text), key()[..2].to_vec());
        let (epoch, rows) = tx.fetch_pair(&read(READ_EPOCH)).await?;
        if epoch > owner.epoch {
            return Ok(None);
        }
        let progress = tx
            .fetch_text(&read(READ_PROGRESS))
            .await?
            .map(|text| Cursor::from_json(&text))
            .transpose()
            .map_err(|e| {
                DatabaseError::BadSetting(format!(
                    "sluice_target_progress holds a cursor this build cannot read for batch {}: {e}",
                    owner.batch_id
                ))
            })?;
        tx.commit_fused().await?;
        Ok(Some(Adopted { progress, rows }))
    }
}

/// PostgreSQL's `insufficient_privilege` (42501), MySQL's "command
/// denied" (1142) and "access denied to database" (1044), SQLite's
/// read-only database (8).
fn is_permission_denied(error: &sqlx::Error) -> bool {
    let Some(database) = error.as_database_error() else {
        return false;
    };
    if let Some(mysql) = database.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(mysql.number(), 1142 | 1044);
    }
    database
        .code()
        .is_some_and(|code| matches!(code.as_ref(), "42501" | "8"))
}
