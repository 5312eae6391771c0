//! Target checks against real tables: names must exist in the catalogue, and
//! a statement that would scan the whole table is refused until an index
//! serves it.

mod common;

use common::{TestDb, sluice};
use sluice_operations::batching::{LoopPick, loop_rows};
use sluice_operations::{
    COUNT_EXACTLY_UP_TO, EnqueueOptions, Filter, Registry, Shape, Strategy, TargetError,
    check_index, check_target, enqueue,
};
use sluice_target::{Backend, Ident, SqlValue, Statement};

for_each_backend!(
    unknown_names_are_refused_by_name,
    full_scans_are_refused_until_an_index_serves_them,
    a_key_of_two_columns_updates_archives_and_deletes_each_row_once
);

/// MySQL: a MyISAM table has no transactions, so a sub-batch's change and
/// its record cannot commit together: refused, naming the engine, and
/// nothing is written; the same table in InnoDB is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_myisam_table_is_refused_and_nothing_changes() {
    let Some(db) = TestDb::mysql().await else {
        return;
    };
    db.execute("CREATE TABLE legacy (id BIGINT PRIMARY KEY, n INTEGER NOT NULL) ENGINE = MyISAM")
        .await;
    db.execute("INSERT INTO legacy VALUES (1, 0), (2, 0)").await;
    let arguments = serde_json::json!({"table": "legacy", "key": "id", "set": "n = n + 1"});
    let (registry, options) = (Registry::with_builtins(), EnqueueOptions::default());
    let attempt = || {
        enqueue(
            &db.store,
            &registry,
            "update-in-batches",
            &arguments,
            &options,
        )
    };
    let refused = attempt().await.unwrap_err();
    assert!(refused.is_bad_input(), "{refused}");
    let message = refused.to_string();
    assert!(
        message.contains("table `legacy` uses the MyISAM engine, which has no transactions"),
        "{message}"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 0);
    assert_eq!(db.scalar("SELECT SUM(n) FROM legacy").await, 0);
    db.execute("ALTER TABLE legacy ENGINE = InnoDB").await;
    attempt().await.unwrap();
    db.cleanup().await;
}

postgres_only!(
    the_catalogue_reads_agree_with_information_schema,
    a_large_scope_takes_the_planners_estimate_a_small_one_is_counted,
    a_loop_sub_batch_finds_its_rows_by_key_at_any_size,
);

