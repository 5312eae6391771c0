//! The plan-drift guard: the owner looks at the batch query's plan at the
//! start of its run and again when due; a plan that turned into a full scan
//! fails the operation.

use super::*;
use crate::operation::PlanCheckEvery;

const EVERY: PlanCheckEvery = PlanCheckEvery {
    interval: Duration::from_secs(30),
    batches: 10,
};

fn watched() -> Settings {
    Settings {
        plan_check: Some(EVERY),
        ..settings()
    }
}

fn looked(full_scan: Option<&str>) -> Answer {
    Answer::PlanChecked {
        full_scan: full_scan.map(str::to_owned),
        plan: vec![
            "Limit".to_owned(),
            format!(
                "  ->  {}",
                full_scan.unwrap_or("Index Scan using items_pkey on items")
            ),
        ],
    }
}

/// The owner's run up to its first batch in flight, the plan looked at
/// first and found to use an index.
fn started(h: &mut Harness) {
    assert_eq!(script(&h.on(Input::Start)), ["ScheduleStep(0ms)"]);
    assert_eq!(script(&h.on(Input::Step)), ["CheckPlan(1000)"]);
    assert_eq!(script(&h.answer(looked(None))), ["PlanAndClaim(1000)"]);
    let sent = h.answer(Answer::PlannedClaimed(Some((batch(1, 1), h.counts(1, 0)))));
    assert_eq!(script(&sent), ["Dispatch(100)"]);
    h.answer(Answer::Submitted(true));
}

#[test]
fn a_plan_that_turns_into_a_full_scan_fails_the_operation_naming_it() {
    let mut h = Harness::owner_of(projection(), watched());
    started(&mut h);
    // Within the interval the next batch is planned with the outcome.
    h.advance(Duration::from_secs(10));
    assert_eq!(
        script(&h.on(committed(1_000, 1_000, true))),
        ["Complete+PlanAndClaim(1200)"]
    );
    h.answer(Answer::Completed {
        state: h.counts(2, 1),
        next: Some(batch(2, 1)),
    });
    h.on(Input::Step);
    h.answer(Answer::Submitted(true));
    // Past it, the outcome goes alone: the plan is looked at first.
    h.advance(Duration::from_secs(25));
    assert_eq!(script(&h.on(committed(1_000, 2_000, true))), ["Complete"]);
    h.answer(Answer::Completed {
        state: h.counts(2, 2),
        next: None,
    });
    assert_eq!(script(&h.on(Input::Step)), ["CheckPlan(1000)"]);
    let out = h.answer(looked(Some("Seq Scan on items")));
    assert_eq!(script(&out), ["Record(failed)"]);
    let Some(Event::Failed { error }) = recorded(&out) else {
        unreachable!()
    };
    assert!(
        error.starts_with(
            "plan drift: the batch query now reads all of `items` (Seq Scan on items)"
        ),
        "{error}"
    );
    assert!(
        error.ends_with("Plan: Limit | ->  Seq Scan on items"),
        "{error}"
    );
    assert!(
        out.iter()
            .any(|c| matches!(c, Command::Trace(super::super::Note::PlanDrift { .. }))),
        "the drift is told"
    );
}

#[test]
fn the_plan_is_looked_at_again_after_so_many_batches_however_fast() {
    let mut h = Harness::owner_of(projection(), watched());
    started(&mut h);
    h.on(committed(1_000, 1_000, true));
    // Ten batches planned since the look: the next outcome goes alone.
    h.answer(Answer::Completed {
        state: h.counts(11, 10),
        next: Some(batch(11, 1)),
    });
    h.on(Input::Step);
    h.answer(Answer::Submitted(true));
    outcome_alone_then_a_look(&mut h, 11);
}

#[test]
fn a_plan_that_scans_from_the_run_s_start_is_told_and_run() {
    let mut h = Harness::owner_of(projection(), watched());
    h.on(Input::Start);
    assert_eq!(script(&h.on(Input::Step)), ["CheckPlan(1000)"]);
    let out = h.answer(looked(Some("Seq Scan on items")));
    assert_eq!(script(&out), ["PlanAndClaim(1000)"]);
    assert!(
        out.iter()
            .any(|c| matches!(c, Command::Trace(super::super::Note::PlanScans { .. }))),
        "the full scan is told"
    );
}

#[test]
fn a_helper_never_looks_at_the_plan() {
    let role = |t0| Role::Helper { busy_at: t0 };
    let mut h = Harness::new(role, projection(), watched(), true);
    h.on(Input::Start);
    assert_eq!(script(&h.on(Input::Step)), ["Claim"]);
}

/// Batch `ordinal`'s last sub-batch commits: its outcome is recorded
/// alone, and the plan is looked at (an index still) before the next
/// batch is planned.
fn outcome_alone_then_a_look(h: &mut Harness, ordinal: i64) {
    let reached = ordinal * 1_000;
    assert_eq!(script(&h.on(committed(1_000, reached, true))), ["Complete"]);
    h.answer(Answer::Completed {
        state: h.counts(ordinal, ordinal),
        next: None,
    });
    assert_eq!(script(&h.on(Input::Step)), ["CheckPlan(1000)"]);
    assert_eq!(script(&h.answer(looked(None))), ["PlanAndClaim(1000)"]);
}

/// The tick's reads with the target's statistics at `version`: the
/// operation's row, then (a second on) the settings.
fn tick_reading(h: &mut Harness, version: &str) {
    h.advance(Settings::REREAD);
    assert_eq!(script(&h.on(Input::Tick)), ["Reload"]);
    let read = h.answer(Answer::Reloaded {
        state: h.counts(1, 0),
        holder: Some(1),
    });
    assert_eq!(script(&read), ["ReadSettings(true)"]);
    let answered = h.answer(Answer::SettingsRead {
        rate_limited: false,
        statistics: Some(version.to_owned()),
    });
    assert!(script(&answered).is_empty());
}

#[test]
fn changed_statistics_make_the_owner_look_at_the_plan_before_the_next_batch() {
    let mut h = Harness::owner_of(projection(), watched());
    started(&mut h);
    // The same statistics twice: the next batch is planned with the outcome.
    tick_reading(&mut h, "3/2000/12");
    tick_reading(&mut h, "3/2000/12");
    assert_eq!(
        script(&h.on(committed(1_000, 1_000, true))),
        ["Complete+PlanAndClaim(1200)"]
    );
    h.answer(Answer::Completed {
        state: h.counts(2, 1),
        next: Some(batch(2, 1)),
    });
    h.on(Input::Step);
    h.answer(Answer::Submitted(true));
    // An ANALYZE since: well within the interval, the plan is looked at
    // before the next batch.
    tick_reading(&mut h, "4/1000/12");
    outcome_alone_then_a_look(&mut h, 2);
}

#[test]
fn a_helper_and_an_unwatched_owner_read_no_statistics() {
    let mut h = Harness::owner();
    h.in_flight(batch(1, 1));
    h.advance(Settings::REREAD);
    h.on(Input::Tick);
    let read = h.answer(Answer::Reloaded {
        state: h.counts(1, 0),
        holder: Some(1),
    });
    assert_eq!(script(&read), ["ReadSettings(false)"]);
}
