//! A run window: outside it no batch opens and no sub-batch starts, while
//! a finished batch's outcome is still recorded.

use super::*;
use sluice_operations::window::RunWindow;

/// Owner settings with a window that closes 2 s after the harness starts.
fn closing_soon() -> Settings {
    Settings {
        window: Some(RunWindow::parse("06:00-12:00:02", "UTC").unwrap()),
        ..settings()
    }
}

#[test]
fn a_window_that_closes_mid_batch_starts_no_sub_batch_after_it() {
    let mut h = Harness::owner_of(projection(), closing_soon());
    h.in_flight(batch(1, 1));
    h.advance(Duration::from_secs(1));
    // Open: the next sub-batch goes.
    assert_eq!(script(&h.on(committed(100, 100, false))), ["Dispatch(100)"]);
    h.answer(Answer::Submitted(true));
    // Closed while that one ran: it commits, nothing else starts.
    h.advance(Duration::from_secs(2));
    assert_eq!(
        script(&h.on(committed(100, 200, false))),
        ["ScheduleStep(200ms)"]
    );
    assert_eq!(script(&h.on(Input::Step)), ["ScheduleStep(200ms)"]);
    assert_eq!(h.driver.rows_in_batch(), 200, "the batch stays open");
}

#[test]
fn a_finished_batch_is_recorded_after_the_window_closed_but_none_opens() {
    let mut h = Harness::owner_of(projection(), closing_soon());
    h.in_flight(batch(1, 1));
    h.advance(Duration::from_secs(3));
    // The batch's last sub-batch committed: its outcome is recorded, with
    // no next batch planned in the same commit.
    let out = h.on(committed(1_000, 1_000, true));
    assert_eq!(script(&out), ["Complete"]);
    h.answer(Answer::Completed {
        state: h.counts(1, 1),
        next: None,
    });
    assert_eq!(script(&h.on(Input::Step)), ["ScheduleStep(200ms)"]);
}

#[test]
fn an_open_window_changes_nothing() {
    let open = Settings {
        window: Some(RunWindow::parse("06:00-18:00", "UTC").unwrap()),
        ..settings()
    };
    let mut h = Harness::owner_of(projection(), open);
    assert_eq!(script(&h.in_flight(batch(1, 1))), ["Dispatch(100)"]);
}
