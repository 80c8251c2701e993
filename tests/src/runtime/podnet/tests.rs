use super::host::tools;
use super::leftovers::{cleanup_dead_networks, cleanup_leftovers, leftovers};
use super::names::NAME_PREFIX;
use super::network::Network;
use super::pod::RunningPod;
use super::process::PodExit;
use super::procfs::{comm, ns_id, parent_of};
use super::spec::{ContainerSpec, PodSpec};
use crate::runtime::container::DEFAULT_PATH;
use std::collections::HashSet;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::Ipv4Addr;
use std::net::TcpListener;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

fn need_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "podnet tests create bridges, veths and namespaces: they must run as root"
    );
    tools().expect("host tools");
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn spec(net: &Network, dir: &Path, name: &str, command: &[&str]) -> PodSpec {
    PodSpec {
        name: name.to_string(),
        hostname: format!("{name}-host"),
        ip: net.alloc_ip().unwrap(),
        containers: vec![ContainerSpec {
            command: s(command),
            log_path: dir.join(format!("{name}.log")),
            ..Default::default()
        }],
    }
}

/// Runs `argv` in the pod; returns (success, stdout, stderr).
fn run_in(pod: &RunningPod, argv: &[&str]) -> (bool, String, String) {
    let out = pod
        .exec(&s(argv), &[])
        .stdin(Stdio::null())
        .output()
        .expect("spawn nsenter");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok_in(pod: &RunningPod, argv: &[&str]) -> String {
    let (ok, out, err) = run_in(pod, argv);
    assert!(ok, "{argv:?} in pod {} failed: {err}", pod.name());
    out
}

fn assert_clean(prefix: &str) {
    // Exiting processes can take a moment to disappear from /proc.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let l = leftovers(prefix);
        if l.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left behind under {prefix}: {l}");
        sleep(Duration::from_millis(20));
    }
}

#[test]
fn podnet_eight_pods_have_own_identity() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let net = Network::create().unwrap();
    let prefix = net.prefix();
    assert!(net.bridge().len() <= 15 && net.bridge().starts_with("pk8s"));
    assert!(net.cidr().starts_with("10.250.") && net.cidr().ends_with(".0/23"));
    let mut pods = Vec::new();
    for i in 0..8 {
        let mut sp = spec(&net, dir.path(), &format!("pod-{i}"), &["sleep", "1000"]);
        sp.hostname = format!("worker-{i}");
        pods.push(net.start_pod(sp).unwrap());
    }
    let ips: HashSet<Ipv4Addr> = pods.iter().map(|p| p.ip()).collect();
    assert_eq!(ips.len(), 8);
    for (i, pod) in pods.iter().enumerate() {
        assert_eq!(ok_in(pod, &["hostname"]).trim(), format!("worker-{i}"));
        let addr = ok_in(pod, &["ip", "-4", "-o", "addr", "show", "eth0"]);
        assert!(addr.contains(&format!("inet {}/23", pod.ip())), "{addr}");
        assert_eq!(
            ok_in(pod, &["cat", "/proc/1/cmdline"]),
            "sleep\u{0}1000\u{0}"
        );
        let route = ok_in(pod, &["ip", "-4", "route", "show", "default"]);
        assert!(route.contains(&format!("via {}", net.gateway())), "{route}");
        let lo = ok_in(pod, &["ip", "-o", "link", "show", "lo"]);
        assert!(lo.contains("UP"), "{lo}");
        let hosts = ok_in(pod, &["cat", "/etc/hosts"]);
        assert!(
            hosts.contains(&format!("{}\tworker-{i}", pod.ip())),
            "{hosts}"
        );
        // Own PID namespace: the pod sees its PID 1 and the exec'd processes only.
        let ps = ok_in(pod, &["sh", "-c", "ls -d /proc/[0-9]* | wc -l"]);
        assert!(ps.trim().parse::<u32>().unwrap() <= 5, "{ps}");
        let pid1 = pod.host_pid();
        assert_eq!(parent_of(pid1).map(comm).as_deref(), Some("unshare"));
        assert_eq!(pod.host_pids(), vec![pid1]);
        assert!(pod.netns().starts_with(&prefix));
    }
    drop(pods);
    net.teardown().unwrap();
    assert_clean(&prefix);
}

