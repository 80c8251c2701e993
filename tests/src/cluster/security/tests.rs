use super::*;
use serde_json::json;

fn image_root() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("etc")).unwrap();
    std::fs::write(
        d.path().join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("etc/group"),
        "root:x:0:\napp:x:1000:\nextra:x:2000:app\n",
    )
    .unwrap();
    d
}

fn pod(sc: Value) -> Value {
    json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}, "spec": {"securityContext": sc}})
}

#[test]
fn run_as_non_root_messages() {
    let c = json!({"name": "main"});
    let e = verify_run_as_non_root(&pod(json!({"runAsNonRoot": true})), &c, "").unwrap_err();
    assert_eq!(e.message, "container has runAsNonRoot and image will run as root (pod: \"p_ns(u-1)\", container: main)");
    assert_eq!(e.reason, "CreateContainerConfigError");
    let e = verify_run_as_non_root(
        &pod(json!({"runAsNonRoot": true, "runAsUser": 0})),
        &c,
        "1000",
    )
    .unwrap_err();
    assert_eq!(
        e.message,
        "container's runAsUser breaks non-root policy (pod: \"p_ns(u-1)\", container: main)"
    );
    let e = verify_run_as_non_root(&pod(json!({"runAsNonRoot": true})), &c, "app").unwrap_err();
    assert!(
        e.message.contains("image has non-numeric user (app)"),
        "{}",
        e.message
    );
    assert!(verify_run_as_non_root(&pod(json!({"runAsNonRoot": true})), &c, "1000:1000").is_ok());
    assert!(verify_run_as_non_root(
        &pod(json!({"runAsNonRoot": true, "runAsUser": 1000})),
        &c,
        ""
    )
    .is_ok());
    assert!(verify_run_as_non_root(&pod(json!({})), &c, "").is_ok());
    // The container's setting wins over the pod's.
    let c2 = json!({"name": "main", "securityContext": {"runAsNonRoot": false}});
    assert!(verify_run_as_non_root(&pod(json!({"runAsNonRoot": true})), &c2, "").is_ok());
}

#[test]
fn users_groups_and_capabilities() {
    let root = image_root();
    let img = ImageConfig {
        user: "app".into(),
        ..Default::default()
    };
    let c = json!({"name": "main"});
    let s = resolve(&pod(json!({})), &c, &img, root.path()).unwrap();
    assert_eq!((s.uid, s.gid, s.groups.clone()), (1000, 1000, vec![2000]));
    assert_eq!(s.home.as_deref(), Some("/home/app"));
    assert_eq!(s.capabilities.len(), DEFAULT_CAPABILITIES.len());
    assert!(!s.no_new_privs && !s.read_only_root);

    let c = json!({"name": "main", "securityContext": {"runAsUser": 1234, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}});
    let s = resolve(
        &pod(json!({"fsGroup": 3000, "supplementalGroups": [4000, 3000]})),
        &c,
        &img,
        root.path(),
    )
    .unwrap();
    assert_eq!(
        (s.uid, s.gid, s.groups.clone()),
        (1234, 0, vec![4000, 3000])
    );
    assert_eq!(s.capabilities, vec!["CAP_NET_BIND_SERVICE"]);
    assert!(s.no_new_privs && s.read_only_root);
    assert_eq!(s.fs_group, Some(3000));

    let c = json!({"name": "main", "securityContext": {"runAsGroup": 5}});
    let img = ImageConfig {
        user: "0:extra".into(),
        ..Default::default()
    };
    let s = resolve(&pod(json!({})), &c, &img, root.path()).unwrap();
    assert_eq!((s.uid, s.gid), (0, 5));
    let s = resolve(&pod(json!({})), &json!({"name": "m"}), &img, root.path()).unwrap();
    assert_eq!((s.uid, s.gid), (0, 2000));

    let img = ImageConfig {
        user: "ghost".into(),
        ..Default::default()
    };
    let e = resolve(&pod(json!({})), &json!({"name": "m"}), &img, root.path()).unwrap_err();
    assert_eq!(e.reason, "CreateContainerError");
    assert!(
        e.message.contains("unable to find user ghost"),
        "{}",
        e.message
    );
}
