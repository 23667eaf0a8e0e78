//! Slurm hostlist expressions: expanding `gpu[001-004,007],login1` into node names and
//! compressing node names back into that form.
//!
//! Lives here: the pure string functions [`expand`], [`count`] and [`compress`] and their
//! error type. Not here: node lookup, sorting by node index, or anything that knows about
//! the cluster; callers decide which order the names are in.
//!
//! # Grammar accepted by [`expand`]
//!
//! ```text
//! expr   := token (sep+ token)*          sep: `,` or ASCII whitespace outside brackets
//! token  := (text | group)+              text: any characters other than sep, `[`, `]`
//! group  := `[` item (`,` item)* `]`
//! item   := digits | digits `-` digits   lo <= hi; the zero padding is the width of lo
//! ```
//!
//! A token with several groups expands to their cartesian product, the leftmost group
//! varying slowest (`rack[1-2]-node[01-02]` gives `rack1-node01, rack1-node02,
//! rack2-node01, rack2-node02`). Empty tokens (`a,,b`, a leading or trailing comma) are
//! skipped and duplicates are kept in order, as Slurm does.
//!
//! # Where we differ from Slurm (checked against `scontrol` 22.05)
//!
//! Slurm's parser is lenient in ways that hide typos; we reject instead:
//! `a[1-2` (Slurm prints `a]`), `a[2-]` (Slurm gives `a2`), `a[ 1-2]` and `a[+1-2]`
//! (Slurm gives `a01 a02`), bounds beyond `u64` (Slurm saturates). Slurm 22.05 rejects text
//! after a closing bracket (`gpu[1-3]x`) while newer Slurm accepts it; we accept it.
//! Slurm caps each bracket range at 65,536 names; we cap the whole expansion at
//! [`MAX_NAMES`] instead, which is what protects memory.
//!
//! # Invariants
//!
//! - `count(e) == Ok(n)` exactly when `expand(e)` returns `n` names.
//! - `expand(&compress(names)) == names` for every list of names that contain no `,`,
//!   `[`, `]` or whitespace, in any order and with duplicates (property-tested below).

use std::fmt::Write as _;

/// Largest number of names one expression may expand to, so that a typo such as
/// `gpu[0-99999999]` fails instead of exhausting memory.
pub const MAX_NAMES: usize = 1 << 20;

/// Why a hostlist expression could not be expanded. `position` is a byte offset into `expr`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    #[error("invalid hostlist `{expr}`: unbalanced `{bracket}` at byte {position}")]
    UnbalancedBracket {
        expr: String,
        position: usize,
        bracket: char,
    },
    #[error("invalid hostlist `{expr}`: empty range at byte {position}")]
    EmptyRange { expr: String, position: usize },
    #[error(
        "invalid hostlist `{expr}`: descending range `{range}` at byte {position} \
         (the first bound must not exceed the second)"
    )]
    DescendingRange {
        expr: String,
        position: usize,
        range: String,
    },
    #[error("invalid hostlist `{expr}`: range bound `{bound}` at byte {position} is not a number")]
    NonNumericBound {
        expr: String,
        position: usize,
        bound: String,
    },
    #[error("invalid hostlist `{expr}`: range bound `{bound}` at byte {position} is too large")]
    BoundTooLarge {
        expr: String,
        position: usize,
        bound: String,
    },
    #[error("invalid hostlist `{expr}`: expands to more than {limit} names")]
    TooManyNames { expr: String, limit: usize },
}

/// Expands a Slurm hostlist expression into node names, in the order written.
///
/// See the module documentation for the grammar. An empty or all-separator expression
/// gives an empty list.
///
/// # Errors
///
/// Returns a [`HostlistError`] naming the expression and the byte position for unbalanced
/// brackets, empty ranges (`gpu[]`, `gpu[1,]`), descending ranges (`gpu[5-3]`), bounds
/// that are not plain decimal numbers, and expansions larger than [`MAX_NAMES`].
pub fn expand(expr: &str) -> Result<Vec<String>, HostlistError> {
    let tokens = parse(expr)?;
    let total = total_count(expr, &tokens)?;
    let mut names = Vec::with_capacity(total);
    for token in &tokens {
        token.expand_into(&mut names);
    }
    debug_assert_eq!(names.len(), total);
    Ok(names)
}

