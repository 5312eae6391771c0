//! A step: how the driver opens a batch, sends its sub-batches one at a
//! time and records its outcome.

use std::time::Duration;

use super::driver::PaceWindow;

use sluice_operations::{OperationError, SubBatchOutcome, SubBatchRequest};
use sluice_store::Event;

use super::driver::{Driver, Now, Procedure};
use super::phase::{Ending, Finish, Opening, Phase, Stopping};
use super::protocol::Command;

impl Driver {
    /// A step: starts the next sub-batch unless something holds the
    /// operation back.
    pub(super) fn step(&mut self, out: &mut Vec<Command>, now: Now) {
        if self.stopping.is_some() || self.in_flight() {
            // Resumed by the sub-batch's outcome, or wound down.
            return;
        }
        if matches!(
            self.phase,
            Phase::AwaitingHealth | Phase::WindingDown | Phase::Stopped
        ) {
            return;
        }
        if let Some(event) = self.health_to_record() {
            return self.record(out, event);
        }
        if self.is_stop() {
            // Resumed by the health message that lifts the stop.
            return;
        }
        if self.outside_window(now)
            && matches!(
                self.phase,
                Phase::Idle | Phase::Opening(_) | Phase::Running { .. }
            )
        {
            // Outside its run window no batch opens and no sub-batch
            // starts (an outcome is still recorded); the scheduler pauses
            // the operation until the opening, which stops this actor.
            return self.schedule_step(out, self.settings.control_interval);
        }
        self.advance(out, now);
    }

    /// The work the phase holds: record a decided failure or a batch's
    /// outcome, open a batch, or send the open batch's next sub-batch.
    pub(super) fn advance(&mut self, out: &mut Vec<Command>, now: Now) {
        match &self.phase {
            Phase::Failing { error } => {
                let event = Event::Failed {
                    error: error.clone(),
                };
                self.record(out, event);
            }
            Phase::Ending {
                ending: Ending::Succeeded { .. },
                ..
            } => self.close(out, now),
            Phase::Ending {
                ending: Ending::Failed { .. },
                ..
            } => self.record_failure(out),
            Phase::Idle | Phase::Opening(_) => self.open(out, now),
            Phase::Running {
                in_flight: None, ..
            } => self.dispatch(out, now),
            _ => {}
        }
    }

    /// After a sub-batch ended its batch: the outcome recorded, then the
    /// pause before the next step.
    pub(super) fn settle(&mut self, out: &mut Vec<Command>, now: Now) {
        match self.phase {
            Phase::Failing { .. } | Phase::Ending { .. } => self.advance(out, now),
            _ => {
                let wait = self.pause();
                self.last_wait = wait;
                self.schedule_step(out, wait);
                out.push(Command::Report);
            }
        }
    }

    /// Sends the open batch's next sub-batch to the pool, starting where the
    /// last committed one ended; under a rate limit, once its rows were
    /// taken and their wait is over.
    pub(super) fn dispatch(&mut self, out: &mut Vec<Command>, now: Now) {
        let timeout = self.settings.sub_batch_timeout;
        let rows_left = self.rows_left_this_run();
        let Phase::Running { batch, in_flight } = &mut self.phase else {
            return;
        };
        // Never more than the rows the run may still change.
        let size = batch.sub_batch_size.min(rows_left).max(1);
        if self.settings.rate_limited {
            match self.rows_taken {
                // Rows first: the store says how long they wait.
                None => return self.request(out, Command::TakeRows { rows: size }),
                Some(at) if now.at < at => {
                    return self.schedule_step(out, at.saturating_duration_since(now.at));
                }
                Some(_) => self.rows_taken = None,
            }
        }
        *in_flight = Some(now.at);
        let request = SubBatchRequest {
            lease: batch.lease.clone(),
            from: batch.progress.clone(),
            end: batch.end.clone(),
            size,
            timeout,
        };
        self.request(out, Command::Dispatch(request));
    }

