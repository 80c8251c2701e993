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
//! [`read_secret_file`]). `MAC(...)` is HMAC-SHA256 keyed with
//! `K`, nonces are 32 random bytes, hex-encoded on the wire, and `||` is concatenation.
//!
//! 1. agent → client, as soon as the connection is accepted:
//!    `{"v":1,"type":"challenge","auth":"hmac-sha256","nonce":Na,"agent":"prrte-k8s-agent 0.1.0"}`
//! 2. client → agent:
//!    `{"v":1,"type":"response","nonce":Nc,"mac":MAC("prrte-k8s client" || Na || Nc)}`
//! 3. the agent checks the MAC in constant time. On mismatch it sends
//!    `{"v":1,"type":"refused","reason":"authentication failed: ..."}` and closes; nothing is
//!    started. On success it proves that it holds `K` too:
//!    `{"v":1,"type":"welcome","mac":MAC("prrte-k8s agent" || Nc || Na)}`
//!    and the client checks that (a client must not send a request to an agent that failed to
//!    prove itself).
//!
//! An agent started with `--insecure-no-auth` and no secret sends `"auth":"none"`; the client
//! then answers without `mac` and the agent's `welcome` has none either. A launcher that holds a
//! secret refuses such an agent, and a launcher without a secret refuses an agent that demands
//! one: insecure mode needs both sides to agree.
//!
//! # Sealed frames
//!
//! After the handshake every frame in **both** directions is sealed:
//! `{"v":1,"type":"sealed","seq":S,"body":"<JSON text of the message>","mac":M}` with
//! `M = MAC(label || Na || Nc || S as u64 big-endian || body bytes)`, where `label` is
//! `"prrte-k8s frame c2s"` for client-to-agent frames and `"prrte-k8s frame s2c"` for
//! agent-to-client frames. `S` starts at 1 in each direction and must grow by exactly one per
//! frame. The receiver checks the MAC over the exact body bytes before parsing the body, so a
//! frame replayed from this session (wrong `seq`), from an earlier session (other nonces), one
//! sent in the other direction, or one with a forged body or MAC is refused: the agent answers
//! with a sealed `error` and closes the connection. In insecure mode `mac` is omitted but `seq`
//! is still enforced.
//!
//! # Messages inside sealed frames
//!
//! Requests (client → agent; unknown fields are refused, see [`Request`]):
//! * `{"v":1,"type":"launch","argv":[...],"env":{"PRTE_X":"..."}}` — start the agent's
//!   configured prted. `argv` holds only the arguments *after* the executable: a request can never
//!   name an executable (there is no field for one; a field such as `executable` or `program`, or
//!   an `argv[0]` that looks like a path to a program, is refused). `env` keys must match
//!   `^(PRTE|PMIX|OMPI)_[A-Za-z0-9_]*$` and values must not contain NUL (see [`validate_launch`]).
//!   An optional `"dvm_uri":"<nspace>.<rank>;tcp4://<ipv4>:<port>"` is the URI of the DVM's
//!   PMIx tool server (prte's); the agent writes it to its DVM URI file (default
//!   `/var/run/prrte-k8s/dvm.uri`) while that prted runs, so `prrte-k8s prun` works from any pod.
//!   Any other form is refused (see [`validate_dvm_uri`]).
//! * `{"v":1,"type":"kill","grace_ms":2000}` — terminate the running prted: SIGTERM to its whole
//!   process group, SIGKILL after the grace period (the smaller of `grace_ms`, if given, and the
//!   agent's `--kill-grace`), then `exited`.
//! * `{"v":1,"type":"ping"}` → `pong`; `{"v":1,"type":"status"}` → `status`.
//! * Batch mode only (agents started with `--run`): `{"v":1,"type":"attach"}` → `ack`, sent by
//!   the agent that runs the job's command to every other pod's agent, on a connection it keeps
//!   open for the whole run; then `{"v":1,"type":"finish","code":N}` → `ack` on that connection
//!   when the command ended with exit status `N`, after which the worker's agent exits (see
//!   `crate::agent::batch`). Agents not in batch mode answer both with `failed`.
//!
//! * `{"v":1,"type":"exec","argv":[...],"env":[[k,v],...],"cwd":...,"stdin":bool}` — run a
//!   program from the agent's exec allowlist, never a shell; then `stdin {data}`,
//!   `stdin_close {}` and `signal {signal}` on that connection. The agent answers `started`
//!   or `failed`, streams `output {fd, data}`, and ends with `exited`. See [`exec`].
//!
//! Replies (agent → client, see [`Reply`]):
//! * `started {pid}` or `failed {reason}` for a launch (refused request, busy agent, exec error);
//! * later, on the same connection, `exited {pid, code}` or `exited {pid, signal}` once prted
//!   and everything left in its process group are gone;
//! * `failed {reason}` for a `kill` that has nothing to kill, or a request that could not be parsed;
//! * `pong {}`, `status {running, pid, launched_by}`, `ack {}`;
//! * `error {reason}`: a protocol violation; the agent closes the connection after sending it.
//!
//! # Supervision
//!
//! The connection that launched prted controls it: when that connection ends (EOF, reset, a
//! protocol error, TCP keepalive failure), the agent kills prted's process group exactly as for
//! `kill`. The agent runs one prted at a time.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::bytes::Bytes;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

