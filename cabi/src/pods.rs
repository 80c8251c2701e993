//! The pods the RAS component allocated, by the node name PRRTE uses (the pod's hostname), kept
//! for the PLM component, which resolves its nodes to the pods' agents through them (the table
//! itself: [`PodTable`]).
use std::sync::Mutex;

pub(crate) use prrte_k8s::launch::targets::{PodAddr, PodTable};

static TABLE: Mutex<PodTable> = Mutex::new(PodTable::new());
/// The slots each pod was handed to PRRTE with, by node name.
static SLOTS: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

/// Records the slots of the pod behind node `node_name` (as the RAS handed it to PRRTE).
pub(crate) fn record_slots(node_name: &str, slots: u32) {
    let mut t = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    t.retain(|(n, _)| n != node_name);
    t.push((node_name.to_string(), slots));
}

/// The slots the pod behind `node_name` was handed to PRRTE with, if recorded (read by the RAS
/// module's `modify`, which exists only with the headers of patch 0003).
#[cfg(prrte_ras_modify)]
pub(crate) fn slots_of(node_name: &str) -> Option<u32> {
    SLOTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(n, _)| n == node_name)
        .map(|(_, s)| *s)
}

/// Records the pod behind node `node_name` (the RAS, for every pod it allocates).
pub(crate) fn record(node_name: &str, addr: PodAddr) {
    TABLE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .record(node_name, addr);
}

/// Runs `f` with the pods recorded so far.
pub(crate) fn with<R>(f: impl FnOnce(&PodTable) -> R) -> R {
    f(&TABLE.lock().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

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
        with(|t| {
            assert_eq!(t.lookup("w-0").unwrap().pod, "job-0-abcde");
            assert_eq!(t.lookup("10.250.3.2").unwrap().pod, "job-0-abcde");
            assert!(t.lookup("w-1").is_none());
            assert!(t.lookup("10.250.3.3").is_none());
        });
    }
}
