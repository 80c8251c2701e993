//! `serve`: the sandbox server (cluster, workload, state file, control socket), and `api`.

use super::host::require_root;
use super::ready::wait_workload;
use super::state::{snapshot, write_state};
use crate::api::resources::PODS;
use crate::api::{ApiOptions, ApiServer, Obj};
use crate::cluster::{Cluster, ClusterOptions};
use anyhow::{Context, Result};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Runs the sandbox server in `dir`: the cluster, the workload (`apply`), the state file kept
/// current, one report line on stdout (READY or FAILED), then the control socket until `down`
/// or a signal.
pub(super) fn serve(
    dir: &Path,
    apply: &[PathBuf],
    ready_timeout: Duration,
    max_pods: usize,
) -> Result<i32> {
    require_root()?;
    init_tracing(false);
    std::fs::create_dir_all(dir)?;
    let dir = dir.to_path_buf();
    runtime()?.block_on(async move {
        let c = start_cluster(&dir, max_pods).await?;
        let listener = {
            let sock = dir.join("control.sock");
            let _ = std::fs::remove_file(&sock);
            tokio::net::UnixListener::bind(&sock)
                .with_context(|| format!("binding {}", sock.display()))?
        };
        let applied = apply_files(&c, apply)?;
        let c = Arc::new(c);
        let writer = tokio::spawn(keep_state(c.clone(), dir.clone()));
        match wait_workload(&c, &applied, ready_timeout).await {
            Ok(()) => {
                write_state(&dir, &snapshot(&c, &dir));
                report("READY".into());
            }
            Err(e) => {
                write_state(&dir, &snapshot(&c, &dir));
                report(format!("FAILED {e:#}"));
            }
        }
        let closer = control_socket(&c, &dir, &listener).await?;
        tracing::info!("shutting down");
        writer.abort();
        let _ = writer.await;
        let _ = std::fs::remove_file(dir.join("control.sock"));
        stop(c);
        let _ = std::fs::remove_file(dir.join("state.json"));
        tracing::info!("sandbox down");
        drop(closer);
        Ok(0)
    })
}

/// Logs to stderr (`ansi`: with colours).
fn init_tracing(ansi: bool) {
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr);
    let _ = if ansi {
        fmt.try_init()
    } else {
        fmt.with_ansi(false).try_init()
    };
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// One line per report: "READY", or "FAILED " and the message as a JSON string.
fn report(line: String) {
    let line = match line.strip_prefix("FAILED ") {
        Some(m) => format!("FAILED {}", Value::String(m.to_string())),
        None => line,
    };
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The cluster (its node running at most `max_pods` pods), its admin kubeconfig in `dir`,
/// and the first state file.
async fn start_cluster(dir: &Path, max_pods: usize) -> Result<Cluster> {
    let c = match Cluster::start(ClusterOptions {
        dir: Some(dir.join("cluster")),
        max_pods,
        ..Default::default()
    })
    .await
    {
        Ok(c) => c,
        Err(e) => {
            report(format!("FAILED starting the cluster: {e:#}"));
            return Err(e);
        }
    };
    let kubeconfig = dir.join("kubeconfig");
    c.api()
        .write_kubeconfig(&kubeconfig, c.api().admin_token(), "default")?;
    write_state(dir, &snapshot(&c, dir));
    tracing::info!(
        "sandbox up: API {} (kubeconfig {}), network {}",
        c.api().url(),
        kubeconfig.display(),
        c.network().cidr()
    );
    Ok(c)
}

/// Applies the manifest files; the objects applied.
fn apply_files(c: &Cluster, apply: &[PathBuf]) -> Result<Vec<Obj>> {
    let mut applied = Vec::new();
    for f in apply {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        match c.apply_yaml(&text) {
            Ok(objs) => applied.extend(objs),
            Err(e) => {
                report(format!("FAILED applying {}: {e:#}", f.display()));
                return Err(e);
            }
        }
    }
    Ok(applied)
}

/// Keeps state.json current as pods change.
async fn keep_state(c: Arc<Cluster>, dir: PathBuf) {
    let mut rx = c.store().subscribe();
    loop {
        match rx.recv().await {
            Ok(ev) if std::ptr::eq(ev.resource, &PODS) => {
                // Coalesce bursts.
                tokio::time::sleep(Duration::from_millis(50)).await;
                while rx.try_recv().is_ok() {}
                write_state(&dir, &snapshot(&c, &dir));
            }
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                write_state(&dir, &snapshot(&c, &dir))
            }
            Err(_) => return,
        }
    }
}

/// Answers the control socket until `down` (its connection is returned, to be closed once
/// the sandbox is gone) or SIGTERM/SIGINT.
async fn control_socket(
    c: &Arc<Cluster>,
    dir: &Path,
    listener: &tokio::net::UnixListener,
) -> Result<Option<tokio::net::UnixStream>> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    loop {
        tokio::select! {
            _ = term.recv() => return Ok(None),
            _ = int.recv() => return Ok(None),
            a = listener.accept() => {
                let Ok((stream, _)) = a else { continue };
                let (rd, mut wr) = stream.into_split();
                let mut line = String::new();
                let mut br = tokio::io::BufReader::new(rd);
                if br.read_line(&mut line).await.is_err() { continue; }
                let req = line.trim();
                if req == "down" {
                    let _ = wr.write_all(b"ok\n").await;
                    return Ok(Some(br.into_inner().reunite(wr).expect("same stream")));
                }
                let reply = answer(c, dir, req).await;
                let _ = wr.write_all(reply.as_bytes()).await;
            }
        }
    }
}

/// The reply to a control request: `evict NS/POD` or `status`.
async fn answer(c: &Arc<Cluster>, dir: &Path, req: &str) -> String {
    if let Some(pod) = req.strip_prefix("evict ") {
        let (cc, pod) = (c.clone(), pod.to_string());
        match tokio::task::spawn_blocking(move || cc.evict(&pod)).await {
            Ok(Ok(())) => "ok\n".to_string(),
            Ok(Err(e)) => format!("error: {e:#}\n"),
            Err(e) => format!("error: {e}\n"),
        }
    } else if req == "status" {
        let s = snapshot(c, dir);
        format!("{}\n", serde_json::to_string(&s).unwrap_or_default())
    } else {
        format!("error: unknown request {req:?}\n")
    }
}

/// Stops every pod, then drops the last handle: that removes the network and stops the API
/// server.
fn stop(c: Arc<Cluster>) {
    tokio::task::block_in_place(|| c.stop());
    match Arc::try_unwrap(c) {
        Ok(c) => tokio::task::block_in_place(move || drop(c)),
        Err(c) => {
            tracing::warn!("the cluster is still referenced; it goes when the server exits");
            drop(c);
        }
    }
}

/// `api`: only the API server (no pods), until Ctrl-C.
pub(super) fn api_only(dir: &Path, port: u16) -> Result<i32> {
    init_tracing(true);
    runtime()?.block_on(async {
        let s = ApiServer::start(ApiOptions {
            bind: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            dir: Some(dir.join("api")),
            ..Default::default()
        })
        .await?;
        let kc = dir.join("kubeconfig");
        s.write_kubeconfig(&kc, s.admin_token(), "default")?;
        println!(
            "API server {} (no pods run); kubeconfig: {}",
            s.url(),
            kc.display()
        );
        tokio::signal::ctrl_c().await?;
        Ok(0)
    })
}
