//! Tests of `process`: the reaper's children, strays, and a dropped job's group.

use super::*;

#[test]
fn a_running_or_unreaped_child_counts() {
    // (Other tests may have children too, so only the "yes" side is checked here.)
    let mut child = Command::new("sleep").arg("5").spawn().unwrap();
    assert!(has_children());
    child.kill().unwrap();
    // Killed but not reaped yet: still a child until waited for.
    std::thread::sleep(Duration::from_millis(50));
    assert!(has_children());
    child.wait().unwrap();
}

fn spawn_sleep(reaper: &Reaper) -> (u32, oneshot::Receiver<ExitStatus>) {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("sleep");
    cmd.arg("100").process_group(0);
    reaper.spawn(&mut cmd).unwrap()
}

#[test]
fn the_reapers_own_children_are_not_strays() {
    let reaper = Reaper::default();
    let (pid, _rx) = spawn_sleep(&reaper);
    let pid = pid as i32;
    assert!(reaper.tracks(pid));
    assert!(!stray_children(&reaper).contains(&pid));
    // A reaper that did not spawn it sees a stray.
    assert!(stray_children(&Reaper::default()).contains(&pid));
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    waitpid(Pid::from_raw(pid), None).unwrap();
}

#[test]
fn dropping_a_job_that_was_not_terminated_kills_its_group() {
    let reaper = Reaper::default();
    let (pid, rx) = spawn_sleep(&reaper);
    let job = Job::new(pid, rx);
    assert!(group_exists(pid as i32));
    drop(job);
    let pid = Pid::from_raw(pid as i32);
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) if Instant::now() < deadline => std::thread::sleep(POLL),
            other => break other,
        }
    };
    if matches!(status, Ok(WaitStatus::StillAlive)) {
        let _ = kill(pid, Signal::SIGKILL);
        let _ = waitpid(pid, None);
    }
    assert!(
        matches!(status, Ok(WaitStatus::Signaled(_, Signal::SIGKILL, _))),
        "{status:?}"
    );
}
