//! The sandbox API server's authentication and authorization (no pods run), through kube-rs:
//! unauthorized and forbidden requests answered with `Status` bodies, a service account's
//! rights from the RBAC objects.
#![forbid(unsafe_code)]

mod common;

use common::api::{admin, api_err, make_ns, pod, token_client};
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use sandbox::api::{ApiOptions, ApiServer, Rule};
use sandbox::harness::unique;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_and_forbidden_have_status_bodies() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bad = token_client(&server, "not-a-known-token", dir.path()).await;
    let e = api_err(
        Api::<Pod>::namespaced(bad, "default")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (401, "Unauthorized"));
    assert_eq!(e.status, Some(kube::core::response::StatusSummary::Failure));

    server.add_token(
        "get-only",
        "tester",
        Some("default"),
        vec![Rule {
            verbs: vec!["get".into()],
            api_groups: vec!["".into()],
            resources: vec!["pods".into()],
        }],
    );
    let c = token_client(&server, "get-only", dir.path()).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let e = api_err(pods.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(e.message, "pods is forbidden: User \"tester\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\"");
    // The right it has works; a 404 proves it got past authorization.
    assert_eq!(api_err(pods.get("nope").await.unwrap_err()).code, 404);
    // Its namespace only.
    let e = api_err(
        Api::<Pod>::namespaced(c.clone(), "kube-system")
            .get("nope")
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    assert!(
        e.message.contains("in the namespace \"kube-system\""),
        "{}",
        e.message
    );

    // Raw: the 401 body is a Status object.
    let out = std::process::Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(server.ca_pem_path())
        .args([
            "-H",
            "Authorization: Bearer nope",
            &format!("{}/api/v1/pods", server.url()),
        ])
        .output();
    if let Ok(out) = out {
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON body");
            assert_eq!(v["kind"], "Status");
            assert_eq!(v["apiVersion"], "v1");
            assert_eq!(v["code"], 401);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_rights_come_from_rbac_objects() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("rbac");
    make_ns(&c, &ns).await;
    let pp = PostParams::default();
    Api::<ServiceAccount>::namespaced(c.clone(), &ns)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "reader"}})).unwrap(),
        )
        .await
        .unwrap();
    Api::<Secret>::namespaced(c.clone(), &ns)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    Api::<Pod>::namespaced(c.clone(), &ns)
        .create(&pp, &pod("p", json!({})))
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let token = server.service_account_token(&ns, "reader");
    let sa = token_client(&server, &token, dir.path()).await;
    let e = api_err(
        Api::<Pod>::namespaced(sa.clone(), &ns)
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403, "no binding yet");
    assert_eq!(
        e.message,
        format!("pods is forbidden: User \"system:serviceaccount:{ns}:reader\" cannot list resource \"pods\" in API group \"\" in the namespace \"{ns}\"")
    );

    Api::<Role>::namespaced(c.clone(), &ns)
        .create(&pp, &serde_json::from_value(json!({
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        })).unwrap())
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(c.clone(), &ns)
        .create(&pp, &serde_json::from_value(json!({
            "metadata": {"name": "reader-binding"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
        })).unwrap())
        .await
        .unwrap();

    let list = Api::<Pod>::namespaced(sa.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let e = api_err(
        Api::<Secret>::namespaced(sa.clone(), &ns)
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    assert!(
        e.message.contains("cannot list resource \"secrets\""),
        "{}",
        e.message
    );
    let e = api_err(
        Api::<Pod>::namespaced(sa.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        e.code, 403,
        "a RoleBinding grants nothing in other namespaces"
    );
    let e = api_err(
        Api::<Pod>::namespaced(sa.clone(), &ns)
            .create(&pp, &pod("q", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403, "no create verb");

    // SelfSubjectAccessReview answers from the same rights.
    let ssar = |verb: &str, resource: &str| {
        json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"namespace": ns, "verb": verb, "resource": resource}},
        })
    };
    let reviews: Api<k8s_openapi::api::authorization::v1::SelfSubjectAccessReview> =
        Api::all(sa.clone());
    let r = reviews
        .create(&pp, &serde_json::from_value(ssar("list", "pods")).unwrap())
        .await
        .unwrap();
    assert!(r.status.unwrap().allowed);
    let r = reviews
        .create(
            &pp,
            &serde_json::from_value(ssar("list", "secrets")).unwrap(),
        )
        .await
        .unwrap();
    assert!(!r.status.unwrap().allowed);

    // Deleting the binding takes the right away again.
    Api::<RoleBinding>::namespaced(c.clone(), &ns)
        .delete("reader-binding", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        api_err(
            Api::<Pod>::namespaced(sa, &ns)
                .list(&ListParams::default())
                .await
                .unwrap_err()
        )
        .code,
        403
    );
}
