//! The crash suite: a large `update-in-batches` that increments a counter,
//! run by worker processes that are killed with SIGKILL at random moments
//! and replaced, on PostgreSQL and MySQL. At the end every matching row was
//! changed exactly once, no other row was touched, the operation is
//! finished and every operation's event log replays to its stored state. The workers
//! share the operation (`--parallel-batches 2`): the one holding it plans a
//! batch ahead and the other helps, so kills land on owners and helpers.
//!
//! The same kills run an `archive-rows`: every row ends in exactly one of
//! the live and archive tables, with its values; and an `update-in-batches
//! --undo` and then its revert: every row ends as it was before both.
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

postgres_and_mysql!(
    workers_killed_at_random_moments_change_every_row_exactly_once,
    archiving_workers_killed_at_random_moments_move_every_row_exactly_once,
    an_undone_update_and_its_revert_under_kills_leave_every_row_as_before,
    an_undone_archive_and_its_revert_under_kills_leave_every_row_as_before,
);

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

/// The seed of this run's kill schedule (`SLUICE_CRASH_SEED`, or the clock).
fn seed() -> u64 {
    env(
        "SLUICE_CRASH_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1,
    )
}

/// Runs operation `id` (`matching` rows in scope) with two worker processes,
/// SIGKILLing one at each of `kills` random moments spread over the run and
/// starting another, until it finishes. Returns how many kills landed.
async fn run_with_kills(db: &TestDb, id: i64, matching: i64, kills: u64, dice: &mut Dice) -> u64 {
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
    drop(workers); // killed
    killed
}

async fn workers_killed_at_random_moments_change_every_row_exactly_once(db: &TestDb) {
    let rows = env("SLUICE_CRASH_ROWS", 1_000_000) as i64;
    let kills = env("SLUICE_CRASH_KILLS", 20);
    let seed = seed();
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
    let killed = run_with_kills(db, id, matching, kills, &mut dice).await;
    eprintln!("crash suite: {killed} workers killed");
    assert_eq!(killed, kills, "every kill landed before the end");

    // Exactly once: every matching row changed once, no other row touched.
    assert_group_one_changed_once(db).await;
    assert_finished_after_takeovers(db, id, matching).await;
}

/// Operation `id` finished with `matching` rows done, every batch
/// succeeded and counted them, it was taken over at least once, and every
/// operation's event log replays to its stored state.
async fn assert_finished_after_takeovers(db: &TestDb, id: i64, matching: i64) {
    let record = db.store.operation(id).await.unwrap();
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(record.state.rows_done, matching);
    let batches = db.store.batches(id).await.unwrap();
    assert!(batches.iter().all(|b| b.status == BatchStatus::Succeeded));
    assert_eq!(
        batches.iter().map(|b| b.rows_affected).sum::<i64>(),
        matching
    );
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

/// `archive-rows` under the same kills: `items(id, grp, counter)` with a
/// per-row value, half of it (`grp = 1`) moved into `items_archive`. At the
/// end the live table holds exactly the other half, the archive exactly
/// this half, each row once and with its values (`SLUICE_ARCHIVE_ROWS`,
/// default 200,000, and `SLUICE_ARCHIVE_KILLS`, default 10, size it).
async fn archiving_workers_killed_at_random_moments_move_every_row_exactly_once(db: &TestDb) {
    let rows = env("SLUICE_ARCHIVE_ROWS", 200_000) as i64;
    let kills = env("SLUICE_ARCHIVE_KILLS", 10);
    let seed = seed();
    eprintln!("archive crash suite: {rows} rows, {kills} kills, SLUICE_CRASH_SEED={seed}");
    let mut dice = Dice(seed);
    create_counted_items(db, rows).await;
    // A value per row, so a row copied with the wrong values shows.
    db.execute("UPDATE items SET counter = id % 1000").await;
    let matching = db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1").await;
    let checksum = |table: &'static str, grp: i64| async move {
        db.scalar(&format!(
            "SELECT CAST(COALESCE(SUM(id * 7 + counter), 0) AS BIGINT) FROM {table} WHERE grp = {grp}"
        ))
        .await
    };
    let (kept_sum, moved_sum) = (checksum("items", 0).await, checksum("items", 1).await);
    let enqueued = common::json(&common::sluice(
        db,
        &[
            "enqueue",
            "archive-rows",
            "--table",
            "items",
            "--into",
            "items_archive",
            "--where",
            "grp = 1",
            "--batch-size",
            "2000",
            "--sub-batch-size",
            "500",
            "--pause",
            "10ms",
            "--json",
        ],
    ));
    let id = enqueued["id"].as_i64().unwrap();
    let killed = run_with_kills(db, id, matching, kills, &mut dice).await;
    eprintln!("archive crash suite: {killed} workers killed");
    assert_eq!(killed, kills, "every kill landed before the end");

    // Every row in exactly one table, with its values.
    let count = |sql: &'static str| db.scalar(sql);
    assert_eq!(count("SELECT COUNT(*) FROM items WHERE grp = 1").await, 0);
    assert_eq!(
        count("SELECT COUNT(*) FROM items WHERE grp = 0").await,
        rows - matching
    );
    assert_eq!(count("SELECT COUNT(*) FROM items_archive").await, matching);
    assert_eq!(
        count("SELECT COUNT(DISTINCT id) FROM items_archive WHERE grp = 1").await,
        matching,
        "no row archived twice, none of the other group"
    );
    assert_eq!(checksum("items", 0).await, kept_sum, "kept rows unchanged");
    assert_eq!(
        checksum("items_archive", 1).await,
        moved_sum,
        "archived rows hold their values"
    );
    assert_finished_after_takeovers(db, id, matching).await;
}

