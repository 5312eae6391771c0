//! The latency budget's controller: a pure decision, from the canary's
//! p99 and the budget, of the pace a table's operations run at.

use std::time::Duration;

use super::LADDER;

/// Moves a table's pace along [`LADDER`]: down a step when the p99 is over
/// the budget (two when over 1.5× it), up a step when it is under ¾ of it,
/// and stays otherwise. Each move asks for fresh round trips before the
/// next ([`super::MIN_SAMPLES`]): a decision never reads latencies the previous
/// pace caused.
///
/// A throttle waits only for what it brings about: when the pace is down
/// to [`LADDER`]`[3]` or below and the p99 is still over the budget and
/// not 10 % under what it was at full speed, the pace is not what holds
/// the canary back (on SQLite, a writer waits for a whole sub-batch, however
/// rare; elsewhere, a load of the application's own) and the controller
/// lets go for good ([`BudgetController::gave_up`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetController {
    step: usize,
    /// The p99 that last sent the pace down, while it is down.
    pub(super) over: Option<Duration>,
    /// The p99 at full speed that started the descent, while it is down.
    at_full_speed: Option<Duration>,
    gave_up: bool,
}

/// The step from which a pace that left the p99 where it was is let go.
const JUDGED_FROM: usize = 3;

impl BudgetController {
    /// The pace in force, a percentage of full speed.
    pub fn percent(&self) -> u8 {
        LADDER[self.step]
    }

    /// True once slowing down was seen not to lower the p99: the budget no
    /// longer paces this table.
    pub fn gave_up(&self) -> bool {
        self.gave_up
    }

    /// Decides on a p99 of `p99` against `budget`; true when the pace changed.
    pub fn decide(&mut self, p99: Duration, budget: Duration) -> bool {
        if self.gave_up {
            return false;
        }
        let before = self.step;
        if p99 > budget {
            let unmoved = self
                .at_full_speed
                .is_some_and(|full| p99 >= full.mul_f64(0.9));
            if self.step >= JUDGED_FROM && unmoved {
                *self = BudgetController {
                    gave_up: true,
                    ..BudgetController::default()
                };
                return before != 0;
            }
            if self.step == 0 {
                self.at_full_speed = Some(p99);
            }
            let steps = if p99 > budget.mul_f64(1.5) { 2 } else { 1 };
            self.step = (self.step + steps).min(LADDER.len() - 1);
            self.over = Some(p99);
        } else if p99 < budget.mul_f64(0.75) {
            self.step = self.step.saturating_sub(1);
            if self.step == 0 {
                self.over = None;
                self.at_full_speed = None;
            }
        }
        self.step != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_controller_slows_while_over_and_recovers_under_three_quarters() {
        let mut c = BudgetController::default();
        let budget = Duration::from_micros(100);
        assert_eq!(c.percent(), 100);
        let us = Duration::from_micros;
        assert!(!c.decide(us(80), budget), "between ¾ and the budget: stay");
        assert!(c.decide(us(160), budget), "over 1.5×: two steps");
        assert_eq!(c.percent(), LADDER[2]);
        assert!(c.decide(us(140), budget));
        assert_eq!(c.percent(), LADDER[3]);
        // Each slower pace keeps the p99 10 % under its full-speed value,
        // never under the budget.
        for p99 in [130, 125, 120, 115, 110, 105, 101, 101, 101] {
            c.decide(us(p99), budget);
        }
        assert_eq!(
            c.percent(),
            *LADDER.last().unwrap(),
            "never below the floor"
        );
        for _ in 0..LADDER.len() {
            c.decide(us(60), budget);
        }
        assert_eq!(c.percent(), 100);
        assert_eq!(c.over, None);
        assert!(!c.gave_up());
    }

    #[test]
    fn a_pace_that_does_not_move_the_p99_is_let_go() {
        let mut c = BudgetController::default();
        let budget = Duration::from_micros(1_400);
        assert!(c.decide(ms(30), budget));
        assert!(
            c.decide(ms(31), budget),
            "one unmoved step is tried further"
        );
        assert!(!c.gave_up());
        assert!(c.decide(ms(29), budget), "the second lets go");
        assert!(c.gave_up());
        assert_eq!(c.percent(), 100);
        assert!(!c.decide(ms(60), budget), "for good");
        assert_eq!(c.percent(), 100);
    }

    proptest::proptest! {
        #[test]
        fn any_sequence_keeps_the_pace_on_the_ladder(
            readings in proptest::collection::vec(0u64..20_000, 0..200)
        ) {
            let mut c = BudgetController::default();
            for us in readings {
                let before = c.percent();
                let changed = c.decide(Duration::from_micros(us), ms(5));
                proptest::prop_assert!(LADDER.contains(&c.percent()));
                proptest::prop_assert_eq!(changed, before != c.percent());
                if c.gave_up() {
                    proptest::prop_assert_eq!(c.percent(), 100);
                    continue;
                }
                if us > 5_000 {
                    proptest::prop_assert!(c.percent() <= before, "over budget never speeds up");
                }
                if us < 3_750 {
                    proptest::prop_assert!(c.percent() >= before, "well under never slows down");
                }
            }
        }
    }
}
