//! The controller (`prrte-k8s controller`, the binary) against the sandbox API server, watching
//! one namespace (`--namespace`) with `--refuse-node-name`, and what it refuses there: a job
//! rendered with `prrte-k8s manifest --kind statefulset --name victim` is applied; an MPIJob
//! named `victim` makes no Job, and its condition `Failed` and a warning event name the object
//! that is not its own, while the victim's Secret, ServiceAccount and Role stay as they were.
//! An MPIJob whose Job the API server refuses (422: a `nodeSelector` key that is no label key)
//! fails with the server's message; one that names a node fails naming the field; an MPIJob of
//! another namespace is not touched. No pod runs: the API server alone, no kubelet.
#![forbid(unsafe_code)]

mod discovery_support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use discovery_support::{event_about, Fixture};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::runtime::wait::{await_condition, conditions};
use serde::Deserialize;
use serde_json::{json, Value};

const CLI: &str = env!("CARGO_BIN_EXE_prrte-k8s");
/// Bound for what the controller does (it first takes its Lease).
const WAIT: Duration = Duration::from_secs(60);

/// The controller process, killed and reaped when dropped (a failed test too).
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The example pi MPIJob as `name`, the controller's, edited by `edit`.
fn mpijob(name: &str, edit: impl FnOnce(&mut Value)) -> DynamicObject {
    let mut v: Value =
        serde_yaml::from_str(include_str!("../src/manifest/mpijob/examples/pi.yaml")).unwrap();
    v["metadata"] = json!({"name": name});
    v["spec"]["runPolicy"]["managedBy"] = json!("prrte-k8s.io/controller");
    edit(&mut v);
    serde_json::from_value(v).unwrap()
}

fn failed_condition(o: &DynamicObject) -> Option<Value> {
    o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Failed" && c["status"] == "True")
        .cloned()
}

