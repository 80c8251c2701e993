//! `prrte-k8s controller`: reconciles kubeflow.org/v2beta1 MPIJobs through prrte-k8s, so that
//! the MPIJob a user already has is all they write. An MPIJob is ours when its
//! `spec.runPolicy.managedBy` is `prrte-k8s.io/controller` (mpi-operator skips every value but
//! its own), or, with `--manage-all`, when it names none.
//!
//! Each MPIJob gets the plan `prrte-k8s manifest --from-mpijob` renders (the same conversion
//! of the same typed model, `manifest::mpijob`): ServiceAccount, Role, RoleBinding, a Secret
//! whose key is made here and never printed, the child (where the cluster serves JobSets, by
//! default, a JobSet whose launcher has a pod of its own; else the Indexed Job, its launcher
//! warned of where its template differs: `--launcher-pod`) and its NetworkPolicy, every one
//! controlled by the MPIJob (`controller_owner_ref`), so deleting the MPIJob deletes them; with
//! `--gang-scheduler`, a PodGroup of Volcano or scheduler-plugins sized as mpi-operator sizes
//! it, made before the Job. Every
//! object and the status are written with server-side apply under one field manager; an object
//! of the same name that is not the MPIJob's own (another's, or printed by `prrte-k8s
//! manifest`) is never taken over: the MPIJob fails naming it. `runPolicy.suspend`
//! suspends the Job; what Kueue writes into the templates while it is suspended reaches the
//! Job's pods; a failed Job is made again up to `runPolicy.backoffLimit` times; `runPolicy.cleanPodPolicy: All` deletes the workers after the end. The status
//! and the events are mpi-operator's, the replica counts kept right after the end. Replicas elect a leader through a
//! Lease.
//!
//! Layout: `crd` the CRD generated from the model; `desired` the objects an MPIJob should have
//! (pure); `child` the Job or JobSet its pods run under, all that is done to it (read, marked
//! with its attempt, brought in line, applied, deleted), `gang` the PodGroup of `--gang-scheduler` and the stamp of
//! its pods (pure), `pod_policy` what a site refuses in its pod templates
//! (pure); `head` what the MPIJob store keeps of each MPIJob (its name, versions and
//! `managedBy`, never its spec or status) and the reconcile that reads one the controller
//! manages in full; `observe` what is read of a Job's pods; `status` the status from them
//! (pure); `pod_ends` the events of pods deleted or failed while the job runs (pure); `restart`
//! the restarts of a failed job up to `runPolicy.backoffLimit` (the decision pure, one delete);
//! `status_write` the status' apply; `metrics`
//! the Prometheus metrics and their endpoint; `ownership` whose an object of a job's name is
//! (pure); `retry` why a reconcile fails, which errors fail the MPIJob and the backoff of the
//! others; `reconcile` one reconcile against the API; `run` the command: leader election,
//! kube-runtime's `Controller` and the pod store; `install` the objects that install the
//! controller (`prrte-k8s manifest --controller`, `prrte-config/deploy/`); `trainjobs` the
//! `--trainjobs` mode, Kubeflow Trainer's TrainJobs on prrte-k8s's runtimes.

pub(crate) mod child;
pub(crate) mod context;
pub(crate) mod crd;
pub(crate) mod desired;
pub(crate) mod gang;
pub(crate) mod head;
pub mod install;
pub(crate) mod metrics;
pub(crate) mod observe;
pub(crate) mod ownership;
pub(crate) mod pod_ends;
pub(crate) mod pod_policy;
pub(crate) mod reconcile;
pub(crate) mod restart;
pub(crate) mod retry;
pub mod run;
pub(crate) mod status;
pub(crate) mod status_write;
pub(crate) mod trainjobs;

pub use crd::crd_yaml;
pub use run::{run, ControllerArgs};