    /// Takes a batch to work on: one left pending (a retry) or orphaned by a
    /// dead node, else the next one planned from the cursor; or finds the
    /// operation done, at a limit, or waiting for helpers.
    pub(super) fn open(&mut self, out: &mut Vec<Command>, now: Now) {
        if matches!(self.phase, Phase::Idle) {
            self.phase = Phase::Opening(Opening::default());
        }
        if !self.is_owner() {
            return self.request(out, Command::Claim);
        }
        if self.plan_check_due(now) {
            let from = self.projection.cursor.clone();
            let size = self.projection.batch_size;
            return self.request(out, Command::CheckPlan { from, size });
        }
        let plans_ahead = self.plans_ahead();
        let ahead = plans_ahead && self.may_plan_ahead(now);
        let limit = self.limit_reached(now);
        let unfinished = self.projection.batches_planned - self.projection.batches_succeeded;
        let parallel = i64::from(self.settings.parallel_batches);
        let exhausted = self.scope_exhausted;
        let leftovers = self.leftovers_possible;
        let Phase::Opening(opening) = &mut self.phase else {
            return;
        };
        if plans_ahead && !opening.reloaded {
            return self.request(out, Command::Reload);
        }
        if plans_ahead && !opening.ahead_done {
            if ahead {
                let plan = self.next_plan(self.projection.batch_size);
                return self.request(out, Command::PlanAhead(plan));
            }
            opening.ahead_done = true;
            self.leftovers_possible = true;
            return self.request(out, Command::Claim);
        }
        if leftovers {
            return self.request(out, Command::Claim);
        }
        if let Some(reason) = limit {
            self.phase = Phase::Idle;
            self.stopping = Some(Stopping::Yield(reason));
            return;
        }
        if opening.planned || (plans_ahead && !exhausted && unfinished >= parallel) {
            // Every unfinished batch is held by a helper (or another node's
            // worker took the one just planned): look again shortly.
            self.phase = Phase::Idle;
            return self.schedule_step(out, self.settings.retry_base);
        }
        if exhausted || opening.finish != Finish::No {
            return self.finish(out);
        }
        let plan = self.next_plan(self.projection.batch_size);
        if plans_ahead {
            // Helpers may take it: plan it pending, then claim the first.
            self.request(out, Command::PlanAhead(plan));
        } else {
            self.request(out, Command::PlanAndClaim(plan));
        }
    }

    /// Records `finished` once every planned batch succeeded (counted from
    /// the store, where helpers record theirs); otherwise waits for the
    /// batches still held elsewhere.
    pub(super) fn finish(&mut self, out: &mut Vec<Command>) {
        let Phase::Opening(opening) = &mut self.phase else {
            return;
        };
        match opening.finish {
            Finish::No | Finish::Counting => {
                opening.finish = Finish::Counting;
                self.request(out, Command::Reload);
            }
            Finish::Counted => self.record(out, Event::Finished),
        }
    }

    /// Records the outcome of a batch whose sub-batches are all done, with
    /// the next batch planned and claimed in the same commit when
    /// [`Self::next_batch_now`] allows one. The batch stays `Ending` until
    /// the write succeeds, so an error leaves it for the next step.
    pub(super) fn close(&mut self, out: &mut Vec<Command>, now: Now) {
        let Phase::Ending {
            batch,
            ending: Ending::Succeeded { next_size },
        } = &self.phase
        else {
            return;
        };
        let (lease, rows, busy, next_size) =
            (batch.lease.clone(), batch.rows, batch.busy, *next_size);
        let then_plan = self
            .next_batch_now(now)
            .then(|| self.next_plan(next_size.unwrap_or(self.projection.batch_size)));
        self.request(
            out,
            Command::Complete {
                lease,
                rows,
                busy,
                next_size,
                then_plan,
            },
        );
    }

    /// Whether the batch after the one closing is planned in the same
    /// commit: only by a lone owner (no helpers, no leftover to claim
    /// first) with rows left, going on (not stopping, not stopped by the
    /// health signal, not at a limit, no look at the plan due, inside its
    /// run window). Otherwise
    /// the next step decides, as for a first batch.
    pub(super) fn next_batch_now(&self, now: Now) -> bool {
        self.is_owner()
            && !self.plans_ahead()
            && !self.leftovers_possible
            && !self.scope_exhausted
            && self.stopping.is_none()
            && !self.is_stop()
            && self.limit_reached(now).is_none()
            && !self.plan_check_due(now)
            && !self.outside_window(now)
    }

