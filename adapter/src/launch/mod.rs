//! The launcher: connects to the `prrte-k8s-agent` of every target pod, authenticates, asks it
//! to start prted, and supervises the connections until the daemons end.
//!
//! This is what PRRTE's k8s PLM component drives (through the C ABI) from its own thread; what
//! it launches in each round, and what it reports to PRRTE about the outcomes, is decided by
//! [`rounds`], from the `settings` the PLM's parameters give, the nodes resolved to pods by
//! [`targets`] (hosts added to a running DVM by [`added`]) and prted's command line adapted by [`prted_args`]. `connect` holds the
//! connection to one agent, which the batch launcher, `prrte-k8s-rsh` and `doctor` use too.
//!
//! The launches an agent starts itself in its own pod are the launcher's too, above the agent:
//! the DVM head's prte (`head`) and batch mode's launcher (`batch`), with what they share
//! (`local`); the agent binary hands them to the agent ([`AGENT_LAUNCHES`]).
//!
//! [`Launcher::start`] returns at once; all network work runs on the launcher's own tokio
//! runtime (two worker threads), and results arrive through the `sink` callback.
//!
//! Per target, the sink sees exactly one [`LaunchEvent::Started`] or [`LaunchEvent::Failed`]
//! first; after `Started`, exactly one [`LaunchEvent::Exited`] follows when prted ends, when the
//! agent connection is lost, or during [`Launcher::shutdown`]. Every wait for an agent's answer
//! is bounded by [`LaunchOptions::request_timeout`] and connecting by
//! [`LaunchOptions::connect_timeout`], so every target gets its first event in bounded time.
//!
//! Sink calls are serialized (one at a time, from the launcher's threads) and must return
//! quickly. The sink must not call [`Launcher::shutdown`] nor drop the [`Launcher`]. After
//! `shutdown` returns every target has had its final event; after the `Launcher` is dropped the
//! sink is never called again.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::protocol::liveness::{HeartbeatSender, Lost};
use crate::protocol::{
    self, decode_message, recv_frame, send_frame, validate_launch, FramedConn, ProtocolError,
    Reply, Request, Session,
};

pub mod added;
pub(crate) mod batch;
mod connect;
pub mod daemons_up;
mod error;
mod event;
pub(crate) mod head;
pub(crate) mod local;
pub mod prted_args;
mod request;
pub mod rounds;
pub(crate) mod settings;
pub mod targets;
mod timing;
mod watch;

pub(crate) use connect::{agent_name, connect_authenticated, recv_reply, send_request};
pub use connect::{ping_agent, RETRY_LOG_TARGET};
pub use error::PrtedArgsError;
pub(crate) use error::{AgentError, NotSent};
pub use event::{ExitDesc, LaunchEvent};
pub use request::{LaunchOptions, LaunchRequest, LaunchTarget};
pub use watch::{own_pod_target, Watcher};

/// The launches an agent starts itself, for the agent binary to hand in
/// ([`crate::agent::Launches`]): the DVM head (`head`) and batch mode's launcher (`batch`).
pub const AGENT_LAUNCHES: crate::agent::Launches = crate::agent::Launches {
    head: |head, config, reaper, tracking, health, stop, up| {
        Box::pin(head::run(head, config, reaper, tracking, health, stop, up))
    },
    batch_launcher: |config, reaper, health, batch_state, stop| {
        Box::pin(batch::run_launcher(
            config,
            reaper,
            health,
            batch_state,
            stop,
        ))
    },
};

type Sink = Box<dyn Fn(LaunchEvent) + Send + Sync>;

/// Serializes sink calls and stops them for good once the launcher is dropped.
struct Emitter {
    sink: Mutex<Option<Sink>>,
}

