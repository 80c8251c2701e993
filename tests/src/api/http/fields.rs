//! Unknown fields of a write to a custom resource, by its `fieldValidation` (as the API server
//! does since Kubernetes 1.27): `Strict` refuses the write with 400 naming each field, `Warn`
//! (the default) keeps it and names each field in a `Warning` header, `Ignore` says nothing;
//! the fields are pruned either way. A server-side apply with one fails whatever the
//! directive, as the API server's typed patch does (500, `field not declared in schema`).

use crate::api::crd;
use crate::api::resources::ResourceType;
use crate::api::status::ApiError;
use serde_json::Value;
use std::collections::HashMap;

/// The `fieldValidation` of a write.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Directive {
    Ignore,
    Warn,
    Strict,
}

/// What a write sends: a whole object (create, update), a merge patch, or an apply.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Write {
    Object,
    MergePatch,
    Apply,
}

/// The write's directive (`options`: `CreateOptions`, `UpdateOptions` or `PatchOptions`).
pub(super) fn directive(q: &HashMap<String, String>, options: &str) -> Result<Directive, ApiError> {
    match q.get("fieldValidation").map(String::as_str) {
        None | Some("") | Some("Warn") => Ok(Directive::Warn),
        Some("Strict") => Ok(Directive::Strict),
        Some("Ignore") => Ok(Directive::Ignore),
        Some(other) => Err(ApiError::new(
            422,
            "Invalid",
            format!("{options}.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""),
        )),
    }
}

/// Checks the body `v` of a write of `rt` (`ns`/`name`: the object written): the warnings to
/// send (`unknown field "spec.foo"`), or the error that refuses it.
pub(super) fn check(
    rt: &ResourceType,
    ns: &str,
    name: &str,
    directive: Directive,
    write: Write,
    v: &Value,
) -> Result<Vec<String>, ApiError> {
    let unknown = crd::unknown_fields(rt, v);
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    if write == Write::Apply {
        let at = if ns.is_empty() {
            format!("/{name}")
        } else {
            format!("{ns}/{name}")
        };
        let errors: Vec<String> = unknown
            .iter()
            .map(|f| format!(".{f}: field not declared in schema"))
            .collect();
        let errors = if errors.len() == 1 {
            errors[0].clone()
        } else {
            format!("errors:\n  {}", errors.join("\n  "))
        };
        return Err(ApiError::new(
            500,
            "",
            format!(
                "failed to create typed patch object ({at}; {}, Kind={}): {errors}",
                rt.api_version(),
                rt.kind
            ),
        ));
    }
    let each: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field {f:?}"))
        .collect();
    match directive {
        Directive::Ignore => Ok(Vec::new()),
        Directive::Warn => Ok(each),
        Directive::Strict => {
            let strict = format!("strict decoding error: {}", each.join(", "));
            Err(ApiError::bad_request(match write {
                Write::Object => format!(
                    "{kind} in version {:?} cannot be handled as a {kind}: {strict}",
                    rt.version,
                    kind = rt.kind
                ),
                _ => strict,
            }))
        }
    }
}

/// `Warning` header values for `warnings` (code 299, no agent), as the API server sends them.
pub(super) fn warning_headers(warnings: &[String]) -> Vec<http::HeaderValue> {
    warnings
        .iter()
        .filter_map(|w| {
            let quoted = w.replace('\\', "\\\\").replace('"', "\\\"");
            http::HeaderValue::from_str(&format!("299 - \"{quoted}\"")).ok()
        })
        .collect()
}
