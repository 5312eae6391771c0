//! Durability across processes: a child process writes to an SQLite file and
//! dies without closing anything; a new process finds everything it committed.

mod common;

use std::process::Command;
use std::time::Duration;

use sluice_store::{Event, Expected, OperationSpec, OperationStatus, Store};
use sluice_target::Cursor;

const CHILD_ENV: &str = "SLUICE_TEST_CHILD_DB";

#[tokio::test]
async fn sqlite_file_keeps_everything_after_the_writer_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("sluice.sqlite").display());
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_writes_then_aborts",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &url)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !output.status.success(),
        "the child must die abruptly, not exit cleanly"
    );
    let id: i64 = stdout
        .lines()
        .find_map(|l| l.split_once("COMMITTED ").map(|(_, id)| id))
        .unwrap_or_else(|| {
            panic!(
                "child did not commit: {stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
        .trim()
        .parse()
        .unwrap();

    let store = Store::connect(&url).await.unwrap();
    let record = store.operation(id).await.unwrap();
    assert_eq!(record.state.status, OperationStatus::Paused);
    assert_eq!(
        (record.state.batches_planned, record.state.cursor.clone()),
        (2, Some(Cursor::int(200)))
    );
    assert_eq!(store.events(id, 0).await.unwrap().len(), 5);
    assert_eq!(store.batches(id).await.unwrap().len(), 2);
    store.verify(id).await.unwrap();
    // And it is writable again.
    store
        .append(id, Expected::Any, None, &[Event::Resumed])
        .await
        .unwrap();
}

/// Runs only as the child of the test above.
#[tokio::test]
#[ignore = "child process of sqlite_file_keeps_everything_after_the_writer_is_killed"]
async fn child_writes_then_aborts() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = Store::connect(&url).await.unwrap();
    let id = store
        .enqueue(OperationSpec::new("k", "t", vec!["id".into()]))
        .await
        .unwrap()
        .id;
    let lease = common::claim_lease(&store, "child", Duration::from_secs(60)).await;
    store
        .plan_batch(&lease, Some(Cursor::int(100)), 100)
        .await
        .unwrap();
    store
        .plan_batch(&lease, Some(Cursor::int(200)), 100)
        .await
        .unwrap();
    store
        .append(
            id,
            Expected::Any,
            Some(&lease),
            &[Event::Paused {
                reason: "test".into(),
            }],
        )
        .await
        .unwrap();
    println!("COMMITTED {id}");
    std::process::abort();
}
