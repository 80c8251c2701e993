//! The MCA parameters a daemon started through an agent may be given by its launcher, with
//! the shape of each value: allowlists, shared by the agent (which refuses everything else)
//! and the launcher (which sends nothing else).
//!
//! Each list is what a launcher really sends. PRRTE's (what its k8s PLM and ssh launcher give
//! prted, per release line) are in [`crate::profile`]; here are the ones that do not depend on
//! PRRTE's version: Open MPI's own transport selection, which a launch may carry in its
//! environment (`OMPI`), and Open MPI 4.x's rsh launcher's for `orted` ([`ORTE`]:
//! `ess_base_jobid`, `orte_node_regex`, `orte_hnp_uri`, `orte_parent_uri`, `plm rsh`,
//! `plm_rsh_agent`, `pmix`, `routed`, and what ORTE's mpirun hands on). Names are matched
//! exactly (PMIx matches them exactly too); a value must have the shape of the parameter,
//! which never admits a path, a quote or a blank.

use std::fmt;

/// Whose parameter space a name belongs to: the flag or environment prefix it came with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Project {
    /// `--prtemca NAME VALUE`, `PRTE_MCA_NAME`.
    Prte,
    /// `--pmixmca NAME VALUE`, `PMIX_MCA_NAME`.
    Pmix,
    /// `OMPI_MCA_NAME` (an MPI program's own parameters).
    Ompi,
    /// `-mca NAME VALUE` on Open MPI 4.x's `orted`.
    Orte,
}

impl Project {
    /// The environment prefix of the project's parameters.
    pub(crate) fn env_prefix(self) -> &'static str {
        match self {
            Project::Prte => "PRTE_MCA_",
            Project::Pmix => "PMIX_MCA_",
            Project::Ompi => "OMPI_MCA_",
            Project::Orte => "OMPI_MCA_",
        }
    }
}

/// Who asks: the k8s PLM (a `launch` request) or an ssh-style launcher (an `exec` request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Launch,
    Exec,
}

/// Where a parameter may appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Only on the command line (what PRRTE builds for each daemon).
    Argv,
    /// On the command line and in a launch request's environment.
    Both,
}

/// The shape a parameter's value must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Exactly one of these words.
    OneOf(&'static [&'static str]),
    /// A decimal number.
    Uint,
    /// A decimal number, possibly negative (Hydra's `-1` for "unset").
    Int,
    /// `0`, `1`, `true` or `false`.
    Bool,
    /// A PRRTE namespace such as `prte-pod-0-77@0`.
    Nspace,
    /// Comma-separated framework names (`PREFIXES`).
    Names,
    /// Component names, comma-separated, optionally negated with a leading `^`.
    Components,
    /// Interface names or IPv4 CIDRs, comma-separated.
    Interfaces,
    /// Ports or port ranges (`7121`, `7200-7299`), comma-separated.
    Ports,
    /// A verbosity: a number or a level name.
    Verbosity,
    /// A mapping, ranking or binding policy (`ppr:2:node`, `core:overload-allowed`).
    Policy,
    /// Open MPI 4.x's compressed node list (`pod-[1:0-3]@0(4)`).
    NodeRegex,
    /// A daemon's contact URI: checked and pinned to the launcher's address by the agent.
    Uri,
    /// An address or host name, with `:PORT` or not (Hydra's upstream).
    Address,
    /// An absolute path (checked further by the agent).
    Path,
    /// The ssh-like program a daemon starts further daemons with: only `prrte-k8s-rsh`,
    /// checked by the agent.
    Rsh,
}

impl Shape {
    /// What the shape accepts, for messages.
    pub fn describe(self) -> String {
        match self {
            Shape::OneOf(words) => format!("one of {}", words.join(", ")),
            Shape::Uint => "a decimal number".into(),
            Shape::Int => "a decimal number, possibly negative".into(),
            Shape::Bool => "0, 1, true or false".into(),
            Shape::Nspace => "a PRRTE namespace (letters, digits, `.`, `_`, `@`, `+`, `-`)".into(),
            Shape::Names => "framework names separated by commas".into(),
            Shape::Components => "component names separated by commas, `^` to exclude".into(),
            Shape::Interfaces => "interface names or IPv4 CIDRs separated by commas".into(),
            Shape::Ports => "ports or port ranges (N-M) separated by commas".into(),
            Shape::Verbosity => "a number or a verbosity level (none ... all)".into(),
            Shape::Policy => "a policy such as ppr:2:node (no paths or blanks)".into(),
            Shape::NodeRegex => "Open MPI's node list (no paths or blanks)".into(),
            Shape::Uri => "a daemon URI nspace.rank;tcp://ADDR:PORT[:MASK]".into(),
            Shape::Address => "an IP address, with :PORT where a port is due".into(),
            Shape::Path => "an absolute path".into(),
            Shape::Rsh => "prrte-k8s-rsh, as installed next to this agent".into(),
        }
    }

