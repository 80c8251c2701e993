//! Short jobs never hang, and a killed prun never poisons the DVM.
//!
//! PRRTE 3.0.8 loses the exit of a proc that ends right after it was forked when its daemons
//! launch on launch threads, so `prterun -n 32 hostname` across 16 pods hangs after printing
//! everything in a good share of runs (docs/prrte-short-job-hang.md; the fix is in
//! prrte-config/patches/, and the k8s components start processes on the daemons' main threads,
//! `odls_base_max_threads = 0`, unless the site set it). These tests run many such jobs, each
//! bounded, with only what a prefix gets from the README (no launch-thread parameter anywhere),
//! and count the hangs (printed). `PRRTE_K8S_TEST_LAUNCH_THREADS=N` sets the parameter as a
//! site would (`PRTE_MCA_odls_base_max_threads=N` in the pods), e.g. 16 to run with PRRTE's
//! launch threads; against an unpatched prefix
//! (`PRRTE_K8S_PREFIX=/opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5`) that shows the hang.
//! `PRRTE_K8S_TEST_SHORT_JOBS=N` sets how many short pruns go into one DVM (default 200, about
//! 45 s here; a soak run sets more).
#![forbid(unsafe_code)]
mod common;

use common::*;
use sandbox::harness;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

const PODS: usize = 16;
const RANKS: usize = 32;
const ROUNDS: usize = 20;
/// A short job takes about a second here even on a loaded machine; a hung one never ends.
const JOB_LIMIT: Duration = Duration::from_secs(30);
/// The site's launch-thread setting, if the run asks for one (`PRRTE_K8S_TEST_LAUNCH_THREADS`).
/// Without it the pods carry none: the components' own default (0) is what is tested.
fn site_param() -> Option<(&'static str, String)> {
    std::env::var("PRRTE_K8S_TEST_LAUNCH_THREADS")
        .ok()
        .filter(|v| !v.trim().is_empty() && v != "default")
        .map(|v| ("odls_base_max_threads", v.trim().to_string()))
}

/// How many short pruns go into one DVM.
fn short_jobs() -> usize {
    std::env::var("PRRTE_K8S_TEST_SHORT_JOBS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(200)
}

/// `PODS` agent pods with 2 CPUs (2 slots) each. With `head`, the pod-0 agent runs the DVM
/// (`--dvm-head auto`) and every pod has what `prrte-k8s prun` needs.
fn spec(name: &str, pods: usize, head: bool) -> JobSpec<'_> {
    let mut spec = match head {
        true => JobSpec::dvm_head(name, pods),
        false => JobSpec::new(name, pods),
    };
    spec.cpus = vec!["2"; pods];
    // prte passes PRTE_MCA_* variables on to the prteds it starts.
    if let Some((k, v)) = site_param() {
        spec.env.push((format!("PRTE_MCA_{k}"), v));
    }
    spec
}

/// Where the agents publish the DVM URI (the fixture's per-pod file).
fn uri_file(job: &Job, i: usize) -> PathBuf {
    job.pod_tmp(i).join("dvm.uri")
}

fn wait_for_dvm(job: &Job) {
    for i in 0..job.pods.len() {
        wait_for_text(&uri_file(job, i), "tcp4://", Duration::from_secs(120)).unwrap();
    }
}

fn cli() -> String {
    harness::workspace_bin("prrte-k8s")
        .unwrap()
        .display()
        .to_string()
}

