//! The results file: one JSON object a line, one line per task, in the order tasks end:
//! `{"index":3,"exit":0,"start":"…","end":"…","pods":["job-1"]}`. `exit` is the task's exit
//! status (a number; 0 is success), or a string when it did not exit by itself: a signal name
//! (`"SIGKILL"`), `"timeout"` (killed after its `--timeout`), `"lost"` (the connection to the DVM
//! went away), or PMIx's name of why it could not start. An optional `error` carries PRRTE's
//! message.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status.
    Status(i32),
    /// A signal ended it (its name).
    Signal(String),
    /// It ran past its timeout and was killed.
    Timeout,
    /// The DVM connection was lost before its end was known.
    Lost,
    /// It could not start or the DVM ended it (PMIx's or PRRTE's name of the cause).
    Error(String),
}

impl Exit {
    /// From PRRTE's job termination status: an exit status, 128 + a signal number, or a
    /// negative error (named by `name`).
    pub fn from_status(status: i32, name: impl FnOnce(i32) -> String) -> Exit {
        match status {
            0..=128 => Exit::Status(status),
            129..=192 => match nix::sys::signal::Signal::try_from(status - 128) {
                Ok(s) => Exit::Signal(s.as_str().to_owned()),
                Err(_) => Exit::Status(status),
            },
            s if s > 0 => Exit::Status(s),
            s => Exit::Error(name(s)),
        }
    }

    pub fn success(&self) -> bool {
        *self == Exit::Status(0)
    }
}

impl Serialize for Exit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Exit::Status(n) => s.serialize_i32(*n),
            other => s.serialize_str(&exit_label(other)),
        }
    }
}

impl<'de> Deserialize<'de> for Exit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match serde_json::Value::deserialize(d)? {
            serde_json::Value::Number(n) => Exit::Status(
                n.as_i64()
                    .and_then(|v| i32::try_from(v).ok())
                    .unwrap_or(i32::MAX),
            ),
            serde_json::Value::String(s) => match s.as_str() {
                "timeout" => Exit::Timeout,
                "lost" => Exit::Lost,
                x if x.starts_with("SIG") => Exit::Signal(s),
                _ => Exit::Error(s),
            },
            other => Exit::Error(other.to_string()),
        })
    }
}

/// How an exit reads in the results and messages.
pub fn exit_label(e: &Exit) -> String {
    match e {
        Exit::Status(n) => n.to_string(),
        Exit::Signal(s) | Exit::Error(s) => s.clone(),
        Exit::Timeout => "timeout".into(),
        Exit::Lost => "lost".into(),
    }
}

/// One line of the results file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResult {
    pub index: usize,
    pub exit: Exit,
    /// When it was submitted and when its end was known (RFC 3339).
    pub start: String,
    pub end: String,
    /// The pods its ranks ran in (rank order); empty when the DVM no longer knew.
    pub pods: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl TaskResult {
    /// The JSON line (without its newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| format!("{{\"index\":{}}}", self.index))
    }
}

/// The indices that already have a result in a results file's text. Lines that do not parse
/// (a line cut short when the submitter was killed) do not count.
pub fn completed_indices(text: &str) -> BTreeSet<usize> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<TaskResult>(l).ok())
        .map(|r| r.index)
        .collect()
}

/// "3 of 500 tasks failed: 7 (exit 3), 12 (timeout), …" — at most `shown` named.
pub fn failed_summary<'a>(
    failed: impl IntoIterator<Item = &'a TaskResult>,
    total: usize,
    shown: usize,
) -> Option<String> {
    let failed: Vec<&TaskResult> = failed.into_iter().filter(|r| !r.exit.success()).collect();
    if failed.is_empty() {
        return None;
    }
    let mut names: Vec<String> = failed
        .iter()
        .take(shown)
        .map(|r| format!("{} (exit {})", r.index, exit_label(&r.exit)))
        .collect();
    if failed.len() > shown {
        names.push(format!("and {} more", failed.len() - shown));
    }
    Some(format!(
        "{} of {total} tasks failed: {}",
        failed.len(),
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(index: usize, exit: Exit) -> TaskResult {
        TaskResult {
            index,
            exit,
            start: "2026-01-01T00:00:00Z".into(),
            end: "2026-01-01T00:00:01Z".into(),
            pods: vec!["job-1".into()],
            error: None,
        }
    }

    #[test]
    fn statuses_map_to_exits() {
        let name = |s: i32| format!("E{s}");
        assert_eq!(Exit::from_status(0, name), Exit::Status(0));
        assert_eq!(Exit::from_status(3, name), Exit::Status(3));
        assert_eq!(Exit::from_status(137, name), Exit::Signal("SIGKILL".into()));
        assert_eq!(Exit::from_status(143, name), Exit::Signal("SIGTERM".into()));
        assert_eq!(Exit::from_status(250, name), Exit::Status(250));
        assert_eq!(Exit::from_status(-179, name), Exit::Error("E-179".into()));
    }

    #[test]
    fn lines_round_trip_and_exit_is_a_number_or_a_name() {
        for e in [
            Exit::Status(3),
            Exit::Signal("SIGSEGV".into()),
            Exit::Timeout,
            Exit::Lost,
            Exit::Error("PMIX_ERR_JOB_FAILED_TO_MAP".into()),
        ] {
            let line = r(5, e.clone()).to_line();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["index"], 5);
            match &e {
                Exit::Status(n) => assert_eq!(v["exit"], *n),
                _ => assert_eq!(v["exit"], exit_label(&e)),
            }
            assert!(v.get("error").is_none(), "{line}");
            assert_eq!(serde_json::from_str::<TaskResult>(&line).unwrap(), r(5, e));
        }
    }

    #[test]
    fn resume_counts_whole_lines_only() {
        let mut text = String::new();
        for i in [0, 2, 3] {
            text.push_str(&r(i, Exit::Status(0)).to_line());
            text.push('\n');
        }
        let cut = r(4, Exit::Status(0)).to_line();
        text.push_str(&cut[..cut.len() / 2]);
        assert_eq!(
            completed_indices(&text).into_iter().collect::<Vec<_>>(),
            [0, 2, 3]
        );
        assert!(completed_indices("").is_empty());
    }

    #[test]
    fn failures_are_named_and_bounded() {
        let rs = [
            r(0, Exit::Status(0)),
            r(1, Exit::Status(3)),
            r(2, Exit::Timeout),
            r(3, Exit::Signal("SIGKILL".into())),
        ];
        assert_eq!(failed_summary(&rs[..1], 1, 5), None);
        assert_eq!(
            failed_summary(&rs, 4, 2).unwrap(),
            "3 of 4 tasks failed: 1 (exit 3), 2 (exit timeout), and 1 more"
        );
    }
}
