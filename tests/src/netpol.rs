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

use crate::api::resources::{NAMESPACES, NETWORKPOLICIES, PODS};
use crate::api::Store;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast::error::RecvError;

fn nft_binary() -> Option<PathBuf> {
    ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

pub(crate) fn nft(args: &[&str], stdin: Option<&str>) -> Result<String> {
    let bin = nft_binary().ok_or_else(|| anyhow!("nft is not installed (the sandbox enforces NetworkPolicies with nftables); install Debian's nftables (prrte-config/setup.sh does)"))?;
    let mut c = Command::new(&bin);
    c.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c
        .spawn()
        .with_context(|| format!("running {}", bin.display()))?;
    if let Some(text) = stdin {
        use std::io::Write;
        let mut si = child.stdin.take().expect("piped");
        si.write_all(text.as_bytes()).context("writing to nft")?;
    }
    let out = child.wait_with_output().context("waiting for nft")?;
    if !out.status.success() {
        bail!(
            "`nft {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Names of the bridge-family nftables tables starting with `prefix` (for leftovers).
pub fn tables(prefix: &str) -> Vec<String> {
    if nft_binary().is_none() {
        return Vec::new();
    }
    let Ok(out) = nft(&["list", "tables", "bridge"], None) else {
        return Vec::new();
    };
    out.lines()
        .filter_map(|l| l.strip_prefix("table bridge "))
        .map(|t| t.trim().to_string())
        .filter(|t| t.starts_with(prefix))
        .collect()
}

/// Deletes a bridge-family table (cleanup after a killed sandbox).
pub fn delete_table(name: &str) -> Result<()> {
    if !tables(name).iter().any(|t| t == name) {
        return Ok(());
    }
    nft(&["delete", "table", "bridge", name], None).map(|_| ())
}

/// Keeps one sandbox's NetworkPolicies enforced.
pub struct Enforcer {
    table: String,
    veths: String,
    store: Store,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The ruleset last loaded (None: no table).
    applied: Option<String>,
    stopped: bool,
}

impl Enforcer {
    /// `prefix` is the network's prefix: the table gets that name, and the rules look at
    /// frames from the veths named `<prefix>v...`.
    pub fn new(prefix: &str, store: Store) -> Enforcer {
        Enforcer {
            table: prefix.to_string(),
            veths: format!("{prefix}v*"),
            store,
            state: Mutex::new(State::default()),
        }
    }

    /// The nftables table (family bridge) this sandbox's rules live in.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Recomputes the rules from the policies, pods and namespaces now in the store and loads
    /// them if they changed. Returns the ruleset in force (None when no policy exists).
    pub fn sync(&self) -> Result<Option<String>> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.stopped {
            bail!("the sandbox is stopping");
        }
        let list = |rt| {
            self.store
                .list(rt, None, &Default::default())
                .map(|l| l.items)
                .map_err(|e| anyhow!("{e}"))
        };
        let policies = list(&NETWORKPOLICIES)?;
        let refs = |v: &[Arc<Value>]| v.iter().map(|o| o.as_ref().clone()).collect::<Vec<Value>>();
        let want = if policies.is_empty() {
            None
        } else {
            let pods = list(&PODS)?;
            let namespaces = list(&NAMESPACES)?;
            Some(render(
                &self.table,
                &self.veths,
                &refs(&policies),
                &refs(&pods),
                &refs(&namespaces),
            ))
        };
        if want == st.applied {
            return Ok(want);
        }
        match &want {
            Some(text) => {
                // Create-if-missing, flush and fill in one transaction: never a moment without rules.
                let script = format!(
                    "table bridge {t} {{}}\ndelete table bridge {t}\n{text}",
                    t = self.table
                );
                nft(&["-f", "-"], Some(&script)).with_context(|| {
                    format!(
                        "loading the NetworkPolicy rules (table bridge {})",
                        self.table
                    )
                })?;
            }
            None => delete_table(&self.table)?,
        }
        st.applied = want.clone();
        Ok(want)
    }

    /// Deletes the table; no rule is loaded after this.
    pub fn stop(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.stopped = true;
        if st.applied.take().is_some() || !tables(&self.table).is_empty() {
            if let Err(e) = delete_table(&self.table) {
                tracing::warn!("removing nftables table {}: {e:#}", self.table);
            }
        }
    }

    /// Re-syncs on every change of a policy, pod or namespace until the store closes.
    pub async fn run(self: Arc<Self>) {
        let mut rx = self.store.subscribe();
        loop {
            let me = self.clone();
            match tokio::task::spawn_blocking(move || me.sync()).await {
                Ok(Err(e)) => tracing::error!("NetworkPolicies are not enforced: {e:#}"),
                Err(e) => tracing::error!("NetworkPolicy sync panicked: {e}"),
                Ok(Ok(_)) => {}
            }
            // Wait for a relevant change, then take whatever else is queued at once.
            loop {
                match rx.recv().await {
                    Ok(ev) if relevant(ev.resource.plural) => break,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return,
                }
            }
            while let Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) =
                rx.try_recv()
            {}
        }
    }
}

fn relevant(plural: &str) -> bool {
    matches!(plural, "networkpolicies" | "pods" | "namespaces")
}

impl Drop for Enforcer {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------------------------
// Policy evaluation
// ---------------------------------------------------------------------------------------------

/// Whether `labels` match a structured LabelSelector (`matchLabels`, `matchExpressions`); the
/// empty selector matches everything.
pub fn selector_matches(sel: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    if let Some(m) = sel["matchLabels"].as_object() {
        if !m.iter().all(|(k, v)| label(k) == v.as_str()) {
            return false;
        }
    }
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("");
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let ok = match e["operator"].as_str().unwrap_or("") {
            "In" => label(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => label(key).is_some(),
            "DoesNotExist" => label(key).is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

fn ns_labels(ns: &str, namespaces: &[Value]) -> Value {
    let mut labels = namespaces
        .iter()
        .find(|n| n["metadata"]["name"] == ns)
        .and_then(|n| n["metadata"]["labels"].as_object().cloned())
        .unwrap_or_default();
    labels.insert(
        "kubernetes.io/metadata.name".into(),
        Value::String(ns.to_string()),
    );
    Value::Object(labels)
}

/// Where a pod's traffic may come from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    Ip(String),
    Block(String, Vec<String>),
}

/// A set of destination ports of one protocol (None: every port).
type Ports = BTreeMap<String, Option<BTreeSet<(u32, u32)>>>;

fn pod_ip(p: &Value) -> Option<&str> {
    let live = !matches!(
        p["status"]["phase"].as_str(),
        Some("Succeeded") | Some("Failed")
    );
    p["status"]["podIP"]
        .as_str()
        .filter(|ip| live && !ip.is_empty())
}

fn ns_of(v: &Value) -> &str {
    v["metadata"]["namespace"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

fn policy_types(pol: &Value) -> Vec<String> {
    match pol["spec"]["policyTypes"].as_array() {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect(),
        _ => {
            let mut v = vec!["Ingress".to_string()];
            if pol["spec"].get("egress").is_some_and(|e| !e.is_null()) {
                v.push("Egress".into());
            }
            v
        }
    }
}

/// The sources an ingress rule admits (None: any source).
fn rule_sources(
    pol_ns: &str,
    rule: &Value,
    pods: &[Value],
    namespaces: &[Value],
) -> Option<BTreeSet<Source>> {
    let from = rule["from"].as_array().filter(|a| !a.is_empty())?;
    let mut out = BTreeSet::new();
    for peer in from {
        if let Some(b) = peer.get("ipBlock").filter(|b| !b.is_null()) {
            let except = b["except"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect();
            out.insert(Source::Block(
                b["cidr"].as_str().unwrap_or("").to_string(),
                except,
            ));
            continue;
        }
        let pod_sel = peer.get("podSelector").filter(|s| !s.is_null());
        let ns_sel = peer.get("namespaceSelector").filter(|s| !s.is_null());
        for p in pods {
            let Some(ip) = pod_ip(p) else { continue };
            let ns = ns_of(p);
            let ns_ok = match ns_sel {
                Some(sel) => selector_matches(sel, &ns_labels(ns, namespaces)),
                None => ns == pol_ns,
            };
            let pod_ok = pod_sel.is_none_or(|sel| selector_matches(sel, &p["metadata"]["labels"]));
            if ns_ok && pod_ok && (pod_sel.is_some() || ns_sel.is_some()) {
                out.insert(Source::Ip(ip.to_string()));
            }
        }
    }
    Some(out)
}

/// The ports of an ingress rule on pod `dst` (None: every port of every protocol). Named
/// ports are looked up in the destination pod's containers.
fn rule_ports(rule: &Value, dst: &Value) -> Option<Ports> {
    let ports = rule["ports"].as_array().filter(|a| !a.is_empty())?;
    let mut out: Ports = BTreeMap::new();
    for p in ports {
        let proto = p["protocol"].as_str().unwrap_or("TCP").to_ascii_lowercase();
        let range = match &p["port"] {
            Value::Null => None,
            Value::Number(n) => {
                let start = n.as_u64().unwrap_or(0) as u32;
                let end = p["endPort"]
                    .as_u64()
                    .map(|e| e as u32)
                    .unwrap_or(start)
                    .max(start);
                Some((start, end))
            }
            Value::String(name) => match name.parse::<u32>() {
                Ok(n) => Some((n, n)),
                Err(_) => {
                    let found = dst["spec"]["containers"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                        .find(|cp| {
                            cp["name"] == name.as_str()
                                && cp["protocol"]
                                    .as_str()
                                    .unwrap_or("TCP")
                                    .eq_ignore_ascii_case(&proto)
                        })
                        .and_then(|cp| cp["containerPort"].as_u64());
                    match found {
                        Some(n) => Some((n as u32, n as u32)),
                        // A name the pod does not have admits nothing here.
                        None => {
                            out.entry(proto).or_insert_with(|| Some(BTreeSet::new()));
                            continue;
                        }
                    }
                }
            },
            _ => continue,
        };
        match range {
            None => {
                out.insert(proto, None);
            }
            Some(r) => {
                if let Some(set) = out.entry(proto).or_insert_with(|| Some(BTreeSet::new())) {
                    set.insert(r);
                }
            }
        }
    }
    Some(out)
}

fn nft_set(items: &[String]) -> String {
    if items.len() == 1 {
        items[0].clone()
    } else {
        format!("{{ {} }}", items.join(", "))
    }
}

/// The nftables ruleset (one table of family bridge) that enforces `policies` on `pods`.
pub fn render(
    table: &str,
    veths: &str,
    policies: &[Value],
    pods: &[Value],
    namespaces: &[Value],
) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut dsts: Vec<(&str, &Value)> = pods.iter().filter_map(|p| Some((pod_ip(p)?, p))).collect();
    dsts.sort_by_key(|(ip, _)| ip.parse::<std::net::Ipv4Addr>().map(u32::from).unwrap_or(0));
    for (ip, pod) in dsts {
        let ns = ns_of(pod);
        let selecting: Vec<&Value> = policies
            .iter()
            .filter(|pol| ns_of(pol) == ns && policy_types(pol).iter().any(|t| t == "Ingress"))
            .filter(|pol| selector_matches(&pol["spec"]["podSelector"], &pod["metadata"]["labels"]))
            .collect();
        if selecting.is_empty() {
            continue;
        }
        let names: Vec<String> = selecting
            .iter()
            .map(|p| format!("{}/{}", ns, p["metadata"]["name"].as_str().unwrap_or("")))
            .collect();
        lines.push(format!(
            "# {}/{} ({ip}) is isolated by {}",
            ns,
            pod["metadata"]["name"].as_str().unwrap_or(""),
            names.join(", ")
        ));
        // Segments of established connections and of connections the pod opened.
        lines.push(format!(
            "ip daddr {ip} tcp flags & (syn | ack) != syn accept"
        ));
        for pol in &selecting {
            for rule in pol["spec"]["ingress"].as_array().into_iter().flatten() {
                let sources = rule_sources(ns_of(pol), rule, pods, namespaces);
                let src_parts: Vec<String> = match &sources {
                    None => vec![String::new()],
                    Some(set) => {
                        let ips: Vec<String> = set
                            .iter()
                            .filter_map(|s| {
                                if let Source::Ip(i) = s {
                                    Some(i.clone())
                                } else {
                                    None
                                }
                            })
                            .collect();
                        let mut parts = Vec::new();
                        if !ips.is_empty() {
                            parts.push(format!(" ip saddr {}", nft_set(&ips)));
                        }
                        for s in set {
                            if let Source::Block(cidr, except) = s {
                                let mut p = format!(" ip saddr {cidr}");
                                if !except.is_empty() {
                                    p.push_str(&format!(" ip saddr != {}", nft_set(except)));
                                }
                                parts.push(p);
                            }
                        }
                        parts
                    }
                };
                let port_parts: Vec<String> = match rule_ports(rule, pod) {
                    None => vec![String::new()],
                    Some(ports) => ports
                        .iter()
                        .filter_map(|(proto, set)| match set {
                            None => Some(format!(" meta l4proto {proto}")),
                            Some(s) if s.is_empty() => None,
                            Some(s) => {
                                let items: Vec<String> = s
                                    .iter()
                                    .map(|(a, b)| {
                                        if a == b {
                                            a.to_string()
                                        } else {
                                            format!("{a}-{b}")
                                        }
                                    })
                                    .collect();
                                Some(format!(" {proto} dport {}", nft_set(&items)))
                            }
                        })
                        .collect(),
                };
                for sp in &src_parts {
                    for pp in &port_parts {
                        lines.push(format!("ip daddr {ip}{sp}{pp} accept"));
                    }
                }
            }
        }
        lines.push(format!("ip daddr {ip} drop"));
    }
    let mut out = format!("table bridge {table} {{\n  chain pods {{\n    type filter hook forward priority 0; policy accept;\n    iifname != \"{veths}\" accept\n");
    for l in lines {
        out.push_str("    ");
        out.push_str(&l);
        out.push('\n');
    }
    out.push_str("  }\n}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str, ip: &str, labels: Value) -> Value {
        json!({"metadata": {"namespace": ns, "name": name, "labels": labels},
               "spec": {"containers": [{"name": "c", "ports": [{"name": "agent", "containerPort": 7117}]}]},
               "status": {"phase": "Running", "podIP": ip}})
    }

    fn policy(ns: &str, spec: Value) -> Value {
        json!({"metadata": {"namespace": ns, "name": "p"}, "spec": spec})
    }

    fn rules(text: &str) -> Vec<&str> {
        text.lines()
            .map(str::trim)
            .filter(|l| l.starts_with("ip "))
            .collect()
    }

    #[test]
    fn selectors() {
        let labels = json!({"a": "1", "b": "2"});
        assert!(selector_matches(&json!({}), &labels));
        assert!(selector_matches(
            &json!({"matchLabels": {"a": "1"}}),
            &labels
        ));
        assert!(!selector_matches(
            &json!({"matchLabels": {"a": "2"}}),
            &labels
        ));
        assert!(selector_matches(
            &json!({"matchExpressions": [{"key": "b", "operator": "In", "values": ["2", "3"]}]}),
            &labels
        ));
        assert!(!selector_matches(
            &json!({"matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["2"]}]}),
            &labels
        ));
        assert!(selector_matches(
            &json!({"matchExpressions": [{"key": "c", "operator": "DoesNotExist"}]}),
            &labels
        ));
        assert!(!selector_matches(
            &json!({"matchExpressions": [{"key": "c", "operator": "Exists"}]}),
            &labels
        ));
    }

    #[test]
    fn job_pods_only_on_listed_ports() {
        let pods = vec![
            pod("ns", "job-0", "10.0.0.2", json!({"job": "j"})),
            pod("ns", "job-1", "10.0.0.3", json!({"job": "j"})),
            pod("ns", "other", "10.0.0.4", json!({"job": "x"})),
            pod("elsewhere", "job-0", "10.0.0.5", json!({"job": "j"})),
        ];
        let pol = policy(
            "ns",
            json!({"podSelector": {"matchLabels": {"job": "j"}}, "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"job": "j"}}}], "ports": [{"port": "agent"}, {"port": 7121, "endPort": 7140}, {"port": 53, "protocol": "UDP"}]}]}),
        );
        let text = render("t", "tv*", &[pol], &pods, &[]);
        assert_eq!(
            rules(&text),
            vec![
                "ip daddr 10.0.0.2 tcp flags & (syn | ack) != syn accept",
                "ip daddr 10.0.0.2 ip saddr { 10.0.0.2, 10.0.0.3 } tcp dport { 7117, 7121-7140 } accept",
                "ip daddr 10.0.0.2 ip saddr { 10.0.0.2, 10.0.0.3 } udp dport 53 accept",
                "ip daddr 10.0.0.2 drop",
                "ip daddr 10.0.0.3 tcp flags & (syn | ack) != syn accept",
                "ip daddr 10.0.0.3 ip saddr { 10.0.0.2, 10.0.0.3 } tcp dport { 7117, 7121-7140 } accept",
                "ip daddr 10.0.0.3 ip saddr { 10.0.0.2, 10.0.0.3 } udp dport 53 accept",
                "ip daddr 10.0.0.3 drop",
            ],
            "{text}"
        );
        assert!(text.contains("iifname != \"tv*\" accept"));
    }

    #[test]
    fn namespace_selectors_ip_blocks_and_policy_types() {
        let pods = vec![
            pod("a", "x", "10.0.0.2", json!({"app": "x"})),
            pod("b", "y", "10.0.0.3", json!({"app": "y"})),
            pod("c", "z", "10.0.0.4", json!({"app": "y"})),
        ];
        let namespaces = vec![json!({"metadata": {"name": "b", "labels": {"team": "blue"}}})];
        let pol = policy(
            "a",
            json!({"podSelector": {}, "ingress": [
                {"from": [{"namespaceSelector": {"matchLabels": {"team": "blue"}}}]},
                {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "c"}}, "podSelector": {"matchLabels": {"app": "nope"}}}]},
                {"from": [{"ipBlock": {"cidr": "10.9.0.0/16", "except": ["10.9.1.0/24"]}}], "ports": [{"protocol": "TCP"}]},
            ]}),
        );
        let text = render("t", "tv*", std::slice::from_ref(&pol), &pods, &namespaces);
        assert_eq!(
            rules(&text),
            vec![
                "ip daddr 10.0.0.2 tcp flags & (syn | ack) != syn accept",
                "ip daddr 10.0.0.2 ip saddr 10.0.0.3 accept",
                "ip daddr 10.0.0.2 ip saddr 10.9.0.0/16 ip saddr != 10.9.1.0/24 meta l4proto tcp accept",
                "ip daddr 10.0.0.2 drop",
            ],
            "{text}"
        );
        // Deny-all: no ingress rules. Egress-only policies isolate nothing for ingress.
        let deny = policy("b", json!({"podSelector": {}}));
        let egress_only = policy("c", json!({"podSelector": {}, "policyTypes": ["Egress"]}));
        let text = render("t", "tv*", &[deny, egress_only], &pods, &namespaces);
        assert_eq!(
            rules(&text),
            vec![
                "ip daddr 10.0.0.3 tcp flags & (syn | ack) != syn accept",
                "ip daddr 10.0.0.3 drop"
            ],
            "{text}"
        );
        // An empty rule admits everything.
        let open = policy(
            "a",
            json!({"podSelector": {"matchLabels": {"app": "x"}}, "ingress": [{}]}),
        );
        assert!(rules(&render("t", "tv*", &[open], &pods, &namespaces))
            .contains(&"ip daddr 10.0.0.2 accept"));
    }
}
