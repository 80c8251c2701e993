//! Why a manifest cannot be rendered: each error names the cause and the remedy.

use super::mpijob::MpiJobError;

/// A manifest that cannot be rendered (nothing is printed then).
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(
        "--name {0:?}: use 1-40 lower-case letters, digits and '-', starting with a letter \
         and not ending with '-' (it names the pods and their host names)"
    )]
    Name(String),
    #[error("--kind statefulset runs interactive jobs only (a StatefulSet restarts pods that exit); use --kind job or jobset for a command")]
    StatefulsetBatch,
    #[error("--elastic with --kind jobset: a JobSet's replicated Jobs cannot be changed while it runs; use --kind job or statefulset for a job that grows")]
    ElasticJobset,
    #[error("--max-pods {max} is below --pods {pods}: give the most pods the job may grow to (at least --pods)")]
    MaxPods { max: u32, pods: u32 },
    #[error("--max-restarts restarts a JobSet: add --kind jobset (a Job or StatefulSet is not restarted as a whole)")]
    MaxRestartsKind,
    #[error("--agent {0:?}: give an absolute path or a bare name found on the image's PATH")]
    Agent(String),
    #[error("--prrte-prefix {0:?}: must be absolute")]
    PrrtePrefix(String),
    #[error("cannot render YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
    #[error("cannot render an object: {0}")]
    Json(#[from] serde_json::Error),
    #[error("--from-mpijob {file}: {error}")]
    MpiJob { file: String, error: MpiJobError },
}

/// A bad `--env` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EnvArgError {
    #[error("{0:?}: expected NAME=VALUE")]
    NoValue(String),
    #[error("{0:?} is not a valid environment variable name")]
    Name(String),
}
