//! Who is asking: the name the controller gives this process's user.

pub use cadre_proto::user::name_of_uid;

/// The user running this process (its effective uid), as the controller names the peer of
/// its socket.
pub fn current() -> String {
    name_of_uid(nix::unistd::geteuid().as_raw())
}
