//! PLM `k8s`: PRRTE's daemons are started by each pod's agent.
//!
//! [`component`] registers the `plm_k8s_*` parameters and answers PRRTE's selection query;
//! [`module`] holds the module functions PRRTE calls once the component is selected; [`rounds`]
//! launches the daemons of each `LAUNCH_DAEMONS` activation through the agents and reports their
//! outcomes; [`prted_args`] adapts prted's command line for a launch through an agent.
pub mod component;
pub mod module;
pub mod prted_args;
pub mod rounds;
