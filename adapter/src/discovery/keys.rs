//! The label and annotation keys discovery reads on the job's pods: the workload index keys
//! (see [`super::order`]), the JobSet names (see [`super::infer`]) and the slot annotations (see
//! [`super::slots`]). A [`super::record::PodRecord`] keeps these and no other.

/// An Indexed Job pod's completion index.
pub const JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// A StatefulSet pod's ordinal.
pub use crate::workload::STATEFULSET_POD_INDEX;

/// Which child Job of its replicated job a JobSet pod belongs to.
pub const JOBSET_JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";

/// Which child Job of the whole JobSet a JobSet pod belongs to.
pub const JOBSET_JOB_GLOBAL_INDEX: &str = "jobset.sigs.k8s.io/job-global-index";

/// The JobSet a pod belongs to, and the replicated job of its JobSet.
pub use crate::workload::{JOBSET_NAME_LABEL, JOBSET_REPLICATED_JOB_LABEL};

/// Pod annotation giving the slot count explicitly.
pub const SLOTS_ANNOTATION: &str = "prrte-k8s.io/slots";

/// The annotation's former name, still read when [`SLOTS_ANNOTATION`] is absent. Deprecated:
/// `k8s.io` and its subdomains are reserved for Kubernetes itself.
pub const DEPRECATED_SLOTS_ANNOTATION: &str = "prrte.k8s.io/slots";

/// Every key above: those a record keeps.
pub const KEPT_KEYS: [&str; 8] = [
    JOB_COMPLETION_INDEX,
    STATEFULSET_POD_INDEX,
    JOBSET_JOB_INDEX,
    JOBSET_JOB_GLOBAL_INDEX,
    JOBSET_NAME_LABEL,
    JOBSET_REPLICATED_JOB_LABEL,
    SLOTS_ANNOTATION,
    DEPRECATED_SLOTS_ANNOTATION,
];