/// `update-in-batches --key site,seq` on a table whose primary key is
/// `(site, seq)`, neither column unique alone: every row in scope is
/// updated exactly once and no other row, in batches and sub-batches of
/// that key's order; `archive-rows` by the same key moves each row of its
/// scope once, into an archive unique over the key; `delete-aged-rows` by
/// it deletes exactly the aged rows (on SQLite a table without rowids, so
/// the key, not a rowid, names the rows it picks). A key that does not name
/// rows once and a column named twice are refused, and nothing changes.
async fn a_key_of_two_columns_updates_archives_and_deletes_each_row_once(db: &TestDb) {
    db.execute(&format!(
        "CREATE TABLE readings (site INTEGER NOT NULL, seq BIGINT NOT NULL, \
         n INTEGER NOT NULL DEFAULT 0, taken_at BIGINT NOT NULL DEFAULT 0, \
         PRIMARY KEY (site, seq)){}",
        if db.backend == "sqlite" {
            " WITHOUT ROWID"
        } else {
            ""
        }
    ))
    .await;
    db.execute("CREATE INDEX readings_taken_at ON readings (taken_at)")
        .await;
    // 7 sites, 300 readings each: (g mod 7, g div 7) names each row once.
    db.insert_series("readings (site, seq)", "g % 7, (g - g % 7) / 7", 2_100, "")
        .await;
    // The first 100 readings of each site were taken in 2020, the others now.
    let now = chrono::Utc::now().timestamp();
    db.execute(&format!(
        "UPDATE readings SET taken_at = CASE WHEN seq < 100 THEN 1600000000 ELSE {now} END"
    ))
    .await;
    let untouched = || async {
        db.scalar("SELECT COUNT(*) FROM readings WHERE n <> 0")
            .await
            == 0
    };
    for (args, says) in [
        (
            vec!["update-in-batches", "--key", "site,taken_at"],
            "unique",
        ),
        (vec!["update-in-batches", "--key", "site,site"], "twice"),
        (vec!["update-in-batches", "--key", "site,"], "empty column"),
    ] {
        let mut all = vec!["enqueue"];
        all.extend(args);
        all.extend(["--table", "readings", "--set", "n = n + 1"]);
        let refused = sluice(db, &all);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{all:?}: {stderr}");
        assert!(stderr.contains(says), "{all:?}: {stderr}");
    }
    let refused = sluice(
        db,
        &[
            "enqueue",
            "delete-aged-rows",
            "--table",
            "readings",
            "--column",
            "taken_at",
            "--key",
            "site",
            "--older-than",
            "1d",
        ],
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no unique index covers only these columns"),
        "{stderr}"
    );
    assert!(untouched().await, "a refused enqueue changed rows");

    enqueue_and_run(
        db,
        &[
            "update-in-batches",
            "--table",
            "readings",
            "--key",
            "site,seq",
            "--set",
            "n = n + 1",
            "--where",
            "site <> 3",
            "--batch-size",
            "250",
            "--sub-batch-size",
            "40",
        ],
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM readings WHERE site <> 3 AND n = 1")
            .await,
        1_800,
        "every row in scope once"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM readings WHERE n <> 1 AND site <> 3")
            .await,
        0
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM readings WHERE site = 3 AND n <> 0")
            .await,
        0,
        "no row out of scope"
    );

    // archive-rows by the same key: site 5's rows move, each once, into an
    // archive created with a unique index over (site, seq).
    enqueue_and_run(
        db,
        &[
            "archive-rows",
            "--table",
            "readings",
            "--into",
            "old_readings",
            "--key",
            "site,seq",
            "--where",
            "site = 5",
            "--batch-size",
            "120",
            "--sub-batch-size",
            "25",
        ],
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM readings WHERE site = 5")
            .await,
        0
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM old_readings WHERE site = 5 AND n = 1")
            .await,
        300,
        "every row of the scope moved, with its values"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM old_readings").await
            + db.scalar("SELECT COUNT(*) FROM readings").await,
        2_100,
        "each row in exactly one of the two tables"
    );
    // The archive's unique index over the key refuses a second copy.
    let again = db
        .try_execute("INSERT INTO old_readings (site, seq, n, taken_at) VALUES (5, 1, 0, 0)")
        .await;
    assert!(again.is_err(), "a second row of key (5, 1) was accepted");

    // delete-aged-rows by the same key: the readings taken in 2020.
    let young = db
        .scalar("SELECT COUNT(*) FROM readings WHERE seq >= 100")
        .await;
    enqueue_and_run(
        db,
        &[
            "delete-aged-rows",
            "--table",
            "readings",
            "--column",
            "taken_at",
            "--key",
            "site,seq",
            "--older-than",
            "1d",
            "--sub-batch-size",
            "37",
        ],
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM readings WHERE seq < 100")
            .await,
        0,
        "every aged row deleted"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM readings").await,
        young,
        "no young row deleted"
    );
}

