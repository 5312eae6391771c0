//! The dialect conformance suite: every database's dialect through the same
//! cases, on a real database of its kind. Quoting, each statement form the
//! dialect writes (run, not only compared), its reading of its own
//! planner's output, its catalogue's answers on one fixture table, and its
//! health reports. A new database's dialect is done when this suite passes
//! on it unchanged (only the fixture's DDL below names the database).

mod common;

use common::TestDb;
use sluice_target::dialect::{self, Dialect, LoopPick, index_in_plan};
use sluice_target::{Ident, SqlValue, Statement};

for_each_backend!(
    the_store_speaks_its_own_dialect,
    quoted_names_reach_the_columns_they_name,
    the_statement_forms_run_and_do_what_they_say,
    the_dialect_reads_its_own_planner,
    the_catalogue_describes_the_fixture_table,
    every_health_measure_the_dialect_lists_reads,
);

/// The fixture's DDL, the one place the suite names a database: a key, a
/// unique text column with a collation-bearing type, a nullable column, a
/// generated column, a child table whose rows are deleted with it, and a
/// view.
fn fixture(dialect: &dyn Dialect) -> [&'static str; 4] {
    match dialect.name() {
        "sqlite" => [
            "CREATE TABLE fixture (id INTEGER PRIMARY KEY, code VARCHAR(20) NOT NULL UNIQUE, \
             note TEXT, doubled INTEGER GENERATED ALWAYS AS (id * 2) VIRTUAL)",
            "CREATE TABLE fixture_child (id INTEGER PRIMARY KEY, \
             parent INTEGER REFERENCES fixture (id) ON DELETE CASCADE)",
            "CREATE VIEW fixture_view AS SELECT id, code FROM fixture",
            "CREATE INDEX fixture_note ON fixture (note)",
        ],
        "postgresql" => [
            "CREATE TABLE fixture (id BIGINT PRIMARY KEY, code VARCHAR(20) NOT NULL UNIQUE, \
             note TEXT, doubled BIGINT GENERATED ALWAYS AS (id * 2) STORED)",
            "CREATE TABLE fixture_child (id BIGINT PRIMARY KEY, \
             parent BIGINT REFERENCES fixture (id) ON DELETE CASCADE)",
            "CREATE VIEW fixture_view AS SELECT id, code FROM fixture",
            "CREATE INDEX fixture_note ON fixture (note)",
        ],
        "mysql" => [
            "CREATE TABLE fixture (id BIGINT PRIMARY KEY, code VARCHAR(20) NOT NULL UNIQUE, \
             note VARCHAR(100), doubled BIGINT AS (id * 2) VIRTUAL) ENGINE = InnoDB",
            "CREATE TABLE fixture_child (id BIGINT PRIMARY KEY, parent BIGINT, \
             FOREIGN KEY (parent) REFERENCES fixture (id) ON DELETE CASCADE) ENGINE = InnoDB",
            "CREATE VIEW fixture_view AS SELECT id, code FROM fixture",
            "CREATE INDEX fixture_note ON fixture (note)",
        ],
        other => panic!("no fixture for the {other} dialect: add one"),
    }
}

/// Creates the fixture tables with `rows` rows (`code` `c1`, `c2`, …;
/// `note` NULL on even ids).
async fn create_fixture(db: &TestDb, rows: i64) {
    for ddl in fixture(db.store.backend().dialect()) {
        db.execute(ddl).await;
    }
    for id in 1..=rows {
        let note = if id % 2 == 0 {
            "NULL".to_owned()
        } else {
            format!("'n{id}'")
        };
        db.execute(&format!(
            "INSERT INTO fixture (id, code, note) VALUES ({id}, 'c{id}', {note})"
        ))
        .await;
    }
}

fn ident(name: &str) -> Ident {
    Ident::parse(name).unwrap()
}

