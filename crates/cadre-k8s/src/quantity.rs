//! Kubernetes resource quantities (`500m`, `1.5Gi`, `2`, `1e3`), read exactly.
//!
//! A quantity is a decimal number with an optional suffix: binary (`Ki Mi Gi Ti Pi Ei`,
//! powers of 1024), decimal (`n u m k M G T P E`, powers of 1000; none is 1) or a decimal
//! exponent (`e3`, `E-2`). cadre keeps the value as an exact fraction and rounds only at
//! the end, always up, so that a request is never booked smaller than asked:
//! - CPU: whole cores, `ceil(value)` (`500m` books 1 core: cadre pins tasks to whole cores);
//! - memory: MiB, `ceil(bytes / 2^20)` (`1G` is 953.67 MiB, booked as 954);
//! - devices (GPUs, NICs, named resources): the value must be a whole number.
//!
//! Negative quantities are refused, as Kubernetes refuses them in requests and limits.

use std::fmt;

/// A non-negative quantity as an exact fraction `num / den`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Quantity {
    num: u128,
    den: u128,
}

/// Why a quantity could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a quantity: {why}")]
pub struct QuantityError {
    pub text: String,
    pub why: String,
}

const MIB: u128 = 1 << 20;

impl Quantity {
    /// Reads a quantity as Kubernetes writes it.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let err = |why: &str| QuantityError {
            text: text.to_string(),
            why: why.to_string(),
        };
        let t = text.trim();
        let t = t.strip_prefix('+').unwrap_or(t);
        if t.starts_with('-') {
            return Err(err("negative quantities are not allowed"));
        }
        let end = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, suffix) = t.split_at(end);
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if int.is_empty() && frac.is_empty() {
            return Err(err("no number"));
        }
        if frac.contains('.') {
            return Err(err("more than one decimal point"));
        }
        let too_large = || err("too large");
        let mut num: u128 = 0;
        for d in int.bytes().chain(frac.bytes()) {
            num = num
                .checked_mul(10)
                .and_then(|n| n.checked_add(u128::from(d - b'0')))
                .ok_or_else(too_large)?;
        }
        let mut den: u128 = 10u128
            .checked_pow(u32::try_from(frac.len()).map_err(|_| too_large())?)
            .ok_or_else(too_large)?;
        // (multiplier, divisor) of the suffix.
        let (mul, div): (u128, u128) = match suffix {
            "" => (1, 1),
            "Ki" => (1 << 10, 1),
            "Mi" => (1 << 20, 1),
            "Gi" => (1 << 30, 1),
            "Ti" => (1 << 40, 1),
            "Pi" => (1 << 50, 1),
            "Ei" => (1 << 60, 1),
            "n" => (1, 1_000_000_000),
            "u" => (1, 1_000_000),
            "m" => (1, 1_000),
            "k" => (1_000, 1),
            "M" => (1_000_000, 1),
            "G" => (1_000_000_000, 1),
            "T" => (1_000_000_000_000, 1),
            "P" => (1_000_000_000_000_000, 1),
            "E" => (1_000_000_000_000_000_000, 1),
            s if s.starts_with(['e', 'E']) => {
                let exp: i32 = s[1..]
                    .parse()
                    .map_err(|_| err(&format!("unknown suffix `{s}`")))?;
                let p = 10u128
                    .checked_pow(exp.unsigned_abs())
                    .ok_or_else(too_large)?;
                if exp >= 0 { (p, 1) } else { (1, p) }
            }
            s => {
                return Err(err(&format!(
                    "unknown suffix `{s}` (use Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent)"
                )));
            }
        };
        num = num.checked_mul(mul).ok_or_else(too_large)?;
        den = den.checked_mul(div).ok_or_else(too_large)?;
        Ok(Quantity { num, den })
    }

    /// The value rounded up to a whole number.
    pub fn ceil(&self) -> u128 {
        self.num.div_ceil(self.den)
    }

    /// The value rounded down to a whole number (a ceiling in whole units).
    pub fn floor(&self) -> u128 {
        self.num / self.den
    }

    /// The value in MiB, rounded down.
    pub fn floor_mib(&self) -> u128 {
        self.num / self.den.saturating_mul(MIB)
    }

    /// Whether `self / below` is above `ratio`, exactly (`below` not zero). Quantities
    /// too precise to compare in 128 bits count as above it (a LimitRange refuses them).
    pub fn ratio_above(&self, below: &Quantity, ratio: &Quantity) -> bool {
        // self > ratio * below, with ratio * below as one fraction.
        match (
            ratio.num.checked_mul(below.num),
            ratio.den.checked_mul(below.den),
        ) {
            (Some(num), Some(den)) => *self > Quantity { num, den },
            _ => true,
        }
    }

    /// The value as a float, for messages.
    pub fn as_f64(&self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// The value in MiB, rounded up (memory).
    pub fn ceil_mib(&self) -> u128 {
        self.num.div_ceil(self.den.saturating_mul(MIB))
    }

    /// The value in thousandths, rounded up (CPU in millicores).
    pub fn ceil_milli(&self) -> u128 {
        self.num.saturating_mul(1000).div_ceil(self.den)
    }

    /// The value if it is a whole number.
    pub fn whole(&self) -> Option<u128> {
        (self.num % self.den == 0).then(|| self.num / self.den)
    }

    pub fn is_zero(&self) -> bool {
        self.num == 0
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // a/b vs c/d  <=>  a*d vs c*b, exactly in 256 bits.
        let wide = |x: u128, y: u128| -> (u128, u128) {
            let (xh, xl) = (x >> 64, x & u128::from(u64::MAX));
            let (yh, yl) = (y >> 64, y & u128::from(u64::MAX));
            let ll = xl * yl;
            let lh = xl * yh;
            let hl = xh * yl;
            let hh = xh * yh;
            let mid = (ll >> 64) + (lh & u128::from(u64::MAX)) + (hl & u128::from(u64::MAX));
            let lo = (ll & u128::from(u64::MAX)) | (mid << 64);
            let hi = hh + (lh >> 64) + (hl >> 64) + (mid >> 64);
            (hi, lo)
        };
        wide(self.num, other.den).cmp(&wide(other.num, self.den))
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.whole() {
            Some(w) => write!(f, "{w}"),
            None => write!(f, "{}m", self.ceil_milli()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn cpu_rounds_up_to_whole_cores() {
        assert_eq!(q("500m").ceil(), 1);
        assert_eq!(q("1").ceil(), 1);
        assert_eq!(q("1.5").ceil(), 2);
        assert_eq!(q("2000m").ceil(), 2);
        assert_eq!(q("2001m").ceil(), 3);
        assert_eq!(q("0.1").ceil_milli(), 100);
        assert_eq!(q("1e3").ceil(), 1000);
        assert_eq!(q("100e-3").ceil_milli(), 100);
        assert_eq!(q(".5").ceil_milli(), 500);
        assert_eq!(q("+4").ceil(), 4);
        assert!(q("0").is_zero());
    }

    #[test]
    fn memory_in_mib_rounds_up() {
        assert_eq!(q("200Mi").ceil_mib(), 200);
        assert_eq!(q("1Gi").ceil_mib(), 1024);
        assert_eq!(q("1.5Gi").ceil_mib(), 1536);
        assert_eq!(q("1G").ceil_mib(), 954); // 10^9 / 2^20 = 953.67
        assert_eq!(q("128974848").ceil_mib(), 123);
        assert_eq!(q("129e6").ceil_mib(), 124); // 123.02
        assert_eq!(q("123Mi").ceil_mib(), 123);
        assert_eq!(q("1Ki").ceil_mib(), 1);
        assert_eq!(q("1Ti").ceil_mib(), 1 << 20);
        assert_eq!(
            q("2E").ceil_mib(),
            2_000_000_000_000_000_000u128.div_ceil(1 << 20)
        );
    }

    #[test]
    fn device_counts_must_be_whole() {
        assert_eq!(q("1").whole(), Some(1));
        assert_eq!(q("8").whole(), Some(8));
        assert_eq!(q("2k").whole(), Some(2000));
        assert_eq!(q("500m").whole(), None);
        assert_eq!(q("1.0").whole(), Some(1));
    }

    #[test]
    fn bad_quantities_say_why() {
        let e = |s: &str| Quantity::parse(s).unwrap_err().to_string();
        assert_eq!(
            e("-1"),
            "`-1` is not a quantity: negative quantities are not allowed"
        );
        assert!(e("1GB").contains("unknown suffix `GB`"), "{}", e("1GB"));
        assert!(e("Gi").contains("no number"));
        assert!(e("1.2.3").contains("more than one decimal point"));
        assert!(e("1e99").contains("too large"));
        assert!(e("99999999999999999999999999999999999999999").contains("too large"));
    }

    #[test]
    fn quantities_compare_exactly() {
        assert!(q("1") > q("999m"));
        assert!(q("1Gi") > q("1G"));
        assert_eq!(q("1000m").cmp(&q("1")), std::cmp::Ordering::Equal);
        assert!(q("1Ei") > q("1E"));
        assert_eq!(q("1.5").to_string(), "1500m");
        assert_eq!(q("2").to_string(), "2");
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// A booked amount is never below what was asked, and never a unit more.
            #[test]
            fn rounding_up_books_at_least_the_request(milli in 0u64..10_000_000, bytes in 0u64..(1 << 40)) {
                let cpu = q(&format!("{milli}m"));
                prop_assert_eq!(cpu.ceil(), u128::from(milli.div_ceil(1000)));
                prop_assert!(cpu.ceil() * 1000 >= u128::from(milli));
                let mem = q(&bytes.to_string());
                prop_assert!(mem.ceil_mib() * MIB >= u128::from(bytes));
                prop_assert!(mem.ceil_mib() * MIB < u128::from(bytes) + MIB);
            }

            /// Every suffix scales exactly: `n<suffix>` is n times the suffix's unit.
            #[test]
            fn suffixes_scale_exactly(n in 0u64..1_000_000, i in 0usize..7) {
                let (bin, dec) = (["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][i], ["", "k", "M", "G", "T", "P", "E"][i]);
                let b = q(&format!("{n}{bin}"));
                let d = q(&format!("{n}{dec}"));
                prop_assert_eq!(b.whole(), Some(u128::from(n) << (10 * i)));
                prop_assert_eq!(d.whole(), Some(u128::from(n) * 1000u128.pow(i as u32)));
                prop_assert_eq!(q(&format!("{n}e{}", 3 * i)), d);
            }
        }
    }
}
