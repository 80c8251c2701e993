//! What the agent channel's cryptography costs per connection, each step timed alone in this
//! process on the code the launcher and the agent run (`make bench-scale`'s `channel` part and the
//! launch benchmark, `prrte-k8s-bench`, use it):
//!
//! * the HMAC challenge-response (both proofs made and checked), which the channel had before it
//!   was encrypted;
//! * the Noise handshake (`Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s`: each side makes an X25519 key
//!   pair and one exchange), the launcher's side and the agent's;
//! * sealing and opening a launch's frames: a launch request shaped as `plm k8s` sends it, the
//!   agent's `started` and `exited`.
//!
//! The Noise handshake and the sealed frames are what encryption added to a launch.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use prrte_k8s::protocol::{
    agent_noise, agent_proof, client_noise_start, client_proof, decode_message, new_nonce,
    parse_request, verify_agent_proof, verify_client_proof, Reply, Request,
};

/// A launch request shaped as the k8s PLM sends it to the agent of daemon `vpid` of a DVM of
/// `daemons` (prted's arguments as in the agent's launch-policy tests, its environment, the DVM
/// URI).
pub fn launch_request(vpid: u32, daemons: u32) -> Request {
    let hnp = "prte-mpi-0-4242@0.0;tcp://10.250.17.2:40000:24";
    let prefixes = "errmgr,ess,filem,grpcomm,iof,odls,oob,plm,prtebacktrace,prtedl,\
                    prteinstalldirs,prtereachable,ras,rmaps,rtc,schizo,state,hwloc,if,reachable";
    let mut argv: Vec<String> = vec!["--allow-run-as-root".into()];
    for (k, v) in [
        ("ess", "env".to_string()),
        ("ess_base_nspace", "prte-mpi-0-4242@0".to_string()),
        ("ess_base_vpid", vpid.to_string()),
        ("ess_base_num_procs", (daemons + 1).to_string()),
        ("prte_hnp_uri", hnp.to_string()),
        ("PREFIXES", prefixes.to_string()),
        ("oob_tcp_dynamic_ipv4_ports", "7121".to_string()),
        ("pmix_session_server", "1".to_string()),
        ("odls_base_max_threads", "0".to_string()),
        ("prte_if_include", "10.250.17.0/24".to_string()),
    ] {
        argv.extend(["--prtemca".into(), k.into(), v]);
    }
    argv.extend(
        [
            "--pmixmca",
            "ptl_base_if_include",
            "eth0",
            "--leave-session-attached",
        ]
        .map(String::from),
    );
    let env: BTreeMap<String, String> = [
        ("PRTE_MCA_oob_tcp_dynamic_ipv4_ports", "7121"),
        ("PRTE_MCA_PREFIXES", "errmgr,ess"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Request::Launch {
        argv,
        env,
        dvm_uri: Some("prte-mpi-0-4242@0.0;tcp4://10.250.17.2:7120".into()),
    }
}

/// Microseconds per connection of each step, one sample per timed run.
#[derive(Debug, Clone, Default)]
pub struct ChannelCost {
    /// The HMAC challenge-response, both sides.
    pub hmac_us: Vec<f64>,
    pub noise_launcher_us: Vec<f64>,
    pub noise_agent_us: Vec<f64>,
    /// Sealing the request and opening the two replies.
    pub frames_launcher_us: Vec<f64>,
    /// Opening the request and sealing the two replies.
    pub frames_agent_us: Vec<f64>,
    /// The sealed launch request's size.
    pub request_bytes: usize,
    pub connections_per_run: usize,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

impl ChannelCost {
    /// What encryption adds per connection on the launcher's side (median µs).
    pub fn launcher_added_us(&self) -> f64 {
        median(&self.noise_launcher_us) + median(&self.frames_launcher_us)
    }
    /// What encryption adds per connection on the agent's side (median µs).
    pub fn agent_added_us(&self) -> f64 {
        median(&self.noise_agent_us) + median(&self.frames_agent_us)
    }
}

/// One timed run of `connections` connections.
fn one_run(key: &[u8], connections: usize, cost: &mut ChannelCost) {
    let request = launch_request(7, 32);
    let (mut hmac, mut nl, mut na, mut fl, mut fa) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for _ in 0..connections {
        let (n_a, n_c) = (new_nonce(), new_nonce());
        // The challenge-response: the launcher's proof, checked by the agent, and back.
        let t = Instant::now();
        let cp = client_proof(key, &n_a, &n_c);
        assert!(verify_client_proof(key, &n_a, &n_c, &cp));
        let ap = agent_proof(key, &n_a, &n_c);
        assert!(verify_agent_proof(key, &n_a, &n_c, &ap));
        hmac += t.elapsed().as_secs_f64();

        // The Noise handshake, each side timed alone.
        let t = Instant::now();
        let (client, msg1) = client_noise_start(Some(key), &n_a, &n_c).expect("handshake starts");
        let mut launcher = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let (msg2, mut agent) =
            agent_noise(Some(key), &n_a, &n_c, &msg1).expect("handshake answers");
        na += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut client = client.finish(&msg2).expect("handshake completes");
        launcher += t.elapsed().as_secs_f64();
        nl += launcher;

        // One launch: the request, `started`, `exited`.
        let t = Instant::now();
        let frame = client.seal(&request);
        let mut launcher = t.elapsed().as_secs_f64();
        cost.request_bytes = frame.len();
        let t = Instant::now();
        let body = agent.open(&frame).expect("the request opens");
        black_box(parse_request(body.as_bytes()).expect("the request decodes"));
        let started = agent.seal(&Reply::Started { pid: 4242 });
        let exited = agent.seal(&Reply::Exited {
            pid: 4242,
            code: Some(0),
            signal: None,
            told_to_end: None,
        });
        fa += t.elapsed().as_secs_f64();
        let t = Instant::now();
        for f in [&started, &exited] {
            let body = client.open(f).expect("a reply opens");
            black_box(decode_message::<Reply>(body.as_bytes()).expect("a reply decodes"));
        }
        launcher += t.elapsed().as_secs_f64();
        fl += launcher;
    }
    let per = |s: f64| s * 1e6 / connections as f64;
    cost.hmac_us.push(per(hmac));
    cost.noise_launcher_us.push(per(nl));
    cost.noise_agent_us.push(per(na));
    cost.frames_launcher_us.push(per(fl));
    cost.frames_agent_us.push(per(fa));
}

/// `runs` timed runs of `connections` connections each, after an untimed warm-up.
pub fn measure(runs: usize, connections: usize) -> ChannelCost {
    let key = hex::encode(rand::random::<[u8; 32]>());
    one_run(
        key.as_bytes(),
        connections / 4 + 1,
        &mut ChannelCost::default(),
    );
    let mut cost = ChannelCost {
        connections_per_run: connections,
        ..Default::default()
    };
    for _ in 0..runs.max(1) {
        one_run(key.as_bytes(), connections, &mut cost);
    }
    cost
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_is_timed_and_the_request_passes_the_launch_checks() {
        let c = measure(2, 20);
        for v in [
            &c.hmac_us,
            &c.noise_launcher_us,
            &c.noise_agent_us,
            &c.frames_launcher_us,
            &c.frames_agent_us,
        ] {
            assert_eq!(v.len(), 2);
            assert!(v.iter().all(|t| *t > 0.0), "{v:?}");
        }
        // The request passes the protocol's launch checks, and sealed it carries the whole
        // launch (argv, environment, URI) plus its tags.
        let Request::Launch { argv, env, .. } = launch_request(7, 32) else {
            unreachable!()
        };
        prrte_k8s::protocol::validate_launch(&argv, &env).unwrap();
        let plain = prrte_k8s::protocol::encode_message(&launch_request(7, 32));
        assert!(
            c.request_bytes > plain.len(),
            "{} {}",
            c.request_bytes,
            plain.len()
        );
        assert!(c.launcher_added_us() > 0.0 && c.agent_added_us() > 0.0);
    }
}
