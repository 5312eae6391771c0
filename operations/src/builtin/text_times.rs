//! What a text or integer time column holds, read from its values: a date
//! naming a whole day, ISO-8601 text in one format, epoch seconds (not
//! milliseconds): delete-aged-rows' cutoff is written in the same form, and
//! a column whose values disagree is refused.

use chrono::{DateTime, Utc};
use sluice_store::Store;
use sluice_target::{CursorValue, Ident, Statement};

use crate::error::OperationError;

/// Whether a text time names a day alone (`2025-07-01`).
pub(super) fn names_a_day(example: &str) -> bool {
    crate::target::time_text_format(example) == Some("a date")
}

/// `at` written with the separator of `example` (`T` or space) and no zone
/// suffix or fraction: text order is then time order against every value of
/// that style, as a value at the cutoff's second with a suffix or fraction
/// sorts after it (not older) and every earlier second sorts before it.
pub(super) fn iso_like(example: &str, at: DateTime<Utc>) -> String {
    let separator = separator_of(example);
    format!(
        "{}{separator}{}",
        at.format("%Y-%m-%d"),
        at.format("%H:%M:%S")
    )
}

/// Refuses a PostgreSQL or MySQL text time column whose values do not all share
/// `example`'s date–time separator, or carry an offset other than UTC's: a
/// text cutoff in one style misjudges values in another (a space sorts
/// before `T`), and `10:00-05:00` sorts before a `12:00` cutoff though it
/// is three hours after it.
/// The first instant an integer time column of a live table must reach
/// for it to be read as epoch seconds: 1980-01-01T00:00:00Z.
pub const EPOCH_SECONDS_FLOOR: i64 = 315_532_800;

/// The instant an integer time column's smallest value must be before for
/// it to be read as epoch seconds: 3000-01-01T00:00:00Z. Milliseconds since
/// 1970 read as seconds are past the year 50,000.
pub const EPOCH_SECONDS_CEILING: i64 = 32_503_680_000;

/// Refuses reading an integer `column` as epoch seconds when its largest
/// value is before [`EPOCH_SECONDS_FLOOR`] — a column of years, days, hours
/// or minutes, whose every row would count as aged and be deleted — or its
/// smallest is after [`EPOCH_SECONDS_CEILING`] — milliseconds or finer, of
/// which no row would ever count as aged, the operation finishing having
/// deleted nothing. (A sentinel such as 2^63 - 1 for "never" is a largest
/// value, and allowed.) One `MIN` and one `MAX`, which an index on the
/// column answers.
pub(super) async fn refuse_other_units(
    store: &Store,
    table: &Ident,
    column: &Ident,
    older_than: &str,
) -> Result<(), OperationError> {
    let end = |statement: Statement, end: &'static str| {
        statement
            .push("CAST(")
            .push(end)
            .push("(")
            .ident(column)
            .push(") AS CHAR(24))")
    };
    let ends = end(Statement::new("SELECT "), "MIN").push(", ");
    let ends = end(ends, "MAX").push(" FROM ").ident(table);
    let Some(ends) = store.target().fetch_cursor(&ends, 2).await? else {
        return Ok(()); // an empty table
    };
    let [smallest, largest] = [&ends.0[0], &ends.0[1]].map(|end| match end {
        CursorValue::Text(text) => text.trim().parse::<i64>().ok(),
        _ => None,
    });
    let read_as = |value: i64| {
        DateTime::from_timestamp(value, 0).map_or_else(
            || "out of any calendar".to_owned(),
            |at| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
    };
    let intro = format!(
        "column `{column}` of `{table}` is an integer, which delete-aged-rows reads as epoch \
         seconds, but its"
    );
    match (smallest, largest) {
        (_, Some(value)) if value < EPOCH_SECONDS_FLOOR => Err(OperationError::Arguments(format!(
            "{intro} largest value, {value}, would be {}: every row would count as older \
                 than {older_than}; store epoch seconds there (not years, days, hours or \
                 minutes), or give the column a time type",
            read_as(value)
        ))),
        (Some(value), _) if value > EPOCH_SECONDS_CEILING => {
            Err(OperationError::Arguments(format!(
                "{intro} smallest value, {value}, would be {}: no row would ever count as older \
                 than {older_than}; store epoch seconds there (not milliseconds or \
                 microseconds), or give the column a time type",
                read_as(value)
            )))
        }
        _ => Ok(()),
    }
}

pub(super) async fn refuse_mixed_formats(
    store: &Store,
    table: &Ident,
    column: &Ident,
    example: &str,
) -> Result<(), OperationError> {
    let separator = separator_of(example).to_string();
    // SQLite has no such operator, and compares a time with text as the
    // instant the text names, whatever its format.
    let Some((matches, differs)) = store.target().dialect().regexp_operators() else {
        return Ok(());
    };
    let other = Statement::new("SELECT ")
        .ident(column)
        .push(" FROM ")
        .ident(table)
        .push(" WHERE length(")
        .ident(column)
        .push(") > 10 AND (substr(")
        .ident(column)
        .push(", 11, 1) <> ")
        .value(separator.into())
        .push(" OR (")
        .ident(column)
        .push(matches)
        .push("'[+-][0-9]{2}:?[0-9]{2}$' AND ")
        .ident(column)
        .push(differs)
        .push("'[+-]00:?00$')) LIMIT 1");
    match store
        .target()
        .fetch_cursor(&other, 1)
        .await?
        .and_then(|c| c.0.into_iter().next())
    {
        Some(CursorValue::Text(found)) => Err(OperationError::Arguments(format!(
            "column `{column}` of `{table}` holds `{found}`, in another style than `{example}` \
             or with an offset other than UTC's: text compares character by character, so a \
             cutoff written one way misjudges it; store every value in one ISO-8601 style in \
             UTC first, or give the column a time type (timestamptz, DATETIME)"
        ))),
        _ => Ok(()),
    }
}

/// The date–time separator of an ISO-8601 text value: a space or `T`.
pub(super) fn separator_of(example: &str) -> char {
    if example.as_bytes().get(10) == Some(&b' ') {
        ' '
    } else {
        'T'
    }
}
