//! The batch launcher's links to the workers' agents: the job's other pods found as `ras k8s`
//! finds them, one authenticated connection to each agent (`attach`), heartbeats while the
//! command runs, meanwhile the output of the ranks that run in each worker's pod
//! (`rank_output`, queued by [`super::route`]), and `finish {code}` when it has ended, after
//! the last of that output.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::super::connect::{agent_name, connect_authenticated, recv_reply, send_request};
use super::super::error::AgentError;
use super::super::request::{LaunchOptions, LaunchTarget};
use super::route::{coalesce, Chunk};
use crate::agent::checked_config::AgentConfig;
use crate::discovery::{self, Allocation, DiscoveryConfig, DiscoveryError};
use crate::protocol::exec::encode_data;
use crate::protocol::liveness::{Heartbeat, HeartbeatSender, Lost};
use crate::protocol::{FramedConn, Reply, Request, Session};

/// Bound on each connect, `attach` and `finish` exchange of the launcher.
pub(super) const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the batch launcher could not find the job's other pods, or see them finished.
#[derive(Debug, thiserror::Error)]
pub(super) enum PeersError {
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error("no answer within {0:?}")]
    NoAnswer(Duration),
    #[error("no Kubernetes API client within {0:?}")]
    NoClient(Duration),
}

/// One attached worker agent.
pub(super) struct Attached {
    pub(super) target: LaunchTarget,
    pub(super) conn: FramedConn<TcpStream>,
    pub(super) session: Session,
    /// The output of the ranks that run in the worker's pod, to send it (see [`super::route`]).
    pub(super) output: Option<UnboundedReceiver<Chunk>>,
}

async fn attach_one(target: LaunchTarget, opts: &LaunchOptions) -> Result<Attached, AgentError> {
    let (mut conn, mut session) = connect_authenticated(&target, opts).await?;
    let who = agent_name(&target);
    send_request(
        &mut conn,
        &mut session,
        &Request::Attach {},
        "attach",
        &who,
        PEER_TIMEOUT,
    )
    .await?;
    let deadline = Instant::now() + PEER_TIMEOUT;
    match recv_reply(
        &mut conn,
        &mut session,
        "attach",
        &who,
        deadline,
        PEER_TIMEOUT,
    )
    .await?
    {
        Reply::Ack {} => Ok(Attached {
            target,
            conn,
            session,
            output: None,
        }),
        Reply::Failed { reason } | Reply::Error { reason } => Err(AgentError::RequestRefused {
            what: "attach",
            who,
            reason,
        }),
        other => Err(AgentError::Unexpected {
            what: "attach",
            who,
            reply: format!("{other:?}"),
        }),
    }
}

async fn finish_one(
    mut a: Attached,
    code: i32,
) -> Result<(LaunchTarget, FramedConn<TcpStream>), (LaunchTarget, AgentError)> {
    let who = agent_name(&a.target);
    let r = async {
        // The ranks' output first: the worker writes all of it before it acts on `finish`.
        send_rest(&mut a).await?;
        send_request(
            &mut a.conn,
            &mut a.session,
            &Request::Finish { code },
            "finish",
            &who,
            PEER_TIMEOUT,
        )
        .await?;
        let deadline = Instant::now() + PEER_TIMEOUT;
        loop {
            match recv_reply(
                &mut a.conn,
                &mut a.session,
                "finish",
                &who,
                deadline,
                PEER_TIMEOUT,
            )
            .await?
            {
                Reply::Ack {} => return Ok(()),
                Reply::Failed { reason } | Reply::Error { reason } => {
                    return Err(AgentError::RequestRefused {
                        what: "finish",
                        who: who.clone(),
                        reason,
                    })
                }
                _ => continue,
            }
        }
    }
    .await;
    match r {
        Ok(()) => Ok((a.target, a.conn)),
        Err(e) => Err((a.target, e)),
    }
}

/// The job's pods as discovery found them, and the other pods' agents.
pub(super) struct Peers {
    pub(super) alloc: Allocation,
    pub(super) targets: Vec<LaunchTarget>,
}

/// Finds the job's pods (bounded), as `ras k8s` in this pod would (its `PRTE_MCA_ras_k8s_*`
/// settings, `ras_k8s_exclude_self` included, since the hostfile written from the allocation
/// stands in for it): the allocation, and the other pods' agents.
pub(super) async fn find_peers(
    config: &AgentConfig,
    timeout: Duration,
) -> Result<Peers, PeersError> {
    let mut cfg = DiscoveryConfig::from_env(&|k| std::env::var(k).ok())?;
    cfg.timeout = timeout;
    let bound = timeout + Duration::from_secs(5);
    let alloc = match tokio::time::timeout(bound, discovery::discover(&cfg)).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => return Err(PeersError::NoAnswer(bound)),
    };
    let port = config.listen.port();
    let targets = alloc
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| !n.is_self)
        .map(|(i, n)| LaunchTarget {
            id: i as u32,
            pod: n.pod.clone(),
            addr: SocketAddr::new(n.ip.into(), port),
        })
        .collect();
    Ok(Peers { alloc, targets })
}

