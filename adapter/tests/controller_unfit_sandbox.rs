//! The controller (`prrte-k8s controller`, the binary) against the sandbox API server, whose
//! MPIJob CRD lets any spec in (ours with the spec's schema loosened, as an older or newer CRD,
//! or mpi-operator's with a value ours refuses, may): an MPIJob whose spec does not fit the
//! controller's MPIJob type sits beside a good one. The good one still gets its Job; the bad
//! one gets the condition `Failed` naming the field and a warning event saying the same, and
//! nothing is made for it. No pod runs: the API server alone, no kubelet.
#![forbid(unsafe_code)]

mod discovery_support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use discovery_support::{event_about, Fixture};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{json, Value};

const CLI: &str = env!("CARGO_BIN_EXE_prrte-k8s");
/// Bound for what the controller does (it first takes its Lease).
const WAIT: Duration = Duration::from_secs(60);

/// Our CRD with `spec` free-form: any spec is stored.
fn loose_crd() -> CustomResourceDefinition {
    let mut crd: Value =
        serde_yaml::from_str(include_str!("../../prrte-config/deploy/mpijob-crd.yaml")).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] =
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    serde_json::from_value(crd).unwrap()
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

/// The controller process, killed and reaped when dropped (a failed test too).
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn failed_condition(o: &DynamicObject) -> Option<Value> {
    o.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Failed" && c["status"] == "True")
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mpijob_that_does_not_fit_fails_alone_and_a_good_one_beside_it_gets_its_job() {
    let fx = Fixture::new("unfit").await;
    let crds: Api<CustomResourceDefinition> = Api::all(fx.client.clone());
    crds.create(&PostParams::default(), &loose_crd())
        .await
        .expect("the CRD is made");
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
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubeflow.org", "v2beta1", "MPIJob"),
        "mpijobs",
    );
    let mpijobs: Api<DynamicObject> = Api::namespaced_with(fx.client.clone(), &fx.ns, &ar);
    // Stored before the controller starts: its first list holds it.
    mpijobs
        .create(
            &PostParams::default(),
            &mpijob("bad", |v| v["spec"]["slotsPerWorker"] = json!("2")),
        )
        .await
        .expect("the CRD stores a spec of any shape");

    let log = fx.dir.path().join("controller.log");
    let out = std::fs::File::create(&log).unwrap();
    let _controller = Controller(
        Command::new(CLI)
            .args(["controller", "--metrics-address", "127.0.0.1:0"])
            .args(["--lease-namespace", &fx.ns, "--identity", "unfit-test"])
            // The one Indexed Job, which the test waits for (the API server serves JobSets,
            // which the default would make).
            .args(["--launcher-pod", "shared"])
            .env("KUBECONFIG", fx.server.admin_kubeconfig())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("the controller starts"),
    );
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    mpijobs
        .create(&PostParams::default(), &mpijob("good", |_| {}))
        .await
        .unwrap();

    let jobs: Api<Job> = Api::namespaced(fx.client.clone(), &fx.ns);
    let made = tokio::time::timeout(
        WAIT,
        await_condition(jobs.clone(), "good", |j: Option<&Job>| j.is_some()),
    )
    .await;
    assert!(
        matches!(made, Ok(Ok(Some(_)))),
        "the good MPIJob got no Job in {WAIT:?}: {made:?}\ncontroller log:\n{}",
        logs()
    );

    let bad = tokio::time::timeout(
        WAIT,
        await_condition(mpijobs.clone(), "bad", |o: Option<&DynamicObject>| {
            o.and_then(failed_condition).is_some()
        }),
    )
    .await;
    let Ok(Ok(Some(bad))) = bad else {
        panic!(
            "the bad MPIJob did not fail in {WAIT:?}: {bad:?}\ncontroller log:\n{}",
            logs()
        );
    };
    let failed = failed_condition(&bad).unwrap();
    assert_eq!(failed["reason"], "ValidationError", "{failed}");
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.slotsPerWorker: invalid type: string \"2\""),
        "{message}"
    );
    assert_eq!(
        jobs.get_opt("bad").await.unwrap(),
        None,
        "a Job for the bad MPIJob"
    );

    // Its warning event says the same.
    let warning = event_about(&fx.client, &fx.ns, "bad", "ValidationError", WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}\ncontroller log:\n{}", logs()));
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(warning.reason.as_deref(), Some("ValidationError"));
    assert!(
        warning
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("spec.slotsPerWorker"),
        "{warning:?}"
    );
    // The good one is reconciled as ever: its status says it is created, not failed.
    let good = mpijobs.get("good").await.unwrap();
    let conditions = good.data["status"]["conditions"].as_array().cloned();
    assert!(
        conditions
            .iter()
            .flatten()
            .any(|c| c["type"] == "Created" && c["status"] == "True"),
        "{conditions:?}"
    );
    assert_eq!(failed_condition(&good), None, "{conditions:?}");
}
