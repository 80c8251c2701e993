//! Which rank failed first, read from what PRRTE's `mpirun` prints, and in which pod it ran.
//!
//! PRRTE 3.0.8 (`src/runtime/prte_quit.c`, `help-prun.txt`) reports the first failing rank on
//! its stderr: a non-zero exit as `Process name: [NSPACE,R]` and `Exit code: N` (no node), a
//! signal or an exit without `MPI_Finalize` as `... process rank R with PID P on node NODE
//! exited on signal S (NAME).` / `... exited without calling "finalize"`. Where the node is not
//! named, the job map tells it: the launcher adds `--display map`, whose block
//! ([`MapFilter`]) it reads and keeps out of the pod's log, so that the log stays as the
//! command printed it.

use std::collections::BTreeMap;

/// How the first failing rank ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Code(i32),
    Signal {
        number: i32,
        name: Option<String>,
    },
    /// Exited (with status 0 or not) without calling `MPI_Finalize`.
    WithoutFinalize,
}

/// The first failing rank as PRRTE reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankFailure {
    pub rank: u32,
    /// The node PRRTE named (the pod's hostname), if it named one.
    pub node: Option<String>,
    pub ended: Ended,
}

impl RankFailure {
    /// The termination message and event text: `rank R in pod POD exited with code N` (or
    /// `was killed by signal S (NAME)`), `pod` the pod's name if known, else the node's.
    pub fn describe(&self, pod: Option<&str>) -> String {
        let place = match (pod, &self.node) {
            (Some(p), _) => format!(" in pod {p}"),
            (None, Some(n)) => format!(" on host {n}"),
            (None, None) => String::new(),
        };
        let how = match &self.ended {
            Ended::Code(c) => format!("exited with code {c}"),
            Ended::Signal {
                number,
                name: Some(n),
            } => format!("was killed by signal {number} ({n})"),
            Ended::Signal { number, name: None } => format!("was killed by signal {number}"),
            Ended::WithoutFinalize => "exited without calling MPI_Finalize".to_owned(),
        };
        format!("rank {}{place} {how}", self.rank)
    }
}

/// Reads mpirun's stderr line by line for the first failing rank.
#[derive(Debug, Default)]
pub struct FailureScan {
    /// The rank of a `Process name:` line awaiting its `Exit code:`.
    named: Option<u32>,
    /// A `... on node NODE exited on` line awaiting its `signal S (NAME).`.
    signalled: Option<(u32, String)>,
    found: Option<RankFailure>,
}

impl FailureScan {
    /// The first failure seen so far.
    pub fn found(&self) -> Option<&RankFailure> {
        self.found.as_ref()
    }

    /// One line of stderr (without its `\n`).
    pub fn line(&mut self, line: &str) {
        if self.found.is_some() {
            return;
        }
        let t = line.trim();
        if let Some((rank, node)) = self.signalled.take() {
            // "signal 9 (Killed)." or "signal 9."
            if let Some(rest) = t.strip_prefix("signal ") {
                let rest = rest.trim_end_matches('.');
                let (num, name) = match rest.split_once(' ') {
                    Some((n, name)) => (
                        n,
                        Some(name.trim_matches(|c| c == '(' || c == ')').to_owned()),
                    ),
                    None => (rest, None),
                };
                if let Ok(number) = num.parse() {
                    self.found = Some(RankFailure {
                        rank,
                        node: Some(node),
                        ended: Ended::Signal { number, name },
                    });
                    return;
                }
            }
        }
        if let Some(rank) = self.named.take() {
            if let Some(code) = t.strip_prefix("Exit code:") {
                if let Ok(c) = code.trim().parse() {
                    self.found = Some(RankFailure {
                        rank,
                        node: None,
                        ended: Ended::Code(c),
                    });
                    return;
                }
            }
        }
        if let Some(name) = t.strip_prefix("Process name:") {
            // "[prterun-pod-0-12@1,2]"
            self.named = name
                .trim()
                .trim_end_matches(']')
                .rsplit_once(',')
                .and_then(|(_, r)| r.parse().ok());
            return;
        }
        if let Some((rank, node, rest)) = rank_on_node(t) {
            if rest.starts_with("exited on") {
                self.signalled = Some((rank, node));
            } else if rest.starts_with("exited without calling") {
                self.found = Some(RankFailure {
                    rank,
                    node: Some(node),
                    ended: Ended::WithoutFinalize,
                });
            }
        }
    }
}

