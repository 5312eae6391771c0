//! Latency budgets and canary readings: how much foreground latency an
//! operation may cost (`operation:<id>`, `kind:<kind>` or `*`, the most
//! specific set one applying, auto when none is), and each target table's
//! latest canary p99, so any process reading the store can say whether the
//! budget binds.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::schedule::{kind_target, operation_target};
use crate::store::Store;
use sluice_target::on_pool;

/// The foreground latency an operation may cost, as the canary's p99.
/// Written `auto`, `off`, or a whole number and a unit: `us`, `ms` or `s`
/// (`5ms`, `800us`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum LatencyBudget {
    /// The canary's p99 measured before the work, ×1.5 and at least 1 ms
    /// above it (the default).
    #[default]
    Auto,
    /// No budget: only the health indicators pace the operation.
    Off,
    /// This p99 (at least 1 µs).
    Fixed(Duration),
}

impl LatencyBudget {
    /// How it is stored: microseconds, -1 for auto, 0 for off.
    pub fn stored(self) -> i64 {
        match self {
            LatencyBudget::Auto => -1,
            LatencyBudget::Off => 0,
            LatencyBudget::Fixed(p99) => i64::try_from(p99.as_micros()).unwrap_or(i64::MAX).max(1),
        }
    }

    /// The budget stored as `micros` ([`LatencyBudget::stored`]).
    pub fn from_stored(micros: i64) -> Self {
        match micros {
            ..0 => LatencyBudget::Auto,
            0 => LatencyBudget::Off,
            us => LatencyBudget::Fixed(Duration::from_micros(us.unsigned_abs())),
        }
    }
}

/// Why a latency budget was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "malformed latency budget `{0}`: expected auto, off, or a whole number and a unit (us, ms or s), e.g. 5ms"
)]
pub struct BudgetError(pub String);

impl std::str::FromStr for LatencyBudget {
    type Err = BudgetError;

    fn from_str(text: &str) -> Result<Self, BudgetError> {
        let refused = || BudgetError(text.to_owned());
        match text.trim() {
            "auto" => return Ok(LatencyBudget::Auto),
            "off" => return Ok(LatencyBudget::Off),
            _ => {}
        }
        let trimmed = text.trim();
        let split = trimmed
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(refused)?;
        let (number, unit) = trimmed.split_at(split);
        let n: u64 = number.parse().map_err(|_| refused())?;
        let budget = match unit {
            "us" | "µs" => Duration::from_micros(n),
            "ms" => Duration::from_millis(n),
            "s" if n <= 3_600 => Duration::from_secs(n),
            _ => return Err(refused()),
        };
        if budget.is_zero() {
            return Err(refused());
        }
        Ok(LatencyBudget::Fixed(budget))
    }
}

impl TryFrom<String> for LatencyBudget {
    type Error = BudgetError;

    fn try_from(text: String) -> Result<Self, BudgetError> {
        text.parse()
    }
}

impl From<LatencyBudget> for String {
    fn from(budget: LatencyBudget) -> String {
        budget.to_string()
    }
}

impl std::fmt::Display for LatencyBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LatencyBudget::Auto => f.write_str("auto"),
            LatencyBudget::Off => f.write_str("off"),
            LatencyBudget::Fixed(p99) if p99.subsec_nanos() % 1_000_000 == 0 => {
                write!(f, "{}ms", p99.as_millis())
            }
            LatencyBudget::Fixed(p99) => write!(f, "{}us", p99.as_micros()),
        }
    }
}

/// A worker's latest canary reading on one target table.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct CanaryReading {
    /// The table, as operations name it, and for a table in a database
    /// apart from the store, where: [`canary_key`].
    pub table_name: String,
    /// The rolling p99 of the canary's round trips, microseconds.
    pub p99_us: i64,
    /// The budget it was held to, microseconds (`None`: none applied).
    pub budget_us: Option<i64>,
    /// How many round trips the p99 is over.
    pub samples: i64,
    /// When it was measured, epoch milliseconds.
    pub measured_at: i64,
}

/// The longest key a reading is stored under (MySQL's column holds 255).
const CANARY_KEY_LENGTH: usize = 255;

/// The key a canary reading on `table` is stored under: the table as
/// operations name it; on a target apart from the store (its URL as
/// stored, without a password), `table@URL`, so that one table name on
/// many targets (a fleet) keeps a reading per target. Clipped to 255
/// characters.
pub fn canary_key(table: &str, target: Option<&str>) -> String {
    match target {
        None => table.to_owned(),
        Some(url) => format!("{table}@{url}")
            .chars()
            .take(CANARY_KEY_LENGTH)
            .collect(),
    }
}

