//! Shared helpers for the agent tests: a temp dir with a fake prted and a secret, the real
//! agent binary as a guarded child process, a raw protocol client, and /proc checks.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use prrte_k8s::protocol::{
    self, client_handshake, decode_message, recv_frame, send_frame, FramedConn, HandshakeError,
    ProtocolError, Reply, Request, Session,
};
use tokio::net::TcpStream;

pub const AGENT: &str = env!("CARGO_BIN_EXE_prrte-k8s-agent");
pub const WAIT: Duration = Duration::from_secs(20);

/// The fake prted. Records its pid, argv (NUL-separated) and environment (`env -0`) in its
/// directory, then behaves according to its mode, given the way a launcher gives it a
/// namespace (`--prtemca ess_base_nspace MODE`, see [`mode_args`]; the agents admit only what
/// launchers send): `exit-N` exits with N; `sleep` (the default) starts `sleep 1000` in the
/// background and waits; `stubborn` does the same with SIGTERM ignored; `escape` starts a
/// `sleep` that moves to its own process group and waits; `orphan` also leaves a `sleep`
/// orphaned (its parent, a subshell, exits at once), so that it is reparented to the agent or
/// init. Every file is written whole before it appears (written aside, then renamed). Like
/// PRRTE's prted, `--set-sid` makes it the leader of a new session and process group without
/// a fork (util-linux `setsid` execs in place when its caller leads no process group; were the
/// fake a group leader already, `setsid` would fork and the recorded pid would not be the one
/// the agent started).
const FAKE_PRTED: &str = r#"#!/bin/sh
case " $* " in
  *" --set-sid "*) if [ -z "$FAKE_PRTED_SID" ]; then export FAKE_PRTED_SID=1; exec setsid "$0" "$@"; fi ;;
esac
unset FAKE_PRTED_SID
d='@DIR@'
echo $$ >> "$d/launches"
for a in "$@"; do printf '%s\0' "$a"; done > "$d/argv.tmp"; mv "$d/argv.tmp" "$d/argv"
env -0 > "$d/env.tmp"; mv "$d/env.tmp" "$d/env"
mode=sleep; prev=
for a in "$@"; do [ "$prev" = ess_base_nspace ] && mode=$a; prev=$a; done
case "$mode" in
  exit-*) exit "${mode#exit-}" ;;
  stubborn) trap '' TERM ;;
esac
case "$mode" in
  orphan) ( sleep 1000 & echo $! > "$d/orphan.tmp"; mv "$d/orphan.tmp" "$d/orphan.pid" ) ;;
esac
case "$mode" in
  escape) perl -e 'setpgrp(0, 0); exec "sleep", "1000"' & ;;
  *) sleep 1000 & ;;
esac
echo $! > "$d/child.tmp"; mv "$d/child.tmp" "$d/child.pid"
echo $$ > "$d/prted.tmp"; mv "$d/prted.tmp" "$d/prted.pid"
wait
"#;

