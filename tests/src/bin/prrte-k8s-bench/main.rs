//! prrte-k8s-bench: how long PRRTE takes to bring up a DVM across N sandbox pods, with the
//! daemons started through the agents (`plm k8s`) and, side by side on the same pods, through a
//! real sshd in every pod (`plm ssh`, the mpi-operator way) and through the lower bound (`plm
//! ssh` with an agent that execs the command straight into the pod's namespaces); then the
//! first job into the fresh DVM and the launcher's CPU time per daemon; then a batch Job end to
//! end in a sandbox cluster (`batch`), phase by phase; then a running DVM grown by N pods
//! (`prrte-k8s grow N`, `grow`), phase by phase, beside a plain DVM start of the grown size;
//! apart (`--controller-only`), an MPIJob through `prrte-k8s controller` against the same
//! through `prrte-k8s manifest --from-mpijob`, and the controller's cost for a burst of them.
//! Prints tables (medians
//! and ranges), writes JSON (`--json`) and a PNG plot of DVM-ready time against pods (`--plot`,
//! by default next to the JSON); not part of `make test` (run `make bench`, which builds and
//! runs the release profile). Needs root, like the sandbox. The agent and the components it
//! measures are the ones next to this executable, so they share its profile.
//!
//! This file is the command line; `run` runs the methods on the pods, `results` is what they
//! measure, `host` what they ran on, `stats` the medians and ranges, `tables`, `report` and
//! `plot` the output; `batch` and `batch_report` the batch Jobs; `grow` and `grow_report` the
//! grown DVMs; `phases` where a DVM start's seconds went and the pods' memory; `controller`
//! the MPIJobs through the controller; `controller_scale` thousands of them at once; `tasks`
//! many short tasks through one DVM (`--tasks`) against a prun or a Kubernetes Job per task.
#![forbid(unsafe_code)]
mod batch;
mod batch_report;
mod channel;
mod controller;
mod controller_scale;
mod grow;
mod grow_report;
mod host;
mod launch_round;
mod phases;
mod plot;
mod report;
mod results;
mod run;
mod stats;
mod tables;
mod tasks;

use anyhow::{bail, Context, Result};
use clap::Parser;
use host::PROFILE;
use report::json_report;
use results::{Row, Variant};
use run::{bench_pods, own_prteds, INTERRUPTED};
use sandbox::harness;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tables::print_tables;

