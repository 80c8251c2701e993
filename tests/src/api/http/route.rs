//! Routing a request by its path: discovery, OpenAPI, health, and resource requests.

use super::authn::authenticate;
use super::discovery::{group_list, openapi_v2, resource_list, version_info};
use super::openapi;
use super::request::parse_query;
use super::resource::resource_request;
use super::response::{json_response, text_response, Body};
use super::state::State;
use crate::api::status::ApiError;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use serde_json::json;
use std::sync::Arc;

pub(super) async fn route(
    st: &Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = parse_query(parts.uri.query());
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["version"] => return Ok(json_response(200, &version_info())),
        ["healthz"] | ["livez"] | ["readyz"] => return Ok(text_response(200, "ok")),
        _ => {}
    }
    match segs.as_slice() {
        ["openapi", "v2"] => {
            authenticate(st, &parts.headers)?;
            return Ok(openapi_v2(&st.store, &parts.headers));
        }
        ["openapi", "v3"] => {
            authenticate(st, &parts.headers)?;
            return Ok(openapi::v3_index(&st.store));
        }
        ["openapi", "v3", "apis", g, v] => {
            authenticate(st, &parts.headers)?;
            return openapi::v3_group_version(&st.store, g, v);
        }
        ["openapi", "v3", "api", v] => {
            authenticate(st, &parts.headers)?;
            return openapi::v3_group_version(&st.store, "", v);
        }
        _ => {}
    }
    let id = authenticate(st, &parts.headers)?;
    if parts.method != Method::GET
        && matches!(segs.first(), Some(&"api") | Some(&"apis"))
        && segs.len() <= 3
        && !(segs.len() == 3 && segs[0] == "api")
    {
        return Err(ApiError::method_not_allowed(&path));
    }
    match segs.as_slice() {
        ["api"] => Ok(json_response(
            200,
            &json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": st.addr.to_string()}],
            }),
        )),
        ["api", "v1"] => Ok(json_response(200, &resource_list(&st.store, "", "v1"))),
        ["apis"] => Ok(json_response(200, &group_list(&st.store))),
        ["apis", g] => group_list(&st.store)["groups"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == *g).cloned())
            .map(|mut grp| {
                grp["kind"] = json!("APIGroup");
                grp["apiVersion"] = json!("v1");
                json_response(200, &grp)
            })
            .ok_or_else(ApiError::no_route),
        ["apis", g, v]
            if st
                .store
                .groups()
                .iter()
                .any(|(gg, vs)| gg == g && vs.contains(v)) =>
        {
            Ok(json_response(200, &resource_list(&st.store, g, v)))
        }
        ["api", "v1", rest @ ..] => {
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            resource_request(st, &id, parts, body, query, "", "v1", &rest).await
        }
        ["apis", g, v, rest @ ..] => {
            let (g, v) = (g.to_string(), v.to_string());
            let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
            resource_request(st, &id, parts, body, query, &g, &v, &rest).await
        }
        _ => Err(ApiError::no_route()),
    }
}