/// `update-in-batches --undo` and then `sluice revert` of it, each under
/// the same kills: the update changes every row of its scope once, and
/// after the revert every row of the table is as it was before the update
/// (a hash of each row, summed), each row put back once
/// (`SLUICE_UNDO_ROWS`, default 100,000, and `SLUICE_UNDO_KILLS`, default
/// 6, size it).
async fn an_undone_update_and_its_revert_under_kills_leave_every_row_as_before(db: &TestDb) {
    let rows = env("SLUICE_UNDO_ROWS", 100_000) as i64;
    let kills = env("SLUICE_UNDO_KILLS", 6);
    let seed = seed();
    eprintln!("undo crash suite: {rows} rows, {kills} kills, SLUICE_CRASH_SEED={seed}");
    let mut dice = Dice(seed);
    create_counted_items(db, rows).await;
    db.execute("UPDATE items SET counter = id % 1000").await;
    let matching = db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1").await;
    let row_hash = match db.backend {
        "mysql" => "CRC32(CONCAT_WS(':', id, grp, counter))",
        _ => "hashtext(id || ':' || grp || ':' || counter)",
    };
    let checksum = || async {
        db.scalar(&format!(
            "SELECT CAST(SUM({row_hash}) AS BIGINT) + COUNT(*) FROM items"
        ))
        .await
    };
    let before = checksum().await;
    let enqueued = enqueue_increment(
        db,
        &[
            "--where",
            "grp = 1",
            "--undo",
            "--batch-size",
            "2000",
            "--sub-batch-size",
            "500",
            "--pause",
            "10ms",
        ],
    );
    let id = enqueued["id"].as_i64().unwrap();
    let killed = run_with_kills(db, id, matching, kills, &mut dice).await;
    assert_eq!(
        killed, kills,
        "every kill landed before the end of the update"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1 AND counter <> id % 1000 + 1")
            .await,
        0,
        "every row of the scope changed once"
    );
    assert_finished_after_takeovers(db, id, matching).await;

    revert_under_kills(db, id, matching, kills, &mut dice).await;
    assert_eq!(
        checksum().await,
        before,
        "every row as it was before the update"
    );
}

/// `archive-rows --undo` and then its revert, each under the same kills:
/// after the revert every row is live again as it was, and the archive
/// table is empty (`SLUICE_UNDO_ROWS` and `SLUICE_UNDO_KILLS` size it).
async fn an_undone_archive_and_its_revert_under_kills_leave_every_row_as_before(db: &TestDb) {
    let rows = env("SLUICE_UNDO_ROWS", 100_000) as i64;
    let kills = env("SLUICE_UNDO_KILLS", 6);
    let seed = seed();
    eprintln!("undo archive crash suite: {rows} rows, {kills} kills, SLUICE_CRASH_SEED={seed}");
    let mut dice = Dice(seed);
    create_counted_items(db, rows).await;
    db.execute("UPDATE items SET counter = id % 1000").await;
    let matching = db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1").await;
    let checksum = |table: &'static str| async move {
        db.scalar(&format!(
            "SELECT CAST(COALESCE(SUM(id * 7 + counter * 3 + grp), 0) AS BIGINT) + COUNT(*) \
             FROM {table}"
        ))
        .await
    };
    let before = checksum("items").await;
    let enqueued = common::json(&common::sluice(
        db,
        &[
            "enqueue",
            "archive-rows",
            "--table",
            "items",
            "--into",
            "items_archive",
            "--where",
            "grp = 1",
            "--undo",
            "--batch-size",
            "2000",
            "--sub-batch-size",
            "500",
            "--pause",
            "10ms",
            "--json",
        ],
    ));
    let id = enqueued["id"].as_i64().unwrap();
    let killed = run_with_kills(db, id, matching, kills, &mut dice).await;
    assert_eq!(
        killed, kills,
        "every kill landed before the end of the archive"
    );
    assert_finished_after_takeovers(db, id, matching).await;
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items_archive").await,
        matching
    );
    revert_under_kills(db, id, matching, kills, &mut dice).await;
    assert_eq!(
        checksum("items").await,
        before,
        "every row live again, as it was"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items_archive").await, 0);
}

/// Reverts operation `id` (`matching` rows) under `kills` kills: the
/// revert finishes having put back every row once, none in conflict.
async fn revert_under_kills(db: &TestDb, id: i64, matching: i64, kills: u64, dice: &mut Dice) {
    let revert = common::json(&common::sluice(db, &["revert", &id.to_string(), "--json"]));
    let revert = revert["id"].as_i64().unwrap();
    let killed = run_with_kills(db, revert, matching, kills, dice).await;
    eprintln!("undo crash suite: {killed} workers killed during the revert");
    assert_eq!(
        killed, kills,
        "every kill landed before the end of the revert"
    );
    assert_finished_after_takeovers(db, revert, matching).await;
    let shown = common::json(&common::sluice(
        db,
        &["show", &revert.to_string(), "--json"],
    ));
    assert_eq!(shown["undo"]["reverted"], matching, "{shown}");
    assert_eq!(shown["undo"]["conflicts"], 0, "{shown}");
}
