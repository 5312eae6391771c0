//! The JSON API's handlers and its error type.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_runtime::{Action, ControlError, Selection, control};
use sluice_store::{ListFilter, OperationStatus, StoreError};

use crate::Console;
use crate::access::{Caller, Right};
use crate::views;

/// A refusal or failure as the API reports it: an HTTP status and
/// `{"error": {"code", "message"}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn bad_request(message: String) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub(crate) fn unauthorized(needed: &str) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("this console needs {needed}"),
        )
    }

    pub(crate) fn forbidden(message: String) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub(crate) fn new(status: StatusCode, code: &'static str, message: String) -> Self {
        ApiError {
            status,
            code,
            message,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let message = crate::redact::without_values(&self.message);
        let body = json!({"error": {"code": self.code, "message": message}});
        (self.status, Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound(id) => Self::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no operation has id {id}"),
            ),
            StoreError::UnknownSchedule(_) => {
                Self::new(StatusCode::NOT_FOUND, "not_found", error.to_string())
            }
            StoreError::ScheduleExists(_) => {
                Self::new(StatusCode::CONFLICT, "conflict", error.to_string())
            }
            // The database's own message may quote a value; say only what failed.
            error if error.is_transient() => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the store cannot be reached".into(),
            ),
            _ => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the store failed; see the console's log".into(),
            ),
        }
    }
}

impl From<ControlError> for ApiError {
    fn from(error: ControlError) -> Self {
        match error {
            ControlError::NotApplicable { .. } => {
                Self::new(StatusCode::CONFLICT, "not_applicable", error.to_string())
            }
            ControlError::EmptyKind => Self::bad_request(error.to_string()),
            ControlError::Store(error) => error.into(),
        }
    }
}

/// The largest request body any endpoint reads.
pub(crate) const BODY_LIMIT: usize = 16 * 1024;

/// Refuses, with 413 and before any handler runs, a request whose body is
/// over [`BODY_LIMIT`] — whether or not its endpoint reads a body, so a
/// control sent with one changes nothing either — and turns a refusal the
/// router or an extractor wrote in plain text into the API's JSON error
/// ([`json_refusal`]).
pub(crate) async fn guard(request: Request, next: Next) -> Response {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("a request body is at most {} KiB", BODY_LIMIT / 1024),
        )
        .into_response()
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
        return too_large();
    }
    let method = request.method().clone();
    let (parts, body) = request.into_parts();
    match axum::body::to_bytes(body, BODY_LIMIT).await {
        Ok(bytes) => {
            let response = next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
            json_refusal(&method, response).await
        }
        Err(_) => too_large(),
    }
}

/// Turns a refusal the router or an extractor wrote in plain text (405 for
/// a method a path does not answer, 415, 422 …) into the API's JSON error,
/// so every refusal on every route is `{"error": {"code", "message"}}`.
async fn json_refusal(method: &axum::http::Method, response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
    let said = axum::body::to_bytes(response.into_body(), BODY_LIMIT)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let (code, message) = match status {
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            format!("this path does not answer {method}"),
        ),
        StatusCode::NOT_FOUND => ("not_found", "no such endpoint".to_owned()),
        StatusCode::PAYLOAD_TOO_LARGE => (
            "too_large",
            format!("a request body is at most {} KiB", BODY_LIMIT / 1024),
        ),
        s if s.is_client_error() => ("bad_request", said),
        _ => ("internal", "the console failed; see its log".to_owned()),
    };
    let mut refused = ApiError::new(status, code, message).into_response();
    if let Some(allow) = allow {
        refused.headers_mut().insert(header::ALLOW, allow);
    }
    refused
}

/// `GET /healthz`: the process answers.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: the store answers a query.
pub(crate) async fn readyz(State(console): State<Console>) -> Result<&'static str, ApiError> {
    let filter = ListFilter {
        limit: Some(1),
        ..ListFilter::default()
    };
    console.store.list(&filter).await?;
    Ok("ready\n")
}

/// `GET /api/session`: who the caller is to the console — the token's name,
/// whether it may control, and (for a browser session) the CSRF token its
/// page sends with each control.
pub(crate) async fn session(caller: Caller) -> Json<Value> {
    Json(json!({
        "name": caller.name(),
        "controls": caller.require(Right::Control).is_ok(),
        "csrf": caller.csrf,
    }))
}

/// Any other path.
pub(crate) async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no endpoint at {}", uri.path()),
    )
}

/// The filters of `GET /api/operations`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    status: Option<String>,
    kind: Option<String>,
    limit: Option<i64>,
    order: Option<String>,
    after: Option<i64>,
}

/// `GET /api/operations?status=&kind=&limit=&order=&after=`: operations,
/// oldest first or (`order=newest`) newest first, at most `limit` (1 to
/// 1,000, default 100), past id `after` in that order (the next page).
pub(crate) async fn list(
    State(console): State<Console>,
    caller: Caller,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    caller.require(Right::Read)?;
    let query = Query::<ListQuery>::try_from_uri(&uri)
        .map_err(|e| ApiError::bad_request(e.body_text()))?
        .0;
    let status = match query.status.as_deref() {
        None => None,
        Some(name) => Some(OperationStatus::parse(name).ok_or_else(|| {
            let names: Vec<&str> = OperationStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::bad_request(format!(
                "unknown status `{name}` (expected one of: {})",
                names.join(", ")
            ))
        })?),
    };
    let limit = query.limit.unwrap_or(100);
    if !(1..=1_000).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit {limit} is outside 1 to 1000"
        )));
    }
    let newest_first = match query.order.as_deref() {
        None | Some("oldest") => false,
        Some("newest") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown order `{other}` (expected oldest or newest)"
            )));
        }
    };
    let filter = ListFilter {
        status,
        kind: query.kind,
        limit: Some(limit),
        newest_first,
        after: query.after,
    };
    let records = console.store.list(&filter).await?;
    Ok(array(&records, views::operation))
}

