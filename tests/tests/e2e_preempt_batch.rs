//! Preemption of batch jobs end to end, the way a user runs them (`prrte-k8s manifest
//! --preempt-signal SIGUSR1 --grace-period S ... | kubectl apply -f -`, the example image's
//! pods, `tests/programs/preempt_signal.py` under mpirun across the pods, its checkpoints in a
//! hostPath volume the test adds to the rendered pod template, as docs/user-guide.md tells users
//! to):
//! - a JobSet (`--kind jobset --max-restarts 1`) one of whose pods is evicted with a grace
//!   period mid-run: every rank is told and checkpoints, the JobSet restarts once (`kubectl get
//!   jobset`), the restarted program resumes from its checkpoint and the JobSet completes;
//! - `kubectl delete job` of a running batch Job: every rank is told with the seconds left and
//!   checkpoints, the pods end only after that, within the grace period.
//!
//! In both, nothing of the job is left running.
#![forbid(unsafe_code)]
use anyhow::{bail, Result};
use sandbox::api::resources::{JOBS, JOBSETS, PODS};
use sandbox::harness::batch_job::{condition, text, BatchJob, NS};
use sandbox::harness::kubectl::{cell, get_row};
use sandbox::harness::TestDir;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The pods' grace period (`--grace-period`), and what the ranks are told they have: less the
/// agents' `--kill-grace` (2 s, [`BatchJob`]'s manifests) and 1 s.
const GRACE: u64 = 20;
const HOLD: u64 = GRACE - 2 - 1;
/// The program's steps (10 a second): a run not preempted ends after 30 s.
const STEPS: u64 = 300;
/// Where the checkpoint volume is mounted in the pods.
const CKPT: &str = "/ckpt";
const RANKS: usize = 3;

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// `mpirun -n 3 python3 /ckpt/preempt_signal.py /ckpt STEPS SIGUSR1`: one rank per pod.
fn command() -> Vec<String> {
    let prog = format!("{CKPT}/preempt_signal.py");
    [
        "mpirun",
        "-n",
        "3",
        "python3",
        &prog,
        CKPT,
        &STEPS.to_string(),
        "SIGUSR1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The rendered manifest with a hostPath volume `ckpt` (the test's `ckpt` directory, holding
/// the program, writable by the pods' uid) mounted at [`CKPT`] in the pod template.
fn add_checkpoint_volume(dir: &TestDir, yaml: String) -> Result<String> {
    let host = checkpoint_dir(dir);
    std::fs::create_dir_all(&host)?;
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o777))?;
    let prog = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/preempt_signal.py");
    std::fs::copy(prog, host.join("preempt_signal.py"))?;
    let mut out = String::new();
    let (mut mounts, mut volumes) = (0, 0);
    for line in yaml.lines() {
        out.push_str(line);
        out.push('\n');
        let indent = &line[..line.len() - line.trim_start().len()];
        if line.trim() == "volumeMounts:" {
            out.push_str(&format!("{indent}- {{mountPath: {CKPT}, name: ckpt}}\n"));
            mounts += 1;
        } else if line.trim() == "volumes:" {
            out.push_str(&format!(
                "{indent}- {{name: ckpt, hostPath: {{path: '{}', type: Directory}}}}\n",
                host.display()
            ));
            volumes += 1;
        }
    }
    if (mounts, volumes) != (1, 1) {
        bail!("expected one container and one volume list in the manifest:\n{yaml}");
    }
    Ok(out)
}

fn checkpoint_dir(dir: &TestDir) -> PathBuf {
    dir.path().join("ckpt")
}

/// Starts the job: `prrte-k8s manifest --pods 3 --preempt-signal SIGUSR1 --grace-period
/// GRACE ARGS -- COMMAND`, the checkpoint volume added.
async fn start(name: &str, args: &[&str]) -> BatchJob {
    let grace = GRACE.to_string();
    let mut all = vec!["--preempt-signal", "SIGUSR1", "--grace-period", &grace];
    all.extend(args);
    let cmd = command();
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    BatchJob::start_edited(name, RANKS as u32, &all, &cmd, add_checkpoint_volume)
        .await
        .unwrap()
}

