//! Who is asking: the name the controller gives this process's user.

/// The name of user `uid` (`uid<N>` when the system does not know it), as the controller
/// names the peer of its socket.
pub fn name_of_uid(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| format!("uid{uid}"), |u| u.name)
}

/// The user running this process (its effective uid).
pub fn current() -> String {
    name_of_uid(nix::unistd::geteuid().as_raw())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_uid_is_named_by_its_number() {
        assert_eq!(name_of_uid(0), "root");
        assert_eq!(name_of_uid(4_000_000_000), "uid4000000000");
    }
}
