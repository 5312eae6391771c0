//! A sub-batch's failure: retries, backoff, splits, the failure ratio.

use super::*;

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
fn a_sub_batch_behind_the_stored_progress_has_its_batch_claimed_again() {
    // The store went away as a sub-batch committed: the worker heard a
    // fault, the store kept the sub-batch. The retry, from the worker's
    // older progress, is refused by the record (nothing kept); the batch is
    // given back and claimed again from the progress the store holds.
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    h.on(failed(unavailable()));
    assert_eq!(script(&h.on(Input::Step)), ["Dispatch(100)"]);
    let moved = store_error(StoreError::ProgressMoved { batch_id: 1 });
    assert_eq!(
        script(&h.on(failed(moved))),
        ["ReleaseBatch", "ScheduleStep(0ms)"]
    );
    assert_eq!(script(&h.on(Input::Step)), ["Claim"]);
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
