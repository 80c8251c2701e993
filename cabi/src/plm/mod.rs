//! PLM `k8s`: PRRTE's daemons are started by each pod's agent.
//!
//! [`component`] registers the `plm_k8s_*` parameters and answers PRRTE's selection query;
//! [`module`] holds the module functions PRRTE calls once the component is selected; [`rounds`]
//! reads what each `LAUNCH_DAEMONS` activation needs from PRRTE, hands it to the rounds' state
//! machine (`prrte_k8s::launch::rounds`) and the launcher, and carries out in PRRTE what the state
//! machine decides about the outcomes; [`daemons`] holds what it reads from and tells PRRTE's
//! daemon job; [`preempt`] tells the ranks when a pod is told to end; [`daemons_up`] records
//! on the MPIJob (a job the controller made) when PRRTE's daemons have all reported.
pub(crate) mod component;
pub(crate) mod daemons;
pub(crate) mod daemons_up;
pub(crate) mod module;
pub(crate) mod preempt;
pub(crate) mod rounds;
