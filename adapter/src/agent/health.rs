//! The agent's two minimal HTTP/1.x endpoints, each on a port of its own: the probes' (`GET
//! /healthz` answers `200 ok` while the agent serves launch connections and `503` once it is
//! shutting down) and, when enabled, Prometheus' (`GET /metrics`, [`super::metrics`]). Each
//! answers its own paths only, reads a bounded request head within a deadline, and closes the
//! connection after one answer. The controller serves its metrics and probes the same way
//! (`crate::controller::metrics`). A failed accept (out of descriptors, a connection aborted
//! before it was taken) never ends a port: it is logged and, when descriptors or memory ran
//! out, followed by a short pause.

use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use super::limits::Pending;
use super::metrics::AgentMetrics;

/// Metrics a port serves as OpenMetrics text.
pub(crate) trait Scrape: Send + Sync {
    fn text(&self) -> String;
}

impl Scrape for AgentMetrics {
    fn text(&self) -> String {
        AgentMetrics::text(self)
    }
}

/// What a port answers.
#[derive(Clone)]
pub(crate) enum Endpoint {
    /// `GET`/`HEAD` `/healthz` and `/readyz`: 200 while the flag is set, else 503.
    Health(Arc<AtomicBool>),
    /// `GET /metrics`: the counters as OpenMetrics text.
    Metrics(Arc<dyn Scrape>),
}

/// Where a port's connections come from: its listener (a test's own elsewhere).
pub(crate) trait Accept: Send + Sync + 'static {
    fn accept(&self) -> impl Future<Output = std::io::Result<(TcpStream, SocketAddr)>> + Send;
}

impl Accept for TcpListener {
    fn accept(&self) -> impl Future<Output = std::io::Result<(TcpStream, SocketAddr)>> + Send {
        TcpListener::accept(self)
    }
}

/// How long a port pauses after an accept failed for want of descriptors or memory (the
/// connections in progress end or are dropped meanwhile), instead of spinning on the error.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Failed accepts are logged at most once in this interval, with how many failed in all.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);

/// An answer: status line, body, content type.
type Answer = (&'static str, Cow<'static, str>, &'static str);

const TEXT: &str = "text/plain; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The longest request head taken (a kubelet's probe sends about 100 bytes); beyond it the
/// request is answered 431 and the connection closed.
const MAX_HEAD: usize = 4096;
/// The time a client has to send its whole request head, however it trickles in.
const HEAD_TIMEOUT: Duration = Duration::from_secs(3);
/// The time the answer has to be taken.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `endpoint` on `listener` forever, whatever an accept fails with. At most as many
/// requests as `pending` admits are in progress (the oldest is dropped beyond), each with one
/// overall deadline.
pub async fn serve(listener: impl Accept, endpoint: Endpoint, pending: Arc<Pending>) {
    let mut failed = FailedAccepts::default();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                failed.note(&e, pending.what());
                if out_of_resources(&e) {
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                } else {
                    tokio::task::yield_now().await;
                }
                continue;
            }
        };
        let endpoint = endpoint.clone();
        let ticket = pending.admit(peer.ip());
        tokio::spawn(async move {
            tokio::select! {
                r = tokio::time::timeout(HEAD_TIMEOUT + REQUEST_TIMEOUT, answer(stream, &endpoint)) => match r {
                    Ok(Err(e)) => debug!(%peer, error = %e, "HTTP request failed"),
                    Err(_) => debug!(%peer, "HTTP request timed out"),
                    Ok(Ok(())) => {}
                },
                _ = ticket.cancel.cancelled() => debug!(%peer, "HTTP request dropped (too many in progress)"),
            }
        });
    }
}

/// Whether `e` says the process or the system ran out of descriptors or memory (EMFILE,
/// ENFILE, ENOBUFS, ENOMEM): accepting again at once would fail again.
fn out_of_resources(e: &std::io::Error) -> bool {
    use nix::errno::Errno;
    e.raw_os_error().is_some_and(|n| {
        [Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM].contains(&Errno::from_raw(n))
    })
}

/// The failed accepts of a port, logged at most once every [`ACCEPT_LOG_EVERY`].
#[derive(Default)]
struct FailedAccepts {
    total: u64,
    logged: Option<Instant>,
}

impl FailedAccepts {
    fn note(&mut self, e: &std::io::Error, port: &str) {
        self.total += 1;
        if self
            .logged
            .is_none_or(|at| at.elapsed() >= ACCEPT_LOG_EVERY)
        {
            self.logged = Some(Instant::now());
            warn!(port, error = %e, failed_so_far = self.total, "accepting a connection failed; serving on");
        }
    }
}

/// Whether the request head in `buf` is complete (it ends with a blank line, `\r\n\r\n` or
/// `\n\n`), looking only at a line end among the bytes from `from` on: the bytes before were
/// looked at when they came, so a head trickling in byte by byte costs one pass in all.
fn head_complete(buf: &[u8], from: usize) -> bool {
    (from..buf.len()).any(|i| {
        buf[i] == b'\n'
            && ((i >= 1 && buf[i - 1] == b'\n') || (i >= 3 && &buf[i - 3..i] == b"\r\n\r"))
    })
}