impl Emitter {
    fn emit(&self, event: LaunchEvent) {
        let sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sink) = sink.as_ref() {
            sink(event);
        }
    }

    fn close(&self) {
        *self.sink.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Counts targets that have not had their final event yet.
struct Progress {
    remaining: Mutex<usize>,
    cv: Condvar,
}

impl Progress {
    fn done(&self) {
        let mut n = self.remaining.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        self.cv.notify_all();
    }

    /// Waits until every target is finished or `deadline` passes; true if all finished.
    fn wait_until(&self, deadline: Instant) -> bool {
        let mut n = self.remaining.lock().unwrap_or_else(|p| p.into_inner());
        while *n > 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            n = self
                .cv
                .wait_timeout(n, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }
}

/// Marks a target finished even if its task is dropped.
struct DoneGuard(Arc<Progress>);

impl Drop for DoneGuard {
    fn drop(&mut self) {
        self.0.done();
    }
}

#[derive(Clone)]
struct Control {
    /// Set by `shutdown`: ask agents to kill prted.
    shutting_down: CancellationToken,
    /// Set when waiting is over: close connections now.
    closing: CancellationToken,
}

/// How long `shutdown` waits for tasks to report after closing connections.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Launches prted through the agents of a set of pods; see the module documentation.
pub struct Launcher {
    runtime: Option<tokio::runtime::Runtime>,
    control: Control,
    progress: Arc<Progress>,
    emitter: Arc<Emitter>,
}

impl Launcher {
    /// Returns at once; connects to all targets in parallel on its own threads/tokio runtime,
    /// authenticates, sends each target's request, and reports through `sink` (called from the
    /// launcher's threads; must not block long).
    pub fn start(
        targets: Vec<(LaunchTarget, LaunchRequest)>,
        opts: LaunchOptions,
        sink: Box<dyn Fn(LaunchEvent) + Send + Sync>,
    ) -> Launcher {
        let emitter = Arc::new(Emitter {
            sink: Mutex::new(Some(sink)),
        });
        let progress = Arc::new(Progress {
            remaining: Mutex::new(targets.len()),
            cv: Condvar::new(),
        });
        let control = Control {
            shutting_down: CancellationToken::new(),
            closing: CancellationToken::new(),
        };
        let runtime = crate::runtime::worker_threads(2, "prrte-k8s-launch");
        let runtime = match runtime {
            Ok(rt) => rt,
            Err(e) => {
                for (t, _) in targets {
                    emitter.emit(LaunchEvent::Failed {
                        id: t.id,
                        pod: t.pod,
                        reason: format!("cannot start the launcher's threads: {e}"),
                    });
                    progress.done();
                }
                return Launcher {
                    runtime: None,
                    control,
                    progress,
                    emitter,
                };
            }
        };
        let opts = Arc::new(opts);
        let times = Arc::new(timing::RoundTimes::new(targets.len()));
        for (target, request) in targets {
            let guard = DoneGuard(progress.clone());
            let (opts, control, emitter) = (opts.clone(), control.clone(), emitter.clone());
            let times = times.clone();
            runtime.spawn(async move {
                run_target(target, request, &opts, &control, &emitter, &times).await;
                drop(guard);
            });
        }
        Launcher {
            runtime: Some(runtime),
            control,
            progress,
            emitter,
        }
    }

    /// Ask every agent to kill its prted, wait for their `exited` (bounded by `timeout`), close
    /// connections. Targets still connecting are abandoned (reported `Failed`); targets whose
    /// agent did not report in time are reported `Exited` with [`ExitDesc::ClosedByLauncher`] (their
    /// agents stop prted when the connection closes). Every target has had its final event when
    /// this returns.
    pub fn shutdown(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        self.control.shutting_down.cancel();
        if !self.progress.wait_until(deadline) {
            self.control.closing.cancel();
            self.progress.wait_until(Instant::now() + CLOSE_WAIT);
        }
    }
}

impl Drop for Launcher {
    /// Closes every connection immediately (agents then kill their prted); the sink is not
    /// called again. Does not wait for agents.
    fn drop(&mut self) {
        self.emitter.close();
        self.control.closing.cancel();
        if let Some(rt) = self.runtime.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                // Dropping a runtime inside another runtime's context panics; let a plain
                // thread do it.
                std::thread::spawn(move || rt.shutdown_timeout(Duration::from_secs(1)));
            } else {
                rt.shutdown_timeout(Duration::from_secs(1));
            }
        }
    }
}

