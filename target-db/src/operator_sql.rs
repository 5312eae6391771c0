//! SQL an operator writes on purpose (an `update-in-batches --where` or
//! `--set`), parsed before it goes anywhere near a statement.
//!
//! A [`Condition`] is exactly one expression and an [`Assignments`] exactly
//! one list of `column = expression`: the text is parsed with `sqlparser`,
//! every token must belong to that one expression or list, and what enters
//! the statement is the parsed tree written out again (quotes re-escaped),
//! never the operator's text. Comments are refused: parsing would drop them,
//! and what runs would differ from what the operator reads. So a separator, a comment
//! or an unbalanced parenthesis (`1=1) OR (1=1`) cannot carry text outside
//! the place the statement gives it. Placeholders (`$1`, `?`) are refused:
//! they would bind the statement's own values. Such SQL still runs with the
//! operator's database privileges; it must never come from an untrusted user.

use sqlparser::ast::{AssignmentTarget, Expr, ObjectName, ObjectNamePart};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, Tokenizer, Whitespace};

/// A parsed operator condition (one boolean expression), ready to be
/// parenthesised into a `WHERE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    input: String,
    text: String,
}

/// A parsed operator SET list (`a = a + 1, b = 'x'`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignments {
    input: String,
    text: String,
    columns: Vec<String>,
    /// Each column's expression as rendered, when every assignment sets one
    /// column.
    values: Option<Vec<String>>,
}

/// Why operator SQL was refused. The message names the option and the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {what} expression `{input}` {reason}")]
pub struct OperatorSqlError {
    /// The option it came from (`WHERE`, `SET`).
    pub what: &'static str,
    /// The text as given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Deep enough for any condition an operator types; deeper nesting is
/// refused rather than risking the parser's stack.
const RECURSION_LIMIT: usize = 40;

impl Condition {
    /// Parses `input` as exactly one SQL expression.
    ///
    /// Errors: empty text, more than one expression (a `;`, trailing text,
    /// an unbalanced parenthesis), a placeholder, or text that does not parse.
    pub fn parse(input: &str) -> Result<Self, OperatorSqlError> {
        let fail = |reason: String| OperatorSqlError {
            what: "WHERE",
            input: input.to_owned(),
            reason,
        };
        let mut parser = parser_for("WHERE", input)?;
        let expr: Expr = parser.parse_expr().map_err(|e| fail(parse_reason(e)))?;
        expect_end(&parser).map_err(fail)?;
        let text = expr.to_string();
        stable("WHERE", input, &text, |p| {
            p.parse_expr().map(|e| e.to_string())
        })?;
        Ok(Condition {
            input: input.to_owned(),
            text,
        })
    }

