//! Running the benchmark: the pods of one pod count, each method's DVM started and stopped,
//! what is measured while it is up, and the prteds this run started.

use crate::host::{load_avg, own_cpu, tree_cpu, PROFILE};
use crate::phases::{pss_kb, Starts};
use crate::results::{Row, Rss, Sample, Variant};
use anyhow::{bail, Context, Result};
use sandbox::bench::nsexec::NsPins;
use sandbox::bench::sshd::{self, Spawn, SshBaseline};
use sandbox::harness::mpijob::{Job, JobSpec};
use sandbox::harness::{self, TestDir};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The directories of this run's jobs: every prted it started has its TMPDIR under one.
fn own_dirs() -> std::sync::MutexGuard<'static, Vec<String>> {
    static DIRS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    DIRS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps `dir` as one of this run's jobs' directories (for [`own_prteds`]).
pub fn register_dir(dir: &TestDir) {
    own_dirs().push(dir.path().to_string_lossy().into_owned());
}

/// prted processes this run started that are still alive (others' prteds on the same machine,
/// e.g. of tests running side by side, are not ours to report).
pub fn own_prteds() -> Vec<u32> {
    let dirs = own_dirs().clone();
    harness::pids_named("prted")
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                let env = String::from_utf8_lossy(&env);
                dirs.iter().any(|d| env.contains(d.as_str()))
            })
        })
        .collect()
}

/// Per worker pod (1..), the summed peak RSS (VmHWM, KiB) of its processes named like `comm`.
fn peak_per_worker(job: &Job, comm: &str) -> Result<Vec<u64>> {
    (1..job.pods.len())
        .map(|i| {
            Ok(sshd::pids_like(job, i, comm)?
                .iter()
                .filter_map(|p| sshd::status_kb(*p, "VmHWM"))
                .sum())
        })
        .collect()
}

/// Per worker pod (1..), the summed `f` (kB) of its processes named like `comm`.
fn sum_per_worker(job: &Job, comm: &str, f: fn(u32) -> Option<u64>) -> Result<Vec<u64>> {
    (1..job.pods.len())
        .map(|i| {
            Ok(sshd::pids_like(job, i, comm)?
                .into_iter()
                .filter_map(f)
                .sum())
        })
        .collect()
}

/// Peak RSS, RSS and Pss of processes in worker pods while the DVM of `variant` is up.
fn measure_rss(job: &Job, variant: Variant, rss: &mut Rss) -> Result<()> {
    match variant {
        Variant::Agent => {
            // comm is cut to 15 characters: "prrte-k8s-agen"
            rss.agent = peak_per_worker(job, "prrte-k8s-agen")?;
            rss.agent_now = sum_per_worker(job, "prrte-k8s-agen", |p| sshd::status_kb(p, "VmRSS"))?;
            rss.agent_pss = sum_per_worker(job, "prrte-k8s-agen", pss_kb)?;
            rss.prted_pss = sum_per_worker(job, "prted", pss_kb)?;
        }
        Variant::Ssh => {
            rss.sshd = peak_per_worker(job, "sshd")?;
            rss.sshd_pss = sum_per_worker(job, "sshd", pss_kb)?;
            rss.clients = job
                .pids_in_pod(0, "ssh")?
                .iter()
                .filter_map(|p| sshd::status_kb(*p, "VmHWM"))
                .sum();
        }
        Variant::SshNoTree | Variant::LowerBound => {}
    }
    Ok(())
}

/// Each method's samples, in the order of the methods.
type Times = Vec<(Variant, Vec<Sample>)>;

/// The pods of one pod count and what every method needs to start a DVM on them.
struct Methods<'a> {
    job: &'a Job,
    ssh: &'a SshBaseline,
    /// The lower bound's `plm_ssh_agent` script (when the lower bound runs).
    lower: Option<&'a Path>,
    /// How long one DVM may take to become ready.
    limit: Duration,
    /// Ranks per pod of the second `true` job (0: left out).
    ranks: usize,
}

