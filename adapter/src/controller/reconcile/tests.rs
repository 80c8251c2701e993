//! One reconcile against an in-memory API (kube's client over a fake service): what it creates,
//! that a second reconcile writes nothing, that the Secret's key goes nowhere but the Secret,
//! and the status and events of a job's end and of a refused MPIJob.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use kube::Client;
use serde_json::{json, Value};

use crate::controller::context::Context;
use crate::controller::desired::{Settings, SharedBecause};
use crate::controller::metrics::Metrics;
use crate::controller::reconcile::reconcile;
use crate::manifest::mpijob::stored::StoredMpiJob;
use crate::manifest::INJECT_IMAGE;

/// The objects by path, every request (method, path, body), and the controller's pod cache
/// (what its pod watch would fill).
#[derive(Default)]
struct Store {
    objects: BTreeMap<String, Value>,
    requests: Vec<(String, String, String)>,
    next_uid: u32,
    pods: Option<Writer<Pod>>,
    /// A write the API server refuses: the path it ends with, and the code and message.
    refuse: Option<(String, u16, String)>,
}

type Shared = Arc<Mutex<Store>>;

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": reason})
}

/// Answers one request the way an API server would, for what the controller asks.
fn answer(store: &Shared, method: &str, path: &str, query: &str, body: &str) -> (u16, Value) {
    let mut s = store.lock().unwrap();
    s.requests.push((method.into(), path.into(), body.into()));
    let path = path.trim_end_matches('/');
    match method {
        "GET" => match s.objects.get(path) {
            Some(o) => (200, o.clone()),
            None => (404, status(404, "NotFound")),
        },
        "POST" => {
            let mut o: Value = serde_json::from_str(body).unwrap();
            let name = o["metadata"]["name"]
                .as_str()
                .unwrap_or("generated")
                .to_string();
            let at = format!("{path}/{name}");
            if s.objects.contains_key(&at) {
                return (409, status(409, "AlreadyExists"));
            }
            s.next_uid += 1;
            o["metadata"]["uid"] = json!(format!("uid-{}", s.next_uid));
            s.objects.insert(at, o.clone());
            (201, o)
        }
        "PATCH"
            if s.refuse
                .as_ref()
                .is_some_and(|(p, _, _)| path.ends_with(p.as_str())) =>
        {
            let (_, code, message) = s.refuse.clone().unwrap();
            let mut st = status(code, "Invalid");
            st["message"] = json!(message);
            (code, st)
        }
        "PATCH" => {
            let target = path.trim_end_matches("/status");
            let patch: Value = serde_json::from_str(body).unwrap();
            // Every write is an apply of the controller's field manager; the status' is forced.
            let apply = query.contains("fieldManager=prrte-k8s-controller");
            let forced = query.contains("force=true");
            let event = path.contains("/events/");
            if !event && (!apply || (path.ends_with("/status") && !forced)) {
                return (400, status(400, "NotAnApplyOfTheController"));
            }
            match s.objects.get_mut(target) {
                // The status is the controller's alone: its apply is the whole status (a
                // field it leaves out is deleted, as server-side apply does).
                Some(o) if apply && path.ends_with("/status") => {
                    o["status"] = patch["status"].clone();
                    (200, o.clone())
                }
                Some(o) => {
                    json_patch::merge(o, &patch);
                    (200, o.clone())
                }
                // An apply makes the object it names.
                None if apply && target == path => {
                    let mut o = patch;
                    s.next_uid += 1;
                    o["metadata"]["uid"] = json!(format!("uid-{}", s.next_uid));
                    s.objects.insert(path.to_string(), o.clone());
                    (201, o)
                }
                None => (404, status(404, "NotFound")),
            }
        }
        "DELETE" => match s.objects.remove(path) {
            Some(o) => (200, o),
            None => (404, status(404, "NotFound")),
        },
        _ => (405, status(405, "MethodNotAllowed")),
    }
}

fn client(store: Shared) -> Client {
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let store = store.clone();
        async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let query = req.uri().query().unwrap_or("").to_string();
            let bytes = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let body = String::from_utf8_lossy(&bytes).to_string();
            let (code, v) = answer(&store, &method, &path, &query, &body);
            let resp = http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(v.to_string())))
                .unwrap();
            Ok::<_, Infallible>(resp)
        }
    });
    Client::new(service, "default")
}

const MPIJOB: &str = "/apis/kubeflow.org/v2beta1/namespaces/team/mpijobs/pi";
const JOB: &str = "/apis/batch/v1/namespaces/team/jobs/pi";
const SECRET: &str = "/api/v1/namespaces/team/secrets/pi-prrte";

