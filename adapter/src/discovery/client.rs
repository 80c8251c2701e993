//! Building a Kubernetes API client for discovery.
//!
//! Configuration is looked for in this order:
//!
//! 1. an explicit kubeconfig file (MCA param `ras_k8s_kubeconfig`, CLI `--kubeconfig`);
//! 2. the files in `$KUBECONFIG` (colon-separated, merged; names of missing files are skipped);
//! 3. in-cluster: `KUBERNETES_SERVICE_HOST` (+ `KUBERNETES_SERVICE_PORT`, default 443) with the
//!    service account token and CA certificate mounted in
//!    `/var/run/secrets/kubernetes.io/serviceaccount`;
//! 4. `~/.kube/config`.
//!
//! As in client-go (kubectl), an explicitly set `KUBECONFIG` wins over the in-cluster
//! configuration. Unlike client-go, `~/.kube/config` comes after it: a kubeconfig left in an
//! image's home directory must not silently point a pod away from the cluster it runs in, while
//! setting `KUBECONFIG` is a deliberate choice.
//!
//! The process environment is read through [`Environment`] so tests can supply their own.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};

use super::error::DiscoveryError;
use crate::settings::mca;

/// Where a pod's service account credentials are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Where the client configuration came from (named in error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// The kubeconfig named by `ras_k8s_kubeconfig` / `--kubeconfig`.
    Explicit(PathBuf),
    /// The pod's service account, API server from `KUBERNETES_SERVICE_HOST`.
    InCluster { service_account_dir: PathBuf },
    /// The files listed in `$KUBECONFIG`.
    KubeconfigEnv(Vec<PathBuf>),
    /// `~/.kube/config`.
    HomeKubeconfig(PathBuf),
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::Explicit(p) => {
                write!(f, "kubeconfig {} ({})", p.display(), mca::KUBECONFIG.name())
            }
            ConfigSource::InCluster {
                service_account_dir,
            } => {
                write!(
                    f,
                    "the in-cluster service account ({})",
                    service_account_dir.display()
                )
            }
            ConfigSource::KubeconfigEnv(paths) => {
                let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                write!(f, "kubeconfig {} ($KUBECONFIG)", shown.join(":"))
            }
            ConfigSource::HomeKubeconfig(p) => write!(f, "kubeconfig {}", p.display()),
        }
    }
}

/// The parts of the process environment that decide how to reach the cluster and which pod
/// is ours.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `KUBERNETES_SERVICE_HOST`.
    pub service_host: Option<String>,
    /// `KUBERNETES_SERVICE_PORT`.
    pub service_port: Option<String>,
    /// Directory holding the service account's `token`, `ca.crt` and `namespace` (None: no
    /// service account; [`Environment::from_process`] uses [`SERVICE_ACCOUNT_DIR`]).
    pub service_account_dir: Option<PathBuf>,
    /// `KUBECONFIG`.
    pub kubeconfig_env: Option<OsString>,
    /// `HOME`.
    pub home: Option<PathBuf>,
    /// `POD_NAME` (the downward API's metadata.name), naming the pod we run in.
    pub pod_name: Option<String>,
    /// `HOSTNAME`, the pod name unless the pod sets spec.hostname.
    pub hostname: Option<String>,
}

