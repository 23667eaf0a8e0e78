//! Batch scripts: the checks `sbatch` makes on them and their `#SBATCH` directives.
//!
//! As Slurm reads a script (measured against 22.05): it must not be empty, must start with
//! `#!`, and must not contain DOS line breaks. Directives are lines that begin with
//! `#SBATCH` in the first column (`#SBATCH-N 2` counts, `  #SBATCH` and `# SBATCH` do not);
//! blank lines and other comments are skipped; the first other line ends the directives.
//! A directive's text splits into words at blanks; single or double quotes group words
//! and are removed; an unquoted `#` ends the directive (`-J a#b` names the job `a`).

use crate::error::{ScriptProblem, SlurmError};

/// The checks `sbatch` makes before reading a script's directives.
pub fn check_script(text: &str) -> Result<(), SlurmError> {
    if text.is_empty() {
        return Err(SlurmError::Script(ScriptProblem::Empty));
    }
    if !text.starts_with("#!") {
        return Err(SlurmError::Script(ScriptProblem::NoShebang));
    }
    if text.contains("\r\n") {
        return Err(SlurmError::Script(ScriptProblem::DosLineBreaks));
    }
    if text.contains('\0') {
        return Err(SlurmError::Script(ScriptProblem::NulByte));
    }
    Ok(())
}

/// The words of every `#SBATCH` directive, in order, one list per line.
pub fn directives(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        if let Some(rest) = line.strip_prefix("#SBATCH") {
            out.push(split_words(rest));
            continue;
        }
        let t = line.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        break;
    }
    out
}

/// Splits a directive's text into words.
fn split_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None => match c {
                '"' | '\'' => {
                    quote = Some(c);
                    in_word = true;
                }
                '#' => break,
                c if c.is_whitespace() => {
                    if in_word {
                        words.push(std::mem::take(&mut cur));
                        in_word = false;
                    }
                }
                c => {
                    cur.push(c);
                    in_word = true;
                }
            },
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> Vec<Vec<String>> {
        directives(text)
    }

    fn w(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn directives_end_at_the_first_command() {
        let s = "#!/bin/bash\n\n# a comment\n#SBATCH -N 2\n\n#SBATCH -t 5\ntrue\n#SBATCH -t 9\n";
        assert_eq!(d(s), vec![w(&["-N", "2"]), w(&["-t", "5"])]);
    }

    #[test]
    fn only_sbatch_in_the_first_column_counts() {
        let s = "#!/bin/bash\n  #SBATCH -N 2\n#sbatch -N 3\n# SBATCH -N 4\n#SBATCH-N 5\n#SBATCH\t-t 5\ntrue\n";
        assert_eq!(d(s), vec![w(&["-N", "5"]), w(&["-t", "5"])]);
    }

    #[test]
    fn words_quotes_and_comments() {
        let s = "#!/bin/bash\n#SBATCH -J \"a # b\" --comment='x y' -t 7 # trailing\n#SBATCH -J a#b\n#SBATCH --comment=\"a b c\"\n";
        assert_eq!(
            d(s),
            vec![
                w(&["-J", "a # b", "--comment=x y", "-t", "7"]),
                w(&["-J", "a"]),
                w(&["--comment=a b c"])
            ]
        );
        assert_eq!(d("#!/bin/sh\n#SBATCH\n"), vec![Vec::<String>::new()]);
    }

    #[test]
    fn scripts_are_checked_as_slurm_does() {
        assert_eq!(
            check_script("").unwrap_err(),
            SlurmError::Script(ScriptProblem::Empty)
        );
        assert_eq!(
            check_script("echo hi\n").unwrap_err(),
            SlurmError::Script(ScriptProblem::NoShebang)
        );
        assert_eq!(
            check_script("#!/bin/sh\r\ntrue\r\n").unwrap_err(),
            SlurmError::Script(ScriptProblem::DosLineBreaks)
        );
        assert_eq!(check_script("#!/bin/sh\ntrue\n"), Ok(()));
    }
}
