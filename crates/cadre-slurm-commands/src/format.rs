//! The output engines shared by Slurm's read-side commands, and the ways Slurm writes
//! times, durations and job ids (job states: [`cadre_slurm::state`]).
//!
//! Two field engines, re-derived from the man pages and from running Slurm 22.05:
//! - `-o/--format`: `%[.][size]type`, where `.` right-justifies, `size` is both the
//!   minimum and the maximum width (longer values are cut), and anything between fields is
//!   printed as it is. Without a size, a field is as wide as its value. `%#X` (used by
//!   sinfo's built-in formats) is as wide as the widest value, at least nine columns.
//! - `-O/--Format`: comma-separated `name[:[.][size][suffix]]`, case-insensitive, 20 columns
//!   wide unless told, with nothing between fields but each field's suffix.
//!
//! Headers go through the same widths as values. Unknown fields are reported by the
//! caller, which decides the wording (it differs between commands, as in Slurm).
//!
//! Not here: which fields a command has and what they show (each command's module).

use cadre_core::job::ArrayIndex;
use cadre_slurm::time::format_duration_short;

/// One field of an output layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Column<K> {
    pub kind: K,
    pub width: Option<usize>,
    pub right: bool,
    /// `%#X`: as wide as the widest value (resolved by [`Layout::fit`]).
    pub auto: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Piece<K> {
    Text(String),
    Col(Column<K>),
}

/// A parsed format: fields and the text between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout<K> {
    pub pieces: Vec<Piece<K>>,
}

/// The smallest width of a `%#X` field.
const AUTO_MIN_WIDTH: usize = 9;

impl<K: Copy> Layout<K> {
    /// The fields, in order.
    pub(crate) fn kinds(&self) -> impl Iterator<Item = K> + '_ {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Col(c) => Some(c.kind),
            Piece::Text(_) => None,
        })
    }

    /// Sets the width of `%#X` fields from the values they will show.
    pub(crate) fn fit(&mut self, mut value: impl FnMut(K, usize) -> String, rows: usize) {
        for p in &mut self.pieces {
            if let Piece::Col(c) = p
                && c.auto
            {
                let widest = (0..rows)
                    .map(|r| value(c.kind, r).chars().count())
                    .max()
                    .unwrap_or(0);
                c.width = Some(widest.max(AUTO_MIN_WIDTH));
            }
        }
    }

    /// One line: each field's value in its column.
    pub(crate) fn render(&self, mut value: impl FnMut(K) -> String) -> String {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Col(c) => out.push_str(&cell(&value(c.kind), c.width, c.right)),
            }
        }
        out
    }
}

/// A value in a column: cut to `width`, padded on the left (`right`) or the right.
pub(crate) fn cell(value: &str, width: Option<usize>, right: bool) -> String {
    let Some(w) = width else {
        return value.to_owned();
    };
    let cut: String = value.chars().take(w).collect();
    let pad = w - cut.chars().count();
    if right {
        format!("{}{cut}", " ".repeat(pad))
    } else {
        format!("{cut}{}", " ".repeat(pad))
    }
}

/// How the accounting commands (sacct, sshare) print: a table, or delimited values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TableStyle {
    /// Each value in its column followed by a space, under a header and a line of dashes;
    /// too long a value is cut and ends in `+`.
    Table,
    /// `-p` (`trailing`: a delimiter after the last value too) or `-P`: whole values.
    Parsable { delimiter: String, trailing: bool },
}

/// A column of an accounting table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct TableColumn {
    pub name: &'static str,
    pub width: usize,
    pub right: bool,
}

/// A value in a fixed-width column: cut with a `+` when too long.
fn fixed(value: &str, width: usize, right: bool) -> String {
    let v = if value.chars().count() > width && width > 0 {
        let mut cut: String = value.chars().take(width - 1).collect();
        cut.push('+');
        cut
    } else {
        value.to_owned()
    };
    cell(&v, Some(width), right)
}