/// Attaches to the agents of `peers`; those it cannot attach to are logged and left out (they
/// give up by themselves).
pub(super) async fn attach_all(peers: Vec<LaunchTarget>, config: &AgentConfig) -> Vec<Attached> {
    let opts = LaunchOptions {
        secret: config.secret.clone(),
        connect_timeout: PEER_TIMEOUT,
        request_timeout: PEER_TIMEOUT,
        ..Default::default()
    };
    let attempts = futures::future::join_all(peers.into_iter().map(|t| attach_one(t, &opts))).await;
    let mut links = Vec::new();
    for a in attempts {
        match a {
            Ok(l) => links.push(l),
            Err(e) => {
                warn!(error = %e, "batch launcher: cannot attach to a worker's agent; it will give up by itself")
            }
        }
    }
    links
}

/// The batch launcher's heartbeats: `PRTE_MCA_plm_k8s_heartbeat_*` (the site's parameter
/// file sets no environment, so the defaults unless the pod's environment sets them).
pub(super) fn heartbeat() -> Heartbeat {
    Heartbeat::from_env(&|k| std::env::var(k).ok()).unwrap_or_else(|e| {
        warn!(error = %e, "batch launcher: using the default heartbeats");
        Heartbeat::default()
    })
}

/// Pings the attached worker every interval, and sends it its ranks' output, until `done`
/// (None) or it is gone: why (its connection ended, or it was silent for longer than `beat`
/// allows: its pod cut off from the network). A frame being sent is never cut off by `done`.
pub(super) async fn beat_until_gone(
    l: &mut Attached,
    beat: Heartbeat,
    done: &CancellationToken,
) -> Option<String> {
    let mut beats = HeartbeatSender::start(beat);
    loop {
        tokio::select! {
            biased;
            frame = crate::protocol::recv_frame(&mut l.conn, None) => match frame {
                // Every frame is opened, so the session stays in step for `finish`.
                Ok(f) => match l.session.open(&f) {
                    Ok(_) => beats.heard(),
                    Err(e) => return Some(format!("it sent a frame that does not open: {e}")),
                },
                Err(_) => return Some("its connection ended (its pod evicted, deleted or killed?)".into()),
            },
            _ = done.cancelled() => return None,
            _ = beats.due() => match beats.beat(&mut l.conn, &mut l.session, PEER_TIMEOUT).await {
                Ok(()) => {}
                Err(e @ Lost::Silent(_)) => {
                    return Some(format!("it was {e}: its pod is cut off from the network, stopped or stalled"))
                }
                Err(Lost::Send(_)) => {
                    return Some("a heartbeat could not be sent (its connection ended)".into())
                }
            },
            Some(chunk) = next_queued(&mut l.output) => {
                if let Err(e) = send_queued(l, chunk).await {
                    return Some(format!("its ranks' output could not be sent: {e}"));
                }
            }
        }
    }
}

/// Sends `finish {code}` to every attached worker; returns the told ones and their connections
/// (the others are logged).
pub(super) async fn finish_all(
    links: Vec<Attached>,
    code: i32,
) -> Vec<(LaunchTarget, FramedConn<TcpStream>)> {
    let results = futures::future::join_all(links.into_iter().map(|l| finish_one(l, code))).await;
    let mut told = Vec::new();
    for r in results {
        match r {
            Ok(t) => told.push(t),
            Err((t, e)) => {
                warn!(pod = %t.pod, error = %e, "batch launcher: cannot tell a worker that the job ended")
            }
        }
    }
    told
}

/// Takes the next piece queued for a worker; pending forever without a queue.
async fn next_queued(output: &mut Option<UnboundedReceiver<Chunk>>) -> Option<Chunk> {
    match output {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Sends `first` and whatever else is queued now to the worker of `link`, adjacent pieces of
/// the same rank and stream together (at most [`super::route::FRAME_DATA`] bytes a frame).
async fn send_queued(link: &mut Attached, first: Chunk) -> Result<(), AgentError> {
    let mut batch = vec![first];
    if let Some(rx) = link.output.as_mut() {
        while let Ok(c) = rx.try_recv() {
            batch.push(c);
        }
    }
    for c in coalesce(batch) {
        let request = Request::RankOutput {
            rank: c.rank,
            fd: c.stream.fd(),
            data: encode_data(&c.data),
        };
        let who = agent_name(&link.target);
        send_request(
            &mut link.conn,
            &mut link.session,
            &request,
            "rank_output",
            &who,
            PEER_TIMEOUT,
        )
        .await?;
    }
    Ok(())
}

/// Sends everything still queued for the worker of `link` (the relays have ended).
async fn send_rest(link: &mut Attached) -> Result<(), AgentError> {
    let first = match link.output.as_mut().map(|rx| rx.try_recv()) {
        Some(Ok(c)) => c,
        _ => return Ok(()),
    };
    send_queued(link, first).await
}
