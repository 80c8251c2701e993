//! PRRTE with the k8s components in the sandbox cluster: allocation from pods, daemons through
//! the agents (no sshd anywhere), real MPI programs across pods.
#![forbid(unsafe_code)]
mod common;

use common::*;
use sandbox::harness;
use std::collections::BTreeSet;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allreduce_across_eight_pods_through_agents() {
    let mut spec = JobSpec::new("ar8", 8);
    spec.cpus = vec!["2"; 8];
    let job = Job::start(spec).await.unwrap();
    let prog = harness::mpi_program("allreduce").unwrap();
    let out = job
        .prterun(
            &["-n", "16", prog.to_str().unwrap()],
            Duration::from_secs(120),
        )
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "prterun failed: {t}");
    let lines = allreduce_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(lines.len(), 16, "{t}");
    assert!(
        lines.iter().all(|l| l.1 == 16 && l.3),
        "a rank got the wrong sum: {t}"
    );
    let ranks: BTreeSet<usize> = lines.iter().map(|l| l.0).collect();
    assert_eq!(ranks, (0..16).collect());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("k8s PLM") && !stderr.contains("daemon in pod"),
        "a clean run reports no failure: {t}"
    );
    let hosts: BTreeSet<String> = lines.iter().map(|l| l.2.clone()).collect();
    let expected: BTreeSet<String> = job.hostnames.iter().cloned().collect();
    assert_eq!(hosts, expected, "ranks must run on all 8 pods: {t}");
    // By-slot mapping in pod index order: ranks 2i and 2i+1 on pod i.
    for (rank, _, host, _) in &lines {
        assert_eq!(host, &job.hostnames[rank / 2], "rank {rank} placement: {t}");
    }
    job.wait_no_prteds(Duration::from_secs(10)).unwrap();
}

/// Issue acceptance: pods with different CPU requests, allocated in index order with their
/// derived slots; `worker-10` follows `worker-9`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocation_follows_pod_index_with_slots_from_cpu() {
    let mut spec = JobSpec::new("alloc", 12);
    // slots: 1,2,3,1,2,3,... ; "1500m" rounds down to 1
    spec.cpus = (0..12).map(|i| ["1500m", "2", "3"][i % 3]).collect();
    let job = Job::start(spec).await.unwrap();
    let slots: Vec<usize> = (0..12).map(|i| [1, 2, 3][i % 3]).collect();
    let total: usize = slots.iter().sum();
    let out = job
        .prterun(
            &[
                "--display",
                "alloc",
                "-n",
                &total.to_string(),
                "sh",
                "-c",
                "echo on=$(hostname); sleep 0.3",
            ],
            Duration::from_secs(120),
        )
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "prterun failed: {t}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // --display alloc lists the nodes in allocation order with their slots (the first listing
    // is the allocation as the RAS made it).
    let first = stdout
        .split("ALLOCATED NODES")
        .nth(1)
        .expect("an allocation display");
    let first = first
        .split("=====")
        .find(|s| s.contains("slots="))
        .unwrap_or(first);
    let listed: Vec<(String, usize)> = first
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let (name, rest) = l.split_once(':')?;
            let slots = rest
                .split_whitespace()
                .find_map(|w| w.strip_prefix("slots="))?
                .parse()
                .ok()?;
            Some((name.trim().to_string(), slots))
        })
        .collect();
    let expected: Vec<(String, usize)> = job
        .hostnames
        .iter()
        .cloned()
        .zip(slots.iter().copied())
        .collect();
    assert_eq!(listed, expected, "allocation order/slots: {t}");
    // Every slot filled: per pod exactly its slots.
    for (i, h) in job.hostnames.iter().enumerate() {
        let n = stdout.lines().filter(|l| *l == format!("on={h}")).count();
        assert_eq!(n, slots[i], "ranks on {h}: {t}");
    }
}