/// Counts the names [`expand`] would return, without building them.
///
/// # Errors
///
/// Exactly the errors of [`expand`], including [`HostlistError::TooManyNames`].
pub fn count(expr: &str) -> Result<usize, HostlistError> {
    let tokens = parse(expr)?;
    total_count(expr, &tokens)
}

/// Compresses node names into a hostlist expression, as `scontrol show hostlist` does.
///
/// The names are taken **in the order given, duplicates kept**: no sorting and no
/// deduplication. This is what `scontrol show hostlist` does (`tux2,tux1,tux2` becomes
/// `tux[2,1-2]`), and it keeps `expand(&compress(names)) == names` for any order, which
/// matters because a job's node order is its rank order. Slurm builds
/// `SLURM_JOB_NODELIST` from nodes already in node-table order; callers that want that
/// form pass the names in that order (or sort them first).
///
/// A name splits into a prefix and a trailing decimal number (`gpu007` is `gpu` and 7,
/// width 3). A name is appended to the previous range when it has the same prefix, its
/// number is one more than the range's end, and it prints the same with the range's
/// zero padding (`n9,n10` gives `n[9-10]`, `n09,n010` stays two ranges). Consecutive
/// ranges with the same prefix share one pair of brackets (`a[1-3,5]`), but only when
/// adjacent: `a1,b1,a2` stays as is. Brackets are used only where a group holds more than
/// one name. Names without a trailing number (`login`) and names whose number does not fit
/// in `u64` are written out as they are.
///
/// Names containing `,`, `[`, `]` or whitespace cannot be expressed in a hostlist; they
/// are written out unchanged and will not expand back to themselves.
pub fn compress<S: AsRef<str>>(names: &[S]) -> String {
    let mut ranges: Vec<NameRange<'_>> = Vec::new();
    for name in names {
        let name = name.as_ref();
        match split_numeric_suffix(name) {
            Some((prefix, digits, number)) => {
                if let Some(NameRange::Numeric {
                    prefix: last_prefix,
                    hi,
                    width,
                    ..
                }) = ranges.last_mut()
                {
                    if *last_prefix == prefix
                        && hi.checked_add(1) == Some(number)
                        && formats_as(number, *width, digits)
                    {
                        *hi = number;
                        continue;
                    }
                }
                ranges.push(NameRange::Numeric {
                    prefix,
                    lo: number,
                    hi: number,
                    width: digits.len(),
                });
            }
            None => ranges.push(NameRange::Plain(name)),
        }
    }
    render(&ranges)
}

/// One run of names as [`compress`] sees them.
#[derive(Debug)]
enum NameRange<'a> {
    /// A name without a usable trailing number; never bracketed.
    Plain(&'a str),
    /// `prefix` followed by `lo..=hi`, each zero-padded to at least `width` digits.
    Numeric {
        prefix: &'a str,
        lo: u64,
        hi: u64,
        width: usize,
    },
}

fn render(ranges: &[NameRange<'_>]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < ranges.len() {
        if !out.is_empty() {
            out.push(',');
        }
        match &ranges[i] {
            NameRange::Plain(name) => {
                out.push_str(name);
                i += 1;
            }
            NameRange::Numeric { prefix, .. } => {
                let group_end = ranges[i..]
                    .iter()
                    .position(|r| !matches!(r, NameRange::Numeric { prefix: p, .. } if p == prefix))
                    .map_or(ranges.len(), |n| i + n);
                let group = &ranges[i..group_end];
                let single_name = matches!(group, [NameRange::Numeric { lo, hi, .. }] if lo == hi);
                out.push_str(prefix);
                if !single_name {
                    out.push('[');
                }
                for (k, range) in group.iter().enumerate() {
                    if let NameRange::Numeric { lo, hi, width, .. } = range {
                        if k > 0 {
                            out.push(',');
                        }
                        // Writing to a String cannot fail.
                        let _ = write!(out, "{lo:0width$}");
                        if hi != lo {
                            let _ = write!(out, "-{hi:0width$}");
                        }
                    }
                }
                if !single_name {
                    out.push(']');
                }
                i = group_end;
            }
        }
    }
    out
}

