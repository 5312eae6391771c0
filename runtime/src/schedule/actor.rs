//! The scheduler: every `schedule_interval` (and at start-up) it fires the
//! schedules that are due ([`crate::schedule::fire_due`]) and resumes the
//! pauses whose end has come ([`crate::control::resume_due`]). It runs on every
//! node; the store's compare-and-set on each schedule's due time makes one
//! node fire each tick. It keeps no state of its own.

use ractor::{Actor, ActorProcessingErr, ActorRef};
use sluice_store::FireOutcome;

use super::fire_due;
use crate::context::RuntimeContext;
use crate::supervisor::SupervisorMessage;

/// The scheduler actor.
#[derive(Debug)]
pub struct Scheduler;

/// Messages of [`Scheduler`].
#[derive(Debug)]
pub enum SchedulerMessage {
    /// Fire what is due now.
    Tick,
}

impl Actor for Scheduler {
    type Msg = SchedulerMessage;
    type State = (RuntimeContext, ActorRef<SupervisorMessage>);
    type Arguments = (RuntimeContext, ActorRef<SupervisorMessage>);

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        // The first tick now; each re-arms the next once handled (not
        // `send_interval`), so a slow store never queues ticks up.
        myself.cast(SchedulerMessage::Tick)?;
        Ok(args)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        _message: SchedulerMessage,
        (context, supervisor): &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        myself.send_after(context.config.schedule_interval, || SchedulerMessage::Tick);
        match fire_due(&context.store, &context.registry).await {
            Ok(fired) if fired.iter().any(|f| f.outcome == FireOutcome::Enqueued) => {
                // Run what was just enqueued without waiting for the reconciler's interval.
                let _ = supervisor.cast(SupervisorMessage::ReconcileNow);
            }
            Ok(_) => {}
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, "scheduler could not reach the store; next tick");
            }
            Err(e) => return Err(e.into()),
        }
        match crate::control::close_windows(&context.store).await {
            Ok(closed) => {
                for (target, outcome) in &closed {
                    tracing::info!(target = %target, operations = ?outcome.changed, "run window closed: paused until it opens");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "scheduler could not close a run window; next tick");
            }
        }
        match crate::control::resume_due(&context.store).await {
            Ok(resumed) => {
                for (target, outcome) in &resumed {
                    tracing::info!(target = %target, operations = ?outcome.changed, "paused until now: resumed");
                }
                if resumed
                    .iter()
                    .any(|(_, outcome)| !outcome.changed.is_empty())
                {
                    let _ = supervisor.cast(SupervisorMessage::ReconcileNow);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "scheduler could not resume a timed pause; next tick");
            }
        }
        Ok(())
    }
}
