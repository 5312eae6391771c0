//! A rate limit: each sub-batch's rows are taken from the store's buckets
//! first, and the sub-batch waits as long as the store says.

use sluice_store::{RateLimit, RowsTaken};

use super::*;

fn limited() -> Settings {
    Settings {
        rate_limited: true,
        ..settings()
    }
}

fn taken(wait_ms: u64) -> Answer {
    Answer::RowsTaken(RowsTaken {
        wait: Duration::from_millis(wait_ms),
        binding: (wait_ms > 0).then(|| RateLimit {
            target: "kind:delete".into(),
            rows_per_second: 500,
        }),
    })
}

#[test]
fn each_sub_batch_takes_its_rows_and_waits_out_the_debt() {
    let mut h = Harness::owner_of(projection(), limited());
    h.on(Input::Start);
    assert_eq!(script(&h.on(Input::Step)), ["PlanAndClaim(1000)"]);
    let claimed = h.answer(Answer::PlannedClaimed(Some((batch(1, 1), h.counts(1, 0)))));
    assert_eq!(script(&claimed), ["TakeRows(100)"]);
    // In debt: the sub-batch waits 300 ms, however often a step comes.
    assert_eq!(script(&h.answer(taken(300))), ["ScheduleStep(300ms)"]);
    assert_eq!(
        h.driver.rate_binding().map(|l| l.rows_per_second),
        Some(500)
    );
    h.advance(Duration::from_millis(100));
    assert_eq!(script(&h.on(Input::Step)), ["ScheduleStep(200ms)"]);
    h.advance(Duration::from_millis(200));
    assert_eq!(script(&h.on(Input::Step)), ["Dispatch(100)"]);
    h.answer(Answer::Submitted(true));
    // The next one takes its rows again; none owed, it goes at once.
    assert_eq!(script(&h.on(committed(100, 100, false))), ["TakeRows(100)"]);
    assert_eq!(script(&h.answer(taken(0))), ["Dispatch(100)"]);
    assert!(h.driver.rate_binding().is_none());
}

#[test]
fn without_a_limit_no_rows_are_taken() {
    let mut h = Harness::owner();
    assert_eq!(script(&h.in_flight(batch(1, 1))), ["Dispatch(100)"]);
}
