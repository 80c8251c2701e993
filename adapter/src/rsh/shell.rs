//! The remote command of an ssh-style launcher, parsed without running a shell.
//!
//! ssh joins its command arguments with spaces and hands the string to the remote user's
//! shell. `prrte-k8s-rsh` instead parses that string here into one program, its arguments, its
//! environment and its working directory, and the agent runs the program directly. What
//! launchers send, and so what is understood:
//!
//! * words with POSIX quoting: `'...'`, `"..."` (with `\$`, `\"`, `\\`, `` \` `` escapes),
//!   `\` outside quotes, `#` comments;
//! * `$NAME` and `${NAME}` (in words and double quotes), expanded in the pod by the agent
//!   against the program's environment (PRRTE's `LD_LIBRARY_PATH=...:$LD_LIBRARY_PATH`);
//! * commands separated by `;`, `&&` or newlines, of which only the last may run a program;
//!   before it: `NAME=value`, `export NAME[=value]...` (every assigned variable is given to the
//!   program), `cd DIR`, `true`/`:`; in front of the program: `NAME=value` assignments,
//!   `exec`, `env NAME=value...`, and `eval WORDS...` (its words joined and parsed again);
//!
//! PRRTE's ssh launcher sends `PRTE_PREFIX=P;export PRTE_PREFIX;LD_LIBRARY_PATH=P/lib:$LD_LIBRARY_PATH;
//! export LD_LIBRARY_PATH;...;P/bin/prted --prtemca ess "env" ...`; MPICH's and Intel MPI's
//! Hydra send `"/path/hydra_pmi_proxy" --control-port host:port ...`. ORTE (Open MPI 3/4), for
//! a user whose login shell is `sh` or `ksh`, wraps its command as `( test ! -r ./.profile ||
//! . ./.profile; orted ... )`: that exact wrapper is taken off and the command inside parsed
//! (no shell runs, so no profile is read, as for a user without one). Anything a shell would do
//! beyond this (pipes, redirections, `||`, `&`, `$(...)`, backquotes, globbing `$?`-style
//! parameters, subshells) is refused with the construct named, so nothing runs that was not
//! meant.
//!
//! The results are templates in the sense of [`crate::protocol::exec::expand`].

use crate::protocol::exec::is_var_name;
use crate::text::printable;

/// Why a remote command is not run; the message names the construct and shows the command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ShellError {
    /// A construct only a shell would run (a pipe, a redirection, a substitution...).
    #[error(
        "the remote command uses {what}, which prrte-k8s-rsh does not run (it runs one program \
         without a shell): {}",
        printable(command, 300)
    )]
    Refused { what: String, command: String },
    #[error("unterminated {0} in the remote command")]
    Unterminated(&'static str),
    #[error(
        "no program in the remote command {:?} (an interactive login is not supported)",
        printable(.0, 300)
    )]
    NoProgram(String),
    #[error("eval nested too deeply")]
    EvalTooDeep,
    #[error(
        "nothing may follow the program in the remote command (found `{}` after `{}`)",
        printable(found, 100),
        printable(program, 100)
    )]
    AfterProgram { found: String, program: String },
    #[error("export {}: not a variable name", printable(.0, 100))]
    NotAName(String),
    #[error("cd needs exactly one directory")]
    CdArguments,
    #[error("env options are not supported in the remote command")]
    EnvOptions,
    #[error("env without a program")]
    EnvWithoutProgram,
}

/// A remote command: what one `exec` request carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteCommand {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Word {
    /// The word after quote removal, as a template (`$$` for `$`, `${NAME}` for references).
    text: String,
    /// Byte offset in `text` of the `=` of an assignment (`NAME=...`, unquoted name).
    assign: Option<usize>,
    /// Whether any part was quoted or escaped (such a word is never a builtin's name).
    quoted: bool,
}

impl Word {
    fn literal(&self) -> Option<&str> {
        (!self.quoted && !self.text.contains('$')).then_some(self.text.as_str())
    }
}

