//! `sshare`: the fair-share tree, from `GET /shares`, with Slurm's options and formats.
//!
//! One row per association: accounts, indented one space per level below `root`, and users
//! under their account (indented one more). As with Fair Tree (Slurm's default), the
//! FairShare column is blank for accounts; `-l` adds NormUsage (the row's raw usage over
//! the whole cluster's) and LevelFS (normalised shares over effective usage among
//! siblings, `inf` without usage). Without `-a` or `-u`, users other than the caller are
//! left out, as Slurm does. cadre has no GrpTRESMins or running TRES-minutes per
//! association yet: those columns are empty.

use super::format::{self, TableColumn, TableStyle};
use super::query::{self, Opt};
use cadre_proto::api::{ShareList, ShareView};
use cadre_slurm::getopt::ArgKind;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::process::ExitCode;

const CMD: &str = "sshare";

const OPTIONS: &[Opt] = &[
    Opt::new('A', "accounts", ArgKind::Required),
    Opt::new('a', "all", ArgKind::None),
    Opt::new('M', "clusters", ArgKind::Required),
    Opt::new('o', "format", ArgKind::Required),
    Opt::long("help", ArgKind::None),
    Opt::new('e', "helpformat", ArgKind::None),
    Opt::long("json", ArgKind::None),
    Opt::new('l', "long", ArgKind::None),
    Opt::new('n', "noheader", ArgKind::None),
    Opt::new('p', "parsable", ArgKind::None),
    Opt::new('P', "parsable2", ArgKind::None),
    Opt::new('m', "partition", ArgKind::None),
    Opt::long("usage", ArgKind::None),
    Opt::new('u', "users", ArgKind::Required),
    Opt::new('U', "Users", ArgKind::None),
    Opt::new('v', "verbose", ArgKind::None),
    Opt::new('V', "version", ArgKind::None),
];

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    Account,
    Cluster,
    EffectvUsage,
    FairShare,
    LevelFs,
    Id,
    NormShares,
    NormUsage,
    Partition,
    RawShares,
    RawUsage,
    User,
    GrpTresMins,
    TresRunMins,
}

/// Every field, its name and width (negative: left-justified). A requested name matches
/// the first field it is a prefix of, in this order, as in Slurm (`A`, `Eff`).
const FIELDS: &[(Field, &str, i32)] = &[
    (Field::Account, "Account", -20),
    (Field::Cluster, "Cluster", 10),
    (Field::EffectvUsage, "EffectvUsage", 13),
    (Field::FairShare, "FairShare", 10),
    (Field::LevelFs, "LevelFS", 10),
    (Field::Id, "ID", 6),
    (Field::NormShares, "NormShares", 11),
    (Field::NormUsage, "NormUsage", 11),
    (Field::Partition, "Partition", 12),
    (Field::RawShares, "RawShares", 10),
    (Field::RawUsage, "RawUsage", 11),
    (Field::User, "User", 10),
    (Field::GrpTresMins, "GrpTRESMins", 30),
    (Field::TresRunMins, "TRESRunMins", 30),
];

const DEFAULT_FIELDS: &str = "A,User,RawShares,NormShares,RawUsage,Eff,Fairshare";
const LONG_FIELDS: &str =
    "A,User,RawShares,NormShares,RawUsage,NormUsage,Eff,Fairshare,LevelFS,GrpTRESMins,TRESRunMins";

/// Parses `-o`: names or prefixes of names, any case, with an optional `%width`.
pub(crate) fn parse_fields(text: &str) -> Result<Vec<(Field, TableColumn)>, String> {
    let mut out = Vec::new();
    for item in text.split(',').filter(|s| !s.is_empty()) {
        let (name, width) = match item.split_once('%') {
            Some((n, w)) => (n, w.parse::<i32>().ok()),
            None => (item, None),
        };
        let lower = name.to_ascii_lowercase();
        let Some(&(field, canon, default)) = FIELDS
            .iter()
            .find(|(_, n, _)| n.to_ascii_lowercase().starts_with(&lower))
        else {
            return Err(name.to_owned());
        };
        let w = width.filter(|&w| w != 0).unwrap_or(default);
        out.push((
            field,
            TableColumn {
                name: canon,
                width: w.unsigned_abs() as usize,
                right: w > 0,
            },
        ));
    }
    Ok(out)
}

