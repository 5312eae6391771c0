use super::*;
use crate::dialect::{MYSQL, POSTGRES, SQLITE};

fn undo() -> UndoTable {
    let ident = |name: &str| Ident::parse(name).unwrap();
    UndoTable::new(
        ident("items"),
        ident("items_undo_x"),
        vec![ident("site"), ident("seq")],
        vec![ident("n")],
    )
    .unwrap()
}

/// ` AND (site, seq) > (…)` as a sub-batch's range appends it.
fn range(statement: Statement, key: &[Ident]) -> Statement {
    statement
        .push(" AND (")
        .idents(key)
        .push(") > (")
        .value(1.into())
        .push(", ")
        .value(2.into())
        .push(")")
}

fn rows(head: Statement) -> Statement {
    head.push(" WHERE grp = 1")
}

#[test]
fn postgresql_keeps_the_locked_rows_images_in_the_statement_that_changes_them() {
    let set = Assignments::parse("n = n + 1").unwrap();
    let statements = undo().keep_and_update(&POSTGRES, &set, &rows, &range);
    assert_eq!(statements.len(), 1);
    assert_eq!(
        statements[0].text().as_str(),
        "WITH sluice_changed AS (UPDATE \"items\" AS \"sluice_live\" SET n = n + 1 FROM \
         (SELECT \"site\" AS \"sluice_key_1\", \"seq\" AS \"sluice_key_2\", \"n\" AS \
         \"sluice_old_1\" FROM \"items\" WHERE grp = 1 FOR UPDATE) AS \"sluice_before\" \
         WHERE \"sluice_live\".\"site\" = \"sluice_before\".\"sluice_key_1\" AND \
         \"sluice_live\".\"seq\" = \"sluice_before\".\"sluice_key_2\" RETURNING \
         \"sluice_before\".\"sluice_key_1\", \"sluice_before\".\"sluice_key_2\", \
         \"sluice_before\".\"sluice_old_1\", \"sluice_live\".\"n\") INSERT INTO \
         \"items_undo_x\" (\"site\", \"seq\", \"sluice_old_1\", \"sluice_new_1\") SELECT * \
         FROM sluice_changed"
    );
}

#[test]
fn mysql_locks_the_rows_it_copies_and_changes_only_the_rows_copied() {
    let set = Assignments::parse("n = n + 1").unwrap();
    let statements = undo().keep_and_update(&MYSQL, &set, &rows, &range);
    let texts: Vec<&str> = statements.iter().map(|s| s.text().as_str()).collect();
    assert!(
        texts[0].ends_with("WHERE grp = 1 FOR UPDATE"),
        "{}",
        texts[0]
    );
    assert!(
        texts[1].contains(
            "AND (\"site\", \"seq\") IN (SELECT \"site\", \"seq\" FROM \"items_undo_x\" WHERE \
             1 = 1 AND (\"site\", \"seq\") > ($3, $4))"
        ),
        "{}",
        texts[1]
    );
    assert!(
        texts[2].starts_with(
            "UPDATE \"items_undo_x\" AS \"sluice_undo\" JOIN \"items\" AS \"sluice_live\" ON"
        ),
        "{}",
        texts[2]
    );
}

#[test]
fn sqlite_keeps_the_after_image_it_writes_in_two_statements() {
    let set = Assignments::parse("n = n + random()").unwrap();
    let statements = undo().keep_and_update(&SQLITE, &set, &rows, &range);
    let texts: Vec<&str> = statements.iter().map(|s| s.text().as_str()).collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    // The new value is computed once, from the row as it was, and kept.
    assert_eq!(
        texts[0],
        "INSERT INTO \"items_undo_x\" (\"site\", \"seq\", \"sluice_old_1\", \"sluice_new_1\") \
         SELECT \"site\", \"seq\", \"n\", (n + random()) FROM \"items\" WHERE grp = 1"
    );
    // The row then gets exactly that value, from the undo table's rows in
    // the range.
    assert!(
        texts[1].starts_with(
            "UPDATE \"items\" AS \"sluice_live\" SET \"n\" = \"sluice_undo\".\"sluice_new_1\" \
             FROM \"items_undo_x\" AS \"sluice_undo\" WHERE"
        ),
        "{}",
        texts[1]
    );
    assert!(
        texts[1].contains("(\"sluice_undo\".\"site\", \"sluice_undo\".\"seq\") > ("),
        "{}",
        texts[1]
    );
    assert!(!texts[0].contains("FOR UPDATE"));
}

