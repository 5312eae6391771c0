//! The archive table of `archive-rows`: what an existing one must be to
//! hold exactly the rows copied (each column with the same full type and
//! collation, a base table, transactional, computing nothing itself), and
//! how Sluice creates one beside its live table when it is missing.

use sluice_store::Store;
use sluice_target::{Ident, Statement};

use super::{ArchiveRows, ArchiveRowsArguments};
use crate::error::OperationError;
use crate::target::check_transactional;

impl ArchiveRows {
    /// Creates the archive table of `arguments` when it does not exist:
    /// the live table's columns, types and collations as plain columns
    /// (PostgreSQL `LIKE`; MySQL an InnoDB `CREATE TABLE … AS` an empty
    /// select; SQLite each column declared as the live table declares it;
    /// a generated column's values are archived as values), with a unique
    /// index on the key so a row cannot be archived twice. Returns whether
    /// it created one. Checked ([`ArchiveRows`]'s `arguments_at`) before, so
    /// an existing table is left as it is.
    pub async fn create_archive(
        store: &Store,
        arguments: &ArchiveRowsArguments,
    ) -> Result<bool, OperationError> {
        let table = Ident::parse(&arguments.table)?;
        let into = Ident::parse(&arguments.into)?;
        let key = super::key_idents(&arguments.key)?;
        if !store.target().table_columns(&into).await?.is_empty() {
            return Ok(false);
        }
        // Plain columns of the same types: a generated column of the live
        // table is a column of values in its archive.
        let dialect = store.target().dialect();
        let create = match dialect.create_table_like(&into, &table) {
            Some(create) => create,
            // Each column declared as the live table declares it, with its
            // collation: a key compared otherwise in the archive finds
            // other rows.
            None => {
                let create = Statement::new("CREATE TABLE ").ident(&into).push(" (");
                sqlite_columns_of(store, &table, create).await?
            }
        };
        store.target().execute(&create).await?;
        let unique = dialect.add_unique(&into, &key)?;
        if let Some(unique) = unique {
            store
                .target()
                .execute(&unique.idents(&key).push(")"))
                .await?;
        }
        Ok(true)
    }
}

/// Refuses an existing archive table `into` that lacks one of the live
/// table's `columns`, gives it another type (SQLite: another type
/// affinity), or computes it itself. A missing archive table is fine:
/// enqueue creates it.
pub(super) async fn check_archive(
    store: &Store,
    table: &Ident,
    into: &Ident,
    columns: &[String],
) -> Result<(), OperationError> {
    if into == table {
        return Err(OperationError::Arguments(format!(
            "archive-rows needs another table to move rows into than `{table}`"
        )));
    }
    if store.target().table_columns(into).await?.is_empty() {
        return Ok(());
    }
    if store.target().same_table(table, into).await? {
        return Err(OperationError::Arguments(format!(
            "archive-rows needs another table to move rows into than `{table}`: `{into}` is \
             `{table}` itself"
        )));
    }
    if !store.target().is_base_table(into).await? {
        return Err(OperationError::Arguments(format!(
            "`{into}` is a view (or another kind of relation), not a table: rows moved into it \
             would land in the tables it shows, perhaps `{table}` itself; archive into a table"
        )));
    }
    let generated = store.target().generated_columns(into).await?;
    if let Some(column) = columns.iter().find(|c| generated.contains(c)) {
        return Err(OperationError::Arguments(format!(
            "archive table `{into}` computes its column `{column}` itself (generated, or an \
             identity generated always), so it cannot take the values of `{table}`'s rows; \
             archive into a new table (it is created with plain columns) or make `{column}` \
             a plain column"
        )));
    }
    let live = store.target().column_definitions(table).await?;
    let archived = store.target().column_definitions(into).await?;
    let sqlite = !store.target().dialect().has_column_types();
    for column in columns {
        let Some(live) = live.iter().find(|d| d.name == *column) else {
            continue;
        };
        let Some(archived) = archived.iter().find(|d| d.name == *column) else {
            return Err(OperationError::Arguments(format!(
                "archive table `{into}` does not fit `{table}`: it has no column `{column}`; \
                 archive into a new table (it is created with the same columns) or add it"
            )));
        };
        // SQLite keeps any value in any column: its affinity is what counts.
        let same_type = if sqlite {
            sqlite_affinity(&archived.full_type) == sqlite_affinity(&live.full_type)
        } else {
            archived.full_type.eq_ignore_ascii_case(&live.full_type)
        };
        if !same_type {
            return Err(OperationError::Arguments(format!(
                "archive table `{into}` does not fit `{table}`: its column `{column}` has type \
                 {}, where `{table}` has type {} (a narrower or other type would cut or refuse \
                 the values copied); archive into a new table (it is created with the same \
                 columns) or make `{into}` match",
                archived.full_type, live.full_type
            )));
        }
        let collation = |d: &sluice_target::ColumnDefinition| {
            d.collation.clone().unwrap_or_else(|| "none".into())
        };
        if !collation(archived).eq_ignore_ascii_case(&collation(live)) {
            return Err(OperationError::Arguments(format!(
                "archive table `{into}` does not fit `{table}`: its column `{column}` compares \
                 in collation {}, where `{table}`'s compares in {} (rows copied could not be \
                 found again by their key to delete them, or would be kept otherwise); archive \
                 into a new table (it is created with the same collations) or make `{into}` match",
                collation(archived),
                collation(live)
            )));
        }
    }
    check_transactional(store, into).await?;
    Ok(())
}

