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

/// The tick's reads, answered: the operation's row (still ours, running)
/// and, when the tick asks, whether a limit applies now.
fn tick(h: &mut Harness, limited: bool) -> Vec<String> {
    let mut asked = script(&h.on(Input::Tick));
    if asked == ["RenewLease"] {
        asked = script(&h.answer(Answer::Renewed(lease(1))));
    }
    assert_eq!(
        asked.last().map(String::as_str),
        Some("Reload"),
        "{asked:?}"
    );
    let read = h.answer(Answer::Reloaded {
        state: h.counts(1, 0),
        holder: Some(1),
    });
    match script(&read).as_slice() {
        [] => vec![],
        [check] if check.starts_with("ReadSettings") => {
            let mut after = vec![check.clone()];
            after.extend(script(&h.answer(Answer::SettingsRead {
                rate_limited: limited,
                statistics: None,
            })));
            after
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_limit_set_while_it_runs_is_obeyed_from_the_next_check() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    // Within a second of its start the tick does not look.
    h.advance(Settings::REREAD / 2);
    assert!(tick(&mut h, true).is_empty());
    // A second on it does: a limit was set meanwhile.
    h.advance(Settings::REREAD / 2);
    assert_eq!(tick(&mut h, true), ["ReadSettings(false)"]);
    // Not again before another second.
    h.advance(Settings::REREAD / 2);
    assert!(tick(&mut h, true).is_empty());
    // The next sub-batch takes its rows first.
    assert_eq!(script(&h.on(committed(100, 100, false))), ["TakeRows(100)"]);
    assert_eq!(script(&h.answer(taken(0))), ["Dispatch(100)"]);
}

#[test]
fn a_limit_cleared_while_it_runs_lets_the_next_sub_batch_go_at_once() {
    let mut h = Harness::owner_of(projection(), limited());
    h.on(Input::Start);
    h.on(Input::Step);
    h.answer(Answer::PlannedClaimed(Some((batch(1, 1), h.counts(1, 0)))));
    assert_eq!(script(&h.answer(taken(0))), ["Dispatch(100)"]);
    h.answer(Answer::Submitted(true));
    h.advance(Settings::REREAD);
    assert_eq!(tick(&mut h, false), ["ReadSettings(false)"]);
    assert_eq!(script(&h.on(committed(100, 100, false))), ["Dispatch(100)"]);
    assert!(h.driver.rate_binding().is_none());
}
