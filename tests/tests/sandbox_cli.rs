//! The prrte-k8s-sandbox command line: up / exec / kill / status / down (needs root).
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_prrte-k8s-sandbox");

fn sandbox(state: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--state")
        .arg(state)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running prrte-k8s-sandbox")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).trim().to_string()
}

/// Takes the sandbox down however the test ends.
struct Down(PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = sandbox(&self.0, &["down"]);
    }
}

#[test]
fn up_exec_kill_status_down() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let _guard = Down(state.clone());

    let out = sandbox(
        &state,
        &[
            "up", "--pods", "3", "--job", "cli", "--cpu", "1", "--", "sleep", "600",
        ],
    );
    assert!(
        out.status.success(),
        "up failed: {}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    let stdout = text(&out.stdout);
    let mut lines = stdout.lines();
    let kubeconfig = lines
        .next()
        .unwrap()
        .strip_prefix("kubeconfig: ")
        .expect("first line names the kubeconfig")
        .to_string();
    assert!(Path::new(&kubeconfig).is_file());
    let pods: Vec<(String, String, String)> = lines
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "pod line {l:?}");
            (f[0].to_string(), f[1].to_string(), f[2].to_string())
        })
        .collect();
    assert_eq!(
        pods.iter().map(|p| p.2.as_str()).collect::<Vec<_>>(),
        ["0", "1", "2"],
        "{stdout}"
    );
    let st: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("state.json")).unwrap()).unwrap();
    let gateway = st["gateway"].as_str().unwrap();
    let prefix = st["network_prefix"].as_str().unwrap().to_string();
    let server_pid = st["pid"].as_u64().unwrap();
    let net = &gateway[..gateway.rfind('.').unwrap()];
    for (name, ip, idx) in &pods {
        assert!(name.starts_with(&format!("cli-{idx}-")), "{name}");
        assert!(ip.starts_with(&format!("{net}.")), "{ip} in {net}.0/23");
    }

    // exec: output, exit status and stdin pass through.
    let (p0, p0_ip, _) = &pods[0];
    let out = sandbox(
        &state,
        &[
            "exec",
            p0,
            "--",
            "sh",
            "-c",
            "hostname; echo $POD_IP; exit 7",
        ],
    );
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("cli-0\n{p0_ip}"));
    let mut child = Command::new(BIN)
        .arg("--state")
        .arg(&state)
        .args(["exec", p0, "--", "tr", "a-z", "A-Z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"through stdin\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(text(&out.stdout), "THROUGH STDIN");
    let out = sandbox(&state, &["exec", "no-such-pod", "--", "true"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no pod \"no-such-pod\""),
        "{}",
        text(&out.stderr)
    );

    // The kubeconfig works for kubectl.
    if let Some(kubectl) = sandbox::harness::kubectl::find() {
        let out = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["get", "pods", "-l", "job-name=cli", "-o", "wide"])
            .output()
            .unwrap();
        let t = text(&out.stdout);
        assert!(out.status.success(), "{}", text(&out.stderr));
        for (name, ip, _) in &pods {
            assert!(t.contains(name) && t.contains(ip), "{t}");
        }
    }

    // kill evicts.
    let (p1, _, _) = &pods[1];
    let out = sandbox(&state, &["kill", p1]);
    assert!(out.status.success(), "kill: {}", text(&out.stderr));
    let out = sandbox(&state, &["status"]);
    let t = text(&out.stdout);
    let line = t
        .lines()
        .find(|l| l.starts_with(p1.as_str()))
        .unwrap_or_else(|| panic!("{p1} in status:\n{t}"));
    assert!(line.contains("Failed") && line.contains("false"), "{line}");
    let out = sandbox(&state, &["exec", p1, "--", "true"]);
    assert!(!out.status.success(), "exec into an evicted pod must fail");

    // down removes everything and waits for it.
    let out = sandbox(&state, &["down"]);
    assert!(out.status.success(), "down: {}", text(&out.stderr));
    assert!(!state.join("state.json").exists());
    let stat = std::fs::read_to_string(format!("/proc/{server_pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z "),
        "server still running: {stat}"
    );
    let left = sandbox::runtime::podnet::leftovers(&prefix);
    assert!(left.is_empty(), "left behind: {left}");
    let out = sandbox(&state, &["status"]);
    assert!(
        !out.status.success() && text(&out.stderr).contains("no sandbox is running"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn up_reports_failing_pods_and_cleans_up() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let _guard = Down(state.clone());
    let out = sandbox(
        &state,
        &[
            "up",
            "--pods",
            "2",
            "--job",
            "broken",
            "--timeout",
            "30",
            "--",
            "/no/such/program",
        ],
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("broken-") && err.contains("executable file not found"),
        "{err}"
    );
    assert!(
        !state.join("state.json").exists(),
        "torn down after failure"
    );
    let out = sandbox(&state, &["up", "--pods", "1"]);
    assert!(!out.status.success(), "--pods without --job is refused");
}

#[test]
fn max_pods_leaves_the_pods_beyond_it_pending() {
    let out = sandbox(Path::new("/nonexistent"), &["up", "--max-pods", "510"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("--max-pods") && err.contains("/23") && err.contains("509"),
        "{err}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let _guard = Down(state.clone());
    let out = sandbox(
        &state,
        &[
            "up",
            "--pods",
            "3",
            "--job",
            "cap",
            "--max-pods",
            "2",
            "--timeout",
            "5",
            "--",
            "sleep",
            "600",
        ],
    );
    assert!(
        !out.status.success(),
        "3 pods on a node of 2 are not all Ready"
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("did not become Ready")
            && err.contains("Too many pods (the sandbox node runs at most 2)")
            && err.matches(": Running, Ready").count() == 2,
        "{err}"
    );
}
