//! Batch cursors: positions in the order a batching strategy walks a table.
//!
//! A [`Cursor`] is one value per batching column (one for a single-column key,
//! several for a keyset such as `(created_at, id)`). Cursors compare
//! lexicographically, column by column, which is the order the batching SQL
//! walks (`WHERE (a, b) > ($1, $2) ORDER BY a, b`). Within one column an
//! integer sorts before text, but one operation never mixes the two in a column.
//!
//! In JSON (the form stored in the `operations` and `batches` tables, for an
//! operator to read) a cursor is a plain array such as `[1042]` or
//! `["2026-01-01T00:00:00Z", 77]`. In the binary event log it is encoded with
//! its variant tags, because postcard is not self-describing.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
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
}

impl Cursor {
    /// A single-column cursor at an integer position.
    pub fn int(value: i64) -> Self {
        Cursor(vec![CursorValue::Int(value)])
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
            }
        } else {
            match self {
                CursorValue::Int(v) => {
                    serializer.serialize_newtype_variant("CursorValue", 0, "Int", v)
                }
                CursorValue::Text(v) => {
                    serializer.serialize_newtype_variant("CursorValue", 1, "Text", v)
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
            TaggedValue::deserialize(deserializer).map(|tagged| match tagged {
                TaggedValue::Int(v) => CursorValue::Int(v),
                TaggedValue::Text(v) => CursorValue::Text(v),
            })
        }
    }
}

/// The tagged form used by binary formats.
#[derive(Deserialize)]
enum TaggedValue {
    Int(i64),
    Text(String),
}

/// Reads a bare JSON number or string.
struct PlainValueVisitor;

impl<'de> Visitor<'de> for PlainValueVisitor {
    type Value = CursorValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer or a string")
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = CursorValue> {
        prop_oneof![
            any::<i64>().prop_map(CursorValue::Int),
            ".{0,12}".prop_map(CursorValue::Text)
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
    fn json_rejects_nested_arrays_and_floats() {
        assert!(Cursor::from_json("[[1]]").is_err());
        assert!(Cursor::from_json("[1.5]").is_err());
    }
}
