//! The operation actor's decisions, with no I/O.
//!
//! [`Driver::on`] takes one [`Input`] — a message the actor received, or the
//! answer to a store request it asked for — and returns the [`Command`]s to
//! carry out, in order. At most one command of a batch is a request (it is
//! the last); its answer comes back as the next input, and the step that
//! asked resumes from what the driver recorded about it. Time and the
//! backoff's jitter come in with each input ([`Now`]), so every decision can
//! be replayed in a unit test.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use sluice_store::{Event, Lease, Projection};

use super::phase::{ActiveBatch, Phase, Role, Stopping};
use super::plan_watch::{PlanCheckEvery, PlanWatch};
use super::protocol::{Command, Input, NextPlan};
use crate::config::RuntimeConfig;
use crate::health::Signal;
use crate::sizing::{BatchSizer, backoff, duty_cycle_pause};
use sluice_operations::window::RunWindow;

mod pace_window;

pub use pace_window::PaceWindow;

/// The decision machine of one operation actor.
#[derive(Debug)]
pub struct Driver {
    pub(super) settings: Settings,
    pub(super) sizer: BatchSizer,
    pub(super) role: Role,
    pub(super) projection: Projection,
    pub(super) phase: Phase,
    pub(super) signal: Signal,
    pub(super) stopping: Option<Stopping>,
    /// What the current input is doing, resumed by a request's answer.
    pub(super) procedure: Procedure,
    /// A `Step` is on its way: no second one is scheduled.
    pub(super) step_scheduled: bool,
    pub(super) run_started: Instant,
    pub(super) rows_this_run: i64,
    pub(super) scope_exhausted: bool,
    /// The store may hold a batch of this operation to finish first (at
    /// start unless none was planned, after a failure or a lost batch, and
    /// while the scope is exhausted but batches are unfinished): only then
    /// is a claim tried before planning, saving a query per batch.
    pub(super) leftovers_possible: bool,
    /// Sub-batches in a row that found the store unusable (reset by one that
    /// commits); sets the backoff before the next try.
    pub(super) store_faults: u32,
    /// The work of the last sub-batch cycle: from the commit before it to
    /// its own, less the wait Sluice imposed between (so the statement, its
    /// commit, the recording and the planning between batches, all of which
    /// an unthrottled run spends too). A throttle's duty cycle waits in
    /// proportion to it.
    pub(super) last_work: Duration,
    /// When the last sub-batch committed.
    pub(super) last_done_at: Option<Instant>,
    /// Rows committed since a time while unthrottled: the pace a throttle
    /// to X % aims at X % of (everything between sub-batches included).
    pub(super) unthrottled: Option<PaceWindow>,
    /// Rows committed since a throttle began (or changed), at its percent.
    pub(super) throttled: Option<(u8, PaceWindow)>,
    /// The wait scheduled after it.
    pub(super) last_wait: Duration,
    pub(super) last_renewal: Instant,
    /// What this run has seen of the batch query's plan.
    pub(super) plan_watch: PlanWatch,
    /// The next sub-batch's rows were taken from the rate limits; it may
    /// start once this time has come.
    pub(super) rows_taken: Option<Instant>,
    /// The rate limit that made the last sub-batch wait, if one did.
    pub(super) rate_binding: Option<sluice_store::RateLimit>,
    /// When the tick last read the settings that may change while the
    /// operation runs (rate limits, the target's statistics).
    pub(super) settings_read_at: Instant,
}

/// What the driver needs of the runtime's configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Lease time to live (renewed every third of it).
    pub lease_ttl: Duration,
    /// How often controls written elsewhere are looked for.
    pub control_interval: Duration,
    /// First retry delay.
    pub retry_base: Duration,
    /// Longest retry delay.
    pub retry_cap: Duration,
    /// A sub-batch's time limit.
    pub sub_batch_timeout: Duration,
    /// Attempts of a batch before it is split or fails the operation.
    pub max_attempts: u32,
    /// Failed attempts per planned batch above which the operation fails.
    pub max_failure_ratio: f64,
    /// Batches of one operation run at once (above 1, helpers join).
    pub parallel_batches: u32,
    /// The operation walks key ranges (else it loops over "the next rows
    /// that match", which only one worker can take).
    pub ranges: bool,
    /// How often the owner looks at the batch query's plan again (`None`:
    /// never).
    pub plan_check: Option<PlanCheckEvery>,
    /// The daily hours it may work in (`None`: any time).
    pub window: Option<RunWindow>,
    /// A rate limit applies (its own, its kind's or everyone's): each
    /// sub-batch's rows are taken from the store's buckets first. Read
    /// again by the control tick every [`Settings::REREAD`].
    pub rate_limited: bool,
}

