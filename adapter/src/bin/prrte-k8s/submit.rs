//! `prrte-k8s submit`: many tasks through one PMIx tool connection to the job's DVM, up to
//! `--max-in-flight` spawned at once, one JSON result line per task, `--resume` running only
//! the tasks without one: the task list and results file around `prrte_k8s::workflow::Dvm`'s
//! `map`, which does the running.

use std::collections::BTreeSet;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use futures::StreamExt;
use prrte_k8s::settings::{agent, ArgExt};
use prrte_k8s::workflow::{
    completed_indices, failed_summary, parse_tasks, Dvm, Error, Options, TaskLine, TaskResult,
};

#[derive(Args, Debug)]
pub struct SubmitArgs {
    /// The task list: one command line a line, `-n N`, `--host PODS`, `--timeout SECS`,
    /// `--cwd DIR`, `-x NAME=VALUE` before the command; `#` comments; `-` for standard input.
    #[arg(long, value_name = "FILE")]
    pub tasks: PathBuf,
    /// Where each task's result goes, one JSON line per task.
    #[arg(long, value_name = "FILE")]
    pub results: PathBuf,
    /// How many tasks are spawned or running at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_in_flight: u32,
    /// Seconds a task may run before it is killed and reported as `timeout` (a task's own
    /// `--timeout` wins).
    #[arg(long, value_name = "SECS", value_parser = positive_seconds)]
    pub timeout: Option<f64>,
    /// Keep each task's standard output and error in DIR/<index>.out and DIR/<index>.err
    /// (forwarded by the DVM to this process) instead of this process's own.
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Run only the tasks that have no result in --results yet (after an interrupted run).
    #[arg(long)]
    pub resume: bool,
    /// The DVM's URI (`<nspace>.<rank>;tcp4://<ip>:<port>`) instead of the published one.
    #[arg(long, value_name = "URI")]
    pub dvm_uri: Option<String>,
    #[arg(long, setting = &agent::DVM_URI_FILE)]
    pub file: PathBuf,
}

fn positive_seconds(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or_else(|| format!("{s:?}: expected seconds > 0"))
}

/// How long the output stream must be quiet after the last task's end before we exit.
const OUTPUT_QUIET: Duration = Duration::from_millis(300);

fn read_tasks(path: &Path) -> Result<String, String> {
    let mut text = String::new();
    if path == Path::new("-") {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read the task list from standard input: {e}"))?;
    } else {
        text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the task list {}: {e}", path.display()))?;
    }
    Ok(text)
}

/// The results file, opened for appending; previous results (with --resume) read first.
fn open_results(path: &Path, resume: bool) -> Result<(std::fs::File, String), String> {
    let old = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if !resume && !old.trim().is_empty() {
        return Err(format!(
            "{} already holds results: pass --resume to run only the tasks without one, or \
             remove it",
            path.display()
        ));
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .truncate(false)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    // A line cut short by a killed run must not swallow the next one.
    if !old.is_empty() && !old.ends_with('\n') {
        f.write_all(b"\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok((f, old))
}

struct Sink {
    file: std::fs::File,
    path: PathBuf,
    failed: Vec<TaskResult>,
    done: usize,
    /// Tasks never spawned (the connection was lost first).
    not_run: usize,
}

impl Sink {
    fn write(&mut self, r: TaskResult) -> Result<(), String> {
        let mut line = r.to_line();
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))?;
        self.done += 1;
        if !r.exit.success() {
            self.failed.push(r);
        }
        Ok(())
    }
}

pub fn run(args: SubmitArgs) -> i32 {
    match submit(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("prrte-k8s submit: error: {e}");
            1
        }
    }
}

