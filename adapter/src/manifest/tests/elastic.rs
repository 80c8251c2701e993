//! Elastic jobs (`--elastic --max-pods M`): what the Role grants, the workload's annotations,
//! and the options refused.

use crate::manifest::error::ManifestError;
use crate::manifest::meta::MAX_PODS_ANNOTATION;
use crate::manifest::options::ManifestArgs;
use crate::manifest::render;
use crate::workload::KUEUE_ELASTIC_ANNOTATION;
use clap::Parser;
use serde_json::{json, Value};

#[derive(Parser)]
struct T {
    #[command(flatten)]
    a: ManifestArgs,
}

fn objects(v: &[&str]) -> Result<Vec<Value>, ManifestError> {
    let mut argv = vec!["manifest"];
    argv.extend(v);
    let a = T::try_parse_from(argv).unwrap().a;
    render::objects(&a.plan()?, None)
}

fn of_kind<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    objs.iter().find(|o| o["kind"] == kind).unwrap()
}

#[test]
fn an_elastic_job_may_patch_itself_and_says_so() {
    let objs = objects(&[
        "--name",
        "el",
        "--pods",
        "4",
        "--elastic",
        "--max-pods",
        "8",
    ])
    .unwrap();
    let rules = &of_kind(&objs, "Role")["rules"];
    assert_eq!(
        rules[1],
        json!({"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": ["el"], "verbs": ["get", "patch"]})
    );
    // Nothing else gained a write verb.
    assert_eq!(rules[0]["verbs"], json!(["get", "list", "watch"]));
    assert_eq!(rules.as_array().unwrap().len(), 2);
    let job = of_kind(&objs, "Job");
    assert_eq!(
        job["metadata"]["annotations"][KUEUE_ELASTIC_ANNOTATION],
        "true"
    );
    assert_eq!(job["metadata"]["annotations"][MAX_PODS_ANNOTATION], "8");
    assert_eq!(job["spec"]["parallelism"], 4);
    assert_eq!(job["spec"]["completions"], 4);
}

