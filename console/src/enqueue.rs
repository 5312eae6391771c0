//! `POST /api/operations`: enqueue an operation of any registered kind,
//! checked exactly as `sluice enqueue` checks it (names, catalogue, plan,
//! sizes) before anything is written; `POST /api/operations/{id}/revert`:
//! enqueue the revert of one, as `sluice revert` does.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_operations::builtin::{enqueue_kind, revert, revert_options};
use sluice_operations::{EnqueueOptions, OperationError};
use sluice_store::Limits;

use crate::Console;
use crate::access::{Caller, Right};
use crate::api::ApiError;

/// What the request asks for.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnqueueRequest {
    kind: String,
    arguments: Value,
    #[serde(default)]
    options: RequestOptions,
}

/// How it runs; each as `sluice enqueue`'s option of the same name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RequestOptions {
    batch_size: i64,
    sub_batch_size: i64,
    pause_ms: u64,
    max_runtime_ms: Option<i64>,
    max_rows: Option<i64>,
    priority: i32,
    force: bool,
    /// `"auto"`, `"off"` or a duration such as `"5ms"`.
    latency_budget: Option<sluice_store::LatencyBudget>,
}

impl Default for RequestOptions {
    fn default() -> Self {
        let defaults = EnqueueOptions::default();
        RequestOptions {
            batch_size: defaults.batch_size,
            sub_batch_size: defaults.sub_batch_size,
            pause_ms: 0,
            max_runtime_ms: None,
            max_rows: None,
            priority: 0,
            force: false,
            latency_budget: None,
        }
    }
}

/// `POST /api/operations` with `{"kind", "arguments", "options"}`: 201 and
/// the new operation, 200 and the active one when the same kind and
/// arguments are already pending or running, 400 naming what is wrong (and
/// nothing written) when a check refuses it.
pub(crate) async fn create(
    State(console): State<Console>,
    caller: Caller,
    request: Result<Json<EnqueueRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.require(Right::Control)?;
    let request = body(request)?;
    let options = request.options.into();
    let registry = &console.registry;
    let store = &console.store;
    let arguments = registry
        .arguments_at(&request.kind, store, request.arguments, chrono::Utc::now())
        .await
        .map_err(refused)?;
    let enqueued = enqueue_kind(store, registry, &request.kind, &arguments, &options)
        .await
        .map_err(refused)?;
    answer(&console, enqueued).await
}

/// What a revert request may say; an empty body asks for the defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RevertRequest {
    /// Put back rows changed again since too (`sluice revert --force`).
    force: bool,
    /// Rows per batch; by default the reverted operation's.
    batch_size: Option<i64>,
    /// Rows per sub-batch; by default the reverted operation's.
    sub_batch_size: Option<i64>,
}

/// `POST /api/operations/{id}/revert`, with an optional `{"force",
/// "batch_size", "sub_batch_size"}`: 201 and the revert enqueued, 200 and
/// the one already active, 400 naming why the operation cannot be
/// reverted (nothing written), as `sluice revert` refuses.
pub(crate) async fn revert_one(
    State(console): State<Console>,
    caller: Caller,
    Path(id): Path<String>,
    request: Result<Json<RevertRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.require(Right::Control)?;
    let request = match request {
        Err(JsonRejection::MissingJsonContentType(_)) => RevertRequest::default(),
        request => body(request)?,
    };
    let id = crate::api::operation_id(&id)?;
    let store = &console.store;
    let options = match store.operation(id).await {
        Ok(original) => revert_options(&original, request.batch_size, request.sub_batch_size),
        // `revert` says what is wrong with the id.
        Err(_) => EnqueueOptions::default(),
    };
    let enqueued = revert(store, &console.registry, id, request.force, &options)
        .await
        .map_err(refused)?;
    answer(&console, enqueued).await
}

/// 201 and the operation enqueued, or 200 and the one already active.
async fn answer(
    console: &Console,
    enqueued: sluice_store::Enqueued,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let record = console.store.operation(enqueued.id).await?;
    let status = match enqueued.created {
        true => StatusCode::CREATED,
        false => StatusCode::OK,
    };
    Ok((
        status,
        Json(json!({
            "id": enqueued.id,
            "created": enqueued.created,
            "status": record.state.status.as_str(),
            "estimated_rows": record.state.estimated_rows,
        })),
    ))
}

impl From<RequestOptions> for EnqueueOptions {
    fn from(o: RequestOptions) -> Self {
        EnqueueOptions {
            batch_size: o.batch_size,
            sub_batch_size: o.sub_batch_size,
            pause: Duration::from_millis(o.pause_ms),
            limits: Limits {
                max_runtime_ms: o.max_runtime_ms,
                max_rows_per_run: o.max_rows,
            },
            priority: o.priority,
            force: o.force,
            latency_budget: o.latency_budget,
            ..EnqueueOptions::default()
        }
    }
}

/// A JSON body, or the refusal of one that is not (400) or too large (413).
pub(crate) fn body<T>(request: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    match request {
        Ok(Json(body)) => Ok(body),
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError::new(
            e.status(),
            "too_large",
            "the request body is over 16 KiB".into(),
        )),
        Err(e) => Err(ApiError::bad_request(e.body_text())),
    }
}

/// A refused enqueue: the operator's input is at fault (400, the check's
/// message), unless the store failed.
fn refused(error: OperationError) -> ApiError {
    match error {
        OperationError::Store(error) => error.into(),
        other => ApiError::bad_request(other.to_string()),
    }
}
