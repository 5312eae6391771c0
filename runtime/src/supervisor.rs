//! The runtime supervisor: the root of the actor tree.
//!
//! It starts the [`HealthMonitor`], the [`SubBatchPool`], the
//! [`Reconciler`] and the [`Scheduler`], and one [`OperationActor`] per operation the reconciler
//! claimed. It restarts what fails: the monitor, pool, reconciler and scheduler always;
//! an operation actor from the store's state, up to `restart_budget` times
//! within `restart_window`, after which the operation is failed with the
//! reason (and no other operation is touched). With
//! `parallel_batches` above 1 it also runs helper operation actors for
//! operations held by other nodes that have batches planned ahead; a helper
//! that fails is not restarted (the reconciler starts a new one while there
//! is work to help with).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use sluice_operations::OperationError;
use sluice_store::{Announced, Event, Expected, Health, OperationStatus, StoreError};

use crate::context::{RuntimeContext, Services};
use crate::health::HealthIndicator;
use crate::health::{HealthMessage, HealthMonitor, HealthMonitorArgs};
use crate::operation::{OperationActor, OperationArgs, OperationMessage};
use crate::pool::{PoolArgs, RunningPool, SubBatchPool, SubBatchQueue};
use crate::reconciler::{Reconciler, ReconcilerMessage};
use crate::schedule::{Scheduler, SchedulerMessage};

mod services;

pub use services::Service;
use services::{spawn_monitor, spawn_pool, spawn_reconciler, spawn_scheduler};

/// The supervisor actor.
#[derive(Debug)]
pub struct RuntimeSupervisor;

/// Arguments of [`RuntimeSupervisor`].
pub struct SupervisorArgs {
    /// The shared context.
    pub context: RuntimeContext,
    /// Health indicators for the monitor.
    pub indicators: Vec<std::sync::Arc<dyn HealthIndicator>>,
}

/// Messages of [`RuntimeSupervisor`].
pub enum SupervisorMessage {
    /// Run this operation, which this node has just claimed.
    Start(i64),
    /// Help with these operations' planned batches (those already helped
    /// or held here are skipped).
    Help(Vec<i64>),
    /// Which operations have an actor here.
    Running(RpcReplyPort<Vec<i64>>),
    /// Look for runnable operations now rather than at the next interval
    /// (an operation was just enqueued here, or a slot was freed).
    ReconcileNow,
    /// An operator control changed these operations (announced by the
    /// store): their actors here look now, and a resumed one is claimed.
    Controlled(Announced),
    /// Stop claiming, let every operation actor finish its sub-batch in
    /// flight and give its operation back, then stop; reply when done.
    Shutdown(RpcReplyPort<()>),
    /// Start this service again, its backoff after dying waited out.
    Restart(Service),
    /// This service, started as the actor named, has run long enough after
    /// a restart to count as recovered.
    Steady(Service, ActorId),
}

/// The first wait before a dead service is started again; it doubles with
/// each death in a row, up to [`SERVICE_RESTART_CAP`], with jitter.
const SERVICE_RESTART_BASE: Duration = Duration::from_millis(100);

/// The longest wait before a dead service is started again.
const SERVICE_RESTART_CAP: Duration = Duration::from_secs(30);

/// How long a restarted service must run to count as recovered (its
/// deaths in a row forgotten, its recovery logged).
const SERVICE_STEADY_AFTER: Duration = Duration::from_secs(5);

/// The supervisor's state.
pub struct SupervisorState {
    context: RuntimeContext,
    indicators: Vec<std::sync::Arc<dyn HealthIndicator>>,
    monitor: ActorRef<HealthMessage>,
    pool: RunningPool,
    reconciler: Option<ActorRef<ReconcilerMessage>>,
    scheduler: Option<ActorRef<SchedulerMessage>>,
    operations: HashMap<ActorId, (i64, ActorRef<OperationMessage>)>,
    helpers: HashMap<ActorId, (i64, ActorRef<OperationMessage>)>,
    restarts: HashMap<i64, VecDeque<Instant>>,
    /// Store faults in a row per operation ([`SupervisorState::wait_out_store_fault`]).
    store_faults: HashMap<i64, u32>,
    /// Deaths in a row per service ([`SupervisorState::restart_later`]).
    service_deaths: HashMap<Service, u32>,
    shutdown: Option<Vec<RpcReplyPort<()>>>,
    /// The task listening for announced controls (PostgreSQL).
    listener: Option<tokio::task::JoinHandle<()>>,
    /// The reconciler and scheduler asked to stop at shutdown, until they
    /// have: the supervisor must not stop before them (stopping kills the
    /// children still running, which could cut a database call short).
    draining: Vec<ActorId>,
}