/// The lines of an accounting table.
pub(crate) fn table(
    cols: &[TableColumn],
    rows: &[Vec<String>],
    style: &TableStyle,
    header: bool,
) -> Vec<String> {
    let mut out = Vec::with_capacity(rows.len() + 2);
    match style {
        TableStyle::Table => {
            if header {
                out.push(
                    cols.iter()
                        .map(|c| format!("{} ", cell(c.name, Some(c.width), c.right)))
                        .collect(),
                );
                out.push(
                    cols.iter()
                        .map(|c| format!("{} ", "-".repeat(c.width)))
                        .collect(),
                );
            }
            for r in rows {
                out.push(
                    cols.iter()
                        .zip(r)
                        .map(|(c, v)| format!("{} ", fixed(v, c.width, c.right)))
                        .collect(),
                );
            }
        }
        TableStyle::Parsable {
            delimiter,
            trailing,
        } => {
            let join = |vals: Vec<&str>| {
                let mut s = vals.join(delimiter);
                if *trailing {
                    s.push_str(delimiter);
                }
                s
            };
            if header {
                out.push(join(cols.iter().map(|c| c.name).collect()));
            }
            for r in rows {
                out.push(join(r.iter().map(String::as_str).collect()));
            }
        }
    }
    out
}

/// Parses a `-o` format. `field` maps a type letter to a field; letters it does not know
/// are returned (and printed as they were written, as Slurm does).
pub(crate) fn parse_percent<K>(
    fmt: &str,
    field: impl Fn(char) -> Option<K>,
) -> (Layout<K>, Vec<char>) {
    let mut pieces = Vec::new();
    let mut unknown = Vec::new();
    let mut text = String::new();
    let chars: Vec<char> = fmt.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '%' {
            text.push(chars[i]);
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        if chars.get(i) == Some(&'%') {
            text.push('%');
            i += 1;
            continue;
        }
        let mut right = false;
        let mut auto = false;
        loop {
            match chars.get(i) {
                Some('.') => right = true,
                Some('#') => auto = true,
                _ => break,
            }
            i += 1;
        }
        let mut digits = String::new();
        while let Some(d) = chars.get(i).filter(|c| c.is_ascii_digit()) {
            digits.push(*d);
            i += 1;
        }
        let Some(&letter) = chars.get(i) else {
            text.extend(&chars[start..]);
            break;
        };
        i += 1;
        match field(letter) {
            Some(kind) => {
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Col(Column {
                    kind,
                    width: digits.parse().ok(),
                    right,
                    auto,
                }));
            }
            None => {
                unknown.push(letter);
                text.extend(&chars[start..i]);
            }
        }
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    (Layout { pieces }, unknown)
}

/// Parses a `-O` format. Unknown names are returned and left out.
pub(crate) fn parse_names<K>(
    fmt: &str,
    field: impl Fn(&str) -> Option<K>,
) -> (Layout<K>, Vec<String>) {
    let mut pieces = Vec::new();
    let mut unknown = Vec::new();
    for item in fmt.split(',').filter(|s| !s.is_empty()) {
        let (name, spec) = item.split_once(':').unwrap_or((item, ""));
        let Some(kind) = field(&name.to_ascii_lowercase()) else {
            unknown.push(name.to_owned());
            continue;
        };
        let right = spec.starts_with('.');
        let spec = spec.trim_start_matches('.');
        let digits: String = spec.chars().take_while(char::is_ascii_digit).collect();
        let suffix = &spec[digits.len()..];
        pieces.push(Piece::Col(Column {
            kind,
            width: Some(digits.parse().unwrap_or(20)),
            right,
            auto: false,
        }));
        if !suffix.is_empty() {
            pieces.push(Piece::Text(suffix.to_owned()));
        }
    }
    (Layout { pieces }, unknown)
}

/// A job's time limit as squeue writes it (`UNLIMITED` for none); durations themselves are
/// written by [`format_duration_short`] and [`cadre_slurm::time::format_duration`].
pub(crate) fn time_limit(secs: u64) -> String {
    if secs == 0 {
        "UNLIMITED".into()
    } else {
        format_duration_short(secs)
    }
}

/// The fields of a local time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct LocalTime {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub weekday: u32,
}

fn tm_of(secs: u64) -> Option<libc::tm> {
    let t = libc::time_t::try_from(secs).ok()?;
    // SAFETY: `tm` is plain old data for which all-zero bytes are a valid value;
    // `localtime_r` only reads `t` and writes `tm`, both live locals, and is thread-safe.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    ok.then_some(tm)
}

