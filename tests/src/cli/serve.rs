//! `serve`: the sandbox server (cluster, workload, state file, control socket), and `api`.

use super::ready::wait_workload;
use super::require_root;
use super::state::{snapshot, write_state};
use crate::api::resources::PODS;
use crate::api::{ApiOptions, ApiServer};
use crate::cluster::{Cluster, ClusterOptions};
use anyhow::{Context, Result};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(super) fn serve(dir: &Path, apply: &[PathBuf], ready_timeout: Duration) -> Result<i32> {
    require_root()?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init()
        .ok();
    std::fs::create_dir_all(dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dir = dir.to_path_buf();
    rt.block_on(async move {
        // One line per report: "READY", or "FAILED " and the message as a JSON string.
        let report = |line: String| {
            let line = match line.strip_prefix("FAILED ") {
                Some(m) => format!("FAILED {}", Value::String(m.to_string())),
                None => line,
            };
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        };
        let c = match Cluster::start(ClusterOptions {
            dir: Some(dir.join("cluster")),
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
        write_state(&dir, &snapshot(&c, &dir));
        tracing::info!(
            "sandbox up: API {} (kubeconfig {}), network {}",
            c.api().url(),
            kubeconfig.display(),
            c.network().cidr()
        );

        let listener = {
            let sock = dir.join("control.sock");
            let _ = std::fs::remove_file(&sock);
            tokio::net::UnixListener::bind(&sock)
                .with_context(|| format!("binding {}", sock.display()))?
        };
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
        let c = std::sync::Arc::new(c);
        // Keep state.json current.
        let (cs, ds) = (c.clone(), dir.clone());
        let writer = tokio::spawn(async move {
            let mut rx = cs.store().subscribe();
            loop {
                match rx.recv().await {
                    Ok(ev) if std::ptr::eq(ev.resource, &PODS) => {
                        // Coalesce bursts.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        while rx.try_recv().is_ok() {}
                        write_state(&ds, &snapshot(&cs, &ds));
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        write_state(&ds, &snapshot(&cs, &ds))
                    }
                    Err(_) => return,
                }
            }
        });
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

        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        let mut closer: Option<tokio::net::UnixStream> = None;
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                a = listener.accept() => {
                    let Ok((stream, _)) = a else { continue };
                    let (rd, mut wr) = stream.into_split();
                    let mut line = String::new();
                    let mut br = tokio::io::BufReader::new(rd);
                    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
                    if br.read_line(&mut line).await.is_err() { continue; }
                    let req = line.trim();
                    if req == "down" {
                        let _ = wr.write_all(b"ok\n").await;
                        closer = Some(br.into_inner().reunite(wr).expect("same stream"));
                        break;
                    }
                    let reply = if let Some(pod) = req.strip_prefix("evict ") {
                        let (cc, pod) = (c.clone(), pod.to_string());
                        match tokio::task::spawn_blocking(move || cc.evict(&pod)).await {
                            Ok(Ok(())) => "ok\n".to_string(),
                            Ok(Err(e)) => format!("error: {e:#}\n"),
                            Err(e) => format!("error: {e}\n"),
                        }
                    } else if req == "status" {
                        let s = snapshot(&c, &dir);
                        format!("{}\n", serde_json::to_string(&s).unwrap_or_default())
                    } else {
                        format!("error: unknown request {req:?}\n")
                    };
                    let _ = wr.write_all(reply.as_bytes()).await;
                }
            }
        }
        tracing::info!("shutting down");
        writer.abort();
        let _ = writer.await;
        let _ = std::fs::remove_file(dir.join("control.sock"));
        tokio::task::block_in_place(|| c.stop());
        // Last handle: dropping it removes the network and stops the API server.
        match std::sync::Arc::try_unwrap(c) {
            Ok(c) => tokio::task::block_in_place(move || drop(c)),
            Err(c) => {
                tracing::warn!("the cluster is still referenced; it goes when the server exits");
                drop(c);
            }
        }
        let _ = std::fs::remove_file(dir.join("state.json"));
        tracing::info!("sandbox down");
        drop(closer);
        Ok(0)
    })
}

pub(super) fn api_only(dir: &Path, port: u16) -> Result<i32> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .try_init()
        .ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
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