/// A row of the tree with what the columns need beyond the API's view.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    pub share: ShareView,
    pub depth: usize,
    pub norm_usage: f64,
    pub level_fs: Option<f64>,
}

/// The rows in tree order (each account, then its users, then its sub-accounts), with
/// depths and the derived columns.
pub(crate) fn rows(list: &[ShareView]) -> Vec<Row> {
    let parents: BTreeMap<&str, Option<&str>> = list
        .iter()
        .filter(|s| s.user.is_empty())
        .map(|s| (s.account.as_str(), s.parent.as_deref()))
        .collect();
    let depth_of = |acct: &str| {
        let mut d = 0;
        let mut cur = parents.get(acct).copied().flatten();
        while let Some(p) = cur {
            d += 1;
            cur = parents.get(p).copied().flatten();
            if d > 64 {
                break;
            }
        }
        d
    };
    let total: f64 = list
        .iter()
        .filter(|s| s.user.is_empty() && s.parent.is_none())
        .map(|s| s.raw_usage)
        .sum::<f64>()
        .max(
            list.iter()
                .filter(|s| !s.user.is_empty())
                .map(|s| s.raw_usage)
                .sum(),
        );
    list.iter()
        .map(|s| {
            let depth = depth_of(&s.account) + usize::from(!s.user.is_empty());
            let level_fs = (s.raw_shares != "parent").then(|| {
                if s.effective_usage > 0.0 {
                    s.norm_shares / s.effective_usage
                } else {
                    f64::INFINITY
                }
            });
            Row {
                share: s.clone(),
                depth,
                norm_usage: if total > 0.0 {
                    s.raw_usage / total
                } else {
                    0.0
                },
                level_fs,
            }
        })
        .collect()
}

fn double(v: f64) -> String {
    if v.is_infinite() {
        "inf".into()
    } else {
        format!("{v:.6}")
    }
}

/// A field's value for a row.
pub(crate) fn value(r: &Row, f: Field, index: usize) -> String {
    let s = &r.share;
    let is_user = !s.user.is_empty();
    match f {
        Field::Account => format!("{}{}", " ".repeat(r.depth), s.account),
        Field::Cluster => "cadre".into(),
        Field::EffectvUsage => double(s.effective_usage),
        Field::FairShare => {
            if is_user {
                double(s.fairshare)
            } else {
                String::new()
            }
        }
        Field::LevelFs => r.level_fs.map_or_else(String::new, double),
        Field::Id => (index + 1).to_string(),
        Field::NormShares => double(s.norm_shares),
        Field::NormUsage => double(r.norm_usage),
        Field::Partition | Field::GrpTresMins | Field::TresRunMins => String::new(),
        Field::RawShares => s.raw_shares.clone(),
        Field::RawUsage => format!("{:.0}", s.raw_usage.max(0.0).floor()),
        Field::User => s.user.clone(),
    }
}

/// Which rows to show.
#[derive(Clone, Debug, Default)]
pub(crate) struct Selection {
    pub all_users: bool,
    pub users: Vec<String>,
    pub accounts: Vec<String>,
    pub users_only: bool,
    pub me: String,
}

impl Selection {
    fn keeps(&self, r: &Row) -> bool {
        let s = &r.share;
        if !self.accounts.is_empty() && !self.accounts.contains(&s.account) {
            return false;
        }
        if s.user.is_empty() {
            return !self.users_only;
        }
        if !self.users.is_empty() {
            return self.users.contains(&s.user);
        }
        self.all_users || s.user == self.me
    }
}

fn usage() -> ExitCode {
    println!(
        "Usage: sshare [-A accounts] [-a] [-l] [-n] [-o fields] [-p|-P] [-u users] [-U] [-v] [-V]"
    );
    ExitCode::SUCCESS
}