impl Actor for RuntimeSupervisor {
    type Msg = SupervisorMessage;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let monitor = spawn_monitor(&myself, &args.context, &args.indicators).await?;
        let pool = spawn_pool(&myself, &args.context).await?;
        publish(&args.context, &pool, &monitor);
        let reconciler = spawn_reconciler(&myself, &args.context).await?;
        let scheduler = spawn_scheduler(&myself, &args.context).await?;
        let listener = args
            .context
            .config
            .announced_controls
            .then(|| crate::announce::spawn_listener(&args.context.store, myself.clone()))
            .flatten();
        Ok(SupervisorState {
            listener,
            context: args.context,
            indicators: args.indicators,
            monitor,
            pool,
            reconciler: Some(reconciler),
            scheduler: Some(scheduler),
            operations: HashMap::new(),
            helpers: HashMap::new(),
            restarts: HashMap::new(),
            store_faults: HashMap::new(),
            service_deaths: HashMap::new(),
            shutdown: None,
            draining: Vec::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: SupervisorMessage,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMessage::Start(id) => {
                state.start_operation(&myself, id).await;
                if state.shutdown.is_some() {
                    // Claimed just as the node began shutting down: its
                    // actor gives it straight back (`yielded`) rather than
                    // leaving it under a lease until that lapses.
                    state.shut_down_operations();
                }
            }
            SupervisorMessage::Help(ids) if state.shutdown.is_none() => {
                state.start_helpers(&myself, ids).await;
            }
            SupervisorMessage::Help(_) => {}
            SupervisorMessage::Running(reply) => {
                let _ = reply.send(state.operations.values().map(|(id, _)| *id).collect());
            }
            SupervisorMessage::ReconcileNow => state.reconcile_now(),
            SupervisorMessage::Controlled(announced) => {
                for (id, actor) in state.operations.values().chain(state.helpers.values()) {
                    if announced == Announced::All
                        || matches!(&announced, Announced::Operations(ids) if ids.contains(id))
                    {
                        let _ = actor.cast(OperationMessage::Controlled);
                    }
                }
                state.reconcile_now();
            }
            SupervisorMessage::Restart(service) if state.shutdown.is_none() => {
                state.restart(&myself, service).await;
            }
            SupervisorMessage::Restart(_) => {}
            SupervisorMessage::Steady(service, started) => {
                let current = match service {
                    Service::Reconciler => state.reconciler.as_ref().map(|a| a.get_id()),
                    Service::Scheduler => state.scheduler.as_ref().map(|a| a.get_id()),
                };
                if current == Some(started)
                    && let Some(deaths) = state.service_deaths.remove(&service)
                {
                    tracing::info!(service = service.name(), deaths, "running again");
                }
            }
            SupervisorMessage::Shutdown(reply) => {
                if let Some(reconciler) = state.reconciler.take() {
                    reconciler.stop(Some("shutdown".into()));
                    state.draining.push(reconciler.get_id());
                }
                if let Some(scheduler) = state.scheduler.take() {
                    scheduler.stop(Some("shutdown".into()));
                    state.draining.push(scheduler.get_id());
                }
                state.shut_down_operations();
                state.shutdown.get_or_insert_with(Vec::new).push(reply);
                state.finish_shutdown_if_done(&myself).await;
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(listener) = state.listener.take() {
            listener.abort();
        }
        // The monitors of targets apart from the store are no one's children.
        state.context.targets.stop().await;
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _)
                if state.helpers.remove(&cell.get_id()).is_some() =>
            {
                state.finish_shutdown_if_done(&myself).await;
            }
            SupervisionEvent::ActorFailed(cell, error)
                if state.helpers.remove(&cell.get_id()).is_some() =>
            {
                tracing::warn!(error = %error, "helper actor failed");
                state.finish_shutdown_if_done(&myself).await;
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                state.draining.retain(|id| *id != cell.get_id());
                let freed = state.operations.remove(&cell.get_id());
                if let Some((id, _)) = &freed {
                    state.store_faults.remove(id);
                }
                let freed = freed.is_some();
                if state.shutdown.is_none() {
                    state.replace_service(&myself, &cell, "stopped").await?;
                    if freed {
                        state.reconcile_now();
                    }
                }
                state.finish_shutdown_if_done(&myself).await;
            }
            SupervisionEvent::ActorFailed(cell, error) => {
                state.draining.retain(|id| *id != cell.get_id());
                let reason = error.to_string();
                if let Some((id, _)) = state.operations.remove(&cell.get_id()) {
                    if store_unavailable(error.as_ref()) {
                        state.wait_out_store_fault(&myself, id, &reason);
                    } else {
                        state.operation_failed(&myself, id, &reason).await;
                    }
                } else if state.shutdown.is_none() {
                    state.replace_service(&myself, &cell, &reason).await?;
                }
                state.finish_shutdown_if_done(&myself).await;
            }
            _ => {}
        }
        Ok(())
    }
}

