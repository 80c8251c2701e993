//! ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding through the sandbox API
//! server, as on Kubernetes 1.30+: kubectl creates, reads, applies (client- and server-side)
//! and deletes them, and they are enforced on the writes they select (a denial with
//! Kubernetes' status and message, a warning for `Warn`, nothing for `Audit` or a policy not
//! bound). The acceptance: `prrte-k8s manifest --elastic` applied with `kubectl apply -f -`,
//! then the job's own ServiceAccount token may raise the Job's pod count within its max-pods
//! but not change anything else, the API server naming the rendered policy.
#![forbid(unsafe_code)]

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use sandbox::api::{ApiOptions, ApiServer};
use sandbox::harness::unique;
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

async fn client_for(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// A server with a namespace of its own and a kubectl cache directory.
struct Sandbox {
    server: ApiServer,
    client: kube::Client,
    ns: String,
    dir: tempfile::TempDir,
}

impl Sandbox {
    async fn start(ns: &str) -> Sandbox {
        let server = ApiServer::start(ApiOptions::default()).await.unwrap();
        let client = client_for(server.admin_kubeconfig()).await;
        let ns = unique(ns);
        let api: Api<Namespace> = Api::all(client.clone());
        let n = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        api.create(&PostParams::default(), &n).await.unwrap();
        Sandbox {
            server,
            client,
            ns,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// kubectl with `kubeconfig` in the namespace: (success, stdout, stderr).
    fn kubectl_as(
        &self,
        kubeconfig: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> (bool, String, String) {
        use std::io::Write;
        let exe = sandbox::harness::kubectl::find()
            .expect("a kubectl (prrte-config/setup.sh installs one)");
        let mut child = std::process::Command::new(exe)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
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

    /// kubectl as the admin.
    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        self.kubectl_as(self.server.admin_kubeconfig(), args, stdin)
    }

    /// kubectl as the admin, which must succeed: its stdout.
    fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, out, err) = self.kubectl(args, stdin);
        assert!(ok, "kubectl {args:?}: {err}");
        out
    }

    /// A kubeconfig for the ServiceAccount `sa` of the namespace (its token, as mounted in
    /// its pods).
    fn service_account_kubeconfig(&self, sa: &str) -> PathBuf {
        let token = self.server.service_account_token(&self.ns, sa);
        let path = self.dir.path().join(format!("{sa}.kubeconfig"));
        self.server
            .write_kubeconfig(&path, &token, &self.ns)
            .unwrap();
        path
    }
}

/// A policy `name` on ConfigMaps: a ConfigMap may not carry the key `forbidden`.
fn configmap_policy(name: &str, extra: Value) -> String {
    let mut spec = json!({
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
        "validations": [{"expression": "!has(object.data) || !('forbidden' in object.data)", "message": "no key forbidden", "reason": "Forbidden"}],
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        spec[k] = v.clone();
    }
    serde_yaml::to_string(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

fn binding(name: &str, policy: &str, actions: &[&str]) -> String {
    serde_yaml::to_string(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": policy, "validationActions": actions},
    }))
    .unwrap()
}

fn configmap(name: &str, key: &str) -> String {
    serde_yaml::to_string(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {key: "x"}}),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_reads_applies_and_deletes_policies_and_bindings() {
    let sb = Sandbox::start("vap-crud").await;
    let policy = configmap_policy("no-forbidden", json!({}));
    let out = sb.kubectl_ok(&["apply", "-f", "-"], Some(&policy));
    assert!(
        out.contains("validatingadmissionpolicy.admissionregistration.k8s.io/no-forbidden created"),
        "{out}"
    );
    sb.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&binding("no-forbidden-b", "no-forbidden", &["Deny"])),
    );
    // Listed by kubectl, cluster-scoped, with Kubernetes' defaults.
    let out = sb.kubectl_ok(&["get", "validatingadmissionpolicies", "-o", "name"], None);
    assert_eq!(
        out.trim(),
        "validatingadmissionpolicy.admissionregistration.k8s.io/no-forbidden"
    );
    let got: Value = serde_json::from_str(&sb.kubectl_ok(
        &[
            "get",
            "validatingadmissionpolicy",
            "no-forbidden",
            "-o",
            "json",
        ],
        None,
    ))
    .unwrap();
    assert_eq!(got["spec"]["failurePolicy"], "Fail");
    assert_eq!(got["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
    assert!(got["metadata"].get("namespace").is_none(), "{got}");
    let out = sb.kubectl_ok(&["get", "validatingadmissionpolicybindings"], None);
    assert!(out.contains("no-forbidden-b"), "{out}");
    // Explained from the server's OpenAPI documents, as on a cluster.
    let out = sb.kubectl_ok(
        &["explain", "validatingadmissionpolicy.spec.matchConstraints"],
        None,
    );
    assert!(out.contains("resourceRules"), "{out}");
    // Applied again, changed: client-side, then server-side.
    let changed = configmap_policy("no-forbidden", json!({"failurePolicy": "Ignore"}));
    let out = sb.kubectl_ok(&["apply", "-f", "-"], Some(&changed));
    assert!(out.contains("configured"), "{out}");
    // Server-side: the field kubectl's client-side apply set, taken over with --force-conflicts.
    let fail = configmap_policy("no-forbidden", json!({"failurePolicy": "Fail"}));
    let out = sb.kubectl_ok(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&fail),
    );
    assert!(out.contains("serverside-applied"), "{out}");
    let got: Value = serde_json::from_str(&sb.kubectl_ok(
        &[
            "get",
            "validatingadmissionpolicy",
            "no-forbidden",
            "-o",
            "json",
        ],
        None,
    ))
    .unwrap();
    assert_eq!(got["spec"]["failurePolicy"], "Fail");
    // Invalid ones are refused naming the field.
    let empty = serde_yaml::to_string(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "empty"}, "spec": {"policyName": "no-forbidden"},
    }))
    .unwrap();
    let (ok, _, err) = sb.kubectl(&["apply", "-f", "-"], Some(&empty));
    assert!(!ok);
    assert!(
        err.contains(
            "spec.validationActions: Required value: at least one validation action is required"
        ),
        "{err}"
    );
    let bad_cel = configmap_policy(
        "bad",
        json!({"validations": [{"expression": "object.data.("}]}),
    );
    let (ok, _, err) = sb.kubectl(&["apply", "-f", "-"], Some(&bad_cel));
    assert!(!ok);
    assert!(
        err.contains("spec.validations[0].expression: Invalid value"),
        "{err}"
    );
    assert!(err.contains("compilation failed"), "{err}");
    // Deleted: the ConfigMap it refused is admitted.
    sb.kubectl_ok(
        &[
            "delete",
            "validatingadmissionpolicybinding",
            "no-forbidden-b",
        ],
        None,
    );
    sb.kubectl_ok(
        &["delete", "validatingadmissionpolicy", "no-forbidden"],
        None,
    );
    sb.kubectl_ok(&["apply", "-f", "-"], Some(&configmap("c", "forbidden")));
    let out = sb.kubectl_ok(&["get", "validatingadmissionpolicies"], None);
    assert!(!out.contains("no-forbidden"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_policy_denies_warns_or_audits_and_an_unbound_one_does_nothing() {
    let sb = Sandbox::start("vap-enforce").await;
    sb.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&configmap_policy("p", json!({}))),
    );
    // Not bound: nothing.
    sb.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&configmap("unbound", "forbidden")),
    );
    // Deny: refused with the validation's reason and Kubernetes' message.
    sb.kubectl_ok(&["apply", "-f", "-"], Some(&binding("b", "p", &["Deny"])));
    let (ok, _, err) = sb.kubectl(
        &["apply", "-f", "-"],
        Some(&configmap("denied", "forbidden")),
    );
    assert!(!ok);
    assert!(
        err.contains("Error from server (Forbidden): error when creating \"STDIN\": configmaps \"denied\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no key forbidden"),
        "{err}"
    );
    let (ok, _, _) = sb.kubectl(&["get", "configmap", "denied"], None);
    assert!(!ok, "a denied ConfigMap was stored");
    // An update is checked too (a patch of one that was stored before the binding).
    let (ok, _, err) = sb.kubectl(
        &[
            "patch",
            "configmap",
            "unbound",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"other":"y"}}"#,
        ],
        None,
    );
    assert!(!ok);
    assert!(
        err.contains("configmaps \"unbound\" is forbidden: ValidatingAdmissionPolicy 'p'"),
        "{err}"
    );
    sb.kubectl_ok(&["apply", "-f", "-"], Some(&configmap("allowed", "fine")));
    // Through kube-rs: the status as Kubernetes sends it.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(sb.client.clone(), &sb.ns);
    let e = cms
        .patch(
            "allowed",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"forbidden": "1"}})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(s) = e else {
        panic!("{e}")
    };
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert_eq!(s.message, "configmaps \"allowed\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no key forbidden");
    // Warn: admitted, with a warning kubectl prints; Audit: admitted silently.
    sb.kubectl_ok(&["delete", "validatingadmissionpolicybinding", "b"], None);
    sb.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&binding("w", "p", &["Warn", "Audit"])),
    );
    let (ok, _, err) = sb.kubectl(
        &["apply", "-f", "-"],
        Some(&configmap("warned", "forbidden")),
    );
    assert!(ok, "{err}");
    assert!(
        err.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'p' with binding 'w': no key forbidden"),
        "{err}"
    );
    sb.kubectl_ok(&["delete", "validatingadmissionpolicybinding", "w"], None);
    sb.kubectl_ok(&["apply", "-f", "-"], Some(&binding("a", "p", &["Audit"])));
    let (ok, _, err) = sb.kubectl(
        &["apply", "-f", "-"],
        Some(&configmap("audited", "forbidden")),
    );
    assert!(ok && !err.contains("Warning"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn match_conditions_and_the_failure_policy_are_enforced() {
    let sb = Sandbox::start("vap-conditions").await;
    // Only requests by the ServiceAccount `narrowed` are checked.
    let condition = json!({"matchConditions": [{"name": "narrowed", "expression": "request.userInfo.username.endsWith(':narrowed')"}]});
    sb.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&configmap_policy("p", condition)),
    );
    sb.kubectl_ok(&["apply", "-f", "-"], Some(&binding("b", "p", &["Deny"])));
    let rbac = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: narrowed\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: cm\nrules:\n- apiGroups: ['']\n  resources: [configmaps]\n  verbs: [get, create, patch]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: cm\nsubjects:\n- kind: ServiceAccount\n  name: narrowed\n  namespace: {}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: cm\n",
        sb.ns
    );
    sb.kubectl_ok(&["apply", "-f", "-"], Some(&rbac));
    sb.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&configmap("by-admin", "forbidden")),
    );
    let narrowed = sb.service_account_kubeconfig("narrowed");
    let (ok, _, err) = sb.kubectl_as(
        &narrowed,
        &["create", "-f", "-"],
        Some(&configmap("by-sa", "forbidden")),
    );
    assert!(!ok);
    assert!(
        err.contains("ValidatingAdmissionPolicy 'p' with binding 'b' denied request"),
        "{err}"
    );
    // A validation that cannot be evaluated: refused under Fail (422, the error named) ...
    let erring = json!({"validations": [{"expression": "object.data.missing == 'x'", "message": "never shown"}]});
    sb.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&configmap_policy("p", erring.clone())),
    );
    let (ok, _, err) = sb.kubectl(&["apply", "-f", "-"], Some(&configmap("erring", "any")));
    assert!(!ok);
    // (kubectl words a 422 by its causes: the one here has no field.)
    assert!(
        err.contains("The configmaps \"erring\" is invalid: : ValidatingAdmissionPolicy 'p' with binding 'b' denied request: expression 'object.data.missing == 'x'' resulted in error"),
        "{err}"
    );
    // ... and admitted under Ignore.
    let mut ignore = erring;
    ignore["failurePolicy"] = json!("Ignore");
    sb.kubectl_ok(&["apply", "-f", "-"], Some(&configmap_policy("p", ignore)));
    sb.kubectl_ok(&["apply", "-f", "-"], Some(&configmap("erring", "any")));
}