/// The bridge keeps its address while pods (their veths) come and go, so the pods' ARP entries
/// for the gateway stay right (an unset bridge address follows the lowest port's).
#[test]
fn podnet_bridge_address_stays_as_pods_come_and_go() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let net = Network::create().unwrap();
    let prefix = net.prefix();
    let addr = || {
        std::fs::read_to_string(format!("/sys/class/net/{}/address", net.bridge()))
            .unwrap()
            .trim()
            .to_string()
    };
    let first = addr();
    let mut pods = Vec::new();
    for i in 0..4 {
        let sp = spec(&net, dir.path(), &format!("mac-{i}"), &["sleep", "1000"]);
        pods.push(net.start_pod(sp).unwrap());
        assert_eq!(addr(), first, "after pod {i} started");
    }
    let gw = net.gateway().to_string();
    let reach = format!(": </dev/tcp/{gw}/1 2>/dev/null; true");
    ok_in(&pods[3], &["bash", "-c", &reach]);
    while pods.len() > 1 {
        drop(pods.remove(0));
        assert_eq!(addr(), first, "after a pod ended");
    }
    // The pod left sees the gateway at the bridge's address.
    ok_in(&pods[0], &["bash", "-c", &reach]);
    let neigh = ok_in(&pods[0], &["ip", "neigh", "show", &gw]);
    assert!(neigh.contains(&first), "{neigh} (bridge {first})");
    drop(pods);
    net.teardown().unwrap();
    assert_clean(&prefix);
}

#[test]
fn podnet_tcp_between_pods_and_to_gateway() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let net = Network::create().unwrap();
    let prefix = net.prefix();
    let a = net
        .start_pod(spec(&net, dir.path(), "server", &["sleep", "1000"]))
        .unwrap();
    // Pod b's address is past the first 256 of the /23 (host number 300, as the 299th pod's
    // would be): pods on both halves and the gateway reach each other.
    let base: Ipv4Addr = net.cidr().split('/').next().unwrap().parse().unwrap();
    let mut sb = spec(&net, dir.path(), "client", &["sleep", "1000"]);
    sb.ip = Ipv4Addr::from(u32::from(base) + 300);
    let b = net.start_pod(sb).unwrap();
    assert_eq!(b.ip().octets()[2], base.octets()[2] + 1);
    let mut beyond = spec(&net, dir.path(), "beyond", &["sleep", "1000"]);
    beyond.ip = Ipv4Addr::from(u32::from(base) + 511);
    let e = format!("{:#}", net.start_pod(beyond).unwrap_err());
    assert!(
        e.contains("is not a pod address of") && e.contains("/23"),
        "{e}"
    );

    // Pod-to-pod: a listener in pod a, a client in pod b.
    let listener_py = "import socket,sys\n\
        s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
        s.bind(('0.0.0.0', 7100)); s.listen(1); s.settimeout(20)\n\
        print('listening', flush=True)\n\
        c, addr = s.accept(); data = c.recv(100)\n\
        print(addr[0], data.decode(), flush=True)\n";
    let mut server = a
        .exec(&s(&["python3", "-c", listener_py]), &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "listening");
    let client_py = format!(
        "import socket\nc=socket.create_connection(('{}', 7100), 10)\nc.sendall(b'hello')\nc.close()\n",
        a.ip()
    );
    ok_in(&b, &["python3", "-c", &client_py]);
    assert_eq!(lines.next().unwrap().unwrap(), format!("{} hello", b.ip()));
    assert!(server.wait().unwrap().success());

    // Pod-to-host: a listener on the gateway address in this process.
    let l = TcpListener::bind((net.gateway(), 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let client_py = format!(
        "import socket\nc=socket.create_connection(('{}', {port}), 10)\nc.sendall(b'to-gateway')\nprint(c.recv(10).decode())\n",
        net.gateway()
    );
    let client = b
        .exec(&s(&["python3", "-c", &client_py]), &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut conn, peer) = l.accept().unwrap();
    assert_eq!(peer.ip(), std::net::IpAddr::V4(b.ip()));
    let mut buf = [0u8; 10];
    conn.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"to-gateway");
    conn.write_all(b"reply").unwrap();
    drop(conn);
    let out = client.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "reply");

    drop((a, b));
    drop(net);
    assert_clean(&prefix);
}

