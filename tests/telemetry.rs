//! Tracing end to end through the real OTLP exporter into an in-process
//! OTLP receiver (`fake-opentelemetry-collector`): one operation is one
//! trace — enqueue → run → batch → sub-batch → statement, parent by parent —
//! across actors, across runs on two nodes, and across processes, with
//! OpenTelemetry's database attributes; metrics arrive too; and with no
//! `OTEL_*` variable set nothing is exported or said.
//!
//! The in-process test installs the global subscriber, so it is the only
//! one in this binary that runs a runtime in-process.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{TestDb, succeeded, until, until_items_changed};
use fake_opentelemetry_collector::{ExportedSpan, FakeCollectorServer};
use sluice_operations::{EnqueueOptions, UpdateInBatches};
use sluice_runtime::{RuntimeBuilder, RuntimeConfig, Signal, indicator_fn};
use sluice_store::{Limits, OperationStatus};
use sluice_telemetry::export::{Export, Protocol, Telemetry, TelemetryConfig};

/// Collects every span the collector receives (its own queue holds only
/// 64) until `flushed` fires and nothing more arrives for two seconds.
fn drain(
    mut collector: FakeCollectorServer,
    mut flushed: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<(Vec<ExportedSpan>, FakeCollectorServer)> {
    tokio::spawn(async move {
        let mut spans = Vec::new();
        let mut done = false;
        let mut quiet = 0;
        while quiet < 20 {
            let batch = collector
                .exported_spans(1, Duration::from_millis(100))
                .await;
            done = done || flushed.try_recv().is_ok();
            if batch.is_empty() {
                quiet += usize::from(done);
            } else {
                quiet = 0;
                spans.extend(batch);
            }
        }
        (spans, collector)
    })
}

/// `items(id, counter)` with `n` rows.
async fn create_items(db: &TestDb, n: i64) {
    db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, counter INTEGER NOT NULL DEFAULT 0)")
        .await;
    db.execute(&format!(
        "WITH RECURSIVE g(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM g WHERE v < {n}) \
         INSERT INTO items (id) SELECT v FROM g"
    ))
    .await;
}

fn node_config(node: &str) -> RuntimeConfig {
    RuntimeConfig {
        node: node.into(),
        pool_size: 1,
        lease_ttl: Duration::from_secs(3),
        reconcile_interval: Duration::from_millis(50),
        control_interval: Duration::from_millis(50),
        health_interval: Duration::from_millis(20),
        min_batch_size: 40,
        max_batch_size: 40,
        ..RuntimeConfig::default()
    }
}

/// An attribute's value as text (the collector keeps the protobuf value's
/// debug form, `Some(AnyValue { value: Some(StringValue("…")) })`).
fn value(attributes: &BTreeMap<String, String>, key: &str) -> Option<String> {
    let raw = attributes.get(key)?;
    if let Some(start) = raw.find("StringValue(\"") {
        let inner = &raw[start + "StringValue(\"".len()..raw.rfind("\")")?];
        return Some(inner.replace("\\\"", "\"").replace("\\\\", "\\"));
    }
    ["IntValue(", "BoolValue(", "DoubleValue("]
        .iter()
        .find_map(|prefix| {
            let start = raw.find(prefix)? + prefix.len();
            let end = start + raw[start..].find(')')?;
            Some(raw[start..end].to_owned())
        })
}

/// A span's attribute as text, empty when it has none.
fn attr(span: &ExportedSpan, key: &str) -> String {
    value(&span.attributes, key).unwrap_or_default()
}

fn by_id(spans: &[ExportedSpan]) -> BTreeMap<&str, &ExportedSpan> {
    spans.iter().map(|s| (s.span_id.as_str(), s)).collect()
}