impl Settings {
    /// How often a running operation reads again what may change while it
    /// runs: rate limits set or cleared, and (its owner, for the plan-drift
    /// guard) its target's planner statistics.
    pub const REREAD: Duration = Duration::from_secs(1);

    /// The settings of `config`, for an operation walking ranges or not.
    pub fn new(config: &RuntimeConfig, ranges: bool) -> Self {
        Settings {
            lease_ttl: config.lease_ttl,
            control_interval: config.control_interval,
            retry_base: config.retry_base,
            retry_cap: config.retry_cap,
            sub_batch_timeout: config.sub_batch_timeout,
            max_attempts: config.max_attempts,
            max_failure_ratio: config.max_failure_ratio,
            parallel_batches: config.parallel_batches,
            ranges,
            plan_check: config.plan_check,
            window: None,
            rate_limited: false,
        }
    }
}

/// The moment an input is handled, and the fraction in `[0, 1)` that
/// spreads this input's backoffs.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// The time.
    pub at: Instant,
    /// The same moment on the wall clock (run windows are read on it).
    pub wall: DateTime<Utc>,
    /// The jitter fraction.
    pub jitter: f64,
}

/// What the current input is doing; a request's answer resumes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Procedure {
    /// Nothing under way.
    None,
    /// A step: record health, settle the batch's outcome, open a batch,
    /// send its next sub-batch.
    Step,
    /// A finished batch's outcome (or a failed sub-batch's) being recorded
    /// as the sub-batch's report arrived; then the pause.
    Settle,
    /// A changed health signal being recorded.
    Health {
        /// The signal it replaced was a stop.
        was_stopped: bool,
    },
    /// The control tick.
    Tick(TickStage),
    /// Giving back what the actor holds.
    WindDown,
}

/// Where a tick is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickStage {
    /// Renewing leases when a third of their time has gone.
    Renew,
    /// Reading the operation's row for controls written elsewhere.
    Control,
    /// Reading what may change while it runs (at most every
    /// [`Settings::REREAD`]).
    Settings,
    /// Refilling the batches planned ahead for helpers.
    Ahead,
}

impl Driver {
    /// A driver for an operation whose projection is `projection`, started
    /// at `now`. `health_known` is false while a health monitor's first
    /// reading is awaited.
    pub fn new(
        settings: Settings,
        sizer: BatchSizer,
        role: Role,
        projection: Projection,
        health_known: bool,
        now: Instant,
    ) -> Self {
        let leftovers_possible = projection.batches_planned > 0;
        Driver {
            settings,
            sizer,
            role,
            projection,
            phase: if health_known {
                Phase::Idle
            } else {
                Phase::AwaitingHealth
            },
            signal: Signal::Normal,
            stopping: None,
            procedure: Procedure::None,
            step_scheduled: false,
            run_started: now,
            rows_this_run: 0,
            scope_exhausted: false,
            leftovers_possible,
            store_faults: 0,
            last_work: Duration::ZERO,
            last_done_at: None,
            unthrottled: None,
            throttled: None,
            last_wait: Duration::ZERO,
            last_renewal: now,
            plan_watch: PlanWatch::default(),
            rows_taken: None,
            rate_binding: None,
            settings_read_at: now,
        }
    }

