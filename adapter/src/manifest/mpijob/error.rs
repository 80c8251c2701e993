//! What `--from-mpijob` refuses (nothing is rendered then), and what it tells about fields it
//! changes or cannot honour.

/// An MPIJob that cannot be converted: the cause and the remedy.
#[derive(Debug, thiserror::Error)]
pub enum MpiJobError {
    #[error("cannot read it: {0}; give the file of one MPIJob, or - to read it from stdin")]
    Read(#[source] std::io::Error),
    #[error("not valid YAML: {0}; give the MPIJob as YAML or JSON (`kubectl get mpijob NAME -o yaml` prints one)")]
    Yaml(#[source] serde_yaml::Error),
    #[error("holds no document; give one kubeflow.org/v2beta1 MPIJob")]
    Empty,
    #[error("holds {0} documents; give one MPIJob (split the file, e.g. `yq 'select(.kind == \"MPIJob\")'`)")]
    Documents(usize),
    #[error("kind is {0:?}, not MPIJob: --from-mpijob converts a kubeflow.org/v2beta1 MPIJob; render other jobs with the options of `prrte-k8s manifest` (--image, --pods, -- COMMAND)")]
    NotMpiJob(String),
    #[error("apiVersion is {0:?}: only kubeflow.org/v2beta1 MPIJobs are read; convert the job to v2beta1 (mpiReplicaSpecs, runPolicy, slotsPerWorker), as mpi-operator's v2beta1 documentation shows")]
    ApiVersion(String),
    #[error("{field}: {cause}; {remedy}")]
    Field {
        field: String,
        cause: String,
        remedy: String,
    },
    #[error("cannot render the pod template: {0}; this is a bug in prrte-k8s, please report it with the MPIJob")]
    Render(#[source] serde_json::Error),
    #[error("the rendered pod template would break the restricted pod security level ({0}); this is a bug in prrte-k8s, please report it with the MPIJob")]
    NotRestricted(String),
}

impl MpiJobError {
    /// A field that cannot be converted.
    pub fn field(
        field: impl Into<String>,
        cause: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Self {
        MpiJobError::Field {
            field: field.into(),
            cause: cause.into(),
            remedy: remedy.into(),
        }
    }
}

/// A field the conversion changed, dropped or cannot honour, and why (one line on stderr).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub field: String,
    pub what: String,
    /// A field of the Launcher's pod template that the launcher does not get because one
    /// Indexed Job's template (the Worker's) makes every pod (the controller warns of these).
    pub launcher_lost: bool,
}

impl Note {
    pub fn new(field: impl Into<String>, what: impl Into<String>) -> Self {
        Note {
            field: field.into(),
            what: what.into(),
            launcher_lost: false,
        }
    }

    /// The Launcher's `field`, which pod 0 of one Indexed Job does not get.
    pub fn launcher_lost(field: impl Into<String>, what: impl Into<String>) -> Self {
        Note {
            launcher_lost: true,
            ..Note::new(field, what)
        }
    }
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.what)
    }
}
