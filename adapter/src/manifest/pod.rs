//! The pod template every workload kind shares: the agent as entrypoint under the "restricted"
//! pod security, its ports, readiness probe, environment and volumes, around what the plan
//! gives (the application container's image, resources and security context, the pod's own
//! volumes and scheduling fields).

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, Container, ContainerPort, DownwardAPIProjection, DownwardAPIVolumeFile,
    EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction, KeyToPath, ObjectFieldSelector,
    Probe, ProjectedVolumeSource, SecretVolumeSource, ServiceAccountTokenProjection, Volume,
    VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::inject;
use super::layout::{
    OwnVolume, Source, AGENT_PORT, BTL_PORT_MIN, BTL_PORT_RANGE, CONTAINER, HEALTH_PORT, OOB_PORT,
    OWN_VOLUMES, TMP_DIR, TOOL_PORT,
};
use super::meta::{job_label, names, own_labels, workload_label};
use super::plan::{JobPlan, Launch};
use crate::settings::mpijob::MPIJOB_ENV;
use crate::settings::{agent, Setting};
use crate::workload::{Success, WorkloadKind};

/// The JSON of each of `items` (the typed parts of ours, beside the plan's untyped ones).
fn values<T: Serialize>(
    items: impl IntoIterator<Item = T>,
) -> Result<Vec<Value>, serde_json::Error> {
    items.into_iter().map(serde_json::to_value).collect()
}

/// The field `path` of the object (`api_version`: of its schema, where given).
fn field(api_version: Option<&str>, path: &str) -> ObjectFieldSelector {
    ObjectFieldSelector {
        api_version: api_version.map(String::from),
        field_path: path.into(),
    }
}

/// The variable `name` holding the field `path` of the pod (the downward API).
fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(field(None, path)),
            ..Default::default()
        }),
    }
}

/// The variable `name` set to `value`.
pub(super) fn value_env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// The job's own environment: the downward-API variables, the pinned ports and transports.
pub(super) fn own_env(kind: WorkloadKind, launch: &Launch) -> Vec<EnvVar> {
    let mut env = vec![
        field_env("POD_IP", "status.podIP"),
        field_env("POD_NAME", "metadata.name"),
    ];
    if let Some(label) = kind.index_label_for_env() {
        env.push(field_env(
            "POD_INDEX",
            &format!("metadata.labels['{label}']"),
        ));
    }
    // MPI traffic between pods only through the TCP BTL (no fabric with its own ports). The
    // image's own Open MPI may be a 4.x, whose shared-memory BTL is `vader`, not `sm`, and an
    // include list naming a component it lacks fails: there, the fabrics are excluded instead.
    let btl = match launch {
        Launch::Image { .. } => "self,sm,tcp",
        Launch::Injected { .. } => "^ofi,openib,portals4,uct,ugni,usnic",
    };
    let fixed: [(&str, String); 6] = [
        ("TMPDIR", TMP_DIR.into()),
        // `ras k8s` and `plm k8s` are not set here: every prted inherits the pod's environment
        // and must not select `plm k8s`. The agent sets both for the batch command, the DVM
        // head passes them to prte, and `prrte-k8s prun` talks to that DVM.
        // Pinned ports (the NetworkPolicy admits exactly these).
        // (`dynamic`, not `static`: see OOB_PORT.)
        ("PRTE_MCA_oob_tcp_dynamic_ipv4_ports", OOB_PORT.to_string()),
        ("OMPI_MCA_btl_tcp_port_min_v4", BTL_PORT_MIN.to_string()),
        ("OMPI_MCA_btl_tcp_port_range_v4", BTL_PORT_RANGE.to_string()),
        ("OMPI_MCA_pml", "ob1".into()),
        ("OMPI_MCA_btl", btl.into()),
    ];
    env.extend(fixed.into_iter().map(|(k, v)| value_env(k, v)));
    if let Launch::Injected { .. } = launch {
        // The image's MPI may be an MPICH or Intel MPI: Hydra's mpiexec listens for its
        // proxies, and the ranks for each other, on ports of their own choosing unless pinned
        // (Hydra and ch3 read MPIR_CVAR_CH3_PORT_RANGE; ch4:ucx UCX's tcp transport; ch4:ofi
        // libfabric's tcp provider). The same range as Open MPI's TCP BTL, which the
        // NetworkPolicy admits. An Open MPI 4.x (ORTE) mpirun and its orteds listen on an OOB
        // port of their own choosing too unless pinned: ORTE reads its parameters as
        // `OMPI_MCA_*` (mpirun also hands them to each orted on its command line).
        let (lo, hi) = (BTL_PORT_MIN, BTL_PORT_MIN + BTL_PORT_RANGE - 1);
        for (k, v) in [
            ("OMPI_MCA_oob_tcp_dynamic_ipv4_ports", OOB_PORT.to_string()),
            ("MPIR_CVAR_CH3_PORT_RANGE", format!("{lo}:{hi}")),
            ("UCX_TCP_PORT_RANGE", format!("{lo}-{hi}")),
            ("FI_TCP_PORT_LOW_RANGE", lo.to_string()),
            ("FI_TCP_PORT_HIGH_RANGE", hi.to_string()),
        ] {
            env.push(value_env(k, v));
        }
    }
    env
}

