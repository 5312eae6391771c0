use super::*;
use crate::operation::Operation;
use chrono::{DateTime, Utc};
use text_times::iso_like;

#[test]
fn text_cutoffs_follow_the_column_style() {
    let at = DateTime::parse_from_rfc3339("2026-03-04T05:06:07Z")
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(iso_like("2025-01-01T00:00:00Z", at), "2026-03-04T05:06:07");
    assert_eq!(iso_like("2025-01-01 00:00:00", at), "2026-03-04 05:06:07");
    let cutoff = iso_like("2025-01-01T00:00:00.123+00:00", at);
    assert_eq!(cutoff, "2026-03-04T05:06:07");
    // Values at the cutoff's second are not older; earlier ones are.
    for same in [
        "2026-03-04T05:06:07Z",
        "2026-03-04T05:06:07.5Z",
        "2026-03-04T05:06:07+00:00",
    ] {
        assert!(same > cutoff.as_str(), "{same}");
    }
    assert!("2026-03-04T05:06:06.999Z" < cutoff.as_str());
}

#[test]
fn update_in_batches_refuses_smuggled_statements() {
    let args = UpdateInBatchesArguments {
        table: "t".into(),
        key: "id".into(),
        set: "a = 1; DROP TABLE t".into(),
        condition: None,
        undo: false,
        undo_table: None,
        undo_columns: Vec::new(),
        keep_undo: None,
    };
    assert!(matches!(
        UpdateInBatches.shape(&args),
        Err(OperationError::Expression(_))
    ));
}

#[test]
fn update_in_batches_refuses_a_set_that_writes_its_key() {
    for set in [
        "id = id + 1000000, hits = hits + 1",
        "ID = 5",
        "(hits, \"id\") = (1, 2)",
    ] {
        let args = UpdateInBatchesArguments {
            table: "t".into(),
            key: "id".into(),
            set: set.into(),
            condition: None,
            undo: false,
            undo_table: None,
            undo_columns: Vec::new(),
            keep_undo: None,
        };
        let err = UpdateInBatches.shape(&args).unwrap_err().to_string();
        assert!(err.contains("walk by (`id`)"), "{set}: {err}");
    }
    // The same key under the names SQLite and MySQL give a row's id.
    for alias in ["rowid", "OID", "_rowid_", "_rowid"] {
        let args = UpdateInBatchesArguments {
            table: "t".into(),
            key: "id".into(),
            set: format!("hits = 1, {alias} = {alias} + 1000"),
            condition: None,
            undo: false,
            undo_table: None,
            undo_columns: Vec::new(),
            keep_undo: None,
        };
        let err = UpdateInBatches.shape(&args).unwrap_err().to_string();
        assert!(
            err.contains(&format!("the SET writes `{alias}`, a name")),
            "{err}"
        );
    }
}

#[test]
fn a_key_list_names_plain_distinct_columns() {
    assert_eq!(key_columns("id").unwrap(), ["id"]);
    assert_eq!(
        key_columns("site, seq").unwrap(),
        ["site", "seq"],
        "spaces around commas are not part of names"
    );
    for bad in ["", "id,", ",id", "id,,seq", "id,id", "id;seq", "id,\"seq\""] {
        assert!(key_columns(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn update_in_batches_walks_a_key_of_several_columns_in_order() {
    let args = UpdateInBatchesArguments {
        table: "readings".into(),
        key: "site,seq".into(),
        set: "n = n + 1".into(),
        condition: None,
        undo: false,
        undo_table: None,
        undo_columns: Vec::new(),
        keep_undo: None,
    };
    let shape = UpdateInBatches.shape(&args).unwrap();
    let names: Vec<&str> = shape.batching_columns().iter().map(Ident::name).collect();
    assert_eq!(names, ["site", "seq"]);
}

#[test]
fn an_undo_table_is_not_part_of_what_makes_two_updates_the_same() {
    let asked = |undo_table: Option<&str>| UpdateInBatchesArguments {
        table: "t".into(),
        key: "id".into(),
        set: "n = n + 1".into(),
        condition: None,
        undo: true,
        undo_table: undo_table.map(Into::into),
        undo_columns: vec!["n".into()],
        keep_undo: None,
    };
    assert_eq!(
        UpdateInBatches.identity(&asked(Some("t_undo_a"))),
        UpdateInBatches.identity(&asked(Some("t_undo_b")))
    );
    assert!(UpdateInBatches.shape(&asked(Some("t_undo_a"))).is_ok());
    let error = UpdateInBatches.shape(&asked(None)).unwrap_err().to_string();
    assert!(error.contains("needs the undo table"), "{error}");
    let plain = UpdateInBatchesArguments {
        undo: false,
        undo_table: None,
        undo_columns: Vec::new(),
        keep_undo: None,
        ..asked(None)
    };
    assert_ne!(
        UpdateInBatches.identity(&plain),
        UpdateInBatches.identity(&asked(Some("t_undo_a"))),
        "with and without --undo are two requests"
    );
}
