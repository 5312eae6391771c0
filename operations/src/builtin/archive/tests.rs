//! `archive-rows`' checks of its arguments, without a database.

use super::*;

#[test]
fn archive_rows_refuses_its_own_table_and_unsafe_names() {
    let args = |into: &str, columns: &[&str]| ArchiveRowsArguments {
        table: "items".into(),
        into: into.into(),
        key: "id".into(),
        condition: Some("grp = 1".into()),
        column: None,
        older_than: None,
        cutoff: None,
        columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        undo: false,
        undo_table: None,
        keep_undo: None,
    };
    let same = ArchiveRows.shape(&args("items", &["id"])).unwrap_err();
    assert!(same.to_string().contains("another table"), "{same}");
    assert!(matches!(
        ArchiveRows.shape(&args("items_archive; DROP TABLE items", &["id"])),
        Err(OperationError::Unsafe(_))
    ));
    assert!(ArchiveRows.shape(&args("items_archive", &[])).is_err());
    assert!(
        ArchiveRows
            .shape(&args("items_archive", &["id", "grp"]))
            .is_ok()
    );
    let half_a_time_scope = ArchiveRowsArguments {
        column: Some("created_at".into()),
        ..args("items_archive", &["id"])
    };
    let error = ArchiveRows.shape(&half_a_time_scope).unwrap_err();
    assert!(
        error.to_string().contains("--column with --older-than"),
        "{error}"
    );
}
