//! Forged allocation answers (`PRTE_RML_TAG_SCHED_RESP`, patch 0003) delivered to the daemons
//! of a running DVM by a peer on its network (`sandbox::forge`), against the PRRTE of
//! `PRRTE_K8S_PREFIX`: a DVM on this machine of `prte` and one `prted` (started by a stand-in
//! for ssh, in a UTS namespace of its own named `forge-node`), each with its own TMPDIR.
//!
//! A daemon must drop an answer on the DVM master, from any origin but the master, and for a
//! request it did not relay or already has an answer for, and must never size an info array
//! for a count off the wire (an answer's, or a relayed request's on the master): each forged
//! answer here is dropped with its reason in the daemon's output, a forged request with a huge
//! count is refused, and the DVM still runs a job on both nodes afterwards. The counts include
//! one whose info array size wraps around (2^61 + 1 times `sizeof(pmix_info_t)`, 552 bytes, is
//! 552 in 64 bits): a daemon that sizes an array for it writes past a 552-byte allocation and
//! crashes, taking the DVM with it.
//!
//! What no daemon can tell is an answer forged in the master's name for a request it did
//! relay: PRRTE's OOB does not authenticate its peers, so the first answer to arrive is taken
//! (`a_prted_passes_on_one_answer_...` shows it). Only the network keeps such a peer out
//! (docs/security.md).
#![forbid(unsafe_code)]

use anyhow::{bail, Context, Result};
use sandbox::forge::listen::oob_addr;
use sandbox::forge::oob::{Connection, ProcName, TAG_SCHED, TAG_SCHED_RESP};
use sandbox::forge::pack::{sched_answer, sched_request, PMIX_ALLOC_EXTEND, PMIX_SUCCESS};
use sandbox::harness::{self, Guarded, TestDir};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The name the forger connects as: no process of the DVM has it.
const FORGER_NSPACE: &str = "prrte-k8s-forger";
const FORGER_RANK: u32 = 4242;
/// The node of the `prted`, and the host name it runs under.
const NODE: &str = "forge-node";
/// A count whose `PMIX_INFO_CREATE` allocates 552 bytes for 2^61 + 1 entries.
const WRAPPING_COUNT: u64 = (1 << 61) + 1;
/// A count no allocation can hold (the `ninfo = 2^40` of a huge info array).
const HUGE_COUNT: u64 = 1 << 40;
const LIMIT: Duration = Duration::from_secs(60);

/// The DVM: `prte` (its own process group, killed when dropped) and the `prted` the stand-in
/// for ssh started (its process group killed too).
struct Dvm {
    prte: Child,
    dir: PathBuf,
    /// The DVM's namespace, the daemons' ranks being 0 (prte) and 1 (the prted).
    nspace: String,
}

