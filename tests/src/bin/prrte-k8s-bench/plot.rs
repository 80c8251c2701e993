//! The PNG plot of DVM-ready time against pod count on log-log axes (so that a cost growing
//! faster than another shows as a steeper line), one line per launch method (median, with the
//! min-max range as a bar), drawn from the benchmark's JSON report so that a plot can be
//! redrawn from a saved report (`--plot-from`). Text goes through plotters' `ab_glyph` backend
//! with DejaVu Sans embedded in the binary (crate `dejavu`): no fontconfig, no system fonts.
use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::combinators::{BindKeyPoints, LogCoord, WithKeyPoints};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;
use std::path::Path;
use std::sync::OnceLock;

/// Plot size in pixels.
pub const SIZE: (u32, u32) = (960, 600);

/// Methods in drawing order (the report's tags) with their colours.
pub const METHODS: [(&str, RGBColor); 4] = [
    ("ssh", RGBColor(200, 40, 40)),
    ("ssh-notree", RGBColor(235, 150, 20)),
    ("agent", RGBColor(30, 90, 210)),
    ("lower-bound", RGBColor(30, 150, 60)),
];

/// Register the embedded font as plotters' "sans-serif" (once per process).
pub fn fonts() -> Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .is_ok()
            && plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold())
                .is_ok()
    });
    if !*ok {
        bail!("the embedded DejaVu Sans font could not be loaded");
    }
    Ok(())
}

/// One method's points: (pods, median, min, max) of the DVM-ready time in seconds.
struct Series {
    label: String,
    color: RGBColor,
    points: Vec<(f64, f64, f64, f64)>,
}

fn series(report: &Value) -> Result<Vec<Series>> {
    let rows = report["rows"]
        .as_array()
        .filter(|r| !r.is_empty())
        .context("the report has no rows to plot")?;
    let mut out = Vec::new();
    for (tag, color) in METHODS {
        let mut s = Series {
            label: tag.to_string(),
            color,
            points: Vec::new(),
        };
        for row in rows {
            let pods = row["pods"].as_f64().context("a row without pods")?;
            let m = &row["methods"][tag];
            if m.is_null() {
                continue;
            }
            if let Some(l) = m["label"].as_str() {
                s.label = l.to_string();
            }
            let r = &m["dvm_ready_s"];
            let get = |k: &str| {
                r[k].as_f64()
                    .with_context(|| format!("{tag} at {pods} pods: no dvm_ready_s.{k}"))
            };
            s.points
                .push((pods, get("median")?, get("min")?, get("max")?));
        }
        if !s.points.is_empty() {
            out.push(s);
        }
    }
    if out.is_empty() {
        bail!("the report's rows hold no method with DVM-ready times");
    }
    Ok(out)
}

/// The title's second line: profile, cores, load and runs, from the report.
fn subtitle(report: &Value) -> String {
    let profile = report["profile"].as_str().unwrap_or("unknown");
    let cores = report["machine"]["cores"]
        .as_u64()
        .or_else(|| report["cores"].as_u64())
        .unwrap_or(0);
    let runs = report["runs"].as_u64().unwrap_or(0);
    let load = &report["load_avg_1m"];
    let load = match (load["min"].as_f64(), load["max"].as_f64()) {
        (Some(lo), Some(hi)) => format!(", load average {lo:.1}-{hi:.1}"),
        _ => String::new(),
    };
    format!("{profile} build, {cores} cores{load}; median of {runs} runs, bars: min-max")
}

/// Draw the plot of `report` onto `root`.
pub fn draw_on<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, report: &Value) -> Result<()> {
    fonts()?;
    let all = series(report)?;
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("drawing the plot: {e}");
    root.fill(&WHITE).map_err(err)?;
    let pods = all.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (min_pods, max_pods) = pods.fold((f64::INFINITY, 0.0), |(lo, hi), x| {
        (f64::min(lo, x), f64::max(hi, x))
    });
    let max_t = all
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.3))
        .fold(0.0, f64::max);
    // Log axes: bounded away from 0 (a min of 0 s would be at minus infinity).
    let min_t = all
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.2))
        .filter(|t| *t > 0.0)
        .fold(f64::INFINITY, f64::min)
        .min(max_t)
        .max(1e-3);
    let area = root
        .titled(
            "DVM-ready time against pods (log-log): prte start until \"DVM ready\"",
            ("sans-serif", 26).into_font().style(FontStyle::Bold),
        )
        .map_err(err)?;
    let mut chart = ChartBuilder::on(&area)
        .caption(subtitle(report), ("sans-serif", 17))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (min_pods / 1.3..max_pods * 1.6)
                .log_scale()
                .with_key_points(pod_ticks(&all)),
            (min_t / 1.5..(max_t * 1.5).max(min_t * 10.0))
                .log_scale()
                .with_key_points(second_ticks(min_t / 1.5, max_t * 1.5)),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("pods (one prted each), log scale")
        .y_desc("seconds, log scale")
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 15))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{}", (y * 1e3).round() / 1e3))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(err)?;
    for s in &all {
        draw_method(&mut chart, s).map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// The chart's coordinates: pods against seconds, both on log scales.
type Chart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<WithKeyPoints<LogCoord<f64>>, WithKeyPoints<LogCoord<f64>>>>;

/// The x axis' labels: the pod counts measured.
fn pod_ticks(all: &[Series]) -> Vec<f64> {
    let mut v: Vec<f64> = all
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// The y axis' labels: 1, 2 and 5 times the powers of ten from `lo` to `hi` seconds.
fn second_ticks(lo: f64, hi: f64) -> Vec<f64> {
    (-3..4)
        .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
        .filter(|t| (lo..=hi).contains(t))
        .collect()
}

/// One method's line, its min-max bars, its points and the label of its last median.
fn draw_method<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    s: &Series,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let color = s.color;
    chart
        .draw_series(LineSeries::new(
            s.points.iter().map(|p| (p.0, p.1)),
            color.stroke_width(3),
        ))?
        .label(s.label.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3)));
    chart.draw_series(s.points.iter().map(|p| {
        // A min of 0 has no place on a log axis: the bar starts at the median then.
        let lo = if p.2 > 0.0 { p.2 } else { p.1 };
        ErrorBar::new_vertical(p.0, lo, p.1, p.3, color.stroke_width(2), 10)
    }))?;
    chart.draw_series(
        s.points
            .iter()
            .map(|p| Circle::new((p.0, p.1), 5, color.filled())),
    )?;
    // The median at the largest pod count, right of its point.
    if let Some(last) = s.points.last() {
        chart.draw_series(std::iter::once(
            EmptyElement::at((last.0, last.1))
                + Text::new(
                    format!("{:.2} s", last.1),
                    (12, -8),
                    ("sans-serif", 15).into_font().color(&color),
                ),
        ))?;
    }
    Ok(())
}

