//! The task list: one command line a line (shell quoting), `#` comments and blank lines
//! skipped, per-task options before the command:
//! `-n N` (ranks, default 1), `--host PODS` (comma-separated), `--timeout SECS`,
//! `--cwd DIR`, `-x NAME=VALUE` (environment, repeatable). `--` ends the options.

use std::path::PathBuf;
use std::time::Duration;

/// One task of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskLine {
    /// The task's index: its position among the list's tasks, from 0 (what results name).
    pub index: usize,
    /// The list's line number, from 1 (for messages).
    pub line: usize,
    pub argv: Vec<String>,
    pub np: u32,
    pub hosts: Option<String>,
    pub timeout: Option<Duration>,
    pub cwd: Option<PathBuf>,
    pub env: Vec<String>,
}

impl TaskLine {
    /// A single-rank task running `argv`, with no other option, as the `index`th of its list.
    pub fn command<I, S>(index: usize, argv: I) -> TaskLine
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        TaskLine {
            index,
            line: index + 1,
            argv: argv.into_iter().map(Into::into).collect(),
            np: 1,
            hosts: None,
            timeout: None,
            cwd: None,
            env: Vec::new(),
        }
    }
}

/// Why a task list cannot be used; names the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("task list line {line}: {why}")]
pub struct TaskParseError {
    pub line: usize,
    pub why: String,
}

/// Parses a task list.
pub fn parse_tasks(text: &str) -> Result<Vec<TaskLine>, TaskParseError> {
    let mut tasks = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let err = |why: String| TaskParseError { line, why };
        let words = shlex::split(trimmed).ok_or_else(|| err("unbalanced quotes".into()))?;
        let mut t = TaskLine {
            index: tasks.len(),
            line,
            argv: Vec::new(),
            np: 1,
            hosts: None,
            timeout: None,
            cwd: None,
            env: Vec::new(),
        };
        let mut it = words.into_iter().peekable();
        while let Some(w) = it.peek() {
            if !w.starts_with('-') {
                break;
            }
            let opt = it.next().unwrap_or_default();
            if opt == "--" {
                break;
            }
            let (name, inline) = match opt.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(v.to_owned())),
                _ => (opt.clone(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| it.next())
                    .ok_or_else(|| err(format!("{name} needs a value")))
            };
            match name.as_str() {
                "-n" | "--np" => {
                    let v = value()?;
                    t.np = v
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| err(format!("-n {v:?}: expected a positive number")))?;
                }
                "--host" => t.hosts = Some(value()?),
                "--timeout" => {
                    let v = value()?;
                    let s: f64 = v
                        .parse()
                        .ok()
                        .filter(|s: &f64| s.is_finite() && *s > 0.0)
                        .ok_or_else(|| err(format!("--timeout {v:?}: expected seconds > 0")))?;
                    t.timeout = Some(Duration::from_secs_f64(s));
                }
                "--cwd" => t.cwd = Some(PathBuf::from(value()?)),
                "-x" => {
                    let v = value()?;
                    if !v.contains('=') || v.starts_with('=') {
                        return Err(err(format!("-x {v:?}: expected NAME=VALUE")));
                    }
                    t.env.push(v);
                }
                _ => {
                    return Err(err(format!(
                        "unknown task option {name} (known: -n, --host, --timeout, --cwd, -x; \
                         `--` before a command that starts with -)"
                    )))
                }
            }
        }
        t.argv = it.collect();
        if t.argv.is_empty() {
            return Err(err("no command".into()));
        }
        tasks.push(t);
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_before_the_command_comments_and_blank_lines() {
        let text = "# a workflow\n\n/bin/true\n  -n 4 --host p0,p1 --timeout 5 sh -c 'exit 3'\n\
                    --np=2 --cwd /w -x A=1 -x B=x=y -- -dash arg\n   # indented comment\n";
        let t = parse_tasks(text).unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!((t[0].index, t[0].line, t[0].np), (0, 3, 1));
        assert_eq!(t[0].argv, ["/bin/true"]);
        assert_eq!((t[1].index, t[1].line, t[1].np), (1, 4, 4));
        assert_eq!(t[1].hosts.as_deref(), Some("p0,p1"));
        assert_eq!(t[1].timeout, Some(Duration::from_secs(5)));
        assert_eq!(t[1].argv, ["sh", "-c", "exit 3"]);
        assert_eq!(t[2].np, 2);
        assert_eq!(t[2].cwd, Some(PathBuf::from("/w")));
        assert_eq!(t[2].env, ["A=1", "B=x=y"]);
        assert_eq!(t[2].argv, ["-dash", "arg"]);
    }

    #[test]
    fn arguments_after_the_command_are_the_commands() {
        let t = parse_tasks("hostname -n 3 --host x\n").unwrap();
        assert_eq!((t[0].np, t[0].hosts.as_ref()), (1, None));
        assert_eq!(t[0].argv, ["hostname", "-n", "3", "--host", "x"]);
    }

    #[test]
    fn bad_lines_are_named() {
        for (text, line, part) in [
            ("true\n-n 0 true\n", 2, "positive"),
            ("-n\n", 1, "needs a value"),
            ("--timeout -1 true", 1, "seconds"),
            ("-q true", 1, "unknown task option -q"),
            ("-n 2\n", 1, "no command"),
            ("echo 'open\n", 1, "quotes"),
            ("-x NOVALUE true", 1, "NAME=VALUE"),
        ] {
            let e = parse_tasks(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(part), "{text:?}: {e}");
        }
    }

    #[test]
    fn an_empty_list_has_no_tasks() {
        assert_eq!(parse_tasks("\n# nothing\n").unwrap(), vec![]);
    }
}
