use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Mutex;

use futures::StreamExt;
use prrte_k8s_pmix_tool::{Ended, Task, Update};

use super::*;
use crate::workflow::Exit;

/// A spawned task as the stand-in saw it: its id, its command and where its updates go.
type Spawned = (u64, Vec<String>, Sender<(u64, Update)>);

/// A stand-in connection whose tasks a test ends by hand, counting how many run at once.
#[derive(Clone, Default)]
struct Fake(Arc<Mutex<Vec<Spawned>>>, Arc<AtomicUsize>);

impl Spawner for Fake {
    fn submit_to(
        &self,
        task: &Task,
        tx: Sender<(u64, Update)>,
    ) -> Result<u64, prrte_k8s_pmix_tool::Error> {
        let mut g = self.0.lock().unwrap();
        let id = self.1.fetch_add(1, Ordering::SeqCst) as u64;
        g.push((id, task.argv.clone(), tx));
        Ok(id)
    }
    fn kill(&self, _nspace: &str) -> Result<(), prrte_k8s_pmix_tool::Error> {
        Ok(())
    }
    fn status_name(&self, status: i32) -> String {
        status.to_string()
    }
}

#[tokio::test]
async fn map_keeps_at_most_max_in_flight_and_yields_every_result() {
    let fake = Fake::default();
    let dvm = Dvm::start(fake.clone(), None, None).unwrap();
    let n = 20;
    let tasks: Vec<TaskLine> = (0..n)
        .map(|i| TaskLine::command(i, ["sh", "-c", &format!("exit {}", i % 3)]))
        .collect();
    // Ends the oldest running task whenever three run; never sees more than three.
    let ender = {
        let fake = fake.clone();
        std::thread::spawn(move || {
            let mut most = 0;
            let mut ended = 0;
            while ended < n {
                let next = {
                    let mut g = fake.0.lock().unwrap();
                    most = most.max(g.len());
                    (g.len() == 3 || fake.1.load(Ordering::SeqCst) == n).then(|| g.remove(0))
                };
                match next {
                    Some((id, argv, tx)) => {
                        let code: i32 = argv[2].trim_start_matches("exit ").parse().unwrap();
                        let _ = tx.send((
                            id,
                            Update::Started {
                                nspace: format!("ns{id}"),
                            },
                        ));
                        let end = Ended {
                            status: code,
                            rank: None,
                            message: None,
                            pods: vec![format!("pod-{id}")],
                        };
                        let _ = tx.send((id, Update::Ended(end)));
                        ended += 1;
                    }
                    None => std::thread::yield_now(),
                }
            }
            most
        })
    };
    let results: Vec<TaskResult> = dvm
        .map(tasks, 3)
        .map(|r| r.expect("a result"))
        .collect()
        .await;
    let most = ender.join().unwrap();
    assert_eq!(most, 3, "in flight at once");
    let mut indices: Vec<usize> = results.iter().map(|r| r.index).collect();
    indices.sort();
    assert_eq!(indices, (0..n).collect::<Vec<_>>());
    for r in &results {
        assert_eq!(r.exit, Exit::Status((r.index % 3) as i32), "{r:?}");
        assert_eq!(r.pods.len(), 1);
    }
    // The engine counts after it answers: awaited, bounded.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while dvm.running() != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} still running",
            dvm.running()
        );
        std::thread::yield_now();
    }
    fake.0.lock().unwrap().clear();
    drop(dvm);
}

#[tokio::test]
async fn a_submitted_task_runs_without_being_polled_and_a_closed_dvm_answers_stopped() {
    let fake = Fake::default();
    let dvm = Dvm::start(fake.clone(), None, None).unwrap();
    let pending = dvm.submit(TaskLine::command(0, ["/bin/true"]));
    // Spawned before the future is polled.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while fake.0.lock().unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "never spawned");
        std::thread::yield_now();
    }
    fake.0.lock().unwrap().clear();
    drop(dvm);
    assert!(matches!(pending.await, Err(Error::Stopped)));
}