/// Checks one `hostname` job's output: `n` lines, every pod's hostname twice.
fn hostname_problem(job: &Job, out: &Output, n: usize) -> Option<String> {
    if !out.status.success() {
        return Some(format!("exit {}", out.status));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    if lines.len() != n {
        return Some(format!("{} lines instead of {n}", lines.len()));
    }
    let mut per_host: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &lines {
        *per_host.entry(l).or_default() += 1;
    }
    let want: BTreeMap<&str, usize> = job
        .hostnames
        .iter()
        .take(n / 2)
        .map(|h| (h.as_str(), 2))
        .collect();
    (per_host != want).then(|| format!("ranks per host {per_host:?}, expected {want:?}"))
}

/// The hung and the failed runs of a series, reported together.
#[derive(Default)]
struct Tally {
    what: String,
    runs: usize,
    hung: Vec<String>,
    failed: Vec<String>,
}

impl Tally {
    fn new(what: &str) -> Self {
        Tally {
            what: what.to_string(),
            ..Default::default()
        }
    }
    fn record(
        &mut self,
        round: usize,
        r: anyhow::Result<Output>,
        check: impl FnOnce(&Output) -> Option<String>,
    ) {
        self.runs += 1;
        match r {
            Err(e) => {
                // run_with_timeout's error holds what the command printed before it was killed.
                let e = e.to_string();
                let printed = e
                    .split_once("\nstdout:\n")
                    .map(|(_, o)| o.split("\nstderr:\n").next().unwrap_or("").lines().count())
                    .unwrap_or(0);
                self.hung.push(format!(
                    "run {round}: no exit within {JOB_LIMIT:?}, after printing {printed} lines"
                ));
            }
            Ok(o) => {
                if let Some(p) = check(&o) {
                    let t = text(&o);
                    // after the first, only the first lines of each failure
                    let t = if self.failed.is_empty() {
                        t
                    } else {
                        t.lines().take(6).collect::<Vec<_>>().join("\n")
                    };
                    self.failed.push(format!("run {round}: {p}\n{t}"));
                }
            }
        }
    }
    fn report(&self) -> String {
        format!(
            "{}: {} runs, {} hung, {} failed",
            self.what,
            self.runs,
            self.hung.len(),
            self.failed.len()
        )
    }
    fn assert_clean(&self) {
        eprintln!("{}", self.report());
        assert!(
            self.hung.is_empty() && self.failed.is_empty(),
            "{}\nhung: {:#?}\nfailed: {:#?}",
            self.report(),
            self.hung,
            self.failed
        );
    }
}

/// Issue acceptance: 16 pods; 20 consecutive `prterun -n 32 hostname` through ras/plm k8s, each
/// bounded; every one ends with exit 0 and 32 lines (2 per pod).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_prterun_of_32_hostname_never_hang() {
    let job = Job::start(spec("short", PODS, false)).await.unwrap();
    let n = RANKS.to_string();
    let mut tally = Tally::new("prterun -n 32 hostname");
    for round in 0..ROUNDS {
        let r = job.prterun(&["-n", &n, "hostname"], JOB_LIMIT);
        tally.record(round, r, |o| hostname_problem(&job, o, RANKS));
        // A hung run was killed with its process group: the agents then stop its prteds.
        job.wait_no_prteds(Duration::from_secs(30)).unwrap();
    }
    tally.assert_clean();
}

/// Threads of a host process (its /proc/PID/task entries); 0 if it is gone.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// PRRTE's default number of launch threads in a DVM daemon.
const PRRTE_LAUNCH_THREADS: usize = 16;