/// How reading a request head ended.
enum Head {
    /// Complete, or the client stopped sending (what came is answered).
    Read,
    /// Longer than [`MAX_HEAD`].
    TooLarge,
}

async fn answer(mut stream: TcpStream, endpoint: &Endpoint) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(512);
    let read_head = async {
        let mut chunk = [0u8; 1024];
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(Head::Read);
            }
            let from = buf.len();
            buf.extend_from_slice(&chunk[..n]);
            if head_complete(&buf, from) {
                return Ok(Head::Read);
            }
            if buf.len() > MAX_HEAD {
                return Ok::<_, std::io::Error>(Head::TooLarge);
            }
        }
    };
    let (status, body, content_type) = match tokio::time::timeout(HEAD_TIMEOUT, read_head).await {
        Err(_) => return Ok(()),
        Ok(Err(e)) => return Err(e),
        Ok(Ok(Head::TooLarge)) => (
            "431 Request Header Fields Too Large",
            "request head too large".into(),
            TEXT,
        ),
        Ok(Ok(Head::Read)) => route(&buf, endpoint),
    };
    let method = buf.split(|b| *b == b' ').next().unwrap_or_default();
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    if method != b"HEAD" {
        response.push_str(&body);
    }
    tokio::time::timeout(REQUEST_TIMEOUT, stream.write_all(response.as_bytes()))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    let _ = stream.shutdown().await;
    Ok(())
}

/// The answer of `endpoint` to the request head in `buf`.
fn route(buf: &[u8], endpoint: &Endpoint) -> Answer {
    let head = String::from_utf8_lossy(buf);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let text = |status, body: &'static str| (status, Cow::Borrowed(body), TEXT);
    match (endpoint, method, path) {
        (Endpoint::Health(serving), "GET" | "HEAD", "/healthz" | "/readyz") => {
            if serving.load(Ordering::SeqCst) {
                text("200 OK", "ok")
            } else {
                text("503 Service Unavailable", "shutting down")
            }
        }
        (Endpoint::Metrics(metrics), "GET", "/metrics") => {
            ("200 OK", Cow::Owned(metrics.text()), OPENMETRICS)
        }
        (Endpoint::Health(_), _, "/healthz" | "/readyz")
        | (Endpoint::Metrics(_), _, "/metrics") => {
            text("405 Method Not Allowed", "method not allowed")
        }
        _ => text("404 Not Found", "not found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a head fed byte by byte is first seen complete.
    fn complete_at(bytes: &[u8]) -> Option<usize> {
        let mut buf = Vec::new();
        bytes.iter().enumerate().find_map(|(i, b)| {
            buf.push(*b);
            head_complete(&buf, i).then_some(i)
        })
    }

    #[test]
    fn each_port_answers_its_own_paths_only() {
        let health = Endpoint::Health(Arc::new(AtomicBool::new(true)));
        let metrics = Arc::new(crate::agent::metrics::AgentMetrics::new());
        metrics.daemon_started(crate::agent::metrics::Via::Launch);
        let scrape = Endpoint::Metrics(metrics);
        let status = |e: &Endpoint, head: &str| route(head.as_bytes(), e).0;
        assert_eq!(status(&health, "GET /healthz HTTP/1.1\r\n\r\n"), "200 OK");
        assert_eq!(
            status(&health, "GET /metrics HTTP/1.1\r\n\r\n"),
            "404 Not Found"
        );
        assert_eq!(
            status(&scrape, "GET /healthz HTTP/1.1\r\n\r\n"),
            "404 Not Found"
        );
        assert_eq!(
            status(&scrape, "GET /metrics/x HTTP/1.1\r\n\r\n"),
            "404 Not Found"
        );
        assert_eq!(status(&scrape, "GET / HTTP/1.1\r\n\r\n"), "404 Not Found");
        for method in ["POST", "HEAD", "PUT", "DELETE"] {
            let head = format!("{method} /metrics HTTP/1.1\r\n\r\n");
            assert_eq!(status(&scrape, &head), "405 Method Not Allowed", "{method}");
        }
        let (status, body, content_type) = route(b"GET /metrics HTTP/1.1\r\n\r\n", &scrape);
        assert_eq!(status, "200 OK");
        assert!(content_type.starts_with("application/openmetrics-text"));
        assert!(
            body.contains("prrte_k8s_agent_daemons_started_total{via=\"launch\"} 1\n"),
            "{body}"
        );
    }

    #[test]
    fn a_head_ends_at_its_blank_line_however_it_arrives() {
        let head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(complete_at(head), Some(head.len() - 1));
        assert!(head_complete(head, 0));
        assert_eq!(complete_at(b"GET / HTTP/1.0\n\nrest"), Some(15));
        assert_eq!(complete_at(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
    }
}
