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

use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use crate::protocol::{DEFAULT_AGENT_PORT, DEFAULT_HEALTH_PORT};

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

/// A fresh per-job key: 32 random bytes from the operating system, hex-encoded.
pub fn fresh_key() -> String {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

struct Names {
    sa: String,
    role: String,
    secret: String,
    policy: String,
}

fn names(a: &ManifestArgs) -> Names {
    let base = format!("{}-prrte", a.name);
    Names {
        sa: base.clone(),
        role: base.clone(),
        secret: base.clone(),
        policy: base,
    }
}

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

fn rbac(a: &ManifestArgs) -> Vec<Value> {
    let n = names(a);
    let owner = match a.kind {
        Kind::Job => json!({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}),
        Kind::Statefulset => {
            json!({"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get"]})
        }
        Kind::Jobset => {
            json!({"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]})
        }
    };
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(a, &n.sa),
        // Mounted only where the pod template asks for it.
        "automountServiceAccountToken": false});
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(a, &n.role),
    "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        owner,
    ]});
    let mut subject = json!({"kind": "ServiceAccount", "name": n.sa});
    if let Some(ns) = &a.namespace {
        subject["namespace"] = json!(ns);
    }
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(a, &n.role),
        "subjects": [subject],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": n.role}});
    vec![sa, role, binding]
}

fn secret(a: &ManifestArgs, key: &str) -> Value {
    use base64::Engine;
    let encode = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta(a, &names(a).secret), "type": "Opaque",
        "data": {"key": encode(key.as_bytes())}})
}

fn pod_env(a: &ManifestArgs) -> Vec<Value> {
    let mut env = vec![
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
    ];
    if a.kind == Kind::Statefulset {
        env.push(json!({"name": "POD_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}}));
    }
    let fixed: Vec<(String, String)> = vec![
        ("TMPDIR".into(), "/tmp".into()),
        // `ras k8s` and `plm k8s` are not set here: every prted inherits the pod's environment
        // and must not select `plm k8s`. The agent sets both for the batch command, the DVM
        // head passes them to prte, and `prrte-k8s prun` talks to that DVM.
        // Pinned ports (the NetworkPolicy admits exactly these).
        // (`dynamic`, not `static`: see OOB_PORT.)
        (
            "PRTE_MCA_oob_tcp_dynamic_ipv4_ports".into(),
            OOB_PORT.to_string(),
        ),
        (
            "OMPI_MCA_btl_tcp_port_min_v4".into(),
            BTL_PORT_MIN.to_string(),
        ),
        (
            "OMPI_MCA_btl_tcp_port_range_v4".into(),
            BTL_PORT_RANGE.to_string(),
        ),
        // MPI traffic between pods only through the TCP BTL (no fabric with its own ports).
        ("OMPI_MCA_pml".into(), "ob1".into()),
        ("OMPI_MCA_btl".into(), "self,sm,tcp".into()),
    ];
    for (k, v) in fixed.into_iter().chain(a.env.iter().cloned()) {
        env.retain(|e| e["name"] != k.as_str());
        env.push(json!({"name": k, "value": v}));
    }
    env
}

fn pod_template(a: &ManifestArgs, batch: bool) -> Value {
    let n = names(a);
    let prefix = a.prrte_prefix.trim_end_matches('/');
    let mut command = vec![
        a.agent.clone(),
        "--prted".to_string(),
        format!("{prefix}/bin/prted"),
    ];
    if batch {
        command.push("--run".into());
        command.push("--".into());
        command.extend(a.command.iter().cloned());
    } else {
        command.extend(["--dvm-head".into(), "auto".into()]);
    }
    let mut requests = json!({"cpu": a.cpu, "memory": a.memory});
    let mut limits = requests.clone();
    if a.gpus > 0 {
        requests[&a.gpu_resource] = json!(a.gpus.to_string());
        limits[&a.gpu_resource] = json!(a.gpus.to_string());
    }
    let mut ports = vec![
        json!({"name": "agent", "containerPort": AGENT_PORT}),
        json!({"name": "health", "containerPort": HEALTH_PORT}),
        json!({"name": "oob", "containerPort": OOB_PORT}),
    ];
    if !batch {
        ports.push(json!({"name": "pmix-tool", "containerPort": TOOL_PORT}));
    }
    let mut container = json!({
        "name": CONTAINER,
        "image": a.image,
        "command": command,
        "env": pod_env(a),
        "ports": ports,
        "resources": {"requests": requests, "limits": limits},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": HEALTH_PORT}, "periodSeconds": 2},
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": a.uid,
            "runAsGroup": a.uid,
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "secret", "mountPath": SECRET_DIR, "readOnly": true},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "run", "mountPath": "/var/run/prrte-k8s"},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    });
    if let Some(p) = &a.image_pull_policy {
        container["imagePullPolicy"] = json!(p);
    }
    let (lk, lv) = job_label(a);
    let mut labels =
        json!({"app.kubernetes.io/name": "prrte-k8s", "app.kubernetes.io/instance": a.name});
    labels[lk] = json!(lv);
    let mut pod_meta = json!({"labels": labels});
    if let Some(s) = a.slots {
        pod_meta["annotations"] = json!({crate::discovery::SLOTS_ANNOTATION: s.to_string()});
    }
    let mut spec = json!({
        "serviceAccountName": n.sa,
        // The pod with index 0 runs the allocation (ras k8s reads the API); the pods share one
        // template, so each gets the token of a Role that only reads.
        "automountServiceAccountToken": true,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": a.uid,
            "runAsGroup": a.uid,
            "fsGroup": a.uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": "secret", "secret": {"secretName": n.secret, "defaultMode": 0o440}},
            {"name": "tmp", "emptyDir": {}},
            {"name": "run", "emptyDir": {}},
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
        ],
    });
    if a.kind != Kind::Statefulset {
        spec["restartPolicy"] = json!("Never");
    }
    json!({"metadata": pod_meta, "spec": spec})
}

