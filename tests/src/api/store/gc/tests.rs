//! Garbage collection through ownerReferences, for every kind (custom ones too).

use super::FOREGROUND_FINALIZER;
use crate::api::resources::{CONFIGMAPS, CUSTOMRESOURCEDEFINITIONS, NAMESPACES, PODS, SECRETS};
use crate::api::store::params::{DeleteOptions, Part};
use crate::api::store::state::Store;
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

fn owned_by(name: &str, owners: &[(&Value, bool)]) -> Value {
    let refs: Vec<Value> = owners
        .iter()
        .map(|(o, block)| {
            json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
                   "uid": o["metadata"]["uid"], "controller": false, "blockOwnerDeletion": block})
        })
        .collect();
    json!({"metadata": {"name": name, "ownerReferences": refs}, "data": {"k": "v"}})
}

fn delete(s: &Store, rt: &'static crate::api::resources::ResourceType, name: &str, policy: &str) {
    let opts = DeleteOptions {
        propagation: Some(policy.to_string()),
        ..Default::default()
    };
    s.delete(rt, "default", name, &opts).unwrap();
}

/// Background: dependents (and theirs) go with the owner; one with another owner that still
/// exists only loses the reference. Orphan: dependents stay without the reference.
#[test]
fn background_and_orphan() {
    let s = store();
    let a = s
        .create(
            &SECRETS,
            "default",
            json!({"metadata": {"name": "a"}}),
            false,
        )
        .unwrap();
    let b = s
        .create(
            &SECRETS,
            "default",
            json!({"metadata": {"name": "b"}}),
            false,
        )
        .unwrap();
    let child = s
        .create(
            &CONFIGMAPS,
            "default",
            owned_by("child", &[(&a, false)]),
            false,
        )
        .unwrap();
    s.create(
        &CONFIGMAPS,
        "default",
        owned_by("grandchild", &[(&child, false)]),
        false,
    )
    .unwrap();
    s.create(
        &CONFIGMAPS,
        "default",
        owned_by("shared", &[(&a, false), (&b, false)]),
        false,
    )
    .unwrap();
    delete(&s, &SECRETS, "a", "Background");
    assert_eq!(
        s.get(&CONFIGMAPS, "default", "child").unwrap_err().code,
        404
    );
    assert_eq!(
        s.get(&CONFIGMAPS, "default", "grandchild")
            .unwrap_err()
            .code,
        404
    );
    let shared = s.get(&CONFIGMAPS, "default", "shared").unwrap();
    let refs = shared["metadata"]["ownerReferences"].as_array().unwrap();
    assert_eq!(refs.len(), 1, "{shared}");
    assert_eq!(refs[0]["name"], "b");
    // Its last owner gone, it goes too.
    delete(&s, &SECRETS, "b", "Background");
    assert_eq!(
        s.get(&CONFIGMAPS, "default", "shared").unwrap_err().code,
        404
    );

    let c = s
        .create(
            &SECRETS,
            "default",
            json!({"metadata": {"name": "c"}}),
            false,
        )
        .unwrap();
    s.create(
        &CONFIGMAPS,
        "default",
        owned_by("kept", &[(&c, true)]),
        false,
    )
    .unwrap();
    delete(&s, &SECRETS, "c", "Orphan");
    let kept = s.get(&CONFIGMAPS, "default", "kept").unwrap();
    assert!(
        kept["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{kept}"
    );
}

/// Foreground: the owner stays (deletionTimestamp, finalizer foregroundDeletion) while a
/// dependent that blocks it is held by a finalizer, and goes with it; dependents that do not
/// block are deleted but not waited for. A second delete changes nothing meanwhile.
#[test]
fn foreground_waits_for_blocking_dependents() {
    let s = store();
    let o = s
        .create(
            &SECRETS,
            "default",
            json!({"metadata": {"name": "o"}}),
            false,
        )
        .unwrap();
    let mut blocking = owned_by("blocking", &[(&o, true)]);
    blocking["metadata"]["finalizers"] = json!(["example.com/hold"]);
    s.create(&CONFIGMAPS, "default", blocking, false).unwrap();
    s.create(
        &CONFIGMAPS,
        "default",
        owned_by("free", &[(&o, false)]),
        false,
    )
    .unwrap();
    delete(&s, &SECRETS, "o", "Foreground");
    let held = s.get(&SECRETS, "default", "o").unwrap();
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        held["metadata"]["finalizers"],
        json!([FOREGROUND_FINALIZER])
    );
    assert_eq!(s.get(&CONFIGMAPS, "default", "free").unwrap_err().code, 404);
    let b = s.get(&CONFIGMAPS, "default", "blocking").unwrap();
    assert!(
        b["metadata"]["deletionTimestamp"].is_string(),
        "deleted, held by its finalizer"
    );
    delete(&s, &SECRETS, "o", "Background");
    assert!(
        s.get(&SECRETS, "default", "o").is_ok(),
        "a second delete does not end the wait"
    );
    s.modify(&CONFIGMAPS, "default", "blocking", Part::Main, |v| {
        v["metadata"]["finalizers"] = json!([])
    })
    .unwrap();
    assert_eq!(
        s.get(&CONFIGMAPS, "default", "blocking").unwrap_err().code,
        404
    );
    assert_eq!(
        s.get(&SECRETS, "default", "o").unwrap_err().code,
        404,
        "gone with its last blocking dependent"
    );

    // Nothing blocking: the owner goes at once; another finalizer of its own still holds it.
    let o = s
        .create(
            &SECRETS,
            "default",
            json!({"metadata": {"name": "o2", "finalizers": ["example.com/mine"]}}),
            false,
        )
        .unwrap();
    s.create(
        &CONFIGMAPS,
        "default",
        owned_by("free2", &[(&o, false)]),
        false,
    )
    .unwrap();
    delete(&s, &SECRETS, "o2", "Foreground");
    assert_eq!(
        s.get(&CONFIGMAPS, "default", "free2").unwrap_err().code,
        404
    );
    let held = s.get(&SECRETS, "default", "o2").unwrap();
    assert_eq!(held["metadata"]["finalizers"], json!(["example.com/mine"]));
}

