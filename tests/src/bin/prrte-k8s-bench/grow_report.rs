//! The grow benchmark's output: its table and its part of the JSON report.

use crate::grow::{AllocSample, GrowRow, GrowSample, START};
use crate::host::PROFILE;
use crate::stats::{cell, median, stats};
use serde_json::Value;

/// The phases of a grow in order: name, how to read it off a sample, its key in the JSON.
type Phase = (&'static str, fn(&GrowSample) -> f64, &'static str);
const PHASES: [Phase; 4] = [
    ("request -> patched", |s| s.to_patch, "request_to_patched_s"),
    ("patched -> Ready", |s| s.to_ready, "patched_to_ready_s"),
    ("Ready -> in DVM", |s| s.to_dvm, "ready_to_in_dvm_s"),
    ("total", |s| s.total, "total_s"),
];

fn col(row: &GrowRow, f: fn(&GrowSample) -> f64) -> Vec<f64> {
    row.grows.iter().map(f).collect()
}

fn alloc_col(row: &GrowRow, f: fn(&AllocSample) -> f64) -> Vec<f64> {
    row.allocs.iter().map(f).collect()
}

pub fn print_grow(rows: &[GrowRow], runs: usize) {
    if rows.is_empty() {
        return;
    }
    println!();
    println!("Growing a running DVM [{PROFILE} build]: `prrte-k8s grow N` in a DVM of {START} agent pods (elastic Indexed Job, a fresh");
    println!("DVM per run) until the new prteds are in the DVM; seconds, median of {runs} runs [min-max]. \"plain start\": DVM-ready");
    println!("time through the agents of a DVM of the grown size ({START} + N pods), same run; \"EXTEND N\" / \"RELEASE N\": the same");
    println!("growth as a PMIx allocation request from a tool in pod 1 (a fresh DVM per run), then its release, request to answer");
    let mut head = format!("{:>5} | {:>5} | {:>5}", "new", "pods", "load");
    for (name, ..) in PHASES {
        head += &format!(" | {name:<19}");
    }
    head += &format!(" | {:<19}", "plain start");
    head += &format!(" | {:<19} | {:<19}", "EXTEND N (PMIx)", "RELEASE N (PMIx)");
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for row in rows {
        let mut line = format!(
            "{:>5} | {:>5} | {:>5.2}",
            row.new_pods,
            START + row.new_pods,
            row.load
        );
        for (_, f, _) in PHASES {
            line += &format!(" | {:<19}", cell(&col(row, f), 3));
        }
        line += &format!(" | {:<19}", cell(&row.plain, 3));
        line += &format!(
            " | {:<19} | {:<19}",
            cell(&alloc_col(row, |a| a.extend), 3),
            cell(&alloc_col(row, |a| a.release), 3)
        );
        println!("{line}");
    }
}

/// The report's `grow` part: every sample, medians and ranges per phase.
pub fn grow_json(rows: &[GrowRow]) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|row| {
            let daemons: Vec<usize> = row.grows.iter().map(|s| s.daemons).collect();
            let mut j = serde_json::json!({
                "new_pods": row.new_pods,
                "start_pods": START,
                "pods_after": START + row.new_pods,
                "load_avg_1m": row.load,
                "daemons_after": daemons,
                "plain_dvm_ready_s": stats(&row.plain),
                "ratio_total_over_plain": median(&col(row, |s| s.total)) / median(&row.plain),
                "alloc_extend_s": stats(&alloc_col(row, |a| a.extend)),
                "alloc_release_s": stats(&alloc_col(row, |a| a.release)),
                "ratio_extend_over_grow": median(&alloc_col(row, |a| a.extend)) / median(&col(row, |s| s.total)),
            });
            for (_, f, key) in PHASES {
                j[key] = stats(&col(row, f));
            }
            j
        })
        .collect();
    serde_json::json!({"start_pods": START, "rows": rows})
}