fn mpijob(store: &Shared, edit: impl FnOnce(&mut Value)) {
    let mut v: Value =
        serde_yaml::from_str(include_str!("../../manifest/mpijob/examples/pi.yaml")).unwrap();
    v["metadata"]["namespace"] = json!("team");
    v["metadata"]["uid"] = json!("mpijob-uid");
    v["metadata"]["creationTimestamp"] = json!("2026-12-03T12:00:00Z");
    v["spec"]["runPolicy"]["managedBy"] = json!("prrte-k8s.io/controller");
    edit(&mut v);
    store.lock().unwrap().objects.insert(MPIJOB.into(), v);
}

fn context(store: &Shared) -> Arc<Context> {
    let client = client(store.clone());
    let (pods, writer) = reflector::store();
    store.lock().unwrap().pods = Some(writer);
    Arc::new(Context {
        client: client.clone(),
        settings: Settings {
            inject_image: INJECT_IMAGE.into(),
            ..Default::default()
        },
        recorder: Recorder::new(
            client,
            Reporter {
                controller: "test".into(),
                instance: Some("t".into()),
            },
        ),
        metrics: Arc::new(Metrics::new()),
        pods,
        posted: Default::default(),
        failures: Default::default(),
    })
}

/// Reconciles the MPIJob once, its pods' cache holding the pods the API holds (as a relist of
/// the controller's pod watch would); a reconcile never lists pods itself.
async fn reconcile_now(store: &Shared, ctx: &Arc<Context>) {
    let obj: StoredMpiJob = {
        let mut s = store.lock().unwrap();
        let pods: Vec<Pod> = s
            .objects
            .iter()
            .filter(|(k, _)| k.contains("/pods/"))
            .map(|(_, v)| serde_json::from_value(v.clone()).unwrap())
            .collect();
        let w = s.pods.as_mut().unwrap();
        w.apply_watcher_event(&watcher::Event::Init);
        for p in pods {
            w.apply_watcher_event(&watcher::Event::InitApply(p));
        }
        w.apply_watcher_event(&watcher::Event::InitDone);
        serde_json::from_value(s.objects[MPIJOB].clone()).unwrap()
    };
    reconcile(Arc::new(obj), ctx.clone()).await.unwrap();
    let s = store.lock().unwrap();
    assert!(
        !s.requests.iter().any(|(_, p, _)| p.ends_with("/pods")),
        "pods listed live"
    );
}

fn writes(store: &Shared) -> Vec<String> {
    store
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|(m, _, _)| m != "GET")
        .map(|(m, p, _)| format!("{m} {p}"))
        .collect()
}

