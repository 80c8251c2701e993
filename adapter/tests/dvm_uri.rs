//! The DVM URI: carried in launch requests, published by the agent while that prted runs,
//! refused when malformed; `ping_agent`; and the `prrte-k8s dvm-uri|prun|pterm` CLI.
#![forbid(unsafe_code)]

mod agent_support;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::mpsc::channel;
use std::sync::Mutex;
use std::time::Duration;

use agent_support::*;
use prrte_k8s::agent::write_dvm_uri_file;
use prrte_k8s::launch::{
    ping_agent, LaunchEvent, LaunchOptions, LaunchRequest, LaunchTarget, Launcher,
};
use prrte_k8s::protocol::Reply;

const CLI: &str = env!("CARGO_BIN_EXE_prrte-k8s");
/// On the launcher's own address (the tests' launcher connects from 127.0.0.1).
const URI: &str = "prte-pod-0-77@0.0;tcp4://127.0.0.1:7120";

fn opts(secret: &[u8]) -> LaunchOptions {
    LaunchOptions {
        secret: Some(secret.to_vec()),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        kill_grace: Duration::from_secs(2),
        heartbeat: Default::default(),
    }
}

fn target(addr: SocketAddr) -> LaunchTarget {
    LaunchTarget {
        id: 1,
        pod: "job-worker-1".into(),
        addr,
    }
}

#[test]
fn agent_publishes_the_uri_while_prted_runs() {
    let td = TestDir::new();
    // The agent creates the directory.
    let file = td.path("run/prrte-k8s/dvm.uri");
    let agent = AgentProc::spawn(&td, &["--dvm-uri-file", file.to_str().unwrap()]);
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    let launcher = Launcher::start(
        vec![(
            target(agent.addr),
            LaunchRequest {
                argv: mode_args("sleep"),
                env: vec![],
                dvm_uri: Some(URI.into()),
            },
        )],
        opts(&td.secret),
        Box::new(move |e| {
            let _ = tx.lock().unwrap().send(e);
        }),
    );
    assert!(matches!(
        rx.recv_timeout(WAIT).unwrap(),
        LaunchEvent::Started { .. }
    ));
    let text = wait_for(WAIT, || std::fs::read_to_string(&file).ok()).expect("URI file written");
    assert_eq!(text, format!("{URI}\n"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o644
    );
    launcher.shutdown(Duration::from_secs(10));
    assert!(matches!(
        rx.recv_timeout(WAIT).unwrap(),
        LaunchEvent::Exited { .. }
    ));
    assert!(
        wait_for(WAIT, || (!file.exists()).then_some(())).is_some(),
        "the URI file is removed when prted ends"
    );
}

#[test]
fn malformed_uri_is_refused_and_nothing_starts() {
    let td = TestDir::new();
    let file = td.path("dvm.uri");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _agent = rt.block_on(async {
        let (agent, _c, reply) =
            sleep_launch_with_dvm_uri(&td, &file, "ns.0;tcp4://evil.example:7120\nPATH=/x").await;
        match reply {
            Reply::Failed { reason } => assert!(
                reason.contains("invalid dvm_uri") && reason.contains("IPv4"),
                "{reason}"
            ),
            other => panic!("unexpected {other:?}"),
        }
        agent
    });
    assert_eq!(td.launches(), 0);
    assert!(!file.exists());
}

#[test]
fn ping_authenticates_both_ways() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        ping_agent(&target(agent.addr), &opts(&td.secret))
            .await
            .unwrap();
        let e = ping_agent(&target(agent.addr), &opts(b"another secret"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("authentication failed") && e.contains("job-worker-1"),
            "{e}"
        );
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = closed.local_addr().unwrap();
        drop(closed);
        let e = ping_agent(&target(addr), &opts(&td.secret))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot reach"), "{e}");
    });
    assert_eq!(td.launches(), 0, "a ping starts nothing");
}

#[test]
fn write_dvm_uri_file_replaces_atomically() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("dvm.uri");
    write_dvm_uri_file(&p, "a.0;tcp4://1.2.3.4:5").unwrap();
    write_dvm_uri_file(&p, URI).unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("{URI}\n"));
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("dvm.uri")],
        "no temporary file left"
    );
    assert!(write_dvm_uri_file(&d.path().join("missing/dvm.uri"), URI).is_err());
}

/// A fake PRRTE prefix whose tools print their arguments.
fn fake_prefix(d: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = d.join("prefix/bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["prun", "pterm"] {
        let p = bin.join(tool);
        std::fs::write(&p, format!("#!/bin/sh\necho {tool} \"$@\"\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    d.join("prefix")
}

#[test]
fn cli_dvm_uri_prun_and_pterm() {
    let d = tempfile::tempdir().unwrap();
    let prefix = fake_prefix(d.path());
    let file = d.path().join("dvm.uri");
    let run = |args: &[&str]| {
        Command::new(CLI)
            .args(args)
            .env("PRRTE_K8S_DVM_URI_FILE", &file)
            .env("PRRTE_K8S_PREFIX", &prefix)
            .env_remove("PRRTE_K8S_PRTED")
            .output()
            .unwrap()
    };
    // No DVM: cause and remedy.
    let out = run(&["dvm-uri"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no DVM URI at") && err.contains("--dvm-head auto"),
        "{err}"
    );
    let out = run(&["prun", "-n", "2", "./app"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no DVM URI"));

    std::fs::write(&file, format!("{URI}\nv5.0.5\n")).unwrap();
    let out = run(&["dvm-uri"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{URI}\n"));

    let root = nix::unistd::geteuid().is_root();
    let out = run(&["prun", "-n", "12", "--map-by", "node", "./app", "--flag"]);
    assert!(out.status.success(), "{out:?}");
    // prun gets a process set of ours (to find its job if we are interrupted), then the user's
    // arguments; a process set the user names is used instead.
    let got = String::from_utf8_lossy(&out.stdout).into_owned();
    let prefix = format!(
        "prun --dvm-uri file:{}{} --pset prrte-k8s-prun-",
        file.display(),
        if root { " --allow-run-as-root" } else { "" }
    );
    assert!(got.starts_with(&prefix), "{got}");
    assert!(
        got.ends_with(" -n 12 --map-by node ./app --flag\n"),
        "{got}"
    );
    assert_eq!(
        got.split_whitespace().count(),
        prefix.split_whitespace().count() + 6,
        "{got}"
    );
    let out = run(&["prun", "--pset", "mine", "-n", "1", "./app"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "prun --dvm-uri file:{}{} --pset mine -n 1 ./app\n",
            file.display(),
            if root { " --allow-run-as-root" } else { "" }
        )
    );
    let out = run(&["pterm"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("pterm --dvm-uri file:{}\n", file.display())
    );

    std::fs::write(&file, "garbage\n").unwrap();
    let out = run(&["prun", "true"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid dvm_uri"));
}

#[test]
fn cli_doctor_outside_a_pod_fails_with_remedies() {
    let d = tempfile::tempdir().unwrap();
    let out = Command::new(CLI)
        .args(["doctor", "--timeout", "2"])
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBECONFIG")
        .env("HOME", d.path())
        .env("PRRTE_K8S_PREFIX", d.path().join("nothing"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("[FAIL] in-cluster config: missing $KUBERNETES_SERVICE_HOST"),
        "{stdout}"
    );
    assert!(stdout.contains("[FAIL] PRRTE: prefix"), "{stdout}");
    assert!(stdout.contains("[FAIL] k8s components"), "{stdout}");
    assert!(stdout.matches("remedy:").count() >= 3, "{stdout}");
}
