//! Fair-share: the tree of accounts and user associations, their decayed usage, and the
//! fair-share factor each user association contributes to job priority.
//!
//! What lives here: the association tree (accounts under `root`, users under accounts), raw
//! shares, raw usage and its half-life decay, the two factor algorithms of Slurm's
//! `priority/multifactor` plugin (Fair Tree and classic), and the per-row numbers that
//! `sshare -l` shows. What does not: turning allocations into billing units (the caller
//! charges billing-unit-seconds it computed from its billing table), the weighted priority
//! sum, text formatting of `sshare`, persistence, and the clock (elapsed time is passed in).
//!
//! # The problem
//!
//! **Given** a rooted tree. Inner nodes are accounts, with `root` at the top; each account
//! has raw shares (Slurm's `Fairshare=`, a `u32`). Leaves are user associations (a user
//! under one account; the same user may appear under several accounts), with raw shares or
//! `parent`. Each user association carries raw usage `U_raw` (decayed billing-unit-seconds);
//! an account's raw usage is the sum over its subtree. "Siblings" are all children (users
//! and sub-accounts alike) of one account; `parent` users do not count towards their
//! siblings' share total.
//!
//! **Decided**: one factor in `[0, 1]` per user association, by one of two algorithms.
//!
//! * [`FairShareAlgorithm::FairTree`] (Slurm's default since 19.05). Each node gets a Level
//!   Fairshare `LF = S / U` computed among its siblings only: `S = shares / sibling shares`
//!   and `U = U_raw / parent's U_raw`. No usage gives `LF = ∞`, zero shares give `LF = 0`
//!   (even with no usage), `parent` users get `LF = ∞`. Siblings are sorted by LF,
//!   descending, users before accounts on equal LF, and visited depth-first in pre-order;
//!   users are ranked as they are met, counting down from the number of user associations
//!   `N`, and get `rank / N`. Ties: sibling users with equal LF share a rank (the next
//!   distinct user gets the rank it would have had without the tie); a user with the same
//!   LF as a sibling account shares its rank with that account's top user; sibling accounts
//!   with equal LF have their children merged (and sorted together) before descending.
//! * [`FairShareAlgorithm::Classic`] (`PriorityFlags=NO_FAIR_TREE`). Normalised shares are
//!   the product of `shares / sibling shares` down the path from root. Normalised usage is
//!   `U_raw / root's U_raw`. Effective usage is the normalised usage for children of root,
//!   and `U_E = U + (U_E,parent - U) * shares / sibling shares` below (the parent's `U_E`
//!   when all siblings have zero shares). `parent` users take their account's normalised
//!   shares and effective usage. The factor is `2^(-U_E / S / d)`, or 0 when `S` is 0, with
//!   `d` the dampening factor (`FairShareDampeningFactor`, default 1).
//!
//! **Must hold** (checked by the tests below):
//!
//! * every factor is in `[0, 1]`; under Fair Tree every factor is in `(0, 1]` and the top
//!   user gets exactly 1.0;
//! * the Fair Tree guarantee: if two siblings (accounts or users) have `LF(A) > LF(B)`,
//!   every user under A has a higher factor than every user under B;
//! * determinism: the same sequence of calls gives bit-identical factors. Everything is
//!   stored in vectors in insertion order, equal sort keys are broken by index, nothing is
//!   hashed, nothing reads a clock;
//! * cost: a computation is `O(n log n)` in the number of nodes (the sort at each level) and
//!   makes a constant number of allocations, whatever the shape of the tree. No recursion,
//!   so a deep tree cannot overflow the stack.
//!
//! # Where cadre departs from Slurm, on purpose
//!
//! * Tied sibling accounts really are merged, as Slurm's Fair Tree page documents. In
//!   Slurm's `fair_tree.c` the helper that counts tied accounts stops at the first *account*
//!   it meets, so it never merges anything; the second of two tied accounts is then visited
//!   as "tied", and its top user gets the rank of the last user ranked before it. When the
//!   first of the tied accounts has no users, that user belongs to a sibling with a higher
//!   Level FS, which breaks the guarantee stated above (see the regression test
//!   `account_tied_with_an_empty_sibling_does_not_inherit_a_higher_rank`).
//! * Decay is exact, `2^(-elapsed / half_life)`. Slurm uses the first-order per-second
//!   factor `(1 - 0.693 / half_life)^elapsed`, which leaves 0.50004 (half-life one hour)
//!   to 0.50007 (one week) of the usage after one half-life instead of 0.5.
//! * Only user associations may have `parent` shares (Slurm also allows it on accounts).
//! * Classic: root's effective usage is its normalised usage (1, or 0 with no usage at
//!   all); Slurm pins it to 1.0. This only matters for `parent` users directly under root.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
use std::ops::Index;

use serde::{Deserialize, Serialize};

/// Name of the account at the top of every tree.
pub const ROOT_ACCOUNT: &str = "root";

/// Highest raw usage one user association may accumulate. Far above any real usage
/// (1e200 GPU-seconds), and low enough that summing any realistic number of associations
/// into their accounts stays finite, so no ratio below can become `inf / inf`.
pub const MAX_USAGE: f64 = 1e200;

/// Index of an account in a [`FairShareTree`]. Only meaningful for the tree that issued it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AccountIx(u32);

impl AccountIx {
    /// The `root` account, present in every tree.
    pub const ROOT: AccountIx = AccountIx(0);

    /// Position in per-account vectors.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for AccountIx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "account #{}", self.0)
    }
}

/// Index of a user association in a [`FairShareTree`]; small and `Copy`, so jobs can carry
/// it. Only meaningful for the tree that issued it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AssocIx(u32);

impl AssocIx {
    /// Position in per-association vectors, such as [`FairShareFactors::as_slice`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for AssocIx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "association #{}", self.0)
    }
}

/// Raw shares of an association (Slurm's `Fairshare=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shares {
    /// A number of shares, compared with the siblings' shares.
    Raw(u32),
    /// `Fairshare=parent`: the association stands for its account. Under Fair Tree it ranks
    /// at the top of its account (`LF = ∞`); under classic it takes the account's
    /// normalised shares and effective usage. Its shares do not count towards its siblings'.
    Parent,
}

impl Shares {
    fn raw(self) -> u32 {
        match self {
            Shares::Raw(n) => n,
            Shares::Parent => 0,
        }
    }
}

impl fmt::Display for Shares {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shares::Raw(n) => write!(f, "{n}"),
            Shares::Parent => f.write_str("parent"),
        }
    }
}

/// Which fair-share algorithm turns shares and usage into factors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FairShareAlgorithm {
    /// Fair Tree, Slurm's default since 19.05: users are ranked, factor = rank / users.
    #[default]
    FairTree,
    /// Classic fair-share (`PriorityFlags=NO_FAIR_TREE`): `2^(-U_E / S / dampening)`.
    Classic {
        /// `FairShareDampeningFactor`; 1 is Slurm's default and means no dampening.
        dampening: NonZeroU32,
    },
}

impl FairShareAlgorithm {
    /// Classic fair-share with Slurm's default dampening factor of 1.
    pub const CLASSIC: FairShareAlgorithm = FairShareAlgorithm::Classic {
        dampening: NonZeroU32::MIN,
    };
}

