//! Discovery errors. Each one displays as a paragraph naming the cause and the remedy.

use super::selector::SelectorError;
use crate::settings::mca;

/// The broad class of a [`DiscoveryError`], for callers that map errors to codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// A parameter is malformed (selector syntax, slots policy, slot annotation, counts).
    InvalidConfig,
    /// Not inside a cluster and no kubeconfig to be found, or the kubeconfig is unusable.
    NoCluster,
    /// The API server could not be reached or did not answer in time.
    Unreachable,
    /// The API server rejected the credentials (401), or none could be obtained.
    Unauthorized,
    /// The credentials lack an RBAC permission (403).
    Forbidden,
    /// No selector was given and none could be inferred from our own pod.
    SelectorNotInferable,
    /// No pod matches the selector.
    NoPods,
    /// Not enough pods became ready in time.
    Timeout,
    /// Any other answer of the API server.
    Api,
    /// Local failure (e.g. the async runtime could not start).
    Internal,
}

impl ErrorKind {
    /// Process exit code for this kind (the `prrte-k8s` CLI exits with it).
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::InvalidConfig => 2,
            ErrorKind::NoCluster => 3,
            ErrorKind::Unreachable => 4,
            ErrorKind::Unauthorized => 5,
            ErrorKind::Forbidden => 6,
            ErrorKind::SelectorNotInferable => 7,
            ErrorKind::NoPods => 8,
            ErrorKind::Timeout => 9,
            ErrorKind::Api => 10,
            ErrorKind::Internal => 11,
        }
    }
}

/// The RBAC rule the discovering identity needs on pods.
pub const PODS_RULE: &str =
    "- apiGroups: [\"\"]\n  resources: [\"pods\"]\n  verbs: [\"get\", \"list\", \"watch\"]";

