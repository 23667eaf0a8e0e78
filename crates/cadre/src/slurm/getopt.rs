//! Command-line parsing with GNU `getopt_long`'s semantics, as Slurm's read-side commands
//! parse theirs: options may follow operands, `--` ends the options, long options may be
//! abbreviated to any unambiguous prefix and take their value as `--opt=v` or `--opt v`,
//! short options bundle (`-hl`) and take their value attached (`-j12`) or as the next
//! argument. Errors are worded as glibc words them, since scripts and users see them.
//!
//! Not here: what the options mean (each command's module).

use std::fmt;

/// Whether an option takes a value.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum HasArg {
    No,
    Required,
    /// A value is optional: attached (`-j12`, `--jobs=12`), or the next argument when it
    /// does not look like an option (`-j 12`), as squeue's `-j` and sprio's `-j` take it.
    Optional,
}

/// One option of a command.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Opt {
    pub short: Option<char>,
    pub long: &'static str,
    pub arg: HasArg,
}

impl Opt {
    pub(crate) const fn new(short: char, long: &'static str, arg: HasArg) -> Opt {
        Opt {
            short: Some(short),
            long,
            arg,
        }
    }

    pub(crate) const fn long(long: &'static str, arg: HasArg) -> Opt {
        Opt {
            short: None,
            long,
            arg,
        }
    }
}

/// The options found, in order, by their long name, and the operands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub opts: Vec<(&'static str, Option<String>)>,
    pub operands: Vec<String>,
}

impl Parsed {
    /// Whether the option was given.
    pub(crate) fn has(&self, long: &str) -> bool {
        self.opts.iter().any(|(n, _)| *n == long)
    }

    /// The last value given to the option (later options override earlier ones).
    pub(crate) fn value(&self, long: &str) -> Option<&str> {
        self.opts
            .iter()
            .rev()
            .find(|(n, _)| *n == long)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Every value given to the option, in order (`-j 1 -j 2`).
    pub(crate) fn values(&self, long: &str) -> Vec<&str> {
        self.opts
            .iter()
            .filter(|(n, _)| *n == long)
            .filter_map(|(_, v)| v.as_deref())
            .collect()
    }
}

/// A command line that does not parse, worded as glibc's getopt reports it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GetoptError {
    Unrecognized(String),
    Invalid(char),
    MissingShort(char),
    MissingLong(String),
    NoArgAllowed(String),
    Ambiguous(String, Vec<String>),
}

impl fmt::Display for GetoptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GetoptError::Unrecognized(o) => write!(f, "unrecognized option '{o}'"),
            GetoptError::Invalid(c) => write!(f, "invalid option -- '{c}'"),
            GetoptError::MissingShort(c) => write!(f, "option requires an argument -- '{c}'"),
            GetoptError::MissingLong(o) => write!(f, "option '--{o}' requires an argument"),
            GetoptError::NoArgAllowed(o) => write!(f, "option '--{o}' doesn't allow an argument"),
            GetoptError::Ambiguous(o, all) => {
                write!(f, "option '{o}' is ambiguous; possibilities:")?;
                for a in all {
                    write!(f, " '--{a}'")?;
                }
                Ok(())
            }
        }
    }
}

/// Parses `args` (without the program name) against `table`.
pub(crate) fn parse(args: &[String], table: &[Opt]) -> Result<Parsed, GetoptError> {
    let mut out = Parsed::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            out.operands.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(body) = a.strip_prefix("--") {
            let (name, attached) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (body, None),
            };
            let opt = find_long(table, name, a)?;
            let value = match (opt.arg, attached) {
                (HasArg::No, Some(_)) => return Err(GetoptError::NoArgAllowed(opt.long.into())),
                (HasArg::No, None) => None,
                (_, Some(v)) => Some(v),
                (HasArg::Required, None) => match args.get(i) {
                    Some(v) => {
                        i += 1;
                        Some(v.clone())
                    }
                    None => return Err(GetoptError::MissingLong(opt.long.into())),
                },
                (HasArg::Optional, None) => take_optional(args, &mut i),
            };
            out.opts.push((opt.long, value));
            continue;
        }
        if a.len() > 1 && a.starts_with('-') {
            let chars: Vec<char> = a[1..].chars().collect();
            let mut k = 0;
            while k < chars.len() {
                let c = chars[k];
                k += 1;
                let opt = table
                    .iter()
                    .find(|o| o.short == Some(c))
                    .ok_or(GetoptError::Invalid(c))?;
                let rest: String = chars[k..].iter().collect();
                let value = match opt.arg {
                    HasArg::No => None,
                    _ if !rest.is_empty() => {
                        k = chars.len();
                        Some(rest)
                    }
                    HasArg::Required => match args.get(i) {
                        Some(v) => {
                            i += 1;
                            Some(v.clone())
                        }
                        None => return Err(GetoptError::MissingShort(c)),
                    },
                    HasArg::Optional => take_optional(args, &mut i),
                };
                out.opts.push((opt.long, value));
            }
            continue;
        }
        out.operands.push(a.clone());
    }
    Ok(out)
}

fn take_optional(args: &[String], i: &mut usize) -> Option<String> {
    match args.get(*i) {
        Some(v) if !v.starts_with('-') => {
            *i += 1;
            Some(v.clone())
        }
        _ => None,
    }
}

fn find_long<'t>(table: &'t [Opt], name: &str, given: &str) -> Result<&'t Opt, GetoptError> {
    if let Some(o) = table.iter().find(|o| o.long == name) {
        return Ok(o);
    }
    let matches: Vec<&Opt> = table
        .iter()
        .filter(|o| !name.is_empty() && o.long.starts_with(name))
        .collect();
    match matches.as_slice() {
        [] => Err(GetoptError::Unrecognized(
            given.split('=').next().unwrap_or(given).into(),
        )),
        [one] => Ok(one),
        many => Err(GetoptError::Ambiguous(
            format!("--{name}"),
            many.iter().map(|o| o.long.to_owned()).collect(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &[Opt] = &[
        Opt::new('h', "noheader", HasArg::No),
        Opt::new('l', "long", HasArg::No),
        Opt::new('o', "format", HasArg::Required),
        Opt::new('j', "jobs", HasArg::Optional),
        Opt::long("start", HasArg::No),
        Opt::new('t', "states", HasArg::Required),
    ];

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_bundle_attach_and_follow_operands() {
        let p = parse(&args(&["-hl", "-o%i", "12", "--form", "%j", "-j5"]), TABLE).unwrap();
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
        let p = parse(&args(&["-j", "7", "--jobs", "-h"]), TABLE).unwrap();
        assert_eq!(p.values("jobs"), vec!["7"]);
        assert!(p.has("noheader"));
    }

    #[test]
    fn errors_are_worded_as_glibc_words_them() {
        let e = |a: &[&str]| parse(&args(a), TABLE).unwrap_err().to_string();
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
    }

    #[test]
    fn a_double_dash_ends_the_options() {
        let p = parse(&args(&["--", "-h"]), TABLE).unwrap();
        assert_eq!(p.operands, vec!["-h"]);
    }
}