#[test]
fn an_elastic_statefulset_may_patch_only_its_scale() {
    let objs = objects(&[
        "--name",
        "s",
        "--kind",
        "statefulset",
        "--pods",
        "2",
        "--elastic",
        "--max-pods",
        "3",
    ])
    .unwrap();
    // The StatefulSet itself is only read (a patch of it could rewrite its pod template: another
    // service account, any Secret mounted, any image); its Scale is read and patched.
    let rules = of_kind(&objs, "Role")["rules"].as_array().unwrap().clone();
    assert_eq!(
        rules[1..],
        [
            json!({"apiGroups": ["apps"], "resources": ["statefulsets"], "resourceNames": ["s"], "verbs": ["get"]}),
            json!({"apiGroups": ["apps"], "resources": ["statefulsets/scale"], "resourceNames": ["s"], "verbs": ["get", "patch"]}),
        ]
    );
    for r in &rules {
        if r["verbs"].as_array().unwrap().contains(&json!("patch")) {
            assert_eq!(r["resources"], json!(["statefulsets/scale"]), "{r}");
        }
    }
    // Its Scale may be patched by the token only up, and not past max-pods (the limit as
    // rendered: a Scale has no annotations).
    let policy = of_kind(&objs, "ValidatingAdmissionPolicy");
    assert_eq!(
        policy["spec"]["matchConstraints"]["resourceRules"],
        json!([{"apiGroups": ["apps"], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["statefulsets/scale"], "resourceNames": ["s"]}])
    );
    let sa = of_kind(&objs, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .unwrap();
    assert!(policy["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap()
        .ends_with(&format!(":{sa}'")));
    assert_eq!(
        expression(policy, "past its prrte-k8s.io/max-pods (3)"),
        "has(object.spec.replicas) && object.spec.replicas <= 3"
    );
    assert!(expression(policy, "lower").ends_with("object.spec.replicas >= 1"));
    assert_eq!(
        of_kind(&objs, "ValidatingAdmissionPolicyBinding")["spec"]["policyName"],
        policy["metadata"]["name"]
    );
    let sts = of_kind(&objs, "StatefulSet");
    assert_eq!(sts["metadata"]["annotations"][MAX_PODS_ANNOTATION], "3");
    // Kueue's annotation is for Jobs.
    assert!(sts["metadata"]["annotations"]
        .get(KUEUE_ELASTIC_ANNOTATION)
        .is_none());
}

#[test]
fn a_job_not_elastic_only_reads_itself() {
    let objs = objects(&["--name", "fixed", "--pods", "4"]).unwrap();
    assert_eq!(of_kind(&objs, "Role")["rules"][1]["verbs"], json!(["get"]));
    let job = of_kind(&objs, "Job");
    assert!(job["metadata"].get("annotations").is_none(), "{job}");
}

#[test]
fn elastic_options_are_checked() {
    let e = objects(&["--pods", "4", "--elastic", "--max-pods", "3"]).unwrap_err();
    assert!(
        matches!(e, ManifestError::MaxPods { max: 3, pods: 4 }),
        "{e}"
    );
    assert!(e.to_string().contains("--max-pods 3 is below --pods 4"));
    let e = objects(&["--kind", "jobset", "--elastic", "--max-pods", "3"]).unwrap_err();
    assert!(matches!(e, ManifestError::ElasticJobset), "{e}");
    // Each needs the other.
    for argv in [
        &["manifest", "--elastic"][..],
        &["manifest", "--max-pods", "4"],
    ] {
        let e = T::try_parse_from(argv).err().expect("refused");
        assert_eq!(
            e.kind(),
            clap::error::ErrorKind::MissingRequiredArgument,
            "{e}"
        );
    }
}

/// The CEL of the validation whose message contains `what`.
fn expression<'a>(policy: &'a Value, what: &str) -> &'a str {
    policy["spec"]["validations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["message"].as_str().unwrap().contains(what))
        .unwrap_or_else(|| panic!("no validation about {what}: {policy}"))["expression"]
        .as_str()
        .unwrap()
}

#[test]
fn an_elastic_jobs_own_token_may_only_raise_its_counts_within_max_pods() {
    let objs = objects(&[
        "--name",
        "el",
        "--pods",
        "4",
        "--elastic",
        "--max-pods",
        "8",
        "-n",
        "hpc",
    ])
    .unwrap();
    let policy = of_kind(&objs, "ValidatingAdmissionPolicy");
    let binding = of_kind(&objs, "ValidatingAdmissionPolicyBinding");
    assert_eq!(policy["apiVersion"], "admissionregistration.k8s.io/v1");
    assert_eq!(policy["metadata"]["name"], "prrte-k8s.hpc.el");
    assert_eq!(binding["spec"]["policyName"], "prrte-k8s.hpc.el");
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert_eq!(
        binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]
            ["kubernetes.io/metadata.name"],
        "hpc"
    );
    let spec = &policy["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    // Every update of this Job (a patch is one), by the Job's own service account: the one
    // the Role is bound to.
    assert_eq!(
        spec["matchConstraints"]["resourceRules"],
        json!([{"apiGroups": ["batch"], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["jobs"], "resourceNames": ["el"]}])
    );
    let sa = of_kind(&objs, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .unwrap();
    let binding_sa = &of_kind(&objs, "RoleBinding")["subjects"][0]["name"];
    assert_eq!(binding_sa, sa);
    assert_eq!(
        spec["matchConditions"][0]["expression"],
        format!(
            "request.userInfo.username == 'system:serviceaccount:' + request.namespace + ':{sa}'"
        )
    );
    // An allowlist: of the spec, only the two counts may differ from the Job as it was; of the
    // metadata, only what the API server itself changes on an update. Anything else, a field
    // no version of this policy names included, must stay (the attacks are evaluated in
    // `the_rendered_policies_admit_a_growth_and_refuse_the_attacks`).
    assert_eq!(
        expression(policy, "may change only the Job's spec.parallelism"),
        "dyn(object.spec).all(k, k in ['parallelism', 'completions'] || \
         (k in dyn(oldObject.spec) && dyn(object.spec)[k] == dyn(oldObject.spec)[k])) \
         && dyn(oldObject.spec).all(k, k in ['parallelism', 'completions'] || k in dyn(object.spec))"
    );
    assert!(expression(policy, "Job's metadata").starts_with(
        "dyn(object.metadata).all(k, k in ['resourceVersion', 'generation', 'managedFields'] ||"
    ));
    // The counts only: equal, at least 1, not past the limit as it was before the update.
    assert!(
        expression(policy, "equal").contains("object.spec.parallelism == object.spec.completions")
    );
    assert!(expression(policy, "lower").contains("object.spec.parallelism >= 1"));
    assert!(expression(policy, "past its prrte-k8s.io/max-pods").ends_with(
        "object.spec.parallelism <= int(oldObject.metadata.annotations['prrte-k8s.io/max-pods'])"
    ));
    // The header says what the policy is for and what it needs.
    let a = T::try_parse_from(["manifest", "--name", "el", "--elastic", "--max-pods", "8"])
        .unwrap()
        .a;
    let text =
        render::render(&a.plan().unwrap(), "--name el --elastic --max-pods 8", None).unwrap();
    assert!(
        text.lines().any(|l| l
            .starts_with("# elastic up to 8 pods: the ValidatingAdmissionPolicy")
            && l.contains("Kubernetes 1.30+")),
        "{text}"
    );
    // Without a namespace the binding matches the Job by name alone.
    let objs = objects(&["--name", "el", "--elastic", "--max-pods", "8"]).unwrap();
    let binding = of_kind(&objs, "ValidatingAdmissionPolicyBinding");
    assert_eq!(binding["metadata"]["name"], "prrte-k8s.el");
    assert!(binding["spec"].get("matchResources").is_none(), "{binding}");
    // A job that is not elastic has no policy (its token cannot patch anything).
    let objs = objects(&["--name", "el"]).unwrap();
    assert!(!objs.iter().any(|o| o["kind"]
        .as_str()
        .unwrap()
        .starts_with("ValidatingAdmission")));
}

/// A JSON object as a policy's CEL sees it (numbers as `int`).
fn cel(v: &Value) -> cel_interpreter::Value {
    use cel_interpreter::Value as C;
    use std::sync::Arc;
    match v {
        Value::Null => C::Null,
        Value::Bool(b) => C::Bool(*b),
        Value::Number(n) => n
            .as_i64()
            .map(C::Int)
            .unwrap_or_else(|| C::Float(n.as_f64().unwrap())),
        Value::String(s) => C::String(Arc::new(s.clone())),
        Value::Array(a) => C::List(Arc::new(a.iter().map(cel).collect())),
        Value::Object(m) => C::from(
            m.iter()
                .map(|(k, v)| (k.clone(), cel(v)))
                .collect::<std::collections::HashMap<String, C>>(),
        ),
    }
}

/// What the API server decides, under `policy`, on `user`'s update of `old` to `new` in
/// namespace `ns`: admitted, or the messages of the validations that failed (an expression
/// that does not evaluate fails, as with `failurePolicy: Fail`).
fn admit(
    policy: &Value,
    old: &Value,
    new: &Value,
    user: &str,
    ns: &str,
) -> Result<(), Vec<String>> {
    let mut ctx = cel_interpreter::Context::default();
    // Kubernetes' `dyn()`: only a type-check hint there, the value as it is here.
    ctx.add_function(
        "dyn",
        |v: cel_interpreter::Value| -> Result<cel_interpreter::Value, cel_interpreter::ExecutionError> {
            Ok(v)
        },
    );
    ctx.add_variable_from_value("object", cel(new));
    ctx.add_variable_from_value("oldObject", cel(old));
    ctx.add_variable_from_value(
        "request",
        cel(&json!({"namespace": ns, "userInfo": {"username": user}})),
    );
    let holds = |e: &str| {
        let program =
            cel_interpreter::Program::compile(e).unwrap_or_else(|err| panic!("{e}: {err}"));
        match program.execute(&ctx) {
            Ok(cel_interpreter::Value::Bool(b)) => Ok(b),
            other => Err(format!("{e}: {other:?}")),
        }
    };
    let spec = &policy["spec"];
    for m in spec["matchConditions"].as_array().unwrap() {
        if !holds(m["expression"].as_str().unwrap()).unwrap() {
            return Ok(());
        }
    }
    let failed: Vec<String> = spec["validations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| match holds(v["expression"].as_str().unwrap()) {
            Ok(true) => None,
            Ok(false) => Some(v["message"].as_str().unwrap().to_string()),
            Err(e) => Some(format!("error: {e}")),
        })
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed)
    }
}