#[test]
fn podnet_bind_mount_is_private_to_its_pod() {
    need_root();
    let sa_target = Path::new("/var/run/secrets/kubernetes.io/serviceaccount");
    let host_had_secrets = Path::new("/run/secrets").exists();
    let dir = tempfile::tempdir().unwrap();
    let sa = dir.path().join("sa");
    fs::create_dir(&sa).unwrap();
    fs::write(sa.join("token"), "secret-token").unwrap();
    fs::write(dir.path().join("single"), "one file").unwrap();
    fs::create_dir(dir.path().join("wd")).unwrap();

    let net = Network::create().unwrap();
    let prefix = net.prefix();
    let mut sp = spec(&net, dir.path(), "with-sa", &["sleep", "1000"]);
    sp.containers[0].bind_mounts = vec![
        (sa.clone(), sa_target.to_path_buf()),
        (
            dir.path().join("single"),
            PathBuf::from("/opt/pk8s-test/deep/file"),
        ),
        (dir.path().join("wd"), PathBuf::from("/srv/pk8s-work")),
    ];
    sp.containers[0].workdir = Some(PathBuf::from("/srv/pk8s-work"));
    let with = net.start_pod(sp).unwrap();
    let without = net
        .start_pod(spec(&net, dir.path(), "without-sa", &["sleep", "1000"]))
        .unwrap();

    assert_eq!(
        ok_in(
            &with,
            &["cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"]
        ),
        "secret-token"
    );
    assert_eq!(
        ok_in(&with, &["cat", "/opt/pk8s-test/deep/file"]),
        "one file"
    );
    // The covered directories still show what the host has there.
    let run_entries = ok_in(&with, &["ls", "/run"]);
    assert!(
        run_entries.contains("prrte-k8s-sandbox") && run_entries.contains("netns"),
        "{run_entries}"
    );
    assert!(Path::new("/opt").read_dir().unwrap().all(|e| {
        let n = e.unwrap().file_name();
        with.exec(
            &s(&["test", "-e", &format!("/opt/{}", n.to_string_lossy())]),
            &[],
        )
        .status()
        .unwrap()
        .success()
    }));
    // Working directory (also for exec), and writes through the bind mount reach the host.
    assert_eq!(ok_in(&with, &["pwd"]).trim(), "/srv/pk8s-work");
    ok_in(&with, &["sh", "-c", "echo written > out.txt"]);
    assert_eq!(
        fs::read_to_string(dir.path().join("wd/out.txt")).unwrap(),
        "written\n"
    );

    let (ok, _, _) = run_in(&without, &["test", "-e", sa_target.to_str().unwrap()]);
    assert!(!ok, "the other pod must not see the service-account mount");
    let (ok, _, _) = run_in(&without, &["test", "-e", "/opt/pk8s-test"]);
    assert!(!ok);
    // Nothing was created on the host.
    assert_eq!(Path::new("/run/secrets").exists(), host_had_secrets);
    assert!(!Path::new("/opt/pk8s-test").exists());
    assert!(!Path::new("/srv/pk8s-work").exists());

    // Pods do not keep each other's network namespaces mounted (and thus alive), even
    // through the copies of /run the covering tmpfs holds.
    let other_ns = without.netns().to_string();
    let mountinfo = format!("/proc/{}/mountinfo", with.host_pid());
    assert!(fs::read_to_string(&mountinfo).unwrap().contains(&other_ns));
    drop(without);
    let mi = fs::read_to_string(&mountinfo).unwrap();
    assert!(!mi.contains(&other_ns), "{mi}");

    drop(with);
    drop(net);
    assert_clean(&prefix);
}

#[test]
fn podnet_kill_ends_every_process_in_the_pod() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let net = Network::create().unwrap();
    let prefix = net.prefix();
    let pod = net
        .start_pod(spec(
            &net,
            dir.path(),
            "victim",
            &["sh", "-c", "sleep 1000 & sleep 1000"],
        ))
        .unwrap();
    let mut extra = pod
        .exec(&s(&["sleep", "1000"]), &[])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pod.host_pids().len() < 4 {
        assert!(Instant::now() < deadline, "pids: {:?}", pod.host_pids());
        sleep(Duration::from_millis(10));
    }
    let pids = pod.host_pids();
    assert!(pod.try_wait().unwrap().is_none());
    let exit = pod.kill().unwrap();
    assert_eq!(
        exit,
        PodExit {
            code: None,
            signal: Some(9)
        }
    );
    assert!(pod.host_pids().is_empty());
    for p in pids {
        assert!(!Path::new(&format!("/proc/{p}")).exists() || ns_id(p, "pid").is_none());
    }
    // nsenter reports its child's death.
    let st = extra.wait().unwrap();
    assert!(!st.success());
    // kill() again returns the same exit.
    assert_eq!(pod.kill().unwrap(), exit);
    drop(pod);
    drop(net);
    assert_clean(&prefix);
}