pub mod exec;
mod secret;
mod signal;

pub use secret::{read_secret_file, SecretError, DEFAULT_SECRET_FILE};
pub use signal::signal_name;

/// Protocol version carried as `"v"` in every frame.
pub const VERSION: u64 = 1;
/// Default TCP port of the agent's protocol listener.
pub const DEFAULT_AGENT_PORT: u16 = crate::settings::mca::AGENT_PORT.default_u64() as u16;
/// Default TCP port of the agent's HTTP health endpoint.
pub const DEFAULT_HEALTH_PORT: u16 = 7118;
/// Default maximum frame length (bytes of JSON after the length prefix).
pub const DEFAULT_MAX_FRAME: usize = crate::settings::agent::MAX_FRAME.default_u64() as usize;
/// Maximum frame length accepted before authentication.
pub const HANDSHAKE_MAX_FRAME: usize = 16 * 1024;
/// Length of the handshake nonces in bytes.
pub const NONCE_LEN: usize = 32;

const LABEL_CLIENT_PROOF: &[u8] = b"prrte-k8s client";
const LABEL_AGENT_PROOF: &[u8] = b"prrte-k8s agent";
const LABEL_C2S: &[u8] = b"prrte-k8s frame c2s";
const LABEL_S2C: &[u8] = b"prrte-k8s frame s2c";

/// The reason text the agent sends when the client's proof does not verify.
pub const AUTH_FAILED_REASON: &str = "authentication failed: the launcher's secret does not \
     match this agent's; mount the same Secret in both";

type HmacSha256 = Hmac<Sha256>;

/// Errors of framing, parsing and authentication.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("connection error: {0}")]
    Io(#[from] io::Error),
    #[error("frame exceeds the maximum of {max} bytes")]
    FrameTooLarge { max: usize },
    #[error("connection closed by the peer")]
    Closed,
    #[error("no frame within {0:?}")]
    Timeout(Duration),
    #[error("malformed frame: {0}")]
    Malformed(String),
    #[error("unsupported protocol version {got} (this side speaks {VERSION})")]
    Version { got: String },
    #[error("frame integrity check failed: {0}")]
    Integrity(String),
}

/// How the agent authenticates clients; announced in its `challenge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthMode {
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
    #[serde(rename = "none")]
    None,
}

/// Frames sent outside the sealed channel: the handshake, `refused`/`error` before
/// authentication, and the `sealed` envelope itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Plain {
    Challenge {
        auth: AuthMode,
        nonce: String,
        #[serde(default)]
        agent: String,
    },
    Response {
        nonce: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mac: Option<String>,
    },
    Welcome {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mac: Option<String>,
    },
    Refused {
        reason: String,
    },
    Error {
        reason: String,
    },
    Sealed {
        seq: u64,
        body: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mac: Option<String>,
    },
}

/// A request from the launcher, carried inside a sealed frame.
///
/// There is deliberately no field that names a program: the agent only ever executes the prted
/// it was configured with. Unknown fields are refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Launch {
        /// Arguments after the executable (prted's `argv[1..]`).
        argv: Vec<String>,
        /// Extra environment for prted (`PRTE_*`, `PMIX_*`, `OMPI_*` only).
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// The DVM's PMIx tool URI (`<nspace>.<rank>;tcp4://<ipv4>:<port>`, see
        /// [`validate_dvm_uri`]); the agent writes it to its DVM URI file while this prted runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dvm_uri: Option<String>,
    },
    Kill {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grace_ms: Option<u64>,
    },
    Ping {},
    Status {},
    /// Batch mode: the agent running the job's command (pod 0) attaches to a worker's agent;
    /// while this connection lasts the worker waits for `finish`, and if it ends without one
    /// the worker concludes that its launcher went away.
    Attach {},
    /// Batch mode: the job's command ended with `code`; the worker's agent exits (0 if the
    /// command succeeded, else with this code after a short delay).
    Finish {
        code: i32,
    },
    /// Run a program from the agent's exec allowlist (see [`exec`] and `crate::agent::exec`);
    /// the connection then belongs to that program until it ends.
    Exec {
        /// The program (an absolute path or a name on the allowlist) and its arguments, as
        /// templates (see [`exec::expand`]).
        argv: Vec<String>,
        /// Environment assignments applied in order (values are templates).
        #[serde(default)]
        env: Vec<(String, String)>,
        /// Working directory (a template); default the agent's TMPDIR.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
        /// Whether the client forwards stdin (`stdin`/`stdin_close`); else it is /dev/null.
        #[serde(default)]
        stdin: bool,
    },
    /// Exec: bytes for the program's stdin (base64).
    Stdin {
        data: String,
    },
    /// Exec: end of the program's stdin.
    StdinClose {},
    /// Exec: deliver a signal (by number) to the program's process group.
    Signal {
        signal: i32,
    },
}

