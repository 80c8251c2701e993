//! Liveness of a connection whose peer may be cut off without the connection ending (its pod's
//! packets dropped, its process stopped): a client that holds a connection open while work runs
//! (the launcher, `prrte-k8s-rsh`, the batch launcher) sends heartbeats with a
//! `HeartbeatSender`; the agent notices through a `SilenceWatch` when they stop.
//!
//! The client sends a `ping` every [`Heartbeat::interval`] and takes a peer silent (no frame at
//! all) for more than [`Heartbeat::misses`] intervals for lost. The agent answers each `ping`
//! with `pong`; once a `ping` came on a connection its client sends heartbeats, so its silence
//! for the agent's `--heartbeat-timeout` means that it is gone.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::{send_frame, FramedConn, ProtocolError, Request, Session};
use crate::settings::{mca, Setting, SettingError};

/// A client's heartbeats: a `ping` every `interval`; a peer silent (no answer, no frame at all)
/// for more than `misses` intervals is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// Zero: no heartbeats.
    pub interval: Duration,
    pub misses: u32,
}

impl Heartbeat {
    /// No heartbeats (only TCP keepalive notices a silent peer).
    pub const OFF: Heartbeat = Heartbeat {
        interval: Duration::ZERO,
        misses: 1,
    };

    /// `plm_k8s_heartbeat_interval` and `_misses` from the environment
    /// (`PRTE_MCA_plm_k8s_heartbeat_*`), else their defaults: how the launchers that are no
    /// PRRTE component (`prrte-k8s-rsh`, the batch launcher) beat.
    pub(crate) fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Heartbeat, SettingError> {
        let int = |s: &Setting, v: &str| s.int(v);
        let mut hb = Heartbeat::default();
        if let Some(i) = mca::HEARTBEAT_INTERVAL.from_env(env, int)? {
            hb.interval = Duration::from_secs(i as u64);
        }
        if let Some(m) = mca::HEARTBEAT_MISSES.from_env(env, int)? {
            hb.misses = m as u32;
        }
        Ok(hb)
    }

    /// How long a peer may stay silent; `None` without heartbeats.
    pub(crate) fn silence_limit(&self) -> Option<Duration> {
        (!self.interval.is_zero()).then(|| self.interval * self.misses.max(1))
    }
}

impl Default for Heartbeat {
    /// `plm_k8s_heartbeat_interval` and `plm_k8s_heartbeat_misses`' defaults.
    fn default() -> Self {
        Heartbeat {
            interval: Duration::from_secs(mca::HEARTBEAT_INTERVAL.default_u64()),
            misses: mca::HEARTBEAT_MISSES.default_u64() as u32,
        }
    }
}

/// The peer was silent for longer than the heartbeats allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Silence {
    /// How long nothing came from the peer.
    pub silent: Duration,
    /// The heartbeats it did not answer.
    pub heartbeat: Heartbeat,
}

/// Why a client takes its peer for lost at a heartbeat.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Lost {
    #[error(
        "silent for {:.1} s ({} heartbeats {} s apart unanswered)",
        .0.silent.as_secs_f64(),
        .0.heartbeat.misses,
        .0.heartbeat.interval.as_secs_f64()
    )]
    Silent(Silence),
    #[error("cannot send a heartbeat: {0}")]
    Send(#[source] ProtocolError),
}

/// The sending side of a connection's heartbeats: when one is [`due`](Self::due),
/// [`beat`](Self::beat) takes a peer that has been silent for too long for lost, else sends a
/// `ping`.
/// Every frame from the peer counts as a sign of life ([`heard`](Self::heard)).
pub(crate) struct HeartbeatSender {
    heartbeat: Heartbeat,
    /// `None`: not beating (heartbeats off, or not begun).
    ticks: Option<Interval>,
    heard: Instant,
}

impl HeartbeatSender {
    /// Beating from now: the first heartbeat is due at once (it tells the peer that this side
    /// sends them).
    pub fn start(heartbeat: Heartbeat) -> HeartbeatSender {
        let mut s = HeartbeatSender::idle(heartbeat);
        s.begin();
        s
    }