/// Everything that can make discovery fail.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DiscoveryError {
    #[error(
        "Invalid label selector {selector:?}: {reason}. Set {p_selector} to a valid Kubernetes label selector, for example \"batch.kubernetes.io/job-name=my-job\" or \"app=mpi,role in (launcher,worker)\".", p_selector = mca::SELECTOR.refer()
    )]
    InvalidSelector {
        selector: String,
        reason: SelectorError,
    },

    #[error("{0}.")]
    Setting(Box<crate::settings::SettingError>),

    #[error("Invalid value {value:?} for {param}: {reason}.")]
    InvalidConfig {
        param: String,
        value: String,
        reason: String,
    },

    #[error(
        "Pod {namespace}/{pod} has annotation {annotation}={value:?}, which is not a valid slot count: {reason}. Fix the annotation in the pod template (a positive integer such as \"4\"), or set {p_slots} to gpu, cpu or one to ignore it.", p_slots = mca::SLOTS.refer()
    )]
    InvalidSlotsAnnotation {
        pod: String,
        namespace: String,
        annotation: String,
        value: String,
        reason: String,
    },

    #[error(
        "No Kubernetes cluster configuration found: {}. Run inside a pod with a service account token mounted (automountServiceAccountToken must not be false), or point {p_kubeconfig} or $KUBECONFIG at a kubeconfig file.",
        tried.join("; "), p_kubeconfig = mca::KUBECONFIG.refer()
    )]
    NoCluster { tried: Vec<String> },

    #[error(
        "Cannot use the Kubernetes client configuration from {source_desc}: {detail}. Fix or regenerate that configuration, or point {p_kubeconfig} at a working kubeconfig.", p_kubeconfig = mca::KUBECONFIG.refer()
    )]
    BadKubeconfig { source_desc: String, detail: String },

    #[error(
        "Cannot reach the Kubernetes API server at {url} (configuration from {source_desc}) while trying to {operation}: {detail}. Check that the server address is right and reachable from here (network policies, firewalls, proxy settings), that its certificate is signed by the configured CA, and that the cluster is up; raise {p_timeout} if the server is just slow.", p_timeout = mca::TIMEOUT.refer()
    )]
    Unreachable {
        url: String,
        source_desc: String,
        operation: String,
        detail: String,
    },

    #[error(
        "The Kubernetes API server at {url} rejected the credentials from {source_desc} (401 Unauthorized) while trying to {operation}: {message}. The token or client certificate is invalid or expired: refresh the kubeconfig (e.g. log in again), or, inside a pod, make sure the service account token is mounted and current."
    )]
    Unauthorized {
        url: String,
        source_desc: String,
        operation: String,
        message: String,
    },

    #[error(
        "Could not obtain credentials for the Kubernetes API server at {url} from {source_desc}: {detail}. Check the user entry of the kubeconfig (token file, client certificate, exec plugin) or the mounted service account token."
    )]
    Credentials {
        url: String,
        source_desc: String,
        detail: String,
    },

    #[error(
        "Permission denied (403 Forbidden): the identity from {source_desc} may not {verb} {resource} in API group {group:?} in namespace {namespace:?}. The API server said: {message}. Grant it with a Role in namespace {namespace:?} containing the rule\n{}\nand a RoleBinding of that Role to the service account the pods run as (or to your user).",
        required_rule(.group, .resource, .verb, .name.as_deref())
    )]
    Forbidden {
        source_desc: Box<str>,
        verb: &'static str,
        resource: &'static str,
        group: &'static str,
        namespace: Box<str>,
        /// The object's name, for a `get` of one object (the Role names it in `resourceNames`).
        name: Option<Box<str>>,
        /// The API server's own words.
        message: Box<str>,
    },

    #[error(
        "Cannot infer which pods belong to this job: our own pod {pod:?} (name from {name_source}) was not found in namespace {namespace:?}. Set {p_selector} to a label selector for the job's pods, or make the pod name known through the POD_NAME environment variable (fieldRef metadata.name), or set {n_namespace} if the pod is in another namespace.", p_selector = mca::SELECTOR.refer(), n_namespace = mca::NAMESPACE.name()
    )]
    SelfPodNotFound {
        pod: String,
        name_source: String,
        namespace: String,
    },

    #[error(
        "Cannot infer which pods belong to this job: our own pod {namespace}/{pod} has none of the labels {} and no StatefulSet owner. Set {p_selector} to a label selector for the job's pods, for example \"app=my-mpi-job\".",
        looked_for.join(", "), p_selector = mca::SELECTOR.refer()
    )]
    SelectorNotInferable {
        pod: String,
        namespace: String,
        looked_for: Vec<String>,
    },

    #[error(
        "No pods match the label selector {selector:?} in namespace {namespace:?} (excluding terminating and finished pods{}). Check {p_selector} and {p_namespace}, e.g. with `kubectl get pods -n {namespace} -l '{selector}'`, or set {p_expected} to wait for pods that are still being created.",
        if excluded.is_empty() { String::new() } else { format!("; excluded: {}", excluded.join("; ")) }, p_selector = mca::SELECTOR.refer(), p_namespace = mca::NAMESPACE.refer(), p_expected = mca::EXPECTED_PODS.refer()
    )]
    NoPods {
        namespace: String,
        selector: String,
        excluded: Vec<String>,
    },

    #[error(
        "The job's only pod {namespace}/{pod} is the one prte runs in, and {p_exclude} leaves it out of the allocation: no pod is left for the ranks. Give the job more pods (the workers), or set {p_exclude} to false to run the ranks in this pod.", p_exclude = mca::EXCLUDE_SELF.refer()
    )]
    OnlySelf { namespace: String, pod: String },

    #[error(
        "Timed out after {}s waiting for {expected} pods ({expected_source}) matching {selector:?} in namespace {namespace:?} to be Running and Ready with an IP: {ready} of {expected} ready. {}. Check these pods (`kubectl describe pod -n {namespace} ...`), raise {p_timeout} if they are just slow to start, or lower {p_expected} if fewer pods are intended.",
        *waited_ms as f64 / 1000.0,
        problems.join("; "), p_timeout = mca::TIMEOUT.refer(), p_expected = mca::EXPECTED_PODS.refer()
    )]
    Timeout {
        namespace: String,
        selector: String,
        expected: u32,
        expected_source: String,
        ready: u32,
        /// How long discovery waited, in milliseconds.
        waited_ms: u64,
        /// One entry per unready, missing or excluded pod.
        problems: Vec<String>,
    },

    #[error(
        "The Kubernetes API server at {url} refused to {operation}: HTTP {code} {reason}: {message}. Check the parameters ({n_namespace}, {n_selector}) and the API server's health.", n_namespace = mca::NAMESPACE.name(), n_selector = mca::SELECTOR.name()
    )]
    Api {
        url: String,
        operation: String,
        code: u16,
        reason: String,
        message: String,
    },

    #[error(
        "Cannot read {kind} {namespace}/{name}, which owns the job's pods, to learn how many pods to wait for: {}. Without it the allocation could silently be only the pods that exist at the first list. {} or set {p_expected} to the number of pods.",
        if *code == 404 { format!("HTTP 404, it does not exist or its API is not served ({message})") } else { format!("HTTP {code}, the launcher's service account may not get it ({message})") },
        if *code == 404 { "Check the workload,".to_string() } else { format!("Grant it in the launcher's Role:\n{rule}\n") }, p_expected = mca::EXPECTED_PODS.refer()
    )]
    OwnerUnreadable {
        kind: &'static str,
        namespace: String,
        name: String,
        code: u16,
        /// The Role rule that allows reading it.
        rule: Box<str>,
        message: Box<str>,
    },

    #[error("Internal error during pod discovery: {detail}.")]
    Internal { detail: String },
}

