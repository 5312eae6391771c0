//! An operation whose SQL means something else in Sluice's sessions than in
//! the database's own, which the operator checked it in: it reads the
//! session's clock (`now()`, `CURRENT_DATE`) where those sessions read it
//! in another zone than Sluice's UTC — psql's `now()` and a zoneless
//! `created_at` agree, Sluice's would be an offset apart — or, on
//! PostgreSQL, it holds a date like `'01/12/2025'` where those sessions read
//! dates day first (`DateStyle`) and Sluice's month first.

use sluice_store::Store;
use sluice_target::Statement;

use super::TargetError;

/// Refuses `statements` (what the operation will run) where they mean
/// something else in Sluice's sessions than in the database's own
/// (`check_clock_reads`, `check_ambiguous_dates`).
///
/// Errors: [`TargetError::ClockInAnotherZone`],
/// [`TargetError::AmbiguousDate`]; [`TargetError::Store`] when the database
/// cannot be asked.
pub async fn check_session_dependent_sql(
    store: &Store,
    statements: &[&Statement],
) -> Result<(), TargetError> {
    check_clock_reads(store, statements).await?;
    check_ambiguous_dates(store, statements).await
}

/// Refuses a date whose day and month PostgreSQL reads in `DateStyle`'s
/// order ([`Statement::ambiguous_date`]) when the database's own sessions
/// read it day first or year first ([`sluice_target::Target::sessions_setting`]) and
/// Sluice's (sqlx's `ISO, MDY`) month first. Other databases read such a
/// date alike in every session.
async fn check_ambiguous_dates(
    store: &Store,
    statements: &[&Statement],
) -> Result<(), TargetError> {
    let Some(date) = statements.iter().find_map(|s| s.ambiguous_date()) else {
        return Ok(());
    };
    let Some(style) = store.target().sessions_setting("DateStyle").await? else {
        return Ok(());
    };
    let upper = style.to_ascii_uppercase();
    let order = if upper.contains("DMY") || (upper.contains("GERMAN") && !upper.contains("MDY")) {
        "day first"
    } else if upper.contains("YMD") {
        "year first"
    } else {
        return Ok(());
    };
    Err(TargetError::AmbiguousDate { date, style, order })
}

/// Refuses `statements` when one reads the session's clock
/// ([`Statement::reads_the_clock`]) and the database's own sessions read it
/// in a zone other than UTC ([`sluice_target::Target::sessions_zone`]) — unless, on
/// PostgreSQL, the store was told the zone (its sessions then read the
/// clock there too). SQLite's clock is UTC in every session.
async fn check_clock_reads(store: &Store, statements: &[&Statement]) -> Result<(), TargetError> {
    let Some(read) = statements.iter().find_map(|s| s.reads_the_clock()) else {
        return Ok(());
    };
    let dialect = store.target().dialect();
    let Some(remedy) = dialect.clock_zone_remedy(store.time_zone().is_some()) else {
        return Ok(());
    };
    let Some(sessions) = store.target().sessions_zone(&[chrono::Utc::now()]).await? else {
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
