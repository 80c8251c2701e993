//! The label and annotation keys discovery reads on the job's pods: the workload index keys
//! (see [`super::order`]), the JobSet names (see [`super::infer`]) and the slot annotations (see
//! [`super::slots`]). A [`super::record::PodRecord`] keeps these and no other.

/// The index labels of each workload kind's pods (an Indexed Job pod's completion index, a
/// StatefulSet pod's ordinal, which child Job of its replicated job or of the whole JobSet a
/// JobSet pod belongs to), and the JobSet and replicated job a pod belongs to.
pub use crate::workload::JOB_COMPLETION_INDEX;
pub(crate) use crate::workload::{
    JOBSET_JOB_GLOBAL_INDEX, JOBSET_JOB_INDEX, JOBSET_NAME_LABEL, JOBSET_REPLICATED_JOB_LABEL,
    NODE_GROUP_ANNOTATION, STATEFULSET_POD_INDEX,
};

/// Pod annotation giving the slot count explicitly.
pub(crate) const SLOTS_ANNOTATION: &str = "prrte-k8s.io/slots";

/// The annotation's former name, still read when [`SLOTS_ANNOTATION`] is absent. Deprecated:
/// `k8s.io` and its subdomains are reserved for Kubernetes itself.
pub(crate) const DEPRECATED_SLOTS_ANNOTATION: &str = "prrte.k8s.io/slots";

/// Every key above: those a record keeps.
pub(crate) const KEPT_KEYS: [&str; 9] = [
    JOB_COMPLETION_INDEX,
    NODE_GROUP_ANNOTATION,
    STATEFULSET_POD_INDEX,
    JOBSET_JOB_INDEX,
    JOBSET_JOB_GLOBAL_INDEX,
    JOBSET_NAME_LABEL,
    JOBSET_REPLICATED_JOB_LABEL,
    SLOTS_ANNOTATION,
    DEPRECATED_SLOTS_ANNOTATION,
];