/// `sshare [OPTIONS]`.
pub fn run(args: Vec<OsString>) -> ExitCode {
    let p = match query::begin(CMD, args, OPTIONS, usage) {
        Ok(p) => p,
        Err(code) => return code,
    };
    if p.has("helpformat") {
        let names: Vec<&str> = FIELDS.iter().map(|(_, n, _)| *n).collect();
        println!("{}", names.join(" "));
        return ExitCode::SUCCESS;
    }
    let spec = p.value("format").unwrap_or(if p.has("long") {
        LONG_FIELDS
    } else {
        DEFAULT_FIELDS
    });
    let cols = match parse_fields(spec) {
        Ok(c) => c,
        Err(name) => return query::fail(CMD, format!("Invalid field requested: \"{name}\"")),
    };
    let sel = Selection {
        all_users: p.has("all"),
        users: p
            .values("users")
            .iter()
            .flat_map(|u| query::list(u))
            .collect(),
        accounts: p
            .values("accounts")
            .iter()
            .flat_map(|a| query::list(a))
            .collect(),
        users_only: p.has("Users"),
        me: query::current_user(),
    };
    let style = if p.has("parsable2") {
        TableStyle::Parsable {
            delimiter: "|".into(),
            trailing: false,
        }
    } else if p.has("parsable") {
        TableStyle::Parsable {
            delimiter: "|".into(),
            trailing: true,
        }
    } else {
        TableStyle::Table
    };
    let list: ShareList = match query::connect().and_then(|mut c| Ok(c.get("/shares")?)) {
        Ok(l) => l,
        Err(e) => return query::fail(CMD, cadre_cli::error_chain(&e)),
    };
    if p.has("json") {
        println!(
            "{}",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    let rows = rows(&list.shares);
    let values: Vec<Vec<String>> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| sel.keeps(r))
        .map(|(i, r)| cols.iter().map(|(f, _)| value(r, *f, i)).collect())
        .collect();
    let heads: Vec<TableColumn> = cols.iter().map(|(_, c)| *c).collect();
    for line in format::table(&heads, &values, &style, !p.has("noheader")) {
        println!("{line}");
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::squeue::tests::framed;

    fn share(account: &str, user: &str, parent: Option<&str>, usage: f64) -> ShareView {
        ShareView {
            account: account.into(),
            user: user.into(),
            parent: parent.map(str::to_owned),
            raw_shares: "1".into(),
            norm_shares: 0.5,
            raw_usage: usage,
            effective_usage: if usage > 0.0 { 0.25 } else { 0.0 },
            fairshare: if user == "alice" { 1.0 } else { 0.5 },
        }
    }

    fn tree() -> Vec<ShareView> {
        vec![
            share("root", "", None, 4000.0),
            share("physics", "", Some("root"), 1000.0),
            share("physics", "alice", None, 1000.0),
            share("physics", "bob", None, 0.0),
            share("bio", "", Some("root"), 3000.0),
            share("bio", "carol", None, 3000.0),
        ]
    }

    fn show(fields: &str, sel: &Selection, style: &TableStyle) -> String {
        let cols = parse_fields(fields).unwrap();
        let rows = rows(&tree());
        let values: Vec<Vec<String>> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| sel.keeps(r))
            .map(|(i, r)| cols.iter().map(|(f, _)| value(r, *f, i)).collect())
            .collect();
        let heads: Vec<TableColumn> = cols.iter().map(|(_, c)| *c).collect();
        framed(format::table(&heads, &values, style, true))
    }

    #[test]
    fn the_default_table_indents_the_tree() {
        let sel = Selection {
            all_users: true,
            ..Selection::default()
        };
        insta::assert_snapshot!(show(DEFAULT_FIELDS, &sel, &TableStyle::Table));
    }

    #[test]
    fn long_parsable_and_user_selection() {
        let sel = Selection {
            me: "alice".into(),
            ..Selection::default()
        };
        let style = TableStyle::Parsable {
            delimiter: "|".into(),
            trailing: false,
        };
        insta::assert_snapshot!(show(LONG_FIELDS, &sel, &style));
        assert_eq!(parse_fields("A,Eff").unwrap()[1].1.name, "EffectvUsage");
        assert_eq!(parse_fields("bogus"), Err("bogus".into()));
    }
}
