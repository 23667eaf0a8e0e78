//! The PostgreSQL backend (`--database postgres://...`), for state at scale and controllers
//! that must not live on the database's machine. Same schema and queries as SQLite
//! (the `ops` module); what is PostgreSQL's own lives here: typed parameters (taken from the
//! prepared statement), statement caching per connection, retrying a transaction the
//! server aborted as a serialization failure or deadlock, and reconnecting after the
//! connection was lost.
//!
//! Durability is the server's: with its defaults (`fsync=on`, `synchronous_commit=on`) a
//! commit has reached the server's disk before the call returns. Connections are
//! unencrypted (`NoTls`): use a Unix socket or a trusted network until TLS is added.

use crate::error::StoreError;
use crate::sql::{Dialect, Mode, Row, Transact, Tx, Value};
use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls, Statement, Transaction};
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

/// A PostgreSQL connection's settings, as `PostgresStore::from_config` takes them.
pub use postgres::Config as PostgresConfig;

/// How often a transaction the server aborted for a retry (serialization failure,
/// deadlock) is run again before the error is returned.
const RETRIES: usize = 3;

/// The store in a PostgreSQL database.
pub struct PostgresStore {
    config: PostgresConfig,
    client: Client,
    /// The leader's epoch its writes are fenced with ([`PostgresStore::fence`]).
    epoch: Option<u64>,
    /// Prepared statements of this connection, by SQL text.
    statements: HashMap<String, Statement>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &target(&self.config))
            .finish()
    }
}

/// Host, port and database of `config`, for messages (never the password).
fn target(config: &PostgresConfig) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "host {} port {} database {}",
        hosts.join(","),
        if ports.is_empty() {
            "5432".into()
        } else {
            ports.join(",")
        },
        config.get_dbname().unwrap_or("(the user's)")
    )
}

