//! `exec` requests through the real agent and the real `prrte-k8s-rsh`: only allowlisted
//! programs start, output/stdin/exit status/signals travel, and a client that goes away takes
//! the remote process group with it.
#![forbid(unsafe_code)]

mod agent_support;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use agent_support::{alive, all_gone, wait_for, AgentProc, RawClient, TestDir, STEP, WAIT};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use prrte_k8s::protocol::{exec::encode_data, send_frame, Reply, Request};

const RSH: &str = env!("CARGO_BIN_EXE_prrte-k8s-rsh");

/// The remote test program: `--io WORD CODE` prints, reads stdin and exits CODE; `--wait`
/// starts a `sleep` in its process group and waits.
const PROG: &str = r#"#!/bin/sh
d='@DIR@'
echo $$ > "$d/prog.tmp"; mv "$d/prog.tmp" "$d/prog.pid"
case "$1" in
  --io) echo "out $2 PFX=$PRTE_PREFIX PWD=$(pwd)"; echo "err line" >&2; cat; exit "$3" ;;
  --wait) sleep 1000 & echo $! > "$d/sleep.tmp"; mv "$d/sleep.tmp" "$d/sleep.pid"; wait ;;
esac
"#;

fn setup(allow: bool) -> (TestDir, AgentProc, String) {
    setup_with(allow, &[])
}

fn setup_with(allow: bool, more: &[&str]) -> (TestDir, AgentProc, String) {
    let td = TestDir::new();
    let prog = td.path("prog");
    std::fs::write(
        &prog,
        PROG.replace("@DIR@", td.dir.path().to_str().unwrap()),
    )
    .unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let prog = prog.display().to_string();
    let mut extra: Vec<&str> = if allow {
        vec!["--exec-allow", prog.as_str()]
    } else {
        vec![]
    };
    extra.extend(more);
    let agent = AgentProc::spawn(&td, &extra);
    (td, agent, prog)
}

fn rsh(td: &TestDir, agent: &AgentProc, args: &[&str]) -> Command {
    let mut c = Command::new(RSH);
    c.args(args)
        .env("PRRTE_K8S_SECRET_FILE", &td.secret_file)
        .env("PRRTE_K8S_AGENT_PORT", agent.addr.port().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn run(mut c: Command, stdin: &[u8]) -> Output {
    c.stdin(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    wait_output(child)
}

fn wait_output(child: Child) -> Output {
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output().unwrap()));
    match rx.recv_timeout(WAIT) {
        Ok(o) => o,
        Err(_) => {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            panic!("prrte-k8s-rsh did not end within {WAIT:?}");
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_program_not_on_the_allowlist_is_refused_and_nothing_starts() {
    let (td, agent, prog) = setup(false);
    let marker = td.path("started");
    for cmd in [
        vec![prog.clone(), "--io".into(), "x".into(), "0".into()],
        vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("'touch {}'", marker.display()),
        ],
        vec!["touch".into(), marker.display().to_string()],
    ] {
        let mut args = vec!["-x", "127.0.0.1"];
        args.extend(cmd.iter().map(|s| s.as_str()));
        let o = run(rsh(&td, &agent, &args), b"");
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(255), "{err}");
        assert!(
            err.contains("refused") && err.contains("not on the allowlist"),
            "{err}"
        );
        assert!(err.contains(&td.prted.display().to_string()), "{err}");
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(!td.path("prog.pid").exists(), "the program ran");
    assert!(!marker.exists(), "a shell ran");
    assert_eq!(td.launches(), 0, "prted ran");
    // The shell syntax a launcher never needs is refused by the client before connecting.
    let o = run(rsh(&td, &agent, &["127.0.0.1", &prog, "|", "cat"]), b"");
    assert_eq!(o.status.code(), Some(255));
    assert!(text(&o.stderr).contains("`|`"), "{}", text(&o.stderr));
}

#[test]
fn output_stdin_environment_and_exit_status_travel() {
    let (td, agent, prog) = setup(true);
    let cwd = td.dir.path().display().to_string();
    // As a launcher sends it: one shell-quoted string with prefixes (an installation prefix
    // is taken when it is the program's own; a search path never).
    let remote = format!(
        "cd {cwd} && PRTE_PREFIX='{cwd}' LD_LIBRARY_PATH=/x:$LD_LIBRARY_PATH exec '{prog}' --io \"hello world\" 7"
    );
    let o = run(rsh(&td, &agent, &["-x", "-n", "127.0.0.1", &remote]), b"");
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(7), "{out}{err}");
    assert_eq!(out, format!("out hello world PFX={cwd} PWD={cwd}\n"));
    assert_eq!(err, "err line\n");
    // stdin is forwarded until its end.
    let o = run(
        rsh(&td, &agent, &["127.0.0.1", &prog, "--io", "x", "0"]),
        b"line 1\nline 2\n",
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).ends_with("line 1\nline 2\n"),
        "{}",
        text(&o.stdout)
    );
    // Any other variable is refused with the reason; nothing starts.
    std::fs::remove_file(td.path("prog.pid")).unwrap();
    for var in [
        "LD_PRELOAD=/x.so",
        "FOO=1",
        "HOME=/tmp",
        "PRTE_SYSCONFDIR=/tmp",
    ] {
        let o = run(
            rsh(&td, &agent, &["127.0.0.1", var, &prog, "--io", "x", "0"]),
            b"",
        );
        assert_eq!(o.status.code(), Some(255));
        let name = var.split('=').next().unwrap();
        assert!(
            text(&o.stderr).contains(name) && text(&o.stderr).contains("not allowed"),
            "{}",
            text(&o.stderr)
        );
    }
    assert!(!td.path("prog.pid").exists());
}

#[test]
fn a_signal_reaches_the_remote_group_and_its_status_comes_back() {
    let (td, agent, prog) = setup(true);
    let child = rsh(&td, &agent, &["-n", "127.0.0.1", &prog, "--wait"])
        .spawn()
        .unwrap();
    let prog_pid = td.wait_pid("prog.pid");
    let sleep_pid = td.wait_pid("sleep.pid");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let o = wait_output(child);
    assert_eq!(o.status.code(), Some(128 + 15), "{}", text(&o.stderr));
    assert!(all_gone(&[prog_pid, sleep_pid], WAIT));
    assert!(
        agent
            .wait_log(WAIT, |v| v["message"]
                .as_str()
                .is_some_and(|m| m.contains("forwarding a signal")))
            .is_some(),
        "{:?}",
        agent.logs()
    );
}

#[test]
fn killing_the_client_kills_the_remote_process_group() {
    let (td, agent, prog) = setup(true);
    let mut child = rsh(&td, &agent, &["-n", "127.0.0.1", &prog, "--wait"])
        .spawn()
        .unwrap();
    let prog_pid = td.wait_pid("prog.pid");
    let sleep_pid = td.wait_pid("sleep.pid");
    assert!(alive(prog_pid) && alive(sleep_pid));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        all_gone(&[prog_pid, sleep_pid], WAIT),
        "the remote program or its child survived the client"
    );
    assert!(wait_for(WAIT, || agent
        .logs()
        .iter()
        .any(|l| l.contains("the client went away"))
        .then_some(()))
    .is_some());
}

