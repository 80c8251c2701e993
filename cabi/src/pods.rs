//! Pods the RAS component allocated, by the node name PRRTE uses (the pod's hostname), so the
//! PLM component can reach each pod's agent and name pods in messages.
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Mutex;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAddr {
    pub pod: String,
    pub namespace: String,
    pub ip: Ipv4Addr,
}

static TABLE: Mutex<Option<HashMap<String, PodAddr>>> = Mutex::new(None);

pub fn record(node_name: &str, addr: PodAddr) {
    TABLE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(node_name.to_string(), addr);
}

/// The pod behind a PRRTE node: by node name, or by IP when the name is one.
pub fn lookup(node_name: &str) -> Option<PodAddr> {
    let t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let t = t.as_ref()?;
    if let Some(a) = t.get(node_name) {
        return Some(a.clone());
    }
    let ip: Ipv4Addr = node_name.parse().ok()?;
    t.values().find(|a| a.ip == ip).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_name_and_ip() {
        record(
            "w-0",
            PodAddr {
                pod: "job-0-abcde".into(),
                namespace: "ns".into(),
                ip: Ipv4Addr::new(10, 250, 3, 2),
            },
        );
        assert_eq!(lookup("w-0").unwrap().pod, "job-0-abcde");
        assert_eq!(lookup("10.250.3.2").unwrap().pod, "job-0-abcde");
        assert!(lookup("w-1").is_none());
        assert!(lookup("10.250.3.3").is_none());
    }
}
