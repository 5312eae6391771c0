//! On SQLite, which keeps times as text: whether a column compared with a
//! time holds text in one format Sluice compares exactly.

use sluice_store::Store;
use sluice_target::{CursorValue, Ident, Statement};

use super::TargetError;

/// Why a time column cannot be compared with a time ([`TargetError::UnreadableTime`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimeColumnProblem {
    /// It holds numbers (or blobs), which SQLite would read as Julian days.
    #[error(
        "it holds values that are not text; compare with the value it stores instead \
         (e.g. `cutoff.timestamp()` for a column of epoch seconds)"
    )]
    NotText,
    /// It holds text that names no time in a known format.
    #[error(
        "it holds text in no time format Sluice compares (ISO-8601 `2025-07-01T12:00:00+00:00` \
         or SQLite's `2025-07-01 12:00:00`, with or without a fraction and an offset, or a date \
         `2025-07-01`); rewrite those values in one of them, or scope the operation otherwise"
    )]
    UnknownFormat,
    /// It holds times in more than one format.
    #[error(
        "it holds times in more than one format; rewrite them in one first (e.g. \
         `UPDATE <table> SET <column> = strftime('%Y-%m-%d %H:%M:%f', <column>)`)"
    )]
    MixedFormats,
}

/// The arguments of one `replace(…)` each, making every digit a 9.
const DIGITS: [&str; 9] = [
    ", '0', '9')",
    ", '1', '9')",
    ", '2', '9')",
    ", '3', '9')",
    ", '4', '9')",
    ", '5', '9')",
    ", '6', '9')",
    ", '7', '9')",
    ", '8', '9')",
];

/// How many values of a time column [`check_time_column`] reads.
pub const TIME_SAMPLE_ROWS: i64 = 10_000;

/// On SQLite, samples the first [`TIME_SAMPLE_ROWS`] values of `column`
/// and refuses comparing it with a time unless every one is text in one
/// known format ([`time_text_format`]). The comparison itself is exact for
/// any value SQLite reads as a time and never matches one it cannot read
/// (see [`crate::Filter`]), so a value outside the sample in another format
/// is judged right or left alone; the check stops an operator whose column
/// does not hold what they think it does. PostgreSQL compares in the
/// column's type and refuses a type that is not a time when it plans.
pub async fn check_time_column(
    store: &Store,
    table: &Ident,
    column: &Ident,
) -> Result<(), TargetError> {
    if !store.target().dialect().compares_times_as_text() {
        return Ok(());
    }
    // One example per (storage class, shape with every digit a 9).
    let examples = Statement::new(
        "SELECT group_concat(example, char(10)) FROM (SELECT typeof(v) || ' ' || CAST(min(v) AS TEXT) \
         AS example FROM (SELECT ",
    )
    .ident(column)
    .push(" AS v FROM ")
    .ident(table)
    .push(" WHERE ")
    .ident(column)
    .push(" IS NOT NULL LIMIT ")
    .value(TIME_SAMPLE_ROWS.into())
    .push(") GROUP BY typeof(v), ");
    let examples = DIGITS
        .iter()
        .fold(examples, |s, _| s.push("replace("))
        .push("CAST(v AS TEXT)");
    let examples = DIGITS
        .iter()
        .fold(examples, |s, digit| s.push(digit))
        .push(" LIMIT 8)");
    let Some(CursorValue::Text(examples)) = store
        .target()
        .fetch_cursor(&examples, 1)
        .await?
        .and_then(|c| c.0.into_iter().next())
    else {
        return Ok(());
    };
    let mut seen = Vec::new();
    let mut formats = Vec::new();
    let mut problem = None;
    for example in examples.lines() {
        let (storage, value) = example.split_once(' ').unwrap_or((example, ""));
        let format = (storage == "text")
            .then(|| time_text_format(value))
            .flatten();
        seen.push(match format {
            Some(format) => format!("`{value}` ({format})"),
            None if storage == "text" => format!("`{value}`"),
            None => format!("`{value}` ({storage})"),
        });
        match format {
            _ if storage != "text" => problem = Some(TimeColumnProblem::NotText),
            None => {
                problem.get_or_insert(TimeColumnProblem::UnknownFormat);
            }
            Some(format) if !formats.contains(&format) => formats.push(format),
            Some(_) => {}
        }
    }
    if problem.is_none() && formats.len() > 1 {
        problem = Some(TimeColumnProblem::MixedFormats);
    }
    match problem {
        Some(problem) => Err(TargetError::UnreadableTime {
            table: table.to_string(),
            column: column.to_string(),
            problem,
            seen,
        }),
        None => Ok(()),
    }
}