async fn run_target(
    target: LaunchTarget,
    request: LaunchRequest,
    opts: &LaunchOptions,
    control: &Control,
    emitter: &Emitter,
    times: &timing::RoundTimes,
) {
    let (id, pod) = (target.id, target.pod.clone());
    let launched = tokio::select! {
        biased;
        _ = control.closing.cancelled() => Err(format!(
            "the launcher closed before prted was started in pod {} ({})",
            target.pod, target.addr
        )),
        r = launch_one(&target, &request, opts) => r.map_err(|e| e.to_string()),
        _ = control.shutting_down.cancelled() => Err(format!(
            "the launcher shut down before prted was started in pod {} ({})",
            target.pod, target.addr
        )),
    };
    let summed_up = |summary: Option<timing::RoundSummary>| {
        if let Some(summary) = summary {
            tracing::info!("{summary}");
        }
    };
    let (mut conn, mut session, pid) = match launched {
        Ok((conn, session, pid, took)) => {
            summed_up(times.started(took.connect, took.start));
            (conn, session, pid)
        }
        Err(reason) => {
            tracing::warn!(vpid = id, "{reason}");
            emitter.emit(LaunchEvent::Failed { id, pod, reason });
            summed_up(times.failed());
            return;
        }
    };
    tracing::info!(
        vpid = id,
        pid,
        "prted started in pod {pod} by {}",
        agent_name(&target)
    );
    emitter.emit(LaunchEvent::Started {
        id,
        pod: pod.clone(),
        pid,
    });
    let preempted = |seconds| {
        tracing::warn!(
            vpid = id,
            "pod {pod} is told to end: prted runs {seconds} s more"
        );
        emitter.emit(LaunchEvent::Preempt {
            id,
            pod: pod.clone(),
            seconds,
        })
    };
    let status = supervise(&mut conn, &mut session, opts, control, &preempted).await;
    if control.shutting_down.is_cancelled() {
        tracing::info!(vpid = id, "prted in pod {pod} ended: {status}");
    } else {
        tracing::warn!(
            vpid = id,
            "prted in pod {pod} ended while the DVM ran: {status}"
        );
    }
    drop(conn);
    emitter.emit(LaunchEvent::Exited { id, pod, status });
}

/// How long a target's launch took, step by step.
struct Took {
    /// Connecting and authenticating (retries included).
    connect: Duration,
    /// From sending the request to the agent's `started`.
    start: Duration,
}

async fn launch_one(
    target: &LaunchTarget,
    request: &LaunchRequest,
    opts: &LaunchOptions,
) -> Result<(FramedConn<TcpStream>, Session, u32, Took), AgentError> {
    let not_sent = |source: NotSent| AgentError::NotSent {
        pod: target.pod.clone(),
        source,
    };
    let env: BTreeMap<String, String> = request.env.iter().cloned().collect();
    validate_launch(&request.argv, &env).map_err(|e| not_sent(e.into()))?;
    let dvm_uri = request.dvm_uri.clone();
    if let Some(uri) = &dvm_uri {
        protocol::validate_dvm_uri(uri).map_err(|e| not_sent(e.into()))?;
    }
    let t0 = Instant::now();
    let (mut conn, mut session) = connect_authenticated(target, opts).await?;
    let connect = t0.elapsed();

    let who = agent_name(target);
    let launch = Request::Launch {
        argv: request.argv.clone(),
        env,
        dvm_uri,
    };
    let (what, timeout) = ("the launch request", opts.request_timeout);
    let t1 = Instant::now();
    send_request(&mut conn, &mut session, &launch, what, &who, timeout).await?;
    // One bound for the answer, however many unrelated replies come first.
    let deadline = Instant::now() + timeout;
    loop {
        match recv_reply(&mut conn, &mut session, what, &who, deadline, timeout).await? {
            Reply::Started { pid } => {
                let start = t1.elapsed();
                return Ok((conn, session, pid, Took { connect, start }));
            }
            Reply::Failed { reason } => return Err(AgentError::NotStarted { who, reason }),
            Reply::Error { reason } => return Err(AgentError::Reported { who, reason }),
            // Not an answer to `launch`; keep waiting.
            Reply::Pong {}
            | Reply::Status { .. }
            | Reply::Exited { .. }
            | Reply::Ack {}
            | Reply::Preempt { .. }
            | Reply::Output { .. } => continue,
        }
    }
}