fn submit(args: SubmitArgs) -> Result<i32, String> {
    let tasks = parse_tasks(&read_tasks(&args.tasks)?).map_err(|e| e.to_string())?;
    let (file, old) = open_results(&args.results, args.resume)?;
    let have: BTreeSet<usize> = completed_indices(&old);
    let default_timeout = args.timeout.map(Duration::from_secs_f64);
    let todo: Vec<TaskLine> = tasks
        .iter()
        .filter(|t| !have.contains(&t.index))
        .cloned()
        .map(|mut t| {
            t.timeout = t.timeout.or(default_timeout);
            t
        })
        .collect();
    let mut sink = Sink {
        file,
        path: args.results.clone(),
        failed: old
            .lines()
            .filter_map(|l| serde_json::from_str::<TaskResult>(l).ok())
            .filter(|r| !r.exit.success() && tasks.iter().any(|t| t.index == r.index))
            .collect(),
        done: 0,
        not_run: 0,
    };
    let total = tasks.len();
    let planned = todo.len();
    let uri = match &args.dvm_uri {
        Some(u) => {
            prrte_k8s::protocol::validate_dvm_uri(u).map_err(|e| e.to_string())?;
            u.clone()
        }
        None => prrte_k8s::workflow::read_dvm_uri(&args.file).map_err(|e| e.to_string())?,
    };
    if planned > 0 {
        if let Some(dir) = &args.output {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let dvm = Dvm::connect_with(Options {
            uri: Some(uri),
            output: args.output.clone(),
            ..Options::default()
        })
        .map_err(|e| format!("{e}"))?;
        let rt = prrte_k8s::runtime::current_thread()
            .map_err(|e| format!("cannot start a runtime: {e}"))?;
        rt.block_on(drive(&dvm, todo, &mut sink, args.max_in_flight as usize))?;
        if args.output.is_some() {
            // Output forwarded after a task's end: until the stream has been quiet a moment.
            dvm.wait_output_quiet(OUTPUT_QUIET);
        }
    }
    let left = sink.not_run;
    eprintln!(
        "prrte-k8s submit: {} of {planned} tasks ended ({} already had a result), {} failed{}",
        sink.done,
        have.len(),
        sink.failed.len(),
        if left > 0 {
            format!(", {left} not run (the DVM connection was lost; rerun with --resume)")
        } else {
            String::new()
        }
    );
    if let Some(s) = failed_summary(&sink.failed, total, 20) {
        eprintln!("prrte-k8s submit: {s}");
    }
    Ok(if sink.failed.is_empty() && left == 0 {
        0
    } else {
        1
    })
}

/// Every task through the DVM, each result written as it comes; a progress line on a terminal.
async fn drive(dvm: &Dvm, todo: Vec<TaskLine>, sink: &mut Sink, max: usize) -> Result<(), String> {
    let tty = std::io::stderr().is_terminal();
    let began = Instant::now();
    let mut results = dvm.map(todo, max);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            r = results.next() => match r {
                Some(Ok(r)) => sink.write(r)?,
                Some(Err(Error::NotStarted(_))) => sink.not_run += 1,
                Some(Err(e)) => return Err(e.to_string()),
                None => break,
            },
            _ = tick.tick(), if tty => progress(sink, dvm.running(), began),
        }
    }
    if tty {
        progress(sink, dvm.running(), began);
        eprintln!();
    }
    let secs = began.elapsed().as_secs_f64();
    eprintln!(
        "prrte-k8s submit: {} tasks in {secs:.2} s ({:.1} tasks/s)",
        sink.done,
        sink.done as f64 / secs.max(1e-9)
    );
    let times = dvm.phase_times();
    if !times.is_empty() {
        eprintln!("prrte-k8s submit: {}", times.summary());
    }
    Ok(())
}

fn progress(sink: &Sink, running: usize, began: Instant) {
    eprint!(
        "\r{} done, {} failed, {running} running, {:.1} tasks/s   ",
        sink.done,
        sink.failed.len(),
        sink.done as f64 / began.elapsed().as_secs_f64().max(1e-9)
    );
}
