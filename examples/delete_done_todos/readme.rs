//! The README's "Running it", exactly as the README shows it
//! (`tests/examples.rs` checks), compiled with nothing but the prelude.

use sluice::prelude::*;

use super::operation::{DeleteAllDoneTodos, DoneTodos};

#[allow(dead_code, unused_variables)]
#[rustfmt::skip]
async fn running() -> Result<(), Box<dyn std::error::Error>> {
let runtime = RuntimeBuilder::new("sqlite:app.sqlite")   // or ::with_store(Store::postgres(app_pool).await?)
    .register(DeleteAllDoneTodos)
    .start().await?;
let before = Utc::now() - TimeDelta::days(90);
let op = runtime.enqueue(&DeleteAllDoneTodos, &DoneTodos { user_id: 7, before },
                         &EnqueueOptions::default()).await?;
let done = runtime.wait(op.id, Duration::from_secs(600)).await?;
runtime.shutdown().await?;                     // in-flight sub-batches finish; state is persisted
Ok(())
}
