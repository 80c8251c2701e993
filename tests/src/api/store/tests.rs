use super::params::{DeleteOptions, ListQuery, Part, Patch};
use super::state::Store;
use crate::api::resources::{NAMESPACES, PODS};
use serde_json::{json, Value};

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

fn pod(name: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}})
}

#[test]
fn create_get_conflict_delete() {
    let s = store();
    let p = s.create(&PODS, "default", pod("a"), false).unwrap();
    assert_eq!(p["status"]["phase"], "Pending");
    assert!(p["metadata"]["uid"].as_str().unwrap().len() == 36);
    let e = s.create(&PODS, "default", pod("a"), false).unwrap_err();
    assert_eq!(e.code, 409);
    let mut stale = (*p).clone();
    s.modify(&PODS, "default", "a", Part::Main, |v| {
        v["metadata"]["labels"]["b"] = json!("c")
    })
    .unwrap();
    stale["metadata"]["labels"]["z"] = json!("1");
    assert_eq!(
        s.update(&PODS, "default", "a", stale, Part::Main, false)
            .unwrap_err()
            .reason,
        "Conflict"
    );
    s.delete(&PODS, "default", "a", &DeleteOptions::default())
        .unwrap();
    assert_eq!(s.get(&PODS, "default", "a").unwrap_err().code, 404);
    assert_eq!(
        s.create(&PODS, "nope", pod("a"), false).unwrap_err().code,
        404
    );
}

#[test]
fn status_is_separate() {
    let s = store();
    s.create(&PODS, "default", pod("a"), false).unwrap();
    let p = s
        .patch(
            &PODS,
            "default",
            "a",
            Patch::Merge(json!({"status": {"phase": "Running"}})),
            Part::Main,
            false,
        )
        .unwrap();
    assert_eq!(p["status"]["phase"], "Pending");
    let p = s
        .patch(
            &PODS,
            "default",
            "a",
            Patch::Merge(json!({"status": {"phase": "Running"}})),
            Part::Status,
            false,
        )
        .unwrap();
    assert_eq!(p["status"]["phase"], "Running");
}

#[test]
fn pages_and_gone() {
    let s = store();
    for i in 0..25 {
        s.create(&PODS, "default", pod(&format!("p{i:03}")), false)
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut q = ListQuery {
        limit: Some(10),
        ..Default::default()
    };
    loop {
        let r = s.list(&PODS, Some("default"), &q).unwrap();
        seen.extend(
            r.items
                .iter()
                .map(|o| o["metadata"]["name"].as_str().unwrap().to_string()),
        );
        match r.continue_token {
            Some(t) => q.continue_token = Some(t),
            None => break,
        }
    }
    assert_eq!(seen.len(), 25);
    let first = s
        .list(
            &PODS,
            None,
            &ListQuery {
                limit: Some(10),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(first.remaining, Some(15));
    s.compact();
    s.create(&PODS, "default", pod("late"), false).unwrap();
    let e = s
        .list(
            &PODS,
            None,
            &ListQuery {
                limit: Some(10),
                continue_token: first.continue_token,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(e.code, 410);
    assert_eq!(
        s.watch(&PODS, None, Some(3)).err().map(|e| e.code),
        Some(410)
    );
}

#[test]
fn gc_of_dependents() {
    let s = store();
    let owner = s.create(&PODS, "default", pod("owner"), false).unwrap();
    let mut d = pod("dep");
    d["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": owner["metadata"]["uid"]}]);
    s.create(&PODS, "default", d, false).unwrap();
    assert_eq!(
        s.dependents(owner["metadata"]["uid"].as_str().unwrap())
            .len(),
        1
    );
    s.delete(&PODS, "default", "owner", &DeleteOptions::default())
        .unwrap();
    assert_eq!(s.get(&PODS, "default", "dep").unwrap_err().code, 404);
}

/// An object with finalizers is not removed by a delete: it gets its deletionTimestamp and
/// stays (a second delete changes nothing) until an update removes the last finalizer, which
/// removes it (a DELETED event); a pod gracefully deleted on a kubelet's node is held the same
/// once the kubelet's last delete (grace period 0) comes.
#[test]
fn finalizers_hold_a_deletion_until_removed() {
    let s = store();
    let mut p = pod("held");
    p["metadata"]["finalizers"] = json!(["example.com/keep"]);
    s.create(&PODS, "default", p, false).unwrap();
    let mut rx = s.subscribe();
    let d = s
        .delete(&PODS, "default", "held", &DeleteOptions::default())
        .unwrap();
    assert!(d["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 0);
    // No kubelet will end it (not on a node): Failed, as the pod garbage collector marks it.
    assert_eq!(d["status"]["phase"], "Failed");
    let rv = s.get(&PODS, "default", "held").unwrap()["metadata"]["resourceVersion"].clone();
    s.delete(&PODS, "default", "held", &DeleteOptions::default())
        .unwrap();
    assert_eq!(
        s.get(&PODS, "default", "held").unwrap()["metadata"]["resourceVersion"],
        rv,
        "a second delete changes nothing"
    );
    // Other changes keep it.
    s.modify(&PODS, "default", "held", Part::Status, |v| {
        v["status"]["phase"] = json!("Failed")
    })
    .unwrap();
    assert!(s.get(&PODS, "default", "held").is_ok());
    s.modify(&PODS, "default", "held", Part::Main, |v| {
        v["metadata"]["finalizers"] = json!([])
    })
    .unwrap();
    assert!(
        s.get(&PODS, "default", "held").is_err(),
        "removed with its last finalizer"
    );
    let kinds: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds.last(),
        Some(&super::event::EventType::Deleted),
        "{kinds:?}"
    );

    // Graceful on a kubelet's node: terminating with its grace period, then held.
    s.set_node_terminates_pods("n1", true);
    let mut p = pod("graceful");
    p["spec"]["nodeName"] = json!("n1");
    p["metadata"]["finalizers"] = json!(["example.com/keep"]);
    s.create(&PODS, "default", p, false).unwrap();
    let d = s
        .delete(&PODS, "default", "graceful", &DeleteOptions::default())
        .unwrap();
    assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 30);
    let last = DeleteOptions {
        grace_period: Some(0),
        ..Default::default()
    };
    let d = s.delete(&PODS, "default", "graceful", &last).unwrap();
    assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 0);
    assert!(s.get(&PODS, "default", "graceful").is_ok(), "held");
    // Without finalizers a delete still removes at once.
    s.create(&PODS, "default", pod("plain"), false).unwrap();
    s.delete(&PODS, "default", "plain", &DeleteOptions::default())
        .unwrap();
    assert!(s.get(&PODS, "default", "plain").is_err());
}
