//! Time as the core sees it: seconds, passed in by the caller; and Slurm's spelling of
//! durations, read and written in this one place by every part of cadre.
//!
//! The core never reads a clock. The live controller passes wall-clock seconds since the Unix
//! epoch; the simulator passes simulated seconds. Both are a [`Time`]; spans are [`Dur`].
//!
//! # Slurm durations
//!
//! [`parse_slurm_duration`] is the one parser of Slurm's duration syntax (`--time`,
//! `--time-min`, `--switches=N@T`, `#SBATCH`, `scontrol update TimeLimit=`, `cadre submit
//! -t`, `MaxTime`/`DefaultTime` in slurm.conf and in the cluster description), and
//! [`parse_time_limit`] makes a job's time limit of it as Slurm does. The rules, as Slurm
//! 22.05 reads them (measured against it):
//! - `minutes`, `minutes:seconds`, `hours:minutes:seconds`, `days-hours`,
//!   `days-hours:minutes`, `days-hours:minutes:seconds`, and `days-` (whole days);
//! - no field has an upper bound: `1-1:60:15` is 1 day 2 h 0 min 15 s, `1:60` is 2 min;
//! - `-1`, `INFINITE` and `UNLIMITED` (any case) mean no limit, as does 4294967295 minutes
//!   or more (Slurm's "infinite");
//! - spaces, signs, empty fields, a fourth field and other characters are invalid;
//! - a time limit is whole minutes, seconds rounding up (`0:30` is one minute), and a limit
//!   of zero (`0`, `0:0`) is no limit.
//!
//! Where Slurm overflows (other negative numbers such as `-5`, or more minutes than its
//! integers hold) it makes a garbage limit; cadre refuses negatives, keeps large numbers as
//! written, and refuses what does not fit in 64 bits.
//!
//! [`format_duration`] writes `[D-]HH:MM:SS` (scontrol, sacct, `Dur`'s `Display`);
//! [`format_duration_short`] the same without leading zeros, `[D-][H:]M:SS` (squeue,
//! sinfo).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, Sub};

/// A point in time, in whole seconds.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Time(pub u64);

/// A span of time, in whole seconds.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Dur(pub u64);

impl Time {
    /// The latest representable time: "never" for reservations and end times.
    pub const NEVER: Time = Time(u64::MAX);

    /// The span from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Time) -> Dur {
        Dur(self.0.saturating_sub(earlier.0))
    }
}

impl Dur {
    pub const fn secs(s: u64) -> Dur {
        Dur(s)
    }
    pub const fn minutes(m: u64) -> Dur {
        Dur(m * 60)
    }
    pub const fn hours(h: u64) -> Dur {
        Dur(h * 3600)
    }
    pub const fn days(d: u64) -> Dur {
        Dur(d * 86_400)
    }
}

impl Add<Dur> for Time {
    type Output = Time;
    fn add(self, d: Dur) -> Time {
        Time(self.0.saturating_add(d.0))
    }
}

impl Sub<Dur> for Time {
    type Output = Time;
    fn sub(self, d: Dur) -> Time {
        Time(self.0.saturating_sub(d.0))
    }
}

impl Add for Dur {
    type Output = Dur;
    fn add(self, d: Dur) -> Dur {
        Dur(self.0.saturating_add(d.0))
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Time::NEVER {
            f.write_str("never")
        } else {
            write!(f, "t={}", self.0)
        }
    }
}

impl fmt::Display for Dur {
    /// Slurm's `[D-]HH:MM:SS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

/// Slurm's "infinite" minutes: this many or more is no limit.
pub const INFINITE_MINUTES: u64 = 4_294_967_295;

/// Why a Slurm duration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to parse time `{input}`: {reason}")]
pub struct DurationError {
    pub input: String,
    pub reason: DurationProblem,
}

/// The specific fault in a Slurm duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DurationProblem {
    #[error("it is empty")]
    Empty,
    #[error(
        "expected minutes, minutes:seconds, hours:minutes:seconds, days-hours, \
         days-hours:minutes, days-hours:minutes:seconds or UNLIMITED"
    )]
    Malformed,
    #[error("{0} must be a number")]
    NotANumber(&'static str),
    #[error("the time is too large")]
    TooLarge,
}