/// `GET /api/operations/{id}`.
pub(crate) async fn show(
    State(console): State<Console>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Right::Read)?;
    let record = console.store.operation(operation_id(&id)?).await?;
    let mut value = views::operation(&record);
    // While it runs: its table's canary p99 against its latency budget.
    if record.state.status == sluice_store::OperationStatus::Running {
        let canaries = console.store.canaries().await?;
        value["latency"] = canaries
            .iter()
            .find(|c| {
                let state = &record.state;
                let table = console
                    .registry
                    .paced_by(&state.kind, &state.arguments, &state.table);
                c.is_of(&table, state)
            })
            .map_or(Value::Null, sluice_store::CanaryReading::to_json);
    }
    // In a fleet: a line per target.
    if let Some(fleet) = &record.state.fleet {
        let members = console.store.fleet(fleet).await?;
        value["fleet_operations"] = members.iter().map(views::fleet_member).collect();
    }
    Ok(Json(value))
}

/// `GET /api/operations/{id}/events`: its event log, oldest first.
pub(crate) async fn events(
    State(console): State<Console>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Right::Read)?;
    let id = existing(&console, &id).await?;
    let events = console.store.events(id, 0).await?;
    Ok(array(&events, views::event))
}

/// `GET /api/operations/{id}/batches`: its batches, in order.
pub(crate) async fn batches(
    State(console): State<Console>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Right::Read)?;
    let id = existing(&console, &id).await?;
    let batches = console.store.batches(id).await?;
    Ok(array(&batches, views::batch))
}

/// `GET /api/schedules`: every schedule, by name.
pub(crate) async fn schedules(
    State(console): State<Console>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require(Right::Read)?;
    let schedules = console.store.schedules().await?;
    Ok(array(&schedules, views::schedule))
}

/// `GET /api/switches`: the kill switches set.
pub(crate) async fn switches(
    State(console): State<Console>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    caller.require(Right::Read)?;
    let switches = console.store.switches().await?;
    Ok(array(&switches, views::switch))
}

/// `POST /api/operations/{id}/{pause|resume|cancel|retry}`: refused with
/// `not_applicable` when the operation's status does not allow it.
pub(crate) async fn control_one(
    State(console): State<Console>,
    caller: Caller,
    Path((id, action)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let selection = Selection::One(operation_id(&id)?);
    apply(&console, &caller, &action, selection).await
}

/// `POST /api/kinds/{kind}/{action}`: every operation of the kind; a pause
/// is also the kind's kill switch, a resume lifts it.
pub(crate) async fn control_kind(
    State(console): State<Console>,
    caller: Caller,
    Path((kind, action)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    // A switch or control for a kind nobody knows is a typo (it would hold
    // nothing); a resume takes any, so a switch set for a kind since gone
    // can still be lifted.
    caller.require(Right::Control)?;
    let registered = console.registry.kinds();
    if action != "resume"
        && !sluice_runtime::is_known_kind(&console.store, &registered, &kind).await?
    {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "unknown kind `{kind}`: not one this console knows ({}) and no operation or \
                 schedule of it in the store",
                registered.join(", ")
            ),
        ));
    }
    apply(&console, &caller, &action, Selection::Kind(kind)).await
}

/// `POST /api/all/{action}`: every operation (and the global switch).
pub(crate) async fn control_all(
    State(console): State<Console>,
    caller: Caller,
    Path(action): Path<String>,
) -> Result<Json<Value>, ApiError> {
    apply(&console, &caller, &action, Selection::All).await
}

/// Applies the control named `action` to `selection` for `caller`.
async fn apply(
    console: &Console,
    caller: &Caller,
    action: &str,
    selection: Selection,
) -> Result<Json<Value>, ApiError> {
    caller.require(Right::Control)?;
    let action = match action {
        "pause" => Action::Pause,
        "resume" => Action::Resume,
        "cancel" => Action::Cancel,
        "retry" => Action::Retry,
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("unknown control `{other}` (expected pause, resume, cancel or retry)"),
            ));
        }
    };
    let done = control(&console.store, action, &selection, &caller.describe()).await?;
    Ok(Json(json!({
        "action": action.verb(),
        "changed": done.changed,
        "skipped": done.skipped,
    })))
}

/// An operation id from a path segment.
pub(crate) fn operation_id(text: &str) -> Result<i64, ApiError> {
    text.parse()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::bad_request(format!("`{text}` is not an operation id")))
}

/// The id in a path segment, of an operation that exists.
async fn existing(console: &Console, text: &str) -> Result<i64, ApiError> {
    let id = operation_id(text)?;
    console.store.operation(id).await?;
    Ok(id)
}

/// `items` as a JSON array of their `view`s.
fn array<T>(items: &[T], view: fn(&T) -> Value) -> Json<Value> {
    Json(Value::Array(items.iter().map(view).collect()))
}
