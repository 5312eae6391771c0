//! Events: the facts an operation's log records, and their binary encoding.
//!
//! Payloads are postcard-encoded behind a format version stored beside them
//! (the `format_version` column). Postcard is compact and its wire format is
//! stable and documented, but it is not self-describing: adding a field to an
//! event changes its encoding. So a released format is frozen: when events
//! change, the new shape gets the next version number, and [`decode`] keeps a
//! decoder for every older version that upgrades its events to the current
//! type. An unknown version or undecodable bytes are a typed
//! [`DecodeError`]; the store attaches the operation id and sequence number.

use serde::{Deserialize, Serialize};

use crate::spec::OperationSpec;
use sluice_target::cursor::Cursor;

/// The database health as last recorded for an operation (what a
/// `throttled` event records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Health {
    /// Full speed.
    Normal,
    /// Slowed to `percent` of full speed (smaller batches, longer pauses).
    Throttled {
        /// Speed as a percentage of normal, 1 to 99.
        percent: u8,
    },
    /// No new sub-batch starts until the signal clears.
    Stopped,
}

/// The format version [`encode`] writes. Version 2 added
/// [`OperationSpec::target`], `target_name`, `fleet` and `fleet_cap` as the last
/// recorded fields of a `created` event's spec; every other event is
/// encoded as in version 1.
pub const FORMAT_VERSION: i32 = 2;

/// One fact in an operation's life. See [`crate::machine`] for when each is legal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// The operation was enqueued with this spec.
    Created(Box<OperationSpec>),
    /// A node started (or took over) running it.
    Started {
        /// The node's name.
        node: String,
    },
    /// A batch was planned and recorded before it runs.
    BatchPlanned {
        /// 1, 2, 3… within the operation.
        ordinal: i64,
        /// Exclusive lower bound (`None`: from the beginning, or a loop batch).
        start: Option<Cursor>,
        /// Inclusive upper bound (`None` for a loop batch).
        end: Option<Cursor>,
        /// The batch size it was planned with.
        size: i64,
    },
    /// A batch's rows were all processed.
    BatchSucceeded {
        /// The batch.
        ordinal: i64,
        /// Rows it changed.
        rows: i64,
        /// How long it took, milliseconds.
        duration_ms: i64,
        /// The batch size the optimiser chose for the next batches, if changed.
        next_batch_size: Option<i64>,
    },
    /// A batch attempt failed.
    BatchFailed {
        /// The batch.
        ordinal: i64,
        /// Which attempt (1-based).
        attempt: i32,
        /// The error, as reported by the database.
        error: String,
        /// The smaller sub-batch size chosen for the retry, if changed.
        next_sub_batch_size: Option<i64>,
    },
    /// The health signal for the operation changed.
    Throttled {
        /// The new signal.
        health: Health,
        /// The indicator and reading behind it.
        reason: Option<String>,
    },
    /// A per-run limit was reached, or the node shut down: continue later.
    Yielded {
        /// Which limit, or why.
        reason: String,
    },
    /// An operator paused it.
    Paused {
        /// Who or what paused it.
        reason: String,
    },
    /// An operator resumed it.
    Resumed,
    /// Every batch is done.
    Finished,
    /// It failed; the error is recorded.
    Failed {
        /// What went wrong.
        error: String,
    },
    /// An operator cancelled it.
    Cancelled {
        /// Who or what cancelled it.
        reason: String,
    },
    /// An operator retried a failed operation.
    Retried,
    /// A range batch that kept failing was cut in two at `at`: batch
    /// `ordinal` now ends at `at` and starts its attempts afresh, and batch
    /// `new_ordinal` takes the rest of its range. (Added after the first
    /// release of format 1 as its last variant, so every earlier payload
    /// still decodes unchanged.)
    BatchSplit {
        /// The batch cut in two.
        ordinal: i64,
        /// Where its first half now ends (inclusive).
        at: Cursor,
        /// The batch holding the second half, `(at, old end]`.
        new_ordinal: i64,
    },
    /// A revert of this ended operation was enqueued: operation `by` puts
    /// back what it changed. The operation stays as it ended. (Added after
    /// `BatchSplit` as the last variant, so earlier payloads decode
    /// unchanged.)
    Reverted {
        /// The revert operation.
        by: i64,
    },
}

/// An event as stored: its place in the log and when it was recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEvent {
    /// The operation it belongs to.
    pub operation_id: i64,
    /// 1, 2, 3… without gaps within the operation.
    pub seq: i64,
    /// Epoch milliseconds.
    pub recorded_at: i64,
    /// The fact.
    pub event: Event,
}

