//! What installs the controller: the MPIJob CRD, the Namespace `prrte-k8s-system` (restricted
//! pod security enforced), the ServiceAccount, the ClusterRole with exactly the verbs and
//! resources the controller uses and its binding, a Role for the Lease in its own namespace,
//! its NetworkPolicy (in, only Prometheus to the metrics port; out, only the Kubernetes API),
//! and the Deployment of the `FROM scratch` image holding the static `prrte-k8s` at the
//! restricted level, probed on a port of its own. One source: `prrte-k8s manifest --controller` prints [`objects`], and
//! `prrte-config/deploy/` (the kustomization of `kubectl apply -k`) holds the same objects,
//! checked by a test. `prrte-config/deploy/namespaced/` is the install of a controller that
//! watches only some namespaces (`--namespace`): the ClusterRole and its binding replaced by a
//! Role and a RoleBinding in each ([`namespace_objects`]); the CRD stays cluster-wide.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, Namespace,
    ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    SeccompProfile, SecurityContext, ServiceAccount,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResourceExt;
use serde_json::Value;

use crate::manifest::api_server::ApiServer;
use crate::manifest::mpijob::model::MpiJob;
use crate::manifest::network_policy::api_egress;

/// The controller's name: its ServiceAccount, roles, Deployment and Lease.
pub const NAME: &str = "prrte-k8s-controller";
/// The namespace it is installed in.
pub const NAMESPACE: &str = "prrte-k8s-system";
/// Its image (`make image`); kustomize's `images:` retags it.
pub(crate) const IMAGE: &str = "localhost/prrte-k8s-controller:latest";
/// The port of its `/metrics`.
pub(crate) const METRICS_PORT: i32 = 8080;
/// The port of its probes' `/healthz` and `/readyz`.
pub(crate) const HEALTH_PORT: i32 = 8081;
/// The namespace whose pods may scrape `/metrics` (its NetworkPolicy's default: where
/// kube-prometheus runs Prometheus; a site names its own with a kustomize patch).
pub const PROMETHEUS_NAMESPACE: &str = "monitoring";
/// The user the image runs as (no root: the restricted level).
pub const USER: i64 = 65532;

/// One rule: `verbs` on `resources` of `group`.
fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    }
}

