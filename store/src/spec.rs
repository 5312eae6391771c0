//! What an operation is asked to do: the input to [`crate::Store::enqueue`].
//!
//! A spec is validated before anything is written ([`OperationSpec::validate`]),
//! its arguments are canonicalised (object keys sorted at every depth) so that
//! two enqueues with the same arguments written in a different key order are
//! the same operation, and its [`OperationSpec::unique_key`] is what the
//! database's partial unique index compares.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use sluice_target::cursor::Cursor;

/// The request to run one operation over one table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationSpec {
    /// The registered operation kind, e.g. `delete-aged-rows`.
    pub kind: String,
    /// The table the operation walks.
    pub table: String,
    /// The batching column(s), in walking order. Empty for loop-based operations.
    pub batching_columns: Vec<String>,
    /// The kind's own arguments, as canonical JSON text (see [`canonical_json`]).
    pub arguments: String,
    /// The first position to process (inclusive), if known at enqueue time.
    pub min_cursor: Option<Cursor>,
    /// The last position to process (inclusive), if bounded.
    pub max_cursor: Option<Cursor>,
    /// Rows per batch at the start; the runtime adapts it.
    pub batch_size: i64,
    /// Rows per sub-batch (one statement) at the start.
    pub sub_batch_size: i64,
    /// Pause between sub-batches, in milliseconds.
    pub pause_ms: i64,
    /// Per-run limits after which the operation yields and continues later.
    pub limits: Limits,
    /// Higher runs first within an origin class.
    pub priority: i32,
    /// Who asked for it: a user, or a schedule.
    pub origin: Origin,
    /// The tenant the operation belongs to, when the host application has tenants.
    pub tenant_id: Option<String>,
    /// The W3C trace context of the operation's trace, so a resumed run joins it.
    pub trace_context: Option<String>,
    /// The number of rows the operation is expected to touch, for percentages and ETA.
    pub estimated_rows: Option<i64>,
    /// The database the operation works on when it is not the store's own
    /// (`enqueue --target`): its URL without a password, which a worker
    /// supplies from its environment ([`crate::Store::on_target`]). `None`: the
    /// store's database. (This and the three below are the last recorded
    /// fields: a version-1 `created` payload, written before them, decodes
    /// with all four `None`.)
    pub target: Option<String>,
    /// The target's name in its fleet (`shard-07`), when it has one.
    pub target_name: Option<String>,
    /// The fleet the operation belongs to: one operation per target of one
    /// `enqueue` over several (`--target` repeated, `--targets FILE`), all
    /// sharing this key; `None` for an operation on one database.
    pub fleet: Option<String>,
    /// At most this many operations of its fleet run at once, across all
    /// workers (`--max-targets-at-once`); `None`: no cap.
    pub fleet_cap: Option<i64>,
    /// What the uniqueness rule compares instead of [`OperationSpec::arguments`],
    /// as canonical JSON: the arguments as the caller asked for them, where
    /// the stored ones also hold what was resolved from them at enqueue (a
    /// cutoff computed from `older_than: "90d"`). Only read when the
    /// operation is enqueued (its hash is stored), so it is not recorded.
    #[serde(skip)]
    pub identity: Option<String>,
}

/// Per-run limits. When one is reached the operation yields: it stays runnable
/// and continues from its persisted cursor on the next run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Longest one run may take, in milliseconds.
    pub max_runtime_ms: Option<i64>,
    /// Most rows one run may process.
    pub max_rows_per_run: Option<i64>,
}

/// Where an operation came from. User-triggered operations start before
/// schedule-triggered ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Origin {
    /// Enqueued by a person or by application code acting for one.
    User,
    /// Enqueued by a cron schedule.
    Schedule,
}

impl Origin {
    /// The lower-case name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::User => "user",
            Origin::Schedule => "schedule",
        }
    }

    /// Parses [`Origin::as_str`]'s form.
    pub fn parse(name: &str) -> Option<Self> {
        [Origin::User, Origin::Schedule]
            .into_iter()
            .find(|o| o.as_str() == name)
    }
}