/// The container's environment: the job's own, then the plan's (an entry replaces the job's
/// of the same name).
fn pod_env(a: &JobPlan) -> Result<Vec<Value>, serde_json::Error> {
    let mut env = values(own_env(a.kind, &a.pod.launch))?;
    // The MPIJob the launcher records its events on (the controller's jobs only): the
    // controller's, whatever the job's own environment says.
    let mpijob = a
        .events_to
        .as_ref()
        .map(|r| serde_json::to_value(value_env(MPIJOB_ENV, r.env_value())))
        .transpose()?;
    for e in a.pod.env.iter().chain(&mpijob) {
        env.retain(|o| o["name"] != e["name"]);
        env.push(e.clone());
    }
    Ok(env)
}

/// `--NAME` of an agent setting.
fn flag(s: &Setting) -> String {
    format!("--{}", s.flag)
}

/// The agent's command line: how it finds the MPI's daemon, then batch (`--run -- COMMAND`)
/// or interactive (`--dvm-head auto`).
fn agent_command(a: &JobPlan, batch: bool) -> Vec<String> {
    let mut command = match &a.pod.launch {
        Launch::Image {
            agent: path,
            prrte_prefix,
        } => {
            let prefix = prrte_prefix.trim_end_matches('/');
            vec![
                path.clone(),
                flag(&agent::PRTED),
                format!("{prefix}/bin/prted"),
            ]
        }
        Launch::Injected { mpi, .. } => {
            vec![inject::agent(), inject::MPI_FLAG.to_string(), mpi.clone()]
        }
    };
    if batch {
        if a.success == Success::Index0WorkersStay {
            command.push(flag(&agent::WORKERS_STAY));
        }
        command.push(flag(&agent::RUN));
        command.push("--".into());
        command.extend(a.command.iter().cloned());
    } else {
        command.extend([flag(&agent::DVM_HEAD), "auto".into()]);
    }
    command
}

/// The container's named ports (the tool port only for an interactive job).
fn ports(batch: bool) -> Vec<ContainerPort> {
    let port = |name: &str, port: u16| ContainerPort {
        name: Some(name.into()),
        container_port: port.into(),
        ..Default::default()
    };
    let mut ports = vec![
        port("agent", AGENT_PORT),
        port("health", HEALTH_PORT),
        port("oob", OOB_PORT),
    ];
    if !batch {
        ports.push(port("pmix-tool", TOOL_PORT));
    }
    ports
}

/// Ready when the agent's health endpoint says so.
fn readiness_probe() -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz".into()),
            port: IntOrString::Int(HEALTH_PORT.into()),
            ..Default::default()
        }),
        period_seconds: Some(2),
        ..Default::default()
    }
}

/// The job's own volumes the pod gets: all but a scratch directory the plan mounts a volume
/// of its own at.
fn own_volumes(a: &JobPlan) -> impl Iterator<Item = &'static OwnVolume> + '_ {
    OWN_VOLUMES.iter().filter(|v| {
        !(v.replaceable
            && a.pod
                .mounts
                .iter()
                .any(|m| m["mountPath"].as_str() == Some(v.path)))
    })
}

/// The container's mount of one of the pod's own volumes (the Secret read-only).
fn mount(v: &OwnVolume) -> VolumeMount {
    VolumeMount {
        name: v.name.into(),
        mount_path: v.path.into(),
        read_only: matches!(v.source, Source::Secret | Source::ApiAccess).then_some(true),
        ..Default::default()
    }
}

/// One of the pod's own volumes (`secret`: the Secret's name).
fn volume(v: &OwnVolume, secret: &str) -> Volume {
    let empty_dir = |medium: Option<&str>| {
        Some(EmptyDirVolumeSource {
            medium: medium.map(String::from),
            size_limit: None,
        })
    };
    let volume = Volume {
        name: v.name.into(),
        ..Default::default()
    };
    match v.source {
        Source::Secret => Volume {
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.into()),
                default_mode: Some(0o440),
                ..Default::default()
            }),
            ..volume
        },
        Source::Disk => Volume {
            empty_dir: empty_dir(None),
            ..volume
        },
        Source::Memory => Volume {
            empty_dir: empty_dir(Some("Memory")),
            ..volume
        },
        Source::ApiAccess => Volume {
            projected: Some(api_access()),
            ..volume
        },
    }
}