/// DVM-ready time (prte started in pod 0 until it prints "DVM ready", i.e. every prted has
/// reported) for daemons started through the agents vs through an sshd in each pod.
#[derive(Parser, Debug)]
#[command(name = "prrte-k8s-bench")]
struct Args {
    /// Pod counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "4,16,32")]
    pods: Vec<usize>,
    /// Ranks of `true` per pod in a further job into each fresh DVM (after `hostname` at 2
    /// per pod and `true` at 1 per pod), oversubscribed: 94 for the largest published
    /// mpi-operator run (64 x 94); 0 (the default) leaves it out.
    #[arg(long, default_value_t = 0)]
    ranks_per_pod: usize,
    /// Timed runs per variant and pod count (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Quick check: 4 pods, 3 runs, a grow by 1 (overrides --pods, --runs and --grow).
    #[arg(long)]
    quick: bool,
    /// Leave out the third variant (ssh with plm_ssh_no_tree_spawn).
    #[arg(long)]
    no_no_tree: bool,
    /// Leave out ssh with PRRTE's tree spawn (e.g. for `--ranks-per-pod 94` at 32 pods and
    /// more, where such a job into that DVM has been seen not to end).
    #[arg(long)]
    no_ssh: bool,
    /// Seconds one DVM may take to become ready.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// A PRRTE parameter for every method's prte, NAME=VALUE (repeatable), passed as
    /// `--prtemca NAME VALUE`: e.g. `rml_base_radix=256` for a flat routing tree.
    #[arg(long = "prtemca", value_name = "NAME=VALUE", value_parser = mca_setting)]
    prtemca: Vec<(String, String)>,
    /// Leave out the agents (plm k8s): to look at the other methods alone; no ratio to the
    /// agents is printed then.
    #[arg(long)]
    no_agent: bool,
    /// Leave out the lower bound (plm ssh with a namespace-exec agent).
    #[arg(long)]
    no_lower_bound: bool,
    /// Leave out the batch Jobs (a Job of N pods applied until Complete, in a sandbox cluster).
    #[arg(long, conflicts_with = "batch_only")]
    no_batch: bool,
    /// Only the batch Jobs (no DVM starts through the launch methods, no grows).
    #[arg(long, conflicts_with = "grow_only")]
    batch_only: bool,
    /// New pods per grow of a running DVM of 2 pods (`prrte-k8s grow N`), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    grow: Vec<usize>,
    /// Leave out the grows of a running DVM.
    #[arg(long, conflicts_with = "grow_only")]
    no_grow: bool,
    /// Only the grows (each beside a plain DVM start of the grown size through the agents).
    #[arg(long, conflicts_with = "controller_only")]
    grow_only: bool,
    /// Only the controller: MPIJobs of --pods pods through `prrte-k8s controller` (a process
    /// against the sandbox) against `prrte-k8s manifest --from-mpijob` applied, --runs each,
    /// then a burst of --burst MPIJobs of 2 pods with the controller's CPU time and RSS.
    #[arg(long, conflicts_with = "batch_only")]
    controller_only: bool,
    /// Only the controller at scale: N MPIJobs created at once, suspended, half of them another
    /// controller's, the controller killed midway and started again (no pods, no images).
    #[arg(long, value_name = "N", conflicts_with_all = ["controller_only", "batch_only", "grow_only"])]
    controller_scale: Option<usize>,
    /// Only many short tasks through one DVM of 16 pods: N single-rank `/bin/true` tasks through
    /// `prrte-k8s submit` (default 10000), then --wide-tasks `-n 32` tasks, --prun-tasks as
    /// one `prun` per task (sequential and 16 at once), --k8s-jobs as one Kubernetes Job per
    /// task; tasks/s, latency (median, p99) and prte's CPU.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "10000",
          conflicts_with_all = ["controller_only", "batch_only", "grow_only"])]
    tasks: Option<usize>,
    /// `-n 32 /bin/true` tasks through submit in --tasks.
    #[arg(long, default_value_t = 1000)]
    wide_tasks: usize,
    /// Single-rank tasks run as one `prrte-k8s prun` each in --tasks (sequential, then 16 at once).
    #[arg(long, default_value_t = 1000)]
    prun_tasks: usize,
    /// Kubernetes Jobs of one `/bin/true` pod in --tasks (16 in flight).
    #[arg(long, default_value_t = 1000)]
    k8s_jobs: usize,
    /// submit's --max-in-flight in --tasks.
    #[arg(long, default_value_t = 32)]
    max_in_flight: usize,
    /// MPIJobs of 2 pods applied at once in the controller's burst (0: none).
    #[arg(long, default_value_t = 20)]
    burst: usize,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw DVM-ready time against pods as a PNG to this file (default: the --json file with
    /// the extension .png).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Run nothing: redraw the plot from a JSON report this program wrote (to --plot, default
    /// that file with the extension .png).
    #[arg(long, value_name = "JSON")]
    plot_from: Option<PathBuf>,
}

/// The batch Jobs' plot beside the DVM plot `png`: bench.png, bench-batch.png.
fn batch_png(png: &Path) -> PathBuf {
    let stem = png.file_stem().unwrap_or_default().to_string_lossy();
    png.with_file_name(format!("{stem}-batch.png"))
}

