//! Medians, ranges and the figures of one method in a row.

use crate::results::{Row, Sample, Variant};

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

pub fn median_u(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

pub fn min_max(v: &[f64]) -> (f64, f64) {
    (
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

/// "median [min-max]" with `digits` decimals.
pub fn cell(v: &[f64], digits: usize) -> String {
    let (lo, hi) = min_max(v);
    format!("{:.digits$} [{:.digits$}-{:.digits$}]", median(v), lo, hi)
}

pub fn col(row: &Row, v: Variant, f: impl Fn(&Sample) -> f64) -> Option<Vec<f64>> {
    row.times
        .iter()
        .find(|t| t.0 == v)
        .map(|t| t.1.iter().map(&f).collect())
}

pub fn stats(v: &[f64]) -> serde_json::Value {
    let (lo, hi) = min_max(v);
    serde_json::json!({"median": median(v), "min": lo, "max": hi, "samples": v})
}

/// The 1-minute load averages seen at the start of the timed runs of `rows`.
pub fn loads<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Vec<f64> {
    rows.into_iter()
        .flat_map(|r| r.times.iter().flat_map(|t| t.1.iter().map(|s| s.load)))
        .filter(|l| l.is_finite())
        .collect()
}
