//! The `exec` request: an ssh-like remote command through the agent (used by `prrte-k8s-rsh`).
//!
//! A client sends `exec` with `argv` (the program and its arguments), `env` (assignments
//! applied in order), an optional `cwd` and whether it forwards stdin. The agent runs the
//! program only if `argv[0]` is on its exec allowlist (its own configuration; by default only
//! its prted), never through a shell, in its own process group and cgroup, and answers
//! `started {pid}` or `failed {reason}` (nothing was started). Then, on the same connection:
//!
//! * agent → client: `output {fd: 1|2, data: base64}` as the program writes, and finally
//!   `exited {pid, code}` or `exited {pid, signal}` once the program has ended and its process
//!   group is gone; the agent then closes the connection.
//! * client → agent: `stdin {data: base64}`, `stdin_close {}` (only with `"stdin": true`),
//!   `signal {signal}` (one of `FORWARDED_SIGNALS`, delivered to the program's process
//!   group), `kill {}` and `ping {}` (answered `pong {}`; `prrte-k8s-rsh` sends one every
//!   `plm_k8s_heartbeat_interval`).
//!
//! A client that has sent a `ping` and is then silent for the agent's `--heartbeat-timeout` is
//! taken for cut off: its program is stopped as when its connection ends.
//! When the connection ends before the program does, the agent stops the program's whole
//! process group and cgroup (SIGTERM, then SIGKILL after the kill grace), as for prted.
//!
//! `argv`, `env` values and `cwd` are **templates**: `${NAME}` stands for the value of `NAME`
//! in the program's environment as built so far (empty if unset) and `$$` for one `$`; no other
//! expansion happens (see [`expand`]). This is how `LD_LIBRARY_PATH=/x:$LD_LIBRARY_PATH`, as
//! launchers write it for a remote shell, keeps its meaning without a shell.

use base64::Engine;

/// Signals a client may forward to an exec'd program.
pub(crate) const FORWARDED_SIGNALS: &[i32] = &[
    libc_sig::SIGHUP,
    libc_sig::SIGINT,
    libc_sig::SIGQUIT,
    libc_sig::SIGKILL,
    libc_sig::SIGUSR1,
    libc_sig::SIGUSR2,
    libc_sig::SIGTERM,
    libc_sig::SIGCONT,
    libc_sig::SIGSTOP,
    libc_sig::SIGTSTP,
];

/// Linux signal numbers (the protocol carries numbers; both ends are Linux).
pub(crate) mod libc_sig {
    pub const SIGHUP: i32 = 1;
    pub const SIGINT: i32 = 2;
    pub(crate) const SIGQUIT: i32 = 3;
    pub const SIGKILL: i32 = 9;
    pub(crate) const SIGUSR1: i32 = 10;
    pub(crate) const SIGUSR2: i32 = 12;
    pub const SIGTERM: i32 = 15;
    pub(crate) const SIGCONT: i32 = 18;
    pub(crate) const SIGSTOP: i32 = 19;
    pub(crate) const SIGTSTP: i32 = 20;
}

/// Largest chunk of output or stdin carried in one frame (before base64).
pub(crate) const CHUNK: usize = 32 * 1024;

/// Encodes bytes for `output`/`stdin` frames.
pub fn encode_data(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The `data` of an `output`/`stdin` frame is not base64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("data is not base64: {0}")]
pub struct InvalidData(#[source] pub base64::DecodeError);

/// Decodes the `data` of an `output`/`stdin` frame.
pub(crate) fn decode_data(text: &str) -> Result<Vec<u8>, InvalidData> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(InvalidData)
}

/// Escapes literal text for a template (every `$` doubled).
pub fn escape(text: &str) -> String {
    text.replace('$', "$$")
}

/// Whether `name` is a valid environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub(crate) fn is_var_name(name: &str) -> bool {
    let mut b = name.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Why a template cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("contains a NUL byte")]
    Nul,
    #[error("unterminated `${{` in {template:?}")]
    Unterminated { template: String },
    #[error("`${{{name}}}` is not a variable reference")]
    NotAVariable { name: String },
    #[error(
        "a lone `$` in {template:?}: write `$$` for a literal dollar, `${{NAME}}` for a variable"
    )]
    LoneDollar { template: String },
}

/// Expands a template: `${NAME}` → `lookup(NAME)` (empty if `None`), `$$` → `$`. Any other `$`
/// is an error (the client must escape literal dollars), as are NUL bytes.
pub fn expand(
    template: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, TemplateError> {
    if template.contains('\0') {
        return Err(TemplateError::Nul);
    }
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(r) = after.strip_prefix('{') {
            let Some(end) = r.find('}') else {
                return Err(TemplateError::Unterminated {
                    template: template.into(),
                });
            };
            let name = &r[..end];
            if !is_var_name(name) {
                return Err(TemplateError::NotAVariable { name: name.into() });
            }
            out.push_str(&lookup(name).unwrap_or_default());
            rest = &r[end + 1..];
        } else {
            return Err(TemplateError::LoneDollar {
                template: template.into(),
            });
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_expand_references_and_dollars() {
        let env = |k: &str| (k == "LD").then(|| "/a:/b".to_owned());
        assert_eq!(expand("/x:${LD}", env).unwrap(), "/x:/a:/b");
        assert_eq!(expand("${NOPE}y", env).unwrap(), "y");
        assert_eq!(expand("cost $$5", env).unwrap(), "cost $5");
        assert_eq!(expand(&escape("a$b$$c"), env).unwrap(), "a$b$$c");
        assert!(expand("$LD", env).unwrap_err().to_string().contains("lone"));
        assert!(expand("${LD", env)
            .unwrap_err()
            .to_string()
            .contains("unterminated"));
        assert!(expand("${1x}", env).is_err());
        assert!(expand("a\0", env).is_err());
    }

    #[test]
    fn data_round_trips() {
        let raw = b"\x00\xffhello\n";
        assert_eq!(decode_data(&encode_data(raw)).unwrap(), raw);
        assert!(decode_data("!!").is_err());
        assert!(is_var_name("LD_LIBRARY_PATH") && is_var_name("_x1"));
        assert!(!is_var_name("1A") && !is_var_name("A-B") && !is_var_name(""));
    }
}