/// `sluice enqueue <args>`, then `sluice run --until-idle`: both succeed.
fn enqueue_and_run(db: &TestDb, args: &[&str]) {
    let mut enqueue = vec!["enqueue"];
    enqueue.extend_from_slice(args);
    for command in [enqueue, vec!["run", "--until-idle"]] {
        let done = sluice(db, &command);
        assert!(
            done.status.success(),
            "{command:?}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
    }
}

async fn create_events(db: &TestDb) {
    // MySQL indexes text only of a bounded length.
    db.execute(if db.backend == "mysql" {
        "CREATE TABLE events (id BIGINT PRIMARY KEY, created_at VARCHAR(32) NOT NULL, payload TEXT)"
    } else {
        "CREATE TABLE events (id BIGINT PRIMARY KEY, created_at TEXT NOT NULL, payload TEXT)"
    })
    .await;
    db.execute(
        "INSERT INTO events (id, created_at, payload) \
         SELECT v, '2026-01-01', 'x' FROM (SELECT 1 AS v UNION ALL SELECT 2 UNION ALL SELECT 3) s",
    )
    .await;
}

/// `Store::table_columns` and `Store::column_type` read `pg_catalog`
/// directly; what they say must be what `information_schema.columns` says,
/// for every kind of column type an operator's table may have (built-in,
/// array, enum, domains over a scalar and over an array), in a schema of
/// its own and in the current one, with a dropped column left out; and a
/// view lists its columns as a table does.
async fn the_catalogue_reads_agree_with_information_schema(db: &TestDb) {
    let sluice_target::Backend::Postgres(pool) = db.store.backend() else {
        unreachable!("PostgreSQL only")
    };
    // A second schema beside the test's own, named after it (so it is this
    // test's alone) and dropped at the end.
    let here: String = sqlx::query_scalar("SELECT current_schema()::text")
        .fetch_one(pool)
        .await
        .unwrap();
    let other = format!("{here}_kinds");
    db.execute(&format!("CREATE SCHEMA {other}")).await;
    db.execute("CREATE TYPE mood AS ENUM ('calm', 'busy')")
        .await;
    db.execute("CREATE DOMAIN positive AS integer CHECK (VALUE > 0)")
        .await;
    db.execute("CREATE DOMAIN stamp AS timestamptz").await;
    db.execute("CREATE DOMAIN numbers AS integer[]").await;
    let columns = "(a timestamptz, b date, c bigint, d int, e text, f varchar(20), g int[], \
                   h mood, i positive, j stamp, k numeric(10, 2), l timestamp, m smallint, \
                   n numbers, o char(3), gone int, p jsonb)";
    for table in [format!("{other}.kinds"), "kinds_here".to_owned()] {
        db.execute(&format!("CREATE TABLE {table} {columns}")).await;
        db.execute(&format!("ALTER TABLE {table} DROP COLUMN gone"))
            .await;
    }
    db.execute("CREATE VIEW kinds_view AS SELECT a, c, e FROM kinds_here")
        .await;
    for (schema, table) in [
        (Some(other.as_str()), "kinds"),
        (None, "kinds_here"),
        (None, "kinds_view"),
    ] {
        let said: Vec<(String, String)> = sqlx::query_as(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = COALESCE($1, current_schema()) AND table_name = $2 \
             ORDER BY ordinal_position",
        )
        .bind(schema)
        .bind(table)
        .fetch_all(pool)
        .await
        .unwrap();
        let name = schema.map_or(table.to_owned(), |s| format!("{s}.{table}"));
        let ident = Ident::parse(&name).unwrap();
        let names: Vec<String> = said.iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(
            db.store.target().table_columns(&ident).await.unwrap(),
            names,
            "{name}"
        );
        assert!(
            names.len() >= 3 && !names.contains(&"gone".to_owned()),
            "{name}"
        );
        for (column, data_type) in &said {
            assert_eq!(
                db.store
                    .target()
                    .column_type(&ident, column)
                    .await
                    .unwrap()
                    .as_ref(),
                Some(data_type),
                "{name}.{column}"
            );
        }
        assert_eq!(
            db.store.target().column_type(&ident, "gone").await.unwrap(),
            None
        );
    }
    let missing = Ident::parse(&format!("{other}.none_such")).unwrap();
    assert!(
        db.store
            .target()
            .table_columns(&missing)
            .await
            .unwrap()
            .is_empty()
    );
    db.execute(&format!("DROP SCHEMA {other} CASCADE")).await;
}

async fn unknown_names_are_refused_by_name(db: &TestDb) {
    create_events(db).await;
    let target = check_target(&db.store, "events", &["id", "created_at"])
        .await
        .unwrap();
    assert_eq!(target.table.quoted(), "\"events\"");
    assert_eq!(target.columns.len(), 2);

    let err = check_target(&db.store, "evnets", &["id"])
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "unknown table `evnets`");
    let err = check_target(&db.store, "events", &["id", "createdat"])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "table `events` has no column `createdat` (its columns: id, created_at, payload)"
    );
    for unsafe_name in [
        "events; DROP TABLE events",
        "events--",
        "\"events\"",
        "ev\u{0435}nts",
    ] {
        let err = check_target(&db.store, unsafe_name, &["id"])
            .await
            .unwrap_err();
        assert!(
            matches!(err, TargetError::Unsafe(_)),
            "{unsafe_name}: {err}"
        );
        assert!(err.is_bad_input());
        assert!(
            err.to_string().contains("is not a plain SQL identifier"),
            "{err}"
        );
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM events").await,
        3,
        "nothing was touched"
    );
}

