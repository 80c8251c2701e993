use std::sync::mpsc::channel;
use std::sync::Mutex;

use prrte_k8s_pmix_tool::Ended;

use super::*;
use crate::workflow::admission::{GIVE_UP_AFTER, RETRY_PAUSE_MIN};

/// A stand-in for the PMIx connection: records spawns and kills, refuses as told.
#[derive(Clone, Default)]
struct Fake(Arc<Mutex<FakeState>>);

#[derive(Default)]
struct FakeState {
    next: u64,
    spawned: Vec<(u64, Vec<String>)>,
    killed: Vec<String>,
    refuse: Option<fn() -> prrte_k8s_pmix_tool::Error>,
}

impl Spawner for Fake {
    fn submit_to(
        &self,
        task: &Task,
        _tx: Sender<(u64, Update)>,
    ) -> Result<u64, prrte_k8s_pmix_tool::Error> {
        let mut s = self.0.lock().unwrap();
        if let Some(e) = s.refuse {
            return Err(e());
        }
        s.next += 1;
        let id = s.next;
        s.spawned.push((id, task.argv.clone()));
        Ok(id)
    }

    fn kill(&self, nspace: &str) -> Result<(), prrte_k8s_pmix_tool::Error> {
        self.0.lock().unwrap().killed.push(nspace.to_owned());
        Ok(())
    }

    fn status_name(&self, status: i32) -> String {
        format!("E{status}")
    }
}

fn engine(output: Option<PathBuf>) -> (Engine<Fake>, Fake) {
    let fake = Fake::default();
    let (tx, _rx) = channel();
    let e = Engine::new(fake.clone(), tx, output, Arc::new(Stats::default()));
    (e, fake)
}

fn submit(
    e: &mut Engine<Fake>,
    task: TaskLine,
    now: Instant,
) -> oneshot::Receiver<Result<TaskResult, Error>> {
    let (reply, rx) = oneshot::channel();
    e.handle(Ev::Submit { task, reply }, now);
    rx
}

fn ended(status: i32, pods: &[&str]) -> Update {
    Update::Ended(Ended {
        status,
        rank: None,
        message: None,
        pods: pods.iter().map(|p| p.to_string()).collect(),
    })
}

fn started(ns: &str) -> Update {
    Update::Started { nspace: ns.into() }
}

fn answer(rx: &mut oneshot::Receiver<Result<TaskResult, Error>>) -> Option<TaskResult> {
    match rx.try_recv() {
        Ok(r) => Some(r.expect("a result")),
        Err(_) => None,
    }
}

#[test]
fn each_task_is_answered_with_its_exit_and_pods() {
    let (mut e, fake) = engine(None);
    let t0 = Instant::now();
    let mut a = submit(&mut e, TaskLine::command(4, ["/bin/true"]), t0);
    let mut b = submit(&mut e, TaskLine::command(7, ["sh", "-c", "kill -9 $$"]), t0);
    assert_eq!(fake.0.lock().unwrap().spawned.len(), 2);
    assert_eq!(e.stats.running.load(Ordering::Relaxed), 2);
    e.handle(Ev::Update(1, started("ns1")), t0);
    assert!(answer(&mut a).is_none(), "answered before its end");
    e.handle(Ev::Update(1, ended(0, &["job-1", "job-2"])), t0);
    e.handle(Ev::Update(2, ended(137, &[])), t0);
    let a = answer(&mut a).unwrap();
    assert_eq!((a.index, a.exit.clone()), (4, Exit::Status(0)));
    assert_eq!(a.pods, ["job-1", "job-2"]);
    let b = answer(&mut b).unwrap();
    assert_eq!((b.index, b.exit), (7, Exit::Signal("SIGKILL".into())));
    assert_eq!(e.stats.running.load(Ordering::Relaxed), 0);
    // An end for no task of ours is ignored.
    e.handle(Ev::Update(99, ended(0, &[])), t0);
}