impl Environment {
    /// Reads the real process environment.
    pub fn from_process() -> Environment {
        let non_empty = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        Environment {
            service_host: non_empty("KUBERNETES_SERVICE_HOST"),
            service_port: non_empty("KUBERNETES_SERVICE_PORT"),
            service_account_dir: Some(PathBuf::from(SERVICE_ACCOUNT_DIR)),
            kubeconfig_env: std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()),
            home: std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            pod_name: non_empty("POD_NAME"),
            hostname: non_empty("HOSTNAME"),
        }
    }

    /// The namespace of the pod we run in, from the service account's `namespace` file.
    pub fn service_account_namespace(&self) -> Option<String> {
        let dir = self.service_account_dir.as_ref()?;
        std::fs::read_to_string(dir.join("namespace"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// The API server's URL in the pod we run in, or why the in-cluster configuration cannot
    /// be used.
    fn in_cluster_available(&self) -> Result<String, NotInCluster> {
        let Some(host) = &self.service_host else {
            return Err(NotInCluster::NoServiceHost);
        };
        let Some(dir) = &self.service_account_dir else {
            return Err(NotInCluster::NoServiceAccountDir);
        };
        let token = dir.join("token");
        if !token.is_file() {
            return Err(NotInCluster::NoToken(token));
        }
        let port: u16 = match &self.service_port {
            None => 443,
            Some(p) => p
                .trim()
                .parse()
                .map_err(|_| NotInCluster::BadPort(p.clone()))?,
        };
        let host = host.trim();
        let host = if host.parse::<std::net::Ipv6Addr>().is_ok() {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        Ok(if port == 443 {
            format!("https://{host}")
        } else {
            format!("https://{host}:{port}")
        })
    }
}

/// Why the in-cluster configuration cannot be used (one of the places tried, in
/// [`DiscoveryError::NoCluster`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NotInCluster {
    #[error("not in a pod: KUBERNETES_SERVICE_HOST is not set")]
    NoServiceHost,
    #[error("KUBERNETES_SERVICE_HOST is set but no service account directory is configured")]
    NoServiceAccountDir,
    #[error("KUBERNETES_SERVICE_HOST is set but there is no service account token at {}", .0.display())]
    NoToken(PathBuf),
    #[error("KUBERNETES_SERVICE_PORT {0:?} is not a port number")]
    BadPort(String),
}

/// A resolved client configuration and what it says about namespaces.
#[derive(Debug, Clone)]
pub struct ResolvedConfig {
    pub config: kube::Config,
    pub source: ConfigSource,
    /// The namespace set in the kubeconfig's current context (or the service account's).
    pub(crate) context_namespace: Option<String>,
}

/// A ready-to-use client.
#[derive(Clone)]
pub struct ApiClient {
    pub client: kube::Client,
    /// The API server URL, for messages.
    pub url: String,
    pub source: ConfigSource,
    pub(crate) context_namespace: Option<String>,
}

impl fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiClient")
            .field("url", &self.url)
            .field("source", &self.source)
            .finish()
    }
}

fn bad(source: &ConfigSource, detail: impl fmt::Display) -> DiscoveryError {
    DiscoveryError::BadKubeconfig {
        source_desc: source.to_string(),
        detail: detail.to_string(),
    }
}

fn context_namespace(kc: &Kubeconfig) -> Option<String> {
    let current = kc.current_context.as_ref()?;
    kc.contexts
        .iter()
        .find(|c| &c.name == current)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.namespace.clone())
        .filter(|n| !n.is_empty())
}

async fn from_kubeconfig(
    kc: Kubeconfig,
    source: ConfigSource,
) -> Result<ResolvedConfig, DiscoveryError> {
    let context_namespace = context_namespace(&kc);
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| bad(&source, error_chain(&e)))?;
    Ok(ResolvedConfig {
        config,
        source,
        context_namespace,
    })
}

fn read_kubeconfig(path: &Path, source: &ConfigSource) -> Result<Kubeconfig, DiscoveryError> {
    Kubeconfig::read_from(path).map_err(|e| bad(source, error_chain(&e)))
}

