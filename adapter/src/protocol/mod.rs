//! The wire protocol between the launcher (inside `prterun`'s PLM component) and the
//! `prrte-k8s-agent` running in every pod.
//!
//! # Framing
//!
//! A connection is a TCP byte stream of **frames**. A frame is a 4-byte big-endian unsigned
//! length `N` followed by `N` bytes of UTF-8 JSON (one object). The agent refuses frames longer
//! than its `--max-frame` (default [`DEFAULT_MAX_FRAME`], 1 MiB); before authentication it
//! accepts at most [`HANDSHAKE_MAX_FRAME`] bytes. Every object carries `"v": 1` (the protocol
//! version, [`VERSION`]) and a `"type"`. An over-size, non-JSON or otherwise malformed frame
//! makes the agent answer with an `error` frame (if the connection is still writable) and close
//! that connection; other connections are not affected.
//!
//! # Handshake (mutual challenge-response)
//!
//! Both sides hold the same per-job secret `K` (a Kubernetes Secret mounted as a file, read with
//! [`read_secret_file`]; from a mounted ssh private key, as Kubeflow Trainer mounts one in every
//! pod of an MPI TrainJob, `K` is derived with HKDF-SHA256). `MAC(...)` is HMAC-SHA256 keyed with
//! `K`, nonces are 32 random bytes, hex-encoded on the wire, and `||` is concatenation.
//!
//! 1. agent → client, as soon as the connection is accepted:
//!    `{"v":1,"type":"challenge","auth":"hmac-sha256","nonce":Na,"agent":"prrte-k8s-agent"}` (the
//!    agent's version is not told to whoever connects)
//! 2. client → agent:
//!    `{"v":1,"type":"response","nonce":Nc,"mac":MAC("prrte-k8s client" || Na || Nc),"noise":E1}`
//! 3. the agent checks the MAC in constant time. On mismatch it sends
//!    `{"v":1,"type":"refused","reason":"authentication failed: ..."}` and closes; nothing is
//!    started. On success it reads `E1` and proves that it holds `K` too:
//!    `{"v":1,"type":"welcome","mac":MAC("prrte-k8s agent" || Nc || Na),"noise":E2}`
//!    and the client checks that (a client must not send a request to an agent that failed to
//!    prove itself), then reads `E2`.
//!
//! `E1` and `E2` (hex) are the two messages of a Noise handshake (`NOISE_PSK`,
//! `Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s`, through the `snow` crate): each side's fresh X25519
//! key, with the pre-shared key `HMAC-SHA256(K, "prrte-k8s noise psk")` and the prologue
//! `"prrte-k8s channel v1" || mode || Na || Nc` (`mode` 1 with a secret). A message that does
//! not verify (altered, or made under another key) fails the handshake with an `error`; a
//! `response` or `welcome` without `noise` comes from a prrte-k8s without the encrypted
//! channel and is refused, saying so.
//!
//! An agent started with `--insecure-no-auth` and no secret sends `"auth":"none"`; the client
//! then answers without `mac` and the agent's `welcome` has none either; the Noise pattern is
//! `NOISE_NONE` (`Noise_NN_...`: encrypted, but nothing authenticates the peer). A launcher
//! that holds a secret refuses such an agent, and a launcher without a secret refuses an agent
//! that demands one: insecure mode needs both sides to agree.
//!
//! # Encrypted (sealed) frames
//!
//! After the handshake every frame in **both** directions is encrypted and authenticated with
//! the Noise session's keys (ChaCha20-Poly1305, one key per direction, a counter as nonce): the
//! frame body is one or more Noise messages of at most 65,535 bytes, each holding a flag byte
//! (more follow in this frame, or the last) and up to 65,518 bytes of the message's JSON (see
//! [`Session`]). A frame replayed from this session or an earlier one, reordered, sent in the
//! other direction, cut, or altered in any byte does not decrypt: the agent answers with an
//! encrypted `error` and closes the connection; an unencrypted frame is refused by name.
//! `--max-frame` bounds the encrypted frame.
//!
//! # Messages inside encrypted frames
//!
//! Requests (client → agent; unknown fields are refused, see [`Request`]):
//! * `{"v":1,"type":"launch","argv":[...],"env":{"PRTE_X":"..."}}` — start the agent's
//!   configured prted. `argv` holds only the arguments *after* the executable: a request can never
//!   name an executable (there is no field for one; a field such as `executable` or `program`, or
//!   an `argv[0]` that looks like a path to a program, is refused). `env` keys must match
//!   `^(PRTE|PMIX|OMPI)_[A-Za-z0-9_]*$` and values must not contain NUL (see [`validate_launch`]);
//!   the agent admits only the arguments and MCA parameters of `params` (see
//!   `crate::agent::launch_policy`).
//!   An optional `"dvm_uri":"<nspace>.<rank>;tcp4://<ipv4>:<port>"` is the URI of the DVM's
//!   PMIx tool server (prte's); the agent writes it to its DVM URI file (default
//!   `/var/run/prrte-k8s/dvm.uri`) while that prted runs, so `prrte-k8s prun` works from any pod.
//!   Any other form is refused (see [`validate_dvm_uri`]).
//! * `{"v":1,"type":"kill","grace_ms":2000}` — terminate the running prted: SIGTERM to its whole
//!   process group, SIGKILL after the grace period (the smaller of `grace_ms`, if given, and the
//!   agent's `--kill-grace`), then `exited`.
//! * `{"v":1,"type":"ping"}` → `pong`; `{"v":1,"type":"status"}` → `status`. The launcher also
//!   sends `ping` as a heartbeat while its prted runs (see Supervision).
//! * `{"v":1,"type":"watch"}` → `ack`: the connection is told `preempt` (below) when the
//!   agent's pod is told to end, and keeps the agent's pod up meanwhile; a launcher watches its
//!   own pod's agent this way.
//! * Batch mode only (agents started with `--run`): `{"v":1,"type":"attach"}` → `ack`, sent by
//!   the agent that runs the job's command to every other pod's agent, on a connection it keeps
//!   open for the whole run; meanwhile `{"v":1,"type":"rank_output","rank":R,"fd":1,"data":B64}`
//!   (not answered) carries the output of each rank that ran in the worker's pod, which its
//!   agent writes to its own log, each line prefixed `[rank R] ` (see
//!   `crate::agent::rank_output`); then `{"v":1,"type":"finish","code":N}` → `ack` on that
//!   connection when the command ended with exit status `N`, after which the worker's agent
//!   exits (see `crate::agent::batch`). Agents not in batch mode answer all three with `failed`.
//!
//! * `{"v":1,"type":"exec","argv":[...],"env":[[k,v],...],"cwd":...,"stdin":bool}` — run a
//!   program from the agent's exec allowlist, never a shell; then `stdin {data}`,
//!   `stdin_close {}` and `signal {signal}` on that connection. The agent answers `started`
//!   or `failed`, streams `output {fd, data}`, and ends with `exited`. See [`exec`].
//!
//! Replies (agent → client, see [`Reply`]):
//! * `started {pid}` or `failed {reason}` for a launch (refused request, busy agent, exec error);
//! * later, on the same connection, `exited {pid, code}` or `exited {pid, signal}` once prted
//!   and everything left in its process group are gone; with `"told_to_end":SIGNUM` when the
//!   agent stopped prted because its pod was told to end by that signal while the DVM was up
//!   (deleted, evicted, preempted: prted's own status, often 0 after SIGTERM, does not say so);
//! * `failed {reason}` for a `kill` that has nothing to kill, or a request that could not be parsed;
//! * `pong {}`, `status {running, pid, launched_by}`, `ack {}`;
//! * `preempt {seconds}`, unasked, on the connection that launched the running prted and on
//!   every `watch` connection, once, when the agent gets SIGTERM and was started with
//!   `--preempt-grace` (its pod's termination grace period): the agent keeps its prted (and the
//!   ranks) running for `seconds` more, or until prted ends, then stops it as for `kill`;
//! * `error {reason}`: a protocol violation; the agent closes the connection after sending it.
//!
//! # Supervision
//!
//! The connection that launched prted controls it: when that connection ends (EOF, reset, a
//! protocol error, TCP keepalive failure), the agent kills prted's process group exactly as for
//! `kill`; so it does when a launcher that sent a `ping` on the connection has been silent for
//! the agent's `--heartbeat-timeout` (the launcher pings every `plm_k8s_heartbeat_interval`
//! and takes an agent silent for `plm_k8s_heartbeat_misses` intervals for lost; see
//! [`liveness`]). The agent runs one prted at a time.

