//! `prrte-k8s submit`: many tasks through one PMIx tool connection to the job's DVM, up to
//! `--max-in-flight` spawned at once, one JSON result line per task (see
//! `prrte_k8s::workflow`), `--resume` running only the tasks without one.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::time::{Duration, Instant};

use clap::Args;
use prrte_k8s::settings::{agent, ArgExt};
use prrte_k8s::workflow::{
    completed_indices, failed_summary, parse_tasks, Admission, Exit, NoRoom, PhaseTimes, TaskLine,
    TaskResult,
};
use prrte_k8s_pmix_tool::{Dvm, Task, Update};

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

/// How long a killed task's end is awaited before it is reported as timed out anyway.
const KILL_GRACE: Duration = Duration::from_secs(10);
/// How long the output stream must be quiet after the last task's end before we exit.
const OUTPUT_QUIET: Duration = Duration::from_millis(300);
/// PMIx's status when the DVM cannot place a job now (its slots are taken).
const FAILED_TO_MAP: i32 = -179;
/// How long a spawn may go unanswered before its task is reported failed (an answer names the
/// job once the DVM has launched it, within seconds even under load).
const SPAWN_ANSWER_WITHIN: Duration = Duration::from_secs(120);

struct Running {
    task: TaskLine,
    start: jiff::Timestamp,
    /// When the spawn was requested and when its answer came.
    requested: Instant,
    launched: Option<Instant>,
    deadline: Option<Instant>,
    nspace: Option<String>,
    killed: Option<Instant>,
}

fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

fn to_task(t: &TaskLine) -> Task {
    Task {
        argv: t.argv.clone(),
        np: t.np,
        hosts: t.hosts.clone(),
        cwd: t.cwd.clone(),
        env: t.env.clone(),
    }
}

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