fn connect(config: &PostgresConfig) -> Result<Client, StoreError> {
    config
        .connect(NoTls)
        .map_err(|source| StoreError::ConnectPostgres {
            target: target(config),
            source,
        })
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`, or the
    /// key=value form) and migrates it.
    pub fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let config = PostgresConfig::from_str(url).map_err(|e| StoreError::PostgresUrl {
            message: e.to_string(),
        })?;
        PostgresStore::from_config(config)
    }

    /// Connects with `config` and migrates the database.
    pub fn from_config(config: PostgresConfig) -> Result<PostgresStore, StoreError> {
        let mut store = PostgresStore::connect_unmigrated(config)?;
        crate::migrate(&mut store)?;
        Ok(store)
    }

    /// Connects with `config` and leaves the database as it is (tests build databases of
    /// older versions with it).
    pub(crate) fn connect_unmigrated(
        mut config: PostgresConfig,
    ) -> Result<PostgresStore, StoreError> {
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let client = connect(&config)?;
        Ok(PostgresStore {
            config,
            client,
            epoch: None,
            statements: HashMap::new(),
        })
    }
}

impl PostgresStore {
    /// Fences every later write transaction with the leader lease's `epoch`: each first
    /// reads the lease row `FOR SHARE` (a takeover, which updates it, waits for the write to
    /// end, and the write waits for a takeover under way) and fails with
    /// [`StoreError::Deposed`] when another leader has taken it since. So a leader that was
    /// paused or cut off while a standby took over commits nothing more.
    pub fn fence(&mut self, epoch: u64) {
        self.epoch = Some(epoch);
    }
}

/// The check of [`PostgresStore::fence`].
fn check_epoch(tx: &mut dyn Tx, mine: u64) -> Result<(), StoreError> {
    let rows = tx.query("SELECT epoch FROM leadership WHERE id = 1 FOR SHARE", &[])?;
    let now = match rows.first() {
        Some(row) => u64::try_from(row.int(0)?).unwrap_or(0),
        None => 0,
    };
    if now == mine {
        Ok(())
    } else {
        Err(StoreError::Deposed { mine, now })
    }
}

fn failed(sql: &str, source: postgres::Error) -> StoreError {
    let mut what: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    if what.len() > 80 {
        let cut = (0..=80)
            .rev()
            .find(|&i| what.is_char_boundary(i))
            .unwrap_or(0);
        what.truncate(cut);
        what.push_str("...");
    }
    StoreError::Postgres {
        what: format!("run `{what}`"),
        source,
    }
}

fn retryable(e: &StoreError) -> bool {
    match e {
        StoreError::Postgres { source, .. } => matches!(
            source.code(),
            Some(&SqlState::T_R_SERIALIZATION_FAILURE | &SqlState::T_R_DEADLOCK_DETECTED)
        ),
        _ => false,
    }
}

/// A parameter as the type the server inferred for it.
fn param(value: &Value, ty: &Type, sql: &str) -> Result<Box<dyn ToSql + Sync>, StoreError> {
    let mismatch = || StoreError::Corrupt {
        what: "query parameter",
        row: format!("`{sql}`"),
        message: format!("{value:?} cannot be sent as {ty}"),
    };
    Ok(match (value, ty) {
        (Value::Null, &Type::INT8) => Box::new(None::<i64>),
        (Value::Null, &Type::INT4) => Box::new(None::<i32>),
        (Value::Null, &Type::FLOAT8) => Box::new(None::<f64>),
        (Value::Null, &Type::BOOL) => Box::new(None::<bool>),
        (Value::Null, _) => Box::new(None::<String>),
        (Value::Int(v), &Type::INT8) => Box::new(*v),
        (Value::Int(v), &Type::INT4) => Box::new(i32::try_from(*v).map_err(|_| mismatch())?),
        (Value::Int(v), &Type::FLOAT8) => Box::new(*v as f64),
        (Value::Real(v), &Type::FLOAT8) => Box::new(*v),
        (Value::Text(v), &Type::TEXT | &Type::VARCHAR) => Box::new(v.clone()),
        (Value::Bool(v), &Type::BOOL) => Box::new(*v),
        _ => return Err(mismatch()),
    })
}

struct PgTx<'a, 'c> {
    tx: &'a mut Transaction<'c>,
    statements: &'a mut HashMap<String, Statement>,
}

impl PgTx<'_, '_> {
    fn prepare(
        &mut self,
        sql: &str,
        params: &[Value],
    ) -> Result<(Statement, Vec<Box<dyn ToSql + Sync>>), StoreError> {
        let stmt = match self.statements.get(sql) {
            Some(s) => s.clone(),
            None => {
                let s = self.tx.prepare(sql).map_err(|e| failed(sql, e))?;
                self.statements.insert(sql.to_owned(), s.clone());
                s
            }
        };
        if stmt.params().len() != params.len() {
            return Err(StoreError::Corrupt {
                what: "query",
                row: format!("`{sql}`"),
                message: format!(
                    "{} parameters given, {} expected",
                    params.len(),
                    stmt.params().len()
                ),
            });
        }
        let boxed = params
            .iter()
            .zip(stmt.params())
            .map(|(v, ty)| param(v, ty, sql))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((stmt, boxed))
    }
}

fn refs(boxed: &[Box<dyn ToSql + Sync>]) -> Vec<&(dyn ToSql + Sync)> {
    boxed.iter().map(|b| &**b).collect()
}

impl Tx for PgTx<'_, '_> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, StoreError> {
        let (stmt, boxed) = self.prepare(sql, params)?;
        self.tx
            .execute(&stmt, &refs(&boxed))
            .map_err(|e| failed(sql, e))
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, StoreError> {
        let (stmt, boxed) = self.prepare(sql, params)?;
        let rows = self
            .tx
            .query(&stmt, &refs(&boxed))
            .map_err(|e| failed(sql, e))?;
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| {
                        let ty = row.columns()[i].type_();
                        let get = |e| failed(sql, e);
                        Ok(match *ty {
                            Type::INT8 => row.try_get::<_, Option<i64>>(i).map_err(get)?.into(),
                            Type::INT4 => row
                                .try_get::<_, Option<i32>>(i)
                                .map_err(get)?
                                .map(i64::from)
                                .into(),
                            Type::FLOAT8 => row.try_get::<_, Option<f64>>(i).map_err(get)?.into(),
                            Type::BOOL => row.try_get::<_, Option<bool>>(i).map_err(get)?.into(),
                            Type::TEXT | Type::VARCHAR => {
                                row.try_get::<_, Option<String>>(i).map_err(get)?.into()
                            }
                            _ => {
                                return Err(StoreError::Corrupt {
                                    what: "column",
                                    row: format!("column {i} of `{sql}`"),
                                    message: format!("type {ty} is not one the schema uses"),
                                });
                            }
                        })
                    })
                    .collect::<Result<Vec<Value>, StoreError>>()
                    .map(Row)
            })
            .collect()
    }

    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.tx.batch_execute(sql).map_err(|e| failed(sql, e))
    }
}

impl Transact for PostgresStore {
    fn transact<T>(
        &mut self,
        mode: Mode,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.client.is_closed() {
            // The server went away since the last call: nothing of this call ran yet, so a
            // new connection is safe. (A connection lost during a commit is reported, not
            // retried: whether it committed is unknown.)
            self.client = connect(&self.config)?;
            self.statements.clear();
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut tx = self
                .client
                .build_transaction()
                .read_only(mode == Mode::Read)
                .start()
                .map_err(|e| failed("BEGIN", e))?;
            let mut ptx = PgTx {
                tx: &mut tx,
                statements: &mut self.statements,
            };
            let result = match self.epoch {
                Some(mine) if mode == Mode::Write => check_epoch(&mut ptx, mine),
                _ => Ok(()),
            }
            .and_then(|()| f(&mut ptx));
            let result = match result {
                Ok(out) => tx.commit().map_err(|e| failed("COMMIT", e)).map(|()| out),
                // Dropping `tx` rolls it back.
                Err(e) => Err(e),
            };
            match result {
                Err(e) if attempt <= RETRIES && retryable(&e) => continue,
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{Harness, conformance_suite};
    use std::io::Write;
    use std::sync::Once;
    use std::sync::atomic::{AtomicU32, Ordering};

    const URL_VAR: &str = "CADRE_TEST_POSTGRES";

    /// A schema of its own in the test database, dropped after the test.
    struct PostgresHarness {
        url: String,
        schema: String,
    }

    impl PostgresHarness {
        /// The test database, with this test's schema first on the search path.
        fn config(&self) -> Result<PostgresConfig, StoreError> {
            let mut config =
                PostgresConfig::from_str(&self.url).map_err(|e| StoreError::PostgresUrl {
                    message: e.to_string(),
                })?;
            config.options(&format!("-c search_path={}", self.schema));
            Ok(config)
        }
    }

    impl Harness for PostgresHarness {
        type Store = PostgresStore;
        fn open(&self) -> Result<PostgresStore, StoreError> {
            PostgresStore::from_config(self.config()?)
        }
        fn open_unmigrated(&self) -> Result<PostgresStore, StoreError> {
            PostgresStore::connect_unmigrated(self.config()?)
        }
    }

    impl Drop for PostgresHarness {
        fn drop(&mut self) {
            if let Ok(mut admin) = Client::connect(&self.url, NoTls) {
                let _ =
                    admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
            }
        }
    }

    fn harness() -> Option<PostgresHarness> {
        static NOTICE: Once = Once::new();
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let url = match std::env::var(URL_VAR) {
            Ok(url) if !url.is_empty() => url,
            _ => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "{URL_VAR} is unset in CI: the PostgreSQL conformance tests must run there \
                     (.ci/run starts a server and sets it)"
                );
                NOTICE.call_once(|| {
                    // Straight to stderr: the test harness captures `eprintln!` of passing tests.
                    let _ = writeln!(
                        std::io::stderr(),
                        "cadre-store: {URL_VAR} is unset; the PostgreSQL conformance tests \
                         are skipped"
                    );
                });
                return None;
            }
        };
        let schema = format!(
            "cadre_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut admin = match Client::connect(&url, NoTls) {
            Ok(c) => c,
            Err(e) => panic!("failed to connect to {URL_VAR}: {e}"),
        };
        if let Err(e) = admin.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        )) {
            panic!("failed to create test schema {schema}: {e}");
        }
        Some(PostgresHarness { url, schema })
    }

    conformance_suite!(harness);

    #[test]
    fn one_controller_leads_at_a_time_and_a_deposed_leader_writes_nothing() {
        use crate::{LeaderLease, Store};
        let Some(h) = harness() else { return };
        let lease = Duration::from_millis(300);
        let open = |who: &str| {
            LeaderLease::from_config(
                h.config().unwrap(),
                who,
                &format!("https://{who}:6817"),
                lease,
            )
            .unwrap()
        };
        let (mut a, mut b) = (open("a"), open("b"));
        assert_eq!(
            a.current().unwrap().holder,
            "",
            "nobody leads a new database"
        );
        let first = a.try_take().unwrap().expect("a free lease is taken");
        assert_eq!(b.try_take().unwrap(), None, "a held lease is not taken");
        let info = b.current().unwrap();
        assert_eq!(
            (info.epoch, info.holder.as_str(), info.address.as_str()),
            (first, "a", "https://a:6817")
        );
        assert!(info.live());
        let mut store = PostgresStore::from_config(h.config().unwrap()).unwrap();
        store.fence(first);
        let token = |s: &str| crate::NewJoinToken {
            hash: crate::TokenHash::of(s),
            node: None,
            created: cadre_core::time::Time(1),
            expires: cadre_core::time::Time(2),
        };
        store
            .create_join_token(&token("one"))
            .expect("the leader writes");
        // Renewed, it stays a's.
        std::thread::sleep(lease / 2);
        assert!(a.renew(first).unwrap());
        std::thread::sleep(lease / 2);
        assert_eq!(b.try_take().unwrap(), None);
        // a stops renewing (paused): b takes over with the next epoch...
        std::thread::sleep(lease + Duration::from_millis(100));
        let second = b.try_take().unwrap().expect("a lapsed lease is taken");
        assert_eq!(second, first + 1);
        // ...and a, waking, can neither renew nor write; reads still work.
        assert!(!a.renew(first).unwrap());
        let err = store.create_join_token(&token("two")).unwrap_err();
        assert!(
            matches!(err, StoreError::Deposed { mine, now } if mine == first && now == second),
            "{err}"
        );
        assert!(err.to_string().contains("no longer the leader"), "{err}");
        assert!(store.node_certs().is_ok());
        // A leader that resigns hands over at once.
        b.resign(second).unwrap();
        assert_eq!(a.try_take().unwrap(), Some(second + 1));
    }

    #[test]
    fn bad_url_says_what_was_wrong() {
        let err = PostgresStore::connect("postgres://a:b@host:notaport/db")
            .expect_err("a bad port is refused");
        assert!(
            err.to_string()
                .starts_with("failed to parse the PostgreSQL URL"),
            "{err}"
        );
    }
}