fn named<'a>(spans: &'a [ExportedSpan], prefix: &str) -> Vec<&'a ExportedSpan> {
    spans
        .iter()
        .filter(|s| s.name.starts_with(prefix))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_operation_is_one_trace_from_enqueue_to_statement_across_two_nodes() {
    let collector = FakeCollectorServer::start().await.unwrap();
    let endpoint = collector.endpoint();
    let (flushed, flushed_rx) = tokio::sync::oneshot::channel();
    let spans_task = drain(collector, flushed_rx);
    let telemetry = Telemetry::install(TelemetryConfig {
        export: Export::To {
            endpoint,
            protocol: Protocol::Grpc,
        },
        metric_interval: Duration::from_millis(200),
        ..TelemetryConfig::default()
    })
    .unwrap();
    assert!(telemetry.is_exporting());

    let db = TestDb::sqlite().await;
    create_items(&db, 160).await;
    let throttle = indicator_fn("test load", || async {
        Signal::Throttle {
            percent: 50,
            reason: "test load".into(),
        }
    });
    // Node A runs until its per-run row limit, then shuts down; node B
    // resumes the operation from the store and finishes it.
    let a = RuntimeBuilder::with_store(db.store.clone())
        .config(node_config("node-a"))
        .without_builtin_indicators()
        .indicator(Arc::clone(&throttle))
        .start()
        .await
        .unwrap();
    let options = EnqueueOptions {
        batch_size: 40,
        sub_batch_size: 20,
        limits: Limits {
            max_rows_per_run: Some(80),
            ..Limits::default()
        },
        ..EnqueueOptions::default()
    };
    let arguments =
        serde_json::json!({"table": "items", "key": "id", "set": "counter = counter + 1"});
    let op = a
        .enqueue(
            &UpdateInBatches,
            &serde_json::from_value(arguments).unwrap(),
            &options,
        )
        .await
        .unwrap();
    until("node A changes its 80 rows", || async {
        db.store.operation(op.id).await.unwrap().state.rows_done >= 80
    })
    .await;
    a.shutdown().await.unwrap();
    let b = RuntimeBuilder::with_store(db.store.clone())
        .config(node_config("node-b"))
        .without_builtin_indicators()
        .indicator(throttle)
        .start()
        .await
        .unwrap();
    let record = b.wait(op.id, Duration::from_secs(60)).await.unwrap();
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(record.state.rows_done, 160);
    b.shutdown().await.unwrap();
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .unwrap();
    let _ = flushed.send(());
    let (spans, mut collector) = spans_task.await.unwrap();

    // The stored trace context names the enqueue span.
    let stored = record
        .state
        .trace_context
        .expect("a trace context was stored");
    let parts: Vec<&str> = stored.split('-').collect();
    let (trace_id, enqueue_id) = (parts[1], parts[2]);
    let ours: Vec<ExportedSpan> = spans
        .into_iter()
        .filter(|s| s.trace_id == trace_id)
        .collect();
    let spans_by_id = by_id(&ours);
    let enqueue = spans_by_id
        .get(enqueue_id)
        .expect("the enqueue span was exported");
    assert_eq!(enqueue.name, "enqueue update-in-batches");
    assert_eq!(attr(enqueue, "sluice.operation.id"), op.id.to_string());

    // Every run, on either node, is a child of the enqueue span.
    let runs = named(&ours, "run update-in-batches");
    assert!(runs.len() >= 2, "runs: {runs:?}");
    let nodes: HashSet<String> = runs.iter().map(|r| attr(r, "sluice.node")).collect();
    assert_eq!(
        nodes,
        HashSet::from(["node-a".to_owned(), "node-b".to_owned()]),
        "both nodes' runs are in the trace"
    );
    for run in &runs {
        assert_eq!(run.parent_span_id, enqueue_id, "{run:?}");
        assert_eq!(attr(run, "sluice.operation.id"), op.id.to_string());
        assert_eq!(attr(run, "db.collection.name"), "items");
    }
    let run_ids: HashSet<&str> = runs.iter().map(|r| r.span_id.as_str()).collect();
    // State transitions and the health decision are events on the runs.
    let events: Vec<_> = runs.iter().flat_map(|r| r.events.iter()).collect();
    assert!(
        events.iter().any(|e| e.name == "state transition"
            && value(&e.attributes, "event").as_deref() == Some("batch_succeeded")),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| e.name == "health decision"
            && value(&e.attributes, "reason").as_deref() == Some("test load")),
        "{events:?}"
    );

    // Batches under runs, sub-batches under batches, statements under sub-batches.
    let batches = named(&ours, "batch ");
    // Batches of 40 rows, each under a run; a batch
    // given back when node A stopped ends without rows.
    let batch_rows: u64 = batches
        .iter()
        .map(|b| attr(b, "sluice.rows").parse::<u64>().unwrap_or(0))
        .sum();
    assert_eq!(batch_rows, 160);
    for batch in &batches {
        assert!(run_ids.contains(batch.parent_span_id.as_str()), "{batch:?}");
        assert!(!attr(batch, "sluice.batch.end").is_empty());
        assert!(!attr(batch, "sluice.batch.ordinal").is_empty());
    }
    let batch_ids: HashSet<&str> = batches.iter().map(|b| b.span_id.as_str()).collect();
    let sub_batches = named(&ours, "sub-batch");
    // 20 rows each (a throttle slows the pace between sub-batches, not
    // their size); 160 in all.
    let rows: Vec<u64> = sub_batches
        .iter()
        .map(|s| attr(s, "sluice.rows").parse().unwrap())
        .collect();
    assert_eq!(rows.iter().sum::<u64>(), 160, "{rows:?}");
    assert!(rows.iter().all(|r| *r == 20), "{rows:?}");
    for sub_batch in &sub_batches {
        assert!(batch_ids.contains(sub_batch.parent_span_id.as_str()));
    }
    let sub_batch_ids: HashSet<&str> = sub_batches.iter().map(|s| s.span_id.as_str()).collect();
    let updates = named(&ours, "UPDATE items");
    assert_eq!(updates.len(), sub_batches.len());
    for update in &updates {
        assert!(sub_batch_ids.contains(update.parent_span_id.as_str()));
        assert_eq!(update.kind, "SPAN_KIND_CLIENT");
        assert_eq!(attr(update, "db.system"), "sqlite");
        assert_eq!(attr(update, "db.operation.name"), "UPDATE");
        assert_eq!(attr(update, "db.collection.name"), "items");
        assert!(attr(update, "db.query.text").contains("counter = counter + 1"));
        assert!(
            attr(update, "db.query.text").contains("$1"),
            "values are placeholders"
        );
        let parent = spans_by_id[update.parent_span_id.as_str()];
        assert_eq!(
            attr(update, "sluice.rows_affected"),
            attr(parent, "sluice.rows")
        );
    }
    // Each range sub-batch first reads where it ends.
    let probes = named(&ours, "SELECT items");
    assert_eq!(probes.len(), sub_batches.len());
    assert!(
        probes
            .iter()
            .all(|p| sub_batch_ids.contains(p.parent_span_id.as_str())
                && attr(p, "db.operation.name") == "SELECT")
    );

    // Metrics: rows changed add up.
    let exported = collector.exported_metrics(1, Duration::from_secs(5)).await;
    let names: HashSet<String> = exported
        .iter()
        .flat_map(|m| m.metrics.iter().map(|m| m.name.clone()))
        .collect();
    for name in [
        "sluice.rows",
        "sluice.batch.duration",
        "sluice.sub_batch.duration",
        "sluice.batch.size",
        "sluice.throttle",
    ] {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }
    db.cleanup().await;
}

