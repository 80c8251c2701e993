//! `prrte-k8s-rsh`: an ssh-compatible client that runs a command in a pod of the job through
//! that pod's agent (an `exec` request, see [`crate::protocol::exec`]) instead of sshd.
//!
//! `prrte-k8s-rsh [ssh options] HOST COMMAND...`: HOST is an IPv4 address of a pod, or a pod
//! name or host name of the job (found by the same discovery as `ras k8s`; a `user@` prefix and
//! a domain after the first dot are ignored). COMMAND's words are joined with spaces as ssh
//! does and parsed by `shell` (no shell runs anywhere). ssh's options are accepted; `-n`
//! (stdin from /dev/null) is honoured, the others are ignored. Output is streamed, stdin is
//! forwarded, SIGINT/SIGTERM/SIGHUP are forwarded to the remote process group, and the exit
//! status is the remote program's (128+N if a signal N ended it; 255 if the agent could not be
//! reached or refused, with the reason on stderr).
//!
//! Settings come from the environment, as ssh's come from its config (see
//! [`crate::settings`]): the job's secret file (`PRRTE_K8S_SECRET_FILE` or
//! `PRTE_MCA_plm_k8s_secret_file`, default `/etc/prrte-k8s/secret/key`), the agent port
//! (`PRRTE_K8S_AGENT_PORT` or `PRTE_MCA_plm_k8s_agent_port`, 7117),
//! `PRRTE_K8S_RSH_CONNECT_TIMEOUT` (seconds, 10), `PRTE_MCA_plm_k8s_heartbeat_interval` and
//! `_misses` (as the k8s PLM's: while the program runs, a `ping` every interval; an agent
//! silent for that many intervals means its pod is cut off, and the client exits 255 saying so,
//! while the agent, hearing no more pings, stops the program), and
//! `PRTE_MCA_ras_k8s_namespace`, `_selector` and `_kubeconfig` for resolving names. A bad value
//! is an error naming the variable.

mod error;
pub(crate) mod shell;

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::launch::{connect_authenticated, LaunchOptions, LaunchTarget};
use crate::protocol::exec::{decode_data, encode_data, CHUNK};
use crate::protocol::grammar::{SSH_FLAGS, SSH_OPTS_WITH_ARG};
use crate::protocol::liveness::{Heartbeat, HeartbeatSender, Lost};
use crate::protocol::{
    decode_message, recv_frame, send_frame, signal_name, ProtocolError, Reply, Request,
};
use crate::settings::{mca, tools, Setting, SettingError};
pub(crate) use error::{ResolveError, RshError, UsageError};

/// Exit status for our own failures (as ssh's).
pub(crate) const EXIT_FAILURE: i32 = 255;

/// The parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RshArgs {
    /// `-n`: stdin from /dev/null.
    pub(crate) no_stdin: bool,
    /// `-v`: report what is done on stderr.
    pub verbose: bool,
    pub host: String,
    /// The command's words joined with spaces, as ssh sends it.
    pub command: String,
}

/// Parses ssh-style arguments (without the program name).
pub(crate) fn parse_args(args: &[String]) -> Result<RshArgs, UsageError> {
    let mut no_stdin = false;
    let mut verbose = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            break;
        }
        let mut chars = a[1..].chars();
        while let Some(c) = chars.next() {
            if SSH_OPTS_WITH_ARG.contains(c) {
                if chars.as_str().is_empty() {
                    i += 1;
                    if i >= args.len() {
                        return Err(UsageError::MissingArgument(c));
                    }
                }
                break;
            } else if SSH_FLAGS.contains(c) {
                no_stdin |= c == 'n';
                verbose |= c == 'v';
            } else {
                return Err(UsageError::UnknownOption(c));
            }
        }
        i += 1;
    }
    let Some(host) = args.get(i) else {
        return Err(UsageError::NoHost);
    };
    let host = host.rsplit('@').next().unwrap_or(host).to_owned();
    let command = args[i + 1..].join(" ");
    if command.trim().is_empty() {
        return Err(UsageError::NoCommand(host));
    }
    Ok(RshArgs {
        no_stdin,
        verbose,
        host,
        command,
    })
}