fn event_reasons(store: &Shared) -> Vec<String> {
    let s = store.lock().unwrap();
    s.objects
        .iter()
        .filter(|(k, _)| k.contains("/events/"))
        .map(|(_, v)| v["reason"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test]
async fn makes_the_objects_once_owned_by_the_mpijob_and_keeps_the_key_to_the_secret() {
    let store: Shared = Arc::default();
    mpijob(&store, |_| {});
    let ctx = context(&store);
    reconcile_now(&store, &ctx).await;
    let made = writes(&store);
    for kind in [
        "serviceaccounts/",
        "roles/",
        "rolebindings/",
        "secrets",
        "networkpolicies",
        "jobs",
    ] {
        assert!(
            made.iter()
                .any(|w| w.starts_with("PATCH") && w.contains(kind.trim_end_matches('/'))),
            "{kind}: {made:?}"
        );
    }
    assert!(
        !made
            .iter()
            .any(|w| w.starts_with("POST") && !w.contains("/events")),
        "every object is applied: {made:?}"
    );
    assert!(
        made.iter().any(|w| w == &format!("PATCH {MPIJOB}/status")),
        "{made:?}"
    );
    {
        let s = store.lock().unwrap();
        let owned = s
            .objects
            .iter()
            .filter(|(k, _)| !k.contains("/events/") && k.as_str() != MPIJOB);
        let mut n = 0;
        for (k, o) in owned {
            n += 1;
            let r = &o["metadata"]["ownerReferences"][0];
            assert_eq!(
                (&r["uid"], &r["controller"], &r["kind"]),
                (&json!("mpijob-uid"), &json!(true), &json!("MPIJob")),
                "{k}"
            );
        }
        assert_eq!(n, 6);
        // The key: in the Secret's creation only.
        use base64::Engine;
        let data = s.objects[SECRET]["data"]["key"].as_str().unwrap();
        let key = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .unwrap(),
        )
        .unwrap();
        let with_key: Vec<&String> = s
            .requests
            .iter()
            .filter(|(_, _, b)| b.contains(&key) || b.contains(data))
            .map(|(_, p, _)| p)
            .collect();
        assert_eq!(with_key, [&SECRET.to_string()]);
        let st = &s.objects[MPIJOB]["status"];
        assert_eq!(st["conditions"][0]["type"], "Created");
        assert!(st["startTime"].is_string());
    }
    assert_eq!(event_reasons(&store), ["MPIJobCreated"]);

    // Again, as after a restart: nothing is written.
    store.lock().unwrap().requests.clear();
    reconcile_now(&store, &ctx).await;
    assert_eq!(writes(&store), Vec::<String>::new());
}

/// Where the cluster serves no JobSet (`--launcher-pod auto`), an MPIJob whose Launcher's
/// template differs from the Worker's in what pod 0 does not get: one warning event when its
/// Job is made, naming the fields and the remedy; reconciled again, nothing more is written.
#[tokio::test]
async fn a_launcher_template_pod_0_does_not_get_is_warned_of_once() {
    let store: Shared = Arc::default();
    mpijob(&store, |v| {
        let l = &mut v["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"];
        l["containers"][0]["image"] = json!("example/launcher:cpu");
        l["nodeSelector"] = json!({"pool": "cpu"});
    });
    let mut ctx = context(&store);
    Arc::get_mut(&mut ctx).unwrap().settings.shared_because = SharedBecause::NoJobSet;
    reconcile_now(&store, &ctx).await;
    let notes = event_notes(&store, "LauncherTemplateIgnored");
    assert_eq!(notes.len(), 1, "{:?}", event_reasons(&store));
    for part in [
        "spec.containers[0].image",
        "spec.nodeSelector",
        "install JobSet and restart the controller",
        "--launcher-pod jobset",
    ] {
        assert!(notes[0].contains(part), "no {part:?} in {}", notes[0]);
    }
    {
        let s = store.lock().unwrap();
        let ev = s
            .objects
            .iter()
            .find(|(k, v)| k.contains("/events/") && v["reason"] == "LauncherTemplateIgnored")
            .map(|(_, v)| v.clone())
            .unwrap();
        assert_eq!(ev["type"], "Warning");
    }
    store.lock().unwrap().requests.clear();
    reconcile_now(&store, &ctx).await;
    assert_eq!(writes(&store), Vec::<String>::new());
}

#[tokio::test]
async fn the_jobs_end_and_its_pods_make_the_status() {
    let store: Shared = Arc::default();
    mpijob(&store, |_| {});
    let ctx = context(&store);
    reconcile_now(&store, &ctx).await;
    {
        let mut s = store.lock().unwrap();
        let job_uid = s.objects[JOB]["metadata"]["uid"].clone();
        for i in 0..3 {
            let phase = if i == 0 { "Succeeded" } else { "Failed" };
            s.objects.insert(
                format!("/api/v1/namespaces/team/pods/pi-{i}"),
                json!({"metadata": {"name": format!("pi-{i}"), "namespace": "team",
                    "labels": {"prrte-k8s.io/job": "pi", "batch.kubernetes.io/job-completion-index": i.to_string()},
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": job_uid, "controller": true}]},
                    "status": {"phase": phase}}),
            );
        }
        let job = s.objects.get_mut(JOB).unwrap();
        job["status"] = json!({"conditions": [{"type": "Complete", "status": "True"}], "completionTime": "2026-12-03T12:01:00Z"});
    }
    reconcile_now(&store, &ctx).await;
    let st = store.lock().unwrap().objects[MPIJOB]["status"].clone();
    let succeeded = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Succeeded")
        .unwrap()
        .clone();
    assert_eq!(succeeded["status"], "True");
    assert_eq!(st["completionTime"], "2026-12-03T12:01:00Z");
    // mpi-operator's counts after the end: the launcher succeeded, the workers not counted;
    // a zero count left out, as mpi-operator leaves it out.
    assert_eq!(
        st["replicaStatuses"]["Launcher"],
        json!({"succeeded": 1,
               "selector": "prrte-k8s.io/job=pi,batch.kubernetes.io/job-completion-index=0"})
    );
    for count in ["active", "succeeded", "failed"] {
        assert!(st["replicaStatuses"]["Worker"].get(count).is_none(), "{st}");
    }
    assert!(event_reasons(&store).contains(&"MPIJobSucceeded".to_string()));
    assert!(ctx
        .metrics
        .text()
        .contains("prrte_k8s_controller_mpijobs{phase=\"Succeeded\"} 1"));
    // The Job's TTL deletes it: nothing is made again.
    store.lock().unwrap().objects.remove(JOB);
    store.lock().unwrap().requests.clear();
    reconcile_now(&store, &ctx).await;
    assert_eq!(writes(&store), Vec::<String>::new());
}

/// After the end: with `cleanPodPolicy: All` the workers are deleted, finished ones too, the
/// launcher's pod kept; counts written wrong are corrected; the conditions stay.
#[tokio::test]
async fn after_the_end_clean_pod_policy_all_deletes_the_workers() {
    for policy in ["All", "Running"] {
        let store: Shared = Arc::default();
        mpijob(&store, |v| {
            v["spec"]["runPolicy"]["cleanPodPolicy"] = json!(policy)
        });
        let ctx = context(&store);
        reconcile_now(&store, &ctx).await;
        {
            let mut s = store.lock().unwrap();
            let job_uid = s.objects[JOB]["metadata"]["uid"].clone();
            for i in 0..3 {
                s.objects.insert(
                    format!("/api/v1/namespaces/team/pods/pi-{i}"),
                    json!({"metadata": {"name": format!("pi-{i}"), "namespace": "team",
                        "labels": {"prrte-k8s.io/job": "pi", "batch.kubernetes.io/job-completion-index": i.to_string()},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": job_uid, "controller": true}]},
                        "status": {"phase": "Succeeded"}}),
                );
            }
            let job = s.objects.get_mut(JOB).unwrap();
            job["status"] = json!({"conditions": [{"type": "Complete", "status": "True"}], "completionTime": "2026-12-03T12:01:00Z"});
        }
        reconcile_now(&store, &ctx).await;
        let done = store.lock().unwrap().objects[MPIJOB]["status"].clone();
        // Written wrong (as an older controller left it), then reconciled after the end.
        store.lock().unwrap().objects.get_mut(MPIJOB).unwrap()["status"]["replicaStatuses"]
            ["Worker"]["active"] = json!(1);
        store.lock().unwrap().requests.clear();
        reconcile_now(&store, &ctx).await;
        let mut deleted: Vec<String> = writes(&store)
            .into_iter()
            .filter(|w| w.starts_with("DELETE"))
            .collect();
        deleted.sort();
        if policy == "All" {
            assert_eq!(
                deleted,
                [
                    "DELETE /api/v1/namespaces/team/pods/pi-1",
                    "DELETE /api/v1/namespaces/team/pods/pi-2"
                ]
            );
        } else {
            assert!(deleted.is_empty(), "{deleted:?}");
        }
        let st = store.lock().unwrap().objects[MPIJOB]["status"].clone();
        assert!(
            st["replicaStatuses"]["Worker"].get("active").is_none(),
            "{policy}: {st}"
        );
        assert_eq!(st["conditions"], done["conditions"]);
        assert_eq!(st["completionTime"], done["completionTime"]);
    }
}

#[tokio::test]
async fn a_refused_mpijob_fails_with_the_reason_and_nothing_is_made() {
    let store: Shared = Arc::default();
    mpijob(&store, |v| v["spec"]["mpiImplementation"] = json!("LAM"));
    let ctx = context(&store);
    reconcile_now(&store, &ctx).await;
    assert_eq!(
        writes(&store)
            .iter()
            .filter(|w| !w.contains("/events") && !w.ends_with("/status"))
            .count(),
        0
    );
    let st = store.lock().unwrap().objects[MPIJOB]["status"].clone();
    let failed = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap()
        .clone();
    assert_eq!(failed["reason"], "ValidationError");
    assert!(failed["message"].as_str().unwrap().contains("LAM"));
    assert_eq!(event_reasons(&store), ["MPIJobCreated", "ValidationError"]);
}

/// An MPIJob that does not fit the model (a CRD that lets in a field of another type) is the
/// controller's by its managedBy all the same: it fails naming the field, with one warning
/// event, and nothing is made; another controller's such MPIJob is not touched.
#[tokio::test]
async fn an_mpijob_that_does_not_fit_the_model_fails_naming_the_field() {
    let store: Shared = Arc::default();
    mpijob(&store, |v| v["spec"]["runPolicy"]["suspend"] = json!("yes"));
    let ctx = context(&store);
    reconcile_now(&store, &ctx).await;
    assert_eq!(
        writes(&store)
            .iter()
            .filter(|w| !w.contains("/events"))
            .cloned()
            .collect::<Vec<_>>(),
        [format!("PATCH {MPIJOB}/status")]
    );
    let st = store.lock().unwrap().objects[MPIJOB]["status"].clone();
    let failed = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap()
        .clone();
    assert_eq!(failed["status"], "True");
    assert_eq!(failed["reason"], "ValidationError");
    let message = failed["message"].as_str().unwrap();
    assert!(
        message
            .contains("spec.runPolicy.suspend: invalid type: string \"yes\", expected a boolean"),
        "{message}"
    );
    assert!(st["completionTime"].is_string(), "{st}");
    assert_eq!(event_reasons(&store), ["MPIJobCreated", "ValidationError"]);
    // Once: the next reconcile writes nothing.
    store.lock().unwrap().requests.clear();
    reconcile_now(&store, &ctx).await;
    assert_eq!(writes(&store), Vec::<String>::new());

    let store: Shared = Arc::default();
    mpijob(&store, |v| {
        v["spec"]["runPolicy"]["suspend"] = json!("yes");
        v["spec"]["runPolicy"]["managedBy"] = json!("kubeflow.org/mpi-operator");
    });
    let ctx = context(&store);
    reconcile_now(&store, &ctx).await;
    assert!(store.lock().unwrap().requests.is_empty());
}

#[tokio::test]
async fn another_controllers_mpijob_is_left_alone() {
    let store: Shared = Arc::default();
    mpijob(&store, |v| {
        v["spec"]["runPolicy"]["managedBy"] = json!("kubeflow.org/mpi-operator")
    });
    let ctx = context(&store);
    reconcile_now(&store, &ctx).await;
    assert!(store.lock().unwrap().requests.is_empty());
}

#[tokio::test]
async fn a_worker_deleted_by_hand_is_one_event_naming_it() {
    let store: Shared = Arc::default();
    mpijob(&store, |_| {});
    let ctx = context(&store);
    reconcile_now(&store, &ctx).await;
    {
        let mut s = store.lock().unwrap();
        let job_uid = s.objects[JOB]["metadata"]["uid"].clone();
        s.objects.insert(
            "/api/v1/namespaces/team/pods/pi-1".into(),
            json!({"metadata": {"name": "pi-1", "namespace": "team", "uid": "p1",
                "deletionTimestamp": "2026-12-03T12:00:00Z", "deletionGracePeriodSeconds": 30,
                "labels": {"prrte-k8s.io/job": "pi", "batch.kubernetes.io/job-completion-index": "1"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": job_uid, "controller": true}]},
                "status": {"phase": "Running"}}),
        );
        s.requests.clear();
    }
    reconcile_now(&store, &ctx).await;
    reconcile_now(&store, &ctx).await;
    let posts = writes(&store)
        .into_iter()
        .filter(|w| w.contains("/events"))
        .count();
    assert_eq!(posts, 1, "{:?}", writes(&store));
    let s = store.lock().unwrap();
    let ev = s
        .objects
        .iter()
        .find(|(k, v)| k.contains("/events/") && v["reason"] == "MPIJobPodDeleted")
        .map(|(_, v)| v.clone())
        .expect("an MPIJobPodDeleted event");
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["regarding"]["kind"], "MPIJob");
    let note = ev["note"].as_str().unwrap();
    assert!(
        note.contains("worker pod pi-1 was deleted while the job ran"),
        "{note}"
    );
}

/// A reconcile of a cached MPIJob that was deleted (or deleted and made again: another uid)
/// makes nothing: the objects would belong to an owner that is gone.
#[tokio::test]
async fn a_deleted_mpijob_seen_through_a_lagging_cache_makes_nothing() {
    for recreated in [false, true] {
        let store: Shared = Default::default();
        mpijob(&store, |_| {});
        let ctx = context(&store);
        let cached: StoredMpiJob =
            serde_json::from_value(store.lock().unwrap().objects[MPIJOB].clone()).unwrap();
        {
            let mut s = store.lock().unwrap();
            let gone = s.objects.remove(MPIJOB).unwrap();
            if recreated {
                let mut again = gone;
                again["metadata"]["uid"] = json!("another-uid");
                s.objects.insert(MPIJOB.into(), again);
            }
        }
        reconcile(Arc::new(cached), ctx.clone()).await.unwrap();
        assert_eq!(
            writes(&store),
            Vec::<String>::new(),
            "recreated: {recreated}"
        );
    }
}

fn failed(store: &Shared) -> Value {
    let st = store.lock().unwrap().objects[MPIJOB]["status"].clone();
    st["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Failed" && c["status"] == "True")
        .cloned()
        .unwrap_or_else(|| panic!("no Failed condition: {st}"))
}

fn event_notes(store: &Shared, reason: &str) -> Vec<String> {
    let s = store.lock().unwrap();
    s.objects
        .iter()
        .filter(|(k, v)| k.contains("/events/") && v["reason"] == reason)
        .map(|(_, v)| v["note"].as_str().unwrap_or("").to_string())
        .collect()
}

/// An object of the job's name that is not the MPIJob's (here: a Secret someone else made, or
/// one `prrte-k8s manifest` printed and someone gave an ownerReference to the MPIJob) is never
/// taken over: nothing is made, the MPIJob fails naming the object and the remedy, with a
/// warning event saying the same, and it is not retried.
#[tokio::test]
async fn an_object_of_the_same_name_made_by_another_is_never_taken_over() {
    let forged = json!({"ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "name": "pi", "uid": "mpijob-uid", "controller": true}],
        "annotations": {"prrte-k8s.io/rendered-by": "prrte-k8s-manifest"}});
    for extra in [json!({}), forged] {
        let store: Shared = Arc::default();
        mpijob(&store, |_| {});
        let mut theirs = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "pi-prrte", "namespace": "team", "uid": "theirs"},
            "data": {"key": "dGhlaXJz"}});
        json_patch::merge(&mut theirs["metadata"], &extra);
        store
            .lock()
            .unwrap()
            .objects
            .insert(SECRET.into(), theirs.clone());
        let ctx = context(&store);
        reconcile_now(&store, &ctx).await;
        let made: Vec<String> = writes(&store)
            .into_iter()
            .filter(|w| !w.contains("/events"))
            .collect();
        assert_eq!(made, [format!("PATCH {MPIJOB}/status")], "{extra}");
        assert_eq!(store.lock().unwrap().objects[SECRET], theirs);
        let f = failed(&store);
        assert_eq!(f["reason"], "ErrResourceExists");
        let m = f["message"].as_str().unwrap();
        assert!(
            m.contains(
                "the Secret team/pi-prrte already exists and is not managed by MPIJob team/pi"
            ) && m.contains("give the MPIJob another name"),
            "{m}"
        );
        let notes = event_notes(&store, "ErrResourceExists");
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("Secret team/pi-prrte"), "{notes:?}");
        // Failed: nothing more is asked of the API.
        store.lock().unwrap().requests.clear();
        reconcile_now(&store, &ctx).await;
        assert_eq!(writes(&store), Vec::<String>::new());
    }
}