impl Request {
    /// The request's `type` as it appears on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Launch { .. } => "launch",
            Request::Kill { .. } => "kill",
            Request::Ping {} => "ping",
            Request::Status {} => "status",
            Request::Attach {} => "attach",
            Request::Finish { .. } => "finish",
            Request::Exec { .. } => "exec",
            Request::Stdin { .. } => "stdin",
            Request::StdinClose {} => "stdin_close",
            Request::Signal { .. } => "signal",
        }
    }
}

/// A reply or event from the agent, carried inside a sealed frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    Started {
        pid: u32,
    },
    Failed {
        reason: String,
    },
    Exited {
        pid: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
    },
    Pong {},
    Status {
        running: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        launched_by: Option<String>,
    },
    Error {
        reason: String,
    },
    /// An `attach` or `finish` was accepted.
    Ack {},
    /// Exec: output of the program on `fd` 1 (stdout) or 2 (stderr), base64.
    Output {
        fd: u8,
        data: String,
    },
}

/// Field names a launch request might use to smuggle in a program; refused with a clear reason.
const EXECUTABLE_FIELDS: &[&str] = &[
    "executable",
    "program",
    "exe",
    "path",
    "cmd",
    "command",
    "binary",
    "file",
    "argv0",
    "prted",
];

/// Serializes a message as a frame body: its JSON object with `"v": 1` added.
pub fn encode_message<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut value = serde_json::to_value(msg).expect("protocol messages serialize to JSON");
    if let serde_json::Value::Object(map) = &mut value {
        map.insert("v".to_owned(), serde_json::Value::from(VERSION));
    }
    serde_json::to_vec(&value).expect("JSON values serialize")
}

/// Parses a frame body: checks it is a JSON object with `"v": 1`, then decodes the rest as `T`.
pub fn decode_message<T: DeserializeOwned>(body: &[u8]) -> Result<T, ProtocolError> {
    let value = parse_versioned(body)?;
    serde_json::from_value(value).map_err(|e| ProtocolError::Malformed(e.to_string()))
}

/// Parses a request body (the text inside a sealed frame), giving reasons a launcher author can act on.
pub fn decode_request(body: &[u8]) -> Result<Request, String> {
    let value = parse_versioned(body).map_err(|e| e.to_string())?;
    if let serde_json::Value::Object(map) = &value {
        if map.get("type").and_then(|t| t.as_str()) == Some("launch") {
            if let Some(field) = EXECUTABLE_FIELDS.iter().find(|f| map.contains_key(**f)) {
                return Err(format!(
                    "a launch request cannot name an executable (field `{field}`): this agent \
                     only starts its configured prted; send only the arguments after the \
                     executable in `argv`"
                ));
            }
        }
    }
    serde_json::from_value(value).map_err(|e| format!("invalid request: {e}"))
}

fn parse_versioned(body: &[u8]) -> Result<serde_json::Value, ProtocolError> {
    let mut value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ProtocolError::Malformed(format!("not JSON: {e}")))?;
    let map = value
        .as_object_mut()
        .ok_or_else(|| ProtocolError::Malformed("not a JSON object".into()))?;
    match map.remove("v") {
        Some(v) if v.as_u64() == Some(VERSION) => Ok(value),
        Some(v) => Err(ProtocolError::Version { got: v.to_string() }),
        None => Err(ProtocolError::Malformed(
            "missing protocol version field `v`".into(),
        )),
    }
}

/// Checks an environment variable name a launch request may set.
pub fn validate_env_key(key: &str) -> Result<(), String> {
    let rest = ["PRTE_", "PMIX_", "OMPI_"]
        .iter()
        .find_map(|p| key.strip_prefix(p));
    match rest {
        Some(rest) if rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => Ok(()),
        _ => Err(format!(
            "environment variable `{}` is not allowed: launch requests may only set variables \
             matching ^(PRTE|PMIX|OMPI)_[A-Za-z0-9_]*$",
            key.escape_debug()
        )),
    }
}

/// Checks a launch request's arguments and environment; the error names the offending item.
pub fn validate_launch<'a>(
    argv: &[String],
    env: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), String> {
    if let Some(first) = argv.first() {
        let base = first.rsplit('/').next().unwrap_or(first);
        if !first.starts_with('-') && (first.contains('/') || base == "prted") {
            return Err(format!(
                "argv[0] `{}` looks like an executable: `argv` holds only the arguments after the \
                 executable; the agent always runs its configured prted",
                first.escape_debug()
            ));
        }
    }
    if let Some(i) = argv.iter().position(|a| a.contains('\0')) {
        return Err(format!("argv[{i}] contains a NUL byte"));
    }
    for (key, value) in env {
        validate_env_key(key)?;
        if value.contains('\0') {
            return Err(format!(
                "the value of environment variable `{key}` contains a NUL byte"
            ));
        }
    }
    Ok(())
}

/// Longest DVM URI accepted in a launch request.
pub const MAX_DVM_URI_LEN: usize = 1024;

