//! Medians and ranges of timed runs, as printed and as JSON.

use serde_json::{json, Value};

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn range(v: &[f64]) -> (f64, f64) {
    (
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

/// "median [min-max]" with `prec` decimals.
pub(crate) fn stat(v: &[f64], prec: usize) -> String {
    let (lo, hi) = range(v);
    format!("{:.prec$} [{lo:.prec$}-{hi:.prec$}]", median(v))
}

pub(crate) fn stat_json(v: &[f64]) -> Value {
    let (lo, hi) = range(v);
    json!({"median": median(v), "min": lo, "max": hi, "samples": v})
}
