//! The dialects' plan reading, on plans each database printed.

use super::*;

/// `dialect`'s full-scan line of `plan` over `table`.
fn full_scan_line(plan: &[String], table: &str, dialect: &dyn Dialect) -> Option<String> {
    dialect.full_scan_line(plan, table)
}

fn plan(lines: &[&str]) -> Vec<String> {
    lines.iter().map(|l| l.to_string()).collect()
}

#[test]
fn sqlite_scan_is_full_and_search_is_not() {
    assert_eq!(
        full_scan_line(&plan(&["SCAN events"]), "events", &SQLITE).as_deref(),
        Some("SCAN events")
    );
    assert_eq!(
        full_scan_line(
            &plan(&["SEARCH events USING INDEX e_created (created_at<?)"]),
            "events",
            &SQLITE
        ),
        None
    );
    assert_eq!(
        full_scan_line(
            &plan(&["SEARCH events USING INTEGER PRIMARY KEY (rowid>?)"]),
            "events",
            &SQLITE
        ),
        None
    );
    assert_eq!(
        full_scan_line(&plan(&["SCAN other"]), "events", &SQLITE),
        None
    );
}

#[test]
fn mysql_access_all_without_a_usable_index_is_full() {
    let all = plan(&["table events access ALL possible_keys NULL key NULL Using where"]);
    assert_eq!(
        full_scan_line(&all, "events", &MYSQL).as_deref(),
        Some("table events access ALL possible_keys NULL key NULL Using where")
    );
    let range = plan(&[
        "table events access range possible_keys events_created key events_created Using where",
    ]);
    assert_eq!(full_scan_line(&range, "events", &MYSQL), None);
    // A small table scanned although an index could serve it.
    let chosen =
        plan(&["table events access ALL possible_keys events_created key NULL Using where"]);
    assert_eq!(full_scan_line(&chosen, "events", &MYSQL), None);
    assert_eq!(full_scan_line(&all, "other", &MYSQL), None);
}

#[test]
fn postgres_seq_scans_and_filter_only_index_walks_are_full() {
    let seq = plan(&[
        "Limit  (cost=0.00..1.00 rows=1 width=8)",
        "  ->  Seq Scan on events  (cost=…)",
        "        Filter: (created_at < $1)",
    ]);
    assert_eq!(
        full_scan_line(&seq, "events", &POSTGRES).as_deref(),
        Some("Seq Scan on events  (cost=…)")
    );
    let walk = plan(&[
        "Limit",
        "  ->  Index Scan using events_pkey on events  (cost=…)",
        "        Filter: (created_at < $1)",
    ]);
    assert!(full_scan_line(&walk, "events", &POSTGRES).is_some());
    let served = plan(&[
        "Limit",
        "  ->  Index Scan using events_created on events  (cost=…)",
        "        Index Cond: (created_at < $1)",
    ]);
    assert_eq!(full_scan_line(&served, "events", &POSTGRES), None);
    let bitmap = plan(&[
        "Bitmap Heap Scan on events",
        "  Recheck Cond: (created_at < $1)",
        "  ->  Bitmap Index Scan on events_created",
        "        Index Cond: (created_at < $1)",
    ]);
    assert_eq!(full_scan_line(&bitmap, "events", &POSTGRES), None);
    assert_eq!(full_scan_line(&seq, "other", &POSTGRES), None);
}

#[test]
fn each_dialect_names_the_index_its_plan_reads() {
    let postgres = plan(&[
        "Limit  (cost=0.42..35.1 rows=1000 width=6)",
        "  ->  Index Scan using items_created_at_idx on items  (cost=0.42..28000 rows=800000 width=6)",
        "        Index Cond: (created_at < now())",
    ]);
    assert_eq!(
        index_in_plan(&postgres, &POSTGRES).as_deref(),
        Some("items_created_at_idx")
    );
    let bitmap = plan(&[
        "Bitmap Heap Scan on items",
        "  ->  Bitmap Index Scan on items_pkey",
    ]);
    assert_eq!(
        index_in_plan(&bitmap, &POSTGRES).as_deref(),
        Some("items_pkey")
    );
    let seq = plan(&["Seq Scan on items  (cost=0.00..18000 rows=1000000 width=6)"]);
    assert_eq!(index_in_plan(&seq, &POSTGRES), None);

    let sqlite = plan(&["SEARCH items USING COVERING INDEX items_created (created_at<?)"]);
    assert_eq!(
        index_in_plan(&sqlite, &SQLITE).as_deref(),
        Some("items_created")
    );
    let rowid = plan(&["SEARCH items USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"]);
    assert_eq!(
        index_in_plan(&rowid, &SQLITE).as_deref(),
        Some("INTEGER PRIMARY KEY (rowid)")
    );
    assert_eq!(index_in_plan(&plan(&["SCAN items"]), &SQLITE), None);

    let mysql = plan(&["table items access range possible_keys created key created Using where"]);
    assert_eq!(index_in_plan(&mysql, &MYSQL).as_deref(), Some("created"));
    let all = plan(&["table items access ALL possible_keys NULL key NULL Using where"]);
    assert_eq!(index_in_plan(&all, &MYSQL), None);
}

#[test]
fn each_url_is_spoken_by_exactly_one_dialect() {
    let urls = [
        ("sqlite:data.sqlite", "sqlite"),
        ("sqlite::memory:", "sqlite"),
        ("postgres://u@h/db", "postgresql"),
        ("postgresql://u@h/db", "postgresql"),
        ("mysql://u@h/db", "mysql"),
        ("mariadb://u@h/db", "mysql"),
    ];
    for (url, name) in urls {
        let speaking: Vec<&str> = all()
            .into_iter()
            .filter(|d| d.speaks_url(url))
            .map(|d| d.name())
            .collect();
        assert_eq!(speaking, [name], "{url}");
    }
    assert!(all().iter().all(|d| !d.speaks_url("oracle://h/db")));
}

#[test]
fn dialects_are_equal_only_to_themselves() {
    for (i, a) in all().into_iter().enumerate() {
        for (j, b) in all().into_iter().enumerate() {
            assert_eq!(a == b, i == j, "{a:?} {b:?}");
        }
    }
    let default: &'static dyn Dialect = Default::default();
    assert_eq!(default.name(), "postgresql");
}