mod auth;
pub mod exec;
mod frame;
pub(crate) mod grammar;
mod handshake;
pub mod liveness;
mod messages;
mod noise;
pub(crate) mod params;
mod secret;
mod session;
mod signal;
mod ssh_key;
mod validate;
mod wire;

pub use auth::{
    agent_proof, client_proof, new_nonce, parse_nonce, verify_agent_proof, verify_client_proof,
};
pub(crate) use auth::{AUTH_FAILED_REASON, NONCE_LEN};
pub(crate) use frame::set_keepalive;
pub use frame::{
    codec, encode_frame, framed, recv_frame, send_frame, FramedConn, DEFAULT_MAX_FRAME,
    HANDSHAKE_MAX_FRAME,
};
pub use handshake::{client_handshake, HandshakeError};
pub(crate) use messages::plain_kind;
pub use messages::{parse_request, AuthMode, Plain, Reply, Request};
pub use noise::{agent_noise, client_noise_start, local_pair, parse_noise_field};
pub(crate) use noise::{NOISE_NONE, NOISE_PSK};
pub(crate) use secret::SecretError;
pub use secret::{read_secret_file, DEFAULT_SECRET_FILE};
pub use session::{Role, Session};
pub(crate) use signal::signal_name;
pub(crate) use validate::LaunchRefusal;
pub use validate::{validate_dvm_uri, validate_launch, InvalidDvmUri};
pub use wire::{decode_message, encode_message, ProtocolError, VERSION};

/// Default TCP port of the agent's protocol listener.
pub(crate) const DEFAULT_AGENT_PORT: u16 = crate::settings::mca::AGENT_PORT.default_u64() as u16;
/// Default TCP port of the agent's HTTP health endpoint.
pub(crate) const DEFAULT_HEALTH_PORT: u16 = 7118;