fn job_spec(a: &ManifestArgs, batch: bool) -> Value {
    let mut spec = json!({
        "completionMode": "Indexed",
        "completions": a.pods,
        "parallelism": a.pods,
        // One MPI job, one try: a failed pod fails the Job.
        "backoffLimit": 0,
        "podFailurePolicy": {"rules": [
            // Evicted, preempted or deleted pods end the job at once, saying so.
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            // So does a non-zero exit, naming the pod and the code.
            {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]}},
        ]},
        "template": pod_template(a, batch),
    });
    if batch && a.success == Success::Index0 {
        spec["successPolicy"] = json!({"rules": [{"succeededIndexes": "0"}]});
    }
    if let Some(d) = a.deadline {
        spec["activeDeadlineSeconds"] = json!(d);
    }
    spec
}

fn workload(a: &ManifestArgs) -> Value {
    let batch = !a.command.is_empty();
    match a.kind {
        Kind::Job => {
            let mut spec = job_spec(a, batch);
            spec["ttlSecondsAfterFinished"] = json!(a.ttl);
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(a, &a.name), "spec": spec})
        }
        Kind::Statefulset => {
            let (lk, lv) = job_label(a);
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta(a, &a.name), "spec": {
                "replicas": a.pods,
                "serviceName": a.name,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {lk: lv}},
                "template": pod_template(a, false),
            }})
        }
        Kind::Jobset => {
            let mut spec = json!({
                "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": job_spec(a, batch)}}],
                "successPolicy": {"operator": "All", "targetReplicatedJobs": ["node"]},
                "failurePolicy": {"maxRestarts": 0},
                "ttlSecondsAfterFinished": a.ttl,
            });
            if batch {
                spec["startupPolicy"] = json!({"startupPolicyOrder": "AnyOrder"});
            }
            json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta(a, &a.name), "spec": spec})
        }
    }
}

