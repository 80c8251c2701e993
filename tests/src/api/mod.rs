//! The sandbox Kubernetes API server: HTTPS with a self-signed CA, bearer tokens, RBAC for
//! service accounts, and real Kubernetes JSON for the resources PRRTE's components and
//! kubectl use.

pub mod admission;
pub mod auth;
pub mod builtin_openapi;
pub mod crd;
pub mod custom;
pub mod defaults;
pub mod events;
pub mod faults;
pub mod http;
pub mod pod_table;
mod protobuf;
pub mod query;
mod replicas;
pub mod resources;
pub mod selector;
pub mod status;
pub mod store;
pub mod table;
mod tls;
pub mod validation;

pub use auth::Rule;

pub use http::RequestRecord;
pub use status::ApiError;
pub use store::{DeleteOptions, EventType, ListQuery, Obj, Part, Patch, Store, StoreEvent};

use anyhow::Context;
use auth::{Identity, RightsSource};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How to start an [`ApiServer`].
#[derive(Clone, Debug)]
pub struct ApiOptions {
    /// Address to listen on (default 127.0.0.1:0, an ephemeral port).
    pub bind: SocketAddr,
    /// Where to write the CA certificate and kubeconfigs (default: a temporary directory
    /// removed when the server is dropped).
    pub dir: Option<PathBuf>,
    /// More IP addresses the server certificate is valid for.
    pub extra_san_ips: Vec<IpAddr>,
}

impl Default for ApiOptions {
    fn default() -> Self {
        ApiOptions {
            bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            dir: None,
            extra_san_ips: Vec::new(),
        }
    }
}

/// A running API server; dropping it stops it (and ends its watches).
pub struct ApiServer {
    state: Arc<http::State>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    url: String,
    ca_path: PathBuf,
    kubeconfig: PathBuf,
    admin_token: String,
    _tmp: Option<tempfile::TempDir>,
}

fn random_token(prefix: &str) -> String {
    let b: [u8; 24] = rand::random();
    format!("{prefix}{}", hex::encode(b))
}

/// The server's directory: `opts.dir`, or a temporary one (kept while the server runs).
fn server_dir(opts: &ApiOptions) -> anyhow::Result<(Option<tempfile::TempDir>, PathBuf)> {
    match &opts.dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .with_context(|| format!("creating the API server directory {}", d.display()))?;
            Ok((None, d.clone()))
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("prrte-k8s-api-")
                .tempdir()
                .context("creating a temporary directory")?;
            let p = t.path().to_path_buf();
            Ok((Some(t), p))
        }
    }
}

/// A store with the usual namespaces and the built-in cluster roles.
fn seeded_store() -> anyhow::Result<Store> {
    let store = Store::new();
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        store
            .create(
                &resources::NAMESPACES,
                "",
                json!({"metadata": {"name": ns}}),
                false,
            )
            .map_err(|e| anyhow::anyhow!("seeding namespace {ns}: {e}"))?;
    }
    for role in auth::builtin_cluster_roles() {
        store
            .create(&resources::CLUSTERROLES, "", role, false)
            .map_err(|e| anyhow::anyhow!("seeding cluster roles: {e}"))?;
    }
    Ok(store)
}

