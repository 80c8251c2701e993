//! prrte-k8s: Kubernetes as a resource manager for PRRTE.
//!
//! Everything here is plain safe Rust and testable without PRRTE: pod discovery for the RAS
//! component, the in-pod agent and its wire protocol, and the launcher side the PLM component
//! drives. The `cabi` crate wraps this for PRRTE.
//!
//! Who uses what. An item, field or module is `pub` only when something outside the library
//! names it: the binaries, `cabi`, the sandbox crate (`tests/`), the benches, or the
//! integration tests in `adapter/tests` (which also reach the agent's and the protocol's
//! parts); a type a public signature names stays `pub` too. Everything else is `pub(crate)`.
//! - `cabi` (`prte_mca_ras_k8s.so`, `prte_mca_plm_k8s.so`): [`elastic::allocreq`] (PMIx
//!   allocation requests: what one asks, its refusals), [`discovery`] (`discover`,
//!   `DiscoveryConfig`, `Allocation`, `DiscoveryError`), [`launch`] (the round state machine
//!   [`launch::rounds`], `Launcher`, [`launch::targets`]' pod table, [`launch::added`], [`launch::prted_args`], [`launch::daemons_up`],
//!   the round settings), [`settings::mca`] (the MCA parameter tables it registers) and
//!   [`protocol::DEFAULT_SECRET_FILE`].
//! - `prrte-k8s-agent`: [`agent`] (`AgentArgs`, `AgentConfig`, `ExecPolicy`, `Launches`,
//!   `run_until_signalled_with_exec`), [`launch::AGENT_LAUNCHES`] (the DVM head, batch mode's
//!   launcher), [`runtime`],
//!   [`settings`].
//! - `prrte-k8s-rsh`: [`rsh::main`], [`runtime`].
//! - `prrte-k8s` (pods, hostfile, manifest, doctor, prun, grow, shrink and the PRRTE tools):
//!   [`discovery`], [`elastic`] (grow, shrink), [`hostfile`], [`manifest`], [`launch::ping_agent`], [`protocol`] (the secret file, the DVM
//!   URI's check), [`settings`], [`runtime`].
//! - `prrte-k8s controller` (and `crd`): [`controller`], which converts with [`manifest`].
//! - `prrte-k8s submit` and the Python module (`adapter/python/`): [`workflow`] (`Dvm`: many
//!   tasks through one PMIx tool connection to the job's DVM, the task list, the results).
//! - [`text`] makes peers' text safe to log, for all of them.
//! - [`workload`] is each workload kind's one home (its pods, owner, growth, Role rule,
//!   renderer): discovery, `grow`, the manifest and `prrte-k8s doctor` ask it.
#![forbid(unsafe_code)]

pub mod agent;
pub mod bundle;
pub mod controller;
pub mod discovery;
pub mod elastic;
pub mod hostfile;
pub mod launch;
pub mod manifest;
pub mod profile;
pub mod protocol;
pub mod rsh;
pub mod runtime;
pub mod settings;
pub mod text;
pub mod trainjob;
pub mod workflow;
pub mod workload;