/// `target` with the JSON merge patch `patch` applied (RFC 7386, as `kubectl patch --type
/// merge` sends it).
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let t = target.as_object_mut().unwrap();
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

fn patched(v: &Value, patch: Value) -> Value {
    let mut out = v.clone();
    merge(&mut out, &patch);
    out
}

#[test]
fn the_rendered_policies_admit_a_growth_and_refuse_the_attacks() {
    let objs = objects(&[
        "--name",
        "el",
        "--pods",
        "4",
        "--elastic",
        "--max-pods",
        "8",
        "-n",
        "hpc",
    ])
    .unwrap();
    let policy = of_kind(&objs, "ValidatingAdmissionPolicy");
    let job = of_kind(&objs, "Job").clone();
    let sa = of_kind(&objs, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let token = format!("system:serviceaccount:hpc:{sa}");
    let by_token = |patch: Value| admit(policy, &job, &patched(&job, patch), &token, "hpc");
    // What grow does.
    assert_eq!(
        by_token(json!({"spec": {"parallelism": 6, "completions": 6}})),
        Ok(())
    );
    // What the API server changes itself on that update.
    assert_eq!(
        by_token(
            json!({"metadata": {"resourceVersion": "2", "generation": 2, "managedFields": [{"manager": "prrte-k8s"}]},
                        "spec": {"parallelism": 6, "completions": 6}})
        ),
        Ok(())
    );
    assert_eq!(
        by_token(json!({"spec": {"parallelism": 8, "completions": 8}})),
        Ok(())
    );
    // What a release does (the highest pods given back).
    assert_eq!(
        by_token(json!({"spec": {"parallelism": 2, "completions": 2}})),
        Ok(())
    );
    // What a compromised rank would do with the token.
    for (attack, refusal) in [
        (
            json!({"spec": {"parallelism": 9, "completions": 9}}),
            "past its prrte-k8s.io/max-pods",
        ),
        (
            json!({"metadata": {"annotations": {"prrte-k8s.io/max-pods": "1000"}}, "spec": {"parallelism": 9, "completions": 9}}),
            "Job's metadata",
        ),
        (json!({"spec": {"parallelism": 6}}), "equal"),
        (
            json!({"spec": {"parallelism": 0, "completions": 0}}),
            "lower",
        ),
        (
            json!({"spec": {"suspend": true}}),
            "may change only the Job's spec.parallelism",
        ),
        (
            json!({"spec": {"activeDeadlineSeconds": 1}}),
            "may change only the Job's spec.parallelism",
        ),
        (
            json!({"spec": {"template": {"spec": {"serviceAccountName": "default"}}}}),
            "may change only the Job's spec.parallelism",
        ),
        // Fields no list of fixed fields named: one a later Kubernetes adds, one the Job had
        // and the update drops.
        (
            json!({"spec": {"newFieldOfALaterKubernetes": {"x": 1}}}),
            "may change only the Job's spec.parallelism",
        ),
        (
            json!({"spec": {"backoffLimit": null}}),
            "may change only the Job's spec.parallelism",
        ),
        (
            json!({"spec": {"managedBy": "example.com/other"}}),
            "may change only the Job's spec.parallelism",
        ),
        (
            json!({"metadata": {"labels": {"x": "y"}}}),
            "Job's metadata",
        ),
        (json!({"metadata": {"finalizers": ["x"]}}), "Job's metadata"),
        (
            json!({"metadata": {"generateName": "other-"}}),
            "Job's metadata",
        ),
        (
            json!({"metadata": {"newFieldOfALaterKubernetes": "x"}}),
            "Job's metadata",
        ),
        (json!({"metadata": {"labels": null}}), "Job's metadata"),
    ] {
        let e = by_token(attack.clone()).expect_err(&format!("admitted: {attack}"));
        assert!(e.iter().any(|m| m.contains(refusal)), "{attack}: {e:?}");
        assert!(!e.iter().any(|m| m.starts_with("error")), "{attack}: {e:?}");
    }
    // Anyone else is not narrowed by it.
    let admin = patched(&job, json!({"spec": {"suspend": true, "parallelism": 20}}));
    assert_eq!(
        admit(policy, &job, &admin, "kubernetes-admin", "hpc"),
        Ok(())
    );

    // A StatefulSet's Scale: up to the rendered max-pods, down to 1.
    let objs = objects(&[
        "--name",
        "s",
        "--kind",
        "statefulset",
        "--pods",
        "2",
        "--elastic",
        "--max-pods",
        "3",
    ])
    .unwrap();
    let policy = of_kind(&objs, "ValidatingAdmissionPolicy");
    let sa = of_kind(&objs, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let token = format!("system:serviceaccount:default:{sa}");
    let scale = |n: i64| json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {"name": "s"}, "spec": {"replicas": n}});
    let by_token = |to: i64| admit(policy, &scale(2), &scale(to), &token, "default");
    assert_eq!(by_token(3), Ok(()));
    assert!(by_token(4).unwrap_err()[0].contains("past its prrte-k8s.io/max-pods (3)"));
    assert_eq!(by_token(1), Ok(()));
    assert!(by_token(0).unwrap_err()[0].contains("lower"));
    assert_eq!(
        admit(policy, &scale(2), &scale(10), "kubernetes-admin", "default"),
        Ok(())
    );
}

