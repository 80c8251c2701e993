//! The command lines the supported launchers give their daemons, as grammars (see
//! `grammar`); captured from the launchers themselves and read in their sources:
//!
//! * **prted**, from the k8s PLM (a launch request) or from PRRTE's ssh launcher through
//!   `prrte-k8s-rsh`: as the profile of its PRRTE line says ([`crate::profile`]).
//! * **orted from Open MPI 4.x's rsh launcher**: `-mca NAME VALUE` (also `--mca`),
//!   `--tree-spawn`, `--daemonize`; `orte_parent_uri`, else `orte_hnp_uri`, pinned.
//! * **hydra_pmi_proxy from MPICH's Hydra** (`mpiexec -launcher ssh`): `--control-port
//!   HOST:PORT` (pinned: the proxy takes its commands from there), `--launcher-exec` (only
//!   `prrte-k8s-rsh`) and numeric and selection options.
//! * **hydra_bstrap_proxy from Intel MPI's Hydra**: `--upstream-host` (pinned),
//!   `--launcher-exec` (only `prrte-k8s-rsh`), `--base-path` (its own directory), numeric
//!   options, then `<its directory>/hydra_pmi_proxy` with that proxy's options.

use std::path::Path;

use super::error::PolicyError;
use super::grammar::{check, Ctx};
use crate::profile::Profile;
use crate::protocol::grammar::{Arg, Check, Grammar, Tail};
use crate::protocol::params::{Project, Shape, ORTE};

const FLAG: Arg = Arg::Flag;
const INT: Arg = Arg::Value(Shape::Int, Check::None);
const UINT: Arg = Arg::Value(Shape::Uint, Check::None);
const RSH: Arg = Arg::Value(Shape::Rsh, Check::Rsh);
const LAUNCHER: Arg = Arg::Value(Shape::OneOf(&["ssh", "rsh"]), Check::None);

/// Open MPI 4.x's orted as its rsh launcher starts it.
pub(crate) const ORTED: Grammar = Grammar {
    daemon: "orted",
    options: &[
        ("-mca", Arg::Mca(Project::Orte)),
        ("--mca", Arg::Mca(Project::Orte)),
        ("--tree-spawn", FLAG),
        ("--daemonize", FLAG),
    ],
    tail: Tail::None,
    uris: Some(("orte_hnp_uri", "orte_parent_uri")),
    params: ORTE,
};

/// MPICH's hydra_pmi_proxy as Hydra's ssh launcher starts it.
pub(crate) const HYDRA_PMI_PROXY: Grammar = Grammar {
    daemon: "hydra_pmi_proxy",
    options: &[
        (
            "--control-port",
            Arg::Value(Shape::Address, Check::PeerHostPort),
        ),
        ("--rmk", Arg::Value(Shape::OneOf(&["user"]), Check::None)),
        ("--launcher", LAUNCHER),
        ("--launcher-exec", RSH),
        (
            "--demux",
            Arg::Value(Shape::OneOf(&["poll", "select"]), Check::None),
        ),
        (
            "--topolib",
            Arg::Value(Shape::OneOf(&["hwloc"]), Check::None),
        ),
        ("--iface", Arg::Value(Shape::Interfaces, Check::None)),
        ("--pgid", INT),
        ("--retries", INT),
        ("--usize", INT),
        ("--pmi-port", INT),
        ("--gpus-per-proc", INT),
        ("--gpu-subdevs-per-proc", INT),
        ("--proxy-id", INT),
        ("--debug", FLAG),
        ("--topo-debug", FLAG),
    ],
    tail: Tail::None,
    uris: None,
    params: &[],
};

/// The options Intel MPI's bootstrap proxy gives the hydra_pmi_proxy it starts.
const INTEL_PMI_PROXY: Grammar = Grammar {
    daemon: "hydra_pmi_proxy",
    options: &[
        ("--usize", INT),
        ("--auto-cleanup", INT),
        ("--abort-signal", INT),
        ("--debug", FLAG),
    ],
    tail: Tail::None,
    uris: None,
    params: &[],
};

/// Intel MPI's hydra_bstrap_proxy as its Hydra's ssh launcher starts it.
pub(crate) const HYDRA_BSTRAP_PROXY: Grammar = Grammar {
    daemon: "hydra_bstrap_proxy",
    options: &[
        (
            "--upstream-host",
            Arg::Value(Shape::Address, Check::PeerHost),
        ),
        ("--upstream-port", UINT),
        ("--pgid", INT),
        ("--launcher", LAUNCHER),
        ("--launcher-number", INT),
        ("--launcher-exec", RSH),
        ("--base-path", Arg::Value(Shape::Path, Check::OwnDir)),
        ("--tree-width", INT),
        ("--tree-level", INT),
        ("--iface", Arg::Value(Shape::Interfaces, Check::None)),
        ("--time-left", INT),
        ("--launch-type", INT),
        ("--proxy-id", INT),
        ("--node-id", INT),
        ("--subtree-size", INT),
        ("--debug", FLAG),
    ],
    tail: Tail::Program("hydra_pmi_proxy", &INTEL_PMI_PROXY),
    uris: None,
    params: &[],
};

/// The grammar of the daemon `program` (by file name), if it is one of the launchers' daemons
/// whose arguments are checked (a prted by the profile of `prrte`); other allowlisted programs
/// take any arguments.
pub(crate) fn grammar_of(program: &Path, prrte: &'static Profile) -> Option<&'static Grammar> {
    match program.file_name()?.to_str()? {
        "prted" | "prte" => Some(prrte.prted_exec),
        "orted" => Some(&ORTED),
        "hydra_pmi_proxy" => Some(&HYDRA_PMI_PROXY),
        "hydra_bstrap_proxy" => Some(&HYDRA_BSTRAP_PROXY),
        _ => None,
    }
}

/// Checks the arguments of a daemon started through an `exec` request (`ctx.program` is the
/// resolved program); the checked, possibly rewritten arguments.
pub(crate) fn check_exec_daemon(
    argv: &[String],
    ctx: &Ctx<'_>,
) -> Result<Option<Vec<String>>, PolicyError> {
    let Some(g) = ctx.program.and_then(|p| grammar_of(p, ctx.prrte)) else {
        return Ok(None);
    };
    // The program's own name is argv[0]; indices in messages count it.
    check(g, &argv[1..], ctx)
        .map(Some)
        .map_err(|e| super::grammar::shift_index(e, 1))
}
