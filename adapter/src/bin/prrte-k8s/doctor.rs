//! `prrte-k8s doctor`: checks, one line each (`[ok]` or `[FAIL]` with a remedy), everything PRRTE's
//! k8s components need in this pod. Exits non-zero if any check fails. Every check is bounded
//! in time.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::Api;
use prrte_k8s::discovery::client::{error_chain, Environment, SERVICE_ACCOUNT_DIR};
use prrte_k8s::discovery::{self, Allocation, DiscoveryConfig, SlotsPolicy};
use prrte_k8s::launch::{ping_agent, LaunchOptions, LaunchTarget};
use prrte_k8s::protocol::read_secret_file;
use prrte_k8s::settings::{agent, mca, tools, ArgExt};

use crate::{seconds_of, JobArgs, Seconds};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    #[command(flatten)]
    job: JobArgs,
    #[arg(long, setting = &tools::DOCTOR_TIMEOUT, value_parser = seconds_of(&tools::DOCTOR_TIMEOUT))]
    timeout: Seconds,
    #[arg(long, setting = &mca::SECRET_FILE)]
    secret_file: PathBuf,
    #[arg(long, setting = &mca::AGENT_PORT, value_parser = |t: &str| mca::AGENT_PORT.port(t))]
    agent_port: u16,
    #[arg(long, setting = &tools::DOCTOR_AGENT_TIMEOUT, value_parser = seconds_of(&tools::DOCTOR_AGENT_TIMEOUT))]
    agent_timeout: Seconds,
}

/// How long API calls of the RBAC check may take.
const API_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Report {
    failed: usize,
}

impl Report {
    fn ok(&mut self, what: &str) {
        println!("[ok]   {what}");
    }
    fn fail(&mut self, what: &str, remedy: &str) {
        self.failed += 1;
        println!("[FAIL] {what}");
        println!("       remedy: {remedy}");
    }
    fn skip(&mut self, what: &str) {
        println!("[skip] {what}");
    }
    /// A problem that does not stop jobs from running (not counted as a failure).
    fn warn(&mut self, what: &str, remedy: &str) {
        println!("[warn] {what}");
        println!("       remedy: {remedy}");
    }
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn check_in_cluster(r: &mut Report, env: &Environment) {
    // Same precedence as discovery (and client-go): an explicit $KUBECONFIG wins over the
    // in-cluster service account.
    if let Some(value) = &env.kubeconfig_env {
        let existing: Vec<String> = std::env::split_paths(value)
            .filter(|p| p.is_file())
            .map(|p| p.display().to_string())
            .collect();
        if !existing.is_empty() {
            r.ok(&format!(
                "client config: kubeconfig {} ($KUBECONFIG, which takes precedence over the in-cluster service account; unset it to use the pod's own)",
                existing.join(":")
            ));
            return;
        }
    }
    let dir = Path::new(SERVICE_ACCOUNT_DIR);
    let mut missing: Vec<String> = ["token", "ca.crt", "namespace"]
        .iter()
        .filter(|f| !dir.join(f).is_file())
        .map(|f| dir.join(f).display().to_string())
        .collect();
    if env.service_host.is_none() {
        missing.insert(0, "$KUBERNETES_SERVICE_HOST".into());
    }
    if missing.is_empty() {
        r.ok(&format!(
            "in-cluster config: service account at {SERVICE_ACCOUNT_DIR}, API server {}:{}",
            env.service_host.as_deref().unwrap_or(""),
            env.service_port.as_deref().unwrap_or("443")
        ));
    } else {
        r.fail(
            &format!("in-cluster config: missing {}", missing.join(", ")),
            "run inside a pod of the job whose service account token is mounted in this \
             container (a projected serviceAccountToken volume at \
             /var/run/secrets/kubernetes.io/serviceaccount, as `prrte-k8s manifest` renders \
             it, or automountServiceAccountToken: true) and use the job's ServiceAccount",
        );
    }
}

async fn ssar(client: &kube::Client, ns: &str, verb: &str) -> Result<(bool, String), kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.to_owned()),
                verb: Some(verb.to_owned()),
                resource: Some("pods".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let out = api.create(&PostParams::default(), &review).await?;
    let status = out.status.unwrap_or_default();
    Ok((status.allowed, status.reason.unwrap_or_default()))
}