/// Checks a DVM URI of the form `<nspace>.<rank>;tcp4://<ipv4>:<port>` (what prte's
/// `--report-uri` writes, e.g. `prte-pod-0-77@0.0;tcp4://10.0.0.5:7120`). The namespace is
/// printable ASCII without whitespace or `;`, the rank a decimal number, the address a dotted
/// IPv4 address and the port 1..=65535. Anything else is refused with the reason.
pub fn validate_dvm_uri(uri: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "invalid dvm_uri {:?}: {why}; expected <nspace>.<rank>;tcp4://<ipv4>:<port> (what \
             prte --report-uri writes)",
            uri.chars().take(120).collect::<String>()
        ))
    };
    if uri.len() > MAX_DVM_URI_LEN {
        return bad(&format!("longer than {MAX_DVM_URI_LEN} bytes"));
    }
    let Some((proc_part, addr_part)) = uri.split_once(';') else {
        return bad("no `;` between the process name and the address");
    };
    let Some((nspace, rank)) = proc_part.rsplit_once('.') else {
        return bad("the process name has no `.<rank>`");
    };
    if nspace.is_empty()
        || !nspace
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b';' && b != b'\\')
    {
        return bad("the namespace must be non-empty printable ASCII without spaces, `;` or `\\`");
    }
    if rank.is_empty() || !rank.bytes().all(|b| b.is_ascii_digit()) || rank.parse::<u32>().is_err()
    {
        return bad("the rank is not a decimal number");
    }
    let Some(hostport) = addr_part.strip_prefix("tcp4://") else {
        return bad("the address does not start with tcp4://");
    };
    let Some((host, port)) = hostport.rsplit_once(':') else {
        return bad("the address has no :<port>");
    };
    if host.parse::<std::net::Ipv4Addr>().is_err() {
        return bad("the host is not an IPv4 address");
    }
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return bad("the port is not a number");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => bad("the port is not in 1..=65535"),
    }
}

/// The framing codec: u32 big-endian length prefix, at most `max` bytes of body.
pub fn codec(max: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .big_endian()
        .length_field_type::<u32>()
        .max_frame_length(max)
        .new_codec()
}

/// Encodes one frame (length prefix + body) as raw bytes.
pub fn encode_frame(body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len()).expect("frame body fits in u32");
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A framed connection.
pub type FramedConn<S> = Framed<S, LengthDelimitedCodec>;

/// Wraps a byte stream in the frame codec with the given maximum frame length.
pub fn framed<S: AsyncRead + AsyncWrite>(stream: S, max: usize) -> FramedConn<S> {
    Framed::new(stream, codec(max))
}

/// Receives one frame, waiting at most `timeout` (if given). Cancel-safe.
pub async fn recv_frame<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut FramedConn<S>,
    timeout: Option<Duration>,
) -> Result<Bytes, ProtocolError> {
    let next = match timeout {
        Some(t) => tokio::time::timeout(t, conn.next())
            .await
            .map_err(|_| ProtocolError::Timeout(t))?,
        None => conn.next().await,
    };
    match next {
        None => Err(ProtocolError::Closed),
        Some(Ok(bytes)) => Ok(bytes.freeze()),
        Some(Err(e)) => Err(classify_read_error(e, conn.codec().max_frame_length())),
    }
}

/// Turns a codec read error into [`ProtocolError::FrameTooLarge`] where that is what it is.
pub fn classify_read_error(e: io::Error, max: usize) -> ProtocolError {
    if e.get_ref()
        .is_some_and(|inner| inner.is::<tokio_util::codec::LengthDelimitedCodecError>())
    {
        ProtocolError::FrameTooLarge { max }
    } else {
        ProtocolError::Io(e)
    }
}

/// Sends one frame body, waiting at most `timeout` for the peer to take it.
pub async fn send_frame<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut FramedConn<S>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(), ProtocolError> {
    match tokio::time::timeout(timeout, conn.send(Bytes::from(body))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ProtocolError::Io(e)),
        Err(_) => Err(ProtocolError::Timeout(timeout)),
    }
}

/// Turns on TCP keepalive (first probe after 15 s idle, then every 5 s, 4 probes), so that a
/// peer whose node vanished is noticed within about 35 s by both sides.
pub fn set_keepalive(stream: &tokio::net::TcpStream) -> io::Result<()> {
    let ka = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(15))
        .with_interval(Duration::from_secs(5))
        .with_retries(4);
    socket2::SockRef::from(stream).set_tcp_keepalive(&ka)
}

/// A fresh random nonce.
pub fn new_nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

/// Decodes a hex nonce of exactly [`NONCE_LEN`] bytes.
pub fn parse_nonce(hex_text: &str) -> Result<[u8; NONCE_LEN], ProtocolError> {
    let bytes = hex::decode(hex_text)
        .map_err(|e| ProtocolError::Malformed(format!("nonce is not hex: {e}")))?;
    bytes
        .try_into()
        .map_err(|_| ProtocolError::Malformed(format!("nonce must be {NONCE_LEN} bytes")))
}

