//! Each rank's output in the log of the pod it ran in (batch mode).
//!
//! The batch launcher runs an Open MPI 5 / PRRTE `mpirun` with `--output tag`
//! ([`with_output_tag`]): mpirun, which prints every rank's output (PRRTE's daemons forward it
//! to it), then starts each line with `[JOB,RANK]<stdout>: ` (or `<stderr>`). The launcher's
//! relay reads the tag of each line ([`Untag`]), writes the line without it to pod 0's log
//! (so that log stays as the command printed it) and sends it, on the connection it holds to
//! the agent of the pod the rank ran in, as `rank_output`; that agent writes each complete
//! line to its own stdout or stderr as `[rank N] line` ([`RankLog`]): the pod's log. The
//! launcher sends everything it read before it sends `finish` on the same connection, so a
//! worker has written all its ranks' output before it exits.
//!
//! PMIx 5.0.5's own per-rank files (`--output dir=`) are not used: a prted deregisters a job
//! as soon as its last local rank has ended, and PMIx then drops what its write events still
//! held for the job's files (`_deregister_nspace` releases the sinks unwritten), so the last
//! lines of a short-lived rank were missing from them.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;

/// A line longer than this is written in parts (each prefixed), so that memory stays bounded.
pub const MAX_LINE: usize = 64 << 10;

/// The launchers whose `--output tag` PRRTE 3.0.8 (Open MPI 5's `mpirun`) takes.
const PRRTE_LAUNCHERS: &[&str] = &["mpirun", "mpiexec", "prterun", "oshrun"];

/// Which of a rank's streams a line is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    /// The file descriptor of the stream (1 or 2), as `rank_output` carries it.
    pub fn fd(self) -> u8 {
        match self {
            Stream::Stdout => 1,
            Stream::Stderr => 2,
        }
    }

    /// The stream of file descriptor `fd` (1 or 2).
    pub fn from_fd(fd: u8) -> Option<Stream> {
        match fd {
            1 => Some(Stream::Stdout),
            2 => Some(Stream::Stderr),
            _ => None,
        }
    }
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

/// `command` with `--output tag` after the program when the program is PRRTE's launcher
/// (`mpirun`, `mpiexec`, `prterun`, `oshrun`) and the command sets no `--output` of its own
/// (PRRTE takes one); None otherwise.
pub fn with_output_tag(command: &[String]) -> Option<Vec<String>> {
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
    out.push("tag".to_owned());
    out.extend(args.iter().cloned());
    Some(out)
}

/// The rank and stream of a line tagged by `--output tag` (`[JOB,RANK]<stdout>: `, PMIx
/// 5.0.5's `pmix_iof_prep_output`), and where the rank's own text starts.
pub fn parse_tag(line: &[u8]) -> Option<(u32, Stream, usize)> {
    let rest = line.strip_prefix(b"[")?;
    let close = rest.iter().position(|&b| b == b']')?;
    let inside = std::str::from_utf8(&rest[..close]).ok()?;
    let (_, rank) = inside.rsplit_once(',')?;
    let rank = rank.parse().ok()?;
    let after = &rest[close + 1..];
    for (tag, stream) in [
        (&b"<stdout>: "[..], Stream::Stdout),
        (&b"<stderr>: "[..], Stream::Stderr),
        (&b"<stddiag>: "[..], Stream::Stderr),
    ] {
        if after.starts_with(tag) {
            return Some((rank, stream, 1 + close + 1 + tag.len()));
        }
    }
    None
}

/// A piece of mpirun's output with its tag taken off: the rank and stream it came from (None
/// for mpirun's own lines), and its text (a line with its `\n`, or the part of one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub from: Option<(u32, Stream)>,
    pub text: Vec<u8>,
}

/// Splits one of mpirun's streams, tagged by `--output tag`, into [`Piece`]s: whole lines,
/// except that a line longer than [`MAX_LINE`] goes in parts and an unfinished last line at
/// the end ([`Untag::finish`]).
#[derive(Debug, Default)]
pub struct Untag {
    held: Vec<u8>,
    /// The rank and stream of a line whose first part went out already.
    cont: Option<Option<(u32, Stream)>>,
}

impl Untag {
    /// The pieces that `data` completes.
    pub fn push(&mut self, data: &[u8]) -> Vec<Piece> {
        let mut out = Vec::new();
        for &b in data {
            self.held.push(b);
            if b == b'\n' {
                out.push(self.take());
                self.cont = None;
            } else if self.held.len() >= MAX_LINE {
                let p = self.take();
                self.cont = Some(p.from);
                out.push(p);
            }
        }
        out
    }

    /// The held unfinished line, if any.
    pub fn finish(&mut self) -> Option<Piece> {
        if self.held.is_empty() {
            return None;
        }
        let p = self.take();
        self.cont = None;
        Some(p)
    }

    fn take(&mut self) -> Piece {
        let mut text = std::mem::take(&mut self.held);
        let from = match self.cont {
            Some(from) => from,
            None => match parse_tag(&text) {
                Some((rank, stream, start)) => {
                    text.drain(..start);
                    Some((rank, stream))
                }
                None => None,
            },
        };
        Piece { from, text }
    }
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

/// A worker's side: the ranks' output the launcher sends (`rank_output`), written to `out`
/// (stdout) and `err` (stderr) line by line, each prefixed with its rank.
#[derive(Debug)]
pub struct RankLog<O: Write, E: Write> {
    lines: BTreeMap<(u32, Stream), Lines>,
    out: O,
    err: E,
}

impl<O: Write, E: Write> RankLog<O, E> {
    pub fn new(out: O, err: E) -> Self {
        RankLog {
            lines: BTreeMap::new(),
            out,
            err,
        }
    }

    /// Writes the lines `data` completes of rank `rank`'s `stream`.
    pub fn push(&mut self, rank: u32, stream: Stream, data: &[u8]) {
        let bytes = self
            .lines
            .entry((rank, stream))
            .or_insert_with(|| Lines::new(rank))
            .push(data);
        write_to(&mut self.out, &mut self.err, stream, &bytes);
    }

    /// Writes every held unfinished line (the job's command ended, or its launcher went away).
    pub fn finish(&mut self) {
        for (&(_, stream), lines) in self.lines.iter_mut() {
            let bytes = lines.finish();
            write_to(&mut self.out, &mut self.err, stream, &bytes);
        }
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

#[cfg(test)]
mod tests;
