//! The crash suite: a large `update-in-batches` that increments a counter,
//! run by worker processes that are killed with SIGKILL at random moments
//! and replaced, on PostgreSQL and MySQL. At the end every matching row was
//! changed exactly once, no other row was touched, the operation is
//! finished and every operation's event log replays to its stored state. The workers
//! share the operation (`--parallel-batches 2`): the one holding it plans a
//! batch ahead and the other helps, so kills land on owners and helpers.
//!
//! `SLUICE_CRASH_ROWS` (default 1,000,000) and `SLUICE_CRASH_KILLS`
//! (default 20) size it; a soak run raises them. `SLUICE_CRASH_SEED`
//! replays a run's kill schedule (each run prints its seed).

mod common;

use std::time::Duration;

use common::{
    TestDb, Worker, assert_group_one_changed_once, create_counted_items, enqueue_increment,
    spawn_worker,
};
use sluice_store::{BatchStatus, ListFilter, OperationStatus};

postgres_and_mysql!(workers_killed_at_random_moments_change_every_row_exactly_once);

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator (xorshift), so a failing schedule can be
/// replayed from its seed.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// A new worker process, named after how many were started before it.
fn start(db: &TestDb, generation: &mut u32) -> (String, Worker) {
    *generation += 1;
    let node = format!("crash-worker-{generation}");
    let child = spawn_worker(
        db,
        &[
            "--node",
            &node,
            "--lease-ttl",
            "1s",
            "--pool-size",
            "2",
            "--parallel-batches",
            "2",
        ],
    );
    (node, child)
}

async fn workers_killed_at_random_moments_change_every_row_exactly_once(db: &TestDb) {
    let rows = env("SLUICE_CRASH_ROWS", 1_000_000) as i64;
    let kills = env("SLUICE_CRASH_KILLS", 20);
    let seed = env(
        "SLUICE_CRASH_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1,
    );
    eprintln!("crash suite: {rows} rows, {kills} kills, SLUICE_CRASH_SEED={seed}");
    let mut dice = Dice(seed);
    create_counted_items(db, rows).await;
    let matching = db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1").await;
    let enqueued = enqueue_increment(
        db,
        &[
            "--where",
            "grp = 1",
            "--batch-size",
            "5000",
            "--sub-batch-size",
            "1000",
            "--pause",
            "10ms",
        ],
    );
    let id = enqueued["id"].as_i64().unwrap();
    let mut generation = 0;
    let mut workers = vec![start(db, &mut generation), start(db, &mut generation)];
    let progress = || async { db.store.operation(id).await.unwrap().state };
    // Kill k comes once the k-th of `kills` evenly spaced slots is reached,
    // at a random point in its slot; the last slot ends well before the
    // last row, so every kill lands while there is work.
    let slot = matching / (kills as i64 + 4);
    let thresholds: Vec<i64> = (1..=kills as i64)
        .map(|k| slot * k + dice.below((slot / 2) as u64) as i64)
        .collect();
    let mut killed = 0;
    for target in thresholds {
        common::until_within(
            "the operation advances to the next kill",
            Duration::from_secs(120),
            || async {
                let now = progress().await;
                now.rows_done >= target || now.status == OperationStatus::Finished
            },
        )
        .await;
        if progress().await.status == OperationStatus::Finished {
            break;
        }
        // The kill itself at a random moment within the next sub-batches.
        tokio::time::sleep(Duration::from_millis(dice.below(150))).await;
        // Mostly the worker holding the operation; sometimes the idle one.
        let holder = db.store.operation(id).await.unwrap().lease.map(|l| l.node);
        let victim = holder
            .filter(|_| dice.below(5) > 0)
            .and_then(|node| workers.iter().position(|(name, _)| *name == node))
            .unwrap_or_else(|| dice.below(workers.len() as u64) as usize);
        let (_, mut child) = workers.remove(victim);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        killed += 1;
        workers.push(start(db, &mut generation));
    }
    common::until_within(
        "the operation finishes after the kills",
        Duration::from_secs(600),
        || async { progress().await.status == OperationStatus::Finished },
    )
    .await;
    for (_, mut child) in workers {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    eprintln!("crash suite: {killed} workers killed");
    assert_eq!(killed, kills, "every kill landed before the end");

    // Exactly once: every matching row changed once, no other row touched.
    assert_group_one_changed_once(db).await;
    let record = db.store.operation(id).await.unwrap();
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(record.state.rows_done, matching);
    let batches = db.store.batches(id).await.unwrap();
    assert!(batches.iter().all(|b| b.status == BatchStatus::Succeeded));
    assert_eq!(
        batches.iter().map(|b| b.rows_affected).sum::<i64>(),
        matching
    );
    // Every operation's event log replays to its stored state.
    let all = db
        .store
        .list(&ListFilter {
            limit: Some(i64::MAX),
            ..ListFilter::default()
        })
        .await
        .unwrap();
    for operation in all {
        db.store.verify(operation.id).await.unwrap();
    }
    let started = db
        .store
        .events(id, 0)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event.kind() == "started")
        .count();
    assert!(
        started >= 2,
        "the operation was taken over ({started} starts)"
    );
}
