//! Reading the pairs of one line: duplicates refused, every key checked against its table
//! ([`crate::keys`]), and values parsed as Slurm writes them (counts with `K`/`M`/`G`
//! suffixes, `YES`/`NO`, time limits, comma lists).

use crate::Note;
use crate::error::{Item, Problem, SlurmConfError};
use crate::keys::{self, Rule};
use crate::syntax::Pair;
use cadre_core::time::Dur;
use cadre_core::time::parse_slurm_duration;
use std::collections::BTreeMap;

/// The pairs of a line by lowercase key.
pub(crate) type Fields = BTreeMap<String, Pair>;

/// The pairs of a line by lowercase key; a key given twice is an error.
pub(crate) fn fields(pairs: &[Pair], item: &Item) -> Result<Fields, SlurmConfError> {
    let mut out = Fields::new();
    for p in pairs {
        let key = p.key.to_ascii_lowercase();
        if out.contains_key(&key) {
            return Err(p.at.error(Problem::DuplicateKey {
                item: item.clone(),
                key: p.key.clone(),
            }));
        }
        out.insert(key, p.clone());
    }
    Ok(out)
}

/// Checks every pair against `table`: unknown keys and refused values are errors, keys
/// that cadre sets elsewhere get a note.
pub(crate) fn check_keys(
    table: keys::Table,
    pairs: &[Pair],
    item: &Item,
    notes: &mut Vec<Note>,
) -> Result<(), SlurmConfError> {
    for p in pairs {
        match keys::rule(table, &p.key) {
            None => {
                return Err(p.at.error(Problem::UnknownKey {
                    item: item.clone(),
                    key: p.key.clone(),
                }));
            }
            Some(Rule::Used | Rule::Ignored) => {}
            Some(Rule::Elsewhere(hint)) => notes.push(Note {
                at: p.at.location(),
                message: format!("{item}`{}` is not read: {hint}", p.key),
            }),
            Some(Rule::Refused { why, harmless }) => {
                if !keys::is_harmless(harmless, &p.value) {
                    return Err(p.at.error(Problem::Refused {
                        item: item.clone(),
                        key: p.key.clone(),
                        why,
                    }));
                }
            }
        }
    }
    Ok(())
}

fn bad(p: &Pair, item: &Item, expected: &'static str) -> SlurmConfError {
    p.at.error(Problem::BadValue {
        item: item.clone(),
        key: p.key.clone(),
        value: p.value.clone(),
        expected,
    })
}

/// A whole number.
fn whole(p: &Pair, item: &Item) -> Result<u64, SlurmConfError> {
    let v = p.value.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(p, item, "expected a whole number"));
    }
    v.parse().map_err(|_| bad(p, item, "too large"))
}

/// A whole number of at least 1 (memory sizes).
pub(crate) fn positive(p: &Pair, item: &Item) -> Result<u64, SlurmConfError> {
    match whole(p, item)? {
        0 => Err(bad(p, item, "must be at least 1")),
        n => Ok(n),
    }
}

/// A positive whole number that fits a `u32` (CPU, socket, core and thread counts).
pub(crate) fn count_u32(p: &Pair, item: &Item) -> Result<u32, SlurmConfError> {
    u32::try_from(positive(p, item)?).map_err(|_| bad(p, item, "too large"))
}

/// Slurm's upper bound of `PriorityTier` and `PriorityJobFactor`.
const MAX_PRIORITY: u64 = 65_533;

/// A partition's `PriorityTier` or `PriorityJobFactor`: 0 to 65533.
pub(crate) fn priority(p: &Pair, item: &Item) -> Result<u32, SlurmConfError> {
    match whole(p, item)? {
        n if n > MAX_PRIORITY => Err(bad(p, item, "must not exceed 65533")),
        n => Ok(n as u32),
    }
}

/// A count with an optional binary suffix (`K`, `M`, `G`, `T`, `P`: times 1024 and its
/// powers), as GRES counts are written.
pub(crate) fn suffixed_count(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_lowercase() {
                'k' => 10,
                'm' => 20,
                'g' => 30,
                't' => 40,
                'p' => 50,
                _ => return None,
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// `YES` or `NO` (any case).
pub(crate) fn yes_no(p: &Pair, item: &Item) -> Result<bool, SlurmConfError> {
    match p.value.trim().to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(bad(p, item, "expected YES or NO")),
    }
}

/// A time limit in Slurm's syntax; `None` for no limit (`UNLIMITED`, `INFINITE`, `-1`).
/// Seconds round up to whole minutes, as Slurm keeps partition limits in minutes.
pub(crate) fn time_limit(p: &Pair, item: &Item) -> Result<Option<Dur>, SlurmConfError> {
    match parse_slurm_duration(p.value.trim()) {
        Ok(None) => Ok(None),
        Ok(Some(Dur(0))) => Err(p.at.error(Problem::ZeroTime {
            item: item.clone(),
            key: p.key.clone(),
        })),
        Ok(Some(d)) => Ok(Some(Dur(d.0.div_ceil(60).saturating_mul(60)))),
        Err(error) => Err(p.at.error(Problem::BadTime {
            item: item.clone(),
            key: p.key.clone(),
            error,
        })),
    }
}

/// A comma-separated list, entries trimmed; empty entries are dropped.
pub(crate) fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// A node feature as cadre's cluster description allows it.
pub(crate) fn valid_feature(f: &str) -> bool {
    !f.is_empty()
        && f.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
}

/// A name of a partition, switch or block: not empty, no `,`, brackets or whitespace.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains(|c: char| c == ',' || c == '[' || c == ']' || c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixed_counts() {
        assert_eq!(suffixed_count("8"), Some(8));
        assert_eq!(suffixed_count("2K"), Some(2048));
        assert_eq!(suffixed_count("1g"), Some(1 << 30));
        assert_eq!(suffixed_count("1P"), Some(1 << 50));
        assert_eq!(suffixed_count("x"), None);
        assert_eq!(suffixed_count("1X"), None);
        assert_eq!(suffixed_count(""), None);
        assert_eq!(suffixed_count("-1"), None);
        assert_eq!(suffixed_count("99999999999999P"), None);
    }
}
