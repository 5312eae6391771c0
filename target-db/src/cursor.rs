//! Batch cursors: positions in the order a batching strategy walks a table.
//!
//! A [`Cursor`] is one value per batching column (one for a single-column key,
//! several for a keyset such as `(created_at, id)`). The batching SQL walks
//! them in the database's order (`WHERE (a, b) > ($1, $2) ORDER BY a, b`),
//! text by the column's collation, which Sluice does not know: under
//! `en_US` or MySQL's `utf8mb4_general_ci`, `apple` comes before `Banana`.
//! [`Cursor::known_cmp`] is the order where Sluice can know it (integers,
//! timestamps and bytes decide it). `Ord` compares lexicographically, text
//! by its bytes, for sorting and maps only; within one column an integer
//! sorts before text, but one operation never mixes two kinds in a column.
//!
//! In JSON (the form stored in the `operations` and `batches` tables, for an
//! operator to read) a cursor is a plain array such as `[1042]` or
//! `["2026-01-01T00:00:00Z", 77]`; a value of a PostgreSQL `timestamp` or
//! `timestamptz` column is an object, `[{"timestamp": "2026-01-01T00:00:00.000000Z"}, 77]`,
//! so it reads back as a timestamp and not as text, and a binary value is
//! `{"bytes": "0a1b…"}` (hex). In the binary event log a value is encoded
//! with its variant tag (postcard is not self-describing), a timestamp as
//! microseconds since the Unix epoch, PostgreSQL's own precision.

use std::fmt;

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

/// A position in a batching order: one value per batching column.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cursor(pub Vec<CursorValue>);

/// One column's value in a [`Cursor`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CursorValue {
    /// An integer key (row ids, epoch seconds).
    Int(i64),
    /// A text key (ISO-8601 timestamps stored as text, string keys).
    Text(String),
    /// A PostgreSQL `timestamp`/`timestamptz` key, to the microsecond (a
    /// `timestamp` without time zone is read as UTC).
    Timestamp(DateTime<Utc>),
    /// A binary key (MySQL `BINARY`/`VARBINARY`, such as a UUID in 16
    /// bytes; PostgreSQL `bytea`), ordered byte by byte as those are.
    Bytes(Vec<u8>),
}

impl Cursor {
    /// A single-column cursor at an integer position.
    pub fn int(value: i64) -> Self {
        Cursor(vec![CursorValue::Int(value)])
    }

    /// The order of two cursors in the database, where Sluice can know it:
    /// column by column, the first values that differ decide, integers and
    /// timestamps as numbers; `None` when two different texts would, which
    /// the column's collation orders (not their bytes). Texts that are
    /// equal byte for byte are equal under every collation.
    pub fn known_cmp(&self, other: &Cursor) -> Option<std::cmp::Ordering> {
        for (a, b) in self.0.iter().zip(&other.0) {
            if a == b {
                continue;
            }
            return match (a, b) {
                (CursorValue::Text(_), CursorValue::Text(_)) => None,
                _ => Some(a.cmp(b)),
            };
        }
        Some(self.0.len().cmp(&other.0.len()))
    }

    /// How many columns the cursor spans.
    pub fn width(&self) -> usize {
        self.0.len()
    }

    /// The cursor as the JSON array stored in the database.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a cursor always serialises to JSON")
    }

    /// Parses the JSON array form written by [`Cursor::to_json`].
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, value) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match value {
                CursorValue::Int(v) => write!(f, "{v}")?,
                CursorValue::Text(v) => write!(f, "{v:?}")?,
                CursorValue::Timestamp(v) => write!(f, "{}", timestamp_text(v))?,
                CursorValue::Bytes(v) => write!(f, "x'{}'", hex(v))?,
            }
        }
        f.write_str(")")
    }
}

