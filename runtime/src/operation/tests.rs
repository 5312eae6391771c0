//! The driver's decisions, one rule per test, with no database: each test
//! feeds inputs and store answers by hand and reads the commands back.
//! Commands are compared as short scripts (`describe`); traces and progress
//! reports are left out of a script unless a test is about them.

use std::time::{Duration, Instant};

use sluice_operations::{OperationError, SubBatchOutcome};
use sluice_store::{
    BatchLease, Cursor, Event, Health, Lease, OperationSpec, OperationStatus, Projection,
    StoreError, machine::replay,
};

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

/// One driver, a clock the test moves, and the answers it is given.
struct Harness {
    driver: Driver,
    t0: Instant,
    elapsed: Duration,
}

impl Harness {
    fn new(role: Role, projection: Projection, settings: Settings, health_known: bool) -> Self {
        let t0 = Instant::now();
        let sizer = BatchSizer::new(Duration::from_millis(500), 10, 100_000);
        Harness {
            driver: Driver::new(settings, sizer, role, projection, health_known, t0),
            t0,
            elapsed: Duration::ZERO,
        }
    }

    /// The lease holder of an operation with `projection`, health known.
    fn owner_of(projection: Projection, settings: Settings) -> Self {
        let role = Role::Owner { lease: lease(1) };
        Harness::new(role, projection, settings, true)
    }

    fn owner() -> Self {
        Harness::owner_of(projection(), settings())
    }

    fn helper() -> Self {
        let role = Role::Helper {
            busy_at: Instant::now(),
        };
        let mut h = Harness::new(role, projection(), settings(), true);
        if let Role::Helper { busy_at } = &mut h.driver.role {
            *busy_at = h.t0;
        }
        h
    }

