//! The JSON report: every sample, medians, ranges and ratios, with the profile, the machine
//! and the load.

use crate::host::{artifacts, machine, PROFILE};
use crate::results::{Row, Sample, Variant};
use crate::stats::{col, loads, median, median_u, stats};

pub fn json_report(rows: &[Row], runs: usize) -> serde_json::Value {
    let machine = machine();
    let rows_json: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let mut methods = serde_json::Map::new();
            for (v, t) in &row.times {
                let get = |f: fn(&Sample) -> f64| t.iter().map(f).collect::<Vec<_>>();
                let per: Vec<f64> = t
                    .iter()
                    .map(|s| s.cpu * 1e3 / (row.pods - 1) as f64)
                    .collect();
                methods.insert(
                    v.tag().into(),
                    serde_json::json!({
                        "label": v.label(),
                        "dvm_ready_s": stats(&get(|s| s.ready)),
                        "first_job_s": stats(&get(|s| s.first_job)),
                        "job_true_1_per_pod_s": stats(&get(|s| s.job_one)),
                        "job_true_ranks_per_pod_s": stats(&get(|s| s.job_many)),
                        "phases_s": {
                            "to_first_prted": stats(&get(|s| s.phases.to_first)),
                            "first_to_last_prted": stats(&get(|s| s.phases.spread)),
                            "last_prted_to_ready": stats(&get(|s| s.phases.wire_up)),
                        },
                        "launcher_round_s": if *v == Variant::Agent {
                            serde_json::json!({
                                "all_started": stats(&get(|s| s.launch.total)),
                                "connect_handshake_median": stats(&get(|s| s.launch.connect_median)),
                                "connect_handshake_max": stats(&get(|s| s.launch.connect_max)),
                                "request_to_started_median": stats(&get(|s| s.launch.start_median)),
                                "request_to_started_max": stats(&get(|s| s.launch.start_max)),
                            })
                        } else {
                            serde_json::Value::Null
                        },
                        "launcher_cpu_per_daemon_ms": stats(&per),
                        "agents_idle_cpu_ms_per_s": stats(&get(|s| s.agents_idle)),
                    }),
                );
            }
            let m = |v: Variant| col(row, v, |s| s.ready).map(|t| median(&t));
            let agent = m(Variant::Agent);
            let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => serde_json::json!(a / b),
                _ => serde_json::Value::Null,
            };
            let pss_sum: Vec<u64> = row
                .rss
                .agent_pss
                .iter()
                .zip(&row.rss.prted_pss)
                .map(|(a, p)| a + p)
                .collect();
            serde_json::json!({
                "pods": row.pods,
                "ranks_per_pod": row.ranks_per_pod,
                "load_avg_1m": stats(&loads([row])),
                "methods": methods,
                "ratio_ssh_over_agent": ratio(m(Variant::Ssh), agent),
                "ratio_ssh_no_tree_over_agent": ratio(m(Variant::SshNoTree), agent),
                "ratio_agent_over_lower_bound": ratio(agent, m(Variant::LowerBound)),
                "peak_rss_kib": {
                    "agent_per_pod": median_u(&row.rss.agent),
                    "sshd_per_pod": median_u(&row.rss.sshd),
                    "ssh_clients_pod0": row.rss.clients,
                },
                "memory_at_ready_kib": {
                    "agent_rss_per_pod": median_u(&row.rss.agent_now),
                    "agent_pss_per_pod": median_u(&row.rss.agent_pss),
                    "prted_pss_per_pod": median_u(&row.rss.prted_pss),
                    "agent_plus_prted_pss_per_pod": median_u(&pss_sum),
                    "sshd_pss_per_pod": median_u(&row.rss.sshd_pss),
                },
            })
        })
        .collect();
    serde_json::json!({
        "benchmark": "prrte-k8s-bench",
        "profile": PROFILE,
        "artifacts": artifacts(),
        "cores": machine["cores"],
        "machine": machine,
        "load_avg_1m": stats(&loads(rows)),
        "runs": runs,
        "rows": rows_json,
    })
}