/// Reads a Slurm duration (the rules are in the [module docs](self)) to the second; `None`
/// for no limit (`UNLIMITED`, `INFINITE`, `-1`, or Slurm's infinite minutes and beyond).
/// `0` gives `Some(Dur(0))`: what zero means is the caller's decision (a job's `--time=0`
/// is no limit, see [`parse_time_limit`]; a partition's `max_time = "0"` is refused).
///
/// # Errors
///
/// A [`DurationError`] naming the input and the fault, such as "failed to parse time
/// `1:2:3:4`: expected minutes, ...".
pub fn parse_slurm_duration(text: &str) -> Result<Option<Dur>, DurationError> {
    let fail = |reason| DurationError {
        input: text.to_string(),
        reason,
    };
    if text.is_empty() {
        return Err(fail(DurationProblem::Empty));
    }
    if text == "-1"
        || text.eq_ignore_ascii_case("infinite")
        || text.eq_ignore_ascii_case("unlimited")
    {
        return Ok(None);
    }
    let num = |field: &str, what: &'static str| -> Result<u64, DurationError> {
        if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
            return Err(fail(DurationProblem::NotANumber(what)));
        }
        field
            .parse::<u64>()
            .map_err(|_| fail(DurationProblem::TooLarge))
    };
    let (days, rest) = match text.split_once('-') {
        Some((d, rest)) => (Some(num(d, "days")?), rest),
        None => (None, text),
    };
    let fields: Vec<&str> = match (days, rest) {
        // `days-`: whole days.
        (Some(_), "") => Vec::new(),
        _ => rest.split(':').collect(),
    };
    // (days, hours, minutes, seconds)
    let (d, h, m, s) = match (days, fields.as_slice()) {
        (None, [m]) => (0, 0, num(m, "minutes")?, 0),
        (None, [m, s]) => (0, 0, num(m, "minutes")?, num(s, "seconds")?),
        (None, [h, m, s]) => (0, num(h, "hours")?, num(m, "minutes")?, num(s, "seconds")?),
        (Some(d), []) => (d, 0, 0, 0),
        (Some(d), [h]) => (d, num(h, "hours")?, 0, 0),
        (Some(d), [h, m]) => (d, num(h, "hours")?, num(m, "minutes")?, 0),
        (Some(d), [h, m, s]) => (d, num(h, "hours")?, num(m, "minutes")?, num(s, "seconds")?),
        _ => return Err(fail(DurationProblem::Malformed)),
    };
    let total = d
        .checked_mul(86_400)
        .and_then(|x| x.checked_add(h.checked_mul(3600)?))
        .and_then(|x| x.checked_add(m.checked_mul(60)?))
        .and_then(|x| x.checked_add(s))
        .ok_or_else(|| fail(DurationProblem::TooLarge))?;
    Ok((total.div_ceil(60) < INFINITE_MINUTES).then_some(Dur(total)))
}

/// A job's time limit: whole minutes, or none.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TimeLimit {
    Unlimited,
    /// Always positive and below [`INFINITE_MINUTES`].
    Minutes(u64),
}

impl TimeLimit {
    /// The limit in seconds; `None` for no limit.
    pub fn secs(self) -> Option<u64> {
        match self {
            TimeLimit::Unlimited => None,
            TimeLimit::Minutes(m) => Some(m * 60),
        }
    }

    /// The limit as a job spec holds it: `Dur(0)` for no limit.
    pub fn dur(self) -> Dur {
        Dur(self.secs().unwrap_or(0))
    }
}

/// Reads a job's time limit (`--time`, `-t`, `TimeLimit=`): [`parse_slurm_duration`], then
/// seconds round up to whole minutes and zero is no limit, as in Slurm.
///
/// # Errors
///
/// As [`parse_slurm_duration`].
pub fn parse_time_limit(text: &str) -> Result<TimeLimit, DurationError> {
    Ok(match parse_slurm_duration(text)? {
        None => TimeLimit::Unlimited,
        Some(Dur(secs)) => match secs.div_ceil(60) {
            0 => TimeLimit::Unlimited,
            m => TimeLimit::Minutes(m),
        },
    })
}

