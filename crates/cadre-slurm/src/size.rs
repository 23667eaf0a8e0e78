//! Memory sizes as Slurm reads them (`--mem=10G`) and prints them (`MinMemoryNode=1.50G`).
//!
//! Read: a whole number with an optional unit `K`, `M` (the default), `G` or `T` in either
//! case, optionally followed by `B` (`1GB`); units are powers of 1024; kibibytes round up to
//! whole MiB. Printed (measured against Slurm 22.05): MiB are carried to the next unit
//! while the amount is at least 1024 and a multiple of 512 of the current unit, and
//! printed with two decimals where not whole: 1536 MiB is `1.50G`, 1280 MiB stays `1280M`,
//! 1058816 MiB is `1034G`.

/// Parses a memory size into MiB; `None` if Slurm would say `Invalid --mem specification`.
pub fn parse_mib(text: &str) -> Option<u64> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    if digits.is_empty() {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let unit = unit.to_ascii_uppercase();
    let unit = unit
        .strip_suffix('B')
        .filter(|u| !u.is_empty())
        .unwrap_or(&unit);
    match unit {
        "K" => Some(n.div_ceil(1024)),
        "" | "M" => Some(n),
        "G" => n.checked_mul(1024),
        "T" => n.checked_mul(1024 * 1024),
        _ => None,
    }
}

/// MiB as `scontrol` prints them: `0`, `1M`, `1500M`, `1.50G`, `100G`, `1T`.
pub fn format_mib(mib: u64) -> String {
    if mib == 0 {
        return "0".into();
    }
    const UNITS: [char; 5] = ['M', 'G', 'T', 'P', 'E'];
    let mut value = mib as f64;
    let mut unit = 0;
    while unit + 1 < UNITS.len()
        && value >= 1024.0
        && value.fract() == 0.0
        && (value as u64) % 512 == 0
    {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{}{}", value as u64, UNITS[unit])
    } else {
        format!("{:.2}{}", value, UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_slurm() {
        assert_eq!(parse_mib("1024"), Some(1024));
        assert_eq!(parse_mib("10G"), Some(10_240));
        assert_eq!(parse_mib("1g"), Some(1024));
        assert_eq!(parse_mib("1GB"), Some(1024));
        assert_eq!(parse_mib("10m"), Some(10));
        assert_eq!(parse_mib("1T"), Some(1 << 20));
        assert_eq!(parse_mib("100K"), Some(1));
        assert_eq!(parse_mib("1KB"), Some(1));
        assert_eq!(parse_mib("2048K"), Some(2));
        assert_eq!(parse_mib("0"), Some(0));
        for bad in ["", "abc", "-1", "10X", "1.5G", "10 G", "1P", "G", "B"] {
            assert_eq!(parse_mib(bad), None, "{bad}");
        }
    }

    #[test]
    fn sizes_print_like_scontrol_22_05() {
        for (mib, shown) in [
            (0, "0"),
            (1, "1M"),
            (512, "512M"),
            (1024, "1G"),
            (1025, "1025M"),
            (1100, "1100M"),
            (1280, "1280M"),
            (1500, "1500M"),
            (1536, "1.50G"),
            (2049, "2049M"),
            (2560, "2.50G"),
            (3000, "3000M"),
            (10_240, "10G"),
            (100_000, "100000M"),
            (102_400, "100G"),
            (1_048_576, "1T"),
            (1_048_832, "1048832M"),
            (1_058_816, "1034G"),
            (1_572_864, "1.50T"),
        ] {
            assert_eq!(format_mib(mib), shown, "{mib}");
        }
    }
}