/// `ras_k8s_exclude_self`: prterun in pod 0 (an mpi-operator launcher) puts no rank there;
/// every slot of the other pods is used, and one rank more than they hold is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclude_self_runs_no_rank_in_the_launchers_pod() {
    let mut spec = JobSpec::new("exself", 3);
    spec.cpus = vec!["2"; 3];
    let job = Job::start(spec).await.unwrap();
    let exclude = ["--prtemca", "ras_k8s_exclude_self", "true"];
    let mut args = exclude.to_vec();
    args.extend(["-n", "4", "sh", "-c", "echo on=$(hostname)"]);
    let out = job.prterun(&args, Duration::from_secs(120)).unwrap();
    let t = text(&out);
    assert!(out.status.success(), "prterun failed: {t}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let on = |h: &str| stdout.lines().filter(|l| *l == format!("on={h}")).count();
    assert_eq!(
        on(&job.hostnames[0]),
        0,
        "no rank in the launcher's pod: {t}"
    );
    assert_eq!(on(&job.hostnames[1]), 2, "{t}");
    assert_eq!(on(&job.hostnames[2]), 2, "{t}");
    // Pod 0's two slots are not there to take a fifth rank.
    let mut args = exclude.to_vec();
    args.extend(["-n", "5", "true"]);
    let out = job.prterun(&args, Duration::from_secs(120)).unwrap();
    assert!(!out.status.success(), "5 ranks on 4 slots: {}", text(&out));
    job.wait_no_prteds(Duration::from_secs(10)).unwrap();
}

/// mpi4py from the PyPI wheels, across pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpi4py_allreduce_across_pods() {
    let mut spec = JobSpec::new("py4", 4);
    spec.cpus = vec!["2"; 4];
    let job = Job::start(spec).await.unwrap();
    let py = harness::venv().join("bin/python");
    let code =
        "from mpi4py import MPI; import socket; c = MPI.COMM_WORLD; s = c.allreduce(c.rank + 1); \
                print('py', c.rank, c.size, socket.gethostname(), s, flush=True)";
    let out = job
        .prterun(
            &["-n", "8", py.to_str().unwrap(), "-c", code],
            Duration::from_secs(120),
        )
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "prterun failed: {t}");
    let lines: Vec<Vec<String>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("py "))
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    assert_eq!(lines.len(), 8, "{t}");
    assert!(lines.iter().all(|l| l[2] == "8" && l[4] == "36"), "{t}");
    let hosts: BTreeSet<&str> = lines.iter().map(|l| l[3].as_str()).collect();
    assert_eq!(hosts.len(), 4, "{t}");
}

/// A persistent DVM: prte with ras/plm k8s, several prun jobs in a row, then pterm; no prted
/// is left in any pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_dvm_runs_several_jobs_then_pterm() {
    let mut spec = JobSpec::new("dvm", 4);
    spec.cpus = vec!["2"; 4];
    let job = Job::start(spec).await.unwrap();
    let prog = harness::mpi_program("allreduce").unwrap();
    let uri = job.dir.path().join("dvm.uri");
    let mut prte = job
        .start_prte(
            &["--report-uri", uri.to_str().unwrap()],
            Duration::from_secs(60),
        )
        .unwrap();
    for i in 0..4 {
        let prteds = job.pids_in_pod(i, "prted").unwrap();
        let n = prteds.len();
        assert_eq!(
            n > 0,
            i > 0,
            "pod {i} has {n} prted processes: one prted in each pod but prte's"
        );
        // Its own session and process group (as through ssh), not its agent's session.
        for p in prteds {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap();
            let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
            let (ppid, pgrp, session) = (f[1], f[2], f[3]);
            assert_eq!(
                (pgrp, session),
                (&*p.to_string(), &*p.to_string()),
                "pod {i}'s prted"
            );
            let parent = std::fs::read_to_string(format!("/proc/{ppid}/comm")).unwrap();
            assert!(parent.starts_with("prrte-k8s-agen"), "pod {i}: {parent}");
        }
    }
    let dvm = format!("file:{}", uri.display());
    for round in 0..3 {
        let out = prun(&job, &dvm, 8, prog.to_str().unwrap());
        let t = text(&out);
        assert!(out.status.success(), "prun round {round}: {t}");
        let lines = allreduce_lines(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(lines.len(), 8, "round {round}: {t}");
        assert!(lines.iter().all(|l| l.3), "round {round}: {t}");
    }
    halt_cleanly(&job, &mut prte, &dvm);
}