    fn now(&self) -> Now {
        Now {
            at: self.t0 + self.elapsed,
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

// The normal flow.

#[test]
fn plans_and_claims_a_batch_then_sends_its_sub_batches_one_at_a_time() {
    let mut h = Harness::owner();
    assert_eq!(script(&h.in_flight(batch(1, 1))), ["Dispatch(100)"]);
    // One sub-batch at a time: a step while one is in flight sends nothing.
    assert!(script(&h.on(Input::Step)).is_empty());
    let next = h.on(committed(100, 100, false));
    assert_eq!(script(&next), ["Dispatch(100)"]);
    let Some(Command::Dispatch(request)) = next.iter().find(|c| matches!(c, Command::Dispatch(_)))
    else {
        unreachable!()
    };
    assert_eq!(
        request.from,
        Some(Cursor::int(100)),
        "resumes where the last one ended"
    );
    assert_eq!(request.end, Some(Cursor::int(1_000)));
    assert_eq!(h.driver.rows_in_batch(), 100);
}

#[test]
fn a_finished_batch_is_recorded_with_the_next_one_planned_in_the_same_commit() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    // Its sub-batch took 5 ms of the 500 ms target: the sizer grows the
    // next batch, planned at the new size in the same commit.
    assert_eq!(
        script(&h.on(committed(1_000, 1_000, true))),
        ["Complete+PlanAndClaim(1200)"]
    );
    let state = h.counts(2, 1);
    let after = h.answer(Answer::Completed {
        state,
        next: Some(batch(2, 1)),
    });
    assert_eq!(script(&after), ["ScheduleStep(0ms)"]);
    assert_eq!(script(&h.on(Input::Step)), ["Dispatch(100)"]);
}

#[test]
fn a_pause_between_sub_batches_is_waited_out_by_a_scheduled_step() {
    let mut p = projection();
    p.pause_ms = 40;
    let mut h = Harness::owner_of(p, settings());
    h.in_flight(batch(1, 1));
    assert_eq!(
        script(&h.on(committed(100, 100, false))),
        ["ScheduleStep(40ms)"]
    );
}

#[test]
fn the_operation_finishes_once_every_planned_batch_succeeded() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    h.on(committed(1_000, 1_000, true));
    // No row after the last batch: nothing is planned with its outcome.
    h.answer(Answer::Completed {
        state: h.counts(1, 1),
        next: None,
    });
    assert_eq!(script(&h.on(Input::Step)), ["PlanAndClaim(1000)"]);
    assert_eq!(script(&h.answer(Answer::PlannedClaimed(None))), ["Reload"]);
    let done = h.counts(1, 1);
    let finishing = h.answer(Answer::Reloaded {
        state: done,
        holder: Some(1),
    });
    assert_eq!(script(&finishing), ["Record(finished)"]);
    let stopped = h.appended(Event::Finished, |p| p.status = OperationStatus::Finished);
    assert_eq!(script(&stopped), ["Stop"]);
}

#[test]
fn finishing_waits_while_a_planned_batch_is_unfinished() {
    let mut h = Harness::owner();
    h.on(Input::Start);
    h.on(Input::Step);
    assert_eq!(script(&h.answer(Answer::PlannedClaimed(None))), ["Reload"]);
    // Another worker still holds batch 3 of 3.
    let waiting = h.answer(Answer::Reloaded {
        state: h.counts(3, 2),
        holder: Some(1),
    });
    assert_eq!(script(&waiting), ["ScheduleStep(100ms)"]);
    // It is claimed when its lease lapses, before anything is finished.
    assert_eq!(script(&h.on(Input::Step)), ["Claim"]);
}

// Health.

#[test]
fn nothing_starts_before_the_first_health_reading() {
    let role = Role::Owner { lease: lease(1) };
    let mut h = Harness::new(role, projection(), settings(), false);
    assert_eq!(script(&h.on(Input::Start)), ["ScheduleStep(0ms)"]);
    assert!(script(&h.on(Input::Step)).is_empty());
    assert_eq!(
        script(&h.on(Input::Health(Signal::Normal))),
        ["ScheduleStep(0ms)"]
    );
    assert_eq!(script(&h.on(Input::Step)), ["PlanAndClaim(1000)"]);
}

#[test]
fn the_health_signal_sets_what_is_recorded_and_the_sizes_obeyed() {
    // (signal, health recorded, batch planned, sub-batch sent)
    let cases = [
        (
            Signal::Normal,
            None,
            Some("PlanAndClaim(1000)"),
            Some("Dispatch(100)"),
        ),
        (
            throttle(50),
            Some(Health::Throttled { percent: 50 }),
            Some("PlanAndClaim(500)"),
            Some("Dispatch(50)"),
        ),
        (
            throttle(10),
            Some(Health::Throttled { percent: 10 }),
            Some("PlanAndClaim(100)"),
            Some("Dispatch(10)"),
        ),
        (stop(), Some(Health::Stopped), None, None),
    ];
    for (signal, health, plan, dispatch) in cases {
        let mut h = Harness::owner();
        h.on(Input::Start);
        let heard = h.on(Input::Health(signal.clone()));
        match (&health, recorded(&heard)) {
            (None, None) => {}
            (Some(expected), Some(Event::Throttled { health, reason })) => {
                assert_eq!(health, expected, "{signal:?}");
                assert!(reason.as_deref().unwrap().starts_with("replica lag"));
                h.appended(recorded(&heard).unwrap().clone(), |p| p.health = *expected);
            }
            other => panic!("{signal:?}: recorded {other:?}"),
        }
        let stepped = script(&h.on(Input::Step));
        assert_eq!(
            stepped,
            plan.map(str::to_owned).into_iter().collect::<Vec<_>>(),
            "{signal:?}"
        );
        if plan.is_some() {
            let sent = h.answer(Answer::PlannedClaimed(Some((batch(1, 1), h.counts(1, 0)))));
            assert_eq!(script(&sent), [dispatch.unwrap()], "{signal:?}");
        }
    }
}

#[test]
fn a_stop_lets_the_sub_batch_in_flight_finish_and_sends_no_other_until_lifted() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    let heard = h.on(Input::Health(stop()));
    assert_eq!(script(&heard), ["Record(throttled)"]);
    assert!(
        heard.iter().any(|c| matches!(c, Command::Report)),
        "the stop is shown at once"
    );
    let event = recorded(&heard).unwrap().clone();
    assert!(script(&h.appended(event, |p| p.health = Health::Stopped)).is_empty());
    // The sub-batch in flight commits; no other starts.
    assert!(script(&h.on(committed(100, 100, false))).is_empty());
    assert!(script(&h.on(Input::Step)).is_empty());
    // Lifted: recorded, and the steps resume.
    let lifted = h.on(Input::Health(Signal::Normal));
    assert_eq!(script(&lifted), ["Record(throttled)"]);
    let event = recorded(&lifted).unwrap().clone();
    assert_eq!(
        script(&h.appended(event, |p| p.health = Health::Normal)),
        ["ScheduleStep(0ms)"]
    );
    assert_eq!(script(&h.on(Input::Step)), ["Dispatch(100)"]);
}

