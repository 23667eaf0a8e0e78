//! Job arrays: `--array=0-15`, `0,6,16-32`, `0-15:4`, with `%N` for the most tasks running
//! at once, and the index lists `scontrol` shows (`0,3,6,9%2`).
//!
//! Indices run from 0 to `max_array_size - 1` (Slurm's `MaxArraySize`, 1001 by default).
//! Slurm refuses a bad array in the controller, so the errors here are submission failures.
//! The scheduler enforces `%N`: the array's other tasks pend with `JobArrayTaskLimit`.

use crate::error::SlurmError;

/// Slurm's default `MaxArraySize`.
pub const DEFAULT_MAX_ARRAY_SIZE: u32 = 1001;

/// A parsed `--array` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArraySpec {
    /// Indices in ascending order, without duplicates.
    pub indices: Vec<u32>,
    /// `%N`: at most this many tasks running at once.
    pub max_running: Option<u32>,
}

fn invalid() -> SlurmError {
    SlurmError::submission("Invalid job array specification")
}

/// Parses an `--array` value.
pub fn parse_array(value: &str, max_array_size: u32) -> Result<ArraySpec, SlurmError> {
    let (list, limit) = match value.split_once('%') {
        Some((l, n)) => (l, Some(n.parse::<u32>().map_err(|_| invalid())?)),
        None => (value, None),
    };
    let num = |s: &str| -> Result<u32, SlurmError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        s.parse().map_err(|_| invalid())
    };
    let mut indices = Vec::new();
    for item in list.split(',') {
        let (range, step) = match item.split_once(':') {
            Some((r, s)) => (r, num(s)?),
            None => (item, 1),
        };
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(range)?;
                (n, n)
            }
        };
        if lo > hi || step == 0 || hi >= max_array_size {
            return Err(invalid());
        }
        indices.extend((lo..=hi).step_by(step as usize));
    }
    indices.sort_unstable();
    indices.dedup();
    Ok(ArraySpec {
        indices,
        max_running: limit,
    })
}

/// Indices as `scontrol` lists them: runs of consecutive indices as `a-b`, the rest one by
/// one, comma-separated (`1,3,5-7`), and `%N` for a limit.
pub fn format_indices(indices: &[u32], max_running: Option<u32>) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let start = indices[i];
        let mut end = start;
        while i + 1 < indices.len() && indices[i + 1] == end + 1 {
            i += 1;
            end = indices[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    let mut text = out.join(",");
    if let Some(n) = max_running {
        text.push_str(&format!("%{n}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(v: &str) -> Result<ArraySpec, SlurmError> {
        parse_array(v, DEFAULT_MAX_ARRAY_SIZE)
    }

    #[test]
    fn array_specs_parse() {
        assert_eq!(a("1-3").unwrap().indices, vec![1, 2, 3]);
        assert_eq!(a("0-9:3").unwrap().indices, vec![0, 3, 6, 9]);
        assert_eq!(a("1,3,5-7").unwrap().indices, vec![1, 3, 5, 6, 7]);
        assert_eq!(a("4").unwrap().indices, vec![4]);
        let s = a("0-15%4").unwrap();
        assert_eq!((s.indices.len(), s.max_running), (16, Some(4)));
        assert_eq!(a("3,1,3").unwrap().indices, vec![1, 3]);
        assert_eq!(a("0-1000").unwrap().indices.len(), 1001);
        for bad in [
            "x",
            "5-1",
            "0-2000",
            "1000-1001",
            "1-3:0",
            "",
            "1,,2",
            "-1",
            "1-3%x",
        ] {
            assert_eq!(
                a(bad).unwrap_err().to_string(),
                "Batch job submission failed: Invalid job array specification",
                "{bad}"
            );
        }
    }

    #[test]
    fn index_lists_print_as_scontrol_does() {
        assert_eq!(format_indices(&[1, 2, 3], None), "1-3");
        assert_eq!(format_indices(&[0, 3, 6, 9], Some(2)), "0,3,6,9%2");
        assert_eq!(format_indices(&[1, 3, 5, 6, 7], None), "1,3,5-7");
        assert_eq!(format_indices(&[4], None), "4");
    }
}
