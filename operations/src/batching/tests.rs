use sluice_target::{CursorValue, SqlValue};

use super::*;
use crate::shape::Filter;

#[test]
fn a_keyset_batch_end_compares_rows_and_orders_by_every_column() {
    let shape = Shape::keyset("events", &["created_at", "id"])
        .unwrap()
        .scope(Filter::new().eq("tenant", 3_i64))
        .unwrap();
    let after = Cursor(vec![
        CursorValue::Text("2026-01-01".into()),
        CursorValue::Int(9),
    ]);
    let s = nth_after(
        &shape,
        keyset_columns(&shape).unwrap(),
        Some(&after),
        None,
        500,
    );
    assert_eq!(
        s.text().as_str(),
        "SELECT \"created_at\", \"id\" FROM \"events\" WHERE 1 = 1 AND (\"created_at\", \"id\") > ($1, $2) \
         AND \"tenant\" = $3 ORDER BY \"created_at\", \"id\" LIMIT 1 OFFSET $4"
    );
    assert_eq!(s.params()[3], SqlValue::Int(499));
}

#[test]
fn a_single_column_range_is_a_plain_comparison() {
    let shape = Shape::range("t", "id").unwrap();
    let s = range_predicate(
        Statement::new("DELETE FROM t WHERE 1 = 1"),
        keyset_columns(&shape).unwrap(),
        Some(&Cursor::int(10)),
        Some(&Cursor::int(20)),
    );
    assert_eq!(
        s.text().as_str(),
        "DELETE FROM t WHERE 1 = 1 AND \"id\" > $1 AND \"id\" <= $2"
    );
}

#[test]
fn a_loop_selects_its_rows_by_key_with_a_limit() {
    let shape = Shape::loop_until_done("t", "id")
        .unwrap()
        .scope(Filter::new().lt("at", 5_i64))
        .unwrap();
    let Strategy::Loop { key } = shape.strategy() else {
        unreachable!()
    };
    let delete = |pick| {
        let head = Statement::new("DELETE FROM ").ident(shape.table());
        loop_rows(&shape, key, 100, pick, None, head)
            .text()
            .as_str()
            .to_owned()
    };
    assert_eq!(
        delete(LoopPick::InSubquery),
        "DELETE FROM \"t\" WHERE \"id\" IN (SELECT \"id\" FROM \"t\" WHERE 1 = 1 AND \"at\" < $1 LIMIT $2) AND \"at\" < $3"
    );
    assert_eq!(
        delete(LoopPick::KeyArray),
        "DELETE FROM \"t\" WHERE \"id\" = ANY (CASE WHEN TRUE THEN ARRAY(SELECT \"id\" FROM \"t\" WHERE 1 = 1 AND \"at\" < $1 LIMIT $2) END) AND \"at\" < $3"
    );
    assert!(keyset_columns(&shape).is_err());
}

#[test]
fn a_loop_by_a_key_of_two_columns_names_its_rows_by_row_value() {
    let shape = Shape::loop_until_done_by("t", &["id", "at"])
        .unwrap()
        .scope(Filter::new().lt("at", 5_i64))
        .unwrap();
    let Strategy::Loop { key } = shape.strategy() else {
        unreachable!()
    };
    let delete = |pick| {
        let head = Statement::new("DELETE FROM ").ident(shape.table());
        loop_rows(&shape, key, 100, pick, None, head)
    };
    assert_eq!(
        delete(LoopPick::InSubquery).text().as_str(),
        "DELETE FROM \"t\" WHERE (\"id\", \"at\") IN (SELECT \"id\", \"at\" FROM \"t\" WHERE 1 = 1 AND \"at\" < $1 LIMIT $2) AND \"at\" < $3"
    );
    let zipped = delete(LoopPick::KeyArray);
    assert_eq!(
        zipped.text().as_str(),
        "DELETE FROM \"t\" WHERE (\"id\", \"at\") IN (SELECT unnest(sluice_keys.\"id\"), unnest(sluice_keys.\"at\") \
         FROM (SELECT array_agg(\"id\") AS \"id\", array_agg(\"at\") AS \"at\" FROM (SELECT \"id\", \"at\" FROM \"t\" \
         WHERE 1 = 1 AND \"at\" < $1 LIMIT $2) AS sluice_picked) AS sluice_keys WHERE TRUE) AND \"at\" < $3"
    );
    // The fence replaces the guard, tested once on the aggregated keys.
    let fenced = zipped
        .guarded_by("EXISTS (SELECT 1 FROM recorded)")
        .unwrap();
    assert!(
        fenced
            .as_str()
            .contains("AS sluice_keys WHERE EXISTS (SELECT 1 FROM recorded))"),
        "{}",
        fenced.as_str()
    );
    assert!(Shape::loop_until_done_by("t", &[]).is_err());
}

