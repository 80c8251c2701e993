//! The decision on one request: each policy whose `matchConstraints` select it, with each of
//! its bindings whose `matchResources` do, is evaluated (`variables`, `matchConditions`,
//! `validations`); each failed validation, and each error under `failurePolicy: Fail`, is
//! enforced by the binding's `validationActions`. The first denial answers the request, as
//! Kubernetes' does: `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<policy>'
//! with binding '<binding>' denied request: <message>`, with the validation's reason (422
//! Invalid without one) and the message as the one cause.

use super::attributes::{Attributes, Policies};
use super::cel::Env;
use super::matching::matches;
use crate::api::status::ApiError;
use serde_json::{json, Value};

/// A failed validation or an error: its message and reason.
struct Failure {
    message: String,
    reason: Option<String>,
}

fn name_of(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or("")
}

/// The `request` variable (an AdmissionRequest: empty fields left out, as Go's omitempty).
fn request(a: &Attributes) -> Value {
    let rt = a.resource;
    let kind = json!({"group": a.kind.0, "version": a.kind.1, "kind": a.kind.2});
    let resource = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    let mut user = json!({"username": a.user.username});
    if !a.user.uid.is_empty() {
        user["uid"] = json!(a.user.uid);
    }
    if !a.user.groups.is_empty() {
        user["groups"] = json!(a.user.groups);
    }
    let mut r = json!({
        "uid": crate::api::defaults::new_uid(),
        "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
        "operation": a.operation,
        "userInfo": user,
        "object": a.object,
        "oldObject": a.old_object,
        "dryRun": a.dry_run,
    });
    for (field, v) in [
        ("subResource", a.subresource),
        ("requestSubResource", a.subresource),
        ("name", a.name),
        ("namespace", a.namespace),
    ] {
        if !v.is_empty() {
            r[field] = json!(v);
        }
    }
    r
}

/// The failures of `policy` on the request (none when its match conditions do not hold).
fn evaluate(policy: &Value, a: &Attributes, namespace: Option<&Value>) -> Vec<Failure> {
    let spec = &policy["spec"];
    let fail = spec["failurePolicy"].as_str() != Some("Ignore");
    let error = |message: String| Failure {
        message,
        reason: None,
    };
    let null = Value::Null;
    let mut env = Env::new(&[
        ("object", a.object.unwrap_or(&null)),
        ("oldObject", a.old_object.unwrap_or(&null)),
        ("request", &request(a)),
        ("namespaceObject", namespace.unwrap_or(&null)),
    ]);
    env.define(&spec["variables"]);
    // Any condition false: not evaluated; else any error: the failure policy.
    let mut errors = Vec::new();
    for c in spec["matchConditions"].as_array().into_iter().flatten() {
        match env.holds(c["expression"].as_str().unwrap_or("")) {
            Ok(true) => {}
            Ok(false) => return Vec::new(),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return match (fail, errors.len()) {
            (false, _) => Vec::new(),
            (true, 1) => vec![error(errors.remove(0))],
            (true, _) => vec![error(format!("[{}]", errors.join(", ")))],
        };
    }
    let mut out = Vec::new();
    for v in spec["validations"].as_array().into_iter().flatten() {
        let expression = v["expression"].as_str().unwrap_or("").trim();
        match env.holds(expression) {
            Ok(true) => {}
            Ok(false) => out.push(Failure {
                message: message(&env, v, expression),
                reason: Some(v["reason"].as_str().unwrap_or("Invalid").to_string()),
            }),
            Err(e) if fail => out.push(error(e)),
            Err(_) => {}
        }
    }
    out
}

/// The message of a failed validation: its `messageExpression`'s (a string, not empty, one
/// line), else its `message`, else `failed expression: <expression>`.
fn message(env: &Env, v: &Value, expression: &str) -> String {
    if let Some(me) = v["messageExpression"].as_str() {
        if let Ok(cel_interpreter::Value::String(s)) = env.eval(me) {
            let s = s.trim();
            if !s.is_empty() && !s.contains('\n') {
                return s.to_string();
            }
        }
    }
    match v["message"]
        .as_str()
        .map(str::trim)
        .filter(|m| !m.is_empty())
    {
        Some(m) => m.to_string(),
        None => format!("failed expression: {expression}"),
    }
}

/// The HTTP code of a denial's reason (Kubernetes' `reasonToCode`).
fn code_of(reason: &str) -> (u16, &'static str) {
    match reason {
        "Forbidden" => (403, "Forbidden"),
        "Unauthorized" => (401, "Unauthorized"),
        "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    }
}

/// The denial of the request by `policy` through `binding`.
fn denial(a: &Attributes, policy: &str, binding: &str, f: &Failure) -> ApiError {
    let cause = format!(
        "ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {}",
        f.message
    );
    let rt = a.resource;
    let mut resource = rt.plural.to_string();
    if !a.subresource.is_empty() {
        resource = format!("{resource}/{}", a.subresource);
    }
    let qualified = if rt.group.is_empty() {
        resource.clone()
    } else {
        format!("{resource}.{}", rt.group)
    };
    let mut details = json!({"name": a.name, "kind": resource, "causes": [{"message": cause}]});
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    let (code, reason) = code_of(f.reason.as_deref().unwrap_or("Invalid"));
    ApiError {
        code,
        reason,
        message: format!("{qualified} \"{}\" is forbidden: {cause}", a.name),
        details: Some(details),
    }
}

/// Admits the request (with the warnings to send) or denies it.
pub fn admit(p: &Policies, a: &Attributes) -> Result<Vec<String>, ApiError> {
    let namespace = p.namespace.as_deref();
    let mut policies: Vec<&Value> = p.policies.iter().map(|o| o.as_ref()).collect();
    policies.sort_by_key(|o| name_of(o));
    let mut bindings: Vec<&Value> = p.bindings.iter().map(|o| o.as_ref()).collect();
    bindings.sort_by_key(|o| name_of(o));
    let mut warnings = Vec::new();
    let mut denied = None;
    for policy in policies {
        let pname = name_of(policy);
        if !matches(&policy["spec"]["matchConstraints"], a, namespace, true) {
            continue;
        }
        for binding in bindings
            .iter()
            .filter(|b| b["spec"]["policyName"].as_str() == Some(pname))
        {
            let spec = &binding["spec"];
            if spec["matchResources"].is_object()
                && !matches(&spec["matchResources"], a, namespace, false)
            {
                continue;
            }
            let bname = name_of(binding);
            let actions: Vec<&str> = spec["validationActions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for f in evaluate(policy, a, namespace) {
                if actions.contains(&"Deny") && denied.is_none() {
                    denied = Some(denial(a, pname, bname, &f));
                }
                if actions.contains(&"Warn") {
                    warnings.push(format!(
                        "Validation failed for ValidatingAdmissionPolicy '{pname}' with binding '{bname}': {}",
                        f.message
                    ));
                }
            }
        }
    }
    match denied {
        Some(e) => Err(e),
        None => Ok(warnings),
    }
}