#[test]
fn sqlite_keeps_in_three_statements_what_a_tuple_assignment_sets() {
    let set = Assignments::parse("(n) = (SELECT 1)").unwrap();
    assert_eq!(set.values(), None);
    let statements = undo().keep_and_update(&SQLITE, &set, &rows, &range);
    assert_eq!(statements.len(), 3);
    let other = Assignments::parse("m = 1").unwrap();
    assert!(undo().keep_in_two(&SQLITE, &other, &rows, &range).is_none());
}

#[test]
fn a_revert_puts_back_only_rows_still_as_written_unless_forced() {
    let texts = |dialect: &dyn Dialect, force: bool| -> Vec<String> {
        undo()
            .restore(dialect, force, &range)
            .iter()
            .map(|s| s.text().as_str().to_owned())
            .collect()
    };
    let postgres = texts(&POSTGRES, false);
    assert!(
        postgres[0].contains(
            "\"sluice_live\".\"n\"::text IS NOT DISTINCT FROM \"sluice_undo\".\"sluice_new_1\"::text"
        ),
        "{}",
        postgres[0]
    );
    assert!(postgres[0].contains("\"sluice_undo\".\"sluice_state\" IS NULL"));
    assert!(!texts(&POSTGRES, true)[0].contains("sluice_new_1"));
    assert!(texts(&MYSQL, false)[0].contains("<=> \"sluice_undo\".\"sluice_new_1\""));
    assert!(texts(&SQLITE, false)[0].contains(" IS \"sluice_undo\".\"sluice_new_1\""));
    // Every row of the range is marked once: reverted, else conflict.
    assert!(postgres[1].starts_with(
        "UPDATE \"items_undo_x\" SET \"sluice_state\" = 'reverted' WHERE \"sluice_state\" IS NULL"
    ));
    assert!(postgres[2].starts_with(
        "UPDATE \"items_undo_x\" SET \"sluice_state\" = 'conflict' WHERE \"sluice_state\" IS NULL"
    ));
}

#[test]
fn postgresql_s_single_statements_hoist_their_own_with_when_fused() {
    let set = Assignments::parse("n = n + 1").unwrap();
    let keep = undo()
        .keep_and_update(&POSTGRES, &set, &rows, &range)
        .remove(0);
    let (lead, main) = keep.split_main();
    assert!(
        lead.unwrap()
            .as_str()
            .starts_with("WITH sluice_changed AS (UPDATE")
    );
    assert!(main.as_str().starts_with("INSERT INTO \"items_undo_x\""));
    let restore = POSTGRES
        .restore_in_one_statement(&undo(), false, &range)
        .unwrap();
    let (lead, main) = restore.split_main();
    let lead = lead.unwrap();
    assert!(
        lead.as_str()
            .starts_with("WITH sluice_put_back AS (UPDATE \"items\"")
    );
    assert!(
        lead.as_str()
            .contains("sluice_conflict AS (UPDATE \"items_undo_x\" SET")
    );
    assert!(
        main.as_str()
            .starts_with("UPDATE \"items_undo_x\" SET \"sluice_state\" = 'reverted' WHERE"),
        "{}",
        main.as_str()
    );
    assert!(
        SQLITE
            .restore_in_one_statement(&undo(), false, &range)
            .is_none()
    );
}

#[test]
fn an_undo_table_refuses_a_key_named_like_its_own_columns() {
    let ident = |name: &str| Ident::parse(name).unwrap();
    let refused = UndoTable::new(
        ident("t"),
        ident("t_undo"),
        vec![ident("sluice_state")],
        vec![ident("n")],
    );
    assert_eq!(refused, Err(UndoTableError::OwnName("sluice_state".into())));
    assert_eq!(
        UndoTable::new(ident("t"), ident("t_undo"), vec![ident("id")], vec![]),
        Err(UndoTableError::NoColumns)
    );
}
