use super::*;

#[test]
fn one_expression_is_accepted_and_written_back() {
    let c = Condition::parse("status = 'stale'  AND hits > 3").unwrap();
    assert_eq!(c.as_str(), "status = 'stale' AND hits > 3");
    let c = Condition::parse("note = 'it''s ) OR (1=1'").unwrap();
    assert_eq!(c.as_str(), "note = 'it''s ) OR (1=1'");
    assert!(Condition::parse("\"MixedCase\" IS NULL").is_ok());
    assert!(Condition::parse("created_at < now() - interval '1 day'").is_ok());
}

#[test]
fn text_escaping_its_place_is_refused() {
    for bad in [
        "1=1) OR (1=1",
        "a = 1; DELETE FROM t",
        "a = 1)",
        "(a = 1",
        "a = 1 b = 2",
        "",
        "   ",
        "-- only a comment",
        "id > $1",
        "id > ?",
        "a = 1 /* unterminated",
        "a = 1 -- trailing comment",
        "a /* x */ = 1",
        "a = 1 -- c\n OR 1 = 1",
        "'unterminated",
    ] {
        let err = Condition::parse(bad).unwrap_err();
        assert_eq!(err.what, "WHERE", "{bad}");
    }
    let deep = format!("{}1{}", "(".repeat(200), ")".repeat(200));
    assert!(
        Condition::parse(&deep)
            .unwrap_err()
            .reason
            .contains("nests too deeply")
    );
}

#[test]
fn what_mysql_would_read_otherwise_is_refused_for_it_alone() {
    for (sql, says) in [
        (
            "status = \"done\"",
            "a column name in Sluice's MySQL sessions",
        ),
        ("\"status\" = 'done'", "back quotes (`status`)"),
        ("path = 'C:\\new'", "backslash"),
        ("note = 'a\\' OR grp = 1 OR note = 'b'", "backslash"),
    ] {
        let condition = Condition::parse(sql).expect(sql);
        let error = condition.check_for_mysql().expect_err(sql);
        assert_eq!(error.what, "WHERE");
        assert_eq!(error.input, sql);
        assert!(error.reason.contains(says), "{sql}: {error}");
    }
    for sql in [
        "status = 'done' || status = 'new'",
        "`status` = 'it''s'",
        "a = 1 AND b <> 2",
    ] {
        let condition = Condition::parse(sql).expect(sql);
        assert_eq!(condition.check_for_mysql(), Ok(()), "{sql}");
    }
    let set = Assignments::parse("note = \"x\"").unwrap();
    assert_eq!(set.check_for_mysql().unwrap_err().what, "SET");
    assert!(
        Assignments::parse("note = 'x', `hits` = hits + 1")
            .unwrap()
            .check_for_mysql()
            .is_ok()
    );
}

#[test]
fn a_clock_read_is_found_wherever_it_is_written() {
    for (sql, read) in [
        ("created_at < now() - interval '1 day'", "now"),
        ("d < CURRENT_DATE", "CURRENT_DATE"),
        (
            "SELECT 1 WHERE 1 = 1 AND (t < LOCALTIMESTAMP) AND id > $1",
            "LOCALTIMESTAMP",
        ),
        ("t < SysDate()", "SysDate"),
    ] {
        assert_eq!(clock_read(sql).as_deref(), Some(read), "{sql}");
    }
    for sql in [
        "t < UTC_TIMESTAMP() - INTERVAL 1 DAY",
        "\"now\" = 1 AND `current_date` IS NULL",
        "note = 'now'",
        "nowhere = 1",
    ] {
        assert_eq!(clock_read(sql), None, "{sql}");
    }
}

#[test]
fn a_date_read_by_datestyle_is_found_and_an_iso_one_is_not() {
    for sql in [
        "at < '01/12/2025'",
        "at < '1.12.25'",
        "at >= '01-12-2025 10:00:00' AND id > $1",
        "at < ' 1/2/2025'",
    ] {
        assert!(ambiguous_date(sql).is_some(), "{sql}");
    }
    for sql in [
        "at < '2025-12-01'",
        "at < '2025/12/01'",
        "code = '01/12'",
        "code = '1/2/3'",
        "code = '01/12-2025'",
        "code = '01/12/20251'",
        "\"01/12/2025\" IS NULL",
        "note = 'due 01/12/2025'",
    ] {
        assert_eq!(ambiguous_date(sql), None, "{sql}");
    }
}

#[test]
fn the_functions_called_are_the_names_before_a_parenthesis() {
    assert_eq!(
        functions_called(
            "x = nextval ('s') AND \"Audit\"(id) AND y IN (1, 2) AND lower(z) = lower(z)"
        ),
        ["nextval", "audit", "in", "lower"]
    );
    assert!(functions_called("a = 'f(x)'").is_empty());
}

#[test]
fn a_set_list_names_the_columns_it_writes() {
    let s = Assignments::parse("hits = hits + 1, \"Note\" = 'x', t.flag = true").unwrap();
    assert_eq!(s.columns(), ["hits", "Note", "flag"]);
    assert_eq!(s.as_str(), "hits = hits + 1, \"Note\" = 'x', t.flag = true");
    let tuple = Assignments::parse("(a, b) = (1, 2)").unwrap();
    assert_eq!(tuple.columns(), ["a", "b"]);
    assert_eq!(s.writes_any(["id", "NOTE"]), Some("NOTE"));
    assert_eq!(s.writes_any(["id"]), None);
    for bad in [
        "hits = 1; DROP TABLE t",
        "hits = 1 WHERE 1=1",
        "hits",
        "hits = ",
        "= 1",
        "hits = $1",
    ] {
        assert_eq!(Assignments::parse(bad).unwrap_err().what, "SET", "{bad}");
    }
}