    /// Handles one input and returns what to carry out, in order.
    pub fn on(&mut self, input: Input, now: Now) -> Vec<Command> {
        let mut out = Vec::new();
        match input {
            Input::Start => self.schedule_step(&mut out, Duration::ZERO),
            Input::Step => {
                self.step_scheduled = false;
                self.begin(Procedure::Step, &mut out, now);
            }
            Input::SubBatchDone(outcome, took) => self.sub_batch_done(outcome, took, &mut out, now),
            Input::Health(signal) => self.health(signal, &mut out, now),
            Input::Tick => self.begin(Procedure::Tick(TickStage::Renew), &mut out, now),
            Input::Shutdown => {
                self.stopping.get_or_insert(Stopping::Shutdown);
            }
            Input::Answer(Ok(answer)) => {
                self.absorb(answer, &mut out, now);
                self.resume(&mut out, now);
            }
            Input::Answer(Err(error)) => self.request_failed(error, &mut out, now),
        }
        let crashed = out.iter().any(|c| matches!(c, Command::Crash(_)));
        if !crashed && !out.iter().any(Command::is_request) {
            self.procedure = Procedure::None;
            self.wind_down_if_due(&mut out);
        }
        out
    }

    /// The projection as this actor last saw it.
    pub fn projection(&self) -> &Projection {
        &self.projection
    }

    /// The health signal obeyed.
    pub fn signal(&self) -> &Signal {
        &self.signal
    }

    /// The rate limit that held the last sub-batch back, if one did.
    pub fn rate_binding(&self) -> Option<&sluice_store::RateLimit> {
        self.rate_binding.as_ref()
    }

    /// Rows the open batch's committed sub-batches changed (not yet in the
    /// projection's `rows_done`).
    pub fn rows_in_batch(&self) -> i64 {
        self.batch().map_or(0, |b| b.rows)
    }

    /// Whether this actor holds the operation (else it is a helper).
    pub fn is_owner(&self) -> bool {
        matches!(self.role, Role::Owner { .. })
    }

    /// Why the actor winds down, once it does.
    pub fn stopping(&self) -> Option<&Stopping> {
        self.stopping.as_ref()
    }

    /// Takes `state`, read by the shell as the actor stops.
    pub fn refreshed(&mut self, state: Projection) {
        self.projection = state;
    }

    pub(super) fn begin(&mut self, procedure: Procedure, out: &mut Vec<Command>, now: Now) {
        self.procedure = procedure;
        self.resume(out, now);
    }

    /// Carries on with the current procedure from what is known now.
    pub(super) fn resume(&mut self, out: &mut Vec<Command>, now: Now) {
        match self.procedure {
            Procedure::None | Procedure::WindDown => {}
            Procedure::Step => self.step(out, now),
            Procedure::Settle => self.settle(out, now),
            Procedure::Health { was_stopped } => self.record_health_change(was_stopped, out),
            Procedure::Tick(stage) => self.tick(stage, out, now),
        }
    }

    /// Asks for `event` to be recorded under this actor's lease.
    pub(super) fn record(&mut self, out: &mut Vec<Command>, event: Event) {
        let lease = self.lease();
        self.request(out, Command::Record { event, lease });
    }

    pub(super) fn request(&mut self, out: &mut Vec<Command>, command: Command) {
        debug_assert!(command.is_request());
        out.push(command);
    }

    pub(super) fn schedule_step(&mut self, out: &mut Vec<Command>, after: Duration) {
        if self.step_scheduled {
            return;
        }
        self.step_scheduled = true;
        out.push(Command::ScheduleStep(after));
    }

    /// The open batch, if any (running or ending).
    pub(super) fn batch(&self) -> Option<&ActiveBatch> {
        match &self.phase {
            Phase::Running { batch, .. } | Phase::Ending { batch, .. } => Some(batch),
            _ => None,
        }
    }

    pub(super) fn in_flight(&self) -> bool {
        matches!(
            self.phase,
            Phase::Running {
                in_flight: Some(_),
                ..
            }
        )
    }

    pub(super) fn lease(&self) -> Option<Lease> {
        match &self.role {
            Role::Owner { lease } => Some(lease.clone()),
            Role::Helper { .. } => None,
        }
    }

    /// Whether this owner keeps batches planned ahead for helpers: with
    /// `parallel_batches` above 1, for range batches only (loop batches
    /// take "the next rows that match", which two workers cannot split).
    pub(super) fn plans_ahead(&self) -> bool {
        self.is_owner() && self.settings.parallel_batches > 1 && self.settings.ranges
    }

