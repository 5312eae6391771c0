//! Sluice's statements on MySQL and MariaDB, whose placeholders are `?`,
//! taken in the order they appear, where every other dialect's are `$N`,
//! which may appear in any order and more than once.
//!
//! Statements stay written once, with `$N`: a MySQL backend module names
//! this module as its `sqlx` (`use crate::positional as sqlx;`), so its
//! `sqlx::query`, `query_as` and `query_scalar` build a [`Positional`]
//! query. Values bound to it are kept, in `$N` order, until it runs; then
//! [`mysql_text`] rewrites each `$N` outside a quoted literal or identifier
//! as `?` and the values are bound in the order the placeholders appear,
//! one repeated as often as its `$N` is. Everything else of sqlx is
//! re-exported unchanged.

#![allow(
    hidden_glob_reexports,
    reason = "the module stands in for sqlx: its own items override sqlx's"
)]

use sqlx::mysql::{MySqlArguments, MySqlQueryResult, MySqlRow};

pub use sqlx::mysql::MySql;
use sqlx::{Encode, Executor, Type};

pub use ::sqlx::*;

/// A MySQL query written with `$N` placeholders, its values kept until it runs.
pub struct Positional<'t, Q> {
    sql: String,
    binds: Vec<Box<dyn Fn(Q) -> Q + Send + 't>>,
}

/// One of sqlx's MySQL query types, built from `?` text, bound one value at a time.
pub trait QueryKind<'t>: Sized {
    /// The query over `sql`, which is already in `?` form.
    fn of(sql: String) -> Self;
    /// The query with `value` bound to its next `?`.
    fn with<T: 't + Encode<'t, MySql> + Type<MySql>>(self, value: T) -> Self;
}

/// [`sqlx::query()`] for MySQL, taking `$N` placeholders.
pub fn query<'t>(sql: impl SqlSafeStr) -> Positional<'t, PlainQuery<'t>> {
    Positional::new(sql)
}

/// [`sqlx::query_as()`] for MySQL, taking `$N` placeholders.
pub fn query_as<'t, O>(sql: impl SqlSafeStr) -> Positional<'t, AsQuery<'t, O>>
where
    O: for<'r> FromRow<'r, MySqlRow>,
{
    Positional::new(sql)
}

/// [`sqlx::query_scalar()`] for MySQL, taking `$N` placeholders.
pub fn query_scalar<'t, O>(sql: impl SqlSafeStr) -> Positional<'t, ScalarQuery<'t, O>>
where
    (O,): for<'r> FromRow<'r, MySqlRow>,
{
    Positional::new(sql)
}

/// sqlx's plain MySQL query.
pub type PlainQuery<'t> = sqlx::query::Query<'t, MySql, MySqlArguments>;
/// sqlx's MySQL query mapped to `O`.
pub type AsQuery<'t, O> = sqlx::query::QueryAs<'t, MySql, O, MySqlArguments>;
/// sqlx's MySQL query of one column of type `O`.
pub type ScalarQuery<'t, O> = sqlx::query::QueryScalar<'t, MySql, O, MySqlArguments>;

impl<'t, Q: QueryKind<'t>> Positional<'t, Q> {
    fn new(sql: impl SqlSafeStr) -> Self {
        Positional {
            sql: sql.into_sql_str().as_str().to_owned(),
            binds: Vec::new(),
        }
    }

    /// Binds `value` to the next `$N` (the first call `$1`, and so on).
    pub fn bind<T>(mut self, value: T) -> Self
    where
        T: Encode<'t, MySql> + Type<MySql> + Clone + Send + 't,
    {
        self.binds.push(Box::new(move |q: Q| q.with(value.clone())));
        self
    }

    /// sqlx's query, in `?` form with every value bound where it appears;
    /// a `$N` with no value bound is refused.
    fn build(self) -> Result<Q, Error> {
        let (text, order) = mysql_text(&self.sql);
        let mut query = Q::of(text);
        for n in order {
            let bind = self.binds.get(n - 1).ok_or_else(|| {
                Error::InvalidArgument(format!("no value bound for ${n} in: {}", self.sql))
            })?;
            query = bind(query);
        }
        Ok(query)
    }
}

