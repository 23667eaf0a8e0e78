//! The SQLite backend: one file under the data directory, the embedded default.
//!
//! Settings, and why:
//! - `journal_mode=WAL`: readers do not block the writer, and a commit is one append to the
//!   write-ahead log instead of rewriting pages through a rollback journal.
//! - `synchronous=FULL`: every commit fsyncs the WAL before it returns. With `NORMAL`, WAL
//!   commits survive a crash of the process but the last ones may be lost if the OS crashes
//!   or the power fails before the next checkpoint; an acknowledged submission must survive
//!   those too, so `FULL` is the honest default. Group commit ([`crate::Store::submit_batch`])
//!   pays one fsync for a whole batch, which is what keeps submissions fast.
//!   [`SqliteDurability::Normal`] exists for benchmarks and throwaway clusters only.
//! - `busy_timeout` of 30 s: a second handle (another thread, `cadre` reading the file)
//!   waits for the write lock instead of failing. Write transactions begin `IMMEDIATE`, so
//!   they queue on that timeout rather than deadlocking on a lock upgrade.
//! - `foreign_keys=ON`: accounting rows must name a job that exists.

use crate::error::StoreError;
use crate::sql::{Dialect, Mode, Row, Transact, Tx, Value, sqlite_placeholders};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, TransactionBehavior};
use std::path::Path;
use std::time::Duration;

/// How hard an SQLite commit waits for the disk.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum SqliteDurability {
    /// fsync the WAL at every commit: a returned commit survives power loss.
    #[default]
    Full,
    /// fsync only at checkpoints: a returned commit survives a crash of the process, but
    /// not necessarily of the OS or the machine.
    Normal,
}

