//! Several containers in one pod ([`RunningPod::start_container`]): what they share (network,
//! hostname, IPC, mounted host directories) and what each has of its own (processes,
//! restarts).

use super::RunningPod;
use crate::runtime::podnet::leftovers::leftovers;
use crate::runtime::podnet::network::Network;
use crate::runtime::podnet::spec::{ContainerSpec, PodSpec};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::thread::sleep;
use std::time::{Duration, Instant};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn container(dir: &Path, name: &str, command: &[&str], shared: &Path) -> ContainerSpec {
    ContainerSpec {
        name: name.to_string(),
        command: s(command),
        log_path: dir.join(format!("{name}.log")),
        bind_mounts: vec![(shared.to_path_buf(), PathBuf::from("/srv/pk8s-shared"))],
        ..Default::default()
    }
}

/// Runs `argv` in container `c`; its stdout, trimmed (the exit must be 0).
fn out_in(pod: &RunningPod, c: &str, argv: &[&str]) -> String {
    let out = pod
        .exec_in(c, &s(argv), &[])
        .unwrap()
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{argv:?} in {c}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs `script` with `sh -c` in container `c` (see [`out_in`]).
fn sh_in(pod: &RunningPod, c: &str, script: &str) -> String {
    out_in(pod, c, &["sh", "-c", script])
}

/// The System V shared memory segments the IPC namespace of container `c` holds (keys).
fn shm_keys(pod: &RunningPod, c: &str) -> Vec<String> {
    let table = sh_in(pod, c, "cat /proc/sysvipc/shm");
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        sleep(Duration::from_millis(20));
    }
}

const LISTENER: &str = "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('127.0.0.1', 7391))\ns.listen(5)\nwhile True:\n    c=s.accept()[0]\n    c.sendall(b'pong')\n    c.close()\n";

const CLIENT: &str = "import socket,sys,time\nfor _ in range(400):\n    try:\n        c=socket.create_connection(('127.0.0.1', 7391), timeout=2)\n        print(c.recv(16).decode())\n        sys.exit(0)\n    except OSError:\n        time.sleep(0.05)\nsys.exit(1)\n";

#[test]
fn podnet_containers_share_network_hostname_ipc_and_mounts_not_processes() {
    assert!(nix::unistd::geteuid().is_root(), "podnet tests need root");
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let net = Network::create().unwrap();
    let prefix = net.prefix();
    let pod = net
        .start_sandbox(&PodSpec {
            name: "duo".into(),
            hostname: "duo-host".into(),
            ip: net.alloc_ip().unwrap(),
            containers: Vec::new(),
        })
        .unwrap();
    assert!(pod.containers().is_empty());
    let server = container(dir.path(), "server", &["python3", "-c", LISTENER], &shared);
    pod.start_container(&server).unwrap();
    pod.start_container(&container(
        dir.path(),
        "client",
        &["sleep", "1000"],
        &shared,
    ))
    .unwrap();
    assert_eq!(pod.containers(), ["server", "client"]);

    // One network: the client reaches the server's listener on 127.0.0.1.
    assert_eq!(out_in(&pod, "client", &["python3", "-c", CLIENT]), "pong");
    // One hostname, one /etc/hosts.
    for c in ["server", "client"] {
        assert_eq!(sh_in(&pod, c, "cat /proc/sys/kernel/hostname"), "duo-host");
        assert!(sh_in(&pod, c, "cat /etc/hosts").contains("\tduo-host"));
    }
    // One IPC namespace for the pod, not the host's and not another pod's.
    sh_in(&pod, "server", "ipcmk -M 4096 >/dev/null");
    let keys = shm_keys(&pod, "server");
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(shm_keys(&pod, "client"), keys);
    let host = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
    assert!(
        !host
            .lines()
            .skip(1)
            .any(|l| l.split_whitespace().next() == Some(&keys[0])),
        "the pod's segment is in the host's IPC namespace"
    );
    let other = net
        .start_pod(PodSpec {
            name: "other".into(),
            hostname: "other-host".into(),
            ip: net.alloc_ip().unwrap(),
            containers: vec![container(dir.path(), "", &["sleep", "1000"], &shared)],
        })
        .unwrap();
    assert_eq!(other.containers(), ["c0"]);
    assert!(
        shm_keys(&other, "c0").is_empty(),
        "a fresh pod has no segment"
    );
    // The same host directory in both containers.
    sh_in(&pod, "server", "echo from-server > /srv/pk8s-shared/f");
    assert_eq!(
        sh_in(&pod, "client", "cat /srv/pk8s-shared/f"),
        "from-server"
    );
    // Own PID namespaces: each container's PID 1 is its own command.
    assert!(sh_in(&pod, "server", "tr '\\0' ' ' </proc/1/cmdline").starts_with("python3 -c"));
    assert_eq!(
        sh_in(&pod, "client", "tr '\\0' ' ' </proc/1/cmdline"),
        "sleep 1000"
    );

    // A container ends alone, and starts again in the same pod.
    assert!(pod.container_exit("server").unwrap().is_none());
    let exit = pod.kill_container("server").unwrap();
    assert_eq!(exit.signal, Some(9), "{exit}");
    assert!(pod.exec_in("server", &s(&["true"]), &[]).is_err());
    assert!(
        pod.container_exit("client").unwrap().is_none(),
        "the other container runs on"
    );
    assert!(pod
        .start_container(&container(dir.path(), "client", &["true"], &shared))
        .is_err());
    pod.start_container(&server).unwrap();
    assert_eq!(pod.containers(), ["server", "client"]);
    assert_eq!(out_in(&pod, "client", &["python3", "-c", CLIENT]), "pong");
    assert_eq!(shm_keys(&pod, "server"), keys, "IPC outlives a container");
    let once = container(dir.path(), "once", &["sh", "-c", "exit 7"], &shared);
    pod.start_container(&once).unwrap();
    wait_for("container once to end", || {
        pod.container_exit("once").unwrap().is_some()
    });
    assert_eq!(pod.container_exit("once").unwrap().unwrap().code, Some(7));

    drop((pod, other));
    net.teardown().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !leftovers(&prefix).is_empty() {
        assert!(Instant::now() < deadline, "{}", leftovers(&prefix));
        sleep(Duration::from_millis(20));
    }
}