/// `--plot-from`: redraw the plot of a saved JSON report.
fn replot(from: &Path, out: &Path) -> Result<()> {
    let text = std::fs::read_to_string(from).with_context(|| format!("read {}", from.display()))?;
    let report: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON written by prrte-k8s-bench", from.display()))?;
    if report["rows"].as_array().is_some_and(|r| !r.is_empty()) {
        plot::write_png(&report, out)?;
        println!("wrote {}", out.display());
    }
    if !report["batch"].is_null() {
        let p = batch_png(out);
        batch_report::write_batch_png(&report["batch"], &p)?;
        println!("wrote {}", p.display());
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = Args::parse();
    if let Some(from) = &args.plot_from {
        let out = args
            .plot
            .clone()
            .unwrap_or_else(|| from.with_extension("png"));
        match replot(from, &out) {
            Ok(()) => {}
            Err(e) => {
                eprintln!("prrte-k8s-bench: {e:#}");
                std::process::exit(1);
            }
        }
        return;
    }
    if let Err(e) = ready_to_run(&mut args) {
        eprintln!("prrte-k8s-bench: {e:#}");
        std::process::exit(2);
    }
    // Ctrl-C: stop at the next wait; everything started so far is torn down on the way out.
    let _ = ctrlc::set_handler(|| {
        if !INTERRUPTED.swap(true, Ordering::SeqCst) {
            eprintln!("prrte-k8s-bench: interrupted; tearing down the pods (bounded waits)");
        }
    });
    run::set_prte_settings(&args.prtemca);
    if args.controller_only {
        return controller_main(&args).await;
    }
    if let Some(n) = args.controller_scale {
        return controller_scale_main(&args, n).await;
    }
    if let Some(n) = args.tasks {
        return tasks_main(&args, n).await;
    }
    let (rows, mut failed) = if args.batch_only || args.grow_only {
        (Vec::new(), None)
    } else {
        run_all(&args).await
    };
    let mut batch = Vec::new();
    if !args.no_batch && !args.grow_only && failed.is_none() {
        match batch::bench_batch(&args.pods, args.runs, Duration::from_secs(args.timeout)).await {
            Ok(b) => batch = b,
            Err(e) => failed = Some(e.context("batch Jobs")),
        }
    }
    let mut grown = Vec::new();
    if !args.no_grow && !args.batch_only && failed.is_none() {
        match grow::bench_grow(&args.grow, args.runs, Duration::from_secs(args.timeout)).await {
            Ok(g) => grown = g,
            Err(e) => failed = Some(e.context("grows")),
        }
    }
    // The channel's cryptography, timed in this run, against the DVM-ready times above.
    let channel = (!rows.is_empty())
        .then(|| sandbox::bench::channel_cost::measure(channel::RUNS, channel::CONNECTIONS));
    print_tables(&rows, args.runs);
    if let Some(c) = &channel {
        channel::print_channel(&rows, c);
    }
    batch_report::print_batch(&batch, args.runs);
    grow_report::print_grow(&grown, args.runs);
    if !rows.is_empty() || !batch.is_empty() || !grown.is_empty() {
        write_report(&args, &rows, channel.as_ref(), &batch, &grown, &mut failed);
    }
    let left = own_prteds();
    if !left.is_empty() {
        eprintln!("prrte-k8s-bench: prted processes left: {left:?}");
        failed.get_or_insert_with(|| anyhow::anyhow!("prted processes left"));
    }
    if let Some(e) = failed {
        eprintln!("prrte-k8s-bench: {e:#}");
        std::process::exit(if INTERRUPTED.load(Ordering::SeqCst) {
            130
        } else {
            1
        });
    }
}

/// `--controller-only`: the controller's benchmark, its table and its JSON report.
async fn controller_main(args: &Args) {
    let limit = Duration::from_secs(args.timeout);
    let out = controller::bench_controller(&args.pods, args.runs, args.burst, limit).await;
    let (rows, burst) = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!("prrte-k8s-bench: controller: {e:#}");
            std::process::exit(1);
        }
    };
    controller::print_controller(&rows, burst.as_ref(), args.runs);
    if let Some(p) = &args.json {
        let report = serde_json::json!({
            "profile": PROFILE,
            "controller": controller::controller_json(&rows, burst.as_ref()),
        });
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(p, text + "\n") {
            eprintln!("prrte-k8s-bench: writing {}: {e}", p.display());
            std::process::exit(1);
        }
        println!("wrote {} ({PROFILE} build)", p.display());
    }
}

/// `--controller-scale N`: the controller at scale, its numbers and its JSON report.
async fn controller_scale_main(args: &Args, mpijobs: usize) {
    let limit = Duration::from_secs(args.timeout.max(600));
    let r = match controller_scale::bench_controller_scale(mpijobs, limit).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("prrte-k8s-bench: controller at scale: {e:#}");
            std::process::exit(1);
        }
    };
    controller_scale::print_controller_scale(&r);
    if let Some(p) = &args.json {
        let report = serde_json::json!({
            "profile": PROFILE,
            "controller_scale": controller_scale::controller_scale_json(&r),
        });
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(p, text + "\n") {
            eprintln!("prrte-k8s-bench: writing {}: {e}", p.display());
            std::process::exit(1);
        }
        println!("wrote {} ({PROFILE} build)", p.display());
    }
}

/// `--tasks N`: the workflow benchmark, its table and its JSON report.
async fn tasks_main(args: &Args, single: usize) {
    let counts = tasks::Counts {
        single,
        wide: args.wide_tasks,
        pruns: args.prun_tasks,
        jobs: args.k8s_jobs,
        in_flight: args.max_in_flight,
    };
    let rows = match tasks::bench_tasks(counts, Duration::from_secs(args.timeout)).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("prrte-k8s-bench: tasks: {e:#}");
            std::process::exit(1);
        }
    };
    tasks::print_tasks(&rows);
    if let Some(p) = &args.json {
        let report = serde_json::json!({
            "profile": PROFILE,
            "pods": tasks::PODS,
            "tasks": tasks::tasks_json(&rows),
        });
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(p, text + "\n") {
            eprintln!("prrte-k8s-bench: writing {}: {e}", p.display());
            std::process::exit(1);
        }
        println!("wrote {} ({PROFILE} build)", p.display());
    }
    let left = own_prteds();
    if !left.is_empty() {
        eprintln!("prrte-k8s-bench: prted processes left: {left:?}");
        std::process::exit(1);
    }
}