#[test]
fn a_task_past_its_timeout_is_killed_and_reported_as_timeout() {
    let (mut e, fake) = engine(None);
    let t0 = Instant::now();
    let mut task = TaskLine::command(0, ["sleep", "1000"]);
    task.timeout = Some(Duration::from_secs(5));
    let mut a = submit(&mut e, task.clone(), t0);
    e.handle(Ev::Update(1, started("ns1")), t0);
    e.tick(t0 + Duration::from_secs(4));
    assert!(fake.0.lock().unwrap().killed.is_empty(), "killed early");
    e.tick(t0 + Duration::from_secs(5));
    assert_eq!(fake.0.lock().unwrap().killed, ["ns1"]);
    e.tick(t0 + Duration::from_secs(6));
    assert_eq!(fake.0.lock().unwrap().killed.len(), 1, "killed twice");
    e.handle(Ev::Update(1, ended(137, &["job-3"])), t0);
    let a = answer(&mut a).unwrap();
    assert_eq!(a.exit, Exit::Timeout);

    // Killed, but its end never comes: reported after the grace, with why.
    let mut b = submit(&mut e, task, t0);
    e.handle(Ev::Update(2, started("ns2")), t0);
    e.tick(t0 + Duration::from_secs(5));
    e.tick(t0 + Duration::from_secs(5) + KILL_GRACE - Duration::from_millis(1));
    assert!(answer(&mut b).is_none());
    e.tick(t0 + Duration::from_secs(5) + KILL_GRACE);
    let b = answer(&mut b).unwrap();
    assert_eq!(b.exit, Exit::Timeout);
    assert!(b.error.unwrap().contains("not confirmed"));
}

#[test]
fn a_started_task_already_past_its_deadline_is_killed_at_once() {
    let (mut e, fake) = engine(None);
    let t0 = Instant::now();
    let mut task = TaskLine::command(0, ["sleep", "1000"]);
    task.timeout = Some(Duration::from_millis(10));
    let _a = submit(&mut e, task, t0);
    e.handle(Ev::Update(1, started("ns1")), t0 + Duration::from_secs(1));
    assert_eq!(fake.0.lock().unwrap().killed, ["ns1"]);
}

#[test]
fn a_spawn_the_dvm_cannot_place_waits_for_one_of_ours_to_end() {
    let (mut e, fake) = engine(None);
    let t0 = Instant::now();
    let mut a = submit(&mut e, TaskLine::command(0, ["a"]), t0);
    let mut b = submit(&mut e, TaskLine::command(1, ["b"]), t0);
    e.handle(
        Ev::Update(
            2,
            Update::SpawnFailed {
                status: FAILED_TO_MAP,
                message: "PMIX_ERR_JOB_FAILED_TO_MAP".into(),
            },
        ),
        t0,
    );
    // Held: a third task is not spawned either.
    let mut c = submit(&mut e, TaskLine::command(2, ["c"]), t0);
    e.tick(t0);
    assert_eq!(fake.0.lock().unwrap().spawned.len(), 2);
    assert!(answer(&mut b).is_none());
    e.handle(Ev::Update(1, ended(0, &[])), t0);
    assert!(answer(&mut a).is_some());
    let spawned: Vec<Vec<String>> = fake.0.lock().unwrap().spawned[2..]
        .iter()
        .map(|(_, argv)| argv.clone())
        .collect();
    assert_eq!(spawned, [vec!["b".to_string()], vec!["c".to_string()]]);
    e.handle(Ev::Update(3, ended(0, &[])), t0);
    e.handle(Ev::Update(4, ended(0, &[])), t0);
    assert_eq!(answer(&mut b).unwrap().index, 1);
    assert_eq!(answer(&mut c).unwrap().index, 2);

    // Alone (another job holds the slots), the same refusal is retried after a pause, and
    // becomes the task's result once refused for a minute.
    let mut d = submit(&mut e, TaskLine::command(3, ["d"]), t0);
    e.handle(Ev::Update(5, no_room()), t0);
    e.tick(t0 + RETRY_PAUSE_MIN - Duration::from_millis(1));
    assert_eq!(fake.0.lock().unwrap().spawned.len(), 5);
    assert!(answer(&mut d).is_none());
    e.tick(t0 + RETRY_PAUSE_MIN);
    assert_eq!(
        fake.0.lock().unwrap().spawned.len(),
        6,
        "not retried after the pause"
    );
    e.handle(Ev::Update(6, no_room()), t0 + GIVE_UP_AFTER);
    assert_eq!(
        answer(&mut d).unwrap().exit,
        Exit::Error("PMIX_ERR_JOB_FAILED_TO_MAP".into())
    );
}

