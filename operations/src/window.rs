//! Run windows: the daily hours in which an operation may work
//! (`--window 00:00-06:00 --time-zone Europe/Paris`), with no I/O.
//!
//! A window is read in its IANA time zone, so it follows daylight saving
//! time: `00:00-06:00 Europe/Paris` is six local hours every day. One whose
//! end is before its start runs overnight (`22:00-04:00`). Outside it no
//! sub-batch starts: the operation actor holds its next one
//! ([`RunWindow::is_open`]), and each worker's scheduler pauses the
//! operation until the next opening ([`RunWindow::next_opening`]), when it
//! is resumed.

use chrono::{DateTime, Duration, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

/// A run window as an operator writes it: the hours (`00:00-06:00`) and
/// the IANA zone they are read in. An [`crate::EnqueueOptions`] field, so
/// a schedule keeps it and each of its operations gets it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WindowOption {
    /// `HH:MM-HH:MM` (seconds allowed).
    pub hours: String,
    /// An IANA time zone (`UTC`, `Europe/Paris`).
    pub time_zone: String,
}

impl WindowOption {
    /// The window it names. Errors name the malformed part.
    pub fn parse(&self) -> Result<RunWindow, WindowError> {
        RunWindow::parse(&self.hours, &self.time_zone)
    }
}

/// A daily window of local time in a time zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunWindow {
    opens: NaiveTime,
    closes: NaiveTime,
    zone: Tz,
}

/// Why a window was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// Not `HH:MM-HH:MM` (seconds allowed: `HH:MM:SS`).
    #[error("invalid run window `{0}`: write it as HH:MM-HH:MM, e.g. 00:00-06:00")]
    Malformed(String),
    /// It opens and closes at the same time.
    #[error("invalid run window `{0}`: it opens and closes at the same time")]
    Empty(String),
    /// Not an IANA time zone.
    #[error("unknown time zone `{0}`: use an IANA name such as Europe/Paris or UTC")]
    UnknownZone(String),
}

impl RunWindow {
    /// Parses `HH:MM-HH:MM` (or with seconds) in the IANA zone `time_zone`.
    pub fn parse(window: &str, time_zone: &str) -> Result<Self, WindowError> {
        let zone: Tz = time_zone
            .trim()
            .parse()
            .map_err(|_| WindowError::UnknownZone(time_zone.to_owned()))?;
        let malformed = || WindowError::Malformed(window.to_owned());
        let (opens, closes) = window.trim().split_once('-').ok_or_else(malformed)?;
        let time = |text: &str| {
            let text = text.trim();
            NaiveTime::parse_from_str(text, "%H:%M:%S")
                .or_else(|_| NaiveTime::parse_from_str(text, "%H:%M"))
                .map_err(|_| malformed())
        };
        let (opens, closes) = (time(opens)?, time(closes)?);
        if opens == closes {
            return Err(WindowError::Empty(window.to_owned()));
        }
        Ok(RunWindow {
            opens,
            closes,
            zone,
        })
    }

    /// The window as written: `00:00-06:00`, and its zone's name.
    pub fn text(&self) -> (String, String) {
        let time = |t: NaiveTime| {
            if t.format("%S").to_string() == "00" {
                t.format("%H:%M").to_string()
            } else {
                t.format("%H:%M:%S").to_string()
            }
        };
        (
            format!("{}-{}", time(self.opens), time(self.closes)),
            self.zone.name().to_owned(),
        )
    }

    /// Whether the window is open at `at`.
    pub fn is_open(&self, at: DateTime<Utc>) -> bool {
        let local = at.with_timezone(&self.zone).time();
        if self.opens < self.closes {
            self.opens <= local && local < self.closes
        } else {
            local >= self.opens || local < self.closes
        }
    }

    /// The first moment at or after `at` when the window is open: `at`
    /// itself when it is open, else its next opening (a local opening time
    /// that a daylight-saving jump skips opens when the clock reaches it).
    pub fn next_opening(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        if self.is_open(at) {
            return at;
        }
        let today = at.with_timezone(&self.zone).date_naive();
        for day in 0..=2 {
            let date = today + Duration::days(day);
            let local = date.and_time(self.opens);
            let opening = match self.zone.from_local_datetime(&local).earliest() {
                Some(opening) => opening.with_timezone(&Utc),
                // Skipped by a jump forward: the first minute after it.
                None => (1..=180)
                    .find_map(|m| {
                        self.zone
                            .from_local_datetime(&(local + Duration::minutes(m)))
                            .earliest()
                    })
                    .map_or(at, |t| t.with_timezone(&Utc)),
            };
            if opening > at {
                return opening;
            }
        }
        at + Duration::days(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn a_window_is_read_in_its_zone() {
        let night = RunWindow::parse("00:00-06:00", "Europe/Paris").unwrap();
        // Paris is UTC+1 in winter: 23:30 UTC is 00:30 there.
        assert!(night.is_open(utc("2026-12-01T23:30:00Z")));
        assert!(!night.is_open(utc("2026-12-01T05:00:00Z")), "06:00 local");
        assert!(night.is_open(utc("2026-12-01T04:59:59Z")));
        assert_eq!(
            night.next_opening(utc("2026-12-01T05:00:00Z")),
            utc("2026-12-01T23:00:00Z")
        );
        // Summer time: UTC+2.
        assert_eq!(
            night.next_opening(utc("2026-07-01T12:00:00Z")),
            utc("2026-07-01T22:00:00Z")
        );
    }

    #[test]
    fn an_overnight_window_spans_midnight() {
        let window = RunWindow::parse("22:00-04:00", "UTC").unwrap();
        assert!(window.is_open(utc("2026-12-01T23:00:00Z")));
        assert!(window.is_open(utc("2026-12-02T03:59:00Z")));
        assert!(!window.is_open(utc("2026-12-02T04:00:00Z")));
        assert!(!window.is_open(utc("2026-12-02T21:59:59Z")));
        assert_eq!(
            window.next_opening(utc("2026-12-02T04:00:00Z")),
            utc("2026-12-02T22:00:00Z")
        );
        let open = utc("2026-12-02T01:00:00Z");
        assert_eq!(window.next_opening(open), open, "open now");
    }

    #[test]
    fn an_opening_skipped_by_daylight_saving_opens_after_the_jump() {
        // 2026-03-29 02:00 does not exist in Paris (clocks go to 03:00).
        let window = RunWindow::parse("02:30-05:00", "Europe/Paris").unwrap();
        assert_eq!(
            window.next_opening(utc("2026-03-28T23:00:00Z")),
            utc("2026-03-29T01:00:00Z"),
            "03:00 local, summer time"
        );
    }

    #[test]
    fn bad_windows_and_zones_are_refused_by_name() {
        for (window, zone, says) in [
            (
                "00:00-06:00",
                "Mars/Olympus",
                "unknown time zone `Mars/Olympus`",
            ),
            ("0-6", "UTC", "write it as HH:MM-HH:MM"),
            ("24:00-06:00", "UTC", "write it as HH:MM-HH:MM"),
            ("06:00", "UTC", "write it as HH:MM-HH:MM"),
            ("06:00-06:00", "UTC", "opens and closes at the same time"),
        ] {
            let error = RunWindow::parse(window, zone).unwrap_err().to_string();
            assert!(error.contains(says), "{window} {zone}: {error}");
        }
        let seconds = RunWindow::parse(" 01:00:30 - 02:00 ", "UTC").unwrap();
        assert_eq!(seconds.text(), ("01:00:30-02:00".into(), "UTC".into()));
    }
}
