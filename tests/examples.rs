//! The embedding example in `examples/` runs as a test, so it keeps working.

#[allow(dead_code)]
#[path = "../examples/delete_done_todos.rs"]
mod delete_done_todos;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delete_done_todos_example_deletes_exactly_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("todos.sqlite").display());
    let (deleted, left) = delete_done_todos::run(&url).await.unwrap();
    // User 7 owns ids ≡ 2 (mod 3); done ones are odd; 2025 ones have v % 4 in {1}.
    let expected = (1..=30_000)
        .filter(|v| 5 + v % 3 == 7 && v % 2 == 1 && 2025 + v % 4 / 2 == 2025)
        .count() as i64;
    assert!(expected > 0);
    assert_eq!(deleted, expected);
    assert_eq!(left, 30_000 - expected);
}
