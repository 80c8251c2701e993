//! Supervision of processes that leave prted's process group and session: a prted that
//! daemonizes (fork, `setsid()`, fork again, like PRRTE's prted without
//! `--leave-session-attached`) must still be stopped by `kill`, by the end of the launcher's
//! connection and when prted itself ends, both with a cgroup per launch and with the
//! process-tree sweep (`--cgroup off`).
#![forbid(unsafe_code)]
mod agent_support;

use std::os::unix::fs::PermissionsExt;

use agent_support::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use prrte_k8s::protocol::{Reply, Request};

/// The mode (given as the namespace, as for the fake prted of `agent_support`): `wait` (the
/// main process stays, like prted's parent waiting for its daemon) or `exit` (the main process
/// exits as soon as the daemon runs). The daemon is `sleep 1000` in a new session whose leader
/// (the intermediate process) has exited; its pid goes to `daemon.pid`. Pid files are written
/// aside and renamed, so a reader never sees one half written.
const DAEMONIZING_PRTED: &str = r#"#!/bin/sh
d='@DIR@'
echo $$ >> "$d/launches"
for a in "$@"; do printf '%s\0' "$a"; done > "$d/argv.tmp"; mv "$d/argv.tmp" "$d/argv"
perl -MPOSIX -e '
  my $d = shift;
  exit 0 if fork();
  POSIX::setsid() or die "setsid: $!";
  exit 0 if fork();
  open(my $f, ">", "$d/daemon.tmp") or die; print $f "$$\n"; close $f;
  rename("$d/daemon.tmp", "$d/daemon.pid");
  open(STDOUT, ">/dev/null"); open(STDERR, ">/dev/null");
  exec "sleep", "1000";
' "$d"
while [ ! -s "$d/daemon.pid" ]; do sleep 0.01; done
echo $$ > "$d/main.tmp"; mv "$d/main.tmp" "$d/main.pid"
mode=wait; prev=
for a in "$@"; do [ "$prev" = ess_base_nspace ] && mode=$a; prev=$a; done
case "$mode" in
  exit) exit 0 ;;
  *) exec sleep 1000 ;;
esac
"#;

/// A test directory whose prted daemonizes; kills the daemon and the main process (if they
/// still are what was recorded) when dropped.
struct Daemonizing {
    td: TestDir,
}

impl Daemonizing {
    fn new() -> Daemonizing {
        let td = TestDir::new();
        std::fs::write(
            &td.prted,
            DAEMONIZING_PRTED.replace("@DIR@", td.dir.path().to_str().unwrap()),
        )
        .unwrap();
        std::fs::set_permissions(&td.prted, std::fs::Permissions::from_mode(0o755)).unwrap();
        Daemonizing { td }
    }

    fn daemon(&self) -> i32 {
        self.td.wait_pid("daemon.pid")
    }
}

impl Drop for Daemonizing {
    fn drop(&mut self) {
        for name in ["daemon.pid", "main.pid"] {
            if let Some(p) = std::fs::read_to_string(self.td.path(name))
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok())
            {
                if cmdline(p).starts_with("sleep 1000") {
                    let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
                }
            }
        }
    }
}

/// A live (non-zombie) process.
fn running(pid: i32) -> bool {
    stat(pid).is_some_and(|s| s.state != 'Z')
}

/// The daemon really escaped: another session and process group than prted's and the agent's.
fn assert_escaped(daemon: i32, agent: &AgentProc) {
    // The intermediate process exits just after the daemon recorded its pid.
    let d =
        wait_for(WAIT, || stat(daemon).filter(|d| d.ppid == agent.pid())).unwrap_or_else(|| {
            panic!(
                "the daemon was not reparented to the agent: {:?}",
                stat(daemon)
            )
        });
    let a = stat(agent.pid()).unwrap();
    assert_ne!(d.session, a.session, "the daemon left the agent's session");
    assert_ne!(
        d.session, d.pid,
        "the daemon is not a session leader (forked twice)"
    );
}

fn modes() -> [&'static [&'static str]; 2] {
    [&[], &["--cgroup", "off"]]
}

/// Connects to `agent` and launches the daemonizing prted of `d` in `mode`; it must start.
async fn connected_launch(agent: &AgentProc, d: &Daemonizing, mode: &str) -> RawClient {
    let mut c = RawClient::connect(agent.addr, Some(&d.td.secret))
        .await
        .unwrap();
    let reply = c.request(&launch(&[mode])).await;
    assert!(
        matches!(reply, Reply::Started { .. }),
        "launch {mode}: {reply:?}"
    );
    c
}

