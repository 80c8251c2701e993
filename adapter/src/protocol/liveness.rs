//! Liveness of a connection whose peer may be cut off without the connection ending (its pod's
//! packets dropped, its process stopped): a client that holds a connection open while work runs
//! (the launcher, `prrte-k8s-rsh`, the batch launcher) sends heartbeats with a
//! `HeartbeatSender`; the agent notices through a `SilenceWatch` when they stop.
//!
//! The client sends a `ping` every [`Heartbeat::interval`] and takes a peer silent (no frame at
//! all) for more than [`Heartbeat::misses`] intervals for lost. The agent answers each `ping`
//! with `pong`; once a `ping` came on a connection its client sends heartbeats, so its silence
//! for the agent's `--heartbeat-timeout` means that it is gone.
//!
//! Silence is counted by a `SilenceClock`: the time since the peer was last heard of, less the
//! time the watcher itself was held up (how late it woke for each of its wake-ups). A host so
//! loaded that the watcher could not run is one on which the peer (on the same node) or the
//! watcher's reading of the peer's frames was held up too: a starved peer is not a gone one.
//! A peer silent while the watcher ran on time is.

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
    clock: SilenceClock,
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
            clock: SilenceClock::new(),
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
        self.clock.heard();
    }

    /// Resolves when the next heartbeat is due; never while not beating. Cancel-safe. How late
    /// it resolves (this side held up) does not count as the peer's silence.
    pub async fn due(&mut self) {
        match &mut self.ticks {
            Some(ticks) => {
                let due = ticks.tick().await;
                self.clock.woke(due);
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
        let silent = self.clock.silent();
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

/// How long a peer has been silent as far as the watcher can tell: the time since it was last
/// heard of, less the time the watcher was held up since then (how late it woke for a wake-up it
/// had set). A watcher that could not run (its host starved of CPU, its process stopped) saw
/// nothing of the peer in that time, so that time is not the peer's silence.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SilenceClock {
    heard: Instant,
    /// How late the watcher woke, summed, since the peer was last heard of.
    held_up: Duration,
}

impl SilenceClock {
    /// The peer heard of now.
    pub fn new() -> SilenceClock {
        SilenceClock {
            heard: Instant::now(),
            held_up: Duration::ZERO,
        }
    }

    /// A frame came from the peer.
    pub fn heard(&mut self) {
        *self = SilenceClock::new();
    }

    /// The watcher woke for a wake-up due at `due`: how late it is (since the peer was last
    /// heard of) was the watcher's own delay.
    pub fn woke(&mut self, due: Instant) {
        let late = Instant::now().saturating_duration_since(due.max(self.heard));
        self.held_up += late;
    }

    /// The silence that counts: since the peer was heard of, less the watcher's own delays.
    pub fn silent(&self) -> Duration {
        self.heard.elapsed().saturating_sub(self.held_up)
    }

    /// The time since the peer was heard of, delays included.
    pub fn since_heard(&self) -> Duration {
        self.heard.elapsed()
    }

    /// When the silence that counts reaches `limit` if the watcher runs on time until then.
    pub fn reaches(&self, limit: Duration) -> Instant {
        self.heard + self.held_up + limit
    }
}

/// Effectively never (a deadline that is not meant to pass).
const FAR: Duration = Duration::from_secs(86_400 * 365);

/// How often at most a [`SilenceWatch`] wakes to measure its own delays while it waits.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The receiving side (the agent): when the client was last heard of, and whether it sends
/// heartbeats (a `ping` came). Only then does its silence for more than the limit (the agent's
/// `--heartbeat-timeout`) mean that it is gone. The silence is a [`SilenceClock`]'s: the
/// watch wakes every [`CHECK_EVERY`] (a quarter of the limit if shorter) to see whether it was
/// itself held up.
#[derive(Debug)]
pub(crate) struct SilenceWatch {
    limit: Option<Duration>,
    clock: SilenceClock,
    beating: bool,
}

impl SilenceWatch {
    /// `limit`: the silence allowed to a client that sends heartbeats; `None`: any.
    pub fn new(limit: Option<Duration>) -> SilenceWatch {
        SilenceWatch {
            limit,
            clock: SilenceClock::new(),
            beating: false,
        }
    }

    /// A frame came from the client.
    pub fn heard(&mut self) {
        self.clock.heard();
    }

    /// The client sent a `ping`: from now on its silence counts. True for the first.
    pub fn ping(&mut self) -> bool {
        !std::mem::replace(&mut self.beating, true)
    }

    /// Whether the client's silence counts (it sends heartbeats, and the agent has a limit).
    pub fn watched(&self) -> bool {
        self.beating && self.limit.is_some()
    }

    /// When to wake next: when the client's silence reaches the limit if this side runs on time,
    /// or sooner to measure this side's delays (far away without a limit). Then call
    /// [`woke`](Self::woke) with it.
    pub fn deadline(&self) -> Instant {
        match self.limit {
            Some(limit) => {
                let check = CHECK_EVERY.min(limit / 4).max(Duration::from_millis(10));
                self.clock.reaches(limit).min(Instant::now() + check)
            }
            None => Instant::now() + FAR,
        }
    }

    /// Woke for the wake-up [`deadline`](Self::deadline) gave (`due`): whether the client has now
    /// been silent for the limit, this side's own delays not counted.
    pub fn woke(&mut self, due: Instant) -> bool {
        self.clock.woke(due);
        self.limit.is_some_and(|l| self.clock.silent() >= l)
    }

    /// Why the connection ends at the deadline; `who` is "the launcher", "the client".
    pub fn reason(&self, who: &str) -> String {
        let (silent, since) = (self.clock.silent(), self.clock.since_heard());
        let held_up = if since > silent + Duration::from_millis(50) {
            format!(
                "; {:.1} s since a frame, of which this agent was held up {:.1} s",
                since.as_secs_f64(),
                (since - silent).as_secs_f64()
            )
        } else {
            String::new()
        };
        format!(
            "{who} was silent for {:.1} s{held_up} (heartbeats stopped; --heartbeat-timeout): its pod is cut off or gone",
            silent.as_secs_f64()
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
        // It wakes within a second to measure its own delays.
        assert_eq!(w.deadline(), Instant::now() + Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(12)).await;
        assert_eq!(
            w.reason("the launcher"),
            "the launcher was silent for 12.0 s (heartbeats stopped; --heartbeat-timeout): its pod is cut off or gone"
        );
        let mut unlimited = SilenceWatch::new(None);
        unlimited.ping();
        assert!(!unlimited.watched());
        let due = unlimited.deadline();
        assert!(due > Instant::now() + Duration::from_secs(86_400));
    }

    /// Runs a watch on time (each wake-up when due) until it takes the client for gone;
    /// returns how many wake-ups that took.
    async fn watch_on_time(w: &mut SilenceWatch) -> u32 {
        let mut wakes = 0;
        loop {
            let due = w.deadline();
            tokio::time::sleep_until(due).await;
            wakes += 1;
            if w.woke(due) {
                return wakes;
            }
            assert!(wakes < 1000, "never taken for gone");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_silent_while_the_watch_ran_on_time_is_gone_at_the_limit() {
        let mut w = SilenceWatch::new(Some(Duration::from_secs(10)));
        w.ping();
        let t0 = Instant::now();
        let wakes = watch_on_time(&mut w).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(10));
        assert_eq!(wakes, 10, "a wake-up a second");
        assert_eq!(
            w.reason("the launcher"),
            "the launcher was silent for 10.0 s (heartbeats stopped; --heartbeat-timeout): its pod is cut off or gone"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_held_up_for_longer_than_the_limit_does_not_count_that_time() {
        let mut w = SilenceWatch::new(Some(Duration::from_secs(10)));
        w.ping();
        let t0 = Instant::now();
        // The agent is not scheduled for 30 s (a starved host, a stopped process): its wake-up
        // due after 1 s comes 29 s late.
        let due = w.deadline();
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(
            !w.woke(due),
            "its own delay counted as the client's silence"
        );
        // A frame then resets everything.
        w.heard();
        let t1 = Instant::now();
        watch_on_time(&mut w).await;
        assert_eq!(t1.elapsed(), Duration::from_secs(10));
        // Held up again half-way: only the time it ran on time counts.
        w.heard();
        let t2 = Instant::now();
        for _ in 0..5 {
            let due = w.deadline();
            tokio::time::sleep_until(due).await;
            assert!(!w.woke(due));
        }
        let due = w.deadline();
        tokio::time::advance(Duration::from_secs(20)).await;
        // 5 s on time, the next wake-up (due at 6 s) 19 s late.
        assert!(!w.woke(due), "5 s on time, then held up");
        watch_on_time(&mut w).await;
        assert_eq!(t2.elapsed(), Duration::from_secs(29));
        assert_eq!(
            w.reason("the launcher"),
            "the launcher was silent for 10.0 s; 29.0 s since a frame, of which this agent was held up 19.0 s (heartbeats stopped; --heartbeat-timeout): its pod is cut off or gone"
        );
        assert_eq!(t0.elapsed(), Duration::from_secs(69));
    }

    #[tokio::test(start_paused = true)]
    async fn a_sender_held_up_for_longer_than_the_silence_limit_keeps_its_peer() {
        let (mut conn, mut session, mut peer, _peer_session) = pair();
        let hb = Heartbeat {
            interval: Duration::from_secs(2),
            misses: 4,
        };
        let mut sender = HeartbeatSender::start(hb);
        let t0 = Instant::now();
        sender.due().await;
        sender
            .beat(&mut conn, &mut session, hb.interval)
            .await
            .unwrap();
        // The launcher's thread is not scheduled for 20 s (more than the 8 s allowed): its next
        // heartbeat, due after 2 s, comes 18 s late. The peer is not lost for that.
        tokio::time::advance(Duration::from_secs(20)).await;
        sender.due().await;
        assert_eq!(t0.elapsed(), Duration::from_secs(20));
        sender
            .beat(&mut conn, &mut session, hb.interval)
            .await
            .expect("the sender's own delay counted as the peer's silence");
        // From then on time: lost once silent for more than 8 s it could watch (2 + 4 * 2 s).
        let lost = loop {
            sender.due().await;
            if let Err(e) = sender.beat(&mut conn, &mut session, hb.interval).await {
                break e;
            }
            let _ = super::super::recv_frame(&mut peer, None).await.unwrap();
        };
        match lost {
            Lost::Silent(s) => assert_eq!(s.silent, Duration::from_secs(10)),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(t0.elapsed(), Duration::from_secs(28));
    }
}