/// A spec that cannot be accepted, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The kind is empty.
    #[error("operation kind must not be empty")]
    EmptyKind,
    /// The table name is empty.
    #[error("table name must not be empty")]
    EmptyTable,
    /// A size is zero or negative.
    #[error("{field} must be a positive number, got {value}")]
    NotPositive {
        /// Which size.
        field: &'static str,
        /// The rejected value.
        value: i64,
    },
    /// A value that must not be negative is.
    #[error("{field} must not be negative, got {value}")]
    Negative {
        /// Which value.
        field: &'static str,
        /// The rejected value.
        value: i64,
    },
    /// A size or duration is above the most Sluice accepts for it.
    #[error("{field} must be at most {max}, got {value}")]
    TooLarge {
        /// Which value.
        field: &'static str,
        /// The rejected value, with its unit.
        value: String,
        /// The bound, with its unit.
        max: String,
    },
    /// The arguments are not valid JSON.
    #[error("operation arguments are not valid JSON: {0}")]
    Arguments(String),
    /// A cursor bound has the wrong number of columns.
    #[error("{field} has {got} value(s) but the operation batches over {expected} column(s)")]
    CursorWidth {
        /// Which bound.
        field: &'static str,
        /// Values in the bound.
        got: usize,
        /// Batching columns.
        expected: usize,
    },
    /// The lower bound is above the upper bound.
    #[error("min_cursor {min} is above max_cursor {max}")]
    InvertedBounds {
        /// Lower bound.
        min: String,
        /// Upper bound.
        max: String,
    },
}

impl OperationSpec {
    /// A user-triggered spec with default sizes (batch 1,000, sub-batch 100,
    /// no pause, no limits, priority 0) and empty arguments.
    pub fn new(
        kind: impl Into<String>,
        table: impl Into<String>,
        batching_columns: Vec<String>,
    ) -> Self {
        OperationSpec {
            kind: kind.into(),
            table: table.into(),
            batching_columns,
            arguments: "{}".to_owned(),
            min_cursor: None,
            max_cursor: None,
            batch_size: 1_000,
            sub_batch_size: 100,
            pause_ms: 0,
            limits: Limits::default(),
            priority: 0,
            origin: Origin::User,
            tenant_id: None,
            trace_context: None,
            estimated_rows: None,
            target: None,
            target_name: None,
            fleet: None,
            fleet_cap: None,
            identity: None,
        }
    }

    /// Sets the arguments, canonicalising them.
    pub fn with_arguments(mut self, arguments: &serde_json::Value) -> Self {
        self.arguments = canonical_json(arguments);
        self
    }

    /// The most rows a batch may be asked to hold.
    pub const MAX_BATCH_SIZE: i64 = 10_000_000;
    /// The most rows a sub-batch (one transaction) may be asked to hold.
    pub const MAX_SUB_BATCH_SIZE: i64 = 1_000_000;
    /// The longest pause between sub-batches: one hour (a longer wait is a
    /// schedule, or a pause by an operator).
    pub const MAX_PAUSE_MS: i64 = 3_600_000;
    /// The longest run before an operation yields: thirty days.
    pub const MAX_RUNTIME_MS: i64 = 30 * 86_400_000;

    /// Sets what the uniqueness rule compares ([`OperationSpec::identity`]).
    pub fn with_identity(mut self, identity: &serde_json::Value) -> Self {
        self.identity = Some(canonical_json(identity));
        self
    }

