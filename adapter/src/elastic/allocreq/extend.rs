//! `PMIX_ALLOC_EXTEND` carried out: the job's workload raised as `prrte-k8s grow` raises it,
//! the new pods awaited with `ras k8s`'s readiness rules (or the request's shorter
//! `PMIX_TIMEOUT`), and then handed to the DVM through PRRTE's own add-host path (`prun
//! --add-host HOST:SLOTS,... -n 1 true` against prte's PMIx server, which makes the k8s PLM
//! start a daemon in each new pod only). A request cancelled while its pods are awaited, pods
//! that never come, or an add-host that fails lower the workload back to its size before:
//! nothing is left half-changed.
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::rules::{check_given_back, from_grow, refuse, Refusal, Status};
use crate::discovery::{discover_with, own_workload, DiscoveryConfig, Environment, PodNode};
use crate::elastic::grow::{
    add_host_arg, check, new_nodes, raise, read_workload, GrowError, Grown,
};

/// Cancels an extension while its pods are awaited ([`cancellation`]).
#[derive(Debug)]
pub struct Canceller(tokio::sync::oneshot::Sender<()>);

/// The waiting side of a [`Canceller`].
#[derive(Debug)]
pub struct Cancelled(tokio::sync::oneshot::Receiver<()>);

/// A cancellation: the [`Canceller`] for whoever may cancel, [`Cancelled`] for
/// [`grow_for_request`].
pub fn cancellation() -> (Canceller, Cancelled) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    (Canceller(tx), Cancelled(rx))
}

impl Canceller {
    pub fn cancel(self) {
        let _ = self.0.send(());
    }
}

impl Cancelled {
    /// Completes when cancelled; never when the [`Canceller`] was dropped unused.
    pub async fn wait(self) {
        if self.0.await.is_err() {
            std::future::pending::<()>().await
        }
    }
}

/// The workload of the pod this runs in, raised by `by` pods, with the new pods Ready. `cancel`
/// completing while they are awaited cancels the request: the workload is lowered back and
/// the answer is `PMIX_ERR_JOB_CANCELED`. `timeout`: the request's own bound on the wait
/// (never longer than `cfg.timeout`). `given_back`: the host names of the nodes the DVM gave
/// back before; new pods that would take one of those names are refused before the workload
/// is raised ([`check_given_back`]).
pub async fn grow_for_request(
    cfg: &DiscoveryConfig,
    env: &Environment,
    by: u32,
    timeout: Option<Duration>,
    given_back: &[String],
    cancel: Cancelled,
) -> Result<Grown, Refusal> {
    let refused = |e: GrowError| from_grow(&e);
    if by == 0 {
        return Err(refused(GrowError::Zero));
    }
    let own = own_workload(cfg, env)
        .await
        .map_err(|e| refused(e.into()))?;
    let wref = own.workload.ok_or_else(|| refused(GrowError::NoWorkload))?;
    let w = read_workload(&own.client, &own.namespace, wref)
        .await
        .map_err(refused)?;
    let pods = check(&w, by).map_err(refused)?;
    let fixed = DiscoveryConfig {
        expected_pods: Some(w.pods),
        exclude_self: false,
        ..cfg.clone()
    };
    let before = discover_with(&fixed, env, &mut |_| {})
        .await
        .map_err(|e| refused(e.into()))?;
    check_given_back(&before.nodes, w.pods, by, given_back)?;
    raise(&own.client, &w, pods).await.map_err(refused)?;
    let wait = DiscoveryConfig {
        expected_pods: Some(pods),
        timeout: timeout
            .filter(|t| !t.is_zero())
            .map_or(cfg.timeout, |t| t.min(cfg.timeout)),
        ..fixed
    };
    let mut quiet = |_: &crate::discovery::Progress| {};
    let waited = tokio::select! {
        r = discover_with(&wait, env, &mut quiet) => Some(r),
        () = cancel.wait() => None,
    };
    let failure = match waited {
        Some(Ok(after)) => {
            return Ok(Grown {
                new: new_nodes(&before, &after),
                workload: w,
                pods,
            })
        }
        Some(Err(e)) => from_grow(&GrowError::Discovery(e)),
        None => refuse(
            Status::Canceled,
            format!(
                "the request was cancelled while {} new pod(s) of {} {} were awaited",
                by, w.kind, w.name
            ),
        ),
    };
    let back = raise(&own.client, &w, w.pods).await;
    Err(with_rollback(failure, &w.name, w.pods, back.err()))
}