/// The agent address for HOST: an IPv4 address as is, else the pod of the job whose name or
/// host name it is.
pub async fn resolve(host: &str, port: u16, timeout: Duration) -> Result<SocketAddr, ResolveError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let short = host.split('.').next().unwrap_or(host);
    let env = |k: &str| std::env::var(k).ok();
    let text = |s: &Setting| s.lookup(&env).map(|v| v.map(|(_, v)| v));
    let cfg = crate::discovery::DiscoveryConfig {
        namespace: text(&mca::NAMESPACE)?,
        selector: text(&mca::SELECTOR)?,
        expected_pods: None,
        timeout,
        kubeconfig: text(&mca::KUBECONFIG)?.map(Into::into),
        ..Default::default()
    };
    let env = crate::discovery::client::Environment::from_process();
    let alloc = crate::discovery::discover_with(&cfg, &env, &mut |_| {})
        .await
        .map_err(|source| ResolveError::Discovery {
            host: host.to_owned(),
            source,
        })?;
    alloc
        .nodes
        .iter()
        .find(|n| n.pod == host || n.hostname == host || n.pod == short || n.hostname == short)
        .map(|n| SocketAddr::new(IpAddr::V4(n.ip), port))
        .ok_or_else(|| ResolveError::NotAPod {
            host: host.to_owned(),
            pods: alloc
                .nodes
                .iter()
                .map(|n| format!("{} ({}, {})", n.pod, n.hostname, n.ip))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Where and how to reach the agents, from the environment.
struct Reach {
    secret_file: std::path::PathBuf,
    port: u16,
    connect_timeout: Duration,
    heartbeat: Heartbeat,
}

fn reach() -> Result<Reach, SettingError> {
    let env = |k: &str| std::env::var(k).ok();
    let path = |_: &Setting, v: &str| Ok(std::path::PathBuf::from(v));
    Ok(Reach {
        secret_file: mca::SECRET_FILE.from_env(&env, path)?.unwrap_or_default(),
        port: mca::AGENT_PORT
            .from_env(&env, Setting::port)?
            .unwrap_or(crate::protocol::DEFAULT_AGENT_PORT),
        connect_timeout: tools::RSH_CONNECT_TIMEOUT
            .from_env(&env, Setting::seconds)?
            .unwrap_or(Duration::from_secs(
                tools::RSH_CONNECT_TIMEOUT.default_u64(),
            )),
        heartbeat: Heartbeat::from_env(&env)?,
    })
}

/// Runs the whole client; returns the exit status.
pub async fn main(args: Vec<String>) -> i32 {
    let fail = |msg: String| {
        eprintln!("prrte-k8s-rsh: {msg}");
        EXIT_FAILURE
    };
    let args = match parse_args(&args) {
        Ok(a) => a,
        Err(e) => {
            return fail(format!(
                "{e}\nusage: prrte-k8s-rsh [ssh options] HOST COMMAND..."
            ))
        }
    };
    let command = match shell::parse(&args.command) {
        Ok(c) => c,
        Err(e) => return fail(format!("{}: {e}", args.host)),
    };
    let Reach {
        secret_file,
        port,
        connect_timeout,
        heartbeat,
    } = match reach() {
        Ok(r) => r,
        Err(e) => return fail(e.to_string()),
    };
    let secret = match crate::protocol::read_secret_file(&secret_file) {
        Ok(s) => s,
        Err(e) => {
            return fail(format!(
                "{e} (set {} to the job's secret)",
                mca::SECRET_FILE.var()
            ))
        }
    };
    let addr = match resolve(&args.host, port, Duration::from_secs(30)).await {
        Ok(a) => a,
        Err(e) => return fail(e.to_string()),
    };
    let target = LaunchTarget {
        id: 0,
        pod: args.host.clone(),
        addr,
    };
    let opts = LaunchOptions {
        secret: Some(secret),
        connect_timeout,
        request_timeout: Duration::from_secs(30),
        heartbeat,
        ..Default::default()
    };
    if args.verbose {
        eprintln!(
            "prrte-k8s-rsh: {} -> {addr}: argv {:?}, env {:?}, cwd {:?}",
            args.host, command.argv, command.env, command.cwd
        );
    }
    match run(&target, &opts, command, !args.no_stdin).await {
        Ok(code) => code,
        Err(e) => fail(format!("{}: {e}", args.host)),
    }
}

/// Sends the exec request and serves the session until the remote program ends; returns the
/// exit status to exit with.
pub async fn run(
    target: &LaunchTarget,
    opts: &LaunchOptions,
    command: shell::RemoteCommand,
    forward_stdin: bool,
) -> Result<i32, RshError> {
    let (mut conn, mut session) = connect_authenticated(target, opts).await?;
    let request = Request::Exec {
        argv: command.argv,
        env: command.env,
        cwd: command.cwd,
        stdin: forward_stdin,
    };
    let timeout = opts.request_timeout;
    send_frame(&mut conn, session.seal(&request), timeout)
        .await
        .map_err(RshError::SendCommand)?;

    let mut sig_rx = catch_signals()?;
    let (stdin_tx, mut stdin_rx) = mpsc::channel::<Option<Vec<u8>>>(16);
    let mut started = false;
    let mut stdin_open = false;
    let deadline = Instant::now() + timeout;
    // Heartbeats once the program runs.
    let mut beats = HeartbeatSender::idle(opts.heartbeat);
    loop {
        tokio::select! {
            _ = beats.due() => match beats.beat(&mut conn, &mut session, timeout).await {
                Ok(()) => {}
                Err(Lost::Silent(s)) => {
                    return Err(RshError::Silent {
                        silent: s.silent.as_secs_f64(),
                        misses: s.heartbeat.misses,
                        interval: s.heartbeat.interval.as_secs(),
                    })
                }
                Err(Lost::Send(e)) => return Err(RshError::Heartbeat(e)),
            },
            frame = recv_frame(&mut conn, (!started).then(|| deadline.saturating_duration_since(Instant::now()))) => {
                beats.heard();
                let frame = match frame {
                    Ok(f) => f,
                    Err(ProtocolError::Timeout(_)) => return Err(RshError::NoAnswer(timeout)),
                    Err(ProtocolError::Closed) => return Err(RshError::Closed),
                    Err(e) => return Err(RshError::Lost(e)),
                };
                let reply = session
                    .open(&frame)
                    .and_then(|body| decode_message::<Reply>(body.as_bytes()))
                    .map_err(RshError::Protocol)?;
                match reply {
                    Reply::Started { .. } => {
                        started = true;
                        // The first heartbeat at once: it tells the agent that this client
                        // sends them.
                        beats.begin();
                        if forward_stdin {
                            stdin_open = true;
                            let tx = stdin_tx.clone();
                            std::thread::spawn(move || read_stdin(tx));
                        }
                    }
                    Reply::Failed { reason } if !started => {
                        return Err(RshError::Refused(reason))
                    }
                    Reply::Failed { reason } => eprintln!("prrte-k8s-rsh: the agent: {reason}"),
                    Reply::Output { fd, data } => write_output(fd, &data)?,
                    Reply::Exited { code, signal, .. } => return Ok(exit_status(code, signal)),
                    Reply::Error { reason } => return Err(RshError::Reported(reason)),
                    Reply::Pong {} | Reply::Status { .. } | Reply::Ack {} | Reply::Preempt { .. } => {}
                }
            }
            Some(chunk) = stdin_rx.recv(), if stdin_open => {
                let msg = match chunk {
                    Some(bytes) => Request::Stdin { data: encode_data(&bytes) },
                    None => {
                        stdin_open = false;
                        Request::StdinClose {}
                    }
                };
                send_frame(&mut conn, session.seal(&msg), timeout)
                    .await
                    .map_err(RshError::Stdin)?;
            }
            Some(num) = sig_rx.recv() => {
                if !started {
                    // Nothing runs yet: ending the connection makes the agent stop whatever
                    // it starts.
                    return Ok(128 + num);
                }
                send_frame(&mut conn, session.seal(&Request::Signal { signal: num }), timeout)
                    .await
                    .map_err(|source| RshError::Signal { signal: signal_name(num), source })?;
            }
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP to this process, by number, to forward to the remote program.
fn catch_signals() -> Result<mpsc::UnboundedReceiver<i32>, RshError> {
    let mut signals = Vec::new();
    for kind in [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
    ] {
        signals.push(signal(kind).map_err(RshError::Signals)?);
    }
    let (sig_tx, sig_rx) = mpsc::unbounded_channel::<i32>();
    for (mut s, num) in signals.into_iter().zip([2, 15, 1]) {
        let tx = sig_tx.clone();
        tokio::spawn(async move {
            while s.recv().await.is_some() {
                if tx.send(num).is_err() {
                    break;
                }
            }
        });
    }
    Ok(sig_rx)
}

/// Writes the remote program's output (`fd` 2: to stderr, else stdout), flushed.
fn write_output(fd: u8, data: &str) -> Result<(), RshError> {
    let bytes = decode_data(data)?;
    let _ = if fd == 2 {
        let mut e = std::io::stderr().lock();
        e.write_all(&bytes).and_then(|_| e.flush())
    } else {
        let mut o = std::io::stdout().lock();
        o.write_all(&bytes).and_then(|_| o.flush())
    };
    Ok(())
}

/// The status to exit with for the remote program's: 128 + N for a signal N, as ssh does.
fn exit_status(code: Option<i32>, signal: Option<i32>) -> i32 {
    match (code, signal) {
        (_, Some(s)) => 128 + s,
        (Some(c), None) => c & 0xff,
        (None, None) => EXIT_FAILURE,
    }
}

fn read_stdin(tx: mpsc::Sender<Option<Vec<u8>>>) {
    use std::io::Read;
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; CHUNK];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) | Err(_) => {
                let _ = tx.blocking_send(None);
                return;
            }
            Ok(n) => {
                if tx.blocking_send(Some(buf[..n].to_vec())).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn ssh_options_are_accepted() {
        let a = parse_args(&v(&["-x", "10.0.0.3", "/p", "a b", "c"])).unwrap();
        assert_eq!(a.host, "10.0.0.3");
        assert_eq!(a.command, "/p a b c");
        assert!(!a.no_stdin);
        let a = parse_args(&v(&[
            "-o",
            "StrictHostKeyChecking=no",
            "-p22",
            "-l",
            "mpi",
            "-qnT",
            "u@pod-1",
            "x",
        ]))
        .unwrap();
        assert_eq!((a.host.as_str(), a.no_stdin), ("pod-1", true));
        let a = parse_args(&v(&["--", "-h", "cmd"])).unwrap();
        assert_eq!(a.host, "-h");
        let e = |args: &[&str]| parse_args(&v(args)).unwrap_err().to_string();
        assert!(e(&["-Z", "h", "x"]).contains("-Z"));
        assert!(e(&["h"]).contains("no command"));
        assert!(e(&["-o"]).contains("argument"));
        assert!(e(&[]).contains("no host"));
    }
}
