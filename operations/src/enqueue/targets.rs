//! Where an enqueue's checks run: the store's own database, or a handle on
//! each target apart from it that the options name.

use sluice_store::{Store, StoreError};

use super::EnqueueOptions;
use super::fleet;
use crate::error::OperationError;

/// A handle on `store` whose operations work on the database `url` names,
/// apart from the store's ([`Store::on_target`]): opened with `options`
/// and the password `url` names or this process's environment gives
/// ([`sluice_target::with_password_from_env`]); stored and shown without
/// a password.
///
/// Errors: [`OperationError::OnTarget`] naming the target (without its
/// password) when it cannot be reached or its progress table cannot be
/// created there.
pub async fn on_target(
    store: &Store,
    url: &str,
    options: &sluice_target::ConnectOptions,
) -> Result<Store, OperationError> {
    let shown = sluice_target::url_without_password(url);
    let on_target = |source: StoreError| OperationError::OnTarget {
        target: shown.clone(),
        source,
    };
    let target = sluice_target::Target::open(&sluice_target::with_password_from_env(url), options)
        .await
        .map_err(|e| on_target(e.into()))?;
    store.on_target(&shown, target).await.map_err(on_target)
}

/// `store` when `options` name no target, else a handle on it for each
/// target they name ([`on_target`]), with the target's name.
pub(super) async fn with_targets(
    store: &Store,
    options: &EnqueueOptions,
) -> Result<Vec<(Store, Option<String>)>, OperationError> {
    if options.targets.is_empty() {
        return Ok(vec![(store.clone(), None)]);
    }
    fleet::refuse_duplicates(&options.targets)?;
    let mut handles = Vec::with_capacity(options.targets.len());
    for target in &options.targets {
        let apart = on_target(
            store,
            &target.url,
            &sluice_target::ConnectOptions::default(),
        )
        .await?;
        handles.push((apart, Some(target.name.clone())));
    }
    Ok(handles)
}
