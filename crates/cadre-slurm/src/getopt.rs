//! Command-line splitting with GNU `getopt_long`'s rules, the one getopt of every Slurm
//! command cadre implements (`sbatch`, `srun`, `salloc` and the read-side commands): long
//! options as `--name=value` or `--name value`, unique prefixes of long names (`--hol` is
//! `--hold`), short options bundled (`-HN2`) or with attached values (`-n4`), optional
//! values only in the attached form (`--nice=5`, never `--nice 5`), and `--` ending the
//! options. Where option processing stops is the command's choice ([`Order`]): at the
//! first operand (the script), as `sbatch`, `srun` and `salloc` ask with a leading `+`, so
//! that what follows it is the script's arguments; or nowhere, options following operands,
//! as the read-side commands take them.
//!
//! Errors are glibc's messages, which users of Slurm see verbatim.
//!
//! Not here: what the options mean (each command's table and its module).

/// Whether an option takes a value.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ArgKind {
    None,
    Required,
    /// Only in the attached form `--name=value`.
    Optional,
    /// Attached, or else the next argument unless it starts with `-`: how squeue's `-j`
    /// and `-s` and sprio's `-j` take theirs (Slurm's commands look at the next argument
    /// themselves after getopt).
    OptionalOrNext,
}

/// Where option processing stops.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Order {
    /// At the first operand: what follows it is operands (`sbatch`, `srun`, `salloc`, whose
    /// optstrings begin with `+`).
    RequireOrder,
    /// Nowhere but at `--`: options may follow operands (GNU's default; the read-side
    /// commands).
    Permute,
}

/// One option of a command's table.
#[derive(Copy, Clone, Debug)]
pub struct OptDef<K> {
    pub long: &'static str,
    pub short: Option<char>,
    pub arg: ArgKind,
    pub key: K,
}

/// Options keyed by their long name, as the read-side commands key theirs.
impl OptDef<&'static str> {
    pub const fn new(short: char, long: &'static str, arg: ArgKind) -> Self {
        OptDef {
            long,
            short: Some(short),
            arg,
            key: long,
        }
    }

    /// An option with no short form.
    pub const fn long(long: &'static str, arg: ArgKind) -> Self {
        OptDef {
            long,
            short: None,
            arg,
            key: long,
        }
    }
}

/// The options found, in order, and the operands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed<K> {
    pub opts: Vec<(K, Option<String>)>,
    /// The operands: with [`Order::RequireOrder`], the first operand (a script) and
    /// everything after it.
    pub operands: Vec<String>,
}

impl<K: PartialEq> Parsed<K> {
    /// Whether the option was given.
    pub fn has(&self, key: K) -> bool {
        self.opts.iter().any(|(k, _)| *k == key)
    }