#[tokio::test]
async fn kill_stops_a_daemon_that_left_the_session() {
    for extra in modes() {
        let d = Daemonizing::new();
        let agent = AgentProc::spawn(&d.td, extra);
        let mut c = connected_launch(&agent, &d, "wait").await;
        let daemon = d.daemon();
        assert_escaped(daemon, &agent);
        match c.request(&Request::Status {}).await {
            Reply::Status { running: true, .. } => {}
            other => panic!("{extra:?}: status while the daemon runs: {other:?}"),
        }
        let reply = c
            .request(&Request::Kill {
                grace_ms: Some(500),
            })
            .await;
        assert!(
            matches!(reply, Reply::Exited { .. }),
            "{extra:?}: {reply:?}"
        );
        // `exited` comes only once every process of the launch is gone.
        assert!(
            !running(daemon),
            "{extra:?}: the daemon (pid {daemon}) outlived `kill`: {}",
            cmdline(daemon)
        );
        match c.request(&Request::Status {}).await {
            Reply::Status { running: false, .. } => {}
            other => panic!("{extra:?}: status after kill: {other:?}"),
        }
        // A second launch is accepted and works.
        std::fs::remove_file(d.td.path("daemon.pid")).unwrap();
        assert!(matches!(
            c.request(&launch(&["wait"])).await,
            Reply::Started { .. }
        ));
        let second = d.daemon();
        assert!(running(second));
        drop(c);
        assert!(
            all_gone(&[second], WAIT),
            "{extra:?}: the second daemon outlived the connection"
        );
    }
}

#[tokio::test]
async fn the_end_of_the_connection_stops_a_daemon() {
    for extra in modes() {
        let d = Daemonizing::new();
        let agent = AgentProc::spawn(&d.td, extra);
        let c = connected_launch(&agent, &d, "wait").await;
        let daemon = d.daemon();
        assert_escaped(daemon, &agent);
        drop(c);
        assert!(
            wait_for(WAIT, || (!running(daemon)).then_some(())).is_some(),
            "{extra:?}: the daemon outlived the launcher's connection"
        );
        assert_idle(agent.addr, &d.td.secret).await;
    }
}

#[tokio::test]
async fn a_daemon_left_by_an_exiting_prted_is_stopped_before_exited() {
    for extra in modes() {
        let d = Daemonizing::new();
        let agent = AgentProc::spawn(&d.td, extra);
        let mut c = connected_launch(&agent, &d, "exit").await;
        let reply = c.recv(WAIT).await.unwrap();
        assert!(
            matches!(reply, Reply::Exited { code: Some(0), .. }),
            "{extra:?}: {reply:?}"
        );
        let daemon = d.daemon();
        assert!(
            !running(daemon),
            "{extra:?}: the daemon (pid {daemon}) runs after `exited`"
        );
        match c.request(&Request::Status {}).await {
            Reply::Status { running: false, .. } => {}
            other => panic!("{extra:?}: status after exited: {other:?}"),
        }
    }
}

/// prted always gets `--leave-session-attached` and `--set-sid` (each once; a launch request
/// may carry the first, never the second), so the real prted stays the agent's child and makes
/// itself the leader of its own session.
#[tokio::test]
async fn prted_is_told_to_stay_in_the_session() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    for argv in [
        vec!["--exit", "0", "--prtemca", "ess", "env"],
        vec!["--exit", "0", "--leave-session-attached"],
    ] {
        let argv = launch_args(&argv);
        let reply = c
            .request(&Request::Launch {
                argv: argv.clone(),
                env: Default::default(),
                dvm_uri: None,
            })
            .await;
        assert!(matches!(reply, Reply::Started { .. }), "{reply:?}");
        assert!(matches!(c.recv(WAIT).await.unwrap(), Reply::Exited { .. }));
        let got = td.argv();
        for flag in ["--leave-session-attached", "--set-sid"] {
            assert_eq!(
                got.iter().filter(|a| *a == flag).count(),
                1,
                "{flag}: {got:?}"
            );
        }
        assert_eq!(&got[..argv.len().min(got.len())], &argv[..], "{got:?}");
    }
}