/// The arguments that put the fake prted in `mode` (a word, `exit-N` for an exit code).
pub fn mode_args(mode: &str) -> Vec<String> {
    ["--prtemca", "ess_base_nspace", mode]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Arguments written the short way (`--sleep`, `--exit 3`, `--stubborn`, a bare mode word as
/// the first argument) as the launcher would send them: the mode as [`mode_args`], the rest as
/// they are.
pub fn launch_args(args: &[&str]) -> Vec<String> {
    const MODES: &[&str] = &["sleep", "stubborn", "escape", "orphan", "wait", "exit"];
    let word = |a: &str| {
        let m = a.strip_prefix("--").unwrap_or(a);
        MODES.contains(&m).then(|| m.to_string())
    };
    let (mode, rest) = match args {
        ["--exit", code, rest @ ..] => (format!("exit-{code}"), rest),
        [first, rest @ ..] if word(first).is_some() => (word(first).unwrap(), rest),
        rest => return rest.iter().map(|s| s.to_string()).collect(),
    };
    let mut out = mode_args(&mode);
    out.extend(rest.iter().map(|s| s.to_string()));
    out
}

/// A per-test directory with a fake prted and a secret file; kills whatever the fake prted
/// recorded when dropped, so a failing test leaves nothing behind.
pub struct TestDir {
    pub dir: tempfile::TempDir,
    pub prted: PathBuf,
    pub secret_file: PathBuf,
    pub secret: Vec<u8>,
}

impl TestDir {
    pub fn new() -> TestDir {
        let dir = tempfile::Builder::new()
            .prefix("prrte-k8s-agent-test")
            .tempdir()
            .unwrap();
        let prted = dir.path().join("prted");
        std::fs::write(
            &prted,
            FAKE_PRTED.replace("@DIR@", dir.path().to_str().unwrap()),
        )
        .unwrap();
        std::fs::set_permissions(&prted, std::fs::Permissions::from_mode(0o755)).unwrap();
        let secret = format!("secret-{}", hex::encode(protocol::new_nonce())).into_bytes();
        let secret_file = dir.path().join("key");
        std::fs::write(&secret_file, &secret).unwrap();
        TestDir {
            dir,
            prted,
            secret_file,
            secret,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// How many times the fake prted has started.
    pub fn launches(&self) -> usize {
        std::fs::read_to_string(self.path("launches"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// The number of starts once at least `n` are recorded (bounded by [`WAIT`]): a launch is
    /// answered `started` before the fake prted has run its first line.
    pub fn wait_launches(&self, n: usize) -> usize {
        wait_for(WAIT, || (self.launches() >= n).then_some(()))
            .unwrap_or_else(|| panic!("{n} launches never recorded ({} so far)", self.launches()));
        self.launches()
    }

    /// Waits for the fake prted to record `name` (a pid file) and returns the pid. A file
    /// read while its writer is still at it (created, not yet written) counts only once it
    /// holds a whole line with a pid.
    pub fn wait_pid(&self, name: &str) -> i32 {
        let path = self.path(name);
        wait_for(WAIT, || read_pid_line(&path)).unwrap_or_else(|| {
            panic!(
                "{} never held a pid: {:?}",
                path.display(),
                std::fs::read_to_string(&path)
            )
        })
    }

    /// The recorded argv of the last launch.
    pub fn argv(&self) -> Vec<String> {
        split_nul(&std::fs::read(self.path("argv")).unwrap())
    }

    /// The recorded environment of the last launch.
    pub fn env(&self) -> Vec<(String, String)> {
        split_nul(&std::fs::read(self.path("env")).unwrap())
            .into_iter()
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }
}

impl Drop for TestDir {
    /// Kills what the fake prted recorded, after checking that each pid really is that process
    /// (pids recorded inside another PID namespace must not hit unrelated processes here).
    fn drop(&mut self) {
        let read_pid = |name: &str| -> Option<i32> {
            std::fs::read_to_string(self.path(name))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let prted_path = self.prted.display().to_string();
        let child = read_pid("child.pid").filter(|p| cmdline(*p).starts_with("sleep 1000"));
        if let Some(prted) = read_pid("prted.pid") {
            let is_prted = cmdline(prted).contains(&prted_path);
            let child_in_group = child.and_then(stat).is_some_and(|s| s.pgrp == prted);
            if is_prted || child_in_group {
                let _ = killpg(Pid::from_raw(prted), Signal::SIGKILL);
            }
        }
        if let Some(child) = child {
            let _ = kill(Pid::from_raw(child), Signal::SIGKILL);
        }
    }
}

/// The pid in `path` once it holds a complete line (`None` before, or if it is no pid).
pub fn read_pid_line(path: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.strip_suffix('\n')?;
    line.trim().parse().ok()
}

/// A process's command line with NULs shown as spaces ("" if it does not exist).
pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim_end()
                .to_owned()
        })
        .unwrap_or_default()
}

/// State, parent and process group of a process, from /proc.
pub fn stat(pid: i32) -> Option<prrte_k8s::agent::proc_stat::ProcStat> {
    prrte_k8s::agent::proc_stat::read_stat(pid)
}

/// Children of `parent` (zombies included), from /proc.
pub fn children_of(parent: i32) -> Vec<prrte_k8s::agent::proc_stat::ProcStat> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .filter(|s| s.ppid == parent)
        .collect()
}

fn split_nul(bytes: &[u8]) -> Vec<String> {
    let mut parts: Vec<String> = bytes
        .split(|b| *b == 0)
        .map(|p| String::from_utf8(p.to_vec()).unwrap())
        .collect();
    // Each item ends with NUL, so the last split is empty.
    assert_eq!(parts.pop().as_deref(), Some(""));
    parts
}

/// Polls `f` until it returns `Some` or `within` passes.
pub fn wait_for<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `/proc/PID` exists (a zombie still counts: it has not been reaped).
pub fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits until none of `pids` exists; true if they all went away within `within`.
pub fn all_gone(pids: &[i32], within: Duration) -> bool {
    wait_for(within, || pids.iter().all(|p| !alive(*p)).then_some(())).is_some()
}

/// Lines the agent wrote, with a condition variable to wait on.
#[derive(Default)]
struct Lines {
    lines: Mutex<Vec<String>>,
    cv: Condvar,
}

/// The real agent binary as a child; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct AgentProc {
    child: Child,
    pub addr: SocketAddr,
    pub health: Option<SocketAddr>,
    /// The metrics endpoint, when `--metrics-listen` enabled it.
    pub metrics: Option<SocketAddr>,
    stderr: Arc<Lines>,
}

impl AgentProc {
    /// Starts the agent on 127.0.0.1 (ephemeral ports) with JSON logs and a 1 s kill grace;
    /// `extra` is appended to the command line.
    pub fn spawn(td: &TestDir, extra: &[&str]) -> AgentProc {
        Self::spawn_args(&Self::test_args(td, extra), &[]).expect("agent did not start listening")
    }

    /// The arguments [`spawn`](Self::spawn) uses.
    pub fn test_args(td: &TestDir, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--health-listen".into(),
            "127.0.0.1:0".into(),
            "--prted".into(),
            td.prted.display().to_string(),
            "--secret-file".into(),
            td.secret_file.display().to_string(),
            "--log-format".into(),
            "json".into(),
            "--kill-grace".into(),
            "1".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// Starts the agent with exactly `args` and extra environment; `Err` carries the exit
    /// status and logs if it ended before listening.
    pub fn spawn_args(args: &[String], env: &[(&str, &str)]) -> Result<AgentProc, (i32, String)> {
        Self::spawn_wrapped(&[], args, env)
    }

    /// Like [`spawn_args`](Self::spawn_args), with the agent started through `wrapper` (a
    /// command and its arguments, the agent's path and arguments appended).
    pub fn spawn_wrapped(
        wrapper: &[&str],
        args: &[String],
        env: &[(&str, &str)],
    ) -> Result<AgentProc, (i32, String)> {
        let mut cmd = match wrapper.split_first() {
            Some((program, wargs)) => {
                let mut c = Command::new(program);
                c.args(wargs).arg(AGENT);
                c
            }
            None => Command::new(AGENT),
        };
        cmd.args(args)
            .env_remove("POD_IP")
            .env("PRRTE_K8S_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in [
            "PRRTE_K8S_AGENT_LISTEN",
            "PRRTE_K8S_PRTED",
            "PRRTE_K8S_SECRET_FILE",
        ] {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = Arc::new(Lines::default());
        let sink = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                sink.lines.lock().unwrap().push(line);
                sink.cv.notify_all();
            }
            sink.lines.lock().unwrap().push(String::from("<eof>"));
            sink.cv.notify_all();
        });
        // prted's output shares the agent's stdout; keep draining it.
        let mut out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while matches!(out.read(&mut buf), Ok(n) if n > 0) {}
        });
        let mut agent = AgentProc {
            child,
            addr: "0.0.0.0:0".parse().unwrap(),
            health: None,
            metrics: None,
            stderr,
        };
        // JSON logs, or the text format's `... listening addr=A health=H ...`.
        let from_text = |line: &str| -> Option<serde_json::Value> {
            let rest = line.split_once(" listening ")?.1;
            let field = |k: &str| {
                rest.split_whitespace()
                    .find_map(|w| w.strip_prefix(k))
                    .map(|v| v.trim_matches('"').to_string())
            };
            Some(
                serde_json::json!({"message": "listening", "addr": field("addr=")?, "health": field("health="), "metrics": field("metrics=")}),
            )
        };
        let listening = agent
            .wait_log(WAIT, |v| {
                v["message"] == "listening"
                    || v.as_str().and_then(from_text).is_some()
                    || v == &serde_json::Value::String("<eof>".into())
            })
            .map(|v| v.as_str().and_then(from_text).unwrap_or(v));
        match listening {
            Some(v) if v["message"] == "listening" => {
                agent.addr = v["addr"].as_str().unwrap().parse().unwrap();
                agent.health = v["health"].as_str().and_then(|h| h.parse().ok());
                agent.metrics = v["metrics"].as_str().and_then(|m| m.parse().ok());
                Ok(agent)
            }
            _ => {
                let status = agent.wait_exit(WAIT).unwrap_or(-1);
                Err((status, agent.logs().join("\n")))
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// All stderr lines so far.
    pub fn logs(&self) -> Vec<String> {
        self.stderr.lines.lock().unwrap().clone()
    }

    /// Waits for a log line (parsed as JSON; non-JSON lines appear as JSON strings) matching `pred`.
    pub fn wait_log(
        &self,
        within: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> Option<serde_json::Value> {
        let deadline = Instant::now() + within;
        let mut lines = self.stderr.lines.lock().unwrap();
        let mut seen = 0;
        loop {
            for line in &lines[seen..] {
                let v = serde_json::from_str(line)
                    .unwrap_or_else(|_| serde_json::Value::String(line.clone()));
                if pred(&v) {
                    return Some(v);
                }
            }
            seen = lines.len();
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            lines = self
                .stderr
                .cv
                .wait_timeout(lines, deadline - now)
                .unwrap()
                .0;
        }
    }

    /// Sends a signal to the agent.
    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.pid()), sig).unwrap();
    }

    /// Waits (bounded) for the agent to exit; its exit code, or 128+signal.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                use std::os::unix::process::ExitStatusExt;
                return Some(
                    status
                        .code()
                        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
                );
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = kill(Pid::from_raw(self.pid()), Signal::SIGTERM);
            if self.wait_exit(Duration::from_secs(15)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// A protocol client that can also misbehave.
#[derive(Debug)]
pub struct RawClient {
    pub conn: FramedConn<TcpStream>,
    pub session: Session,
}

pub const STEP: Duration = Duration::from_secs(10);

impl RawClient {
    pub async fn connect(
        addr: SocketAddr,
        secret: Option<&[u8]>,
    ) -> Result<RawClient, HandshakeError> {
        let stream = TcpStream::connect(addr).await.map_err(ProtocolError::Io)?;
        let mut conn = protocol::framed(stream, protocol::DEFAULT_MAX_FRAME);
        let session = client_handshake(&mut conn, secret, STEP).await?;
        Ok(RawClient { conn, session })
    }

    /// Sends a frame body as is.
    pub async fn send_body(&mut self, body: Vec<u8>) {
        send_frame(&mut self.conn, body, STEP).await.unwrap();
    }

    /// Seals and sends a request.
    pub async fn send(&mut self, req: &Request) {
        let frame = self.session.seal(req);
        self.send_body(frame).await;
    }

    /// Seals and sends arbitrary body text; returns the frame body that was sent.
    pub async fn send_text(&mut self, text: &str) -> Vec<u8> {
        let frame = self.session.seal_text(text);
        self.send_body(frame.clone()).await;
        frame
    }

    /// Receives and opens one reply.
    pub async fn recv(&mut self, within: Duration) -> Result<Reply, ProtocolError> {
        let frame = recv_frame(&mut self.conn, Some(within)).await?;
        let body = self.session.open(&frame)?;
        decode_message::<Reply>(body.as_bytes())
    }

    /// Sends a request and returns the next reply.
    pub async fn request(&mut self, req: &Request) -> Reply {
        self.send(req).await;
        self.recv(STEP).await.unwrap()
    }

    /// Expects the agent to close the connection (EOF or reset) within `STEP`, skipping frames.
    pub async fn expect_closed(&mut self) {
        expect_closed(&mut self.conn).await
    }
}

pub async fn expect_closed(conn: &mut FramedConn<TcpStream>) {
    let deadline = Instant::now() + STEP;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match recv_frame(conn, Some(left)).await {
            Ok(_) => continue,
            Err(ProtocolError::Closed) | Err(ProtocolError::Io(_)) => return,
            Err(e) => panic!("connection not closed by the agent: {e}"),
        }
    }
}

/// A launch request for the fake prted, its arguments written the short way ([`launch_args`]).
pub fn launch(args: &[&str]) -> Request {
    Request::Launch {
        argv: launch_args(args),
        env: Default::default(),
        dvm_uri: None,
    }
}

/// An agent that publishes the DVM URI at `file`, sent one authenticated launch of the fake
/// prted (`--sleep`) carrying `dvm_uri`: the agent (stopped when dropped), the client's
/// connection and the reply.
pub async fn sleep_launch_with_dvm_uri(
    td: &TestDir,
    file: &Path,
    dvm_uri: &str,
) -> (AgentProc, RawClient, Reply) {
    let agent = AgentProc::spawn(td, &["--dvm-uri-file", file.to_str().unwrap()]);
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let reply = c
        .request(&Request::Launch {
            argv: mode_args("sleep"),
            env: Default::default(),
            dvm_uri: Some(dvm_uri.into()),
        })
        .await;
    (agent, c, reply)
}

/// A client that checks that the agent is alive and becomes idle (bounded by [`WAIT`]: the
/// agent frees its slot just after prted's processes are gone, so a status taken at that very
/// moment may still show the job).
pub async fn assert_idle(addr: SocketAddr, secret: &[u8]) {
    let mut c = RawClient::connect(addr, Some(secret)).await.unwrap();
    assert_eq!(c.request(&Request::Ping {}).await, Reply::Pong {});
    let deadline = Instant::now() + WAIT;
    loop {
        match c.request(&Request::Status {}).await {
            Reply::Status {
                running: false,
                pid: None,
                ..
            } => return,
            other if Instant::now() >= deadline => {
                panic!("agent not idle within {WAIT:?}: {other:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The agent's `GET /metrics` answer at `addr` (blocking; the body only).
pub fn scrape_metrics(addr: SocketAddr) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(STEP)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    out.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}