/// Runs the built binary with `env` on top of the test's environment less
/// any `OTEL_*` variable.
fn sluice_with(db: &TestDb, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.args(args).env("SLUICE_DATABASE_URL", &db.url);
    for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with("OTEL_")) {
        command.env_remove(name);
    }
    command
        .envs(env.iter().copied())
        .output()
        .expect("run sluice")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_run_and_its_successor_continue_the_enqueuer_s_trace() {
    let collector = FakeCollectorServer::start().await.unwrap();
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_owned()),
        ("OTEL_SERVICE_NAME", "sluice-test".to_owned()),
    ];
    let otel: Vec<(&str, &str)> = otel.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (flushed, flushed_rx) = tokio::sync::oneshot::channel();
    let spans_task = drain(collector, flushed_rx);
    let db = TestDb::sqlite().await;
    create_items(&db, 3_000).await;
    let enqueued = sluice_with(
        &db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = counter + 1",
            "--batch-size",
            "100",
            "--sub-batch-size",
            "50",
            "--pause",
            "20ms",
            "--json",
        ],
        &otel,
    );
    succeeded(&enqueued);
    let id = common::json(&enqueued)["id"].as_i64().unwrap();
    let stored = db
        .store
        .operation(id)
        .await
        .unwrap()
        .state
        .trace_context
        .expect("stored");
    let parts: Vec<String> = stored.split('-').map(str::to_owned).collect();
    let (trace_id, enqueue_id) = (parts[1].clone(), parts[2].clone());

    let mut first = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--node", "first", "--lease-ttl", "1s"])
        .env("SLUICE_DATABASE_URL", &db.url)
        .envs(otel.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until_items_changed(&db, 200).await;
    first.kill().unwrap(); // SIGKILL: its unexported spans die with it
    first.wait().unwrap();
    let second = sluice_with(
        &db,
        &[
            "run",
            "--until-idle",
            "--node",
            "second",
            "--lease-ttl",
            "1s",
        ],
        &otel,
    );
    succeeded(&second);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE counter <> 1")
            .await,
        0
    );
    let _ = flushed.send(());
    let (spans, _) = spans_task.await.unwrap();
    let enqueue = spans
        .iter()
        .find(|s| s.span_id == enqueue_id)
        .expect("the enqueuing process exported its span");
    assert_eq!(enqueue.trace_id, trace_id);
    let resumed: Vec<_> = spans
        .iter()
        .filter(|s| {
            s.name.starts_with("run update-in-batches") && attr(s, "sluice.node") == "second"
        })
        .collect();
    assert!(!resumed.is_empty(), "the successor's run was exported");
    for run in resumed {
        assert_eq!(
            run.trace_id, trace_id,
            "the resumed run is in the enqueuer's trace"
        );
        assert_eq!(run.parent_span_id, enqueue_id);
    }
    let statements = spans
        .iter()
        .filter(|s| {
            s.trace_id == trace_id
                && value(&s.attributes, "db.collection.name").as_deref() == Some("items")
                && s.kind == "SPAN_KIND_CLIENT"
        })
        .count();
    assert!(statements > 0);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_otel_variables_nothing_is_exported_or_said() {
    let collector = FakeCollectorServer::start().await.unwrap();
    let (flushed, flushed_rx) = tokio::sync::oneshot::channel();
    let spans_task = drain(collector, flushed_rx);
    let db = TestDb::sqlite().await;
    create_items(&db, 100).await;
    let enqueue = sluice_with(
        &db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = 1",
        ],
        &[],
    );
    let run = sluice_with(&db, &["run", "--until-idle"], &[]);
    for output in [&enqueue, &run] {
        assert!(output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr).to_lowercase();
        for word in ["opentelemetry", "otlp", "export", "collector"] {
            assert!(!stderr.contains(word), "`{word}` said: {stderr}");
        }
    }
    let _ = flushed.send(());
    let (spans, _) = spans_task.await.unwrap();
    assert!(spans.is_empty());
    let stored = db
        .store
        .list(&sluice_store::ListFilter::default())
        .await
        .unwrap();
    assert!(
        stored.iter().all(|r| r.state.trace_context.is_none()),
        "no trace, nothing stored"
    );
    db.cleanup().await;
}

