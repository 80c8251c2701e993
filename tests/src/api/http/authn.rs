//! Who is asking: the bearer token's identity, or the one it impersonates.

use super::state::State;
use crate::api::auth::{Attributes, Identity, RightsSource};
use crate::api::status::ApiError;
use http::{header, HeaderMap};
use serde_json::json;

pub(super) fn authenticate(st: &State, headers: &HeaderMap) -> Result<Identity, ApiError> {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))
        .map(str::trim);
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Err(ApiError::unauthorized());
    };
    let id = st
        .tokens
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(token)
        .cloned()
        .ok_or_else(ApiError::unauthorized)?;
    impersonate(st, id, headers)
}

/// Honours `Impersonate-User` / `Impersonate-Group` (kubectl --as / --as-group) for callers
/// allowed to impersonate; the impersonated identity's rights come from RBAC objects.
pub(super) fn impersonate(
    st: &State,
    id: Identity,
    headers: &HeaderMap,
) -> Result<Identity, ApiError> {
    let Some(user) = headers
        .get("Impersonate-User")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
    else {
        return Ok(id);
    };
    let groups: Vec<String> = headers
        .get_all("Impersonate-Group")
        .iter()
        .filter_map(|v| v.to_str().ok().map(String::from))
        .collect();
    let (kind, ns, name) = match user
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split_once(':'))
    {
        Some((ns, n)) => ("serviceaccounts", Some(ns.to_string()), n.to_string()),
        None => ("users", None, user.clone()),
    };
    let a = Attributes {
        verb: "impersonate".into(),
        group: String::new(),
        resource: kind.into(),
        subresource: String::new(),
        namespace: ns.clone(),
        name: Some(name),
    };
    if !id.allowed(&st.store, &a) {
        let mut e = ApiError::new(403, "Forbidden", a.forbidden_message(&id.user));
        e.details = Some(json!({"name": user, "kind": kind}));
        return Err(e);
    }
    let mut all_groups = groups;
    if let Some(ns) = &ns {
        all_groups.extend([
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{ns}"),
        ]);
    }
    all_groups.push("system:authenticated".into());
    Ok(Identity {
        user,
        uid: String::new(),
        groups: all_groups,
        source: RightsSource::Rbac,
    })
}
