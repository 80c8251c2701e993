//! The controller's Prometheus metrics (OpenMetrics text at `GET /metrics`):
//! `prrte_k8s_controller_reconciles_total`, `prrte_k8s_controller_reconcile_errors_total`,
//! `prrte_k8s_controller_mpijobs{phase}` (the MPIJobs it manages, by phase) and
//! `prrte_k8s_controller_creation_to_running_seconds` (from an MPIJob's creation to its
//! `Running` condition). The probes' endpoint is on a port of its own ([`serve`]).

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::agent::health::{self, Accept, Endpoint, Scrape};
use crate::agent::limits::Pending;

type Phase = Vec<(String, String)>;

/// The metrics, shared by the reconcilers and the HTTP endpoint.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    reconciles: Counter,
    errors: Counter,
    phases: Family<Phase, Gauge>,
    to_running: Histogram,
    /// Each managed MPIJob's phase (`namespace/name`), so the gauges move as it changes.
    jobs: Mutex<HashMap<String, &'static str>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("prrte_k8s_controller");
        let reconciles = Counter::default();
        let errors = Counter::default();
        let phases = Family::<Phase, Gauge>::default();
        // 0.25 s to ~17 min.
        let to_running = Histogram::new(exponential_buckets(0.25, 2.0, 13));
        registry.register("reconciles", "MPIJob reconciles", reconciles.clone());
        registry.register(
            "reconcile_errors",
            "MPIJob reconciles that failed (and were retried)",
            errors.clone(),
        );
        registry.register("mpijobs", "Managed MPIJobs by phase", phases.clone());
        registry.register(
            "creation_to_running_seconds",
            "Seconds from an MPIJob's creation to its Running condition",
            to_running.clone(),
        );
        Self {
            registry,
            reconciles,
            errors,
            phases,
            to_running,
            jobs: Mutex::new(HashMap::new()),
        }
    }

    pub fn reconciled(&self) {
        self.reconciles.inc();
    }

    pub fn failed(&self) {
        self.errors.inc();
    }

    pub(crate) fn running_after(&self, seconds: f64) {
        self.to_running.observe(seconds.max(0.0));
    }

    fn gauge(&self, phase: &str) -> Gauge {
        self.phases
            .get_or_create(&vec![("phase".to_string(), phase.to_string())])
            .clone()
    }

    /// The MPIJob `key` is now in `phase` (None: gone, or no longer ours).
    pub(crate) fn set_phase(&self, key: &str, phase: Option<&'static str>) {
        let mut jobs = match self.jobs.lock() {
            Ok(j) => j,
            Err(poisoned) => poisoned.into_inner(),
        };
        let old = match phase {
            Some(p) => jobs.insert(key.to_string(), p),
            None => jobs.remove(key),
        };
        if old == phase {
            return;
        }
        if let Some(o) = old {
            self.gauge(o).dec();
        }
        if let Some(p) = phase {
            self.gauge(p).inc();
        }
    }

    /// The OpenMetrics text.
    pub fn text(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

impl Scrape for Metrics {
    fn text(&self) -> String {
        Metrics::text(self)
    }
}

/// Requests in progress at once on the metrics port, overall and from one address (a
/// Prometheus scrapes one request at a time; a pair of them two).
const METRICS_MAX_PENDING: usize = 8;
const METRICS_MAX_PENDING_PER_PEER: usize = 4;
/// Requests in progress at once on the probes' port (the kubelet sends one at a time).
const HEALTH_MAX_PENDING: usize = 32;
const HEALTH_MAX_PENDING_PER_PEER: usize = 8;

/// Serves `GET /metrics` on `metrics_at` and the probes' `GET /healthz` and `/readyz` on
/// `health_at` (200 while the process runs: nothing is encoded or asked of the API, and
/// connections to the metrics port cannot take the probes' places) until the task is
/// dropped. Both are the agent's endpoints: a bounded request head read within a deadline,
/// one answer per connection, at most a few requests in progress per port (beyond, those of
/// the address holding the most are dropped), and no accept error ends either.
pub async fn serve(metrics_at: impl Accept, health_at: impl Accept, metrics: Arc<Metrics>) {
    let scrape = Pending::new("metrics", METRICS_MAX_PENDING, METRICS_MAX_PENDING_PER_PEER);
    let probes = Pending::new("health", HEALTH_MAX_PENDING, HEALTH_MAX_PENDING_PER_PEER);
    let up = Arc::new(AtomicBool::new(true));
    tokio::join!(
        health::serve(metrics_at, Endpoint::Metrics(metrics), scrape),
        health::serve(health_at, Endpoint::Health(up), probes),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_move_and_counters_count() {
        let m = Metrics::new();
        m.reconciled();
        m.reconciled();
        m.failed();
        m.set_phase("ns/a", Some("Created"));
        m.set_phase("ns/b", Some("Created"));
        m.set_phase("ns/a", Some("Running"));
        m.set_phase("ns/b", None);
        m.running_after(1.5);
        let t = m.text();
        assert!(
            t.contains("prrte_k8s_controller_reconciles_total 2\n"),
            "{t}"
        );
        assert!(
            t.contains("prrte_k8s_controller_reconcile_errors_total 1\n"),
            "{t}"
        );
        assert!(
            t.contains("prrte_k8s_controller_mpijobs{phase=\"Running\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("prrte_k8s_controller_mpijobs{phase=\"Created\"} 0\n"),
            "{t}"
        );
        assert!(
            t.contains("prrte_k8s_controller_creation_to_running_seconds_count 1\n"),
            "{t}"
        );
        assert!(
            t.contains("prrte_k8s_controller_creation_to_running_seconds_bucket{le=\"2.0\"} 1\n"),
            "{t}"
        );
    }

    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpSocket, TcpStream};

    /// The answer to `GET path` on `addr`, from the source address `from`.
    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
            .await
            .unwrap_or_else(|_| panic!("no answer to {path} on {addr}"))
            .unwrap();
        out
    }

    /// The metrics and health ports, served.
    async fn started(m: Arc<Metrics>) -> (SocketAddr, SocketAddr, tokio::task::JoinHandle<()>) {
        let metrics_at = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let health_at = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addrs = (
            metrics_at.local_addr().unwrap(),
            health_at.local_addr().unwrap(),
        );
        (
            addrs.0,
            addrs.1,
            tokio::spawn(serve(metrics_at, health_at, m)),
        )
    }

    #[tokio::test]
    async fn the_endpoints_serve_their_own_paths_and_nothing_else() {
        let m = Arc::new(Metrics::new());
        m.reconciled();
        let (metrics, health, server) = started(m).await;
        let ok = get(metrics, "/metrics").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.contains("prrte_k8s_controller_reconciles_total 1"),
            "{ok}"
        );
        assert!(get(metrics, "/other").await.starts_with("HTTP/1.1 404"));
        assert!(get(metrics, "/healthz").await.starts_with("HTTP/1.1 404"));
        for probe in ["/healthz", "/readyz"] {
            let ok = get(health, probe).await;
            assert!(ok.starts_with("HTTP/1.1 200"), "{probe}: {ok}");
        }
        assert!(get(health, "/metrics").await.starts_with("HTTP/1.1 404"));
        server.abort();
    }

    /// A connection to `to` from the loopback address `from` that sends nothing.
    async fn idle(from: [u8; 4], to: SocketAddr) -> TcpStream {
        let s = TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::from((from, 0))).unwrap();
        s.connect(to).await.unwrap()
    }

    /// Whether the server closed `s` (end of stream, or reset) within `within`.
    async fn closed(mut s: TcpStream, within: Duration) -> bool {
        let mut b = [0u8; 64];
        loop {
            match tokio::time::timeout(within, s.read(&mut b)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => {}
            }
        }
    }

    /// The attack on the controller's pod: thousands of connections that never send a request
    /// once held a descriptor each for ever (no deadline, no cap) and made the liveness probe,
    /// which asked /metrics, wait behind them. Each port now holds a few at most, drops each
    /// within its head deadline, and answers the scrape and the probes meanwhile.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn thousands_of_idle_connections_leave_metrics_and_probes_answering() {
        crate::agent::limits::raise_nofile_limit();
        const IDLE: usize = 2_000;
        let started_at = std::time::Instant::now();
        let (metrics, health, server) = started(Arc::new(Metrics::new())).await;
        // The flood comes from 127.0.0.2, Prometheus and the kubelet from 127.0.0.1.
        let mut flood = Vec::with_capacity(2 * IDLE);
        for _ in 0..IDLE {
            flood.push(idle([127, 0, 0, 2], metrics).await);
            flood.push(idle([127, 0, 0, 2], health).await);
        }
        let scrape = get(metrics, "/metrics").await;
        assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
        assert!(scrape.contains("# EOF"), "{scrape}");
        for probe in ["/healthz", "/readyz"] {
            let ok = get(health, probe).await;
            assert!(ok.starts_with("HTTP/1.1 200"), "{probe}: {ok}");
        }
        // Every idle connection is closed by the server, the last within the head deadline.
        let held = futures::future::join_all(
            flood
                .into_iter()
                .map(|s| closed(s, Duration::from_secs(10))),
        )
        .await;
        let open = held.iter().filter(|c| !**c).count();
        assert_eq!(
            open,
            0,
            "{open} of {} idle connections still held",
            2 * IDLE
        );
        // And the ports still answer after the flood.
        assert!(get(metrics, "/metrics").await.starts_with("HTTP/1.1 200"));
        assert!(get(health, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(
            started_at.elapsed() < Duration::from_secs(60),
            "{:?}",
            started_at.elapsed()
        );
        server.abort();
    }

    /// A listener whose first accepts fail as a pod out of descriptors sees them (EMFILE), or
    /// as a client that gave up before its connection was taken (ECONNABORTED).
    struct Failing {
        listener: TcpListener,
        failures: AtomicUsize,
    }

    impl Accept for Failing {
        async fn accept(&self) -> std::io::Result<(TcpStream, SocketAddr)> {
            let left = self.failures.load(Ordering::SeqCst);
            if left > 0 {
                self.failures.store(left - 1, Ordering::SeqCst);
                let errno = if left.is_multiple_of(2) {
                    nix::errno::Errno::EMFILE
                } else {
                    nix::errno::Errno::ECONNABORTED
                };
                return Err(std::io::Error::from_raw_os_error(errno as i32));
            }
            self.listener.accept().await
        }
    }

    #[tokio::test]
    async fn a_failed_accept_does_not_end_the_server() {
        let failing = |l: TcpListener| Failing {
            listener: l,
            failures: AtomicUsize::new(6),
        };
        let metrics_at = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let health_at = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (metrics, health) = (
            metrics_at.local_addr().unwrap(),
            health_at.local_addr().unwrap(),
        );
        let server = tokio::spawn(serve(
            failing(metrics_at),
            failing(health_at),
            Arc::new(Metrics::new()),
        ));
        assert!(get(metrics, "/metrics").await.starts_with("HTTP/1.1 200"));
        assert!(get(health, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(!server.is_finished());
        server.abort();
    }
}
