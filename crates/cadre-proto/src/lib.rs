//! cadre-proto: what goes over the wire, and nothing else. The bodies of the REST API
//! under `/api/v1` ([`api`]) and the messages between the controller and its node agents
//! ([`agent`]). Plain serde types shared by the controller, the agent and the command-line
//! clients, so that both ends of every connection are compiled from one definition.
//!
//! Also the shape of a job token ([`job_token`]), which agents make and the controller
//! checks, and how the API names a local user ([`user`]), which the controller and the
//! clients must agree on. And the exit codes of every command ([`exit`]), which scripts
//! rely on as they rely on the API.
//!
//! Not here: how the messages are carried (HTTP, WebSocket), authentication, or what
//! either end does with them.

pub mod address;
pub mod agent;
pub mod api;
pub mod exit;
pub mod job_token;
pub mod user;