/// What the controller does in every namespace, and nothing else (named verbs and resources):
/// - MPIJobs: watched (kube-runtime's `Controller` lists and watches), their status patched,
///   and read once before a job's objects are made (the cache may lag behind a delete);
/// - the children it owns, Jobs and (`--launcher-pod`, where JobSets are served) JobSets:
///   watched, read, made and updated with server-side apply (`spec.suspend`, the templates
///   Kueue changes while suspended), and a failed one deleted to be made again
///   (`runPolicy.backoffLimit`);
/// - the Jobs' pods: watched (the status counts them, from the controller's cache), and the
///   workers deleted after the end of an MPIJob whose `runPolicy.cleanPodPolicy` is `All`;
/// - the other objects of each job: read by name before they are made (one that exists and is
///   not this MPIJob's is never taken over), and made with server-side apply (an apply is a
///   patch; one that makes the object needs create too); never changed once made (the Secret
///   keeps its key); with `--gang-scheduler`, the PodGroup of scheduler-plugins or Volcano
///   among them;
/// - events on the MPIJobs (kube-runtime's recorder creates them and patches a repeated one);
/// - with `--trainjobs`: TrainJobs watched and their status patched, their runtimes read, the
///   JobSets, Secrets and ConfigMaps they own read and applied (a JobSet deleted past the
///   job's deadline), the pods of a failed JobSet listed, and the validating webhook
///   configurations listed once at start (whether Trainer's controller is installed).
///
/// The job's own Role grants its pods `get`, `list`, `watch` on pods, `get` on its Job and
/// `create` on core `events` (the launcher's `DaemonsUp` on the MPIJob); the controller holds
/// those itself, as Kubernetes requires of whoever creates a Role (no `escalate` or `bind`).
pub(crate) fn cluster_rules() -> Vec<PolicyRule> {
    vec![
        rule("kubeflow.org", &["mpijobs"], &["get", "list", "watch"]),
        rule("kubeflow.org", &["mpijobs/status"], &["patch"]),
        rule(
            "batch",
            &["jobs"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule(
            "jobset.x-k8s.io",
            &["jobsets"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        rule("", &["pods"], &["get", "list", "watch", "delete"]),
        rule(
            "",
            &["serviceaccounts", "secrets"],
            &["get", "create", "patch"],
        ),
        rule(
            "rbac.authorization.k8s.io",
            &["roles", "rolebindings"],
            &["get", "create", "patch"],
        ),
        rule(
            "networking.k8s.io",
            &["networkpolicies"],
            &["get", "create", "patch"],
        ),
        rule(
            "scheduling.x-k8s.io",
            &["podgroups"],
            &["get", "create", "patch"],
        ),
        rule(
            "scheduling.volcano.sh",
            &["podgroups"],
            &["get", "create", "patch"],
        ),
        rule("events.k8s.io", &["events"], &["create", "patch"]),
        rule("", &["events"], &["create"]),
        // `--trainjobs`: Kubeflow Trainer's TrainJobs and their runtimes (their JobSets, Secrets
        // and ConfigMaps: the rules above and below).
        rule(
            "trainer.kubeflow.org",
            &["trainjobs"],
            &["get", "list", "watch"],
        ),
        rule("trainer.kubeflow.org", &["trainjobs/status"], &["patch"]),
        rule(
            "trainer.kubeflow.org",
            &["clustertrainingruntimes", "trainingruntimes"],
            &["get"],
        ),
        rule("", &["configmaps"], &["get", "create", "patch"]),
        // Whether Trainer's own controller is installed (its TrainJob webhook).
        rule(
            "admissionregistration.k8s.io",
            &["validatingwebhookconfigurations"],
            &["list"],
        ),
    ]
}

/// What the replicas do in their own namespace: elect a leader through the Lease (read,
/// created by the first, renewed by patches).
pub(crate) fn lease_rules() -> Vec<PolicyRule> {
    vec![rule(
        "coordination.k8s.io",
        &["leases"],
        &["get", "create", "patch"],
    )]
}

fn labels() -> BTreeMap<String, String> {
    [
        ("app.kubernetes.io/name".to_string(), NAME.to_string()),
        (
            "app.kubernetes.io/part-of".to_string(),
            "prrte-k8s".to_string(),
        ),
    ]
    .into()
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(labels()),
        ..Default::default()
    }
}

fn subject() -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: NAME.into(),
        namespace: Some(NAMESPACE.into()),
        api_group: None,
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

/// An HTTP probe of `path` on the health port every `period` seconds.
fn probe(path: &str, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("health".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        ..Default::default()
    }
}

/// The controller's NetworkPolicy: in, only the metrics port, only from the pods of
/// [`PROMETHEUS_NAMESPACE`] (the kubelet's probes come from the pod's own node, which the
/// usual network plugins admit whatever the policy); out, only to the Kubernetes API (any
/// address but link-local ones, ports 443 and 6443, as a job's pods by default). Nothing in
/// the cluster can reach the probes' port, nor the metrics port from elsewhere.
fn network_policy() -> NetworkPolicy {
    let selector: BTreeMap<String, String> =
        [("app.kubernetes.io/name".to_string(), NAME.to_string())].into();
    let prometheus: BTreeMap<String, String> = [(
        "kubernetes.io/metadata.name".to_string(),
        PROMETHEUS_NAMESPACE.to_string(),
    )]
    .into();
    NetworkPolicy {
        metadata: meta(NAME, Some(NAMESPACE)),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    namespace_selector: Some(LabelSelector {
                        match_labels: Some(prometheus),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ports: Some(vec![NetworkPolicyPort {
                    protocol: Some("TCP".into()),
                    port: Some(IntOrString::String("metrics".into())),
                    end_port: None,
                }]),
            }]),
            egress: Some(vec![api_egress(&ApiServer::default())]),
        }),
    }
}

/// The controller's Deployment: one replica (more are safe: the Lease elects one leader), its
/// pod at the restricted level with a read-only root filesystem.
fn deployment() -> Deployment {
    let selector: BTreeMap<String, String> =
        [("app.kubernetes.io/name".to_string(), NAME.to_string())].into();
    let container = Container {
        name: "controller".into(),
        image: Some(IMAGE.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(vec!["controller".into()]),
        env: Some(vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            EnvVar {
                name: "PRRTE_K8S_LOG".into(),
                value: Some("info".into()),
                ..Default::default()
            },
        ]),
        ports: Some(vec![
            ContainerPort {
                name: Some("metrics".into()),
                container_port: METRICS_PORT,
                protocol: Some("TCP".into()),
                ..Default::default()
            },
            ContainerPort {
                name: Some("health".into()),
                container_port: HEALTH_PORT,
                protocol: Some("TCP".into()),
                ..Default::default()
            },
        ]),
        // The probes' own port: cheap, and out of reach of connections to the metrics port.
        liveness_probe: Some(probe("/healthz", 20)),
        readiness_probe: Some(probe("/readyz", 10)),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&[("cpu", "50m"), ("memory", "64Mi")])),
            limits: Some(quantities(&[("memory", "256Mi")])),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            read_only_root_filesystem: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    };
    Deployment {
        metadata: meta(NAME, Some(NAMESPACE)),
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels()),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(NAME.into()),
                    termination_grace_period_seconds: Some(10),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(USER),
                        run_as_group: Some(USER),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            localhost_profile: None,
                        }),
                        ..Default::default()
                    }),
                    containers: vec![container],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Every object that installs the controller, in the order they apply: the CRD first, the
