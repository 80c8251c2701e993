//! The launcher's watch of the agent of its own pod (where prte or mpirun runs, which no launch
//! reaches): a `watch` connection on which that agent sends `preempt` when the pod is told to
//! end, reported as [`LaunchEvent::Preempt`] like the launched agents' notices. The watch also
//! keeps that agent's pod up for the grace period while the launcher runs.
//!
//! Best effort: an agent that cannot be reached or refuses is logged, nothing else; the watch
//! ends when the agent closes the connection or the [`Watcher`] is dropped.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::connect::{agent_name, connect_authenticated, recv_reply, send_request};
use super::event::LaunchEvent;
use super::request::{LaunchOptions, LaunchTarget};
use crate::protocol::{Reply, Request};

/// A running watch; dropping it closes the connection.
pub struct Watcher {
    runtime: Option<tokio::runtime::Runtime>,
    closing: CancellationToken,
}

impl Watcher {
    /// Starts watching `target` on a thread of its own; `sink` gets the notices.
    pub fn start(
        target: LaunchTarget,
        opts: LaunchOptions,
        sink: Box<dyn Fn(LaunchEvent) + Send + Sync>,
    ) -> Watcher {
        let closing = CancellationToken::new();
        let runtime = match crate::runtime::worker_threads(1, "prrte-k8s-watch") {
            Ok(rt) => rt,
            Err(e) => {
                tracing::warn!("cannot watch pod {}: {e}", target.pod);
                return Watcher {
                    runtime: None,
                    closing,
                };
            }
        };
        let c = closing.clone();
        runtime.spawn(async move {
            tokio::select! {
                _ = c.cancelled() => {}
                _ = watch(&target, &opts, &*sink) => {}
            }
        });
        Watcher {
            runtime: Some(runtime),
            closing,
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.closing.cancel();
        if let Some(rt) = self.runtime.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                std::thread::spawn(move || rt.shutdown_timeout(Duration::from_secs(1)));
            } else {
                rt.shutdown_timeout(Duration::from_secs(1));
            }
        }
    }
}

async fn watch(target: &LaunchTarget, opts: &LaunchOptions, sink: &(dyn Fn(LaunchEvent) + Sync)) {
    let who = agent_name(target);
    let (mut conn, mut session) = match connect_authenticated(target, opts).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("cannot watch this pod's agent for a preemption notice: {e}");
            return;
        }
    };
    let what = "the watch request";
    if let Err(e) = send_request(
        &mut conn,
        &mut session,
        &Request::Watch {},
        what,
        &who,
        opts.request_timeout,
    )
    .await
    {
        tracing::warn!("cannot watch this pod's agent for a preemption notice: {e}");
        return;
    }
    tracing::info!("watching {who} for a preemption notice");
    loop {
        // No bound: the agent speaks when its pod is told to end, or closes.
        let forever = Instant::now() + Duration::from_secs(86_400 * 365);
        match recv_reply(
            &mut conn,
            &mut session,
            what,
            &who,
            forever,
            opts.request_timeout,
        )
        .await
        {
            Ok(Reply::Preempt { seconds }) => {
                tracing::warn!("pod {} is told to end: {seconds} s left", target.pod);
                sink(LaunchEvent::Preempt {
                    id: target.id,
                    pod: target.pod.clone(),
                    seconds,
                });
            }
            Ok(Reply::Failed { reason }) => {
                tracing::warn!("{who} refused the watch: {reason}");
                return;
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!("the watch of {who} ended: {e}");
                return;
            }
        }
    }
}

/// The agent of the launcher's own pod: `$POD_IP` (the downward API's `status.podIP`, which
/// every pod of `prrte-k8s manifest` has) on the agents' `port`, named `$POD_NAME` (else
/// `$HOSTNAME`); `None` outside such a pod. Its id is 0, prte's own daemon.
pub fn own_pod_target(env: &dyn Fn(&str) -> Option<String>, port: u16) -> Option<LaunchTarget> {
    let ip: std::net::IpAddr = env("POD_IP")?.trim().parse().ok()?;
    let pod = env("POD_NAME")
        .or_else(|| env("HOSTNAME"))
        .unwrap_or_else(|| ip.to_string());
    Some(LaunchTarget {
        id: 0,
        pod,
        addr: std::net::SocketAddr::new(ip, port),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_pod_from_the_downward_api() {
        let env = |k: &str| match k {
            "POD_IP" => Some("10.1.2.3".to_string()),
            "POD_NAME" => Some("job-0-abc".to_string()),
            _ => None,
        };
        let t = own_pod_target(&env, 7117).unwrap();
        assert_eq!((t.id, t.pod.as_str()), (0, "job-0-abc"));
        assert_eq!(t.addr, "10.1.2.3:7117".parse().unwrap());
        assert!(own_pod_target(&|_| None, 7117).is_none());
        assert!(own_pod_target(&|_| Some("not-an-ip".into()), 7117).is_none());
    }
}
