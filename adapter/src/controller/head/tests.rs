use serde_json::{json, Value};

use super::{ManagedBy, MpiJobHead};
use crate::controller::desired::managed_by;
use crate::manifest::mpijob::stored::StoredMpiJob;

/// An MPIJob as the API server returns it, with a value of `big` bytes in its launcher's
/// environment and as much in kubectl's last-applied annotation, its managed fields and a
/// status.
fn stored(big: usize, by: &str) -> Value {
    let value = "x".repeat(big);
    json!({
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {
            "name": "pi",
            "namespace": "team",
            "uid": "u-1",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2026-12-03T12:00:00Z",
            "labels": {"app": "pi"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": value.clone()},
            "managedFields": [{"manager": "kubectl", "operation": "Apply",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
            "finalizers": ["example.com/keep"],
        },
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"managedBy": by, "suspend": true},
            "mpiReplicaSpecs": {"Launcher": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "l", "image": "i",
                    "env": [{"name": "BIG", "value": value}]}]}}}},
        },
        "status": {"conditions": [{"type": "Created", "status": "True"}]},
    })
}

/// The store keeps of an MPIJob of megabytes only its name, uid, versions, times and
/// `managedBy`: a few hundred bytes, whoever manages it.
#[test]
fn an_mpijob_of_megabytes_is_kept_in_a_few_hundred_bytes() {
    for by in ["kubeflow.org/mpi-operator", "prrte-k8s.io/controller"] {
        let text = stored(1 << 20, by).to_string();
        assert!(text.len() > 2 << 20);
        let head: MpiJobHead = serde_json::from_str(&text).unwrap();
        assert_eq!(head.managed_by, ManagedBy::Named(by.into()));
        let m = &head.metadata;
        assert_eq!(m.name.as_deref(), Some("pi"));
        assert_eq!(m.namespace.as_deref(), Some("team"));
        assert_eq!(m.uid.as_deref(), Some("u-1"));
        assert_eq!(m.resource_version.as_deref(), Some("42"));
        assert_eq!(m.generation, Some(3));
        assert!(m.creation_timestamp.is_some());
        assert!(m.deletion_timestamp.is_none());
        assert!(m.annotations.is_none() && m.managed_fields.is_none() && m.labels.is_none());
        let kept = serde_json::to_vec(&head.metadata).unwrap().len() + by.len();
        assert!(kept < 512, "{kept} bytes kept");
    }
}

/// Whether an MPIJob is the controller's is read from its head as from the whole stored
/// MPIJob, for every shape its spec may have: one that does not fit fails nothing, and is
/// the controller's exactly when the stored MPIJob's `managedBy` says so.
#[test]
fn the_head_tells_whose_an_mpijob_is_as_the_stored_mpijob_does() {
    let specs = [
        None,
        Some(json!(null)),
        Some(json!("a string")),
        Some(json!([1, 2])),
        Some(json!({})),
        Some(json!({"runPolicy": null})),
        Some(json!({"runPolicy": "x"})),
        Some(json!({"runPolicy": [1]})),
        Some(json!({"runPolicy": {}})),
        Some(json!({"runPolicy": {"managedBy": null}})),
        Some(json!({"runPolicy": {"managedBy": ""}})),
        Some(json!({"runPolicy": {"managedBy": "prrte-k8s.io/controller"}})),
        Some(json!({"runPolicy": {"managedBy": "kubeflow.org/mpi-operator"}})),
        Some(json!({"runPolicy": {"managedBy": 3}})),
        Some(json!({"runPolicy": {"managedBy": true}})),
        Some(json!({"runPolicy": {"managedBy": {"a": 1}}})),
        Some(json!({"runPolicy": {"managedBy": ["prrte-k8s.io/controller"]}})),
        Some(json!({"mpiReplicaSpecs": 5, "runPolicy": {"suspend": "yes",
            "managedBy": "prrte-k8s.io/controller", "schedulingPolicy": [{"x": {}}]}})),
        Some(json!({"runPolicy": {"managedBy": "prrte-k8s.io/controller \"quoted\""}})),
    ];
    for spec in specs {
        let mut obj = json!({"metadata": {"name": "pi", "namespace": "team"}});
        if let Some(s) = &spec {
            obj["spec"] = s.clone();
        }
        let text = obj.to_string();
        let head: MpiJobHead = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("the head of {text} is not read: {e}"));
        let whole: StoredMpiJob = serde_json::from_str(&text).unwrap();
        for all in [false, true] {
            let want = whole
                .managed_by()
                .is_ok_and(|by| managed_by(by.as_deref(), all));
            assert_eq!(head.ours(all), want, "{text}, manage_all {all}");
        }
    }
}

/// A list page of MPIJobs of every shape is read whole: one that does not fit fails no
/// other, and each keeps its head.
#[test]
fn a_page_with_an_unfit_mpijob_is_read_whole() {
    let mut odd = stored(16, "prrte-k8s.io/controller");
    odd["spec"]["runPolicy"] = json!(["not", "an", "object"]);
    odd["metadata"]["name"] = json!("odd");
    let page = json!({
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJobList",
        "metadata": {"resourceVersion": "7", "continue": "next"},
        "items": [stored(64, "prrte-k8s.io/controller"), odd, stored(64, "other")],
    });
    let list: kube::core::ObjectList<MpiJobHead> = serde_json::from_value(page).unwrap();
    let got: Vec<(Option<String>, ManagedBy)> = list
        .items
        .into_iter()
        .map(|h| (h.metadata.name, h.managed_by))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                Some("pi".into()),
                ManagedBy::Named("prrte-k8s.io/controller".into())
            ),
            (Some("odd".into()), ManagedBy::Unreadable),
            (Some("pi".into()), ManagedBy::Named("other".into())),
        ]
    );
}