/// Lowers the workload of `grown` back to its size before (the pods came, but could not join
/// the DVM).
pub async fn roll_back(cfg: &DiscoveryConfig, env: &Environment, grown: &Grown) -> Option<String> {
    let own = match own_workload(cfg, env).await {
        Ok(o) => o,
        Err(e) => return Some(e.to_string()),
    };
    raise(&own.client, &grown.workload, grown.workload.pods)
        .await
        .err()
        .map(|e| e.to_string())
}

/// `failure`, saying whether the workload was lowered back to `pods`.
pub fn with_rollback(
    failure: Refusal,
    name: &str,
    pods: u32,
    rollback_error: Option<GrowError>,
) -> Refusal {
    let then = match rollback_error {
        None => format!("{name} was lowered back to {pods} pods"),
        Some(e) => format!(
            "lowering {name} back to {pods} pods failed too ({e}): lower it by hand (kubectl scale or patch)"
        ),
    };
    Refusal {
        status: failure.status,
        reason: format!("{}; {then}", failure.reason),
    }
}

/// Environment variables of prte that would make `prun` take itself for one of prte's clients,
/// or listen where prte listens (prte's own `--pmixmca ptl_base_*` settings).
fn strips(key: &str) -> bool {
    key == "PMIX_NAMESPACE"
        || key == "PMIX_RANK"
        || key.starts_with("PMIX_SERVER_URI")
        || key.starts_with("PMIX_MCA_ptl_")
}

/// prun refuses to run as root without it (prte, run as root, was given it too).
fn root_flag(root: bool) -> &'static [&'static str] {
    if root {
        &["--allow-run-as-root"]
    } else {
        &[]
    }
}

const EXIT_MARK: &str = "prrte-k8s-add-host-exit=";

/// Adds `nodes` to the DVM whose PMIx server is at `dvm_uri` with `prun` (prte's own
/// add-host path: a trivial job that brings the hosts in, whose launch starts their daemons),
/// within `limit`. The exit status travels on prun's standard output through a shell, not
/// through `waitpid`: inside prte, prte's own child reaper may collect any child first.
pub fn add_to_dvm(
    prun: &Path,
    dvm_uri: &str,
    nodes: &[PodNode],
    limit: Duration,
) -> Result<(), String> {
    if nodes.is_empty() {
        return Ok(());
    }
    let script = format!("\"$@\" & echo \"pid=$!\"; wait $!; echo \"{EXIT_MARK}$?\"");
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(script)
        .arg("sh")
        .arg(prun)
        .args(["--dvm-uri", dvm_uri, "--add-host", &add_host_arg(nodes)])
        .args(root_flag(nix::unistd::geteuid().is_root()))
        .args(["-n", "1", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(strips) {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", prun.display()))?;
    let (tx, rx) = mpsc::channel::<Line>();
    let out = child.stdout.take().map(|s| reader(s, tx.clone(), true));
    let err = child.stderr.take().map(|s| reader(s, tx, false));
    let deadline = std::time::Instant::now() + limit;
    let (mut pid, mut code, mut said) = (None, None, Vec::new());
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(Line::Out(l)) => {
                if let Some(p) = l.strip_prefix("pid=") {
                    pid = p.trim().parse::<i32>().ok();
                } else if let Some(c) = l.strip_prefix(EXIT_MARK) {
                    code = c.trim().parse::<i32>().ok();
                } else {
                    said.push(l);
                }
            }
            Ok(Line::Err(l)) => said.push(l),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Some(p) = pid.filter(|p| *p > 1) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                let _ = child.kill();
                let _ = child.try_wait();
                return Err(format!(
                    "prun --add-host did not finish within {} s and was killed{}",
                    limit.as_secs(),
                    tail(&said)
                ));
            }
        }
    }
    for h in [out, err].into_iter().flatten() {
        let _ = h.join();
    }
    // Reaped by prte's reaper or here; the status came on the pipe.
    let _ = child.try_wait();
    match code {
        Some(0) => Ok(()),
        Some(c) => Err(format!("prun --add-host exited {c}{}", tail(&said))),
        None => Err(format!(
            "prun --add-host ended without an exit status{}",
            tail(&said)
        )),
    }
}

enum Line {
    Out(String),
    Err(String),
}

fn reader(
    s: impl Read + Send + 'static,
    tx: mpsc::Sender<Line>,
    out: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for l in BufReader::new(s).lines().map_while(Result::ok) {
            let _ = tx.send(if out { Line::Out(l) } else { Line::Err(l) });
        }
    })
}

/// The last lines prun printed, for the reason.
fn tail(said: &[String]) -> String {
    let last: Vec<&str> = said
        .iter()
        .rev()
        .take(5)
        .rev()
        .map(String::as_str)
        .collect();
    if last.is_empty() {
        String::new()
    } else {
        format!(": {}", last.join(" | "))
    }
}

#[cfg(test)]
mod tests;
