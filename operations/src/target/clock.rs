//! An operation whose SQL reads the session's clock (`now()`,
//! `CURRENT_DATE`) on a database whose own sessions read it in another zone
//! than Sluice's: the operator checks `--where "created_at < now() -
//! interval '1 day'"` in psql or the mysql client, where `now()` and a
//! zoneless `created_at` agree, while Sluice's UTC sessions would read one
//! of them an offset away and change other rows.

use sluice_store::{Backend, Statement, Store};

use super::TargetError;

/// Refuses `statements` (what the operation will run) when one reads the
/// session's clock ([`Statement::reads_the_clock`]) and the database's own
/// sessions read it in a zone other than UTC ([`Store::sessions_zone`]) —
/// unless, on PostgreSQL, the store was told the zone (its sessions then read
/// the clock there too). SQLite's clock is UTC in every session.
///
/// Errors: [`TargetError::ClockInAnotherZone`], naming the read, the zone and
/// what to do; [`TargetError::Store`] when the database cannot be asked.
pub async fn check_clock_reads(
    store: &Store,
    statements: &[&Statement],
) -> Result<(), TargetError> {
    let Some(read) = statements.iter().find_map(|s| s.reads_the_clock()) else {
        return Ok(());
    };
    let remedy = match (store.backend(), store.time_zone()) {
        (Backend::Sqlite(_), _) | (Backend::Postgres(_), Some(_)) => return Ok(()),
        (Backend::Postgres(_), None) => {
            "name the zone with --db-time-zone, and Sluice's sessions read the clock there too"
        }
        (Backend::MySql(_), _) => {
            "write the time out instead, or compare a column holding UTC with UTC_TIMESTAMP()"
        }
    };
    let Some(sessions) = store.sessions_zone(&[chrono::Utc::now()]).await? else {
        return Ok(());
    };
    if sessions.is_utc() {
        return Ok(());
    }
    let effect = match sessions.error_of_utc() {
        Some(error) => format!(": a time without a zone compared with it would be off by {error}"),
        None => String::new(),
    };
    Err(TargetError::ClockInAnotherZone {
        read,
        zone: sessions.described(),
        effect,
        remedy,
    })
}
