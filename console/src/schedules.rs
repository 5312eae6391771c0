//! Schedules and retention through the API: add, remove, enable and
//! disable a schedule, checked as `sluice schedule` checks them, and prune
//! old batch records as `sluice prune` does.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use sluice_runtime::ScheduleSpec;
use sluice_runtime::schedule::{ScheduleError, add_schedule, set_enabled};

use crate::Console;
use crate::access::{Caller, Right};
use crate::api::ApiError;
use crate::enqueue::{RequestOptions, body};
use crate::views;

/// A schedule to add.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewSchedule {
    name: String,
    kind: String,
    arguments: Value,
    cron: String,
    #[serde(default)]
    time_zone: Option<String>,
    #[serde(default)]
    jitter_ms: u64,
    #[serde(default)]
    options: RequestOptions,
}

/// `POST /api/schedules`: 201 and the schedule as stored; 400 naming what
/// is wrong, 409 when the name is taken (nothing stored either way).
pub(crate) async fn add(
    State(console): State<Console>,
    caller: Caller,
    request: Result<Json<NewSchedule>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.require(Right::Control)?;
    let request = body(request)?;
    let spec = ScheduleSpec {
        name: request.name,
        kind: request.kind,
        arguments: request.arguments,
        cron: request.cron,
        time_zone: request.time_zone,
        jitter: Duration::from_millis(request.jitter_ms),
        options: request.options.into(),
    };
    let schedule = add_schedule(&console.store, &console.registry, &spec)
        .await
        .map_err(refused)?;
    Ok((StatusCode::CREATED, Json(views::schedule(&schedule))))
}

/// `DELETE /api/schedules/{name}`.
pub(crate) async fn remove(
    State(console): State<Console>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Right::Control)?;
    console.store.remove_schedule(&name).await?;
    Ok(Json(json!({"removed": name})))
}

/// `POST /api/schedules/{name}/{enable|disable}`: a re-enabled schedule
/// fires next at its first due time from now.
pub(crate) async fn switch(
    State(console): State<Console>,
    caller: Caller,
    Path((name, action)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Right::Control)?;
    let enabled = match action.as_str() {
        "enable" => true,
        "disable" => false,
        other => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("unknown schedule action `{other}` (expected enable or disable)"),
            ));
        }
    };
    set_enabled(&console.store, &name, enabled)
        .await
        .map_err(refused)?;
    Ok(Json(json!({"schedule": name, "enabled": enabled})))
}

/// What `POST /api/prune` prunes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Prune {
    /// Operations that ended longer ago than this (`7d`, `12h`).
    older_than: String,
    /// Rows deleted per statement (1,000 by default).
    #[serde(default)]
    chunk: Option<i64>,
}

/// `POST /api/prune`: deletes the batch records of operations that ended
/// longer ago than `older_than` (their event logs are kept).
pub(crate) async fn prune(
    State(console): State<Console>,
    caller: Caller,
    request: Result<Json<Prune>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Right::Control)?;
    let request = body(request)?;
    let older_than = sluice_operations::parse_duration(&request.older_than)
        .map_err(|e| ApiError::bad_request(format!("older_than: {e}")))?;
    let chunk = request.chunk.unwrap_or(1_000);
    if chunk < 1 {
        return Err(ApiError::bad_request(format!("chunk {chunk} is below 1")));
    }
    let deleted = console.store.prune(older_than, chunk).await?;
    Ok(Json(json!({"batches_deleted": deleted})))
}

/// A refused schedule change: the caller's input (400), a taken name (409),
/// an unknown one (404), or the store.
fn refused(error: ScheduleError) -> ApiError {
    match error {
        ScheduleError::Store(error) => error.into(),
        error if error.is_bad_input() => ApiError::bad_request(error.to_string()),
        error => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the schedule could not be stored: {error}"),
        ),
    }
}
