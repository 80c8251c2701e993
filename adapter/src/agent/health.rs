//! A minimal HTTP/1.x endpoint for Kubernetes probes: `GET /healthz` answers `200 ok` while the
//! agent serves launch connections and `503` once it is shutting down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

use super::limits::Pending;

const MAX_REQUEST: usize = 8192;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves probes on `listener` forever; `serving` decides between 200 and 503. At most as many
/// requests as `pending` admits are in progress (the oldest is dropped beyond), each with one
/// overall deadline.
pub async fn serve(listener: TcpListener, serving: Arc<AtomicBool>, pending: Arc<Pending>) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let serving = serving.clone();
        let ticket = pending.admit(peer.ip());
        tokio::spawn(async move {
            tokio::select! {
                r = tokio::time::timeout(2 * REQUEST_TIMEOUT, answer(stream, &serving)) => match r {
                    Ok(Err(e)) => debug!(%peer, error = %e, "health request failed"),
                    Err(_) => debug!(%peer, "health request timed out"),
                    Ok(Ok(())) => {}
                },
                _ = ticket.cancel.cancelled() => debug!(%peer, "health request dropped (too many in progress)"),
            }
        });
    }
}

async fn answer(mut stream: TcpStream, serving: &AtomicBool) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(512);
    let read_head = async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
            let n = stream.read(&mut chunk).await?;
            if n == 0 || buf.len() + n > MAX_REQUEST {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Ok::<_, std::io::Error>(())
    };
    if tokio::time::timeout(REQUEST_TIMEOUT, read_head)
        .await
        .is_err()
    {
        return Ok(());
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, body) = match (method, path) {
        ("GET" | "HEAD", "/healthz" | "/readyz") => {
            if serving.load(Ordering::SeqCst) {
                ("200 OK", "ok")
            } else {
                ("503 Service Unavailable", "shutting down")
            }
        }
        (_, "/healthz" | "/readyz") => ("405 Method Not Allowed", "method not allowed"),
        _ => ("404 Not Found", "not found"),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        response.push_str(body);
    }
    tokio::time::timeout(REQUEST_TIMEOUT, stream.write_all(response.as_bytes()))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    let _ = stream.shutdown().await;
    Ok(())
}