impl Serialize for CursorValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            match self {
                CursorValue::Int(v) => serializer.serialize_i64(*v),
                CursorValue::Text(v) => serializer.serialize_str(v),
                CursorValue::Timestamp(v) => {
                    use serde::ser::SerializeMap;
                    let mut map = serializer.serialize_map(Some(1))?;
                    map.serialize_entry(TIMESTAMP_KEY, &timestamp_text(v))?;
                    map.end()
                }
                CursorValue::Bytes(v) => {
                    use serde::ser::SerializeMap;
                    let mut map = serializer.serialize_map(Some(1))?;
                    map.serialize_entry(BYTES_KEY, &hex(v))?;
                    map.end()
                }
            }
        } else {
            match self {
                CursorValue::Int(v) => {
                    serializer.serialize_newtype_variant("CursorValue", 0, "Int", v)
                }
                CursorValue::Text(v) => {
                    serializer.serialize_newtype_variant("CursorValue", 1, "Text", v)
                }
                CursorValue::Timestamp(v) => serializer.serialize_newtype_variant(
                    "CursorValue",
                    2,
                    "Timestamp",
                    &v.timestamp_micros(),
                ),
                CursorValue::Bytes(v) => {
                    serializer.serialize_newtype_variant("CursorValue", 3, "Bytes", v)
                }
            }
        }
    }
}

impl<'de> Deserialize<'de> for CursorValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            deserializer.deserialize_any(PlainValueVisitor)
        } else {
            TaggedValue::deserialize(deserializer).and_then(|tagged| match tagged {
                TaggedValue::Int(v) => Ok(CursorValue::Int(v)),
                TaggedValue::Text(v) => Ok(CursorValue::Text(v)),
                TaggedValue::Bytes(v) => Ok(CursorValue::Bytes(v)),
                TaggedValue::Timestamp(micros) => DateTime::from_timestamp_micros(micros)
                    .map(CursorValue::Timestamp)
                    .ok_or_else(|| {
                        de::Error::custom(format!("timestamp {micros} µs is out of range"))
                    }),
            })
        }
    }
}

/// The tagged form used by binary formats.
#[derive(Deserialize)]
enum TaggedValue {
    Int(i64),
    Text(String),
    Timestamp(i64),
    Bytes(Vec<u8>),
}

/// The key of a timestamp value's JSON object.
const TIMESTAMP_KEY: &str = "timestamp";

/// The key of a binary value's JSON object (its bytes in lower-case hex).
const BYTES_KEY: &str = "bytes";

/// `bytes` in lower-case hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads [`hex`]'s form.
fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// RFC 3339 in UTC to the microsecond (years outside 0000–9999, which
/// PostgreSQL allows, carry a sign and more digits).
fn timestamp_text(at: &DateTime<Utc>) -> String {
    at.format(TIMESTAMP_FORMAT).to_string()
}

/// Reads [`timestamp_text`]'s form, or any RFC 3339 timestamp.
fn parse_timestamp(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            NaiveDateTime::parse_from_str(text, TIMESTAMP_FORMAT)
                .ok()
                .map(|at| at.and_utc())
        })
}

const TIMESTAMP_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6fZ";

/// Reads a bare JSON number or string.
struct PlainValueVisitor;