/// Waits until every rank wrote `ready.RANK` (its handler is in place).
fn wait_ready(job: &BatchJob) {
    let dir = checkpoint_dir(&job.dir);
    let deadline = Instant::now() + Duration::from_secs(240);
    while (0..RANKS).any(|r| !dir.join(format!("ready.{r}")).exists()) {
        assert!(
            Instant::now() < deadline,
            "the ranks did not start:\n{}",
            job.describe()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One rank's `notice.RANK`: the seconds it was told it has, when (ms), its step (its
/// checkpoint, which must say the same).
struct Notice {
    seconds: u64,
    told_ms: u128,
    step: u64,
}

fn notice(dir: &Path, rank: usize) -> Option<Notice> {
    let t = std::fs::read_to_string(dir.join(format!("notice.{rank}"))).ok()?;
    let f: Vec<&str> = t.split_whitespace().collect();
    assert_eq!(f.len(), 6, "notice.{rank}: {t:?}");
    assert_eq!(f[0], rank.to_string(), "notice.{rank}: {t:?}");
    let n = Notice {
        seconds: f[2]
            .parse()
            .unwrap_or_else(|_| panic!("notice.{rank}: {t:?}")),
        told_ms: f[4].parse().unwrap(),
        step: f[5].parse().unwrap(),
    };
    let ckpt = std::fs::read_to_string(dir.join(format!("ckpt.{rank}"))).unwrap();
    assert_eq!(ckpt.trim(), n.step.to_string(), "rank {rank}'s checkpoint");
    Some(n)
}

/// Waits until every rank wrote its notice (and checkpoint); checks what each was told: the
/// seconds left, within `within_ms` of `t0`, at a step past 0.
fn wait_notices(job: &BatchJob, t0: u128, within_ms: u128) -> Vec<Notice> {
    let dir = checkpoint_dir(&job.dir);
    let deadline = Instant::now() + Duration::from_secs(GRACE + 30);
    let mut got: BTreeMap<usize, Notice> = BTreeMap::new();
    while got.len() < RANKS {
        for r in 0..RANKS {
            if let std::collections::btree_map::Entry::Vacant(e) = got.entry(r) {
                if let Some(n) = notice(&dir, r) {
                    e.insert(n);
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "ranks {:?} wrote no notice:\n{}",
            (0..RANKS)
                .filter(|r| !got.contains_key(r))
                .collect::<Vec<_>>(),
            job.describe()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for (r, n) in &got {
        let late = n.told_ms.saturating_sub(t0);
        eprintln!(
            "rank {r}: told {late} ms after the pod was told to end, {} s left, step {}",
            n.seconds, n.step
        );
        assert!(late < within_ms, "rank {r} was told {late} ms late");
        assert!(
            (HOLD - 1..=HOLD).contains(&n.seconds),
            "rank {r}: {} s left, expected about {HOLD}",
            n.seconds
        );
        assert!(n.step > 0, "rank {r} checkpointed step 0");
    }
    got.into_values().collect()
}

/// Evicts `pod` through the API (`kubectl create --raw .../pods/POD/eviction`, grace
/// [`GRACE`] s), as a drain does; when it was asked (ms).
fn evict(job: &BatchJob, pod: &str) -> u128 {
    let body = job.dir.path().join("eviction.json");
    std::fs::write(
        &body,
        format!(
            r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{pod}","namespace":"{NS}"}},"deleteOptions":{{"gracePeriodSeconds":{GRACE}}}}}"#
        ),
    )
    .unwrap();
    let t0 = now_ms();
    let uri = format!("/api/v1/namespaces/{NS}/pods/{pod}/eviction");
    let out = job
        .kubectl(
            &["create", "--raw", &uri, "-f", body.to_str().unwrap()],
            Duration::from_secs(30),
        )
        .unwrap();
    assert!(out.status.success(), "kubectl eviction: {}", text(&out));
    t0
}

/// The host pids of every pod of the job now.
fn all_pids(job: &BatchJob) -> Vec<u32> {
    job.pods()
        .iter()
        .flat_map(|p| {
            job.cluster
                .pod_host_pids(&BatchJob::pod_name(p))
                .unwrap_or_default()
        })
        .collect()
}

/// None of `pids` (the job's processes seen while it ran) is alive any more.
fn assert_gone(pids: &[u32], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let left: Vec<&u32> = pids
            .iter()
            .filter(|p| Path::new(&format!("/proc/{p}")).exists())
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes of the job still run: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A 3-pod JobSet with one restart: pod 2 evicted mid-run; every rank checkpoints, the JobSet
/// restarts once, the ranks resume from their checkpoints and run to the end, the JobSet is
/// Completed, and nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobset_restart_resumes_from_the_checkpoint() {
    let job = start("presume", &["--kind", "jobset", "--max-restarts", "1"]).await;
    wait_ready(&job);
    let first: Vec<u32> = all_pids(&job);
    let victim = BatchJob::pod_name(&job.pods()[2]);
    // Every change of the stored objects from now on (to see how the evicted pod ended).
    let mut events = job.cluster.store().subscribe();
    let t0 = evict(&job, &victim);
    let notices = wait_notices(&job, t0, 3000);

    // The JobSet restarts once and then completes.
    let deadline = Instant::now() + Duration::from_secs(240);
    let js = loop {
        let js = job.cluster.store().get(&JOBSETS, NS, &job.name).unwrap();
        if condition(&js, "Completed").is_some() {
            break js;
        }
        assert!(
            condition(&js, "Failed").is_none() && Instant::now() < deadline,
            "the JobSet did not complete:\n{}",
            job.describe()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(js["status"]["restarts"], 1, "{}", job.describe());
    // The evicted pod ended Failed (its agent exited 143 although its rank exited 0 after the
    // checkpoint), with the eviction's DisruptionTarget: what failed the attempt.
    let mut last = None;
    while let Ok(ev) = events.try_recv() {
        if std::ptr::eq(ev.resource, &PODS) && ev.name == victim {
            last = Some(ev.object.clone());
        }
    }
    let last = last.expect("events of the evicted pod");
    assert_eq!(last["status"]["phase"], "Failed", "{}", last["status"]);
    assert_eq!(
        last.pointer("/status/containerStatuses/0/state/terminated/exitCode")
            .and_then(|c| c.as_i64()),
        Some(143),
        "{}",
        last["status"]
    );
    assert!(
        condition(&last, "DisruptionTarget").is_some(),
        "{}",
        last["status"]
    );
    let row = get_row(&job.cluster, "jobset", &job.name);
    assert_eq!(cell(&row, "RESTARTS"), "1", "{row:?}");
    assert_eq!(cell(&row, "TERMINALSTATE"), "Completed", "{row:?}");
    let child = job.cluster.store().get(&JOBS, NS, &job.job).unwrap();
    assert_eq!(
        child["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"], "1",
        "the Job of the restart completed"
    );
    assert!(
        condition(&child, "Complete").is_some(),
        "{}",
        child["status"]
    );

    // The restarted launcher's log: every rank resumed from its checkpoint and ran to the end.
    let pods = job.pods();
    let pod0 = pods
        .iter()
        .find(|p| {
            let l = &p["metadata"]["labels"];
            l["batch.kubernetes.io/job-completion-index"] == "0"
                && l["jobset.sigs.k8s.io/restart-attempt"] == "1"
        })
        .unwrap_or_else(|| panic!("no launcher pod of the restart:\n{}", job.describe()));
    let logs = job
        .kubectl(
            &["logs", &BatchJob::pod_name(pod0)],
            Duration::from_secs(30),
        )
        .unwrap();
    let log = String::from_utf8_lossy(&logs.stdout);
    assert!(logs.status.success(), "kubectl logs: {}", text(&logs));
    for (r, n) in notices.iter().enumerate() {
        let resumed = format!("resume rank {r} from step {}", n.step);
        assert!(log.contains(&resumed), "no {resumed:?} in:\n{log}");
        let done = format!("done rank {r} at step {STEPS}");
        assert!(log.contains(&done), "no {done:?} in:\n{log}");
    }
    job.assert_nothing_left(Duration::from_secs(30));
    assert_gone(&first, Duration::from_secs(30));
}

/// `kubectl delete job` of a running 3-pod batch Job: every pod gets SIGTERM with the grace
/// period; every rank is told within seconds with the seconds left and writes its checkpoint;
/// each pod ends only after its rank did so, within the grace period, and nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_batch_job_tells_every_rank_before_its_pods_end() {
    let job = start("pdelete", &[]).await;
    wait_ready(&job);
    let pids = all_pids(&job);
    let names: Vec<String> = job.pods().iter().map(|p| BatchJob::pod_name(p)).collect();
    assert_eq!(names.len(), RANKS, "{}", job.describe());
    let t0 = now_ms();
    let out = job
        .kubectl(
            &["delete", "job", &job.name, "--wait=false"],
            Duration::from_secs(30),
        )
        .unwrap();
    assert!(out.status.success(), "kubectl delete job: {}", text(&out));

    // Follow the pods until every one is gone; when each ended (its processes, then its object).
    let deadline = Instant::now() + Duration::from_secs(GRACE + 30);
    let mut ended: BTreeMap<String, u128> = BTreeMap::new();
    while ended.len() < names.len() {
        let now = now_ms();
        let pods = job.pods();
        for n in &names {
            let running = pods.iter().any(|p| BatchJob::pod_name(p) == *n)
                && job.cluster.pod_host_pids(n).is_ok_and(|v| !v.is_empty());
            if !running {
                ended.entry(n.clone()).or_insert(now);
            }
        }
        assert!(
            Instant::now() < deadline,
            "pods still run {} s after the Job was deleted: {:?}\n{}",
            GRACE + 30,
            names
                .iter()
                .filter(|n| !ended.contains_key(*n))
                .collect::<Vec<_>>(),
            job.describe()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let notices = wait_notices(&job, t0, 5000);
    let last_told = notices.iter().map(|n| n.told_ms).max().unwrap();
    for (pod, at) in &ended {
        let after = at.saturating_sub(t0);
        eprintln!("{pod}: ended {after} ms after kubectl delete");
        assert!(
            *at >= last_told,
            "{pod} ended {} ms before the last rank was told",
            last_told - at
        );
        assert!(
            after < u128::from(GRACE) * 1000,
            "{pod} ran until the end of its grace period ({after} ms): the ranks' exit did not end it"
        );
    }
    assert!(
        job.cluster.store().get(&JOBS, NS, &job.name).is_err(),
        "the Job is gone"
    );
    assert_gone(&pids, Duration::from_secs(10));
}
