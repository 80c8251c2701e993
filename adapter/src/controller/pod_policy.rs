//! A site's limits on what an MPIJob's pod templates may ask (pure). Creating an MPIJob is
//! creating pods, with the controller's rights: by default the templates may name any node
//! (`nodeName`, which bypasses the scheduler) and any Secret of the namespace. A site whose
//! MPIJob authors may not create pods themselves refuses those with `prrte-k8s controller
//! --refuse-foreign-secrets` (a Secret volume, a projected Secret, an `envFrom` or `valueFrom`
//! Secret, a CSI volume's Secret: any Secret but the job's own, `<name>-prrte`) and
//! `--refuse-node-name`. A refused MPIJob fails, naming the field.

use serde_json::Value;

use crate::manifest::mpijob::model::MpiJob;

/// What the site refuses in the pod templates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PodPolicy {
    /// `--refuse-foreign-secrets`.
    pub(crate) foreign_secrets: bool,
    /// `--refuse-node-name`.
    pub(crate) node_name: bool,
}

impl PodPolicy {
    /// Whether anything is refused.
    pub(crate) fn any(&self) -> bool {
        self.foreign_secrets || self.node_name
    }
}

/// Why the MPIJob `job` asks what `policy` refuses, naming each field (None: it does not).
pub(crate) fn check(job: &MpiJob, policy: &PodPolicy) -> Option<String> {
    if !policy.any() {
        return None;
    }
    let own = format!("{}-prrte", job.metadata.name.as_deref().unwrap_or_default());
    let mut found = Vec::new();
    for (role, spec) in &job.spec.mpi_replica_specs {
        let Some(pod) = spec.template.as_ref().and_then(|t| t.spec.as_ref()) else {
            continue;
        };
        let at = format!("spec.mpiReplicaSpecs.{role}.template.spec");
        if policy.node_name && pod.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
            found.push(format!(
                "{at}.nodeName: a node is named (the controller runs with --refuse-node-name: let the scheduler place the pods)"
            ));
        }
        if policy.foreign_secrets {
            let Ok(v) = serde_json::to_value(pod) else {
                continue;
            };
            let mut secrets = Vec::new();
            secrets_in(&v, &at, &mut secrets);
            for (path, name) in secrets.into_iter().filter(|(_, n)| *n != own) {
                found.push(format!(
                    "{path}: the Secret {name:?} is not the job's own (the controller runs with --refuse-foreign-secrets; the job's own is {own:?}, which the controller makes)"
                ));
            }
        }
    }
    (!found.is_empty()).then(|| found.join("; "))
}

/// Where the JSON of a pod spec `v` (at `path`) names a Secret whose content reaches the pod:
/// each field's path and the Secret's name. `imagePullSecrets` is not one (the kubelet pulls
/// with it; the pod never reads it).
fn secrets_in(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "imagePullSecrets" {
                    continue;
                }
                let at = format!("{path}.{k}");
                let name = |x: &Value| {
                    x.get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                match (k.as_str(), x) {
                    // A Secret volume's (and azureFile's) `secretName`.
                    ("secretName", Value::String(n)) => out.push((at, n.clone())),
                    // envFrom, valueFrom, a CSI volume's and the older volume types' references.
                    ("secretRef" | "secretKeyRef", Value::Object(_)) => out.push((at, name(x))),
                    (k, Value::Object(_)) if k.ends_with("SecretRef") => out.push((at, name(x))),
                    // A projected volume's source.
                    ("secret", Value::Object(o)) if !o.contains_key("secretName") => {
                        out.push((at, name(x)))
                    }
                    _ => secrets_in(x, &at, out),
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                secrets_in(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(edit: impl FnOnce(&mut Value)) -> MpiJob {
        let mut v: Value =
            serde_yaml::from_str(include_str!("../manifest/mpijob/examples/pi.yaml")).unwrap();
        edit(&mut v);
        serde_json::from_value(v).unwrap()
    }

    const BOTH: PodPolicy = PodPolicy {
        foreign_secrets: true,
        node_name: true,
    };
    const W: &str = "/spec/mpiReplicaSpecs/Worker/template/spec";

    #[test]
    fn every_way_to_a_foreign_secret_is_refused_naming_the_field() {
        let cases = [
            (
                json!({"volumes": [{"name": "db", "secret": {"secretName": "db-password"}}]}),
                "spec.mpiReplicaSpecs.Worker.template.spec.volumes[0].secret.secretName",
            ),
            (
                json!({"volumes": [{"name": "p", "projected": {"sources": [{"secret": {"name": "db-password"}}]}}]}),
                "spec.mpiReplicaSpecs.Worker.template.spec.volumes[0].projected.sources[0].secret",
            ),
            (
                json!({"volumes": [{"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "db-password"}}}]}),
                "spec.mpiReplicaSpecs.Worker.template.spec.volumes[0].csi.nodePublishSecretRef",
            ),
            (
                json!({"containers": [{"name": "w", "image": "i", "envFrom": [{"secretRef": {"name": "db-password"}}]}]}),
                "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].envFrom[0].secretRef",
            ),
            (
                json!({"initContainers": [{"name": "w", "image": "i", "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db-password", "key": "k"}}}]}]}),
                "spec.mpiReplicaSpecs.Worker.template.spec.initContainers[0].env[0].valueFrom.secretKeyRef",
            ),
        ];
        for (extra, field) in cases {
            let j = job(|v| {
                let spec = v.pointer_mut(W).unwrap().as_object_mut().unwrap();
                for (k, x) in extra.as_object().unwrap() {
                    spec.insert(k.clone(), x.clone());
                }
            });
            let why = check(&j, &BOTH).unwrap_or_else(|| panic!("{field}: not refused"));
            assert!(
                why.starts_with(&format!(
                    "{field}: the Secret \"db-password\" is not the job's own"
                )),
                "{why}"
            );
            assert!(why.contains("--refuse-foreign-secrets"), "{why}");
            // The default refuses nothing.
            assert_eq!(check(&j, &PodPolicy::default()), None);
        }
    }

    #[test]
    fn the_jobs_own_secret_and_image_pull_secrets_pass_a_node_name_does_not() {
        let name = job(|_| {}).metadata.name.unwrap();
        let j = job(|v| {
            let spec = v.pointer_mut(W).unwrap();
            spec["volumes"] =
                json!([{"name": "k", "secret": {"secretName": format!("{name}-prrte")}}]);
            spec["imagePullSecrets"] = json!([{"name": "registry"}]);
        });
        assert_eq!(check(&j, &BOTH), None);
        let j = job(|v| v.pointer_mut(W).unwrap()["nodeName"] = json!("node-7"));
        let why = check(&j, &BOTH).unwrap();
        assert!(
            why.starts_with("spec.mpiReplicaSpecs.Worker.template.spec.nodeName: a node is named"),
            "{why}"
        );
        assert_eq!(
            check(
                &j,
                &PodPolicy {
                    foreign_secrets: true,
                    node_name: false
                }
            ),
            None
        );
    }
}
