//! A custom object against its CRD's structural schema (OpenAPI v3 as apiextensions takes
//! it): unknown fields pruned (kept under `x-kubernetes-preserve-unknown-fields`), nulls of
//! non-nullable fields dropped, defaults filled, then types, `required`, `enum`, bounds,
//! lengths, patterns, `anyOf`/`oneOf`/`allOf`/`not` checked. The causes name each field as
//! the API server does ("spec.replicas: Invalid value: ...").

use serde_json::{Map, Value};

type Causes = Vec<(String, String)>;

/// Checks (and prunes, and defaults) object `v` against the root schema `s`; `apiVersion`,
/// `kind` and `metadata` are the server's, not the schema's.
pub(super) fn check_root(s: &Value, v: &mut Value, causes: &mut Causes) {
    walk(s, v, "", true, true, causes);
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(v: &Value, ty: &str) -> bool {
    let actual = type_name(v);
    actual == ty || (ty == "number" && actual == "integer")
}

/// The value as the API server quotes it in a message.
fn quoted(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) | Value::Array(_) => format!("\"{}\"", type_name(v)),
        other => other.to_string(),
    }
}

/// `prune`: drop unknown fields and nulls and fill defaults (not when checking a combinator's
/// branch).
fn walk(s: &Value, v: &mut Value, path: &str, root: bool, prune: bool, causes: &mut Causes) {
    let shown = if path.is_empty() { "<root>" } else { path };
    if v.is_null() && s["nullable"] == true {
        return;
    }
    if s["x-kubernetes-int-or-string"] == true {
        if !(v.is_string() || has_type(v, "integer")) {
            causes.push((
                shown.into(),
                format!(
                    "Invalid value: {}: {shown} in body must be of type int-or-string: {:?}",
                    quoted(v),
                    type_name(v)
                ),
            ));
            return;
        }
    } else if let Some(ty) = s["type"].as_str() {
        if !has_type(v, ty) {
            causes.push((
                shown.into(),
                format!(
                    "Invalid value: {}: {shown} in body must be of type {ty}: {:?}",
                    quoted(v),
                    type_name(v)
                ),
            ));
            return;
        }
    }
    match v {
        Value::Object(m) => object(s, m, path, root, prune, causes),
        Value::Array(a) => {
            if let Some(items) = s.get("items").filter(|i| i.is_object()) {
                for (i, x) in a.iter_mut().enumerate() {
                    walk(items, x, &format!("{path}[{i}]"), false, prune, causes);
                }
            }
        }
        _ => {}
    }
    values(s, v, shown, causes);
    combinators(s, v, path, shown, causes);
}

/// The fields of an object: pruned, nulls dropped, defaulted, recursed into, required.
fn object(
    s: &Value,
    m: &mut Map<String, Value>,
    path: &str,
    root: bool,
    prune: bool,
    causes: &mut Causes,
) {
    let props = s["properties"].as_object();
    let additional = s.get("additionalProperties");
    let preserve = s["x-kubernetes-preserve-unknown-fields"] == true;
    let embedded = root || s["x-kubernetes-embedded-resource"] == true;
    let keys: Vec<String> = m.keys().cloned().collect();
    for k in keys {
        if embedded
            && ["apiVersion", "kind", "metadata"].contains(&k.as_str())
            && (root || props.is_none_or(|p| !p.contains_key(&k)))
        {
            continue;
        }
        let child = props
            .and_then(|p| p.get(&k))
            .or(additional.filter(|a| a.is_object()));
        match child {
            Some(cs) => {
                if m[&k].is_null() && cs["nullable"] != true {
                    if prune {
                        m.remove(&k);
                    }
                } else if let Some(x) = m.get_mut(&k) {
                    walk(cs, x, &join(path, &k), false, prune, causes);
                }
            }
            None if !prune || preserve || additional == Some(&Value::Bool(true)) => {}
            None => {
                m.remove(&k);
            }
        }
    }
    if let Some(props) = props.filter(|_| prune) {
        for (k, cs) in props {
            if !m.contains_key(k) {
                if let Some(d) = cs.get("default") {
                    m.insert(k.clone(), d.clone());
                }
            }
        }
    }
    for r in s["required"].as_array().into_iter().flatten() {
        if let Some(r) = r.as_str() {
            if !m.contains_key(r) {
                causes.push((join(path, r), "Required value".into()));
            }
        }
    }
    let n = m.len() as u64;
    if s["maxProperties"].as_u64().is_some_and(|x| n > x) {
        causes.push((
            path.into(),
            format!(
                "Too many: {n}: must have at most {} items",
                s["maxProperties"]
            ),
        ));
    }
    if s["minProperties"].as_u64().is_some_and(|x| n < x) {
        causes.push((
            path.into(),
            format!(
                "Invalid value: {n}: must have at least {} properties",
                s["minProperties"]
            ),
        ));
    }
}

