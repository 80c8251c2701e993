//! Readiness and startup probes: TCP, HTTP and exec checks with the kubelet's thresholds.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// A container's readiness or startup probe.
pub(super) struct Probe {
    action: ProbeAction,
    pub(super) initial_delay: Duration,
    pub(super) period: Duration,
    timeout: Duration,
    success_threshold: u32,
    pub(super) failure_threshold: u32,
}

enum ProbeAction {
    Tcp(u16),
    Http(u16, String),
    Exec(Vec<String>),
}

impl Probe {
    /// Runs the check once against the pod at `ip`; `exec` makes the command of an exec probe
    /// in the container (None: the container is not running, the check fails).
    pub(super) fn check(
        &self,
        ip: Ipv4Addr,
        exec: impl FnOnce(&[String]) -> Option<Command>,
    ) -> bool {
        match &self.action {
            ProbeAction::Tcp(port) => {
                TcpStream::connect_timeout(&SocketAddr::from((ip, *port)), self.timeout).is_ok()
            }
            ProbeAction::Http(port, path) => http_probe(ip, *port, path, self.timeout),
            ProbeAction::Exec(cmd) => match exec(cmd) {
                Some(cmd) => run_with_timeout(cmd, self.timeout),
                None => false,
            },
        }
    }
}

/// Whether a container is ready, from its probe's results and thresholds.
pub(super) struct Readiness {
    pub(super) ready: bool,
    ok_run: u32,
    fail_run: u32,
}

impl Readiness {
    /// Ready from the start when there is no probe.
    pub(super) fn new(probe: Option<&Probe>) -> Self {
        Readiness {
            ready: probe.is_none(),
            ok_run: 0,
            fail_run: 0,
        }
    }

    /// Counts one result; the new readiness when it flips.
    pub(super) fn record(&mut self, p: &Probe, pass: bool) -> Option<bool> {
        if pass {
            self.ok_run += 1;
            self.fail_run = 0;
        } else {
            self.fail_run += 1;
            self.ok_run = 0;
        }
        let flip = if !self.ready && pass && self.ok_run >= p.success_threshold {
            Some(true)
        } else if self.ready && !pass && self.fail_run >= p.failure_threshold {
            Some(false)
        } else {
            None
        };
        if let Some(r) = flip {
            self.ready = r;
        }
        flip
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

fn run_with_timeout(mut cmd: Command, timeout: Duration) -> bool {
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
