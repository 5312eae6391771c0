//! The supervisor's services: the health monitor, the sub-batch pool, the
//! reconciler and the scheduler, each spawned linked to the supervisor and
//! replaced when it dies (at once, or after a backoff with jitter).

use super::*;

/// A service the supervisor restarts after a backoff when it dies: each
/// talks to the store on its own schedule, and one that dies at once again
/// (a store refusing writes, its tables gone) must not be restarted, and
/// logged, hundreds of times a second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// The [`crate::reconciler::Reconciler`].
    Reconciler,
    /// The [`crate::schedule::Scheduler`].
    Scheduler,
}

impl Service {
    /// Its name in logs.
    pub(super) fn name(self) -> &'static str {
        match self {
            Service::Reconciler => "reconciler",
            Service::Scheduler => "scheduler",
        }
    }
}

impl SupervisorState {
    /// A service died: the monitor and the pool are started again at once
    /// (they catch their own database errors), the reconciler and scheduler
    /// after a backoff ([`SupervisorState::restart_later`]).
    pub(super) async fn replace_service(
        &mut self,
        myself: &ActorRef<SupervisorMessage>,
        cell: &ActorCell,
        reason: &str,
    ) -> Result<(), ActorProcessingErr> {
        let id = cell.get_id();
        if id == self.monitor.get_id() {
            tracing::warn!(%reason, "health monitor died; restarting it");
            self.monitor = spawn_monitor(myself, &self.context, &self.indicators).await?;
            publish(&self.context, &self.pool, &self.monitor);
        } else if id == self.pool.actor.get_id() {
            tracing::warn!(%reason, "sub-batch pool died; restarting it");
            self.pool = spawn_pool(myself, &self.context).await?;
            publish(&self.context, &self.pool, &self.monitor);
        } else if self.reconciler.as_ref().is_some_and(|r| r.get_id() == id) {
            self.reconciler = None;
            self.restart_later(myself, Service::Reconciler, reason);
        } else if self.scheduler.as_ref().is_some_and(|r| r.get_id() == id) {
            self.scheduler = None;
            self.restart_later(myself, Service::Scheduler, reason);
        }
        Ok(())
    }

    /// `service` died: starts it again after a backoff that doubles with
    /// each death in a row (capped, with jitter). Logged once when it
    /// starts dying, and again once it runs steadily (not at every death).
    pub(super) fn restart_later(
        &mut self,
        myself: &ActorRef<SupervisorMessage>,
        service: Service,
        reason: &str,
    ) {
        let deaths = self.service_deaths.entry(service).or_default();
        *deaths = deaths.saturating_add(1);
        let wait =
            crate::sizing::backoff(*deaths, SERVICE_RESTART_BASE, SERVICE_RESTART_CAP, jitter());
        if *deaths == 1 {
            tracing::warn!(service = service.name(), %reason, "died; restarting it with a growing backoff until it runs again");
        } else {
            tracing::debug!(service = service.name(), deaths = *deaths, ?wait, %reason, "died again");
        }
        myself.send_after(wait, move || SupervisorMessage::Restart(service));
    }

    /// Starts `service` again (after [`SupervisorState::restart_later`]);
    /// a start that fails waits a longer backoff.
    pub(super) async fn restart(&mut self, myself: &ActorRef<SupervisorMessage>, service: Service) {
        let started = match service {
            Service::Reconciler => spawn_reconciler(myself, &self.context).await.map(|actor| {
                let id = actor.get_id();
                self.reconciler = Some(actor);
                id
            }),
            Service::Scheduler => spawn_scheduler(myself, &self.context).await.map(|actor| {
                let id = actor.get_id();
                self.scheduler = Some(actor);
                id
            }),
        };
        match started {
            Ok(id) => {
                myself.send_after(SERVICE_STEADY_AFTER, move || {
                    SupervisorMessage::Steady(service, id)
                });
            }
            Err(error) => self.restart_later(myself, service, &error.to_string()),
        }
    }
}

/// A number in [0, 1) from the clock's nanoseconds: enough to spread the
/// restarts of many workers.
pub(super) fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1_000) / 1_000.0
}

pub(super) async fn spawn_monitor(
    supervisor: &ActorRef<SupervisorMessage>,
    context: &RuntimeContext,
    indicators: &[std::sync::Arc<dyn HealthIndicator>],
) -> Result<ActorRef<HealthMessage>, ActorProcessingErr> {
    let args = HealthMonitorArgs {
        store: context.store.clone(),
        indicators: indicators.to_vec(),
        interval: context.config.health_interval,
        clear_after: context.config.health_clear_after,
        port: context.health.clone(),
    };
    Ok(
        Actor::spawn_linked(None, HealthMonitor, args, supervisor.get_cell())
            .await?
            .0,
    )
}

pub(super) async fn spawn_pool(
    supervisor: &ActorRef<SupervisorMessage>,
    context: &RuntimeContext,
) -> Result<RunningPool, ActorProcessingErr> {
    let queue = SubBatchQueue::new(context.config.pool_size);
    let args = PoolArgs {
        store: context.store.clone(),
        queue: queue.clone(),
    };
    let (actor, _) = Actor::spawn_linked(None, SubBatchPool, args, supervisor.get_cell()).await?;
    Ok(RunningPool { actor, queue })
}

pub(super) async fn spawn_reconciler(
    supervisor: &ActorRef<SupervisorMessage>,
    context: &RuntimeContext,
) -> Result<ActorRef<ReconcilerMessage>, ActorProcessingErr> {
    let args = (context.clone(), supervisor.clone());
    Ok(
        Actor::spawn_linked(None, Reconciler, args, supervisor.get_cell())
            .await?
            .0,
    )
}

pub(super) async fn spawn_scheduler(
    supervisor: &ActorRef<SupervisorMessage>,
    context: &RuntimeContext,
) -> Result<ActorRef<SchedulerMessage>, ActorProcessingErr> {
    let args = (context.clone(), supervisor.clone());
    Ok(
        Actor::spawn_linked(None, Scheduler, args, supervisor.get_cell())
            .await?
            .0,
    )
}
