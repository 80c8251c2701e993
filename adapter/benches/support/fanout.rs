//! The fan-out harness shared by the scale benchmark (`benches/scale/`) and its test
//! (`tests/fanout_auth.rs`): real `prrte-k8s-agent` processes, each in its own PID namespace on
//! its own loopback address with a stub prted, and the launcher (`prrte_k8s::launch::Launcher`,
//! what plm k8s runs) sending them authenticated launch requests.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use prrte_k8s::launch::{
    ExitDesc, LaunchEvent, LaunchOptions, LaunchRequest, LaunchTarget, Launcher,
};

/// The release (bench) or debug (test) agent built with this package.
pub fn agent_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_prrte-k8s-agent"))
}

/// (user + system) CPU seconds of this process so far.
pub fn self_cpu() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    tv(u.user_time()) + tv(u.system_time())
}

/// A secret file (32 random bytes as hex) in `dir`.
pub fn secret_file(dir: &Path) -> Result<(PathBuf, Vec<u8>)> {
    let key = hex::encode(rand::random::<[u8; 32]>());
    let p = dir.join("key");
    std::fs::write(&p, &key)?;
    Ok((p, key.into_bytes()))
}

/// Agent processes on loopback addresses 127.77.x.y, killed on drop.
pub struct Agents {
    /// `unshare` processes.
    pub children: Vec<Child>,
    /// The agents (children of `unshare`, PID 1 of their namespaces).
    pub pids: Vec<u32>,
    pub addrs: Vec<SocketAddr>,
}