impl CanaryReading {
    /// Whether this is a reading of `table`, the table whose health paces
    /// `state`'s operation (its own, or the one a revert writes), in the
    /// database it works in.
    pub fn is_of(&self, table: &str, state: &crate::Projection) -> bool {
        self.table_name == canary_key(table, state.target.as_deref())
    }

    /// Whether the p99 is over the budget it was held to.
    pub fn over_budget(&self) -> bool {
        self.budget_us.is_some_and(|budget| self.p99_us > budget)
    }

    /// As `show --json`, `list --json` and the console give it: the
    /// reading, whether it is over its budget, and its sentence.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "p99_us": self.p99_us,
            "budget_us": self.budget_us,
            "samples": self.samples,
            "measured_at": self.measured_at,
            "over_budget": self.over_budget(),
            "says": self.describe(),
        })
    }

    /// "canary p99 3.1 ms of a 5.0 ms budget", "canary p99 6.2 ms over a
    /// 5.0 ms budget", or "canary p99 0.4 ms" without one.
    pub fn describe(&self) -> String {
        let p99 = millis(Duration::from_micros(self.p99_us.unsigned_abs()));
        match self.budget_us {
            Some(budget) => {
                let word = if self.over_budget() { "over" } else { "of" };
                let budget = millis(Duration::from_micros(budget.unsigned_abs()));
                format!("canary p99 {p99} {word} a {budget} budget")
            }
            None => format!("canary p99 {p99}"),
        }
    }
}

/// `d` in milliseconds with one decimal (two under 1 ms; in microseconds
/// under 0.1 ms).
pub fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1_000.0;
    if ms < 0.1 {
        format!("{} µs", d.as_micros())
    } else if ms < 1.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

impl Store {
    /// Sets `target`'s latency budget (`operation:<id>`, `kind:<kind>` or `*`).
    pub async fn set_latency_budget(
        &self,
        target: &str,
        budget: LatencyBudget,
    ) -> Result<(), StoreError> {
        const UPSERT: &str = "INSERT INTO sluice_latency_budgets (target, budget_us) VALUES ($1, $2) \
             ON CONFLICT (target) DO UPDATE SET budget_us = excluded.budget_us";
        const MYSQL_UPSERT: &str = "INSERT INTO sluice_latency_budgets (target, budget_us) \
             VALUES ($1, $2) ON DUPLICATE KEY UPDATE budget_us = VALUES(budget_us)";
        let upsert = self.upsert(UPSERT, MYSQL_UPSERT);
        on_pool!(self, |pool| sqlx::query(upsert)
            .bind(target)
            .bind(budget.stored())
            .execute(pool)
            .await?
            .rows_affected());
        Ok(())
    }

    /// Removes `target`'s latency budget; false when it had none.
    pub async fn clear_latency_budget(&self, target: &str) -> Result<bool, StoreError> {
        const DELETE: &str = "DELETE FROM sluice_latency_budgets WHERE target = $1";
        self.delete_by_key(DELETE, target).await
    }

    /// Every latency budget set, by target.
    pub async fn latency_budgets(&self) -> Result<Vec<(String, LatencyBudget)>, StoreError> {
        const SELECT: &str = "SELECT target, budget_us FROM sluice_latency_budgets ORDER BY target";
        let rows: Vec<(String, i64)> =
            on_pool!(self, |pool| sqlx::query_as(SELECT).fetch_all(pool).await?);
        Ok(rows
            .into_iter()
            .map(|(target, us)| (target, LatencyBudget::from_stored(us)))
            .collect())
    }