fn network_policy(a: &ManifestArgs) -> Value {
    let (lk, lv) = job_label(a);
    let batch = !a.command.is_empty();
    let mut ports = vec![
        json!({"protocol": "TCP", "port": AGENT_PORT}),
        json!({"protocol": "TCP", "port": HEALTH_PORT}),
    ];
    if !batch {
        ports.push(json!({"protocol": "TCP", "port": TOOL_PORT}));
    }
    ports.push(json!({"protocol": "TCP", "port": OOB_PORT}));
    ports.push(json!({"protocol": "TCP", "port": BTL_PORT_MIN, "endPort": BTL_PORT_MIN + BTL_PORT_RANGE - 1}));
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(a, &names(a).policy), "spec": {
        "podSelector": {"matchLabels": {lk: lv.clone()}},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {lk: lv}}}], "ports": ports}],
    }})
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
        out.extend(rbac(a));
    }
    if want(Part::Secret) {
        if let Some(k) = key {
            out.push(secret(a, k));
        }
    }
    if want(Part::Workload) {
        out.push(workload(a));
    }
    if want(Part::Networkpolicy) {
        out.push(network_policy(a));
    }
    Ok(out)
}

/// Renders the manifest: a header of comments (the command line `argv_text`, and how to make
/// the Secret if it is left out), then the objects as YAML documents.
pub fn render(a: &ManifestArgs, argv_text: &str, key: Option<&str>) -> Result<String, String> {
    let objs = objects(a, key)?;
    let mut text = format!(
        "# Generated by: prrte-k8s manifest{}{argv_text}\n",
        if argv_text.is_empty() { "" } else { " " }
    );
    let mode = if a.command.is_empty() {
        "interactive: the agent of pod 0 runs the DVM head; `prrte-k8s prun` from any pod"
            .to_string()
    } else {
        format!(
            "batch: pod 0 runs `{}`; the job ends when it does",
            a.command
                .iter()
                .map(|c| quote(c))
                .collect::<Vec<_>>()
                .join(" ")
        )
    };
    text.push_str(&format!("# {mode}\n"));
    if key.is_none() && (a.only.is_empty() || a.only.contains(&Part::Secret)) {
        let ns = a
            .namespace
            .as_ref()
            .map(|n| format!(" -n {n}"))
            .unwrap_or_default();
        text.push_str(&format!(
            "# Create the per-job Secret first:\n#   kubectl create secret generic {}{ns} --from-literal=key=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \\n')\n",
            names(a).secret
        ));
    }
    for o in objs {
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(&o).map_err(|e| format!("cannot render YAML: {e}"))?);
    }
    Ok(text)
}

