//! What holds an operation back or ends its run: the health signal, the
//! control tick (leases, controls written elsewhere, limits), the wind-down,
//! and a request the store refused.

use std::time::Duration;

use sluice_operations::OperationError;
use sluice_store::{Event, Health, OperationStatus, Projection, StoreError};

use super::driver::{Driver, Now, Procedure, Settings, TickStage};
use super::phase::{Phase, Role, Stopping};
use super::protocol::Command;
use super::trace::Note;
use crate::health::Signal;

impl Driver {
    /// A changed health signal: obeyed at once (no sub-batch starts under a
    /// stop), recorded by the owner, and a lifted stop resumes the steps.
    pub(super) fn health(&mut self, signal: Signal, out: &mut Vec<Command>, now: Now) {
        if matches!(self.phase, Phase::AwaitingHealth) {
            self.signal = signal;
            self.phase = Phase::Idle;
            return self.schedule_step(out, Duration::ZERO);
        }
        if signal == self.signal {
            return;
        }
        let was_stopped = self.is_stop();
        self.signal = signal;
        // A new pace from here: a throttle's window starts afresh (no
        // catching up on a stop's lost time); the unthrottled pace is
        // measured afresh once unthrottled again (the time held back is no
        // part of it), and kept through throttles as their baseline.
        self.throttled = None;
        if !matches!(self.signal, Signal::Throttle { .. }) {
            self.unthrottled = None;
        }
        // Obeyed from here on: say so before the record (which, on SQLite,
        // waits for a sub-batch in flight to commit).
        out.push(Command::Report);
        self.begin(Procedure::Health { was_stopped }, out, now);
    }

    pub(super) fn record_health_change(&mut self, was_stopped: bool, out: &mut Vec<Command>) {
        if let Some(event) = self.health_to_record() {
            return self.record(out, event);
        }
        if was_stopped && !self.in_flight() {
            self.schedule_step(out, Duration::ZERO);
        }
    }

    /// `throttled`, when the signal obeyed differs from the one last
    /// recorded (the owner's job: a helper obeys without recording).
    pub(super) fn health_to_record(&self) -> Option<Event> {
        if !self.is_owner() || self.projection.status != OperationStatus::Running {
            return None;
        }
        let (health, reason) = match &self.signal {
            Signal::Normal => (Health::Normal, None),
            Signal::Throttle { percent, reason } => (
                Health::Throttled {
                    percent: (*percent).clamp(1, 99),
                },
                Some(reason.clone()),
            ),
            Signal::Stop { reason } => (Health::Stopped, Some(reason.clone())),
        };
        (health != self.projection.health).then_some(Event::Throttled { health, reason })
    }

    /// The control tick: renews leases, notices controls written elsewhere
    /// and limits, gives up on a sub-batch whose worker was lost, and
    /// refills the batches planned ahead for helpers.
    pub(super) fn tick(&mut self, stage: TickStage, out: &mut Vec<Command>, now: Now) {
        match stage {
            TickStage::Renew => {
                let due = now.at.saturating_duration_since(self.last_renewal)
                    >= self.settings.lease_ttl / 3;
                self.procedure = Procedure::Tick(TickStage::Control);
                match (&self.role, due) {
                    (Role::Owner { lease }, true) => {
                        let lease = lease.clone();
                        self.procedure = Procedure::Tick(TickStage::Renew);
                        self.request(out, Command::RenewLease(lease));
                    }
                    (Role::Helper { .. }, true) => {
                        self.renew_batch_lease(out, now);
                        self.request(out, Command::Reload);
                    }
                    (_, false) => self.request(out, Command::Reload),
                }
            }
            TickStage::Control => self.request(out, Command::Reload),
            TickStage::Settings => {
                let statistics = self.is_owner() && self.settings.plan_check.is_some();
                self.request(out, Command::ReadSettings { statistics });
            }
            TickStage::Ahead => {
                if self.stopping.is_none() && self.plans_ahead() && self.may_plan_ahead(now) {
                    let plan = self.next_plan(self.projection.batch_size);
                    self.request(out, Command::PlanAhead(plan));
                }
            }
        }
    }

    pub(super) fn renew_batch_lease(&mut self, out: &mut Vec<Command>, now: Now) {
        if let Some(batch) = self.batch() {
            out.push(Command::RenewBatchLease(batch.lease.clone()));
        }
        self.last_renewal = now.at;
    }

    /// What the operation's row, read by a tick, tells: a pause or cancel
    /// written elsewhere, a takeover, a run limit, a lost worker.
    pub(super) fn controls(&mut self, state: Projection, holder: Option<i64>, now: Now) {
        let ours = match &self.role {
            Role::Owner { lease } => holder == Some(lease.epoch),
            // A helper works for whoever holds the operation.
            Role::Helper { .. } => true,
        };
        if state.status != OperationStatus::Running || !ours {
            // A pause or cancel releases the lease too: the status says why.
            let why = if state.status != OperationStatus::Running {
                state.status.as_str().to_owned()
            } else {
                "taken over".to_owned()
            };
            self.stopping.get_or_insert(Stopping::Released(why));
        }
        if self.is_owner()
            && let Some(reason) = self.limit_reached(now)
        {
            self.stopping.get_or_insert(Stopping::Yield(reason));
        }
        // A pool that lost a job (it was replaced) never answers: give up on
        // the sub-batch; its transaction is gone with its worker.
        if let Phase::Running {
            in_flight: Some(started),
            ..
        } = self.phase
            && now.at.saturating_duration_since(started)
                > self.settings.sub_batch_timeout + self.settings.lease_ttl
        {
            self.phase = Phase::Idle;
            self.leftovers_possible = true;
        }
        if self.stopping.is_none() && self.plans_ahead() {
            // Refill what helpers took, from the row just read.
            self.projection = state;
        }
        let reread_due =
            now.at.saturating_duration_since(self.settings_read_at) >= Settings::REREAD;
        self.procedure = if self.stopping.is_none() && reread_due {
            Procedure::Tick(TickStage::Settings)
        } else {
            self.after_tick_reads()
        };
    }