async fn supervise(
    conn: &mut FramedConn<TcpStream>,
    session: &mut Session,
    opts: &LaunchOptions,
    control: &Control,
    preempted: &(dyn Fn(u64) + Sync),
) -> ExitDesc {
    let mut kill_sent = false;
    // Heartbeats: a ping every interval; any frame from the agent counts as a sign of life.
    let mut beats = HeartbeatSender::start(opts.heartbeat);
    loop {
        tokio::select! {
            biased;
            _ = control.closing.cancelled() => return ExitDesc::ClosedByLauncher,
            frame = recv_frame(conn, None) => {
                beats.heard();
                let frame = match frame {
                    Ok(f) => f,
                    Err(ProtocolError::Closed) => {
                        return ExitDesc::ConnectionLost(
                            "the agent closed the connection without reporting prted's exit \
                             (was the agent or its pod stopped?)".into(),
                        )
                    }
                    Err(e) => return ExitDesc::ConnectionLost(e.to_string()),
                };
                let reply = session
                    .open(&frame)
                    .and_then(|body| decode_message::<Reply>(body.as_bytes()));
                match reply {
                    Ok(Reply::Exited { code, signal, told_to_end, .. }) => {
                        return ExitDesc::of_exited(code, signal, told_to_end).unwrap_or_else(|| {
                            ExitDesc::ConnectionLost("the agent reported an exit without a status".into())
                        })
                    }
                    Ok(Reply::Error { reason }) => {
                        return ExitDesc::ConnectionLost(format!("the agent reported an error: {reason}"))
                    }
                    Ok(Reply::Preempt { seconds }) => preempted(seconds),
                    Ok(_) => continue,
                    Err(e) => return ExitDesc::ConnectionLost(format!("protocol error: {e}")),
                }
            }
            // After the frames: data that arrived during a stall counts before the silence.
            _ = beats.due() => match beats.beat(conn, session, opts.heartbeat.interval).await {
                Ok(()) => {}
                Err(Lost::Silent(s)) => {
                    return ExitDesc::ConnectionLost(format!(
                        "the agent was silent for {:.1} s ({} heartbeats {} s apart unanswered, plm_k8s_heartbeat_interval/plm_k8s_heartbeat_misses): its pod is cut off from the network, stopped or stalled",
                        s.silent.as_secs_f64(),
                        s.heartbeat.misses,
                        s.heartbeat.interval.as_secs_f64()
                    ));
                }
                Err(e @ Lost::Send(_)) => return ExitDesc::ConnectionLost(e.to_string()),
            },
            _ = control.shutting_down.cancelled(), if !kill_sent => {
                kill_sent = true;
                let grace_ms = u64::try_from(opts.kill_grace.as_millis()).unwrap_or(u64::MAX);
                let kill = session.seal(&Request::Kill { grace_ms: Some(grace_ms) });
                tokio::select! {
                    biased;
                    _ = control.closing.cancelled() => return ExitDesc::ClosedByLauncher,
                    sent = send_frame(conn, kill, opts.request_timeout) => if let Err(e) = sent {
                        return ExitDesc::ConnectionLost(format!("cannot send the kill request: {e}"));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_requests_fail_without_connecting() {
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        // Nothing listens on port 1, so reaching the network would fail with another reason.
        let target = LaunchTarget {
            id: 4,
            pod: "p-4".into(),
            addr: "127.0.0.1:1".parse().unwrap(),
        };
        let request = LaunchRequest {
            argv: vec![],
            env: vec![("LD_PRELOAD".into(), "x".into())],
            dvm_uri: None,
        };
        let l = Launcher::start(
            vec![(target, request)],
            LaunchOptions::default(),
            Box::new(move |e| tx.lock().unwrap().send(e).unwrap()),
        );
        match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
            LaunchEvent::Failed { id: 4, reason, .. } => {
                assert!(
                    reason.contains("LD_PRELOAD") && reason.contains("not sent"),
                    "{reason}"
                )
            }
            other => panic!("unexpected {other:?}"),
        }
        l.shutdown(Duration::from_secs(5));
        assert!(rx.try_recv().is_err(), "no event after Failed");
    }
}