/// Splits `gpu007` into (`gpu`, `007`, 7). `None` when there is no trailing number or it
/// does not fit in `u64`.
fn split_numeric_suffix(name: &str) -> Option<(&str, &str, u64)> {
    let prefix_len = name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (prefix, digits) = name.split_at(prefix_len);
    if digits.is_empty() {
        return None;
    }
    let number = digits.parse().ok()?;
    Some((prefix, digits, number))
}

/// Whether `number` zero-padded to at least `width` digits is exactly `digits`.
fn formats_as(number: u64, width: usize, digits: &str) -> bool {
    format!("{number:0width$}") == digits
}

/// One piece of a token: literal text or a bracket group.
#[derive(Debug)]
enum Segment<'a> {
    Text(&'a str),
    Group(Vec<BoundRange>),
}

/// `lo..=hi`, each printed zero-padded to at least `width` digits.
#[derive(Debug, Clone, Copy)]
struct BoundRange {
    lo: u64,
    hi: u64,
    width: usize,
}

impl BoundRange {
    /// Number of names in the range; saturates, and the caller caps far below.
    fn len(self) -> usize {
        usize::try_from(self.hi - self.lo).map_or(usize::MAX, |d| d.saturating_add(1))
    }
}

/// One top-level name pattern such as `rack[1-2]-node[01-02]`.
#[derive(Debug)]
struct Token<'a> {
    segments: Vec<Segment<'a>>,
}

impl Token<'_> {
    fn count(&self) -> usize {
        self.segments
            .iter()
            .map(|s| match s {
                Segment::Text(_) => 1,
                Segment::Group(ranges) => ranges
                    .iter()
                    .fold(0usize, |acc, r| acc.saturating_add(r.len())),
            })
            .fold(1usize, usize::saturating_mul)
    }

    /// Appends the names in order, leftmost group varying slowest.
    fn expand_into(&self, names: &mut Vec<String>) {
        let mut prefixes = vec![String::new()];
        for segment in &self.segments {
            match segment {
                Segment::Text(text) => {
                    for p in &mut prefixes {
                        p.push_str(text);
                    }
                }
                Segment::Group(ranges) => {
                    let mut next = Vec::new();
                    for p in &prefixes {
                        for r in ranges {
                            let width = r.width;
                            for n in r.lo..=r.hi {
                                next.push(format!("{p}{n:0width$}"));
                            }
                        }
                    }
                    prefixes = next;
                }
            }
        }
        names.extend(prefixes);
    }
}

fn total_count(expr: &str, tokens: &[Token<'_>]) -> Result<usize, HostlistError> {
    let total = tokens
        .iter()
        .fold(0usize, |acc, t| acc.saturating_add(t.count()));
    if total > MAX_NAMES {
        return Err(HostlistError::TooManyNames {
            expr: expr.to_owned(),
            limit: MAX_NAMES,
        });
    }
    Ok(total)
}

fn is_separator(c: char) -> bool {
    c == ',' || c.is_ascii_whitespace()
}

fn parse(expr: &str) -> Result<Vec<Token<'_>>, HostlistError> {
    let mut tokens = Vec::new();
    let mut segments = Vec::new();
    let mut text_start = 0;
    let mut chars = expr.char_indices();
    while let Some((pos, c)) = chars.next() {
        match c {
            '[' => {
                if text_start < pos {
                    segments.push(Segment::Text(&expr[text_start..pos]));
                }
                let body_start = pos + 1;
                let close = loop {
                    match chars.next() {
                        Some((p, ']')) => break p,
                        Some((p, '[')) => {
                            return Err(HostlistError::UnbalancedBracket {
                                expr: expr.to_owned(),
                                position: p,
                                bracket: '[',
                            });
                        }
                        Some(_) => {}
                        None => {
                            return Err(HostlistError::UnbalancedBracket {
                                expr: expr.to_owned(),
                                position: pos,
                                bracket: '[',
                            });
                        }
                    }
                };
                segments.push(Segment::Group(parse_group(
                    expr,
                    &expr[body_start..close],
                    body_start,
                )?));
                text_start = close + 1;
            }
            ']' => {
                return Err(HostlistError::UnbalancedBracket {
                    expr: expr.to_owned(),
                    position: pos,
                    bracket: ']',
                });
            }
            c if is_separator(c) => {
                if text_start < pos {
                    segments.push(Segment::Text(&expr[text_start..pos]));
                }
                if !segments.is_empty() {
                    tokens.push(Token {
                        segments: std::mem::take(&mut segments),
                    });
                }
                text_start = pos + c.len_utf8();
            }
            _ => {}
        }
    }
    if text_start < expr.len() {
        segments.push(Segment::Text(&expr[text_start..]));
    }
    if !segments.is_empty() {
        tokens.push(Token { segments });
    }
    Ok(tokens)
}