#[test]
fn a_helper_obeys_the_health_signal_without_recording_it() {
    let mut h = Harness::helper();
    h.on(Input::Start);
    assert!(script(&h.on(Input::Health(stop()))).is_empty());
    assert!(script(&h.on(Input::Step)).is_empty());
}

// Controls written by another process, found by the tick.

#[test]
fn a_pause_cancel_or_takeover_written_elsewhere_stops_without_yielding() {
    // (status read, holder's epoch, why)
    let cases = [
        (OperationStatus::Paused, Some(1), "paused"),
        (OperationStatus::Cancelled, None, "cancelled"),
        (OperationStatus::Running, Some(2), "taken over"),
    ];
    for (status, holder, why) in cases {
        let mut h = Harness::owner();
        h.in_flight(batch(1, 1));
        h.on(committed(100, 100, false));
        assert_eq!(script(&h.on(Input::Tick)), ["Reload"], "{why}");
        let mut state = h.counts(1, 0);
        state.status = status;
        // The sub-batch sent after the first is in flight: it finishes first.
        assert!(
            script(&h.answer(Answer::Reloaded { state, holder })).is_empty(),
            "{why}"
        );
        assert_eq!(h.driver.stopping(), Some(&Stopping::Released(why.into())));
        let settled = h.on(committed(100, 200, false));
        assert_eq!(script(&settled), ["ReleaseBatch", "Stop"], "{why}");
    }
}

#[test]
fn the_tick_renews_the_lease_every_third_of_its_time_to_live() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    h.advance(TTL / 3 - Duration::from_millis(1));
    assert_eq!(script(&h.on(Input::Tick)), ["Reload"]);
    h.answer(Answer::Reloaded {
        state: h.counts(1, 0),
        holder: Some(1),
    });
    h.advance(Duration::from_millis(1));
    assert_eq!(script(&h.on(Input::Tick)), ["RenewLease"]);
    let renewed = h.answer(Answer::Renewed(lease(1)));
    assert_eq!(script(&renewed), ["RenewBatchLease", "Reload"]);
}

#[test]
fn a_sub_batch_whose_worker_was_lost_is_given_up_and_its_batch_claimed_again() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    h.advance(TIMEOUT + TTL + Duration::from_millis(1));
    h.on(Input::Tick); // renews
    h.answer(Answer::Renewed(lease(1)));
    h.answer(Answer::Reloaded {
        state: h.counts(1, 0),
        holder: Some(1),
    });
    assert!(matches!(h.driver.phase, Phase::Idle));
    assert_eq!(script(&h.on(Input::Step)), ["Claim"]);
}

// Leases lost.

#[test]
fn a_batch_taken_over_mid_batch_is_let_go_without_recording_a_failure() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    let lost = store_error(StoreError::BatchLeaseLost {
        batch_id: 1,
        epoch: 1,
    });
    assert_eq!(script(&h.on(failed(lost))), ["ScheduleStep(0ms)"]);
    assert_eq!(h.driver.rows_in_batch(), 0);
    // The store may hold batches to finish: claimed before planning more.
    assert_eq!(script(&h.on(Input::Step)), ["Claim"]);
    assert_eq!(
        script(&h.answer(Answer::Claimed(None))),
        ["PlanAndClaim(1000)"]
    );
}

#[test]
fn a_batch_lost_while_its_outcome_is_recorded_is_let_go() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    h.on(committed(1_000, 1_000, true));
    let lost = store_error(StoreError::BatchLeaseLost {
        batch_id: 1,
        epoch: 1,
    });
    assert_eq!(script(&h.refused(lost)), ["ScheduleStep(0ms)"]);
    assert_eq!(script(&h.on(Input::Step)), ["Claim"]);
}

#[test]
fn a_lost_operation_lease_stops_the_actor_and_gives_its_batch_back() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    h.on(committed(1_000, 1_000, true));
    let lost = store_error(StoreError::LeaseLost {
        operation_id: 1,
        node: "n1".into(),
        epoch: 1,
    });
    assert_eq!(script(&h.refused(lost)), ["ReleaseBatch", "Stop"]);
    assert_eq!(
        h.driver.stopping(),
        Some(&Stopping::Released("lease lost".into()))
    );
}

// Failures.

#[test]
fn a_timed_out_sub_batch_is_retried_smaller_after_a_backoff() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    let out = h.on(failed(OperationError::TimedOut(TIMEOUT)));
    assert_eq!(script(&out), ["FailBatch(75)"]);
    let mut state = h.counts(1, 0);
    state.batch_failures = 1;
    let after = h.answer(Answer::BatchFailed(state));
    assert_eq!(
        script(&after),
        [format!("ScheduleStep({}ms)", backoff_ms(1))]
    );
    // The retry is claimed from the store (its attempt and size are there).
    assert_eq!(script(&h.on(Input::Step)), ["Claim"]);
}

