//! One `enqueue` over several databases apart from the store: a fleet of
//! operations, one per target, recorded in the store (their coordinator)
//! under one fleet key. Every target is checked before anything is
//! recorded — reachable, its table as the kind requires, and alike on
//! every target — so a fleet is enqueued whole or not at all.

use std::collections::HashSet;

use sluice_store::{Enqueued, Store};
use sluice_target::url_without_password;
use sluice_telemetry::traceparent;
use tracing::Span;

use super::fleet_checks::{check_all, table_difference};
use super::{EnqueueOptions, settle};
use crate::error::OperationError;
use crate::operation::Registry;

/// A database an operation works on, apart from the store, and its name
/// in the fleet (`shard-07`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedTarget {
    /// Its name: letters, digits, `-`, `_` and `.`, unique in its fleet.
    pub name: String,
    /// Its URL; a password in it is used to connect and never stored.
    pub url: String,
    /// Its replicas' URLs (`replica=URL` in a targets file), whose lag a
    /// worker given the file watches ([`crate::Operation`]s on the target
    /// stop past the worker's lag thresholds). Not stored.
    pub replicas: Vec<String>,
}

impl NamedTarget {
    /// A target named after what its URL points at: its database (the
    /// path's last part; for SQLite the file's name without extension) and,
    /// on a server, its host (`db-7:5432/app` → `db-7-app`).
    pub fn from_url(url: &str) -> Result<Self, OperationError> {
        let shown = url_without_password(url);
        let bare = shown.split('?').next().unwrap_or_default();
        let name = match bare.split_once("://") {
            Some((_, rest)) => {
                let host_part = rest.rsplit('@').next().unwrap_or(rest);
                let (host, database) = host_part.split_once('/').unwrap_or((host_part, ""));
                let host = host.split(':').next().unwrap_or(host);
                match database.is_empty() {
                    true => host.to_owned(),
                    false => format!("{host}-{database}"),
                }
            }
            None => {
                let file = bare.rsplit(['/', ':']).next().unwrap_or(bare);
                file.split('.').next().unwrap_or(file).to_owned()
            }
        };
        let name: String = name
            .chars()
            .map(
                |c| match c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    true => c,
                    false => '-',
                },
            )
            .collect();
        NamedTarget::named(&name, url)
    }

    /// `url` named `name`; a name that is empty or holds other characters
    /// than letters, digits, `-`, `_` and `.` is refused.
    pub fn named(name: &str, url: &str) -> Result<Self, OperationError> {
        let plain = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !plain {
            return Err(OperationError::Arguments(format!(
                "target name `{name}` is not plain: use 1 to 64 letters, digits, `-`, `_` or `.`"
            )));
        }
        Ok(NamedTarget {
            name: name.to_owned(),
            url: url.to_owned(),
            replicas: Vec::new(),
        })
    }

    /// The targets a targets file lists: one a line, its name then its URL,
    /// then any number of `replica=URL`, separated by spaces; blank lines
    /// and lines starting with `#` are skipped. A line that does not parse
    /// is refused by its number.
    pub fn parse_file(text: &str) -> Result<Vec<Self>, OperationError> {
        let mut targets = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let at_line = |e: String| {
                OperationError::Arguments(format!("targets file, line {}: {e}", number + 1))
            };
            let [name, url, more @ ..] = &words[..] else {
                return Err(at_line(format!(
                    "expected a name and a URL, found {} word(s)",
                    words.len()
                )));
            };
            let mut target = NamedTarget::named(name, url).map_err(|e| at_line(e.to_string()))?;
            for word in more {
                match word.strip_prefix("replica=").filter(|url| !url.is_empty()) {
                    Some(replica) => target.replicas.push(replica.to_owned()),
                    None => {
                        return Err(at_line(format!(
                            "`{word}` after the URL is not `replica=URL`"
                        )));
                    }
                }
            }
            targets.push(target);
        }
        if targets.is_empty() {
            return Err(OperationError::Arguments(
                "the targets file lists no target".into(),
            ));
        }
        Ok(targets)
    }

    /// Its URL without a password, as stored and shown.
    pub fn shown(&self) -> String {
        url_without_password(&self.url)
    }
}

/// Refuses two targets of one fleet with the same name or the same URL.
pub(crate) fn refuse_duplicates(targets: &[NamedTarget]) -> Result<(), OperationError> {
    let mut names = HashSet::new();
    let mut urls = HashSet::new();
    for target in targets {
        if !names.insert(target.name.as_str()) {
            return Err(OperationError::Arguments(format!(
                "target `{}` is named twice",
                target.name
            )));
        }
        if !urls.insert(target.shown()) {
            return Err(OperationError::Arguments(format!(
                "target `{}`: `{}` is listed twice",
                target.name,
                target.shown()
            )));
        }
    }
    Ok(())
}

