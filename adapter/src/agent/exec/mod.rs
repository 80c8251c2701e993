//! `exec` requests: run a program from the agent's allowlist for an ssh-like client
//! (`prrte-k8s-rsh`), stream its output, forward stdin and signals, report its exit, and stop
//! its whole process group and cgroup when the client goes away. The wire format is in
//! [`crate::protocol::exec`].
//!
//! The program gets the same base environment as prted (see [`crate::agent`]), plus
//! `PRRTE_K8S_SECRET_FILE` and `PRRTE_K8S_AGENT_PORT` of this agent (so that a daemon started
//! this way can reach the other pods' agents with `prrte-k8s-rsh` itself, as PRRTE's tree spawn
//! does), then the request's variables as `env::check_env` admits them: only what ssh-style
//! launchers send, search paths never, an installation prefix only when it is the program's
//! own. A launcher's daemon (prted, orted, Hydra's proxies) gets only the arguments its
//! launcher sends ([`crate::agent::launch_policy`]). The program runs in its own process group
//! (and cgroup), with stdin from the client or `/dev/null`, in the request's `cwd` or the
//! agent's TMPDIR (`serve`).

pub(crate) mod allowlist;
pub(crate) mod env;
pub(crate) mod error;
pub(crate) mod prepare;
pub(crate) mod serve;

pub use allowlist::ExecPolicy;
pub(crate) use prepare::Ctx;
pub(crate) use prepare::{ExecRequest, ExecState};
pub(crate) use serve::serve;