    /// Whether another batch may be planned ahead: rows left, no limit
    /// reached, fewer than `parallel_batches` unfinished.
    pub(super) fn may_plan_ahead(&self, now: Now) -> bool {
        !self.scope_exhausted
            && self.limit_reached(now).is_none()
            && self.projection.batches_planned - self.projection.batches_succeeded
                < i64::from(self.settings.parallel_batches)
    }

    /// The next batch from the cursor, of `base_size` (a throttle slows the
    /// pace between sub-batches, not the batches' sizes). Only an owner
    /// plans: a helper's plan carries no lease and is never asked for.
    pub(super) fn next_plan(&self, base_size: i64) -> NextPlan {
        let owner = match &self.role {
            Role::Owner { lease } => lease.clone(),
            Role::Helper { .. } => unreachable!("only an owner plans batches"),
        };
        NextPlan {
            owner,
            from: self.projection.cursor.clone(),
            size: base_size,
        }
    }

    /// Whether the owner looks at the batch query's plan before planning
    /// its next batch ([`PlanWatch::due`]).
    pub(super) fn plan_check_due(&self, now: Now) -> bool {
        self.is_owner()
            && self.settings.plan_check.is_some_and(|every| {
                self.plan_watch
                    .due(every, now.at, self.projection.batches_planned)
            })
    }

    /// Whether `now` is outside the operation's run window.
    pub(super) fn outside_window(&self, now: Now) -> bool {
        self.settings
            .window
            .is_some_and(|window| !window.is_open(now.wall))
    }

    /// The rows an owner may still change in this run under its row limit
    /// (`i64::MAX` without one, or for a helper, which keeps no limit).
    pub(super) fn rows_left_this_run(&self) -> i64 {
        match self.projection.limits.max_rows_per_run {
            Some(rows) if self.is_owner() => rows.saturating_sub(self.rows_this_run).max(0),
            _ => i64::MAX,
        }
    }

    pub(super) fn limit_reached(&self, now: Now) -> Option<String> {
        let limits = self.projection.limits;
        if let Some(ms) = limits.max_runtime_ms
            && now.at.saturating_duration_since(self.run_started)
                >= Duration::from_millis(ms.unsigned_abs())
        {
            return Some(format!("ran for its limit of {ms} ms"));
        }
        if let Some(rows) = limits.max_rows_per_run
            && self.rows_this_run >= rows
        {
            return Some(format!("changed its limit of {rows} rows in this run"));
        }
        None
    }

    /// The pause due after a sub-batch: the operation's, lengthened by a
    /// throttle to X % so that the rows committed since the throttle began
    /// keep to X % of the pace measured unthrottled before it
    /// ([`PaceWindow`]: every moment between sub-batches counts, and a
    /// database that answers faster with rests gets no more rows); before
    /// any unthrottled pace is known, a duty cycle of X % of the time
    /// ([`duty_cycle_pause`]).
    pub(super) fn pause(&self) -> Duration {
        let pause = Duration::from_millis(u64::try_from(self.projection.pause_ms).unwrap_or(0));
        let percent = self.percent();
        let pace = self.unthrottled.as_ref().and_then(PaceWindow::pace);
        match (pace, &self.throttled) {
            (Some(pace), Some((at, window))) if *at == percent && percent < 100 => window
                .wait(pace * f64::from(percent) / 100.0, window.until)
                .max(pause),
            _ => duty_cycle_pause(pause, self.last_work, percent),
        }
    }

    pub(super) fn percent(&self) -> u8 {
        match self.signal {
            Signal::Throttle { percent, .. } => percent.clamp(1, 99),
            _ => 100,
        }
    }

    pub(super) fn is_stop(&self) -> bool {
        matches!(self.signal, Signal::Stop { .. })
    }

    pub(super) fn backoff(&self, attempt: u32, now: Now) -> Duration {
        backoff(
            attempt,
            self.settings.retry_base,
            self.settings.retry_cap,
            now.jitter,
        )
    }
}