#[test]
fn the_backoff_grows_with_the_attempt() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 2));
    h.on(failed(OperationError::Failed("boom".into())));
    let after = h.answer(Answer::BatchFailed(h.counts(1, 0)));
    assert_eq!(
        script(&after),
        [format!("ScheduleStep({}ms)", backoff_ms(2))]
    );
}

#[test]
fn a_store_that_cannot_be_used_is_waited_out_without_failing_the_batch() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    assert_eq!(
        script(&h.on(failed(unavailable()))),
        [format!("ScheduleStep({}ms)", backoff_ms(1))]
    );
    h.on(Input::Step);
    assert_eq!(
        script(&h.on(failed(unavailable()))),
        [format!("ScheduleStep({}ms)", backoff_ms(2))]
    );
    // The same batch goes on once the store answers.
    assert_eq!(script(&h.on(Input::Step)), ["Dispatch(100)"]);
}

#[test]
fn a_batch_at_its_attempt_limit_is_split_or_fails_the_operation() {
    // (batch, error, answer to a split, what is asked)
    let timed_out = || OperationError::TimedOut(TIMEOUT);
    let failure = || OperationError::Failed("constraint violated".into());
    let cases: [(ActiveBatch, OperationError, Vec<&str>); 4] = [
        // A range that keeps running out of time is cut in two.
        (batch(1, 3), timed_out(), vec!["Split(500, 75)"]),
        // Other errors do not get better with smaller ranges.
        (batch(1, 3), failure(), vec!["FailBatchAndOperation"]),
        // A loop batch has no range to cut.
        (loop_batch(3), timed_out(), vec!["FailBatchAndOperation"]),
        // Below the limit, an attempt is retried.
        (batch(1, 2), timed_out(), vec!["FailBatch(75)"]),
    ];
    for (open, error, expected) in cases {
        let mut h = Harness::owner();
        h.in_flight(open.clone());
        assert_eq!(script(&h.on(failed(error))), expected, "{open:?}");
    }
}

#[test]
fn a_split_halves_what_is_left_and_retries_after_a_backoff() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 3));
    h.on(committed(200, 200, false));
    let out = h.on(failed(OperationError::TimedOut(TIMEOUT)));
    assert_eq!(script(&out), ["Split(400, 75)"]);
    let after = h.answer(Answer::BatchSplit(Some(h.counts(2, 0))));
    assert_eq!(
        script(&after),
        [format!("ScheduleStep({}ms)", backoff_ms(3))]
    );
    assert_eq!(script(&h.on(Input::Step)), ["Claim"]);
}

#[test]
fn a_range_too_small_to_split_fails_the_operation() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 3));
    h.on(failed(OperationError::TimedOut(TIMEOUT)));
    let out = h.answer(Answer::BatchSplit(None));
    assert_eq!(script(&out), ["FailBatchAndOperation"]);
    let mut state = h.counts(1, 0);
    state.status = OperationStatus::Failed;
    let after = h.answer(Answer::OperationFailed {
        state,
        by_this: true,
    });
    assert_eq!(
        script(&after),
        ["Stop"],
        "the batch is the store's, nothing to give back"
    );
}

#[test]
fn a_failed_batch_of_an_operation_paused_meanwhile_waits_as_a_retry() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 3));
    h.on(failed(OperationError::Failed("boom".into())));
    let mut state = h.counts(1, 0);
    state.status = OperationStatus::Paused;
    let after = h.answer(Answer::OperationFailed {
        state,
        by_this: false,
    });
    assert_eq!(
        script(&after),
        [format!("ScheduleStep({}ms)", backoff_ms(3))]
    );
    assert_eq!(h.driver.stopping(), None, "the next tick finds the pause");
}

#[test]
fn too_many_failed_attempts_per_batch_fail_the_operation() {
    // (batches planned, failed attempts, fails)
    let cases = [(10, 5, false), (10, 6, true), (9, 9, false), (20, 11, true)];
    for (planned, failures, fails) in cases {
        let mut h = Harness::owner();
        h.in_flight(batch(1, 1));
        h.on(failed(OperationError::Failed("boom".into())));
        let mut state = h.counts(planned, 0);
        state.batch_failures = failures;
        let after = h.answer(Answer::BatchFailed(state));
        let expected = if fails {
            "Record(failed)".to_owned()
        } else {
            format!("ScheduleStep({}ms)", backoff_ms(1))
        };
        assert_eq!(script(&after), [expected], "{failures}/{planned}");
        if fails {
            let stopped = h.appended(recorded(&after).unwrap().clone(), |p| {
                p.status = OperationStatus::Failed;
            });
            assert_eq!(script(&stopped), ["Stop"]);
        }
    }
}