/// The objects of a rendered manifest.
fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// `prrte-k8s manifest ARGS`, as a user runs it.
fn manifest(args: &[&str]) -> String {
    let bin = sandbox::harness::workspace_bin("prrte-k8s").unwrap();
    let out = std::process::Command::new(bin)
        .arg("manifest")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The acceptance of the elastic guard: the manifest applied with kubectl as on a cluster;
/// the token in the job's pods raises the Job's pod count within `--max-pods`, and everything
/// else it tries is refused by the API server naming the rendered policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_jobs_token_may_raise_its_pod_count_and_nothing_else() {
    let sb = Sandbox::start("vap-elastic").await;
    let text = manifest(&[
        "--name",
        "el",
        "--pods",
        "2",
        "--elastic",
        "--max-pods",
        "4",
        "-n",
        &sb.ns,
    ]);
    let out = sb.kubectl_ok(&["apply", "-f", "-"], Some(&text));
    let policy = format!("prrte-k8s.{}.el", sb.ns);
    for created in [
        format!("validatingadmissionpolicy.admissionregistration.k8s.io/{policy} created"),
        format!("validatingadmissionpolicybinding.admissionregistration.k8s.io/{policy} created"),
        "job.batch/el created".to_string(),
    ] {
        assert!(out.contains(&created), "{created}: {out}");
    }
    let sa = documents(&text)
        .into_iter()
        .find(|o| o["kind"] == "ServiceAccount")
        .and_then(|o| o["metadata"]["name"].as_str().map(String::from))
        .unwrap();
    let token = sb.service_account_kubeconfig(&sa);
    let jobs: Api<Job> = Api::namespaced(sb.client.clone(), &sb.ns);
    let counts = |j: &Job| {
        let s = j.spec.as_ref().unwrap();
        (s.parallelism.unwrap(), s.completions.unwrap())
    };

    // What grow does: raise both counts, within max-pods; what a release does: lower them.
    for n in [3, 4, 1] {
        let patch = format!(r#"{{"spec":{{"parallelism":{n},"completions":{n}}}}}"#);
        let (ok, _, err) = sb.kubectl_as(
            &token,
            &["patch", "job", "el", "--type", "merge", "-p", &patch],
            None,
        );
        assert!(ok, "{patch}: {err}");
        assert_eq!(counts(&jobs.get("el").await.unwrap()), (n, n));
    }
    let before = jobs.get("el").await.unwrap();

    // What a compromised rank would try: each refused by the policy, the Job unchanged. (A
    // Kubernetes API server refuses a running Job's template change as immutable before
    // admission; the sandbox does not check that, so its policy is what refuses it here, as
    // it would a field a later Kubernetes makes mutable.)
    let denied = |msg: &str| {
        format!("jobs.batch \"el\" is forbidden: ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: the job's own service account {msg}")
    };
    for (attack, refusal) in [
        (
            json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "attacker/any"}]}}}}),
            "may change only the Job's spec.parallelism",
        ),
        (
            json!({"spec": {"suspend": true}}),
            "may change only the Job's spec.parallelism",
        ),
        (
            json!({"spec": {"parallelism": 5, "completions": 5}}),
            "may not raise Job el past its prrte-k8s.io/max-pods",
        ),
        (
            json!({"metadata": {"annotations": {"prrte-k8s.io/max-pods": "100"}}}),
            "may not change the Job's metadata",
        ),
        (
            json!({"spec": {"parallelism": 0, "completions": 0}}),
            "may not lower the Job's parallelism below 1",
        ),
    ] {
        let (ok, _, err) = sb.kubectl_as(
            &token,
            &[
                "patch",
                "job",
                "el",
                "--type",
                "merge",
                "-p",
                &attack.to_string(),
            ],
            None,
        );
        assert!(!ok, "admitted: {attack}");
        assert!(
            err.contains("Error from server (Forbidden)"),
            "{attack}: {err}"
        );
        assert!(err.contains(&denied(refusal)), "{attack}: {err}");
    }
    // The status as a client library sees it.
    let rank = client_for(&token).await;
    let as_rank: Api<Job> = Api::namespaced(rank, &sb.ns);
    let e = as_rank
        .patch(
            "el",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(s) = e else {
        panic!("{e}")
    };
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert!(s.message.starts_with(&denied("")), "{}", s.message);
    let after = jobs.get("el").await.unwrap();
    assert_eq!(after.spec, before.spec, "the token changed the Job");
    assert_eq!(after.metadata.annotations, before.metadata.annotations);

    // Anyone else (here the admin) is not narrowed by the policy.
    let (ok, _, err) = sb.kubectl(
        &[
            "patch",
            "job",
            "el",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"suspend":true}}"#,
        ],
        None,
    );
    assert!(ok, "{err}");
}
