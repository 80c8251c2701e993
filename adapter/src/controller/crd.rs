//! The MPIJob's CustomResourceDefinition (`prrte-k8s crd`, the install's `crd.yaml`), made by
//! kube's derive from the one MPIJob model ([`crate::manifest::mpijob::model`]).

use kube::CustomResourceExt;

use crate::manifest::mpijob::model::MpiJob;

/// The CustomResourceDefinition, as YAML.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&MpiJob::crd())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const PI: &str = include_str!("../manifest/mpijob/examples/pi.yaml");
    const RICH: &str = include_str!("../manifest/mpijob/examples/rich.yaml");

    /// The schema's node at `path` (properties only).
    fn node<'a>(schema: &'a Value, path: &[&str]) -> &'a Value {
        path.iter().fold(schema, |s, p| &s["properties"][p])
    }

    #[test]
    fn the_crd_names_the_kind_its_status_and_its_columns() {
        let crd = serde_json::to_value(MpiJob::crd()).unwrap();
        assert_eq!(crd["metadata"]["name"], "mpijobs.kubeflow.org");
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let v = &crd["spec"]["versions"][0];
        assert_eq!(v["name"], "v2beta1");
        assert_eq!(v["subresources"]["status"], serde_json::json!({}));
        let cols: Vec<&str> = v["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(cols, ["State", "Workers", "Active", "Managed-By", "Age"]);
        let schema = &v["schema"]["openAPIV3Schema"];
        // Every field of v2beta1's spec and runPolicy, and the pod template in full.
        for f in [
            "slotsPerWorker",
            "runLauncherAsWorker",
            "runPolicy",
            "mpiReplicaSpecs",
            "sshAuthMountPath",
            "launcherCreationPolicy",
            "mpiImplementation",
        ] {
            assert!(node(schema, &["spec", f]).is_object(), "spec.{f}");
        }
        for f in [
            "cleanPodPolicy",
            "ttlSecondsAfterFinished",
            "activeDeadlineSeconds",
            "backoffLimit",
            "schedulingPolicy",
            "suspend",
            "managedBy",
        ] {
            assert!(node(schema, &["spec", "runPolicy", f]).is_object(), "{f}");
        }
        let replica = &node(schema, &["spec", "mpiReplicaSpecs"])["additionalProperties"];
        let pod = node(replica, &["template", "spec"]);
        assert!(node(pod, &["containers"]).is_object());
        assert!(node(pod, &["nodeSelector"]).is_object());
        // minResources takes numbers and strings, as Kubernetes' quantities do.
        let min = &node(
            schema,
            &["spec", "runPolicy", "schedulingPolicy", "minResources"],
        )["additionalProperties"];
        assert_eq!(min["x-kubernetes-int-or-string"], true);
        assert!(node(schema, &["status", "replicaStatuses"]).is_object());
        assert!(node(schema, &["status", "conditions"]).is_object());
    }

    #[test]
    fn mpi_operators_examples_deserialize_and_serialize_back() {
        for text in [PI, RICH] {
            let v: Value = serde_yaml::from_str(text).unwrap();
            let job: MpiJob = serde_json::from_value(v.clone()).unwrap();
            let back = serde_json::to_value(&job).unwrap();
            let again: MpiJob = serde_json::from_value(back.clone()).unwrap();
            assert_eq!((again.spec, again.metadata), (job.spec, job.metadata));
            // Nothing dropped (quantities become strings: `cpu: 1` is "1").
            let w = "/spec/mpiReplicaSpecs/Worker/template/spec/containers/0";
            assert_eq!(
                back.pointer(w).unwrap()["command"],
                v.pointer(w).unwrap()["command"]
            );
            assert_eq!(back["spec"]["runPolicy"], v["spec"]["runPolicy"]);
            assert_eq!(back["spec"]["slotsPerWorker"], v["spec"]["slotsPerWorker"]);
        }
    }

    #[test]
    fn the_yaml_is_one_crd() {
        let y = crd_yaml().unwrap();
        assert!(
            y.starts_with("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n")
        );
        assert!(y.contains("x-kubernetes-int-or-string"));
    }
}
