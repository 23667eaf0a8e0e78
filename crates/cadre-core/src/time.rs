//! Time as the core sees it: seconds, passed in by the caller.
//!
//! The core never reads a clock. The live controller passes wall-clock seconds since the Unix
//! epoch; the simulator passes simulated seconds. Both are a [`Time`]; spans are [`Dur`].

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
        let s = self.0;
        let (d, h, m, sec) = (s / 86_400, (s / 3600) % 24, (s / 60) % 60, s % 60);
        if d > 0 {
            write!(f, "{d}-{h:02}:{m:02}:{sec:02}")
        } else {
            write!(f, "{h:02}:{m:02}:{sec:02}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
