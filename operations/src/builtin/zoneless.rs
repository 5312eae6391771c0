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

use chrono::{DateTime, Utc};
use sluice_store::{Backend, Store};

use super::Cutoff;
use crate::error::OperationError;

/// Whether a column of the declared type (as [`Store::column_type`] reads
/// it, lower-cased) holds times without a zone on `backend`.
pub(super) fn is_zoneless(backend: &Backend, declared: &str) -> bool {
    match backend {
        Backend::Postgres(_) => declared.contains("without time zone") || declared == "date",
        Backend::MySql(_) => declared == "datetime" || declared == "date",
        Backend::Sqlite(_) => false,
    }
}

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
    if let Some(zone) = store.time_zone() {
        return match store.backend() {
            // The session's `TimeZone` reads the column in the zone.
            Backend::Postgres(_) => Ok(Cutoff::Timestamp(at)),
            // MySQL compares a `DATETIME` with a bound as written: the
            // bound is the zone's wall-clock time at the cutoff.
            _ => {
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
    let Some(sessions) = store.sessions_zone(&[now, at]).await? else {
        return Ok(Cutoff::Timestamp(at));
    };
    if sessions.is_utc() {
        return Ok(Cutoff::Timestamp(at));
    }
    let now_offset = match sessions.offsets.first().copied().flatten() {
        Some(offset) => format!(", {} now", utc_offset(offset)),
        None => ", which the server cannot convert times to".into(),
    };
    let effect = match sessions.largest_offset() {
        Some(offset) => format!(
            ": read as UTC, the cutoff of --older-than {asked} would be off by {}",
            hours(offset)
        ),
        None => String::new(),
    };
    Err(OperationError::Arguments(format!(
        "column `{column}` of `{table}` holds times without a zone ({declared}), which this \
         database's own sessions write in {}{now_offset}, not UTC{effect}; name the zone its \
         values are written in with --db-time-zone (an IANA name such as America/New_York, \
         or UTC if the application writes UTC)",
        sessions.name
    )))
}

/// `UTC+02:00`, `UTC-05:00` for an offset in seconds.
fn utc_offset(seconds: i64) -> String {
    let sign = if seconds < 0 { '-' } else { '+' };
    let minutes = seconds.abs() / 60;
    format!("UTC{sign}{:02}:{:02}", minutes / 60, minutes % 60)
}

/// `5h`, `5h30m` for an offset in seconds.
fn hours(seconds: i64) -> String {
    let minutes = seconds.abs() / 60;
    match (minutes / 60, minutes % 60) {
        (h, 0) => format!("{h}h"),
        (0, m) => format!("{m}m"),
        (h, m) => format!("{h}h{m}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_written_as_people_read_them() {
        assert_eq!(utc_offset(-18_000), "UTC-05:00");
        assert_eq!(utc_offset(19_800), "UTC+05:30");
        assert_eq!(utc_offset(0), "UTC+00:00");
        assert_eq!(hours(-18_000), "5h");
        assert_eq!(hours(19_800), "5h30m");
        assert_eq!(hours(2_700), "45m");
    }
}
