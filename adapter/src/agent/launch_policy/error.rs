//! Why the agent refuses a daemon's command line or environment: each error names the
//! argument, the rule and what to do instead.

use std::net::IpAddr;

use crate::text::printable;

/// Which request the arguments came in, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Launch,
    Exec,
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Request::Launch => "a launch request",
            Request::Exec => "an exec request",
        })
    }
}

/// Where site settings go instead of a request.
const SITE: &str = "site settings belong in the pod spec (the agent's environment, which the \
                    daemon inherits) or the image's parameter file";

/// A refused argument or variable; see the messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "argv[{index}]: `{}` is not an option {daemon} gets from its launchers, spelled \
             out exactly (accepted: {accepted}); {req} may carry nothing else",
        printable(arg, 120)
    )]
    Option {
        req: Request,
        index: usize,
        arg: String,
        daemon: &'static str,
        accepted: String,
    },
    #[error("argv[{index}]: `{flag}` needs {what} after it")]
    Missing {
        index: usize,
        flag: String,
        what: &'static str,
    },
    #[error(
        "argv[{index}]: MCA parameter `{}` is not one a launcher passes to {daemon} in \
             {req}; {SITE}",
        printable(name, 120)
    )]
    Parameter {
        req: Request,
        index: usize,
        name: String,
        daemon: &'static str,
    },
    #[error(
        "argv[{index}]: `{}` is not a valid value of {name} (expected {expected})",
        printable(value, 120)
    )]
    Value {
        index: usize,
        name: String,
        value: String,
        expected: String,
    },
    #[error(
        "argv[{index}]: {name} names {}, but the launcher connects from {peer}: a daemon \
             started here reports only to the launcher that asked for it",
        printable(named, 200)
    )]
    NotThePeer {
        index: usize,
        name: String,
        named: String,
        peer: IpAddr,
    },
    #[error("argv[{index}]: {name} must name prrte-k8s-rsh{}, not `{}` (other programs cannot \
             be run through prrte-k8s-rsh's exec requests, and a daemon started here starts \
             others only through it)",
            installed.as_ref().map(|p| format!(" ({p})")).unwrap_or_else(|| " (none is \
            installed next to this agent)".into()), printable(value, 200))]
    NotRsh {
        index: usize,
        name: String,
        value: String,
        installed: Option<String>,
    },
    #[error("argv[{index}]: {what} `{}` is not {expected}", printable(value, 200))]
    Path {
        index: usize,
        what: &'static str,
        value: String,
        expected: String,
    },
    #[error(
        "dvm_uri names {}, but the launcher connects from {peer}: an agent publishes only \
             the URI of a DVM on the launcher's own address",
        printable(named, 200)
    )]
    DvmUriElsewhere { named: String, peer: IpAddr },
    #[error(
        "environment variable `{}` is not allowed in {req}: {why}",
        printable(name, 120)
    )]
    Env {
        req: Request,
        name: String,
        why: String,
    },
}
