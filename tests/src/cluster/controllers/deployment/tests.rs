//! The Deployment and ReplicaSet controllers against a store (no kubelet: pods are marked
//! running and ready by hand).

use super::{reconcile_deployment, reconcile_replicaset};
use crate::api::resources::{DEPLOYMENTS, NAMESPACES, PODS, REPLICASETS};
use crate::api::{DeleteOptions, ListQuery, Part, Store};
use serde_json::{json, Value};
use std::sync::Arc;

fn store() -> Store {
    let s = Store::new();
    s.create(
        &NAMESPACES,
        "",
        json!({"metadata": {"name": "default"}}),
        false,
    )
    .unwrap();
    s
}

fn pods(s: &Store) -> Vec<Arc<Value>> {
    s.list(&PODS, Some("default"), &ListQuery::default())
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

/// Reconciles until nothing changes, as the controllers' event loop would.
fn settle(s: &Store) {
    for _ in 0..5 {
        reconcile_deployment(s, "default", "web");
        for rs in s
            .list(&REPLICASETS, Some("default"), &ListQuery::default())
            .unwrap()
            .items
        {
            reconcile_replicaset(s, "default", rs["metadata"]["name"].as_str().unwrap());
        }
    }
}

fn run_all(s: &Store) {
    for p in pods(s) {
        s.modify(
            &PODS,
            "default",
            p["metadata"]["name"].as_str().unwrap(),
            Part::Status,
            |v| {
                v["status"]["phase"] = json!("Running");
                v["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
            },
        )
        .unwrap();
    }
}

/// N pods through a ReplicaSet, a deleted one replaced, the status kubectl reads, a scale
/// down, a new template (a new ReplicaSet, the old one at 0), and the cascade on delete.
#[test]
fn deployment_keeps_its_pods() {
    let s = store();
    let d = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let d = s.create(&DEPLOYMENTS, "default", d, false).unwrap();
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
    settle(&s);
    let rss = s
        .list(&REPLICASETS, Some("default"), &ListQuery::default())
        .unwrap()
        .items;
    assert_eq!(rss.len(), 1);
    let rs = &rss[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(rs["metadata"]["name"], format!("web-{hash}"));
    assert_eq!(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment");
    let ps = pods(&s);
    assert_eq!(ps.len(), 3);
    assert!(ps.iter().all(
        |p| p["metadata"]["labels"]["pod-template-hash"] == json!(hash)
            && p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    ));
    let d = s.get(&DEPLOYMENTS, "default", "web").unwrap();
    assert_eq!(d["status"]["availableReplicas"], 0);
    assert_eq!(d["status"]["conditions"][0]["status"], "False", "{d}");

    run_all(&s);
    settle(&s);
    let st = s.get(&DEPLOYMENTS, "default", "web").unwrap()["status"].clone();
    for (f, n) in [
        ("replicas", 3),
        ("updatedReplicas", 3),
        ("readyReplicas", 3),
        ("availableReplicas", 3),
    ] {
        assert_eq!(st[f], n, "{f}: {st}");
    }
    assert_eq!(st["observedGeneration"], 1);
    assert_eq!(st["conditions"][0]["type"], "Available");
    assert_eq!(st["conditions"][0]["status"], "True");
    assert_eq!(st["conditions"][1]["reason"], "NewReplicaSetAvailable");

    // A deleted pod is replaced.
    let gone = ps[0]["metadata"]["name"].as_str().unwrap().to_string();
    s.delete(&PODS, "default", &gone, &DeleteOptions::default())
        .unwrap();
    settle(&s);
    let now = pods(&s);
    assert_eq!(now.len(), 3);
    assert!(now.iter().all(|p| p["metadata"]["name"] != json!(gone)));

    // Scaled down: the extra pods go (the not ready one first).
    s.modify(&DEPLOYMENTS, "default", "web", Part::Main, |v| {
        v["spec"]["replicas"] = json!(1)
    })
    .unwrap();
    settle(&s);
    let left = pods(&s);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["status"]["phase"], "Running", "the ready pod stays");

    // A new template: a new ReplicaSet with the pods, the old one at 0.
    s.modify(&DEPLOYMENTS, "default", "web", Part::Main, |v| {
        v["spec"]["template"]["spec"]["containers"][0]["image"] = json!("i2")
    })
    .unwrap();
    settle(&s);
    let rss = s
        .list(&REPLICASETS, Some("default"), &ListQuery::default())
        .unwrap()
        .items;
    assert_eq!(rss.len(), 2);
    let replicas: Vec<i64> = rss
        .iter()
        .map(|r| r["spec"]["replicas"].as_i64().unwrap())
        .collect();
    assert!(
        replicas.contains(&0) && replicas.contains(&1),
        "{replicas:?}"
    );
    let ps = pods(&s);
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0]["spec"]["containers"][0]["image"], "i2");

    // Deleted: its ReplicaSets and their pods go with it.
    s.delete(&DEPLOYMENTS, "default", "web", &DeleteOptions::default())
        .unwrap();
    assert!(s
        .list(&REPLICASETS, Some("default"), &ListQuery::default())
        .unwrap()
        .items
        .is_empty());
    assert!(pods(&s).is_empty());
}
