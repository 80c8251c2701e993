use super::*;

#[test]
fn statuses_as_a_shell_reports_them() {
    assert_eq!(shell_status(ExitStatus::Code(3)), 3);
    assert_eq!(shell_status(ExitStatus::Signal(9)), 137);
    assert_eq!(process_exit_code(3), 3);
    assert_eq!(process_exit_code(300), 1);
    assert_eq!(process_exit_code(-1), 1);
}

#[test]
fn link_state_follows_attach_close_and_finish() {
    let d = tempfile::tempdir().unwrap();
    let mut config = test_config(d.path());
    let b = BatchState::default();
    let peer: SocketAddr = "10.0.0.1:4000".parse().unwrap();
    // Not in batch mode: refused.
    assert!(matches!(b.attach(&config, 1, peer).0, Reply::Failed { .. }));
    config.batch = Some(BatchConfig::Worker {
        launcher_wait: Duration::from_secs(1),
        stay: false,
    });
    assert_eq!(b.attach(&config, 1, peer).0, Reply::Ack {});
    assert_eq!(b.link(), Link::Attached { conn: 1, peer });
    b.connection_closed(2);
    assert_eq!(
        b.link(),
        Link::Attached { conn: 1, peer },
        "another connection"
    );
    b.connection_closed(1);
    assert_eq!(b.link(), Link::Lost { peer });
    assert_eq!(b.finish(&config, peer, 3).0, Reply::Ack {});
    assert_eq!(b.link(), Link::Finished { code: 3 });
    assert!(matches!(b.attach(&config, 3, peer).0, Reply::Failed { .. }));
    b.finish(&config, peer, 0);
    assert_eq!(
        b.link(),
        Link::Finished { code: 3 },
        "the first word counts"
    );
}

#[test]
fn a_pod_told_to_end_before_the_job_ended_does_not_succeed() {
    // Told to end while the command runs: its later success does not count.
    let b = BatchState::default();
    assert!(b.told_to_end(15));
    assert!(!b.done().is_cancelled(), "the command is not stopped by it");
    b.exit(0);
    assert_eq!(b.exit_code(), Some(143));
    // Told to end once the job had ended: its status stays.
    let b = BatchState::default();
    b.exit(0);
    assert!(!b.told_to_end(15));
    assert_eq!(b.exit_code(), Some(0));
    // ... also while the agent still waits to exit after the command's end.
    let b = BatchState::default();
    b.decide(0);
    assert!(!b.done().is_cancelled());
    assert!(!b.told_to_end(15));
    b.exit(0);
    assert_eq!(b.exit_code(), Some(0));
    let b = BatchState::default();
    assert!(b.told_to_end(2));
    assert_eq!(b.exit_code(), Some(130));
}

#[tokio::test(start_paused = true)]
async fn worker_exits_on_finish_lost_launcher_or_none() {
    let stop = CancellationToken::new();
    let peer: SocketAddr = "10.0.0.1:4000".parse().unwrap();
    // Finished with success: at once, 0.
    let b = Arc::new(BatchState::default());
    b.link.send_replace(Link::Finished { code: 0 });
    run_worker(b.clone(), Duration::from_secs(600), false, stop.clone()).await;
    assert_eq!(b.exit_code(), Some(0));
    // Finished with failure: after the delay, with the code.
    let b = Arc::new(BatchState::default());
    b.link.send_replace(Link::Finished { code: 3 });
    let t0 = tokio::time::Instant::now();
    run_worker(b.clone(), Duration::from_secs(600), false, stop.clone()).await;
    assert_eq!(b.exit_code(), Some(3));
    assert!(t0.elapsed() >= FAIL_DELAY);
    // Launcher lost: 1 after the grace period.
    let b = Arc::new(BatchState::default());
    b.link.send_replace(Link::Lost { peer });
    let t0 = tokio::time::Instant::now();
    run_worker(b.clone(), Duration::from_secs(600), false, stop.clone()).await;
    assert_eq!(b.exit_code(), Some(1));
    assert!(t0.elapsed() >= LINK_GRACE && t0.elapsed() < LINK_GRACE * 2);
    // Nobody attached: 1 after launcher_wait.
    let b = Arc::new(BatchState::default());
    let t0 = tokio::time::Instant::now();
    run_worker(b.clone(), Duration::from_secs(42), false, stop.clone()).await;
    assert_eq!(b.exit_code(), Some(1));
    assert!(t0.elapsed() >= Duration::from_secs(42));
    // Attached, then finish arrives later.
    let b = Arc::new(BatchState::default());
    b.link.send_replace(Link::Attached { conn: 1, peer });
    let w = tokio::spawn(run_worker(
        b.clone(),
        Duration::from_secs(1),
        false,
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        b.exit_code(),
        None,
        "an attached worker waits past launcher_wait"
    );
    b.link.send_replace(Link::Finished { code: 0 });
    w.await.unwrap();
    assert_eq!(b.exit_code(), Some(0));
}

/// `--workers-stay` (cleanPodPolicy None): a worker told the job ended goes on serving, past
/// any delay, until its pod is told to end; then it exits with the command's status.
#[tokio::test(start_paused = true)]
async fn a_worker_that_stays_exits_only_when_told_to_end() {
    for code in [0, 3] {
        let stop = CancellationToken::new();
        let b = Arc::new(BatchState::default());
        b.decide(code);
        b.link.send_replace(Link::Finished { code });
        let w = tokio::spawn(run_worker(
            b.clone(),
            Duration::from_secs(1),
            true,
            stop.clone(),
        ));
        tokio::time::sleep(LINK_GRACE + FAIL_DELAY + Duration::from_secs(600)).await;
        assert!(!w.is_finished() && !b.done().is_cancelled(), "still up");
        // The pod is deleted: SIGTERM.
        assert!(!b.told_to_end(15), "the job had ended");
        stop.cancel();
        w.await.unwrap();
        assert!(b.done().is_cancelled());
        assert_eq!(b.exit_code(), Some(code));
    }
}

fn test_config(dir: &std::path::Path) -> AgentConfig {
    AgentConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        health_listen: None,
        metrics_listen: None,
        prted: "/bin/true".into(),
        secret: None,
        secret_file: "/nonexistent".into(),
        tmpdir: dir.to_owned(),
        kill_grace: Duration::from_secs(1),
        preempt_grace: Duration::ZERO,
        max_frame: 4096,
        pass_env: vec![],
        dvm_uri_file: dir.join("dvm.uri"),
        head: None,
        batch: None,
        cgroup: false,
        limits: Default::default(),
        heartbeat_timeout: None,
        mpi: None,
    }
}

#[test]
fn rank_output_comes_only_on_the_attached_connection_and_names_a_stream() {
    let b = BatchState::default();
    let data = crate::protocol::exec::encode_data(b"hello\n");
    let e = b.rank_output(false, 1, 1, &data).unwrap_err();
    assert!(e.contains("attached connection"), "{e}");
    let e = b.rank_output(true, 1, 0, &data).unwrap_err();
    assert!(e.contains("fd 0"), "{e}");
    let e = b.rank_output(true, 1, 1, "not base64!").unwrap_err();
    assert!(e.contains("base64"), "{e}");
    assert_eq!(b.rank_output(true, 1, 2, &data), Ok(()));
}
