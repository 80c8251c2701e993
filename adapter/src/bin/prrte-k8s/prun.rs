//! `prrte-k8s prun`: PRRTE's prun against the job's DVM, and its job ended in the DVM when prun
//! is interrupted or runs out of time (`--timeout`).
//!
//! PRRTE 3.0.8's prun does not catch SIGINT, SIGTERM or SIGHUP, and the DVM does not end a job
//! when the tool that spawned it goes away: a prun killed mid-job leaves its job running, holding
//! its slots, and every later prun that needs them fails with "All nodes which are allocated for
//! this job are already filled". So prun runs as our child, its job carries a process set name
//! of ours (`--pset`), and when we get one of those signals we look the job up in the DVM by
//! that name (PMIx's `pquery`) and kill it there (PMIx's `pctrl --kill`), which releases its
//! slots; then prun ends by itself. When a prun fails because the DVM's slots are filled, we say
//! which jobs hold them and how to end them.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::signal::unix::{signal, SignalKind};

use clap::Args;
use prrte_k8s::settings::{tools as settings_tools, ArgExt};

use crate::tools::{read_dvm_uri, tool_argv, tool_path, ToolArgs};
use crate::{seconds_of, Seconds};

#[derive(Args, Debug)]
pub struct PrunArgs {
    #[arg(long, setting = &settings_tools::PRUN_TIMEOUT, value_parser = seconds_of(&settings_tools::PRUN_TIMEOUT))]
    pub timeout: Option<Seconds>,
    #[command(flatten)]
    pub tool: ToolArgs,
}

/// Exit status when the job ran out of time (as timeout(1)).
pub const TIMED_OUT: i32 = 124;

/// PRRTE's message when a job cannot be mapped because the allocation is used up.
pub const SLOTS_FILLED: &str = "are already filled";
/// The error prun reports then (alone once PRRTE has shown its message in this DVM before).
pub const FAILED_TO_MAP: &str = "PMIX_ERR_JOB_FAILED_TO_MAP";
/// How long to look for the job of an interrupted prun (it may still be being spawned).
const FIND_JOB_FOR: Duration = Duration::from_secs(5);
/// Bound for one pquery/pctrl run.
const PMIX_TOOL_LIMIT: Duration = Duration::from_secs(10);
/// How long a killed job may take to leave the DVM (its slots are free then).
const JOB_GONE_WITHIN: Duration = Duration::from_secs(20);
/// How long prun gets to end after its job was killed, before it is signalled itself.
const PRUN_EXIT_GRACE: Duration = Duration::from_secs(15);

/// The process set name the user gave (`--pset NAME` or `--pset=NAME`), if any. It is an option
/// of an application context, so only arguments before the executable count; we look at all of
/// them, which at worst finds the name of a later context of the same job.
pub fn user_pset(user: &[OsString]) -> Option<String> {
    let mut it = user.iter().map(|a| a.to_string_lossy());
    while let Some(a) = it.next() {
        if a == "--pset" {
            return it.next().map(|v| v.into_owned());
        }
        if let Some(v) = a.strip_prefix("--pset=") {
            return Some(v.to_owned());
        }
    }
    None
}

/// A process set name unique to this prun.
pub fn our_pset() -> String {
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(
        "prrte-k8s-prun-{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// prun's arguments: the DVM URI (and `--allow-run-as-root` for root) first, then our
/// `--pset NAME` (unless the user named one), then the user's arguments.
pub fn prun_argv(file: &Path, root: bool, pset: Option<&str>, user: &[OsString]) -> Vec<OsString> {
    let mut argv = tool_argv("prun", file, root, &[]);
    if let Some(p) = pset {
        argv.push("--pset".into());
        argv.push(p.into());
    }
    argv.extend(user.iter().cloned());
    argv
}

/// The job namespace in `pquery`'s answer to a process set membership query (lines
/// `PROC: <nspace>:<rank>`).
pub fn parse_pset_job(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let proc_ = l.trim().strip_prefix("PROC:")?.trim();
        let (ns, rank) = proc_.rsplit_once(':')?;
        (!ns.is_empty() && rank.parse::<u32>().is_ok()).then(|| ns.to_owned())
    })
}