    /// Not beating until [`begin`](Self::begin).
    pub fn idle(heartbeat: Heartbeat) -> HeartbeatSender {
        HeartbeatSender {
            heartbeat,
            ticks: None,
            heard: Instant::now(),
        }
    }

    /// Starts beating (unless the heartbeats are off); the first one is due at once.
    pub fn begin(&mut self) {
        if self.heartbeat.interval.is_zero() {
            return;
        }
        let mut ticks = tokio::time::interval(self.heartbeat.interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        self.ticks = Some(ticks);
    }

    /// A frame came from the peer.
    pub fn heard(&mut self) {
        self.heard = Instant::now();
    }

    /// Resolves when the next heartbeat is due; never while not beating. Cancel-safe.
    pub async fn due(&mut self) {
        match &mut self.ticks {
            Some(ticks) => {
                ticks.tick().await;
            }
            None => std::future::pending().await,
        }
    }

    /// The heartbeat that is due: the peer is lost if it has been silent for longer than the
    /// heartbeats allow, else a `ping` is sent (within `timeout`).
    pub async fn beat<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        conn: &mut FramedConn<S>,
        session: &mut Session,
        timeout: Duration,
    ) -> Result<(), Lost> {
        let silent = self.heard.elapsed();
        if self.heartbeat.silence_limit().is_some_and(|l| silent > l) {
            return Err(Lost::Silent(Silence {
                silent,
                heartbeat: self.heartbeat,
            }));
        }
        let ping = session.seal(&Request::Ping {});
        send_frame(conn, ping, timeout).await.map_err(Lost::Send)
    }
}

/// Effectively never (a deadline that is not meant to pass).
const FAR: Duration = Duration::from_secs(86_400 * 365);

/// The receiving side (the agent): when the client was last heard of, and whether it sends
/// heartbeats (a `ping` came). Only then does its silence for more than the limit (the agent's
/// `--heartbeat-timeout`) mean that it is gone.
#[derive(Debug)]
pub(crate) struct SilenceWatch {
    limit: Option<Duration>,
    last: Instant,
    beating: bool,
}

impl SilenceWatch {
    /// `limit`: the silence allowed to a client that sends heartbeats; `None`: any.
    pub fn new(limit: Option<Duration>) -> SilenceWatch {
        SilenceWatch {
            limit,
            last: Instant::now(),
            beating: false,
        }
    }

    /// A frame came from the client.
    pub fn heard(&mut self) {
        self.last = Instant::now();
    }

    /// The client sent a `ping`: from now on its silence counts. True for the first.
    pub fn ping(&mut self) -> bool {
        !std::mem::replace(&mut self.beating, true)
    }

    /// Whether the client's silence counts (it sends heartbeats, and the agent has a limit).
    pub fn watched(&self) -> bool {
        self.beating && self.limit.is_some()
    }

    /// When the client's silence exceeds the limit (far away without one).
    pub fn deadline(&self) -> Instant {
        self.last + self.limit.unwrap_or(FAR)
    }

