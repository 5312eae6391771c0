//! The operation state machine's tests: every transition, and random
//! histories replayed to the projection.

use super::*;
use crate::operation_row::PROJECTION_COLUMNS;
use crate::spec::OperationSpec;
use proptest::prelude::*;
use sluice_target::cursor::CursorValue;

/// One step of a random history: which event to try, and numbers to build it from.
/// Most steps build a plausible event from the current state, so deep states are
/// reached; the rest are arbitrary, so illegal events are tried everywhere.
#[derive(Debug, Clone)]
struct Step {
    pick: u8,
    plausible: bool,
    n: i64,
}

fn step() -> impl Strategy<Value = Step> {
    (0u8..26, prop::bool::weighted(0.8), -3i64..50).prop_map(|(pick, plausible, n)| Step {
        pick,
        plausible,
        n,
    })
}

fn spec(columns: usize, max: Option<i64>) -> OperationSpec {
    let mut spec = OperationSpec::new("k", "t", (0..columns).map(|i| format!("c{i}")).collect());
    spec.max_cursor = max.map(Cursor::int);
    spec
}

fn build(step: &Step, state: &Projection) -> Event {
    let n = step.n;
    let next_ordinal = if step.plausible {
        state.batches_planned + 1
    } else {
        n
    };
    let known = if step.plausible {
        state.batches_planned.max(1)
    } else {
        n
    };
    // Planning and batch outcomes come up often, terminal events rarely, so
    // histories get deep (see `random_histories_reach_deep_states`).
    let category = match step.pick {
        0..=2 => 0,
        3..=8 => 1,
        9..=13 => 3,
        14 => 5,
        15 => 6,
        16 => 7,
        17 => 8,
        18 => 9,
        19..=21 => 10,
        22 => 11,
        23 => 13,
        24 => 14,
        _ => 12,
    };
    match category {
        0 => Event::Started {
            node: format!("node-{n}"),
        },
        1 | 2 => {
            let width = state.batching_columns.len();
            let (start, end) = if width == 0 {
                (None, None)
            } else {
                let from = state.cursor.as_ref().map(|c| match c.0[0] {
                    CursorValue::Int(v) => v,
                    CursorValue::Text(_) | CursorValue::Timestamp(_) | CursorValue::Bytes(_) => 0,
                });
                let to = from.unwrap_or(0) + if step.plausible { n.abs() + 1 } else { n };
                // As wide as the batching columns; the first column moves.
                let end = std::iter::once(CursorValue::Int(to))
                    .chain((1..width).map(|_| CursorValue::Int(0)))
                    .collect();
                (state.cursor.clone(), Some(Cursor(end)))
            };
            Event::BatchPlanned {
                ordinal: next_ordinal,
                start,
                end,
                size: n.max(1),
            }
        }
        3 | 4 => Event::BatchSucceeded {
            ordinal: known,
            rows: if step.plausible { n.abs() } else { n },
            duration_ms: 5,
            next_batch_size: (n % 3 == 0).then_some(n),
        },
        5 => Event::BatchFailed {
            ordinal: known,
            attempt: 1,
            error: "timeout".into(),
            next_sub_batch_size: Some(n),
        },
        6 => Event::Throttled {
            health: match n % 3 {
                0 => Health::Stopped,
                1 => Health::Throttled {
                    percent: n.clamp(0, 120) as u8,
                },
                _ => Health::Normal,
            },
            reason: Some("lag".into()),
        },
        7 => Event::Yielded {
            reason: "max rows".into(),
        },
        8 => Event::Paused {
            reason: "operator".into(),
        },
        9 => Event::Resumed,
        10 => {
            if n % 4 != 0 {
                Event::Finished
            } else {
                Event::Failed {
                    error: "boom".into(),
                }
            }
        }
        11 => Event::Cancelled {
            reason: "operator".into(),
        },
        13 => {
            // Plausible: one step behind the cursor's first column.
            let width = state.batching_columns.len();
            let at = match (&state.cursor, step.plausible) {
                (Some(cursor), true) => {
                    let mut values = cursor.0.clone();
                    if let CursorValue::Int(v) = values[0] {
                        values[0] = CursorValue::Int(v - 1 - n.abs() % 3);
                    }
                    Cursor(values)
                }
                _ => Cursor(vec![CursorValue::Int(n); width.max(1)]),
            };
            Event::BatchSplit {
                ordinal: known,
                at,
                new_ordinal: next_ordinal,
            }
        }
        14 => Event::Reverted { by: n },
        _ => {
            if step.plausible {
                Event::Retried
            } else {
                Event::Created(Box::new(spec(1, None)))
            }
        }
    }
}

/// Invariants every reachable projection satisfies.
fn check_invariants(p: &Projection) -> Result<(), TestCaseError> {
    prop_assert!(p.batches_succeeded <= p.batches_planned);
    prop_assert!(p.rows_done >= 0 && p.batch_size > 0 && p.sub_batch_size > 0);
    let ended = matches!(
        p.status,
        OperationStatus::Finished | OperationStatus::Failed | OperationStatus::Cancelled
    );
    prop_assert_eq!(p.finished_at.is_some(), ended);
    if p.status == OperationStatus::Finished {
        prop_assert_eq!(p.batches_succeeded, p.batches_planned);
    }
    if let (Some(c), Some(max)) = (&p.cursor, &p.max_cursor) {
        prop_assert!(c <= max);
    }
    if p.status == OperationStatus::Running {
        prop_assert!(p.started_at.is_some() && p.node.is_some());
    }
    Ok(())
}

