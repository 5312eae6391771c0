//! What the commands print: aligned tables and key/value blocks for people,
//! JSON (`--json`) for scripts. JSON field names are stable.

use std::time::Duration;

use serde::Serialize;
use serde_json::json;
use sluice_operations::{
    Plan, RowCount,
    builtin::{PrunedUndo, UndoSummary},
};
use sluice_store::{
    CanaryReading, Event, Health, LatencyBudget, OperationRecord, RateLimit, RecentPace,
    RecordedEvent, binding_limit,
};
use sluice_target::Cursor;

use crate::failure::Failure;

/// `sluice list`.
///
/// `paces[i]` is the recent pace of `records[i]` (`None` for one with no
/// work ahead): its ETA at that pace and the share of the last hour it was
/// held by a health stop or a pause.
///
/// `binding` is the rate limits binding now (from
/// `Store::binding_rate_limits`): each running operation says which of
/// them, or of its health, holds its pace. `canaries` are the latest
/// canary readings (`Store::canaries`): each running operation's table's
/// p99 against its budget.
pub fn list(
    records: &[OperationRecord],
    paces: &[Option<RecentPace>],
    binding: &[RateLimit],
    canaries: &[CanaryReading],
    as_json: bool,
) -> Result<(), Failure> {
    let pace_of = |r: &OperationRecord| {
        let s = &r.state;
        Binding::of(
            r,
            binding_limit(binding, r.id, &s.kind, s.fleet.as_deref()).cloned(),
        )
    };
    let registry = sluice_operations::Registry::with_builtins();
    let canary_of = |r: &OperationRecord| {
        canaries.iter().find(|c| {
            r.state.status == sluice_store::OperationStatus::Running
                && c.is_of(
                    &registry.paced_by(&r.state.kind, &r.state.arguments, &r.state.table),
                    &r.state,
                )
        })
    };
    if as_json {
        let values: Vec<_> = records
            .iter()
            .zip(paces)
            .map(|(record, pace)| {
                let mut value = operation_json(record);
                value["pace"] = json!(pace);
                value["binding"] = json!(pace_of(record));
                value["latency"] = json!(canary_of(record).map(CanaryReading::to_json));
                value
            })
            .collect();
        return print_json(&values);
    }
    if records.is_empty() {
        println!("no operations");
        return Ok(());
    }
    // A column for the target only when an operation has one.
    let targets = records.iter().any(|r| r.state.target.is_some());
    let header = [
        "ID",
        "STATUS",
        "KIND",
        "TABLE",
        "TARGET",
        "DONE",
        "ROWS",
        "BATCHES",
        "BINDING",
        "P99/BUDGET",
        "ETA",
        "HELD",
        "UPDATED",
    ];
    let rows: Vec<Vec<String>> = records
        .iter()
        .zip(paces)
        .map(|(r, pace)| {
            let s = &r.state;
            let eta = pace
                .as_ref()
                .and_then(|p| p.eta_ms)
                .map_or("-".to_owned(), |ms| {
                    rough_duration(u64::try_from(ms).unwrap_or(0))
                });
            let held = pace
                .as_ref()
                .filter(|p| p.held_ms > 0)
                .map_or("-".to_owned(), |p| {
                    format!("{:.0} %", p.held_share() * 100.0)
                });
            vec![
                r.id.to_string(),
                s.status.as_str().to_owned(),
                s.kind.clone(),
                s.table.clone(),
                target_cell(r),
                percent(r),
                s.rows_done.to_string(),
                format!("{}/{}", s.batches_succeeded, s.batches_planned),
                pace_of(r).map_or("-".to_owned(), |b| b.short()),
                canary_of(r).map_or("-".to_owned(), latency_cell),
                eta,
                held,
                time(s.updated_at),
            ]
        })
        .collect();
    let shown = |row: &Vec<String>| -> Vec<String> {
        row.iter()
            .enumerate()
            .filter(|(i, _)| targets || *i != 4)
            .map(|(_, cell)| cell.clone())
            .collect()
    };
    let header: Vec<&str> = header
        .iter()
        .enumerate()
        .filter(|(i, _)| targets || *i != 4)
        .map(|(_, h)| *h)
        .collect();
    let rows: Vec<Vec<String>> = rows.iter().map(shown).collect();
    print_table(&header, &rows);
    Ok(())
}