fn split_duration(secs: u64) -> (u64, u64, u64, u64) {
    (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60)
}

/// A duration as scontrol and sacct write it: `HH:MM:SS`, or `D-HH:MM:SS` from one day on.
pub fn format_duration(secs: u64) -> String {
    match split_duration(secs) {
        (0, h, m, s) => format!("{h:02}:{m:02}:{s:02}"),
        (d, h, m, s) => format!("{d}-{h:02}:{m:02}:{s:02}"),
    }
}

/// A duration as squeue and sinfo write it: `M:SS`, `H:MM:SS`, `D-HH:MM:SS`.
pub fn format_duration_short(secs: u64) -> String {
    match split_duration(secs) {
        (0, 0, m, s) => format!("{m}:{s:02}"),
        (0, h, m, s) => format!("{h}:{m:02}:{s:02}"),
        (d, h, m, s) => format!("{d}-{h:02}:{m:02}:{s:02}"),
    }
}

/// A time limit in seconds as scontrol shows it (`UNLIMITED` for none).
pub fn format_limit(secs: Option<u64>) -> String {
    secs.map_or_else(|| "UNLIMITED".into(), format_duration)
}

/// Serde for durations in cadre's own config files (the policy): whole seconds, or a string
/// `90s`, `30m`, `12h`, `7d`. (Slurm's syntax, for Slurm's keys, is [`parse_slurm_duration`].)
pub mod secs {
    use super::Dur;
    use serde::{Deserialize, Deserializer, Serializer, de};