/// Deployment last.
pub fn objects() -> Result<Vec<Value>, serde_json::Error> {
    let mut ns = meta(NAMESPACE, None);
    if let Some(l) = ns.labels.as_mut() {
        l.insert(
            "pod-security.kubernetes.io/enforce".into(),
            "restricted".into(),
        );
    }
    let role_ref = |kind: &str| RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: NAME.into(),
    };
    Ok(vec![
        serde_json::to_value(MpiJob::crd())?,
        serde_json::to_value(Namespace {
            metadata: ns,
            ..Default::default()
        })?,
        serde_json::to_value(ServiceAccount {
            metadata: meta(NAME, Some(NAMESPACE)),
            ..Default::default()
        })?,
        serde_json::to_value(ClusterRole {
            metadata: meta(NAME, None),
            rules: Some(cluster_rules()),
            ..Default::default()
        })?,
        serde_json::to_value(ClusterRoleBinding {
            metadata: meta(NAME, None),
            subjects: Some(vec![subject()]),
            role_ref: role_ref("ClusterRole"),
        })?,
        serde_json::to_value(Role {
            metadata: meta(NAME, Some(NAMESPACE)),
            rules: Some(lease_rules()),
        })?,
        serde_json::to_value(RoleBinding {
            metadata: meta(NAME, Some(NAMESPACE)),
            subjects: Some(vec![subject()]),
            role_ref: role_ref("Role"),
        })?,
        serde_json::to_value(network_policy())?,
        serde_json::to_value(deployment())?,
    ])
}

/// The namespace the namespaced install's example watches (`prrte-config/deploy/namespaced/`).
pub const EXAMPLE_NAMESPACE: &str = "team-a";

/// What a controller that watches only the namespace `ns` (`prrte-k8s controller --namespace
/// NS`) needs there in place of the ClusterRole: a Role with the same rules, bound to its
/// ServiceAccount. The namespaced install has one of each per watched namespace.
pub fn namespace_objects(ns: &str) -> Result<Vec<Value>, serde_json::Error> {
    Ok(vec![
        serde_json::to_value(Role {
            metadata: meta(NAME, Some(ns)),
            rules: Some(cluster_rules()),
        })?,
        serde_json::to_value(RoleBinding {
            metadata: meta(NAME, Some(ns)),
            subjects: Some(vec![subject()]),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: NAME.into(),
            },
        })?,
    ])
}

/// Where `prrte-config/deploy/` keeps the objects: the CRD (exactly `prrte-k8s crd`), and the
/// rest with a header in `controller/` (its own kustomization, which sets the image); the
/// namespaced install's Role and RoleBinding for [`EXAMPLE_NAMESPACE`] in `namespaced/`.
pub(crate) const CRD_FILE: &str = "mpijob-crd.yaml";
pub(crate) const CONTROLLER_FILE: &str = "controller/controller.yaml";
pub(crate) const NAMESPACE_FILE: &str = "namespaced/watched-namespace.yaml";

fn stream(header: &str, objects: &[Value]) -> Result<String, serde_yaml::Error> {
    let mut out = header.to_string();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(o)?);
    }
    Ok(out)
}

/// The files of `prrte-config/deploy/` besides its kustomization: (name, text).
pub fn files() -> Result<Vec<(&'static str, String)>, serde_yaml::Error> {
    let objects = objects().map_err(<serde_yaml::Error as serde::ser::Error>::custom)?;
    Ok(vec![
        (CRD_FILE, serde_yaml::to_string(&objects[0])?),
        (
            CONTROLLER_FILE,
            stream(
                "# Generated by: prrte-k8s manifest --controller, all but the CRD (../mpijob-crd.yaml,\n\
                 # which is `prrte-k8s crd`); a test keeps both files equal to the renderer.\n",
                &objects[1..],
            )?,
        ),
        (
            NAMESPACE_FILE,
            stream(
                "# Generated from adapter/src/controller/install.rs (a test keeps it equal): what the\n\
                 # controller needs in one namespace it watches. Copy it for each namespace of\n\
                 # --namespace, changing `namespace:` in both objects.\n",
                &namespace_objects(EXAMPLE_NAMESPACE)
                    .map_err(<serde_yaml::Error as serde::ser::Error>::custom)?,
            )?,
        ),
    ])
}

/// [`objects`] as one YAML stream (`prrte-k8s manifest --controller`).
pub fn yaml() -> Result<String, serde_yaml::Error> {
    let objects = objects().map_err(<serde_yaml::Error as serde::ser::Error>::custom)?;
    stream(
        "# Generated by: prrte-k8s manifest --controller\n\
         # The prrte-k8s controller: the MPIJob CRD, its namespace, RBAC, NetworkPolicy and Deployment (the\n\
         # objects of `kubectl apply -k prrte-config/deploy`).\n",
        &objects,
    )
}

#[cfg(test)]
mod tests;
