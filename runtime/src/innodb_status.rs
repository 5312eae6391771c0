//! What InnoDB's status report (`SHOW ENGINE INNODB STATUS`) says about
//! open transactions and lock waits, read as text.
//!
//! The report is generated when asked, so it is current at every read,
//! where `information_schema.innodb_trx` and `innodb_lock_waits` are a
//! cache that InnoDB refreshes only when no one has read it for 100 ms:
//! two pollers reading it every 60 ms between them see it frozen.

/// The transactions section of one InnoDB status report.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InnodbTransactions {
    /// How long the oldest active transaction has been open, in seconds (0
    /// without one).
    pub longest_seconds: u64,
    /// One entry per session waiting for a lock: the `(database, table)`
    /// whose lock it waits for.
    pub lock_waits: Vec<(String, String)>,
}

impl InnodbTransactions {
    /// Reads `report`, the `Status` column of `SHOW ENGINE INNODB STATUS`
    /// (MariaDB and MySQL print the lines read here alike). Lines it does
    /// not know are skipped, so a report cut short (InnoDB caps it at about
    /// 1 MB) reads as the transactions it lists.
    pub fn parse(report: &str) -> Self {
        let mut parsed = InnodbTransactions::default();
        let mut lock_follows = false;
        for line in report.lines() {
            if let Some(transaction) = line.strip_prefix("---TRANSACTION ") {
                if let Some(seconds) = active_seconds(transaction) {
                    parsed.longest_seconds = parsed.longest_seconds.max(seconds);
                }
            } else if line.starts_with("------- TRX HAS BEEN WAITING") {
                lock_follows = true;
            } else if lock_follows {
                lock_follows = false;
                if let Some(table) = locked_table(line) {
                    parsed.lock_waits.push(table);
                }
            }
        }
        parsed
    }

    /// How many sessions wait for a lock on `table` of `database`, names
    /// compared without regard to ASCII case (InnoDB prints them as stored,
    /// lower-cased under `lower_case_table_names`).
    pub fn waits_on(&self, database: &str, table: &str) -> usize {
        self.lock_waits
            .iter()
            .filter(|(d, t)| d.eq_ignore_ascii_case(database) && t.eq_ignore_ascii_case(table))
            .count()
    }
}

/// The seconds of `---TRANSACTION 25, ACTIVE 2 sec …` (or `ACTIVE
/// (PREPARED) 2 sec`); `None` for a transaction not started.
fn active_seconds(transaction: &str) -> Option<u64> {
    let (_, active) = transaction.split_once(", ACTIVE ")?;
    let active = active.strip_prefix("(PREPARED) ").unwrap_or(active);
    let (seconds, rest) = active.split_once(' ')?;
    rest.starts_with("sec").then(|| seconds.parse().ok())?
}

/// The table a waited-for lock is on, from the line after `TRX HAS BEEN
/// WAITING`: `RECORD LOCKS … index PRIMARY of table "db"."t" trx id …` or
/// `TABLE LOCK table "db"."t" trx id …` (the name's quotes as [`quoted`]).
fn locked_table(lock: &str) -> Option<(String, String)> {
    let name = if lock.starts_with("RECORD LOCKS ") {
        &lock[lock.rfind(" of table ")? + " of table ".len()..]
    } else {
        lock.strip_prefix("TABLE LOCK table ")?
    };
    let (database, rest) = quoted(name)?;
    let (table, _) = quoted(rest.strip_prefix('.')?)?;
    Some((database, table))
}

