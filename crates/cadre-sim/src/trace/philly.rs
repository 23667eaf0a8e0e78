//! The Microsoft Philly job list as the Pollux artefact prepared it:
//! `timestamp,duration,num_gpus,gpu_time,cluster`, one row per job.
//!
//! - `timestamp` (`YYYY-MM-DD HH:MM:SS`, no zone) is the submit time; it is read as seconds
//!   since 1970-01-01 by a small proleptic-Gregorian conversion (no date crate) and the
//!   trace is then shifted so that its first submit is 0.
//! - `duration` (seconds, `2951.0`) is the run time, rounded up to whole seconds.
//! - `num_gpus` becomes the gang ([`super::rows::gpu_job`]).
//! - `cluster`, the hashed virtual cluster (team), is the account, and also the user: the
//!   trace has no users, and one user per account keeps fair-share between the 15 teams.
//! - `gpu_time` is `duration x num_gpus` and is not used.
//!
//! Rows with 0 GPUs, a duration of 0 or an unreadable field are errors that name the line
//! (the published file has none); blank lines (the file ends with one) are skipped.

use super::rows::{self, RawJob};
use super::{ImportOptions, TraceError, TraceJob};

pub(crate) const COLUMNS: [&str; 5] = ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"];

pub(crate) fn import(
    text: &str,
    origin: &str,
    opts: &ImportOptions,
) -> Result<Vec<TraceJob>, TraceError> {
    rows::check_options(opts, origin)?;
    let rows = rows::rows(text, origin, &COLUMNS)?;
    let mut jobs = Vec::with_capacity(rows.len());
    for (n, row) in rows.iter().enumerate() {
        let ts = row.str(0);
        let submit =
            parse_timestamp(ts).map_err(|why| row.error(0, format_args!("`{ts}`: {why}")))?;
        let duration = row.duration(1)?;
        let gpus = row.positive_u32(2)?;
        let cluster = row.name(4)?;
        let spec = rows::gpu_job(
            format!("philly-{n}"),
            cluster,
            cluster,
            gpus,
            duration,
            opts,
        );
        jobs.push(RawJob {
            submit,
            duration,
            spec,
        });
    }
    Ok(rows::finish(jobs))
}

/// `YYYY-MM-DD HH:MM:SS` as seconds since 1970-01-01 00:00:00 (the zone does not matter:
/// only differences are used).
pub fn parse_timestamp(s: &str) -> Result<u64, String> {
    let (date, time) = s.split_once(' ').ok_or("expected `YYYY-MM-DD HH:MM:SS`")?;
    let num = |part: &str, what: &str| -> Result<u64, String> {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("the {what} `{part}` is not a number"));
        }
        part.parse::<u64>()
            .map_err(|_| format!("the {what} `{part}` is too large"))
    };
    let d: Vec<&str> = date.split('-').collect();
    let t: Vec<&str> = time.split(':').collect();
    if d.len() != 3 || t.len() != 3 {
        return Err("expected `YYYY-MM-DD HH:MM:SS`".into());
    }
    let (year, month, day) = (num(d[0], "year")?, num(d[1], "month")?, num(d[2], "day")?);
    let (hour, minute, second) = (
        num(t[0], "hour")?,
        num(t[1], "minute")?,
        num(t[2], "second")?,
    );
    if !(1970..=9999).contains(&year) {
        return Err(format!("the year {year} is not in 1970..=9999"));
    }
    if !(1..=12).contains(&month) {
        return Err(format!("the month {month} is not in 1..=12"));
    }
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let last = month_days[(month - 1) as usize];
    if day == 0 || day > last {
        return Err(format!("day {day} is not in month {month} of {year}"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(format!(
            "the time {hour}:{minute}:{second} is not a time of day"
        ));
    }
    Ok(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days from 1970-01-01 to the given date (year >= 1970), by the usual era arithmetic:
/// years start in March so that the leap day is last.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_count_days_months_and_leap_years() {
        assert_eq!(parse_timestamp("1970-01-01 00:00:00"), Ok(0));
        assert_eq!(parse_timestamp("1970-01-02 00:00:01"), Ok(86_401));
        // 2017-09-04 is 17,413 days after 1970-01-01.
        assert_eq!(
            parse_timestamp("2017-09-04 10:30:41"),
            Ok(17_413 * 86_400 + 37_841)
        );
        assert_eq!(
            parse_timestamp("2016-03-01 00:00:00").map(|s| s / 86_400),
            parse_timestamp("2016-02-29 00:00:00").map(|s| s / 86_400 + 1)
        );
        assert_eq!(parse_timestamp("2000-12-31 23:59:59"), Ok(978_307_199));
    }

    #[test]
    fn timestamps_that_are_not_dates_are_refused() {
        assert!(parse_timestamp("2017-02-29 00:00:00").is_err());
        assert!(parse_timestamp("2017-13-01 00:00:00").is_err());
        assert!(parse_timestamp("2017-12-01 24:00:00").is_err());
        assert!(parse_timestamp("2017-12-01T00:00:00").is_err());
        assert!(parse_timestamp("2017-12-01 00:00").is_err());
        assert!(parse_timestamp("1969-12-31 23:59:59").is_err());
        assert!(parse_timestamp("2017-+1-01 00:00:00").is_err());
    }
}
