//! What one sub-batch costs in each form the store can send it in, measured
//! by turns in one run so that drift on the machine (and the table's dead
//! rows piling up as the run deletes) weighs on every form alike:
//!
//! - `loop`: the hand-written loop's statement alone, in autocommit;
//! - `transaction`: the same statement with its fenced progress record in
//!   one transaction (`BEGIN; SET LOCAL statement_timeout`, statement,
//!   record, `COMMIT`: four round trips), on a connection taken from
//!   the pool for it — the form every operation's `run` took until
//!   2026-11-23;
//! - `kept transaction`: the same transaction on a connection a pool
//!   worker's session keeps from one sub-batch to the next
//!   ([`sluice_store::SubBatchSession::connection`]) — the form an
//!   operation's `run` takes since;
//! - `one statement`: [`Store::run_loop_sub_batch_statement`] on sessions
//!   bounded by `statement_timeout` — the change with its record fused into
//!   one statement, one round trip — the form `delete-aged-rows` takes.
//!
//! Each turn deletes 1,000 aged rows of `bench_events` with the statement
//! the runtime builds for `delete-aged-rows`, until none are left.
//!
//! `cargo bench --bench sub_batch_forms` (env: `SLUICE_BENCH_ROWS`, default
//! 1,000,000; `SLUICE_BENCH_REPEATS`, default 2; `SLUICE_TEST_POSTGRES_URL`).
//! PostgreSQL only: SQLite has one form, the transaction, and its forms
//! cannot take turns (each connection keeps its own page cache, which the
//! others' writes make stale, so the turns would measure each other).

mod common;

use std::time::{Duration, Instant};

use sluice_operations::batching::{LoopPick, loop_rows};
use sluice_operations::{DeleteAgedRows, Operation, Strategy};
use sluice_store::{BatchLease, OperationSpec, Store};
use sluice_target::{ConnectOptions, Statement};

use common::{alter_autovacuum, env, fill_aged_events as fill, postgres_url, set_autovacuum};

const SUB_BATCH: i64 = 1_000;
const KIND: &str = "bench-sub-batch-forms";
const FORMS: [&str; 4] = ["loop", "transaction", "one statement", "kept transaction"];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows: i64 = env("SLUICE_BENCH_ROWS", 1_000_000);
    let repeats: usize = env("SLUICE_BENCH_REPEATS", 2);
    let timeout = Duration::from_secs(30);
    let options = ConnectOptions {
        sub_batch_timeout: Some(timeout),
        ..ConnectOptions::default()
    };
    let url = postgres_url();
    let store = match Store::connect_with(&url, &options).await {
        Ok(store) => store,
        Err(e) => {
            println!("{}: skipped ({e})", sluice_target::redact_url(&url));
            return;
        }
    };
    let autovacuum = set_autovacuum(&store).await;
    println!("rows {rows}, sub-batch {SUB_BATCH}, repeats {repeats}");
    for repeat in 1..=repeats {
        fill(&store, rows).await;
        let lease = batch_lease(&store).await;
        let delete = aged_rows(&store).await;
        let mut session = store.sub_batch_session(true);
        let mut spent = [Duration::ZERO; FORMS.len()];
        let mut turns = [0u32; FORMS.len()];
        let (mut deleted, mut with_record) = (0, 0);
        // Whose turn it is rotates, and so does who starts a repeat.
        for turn in repeat.. {
            let form = turn % FORMS.len();
            let started = Instant::now();
            let n = match form {
                0 => store.target().execute(&delete).await.unwrap(),
                1 => {
                    let mut tx = store
                        .begin_sub_batch_within(&lease, None, Some(timeout))
                        .await
                        .unwrap();
                    let n = tx.execute(&delete).await.unwrap();
                    tx.commit(None, n as i64).await.unwrap();
                    n
                }
                2 => store
                    .run_loop_sub_batch_statement(&lease, &delete, None, SUB_BATCH, timeout)
                    .await
                    .unwrap(),
                _ => {
                    let mut connection = session.connection(timeout).await.unwrap();
                    let mut tx = connection
                        .begin_sub_batch(&lease, None, timeout)
                        .await
                        .unwrap();
                    let n = tx.execute(&delete).await.unwrap();
                    tx.commit(None, n as i64).await.unwrap();
                    session.put_back(connection, true);
                    n
                }
            } as i64;
            spent[form] += started.elapsed();
            turns[form] += 1;
            deleted += n;
            if form > 0 {
                with_record += n;
            }
            if n < SUB_BATCH {
                break;
            }
        }
        assert_eq!(deleted, rows, "every aged row deleted once");
        let recorded = store.batches(lease.operation_id).await.unwrap()[0].rows_affected;
        assert_eq!(recorded, with_record, "the record forms count exactly");
        let mean = |form: usize| spent[form].as_secs_f64() * 1e3 / f64::from(turns[form].max(1));
        println!(
            "repeat {repeat}: {}",
            FORMS
                .iter()
                .enumerate()
                .map(|(form, name)| format!(
                    "{name} {:.3} ms ({:+.3} ms, {:.3}×) over {} sub-batches",
                    mean(form),
                    mean(form) - mean(0),
                    mean(form) / mean(0),
                    turns[form]
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    store
        .target()
        .execute(&Statement::new("DROP TABLE IF EXISTS bench_events"))
        .await
        .unwrap();
    if let Some(previous) = autovacuum {
        alter_autovacuum(&store, &previous).await;
    }
    store.close().await;
}

/// The statement the runtime sends on PostgreSQL for a `delete-aged-rows`
/// sub-batch of `bench_events`: the operation's own shape and loop pick, up
/// to `SUB_BATCH` aged rows.
async fn aged_rows(store: &Store) -> Statement {
    let arguments = common::older_than_a_day(store, "bench_events").await;
    let shape = DeleteAgedRows.shape(&arguments).expect("its shape");
    let Strategy::Loop { key } = shape.strategy() else {
        unreachable!("delete-aged-rows loops")
    };
    let head = Statement::new("DELETE FROM ").ident(shape.table());
    loop_rows(
        &shape,
        key,
        SUB_BATCH,
        LoopPick::for_target(store.target()),
        None,
        head,
    )
}

/// A running loop batch of a fresh operation of this harness's own kind,
/// held for an hour: the fence the record forms write through.
async fn batch_lease(store: &Store) -> BatchLease {
    // Arguments of its own, so it is not taken for an earlier run's.
    let run = chrono::Utc::now().timestamp_micros();
    let mut spec = OperationSpec::new(KIND, "bench_events", vec![])
        .with_arguments(&serde_json::json!({ "run": run }));
    spec.batch_size = i64::MAX / 2;
    spec.sub_batch_size = SUB_BATCH;
    let id = store.enqueue(spec).await.unwrap().id;
    let hour = Duration::from_secs(3_600);
    let claimed = store
        .claim_operations_of("bench", Some(&[KIND]), 100, hour)
        .await
        .unwrap();
    let lease = claimed
        .into_iter()
        .find(|c| c.record.id == id)
        .and_then(|c| c.record.lease)
        .expect("the new operation is claimed");
    store.plan_batch(&lease, None, i64::MAX / 2).await.unwrap();
    store
        .claim_batches("bench", Some(id), 1, hour)
        .await
        .unwrap()
        .remove(0)
        .lease()
        .expect("a claimed batch is running")
}
