//! Property-based fuzzing (proptest, stable Rust) of everything that parses peer input before or
//! after authentication: the frame decoder, message and request decoding, sealed-frame opening,
//! nonce parsing and launch-request validation (arguments, environment, DVM URI, the launch
//! parameter policy). The properties: nothing panics, every error is one printable line when
//! escaped, decoded frames respect the size limit, and what is accepted re-encodes.
//!
//! Inputs are random bytes, random JSON, and mutations (bit flips, cuts, insertions, splices,
//! value swaps) of the seed corpus in `tests/fuzz-corpus/` (one file per message kind).
//!
//! The test command runs a bounded number of cases with a fixed seed (deterministic in CI).
//! A longer run, with a fresh seed each time:
//!
//! ```sh
//! PRRTE_K8S_FUZZ_CASES=200000 PRRTE_K8S_FUZZ_SEED=random \
//!     cargo test --release -p prrte-k8s --test fuzz_protocol
//! ```
//!
//! A failing case is printed (minimized) with the seed that found it; add the input to the
//! corpus when fixing it.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use prrte_k8s::agent::launch_policy as policy;
use prrte_k8s::protocol::{
    self, decode_message, local_pair, parse_nonce, parse_request, validate_dvm_uri,
    validate_launch, Plain, Reply, Request,
};
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder;

const DEFAULT_CASES: u32 = 300;
const DEFAULT_SEED: u64 = 0x7072_7274_652d_6b38;

fn corpus() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(seeds.len() >= 10, "the seed corpus is missing");
    seeds
}

fn runner() -> TestRunner {
    let cases = std::env::var("PRRTE_K8S_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let seed = match std::env::var("PRRTE_K8S_FUZZ_SEED").ok().as_deref() {
        Some("random") => rand_seed(),
        Some(s) => s.parse().unwrap_or(DEFAULT_SEED),
        None => DEFAULT_SEED,
    };
    eprintln!("fuzz: {cases} cases, seed {seed}");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

fn rand_seed() -> u64 {
    let n = protocol::new_nonce();
    u64::from_le_bytes(n[..8].try_into().unwrap())
}

/// Random JSON values, nested a few levels.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(serde_json::Value::from),
        ".{0,40}".prop_map(serde_json::Value::from),
        prop_oneof![
            Just("launch"),
            Just("kill"),
            Just("ping"),
            Just("status"),
            Just("sealed"),
            Just("response"),
            Just("challenge"),
            Just("hmac-sha256"),
            Just("none"),
            Just("--prtemca"),
            Just("prte_launch_agent"),
            Just("PRTE_MCA_x"),
        ]
        .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("v".to_string()),
                    Just("type".to_string()),
                    Just("argv".to_string()),
                    Just("env".to_string()),
                    Just("dvm_uri".to_string()),
                    Just("seq".to_string()),
                    Just("body".to_string()),
                    Just("mac".to_string()),
                    Just("nonce".to_string()),
                    Just("grace_ms".to_string()),
                    "[a-z_]{1,12}",
                ],
                inner,
                0..8
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Cut(usize),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Splice(usize, usize, usize),
    /// Replace the value of one top-level key with a random JSON value.
    Value(usize, serde_json::Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<usize>().prop_map(Mutation::Cut),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), 1usize..32).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(s, a, b)| Mutation::Splice(s, a, b)),
        (any::<usize>(), json_value()).prop_map(|(i, v)| Mutation::Value(i, v)),
    ]
}

