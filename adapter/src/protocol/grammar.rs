//! How a daemon's command line is described: the options its launchers send, what each takes,
//! the parameter tables its MCA options draw from, and which of its parameters carry the
//! contact URIs the agent pins. The descriptions themselves are PRRTE's in
//! [`crate::profile`] (one per release line) and the other MPIs' in the agent's launch
//! policy, which checks command lines against them.

use super::params::{Param, Shape};

/// ssh's options that take an argument (`prrte-k8s-rsh` takes ssh's command line).
pub(crate) const SSH_OPTS_WITH_ARG: &str = "BbcDEeFIiJLlmOoPpQRSWw";
/// ssh's options without one: what `prrte-k8s-rsh` accepts and ignores, and the only flags the
/// agent admits after `prrte-k8s-rsh` in a launcher's ssh agent setting.
pub(crate) const SSH_FLAGS: &str = "1246AaCfGgKkMNnqsTtVvXxYy";

/// What an option of a grammar takes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg {
    /// Nothing.
    Flag,
    /// Nothing; admitted, but left out of what the agent executes (a daemon told to detach
    /// itself that is to stay in the foreground, its agent's child, instead).
    Dropped,
    /// One value of this shape, checked further as said.
    Value(Shape, Check),
    /// An MCA `NAME VALUE` pair of this project (looked up in the grammar's parameters).
    Mca(super::params::Project),
}

/// What is checked of a value beyond its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    None,
    /// `HOST:PORT` whose host is the launcher's address.
    PeerHostPort,
    /// A host that is the launcher's address.
    PeerHost,
    /// The installed `prrte-k8s-rsh`.
    Rsh,
    /// The directory of the program itself.
    OwnDir,
}

/// After the options: nothing, or Intel MPI's bootstrap proxy's `hydra_pmi_proxy` command.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Tail {
    None,
    /// `<own dir>/hydra_pmi_proxy` and its options (of this grammar).
    Program(&'static str, &'static Grammar),
}

/// A daemon's command-line grammar.
#[derive(Debug)]
pub(crate) struct Grammar {
    /// The daemon, for messages.
    pub daemon: &'static str,
    pub options: &'static [(&'static str, Arg)],
    pub tail: Tail,
    /// The names of the HNP's and the parent's contact URIs (both pinned to the launcher's
    /// address).
    pub(crate) uris: Option<(&'static str, &'static str)>,
    /// The MCA parameters its `Arg::Mca` options admit.
    pub params: &'static [Param],
}
