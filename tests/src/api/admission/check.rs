//! The validation and defaults of policies and bindings, as Kubernetes' (the messages its
//! field errors have): required fields, supported values, and CEL that compiles.

use crate::api::resources::ResourceType;
use serde_json::{json, Value};

type Causes = Vec<(String, String)>;

const OPERATIONS: [&str; 5] = ["*", "CREATE", "UPDATE", "DELETE", "CONNECT"];
const REASONS: [&str; 4] = [
    "Unauthorized",
    "Forbidden",
    "Invalid",
    "RequestEntityTooLarge",
];
const ACTIONS: [&str; 3] = ["Audit", "Deny", "Warn"];

/// `"a", "b"`: the supported values of a message.
fn quoted(values: &[&str]) -> String {
    let q: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    q.join(", ")
}

fn unsupported(at: String, v: &Value, supported: &[&str]) -> (String, String) {
    (
        at,
        format!(
            "Unsupported value: {v}: supported values: {}",
            quoted(supported)
        ),
    )
}

fn required(at: impl Into<String>) -> (String, String) {
    (at.into(), "Required value".into())
}

fn nonempty_str(v: &Value) -> Option<&str> {
    v.as_str().filter(|s| !s.is_empty())
}

/// A CEL expression at `at`: present and compiling.
fn expression(at: String, v: &Value, causes: &mut Causes) {
    let Some(e) = nonempty_str(v) else {
        causes.push(required(at));
        return;
    };
    if let Err(err) = cel_interpreter::Program::compile(e) {
        let err = err.to_string().replace('\n', " ");
        causes.push((
            at,
            format!("Invalid value: {e:?}: compilation failed: ERROR: {err}"),
        ));
    }
}

