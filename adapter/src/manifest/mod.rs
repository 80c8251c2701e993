//! `prrte-k8s manifest`: one complete MPI job as Kubernetes YAML, for `kubectl apply -f -`.
//!
//! The output holds, in this order: a ServiceAccount, a Role with exactly what discovery reads
//! for the chosen workload (get/list/watch pods; get on the Job, StatefulSet or JobSet that
//! owns them), its RoleBinding, a Secret with a fresh random key (32 bytes from the operating
//! system, hex), the workload (an Indexed Job, a StatefulSet or a JobSet), and a NetworkPolicy
//! that admits exactly the job's pinned ports, only from the job's own pods.
//!
//! Every pod runs `prrte-k8s-agent` as its entrypoint under Kubernetes' "restricted" pod
//! security: non-root uid, no privilege escalation, every capability dropped, the runtime's
//! seccomp profile, a read-only root file system with emptyDirs for `/tmp`,
//! `/var/run/prrte-k8s` and `/dev/shm` (memory). The service-account token is mounted only into
//! pods that run the allocation (all pods of a Job/StatefulSet/JobSet share one template; the
//! Role only reads).
//!
//! **Batch** (a command after `--`): the agent of the pod with index 0 runs it once the pod is
//! ready; its output is the pod's log; when it ends every other agent exits too (see
//! [`crate::agent::batch`]). The Job has `backoffLimit: 0`, a `successPolicy` on index 0 (or
//! none: all indexes must succeed), a `podFailurePolicy` that fails the Job at the first
//! disruption or non-zero exit and names it, an optional `activeDeadlineSeconds` and a
//! `ttlSecondsAfterFinished`. **Interactive** (no command): the agent of pod 0 runs the DVM head
//! and `prrte-k8s prun` works from any pod.
//!
//! Ports (pinned, so that the NetworkPolicy can name them):
//! [`AGENT_PORT`] (agent), [`HEALTH_PORT`] (readiness), [`TOOL_PORT`] (the DVM head's PMIx
//! tool listener, interactive only), [`OOB_PORT`] (PRRTE's OOB: `oob_tcp_dynamic_ipv4_ports`),
//! [`BTL_PORT_MIN`]`..+`[`BTL_PORT_RANGE`] (Open MPI's TCP BTL: `btl_tcp_port_min_v4`,
//! `btl_tcp_port_range_v4`).
//!
//! Layout: this file holds the options, their checks and the entry ([`objects`], [`render`]);
//! `pod` the pod template every kind shares; one file per workload kind (`job`, `statefulset`,
//! `jobset`); `rbac`, `secret`, `network_policy` the other objects; `header` the comment
//! header.

use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use crate::protocol::{DEFAULT_AGENT_PORT, DEFAULT_HEALTH_PORT};

mod header;
mod job;
mod jobset;
mod network_policy;
mod pod;
mod rbac;
mod secret;
mod statefulset;
#[cfg(test)]
mod tests;

pub use header::quote;
pub use secret::fresh_key;

/// The agent's port.
pub const AGENT_PORT: u16 = DEFAULT_AGENT_PORT;
/// The agent's health endpoint (readinessProbe).
pub const HEALTH_PORT: u16 = DEFAULT_HEALTH_PORT;
/// The DVM head's PMIx tool port (interactive mode).
pub const TOOL_PORT: u16 = crate::agent::config::DEFAULT_TOOL_PORT;
/// PRRTE's OOB listener in every pod (`PRTE_MCA_oob_tcp_dynamic_ipv4_ports`): one prte or
/// prted per pod, so one port.
///
/// Pinned with the *dynamic* range, not `oob_tcp_static_ipv4_ports`: with static ports a
/// PRRTE 3.0.8 prted first sends a warm-up message to its parent and, on the parent's node
/// report, calls its PLM's `remote_spawn`; a prted started by an agent has no PLM (none is
/// selected unless `PRTE_MCA_plm` is set), so that call is through a null pointer and every
/// prted dies with SIGSEGV. A one-port dynamic range binds the same single port and keeps the
/// normal report path (each daemon sends its own URI).
pub const OOB_PORT: u16 = 7121;
/// First port of Open MPI's TCP BTL (`OMPI_MCA_btl_tcp_port_min_v4`).
pub const BTL_PORT_MIN: u16 = 7200;
/// Number of ports of Open MPI's TCP BTL from [`BTL_PORT_MIN`] (`btl_tcp_port_range_v4`): one
/// per MPI process in a pod.
pub const BTL_PORT_RANGE: u16 = 100;
/// Where the Secret is mounted (the agent's and the k8s PLM's default).
pub const SECRET_DIR: &str = "/etc/prrte-k8s/secret";
/// The name of the container in every pod.
pub const CONTAINER: &str = "mpi";

