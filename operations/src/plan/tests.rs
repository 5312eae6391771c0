//! The plan's arithmetic and advice, without a database.

use super::*;

#[test]
fn pieces_round_up_and_never_go_negative() {
    assert_eq!(pieces(0, 100), 0);
    assert_eq!(pieces(1, 100), 1);
    assert_eq!(pieces(100, 100), 1);
    assert_eq!(pieces(101, 100), 2);
    assert_eq!(pieces(-5, 100), 0);
}

#[test]
fn deleting_most_of_a_table_is_advised_against_and_a_little_is_not() {
    let delete = Statement::new("DELETE FROM items WHERE id <= 5");
    let most = advice(Some(&delete), "items", Some(95), Some(100), false);
    assert_eq!(most.len(), 1, "{most:?}");
    assert!(
        most[0].starts_with("95 % of `items` would be deleted"),
        "{most:?}"
    );
    assert!(most[0].contains("copying the 5 rows to keep"), "{most:?}");
    assert!(most[0].contains("partitions"), "{most:?}");
    assert!(advice(Some(&delete), "items", Some(49), Some(100), false).is_empty());

    let update = Statement::new("UPDATE items SET n = n + 1");
    let rewrite = advice(Some(&update), "items", Some(100), Some(100), false);
    assert!(rewrite[0].contains("would be rewritten"), "{rewrite:?}");
}

#[test]
fn nothing_in_scope_and_a_refused_scan_are_said() {
    let none = advice(None, "items", Some(0), Some(10), false);
    assert!(none[0].contains("no row is in scope"), "{none:?}");
    let refused = advice(None, "items", Some(1), Some(10), true);
    assert!(refused[0].contains("create an index"), "{refused:?}");
    assert!(advice(None, "items", None, None, false).is_empty());
}

#[test]
fn the_prediction_scales_the_probe_by_sub_batches_and_rows() {
    let probe = Probe {
        runs: 3,
        rows: 100,
        took: Duration::from_millis(4),
        log_bytes: Some(10_000),
    };
    let (ms, log) = predicted(
        Some(&probe),
        Some(50),
        Some(5_000),
        Duration::from_millis(6),
    );
    assert_eq!(ms, Some(500), "50 sub-batches of 4 ms plus 6 ms pauses");
    assert_eq!(log, Some(500_000), "100 bytes a row, 5,000 rows");
    let idle = Probe { rows: 0, ..probe };
    assert_eq!(
        predicted(Some(&idle), Some(1), Some(5), Duration::ZERO).1,
        None
    );
    assert_eq!(
        predicted(None, Some(1), Some(5), Duration::ZERO),
        (None, None)
    );
}
