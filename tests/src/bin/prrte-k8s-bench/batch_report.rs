//! The batch-Job benchmark's output: its table, its part of the JSON report, and its plot
//! (one stacked bar per pod count: where a Job's seconds went, beside the same command in a
//! running DVM).

use crate::batch::{BatchRow, BatchSample};
use crate::host::PROFILE;
use crate::stats::{cell, median, stats};
use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;
use serde_json::Value;
use std::path::Path;

/// The goal for a Job's overhead beyond its pods' start-up and the command's own run, seconds.
pub const GOAL_OVERHEAD: f64 = 1.0;

/// The phases of a Job in order: name, how to read it off a sample, its key in the JSON
/// report, colour in the plot.
type Phase = (
    &'static str,
    fn(&BatchSample) -> f64,
    &'static str,
    RGBColor,
);
const PHASES: [Phase; 5] = [
    (
        "pods Ready",
        |s| s.pods_ready,
        "pods_ready_s",
        RGBColor(150, 150, 150),
    ),
    (
        "Ready -> command",
        |s| s.to_command,
        "ready_to_command_s",
        RGBColor(235, 150, 20),
    ),
    ("command", |s| s.command, "command_s", RGBColor(30, 90, 210)),
    (
        "-> workers done",
        |s| s.to_workers_done,
        "ended_to_workers_done_s",
        RGBColor(150, 60, 170),
    ),
    (
        "-> Complete",
        |s| s.to_complete,
        "workers_done_to_complete_s",
        RGBColor(210, 60, 120),
    ),
];
const IN_DVM: RGBColor = RGBColor(30, 150, 60);

fn col(row: &BatchRow, f: fn(&BatchSample) -> f64) -> Vec<f64> {
    row.jobs.iter().map(f).collect()
}

/// Each Job's overhead against the median of the same command in the running DVM.
fn overheads(row: &BatchRow) -> Vec<f64> {
    let in_dvm = median(&row.in_dvm);
    row.jobs.iter().map(|s| s.overhead(in_dvm)).collect()
}

pub fn print_batch(rows: &[BatchRow], runs: usize) {
    if rows.is_empty() {
        return;
    }
    println!();
    println!("Batch Job end to end [{PROFILE} build of the images' agent and components]: `prrte-k8s manifest --pods N -- mpirun -n N true`");
    println!("applied until the Job is Complete; seconds, median of {runs} runs [min-max]. \"in DVM\": `prrte-k8s prun -n N true` into a running");
    println!("DVM of N pods; overhead: apply -> Complete minus pods Ready minus in DVM (goal <= {GOAL_OVERHEAD} s, up to 64 pods)");
    let mut head = format!("{:>5} | {:>5}", "pods", "load");
    for (name, ..) in PHASES {
        head += &format!(" | {name:<19}");
    }
    head += &format!(" | {:<19} | {:<19} | {:<19}", "total", "in DVM", "overhead");
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for row in rows {
        let mut line = format!("{:>5} | {:>5.2}", row.pods, row.load);
        for (_, f, ..) in PHASES {
            line += &format!(" | {:<19}", cell(&col(row, f), 3));
        }
        line += &format!(
            " | {:<19} | {:<19} | {:<19}",
            cell(&col(row, |s| s.total), 3),
            cell(&row.in_dvm, 3),
            cell(&overheads(row), 3)
        );
        println!("{line}");
    }
}

/// The report's `batch` part: every sample, medians and ranges per phase.
pub fn batch_json(rows: &[BatchRow]) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|row| {
            let over = overheads(row);
            let mut j = serde_json::json!({
                "pods": row.pods,
                "load_avg_1m": row.load,
                "command": format!("mpirun -n {} true", row.pods),
                "total_s": stats(&col(row, |s| s.total)),
                "in_running_dvm_s": stats(&row.in_dvm),
                "overhead_s": stats(&over),
                "overhead_goal_met": median(&over) <= GOAL_OVERHEAD,
            });
            for (_, f, key, _) in PHASES {
                j[key] = stats(&col(row, f));
            }
            j
        })
        .collect();
    serde_json::json!({"goal_overhead_s": GOAL_OVERHEAD, "rows": rows})
}

/// Per pod count in the report's `batch` part: pods, the phases' medians, the in-DVM median.
fn bars(batch: &Value) -> Result<Vec<(u64, Vec<f64>, f64)>> {
    let rows = batch["rows"]
        .as_array()
        .filter(|r| !r.is_empty())
        .context("the report has no batch rows to plot")?;
    rows.iter()
        .map(|r| {
            let pods = r["pods"].as_u64().context("a batch row without pods")?;
            let m = |key: &str| {
                r[key]["median"]
                    .as_f64()
                    .with_context(|| format!("batch at {pods} pods: no {key}.median"))
            };
            let phases = PHASES.iter().map(|p| m(p.2)).collect::<Result<_>>()?;
            Ok((pods, phases, m("in_running_dvm_s")?))
        })
        .collect()
}

/// A stacked bar of a Job's median phases per pod count, with the in-DVM run beside it, from
/// the report's `batch` part.
pub fn write_batch_png(batch: &Value, out: &Path) -> Result<()> {
    crate::plot::fonts()?;
    let bars = bars(batch)?;
    let root = BitMapBackend::new(out, crate::plot::SIZE).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e}", out.display());
    root.fill(&WHITE).map_err(err)?;
    let top = bars
        .iter()
        .map(|b| b.1.iter().sum::<f64>().max(b.2))
        .fold(0.5, f64::max)
        * 1.15;
    let n = bars.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Batch Job: apply until Complete (mpirun -n <pods> true), medians",
            ("sans-serif", 24).into_font().style(FontStyle::Bold),
        )
        .margin(20)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..3.0 * n, 0.0..top)
        .map_err(err)?;
    let pods_at = |x: &f64| {
        let i = (x / 3.0).floor() as usize;
        match bars.get(i) {
            Some(b) if (x - 3.0 * i as f64 - 1.0).abs() < 0.01 => format!("{} pods", b.0),
            _ => String::new(),
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len() * 6 + 1)
        .x_label_formatter(&pods_at)
        .y_desc("seconds")
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(err)?;
    for (k, (name, _, _, color)) in PHASES.iter().enumerate() {
        let rects = bars.iter().enumerate().map(|(i, b)| {
            let below: f64 = b.1[..k].iter().sum();
            let x = 3.0 * i as f64 + 0.2;
            Rectangle::new([(x, below), (x + 1.2, below + b.1[k])], color.filled())
        });
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    let dvm = bars.iter().enumerate().map(|(i, b)| {
        let x = 3.0 * i as f64 + 1.5;
        Rectangle::new([(x, 0.0), (x + 1.2, b.2)], IN_DVM.filled())
    });
    chart
        .draw_series(dvm)
        .map_err(err)?
        .label("same command in a running DVM")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], IN_DVM.filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