impl<'de> Visitor<'de> for PlainValueVisitor {
    type Value = CursorValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer, a string, {\"timestamp\": \"RFC 3339\"} or {\"bytes\": \"hex\"}")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<CursorValue, E> {
        Ok(CursorValue::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<CursorValue, E> {
        i64::try_from(v).map(CursorValue::Int).map_err(|_| {
            E::custom(format!(
                "cursor value {v} does not fit a 64-bit signed integer"
            ))
        })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<CursorValue, E> {
        Ok(CursorValue::Text(v.to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<CursorValue, A::Error> {
        Err(de::Error::custom("a cursor value cannot be an array"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CursorValue, A::Error> {
        let (key, text): (String, String) = map
            .next_entry()?
            .ok_or_else(|| de::Error::custom("an empty object is not a cursor value"))?;
        if map.next_key::<String>()?.is_some() {
            return Err(de::Error::custom(
                "an object cursor value has one key, `timestamp` or `bytes`",
            ));
        }
        match key.as_str() {
            TIMESTAMP_KEY => parse_timestamp(&text)
                .map(CursorValue::Timestamp)
                .ok_or_else(|| de::Error::custom(format!("`{text}` is not an RFC 3339 timestamp"))),
            BYTES_KEY => unhex(&text)
                .map(CursorValue::Bytes)
                .ok_or_else(|| de::Error::custom(format!("`{text}` is not bytes in hex"))),
            _ => Err(de::Error::custom(
                "an object cursor value must be {\"timestamp\": \"RFC 3339\"} or {\"bytes\": \"hex\"}",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = CursorValue> {
        prop_oneof![
            any::<i64>().prop_map(CursorValue::Int),
            ".{0,12}".prop_map(CursorValue::Text),
            // PostgreSQL's timestamp range, to the microsecond.
            (-210_866_803_200_000_000i64..9_214_646_400_000_000i64).prop_map(|micros| {
                CursorValue::Timestamp(DateTime::from_timestamp_micros(micros).unwrap())
            }),
            proptest::collection::vec(any::<u8>(), 0..20).prop_map(CursorValue::Bytes)
        ]
    }

    fn cursor() -> impl Strategy<Value = Cursor> {
        proptest::collection::vec(value(), 1..4).prop_map(Cursor)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn json_round_trip_is_exact(c in cursor()) {
            prop_assert_eq!(Cursor::from_json(&c.to_json()).unwrap(), c);
        }

        #[test]
        fn postcard_round_trip_is_exact(c in cursor()) {
            let bytes = postcard::to_stdvec(&c).unwrap();
            prop_assert_eq!(postcard::from_bytes::<Cursor>(&bytes).unwrap(), c);
        }

        #[test]
        fn the_known_order_is_the_order_unless_two_texts_decide(a in cursor(), b in cursor()) {
            let deciding = a.0.iter().zip(&b.0).find(|(x, y)| x != y);
            match deciding {
                Some((CursorValue::Text(_), CursorValue::Text(_))) => {
                    prop_assert_eq!(a.known_cmp(&b), None)
                }
                _ => prop_assert_eq!(a.known_cmp(&b), Some(a.cmp(&b))),
            }
        }

        #[test]
        fn ordering_is_lexicographic_by_column(a in any::<i64>(), b in any::<i64>(), x in any::<i64>(), y in any::<i64>()) {
            let left = Cursor(vec![CursorValue::Int(a), CursorValue::Int(x)]);
            let right = Cursor(vec![CursorValue::Int(b), CursorValue::Int(y)]);
            prop_assert_eq!(left.cmp(&right), (a, x).cmp(&(b, y)));
        }
    }

    #[test]
    fn json_form_is_a_plain_array() {
        let c = Cursor(vec![
            CursorValue::Text("2026-01-01".into()),
            CursorValue::Int(7),
        ]);
        assert_eq!(c.to_json(), r#"["2026-01-01",7]"#);
    }

    #[test]
    fn json_timestamp_is_tagged_so_it_reads_back_as_a_timestamp() {
        let at = DateTime::parse_from_rfc3339("2026-03-01T12:00:00.25Z")
            .unwrap()
            .with_timezone(&Utc);
        let c = Cursor(vec![CursorValue::Timestamp(at), CursorValue::Int(7)]);
        assert_eq!(
            c.to_json(),
            r#"[{"timestamp":"2026-03-01T12:00:00.250000Z"},7]"#
        );
        assert_eq!(Cursor::from_json(&c.to_json()).unwrap(), c);
        assert!(Cursor::from_json(r#"[{"time":"2026-03-01T12:00:00Z"}]"#).is_err());
        assert!(Cursor::from_json(r#"[{"timestamp":"yesterday"}]"#).is_err());
    }

    #[test]
    fn json_rejects_nested_arrays_and_floats() {
        assert!(Cursor::from_json("[[1]]").is_err());
        assert!(Cursor::from_json("[1.5]").is_err());
    }
}
