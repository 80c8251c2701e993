//! What a controller needs of a cluster, through the sandbox API server with real clients
//! (kube-rs, kubectl): a CustomResourceDefinition registered and its resource served (schema,
//! status subresource, discovery, printer columns, `kubectl wait`), garbage collection of what
//! a custom object owns, Events through both APIs (`kubectl describe`), Leases with
//! conflicts, and Deployments keeping their pods.
#![forbid(unsafe_code)]

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace, ObjectReference, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::GroupVersionKind;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::wait::{await_condition, conditions};
use sandbox::api::{ApiOptions, ApiServer, Part};
use sandbox::harness::unique;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

async fn admin(server: &ApiServer) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(server.admin_kubeconfig()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

async fn make_ns(c: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(c.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &ns).await.unwrap();
}

/// A CRD shaped like mpi-operator's MPIJob (cut down): typed spec, free-form template,
/// status subresource, printer columns.
fn job_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "trials.example.org"},
        "spec": {
            "group": "example.org",
            "scope": "Namespaced",
            "names": {"plural": "trials", "singular": "trial", "kind": "Trial", "shortNames": ["tr"]},
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Workers", "type": "integer", "jsonPath": ".spec.workers"},
                    {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "required": ["workers"], "properties": {
                            "workers": {"type": "integer", "minimum": 1},
                            "suspend": {"type": "boolean", "default": false},
                            "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        }},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                }},
            }],
        },
    })
}