/// A container that ended keeps the name of its PID namespace (`pid:[inode]`) to itself until
/// it is started again: the kernel gives the inode number of a freed namespace to the next
/// namespace it creates, here another container's, and a restart, which first waits until no
/// process of the ended container's namespace is left, would then wait for that container's.
#[test]
fn podnet_a_restart_does_not_wait_for_a_namespace_that_took_the_ended_one_s_name() {
    assert!(nix::unistd::geteuid().is_root(), "podnet tests need root");
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let net = Network::create().unwrap();
    let prefix = net.prefix();
    let pod = net
        .start_sandbox(&PodSpec {
            name: "reuse".into(),
            hostname: "reuse-host".into(),
            ip: net.alloc_ip().unwrap(),
            containers: Vec::new(),
        })
        .unwrap();
    let pidns = |c: &str| {
        let pid = pod.container_pid(c).expect("a running container's PID 1");
        crate::runtime::podnet::procfs::ns_id(pid, "pid").expect("its PID namespace")
    };
    let until_go = "until [ -e /srv/pk8s-shared/go ]; do sleep 0.05; done";
    let once = container(dir.path(), "once", &["sh", "-c", until_go], &shared);
    pod.start_container(&once).unwrap();
    let ended = pidns("once");
    std::fs::write(shared.join("go"), "").unwrap();
    wait_for("container once to end", || {
        pod.container_exit("once").unwrap().is_some()
    });
    std::fs::remove_file(shared.join("go")).unwrap();
    // New namespaces while the ended container is not started again: none gets its name.
    for i in 0..8 {
        let c = format!("other-{i}");
        pod.start_container(&container(dir.path(), &c, &["sleep", "1000"], &shared))
            .unwrap();
        assert_ne!(
            pidns(&c),
            ended,
            "{c} has the PID namespace name of ended `once`"
        );
    }
    // The restart's wait for the ended container's processes finds none (it would give up
    // after 10 s on the other container's and fail the start).
    // (The restart itself may get the freed name back: the wait is over by then.)
    let t0 = Instant::now();
    pod.start_container(&once).unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "the restart waited {:?} for processes of another namespace",
        t0.elapsed()
    );
    assert!(pod.container_exit("once").unwrap().is_none());
    assert!(
        (0..8).all(|i| pidns(&format!("other-{i}")) != pidns("once")),
        "the restarted container shares a PID namespace name with another"
    );

    drop(pod);
    net.teardown().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !leftovers(&prefix).is_empty() {
        assert!(Instant::now() < deadline, "{}", leftovers(&prefix));
        sleep(Duration::from_millis(20));
    }
}
