//! The decision on synthetic requests: matching, conditions, failure policy, actions, the
//! denial's shape, and the validation of policies and bindings.

use super::*;
use crate::api::resources::{self, ResourceType};
use serde_json::{json, Value};
use std::sync::Arc;

fn policy(spec: Value) -> Value {
    let mut p = json!({"metadata": {"name": "p"}, "spec": spec});
    defaults(&VALIDATINGADMISSIONPOLICIES, &mut p);
    p
}

fn binding(name: &str, policy: &str, actions: &[&str]) -> Value {
    json!({"metadata": {"name": name}, "spec": {"policyName": policy, "validationActions": actions}})
}

fn jobs_rule() -> Value {
    json!({"resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]}]})
}

fn set(policies: &[Value], bindings: &[Value], ns_labels: Value) -> Policies {
    Policies {
        policies: policies.iter().cloned().map(Arc::new).collect(),
        bindings: bindings.iter().cloned().map(Arc::new).collect(),
        namespace: Some(Arc::new(
            json!({"metadata": {"name": "hpc", "labels": ns_labels}}),
        )),
    }
}

fn job(parallelism: i64) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "el", "namespace": "hpc", "labels": {"app": "el"}}, "spec": {"parallelism": parallelism}})
}

/// An update of Job `el` in `hpc` from `old` to `new` by `user`.
fn update(
    p: &Policies,
    rt: &'static ResourceType,
    old: &Value,
    new: &Value,
    user: &str,
) -> Result<Vec<String>, crate::api::ApiError> {
    let user = UserInfo {
        username: user.into(),
        ..Default::default()
    };
    admit(
        p,
        &Attributes {
            resource: rt,
            subresource: "",
            kind: (rt.group, rt.version, rt.kind),
            operation: "UPDATE",
            namespace: "hpc",
            name: "el",
            user: &user,
            dry_run: false,
            object: Some(new),
            old_object: Some(old),
        },
    )
}

#[test]
fn a_denial_answers_as_kubernetes_does() {
    let p = policy(json!({
        "matchConstraints": jobs_rule(),
        "validations": [{"expression": "object.spec.parallelism <= 8", "message": "at most 8", "reason": "Forbidden"}],
    }));
    let p = set(&[p], &[binding("b", "p", &["Deny"])], json!({}));
    assert_eq!(
        update(&p, &resources::JOBS, &job(4), &job(8), "u"),
        Ok(vec![])
    );
    let e = update(&p, &resources::JOBS, &job(4), &job(9), "u").unwrap_err();
    let cause = "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: at most 8";
    assert_eq!((e.code, e.reason), (403, "Forbidden"));
    assert_eq!(
        e.message,
        format!("jobs.batch \"el\" is forbidden: {cause}")
    );
    assert_eq!(
        e.details,
        Some(
            json!({"name": "el", "group": "batch", "kind": "jobs", "causes": [{"message": cause}]})
        )
    );
    // Without a reason: 422 Invalid; without a message: the expression.
    let p2 = policy(json!({
        "matchConstraints": jobs_rule(),
        "validations": [{"expression": "object.spec.parallelism <= 8"}],
    }));
    let p2 = set(&[p2], &[binding("b", "p", &["Deny"])], json!({}));
    let e = update(&p2, &resources::JOBS, &job(4), &job(9), "u").unwrap_err();
    assert_eq!((e.code, e.reason), (422, "Invalid"));
    assert!(
        e.message
            .ends_with("denied request: failed expression: object.spec.parallelism <= 8"),
        "{}",
        e.message
    );
}

#[test]
fn a_message_expression_a_variable_and_the_request_are_evaluated() {
    let p = policy(json!({
        "matchConstraints": jobs_rule(),
        "variables": [{"name": "limit", "expression": "int(object.metadata.labels.size()) * 2"}],
        "validations": [{
            "expression": "object.spec.parallelism <= variables.limit",
            "messageExpression": "request.userInfo.username + ' asked ' + string(object.spec.parallelism) + ' of ' + request.namespace + '/' + request.name",
            "message": "unused",
        }],
    }));
    let p = set(&[p], &[binding("b", "p", &["Deny"])], json!({}));
    assert!(update(&p, &resources::JOBS, &job(1), &job(2), "u").is_ok());
    let e = update(&p, &resources::JOBS, &job(1), &job(3), "alice").unwrap_err();
    assert!(
        e.message
            .ends_with("denied request: alice asked 3 of hpc/el"),
        "{}",
        e.message
    );
}