    pub fn serialize<S: Serializer>(d: &Dur, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.0)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Secs(s) => Ok(Dur(s)),
            Raw::Text(t) => parse(&t).map_err(de::Error::custom),
        }
    }

    /// Parses `90s`, `30m`, `12h`, `7d` or a bare number of seconds.
    pub fn parse(text: &str) -> Result<Dur, String> {
        let t = text.trim();
        let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
        let n: u64 = num.parse().map_err(|_| {
            format!("failed to parse duration `{text}`: expected a number and s, m, h or d")
        })?;
        let mult = match unit {
            "" | "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            other => {
                return Err(format!(
                    "failed to parse duration `{text}`: unknown unit `{other}` (use s, m, h or d)"
                ));
            }
        };
        n.checked_mul(mult)
            .map(Dur)
            .ok_or_else(|| format!("duration `{text}` is too large"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        assert_eq!(Time::NEVER + Dur(5), Time::NEVER);
        assert_eq!(Time(3) - Dur(5), Time(0));
        assert_eq!(Time(3).since(Time(10)), Dur(0));
        assert_eq!(Time(10).since(Time(3)), Dur(7));
    }

    #[test]
    fn durations_print_as_slurm_does() {
        assert_eq!(Dur(59).to_string(), "00:00:59");
        assert_eq!(Dur::hours(25).to_string(), "1-01:00:00");
        assert_eq!(Dur::minutes(90).to_string(), "01:30:00");
    }

    #[test]
    fn durations_print_as_scontrol_does() {
        assert_eq!(format_duration(0), "00:00:00");
        assert_eq!(format_duration(90 * 60), "01:30:00");
        assert_eq!(format_duration(86_400 + 121 * 60), "1-02:01:00");
        assert_eq!(format_limit(None), "UNLIMITED");
    }

    #[test]
    fn durations_as_squeue_and_sacct_write_them() {
        assert_eq!(format_duration_short(0), "0:00");
        assert_eq!(format_duration_short(65), "1:05");
        assert_eq!(format_duration_short(5400), "1:30:00");
        assert_eq!(format_duration_short(365 * 86400 - 2), "364-23:59:58");
        assert_eq!(format_duration(5), "00:00:05");
        assert_eq!(format_duration(86400 + 61), "1-00:01:01");
    }

    fn mins(t: &str) -> Option<TimeLimit> {
        parse_time_limit(t).ok()
    }

    #[test]
    fn time_limits_parse_as_slurm_22_05_measured() {
        use TimeLimit::*;
        assert_eq!(mins("90"), Some(Minutes(90)));
        assert_eq!(mins("1:30"), Some(Minutes(2)), "seconds round up");
        assert_eq!(mins("0:30"), Some(Minutes(1)));
        assert_eq!(mins("00:00:01"), Some(Minutes(1)));
        assert_eq!(mins("25:00:00"), Some(Minutes(25 * 60)));
        assert_eq!(mins("2-3"), Some(Minutes((2 * 24 + 3) * 60)));
        assert_eq!(mins("1-0"), Some(Minutes(1440)));
        assert_eq!(mins("1-"), Some(Minutes(1440)));
        assert_eq!(mins("1-1:60:15"), Some(Minutes(1440 + 121)));
        assert_eq!(mins("1-00:00:61"), Some(Minutes(1440 + 2)));
        assert_eq!(mins("99999999"), Some(Minutes(99_999_999)));
        for unlimited in [
            "0",
            "0:0",
            "-1",
            "INFINITE",
            "infinite",
            "Unlimited",
            "4294967295",
        ] {
            assert_eq!(mins(unlimited), Some(Unlimited), "{unlimited}");
        }
        for bad in [
            "abc",
            "1:2:3:4",
            "1:",
            ":5",
            "1::2",
            " 5",
            "5m",
            "1-2-3",
            "1:2:3:",
            "1.5",
            "+5",
            "1-1:1:1:1",
            "",
            "-5",
        ] {
            assert_eq!(mins(bad), None, "{bad}");
        }
    }

    #[test]
    fn slurm_durations_parse_in_every_form() {
        let cases = [
            ("90", Some(Dur::minutes(90))),
            ("30:00", Some(Dur::minutes(30))),
            ("5:30", Some(Dur(5 * 60 + 30))),
            ("48:00:00", Some(Dur::hours(48))),
            ("1:02:03", Some(Dur(3723))),
            ("2-00:00:00", Some(Dur::days(2))),
            ("1-12", Some(Dur::days(1) + Dur::hours(12))),
            ("1-12:30", Some(Dur(86_400 + 12 * 3600 + 30 * 60))),
            ("0-0:0:1", Some(Dur(1))),
            ("0", Some(Dur(0))),
            ("UNLIMITED", None),
            ("infinite", None),
            ("-1", None),
            // No field is bounded, as in Slurm 22.05.
            ("1-25:00", Some(Dur::days(2) + Dur::hours(1))),
            ("10:60", Some(Dur::minutes(11))),
            ("1-1:60:15", Some(Dur(86_400 + 2 * 3600 + 15))),
            ("1-", Some(Dur::days(1))),
        ];
        for (s, want) in cases {
            assert_eq!(parse_slurm_duration(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn bad_slurm_durations_say_what_is_wrong() {
        let cases = [
            "",
            " 10 ",
            "1:2:3:4",
            "-5",
            "x",
            "1-2-3",
            "5:",
            "99999999999999999999",
            "213503982334601-7:0:16",
        ];
        let report: String = cases
            .iter()
            .map(|s| match parse_slurm_duration(s) {
                Ok(d) => format!("{s:?} parsed as {d:?}\n"),
                Err(e) => format!("{e}\n"),
            })
            .collect();
        insta::assert_snapshot!(report, @r#"
            failed to parse time ``: it is empty
            failed to parse time ` 10 `: minutes must be a number
            failed to parse time `1:2:3:4`: expected minutes, minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes, days-hours:minutes:seconds or UNLIMITED
            failed to parse time `-5`: days must be a number
            failed to parse time `x`: minutes must be a number
            failed to parse time `1-2-3`: hours must be a number
            failed to parse time `5:`: seconds must be a number
            failed to parse time `99999999999999999999`: the time is too large
            failed to parse time `213503982334601-7:0:16`: the time is too large
        "#);
    }

    proptest! {
        #[test]
        fn printed_durations_parse_back(secs in 0u64..10_000_000_000) {
            let d = Dur(secs);
            prop_assert_eq!(parse_slurm_duration(&d.to_string()), Ok(Some(d)));
        }
    }
}
