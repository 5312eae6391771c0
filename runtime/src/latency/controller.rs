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
///
/// Nor does it go on down a ladder that stopped helping: when two steps
/// down in a row, from [`LADDER`]`[3]` on, each left the p99 no lower than
/// the reading that sent it there, the latency left is the database's own
/// at this pace (its idle latency drifted: a table or log grown, a load of
/// the application's). The controller goes back up a step and holds
/// there, over the budget, while the p99 stays within 10 % of that floor
/// ([`BudgetController::floor`]; `auto` takes it as its new idle value);
/// a p99 further over goes down again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetController {
    step: usize,
    /// The p99 that last sent the pace down, while it is down.
    pub(super) over: Option<Duration>,
    /// The p99 at full speed that started the descent, while it is down.
    at_full_speed: Option<Duration>,
    /// Steps down in a row that left the p99 no lower.
    unmoved: u8,
    /// The p99 the pace could not lower, while it holds.
    floor: Option<Duration>,
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

    /// The p99 that slowing down further did not lower, while the pace
    /// holds above it: the database's own latency at this pace.
    pub fn floor(&self) -> Option<Duration> {
        self.floor
    }

    /// Decides on a p99 of `p99` against `budget`; true when the pace changed.
    pub fn decide(&mut self, p99: Duration, budget: Duration) -> bool {
        if self.gave_up {
            return false;
        }
        let before = self.step;
        if p99 > budget && self.floor.is_some_and(|floor| p99 <= floor.mul_f64(1.1)) {
            // At the floor: slowing down does not lower it.
        } else if p99 > budget {
            self.floor = None;
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
            // At the ladder's foot no step was taken: nothing to judge.
            let bottom = self.step == LADDER.len() - 1;
            let no_lower = self.over.is_some_and(|over| p99 >= over);
            self.unmoved = match (self.step >= JUDGED_FROM, no_lower, bottom) {
                (_, _, true) => self.unmoved,
                (true, true, false) => self.unmoved + 1,
                _ => 0,
            };
            if self.unmoved >= 2 {
                self.step -= 1;
                self.unmoved = 0;
                self.floor = Some(p99);
                return self.step != before;
            }
            let steps = if p99 > budget.mul_f64(1.5) { 2 } else { 1 };
            self.step = (self.step + steps).min(LADDER.len() - 1);
            self.over = Some(p99);
        } else if p99 < budget.mul_f64(0.75) {
            self.step = self.step.saturating_sub(1);
            self.unmoved = 0;
            if self.step == 0 {
                self.over = None;
                self.at_full_speed = None;
                self.floor = None;
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

    #[test]
    fn a_ladder_that_stopped_lowering_the_p99_holds_above_its_floor() {
        let mut c = BudgetController::default();
        let budget = Duration::from_micros(1_600);
        let us = Duration::from_micros;
        // Far over at full speed, then lower with each step to 20 %...
        for p99 in [130_000, 9_600, 1_700] {
            assert!(c.decide(us(p99), budget));
        }
        assert_eq!(c.percent(), LADDER[5]);
        assert_eq!(c.floor(), None);
        // ...where two steps down leave it where it was: back up one, held.
        assert!(c.decide(us(1_700), budget));
        assert_eq!(c.percent(), LADDER[6]);
        assert!(c.decide(us(1_750), budget));
        assert_eq!(c.percent(), LADDER[5], "back up the useless step");
        assert_eq!(c.floor(), Some(us(1_750)));
        for p99 in [1_700, 1_800, 1_900] {
            assert!(!c.decide(us(p99), budget), "held within 10 % of the floor");
        }
        assert!(!c.gave_up());
        // Further over: this pace may be the cause again, so down it goes.
        assert!(c.decide(us(2_500), budget));
        assert_eq!(c.percent(), LADDER[7]);
        assert_eq!(c.floor(), None);
        // Under ¾ of the budget, up as before.
        assert!(c.decide(us(1_000), budget));
        assert_eq!(c.percent(), LADDER[6]);
    }

    proptest::proptest! {
        #[test]
        fn any_sequence_keeps_the_pace_on_the_ladder(
            readings in proptest::collection::vec(0u64..20_000, 0..200)
        ) {
            let mut c = BudgetController::default();
            for us in readings {
                let before = c.percent();
                let floor_before = c.floor();
                let changed = c.decide(Duration::from_micros(us), ms(5));
                let found_floor = floor_before.is_none() && c.floor().is_some();
                proptest::prop_assert!(LADDER.contains(&c.percent()));
                proptest::prop_assert_eq!(changed, before != c.percent());
                if c.gave_up() {
                    proptest::prop_assert_eq!(c.percent(), 100);
                    continue;
                }
                if found_floor {
                    let up = LADDER.iter().position(|p| *p == before).unwrap() - 1;
                    proptest::prop_assert_eq!(c.percent(), LADDER[up], "one step back up");
                } else if us > 5_000 {
                    proptest::prop_assert!(c.percent() <= before, "over budget never speeds up");
                }
                if us < 3_750 {
                    proptest::prop_assert!(c.percent() >= before, "well under never slows down");
                }
            }
        }
    }
}
