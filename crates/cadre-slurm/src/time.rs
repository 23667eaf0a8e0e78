//! Slurm's times: time limits (`--time`, `--time-min`), their display (`01:30:00`,
//! `2-03:00:00`, `UNLIMITED`), begin times (`--begin`), and timestamps as `scontrol`
//! prints them (`2026-11-21T14:01:37`, local time).
//!
//! Time limits and durations are cadre-core's (re-exported here): one parser and one
//! formatter with Slurm 22.05's rules, shared with `cadre submit` and the config files (see
//! [`cadre_core::time`]).
//!
//! Local time is given by the caller as an offset from UTC (this module reads no clock and
//! no time zone database); a `--begin` across a daylight-saving change is off by that hour.

pub use cadre_core::time::{
    DurationError, TimeLimit, format_duration, format_duration_short, format_limit,
    parse_slurm_duration, parse_time_limit,
};

/// The wall clock as the caller knows it: seconds since the epoch and the local offset.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Clock {
    pub now: i64,
    /// Seconds east of UTC.
    pub utc_offset: i64,
}

/// A civil date and time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    secs_of_day: i64,
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn civil(epoch: i64, clock: &Clock) -> Civil {
    let local = epoch + clock.utc_offset;
    let (year, month, day) = civil_from_days(local.div_euclid(86_400));
    Civil {
        year,
        month,
        day,
        secs_of_day: local.rem_euclid(86_400),
    }
}

fn epoch_of(c: &Civil, clock: &Clock) -> i64 {
    days_from_civil(c.year, c.month, c.day) * 86_400 + c.secs_of_day - clock.utc_offset
}

/// A timestamp as `scontrol` prints it, in local time: `2026-11-21T14:01:37`.
pub fn format_timestamp(epoch: i64, clock: &Clock) -> String {
    let c = civil(epoch, clock);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        c.year,
        c.month,
        c.day,
        c.secs_of_day / 3600,
        c.secs_of_day / 60 % 60,
        c.secs_of_day % 60
    )
}

/// Parses a `--begin` time into seconds since the epoch; `None` if invalid.
///
/// Forms (Slurm's, as in `sbatch(1)`): `now[+count[seconds|minutes|hours|days|weeks]]`
/// (seconds by default; units may be abbreviated to their first letters), `HH:MM[:SS]`
/// (today, or tomorrow once past) with an optional `AM`/`PM`, `midnight`, `noon`, `fika`
/// (15:00), `teatime` (16:00), `today`, `tomorrow`, `YYYY-MM-DD[THH:MM[:SS]]`,
/// `MM/DD[/YY]` and `MMDDYY`, each date optionally followed by `THH:MM[:SS]`.
pub fn parse_begin(text: &str, clock: &Clock) -> Option<i64> {
    let t = text.trim().to_ascii_lowercase();
    if t.is_empty() {
        return None;
    }
    if let Some(rest) = t.strip_prefix("now") {
        let rest = rest.trim();
        if rest.is_empty() {
            return Some(clock.now);
        }
        let rest = rest.strip_prefix('+')?.trim();
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let count: i64 = digits.parse().ok()?;
        let unit = rest[digits.len()..].trim();
        let mult = match unit {
            "" => 1,
            u if !u.is_empty() && "seconds".starts_with(u) => 1,
            u if !u.is_empty() && "minutes".starts_with(u) => 60,
            u if !u.is_empty() && "hours".starts_with(u) => 3600,
            u if !u.is_empty() && "days".starts_with(u) => 86_400,
            u if !u.is_empty() && "weeks".starts_with(u) => 604_800,
            _ => return None,
        };
        return clock.now.checked_add(count.checked_mul(mult)?);
    }
    let today = civil(clock.now, clock);
    let at = |secs_of_day: i64| {
        let mut c = today;
        c.secs_of_day = secs_of_day;
        let e = epoch_of(&c, clock);
        // A time of day already past is tomorrow's.
        Some(if e < clock.now { e + 86_400 } else { e })
    };
    match t.as_str() {
        "midnight" => {
            return Some(
                epoch_of(
                    &Civil {
                        secs_of_day: 0,
                        ..today
                    },
                    clock,
                ) + 86_400,
            );
        }
        "noon" => return at(12 * 3600),
        "fika" => return at(15 * 3600),
        "teatime" => return at(16 * 3600),
        "today" => {
            return Some(epoch_of(
                &Civil {
                    secs_of_day: 0,
                    ..today
                },
                clock,
            ));
        }
        "tomorrow" => {
            return Some(
                epoch_of(
                    &Civil {
                        secs_of_day: 0,
                        ..today
                    },
                    clock,
                ) + 86_400,
            );
        }
        _ => {}
    }
    let (date, time) = match t.split_once('t') {
        Some((d, tm)) => (Some(d), Some(tm)),
        None if t.contains(':') => (None, Some(t.as_str())),
        None => (Some(t.as_str()), None),
    };
    let secs_of_day = match time {
        Some(tm) => Some(parse_time_of_day(tm)?),
        None => None,
    };
    let Some(date) = date else {
        return at(secs_of_day.unwrap_or(0));
    };
    let (year, month, day) = parse_date(date, today.year)?;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    Some(epoch_of(
        &Civil {
            year,
            month,
            day,
            secs_of_day: secs_of_day.unwrap_or(0),
        },
        clock,
    ))
}

