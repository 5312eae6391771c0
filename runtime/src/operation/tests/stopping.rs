//! Limits and shutdown: the operation yielded, its batch given back.

use super::*;

// Limits.

#[test]
fn the_row_limit_caps_the_last_sub_batch_and_yields_mid_batch() {
    let mut p = projection();
    p.limits.max_rows_per_run = Some(150);
    let mut h = Harness::owner_of(p, settings());
    h.in_flight(batch(1, 1));
    // 100 of 150 changed: the next sub-batch asks for the 50 left, not 100.
    assert_eq!(script(&h.on(committed(100, 100, false))), ["Dispatch(50)"]);
    // The limit reached mid-batch: the batch is given back with its
    // progress (the next run goes on from there), the operation yields.
    let out = h.on(committed(50, 150, false));
    assert_eq!(script(&out), ["ReleaseBatch", "Record(yielded)"]);
    let Some(Event::Yielded { reason }) = recorded(&out) else {
        unreachable!()
    };
    assert_eq!(reason, "changed its limit of 150 rows in this run");
    let stopped = h.appended(recorded(&out).unwrap().clone(), |p| {
        p.status = OperationStatus::Pending;
    });
    assert_eq!(script(&stopped), ["Stop"]);
}

#[test]
fn the_row_limit_reached_by_a_batch_s_last_sub_batch_yields_after_it() {
    let mut p = projection();
    p.limits.max_rows_per_run = Some(1_000);
    let mut h = Harness::owner_of(p, settings());
    h.in_flight(batch(1, 1));
    assert_eq!(script(&h.on(committed(900, 900, false))), ["Dispatch(100)"]);
    // The batch's last sub-batch reaches the limit: the batch completes,
    // no next is planned.
    let closing = h.on(committed(100, 1_000, true));
    assert_eq!(script(&closing), ["Complete"]);
    let after = h.answer(Answer::Completed {
        state: h.counts(1, 1),
        next: None,
    });
    assert_eq!(script(&after), ["ScheduleStep(0ms)"]);
    let yielding = h.on(Input::Step);
    assert_eq!(script(&yielding), ["Record(yielded)"]);
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
