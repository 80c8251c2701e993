//! NetworkPolicy enforcement on the sandbox's pod network, as an enforcing CNI does it.
//!
//! Ingress rules only (`podSelector`, `namespaceSelector`, `ipBlock`, `ports` with numbers,
//! names and `endPort`, `policyTypes`). A pod selected by a policy whose `policyTypes` include
//! Ingress is isolated: new connections to it are admitted only when one of those policies'
//! `ingress` rules admits them; other pods are open. Traffic from the node (the gateway
//! address: API server, probes, tests) is never filtered, as on a node.
//!
//! The rules live in one nftables table of the `bridge` family per sandbox, named after the
//! network's prefix (`pk8s<id>`), with a chain on the bridge `forward` hook that only looks at
//! frames entering from this network's veths (`iifname "pk8s<id>v*"`), so sandboxes running at
//! the same time do not see each other's rules. The table is created with the first policy,
//! replaced atomically (`nft -f`) whenever policies, pods or namespaces change, and deleted when
//! no policy is left and when the sandbox stops.
//!
//! The kernels these sandboxes run on have no connection tracking in the bridge family, so the
//! filter is stateless: it decides on connection attempts (TCP segments with SYN and without
//! ACK); segments of connections an isolated pod opened itself, and its replies, pass. UDP and
//! other protocols to an isolated pod pass only where a rule admits them.
//!
//! `enforcer` keeps a sandbox's table in step with the store, `policy` evaluates the policies,
//! `render` writes the ruleset, `nftables` runs `nft`.

mod enforcer;
mod nftables;
mod policy;
mod render;

pub use enforcer::Enforcer;
pub(crate) use nftables::nft;
pub use nftables::{delete_table, tables};
pub use policy::selector_matches;
pub use render::render;
