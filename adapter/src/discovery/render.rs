//! Text forms of an allocation: a table for people, a PRRTE hostfile, JSON.

use super::allocation::Allocation;

/// A table: position, pod, hostname, IP, slots, workload index, and `*` on our own pod.
pub fn table(a: &Allocation) -> String {
    let header = ["#", "POD", "HOSTNAME", "IP", "SLOTS", "INDEX", "SELF"];
    let rows: Vec<[String; 7]> = a
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            [
                i.to_string(),
                n.pod.clone(),
                n.hostname.clone(),
                n.ip.to_string(),
                n.slots.to_string(),
                n.index.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
                if n.is_self { "*".into() } else { String::new() },
            ]
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = format!(
        "namespace {}  selector {}  nodes {}  slots {}\n",
        a.namespace,
        a.selector,
        a.nodes.len(),
        a.total_slots()
    );
    out.push_str(&line(header.to_vec()));
    out.push('\n');
    for r in &rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// A PRRTE hostfile: one `IP slots=N` line per node, in allocation order. IPs rather than
/// hostnames, because pod hostnames need not resolve and the launcher connects by IP.
pub fn hostfile(a: &Allocation) -> String {
    a.nodes
        .iter()
        .map(|n| format!("{} slots={}\n", n.ip, n.slots))
        .collect()
}

/// Pretty-printed JSON of the allocation.
pub fn json(a: &Allocation) -> String {
    serde_json::to_string_pretty(a)
        .unwrap_or_else(|e| format!("{{\"error\": {:?}}}", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::super::allocation::PodNode;
    use super::*;
    use std::net::Ipv4Addr;

    fn alloc() -> Allocation {
        let node = |pod: &str, ip: [u8; 4], slots, index, is_self| PodNode {
            pod: pod.into(),
            namespace: "ns".into(),
            hostname: pod.into(),
            ip: Ipv4Addr::from(ip),
            slots,
            index,
            is_self,
            uid: format!("uid-{pod}"),
        };
        Allocation {
            namespace: "ns".into(),
            selector: "app=x".into(),
            nodes: vec![
                node("w-0", [10, 0, 0, 5], 2, Some(0), true),
                node("w-1", [10, 0, 0, 6], 4, None, false),
            ],
        }
    }

    #[test]
    fn hostfile_lines() {
        assert_eq!(hostfile(&alloc()), "10.0.0.5 slots=2\n10.0.0.6 slots=4\n");
    }

    #[test]
    fn table_has_all_columns() {
        let t = table(&alloc());
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].contains("selector app=x") && lines[0].contains("slots 6"),
            "{t}"
        );
        assert!(lines[1].starts_with("#  POD"), "{t}");
        let cols: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(cols, ["0", "w-0", "w-0", "10.0.0.5", "2", "0", "*"]);
        let cols: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(cols, ["1", "w-1", "w-1", "10.0.0.6", "4", "-"]);
    }

    #[test]
    fn json_round_trips() {
        let a = alloc();
        let back: Allocation = serde_json::from_str(&json(&a)).unwrap();
        assert_eq!(back, a);
        assert!(json(&a).contains("\"ip\": \"10.0.0.5\""));
    }
}