    /// Writes `reading` as its table's latest, in its own transaction: the
    /// canary's write, whose round trip is part of what it measures.
    pub async fn record_canary(&self, reading: &CanaryReading) -> Result<(), StoreError> {
        const UPSERT: &str = "INSERT INTO sluice_canaries \
             (table_name, p99_us, budget_us, samples, measured_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (table_name) DO UPDATE SET p99_us = excluded.p99_us, \
             budget_us = excluded.budget_us, samples = excluded.samples, \
             measured_at = excluded.measured_at";
        const MYSQL_UPSERT: &str = "INSERT INTO sluice_canaries \
             (table_name, p99_us, budget_us, samples, measured_at) VALUES ($1, $2, $3, $4, $5) \
             ON DUPLICATE KEY UPDATE p99_us = VALUES(p99_us), budget_us = VALUES(budget_us), \
             samples = VALUES(samples), measured_at = VALUES(measured_at)";
        let upsert = self.upsert(UPSERT, MYSQL_UPSERT);
        on_pool!(self, |pool| sqlx::query(upsert)
            .bind(&reading.table_name)
            .bind(reading.p99_us)
            .bind(reading.budget_us)
            .bind(reading.samples)
            .bind(reading.measured_at)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(())
    }

    /// The canary readings of the last [`CANARY_FRESH_MS`], by table.
    pub async fn canaries(&self) -> Result<Vec<CanaryReading>, StoreError> {
        const SELECT: &str = "SELECT table_name, p99_us, budget_us, samples, measured_at \
             FROM sluice_canaries WHERE measured_at >= $1 ORDER BY table_name";
        let since = self.clock().now_ms() - CANARY_FRESH_MS;
        Ok(on_pool!(self, |pool| sqlx::query_as(SELECT)
            .bind(since)
            .fetch_all(pool)
            .await?))
    }
}

/// The budget operation `id` of `kind` obeys among `budgets`: its own,
/// else its kind's, else the one for everything, else auto.
pub fn budget_for(budgets: &[(String, LatencyBudget)], id: i64, kind: &str) -> LatencyBudget {
    budget_and_target(budgets, id, kind).0
}

/// [`budget_for`], with the target it was set for (`None`: the default).
pub fn budget_and_target(
    budgets: &[(String, LatencyBudget)],
    id: i64,
    kind: &str,
) -> (LatencyBudget, Option<String>) {
    [operation_target(id), kind_target(kind), "*".to_owned()]
        .iter()
        .find_map(|target| budgets.iter().find(|(t, _)| t == target))
        .map_or((LatencyBudget::Auto, None), |(target, budget)| {
            (*budget, Some(target.clone()))
        })
}

/// How old a canary reading may be to say anything of now: a worker
/// writes one every health poll while it runs an operation on the table.
pub const CANARY_FRESH_MS: i64 = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_survives_its_stored_form() {
        for budget in [
            LatencyBudget::Auto,
            LatencyBudget::Off,
            LatencyBudget::Fixed(Duration::from_micros(1)),
            LatencyBudget::Fixed(Duration::from_millis(5)),
        ] {
            assert_eq!(LatencyBudget::from_stored(budget.stored()), budget);
        }
        // Under a microsecond is stored as one, never as "off".
        assert_eq!(LatencyBudget::Fixed(Duration::from_nanos(10)).stored(), 1);
    }

    #[test]
    fn a_budget_is_read_as_operators_write_it_and_written_back_so() {
        for (text, budget) in [
            ("auto", LatencyBudget::Auto),
            ("off", LatencyBudget::Off),
            ("5ms", LatencyBudget::Fixed(Duration::from_millis(5))),
            ("800us", LatencyBudget::Fixed(Duration::from_micros(800))),
            ("2s", LatencyBudget::Fixed(Duration::from_secs(2))),
        ] {
            assert_eq!(text.parse::<LatencyBudget>(), Ok(budget));
            let again: LatencyBudget = budget.to_string().parse().unwrap();
            assert_eq!(again, budget);
        }
        for bad in [
            "",
            "5",
            "ms",
            "0ms",
            "-5ms",
            "5 parsecs",
            "2.5ms",
            "99999999999999999999ms",
            "7200s",
        ] {
            let error = bad.parse::<LatencyBudget>().unwrap_err();
            assert!(error.to_string().contains(&format!("`{bad}`")), "{error}");
        }
    }

    #[test]
    fn a_reading_on_a_target_apart_is_keyed_by_its_target() {
        assert_eq!(canary_key("items", None), "items");
        let a = canary_key("items", Some("postgres://app@db-1/app"));
        let b = canary_key("items", Some("postgres://app@db-2/app"));
        assert_ne!(a, b);
        assert_eq!(a, "items@postgres://app@db-1/app");
        let long = "x".repeat(400);
        assert_eq!(canary_key("items", Some(&long)).chars().count(), 255);
    }

    #[test]
    fn the_most_specific_budget_applies() {
        let five = LatencyBudget::Fixed(Duration::from_millis(5));
        let budgets = vec![
            ("*".to_owned(), LatencyBudget::Off),
            ("kind:purge".to_owned(), five),
            ("operation:7".to_owned(), LatencyBudget::Auto),
        ];
        assert_eq!(budget_for(&budgets, 7, "purge"), LatencyBudget::Auto);
        assert_eq!(budget_for(&budgets, 8, "purge"), five);
        assert_eq!(budget_for(&budgets, 8, "other"), LatencyBudget::Off);
        assert_eq!(budget_for(&[], 8, "other"), LatencyBudget::Auto);
    }

    #[test]
    fn a_reading_says_whether_it_is_within_its_budget() {
        let mut reading = CanaryReading {
            table_name: "events".into(),
            p99_us: 3_100,
            budget_us: Some(5_000),
            samples: 40,
            measured_at: 0,
        };
        assert_eq!(reading.describe(), "canary p99 3.1 ms of a 5.0 ms budget");
        reading.p99_us = 6_200;
        assert_eq!(reading.describe(), "canary p99 6.2 ms over a 5.0 ms budget");
        reading.budget_us = None;
        reading.p99_us = 420;
        assert_eq!(reading.describe(), "canary p99 0.42 ms");
    }
}