const RBAC_REMEDY: &str = "bind the job's service account to a Role with `- apiGroups: [\"\"] \
     resources: [\"pods\"] verbs: [\"get\", \"list\", \"watch\"]` (kubectl apply -f \
     prrte-config/k8s/rbac.yaml, or `prrte-k8s manifest --only rbac`; the pods must use that \
     ServiceAccount)";

async fn check_rbac(r: &mut Report, env: &Environment, namespace: &str) {
    let client = match tokio::time::timeout(
        API_TIMEOUT,
        discovery::client::connect_with_env(None, env, API_TIMEOUT),
    )
    .await
    {
        Ok(Ok(c)) => c.client,
        Ok(Err(e)) => {
            r.fail(
                &format!("RBAC: cannot build an API client: {e}"),
                "fix the in-cluster config check above",
            );
            return;
        }
        Err(_) => {
            r.fail(
                "RBAC: building an API client did not finish in time",
                "check the API server's health",
            );
            return;
        }
    };
    let mut denied = Vec::new();
    let mut reasons: Vec<String> = Vec::new();
    let mut review_failed = None;
    for verb in ["get", "list", "watch"] {
        match tokio::time::timeout(API_TIMEOUT, ssar(&client, namespace, verb)).await {
            Ok(Ok((true, _))) => {}
            Ok(Ok((false, reason))) => {
                denied.push(verb);
                if !reason.is_empty() && !reasons.contains(&reason) {
                    reasons.push(reason);
                }
            }
            Ok(Err(e)) => {
                review_failed = Some(error_chain(&e));
                break;
            }
            Err(_) => {
                review_failed = Some(format!("no answer within {API_TIMEOUT:?}"));
                break;
            }
        }
    }
    if let Some(why) = review_failed {
        // No SelfSubjectAccessReview: try the list itself.
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        match tokio::time::timeout(API_TIMEOUT, pods.list(&ListParams::default().limit(1))).await {
            Ok(Ok(_)) => r.ok(&format!(
                "RBAC: may list pods in namespace {namespace} (trial list; access review unavailable: {why})"
            )),
            Ok(Err(e)) => r.fail(&format!("RBAC: cannot list pods in namespace {namespace}: {}", error_chain(&e)), RBAC_REMEDY),
            Err(_) => r.fail(&format!("RBAC: listing pods in namespace {namespace} did not answer within {API_TIMEOUT:?}"), "check the API server's health"),
        }
        return;
    }
    if denied.is_empty() {
        r.ok(&format!(
            "RBAC: may get, list and watch pods in namespace {namespace}"
        ));
    } else {
        r.fail(
            &format!(
                "RBAC: the service account may not {} pods in namespace {namespace}{}",
                denied.join(", "),
                if reasons.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", reasons.join("; "))
                }
            ),
            RBAC_REMEDY,
        );
    }
}

async fn check_discovery(
    r: &mut Report,
    args: &DoctorArgs,
    env: &Environment,
) -> Option<Allocation> {
    let cfg = DiscoveryConfig {
        namespace: args.job.namespace.clone(),
        selector: args.job.selector.clone(),
        expected_pods: args.job.expected.filter(|n| *n > 0),
        timeout: args.timeout.0,
        slots: SlotsPolicy::Auto,
        kubeconfig: None,
        self_pod: None,
        // Every pod's agent is checked, this one's too.
        exclude_self: false,
    };
    let bound = args.timeout.0 + Duration::from_secs(5);
    match tokio::time::timeout(bound, discovery::discover_with(&cfg, env, &mut |_| {})).await {
        Ok(Ok(alloc)) => {
            r.ok(&format!(
                "pods: {} ready pods of the job (selector {:?}, namespace {}, {} slots)",
                alloc.nodes.len(),
                alloc.selector,
                alloc.namespace,
                alloc.total_slots()
            ));
            Some(alloc)
        }
        Ok(Err(e)) => {
            r.fail(
                &format!("pods: discovery failed: {e}"),
                "see the message above; `prrte-k8s pods -v` shows the discovery step by step",
            );
            None
        }
        Err(_) => {
            r.fail(
                &format!("pods: discovery did not finish within {bound:?}"),
                "check that the job's pods are Ready and the API server answers",
            );
            None
        }
    }
}