/// Splits shell text into commands of words.
fn lex(src: &str) -> Result<Vec<Vec<Word>>, ShellError> {
    let mut commands: Vec<Vec<Word>> = vec![Vec::new()];
    let mut word: Option<Word> = None;
    // Whether everything in the current word so far is an unquoted name (for `NAME=`).
    let mut name_so_far = true;
    let mut chars = src.chars().peekable();
    let refuse = |what: &str| -> Result<Vec<Vec<Word>>, ShellError> { Err(refused(what, src)) };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => end_word(&mut commands, &mut word, &mut name_so_far),
            '\n' | ';' => {
                end_word(&mut commands, &mut word, &mut name_so_far);
                end_command(&mut commands);
            }
            '&' => {
                if chars.peek() == Some(&'&') {
                    chars.next();
                    end_word(&mut commands, &mut word, &mut name_so_far);
                    end_command(&mut commands);
                } else {
                    return refuse("`&` (a background job)");
                }
            }
            '|' => return refuse("`|` or `||`"),
            '<' | '>' => return refuse("a redirection"),
            '`' => return refuse("a command substitution (backquotes)"),
            '(' | ')' => return refuse("a subshell or parentheses"),
            '#' if word.is_none() => {
                // A comment, to the end of the line.
                chars.by_ref().find(|c| *c == '\n');
                end_command(&mut commands);
            }
            '\'' => {
                let w = word.get_or_insert_with(Word::default);
                w.quoted = true;
                name_so_far = false;
                single_quoted(&mut chars, &mut w.text)?;
            }
            '"' => {
                let w = word.get_or_insert_with(Word::default);
                w.quoted = true;
                name_so_far = false;
                double_quoted(&mut chars, &mut w.text, src)?;
            }
            '\\' => match chars.next() {
                Some('\n') => continue,
                Some(e) => {
                    let w = word.get_or_insert_with(Word::default);
                    w.quoted = true;
                    name_so_far = false;
                    push_literal(&mut w.text, e);
                }
                None => {}
            },
            '$' => {
                let w = word.get_or_insert_with(Word::default);
                name_so_far = false;
                dollar(&mut chars, &mut w.text, src)?;
            }
            '=' => {
                let w = word.get_or_insert_with(Word::default);
                if name_so_far && w.assign.is_none() && is_var_name(&w.text) {
                    w.assign = Some(w.text.len());
                }
                name_so_far = false;
                w.text.push('=');
            }
            '*' | '?' => return refuse("an unquoted glob pattern (`*`, `?`)"),
            c => {
                let w = word.get_or_insert_with(Word::default);
                if !(c.is_ascii_alphanumeric() || c == '_') {
                    name_so_far = false;
                }
                w.text.push(c);
            }
        }
    }
    end_word(&mut commands, &mut word, &mut name_so_far);
    commands.retain(|c| !c.is_empty());
    Ok(commands)
}

/// Ends the word being read (if any): it joins the current command.
fn end_word(commands: &mut [Vec<Word>], word: &mut Option<Word>, name_so_far: &mut bool) {
    if let Some(w) = word.take() {
        commands.last_mut().expect("one command").push(w);
    }
    *name_so_far = true;
}

/// Ends the current command (if it has words): the next word starts a new one.
fn end_command(commands: &mut Vec<Vec<Word>>) {
    if !commands.last().expect("one command").is_empty() {
        commands.push(Vec::new());
    }
}

/// Why the remote command is refused: it uses `what`.
fn refused(what: &str, src: &str) -> ShellError {
    ShellError::Refused {
        what: what.to_owned(),
        command: src.to_owned(),
    }
}

/// The rest of a `'...'` word part after its opening quote, into `text`.
fn single_quoted(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    text: &mut String,
) -> Result<(), ShellError> {
    for c in chars.by_ref() {
        if c == '\'' {
            return Ok(());
        }
        push_literal(text, c);
    }
    Err(ShellError::Unterminated("single quote"))
}

