//! `x-kubernetes-validations`: the CEL rules of a CRD's schema, evaluated as the API server
//! evaluates them (through the environment of `crate::api::admission::cel`). A rule at any
//! node of the schema sees that node's value as `self`; one that reads `oldSelf` is a
//! transition rule, evaluated on an update only, where the old object has a value at the same
//! place (an object's field, an item of a `map` list with the same keys). A rule that fails
//! reports its `message` (its `messageExpression`'s value when that is a non-blank string of
//! one line; `failed rule: RULE` without either) at its node or at its `fieldPath`, as its
//! `reason` says (`FieldValueInvalid` by default: `spec: Invalid value: "object": MESSAGE`).
//! On an update, a rule that does not read `oldSelf` is not held against a value that did not
//! change (validation ratcheting).
//!
//! A CRD is refused at creation when a rule does not compile, calls a function the sandbox's
//! CEL does not have (Kubernetes' extension libraries: strings, lists, regex `find`, URLs,
//! quantities, IPs, `format`, optionals), sets `optionalOldSelf`, names an unknown `reason`
//! or a `fieldPath` the schema does not declare: it would otherwise be accepted and never
//! hold. Field names that need CEL's escaping (`a-b` as `a__dash__b`) are not translated.

use crate::api::admission::cel::{compile as parse, unknown_functions, Env};
use cel_interpreter::{Program, Value as Cel};
use serde_json::Value;

type Causes = Vec<(String, String)>;