/// The prted the agent starts leads its own session and process group (pid = pgid = sid, not
/// the agent's session, as a prted started through ssh): with the kernel's autogroup
/// scheduling a session is one scheduling entity, and a prted left in the agent's session
/// shared its CPU with everything else there. `kill` still stops the whole group.
#[tokio::test]
async fn prted_leads_its_own_session() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let reply = c
        .request(&Request::Launch {
            argv: launch_args(&["--sleep"]),
            env: Default::default(),
            dvm_uri: None,
        })
        .await;
    let Reply::Started { pid } = reply else {
        panic!("{reply:?}")
    };
    let pid = pid as i32;
    assert_eq!(td.wait_pid("prted.pid"), pid, "the pid the agent started");
    let child = td.wait_pid("child.pid");
    let p = stat(pid).unwrap();
    assert_eq!((p.pgrp, p.session), (pid, pid), "prted's group and session");
    assert_ne!(
        p.session,
        stat(agent.pid()).unwrap().session,
        "not the agent's"
    );
    let k = stat(child).unwrap();
    assert_eq!(
        (k.pgrp, k.session),
        (pid, pid),
        "its child's group and session"
    );
    let reply = c.request(&Request::Kill { grace_ms: None }).await;
    assert!(matches!(reply, Reply::Exited { .. }), "{reply:?}");
    assert!(all_gone(&[pid, child], WAIT), "kill left {pid} or {child}");
}

/// With cgroups available (this machine: cgroup v2 at /sys/fs/cgroup/unified), the agent says so
/// and removes each launch's cgroup afterwards.
#[tokio::test]
async fn launches_get_a_cgroup_that_is_removed_afterwards() {
    let d = Daemonizing::new();
    let agent = AgentProc::spawn(&d.td, &[]);
    let chosen = agent
        .wait_log(WAIT, |v| {
            v["message"].as_str().is_some_and(|m| m.contains("tracked"))
        })
        .expect("the agent logs how it tracks descendants");
    let Some(base) = chosen["cgroup"].as_str().map(str::to_owned) else {
        eprintln!("no writable cgroup here ({chosen}); nothing to check");
        return;
    };
    let mut c = connected_launch(&agent, &d, "wait").await;
    let daemon = d.daemon();
    let cg = std::fs::read_to_string(format!("/proc/{daemon}/cgroup")).unwrap();
    let dirs = || -> Vec<String> {
        std::fs::read_dir(&base)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("prrte-k8s-"))
            .collect()
    };
    let mine: Vec<String> = dirs()
        .into_iter()
        .filter(|n| cg.contains(n.as_str()))
        .collect();
    assert_eq!(mine.len(), 1, "the daemon is in a launch cgroup: {cg}");
    assert!(matches!(
        c.request(&Request::Kill { grace_ms: None }).await,
        Reply::Exited { .. }
    ));
    assert!(
        wait_for(WAIT, || (!dirs().contains(&mine[0])).then_some(())).is_some(),
        "the launch cgroup {} was not removed",
        mine[0]
    );
}

/// An agent killed with SIGKILL cannot remove its launch's cgroup; once the launch's processes
/// are gone too, the next agent starting on the machine removes that empty cgroup. It leaves
/// alone what is not a launch cgroup of ours and an empty one just created (another agent
/// about to fork prted into it).
#[tokio::test]
async fn an_agent_removes_empty_launch_cgroups_a_killed_agent_left() {
    let d = Daemonizing::new();
    let mut agent = AgentProc::spawn(&d.td, &[]);
    let chosen = agent
        .wait_log(WAIT, |v| {
            v["message"].as_str().is_some_and(|m| m.contains("tracked"))
        })
        .expect("the agent logs how it tracks descendants");
    let Some(base) = chosen["cgroup"].as_str().map(std::path::PathBuf::from) else {
        eprintln!("no writable cgroup here ({chosen}); nothing to check");
        return;
    };
    let c = connected_launch(&agent, &d, "wait").await;
    let daemon = d.daemon();
    let main = d.td.wait_pid("main.pid");
    let cg = std::fs::read_to_string(format!("/proc/{daemon}/cgroup")).unwrap();
    let left = cg
        .lines()
        .find_map(|l| l.rsplit('/').next().filter(|n| n.starts_with("prrte-k8s-")))
        .map(|n| base.join(n))
        .unwrap_or_else(|| panic!("the daemon is in a launch cgroup: {cg}"));

    // The agent dies without cleaning up; then the launch's processes end.
    agent.signal(Signal::SIGKILL);
    assert!(agent.wait_exit(WAIT).is_some());
    drop(c);
    for p in [daemon, main] {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
    assert!(
        all_gone(&[daemon, main], WAIT),
        "the launch's processes ended"
    );
    assert!(left.is_dir(), "nothing removed {} yet", left.display());
    // Make it look as old as a cgroup from an earlier agent's life.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let backdate =
        |dir: &std::path::Path| std::fs::File::open(dir).unwrap().set_modified(old).unwrap();
    backdate(&left);
    // Not ours by name (old and empty), and ours but just created: both stay.
    let tag = format!("{:08x}", rand::random::<u32>());
    let foreign = base.join(format!("prrte-k8s-other-{tag}"));
    let young = base.join(format!("prrte-k8s-{tag}{tag}"));
    std::fs::create_dir(&foreign).unwrap();
    backdate(&foreign);
    std::fs::create_dir(&young).unwrap();
    let cleanup = [foreign.clone(), young.clone()];

    let next = AgentProc::spawn(&d.td, &[]);
    let removed = next.wait_log(WAIT, |v| {
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("removed empty launch cgroups"))
    });
    let result = (left.exists(), foreign.is_dir(), young.is_dir());
    for dir in &cleanup {
        let _ = std::fs::remove_dir(dir);
    }
    assert!(
        removed.is_some(),
        "the agent says what it removed: {:?}",
        next.logs()
    );
    assert_eq!(
        result,
        (false, true, true),
        "(stale removed, foreign kept, young kept) for {}",
        left.display()
    );
}