fn mac_over(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    for p in parts {
        mac.update(p);
    }
    mac
}

fn verify_hex(mac: HmacSha256, given_hex: &str) -> bool {
    match hex::decode(given_hex) {
        Ok(tag) => mac.verify_slice(&tag).is_ok(),
        Err(_) => false,
    }
}

/// The client's proof: `MAC("prrte-k8s client" || Na || Nc)`, hex.
pub fn client_proof(key: &[u8], agent_nonce: &[u8], client_nonce: &[u8]) -> String {
    hex::encode(
        mac_over(key, &[LABEL_CLIENT_PROOF, agent_nonce, client_nonce])
            .finalize()
            .into_bytes(),
    )
}

/// Checks a client's proof in constant time.
pub fn verify_client_proof(
    key: &[u8],
    agent_nonce: &[u8],
    client_nonce: &[u8],
    given: &str,
) -> bool {
    verify_hex(
        mac_over(key, &[LABEL_CLIENT_PROOF, agent_nonce, client_nonce]),
        given,
    )
}

/// The agent's proof: `MAC("prrte-k8s agent" || Nc || Na)`, hex.
pub fn agent_proof(key: &[u8], agent_nonce: &[u8], client_nonce: &[u8]) -> String {
    hex::encode(
        mac_over(key, &[LABEL_AGENT_PROOF, client_nonce, agent_nonce])
            .finalize()
            .into_bytes(),
    )
}

/// Checks an agent's proof in constant time.
pub fn verify_agent_proof(
    key: &[u8],
    agent_nonce: &[u8],
    client_nonce: &[u8],
    given: &str,
) -> bool {
    verify_hex(
        mac_over(key, &[LABEL_AGENT_PROOF, client_nonce, agent_nonce]),
        given,
    )
}

/// Which end of the connection a [`Session`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Agent,
}

/// The authenticated state of one connection: seals outgoing and opens incoming frames.
pub struct Session {
    key: Option<Vec<u8>>,
    agent_nonce: [u8; NONCE_LEN],
    client_nonce: [u8; NONCE_LEN],
    role: Role,
    send_seq: u64,
    recv_seq: u64,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("authenticated", &self.key.is_some())
            .field("role", &self.role)
            .field("send_seq", &self.send_seq)
            .field("recv_seq", &self.recv_seq)
            .finish()
    }
}

impl Session {
    /// A session after a completed handshake; `key` is `None` in insecure mode.
    pub fn new(
        role: Role,
        key: Option<Vec<u8>>,
        agent_nonce: [u8; NONCE_LEN],
        client_nonce: [u8; NONCE_LEN],
    ) -> Session {
        Session {
            key,
            agent_nonce,
            client_nonce,
            role,
            send_seq: 0,
            recv_seq: 0,
        }
    }

    /// Whether frames are authenticated (false only in insecure mode).
    pub fn is_authenticated(&self) -> bool {
        self.key.is_some()
    }

    fn labels(&self) -> (&'static [u8], &'static [u8]) {
        match self.role {
            Role::Client => (LABEL_C2S, LABEL_S2C),
            Role::Agent => (LABEL_S2C, LABEL_C2S),
        }
    }

    fn frame_mac(&self, key: &[u8], label: &[u8], seq: u64, body: &[u8]) -> HmacSha256 {
        mac_over(
            key,
            &[
                label,
                &self.agent_nonce,
                &self.client_nonce,
                &seq.to_be_bytes(),
                body,
            ],
        )
    }

    /// Seals a message; returns the frame body to send.
    pub fn seal<T: Serialize>(&mut self, msg: &T) -> Vec<u8> {
        let body = String::from_utf8(encode_message(msg)).expect("JSON is UTF-8");
        self.seal_text(&body)
    }

    /// Seals arbitrary body text (normally JSON); returns the frame body to send.
    pub fn seal_text(&mut self, body: &str) -> Vec<u8> {
        self.send_seq += 1;
        let seq = self.send_seq;
        let mac = self.key.as_ref().map(|key| {
            let (send_label, _) = self.labels();
            hex::encode(
                self.frame_mac(key, send_label, seq, body.as_bytes())
                    .finalize()
                    .into_bytes(),
            )
        });
        encode_message(&Plain::Sealed {
            seq,
            body: body.to_owned(),
            mac,
        })
    }

    /// Seals `body` under an explicit sequence number without advancing the session's own
    /// counter: a correctly authenticated frame that is out of order (for tests of the
    /// receiver's sequence checks).
    pub fn seal_text_at(&self, seq: u64, body: &str) -> Vec<u8> {
        let mac = self.key.as_ref().map(|key| {
            let (send_label, _) = self.labels();
            hex::encode(
                self.frame_mac(key, send_label, seq, body.as_bytes())
                    .finalize()
                    .into_bytes(),
            )
        });
        encode_message(&Plain::Sealed {
            seq,
            body: body.to_owned(),
            mac,
        })
    }