#[test]
fn podnet_exit_code_env_and_log() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let net = Network::create().unwrap();
    let prefix = net.prefix();
    let mut sp = spec(
        &net,
        dir.path(),
        "exits",
        &["sh", "-c", "env | sort; echo oops >&2; exit 3"],
    );
    sp.containers[0].env = vec![("A".into(), "1".into()), ("SPACED".into(), "x y=z".into())];
    let pod = net.start_pod(sp).unwrap();
    let exit = pod
        .wait_timeout(Duration::from_secs(10))
        .unwrap()
        .expect("pod ended");
    assert_eq!(
        exit,
        PodExit {
            code: Some(3),
            signal: None
        }
    );
    let log = fs::read_to_string(dir.path().join("exits.log")).unwrap();
    let mut vars: Vec<&str> = log.lines().filter(|l| l.contains('=')).collect();
    vars.sort();
    // Exactly the given variables plus PATH/HOME defaults (and PWD, which sh exports).
    assert_eq!(
        vars,
        vec![
            "A=1",
            "HOME=/root",
            &format!("PATH={DEFAULT_PATH}"),
            "PWD=/",
            "SPACED=x y=z"
        ]
    );
    assert!(log.contains("oops"));

    // A failing setup is an error that carries the log.
    let mut bad = spec(&net, dir.path(), "bad", &["sleep", "1000"]);
    bad.containers[0].workdir = Some(PathBuf::from("/nonexistent/pk8s"));
    let err = format!("{:#}", net.start_pod(bad).unwrap_err());
    assert!(err.contains("cannot change to working directory"), "{err}");

    drop(pod);
    drop(net);
    assert_clean(&prefix);
}

#[test]
fn podnet_network_drop_takes_live_pods_down() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let net = Network::create().unwrap();
    let net2 = Network::create().unwrap();
    assert_ne!(net.cidr(), net2.cidr());
    let prefix = net.prefix();
    let pod = net
        .start_pod(spec(&net, dir.path(), "orphan", &["sleep", "1000"]))
        .unwrap();
    let pid1 = pod.host_pid();
    drop(net);
    assert_eq!(
        pod.try_wait().unwrap(),
        Some(PodExit {
            code: None,
            signal: Some(9)
        })
    );
    assert!(ns_id(pid1, "pid").is_none() || pod.host_pids().is_empty());
    drop(pod);
    drop(net2);
    assert_clean(&prefix);
}

#[test]
fn podnet_panic_still_cleans_up() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    /// Reaps an exec'd process after the pod (declared earlier, dropped later) is gone.
    struct Reap(Option<Child>);
    impl Drop for Reap {
        fn drop(&mut self) {
            if let Some(mut c) = self.0.take() {
                let _ = c.wait();
            }
        }
    }
    let mut prefix = String::new();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut exec = Reap(None);
        let net = Network::create().unwrap();
        prefix = net.prefix();
        let pod = net
            .start_pod(spec(&net, dir.path(), "doomed", &["sleep", "1000"]))
            .unwrap();
        exec.0 = Some(pod.exec(&s(&["sleep", "1000"]), &[]).spawn().unwrap());
        assert!(!leftovers(&prefix).is_empty());
        panic!("test body fails");
    }));
    assert!(r.is_err());
    assert!(prefix.starts_with(NAME_PREFIX));
    assert_clean(&prefix);
}

