//! CRD `x-kubernetes-validations` through the sandbox API server with real clients (kube-rs,
//! kubectl): a rule that fails refuses a create or an update with the 422 `Invalid` Status a
//! Kubernetes API server returns, and kubectl shows it as it shows a cluster's.
#![forbid(unsafe_code)]

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use sandbox::api::{ApiOptions, ApiServer};
use sandbox::harness::unique;
use serde_json::{json, Value};
use std::path::Path;

const MANAGED_BY: &str = "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set";

/// A TrainJob-like CRD with Trainer's kind of rules: `managedBy` an enum through CEL and
/// immutable through a transition rule, and a rule with a `messageExpression` reported at a
/// `fieldPath`.
fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "trainjobs.trainer.example.org"},
        "spec": {
            "group": "trainer.example.org",
            "scope": "Namespaced",
            "names": {"plural": "trainjobs", "singular": "trainjob", "kind": "TrainJob"},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "x-kubernetes-validations": [{
                                "rule": "!has(self.numNodes) || self.numNodes <= 4",
                                "messageExpression": "'numNodes ' + string(self.numNodes) + ' is more than 4'",
                                "fieldPath": ".numNodes",
                            }],
                            "properties": {
                                "managedBy": {
                                    "type": "string",
                                    "x-kubernetes-validations": [
                                        {"rule": "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']", "message": MANAGED_BY},
                                        {"rule": "self == oldSelf", "message": "ManagedBy value is immutable"},
                                    ],
                                },
                                "numNodes": {"type": "integer"},
                            },
                        },
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    },
                }},
            }],
        },
    })
}

fn job(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "trainer.example.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name}, "spec": spec})
}

async fn admin(server: &ApiServer) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(server.admin_kubeconfig()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn kubectl(
    server: &ApiServer,
    cache: &Path,
    ns: &str,
    args: &[&str],
    stdin: &str,
) -> (bool, String, String) {
    use tokio::io::AsyncWriteExt;
    let exe =
        sandbox::harness::kubectl::find().expect("a kubectl (prrte-config/setup.sh installs one)");
    let mut child = tokio::process::Command::new(exe)
        .arg("--kubeconfig")
        .arg(server.admin_kubeconfig())
        .arg("--cache-dir")
        .arg(cache)
        .args(["-n", ns])
        .args(args)
        .kill_on_drop(true)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let out = child.wait_with_output().await.unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Through kube-rs: a create with another `managedBy` is refused with 422 Invalid and the
/// API server's message; a valid one is created; changing the immutable field is refused; the
/// `messageExpression`'s message is reported at the `fieldPath`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_refuse_creates_and_updates() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let ns = unique("cel");
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
    )
    .await
    .unwrap();
    let crds: Api<DynamicObject> = Api::all_with(
        c.clone(),
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(crd()).unwrap(),
    )
    .await
    .unwrap();
    let jobs: Api<DynamicObject> = Api::namespaced_with(
        c.clone(),
        &ns,
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("trainer.example.org", "v1alpha1", "TrainJob"),
            "trainjobs",
        ),
    );
    let create = |o: Value| {
        let jobs = jobs.clone();
        async move {
            jobs.create(&PostParams::default(), &serde_json::from_value(o).unwrap())
                .await
        }
    };
    let e = api_error(
        create(job("t", json!({"managedBy": "other"})))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        format!("TrainJob.trainer.example.org \"t\" is invalid: spec.managedBy: Invalid value: \"string\": {MANAGED_BY}")
    );
    let e = api_error(create(job("t", json!({"numNodes": 5}))).await.unwrap_err());
    assert_eq!(
        e.message,
        "TrainJob.trainer.example.org \"t\" is invalid: spec.numNodes: Invalid value: \"object\": numNodes 5 is more than 4"
    );
    create(job("t", json!({"managedBy": "kueue.x-k8s.io/multikueue"})))
        .await
        .unwrap();
    let e = api_error(
        jobs.patch(
            "t",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"managedBy": "trainer.kubeflow.org/trainjob-controller"}}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        e.message,
        "TrainJob.trainer.example.org \"t\" is invalid: spec.managedBy: Invalid value: \"string\": ManagedBy value is immutable"
    );
    jobs.patch(
        "t",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"numNodes": 2}})),
    )
    .await
    .unwrap();
}

