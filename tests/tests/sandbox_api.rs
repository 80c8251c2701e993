//! The sandbox API server on its own (no pods run): real clients (kube-rs, kubectl) against it;
//! label and field selectors, the objects' semantics, kubectl. Its watches and lists are in
//! `sandbox_api_watch.rs`, its authentication and authorization in `sandbox_api_auth.rs`.
#![forbid(unsafe_code)]

mod common;

use common::api::{admin, api_err, make_ns, pod, WAIT};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use sandbox::api::{ApiOptions, ApiServer, Part};
use sandbox::harness::unique;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_and_field_selectors() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("sel");
    make_ns(&c, &ns).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    for (n, l) in [
        ("a", json!({"app": "x", "tier": "web"})),
        ("b", json!({"app": "x", "tier": "db"})),
        ("c", json!({"app": "y"})),
        ("d", json!({})),
    ] {
        pods.create(&PostParams::default(), &pod(n, l))
            .await
            .unwrap();
    }
    server
        .store()
        .modify(
            &sandbox::api::resources::PODS,
            &ns,
            "b",
            Part::Status,
            |v| v["status"]["phase"] = json!("Running"),
        )
        .unwrap();
    let names = |l: kube::core::ObjectList<Pod>| -> Vec<String> {
        let mut v: Vec<String> = l
            .items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect();
        v.sort();
        v
    };
    let cases: &[(&str, &str, &[&str])] = &[
        ("app=x", "", &["a", "b"]),
        ("app==x", "", &["a", "b"]),
        ("app!=x", "", &["c", "d"]),
        ("app in (x,y)", "", &["a", "b", "c"]),
        ("app notin (x)", "", &["c", "d"]),
        ("tier", "", &["a", "b"]),
        ("!tier", "", &["c", "d"]),
        ("app=x,tier!=web", "", &["b"]),
        ("", "metadata.name=c", &["c"]),
        ("", "metadata.name!=c", &["a", "b", "d"]),
        ("", "status.phase=Running", &["b"]),
        ("", "status.phase!=Running", &["a", "c", "d"]),
        ("app=x", "status.phase=Pending", &["a"]),
        (
            "",
            &format!("metadata.namespace={ns}"),
            &["a", "b", "c", "d"],
        ),
    ];
    for (l, f, want) in cases {
        let mut lp = ListParams::default();
        if !l.is_empty() {
            lp = lp.labels(l);
        }
        if !f.is_empty() {
            lp = lp.fields(f);
        }
        assert_eq!(
            names(pods.list(&lp).await.unwrap()),
            *want,
            "labels {l:?} fields {f:?}"
        );
    }
    // All namespaces, with a selector.
    let all: Api<Pod> = Api::all(c.clone());
    assert_eq!(
        names(
            all.list(&ListParams::default().labels("app=y"))
                .await
                .unwrap()
        ),
        ["c"]
    );

    for bad in ["app=(x)", "app in x", "app in ()", "a b", "=x"] {
        let e = api_err(
            pods.list(&ListParams::default().labels(bad))
                .await
                .unwrap_err(),
        );
        assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"), "{bad}");
        assert!(
            e.message.contains("labelSelector") && e.message.contains(bad),
            "message names the selector: {}",
            e.message
        );
    }
    let e = api_err(
        pods.list(&ListParams::default().fields("spec.bogus=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    assert!(
        e.message.contains("field label not supported: spec.bogus"),
        "{}",
        e.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_semantics() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("obj");
    make_ns(&c, &ns).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let pp = PostParams::default();
    let p = pods.create(&pp, &pod("a", json!({}))).await.unwrap();
    assert!(p.metadata.uid.is_some() && p.metadata.creation_timestamp.is_some());
    assert_eq!(p.metadata.namespace.as_deref(), Some(ns.as_str()));
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
    let e = api_err(pods.create(&pp, &pod("a", json!({}))).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    let e = api_err(pods.get("missing").await.unwrap_err());
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (404, "NotFound", "pods \"missing\" not found")
    );

    // generateName
    let mut g = pod("", json!({}));
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let g = pods.create(&pp, &g).await.unwrap();
    assert!(
        g.metadata.name.as_ref().unwrap().starts_with("gen-")
            && g.metadata.name.as_ref().unwrap().len() == 9
    );

    // Status subresource: main-resource patches leave status alone.
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    assert_eq!(
        pods.get("a")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Pending")
    );
    pods.patch_status(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "podIP": "10.1.2.3"}})),
    )
    .await
    .unwrap();
    let s = pods.get_status("a").await.unwrap().status.unwrap();
    assert_eq!(
        (s.phase.as_deref(), s.pod_ip.as_deref()),
        (Some("Running"), Some("10.1.2.3"))
    );
    // Strategic merge and JSON patch.
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Strategic(json!({"metadata": {"labels": {"s": "1"}}})),
    )
    .await
    .unwrap();
    let jp: json_patch::Patch =
        serde_json::from_value(json!([{"op": "add", "path": "/metadata/labels/j", "value": "2"}]))
            .unwrap();
    let p = pods
        .patch("a", &PatchParams::default(), &Patch::<()>::Json(jp))
        .await
        .unwrap();
    let labels = p.metadata.labels.unwrap();
    assert_eq!((labels["s"].as_str(), labels["j"].as_str()), ("1", "2"));
    // Optimistic concurrency.
    let mut stale = pods.get("a").await.unwrap();
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"t": "3"}}})),
    )
    .await
    .unwrap();
    stale
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("u".into(), "4".into());
    let e = api_err(pods.replace("a", &pp, &stale).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    // Invalid objects.
    let bad: Pod =
        serde_json::from_value(json!({"metadata": {"name": "bad"}, "spec": {"containers": []}}))
            .unwrap();
    let e = api_err(pods.create(&pp, &bad).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message.contains("spec.containers: Required value"),
        "{}",
        e.message
    );
    // Creating in a namespace that does not exist.
    let e = api_err(
        Api::<Pod>::namespaced(c.clone(), "no-such-ns")
            .create(&pp, &pod("x", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 404);
    // Delete emits DELETED and removes it.
    pods.delete("a", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert_eq!(api_err(pods.get("a").await.unwrap_err()).code, 404);
    // Deleting the namespace removes what is in it.
    Api::<Namespace>::all(c.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
    assert!(Api::<Pod>::namespaced(c.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
}

/// Server-side apply of a status, as Kubernetes does it: the write through the status
/// subresource is recorded in an entry of its own (`subresource: status`); a field the
/// manager's next status apply leaves out is deleted, unless another manager owns it too; an
/// apply of the main resource by the same manager releases no status field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_apply_deletes_the_fields_it_leaves_out() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("ssa-status");
    make_ns(&c, &ns).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    pods.create(&PostParams::default(), &pod("a", json!({})))
        .await
        .unwrap();
    let apply = |status: serde_json::Value| {
        Patch::Apply(json!({"apiVersion": "v1", "kind": "Pod", "status": status}))
    };
    let ctl = PatchParams::apply("ctl").force();
    pods.patch_status(
        "a",
        &ctl,
        &apply(
            json!({"phase": "Running", "podIP": "10.1.2.3", "hostIP": "10.0.0.1", "message": "m"}),
        ),
    )
    .await
    .unwrap();
    let p = pods.get_status("a").await.unwrap();
    let entry = p
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.manager.as_deref() == Some("ctl"))
        .expect("ctl's entry");
    assert_eq!(
        (entry.operation.as_deref(), entry.subresource.as_deref()),
        (Some("Apply"), Some("status"))
    );
    // Another manager applies the host IP too (the same value: both own it).
    let own = PatchParams::apply("other").force();
    pods.patch_status("a", &own, &apply(json!({"hostIP": "10.0.0.1"})))
        .await
        .unwrap();
    // The same manager's apply of the main resource keeps every status field.
    pods.patch(
        "a",
        &PatchParams::apply("ctl"),
        &Patch::Apply(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"l": "1"}}}),
        ),
    )
    .await
    .unwrap();
    let s = pods.get_status("a").await.unwrap().status.unwrap();
    assert_eq!(s.pod_ip.as_deref(), Some("10.1.2.3"));
    // ctl's next status apply leaves out the pod IP, the host IP and the message.
    pods.patch_status("a", &ctl, &apply(json!({"phase": "Succeeded"})))
        .await
        .unwrap();
    let s = pods.get_status("a").await.unwrap().status.unwrap();
    assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    assert_eq!(s.pod_ip, None, "released: nobody else owns it");
    assert_eq!(s.message, None, "released: nobody else owns it");
    assert_eq!(s.host_ip.as_deref(), Some("10.0.0.1"), "shared: kept");
    let p = pods.get("a").await.unwrap();
    assert_eq!(p.metadata.labels.unwrap_or_default()["l"], "1");
    Api::<Namespace>::all(c.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}

/// kubectl (the one setup installs when present, and the one on PATH) against the API server.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_wide_watch_and_delete() {
    use tokio::io::AsyncBufReadExt;
    let kubectls = sandbox::harness::kubectl::all();
    assert!(
        !kubectls.is_empty(),
        "no kubectl found: set PRRTE_K8S_KUBECTL or run prrte-config/setup.sh (it installs {})",
        sandbox::harness::kubectl::SETUP_KUBECTL
    );
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let cache = tempfile::tempdir().unwrap();
    for (round, kubectl) in kubectls.iter().enumerate() {
        let ns = unique(&format!("kubectl{round}"));
        make_ns(&c, &ns).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
        for (i, n) in ["x-0", "x-1", "other"].iter().enumerate() {
            let app = if n.starts_with("x-") { "x" } else { "y" };
            pods.create(&PostParams::default(), &pod(n, json!({"app": app})))
                .await
                .unwrap();
            server
                .store()
                .modify(&sandbox::api::resources::PODS, &ns, n, Part::Status, |v| {
                    v["status"]["phase"] = json!("Running");
                    v["status"]["podIP"] = json!(format!("10.99.0.{}", i + 10));
                })
                .unwrap();
        }
        let kc = |args: &[&str]| {
            let mut cmd = tokio::process::Command::new(kubectl);
            cmd.arg("--kubeconfig")
                .arg(server.admin_kubeconfig())
                .arg("--cache-dir")
                .arg(cache.path())
                .args(["-n", &ns])
                .args(args);
            cmd.kill_on_drop(true);
            cmd
        };
        let out = kc(&["get", "pods", "-l", "app=x", "-o", "wide"])
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{kubectl:?} get: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0]
                .split_whitespace()
                .collect::<Vec<_>>()
                .starts_with(&["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]),
            "{kubectl:?}: {text}"
        );
        assert_eq!(lines.len(), 3, "{kubectl:?}: {text}");
        assert!(
            lines[1].starts_with("x-0 ")
                && lines[1].contains("10.99.0.10")
                && lines[1].contains("Running"),
            "{kubectl:?}: {text}"
        );
        assert!(
            lines[2].starts_with("x-1 ") && lines[2].contains("10.99.0.11"),
            "{kubectl:?}: {text}"
        );

        // -w: the initial rows, then a row for a change made afterwards.
        let mut w = kc(&["get", "pods", "-w"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut rd = tokio::io::BufReader::new(w.stdout.take().unwrap()).lines();
        async fn next_line(
            rd: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
        ) -> String {
            tokio::time::timeout(WAIT, rd.next_line())
                .await
                .expect("kubectl -w printed nothing in time")
                .unwrap()
                .expect("kubectl -w ended")
        }
        assert!(next_line(&mut rd).await.starts_with("NAME"));
        let mut initial = Vec::new();
        for _ in 0..3 {
            initial.push(
                next_line(&mut rd)
                    .await
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .to_string(),
            );
        }
        initial.sort();
        assert_eq!(initial, ["other", "x-0", "x-1"]);
        pods.create(&PostParams::default(), &pod("late", json!({"app": "x"})))
            .await
            .unwrap();
        let l = next_line(&mut rd).await;
        assert!(l.starts_with("late "), "{kubectl:?} -w showed {l:?}");
        w.kill().await.unwrap();

        // delete
        let out = kc(&["delete", "pod", "x-1"]).output().await.unwrap();
        assert!(
            out.status.success(),
            "{kubectl:?} delete: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(api_err(pods.get("x-1").await.unwrap_err()).code, 404);

        // create -f and apply -f of a manifest (openapi download, strategic merge patch).
        let manifest = cache.path().join(format!("m{round}.yaml"));
        std::fs::write(
            &manifest,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  a: \"1\"\n",
        )
        .unwrap();
        let out = kc(&["apply", "-f"]).arg(&manifest).output().await.unwrap();
        assert!(
            out.status.success(),
            "{kubectl:?} apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(
            &manifest,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  a: \"2\"\n",
        )
        .unwrap();
        let out = kc(&["apply", "-f"]).arg(&manifest).output().await.unwrap();
        assert!(
            out.status.success(),
            "{kubectl:?} apply again: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cm: k8s_openapi::api::core::v1::ConfigMap =
            Api::namespaced(c.clone(), &ns).get("cm").await.unwrap();
        assert_eq!(cm.data.unwrap()["a"], "2");

        // Typed create commands (protobuf bodies from kubectl 1.32+) and auth can-i
        // (SelfSubjectAccessReview), also impersonating a service account.
        for args in [
            &["create", "serviceaccount", "robot"][..],
            &["create", "secret", "generic", "sec", "--from-literal=k=v"],
            &[
                "create",
                "role",
                "reader",
                "--verb=get,list",
                "--resource=pods",
            ],
            &[
                "create",
                "rolebinding",
                "reader",
                "--role=reader",
                &format!("--serviceaccount={ns}:robot"),
            ],
        ] {
            let out = kc(args).output().await.unwrap();
            assert!(
                out.status.success(),
                "{kubectl:?} {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let sec: Secret = Api::namespaced(c.clone(), &ns).get("sec").await.unwrap();
        assert_eq!(sec.data.unwrap()["k"].0, b"v");
        let robot = format!("--as=system:serviceaccount:{ns}:robot");
        for (args, want) in [
            (vec!["auth", "can-i", "list", "pods"], "yes"),
            (vec!["auth", "can-i", "list", "pods", &robot], "yes"),
            (vec!["auth", "can-i", "list", "secrets", &robot], "no"),
        ] {
            let out = kc(&args).output().await.unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                want,
                "{kubectl:?} {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let out = kc(&["get", "secrets", &robot]).output().await.unwrap();
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Forbidden"),
            "{kubectl:?}: impersonated get secrets must be forbidden"
        );
    }
}
