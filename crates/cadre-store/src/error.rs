//! The store's one error type: what failed, on which record, and the backend's own error as
//! the source.

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("failed to open the SQLite database at `{path}`")]
    OpenSqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("failed to make the SQLite database at `{path}` readable by its owner alone")]
    Permissions {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("SQLite failed to {what}")]
    Sqlite {
        what: String,
        #[source]
        source: rusqlite::Error,
    },
    #[cfg(feature = "postgres")]
    #[error("failed to connect to PostgreSQL at {target}")]
    ConnectPostgres {
        /// Host, port and database, never the password.
        target: String,
        #[source]
        source: postgres::Error,
    },
    #[cfg(feature = "postgres")]
    #[error("PostgreSQL failed to {what}")]
    Postgres {
        what: String,
        #[source]
        source: postgres::Error,
    },
    #[cfg(feature = "postgres")]
    #[error("failed to parse the PostgreSQL URL: {message}")]
    PostgresUrl { message: String },
    #[cfg(not(feature = "postgres"))]
    #[error("`{url}` names a PostgreSQL database, but this build has no PostgreSQL support")]
    PostgresDisabled { url: String },
    #[error(
        "the database is at schema version {found}, newer than this build knows \
         (at most {supported}); upgrade cadre before using this database"
    )]
    SchemaTooNew { found: u32, supported: u32 },
    #[error(
        "this controller is no longer the leader: it led with epoch {mine}, and the lease is \
         now at epoch {now} (another controller took over); it writes nothing more"
    )]
    Deposed { mine: u64, now: u64 },
    #[error("failed to apply schema migration {version} (`{name}`)")]
    Migration {
        version: u32,
        name: &'static str,
        #[source]
        source: Box<StoreError>,
    },
    #[error("no job {id} in the store")]
    UnknownJob { id: u64 },
    #[error(
        "job {id} was submitted before the store kept what jobs run (schema version 1): \
         it has no run spec and cannot be launched"
    )]
    MissingRunSpec { id: u64 },
    #[error("failed to encode {what} of job {id} as JSON")]
    Encode {
        what: &'static str,
        id: u64,
        #[source]
        source: serde_json::Error,
    },
    #[error("stored {what} of {row} is not valid: {message}")]
    Corrupt {
        what: &'static str,
        row: String,
        message: String,
    },
    #[error("{what} {value} is out of the range the store keeps (0 to {max})")]
    OutOfRange {
        what: &'static str,
        value: u64,
        max: i64,
    },
    #[error("token hash `{text}` is not 64 hexadecimal digits")]
    BadTokenHash { text: String },
    #[error("a token with this hash already exists")]
    DuplicateToken,
}