/// The rules of a `matchConstraints` or `matchResources` at `at`.
fn match_resources(at: &str, m: &Value, rules_required: bool, causes: &mut Causes) {
    let rules = m["resourceRules"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if rules_required && rules.is_empty() {
        causes.push(required(format!("{at}.resourceRules")));
    }
    for list in ["resourceRules", "excludeResourceRules"] {
        for (i, r) in m[list].as_array().into_iter().flatten().enumerate() {
            let at = format!("{at}.{list}[{i}]");
            for field in ["apiGroups", "apiVersions", "operations", "resources"] {
                if r[field].as_array().is_none_or(Vec::is_empty) {
                    causes.push(required(format!("{at}.{field}")));
                }
            }
            for (j, op) in r["operations"].as_array().into_iter().flatten().enumerate() {
                if !op.as_str().is_some_and(|o| OPERATIONS.contains(&o)) {
                    causes.push(unsupported(
                        format!("{at}.operations[{j}]"),
                        op,
                        &OPERATIONS,
                    ));
                }
            }
        }
    }
    if let Some(p) = m.get("matchPolicy").filter(|p| !p.is_null()) {
        if !matches!(p.as_str(), Some("Exact" | "Equivalent")) {
            causes.push(unsupported(
                format!("{at}.matchPolicy"),
                p,
                &["Equivalent", "Exact"],
            ));
        }
    }
}

/// The checks of a ValidatingAdmissionPolicy.
fn policy(obj: &Value, causes: &mut Causes) {
    let spec = &obj["spec"];
    if spec.get("paramKind").is_some_and(|p| !p.is_null()) {
        causes.push((
            "spec.paramKind".into(),
            "Forbidden: the sandbox API server does not evaluate params (paramKind, a binding's paramRef)".into(),
        ));
    }
    match spec.get("matchConstraints").filter(|m| m.is_object()) {
        Some(m) => match_resources("spec.matchConstraints", m, true, causes),
        None => causes.push(required("spec.matchConstraints")),
    }
    let validations = spec["validations"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let audits = spec["auditAnnotations"].as_array().map_or(0, Vec::len);
    if validations.is_empty() && audits == 0 {
        causes.push((
            "spec.validations".into(),
            "Required value: validations or auditAnnotations must contain at least one item".into(),
        ));
    }
    for (i, v) in validations.iter().enumerate() {
        let at = format!("spec.validations[{i}]");
        expression(format!("{at}.expression"), &v["expression"], causes);
        if let Some(m) = nonempty_str(&v["messageExpression"]) {
            expression(format!("{at}.messageExpression"), &json!(m), causes);
        }
        if let Some(r) = v.get("reason").filter(|r| !r.is_null()) {
            if !r.as_str().is_some_and(|r| REASONS.contains(&r)) {
                causes.push(unsupported(format!("{at}.reason"), r, &REASONS));
            }
        }
    }
    for list in ["matchConditions", "variables"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            let at = format!("spec.{list}[{i}]");
            if nonempty_str(&c["name"]).is_none() {
                causes.push(required(format!("{at}.name")));
            }
            expression(format!("{at}.expression"), &c["expression"], causes);
        }
    }
    if let Some(f) = spec.get("failurePolicy").filter(|f| !f.is_null()) {
        if !matches!(f.as_str(), Some("Fail" | "Ignore")) {
            causes.push(unsupported(
                "spec.failurePolicy".into(),
                f,
                &["Fail", "Ignore"],
            ));
        }
    }
}

/// The checks of a ValidatingAdmissionPolicyBinding.
fn binding(obj: &Value, causes: &mut Causes) {
    let spec = &obj["spec"];
    if nonempty_str(&spec["policyName"]).is_none() {
        causes.push(required("spec.policyName"));
    }
    if spec.get("paramRef").is_some_and(|p| !p.is_null()) {
        causes.push((
            "spec.paramRef".into(),
            "Forbidden: the sandbox API server does not evaluate params (paramKind, a binding's paramRef)".into(),
        ));
    }
    let actions = spec["validationActions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if actions.is_empty() {
        causes.push((
            "spec.validationActions".into(),
            "Required value: at least one validation action is required".into(),
        ));
    }
    let mut seen = Vec::new();
    for (i, a) in actions.iter().enumerate() {
        let at = format!("spec.validationActions[{i}]");
        if !a.as_str().is_some_and(|a| ACTIONS.contains(&a)) {
            causes.push(unsupported(at, a, &ACTIONS));
        } else if seen.contains(&a) {
            causes.push((at, format!("Duplicate value: {a}")));
        } else {
            seen.push(a);
        }
    }
    if seen.contains(&&json!("Deny")) && seen.contains(&&json!("Warn")) {
        causes.push((
            "spec.validationActions".into(),
            format!("Invalid value: {}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)", Value::Array(actions.to_vec())),
        ));
    }
    if let Some(m) = spec.get("matchResources").filter(|m| m.is_object()) {
        match_resources("spec.matchResources", m, false, causes);
    }
}

/// The causes that make a policy or a binding invalid (nothing for another resource).
pub fn validate(rt: &ResourceType, obj: &Value) -> Causes {
    let mut causes = Vec::new();
    if std::ptr::eq(rt, &super::kinds::VALIDATINGADMISSIONPOLICIES) {
        policy(obj, &mut causes);
    } else if std::ptr::eq(rt, &super::kinds::VALIDATINGADMISSIONPOLICYBINDINGS) {
        binding(obj, &mut causes);
    }
    causes
}

/// The defaults of `m` (a `matchConstraints` or `matchResources`): every namespace and object,
/// equivalent requests, rules of any scope.
fn match_defaults(m: &mut Value) {
    for (field, v) in [
        ("matchPolicy", json!("Equivalent")),
        ("namespaceSelector", json!({})),
        ("objectSelector", json!({})),
    ] {
        if m.get(field).is_none_or(Value::is_null) {
            m[field] = v;
        }
    }
    for list in ["resourceRules", "excludeResourceRules"] {
        for r in m[list].as_array_mut().into_iter().flatten() {
            if r.get("scope").is_none_or(Value::is_null) && r.is_object() {
                r["scope"] = json!("*");
            }
        }
    }
}

/// Kubernetes' defaults of a policy (`failurePolicy: Fail`, its match constraints') and of a
/// binding (its match resources').
pub fn defaults(rt: &ResourceType, obj: &mut Value) {
    if std::ptr::eq(rt, &super::kinds::VALIDATINGADMISSIONPOLICIES) {
        let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
            return;
        };
        if spec.get("failurePolicy").is_none_or(Value::is_null) {
            spec["failurePolicy"] = json!("Fail");
        }
        if let Some(m) = spec.get_mut("matchConstraints").filter(|m| m.is_object()) {
            match_defaults(m);
        }
    } else if std::ptr::eq(rt, &super::kinds::VALIDATINGADMISSIONPOLICYBINDINGS) {
        if let Some(m) = obj
            .pointer_mut("/spec/matchResources")
            .filter(|m| m.is_object())
        {
            match_defaults(m);
        }
    }
}
