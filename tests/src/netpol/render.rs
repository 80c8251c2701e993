//! The nftables ruleset that enforces the policies.

use super::policy::{
    ns_of, pod_ip, policy_types, rule_ports, rule_sources, selector_matches, Ports, Source,
};
use serde_json::Value;
use std::collections::BTreeSet;

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
        let selecting = isolating(policies, pod);
        if selecting.is_empty() {
            continue;
        }
        lines.extend(pod_rules(ip, pod, &selecting, pods, namespaces));
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

/// The policies of `pod`'s namespace that select it for ingress.
fn isolating<'a>(policies: &'a [Value], pod: &Value) -> Vec<&'a Value> {
    let ns = ns_of(pod);
    policies
        .iter()
        .filter(|pol| ns_of(pol) == ns && policy_types(pol).iter().any(|t| t == "Ingress"))
        .filter(|pol| selector_matches(&pol["spec"]["podSelector"], &pod["metadata"]["labels"]))
        .collect()
}

/// The rules for the isolated pod at `ip`: what its `selecting` policies admit, the rest
/// dropped.
fn pod_rules(
    ip: &str,
    pod: &Value,
    selecting: &[&Value],
    pods: &[Value],
    namespaces: &[Value],
) -> Vec<String> {
    let ns = ns_of(pod);
    let mut lines = Vec::new();
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
    for pol in selecting {
        for rule in pol["spec"]["ingress"].as_array().into_iter().flatten() {
            let sources = rule_sources(ns_of(pol), rule, pods, namespaces);
            let src_parts = source_matches(sources.as_ref());
            let port_parts = port_matches(rule_ports(rule, pod).as_ref());
            for sp in &src_parts {
                for pp in &port_parts {
                    lines.push(format!("ip daddr {ip}{sp}{pp} accept"));
                }
            }
        }
    }
    lines.push(format!("ip daddr {ip} drop"));
    lines
}

/// The source matches of a rule, one per alternative: the admitted pods' addresses in one
/// set, each address block with its exceptions (None: any source, one empty match).
fn source_matches(sources: Option<&BTreeSet<Source>>) -> Vec<String> {
    match sources {
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
    }
}

/// The port matches of a rule, one per protocol (None: every port of every protocol, one empty
/// match); a protocol whose ports are all unknown names has none.
fn port_matches(ports: Option<&Ports>) -> Vec<String> {
    match ports {
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
    }
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