/// The rest of a `"..."` word part after its opening quote, into `text` (of the shell `src`).
fn double_quoted(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    text: &mut String,
    src: &str,
) -> Result<(), ShellError> {
    while let Some(c) = chars.next() {
        match c {
            '"' => return Ok(()),
            '\\' => match chars.next() {
                Some(e @ ('$' | '`' | '"' | '\\')) => push_literal(text, e),
                Some('\n') => {}
                Some(e) => {
                    text.push('\\');
                    push_literal(text, e);
                }
                None => return Err(ShellError::Unterminated("double quote")),
            },
            '`' => return Err(refused("a command substitution (backquotes)", src)),
            '$' => dollar(chars, text, src)?,
            c => push_literal(text, c),
        }
    }
    Err(ShellError::Unterminated("double quote"))
}

fn push_literal(text: &mut String, c: char) {
    if c == '$' {
        text.push_str("$$");
    } else {
        text.push(c);
    }
}

/// A `$` just read: `$NAME` or `${NAME}` become `${NAME}`; a `$` before anything else is a
/// literal dollar; command substitution and special parameters are refused.
fn dollar(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    text: &mut String,
    src: &str,
) -> Result<(), ShellError> {
    let refuse = |what: &str| Err(refused(what, src));
    match chars.peek().copied() {
        Some('(') => refuse("`$(...)` (command substitution or arithmetic)"),
        Some('{') => {
            chars.next();
            let mut name = String::new();
            for c in chars.by_ref() {
                if c == '}' {
                    if !is_var_name(&name) {
                        return refuse(&format!(
                            "`${{{name}}}` (only plain `${{NAME}}` is expanded)"
                        ));
                    }
                    text.push_str(&format!("${{{name}}}"));
                    return Ok(());
                }
                name.push(c);
            }
            Err(ShellError::Unterminated("`${`"))
        }
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {
            let mut name = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    name.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
            text.push_str(&format!("${{{name}}}"));
            Ok(())
        }
        Some(c) if c.is_ascii_digit() || "?$!#*@-".contains(c) => {
            refuse(&format!("the special parameter `${c}`"))
        }
        _ => {
            text.push_str("$$");
            Ok(())
        }
    }
}

/// The command inside ORTE's `( test ! -r ./.profile || . ./.profile; COMMAND )`, if `src` is
/// exactly that.
fn orte_profile_wrapper(src: &str) -> Option<&str> {
    src.trim()
        .strip_prefix('(')?
        .trim_start()
        .strip_prefix("test ! -r ./.profile || . ./.profile;")?
        .trim_end()
        .strip_suffix(')')
}

/// Parses the remote command (ssh's arguments after the host, joined with spaces).
pub fn parse(src: &str) -> Result<RemoteCommand, ShellError> {
    let mut out = RemoteCommand::default();
    let inner = orte_profile_wrapper(src).unwrap_or(src);
    interpret(lex(inner)?, &mut out, 0)?;
    if out.argv.is_empty() {
        return Err(ShellError::NoProgram(src.to_owned()));
    }
    Ok(out)
}

fn interpret(
    commands: Vec<Vec<Word>>,
    out: &mut RemoteCommand,
    depth: u32,
) -> Result<(), ShellError> {
    if depth > 4 {
        return Err(ShellError::EvalTooDeep);
    }
    for cmd in commands {
        if !out.argv.is_empty() {
            return Err(ShellError::AfterProgram {
                found: cmd[0].text.clone(),
                program: out.argv[0].clone(),
            });
        }
        let mut words = cmd.into_iter().peekable();
        let mut assigns = Vec::new();
        while let Some(w) = words.next_if(|w| w.assign.is_some()) {
            assigns.push(split_assign(&w));
        }
        let rest: Vec<Word> = words.collect();
        if rest.is_empty() {
            out.env.extend(assigns);
            continue;
        }
        run_words(rest, assigns, out, depth)?;
    }
    Ok(())
}

fn split_assign(w: &Word) -> (String, String) {
    let i = w.assign.expect("an assignment");
    (w.text[..i].to_owned(), w.text[i + 1..].to_owned())
}