/// Starts `prog --wait` (which never reads its stdin) through a raw exec request with stdin.
async fn exec_waiting(agent: &AgentProc, td: &TestDir, prog: &str) -> RawClient {
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let reply = c
        .request(&Request::Exec {
            argv: vec![prog.into(), "--wait".into()],
            env: vec![],
            cwd: None,
            stdin: true,
        })
        .await;
    assert!(matches!(reply, Reply::Started { .. }), "{reply:?}");
    c
}

/// A client pushes 100 × 32 KiB of stdin to a program that never reads it, then goes away: its
/// program is stopped within the kill grace (1 s here) all the same, and its --max-exec place
/// is free again. (Before, the connection's loop waited on the full stdin queue, saw neither
/// the end of the connection nor a kill, and the program ran on holding its place.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_floods_stdin_and_goes_away_takes_its_program_along() {
    let (td, agent, prog) = setup_with(true, &["--max-exec", "1"]);
    let mut c = exec_waiting(&agent, &td, &prog).await;
    let (prog_pid, sleep_pid) = (td.wait_pid("prog.pid"), td.wait_pid("sleep.pid"));
    let chunk = encode_data(&[b'x'; 32 * 1024]);
    let push = async {
        for _ in 0..100 {
            let frame = c.session.seal(&Request::Stdin {
                data: chunk.clone(),
            });
            if send_frame(&mut c.conn, frame, STEP).await.is_err() {
                break;
            }
        }
    };
    // The agent may end the exec (stdin overrun) before the last frame: sends may fail then.
    let _ = tokio::time::timeout(Duration::from_secs(10), push).await;
    let gone_at = std::time::Instant::now();
    drop(c);
    assert!(
        all_gone(&[prog_pid, sleep_pid], Duration::from_secs(4)),
        "the program outlived its client by {:?}",
        gone_at.elapsed()
    );
    // Its place is free: the next exec starts.
    std::fs::remove_file(td.path("sleep.pid")).unwrap();
    let c = exec_waiting(&agent, &td, &prog).await;
    let next = td.wait_pid("sleep.pid");
    drop(c);
    assert!(all_gone(&[next], WAIT));
}

/// A program that does not read stdin while its client sends a little: the client's `kill`
/// still gets through at once.
#[tokio::test]
async fn kill_gets_through_while_stdin_waits() {
    let (td, agent, prog) = setup(true);
    let mut c = exec_waiting(&agent, &td, &prog).await;
    let sleep_pid = td.wait_pid("sleep.pid");
    let chunk = encode_data(&[b'y'; 32 * 1024]);
    for _ in 0..8 {
        c.send(&Request::Stdin {
            data: chunk.clone(),
        })
        .await;
    }
    c.send(&Request::Kill { grace_ms: None }).await;
    let reply = loop {
        match c.recv(STEP).await.unwrap() {
            Reply::Output { .. } => continue,
            other => break other,
        }
    };
    assert!(matches!(reply, Reply::Exited { .. }), "{reply:?}");
    assert!(!alive(sleep_pid) || all_gone(&[sleep_pid], WAIT));
}
