//! The line syntax shared by `slurm.conf`, `gres.conf` and `topology.conf`: `Key=Value`
//! pairs separated by whitespace, `#` comments, `\` line continuation, double-quoted values
//! and `Include FILE` lines.
//!
//! Lives here: turning files into [`Line`]s of [`Pair`]s, each pair knowing the file and
//! physical line it was written on, and following `Include` lines. Not here: what any key
//! means (the modules of each file decide, and reject keys they do not know).
//!
//! The rules, as Slurm documents them for its configuration files:
//! - keys are case-insensitive (kept as written, for messages); values are kept as written;
//! - `#` starts a comment to the end of the line, unless escaped as `\#`;
//! - a line ending in `\` continues on the next one, joined without a separator;
//! - a value may be double-quoted to hold whitespace (`Reason="fan failed"`); the quotes are
//!   not part of the value;
//! - a line whose first word is `Include` (any case) names a file that is read in its
//!   place; a relative name is relative to the directory of `slurm.conf`, and `%c` in it is
//!   the cluster name given so far by `ClusterName`. Wildcards are refused (Slurm 23.02
//!   and later expand them; a site that uses them can list the files).

use crate::error::{Problem, SlurmConfError};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// How deep `Include` may nest before the reader assumes a loop it cannot see.
const MAX_INCLUDE_DEPTH: usize = 16;

/// Where something was written: a file and a physical line, counted from 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub file: Rc<PathBuf>,
    pub line: usize,
}

impl Loc {
    /// An error at this place.
    pub fn error(&self, problem: Problem) -> SlurmConfError {
        SlurmConfError::At {
            file: self.file.as_ref().clone(),
            line: self.line,
            problem: Box::new(problem),
        }
    }

    pub fn location(&self) -> crate::Location {
        crate::Location {
            file: self.file.as_ref().clone(),
            line: self.line,
        }
    }
}

/// One `Key=Value` of a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pair {
    /// The key as written.
    pub key: String,
    pub value: String,
    pub at: Loc,
}

impl Pair {
    /// Whether the key is `name`, ignoring case.
    pub fn is(&self, name: &str) -> bool {
        self.key.eq_ignore_ascii_case(name)
    }
}

/// One logical line: its pairs in order, and where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Line {
    pub at: Loc,
    pub pairs: Vec<Pair>,
}

impl Line {
    /// The first pair: what kind of line this is (`NodeName=`, `PartitionName=`, ...).
    pub fn head(&self) -> &Pair {
        &self.pairs[0]
    }
}

/// Where configuration files come from: the disk, or a map in tests.
pub trait ConfFiles {
    /// The text of the file. A missing file is an error of kind
    /// [`io::ErrorKind::NotFound`], which callers use to tell "absent" from "unreadable".
    fn read(&self, path: &Path) -> io::Result<String>;
}

/// The files on disk.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskFiles;

impl ConfFiles for DiskFiles {
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
}

/// Reads a configuration file and the files it includes, in order.
pub(crate) struct Reader<'a> {
    files: &'a dyn ConfFiles,
    /// Where relative `Include` names are looked up: the directory of `slurm.conf`.
    dir: PathBuf,
    /// Every file read, in the order first read.
    pub read: Vec<PathBuf>,
    /// The last `ClusterName` seen, for `%c` in `Include` names.
    cluster_name: Option<String>,
}