/// Issue acceptance: one DVM (run by the pod-0 agent) of 16 pods takes `short_jobs()` (200)
/// consecutive `prun -n 32 /bin/true` through `prrte-k8s prun` from the other pods, every tenth
/// followed by a `prun -n 32 hostname` whose output is checked; none hangs or fails. The pods
/// carry no launch-thread setting: prte and every prted start processes on their main thread
/// because the components set it (checked: no daemon has PRRTE's 16 launch threads), and no
/// job of these pruns, which all end normally, is ended by the DVM as a departed tool's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dvm_takes_two_hundred_short_pruns() {
    let job = Job::start(spec("dvm100", PODS, true)).await.unwrap();
    wait_for_dvm(&job);
    let exe = cli();
    let n = RANKS.to_string();
    let total = short_jobs();
    let mut t_true = Tally::new("prun -n 32 /bin/true");
    let mut t_host = Tally::new("prun -n 32 hostname");
    let started = Instant::now();
    for round in 0..total {
        let pod = 1 + round % (PODS - 1);
        let r = job.exec_in_pod(pod, &[&exe, "prun", "-n", &n, "/bin/true"], JOB_LIMIT);
        t_true.record(round, r, |o| {
            (!o.status.success()).then(|| format!("exit {}", o.status))
        });
        if round == 0 {
            // Every daemon has launched once now: launch threads, if any, have started.
            let mut counts = Vec::new();
            for i in 0..PODS {
                for comm in ["prted", "prte"] {
                    for pid in live(&job, i, comm) {
                        counts.push((i, comm, threads(pid)));
                    }
                }
            }
            eprintln!("threads per daemon (pod, program, threads): {counts:?}");
            assert!(
                counts.iter().any(|c| c.1 == "prte") && counts.iter().any(|c| c.1 == "prted"),
                "{counts:?}"
            );
            if site_param().is_none() {
                let with_threads: Vec<_> = counts
                    .iter()
                    .filter(|c| c.2 >= PRRTE_LAUNCH_THREADS)
                    .collect();
                assert!(
                    with_threads.is_empty(),
                    "daemons with launch threads although no site set odls_base_max_threads: \
                     {with_threads:?}"
                );
            }
        }
        if round % 10 == 9 {
            let r = job.exec_in_pod(pod, &[&exe, "prun", "-n", &n, "hostname"], JOB_LIMIT);
            t_host.record(round, r, |o| hostname_problem(&job, o, RANKS));
        }
    }
    eprintln!(
        "{}\n{}\n{:.1} s",
        t_true.report(),
        t_host.report(),
        started.elapsed().as_secs_f64()
    );
    let log =
        std::fs::read_to_string(job.cluster.pod_log(NS, &job.pods[0]).unwrap()).unwrap_or_default();
    if !(t_true.hung.is_empty() && t_true.failed.is_empty() && t_host.failed.is_empty()) {
        eprintln!("pod 0's log (the agent and prte):\n{log}");
    }
    t_true.assert_clean();
    t_host.assert_clean();
    assert!(
        !log.contains("lost its tool"),
        "a job of a prun that ended normally was ended as a departed tool's:\n{log}"
    );
}

/// What `prrte-k8s prun` says when its job left the DVM: it killed it, or the DVM had already
/// ended it (its prun went away).
fn ended_in_dvm(err: &str) -> bool {
    err.contains("killed in the DVM") || err.contains("no longer in the DVM")
}

/// PRRTE's message when no slot is free.
const SLOTS_FILLED: &str = "are already filled";