/// The workload kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// An Indexed Job (batch or interactive).
    Job,
    /// A StatefulSet (interactive only: its pods are restarted when they exit).
    Statefulset,
    /// A JobSet (jobset.x-k8s.io/v1alpha2) with one replicated Job.
    Jobset,
}

/// When a batch Job counts as complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Success {
    /// When the pod with index 0 (the one that runs the command) succeeded; the rest are
    /// then stopped by the Job controller.
    Index0,
    /// When every pod succeeded.
    All,
}

/// Parts of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Part {
    Rbac,
    Secret,
    Workload,
    Networkpolicy,
}

/// `prrte-k8s manifest` options.
#[derive(Args, Debug, Clone)]
pub struct ManifestArgs {
    /// Name of the job (and prefix of every object's name)
    #[arg(long, default_value = "mpi")]
    pub name: String,
    /// Namespace of every object [default: none, so kubectl's current namespace]
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Number of pods
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub pods: u32,
    /// Container image holding prrte-k8s-agent, PRRTE (with the k8s components) and the MPI
    #[arg(long, default_value = "prrte-k8s:latest")]
    pub image: String,
    /// imagePullPolicy of the container [default: Kubernetes' own]
    #[arg(long, value_name = "POLICY", value_parser = ["Always", "IfNotPresent", "Never"])]
    pub image_pull_policy: Option<String>,
    /// Workload kind
    #[arg(long, value_enum, default_value = "job")]
    pub kind: Kind,
    /// CPU request and limit of each pod (whole CPUs are its MPI slots unless --slots or --gpus)
    #[arg(long, default_value = "1")]
    pub cpu: String,
    /// Memory request and limit of each pod
    #[arg(long, default_value = "1Gi")]
    pub memory: String,
    /// GPUs per pod (then the slots: one rank per GPU)
    #[arg(long, default_value_t = 0)]
    pub gpus: u32,
    /// Extended resource name of a GPU
    #[arg(long, default_value = "nvidia.com/gpu", value_name = "RESOURCE")]
    pub gpu_resource: String,
    /// MPI slots per pod (annotation prrte-k8s.io/slots) [default: GPUs, else whole CPUs]
    #[arg(long)]
    pub slots: Option<u32>,
    /// Batch: when the Job is complete
    #[arg(long, value_enum, default_value = "index0")]
    pub success: Success,
    /// Batch: seconds the Job may run before it is failed (activeDeadlineSeconds)
    #[arg(long, value_name = "SECS")]
    pub deadline: Option<u64>,
    /// Seconds a finished Job (and its pods and logs) is kept (ttlSecondsAfterFinished)
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
    pub ttl: u64,
    /// uid (and gid) the pods run as (>= 1000)
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1000..))]
    pub uid: u32,
    /// prrte-k8s-agent in the image (absolute, or found on the image's PATH)
    #[arg(long, default_value = "prrte-k8s-agent", value_name = "PATH")]
    pub agent: String,
    /// PRRTE's prefix in the image (prted and prte are in its bin/)
    #[arg(long, default_value = "/opt/prrte", value_name = "DIR")]
    pub prrte_prefix: String,
    /// Extra environment variable of every pod (NAME=VALUE, repeatable)
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Print only these parts (comma-separated) [default: all]
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Part>,
    /// Leave out the Secret (create it yourself; the header says how)
    #[arg(long)]
    pub no_secret: bool,
    /// Batch mode: the command the pod with index 0 runs (after `--`), e.g.
    /// `-- mpirun -n 8 ./app`; without one, the job is interactive (DVM head in pod 0)
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NAME=VALUE"))?;
    let ok = !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-');
    if !ok {
        return Err(format!("{k:?} is not a valid environment variable name"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// Checks a DNS-1123 label (object names that become pod host names).
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name.starts_with(|c: char| c.is_ascii_lowercase());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "--name {name:?}: use 1-40 lower-case letters, digits and '-', starting with a letter \
             and not ending with '-' (it names the pods and their host names)"
        ))
    }
}