/// An object an earlier MPIJob of the same name controls (deleted, its objects not yet
/// collected) goes by itself: the reconcile is retried, with an event naming it, and the
/// MPIJob does not fail.
#[tokio::test]
async fn an_earlier_mpijobs_object_is_waited_for() {
    let store: Shared = Arc::default();
    mpijob(&store, |_| {});
    let earlier = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "pi-prrte", "namespace": "team", "uid": "theirs",
            "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
                "name": "pi", "uid": "earlier-uid", "controller": true}]}});
    store.lock().unwrap().objects.insert(SECRET.into(), earlier);
    let ctx = context(&store);
    let obj: StoredMpiJob =
        serde_json::from_value(store.lock().unwrap().objects[MPIJOB].clone()).unwrap();
    let e = reconcile(Arc::new(obj), ctx.clone()).await.unwrap_err();
    assert!(
        e.to_string().contains("the Secret team/pi-prrte exists"),
        "{e}"
    );
    assert!(store.lock().unwrap().objects[MPIJOB]
        .get("status")
        .is_none());
    assert_eq!(event_notes(&store, "ErrResourceExists").len(), 1);
}

/// What the API server refuses (422) fails the MPIJob with the server's message, once: it is
/// not retried.
#[tokio::test]
async fn a_job_the_api_server_refuses_fails_the_mpijob_with_its_message() {
    let store: Shared = Arc::default();
    mpijob(&store, |_| {});
    let message =
        "Job.batch \"pi\" is invalid: spec.template.spec.nodeSelector: Invalid value: \"bad key!\"";
    store.lock().unwrap().refuse = Some(("/jobs/pi".into(), 422, message.into()));
    let ctx = context(&store);
    reconcile_now(&store, &ctx).await;
    let f = failed(&store);
    assert_eq!(f["reason"], "ValidationError");
    let m = f["message"].as_str().unwrap();
    assert!(
        m.contains("making the Job team/pi: the API server refused it (422 Invalid)")
            && m.contains(message),
        "{m}"
    );
    assert_eq!(event_notes(&store, "ValidationError").len(), 1);
    store.lock().unwrap().requests.clear();
    reconcile_now(&store, &ctx).await;
    assert_eq!(writes(&store), Vec::<String>::new());
}