fn run_words(
    mut rest: Vec<Word>,
    assigns: Vec<(String, String)>,
    out: &mut RemoteCommand,
    depth: u32,
) -> Result<(), ShellError> {
    match rest[0].literal() {
        Some("export") => {
            out.env.extend(assigns);
            for w in &rest[1..] {
                if w.assign.is_some() {
                    out.env.push(split_assign(w));
                } else if !w.literal().is_some_and(is_var_name) {
                    return Err(ShellError::NotAName(w.text.clone()));
                }
            }
            Ok(())
        }
        Some("cd") => match &rest[1..] {
            [dir] => {
                out.cwd = Some(dir.text.clone());
                Ok(())
            }
            _ => Err(ShellError::CdArguments),
        },
        Some("true") | Some(":") if rest.len() == 1 => Ok(()),
        Some("exec") if rest.len() > 1 => {
            rest.remove(0);
            run_words(rest, assigns, out, depth)
        }
        Some("env") => {
            rest.remove(0);
            let mut assigns = assigns;
            while rest.first().is_some_and(|w| w.assign.is_some()) {
                assigns.push(split_assign(&rest.remove(0)));
            }
            if rest.first().is_some_and(|w| w.text.starts_with('-')) {
                return Err(ShellError::EnvOptions);
            }
            if rest.is_empty() {
                return Err(ShellError::EnvWithoutProgram);
            }
            run_words(rest, assigns, out, depth)
        }
        Some("eval") => {
            out.env.extend(assigns);
            // eval joins its (already unquoted) words and parses the result again.
            let source: Vec<String> = rest[1..]
                .iter()
                .map(|w| w.text.replace("$$", "$"))
                .collect();
            interpret(lex(&source.join(" "))?, out, depth + 1)
        }
        _ => {
            out.env.extend(assigns);
            out.argv = rest.into_iter().map(|w| w.text).collect();
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn prrte_ssh_launcher_command() {
        // What PRRTE 3.0.8's ssh PLM sends (bash/sh remote shell), as ssh would join it.
        let src = "PRTE_PREFIX=/opt/v;export PRTE_PREFIX;LD_LIBRARY_PATH=/opt/v/lib:/opt/v/lib:$LD_LIBRARY_PATH;export LD_LIBRARY_PATH;DYLD_LIBRARY_PATH=/opt/v/lib:$DYLD_LIBRARY_PATH;export DYLD_LIBRARY_PATH;/opt/v/bin/prted --allow-run-as-root --prtemca ess \"env\" --prtemca ess_base_nspace \"prterun-vm-6744@0\" --prtemca prte_hnp_uri \"prterun-vm-6744@0.0;tcp://192.0.2.2:53293:64,24;tcp6://[fd00::2]:44149:64,24\" --prtemca PREFIXES \"errmgr,ess\" --tree-spawn";
        let c = parse(src).unwrap();
        assert_eq!(
            c.env,
            env(&[
                ("PRTE_PREFIX", "/opt/v"),
                (
                    "LD_LIBRARY_PATH",
                    "/opt/v/lib:/opt/v/lib:${LD_LIBRARY_PATH}"
                ),
                ("DYLD_LIBRARY_PATH", "/opt/v/lib:${DYLD_LIBRARY_PATH}"),
            ])
        );
        assert_eq!(c.cwd, None);
        assert_eq!(
            c.argv,
            [
                "/opt/v/bin/prted",
                "--allow-run-as-root",
                "--prtemca",
                "ess",
                "env",
                "--prtemca",
                "ess_base_nspace",
                "prterun-vm-6744@0",
                "--prtemca",
                "prte_hnp_uri",
                "prterun-vm-6744@0.0;tcp://192.0.2.2:53293:64,24;tcp6://[fd00::2]:44149:64,24",
                "--prtemca",
                "PREFIXES",
                "errmgr,ess",
                "--tree-spawn",
            ]
        );
    }

    #[test]
    fn orte_rsh_launcher_command() {
        // What Open MPI 4.1's rsh PLM sends for a user whose shell is sh (no tree spawn).
        let src = "( test ! -r ./.profile || . ./.profile;  orted --daemonize -mca ess \"env\" -mca ess_base_jobid \"3099131904\" -mca ess_base_vpid 1 -mca orte_node_regex \"[4:469]b9c11d81,[2:10].255.255.1@0(2)\" -mca orte_hnp_uri \"3099131904.0;tcp://192.0.2.2:34807;tcp6://[fd00::2]:45793\" -mca plm \"rsh\" -mca plm_rsh_agent \"/opt/prrte-k8s/bin/prrte-k8s-rsh\" )";
        let c = parse(src).unwrap();
        assert!(c.env.is_empty());
        assert_eq!(c.argv[0], "orted");
        assert_eq!(c.argv[1], "--daemonize");
        let regex = c.argv.iter().position(|a| a == "orte_node_regex").unwrap();
        assert_eq!(c.argv[regex + 1], "[4:469]b9c11d81,[2:10].255.255.1@0(2)");
        assert_eq!(c.argv[regex + 3], "orte_hnp_uri");
        assert_eq!(
            c.argv[regex + 4],
            "3099131904.0;tcp://192.0.2.2:34807;tcp6://[fd00::2]:45793"
        );
        assert_eq!(c.argv.last().unwrap(), "/opt/prrte-k8s/bin/prrte-k8s-rsh");
        // Only that exact wrapper: another subshell is still refused.
        for bad in [
            "( test ! -r ./.profile || . ./.evil; orted )",
            "( orted )",
            "( test ! -r ./.profile || . ./.profile; orted ) ; /bin/x",
        ] {
            assert!(
                parse(bad).unwrap_err().to_string().contains("subshell"),
                "{bad}"
            );
        }
    }

    #[test]
    fn hydra_launcher_command() {
        let src = "\"/opt/m/bin/hydra_pmi_proxy\" --control-port 10.0.0.2:39129 --rmk user --launcher ssh --launcher-exec /usr/bin/prrte-k8s-rsh --demux poll --pgid 0 --retries 10 --usize -1 --proxy-id 0";
        let c = parse(src).unwrap();
        assert!(c.env.is_empty());
        assert_eq!(c.argv[0], "/opt/m/bin/hydra_pmi_proxy");
        assert_eq!(c.argv.len(), 19);
        assert_eq!(c.argv[2], "10.0.0.2:39129");
    }

    #[test]
    fn prefixes_launchers_use() {
        let c = parse("cd /work/dir && FOO=1 BAR='a b' exec /bin/prog x 'y z'").unwrap();
        assert_eq!(c.cwd.as_deref(), Some("/work/dir"));
        assert_eq!(c.env, env(&[("FOO", "1"), ("BAR", "a b")]));
        assert_eq!(c.argv, ["/bin/prog", "x", "y z"]);
        let c = parse("eval \"PATH=/x:\\$PATH\" /bin/prog '$HOME'").unwrap();
        assert_eq!(c.env, env(&[("PATH", "/x:${PATH}")]));
        assert_eq!(c.argv, ["/bin/prog", "${HOME}"]);
        let c = parse("env A=1 /bin/prog \"cost \\$5\" 'lit$x' a=b").unwrap();
        assert_eq!(c.env, env(&[("A", "1")]));
        assert_eq!(c.argv, ["/bin/prog", "cost $$5", "lit$$x", "a=b"]);
        let c = parse("export A=1 B; : ; true; /p  # comment").unwrap();
        assert_eq!(c.env, env(&[("A", "1")]));
        assert_eq!(c.argv, ["/p"]);
        let c = parse("'A=1' /p").unwrap();
        assert_eq!(c.argv, ["A=1", "/p"]);
    }

    #[test]
    fn shell_constructs_are_refused() {
        for (src, what) in [
            ("/p | cat", "`|`"),
            ("/p || x", "`|`"),
            ("/p > f", "redirection"),
            ("/p &", "background"),
            ("/p $(id)", "$(...)"),
            ("/p `id`", "backquotes"),
            ("/p \"`id`\"", "backquotes"),
            ("(/p)", "subshell"),
            ("/p *", "glob"),
            ("/p $?", "special parameter"),
            ("/p; /q", "nothing may follow"),
            ("A=1", "no program"),
            ("", "no program"),
            ("cd", "exactly one"),
            ("/p 'x", "unterminated"),
            ("/p \"x", "unterminated"),
        ] {
            let e = parse(src).unwrap_err().to_string();
            assert!(e.contains(what), "{src:?}: {e}");
        }
    }
}
