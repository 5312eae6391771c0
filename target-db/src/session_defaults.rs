//! What a database's own sessions default to where Sluice's sessions do
//! not (sqlx sets `TimeZone` UTC and PostgreSQL's `DateStyle` `ISO, MDY`
//! on every connection): the zone times without a zone are read and
//! written in (a PostgreSQL `timestamp` or `date`, a MySQL `DATETIME` or
//! `DATE`: what `now()` writes into such a column), and on PostgreSQL the
//! order an ambiguous date like `01/12/2025` is read in. And the server's
//! clock, which the cutoffs of aged rows are measured from when the
//! caller's runs ahead of it.
//!
//! On a server whose sessions default to another zone, an application
//! writing `now()` stores that zone's wall time, and a bound read as UTC
//! would be off by the zone's offset; on one reading dates day first, an
//! operator's `'01/12/2025'` is the 1st of December in psql and the 12th of
//! January to Sluice. This module reads the defaults, so the caller can
//! refuse.

use chrono::{DateTime, Utc};

use crate::connection::Target;
use crate::error::DatabaseError;

/// The zone a database's own sessions write zoneless times in, with its
/// offset from UTC at the instants asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionsZone {
    /// The zone as the server names it (`America/New_York`, `SYSTEM (EST)`,
    /// `-05:00`).
    pub name: String,
    /// Seconds ahead of UTC at each instant asked about, in order; `None`
    /// where the server could not say (a zone it cannot convert to).
    pub offsets: Vec<Option<i64>>,
}

impl SessionsZone {
    /// Whether the zone is UTC at every instant asked about.
    pub fn is_utc(&self) -> bool {
        self.offsets.iter().all(|o| *o == Some(0))
    }

    /// The largest offset from UTC seen, in seconds (`None` when the server
    /// could not say for some instant).
    pub fn largest_offset(&self) -> Option<i64> {
        self.offsets
            .iter()
            .try_fold(0_i64, |most, o| o.map(|o| most.max(o.abs())))
    }

    /// The zone as an operator reads it: `America/New_York (UTC-05:00 at
    /// the first instant asked about)`, or that the server cannot convert to it.
    pub fn described(&self) -> String {
        match self.offsets.first().copied().flatten() {
            Some(offset) => format!("{} ({} now)", self.name, utc_offset(offset)),
            None => format!("{}, which the server cannot convert times to", self.name),
        }
    }

    /// By how much a time read as UTC would be off: `5h`, `5h30m`, `45m`
    /// (`None` when the server could not say).
    pub fn error_of_utc(&self) -> Option<String> {
        let minutes = self.largest_offset()? / 60;
        Some(match (minutes / 60, minutes % 60) {
            (h, 0) => format!("{h}h"),
            (0, m) => format!("{m}m"),
            (h, m) => format!("{h}h{m}m"),
        })
    }
}

/// `UTC+02:00`, `UTC-05:00` for an offset in seconds.
fn utc_offset(seconds: i64) -> String {
    let sign = if seconds < 0 { '-' } else { '+' };
    let minutes = seconds.abs() / 60;
    format!("UTC{sign}{:02}:{:02}", minutes / 60, minutes % 60)
}

impl Target {
    /// The database server's clock now (on SQLite, which runs in this
    /// process, this machine's). A cutoff computed from a client's clock
    /// that runs ahead of it would count young rows as aged.
    ///
    /// Errors: the database's.
    pub async fn database_now(&self) -> Result<DateTime<Utc>, DatabaseError> {
        self.catalogue().database_now().await
    }

    /// On PostgreSQL, the value the database's own sessions take for the
    /// setting `name` (`TimeZone`, `DateStyle`): the database's own
    /// (`ALTER DATABASE … SET`), else the server's configuration files' where
    /// the role may read them (`pg_file_settings`: superusers and
    /// `pg_read_all_settings`); `None` when neither says, or elsewhere. A
    /// role's own setting is not seen.
    ///
    /// Errors: the database's, on reading its catalogue.
    pub async fn sessions_setting(&self, name: &str) -> Result<Option<String>, DatabaseError> {
        self.catalogue().sessions_setting(name).await
    }

    /// The zone the database's own sessions write zoneless times in, and its
    /// offset from UTC at each of `at`; `None` on SQLite, whose times are
    /// text. On PostgreSQL: `TimeZone` as [`Target::sessions_setting`] reads
    /// it, else `log_timezone` (which `initdb` sets alike). On MySQL:
    /// `@@global.time_zone`.
    ///
    /// Errors: the database's, on reading its settings.
    pub async fn sessions_zone(
        &self,
        at: &[DateTime<Utc>],
    ) -> Result<Option<SessionsZone>, DatabaseError> {
        self.catalogue().sessions_zone(at).await
    }
}

#[cfg(test)]
mod tests {
    use super::SessionsZone;

    #[test]
    fn only_a_zone_at_utc_at_every_instant_is_utc() {
        let zone = |offsets: Vec<Option<i64>>| SessionsZone {
            name: "z".into(),
            offsets,
        };
        assert!(zone(vec![Some(0), Some(0)]).is_utc());
        // London: UTC in winter, an hour ahead in summer.
        assert!(!zone(vec![Some(0), Some(3_600)]).is_utc());
        assert!(!zone(vec![Some(0), None]).is_utc());
        assert_eq!(
            zone(vec![Some(-18_000), Some(-14_400)]).largest_offset(),
            Some(18_000)
        );
        assert_eq!(zone(vec![Some(0), None]).largest_offset(), None);
    }
}