/// The tokens known at start: the admin's (all rights).
fn admin_tokens(admin_token: &str) -> HashMap<String, Identity> {
    let mut tokens = HashMap::new();
    tokens.insert(
        admin_token.to_string(),
        Identity {
            user: "kubernetes-admin".into(),
            uid: String::new(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
            source: RightsSource::Static {
                namespace: None,
                rules: vec![Rule::all()],
            },
        },
    );
    tokens
}

/// Accepts connections until shutdown (refusing them during an injected outage).
async fn accept(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    st: Arc<http::State>,
    mut sd: watch::Receiver<bool>,
) {
    loop {
        let (tcp, _) = tokio::select! {
            _ = sd.changed() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!("API server accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if st.faults.is_down() {
            // Injected outage: the connection closes before TLS completes.
            st.faults
                .refused
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(tcp);
            continue;
        }
        let _ = tcp.set_nodelay(true);
        tokio::spawn(serve(tcp, acceptor.clone(), st.clone(), sd.clone()));
    }
}

/// One connection: TLS, then HTTP/1.1 or HTTP/2 requests until it closes or the server stops.
async fn serve(
    tcp: tokio::net::TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    st: Arc<http::State>,
    mut sd: watch::Receiver<bool>,
) {
    let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
        Ok(Ok(t)) => t,
        _ => return,
    };
    let svc = hyper::service::service_fn(move |req| {
        let st = st.clone();
        async move { Ok::<_, Infallible>(http::handle(st, req).await) }
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(TokioIo::new(tls), svc);
    tokio::select! {
        _ = conn => {}
        _ = sd.changed() => {}
    }
}

impl ApiServer {
    /// Starts the server on the current tokio runtime.
    pub async fn start(opts: ApiOptions) -> anyhow::Result<ApiServer> {
        let listener = TcpListener::bind(opts.bind).await.with_context(|| {
            format!(
                "binding the API server to {} (is the address local and the port free?)",
                opts.bind
            )
        })?;
        let addr = listener.local_addr()?;
        let host_ip = if addr.ip().is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            addr.ip()
        };
        let mut ips = vec![IpAddr::V4(Ipv4Addr::LOCALHOST), host_ip];
        ips.extend(opts.extra_san_ips.iter().copied());
        let pki = tls::make(&ips)?;
        let (tmp, dir) = server_dir(&opts)?;
        let ca_path = dir.join("ca.crt");
        std::fs::write(&ca_path, &pki.ca_pem)
            .with_context(|| format!("writing {}", ca_path.display()))?;
        let admin_token = random_token("admin-");
        let (shutdown, shutdown_rx) = watch::channel(false);
        let state = Arc::new(http::State {
            store: seeded_store()?,
            tokens: RwLock::new(admin_tokens(&admin_token)),
            addr,
            shutdown: shutdown_rx.clone(),
            bookmark_ms: std::sync::atomic::AtomicU64::new(5000),
            logs: RwLock::new(None),
            watch_drops: watch::channel(0).0,
            faults: faults::Faults::default(),
            requests: std::sync::Mutex::new(Vec::new()),
            encoded: Default::default(),
        });
        let acceptor = tokio_rustls::TlsAcceptor::from(pki.server_config.clone());
        let task = tokio::spawn(accept(listener, acceptor, state.clone(), shutdown_rx));
        let url = format!("https://{}", SocketAddr::new(host_ip, addr.port()));
        let server = ApiServer {
            state,
            shutdown,
            task,
            url,
            ca_path,
            kubeconfig: dir.join("admin.kubeconfig"),
            admin_token,
            _tmp: tmp,
        };
        server.write_kubeconfig(&server.kubeconfig, &server.admin_token.clone(), "default")?;
        Ok(server)
    }

    pub fn addr(&self) -> SocketAddr {
        self.state.addr
    }

    /// "https://IP:PORT".
    pub fn url(&self) -> String {
        self.url.clone()
    }

    pub fn ca_pem_path(&self) -> &Path {
        &self.ca_path
    }

    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// A kubeconfig for the admin token, context namespace "default".
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Registers a token for `user` with fixed rules, valid in `namespace` only (or, with
    /// None, everywhere). Unknown tokens get 401; known ones without a matching rule get 403.
    pub fn add_token(&self, token: &str, user: &str, namespace: Option<&str>, rules: Vec<Rule>) {
        let id = Identity {
            user: user.to_string(),
            uid: String::new(),
            groups: vec!["system:authenticated".into()],
            source: RightsSource::Static {
                namespace: namespace.map(String::from),
                rules,
            },
        };
        self.state
            .tokens
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token.to_string(), id);
    }

    /// Mints and registers a token for `system:serviceaccount:NS:NAME`, whose rights come
    /// from the Role/RoleBinding and ClusterRole/ClusterRoleBinding objects in the store.
    pub fn service_account_token(&self, ns: &str, name: &str) -> String {
        http::mint_sa_token(&self.state, ns, name)
    }

    /// Writes a kubeconfig for this server with `token`, its context in `namespace`.
    pub fn write_kubeconfig(
        &self,
        path: &Path,
        token: &str,
        namespace: &str,
    ) -> anyhow::Result<()> {
        let cfg = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{"name": "sandbox", "cluster": {"server": self.url, "certificate-authority": self.ca_path.to_string_lossy()}}],
            "users": [{"name": "sandbox-user", "user": {"token": token}}],
            "contexts": [{"name": "sandbox", "context": {"cluster": "sandbox", "user": "sandbox-user", "namespace": namespace}}],
            "current-context": "sandbox",
        });
        let text = serde_yaml::to_string(&cfg)?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(path, text)
            .with_context(|| format!("writing kubeconfig {}", path.display()))?;
        Ok(())
    }

    /// A handle to the object store.
    pub fn store(&self) -> Store {
        self.state.store.clone()
    }

    /// Lets `GET .../pods/NAME/log` serve pod logs: `f(namespace, name, container)` gives the
    /// container's log file.
    pub fn set_log_source(
        &self,
        f: impl Fn(&str, &str, &str) -> Option<PathBuf> + Send + Sync + 'static,
    ) {
        *self.state.logs.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(f));
    }

    /// Ends every open watch stream at once, as a dropped connection or an API server restart
    /// would (clients see the stream end and watch again; a watch from a resource version the
    /// store has compacted away, see [`Store::compact`], then gets 410 Gone).
    pub fn drop_watches(&self) {
        self.state.watch_drops.send_modify(|n| *n += 1);
    }

    /// Adds an injected fault (see [`faults`]); the handle counts how often it applied.
    pub fn inject(&self, rule: faults::FaultRule) -> faults::FaultHandle {
        self.state.faults.add(rule)
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        self.state.faults.clear();
    }

    /// Takes the server down (every new connection is closed at once) or up again. Watches
    /// already streaming are not affected; end them with a [`faults::Fault`] if needed.
    pub fn set_down(&self, down: bool) {
        self.state.faults.set_down(down);
    }

    /// How many connections were closed while the server was down.
    pub fn refused_while_down(&self) -> u64 {
        self.state
            .faults
            .refused
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every request answered since the start or the last [`ApiServer::take_requests`], in
    /// order (requests answered by an injected fault are not recorded).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.state
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Returns the recorded requests and starts a new record.
    pub fn take_requests(&self) -> Vec<RequestRecord> {
        std::mem::take(
            &mut *self
                .state
                .requests
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    /// How often watches that allow bookmarks get one (default 5 s).
    pub fn set_bookmark_interval(&self, d: Duration) {
        self.state.bookmark_ms.store(
            d.as_millis().max(1) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}
