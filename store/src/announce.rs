//! Operator controls announced at once on PostgreSQL: after a control's
//! event commits, `NOTIFY` names the operations it changed, and every
//! worker `LISTEN`ing wakes their actors instead of waiting for its next
//! control poll. The poll stays: a notification sent while a listener is
//! reconnecting is lost, and MySQL and SQLite have no notifications.

use crate::error::StoreError;
use crate::store::Store;
use sluice_target::connection::Backend;

/// The PostgreSQL channel controls are announced on.
pub const CONTROL_CHANNEL: &str = "sluice_control";

/// What an announcement names: some operations, or every one (a payload of
/// ids would not fit PostgreSQL's 8,000 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announced {
    /// These operations.
    Operations(Vec<i64>),
    /// Every operation.
    All,
}

/// Ids per payload at most; more announce [`Announced::All`].
const MAX_IDS: usize = 500;

impl Announced {
    /// Reads a payload [`Store::announce_controls`] sent; `None` for one it
    /// did not.
    pub fn parse(payload: &str) -> Option<Self> {
        if payload == "*" {
            return Some(Announced::All);
        }
        payload
            .split(',')
            .map(|id| id.parse().ok())
            .collect::<Option<Vec<i64>>>()
            .map(Announced::Operations)
    }

    fn payload(ids: &[i64]) -> String {
        if ids.len() > MAX_IDS {
            return "*".to_owned();
        }
        ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
    }
}

impl Store {
    /// On PostgreSQL, announces that controls changed operations `ids` (a
    /// `NOTIFY` on [`CONTROL_CHANNEL`], delivered to listeners when it
    /// commits); elsewhere, or without ids, nothing.
    pub async fn announce_controls(&self, ids: &[i64]) -> Result<(), StoreError> {
        let Backend::Postgres(pool) = self.backend() else {
            return Ok(());
        };
        if ids.is_empty() {
            return Ok(());
        }
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CONTROL_CHANNEL)
            .bind(Announced::payload(ids))
            .execute(pool)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_read_back_as_sent() {
        for ids in [vec![7], vec![1, 2, 300]] {
            assert_eq!(
                Announced::parse(&Announced::payload(&ids)),
                Some(Announced::Operations(ids))
            );
        }
        let many: Vec<i64> = (1..=(MAX_IDS as i64 + 1)).collect();
        assert_eq!(
            Announced::parse(&Announced::payload(&many)),
            Some(Announced::All)
        );
        for foreign in ["", "x", "1,,2", "1;2"] {
            assert_eq!(Announced::parse(foreign), None, "{foreign:?}");
        }
    }
}
