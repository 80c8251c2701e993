//! What another process needs to enter a pod.

use std::path::PathBuf;

/// Per-pod facts a separate process needs to `exec` into a pod (written as JSON).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone)]
pub struct ExecInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub pid: u32,
    pub ip: String,
    pub netns: String,
    pub workdir: String,
    pub env: Vec<(String, String)>,
    /// The init program's configuration when the pod runs an image (exec then enters the
    /// container's root as its user: see [`crate::runtime::podnet::exec_command`]).
    #[serde(default)]
    pub container: Option<PathBuf>,
}
