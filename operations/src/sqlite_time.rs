//! A time bound compared with a text column on SQLite, where times are text
//! in formats whose text order is not time order ([`crate::Filter`]).

use chrono::{DateTime, Days, Duration, Utc};
use sluice_target::{Ident, Statement};

use crate::shape::Comparison;

/// What a text value must start with to be compared as a time on SQLite: a
/// `YYYY-MM-DD` date (so neither a number, which SQLite would read as a
/// Julian day, nor `now`).
const SQLITE_DATE_PREFIX: &str = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*";

/// Appends `column <operator> at` for SQLite, where a time column holds
/// text in one of several formats (`2025-07-01 12:00:00`,
/// `2025-07-01T12:00:00.250+02:00`, …) that text order does not rank as
/// time. For `<` (the others alike):
///
/// - `column < $day_after_next`: a text range holding every value that
///   could match (no offset moves a time by more than 14 hours), so an
///   index on the column is walked;
/// - the value starts with a `YYYY-MM-DD` date ([`SQLITE_DATE_PREFIX`]):
///   neither a number, which SQLite would read as a Julian day, nor `now`;
/// - `column < $day_before` (a date two days or more before `at`'s is
///   older whatever its offset; most rows of a large delete are decided
///   here, by one text comparison) or else `julianday(column)` compared
///   with `at`'s, exactly to the millisecond (SQLite's own precision),
///   whatever the value's separator, fraction or offset. A value near the
///   bound that SQLite cannot read as a time never matches.
pub(crate) fn sqlite_time_compare(
    statement: Statement,
    column: &Ident,
    operator: Comparison,
    at: DateTime<Utc>,
) -> Statement {
    let (range, sure) = match operator {
        Comparison::Lt | Comparison::Le => (
            Some((" < ", date_text(at.checked_add_days(Days::new(2)), "A"))),
            Some((" < ", date_text(at.checked_sub_days(Days::new(1)), ""))),
        ),
        Comparison::Gt | Comparison::Ge => (
            Some((" >= ", date_text(at.checked_sub_days(Days::new(2)), ""))),
            Some((" >= ", date_text(at.checked_add_days(Days::new(2)), "A"))),
        ),
        Comparison::Eq | Comparison::Ne => (None, None),
    };
    let statement = match range {
        Some((compare, bound)) => statement
            .ident(column)
            .push(compare)
            .value(bound.into())
            .push(" AND "),
        None => statement,
    };
    let statement = statement
        .ident(column)
        .push(" GLOB '")
        .push(SQLITE_DATE_PREFIX)
        .push("' AND (");
    let statement = match sure {
        Some((compare, bound)) => statement
            .ident(column)
            .push(compare)
            .value(bound.into())
            .push(" OR "),
        None => statement,
    };
    statement
        .push("julianday(")
        .ident(column)
        .push(")")
        .push(operator.sql())
        .push("julianday(")
        .value(sqlite_millis(at, operator).into())
        .push("))")
}

/// `at`'s date as `YYYY-MM-DD`, or `beyond` when it is outside the years
/// SQLite reads (0000–9999) or not representable.
fn date_text(at: Option<DateTime<Utc>>, beyond: &str) -> String {
    match at {
        Some(at) if (0..=9999).contains(&chrono::Datelike::year(&at)) => {
            at.format("%Y-%m-%d").to_string()
        }
        _ => beyond.to_owned(),
    }
}

/// `at` as SQLite reads a time, to the millisecond: rounded up for `<` and
/// `>=` and down for `<=` and `>`, so that a stored time (which SQLite
/// rounds to the millisecond) compares with it as with `at` itself.
fn sqlite_millis(at: DateTime<Utc>, operator: Comparison) -> String {
    let below = at.timestamp_subsec_nanos() % 1_000_000;
    let floor = at - Duration::nanoseconds(i64::from(below));
    let at = match operator {
        Comparison::Lt | Comparison::Ge if below > 0 => floor + Duration::milliseconds(1),
        _ => floor,
    };
    at.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}