/// Where libpmix is: the PRRTE install's, else found by the dynamic loader.
fn libpmix() -> PathBuf {
    crate::tools::configured_prefix()
        .map(|p| p.join("lib/libpmix.so.2"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("libpmix.so.2"))
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
    let mut todo: VecDeque<TaskLine> = tasks
        .iter()
        .filter(|t| !have.contains(&t.index))
        .cloned()
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
    };
    let total = tasks.len();
    let planned = todo.len();
    let uri = match &args.dvm_uri {
        Some(u) => {
            prrte_k8s::protocol::validate_dvm_uri(u).map_err(|e| e.to_string())?;
            u.clone()
        }
        None => crate::tools::read_dvm_uri(&args.file).map_err(|e| e.to_string())?,
    };
    if planned > 0 {
        if let Some(dir) = &args.output {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let dvm = Dvm::connect_with(&uri, &libpmix(), args.output.is_some())
            .map_err(|e| format!("{e}"))?;
        drive(&dvm, &mut todo, &mut sink, &args)?;
    }
    let left = todo.len();
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

fn drive(
    dvm: &Dvm,
    todo: &mut VecDeque<TaskLine>,
    sink: &mut Sink,
    args: &SubmitArgs,
) -> Result<(), String> {
    let (tx, rx) = channel();
    let mut running: HashMap<u64, Running> = HashMap::new();
    // Every submitted task's index by id: output may come after a task's end.
    let mut index_of: HashMap<u64, usize> = HashMap::new();
    let max = args.max_in_flight as usize;
    let default_timeout = args.timeout.map(Duration::from_secs_f64);
    let tty = std::io::stderr().is_terminal();
    let began = Instant::now();
    let mut last_progress = Instant::now();
    let mut admission = Admission::default();
    // Tasks reported failed before their spawn was answered: a late answer's job is killed.
    let mut abandoned: HashSet<u64> = HashSet::new();
    let mut lost = false;
    let mut times = PhaseTimes::default();
    loop {
        while !lost && running.len() < max && admission.may_spawn(Instant::now()) {
            let Some(t) = todo.pop_front() else { break };
            let start = now();
            match dvm.submit_to(&to_task(&t), tx.clone()) {
                Ok(id) => {
                    index_of.insert(id, t.index);
                    let deadline = t.timeout.or(default_timeout).map(|d| Instant::now() + d);
                    running.insert(
                        id,
                        Running {
                            task: t,
                            start,
                            requested: Instant::now(),
                            launched: None,
                            deadline,
                            nspace: None,
                            killed: None,
                        },
                    );
                }
                Err(prrte_k8s_pmix_tool::Error::Lost) => {
                    todo.push_front(t);
                    lost = true;
                }
                Err(e) => {
                    sink.write(result(&t, start, Exit::Error(e.to_string()), vec![], None))?
                }
            }
        }
        if running.is_empty() && (todo.is_empty() || lost) {
            break;
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok((id, update)) => {
                let Some(r) = running.get_mut(&id) else {
                    if let (true, Update::Started { nspace }) = (abandoned.remove(&id), &update) {
                        if let Err(e) = dvm.kill(nspace) {
                            eprintln!(
                                "prrte-k8s submit: job {nspace} started after its task was \
                                 reported failed and could not be killed: {e}"
                            );
                        }
                    }
                    continue;
                };
                match update {
                    Update::Started { nspace } => {
                        admission.placed(r.task.index);
                        if r.killed.is_none() && r.deadline.is_some_and(|d| Instant::now() >= d) {
                            kill(dvm, &nspace, r);
                        }
                        r.nspace = Some(nspace);
                        r.launched = Some(Instant::now());
                    }
                    Update::Ended(e) => {
                        let r = running.remove(&id).ok_or("task vanished")?;
                        let ended = r.requested.elapsed();
                        let exit = if r.killed.is_some() {
                            Exit::Timeout
                        } else {
                            Exit::from_status(e.status, |s| dvm.status_name(s))
                        };
                        admission.left();
                        sink.write(result(&r.task, r.start, exit, e.pods, e.message))?;
                        let launched = r.launched.map(|l| l.duration_since(r.requested));
                        times.record(launched, ended, r.requested.elapsed());
                    }
                    Update::SpawnFailed { status, message } => {
                        let r = running.remove(&id).ok_or("task vanished")?;
                        let retry = status == FAILED_TO_MAP
                            && admission.no_room(r.task.index, running.len(), Instant::now())
                                != NoRoom::GiveUp;
                        if retry {
                            // The DVM's slots are taken (by our own tasks, or not yet released):
                            // tried again when one of ours leaves, or after a pause.
                            todo.push_front(r.task);
                        } else {
                            admission.left();
                            sink.write(result(
                                &r.task,
                                r.start,
                                Exit::Error(message),
                                vec![],
                                None,
                            ))?;
                        }
                    }
                    Update::Output { stderr, bytes, .. } => {
                        save_output(args.output.as_deref(), index_of.get(&id), stderr, &bytes);
                    }
                    Update::Lost { .. } => {
                        let r = running.remove(&id).ok_or("task vanished")?;
                        admission.left();
                        lost = true;
                        sink.write(result(&r.task, r.start, Exit::Lost, vec![], None))?;
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Err("the DVM connection ended".into()),
        }
        let t = Instant::now();
        let mut gone = Vec::new();
        for (id, r) in running.iter_mut() {
            match (r.deadline, r.killed, &r.nspace) {
                (Some(d), None, Some(ns)) if t >= d => {
                    let ns = ns.clone();
                    kill(dvm, &ns, r);
                }
                (_, Some(k), _) if t.duration_since(k) >= KILL_GRACE => {
                    gone.push((*id, Exit::Timeout, timeout_unconfirmed()))
                }
                // Never answered: past its own timeout (and the grace a kill gets), or past
                // the bound on any spawn's answer.
                (d, None, None)
                    if d.is_some_and(|d| t >= d + KILL_GRACE)
                        || t.duration_since(r.requested) >= SPAWN_ANSWER_WITHIN =>
                {
                    let waited = t.duration_since(r.requested).as_secs();
                    eprintln!(
                        "prrte-k8s submit: warning: task {} got no answer to its spawn request \
                         in {waited} s: reported failed (its job is killed if it starts later)",
                        r.task.index
                    );
                    let msg = format!("the DVM did not answer its spawn request in {waited} s");
                    let exit = if d.is_some_and(|d| t >= d) {
                        Exit::Timeout
                    } else {
                        Exit::Error(msg.clone())
                    };
                    gone.push((*id, exit, msg));
                    abandoned.insert(*id);
                }
                _ => {}
            }
        }
        for (id, exit, msg) in gone {
            if let Some(r) = running.remove(&id) {
                admission.left();
                sink.write(result(&r.task, r.start, exit, vec![], Some(msg)))?;
            }
        }
        if tty && last_progress.elapsed() >= Duration::from_millis(500) {
            last_progress = Instant::now();
            progress(sink, running.len(), began);
        }
    }
    if args.output.is_some() {
        // Output forwarded after a task's end: until the stream has been quiet a moment.
        while let Ok((id, u)) = rx.recv_timeout(OUTPUT_QUIET) {
            if let Update::Output { stderr, bytes, .. } = u {
                save_output(args.output.as_deref(), index_of.get(&id), stderr, &bytes);
            }
        }
    }
    if tty {
        progress(sink, running.len(), began);
        eprintln!();
    }
    let secs = began.elapsed().as_secs_f64();
    eprintln!(
        "prrte-k8s submit: {} tasks in {secs:.2} s ({:.1} tasks/s)",
        sink.done,
        sink.done as f64 / secs.max(1e-9)
    );
    if !times.is_empty() {
        eprintln!("prrte-k8s submit: {}", times.summary());
    }
    Ok(())
}

/// Appends a task's output to DIR/<index>.out or .err; a write that fails is reported once a
/// file, the run goes on.
fn save_output(dir: Option<&Path>, index: Option<&usize>, stderr: bool, bytes: &[u8]) {
    let (Some(dir), Some(i)) = (dir, index) else {
        return;
    };
    let path = dir.join(format!("{i}.{}", if stderr { "err" } else { "out" }));
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(bytes));
    if let Err(e) = r {
        eprintln!("prrte-k8s submit: cannot write {}: {e}", path.display());
    }
}

fn timeout_unconfirmed() -> String {
    format!("killed after its timeout; its end was not confirmed within {KILL_GRACE:?}")
}

fn kill(dvm: &Dvm, nspace: &str, r: &mut Running) {
    r.killed = Some(Instant::now());
    if let Err(e) = dvm.kill(nspace) {
        eprintln!(
            "prrte-k8s submit: task {} (job {nspace}) ran past its timeout and could not be \
             killed: {e}",
            r.task.index
        );
    }
}

fn progress(sink: &Sink, running: usize, began: Instant) {
    eprint!(
        "\r{} done, {} failed, {running} running, {:.1} tasks/s   ",
        sink.done,
        sink.failed.len(),
        sink.done as f64 / began.elapsed().as_secs_f64().max(1e-9)
    );
}

fn result(
    t: &TaskLine,
    start: jiff::Timestamp,
    exit: Exit,
    pods: Vec<String>,
    error: Option<String>,
) -> TaskResult {
    TaskResult {
        index: t.index,
        exit,
        start: start.to_string(),
        end: now().to_string(),
        pods,
        error,
    }
}
