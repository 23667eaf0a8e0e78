//! Command-line splitting with GNU `getopt_long`'s rules, which every Slurm command uses:
//! long options as `--name=value` or `--name value`, unique prefixes of long names
//! (`--hol` is `--hold`), short options bundled (`-HN2`) or with attached values (`-n4`),
//! optional values only in the attached form (`--nice=5`, never `--nice 5`), `--` ending
//! the options, and (as Slurm's commands ask with a leading `+`) option processing ending
//! at the first operand (the script), so that what follows it is the script's arguments.
//!
//! Errors are glibc's messages, which users of Slurm see verbatim.

/// Whether an option takes a value.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ArgKind {
    None,
    Required,
    /// Only in the attached form `--name=value`.
    Optional,
}

/// One option of a command's table.
#[derive(Copy, Clone, Debug)]
pub struct OptDef<K> {
    pub long: &'static str,
    pub short: Option<char>,
    pub arg: ArgKind,
    pub key: K,
}

/// The options found, in order, and the operands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed<K> {
    pub opts: Vec<(K, Option<String>)>,
    /// The first operand (a script) and everything after it.
    pub operands: Vec<String>,
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

/// Splits `args` (without the program name) by the table `defs`.
pub fn parse<K: Copy>(defs: &[OptDef<K>], args: &[String]) -> Result<Parsed<K>, GetoptError> {
    let mut opts = Vec::new();
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
            let value = match (def.arg, attached) {
                (ArgKind::None, Some(_)) => return Err(GetoptError::NoArgAllowed(def.long)),
                (ArgKind::None, None) => None,
                (ArgKind::Optional, v) => v,
                (ArgKind::Required, Some(v)) => Some(v),
                (ArgKind::Required, None) => {
                    i += 1;
                    match args.get(i) {
                        Some(v) => Some(v.clone()),
                        None => return Err(GetoptError::MissingLong(def.long)),
                    }
                }
            };
            opts.push((def.key, value));
            i += 1;
            continue;
        }
        if arg.len() > 1 && arg.starts_with('-') {
            let chars: Vec<char> = arg[1..].chars().collect();
            let mut j = 0;
            while j < chars.len() {
                let c = chars[j];
                let def = defs
                    .iter()
                    .find(|d| d.short == Some(c))
                    .ok_or(GetoptError::InvalidShort(c))?;
                match def.arg {
                    ArgKind::None => {
                        opts.push((def.key, None));
                        j += 1;
                    }
                    ArgKind::Optional | ArgKind::Required => {
                        let rest: String = chars[j + 1..].iter().collect();
                        let value = if !rest.is_empty() {
                            Some(rest)
                        } else if def.arg == ArgKind::Optional {
                            None
                        } else {
                            i += 1;
                            Some(args.get(i).cloned().ok_or(GetoptError::MissingShort(c))?)
                        };
                        opts.push((def.key, value));
                        break;
                    }
                }
            }
            i += 1;
            continue;
        }
        // The first operand ends the options.
        break;
    }
    Ok(Parsed {
        opts,
        operands: args[i.min(args.len())..].to_vec(),
    })
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
        parse(DEFS, &args)
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
}