/// The job namespaces in `pquery`'s answer to a namespace query (one indented name a line),
/// without the DVM's own (`...@0`).
pub fn parse_jobs(text: &str) -> Vec<String> {
    let mut seen = false;
    let mut jobs = Vec::new();
    for l in text.lines() {
        if l.starts_with("PMIX_QUERY_NAMESPACES") {
            seen = true;
            continue;
        }
        let name = l.trim();
        if seen && l.starts_with(char::is_whitespace) && name.contains('@') && !name.ends_with("@0")
        {
            jobs.push(name.to_owned());
        }
    }
    jobs
}

/// How to end a job in the DVM with PMIx's `pctrl`.
pub fn kill_command(file: &Path, nspace: &str) -> String {
    format!(
        "{} --uri file:{} --kill --targets '{nspace}:*'",
        tool_path("pctrl").display(),
        file.display()
    )
}

/// What to tell a user whose prun failed because the DVM's slots are taken.
pub fn filled_hint(file: &Path, jobs: &[String]) -> String {
    let mut s = String::from(
        "prrte-k8s prun: the DVM has no free slots for this job (or cannot map it). If you are not \
         running another job now, a job that was killed or hung still holds them (a prun killed without prrte-k8s \
         prun, or the short-job hang of an unpatched PRRTE 3.0.8: see \
         docs/prrte-short-job-hang.md).",
    );
    match jobs {
        [] => s.push_str(" Stop the DVM with `prrte-k8s pterm` and start a new one."),
        _ => {
            s.push_str(&format!(
                " Jobs in the DVM: {}. End one with\n    ",
                jobs.join(", ")
            ));
            s.push_str(&kill_command(file, &jobs[0]));
            s.push_str("\nor stop the DVM with `prrte-k8s pterm` and start a new one.");
        }
    }
    s
}

/// Why the job of an interrupted prun could not be ended in the DVM; each says how to end it.
#[derive(Debug, thiserror::Error)]
pub enum EndJobError {
    #[error("cannot run {}: {source} ({})", path.display(), crate::tools::tool_remedy("it"))]
    CannotRun {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{tool}: {source}")]
    Tool {
        tool: &'static str,
        source: std::io::Error,
    },
    #[error("{tool} did not answer within {PMIX_TOOL_LIMIT:?}")]
    ToolTimeout { tool: &'static str },
    #[error(
        "the DVM knows no job with process set {pset} (it was not started); pquery said: {said}"
    )]
    NoSuchJob { pset: String, said: String },
    #[error(
        "job {nspace} was killed but is still in the DVM after {JOB_GONE_WITHIN:?}; end it \
         with\n    {kill}"
    )]
    StillThere { nspace: String, kill: String },
    #[error("the DVM refused to kill job {nspace}: {said}; end it with\n    {kill}")]
    Refused {
        nspace: String,
        said: String,
        kill: String,
    },
}

/// Runs a PMIx tool to completion (bounded); its stdout and stderr together.
async fn pmix_tool(tool: &'static str, args: &[String]) -> Result<(bool, String), EndJobError> {
    let path = tool_path(tool);
    let child = Command::new(&path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| EndJobError::CannotRun { path, source })?;
    match tokio::time::timeout(PMIX_TOOL_LIMIT, child.wait_with_output()).await {
        Ok(Ok(o)) => Ok((
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )),
        Ok(Err(source)) => Err(EndJobError::Tool { tool, source }),
        Err(_) => Err(EndJobError::ToolTimeout { tool }),
    }
}