/// Enums, bounds, lengths and patterns.
fn values(s: &Value, v: &Value, shown: &str, causes: &mut Causes) {
    if let Some(e) = s["enum"].as_array() {
        if !e.contains(v) {
            let allowed: Vec<String> = e.iter().map(quoted).collect();
            causes.push((
                shown.into(),
                format!(
                    "Unsupported value: {}: supported values: {}",
                    quoted(v),
                    allowed.join(", ")
                ),
            ));
        }
    }
    if let Some(x) = v.as_f64().filter(|_| v.is_number()) {
        let excl_min = s["exclusiveMinimum"] == true;
        let excl_max = s["exclusiveMaximum"] == true;
        if let Some(min) = s["minimum"].as_f64() {
            if x < min || (excl_min && x == min) {
                let op = if excl_min {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                causes.push((
                    shown.into(),
                    format!(
                        "Invalid value: {v}: {shown} in body should be {op} {}",
                        s["minimum"]
                    ),
                ));
            }
        }
        if let Some(max) = s["maximum"].as_f64() {
            if x > max || (excl_max && x == max) {
                let op = if excl_max {
                    "less than"
                } else {
                    "less than or equal to"
                };
                causes.push((
                    shown.into(),
                    format!(
                        "Invalid value: {v}: {shown} in body should be {op} {}",
                        s["maximum"]
                    ),
                ));
            }
        }
    }
    if let Some(text) = v.as_str() {
        let len = text.chars().count() as u64;
        if s["maxLength"].as_u64().is_some_and(|m| len > m) {
            causes.push((
                shown.into(),
                format!("Too long: may not be more than {} bytes", s["maxLength"]),
            ));
        }
        if s["minLength"].as_u64().is_some_and(|m| len < m) {
            causes.push((
                shown.into(),
                format!(
                    "Invalid value: {}: {shown} in body should be at least {} chars long",
                    quoted(v),
                    s["minLength"]
                ),
            ));
        }
        if let Some(p) = s["pattern"].as_str() {
            if regex::Regex::new(p).is_ok_and(|re| !re.is_match(text)) {
                causes.push((
                    shown.into(),
                    format!(
                        "Invalid value: {}: {shown} in body should match '{p}'",
                        quoted(v)
                    ),
                ));
            }
        }
    }
    if let Some(a) = v.as_array() {
        let n = a.len() as u64;
        if s["maxItems"].as_u64().is_some_and(|m| n > m) {
            causes.push((
                shown.into(),
                format!("Too many: {n}: must have at most {} items", s["maxItems"]),
            ));
        }
        if s["minItems"].as_u64().is_some_and(|m| n < m) {
            causes.push((
                shown.into(),
                format!(
                    "Invalid value: {n}: {shown} in body should have at least {} items",
                    s["minItems"]
                ),
            ));
        }
    }
}

/// Whether `v` passes schema `s` (checked on a copy: nothing pruned or defaulted).
fn passes(s: &Value, v: &Value, path: &str) -> bool {
    let mut copy = v.clone();
    let mut causes = Vec::new();
    walk(s, &mut copy, path, false, false, &mut causes);
    causes.is_empty()
}

fn combinators(s: &Value, v: &Value, path: &str, shown: &str, causes: &mut Causes) {
    for sub in s["allOf"].as_array().into_iter().flatten() {
        let mut copy = v.clone();
        walk(sub, &mut copy, path, false, false, causes);
    }
    if let Some(any) = s["anyOf"].as_array() {
        if !any.iter().any(|sub| passes(sub, v, path)) {
            causes.push((
                shown.into(),
                format!(
                    "Invalid value: {}: {shown} in body must validate at least one schema (anyOf)",
                    quoted(v)
                ),
            ));
        }
    }
    if let Some(one) = s["oneOf"].as_array() {
        if one.iter().filter(|sub| passes(sub, v, path)).count() != 1 {
            causes.push((shown.into(), format!("Invalid value: {}: {shown} in body must validate one and only one schema (oneOf)", quoted(v))));
        }
    }
    if s["not"].is_object() && passes(&s["not"], v, path) {
        causes.push((
            shown.into(),
            format!(
                "Invalid value: {}: {shown} in body must not validate the schema (not)",
                quoted(v)
            ),
        ));
    }
}

/// The fields of `v` that the root schema `s` does not declare (what pruning drops), as the
/// API server names them in a strict decoding error: `spec.foo`, `spec.items[0].bar`. A null
/// is no field; `v` is left as it is.
pub(super) fn unknown_fields(s: &Value, v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    unknown(s, v, "", true, &mut out);
    out.sort();
    out
}

fn unknown(s: &Value, v: &Value, path: &str, root: bool, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            let props = s["properties"].as_object();
            let additional = s.get("additionalProperties");
            let open = s["x-kubernetes-preserve-unknown-fields"] == true
                || additional == Some(&Value::Bool(true));
            let embedded = root || s["x-kubernetes-embedded-resource"] == true;
            for (k, x) in m {
                if x.is_null()
                    || (embedded
                        && ["apiVersion", "kind", "metadata"].contains(&k.as_str())
                        && (root || props.is_none_or(|p| !p.contains_key(k))))
                {
                    continue;
                }
                match props
                    .and_then(|p| p.get(k))
                    .or(additional.filter(|a| a.is_object()))
                {
                    Some(cs) => unknown(cs, x, &join(path, k), false, out),
                    None if open => {}
                    None => out.push(join(path, k)),
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.get("items").filter(|i| i.is_object()) {
                for (i, x) in a.iter().enumerate() {
                    unknown(items, x, &format!("{path}[{i}]"), false, out);
                }
            }
        }
        _ => {}
    }
}