    /// Whether `value` has this shape. [`Shape::Uri`] is only checked for being one word of
    /// printable ASCII here, [`Shape::Rsh`] for being words separated by single blanks; the
    /// agent checks both against the request.
    pub fn accepts(self, value: &str) -> bool {
        let words = |v: &str| {
            v.split(' ')
                .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_graphic()))
        };
        let printable = match self {
            Shape::Rsh => words(value),
            _ => !value.is_empty() && value.bytes().all(|b| b.is_ascii_graphic()),
        };
        if !printable || value.len() > 4096 || value.contains(['"', '\'', '`', '\\']) {
            return false;
        }
        let word = |v: &str, extra: &str| {
            !v.is_empty()
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || extra.contains(c))
        };
        let list = |v: &str, item: &dyn Fn(&str) -> bool| v.split(',').all(item);
        match self {
            Shape::OneOf(words) => words.contains(&value),
            Shape::Uint => value.len() <= 10 && value.bytes().all(|b| b.is_ascii_digit()),
            Shape::Int => {
                let digits = value.strip_prefix('-').unwrap_or(value);
                !digits.is_empty()
                    && digits.len() <= 10
                    && digits.bytes().all(|b| b.is_ascii_digit())
            }
            Shape::Bool => matches!(value, "0" | "1" | "true" | "false"),
            Shape::Nspace => value.len() <= 255 && word(value, "._@+-"),
            Shape::Names => list(value, &|n| word(n, "_")),
            Shape::Components => list(value.strip_prefix('^').unwrap_or(value), &|n| word(n, "_")),
            Shape::Interfaces => list(value, &|i| interface(i)),
            Shape::Ports => list(value, &|p| ports(p)),
            Shape::Verbosity => verbosity(value),
            Shape::Policy => value.len() <= 256 && word(value, ":=,_.-"),
            Shape::NodeRegex => word(value, "[]():,.@_-"),
            Shape::Address => value.len() <= 300 && word(value, ".:[]_-"),
            Shape::Path => value.starts_with('/') && !value.contains("/../"),
            Shape::Uri | Shape::Rsh => true,
        }
    }
}

fn interface(item: &str) -> bool {
    if let Some((addr, len)) = item.split_once('/') {
        return addr.parse::<std::net::Ipv4Addr>().is_ok()
            && len.parse::<u8>().is_ok_and(|l| l <= 32);
    }
    !item.is_empty()
        && item.len() <= 64
        && item
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:@-".contains(c))
}

fn ports(item: &str) -> bool {
    let port = |p: &str| p.parse::<u16>().is_ok_and(|p| p > 0);
    match item.split_once('-') {
        Some((a, b)) => port(a) && port(b),
        None => port(item),
    }
}

fn verbosity(value: &str) -> bool {
    const LEVELS: &[&str] = &[
        "none",
        "error",
        "component",
        "warn",
        "info",
        "trace",
        "debug",
        "max",
        "all",
    ];
    LEVELS.contains(&value)
        || (value.len() <= 4
            && value
                .strip_prefix('-')
                .unwrap_or(value)
                .parse::<u16>()
                .is_ok())
}

/// One parameter of the allowlist.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub project: Project,
    pub shape: Shape,
    place: Place,
    /// Only from ssh-style launchers (tree spawn), never in a launch request.
    exec_only: bool,
}

impl Param {
    /// Whether the parameter may come from `origin`.
    pub fn from(&self, origin: Origin) -> bool {
        !self.exec_only || origin == Origin::Exec
    }