/// A DVM deeper than PRRTE's routing radix (radix 2 over 5 daemons: daemons 3 to 5 sit below
/// daemons 1 and 2, as daemons 65 and up do below others at the default radix 64): the radix
/// reaches every prted, jobs run through the tree, and `pterm` ends it cleanly although the
/// prteds below another prted exit with code 1 when their parent relays the halt and ends
/// first ("lifeline lost"), which is what PRRTE's halt does, not a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dvm_deeper_than_its_routing_radix_runs_jobs_and_halts_cleanly() {
    let mut spec = JobSpec::new("deep", 6);
    spec.cpus = vec!["2"; 6];
    let job = Job::start(spec).await.unwrap();
    let uri = job.dir.path().join("dvm.uri");
    let mut prte = job
        .start_prte(
            &[
                "--prtemca",
                "rml_base_radix",
                "2",
                "--report-uri",
                uri.to_str().unwrap(),
            ],
            Duration::from_secs(60),
        )
        .unwrap();
    // The radix is on the prteds' command lines: prte and its daemons agree on the tree.
    for i in 1..6 {
        let prteds = job.pids_in_pod(i, "prted").unwrap();
        let [p] = prteds[..] else {
            panic!("pod {i}: prteds {prteds:?}");
        };
        let argv = std::fs::read(format!("/proc/{p}/cmdline")).unwrap();
        let argv: Vec<&[u8]> = argv.split(|&b| b == 0).collect();
        assert!(
            argv.windows(2)
                .any(|w| w[0] == b"rml_base_radix" && w[1] == b"2"),
            "pod {i}'s prted: {:?}",
            String::from_utf8_lossy(&argv.join(&b' '))
        );
    }
    let dvm = format!("file:{}", uri.display());
    for round in 0..2 {
        let out = prun(&job, &dvm, 12, "hostname");
        let t = text(&out);
        assert!(out.status.success(), "prun round {round}: {t}");
        let hosts: BTreeSet<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
        assert_eq!(hosts.len(), 6, "round {round}: every pod runs ranks: {t}");
    }
    halt_cleanly(&job, &mut prte, &dvm);
}

/// `prun -n N PROGRAM` from pod 0 into the DVM at `dvm` (bounded).
fn prun(job: &Job, dvm: &str, n: usize, program: &str) -> std::process::Output {
    let n = n.to_string();
    let args = ["--allow-run-as-root", "--dvm-uri", dvm, "-n", &n, program];
    job.run_in_pod(0, "prun", &args, Duration::from_secs(60))
        .unwrap()
}

/// `pterm` from pod 0 ends the DVM at `dvm`: prte (started by [`Job::start_prte`]) exits with
/// success, reports no lost daemon, and no prted is left in any pod.
fn halt_cleanly(job: &Job, prte: &mut harness::Guarded, dvm: &str) {
    let out = job
        .run_in_pod(0, "pterm", &["--dvm-uri", dvm], Duration::from_secs(60))
        .unwrap();
    assert!(out.status.success(), "pterm: {}", text(&out));
    let st = prte.wait_timeout(Duration::from_secs(20)).unwrap();
    let out = job.output_of("prte");
    assert!(st.is_some(), "prte did not exit after pterm: {out}");
    assert!(st.unwrap().success(), "prte's exit after pterm: {out}");
    assert!(
        !out.contains("daemon in pod"),
        "a clean halt reports no failure: {out}"
    );
    job.wait_no_prteds(Duration::from_secs(10)).unwrap();
}

/// SIGKILL (the agents see their connections drop) or SIGTERM (prte finalizes) of prte: no
/// prted is left in any pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_prte_leaves_no_prted() {
    end_prte_with(nix::sys::signal::Signal::SIGKILL, "kill").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_prte_leaves_no_prted() {
    end_prte_with(nix::sys::signal::Signal::SIGTERM, "term").await;
}

async fn end_prte_with(signal: nix::sys::signal::Signal, name: &str) {
    let job = Job::start(JobSpec::new(name, 4)).await.unwrap();
    let prte = job.start_prte(&[], Duration::from_secs(60)).unwrap();
    for i in 1..4 {
        assert!(
            !job.pids_in_pod(i, "prted").unwrap().is_empty(),
            "no prted in pod {i} before the kill"
        );
    }
    prte.signal(signal);
    job.wait_no_prteds(Duration::from_secs(10)).unwrap();
    let mut prte = prte;
    assert!(
        prte.wait_timeout(Duration::from_secs(10))
            .unwrap()
            .is_some(),
        "prte still running after {signal}"
    );
}