fn no_room() -> Update {
    Update::SpawnFailed {
        status: FAILED_TO_MAP,
        message: "PMIX_ERR_JOB_FAILED_TO_MAP".into(),
    }
}

#[test]
fn the_last_of_ours_refused_too_does_not_leave_the_run_waiting() {
    // Two in flight: the first refused while the other runs (held), then the other refused
    // with nothing of ours left running: both are tried again after a pause, not never.
    let (mut e, fake) = engine(None);
    let t0 = Instant::now();
    let mut a = submit(&mut e, TaskLine::command(0, ["a"]), t0);
    let mut b = submit(&mut e, TaskLine::command(1, ["b"]), t0);
    e.handle(Ev::Update(1, no_room()), t0);
    e.handle(Ev::Update(2, no_room()), t0);
    e.tick(t0);
    assert_eq!(fake.0.lock().unwrap().spawned.len(), 2);
    e.tick(t0 + RETRY_PAUSE_MIN);
    let again: Vec<Vec<String>> = fake.0.lock().unwrap().spawned[2..]
        .iter()
        .map(|(_, argv)| argv.clone())
        .collect();
    assert_eq!(again, [vec!["b".to_string()], vec!["a".to_string()]]);
    e.handle(Ev::Update(3, ended(0, &[])), t0);
    e.handle(Ev::Update(4, ended(0, &[])), t0);
    assert_eq!(answer(&mut a).unwrap().exit, Exit::Status(0));
    assert_eq!(answer(&mut b).unwrap().exit, Exit::Status(0));
}

#[test]
fn an_unanswered_spawn_fails_its_task_and_a_late_job_is_killed() {
    let (mut e, fake) = engine(None);
    let t0 = Instant::now();
    let mut a = submit(&mut e, TaskLine::command(0, ["a"]), t0);
    e.tick(t0 + SPAWN_ANSWER_WITHIN - Duration::from_millis(1));
    assert!(answer(&mut a).is_none());
    e.tick(t0 + SPAWN_ANSWER_WITHIN);
    let r = answer(&mut a).unwrap();
    assert!(
        matches!(r.exit, Exit::Error(ref m) if m.contains("did not answer its spawn request")),
        "{r:?}"
    );
    assert_eq!(e.stats.running.load(Ordering::Relaxed), 0);
    // Its job starts after all: it is killed, and reported once only.
    e.handle(Ev::Update(1, started("late")), t0 + SPAWN_ANSWER_WITHIN);
    assert_eq!(fake.0.lock().unwrap().killed, ["late"]);

    // With a timeout of its own, past it and the grace a kill gets: a timeout.
    let mut task = TaskLine::command(1, ["b"]);
    task.timeout = Some(Duration::from_secs(5));
    let mut b = submit(&mut e, task, t0);
    e.tick(t0 + Duration::from_secs(5) + KILL_GRACE - Duration::from_millis(1));
    assert!(answer(&mut b).is_none());
    e.tick(t0 + Duration::from_secs(5) + KILL_GRACE);
    assert_eq!(answer(&mut b).unwrap().exit, Exit::Timeout);
}

