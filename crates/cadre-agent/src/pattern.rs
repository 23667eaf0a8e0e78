//! Slurm's output file name patterns (`sbatch -o/-e`, "FILENAME PATTERN" in `sbatch(1)`),
//! expanded the way `slurmstepd` does it (`fname_create`).
//!
//! Supported: `%%`, `%A` (array master job id, the job id for a job outside an array),
//! `%a` (array index; 4294967294, Slurm's NO_VAL, outside an array, as Slurm prints it),
//! `%b` (array index mod 10), `%j` and `%J` (job id; there are no steps here), `%N`
//! (node name), `%n` (node index in the job), `%t` (task rank), `%u` (user name), `%x`
//! (job name). A width between `%` and the letter zero-pads numbers, capped at 10.
//! Unknown letters are left as they are, as Slurm leaves them. A pattern with a backslash
//! anywhere is not expanded at all: its backslashes are removed and the rest is taken
//! literally (Slurm's `is_path_escaped`; `\\` in the man page is what a user types in a
//! shell to get one backslash through). A relative result is relative to the working
//! directory of the task.

use std::path::{Path, PathBuf};

/// Slurm's NO_VAL, printed by `%a` for jobs outside an array.
const NO_VAL: u32 = 0xffff_fffe;
/// Slurm caps pattern widths at 10.
const MAX_WIDTH: usize = 10;

/// What the pattern letters stand for, for one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatternValues<'a> {
    pub job_id: u64,
    /// Array master job id and index, for array jobs.
    pub array: Option<(u64, u32)>,
    pub job_name: &'a str,
    pub user: &'a str,
    pub node_name: &'a str,
    /// Index of this node in the job's node list.
    pub node_index: u32,
    /// Global task rank (`SLURM_PROCID`).
    pub task: u32,
}

/// The default output file: `slurm-%j.out`, or `slurm-%A_%a.out` for an array job.
pub fn default_output_pattern(array: bool) -> &'static str {
    if array {
        "slurm-%A_%a.out"
    } else {
        "slurm-%j.out"
    }
}

/// Expands `pattern` for one task, relative to `work_dir` when not absolute.
pub fn expand_output_path(pattern: &str, values: &PatternValues<'_>, work_dir: &Path) -> PathBuf {
    let name = expand_pattern(pattern, values);
    let path = PathBuf::from(name);
    if path.is_absolute() {
        path
    } else {
        work_dir.join(path)
    }
}

/// Expands `pattern` for one task (see the module doc for the letters).
pub fn expand_pattern(pattern: &str, v: &PatternValues<'_>) -> String {
    if pattern.contains('\\') {
        return pattern.chars().filter(|&c| c != '\\').collect();
    }
    let mut out = String::with_capacity(pattern.len() + 16);
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '%' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        let mut width = 0usize;
        let digits_start = i;
        while i < chars.len() && chars[i].is_ascii_digit() {
            width = (width * 10 + (chars[i] as usize - '0' as usize)).min(1_000);
            i += 1;
        }
        let width = width.min(MAX_WIDTH);
        let Some(&letter) = chars.get(i) else {
            // A trailing `%` or `%4`: kept as written.
            out.extend(&chars[start..]);
            break;
        };
        let num = |n: u64| format!("{n:0width$}");
        let text = match letter {
            '%' if i == digits_start => Some("%".to_string()),
            'A' => Some(num(v.array.map_or(v.job_id, |(a, _)| a))),
            'a' => Some(num(u64::from(v.array.map_or(NO_VAL, |(_, i)| i)))),
            'b' => Some(num(u64::from(v.array.map_or(NO_VAL, |(_, i)| i) % 10))),
            'j' | 'J' => Some(num(v.job_id)),
            'n' => Some(num(u64::from(v.node_index))),
            't' => Some(num(u64::from(v.task))),
            'N' => Some(v.node_name.to_string()),
            'u' => Some(v.user.to_string()),
            'x' => Some(v.job_name.to_string()),
            _ => None,
        };
        match text {
            Some(t) => {
                out.push_str(&t);
                i += 1;
            }
            None => {
                // Unknown letter: keep `%`, the width and the letter as written.
                out.extend(&chars[start..=i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> PatternValues<'static> {
        PatternValues {
            job_id: 128,
            array: None,
            job_name: "train",
            user: "alice",
            node_name: "gpu007",
            node_index: 2,
            task: 0,
        }
    }

    #[test]
    fn letters_expand_as_slurm_does() {
        let v = values();
        assert_eq!(expand_pattern("slurm-%j.out", &v), "slurm-128.out");
        assert_eq!(
            expand_pattern("%x-%u-%N-%n-%t.log", &v),
            "train-alice-gpu007-2-0.log"
        );
        assert_eq!(expand_pattern("100%%-%j", &v), "100%-128");
        // The man page's examples.
        assert_eq!(expand_pattern("job%4j.out", &v), "job0128.out");
        assert_eq!(expand_pattern("job%2j-%2t.out", &v), "job128-00.out");
        // Widths are capped at 10.
        assert_eq!(expand_pattern("%20j", &v), "0000000128");
        // Outside an array: %A is the job id, %a is NO_VAL.
        assert_eq!(expand_pattern("%A_%a", &v), "128_4294967294");
        // Unknown letters and a trailing % stay.
        assert_eq!(expand_pattern("a%zb%3q%", &v), "a%zb%3q%");
    }

    #[test]
    fn array_jobs_use_master_id_and_index() {
        let v = PatternValues {
            array: Some((100, 17)),
            ..values()
        };
        assert_eq!(expand_pattern("slurm-%A_%a.out", &v), "slurm-100_17.out");
        assert_eq!(expand_pattern("%j-%b-%3a", &v), "128-7-017");
        assert_eq!(default_output_pattern(true), "slurm-%A_%a.out");
        assert_eq!(default_output_pattern(false), "slurm-%j.out");
    }

    #[test]
    fn a_backslash_disables_substitution() {
        let v = values();
        assert_eq!(expand_pattern("out\\%j.txt", &v), "out%j.txt");
        assert_eq!(expand_pattern("a\\\\%x", &v), "a%x");
    }

    #[test]
    fn relative_paths_are_under_the_working_directory() {
        let v = values();
        assert_eq!(
            expand_output_path("o-%j", &v, Path::new("/w")),
            PathBuf::from("/w/o-128")
        );
        assert_eq!(
            expand_output_path("/abs/o-%j", &v, Path::new("/w")),
            PathBuf::from("/abs/o-128")
        );
    }
}