/// A process of the launch that moves itself into the agent's own cgroup (which the pod's
/// user may write), leaves the session (`setsid`, then forks again so it is reparented to the
/// agent) and has no PMIx namespace: in cgroup mode too the agent finds it by its place in the
/// process tree and stops it with the launch.
const ESCAPING_PRTED: &str = r#"#!/bin/sh
d='@DIR@'
echo $$ >> "$d/launches"
perl -MPOSIX -e '
  my $d = shift;
  exit 0 if fork();
  open(my $t, "<", "$d/escape-to") or die "escape-to: $!";
  my $to = <$t>; chomp $to; close $t;
  open(my $p, ">", "$to/cgroup.procs") or die "cgroup.procs: $!";
  print $p "$$\n"; close $p or die "moving: $!";
  POSIX::setsid() or die "setsid: $!";
  exit 0 if fork();
  delete $ENV{PMIX_NAMESPACE};
  open(my $f, ">", "$d/escaped.tmp") or die; print $f "$$\n"; close $f;
  rename("$d/escaped.tmp", "$d/escaped.pid");
  open(STDOUT, ">/dev/null"); open(STDERR, ">/dev/null");
  exec "sleep", "1000";
' "$d"
exec sleep 1000
"#;

#[tokio::test]
async fn a_process_that_moves_to_the_agents_cgroup_is_stopped_with_the_launch() {
    let td = TestDir::new();
    std::fs::write(
        &td.prted,
        ESCAPING_PRTED.replace("@DIR@", td.dir.path().to_str().unwrap()),
    )
    .unwrap();
    std::fs::set_permissions(&td.prted, std::fs::Permissions::from_mode(0o755)).unwrap();
    let agent = AgentProc::spawn(&td, &[]);
    let chosen = agent
        .wait_log(WAIT, |v| {
            v["message"].as_str().is_some_and(|m| m.contains("tracked"))
        })
        .expect("the agent logs how it tracks descendants");
    let Some(base) = chosen["cgroup"].as_str().map(str::to_owned) else {
        eprintln!("no writable cgroup here ({chosen}); nothing to check");
        return;
    };
    std::fs::write(td.path("escape-to"), format!("{base}\n")).unwrap();
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let reply = c.request(&launch(&["wait"])).await;
    assert!(matches!(reply, Reply::Started { .. }), "{reply:?}");
    let escaped = td.wait_pid("escaped.pid");
    let guard = KillOnDrop(escaped);
    let cg = std::fs::read_to_string(format!("/proc/{escaped}/cgroup")).unwrap();
    assert!(
        !cg.contains("prrte-k8s-"),
        "it left the launch's cgroup: {cg}"
    );
    let s = wait_for(WAIT, || stat(escaped).filter(|s| s.ppid == agent.pid()))
        .expect("reparented to the agent");
    let agents = stat(agent.pid()).unwrap();
    assert_ne!(s.session, agents.session, "it left the agent's session");
    let reply = c
        .request(&Request::Kill {
            grace_ms: Some(500),
        })
        .await;
    assert!(matches!(reply, Reply::Exited { .. }), "{reply:?}");
    assert!(
        !running(escaped),
        "the process that left the launch's cgroup outlived `kill`: {}",
        cmdline(escaped)
    );
    drop(guard);
}

/// Kills a `sleep 1000` of a test (only if it still is one) when dropped.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if cmdline(self.0).starts_with("sleep 1000") {
            let _ = kill(Pid::from_raw(self.0), Signal::SIGKILL);
        }
    }
}

