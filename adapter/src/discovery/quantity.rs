//! Parsing of Kubernetes resource quantities ("500m", "2", "1.5", "1Ki", "1e3").
//!
//! k8s-openapi represents a `Quantity` as its serialized string, so the slot computation needs
//! its own parser. This follows the grammar of the API server's `resource.Quantity`:
//!
//! ```text
//! quantity        ::= signedNumber suffix
//! signedNumber    ::= number | sign number
//! sign            ::= "+" | "-"
//! number          ::= digits | digits "." digits | digits "." | "." digits
//! suffix          ::= binarySI | decimalExponent | decimalSI
//! binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! decimalSI       ::= n | u | m | "" | k | M | G | T | P | E
//! decimalExponent ::= "e" signedInteger | "E" signedInteger
//! ```
//!
//! Values are kept exact (all digits as an integer, a power of ten and a power of two) so that
//! `"1.5"` and `"1500m"` compare equal and no float rounding creeps into slot counts.

use std::fmt;

/// A parsed, exact Kubernetes quantity: `sign * digits * 10^exp10 * 2^exp2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quantity {
    negative: bool,
    digits: u128,
    exp10: i32,
    exp2: u32,
}

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QuantityError {
    pub input: String,
    pub reason: &'static str,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid quantity {:?}: {}", self.input, self.reason)
    }
}

impl std::error::Error for QuantityError {}

/// The most significant digits a quantity may carry (u128 holds 38 decimal digits).
const MAX_DIGITS: usize = 38;

impl Quantity {
    /// Parses a quantity string exactly as the API server serializes it.
    pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
        let err = |reason| QuantityError {
            input: input.to_string(),
            reason,
        };
        let bytes = input.as_bytes();
        if bytes.is_empty() {
            return Err(err("empty string"));
        }
        let mut pos = 0;
        let mut negative = false;
        if bytes[0] == b'+' || bytes[0] == b'-' {
            negative = bytes[0] == b'-';
            pos = 1;
        }
        let int_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        let int_part = &input[int_start..pos];
        let mut frac_part = "";
        if pos < bytes.len() && bytes[pos] == b'.' {
            pos += 1;
            let frac_start = pos;
            while pos < bytes.len() && bytes[pos].is_ascii_digit() {
                pos += 1;
            }
            frac_part = &input[frac_start..pos];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(err("no digits before the unit"));
        }
        let (suffix_exp10, exp2) = parse_suffix(&input[pos..]).ok_or_else(|| {
            err("unknown unit suffix (expected one of n, u, m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent like e3)")
        })?;

