//! The URLs a target is opened with: Sluice's own query parameter, the
//! password read from the environment or a client file, and the URL as
//! logs and errors may show it (no password).

/// The query parameter of a PostgreSQL URL naming the schema Sluice's own
/// tables live in on that database ([`crate::Target::open`]).
pub const OWN_SCHEMA_PARAMETER: &str = "sluice_schema";

/// `url` without its query parameter `name`, and that parameter's value
/// (the last, when given twice).
pub(super) fn take_query_parameter(url: &str, name: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut value = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some((key, found)) if key == name => {
                value = Some(found.to_owned());
                false
            }
            _ => true,
        })
        .collect();
    match kept.is_empty() {
        true => (base.to_owned(), value),
        false => (format!("{base}?{}", kept.join("&")), value),
    }
}

/// The URL with no password at all (`postgres://app@db-7/app`): what Sluice
/// stores of a target's URL; a worker supplies the password
/// ([`with_password_from_env`]).
pub fn url_without_password(url: &str) -> String {
    match password_span(url) {
        Some((colon, at)) => format!("{}{}", &url[..colon], &url[at..]),
        None => url.to_owned(),
    }
}

/// `url` with the password this process's environment gives for it, when
/// it names none: for MySQL and MariaDB, `MYSQL_PWD`, else the `password`
/// of the `[client]` group of `~/.my.cnf`, as their own client reads them.
/// (PostgreSQL's `PGPASSWORD` and `.pgpass` are read when the connection
/// is made.) The result is for connecting only: never shown, never stored.
pub fn with_password_from_env(url: &str) -> String {
    let mysql = url.starts_with("mysql://") || url.starts_with("mariadb://");
    let Some((scheme_end, at)) = url
        .find("://")
        .zip(url.rfind('@'))
        .filter(|(scheme_end, at)| *at > scheme_end + 3 && mysql)
    else {
        return url.to_owned();
    };
    if url[scheme_end + 3..at].contains(':') {
        return url.to_owned();
    }
    let password = std::env::var("MYSQL_PWD")
        .ok()
        .filter(|p| !p.is_empty())
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            let text = std::fs::read_to_string(std::path::Path::new(&home).join(".my.cnf")).ok()?;
            client_password(&text)
        });
    let Some(password) = password else {
        return url.to_owned();
    };
    let encoded: String = password
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("{}:{encoded}{}", &url[..at], &url[at..])
}

/// The `password` of an option file's `[client]` group (quotes around it
/// taken off), as MySQL's client reads `~/.my.cnf`.
pub(super) fn client_password(text: &str) -> Option<String> {
    let mut in_client = false;
    for line in text.lines().map(str::trim) {
        if let Some(group) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_client = group.trim() == "client";
            continue;
        }
        if !in_client || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some((key, value)) = line.split_once('=')
            && key.trim() == "password"
        {
            let value = value.trim();
            let unquoted = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(value);
            return Some(unquoted.to_owned());
        }
    }
    None
}

/// The URL without its password, for messages.
pub fn redact_url(url: &str) -> String {
    match password_span(url) {
        Some((colon, at)) => format!("{}:***{}", &url[..colon], &url[at..]),
        None => url.to_owned(),
    }
}

/// Where a URL's password is: from the `:` after its user name to the `@`
/// before its host (both as byte offsets), when it names one.
fn password_span(url: &str) -> Option<(usize, usize)> {
    let scheme_end = url.find("://")? + 3;
    let at = url.rfind('@').filter(|at| *at > scheme_end)?;
    let colon = url[scheme_end..at].find(':')? + scheme_end;
    Some((colon, at))
}