    /// Takes a sub-batch's report: its rows into the batch's count and
    /// progress, then the next sub-batch, the batch's outcome, or a retry.
    pub(super) fn sub_batch_done(
        &mut self,
        outcome: Result<SubBatchOutcome, OperationError>,
        took: Duration,
        out: &mut Vec<Command>,
        now: Now,
    ) {
        let Phase::Running { in_flight, .. } = &mut self.phase else {
            // The batch was given up meanwhile (lost, or its worker lost).
            return;
        };
        *in_flight = None;
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(error) => return self.sub_batch_failed(error, out, now),
        };
        self.store_faults = 0;
        // The cycle's work: since the last commit, less the wait imposed
        // then; at least the sub-batch itself, and at most three times it
        // (a stop or a pause between two commits is not work).
        let since = self.last_done_at.map(|at| {
            now.at
                .saturating_duration_since(at)
                .saturating_sub(self.last_wait)
        });
        self.last_work = since.map_or(took, |work| work.clamp(took, took.saturating_mul(3)));
        self.last_done_at = Some(now.at);
        self.last_wait = Duration::ZERO;
        let rows = i64::try_from(outcome.rows).unwrap_or(i64::MAX);
        // A dropped partition's rows count as done, but not as pace: they
        // cost one catalogue change, not a delete each.
        let dropped = outcome.dropped.is_some();
        let pace_rows = if dropped { 0 } else { rows };
        // The pace windows: rows since the unthrottled (or the current
        // throttled) stretch began, its first sub-batch's start included.
        let started = now.at.checked_sub(self.last_work).unwrap_or(now.at);
        let extend = |window: Option<PaceWindow>| {
            let mut window = window.unwrap_or(PaceWindow {
                since: started,
                rows: 0,
                until: now.at,
            });
            window.rows = window.rows.saturating_add(pace_rows);
            window.until = now.at;
            window
        };
        let percent = self.percent();
        if percent >= 100 {
            self.throttled = None;
            self.unthrottled = Some(extend(self.unthrottled).recent());
        } else {
            let current = self
                .throttled
                .filter(|(at, _)| *at == percent)
                .map(|(_, w)| w);
            self.throttled = Some((percent, extend(current)));
        }
        self.rows_this_run = self.rows_this_run.saturating_add(rows);
        let at_row_limit = self.rows_left_this_run() == 0;
        let Phase::Running { batch, .. } = &mut self.phase else {
            return;
        };
        batch.busy += took;
        batch.rows += rows;
        if outcome.reached.is_some() {
            batch.progress = outcome.reached;
        }
        let is_loop = batch.end.is_none();
        batch.took_partition |= dropped;
        let took_partition = batch.took_partition;
        // A partition a loop dropped is a batch of its own; a range batch
        // that kept one goes on over its range.
        let done = outcome.last || (dropped && is_loop) || (is_loop && batch.rows >= batch.size);
        if is_loop && outcome.last {
            self.scope_exhausted = true;
        }
        if !done && at_row_limit {
            // Given back mid-batch: the next run goes on from its progress.
            out.push(Command::Report);
            let reason = self.limit_reached(now).unwrap_or_default();
            self.stopping.get_or_insert(Stopping::Yield(reason));
            return;
        }
        if !done {
            out.push(Command::Report);
            let wait = self.pause();
            if wait.is_zero() {
                // The next sub-batch now, as a step would start it.
                return self.begin(Procedure::Step, out, now);
            }
            self.last_wait = wait;
            return self.schedule_step(out, wait);
        }
        // Its time says nothing of what a batch of deletes costs.
        let next_size = if took_partition {
            None
        } else {
            self.observe_batch()
        };
        let Phase::Running { batch, .. } = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return;
        };
        self.phase = Phase::Ending {
            batch,
            ending: Ending::Succeeded { next_size },
        };
        self.begin(Procedure::Settle, out, now);
    }

    /// The batch size a just-finished batch sets: adapted on full batches
    /// only, normalised to the unthrottled size, and by the owner alone.
    pub(super) fn observe_batch(&mut self) -> Option<i64> {
        let Phase::Running { batch, .. } = &self.phase else {
            return None;
        };
        let base = self.projection.batch_size;
        let adapts = self.is_owner() && batch.rows * 2 >= batch.size;
        let scaled = batch.busy.mul_f64(base as f64 / batch.size.max(1) as f64);
        adapts.then(|| self.sizer.observe(base, scaled))
    }
}