#[test]
fn match_conditions_and_the_failure_policy_decide_what_is_evaluated() {
    let spec = |failure: &str, condition: &str| {
        policy(json!({
            "failurePolicy": failure,
            "matchConstraints": jobs_rule(),
            "matchConditions": [{"name": "c", "expression": condition}],
            "validations": [{"expression": "object.spec.parallelism <= 8", "message": "at most 8"}],
        }))
    };
    let b = [binding("b", "p", &["Deny"])];
    // A condition false: not evaluated.
    let p = set(
        &[spec("Fail", "request.userInfo.username == 'sa'")],
        &b,
        json!({}),
    );
    assert!(update(&p, &resources::JOBS, &job(1), &job(20), "admin").is_ok());
    assert!(update(&p, &resources::JOBS, &job(1), &job(20), "sa").is_err());
    // A condition that errs: denied under Fail, admitted under Ignore.
    let p = set(&[spec("Fail", "object.spec.nope == 1")], &b, json!({}));
    let e = update(&p, &resources::JOBS, &job(1), &job(2), "u").unwrap_err();
    assert_eq!(e.code, 422);
    assert!(
        e.message
            .contains("denied request: expression 'object.spec.nope == 1' resulted in error"),
        "{}",
        e.message
    );
    let p = set(&[spec("Ignore", "object.spec.nope == 1")], &b, json!({}));
    assert!(update(&p, &resources::JOBS, &job(1), &job(20), "u").is_ok());
    // A validation that errs: the same.
    let erring = |failure: &str| {
        policy(json!({
            "failurePolicy": failure,
            "matchConstraints": jobs_rule(),
            "validations": [{"expression": "object.spec.nope > 1", "message": "never"}],
        }))
    };
    let p = set(&[erring("Fail")], &b, json!({}));
    assert!(update(&p, &resources::JOBS, &job(1), &job(2), "u").is_err());
    let p = set(&[erring("Ignore")], &b, json!({}));
    assert!(update(&p, &resources::JOBS, &job(1), &job(2), "u").is_ok());
}

#[test]
fn only_bound_matching_requests_are_checked_and_warn_and_audit_do_not_deny() {
    let never = policy(json!({
        "matchConstraints": jobs_rule(),
        "validations": [{"expression": "false", "message": "no"}],
    }));
    let check = |bindings: &[Value], rt: &'static ResourceType, ns_labels: Value| {
        update(
            &set(std::slice::from_ref(&never), bindings, ns_labels),
            rt,
            &job(1),
            &job(2),
            "u",
        )
    };
    // Not bound, bound to another policy: nothing.
    assert_eq!(check(&[], &resources::JOBS, json!({})), Ok(vec![]));
    assert_eq!(
        check(
            &[binding("b", "other", &["Deny"])],
            &resources::JOBS,
            json!({})
        ),
        Ok(vec![])
    );
    // Another resource.
    assert_eq!(
        check(
            &[binding("b", "p", &["Deny"])],
            &resources::STATEFULSETS,
            json!({})
        ),
        Ok(vec![])
    );
    // Warn: a warning; Audit: nothing; both.
    assert_eq!(
        check(
            &[binding("b", "p", &["Warn", "Audit"])],
            &resources::JOBS,
            json!({})
        ),
        Ok(vec![
            "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': no".to_string()
        ])
    );
    assert_eq!(
        check(
            &[binding("b", "p", &["Audit"])],
            &resources::JOBS,
            json!({})
        ),
        Ok(vec![])
    );
    // A binding's namespace selector.
    let mut in_hpc = binding("b", "p", &["Deny"]);
    in_hpc["spec"]["matchResources"] =
        json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "hpc"}}});
    assert!(check(
        &[in_hpc.clone()],
        &resources::JOBS,
        json!({"kubernetes.io/metadata.name": "hpc"})
    )
    .is_err());
    assert!(check(
        &[in_hpc],
        &resources::JOBS,
        json!({"kubernetes.io/metadata.name": "other"})
    )
    .is_ok());
    // An object selector, names and operations of the policy's rules.
    let mut sel = binding("b", "p", &["Deny"]);
    sel["spec"]["matchResources"] = json!({"objectSelector": {"matchLabels": {"app": "other"}}});
    assert!(check(&[sel], &resources::JOBS, json!({})).is_ok());
    for (rule, denied) in [
        (json!({"resourceNames": ["el"]}), true),
        (json!({"resourceNames": ["other"]}), false),
        (json!({"operations": ["CREATE"]}), false),
        (json!({"resources": ["jobs/status"]}), false),
        (json!({"resources": ["*"]}), true),
        (json!({"apiVersions": ["v2"]}), false),
        (json!({"scope": "Cluster"}), false),
    ] {
        let mut p = never.clone();
        for (k, v) in rule.as_object().unwrap() {
            p["spec"]["matchConstraints"]["resourceRules"][0][k] = v.clone();
        }
        let r = update(
            &set(&[p], &[binding("b", "p", &["Deny"])], json!({})),
            &resources::JOBS,
            &job(1),
            &job(2),
            "u",
        );
        assert_eq!(r.is_err(), denied, "{rule}: {r:?}");
    }
}