    /// The last value given to the option (later options override earlier ones).
    pub fn value(&self, key: K) -> Option<&str> {
        self.opts
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Every value given to the option, in order (`-j 1 -j 2`).
    pub fn values(&self, key: K) -> Vec<&str> {
        self.opts
            .iter()
            .filter(|(k, _)| *k == key)
            .filter_map(|(_, v)| v.as_deref())
            .collect()
    }
}

/// glibc's complaints. [`std::fmt::Display`] gives the text after `prog: `.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GetoptError {
    #[error("unrecognized option '{0}'")]
    Unrecognized(String),
    #[error("invalid option -- '{0}'")]
    InvalidShort(char),
    #[error("option '--{0}' requires an argument")]
    MissingLong(&'static str),
    #[error("option requires an argument -- '{0}'")]
    MissingShort(char),
    #[error("option '--{0}' doesn't allow an argument")]
    NoArgAllowed(&'static str),
    #[error("option '{given}' is ambiguous; possibilities:{}", candidates.iter().map(|c| format!(" '--{c}'")).collect::<String>())]
    Ambiguous {
        given: String,
        candidates: Vec<&'static str>,
    },
}

/// Splits `args` (without the program name) by the table `defs`, stopping as `order` says.
pub fn parse<K: Copy>(
    defs: &[OptDef<K>],
    args: &[String],
    order: Order,
) -> Result<Parsed<K>, GetoptError> {
    let mut opts = Vec::new();
    let mut operands = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg == "--" {
            i += 1;
            break;
        }
        if let Some(body) = arg.strip_prefix("--") {
            let (name, attached) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let def = find_long(defs, name, arg)?;
            i += 1;
            let value = match (def.arg, attached) {
                (ArgKind::None, Some(_)) => return Err(GetoptError::NoArgAllowed(def.long)),
                (ArgKind::None, None) => None,
                (_, Some(v)) => Some(v),
                (ArgKind::Optional, None) => None,
                (ArgKind::OptionalOrNext, None) => take_next_unless_option(args, &mut i),
                (ArgKind::Required, None) => {
                    let v = args.get(i).ok_or(GetoptError::MissingLong(def.long))?;
                    i += 1;
                    Some(v.clone())
                }
            };
            opts.push((def.key, value));
            continue;
        }
        if arg.len() > 1 && arg.starts_with('-') {
            let chars: Vec<char> = arg[1..].chars().collect();
            i += 1;
            let mut j = 0;
            while j < chars.len() {
                let c = chars[j];
                j += 1;
                let def = defs
                    .iter()
                    .find(|d| d.short == Some(c))
                    .ok_or(GetoptError::InvalidShort(c))?;
                let rest: String = chars[j..].iter().collect();
                let value = match def.arg {
                    ArgKind::None => None,
                    _ if !rest.is_empty() => {
                        j = chars.len();
                        Some(rest)
                    }
                    ArgKind::Optional => None,
                    ArgKind::OptionalOrNext => take_next_unless_option(args, &mut i),
                    ArgKind::Required => {
                        let v = args.get(i).ok_or(GetoptError::MissingShort(c))?;
                        i += 1;
                        Some(v.clone())
                    }
                };
                opts.push((def.key, value));
            }
            continue;
        }
        match order {
            // The first operand ends the options.
            Order::RequireOrder => break,
            Order::Permute => {
                operands.push(arg.clone());
                i += 1;
            }
        }
    }
    operands.extend_from_slice(&args[i.min(args.len())..]);
    Ok(Parsed { opts, operands })
}

fn take_next_unless_option(args: &[String], i: &mut usize) -> Option<String> {
    let v = args.get(*i).filter(|v| !v.starts_with('-'))?;
    *i += 1;
    Some(v.clone())
}

fn find_long<'a, K>(
    defs: &'a [OptDef<K>],
    name: &str,
    arg: &str,
) -> Result<&'a OptDef<K>, GetoptError> {
    if let Some(d) = defs.iter().find(|d| d.long == name) {
        return Ok(d);
    }
    let matches: Vec<&OptDef<K>> = if name.is_empty() {
        Vec::new()
    } else {
        defs.iter().filter(|d| d.long.starts_with(name)).collect()
    };
    match matches.as_slice() {
        [] => Err(GetoptError::Unrecognized(arg.to_string())),
        [one] => Ok(one),
        many => Err(GetoptError::Ambiguous {
            given: arg.to_string(),
            candidates: many.iter().map(|d| d.long).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFS: &[OptDef<u8>] = &[
        OptDef {
            long: "hold",
            short: Some('H'),
            arg: ArgKind::None,
            key: 1,
        },
        OptDef {
            long: "nodes",
            short: Some('N'),
            arg: ArgKind::Required,
            key: 2,
        },
        OptDef {
            long: "nice",
            short: None,
            arg: ArgKind::Optional,
            key: 3,
        },
        OptDef {
            long: "ntasks-per-node",
            short: None,
            arg: ArgKind::Required,
            key: 4,
        },
        OptDef {
            long: "ntasks-per-core",
            short: None,
            arg: ArgKind::Required,
            key: 5,
        },
        OptDef {
            long: "ntasks",
            short: Some('n'),
            arg: ArgKind::Required,
            key: 6,
        },
    ];

    fn p(args: &[&str]) -> Result<Parsed<u8>, GetoptError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse(DEFS, &args, Order::RequireOrder)
    }

    #[test]
    fn long_options_take_values_attached_or_next() {
        let r = p(&["--nodes=2", "--nodes", "3", "--hold", "s.sh", "--hold"]).unwrap();
        assert_eq!(
            r.opts,
            vec![(2, Some("2".into())), (2, Some("3".into())), (1, None)]
        );
        assert_eq!(r.operands, vec!["s.sh", "--hold"]);
    }

    #[test]
    fn optional_values_only_attached() {
        let r = p(&["--nice", "5"]).unwrap();
        assert_eq!(r.opts, vec![(3, None)]);
        assert_eq!(r.operands, vec!["5"]);
        assert_eq!(p(&["--nice=5"]).unwrap().opts, vec![(3, Some("5".into()))]);
    }

    #[test]
    fn unique_prefixes_and_exact_names_resolve() {
        assert_eq!(p(&["--hol"]).unwrap().opts, vec![(1, None)]);
        // `ntasks` is a prefix of two others but matches exactly.
        assert_eq!(
            p(&["--ntasks=4"]).unwrap().opts,
            vec![(6, Some("4".into()))]
        );
        assert_eq!(
            p(&["--ntasks-per=2"]).unwrap_err().to_string(),
            "option '--ntasks-per=2' is ambiguous; possibilities: '--ntasks-per-node' '--ntasks-per-core'"
        );
    }

    #[test]
    fn short_options_bundle_and_attach() {
        let r = p(&["-HN2", "-n", "4", "-n8", "x"]).unwrap();
        assert_eq!(
            r.opts,
            vec![
                (1, None),
                (2, Some("2".into())),
                (6, Some("4".into())),
                (6, Some("8".into()))
            ]
        );
        assert_eq!(r.operands, vec!["x"]);
    }

    #[test]
    fn double_dash_ends_options() {
        let r = p(&["-H", "--", "-N", "2"]).unwrap();
        assert_eq!(r.opts, vec![(1, None)]);
        assert_eq!(r.operands, vec!["-N", "2"]);
    }

    #[test]
    fn glibc_messages() {
        assert_eq!(
            p(&["--foo=1"]).unwrap_err().to_string(),
            "unrecognized option '--foo=1'"
        );
        assert_eq!(p(&["-Z"]).unwrap_err().to_string(), "invalid option -- 'Z'");
        assert_eq!(
            p(&["--nodes"]).unwrap_err().to_string(),
            "option '--nodes' requires an argument"
        );
        assert_eq!(
            p(&["-N"]).unwrap_err().to_string(),
            "option requires an argument -- 'N'"
        );
        assert_eq!(
            p(&["--hold=yes"]).unwrap_err().to_string(),
            "option '--hold' doesn't allow an argument"
        );
        assert_eq!(
            p(&["--"]).unwrap(),
            Parsed {
                opts: vec![],
                operands: vec![]
            }
        );
    }

    /// A read-side command's table (squeue's shape): keyed by long name, permuted.
    const READ_TABLE: &[OptDef<&str>] = &[
        OptDef::new('h', "noheader", ArgKind::None),
        OptDef::new('l', "long", ArgKind::None),
        OptDef::new('o', "format", ArgKind::Required),
        OptDef::new('j', "jobs", ArgKind::OptionalOrNext),
        OptDef::long("start", ArgKind::None),
        OptDef::new('t', "states", ArgKind::Required),
    ];

    fn read(a: &[&str]) -> Result<Parsed<&'static str>, GetoptError> {
        let args: Vec<String> = a.iter().map(|s| s.to_string()).collect();
        parse(READ_TABLE, &args, Order::Permute)
    }

    #[test]
    fn options_bundle_attach_and_follow_operands() {
        let p = read(&["-hl", "-o%i", "12", "--form", "%j", "-j5"]).unwrap();
        assert_eq!(
            p.opts,
            vec![
                ("noheader", None),
                ("long", None),
                ("format", Some("%i".into())),
                ("format", Some("%j".into())),
                ("jobs", Some("5".into())),
            ]
        );
        assert_eq!(p.operands, vec!["12"]);
        assert_eq!(p.value("format"), Some("%j"));
    }

    #[test]
    fn optional_values_take_the_next_argument_unless_it_is_an_option() {
        let p = read(&["-j", "7", "--jobs", "-h"]).unwrap();
        assert_eq!(p.values("jobs"), vec!["7"]);
        assert!(p.has("noheader"));
    }

    #[test]
    fn errors_are_worded_as_glibc_words_them() {
        let e = |a: &[&str]| read(a).unwrap_err().to_string();
        assert_eq!(e(&["--bogus"]), "unrecognized option '--bogus'");
        assert_eq!(e(&["-x"]), "invalid option -- 'x'");
        assert_eq!(e(&["-o"]), "option requires an argument -- 'o'");
        assert_eq!(e(&["--format"]), "option '--format' requires an argument");
        assert_eq!(
            e(&["--long=3"]),
            "option '--long' doesn't allow an argument"
        );
        assert_eq!(
            e(&["--st"]),
            "option '--st' is ambiguous; possibilities: '--start' '--states'"
        );
        // glibc names the option as given, value and all (Slurm 22.05's squeue says
        // "unrecognized option '--bogus=1'").
        assert_eq!(e(&["--bogus=1"]), "unrecognized option '--bogus=1'");
        assert_eq!(
            e(&["--st=1"]),
            "option '--st=1' is ambiguous; possibilities: '--start' '--states'"
        );
    }

    #[test]
    fn a_double_dash_ends_the_options() {
        let p = read(&["--", "-h"]).unwrap();
        assert_eq!(p.operands, vec!["-h"]);
        let p = read(&["5", "-h", "--", "-l", "6"]).unwrap();
        assert_eq!(p.opts, vec![("noheader", None)]);
        assert_eq!(p.operands, vec!["5", "-l", "6"]);
    }
}