#[test]
fn podnet_cleanup_leftovers_after_a_lost_network() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let net = Network::create().unwrap();
    let prefix = net.prefix();
    let pod = net
        .start_pod(spec(&net, dir.path(), "lost", &["sleep", "1000"]))
        .unwrap();
    let pid1 = pod.host_pid();
    // As if the test process had died: nothing gets torn down. (The owner lock stays held, so
    // that the sweep test running beside this one leaves the network to this test.)
    std::mem::forget(pod);
    std::mem::forget(net);
    let found = leftovers(&prefix);
    assert_eq!(found.netns.len(), 1, "{found}");
    assert_eq!(found.links.len(), 2, "{found}");
    assert!(found.processes.iter().any(|(p, _)| *p == pid1), "{found}");
    assert_eq!(found.state_dirs.len(), 1, "{found}");
    assert!(cleanup_leftovers("eth").is_err());
    let cleaned = cleanup_leftovers(&prefix).unwrap();
    assert_eq!(cleaned.netns, found.netns);
    assert_clean(&prefix);
    let _ = std::fs::remove_file(super::host::owner_lock_path(&prefix));
}

#[test]
fn podnet_sweep_removes_dead_networks_only() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let dead = Network::create().unwrap();
    let dead_prefix = dead.prefix();
    let pod = dead
        .start_pod(spec(&dead, dir.path(), "dead", &["sleep", "1000"]))
        .unwrap();
    let dead_pid = pod.host_pid();
    std::mem::forget(pod);
    dead.abandon();
    let live = Network::create().unwrap();
    let live_prefix = live.prefix();
    let live_pod = live
        .start_pod(spec(&live, dir.path(), "live", &["sleep", "1000"]))
        .unwrap();

    let removed = cleanup_dead_networks().unwrap();
    let (_, what) = removed
        .iter()
        .find(|(p, _)| *p == dead_prefix)
        .unwrap_or_else(|| panic!("{dead_prefix} not swept: {removed:?}"));
    assert_eq!(what.netns.len(), 1, "{what}");
    assert!(what.processes.iter().any(|(p, _)| *p == dead_pid), "{what}");
    assert!(
        removed.iter().all(|(p, _)| *p != live_prefix),
        "a live network was swept: {removed:?}"
    );
    assert_clean(&dead_prefix);
    // The live network and its pod are untouched.
    let still = leftovers(&live_prefix);
    assert_eq!(still.netns.len(), 1, "{still}");
    assert!(live_pod.try_wait().unwrap().is_none());
    drop(live_pod);
    drop(live);
    assert_clean(&live_prefix);
}

#[test]
fn podnet_a_pod_reusing_a_gone_pods_address_is_reached_at_once() {
    need_root();
    let dir = tempfile::tempdir().unwrap();
    let net = Network::create().unwrap();
    let prefix = net.prefix();
    let a = net
        .start_pod(spec(&net, dir.path(), "asker", &["sleep", "1000"]))
        .unwrap();
    let first = spec(&net, dir.path(), "first", &["sleep", "1000"]);
    let ip = first.ip;
    let b = net.start_pod(first).unwrap();
    // A TCP connection attempt (refused: nothing listens) needs the peer's MAC address; it
    // hangs while pod a sends to a MAC that is gone.
    let knock = format!("timeout 2 bash -c ': </dev/tcp/{ip}/1' 2>/dev/null; echo rc=$?");
    // Pod a learns pod b's MAC address.
    assert_eq!(ok_in(&a, &["bash", "-c", &knock]).trim(), "rc=1");
    let neigh = ok_in(&a, &["ip", "neigh", "show", &ip.to_string()]);
    assert!(neigh.contains("lladdr"), "{neigh}");
    // (A neighbour entry learnt in the last second is not overridden: the kernel's locktime.)
    sleep(Duration::from_millis(1500));
    drop(b);
    // Another pod with the same address (a Job's pod for an index that came back).
    let mut again = spec(&net, dir.path(), "again", &["sleep", "1000"]);
    again.ip = ip;
    let c = net.start_pod(again).unwrap();
    let mac = ok_in(&c, &["cat", "/sys/class/net/eth0/address"]);
    let started = Instant::now();
    assert_eq!(ok_in(&a, &["bash", "-c", &knock]).trim(), "rc=1");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "pod a reached the new pod only after {:?}",
        started.elapsed()
    );
    let neigh = ok_in(&a, &["ip", "neigh", "show", &ip.to_string()]);
    assert!(
        neigh.contains(mac.trim()),
        "{neigh} (new pod {})",
        mac.trim()
    );
    drop((a, c));
    drop(net);
    assert_clean(&prefix);
}
