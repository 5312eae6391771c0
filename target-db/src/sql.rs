//! The only way Sluice builds SQL at run time.
//!
//! Table and column names come from operators and applications, so they are
//! [`Ident`]s: validated as plain identifiers (ASCII letters, digits and `_`,
//! not starting with a digit, at most 63 bytes, optionally `schema.name`) and
//! always written double-quoted. A [`SqlText`] can only be assembled from
//! `'static` fragments written in this codebase and [`Ident`]s; values never
//! enter it — they are bound parameters ([`SqlValue`]). This module is the one
//! place that tells sqlx a run-time string is safe.

use std::fmt;

use sqlx::AssertSqlSafe;

use crate::operator_sql::{Assignments, Condition};

/// A validated SQL identifier (a table or column name, optionally schema-qualified).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ident {
    parts: Vec<String>,
}

/// Why a name is not accepted as an identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{name}` is not a plain SQL identifier: use ASCII letters, digits and _ (not starting with a digit, \
     at most 63 characters), optionally as schema.name"
)]
pub struct IdentError {
    /// The rejected name.
    pub name: String,
}

/// A bound parameter value.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// A 64-bit integer.
    Int(i64),
    /// Text.
    Text(String),
    /// A timestamp (PostgreSQL `timestamptz`; on SQLite, ISO-8601 text).
    Timestamp(chrono::DateTime<chrono::Utc>),
    /// A boolean (PostgreSQL `boolean`; on SQLite, 0 or 1).
    Bool(bool),
    /// Bytes (a binary key's value).
    Bytes(Vec<u8>),
    /// `NULL`, bound as a text value.
    Null,
}

impl From<i64> for SqlValue {
    fn from(v: i64) -> Self {
        SqlValue::Int(v)
    }
}

impl From<i32> for SqlValue {
    fn from(v: i32) -> Self {
        SqlValue::Int(v.into())
    }
}

impl From<bool> for SqlValue {
    fn from(v: bool) -> Self {
        SqlValue::Bool(v)
    }
}

impl From<&str> for SqlValue {
    fn from(v: &str) -> Self {
        SqlValue::Text(v.to_owned())
    }
}

impl From<String> for SqlValue {
    fn from(v: String) -> Self {
        SqlValue::Text(v)
    }
}

impl From<chrono::DateTime<chrono::Utc>> for SqlValue {
    fn from(v: chrono::DateTime<chrono::Utc>) -> Self {
        SqlValue::Timestamp(v)
    }
}

impl From<&crate::cursor::CursorValue> for SqlValue {
    fn from(v: &crate::cursor::CursorValue) -> Self {
        match v {
            crate::cursor::CursorValue::Int(i) => SqlValue::Int(*i),
            crate::cursor::CursorValue::Text(t) => SqlValue::Text(t.clone()),
            crate::cursor::CursorValue::Timestamp(at) => SqlValue::Timestamp(*at),
            crate::cursor::CursorValue::Bytes(bytes) => SqlValue::Bytes(bytes.clone()),
        }
    }
}

/// SQL text assembled only from code-written fragments and [`Ident`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SqlText(String);

/// A statement with its bound values: [`Statement::value`] appends the next
/// `$n` placeholder and remembers the value, so numbering is never done by hand.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Statement {
    text: SqlText,
    params: Vec<SqlValue>,
    /// Where [`Statement::guard`] wrote its `TRUE`: a byte range of `text`
    /// (every other method only appends, so it stays valid).
    guard: Option<std::ops::Range<usize>>,
    /// Where the statement proper begins after a `WITH …` of its own
    /// ([`Statement::main`]): a byte offset of `text`.
    main: Option<usize>,
}

impl Statement {
    /// A statement whose text numbers its own placeholders (`$1`…, in any
    /// order) and `params` their values, `$n` the `n`-th: for statements
    /// written whole by the code, such as a progress record.
    pub fn with_text(text: SqlText, params: Vec<SqlValue>) -> Self {
        Statement {
            text,
            params,
            guard: None,
            main: None,
        }
    }