/// `... process rank R with PID P on node NODE REST`: (R, NODE, REST).
fn rank_on_node(t: &str) -> Option<(u32, String, &str)> {
    let (_, after) = t.split_once("process rank ")?;
    let (rank, after) = after.split_once(' ')?;
    let (_, after) = after.split_once(" on node ")?;
    let (node, rest) = after.split_once(' ')?;
    Some((rank.parse().ok()?, node.to_owned(), rest.trim()))
}

const MAP_HEAD: &str = "========================   JOB MAP   ========================";
const MAP_END: &str = "=============================================================";

/// Where PRRTE's `--display map` put each rank: filters the map's block out of mpirun's
/// stdout and records each rank's node from it. Everything else passes through unchanged, a
/// line's start as soon as it cannot be the map's.
#[derive(Debug, Default)]
pub struct MapFilter {
    /// A held line start (no `\n` yet), or a held empty line that may open the map.
    held: Vec<u8>,
    /// An empty line held before a possible map header.
    blank: bool,
    in_map: bool,
    /// Part of the current line went out already: its end is not the map's.
    mid_line: bool,
    node: Option<String>,
    ranks: BTreeMap<u32, String>,
    /// A whole map was read.
    complete: bool,
}

impl MapFilter {
    /// The node of `rank`, if a map named it.
    pub fn node_of(&self, rank: u32) -> Option<&str> {
        self.ranks.get(&rank).map(String::as_str)
    }

    /// Whether a whole map was read (a rank it does not name is in no map).
    pub fn complete(&self) -> bool {
        self.complete
    }

    /// Bytes of mpirun's stdout; returns what goes to the pod's log now.
    pub fn push(&mut self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in data {
            if b == b'\n' {
                let line = std::mem::take(&mut self.held);
                if std::mem::take(&mut self.mid_line) {
                    out.extend_from_slice(&line);
                    out.push(b'\n');
                } else {
                    self.end_line(&line, &mut out);
                }
            } else {
                self.held.push(b);
            }
        }
        // A line's start that cannot open or be in the map goes out at once.
        if !self.in_map && !self.held.is_empty() && !MAP_HEAD.as_bytes().starts_with(&self.held) {
            self.flush_blank(&mut out);
            out.append(&mut self.held);
            self.mid_line = true;
        }
        out
    }

    /// What is still held, at the end of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.in_map {
            self.flush_blank(&mut out);
            out.append(&mut self.held);
        }
        out
    }

    fn flush_blank(&mut self, out: &mut Vec<u8>) {
        if std::mem::take(&mut self.blank) {
            out.push(b'\n');
        }
    }

    fn end_line(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let text = String::from_utf8_lossy(line);
        if self.in_map {
            self.map_line(&text);
            return;
        }
        if text == MAP_HEAD {
            // The map's leading empty line goes with it.
            self.blank = false;
            self.in_map = true;
            self.node = None;
            return;
        }
        self.flush_blank(out);
        if line.is_empty() {
            self.blank = true;
            return;
        }
        out.extend_from_slice(line);
        out.push(b'\n');
    }

    fn map_line(&mut self, text: &str) {
        let t = text.trim();
        if t == MAP_END {
            self.in_map = false;
            self.complete = true;
        } else if let Some(rest) = t.strip_prefix("Data for node:") {
            self.node = rest.split_whitespace().next().map(str::to_owned);
        } else if let (Some(node), Some((_, r))) = (&self.node, t.split_once("Process rank:")) {
            if let Some(rank) = r.split_whitespace().next().and_then(|r| r.parse().ok()) {
                self.ranks.insert(rank, node.clone());
            }
        }
    }
}

/// Whether the command asks for a display of its own (then the launcher adds none).
pub fn displays(command: &[String]) -> bool {
    command.iter().skip(1).any(|a| {
        let a = a.trim_start_matches('-');
        a == "display" || a.starts_with("display=") || a == "display-map"
    })
}

#[cfg(test)]
mod tests;