fn apply(seeds: &[Vec<u8>], seed: usize, muts: &[Mutation]) -> Vec<u8> {
    let mut data = seeds[seed % seeds.len()].clone();
    for m in muts {
        let len = data.len().max(1);
        match m {
            Mutation::Flip(i, b) => {
                if !data.is_empty() {
                    data[i % len] ^= b | 1;
                }
            }
            Mutation::Cut(i) => data.truncate(i % len),
            Mutation::Insert(i, v) => {
                let at = i % (data.len() + 1);
                data.splice(at..at, v.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let at = i % len;
                let end = (at + n).min(data.len());
                if at < end {
                    data.drain(at..end);
                }
            }
            Mutation::Splice(s, a, b) => {
                let other = &seeds[s % seeds.len()];
                if !other.is_empty() {
                    let from = a % other.len();
                    let to = from + (b % (other.len() - from)).min(64);
                    let at = a % (data.len() + 1);
                    data.splice(at..at, other[from..to].iter().copied());
                }
            }
            Mutation::Value(i, v) => {
                if let Ok(serde_json::Value::Object(mut map)) = serde_json::from_slice(&data) {
                    if !map.is_empty() {
                        let key = map.keys().nth(i % map.len()).unwrap().clone();
                        map.insert(key, v.clone());
                        data = serde_json::to_vec(&serde_json::Value::Object(map)).unwrap();
                    }
                }
            }
        }
    }
    data
}

/// Every parser that sees peer bytes, with the properties each must keep.
fn exercise(data: &[u8]) {
    // Frame decoder: frames never exceed the limit, and decoding ends.
    for max in [16usize, 4096, protocol::HANDSHAKE_MAX_FRAME] {
        let mut codec = protocol::codec(max);
        let mut buf = BytesMut::from(data);
        for _ in 0..data.len() + 1 {
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => assert!(frame.len() <= max),
                Ok(None) | Err(_) => break,
            }
        }
        let mut buf = BytesMut::from(data);
        let _ = codec.decode_eof(&mut buf);
    }
    // Messages before authentication.
    if let Ok(p) = decode_message::<Plain>(data) {
        let again = protocol::encode_message(&p);
        assert_eq!(decode_message::<Plain>(&again).unwrap(), p);
    } else if let Err(e) = decode_message::<Plain>(data) {
        assert!(!prrte_k8s::text::echo(&e.to_string()).contains('\n'));
    }
    let _ = decode_message::<Reply>(data);
    // Requests inside sealed frames, and the checks a launch goes through.
    match parse_request(data) {
        Ok(req) => {
            let again = protocol::encode_message(&req);
            assert_eq!(parse_request(&again).unwrap(), req);
            if let Request::Launch { argv, env, dvm_uri } = &req {
                let ok = validate_launch(argv, env).is_ok();
                let _ = policy::check_launch(argv, env, launcher());
                if let Some(uri) = dvm_uri {
                    if validate_dvm_uri(uri).is_ok() {
                        let _ = policy::check_dvm_uri_host(uri, "10.0.0.5".parse().unwrap());
                    }
                }
                if ok {
                    assert!(!argv.iter().any(|a| a.contains('\0')));
                }
            }
        }
        Err(reason) => {
            let line = prrte_k8s::text::echo(&reason.to_string());
            assert!(!line.contains('\n') && !line.contains('\x1b'), "{line}");
        }
    }
    // Sealed frames, with and without a key, in both roles.
    let text = String::from_utf8_lossy(data);
    for key in [Some(b"k".repeat(32)), None] {
        let (mut client, mut agent) = local_pair(key.as_deref());
        for s in [&mut client, &mut agent] {
            let _ = s.open(data);
            let _ = s.open(data);
        }
    }
    let _ = parse_nonce(&text);
    let _ = validate_dvm_uri(&text);
    let pieces: Vec<String> = text.split(' ').map(str::to_owned).collect();
    let _ = validate_launch(&pieces, &BTreeMap::new());
    let _ = policy::check_launch(&pieces, &BTreeMap::new(), launcher());
    let env: BTreeMap<String, String> = pieces
        .chunks(2)
        .map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or_default()))
        .collect();
    let _ = validate_launch(&[], &env);
    let _ = policy::check_launch(&[], &env, launcher());
    let p = prrte_k8s::text::echo(&text);
    assert!(!p.chars().any(|c| c.is_control()));
}

/// The launcher's address in the seed corpus (its HNP URI's).
fn launcher() -> std::net::IpAddr {
    "10.0.0.2".parse().unwrap()
}

#[test]
fn the_seed_corpus_parses_as_expected() {
    let seeds = corpus();
    for s in &seeds {
        exercise(s);
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus");
    let read = |n: &str| std::fs::read(dir.join(n)).unwrap();
    assert!(matches!(
        parse_request(&read("launch.json")),
        Ok(Request::Launch { .. })
    ));
    assert!(parse_request(&read("launch-evil.json")).is_err());
    assert!(matches!(
        decode_message::<Plain>(&read("challenge.json")),
        Ok(Plain::Challenge { .. })
    ));
    if let Ok(Request::Launch { argv, env, .. }) = parse_request(&read("launch.json")) {
        assert_eq!(policy::check_launch(&argv, &env, launcher()), Ok(argv));
    }
}

#[test]
fn mutated_corpus_never_panics() {
    let seeds = corpus();
    runner()
        .run(
            &(any::<usize>(), prop::collection::vec(mutation(), 1..6)),
            |(seed, muts)| {
                let data = apply(&seeds, seed, &muts);
                exercise(&data);
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn random_bytes_never_panic() {
    runner()
        .run(&prop::collection::vec(any::<u8>(), 0..2048), |data| {
            exercise(&data);
            Ok(())
        })
        .unwrap();
}

#[test]
fn random_json_never_panics() {
    runner()
        .run(&json_value(), |v| {
            let body = serde_json::to_vec(&v).unwrap();
            exercise(&body);
            // As the body of a correctly sealed frame, too.
            let (mut client, mut agent) = local_pair(Some(&b"k".repeat(32)));
            let frame = client.seal_text(&String::from_utf8_lossy(&body));
            let opened = agent.open(&frame).expect("a sealed frame opens");
            exercise(opened.as_bytes());
            Ok(())
        })
        .unwrap();
}

/// Deeply nested JSON is refused (serde_json's recursion limit), not a stack overflow.
#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    for depth in [200usize, 10_000, 100_000] {
        let body = format!(
            "{{\"v\":1,\"type\":\"launch\",\"argv\":{}{}}}",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        assert!(parse_request(body.as_bytes()).is_err());
        assert!(decode_message::<Plain>(body.as_bytes()).is_err());
        let (_, mut s) = local_pair(None);
        assert!(s.open(body.as_bytes()).is_err());
    }
}
