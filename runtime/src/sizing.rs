//! Pure arithmetic the operation actor runs on: the adaptive batch size,
//! retry backoff, and what a throttle does to sizes and pauses.
//!
//! [`BatchSizer`] moves the batch size toward a target batch duration. It
//! keeps the time efficiency (duration ÷ target) of the last 20 batches,
//! smooths them with exponentially decaying weights (the newest counts most),
//! and changes the size only when the smoothed efficiency leaves the
//! 0.90–0.95 band: by the factor that would bring it to the band's middle,
//! at most ×1.2 up and ×0.5 down per batch, clamped to `[min, max]`. Damped
//! steps and the dead band make it converge instead of oscillating.

use std::collections::VecDeque;
use std::time::Duration;

/// Adapts the batch size toward a target batch duration.
#[derive(Debug, Clone)]
pub struct BatchSizer {
    target: Duration,
    min: i64,
    max: i64,
    efficiencies: VecDeque<f64>,
}

/// Efficiencies remembered.
const WINDOW: usize = 20;
/// Weight ratio between one batch and the next older one.
const DECAY: f64 = 0.85;
/// The band of smoothed efficiency in which the size is left alone.
const BAND: (f64, f64) = (0.90, 0.95);
/// The largest growth per batch.
const MAX_GROWTH: f64 = 1.2;
/// The largest shrink per batch.
const MAX_SHRINK: f64 = 0.5;

impl BatchSizer {
    /// A sizer aiming at `target` per batch, keeping sizes in `[min, max]`.
    pub fn new(target: Duration, min: i64, max: i64) -> Self {
        let min = min.max(1);
        BatchSizer {
            target,
            min,
            max: max.max(min),
            efficiencies: VecDeque::with_capacity(WINDOW),
        }
    }

    /// Records that a batch of `size` rows took `took`, and returns the size
    /// for the next batch.
    pub fn observe(&mut self, size: i64, took: Duration) -> i64 {
        let target = self.target.as_secs_f64().max(1e-6);
        if self.efficiencies.len() == WINDOW {
            self.efficiencies.pop_front();
        }
        self.efficiencies.push_back(took.as_secs_f64() / target);
        let smoothed = self.smoothed();
        let size = size.max(1) as f64;
        let next = if smoothed <= 0.0 {
            size * MAX_GROWTH
        } else if smoothed < BAND.0 || smoothed > BAND.1 {
            let middle = (BAND.0 + BAND.1) / 2.0;
            size * (middle / smoothed).clamp(MAX_SHRINK, MAX_GROWTH)
        } else {
            size
        };
        (next.round() as i64).clamp(self.min, self.max)
    }

    /// The exponentially weighted mean of the remembered efficiencies.
    pub fn smoothed(&self) -> f64 {
        let mut weight = 1.0;
        let (mut sum, mut total) = (0.0, 0.0);
        for e in self.efficiencies.iter().rev() {
            sum += e * weight;
            total += weight;
            weight *= DECAY;
        }
        if total == 0.0 { 1.0 } else { sum / total }
    }
}

