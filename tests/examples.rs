//! The embedding example in `examples/` runs as a test on SQLite and
//! PostgreSQL, and the README and the guide show its operation exactly as
//! it is written. The README stays short: a newcomer's ten minutes.

mod common;

use common::TestDb;

#[allow(dead_code)]
#[path = "../examples/delete_done_todos/main.rs"]
mod delete_done_todos;

for_each_backend!(the_delete_done_todos_example_deletes_exactly_its_rows,);

/// User 7's done todos completed before 2026 go; nothing else does.
async fn the_delete_done_todos_example_deletes_exactly_its_rows(db: &TestDb) {
    let (deleted, left) = delete_done_todos::run(&db.url).await.unwrap();
    // Todo v: user 5 + v % 3, done when odd, completed 2025-01-01 + v × 2103 s.
    let new_year = 1_767_225_600 - 1_735_689_600;
    let expected = (1..=30_000i64)
        .filter(|v| 5 + v % 3 == 7 && v % 2 == 1 && v * 2_103 < new_year)
        .count() as i64;
    assert!(expected > 1_000 && expected < 5_000, "{expected}");
    assert_eq!(deleted, expected);
    assert_eq!(left, 30_000 - expected);
}

#[test]
fn the_readme_shows_the_example_operation_as_it_is_written() {
    let operation = include_str!("../examples/delete_done_todos/operation.rs");
    for (file, text) in [
        ("README.md", include_str!("../README.md")),
        (
            "docs/src/embedding.md",
            include_str!("../docs/src/embedding.md"),
        ),
    ] {
        assert!(
            text.contains(&format!("```rust\n{operation}```")),
            "{file} must show examples/delete_done_todos/operation.rs verbatim"
        );
    }
    let lines = operation
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//"))
        .count();
    assert!(lines <= 15, "the README's operation is {lines} lines");
}

#[test]
fn the_readme_runs_the_example_as_the_compiled_example_does() {
    let readme = include_str!("../README.md");
    let (_, after) = readme
        .split_once("Running it:\n\n```rust,ignore\n")
        .unwrap();
    let (block, _) = after.split_once("```").unwrap();
    let compiled = include_str!("../examples/delete_done_todos/readme.rs");
    assert!(
        compiled.contains(block),
        "README.md's \"Running it\" must be examples/delete_done_todos/readme.rs's body verbatim"
    );
}

#[test]
fn the_readme_is_short_and_every_guide_chapter_it_links_exists() {
    let readme = include_str!("../README.md");
    assert!(
        readme.lines().count() <= 250,
        "README.md is {} lines",
        readme.lines().count()
    );
    let summary = include_str!("../docs/src/SUMMARY.md");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for text in [readme, summary] {
        for link in text.split("](").skip(1) {
            let target = link.split(')').next().unwrap_or("");
            if target.starts_with("http") || target.starts_with('#') {
                continue;
            }
            let base = if std::ptr::eq(text, summary) {
                root.join("docs/src")
            } else {
                root.to_path_buf()
            };
            assert!(
                base.join(target).exists(),
                "a link to {target}, which does not exist"
            );
        }
    }
}
