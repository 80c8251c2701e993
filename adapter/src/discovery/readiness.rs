//! Whether a pod can be allocated to PRRTE right now, and if not, why.

use std::net::Ipv4Addr;

use super::record::PodRecord;

/// The readiness of one pod as discovery sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PodReadiness {
    /// Running, Ready condition True, and an IPv4 pod IP: can be allocated.
    Ready(Ipv4Addr),
    /// May still become ready; the text describes its phase, reason and conditions.
    NotReady(String),
    /// Never allocated: terminating (deletionTimestamp set) or finished (Failed/Succeeded).
    Excluded(String),
}

impl PodReadiness {}

/// Classifies a pod. Terminating and finished pods are excluded even when they still report
/// Ready, because their processes are going away.
pub fn classify(pod: &PodRecord) -> PodReadiness {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Unknown");
    if pod.metadata.deletion_timestamp.is_some() {
        return PodReadiness::Excluded(format!(
            "terminating (deletionTimestamp set, phase {phase})"
        ));
    }
    if phase == "Failed" || phase == "Succeeded" {
        return PodReadiness::Excluded(format!("finished: {}", describe(pod)));
    }
    let ready_condition = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    if phase != "Running" || !ready_condition {
        return PodReadiness::NotReady(describe(pod));
    }
    match pod_ipv4(pod) {
        Some(ip) => PodReadiness::Ready(ip),
        None => {
            let ips: Vec<String> = status
                .and_then(|s| s.pod_ips.as_ref())
                .map(|ips| ips.iter().map(|i| i.ip.clone()).collect())
                .unwrap_or_default();
            let podip = status.and_then(|s| s.pod_ip.clone());
            let shown = if !ips.is_empty() {
                ips.join(", ")
            } else {
                podip.unwrap_or_else(|| "none".into())
            };
            PodReadiness::NotReady(format!(
                "{}; no IPv4 pod IP yet (pod IPs: {shown})",
                describe(pod)
            ))
        }
    }
}

/// The pod's IPv4 address: the first IPv4 entry of status.podIPs, else status.podIP.
pub(crate) fn pod_ipv4(pod: &PodRecord) -> Option<Ipv4Addr> {
    let status = pod.status.as_ref()?;
    if let Some(ip) = status
        .pod_ips
        .iter()
        .flatten()
        .find_map(|i| i.ip.parse::<Ipv4Addr>().ok())
    {
        return Some(ip);
    }
    status.pod_ip.as_deref().and_then(|ip| ip.parse().ok())
}

/// A one-line description: phase, reason, message, conditions and waiting containers.
pub fn describe(pod: &PodRecord) -> String {
    let Some(status) = pod.status.as_ref() else {
        return "phase Unknown (no status reported yet)".into();
    };
    let mut parts = vec![format!(
        "phase {}",
        status.phase.as_deref().unwrap_or("Unknown")
    )];
    if let Some(reason) = status.reason.as_deref().filter(|r| !r.is_empty()) {
        parts.push(format!("reason {reason}"));
    }
    if let Some(msg) = status.message.as_deref().filter(|m| !m.is_empty()) {
        parts.push(format!("message {msg:?}"));
    }
    match status.conditions.as_deref() {
        Some(conds) if !conds.is_empty() => {
            let rendered: Vec<String> = conds
                .iter()
                .map(|c| {
                    let mut s = format!("{}={}", c.type_, c.status);
                    let detail: Vec<&str> = [c.reason.as_deref(), c.message.as_deref()]
                        .into_iter()
                        .flatten()
                        .filter(|x| !x.is_empty())
                        .collect();
                    if !detail.is_empty() {
                        s.push_str(&format!(" ({})", detail.join(": ")));
                    }
                    s
                })
                .collect();
            parts.push(format!("conditions {}", rendered.join(", ")));
        }
        _ => parts.push("no conditions".into()),
    }
    for cs in status.container_statuses.iter().flatten() {
        let waiting = cs.state.as_ref().and_then(|s| s.waiting.as_ref());
        let terminated = cs.state.as_ref().and_then(|s| s.terminated.as_ref());
        if let Some(w) = waiting {
            parts.push(format!(
                "container {} waiting: {}",
                cs.name,
                w.reason.as_deref().unwrap_or("unknown reason")
            ));
        } else if let Some(t) = terminated {
            parts.push(format!(
                "container {} terminated: {} (exit {})",
                cs.name,
                t.reason.as_deref().unwrap_or("unknown reason"),
                t.exit_code
            ));
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::super::record::{RecordCondition, RecordIp, RecordStatus};
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(phase: &str, ready: Option<&str>, ip: Option<&str>) -> PodRecord {
        let mut p = PodRecord::default();
        p.metadata.name = Some("w-0".into());
        p.status = Some(RecordStatus {
            phase: Some(phase.into()),
            pod_ip: ip.map(String::from),
            conditions: ready.map(|r| {
                vec![RecordCondition {
                    type_: "Ready".into(),
                    status: r.into(),
                    reason: (r != "True").then(|| "ContainersNotReady".into()),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        });
        p
    }

    #[test]
    fn running_ready_with_ip_is_ready() {
        assert_eq!(
            classify(&pod("Running", Some("True"), Some("10.1.2.3"))),
            PodReadiness::Ready(Ipv4Addr::new(10, 1, 2, 3))
        );
    }

    #[test]
    fn missing_pieces_are_not_ready() {
        let r = classify(&pod("Pending", None, None));
        assert!(
            matches!(&r, PodReadiness::NotReady(d) if d.contains("phase Pending") && d.contains("no conditions")),
            "{r:?}"
        );
        let r = classify(&pod("Running", Some("False"), Some("10.0.0.1")));
        assert!(
            matches!(&r, PodReadiness::NotReady(d) if d.contains("Ready=False (ContainersNotReady)") && d.contains("phase Running")),
            "{r:?}"
        );
        let r = classify(&pod("Running", Some("True"), None));
        assert!(
            matches!(&r, PodReadiness::NotReady(d) if d.contains("no IPv4 pod IP")),
            "{r:?}"
        );
        let r = classify(&pod("Running", Some("True"), Some("fd00::5")));
        assert!(
            matches!(&r, PodReadiness::NotReady(d) if d.contains("fd00::5")),
            "{r:?}"
        );
        assert!(
            matches!(classify(&PodRecord::default()), PodReadiness::NotReady(d) if d.contains("no status"))
        );
    }

    #[test]
    fn terminating_and_finished_are_excluded_even_if_ready() {
        let mut p = pod("Running", Some("True"), Some("10.0.0.1"));
        p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(matches!(classify(&p), PodReadiness::Excluded(d) if d.contains("terminating")));
        let r = classify(&pod("Failed", Some("True"), Some("10.0.0.1")));
        assert!(
            matches!(&r, PodReadiness::Excluded(d) if d.contains("phase Failed")),
            "{r:?}"
        );
        assert!(matches!(
            classify(&pod("Succeeded", None, Some("10.0.0.1"))),
            PodReadiness::Excluded(_)
        ));
    }

    #[test]
    fn prefers_ipv4_from_pod_ips() {
        let mut p = pod("Running", Some("True"), Some("fd00::1"));
        p.status.as_mut().unwrap().pod_ips = Some(vec![
            RecordIp {
                ip: "fd00::1".into(),
            },
            RecordIp {
                ip: "10.9.8.7".into(),
            },
        ]);
        assert_eq!(
            classify(&p),
            PodReadiness::Ready(Ipv4Addr::new(10, 9, 8, 7))
        );
    }
}