/// The k8s parameters in this environment: no unknown name, no bad value, no two names of one
/// setting that disagree (what the launcher started here would read).
fn check_settings(r: &mut Report) {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    let problems = mca::env_problems(&vars);
    if problems.is_empty() {
        r.ok("settings: the k8s parameters set in this environment are valid");
    }
    for p in problems {
        r.fail(
            &format!("settings: {p}"),
            "fix the variable in the pod template (or this shell)",
        );
    }
}

async fn check_agents(r: &mut Report, args: &DoctorArgs, alloc: Option<&Allocation>) {
    let Some(alloc) = alloc else {
        r.skip("agents: not checked (the job's pods are unknown; fix the checks above)");
        return;
    };
    let path = args.secret_file.clone();
    let secret = match read_secret_file(&path) {
        Ok(s) => s,
        Err(e) => {
            r.fail(
                &format!("agents: cannot read the per-job secret: {e}"),
                "mount the job's Secret in this pod, or pass --secret-file",
            );
            return;
        }
    };
    let opts = LaunchOptions {
        secret: Some(secret),
        connect_timeout: args.agent_timeout.0,
        request_timeout: args.agent_timeout.0,
        ..Default::default()
    };
    let targets: Vec<(LaunchTarget, bool)> = alloc
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let t = LaunchTarget {
                id: i as u32,
                pod: n.pod.clone(),
                addr: SocketAddr::new(n.ip.into(), args.agent_port),
            };
            (t, n.is_self)
        })
        .collect();
    let results =
        futures::future::join_all(targets.iter().map(|(t, _)| ping_agent(t, &opts))).await;
    for ((t, is_self), res) in targets.iter().zip(results) {
        match res {
            Ok(rtt) => r.ok(&format!(
                "agent of pod {} at {}: authenticated with {} (ping {} ms)",
                t.pod,
                t.addr,
                path.display(),
                rtt.as_millis()
            )),
            Err(e) if *is_self && e.is_unreachable() => r.ok(&format!(
                "agent of pod {} (this pod) not reachable at {}; fine if prte runs here, the launcher's pod needs no agent",
                t.pod, t.addr
            )),
            Err(e) if e.is_secret_mismatch() => r.fail(
                &format!("agent of pod {}: {e}", t.pod),
                "mount the same Secret in every pod of the job (the agents' --secret-file and this pod's secret file must hold the same key), then restart the mismatching pod",
            ),
            Err(e) => r.fail(
                &format!("agent of pod {}: {e}", t.pod),
                &format!("make prrte-k8s-agent the pod's entrypoint listening on the agent port ({}, default {}) and allow that port in the NetworkPolicy (prrte-config/k8s/networkpolicy.yaml)", mca::AGENT_PORT.how_to_set(), mca::AGENT_PORT.default),
            ),
        }
    }
}

/// The PRRTE install prefix: configured, else found from `prte` on PATH.
fn find_prefix() -> Option<(PathBuf, String)> {
    if let Some(p) = crate::tools::configured_prefix() {
        let how = if env_path(tools::PREFIX.var()).is_some() {
            tools::PREFIX.var()
        } else {
            agent::PRTED.var()
        };
        return Some((p, format!("${how}")));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("prte"))
        .find(|p| p.is_file())
        .and_then(|p| {
            Some((
                p.parent()?.parent()?.to_path_buf(),
                "prte on PATH".to_owned(),
            ))
        })
}

fn executable(p: &Path) -> bool {
    p.is_file() && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
}