        // Drop leading zeros so that "0000000000000000000000000000000000000001" still fits.
        let all_digits = format!("{int_part}{frac_part}");
        let significant = all_digits.trim_start_matches('0');
        // Trailing zeros of the fraction carry no value either.
        let mut exp10 = suffix_exp10
            .checked_sub(i32::try_from(frac_part.len()).map_err(|_| err("too many digits"))?)
            .ok_or_else(|| err("exponent out of range"))?;
        let mut significant = significant.to_string();
        while significant.len() > 1 && significant.ends_with('0') {
            significant.pop();
            exp10 = exp10
                .checked_add(1)
                .ok_or_else(|| err("exponent out of range"))?;
        }
        if significant.len() > MAX_DIGITS {
            return Err(err("too many significant digits"));
        }
        let digits: u128 = if significant.is_empty() {
            0
        } else {
            significant.parse().map_err(|_| err("invalid digits"))?
        };
        Ok(Quantity {
            negative: negative && digits != 0,
            digits,
            exp10,
            exp2,
        })
    }

    /// True for quantities below zero.
    #[cfg(test)]
    pub(crate) fn is_negative(&self) -> bool {
        self.negative
    }

    /// The value in thousandths, rounded up (as the API server's `MilliValue`), saturating at
    /// `u128::MAX`. Negative quantities give `None`.
    pub(crate) fn millis_ceil(&self) -> Option<u128> {
        if self.negative {
            return None;
        }
        if self.digits == 0 {
            return Some(0);
        }
        // digits * 2^exp2 * 10^(exp10 + 3)
        let mut value = self.digits;
        for _ in 0..self.exp2 {
            value = match value.checked_mul(2) {
                Some(v) => v,
                None => return Some(u128::MAX),
            };
        }
        let e = i64::from(self.exp10) + 3;
        if e >= 0 {
            for _ in 0..e {
                value = match value.checked_mul(10) {
                    Some(v) => v,
                    None => return Some(u128::MAX),
                };
            }
            Some(value)
        } else {
            let mut divisor: u128 = 1;
            for _ in 0..(-e) {
                divisor = match divisor.checked_mul(10) {
                    Some(d) => d,
                    // The divisor exceeds any possible value: a positive remainder rounds up to 1.
                    None => return Some(1),
                };
            }
            Some(value / divisor + u128::from(!value.is_multiple_of(divisor)))
        }
    }

    /// The whole units contained in the quantity, rounded down ("1.5" -> 1, "2500m" -> 2),
    /// clamped to `u64`. Negative quantities give `None`.
    #[cfg(test)]
    pub(crate) fn whole_floor(&self) -> Option<u64> {
        self.millis_ceil()
            .map(|m| u64::try_from(m / 1000).unwrap_or(u64::MAX))
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

/// Returns (power of ten, power of two) for a unit suffix.
fn parse_suffix(suffix: &str) -> Option<(i32, u32)> {
    let known = match suffix {
        "" => Some((0, 0)),
        "n" => Some((-9, 0)),
        "u" => Some((-6, 0)),
        "m" => Some((-3, 0)),
        "k" => Some((3, 0)),
        "M" => Some((6, 0)),
        "G" => Some((9, 0)),
        "T" => Some((12, 0)),
        "P" => Some((15, 0)),
        "E" => Some((18, 0)),
        "Ki" => Some((0, 10)),
        "Mi" => Some((0, 20)),
        "Gi" => Some((0, 30)),
        "Ti" => Some((0, 40)),
        "Pi" => Some((0, 50)),
        "Ei" => Some((0, 60)),
        _ => None,
    };
    if known.is_some() {
        return known;
    }
    let rest = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))?;
    let digits = rest
        .strip_prefix('+')
        .or_else(|| rest.strip_prefix('-'))
        .unwrap_or(rest);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let exp: i32 = rest.parse().ok()?;
    // The API server bounds exponents far below this; anything larger is nonsense.
    if exp.abs() > 1000 {
        return None;
    }
    Some((exp, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn millis(s: &str) -> u128 {
        Quantity::parse(s)
            .unwrap_or_else(|e| panic!("{e}"))
            .millis_ceil()
            .unwrap()
    }

    #[test]
    fn plain_integers_and_decimals() {
        assert_eq!(millis("2"), 2000);
        assert_eq!(millis("0"), 0);
        assert_eq!(millis("1.5"), 1500);
        assert_eq!(millis("0.25"), 250);
        assert_eq!(millis(".5"), 500);
        assert_eq!(millis("3."), 3000);
        assert_eq!(millis("+4"), 4000);
        assert_eq!(millis("007"), 7000);
        assert_eq!(millis("1.000"), 1000);
    }

    #[test]
    fn decimal_si_suffixes() {
        assert_eq!(millis("500m"), 500);
        assert_eq!(millis("1500m"), 1500);
        assert_eq!(millis("2k"), 2_000_000);
        assert_eq!(millis("1M"), 1_000_000_000);
        assert_eq!(millis("1G"), 1_000_000_000_000);
        assert_eq!(millis("1E"), 1_000_000_000_000_000_000_000);
        // Sub-milli values round up, as the API server's MilliValue does.
        assert_eq!(millis("1u"), 1);
        assert_eq!(millis("1500000n"), 2);
        assert_eq!(millis("1000000n"), 1);
        assert_eq!(millis("0.0001"), 1);
    }

    #[test]
    fn binary_si_suffixes() {
        assert_eq!(millis("1Ki"), 1_024_000);
        assert_eq!(millis("2Mi"), 2 * 1024 * 1024 * 1000);
        assert_eq!(millis("1.5Gi"), 1536 * 1024 * 1024 * 1000);
        assert_eq!(
            Quantity::parse("1Ei").unwrap().whole_floor(),
            Some(1u64 << 60)
        );
    }

    #[test]
    fn exponents() {
        assert_eq!(millis("1e3"), 1_000_000);
        assert_eq!(millis("1E3"), 1_000_000);
        assert_eq!(millis("5e-1"), 500);
        assert_eq!(millis("2.5e+2"), 250_000);
        assert_eq!(millis("1e-3"), 1);
    }

    #[test]
    fn whole_units_round_down() {
        let whole = |s: &str| Quantity::parse(s).unwrap().whole_floor().unwrap();
        assert_eq!(whole("1.5"), 1);
        assert_eq!(whole("2500m"), 2);
        assert_eq!(whole("999m"), 0);
        assert_eq!(whole("4"), 4);
        assert_eq!(whole("64"), 64);
    }

    #[test]
    fn equal_values_parse_equal() {
        assert_eq!(
            Quantity::parse("1.5").unwrap(),
            Quantity::parse("1500m").unwrap()
        );
        assert_eq!(
            Quantity::parse("1k").unwrap(),
            Quantity::parse("1000").unwrap()
        );
        assert_eq!(
            Quantity::parse("-0").unwrap(),
            Quantity::parse("0").unwrap()
        );
    }

    #[test]
    fn negatives_have_no_millis() {
        let q = Quantity::parse("-1").unwrap();
        assert!(q.is_negative());
        assert_eq!(q.millis_ceil(), None);
        assert_eq!(q.whole_floor(), None);
    }

    #[test]
    fn huge_values_saturate() {
        assert_eq!(millis("1e300"), u128::MAX);
        assert_eq!(
            Quantity::parse("1e300").unwrap().whole_floor(),
            Some(u64::MAX)
        );
        assert_eq!(millis("999999999999999999999999999999999999Ei"), u128::MAX);
        // Tiny positive values still round up to one milli.
        assert_eq!(millis("1e-200"), 1);
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "", "m", "-", ".", "1.2.3", "1x", "1 ", " 1", "1KI", "1ki", "1e", "1e+", "1ee3", "Ki",
            "1.5.m", "1e3.5", "--1", "0x10", "1,5",
        ] {
            let e = Quantity::parse(bad).expect_err(bad);
            assert_eq!(e.input, bad);
            assert!(e.to_string().contains("invalid quantity"), "{e}");
        }
        assert!(Quantity::parse("1234567890123456789012345678901234567890").is_err());
        assert!(Quantity::parse("1e5000").is_err());
    }
}
