//! The wall clock as the commands read it: the controller's times are seconds since the
//! Unix epoch, and a command shows them (ages, remaining times, Slurm's local dates)
//! against this clock. The commands read it here rather than from the controller's crate.

/// Seconds since the Unix epoch now (0 for a clock set before it).
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The local time zone's offset from UTC at `t` (seconds since the epoch), in seconds east;
/// 0 where the C library cannot tell.
pub fn utc_offset(t: u64) -> i64 {
    let t = libc::time_t::try_from(t).unwrap_or(libc::time_t::MAX);
    // SAFETY: `tm` is a plain C struct for which all-zero bytes are a valid value;
    // localtime_r reads `t` and writes only into `tm`, both owned by this frame and alive
    // for the whole call, and is thread-safe (unlike localtime).
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            0
        } else {
            tm.tm_gmtoff
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_past_2020_and_the_offset_is_a_time_zones() {
        let now = now();
        assert!(now > 1_600_000_000, "{now}");
        let offset = utc_offset(now);
        assert!(offset.abs() <= 14 * 3600, "{offset}");
    }
}
