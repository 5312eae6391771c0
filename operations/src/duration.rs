//! Human durations as operators type them: `90d`, `12h`, `30m`, `45s`, `250ms`, `2w`.
//!
//! One whole number and one unit; anything else is a [`DurationError`] that
//! repeats the input and says what is accepted.

use std::time::Duration;

/// Why a duration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "malformed duration `{input}`: {reason} (expected a whole number and a unit: ms, s, m, h, d or w, e.g. 90d)"
)]
pub struct DurationError {
    /// The rejected input.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses `input` as a whole number followed by a unit.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let error = |reason| DurationError {
        input: input.to_owned(),
        reason,
    };
    let text = input.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| error("no unit"))?;
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return Err(error(if unit.starts_with('-') {
            "negative durations are not allowed"
        } else {
            "no number"
        }));
    }
    let n: u64 = number.parse().map_err(|_| error("number too large"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 604_800_000,
        _ => return Err(error("unknown unit")),
    };
    let ms = n
        .checked_mul(unit_ms)
        .ok_or_else(|| error("number too large"))?;
    // Keep every duration representable as epoch-millisecond arithmetic.
    if ms > i64::MAX as u64 / 4 {
        return Err(error("number too large"));
    }
    Ok(Duration::from_millis(ms))
}

/// `duration` in the largest unit that divides it (`90d`, `2w`, `250ms`):
/// the one written form of every equal duration, as [`parse_duration`]
/// reads it back. Sub-millisecond parts are dropped.
pub fn format_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    for (unit, size) in [
        ("w", 604_800_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_durations_have_one_written_form_that_reads_back() {
        for (input, written) in [
            ("90d", "90d"),
            ("14d", "2w"),
            ("2w", "2w"),
            ("48h", "2d"),
            ("90m", "90m"),
            ("3600s", "1h"),
            ("1500ms", "1500ms"),
            ("0ms", "0s"),
        ] {
            let parsed = parse_duration(input).unwrap();
            assert_eq!(format_duration(parsed), written, "{input}");
            assert_eq!(parse_duration(written), Ok(parsed), "{input}");
        }
    }

    #[test]
    fn accepts_each_unit() {
        assert_eq!(parse_duration("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1_800)));
        assert_eq!(parse_duration("45s"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn refuses_malformed_input_with_the_reason() {
        for (input, reason) in [
            ("", "no unit"),
            ("90", "no unit"),
            ("d", "no number"),
            ("-5m", "negative durations are not allowed"),
            ("1.5h", "unknown unit"),
            ("10 days", "unknown unit"),
            ("5y", "unknown unit"),
            ("99999999999999999999d", "number too large"),
            ("9999999999999w", "number too large"),
        ] {
            let err = parse_duration(input).unwrap_err();
            assert_eq!(err.reason, reason, "{input}");
            assert!(err.to_string().contains(&format!("`{input}`")));
        }
    }
}
