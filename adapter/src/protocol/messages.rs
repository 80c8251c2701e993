//! The messages of the protocol: the plain frames of the handshake, and the requests and
//! replies carried inside encrypted (sealed) frames.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::wire::{parse_versioned, ProtocolError};

/// How the agent authenticates clients; announced in its `challenge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthMode {
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
    #[serde(rename = "none")]
    None,
}

/// Frames sent before the encrypted channel exists: the handshake, and `refused`/`error`
/// before authentication.
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
        /// The client's Noise handshake message, hex (see `noise`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        noise: Option<String>,
    },
    Welcome {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mac: Option<String>,
        /// The agent's Noise handshake message, hex.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        noise: Option<String>,
    },
    Refused {
        reason: String,
    },
    Error {
        reason: String,
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
        /// [`validate_dvm_uri`](super::validate_dvm_uri)); the agent writes it to its DVM URI file while this prted runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dvm_uri: Option<String>,
    },
    Kill {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grace_ms: Option<u64>,
    },
    Ping {},
    Status {},
    /// Ask to be told when this agent's pod is told to end: the agent answers `ack`, and sends
    /// `preempt` on this connection when it gets SIGTERM (a launcher watching its own pod).
    Watch {},
    /// Batch mode: the agent running the job's command (pod 0) attaches to a worker's agent;
    /// while this connection lasts the worker waits for `finish`, and if it ends without one
    /// the worker concludes that its launcher went away.
    Attach {},
    /// Batch mode: the job's command ended with `code`; the worker's agent exits (0 if the
    /// command succeeded, else with this code after a short delay).
    Finish {
        code: i32,
    },
    /// Batch mode: output of rank `rank` on `fd` 1 (stdout) or 2 (stderr), base64, for the log
    /// of the worker's pod (each line prefixed `[rank N] `); sent on the attached connection
    /// before `finish`, and not answered.
    RankOutput {
        rank: u32,
        fd: u8,
        data: String,
    },
    /// Run a program from the agent's exec allowlist (see [`super::exec`] and `crate::agent::exec`);
    /// the connection then belongs to that program until it ends.
    Exec {
        /// The program (an absolute path or a name on the allowlist) and its arguments, as
        /// templates (see [`super::exec::expand`]).
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
            Request::Watch {} => "watch",
            Request::Attach {} => "attach",
            Request::Finish { .. } => "finish",
            Request::RankOutput { .. } => "rank_output",
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
        /// The agent stopped prted because its pod was told to end by this signal (the pod
        /// deleted, evicted or preempted) while the pod's DVM was up: the daemon did not end of
        /// PRRTE's accord, whatever its status says.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        told_to_end: Option<i32>,
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
    /// An `attach`, `finish` or `watch` was accepted.
    Ack {},
    /// The agent's pod was told to end (SIGTERM, its termination grace period running): the
    /// agent keeps its prted running for `seconds` more (or until it ends), then stops it.
    Preempt {
        seconds: u64,
    },
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

/// Why a request body (the text inside a sealed frame) is not a request, with reasons a
/// launcher author can act on.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Not a JSON object of this protocol's version.
    #[error(transparent)]
    Frame(#[from] ProtocolError),
    /// A launch request that names a program: the agent only starts its configured prted.
    #[error(
        "a launch request cannot name an executable (field `{field}`): this agent only starts \
         its configured prted; send only the arguments after the executable in `argv`"
    )]
    NamesExecutable { field: &'static str },
    /// An unknown type or field, a missing field, a value of the wrong type.
    #[error("invalid request: {0}")]
    Invalid(#[source] serde_json::Error),
}

/// Parses a request body (the text inside a sealed frame).
pub fn parse_request(body: &[u8]) -> Result<Request, RequestError> {
    let value = parse_versioned(body)?;
    if let serde_json::Value::Object(map) = &value {
        if map.get("type").and_then(|t| t.as_str()) == Some("launch") {
            if let Some(field) = EXECUTABLE_FIELDS.iter().find(|f| map.contains_key(**f)) {
                return Err(RequestError::NamesExecutable { field });
            }
        }
    }
    serde_json::from_value(value).map_err(RequestError::Invalid)
}

/// The `type` of a plain frame, for messages.
pub(crate) fn plain_kind(p: &Plain) -> &'static str {
    match p {
        Plain::Challenge { .. } => "challenge",
        Plain::Response { .. } => "response",
        Plain::Welcome { .. } => "welcome",
        Plain::Refused { .. } => "refused",
        Plain::Error { .. } => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire::{decode_message, encode_message, ProtocolError};
    use super::*;

    /// [`parse_request`]'s reason as text, as the agent sends it back.
    fn decode_request(body: &[u8]) -> Result<Request, String> {
        parse_request(body).map_err(|e| e.to_string())
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
}
