//! What holds an operation back: the health signal, controls written by
//! another process, leases lost.

use super::*;

// Health.

#[test]
fn nothing_starts_before_the_first_health_reading() {
    let role = |_| Role::Owner { lease: lease(1) };
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
fn the_health_signal_sets_what_is_recorded_and_a_throttle_keeps_the_sizes() {
    // (signal, health recorded, batch planned, sub-batch sent): a throttle
    // slows the pace between sub-batches, not their sizes.
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
            Some("PlanAndClaim(1000)"),
            Some("Dispatch(100)"),
        ),
        (
            throttle(10),
            Some(Health::Throttled { percent: 10 }),
            Some("PlanAndClaim(1000)"),
            Some("Dispatch(100)"),
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
fn a_throttle_waits_a_duty_cycle_after_each_sub_batch() {
    // A sub-batch takes 5 ms here: at X % the next starts after
    // 5 ms × (100 / X − 1), so the work runs X % of the time.
    for (percent, wait) in [(50, "5ms"), (25, "15ms"), (10, "45ms")] {
        let mut h = Harness::owner();
        h.in_flight(batch(1, 1));
        h.on(Input::Health(throttle(percent)));
        let after = h.on(committed(100, 100, false));
        assert!(
            script(&after).contains(&format!("ScheduleStep({wait})")),
            "{percent}: {:?}",
            script(&after)
        );
    }
    // Unthrottled, the next sub-batch goes at once.
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    assert_eq!(script(&h.on(committed(100, 100, false))), ["Dispatch(100)"]);
}

#[test]
fn the_duty_cycle_counts_the_work_between_commits_not_only_the_statement() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    let heard = h.on(Input::Health(throttle(50)));
    h.appended(recorded(&heard).unwrap().clone(), |p| {
        p.health = Health::Throttled { percent: 50 }
    });
    // The first commit knows only its own 5 ms.
    let first = script(&h.on(committed(100, 100, false)));
    assert!(first.contains(&"ScheduleStep(5ms)".to_owned()), "{first:?}");
    h.advance(Duration::from_millis(5));
    assert_eq!(script(&h.on(Input::Step)), ["Dispatch(100)"]);
    // 10 ms from the end of the wait to the next commit, of which the
    // statement took 5: the cycle's work is 10 ms, and so is the wait.
    h.advance(Duration::from_millis(10));
    let second = script(&h.on(committed(100, 200, false)));
    assert!(
        second.contains(&"ScheduleStep(10ms)".to_owned()),
        "{second:?}"
    );
}

#[test]
fn a_throttle_aims_at_its_share_of_the_pace_measured_before_it() {
    let done = |reached: i64, took_ms: u64| {
        let outcome = SubBatchOutcome {
            rows: 100,
            reached: Some(Cursor::int(reached)),
            last: false,
            dropped: None,
        };
        Input::SubBatchDone(Ok(outcome), Duration::from_millis(took_ms))
    };
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    // Unthrottled: 100 rows every 50 ms, 2,000 rows a second.
    for n in 1..=4 {
        h.advance(Duration::from_millis(50));
        assert_eq!(script(&h.on(done(n * 100, 50))), ["Dispatch(100)"]);
    }
    let heard = h.on(Input::Health(throttle(50)));
    h.appended(recorded(&heard).unwrap().clone(), |p| {
        p.health = Health::Throttled { percent: 50 }
    });
    // The database answers faster with rests: 10 ms. At 50 % of 2,000
    // rows a second, 100 rows take 100 ms: 90 ms of rest (a share of the
    // time alone would rest 10 ms and run at 5 times the aimed pace).
    h.advance(Duration::from_millis(10));
    let after = script(&h.on(done(500, 10)));
    assert!(
        after.contains(&"ScheduleStep(90ms)".to_owned()),
        "{after:?}"
    );
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

/// A tick's read failing while a sub-batch runs must not let a second
/// sub-batch of the batch start: it would begin where the first one began
/// and change its rows again.
#[test]
fn a_tick_that_fails_while_a_sub_batch_runs_starts_no_second_one() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    assert_eq!(script(&h.on(Input::Tick)), ["Reload"]);
    let retry = h.refused(unavailable());
    assert_eq!(
        script(&retry),
        [format!("ScheduleStep({}ms)", backoff_ms(2))]
    );
    h.advance(Duration::from_millis(backoff_ms(2) as u64));
    assert!(
        script(&h.on(Input::Step)).is_empty(),
        "one sub-batch at a time"
    );
    // Its outcome comes; the next one starts where it ended.
    let next = h.on(committed(100, 100, false));
    assert_eq!(script(&next), ["Dispatch(100)"]);
    let Some(Command::Dispatch(request)) = next.iter().find(|c| matches!(c, Command::Dispatch(_)))
    else {
        unreachable!()
    };
    assert_eq!(request.from, Some(Cursor::int(100)));
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
