//! `prrte-k8s controller` as a process against a sandbox API server, with a user of its own
//! so that its requests can be told from the test's, and what it costs (`/proc`).

use crate::api::auth::Rule;
use crate::api::store::Store;
use crate::api::{ApiServer, RequestRecord};
use crate::harness::{run_with_timeout, workspace_bin};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The user the controller's token authenticates as.
pub const CONTROLLER_USER: &str = "prrte-k8s-controller-under-test";
/// The value of `spec.runPolicy.managedBy` that names the controller.
pub const MANAGED_BY: &str = "prrte-k8s.io/controller";
/// The namespace the Lease is in.
const LEASE_NS: &str = "default";

/// What a process cost so far, from `/proc/PID`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// User + system CPU seconds.
    pub cpu_seconds: f64,
    /// Resident set now (`VmRSS`), KiB.
    pub rss_kib: u64,
    /// Peak resident set (`VmHWM`), KiB.
    pub peak_rss_kib: u64,
}

/// The usage of process `pid`.
pub fn usage(pid: u32) -> Result<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the command's `)`.
    let ticks: u64 = fields
        .get(11..13)
        .context("short /proc/PID/stat")?
        .iter()
        .map(|f| f.parse::<u64>().unwrap_or(0))
        .sum();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(Usage {
        cpu_seconds: ticks as f64 / hz,
        rss_kib: kib("VmRSS:"),
        peak_rss_kib: kib("VmHWM:"),
    })
}

/// Registers the MPIJob CRD `prrte-k8s crd` prints.
pub fn register_crd(store: &Store) -> Result<()> {
    let mut c = Command::new(workspace_bin("prrte-k8s")?);
    c.arg("crd");
    let out = run_with_timeout(c, Duration::from_secs(30))?;
    if !out.status.success() {
        bail!(
            "prrte-k8s crd failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    crate::cluster::apply_yaml(store, &String::from_utf8(out.stdout)?)?;
    Ok(())
}

/// A kubeconfig in `dir` for [`CONTROLLER_USER`], allowed everything.
pub fn controller_kubeconfig(api: &ApiServer, dir: &Path) -> Result<PathBuf> {
    let token = format!("controller-{}", rand::random::<u64>());
    api.add_token(&token, CONTROLLER_USER, None, vec![Rule::all()]);
    let path = dir.join("controller.kubeconfig");
    api.write_kubeconfig(&path, &token, LEASE_NS)?;
    Ok(path)
}

/// A free port on loopback (bound and let go: the controller binds it next).
fn free_port() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// `prrte-k8s controller` running; killed (SIGKILL) when dropped.
pub struct ControllerProcess {
    child: Child,
    /// Its metrics port.
    pub metrics: SocketAddr,
    /// Its probes' port.
    pub health: SocketAddr,
    log: PathBuf,
}

impl ControllerProcess {
    /// Starts the controller with `kubeconfig`, its log in `dir/controller-<n>.log`, its Lease
    /// `default/prrte-k8s-controller` held as `identity`, `extra` arguments added.
    pub fn start(dir: &Path, kubeconfig: &Path, identity: &str, extra: &[&str]) -> Result<Self> {
        let metrics = free_port()?;
        let health = free_port()?;
        let n = std::fs::read_dir(dir)?.count();
        let log = dir.join(format!("controller-{n}.log"));
        let child = Command::new(workspace_bin("prrte-k8s")?)
            .args(["controller", "--lease-namespace", LEASE_NS])
            .args(["--identity", identity, "--lease-seconds", "2"])
            .arg("--metrics-address")
            .arg(metrics.to_string())
            .arg("--health-address")
            .arg(health.to_string())
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting prrte-k8s controller")?;
        Ok(Self {
            child,
            metrics,
            health,
            log,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it cost so far.
    pub fn usage(&self) -> Result<Usage> {
        usage(self.pid())
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills it with SIGKILL (nothing of it runs on) and returns what it cost until then.
    pub fn kill(&mut self) -> Result<Usage> {
        let u = self.usage();
        self.child.kill()?;
        self.child.wait()?;
        u
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(lines).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// Waits up to `limit` until it holds the Lease (it reconciles from then on).
    pub fn await_leading(&mut self, store: &Store, identity: &str, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let holder = store
                .get(
                    &crate::api::resources::LEASES,
                    LEASE_NS,
                    "prrte-k8s-controller",
                )
                .ok()
                .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string));
            if holder.as_deref() == Some(identity) {
                return Ok(());
            }
            if !self.running() {
                bail!("the controller exited:\n{}", self.log_tail(20));
            }
            if Instant::now() >= deadline {
                bail!(
                    "the controller did not lead within {limit:?} (holder {holder:?}):\n{}",
                    self.log_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The answer to `GET path` on its probes' port: (status code, body).
    pub fn probe(&self, path: &str) -> Result<(u16, String)> {
        get(self.health, path)
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 `GET path` on `addr` (5 s at most): (status code, body).
pub fn get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no HTTP answer from {addr}: {out:?}"))?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok((code, body.to_string()))
}

/// An MPIJob `ns/name` of a launcher and one worker, `managedBy: by` (none: no `managedBy`),
/// suspended or not, with a value of `big` bytes in its launcher's environment.
pub fn mpijob(ns: &str, name: &str, by: Option<&str>, suspend: bool, big: usize) -> Value {
    let container = |role: &str| {
        let mut c = json!({"name": role, "image": "docker.io/mpioperator/mpi-pi:openmpi",
            "command": ["sleep", "1"]});
        if big > 0 && role == "launcher" {
            c["env"] = json!([{"name": "BIG", "value": "x".repeat(big)}]);
        }
        c
    };
    let mut run_policy = json!({"suspend": suspend, "backoffLimit": 0});
    if let Some(by) = by {
        run_policy["managedBy"] = json!(by);
    }
    json!({
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "slotsPerWorker": 1,
            "mpiImplementation": "OpenMPI",
            "runPolicy": run_policy,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [container("launcher")]}}},
                "Worker": {"replicas": 1, "template": {"spec": {"containers": [container("worker")]}}},
            },
        },
    })
}

/// Creates `obj` (an MPIJob) in the store; returns it as stored.
pub fn create_mpijob(store: &Store, obj: Value) -> Result<crate::api::Obj> {
    let rt = store
        .kind_of("kubeflow.org/v2beta1", "MPIJob")
        .context("the MPIJob CRD is not registered")?;
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    store
        .create(rt, &ns, obj, false)
        .map_err(|e| anyhow::anyhow!("creating an MPIJob: {e}"))
}

/// The requests of [`CONTROLLER_USER`] among `requests`.
pub fn controller_requests(requests: &[RequestRecord]) -> Vec<&RequestRecord> {
    requests
        .iter()
        .filter(|r| r.user == CONTROLLER_USER)
        .collect()
}

/// A request's verb as the API server's audit names it: list, watch, get, create, patch,
/// update, delete.
pub fn verb(r: &RequestRecord) -> &'static str {
    match r.method.as_str() {
        "GET" if r.is_watch() => "watch",
        "GET" if r.is_list() => "list",
        "GET" => "get",
        "POST" => "create",
        "PATCH" => "patch",
        "PUT" => "update",
        "DELETE" => "delete",
        _ => "other",
    }
}