    /// Checks every field; an `Err` names the first field at fault.
    ///
    /// Also canonicalises [`OperationSpec::arguments`], so a spec built by hand
    /// with arguments in any key order is stored in one form.
    pub fn validate(&mut self) -> Result<(), SpecError> {
        if self.kind.trim().is_empty() {
            return Err(SpecError::EmptyKind);
        }
        if self.table.trim().is_empty() {
            return Err(SpecError::EmptyTable);
        }
        for (field, value) in [
            ("batch_size", self.batch_size),
            ("sub_batch_size", self.sub_batch_size),
        ] {
            if value <= 0 {
                return Err(SpecError::NotPositive { field, value });
            }
        }
        for (field, value, max) in [
            ("batch_size", self.batch_size, Self::MAX_BATCH_SIZE),
            (
                "sub_batch_size",
                self.sub_batch_size,
                Self::MAX_SUB_BATCH_SIZE,
            ),
        ] {
            if value > max {
                return Err(SpecError::TooLarge {
                    field,
                    value: format!("{value} rows"),
                    max: format!("{max} rows"),
                });
            }
        }
        for (field, value, max) in [
            ("pause", Some(self.pause_ms), Self::MAX_PAUSE_MS),
            (
                "max_runtime",
                self.limits.max_runtime_ms,
                Self::MAX_RUNTIME_MS,
            ),
        ] {
            if let Some(value) = value.filter(|v| *v > max) {
                return Err(SpecError::TooLarge {
                    field,
                    value: format!("{value} ms"),
                    max: format!("{max} ms ({})", human_ms(max)),
                });
            }
        }
        let optional = [
            ("max_runtime", self.limits.max_runtime_ms),
            ("max_rows_per_run", self.limits.max_rows_per_run),
        ];
        for (field, value) in optional {
            if let Some(value) = value.filter(|v| *v <= 0) {
                return Err(SpecError::NotPositive { field, value });
            }
        }
        for (field, value) in [
            ("pause", Some(self.pause_ms)),
            ("estimated_rows", self.estimated_rows),
        ] {
            if let Some(value) = value.filter(|v| *v < 0) {
                return Err(SpecError::Negative { field, value });
            }
        }
        let parsed: serde_json::Value = serde_json::from_str(&self.arguments)
            .map_err(|e| SpecError::Arguments(e.to_string()))?;
        self.arguments = canonical_json(&parsed);
        self.check_cursors()
    }

    fn check_cursors(&self) -> Result<(), SpecError> {
        let expected = self.batching_columns.len();
        for (field, bound) in [
            ("min_cursor", &self.min_cursor),
            ("max_cursor", &self.max_cursor),
        ] {
            if let Some(c) = bound.as_ref().filter(|c| c.width() != expected) {
                return Err(SpecError::CursorWidth {
                    field,
                    got: c.width(),
                    expected,
                });
            }
        }
        if let (Some(min), Some(max)) = (&self.min_cursor, &self.max_cursor)
            && min > max
        {
            return Err(SpecError::InvertedBounds {
                min: min.to_string(),
                max: max.to_string(),
            });
        }
        Ok(())
    }