/// A kubeconfig equivalent to the in-cluster service account configuration.
fn in_cluster_kubeconfig(url: &str, env: &Environment) -> Kubeconfig {
    let dir = env.service_account_dir.clone().unwrap_or_default();
    let name = "in-cluster".to_string();
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: name.clone(),
            cluster: Some(Cluster {
                server: Some(url.to_string()),
                certificate_authority: Some(dir.join("ca.crt").display().to_string()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: name.clone(),
            auth_info: Some(AuthInfo {
                token_file: Some(dir.join("token").display().to_string()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        contexts: vec![NamedContext {
            name: name.clone(),
            context: Some(Context {
                cluster: name.clone(),
                user: Some(name.clone()),
                namespace: env.service_account_namespace(),
                ..Default::default()
            }),
            ..Default::default()
        }],
        current_context: Some(name),
        ..Default::default()
    }
}

/// Finds the client configuration (see the module docs for the order).
pub async fn resolve_config(
    explicit: Option<&Path>,
    env: &Environment,
) -> Result<ResolvedConfig, DiscoveryError> {
    if let Some(path) = explicit {
        let source = ConfigSource::Explicit(path.to_path_buf());
        if !path.is_file() {
            return Err(bad(
                &source,
                "the file does not exist or is not a regular file",
            ));
        }
        let kc = read_kubeconfig(path, &source)?;
        return from_kubeconfig(kc, source).await;
    }

    let mut tried = Vec::new();
    if let Some(value) = &env.kubeconfig_env {
        let paths: Vec<PathBuf> = std::env::split_paths(value)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        let existing: Vec<PathBuf> = paths.iter().filter(|p| p.is_file()).cloned().collect();
        if existing.is_empty() {
            let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            tried.push(format!(
                "$KUBECONFIG names {} but no such file exists",
                shown.join(":")
            ));
        } else {
            let source = ConfigSource::KubeconfigEnv(existing.clone());
            let mut merged = Kubeconfig::default();
            for p in &existing {
                let kc = read_kubeconfig(p, &source)?;
                merged = merged
                    .merge(kc)
                    .map_err(|e| bad(&source, error_chain(&e)))?;
            }
            return from_kubeconfig(merged, source).await;
        }
    } else {
        tried.push("$KUBECONFIG is not set".into());
    }

    match env.in_cluster_available() {
        Ok(url) => {
            let dir = env.service_account_dir.clone().unwrap_or_default();
            let source = ConfigSource::InCluster {
                service_account_dir: dir.clone(),
            };
            let ca = dir.join("ca.crt");
            if !ca.is_file() {
                return Err(bad(
                    &source,
                    format!("the CA certificate {} is missing", ca.display()),
                ));
            }
            return from_kubeconfig(in_cluster_kubeconfig(&url, env), source).await;
        }
        Err(why) => tried.push(why.to_string()),
    }

    match &env.home {
        Some(home) => {
            let path = home.join(".kube").join("config");
            if path.is_file() {
                let source = ConfigSource::HomeKubeconfig(path.clone());
                let kc = read_kubeconfig(&path, &source)?;
                return from_kubeconfig(kc, source).await;
            }
            tried.push(format!("{} does not exist", path.display()));
        }
        None => tried.push("$HOME is not set, so there is no ~/.kube/config".into()),
    }
    Err(DiscoveryError::NoCluster { tried })
}

/// Builds a client from a resolved configuration; `connect_timeout` bounds TCP/TLS setup.
pub fn client_from_config(
    resolved: ResolvedConfig,
    connect_timeout: Duration,
) -> Result<ApiClient, DiscoveryError> {
    let ResolvedConfig {
        mut config,
        source,
        context_namespace,
    } = resolved;
    let url = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    config.connect_timeout = Some(connect_timeout);
    let client = kube::Client::try_from(config).map_err(|e| bad(&source, error_chain(&e)))?;
    Ok(ApiClient {
        client,
        url,
        source,
        context_namespace,
    })
}

/// Resolves the configuration from the process environment and builds a client.
pub async fn connect(
    explicit: Option<&Path>,
    connect_timeout: Duration,
) -> Result<ApiClient, DiscoveryError> {
    connect_with_env(explicit, &Environment::from_process(), connect_timeout).await
}

/// As [`connect`], with an explicit environment.
pub async fn connect_with_env(
    explicit: Option<&Path>,
    env: &Environment,
    connect_timeout: Duration,
) -> Result<ApiClient, DiscoveryError> {
    let resolved = resolve_config(explicit, env).await?;
    client_from_config(resolved, connect_timeout)
}

/// An error and all its sources, joined with ": ".
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG_YAML: &str = r#"apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: abc
contexts:
- name: ctx
  context:
    cluster: c
    user: u
    namespace: team-a
current-context: ctx
"#;

    fn env_in(dir: &Path) -> Environment {
        Environment {
            service_account_dir: Some(dir.join("sa")),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn nothing_found_lists_what_was_tried() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = env_in(dir.path());
        env.home = Some(dir.path().to_path_buf());
        env.kubeconfig_env = Some(dir.path().join("missing.yaml").into_os_string());
        let err = resolve_config(None, &env).await.unwrap_err();
        let s = err.to_string();
        assert!(matches!(err, DiscoveryError::NoCluster { .. }), "{s}");
        assert!(s.contains("KUBERNETES_SERVICE_HOST is not set"), "{s}");
        assert!(s.contains("missing.yaml"), "{s}");
        assert!(s.contains(".kube/config does not exist"), "{s}");
        assert!(s.contains("ras_k8s_kubeconfig"), "{s}");
        assert_eq!(err.exit_code(), 3);
    }

    #[tokio::test]
    async fn service_host_without_token_is_not_in_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let mut env = env_in(dir.path());
        env.service_host = Some("10.0.0.1".into());
        let err = resolve_config(None, &env).await.unwrap_err();
        assert!(
            err.to_string().contains("no service account token"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn in_cluster_uses_service_account_files() {
        let dir = tempfile::tempdir().unwrap();
        let env = Environment {
            service_host: Some("fd00::1".into()),
            service_port: Some("6443".into()),
            service_account_dir: Some(dir.path().to_path_buf()),
            ..Default::default()
        };
        std::fs::write(dir.path().join("token"), "tok").unwrap();
        std::fs::write(dir.path().join("namespace"), "jobs\n").unwrap();
        // Without ca.crt the configuration is unusable, and the message says why.
        let err = resolve_config(None, &env).await.unwrap_err();
        assert!(err.to_string().contains("ca.crt"), "{err}");
        assert_eq!(env.service_account_namespace().as_deref(), Some("jobs"));
        assert_eq!(
            env.in_cluster_available().unwrap(),
            "https://[fd00::1]:6443"
        );
        let env443 = Environment {
            service_port: None,
            service_host: Some("10.96.0.1".into()),
            ..env.clone()
        };
        assert_eq!(env443.in_cluster_available().unwrap(), "https://10.96.0.1");
        let kc = in_cluster_kubeconfig("https://10.96.0.1", &env);
        assert_eq!(context_namespace(&kc).as_deref(), Some("jobs"));
    }

    #[tokio::test]
    async fn kubeconfig_env_then_home() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kc.yaml");
        std::fs::write(&path, KUBECONFIG_YAML).unwrap();
        let mut env = env_in(dir.path());
        env.kubeconfig_env = Some(OsString::from(format!(
            "{}:{}",
            dir.path().join("nope").display(),
            path.display()
        )));
        let r = resolve_config(None, &env).await.unwrap();
        assert_eq!(r.source, ConfigSource::KubeconfigEnv(vec![path.clone()]));
        assert_eq!(r.context_namespace.as_deref(), Some("team-a"));
        assert_eq!(r.config.cluster_url.to_string(), "https://127.0.0.1:6443/");

        std::fs::create_dir_all(dir.path().join(".kube")).unwrap();
        std::fs::copy(&path, dir.path().join(".kube/config")).unwrap();
        let env = Environment {
            home: Some(dir.path().to_path_buf()),
            ..env_in(dir.path())
        };
        let r = resolve_config(None, &env).await.unwrap();
        assert!(matches!(r.source, ConfigSource::HomeKubeconfig(_)));
    }

    /// client-go's precedence: an explicitly set KUBECONFIG wins over the in-cluster service
    /// account; without it the service account wins over ~/.kube/config.
    #[tokio::test]
    async fn kubeconfig_env_wins_over_in_cluster_which_wins_over_home() {
        let dir = tempfile::tempdir().unwrap();
        let sa = dir.path().join("sa");
        std::fs::create_dir_all(&sa).unwrap();
        for f in ["token", "ca.crt", "namespace"] {
            std::fs::write(sa.join(f), "x").unwrap();
        }
        let path = dir.path().join("kc.yaml");
        std::fs::write(&path, KUBECONFIG_YAML).unwrap();
        std::fs::create_dir_all(dir.path().join(".kube")).unwrap();
        std::fs::copy(&path, dir.path().join(".kube/config")).unwrap();
        let mut env = env_in(dir.path());
        env.service_host = Some("10.96.0.1".into());
        env.home = Some(dir.path().to_path_buf());
        env.kubeconfig_env = Some(path.clone().into_os_string());
        let r = resolve_config(None, &env).await.unwrap();
        assert_eq!(r.source, ConfigSource::KubeconfigEnv(vec![path.clone()]));

        env.kubeconfig_env = None;
        match resolve_config(None, &env).await {
            Ok(r) => assert!(
                matches!(r.source, ConfigSource::InCluster { .. }),
                "{:?}",
                r.source
            ),
            // The fake CA is not a certificate: in-cluster was chosen, and its CA is what fails.
            Err(e) => assert!(e.to_string().contains("in-cluster service account"), "{e}"),
        }
    }

    #[tokio::test]
    async fn explicit_kubeconfig_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let env = env_in(dir.path());
        let missing = dir.path().join("absent.yaml");
        let err = resolve_config(Some(&missing), &env).await.unwrap_err();
        assert!(err.to_string().contains("absent.yaml"), "{err}");
        let garbage = dir.path().join("garbage.yaml");
        std::fs::write(&garbage, "clusters: [[[").unwrap();
        let err = resolve_config(Some(&garbage), &env).await.unwrap_err();
        assert!(err.to_string().contains("garbage.yaml"), "{err}");
        let nocontext = dir.path().join("nocontext.yaml");
        std::fs::write(&nocontext, "apiVersion: v1\nkind: Config\n").unwrap();
        let err = resolve_config(Some(&nocontext), &env).await.unwrap_err();
        assert_eq!(err.kind(), super::super::ErrorKind::NoCluster, "{err}");
    }
}
