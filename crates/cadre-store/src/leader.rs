//! The leader lease of replicated controllers (`cadre server --replica`), kept in the
//! PostgreSQL database they share.
//!
//! **Given** two or three controllers on one database, each with its own connection for
//! the lease. **Decided** here: who leads, under which epoch, until when. **Must hold**:
//! at most one controller writes at a time. The lease is one row (`leadership`, made by
//! migration 6): the epoch, its holder and the address it serves at, and when it was last
//! renewed, all by the database's clock (the controllers' clocks are never compared).
//! - A standby takes the lease only when nobody holds it or its holder has not renewed it
//!   for a whole lease ([`LeaderLease::try_take`]); taking it increments the epoch, in one
//!   statement, so of two standbys trying at once exactly one wins.
//! - The leader renews it every fraction of a lease ([`LeaderLease::renew`]); a renewal
//!   that finds another epoch says the leader was deposed.
//! - What makes the epoch a fence is the store: the leader's writes are checked against it
//!   ([`crate::PostgresStore::fence`]), so a leader that was paused past its lease (SIGSTOP,
//!   a long garbage-collection-like stall, a cut network) and wakes after a standby took
//!   over commits nothing, whatever it still believes.

use crate::error::StoreError;
use postgres::{Client, NoTls};
use std::str::FromStr;
use std::time::Duration;

/// The database's clock, in milliseconds since the Unix epoch.
const NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

/// Who holds the lease, as the database says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    pub epoch: u64,
    /// The holder's name (`host:pid`); empty: nobody (never taken, or resigned).
    pub holder: String,
    /// Where the holder serves (its `--advertise` address), for clients sent there.
    pub address: String,
    /// Since when it leads, in milliseconds since the Unix epoch (the database's clock).
    pub since_ms: u64,
    /// How long ago it last renewed the lease.
    pub renewed_ago: Duration,
    pub lease: Duration,
}

impl LeaderInfo {
    /// Whether the lease is held now: taken, and renewed within its length.
    pub fn live(&self) -> bool {
        !self.holder.is_empty() && self.renewed_ago <= self.lease
    }
}

/// The lease, as taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taken {
    pub epoch: u64,
    /// From the previous leader's last renewal to this takeover (`None`: there was none,
    /// or it resigned).
    pub gap: Option<Duration>,
    /// When it was taken, in milliseconds since the Unix epoch (the database's clock).
    pub since_ms: u64,
}

/// One controller's handle on the lease: a connection of its own.
pub struct LeaderLease {
    client: Client,
    holder: String,
    address: String,
    lease: Duration,
}

impl std::fmt::Debug for LeaderLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderLease")
            .field("holder", &self.holder)
            .field("address", &self.address)
            .field("lease", &self.lease)
            .finish()
    }
}

