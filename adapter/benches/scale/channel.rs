//! `channel`: the CPU the agent channel's cryptography takes per connection, and what the
//! encryption adds to a DVM's start.

use crate::stats::{stat, stat_json};
use serde_json::{json, Value};

/// The channel's CPU per connection (`sandbox::bench::channel_cost`), and what encryption adds
/// to a DVM's start at a few sizes.
pub(crate) fn bench_channel(runs: usize, connections: usize) -> Value {
    let c = sandbox::bench::channel_cost::measure(runs, connections);
    println!(
        "== agent channel: CPU per connection, µs, median [min-max] of {runs} runs of \
         {connections} connections (launch request sealed: {} bytes)",
        c.request_bytes
    );
    println!("{:<42} | {:<20} | {:<20}", "step", "launcher", "agent");
    for (step, l, a) in [
        (
            "HMAC challenge-response (both sides)",
            stat(&c.hmac_us, 1),
            "(left: both)".to_string(),
        ),
        (
            "Noise handshake (X25519, PSK)",
            stat(&c.noise_launcher_us, 1),
            stat(&c.noise_agent_us, 1),
        ),
        (
            "launch, started, exited sealed/opened",
            stat(&c.frames_launcher_us, 1),
            stat(&c.frames_agent_us, 1),
        ),
    ] {
        println!("{step:<42} | {l:<20} | {a:<20}");
    }
    let (launcher, agent) = (c.launcher_added_us(), c.agent_added_us());
    let mut sizes = vec![];
    for pods in [4u32, 16, 32, 1024] {
        let ms = launcher * f64::from(pods - 1) / 1e3;
        println!(
            "encryption's CPU for a DVM of {pods:>4} pods: launcher {ms:.2} ms for its {} \
             daemons, each agent {:.3} ms",
            pods - 1,
            agent / 1e3
        );
        sizes.push(json!({"pods": pods, "launcher_ms": ms, "agent_ms": agent / 1e3}));
    }
    json!({
        "connections_per_run": connections,
        "launch_request_sealed_bytes": c.request_bytes,
        "hmac_us": stat_json(&c.hmac_us),
        "noise_handshake_launcher_us": stat_json(&c.noise_launcher_us),
        "noise_handshake_agent_us": stat_json(&c.noise_agent_us),
        "frames_launcher_us": stat_json(&c.frames_launcher_us),
        "frames_agent_us": stat_json(&c.frames_agent_us),
        "added_by_encryption": sizes,
    })
}