impl Methods<'_> {
    /// prte's options for `variant`, with the settings given for every method.
    fn prte_args(&self, variant: Variant) -> Result<Vec<String>> {
        let mut args = self.method_args(variant)?;
        for (name, value) in PRTE_SETTINGS.get().into_iter().flatten() {
            args.extend(["--prtemca".into(), name.clone(), value.clone()]);
        }
        Ok(args)
    }

    fn method_args(&self, variant: Variant) -> Result<Vec<String>> {
        Ok(match variant {
            // The launcher's summary of its round (crate::launch_round) is printed on
            // plm_base_verbose 2, with a line per pod.
            Variant::Agent => sandbox::harness::mpijob::K8S
                .iter()
                .chain(&["--prtemca", "plm_base_verbose", "2"])
                .map(|s| s.to_string())
                .collect(),
            Variant::Ssh => self.ssh.prte_args(Spawn::Tree),
            Variant::SshNoTree => self.ssh.prte_args(Spawn::NoTree),
            Variant::LowerBound => {
                let script = self
                    .lower
                    .context("the lower bound's agent script is missing")?;
                let mut a = self.ssh.prte_args(Spawn::NoTree);
                let i = a
                    .iter()
                    .position(|x| x == "plm_ssh_agent")
                    .context("no plm_ssh_agent")?;
                a[i + 1] = script.to_string_lossy().into_owned();
                a
            }
        })
    }

    /// One DVM start/stop of `variant`: DVM-ready time, first job, launcher CPU.
    fn one(&self, variant: Variant, tag: &str, rss: Option<&mut Rss>) -> Result<Sample> {
        let args = self.prte_args(variant)?;
        let job = self.job;
        let uri = job.dir.path().join(format!("{tag}.uri"));
        let mut sample = Sample {
            load: load_avg(),
            ..Sample::default()
        };
        let mut starts = None;
        let cycle = job.dvm_cycle(tag, &args, self.limit, Some(&INTERRUPTED), |job| {
            // The launcher's CPU first, before anything else runs in pod 0.
            let prte = job.pids_in_pod(0, "prte")?;
            let [prte] = prte[..] else {
                bail!("expected one prte in pod 0, found {prte:?}");
            };
            sample.cpu = tree_cpu(prte);
            let prteds = check_daemons(job, variant)?;
            starts = Some(
                Starts::read(prte, &prteds)
                    .with_context(|| format!("{tag}: the start times of prte and the prteds"))?,
            );
            if let Some(r) = rss {
                measure_rss(job, variant, r)?;
            }
            // Every method waits the same window here, so the first job finds every DVM as
            // settled.
            sample.agents_idle = agents_idle_cpu(job)?;
            sample.first_job = first_job(job, &uri, tag)?;
            sample.job_one = true_job(job, &uri, tag, 1)?;
            if self.ranks > 0 {
                sample.job_many = true_job(job, &uri, tag, self.ranks)?;
            }
            Ok(String::new())
        })?;
        if matches!(variant, Variant::Ssh | Variant::SshNoTree) {
            sshd::wait_sessions_closed(job, Duration::from_secs(15))
                .with_context(|| format!("{tag}: ssh sessions left"))?;
        }
        sample.ready = cycle.ready.as_secs_f64();
        if variant == Variant::Agent {
            let out = ["out", "err"]
                .map(|ext| {
                    std::fs::read_to_string(job.dir.path().join(format!("{tag}.{ext}")))
                        .unwrap_or_default()
                })
                .concat();
            sample.launch = crate::launch_round::first_round(&out)
                .with_context(|| format!("{tag}: no launch round in prte's output:\n{out}"))?;
        }
        if let Some(s) = starts {
            sample.phases = s.phases(sample.ready);
        }
        Ok(sample)
    }

    /// One untimed warm-up of each variant (page cache, first connections).
    fn warm_up(&self, variants: &[Variant]) -> Result<()> {
        let n = self.job.pods.len();
        for v in variants {
            eprintln!("[{n} pods] warm-up {}", v.tag());
            self.one(*v, &format!("warmup-{}", v.tag()), None)?;
        }
        Ok(())
    }

    /// `runs` timed rounds of every variant, and the peak RSS of the last.
    fn timed(&self, variants: &[Variant], runs: usize) -> Result<(Times, Rss)> {
        let n = self.job.pods.len();
        let mut times: Times = variants.iter().map(|v| (*v, Vec::new())).collect();
        let mut rss = Rss::default();
        for r in 0..runs {
            // Rotate the order so no variant always runs right after another.
            for k in 0..variants.len() {
                let idx = (k + r) % variants.len();
                let v = variants[idx];
                let last = r + 1 == runs;
                let t = self.one(
                    v,
                    &format!("run{r}-{}", v.tag()),
                    if last { Some(&mut rss) } else { None },
                )?;
                eprintln!(
                    "[{n} pods, {PROFILE}] run {}/{runs} {:<11} ready {:.3} s ({:.2} + {:.2} + {:.2}), first job {:.3} s, true x1 {:.3} s, x{} {:.3} s, launcher CPU {:.3} s, idle agents {:.2} ms/s (load {:.2})",
                    r + 1,
                    v.tag(),
                    t.ready,
                    t.phases.to_first,
                    t.phases.spread,
                    t.phases.wire_up,
                    t.first_job,
                    t.job_one,
                    self.ranks,
                    t.job_many,
                    t.cpu,
                    t.agents_idle,
                    t.load
                );
                times[idx].1.push(t);
            }
        }
        Ok((times, rss))
    }
}