    /// Verifies a sealed frame and returns its body text. Any failure is final for the session.
    pub fn open(&mut self, frame: &[u8]) -> Result<String, ProtocolError> {
        let value = parse_versioned(frame)?;
        let kind = value
            .get("type")
            .and_then(|t| t.as_str())
            .unwrap_or("")
            .to_owned();
        if kind != "sealed" {
            if let Ok(Plain::Error { reason } | Plain::Refused { reason }) =
                serde_json::from_value::<Plain>(value)
            {
                return Err(ProtocolError::Malformed(format!(
                    "peer sent an unsealed error: {reason}"
                )));
            }
            return Err(ProtocolError::Malformed(format!(
                "expected a sealed frame, got type `{}` (after the handshake every frame must be sealed)",
                kind.escape_debug()
            )));
        }
        let (seq, body, mac) = match serde_json::from_value::<Plain>(value) {
            Ok(Plain::Sealed { seq, body, mac }) => (seq, body, mac),
            Ok(_) => unreachable!("type checked above"),
            Err(e) => return Err(ProtocolError::Malformed(e.to_string())),
        };
        if let Some(key) = &self.key {
            let Some(mac) = mac else {
                return Err(ProtocolError::Integrity(
                    "sealed frame without a MAC".into(),
                ));
            };
            let (_, recv_label) = self.labels();
            if !verify_hex(self.frame_mac(key, recv_label, seq, body.as_bytes()), &mac) {
                return Err(ProtocolError::Integrity(
                    "MAC does not verify (forged, altered, or replayed from another session)"
                        .into(),
                ));
            }
        }
        let expected = self.recv_seq + 1;
        if seq != expected {
            return Err(ProtocolError::Integrity(format!(
                "sequence number {seq} where {expected} was expected (replayed or reordered frame)"
            )));
        }
        self.recv_seq = seq;
        Ok(body)
    }
}

/// The `type` of a plain frame, for messages.
pub fn plain_kind(p: &Plain) -> &'static str {
    match p {
        Plain::Challenge { .. } => "challenge",
        Plain::Response { .. } => "response",
        Plain::Welcome { .. } => "welcome",
        Plain::Refused { .. } => "refused",
        Plain::Error { .. } => "error",
        Plain::Sealed { .. } => "sealed",
    }
}

/// Why a client-side handshake did not complete.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The agent refused us (normally: our secret does not match its secret).
    #[error("{0}")]
    Refused(String),
    /// The agent answered our proof but could not prove that it holds the secret.
    #[error("the agent could not prove that it holds the launcher's secret (its Secret differs, or it is not a prrte-k8s agent)")]
    AgentNotProven,
    /// The agent runs without authentication but we hold a secret.
    #[error("the agent runs without authentication (--insecure-no-auth, no secret) but the launcher has a secret; refusing to launch through it: mount the same Secret in the agent's pod")]
    AgentInsecure,
    /// The agent demands authentication but we have no secret.
    #[error("the agent requires authentication but the launcher has no secret: give the launcher the agent's Secret")]
    NoSecret,
    #[error("{0}")]
    Protocol(#[from] ProtocolError),
}