/// Other failures are retried after a backoff of their own MPIJob's that doubles (5 s to
/// 5 min), and starts again after a reconcile that succeeds.
#[tokio::test]
async fn other_failures_back_off_per_mpijob() {
    use crate::controller::reconcile::error_policy;
    use crate::controller::retry::ReconcileError;
    use kube::runtime::controller::Action;
    use std::time::Duration;
    let store: Shared = Arc::default();
    mpijob(&store, |_| {});
    let ctx = context(&store);
    let obj: Arc<StoredMpiJob> =
        Arc::new(serde_json::from_value(store.lock().unwrap().objects[MPIJOB].clone()).unwrap());
    let mut other: Value = store.lock().unwrap().objects[MPIJOB].clone();
    other["metadata"]["name"] = json!("other");
    let other: Arc<StoredMpiJob> = Arc::new(serde_json::from_value(other).unwrap());
    let e = ReconcileError::PodCache;
    let mut waits = Vec::new();
    for _ in 0..8 {
        waits.push(error_policy(obj.clone(), &e, ctx.clone()));
    }
    let secs = |s: &[u64]| {
        s.iter()
            .map(|&n| Action::requeue(Duration::from_secs(n)))
            .collect::<Vec<_>>()
    };
    assert_eq!(waits, secs(&[5, 10, 20, 40, 80, 160, 300, 300]));
    assert_eq!(error_policy(other, &e, ctx.clone()), secs(&[5])[0]);
    reconcile_now(&store, &ctx).await;
    assert_eq!(error_policy(obj, &e, ctx.clone()), secs(&[5])[0]);
}

