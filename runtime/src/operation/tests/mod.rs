//! The driver's decisions, one rule per test, with no database: each test
//! feeds inputs and store answers by hand and reads the commands back.
//! Commands are compared as short scripts (`describe`); traces and progress
//! reports are left out of a script unless a test is about them.

use std::time::{Duration, Instant};

use sluice_operations::{OperationError, SubBatchOutcome};
use sluice_store::{
    BatchLease, Event, Health, Lease, OperationSpec, OperationStatus, Projection, StoreError,
    machine::replay,
};
use sluice_target::Cursor;

use super::phase::{ActiveBatch, Phase, Role, Stopping};
use super::{Answer, Command, Driver, Input, Now, Settings};
use crate::health::Signal;
use crate::sizing::BatchSizer;

const TTL: Duration = Duration::from_secs(30);
const CONTROL: Duration = Duration::from_millis(200);
const RETRY_BASE: Duration = Duration::from_millis(100);
const TIMEOUT: Duration = Duration::from_secs(10);

fn settings() -> Settings {
    Settings {
        lease_ttl: TTL,
        control_interval: CONTROL,
        retry_base: RETRY_BASE,
        retry_cap: Duration::from_secs(5),
        sub_batch_timeout: TIMEOUT,
        max_attempts: 3,
        max_failure_ratio: 0.5,
        parallel_batches: 1,
        ranges: true,
        plan_check: None,
        window: None,
        rate_limited: false,
    }
}

/// A running operation as the store replays it: batches of 1,000 rows,
/// sub-batches of 100, no pause, no limits.
fn projection() -> Projection {
    let spec = OperationSpec::new("delete", "items", vec!["id".into()]);
    let events = [
        Event::Created(Box::new(spec)),
        Event::Started { node: "n1".into() },
    ];
    replay(events.iter().map(|e| (e, 1))).unwrap().unwrap()
}

fn lease(epoch: i64) -> Lease {
    Lease {
        operation_id: 1,
        node: "n1".into(),
        epoch,
        expires_at: 0,
    }
}

/// Batch `ordinal`'s claim at `attempt`, over ids `(ordinal-1)*1000, ordinal*1000]`.
fn batch(ordinal: i64, attempt: i32) -> ActiveBatch {
    ActiveBatch {
        lease: BatchLease {
            batch_id: ordinal,
            operation_id: 1,
            ordinal,
            node: "n1".into(),
            epoch: 1,
            attempt,
        },
        end: Some(Cursor::int(ordinal * 1_000)),
        progress: Some(Cursor::int((ordinal - 1) * 1_000)),
        size: 1_000,
        sub_batch_size: 100,
        rows: 0,
        busy: Duration::ZERO,
        took_partition: false,
    }
}

/// A loop batch (no range: "the next rows that match").
fn loop_batch(attempt: i32) -> ActiveBatch {
    ActiveBatch {
        end: None,
        progress: None,
        ..batch(1, attempt)
    }
}

fn committed(rows: u64, reached: i64, last: bool) -> Input {
    let outcome = SubBatchOutcome {
        rows,
        reached: Some(Cursor::int(reached)),
        last,
        dropped: None,
    };
    Input::SubBatchDone(Ok(outcome), Duration::from_millis(5))
}

fn failed(error: OperationError) -> Input {
    Input::SubBatchDone(Err(error), Duration::from_millis(5))
}

fn store_error(error: StoreError) -> OperationError {
    OperationError::Store(error)
}

fn unavailable() -> OperationError {
    store_error(StoreError::Database(sqlx::Error::PoolTimedOut))
}

fn throttle(percent: u8) -> Signal {
    Signal::Throttle {
        percent,
        reason: "replica lag 12 s".into(),
    }
}

fn stop() -> Signal {
    Signal::Stop {
        reason: "replica lag 60 s".into(),
    }
}

/// The backoff of `attempt` with the harness's jitter (0.5), in ms.
fn backoff_ms(attempt: u32) -> u128 {
    crate::sizing::backoff(attempt, RETRY_BASE, settings().retry_cap, 0.5).as_millis()
}

/// The wall clock when a harness starts: 2026-12-01 12:00:00 UTC.
fn wall_start() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc)
}

/// One driver, a clock the test moves, and the answers it is given.
struct Harness {
    driver: Driver,
    t0: Instant,
    elapsed: Duration,
}

impl Harness {
    /// A driver started at `t0` in the role `role(t0)` gives.
    fn new(
        role: impl FnOnce(Instant) -> Role,
        projection: Projection,
        settings: Settings,
        health_known: bool,
    ) -> Self {
        let t0 = Instant::now();
        let role = role(t0);
        let sizer = BatchSizer::new(Duration::from_millis(500), 10, 100_000);
        Harness {
            driver: Driver::new(settings, sizer, role, projection, health_known, t0),
            t0,
            elapsed: Duration::ZERO,
        }
    }