async fn full_scans_are_refused_until_an_index_serves_them(db: &TestDb) {
    create_events(db).await;
    let table = Ident::parse("events").unwrap();
    let created_at = Ident::parse("created_at").unwrap();
    let id = Ident::parse("id").unwrap();
    let aged = Statement::new("SELECT ")
        .ident(&id)
        .push(" FROM ")
        .ident(&table)
        .push(" WHERE ")
        .ident(&created_at)
        .push(" < ")
        .value(SqlValue::Text("2026-06-01".into()))
        .push(" LIMIT 100");
    // Plan on several pooled connections at once, so each caches the schema without the index.
    assert_eq!(
        plans_on_many_connections(db, &table, &created_at, &aged).await,
        vec![false; 6]
    );
    let err = check_index(&db.store, &table, &created_at, &aged)
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, TargetError::FullScan { .. }), "{message}");
    assert!(
        message.starts_with("refusing a full scan of table `events`: no index serves `created_at`"),
        "{message}"
    );
    assert!(
        message.contains("CREATE INDEX events_created_at_idx ON events (created_at)"),
        "{message}"
    );

    // A key range is served by the primary key.
    let range = Statement::new("SELECT ")
        .ident(&id)
        .push(" FROM ")
        .ident(&table)
        .push(" WHERE ")
        .ident(&id)
        .push(" > ")
        .value(SqlValue::Int(0))
        .push(" ORDER BY ")
        .ident(&id)
        .push(" LIMIT 100");
    check_index(&db.store, &table, &id, &range).await.unwrap();

    db.execute("CREATE INDEX events_created_at_idx ON events (created_at)")
        .await;
    // Every connection sees the new index, not the schema it had cached.
    assert_eq!(
        plans_on_many_connections(db, &table, &created_at, &aged).await,
        vec![true; 6]
    );
}

/// Runs the index check from six tasks at once (so on several pooled
/// connections); true where the statement was accepted.
async fn plans_on_many_connections(
    db: &TestDb,
    table: &Ident,
    column: &Ident,
    probe: &Statement,
) -> Vec<bool> {
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let (store, table, column, probe) = (
                db.store.clone(),
                table.clone(),
                column.clone(),
                probe.clone(),
            );
            tokio::spawn(async move { check_index(&store, &table, &column, &probe).await.is_ok() })
        })
        .collect();
    let mut accepted = Vec::new();
    for task in tasks {
        accepted.push(task.await.unwrap());
    }
    accepted
}

/// The rows in scope are counted exactly up to [`COUNT_EXACTLY_UP_TO`] by
/// the planner's estimate; past it, the estimate stands. Statistics taken
/// before half the rows left the scope make the two tell apart: the count
/// sees the change at once, the estimate does not.
async fn a_large_scope_takes_the_planners_estimate_a_small_one_is_counted(db: &TestDb) {
    let registry = Registry::with_builtins();
    let estimated = |table: &'static str| {
        let (store, registry) = (db.store.clone(), &registry);
        async move {
            let arguments = common::older_than_a_day(&store, table).await;
            let arguments = serde_json::to_value(arguments).unwrap();
            let options = EnqueueOptions::default();
            let id = enqueue(&store, registry, "delete-aged-rows", &arguments, &options)
                .await
                .unwrap()
                .id;
            store.operation(id).await.unwrap().state.estimated_rows
        }
    };
    let large = 3 * COUNT_EXACTLY_UP_TO;
    for (table, rows) in [("small_scope", 1_000), ("large_scope", large)] {
        db.execute(&format!(
            "CREATE TABLE {table} (id BIGINT PRIMARY KEY, created_at TIMESTAMPTZ NOT NULL) \
             WITH (autovacuum_enabled = false)"
        ))
        .await;
        db.execute(&format!(
            "INSERT INTO {table} SELECT g, TIMESTAMPTZ '2020-01-01Z' FROM generate_series(1, {rows}) g"
        ))
        .await;
        db.execute(&format!("CREATE INDEX ON {table} (created_at)"))
            .await;
        db.execute(&format!("ANALYZE {table}")).await;
        // Half of them young now; the statistics still say all are aged.
        db.execute(&format!(
            "UPDATE {table} SET created_at = now() + INTERVAL '1 day' WHERE id % 2 = 0"
        ))
        .await;
    }
    assert_eq!(estimated("small_scope").await, Some(500));
    let large_estimate = estimated("large_scope").await.expect("an estimate");
    assert!(
        large_estimate > large * 3 / 4,
        "expected the planner's stale estimate (about {large} or more), not the count {}: {large_estimate}",
        large / 2
    );
}