/// An operation's target in a listing: its name, else its URL, else `-`
/// (the store's database).
fn target_cell(record: &OperationRecord) -> String {
    let s = &record.state;
    s.target_name
        .clone()
        .or_else(|| s.target.clone())
        .unwrap_or_else(|| "-".to_owned())
}

/// A fleet in `show`: how far it is as a whole (finished when every one
/// of its operations is; the targets failed named), then a line per target
/// with its pace and its health.
fn fleet_text(key: &str, members: &[FleetMember]) -> String {
    use sluice_store::OperationStatus;
    let finished = members
        .iter()
        .filter(|(m, ..)| m.state.status == OperationStatus::Finished)
        .count();
    let rows: i64 = members.iter().map(|(m, ..)| m.state.rows_done).sum();
    let failed: Vec<String> = members
        .iter()
        .filter(|(m, ..)| m.state.status == OperationStatus::Failed)
        .map(|(m, ..)| target_cell(m))
        .collect();
    let mut text = format!(
        "{key}: {finished} of {} targets finished, {rows} rows",
        members.len()
    );
    if !failed.is_empty() {
        text.push_str(&format!("; failed: {}", failed.join(", ")));
    }
    for (member, pace, binding) in members {
        let s = &member.state;
        let pace = pace.map_or(String::new(), |p| {
            format!(", {} rows/s", thousands(p.round() as i64))
        });
        // What holds its pace: a health signal (with its reason), else a
        // rate limit or its batch size while it runs.
        let health = match (&s.health, &s.health_reason, binding) {
            (Health::Normal, _, Some(binding)) => format!(", {}", binding.short()),
            (Health::Normal, _, None) => String::new(),
            (other, Some(reason), _) => format!(", {}: {reason}", health(*other)),
            (other, None, _) => format!(", {}", health(*other)),
        };
        text.push_str(&format!(
            "\n    {:<16} #{:<6} {:<9} {:>7} {} rows{pace}{health}",
            target_cell(member),
            member.id,
            s.status.as_str(),
            percent(member),
            s.rows_done,
        ));
    }
    text
}

/// One operation of a fleet in `show`: its record, its recent rows/s while
/// it has work left, and what binds its pace while it runs.
pub type FleetMember = (OperationRecord, Option<f64>, Option<Binding>);

/// One operation of a fleet, as `show --json` lists it.
fn fleet_member((record, rows_per_second, binding): &FleetMember) -> serde_json::Value {
    json!({
        "rows_per_second": rows_per_second,
        "binding": binding,
        "id": record.id,
        "target": record.state.target_name,
        "status": record.state.status.as_str(),
        "rows_done": record.state.rows_done,
        "percent_done": record.state.percent_done(),
        "health": health(record.state.health),
        "last_error": record.state.last_error,
    })
}

/// What holds an operation to a time or a pace beside its own state, for
/// Whether a health reason is an indicator's failure to read
/// ([`sluice_runtime::health::unknown_health`]).
fn unknown(reason: &Option<String>) -> bool {
    reason
        .as_deref()
        .is_some_and(|r| r.starts_with("health unknown"))
}

/// `sluice show`.
#[derive(Debug, Default)]
pub struct Held {
    /// When a pause with an end (`pause --until`, or a run window's)
    /// resumes it, epoch milliseconds.
    pub resume_at: Option<i64>,
    /// The run window it obeys, as `00:00-06:00 Europe/Paris`.
    pub window: Option<String>,
    /// The rate limits it obeys (its own, its kind's, everyone's).
    pub rate_limits: Vec<RateLimit>,
    /// The one of them binding it now, if one is.
    pub binding_limit: Option<RateLimit>,
    /// Its latency budget, and the target it was set for (`None`: the
    /// default).
    pub latency_budget: (LatencyBudget, Option<String>),
    /// Its table's latest canary reading, if one is fresh.
    pub canary: Option<CanaryReading>,
    /// What its undo table holds (`--undo`, and a revert's), if it has one.
    pub undo: Option<UndoSummary>,
    /// The operations of its fleet, itself included (none outside a
    /// fleet).
    pub fleet: Vec<FleetMember>,
}