    /// Starts with a code-written fragment.
    pub fn new(fragment: &'static str) -> Self {
        Statement {
            text: SqlText::new(fragment),
            params: Vec::new(),
            guard: None,
            main: None,
        }
    }

    /// Appends a code-written fragment.
    pub fn push(mut self, fragment: &'static str) -> Self {
        self.text = self.text.push(fragment);
        self
    }

    /// Appends a quoted identifier.
    pub fn ident(mut self, ident: &Ident) -> Self {
        self.text = self.text.ident(ident);
        self
    }

    /// Appends identifiers separated by `, `.
    pub fn idents(mut self, idents: &[Ident]) -> Self {
        self.text = self.text.idents(idents);
        self
    }

    /// Appends a column type as a catalogue declared it (`VARCHAR(20)`,
    /// `DOUBLE PRECISION`, `NUMERIC(10, 2)`); `None` (and nothing appended)
    /// unless it is only words, digits, signs and one balanced pair of
    /// parentheses — text that can be nothing but a type.
    pub fn declared_type(mut self, declared: &str) -> Option<Self> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || " _(),+-".contains(c);
        let opens = declared.matches('(').count();
        let well_formed = declared.chars().all(allowed)
            && !declared.contains("--")
            && opens == declared.matches(')').count()
            && opens <= 1
            && declared.find('(') <= declared.find(')');
        if !well_formed {
            return None;
        }
        self.text.0.push_str(declared);
        Some(self)
    }

    /// Appends a placeholder bound to `value`.
    pub fn value(mut self, value: SqlValue) -> Self {
        self.params.push(value);
        self.text = self.text.param(self.params.len());
        self
    }

    /// Appends an operator's parsed condition, parenthesised (see
    /// [`crate::operator_sql`] for what parsing guarantees and the trust it
    /// still needs).
    pub fn operator_expression(mut self, condition: &Condition) -> Self {
        self.text.0.push('(');
        self.text.0.push_str(condition.as_str());
        self.text.0.push(')');
        self
    }

    /// Appends an operator's parsed SET list (`a = a + 1, b = 'x'`).
    pub fn operator_assignments(mut self, assignments: &Assignments) -> Self {
        self.text.0.push_str(assignments.as_str());
        self
    }

    /// Appends `(<expression>)`, the `i`-th value of a parsed operator SET
    /// list ([`Assignments::values`]); nothing when it has no such value.
    pub fn operator_value(mut self, assignments: &Assignments, i: usize) -> Self {
        if let Some(value) = assignments.values().and_then(|v| v.get(i)) {
            self.text.0.push('(');
            self.text.0.push_str(value);
            self.text.0.push(')');
        }
        self
    }

    /// Appends a guard: a condition that reads `TRUE` as written, and that
    /// a store running the statement as one fenced sub-batch replaces with
    /// its fence, so that the statement changes nothing under a lost lease
    /// (see the store's `SubBatchSession::run_loop_sub_batch_statement`). Put
    /// it where the database evaluates it once, before it reads a row — as
    /// in `key = ANY (CASE WHEN <guard> THEN ARRAY(SELECT …) END)` — rather
    /// than in a condition tested row by row. A statement has at most one
    /// (a later call moves it); one without is fenced by a condition
    /// appended to its top-level `WHERE`.
    pub fn guard(mut self) -> Self {
        let start = self.text.0.len();
        self.text = self.text.push("TRUE");
        self.guard = Some(start..self.text.0.len());
        self
    }

    /// The SQL text.
    pub fn text(&self) -> &SqlText {
        &self.text
    }

    /// The first read of the session's clock in the statement (`now()`,
    /// `CURRENT_DATE`, … as written): its value depends on the session's
    /// time zone ([`crate::operator_sql::clock_read`]).
    pub fn reads_the_clock(&self) -> Option<String> {
        crate::operator_sql::clock_read(self.text.as_str())
    }

    /// The functions the statement calls, lowercased, each once
    /// ([`crate::operator_sql::functions_called`]; keywords written before
    /// a parenthesis, `IN (`, are listed too).
    pub fn functions_called(&self) -> Vec<String> {
        crate::operator_sql::functions_called(self.text.as_str())
    }

    /// The first date in the statement whose day and month PostgreSQL reads
    /// in the order of the session's `DateStyle` (`'01/12/2025'`,
    /// [`crate::operator_sql::ambiguous_date`]).
    pub fn ambiguous_date(&self) -> Option<String> {
        crate::operator_sql::ambiguous_date(self.text.as_str())
    }

    /// The bound values, in placeholder order.
    pub fn params(&self) -> &[SqlValue] {
        &self.params
    }

    /// Marks where the statement proper begins, after the `WITH a AS (…)`
    /// written so far: a store fusing the statement into a `WITH` of its
    /// own hoists these to the top ([`Statement::split_main`]), where
    /// PostgreSQL wants every data-changing `WITH`.
    pub fn main(mut self) -> Self {
        self.main = Some(self.text.0.len());
        self
    }

    /// The statement's own `WITH a AS (…)` (`None` without
    /// [`Statement::main`]) and the statement proper.
    pub fn split_main(&self) -> (Option<SqlText>, SqlText) {
        let text = self.text.as_str();
        match self.main {
            Some(at) => (
                Some(SqlText(text[..at].trim_end().to_owned())),
                SqlText(text[at..].trim_start().to_owned()),
            ),
            None => (None, self.text.clone()),
        }
    }

    /// The text with its guard replaced by `condition` (code-written, with
    /// no placeholders of its own); `None` for a statement without a guard.
    pub fn guarded_by(&self, condition: &'static str) -> Option<SqlText> {
        let at = self.guard.clone()?;
        let text = self.text.as_str();
        Some(SqlText(
            [&text[..at.start], condition, &text[at.end..]].concat(),
        ))
    }
}

