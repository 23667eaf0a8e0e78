//! How the API names a local user: the controller names the peer of its Unix socket so, and
//! a client names itself so (to ask for its own jobs, to fill a job's `user`). One function,
//! so that the two ends always agree.

/// The name of user `uid` in this machine's user database, or `uid<N>` when it has none.
pub fn name_of_uid(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| format!("uid{uid}"), |u| u.name)
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