/// What holds a running operation's pace now: a health stop, the health
/// throttle, a rate limit (one that made a worker wait within the last few
/// seconds), or nothing but its adaptive batch size.
#[derive(Debug, Serialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Binding {
    /// A health signal stops it.
    HealthStop {
        /// Why.
        reason: Option<String>,
    },
    /// A health signal throttles it.
    HealthThrottle {
        /// Its share of the normal pace.
        percent: u8,
        /// Why.
        reason: Option<String>,
    },
    /// A rate limit.
    RateLimit(RateLimit),
    /// Nothing beyond its adaptive batch size and pause.
    BatchSize,
}

impl Binding {
    /// What binds `record` now, `limit` being the rate limit that does if
    /// one does; `None` unless it is running.
    pub fn of(record: &OperationRecord, limit: Option<RateLimit>) -> Option<Binding> {
        let s = &record.state;
        if s.status != sluice_store::OperationStatus::Running {
            return None;
        }
        let reason = s.health_reason.clone();
        Some(match (s.health, limit) {
            (Health::Stopped, _) => Binding::HealthStop { reason },
            (Health::Throttled { percent }, _) => Binding::HealthThrottle { percent, reason },
            (Health::Normal, Some(limit)) => Binding::RateLimit(limit),
            (Health::Normal, None) => Binding::BatchSize,
        })
    }

    /// As a sentence: `rate-limited: 5000 rows/s (kind:purge)`.
    fn says(&self) -> String {
        let why =
            |reason: &Option<String>| reason.as_ref().map_or(String::new(), |r| format!(": {r}"));
        match self {
            Binding::HealthStop { reason } => format!("stopped{}", why(reason)),
            Binding::HealthThrottle { percent, reason } => {
                format!("throttled to {percent}%{}", why(reason))
            }
            Binding::RateLimit(l) => {
                format!("rate-limited: {} rows/s ({})", l.rows_per_second, l.target)
            }
            Binding::BatchSize => "its batch size (no limit or health signal holds it)".into(),
        }
    }

    /// As a table cell: `rate 5000/s`; a health signal an unreadable
    /// indicator gave says `unknown`.
    fn short(&self) -> String {
        match self {
            Binding::HealthStop { reason } if unknown(reason) => "unknown: stopped".into(),
            Binding::HealthThrottle { percent, reason } if unknown(reason) => {
                format!("unknown: {percent}%")
            }
            Binding::HealthStop { .. } => "stopped".into(),
            Binding::HealthThrottle { percent, .. } => format!("throttled {percent}%"),
            Binding::RateLimit(l) => format!("rate {}/s", l.rows_per_second),
            Binding::BatchSize => "batch size".into(),
        }
    }
}

