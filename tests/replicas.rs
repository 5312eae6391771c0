//! Replica lag on real replicas: a PostgreSQL streaming replica and a
//! MariaDB GTID replica (`.ci/run` starts both). Their replay is paused for
//! real (`pg_wal_replay_pause()`, `STOP SLAVE SQL_THREAD`): the operation
//! stops once the lag passes the threshold, records why, and resumes by
//! itself when the replica catches up. A replica that goes away (its
//! connections cut) is a stop with its reason; one that cannot be reached
//! at start-up keeps the worker from starting.

mod common;

use std::time::{Duration, Instant};

use common::{TestDb, until_within};
use serde_json::json;
use sluice_runtime::health::Thresholds;
use sluice_runtime::{EnqueueOptions, Runtime, RuntimeBuilder, RuntimeConfig};
use sluice_store::{Event, Health};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

postgres_and_mysql!(replica_lag_stops_the_operation_and_it_resumes_when_the_replica_catches_up,);

for_each_backend!(a_replica_that_cannot_be_reached_or_is_of_another_kind_is_refused_at_start,);

/// Lag thresholds small enough for a test: throttled from 1 s, stopped from 2 s.
const LAG: Thresholds = Thresholds {
    throttle_at: 1.0,
    stop_at: 2.0,
    release: 0.5,
};

/// A runtime on `db` watching the replica at `replica` alone.
async fn watching(db: &TestDb, replica: &str) -> Runtime {
    RuntimeBuilder::with_store(db.store.clone())
        .config(RuntimeConfig {
            node: "replica-watcher".into(),
            health_interval: Duration::from_millis(100),
            health_clear_after: 2,
            reconcile_interval: Duration::from_millis(50),
            control_interval: Duration::from_millis(50),
            ..RuntimeConfig::default()
        })
        .without_builtin_indicators()
        .replica(replica)
        .replica_lag(LAG)
        .start()
        .await
        .unwrap()
}

/// Enqueues `counter = counter + 1` over the rows of group `grp`, in small
/// paced sub-batches so it lasts.
async fn increment(runtime: &Runtime, grp: i64) -> i64 {
    let options = EnqueueOptions {
        batch_size: 1_000,
        sub_batch_size: 100,
        pause: Duration::from_millis(20),
        ..EnqueueOptions::default()
    };
    let arguments = json!({
        "table": "items", "key": "id", "set": "counter = counter + 1", "where": format!("grp = {grp}")
    });
    runtime
        .enqueue_json("update-in-batches", &arguments, &options)
        .await
        .unwrap()
        .id
}

/// The reasons of operation `id`'s `throttled` events to `health`, in order.
/// The reasons of the operation's health events of kind `health` recorded
/// after event `after`.
async fn health_reasons(db: &TestDb, id: i64, health: Health, after: i64) -> Vec<String> {
    db.store
        .events(id, after)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.event {
            Event::Throttled { health: h, reason } if h == health => {
                Some(reason.unwrap_or_default())
            }
            _ => None,
        })
        .collect()
}

/// Waits until the operation is not stopped (a replica still catching up
/// with earlier tests' writes may stop it for a while); returns its last
/// event, after which the stop a test causes is looked for.
async fn not_stopped(db: &TestDb, id: i64) -> i64 {
    let last = || async {
        let events = db.store.events(id, 0).await.unwrap();
        let health = events.iter().rev().find_map(|e| match &e.event {
            Event::Throttled { health, .. } => Some(*health),
            _ => None,
        });
        (events.last().map_or(0, |e| e.seq), health)
    };
    until_within(
        "the operation not stopped",
        Duration::from_secs(120),
        || async { last().await.1 != Some(Health::Stopped) },
    )
    .await;
    last().await.0
}

async fn rows_done(db: &TestDb, id: i64) -> i64 {
    db.store.operation(id).await.unwrap().state.rows_done
}