/// Parses the inside of one bracket pair; `offset` is where `body` starts in `expr`.
fn parse_group(expr: &str, body: &str, offset: usize) -> Result<Vec<BoundRange>, HostlistError> {
    let mut ranges = Vec::new();
    let mut item_start = offset;
    for item in body.split(',') {
        if item.is_empty() {
            return Err(HostlistError::EmptyRange {
                expr: expr.to_owned(),
                position: item_start,
            });
        }
        let range = match item.split_once('-') {
            None => {
                let n = parse_bound(expr, item, item_start)?;
                BoundRange {
                    lo: n,
                    hi: n,
                    width: item.len(),
                }
            }
            Some((lo_text, hi_text)) => {
                let lo = parse_bound(expr, lo_text, item_start)?;
                let hi = parse_bound(expr, hi_text, item_start + lo_text.len() + 1)?;
                if lo > hi {
                    return Err(HostlistError::DescendingRange {
                        expr: expr.to_owned(),
                        position: item_start,
                        range: item.to_owned(),
                    });
                }
                BoundRange {
                    lo,
                    hi,
                    width: lo_text.len(),
                }
            }
        };
        ranges.push(range);
        item_start += item.len() + 1;
    }
    Ok(ranges)
}

fn parse_bound(expr: &str, text: &str, position: usize) -> Result<u64, HostlistError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HostlistError::NonNumericBound {
            expr: expr.to_owned(),
            position,
            bound: text.to_owned(),
        });
    }
    text.parse().map_err(|_| HostlistError::BoundTooLarge {
        expr: expr.to_owned(),
        position,
        bound: text.to_owned(),
    })
}