fn check_prrte(r: &mut Report) {
    let Some((prefix, how)) = find_prefix() else {
        let (prefix, prted) = (tools::PREFIX.var(), agent::PRTED.var());
        r.fail(
            &format!("PRRTE: no install prefix (${prefix} and ${prted} unset, no prte on PATH)"),
            &format!("set {prefix} to the PRRTE install prefix (the directory holding bin/prte)"),
        );
        r.skip("k8s components: not checked (no PRRTE prefix)");
        return;
    };
    // pquery and pctrl (PMIx's) let `prrte-k8s prun` end its job when it is interrupted.
    let missing: Vec<String> = ["prte", "prted", "prun", "pterm", "pquery", "pctrl"]
        .iter()
        .map(|t| prefix.join("bin").join(t))
        .filter(|p| !executable(p))
        .map(|p| p.display().to_string())
        .collect();
    if missing.is_empty() {
        r.ok(&format!(
            "PRRTE: prefix {} ({how}) has prte, prted, prun, pterm, pquery and pctrl",
            prefix.display()
        ));
    } else {
        r.fail(
            &format!(
                "PRRTE: prefix {} ({how}) lacks {}",
                prefix.display(),
                missing.join(", ")
            ),
            &format!(
                "install PRRTE {} there (prrte-config/setup.sh) or point {} at the right prefix",
                prrte_k8s::profile::built::PRRTE,
                tools::PREFIX.var()
            ),
        );
    }
    check_launch_threads(r, &prefix);
    check_allocation_requests(r, &prefix);
    let (dir, how) = match env_path("PRTE_PKGLIBDIR") {
        Some(d) => (d, "$PRTE_PKGLIBDIR"),
        None => (prefix.join("lib/prte"), "the prefix"),
    };
    let missing: Vec<String> = ["ras", "plm"]
        .iter()
        .map(|f| dir.join(format!("prte_mca_{f}_k8s.so")))
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    if missing.is_empty() {
        r.ok(&format!(
            "k8s components: prte_mca_ras_k8s.so and prte_mca_plm_k8s.so in {} ({how})",
            dir.display()
        ));
    } else {
        r.fail(
            &format!("k8s components: not installed: {} missing ({how})", missing.join(", ")),
            "install them with prrte-config/install-components.sh (or `make install`), or point PRTE_PKGLIBDIR at the directory holding them",
        );
    }
}

/// Whether the PRRTE of `prefix` can serve PMIx allocation requests (our patch 0003).
fn check_allocation_requests(r: &mut Report, prefix: &Path) {
    use prrte_k8s::profile::allocation_requests as support;
    match support::serves_installation(&prefix.join("bin"), None) {
        Some(true) => r.ok(&format!(
            "PRRTE: serves PMIx allocation requests ({} in {})",
            support::SYMBOL,
            prefix.join("lib").display()
        )),
        Some(false) => r.warn(
            "PRRTE: does not serve PMIx allocation requests",
            support::NOT_SERVED,
        ),
        None => r.skip(&format!(
            "PRRTE allocation requests: no libprrte.so in {}",
            prefix.join("lib").display()
        )),
    }
}

/// PRRTE's parameter that decides whether daemons launch on launch threads.
const LAUNCH_THREADS: &str = "odls_base_max_threads";

/// Where the value of `odls_base_max_threads` in force comes from, first match wins: the
/// environment, then the parameter files in PRRTE's order (the user's before the prefix's).
#[derive(Debug, PartialEq, Eq)]
pub enum LaunchThreads {
    Set {
        value: String,
        from: String,
    },
    /// Set nowhere we can see: PRRTE's default (16), which the k8s components replace with 0
    /// when prte runs them.
    Unset,
}

pub fn launch_threads_in_force(env: Option<String>, files: &[(PathBuf, String)]) -> LaunchThreads {
    if let Some(v) = env.filter(|v| !v.trim().is_empty()) {
        return LaunchThreads::Set {
            value: v.trim().to_owned(),
            from: format!("$PRTE_MCA_{LAUNCH_THREADS}"),
        };
    }
    for (path, text) in files {
        let value = prrte_k8s::agent::mpi::openmpi::parse_param_file(text)
            .into_iter()
            .filter(|(k, _)| k == LAUNCH_THREADS)
            .map(|(_, v)| v)
            .next_back();
        if let Some(value) = value {
            return LaunchThreads::Set {
                value,
                from: path.display().to_string(),
            };
        }
    }
    LaunchThreads::Unset
}