const REASONS: &[&str] = &[
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

fn rules(s: &Value) -> &[Value] {
    s["x-kubernetes-validations"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Compiles `expression`, refusing what the sandbox cannot evaluate.
fn compile(expression: &str) -> Result<Program, String> {
    let program = parse(expression).map_err(|e| format!("compilation failed: {e}"))?;
    let unknown = unknown_functions(&program);
    if !unknown.is_empty() {
        return Err(format!(
            "compilation failed: the sandbox API server's CEL has no function {}",
            unknown.join(", ")
        ));
    }
    Ok(program)
}

/// The segments of a rule's `fieldPath` (`.a.b`, `.a['b.c']`); None if it is not one.
fn field_path(fp: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = fp;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']")?;
            out.push(r[..end].to_string());
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return None;
            }
            out.push(r[..end].to_string());
            rest = &r[end..];
        } else {
            return None;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Checks the rules of schema `s` (and of the schemas under it) as the API server does when
/// it takes a CRD; `path` names `s` (`spec.versions[0].schema.openAPIV3Schema`).
pub(super) fn check_definition(s: &Value, path: &str, causes: &mut Causes) {
    for (i, r) in rules(s).iter().enumerate() {
        let at = format!("{path}.x-kubernetes-validations[{i}]");
        match r["rule"].as_str().filter(|x| !x.trim().is_empty()) {
            None => causes.push((format!("{at}.rule"), "Required value".into())),
            Some(rule) => {
                if let Err(e) = compile(rule) {
                    causes.push((
                        format!("{at}.rule"),
                        format!("Invalid value: {rule:?}: {e}"),
                    ));
                }
            }
        }
        if let Some(m) = r["messageExpression"].as_str() {
            if let Err(e) = compile(m) {
                causes.push((
                    format!("{at}.messageExpression"),
                    format!("Invalid value: {m:?}: {e}"),
                ));
            }
        }
        if let Some(reason) = r["reason"].as_str() {
            if !REASONS.contains(&reason) {
                let supported: Vec<String> = REASONS.iter().map(|x| format!("{x:?}")).collect();
                causes.push((
                    format!("{at}.reason"),
                    format!(
                        "Unsupported value: {reason:?}: supported values: {}",
                        supported.join(", ")
                    ),
                ));
            }
        }
        if r["optionalOldSelf"] == true {
            causes.push((
                format!("{at}.optionalOldSelf"),
                "Forbidden: the sandbox API server's CEL has no optional types".into(),
            ));
        }
        if let Some(fp) = r["fieldPath"].as_str() {
            let declared = field_path(fp).is_some_and(|segs| {
                segs.iter()
                    .try_fold(s, |node, k| node["properties"].get(k))
                    .is_some()
            });
            if !declared {
                causes.push((
                    format!("{at}.fieldPath"),
                    format!("Invalid value: {fp:?}: fieldPath must be a field path valid for the schema"),
                ));
            }
        }
    }
    if let Some(props) = s["properties"].as_object() {
        for (k, child) in props {
            check_definition(child, &format!("{path}.properties[{k}]"), causes);
        }
    }
    for key in ["items", "additionalProperties"] {
        if s[key].is_object() {
            check_definition(&s[key], &format!("{path}.{key}"), causes);
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The item of old list `old` that has the keys of `item` (a `map` list's correlation).
fn same_keys<'a>(s: &Value, item: &Value, old: Option<&'a Value>) -> Option<&'a Value> {
    if s["x-kubernetes-list-type"] != "map" {
        return None;
    }
    let keys: Vec<&str> = s["x-kubernetes-list-map-keys"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    old?.as_array()?
        .iter()
        .find(|o| keys.iter().all(|k| o.get(*k) == item.get(*k)))
}

/// Evaluates the rules of schema `s` on `new` (and, for transition rules, `old`), then those
/// under it; `path` names the value (empty at the root).
pub(super) fn validate(
    s: &Value,
    new: &Value,
    old: Option<&Value>,
    path: &str,
    causes: &mut Causes,
) {
    for r in rules(s) {
        evaluate(s, r, new, old, path, causes);
    }
    match new {
        Value::Object(m) => {
            let props = s["properties"].as_object();
            let additional = s["additionalProperties"].is_object();
            for (k, v) in m {
                let old = old.and_then(|o| o.get(k));
                if let Some(child) = props.and_then(|p| p.get(k)) {
                    validate(child, v, old, &join(path, k), causes);
                } else if additional {
                    let at = format!("{path}[{k}]");
                    validate(&s["additionalProperties"], v, old, &at, causes);
                }
            }
        }
        Value::Array(a) if s["items"].is_object() => {
            for (i, item) in a.iter().enumerate() {
                let old = same_keys(s, item, old);
                validate(&s["items"], item, old, &format!("{path}[{i}]"), causes);
            }
        }
        _ => {}
    }
}

/// One rule at one value.
fn evaluate(
    s: &Value,
    r: &Value,
    new: &Value,
    old: Option<&Value>,
    path: &str,
    causes: &mut Causes,
) {
    let Some(Ok(program)) = r["rule"].as_str().map(parse) else {
        return;
    };
    let rule = r["rule"].as_str().unwrap_or("").trim();
    let transition = program.references().has_variable("oldSelf");
    let env = match old {
        Some(old) if transition => Env::new(&[("self", new), ("oldSelf", old)]),
        // A transition rule holds on a create, and where there was no value.
        None | Some(_) if transition => return,
        // Ratcheting: an unchanged value is not held to a rule it may not have met.
        Some(old) if old == new => return,
        _ => Env::new(&[("self", new)]),
    };
    let ty = s["type"].as_str().unwrap_or("");
    let mut field = path.to_string();
    if let Some(segs) = r["fieldPath"].as_str().and_then(field_path) {
        for seg in segs {
            field = join(&field, &seg);
        }
    }
    if field.is_empty() {
        field = "<nil>".into();
    }
    let message = match env.run(&program) {
        Ok(Cel::Bool(true)) => return,
        Ok(Cel::Bool(false)) => failure_message(r, rule, &env),
        Ok(other) => {
            let e = format!("no such overload: got {}, want bool", other.type_of());
            causes.push((
                field,
                format!("Invalid value: {ty:?}: {e} evaluating rule: {rule}"),
            ));
            return;
        }
        Err(e) => {
            causes.push((
                field,
                format!("Invalid value: {ty:?}: {e} evaluating rule: {rule}"),
            ));
            return;
        }
    };
    let text = match r["reason"].as_str().unwrap_or("FieldValueInvalid") {
        "FieldValueForbidden" => format!("Forbidden: {message}"),
        "FieldValueRequired" => format!("Required value: {message}"),
        "FieldValueDuplicate" => format!("Duplicate value: {ty:?}"),
        _ => format!("Invalid value: {ty:?}: {message}"),
    };
    causes.push((field, text));
}

/// What a failed rule says: its `messageExpression`'s value if that is a non-blank line,
/// else its `message`, else `failed rule: RULE`.
fn failure_message(r: &Value, rule: &str, env: &Env) -> String {
    let computed = r["messageExpression"]
        .as_str()
        .and_then(|m| parse(m).ok())
        .and_then(|p| env.run(&p).ok())
        .and_then(|v| match v {
            Cel::String(s) if !s.trim().is_empty() && !s.contains('\n') => Some(s.to_string()),
            _ => None,
        });
    computed
        .or_else(|| r["message"].as_str().map(String::from))
        .unwrap_or_else(|| format!("failed rule: {rule}"))
}
