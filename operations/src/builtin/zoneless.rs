//! The cutoff for a time column without a zone (a PostgreSQL `timestamp`
//! or `date`, a MySQL `DATETIME` or `DATE`): its values are wall-clock times
//! in whatever zone the application wrote them in, so the cutoff must be
//! written in that zone too, or rows an offset away from it are misjudged —
//! on a server five hours behind UTC, `--older-than 1h` read as UTC would
//! delete rows a minute old.
//!
//! The zone is the one the store was told (`--db-time-zone`); without one,
//! UTC, and only where the database's own sessions default to UTC: on a
//! server whose sessions write another zone's time, the operation is
//! refused until the operator names the zone.
//!
//! A `date` names a whole day, any time of which its row may have been
//! written: a row is older than the cutoff only when its whole day is, so a
//! date column's cutoff is the start of the cutoff's own day (in that zone).

use chrono::{DateTime, Utc};
use sluice_store::Store;
use sluice_target::CursorValue;

use super::Cutoff;
use crate::error::OperationError;

/// The cutoff `at` for the zoneless column `column` of `table` (`declared`
/// its type), enqueued at `now` for an age written `asked`.
///
/// Errors: [`OperationError::Arguments`] when the store was told no zone
/// and the database's own sessions write another zone than UTC (or one the
/// server cannot convert to), naming it and its offset.
pub(super) async fn cutoff(
    store: &Store,
    table: &str,
    column: &str,
    declared: &str,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
    asked: &str,
) -> Result<Cutoff, OperationError> {
    let cutoff = instant_or_wall_time(store, table, column, declared, at, now, asked).await?;
    if declared != "date" {
        return Ok(cutoff);
    }
    Ok(match cutoff {
        Cutoff::WallTime { at, zone } => Cutoff::WallTime {
            at: at.date().and_time(chrono::NaiveTime::MIN),
            zone,
        },
        Cutoff::Timestamp(at) => Cutoff::Timestamp(start_of_day(store, at).await?),
        other => other,
    })
}

/// The start of the day `at` falls on, in the zone the store's sessions
/// read a date in: on PostgreSQL the session's own (`date_trunc`),
/// elsewhere UTC (the sessions' zone).
async fn start_of_day(store: &Store, at: DateTime<Utc>) -> Result<DateTime<Utc>, OperationError> {
    if let Some(truncated) = store.target().dialect().start_of_day(at)
        && let Some(CursorValue::Timestamp(start)) = store
            .target()
            .fetch_cursor(&truncated, 1)
            .await?
            .and_then(|c| c.0.into_iter().next())
    {
        return Ok(start);
    }
    Ok(at.date_naive().and_time(chrono::NaiveTime::MIN).and_utc())
}

/// [`cutoff`] before a date's whole day is taken into account.
async fn instant_or_wall_time(
    store: &Store,
    table: &str,
    column: &str,
    declared: &str,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
    asked: &str,
) -> Result<Cutoff, OperationError> {
    if let Some(zone) = store.time_zone() {
        return match store.target().dialect().reads_zoneless_in_session_zone() {
            // The session's `TimeZone` reads the column in the zone.
            true => Ok(Cutoff::Timestamp(at)),
            // MySQL compares a `DATETIME` with a bound as written: the
            // bound is the zone's wall-clock time at the cutoff.
            false => {
                let tz: chrono_tz::Tz = zone.parse().map_err(|_| {
                    OperationError::Arguments(format!("unknown time zone `{zone}`"))
                })?;
                Ok(Cutoff::WallTime {
                    at: at.with_timezone(&tz).naive_local(),
                    zone: zone.to_owned(),
                })
            }
        };
    }
    let Some(sessions) = store.target().sessions_zone(&[now, at]).await? else {
        return Ok(Cutoff::Timestamp(at));
    };
    if sessions.is_utc() {
        return Ok(Cutoff::Timestamp(at));
    }
    let effect = match sessions.error_of_utc() {
        Some(error) => {
            format!(": read as UTC, the cutoff of --older-than {asked} would be off by {error}")
        }
        None => String::new(),
    };
    Err(OperationError::Arguments(format!(
        "column `{column}` of `{table}` holds times without a zone ({declared}), which this \
         database's own sessions write in {}, not UTC{effect}; name the zone its values are \
         written in with --db-time-zone (an IANA name such as America/New_York, or UTC if the \
         application writes UTC)",
        sessions.described()
    )))
}