/// Finds the job of process set `pset` in the DVM (retrying while it may still be spawned).
async fn find_job(uri_arg: &str, pset: &str) -> Result<String, EndJobError> {
    let query = vec![
        "--uri".to_owned(),
        uri_arg.to_owned(),
        format!("pmix.qry.pmems[pmix.pset.nm={pset}]"),
    ];
    let deadline = tokio::time::Instant::now() + FIND_JOB_FOR;
    loop {
        let (_, out) = pmix_tool("pquery", &query).await?;
        if let Some(ns) = parse_pset_job(&out) {
            return Ok(ns);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(EndJobError::NoSuchJob {
                pset: pset.to_owned(),
                said: out.trim().to_owned(),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Lists the jobs in the DVM (best effort). PMIx 5.0.5's pquery crashes (SIGSEGV, no output) when
/// the DVM has no job at all, which reads here as the empty list it is.
async fn list_jobs(uri_arg: &str) -> Vec<String> {
    match pmix_tool(
        "pquery",
        &[
            "--uri".to_owned(),
            uri_arg.to_owned(),
            "pmix.qry.ns".to_owned(),
        ],
    )
    .await
    {
        Ok((_, out)) => parse_jobs(&out),
        Err(_) => Vec::new(),
    }
}

/// How the job of an interrupted prun left the DVM.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// We killed it (its namespace).
    Killed(String),
    /// It was not (or no longer) in the DVM: the DVM ends the job of a prun that went away
    /// before it, or the job never started.
    Gone(Option<String>),
}

/// Ends the job of process set `pset` in the DVM.
async fn end_job(file: &Path, pset: &str) -> Result<Ended, EndJobError> {
    let uri_arg = format!("file:{}", file.display());
    let ns = match find_job(&uri_arg, pset).await {
        Ok(ns) => ns,
        Err(EndJobError::NoSuchJob { .. }) => return Ok(Ended::Gone(None)),
        Err(e) => return Err(e),
    };
    let (ok, out) = pmix_tool(
        "pctrl",
        &[
            "--uri".to_owned(),
            uri_arg.clone(),
            "--kill".to_owned(),
            "--targets".to_owned(),
            format!("{ns}:*"),
        ],
    )
    .await?;
    let granted = ok && out.contains("granted");
    // The DVM frees the job's slots when it has recorded the job's end: wait for that, so that a
    // prun started after we exit finds them free. A refused kill of a job that has left the DVM
    // meanwhile (the DVM ended it as its prun went away) is no failure.
    let deadline = tokio::time::Instant::now() + JOB_GONE_WITHIN;
    while list_jobs(&uri_arg).await.contains(&ns) {
        if !granted {
            return Err(EndJobError::Refused {
                said: out.trim().to_owned(),
                kill: kill_command(file, &ns),
                nspace: ns,
            });
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(EndJobError::StillThere {
                kill: kill_command(file, &ns),
                nspace: ns,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(if granted {
        Ended::Killed(ns)
    } else {
        Ended::Gone(Some(ns))
    })
}

enum Outcome {
    Exited(std::process::ExitStatus),
    Signalled(i32),
    TimedOut(Duration),
}

fn exit_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(1))
}

/// Runs prun against the job's DVM; see the module documentation.
pub fn run(args: PrunArgs) -> i32 {
    if let Err(e) = read_dvm_uri(&args.tool.file) {
        eprintln!("prrte-k8s prun: error: {e}");
        return 1;
    }
    let rt = match prrte_k8s::runtime::current_thread() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("prrte-k8s prun: error: cannot start: {e}");
            return 1;
        }
    };
    rt.block_on(run_async(args.tool, args.timeout.map(|s| s.0)))
}

/// Waits until `limit` has passed (forever without one).
async fn deadline(limit: Option<Duration>) {
    match limit {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

async fn run_async(args: ToolArgs, limit: Option<Duration>) -> i32 {
    let (pset, ours) = match user_pset(&args.args) {
        Some(p) => (p, false),
        None => (our_pset(), true),
    };
    let path = tool_path("prun");
    let root = nix::unistd::geteuid().is_root();
    let argv = prun_argv(&args.file, root, ours.then_some(pset.as_str()), &args.args);
    let (mut sigint, mut sigterm, mut sighup) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        _ => {
            eprintln!("prrte-k8s prun: error: cannot install signal handlers");
            return 1;
        }
    };
    let mut child = match Command::new(&path)
        .args(&argv)
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "prrte-k8s prun: error: cannot run {}: {e}; {}",
                path.display(),
                crate::tools::tool_remedy("prun")
            );
            return 127;
        }
    };
    let relay = relay_stderr(child.stderr.take().expect("piped stderr"));
    // Signals first: on a terminal's Ctrl-C prun and we get SIGINT together, and prun's exit
    // must not hide ours.
    let outcome = tokio::select! {
        biased;
        _ = sigint.recv() => Outcome::Signalled(libc_sig(nix::sys::signal::Signal::SIGINT)),
        _ = sigterm.recv() => Outcome::Signalled(libc_sig(nix::sys::signal::Signal::SIGTERM)),
        _ = sighup.recv() => Outcome::Signalled(libc_sig(nix::sys::signal::Signal::SIGHUP)),
        st = child.wait() => match st {
            Ok(st) => Outcome::Exited(st),
            Err(e) => {
                eprintln!("prrte-k8s prun: error: waiting for prun: {e}");
                return 1;
            }
        },
        _ = deadline(limit) => Outcome::TimedOut(limit.unwrap_or_default()),
    };
    match outcome.prun_killed_as_interrupted() {
        Outcome::Exited(st) => {
            let filled = relay.await.unwrap_or(false);
            let code = exit_code(st);
            if code != 0 && filled {
                let jobs = list_jobs(&format!("file:{}", args.file.display())).await;
                eprintln!("{}", filled_hint(&args.file, &jobs));
            }
            code
        }
        Outcome::Signalled(sig) => {
            eprintln!("prrte-k8s prun: interrupted (signal {sig}): ending the job in the DVM");
            end_job_and_prun(&args.file, &pset, &mut child).await;
            let _ = relay.await;
            128 + sig
        }
        Outcome::TimedOut(d) => {
            eprintln!(
                "prrte-k8s prun: the job did not end within {} s (--timeout): ending it in the DVM",
                d.as_secs_f64()
            );
            end_job_and_prun(&args.file, &pset, &mut child).await;
            let _ = relay.await;
            TIMED_OUT
        }
    }
}

/// Kills the job of process set `pset` in the DVM, then waits for prun to end (ending it if
/// it does not).
async fn end_job_and_prun(file: &Path, pset: &str, child: &mut tokio::process::Child) {
    match end_job(file, pset).await {
        Ok(Ended::Killed(ns)) => {
            eprintln!("prrte-k8s prun: job {ns} killed in the DVM; its slots are free again")
        }
        Ok(Ended::Gone(ns)) => eprintln!(
            "prrte-k8s prun: {} no longer in the DVM (the DVM ends the job of a prun that went \
             away, or it never started); its slots are free",
            ns.map(|n| format!("job {n} is"))
                .unwrap_or_else(|| "this prun's job is".into())
        ),
        Err(e) => eprintln!("prrte-k8s prun: error: {e}"),
    }
    end_prun(child).await;
}

/// Copies prun's stderr to ours; the task's result tells whether prun said its slots were
/// filled (it keeps the tail of what it copied to recognise that).
fn relay_stderr(mut err: tokio::process::ChildStderr) -> tokio::task::JoinHandle<bool> {
    tokio::spawn(async move {
        let mut out = tokio::io::stderr();
        let mut tail = String::new();
        let mut buf = [0u8; 8192];
        let mut filled = false;
        while let Ok(n) = err.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let _ = out.write_all(&buf[..n]).await;
            let _ = out.flush().await;
            tail.push_str(&String::from_utf8_lossy(&buf[..n]));
            filled |= tail.contains(SLOTS_FILLED) || tail.contains(FAILED_TO_MAP);
            if tail.len() > 4096 {
                tail.drain(..tail.len() - 256);
            }
        }
        filled
    })
}

/// After its job was ended: prun ends when its job does; if it does not, end it (SIGTERM, then
/// SIGKILL).
async fn end_prun(child: &mut tokio::process::Child) {
    if tokio::time::timeout(PRUN_EXIT_GRACE, child.wait())
        .await
        .is_err()
    {
        if let Some(pid) = child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        if tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .is_err()
        {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

impl Outcome {
    /// prun killed by a signal (Ctrl-C reached it first, or someone killed it) leaves its job
    /// running in the DVM just as our own interruption would: it is handled the same way.
    fn prun_killed_as_interrupted(self) -> Outcome {
        match self {
            Outcome::Exited(st) => match std::os::unix::process::ExitStatusExt::signal(&st) {
                Some(sig) => {
                    eprintln!("prrte-k8s prun: prun was killed by signal {sig}");
                    Outcome::Signalled(sig)
                }
                None => Outcome::Exited(st),
            },
            o => o,
        }
    }
}

fn libc_sig(s: nix::sys::signal::Signal) -> i32 {
    s as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn user_pset_forms() {
        assert_eq!(
            user_pset(&os(&["-n", "2", "--pset", "mine", "./a"])),
            Some("mine".into())
        );
        assert_eq!(user_pset(&os(&["--pset=x", "./a"])), Some("x".into()));
        assert_eq!(user_pset(&os(&["-n", "2", "./a", "--psetx"])), None);
    }

    #[test]
    fn argv_puts_the_pset_before_the_user_arguments() {
        let a = prun_argv(
            Path::new("/u"),
            true,
            Some("p1"),
            &os(&["-n", "2", "hostname"]),
        );
        assert_eq!(
            a,
            os(&[
                "--dvm-uri",
                "file:/u",
                "--allow-run-as-root",
                "--pset",
                "p1",
                "-n",
                "2",
                "hostname"
            ])
        );
        let a = prun_argv(
            Path::new("/u"),
            false,
            None,
            &os(&["--pset", "q", "-n", "1", "true"]),
        );
        assert_eq!(
            a,
            os(&["--dvm-uri", "file:/u", "--pset", "q", "-n", "1", "true"])
        );
    }

    #[test]
    fn our_psets_differ() {
        assert_ne!(our_pset(), our_pset());
        assert!(our_pset().starts_with("prrte-k8s-prun-"));
    }

    #[test]
    fn pquery_answers_parse() {
        // pquery 5.0.5 prints the key on stdout and the value on stderr.
        let members = "PMIX_QUERY_PSET_MEMBERSHIP: \n   PMIX_VALUE:  Data type: PMIX_DATA_ARRAY\tType: PMIX_PROC\tSize: 2\n  PROC: prte-vm-14508@3:0\n  PROC: prte-vm-14508@3:1\n";
        assert_eq!(parse_pset_job(members).as_deref(), Some("prte-vm-14508@3"));
        assert_eq!(
            parse_pset_job("PMIx_Query_info returned: PMIX_ERR_NOT_FOUND\n"),
            None
        );
        let ns = "PMIX_QUERY_NAMESPACES: \n    prte-vm-1@0\n    prte-vm-1@2\n    prte-vm-1@5\n";
        assert_eq!(
            parse_jobs(ns),
            vec!["prte-vm-1@2".to_string(), "prte-vm-1@5".to_string()]
        );
        assert!(parse_jobs("Query returned zero results\n").is_empty());
    }

    #[test]
    fn the_filled_hint_names_cause_jobs_and_remedy() {
        let h = filled_hint(Path::new("/run/dvm.uri"), &["prte-x@4".to_string()]);
        assert!(
            h.contains("killed or hung") && h.contains("prte-x@4"),
            "{h}"
        );
        assert!(
            h.contains("--uri file:/run/dvm.uri --kill --targets 'prte-x@4:*'"),
            "{h}"
        );
        assert!(h.contains("prrte-k8s pterm"), "{h}");
        let h = filled_hint(Path::new("/run/dvm.uri"), &[]);
        assert!(h.contains("prrte-k8s pterm") && !h.contains("pctrl"), "{h}");
    }
}
