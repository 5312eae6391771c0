//! The JSON shapes of the API's answers, as the OpenAPI document's
//! component schemas: each answer's keys and their types, and no other
//! keys. [`check`] reads a value against them; the console's tests check
//! every answer of every documented route against the schema its endpoint
//! names, so a key added to a view without its schema fails them.

use serde_json::{Map, Value, json};

/// What an endpoint's successful answer is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Returns {
    /// Not JSON (a page, an asset, plain text) or nothing.
    Other,
    /// One object of the named schema.
    One(&'static str),
    /// An array of objects of the named schema.
    Many(&'static str),
}

impl Returns {
    /// The schema of the answer's body, a reference into the components.
    pub(crate) fn schema(self) -> Option<Value> {
        let reference = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
        match self {
            Returns::Other => None,
            Returns::One(name) => Some(reference(name)),
            Returns::Many(name) => Some(json!({"type": "array", "items": reference(name)})),
        }
    }
}

/// Every component schema, by name.
pub(crate) fn components() -> Map<String, Value> {
    let mut schemas = Map::new();
    for (name, schema) in [
        ("Operation", operation()),
        ("Latency", latency()),
        ("Event", event()),
        ("Batch", batch()),
        ("Schedule", schedule()),
        ("Switch", switch()),
        ("Session", session()),
        ("Enqueued", enqueued()),
        ("Controlled", controlled()),
        ("Removed", object(&[("removed", STRING)], &[])),
        (
            "ScheduleEnabled",
            object(&[("schedule", STRING), ("enabled", BOOLEAN)], &[]),
        ),
        ("Pruned", object(&[("batches_deleted", INTEGER)], &[])),
        ("Error", error()),
    ] {
        schemas.insert(name.to_owned(), schema);
    }
    schemas
}

/// A JSON type as the schema names it.
type Kind = &'static str;
const STRING: Kind = "string";
const INTEGER: Kind = "integer";
const BOOLEAN: Kind = "boolean";
/// A string or `null`.
const STRING_OR_NULL: Kind = "string?";
/// An integer or `null`.
const INTEGER_OR_NULL: Kind = "integer?";
/// A number or `null`.
const NUMBER_OR_NULL: Kind = "number?";

/// An object with these `required` keys (always present) and `optional`
/// ones (present only for some values), and no other keys.
fn object(required: &[(&str, Kind)], optional: &[(&str, Kind)]) -> Value {
    let mut properties = Map::new();
    for (key, kind) in required.iter().chain(optional) {
        properties.insert((*key).to_owned(), typed(kind));
    }
    json!({
        "type": "object",
        "required": required.iter().map(|(key, _)| *key).collect::<Vec<_>>(),
        "properties": properties,
        "additionalProperties": false,
    })
}

/// `{"type": …}`, with `null` allowed for a kind ending in `?`.
fn typed(kind: &str) -> Value {
    match kind.strip_suffix('?') {
        Some(kind) => json!({"type": [kind, "null"]}),
        None => json!({"type": kind}),
    }
}

/// An operation (`views::operation`), with its latency while it runs.
fn operation() -> Value {
    let mut schema = object(
        &[
            ("id", INTEGER),
            ("kind", STRING),
            ("table", STRING),
            ("target", STRING_OR_NULL),
            ("target_url", STRING_OR_NULL),
            ("fleet", STRING_OR_NULL),
            ("status", STRING),
            ("origin", STRING),
            ("priority", INTEGER),
            ("tenant_id", STRING_OR_NULL),
            ("percent_done", NUMBER_OR_NULL),
            ("rows_done", INTEGER),
            ("estimated_rows", INTEGER_OR_NULL),
            ("batches_planned", INTEGER),
            ("batches_succeeded", INTEGER),
            ("batch_failures", INTEGER),
            ("batch_size", INTEGER),
            ("sub_batch_size", INTEGER),
            ("pause_ms", INTEGER),
            ("health", STRING),
            ("health_percent", INTEGER),
            ("health_reason", STRING_OR_NULL),
            ("last_error", STRING_OR_NULL),
            ("node", STRING_OR_NULL),
            ("running_here", BOOLEAN),
            ("created_at", INTEGER),
            ("started_at", INTEGER_OR_NULL),
            ("updated_at", INTEGER),
            ("finished_at", INTEGER_OR_NULL),
            ("events", INTEGER),
            ("undo", BOOLEAN),
            ("reverts", INTEGER_OR_NULL),
        ],
        &[],
    );
    schema["properties"]["status"]["enum"] = json!([
        "pending",
        "running",
        "paused",
        "finished",
        "failed",
        "cancelled"
    ]);
    schema["properties"]["health"]["enum"] = json!(["normal", "throttled", "stopped", "unknown"]);
    schema["properties"]["fleet_operations"] = json!({
        "description": "GET /api/operations/{id} of a fleet's operation: a line per target (id, target, status, percent_done, rows_done, health, health_reason)",
        "type": "array",
        "items": {"type": "object"}
    });
    schema["properties"]["latency"] = json!({
        "description": "GET /api/operations/{id} while it runs: its table's canary against its latency budget",
        "oneOf": [{"$ref": "#/components/schemas/Latency"}, {"type": "null"}]
    });
    schema
}

/// A canary reading (`CanaryReading::to_json`).
fn latency() -> Value {
    object(
        &[
            ("p99_us", INTEGER),
            ("budget_us", INTEGER_OR_NULL),
            ("samples", INTEGER),
            ("measured_at", INTEGER),
            ("over_budget", BOOLEAN),
            ("says", STRING),
        ],
        &[],
    )
}

/// An event (`views::event`): its place, time and kind, and the details
/// its kind has.
fn event() -> Value {
    object(
        &[("seq", INTEGER), ("recorded_at", INTEGER), ("kind", STRING)],
        &[
            ("reason", STRING_OR_NULL),
            ("node", STRING),
            ("health", STRING),
            ("health_percent", INTEGER),
            ("ordinal", INTEGER),
            ("attempt", INTEGER),
            ("size", INTEGER),
            ("rows", INTEGER),
            ("duration_ms", INTEGER),
            ("new_ordinal", INTEGER),
        ],
    )
}

/// A batch (`views::batch`), without its bounds.
fn batch() -> Value {
    object(
        &[
            ("ordinal", INTEGER),
            ("status", STRING),
            ("attempts", INTEGER),
            ("batch_size", INTEGER),
            ("sub_batch_size", INTEGER),
            ("rows", INTEGER),
            ("duration_ms", INTEGER_OR_NULL),
            ("last_error", STRING_OR_NULL),
            ("node", STRING_OR_NULL),
            ("created_at", INTEGER),
            ("finished_at", INTEGER_OR_NULL),
        ],
        &[],
    )
}

/// A schedule (`views::schedule`), without its arguments.
fn schedule() -> Value {
    object(
        &[
            ("name", STRING),
            ("kind", STRING),
            ("cron", STRING),
            ("time_zone", STRING),
            ("jitter_ms", INTEGER),
            ("enabled", BOOLEAN),
            ("next_fire_at", INTEGER_OR_NULL),
            ("last_operation_id", INTEGER_OR_NULL),
        ],
        &[],
    )
}

/// A kill switch (`views::switch`).
fn switch() -> Value {
    object(
        &[("scope", STRING), ("reason", STRING), ("set_at", INTEGER)],
        &[],
    )
}

/// Who the caller is (`GET /api/session`).
fn session() -> Value {
    object(
        &[
            ("name", STRING),
            ("controls", BOOLEAN),
            ("csrf", STRING_OR_NULL),
        ],
        &[],
    )
}

/// What `POST /api/operations` did.
fn enqueued() -> Value {
    object(
        &[
            ("id", INTEGER),
            ("created", BOOLEAN),
            ("status", STRING),
            ("estimated_rows", INTEGER_OR_NULL),
        ],
        &[],
    )
}

/// What a control did: the operations it changed and skipped.
fn controlled() -> Value {
    let mut schema = object(
        &[
            ("action", STRING),
            ("changed", INTEGER),
            ("skipped", INTEGER),
        ],
        &[],
    );
    schema["properties"]["changed"] = json!({"type": "array", "items": {"type": "integer"}});
    schema["properties"]["skipped"] = json!({"type": "array", "items": {"type": "integer"}});
    schema
}

/// A refusal: its code and message; nothing was changed.
fn error() -> Value {
    let mut detail = object(&[("code", STRING), ("message", STRING)], &[]);
    detail["properties"]["code"]["enum"] = json!([
        "unauthorized",
        "forbidden",
        "not_found",
        "not_applicable",
        "conflict",
        "bad_request",
        "method_not_allowed",
        "too_large",
        "unavailable",
        "internal"
    ]);
    let mut schema = object(&[("error", STRING)], &[]);
    schema["properties"]["error"] = detail;
    schema
}

/// Whether `value` has the shape `schema` gives (the subset of JSON
/// Schema this module writes: `type` with `null`, `enum`, `required`,
/// `properties`, `additionalProperties: false`, `items`, `oneOf` and
/// `$ref` into `components`); the first difference, in words, if not.
pub fn check(value: &Value, schema: &Value, components: &Map<String, Value>) -> Result<(), String> {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.trim_start_matches("#/components/schemas/");
        let target = components
            .get(name)
            .ok_or_else(|| format!("no schema {name}"))?;
        return check(value, target, components);
    }
    if let Some(choices) = schema.get("oneOf").and_then(Value::as_array) {
        return match choices
            .iter()
            .any(|choice| check(value, choice, components).is_ok())
        {
            true => Ok(()),
            false => Err(format!("{value} matches none of {schema}")),
        };
    }
    if let Some(kinds) = schema.get("type") {
        let kinds: Vec<&str> = match kinds {
            Value::String(kind) => vec![kind.as_str()],
            Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let fits = kinds.iter().any(|kind| match *kind {
            "null" => value.is_null(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => false,
        });
        if !fits {
            return Err(format!("{value} is not {kinds:?}"));
        }
    }
    if let (Some(allowed), false) = (
        schema.get("enum").and_then(Value::as_array),
        value.is_null(),
    ) && !allowed.contains(value)
    {
        return Err(format!("{value} is not one of {allowed:?}"));
    }
    if let (Some(items), Some(values)) = (schema.get("items"), value.as_array()) {
        for item in values {
            check(item, items, components)?;
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        for key in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !object.contains_key(key) {
                return Err(format!("key `{key}` is missing from {value}"));
            }
        }
        for (key, field) in object {
            match properties.and_then(|p| p.get(key)) {
                Some(property) => {
                    check(field, property, components).map_err(|e| format!("`{key}`: {e}"))?
                }
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("key `{key}` is not in the schema"));
                }
                None => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_with_a_key_the_schema_lacks_is_refused() {
        let components = components();
        let switch = json!({"scope": "*", "reason": "maintenance", "set_at": 1});
        let reference = json!({"$ref": "#/components/schemas/Switch"});
        assert_eq!(check(&switch, &reference, &components), Ok(()));
        let mut extra = switch.clone();
        extra["cursor"] = json!(5);
        assert!(check(&extra, &reference, &components).is_err());
        let mut missing = switch;
        missing.as_object_mut().unwrap().remove("set_at");
        assert!(check(&missing, &reference, &components).is_err());
    }

    #[test]
    fn types_and_enums_are_checked() {
        let components = components();
        let reference = json!({"$ref": "#/components/schemas/Error"});
        let ok = json!({"error": {"code": "not_found", "message": "no such"}});
        assert_eq!(check(&ok, &reference, &components), Ok(()));
        let unknown = json!({"error": {"code": "teapot", "message": "no such"}});
        assert!(check(&unknown, &reference, &components).is_err());
        let wrong = json!({"error": {"code": "not_found", "message": 5}});
        assert!(check(&wrong, &reference, &components).is_err());
    }
}