/// The store in an SQLite file.
pub struct SqliteStore {
    conn: Connection,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.conn.path())
            .finish()
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path` with full durability and
    /// migrates it.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, SqliteDurability::Full)
    }

    /// Opens the database at `path` with the given durability and migrates it.
    pub fn open_with(path: &Path, durability: SqliteDurability) -> Result<SqliteStore, StoreError> {
        let mut store = SqliteStore::open_unmigrated(path, durability)?;
        crate::migrate(&mut store)?;
        Ok(store)
    }

    /// Opens the database at `path` as it is, without migrating it (tests build databases
    /// of older versions with it).
    pub(crate) fn open_unmigrated(
        path: &Path,
        durability: SqliteDurability,
    ) -> Result<SqliteStore, StoreError> {
        let open_err = |source| StoreError::OpenSqlite {
            path: path.display().to_string(),
            source,
        };
        make_private(path).map_err(|source| StoreError::Permissions {
            path: path.display().to_string(),
            source,
        })?;
        let conn = Connection::open(path).map_err(open_err)?;
        conn.busy_timeout(Duration::from_secs(30))
            .map_err(open_err)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt {
                what: "journal mode",
                row: path.display().to_string(),
                message: format!("SQLite kept `{mode}` instead of switching to WAL"),
            });
        }
        let sync = match durability {
            SqliteDurability::Full => "FULL",
            SqliteDurability::Normal => "NORMAL",
        };
        conn.execute_batch(&format!(
            "PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON;"
        ))
        .map_err(open_err)?;
        conn.set_prepared_statement_cache_capacity(64);
        Ok(SqliteStore { conn })
    }
}

/// Creates the database file readable and writable by its owner alone, and takes group's
/// and others' access away from an existing one and from its WAL and shared-memory files
/// (SQLite creates those with the database's mode): it holds every job's environment and
/// script. Names SQLite gives a meaning of its own (`:memory:`, `file:` URIs) are left be.
fn make_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let text = path.to_string_lossy();
    if text.is_empty() || text == ":memory:" || text.starts_with("file:") {
        return Ok(());
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let file = Path::new(&name);
        match std::fs::metadata(file) {
            Ok(m) if m.permissions().mode() & 0o077 != 0 => {
                let mode = m.permissions().mode() & 0o700;
                std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode))?;
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Int(v) => ToSqlOutput::Borrowed(ValueRef::Integer(*v)),
            Value::Real(v) => ToSqlOutput::Borrowed(ValueRef::Real(*v)),
            Value::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Value::Bool(v) => ToSqlOutput::Borrowed(ValueRef::Integer(i64::from(*v))),
        })
    }
}

struct SqliteTx<'c> {
    conn: &'c Connection,
}

fn failed(sql: &str, source: rusqlite::Error) -> StoreError {
    let mut what: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    if what.len() > 80 {
        let cut = (0..=80)
            .rev()
            .find(|&i| what.is_char_boundary(i))
            .unwrap_or(0);
        what.truncate(cut);
        what.push_str("...");
    }
    StoreError::Sqlite {
        what: format!("run `{what}`"),
        source,
    }
}

impl Tx for SqliteTx<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&sqlite_placeholders(sql))
            .map_err(|e| failed(sql, e))?;
        let changed = stmt
            .execute(rusqlite::params_from_iter(params))
            .map_err(|e| failed(sql, e))?;
        Ok(changed as u64)
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&sqlite_placeholders(sql))
            .map_err(|e| failed(sql, e))?;
        let columns = stmt.column_count();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params))
            .map_err(|e| failed(sql, e))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| failed(sql, e))? {
            let mut values = Vec::with_capacity(columns);
            for i in 0..columns {
                let v = match row.get_ref(i).map_err(|e| failed(sql, e))? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(v) => Value::Int(v),
                    ValueRef::Real(v) => Value::Real(v),
                    ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(_) => {
                        return Err(StoreError::Corrupt {
                            what: "column",
                            row: format!("column {i} of `{sql}`"),
                            message: "a blob where the schema has none".into(),
                        });
                    }
                };
                values.push(v);
            }
            out.push(Row(values));
        }
        Ok(out)
    }

    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.conn.execute_batch(sql).map_err(|e| failed(sql, e))
    }
}

impl Transact for SqliteStore {
    fn transact<T>(
        &mut self,
        mode: Mode,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let behavior = match mode {
            Mode::Read => TransactionBehavior::Deferred,
            Mode::Write => TransactionBehavior::Immediate,
        };
        let tx = self
            .conn
            .transaction_with_behavior(behavior)
            .map_err(|e| failed("BEGIN", e))?;
        // Dropping `tx` on an error rolls it back.
        let out = f(&mut SqliteTx { conn: &tx })?;
        tx.commit().map_err(|e| failed("COMMIT", e))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use crate::conformance::{Harness, conformance_suite};

    /// A database file in a temporary directory of its own, removed after the test.
    struct SqliteHarness {
        dir: tempfile::TempDir,
    }

    impl Harness for SqliteHarness {
        type Store = SqliteStore;
        fn open(&self) -> Result<SqliteStore, StoreError> {
            SqliteStore::open(&self.dir.path().join("cadre.db"))
        }
        fn open_unmigrated(&self) -> Result<SqliteStore, StoreError> {
            SqliteStore::open_unmigrated(&self.dir.path().join("cadre.db"), SqliteDurability::Full)
        }
    }

    fn harness() -> Option<SqliteHarness> {
        Some(SqliteHarness {
            dir: tempfile::tempdir().expect("failed to create a temporary directory"),
        })
    }

    conformance_suite!(harness);

    /// The database holds every job's environment and script: a new one is its owner's
    /// alone whatever the umask, and an existing one left open to others (and its WAL and
    /// shared-memory files) is closed to them when opened.
    #[test]
    fn the_database_and_its_wal_are_readable_by_their_owner_alone() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cadre.db");
        let wal = dir.path().join("cadre.db-wal");
        {
            let mut store = SqliteStore::open(&path).unwrap();
            store.submit_batch(&[]).unwrap();
            assert_eq!(mode(&path), 0o600);
            assert!(wal.exists(), "a WAL while the store is open");
            assert_eq!(mode(&wal), 0o600);
        }
        // A database of an older cadre, open to everyone.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&wal, b"").unwrap();
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o666)).unwrap();
        let _store = SqliteStore::open(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&wal), 0o600);
    }

    const CRASH_CHILD: &str = "CADRE_STORE_CRASH_CHILD";

    /// The child half of the crash test: submits batches and prints the last id of each as
    /// soon as `submit_batch` returned (the acknowledgement), until it is killed.
    fn submit_until_killed(path: &str) {
        use std::io::Write;
        let mut store = SqliteStore::open(Path::new(path)).expect("child opens the store");
        let job = crate::NewJob {
            spec: cadre_core::job::JobSpec::simple(
                "u",
                "a",
                1,
                cadre_core::resources::TaskResources::default(),
                cadre_core::time::Dur::hours(1),
            ),
            run: cadre_core::run::RunSpec::command(vec!["true".into()], "/tmp".into()),
            partition: "p".into(),
            array_of: None,
        };
        let mut out = std::io::stdout().lock();
        // Bounded, in case the parent died before killing us.
        for _ in 0..200_000 {
            let ids = store
                .submit_batch(&vec![job.clone(); 8])
                .expect("child submits");
            if let Some(last) = ids.last() {
                let _ = writeln!(out, "acked {}", last.0);
                let _ = out.flush();
            }
        }
    }

    #[test]
    fn acknowledged_submissions_survive_kill_9() {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        if let Ok(path) = std::env::var(CRASH_CHILD) {
            submit_until_killed(&path);
            return;
        }
        let dir = tempfile::tempdir().expect("failed to create a temporary directory");
        let path = dir.path().join("cadre.db");
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "sqlite::tests::acknowledged_submissions_survive_kill_9",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_CHILD, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("failed to start the child");
        let stdout = child.stdout.take().expect("child stdout");
        let mut acked = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.expect("child output");
            if let Some(id) = line.strip_prefix("acked ") {
                acked.push(id.parse::<u64>().expect("an id"));
                if acked.len() == 300 {
                    break;
                }
            }
        }
        // SIGKILL in the middle of its next commits.
        child.kill().expect("failed to kill the child");
        let _ = child.wait();
        assert_eq!(acked.len(), 300, "the child stopped early");
        let last_acked = acked[acked.len() - 1];

        let mut store = SqliteStore::open(&path).expect("reopen after kill -9");
        let stored: Vec<u64> = store
            .list_jobs(&crate::JobFilter::default())
            .expect("list")
            .iter()
            .map(|j| j.id.0)
            .collect();
        // Every acknowledged job is there, with no gap (batches commit whole).
        assert!(
            stored.len() as u64 >= last_acked,
            "{} < {last_acked}",
            stored.len()
        );
        assert_eq!(
            stored[..],
            (1..=stored.len() as u64).collect::<Vec<_>>()[..]
        );
        // New ids start above everything ever committed.
        let next = store.submit_batch(&[crate::NewJob {
            spec: cadre_core::job::JobSpec::simple(
                "u",
                "a",
                1,
                cadre_core::resources::TaskResources::default(),
                cadre_core::time::Dur::hours(1),
            ),
            run: cadre_core::run::RunSpec::command(vec!["true".into()], "/tmp".into()),
            partition: "p".into(),
            array_of: None,
        }]);
        let next = next.expect("submit after reopen")[0].0;
        assert_eq!(next, stored.len() as u64 + 1);
        assert!(next > last_acked);
    }
}