/// Custom objects own and are owned as any object: deleting a custom owner deletes its pods.
#[test]
fn custom_owners_and_dependents() {
    let s = store();
    s.create(
        &CUSTOMRESOURCEDEFINITIONS,
        "",
        crate::api::crd::tests::widget_crd("Namespaced"),
        false,
    )
    .unwrap();
    let rt = s.lookup("example.com", "v1", "widgets").unwrap();
    let w = s
        .create(rt, "default", json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}}), false)
        .unwrap();
    let mut pod = owned_by("p", &[(&w, true)]);
    pod.as_object_mut().unwrap().remove("data");
    pod["spec"] = json!({"containers": [{"name": "c", "image": "i"}]});
    s.create(&PODS, "default", pod, false).unwrap();
    let mut cm = owned_by("owned-by-pod", &[]);
    let p = s.get(&PODS, "default", "p").unwrap();
    cm["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": p["metadata"]["uid"]}]);
    s.create(&CONFIGMAPS, "default", cm, false).unwrap();
    delete(&s, rt, "w", "Foreground");
    assert_eq!(s.get(&PODS, "default", "p").unwrap_err().code, 404);
    assert_eq!(
        s.get(&CONFIGMAPS, "default", "owned-by-pod")
            .unwrap_err()
            .code,
        404
    );
    assert_eq!(s.get(rt, "default", "w").unwrap_err().code, 404);
}

/// An object made after its owner went (a controller acting on a stale view of the owner):
/// with every owner gone it is deleted, with one of two gone it loses that reference; an
/// owner of the same name but another uid is gone too; owners that exist, or of a kind the
/// store does not know, keep it.
#[test]
fn dependents_of_owners_already_gone_are_collected() {
    let s = store();
    let a = s
        .create(
            &SECRETS,
            "default",
            json!({"metadata": {"name": "a"}}),
            false,
        )
        .unwrap();
    let b = s
        .create(
            &SECRETS,
            "default",
            json!({"metadata": {"name": "b"}}),
            false,
        )
        .unwrap();
    delete(&s, &SECRETS, "a", "Background");
    s.create(
        &CONFIGMAPS,
        "default",
        owned_by("late", &[(&a, false)]),
        false,
    )
    .unwrap();
    s.create(
        &CONFIGMAPS,
        "default",
        owned_by("half", &[(&a, false), (&b, false)]),
        false,
    )
    .unwrap();
    s.create(
        &CONFIGMAPS,
        "default",
        owned_by("kept", &[(&b, false)]),
        false,
    )
    .unwrap();
    // Same name as a live owner, but the uid of one deleted before.
    s.create(
        &SECRETS,
        "default",
        json!({"metadata": {"name": "a"}}),
        false,
    )
    .unwrap();
    s.create(
        &CONFIGMAPS,
        "default",
        owned_by("stale", &[(&a, false)]),
        false,
    )
    .unwrap();
    let mut foreign = owned_by("foreign", &[]);
    foreign["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.com/v9",
        "kind": "Unknown", "name": "x", "uid": "0000"}]);
    s.create(&CONFIGMAPS, "default", foreign, false).unwrap();
    for name in ["late", "half", "kept", "stale", "foreign"] {
        let changed = s.collect_dangling(&CONFIGMAPS, "default", name);
        assert_eq!(changed, matches!(name, "late" | "half" | "stale"), "{name}");
    }
    for gone in ["late", "stale"] {
        assert_eq!(s.get(&CONFIGMAPS, "default", gone).unwrap_err().code, 404);
    }
    let half = s.get(&CONFIGMAPS, "default", "half").unwrap();
    assert_eq!(
        half["metadata"]["ownerReferences"][0]["uid"],
        b["metadata"]["uid"]
    );
    assert_eq!(
        half["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert!(s.get(&CONFIGMAPS, "default", "kept").is_ok());
    assert!(s.get(&CONFIGMAPS, "default", "foreign").is_ok());
    // Nothing left to do: the sweep changes nothing more.
    s.create(
        &CONFIGMAPS,
        "default",
        owned_by("late2", &[(&a, false)]),
        false,
    )
    .unwrap();
    s.collect_all_dangling();
    assert_eq!(
        s.get(&CONFIGMAPS, "default", "late2").unwrap_err().code,
        404
    );
    assert!(s.get(&CONFIGMAPS, "default", "half").is_ok());
}