/// Runs the client side of the handshake. Each wait for the agent is bounded by `timeout`.
pub async fn client_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut FramedConn<S>,
    secret: Option<&[u8]>,
    timeout: Duration,
) -> Result<Session, HandshakeError> {
    let first = recv_frame(conn, Some(timeout)).await?;
    let (auth, agent_nonce) = match decode_message::<Plain>(&first)? {
        Plain::Challenge { auth, nonce, .. } => (auth, parse_nonce(&nonce)?),
        Plain::Refused { reason } | Plain::Error { reason } => {
            return Err(HandshakeError::Refused(reason))
        }
        other => {
            return Err(ProtocolError::Malformed(format!(
                "expected a challenge, got {}",
                plain_kind(&other)
            ))
            .into())
        }
    };
    let key = match (auth, secret) {
        (AuthMode::HmacSha256, Some(s)) => Some(s.to_vec()),
        (AuthMode::HmacSha256, None) => return Err(HandshakeError::NoSecret),
        (AuthMode::None, Some(_)) => return Err(HandshakeError::AgentInsecure),
        (AuthMode::None, None) => None,
    };
    let client_nonce = new_nonce();
    let mac = key
        .as_deref()
        .map(|k| client_proof(k, &agent_nonce, &client_nonce));
    let response = Plain::Response {
        nonce: hex::encode(client_nonce),
        mac,
    };
    send_frame(conn, encode_message(&response), timeout).await?;
    let answer = match recv_frame(conn, Some(timeout)).await {
        Ok(a) => a,
        // An agent that refuses closes right after its `refused`; a reset may beat it.
        Err(ProtocolError::Closed) if key.is_some() => {
            return Err(HandshakeError::Refused(
                "the agent closed the connection during authentication".into(),
            ))
        }
        Err(e) => return Err(e.into()),
    };
    match decode_message::<Plain>(&answer)? {
        Plain::Welcome { mac } => {
            if let Some(k) = &key {
                let ok = mac
                    .as_deref()
                    .is_some_and(|m| verify_agent_proof(k, &agent_nonce, &client_nonce, m));
                if !ok {
                    return Err(HandshakeError::AgentNotProven);
                }
            }
        }
        Plain::Refused { reason } | Plain::Error { reason } => {
            return Err(HandshakeError::Refused(reason))
        }
        other => {
            return Err(ProtocolError::Malformed(format!(
                "expected welcome, got {}",
                plain_kind(&other)
            ))
            .into())
        }
    }
    Ok(Session::new(Role::Client, key, agent_nonce, client_nonce))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(key: Option<&[u8]>) -> (Session, Session) {
        let na = new_nonce();
        let nc = new_nonce();
        (
            Session::new(Role::Client, key.map(|k| k.to_vec()), na, nc),
            Session::new(Role::Agent, key.map(|k| k.to_vec()), na, nc),
        )
    }

    #[test]
    fn sealed_round_trip_and_sequence() {
        let (mut c, mut a) = pair(Some(b"k1"));
        let f1 = c.seal(&Request::Ping {});
        let f2 = c.seal(&Request::Status {});
        let b1 = a.open(&f1).unwrap();
        assert_eq!(decode_request(b1.as_bytes()).unwrap(), Request::Ping {});
        // Replaying frame 1 after it was accepted is refused.
        let mut a2 = Session::new(
            Role::Agent,
            Some(b"k1".to_vec()),
            a.agent_nonce,
            a.client_nonce,
        );
        a2.open(&f1).unwrap();
        assert!(matches!(a2.open(&f1), Err(ProtocolError::Integrity(_))));
        // In-order frame 2 works on the original session.
        assert_eq!(
            decode_request(a.open(&f2).unwrap().as_bytes()).unwrap(),
            Request::Status {}
        );
        // Reply direction.
        let r = a.seal(&Reply::Pong {});
        assert_eq!(
            decode_message::<Reply>(c.open(&r).unwrap().as_bytes()).unwrap(),
            Reply::Pong {}
        );
    }

    #[test]
    fn reflected_and_foreign_frames_are_refused() {
        let (mut c, mut a) = pair(Some(b"k1"));
        // A client frame sent back to the client (reflection) fails: other direction's label.
        let f = c.seal(&Request::Ping {});
        assert!(matches!(c.open(&f), Err(ProtocolError::Integrity(_))));
        // A frame from another session (other nonces) fails.
        let (mut c2, _) = pair(Some(b"k1"));
        let g = c2.seal(&Request::Ping {});
        assert!(matches!(a.open(&g), Err(ProtocolError::Integrity(_))));
        // Wrong key fails.
        let mut c3 = Session::new(
            Role::Client,
            Some(b"k2".to_vec()),
            a.agent_nonce,
            a.client_nonce,
        );
        let h = c3.seal(&Request::Ping {});
        assert!(matches!(a.open(&h), Err(ProtocolError::Integrity(_))));
    }

    #[test]
    fn altered_body_is_refused() {
        let (mut c, mut a) = pair(Some(b"secret"));
        let frame = c.seal(&Request::Ping {});
        let text = String::from_utf8(frame).unwrap().replace("ping", "status");
        assert!(matches!(
            a.open(text.as_bytes()),
            Err(ProtocolError::Integrity(_))
        ));
    }

    #[test]
    fn insecure_sessions_still_enforce_sequence() {
        let (mut c, mut a) = pair(None);
        let f = c.seal(&Request::Ping {});
        a.open(&f).unwrap();
        assert!(matches!(a.open(&f), Err(ProtocolError::Integrity(_))));
    }

    #[test]
    fn proofs_are_direction_specific() {
        let (na, nc) = (new_nonce(), new_nonce());
        let p = client_proof(b"k", &na, &nc);
        assert!(verify_client_proof(b"k", &na, &nc, &p));
        assert!(!verify_client_proof(b"other", &na, &nc, &p));
        assert!(!verify_agent_proof(b"k", &na, &nc, &p));
        assert!(!verify_client_proof(b"k", &na, &nc, "zz"));
        let q = agent_proof(b"k", &na, &nc);
        assert!(verify_agent_proof(b"k", &na, &nc, &q));
    }

    #[test]
    fn version_is_required() {
        assert!(matches!(
            decode_message::<Plain>(br#"{"type":"error","reason":"x"}"#),
            Err(ProtocolError::Malformed(_))
        ));
        assert!(matches!(
            decode_message::<Plain>(br#"{"v":2,"type":"error","reason":"x"}"#),
            Err(ProtocolError::Version { .. })
        ));
        let body = encode_message(&Plain::Error { reason: "x".into() });
        assert_eq!(
            decode_message::<Plain>(&body).unwrap(),
            Plain::Error { reason: "x".into() }
        );
    }

    #[test]
    fn requests_refuse_unknown_and_executable_fields() {
        let e = decode_request(br#"{"v":1,"type":"launch","argv":[],"executable":"/bin/sh"}"#)
            .unwrap_err();
        assert!(
            e.contains("cannot name an executable") && e.contains("executable"),
            "{e}"
        );
        let e = decode_request(br#"{"v":1,"type":"launch","argv":[],"program":"sh"}"#).unwrap_err();
        assert!(e.contains("`program`"), "{e}");
        let e = decode_request(br#"{"v":1,"type":"launch","argv":[],"colour":1}"#).unwrap_err();
        assert!(e.contains("unknown field `colour`"), "{e}");
        let e = decode_request(br#"{"v":1,"type":"shell"}"#).unwrap_err();
        assert!(e.contains("unknown variant `shell`"), "{e}");
        let e = decode_request(br#"{"v":1,"type":"exec"}"#).unwrap_err();
        assert!(e.contains("missing field `argv`"), "{e}");
        let ok = decode_request(br#"{"v":1,"type":"launch","argv":["--x"],"env":{"PRTE_A":"1"}}"#)
            .unwrap();
        assert_eq!(ok.kind(), "launch");
    }

    #[test]
    fn env_keys_and_argv_are_validated() {
        assert!(validate_env_key("PRTE_MCA_x").is_ok());
        assert!(validate_env_key("PMIX_").is_ok());
        assert!(validate_env_key("OMPI_COMM_WORLD_SIZE9").is_ok());
        for bad in [
            "LD_PRELOAD",
            "PATH",
            "PRTE",
            "prte_x",
            "PRTE_A-B",
            "PRTE_A B",
            "XPRTE_A",
            "PRTE_é",
        ] {
            let e = validate_env_key(bad).unwrap_err();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
        let env: BTreeMap<String, String> = [("PRTE_X".to_string(), "a\0b".to_string())].into();
        assert!(validate_launch(&[], &env).unwrap_err().contains("PRTE_X"));
        let none = BTreeMap::new();
        assert!(validate_launch(&["/bin/sh".into()], &none).is_err());
        assert!(validate_launch(&["prted".into()], &none).is_err());
        assert!(validate_launch(&["--prtemca".into(), "/x/y".into()], &none).is_ok());
        assert!(validate_launch(&["--a".into(), "b\0".into()], &none)
            .unwrap_err()
            .contains("argv[1]"));
    }

    #[test]
    fn frames_encode_length_big_endian() {
        let f = encode_frame(b"{}");
        assert_eq!(f, vec![0, 0, 0, 2, b'{', b'}']);
    }

    #[tokio::test]
    async fn oversized_frames_are_classified() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut conn = framed(a, 8);
        use tokio::io::AsyncWriteExt;
        b.write_all(&encode_frame(b"0123456789")).await.unwrap();
        let e = recv_frame(&mut conn, Some(Duration::from_secs(5)))
            .await
            .unwrap_err();
        assert!(
            matches!(e, ProtocolError::FrameTooLarge { max: 8 }),
            "{e:?}"
        );
    }

    #[test]
    fn dvm_uris_are_checked() {
        for ok in [
            "prte-pod-0-77@0.0;tcp4://10.0.0.5:7120",
            "ns.0;tcp4://127.0.0.1:1",
            "a.b.c.12;tcp4://192.168.1.200:65535",
        ] {
            assert_eq!(validate_dvm_uri(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("", "`;`"),
            ("ns.0", "`;`"),
            ("ns;tcp4://10.0.0.1:7120", "rank"),
            ("ns.x;tcp4://10.0.0.1:7120", "rank"),
            (".0;tcp4://10.0.0.1:7120", "namespace"),
            ("n s.0;tcp4://10.0.0.1:7120", "namespace"),
            ("ns.0;tcp6://[::1]:7120", "tcp4://"),
            ("ns.0;tcp4://10.0.0.1", "port"),
            ("ns.0;tcp4://host:7120", "IPv4"),
            ("ns.0;tcp4://10.0.0.1:0", "1..=65535"),
            ("ns.0;tcp4://10.0.0.1:70000", "1..=65535"),
            ("ns.0;tcp4://10.0.0.1:7120;tcp4://10.0.0.2:7120", "IPv4"),
            ("ns.0;tcp4://10.0.0.1:7120\n", "port"),
        ] {
            let e = validate_dvm_uri(bad).unwrap_err();
            assert!(e.contains(why) && e.contains("expected"), "{bad:?}: {e}");
        }
        assert!(validate_dvm_uri(&format!("{}.0;tcp4://1.2.3.4:5", "n".repeat(2000))).is_err());
    }

    #[test]
    fn launch_dvm_uri_round_trips_and_unknown_fields_are_refused() {
        let req = Request::Launch {
            argv: vec!["--x".into()],
            env: BTreeMap::new(),
            dvm_uri: Some("ns.0;tcp4://10.0.0.1:7120".into()),
        };
        let body = encode_message(&req);
        assert_eq!(decode_request(&body).unwrap(), req);
        let plain = Request::Launch {
            argv: vec![],
            env: BTreeMap::new(),
            dvm_uri: None,
        };
        let text = String::from_utf8(encode_message(&plain)).unwrap();
        assert!(!text.contains("dvm_uri"), "{text}");
        let e = decode_request(br#"{"v":1,"type":"launch","argv":[],"dvm":"x"}"#).unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
    }
}