/// `head` followed by the columns of SQLite table `table` as it declares
/// them (plain columns, whatever computes them in `table`), each with its
/// collation, and `)`.
async fn sqlite_columns_of(
    store: &Store,
    table: &Ident,
    head: Statement,
) -> Result<Statement, OperationError> {
    let mut create = head;
    for (i, column) in store
        .target()
        .column_definitions(table)
        .await?
        .iter()
        .enumerate()
    {
        if i > 0 {
            create = create.push(", ");
        }
        let unusable = |what: &str| {
            OperationError::Arguments(format!(
                "cannot create an archive of `{table}`: its column `{}` has {what}; create \
                 the archive table yourself and name it with --into",
                column.name
            ))
        };
        create = create
            .ident(
                &Ident::parse(&column.name)
                    .map_err(|_| unusable("a name that is not a plain identifier"))?,
            )
            .push(" ");
        create = create.declared_type(&column.full_type).ok_or_else(|| {
            unusable(&format!(
                "the type `{}`, which Sluice does not copy",
                column.full_type
            ))
        })?;
        if let Some(collation) = &column.collation {
            let collation = Ident::parse(collation).map_err(|_| {
                unusable(&format!(
                    "the collation `{collation}`, which Sluice does not copy"
                ))
            })?;
            create = create.push(" COLLATE ").ident(&collation);
        }
    }
    Ok(create.push(")"))
}

/// SQLite's type affinity of a declared column type (its five rules, in
/// order): what a column created by `CREATE TABLE … AS` keeps of it.
fn sqlite_affinity(declared: &str) -> &'static str {
    let upper = declared.to_ascii_uppercase();
    if upper.contains("INT") {
        "INTEGER"
    } else if ["CHAR", "CLOB", "TEXT"].iter().any(|t| upper.contains(t)) {
        "TEXT"
    } else if upper.contains("BLOB") || upper.trim().is_empty() {
        "BLOB"
    } else if ["REAL", "FLOA", "DOUB"].iter().any(|t| upper.contains(t)) {
        "REAL"
    } else {
        "NUMERIC"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_affinities_follow_its_rules() {
        for (declared, affinity) in [
            ("BIGINT", "INTEGER"),
            ("INT", "INTEGER"),
            ("VARCHAR(20)", "TEXT"),
            ("TEXT", "TEXT"),
            ("", "BLOB"),
            ("DOUBLE PRECISION", "REAL"),
            ("NUM", "NUMERIC"),
            ("DECIMAL(10,2)", "NUMERIC"),
            ("POINT", "INTEGER"), // "POINT" holds "INT": rule 1 wins
        ] {
            assert_eq!(sqlite_affinity(declared), affinity, "{declared}");
        }
    }
}

/// The archive `into` in `schema`, the schema of the live `table`.
pub(super) fn in_schema(schema: &str, into: &Ident, table: &str) -> Result<Ident, OperationError> {
    Ident::parse(&format!("{schema}.{}", into.name())).map_err(|_| {
        OperationError::Arguments(format!(
            "the schema `{schema}` of `{table}` is not a plain identifier: name the archive \
             table with a schema of its own (--into schema.table)"
        ))
    })
}

/// Drops the archive table `into` when this enqueue `created` it (still
/// empty): a refused enqueue leaves nothing behind.
pub(super) async fn drop_created(
    store: &Store,
    created: bool,
    into: &str,
) -> Result<(), OperationError> {
    if created {
        let into = Ident::parse(into)?;
        store
            .target()
            .execute(&Statement::new("DROP TABLE ").ident(&into))
            .await?;
    }
    Ok(())
}

/// Refuses to archive out of `table` when foreign keys delete or change
/// other rows as its rows are deleted (`ON DELETE CASCADE`, `SET NULL`,
/// `SET DEFAULT`): those rows would be lost or changed, not archived.
pub(super) async fn refuse_delete_actions(
    store: &Store,
    table: &Ident,
) -> Result<(), OperationError> {
    let actions = store.target().delete_actions(table).await?;
    if actions.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = actions.iter().map(ToString::to_string).collect();
    Err(OperationError::Arguments(format!(
        "archive-rows would lose rows it does not archive: deleting a row of `{table}` also \
         deletes or changes the rows that refer to it in {}; archive those first, or make \
         the foreign key NO ACTION while archiving",
        listed.join(", ")
    )))
}