/// Fails the Job of the store (its launcher pod's exit, as the Job's failure policy says it),
/// its pods with it.
fn fail_the_job(store: &Shared) {
    let mut s = store.lock().unwrap();
    let job_uid = s.objects[JOB]["metadata"]["uid"].clone();
    for i in 0..3 {
        s.objects.insert(
            format!("/api/v1/namespaces/team/pods/pi-{i}"),
            json!({"metadata": {"name": format!("pi-{i}"), "namespace": "team", "uid": format!("{job_uid}-{i}"),
                "labels": {"prrte-k8s.io/job": "pi", "batch.kubernetes.io/job-completion-index": i.to_string()},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": job_uid, "controller": true}]},
                "status": {"phase": "Failed"}}),
        );
    }
    let job = s.objects.get_mut(JOB).unwrap();
    job["status"] = json!({"conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy",
        "message": "Container agent for pod team/pi-0 failed with exit code 1"}]});
}

/// The Job's pods go with it (the garbage collector, after a foreground delete).
fn pods_gone(store: &Shared) {
    store
        .lock()
        .unwrap()
        .objects
        .retain(|k, _| !k.contains("/pods/"));
}

fn condition_of(store: &Shared, kind: &str) -> Option<(String, String, String)> {
    let s = store.lock().unwrap();
    s.objects[MPIJOB]["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| {
            let f = |k: &str| c[k].as_str().unwrap_or("").to_string();
            (f("status"), f("reason"), f("message"))
        })
}