fn parse_time_of_day(t: &str) -> Option<i64> {
    let (clock_part, pm) = if let Some(s) = t.strip_suffix("pm") {
        (s.trim(), Some(true))
    } else if let Some(s) = t.strip_suffix("am") {
        (s.trim(), Some(false))
    } else {
        (t, None)
    };
    let fields: Vec<i64> = clock_part
        .split(':')
        .map(|f| {
            if f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                f.parse().ok()
            }
        })
        .collect::<Option<_>>()?;
    let (mut h, m, s) = match fields.as_slice() {
        [h, m] => (*h, *m, 0),
        [h, m, s] => (*h, *m, *s),
        _ => return None,
    };
    match pm {
        Some(true) if (1..=12).contains(&h) => h = h % 12 + 12,
        Some(false) if (1..=12).contains(&h) => h %= 12,
        Some(_) => return None,
        None => {}
    }
    if h > 23 || m > 59 || s > 59 {
        return None;
    }
    Some(h * 3600 + m * 60 + s)
}

fn parse_date(d: &str, this_year: i64) -> Option<(i64, u32, u32)> {
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = d.split(['-', '/']).collect();
    if d.contains('-') {
        let [y, m, dd] = parts.as_slice() else {
            return None;
        };
        if y.len() != 4 || !all_digits(y) || !all_digits(m) || !all_digits(dd) {
            return None;
        }
        return Some((y.parse().ok()?, m.parse().ok()?, dd.parse().ok()?));
    }
    if d.contains('/') {
        if !parts.iter().all(|p| all_digits(p)) {
            return None;
        }
        return match parts.as_slice() {
            [m, dd] => Some((this_year, m.parse().ok()?, dd.parse().ok()?)),
            [m, dd, y] => {
                let y: i64 = y.parse().ok()?;
                Some((
                    if y < 100 { 2000 + y } else { y },
                    m.parse().ok()?,
                    dd.parse().ok()?,
                ))
            }
            _ => None,
        };
    }
    if d.len() == 6 && all_digits(d) {
        let m: u32 = d[0..2].parse().ok()?;
        let dd: u32 = d[2..4].parse().ok()?;
        let y: i64 = d[4..6].parse().ok()?;
        return Some((2000 + y, m, dd));
    }
    None
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOCK: Clock = Clock {
        // 2026-11-21T14:01:37Z
        now: 1_795_269_697,
        utc_offset: 0,
    };

    #[test]
    fn timestamps_are_local_civil_time() {
        assert_eq!(format_timestamp(CLOCK.now, &CLOCK), "2026-11-21T14:01:37");
        let east = Clock {
            utc_offset: 3600,
            ..CLOCK
        };
        assert_eq!(format_timestamp(CLOCK.now, &east), "2026-11-21T15:01:37");
        assert_eq!(format_timestamp(0, &CLOCK), "1970-01-01T00:00:00");
        assert_eq!(format_timestamp(951_782_400, &CLOCK), "2000-02-29T00:00:00");
    }

    #[test]
    fn begin_times() {
        let b = |t: &str| parse_begin(t, &CLOCK);
        assert_eq!(b("now"), Some(CLOCK.now));
        assert_eq!(b("now+60"), Some(CLOCK.now + 60));
        assert_eq!(b("now+1hour"), Some(CLOCK.now + 3600));
        assert_eq!(b("now+2hours"), Some(CLOCK.now + 7200));
        assert_eq!(b("now+3days"), Some(CLOCK.now + 3 * 86_400));
        assert_eq!(b("now+5min"), Some(CLOCK.now + 300));
        assert_eq!(
            b("2026-12-24T18:30").map(|e| format_timestamp(e, &CLOCK)),
            Some("2026-12-24T18:30:00".into())
        );
        assert_eq!(
            b("2026-12-24").map(|e| format_timestamp(e, &CLOCK)),
            Some("2026-12-24T00:00:00".into())
        );
        // A time of day already past today is tomorrow's.
        assert_eq!(
            b("10:00").map(|e| format_timestamp(e, &CLOCK)),
            Some("2026-11-22T10:00:00".into())
        );
        assert_eq!(
            b("16:00").map(|e| format_timestamp(e, &CLOCK)),
            Some("2026-11-21T16:00:00".into())
        );
        assert_eq!(
            b("4:00pm").map(|e| format_timestamp(e, &CLOCK)),
            Some("2026-11-21T16:00:00".into())
        );
        assert_eq!(
            b("tomorrow").map(|e| format_timestamp(e, &CLOCK)),
            Some("2026-11-22T00:00:00".into())
        );
        assert_eq!(
            b("12/25/26").map(|e| format_timestamp(e, &CLOCK)),
            Some("2026-12-25T00:00:00".into())
        );
        assert_eq!(
            b("122526T08:00").map(|e| format_timestamp(e, &CLOCK)),
            Some("2026-12-25T08:00:00".into())
        );
        for bad in [
            "foo",
            "now+",
            "now-5",
            "now+5parsecs",
            "25:00",
            "2026-02-30",
            "13/01",
        ] {
            assert_eq!(b(bad), None, "{bad}");
        }
    }
}
