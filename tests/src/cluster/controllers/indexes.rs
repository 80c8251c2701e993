//! Index sets of Indexed Jobs: "0-3,5".

use std::collections::BTreeSet;

/// "0-3,5,7-8" from a set of indexes.
pub fn compress_indexes(set: &BTreeSet<i64>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut it = set.iter().peekable();
    while let Some(&start) = it.next() {
        let mut end = start;
        while it.peek().is_some_and(|&&n| n == end + 1) {
            end = *it.next().expect("peeked");
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

/// Parses "0-3,5" (a Job's index set); None if malformed.
pub fn parse_indexes(text: &str) -> Option<BTreeSet<i64>> {
    let mut out = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (i64, i64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(part.parse().ok()?);
            }
        }
    }
    Some(out)
}