#[test]
fn policies_and_bindings_are_validated_as_kubernetes_does() {
    let causes = |rt: &'static ResourceType, spec: Value| -> Vec<String> {
        validate(rt, &json!({"spec": spec}))
            .into_iter()
            .map(|(f, m)| format!("{f}: {m}"))
            .collect()
    };
    let p = &VALIDATINGADMISSIONPOLICIES;
    assert_eq!(
        causes(p, json!({})),
        [
            "spec.matchConstraints: Required value",
            "spec.validations: Required value: validations or auditAnnotations must contain at least one item"
        ]
    );
    let c = causes(
        p,
        json!({"matchConstraints": {"resourceRules": []}, "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
               "validations": [{"expression": "object.(", "reason": "Nope"}], "failurePolicy": "Maybe"}),
    );
    for want in [
        "spec.matchConstraints.resourceRules: Required value",
        "spec.paramKind: Forbidden",
        "spec.validations[0].expression: Invalid value: \"object.(\": compilation failed",
        "spec.validations[0].reason: Unsupported value: \"Nope\"",
        "spec.failurePolicy: Unsupported value: \"Maybe\"",
    ] {
        assert!(c.iter().any(|m| m.starts_with(want)), "{want}: {c:?}");
    }
    let b = &VALIDATINGADMISSIONPOLICYBINDINGS;
    assert_eq!(
        causes(b, json!({})),
        [
            "spec.policyName: Required value",
            "spec.validationActions: Required value: at least one validation action is required"
        ]
    );
    let c = causes(
        b,
        json!({"policyName": "p", "validationActions": ["Deny", "Warn", "Deny", "Log"]}),
    );
    assert_eq!(c.len(), 3, "{c:?}");
    assert!(
        c[0].starts_with("spec.validationActions[2]: Duplicate value"),
        "{c:?}"
    );
    assert!(
        c[1].starts_with("spec.validationActions[3]: Unsupported value: \"Log\""),
        "{c:?}"
    );
    assert!(
        c[2].contains("must not contain both Deny and Warn"),
        "{c:?}"
    );
    // The defaults.
    let d = policy(json!({"matchConstraints": jobs_rule()}));
    assert_eq!(d["spec"]["failurePolicy"], "Fail");
    assert_eq!(d["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
    assert_eq!(
        d["spec"]["matchConstraints"]["resourceRules"][0]["scope"],
        "*"
    );
}

#[test]
fn writes_outside_a_request_are_not_admitted_and_inside_one_are() {
    assert_eq!(current(), None);
    let user = UserInfo {
        username: "u".into(),
        ..Default::default()
    };
    let (seen, warnings) = during(user.clone(), "status", true, || {
        warn(vec!["w".into()]);
        let inner = as_server(current);
        (current(), inner)
    });
    assert_eq!(seen, (Some((user, "status".to_string(), true)), None));
    assert_eq!(warnings, ["w"]);
    assert_eq!(current(), None);
}
