//! The normal flow: plan, send sub-batches one at a time, record, finish;
//! helpers and owners sharing an operation.

use super::*;

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

#[test]
fn a_range_batch_goes_on_after_keeping_a_partition_and_sets_no_batch_size() {
    let kept = |rows: u64| {
        let outcome = SubBatchOutcome {
            rows,
            reached: None,
            last: false,
            dropped: Some("events_2025_01".into()),
        };
        Input::SubBatchDone(Ok(outcome), Duration::from_millis(400))
    };
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    let next = h.on(kept(50_000));
    assert_eq!(script(&next), ["Dispatch(100)"], "the range is not done");
    let Some(Command::Dispatch(request)) = next.iter().find(|c| matches!(c, Command::Dispatch(_)))
    else {
        unreachable!()
    };
    assert_eq!(request.from, Some(Cursor::int(0)), "from where it was");
    assert_eq!(h.driver.rows_in_batch(), 50_000, "the kept rows count");
    // The batch's rows were fast (5 ms of a 500 ms target), but a batch
    // that took a partition out does not grow the next one.
    assert_eq!(
        script(&h.on(committed(1_000, 1_000, true))),
        ["Complete+PlanAndClaim(1000)"]
    );
    // A loop's dropped partition is a batch of its own.
    let mut h = Harness::owner();
    h.in_flight(loop_batch(1));
    assert_eq!(script(&h.on(kept(50_000))), ["Complete+PlanAndClaim(1000)"]);
}
