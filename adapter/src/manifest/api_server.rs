//! Where the pods may reach the Kubernetes API: the NetworkPolicy's egress to it, from
//! `--api-server-cidr`/`--api-server-port`, or asked of the cluster (`--api-server-from-cluster`:
//! the endpoints of Service `kubernetes` in `default`, what a NetworkPolicy sees, not the
//! Service's cluster IP).

use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};

/// The API server's endpoints as the NetworkPolicy allows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiServer {
    /// Their address ranges; empty: any address but link-local ones.
    pub cidrs: Vec<ipnet::IpNet>,
    /// Their ports; empty: 443 and 6443.
    pub ports: Vec<u16>,
}

/// Why the API server's endpoints cannot be had from the cluster.
#[derive(Debug, thiserror::Error)]
pub enum ApiServerError {
    #[error("endpoint address {0:?} is not an IP address")]
    NotAnAddress(String),
    #[error(
        "the Service `kubernetes` in `default` has no ready endpoint with an address and a \
         TCP port ({slices} endpoint slices)"
    )]
    NoEndpoint { slices: usize },
    #[error(transparent)]
    Connect(#[from] crate::discovery::DiscoveryError),
    #[error(
        "cannot list the endpoint slices of Service `kubernetes` in `default` at {url}: {chain}"
    )]
    List { url: String, chain: String },
    #[error("the cluster did not answer within {0:?}")]
    Timeout(Duration),
}

/// The label naming a slice's Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The addresses and ports of the API server's endpoint slices (each address alone: /32, or
/// /128), or why they cannot be used.
pub(crate) fn from_slices(slices: &[EndpointSlice]) -> Result<ApiServer, ApiServerError> {
    let mut out = ApiServer::default();
    for s in slices {
        for e in &s.endpoints {
            if e.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            for a in &e.addresses {
                let ip: std::net::IpAddr = a
                    .parse()
                    .map_err(|_| ApiServerError::NotAnAddress(a.clone()))?;
                let net = ipnet::IpNet::from(ip);
                if !out.cidrs.contains(&net) {
                    out.cidrs.push(net);
                }
            }
        }
        for p in s.ports.iter().flatten() {
            if p.protocol.as_deref().unwrap_or("TCP") != "TCP" {
                continue;
            }
            if let Some(port) = p
                .port
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p > 0)
            {
                if !out.ports.contains(&port) {
                    out.ports.push(port);
                }
            }
        }
    }
    if out.cidrs.is_empty() || out.ports.is_empty() {
        return Err(ApiServerError::NoEndpoint {
            slices: slices.len(),
        });
    }
    Ok(out)
}

/// Asks the cluster (the client configuration of the other commands: `$KUBECONFIG`, the
/// in-cluster service account, `~/.kube/config`) for the API server's endpoints.
pub async fn lookup(timeout: Duration) -> Result<ApiServer, ApiServerError> {
    let work = async {
        let api = crate::discovery::client::connect(None, timeout).await?;
        let slices: Api<EndpointSlice> = Api::namespaced(api.client, "default");
        let list = slices
            .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}=kubernetes")))
            .await
            .map_err(|e| ApiServerError::List {
                url: api.url.clone(),
                chain: crate::discovery::client::error_chain(&e),
            })?;
        from_slices(&list.items)
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| ApiServerError::Timeout(timeout))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_ready_endpoints_addresses_and_tcp_ports_are_taken() {
        let s = slice(json!({
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["172.18.0.2"], "conditions": {"ready": true}},
                {"addresses": ["172.18.0.3", "172.18.0.2"]},
                {"addresses": ["172.18.0.9"], "conditions": {"ready": false}},
            ],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
        }));
        let got = from_slices(&[s]).unwrap();
        assert_eq!(
            got.cidrs,
            vec![
                "172.18.0.2/32".parse::<ipnet::IpNet>().unwrap(),
                "172.18.0.3/32".parse().unwrap()
            ]
        );
        assert_eq!(got.ports, vec![6443]);
        let empty =
            slice(json!({"metadata": {"name": "k"}, "addressType": "IPv4", "endpoints": []}));
        let e = from_slices(&[empty]).unwrap_err().to_string();
        assert!(e.contains("no ready endpoint"), "{e}");
        let bad = slice(json!({"metadata": {"name": "k"}, "addressType": "FQDN",
            "endpoints": [{"addresses": ["api.example"]}], "ports": [{"port": 443}]}));
        assert!(from_slices(&[bad])
            .unwrap_err()
            .to_string()
            .contains("api.example"));
    }
}