/// Wait (bounded) until no live process named `comm` runs in any pod of the job.
fn wait_none_named(job: &Job, comm: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let left: Vec<(usize, u32)> = (0..job.pods.len())
            .flat_map(|i| live(job, i, comm).into_iter().map(move |p| (i, p)))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{comm} still running after {limit:?} (pod, host pid): {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Start a long job (`n` ranks that print "started" and sleep) in the background from pod 1,
/// with `argv` in front, and wait until every rank has started.
fn start_sleepers(job: &Job, tag: &str, argv: &[&str], n: usize) -> harness::Guarded {
    let n_s = n.to_string();
    let mut full: Vec<&str> = argv.to_vec();
    full.extend(["-n", &n_s, "sh", "-c", "echo started; exec sleep 120"]);
    let cmd = job.cluster.pod_exec(&job.pods[1], &full).unwrap();
    let g = harness::Guarded::spawn(cmd, tag, job.dir.path()).unwrap();
    let out = job.dir.path().join(format!("{tag}.out"));
    let deadline = Instant::now() + JOB_LIMIT;
    loop {
        let t = std::fs::read_to_string(&out).unwrap_or_default();
        if t.lines().filter(|l| *l == "started").count() == n {
            break;
        }
        let err =
            std::fs::read_to_string(job.dir.path().join(format!("{tag}.err"))).unwrap_or_default();
        assert!(
            Instant::now() < deadline,
            "{tag}: not all {n} ranks started within {JOB_LIMIT:?}:\n{t}\n{err}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    g
}

/// (state, parent pid) of a host process, from /proc.
fn stat(pid: u32) -> (char, u32) {
    let t = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // "pid (comm) S ppid ...": the comm may hold spaces, so split after the last ')'
    let rest = t.rsplit_once(')').map(|r| r.1).unwrap_or("");
    let mut f = rest.split_whitespace();
    let state = f.next().and_then(|s| s.chars().next()).unwrap_or('?');
    (state, f.next().and_then(|p| p.parse().ok()).unwrap_or(0))
}

/// Host pids of the live (not zombie) `comm` processes in pod `i`.
fn live(job: &Job, i: usize, comm: &str) -> Vec<u32> {
    job.pids_in_pod(i, comm)
        .unwrap()
        .into_iter()
        .filter(|p| !matches!(stat(*p).0, 'Z' | 'X' | '?'))
        .collect()
}

fn one_live(job: &Job, i: usize, comm: &str) -> u32 {
    let pids = live(job, i, comm);
    assert_eq!(pids.len(), 1, "one live {comm} in pod {i}: {pids:?}");
    pids[0]
}

fn exit_of(g: &mut harness::Guarded, limit: Duration) -> std::process::ExitStatus {
    g.wait_timeout(limit)
        .unwrap()
        .unwrap_or_else(|| panic!("{} still running after {limit:?}", g.what()))
}

/// The pod-0 agent's log, which holds prte's output.
fn head_log(job: &Job) -> String {
    job.cluster
        .pod_log(NS, &job.pods[0])
        .and_then(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default()
}

/// Issue acceptance: a prun killed mid-job is followed by a prun that succeeds.
///
/// First PRRTE's own prun, killed with SIGKILL mid-job: the DVM ends its job (prte's log names
/// it) and a prun into the same DVM succeeds within 5 s of the kill. Then a job that really
/// holds every slot: `prrte-k8s prun` fails saying so, naming the job and the command that ends
/// it (which works). Then `prrte-k8s prun` interrupted as by Ctrl-C (SIGINT to it and its prun),
/// killed alone (SIGTERM to its pid), its prun child killed alone (SIGKILL), and out of time
/// (`--timeout`): each time its job leaves the DVM, and the next `prrte-k8s prun` runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_prun_does_not_poison_the_dvm() {
    const P: usize = 4;
    const N: usize = 2 * P;
    /// The bound from the kill to a prun that succeeds.
    const NEXT_JOB_WITHIN: Duration = Duration::from_secs(5);
    let job = Job::start(spec("killprun", P, true)).await.unwrap();
    wait_for_dvm(&job);
    let exe = cli();
    let n = N.to_string();
    let hostname_job = |what: &str| {
        let o = job
            .exec_in_pod(2, &[&exe, "prun", "-n", &n, "hostname"], JOB_LIMIT)
            .unwrap();
        if let Some(p) = hostname_problem(&job, &o, N) {
            panic!("{what}: {p}\n{}", text(&o));
        }
    };
    hostname_job("first prun");

    // PRRTE's prun, SIGKILLed mid-job: the DVM ends its job when its connection is lost.
    let uri = format!("file:{}", uri_file(&job, 1).display());
    let raw_prun = [
        harness::prefix().join("bin/prun").display().to_string(),
        "--allow-run-as-root".into(),
        "--dvm-uri".into(),
        uri.clone(),
    ];
    let raw_argv: Vec<&str> = raw_prun.iter().map(String::as_str).collect();
    let mut raw = start_sleepers(&job, "raw-prun", &raw_argv, N);
    raw.signal(nix::sys::signal::Signal::SIGKILL);
    let killed_at = Instant::now();
    exit_of(&mut raw, Duration::from_secs(10));
    wait_none_named(&job, "prun", Duration::from_secs(5));
    let mut refused = 0;
    loop {
        let o = job
            .exec_in_pod(2, &[&exe, "prun", "-n", &n, "hostname"], JOB_LIMIT)
            .unwrap();
        let Some(p) = hostname_problem(&job, &o, N) else {
            break;
        };
        // Until the killed job's end is recorded its slots are taken: only that may fail
        // (PRRTE prints its "already filled" box once, later refusals only name the error).
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(SLOTS_FILLED) || err.contains("PMIX_ERR_JOB_FAILED_TO_MAP"),
            "prun after the SIGKILLed prun: {p}\n{}",
            text(&o)
        );
        refused += 1;
        assert!(
            killed_at.elapsed() < NEXT_JOB_WITHIN,
            "no prun succeeded within {NEXT_JOB_WITHIN:?} of the kill ({refused} refused)\n\
             prte's log:\n{}",
            head_log(&job)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = killed_at.elapsed();
    eprintln!("a prun succeeded {took:?} after the SIGKILL ({refused} refused before)");
    assert!(took < NEXT_JOB_WITHIN, "{took:?}");
    wait_none_named(&job, "sleep", Duration::from_secs(10));
    let log = head_log(&job);
    assert!(
        log.contains("lost its tool") && log.contains("killing the job to free its slots"),
        "prte's log names the ended job:\n{log}"
    );

    // A job that is running holds every slot: prrte-k8s prun fails, naming it and the remedy.
    let mut raw = start_sleepers(&job, "raw-prun-2", &raw_argv, N);
    let o = job
        .exec_in_pod(2, &[&exe, "prun", "-n", &n, "hostname"], JOB_LIMIT)
        .unwrap();
    let t = text(&o);
    assert!(
        !o.status.success(),
        "no slot is free, so this prun must fail: {t}"
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        (stderr.contains(SLOTS_FILLED) || stderr.contains("PMIX_ERR_JOB_FAILED_TO_MAP"))
            && stderr.contains("killed or hung"),
        "cause named: {t}"
    );
    let remedy = stderr
        .lines()
        .find(|l| l.contains("--kill --targets"))
        .unwrap_or_else(|| panic!("no remedy command: {t}"))
        .trim()
        .to_string();
    let fix = job
        .exec_in_pod(2, &["sh", "-c", &remedy], JOB_LIMIT)
        .unwrap();
    assert!(
        fix.status.success(),
        "the remedy {remedy:?} failed: {}",
        text(&fix)
    );
    wait_none_named(&job, "sleep", Duration::from_secs(30));
    // prun ends with its killed job.
    exit_of(&mut raw, Duration::from_secs(30));
    // pctrl returns when the kill is granted; the DVM frees the slots when it has recorded the
    // job's end, a moment later: wait for the job to leave the DVM's list.
    let ns = remedy
        .split("--targets '")
        .nth(1)
        .and_then(|r| r.split(":*").next())
        .unwrap_or_else(|| panic!("no job in the remedy {remedy:?}"))
        .to_string();
    let pquery = harness::prefix().join("bin/pquery").display().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let o = job
            .exec_in_pod(2, &[&pquery, "--uri", &uri, "pmix.qry.ns"], JOB_LIMIT)
            .unwrap();
        // PMIx 5.0.5's pquery crashes (SIGSEGV) when the DVM has no job at all.
        let none = std::os::unix::process::ExitStatusExt::signal(&o.status) == Some(11);
        let listed = String::from_utf8_lossy(&o.stdout).contains(&ns);
        if none || (o.status.success() && !listed) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {ns} still in the DVM 20 s after it was killed ({}): {}",
            o.status,
            text(&o)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    hostname_job("prun after the remedy");

    // prrte-k8s prun, interrupted as by Ctrl-C: SIGINT to it and to its prun (the foreground
    // process group of a terminal in the pod).
    let mut ours = start_sleepers(&job, "ctrl-c", &[&exe, "prun"], N);
    let ours_pid = one_live(&job, 1, "prrte-k8s");
    let prun_pid = live(&job, 1, "prun")
        .into_iter()
        .find(|p| stat(*p).1 == ours_pid);
    let prun_pid =
        prun_pid.unwrap_or_else(|| panic!("no prun child of prrte-k8s {ours_pid} in pod 1"));
    let pids = [ours_pid, prun_pid];
    for pid in pids {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
    }
    let st = exit_of(&mut ours, Duration::from_secs(40));
    let err = std::fs::read_to_string(job.dir.path().join("ctrl-c.err")).unwrap();
    assert_eq!(st.code(), Some(130), "exit after SIGINT: {err}");
    assert!(ended_in_dvm(&err), "{err}");
    wait_none_named(&job, "sleep", Duration::from_secs(30));
    hostname_job("prun after Ctrl-C");

    // prrte-k8s prun killed alone (SIGTERM to its pid); prun itself is not signalled.
    let mut ours = start_sleepers(&job, "term", &[&exe, "prun"], N);
    let pids = [one_live(&job, 1, "prrte-k8s")];
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pids[0] as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = exit_of(&mut ours, Duration::from_secs(40));
    let err = std::fs::read_to_string(job.dir.path().join("term.err")).unwrap();
    assert_eq!(st.code(), Some(143), "exit after SIGTERM: {err}");
    assert!(ended_in_dvm(&err), "{err}");
    wait_none_named(&job, "sleep", Duration::from_secs(30));
    wait_none_named(&job, "prun", Duration::from_secs(10));
    hostname_job("prun after SIGTERM");

    // prun killed alone (SIGKILL to prun, as by the OOM killer): prrte-k8s prun ends its job.
    let mut ours = start_sleepers(&job, "prun-killed", &[&exe, "prun"], N);
    let ours_pid = one_live(&job, 1, "prrte-k8s");
    let prun_pid = live(&job, 1, "prun")
        .into_iter()
        .find(|p| stat(*p).1 == ours_pid)
        .unwrap_or_else(|| panic!("no prun child of prrte-k8s {ours_pid} in pod 1"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(prun_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let st = exit_of(&mut ours, Duration::from_secs(40));
    let err = std::fs::read_to_string(job.dir.path().join("prun-killed.err")).unwrap();
    assert_eq!(st.code(), Some(137), "exit after prun's SIGKILL: {err}");
    assert!(ended_in_dvm(&err), "{err}");
    wait_none_named(&job, "sleep", Duration::from_secs(30));
    hostname_job("prun after prun was killed");

    // prrte-k8s prun --timeout: the job that outlives it is killed in the DVM, exit 124.
    let started = Instant::now();
    let mut ours = start_sleepers(&job, "timeout", &[&exe, "prun", "--timeout", "3"], N);
    let st = exit_of(&mut ours, Duration::from_secs(40));
    let took = started.elapsed();
    let err = std::fs::read_to_string(job.dir.path().join("timeout.err")).unwrap();
    assert_eq!(st.code(), Some(124), "exit after --timeout: {err}");
    assert!(
        err.contains("did not end within 3 s") && ended_in_dvm(&err),
        "{err}"
    );
    assert!(
        took >= Duration::from_secs(3),
        "ended after {took:?}: {err}"
    );
    wait_none_named(&job, "sleep", Duration::from_secs(30));
    hostname_job("prun after a timed-out prun");
}

/// The README's install (`install-components.sh`) puts the site parameter file into the prefix
/// (here a stand-in prefix): over PRRTE's stock file (kept as .orig), again when it is ours and
/// unchanged, but never over a file the site edited (ours goes beside it).
#[test]
fn install_components_puts_the_site_params_into_the_prefix_keeping_edits() {
    let dir = harness::TestDir::new("install-params").unwrap();
    let prefix = dir.sub("prefix").unwrap();
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::create_dir_all(prefix.join("etc")).unwrap();
    std::fs::write(prefix.join("bin/prte"), "#!/bin/sh\n").unwrap();
    let mut perm = std::fs::metadata(prefix.join("bin/prte"))
        .unwrap()
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(prefix.join("bin/prte"), perm).unwrap();
    let conf = prefix.join("etc/prte-mca-params.conf");
    let stock = "# PRRTE's stock file\n\n#   mca_component_path = ...\n";
    std::fs::write(&conf, stock).unwrap();
    let ours = std::fs::read_to_string(repo().join("prrte-config/prte-mca-params.conf")).unwrap();
    // the components as built for the tests (debug), not rebuilt
    let target = harness::workspace_bin("prrte-k8s").unwrap();
    let target = target.parent().unwrap().parent().unwrap().to_path_buf();
    let install = || {
        let o = std::process::Command::new("bash")
            .arg(repo().join("prrte-config/install-components.sh"))
            .args(["--debug", "--no-build"])
            .env("PRRTE_K8S_PREFIX", &prefix)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let said = install();
    assert!(said.contains("installed the site parameter file"), "{said}");
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), ours);
    assert!(ours.contains("odls_base_max_threads = 0"));
    assert_eq!(
        std::fs::read_to_string(prefix.join("etc/prte-mca-params.conf.orig")).unwrap(),
        stock
    );
    assert!(prefix.join("lib/prte/prte_mca_ras_k8s.so").is_file());
    assert!(install().contains("already current"));
    // The site edits it: kept, ours beside it.
    let edited = format!("{ours}ras_k8s_timeout = 20\n");
    std::fs::write(&conf, &edited).unwrap();
    let said = install();
    assert!(
        said.contains("kept") && said.contains(".prrte-k8s-new"),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), edited);
    assert_eq!(
        std::fs::read_to_string(prefix.join("etc/prte-mca-params.conf.prrte-k8s-new")).unwrap(),
        ours
    );
}