/// A loop sub-batch's `DELETE` on PostgreSQL (`key = ANY (ARRAY(SELECT key
/// … LIMIT n))`) finds the picked rows through the key's index at every
/// size, where the `IN (SELECT …)` form is planned, past a few thousand
/// rows, as a hash join over a scan of the whole table — once per
/// sub-batch. Checked on the plans the server makes for the real
/// statements with their bound values.
async fn a_loop_sub_batch_finds_its_rows_by_key_at_any_size(db: &TestDb) {
    db.execute("CREATE TABLE wide (id BIGINT PRIMARY KEY, n INTEGER NOT NULL)")
        .await;
    db.execute("INSERT INTO wide SELECT g, g % 1000 FROM generate_series(1, 200000) g")
        .await;
    db.execute("ANALYZE wide").await;
    let shape = Shape::loop_until_done("wide", "id")
        .unwrap()
        .scope(Filter::new().lt("n", 2_000_i64))
        .unwrap();
    let Strategy::Loop { key } = shape.strategy() else {
        unreachable!("a loop shape")
    };
    let Backend::Postgres(pool) = db.store.backend() else {
        unreachable!("PostgreSQL only")
    };
    let plan = |pick, limit| {
        let head = Statement::new("DELETE FROM ").ident(shape.table());
        let statement = loop_rows(&shape, key, limit, pick, None, head);
        async move {
            let explain = format!("EXPLAIN {}", statement.text().as_str());
            let mut query = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(explain));
            for value in statement.params() {
                let SqlValue::Int(n) = value else {
                    unreachable!("integer parameters only")
                };
                query = query.bind(*n);
            }
            query.fetch_all(pool).await.unwrap().join("\n")
        }
    };
    assert_eq!(LoopPick::for_target(db.store.target()), LoopPick::KeyArray);
    for limit in [1_000, 5_000, 20_000] {
        let by_key = plan(LoopPick::KeyArray, limit).await;
        assert!(
            by_key.contains("Index Cond: (id = ANY") && !by_key.contains("Hash"),
            "{limit} rows:\n{by_key}"
        );
    }
    // What the other form does here, so the check above means something.
    let by_join = plan(LoopPick::InSubquery, 20_000).await;
    assert!(
        by_join.contains("Hash") && by_join.contains("Seq Scan on wide "),
        "{by_join}"
    );
}

