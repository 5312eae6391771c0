//! The databases apart from the store that this node's operations work on
//! (`enqueue --target`), each opened once and shared by the operations on
//! it: [`TargetDirectory`].

use std::collections::HashMap;
use std::sync::Arc;

use sluice_operations::OperationError;
use sluice_store::Store;
use sluice_target::ConnectOptions;
use tokio::sync::Mutex;

/// The handles ([`Store::on_target`]) this node opened on targets apart
/// from its store, by stored URL (without a password). A target is opened
/// when the first operation on it starts here, with the password of the
/// URL this node was given for it (`run --targets FILE`,
/// [`crate::RuntimeBuilder::target_url`]), else the one its environment
/// gives ([`sluice_target::with_password_from_env`]; PostgreSQL's
/// `PGPASSWORD` and `.pgpass`), and kept for the next.
#[derive(Clone)]
pub(crate) struct TargetDirectory {
    opened: Arc<Mutex<HashMap<String, Store>>>,
    options: ConnectOptions,
    /// Given URLs, passwords included, by their URL without one.
    given: Arc<HashMap<String, String>>,
}

impl TargetDirectory {
    /// A directory opening targets with `options` (the runtime's pool
    /// size and sub-batch timeout).
    pub(crate) fn new(options: ConnectOptions, given: Vec<String>) -> Self {
        let given = given
            .into_iter()
            .map(|url| (sluice_target::url_without_password(&url), url))
            .collect();
        TargetDirectory {
            opened: Arc::default(),
            options,
            given: Arc::new(given),
        }
    }

    /// The handle on `store` for the target stored as `url`, opened now
    /// if this node has none yet. Errors: the target cannot be reached or
    /// prepared (named without a password).
    pub(crate) async fn store_for(
        &self,
        store: &Store,
        url: &str,
    ) -> Result<Store, OperationError> {
        let mut opened = self.opened.lock().await;
        if let Some(handle) = opened.get(url) {
            return Ok(handle.clone());
        }
        let with_password = self.given.get(url).map_or(url, String::as_str);
        let handle = sluice_operations::on_target(store, with_password, &self.options).await?;
        opened.insert(url.to_owned(), handle.clone());
        Ok(handle)
    }
}