    /// Why the connection ends at the deadline; `who` is "the launcher", "the client".
    pub fn reason(&self, who: &str) -> String {
        format!(
            "{who} was silent for {:.1} s (heartbeats stopped; --heartbeat-timeout): its pod is cut off or gone",
            self.last.elapsed().as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_silence_limit_is_the_misses_in_intervals() {
        assert_eq!(
            Heartbeat::default().silence_limit(),
            Some(Duration::from_secs(8))
        );
        assert_eq!(Heartbeat::OFF.silence_limit(), None);
        let zero_misses = Heartbeat {
            interval: Duration::from_secs(3),
            misses: 0,
        };
        assert_eq!(zero_misses.silence_limit(), Some(Duration::from_secs(3)));
    }

    #[test]
    fn heartbeats_come_from_the_environment_else_the_defaults() {
        let env = |k: &str| match k {
            "PRTE_MCA_plm_k8s_heartbeat_interval" => Some("5".to_string()),
            _ => None,
        };
        let hb = Heartbeat::from_env(&env).unwrap();
        assert_eq!(hb.interval, Duration::from_secs(5));
        assert_eq!(hb.misses, Heartbeat::default().misses);
        let bad = |k: &str| (k == "PRTE_MCA_plm_k8s_heartbeat_misses").then(|| "0".to_string());
        let e = Heartbeat::from_env(&bad).unwrap_err().to_string();
        assert!(e.contains("PRTE_MCA_plm_k8s_heartbeat_misses"), "{e}");
    }

    /// A client and an agent end of one connection, the channel set up.
    fn pair() -> (
        FramedConn<tokio::io::DuplexStream>,
        Session,
        FramedConn<tokio::io::DuplexStream>,
        Session,
    ) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (client, agent) = super::super::local_pair(Some(b"liveness test key"));
        (
            super::super::framed(a, 1 << 20),
            client,
            super::super::framed(b, 1 << 20),
            agent,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_sender_pings_at_once_then_every_interval_and_a_silent_peer_is_lost() {
        let (mut conn, mut session, mut peer, mut peer_session) = pair();
        let hb = Heartbeat {
            interval: Duration::from_secs(2),
            misses: 3,
        };
        let mut sender = HeartbeatSender::start(hb);
        let t0 = Instant::now();
        for n in 0..4 {
            sender.due().await;
            assert_eq!(t0.elapsed(), Duration::from_secs(2 * n));
            sender
                .beat(&mut conn, &mut session, hb.interval)
                .await
                .unwrap();
            let f = super::super::recv_frame(&mut peer, None).await.unwrap();
            let body = peer_session.open(&f).unwrap();
            let req: Request = super::super::decode_message(body.as_bytes()).unwrap();
            assert_eq!(req, Request::Ping {});
        }
        // Silent for 8 s by the next beat: more than 3 intervals.
        sender.due().await;
        match sender.beat(&mut conn, &mut session, hb.interval).await {
            Err(e @ Lost::Silent(s)) => {
                assert_eq!(s.silent, Duration::from_secs(8));
                assert_eq!(
                    e.to_string(),
                    "silent for 8.0 s (3 heartbeats 2 s apart unanswered)"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        // A frame heard keeps it alive.
        sender.heard();
        sender.due().await;
        sender
            .beat(&mut conn, &mut session, hb.interval)
            .await
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_or_switched_off_sender_never_beats() {
        let mut idle = HeartbeatSender::idle(Heartbeat::default());
        let waited = tokio::time::timeout(Duration::from_secs(3600), idle.due()).await;
        assert!(waited.is_err(), "an idle sender beat");
        idle.begin();
        tokio::time::timeout(Duration::from_millis(1), idle.due())
            .await
            .expect("the first beat is due at once");
        let mut off = HeartbeatSender::start(Heartbeat::OFF);
        let waited = tokio::time::timeout(Duration::from_secs(3600), off.due()).await;
        assert!(waited.is_err(), "a sender without heartbeats beat");
    }

    #[tokio::test(start_paused = true)]
    async fn silence_counts_only_after_a_ping_and_with_a_limit() {
        let mut w = SilenceWatch::new(Some(Duration::from_secs(10)));
        assert!(!w.watched(), "no ping yet");
        tokio::time::advance(Duration::from_secs(4)).await;
        w.heard();
        assert!(w.ping(), "the first ping");
        assert!(!w.ping(), "not the first");
        assert!(w.watched());
        assert_eq!(w.deadline(), Instant::now() + Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(12)).await;
        assert_eq!(
            w.reason("the launcher"),
            "the launcher was silent for 12.0 s (heartbeats stopped; --heartbeat-timeout): its pod is cut off or gone"
        );
        let mut unlimited = SilenceWatch::new(None);
        unlimited.ping();
        assert!(!unlimited.watched());
    }
}