/// The format of a text time Sluice compares exactly on SQLite, by name, or
/// `None`: a `YYYY-MM-DD` date, alone or followed by `T` or a space, then
/// `HH:MM`, optional `:SS`, an optional fraction and an optional offset
/// (`Z` or `±HH:MM`). Two values are in the same format when they share
/// the date–time separator and whether they carry an offset.
pub fn time_text_format(value: &str) -> Option<&'static str> {
    let b = value.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        b.get(range.clone())
            .is_some_and(|d| d.len() == range.len() && d.iter().all(u8::is_ascii_digit))
    };
    let date = digits(0..4) && b.get(4) == Some(&b'-') && digits(5..7) && b.get(7) == Some(&b'-');
    if !date || !digits(8..10) {
        return None;
    }
    if b.len() == 10 {
        return Some("a date");
    }
    let iso = match b[10] {
        b'T' => true,
        b' ' => false,
        _ => return None,
    };
    if !(digits(11..13) && b.get(13) == Some(&b':') && digits(14..16)) {
        return None;
    }
    let mut at = 16;
    if b.get(at) == Some(&b':') {
        if !digits(at + 1..at + 3) {
            return None;
        }
        at += 3;
        if b.get(at) == Some(&b'.') {
            let fraction = b[at + 1..]
                .iter()
                .take_while(|d| d.is_ascii_digit())
                .count();
            if fraction == 0 {
                return None;
            }
            at += 1 + fraction;
        }
    }
    let offset = match &b[at..] {
        [] => false,
        [b'Z'] => true,
        [b'+' | b'-', ..] if b.len() == at + 6 => {
            digits(at + 1..at + 3) && b[at + 3] == b':' && digits(at + 4..at + 6) || return None
        }
        _ => return None,
    };
    Some(match (iso, offset) {
        (true, true) => "ISO-8601 with `T` and an offset",
        (true, false) => "ISO-8601 with `T`, no offset",
        (false, true) => "SQLite's `YYYY-MM-DD HH:MM:SS` with an offset",
        (false, false) => "SQLite's `YYYY-MM-DD HH:MM:SS`",
    })
}

#[cfg(test)]
mod tests {
    use super::time_text_format;

    #[test]
    fn known_time_formats_are_named_and_anything_else_is_not() {
        for (value, format) in [
            ("2025-07-01", "a date"),
            ("2025-07-01 12:00:00", "SQLite's `YYYY-MM-DD HH:MM:SS`"),
            ("2025-07-01 12:00:00.125", "SQLite's `YYYY-MM-DD HH:MM:SS`"),
            ("2025-07-01 12:00", "SQLite's `YYYY-MM-DD HH:MM:SS`"),
            (
                "2025-07-01 12:00:00+02:00",
                "SQLite's `YYYY-MM-DD HH:MM:SS` with an offset",
            ),
            ("2025-07-01T12:00:00Z", "ISO-8601 with `T` and an offset"),
            (
                "2025-07-01T12:00:00.123456-05:30",
                "ISO-8601 with `T` and an offset",
            ),
            ("2025-07-01T12:00:00", "ISO-8601 with `T`, no offset"),
        ] {
            assert_eq!(time_text_format(value), Some(format), "{value}");
        }
        for value in [
            "",
            "yesterday",
            "1751328000",
            "2025-7-01",
            "2025-07-01x",
            "2025-07-01T12",
            "2025-07-01T12:00:00.",
            "2025-07-01T12:00:00+0200",
            "2025-07-01T12:00:00 UTC",
            "2025-07-01T12:00:00Zjunk",
        ] {
            assert_eq!(time_text_format(value), None, "{value}");
        }
    }
}
