//! Each rank's output in the log of the pod it ran in (batch mode).
//!
//! The batch launcher runs an Open MPI 5 / PRRTE `mpirun` with `--output dir=DIR`
//! ([`with_output_dir`]). PRRTE hands every rank's output to the PMIx server in the `prted` of
//! the pod the rank runs in, which then writes it to `DIR/<nspace>/rank.<N>/stdout` and
//! `.../stderr` *in that pod* (PMIx 5.0.5, `pmix_iof.c`), besides forwarding it to `mpirun` as
//! always: pod 0's log keeps all the output, unprefixed. A worker's agent follows those files
//! ([`Follower`], on a thread of its own) and writes each complete line to its own stdout or
//! stderr as `[rank N] line`: the pod's log. prted writes a local file and never waits for the
//! agent, so a slow reader cannot stall the job; each file is read in order from where the last
//! read ended, so no line of a rank's stream is lost or reordered.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The subdirectory of the agent's TMPDIR that holds the ranks' output by default.
pub const DEFAULT_SUBDIR: &str = "prrte-k8s-ranks";

/// How often the follower looks for new output.
const POLL: Duration = Duration::from_millis(100);

/// At most this many polls after the ranks ended before the rest is written (5 s).
const SETTLE_POLLS: usize = 50;

/// At most this many bytes are read from one file per pass, so that one rank's burst does not
/// keep the others waiting.
const CHUNK: usize = 1 << 20;

/// A line longer than this is written in parts (each prefixed), so that memory stays bounded.
const MAX_LINE: usize = 64 << 10;

/// The launchers whose `--output dir=` PRRTE 3.0.8 (Open MPI 5's `mpirun`) takes.
const PRRTE_LAUNCHERS: &[&str] = &["mpirun", "mpiexec", "prterun", "oshrun"];

/// Which of a rank's streams a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// The prefix of each line of rank `rank`'s output in its pod's log.
pub fn prefix(rank: u32) -> String {
    format!("[rank {rank}] ")
}

/// Whether `program` is PRRTE's launcher (`mpirun`, `mpiexec`, `prterun`, `oshrun`).
pub fn prrte_launcher(program: &str) -> bool {
    Path::new(program)
        .file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|n| PRRTE_LAUNCHERS.contains(&n))
}

/// `command` with `--output dir=DIR` after the program when the program is PRRTE's launcher
/// (`mpirun`, `mpiexec`, `prterun`, `oshrun`) and the command sets no `--output` of its own
/// (PRRTE takes one); None otherwise.
pub fn with_output_dir(command: &[String], dir: &Path) -> Option<Vec<String>> {
    let (program, args) = command.split_first()?;
    if !prrte_launcher(program) {
        return None;
    }
    let own = args.iter().any(|a| {
        let a = a.trim_start_matches('-');
        a == "output" || a.starts_with("output=") || a.starts_with("output-filename")
    });
    if own {
        return None;
    }
    let mut out = Vec::with_capacity(command.len() + 2);
    out.push(program.clone());
    out.push("--output".to_owned());
    out.push(format!("dir={}", dir.display()));
    out.extend(args.iter().cloned());
    Some(out)
}

/// The rank and stream of an output file `DIR/<nspace>/rank.<N>/<stdout|stderr>`, from the
/// path below `DIR`.
pub fn parse_path(rank_dir: &OsStr, file: &OsStr) -> Option<(u32, Stream)> {
    let rank = rank_dir.to_str()?.strip_prefix("rank.")?.parse().ok()?;
    let stream = match file.to_str()? {
        "stdout" => Stream::Stdout,
        "stderr" => Stream::Stderr,
        _ => return None,
    };
    Some((rank, stream))
}

/// Splits a stream's bytes into lines, each prefixed; keeps an unfinished last line until it
/// ends (or [`Lines::finish`]).
#[derive(Debug)]
pub struct Lines {
    prefix: Vec<u8>,
    partial: Vec<u8>,
}

impl Lines {
    pub fn new(rank: u32) -> Self {
        Lines {
            prefix: prefix(rank).into_bytes(),
            partial: Vec::new(),
        }
    }

    /// The complete lines of `data` (after what was held), prefixed, each ending in `\n`.
    pub fn push(&mut self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in data {
            if b == b'\n' {
                self.emit(&mut out);
            } else {
                self.partial.push(b);
                if self.partial.len() >= MAX_LINE {
                    self.emit(&mut out);
                }
            }
        }
        out
    }

