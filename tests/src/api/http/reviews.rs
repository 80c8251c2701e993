//! Access reviews: SelfSubjectAccessReview, SelfSubjectRulesReview, SelfSubjectReview.

use super::response::{json_response, Body};
use super::state::State;
use crate::api::auth::{Attributes, Identity, RightsSource};
use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use http::Response;
use serde_json::{json, Value};

pub(super) fn non_resource_allowed(id: &Identity, path: &str, verb: &str) -> bool {
    let discovery = [
        "/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi",
    ];
    if verb == "get"
        && discovery
            .iter()
            .any(|p| path == *p || path.starts_with(&format!("{p}/")))
    {
        return true;
    }
    matches!(&id.source, RightsSource::Static { namespace: None, rules } if rules.iter().any(|r| r.verbs.iter().any(|v| v == "*") && r.resources.iter().any(|x| x == "*")))
}

pub(super) fn review(
    st: &State,
    id: &Identity,
    rt: &ResourceType,
    body: Value,
) -> Result<Response<Body>, ApiError> {
    let body = (rt.normalize)(body)
        .map_err(|e| ApiError::bad_request(format!("{} cannot be decoded: {e}", rt.kind)))?;
    let mut out = body.clone();
    out["apiVersion"] = json!(rt.api_version());
    out["kind"] = json!(rt.kind);
    if out.get("metadata").is_none() {
        out["metadata"] = json!({});
    }
    out["metadata"]["creationTimestamp"] = Value::Null;
    match rt.plural {
        "selfsubjectaccessreviews" => {
            let allowed = if let Some(ra) = body.pointer("/spec/resourceAttributes") {
                let s = |k: &str| ra.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                let a = Attributes {
                    verb: s("verb"),
                    group: s("group"),
                    resource: s("resource"),
                    subresource: s("subresource"),
                    namespace: Some(s("namespace")).filter(|x| !x.is_empty()),
                    name: Some(s("name")).filter(|x| !x.is_empty()),
                };
                id.allowed(&st.store, &a)
            } else if let Some(na) = body.pointer("/spec/nonResourceAttributes") {
                let path = na.get("path").and_then(Value::as_str).unwrap_or("");
                let verb = na.get("verb").and_then(Value::as_str).unwrap_or("");
                non_resource_allowed(id, path, verb)
            } else {
                return Err(ApiError::invalid(rt, "", &[("spec.resourceAttributes".into(), "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified".into())]));
            };
            let reason = if allowed {
                format!("allowed for user \"{}\"", id.user)
            } else {
                String::new()
            };
            out["status"] = json!({"allowed": allowed});
            if allowed {
                out["status"]["reason"] = json!(reason);
            }
        }
        "selfsubjectrulesreviews" => {
            let ns = body
                .pointer("/spec/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            let rules: Vec<Value> = id
                .rules(&st.store)
                .into_iter()
                .filter(|r| r.namespace.is_none() || r.namespace.as_deref() == Some(ns))
                .map(|r| {
                    let mut v = r.rule.to_json();
                    if !r.resource_names.is_empty() {
                        v["resourceNames"] = json!(r.resource_names);
                    }
                    v
                })
                .collect();
            out["status"] = json!({
                "resourceRules": rules,
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/readyz", "/version", "/version/"]}],
                "incomplete": false,
            });
        }
        "selfsubjectreviews" => {
            out["status"] =
                json!({"userInfo": {"username": id.user, "uid": id.uid, "groups": id.groups}});
        }
        _ => return Err(ApiError::method_not_allowed(rt.plural)),
    }
    Ok(json_response(201, &out))
}
