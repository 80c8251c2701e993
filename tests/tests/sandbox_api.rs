//! The sandbox API server on its own (no pods run): real clients (kube-rs, kubectl) against it.
#![forbid(unsafe_code)]

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use sandbox::api::{ApiOptions, ApiServer, Part, Rule};
use sandbox::harness::unique;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

async fn client_for(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig parses");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig loads");
    kube::Client::try_from(cfg).expect("client")
}

async fn admin(server: &ApiServer) -> kube::Client {
    client_for(server.admin_kubeconfig()).await
}

async fn token_client(server: &ApiServer, token: &str, dir: &Path) -> kube::Client {
    let p = dir.join(format!(
        "kc-{}",
        &token[..token.len().min(12)].replace(['.', '/'], "_")
    ));
    server.write_kubeconfig(&p, token, "default").unwrap();
    client_for(&p).await
}

async fn make_ns(c: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(c.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
    )
    .await
    .expect("create namespace");
}

fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "none", "command": ["sleep", "1"]}]},
    }))
    .unwrap()
}

fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn next_event<S, T>(s: &mut S, what: &str) -> T
where
    S: futures::Stream<Item = T> + Unpin,
{
    tokio::time::timeout(WAIT, s.next())
        .await
        .unwrap_or_else(|_| panic!("no watch event within {WAIT:?} while waiting for {what}"))
        .unwrap_or_else(|| panic!("watch stream ended while waiting for {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sees_added_modified_deleted_in_order() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("watch");
    make_ns(&c, &ns).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let list = pods.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.clone().unwrap();
    let mut stream = pods
        .watch(&WatchParams::default().labels("app=w"), &rv)
        .await
        .unwrap()
        .boxed();

    pods.create(&PostParams::default(), &pod("p1", json!({"app": "w"})))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &pod("other", json!({"app": "nope"})),
    )
    .await
    .unwrap();
    pods.patch(
        "p1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"x": "y"}}})),
    )
    .await
    .unwrap();
    pods.delete("p1", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    let mut last_rv = 0u64;
    for _ in 0..3 {
        let ev = next_event(&mut stream, "p1's events").await.unwrap();
        let (kind, p) = match ev {
            WatchEvent::Added(p) => ("ADDED", p),
            WatchEvent::Modified(p) => ("MODIFIED", p),
            WatchEvent::Deleted(p) => ("DELETED", p),
            other => panic!("unexpected event {other:?}"),
        };
        assert_eq!(
            p.metadata.name.as_deref(),
            Some("p1"),
            "the selector must filter out other pods"
        );
        let rv: u64 = p.metadata.resource_version.unwrap().parse().unwrap();
        assert!(rv > last_rv, "resourceVersions must increase");
        last_rv = rv;
        if kind == "MODIFIED" {
            assert_eq!(p.metadata.annotations.unwrap()["x"], "y");
        }
        seen.push(kind);
    }
    assert_eq!(seen, ["ADDED", "MODIFIED", "DELETED"]);

    // Replay: a watch from the list's resourceVersion sees the same history again.
    let mut replay = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let mut names = Vec::new();
    for _ in 0..4 {
        match next_event(&mut replay, "replayed events").await.unwrap() {
            WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p) => {
                names.push(p.metadata.name.unwrap())
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    assert_eq!(names, ["p1", "other", "p1", "p1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_survives_410_gone_by_relisting() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("gone");
    make_ns(&c, &ns).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    pods.create(&PostParams::default(), &pod("before", json!({})))
        .await
        .unwrap();

    // Short watch requests, so that the watcher re-watches from its last resourceVersion.
    let cfg = watcher::Config::default().timeout(1);
    let mut w = watcher(pods.clone(), cfg).boxed();
    loop {
        if let Ok(watcher::Event::InitDone) = next_event(&mut w, "the initial list").await {
            break;
        }
    }
    server.store().compact();
    pods.create(&PostParams::default(), &pod("after", json!({})))
        .await
        .unwrap();

    let mut saw_gone = false;
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(
            Instant::now() < deadline,
            "the watcher did not relist and see pod 'after' (410 seen: {saw_gone})"
        );
        match next_event(&mut w, "410 and relist").await {
            Err(watcher::Error::WatchError(e)) if e.code == 410 => saw_gone = true,
            Err(e) => panic!("unexpected watcher error {e:?}"),
            Ok(watcher::Event::InitApply(p))
                if saw_gone && p.metadata.name.as_deref() == Some("after") =>
            {
                break
            }
            Ok(watcher::Event::Apply(p)) if p.metadata.name.as_deref() == Some("after") => {
                panic!("the watch resumed across a compaction instead of failing with 410")
            }
            Ok(_) => {}
        }
    }

    // A raw watch from a compacted resourceVersion gets one ERROR event with a 410 Status.
    let mut raw = pods
        .watch(&WatchParams::default(), "1")
        .await
        .unwrap()
        .boxed();
    match next_event(&mut raw, "the 410 error").await.unwrap() {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        other => panic!("expected an ERROR event, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_through_ten_thousand_pods_and_many_watches_keep_up() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("scale");
    make_ns(&c, &ns).await;
    let store = server.store();
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    const N: usize = 10_000;
    const SHARDS: usize = 16;

    // Watches open before the pods are created: one sees every ADDED event, and one per shard
    // label value sees exactly its shard's (the server filters per watcher).
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut tasks = Vec::new();
    for shard in std::iter::once(None).chain((0..SHARDS).map(Some)) {
        let wp = match shard {
            Some(k) => WatchParams::default().labels(&format!("shard=s{k}")),
            None => WatchParams::default(),
        };
        let want = if shard.is_some() { N / SHARDS } else { N };
        let s = pods.watch(&wp, &rv).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let mut s = s.boxed();
            let mut n = 0;
            while n < want {
                match tokio::time::timeout(Duration::from_secs(60), s.try_next()).await {
                    Ok(Ok(Some(WatchEvent::Added(p)))) => {
                        if let Some(k) = shard {
                            assert_eq!(p.metadata.labels.unwrap()["shard"], format!("s{k}"));
                        }
                        n += 1
                    }
                    Ok(Ok(Some(WatchEvent::Bookmark(_)))) => {}
                    other => panic!(
                        "watch (shard {shard:?}) ended after {n} of {want} events: {other:?}"
                    ),
                }
            }
            n
        }));
    }
    let t0 = Instant::now();
    let template = serde_json::to_value(pod("x", json!({"app": "scale"}))).unwrap();
    for i in 0..N {
        let mut p = template.clone();
        p["metadata"]["name"] = json!(format!("pod-{i:05}"));
        p["metadata"]["labels"]["parity"] = json!(if i % 2 == 0 { "even" } else { "odd" });
        p["metadata"]["labels"]["shard"] = json!(format!("s{}", i % SHARDS));
        store
            .create(&sandbox::api::resources::PODS, &ns, p, false)
            .unwrap();
    }
    let created = t0.elapsed();
    for t in tasks {
        t.await.unwrap();
    }
    eprintln!(
        "created {N} pods in {created:?}; {} watches saw theirs after {:?}",
        SHARDS + 1,
        t0.elapsed()
    );

    // Page through with limit=500 while pods elsewhere change: every pod exactly once.
    let mut seen = std::collections::HashSet::new();
    let mut lp = ListParams::default().limit(500);
    let mut pages = 0;
    loop {
        let page = pods.list(&lp).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 500);
        for p in &page.items {
            assert!(
                seen.insert(p.metadata.name.clone().unwrap()),
                "{:?} listed twice",
                p.metadata.name
            );
        }
        if pages == 3 {
            // Changes in the middle of paging do not disturb the pages still to come.
            store
                .modify(
                    &sandbox::api::resources::PODS,
                    &ns,
                    "pod-09999",
                    Part::Main,
                    |v| v["metadata"]["labels"]["touched"] = json!("yes"),
                )
                .unwrap();
        }
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(seen.len(), N);
    assert_eq!(pages, N / 500);

    // A selector over all of them.
    let odd = pods
        .list(&ListParams::default().labels("parity=odd"))
        .await
        .unwrap();
    assert_eq!(odd.items.len(), N / 2);

    // A continue token from before a compaction is refused with 410.
    let first = pods.list(&ListParams::default().limit(500)).await.unwrap();
    store.compact();
    let e = api_err(
        pods.list(
            &ListParams::default()
                .limit(500)
                .continue_token(first.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 410);
    assert!(
        created < Duration::from_secs(60),
        "creating {N} pods took {created:?}"
    );
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_lists_and_bookmarks() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    server.set_bookmark_interval(Duration::from_millis(100));
    let c = admin(&server).await;
    let ns = unique("stream");
    make_ns(&c, &ns).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    for n in ["a", "b"] {
        pods.create(&PostParams::default(), &pod(n, json!({})))
            .await
            .unwrap();
    }
    // sendInitialEvents: ADDED for what exists, then the initial-events-end bookmark.
    let mut w = watcher(pods.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut initial = Vec::new();
    loop {
        match next_event(&mut w, "the streamed initial list")
            .await
            .unwrap()
        {
            watcher::Event::Init => {}
            watcher::Event::InitApply(p) => initial.push(p.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    initial.sort();
    assert_eq!(initial, ["a", "b"]);
    pods.create(&PostParams::default(), &pod("c", json!({})))
        .await
        .unwrap();
    match next_event(&mut w, "pod c").await.unwrap() {
        watcher::Event::Apply(p) => assert_eq!(p.metadata.name.as_deref(), Some("c")),
        other => panic!("unexpected {other:?}"),
    }
    // Periodic bookmarks carry the latest resourceVersion.
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut raw = pods
        .watch(&WatchParams::default().labels("none=here"), &rv)
        .await
        .unwrap()
        .boxed();
    pods.create(&PostParams::default(), &pod("d", json!({})))
        .await
        .unwrap();
    let d_rv: u64 = pods
        .get("d")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
        .parse()
        .unwrap();
    loop {
        match next_event(&mut raw, "a bookmark").await.unwrap() {
            WatchEvent::Bookmark(b)
                if b.metadata.resource_version.parse::<u64>().unwrap() >= d_rv =>
            {
                break
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("the selector matches nothing, so only bookmarks come: {other:?}"),
        }
    }
}
