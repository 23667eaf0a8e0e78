//! The seam between the store's logic and its backends: SQL text with `$1`-style
//! placeholders, a handful of value types both databases share (64-bit integers, doubles,
//! text, booleans), and a transaction a backend opens and commits.
//!
//! The backends implement [`Transact`]; the `ops` module writes every query once against
//! [`Tx`]. What differs between the dialects stays in [`Dialect`] and in each backend's
//! file: placeholder spelling, the id column type, locking during migrations.

use crate::error::StoreError;

/// The SQL dialects the store speaks.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The type of an id column that the store assigns itself: SQLite's rowid alias, a
    /// plain 64-bit key in PostgreSQL.
    pub(crate) fn id_column(self) -> &'static str {
        match self {
            Dialect::Sqlite => "INTEGER PRIMARY KEY",
            Dialect::Postgres => "BIGINT PRIMARY KEY",
        }
    }
}

/// One value passed to or read from the database.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Bool(bool),
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Real(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_owned())
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// One result row.
#[derive(Clone, Debug, PartialEq)]
pub struct Row(pub(crate) Vec<Value>);

impl Row {
    fn at(&self, i: usize) -> Result<&Value, StoreError> {
        self.0.get(i).ok_or_else(|| corrupt("column", i, "missing"))
    }

    pub(crate) fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Int(v) => Ok(Some(*v)),
            other => Err(corrupt("integer", i, &format!("{other:?}"))),
        }
    }

    pub(crate) fn int(&self, i: usize) -> Result<i64, StoreError> {
        self.opt_int(i)?
            .ok_or_else(|| corrupt("integer", i, "NULL"))
    }

    pub(crate) fn opt_text(&self, i: usize) -> Result<Option<&str>, StoreError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Text(v) => Ok(Some(v)),
            other => Err(corrupt("text", i, &format!("{other:?}"))),
        }
    }

    pub(crate) fn text(&self, i: usize) -> Result<&str, StoreError> {
        self.opt_text(i)?.ok_or_else(|| corrupt("text", i, "NULL"))
    }

    pub(crate) fn real(&self, i: usize) -> Result<f64, StoreError> {
        match self.at(i)? {
            Value::Real(v) => Ok(*v),
            // SQLite hands back a REAL column holding a whole number as an integer.
            Value::Int(v) => Ok(*v as f64),
            other => Err(corrupt("real", i, &format!("{other:?}"))),
        }
    }

    pub(crate) fn bool(&self, i: usize) -> Result<bool, StoreError> {
        match self.at(i)? {
            Value::Bool(v) => Ok(*v),
            // SQLite keeps booleans as 0 and 1.
            Value::Int(v) => Ok(*v != 0),
            other => Err(corrupt("boolean", i, &format!("{other:?}"))),
        }
    }
}

fn corrupt(what: &'static str, column: usize, message: &str) -> StoreError {
    StoreError::Corrupt {
        what,
        row: format!("result column {column}"),
        message: message.to_owned(),
    }
}

/// An open transaction: queries with `$1`, `$2`, ... placeholders.
pub trait Tx {
    fn dialect(&self) -> Dialect;
    /// Runs one statement; returns the rows it changed.
    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, StoreError>;
    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, StoreError>;
    /// Runs several statements without parameters (schema changes).
    fn batch(&mut self, sql: &str) -> Result<(), StoreError>;
}

/// Whether a transaction writes. SQLite takes its write lock up front for writers, so two
/// writers queue on the busy timeout instead of failing to upgrade a read lock.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
}

/// A backend: a connection that runs a closure inside a transaction and commits it, or
/// rolls it back if the closure fails. The closure may run more than once when the
/// database asks for a retry (a PostgreSQL serialization failure or deadlock).
///
/// Public only inside this crate's private module: every `Transact` is a
/// [`crate::Store`], and nothing outside can implement it.
pub trait Transact: Send {
    fn transact<T>(
        &mut self,
        mode: Mode,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError>;
}

/// Rewrites `$n` placeholders into SQLite's `?n` (same meaning: the n-th parameter).
pub(crate) fn sqlite_placeholders(sql: &str) -> String {
    sql.replace('$', "?")
}