/// Checks every target of a fleet ([`check_all`]), then records one
/// operation per target in one bulk insert under one fleet key; returns
/// the first one's (the fleet is shown and controlled through any of its
/// operations).
pub(super) async fn enqueue_fleet(
    store: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &EnqueueOptions,
    window: Option<&(String, String)>,
) -> Result<Enqueued, OperationError> {
    refuse_duplicates(&options.targets)?;
    if let Some(cap) = options.max_targets_at_once
        && cap < 1
    {
        return Err(OperationError::Arguments(format!(
            "at least one target must be worked on at once, not {cap}"
        )));
    }
    let checked = check_all(store, registry, kind, arguments, options).await?;
    if let Some((first, rest)) = checked.split_first() {
        for (other, target) in rest.iter().zip(&options.targets[1..]) {
            let same_kind = first.dialect == other.dialect;
            if let Some(difference) = table_difference(&first.columns, &other.columns, same_kind) {
                return Err(OperationError::Arguments(format!(
                    "target `{}`: its table `{}` differs from target `{}`'s: {difference}",
                    target.name, other.checked.spec.table, options.targets[0].name
                )));
            }
        }
    }
    let fleet = fleet_key();
    // The fleet's trace starts here; every run of every target joins it.
    let trace = traceparent(&Span::current());
    let mut specs = Vec::with_capacity(checked.len());
    for (target, named) in checked.iter().zip(&options.targets) {
        let mut spec = target.checked.spec.clone();
        spec.target_name = Some(named.name.clone());
        spec.fleet = Some(fleet.clone());
        spec.fleet_cap = options.max_targets_at_once;
        spec.trace_context = trace.clone();
        spec.validate()?;
        specs.push(spec);
    }
    let enqueued = store.enqueue_many(&specs).await?;
    for one in &enqueued {
        settle(store, *one, options, window, options.max_rate_per_target).await?;
    }
    // One bucket for the whole fleet, shared by its operations.
    if let Some(rate) = options.max_rate {
        store
            .set_rate_limit(&sluice_store::fleet_target(&fleet), rate)
            .await?;
    }
    let first = enqueued
        .first()
        .copied()
        .ok_or_else(|| OperationError::Arguments("a fleet needs a target".into()))?;
    Span::current().record("sluice.operation.id", first.id);
    Ok(first)
}
/// A fleet's key: unique among fleets of any store (the time and a random
/// part), shown as `fleet-…`.
fn fleet_key() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut random = std::collections::hash_map::RandomState::new().build_hasher();
    random.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    format!("fleet-{:016x}", random.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_targets_file_names_its_bad_line() {
        let text = "# shards\nshard-01 postgres://app@db-1/app\n\nshard-02 postgres://app@db-2/app extra\n";
        let error = NamedTarget::parse_file(text).unwrap_err().to_string();
        assert!(
            error.contains("line 4") && error.contains("`extra`"),
            "{error}"
        );
        let text =
            "a postgres://app@db-1/app replica=postgres://app@db-1r/app replica=postgres://x@y/z\n";
        let parsed = NamedTarget::parse_file(text).unwrap();
        assert_eq!(parsed[0].replicas.len(), 2);
        let text = "shard-01 postgres://app@db-1/app\nshard 02 x\n";
        assert!(NamedTarget::parse_file(text).is_err());
        let text = "shard-01 postgres://app@db-1/app\nbad/name mysql://root@db/x\n";
        let error = NamedTarget::parse_file(text).unwrap_err().to_string();
        assert!(
            error.contains("line 2") && error.contains("bad/name"),
            "{error}"
        );
        assert!(NamedTarget::parse_file("# none\n\n").is_err());
        let parsed =
            NamedTarget::parse_file("a postgres://u:pw@h/d\nb mysql://root@h/e\n").unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].shown(), "postgres://u@h/d");
    }

    #[test]
    fn duplicate_names_and_urls_are_refused() {
        let a = NamedTarget::named("a", "postgres://u:pw@h/d").unwrap();
        let b = NamedTarget::named("a", "postgres://u@h/e").unwrap();
        let c = NamedTarget::named("c", "postgres://u@h/d").unwrap();
        assert!(
            refuse_duplicates(&[a.clone(), b])
                .unwrap_err()
                .to_string()
                .contains("named twice")
        );
        assert!(
            refuse_duplicates(&[a, c])
                .unwrap_err()
                .to_string()
                .contains("listed twice")
        );
    }

    #[test]
    fn a_target_is_named_after_its_host_and_database() {
        let named = |url| NamedTarget::from_url(url).unwrap().name;
        assert_eq!(
            named("postgres://app:pw@db-7:5432/app?sslmode=require"),
            "db-7-app"
        );
        assert_eq!(
            named("mysql://root@127.0.0.1:3306/shard_2"),
            "127.0.0.1-shard_2"
        );
        assert_eq!(named("sqlite:data/tenant-9.sqlite"), "tenant-9");
    }
}
