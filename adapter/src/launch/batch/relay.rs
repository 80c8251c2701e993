//! The command's stdout and stderr passed through to the pod's log, read on the way for the
//! job map and the first failing rank ([`super::report`]), each on a thread of its own: a
//! burst of output is copied as fast as the log takes it, and mpirun never waits on the agent's
//! runtime.

use std::io::{Read, Write};
use std::process::{ChildStderr, ChildStdout};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing::warn;

use super::report::{FailureScan, MapFilter, RankFailure};

/// How long the relay may take to end once the command has (a process that kept the pipes
/// open is stopped with the command's group; this bounds the rest).
const END_LIMIT: Duration = Duration::from_secs(5);

const BUF: usize = 64 << 10;

/// The two relays.
pub(super) struct Relay {
    threads: Vec<JoinHandle<()>>,
    map: Arc<Mutex<MapFilter>>,
    scan: Arc<Mutex<FailureScan>>,
}

/// What the relays read: the first failing rank and the node the map put it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seen {
    pub failure: RankFailure,
    /// The map's node of the failed rank, when PRRTE's message named none.
    pub mapped: Option<String>,
}

impl Relay {
    /// Starts relaying `out` and `err`; with `strip_map`, the job map's block (the launcher's
    /// own `--display map`) is kept out of the log.
    pub(super) fn start(out: ChildStdout, err: ChildStderr, strip_map: bool) -> Relay {
        let map = Arc::new(Mutex::new(MapFilter::default()));
        let scan = Arc::new(Mutex::new(FailureScan::default()));
        let mut threads = Vec::new();
        let m = map.clone();
        let spawned = std::thread::Builder::new()
            .name("prrte-k8s-stdout".into())
            .spawn(move || relay_stdout(out, &m, strip_map));
        threads.extend(log_spawn(spawned));
        let s = scan.clone();
        let spawned = std::thread::Builder::new()
            .name("prrte-k8s-stderr".into())
            .spawn(move || relay_stderr(err, &s));
        threads.extend(log_spawn(spawned));
        Relay { threads, map, scan }
    }

    /// Waits (bounded) for both relays to reach the end of their streams; what they saw.
    pub(super) async fn finish(self) -> Option<Seen> {
        let threads = self.threads;
        let join = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        });
        if tokio::time::timeout(END_LIMIT, join).await.is_err() {
            warn!("batch launcher: the command's output did not end within {END_LIMIT:?} of the command (a process still holds it)");
        }
        let failure = self
            .scan
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .found()
            .cloned()?;
        let mapped = self
            .map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .node_of(failure.rank)
            .map(str::to_owned);
        Some(Seen { failure, mapped })
    }
}

fn log_spawn(r: std::io::Result<JoinHandle<()>>) -> Option<JoinHandle<()>> {
    r.map_err(|e| warn!(error = %e, "batch launcher: cannot start a thread relaying the command's output"))
        .ok()
}

fn relay_stdout(mut out: ChildStdout, map: &Mutex<MapFilter>, strip: bool) {
    let mut buf = vec![0u8; BUF];
    let mut log = std::io::stdout();
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let filtered = map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(&buf[..n]);
        let bytes = if strip { &filtered[..] } else { &buf[..n] };
        let _ = log.write_all(bytes).and_then(|()| log.flush());
    }
    let rest = map.lock().unwrap_or_else(|p| p.into_inner()).finish();
    if strip {
        let _ = log.write_all(&rest).and_then(|()| log.flush());
    }
}

fn relay_stderr(mut err: ChildStderr, scan: &Mutex<FailureScan>) {
    let mut buf = vec![0u8; BUF];
    let mut log = std::io::stderr();
    let mut line: Vec<u8> = Vec::new();
    loop {
        let n = match err.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let _ = log.write_all(&buf[..n]).and_then(|()| log.flush());
        for &b in &buf[..n] {
            if b == b'\n' {
                scan.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .line(&String::from_utf8_lossy(&line));
                line.clear();
            } else if line.len() < 4096 {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        scan.lock()
            .unwrap_or_else(|p| p.into_inner())
            .line(&String::from_utf8_lossy(&line));
    }
}