impl Ident {
    /// Validates `name`. Errors name the rejected input.
    pub fn parse(name: &str) -> Result<Self, IdentError> {
        let parts: Vec<&str> = name.split('.').collect();
        let valid = |p: &str| {
            let mut chars = p.chars();
            matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
                && p.len() <= 63
        };
        if parts.len() > 2 || !parts.iter().all(|p| valid(p)) {
            return Err(IdentError {
                name: name.to_owned(),
            });
        }
        Ok(Ident {
            parts: parts.into_iter().map(str::to_owned).collect(),
        })
    }

    /// The name without its schema.
    pub fn name(&self) -> &str {
        self.parts
            .last()
            .expect("an identifier has at least one part")
    }

    /// The schema, when qualified.
    pub fn schema(&self) -> Option<&str> {
        (self.parts.len() == 2).then(|| self.parts[0].as_str())
    }

    /// `name` in this identifier's schema (unqualified when this is).
    /// Errors when `name` is not a plain identifier.
    pub fn beside(&self, name: &str) -> Result<Ident, IdentError> {
        match self.schema() {
            Some(schema) => Ident::parse(&format!("{schema}.{name}")),
            None => Ident::parse(name),
        }
    }

    /// The quoted form, e.g. `"public"."events"`.
    pub fn quoted(&self) -> String {
        self.parts
            .iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(".")
    }
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.parts.join("."))
    }
}

impl SqlText {
    /// Starts with a code-written fragment.
    pub fn new(fragment: &'static str) -> Self {
        SqlText(fragment.to_owned())
    }

    /// Text this crate wrote itself from values it read and quoted (a
    /// partition bound, [`crate::kept_partitions::RangeBound`]).
    pub(crate) fn written_here(text: String) -> Self {
        SqlText(text)
    }

    /// Appends a code-written fragment.
    pub fn push(mut self, fragment: &'static str) -> Self {
        self.0.push_str(fragment);
        self
    }

    /// Appends a quoted identifier.
    pub fn ident(mut self, ident: &Ident) -> Self {
        self.0.push_str(&ident.quoted());
        self
    }