/// Draw the plot of `report` as a PNG file.
pub fn write_png(report: &Value, path: &Path) -> Result<()> {
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw_on(&root, report).with_context(|| format!("plot {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn method(label: &str, med: f64, lo: f64, hi: f64) -> Value {
        json!({"label": label, "dvm_ready_s": {"median": med, "min": lo, "max": hi}})
    }

    fn report() -> Value {
        let row = |pods: u64, k: f64| {
            json!({"pods": pods, "methods": {
                "agent": method("agent (plm k8s)", 0.05 * k, 0.04 * k, 0.06 * k),
                "ssh": method("ssh (plm ssh, tree)", 0.2 * k, 0.18 * k, 0.25 * k),
                "lower-bound": method("lower bound (ns exec)", 0.04 * k, 0.03 * k, 0.05 * k),
            }})
        };
        json!({"profile": "release", "machine": {"cores": 2}, "runs": 3,
               "load_avg_1m": {"min": 1.5, "max": 2.5},
               "rows": [row(4, 4.0), row(16, 16.0), row(32, 32.0)]})
    }

    fn render(report: &Value) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, SIZE).into_drawing_area();
            draw_on(&root, report)?;
        }
        Ok(buf)
    }

    fn pixel(buf: &[u8], x: u32, y: u32) -> (u8, u8, u8) {
        let i = ((y * SIZE.0 + x) * 3) as usize;
        (buf[i], buf[i + 1], buf[i + 2])
    }

    #[test]
    fn title_text_is_rendered_with_the_embedded_font() {
        let buf = render(&report()).unwrap();
        // The title band (top 40 px): dark glyph pixels on white, centred.
        let mut dark = 0;
        for y in 0..40 {
            for x in 0..SIZE.0 {
                let (r, g, b) = pixel(&buf, x, y);
                if r < 100 && g < 100 && b < 100 {
                    dark += 1;
                }
            }
        }
        assert!(dark > 500, "only {dark} dark pixels in the title band");
        // Left and right margins of the band stay white: the title is text, not a fill.
        assert_eq!(pixel(&buf, 2, 20), (255, 255, 255));
        assert_eq!(pixel(&buf, SIZE.0 - 3, 20), (255, 255, 255));
    }

    #[test]
    fn every_method_in_the_report_is_drawn_in_its_colour() {
        let buf = render(&report()).unwrap();
        let count = |c: RGBColor| {
            buf.chunks(3)
                .filter(|p| p[0] == c.0 && p[1] == c.1 && p[2] == c.2)
                .count()
        };
        for (tag, c) in METHODS {
            let n = count(c);
            if tag == "ssh-notree" {
                assert_eq!(n, 0, "{tag} is not in the report but drawn");
            } else {
                assert!(n > 200, "{tag}: {n} pixels of its colour");
            }
        }
    }

    #[test]
    fn a_report_without_rows_is_refused_by_name() {
        let e = render(&json!({"rows": []})).unwrap_err();
        assert!(format!("{e:#}").contains("no rows"), "{e:#}");
        let e = render(&json!({"rows": [{"pods": 4, "methods": {}}]})).unwrap_err();
        assert!(format!("{e:#}").contains("no method"), "{e:#}");
    }

    #[test]
    fn the_log_axes_are_labelled_at_the_pod_counts_and_1_2_5_seconds() {
        let all = series(&report()).unwrap();
        assert_eq!(pod_ticks(&all), vec![4.0, 16.0, 32.0]);
        assert_eq!(second_ticks(0.15, 7.0), vec![0.2, 0.5, 1.0, 2.0, 5.0]);
        assert!(second_ticks(0.0011, 0.0019).is_empty());
    }

    #[test]
    fn write_png_writes_a_png_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bench.png");
        write_png(&report(), &p).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
        assert!(bytes.len() > 5_000, "PNG of {} bytes", bytes.len());
    }
}