    /// The expression as it enters statements (without parentheses).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Refuses the expression where a MySQL session of Sluice's would read
    /// it otherwise than the operator's own sessions do (`misread_by_mysql`).
    pub fn check_for_mysql(&self) -> Result<(), OperatorSqlError> {
        misread_by_mysql("WHERE", &self.input, &self.text)
    }
}

impl Assignments {
    /// Parses `input` as one comma-separated list of `column = expression`.
    ///
    /// Errors: as [`Condition::parse`], for the `SET` option.
    pub fn parse(input: &str) -> Result<Self, OperatorSqlError> {
        let fail = |reason: String| OperatorSqlError {
            what: "SET",
            input: input.to_owned(),
            reason,
        };
        let mut parser = parser_for("SET", input)?;
        let list = parser
            .parse_comma_separated(Parser::parse_assignment)
            .map_err(|e| fail(parse_reason(e)))?;
        expect_end(&parser).map_err(fail)?;
        let mut columns = Vec::new();
        let mut values = Some(Vec::new());
        for assignment in &list {
            match &assignment.target {
                AssignmentTarget::ColumnName(name) => {
                    columns.push(last_part(name));
                    if let Some(values) = values.as_mut() {
                        values.push(assignment.value.to_string());
                    }
                }
                AssignmentTarget::Tuple(names) => {
                    columns.extend(names.iter().map(last_part));
                    values = None;
                }
            }
        }
        let render = |list: &[sqlparser::ast::Assignment]| {
            list.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let text = render(&list);
        stable("SET", input, &text, |p| {
            p.parse_comma_separated(Parser::parse_assignment)
                .map(|l| render(&l))
        })?;
        Ok(Assignments {
            input: input.to_owned(),
            text,
            columns,
            values,
        })
    }

    /// Refuses the list where a MySQL session of Sluice's would read it
    /// otherwise than the operator's own sessions do (`misread_by_mysql`).
    pub fn check_for_mysql(&self) -> Result<(), OperatorSqlError> {
        misread_by_mysql("SET", &self.input, &self.text)
    }

    /// The list as it enters statements.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The columns the list writes, as named (without table qualifiers or
    /// quotes), in order.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// Each written column's expression, as the list renders it, in the
    /// order of [`Assignments::columns`]; `None` when an assignment sets
    /// several columns at once (`(a, b) = (SELECT …)`). Each is a part of
    /// the list already parsed and checked, one whole expression.
    pub fn values(&self) -> Option<&[String]> {
        self.values.as_deref()
    }

    /// The first written column that is one of `columns` (compared without
    /// regard to ASCII case, as an unquoted name is folded by every backend).
    pub fn writes_any<'c>(&self, columns: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
        let written = &self.columns;
        columns
            .into_iter()
            .find(|c| written.iter().any(|w| w.eq_ignore_ascii_case(c)))
    }
}

/// A parser over `input`'s tokens, refusing empty text and placeholders.
fn parser_for(what: &'static str, input: &str) -> Result<Parser<'static>, OperatorSqlError> {
    static DIALECT: GenericDialect = GenericDialect {};
    let fail = |reason: String| OperatorSqlError {
        what,
        input: input.to_owned(),
        reason,
    };
    let tokens = Tokenizer::new(&DIALECT, input)
        .tokenize_with_location()
        .map_err(|e| fail(format!("does not parse: {e}")))?;
    let mut meaningful = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)));
    // A comment would be dropped by parsing, so what runs would differ from
    // what the operator reads on the command line: refuse it instead.
    for t in &tokens {
        if let Token::Whitespace(w) = &t.token {
            let marker = match w {
                Whitespace::SingleLineComment { prefix, .. } => prefix.as_str(),
                Whitespace::MultiLineComment(_) => "/*",
                _ => continue,
            };
            return Err(fail(format!(
                "contains `{marker}` (a comment): write the expression without comments"
            )));
        }
    }
    if meaningful.clone().next().is_none() {
        return Err(fail("is empty".into()));
    }
    if let Some(t) = meaningful.find(|t| matches!(t.token, Token::Placeholder(_))) {
        return Err(fail(format!(
            "holds the placeholder `{}`: write values into the expression itself",
            t.token
        )));
    }
    Ok(Parser::new(&DIALECT)
        .with_recursion_limit(RECURSION_LIMIT)
        .with_tokens_with_locations(tokens))
}

/// Refuses operator SQL (`text`, as written back) whose meaning on MySQL
/// depends on a session setting Sluice's sessions do not share with the
/// operator's: a double-quoted `"name"` is a column there (Sluice's SQL
/// needs `ANSI_QUOTES`) but a string in the mysql client, so `status =
/// "done"` would compare two columns; and a backslash, which MySQL reads in
/// a string as an escape and the parser here does not, so the two would
/// disagree on where a string ends. Back quotes and single quotes mean the
/// same in both.
fn misread_by_mysql(what: &'static str, input: &str, text: &str) -> Result<(), OperatorSqlError> {
    static DIALECT: GenericDialect = GenericDialect {};
    let fail = |reason: String| OperatorSqlError {
        what,
        input: input.to_owned(),
        reason,
    };
    if text.contains('\\') {
        return Err(fail(
            "holds a backslash, which MySQL reads in a string as an escape: \
             write the expression without one"
                .into(),
        ));
    }
    let tokens = Tokenizer::new(&DIALECT, text)
        .tokenize()
        .map_err(|e| fail(format!("does not parse: {e}")))?;
    for token in tokens {
        if let Token::Word(word) = token
            && word.quote_style == Some('"')
        {
            let name = &word.value;
            return Err(fail(format!(
                "writes `\"{name}\"`, a column name in Sluice's MySQL sessions (they run \
                 with ANSI_QUOTES) but a string in the mysql client: write a string in \
                 single quotes ('{name}'), a name bare or in back quotes (`{name}`)"
            )));
        }
    }
    Ok(())
}

/// Functions and keywords whose value is the session's clock read in the
/// session's time zone (PostgreSQL's and MySQL's names; `UTC_TIMESTAMP()`
/// and `UNIX_TIMESTAMP()` are not among them: they read no zone).
const CLOCK_READS: [&str; 13] = [
    "now",
    "current_timestamp",
    "current_date",
    "current_time",
    "localtime",
    "localtimestamp",
    "curdate",
    "curtime",
    "sysdate",
    "transaction_timestamp",
    "statement_timestamp",
    "clock_timestamp",
    "timeofday",
];