impl From<crate::settings::SettingError> for DiscoveryError {
    fn from(e: crate::settings::SettingError) -> Self {
        DiscoveryError::Setting(Box::new(e))
    }
}

impl DiscoveryError {
    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            DiscoveryError::InvalidSelector { .. }
            | DiscoveryError::InvalidConfig { .. }
            | DiscoveryError::Setting(_)
            | DiscoveryError::InvalidSlotsAnnotation { .. } => ErrorKind::InvalidConfig,
            DiscoveryError::NoCluster { .. } | DiscoveryError::BadKubeconfig { .. } => {
                ErrorKind::NoCluster
            }
            DiscoveryError::Unreachable { .. } => ErrorKind::Unreachable,
            DiscoveryError::Unauthorized { .. } | DiscoveryError::Credentials { .. } => {
                ErrorKind::Unauthorized
            }
            DiscoveryError::Forbidden { .. } => ErrorKind::Forbidden,
            DiscoveryError::OwnerUnreadable { code: 403, .. } => ErrorKind::Forbidden,
            DiscoveryError::OwnerUnreadable { .. } => ErrorKind::Api,
            DiscoveryError::SelfPodNotFound { .. }
            | DiscoveryError::SelectorNotInferable { .. } => ErrorKind::SelectorNotInferable,
            DiscoveryError::NoPods { .. } | DiscoveryError::OnlySelf { .. } => ErrorKind::NoPods,
            DiscoveryError::Timeout { .. } => ErrorKind::Timeout,
            DiscoveryError::Api { .. } => ErrorKind::Api,
            DiscoveryError::Internal { .. } => ErrorKind::Internal,
        }
    }

    /// Process exit code for this error; see [`ErrorKind::exit_code`].
    pub fn exit_code(&self) -> i32 {
        self.kind().exit_code()
    }
}

/// The Role rule that grants what discovery needs on `resource`: all of get, list and watch on
/// pods (discovery uses the three), else the one verb that was refused, on the one object
/// `name` when it is known: the rule `prrte-k8s manifest` puts in the Role (its owner rule
/// names the workload in `resourceNames`).
pub(crate) fn required_rule(group: &str, resource: &str, verb: &str, name: Option<&str>) -> String {
    if group.is_empty() && resource == "pods" {
        PODS_RULE.to_string()
    } else {
        rbac_rule(group, resource, name.as_slice(), &[verb])
    }
}

