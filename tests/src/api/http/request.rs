//! Reading a request: its query, body, list options, and the response shape it accepts.

use crate::api::resources::ResourceType;
use crate::api::selector::{FieldSelector, LabelSelector};
use crate::api::status::ApiError;
use crate::api::store::{DeleteOptions, ListQuery};
use bytes::Bytes;
use http::{header, HeaderMap};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use std::collections::HashMap;

/// The largest request body read.
const MAX_BODY: usize = 16 << 20;

pub(super) fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    form_urlencoded::parse(q.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

/// The response shape the client asked for in `Accept`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Shape {
    Full,
    Table(&'static str),
    Partial(&'static str),
}

pub(super) fn negotiate(headers: &HeaderMap) -> Shape {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    for cand in accept.split(',') {
        let mut it = cand.split(';').map(str::trim);
        let media = it.next().unwrap_or("");
        let params: HashMap<&str, &str> = it.filter_map(|p| p.split_once('=')).collect();
        if media != "application/json" && media != "*/*" && media != "application/*" {
            continue;
        }
        let gv = match (params.get("g"), params.get("v")) {
            (Some(&"meta.k8s.io"), Some(&"v1")) => Some("meta.k8s.io/v1"),
            (Some(&"meta.k8s.io"), Some(&"v1beta1")) => Some("meta.k8s.io/v1beta1"),
            _ => None,
        };
        match params.get("as") {
            None => return Shape::Full,
            Some(&"Table") => {
                if let Some(gv) = gv {
                    return Shape::Table(gv);
                }
            }
            Some(&"PartialObjectMetadata") | Some(&"PartialObjectMetadataList") => {
                if let Some(gv) = gv {
                    return Shape::Partial(gv);
                }
            }
            _ => {}
        }
    }
    Shape::Full
}

pub(super) async fn read_body(body: Incoming) -> Result<Bytes, ApiError> {
    let limited = http_body_util::Limited::new(body, MAX_BODY);
    limited.collect().await.map(|c| c.to_bytes()).map_err(|e| {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("could not read the request body: {e}"),
        )
    })
}

pub(super) fn parse_body(headers: &HeaderMap, bytes: &[u8]) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if ct.contains("protobuf") {
        return crate::api::protobuf::decode_object(bytes).map_err(|e| {
            let mut err = ApiError::unsupported_media_type(ct);
            err.message = format!("cannot decode the protobuf body ({e}); {}", err.message);
            err
        });
    }
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "the request body is empty; send a JSON object",
        ));
    }
    if ct.contains("yaml") {
        serde_yaml::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid YAML: {e}")))
    } else {
        serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
    }
}

/// A field selector of `rt` (of a view: translated to its storage's fields).
pub(super) fn field_selector(rt: &ResourceType, s: &str) -> Result<FieldSelector, String> {
    match rt.view {
        Some(v) => FieldSelector::parse(v.storage, &(v.fields)(s)),
        None => FieldSelector::parse(rt, s),
    }
}

pub(super) fn list_query(
    rt: &ResourceType,
    q: &HashMap<String, String>,
) -> Result<ListQuery, ApiError> {
    let labels = match q.get("labelSelector") {
        Some(s) => LabelSelector::parse(s)
            .map_err(|e| ApiError::bad_request(format!("invalid labelSelector {s:?}: {e}")))?,
        None => LabelSelector::default(),
    };
    let fields = match q.get("fieldSelector") {
        Some(s) => field_selector(rt, s)
            .map_err(|e| ApiError::bad_request(format!("invalid fieldSelector {s:?}: {e}")))?,
        None => FieldSelector::default(),
    };
    let limit = match q.get("limit").filter(|s| !s.is_empty()) {
        Some(s) => Some(s.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!(
                "invalid limit {s:?}: must be a non-negative integer"
            ))
        })?),
        None => None,
    };
    Ok(ListQuery {
        labels,
        fields,
        limit,
        continue_token: q.get("continue").cloned().filter(|s| !s.is_empty()),
    })
}

/// A boolean query parameter: absent is false, else as [`crate::api::query::query_true`] reads it.
pub(super) fn flag(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| crate::api::query::query_true(v))
}

pub(super) fn dry_run(q: &HashMap<String, String>) -> bool {
    q.get("dryRun").is_some_and(|v| v == "All")
}

/// `opts` with what the DeleteOptions `v` sets, checked.
pub(super) fn delete_options_from(v: &Value, opts: &mut DeleteOptions) -> Result<(), ApiError> {
    if let Some(p) = v.get("propagationPolicy").and_then(Value::as_str) {
        opts.propagation = Some(p.to_string());
    }
    if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
        opts.propagation = Some("Orphan".into());
    }
    match v.get("gracePeriodSeconds") {
        None | Some(Value::Null) => {}
        Some(g) => {
            opts.grace_period = Some(g.as_i64().ok_or_else(|| {
                ApiError::bad_request(format!(
                    "gracePeriodSeconds {g} is not a whole number of seconds"
                ))
            })?)
        }
    }
    opts.precondition_uid = v
        .pointer("/preconditions/uid")
        .and_then(Value::as_str)
        .map(String::from);
    opts.precondition_rv = v
        .pointer("/preconditions/resourceVersion")
        .and_then(Value::as_str)
        .map(String::from);
    if v.get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == "All"))
    {
        opts.dry_run = true;
    }
    if let Some(p) = &opts.propagation {
        if !["Orphan", "Background", "Foreground"].contains(&p.as_str()) {
            return Err(ApiError::bad_request(format!(
                "invalid propagationPolicy {p:?}: use Orphan, Background or Foreground"
            )));
        }
    }
    Ok(())
}