fn attempt_label(store: &Shared) -> (Value, Value) {
    let s = store.lock().unwrap();
    let j = &s.objects[JOB];
    (
        j["metadata"]["labels"]["prrte-k8s.io/attempt"].clone(),
        j["spec"]["template"]["metadata"]["labels"]["prrte-k8s.io/attempt"].clone(),
    )
}

/// `backoffLimit: 1`: the first failure restarts the whole job (`Restarting`, its event, the
/// failed Job deleted in the foreground and made again, attempt 1, nothing else made again);
/// a child being deleted is waited for; the second failure is `Failed`
/// `BackoffLimitExceeded`, both failures counted.
#[tokio::test]
async fn a_failed_job_is_made_again_up_to_the_backoff_limit() {
    let store: Shared = Arc::default();
    mpijob(&store, |v| {
        v["spec"]["runPolicy"]["backoffLimit"] = json!(1)
    });
    let ctx = context(&store);
    reconcile_now(&store, &ctx).await;
    assert_eq!(attempt_label(&store), (json!("0"), json!("0")));
    let first_uid = store.lock().unwrap().objects[JOB]["metadata"]["uid"].clone();
    let secret = store.lock().unwrap().objects[SECRET].clone();

    fail_the_job(&store);
    store.lock().unwrap().requests.clear();
    reconcile_now(&store, &ctx).await;
    let (status, reason, message) = condition_of(&store, "Restarting").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "MPIJobRestarting")
    );
    assert!(
        message.contains("attempt 1 (PodFailurePolicy): Container agent for pod team/pi-0")
            && message.contains("attempt 2 starts"),
        "{message}"
    );
    assert!(condition_of(&store, "Failed").is_none());
    assert_eq!(
        event_notes(&store, "MPIJobRestarting"),
        std::slice::from_ref(&message)
    );
    let deletes: Vec<(String, String)> = store
        .lock()
        .unwrap()
        .requests
        .iter()
        .filter(|(m, _, _)| m == "DELETE")
        .map(|(_, p, b)| (p.clone(), b.clone()))
        .collect();
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(deletes[0].0, JOB);
    let body: Value = serde_json::from_str(&deletes[0].1).unwrap();
    assert_eq!(body["propagationPolicy"], "Foreground");
    assert_eq!(body["preconditions"]["uid"], first_uid);
    let st = store.lock().unwrap().objects[MPIJOB]["status"].clone();
    assert_eq!(st["replicaStatuses"]["Launcher"]["failed"], 1);
    // The failed attempt's workers are not counted (a zero is left out).
    assert!(
        st["replicaStatuses"]["Worker"].get("failed").is_none(),
        "{st}"
    );

    // Still being deleted (the foreground waits for its pods): nothing is made or written.
    {
        let mut s = store.lock().unwrap();
        let mut going = json!({"metadata": {"name": "pi", "namespace": "team", "uid": first_uid,
            "deletionTimestamp": "2026-12-03T12:01:00Z", "finalizers": ["foregroundDeletion"],
            "labels": {"prrte-k8s.io/attempt": "0"},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi",
                "uid": "mpijob-uid", "controller": true}]}});
        going["status"] = json!({"conditions": [{"type": "Failed", "status": "True"}]});
        s.objects.insert(JOB.into(), going);
        s.requests.clear();
    }
    reconcile_now(&store, &ctx).await;
    assert_eq!(writes(&store), Vec::<String>::new());

    // Gone: made again, attempt 1, the same Secret.
    store.lock().unwrap().objects.remove(JOB);
    pods_gone(&store);
    store.lock().unwrap().requests.clear();
    reconcile_now(&store, &ctx).await;
    assert_eq!(
        writes(&store),
        ["PATCH /apis/batch/v1/namespaces/team/jobs/pi"]
    );
    assert_eq!(attempt_label(&store), (json!("1"), json!("1")));
    assert_eq!(store.lock().unwrap().objects[SECRET], secret);
    assert_eq!(condition_of(&store, "Restarting").unwrap().0, "True");
    let st = store.lock().unwrap().objects[MPIJOB]["status"].clone();
    assert_eq!(st["replicaStatuses"]["Launcher"]["failed"], 1);

    fail_the_job(&store);
    store.lock().unwrap().requests.clear();
    reconcile_now(&store, &ctx).await;
    let (status, reason, message) = condition_of(&store, "Failed").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "BackoffLimitExceeded")
    );
    assert!(
        message.starts_with("MPIJob team/pi has reached the specified backoff limit (1 restarts): attempt 2 (PodFailurePolicy): Container agent for pod team/pi-0"),
        "{message}"
    );
    assert!(!writes(&store).iter().any(|w| w.starts_with("DELETE")));
    let st = store.lock().unwrap().objects[MPIJOB]["status"].clone();
    assert_eq!(st["replicaStatuses"]["Launcher"]["failed"], 2);
    assert!(st["completionTime"].is_string());
    assert_eq!(event_notes(&store, "BackoffLimitExceeded"), [message]);
}