    /// The identity compared by the uniqueness rule: kind, tenant, table,
    /// batching columns and canonical arguments (or the
    /// [`OperationSpec::identity`] given in their place), hashed (SHA-256, hex) so the
    /// index entry has a fixed size however large the arguments are.
    pub fn unique_key(&self) -> String {
        let mut hasher = Sha256::new();
        let parts = [
            self.kind.as_str(),
            self.tenant_id.as_deref().unwrap_or(""),
            self.table.as_str(),
            &self.batching_columns.join("\u{1f}"),
            self.identity.as_deref().unwrap_or(&self.arguments),
        ];
        // A target is hashed only when there is one, so the keys of
        // operations on the store's own database stay as they were.
        for part in parts.into_iter().chain(self.target.as_deref()) {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// `ms` in the largest whole unit (`1h`, `30d`), for messages.
fn human_ms(ms: i64) -> String {
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// JSON text with object keys sorted at every depth and no insignificant
/// whitespace: equal values always give equal text, whatever the key order
/// they were written in and whichever map type serde_json was built with.
pub fn canonical_json(value: &serde_json::Value) -> String {
    serde_json::to_string(&sorted(value)).expect("a JSON value always serialises")
}

fn sorted(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            serde_json::Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sorted(v)))
                    .collect(),
            )
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(sorted).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_change_identity() {
        let a = OperationSpec::new("k", "t", vec!["id".into()])
            .with_arguments(&json!({"a": 1, "b": {"y": 2, "x": 1}}));
        let b = OperationSpec::new("k", "t", vec!["id".into()])
            .with_arguments(&json!({"b": {"x": 1, "y": 2}, "a": 1}));
        assert_eq!(a.arguments, r#"{"a":1,"b":{"x":1,"y":2}}"#);
        assert_eq!(a.unique_key(), b.unique_key());
    }

    #[test]
    fn different_arguments_or_tables_are_different_operations() {
        let base = OperationSpec::new("k", "t", vec!["id".into()]).with_arguments(&json!({"a": 1}));
        let other_args = base.clone().with_arguments(&json!({"a": 2}));
        let mut other_table = base.clone();
        other_table.table = "u".into();
        assert_ne!(base.unique_key(), other_args.unique_key());
        assert_ne!(base.unique_key(), other_table.unique_key());
    }

    #[test]
    fn an_identity_replaces_the_arguments_in_the_unique_key() {
        let asked = json!({"older_than": "90d"});
        let at = |cutoff: i64| {
            OperationSpec::new("k", "t", vec![])
                .with_arguments(&json!({"older_than": "90d", "cutoff": cutoff}))
        };
        assert_ne!(at(1).unique_key(), at(2).unique_key());
        assert_eq!(
            at(1).with_identity(&asked).unique_key(),
            at(2).with_identity(&asked).unique_key()
        );
        let other = at(1).with_identity(&json!({"older_than": "30d"}));
        assert_ne!(other.unique_key(), at(1).with_identity(&asked).unique_key());
    }

    #[test]
    fn sizes_and_durations_have_bounds_named_in_the_message() {
        let mut spec = OperationSpec::new("k", "t", vec!["id".into()]);
        spec.pause_ms = 9_999_999_999 * 86_400_000;
        let err = spec.clone().validate().unwrap_err().to_string();
        assert!(
            err.starts_with("pause must be at most 3600000 ms (1h)"),
            "{err}"
        );
        spec.pause_ms = OperationSpec::MAX_PAUSE_MS;
        assert!(spec.clone().validate().is_ok());
        spec.limits.max_runtime_ms = Some(OperationSpec::MAX_RUNTIME_MS + 1);
        assert!(
            spec.clone()
                .validate()
                .unwrap_err()
                .to_string()
                .contains("(30d)")
        );
        spec.limits.max_runtime_ms = None;
        spec.sub_batch_size = OperationSpec::MAX_SUB_BATCH_SIZE + 1;
        assert!(matches!(
            spec.validate(),
            Err(SpecError::TooLarge {
                field: "sub_batch_size",
                ..
            })
        ));
    }

    #[test]
    fn validation_names_the_field() {
        let mut spec = OperationSpec::new("k", "t", vec!["id".into()]);
        spec.sub_batch_size = 0;
        assert_eq!(
            spec.validate(),
            Err(SpecError::NotPositive {
                field: "sub_batch_size",
                value: 0
            })
        );
        let mut spec = OperationSpec::new("k", "t", vec!["id".into()]);
        spec.pause_ms = -5;
        assert_eq!(
            spec.validate(),
            Err(SpecError::Negative {
                field: "pause",
                value: -5
            })
        );
        let mut spec = OperationSpec::new("k", "t", vec!["id".into()]);
        spec.arguments = "{not json".into();
        assert!(matches!(spec.validate(), Err(SpecError::Arguments(_))));
        let mut spec = OperationSpec::new("k", "t", vec!["id".into()]);
        spec.min_cursor = Some(Cursor::int(10));
        spec.max_cursor = Some(Cursor::int(5));
        assert!(matches!(
            spec.validate(),
            Err(SpecError::InvertedBounds { .. })
        ));
        let mut spec = OperationSpec::new("k", "t", vec!["id".into()]);
        spec.max_cursor = Some(Cursor(vec![]));
        assert!(matches!(
            spec.validate(),
            Err(SpecError::CursorWidth {
                field: "max_cursor",
                ..
            })
        ));
    }
}