/// What failed while building or charging a [`FairShareTree`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FairShareError {
    #[error("invalid {kind} name `{name}`: names must be non-empty and contain no whitespace")]
    InvalidName { kind: &'static str, name: String },
    #[error("failed to add account `{name}`: an account with that name already exists")]
    DuplicateAccount { name: String },
    #[error("failed to add account `{name}`: parent account `{parent}` does not exist")]
    UnknownParent { name: String, parent: String },
    #[error("failed to add user `{user}` to account `{account}`: the account does not exist")]
    UnknownAccount { user: String, account: String },
    #[error("failed to add user `{user}` to account `{account}`: the association already exists")]
    DuplicateAssoc { user: String, account: String },
    #[error("failed to add {kind} `{name}`: the tree already holds 2^32 of them")]
    TooMany { kind: &'static str, name: String },
    #[error("failed to charge {assoc}: this tree has no such association")]
    UnknownAssoc { assoc: AssocIx },
    #[error(
        "failed to charge {billing_units} billing units to user `{user}` in account \
         `{account}`: usage must be finite, non-negative and stay below {MAX_USAGE:e}"
    )]
    InvalidCharge {
        user: String,
        account: String,
        billing_units: f64,
    },
    #[error(
        "failed to decay usage over {elapsed_s} s with half-life {half_life_s} s: \
         both must be finite and non-negative"
    )]
    InvalidDecay { elapsed_s: f64, half_life_s: f64 },
}

/// A child of an account, in the order it was added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Account(AccountIx),
    User(AssocIx),
}

#[derive(Debug, Clone)]
struct Account {
    name: String,
    /// `None` only for root. Always a smaller index than this account's own.
    parent: Option<AccountIx>,
    shares: u32,
    depth: u32,
    children: Vec<Node>,
    users: BTreeMap<String, AssocIx>,
}

#[derive(Debug, Clone)]
struct UserAssoc {
    user: String,
    account: AccountIx,
    shares: Shares,
    usage: f64,
}

/// Accounts and user associations with their shares and decayed usage.
///
/// Accounts are created parent first, so an account's index is always above its parent's:
/// a forward pass over accounts visits parents before children and a backward pass visits
/// children before parents. Cycles cannot be built.
#[derive(Debug, Clone)]
pub struct FairShareTree {
    accounts: Vec<Account>,
    assocs: Vec<UserAssoc>,
    account_by_name: BTreeMap<String, AccountIx>,
}

impl Default for FairShareTree {
    fn default() -> Self {
        Self::new()
    }
}