#[test]
fn each_ended_task_is_timed_from_its_spawn_request() {
    let (mut e, _fake) = engine(None);
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let _a = submit(&mut e, TaskLine::command(0, ["a"]), t0);
    let _b = submit(&mut e, TaskLine::command(1, ["b"]), t0);
    e.handle(Ev::Update(1, started("ns1")), t0 + ms(2));
    e.handle(Ev::Update(1, ended(0, &[])), t0 + ms(12));
    // Ended without its start reported: no launch phase.
    e.handle(Ev::Update(2, ended(0, &[])), t0 + ms(30));
    let times = e.stats.times.lock().unwrap().clone();
    assert_eq!(times.len(), 2);
    assert_eq!(
        times.summary(),
        "per task (median/p99 ms): spawn answered 2.0/2.0, launch to end 10.0/10.0, \
         request to result 12.0/30.0"
    );
}

#[test]
fn after_the_connection_is_lost_running_tasks_are_lost_and_the_rest_not_started() {
    let (mut e, fake) = engine(None);
    let t0 = Instant::now();
    let mut a = submit(&mut e, TaskLine::command(0, ["a"]), t0);
    e.handle(Ev::Update(1, Update::Lost { status: -25 }), t0);
    assert_eq!(answer(&mut a).unwrap().exit, Exit::Lost);
    let mut b = submit(&mut e, TaskLine::command(1, ["b"]), t0);
    assert!(matches!(b.try_recv(), Ok(Err(Error::NotStarted(1)))));
    assert_eq!(fake.0.lock().unwrap().spawned.len(), 1);

    // A spawn call that finds the connection gone: not started either.
    let (mut e, fake) = engine(None);
    fake.0.lock().unwrap().refuse = Some(|| prrte_k8s_pmix_tool::Error::Lost);
    let mut c = submit(&mut e, TaskLine::command(0, ["c"]), t0);
    assert!(matches!(c.try_recv(), Ok(Err(Error::NotStarted(0)))));
}

#[test]
fn a_refused_spawn_call_is_the_tasks_result() {
    let (mut e, fake) = engine(None);
    fake.0.lock().unwrap().refuse = Some(|| prrte_k8s_pmix_tool::Error::EmptyTask);
    let mut a = submit(&mut e, TaskLine::command(5, ["x"]), Instant::now());
    let a = answer(&mut a).unwrap();
    assert_eq!(a.index, 5);
    assert!(matches!(a.exit, Exit::Error(ref m) if m.contains("needs a command")));
}

#[test]
fn output_is_kept_per_task_even_after_its_end_and_quiet_is_awaited() {
    let dir = tempfile::tempdir().unwrap();
    let (mut e, _fake) = engine(Some(dir.path().to_path_buf()));
    let t0 = Instant::now();
    let _a = submit(&mut e, TaskLine::command(3, ["echo"]), t0);
    let out = |bytes: &[u8], stderr| Update::Output {
        rank: 0,
        stderr,
        bytes: bytes.to_vec(),
    };
    e.handle(Ev::Update(1, out(b"one ", false)), t0);
    e.handle(Ev::Update(1, ended(0, &[])), t0);
    let (tx, rx) = channel();
    e.handle(
        Ev::Quiet {
            quiet: Duration::from_millis(300),
            reply: tx,
        },
        t0,
    );
    let t1 = t0 + Duration::from_millis(200);
    e.handle(Ev::Update(1, out(b"two\n", false)), t1);
    e.handle(Ev::Update(1, out(b"oops\n", true)), t1);
    e.tick(t1 + Duration::from_millis(299));
    assert!(rx.try_recv().is_err(), "quiet reported while output came");
    e.tick(t1 + Duration::from_millis(300));
    assert!(rx.try_recv().is_ok());
    let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
    assert_eq!(read("3.out"), "one two\n");
    assert_eq!(read("3.err"), "oops\n");
}