/// The launch-thread setting in force: 0 (or left to the k8s components, which set 0) is ok;
/// anything else is a warning (short jobs can hang, docs/prrte-short-job-hang.md).
fn check_launch_threads(r: &mut Report, prefix: &Path) {
    let mut files = Vec::new();
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".prte/mca-params.conf"));
    for p in home
        .into_iter()
        .chain([prefix.join("etc/prte-mca-params.conf")])
    {
        if let Ok(text) = std::fs::read_to_string(&p) {
            files.push((p, text));
        }
    }
    let env = std::env::var(format!("PRTE_MCA_{LAUNCH_THREADS}")).ok();
    match launch_threads_in_force(env, &files) {
        LaunchThreads::Set { value, from } if value == "0" => r.ok(&format!(
            "launch threads: {LAUNCH_THREADS} = 0 ({from}): daemons start processes on their main thread"
        )),
        LaunchThreads::Set { value, from } => r.warn(
            &format!(
                "launch threads: {LAUNCH_THREADS} = {value} ({from}): PRRTE 3.0's launch threads can lose the end of a short job, which then hangs and keeps its slots (docs/prrte-short-job-hang.md)"
            ),
            &format!("set {LAUNCH_THREADS} = 0 there (as prrte-config/prte-mca-params.conf does), or remove the setting: the k8s components then set 0"),
        ),
        LaunchThreads::Unset => r.ok(&format!(
            "launch threads: {LAUNCH_THREADS} not set: the k8s components set 0 in prte and every prted they start (a PRRTE without them uses 16 launch threads: install prrte-config/prte-mca-params.conf with install-components.sh)"
        )),
    }
}

async fn run_checks(args: DoctorArgs) -> usize {
    let mut r = Report::default();
    let env = Environment::from_process();
    check_settings(&mut r);
    check_in_cluster(&mut r, &env);
    let namespace = args
        .job
        .namespace
        .clone()
        .filter(|n| !n.trim().is_empty())
        .or_else(|| env.service_account_namespace())
        .unwrap_or_else(|| "default".into());
    check_rbac(&mut r, &env, &namespace).await;
    let alloc = check_discovery(&mut r, &args, &env).await;
    check_agents(&mut r, &args, alloc.as_ref()).await;
    check_prrte(&mut r);
    r.failed
}

pub fn run(args: DoctorArgs) -> i32 {
    let runtime = match prrte_k8s::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("prrte-k8s: error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let failed = runtime.block_on(run_checks(args));
    if failed == 0 {
        println!("all checks passed");
        0
    } else {
        println!("{failed} check(s) failed");
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(p: &str, t: &str) -> (PathBuf, String) {
        (PathBuf::from(p), t.to_string())
    }

    #[test]
    fn the_launch_thread_setting_in_force_is_found_where_prrte_looks_first() {
        let site = file(
            "/p/etc/prte-mca-params.conf",
            "ras = k8s\nodls_base_max_threads = 0\n",
        );
        let user = file("/h/.prte/mca-params.conf", "odls_base_max_threads = 4\n");
        assert_eq!(
            launch_threads_in_force(Some("8".into()), &[user.clone(), site.clone()]),
            LaunchThreads::Set {
                value: "8".into(),
                from: "$PRTE_MCA_odls_base_max_threads".into()
            }
        );
        assert_eq!(
            launch_threads_in_force(None, &[user, site.clone()]),
            LaunchThreads::Set {
                value: "4".into(),
                from: "/h/.prte/mca-params.conf".into()
            }
        );
        assert_eq!(
            launch_threads_in_force(Some(" ".into()), &[site]),
            LaunchThreads::Set {
                value: "0".into(),
                from: "/p/etc/prte-mca-params.conf".into()
            }
        );
        let commented = file(
            "/p/etc/prte-mca-params.conf",
            "# odls_base_max_threads = 0\n",
        );
        assert_eq!(
            launch_threads_in_force(None, &[commented]),
            LaunchThreads::Unset
        );
    }
}