/// What the kubelet mounts into every container when the token is automounted (here for the
/// agent's container alone): the service account's token, the cluster's CA, the namespace.
fn api_access() -> ProjectedVolumeSource {
    let token = VolumeProjection {
        service_account_token: Some(ServiceAccountTokenProjection {
            path: "token".into(),
            expiration_seconds: Some(3607),
            audience: None,
        }),
        ..Default::default()
    };
    let ca = VolumeProjection {
        config_map: Some(ConfigMapProjection {
            name: "kube-root-ca.crt".into(),
            items: Some(vec![KeyToPath {
                key: "ca.crt".into(),
                path: "ca.crt".into(),
                mode: None,
            }]),
            optional: None,
        }),
        ..Default::default()
    };
    let namespace = VolumeProjection {
        downward_api: Some(DownwardAPIProjection {
            items: Some(vec![DownwardAPIVolumeFile {
                path: "namespace".into(),
                field_ref: Some(field(Some("v1"), "metadata.namespace")),
                ..Default::default()
            }]),
        }),
        ..Default::default()
    };
    ProjectedVolumeSource {
        sources: Some(vec![token, ca, namespace]),
        default_mode: None,
    }
}

fn injected(a: &JobPlan) -> bool {
    matches!(a.pod.launch, Launch::Injected { .. })
}

/// The application container: the plan's, with the agent as its command and the job's
/// environment, ports, probe and mounts.
fn container(a: &JobPlan, batch: bool) -> Result<Value, serde_json::Error> {
    let mut mounts = values(own_volumes(a).map(mount))?;
    if injected(a) {
        mounts.push(serde_json::to_value(inject::mount(true))?);
    }
    mounts.extend(a.pod.mounts.iter().cloned());
    let own = Container {
        name: CONTAINER.into(),
        command: Some(agent_command(a, batch)),
        ports: Some(ports(batch)),
        readiness_probe: Some(readiness_probe()),
        ..Default::default()
    };
    let mut c = a.pod.container.clone();
    if let Value::Object(own) = serde_json::to_value(own)? {
        c.extend(own);
    }
    c.insert("env".into(), Value::Array(pod_env(a)?));
    c.insert("volumeMounts".into(), Value::Array(mounts));
    Ok(Value::Object(c))
}

/// The pod template (metadata and spec) of the workload.
pub(super) fn pod_template(a: &JobPlan, batch: bool) -> Result<Value, serde_json::Error> {
    let n = names(a);
    let (lk, lv) = job_label(a);
    let mut labels = a.pod.labels.clone();
    labels.extend(own_labels(a).into_iter().map(|(k, v)| (k, json!(v))));
    if let Some((wk, wv)) = workload_label(a) {
        labels.insert(wk.to_string(), json!(wv));
    }
    labels.insert(lk.to_string(), json!(lv));
    let mut pod_meta = json!({"labels": labels});
    let mut annotations = a.pod.annotations.clone();
    if let Some(s) = a.pod.slots {
        annotations.insert(
            crate::discovery::SLOTS_ANNOTATION.to_string(),
            json!(s.to_string()),
        );
    }
    if !annotations.is_empty() {
        pod_meta["annotations"] = Value::Object(annotations);
    }
    let mut volumes = values(own_volumes(a).map(|v| volume(v, &n.secret)))?;
    let mut init: Vec<Value> = Vec::new();
    if let Launch::Injected { image, .. } = &a.pod.launch {
        volumes.push(serde_json::to_value(inject::volume())?);
        init.push(serde_json::to_value(inject::install_container(
            image,
            a.pod.runtime_pull_policy.as_deref(),
            a.pod.uid,
            a.pod.gid,
        ))?);
    }
    volumes.extend(a.pod.volumes.iter().cloned());
    init.extend(a.pod.init_containers.iter().cloned());
    let mut spec: Map<String, Value> = a.pod.spec.clone();
    let own = json!({
        "serviceAccountName": n.sa,
        // The pod with index 0 runs the allocation (ras k8s reads the API); the pods share one
        // template, so each gets the token of a Role that only reads, in the agent's container
        // alone (the `kube-api-access` volume): not in the runtime's or the plan's init
        // containers, nor in sidecars.
        "automountServiceAccountToken": false,
        "containers": [container(a, batch)?],
        "volumes": volumes,
    });
    if let Value::Object(own) = own {
        spec.extend(own);
    }
    if !init.is_empty() {
        spec.insert("initContainers".into(), Value::Array(init));
    }
    if a.kind.runs_to_completion() {
        spec.insert("restartPolicy".into(), json!("Never"));
    }
    Ok(json!({"metadata": pod_meta, "spec": spec}))
}