/// The transition table of the module docs, written independently of `transition`.
fn table_allows(from: OperationStatus, kind: &str) -> bool {
    use OperationStatus::*;
    match kind {
        "started" => matches!(from, Pending | Running),
        "batch_planned" | "batch_split" | "throttled" | "yielded" | "finished" => from == Running,
        "batch_succeeded" | "batch_failed" => from != Finished,
        "paused" => matches!(from, Pending | Running),
        "resumed" => from == Paused,
        "failed" => matches!(from, Pending | Running),
        "cancelled" => matches!(from, Pending | Running | Paused | Failed),
        "retried" => from == Failed,
        "reverted" => matches!(from, Finished | Cancelled),
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// Random histories: every accepted event leads to a state satisfying the
    /// invariants, every refusal leaves the state alone, and the accepted log
    /// replays to exactly the final projection.
    #[test]
    fn random_histories_stay_legal_and_replay(
        columns in 0usize..3,
        max in prop::option::of(1i64..400),
        steps in prop::collection::vec(step(), 0..80),
    ) {
        let created = Event::Created(Box::new(spec(columns, max)));
        let (mut state, _) = apply(None, &created, 1_000).unwrap();
        let mut log = vec![(created, 1_000)];
        let mut cursors = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            let at = 1_001 + i as i64;
            let event = build(step, &state);
            if let Ok((next, _effects)) = apply(Some(&state), &event, at) {
                prop_assert!(table_allows(state.status, event.kind()), "accepted {} from {:?}", event.kind(), state.status);
                prop_assert_eq!(next.last_seq, state.last_seq + 1);
                check_invariants(&next)?;
                // An append writes only the columns an event can change.
                for column in PROJECTION_COLUMNS.iter().filter(|c| !c.changes) {
                    prop_assert_eq!((column.value)(&next), (column.value)(&state), "{} changed", column.name);
                }
                if let Event::BatchPlanned { end: Some(end), .. } = &event {
                    cursors.push(end.clone());
                }
                state = next;
                log.push((event, at));
            }
        }
        // Cursor order: planned batch ends strictly increase.
        prop_assert!(cursors.windows(2).all(|w| w[0] < w[1]));
        let replayed = replay(log.iter().map(|(e, at)| (e, *at))).unwrap().unwrap();
        prop_assert_eq!(replayed.last_seq, log.len() as i64);
        prop_assert_eq!(replayed, state);
    }

    /// From any reachable status, an event the table forbids is refused with a
    /// typed error, never applied.
    #[test]
    fn forbidden_events_are_refused(steps in prop::collection::vec(step(), 0..40), probe in step()) {
        let (mut state, _) = apply(None, &Event::Created(Box::new(spec(1, None))), 0).unwrap();
        for step in &steps {
            if let Ok((next, _)) = apply(Some(&state), &build(step, &state), 1) {
                state = next;
            }
        }
        let event = build(&probe, &state);
        if !table_allows(state.status, event.kind()) {
            let refused = apply(Some(&state), &event, 2);
            prop_assert!(refused.is_err(), "{} from {:?} was accepted", event.kind(), state.status);
        }
    }
}

/// The random histories above are only worth something if they reach deep
/// states; this counts, over a fixed sequence of generated histories, how
/// many finish after real batches and how many plan several batches.
#[test]
fn random_histories_reach_deep_states() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let histories = (
        0usize..3,
        prop::option::of(1i64..400),
        prop::collection::vec(step(), 0..80),
    );
    let (mut finished, mut several_batches, mut splits) = (0, 0, 0);
    for _ in 0..4000 {
        let (columns, max, steps) = histories.new_tree(&mut runner).unwrap().current();
        let mut state = apply(None, &Event::Created(Box::new(spec(columns, max))), 0)
            .unwrap()
            .0;
        for step in &steps {
            let event = build(step, &state);
            if let Ok((next, _)) = apply(Some(&state), &event, 1) {
                splits += usize::from(matches!(event, Event::BatchSplit { .. }));
                state = next;
            }
        }
        finished +=
            usize::from(state.status == OperationStatus::Finished && state.batches_succeeded > 0);
        several_batches += usize::from(state.batches_planned >= 3);
    }
    eprintln!(
        "of 4000 histories: {finished} finished after batches, {several_batches} planned 3+ batches, \
         {splits} accepted splits"
    );
    assert!(
        finished >= 100 && several_batches >= 250 && splits >= 100,
        "{finished} {several_batches} {splits}"
    );
}

fn running() -> Projection {
    let (p, _) = apply(None, &Event::Created(Box::new(spec(1, Some(100)))), 0).unwrap();
    apply(Some(&p), &Event::Started { node: "a".into() }, 1)
        .unwrap()
        .0
}