/// Every worker pod runs a prted once the DVM of `variant` is ready: their host pids.
fn check_daemons(job: &Job, variant: Variant) -> Result<Vec<u32>> {
    let n = job.pods.len();
    if variant == Variant::LowerBound {
        // The daemons live in pod 0's PID namespace (see sandbox::bench::nsexec).
        let prteds = job.pids_in_pod(0, "prted")?;
        if prteds.len() < n - 1 {
            bail!("DVM ready but fewer than {} prteds run", n - 1);
        }
        return Ok(prteds);
    }
    let mut prteds = Vec::new();
    for i in 1..n {
        let p = job.pids_in_pod(i, "prted")?;
        if p.is_empty() {
            bail!("DVM ready but pod {i} runs no prted");
        }
        prteds.extend(p);
    }
    Ok(prteds)
}

/// How long the agents' CPU is watched while the DVM is up and idle.
const IDLE_WINDOW: Duration = Duration::from_secs(1);

/// CPU the worker pods' agents use over [`IDLE_WINDOW`] with the DVM up and idle, ms per
/// second per agent (the agents follow their prted's process tree while it runs; with the
/// other methods they have no prted and show what an idle agent costs).
fn agents_idle_cpu(job: &Job) -> Result<f64> {
    let mut agents = Vec::new();
    for i in 1..job.pods.len() {
        // comm is cut to 15 characters: "prrte-k8s-agen"
        agents.extend(sshd::pids_like(job, i, "prrte-k8s-agen")?);
    }
    if agents.is_empty() {
        bail!("no agent runs in the worker pods");
    }
    let sum = || agents.iter().filter_map(|p| own_cpu(*p)).sum::<f64>();
    let (t0, c0) = (std::time::Instant::now(), sum());
    std::thread::sleep(IDLE_WINDOW);
    let (c1, dt) = (sum(), t0.elapsed().as_secs_f64());
    Ok((c1 - c0) * 1e3 / dt / agents.len() as f64)
}

/// `prun -n <2 per pod> hostname` into the DVM whose URI is in `uri`: seconds it took.
fn first_job(job: &Job, uri: &Path, tag: &str) -> Result<f64> {
    let n = job.pods.len();
    let dvm = format!("file:{}", uri.display());
    let np = (2 * n).to_string();
    let t0 = std::time::Instant::now();
    let o = job.run_in_pod(
        0,
        "prun",
        &[
            "--allow-run-as-root",
            "--dvm-uri",
            &dvm,
            "-n",
            &np,
            "hostname",
        ],
        Duration::from_secs(60),
    )?;
    let took = t0.elapsed().as_secs_f64();
    let lines = String::from_utf8_lossy(&o.stdout).lines().count();
    if !o.status.success() || lines != 2 * n {
        bail!(
            "first job ({tag}): {lines} lines of {} expected, {}",
            2 * n,
            sandbox::harness::mpijob::text(&o)
        );
    }
    Ok(took)
}