async fn the_store_speaks_its_own_dialect(db: &TestDb) {
    let dialect = db.store.backend().dialect();
    assert!(
        dialect.speaks_url(&db.url),
        "{} does not claim {}",
        dialect.name(),
        db.url
    );
    let others = dialect::all()
        .into_iter()
        .filter(|d| d.name() != dialect.name());
    for other in others {
        assert!(
            !other.speaks_url(&db.url),
            "{} claims {} too",
            other.name(),
            db.url
        );
    }
    assert_eq!(LoopPick::for_target(db.store.target()), dialect.loop_pick());
}

async fn quoted_names_reach_the_columns_they_name(db: &TestDb) {
    // A name that is a reserved word and one in mixed case: quoted, both
    // reach their columns (MySQL's sessions quote with `"` too).
    db.execute("CREATE TABLE quoting (\"order\" INTEGER, \"MixedCase\" INTEGER)")
        .await;
    db.execute("INSERT INTO quoting VALUES (3, 4)").await;
    let read = Statement::new("SELECT ")
        .ident(&ident("order"))
        .push(" + ")
        .ident(&ident("MixedCase"))
        .push(" FROM ")
        .ident(&ident("quoting"))
        .push(" WHERE ")
        .ident(&ident("order"))
        .push(" = ")
        .value(SqlValue::Int(3));
    assert_eq!(db.store.target().fetch_int(&read).await.unwrap(), Some(7));
}

async fn the_statement_forms_run_and_do_what_they_say(db: &TestDb) {
    create_fixture(db, 4).await;
    let dialect = db.store.backend().dialect();
    let (table, copy) = (ident("fixture"), ident("fixture_copy"));

    // The columns as the catalogue lists them now.
    let listed = db
        .store
        .target()
        .fetch_cursor(&dialect.column_list(&table), 1)
        .await
        .unwrap()
        .map(|c| format!("{:?}", c.0[0]))
        .unwrap();
    for column in ["id", "code", "note", "doubled"] {
        assert!(listed.contains(column), "{column} not in {listed}");
    }

    // A copy with plain columns (the generated one becomes a plain one),
    // where the database writes it in one statement.
    if let Some(create) = dialect.create_table_like(&copy, &table) {
        db.store.target().execute(&create).await.unwrap();
        assert_eq!(
            db.store.target().generated_columns(&copy).await.unwrap(),
            Vec::<String>::new()
        );
        if let Some(unique) = dialect.add_unique(&copy, &[ident("id")]).unwrap() {
            db.store
                .target()
                .execute(&unique.ident(&ident("id")).push(")"))
                .await
                .unwrap();
            let keys = db.store.target().table_keys(&copy).await.unwrap();
            assert!(
                keys.indexes.iter().any(|i| i.unique && i.columns == ["id"]),
                "{keys:?}"
            );
        }
    }

    // The regular-expression operators match and refuse as they say.
    if let Some((matches, differs)) = dialect.regexp_operators() {
        let count = |operator: &'static str| {
            Statement::new("SELECT COUNT(*) FROM fixture WHERE code")
                .push(operator)
                .value(SqlValue::Text("^c[12]$".into()))
        };
        assert_eq!(
            db.store.target().fetch_int(&count(matches)).await.unwrap(),
            Some(2)
        );
        assert_eq!(
            db.store.target().fetch_int(&count(differs)).await.unwrap(),
            Some(2)
        );
    }

    // The start of a day is at or before the instant, less than a day back.
    let at = chrono::Utc::now();
    if let Some(start) = dialect.start_of_day(at) {
        let cursor = db
            .store
            .target()
            .fetch_cursor(&start, 1)
            .await
            .unwrap()
            .unwrap();
        let sluice_target::CursorValue::Timestamp(start) = cursor.0[0].clone() else {
            panic!("not a time: {cursor:?}");
        };
        assert!(start <= at && at - start < chrono::Duration::days(1));
    }
}