/// The first child of `pid`.
pub fn child_of(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Drop for Agents {
    /// SIGTERM (unshare passes it on; the agent stops cleanly), SIGKILL after 10 s.
    fn drop(&mut self) {
        use nix::sys::signal::{kill, Signal};
        let pid = |c: &Child| nix::unistd::Pid::from_raw(c.id() as i32);
        for c in &self.children {
            let _ = kill(pid(c), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for c in &mut self.children {
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = kill(pid(c), Signal::SIGKILL);
            let _ = c.wait();
        }
    }
}

pub fn loopback(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 77, (i / 250) as u8, (i % 250) as u8 + 1)
}

/// Starts `n` agents (release build, `--cgroup off`, stub prted `prted`) and waits until every
/// one accepts connections.
pub fn start_agents(n: usize, dir: &Path, secret: &Path, prted: &Path) -> Result<Agents> {
    start_agents_of(&agent_bin(), n, dir, secret, prted)
}

/// [`start_agents`] of another build of the agent (`bin`).
pub fn start_agents_of(
    bin: &Path,
    n: usize,
    dir: &Path,
    secret: &Path,
    prted: &Path,
) -> Result<Agents> {
    let port: u16 = 20_000 + rand::random::<u16>() % 30_000;
    let mut agents = Agents {
        children: Vec::new(),
        pids: Vec::new(),
        addrs: Vec::new(),
    };
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    for i in 0..n {
        let addr = SocketAddr::new(loopback(i).into(), port);
        let log = std::fs::File::create(dir.join(format!("agent-{i}.log")))?;
        // Each agent in its own PID namespace (with its own /proc), as in a pod: what it scans
        // of the process table is its own processes, not those of a thousand other agents.
        let child = Command::new("unshare")
            .args([
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child=SIGTERM",
                "--",
            ])
            .arg(bin)
            .arg("--listen")
            .arg(addr.to_string())
            .args(["--health-listen", "off", "--cgroup", "off"])
            .arg("--secret-file")
            .arg(secret)
            .arg("--prted")
            .arg(prted)
            .arg("--tmpdir")
            .arg(&tmp)
            .arg("--dvm-uri-file")
            .arg(dir.join(format!("dvm-uri-{i}")))
            .env("PRRTE_K8S_LOG", "warn")
            .env_remove("POD_IP")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting an agent")?;
        agents.children.push(child);
        agents.addrs.push(addr);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for (i, a) in agents.addrs.iter().enumerate() {
        loop {
            if std::net::TcpStream::connect_timeout(a, Duration::from_millis(200)).is_ok() {
                break;
            }
            if let Ok(Some(st)) = agents.children[i].try_wait() {
                let log =
                    std::fs::read_to_string(dir.join(format!("agent-{i}.log"))).unwrap_or_default();
                bail!("agent {i} at {a} exited ({st}): {log}");
            }
            if Instant::now() > deadline {
                bail!("agent {i} at {a} does not accept connections");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = child_of(agents.children[i].id())
            .with_context(|| format!("the agent process of unshare {}", agents.children[i].id()))?;
        agents.pids.push(pid);
    }
    Ok(agents)
}

/// Utime+stime (seconds) of the agents and of their waited-for children (the stub prteds).
pub fn agents_cpu(agents: &Agents) -> f64 {
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    agents
        .pids
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .filter_map(|s| {
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            // fields after ")": state(0) ... utime(11) stime(12) cutime(13) cstime(14)
            let sum: f64 = f[11..15].iter().filter_map(|x| x.parse::<f64>().ok()).sum();
            Some(sum / tick)
        })
        .sum()
}

/// One fan-out round as the harness saw it: when every target had started and exited, the
/// launcher's CPU, and every failure the launcher reported.
pub struct Outcome {
    pub n: usize,
    pub started: usize,
    pub exited: usize,
    /// `Failed` reasons (the launch never started).
    pub failed: Vec<String>,
    /// `Exited` with anything but exit code 0.
    pub bad_exit: Vec<String>,
    /// Seconds from the start until every target had started / exited (all of them only).
    pub all_started: Option<f64>,
    pub all_exited: Option<f64>,
    /// The launcher's (this process's) CPU seconds during the round.
    pub cpu: f64,
    /// The agents' CPU seconds (with their reaped children) during the round.
    pub agents_cpu: f64,
    /// Whether the round ended before every target had its final event.
    pub timed_out: bool,
}

/// A successful round: every target started and exited 0.
pub struct Round {
    pub all_started: f64,
    pub all_exited: f64,
    pub cpu: f64,
    pub agents_cpu: f64,
}

/// A round that must succeed: fails (naming the first failure) unless every target started and
/// its stub prted exited 0 within `timeout`.
pub fn fanout_round(agents: &Agents, secret: &[u8], timeout: Duration) -> Result<Round> {
    let o = run_round(agents, secret, timeout);
    if !o.failed.is_empty() || !o.bad_exit.is_empty() {
        bail!(
            "{} of {} launches failed, {} exited badly; first: {:?} {:?}",
            o.failed.len(),
            o.n,
            o.bad_exit.len(),
            o.failed.first(),
            o.bad_exit.first()
        );
    }
    match (o.all_started, o.all_exited) {
        (Some(a), Some(b)) => Ok(Round {
            all_started: a,
            all_exited: b,
            cpu: o.cpu,
            agents_cpu: o.agents_cpu,
        }),
        _ => bail!(
            "after {timeout:?}: {} of {} started, {} exited",
            o.started,
            o.n,
            o.exited
        ),
    }
}

/// The launcher (`prrte_k8s::launch::Launcher`, what plm k8s runs) launches the stub prted
/// through every agent with `secret`; waits until every target has its final event (or
/// `timeout`) and reports what it saw.
pub fn run_round(agents: &Agents, secret: &[u8], timeout: Duration) -> Outcome {
    let n = agents.addrs.len();
    let targets: Vec<(LaunchTarget, LaunchRequest)> = agents
        .addrs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            (
                LaunchTarget {
                    id: i as u32 + 1,
                    pod: format!("pod-{i}"),
                    addr: *a,
                },
                LaunchRequest {
                    argv: vec![
                        "--prtemca".into(),
                        "ess".into(),
                        "env".into(),
                        "--prtemca".into(),
                        "ess_base_vpid".into(),
                        (i + 1).to_string(),
                    ],
                    env: vec![("PRTE_MCA_prte_if_include".into(), "127.0.0.0/8".into())],
                    dvm_uri: None,
                },
            )
        })
        .collect();
    #[derive(Default)]
    struct Seen {
        started: usize,
        exited: usize,
        failed: Vec<String>,
        bad_exit: Vec<String>,
        t_started: Option<Instant>,
        t_exited: Option<Instant>,
    }
    let seen = Arc::new((Mutex::new(Seen::default()), Condvar::new()));
    let s2 = seen.clone();
    let opts = LaunchOptions {
        secret: Some(secret.to_vec()),
        ..Default::default()
    };
    let agents_cpu0 = agents_cpu(agents);
    let cpu0 = self_cpu();
    let t0 = Instant::now();
    let launcher = Launcher::start(
        targets,
        opts,
        Box::new(move |e| {
            let (m, cv) = &*s2;
            let mut s = m.lock().unwrap();
            match e {
                LaunchEvent::Started { .. } => {
                    s.started += 1;
                    if s.started == n {
                        s.t_started = Some(Instant::now());
                    }
                }
                LaunchEvent::Failed { reason, .. } => s.failed.push(reason),
                LaunchEvent::Exited { status, pod, .. } => {
                    s.exited += 1;
                    if status != ExitDesc::Code(0) {
                        s.bad_exit.push(format!("{pod}: {status}"));
                    }
                    if s.exited == n {
                        s.t_exited = Some(Instant::now());
                    }
                }
                LaunchEvent::Preempt { .. } => {}
            }
            cv.notify_all();
        }),
    );
    let (m, cv) = &*seen;
    let deadline = Instant::now() + timeout;
    let mut s = m.lock().unwrap();
    while s.exited + s.failed.len() < n {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        s = cv.wait_timeout(s, deadline - now).unwrap().0;
    }
    let cpu = self_cpu() - cpu0;
    let timed_out = s.exited + s.failed.len() < n;
    let since = |t: Option<Instant>| t.map(|t| (t - t0).as_secs_f64());
    let o = Outcome {
        n,
        started: s.started,
        exited: s.exited,
        failed: s.failed.clone(),
        bad_exit: s.bad_exit.clone(),
        all_started: since(s.t_started),
        all_exited: since(s.t_exited),
        cpu,
        agents_cpu: 0.0,
        timed_out,
    };
    drop(s);
    drop(launcher);
    Outcome {
        agents_cpu: agents_cpu(agents) - agents_cpu0,
        ..o
    }
}

/// A stub prted that exits 0 at once, whatever its arguments.
pub fn stub_prted(dir: &Path, body: &str) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(format!("prted-stub-{}", rand::random::<u32>()));
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n"))?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
    Ok(p)
}