/// `prun --map-by ppr:<per_pod>:node:OVERSUBSCRIBE true` into the DVM whose URI is in `uri`:
/// `per_pod` ranks of `true` in every pod (more than its slots: oversubscribed), seconds.
fn true_job(job: &Job, uri: &Path, tag: &str, per_pod: usize) -> Result<f64> {
    let n = job.pods.len();
    let dvm = format!("file:{}", uri.display());
    let np = (per_pod * n).to_string();
    let map = format!("ppr:{per_pod}:node:OVERSUBSCRIBE");
    let argv = [
        "--allow-run-as-root",
        "--dvm-uri",
        &dvm,
        "-n",
        &np,
        "--map-by",
        &map,
        "true",
    ];
    let t0 = std::time::Instant::now();
    let o = job.run_in_pod(0, "prun", &argv, Duration::from_secs(120))?;
    let took = t0.elapsed().as_secs_f64();
    if !o.status.success() {
        bail!(
            "job of {np} x true ({per_pod} per pod, {tag}) failed: {}",
            sandbox::harness::mpijob::text(&o)
        );
    }
    Ok(took)
}

/// PRRTE parameters every method's prte gets (`--prtemca NAME=VALUE`).
static PRTE_SETTINGS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

/// Sets the PRRTE parameters every method's prte gets; once, before anything runs.
pub fn set_prte_settings(settings: &[(String, String)]) {
    let _ = PRTE_SETTINGS.set(settings.to_vec());
}

/// Every method on `n` pods: the pods (agent and sshd in each), a warm-up, then `runs` timed
/// rounds; `ranks` ranks per pod in the second `true` job.
pub async fn bench_pods(
    n: usize,
    runs: usize,
    ranks: usize,
    variants: &[Variant],
    limit: Duration,
) -> Result<Row> {
    let keys = TestDir::new("bench-keys")?;
    let ssh = SshBaseline::prepare(keys.path())?;
    let name = format!("bench{n}");
    let mut spec = JobSpec::new(&name, n);
    // 2 slots per pod (ras k8s counts whole CPUs) for the first job's 2 ranks per pod.
    spec.cpus = vec!["2"; n];
    // The node takes them all (a kubelet's --max-pods raised as far as needed).
    spec.max_pods = n.max(sandbox::cluster::kubelet::MAX_PODS);
    ssh.apply(&mut spec);
    let pins = if variants.contains(&Variant::LowerBound) {
        Some(NsPins::prepare(&keys.path().join("ns"))?)
    } else {
        None
    };
    eprintln!("[{n} pods] starting the sandbox and {n} pods (agent + sshd in each) ...");
    let job = Job::start(spec).await?;
    register_dir(&job.dir);
    let lower = match &pins {
        Some(p) => Some(p.write_agent(&job, &keys.path().join("nsexec"))?),
        None => None,
    };
    for i in 0..n {
        if sshd::pids_like(&job, i, "sshd")?.len() != 1 {
            bail!("pod {i} runs no sshd:\n{}", sshd::sshd_log(&job, i));
        }
    }
    let methods = Methods {
        job: &job,
        ssh: &ssh,
        lower: lower.as_deref(),
        limit,
        ranks,
    };
    methods.warm_up(variants)?;
    let (times, rss) = methods.timed(variants, runs)?;
    job.wait_no_prteds(Duration::from_secs(10))?;
    drop(job);
    drop(pins);
    drop(keys);
    Ok(Row {
        pods: n,
        ranks_per_pod: ranks,
        times,
        rss,
    })
}
