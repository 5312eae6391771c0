use super::*;
use crate::dialect::mysql::sessions::skips_locked_rows;

#[test]
fn passwords_are_not_repeated_in_messages() {
    assert_eq!(
        redact_url("mysql://root:secret@db:3306/x"),
        "mysql://root:***@db:3306/x"
    );
    assert_eq!(redact_url("redis://db"), "redis://db");
}

#[test]
fn the_client_group_of_an_option_file_gives_the_password() {
    let text = "[mysqld]\npassword = server\n\n[client]\n# mine\nuser = app\npassword = \"s3 cr#t\"\n[mysql]\npassword = other\n";
    assert_eq!(client_password(text).as_deref(), Some("s3 cr#t"));
    assert_eq!(
        client_password("[client]\npassword='x'\n").as_deref(),
        Some("x")
    );
    assert_eq!(client_password("[mysql]\npassword=x\n"), None);
}

#[test]
fn a_stored_target_url_has_no_password() {
    assert_eq!(
        url_without_password("postgres://app:s3cr@t@db-7:5432/app?sslmode=require"),
        "postgres://app@db-7:5432/app?sslmode=require"
    );
    assert_eq!(
        url_without_password("mysql://root@db/x"),
        "mysql://root@db/x"
    );
    assert_eq!(url_without_password("sqlite:data/a.db"), "sqlite:data/a.db");
}

/// A sub-batch's statement journal stays in memory: written to a
/// temporary file page by page, it slowed every SQLite sub-batch.
#[tokio::test]
async fn sqlite_connections_keep_temporary_data_in_memory() {
    let dir = std::env::temp_dir().join(format!("sluice-temp-target-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite:{}", dir.join("store.sqlite").display());
    let store = crate::Target::open(&url, &crate::ConnectOptions::default())
        .await
        .unwrap();
    let Backend::Sqlite(pool) = store.backend() else {
        panic!("an SQLite store")
    };
    let temp_store: i64 = sqlx::query_scalar("PRAGMA temp_store")
        .fetch_one(pool)
        .await
        .unwrap();
    let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(pool)
        .await
        .unwrap();
    store.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!((temp_store, journal.as_str()), (2, "wal"), "2 is MEMORY");
}

#[test]
fn skip_locked_needs_mariadb_10_6_or_mysql_8() {
    assert!(skips_locked_rows("10.11.6-MariaDB-0+deb12u1-log"));
    assert!(skips_locked_rows("11.4.2-MariaDB"));
    assert!(skips_locked_rows("10.6.0-MariaDB"));
    assert!(!skips_locked_rows("10.5.23-MariaDB"));
    assert!(skips_locked_rows("8.0.36"));
    assert!(skips_locked_rows("8.4.0-commercial"));
    assert!(!skips_locked_rows("5.7.44-log"));
}

#[test]
fn sluice_s_own_query_parameter_is_taken_out_of_the_url() {
    assert_eq!(
        take_query_parameter("postgres://app@db/app?sluice_schema=ops", "sluice_schema"),
        ("postgres://app@db/app".to_owned(), Some("ops".to_owned()))
    );
    assert_eq!(
        take_query_parameter(
            "postgres://app@db/app?sslmode=require&sluice_schema=ops&application_name=x",
            "sluice_schema"
        ),
        (
            "postgres://app@db/app?sslmode=require&application_name=x".to_owned(),
            Some("ops".to_owned())
        )
    );
    assert_eq!(
        take_query_parameter("postgres://app@db/app?sslmode=require", "sluice_schema"),
        ("postgres://app@db/app?sslmode=require".to_owned(), None)
    );
    assert_eq!(
        take_query_parameter("sqlite:x.sqlite", "sluice_schema"),
        ("sqlite:x.sqlite".to_owned(), None)
    );
}