    /// Whether the parameter may be set through a launch request's environment.
    pub fn in_env(&self) -> bool {
        self.place == Place::Both
    }
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// A parameter a launcher may send from either origin.
pub(crate) const fn p(name: &'static str, project: Project, shape: Shape, place: Place) -> Param {
    Param {
        name,
        project,
        shape,
        place,
        exec_only: false,
    }
}

/// A parameter only ssh-style launchers send, on the command line.
pub(crate) const fn exec(name: &'static str, project: Project, shape: Shape) -> Param {
    Param {
        name,
        project,
        shape,
        place: Place::Argv,
        exec_only: true,
    }
}

use Place::Both;
use Project::{Ompi, Orte};

/// Open MPI's own, in a launch's environment (what the pod template sets for the ranks).
pub(crate) const OMPI: &[Param] = &[
    p("btl", Ompi, Shape::Components, Both),
    p("pml", Ompi, Shape::Components, Both),
    p("mtl", Ompi, Shape::Components, Both),
    p("btl_tcp_if_include", Ompi, Shape::Interfaces, Both),
    p("btl_tcp_if_exclude", Ompi, Shape::Interfaces, Both),
    p("btl_tcp_port_min_v4", Ompi, Shape::Uint, Both),
    p("btl_tcp_port_range_v4", Ompi, Shape::Uint, Both),
];

/// Open MPI 4.x's rsh launcher, for orted.
pub const ORTE: &[Param] = &[
    exec("ess", Orte, Shape::OneOf(&["env"])),
    exec("ess_base_jobid", Orte, Shape::Uint),
    exec("ess_base_vpid", Orte, Shape::Uint),
    exec("ess_base_num_procs", Orte, Shape::Uint),
    exec("orte_node_regex", Orte, Shape::NodeRegex),
    exec("orte_hnp_uri", Orte, Shape::Uri),
    exec("orte_parent_uri", Orte, Shape::Uri),
    exec("plm", Orte, Shape::OneOf(&["rsh"])),
    exec("plm_rsh_agent", Orte, Shape::Rsh),
    exec("pmix", Orte, Shape::Components),
    exec(
        "routed",
        Orte,
        Shape::OneOf(&["radix", "binomial", "direct"]),
    ),
    exec("orte_leave_session_attached", Orte, Shape::Bool),
    exec("orte_debug", Orte, Shape::Bool),
    exec("orte_debug_daemons", Orte, Shape::Bool),
    exec("oob_tcp_if_include", Orte, Shape::Interfaces),
    exec("oob_tcp_if_exclude", Orte, Shape::Interfaces),
    exec("btl_tcp_if_include", Orte, Shape::Interfaces),
    exec("btl_tcp_if_exclude", Orte, Shape::Interfaces),
    // ORTE's mpirun hands every `OMPI_MCA_*` of its environment to each orted as `-mca`: what
    // the pod template and the agent set for the batch command comes back here.
    exec("orte_default_hostfile", Orte, Shape::Path),
    exec("plm_rsh_no_tree_spawn", Orte, Shape::Bool),
    exec("oob_tcp_dynamic_ipv4_ports", Orte, Shape::Ports),
    exec("btl", Orte, Shape::Components),
    exec("pml", Orte, Shape::Components),
    exec("mtl", Orte, Shape::Components),
    exec("btl_tcp_port_min_v4", Orte, Shape::Uint),
    exec("btl_tcp_port_range_v4", Orte, Shape::Uint),
];

const VERBOSE: Param = p(
    "<framework>_base_verbose",
    Project::Prte,
    Shape::Verbosity,
    Both,
);

/// The allowlisted parameter `name` of `project`, if it is one: an entry of `lists`, or a
/// framework's verbosity (`<framework>_base_verbose`, a lowercase framework name).
pub fn lookup(lists: &[&[Param]], project: Project, name: &str) -> Option<Param> {
    if let Some(p) = lists
        .iter()
        .flat_map(|l| l.iter())
        .find(|p| p.project == project && p.name == name)
    {
        return Some(*p);
    }
    let framework = name.strip_suffix("_base_verbose")?;
    let ok = !framework.is_empty()
        && framework.len() <= 32
        && framework
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    ok.then_some(Param {
        name: "<framework>_base_verbose",
        project,
        exec_only: project == Orte,
        ..VERBOSE
    })
}

/// Whether a launcher may send `name` = `value` in `project`'s space from `origin` (on the
/// command line, or in the environment with `in_env`), by `lists`, shapes checked; the agent
/// also pins URIs and checks `prrte-k8s-rsh` (see `crate::agent::launch_policy`).
pub(crate) fn forwardable(
    lists: &[&[Param]],
    project: Project,
    name: &str,
    value: &str,
    origin: Origin,
    in_env: bool,
) -> bool {
    lookup(lists, project, name)
        .is_some_and(|p| p.from(origin) && (!in_env || p.in_env()) && p.shape.accepts(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_have_their_parameters_shapes() {
        let ok = |s: Shape, v: &str| assert!(s.accepts(v), "{s:?} {v}");
        let bad = |s: Shape, v: &str| assert!(!s.accepts(v), "{s:?} {v}");
        ok(Shape::Uint, "12");
        bad(Shape::Uint, "-1");
        bad(Shape::Uint, "1 2");
        ok(Shape::Nspace, "prterun-vm-5676@0");
        bad(Shape::Nspace, "x/y");
        ok(Shape::Interfaces, "eth0,10.0.0.0/24");
        bad(Shape::Interfaces, "/tmp");
        bad(Shape::Interfaces, "10.0.0.0/99");
        ok(Shape::Ports, "7121,7200-7299");
        bad(Shape::Ports, "0");
        ok(Shape::Components, "^openib,ofi");
        ok(Shape::Verbosity, "5");
        ok(Shape::Verbosity, "debug");
        bad(Shape::Verbosity, "file:/tmp/x");
        ok(Shape::Policy, "ppr:2:node:PE=2");
        bad(Shape::Policy, "rankfile:file=/tmp/x");
        ok(Shape::OneOf(&["env"]), "env");
        bad(Shape::OneOf(&["env"]), "\"env\"");
        bad(Shape::Names, "a,b c");
        for v in ["", "a\tb", "a\"b", "a'b", "é"] {
            bad(Shape::Uri, v);
        }
    }
}