impl<'a> Reader<'a> {
    pub fn new(files: &'a dyn ConfFiles, dir: PathBuf) -> Reader<'a> {
        Reader {
            files,
            dir,
            read: Vec::new(),
            cluster_name: None,
        }
    }

    /// The lines of `path` (and of the files it includes, in their place). `Ok(None)` when
    /// `optional` and the file does not exist.
    pub fn read_file(
        &mut self,
        path: &Path,
        optional: bool,
    ) -> Result<Option<Vec<Line>>, SlurmConfError> {
        let text = match self.files.read(path) {
            Ok(text) => text,
            Err(e) if optional && e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(SlurmConfError::Read {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let mut out = Vec::new();
        let mut stack = vec![path.to_path_buf()];
        self.read.push(path.to_path_buf());
        self.lines_of(&text, Rc::new(path.to_path_buf()), &mut stack, &mut out)?;
        Ok(Some(out))
    }

    fn lines_of(
        &mut self,
        text: &str,
        file: Rc<PathBuf>,
        stack: &mut Vec<PathBuf>,
        out: &mut Vec<Line>,
    ) -> Result<(), SlurmConfError> {
        for logical in logical_lines(text) {
            let at = Loc {
                file: file.clone(),
                line: logical.first_line,
            };
            match tokenize(&logical, &file)? {
                Tokens::Empty => {}
                Tokens::Include(name) => {
                    let target = self.include_path(&name, &at)?;
                    if stack.contains(&target) {
                        return Err(at.error(Problem::IncludeLoop {
                            path: target.clone(),
                        }));
                    }
                    if stack.len() >= MAX_INCLUDE_DEPTH {
                        return Err(at.error(Problem::IncludeTooDeep {
                            limit: MAX_INCLUDE_DEPTH,
                        }));
                    }
                    let text = self.files.read(&target).map_err(|source| {
                        at.error(Problem::Include {
                            path: target.clone(),
                            source,
                        })
                    })?;
                    if !self.read.contains(&target) {
                        self.read.push(target.clone());
                    }
                    stack.push(target.clone());
                    self.lines_of(&text, Rc::new(target), stack, out)?;
                    stack.pop();
                }
                Tokens::Pairs(pairs) => {
                    if let Some(name) = pairs.iter().rev().find(|p| p.is("ClusterName")) {
                        self.cluster_name = Some(name.value.clone());
                    }
                    out.push(Line { at, pairs });
                }
            }
        }
        Ok(())
    }

    fn include_path(&self, name: &str, at: &Loc) -> Result<PathBuf, SlurmConfError> {
        let mut expanded = String::with_capacity(name.len());
        let mut chars = name.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                expanded.push(c);
                continue;
            }
            match chars.next() {
                Some('c') => match &self.cluster_name {
                    Some(cluster) => expanded.push_str(cluster),
                    None => {
                        return Err(at.error(Problem::IncludeClusterName {
                            name: name.to_string(),
                        }));
                    }
                },
                Some('%') => expanded.push('%'),
                other => {
                    return Err(at.error(Problem::IncludeModifier {
                        name: name.to_string(),
                        modifier: other.map_or_else(String::new, |c| c.to_string()),
                    }));
                }
            }
        }
        if expanded.contains(['*', '?', '[']) {
            return Err(at.error(Problem::IncludeWildcard {
                name: name.to_string(),
            }));
        }
        let path = Path::new(&expanded);
        Ok(if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.dir.join(path)
        })
    }
}

/// A logical line: the physical lines joined at their continuations, comments removed.
/// `starts` maps byte offsets of `text` to the physical line they came from.
struct Logical {
    text: String,
    first_line: usize,
    /// (offset in `text`, physical line) where each physical line's part begins.
    starts: Vec<(usize, usize)>,
}

impl Logical {
    fn line_at(&self, offset: usize) -> usize {
        let i = self.starts.partition_point(|&(o, _)| o <= offset);
        self.starts[i.saturating_sub(1)].1
    }
}

/// Removes a comment: everything from the first `#` that is not escaped as `\#`, which
/// becomes `#`.
fn strip_comment(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'#') => {
                out.push('#');
                chars.next();
            }
            '#' => break,
            _ => out.push(c),
        }
    }
    out
}

fn logical_lines(text: &str) -> Vec<Logical> {
    let mut out = Vec::new();
    let mut current: Option<Logical> = None;
    for (i, raw) in text.lines().enumerate() {
        let number = i + 1;
        let stripped = strip_comment(raw);
        let body = stripped.trim_end();
        let (part, continues) = match body.strip_suffix('\\') {
            Some(rest) => (rest, true),
            None => (body, false),
        };
        let logical = current.get_or_insert_with(|| Logical {
            text: String::new(),
            first_line: number,
            starts: Vec::new(),
        });
        logical.starts.push((logical.text.len(), number));
        logical.text.push_str(part);
        if !continues {
            out.extend(current.take());
        }
    }
    out.extend(current);
    out
}