fn failed(what: &str, source: postgres::Error) -> StoreError {
    StoreError::Postgres {
        what: what.to_owned(),
        source,
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl LeaderLease {
    /// Connects to the database at `url` (migrating it, so that the lease row exists) as
    /// controller `holder`, which serves at `address` and holds the lease for `lease` past
    /// each renewal.
    pub fn connect(
        url: &str,
        holder: &str,
        address: &str,
        lease: Duration,
    ) -> Result<LeaderLease, StoreError> {
        let config = crate::PostgresConfig::from_str(url).map_err(|e| StoreError::PostgresUrl {
            message: e.to_string(),
        })?;
        LeaderLease::from_config(config, holder, address, lease)
    }

    /// [`LeaderLease::connect`] with the connection's settings.
    pub fn from_config(
        mut config: crate::PostgresConfig,
        holder: &str,
        address: &str,
        lease: Duration,
    ) -> Result<LeaderLease, StoreError> {
        // Migrated through the store's own path (and its lock against other starters).
        drop(crate::PostgresStore::from_config(config.clone())?);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let client = config
            .connect(NoTls)
            .map_err(|source| StoreError::ConnectPostgres {
                target: "the leader lease's database".into(),
                source,
            })?;
        Ok(LeaderLease {
            client,
            holder: holder.to_owned(),
            address: address.to_owned(),
            lease,
        })
    }

    /// The lease's length.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Takes the lease if nobody holds it (never taken, resigned, or not renewed for a
    /// whole lease): its new epoch, or `None` when another controller holds it.
    pub fn try_take(&mut self) -> Result<Option<u64>, StoreError> {
        Ok(self.take()?.map(|t| t.epoch))
    }

    /// [`LeaderLease::try_take`], saying also how long the cluster went without a leader.
    pub fn take(&mut self) -> Result<Option<Taken>, StoreError> {
        // The previous holder's row is read in the same statement (locked), for the gap.
        let sql = format!(
            "WITH old AS (SELECT holder, renewed_ms FROM leadership WHERE id = 1 FOR UPDATE) \
             UPDATE leadership SET epoch = epoch + 1, holder = $1, address = $2, \
             renewed_ms = {NOW_MS}, since_ms = {NOW_MS}, lease_ms = $3 FROM old \
             WHERE id = 1 AND (old.holder = '' OR old.renewed_ms + leadership.lease_ms < {NOW_MS}) \
             RETURNING leadership.epoch, old.holder, leadership.since_ms - old.renewed_ms, \
             leadership.since_ms"
        );
        let rows = self
            .client
            .query(&sql, &[&self.holder, &self.address, &ms(self.lease)])
            .map_err(|e| failed("take the leader lease", e))?;
        Ok(rows.first().map(|r| {
            let nonneg = |v: i64| u64::try_from(v).unwrap_or(0);
            let previous: String = r.get(1);
            Taken {
                epoch: nonneg(r.get(0)),
                gap: (!previous.is_empty()).then(|| Duration::from_millis(nonneg(r.get(2)))),
                since_ms: nonneg(r.get(3)),
            }
        }))
    }

    /// Renews the lease of `epoch`: `false` when another controller has taken it since.
    pub fn renew(&mut self, epoch: u64) -> Result<bool, StoreError> {
        let sql =
            format!("UPDATE leadership SET renewed_ms = {NOW_MS} WHERE id = 1 AND epoch = $1");
        let epoch = i64::try_from(epoch).unwrap_or(i64::MAX);
        let n = self
            .client
            .execute(&sql, &[&epoch])
            .map_err(|e| failed("renew the leader lease", e))?;
        Ok(n == 1)
    }

    /// Gives the lease of `epoch` up (a clean stop): a standby takes it at once.
    pub fn resign(&mut self, epoch: u64) -> Result<(), StoreError> {
        let epoch = i64::try_from(epoch).unwrap_or(i64::MAX);
        self.client
            .execute(
                "UPDATE leadership SET holder = '', renewed_ms = 0 WHERE id = 1 AND epoch = $1",
                &[&epoch],
            )
            .map_err(|e| failed("resign the leader lease", e))?;
        Ok(())
    }

    /// Who holds the lease now.
    pub fn current(&mut self) -> Result<LeaderInfo, StoreError> {
        let sql = format!(
            "SELECT epoch, holder, address, since_ms, {NOW_MS} - renewed_ms, lease_ms \
             FROM leadership WHERE id = 1"
        );
        let rows = self
            .client
            .query(&sql, &[])
            .map_err(|e| failed("read the leader lease", e))?;
        let Some(r) = rows.first() else {
            return Err(StoreError::Corrupt {
                what: "leader lease",
                row: "leadership".into(),
                message: "its row is missing".into(),
            });
        };
        let nonneg = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(LeaderInfo {
            epoch: nonneg(r.get(0)),
            holder: r.get(1),
            address: r.get(2),
            since_ms: nonneg(r.get(3)),
            renewed_ago: Duration::from_millis(nonneg(r.get(4))),
            lease: Duration::from_millis(nonneg(r.get(5))),
        })
    }
}