#[test]
fn two_jobs_never_share_an_admission_policy_name() {
    let policy = |ns: &str, name: &str| {
        let objs = objects(&["--name", name, "-n", ns, "--elastic", "--max-pods", "4"]).unwrap();
        let name = of_kind(&objs, "ValidatingAdmissionPolicy")["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_string();
        let binding = of_kind(&objs, "ValidatingAdmissionPolicyBinding");
        assert_eq!(binding["metadata"]["name"], name);
        assert_eq!(binding["spec"]["policyName"], name);
        name
    };
    // Namespace `a-b` job `c` and namespace `a` job `b-c`: the names once rendered alike.
    let first = policy("a-b", "c");
    let second = policy("a", "b-c");
    assert_ne!(first, second);
    assert_eq!(first, "prrte-k8s.a-b.c");
    assert_eq!(second, "prrte-k8s.a.b-c");
    // A job without a namespace cannot take a namespaced job's name either (a job name has no
    // `.`).
    let objs = objects(&["--name", "a", "--elastic", "--max-pods", "4"]).unwrap();
    assert_eq!(
        of_kind(&objs, "ValidatingAdmissionPolicy")["metadata"]["name"],
        "prrte-k8s.a"
    );
    assert!(
        T::try_parse_from(["manifest", "--name", "a.b", "--elastic", "--max-pods", "4"])
            .unwrap()
            .a
            .plan()
            .is_err(),
        "a job name with a dot was taken"
    );
    // The longest: a 63-character namespace and a 40-character job name make a DNS subdomain.
    let longest = policy(&"n".repeat(63), &format!("j{}", "0".repeat(39)));
    assert!(longest.len() <= 253, "{longest}");
    for label in longest.split('.') {
        assert!(
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-'),
            "{longest}: {label}"
        );
    }
}