#[test]
fn the_first_event_must_be_created() {
    assert_eq!(
        apply(None, &Event::Finished, 0).unwrap_err(),
        IllegalTransition::NotCreated { event: "finished" }
    );
}

#[test]
fn effects_say_what_the_store_and_runtime_must_do() {
    let p = running();
    let planned = Event::BatchPlanned {
        ordinal: 1,
        start: None,
        end: Some(Cursor::int(10)),
        size: 10,
    };
    let (p, effects) = apply(Some(&p), &planned, 2).unwrap();
    assert!(effects.is_empty());
    let (paused, effects) = apply(
        Some(&p),
        &Event::Paused {
            reason: "op".into(),
        },
        3,
    )
    .unwrap();
    assert_eq!(effects, vec![Effect::ReleaseLease]);
    // The batch in flight when the pause arrived still records its outcome.
    let done = Event::BatchSucceeded {
        ordinal: 1,
        rows: 10,
        duration_ms: 3,
        next_batch_size: None,
    };
    let (paused, effects) = apply(Some(&paused), &done, 4).unwrap();
    assert!(effects.is_empty());
    assert_eq!(
        (paused.status, paused.rows_done),
        (OperationStatus::Paused, 10)
    );
}

#[test]
fn cursor_may_not_go_back_or_skip() {
    let p = running();
    let first = Event::BatchPlanned {
        ordinal: 1,
        start: None,
        end: Some(Cursor::int(10)),
        size: 10,
    };
    let (p, _) = apply(Some(&p), &first, 2).unwrap();
    // A gap after the cursor, an end before it, an end past the maximum.
    for (start, end) in [(12, 20), (10, 5), (10, 101)] {
        let planned = Event::BatchPlanned {
            ordinal: 2,
            start: Some(Cursor::int(start)),
            end: Some(Cursor::int(end)),
            size: 10,
        };
        assert!(
            matches!(
                apply(Some(&p), &planned, 3),
                Err(IllegalTransition::CursorOrder { .. })
            ),
            "({start}, {end}] was accepted"
        );
    }
}

/// Under `en_US` or MySQL's `utf8mb4_general_ci`, `apple` < `Banana` <
/// `cherry`, though `B` sorts first by bytes: the database's order, which
/// planned the batches, is not second-guessed where text decides; where a
/// number or a time decides, or two texts are the same, it still is.
#[test]
fn text_cursors_are_ordered_by_the_database_not_their_bytes() {
    let text = |s: &str| Cursor(vec![CursorValue::Text(s.into())]);
    let mut by_name = spec(1, None);
    by_name.min_cursor = Some(text("apple"));
    by_name.max_cursor = Some(text("cherry"));
    let (p, _) = apply(None, &Event::Created(Box::new(by_name)), 0).unwrap();
    let (mut p, _) = apply(Some(&p), &Event::Started { node: "a".into() }, 1).unwrap();
    let plan = |ordinal, start: Option<&str>, end: &str| Event::BatchPlanned {
        ordinal,
        start: start.map(text),
        end: Some(text(end)),
        size: 1,
    };
    for (ordinal, start, end) in [(1, None, "apple"), (2, Some("apple"), "Banana")] {
        p = apply(Some(&p), &plan(ordinal, start, end), ordinal + 1)
            .unwrap()
            .0;
    }
    assert!(matches!(
        apply(Some(&p), &plan(3, Some("Banana"), "Banana"), 4),
        Err(IllegalTransition::CursorOrder { .. })
    ));
    // A keyset whose time goes back is refused whatever its text says.
    let at = |s: &str, name: &str| {
        Cursor(vec![
            CursorValue::Timestamp(s.parse().unwrap()),
            CursorValue::Text(name.into()),
        ])
    };
    let (p, _) = apply(None, &Event::Created(Box::new(spec(2, None))), 0).unwrap();
    let (p, _) = apply(Some(&p), &Event::Started { node: "a".into() }, 1).unwrap();
    let first = Event::BatchPlanned {
        ordinal: 1,
        start: None,
        end: Some(at("2026-01-02T00:00:00Z", "a")),
        size: 1,
    };
    let (p, _) = apply(Some(&p), &first, 2).unwrap();
    let back = Event::BatchPlanned {
        ordinal: 2,
        start: Some(at("2026-01-02T00:00:00Z", "a")),
        end: Some(at("2026-01-01T00:00:00Z", "z")),
        size: 1,
    };
    assert!(matches!(
        apply(Some(&p), &back, 3),
        Err(IllegalTransition::CursorOrder { .. })
    ));
}

#[test]
fn finishing_requires_every_planned_batch() {
    let p = running();
    let planned = Event::BatchPlanned {
        ordinal: 1,
        start: None,
        end: Some(Cursor::int(10)),
        size: 10,
    };
    let (p, _) = apply(Some(&p), &planned, 2).unwrap();
    assert_eq!(
        apply(Some(&p), &Event::Finished, 3).unwrap_err(),
        IllegalTransition::UnfinishedBatches {
            succeeded: 0,
            planned: 1
        }
    );
}