    /// The lease holder of an operation with `projection`, health known.
    fn owner_of(projection: Projection, settings: Settings) -> Self {
        Harness::new(
            |_| Role::Owner { lease: lease(1) },
            projection,
            settings,
            true,
        )
    }

    fn owner() -> Self {
        Harness::owner_of(projection(), settings())
    }

    fn helper() -> Self {
        let role = |t0| Role::Helper { busy_at: t0 };
        Harness::new(role, projection(), settings(), true)
    }

    fn now(&self) -> Now {
        Now {
            at: self.t0 + self.elapsed,
            wall: wall_start() + self.elapsed,
            jitter: 0.5,
        }
    }

    fn advance(&mut self, by: Duration) {
        self.elapsed += by;
    }

    fn on(&mut self, input: Input) -> Vec<Command> {
        let now = self.now();
        self.driver.on(input, now)
    }

    fn answer(&mut self, answer: Answer) -> Vec<Command> {
        self.on(Input::Answer(Ok(answer)))
    }

    fn refused(&mut self, error: OperationError) -> Vec<Command> {
        self.on(Input::Answer(Err(error)))
    }

    /// The projection with `planned` batches planned and `succeeded` done.
    fn counts(&self, planned: i64, succeeded: i64) -> Projection {
        let mut p = self.driver.projection().clone();
        p.batches_planned = planned;
        p.batches_succeeded = succeeded;
        p
    }

    /// Takes the owner from its start to `open` planned and claimed, with
    /// its first sub-batch sent to the pool and in flight.
    fn in_flight(&mut self, open: ActiveBatch) -> Vec<Command> {
        assert_eq!(script(&self.on(Input::Start)), ["ScheduleStep(0ms)"]);
        assert_eq!(script(&self.on(Input::Step)), ["PlanAndClaim(1000)"]);
        let state = self.counts(open.lease.ordinal, open.lease.ordinal - 1);
        let sent = self.answer(Answer::PlannedClaimed(Some((open, state))));
        assert!(script(&self.answer(Answer::Submitted(true))).is_empty());
        sent
    }

    /// The projection after `event` is recorded.
    fn appended(&mut self, event: Event, edit: impl FnOnce(&mut Projection)) -> Vec<Command> {
        let mut state = self.driver.projection().clone();
        edit(&mut state);
        self.answer(Answer::Appended { event, state })
    }
}

/// Commands as short words, without traces and progress reports.
fn script(commands: &[Command]) -> Vec<String> {
    commands
        .iter()
        .filter(|c| !matches!(c, Command::Trace(_) | Command::Report))
        .map(describe)
        .collect()
}

fn describe(command: &Command) -> String {
    match command {
        Command::Record { event, .. } => format!("Record({})", event.kind()),
        Command::Reload => "Reload".into(),
        Command::Claim => "Claim".into(),
        Command::PlanAhead(plan) => format!("PlanAhead({})", plan.size),
        Command::PlanAndClaim(plan) => format!("PlanAndClaim({})", plan.size),
        Command::Complete { then_plan, .. } => match then_plan {
            Some(plan) => format!("Complete+PlanAndClaim({})", plan.size),
            None => "Complete".into(),
        },
        Command::Split { half, smaller, .. } => {
            format!("Split({half}, {})", smaller.unwrap_or(0))
        }
        Command::FailBatch { smaller, .. } => format!("FailBatch({})", smaller.unwrap_or(0)),
        Command::FailBatchAndOperation { .. } => "FailBatchAndOperation".into(),
        Command::RenewLease(_) => "RenewLease".into(),
        Command::Dispatch(request) => format!("Dispatch({})", request.size),
        Command::CheckPlan { size, .. } => format!("CheckPlan({size})"),
        Command::TakeRows { rows } => format!("TakeRows({rows})"),
        Command::ReadSettings { statistics } => format!("ReadSettings({statistics})"),
        Command::RenewBatchLease(_) => "RenewBatchLease".into(),
        Command::ReleaseBatch(_) => "ReleaseBatch".into(),
        Command::ScheduleStep(after) => format!("ScheduleStep({}ms)", after.as_millis()),
        Command::Report => "Report".into(),
        Command::Trace(_) => "Trace".into(),
        Command::Stop => "Stop".into(),
        Command::Crash(_) => "Crash".into(),
    }
}

fn recorded(commands: &[Command]) -> Option<&Event> {
    commands.iter().find_map(|c| match c {
        Command::Record { event, .. } => Some(event),
        _ => None,
    })
}

mod control;
mod failures;
mod flow;
mod plan_drift;
mod rate;
mod stopping;
mod window;
