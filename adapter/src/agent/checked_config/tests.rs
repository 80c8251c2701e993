use super::super::config::{DEFAULT_DVM_URI_FILE, DEFAULT_TOOL_PORT};
use super::*;
use crate::settings::Kind;
use clap::Parser;
use std::os::unix::fs::PermissionsExt;

fn args(dir: &Path, extra: &[&str]) -> AgentArgs {
    let prted = dir.join("prted");
    let mut v = vec![
        "prrte-k8s-agent".to_string(),
        "--prted".into(),
        prted.display().to_string(),
        "--secret-file".into(),
        dir.join("key").display().to_string(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    AgentArgs::try_parse_from(v).unwrap()
}

fn setup() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("prted"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        d.path().join("prted"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(d.path().join("key"), "7d1e0c9a4b2f86e3a5c7d9b1f0e2a4c6\n").unwrap();
    d
}

#[test]
fn defaults_follow_pod_ip() {
    let d = setup();
    let a = args(d.path(), &[]);
    let c = AgentConfig::from_args(&a, |k| (k == "POD_IP").then(|| "10.1.2.3".into())).unwrap();
    assert_eq!(c.listen, "10.1.2.3:7117".parse().unwrap());
    assert_eq!(c.health_listen, Some("10.1.2.3:7118".parse().unwrap()));
    assert_eq!(
        c.secret.as_deref(),
        Some(&b"7d1e0c9a4b2f86e3a5c7d9b1f0e2a4c6"[..])
    );
    assert_eq!(c.kill_grace, Duration::from_secs(5));
    assert_eq!(c.max_frame, 1024 * 1024);
    assert_eq!(c.tmpdir, PathBuf::from("/tmp"));
    let c = AgentConfig::from_args(&a, |_| None).unwrap();
    assert_eq!(c.listen, "0.0.0.0:7117".parse().unwrap());
    let c = AgentConfig::from_args(&a, |k| (k == "POD_IP").then(|| "fd00::5".into())).unwrap();
    assert_eq!(c.listen, "[fd00::5]:7117".parse().unwrap());
    let a = args(d.path(), &["--port", "9000", "--health-listen", "off"]);
    let c = AgentConfig::from_args(&a, |_| None).unwrap();
    assert_eq!(c.listen, "0.0.0.0:9000".parse().unwrap());
    assert_eq!(c.health_listen, None);
}

#[test]
fn metrics_are_served_only_when_asked_for() {
    let d = setup();
    let pod_ip = |k: &str| (k == "POD_IP").then(|| "10.1.2.3".to_string());
    let c = AgentConfig::from_args(&args(d.path(), &[]), pod_ip).unwrap();
    assert_eq!(c.metrics_listen, None, "off by default");
    let c = AgentConfig::from_args(&args(d.path(), &["--metrics-listen", "9090"]), pod_ip);
    assert_eq!(
        c.unwrap().metrics_listen,
        Some("10.1.2.3:9090".parse().unwrap())
    );
    let a = args(d.path(), &["--metrics-listen", "127.0.0.1:9091"]);
    let c = AgentConfig::from_args(&a, pod_ip).unwrap();
    assert_eq!(c.metrics_listen, Some("127.0.0.1:9091".parse().unwrap()));
    for bad in ["0", "70000", "metrics", "10.0.0.1"] {
        let a = args(d.path(), &["--metrics-listen", bad]);
        let e = AgentConfig::from_args(&a, pod_ip).unwrap_err().to_string();
        assert!(
            e.contains("--metrics-listen") && e.contains("\"off\""),
            "{bad}: {e}"
        );
    }
}

#[test]
fn refuses_bad_prted_and_missing_secret() {
    let d = setup();
    let mut a = args(d.path(), &[]);
    a.prted = Some(PathBuf::from("prted"));
    assert!(matches!(
        AgentConfig::from_args(&a, |_| None),
        Err(ConfigError::PrtedNotAbsolute(_))
    ));
    std::fs::write(d.path().join("noexec"), "x").unwrap();
    a.prted = Some(d.path().join("noexec"));
    let e = AgentConfig::from_args(&a, |_| None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not executable"), "{e}");
    a.prted = Some(d.path().to_owned());
    let e = AgentConfig::from_args(&a, |_| None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a regular file"), "{e}");

    std::fs::remove_file(d.path().join("key")).unwrap();
    let a = args(d.path(), &[]);
    let e = AgentConfig::from_args(&a, |_| None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--insecure-no-auth") && e.contains("key"), "{e}");
    let a = args(d.path(), &["--insecure-no-auth"]);
    assert!(AgentConfig::from_args(&a, |_| None)
        .unwrap()
        .secret
        .is_none());
}

#[test]
fn refuses_a_short_secret() {
    let d = setup();
    std::fs::write(d.path().join("key"), "0123456789abcdef0123456789abcde\n").unwrap();
    let e = AgentConfig::from_args(&args(d.path(), &[]), |_| None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("31 bytes") && e.contains("at least 32"), "{e}");
    // Not even with --insecure-no-auth: a present but weak secret is a mistake.
    let e = AgentConfig::from_args(&args(d.path(), &["--insecure-no-auth"]), |_| None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least 32"), "{e}");
    std::fs::write(d.path().join("key"), "f3a9c0e17b2d48a6905c1e7f3b2a8d4e\n").unwrap();
    assert!(AgentConfig::from_args(&args(d.path(), &[]), |_| None).is_ok());
}

#[test]
fn refuses_bad_limits() {
    let d = setup();
    let a = args(d.path(), &["--max-frame", "10"]);
    assert!(matches!(
        AgentConfig::from_args(&a, |_| None),
        Err(ConfigError::MaxFrame(10))
    ));
    let a = args(d.path(), &["--tmpdir", "/nonexistent-prrte-k8s"]);
    assert!(matches!(
        AgentConfig::from_args(&a, |_| None),
        Err(ConfigError::Tmpdir { .. })
    ));
}

#[test]
fn pod_index_sources_in_order() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    let e = env(&[
        ("JOB_COMPLETION_INDEX", "3"),
        ("POD_INDEX", "0"),
        ("HOSTNAME", "w-0"),
    ]);
    assert_eq!(pod_index(&e).unwrap().0, 3);
    let e = env(&[("POD_INDEX", "0"), ("HOSTNAME", "w-5")]);
    assert_eq!(pod_index(&e).unwrap(), (0, "POD_INDEX=0".to_string()));
    let e = env(&[("JOB_COMPLETION_INDEX", "x"), ("HOSTNAME", "mpi-worker-10")]);
    assert_eq!(pod_index(&e).unwrap().0, 10);
    let e = env(&[("HOSTNAME", "mpi-worker-0")]);
    assert_eq!(pod_index(&e).unwrap().0, 0);
    let e = env(&[("HOSTNAME", "launcher-abc")]);
    assert_eq!(pod_index(&e), None);
}

#[test]
fn dvm_head_needs_prte_and_an_ipv4_pod_ip() {
    let d = setup();
    std::fs::write(d.path().join("prte"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        d.path().join("prte"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let a = args(
        d.path(),
        &[
            "--dvm-head",
            "auto",
            "--prte-arg=--prtemca",
            "--prte-arg",
            "x",
        ],
    );
    let pod = |idx: &'static str| {
        move |k: &str| match k {
            "POD_IP" => Some("10.1.2.3".to_string()),
            "JOB_COMPLETION_INDEX" => Some(idx.to_string()),
            _ => None,
        }
    };
    let c = AgentConfig::from_args(&a, pod("0")).unwrap();
    let h = c.head.unwrap();
    assert_eq!(h.prte, d.path().join("prte"));
    assert_eq!(h.pod_ip, Ipv4Addr::new(10, 1, 2, 3));
    assert_eq!(h.tool_port, DEFAULT_TOOL_PORT);
    assert_eq!(h.extra_args, vec!["--prtemca".to_string(), "x".into()]);
    assert!(h.reason.contains("JOB_COMPLETION_INDEX=0"), "{}", h.reason);
    assert_eq!(c.dvm_uri_file, PathBuf::from(DEFAULT_DVM_URI_FILE));
    assert!(AgentConfig::from_args(&a, pod("1")).unwrap().head.is_none());
    let never = args(d.path(), &[]);
    assert!(AgentConfig::from_args(&never, pod("0"))
        .unwrap()
        .head
        .is_none());
    let always = args(d.path(), &["--dvm-head", "always"]);
    let e = AgentConfig::from_args(&always, |_| None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("POD_IP"), "{e}");
    let missing = args(
        d.path(),
        &["--dvm-head", "always", "--prte", "/nonexistent/prte"],
    );
    let e = AgentConfig::from_args(&missing, pod("0"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--prte /nonexistent/prte"), "{e}");
}

#[test]
fn port_and_secret_are_one_setting_with_the_launcher() {
    let d = setup();
    let a = args(d.path(), &["--port", "9000"]);
    let c = AgentConfig::from_args(&a, |_| None).unwrap();
    let secret = d.path().join("key").display().to_string();
    assert_eq!(
        c.launcher_env(|_| false),
        vec![
            ("PRTE_MCA_plm_k8s_secret_file", secret.clone()),
            ("PRTE_MCA_plm_k8s_agent_port", "9000".to_string()),
        ]
    );
    // What the environment already sets is inherited as it is.
    assert_eq!(
        c.launcher_env(|k| k == "PRTE_MCA_plm_k8s_agent_port"),
        vec![("PRTE_MCA_plm_k8s_secret_file", secret)]
    );
    // Both names of the port, set differently: refused, naming both.
    let env = |k: &str| match k {
        "PRRTE_K8S_AGENT_PORT" => Some("9000".to_string()),
        "PRTE_MCA_plm_k8s_agent_port" => Some("9001".to_string()),
        _ => None,
    };
    let e = AgentConfig::from_args(&a, env).unwrap_err().to_string();
    assert!(
        e.contains("PRRTE_K8S_AGENT_PORT") && e.contains("PRTE_MCA_plm_k8s_agent_port"),
        "{e}"
    );
    // The same value under both names is fine.
    let same = |k: &str| {
        matches!(k, "PRRTE_K8S_AGENT_PORT" | "PRTE_MCA_plm_k8s_agent_port").then(|| "9000".into())
    };
    assert!(AgentConfig::from_args(&a, same).is_ok());
}

#[test]
fn flags_are_the_registry() {
    use crate::settings::agent as reg;
    use clap::CommandFactory;
    let cmd = AgentArgs::command();
    for s in reg::ALL.iter().filter(|s| !s.flag.is_empty()) {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(s.flag))
            .unwrap_or_else(|| panic!("--{} is in the registry but not a flag", s.flag));
        if !s.default.is_empty() {
            assert_eq!(
                arg.get_default_values(),
                [std::ffi::OsStr::new(s.default)],
                "--{}",
                s.flag
            );
        }
        if let Kind::Choice(words) = s.kind {
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .map(|v| v.get_name().to_owned())
                .collect();
            assert_eq!(values, words.to_vec(), "--{}", s.flag);
        }
    }
    assert_eq!(MIN_MAX_FRAME, 4096);
    assert_eq!(MAX_MAX_FRAME, 64 * 1024 * 1024);
    assert!(reg::HEALTH_LISTEN
        .default_doc
        .contains(&DEFAULT_HEALTH_PORT.to_string()));
}