/// The names of the objects beside the workload.
struct Names {
    sa: String,
    role: String,
    secret: String,
    policy: String,
}

/// `<name>-prrte` for each.
fn names(a: &ManifestArgs) -> Names {
    let base = format!("{}-prrte", a.name);
    Names {
        sa: base.clone(),
        role: base.clone(),
        secret: base.clone(),
        policy: base,
    }
}

/// The metadata of an object: its name, the job's labels, the namespace if given.
fn meta(a: &ManifestArgs, name: &str) -> Value {
    let mut m = json!({"name": name, "labels": {"app.kubernetes.io/name": "prrte-k8s", "app.kubernetes.io/instance": a.name}});
    if let Some(ns) = &a.namespace {
        m["namespace"] = json!(ns);
    }
    m
}

/// The label every pod of the job carries, and its value (what the NetworkPolicy selects).
fn job_label(a: &ManifestArgs) -> (&'static str, String) {
    match a.kind {
        Kind::Job => ("batch.kubernetes.io/job-name", a.name.clone()),
        Kind::Statefulset => ("app.kubernetes.io/instance", a.name.clone()),
        Kind::Jobset => ("jobset.sigs.k8s.io/jobset-name", a.name.clone()),
    }
}

/// The workload object of the chosen kind.
fn workload(a: &ManifestArgs) -> Value {
    let batch = !a.command.is_empty();
    match a.kind {
        Kind::Job => job::job(a, batch),
        Kind::Statefulset => statefulset::statefulset(a),
        Kind::Jobset => jobset::jobset(a, batch),
    }
}

/// Checks the options.
pub fn check(a: &ManifestArgs) -> Result<(), String> {
    check_name(&a.name)?;
    if a.kind == Kind::Statefulset && !a.command.is_empty() {
        return Err("--kind statefulset runs interactive jobs only (a StatefulSet restarts pods that exit); use --kind job or jobset for a command".into());
    }
    if !a.agent.starts_with('/') && a.agent.contains('/') {
        return Err(format!(
            "--agent {:?}: give an absolute path or a bare name found on the image's PATH",
            a.agent
        ));
    }
    if !a.prrte_prefix.starts_with('/') {
        return Err(format!(
            "--prrte-prefix {:?}: must be absolute",
            a.prrte_prefix
        ));
    }
    Ok(())
}

/// The objects of the manifest (`key`: the Secret's key, or None to leave the Secret out).
pub fn objects(a: &ManifestArgs, key: Option<&str>) -> Result<Vec<Value>, String> {
    check(a)?;
    let want = |p: Part| a.only.is_empty() || a.only.contains(&p);
    let mut out = Vec::new();
    if want(Part::Rbac) {
        out.extend(rbac::rbac(a));
    }
    if want(Part::Secret) {
        if let Some(k) = key {
            out.push(secret::secret(a, k));
        }
    }
    if want(Part::Workload) {
        out.push(workload(a));
    }
    if want(Part::Networkpolicy) {
        out.push(network_policy::network_policy(a));
    }
    Ok(out)
}

/// Renders the manifest: a header of comments (the command line `argv_text`, and how to make
/// the Secret if it is left out), then the objects as YAML documents.
pub fn render(a: &ManifestArgs, argv_text: &str, key: Option<&str>) -> Result<String, String> {
    let objs = objects(a, key)?;
    let mut text = header::header(a, argv_text, key);
    for o in objs {
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(&o).map_err(|e| format!("cannot render YAML: {e}"))?);
    }
    Ok(text)
}
