use super::buildah::parse_inspect;
use super::*;

#[test]
fn host_images() {
    for i in [
        "",
        "none",
        "prrte-k8s/sandbox-host",
        "prrte-k8s/sandbox-host:latest",
    ] {
        assert!(runs_on_host(i), "{i}");
    }
    for i in ["prrte-k8s:latest", "busybox", "prrte-k8s/sandbox-hostile:1"] {
        assert!(!runs_on_host(i), "{i}");
    }
}

#[test]
fn names_resolve_as_a_runtime_does() {
    for (name, full) in [
        ("mpioperator/x:tag", "docker.io/mpioperator/x:tag"),
        ("ubuntu", "docker.io/library/ubuntu:latest"),
        (
            "debian:bookworm-slim",
            "docker.io/library/debian:bookworm-slim",
        ),
        ("docker.io/ubuntu", "docker.io/library/ubuntu:latest"),
        ("localhost/x", "localhost/x:latest"),
        ("localhost/prrte-k8s:latest", "localhost/prrte-k8s:latest"),
        ("localhost:5000/a/b", "localhost:5000/a/b:latest"),
        ("quay.io/org/img:1", "quay.io/org/img:1"),
        ("ghcr.io/o/i@sha256:abc", "ghcr.io/o/i@sha256:abc"),
    ] {
        assert_eq!(normalize(name), full, "{name}");
    }
    let id = "a".repeat(64);
    assert_eq!(normalize(&id), id);
    assert_eq!(normalize(&format!("sha256:{id}")), format!("sha256:{id}"));
}

#[test]
fn pull_policy_defaults() {
    for (name, policy) in [
        ("ubuntu", "Always"),
        ("ubuntu:latest", "Always"),
        ("localhost:5000/x", "Always"),
        ("localhost:5000/x:2", "IfNotPresent"),
        ("mpioperator/x:tag", "IfNotPresent"),
        ("x@sha256:abc", "IfNotPresent"),
    ] {
        assert_eq!(default_pull_policy(name), policy, "{name}");
    }
}

#[test]
fn inspect_output() {
    let v = serde_json::json!({"FromImageID": "abc", "FromImage": "localhost/x:1",
        "OCIv1": {"config": {"User": "1000:1000", "Env": ["PATH=/bin", "A=b=c"], "Entrypoint": ["/e"], "Cmd": ["c", "d"], "WorkingDir": "/w"}}});
    let c = parse_inspect(&v);
    assert_eq!(c.id, "abc");
    assert_eq!(c.user, "1000:1000");
    assert_eq!(
        c.env,
        vec![("PATH".into(), "/bin".into()), ("A".into(), "b=c".into())]
    );
    assert_eq!(c.entrypoint, vec!["/e"]);
    assert_eq!(c.cmd, vec!["c", "d"]);
    assert_eq!(c.workdir, "/w");
}

#[test]
fn passwd_and_group_files() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("etc")).unwrap();
    std::fs::write(
        d.path().join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nbad line\napp:x:1000:1001::/home/app:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("etc/group"),
        "app:x:1001:\nextra:x:2000:app,other\n",
    )
    .unwrap();
    let p = passwd(d.path());
    assert_eq!(p.len(), 2);
    assert_eq!(
        p[1],
        PasswdEntry {
            name: "app".into(),
            uid: 1000,
            gid: 1001,
            home: "/home/app".into()
        }
    );
    let g = groups(d.path());
    assert_eq!(
        g[1],
        (
            "extra".to_string(),
            2000,
            vec!["app".to_string(), "other".to_string()]
        )
    );
}