/// Slurm's compressed per-node counts: `[2, 2, 2, 1]` is `2(x3),1`.
pub fn compress_counts(counts: &[u64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let mut j = i + 1;
        while j < counts.len() && counts[j] == counts[i] {
            j += 1;
        }
        let run = j - i;
        parts.push(if run == 1 {
            counts[i].to_string()
        } else {
            format!("{}(x{run})", counts[i])
        });
        i = j;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(expr: &str) -> Vec<String> {
        match expand(expr) {
            Ok(names) => names,
            Err(e) => panic!("expand({expr:?}) failed: {e}"),
        }
    }

    // Expected values below were checked against `scontrol show hostnames` (Slurm 22.05).
    #[test]
    fn expands_simple_lists_and_ranges() {
        assert_eq!(
            names("a,b,gpu[01-03]"),
            ["a", "b", "gpu01", "gpu02", "gpu03"]
        );
        assert_eq!(
            names("gpu[001-004,007,010-011]"),
            [
                "gpu001", "gpu002", "gpu003", "gpu004", "gpu007", "gpu010", "gpu011"
            ]
        );
        assert_eq!(names("login"), ["login"]);
        assert_eq!(names("[1-3]"), ["1", "2", "3"]);
    }

    #[test]
    fn expands_several_groups_as_cartesian_product() {
        assert_eq!(
            names("rack[1-2]-node[01-02]"),
            [
                "rack1-node01",
                "rack1-node02",
                "rack2-node01",
                "rack2-node02"
            ]
        );
        assert_eq!(names("a[1,2]b[3-4]"), ["a1b3", "a1b4", "a2b3", "a2b4"]);
    }

    #[test]
    fn accepts_text_after_the_last_bracket() {
        assert_eq!(names("gpu[1-2].ib"), ["gpu1.ib", "gpu2.ib"]);
    }

    #[test]
    fn width_comes_from_the_lower_bound() {
        assert_eq!(names("gpu[01-3]"), ["gpu01", "gpu02", "gpu03"]);
        assert_eq!(names("gpu[1-03]"), ["gpu1", "gpu2", "gpu3"]);
        assert_eq!(names("gpu[9-11]"), ["gpu9", "gpu10", "gpu11"]);
        assert_eq!(
            names("gpu[001-10]").last().map(String::as_str),
            Some("gpu010")
        );
    }

    #[test]
    fn keeps_duplicates_in_order_and_skips_empty_tokens() {
        assert_eq!(names("a[3,1,3]"), ["a3", "a1", "a3"]);
        assert_eq!(names("a[1-2],a[2-3]"), ["a1", "a2", "a2", "a3"]);
        assert_eq!(names(",a,,b "), ["a", "b"]);
        assert_eq!(names("n1 n2\tn3"), ["n1", "n2", "n3"]);
        assert!(names("").is_empty());
    }

    #[test]
    fn rejects_unbalanced_brackets() {
        for (expr, position, bracket) in [
            ("gpu[1-2", 3, '['),
            ("gpu1]", 4, ']'),
            ("a[[1-2]]", 2, '['),
            ("a[1-2]]", 6, ']'),
        ] {
            assert_eq!(
                expand(expr),
                Err(HostlistError::UnbalancedBracket {
                    expr: expr.to_owned(),
                    position,
                    bracket
                }),
                "{expr}"
            );
        }
    }

    #[test]
    fn rejects_empty_ranges() {
        assert_eq!(
            expand("gpu[]"),
            Err(HostlistError::EmptyRange {
                expr: "gpu[]".to_owned(),
                position: 4
            })
        );
        assert!(matches!(
            expand("a[1,,2]"),
            Err(HostlistError::EmptyRange { position: 4, .. })
        ));
        assert!(matches!(
            expand("a[1,]"),
            Err(HostlistError::EmptyRange { position: 4, .. })
        ));
    }

    #[test]
    fn rejects_descending_ranges() {
        assert_eq!(
            expand("gpu[1,5-3]"),
            Err(HostlistError::DescendingRange {
                expr: "gpu[1,5-3]".to_owned(),
                position: 6,
                range: "5-3".to_owned()
            })
        );
    }

    #[test]
    fn rejects_bounds_that_are_not_plain_numbers() {
        for (expr, position, bound) in [
            ("gpu[a-b]", 4, "a"),
            ("a[2-]", 4, ""),
            ("a[-2]", 2, ""),
            ("a[1-2-3]", 4, "2-3"),
            ("a[ 1-2]", 2, " 1"),
            ("a[+1-2]", 2, "+1"),
            ("a[0x1-2]", 2, "0x1"),
        ] {
            assert_eq!(
                expand(expr),
                Err(HostlistError::NonNumericBound {
                    expr: expr.to_owned(),
                    position,
                    bound: bound.to_owned()
                }),
                "{expr}"
            );
        }
        assert!(matches!(
            expand("a[18446744073709551616]"),
            Err(HostlistError::BoundTooLarge { position: 2, .. })
        ));
        assert_eq!(names("a[18446744073709551615]"), ["a18446744073709551615"]);
    }

    #[test]
    fn caps_the_expansion_size() {
        assert_eq!(count("n[1-1048576]"), Ok(MAX_NAMES));
        assert_eq!(
            expand("n[0-1048576]"),
            Err(HostlistError::TooManyNames {
                expr: "n[0-1048576]".to_owned(),
                limit: MAX_NAMES
            })
        );
        // Each token is small; the product and the sum are not.
        assert!(matches!(
            count("a[0-999999999].b[0-9]"),
            Err(HostlistError::TooManyNames { .. })
        ));
        assert!(matches!(
            count("a[0-18446744073709551615][0-18446744073709551615]"),
            Err(HostlistError::TooManyNames { .. })
        ));
        assert!(matches!(
            count("a[1-600000],b[1-600000]"),
            Err(HostlistError::TooManyNames { .. })
        ));
    }

    #[test]
    fn error_messages_say_what_and_where() {
        let err = expand("gpu[5-3]").expect_err("descending range must fail");
        assert_eq!(
            err.to_string(),
            "invalid hostlist `gpu[5-3]`: descending range `5-3` at byte 4 \
             (the first bound must not exceed the second)"
        );
    }

    // Expected values below were checked against `scontrol show hostlist` (Slurm 22.05).
    #[test]
    fn compresses_like_scontrol_show_hostlist() {
        for (input, expected) in [
            (
                "gpu001,gpu002,gpu003,gpu005,login1",
                "gpu[001-003,005],login1",
            ),
            ("tux2,tux1,tux2", "tux[2,1-2]"),
            ("a1,b1,a2", "a1,b1,a2"),
            ("a1,a3,b1,a4", "a[1,3],b1,a4"),
            ("n1,n01,n001", "n[1,01,001]"),
            ("n8,n9,n10,n11", "n[8-11]"),
            ("n99,n100", "n[99-100]"),
            ("n09,n10", "n[09-10]"),
            ("n09,n010", "n[09,010]"),
            ("n009,n10", "n[009,10]"),
            ("a,b,a", "a,b,a"),
            ("a1b,a2b", "a1b,a2b"),
            ("x,x1,x2", "x,x[1-2]"),
            ("1,2,3", "[1-3]"),
            ("a1,a1", "a[1,1]"),
            ("a1,a2,a3,a2,a3", "a[1-3,2-3]"),
            ("rack01-node1,rack1-node2", "rack01-node1,rack1-node2"),
        ] {
            let list: Vec<&str> = input.split(',').collect();
            assert_eq!(compress(&list), expected, "{input}");
        }
        assert_eq!(compress::<&str>(&[]), "");
        assert_eq!(compress(&["gpu7"]), "gpu7");
    }

    #[test]
    fn compress_keeps_huge_numbers_as_plain_names() {
        let big = "n99999999999999999999999";
        assert_eq!(compress(&[big, "n1"]), format!("{big},n1"));
        // u64::MAX still fits, so it is a number and the pair shares brackets.
        let max = format!("n{}", u64::MAX);
        let compressed = compress(&[max.as_str(), "n0"]);
        assert_eq!(compressed, format!("n[{},0]", u64::MAX));
        assert_eq!(expand(&compressed), Ok(vec![max, "n0".to_owned()]));
    }

    fn node_name() -> impl Strategy<Value = String> {
        let prefix = prop::sample::select(vec!["gpu", "node", "rack1-n", "a0b", "", "x-"]);
        prop_oneof![
            4 => (prefix, 0u64..40, 1usize..4).prop_map(|(p, n, w)| format!("{p}{n:0w$}")),
            1 => prop::sample::select(vec!["login", "head-a", "gpu"]).prop_map(String::from),
        ]
    }

    proptest! {
        #[test]
        fn expand_inverts_compress_in_any_order(list in prop::collection::vec(node_name(), 0..40)) {
            let compressed = compress(&list);
            prop_assert_eq!(expand(&compressed), Ok(list), "compressed: {}", compressed);
        }

        #[test]
        fn expand_inverts_compress_for_sorted_unique_node_sets(
            prefix in prop::sample::select(vec!["gpu", "node", "rack2-node"]),
            width in 1usize..5,
            numbers in prop::collection::btree_set(0u64..2000, 1..200),
        ) {
            let list: Vec<String> = numbers.iter().map(|n| format!("{prefix}{n:0width$}")).collect();
            let compressed = compress(&list);
            prop_assert_eq!(expand(&compressed), Ok(list.clone()));
            // One prefix, so one bracket group at most, with one item per run.
            let runs = numbers.iter().zip(numbers.iter().skip(1)).filter(|(a, b)| **a + 1 != **b).count() + 1;
            prop_assert_eq!(compressed.matches('[').count(), usize::from(list.len() > 1));
            prop_assert_eq!(compressed.matches(',').count(), runs - 1);
        }

        #[test]
        fn count_agrees_with_expand(expr in "[a-c0-9,\\[\\]-]{0,24}") {
            match expand(&expr) {
                Ok(names) => prop_assert_eq!(count(&expr), Ok(names.len())),
                Err(e) => prop_assert_eq!(count(&expr), Err(e)),
            }
        }
    }
}
