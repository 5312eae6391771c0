//! `archive-rows` over targets apart from the store: an archive table
//! made on each target, beside that target's own live table.

use sluice_store::Store;
use sluice_target::Ident;

use super::{ArchiveRows, ArchiveRowsArguments, drop_created, in_schema};
use crate::error::OperationError;

/// [`ArchiveRows::enqueue`] over targets apart from the store: the archive
/// table is created on each target that lacks it (each target opened in
/// turn and closed again), then the operation enqueued over them; a
/// refusal drops every archive table this enqueue created, still empty.
pub(super) async fn enqueue_on_targets(
    store: &Store,
    registry: &crate::operation::Registry,
    parsed: &ArchiveRowsArguments,
    options: &crate::EnqueueOptions,
) -> Result<sluice_store::Enqueued, OperationError> {
    let mut created = Vec::new();
    let mut enqueued = Ok(());
    for target in &options.targets {
        let made = async {
            let apart = on_target_named(store, target).await?;
            let here = match archive_here(&apart, parsed).await {
                Ok(here) => ArchiveRows::create_archive(&apart, &here)
                    .await
                    .map(|c| (here, c)),
                Err(error) => Err(error),
            };
            apart.target().close().await;
            here
        };
        match made.await {
            Ok((here, true)) => created.push((target, here.into)),
            Ok((_, false)) => {}
            Err(error) => {
                enqueued = Err(error);
                break;
            }
        }
    }
    let enqueued = match enqueued {
        Ok(()) => {
            let arguments = serde_json::to_value(parsed).expect("arguments serialise");
            crate::enqueue::enqueue(store, registry, "archive-rows", &arguments, options).await
        }
        Err(error) => Err(error),
    };
    if enqueued.is_err() {
        for (target, into) in created {
            let apart = on_target_named(store, target).await?;
            let dropped = drop_created(&apart, true, &into).await;
            apart.target().close().await;
            dropped?;
        }
    }
    enqueued
}

/// `parsed` with the archive named as it is made on the target `apart`:
/// an unqualified one the target's search path does not find goes beside
/// the target's live table (PostgreSQL), never into a schema of Sluice's
/// own that may come first in the path.
async fn archive_here(
    apart: &Store,
    parsed: &ArchiveRowsArguments,
) -> Result<ArchiveRowsArguments, OperationError> {
    let into = Ident::parse(&parsed.into)?;
    let mut here = parsed.clone();
    if into.schema().is_none()
        && apart.target().schema_of(&into).await?.is_none()
        && let Some(schema) = apart
            .target()
            .schema_of(&Ident::parse(&parsed.table)?)
            .await?
    {
        here.into = in_schema(&schema, &into, &parsed.table)?.to_string();
    }
    Ok(here)
}

/// A handle on `target` ([`crate::on_target`]; its errors name the URL,
/// without a password).
async fn on_target_named(
    store: &Store,
    target: &crate::NamedTarget,
) -> Result<Store, OperationError> {
    crate::on_target(
        store,
        &target.url,
        &sluice_target::ConnectOptions::default(),
    )
    .await
}