/// A quoted name at the start of `text`, and what follows it. InnoDB quotes
/// as the reading session's `sql_mode` does: in back quotes, or in double
/// quotes under `ANSI_QUOTES` (as Sluice's sessions run); a doubled quote
/// inside is one.
fn quoted(text: &str) -> Option<(String, &str)> {
    let mark = text.chars().next().filter(|c| matches!(c, '`' | '"'))?;
    let mut rest = &text[1..];
    let mut name = String::new();
    loop {
        let end = rest.find(mark)?;
        name.push_str(&rest[..end]);
        rest = &rest[end + 1..];
        match rest.strip_prefix(mark) {
            Some(after) => {
                name.push(mark);
                rest = after;
            }
            None => return Some((name, rest)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transactions section of a MariaDB 10.11 report: two sessions
    /// waiting for a row lock another holds (the second read by a session
    /// under `ANSI_QUOTES`), one for a table lock, one idle.
    const REPORT: &str = r#"------------
TRANSACTIONS
------------
Trx id counter 26
Purge done for trx's n:o < 24 undo n:o < 0 state: running but idle
History list length 0
LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION 25, ACTIVE 2 sec starting index read
mysql tables in use 1, locked 1
LOCK WAIT 2 lock struct(s), heap size 1128, 1 row lock(s)
MariaDB thread id 9, OS thread handle 140331519964864, query id 24 127.0.0.1 root Updating
update `rp_LockMe` set v=4 where id=1
------- TRX HAS BEEN WAITING 2008234 us FOR THIS LOCK TO BE GRANTED:
RECORD LOCKS space id 5 page no 3 n bits 320 index PRIMARY of table `app`.`rp_LockMe` trx id 25 lock_mode X locks rec but not gap waiting
Record lock, heap no 2 PHYSICAL RECORD: n_fields 4; compact format; info bits 0
 0: len 4; hex 80000001; asc     ;;

------------------
---TRANSACTION 27, ACTIVE 1 sec
------- TRX HAS BEEN WAITING 1 SEC FOR THIS LOCK TO BE GRANTED:
TABLE LOCK table `odd``db`.`t` trx id 27 lock mode IX waiting
------------------
---TRANSACTION 29, ACTIVE 0 sec starting index read
------- TRX HAS BEEN WAITING 1 SEC FOR THIS LOCK TO BE GRANTED:
RECORD LOCKS space id 803 page no 3 n bits 320 index PRIMARY of table "app"."rp_LockMe" trx id 29 lock_mode X waiting
------------------
---TRANSACTION 24, ACTIVE 314 sec
2 lock struct(s), heap size 1128, 1 row lock(s), undo log entries 1
MariaDB thread id 8, OS thread handle 140331520272064, query id 22 127.0.0.1 root User sleep
---TRANSACTION 28, ACTIVE (PREPARED) 7 sec
---TRANSACTION (0x7fa17b7d9b80), not started
0 lock struct(s), heap size 1128, 0 row lock(s)
--------
FILE I/O
--------
"#;

    #[test]
    fn a_report_gives_the_oldest_transaction_and_each_lock_wait() {
        let parsed = InnodbTransactions::parse(REPORT);
        assert_eq!(parsed.longest_seconds, 314);
        assert_eq!(
            parsed.lock_waits,
            vec![
                ("app".to_owned(), "rp_LockMe".to_owned()),
                ("odd`db".to_owned(), "t".to_owned()),
                ("app".to_owned(), "rp_LockMe".to_owned()),
            ]
        );
        assert_eq!(parsed.waits_on("app", "rp_lockme"), 2);
        assert_eq!(parsed.waits_on("other", "rp_LockMe"), 0);
        assert_eq!(parsed.waits_on("odd`db", "t"), 1);
    }

    #[test]
    fn lines_it_does_not_know_read_as_nothing() {
        for report in [
            "",
            "---TRANSACTION 9, ACTIVE soon sec",
            "---TRANSACTION 9, ACTIVE 12 minutes",
            "------- TRX HAS BEEN WAITING 1 SEC FOR THIS LOCK TO BE GRANTED:\nRECORD LOCKS of table `unclosed",
            "------- TRX HAS BEEN WAITING 1 SEC FOR THIS LOCK TO BE GRANTED:\nTABLE LOCK table `db` trx id 1",
            "------- TRX HAS BEEN WAITING 1 SEC FOR THIS LOCK TO BE GRANTED:\nTABLE LOCK table `db`.\"t` trx id 1",
            "------- TRX HAS BEEN WAITING 1 SEC FOR THIS LOCK TO BE GRANTED:",
        ] {
            assert_eq!(
                InnodbTransactions::parse(report),
                InnodbTransactions::default(),
                "{report:?}"
            );
        }
    }

    #[test]
    fn only_the_line_after_a_wait_names_a_waited_lock() {
        let report = "RECORD LOCKS space id 5 index PRIMARY of table `db`.`held` trx id 3";
        assert!(InnodbTransactions::parse(report).lock_waits.is_empty());
    }
}