#[test]
fn a_decided_failure_is_recorded_even_when_a_shutdown_comes_first() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    h.on(failed(OperationError::Failed("boom".into())));
    let mut state = h.counts(10, 0);
    state.batch_failures = 9;
    let deciding = h.answer(Answer::BatchFailed(state));
    assert_eq!(script(&deciding), ["Record(failed)"]);
    // The write is refused by a passing fault; a shutdown arrives.
    let fault = store_error(StoreError::Database(sqlx::Error::PoolTimedOut));
    h.refused(fault);
    let out = h.on(Input::Shutdown);
    assert_eq!(
        script(&out),
        ["Record(failed)"],
        "failed, never yielded as runnable"
    );
}

#[test]
fn an_unexpected_error_fails_the_actor_for_its_supervisor_to_restart() {
    let mut h = Harness::owner();
    h.on(Input::Start);
    h.on(Input::Step);
    let out = h.refused(OperationError::Failed("the store answered nonsense".into()));
    assert_eq!(script(&out), ["Crash"]);
}

#[test]
fn a_passing_database_fault_is_retried_after_a_backoff() {
    let mut h = Harness::owner();
    h.on(Input::Start);
    h.on(Input::Step);
    let out = h.refused(unavailable());
    assert_eq!(script(&out), [format!("ScheduleStep({}ms)", backoff_ms(2))]);
    assert_eq!(script(&h.on(Input::Step)), ["PlanAndClaim(1000)"]);
}

// Limits.

#[test]
fn the_row_limit_yields_the_operation_after_the_batch_that_reached_it() {
    let mut p = projection();
    p.limits.max_rows_per_run = Some(150);
    let mut h = Harness::owner_of(p, settings());
    h.in_flight(batch(1, 1));
    assert_eq!(script(&h.on(committed(100, 100, false))), ["Dispatch(100)"]);
    // The limit is reached mid-batch: the batch completes, no next is planned.
    let closing = h.on(committed(900, 1_000, true));
    assert_eq!(script(&closing), ["Complete"]);
    let after = h.answer(Answer::Completed {
        state: h.counts(1, 1),
        next: None,
    });
    assert_eq!(script(&after), ["ScheduleStep(0ms)"]);
    let yielding = h.on(Input::Step);
    assert_eq!(script(&yielding), ["Record(yielded)"]);
    let Some(Event::Yielded { reason }) = recorded(&yielding) else {
        unreachable!()
    };
    assert_eq!(reason, "changed its limit of 150 rows in this run");
    let stopped = h.appended(recorded(&yielding).unwrap().clone(), |p| {
        p.status = OperationStatus::Pending;
    });
    assert_eq!(script(&stopped), ["Stop"]);
}

#[test]
fn the_runtime_limit_is_noticed_by_the_tick_and_yields_after_the_sub_batch() {
    let mut p = projection();
    p.limits.max_runtime_ms = Some(1_000);
    let mut h = Harness::owner_of(p, settings());
    h.in_flight(batch(1, 1));
    h.advance(Duration::from_millis(1_000));
    h.on(Input::Tick);
    let read = h.answer(Answer::Reloaded {
        state: h.counts(1, 0),
        holder: Some(1),
    });
    assert!(
        script(&read).is_empty(),
        "the sub-batch in flight settles first"
    );
    let out = h.on(committed(100, 100, false));
    assert_eq!(script(&out), ["ReleaseBatch", "Record(yielded)"]);
    let Some(Event::Yielded { reason }) = recorded(&out) else {
        unreachable!()
    };
    assert_eq!(reason, "ran for its limit of 1000 ms");
}

// Shutdown.

#[test]
fn a_shutdown_waits_for_the_sub_batch_in_flight_then_gives_the_operation_back() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    assert!(
        h.on(Input::Shutdown).is_empty(),
        "nothing until the sub-batch settles"
    );
    let out = h.on(committed(100, 100, false));
    assert_eq!(script(&out), ["ReleaseBatch", "Record(yielded)"]);
    let Some(Event::Yielded { reason }) = recorded(&out) else {
        unreachable!()
    };
    assert_eq!(reason, "node shutting down");
    let stopped = h.appended(recorded(&out).unwrap().clone(), |p| {
        p.status = OperationStatus::Pending;
    });
    assert_eq!(script(&stopped), ["Stop"]);
}