fn validate_name(kind: &'static str, name: &str) -> Result<(), FairShareError> {
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(FairShareError::InvalidName {
            kind,
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// The index the next node of a kind gets, if it still fits the `u32` newtypes.
fn next_index(len: usize, kind: &'static str, name: &str) -> Result<u32, FairShareError> {
    u32::try_from(len).map_err(|_| FairShareError::TooMany {
        kind,
        name: name.to_owned(),
    })
}

impl FairShareTree {
    /// A tree holding only the `root` account.
    pub fn new() -> Self {
        let root = Account {
            name: ROOT_ACCOUNT.to_owned(),
            parent: None,
            shares: 1,
            depth: 0,
            children: Vec::new(),
            users: BTreeMap::new(),
        };
        FairShareTree {
            accounts: vec![root],
            assocs: Vec::new(),
            account_by_name: BTreeMap::from([(ROOT_ACCOUNT.to_owned(), AccountIx::ROOT)]),
        }
    }

    /// Adds account `name` under the existing account `parent` with `shares` raw shares.
    pub fn add_account(
        &mut self,
        name: &str,
        parent: &str,
        shares: u32,
    ) -> Result<AccountIx, FairShareError> {
        validate_name("account", name)?;
        if self.account_by_name.contains_key(name) {
            return Err(FairShareError::DuplicateAccount {
                name: name.to_owned(),
            });
        }
        let parent_ix = self
            .account(parent)
            .ok_or_else(|| FairShareError::UnknownParent {
                name: name.to_owned(),
                parent: parent.to_owned(),
            })?;
        let ix = AccountIx(next_index(self.accounts.len(), "account", name)?);
        let depth = self.accounts[parent_ix.index()].depth + 1;
        self.accounts.push(Account {
            name: name.to_owned(),
            parent: Some(parent_ix),
            shares,
            depth,
            children: Vec::new(),
            users: BTreeMap::new(),
        });
        self.accounts[parent_ix.index()]
            .children
            .push(Node::Account(ix));
        self.account_by_name.insert(name.to_owned(), ix);
        Ok(ix)
    }

    /// Adds the association of `user` under the existing `account`, with zero usage.
    pub fn add_user(
        &mut self,
        user: &str,
        account: &str,
        shares: Shares,
    ) -> Result<AssocIx, FairShareError> {
        validate_name("user", user)?;
        let account_ix = self
            .account(account)
            .ok_or_else(|| FairShareError::UnknownAccount {
                user: user.to_owned(),
                account: account.to_owned(),
            })?;
        let node = &mut self.accounts[account_ix.index()];
        if node.users.contains_key(user) {
            return Err(FairShareError::DuplicateAssoc {
                user: user.to_owned(),
                account: account.to_owned(),
            });
        }
        let ix = AssocIx(next_index(self.assocs.len(), "user", user)?);
        node.users.insert(user.to_owned(), ix);
        node.children.push(Node::User(ix));
        self.assocs.push(UserAssoc {
            user: user.to_owned(),
            account: account_ix,
            shares,
            usage: 0.0,
        });
        Ok(ix)
    }

    /// The association of `user` under `account`, creating what is missing: the account
    /// directly under root with 1 share, the user with 1 share. For auto-created
    /// associations; fails only on invalid names.
    pub fn ensure_assoc(&mut self, user: &str, account: &str) -> Result<AssocIx, FairShareError> {
        if let Some(ix) = self.assoc(user, account) {
            return Ok(ix);
        }
        if self.account(account).is_none() {
            validate_name("user", user)?;
            self.add_account(account, ROOT_ACCOUNT, 1)?;
        }
        self.add_user(user, account, Shares::Raw(1))
    }

    /// The account called `name`.
    pub fn account(&self, name: &str) -> Option<AccountIx> {
        self.account_by_name.get(name).copied()
    }

    /// The association of `user` under `account`.
    pub fn assoc(&self, user: &str, account: &str) -> Option<AssocIx> {
        let account = self.account(account)?;
        self.accounts[account.index()].users.get(user).copied()
    }

    /// Name of an account. Panics on an index from another tree.
    pub fn account_name(&self, account: AccountIx) -> &str {
        &self.accounts[account.index()].name
    }

    /// Parent of an account; `None` for root. Panics on an index from another tree.
    pub fn account_parent(&self, account: AccountIx) -> Option<AccountIx> {
        self.accounts[account.index()].parent
    }

    /// User name of an association. Panics on an index from another tree.
    pub fn assoc_user(&self, assoc: AssocIx) -> &str {
        &self.assocs[assoc.index()].user
    }

    /// Account of an association. Panics on an index from another tree.
    pub fn assoc_account(&self, assoc: AssocIx) -> AccountIx {
        self.assocs[assoc.index()].account
    }

    /// Raw shares of an association. Panics on an index from another tree.
    pub fn assoc_shares(&self, assoc: AssocIx) -> Shares {
        self.assocs[assoc.index()].shares
    }

    /// Number of accounts, root included.
    pub fn account_count(&self) -> usize {
        self.accounts.len()
    }

    /// Number of user associations; Fair Tree divides ranks by this.
    pub fn user_count(&self) -> usize {
        self.assocs.len()
    }

    /// Adds `billing_units` (billing-unit-seconds) to the raw usage of `assoc`. Nothing is
    /// changed on error.
    pub fn charge(&mut self, assoc: AssocIx, billing_units: f64) -> Result<(), FairShareError> {
        let entry = self
            .assocs
            .get_mut(assoc.index())
            .ok_or(FairShareError::UnknownAssoc { assoc })?;
        let usage = entry.usage + billing_units;
        // `contains` is false for NaN, so NaN is rejected too.
        let allowed = 0.0..=MAX_USAGE;
        if !allowed.contains(&billing_units) || !allowed.contains(&usage) {
            return Err(FairShareError::InvalidCharge {
                user: entry.user.clone(),
                account: self.accounts[entry.account.index()].name.clone(),
                billing_units,
            });
        }
        entry.usage = usage;
        Ok(())
    }

    /// Decays every usage by `2^(-elapsed_s / half_life_s)`; a half-life of 0 means no decay
    /// (Slurm's `PriorityDecayHalfLife=0`). Nothing is changed on error.
    pub fn decay(&mut self, elapsed_s: f64, half_life_s: f64) -> Result<(), FairShareError> {
        let valid = |x: f64| x.is_finite() && x >= 0.0;
        if !valid(elapsed_s) || !valid(half_life_s) {
            return Err(FairShareError::InvalidDecay {
                elapsed_s,
                half_life_s,
            });
        }
        if half_life_s == 0.0 || elapsed_s == 0.0 {
            return Ok(());
        }
        let factor = (-elapsed_s / half_life_s).exp2();
        for assoc in &mut self.assocs {
            assoc.usage *= factor;
        }
        Ok(())
    }

    /// Raw (decayed) usage of a user association. Panics on an index from another tree.
    pub fn assoc_usage(&self, assoc: AssocIx) -> f64 {
        self.assocs[assoc.index()].usage
    }

    /// Raw usage of an account: the sum over its subtree. `O(n)`; for many accounts at
    /// once use [`FairShareTree::rows`].
    pub fn account_usage(&self, account: AccountIx) -> f64 {
        self.account_usages()[account.index()]
    }

    /// The fair-share factor of every user association, indexed by [`AssocIx`].
    pub fn factors(&self, algorithm: FairShareAlgorithm) -> FairShareFactors {
        let levels = self.levels(algorithm);
        FairShareFactors {
            by_assoc: levels.user.into_iter().map(|v| v.factor).collect(),
        }
    }

    /// What `sshare -l` shows, one row per account and per user association, in tree order:
    /// root first, and under each account its users by name, then its sub-accounts by name.
    pub fn rows(&self, algorithm: FairShareAlgorithm) -> Vec<ShareRow> {
        let levels = self.levels(algorithm);
        let is_fair_tree = algorithm == FairShareAlgorithm::FairTree;
        let mut rows = Vec::with_capacity(self.accounts.len() + self.assocs.len());
        let mut stack = vec![AccountIx::ROOT];
        let mut sub_accounts = Vec::new();
        while let Some(ix) = stack.pop() {
            let account = &self.accounts[ix.index()];
            let v = &levels.account[ix.index()];
            rows.push(ShareRow {
                account: account.name.clone(),
                user: None,
                depth: account.depth,
                raw_shares: Shares::Raw(account.shares),
                norm_shares: v.norm_shares,
                raw_usage: v.raw_usage,
                norm_usage: v.norm_usage,
                effective_usage: v.effective_usage,
                level_fs: (is_fair_tree && account.parent.is_some()).then_some(v.level_fs),
                fairshare: (!is_fair_tree && account.parent.is_some()).then_some(v.factor),
            });
            for &assoc_ix in account.users.values() {
                let assoc = &self.assocs[assoc_ix.index()];
                let v = &levels.user[assoc_ix.index()];
                rows.push(ShareRow {
                    account: account.name.clone(),
                    user: Some(assoc.user.clone()),
                    depth: account.depth + 1,
                    raw_shares: assoc.shares,
                    norm_shares: v.norm_shares,
                    raw_usage: v.raw_usage,
                    norm_usage: v.norm_usage,
                    effective_usage: v.effective_usage,
                    level_fs: is_fair_tree.then_some(v.level_fs),
                    fairshare: Some(v.factor),
                });
            }
            sub_accounts.clear();
            sub_accounts.extend(account.children.iter().filter_map(|c| match c {
                Node::Account(a) => Some(*a),
                Node::User(_) => None,
            }));
            sub_accounts.sort_unstable_by(|a, b| {
                self.accounts[a.index()]
                    .name
                    .cmp(&self.accounts[b.index()].name)
            });
            // Pushed in reverse so that the first by name is popped first.
            stack.extend(sub_accounts.iter().rev());
        }
        rows
    }

    /// Raw usage of every account (sum over its subtree), indexed by account.
    fn account_usages(&self) -> Vec<f64> {
        let mut usage = vec![0.0; self.accounts.len()];
        // Children have higher indices than their parents, so a backward pass has every
        // sub-account's total ready when its parent is summed.
        for i in (0..self.accounts.len()).rev() {
            let total = self.accounts[i]
                .children
                .iter()
                .map(|child| match *child {
                    Node::Account(a) => usage[a.index()],
                    Node::User(u) => self.assocs[u.index()].usage,
                })
                .sum();
            usage[i] = total;
        }
        usage
    }

    /// Sum of the raw shares of each account's children, `parent` users excluded.
    fn level_shares(&self) -> Vec<u64> {
        self.accounts
            .iter()
            .map(|account| {
                account
                    .children
                    .iter()
                    .map(|child| match *child {
                        Node::Account(a) => u64::from(self.accounts[a.index()].shares),
                        Node::User(u) => u64::from(self.assocs[u.index()].shares.raw()),
                    })
                    .sum()
            })
            .collect()
    }

    fn levels(&self, algorithm: FairShareAlgorithm) -> Levels {
        let account_usage = self.account_usages();
        let level_shares = self.level_shares();
        let mut levels = match algorithm {
            FairShareAlgorithm::FairTree => self.fair_tree_levels(&account_usage, &level_shares),
            FairShareAlgorithm::Classic { dampening } => {
                self.classic_levels(&account_usage, &level_shares, dampening)
            }
        };
        let root_usage = account_usage[AccountIx::ROOT.index()];
        // Slurm's "Norm Usage": share of the whole tree's usage, capped at 1.
        let norm = |raw: f64| {
            if root_usage > 0.0 {
                (raw / root_usage).min(1.0)
            } else {
                0.0
            }
        };
        for v in levels.account.iter_mut().chain(levels.user.iter_mut()) {
            v.norm_usage = norm(v.raw_usage);
        }
        if algorithm == FairShareAlgorithm::FairTree {
            self.fair_tree_rank(&mut levels);
        }
        levels
    }

    /// Per-node Fair Tree values: norm shares and effective usage among siblings, LF.
    fn fair_tree_levels(&self, account_usage: &[f64], level_shares: &[u64]) -> Levels {
        let ratio = |num: f64, den: f64| if den > 0.0 { num / den } else { 0.0 };
        let values = |shares: Shares, usage: f64, parent: AccountIx, parent_norm: f64| {
            let s = match shares {
                Shares::Raw(n) => ratio(f64::from(n), level_shares[parent.index()] as f64),
                Shares::Parent => parent_norm,
            };
            let u = ratio(usage, account_usage[parent.index()]);
            let level_fs = match shares {
                Shares::Parent => f64::INFINITY,
                // Zero shares rank last even with no usage; otherwise no usage gives ∞.
                Shares::Raw(_) if s == 0.0 => 0.0,
                Shares::Raw(_) => s / u,
            };
            NodeValues {
                raw_usage: usage,
                norm_usage: 0.0,
                norm_shares: s,
                effective_usage: u,
                level_fs,
                factor: 0.0,
            }
        };
        let mut account: Vec<NodeValues> = Vec::with_capacity(self.accounts.len());
        account.push(NodeValues {
            raw_usage: account_usage[0],
            norm_usage: 0.0,
            norm_shares: 1.0,
            effective_usage: if account_usage[0] > 0.0 { 1.0 } else { 0.0 },
            level_fs: f64::INFINITY,
            factor: 0.0,
        });
        for (i, a) in self.accounts.iter().enumerate().skip(1) {
            let parent = a.parent.unwrap_or(AccountIx::ROOT);
            account.push(values(Shares::Raw(a.shares), account_usage[i], parent, 0.0));
        }
        let user = self
            .assocs
            .iter()
            .map(|u| {
                values(
                    u.shares,
                    u.usage,
                    u.account,
                    account[u.account.index()].norm_shares,
                )
            })
            .collect();
        Levels { account, user }
    }

    /// The Fair Tree traversal: assigns `factor` to every user from the LFs already set.
    fn fair_tree_rank(&self, levels: &mut Levels) {
        struct Frame {
            /// This frame's siblings are `buf[start..end]`, sorted.
            start: usize,
            end: usize,
            next: usize,
            prev_lf: Option<f64>,
            /// The account(s) whose children these are tied with the previous sibling user,
            /// so the first child starts out tied.
            starts_tied: bool,
        }

        let user_count = self.assocs.len();
        if user_count == 0 {
            return;
        }
        let lf = |levels: &Levels, node: Node| match node {
            Node::Account(a) => levels.account[a.index()].level_fs,
            Node::User(u) => levels.user[u.index()].level_fs,
        };
        let sort = |levels: &Levels, siblings: &mut [Node]| {
            siblings.sort_unstable_by(|&a, &b| {
                let key = |n: Node| match n {
                    Node::User(u) => (0, u.0),
                    Node::Account(a) => (1, a.0),
                };
                lf(levels, b)
                    .total_cmp(&lf(levels, a))
                    .then_with(|| key(a).cmp(&key(b)))
            });
        };

        // Every node sits in `buf` at most once at a time: a frame's segment is removed
        // when the frame is done, and frames only ever hold children of distinct accounts.
        let mut buf: Vec<Node> = Vec::with_capacity(self.accounts.len() + user_count);
        let mut stack: Vec<Frame> = Vec::new();
        buf.extend_from_slice(&self.accounts[AccountIx::ROOT.index()].children);
        sort(levels, &mut buf);
        stack.push(Frame {
            start: 0,
            end: buf.len(),
            next: 0,
            prev_lf: None,
            starts_tied: false,
        });
        let mut rank = user_count;
        // The rank the next user gets when it is not tied ("rank, no ties").
        let mut rank_untied = user_count;

        while let Some(frame) = stack.last_mut() {
            if frame.next == frame.end {
                let start = frame.start;
                stack.pop();
                buf.truncate(start);
                continue;
            }
            let node = buf[frame.next];
            let node_lf = lf(levels, node);
            debug_assert!(!node_lf.is_nan(), "level fairshare is never NaN");
            let tied =
                (frame.next == frame.start && frame.starts_tied) || frame.prev_lf == Some(node_lf);
            frame.prev_lf = Some(node_lf);
            match node {
                Node::User(u) => {
                    if !tied {
                        rank = rank_untied;
                    }
                    levels.user[u.index()].factor = rank as f64 / user_count as f64;
                    rank_untied -= 1;
                    frame.next += 1;
                }
                Node::Account(_) => {
                    // Users sort before accounts on equal LF, so the tied run is accounts only.
                    let group_start = frame.next;
                    let mut group_end = group_start + 1;
                    while group_end < frame.end
                        && matches!(buf[group_end], Node::Account(_))
                        && lf(levels, buf[group_end]) == node_lf
                    {
                        group_end += 1;
                    }
                    frame.next = group_end;
                    let start = buf.len();
                    for i in group_start..group_end {
                        if let Node::Account(a) = buf[i] {
                            buf.extend_from_slice(&self.accounts[a.index()].children);
                        }
                    }
                    let end = buf.len();
                    sort(levels, &mut buf[start..end]);
                    stack.push(Frame {
                        start,
                        end,
                        next: start,
                        prev_lf: None,
                        starts_tied: tied,
                    });
                }
            }
        }
        debug_assert_eq!(rank_untied, 0, "every user association is ranked once");
    }

    /// Classic: normalised shares as a product down the tree, effective usage, factor.
    fn classic_levels(
        &self,
        account_usage: &[f64],
        level_shares: &[u64],
        dampening: NonZeroU32,
    ) -> Levels {
        let root_usage = account_usage[AccountIx::ROOT.index()];
        let norm_usage = |raw: f64| {
            if root_usage > 0.0 {
                (raw / root_usage).min(1.0)
            } else {
                0.0
            }
        };
        let d = f64::from(dampening.get());
        let factor = |ue: f64, s: f64| {
            if s > 0.0 { (-(ue / s) / d).exp2() } else { 0.0 }
        };
        // (norm shares, effective usage) of a child with `shares` raw shares and normalised
        // usage `u` under `parent`, given the parent's values.
        let child = |shares: u32, u: f64, parent: AccountIx, parent_values: &NodeValues| {
            let siblings = level_shares[parent.index()];
            let fraction = if siblings > 0 {
                f64::from(shares) / siblings as f64
            } else {
                0.0
            };
            let s = parent_values.norm_shares * fraction;
            let ue = if parent == AccountIx::ROOT {
                u
            } else if siblings == 0 {
                parent_values.effective_usage
            } else {
                u + (parent_values.effective_usage - u) * fraction
            };
            (s, ue)
        };

        let mut account: Vec<NodeValues> = Vec::with_capacity(self.accounts.len());
        let root_norm = norm_usage(root_usage);
        account.push(NodeValues {
            raw_usage: root_usage,
            norm_usage: root_norm,
            norm_shares: 1.0,
            effective_usage: root_norm,
            level_fs: f64::NAN,
            factor: factor(root_norm, 1.0),
        });
        // Forward pass: parents come before children.
        for (i, a) in self.accounts.iter().enumerate().skip(1) {
            let parent = a.parent.unwrap_or(AccountIx::ROOT);
            let raw = account_usage[i];
            let (s, ue) = child(a.shares, norm_usage(raw), parent, &account[parent.index()]);
            account.push(NodeValues {
                raw_usage: raw,
                norm_usage: 0.0,
                norm_shares: s,
                effective_usage: ue,
                level_fs: f64::NAN,
                factor: factor(ue, s),
            });
        }
        let user = self
            .assocs
            .iter()
            .map(|u| {
                let parent_values = &account[u.account.index()];
                let (s, ue) = match u.shares {
                    Shares::Parent => (parent_values.norm_shares, parent_values.effective_usage),
                    Shares::Raw(n) => child(n, norm_usage(u.usage), u.account, parent_values),
                };
                NodeValues {
                    raw_usage: u.usage,
                    norm_usage: 0.0,
                    norm_shares: s,
                    effective_usage: ue,
                    level_fs: f64::NAN,
                    factor: factor(ue, s),
                }
            })
            .collect();
        Levels { account, user }
    }

    /// Checks the structural invariants; used by tests after every mutation.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        if self.accounts.is_empty() || self.accounts[0].name != ROOT_ACCOUNT {
            return Err("account 0 must be root".into());
        }
        if self.account_by_name.len() != self.accounts.len() {
            return Err("account name index out of step with accounts".into());
        }
        let mut seen_users = vec![false; self.assocs.len()];
        let mut seen_accounts = vec![false; self.accounts.len()];
        for (i, a) in self.accounts.iter().enumerate() {
            if self.account_by_name.get(&a.name) != Some(&AccountIx(i as u32)) {
                return Err(format!("account `{}` missing from name index", a.name));
            }
            match a.parent {
                None if i != 0 => return Err(format!("account `{}` has no parent", a.name)),
                Some(p) if p.index() >= i => {
                    return Err(format!("account `{}` is not after its parent", a.name));
                }
                Some(p) if self.accounts[p.index()].depth + 1 != a.depth => {
                    return Err(format!("account `{}` has a wrong depth", a.name));
                }
                _ => {}
            }
            let mut user_children = 0;
            for child in &a.children {
                match *child {
                    Node::Account(c) => {
                        if self.accounts[c.index()].parent != Some(AccountIx(i as u32))
                            || std::mem::replace(&mut seen_accounts[c.index()], true)
                        {
                            return Err(format!("account `{}` has a stray child", a.name));
                        }
                    }
                    Node::User(u) => {
                        user_children += 1;
                        let assoc = &self.assocs[u.index()];
                        if assoc.account.index() != i
                            || a.users.get(&assoc.user) != Some(&u)
                            || std::mem::replace(&mut seen_users[u.index()], true)
                        {
                            return Err(format!("account `{}` has a stray user", a.name));
                        }
                    }
                }
            }
            if user_children != a.users.len() {
                return Err(format!("account `{}` user index out of step", a.name));
            }
        }
        if seen_accounts.iter().skip(1).any(|s| !s) || seen_users.iter().any(|s| !s) {
            return Err("a node is not reachable from root".into());
        }
        if let Some(u) = self
            .assocs
            .iter()
            .find(|u| !(0.0..=MAX_USAGE).contains(&u.usage))
        {
            return Err(format!("user `{}` has invalid usage {}", u.user, u.usage));
        }
        Ok(())
    }
}

/// Values derived for one node during a computation.
#[derive(Debug, Clone, Copy)]
struct NodeValues {
    raw_usage: f64,
    norm_usage: f64,
    norm_shares: f64,
    effective_usage: f64,
    level_fs: f64,
    factor: f64,
}

struct Levels {
    account: Vec<NodeValues>,
    user: Vec<NodeValues>,
}

/// The fair-share factor of every user association, each in `[0, 1]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FairShareFactors {
    by_assoc: Vec<f64>,
}