/// Through kubectl: the refusal reads as a cluster's (`The TrainJob "t" is invalid: FIELD:
/// ...`), on apply of a new object and of a changed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shows_the_refusal() {
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let cache = tempfile::tempdir().unwrap();
    let ns = unique("celkc");
    let run = |args: &'static [&'static str], stdin: String| {
        let (server, cache, ns) = (&server, cache.path().to_path_buf(), ns.clone());
        async move { kubectl(server, &cache, &ns, args, &stdin).await }
    };
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    let (ok, _, err) = run(
        &["apply", "-f", "-"],
        serde_yaml::to_string(&namespace).unwrap(),
    )
    .await;
    assert!(ok, "{err}");
    let (ok, _, err) = run(
        &["apply", "-f", "-"],
        serde_yaml::to_string(&crd()).unwrap(),
    )
    .await;
    assert!(ok, "apply CRD: {err}");
    let (ok, _, err) = run(
        &[
            "wait",
            "--for=condition=Established",
            "crd/trainjobs.trainer.example.org",
            "--timeout=20s",
        ],
        String::new(),
    )
    .await;
    assert!(ok, "{err}");
    let apply = |spec: Value| {
        run(
            &["apply", "-f", "-"],
            serde_yaml::to_string(&job("t", spec)).unwrap(),
        )
    };
    let (ok, _, err) = apply(json!({"managedBy": "other"})).await;
    assert!(!ok);
    assert!(
        err.contains(&format!("The TrainJob \"t\" is invalid: spec.managedBy: Invalid value: \"string\": {MANAGED_BY}")),
        "{err}"
    );
    let (ok, out, err) = apply(json!({"managedBy": "kueue.x-k8s.io/multikueue"})).await;
    assert!(ok && out.contains("created"), "{out} {err}");
    let (ok, _, err) =
        apply(json!({"managedBy": "trainer.kubeflow.org/trainjob-controller"})).await;
    assert!(!ok);
    assert!(
        err.contains("The TrainJob \"t\" is invalid: spec.managedBy: Invalid value: \"string\": ManagedBy value is immutable"),
        "{err}"
    );
}

/// Trainer's own CRDs (v2.3.0, as it publishes them) installed as they are: a TrainJob whose
/// `managedBy` is another controller is refused as a cluster refuses it, one with Trainer's
/// is created, and its `managedBy` cannot change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trainers_crds_refuse_another_managed_by() {
    use serde::Deserialize;
    let files = sandbox::harness::trainer::trainer_crds().expect("Trainer's CRDs");
    let server = ApiServer::start(ApiOptions::default()).await.unwrap();
    let c = admin(&server).await;
    let crds: Api<DynamicObject> = Api::all_with(
        c.clone(),
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let mut names = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = Value::deserialize(doc).unwrap();
            if v.is_null() {
                continue;
            }
            let o = crds
                .create(&PostParams::default(), &serde_json::from_value(v).unwrap())
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            names.push(o.metadata.name.unwrap_or_default());
        }
    }
    names.sort();
    assert_eq!(
        names,
        [
            "clustertrainingruntimes.trainer.kubeflow.org",
            "trainingruntimes.trainer.kubeflow.org",
            "trainjobs.trainer.kubeflow.org",
        ]
    );
    let ns = unique("trainer");
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
    )
    .await
    .unwrap();
    let jobs: Api<DynamicObject> = Api::namespaced_with(
        c.clone(),
        &ns,
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
            "trainjobs",
        ),
    );
    let trainjob = |managed_by: &str| {
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "pi"},
            "spec": {"runtimeRef": {"name": "prrte-k8s-openmpi"}, "managedBy": managed_by},
        })
    };
    let e = api_error(
        jobs.create(
            &PostParams::default(),
            &serde_json::from_value(trainjob("prrte-k8s.io/controller")).unwrap(),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "TrainJob.trainer.kubeflow.org \"pi\" is invalid: spec.managedBy: Invalid value: \"string\": ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set"
    );
    let o = jobs
        .create(
            &PostParams::default(),
            &serde_json::from_value(trainjob("trainer.kubeflow.org/trainjob-controller")).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        o.data["spec"]["runtimeRef"]["apiGroup"], "trainer.kubeflow.org",
        "defaulted"
    );
    let e = api_error(
        jobs.patch(
            "pi",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"managedBy": "kueue.x-k8s.io/multikueue"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        e.message,
        "TrainJob.trainer.kubeflow.org \"pi\" is invalid: spec.managedBy: Invalid value: \"string\": field is immutable"
    );
}