#[test]
fn a_shutdown_while_idle_yields_at_once() {
    let mut h = Harness::owner();
    h.on(Input::Start);
    assert_eq!(script(&h.on(Input::Shutdown)), ["Record(yielded)"]);
}

#[test]
fn a_helper_shutting_down_gives_back_its_batch_only() {
    let mut h = Harness::helper();
    h.on(Input::Start);
    assert_eq!(script(&h.on(Input::Step)), ["Claim"]);
    assert_eq!(
        script(&h.answer(Answer::Claimed(Some(batch(4, 1))))),
        ["Dispatch(100)"]
    );
    h.answer(Answer::Submitted(true));
    h.on(Input::Shutdown);
    assert_eq!(
        script(&h.on(committed(100, 3_100, false))),
        ["ReleaseBatch", "Stop"]
    );
}

// Helpers.

#[test]
fn a_helper_with_nothing_to_claim_looks_again_then_stops_after_a_third_of_a_lease() {
    // (time since its last batch, what follows an empty claim)
    let cases = [
        (
            Duration::ZERO,
            vec![format!("ScheduleStep({}ms)", (CONTROL / 4).as_millis())],
        ),
        (
            TTL / 3 - Duration::from_millis(1),
            vec![format!("ScheduleStep({}ms)", (CONTROL / 4).as_millis())],
        ),
        (TTL / 3, vec!["Stop".to_owned()]),
    ];
    for (idle, expected) in cases {
        let mut h = Harness::helper();
        h.on(Input::Start);
        h.advance(idle);
        assert_eq!(script(&h.on(Input::Step)), ["Claim"]);
        assert_eq!(
            script(&h.answer(Answer::Claimed(None))),
            expected,
            "{idle:?}"
        );
    }
}

#[test]
fn a_helper_never_plans_and_never_records_the_operation() {
    let mut h = Harness::helper();
    h.on(Input::Start);
    h.on(Input::Step);
    h.answer(Answer::Claimed(Some(batch(2, 1))));
    h.answer(Answer::Submitted(true));
    let closing = h.on(committed(1_000, 2_000, true));
    assert_eq!(script(&closing), ["Complete"], "no batch planned with it");
    let Some(Command::Complete { next_size, .. }) = closing.iter().find(|c| c.is_request()) else {
        unreachable!()
    };
    assert_eq!(*next_size, None, "the owner alone adapts the batch size");
}

#[test]
fn an_owner_with_helpers_plans_batches_ahead_up_to_the_parallel_count() {
    let mut s = settings();
    s.parallel_batches = 3;
    let mut h = Harness::owner_of(projection(), s);
    h.on(Input::Start);
    assert_eq!(script(&h.on(Input::Step)), ["Reload"]);
    let fresh = h.counts(0, 0);
    assert_eq!(
        script(&h.answer(Answer::Reloaded {
            state: fresh,
            holder: Some(1)
        })),
        ["PlanAhead(1000)"]
    );
    assert_eq!(
        script(&h.answer(Answer::PlannedAhead(Some(h.counts(1, 0))))),
        ["PlanAhead(1000)"]
    );
    assert_eq!(
        script(&h.answer(Answer::PlannedAhead(Some(h.counts(2, 0))))),
        ["PlanAhead(1000)"]
    );
    // Three unfinished: the owner claims one of them itself.
    assert_eq!(
        script(&h.answer(Answer::PlannedAhead(Some(h.counts(3, 0))))),
        ["Claim"]
    );
}

// Each input asks at most one request, and it is the last command.

#[test]
fn a_request_is_always_the_last_command_of_an_input() {
    let mut h = Harness::owner();
    let mut outputs = vec![h.in_flight(batch(1, 1))];
    outputs.push(h.on(committed(100, 100, false)));
    outputs.push(h.on(Input::Health(throttle(30))));
    outputs.push(h.on(failed(OperationError::TimedOut(TIMEOUT))));
    for out in outputs {
        let requests = out.iter().filter(|c| c.is_request()).count();
        assert!(requests <= 1, "{:?}", script(&out));
        if requests == 1 {
            assert!(out.last().unwrap().is_request(), "{:?}", script(&out));
        }
    }
}
