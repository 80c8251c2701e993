//! `prrte-k8s controller --trainjobs`: Kubeflow Trainer's TrainJobs on a runtime of prrte-k8s
//! (a name starting `prrte-k8s-`, `trainjob::OURS_PREFIX`), reconciled as Trainer v2.3.0's own
//! controller reconciles them, for clusters without it: the objects `trainjob::render` makes
//! (the JobSet, the ssh-auth Secret, the hostfile and runtime-snapshot ConfigMaps), each owned
//! by the TrainJob and server-side applied; the status `trainjob::status` computes, written
//! as Trainer writes it (a merge patch of `status`).
//!
//! A TrainJob's `spec.managedBy` can only be Trainer's controller (the default) or MultiKueue
//! (the CRD refuses any other), so both controllers would act on the same TrainJobs: `detect`
//! refuses to start when Trainer's controller is installed (its TrainJob validating webhook).
//! `reconcile` one reconcile; `watch` the TrainJobs and their JobSets of a namespace (or all).

pub(crate) mod detect;
pub(crate) mod reconcile;
pub(crate) mod watch;