/// `OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`: the same spans go as
/// protobuf over HTTP to `<endpoint>/v1/traces` (a bare listener here plays
/// the collector and answers 200).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_protobuf_export_posts_to_v1_traces() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let exited = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let exporter_done = Arc::clone(&exited);
    let heads = std::thread::spawn(move || {
        // Every connection the exporting process makes (traces, metrics),
        // until it has exited and none is pending.
        listener.set_nonblocking(true).unwrap();
        let mut heads = Vec::new();
        loop {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    stream
                        .set_read_timeout(Some(Duration::from_secs(10)))
                        .unwrap();
                    let mut buffer = vec![0; 64 * 1024];
                    let n = stream.read(&mut buffer).unwrap_or(0);
                    heads.push(String::from_utf8_lossy(&buffer[..n]).to_lowercase());
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                }
                Err(_) if exporter_done.load(std::sync::atomic::Ordering::SeqCst) => return heads,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    let db = TestDb::sqlite().await;
    create_items(&db, 10).await;
    let enqueued = sluice_with(
        &db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = 1",
        ],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ],
    );
    succeeded(&enqueued);
    exited.store(true, std::sync::atomic::Ordering::SeqCst);
    let heads = heads.join().unwrap();
    let traces = heads
        .iter()
        .find(|h| h.starts_with("post /v1/traces "))
        .unwrap_or_else(|| panic!("no POST /v1/traces among {heads:?}"));
    assert!(
        traces.contains("content-type: application/x-protobuf"),
        "{traces}"
    );
    db.cleanup().await;
}