/// Renders an RBAC rule in Role YAML form; `names` (if any) as its `resourceNames`.
pub(crate) fn rbac_rule(group: &str, resource: &str, names: &[&str], verbs: &[&str]) -> String {
    let list = |items: &[&str]| {
        let quoted: Vec<String> = items.iter().map(|v| format!("{v:?}")).collect();
        quoted.join(", ")
    };
    let names = if names.is_empty() {
        String::new()
    } else {
        format!("\n  resourceNames: [{}]", list(names))
    };
    format!(
        "- apiGroups: [{group:?}]\n  resources: [{resource:?}]{names}\n  verbs: [{}]",
        list(verbs)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_rule_matches_renderer() {
        assert_eq!(
            rbac_rule("", "pods", &[], &["get", "list", "watch"]),
            PODS_RULE
        );
        assert_eq!(required_rule("", "pods", "watch", None), PODS_RULE);
        assert_eq!(required_rule("", "pods", "get", Some("w-0")), PODS_RULE);
        assert_eq!(
            required_rule("batch", "jobs", "get", None),
            "- apiGroups: [\"batch\"]\n  resources: [\"jobs\"]\n  verbs: [\"get\"]"
        );
    }

    #[test]
    fn a_refused_owner_get_names_the_object_in_resource_names() {
        let rule = "- apiGroups: [\"batch\"]\n  resources: [\"jobs\"]\n  resourceNames: [\"mpi-demo\"]\n  verbs: [\"get\"]";
        assert_eq!(
            required_rule("batch", "jobs", "get", Some("mpi-demo")),
            rule
        );
        let e = DiscoveryError::Forbidden {
            source_desc: "the pod's service account".into(),
            verb: "get",
            resource: "jobs",
            group: "batch",
            namespace: "ns1".into(),
            name: Some("mpi-demo".into()),
            message: "jobs.batch \"mpi-demo\" is forbidden".into(),
        };
        assert!(e.to_string().contains(rule), "{e}");
    }

    #[test]
    fn errors_stay_small() {
        assert!(
            std::mem::size_of::<DiscoveryError>() < 128,
            "{}",
            std::mem::size_of::<DiscoveryError>()
        );
    }

    #[test]
    fn forbidden_names_permission_and_rule() {
        let e = DiscoveryError::Forbidden {
            source_desc: "kubeconfig /k".into(),
            verb: "list",
            resource: "pods",
            group: "",
            namespace: "ns1".into(),
            name: None,
            message: "pods is forbidden".into(),
        };
        let s = e.to_string();
        assert!(s.contains("may not list pods"), "{s}");
        assert!(s.contains("namespace \"ns1\""), "{s}");
        assert!(s.contains(PODS_RULE), "{s}");
        assert_eq!(e.exit_code(), 6);
    }

    #[test]
    fn timeout_lists_problems() {
        let e = DiscoveryError::Timeout {
            namespace: "ns".into(),
            selector: "app=x".into(),
            expected: 3,
            expected_source: "from Job x".into(),
            ready: 2,
            waited_ms: 1500,
            problems: vec!["pod w-2: phase Pending".into()],
        };
        let s = e.to_string();
        assert!(
            s.contains("1.5s")
                && s.contains("2 of 3 ready")
                && s.contains("pod w-2: phase Pending"),
            "{s}"
        );
        assert_eq!(e.kind(), ErrorKind::Timeout);
    }

    #[test]
    fn exit_codes_are_distinct() {
        use ErrorKind::*;
        let kinds = [
            InvalidConfig,
            NoCluster,
            Unreachable,
            Unauthorized,
            Forbidden,
            SelectorNotInferable,
            NoPods,
            Timeout,
            Api,
            Internal,
        ];
        let mut codes: Vec<i32> = kinds.iter().map(|k| k.exit_code()).collect();
        assert!(codes.iter().all(|c| *c != 0 && *c != 1));
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), kinds.len());
    }
}