    /// Appends identifiers separated by `, `.
    pub fn idents(mut self, idents: &[Ident]) -> Self {
        for (i, ident) in idents.iter().enumerate() {
            if i > 0 {
                self.0.push_str(", ");
            }
            self.0.push_str(&ident.quoted());
        }
        self
    }

    /// Appends a placeholder `$n`.
    pub fn param(mut self, n: usize) -> Self {
        self.0.push('$');
        self.0.push_str(&n.to_string());
        self
    }

    /// Appends another assembled text.
    pub fn append(mut self, other: &SqlText) -> Self {
        self.0.push_str(&other.0);
        self
    }

    /// The SQL text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The text as sqlx takes it: safe, for it holds only code-written
    /// fragments and quoted names.
    pub fn to_sqlx(&self) -> AssertSqlSafe<String> {
        AssertSqlSafe(self.0.clone())
    }
}

/// Binds a statement's [`SqlValue`]s to a sqlx query, in placeholder order.
macro_rules! bind_values {
    ($query:expr, $params:expr) => {{
        let mut query = $query;
        for value in $params {
            query = match value {
                $crate::sql::SqlValue::Int(v) => query.bind(*v),
                $crate::sql::SqlValue::Text(v) => query.bind(v.clone()),
                $crate::sql::SqlValue::Timestamp(v) => query.bind(*v),
                $crate::sql::SqlValue::Bool(v) => query.bind(*v),
                $crate::sql::SqlValue::Bytes(v) => query.bind(v.clone()),
                $crate::sql::SqlValue::Null => query.bind(None::<String>),
            };
        }
        query
    }};
}

pub(crate) use bind_values;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_qualified_names_are_accepted_and_quoted() {
        assert_eq!(Ident::parse("events").unwrap().quoted(), "\"events\"");
        assert_eq!(
            Ident::parse("app.events_2024").unwrap().quoted(),
            "\"app\".\"events_2024\""
        );
        assert_eq!(Ident::parse("_x1").unwrap().name(), "_x1");
        let qualified = Ident::parse("app.events").unwrap();
        assert_eq!(qualified.beside("kept").unwrap().to_string(), "app.kept");
        assert_eq!(
            Ident::parse("events")
                .unwrap()
                .beside("kept")
                .unwrap()
                .to_string(),
            "kept"
        );
        assert!(qualified.beside("not a name").is_err());
    }

    #[test]
    fn unsafe_names_are_refused() {
        for bad in [
            "",
            "1abc",
            "a b",
            "users;DROP TABLE x",
            "a\"b",
            "a'b",
            "a--b",
            "a/*b",
            "a.b.c",
            ".a",
            "a.",
            "us\u{0435}rs", // Cyrillic e, a look-alike
            "ta\u{200b}ble",
            "a-b",
            &"x".repeat(64),
        ] {
            let err = Ident::parse(bad).unwrap_err();
            assert_eq!(err.name, bad);
        }
    }

    #[test]
    fn statements_number_their_placeholders() {
        let t = Ident::parse("events").unwrap();
        let s = Statement::new("SELECT 1 FROM ")
            .ident(&t)
            .push(" WHERE a > ")
            .value(SqlValue::Int(1))
            .push(" AND b < ")
            .value(SqlValue::Text("x".into()));
        assert_eq!(
            s.text().as_str(),
            "SELECT 1 FROM \"events\" WHERE a > $1 AND b < $2"
        );
        assert_eq!(s.params(), &[SqlValue::Int(1), SqlValue::Text("x".into())]);
    }

    #[test]
    fn text_is_built_from_fragments_identifiers_and_placeholders() {
        let t = Ident::parse("events").unwrap();
        let c = Ident::parse("id").unwrap();
        let sql = SqlText::new("DELETE FROM ")
            .ident(&t)
            .push(" WHERE ")
            .ident(&c)
            .push(" > ")
            .param(1);
        assert_eq!(sql.as_str(), "DELETE FROM \"events\" WHERE \"id\" > $1");
    }
}