impl<'t> Positional<'t, PlainQuery<'t>> {
    /// Runs the statement; see sqlx's `Query::execute`.
    pub async fn execute<'e, 'c: 'e, E>(self, executor: E) -> Result<MySqlQueryResult, Error>
    where
        E: 'e + Executor<'c, Database = MySql>,
    {
        self.build()?.execute(executor).await
    }

    /// All rows; see sqlx's `Query::fetch_all`.
    pub async fn fetch_all<'e, 'c: 'e, E>(self, executor: E) -> Result<Vec<MySqlRow>, Error>
    where
        E: 'e + Executor<'c, Database = MySql>,
    {
        self.build()?.fetch_all(executor).await
    }

    /// The first row if any; see sqlx's `Query::fetch_optional`.
    pub async fn fetch_optional<'e, 'c: 'e, E>(self, executor: E) -> Result<Option<MySqlRow>, Error>
    where
        E: 'e + Executor<'c, Database = MySql>,
    {
        self.build()?.fetch_optional(executor).await
    }
}

/// The terminal methods of a query that yields `O`s.
macro_rules! yielding {
    ($kind:ident, $bound:ty) => {
        impl<'t, O> Positional<'t, $kind<'t, O>>
        where
            $bound: for<'r> FromRow<'r, MySqlRow>,
            O: Send + Unpin,
        {
            /// All results.
            pub async fn fetch_all<'e, 'c: 'e, E>(self, executor: E) -> Result<Vec<O>, Error>
            where
                E: 'e + Executor<'c, Database = MySql>,
                O: 'e,
            {
                self.build()?.fetch_all(executor).await
            }

            /// The first result if any.
            pub async fn fetch_optional<'e, 'c: 'e, E>(
                self,
                executor: E,
            ) -> Result<Option<O>, Error>
            where
                E: 'e + Executor<'c, Database = MySql>,
                O: 'e,
            {
                self.build()?.fetch_optional(executor).await
            }

            /// The first result.
            pub async fn fetch_one<'e, 'c: 'e, E>(self, executor: E) -> Result<O, Error>
            where
                E: 'e + Executor<'c, Database = MySql>,
                O: 'e,
            {
                self.build()?.fetch_one(executor).await
            }
        }
    };
}

yielding!(AsQuery, O);
yielding!(ScalarQuery, (O,));

impl<'t> QueryKind<'t> for PlainQuery<'t> {
    fn of(sql: String) -> Self {
        sqlx::query(AssertSqlSafe(sql))
    }

    fn with<T: 't + Encode<'t, MySql> + Type<MySql>>(self, value: T) -> Self {
        self.bind(value)
    }
}

impl<'t, O> QueryKind<'t> for AsQuery<'t, O>
where
    O: for<'r> FromRow<'r, MySqlRow>,
{
    fn of(sql: String) -> Self {
        sqlx::query_as(AssertSqlSafe(sql))
    }

    fn with<T: 't + Encode<'t, MySql> + Type<MySql>>(self, value: T) -> Self {
        self.bind(value)
    }
}

impl<'t, O> QueryKind<'t> for ScalarQuery<'t, O>
where
    (O,): for<'r> FromRow<'r, MySqlRow>,
{
    fn of(sql: String) -> Self {
        sqlx::query_scalar(AssertSqlSafe(sql))
    }

    fn with<T: 't + Encode<'t, MySql> + Type<MySql>>(self, value: T) -> Self {
        self.bind(value)
    }
}

/// `sql` with each `$N` placeholder written `?`, and the `N` of each in the
/// order they appear. A `$` inside a quoted literal (`'…'`), a quoted
/// identifier (`"…"`, `` `…` ``) or not followed by a digit is left as it is.
pub fn mysql_text(sql: &str) -> (String, Vec<usize>) {
    let mut text = String::with_capacity(sql.len());
    let mut order = Vec::new();
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                text.push(c);
            }
            None if matches!(c, '\'' | '"' | '`') => {
                quote = Some(c);
                text.push(c);
            }
            None if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) => {
                let mut n = 0usize;
                while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                    n = n * 10 + d as usize;
                    chars.next();
                }
                order.push(n);
                text.push('?');
            }
            None => text.push(c),
        }
    }
    (text, order)
}

#[cfg(test)]
mod tests {
    use super::mysql_text;

    #[test]
    fn placeholders_become_question_marks_in_the_order_they_appear() {
        let (text, order) = mysql_text("UPDATE t SET a = $3, b = $3 WHERE id = $1 AND e = $12");
        assert_eq!(text, "UPDATE t SET a = ?, b = ? WHERE id = ? AND e = ?");
        assert_eq!(order, vec![3, 3, 1, 12]);
    }

    #[test]
    fn dollars_inside_quotes_or_without_a_digit_are_left_alone() {
        let sql = "SELECT '$1', \"$2\", `$3`, 'it''s $4', $ FROM t WHERE x = $5";
        let (text, order) = mysql_text(sql);
        assert_eq!(
            text,
            "SELECT '$1', \"$2\", `$3`, 'it''s $4', $ FROM t WHERE x = ?"
        );
        assert_eq!(order, vec![5]);
    }
}
