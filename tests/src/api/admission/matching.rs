//! Which requests a policy's `matchConstraints` and a binding's `matchResources` select:
//! resource rules (operations, API groups and versions, resources and subresources, names,
//! scope), excluded rules, and the namespace and object selectors.

use super::attributes::Attributes;
use crate::api::selector::LabelSelector;
use serde_json::Value;

/// Whether `list` (a rule's field) holds `"*"` or `v`.
fn has(list: &Value, v: &str) -> bool {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|x| x == "*" || x == v)
}

/// Whether one rule (a `NamedRuleWithOperations`) selects the request.
fn rule_matches(r: &Value, a: &Attributes) -> bool {
    let rt = a.resource;
    let resource = r["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|res| {
            let (res, sub) = res.split_once('/').unwrap_or((res, ""));
            (res == "*" || res == rt.plural) && (sub == "*" || sub == a.subresource)
        });
    let scope = match r["scope"].as_str().unwrap_or("*") {
        "Cluster" => !rt.namespaced,
        "Namespaced" => rt.namespaced,
        _ => true,
    };
    let names = r["resourceNames"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    has(&r["operations"], a.operation)
        && has(&r["apiGroups"], rt.group)
        && has(&r["apiVersions"], rt.version)
        && resource
        && scope
        && (names.is_empty() || names.iter().any(|n| n.as_str() == Some(a.name)))
}

/// Whether a label selector at `sel` (absent: every object) selects `obj`; a selector that
/// does not parse selects nothing.
fn selects(sel: &Value, obj: &Value) -> bool {
    if sel.is_null() {
        return true;
    }
    LabelSelector::from_object(sel).is_ok_and(|s| s.matches(obj))
}

/// Whether `m` (a `matchConstraints` or `matchResources`) selects the request; `rules_required`
/// for a policy's (a binding's without rules selects every request its policy does).
/// `namespace` is the request's Namespace object.
pub(super) fn matches(
    m: &Value,
    a: &Attributes,
    namespace: Option<&Value>,
    rules_required: bool,
) -> bool {
    let rules = m["resourceRules"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if (rules_required || !rules.is_empty()) && !rules.iter().any(|r| rule_matches(r, a)) {
        return false;
    }
    let excluded = m["excludeResourceRules"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if excluded.iter().any(|r| rule_matches(r, a)) {
        return false;
    }
    // A Namespace is selected by its own labels; any other cluster-scoped object by every
    // namespace selector.
    let ns_ok = if a.resource.is("", "namespaces") {
        a.object
            .or(a.old_object)
            .is_some_and(|o| selects(&m["namespaceSelector"], o))
    } else if !a.resource.namespaced {
        true
    } else {
        namespace.is_some_and(|n| selects(&m["namespaceSelector"], n))
    };
    // The object selector selects the request if it selects the object or the old object.
    let obj_ok = [a.object, a.old_object]
        .into_iter()
        .flatten()
        .any(|o| selects(&m["objectSelector"], o));
    ns_ok && obj_ok
}