/// The API of the kind of `o` in `ns`.
fn api_of(client: &kube::Client, ns: &str, o: &Value) -> Api<DynamicObject> {
    let av = o["apiVersion"].as_str().unwrap();
    let (g, v) = av.split_once('/').unwrap_or(("", av));
    let gvk = GroupVersionKind::gvk(g, v, o["kind"].as_str().unwrap());
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

/// (resourceVersion, data/rules, annotations) of the object `kind` `name`: what must not change.
async fn snapshot(client: &kube::Client, ns: &str, kind: &Value, name: &str) -> Value {
    let o = api_of(client, ns, kind).get(name).await.unwrap();
    json!({"resourceVersion": o.metadata.resource_version, "data": o.data,
        "annotations": o.metadata.annotations, "owners": o.metadata.owner_references})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mpijob_never_adopts_a_rendered_job_and_fails_naming_what_it_cannot_make() {
    let fx = Fixture::new("refusals").await;
    let other = "elsewhere";
    Api::<Namespace>::all(fx.client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": other}})).unwrap(),
        )
        .await
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(fx.client.clone());
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(include_str!("../../prrte-config/deploy/mpijob-crd.yaml")).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    tokio::time::timeout(
        WAIT,
        await_condition(
            crds,
            "mpijobs.kubeflow.org",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("the CRD is Established in time")
    .unwrap();

    // The victim: a job rendered by prrte-k8s manifest and applied by its owner.
    let out = Command::new(CLI)
        .args(["manifest", "--kind", "statefulset", "--name", "victim"])
        .args(["--namespace", &fx.ns])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered: Vec<Value> =
        serde_yaml::Deserializer::from_str(&String::from_utf8(out.stdout).unwrap())
            .map(|d| Value::deserialize(d).unwrap())
            .filter(|d| !d.is_null())
            .collect();
    for o in &rendered {
        assert_eq!(
            o["metadata"]["annotations"]["prrte-k8s.io/rendered-by"], "prrte-k8s-manifest",
            "{o}"
        );
        api_of(&fx.client, &fx.ns, o)
            .create(
                &PostParams::default(),
                &serde_json::from_value(o.clone()).unwrap(),
            )
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", o["kind"]));
    }
    let kind = |k: &str| rendered.iter().find(|o| o["kind"] == k).unwrap().clone();
    let kept = [
        ("Secret", "victim-prrte"),
        ("ServiceAccount", "victim-prrte"),
        ("Role", "victim-prrte"),
    ];
    let mut before = Vec::new();
    for (k, n) in kept {
        before.push(snapshot(&fx.client, &fx.ns, &kind(k), n).await);
    }

    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubeflow.org", "v2beta1", "MPIJob"),
        "mpijobs",
    );
    let mpijobs: Api<DynamicObject> = Api::namespaced_with(fx.client.clone(), &fx.ns, &ar);
    let pp = PostParams::default();
    mpijobs
        .create(&pp, &mpijob("victim", |_| {}))
        .await
        .unwrap();
    let w = "/spec/mpiReplicaSpecs/Worker/template/spec";
    mpijobs
        .create(
            &pp,
            &mpijob("selector", |v| {
                v.pointer_mut(w).unwrap()["nodeSelector"] = json!({"bad key!": "x"})
            }),
        )
        .await
        .unwrap();
    mpijobs
        .create(
            &pp,
            &mpijob("pinned", |v| {
                v.pointer_mut(w).unwrap()["nodeName"] = json!("node-7")
            }),
        )
        .await
        .unwrap();
    let theirs: Api<DynamicObject> = Api::namespaced_with(fx.client.clone(), other, &ar);
    theirs
        .create(&pp, &mpijob("outside", |_| {}))
        .await
        .unwrap();

    let log = fx.dir.path().join("controller.log");
    let out = std::fs::File::create(&log).unwrap();
    let _controller = Controller(
        Command::new(CLI)
            .args(["controller", "--metrics-address", "127.0.0.1:0"])
            .args(["--health-address", "127.0.0.1:0"])
            .args(["--lease-namespace", &fx.ns, "--identity", "refusals-test"])
            .args(["--namespace", &fx.ns, "--refuse-node-name"])
            // The one Indexed Job, whose template the API server validates (a JobSet's child
            // Jobs are made, and refused, by the JobSet's controller, past the MPIJob).
            .args(["--launcher-pod", "shared"])
            .env("KUBECONFIG", fx.server.admin_kubeconfig())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("the controller starts"),
    );
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let failed = |name: &'static str| {
        let mpijobs = mpijobs.clone();
        let log = log.clone();
        async move {
            let got = tokio::time::timeout(
                WAIT,
                await_condition(mpijobs, name, |o: Option<&DynamicObject>| {
                    o.and_then(failed_condition).is_some()
                }),
            )
            .await;
            match got {
                Ok(Ok(Some(o))) => failed_condition(&o).unwrap(),
                other => panic!(
                    "{name} did not fail in {WAIT:?}: {other:?}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ),
            }
        }
    };

    let victim = failed("victim").await;
    assert_eq!(
        victim["reason"],
        "ErrResourceExists",
        "{victim}\n{}",
        logs()
    );
    let m = victim["message"].as_str().unwrap();
    assert!(
        m.contains(&format!(
            "already exists and is not managed by MPIJob {}/victim",
            fx.ns
        )) && m.contains("prrte-k8s.io/rendered-by")
            && m.contains("give the MPIJob another name"),
        "{m}"
    );
    let jobs: Api<Job> = Api::namespaced(fx.client.clone(), &fx.ns);
    assert_eq!(jobs.get_opt("victim").await.unwrap(), None);
    for ((k, n), was) in kept.iter().zip(&before) {
        assert_eq!(
            &snapshot(&fx.client, &fx.ns, &kind(k), n).await,
            was,
            "{k} {n}"
        );
    }
    // The event is posted after the status is written: watched for, bounded.
    let event = event_about(&fx.client, &fx.ns, "victim", "ErrResourceExists", WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    let note = event.note.unwrap_or_default();
    assert!(note.contains("victim-prrte already exists"), "{note}");

    let selector = failed("selector").await;
    assert_eq!(selector["reason"], "ValidationError", "{selector}");
    let m = selector["message"].as_str().unwrap();
    assert!(
        m.contains("the API server refused it (422 Invalid)") && m.contains("nodeSelector"),
        "{m}"
    );
    let pinned = failed("pinned").await;
    let m = pinned["message"].as_str().unwrap();
    assert!(
        m.contains("spec.mpiReplicaSpecs.Worker.template.spec.nodeName")
            && m.contains("--refuse-node-name"),
        "{m}"
    );
    assert_eq!(jobs.get_opt("pinned").await.unwrap(), None);

    // Another namespace's MPIJob is not the controller's business: by the time the three above
    // failed, one it watched would have its condition Created.
    let outside = theirs.get("outside").await.unwrap();
    assert!(
        outside.data.get("status").is_none_or(Value::is_null),
        "{:?}",
        outside.data
    );
    let their_jobs: Api<Job> = Api::namespaced(fx.client.clone(), other);
    assert!(their_jobs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
}
