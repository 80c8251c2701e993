//! The pod template every workload kind shares: the agent as entrypoint under the "restricted"
//! pod security, its ports, resources, environment and volumes.

use serde_json::{json, Value};

use super::layout::{
    OwnVolume, Source, AGENT_PORT, BTL_PORT_MIN, BTL_PORT_RANGE, CONTAINER, HEALTH_PORT, OOB_PORT,
    OWN_VOLUMES, TMP_DIR, TOOL_PORT,
};
use super::meta::{job_label, names};
use super::options::{Kind, ManifestArgs};
use crate::settings::agent;

/// The container's environment: the downward-API variables, the pinned ports and transports,
/// then `--env` (which overrides).
fn pod_env(a: &ManifestArgs) -> Vec<Value> {
    let mut env = vec![
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
    ];
    if a.kind == Kind::Statefulset {
        env.push(json!({"name": "POD_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}}));
    }
    let fixed: Vec<(String, String)> = vec![
        ("TMPDIR".into(), TMP_DIR.into()),
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

/// `--NAME` of an agent setting.
fn flag(s: &crate::settings::Setting) -> String {
    format!("--{}", s.flag)
}

/// The agent's command line: batch (`--run -- COMMAND`) or interactive (`--dvm-head auto`).
fn agent_command(a: &ManifestArgs, batch: bool) -> Vec<String> {
    let prefix = a.prrte_prefix.trim_end_matches('/');
    let mut command = vec![
        a.agent.clone(),
        flag(&agent::PRTED),
        format!("{prefix}/bin/prted"),
    ];
    if batch {
        command.push(flag(&agent::RUN));
        command.push("--".into());
        command.extend(a.command.iter().cloned());
    } else {
        command.extend([flag(&agent::DVM_HEAD), "auto".into()]);
    }
    command
}

/// Requests and limits (equal): CPU, memory and GPUs.
fn resources(a: &ManifestArgs) -> Value {
    let mut requests = json!({"cpu": a.cpu, "memory": a.memory});
    let mut limits = requests.clone();
    if a.gpus > 0 {
        requests[&a.gpu_resource] = json!(a.gpus.to_string());
        limits[&a.gpu_resource] = json!(a.gpus.to_string());
    }
    json!({"requests": requests, "limits": limits})
}

/// The container's named ports (the tool port only for an interactive job).
fn ports(batch: bool) -> Vec<Value> {
    let mut ports = vec![
        json!({"name": "agent", "containerPort": AGENT_PORT}),
        json!({"name": "health", "containerPort": HEALTH_PORT}),
        json!({"name": "oob", "containerPort": OOB_PORT}),
    ];
    if !batch {
        ports.push(json!({"name": "pmix-tool", "containerPort": TOOL_PORT}));
    }
    ports
}

/// The container's mount of one of the pod's own volumes (the Secret read-only).
fn mount(v: &OwnVolume) -> Value {
    let mut m = json!({"name": v.name, "mountPath": v.path});
    if v.source == Source::Secret {
        m["readOnly"] = json!(true);
    }
    m
}

/// One of the pod's own volumes (`secret`: the Secret's name).
fn volume(v: &OwnVolume, secret: &str) -> Value {
    match v.source {
        Source::Secret => {
            json!({"name": v.name, "secret": {"secretName": secret, "defaultMode": 0o440}})
        }
        Source::Disk => json!({"name": v.name, "emptyDir": {}}),
        Source::Memory => json!({"name": v.name, "emptyDir": {"medium": "Memory"}}),
    }
}

/// The one container: the agent, with the restricted security context and its mounts.
fn container(a: &ManifestArgs, batch: bool) -> Value {
    let mut container = json!({
        "name": CONTAINER,
        "image": a.image,
        "command": agent_command(a, batch),
        "env": pod_env(a),
        "ports": ports(batch),
        "resources": resources(a),
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
        "volumeMounts": OWN_VOLUMES.iter().map(mount).collect::<Vec<_>>(),
    });
    if let Some(p) = &a.image_pull_policy {
        container["imagePullPolicy"] = json!(p);
    }
    container
}

/// The pod template (metadata and spec) of the workload.
pub(super) fn pod_template(a: &ManifestArgs, batch: bool) -> Value {
    let n = names(a);
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
        "containers": [container(a, batch)],
        "volumes": OWN_VOLUMES.iter().map(|v| volume(v, &n.secret)).collect::<Vec<_>>(),
    });
    if a.kind != Kind::Statefulset {
        spec["restartPolicy"] = json!("Never");
    }
    json!({"metadata": pod_meta, "spec": spec})
}