    /// The held unfinished line, prefixed and ended, if any.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.partial.is_empty() {
            self.emit(&mut out);
        }
        out
    }

    fn emit(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.prefix);
        out.append(&mut self.partial);
        out.push(b'\n');
    }
}

/// One followed file.
struct Tail {
    stream: Stream,
    offset: u64,
    lines: Lines,
}

/// Follows the ranks' output files under a directory and writes their lines to `out` (stdout)
/// and `err` (stderr).
pub struct Follower<O: Write, E: Write> {
    dir: PathBuf,
    tails: BTreeMap<PathBuf, Tail>,
    out: O,
    err: E,
}

impl<O: Write, E: Write> Follower<O, E> {
    pub fn new(dir: PathBuf, out: O, err: E) -> Self {
        Follower {
            dir,
            tails: BTreeMap::new(),
            out,
            err,
        }
    }

    /// One pass: finds new files, writes the complete lines each file gained. Returns how many
    /// bytes were read.
    pub fn pass(&mut self) -> usize {
        self.discover();
        let mut read = 0;
        let paths: Vec<PathBuf> = self.tails.keys().cloned().collect();
        for path in paths {
            read += self.read_file(&path);
        }
        read
    }

    /// Reads everything there is, then writes every held unfinished line.
    pub fn drain(&mut self) {
        for _ in 0..SETTLE_POLLS {
            if self.pass() == 0 {
                break;
            }
        }
        for tail in self.tails.values_mut() {
            let bytes = tail.lines.finish();
            write_to(&mut self.out, &mut self.err, tail.stream, &bytes);
        }
    }

    fn discover(&mut self) {
        let Ok(jobs) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for job in jobs.flatten() {
            let Ok(ranks) = std::fs::read_dir(job.path()) else {
                continue;
            };
            for rank in ranks.flatten() {
                let Ok(files) = std::fs::read_dir(rank.path()) else {
                    continue;
                };
                for file in files.flatten() {
                    let path = file.path();
                    if self.tails.contains_key(&path) {
                        continue;
                    }
                    if let Some((r, stream)) = parse_path(&rank.file_name(), &file.file_name()) {
                        self.tails.insert(
                            path,
                            Tail {
                                stream,
                                offset: 0,
                                lines: Lines::new(r),
                            },
                        );
                    }
                }
            }
        }
    }

    fn read_file(&mut self, path: &Path) -> usize {
        let Some(tail) = self.tails.get_mut(path) else {
            return 0;
        };
        let Ok(mut f) = File::open(path) else {
            return 0;
        };
        if f.seek(SeekFrom::Start(tail.offset)).is_err() {
            return 0;
        }
        let mut buf = Vec::with_capacity(8192);
        let n = match f.take(CHUNK as u64).read_to_end(&mut buf) {
            Ok(n) => n,
            Err(_) => return 0,
        };
        tail.offset += n as u64;
        let bytes = tail.lines.push(&buf);
        write_to(&mut self.out, &mut self.err, tail.stream, &bytes);
        n
    }
}

fn write_to(out: &mut impl Write, err: &mut impl Write, stream: Stream, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    // The pod's log is where these go; if it cannot be written, nothing else can be told.
    let _ = match stream {
        Stream::Stdout => out.write_all(bytes).and_then(|()| out.flush()),
        Stream::Stderr => err.write_all(bytes).and_then(|()| err.flush()),
    };
}

/// A follower running on a thread of its own, writing to the agent's stdout and stderr.
pub struct Following {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Following {
    /// Starts following `dir` (it may not exist yet).
    pub fn start(dir: PathBuf) -> std::io::Result<Following> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("prrte-k8s-rank-output".into())
            .spawn(move || {
                let mut f = Follower::new(dir, std::io::stdout(), std::io::stderr());
                while !flag.load(Ordering::Acquire) {
                    if f.pass() == 0 {
                        std::thread::sleep(POLL);
                    }
                }
                // The ranks have ended: let prted's last writes land, then write the rest.
                let mut quiet = 0;
                for _ in 0..SETTLE_POLLS {
                    if quiet == 3 {
                        break;
                    }
                    std::thread::sleep(POLL);
                    quiet = if f.pass() == 0 { quiet + 1 } else { 0 };
                }
                f.drain();
            })?;
        Ok(Following {
            stop,
            thread: Some(thread),
        })
    }

    /// Writes what is left (once nothing new came for a few polls) and stops, on a blocking
    /// thread of the runtime.
    pub async fn finish(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests;