async fn the_dialect_reads_its_own_planner(db: &TestDb) {
    create_fixture(db, 50).await;
    db.execute("CREATE TABLE unindexed (id INTEGER, n INTEGER)")
        .await;
    let dialect = db.store.backend().dialect();
    let by_note =
        Statement::new("SELECT id FROM fixture WHERE note = ").value(SqlValue::Text("n3".into()));
    let plan = db.store.target().explain(&by_note).await.unwrap();
    assert_eq!(
        index_in_plan(&plan, dialect).as_deref(),
        Some("fixture_note"),
        "{plan:?}"
    );
    assert_eq!(dialect.full_scan_line(&plan, "fixture"), None, "{plan:?}");
    let scan = Statement::new("SELECT id FROM unindexed WHERE n = ").value(SqlValue::Int(3));
    let plan = db.store.target().explain(&scan).await.unwrap();
    assert!(
        dialect.full_scan_line(&plan, "unindexed").is_some(),
        "{plan:?}"
    );
}

async fn the_catalogue_describes_the_fixture_table(db: &TestDb) {
    create_fixture(db, 4).await;
    let store = &db.store;
    let table = ident("fixture");
    // SQLite lists no generated column among a table's columns.
    let columns = store.target().table_columns(&table).await.unwrap();
    assert_eq!(&columns[..3], ["id", "code", "note"]);
    assert_eq!(
        store.target().generated_columns(&table).await.unwrap(),
        ["doubled"]
    );
    assert!(
        store
            .target()
            .table_columns(&ident("absent"))
            .await
            .unwrap()
            .is_empty()
    );

    let keys = store.target().table_keys(&table).await.unwrap();
    assert!(keys.proves_distinct(&["id"]), "{keys:?}");
    assert!(keys.proves_distinct(&["code"]), "{keys:?}");
    assert!(!keys.proves_distinct(&["note"]), "{keys:?}");

    let id_type = store
        .target()
        .column_type(&table, "id")
        .await
        .unwrap()
        .unwrap();
    assert!(id_type.to_lowercase().contains("int"), "{id_type}");
    assert_eq!(
        store.target().column_type(&table, "absent").await.unwrap(),
        None
    );
    let definitions = store.target().column_definitions(&table).await.unwrap();
    let code = definitions.iter().find(|d| d.name == "code").unwrap();
    assert!(code.full_type.to_lowercase().contains("20"), "{code:?}");

    assert!(store.target().same_table(&table, &table).await.unwrap());
    assert!(
        !store
            .target()
            .same_table(&table, &ident("fixture_child"))
            .await
            .unwrap()
    );
    assert!(store.target().is_base_table(&table).await.unwrap());
    assert!(
        !store
            .target()
            .is_base_table(&ident("fixture_view"))
            .await
            .unwrap()
    );

    let actions = store.target().delete_actions(&table).await.unwrap();
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0].table, "fixture_child");
    assert!(actions[0].action.contains("CASCADE"), "{actions:?}");

    assert!(store.target().triggers(&table).await.unwrap().is_empty());
    assert!(
        store
            .target()
            .non_transactional_writes(&table)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .target()
            .functions_that_may_write(&["lower".to_owned()])
            .await
            .unwrap()
            .is_empty()
    );
    let now = store.target().database_now().await.unwrap();
    assert!((chrono::Utc::now() - now).num_seconds().abs() < 60);
}

async fn every_health_measure_the_dialect_lists_reads(db: &TestDb) {
    let health = db.store.backend().health();
    for measure in health.measures() {
        let value = health.measure(*measure).await.unwrap();
        assert!(
            value.is_some_and(f64::is_finite),
            "{measure:?} read {value:?}"
        );
    }
    if health.has_table_activity() {
        assert_eq!(health.table_activity("[]").await.unwrap(), Some(Vec::new()));
    }
    if health.has_innodb_report() {
        let report = health.innodb_report().await.unwrap().unwrap();
        assert!(report.report.contains("TRANSACTIONS"), "{}", report.report);
    }
}
