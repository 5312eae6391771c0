use super::*;
use chrono::{DateTime, Utc};
use sluice_target::{SqlValue, Statement, dialect};

#[test]
fn filters_bind_values_and_quote_columns() {
    let shape = Shape::range("todos", "id")
        .unwrap()
        .scope(Filter::new().eq("user_id", 7_i64).lt("done_at", "2026"))
        .unwrap();
    let s = shape
        .filter()
        .and_to(Statement::new("SELECT 1 WHERE 1 = 1"));
    assert_eq!(
        s.text().as_str(),
        "SELECT 1 WHERE 1 = 1 AND \"user_id\" = $1 AND \"done_at\" < $2"
    );
    assert_eq!(
        s.params(),
        &[SqlValue::Int(7), SqlValue::Text("2026".into())]
    );
    let names: Vec<String> = shape.columns().iter().map(|c| c.to_string()).collect();
    assert_eq!(names, ["id", "user_id", "done_at"]);
}

#[test]
fn unsafe_names_and_expressions_are_refused() {
    assert!(matches!(
        Shape::range("todos; DROP TABLE x", "id"),
        Err(OperationError::Unsafe(_))
    ));
    let bad_column = Shape::range("todos", "id")
        .unwrap()
        .scope(Filter::new().eq("user id", 1_i64));
    assert!(bad_column.unwrap_err().to_string().contains("`user id`"));
    for bad in ["a = 1; DELETE FROM t", "1=1) OR (1=1", "a = $1", "  "] {
        let err = Shape::range("t", "id")
            .unwrap()
            .scope(Filter::new().expression(bad))
            .unwrap_err();
        assert!(matches!(err, OperationError::Expression(_)), "{bad}: {err}");
    }
}

#[test]
fn on_mysql_operator_sql_read_otherwise_there_is_refused_in_any_order() {
    let quoted = || Filter::new().expression("status = \"done\"");
    let shape = || Shape::range("t", "id").unwrap();
    let bound_after = shape()
        .scope(quoted())
        .unwrap()
        .for_dialect(&dialect::MYSQL);
    assert!(matches!(bound_after, Err(OperationError::Expression(_))));
    let bound_before = shape()
        .for_dialect(&dialect::MYSQL)
        .unwrap()
        .scope(quoted());
    assert!(matches!(bound_before, Err(OperationError::Expression(_))));
    for dialect in [&dialect::POSTGRES as &'static dyn Dialect, &dialect::SQLITE] {
        let elsewhere = shape().scope(quoted()).unwrap().for_dialect(dialect);
        assert!(elsewhere.is_ok(), "{dialect:?}: a quoted name there");
    }
    let mysql = shape().for_dialect(&dialect::MYSQL).unwrap();
    assert!(matches!(
        mysql.checked_set("note = \"x\""),
        Err(OperationError::Expression(_))
    ));
    assert!(mysql.checked_set("note = 'x' || 'y'").is_ok());
    assert!(shape().checked_set("note = \"x\"").is_ok());
}

#[test]
fn the_indexed_column_of_a_loop_is_its_first_filtered_column() {
    let shape = Shape::loop_until_done("events", "id")
        .unwrap()
        .scope(Filter::new().lt("created_at", 5_i64))
        .unwrap();
    assert_eq!(shape.indexed_column().name(), "created_at");
    assert!(shape.batching_columns().is_empty());
    let keyset = Shape::keyset("events", &["created_at", "id"]).unwrap();
    assert_eq!(keyset.batching_columns().len(), 2);
    assert_eq!(keyset.indexed_column().name(), "created_at");
}

#[test]
fn on_sqlite_a_time_is_compared_as_an_instant_within_an_index_range() {
    let at = DateTime::parse_from_rfc3339("2025-07-01T00:00:00.000400Z")
        .unwrap()
        .with_timezone(&Utc);
    let render = |filter: Filter| {
        Shape::range("todos", "id")
            .unwrap()
            .scope(filter)
            .unwrap()
            .for_dialect(&dialect::SQLITE)
            .unwrap()
            .filter()
            .and_to(Statement::new("SELECT 1 WHERE 1 = 1"))
    };
    let below = render(Filter::new().lt("done_at", at));
    assert_eq!(
        below.text().as_str(),
        "SELECT 1 WHERE 1 = 1 AND \"done_at\" < $1 AND \"done_at\" GLOB \
         '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' AND (\"done_at\" < $2 OR \
         julianday(\"done_at\") < julianday($3))"
    );
    assert_eq!(
        below.params(),
        &[
            SqlValue::Text("2025-07-03".into()),
            SqlValue::Text("2025-06-30".into()),
            SqlValue::Text("2025-07-01 00:00:00.001".into())
        ]
    );
    let above = render(Filter::new().gt("done_at", at));
    assert!(above.text().as_str().contains("\"done_at\" >= $1"));
    assert_eq!(
        above.params(),
        &[
            SqlValue::Text("2025-06-29".into()),
            SqlValue::Text("2025-07-03".into()),
            SqlValue::Text("2025-07-01 00:00:00.000".into())
        ]
    );
    // PostgreSQL compares in the column's type: the time is bound as it is.
    let plain = Shape::range("todos", "id")
        .unwrap()
        .scope(Filter::new().lt("done_at", at))
        .unwrap();
    let plain = plain
        .filter()
        .and_to(Statement::new("SELECT 1 WHERE 1 = 1"));
    assert_eq!(plain.params(), &[SqlValue::Timestamp(at)]);
}