fn api_code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// kube-rs: the CRD becomes Established, discovery finds its kind, objects are created,
/// validated, patched (merge, JSON, apply; status apart), watched, and deleting one in the
/// foreground takes what it owns with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_with_kube_rs() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("crd");
    make_ns(&c, &ns).await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(job_crd()).unwrap(),
    )
    .await
    .unwrap();
    tokio::time::timeout(
        WAIT,
        await_condition(
            crds.clone(),
            "trials.example.org",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("Established in time")
    .unwrap();
    let gvk = GroupVersionKind::gvk("example.org", "v1beta1", "Trial");
    let (ar, caps) = kube::discovery::pinned_kind(&c, &gvk)
        .await
        .expect("discovered");
    assert_eq!(ar.plural, "trials");
    assert!(caps.subresources.iter().any(|(r, _)| r.plural == "status"));
    let trials: Api<DynamicObject> = Api::namespaced_with(c.clone(), &ns, &ar);
    let mut watch = trials
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let t: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.org/v1beta1", "kind": "Trial",
        "metadata": {"name": "t1"}, "spec": {"workers": 2, "extra": "pruned", "template": {"any": {"thing": 1}}},
    }))
    .unwrap();
    let t = trials.create(&PostParams::default(), &t).await.unwrap();
    assert_eq!(t.data["spec"]["suspend"], false, "defaulted");
    assert!(t.data["spec"].get("extra").is_none(), "pruned");
    assert_eq!(t.data["spec"]["template"]["any"]["thing"], 1);
    match tokio::time::timeout(WAIT, watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("t1")),
        other => panic!("{other:?}"),
    }
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.org/v1beta1", "kind": "Trial", "metadata": {"name": "bad"}, "spec": {"workers": 0},
    }))
    .unwrap();
    assert_eq!(
        api_code(
            trials
                .create(&PostParams::default(), &bad)
                .await
                .unwrap_err()
        ),
        422
    );

    // Status through its subresource only; generation counts spec changes.
    let pp = PatchParams::default();
    let s = json!({"status": {"conditions": [{"type": "Created", "status": "True"}]}});
    let o = trials
        .patch_status("t1", &pp, &Patch::Merge(&s))
        .await
        .unwrap();
    assert_eq!(o.data["status"]["conditions"][0]["type"], "Created");
    assert_eq!(o.metadata.generation, Some(1));
    let o = trials
        .patch(
            "t1",
            &pp,
            &Patch::Merge(json!({"spec": {"workers": 3}, "status": {"x": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(
        (o.metadata.generation, o.data["status"].get("x")),
        (Some(2), None)
    );
    let o = trials
        .patch(
            "t1",
            &pp,
            &Patch::<Value>::Json(
                serde_json::from_value(
                    json!([{"op": "replace", "path": "/spec/workers", "value": 4}]),
                )
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(o.data["spec"]["workers"], 4);
    let applied = json!({"apiVersion": "example.org/v1beta1", "kind": "Trial", "metadata": {"name": "t2"}, "spec": {"workers": 1}});
    let o = trials
        .patch(
            "t2",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&applied),
        )
        .await
        .unwrap();
    assert_eq!(o.data["spec"]["workers"], 1, "apply creates");
    // Stale resourceVersion: 409.
    let mut stale = trials.get("t1").await.unwrap();
    trials
        .patch("t1", &pp, &Patch::Merge(json!({"spec": {"workers": 5}})))
        .await
        .unwrap();
    stale.data["spec"]["workers"] = json!(6);
    assert_eq!(
        api_code(
            trials
                .replace("t1", &PostParams::default(), &stale)
                .await
                .unwrap_err()
        ),
        409
    );

    // What the object owns goes with it (Foreground: the owner waits for it).
    let owner = trials.get("t1").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &ns);
    let cm = json!({"metadata": {"name": "t1-config", "ownerReferences": [{
        "apiVersion": "example.org/v1beta1", "kind": "Trial", "name": "t1",
        "uid": owner.metadata.uid, "controller": true, "blockOwnerDeletion": true}]}, "data": {"a": "b"}});
    cms.create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
        .await
        .unwrap();
    trials
        .delete("t1", &DeleteParams::foreground())
        .await
        .unwrap();
    assert_eq!(api_code(cms.get("t1-config").await.unwrap_err()), 404);
    assert_eq!(api_code(trials.get("t1").await.unwrap_err()), 404);

    // The CRD deleted: its objects and its resource go.
    crds.delete("trials.example.org", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(api_code(trials.get("t2").await.unwrap_err()), 404);
}

/// kube-runtime's Recorder (events.k8s.io/v1) and a core/v1 client see the same events; a
/// repeated event is one object with a series. Leases: create, conflicts on a stale
/// resourceVersion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_leases_with_kube_rs() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("ev");
    make_ns(&c, &ns).await;
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some("subject".into()),
        namespace: Some(ns.clone()),
        uid: Some("uid-1".into()),
        ..Default::default()
    };
    let recorder = Recorder::new(
        c.clone(),
        Reporter {
            controller: "sandbox-test".into(),
            instance: Some("i-0".into()),
        },
    );
    let ev = Event {
        type_: EventType::Warning,
        reason: "Failed".into(),
        note: Some("rank 3 exited with 7".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let core: Api<CoreEvent> = Api::namespaced(c.clone(), &ns);
    let lp =
        ListParams::default().fields("involvedObject.name=subject,involvedObject.kind=ConfigMap");
    let got = core.list(&lp).await.unwrap().items;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].message.as_deref(), Some("rank 3 exited with 7"));
    assert_eq!(got[0].reporting_component.as_deref(), Some("sandbox-test"));
    assert_eq!(got[0].series.as_ref().and_then(|s| s.count), Some(2));
    let v1: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.clone(), &ns);
    let got = v1
        .list(&ListParams::default().fields("regarding.name=subject"))
        .await
        .unwrap()
        .items;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].note.as_deref(), Some("rank 3 exited with 7"));
    assert!(v1
        .list(&ListParams::default().fields("regarding.name=other"))
        .await
        .unwrap()
        .items
        .is_empty());

    let leases: Api<Lease> = Api::namespaced(c.clone(), &ns);
    let l = json!({"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}});
    let l = leases
        .create(&PostParams::default(), &serde_json::from_value(l).unwrap())
        .await
        .unwrap();
    let mut mine = l.clone();
    mine.spec.as_mut().unwrap().holder_identity = Some("a".into());
    mine.spec.as_mut().unwrap().lease_transitions = Some(1);
    leases
        .replace("leader", &PostParams::default(), &mine)
        .await
        .unwrap();
    let mut theirs = l;
    theirs.spec.as_mut().unwrap().holder_identity = Some("b".into());
    assert_eq!(
        api_code(
            leases
                .replace("leader", &PostParams::default(), &theirs)
                .await
                .unwrap_err()
        ),
        409
    );
    assert_eq!(
        leases
            .get("leader")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("a")
    );
}

/// Server-side apply's field ownership: a second manager applying a different holder to a
/// Lease gets 409 (forced, it takes the field); and kube-lease-manager's leader election
/// among three candidates: one leader at a time, another once it steps down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_through_a_lease() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("lease");
    make_ns(&c, &ns).await;
    let leases: Api<Lease> = Api::namespaced(c.clone(), &ns);
    let apply = |who: &str| json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "ssa"}, "spec": {"holderIdentity": who}});
    leases
        .patch("ssa", &PatchParams::apply("a"), &Patch::Apply(apply("a")))
        .await
        .unwrap();
    let e = leases
        .patch("ssa", &PatchParams::apply("b"), &Patch::Apply(apply("b")))
        .await
        .unwrap_err();
    match e {
        kube::Error::Api(s) => assert!(
            s.code == 409
                && s.message
                    .contains("conflict with \"a\": .spec.holderIdentity"),
            "{s:?}"
        ),
        other => panic!("{other:?}"),
    }
    let l = leases
        .patch(
            "ssa",
            &PatchParams::apply("b").force(),
            &Patch::Apply(apply("b")),
        )
        .await
        .unwrap();
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("b"));
    let fields = l.metadata.managed_fields.unwrap_or_default();
    assert_eq!(
        fields
            .iter()
            .map(|f| f.manager.clone().unwrap_or_default())
            .collect::<Vec<_>>(),
        ["b"]
    );

    let mut candidates = Vec::new();
    for id in ["a", "b", "c"] {
        let m = kube_lease_manager::LeaseManagerBuilder::new(c.clone(), "leader")
            .with_namespace(&ns)
            .with_identity(id)
            .with_duration(4)
            .with_grace(1)
            .build()
            .await
            .unwrap();
        let (rx, task) = m.watch().await;
        candidates.push((id, rx, task));
    }
    type Candidate = (
        &'static str,
        tokio::sync::watch::Receiver<bool>,
        tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
    );
    let leaders = |cs: &Vec<Candidate>| -> Vec<String> {
        cs.iter()
            .filter(|(_, rx, _)| *rx.borrow())
            .map(|(id, _, _)| id.to_string())
            .collect()
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    let first = loop {
        let l = leaders(&candidates);
        assert!(l.len() <= 1, "two leaders at once: {l:?}");
        if l.len() == 1 {
            break l[0].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for _ in 0..40 {
        assert_eq!(
            leaders(&candidates),
            std::slice::from_ref(&first),
            "one leader, and it stays"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        leases
            .get("leader")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity,
        Some(first.clone())
    );
    // The leader steps down (its receiver dropped: it releases the Lease); another takes over.
    let i = candidates
        .iter()
        .position(|(id, _, _)| *id == first)
        .unwrap();
    let (_, rx, task) = candidates.remove(i);
    drop(rx);
    tokio::time::timeout(WAIT, task)
        .await
        .expect("the leader releases")
        .unwrap()
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let l = leaders(&candidates);
        assert!(l.len() <= 1, "two leaders at once: {l:?}");
        if l.len() == 1 {
            assert_ne!(l[0], first);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new leader within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (_, _, task) in candidates {
        task.abort();
    }
}

async fn kubectl(
    server: &ApiServer,
    cache: &Path,
    ns: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    use tokio::io::AsyncWriteExt;
    let exe =
        sandbox::harness::kubectl::find().expect("a kubectl (prrte-config/setup.sh installs one)");
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("--kubeconfig")
        .arg(server.admin_kubeconfig())
        .arg("--cache-dir")
        .arg(cache)
        .args(["-n", ns])
        .args(args)
        .kill_on_drop(true)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or("").as_bytes())
        .await
        .unwrap();
    drop(input);
    let out = child.wait_with_output().await.unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// kubectl: apply a CRD and wait for it, apply and get an object (short name, printer
/// columns), patch its status and `kubectl wait --for=condition=`, describe it with its
/// events, delete it; a Deployment applied, rolled out and its deleted pod replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_events_and_deployments_with_kubectl() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let store = server.store();
    let controllers = sandbox::cluster::controllers::spawn(store.clone());
    let c = admin(&server).await;
    let ns = unique("kc");
    make_ns(&c, &ns).await;
    let cache = tempfile::tempdir().unwrap();
    let kc = |args: &'static [&'static str]| kubectl(&server, cache.path(), &ns, args, None);
    let crd_yaml = serde_yaml::to_string(&job_crd()).unwrap();
    let (ok, _, err) = kubectl(
        &server,
        cache.path(),
        &ns,
        &["apply", "-f", "-"],
        Some(&crd_yaml),
    )
    .await;
    assert!(ok, "apply CRD: {err}");
    let (ok, _, err) = kc(&[
        "wait",
        "--for=condition=Established",
        "crd/trials.example.org",
        "--timeout=20s",
    ])
    .await;
    assert!(ok, "wait Established: {err}");
    let trial = "apiVersion: example.org/v1beta1\nkind: Trial\nmetadata:\n  name: pi\nspec:\n  workers: 2\n";
    let (ok, out, err) = kubectl(
        &server,
        cache.path(),
        &ns,
        &["apply", "-f", "-"],
        Some(trial),
    )
    .await;
    assert!(
        ok && out.contains("trial.example.org/pi created"),
        "{out} {err}"
    );
    let (ok, out, err) = kubectl(
        &server,
        cache.path(),
        &ns,
        &["apply", "-f", "-"],
        Some(&trial.replace("workers: 2", "workers: 3")),
    )
    .await;
    assert!(ok && out.contains("configured"), "{out} {err}");
    let (ok, out, err) = kc(&["get", "tr"]).await;
    assert!(ok, "{err}");
    let head: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(head, ["NAME", "WORKERS", "STATE"], "{out}");
    assert!(
        out.lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().collect::<Vec<_>>() == ["pi", "3"]),
        "{out}"
    );
    let bad = "apiVersion: example.org/v1beta1\nkind: Trial\nmetadata:\n  name: bad\nspec:\n  workers: many\n";
    let (ok, _, err) = kubectl(&server, cache.path(), &ns, &["apply", "-f", "-"], Some(bad)).await;
    assert!(!ok && err.contains("spec.workers"), "{err}");

    // The status, as a controller writes it; kubectl wait reads the condition.
    let waiter = kubectl(
        &server,
        cache.path(),
        &ns,
        &[
            "wait",
            "--for=condition=Succeeded",
            "trial/pi",
            "--timeout=20s",
        ],
        None,
    );
    let gvk = GroupVersionKind::gvk("example.org", "v1beta1", "Trial");
    let (ar, _) = kube::discovery::pinned_kind(&c, &gvk).await.unwrap();
    let trials: Api<DynamicObject> = Api::namespaced_with(c.clone(), &ns, &ar);
    let writer = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let s = json!({"status": {"conditions": [{"type": "Created", "status": "True"}, {"type": "Succeeded", "status": "True", "reason": "Done"}]}});
        trials
            .patch_status("pi", &PatchParams::default(), &Patch::Merge(&s))
            .await
    };
    let ((ok, out, err), written) = tokio::join!(waiter, writer);
    written.expect("status written");
    assert!(ok && out.contains("condition met"), "{out} {err}");
    let (_, out, _) = kc(&["get", "trial", "pi", "--no-headers"]).await;
    assert!(out.contains("Succeeded"), "{out}");

    // Events recorded through events.k8s.io show in describe.
    let t = store
        .get(
            store.lookup("example.org", "v1beta1", "trials").unwrap(),
            &ns,
            "pi",
        )
        .unwrap();
    let reference = ObjectReference {
        api_version: Some("example.org/v1beta1".into()),
        kind: Some("Trial".into()),
        name: Some("pi".into()),
        namespace: Some(ns.clone()),
        uid: t["metadata"]["uid"].as_str().map(String::from),
        ..Default::default()
    };
    let recorder = Recorder::new(
        c.clone(),
        Reporter {
            controller: "trial-controller".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "WorkersReady".into(),
        note: Some("2 of 2 workers ready".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    let (ok, out, err) = kc(&["describe", "trial", "pi"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("WorkersReady")
            && out.contains("2 of 2 workers ready")
            && out.contains("trial-controller"),
        "{out}"
    );
    let (ok, _, err) = kc(&["delete", "trial", "pi"]).await;
    assert!(ok, "{err}");

    // A Deployment: its pods marked running and ready as a kubelet would.
    let mark_ready = {
        let store = store.clone();
        let ns = ns.clone();
        tokio::spawn(async move {
            loop {
                for p in store
                    .list(
                        &sandbox::api::resources::PODS,
                        Some(&ns),
                        &Default::default(),
                    )
                    .unwrap()
                    .items
                {
                    if p["status"]["phase"] == "Pending" {
                        let _ = store.modify(
                            &sandbox::api::resources::PODS,
                            &ns,
                            p["metadata"]["name"].as_str().unwrap(),
                            Part::Status,
                            |v| {
                                v["status"]["phase"] = json!("Running");
                                v["status"]["conditions"] =
                                    json!([{"type": "Ready", "status": "True"}]);
                            },
                        );
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: c\n        image: none\n";
    let (ok, _, err) = kubectl(
        &server,
        cache.path(),
        &ns,
        &["apply", "-f", "-"],
        Some(deploy),
    )
    .await;
    assert!(ok, "{err}");
    let (ok, out, err) = kc(&["rollout", "status", "deployment/web", "--timeout=20s"]).await;
    assert!(ok && out.contains("successfully rolled out"), "{out} {err}");
    let (ok, _, err) = kc(&[
        "wait",
        "--for=condition=Available",
        "deployment/web",
        "--timeout=20s",
    ])
    .await;
    assert!(ok, "{err}");
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let before = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items;
    assert_eq!(before.len(), 2);
    let victim = before[0].metadata.name.clone().unwrap();
    pods.delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    // The Deployment's status follows its pods a moment later (as in Kubernetes): read just
    // after the replacement appeared it may still show the count from before the delete, so
    // wait for the replacement to be ready, then for the status to say so.
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &ns);
    let mut last = String::new();
    let replaced = tokio::time::timeout(WAIT, async {
        loop {
            let now = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .unwrap()
                .items;
            let replaced = now.len() == 2
                && now.iter().all(|p| {
                    p.metadata.name.as_deref() != Some(victim.as_str())
                        && p.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                });
            if replaced {
                let d = deployments.get("web").await.unwrap();
                let (ok, out, err) = kc(&["get", "deploy", "web", "--no-headers"]).await;
                last = format!("{out} {err}");
                if d.status.and_then(|s| s.available_replicas) == Some(2)
                    && ok
                    && out.split_whitespace().nth(1) == Some("2/2")
                {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        replaced.is_ok(),
        "the deleted pod is not replaced within {WAIT:?}; kubectl get deploy: {last}"
    );
    let (ok, _, err) = kc(&["delete", "deployment", "web"]).await;
    assert!(ok, "{err}");
    assert!(pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .iter()
        .all(|p| p.metadata.deletion_timestamp.is_some()));
    mark_ready.abort();
    controllers.abort();
}
