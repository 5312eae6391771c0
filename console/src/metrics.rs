//! `GET /metrics`: the store's operations in Prometheus' text format, and
//! the runtime's instruments when the console runs inside a worker.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use sluice_store::{ListFilter, OperationStatus};
use sluice_telemetry::prometheus::escape;

use crate::Console;
use crate::access::{Caller, Right};
use crate::api::ApiError;

/// How many operations `/metrics` reads at most.
const MAX_OPERATIONS: i64 = 100_000;

/// Operations by status (every status listed, 0 included) and rows done by
/// kind, over the store's operations (the newest beyond 100,000 are not
/// counted); then, from a worker's console, the runtime's own instruments
/// but its count of operations by status, which the store's replaces. The
/// read token suffices.
pub(crate) async fn metrics(
    State(console): State<Console>,
    caller: Caller,
) -> Result<impl IntoResponse, ApiError> {
    caller.require(Right::Read)?;
    let filter = ListFilter {
        limit: Some(MAX_OPERATIONS),
        ..ListFilter::default()
    };
    let records = console.store.list(&filter).await?;
    let mut by_status: BTreeMap<&str, u64> = OperationStatus::ALL
        .iter()
        .map(|s| (s.as_str(), 0))
        .collect();
    let mut rows_by_kind: BTreeMap<&str, i64> = BTreeMap::new();
    for record in &records {
        *by_status.entry(record.state.status.as_str()).or_default() += 1;
        *rows_by_kind.entry(&record.state.kind).or_default() += record.state.rows_done;
    }
    let mut text = String::new();
    text.push_str("# HELP sluice_operations Operations in the store, by status.\n");
    text.push_str("# TYPE sluice_operations gauge\n");
    for (status, count) in by_status {
        let _ = writeln!(text, "sluice_operations{{status=\"{status}\"}} {count}");
    }
    text.push_str(
        "# HELP sluice_rows_done Rows changed by succeeded batches, by operation kind.\n",
    );
    text.push_str("# TYPE sluice_rows_done gauge\n");
    for (kind, rows) in rows_by_kind {
        let _ = writeln!(text, "sluice_rows_done{{kind=\"{}\"}} {rows}", escape(kind));
    }
    if let Some(instruments) = &console.instruments {
        text.push_str(&instruments.render(&["sluice.operations"]));
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text))
}
