//! Errors as Kubernetes `Status` objects.

use super::resources::ResourceType;
use serde_json::{json, Value};

/// An API error: turned into a `Status` body with the same code.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} {})", self.message, self.code, self.reason)
    }
}

impl std::error::Error for ApiError {}

fn details(rt: &ResourceType, name: &str) -> Value {
    let mut d = json!({ "name": name, "kind": rt.plural });
    if !rt.group.is_empty() {
        d["group"] = json!(rt.group);
    }
    d
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{}\" not found", rt.qualified(), name),
            details: Some(details(rt, name)),
        }
    }
    pub fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }
    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        ApiError {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{} \"{}\" already exists", rt.qualified(), name),
            details: Some(details(rt, name)),
        }
    }
    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> Self {
        ApiError {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} \"{}\": {}",
                rt.qualified(),
                name,
                why
            ),
            details: Some(details(rt, name)),
        }
    }
    /// 422 Invalid: `causes` are (field, message) pairs, each message as a field error words
    /// it (`Invalid value: ...`, `Required value`, `Forbidden: ...`), which gives its reason.
    pub fn invalid(rt: &ResourceType, name: &str, causes: &[(String, String)]) -> Self {
        let text: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let mut d = details(rt, name);
        d["kind"] = json!(rt.kind);
        d["causes"] = Value::Array(
            causes
                .iter()
                .map(|(f, m)| json!({"reason": field_reason(m), "message": m, "field": f}))
                .collect(),
        );
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!("{} \"{}\" is invalid: {}", rt.kind, name, aggregate(&text)),
            details: Some(d),
        }
    }
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }
    pub fn method_not_allowed(what: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource: {what}"),
        )
    }
    pub fn unsupported_media_type(ct: &str) -> Self {
        if ct.contains("protobuf") {
            return Self::new(415, "UnsupportedMediaType", format!("the sandbox API server reads JSON and YAML request bodies, not {ct:?}: kubectl 1.32 and later send protobuf for typed commands such as `kubectl create namespace`; use `kubectl create -f FILE` or `kubectl apply -f FILE` instead"));
        }
        Self::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/merge-patch+json, application/strategic-merge-patch+json, application/json-patch+json, application/apply-patch+yaml (got {ct:?})"))
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty() {
            // An error the API server has no reason for (reason Unknown) leaves it out.
            s.as_object_mut().map(|m| m.remove("reason"));
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

/// A success `Status` (returned by deletecollection and some deletes).
pub fn success(details: Option<Value>) -> Value {
    let mut s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
    if let Some(d) = details {
        s["details"] = d;
    }
    s
}

/// Errors as Kubernetes' aggregate prints them: one alone, several in brackets.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        _ => format!("[{}]", errors.join(", ")),
    }
}

/// The reason of a field error (a `StatusCause`), from the words its message begins with.
fn field_reason(message: &str) -> &'static str {
    const REASONS: &[(&str, &str)] = &[
        ("Required value", "FieldValueRequired"),
        ("Forbidden", "FieldValueForbidden"),
        ("Duplicate value", "FieldValueDuplicate"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Too long", "FieldValueTooLong"),
        ("Too many", "FieldValueTooMany"),
        ("Not found", "FieldValueNotFound"),
    ];
    REASONS
        .iter()
        .find(|(words, _)| message.starts_with(words))
        .map_or("FieldValueInvalid", |(_, reason)| reason)
}