/// `sluice show`.
pub fn show(
    record: &OperationRecord,
    pace: &RecentPace,
    held: Held,
    as_json: bool,
) -> Result<(), Failure> {
    if as_json {
        let mut value = operation_json(record);
        value["pace"] = json!(pace);
        value["resume_at"] = json!(held.resume_at);
        value["window"] = json!(held.window);
        value["rate_limits"] = json!(held.rate_limits);
        value["binding"] = json!(Binding::of(record, held.binding_limit));
        value["latency_budget"] = json!({
            "budget": held.latency_budget.0,
            "set_for": held.latency_budget.1,
        });
        value["latency"] =
            json!(running_canary(record, held.canary.as_ref()).map(CanaryReading::to_json));
        value["undo"] = json!(held.undo);
        value["fleet_operations"] = json!(held.fleet.iter().map(fleet_member).collect::<Vec<_>>());
        return print_json(&value);
    }
    let Held {
        resume_at,
        window,
        rate_limits,
        binding_limit,
        latency_budget,
        canary,
        undo,
        fleet,
    } = held;
    let binding = Binding::of(record, binding_limit);
    let s = &record.state;
    let cursor = |c: &Option<Cursor>| c.as_ref().map_or("-".to_owned(), Cursor::to_string);
    let optional = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let mut lines = vec![
        ("id", record.id.to_string()),
        ("kind", s.kind.clone()),
        (
            "status",
            match resume_at {
                Some(at) => format!("{} until {}", s.status.as_str(), time(at)),
                None => s.status.as_str().to_owned(),
            },
        ),
        ("table", s.table.clone()),
        (
            "target",
            match (&s.target_name, &s.target) {
                (Some(name), Some(url)) => format!("{name} ({url})"),
                (None, Some(url)) => url.clone(),
                _ => "the store's database".to_owned(),
            },
        ),
        (
            "run window",
            window.unwrap_or_else(|| "any time".to_owned()),
        ),
        (
            "rate limits",
            if rate_limits.is_empty() {
                "none".to_owned()
            } else {
                rate_limits
                    .iter()
                    .map(|l| format!("{} rows/s ({})", l.rows_per_second, l.target))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ),
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
            "latency budget",
            match latency_budget {
                (budget, Some(target)) => format!("{budget} ({target})"),
                (budget, None) => format!("{budget} (the default)"),
            },
        ),
        ("pace", pace_text(pace)),
        ("binding now", binding.map_or("-".to_owned(), |b| b.says())),
        (
            "latency now",
            running_canary(record, canary.as_ref()).map_or("-".to_owned(), |c| {
                latency_now(pace.rows_per_second, c, latency_budget.0)
            }),
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
                "max runtime {} ms, max rows per run {}{}",
                optional(s.limits.max_runtime_ms),
                optional(s.limits.max_rows_per_run),
                if s.limits.max_rows_per_run.is_some() {
                    " (all workers together: its owner runs it without helpers)"
                } else {
                    ""
                }
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
    if let Some(undo) = &undo {
        lines.push(("undo", undo_text(record, undo)));
    }
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
    if let Some(key) = &s.fleet {
        lines.push(("fleet", fleet_text(key, &fleet)));
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

/// `sluice enqueue`, for people: the operation, and when an existing one
/// was returned, the options asked for that it does not take.
pub fn enqueued(record: &OperationRecord, created: bool, not_applied: &[&str]) {
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
        if !not_applied.is_empty() {
            println!(
                "its own options stand: {} not applied to it (`sluice limit {}` sets a rate limit \
                 on it; a window or other sizes need it cancelled and enqueued again)",
                not_applied.join(", "),
                record.id
            );
        }
    }
}

/// `sluice plan` and `enqueue --dry-run`.
pub fn plan(plan: &Plan, as_json: bool) -> Result<(), Failure> {
    if as_json {
        return print_json(plan);
    }
    let rows = |count: &RowCount| match (count.rows, count.estimated) {
        (None, _) => "unknown".to_owned(),
        (Some(n), false) => format!("{} (counted)", thousands(n)),
        (Some(n), true) => format!("about {} (the planner's estimate)", thousands(n)),
    };
    println!(
        "plan for {} on {} (nothing was changed)",
        plan.kind, plan.table
    );
    println!("  rows in scope   {}", rows(&plan.rows_in_scope));
    println!("  rows in table   {}", rows(&plan.table_rows));
    println!("  batch query     {}", plan.batch_query);
    for (i, line) in plan.query_plan.iter().enumerate() {
        let label = if i == 0 {
            "  query plan      "
        } else {
            "                  "
        };
        println!("{label}{line}");
    }
    println!(
        "  index           {}",
        plan.index.as_deref().unwrap_or("none")
    );
    if let Some(partitions) = &plan.partitions {
        let count = |count: &RowCount| match (count.rows, count.estimated) {
            (None, _) => "rows unknown".to_owned(),
            (Some(n), false) => format!("{} rows", thousands(n)),
            (Some(n), true) => format!("about {} rows", thousands(n)),
        };
        match (&partitions.blocked, partitions.dropped.as_slice()) {
            (Some(reason), _) => println!("  partitions      none dropped: {reason}"),
            (None, []) => println!("  partitions      none wholly older than the cutoff"),
            (None, dropped) => {
                let verb = match partitions.kept {
                    true => "detaches and keeps",
                    false => "drops",
                };
                for (i, partition) in dropped.iter().enumerate() {
                    let label = if i == 0 {
                        format!("  partitions      {verb} ")
                    } else {
                        format!("                  {verb} ")
                    };
                    println!(
                        "{label}{} ({}, one batch, its rows checked under a lock first)",
                        partition.name,
                        count(&partition.rows)
                    );
                }
            }
        }
    }
    if let (Some(batches), Some(sub_batches)) = (plan.batches, plan.sub_batches) {
        let rows = if plan.partitions.is_some() {
            " for the rows deleted one by one"
        } else {
            ""
        };
        println!(
            "  batches         {} batches, {} sub-batches (one transaction each){rows}",
            thousands(batches),
            thousands(sub_batches)
        );
    }
    if let Some(statement) = &plan.sub_batch_statement {
        println!("  sub-batch       {statement}");
    }
    match (&plan.probe, &plan.probe_skipped) {
        (Some(probe), _) => println!(
            "  probe           {} rows in {:.1} ms (median of {} runs, each rolled back){}",
            thousands(probe.rows as i64),
            probe.took_ms,
            probe.runs,
            match (probe.log_bytes, plan.log_name) {
                (Some(bytes), Some(log)) => format!(", {} of {log}", bytes_text(bytes)),
                _ => String::new(),
            }
        ),
        (None, Some(reason)) => println!("  probe           not run: {reason}"),
        (None, None) => {}
    }
    for (i, trigger) in plan.triggers.iter().enumerate() {
        let label = if i == 0 {
            "  triggers        "
        } else {
            "                  "
        };
        println!("{label}{trigger}: fires for each row the work changes");
    }
    if let Some(ms) = plan.predicted_ms {
        println!(
            "  predicted       about {} of work at the probe's pace (without health holds)",
            rough_duration(ms)
        );
    }
    if let (Some(bytes), Some(log)) = (plan.predicted_log_bytes, plan.log_name) {
        println!("  write volume    about {} of {log}", bytes_text(bytes));
    }
    if let Some(refusal) = &plan.refusal {
        println!("  enqueue refuses {refusal}");
    }
    for advice in &plan.advice {
        println!("  advice          {advice}");
    }
    Ok(())
}

/// `sluice prune`.
pub fn pruned(
    deleted: u64,
    undo: &[PrunedUndo],
    older_than: Duration,
    as_json: bool,
) -> Result<(), Failure> {
    let cutoff = chrono::Utc::now()
        - chrono::Duration::from_std(older_than).unwrap_or(chrono::Duration::zero());
    if as_json {
        return print_json(&json!({
            "batches_deleted": deleted,
            "ended_before": cutoff.to_rfc3339(),
            "undo_tables_dropped": undo,
        }));
    }
    println!(
        "pruned {deleted} batch records of operations that ended before {}",
        cutoff.format("%Y-%m-%d %H:%M:%S UTC")
    );
    for dropped in undo {
        println!(
            "dropped undo table {} of operation {} (it can no longer be reverted)",
            dropped.table, dropped.operation
        );
    }
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
        Event::Reverted { by } => format!("operation {by} reverts it"),
        Event::Resumed | Event::Finished | Event::Retried => String::new(),
    }
}

/// `12,000 rows kept in items_undo_x`, and for a revert (or an operation
/// reverted) how many rows went back and which were left alone.
fn undo_text(record: &OperationRecord, undo: &UndoSummary) -> String {
    let mut text = format!("{} rows kept in {}", undo.rows, undo.table);
    if !undo.kept_partitions.is_empty() {
        text.push_str(&format!(
            ", and {} partitions ({} rows) detached and kept beside it",
            undo.kept_partitions.len(),
            undo.kept_partition_rows
        ));
    }
    if record.state.kind == "revert" || undo.reverted + undo.conflicts > 0 {
        text.push_str(&format!("; {} put back", undo.reverted));
    }
    if undo.conflicts > 0 {
        text.push_str(&format!(
            ", {} left alone as changed since (first: {}{})",
            undo.conflicts,
            undo.first_conflicts.join("; "),
            if undo.conflicts > undo.first_conflicts.len() as i64 {
                "; …"
            } else {
                ""
            }
        ));
    }
    text
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

/// An operation's recent pace and what held it: `120 rows/s over the last
/// 1 h; ETA 2 h 10 min at this pace; 35 % of it held (replica lag 12 s)`.
fn pace_text(pace: &RecentPace) -> String {
    let mut text = format!(
        "{:.0} rows/s over the last {}",
        pace.rows_per_second,
        rough_duration(u64::try_from(pace.window_ms).unwrap_or(0))
    );
    if let Some(eta) = pace.eta_ms {
        text += &format!(
            "; ETA {} at this pace",
            rough_duration(u64::try_from(eta).unwrap_or(0))
        );
    }
    if pace.held_ms > 0 {
        text += &format!(
            "; {:.0} % of it held ({})",
            pace.held_share() * 100.0,
            pace.held_by.as_deref().unwrap_or("-")
        );
    }
    if pace.throttled_ms > 0 && pace.window_ms > 0 {
        text += &format!(
            "; {:.0} % throttled",
            pace.throttled_ms as f64 * 100.0 / pace.window_ms as f64
        );
    }
    text
}

/// `n` with thousands separated by commas.
fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// A byte count in the largest binary unit that keeps it above one.
fn bytes_text(bytes: u64) -> String {
    let mut value = bytes as f64;
    for unit in ["bytes", "KiB", "MiB", "GiB"] {
        if value < 1024.0 {
            return if unit == "bytes" {
                format!("{bytes} bytes")
            } else {
                format!("{value:.1} {unit}")
            };
        }
        value /= 1024.0;
    }
    format!("{value:.1} TiB")
}

/// A duration the way a person estimates one: `850 ms`, `42 s`,
/// `12 min 5 s`, `2 h 10 min`.
fn rough_duration(ms: u64) -> String {
    let seconds = ms / 1_000;
    match seconds {
        0 => format!("{ms} ms"),
        1..60 => format!("{seconds} s"),
        60..3_600 => format!("{} min {} s", seconds / 60, seconds % 60),
        _ => format!("{} h {} min", seconds / 3_600, seconds % 3_600 / 60),
    }
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

/// `show`'s "latency now": the pace, and the canary's reading against its
/// budget; a reading held to no budget while the operation has one says
/// why (the budget paces only while a session of the application's works
/// on the server).
fn latency_now(rows_per_second: f64, reading: &CanaryReading, budget: LatencyBudget) -> String {
    let line = format!("{rows_per_second:.0} rows/s: {}", reading.describe());
    if reading.budget_us.is_some() || budget == LatencyBudget::Off {
        return line;
    }
    format!(
        "{line} (no budget applied: no session of the application's has run a statement on \
         the server in the last {} s)",
        sluice_runtime::latency::APPLICATION_WITHIN.as_secs()
    )
}

/// `canary` while `record` runs (a reading says nothing of an operation
/// that does not).
fn running_canary<'a>(
    record: &OperationRecord,
    canary: Option<&'a CanaryReading>,
) -> Option<&'a CanaryReading> {
    canary.filter(|_| record.state.status == sluice_store::OperationStatus::Running)
}

/// A canary reading as a table cell: `3.1/5.0 ms`, `0.42 ms` without a budget.
fn latency_cell(canary: &CanaryReading) -> String {
    let ms = |us: i64| us as f64 / 1_000.0;
    match canary.budget_us {
        Some(budget) => format!("{:.1}/{:.1} ms", ms(canary.p99_us), ms(budget)),
        None => format!("{:.2} ms", ms(canary.p99_us)),
    }
}

#[cfg(test)]
mod tests {
    use super::{bytes_text, latency_now, rough_duration, thousands};
    use sluice_store::{CanaryReading, LatencyBudget};

    #[test]
    fn figures_read_as_people_write_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(-1_234_567), "-1,234,567");
        assert_eq!(bytes_text(512), "512 bytes");
        assert_eq!(bytes_text(1_536), "1.5 KiB");
        assert_eq!(bytes_text(3 * 1024 * 1024 * 1024), "3.0 GiB");
        assert_eq!(rough_duration(850), "850 ms");
        assert_eq!(rough_duration(42_000), "42 s");
        assert_eq!(rough_duration(725_000), "12 min 5 s");
        assert_eq!(rough_duration(7_800_000), "2 h 10 min");
    }

    #[test]
    fn a_reading_held_to_no_budget_says_why_only_when_the_operation_has_one() {
        let reading = |budget_us| CanaryReading {
            table_name: "events".into(),
            p99_us: 2_700,
            budget_us,
            samples: 100,
            measured_at: 0,
        };
        let auto = LatencyBudget::default();
        assert_eq!(
            latency_now(6_683.4, &reading(Some(3_600)), auto),
            "6683 rows/s: canary p99 2.7 ms of a 3.6 ms budget"
        );
        let unheld = latency_now(6_683.4, &reading(None), auto);
        assert!(
            unheld.starts_with("6683 rows/s: canary p99 2.7 ms (no budget applied: no session"),
            "{unheld}"
        );
        assert_eq!(
            latency_now(6_683.4, &reading(None), LatencyBudget::Off),
            "6683 rows/s: canary p99 2.7 ms"
        );
    }
}
