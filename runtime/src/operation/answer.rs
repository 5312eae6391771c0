//! How the driver takes the store's answers: what each one changes, before
//! the procedure that asked resumes.

use std::time::Duration;

use sluice_store::{Event, Projection};

use super::driver::{Driver, Now, Procedure, TickStage};
use super::phase::{Ending, Finish, Phase, Role, Stopping};
use super::plan_watch::{PlanVerdict, drift_error};
use super::protocol::{Answer, Command};
use super::trace::Note;
use crate::health::Signal;

impl Driver {
    /// Takes `answer` into the driver's state.
    pub(super) fn absorb(&mut self, answer: Answer, out: &mut Vec<Command>, now: Now) {
        match answer {
            Answer::Appended { event, state } => self.appended(event, state, out),
            Answer::Reloaded { state, holder } => match self.procedure {
                Procedure::Tick(_) => self.controls(state, holder, now),
                _ => self.reloaded(state, out),
            },
            Answer::Claimed(claimed) => self.claimed(claimed, out, now),
            Answer::PlannedAhead(Some(state)) => {
                self.projection = state;
                self.transitioned(out, &["batch_planned"]);
                if let Phase::Opening(opening) = &mut self.phase
                    && opening.ahead_done
                {
                    // Planned by the step for itself: claim it (another
                    // node's worker may take it first).
                    opening.planned = true;
                    self.leftovers_possible = true;
                }
            }
            Answer::PlannedAhead(None) | Answer::PlannedClaimed(None) => {
                self.scope_exhausted = true;
            }
            Answer::PlannedClaimed(Some((batch, state))) => {
                self.projection = state;
                self.transitioned(out, &["batch_planned"]);
                self.phase = Phase::Running {
                    batch,
                    in_flight: None,
                };
            }
            Answer::Completed { state, next } => {
                if let Some(batch) = self.batch() {
                    out.push(Command::Trace(Note::BatchClosed {
                        busy: batch.busy,
                        batch_size: state.batch_size,
                    }));
                }
                self.projection = state;
                self.transitioned(out, &["batch_succeeded"]);
                self.phase = match next {
                    Some(batch) => {
                        self.transitioned(out, &["batch_planned"]);
                        Phase::Running {
                            batch,
                            in_flight: None,
                        }
                    }
                    None => Phase::Idle,
                };
            }
            Answer::BatchFailed(state) => {
                let wait = self.let_go_of_failed_batch(state, &["batch_failed"], out, now);
                self.retry_or_fail(wait, out);
            }
            Answer::BatchSplit(Some(state)) => {
                if let Some(batch) = self.batch() {
                    out.push(Command::Trace(Note::BatchSplit {
                        ordinal: batch.lease.ordinal,
                        attempt: batch.lease.attempt,
                    }));
                }
                let events = &["batch_failed", "batch_split"];
                let wait = self.let_go_of_failed_batch(state, events, out, now);
                self.schedule_step(out, wait);
            }
            Answer::BatchSplit(None) => {
                if let Phase::Ending {
                    ending: Ending::Failed { uncut, .. },
                    ..
                } = &mut self.phase
                {
                    *uncut = true;
                }
            }
            Answer::OperationFailed { state, by_this } => {
                let events: &'static [&'static str] = if by_this {
                    &["batch_failed", "failed"]
                } else {
                    &["batch_failed"]
                };
                let wait = self.let_go_of_failed_batch(state, events, out, now);
                if self.projection.status == sluice_store::OperationStatus::Failed {
                    // By this batch, or already by another node's.
                    self.operation_failed(out);
                } else {
                    // Paused or cancelled meanwhile: the next step or tick
                    // finds out.
                    self.schedule_step(out, wait);
                }
            }
            Answer::Renewed(lease) => {
                self.role = Role::Owner { lease };
                self.renew_batch_lease(out, now);
                self.procedure = Procedure::Tick(TickStage::Control);
            }
            Answer::RowsTaken(taken) => {
                self.rows_taken = Some(now.at + taken.wait);
                self.rate_binding = taken.binding;
            }
            Answer::PlanChecked { full_scan, plan } => {
                self.plan_checked(full_scan, &plan, out, now)
            }
            Answer::SettingsRead {
                rate_limited,
                statistics,
            } => self.settings_read(rate_limited, statistics, now),
            Answer::Submitted(true) => {}
            Answer::Submitted(false) => {
                // The pool is being replaced: try again shortly.
                if let Phase::Running { in_flight, .. } = &mut self.phase {
                    *in_flight = None;
                }
                self.procedure = Procedure::None;
                self.schedule_step(out, self.settings.retry_base);
            }
        }
    }

    /// An event is recorded under this actor's lease.
    pub(super) fn appended(&mut self, event: Event, state: Projection, out: &mut Vec<Command>) {
        self.projection = state;
        match &event {
            Event::Throttled { health, reason } => {
                let percent = match self.signal {
                    Signal::Stop { .. } => 0,
                    _ => self.percent(),
                };
                out.push(Command::Trace(Note::HealthRecorded {
                    health: *health,
                    reason: reason.clone(),
                    percent,
                }));
            }
            other => self.transitioned(out, &[other.kind()]),
        }
        if matches!(self.phase, Phase::WindingDown) {
            return self.stopped(out);
        }
        match event {
            Event::Failed { .. } => self.operation_failed(out),
            Event::Finished => {
                out.push(Command::Trace(Note::Finished {
                    rows: self.projection.rows_done,
                }));
                self.phase = Phase::Idle;
                self.procedure = Procedure::None;
                self.stopping = Some(Stopping::Released("finished".into()));
            }
            _ => {}
        }
    }

    /// The plan-drift guard's look at the batch query: a full scan where
    /// the last look found an index fails the operation with the plan; one
    /// from the run's start is told, not stopped ([`PlanVerdict`]).
    pub(super) fn plan_checked(
        &mut self,
        full_scan: Option<String>,
        plan: &[String],
        out: &mut Vec<Command>,
        now: Now,
    ) {
        let planned = self.projection.batches_planned;
        let verdict = self.plan_watch.looked(full_scan.is_some(), now.at, planned);
        let Some(line) = full_scan else {
            return;
        };
        match verdict {
            PlanVerdict::TurnedIntoFullScan => {
                let error = drift_error(&self.projection.table, &line, plan);
                out.push(Command::Trace(Note::PlanDrift {
                    error: error.clone(),
                }));
                self.phase = Phase::Failing { error };
            }
            PlanVerdict::ScansFromTheStart => {
                out.push(Command::Trace(Note::PlanScans { line }));
            }
            PlanVerdict::Fine => {}
        }
    }

    /// The owner's reload while opening a batch: the counts helpers
    /// recorded, before planning ahead or finishing.
    pub(super) fn reloaded(&mut self, state: Projection, out: &mut Vec<Command>) {
        let retry = self.settings.retry_base;
        let Phase::Opening(opening) = &mut self.phase else {
            return;
        };
        let counting = opening.finish == Finish::Counting;
        if !counting {
            opening.reloaded = true;
            self.projection = state;
            return;
        }
        if state.batches_succeeded < state.batches_planned {
            // Batches not done yet are pending or held under a lease that
            // has not lapsed: claim them when it does.
            self.projection = state;
            self.phase = Phase::Idle;
            self.procedure = Procedure::None;
            self.leftovers_possible = true;
            return self.schedule_step(out, retry);
        }
        opening.finish = Finish::Counted;
        self.projection = state;
    }

    /// A claim's answer: the batch to run, or none left (a helper with none
    /// for a third of a lease stops).
    pub(super) fn claimed(
        &mut self,
        claimed: Option<super::phase::ActiveBatch>,
        out: &mut Vec<Command>,
        now: Now,
    ) {
        if let Some(batch) = claimed {
            if let Role::Helper { busy_at } = &mut self.role {
                *busy_at = now.at;
            }
            self.phase = Phase::Running {
                batch,
                in_flight: None,
            };
            return;
        }
        let idle_for = match self.role {
            Role::Owner { .. } => {
                self.leftovers_possible = false;
                return;
            }
            Role::Helper { busy_at } => now.at.saturating_duration_since(busy_at),
        };
        self.phase = Phase::Idle;
        self.procedure = Procedure::None;
        if idle_for >= self.settings.lease_ttl / 3 {
            self.stopping = Some(Stopping::Released("no batch left to help with".into()));
        } else {
            let wait: Duration = self.settings.control_interval / 4;
            self.schedule_step(out, wait);
        }
    }

    /// Says that `events` were appended, with the status after them.
    pub(super) fn transitioned(&self, out: &mut Vec<Command>, events: &[&'static str]) {
        out.push(Command::Trace(Note::Transitioned {
            events: events.to_vec(),
            status: self.projection.status,
        }));
    }
}
