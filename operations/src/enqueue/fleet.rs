//! One `enqueue` over several databases apart from the store: a fleet of
//! operations, one per target, recorded in the store (their coordinator)
//! under one fleet key. Every target is checked before anything is
//! recorded — reachable, its table as the kind requires, and alike on
//! every target — so a fleet is enqueued whole or not at all.

use std::collections::HashSet;
use std::sync::Arc;

use sluice_store::{Enqueued, Store};
use sluice_target::{ColumnDefinition, ConnectOptions, url_without_password};
use sluice_telemetry::traceparent;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{Instrument, Span};

use super::{Checked, CheckedSpec, EnqueueOptions, checked_spec, count_rows, on_target, settle};
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

/// How many targets of a fleet are checked at once at enqueue.
const CHECKED_AT_ONCE: usize = 16;

/// A target checked for a fleet: its checked spec (rows counted), and its
/// table's columns, to compare.
struct CheckedTarget {
    checked: CheckedSpec,
    dialect: &'static str,
    columns: Vec<ColumnDefinition>,
}

/// Checks every target of a fleet, [`CHECKED_AT_ONCE`] at a time, then
/// records one operation per target in one bulk insert under one fleet key;
/// returns the first one's (the fleet is shown and controlled through any
/// of its operations).
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

/// Checks each of `options.targets` as its own enqueue would, at most
/// [`CHECKED_AT_ONCE`] at a time; the checked targets in the targets'
/// order, or the refusal of the first one (in that order) refused.
async fn check_all(
    store: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &EnqueueOptions,
) -> Result<Vec<CheckedTarget>, OperationError> {
    let permits = Arc::new(Semaphore::new(CHECKED_AT_ONCE));
    let mut checks = JoinSet::new();
    for (index, target) in options.targets.iter().enumerate() {
        let (store, registry, kind) = (store.clone(), registry.clone(), kind.to_owned());
        let (arguments, options, target) = (arguments.clone(), options.clone(), target.clone());
        let permits = Arc::clone(&permits);
        checks.spawn(
            async move {
                let _permit = permits.acquire_owned().await;
                let checked = check_one(&store, &registry, &kind, &arguments, &options, &target)
                    .await
                    .map_err(|e| {
                        OperationError::Arguments(format!("target `{}`: {e}", target.name))
                    });
                (index, checked)
            }
            .in_current_span(),
        );
    }
    let mut results: Vec<Option<Result<CheckedTarget, OperationError>>> =
        (0..options.targets.len()).map(|_| None).collect();
    while let Some(joined) = checks.join_next().await {
        let (index, checked) =
            joined.map_err(|e| OperationError::Failed(format!("checking a target: {e}")))?;
        results[index] = Some(checked);
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(OperationError::Failed("a target went unchecked".into()))))
        .collect()
}

/// One target checked: opened, the kind's checks run on it, its rows in
/// scope counted and its table's columns read, then its connections
/// closed (a fleet of a thousand targets must not hold a thousand pools).
async fn check_one(
    store: &Store,
    registry: &Registry,
    kind: &str,
    arguments: &serde_json::Value,
    options: &EnqueueOptions,
    target: &NamedTarget,
) -> Result<CheckedTarget, OperationError> {
    let apart = on_target(store, &target.url, &ConnectOptions::default()).await?;
    let mut checked = checked_spec(
        &apart,
        registry,
        kind,
        arguments,
        options,
        &mut Checked::default(),
    )
    .await?;
    checked.spec.estimated_rows = count_rows(&apart, &checked.scope).await?.rows;
    let table = sluice_target::Ident::parse(&checked.spec.table)
        .map_err(|e| OperationError::Arguments(e.to_string()))?;
    let columns = apart.target().column_definitions(&table).await?;
    let dialect = apart.target().dialect().name();
    apart.target().close().await;
    Ok(CheckedTarget {
        checked,
        dialect,
        columns,
    })
}

/// How `columns` differ from `first`'s, if they do: a column missing or
/// added, by name; a column's type, when both tables are in the same kind
/// of database (each kind names its types its own way).
fn table_difference(
    first: &[ColumnDefinition],
    columns: &[ColumnDefinition],
    same_dialect: bool,
) -> Option<String> {
    for column in first {
        match columns.iter().find(|c| c.name == column.name) {
            None => return Some(format!("it has no column `{}`", column.name)),
            Some(other) if same_dialect && other.full_type != column.full_type => {
                return Some(format!(
                    "column `{}` is {} there, {} here",
                    column.name, column.full_type, other.full_type
                ));
            }
            Some(_) => {}
        }
    }
    columns
        .iter()
        .find(|c| !first.iter().any(|f| f.name == c.name))
        .map(|extra| format!("it has a column `{}` the other lacks", extra.name))
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

    #[test]
    fn tables_that_differ_are_told_apart() {
        let column = |name: &str, full_type: &str| ColumnDefinition {
            name: name.into(),
            full_type: full_type.into(),
            collation: None,
        };
        let first = vec![column("id", "bigint"), column("n", "integer")];
        assert_eq!(table_difference(&first, &first, true), None);
        let missing = vec![column("id", "bigint")];
        assert!(
            table_difference(&first, &missing, true)
                .unwrap()
                .contains("no column `n`")
        );
        let typed = vec![column("id", "bigint"), column("n", "text")];
        assert!(
            table_difference(&first, &typed, true)
                .unwrap()
                .contains("column `n`")
        );
        assert_eq!(table_difference(&first, &typed, false), None);
        let extra = vec![
            column("id", "bigint"),
            column("n", "integer"),
            column("x", "int"),
        ];
        assert!(
            table_difference(&first, &extra, true)
                .unwrap()
                .contains("`x`")
        );
    }
}