/// Suspended while it restarts: the count is kept; the next attempt is made suspended, as
/// attempt 1.
#[tokio::test]
async fn a_restart_suspended_keeps_its_count() {
    let store: Shared = Arc::default();
    mpijob(&store, |v| {
        v["spec"]["runPolicy"]["backoffLimit"] = json!(3)
    });
    let ctx = context(&store);
    reconcile_now(&store, &ctx).await;
    fail_the_job(&store);
    reconcile_now(&store, &ctx).await;
    assert!(!store.lock().unwrap().objects.contains_key(JOB));
    pods_gone(&store);
    store.lock().unwrap().objects.get_mut(MPIJOB).unwrap()["spec"]["runPolicy"]["suspend"] =
        json!(true);
    reconcile_now(&store, &ctx).await;
    assert_eq!(attempt_label(&store), (json!("1"), json!("1")));
    assert_eq!(store.lock().unwrap().objects[JOB]["spec"]["suspend"], true);
    assert_eq!(condition_of(&store, "Suspended").unwrap().0, "True");
    let st = store.lock().unwrap().objects[MPIJOB]["status"].clone();
    assert_eq!(st["replicaStatuses"]["Launcher"]["failed"], 1);
    // A controller restarted now counts the same: from the Job's label.
    let ctx = context(&store);
    store.lock().unwrap().requests.clear();
    reconcile_now(&store, &ctx).await;
    assert_eq!(writes(&store), Vec::<String>::new());
}
