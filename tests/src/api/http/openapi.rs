//! `/openapi/v3`: the index of group/versions, each with the URL of its document (a hash of
//! the document in its query, as the API server gives it, so that clients cache it until it
//! changes), and the documents themselves: the CRDs' ([`crate::api::crd::openapi`]) and the
//! built-in kinds' ([`crate::api::builtin_openapi`]); the CRDs' definitions in `/openapi/v2`
//! (JSON).

use super::response::json_response;
use super::response::Body;
use crate::api::builtin_openapi::{self, hash};
use crate::api::crd::openapi::{group_versions, published, v3_document};
use crate::api::status::ApiError;
use crate::api::store::Store;
use http::Response;
use serde_json::{json, Value};

/// `GET /openapi/v3`.
pub(super) fn v3_index(store: &Store) -> Response<Body> {
    let published = published(store);
    let mut paths = serde_json::Map::new();
    for (key, d) in builtin_openapi::documents() {
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", d.hash)}),
        );
    }
    for (g, v) in group_versions(&published) {
        if let Some(doc) = v3_document(&published, &g, &v) {
            paths.insert(
                format!("apis/{g}/{v}"),
                json!({"serverRelativeURL": format!("/openapi/v3/apis/{g}/{v}?hash={}", hash(&doc))}),
            );
        }
    }
    json_response(200, &json!({"paths": paths}))
}

/// `GET /openapi/v3/apis/GROUP/VERSION` (or, `group` empty, `/openapi/v3/api/VERSION`).
pub(super) fn v3_group_version(
    store: &Store,
    group: &str,
    version: &str,
) -> Result<Response<Body>, ApiError> {
    let key = if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    };
    if let Some(d) = builtin_openapi::documents().get(&key) {
        return Ok(json_response(200, &d.doc));
    }
    let doc = v3_document(&published(store), group, version).ok_or_else(ApiError::no_route)?;
    Ok(json_response(200, &doc))
}

/// The CRDs' definitions, for `/openapi/v2` as JSON.
pub(super) fn v2_definitions(store: &Store) -> serde_json::Map<String, Value> {
    crate::api::crd::openapi::v2_definitions(&published(store))
}
