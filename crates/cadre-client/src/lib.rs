//! The client of cadre's controller: everything a program needs to talk to a running
//! cluster, and nothing that runs one.
//!
//! What lives here:
//! - where the controller is ([`locate`]: the data directory, its run directory and the
//!   socket in it, from `$CADRE_DATA_DIR` and `$CADRE_RUN_DIR`; [`Target`]: a
//!   `$CADRE_SERVER` address);
//! - how to reach it ([`Connection`], async, one HTTP/1.1 connection kept open; [`Client`],
//!   its blocking form for one command-line invocation): over the Unix socket (the kernel
//!   tells the controller who we are) or over TCP with a bearer token. The choice of
//!   transport is made in one place ([`Connection::open`]), where https will go;
//! - who is asking ([`user`]: the current user's name, as the controller names it) and
//!   when ([`clock`]: the wall clock and the local time zone, against which commands show
//!   the controller's times);
//! - what can fail ([`Error`], and [`ApiFailure`]: the API's own refusal with its code,
//!   reason and subject).
//!
//! What does not: the controller and the agents (`cadre-server`, `cadre-agent`, never a
//! dependency of this crate), the checks a daemon makes on its own directories
//! (`cadre-cli`), the wire types (`cadre-proto`), and any printing for users.

pub mod clock;
mod connection;
mod error;
pub mod locate;
mod target;
pub mod user;

pub use connection::{Client, Connection};
pub use error::{ApiFailure, BoxError, Error};
pub use target::Target;

/// The result of a client operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;
