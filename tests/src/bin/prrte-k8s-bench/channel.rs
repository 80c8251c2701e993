//! What the agent channel's encryption adds to DVM-ready time: the channel's cryptography timed
//! per connection in this run (`sandbox::bench::channel_cost`), multiplied by each DVM's
//! daemons and held against the DVM-ready time the agents took in the same run.

use crate::host::PROFILE;
use crate::results::{Row, Variant};
use crate::stats::{cell, col, median};
use sandbox::bench::channel_cost::ChannelCost;
use serde_json::{json, Value};

/// Timed runs and connections per run of the measurement.
pub const RUNS: usize = 5;
pub const CONNECTIONS: usize = 2000;

/// (pods, agent DVM-ready median s, launcher's added CPU ms, its share of DVM ready in %).
fn shares(rows: &[Row], c: &ChannelCost) -> Vec<(usize, f64, f64, f64)> {
    rows.iter()
        .filter_map(|row| {
            let ready = median(&col(row, Variant::Agent, |s| s.ready)?);
            let ms = c.launcher_added_us() * (row.pods - 1) as f64 / 1e3;
            Some((row.pods, ready, ms, ms / 1e3 / ready * 100.0))
        })
        .collect()
}

pub fn print_channel(rows: &[Row], c: &ChannelCost) {
    println!();
    println!(
        "The agent channel's encryption [{PROFILE}]: its CPU per connection timed in this run \
         ({RUNS} runs of {CONNECTIONS} connections, µs, median [min-max]): Noise handshake \
         launcher {} / agent {}, sealed frames of a launch launcher {} / agent {} (the HMAC \
         challenge-response, there before, {})",
        cell(&c.noise_launcher_us, 1),
        cell(&c.noise_agent_us, 1),
        cell(&c.frames_launcher_us, 1),
        cell(&c.frames_agent_us, 1),
        cell(&c.hmac_us, 1),
    );
    println!(
        "per DVM: the launcher's added CPU for all its daemons (an upper bound of the wall time \
         it adds) against the agents' DVM-ready time above; each agent adds {:.3} ms in its own pod",
        c.agent_added_us() / 1e3
    );
    let head = format!(
        "{:>5} | {:>18} | {:>22} | {:>14}",
        "pods", "DVM ready, agent", "launcher added CPU", "share"
    );
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for (pods, ready, ms, share) in shares(rows, c) {
        println!(
            "{pods:>5} | {:>16.3} s | {ms:>19.2} ms | {share:>12.2} %",
            ready
        );
    }
}

pub fn channel_json(rows: &[Row], c: &ChannelCost) -> Value {
    let s = |v: &[f64]| json!({"median": median(v), "samples": v});
    json!({
        "runs": RUNS,
        "connections_per_run": c.connections_per_run,
        "launch_request_sealed_bytes": c.request_bytes,
        "hmac_us": s(&c.hmac_us),
        "noise_handshake_launcher_us": s(&c.noise_launcher_us),
        "noise_handshake_agent_us": s(&c.noise_agent_us),
        "frames_launcher_us": s(&c.frames_launcher_us),
        "frames_agent_us": s(&c.frames_agent_us),
        "agent_added_ms": c.agent_added_us() / 1e3,
        "per_dvm": shares(rows, c).into_iter().map(|(pods, ready, ms, share)| json!({
            "pods": pods, "agent_dvm_ready_s": ready, "launcher_added_ms": ms,
            "share_of_dvm_ready_percent": share,
        })).collect::<Vec<_>>(),
    })
}
