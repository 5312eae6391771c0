//! What the commands print: aligned tables and key/value blocks for people,
//! JSON (`--json`) for scripts. JSON field names are stable.

use std::time::Duration;

use serde::Serialize;
use serde_json::json;
use sluice_store::{Cursor, Event, Health, OperationRecord, RecordedEvent};

use crate::failure::Failure;

/// `sluice list`.
pub fn list(records: &[OperationRecord], as_json: bool) -> Result<(), Failure> {
    if as_json {
        return print_json(&records.iter().map(operation_json).collect::<Vec<_>>());
    }
    if records.is_empty() {
        println!("no operations");
        return Ok(());
    }
    let header = [
        "ID", "STATUS", "KIND", "TABLE", "DONE", "ROWS", "BATCHES", "HEALTH", "UPDATED",
    ];
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            let s = &r.state;
            vec![
                r.id.to_string(),
                s.status.as_str().to_owned(),
                s.kind.clone(),
                s.table.clone(),
                percent(r),
                s.rows_done.to_string(),
                format!("{}/{}", s.batches_succeeded, s.batches_planned),
                health(s.health),
                time(s.updated_at),
            ]
        })
        .collect();
    print_table(&header, &rows);
    Ok(())
}

/// `sluice show`.
pub fn show(record: &OperationRecord, as_json: bool) -> Result<(), Failure> {
    if as_json {
        return print_json(&operation_json(record));
    }
    let s = &record.state;
    let cursor = |c: &Option<Cursor>| c.as_ref().map_or("-".to_owned(), Cursor::to_string);
    let optional = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let mut lines = vec![
        ("id", record.id.to_string()),
        ("kind", s.kind.clone()),
        ("status", s.status.as_str().to_owned()),
        ("table", s.table.clone()),
        (
            "batching columns",
            if s.batching_columns.is_empty() {
                "- (loop)".into()
            } else {
                s.batching_columns.join(", ")
            },
        ),
        ("arguments", s.arguments.clone()),
        (
            "progress",
            format!(
                "{} rows ({}), estimated total {}",
                s.rows_done,
                percent(record),
                optional(s.estimated_rows)
            ),
        ),
        (
            "batches",
            format!(
                "{} succeeded of {} planned, {} failed attempts",
                s.batches_succeeded, s.batches_planned, s.batch_failures
            ),
        ),
        (
            "cursor",
            format!(
                "{} (from {} to {})",
                cursor(&s.cursor),
                cursor(&s.min_cursor),
                cursor(&s.max_cursor)
            ),
        ),
        (
            "batch size",
            format!(
                "{} rows, sub-batches of {}, pause {} ms",
                s.batch_size, s.sub_batch_size, s.pause_ms
            ),
        ),
        (
            "limits",
            format!(
                "max runtime {} ms, max rows per run {}",
                optional(s.limits.max_runtime_ms),
                optional(s.limits.max_rows_per_run)
            ),
        ),
        (
            "health",
            match &s.health_reason {
                Some(r) => format!("{} ({r})", health(s.health)),
                None => health(s.health),
            },
        ),
        (
            "origin",
            format!("{}, priority {}", s.origin.as_str(), s.priority),
        ),
        ("created", time(s.created_at)),
        ("started", s.started_at.map_or("-".into(), time)),
        ("updated", time(s.updated_at)),
        ("ended", s.finished_at.map_or("-".into(), time)),
        ("events", s.last_seq.to_string()),
    ];
    if let Some(tenant) = &s.tenant_id {
        lines.push(("tenant", tenant.clone()));
    }
    if let Some(lease) = &record.lease {
        lines.push((
            "held by",
            format!(
                "{} (epoch {}, until {})",
                lease.node,
                lease.epoch,
                time(lease.expires_at)
            ),
        ));
    }
    if let Some(error) = &s.last_error {
        lines.push(("last error", error.clone()));
    }
    let width = lines.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, value) in lines {
        println!("{key:<width$}  {value}");
    }
    Ok(())
}

/// `sluice events`.
pub fn events(events: &[RecordedEvent], as_json: bool) -> Result<(), Failure> {
    if as_json {
        let items: Vec<_> = events
            .iter()
            .map(|e| json!({"seq": e.seq, "recorded_at": time(e.recorded_at), "kind": e.event.kind(), "event": e.event}))
            .collect();
        return print_json(&items);
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e.seq.to_string(),
                time(e.recorded_at),
                e.event.kind().to_owned(),
                detail(&e.event),
            ]
        })
        .collect();
    print_table(&["SEQ", "TIME", "EVENT", "DETAIL"], &rows);
    Ok(())
}