/// Why a stored payload could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Written by a newer Sluice (or garbage in the version column).
    #[error("unknown event format version {0} (this build reads up to {FORMAT_VERSION})")]
    UnknownVersion(i32),
    /// The bytes do not decode as that version's event.
    #[error("event payload is corrupt: {0}")]
    Corrupt(String),
    /// The payload decodes, but not to the kind named in the `kind` column.
    #[error("event payload is a `{payload}` but its kind column says `{column}`")]
    KindMismatch {
        /// The decoded event's kind.
        payload: &'static str,
        /// The stored kind.
        column: String,
    },
}

impl Event {
    /// The snake_case name stored in the `kind` column, for operators' SQL.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Created(_) => "created",
            Event::Started { .. } => "started",
            Event::BatchPlanned { .. } => "batch_planned",
            Event::BatchSucceeded { .. } => "batch_succeeded",
            Event::BatchFailed { .. } => "batch_failed",
            Event::Throttled { .. } => "throttled",
            Event::Yielded { .. } => "yielded",
            Event::Paused { .. } => "paused",
            Event::Resumed => "resumed",
            Event::Finished => "finished",
            Event::Failed { .. } => "failed",
            Event::Cancelled { .. } => "cancelled",
            Event::Retried => "retried",
            Event::BatchSplit { .. } => "batch_split",
            Event::Reverted { .. } => "reverted",
        }
    }
}

/// Encodes an event in the current [`FORMAT_VERSION`].
pub fn encode(event: &Event) -> Vec<u8> {
    postcard::to_stdvec(event).expect("every event is postcard-encodable")
}

/// Decodes a payload stored with `version`, checking it against the `kind` column.
pub fn decode(version: i32, kind: &str, payload: &[u8]) -> Result<Event, DecodeError> {
    let event = match version {
        // A version-1 `created` ends where its spec's `target` begins: a
        // zero byte for each of the four fields added is its `None`.
        1 if kind == "created" => postcard::from_bytes::<Event>(&[payload, &[0, 0, 0, 0]].concat())
            .map_err(|e| DecodeError::Corrupt(e.to_string()))?,
        1 | 2 => postcard::from_bytes::<Event>(payload)
            .map_err(|e| DecodeError::Corrupt(e.to_string()))?,
        other => return Err(DecodeError::UnknownVersion(other)),
    };
    if event.kind() != kind {
        return Err(DecodeError::KindMismatch {
            payload: event.kind(),
            column: kind.to_owned(),
        });
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_kind_check() {
        let event = Event::BatchPlanned {
            ordinal: 3,
            start: Some(Cursor::int(10)),
            end: Some(Cursor::int(20)),
            size: 10,
        };
        let bytes = encode(&event);
        assert_eq!(decode(FORMAT_VERSION, "batch_planned", &bytes), Ok(event));
        assert!(matches!(
            decode(FORMAT_VERSION, "finished", &bytes),
            Err(DecodeError::KindMismatch { .. })
        ));
    }

    #[test]
    fn unknown_version_and_garbage_are_typed_errors() {
        assert_eq!(
            decode(99, "finished", &encode(&Event::Finished)),
            Err(DecodeError::UnknownVersion(99))
        );
        assert!(matches!(
            decode(1, "created", &[0xff, 0xff, 0xff]),
            Err(DecodeError::Corrupt(_))
        ));
        assert!(matches!(
            decode(1, "created", &[]),
            Err(DecodeError::Corrupt(_))
        ));
    }

    /// The version-1 wire format is frozen: these bytes must decode forever.
    #[test]
    fn version_one_bytes_are_stable() {
        assert_eq!(encode(&Event::Finished), vec![9]);
        assert_eq!(
            encode(&Event::Started { node: "n".into() }),
            vec![1, 1, b'n']
        );
        assert_eq!(decode(1, "resumed", &[8]), Ok(Event::Resumed));
    }

    /// A `created` event written by version 1 (no target) decodes with the
    /// spec's target `None`; version 2 keeps a target.
    #[test]
    fn version_one_created_decodes_without_a_target() {
        let mut spec = OperationSpec::new("update-in-batches", "events", vec!["id".into()]);
        spec.estimated_rows = Some(7);
        let v2 = encode(&Event::Created(Box::new(spec.clone())));
        assert!(v2.ends_with(&[0, 0, 0, 0]), "four Nones are the last bytes");
        let v1 = &v2[..v2.len() - 4];
        assert_eq!(
            decode(1, "created", v1),
            Ok(Event::Created(Box::new(spec.clone())))
        );
        spec.target = Some("postgres://app@db-7/app".into());
        spec.target_name = Some("shard-07".into());
        spec.fleet = Some("f1".into());
        spec.fleet_cap = Some(2);
        let with_target = Event::Created(Box::new(spec));
        assert_eq!(decode(2, "created", &encode(&with_target)), Ok(with_target));
    }
}