#[test]
fn an_sqlite_loop_picks_rowids_in_scope_then_names_only_those() {
    let shape = Shape::loop_until_done("t", "id")
        .unwrap()
        .scope(Filter::new().lt("at", 5_i64))
        .unwrap();
    let pick = rowid_pick(&shape, "_rowid_", 100);
    assert_eq!(
        pick.text().as_str(),
        "SELECT json_group_array(_rowid_) FROM (SELECT _rowid_ FROM \"t\" WHERE 1 = 1 AND \"at\" < $1 LIMIT $2)"
    );
    assert_eq!(pick.params(), [SqlValue::Int(5), SqlValue::Int(100)]);
    let delete = picked_rows(
        "_rowid_",
        "[3,9]",
        Statement::new("DELETE FROM ").ident(shape.table()),
    );
    assert_eq!(
        delete.text().as_str(),
        "DELETE FROM \"t\" WHERE _rowid_ IN (SELECT value FROM json_each($1))"
    );
    assert_eq!(delete.params(), [SqlValue::Text("[3,9]".into())]);
}

#[test]
fn a_seeking_loop_narrows_mysql_s_limit_between_its_two_values_only() {
    let shape = Shape::loop_until_done("t", "id")
        .unwrap()
        .seek_by("at")
        .unwrap()
        .scope(Filter::new().lt("at", 50_i64))
        .unwrap();
    let Strategy::Loop { key } = shape.strategy() else {
        unreachable!()
    };
    let seek = Seek {
        from: Some(Cursor::int(7)),
        to: Cursor::int(9),
        keys: None,
    };
    let delete = |pick, seek: Option<&Seek>| {
        let head = Statement::new("DELETE FROM ").ident(shape.table());
        loop_rows(&shape, key, 100, pick, seek, head)
    };
    let bounded = delete(LoopPick::Limit, Some(&seek));
    assert_eq!(
        bounded.text().as_str(),
        "DELETE FROM \"t\" WHERE 1 = 1 AND \"at\" < $1 AND \"at\" >= $2 AND \"at\" <= $3 LIMIT $4"
    );
    assert_eq!(bounded.params()[1], SqlValue::Int(7));
    assert_eq!(bounded.params()[2], SqlValue::Int(9));
    // From the beginning: no lower bound.
    let first = Seek {
        from: None,
        ..seek.clone()
    };
    assert_eq!(
        delete(LoopPick::Limit, Some(&first)).text().as_str(),
        "DELETE FROM \"t\" WHERE 1 = 1 AND \"at\" < $1 AND \"at\" <= $2 LIMIT $3"
    );
    // Unbounded (the statement that may end the loop) and the other
    // forms are as without a seek.
    assert_eq!(
        delete(LoopPick::Limit, None).text().as_str(),
        "DELETE FROM \"t\" WHERE 1 = 1 AND \"at\" < $1 LIMIT $2"
    );
    assert!(
        delete(LoopPick::KeyArray, Some(&seek))
            .text()
            .as_str()
            .ends_with("END) AND \"at\" < $3")
    );
    // With the keys' range: the key bounded too, after the seek column.
    let keyed = Seek {
        keys: Some((Cursor::int(300), Cursor::int(399))),
        ..seek.clone()
    };
    let keyed = delete(LoopPick::Limit, Some(&keyed));
    assert_eq!(
        keyed.text().as_str(),
        "DELETE FROM \"t\" WHERE 1 = 1 AND \"at\" < $1 AND \"at\" >= $2 AND \"at\" <= $3 \
         AND \"id\" >= $4 AND \"id\" <= $5 LIMIT $6"
    );
    assert_eq!(
        keyed.params()[3..5],
        [SqlValue::Int(300), SqlValue::Int(399)]
    );
    let probe = seek_end(
        &shape,
        shape.seek_column().unwrap(),
        &key[0],
        Some(&Cursor::int(7)),
        100,
    );
    assert_eq!(
        probe.text().as_str(),
        "SELECT MAX(sluice_seek), MIN(sluice_key), MAX(sluice_key) FROM (SELECT \"at\" AS sluice_seek, \
         \"id\" AS sluice_key FROM \"t\" WHERE 1 = 1 AND \"at\" >= $1 AND \"at\" < $2 \
         ORDER BY \"at\" LIMIT $3) AS picked HAVING COUNT(*) = $4"
    );
    assert_eq!(
        probe.params()[2..],
        [SqlValue::Int(100), SqlValue::Int(100)]
    );
}

#[test]
fn only_a_loop_seeks() {
    let keyset = Shape::range("t", "id").unwrap().seek_by("at").unwrap();
    assert_eq!(keyset.seek_column(), None);
    assert!(
        Shape::loop_until_done("t", "id")
            .unwrap()
            .seek_by("a b")
            .is_err()
    );
}
