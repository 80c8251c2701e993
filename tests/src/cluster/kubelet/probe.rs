//! Supervising a running pod: its exit, control messages, and the readiness probe.

use super::pod::{Outcome, PodCtx};
use super::status::set_cond;
use super::{lock, Ctl, EXIT_POLL};
use crate::api::defaults::now_rfc3339;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

pub(super) struct Probe {
    action: ProbeAction,
    initial_delay: Duration,
    period: Duration,
    timeout: Duration,
    success_threshold: u32,
    failure_threshold: u32,
}

pub(super) enum ProbeAction {
    Tcp(u16),
    Http(u16, String),
    Exec(Vec<String>),
}

impl PodCtx {
    /// Waits for the container to end, a control message, and runs the readiness probe.
    pub(super) fn supervise(
        &self,
        rx: &Receiver<Ctl>,
        probe: Option<&Probe>,
        ip: Ipv4Addr,
    ) -> Outcome {
        let started = Instant::now();
        let mut next_probe = probe.map(|p| started + p.initial_delay);
        let mut ready = probe.is_none();
        let (mut ok_run, mut fail_run) = (0u32, 0u32);
        loop {
            let wait = match next_probe {
                Some(t) => t.saturating_duration_since(Instant::now()).min(EXIT_POLL),
                None => EXIT_POLL,
            };
            match rx.recv_timeout(wait) {
                Ok(Ctl::Delete) | Ok(Ctl::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                    return Outcome::Stop
                }
                Ok(Ctl::Evict(m, done)) => return Outcome::Evicted(m, done),
                Err(RecvTimeoutError::Timeout) => {}
            }
            let exited = lock(&self.running)
                .as_mut()
                .and_then(|rp| rp.try_wait().ok().flatten());
            if let Some(e) = exited {
                return Outcome::Exited(e);
            }
            if let (Some(p), Some(t)) = (probe, next_probe) {
                if Instant::now() >= t {
                    let pass = self.probe_once(p, ip);
                    if pass {
                        ok_run += 1;
                        fail_run = 0;
                    } else {
                        fail_run += 1;
                        ok_run = 0;
                    }
                    let flip = if !ready && pass && ok_run >= p.success_threshold {
                        Some(true)
                    } else if ready && !pass && fail_run >= p.failure_threshold {
                        Some(false)
                    } else {
                        None
                    };
                    if let Some(r) = flip {
                        ready = r;
                        self.status(|st| {
                            let now = now_rfc3339();
                            set_cond(st, "Ready", r, &now);
                            set_cond(st, "ContainersReady", r, &now);
                            if let Some(c) = st.pointer_mut("/containerStatuses/0") {
                                c["ready"] = json!(r);
                            }
                        });
                    }
                    next_probe = Some(Instant::now() + p.period);
                }
            }
        }
    }

    pub(super) fn probe_once(&self, p: &Probe, ip: Ipv4Addr) -> bool {
        match &p.action {
            ProbeAction::Tcp(port) => {
                TcpStream::connect_timeout(&SocketAddr::from((ip, *port)), p.timeout).is_ok()
            }
            ProbeAction::Http(port, path) => http_probe(ip, *port, path, p.timeout),
            ProbeAction::Exec(cmd) => {
                let cmd = {
                    let r = lock(&self.running);
                    match r.as_ref() {
                        Some(rp) => rp.exec(cmd, &[]),
                        None => return false,
                    }
                };
                run_with_timeout(cmd, p.timeout)
            }
        }
    }
}

pub(super) fn parse_probe(p: &Value, c: &Value) -> Option<Probe> {
    let port_of = |v: &Value| -> Option<u16> {
        match v {
            Value::Number(n) => n.as_u64().map(|n| n as u16),
            Value::String(name) => c["ports"]
                .as_array()?
                .iter()
                .find(|pt| pt["name"] == *name)
                .and_then(|pt| pt["containerPort"].as_u64())
                .map(|n| n as u16)
                .or_else(|| name.parse().ok()),
            _ => None,
        }
    };
    let action = if let Some(t) = p.get("tcpSocket") {
        ProbeAction::Tcp(port_of(&t["port"])?)
    } else if let Some(h) = p.get("httpGet") {
        ProbeAction::Http(
            port_of(&h["port"])?,
            h["path"].as_str().unwrap_or("/").to_string(),
        )
    } else if let Some(e) = p.get("exec") {
        ProbeAction::Exec(
            e["command"]
                .as_array()?
                .iter()
                .map(|x| x.as_str().unwrap_or("").to_string())
                .collect(),
        )
    } else {
        return None;
    };
    let secs = |k: &str, d: u64, max: u64| Duration::from_secs(p[k].as_u64().unwrap_or(d).min(max));
    Some(Probe {
        action,
        // Bounded so that a probe config meant for a big cluster cannot stall tests.
        initial_delay: secs("initialDelaySeconds", 0, 60),
        period: secs("periodSeconds", 10, 10).max(Duration::from_millis(200)),
        timeout: secs("timeoutSeconds", 1, 10).max(Duration::from_millis(200)),
        success_threshold: p["successThreshold"].as_u64().unwrap_or(1).max(1) as u32,
        failure_threshold: p["failureThreshold"].as_u64().unwrap_or(3).max(1) as u32,
    })
}

fn http_probe(ip: Ipv4Addr, port: u16, path: &str, timeout: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&SocketAddr::from((ip, port)), timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    if write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {ip}:{port}\r\nUser-Agent: kube-probe/1.33\r\n\r\n"
    )
    .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    while got.len() < 12 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&got);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .is_some_and(|c| (200..400).contains(&c))
}

fn run_with_timeout(mut cmd: std::process::Command, timeout: Duration) -> bool {
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let Ok(mut child) = cmd.spawn() else {
        return false;
    };
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return st.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}