/// Shell-quotes one argument for the header line (only when needed). The result is always one
/// line (it goes into a YAML comment): an argument with a newline or another control
/// character is written in bash's `$'...'` form (`$'a\nb'`).
pub fn quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c));
    if plain {
        arg.to_string()
    } else if arg.chars().any(char::is_control) {
        let mut out = String::from("$'");
        for c in arg.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if c.is_control() => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        out.push_str(&format!("\\x{b:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('\'');
        out
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: ManifestArgs,
    }

    fn args(v: &[&str]) -> ManifestArgs {
        let mut argv = vec!["manifest"];
        argv.extend(v);
        T::try_parse_from(argv).unwrap().a
    }

    fn kinds(objs: &[Value]) -> Vec<String> {
        objs.iter()
            .map(|o| o["kind"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn batch_job_has_everything() {
        let a = args(&[
            "--name",
            "ar",
            "--pods",
            "4",
            "--cpu",
            "2",
            "--",
            "mpirun",
            "-n",
            "8",
            "./allreduce",
        ]);
        let key = fresh_key();
        assert_eq!(key.len(), 64);
        assert_ne!(key, fresh_key());
        let objs = objects(&a, Some(&key)).unwrap();
        assert_eq!(
            kinds(&objs),
            [
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "Secret",
                "Job",
                "NetworkPolicy"
            ]
        );
        let role = &objs[1];
        assert_eq!(
            role["rules"][0],
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]})
        );
        assert_eq!(
            role["rules"][1],
            json!({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]})
        );
        assert_eq!(role["rules"].as_array().unwrap().len(), 2);
        let job = &objs[4];
        let spec = &job["spec"];
        assert_eq!(spec["completions"], 4);
        assert_eq!(spec["parallelism"], 4);
        assert_eq!(spec["completionMode"], "Indexed");
        assert_eq!(spec["backoffLimit"], 0);
        assert_eq!(spec["successPolicy"]["rules"][0]["succeededIndexes"], "0");
        assert_eq!(spec["ttlSecondsAfterFinished"], 3600);
        let pod = &spec["template"]["spec"];
        let c = &pod["containers"][0];
        let cmd: Vec<&str> = c["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(
            cmd,
            [
                "prrte-k8s-agent",
                "--prted",
                "/opt/prrte/bin/prted",
                "--run",
                "--",
                "mpirun",
                "-n",
                "8",
                "./allreduce"
            ]
        );
        assert_eq!(c["resources"]["requests"]["cpu"], "2");
        assert!(!c["image"].as_str().unwrap().is_empty());
        // restricted pod security
        let sc = &c["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
        assert!(pod["securityContext"]["runAsUser"].as_u64().unwrap() >= 1000);
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        let mounts: Vec<&str> = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        for p in ["/tmp", "/var/run/prrte-k8s", "/dev/shm", SECRET_DIR] {
            assert!(mounts.contains(&p), "{p} mounted: {mounts:?}");
        }
        assert_eq!(pod["volumes"][3]["emptyDir"]["medium"], "Memory");
        // pinned ports in the env, and exactly those in the policy
        let env = |k: &str| {
            c["env"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == k)
                .map(|e| e["value"].clone())
        };
        assert_eq!(
            env("PRTE_MCA_oob_tcp_dynamic_ipv4_ports"),
            Some(json!("7121"))
        );
        assert_eq!(env("OMPI_MCA_btl_tcp_port_min_v4"), Some(json!("7200")));
        assert_eq!(env("OMPI_MCA_btl_tcp_port_range_v4"), Some(json!("100")));
        let np = &objs[5]["spec"];
        assert_eq!(
            np["podSelector"]["matchLabels"]["batch.kubernetes.io/job-name"],
            "ar"
        );
        assert_eq!(
            np["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
                ["batch.kubernetes.io/job-name"],
            "ar"
        );
        let ports: Vec<(u64, Option<u64>)> = np["ingress"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["port"].as_u64().unwrap(), p["endPort"].as_u64()))
            .collect();
        assert_eq!(
            ports,
            [(7117, None), (7118, None), (7121, None), (7200, Some(7299))],
            "batch: no tool port"
        );
        // the Secret carries the key
        use base64::Engine;
        let stored = base64::engine::general_purpose::STANDARD
            .decode(objs[3]["data"]["key"].as_str().unwrap())
            .unwrap();
        assert_eq!(stored, key.as_bytes());
    }

    #[test]
    fn interactive_statefulset_and_jobset() {
        let a = args(&[
            "--kind",
            "statefulset",
            "--name",
            "dvm",
            "--pods",
            "3",
            "--gpus",
            "1",
            "-n",
            "hpc",
        ]);
        let objs = objects(&a, None).unwrap();
        assert_eq!(
            kinds(&objs),
            [
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "StatefulSet",
                "NetworkPolicy"
            ]
        );
        assert_eq!(objs[1]["rules"][1]["resources"], json!(["statefulsets"]));
        assert_eq!(objs[2]["subjects"][0]["namespace"], "hpc");
        let sts = &objs[3];
        assert_eq!(sts["metadata"]["namespace"], "hpc");
        let c = &sts["spec"]["template"]["spec"]["containers"][0];
        assert!(c["command"]
            .as_array()
            .unwrap()
            .contains(&json!("--dvm-head")));
        assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], "1");
        assert!(c["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "POD_INDEX"));
        assert!(sts["spec"]["template"]["spec"]
            .get("restartPolicy")
            .is_none());
        assert!(objs[4]["spec"]["ingress"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["port"] == 7120));
        let e = objects(&args(&["--kind", "statefulset", "--", "true"]), None).unwrap_err();
        assert!(e.contains("interactive"), "{e}");

        let a = args(&[
            "--kind",
            "jobset",
            "--name",
            "js",
            "--success",
            "all",
            "--deadline",
            "600",
            "--",
            "mpirun",
            "./x",
        ]);
        let objs = objects(&a, None).unwrap();
        assert_eq!(objs[1]["rules"][1]["resources"], json!(["jobsets"]));
        let js = &objs[3];
        let job = &js["spec"]["replicatedJobs"][0]["template"]["spec"];
        assert!(job.get("successPolicy").is_none(), "--success all");
        assert_eq!(job["activeDeadlineSeconds"], 600);
        assert_eq!(
            objs[4]["spec"]["podSelector"]["matchLabels"]["jobset.sigs.k8s.io/jobset-name"],
            "js"
        );
    }

    #[test]
    fn options_are_checked_and_header_says_how() {
        assert!(objects(&args(&["--name", "Bad_Name"]), None)
            .unwrap_err()
            .contains("--name"));
        let a = args(&[
            "--name",
            "x",
            "--only",
            "rbac,networkpolicy",
            "--env",
            "A=b c",
            "--slots",
            "3",
        ]);
        let objs = objects(&a, Some("k")).unwrap();
        assert_eq!(
            kinds(&objs),
            ["ServiceAccount", "Role", "RoleBinding", "NetworkPolicy"]
        );
        let a = args(&[
            "--name",
            "x",
            "--env",
            "A=b c",
            "--slots",
            "3",
            "--",
            "sh",
            "-c",
            "echo 'hi'",
        ]);
        let t = render(&a, "--name x -- sh -c 'echo '\\''hi'\\'''", None).unwrap();
        assert!(t.starts_with("# Generated by: prrte-k8s manifest --name x"));
        assert!(t.contains("kubectl create secret generic x-prrte"));
        assert!(!t.contains("kind: Secret"));
        let objs = objects(&a, None).unwrap();
        let tmpl = &objs[3]["spec"]["template"];
        assert_eq!(
            tmpl["metadata"]["annotations"][crate::discovery::SLOTS_ANNOTATION],
            "3"
        );
        assert!(tmpl["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "A", "value": "b c"})));
        assert_eq!(quote("echo 'hi'"), "'echo '\\''hi'\\'''");
        assert_eq!(quote("-n"), "-n");
        assert_eq!(quote("a\nb's\\"), "$'a\\nb\\'s\\\\'");
        assert_eq!(quote("\u{1}"), "$'\\x01'");
        assert!(parse_env("1X=2").is_err() && parse_env("noequals").is_err());
    }

    #[test]
    fn a_multi_line_command_stays_in_its_comments_and_in_the_job() {
        let script = "import sys\nprint('x')\nsys.exit(3)\n";
        let a = args(&["--name", "m", "--", "python3", "-c", script]);
        let argv_text = ["--name", "m", "--", "python3", "-c", script]
            .iter()
            .map(|s| quote(s))
            .collect::<Vec<_>>()
            .join(" ");
        let t = render(&a, &argv_text, Some(&fresh_key())).unwrap();
        let header: Vec<&str> = t.lines().take_while(|l| *l != "---").collect();
        assert!(
            header.iter().all(|l| l.starts_with("# ")),
            "every header line is a comment:\n{t}"
        );
        let docs: Vec<Value> = t
            .split("\n---\n")
            .skip(1)
            .map(|d| serde_yaml::from_str(d).unwrap())
            .collect();
        assert_eq!(docs.len(), 6, "{t}");
        let c = &docs[4]["spec"]["template"]["spec"]["containers"][0];
        let cmd: Vec<&str> = c["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(cmd[cmd.len() - 3..], ["python3", "-c", script]);
    }
}