/// The attack on the process-tree sweep: prted forks a process that forks a session leader and
/// exits at once (so the leader is orphaned to the agent before any recording sees it). The
/// leader (`sleep 1002`) makes a new session, ignores SIGTERM and SIGHUP and stays; it forks a
/// process that forks the survivor (`sleep 1001`, same dispositions) and exits, so the survivor
/// is orphaned to the agent too, in a session whose leader is alive and was never recorded.
/// Pids go to `leader.pid` and `survivor.pid`; prted itself stays (`sleep 1000`).
const SESSION_ESCAPING_PRTED: &str = r#"#!/bin/sh
d='@DIR@'
perl -MPOSIX -e '
  my $d = shift;
  sub put { my ($name, $pid) = @_; open(my $f, ">", "$d/$name.tmp") or die; print $f "$pid\n";
    close $f; rename("$d/$name.tmp", "$d/$name.pid"); }
  exit 0 if fork();
  exit 0 if fork();
  POSIX::setsid() or die "setsid: $!";
  $SIG{TERM} = "IGNORE"; $SIG{HUP} = "IGNORE";
  open(STDOUT, ">/dev/null"); open(STDERR, ">/dev/null");
  if (fork() == 0) {
    if (fork() == 0) { put("survivor", $$); exec "sleep", "1001"; }
    exit 0;
  }
  put("leader", $$);
  exec "sleep", "1002";
' "$d"
while [ ! -s "$d/leader.pid" ] || [ ! -s "$d/survivor.pid" ]; do sleep 0.01; done
exec sleep 1000
"#;

/// Kills what a test's prted left (only if it still is one of the `sleep 100N` it started).
struct KillSleeps(Vec<i32>);

impl Drop for KillSleeps {
    fn drop(&mut self) {
        for p in &self.0 {
            if cmdline(*p).starts_with("sleep 100") {
                let _ = kill(Pid::from_raw(*p), Signal::SIGKILL);
            }
        }
    }
}

/// Nothing outlives the job: with the sweep (`--cgroup off`) as with a cgroup, `kill` stops a
/// process orphaned to the agent in a session whose leader is the launch's but was never
/// recorded, both ignoring SIGTERM and SIGHUP; `exited` comes once both are gone, without
/// waiting out the bound on processes that survive SIGKILL.
#[tokio::test]
async fn kill_stops_an_orphan_in_a_session_the_job_made_between_recordings() {
    for extra in modes() {
        let td = TestDir::new();
        std::fs::write(
            &td.prted,
            SESSION_ESCAPING_PRTED.replace("@DIR@", td.dir.path().to_str().unwrap()),
        )
        .unwrap();
        std::fs::set_permissions(&td.prted, std::fs::Permissions::from_mode(0o755)).unwrap();
        let agent = AgentProc::spawn(&td, extra);
        let mut c = RawClient::connect(agent.addr, Some(&td.secret))
            .await
            .unwrap();
        let reply = c.request(&launch(&["wait"])).await;
        assert!(
            matches!(reply, Reply::Started { .. }),
            "{extra:?}: {reply:?}"
        );
        let leader = td.wait_pid("leader.pid");
        let survivor = td.wait_pid("survivor.pid");
        let _cleanup = KillSleeps(vec![leader, survivor]);
        // Both orphaned to the agent; the survivor in the leader's session, not the agent's.
        let orphaned = |p: i32| stat(p).filter(|s| s.ppid == agent.pid());
        let s = wait_for(WAIT, || orphaned(survivor)).unwrap_or_else(|| {
            panic!(
                "{extra:?}: the survivor was not orphaned: {:?}",
                stat(survivor)
            )
        });
        let l = wait_for(WAIT, || orphaned(leader)).unwrap_or_else(|| {
            panic!("{extra:?}: the leader was not orphaned: {:?}", stat(leader))
        });
        assert_eq!((l.session, s.session), (leader, leader), "{extra:?}");
        assert_ne!(s.session, stat(agent.pid()).unwrap().session);
        let t0 = std::time::Instant::now();
        let reply = c
            .request(&Request::Kill {
                grace_ms: Some(300),
            })
            .await;
        let took = t0.elapsed();
        assert!(
            matches!(reply, Reply::Exited { .. }),
            "{extra:?}: {reply:?}"
        );
        for (what, p) in [("survivor", survivor), ("session leader", leader)] {
            assert!(
                !running(p),
                "{extra:?}: the {what} (pid {p}) outlived `kill`: {}",
                cmdline(p)
            );
        }
        // Not the 10 s bound on processes that survive SIGKILL.
        assert!(
            took < std::time::Duration::from_secs(8),
            "{extra:?}: kill took {took:?}"
        );
    }
}