impl FairShareFactors {
    /// The factor of `assoc`, or `None` for an index this computation does not cover.
    pub fn get(&self, assoc: AssocIx) -> Option<f64> {
        self.by_assoc.get(assoc.index()).copied()
    }

    /// All factors, indexed by [`AssocIx::index`].
    pub fn as_slice(&self) -> &[f64] {
        &self.by_assoc
    }
}

impl Index<AssocIx> for FairShareFactors {
    type Output = f64;

    fn index(&self, assoc: AssocIx) -> &f64 {
        &self.by_assoc[assoc.index()]
    }
}

/// One line of `sshare -l`: an account (`user` is `None`) or a user association.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareRow {
    pub account: String,
    pub user: Option<String>,
    /// 0 for root; users sit one deeper than their account.
    pub depth: u32,
    pub raw_shares: Shares,
    /// Fair Tree: shares among siblings. Classic: share of the whole machine.
    pub norm_shares: f64,
    pub raw_usage: f64,
    /// Share of the whole tree's usage (shown by Slurm, used only by classic).
    pub norm_usage: f64,
    /// Fair Tree: usage among siblings. Classic: `U_E`.
    pub effective_usage: f64,
    /// Fair Tree only, not for root ("Level FS"); infinite without usage.
    pub level_fs: Option<f64>,
    /// Users always; accounts under classic only (root never).
    pub fairshare: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CLASSIC: FairShareAlgorithm = FairShareAlgorithm::CLASSIC;
    const FAIR_TREE: FairShareAlgorithm = FairShareAlgorithm::FairTree;

    fn assert_close(actual: f64, expected: f64, tolerance: f64, what: &str) {
        assert!(
            (actual - expected).abs() <= tolerance,
            "{what}: expected {expected}, got {actual}"
        );
    }

    fn user(tree: &mut FairShareTree, name: &str, account: &str, shares: u32) -> AssocIx {
        let ix = tree.add_user(name, account, Shares::Raw(shares)).unwrap();
        tree.check_invariants().unwrap();
        ix
    }

    fn account(tree: &mut FairShareTree, name: &str, parent: &str, shares: u32) -> AccountIx {
        let ix = tree.add_account(name, parent, shares).unwrap();
        tree.check_invariants().unwrap();
        ix
    }

    fn charge(tree: &mut FairShareTree, assoc: AssocIx, units: f64) {
        tree.charge(assoc, units).unwrap();
        tree.check_invariants().unwrap();
    }

    fn row<'a>(rows: &'a [ShareRow], account: &str, user: Option<&str>) -> &'a ShareRow {
        rows.iter()
            .find(|r| r.account == account && r.user.as_deref() == user)
            .unwrap_or_else(|| panic!("no row for {account}/{user:?}"))
    }

    /// The worked example of Slurm's classic fair-share page: A (40) and D (60) under root,
    /// B (30) and C (10) under A, E (25) and F (35) under D; user1 in B, user2 and user3
    /// (1 share each) in C, user4 in E, user5 in F. Users 1, 2 and 4 used 0.2, 0.25 and 0.25
    /// of the machine. Slurm normalises by the root's total usage, so the example only adds
    /// up if 30% of the usage is elsewhere: `other`, with zero shares under root, holds it.
    struct DocExample {
        tree: FairShareTree,
        users: [AssocIx; 5],
        other: AssocIx,
    }

    fn doc_example() -> DocExample {
        let mut tree = FairShareTree::new();
        account(&mut tree, "a", "root", 40);
        account(&mut tree, "d", "root", 60);
        account(&mut tree, "b", "a", 30);
        account(&mut tree, "c", "a", 10);
        account(&mut tree, "e", "d", 25);
        account(&mut tree, "f", "d", 35);
        let users = [
            user(&mut tree, "user1", "b", 1),
            user(&mut tree, "user2", "c", 1),
            user(&mut tree, "user3", "c", 1),
            user(&mut tree, "user4", "e", 1),
            user(&mut tree, "user5", "f", 1),
        ];
        let other = user(&mut tree, "other", "root", 0);
        charge(&mut tree, users[0], 200.0);
        charge(&mut tree, users[1], 250.0);
        charge(&mut tree, users[3], 250.0);
        charge(&mut tree, other, 300.0);
        DocExample { tree, users, other }
    }

    #[test]
    fn classic_reproduces_the_slurm_doc_example() {
        let ex = doc_example();
        let rows = ex.tree.rows(CLASSIC);
        for (acct, ue) in [
            ("a", 0.45),
            ("d", 0.25),
            ("b", 0.3875),
            ("c", 0.3),
            ("e", 0.25),
            ("f", 0.25 * 35.0 / 60.0),
        ] {
            assert_close(row(&rows, acct, None).effective_usage, ue, 1e-12, acct);
        }
        let norm_shares = [0.3, 0.05, 0.05, 0.25, 0.35];
        let effective = [0.3875, 0.275, 0.15, 0.25, 0.25 * 35.0 / 60.0];
        let expected = [0.408479, 0.022097, 0.125, 0.5, 0.749154];
        let factors = ex.tree.factors(CLASSIC);
        for (i, assoc) in ex.users.iter().enumerate() {
            let name = ex.tree.assoc_user(*assoc);
            let r = rows
                .iter()
                .find(|r| r.user.as_deref() == Some(name))
                .unwrap();
            assert_close(r.norm_shares, norm_shares[i], 1e-12, name);
            assert_close(r.effective_usage, effective[i], 1e-12, name);
            assert_close(factors[*assoc], expected[i], 5e-7, name);
            assert_eq!(r.fairshare, Some(factors[*assoc]));
        }
        // Zero shares give a zero factor, whatever the usage.
        assert_eq!(factors[ex.other], 0.0);
    }

    #[test]
    fn fair_tree_ranks_the_doc_example_tree() {
        // Root level: LF(d) = 0.6/0.25 = 2.4 > LF(a) = 0.4/0.45 > LF(other) = 0 (no shares).
        // Under d: f has no usage (∞), then e. Under a: LF(b) = 0.75/(2/4.5) = 1.6875 beats
        // LF(c) = 0.25/(2.5/4.5) = 0.45. Under c: user3 has no usage (∞), then user2.
        let ex = doc_example();
        let f = ex.tree.factors(FAIR_TREE);
        let [u1, u2, u3, u4, u5] = ex.users;
        let order = [u5, u4, u1, u3, u2, ex.other];
        for (i, assoc) in order.iter().enumerate() {
            let expected = (6 - i) as f64 / 6.0;
            assert_eq!(f[*assoc], expected, "{}", ex.tree.assoc_user(*assoc));
        }
        let rows = ex.tree.rows(FAIR_TREE);
        assert_close(row(&rows, "b", None).level_fs.unwrap(), 1.6875, 1e-12, "b");
        assert_close(row(&rows, "c", None).level_fs.unwrap(), 0.45, 1e-12, "c");
        assert_eq!(row(&rows, "f", None).level_fs, Some(f64::INFINITY));
        assert_eq!(row(&rows, "root", Some("other")).level_fs, Some(0.0));
        assert_eq!(row(&rows, "root", None).level_fs, None);
        assert_eq!(row(&rows, "a", None).fairshare, None);
        assert_close(
            row(&rows, "c", Some("user2")).effective_usage,
            1.0,
            0.0,
            "u2",
        );
        assert_close(row(&rows, "c", None).norm_shares, 0.25, 0.0, "c shares");
    }

    #[test]
    fn rows_follow_sshare_order_with_users_before_sub_accounts() {
        let ex = doc_example();
        let names: Vec<String> = ex
            .tree
            .rows(FAIR_TREE)
            .iter()
            .map(|r| {
                format!(
                    "{}{}",
                    " ".repeat(r.depth as usize),
                    r.user.as_ref().unwrap_or(&r.account)
                )
            })
            .collect();
        insta::assert_snapshot!(names.join("\n"), @r"
        root
         other
         a
          b
           user1
          c
           user2
           user3
         d
          e
           user4
          f
           user5
        ");
    }

    #[test]
    fn sibling_users_with_equal_level_fs_share_a_rank() {
        let mut tree = FairShareTree::new();
        account(&mut tree, "acct", "root", 1);
        let a = user(&mut tree, "a", "acct", 1);
        let b = user(&mut tree, "b", "acct", 1);
        let c = user(&mut tree, "c", "acct", 1);
        let d = user(&mut tree, "d", "acct", 1);
        charge(&mut tree, a, 10.0);
        charge(&mut tree, b, 10.0);
        charge(&mut tree, c, 10.0);
        charge(&mut tree, d, 50.0);
        let f = tree.factors(FAIR_TREE);
        // a, b, c tied at rank 4; d gets rank 1, as if there had been no tie.
        assert_eq!([f[a], f[b], f[c], f[d]], [1.0, 1.0, 1.0, 0.25]);
    }

    #[test]
    fn a_user_tied_with_a_sibling_account_shares_its_top_users_rank() {
        let mut tree = FairShareTree::new();
        account(&mut tree, "top", "root", 1);
        let solo = user(&mut tree, "solo", "top", 1);
        account(&mut tree, "sub", "top", 1);
        let x = user(&mut tree, "x", "sub", 1);
        let y = user(&mut tree, "y", "sub", 1);
        let other = user(&mut tree, "other", "top", 2);
        charge(&mut tree, solo, 10.0);
        charge(&mut tree, x, 10.0);
        charge(&mut tree, other, 80.0);
        // LF(solo) = LF(sub) = 0.25/0.1 = 2.5, LF(other) = 0.5/0.8. Under sub, y (no usage)
        // is the top user and shares solo's rank; x is next, then other.
        let f = tree.factors(FAIR_TREE);
        assert_eq!([f[solo], f[y], f[x], f[other]], [1.0, 1.0, 0.5, 0.25]);
    }

    #[test]
    fn tied_sibling_accounts_have_their_children_merged() {
        let mut tree = FairShareTree::new();
        account(&mut tree, "p", "root", 1);
        account(&mut tree, "q", "root", 1);
        let p1 = user(&mut tree, "p1", "p", 1);
        let p2 = user(&mut tree, "p2", "p", 1);
        let q1 = user(&mut tree, "q1", "q", 3);
        let q2 = user(&mut tree, "q2", "q", 1);
        charge(&mut tree, p1, 100.0);
        charge(&mut tree, q1, 50.0);
        charge(&mut tree, q2, 50.0);
        // LF(p) = LF(q) = 1. Children: p2 ∞, q1 0.75/0.5 = 1.5, p1 0.5/1 = 0.5 and
        // q2 0.25/0.5 = 0.5 (tied). Merged and sorted: p2, q1, then p1 = q2.
        let f = tree.factors(FAIR_TREE);
        assert_eq!([f[p2], f[q1], f[p1], f[q2]], [1.0, 0.75, 0.5, 0.5]);
    }

    /// Regression, found by the guarantee property test when merging was switched off the
    /// way Slurm's `fair_tree.c` effectively does: an account tied with an *empty* sibling
    /// account started out "tied" and its top user took the rank of the last user ranked
    /// before, here a user of a sibling with a strictly higher Level FS.
    #[test]
    fn account_tied_with_an_empty_sibling_does_not_inherit_a_higher_rank() {
        let mut tree = FairShareTree::new();
        account(&mut tree, "funded", "root", 1);
        account(&mut tree, "empty", "root", 0);
        account(&mut tree, "unfunded", "root", 0);
        let a = user(&mut tree, "a", "funded", 1);
        let q = user(&mut tree, "q", "unfunded", 1);
        // LF(funded) = ∞ > LF(empty) = LF(unfunded) = 0 (zero shares).
        let f = tree.factors(FAIR_TREE);
        assert_eq!([f[a], f[q]], [1.0, 0.5]);
    }

    #[test]
    fn with_no_usage_at_all_every_user_ties_at_the_top() {
        let mut tree = FairShareTree::new();
        account(&mut tree, "a", "root", 5);
        account(&mut tree, "b", "a", 1);
        let users = [
            user(&mut tree, "u", "a", 1),
            user(&mut tree, "v", "b", 3),
            user(&mut tree, "w", "root", 2),
        ];
        let fair_tree = tree.factors(FAIR_TREE);
        let classic = tree.factors(CLASSIC);
        for u in users {
            assert_eq!(fair_tree[u], 1.0);
            assert_eq!(classic[u], 1.0);
        }
        let rows = tree.rows(FAIR_TREE);
        assert!(
            rows.iter()
                .all(|r| r.raw_usage == 0.0 && r.norm_usage == 0.0)
        );
        assert_eq!(row(&rows, "b", None).level_fs, Some(f64::INFINITY));
    }

    #[test]
    fn zero_usage_users_outrank_users_with_usage_and_zero_shares_rank_last() {
        let mut tree = FairShareTree::new();
        let busy = user(&mut tree, "busy", "root", 1);
        let idle = user(&mut tree, "idle", "root", 1);
        let no_shares = user(&mut tree, "none", "root", 0);
        charge(&mut tree, busy, 5.0);
        let f = tree.factors(FAIR_TREE);
        assert_eq!(
            [f[idle], f[busy], f[no_shares]],
            [1.0, 2.0 / 3.0, 1.0 / 3.0]
        );
    }

    #[test]
    fn parent_shares_user_ranks_first_in_its_account_and_takes_the_account_values() {
        let mut tree = FairShareTree::new();
        account(&mut tree, "lab", "root", 1);
        account(&mut tree, "big", "root", 1);
        let pi = tree.add_user("pi", "lab", Shares::Parent).unwrap();
        let student = user(&mut tree, "student", "lab", 1);
        let heavy = user(&mut tree, "heavy", "big", 1);
        charge(&mut tree, pi, 60.0);
        charge(&mut tree, student, 10.0);
        charge(&mut tree, heavy, 30.0);
        let f = tree.factors(FAIR_TREE);
        // LF(big) = 0.5/0.3 > LF(lab) = 0.5/0.7; pi is ∞ inside lab despite its usage.
        assert_eq!([f[heavy], f[pi], f[student]], [1.0, 2.0 / 3.0, 1.0 / 3.0]);
        // Classic: pi's shares do not dilute student's; pi gets lab's factor.
        let classic = tree.rows(CLASSIC);
        let lab = row(&classic, "lab", None);
        let pi_row = row(&classic, "lab", Some("pi"));
        assert_eq!(pi_row.norm_shares, lab.norm_shares);
        assert_eq!(pi_row.effective_usage, lab.effective_usage);
        assert_eq!(pi_row.fairshare, lab.fairshare);
        assert_eq!(row(&classic, "lab", Some("student")).norm_shares, 0.5);
        assert_eq!(pi_row.raw_shares.to_string(), "parent");
    }

    #[test]
    fn dampening_softens_the_classic_factor() {
        let ex = doc_example();
        let damped = FairShareAlgorithm::Classic {
            dampening: NonZeroU32::new(2).unwrap(),
        };
        // user4: U_E/S = 1, so 2^-1 undamped and 2^-0.5 with d = 2.
        assert_close(ex.tree.factors(CLASSIC)[ex.users[3]], 0.5, 1e-12, "d=1");
        assert_close(
            ex.tree.factors(damped)[ex.users[3]],
            0.5f64.sqrt(),
            1e-12,
            "d=2",
        );
    }

    #[test]
    fn usage_halves_after_one_half_life() {
        let mut tree = FairShareTree::new();
        let u = user(&mut tree, "u", "root", 1);
        charge(&mut tree, u, 1000.0);
        let week = 7.0 * 86_400.0;
        tree.decay(week, week).unwrap();
        assert_eq!(tree.assoc_usage(u), 500.0);
        tree.decay(2.0 * week, week).unwrap();
        assert_eq!(tree.assoc_usage(u), 125.0);
        tree.decay(week / 2.0, week).unwrap();
        assert_close(
            tree.assoc_usage(u),
            125.0 / 2f64.sqrt(),
            1e-9,
            "half of a half-life",
        );
        let before = tree.assoc_usage(u);
        tree.decay(week, 0.0).unwrap();
        assert_eq!(tree.assoc_usage(u), before, "half-life 0 means no decay");
        assert_eq!(tree.account_usage(AccountIx::ROOT), before);
        tree.check_invariants().unwrap();
    }

    #[test]
    fn account_usage_is_the_sum_of_its_subtree() {
        let ex = doc_example();
        let usage = |name: &str| ex.tree.account_usage(ex.tree.account(name).unwrap());
        assert_eq!(usage("c"), 250.0);
        assert_eq!(usage("a"), 450.0);
        assert_eq!(usage("root"), 1000.0);
        assert_eq!(usage("f"), 0.0);
    }

    #[test]
    fn ensure_assoc_creates_missing_account_and_user_with_one_share() {
        let mut tree = FairShareTree::new();
        account(&mut tree, "lab", "root", 7);
        let a = tree.ensure_assoc("alice", "lab").unwrap();
        let b = tree.ensure_assoc("bob", "newproj").unwrap();
        tree.check_invariants().unwrap();
        assert_eq!(tree.ensure_assoc("alice", "lab").unwrap(), a);
        assert_eq!(tree.assoc("bob", "newproj"), Some(b));
        let newproj = tree.account("newproj").unwrap();
        assert_eq!(tree.account_parent(newproj), Some(AccountIx::ROOT));
        assert_eq!(tree.assoc_shares(b), Shares::Raw(1));
        let rows = tree.rows(FAIR_TREE);
        assert_eq!(row(&rows, "newproj", None).raw_shares, Shares::Raw(1));
        assert_eq!(row(&rows, "lab", None).raw_shares, Shares::Raw(7));
        assert!(tree.ensure_assoc("bad name", "x").is_err());
        assert_eq!(tree.account("x"), None, "nothing is created on error");
    }

    #[test]
    fn builder_and_charge_errors_say_what_failed() {
        let mut tree = FairShareTree::new();
        account(&mut tree, "lab", "root", 1);
        let u = user(&mut tree, "alice", "lab", 1);
        let errors = [
            tree.add_account("lab", "root", 1).unwrap_err(),
            tree.add_account("root", "lab", 1).unwrap_err(),
            tree.add_account("sub", "nope", 1).unwrap_err(),
            tree.add_account("", "root", 1).unwrap_err(),
            tree.add_user("alice", "lab", Shares::Raw(1)).unwrap_err(),
            tree.add_user("bob", "nope", Shares::Raw(1)).unwrap_err(),
            tree.add_user("b ob", "lab", Shares::Raw(1)).unwrap_err(),
            tree.charge(u, -1.0).unwrap_err(),
            tree.charge(u, f64::NAN).unwrap_err(),
            tree.charge(u, f64::INFINITY).unwrap_err(),
            tree.charge(AssocIx(99), 1.0).unwrap_err(),
            tree.decay(-1.0, 10.0).unwrap_err(),
            tree.decay(1.0, f64::NAN).unwrap_err(),
        ];
        tree.check_invariants().unwrap();
        assert_eq!(tree.assoc_usage(u), 0.0, "failed charges change nothing");
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        insta::assert_snapshot!(text.join("\n"), @r"
        failed to add account `lab`: an account with that name already exists
        failed to add account `root`: an account with that name already exists
        failed to add account `sub`: parent account `nope` does not exist
        invalid account name ``: names must be non-empty and contain no whitespace
        failed to add user `alice` to account `lab`: the association already exists
        failed to add user `bob` to account `nope`: the account does not exist
        invalid user name `b ob`: names must be non-empty and contain no whitespace
        failed to charge -1 billing units to user `alice` in account `lab`: usage must be finite, non-negative and stay below 1e200
        failed to charge NaN billing units to user `alice` in account `lab`: usage must be finite, non-negative and stay below 1e200
        failed to charge inf billing units to user `alice` in account `lab`: usage must be finite, non-negative and stay below 1e200
        failed to charge association #99: this tree has no such association
        failed to decay usage over -1 s with half-life 10 s: both must be finite and non-negative
        failed to decay usage over 1 s with half-life NaN s: both must be finite and non-negative
        ");
    }

    #[test]
    fn a_large_flat_and_a_deep_tree_are_ranked_completely() {
        // Hundreds of accounts, thousands of users, all ranked.
        let mut tree = FairShareTree::new();
        for a in 0..300u32 {
            tree.add_account(&format!("a{a}"), "root", 1 + a % 7)
                .unwrap();
            for u in 0..10u32 {
                let ix = tree
                    .add_user(&format!("u{u}"), &format!("a{a}"), Shares::Raw(1 + u % 3))
                    .unwrap();
                tree.charge(ix, f64::from(a * 10 + u + 1)).unwrap();
            }
        }
        tree.check_invariants().unwrap();
        let f = tree.factors(FAIR_TREE);
        assert_eq!(f.as_slice().len(), 3000);
        assert_competition_ranking(&f);

        // A chain 5,000 accounts deep: no recursion, so no stack overflow.
        let mut deep = FairShareTree::new();
        let mut parent = ROOT_ACCOUNT.to_owned();
        for d in 0..5000 {
            let name = format!("d{d}");
            deep.add_account(&name, &parent, 1).unwrap();
            let ix = deep.add_user("u", &name, Shares::Raw(1)).unwrap();
            deep.charge(ix, f64::from(d)).unwrap();
            parent = name;
        }
        let f = deep.factors(FAIR_TREE);
        assert!(f.as_slice().iter().all(|x| *x > 0.0 && *x <= 1.0));
        assert_eq!(deep.rows(CLASSIC).len(), 10_001);
    }

    /// Fair Tree factors times the user count are a standard competition ranking counted
    /// down from N: sorted descending, each value is either its position's own rank or a
    /// tie with the value before it.
    fn assert_competition_ranking(factors: &FairShareFactors) {
        let n = factors.as_slice().len();
        let mut ranks: Vec<f64> = factors.as_slice().iter().map(|f| f * n as f64).collect();
        ranks.sort_unstable_by(|a, b| b.total_cmp(a));
        for (i, r) in ranks.iter().enumerate() {
            let own = (n - i) as f64;
            let tied = i > 0 && *r == ranks[i - 1];
            assert!(
                (r - own).abs() < 1e-9 || tied,
                "rank {r} at position {i} of {n} is neither {own} nor a tie"
            );
        }
    }

    // ---- property tests ----

    /// A random tree: accounts attached to earlier accounts, users to any account, with
    /// coarse usages so that ties are common.
    #[derive(Debug, Clone)]
    struct Spec {
        accounts: Vec<(usize, u32)>,
        users: Vec<(usize, Option<u32>, u32)>,
    }

    fn tree_spec() -> impl Strategy<Value = Spec> {
        let accounts = prop::collection::vec((any::<usize>(), 0u32..4), 0..10);
        let users = prop::collection::vec(
            (
                any::<usize>(),
                prop_oneof![1 => Just(None), 6 => (0u32..4).prop_map(Some)],
                prop_oneof![2 => Just(0u32), 5 => 1u32..5],
            ),
            0..25,
        );
        (accounts, users).prop_map(|(accounts, users)| Spec { accounts, users })
    }

    fn build(spec: &Spec) -> FairShareTree {
        let mut tree = FairShareTree::new();
        let mut names = vec![ROOT_ACCOUNT.to_owned()];
        for (i, (parent, shares)) in spec.accounts.iter().enumerate() {
            let name = format!("acct{i}");
            let parent = names[parent % names.len()].clone();
            tree.add_account(&name, &parent, *shares).unwrap();
            tree.check_invariants().unwrap();
            names.push(name);
        }
        for (i, (acct, shares, usage)) in spec.users.iter().enumerate() {
            let shares = shares.map_or(Shares::Parent, Shares::Raw);
            let ix = tree
                .add_user(&format!("user{i}"), &names[acct % names.len()], shares)
                .unwrap();
            tree.charge(ix, f64::from(*usage) * 100.0).unwrap();
            tree.check_invariants().unwrap();
        }
        tree
    }

    /// The user associations below (or equal to) a node.
    fn users_under(tree: &FairShareTree, node: Node) -> Vec<AssocIx> {
        let mut out = Vec::new();
        let mut stack = vec![node];
        while let Some(n) = stack.pop() {
            match n {
                Node::User(u) => out.push(u),
                Node::Account(a) => stack.extend(&tree.accounts[a.index()].children),
            }
        }
        out
    }

    proptest! {
        #[test]
        fn factors_are_within_bounds(spec in tree_spec(), decay_steps in 0u32..3) {
            let mut tree = build(&spec);
            for _ in 0..decay_steps {
                tree.decay(3600.0, 7200.0).unwrap();
                tree.check_invariants().unwrap();
            }
            let fair_tree = tree.factors(FAIR_TREE);
            let classic = tree.factors(CLASSIC);
            prop_assert_eq!(fair_tree.as_slice().len(), tree.user_count());
            prop_assert!(fair_tree.as_slice().iter().all(|f| *f > 0.0 && *f <= 1.0));
            prop_assert!(classic.as_slice().iter().all(|f| (0.0..=1.0).contains(f)));
            if tree.user_count() > 0 {
                let top = fair_tree.as_slice().iter().copied().fold(0.0, f64::max);
                prop_assert_eq!(top, 1.0);
            }
            assert_competition_ranking(&fair_tree);
        }

        #[test]
        fn same_calls_give_bit_identical_results(spec in tree_spec()) {
            let (mut a, mut b) = (build(&spec), build(&spec));
            a.decay(1000.0, 3000.0).unwrap();
            b.decay(1000.0, 3000.0).unwrap();
            for algorithm in [FAIR_TREE, CLASSIC] {
                let bits = |t: &FairShareTree| -> Vec<u64> {
                    t.factors(algorithm).as_slice().iter().map(|f| f.to_bits()).collect()
                };
                prop_assert_eq!(bits(&a), bits(&b));
                let (ra, rb) = (a.rows(algorithm), b.rows(algorithm));
                prop_assert_eq!(format!("{ra:?}"), format!("{rb:?}"));
            }
        }

        /// Slurm's Fair Tree guarantee: between siblings, a higher Level FS puts every user
        /// below it above every user below the other.
        #[test]
        fn higher_level_fs_sibling_ranks_all_its_users_above(spec in tree_spec()) {
            let tree = build(&spec);
            let factors = tree.factors(FAIR_TREE);
            let levels = tree.levels(FAIR_TREE);
            let lf = |n: Node| match n {
                Node::Account(a) => levels.account[a.index()].level_fs,
                Node::User(u) => levels.user[u.index()].level_fs,
            };
            for account in &tree.accounts {
                for &x in &account.children {
                    for &y in &account.children {
                        if lf(x) <= lf(y) {
                            continue;
                        }
                        let low_x = users_under(&tree, x).iter().map(|u| factors[*u]).fold(f64::INFINITY, f64::min);
                        let high_y = users_under(&tree, y).iter().map(|u| factors[*u]).fold(f64::NEG_INFINITY, f64::max);
                        prop_assert!(
                            low_x > high_y,
                            "{:?} (LF {}) has a user at {} not above {:?} (LF {}) at {}",
                            x, lf(x), low_x, y, lf(y), high_y
                        );
                    }
                }
            }
        }

        #[test]
        fn decay_scales_usage_and_never_raises_it(spec in tree_spec(), elapsed in 0.0f64..1e7, half_life in 0.0f64..1e7) {
            let mut tree = build(&spec);
            let before: Vec<f64> = (0..tree.user_count()).map(|i| tree.assoc_usage(AssocIx(i as u32))).collect();
            tree.decay(elapsed, half_life).unwrap();
            tree.check_invariants().unwrap();
            for (i, b) in before.iter().enumerate() {
                let after = tree.assoc_usage(AssocIx(i as u32));
                prop_assert!(after <= *b && after >= 0.0);
            }
        }
    }
}
