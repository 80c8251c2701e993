//! PRRTE 5.0 (Open MPI 6.0; Debian unstable packages 5.0.0~rc1 with Open MPI 6.0.0~rc2 and
//! PMIx 7.0.0~rc1). The k8s components are not built for it: its `mpirun` starts its daemons
//! through PRRTE's ssh launcher and `prrte-k8s-rsh`.
//!
//! prted's command line as that launcher builds it (captured from Debian's `prterun` with an
//! ssh stand-in that logs its arguments, directly and through a daemon that launched another):
//! `--daemonize` unless `--leave-session-attached`, `--debug-daemons` or
//! `--debug-daemons-file` replaces it, `--allow-run-as-root`, then `--prtemca NAME VALUE`
//! pairs: `ess env`, `ess_base_nspace`, `ess_base_vpid`, `ess_base_num_procs`, `prte_hnp_uri`,
//! every `PRTE_MCA_*` of the launcher's environment (the agent's `prte_default_hostfile` and
//! `plm_ssh_agent` among them), `PREFIXES`, `pmix_session_server`, then `plm ssh`,
//! `--tree-spawn` and `prte_parent_uri` (a daemon launched by a daemon also carries its
//! ancestor's, and `--pmixmca compress_base_silence_warning 1`). Unlike 3.0's, its launcher
//! sends no `--debug` or `--test-suicide`.
//!
//! The launch threads' race of the 3.0 lines is fixed upstream in this line. The OOB's port
//! range is `prte_dynamic_ipv4_ports` here (3.0: `oob_tcp_dynamic_ipv4_ports`, no synonym).
//!
//! The agent executes prted without `--daemonize` (admitted, then dropped): 5.0's prted
//! detaches itself only when told to, and a daemon that detached would leave its exec request
//! (see [`PRTED_EXEC`]).

use super::model::{Features, Profile};
use crate::protocol::grammar::{Arg, Grammar, Tail};
use crate::protocol::params::Place::{Argv, Both};
use crate::protocol::params::Project::{Pmix, Prte};
use crate::protocol::params::{exec, p, Param, Shape};

const FLAG: Arg = Arg::Flag;

/// What PRRTE 5.0's ssh launcher forwards to prted.
const PARAMS: &[Param] = &[
    // PRRTE's basic daemon arguments.
    p("ess", Prte, Shape::OneOf(&["env"]), Argv),
    p("ess_base_nspace", Prte, Shape::Nspace, Argv),
    p("ess_base_vpid", Prte, Shape::Uint, Argv),
    p("ess_base_num_procs", Prte, Shape::Uint, Argv),
    p("prte_hnp_uri", Prte, Shape::Uri, Argv),
    p("PREFIXES", Prte, Shape::Names, Both),
    p("pmix_session_server", Prte, Shape::Bool, Both),
    // The ssh launcher (tree spawn through prrte-k8s-rsh), and the hostfile the agent gives
    // the launcher, which 5.0 hands on to every daemon.
    exec("plm", Prte, Shape::OneOf(&["ssh", "rsh"])),
    exec("plm_ssh_agent", Prte, Shape::Rsh),
    exec("prte_parent_uri", Prte, Shape::Uri),
    exec("prte_default_hostfile", Prte, Shape::Path),
    p("compress_base_silence_warning", Pmix, Shape::Bool, Both),
    // What a job in pods forwards to its daemons.
    p("prte_if_include", Prte, Shape::Interfaces, Both),
    p("prte_if_exclude", Prte, Shape::Interfaces, Both),
    p("oob_tcp_if_include", Prte, Shape::Interfaces, Both),
    p("oob_tcp_if_exclude", Prte, Shape::Interfaces, Both),
    p("oob_tcp_dynamic_ipv4_ports", Prte, Shape::Ports, Both),
    // 3.0's `oob_tcp_dynamic_ipv4_ports` under 5.0's name (see `PROFILE.renamed`).
    p("prte_dynamic_ipv4_ports", Prte, Shape::Ports, Both),
    p("odls_base_max_threads", Prte, Shape::Uint, Both),
    p("odls_base_num_threads", Prte, Shape::Uint, Both),
    // The routing tree's fan-out: prte and every prted must agree on it.
    p("rml_base_radix", Prte, Shape::Uint, Both),
    p("hwloc_default_binding_policy", Prte, Shape::Policy, Both),
    p("rmaps_default_mapping_policy", Prte, Shape::Policy, Both),
    p("rmaps_default_ranking_policy", Prte, Shape::Policy, Both),
    p("ptl_base_if_include", Pmix, Shape::Interfaces, Both),
    p("ptl_base_if_exclude", Pmix, Shape::Interfaces, Both),
    p("ptl_base_ipv4_port", Pmix, Shape::Uint, Both),
];

/// prted as PRRTE 5.0's ssh launcher starts it (tree spawn).
const PRTED_EXEC: Grammar = Grammar {
    daemon: "prted",
    options: &[
        ("--prtemca", Arg::Mca(Prte)),
        ("--pmixmca", Arg::Mca(Pmix)),
        // Admitted as the launcher sends it, never executed: with it prted forks, its parent
        // exits 0 at once and the daemon leads a session of its own, so the agent's exec
        // request would end with the parent and the sweep of what it leaves would stop the
        // daemon. Without it 5.0's prted stays in the foreground, the program of its exec
        // request for its whole life, supervised and stopped as any other.
        ("--daemonize", Arg::Dropped),
        ("--leave-session-attached", FLAG),
        ("--allow-run-as-root", FLAG),
        ("--debug-daemons", FLAG),
        ("--debug-daemons-file", FLAG),
        ("--tree-spawn", FLAG),
    ],
    tail: Tail::None,
    uris: Some(("prte_hnp_uri", "prte_parent_uri")),
    params: PARAMS,
};

pub(super) const PROFILE: Profile = Profile {
    line: "5.0",
    prted_launch: None,
    prted_exec: &PRTED_EXEC,
    params: PARAMS,
    components: None,
    features: Features {
        launch_thread_race: false,
    },
    // 5.0 moved the OOB's port range into PRRTE's base, without a synonym for the old name:
    // set only under 3.0's, prterun and its daemons listen on random ports, which the job's
    // NetworkPolicy does not open.
    renamed: &[("oob_tcp_dynamic_ipv4_ports", "prte_dynamic_ipv4_ports")],
};