impl SupervisorState {
    /// Starts an actor for operation `id`. A start that fails (its
    /// `pre_start` returned an error or panicked) counts against the restart
    /// budget like a crash of a running actor.
    async fn start_operation(&mut self, myself: &ActorRef<SupervisorMessage>, id: i64) {
        if self.operations.values().any(|(running, _)| *running == id) {
            return;
        }
        loop {
            match self.spawn_operation_actor(myself, id, false).await {
                Ok(actor) => {
                    self.operations.insert(actor.get_id(), (id, actor));
                    return;
                }
                Err(ractor::SpawnErr::StartupFailed(e)) if store_unavailable(e.as_ref()) => {
                    let reason = format!("it did not start: {e}");
                    self.note_unreachable(id, &e.to_string()).await;
                    self.wait_out_store_fault(myself, id, &reason);
                    return;
                }
                Err(e) => {
                    let reason = format!("it did not start: {e}");
                    if !self.within_restart_budget(id, &reason).await {
                        return;
                    }
                }
            }
        }
    }

    /// Spawns an operation actor for `id` under this supervisor: its owner
    /// (`helper` false, this node holds the operation) or a helper.
    async fn spawn_operation_actor(
        &self,
        myself: &ActorRef<SupervisorMessage>,
        id: i64,
        helper: bool,
    ) -> Result<ActorRef<OperationMessage>, ractor::SpawnErr> {
        let args = OperationArgs {
            context: self.context.clone(),
            operation_id: id,
            helper,
        };
        let (actor, _) = Actor::spawn_linked(None, OperationActor, args, myself.get_cell()).await?;
        Ok(actor)
    }

    /// Starts a helper for each of `ids` not already helped or held here,
    /// up to `concurrency` helpers. A helper that cannot start (the
    /// operation ended meanwhile, or its kind is unknown here) is skipped.
    async fn start_helpers(&mut self, myself: &ActorRef<SupervisorMessage>, ids: Vec<i64>) {
        for id in ids {
            if self.helpers.len() >= self.context.config.concurrency {
                return;
            }
            let known = self.helpers.values().chain(self.operations.values());
            if known
                .map(|(running, _)| *running)
                .any(|running| running == id)
            {
                continue;
            }
            match self.spawn_operation_actor(myself, id, true).await {
                Ok(actor) => {
                    tracing::debug!(operation = id, "helping");
                    self.helpers.insert(actor.get_id(), (id, actor));
                }
                Err(e) => tracing::debug!(operation = id, error = %e, "cannot help"),
            }
        }
    }

    /// Operation `id`'s actor failed because the store could not be
    /// reached or written: not the operation's fault, so it does not count
    /// against the restart budget. The actor is started again after a
    /// backoff that grows with each fault in a row (logged each time); if
    /// the operation's lease lapses meanwhile, the reconciler (here or on
    /// another node) claims it when the store is back.
    fn wait_out_store_fault(
        &mut self,
        myself: &ActorRef<SupervisorMessage>,
        id: i64,
        reason: &str,
    ) {
        if self.shutdown.is_some() {
            return;
        }
        let config = &self.context.config;
        let faults = self.store_faults.entry(id).or_default();
        *faults = faults.saturating_add(1);
        let wait = crate::sizing::backoff(*faults, config.retry_base, config.retry_cap, 1.0);
        if *faults == 1 {
            tracing::warn!(operation = id, ?wait, %reason, "the store cannot be used; retrying the operation with a growing backoff");
        } else {
            tracing::debug!(operation = id, faults = *faults, ?wait, %reason, "the store still cannot be used");
        }
        myself.send_after(wait, move || SupervisorMessage::Start(id));
    }

    /// Operation `id` could not start because a database could not be
    /// reached: when the store still answers (so it is the operation's
    /// target apart from it that does not) and this node holds it, its
    /// health is recorded as stopped with `error` as the reason, once, so
    /// `show` and `list` say why it waits. Its next start records its
    /// health again.
    async fn note_unreachable(&self, id: i64, error: &str) {
        let store = &self.context.store;
        let Ok(record) = store.operation(id).await else {
            return;
        };
        let held = record
            .lease
            .as_ref()
            .filter(|lease| lease.node == self.context.config.node);
        if record.state.target.is_none() || held.is_none() || record.state.health == Health::Stopped
        {
            return;
        }
        let stopped = Event::Throttled {
            health: Health::Stopped,
            reason: Some(format!("{UNREACHABLE}: {error}")),
        };
        let _ = store.append(id, Expected::Any, held, &[stopped]).await;
    }