/// The outcome of an operator control.
pub fn controlled(
    verb: &str,
    changed: &[i64],
    skipped: &[i64],
    as_json: bool,
) -> Result<(), Failure> {
    if as_json {
        return print_json(&json!({"action": verb, "changed": changed, "skipped": skipped}));
    }
    let ids = |ids: &[i64]| {
        ids.iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match changed.len() {
        0 => println!("{verb}: no operation it applies to"),
        1 => println!("{verb}: operation {}", changed[0]),
        n => println!("{verb}: {n} operations ({})", ids(changed)),
    }
    if !skipped.is_empty() {
        println!("skipped (changed status meanwhile): {}", ids(skipped));
    }
    Ok(())
}

/// `sluice enqueue`, for people.
pub fn enqueued(record: &OperationRecord, created: bool) {
    let s = &record.state;
    let rows = s
        .estimated_rows
        .map_or("an unknown number of".to_owned(), |n| n.to_string());
    if created {
        println!(
            "enqueued operation {} ({} on {}, {rows} rows in scope); `sluice run` runs it",
            record.id, s.kind, s.table
        );
    } else {
        println!(
            "operation {} with the same kind and arguments is already {}; nothing new was enqueued",
            record.id,
            s.status.as_str()
        );
    }
}

/// `sluice prune`.
pub fn pruned(deleted: u64, older_than: Duration, as_json: bool) -> Result<(), Failure> {
    let cutoff = chrono::Utc::now()
        - chrono::Duration::from_std(older_than).unwrap_or(chrono::Duration::zero());
    if as_json {
        return print_json(
            &json!({"batches_deleted": deleted, "ended_before": cutoff.to_rfc3339()}),
        );
    }
    println!(
        "pruned {deleted} batch records of operations that ended before {}",
        cutoff.format("%Y-%m-%d %H:%M:%S UTC")
    );
    Ok(())
}

fn operation_json(record: &OperationRecord) -> serde_json::Value {
    let mut value = serde_json::to_value(&record.state).expect("a projection serialises");
    let object = value.as_object_mut().expect("a projection is an object");
    object.insert("id".into(), json!(record.id));
    object.insert("status".into(), json!(record.state.status.as_str()));
    object.insert("percent_done".into(), json!(record.state.percent_done()));
    object.insert(
        "lease".into(),
        record.lease.as_ref().map_or(
            serde_json::Value::Null,
            |l| json!({"node": l.node, "epoch": l.epoch, "expires_at": l.expires_at}),
        ),
    );
    value
}

fn detail(event: &Event) -> String {
    match event {
        Event::Created(spec) => format!(
            "{} on {} (batch {}, sub-batch {})",
            spec.kind, spec.table, spec.batch_size, spec.sub_batch_size
        ),
        Event::Started { node } => format!("node {node}"),
        Event::BatchPlanned {
            ordinal,
            start,
            end,
            size,
        } => {
            let show = |c: &Option<Cursor>| c.as_ref().map_or("…".to_owned(), Cursor::to_string);
            format!(
                "batch {ordinal}: after {} through {} ({size} rows)",
                show(start),
                show(end)
            )
        }
        Event::BatchSucceeded {
            ordinal,
            rows,
            duration_ms,
            next_batch_size,
        } => {
            let next = next_batch_size.map_or(String::new(), |n| format!(", next batch size {n}"));
            format!("batch {ordinal}: {rows} rows in {duration_ms} ms{next}")
        }
        Event::BatchFailed {
            ordinal,
            attempt,
            error,
            ..
        } => format!("batch {ordinal}, attempt {attempt}: {error}"),
        Event::Throttled { health: h, reason } => format!(
            "{}{}",
            health(*h),
            reason.as_ref().map_or(String::new(), |r| format!(": {r}"))
        ),
        Event::Yielded { reason } | Event::Paused { reason } | Event::Cancelled { reason } => {
            reason.clone()
        }
        Event::Failed { error } => error.clone(),
        Event::BatchSplit {
            ordinal,
            at,
            new_ordinal,
        } => format!("batch {ordinal} now ends at {at}; batch {new_ordinal} takes the rest"),
        Event::Resumed | Event::Finished | Event::Retried => String::new(),
    }
}

fn health(health: Health) -> String {
    match health {
        Health::Normal => "normal".into(),
        Health::Throttled { percent } => format!("throttled to {percent}%"),
        Health::Stopped => "stopped".into(),
    }
}

fn percent(record: &OperationRecord) -> String {
    record
        .state
        .percent_done()
        .map_or("-".to_owned(), |p| format!("{p:.1}%"))
}

fn time(epoch_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(epoch_ms).map_or_else(
        || epoch_ms.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
    )
}

fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

fn print_json<T: Serialize>(value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Failure::Runtime(e.into()))?;
    println!("{text}");
    Ok(())
}
