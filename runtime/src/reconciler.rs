//! The reconciler: at start-up and every `reconcile_interval`, derives from
//! the store what this node should run and hands it to the supervisor.
//!
//! Runnable means: pending (new, resumed, retried, yielded) or running under
//! a lease that lapsed (its node died). The store's claim takes them in
//! priority order under a lease, so several nodes never claim the same
//! operation. Nothing is kept in memory that the store does not also hold:
//! a lost message or a restart costs at most one interval.

use ractor::{Actor, ActorProcessingErr, ActorRef, call_t};

use crate::config::RuntimeContext;
use crate::supervisor::SupervisorMessage;

/// The reconciler actor.
#[derive(Debug)]
pub struct Reconciler;

/// Messages of [`Reconciler`].
#[derive(Debug)]
pub enum ReconcilerMessage {
    /// Look for runnable operations now.
    Reconcile,
}

impl Actor for Reconciler {
    type Msg = ReconcilerMessage;
    type State = (RuntimeContext, ActorRef<SupervisorMessage>);
    type Arguments = (RuntimeContext, ActorRef<SupervisorMessage>);

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.send_interval(args.0.config.reconcile_interval, || {
            ReconcilerMessage::Reconcile
        });
        myself.cast(ReconcilerMessage::Reconcile)?;
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        _message: ReconcilerMessage,
        (context, supervisor): &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let running = call_t!(supervisor, SupervisorMessage::Running, 5_000)?;
        let free = context.config.concurrency.saturating_sub(running.len());
        if free == 0 {
            return Ok(());
        }
        let kinds = context.registry.kinds();
        let claimed = match context
            .store
            .claim_operations_of(
                &context.config.node,
                Some(&kinds),
                free as i64,
                context.config.lease_ttl,
            )
            .await
        {
            Ok(claimed) => claimed,
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, "reconciler could not reach the store; next interval");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        for appended in claimed {
            tracing::info!(operation = appended.record.id, "claimed");
            supervisor.cast(SupervisorMessage::Start(appended.record.id))?;
        }
        Ok(())
    }
}