/// `secs` since the epoch in the local time zone.
pub(crate) fn local_time(secs: u64) -> Option<LocalTime> {
    let tm = tm_of(secs)?;
    Some(LocalTime {
        year: tm.tm_year + 1900,
        month: (tm.tm_mon + 1) as u32,
        day: tm.tm_mday as u32,
        hour: tm.tm_hour as u32,
        minute: tm.tm_min as u32,
        second: tm.tm_sec as u32,
        weekday: tm.tm_wday as u32,
    })
}

/// Seconds since the epoch of a local date and time (`None` if it does not exist).
pub(crate) fn from_local(
    year: i32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
) -> Option<u64> {
    // SAFETY: as in `tm_of`; `mktime` reads and normalises the local `tm`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = year - 1900;
    tm.tm_mon = month as i32 - 1;
    tm.tm_mday = day as i32;
    tm.tm_hour = hour as i32;
    tm.tm_min = minute as i32;
    tm.tm_sec = second as i32;
    tm.tm_isdst = -1;
    let t = unsafe { libc::mktime(&mut tm) };
    u64::try_from(t).ok()
}

/// A time stamp as Slurm writes it: `YYYY-MM-DDTHH:MM:SS` in local time, or
/// `$SLURM_TIME_FORMAT` when it is a strftime format.
pub(crate) fn timestamp(secs: u64) -> String {
    if let Ok(f) = std::env::var("SLURM_TIME_FORMAT")
        && f.contains('%')
        && let Some(s) = strftime(&f, secs)
    {
        return s;
    }
    match local_time(secs) {
        Some(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            t.year, t.month, t.day, t.hour, t.minute, t.second
        ),
        None => "Unknown".into(),
    }
}

fn strftime(fmt: &str, secs: u64) -> Option<String> {
    let tm = tm_of(secs)?;
    let cfmt = std::ffi::CString::new(fmt).ok()?;
    let mut buf = vec![0u8; 256];
    // SAFETY: `buf` is writable for its whole length, which is what we pass; `cfmt` is a
    // NUL-terminated string and `tm` a valid broken-down time, both alive for the call.
    let n = unsafe {
        libc::strftime(
            buf.as_mut_ptr().cast(),
            buf.len(),
            cfmt.as_ptr(),
            &tm as *const libc::tm,
        )
    };
    buf.truncate(n);
    String::from_utf8(buf).ok()
}

/// The date line that `-l` prints above the header (`Sat Nov 21 13:57:54 2026`).
pub(crate) fn ctime(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    match local_time(secs) {
        Some(t) => format!(
            "{} {} {:2} {:02}:{:02}:{:02} {}",
            DAYS[t.weekday as usize % 7],
            MONTHS[(t.month as usize + 11) % 12],
            t.day,
            t.hour,
            t.minute,
            t.second,
            t.year
        ),
        None => String::new(),
    }
}

/// A job's id as Slurm shows it: `ARRAYID_INDEX` for a task of an array.
pub(crate) fn job_id(id: u64, array: Option<ArrayIndex>) -> String {
    match array {
        Some(a) => format!("{}_{}", a.array_job.0, a.index),
        None => id.to_string(),
    }
}

