//! The reconciler: at start-up and every `reconcile_interval`, derives from
//! the store what this node should run and hands it to the supervisor.
//!
//! Runnable means: pending (new, resumed, retried, yielded) or running under
//! a lease that lapsed (its node died). The store's claim takes them in
//! priority order under a lease, so several nodes never claim the same
//! operation. Nothing is kept in memory that the store does not also hold:
//! a lost message or a restart costs at most one interval.
//!
//! With `parallel_batches` above 1 it also finds running operations held
//! elsewhere with batches left to claim, and has the supervisor start a
//! helper for each.

use ractor::{Actor, ActorProcessingErr, ActorRef, call_t};

use crate::context::RuntimeContext;
use crate::supervisor::SupervisorMessage;

/// The reconciler actor.
#[derive(Debug)]
pub struct Reconciler;

/// Messages of [`Reconciler`].
#[derive(Debug)]
pub enum ReconcilerMessage {
    /// Look for runnable operations now (asked for by the supervisor).
    Reconcile,
    /// The periodic look: the same, and the next one armed once this one is
    /// handled (not `send_interval`), so a slow store never queues them up
    /// (at most one waits while one runs).
    Interval,
}

impl Actor for Reconciler {
    type Msg = ReconcilerMessage;
    type State = ReconcilerState;
    type Arguments = (RuntimeContext, ActorRef<SupervisorMessage>);

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.cast(ReconcilerMessage::Interval)?;
        Ok(ReconcilerState {
            context: args.0,
            supervisor: args.1,
            counted_at: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: ReconcilerMessage,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let ReconcilerMessage::Interval = message {
            myself.send_after(state.context.config.reconcile_interval, || {
                ReconcilerMessage::Interval
            });
        }
        state.report_status_counts().await;
        let ReconcilerState {
            context,
            supervisor,
            ..
        } = state;
        let running = call_t!(supervisor, SupervisorMessage::Running, 5_000)?;
        if context.config.parallel_batches > 1 {
            help_others(context, supervisor).await?;
        }
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

/// Hands the supervisor the running operations with batches left to claim;
/// it helps with those it neither holds nor helps already.
async fn help_others(
    context: &RuntimeContext,
    supervisor: &ActorRef<SupervisorMessage>,
) -> Result<(), ActorProcessingErr> {
    let limit = i64::try_from(context.config.concurrency).unwrap_or(i64::MAX);
    let ids = match context.store.operations_with_claimable_batches(limit).await {
        Ok(ids) => ids,
        Err(e) if e.is_transient() => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if !ids.is_empty() {
        supervisor.cast(SupervisorMessage::Help(ids))?;
    }
    Ok(())
}

/// The reconciler's state.
pub struct ReconcilerState {
    context: RuntimeContext,
    supervisor: ActorRef<SupervisorMessage>,
    counted_at: Option<std::time::Instant>,
}

impl ReconcilerState {
    /// Records the `sluice.operations` gauge (operations by status) at most
    /// every ten seconds: one small query, in the reconciler's own rhythm.
    async fn report_status_counts(&mut self) {
        if self
            .counted_at
            .is_some_and(|at| at.elapsed() < std::time::Duration::from_secs(10))
        {
            return;
        }
        self.counted_at = Some(std::time::Instant::now());
        if let Ok(counts) = self.context.store.status_counts().await {
            for status in sluice_store::OperationStatus::ALL {
                let n = counts
                    .iter()
                    .find(|(s, _)| *s == status)
                    .map_or(0, |(_, n)| *n);
                self.context
                    .metrics
                    .operations(status.as_str(), n.unsigned_abs());
            }
        }
    }
}
