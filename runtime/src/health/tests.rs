use super::*;

fn throttle(percent: u8) -> Signal {
    Signal::Throttle {
        percent,
        reason: "x".into(),
    }
}

#[test]
fn an_unreadable_indicator_throttles_then_stops() {
    for failures in 1..UNKNOWN_STOP_AFTER {
        let signal = unknown_health("lag", failures, "denied");
        assert!(
            matches!(&signal, Signal::Throttle { percent, reason }
                if *percent == UNKNOWN_THROTTLE_PERCENT && reason.starts_with("health unknown: lag")),
            "{signal:?}"
        );
    }
    for failures in [UNKNOWN_STOP_AFTER, UNKNOWN_STOP_AFTER + 10] {
        let signal = unknown_health("lag", failures, "denied");
        assert!(
            matches!(&signal, Signal::Stop { reason } if reason.contains("denied")),
            "{signal:?}"
        );
    }
}

#[test]
fn the_worst_signal_wins() {
    let stop = Signal::Stop { reason: "s".into() };
    assert_eq!(worst(&Signal::Normal, &throttle(50)), throttle(50));
    assert_eq!(worst(&throttle(20), &throttle(50)), throttle(20));
    assert_eq!(worst(&throttle(20), &stop), stop);
    let snapshot = HealthSnapshot {
        global: Some(throttle(50)),
        tables: [("events".to_owned(), stop.clone())].into(),
    };
    assert_eq!(snapshot.for_table("events"), stop);
    assert_eq!(snapshot.for_table("other"), throttle(50));
}

#[test]
fn thresholds_hold_a_state_until_the_value_falls_clearly_below() {
    let t = Thresholds {
        throttle_at: 100.0,
        stop_at: 200.0,
        release: 0.8,
    };
    assert_eq!(t.classify(99.0, &Signal::Normal, "lag"), Signal::Normal);
    let throttled = t.classify(100.0, &Signal::Normal, "lag");
    assert!(matches!(throttled, Signal::Throttle { percent: 50, .. }));
    // Hovering just under the threshold does not release it...
    assert!(matches!(
        t.classify(95.0, &throttled, "lag"),
        Signal::Throttle { .. }
    ));
    // ...falling below 80 % of it does.
    assert_eq!(t.classify(79.0, &throttled, "lag"), Signal::Normal);
    let stopped = t.classify(250.0, &throttled, "lag");
    assert!(matches!(stopped, Signal::Stop { .. }));
    assert!(matches!(
        t.classify(170.0, &stopped, "lag"),
        Signal::Stop { .. }
    ));
    assert!(matches!(
        t.classify(150.0, &stopped, "lag"),
        Signal::Throttle { .. }
    ));
}