/// Sorted indices as ranges: `0-3,5,7-8`.
pub(crate) fn index_ranges(sorted: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

/// GPUs as a GRES string: `gpu:N`, or `gpu:emulated:N` for GPUs that are declared rather
/// than discovered (the GRES type is how Slurm names kinds of GPUs, so tools that parse
/// `gpu[:type]:count` read it, and emulated GPUs are never taken for real ones).
pub(crate) fn gpu_gres(count: u64, emulated: bool) -> String {
    if emulated {
        format!("gpu:emulated:{count}")
    } else {
        format!("gpu:{count}")
    }
}

/// Memory in MiB as Slurm writes it, in the largest unit that divides it (`1536M`, `2G`,
/// `1T`).
pub(crate) fn mem_mib(mib: u64) -> String {
    if mib > 0 && mib % (1024 * 1024) == 0 {
        format!("{}T", mib / (1024 * 1024))
    } else if mib > 0 && mib % 1024 == 0 {
        format!("{}G", mib / 1024)
    } else {
        format!("{mib}M")
    }
}

/// Whole GPUs of a possibly fractional count, rounded up (a shared GPU is still a GPU).
pub(crate) fn whole_gpus(gpus: f64) -> u64 {
    if gpus <= 0.0 { 0 } else { gpus.ceil() as u64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadre_core::job::JobId;

    #[derive(Copy, Clone, Debug, PartialEq, Eq)]
    enum F {
        Id,
        Name,
    }

    fn letter(c: char) -> Option<F> {
        match c {
            'i' => Some(F::Id),
            'j' => Some(F::Name),
            _ => None,
        }
    }

    #[test]
    fn percent_fields_are_cut_and_justified_as_slurm_does() {
        let (l, bad) = parse_percent("%.5i|%3j|%j %_", letter);
        assert_eq!(bad, vec!['_']);
        let line = l.render(|k| match k {
            F::Id => "42".into(),
            F::Name => "training".into(),
        });
        assert_eq!(line, "   42|tra|training %_");
    }

    #[test]
    fn auto_width_fields_fit_the_widest_value_and_at_least_nine() {
        let (mut l, _) = parse_percent("%#j|", letter);
        let names = ["a", "bb"];
        l.fit(|_, r| names[r].to_string(), 2);
        assert_eq!(l.render(|_| "a".into()), "a        |");
        let names = ["a-very-long-partition"];
        l.fit(|_, r| names[r].to_string(), 1);
        assert_eq!(l.render(|_| "a".into()).len(), 22);
    }

    #[test]
    fn named_fields_default_to_twenty_columns_and_keep_their_suffix() {
        let (l, bad) = parse_names("JobID,name:3|,state:.10x,bogus", |n| match n {
            "jobid" => Some(F::Id),
            "name" | "state" => Some(F::Name),
            _ => None,
        });
        assert_eq!(bad, vec!["bogus".to_string()]);
        let line = l.render(|k| match k {
            F::Id => "32".into(),
            F::Name => "wrap".into(),
        });
        assert_eq!(line, format!("32{}wra|      wrapx", " ".repeat(18)));
    }

    #[test]
    fn durations_as_squeue_and_sacct_write_them() {
        use cadre_slurm::time::format_duration;
        assert_eq!(format_duration_short(0), "0:00");
        assert_eq!(format_duration_short(65), "1:05");
        assert_eq!(format_duration_short(5400), "1:30:00");
        assert_eq!(format_duration_short(365 * 86400 - 2), "364-23:59:58");
        assert_eq!(time_limit(0), "UNLIMITED");
        assert_eq!(time_limit(5400), "1:30:00");
        assert_eq!(format_duration(5), "00:00:05");
        assert_eq!(format_duration(86400 + 61), "1-00:01:01");
    }

    #[test]
    fn array_ids_and_ranges() {
        let a = ArrayIndex {
            array_job: JobId(82),
            index: 3,
            max_running: None,
        };
        assert_eq!(job_id(85, Some(a)), "82_3");
        assert_eq!(job_id(85, None), "85");
        assert_eq!(index_ranges(&[0, 1, 2, 3, 5, 7, 8]), "0-3,5,7-8");
        assert_eq!(index_ranges(&[4]), "4");
    }

    #[test]
    fn local_times_round_trip() {
        let t = from_local(2026, 11, 21, 13, 57, 54).unwrap();
        let lt = local_time(t).unwrap();
        assert_eq!((lt.year, lt.month, lt.day), (2026, 11, 21));
        assert_eq!((lt.hour, lt.minute, lt.second), (13, 57, 54));
        assert_eq!(lt.weekday, 6);
        assert!(ctime(t).starts_with("Sat Nov 21 13:57:54 2026"));
        assert_eq!(gpu_gres(8, true), "gpu:emulated:8");
        assert_eq!(gpu_gres(8, false), "gpu:8");
        assert_eq!(mem_mib(2048), "2G");
        assert_eq!(mem_mib(1536), "1536M");
        assert_eq!(mem_mib(1024 * 1024), "1T");
    }
}