    /// What the tick read: a rate limit applies now or not (obeyed from the
    /// next sub-batch), and the target's statistics version (a change makes
    /// the plan-drift guard look again before the next batch).
    pub(super) fn settings_read(&mut self, limited: bool, statistics: Option<String>, now: Now) {
        if self.is_owner() && self.settings.plan_check.is_some() {
            self.plan_watch.statistics_read(statistics);
        }
        self.settings.rate_limited = limited;
        self.settings_read_at = now.at;
        if !limited {
            self.rate_binding = None;
            self.rows_taken = None;
        }
        self.procedure = self.after_tick_reads();
    }

    /// The tick's last stage once it has read what it reads: refilling the
    /// batches planned ahead for helpers, if this actor plans ahead.
    fn after_tick_reads(&self) -> Procedure {
        if self.stopping.is_none() && self.plans_ahead() {
            Procedure::Tick(TickStage::Ahead)
        } else {
            Procedure::None
        }
    }

    /// Begins winding down once a stop is asked for and no sub-batch is in
    /// flight: the batch given back, a decided failure recorded, and the
    /// operation yielded when a limit or a shutdown stopped it.
    pub(super) fn wind_down_if_due(&mut self, out: &mut Vec<Command>) {
        if self.stopping.is_none()
            || self.in_flight()
            || matches!(self.phase, Phase::WindingDown | Phase::Stopped)
        {
            return;
        }
        let phase = std::mem::replace(&mut self.phase, Phase::WindingDown);
        self.procedure = Procedure::WindDown;
        let failing = match phase {
            Phase::Running { batch, .. } | Phase::Ending { batch, .. } => {
                out.push(Command::ReleaseBatch(batch.lease));
                None
            }
            Phase::Failing { error } => Some(error),
            _ => None,
        };
        out.push(Command::Trace(Note::Stopping {
            why: self.stopping.clone(),
        }));
        let event = match (failing, self.stopping.clone()) {
            // A failure decided but not recorded goes in first: the
            // operation must not be given back as runnable.
            (Some(error), _) => Some(Event::Failed { error }),
            // A helper gives back its batch only.
            _ if !self.is_owner() => None,
            (None, Some(Stopping::Shutdown)) => Some(Event::Yielded {
                reason: "node shutting down".into(),
            }),
            (None, Some(Stopping::Yield(reason))) => Some(Event::Yielded { reason }),
            _ => None,
        };
        match event {
            Some(event) => self.record(out, event),
            None => self.stopped(out),
        }
    }

    pub(super) fn stopped(&mut self, out: &mut Vec<Command>) {
        self.phase = Phase::Stopped;
        self.procedure = Procedure::None;
        out.push(Command::Stop);
    }

    /// A request failed. Transient trouble is retried after a backoff, a
    /// batch taken over is let go, a lost lease stops the actor; anything
    /// else fails the actor so its supervisor restarts it from the store.
    /// A batch's outcome or a decided failure stays to be recorded by the
    /// next step; a batch being opened is looked for afresh.
    pub(super) fn request_failed(
        &mut self,
        error: OperationError,
        out: &mut Vec<Command>,
        now: Now,
    ) {
        if self.procedure == Procedure::WindDown {
            out.push(Command::Trace(Note::WindDownTrouble {
                error: error.to_string(),
            }));
            return self.stopped(out);
        }
        self.procedure = Procedure::None;
        // A sub-batch in flight stays so: what failed was a tick's or a
        // health change's request beside it, and a second sub-batch sent
        // now would start where it started.
        if let Phase::Opening(_) = self.phase {
            self.phase = Phase::Idle;
        }
        let store_error = match error {
            OperationError::Store(e) => e,
            other => return out.push(Command::Crash(other)),
        };
        match store_error {
            StoreError::LeaseLost { .. } => {
                self.stopping
                    .get_or_insert(Stopping::Released("lease lost".into()));
            }
            StoreError::BatchLeaseLost { .. } => {
                if self.batch().is_some() {
                    self.phase = Phase::Idle;
                }
                self.leftovers_possible = true;
                self.schedule_step(out, Duration::ZERO);
            }
            e if e.is_transient() => {
                out.push(Command::Trace(Note::DatabaseTrouble {
                    error: e.to_string(),
                }));
                let wait = self.backoff(2, now);
                self.schedule_step(out, wait);
            }
            other => out.push(Command::Crash(other.into())),
        }
    }
}