/// The first clock read in the SQL `text` (`now`, `CURRENT_DATE`, … as
/// written, see `CLOCK_READS`): a value that depends on the session's
/// time zone. Names in quotes are columns, not clock reads; text that does
/// not tokenize reads none.
pub fn clock_read(text: &str) -> Option<String> {
    static DIALECT: GenericDialect = GenericDialect {};
    let tokens = Tokenizer::new(&DIALECT, text).tokenize().ok()?;
    tokens.into_iter().find_map(|token| match token {
        Token::Word(word)
            if word.quote_style.is_none()
                && CLOCK_READS.contains(&word.value.to_ascii_lowercase().as_str()) =>
        {
            Some(word.value)
        }
        _ => None,
    })
}

/// The functions the SQL `text` calls (a name followed by `(`), lowercased,
/// each once, in order of appearance; empty when it does not tokenize.
pub fn functions_called(text: &str) -> Vec<String> {
    static DIALECT: GenericDialect = GenericDialect {};
    let Ok(tokens) = Tokenizer::new(&DIALECT, text).tokenize() else {
        return Vec::new();
    };
    let mut called: Vec<String> = Vec::new();
    let mut previous: Option<String> = None;
    for token in tokens {
        match token {
            Token::Whitespace(_) => continue,
            Token::LParen => {
                if let Some(name) = previous.take()
                    && !called.contains(&name)
                {
                    called.push(name);
                }
            }
            Token::Word(word) => previous = Some(word.value.to_lowercase()),
            _ => previous = None,
        }
    }
    called
}

/// The first string in the SQL `text` that is a date written with its day
/// and month as one or two digits each, before the year (`'01/12/2025'`,
/// `'1.12.25'`, `'01-12-2025 10:00'`): PostgreSQL reads it month first or
/// day first as the session's `DateStyle` says. An ISO 8601 date
/// (`'2025-12-01'`) starts with its year and reads the same in every session.
pub fn ambiguous_date(text: &str) -> Option<String> {
    static DIALECT: GenericDialect = GenericDialect {};
    let tokens = Tokenizer::new(&DIALECT, text).tokenize().ok()?;
    tokens.into_iter().find_map(|token| match token {
        Token::SingleQuotedString(value) if day_and_month_first(&value) => Some(value),
        _ => None,
    })
}

/// Whether `value` starts with `d[d] S d[d] S dd[dd]`, `S` one of `/ . -`.
fn day_and_month_first(value: &str) -> bool {
    let mut rest = value.trim_start();
    let mut separator = None;
    for (group, widths) in [(0, 1..=2), (1, 1..=2), (2, 2..=4)] {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if !widths.contains(&digits) {
            return false;
        }
        rest = &rest[digits..];
        if group == 2 {
            // The year ends the date: a time or nothing may follow.
            return !rest.starts_with(|c: char| c.is_ascii_digit());
        }
        let Some(next) = rest.chars().next().filter(|c| matches!(c, '/' | '.' | '-')) else {
            return false;
        };
        if separator.is_some_and(|s| s != next) {
            return false;
        }
        separator = Some(next);
        rest = &rest[1..];
    }
    false
}

/// Refuses anything after the one expression or list.
fn expect_end(parser: &Parser<'_>) -> Result<(), String> {
    let next = parser.peek_token();
    match next.token {
        Token::EOF => Ok(()),
        Token::SemiColon => Err("contains `;`: give one expression, not statements".into()),
        other => Err(format!(
            "does not end where the expression ends (at `{other}`, line {} column {}): \
             give exactly one expression, with balanced parentheses",
            next.span.start.line, next.span.start.column
        )),
    }
}

/// Checks that the written-out text parses back to itself, so what runs is
/// what was parsed.
fn stable(
    what: &'static str,
    input: &str,
    text: &str,
    reparse: impl FnOnce(&mut Parser<'static>) -> Result<String, ParserError>,
) -> Result<(), OperatorSqlError> {
    let again = parser_for(what, text).map(|mut p| {
        let rendered = reparse(&mut p).ok();
        rendered.filter(|r| r == text && expect_end(&p).is_ok())
    });
    match again {
        Ok(Some(_)) => Ok(()),
        _ => Err(OperatorSqlError {
            what,
            input: input.to_owned(),
            reason: "uses syntax Sluice cannot write back faithfully; simplify it".into(),
        }),
    }
}

fn parse_reason(error: ParserError) -> String {
    match error {
        ParserError::RecursionLimitExceeded => "nests too deeply".into(),
        ParserError::TokenizerError(e) | ParserError::ParserError(e) => {
            format!("does not parse: {e}")
        }
    }
}

fn last_part(name: &ObjectName) -> String {
    match name.0.last() {
        Some(ObjectNamePart::Identifier(ident)) => ident.value.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests;
