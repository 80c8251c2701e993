//! `--controller-scale N`: N MPIJobs created at once through `prrte-k8s controller`, suspended
//! (no pods), half of them another controller's, the controller killed with SIGKILL once half
//! of its own are done and started again (`sandbox::harness::controller::scale`): how long
//! until all of its own have their objects and status, its CPU seconds, RSS and API requests
//! per MPIJob of its own, and whether each was done once and the other's left alone.

use anyhow::{bail, Result};
use sandbox::harness::controller::scale::{run, ScaleOptions, ScaleReport};
use sandbox::harness::TestDir;
use serde_json::{json, Value};
use std::time::Duration;

/// Runs it; an error when anything was done twice, left undone or touched of the other's.
pub async fn bench_controller_scale(mpijobs: usize, limit: Duration) -> Result<ScaleReport> {
    let dir = TestDir::new("bench-controller-scale")?;
    let r = run(&ScaleOptions {
        mpijobs,
        kill_midway: true,
        limit,
        dir: dir.path().to_path_buf(),
    })
    .await?;
    if !(r.incomplete.is_empty()
        && r.duplicates.is_empty()
        && r.written_twice.is_empty()
        && r.foreign_touched.is_empty())
    {
        bail!(
            "not done once each: incomplete {:?}, duplicates {:?}, written twice {:?}, the other's touched {:?}",
            r.incomplete,
            r.duplicates,
            r.written_twice,
            r.foreign_touched
        );
    }
    Ok(r)
}

pub fn print_controller_scale(r: &ScaleReport) {
    println!();
    println!(
        "{} MPIJobs created at once, suspended: {} the controller's, {} another controller's",
        r.managed + r.foreign,
        r.managed,
        r.foreign
    );
    if let Some((n, s)) = r.killed_after {
        println!("the controller killed (SIGKILL) at {s:.1} s with {n} of its own done, and started again");
    }
    println!(
        "all of its own with their objects and status after {:.1} s; each made and written once, none of the other's touched",
        r.seconds
    );
    println!(
        "the controller: {:.2} s of CPU (both processes), RSS {} KiB before the MPIJobs, {} KiB at the end, {} KiB at its peak",
        r.cpu_seconds, r.idle_rss_kib, r.rss_kib, r.peak_rss_kib
    );
    let verbs: Vec<String> = r.requests.iter().map(|(v, n)| format!("{v} {n}")).collect();
    println!(
        "API requests: {} ({}), {:.2} per MPIJob of its own",
        r.total_requests(),
        verbs.join(", "),
        r.requests_per_managed()
    );
}

pub fn controller_scale_json(r: &ScaleReport) -> Value {
    json!({
        "mpijobs": r.managed + r.foreign,
        "managed": r.managed,
        "foreign": r.foreign,
        "killed_after": r.killed_after.map(|(n, s)| json!({"done": n, "s": s})),
        "all_done_s": r.seconds,
        "controller_cpu_s": r.cpu_seconds,
        "controller_idle_rss_kib": r.idle_rss_kib,
        "controller_rss_kib": r.rss_kib,
        "controller_peak_rss_kib": r.peak_rss_kib,
        "requests": r.requests,
        "requests_per_managed": r.requests_per_managed(),
    })
}
