//! `prrte-k8s manifest --from-mpijob FILE`: a kubeflow.org/v2beta1 `MPIJob` as our complete job
//! (RBAC, Secret, workload, NetworkPolicy), with the runtime injected into its images.
//!
//! **The workload: one Indexed Job.** Its pod 0 is the launcher (its agent runs the Launcher's
//! command, the batch command), pods 1..N are the N workers, and `ras_k8s_exclude_self` in the
//! pods' environment leaves pod 0 out of the allocation, so that the ranks land where
//! mpi-operator puts them: on the workers only, or, with `runLauncherAsWorker`, on all N+1 pods
//! (no exclusion; mpi-operator lists the launcher first in its hostfile, and pod 0 comes first
//! here). One Job, not a launcher Job beside a worker Job, because then:
//! - the Job fails at once naming the evicted or failed pod, whichever it is
//!   (`podFailurePolicy`; with two Jobs the launcher's would fail with mpirun's exit code
//!   while the evicted worker is named only in the other Job);
//! - `kubectl wait --for=condition=complete job/NAME` follows the whole MPI job, and Kueue
//!   admits (and suspends, preempts) it as one workload: two Jobs would be two workloads, and
//!   a launcher admitted without its workers would wait for them until it gave up;
//! - discovery needs nothing but the Job's own label and parallelism.
//!
//! The price: one pod template for all pods. It is the Worker's (the Launcher's without
//! workers); the Launcher adds the environment, volumes, mounts, labels and annotations the
//! Worker lacks, and every other field of the Launcher's pod that differs (its image, its
//! resources...) is named in a note: pod 0 gets the Worker's, so a launcher on a smaller pod
//! than its workers costs one worker's resources more here.
//!
//! **Or a JobSet** (`--kind jobset`): the launcher's pod of its own, from the Launcher's
//! template (replicated job `launcher`), beside the workers' (`worker`), each pod's agent told
//! its batch role, the JobSet one workload failing with its first failed Job
//! (`crate::workload`'s JobSet renderer).
//!
//! Layout: `model` is the MPIJob's types (the controller's too, and its CRD's); `parse`
//! checks the document field by field (`reader` reads fields with their paths) and reads it
//! into the model, `pods` makes the pod templates' parts (`differences` names what pod 0 does not
//! get of the Launcher's in one Job) (`volumes` checks and renames the Worker's volumes),
//! `harden` their security contexts, `convert` the job; `error` holds the refusals and the notes.
//! `stored` is an MPIJob as the controller watches it (its spec and status read into the model
//! one MPIJob at a time, so that one that does not fit names its field and stops no other).

mod container;
mod convert;
mod differences;
mod error;
mod harden;
pub(crate) mod model;
mod parse;
mod pods;
mod reader;
pub(crate) mod stored;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_jobset;
mod volumes;

pub(crate) use convert::{from_model, from_mpijob, Overrides};
pub(crate) use error::{MpiJobError, Note};
pub(crate) use parse::CONTROLLER_NAME;