    /// An operation actor failed: restart it from the store within the
    /// budget, else fail the operation with the reason.
    async fn operation_failed(
        &mut self,
        myself: &ActorRef<SupervisorMessage>,
        id: i64,
        reason: &str,
    ) {
        if self.within_restart_budget(id, reason).await {
            self.start_operation(myself, id).await;
        }
    }

    /// Counts a failure of operation `id`'s actor. True when it may be
    /// started again; past `restart_budget` failures within
    /// `restart_window` (or while shutting down) false, and past the budget
    /// the operation is failed with the reason if this node still holds it.
    async fn within_restart_budget(&mut self, id: i64, reason: &str) -> bool {
        let config = &self.context.config;
        let window = self.restarts.entry(id).or_default();
        let now = Instant::now();
        window.retain(|at| now.duration_since(*at) < config.restart_window);
        window.push_back(now);
        let restarts = window.len();
        if self.shutdown.is_some() {
            return false;
        }
        let store = &self.context.store;
        let held = match store.operation(id).await {
            Ok(record) if record.state.status == OperationStatus::Running => {
                record.lease.filter(|l| l.node == config.node)
            }
            _ => None,
        };
        let Some(lease) = held else {
            // Ended, paused or taken over meanwhile: nothing to restart.
            tracing::warn!(operation = id, %reason, "operation actor failed; the operation is no longer held here");
            return false;
        };
        if restarts as u32 <= config.restart_budget {
            tracing::warn!(operation = id, restarts, %reason, "operation actor failed; restarting it");
            return true;
        }
        tracing::error!(operation = id, restarts, %reason, "operation actor keeps failing; failing the operation");
        let failed = Event::Failed {
            error: format!(
                "the operation's actor failed {restarts} times within {:?}; last: {reason}",
                config.restart_window
            ),
        };
        if let Err(e) = store
            .append(id, Expected::Any, Some(&lease), &[failed])
            .await
        {
            tracing::warn!(operation = id, error = %e, "could not record the failure");
        }
        self.restarts.remove(&id);
        false
    }

    fn reconcile_now(&self) {
        if let Some(reconciler) = &self.reconciler {
            let _ = reconciler.cast(ReconcilerMessage::Reconcile);
        }
    }

    /// Tells every operation actor to wind down and give its operation back.
    fn shut_down_operations(&self) {
        for (_, actor) in self.operations.values().chain(self.helpers.values()) {
            let _ = actor.cast(OperationMessage::Shutdown);
        }
    }

    /// Once every operation actor has wound down and the reconciler and
    /// scheduler have stopped: stops the other children and waits for them
    /// before answering the shutdown and stopping. Nothing is killed: a
    /// child killed in the middle of a database call (a `BEGIN` in flight)
    /// leaves its pooled connection inside a transaction that nothing rolls
    /// back (sqlx 0.9 counts the transaction only once `BEGIN` is answered),
    /// and the next borrower's statements would run in it, holding its locks
    /// and never committing.
    async fn finish_shutdown_if_done(&mut self, myself: &ActorRef<SupervisorMessage>) {
        if self.operations.is_empty()
            && self.helpers.is_empty()
            && self.draining.is_empty()
            && let Some(waiters) = self.shutdown.as_mut()
            && !waiters.is_empty()
        {
            let waiters = std::mem::take(waiters);
            let patience = self.context.config.sub_batch_timeout + Duration::from_secs(5);
            myself
                .stop_children_and_wait(Some("shutdown".into()), Some(patience))
                .await;
            for waiter in waiters {
                let _ = waiter.send(());
            }
            myself.stop(None);
        }
    }
}

fn publish(context: &RuntimeContext, pool: &RunningPool, monitor: &ActorRef<HealthMessage>) {
    if let Ok(mut services) = context.services.write() {
        *services = Some(Services {
            pool: pool.clone(),
            monitor: monitor.clone(),
        });
    }
}

/// How a stop recorded because an operation's target could not be reached
/// begins (the supervisor's `note_unreachable`).
pub const UNREACHABLE: &str = "its target cannot be reached";

/// True when `error` (an actor's failure) is, or wraps, a store error that
/// says the store cannot be used for now ([`StoreError::is_unavailable`]).
fn store_unavailable(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(e) = error.downcast_ref::<StoreError>() {
            return e.is_unavailable();
        }
        if let Some(e) = error.downcast_ref::<OperationError>() {
            return e.is_unavailable();
        }
        next = error.source();
    }
    false
}
