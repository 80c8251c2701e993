//! The controller's Prometheus metrics (OpenMetrics text at `GET /metrics`):
//! `prrte_k8s_controller_reconciles_total`, `prrte_k8s_controller_reconcile_errors_total`,
//! `prrte_k8s_controller_mpijobs{phase}` (the MPIJobs it manages, by phase) and
//! `prrte_k8s_controller_creation_to_running_seconds` (from an MPIJob's creation to its
//! `Running` condition).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

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

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
) -> std::io::Result<()> {
    use http_body_util::Full;
    use hyper::body::Bytes;
    use hyper::service::service_fn;
    use hyper::{Method, Request, Response, StatusCode};

    loop {
        let (stream, _) = listener.accept().await?;
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                let metrics = metrics.clone();
                async move {
                    let mut resp = Response::new(Full::new(Bytes::new()));
                    if req.method() == Method::GET && req.uri().path() == "/metrics" {
                        *resp.body_mut() = Full::new(Bytes::from(metrics.text()));
                        resp.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static(
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            ),
                        );
                    } else {
                        *resp.status_mut() = StatusCode::NOT_FOUND;
                    }
                    Ok::<_, std::convert::Infallible>(resp)
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!("metrics connection: {e}");
            }
        });
    }
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

    #[tokio::test]
    async fn the_endpoint_serves_the_text_and_nothing_else() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let m = Arc::new(Metrics::new());
        m.reconciled();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, m));
        let get = |path: &'static str| async move {
            for _ in 0..100 {
                if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
                    let req =
                        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                    s.write_all(req.as_bytes()).await.unwrap();
                    let mut out = String::new();
                    s.read_to_string(&mut out).await.unwrap();
                    return out;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            panic!("no metrics server on {addr}");
        };
        let ok = get("/metrics").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.contains("prrte_k8s_controller_reconciles_total 1"),
            "{ok}"
        );
        assert!(get("/other").await.starts_with("HTTP/1.1 404"));
        server.abort();
    }
}