enum Tokens {
    Empty,
    Include(String),
    Pairs(Vec<Pair>),
}

fn tokenize(logical: &Logical, file: &Rc<PathBuf>) -> Result<Tokens, SlurmConfError> {
    let text = logical.text.as_str();
    let at = |offset: usize| Loc {
        file: file.clone(),
        line: logical.line_at(offset),
    };
    let mut pairs = Vec::new();
    let mut pos = 0;
    let bytes = text.as_bytes();
    loop {
        while pos < bytes.len() && bytes[pos].is_ascii_whitespace() {
            pos += 1;
        }
        if pos >= bytes.len() {
            break;
        }
        let start = pos;
        while pos < bytes.len() && bytes[pos] != b'=' && !bytes[pos].is_ascii_whitespace() {
            pos += 1;
        }
        let key = &text[start..pos];
        if pos >= bytes.len() || bytes[pos] != b'=' {
            if pairs.is_empty() && key.eq_ignore_ascii_case("include") {
                let name = text[pos..].trim();
                if name.is_empty() {
                    return Err(at(start).error(Problem::IncludeWithoutFile));
                }
                return Ok(Tokens::Include(unquote(name).to_string()));
            }
            return Err(at(start).error(Problem::NotKeyValue {
                word: key.to_string(),
            }));
        }
        if key.is_empty() {
            let end = text[pos..]
                .find(|c: char| c.is_ascii_whitespace())
                .map_or(text.len(), |e| pos + e);
            return Err(at(start).error(Problem::EmptyKey {
                word: text[start..end].to_string(),
            }));
        }
        pos += 1; // '='
        let value = if bytes.get(pos) == Some(&b'"') {
            let close = text[pos + 1..].find('"').map(|e| pos + 1 + e);
            let Some(close) = close else {
                return Err(at(start).error(Problem::UnterminatedQuote {
                    key: key.to_string(),
                }));
            };
            let value = &text[pos + 1..close];
            pos = close + 1;
            if pos < bytes.len() && !bytes[pos].is_ascii_whitespace() {
                return Err(at(start).error(Problem::TextAfterQuote {
                    key: key.to_string(),
                }));
            }
            value
        } else {
            let vstart = pos;
            while pos < bytes.len() && !bytes[pos].is_ascii_whitespace() {
                pos += 1;
            }
            &text[vstart..pos]
        };
        pairs.push(Pair {
            key: key.to_string(),
            value: value.to_string(),
            at: at(start),
        });
    }
    Ok(if pairs.is_empty() {
        Tokens::Empty
    } else {
        Tokens::Pairs(pairs)
    })
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Files in memory, for tests.
    #[derive(Default)]
    pub struct MemFiles(pub BTreeMap<PathBuf, String>);

    impl MemFiles {
        pub fn with(files: &[(&str, &str)]) -> MemFiles {
            MemFiles(
                files
                    .iter()
                    .map(|(p, t)| (PathBuf::from(p), t.to_string()))
                    .collect(),
            )
        }
    }

    impl ConfFiles for MemFiles {
        fn read(&self, path: &Path) -> io::Result<String> {
            self.0
                .get(path)
                .cloned()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))
        }
    }

    fn read(files: &[(&str, &str)]) -> Result<Vec<Line>, SlurmConfError> {
        let mem = MemFiles::with(files);
        let mut reader = Reader::new(&mem, PathBuf::from("/etc/slurm"));
        Ok(reader
            .read_file(Path::new("/etc/slurm/slurm.conf"), false)?
            .unwrap_or_default())
    }

    fn flat(lines: &[Line]) -> Vec<Vec<(String, String, usize)>> {
        lines
            .iter()
            .map(|l| {
                l.pairs
                    .iter()
                    .map(|p| (p.key.clone(), p.value.clone(), p.at.line))
                    .collect()
            })
            .collect()
    }

    fn err(files: &[(&str, &str)]) -> String {
        read(files).expect_err("an error").to_string()
    }

    #[test]
    fn pairs_comments_quotes_and_continuations() {
        let text = "# a comment\n\
                    ClusterName=ref   # trailing\n\
                    \n\
                    NodeName=gpu[1-2] CPUs=4 \\\n  Reason=\"fan \\#2 broken\"\n\
                    Weird=a\\#b\n";
        let lines = read(&[("/etc/slurm/slurm.conf", text)]).expect("parses");
        assert_eq!(
            flat(&lines),
            vec![
                vec![("ClusterName".into(), "ref".into(), 2)],
                vec![
                    ("NodeName".into(), "gpu[1-2]".into(), 4),
                    ("CPUs".into(), "4".into(), 4),
                    ("Reason".into(), "fan #2 broken".into(), 5),
                ],
                vec![("Weird".into(), "a#b".into(), 6)],
            ]
        );
        assert_eq!(lines[1].at.line, 4);
    }

    #[test]
    fn empty_values_are_values() {
        let lines = read(&[("/etc/slurm/slurm.conf", "PartitionName=p Nodes=\n")]).expect("ok");
        assert_eq!(lines[0].pairs[1].value, "");
    }

    #[test]
    fn include_relative_absolute_and_cluster_name() {
        let lines = read(&[
            (
                "/etc/slurm/slurm.conf",
                "ClusterName=big\ninclude nodes.conf\nInclude /opt/%c-parts.conf\nLast=1\n",
            ),
            ("/etc/slurm/nodes.conf", "NodeName=a\n"),
            ("/opt/big-parts.conf", "PartitionName=p\n"),
        ])
        .expect("parses");
        let heads: Vec<(String, String)> = lines
            .iter()
            .map(|l| (l.head().key.clone(), l.at.file.display().to_string()))
            .collect();
        assert_eq!(
            heads,
            vec![
                ("ClusterName".into(), "/etc/slurm/slurm.conf".into()),
                ("NodeName".into(), "/etc/slurm/nodes.conf".into()),
                ("PartitionName".into(), "/opt/big-parts.conf".into()),
                ("Last".into(), "/etc/slurm/slurm.conf".into()),
            ]
        );
    }

    #[test]
    fn syntax_errors_name_file_and_line() {
        insta::assert_snapshot!(
            [
                err(&[("/etc/slurm/slurm.conf", "ClusterName=a\nCPUs = 4\n")]),
                err(&[("/etc/slurm/slurm.conf", "=4\n")]),
                err(&[("/etc/slurm/slurm.conf", "\nReason=\"open\n")]),
                err(&[("/etc/slurm/slurm.conf", "Reason=\"a\"b\n")]),
                err(&[("/etc/slurm/slurm.conf", "Include\n")]),
                err(&[("/etc/slurm/slurm.conf", "Include missing.conf\n")]),
                err(&[("/etc/slurm/slurm.conf", "Include conf.d/*.conf\n")]),
                err(&[("/etc/slurm/slurm.conf", "Include %c.conf\n")]),
                err(&[("/etc/slurm/slurm.conf", "ClusterName=x\nInclude %n.conf\n")]),
                err(&[
                    ("/etc/slurm/slurm.conf", "Include a.conf\n"),
                    ("/etc/slurm/a.conf", "\nInclude slurm.conf\n"),
                ]),
            ]
            .join("\n")
        );
    }

    #[test]
    fn a_missing_main_file_is_a_read_error() {
        let mem = MemFiles::default();
        let mut reader = Reader::new(&mem, PathBuf::from("/x"));
        let e = reader
            .read_file(Path::new("/x/slurm.conf"), false)
            .expect_err("missing");
        assert!(matches!(e, SlurmConfError::Read { .. }), "{e}");
        assert!(
            reader
                .read_file(Path::new("/x/gres.conf"), true)
                .expect("optional")
                .is_none()
        );
    }
}