impl Dvm {
    fn start(t: &TestDir) -> Result<Dvm> {
        use std::os::unix::process::CommandExt;
        let dir = t.path().to_path_buf();
        let prted_tmp = t.sub("prted-tmp")?;
        let agent = dir.join("agent.sh");
        // ssh's stand-in: the daemon's command line, here, under the node's host name; its own
        // process group (the ssh launcher's child made it one) is what the test kills
        std::fs::write(
            &agent,
            format!(
                "#!/bin/sh\n\
                 echo $$ > '{d}/agent.pid'\n\
                 node=\"$1\"; shift\n\
                 export TMPDIR='{tmp}'\n\
                 unshare --uts /bin/sh -c 'hostname \"$0\" && exec /bin/sh -c \"$1\"' \"$node\" \"$*\" \
                   > '{d}/prted.out' 2> '{d}/prted.err'\n\
                 echo $? > '{d}/prted.status'\n",
                d = dir.display(),
                tmp = prted_tmp.display()
            ),
        )?;
        std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let mut cmd = Command::new(harness::prefix().join("bin/prte"));
        cmd.args(["--allow-run-as-root", "--leave-session-attached"])
            .arg("--report-uri")
            .arg(dir.join("prte.uri"))
            .args(["--host", &format!("localhost:1,{NODE}:1")])
            .args(["--prtemca", "plm_ssh_agent"])
            .arg(&agent)
            .env("TMPDIR", t.tmpdir())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("prte.out"))?)
            .stderr(std::fs::File::create(dir.join("prte.err"))?)
            .process_group(0);
        let prte = cmd.spawn().context("spawn prte")?;
        let mut dvm = Dvm {
            prte,
            dir,
            nspace: String::new(),
        };
        let deadline = Instant::now() + LIMIT;
        while !dvm.file("prte.out").contains("DVM ready") {
            if let Some(st) = dvm.prte.try_wait()? {
                bail!(
                    "prte ended ({st}) before the DVM was ready:\n{}",
                    dvm.logs()
                );
            }
            if Instant::now() > deadline {
                bail!("the DVM was not ready within {LIMIT:?}:\n{}", dvm.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // "prte-HOST-PID@0.0;tcp4://...": prte's name, the DVM's namespace and rank 0
        let uri = dvm.file("prte.uri");
        let name = uri.split(';').next().unwrap_or_default();
        let Some((nspace, "0")) = name.rsplit_once('.') else {
            bail!("prte reported the URI {uri:?}");
        };
        dvm.nspace = nspace.to_string();
        Ok(dvm)
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    fn logs(&self) -> String {
        [
            "prte.out",
            "prte.err",
            "prted.out",
            "prted.err",
            "prted.status",
        ]
        .iter()
        .map(|f| format!("--- {f}:\n{}", self.file(f)))
        .collect::<Vec<_>>()
        .join("\n")
    }

    fn daemon(&self, rank: u32) -> ProcName {
        ProcName::new(&self.nspace, rank)
    }

    /// The stand-in for ssh's pid (its process group's too).
    fn agent(&self) -> Option<u32> {
        self.file("agent.pid").trim().parse().ok()
    }

    /// The `prted`: the process named so below the stand-in for ssh.
    fn prted_pid(&self) -> Result<u32> {
        let agent = self.agent().context("the stand-in for ssh never ran")?;
        harness::pids_named("prted")
            .into_iter()
            .find(|&p| descends_from(p, agent))
            .with_context(|| format!("no prted below {agent}:\n{}", self.logs()))
    }

    /// Why the DVM is not running any more, if it is not: prte or the prted ended.
    fn ended(&mut self) -> Option<String> {
        if let Ok(Some(st)) = self.prte.try_wait() {
            return Some(format!("prte ended ({st})"));
        }
        let status = self.file("prted.status");
        (!status.is_empty()).then(|| format!("the prted ended (status {})", status.trim()))
    }

    /// Waits until the daemon output `log` (a file of the test's directory) shows `line` `n`
    /// times; fails early, saying so, if the DVM ends.
    fn await_lines(&mut self, log: &str, line: &str, n: usize) -> Result<()> {
        let path = self.dir.join(log);
        self.await_count(&path, line, n, LIMIT)
    }

    /// Waits until the file at `path` holds `text` `n` times.
    fn await_text(&mut self, path: &Path, text: &str, n: usize) -> Result<()> {
        self.await_count(path, text, n, LIMIT)
    }

    /// Waits up to `limit` until the file at `path` holds `text`.
    fn await_text_for(&mut self, path: &Path, text: &str, limit: Duration) -> Result<()> {
        self.await_count(path, text, 1, limit)
    }

    fn await_count(&mut self, path: &Path, text: &str, n: usize, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let seen = std::fs::read_to_string(path)
                .unwrap_or_default()
                .matches(text)
                .count();
            if seen >= n {
                return Ok(());
            }
            if let Some(why) = self.ended() {
                bail!(
                    "{why} after the forged messages ({seen} of {n} \"{text}\" in {}):\n{}",
                    path.display(),
                    self.logs()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{seen} of {n} \"{text}\" in {} within {limit:?}:\n{}",
                    path.display(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `prun -n 2 hostname` through the DVM (its own TMPDIR), one rank per node.
    fn prun_on_both_nodes(&mut self, t: &TestDir) -> Result<()> {
        let mut cmd = Command::new(harness::prefix().join("bin/prun"));
        cmd.arg("--allow-run-as-root")
            .arg("--dvm-uri")
            .arg(format!("file:{}", self.dir.join("prte.uri").display()))
            .args(["-n", "2", "--map-by", "node", "hostname"])
            .env("TMPDIR", t.sub("prun-tmp")?);
        let out = harness::run_with_timeout(cmd, LIMIT)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut hosts: Vec<&str> = stdout.lines().collect();
        hosts.sort();
        let here = nix::unistd::gethostname()?.to_string_lossy().into_owned();
        let mut want = vec![here.as_str(), NODE];
        want.sort();
        if !out.status.success() || hosts != want {
            bail!(
                "prun -n 2 hostname through the DVM: {}, printed {hosts:?} (want {want:?}): {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                self.logs()
            );
        }
        if let Some(why) = self.ended() {
            bail!("{why}:\n{}", self.logs());
        }
        Ok(())
    }

    /// An OOB connection to daemon `rank` under the forger's name, checked to reach that daemon.
    fn connect(&self, rank: u32) -> Result<Connection> {
        let pid = if rank == 0 {
            self.prte.id()
        } else {
            self.prted_pid()?
        };
        let conn = Connection::open(oob_addr(pid)?, ProcName::new(FORGER_NSPACE, FORGER_RANK))?;
        if conn.peer != self.daemon(rank) {
            bail!("reached {}, not {}", conn.peer, self.daemon(rank));
        }
        Ok(conn)
    }
}

impl Drop for Dvm {
    fn drop(&mut self) {
        use nix::sys::signal::{killpg, Signal};
        use nix::unistd::Pid;
        // the stand-in for ssh and the prted: only while that pid still leads the group it made
        let agent = self.agent().filter(|&a| pgid(a) == Some(a));
        let members = agent.map(group_members).unwrap_or_default();
        if let Some(agent) = agent {
            let _ = killpg(Pid::from_raw(agent as i32), Signal::SIGKILL);
        }
        let _ = killpg(Pid::from_raw(self.prte.id() as i32), Signal::SIGKILL);
        let _ = self.prte.wait();
        // orphaned, they are reaped by init: gone from /proc, they are gone for leak checks too
        let deadline = Instant::now() + Duration::from_secs(10);
        while members
            .iter()
            .any(|p| Path::new(&format!("/proc/{p}")).exists())
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A process the test did not start itself (the prted did), killed when the test ends.
struct KillOnDrop {
    pid: Option<u32>,
    comm: &'static str,
}

impl KillOnDrop {
    fn from_file(path: &Path, comm: &'static str) -> KillOnDrop {
        let pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        KillOnDrop { pid, comm }
    }

    fn alive(&self, pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|c| c.trim_end() == self.comm)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let Some(pid) = self.pid else { return };
        if self.alive(pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The processes of process group `pgid`.
fn group_members(group: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&p| pgid(p) == Some(group))
        .collect()
}

fn stat_field(pid: u32, n: usize) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid pgrp ...: fields after the command name, which may hold spaces
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(n)?.parse().ok()
}

fn pgid(pid: u32) -> Option<u32> {
    stat_field(pid, 2)
}

fn descends_from(mut pid: u32, ancestor: u32) -> bool {
    while pid > 1 {
        if pid == ancestor {
            return true;
        }
        match stat_field(pid, 1) {
            Some(ppid) => pid = ppid,
            None => return false,
        }
    }
    false
}

fn dropped_from(who: &ProcName, from: &ProcName) -> String {
    format!("{who} dropped an allocation answer from {from}: only the DVM master answers")
}

fn dropped_unawaited(who: &ProcName, refid: i32) -> String {
    format!("{who} dropped an allocation answer for request {refid}: none is awaited there")
}

/// Answers sent to the DVM master as if from the prted it answers (rank 1), for the first
/// request slots, then one with the wrapping count: the master drops each, logging it, and the
/// DVM runs a job on both nodes.
#[test]
fn forged_answers_to_the_dvm_master_are_dropped_and_the_dvm_keeps_serving() {
    harness::require_prrte().unwrap();
    let t = TestDir::new("forged-sched-master").unwrap();
    let mut dvm = Dvm::start(&t).unwrap();
    let master = dvm.daemon(0);
    let prted = dvm.daemon(1);
    let mut conn = dvm.connect(0).unwrap();
    let slots = 0..8;
    for refid in slots.clone() {
        conn.send(
            &prted,
            TAG_SCHED_RESP,
            &sched_answer(refid, PMIX_SUCCESS, 0),
        )
        .unwrap();
    }
    conn.send(
        &prted,
        TAG_SCHED_RESP,
        &sched_answer(0, PMIX_SUCCESS, WRAPPING_COUNT),
    )
    .unwrap();
    dvm.await_lines("prte.err", &dropped_from(&master, &prted), slots.len() + 1)
        .unwrap();
    drop(conn);
    dvm.prun_on_both_nodes(&t).unwrap();
}

/// Answers sent to the prted: from a process other than the master (the forger's own name),
/// and from the master's name for a request it did not relay, with a count no allocation can
/// hold and with the wrapping count. Each is dropped before its count is read; the prted and
/// the DVM keep running jobs.
#[test]
fn forged_answers_to_a_prted_are_dropped_and_the_dvm_keeps_serving() {
    harness::require_prrte().unwrap();
    let t = TestDir::new("forged-sched-prted").unwrap();
    let mut dvm = Dvm::start(&t).unwrap();
    let master = dvm.daemon(0);
    let prted = dvm.daemon(1);
    let mut conn = dvm.connect(1).unwrap();
    let forger = conn.me.clone();
    conn.send(&forger, TAG_SCHED_RESP, &sched_answer(0, PMIX_SUCCESS, 0))
        .unwrap();
    conn.send(
        &master,
        TAG_SCHED_RESP,
        &sched_answer(0, PMIX_SUCCESS, HUGE_COUNT),
    )
    .unwrap();
    conn.send(
        &master,
        TAG_SCHED_RESP,
        &sched_answer(1, PMIX_SUCCESS, WRAPPING_COUNT),
    )
    .unwrap();
    dvm.await_lines("prted.err", &dropped_from(&prted, &forger), 1)
        .unwrap();
    dvm.await_lines("prted.err", &dropped_unawaited(&prted, 0), 1)
        .unwrap();
    dvm.await_lines("prted.err", &dropped_unawaited(&prted, 1), 1)
        .unwrap();
    drop(conn);
    dvm.prun_on_both_nodes(&t).unwrap();
}

/// A request sent to the master as if the prted relayed it, with the wrapping count: the master
/// refuses it before sizing anything for it and answers the prted, which awaits no such answer
/// and drops it; the DVM keeps serving.
#[test]
fn a_forged_relayed_request_with_a_huge_count_is_refused_by_the_master() {
    harness::require_prrte().unwrap();
    let t = TestDir::new("forged-sched-request").unwrap();
    let mut dvm = Dvm::start(&t).unwrap();
    let prted = dvm.daemon(1);
    let mut conn = dvm.connect(0).unwrap();
    let refid = 77;
    let request = sched_request(
        refid,
        (FORGER_NSPACE, FORGER_RANK),
        PMIX_ALLOC_EXTEND,
        WRAPPING_COUNT,
    );
    conn.send(&prted, TAG_SCHED, &request).unwrap();
    dvm.await_lines("prted.err", &dropped_unawaited(&prted, refid), 1)
        .unwrap();
    drop(conn);
    dvm.prun_on_both_nodes(&t).unwrap();
}

/// `PMIX_ERR_TIMEOUT`: the status of the forged answers, one the master never answers here.
const FORGED_STATUS: i32 = -24;

/// A request a PMIx client on the prted's node makes, which the prted relays to the master,
/// held there (prte stopped) while answers as from the master reach the prted for the first
/// request slots: the prted passes the first one for the relayed request on, and drops every
/// later one, the master's own answer included; the client is answered once.
#[test]
fn a_prted_passes_on_one_answer_to_a_request_it_relayed_and_drops_the_rest() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    harness::require_prrte().unwrap();
    let t = TestDir::new("forged-sched-relayed").unwrap();
    let client = harness::pmix_program(
        t.path(),
        "alloc_relayed",
        &["-O1", "-Wall", "-Wextra", "-Werror"],
    )
    .unwrap();
    let mut dvm = Dvm::start(&t).unwrap();
    let cdir = t.sub("client").unwrap();
    let log = cdir.join("client.log");
    let mut cmd = Command::new(harness::prefix().join("bin/prun"));
    cmd.arg("--allow-run-as-root")
        .arg("--dvm-uri")
        .arg(format!("file:{}", dvm.dir.join("prte.uri").display()))
        .args(["-n", "1", "--host", NODE])
        .arg(&client)
        .arg(&cdir)
        .env("TMPDIR", t.sub("client-prun-tmp").unwrap());
    let mut prun = Guarded::spawn(cmd, "prun", t.path()).unwrap();
    dvm.await_text(&log, "READY", 1).unwrap();
    let _client = KillOnDrop::from_file(&cdir.join("client.pid"), "alloc_relayed");

    // the master answers a relayed request at once (no RAS module of this DVM serves it): hold it
    let prte = Pid::from_raw(dvm.prte.id() as i32);
    kill(prte, Signal::SIGSTOP).unwrap();
    std::fs::write(cdir.join("go"), "").unwrap();
    dvm.await_text(&log, "REQUESTED", 1).unwrap();
    let master = dvm.daemon(0);
    let prted = dvm.daemon(1);
    let mut conn = dvm.connect(1).unwrap();
    let slots = 0..8;
    let mut sent = 0;
    // the request is relayed soon after the client made it: until the client has an answer
    for _ in 0..20 {
        for refid in slots.clone() {
            conn.send(
                &master,
                TAG_SCHED_RESP,
                &sched_answer(refid, FORGED_STATUS, 0),
            )
            .unwrap();
            sent += 1;
        }
        if dvm
            .await_text_for(&log, "ANSWER", Duration::from_secs(1))
            .is_ok()
        {
            break;
        }
    }
    let client_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        client_log.contains(&format!("ANSWER status={FORGED_STATUS}\n")),
        "{client_log}\n{}",
        dvm.logs()
    );
    // the same answers again: none is awaited any more
    for refid in slots.clone() {
        conn.send(
            &master,
            TAG_SCHED_RESP,
            &sched_answer(refid, FORGED_STATUS, 0),
        )
        .unwrap();
        sent += 1;
    }
    let dropped = format!("{prted} dropped an allocation answer for request ");
    dvm.await_lines("prted.err", &dropped, sent - 1).unwrap();
    // the master's own answer comes after the forged one was taken
    kill(prte, Signal::SIGCONT).unwrap();
    dvm.await_lines("prted.err", &dropped, sent).unwrap();
    std::fs::write(cdir.join("done"), "").unwrap();
    dvm.await_text(&log, "CALLBACKS", 1).unwrap();
    let client_log = std::fs::read_to_string(&log).unwrap();
    assert!(client_log.ends_with("CALLBACKS 1\n"), "{client_log}");
    let st = prun.wait_timeout(LIMIT).unwrap();
    assert!(
        st.is_some_and(|s| s.success()),
        "prun of the client: {st:?}\n{}",
        dvm.logs()
    );
    drop(conn);
    dvm.prun_on_both_nodes(&t).unwrap();
}