async fn replica_lag_stops_the_operation_and_it_resumes_when_the_replica_catches_up(db: &TestDb) {
    let Some(replica) = db.replica_url().await else {
        return;
    };
    common::create_counted_items(db, 40_000).await;
    // Replaying, the table included: the lag the test makes is its own.
    db.replica_caught_up(Duration::from_secs(600)).await;
    let runtime = watching(db, &replica).await;
    let id = increment(&runtime, 1).await;
    until_within("the operation runs", Duration::from_secs(120), || async {
        rows_done(db, id).await >= 1_000
    })
    .await;
    until_within(
        "a heartbeat on the replica",
        Duration::from_secs(120),
        || db.replica_has_a_heartbeat(&replica),
    )
    .await;

    // Replay paused: the lag grows with the clock until it is a stop.
    let before = not_stopped(db, id).await;
    let replay = db.pause_replica(&db.replica_server()).await;
    let paused = Instant::now();
    until_within(
        "a stop for replica lag",
        Duration::from_secs(30),
        || async {
            !health_reasons(db, id, Health::Stopped, before)
                .await
                .is_empty()
        },
    )
    .await;
    let stopped_after = paused.elapsed();
    let reason = health_reasons(db, id, Health::Stopped, before)
        .await
        .remove(0);
    assert!(reason.contains("lag of replica"), "{reason}");
    assert!(
        reason.contains(if db.backend == "postgres" {
            "WAL replay paused"
        } else {
            "SQL thread stopped"
        }),
        "{reason}"
    );
    assert!(!reason.contains("search_path"), "{reason}");
    // Held: past the sub-batches in flight, nothing more is done while the
    // monitor goes on polling (its heartbeats a second further on).
    let held_at = rows_done(db, id).await;
    let beat = "SELECT beat_ms FROM sluice_heartbeat";
    let beat_at_stop = db.scalar(beat).await;
    until_within("ten more health polls", Duration::from_secs(10), || async {
        db.scalar(beat).await >= beat_at_stop + 1_000
    })
    .await;
    assert!(
        rows_done(db, id).await - held_at <= 4 * 100,
        "sub-batches started while stopped"
    );

    // Replay resumed: the replica catches up and the operation goes on.
    replay.resume().await;
    let resumed = Instant::now();
    until_within("the operation resumes", Duration::from_secs(60), || async {
        rows_done(db, id).await > held_at + 4 * 100
    })
    .await;
    let going_after = resumed.elapsed();
    let record = runtime.wait(id, Duration::from_secs(120)).await.unwrap();
    assert_eq!(record.state.rows_done, 20_000);
    common::assert_group_one_changed_once(db).await;
    db.store.verify(id).await.unwrap();
    eprintln!(
        "{}: replay paused → stopped in {:.1} s (threshold {} s, poll 0.1 s); \
         replay resumed → running again in {:.1} s",
        db.backend,
        stopped_after.as_secs_f64(),
        LAG.stop_at,
        going_after.as_secs_f64()
    );
    runtime.shutdown().await.unwrap();

    // The replica goes away (every connection to it cut): a stop, naming it.
    let proxy = Proxy::to(&replica).await;
    let runtime = watching(db, &proxy.url).await;
    let id = increment(&runtime, 0).await;
    until_within(
        "the second operation runs",
        Duration::from_secs(60),
        || async { rows_done(db, id).await >= 500 },
    )
    .await;
    let before = not_stopped(db, id).await;
    proxy.cut();
    until_within(
        "a stop for the replica gone",
        Duration::from_secs(30),
        || async {
            !health_reasons(db, id, Health::Stopped, before)
                .await
                .is_empty()
        },
    )
    .await;
    let reason = health_reasons(db, id, Health::Stopped, before)
        .await
        .remove(0);
    assert!(
        reason.contains("unreachable") || reason.contains("did not answer"),
        "{reason}"
    );
    assert!(reason.contains("127.0.0.1"), "{reason}");
    runtime.shutdown().await.unwrap();
}

/// `sluice run --replica`: an unreachable replica exits 1 naming it without
/// its password; on SQLite, or of another backend than the store, exit 2.
async fn a_replica_that_cannot_be_reached_or_is_of_another_kind_is_refused_at_start(db: &TestDb) {
    let (unreachable, other) = match db.backend {
        "postgres" => (
            "postgres://sluice:hunter2@127.0.0.1:1/test",
            "mysql://root@127.0.0.1:3307/x",
        ),
        "mysql" => (
            "mysql://sluice:hunter2@127.0.0.1:1/test",
            "postgres://postgres@127.0.0.1:5433/test",
        ),
        _ => ("", "postgres://postgres@127.0.0.1:5433/test"),
    };
    let operations = db.scalar("SELECT COUNT(*) FROM sluice_operations").await;
    if !unreachable.is_empty() {
        let output = common::sluice(db, &["run", "--until-idle", "--replica", unreachable]);
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{err}");
        assert!(
            err.contains("cannot reach the replica at")
                && err.contains("sluice:***@127.0.0.1:1/test"),
            "{err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
    }
    let output = common::sluice(db, &["run", "--until-idle", "--replica", other]);
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains(if db.backend == "sqlite" {
            "an SQLite store has none"
        } else {
            "is not a"
        }),
        "{err}"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM sluice_operations").await,
        operations
    );
}

/// A TCP relay to a replica, whose connections the test can cut at once
/// (the replica going away, as a network partition makes it).
struct Proxy {
    url: String,
    relays: std::sync::Arc<std::sync::Mutex<JoinSet<()>>>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Relays a local port to the host and port of `url`; [`Proxy::url`]
    /// is `url` through it.
    async fn to(url: &str) -> Proxy {
        let after_at = url.rsplit('@').next().unwrap();
        let target = after_at.split('/').next().unwrap().to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let relays = std::sync::Arc::new(std::sync::Mutex::new(JoinSet::new()));
        let spawned = std::sync::Arc::clone(&relays);
        let accepting = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                spawned.lock().unwrap().spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        let host = &after_at[..after_at.find('/').unwrap_or(after_at.len())];
        let url = url.replacen(host, &format!("127.0.0.1:{port}"), 1);
        Proxy {
            url,
            relays,
            accepting,
        }
    }

    /// Stops accepting and drops every relayed connection.
    fn cut(&self) {
        self.accepting.abort();
        self.relays.lock().unwrap().abort_all();
    }
}