/// PostgreSQL: a table's definition (what vouches for a fleet's targets)
/// is the same for the same table in two databases, and changes with
/// anything an enqueue's checks read: a key's unique index, a column's
/// type or nullability; a table with a trigger has none (checked in full).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_definition_changes_with_what_the_checks_read() {
    let (Some(one), Some(other)) = (TestDb::postgres().await, TestDb::postgres().await) else {
        return;
    };
    let create = "CREATE TABLE items (id BIGINT PRIMARY KEY, grp INTEGER NOT NULL, \
                  note TEXT, made TIMESTAMPTZ NOT NULL DEFAULT now())";
    one.execute(create).await;
    other.execute(create).await;
    other
        .execute("INSERT INTO items (id, grp) SELECT g, g FROM generate_series(1, 50) g")
        .await;
    let first = definition_of(&one, "items")
        .await
        .expect("a plain table has one");
    assert_eq!(
        definition_of(&other, "items").await.as_deref(),
        Some(first.as_str())
    );
    let changes = [
        (
            "ALTER TABLE items DROP CONSTRAINT items_pkey",
            "ALTER TABLE items ADD PRIMARY KEY (id)",
        ),
        (
            "ALTER TABLE items ALTER COLUMN grp TYPE BIGINT",
            "ALTER TABLE items ALTER COLUMN grp TYPE INTEGER",
        ),
        (
            "ALTER TABLE items ALTER COLUMN note SET NOT NULL",
            "ALTER TABLE items ALTER COLUMN note DROP NOT NULL",
        ),
        (
            "CREATE INDEX items_note ON items (note) WHERE note IS NOT NULL",
            "DROP INDEX items_note",
        ),
    ];
    follows_each_change(&one, &first, &changes).await;
    one.execute(
        "CREATE FUNCTION items_touch() RETURNS trigger LANGUAGE plpgsql AS \
         $$BEGIN RETURN NEW; END$$",
    )
    .await;
    one.execute(
        "CREATE TRIGGER items_touch BEFORE UPDATE ON items FOR EACH ROW EXECUTE FUNCTION items_touch()",
    )
    .await;
    assert_eq!(definition_of(&one, "items").await, None);
    assert_eq!(definition_of(&one, "no_such_table").await, None);
    one.cleanup().await;
    other.cleanup().await;
}

/// `table`'s definition on `db` ([`sluice_target::Target::table_definition`]).
async fn definition_of(db: &TestDb, table: &str) -> Option<String> {
    let table = Ident::parse(table).unwrap();
    db.store.target().table_definition(&table).await.unwrap()
}

/// MySQL and MariaDB: as on PostgreSQL, the same table in two databases
/// has the same definition, which changes with a key's unique index, a
/// column's type or nullability, an index, the engine; a table with a
/// trigger has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mysql_table_definition_changes_with_what_the_checks_read() {
    let (Some(one), Some(other)) = (TestDb::mysql().await, TestDb::mysql().await) else {
        return;
    };
    let create = "CREATE TABLE items (id BIGINT PRIMARY KEY, grp INTEGER NOT NULL, \
                  note VARCHAR(40), made TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE = InnoDB";
    one.execute(create).await;
    other.execute(create).await;
    other
        .execute("INSERT INTO items (id, grp) VALUES (1, 1), (2, 2)")
        .await;
    let first = definition_of(&one, "items")
        .await
        .expect("a plain table has one");
    assert_eq!(
        definition_of(&other, "items").await.as_deref(),
        Some(first.as_str())
    );
    let changes = [
        (
            "ALTER TABLE items DROP PRIMARY KEY",
            "ALTER TABLE items ADD PRIMARY KEY (id)",
        ),
        (
            "ALTER TABLE items MODIFY grp BIGINT NOT NULL",
            "ALTER TABLE items MODIFY grp INTEGER NOT NULL",
        ),
        (
            "ALTER TABLE items MODIFY note VARCHAR(40) NOT NULL DEFAULT ''",
            "ALTER TABLE items MODIFY note VARCHAR(40)",
        ),
        (
            "CREATE INDEX items_note ON items (note)",
            "DROP INDEX items_note ON items",
        ),
        (
            "ALTER TABLE items ENGINE = MyISAM",
            "ALTER TABLE items ENGINE = InnoDB",
        ),
    ];
    follows_each_change(&one, &first, &changes).await;
    one.execute(
        "CREATE TRIGGER items_touch BEFORE UPDATE ON items FOR EACH ROW SET NEW.grp = NEW.grp",
    )
    .await;
    assert_eq!(definition_of(&one, "items").await, None);
    assert_eq!(definition_of(&one, "no_such_table").await, None);
    one.cleanup().await;
    other.cleanup().await;
}

/// On `db`, each change (then its undoing) to `items` gives it another
/// definition than `first`, and the undoing gives `first` back.
async fn follows_each_change(db: &TestDb, first: &str, changes: &[(&str, &str)]) {
    for (change, undo) in changes {
        db.execute(change).await;
        let changed = definition_of(db, "items").await;
        assert!(
            changed.is_some() && changed.as_deref() != Some(first),
            "{change}"
        );
        db.execute(undo).await;
        assert_eq!(
            definition_of(db, "items").await.as_deref(),
            Some(first),
            "{undo}"
        );
    }
}