/// `--quick` applied, the pod counts and runs checked, root and PRRTE there.
fn ready_to_run(args: &mut Args) -> Result<()> {
    if args.quick {
        args.pods = vec![4];
        args.runs = 3;
        args.grow = vec![1];
    }
    if args.runs == 0 || args.pods.iter().any(|n| *n < 2) {
        bail!("--runs must be at least 1 and every pod count at least 2");
    }
    let most = sandbox::cluster::MAX_NODE_PODS;
    if let Some(n) = args.pods.iter().find(|n| **n > most) {
        bail!(
            "--pods {n}: the sandbox node holds at most {most} pods (its pod network is a /{}); ask for at most {most}",
            sandbox::runtime::podnet::PREFIX_LEN
        );
    }
    if args.grow.contains(&0) {
        bail!("every --grow size must be at least 1 new pod");
    }
    if !nix::unistd::Uid::effective().is_root() {
        bail!("the sandbox pods need root");
    }
    // prte in pod 0 inherits this limit: with ssh it holds pipes to one client per pod, and a
    // socket per daemon either way (at 256 pods more than a login's 1,024 descriptors).
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("reading the open-file limit")?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).context("raising the open-file limit")?;
    }
    harness::require_prrte()
}

fn mca_setting(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((n, v)) if !n.is_empty() && !v.is_empty() => Ok((n.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not NAME=VALUE")),
    }
}

/// The methods to measure: the agents, ssh (tree), ssh (no tree) and the lower bound, unless
/// left out.
fn variants(args: &Args) -> Vec<Variant> {
    let mut variants = Vec::new();
    if !args.no_agent {
        variants.push(Variant::Agent);
    }
    if !args.no_ssh {
        variants.push(Variant::Ssh);
    }
    if !args.no_no_tree {
        variants.push(Variant::SshNoTree);
    }
    if !args.no_lower_bound {
        variants.push(Variant::LowerBound);
    }
    variants
}

/// Every pod count in turn, until one fails or Ctrl-C: the rows measured, and the failure.
async fn run_all(args: &Args) -> (Vec<Row>, Option<anyhow::Error>) {
    let variants = variants(args);
    let limit = Duration::from_secs(args.timeout);
    let mut rows = Vec::new();
    let mut failed = None;
    for &n in &args.pods {
        if INTERRUPTED.load(Ordering::SeqCst) {
            failed = Some(anyhow::anyhow!("interrupted"));
            break;
        }
        match bench_pods(n, args.runs, args.ranks_per_pod, &variants, limit).await {
            Ok(r) => rows.push(r),
            Err(e) => {
                failed = Some(e.context(format!("{n} pods")));
                break;
            }
        }
    }
    (rows, failed)
}

/// The JSON report (`--json`) and the plot (`--plot`, else next to the JSON); a failure to
/// write either is kept in `failed` unless it holds an earlier one.
fn write_report(
    args: &Args,
    rows: &[Row],
    channel: Option<&sandbox::bench::channel_cost::ChannelCost>,
    batch: &[batch::BatchRow],
    grown: &[grow::GrowRow],
    failed: &mut Option<anyhow::Error>,
) {
    let mut report = json_report(rows, args.runs);
    if let Some(c) = channel {
        report["channel"] = channel::channel_json(rows, c);
    }
    if !batch.is_empty() {
        report["batch"] = batch_report::batch_json(batch);
    }
    if !grown.is_empty() {
        report["grow"] = grow_report::grow_json(grown);
    }
    println!();
    if let Some(p) = &args.json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        match std::fs::write(p, text + "\n") {
            Ok(()) => println!("wrote {} ({PROFILE} build)", p.display()),
            Err(e) => {
                failed.get_or_insert_with(|| anyhow::anyhow!("writing {}: {e}", p.display()));
            }
        }
    }
    let png = args
        .plot
        .clone()
        .or_else(|| args.json.as_ref().map(|p| p.with_extension("png")));
    let Some(png) = png else { return };
    let mut plots: Vec<(PathBuf, anyhow::Result<()>)> = Vec::new();
    if !rows.is_empty() {
        plots.push((png.clone(), plot::write_png(&report, &png)));
    }
    if !batch.is_empty() {
        let p = batch_png(&png);
        let r = batch_report::write_batch_png(&report["batch"], &p);
        plots.push((p, r));
    }
    for (p, r) in plots {
        match r {
            Ok(()) => println!("wrote {} ({PROFILE} build)", p.display()),
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
}
