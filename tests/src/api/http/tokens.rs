//! Service-account tokens: minted for pods and for TokenRequests.

use super::response::{json_response, Body};
use super::state::State;
use crate::api::auth::{Identity, RightsSource};
use crate::api::resources;
use crate::api::status::ApiError;
use http::Response;
use serde_json::{json, Value};

/// Mints a service-account token and registers it.
pub fn mint_sa_token(st: &State, ns: &str, name: &str) -> String {
    use base64::Engine;
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let now = crate::api::defaults::now_secs();
    let sa_uid = st
        .store
        .get(&resources::SERVICEACCOUNTS, ns, name)
        .ok()
        .and_then(|o| {
            o.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(String::from)
        })
        .unwrap_or_default();
    let user = format!("system:serviceaccount:{ns}:{name}");
    let header = json!({"alg": "RS256", "kid": "prrte-k8s-sandbox"});
    let claims = json!({
        "aud": ["https://kubernetes.default.svc.cluster.local"],
        "exp": now + 365 * 86400,
        "iat": now,
        "nbf": now,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": crate::api::defaults::new_uid(),
        "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": name, "uid": sa_uid}},
        "sub": user,
    });
    let sig: [u8; 32] = rand::random();
    let token = format!(
        "{}.{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes()),
        b64(&sig)
    );
    let id = Identity {
        user,
        uid: sa_uid,
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".into(),
        ],
        source: RightsSource::Rbac,
    };
    st.tokens
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(token.clone(), id);
    token
}

pub(super) fn token_request(
    st: &State,
    ns: &str,
    sa: &str,
    body: Value,
) -> Result<Response<Body>, ApiError> {
    st.store.get(&resources::SERVICEACCOUNTS, ns, sa)?;
    let token = mint_sa_token(st, ns, sa);
    let exp = crate::api::defaults::rfc3339(crate::api::defaults::now_secs() + 365 * 86400);
    let mut out = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": sa, "namespace": ns, "creationTimestamp": null},
        "spec": body.get("spec").cloned().unwrap_or(json!({})),
        "status": {"token": token, "expirationTimestamp": exp},
    });
    if out["spec"].get("audiences").is_none() {
        out["spec"]["audiences"] = json!(["https://kubernetes.default.svc.cluster.local"]);
    }
    Ok(json_response(201, &out))
}
