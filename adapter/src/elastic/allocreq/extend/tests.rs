use super::*;
use std::net::Ipv4Addr;

fn node(h: &str) -> PodNode {
    PodNode {
        pod: format!("{h}-pod"),
        namespace: "ns".into(),
        uid: h.into(),
        ip: Ipv4Addr::new(10, 0, 0, 2),
        hostname: h.into(),
        slots: 2,
        index: Some(2),
        is_self: false,
    }
}

fn script(dir: &Path, body: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("prun");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn prun_gets_the_uri_and_the_hosts_and_its_status_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let args = dir.path().join("args");
    let prun = script(
        dir.path(),
        &format!("echo \"$@\" > {}; exit 0", args.display()),
    );
    add_to_dvm(
        &prun,
        "prte@0.0;tcp4://10.0.0.1:1",
        &[node("a"), node("b")],
        Duration::from_secs(10),
    )
    .unwrap();
    let root = if nix::unistd::geteuid().is_root() {
        " --allow-run-as-root"
    } else {
        ""
    };
    assert_eq!(
        std::fs::read_to_string(&args).unwrap().trim(),
        format!("--dvm-uri prte@0.0;tcp4://10.0.0.1:1 --add-host a:2,b:2{root} -n 1 true")
    );
    assert_eq!(add_to_dvm(&prun, "u", &[], Duration::from_secs(1)), Ok(()));
}

#[test]
fn a_failing_prun_is_an_error_with_what_it_said() {
    let dir = tempfile::tempdir().unwrap();
    let prun = script(dir.path(), "echo 'no such host' >&2; exit 3");
    let e = add_to_dvm(&prun, "u", &[node("a")], Duration::from_secs(10)).unwrap_err();
    assert!(e.contains("exited 3") && e.contains("no such host"), "{e}");
}

#[test]
fn a_prun_that_hangs_is_killed_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let prun = script(
        dir.path(),
        &format!("echo $$ > {}; exec sleep 60", pidfile.display()),
    );
    let t = std::time::Instant::now();
    let e = add_to_dvm(&prun, "u", &[node("a")], Duration::from_millis(500)).unwrap_err();
    assert!(e.contains("did not finish"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The killed prun is gone (reaped by its shell, which was killed too).
    std::thread::sleep(Duration::from_millis(200));
    let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false);
    assert!(!alive, "prun {pid} still runs");
}

#[test]
fn a_rollback_is_said_in_the_reason() {
    let r = with_rollback(
        refuse(Status::Timeout, "2 pods never became ready"),
        "el",
        2,
        None,
    );
    assert_eq!(r.status, Status::Timeout);
    assert!(
        r.reason.ends_with("el was lowered back to 2 pods"),
        "{}",
        r.reason
    );
}

#[test]
fn prte_s_own_pmix_identity_is_not_handed_to_prun() {
    assert!(strips("PMIX_NAMESPACE") && strips("PMIX_RANK") && strips("PMIX_SERVER_URI41"));
    assert!(strips("PMIX_MCA_ptl_base_ipv4_port"));
    assert!(!strips("PMIX_MCA_gds") && !strips("TMPDIR"));
}
