//! Operator controls announced by PostgreSQL: every worker `LISTEN`s on
//! [`CONTROL_CHANNEL`], so a pause, cancel or resume written by any process
//! (the CLI, the console, another worker) reaches this node's operation
//! actors when it commits, not at their next control poll. The poll stays
//! as the fallback for a notification lost while the listener reconnects.

use std::time::Duration;

use ractor::ActorRef;
use sluice_store::{Announced, CONTROL_CHANNEL, Store};
use sluice_target::Backend;
use sqlx::postgres::PgListener;
use tokio::task::JoinHandle;

use crate::supervisor::SupervisorMessage;

/// The longest wait between two attempts to listen again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// On PostgreSQL, a task that forwards each announcement to `supervisor`
/// until the supervisor or the store's pool stops; elsewhere `None`.
pub(crate) fn spawn_listener(
    store: &Store,
    supervisor: ActorRef<SupervisorMessage>,
) -> Option<JoinHandle<()>> {
    let Backend::Postgres(pool) = store.backend() else {
        return None;
    };
    let pool = pool.clone();
    Some(tokio::spawn(async move {
        let mut backoff = Duration::from_millis(100);
        loop {
            match listen(&pool, &supervisor).await {
                Ok(()) => return,
                Err(error) => {
                    tracing::warn!(%error, "control listener lost; the control poll covers until it is back");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }))
}

/// Listens and forwards until the supervisor stops or the pool closes
/// (`Ok`), or the connection fails (`Err`).
async fn listen(
    pool: &sqlx::PgPool,
    supervisor: &ActorRef<SupervisorMessage>,
) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CONTROL_CHANNEL).await?;
    loop {
        let notification = match listener.recv().await {
            Err(sqlx::Error::PoolClosed) => return Ok(()),
            received => received?,
        };
        let Some(announced) = Announced::parse(notification.payload()) else {
            continue;
        };
        if supervisor
            .cast(SupervisorMessage::Controlled(announced))
            .is_err()
        {
            return Ok(());
        }
    }
}
