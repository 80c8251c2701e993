//! The command's stdout and stderr passed through to the pod's log, read on the way for the
//! job map and the first failing rank ([`super::report`]), and, when mpirun tags its output
//! by rank, with the tags taken off and each rank's lines handed to the [`Router`] for its
//! pod; each on a thread of its own: a burst of output is copied as fast as the log takes it,
//! and mpirun never waits on the agent's runtime or the network.

use std::io::{Read, Write};
use std::process::{ChildStderr, ChildStdout};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing::warn;

use super::report::{FailureScan, MapFilter, RankFailure};
use super::route::{Chunk, Router};
use crate::agent::rank_output::{Piece, Untag};

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
    /// own `--display map`) is kept out of the log; with `router`, the output is tagged by
    /// rank (`--output tag`).
    pub(super) fn start(
        out: ChildStdout,
        err: ChildStderr,
        strip_map: bool,
        router: Option<Arc<Router>>,
    ) -> Relay {
        let map = Arc::new(Mutex::new(MapFilter::default()));
        let scan = Arc::new(Mutex::new(FailureScan::default()));
        let mut threads = Vec::new();
        let (m, r) = (map.clone(), router.clone());
        let spawned = std::thread::Builder::new()
            .name("prrte-k8s-stdout".into())
            .spawn(move || relay_stdout(out, &m, strip_map, r.as_deref()));
        threads.extend(log_spawn(spawned));
        let (s, m) = (scan.clone(), map.clone());
        let spawned = std::thread::Builder::new()
            .name("prrte-k8s-stderr".into())
            .spawn(move || relay_stderr(err, &s, &m, router.as_deref()));
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

/// Where the pieces of a tagged stream go: the pod's log (without their tags) and, for a
/// rank's, the router.
struct Tagged<'a> {
    untag: Untag,
    router: &'a Router,
    map: &'a Mutex<MapFilter>,
}

impl Tagged<'_> {
    /// Relays the pieces `data` completes (or, with None, the stream's unfinished end); each
    /// line's text goes to `line` too.
    fn relay(&mut self, data: Option<&[u8]>, log: &mut impl Write, line: &mut impl FnMut(&[u8])) {
        let pieces: Vec<Piece> = match data {
            Some(d) => self.untag.push(d),
            None => self.untag.finish().into_iter().collect(),
        };
        for p in pieces {
            let _ = log.write_all(&p.text);
            line(&p.text);
            if let Some((rank, stream)) = p.from {
                let chunk = Chunk {
                    rank,
                    stream,
                    data: p.text,
                };
                self.router.send(chunk, self.map);
            }
        }
        let _ = log.flush();
    }
}

/// Writes `bytes` of mpirun's stdout (the map taken out) to the log, untagged and routed
/// when `tagged`.
fn stdout_out(bytes: &[u8], tagged: &mut Option<Tagged<'_>>, log: &mut impl Write) {
    match tagged {
        Some(t) => {
            t.relay(Some(bytes), log, &mut |_| {});
            // The map may have become known: what waited for it goes now.
            t.router.flush_pending(t.map);
        }
        None => {
            let _ = log.write_all(bytes).and_then(|()| log.flush());
        }
    }
}

fn relay_stdout(
    mut out: ChildStdout,
    map: &Mutex<MapFilter>,
    strip: bool,
    router: Option<&Router>,
) {
    let mut buf = vec![0u8; BUF];
    let mut log = std::io::stdout();
    let mut tagged = router.map(|router| Tagged {
        untag: Untag::default(),
        router,
        map,
    });
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
        stdout_out(bytes, &mut tagged, &mut log);
    }
    let rest = map.lock().unwrap_or_else(|p| p.into_inner()).finish();
    if strip {
        stdout_out(&rest, &mut tagged, &mut log);
    }
    if let Some(t) = tagged.as_mut() {
        t.relay(None, &mut log, &mut |_| {});
        t.router.flush_pending(map);
    }
}

fn relay_stderr(
    mut err: ChildStderr,
    scan: &Mutex<FailureScan>,
    map: &Mutex<MapFilter>,
    router: Option<&Router>,
) {
    let mut buf = vec![0u8; BUF];
    let mut log = std::io::stderr();
    let mut line: Vec<u8> = Vec::new();
    let mut tagged = router.map(|router| Tagged {
        untag: Untag::default(),
        router,
        map,
    });
    let mut scan_line = |text: &[u8]| {
        let text = text.strip_suffix(b"\n").unwrap_or(text);
        let text = &text[..text.len().min(4096)];
        scan.lock()
            .unwrap_or_else(|p| p.into_inner())
            .line(&String::from_utf8_lossy(text));
    };
    loop {
        let n = match err.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(t) = tagged.as_mut() {
            t.relay(Some(&buf[..n]), &mut log, &mut scan_line);
            continue;
        }
        let _ = log.write_all(&buf[..n]).and_then(|()| log.flush());
        for &b in &buf[..n] {
            if b == b'\n' {
                scan_line(&line);
                line.clear();
            } else if line.len() < 4096 {
                line.push(b);
            }
        }
    }
    if let Some(t) = tagged.as_mut() {
        t.relay(None, &mut log, &mut scan_line);
    } else if !line.is_empty() {
        scan_line(&line);
    }
}
