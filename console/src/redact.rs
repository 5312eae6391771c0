//! Row values out of error text: a database's message can quote the row it
//! refused (`Duplicate entry 'alice@example.com' for key 'email'`, `Key
//! (code)=(X-1) already exists`, `invalid input syntax for type integer:
//! "abc"`). The console shows what failed — the error's code, constraint,
//! column and table names — and never such a value; the command line, on
//! the operator's own machine, shows the whole text.

/// What the console shows in place of a value.
const HIDDEN: &str = "…";

/// Words after which a quoted string is a name (of a key, column, table,
/// constraint …), not a value, in PostgreSQL's, MySQL's and SQLite's
/// messages.
const NAMING_WORDS: &[&str] = &[
    "column",
    "columns",
    "constraint",
    "database",
    "domain",
    "extension",
    "function",
    "index",
    "key",
    "relation",
    "role",
    "schema",
    "sequence",
    "table",
    "trigger",
    "type",
    "view",
    "collation",
    "in", // MySQL: `Unknown column 'x' in 'field list'`
];

/// `text` with every value a database may have quoted from a row hidden:
/// quoted strings not introduced by a naming word, what follows `=` in
/// PostgreSQL's `Key (…)=(…)`, the row of `Failing row contains (…)`, and
/// every `DETAIL:` line. Names quoted with backquotes (Sluice's own and
/// MariaDB's) are kept.
pub(crate) fn without_values(text: &str) -> String {
    let text = match text.find("DETAIL:") {
        Some(at) => text[..at].trim_end(),
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['\'', '"', '(']) {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let open = from.chars().next().expect("found a character");
        if open == '(' {
            // `Key (code)=(…)` and `Failing row contains (…)`: the values
            // are the parenthesised list after `=` or `contains`.
            let hides = out.ends_with(")=") || out.trim_end().ends_with("contains");
            match (hides, closing_paren(from)) {
                (true, Some(end)) => {
                    out.push('(');
                    out.push_str(HIDDEN);
                    out.push(')');
                    rest = &from[end + 1..];
                }
                _ => {
                    out.push('(');
                    rest = &from[1..];
                }
            }
            continue;
        }
        let Some(len) = from[1..].find(open) else {
            // An unclosed quote: hide the rest.
            out.push(open);
            out.push_str(HIDDEN);
            return out;
        };
        let quoted = &from[..len + 2];
        if names_follow(&out) {
            out.push_str(quoted);
        } else {
            out.push(open);
            out.push_str(HIDDEN);
            out.push(open);
        }
        rest = &from[len + 2..];
    }
    out.push_str(rest);
    out
}

/// Whether the word just before the end of `written` introduces a name.
fn names_follow(written: &str) -> bool {
    let last = written
        .trim_end()
        .rsplit(|c: char| c.is_whitespace())
        .next()
        .unwrap_or("");
    NAMING_WORDS.iter().any(|w| last.eq_ignore_ascii_case(w))
}

/// The byte index of the `)` closing the `(` that `text` starts with.
fn closing_paren(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_go_and_names_stay() {
        for (said, shown) in [
            (
                "Duplicate entry 'alice@example.com' for key 'users.email'",
                "Duplicate entry '…' for key 'users.email'",
            ),
            (
                "Incorrect integer value: 'abc-secret' for column `db`.`t`.`n` at row 1",
                "Incorrect integer value: '…' for column `db`.`t`.`n` at row 1",
            ),
            (
                "duplicate key value violates unique constraint \"events_code_key\"",
                "duplicate key value violates unique constraint \"events_code_key\"",
            ),
            (
                "invalid input syntax for type integer: \"abc\"",
                "invalid input syntax for type integer: \"…\"",
            ),
            (
                "value \"99999999999\" is out of range for type integer",
                "value \"…\" is out of range for type integer",
            ),
            (
                "null value in column \"n\" of relation \"t\" violates not-null constraint",
                "null value in column \"n\" of relation \"t\" violates not-null constraint",
            ),
            (
                "duplicate key \"k\" DETAIL: Key (code)=(secret) already exists.",
                "duplicate key \"k\"",
            ),
            (
                "Key (code, n)=(secret, 3) already exists",
                "Key (code, n)=(…) already exists",
            ),
            (
                "Failing row contains (1, secret, (2)).",
                "Failing row contains (…).",
            ),
            (
                "Unknown column 'x' in 'field list'",
                "Unknown column 'x' in 'field list'",
            ),
            ("broken 'quote", "broken '…"),
            (
                "batch 1 failed 5 times; last error: UNIQUE constraint failed: events.code",
                "batch 1 failed 5 times; last error: UNIQUE constraint failed: events.code",
            ),
        ] {
            assert_eq!(without_values(said), shown, "{said}");
        }
    }
}