/// The wait before retry number `attempt` (1-based) of a failed sub-batch:
/// `base · 2^(attempt-1)`, capped at `cap`, with up to half of it replaced by
/// jitter drawn from `jitter` (0.0–1.0) so retries of many operations spread.
pub fn backoff(attempt: u32, base: Duration, cap: Duration, jitter: f64) -> Duration {
    let exponential = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    let capped = exponential.min(cap);
    capped.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// The sub-batch size after a failure: ×0.75, at least 1.
pub fn shrink_after_failure(size: i64) -> i64 {
    ((size as f64) * 0.75).floor().max(1.0) as i64
}

/// The wait after a sub-batch that took `took`, with the operation's own
/// `pause`, at `percent` of full speed: a duty cycle. Unthrottled, a cycle
/// is `took + pause`; at `percent` it is stretched to `(took + pause) ×
/// 100 / percent`, so the operation runs at `percent` of its unthrottled
/// pace whatever the sub-batch's size or the pause.
pub fn duty_cycle_pause(pause: Duration, took: Duration, percent: u8) -> Duration {
    if percent >= 100 {
        return pause;
    }
    let cycle = took + pause;
    let stretched = cycle.mul_f64(100.0 / f64::from(percent.max(1)));
    stretched.saturating_sub(took)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A synthetic workload whose cost per row is known: a batch of `n` rows
    /// takes `n · cost`. The size must settle where a batch takes 90–95 % of
    /// the target, and stay there.
    #[test]
    fn the_batch_size_converges_for_a_known_cost_per_row() {
        let cost = Duration::from_micros(250);
        let target = Duration::from_secs(2);
        let mut sizer = BatchSizer::new(target, 100, 1_000_000);
        let mut size = 1_000;
        let mut sizes = Vec::new();
        for _ in 0..200 {
            size = sizer.observe(size, cost * size as u32);
            sizes.push(size);
        }
        // 2 s / 250 µs = 8,000 rows at 100 %; the band is 7,200–7,600.
        let last = &sizes[150..];
        assert!(
            last.iter().all(|s| (7_100..=7_700).contains(s)),
            "did not settle: {:?}",
            &sizes[140..]
        );
        let (lo, hi) = (last.iter().min().unwrap(), last.iter().max().unwrap());
        assert!(hi - lo <= 50, "still oscillating between {lo} and {hi}");
    }

    #[test]
    fn a_cost_change_moves_the_size_in_damped_steps() {
        let target = Duration::from_secs(1);
        let mut sizer = BatchSizer::new(target, 10, 100_000);
        let mut size = 4_000;
        for _ in 0..100 {
            size = sizer.observe(size, Duration::from_micros(250) * size as u32);
        }
        let before = size;
        // The database gets 4x slower: the size shrinks, never by more than half a step.
        let mut previous = size;
        for _ in 0..100 {
            size = sizer.observe(size, Duration::from_micros(1_000) * size as u32);
            assert!(size * 2 >= previous, "{previous} -> {size}");
            previous = size;
        }
        assert!(size < before / 3, "{before} -> {size}");
    }

    proptest! {
        #[test]
        fn sizes_stay_within_bounds_and_steps_are_bounded(
            durations in prop::collection::vec(0u64..20_000, 1..60),
            min in 1i64..500,
            span in 0i64..50_000,
        ) {
            let max = min + span;
            let mut sizer = BatchSizer::new(Duration::from_millis(500), min, max);
            let mut size = min;
            for ms in durations {
                let next = sizer.observe(size, Duration::from_millis(ms));
                prop_assert!((min..=max).contains(&next));
                prop_assert!(next as f64 <= (size as f64 * MAX_GROWTH).round().max(min as f64) + 1.0);
                size = next;
            }
        }

        #[test]
        fn backoff_grows_and_is_capped(attempt in 1u32..40, jitter in 0.0f64..1.0) {
            let base = Duration::from_millis(100);
            let cap = Duration::from_secs(5);
            let wait = backoff(attempt, base, cap, jitter);
            prop_assert!(wait <= cap);
            prop_assert!(wait >= base / 2);
        }
    }

    #[test]
    fn a_throttle_is_a_duty_cycle_of_its_percentage() {
        let ms = Duration::from_millis;
        // 20 ms of work, no pause: at 50 % another 20 ms of rest.
        assert_eq!(duty_cycle_pause(ms(0), ms(20), 50), ms(20));
        // With a pause of 10 ms, the 30 ms cycle becomes 120 ms at 25 %.
        assert_eq!(duty_cycle_pause(ms(10), ms(20), 25), ms(100));
        assert_eq!(duty_cycle_pause(ms(10), ms(20), 100), ms(10));
        assert_eq!(shrink_after_failure(100), 75);
        assert_eq!(shrink_after_failure(1), 1);
    }

    proptest! {
        /// Work over the whole cycle is the throttle's share, within a
        /// millisecond's rounding.
        #[test]
        fn the_duty_cycle_gives_the_asked_share(
            took in 0u64..5_000, pause in 0u64..1_000, percent in 1u8..100,
        ) {
            let (took, pause) = (Duration::from_millis(took), Duration::from_millis(pause));
            let wait = duty_cycle_pause(pause, took, percent);
            prop_assert!(wait >= pause);
            let unthrottled = (took + pause).as_secs_f64();
            let throttled = (took + wait).as_secs_f64();
            if unthrottled > 0.0 {
                let share = unthrottled / throttled * 100.0;
                prop_assert!((share - f64::from(percent)).abs() < 0.01, "{share} for {percent}");
            }
        }
    }
}
