//! The allowlist of what a request may ask of a daemon, through the real agent: every
//! parameter and option a launcher does not send is refused under every spelling PRRTE's and
//! PMIx's parsers would still take (unique prefixes of an option, `--opt=value`, quotes, case,
//! `name=value`), in launch and exec requests alike; the address a daemon reports to is pinned
//! to the launcher's; a daemon may start others only with the installed `prrte-k8s-rsh`; and,
//! with the real prted, no way of pointing it at other code runs a marker.
#![forbid(unsafe_code)]
mod agent_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_support::*;
use prrte_k8s::protocol::{Reply, Request};

const RSH: &str = env!("CARGO_BIN_EXE_prrte-k8s-rsh");

/// Parameters that make a daemon run or load other code, or report elsewhere.
const NAMES: &[&str] = &[
    "prte_fork_agent",
    "prte_launch_agent",
    "plm_ssh_agent",
    "plm_rsh_agent",
    "odls_base_exec_agent",
    "mca_base_component_path",
    "mca_component_path",
    "mca_base_param_files",
    "mca_base_override_param_file",
    "mca_base_param_file_path",
    "mca_base_envar_file_prefix",
    "mca_base_param_file_prefix",
    "prte_prefix",
    "prte_xterm",
    "prte_parent_uri",
    "plm",
];

/// Ways of writing an MCA flag; `None` marks the `--flag=NAME VALUE` form.
fn flag_spellings() -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = Vec::new();
    for flag in ["--prtemca", "--pmixmca"] {
        for n in 3..flag.len() {
            out.push((flag[..n].to_string(), false)); // unique prefixes (getopt_long)
        }
        out.push((format!("\"{flag}\""), false));
        out.push((format!("'{flag}'"), false));
        out.push((flag.to_uppercase(), false));
        out.push((flag[1..].to_string(), false));
        out.push((flag.to_string(), true));
    }
    for other in [
        "-mca", "--mca", "--gmca", "--omca", "-gmca", "--tune", "--tun", "-am",
    ] {
        out.push((other.to_string(), false));
    }
    out
}

/// Ways of writing a parameter name.
fn name_spellings(name: &str) -> Vec<String> {
    let mut cap = name.to_string();
    cap[..1].make_ascii_uppercase();
    vec![
        name.to_string(),
        format!("\"{name}\""),
        format!("'{name}'"),
        name.to_uppercase(),
        cap,
        format!("{name}=/tmp/evil"),
        format!("prte_{name}"),
        format!("pmix_{name}"),
        format!(" {name}"),
        format!("{name}\t"),
    ]
}

/// Options no launcher gives prted, under their abbreviations and `=` forms.
fn refused_options() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for opt in [
        "--prefix",
        "--launch-agent",
        "--parent-uri",
        "--dvm-master-uri",
        "--prte-server",
        "--personality",
        "--tune",
        "--tmpdir",
        "--report-uri",
    ] {
        for n in 4..=opt.len() {
            out.push(vec![opt[..n].to_string(), "/tmp/evil".into()]);
        }
        out.push(vec![format!("{opt}=/tmp/evil")]);
    }
    for flag in [
        "--set-sid",
        "--daemonize",
        "--system-server",
        "--bootstrap",
        "--tree-spawn",
        "--help",
        "-h",
        "-V",
        "--Leave-Session-Attached",
        "--leave-session",
        "--leave-session-attached=1",
        "/bin/sh",
        "",
    ] {
        out.push(vec![flag.to_string()]);
    }
    out
}

/// Every refused parameter under every spelling, and every refused option: refused in one
/// launch request after another, each reason naming the argument; nothing starts.
#[tokio::test]
async fn every_refused_parameter_under_every_spelling_is_refused_in_launch_requests() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let mut tried = 0;
    for extra in refused_argvs() {
        let mut argv = mode_args("sleep");
        argv.extend(extra.iter().cloned());
        let req = Request::Launch {
            argv,
            env: Default::default(),
            dvm_uri: None,
        };
        match c.request(&req).await {
            Reply::Failed { reason } => assert!(
                reason.contains("argv[3]") || reason.contains("argv[4]"),
                "{extra:?}: {reason}"
            ),
            other => panic!("{extra:?} was not refused: {other:?}"),
        }
        tried += 1;
    }
    assert!(tried > 1000, "{tried}");
    for name in NAMES {
        for key in [
            format!("PRTE_MCA_{name}"),
            format!("PMIX_MCA_{name}"),
            format!("OMPI_MCA_{name}"),
            format!("PRTE_MCA_{}", name.to_uppercase()),
        ] {
            let req = Request::Launch {
                argv: mode_args("sleep"),
                env: [(key.clone(), "/tmp/evil".to_string())]
                    .into_iter()
                    .collect(),
                dvm_uri: None,
            };
            match c.request(&req).await {
                Reply::Failed { reason } => assert!(reason.contains(&key), "{key}: {reason}"),
                other => panic!("{key} was not refused: {other:?}"),
            }
        }
    }
    assert_eq!(td.launches(), 0, "a refused launch started prted");
}

/// The argument tails the tests above send after the mode.
fn refused_argvs() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (flag, eq) in flag_spellings() {
        for name in NAMES {
            for spelled in name_spellings(name) {
                out.push(if eq {
                    vec![format!("{flag}={spelled}"), "/tmp/evil".into()]
                } else {
                    vec![flag.clone(), spelled, "/tmp/evil".into()]
                });
            }
        }
    }
    out.extend(refused_options());
    out
}

/// The same through exec requests of prted (PRRTE's ssh launcher's path through
/// prrte-k8s-rsh), which admit a little more (tree spawn) but nothing of this.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refused_parameter_is_refused_in_exec_requests_too() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let argvs = refused_argvs();
    let mut tried = 0;
    // A sample of every spelling (each exec needs a connection of its own); tree spawn is
    // what an ssh-style launcher may ask for.
    let sample = argvs
        .iter()
        .filter(|a| a.as_slice() != ["--tree-spawn"])
        .step_by(7);
    for extra in sample {
        let mut argv = vec!["prted".to_string()];
        argv.extend(mode_args("sleep"));
        argv.extend(extra.iter().cloned());
        // (`plm`, `plm_ssh_agent` and `prte_parent_uri` may come from ssh-style launchers:
        // refused for their values.)
        let reply = exec(&agent, &td, argv, vec![]).await;
        match reply {
            Reply::Failed { reason } => assert!(
                ["argv[4]", "argv[5]", "argv[6]"]
                    .iter()
                    .any(|a| reason.contains(a)),
                "{extra:?}: {reason}"
            ),
            other => panic!("{extra:?} was not refused: {other:?}"),
        }
        tried += 1;
    }
    assert!(tried > 150, "{tried}");
    assert_eq!(td.launches(), 0, "a refused exec started prted");
}

async fn exec(
    agent: &AgentProc,
    td: &TestDir,
    argv: Vec<String>,
    env: Vec<(String, String)>,
) -> Reply {
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    c.request(&Request::Exec {
        argv,
        env,
        cwd: None,
        stdin: false,
    })
    .await
}

/// A launch's HNP URI must list the launcher's address and reaches prted holding only that
/// address; one naming only other addresses is refused (prted would report, and take its
/// orders from, someone else).
#[tokio::test]
async fn the_hnp_is_pinned_to_the_launcher() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let launch_with = |uri: &str| {
        let mut argv = mode_args("exit-0");
        argv.extend(["--prtemca".into(), "prte_hnp_uri".into(), uri.to_string()]);
        Request::Launch {
            argv,
            env: Default::default(),
            dvm_uri: None,
        }
    };
    let evil = "prte-x@0.0;tcp://10.66.0.1:7000:24";
    match c.request(&launch_with(evil)).await {
        Reply::Failed { reason } => assert!(
            reason.contains("10.66.0.1") && reason.contains("127.0.0.1"),
            "{reason}"
        ),
        other => panic!("an HNP elsewhere was accepted: {other:?}"),
    }
    assert_eq!(td.launches(), 0);
    let both = "prte-x@0.0;tcp://10.66.0.1,127.0.0.1:7000:24,8;tcp6://[fd00::1]:7001:64";
    let reply = c.request(&launch_with(both)).await;
    assert!(matches!(reply, Reply::Started { .. }), "{reply:?}");
    assert!(matches!(c.recv(WAIT).await.unwrap(), Reply::Exited { .. }));
    let argv = td.argv();
    assert!(
        argv.contains(&"prte-x@0.0;tcp://127.0.0.1:7000:8".to_string()),
        "{argv:?}"
    );
    assert!(!argv.iter().any(|a| a.contains("10.66.0.1")), "{argv:?}");
}

/// An exec'd prted whose parent claims the head's rank reports to the HNP's address (prted
/// 3.0.8 then ignores the parent's URI): an HNP URI naming a third party is refused, not
/// passed on, and nothing starts.
#[tokio::test]
async fn a_parent_claiming_the_heads_rank_cannot_point_prted_elsewhere() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let mut argv = vec!["prted".to_string()];
    argv.extend(mode_args("exit-0"));
    for (k, v) in [
        ("prte_hnp_uri", "x@0.0;tcp://127.0.0.5:27001:8"),
        ("prte_parent_uri", "x@0.0;tcp://127.0.0.1:27002:8"),
    ] {
        argv.extend(["--prtemca".into(), k.into(), v.into()]);
    }
    argv.push("--tree-spawn".into());
    match exec(&agent, &td, argv, vec![]).await {
        Reply::Failed { reason } => assert!(
            reason.contains("prte_hnp_uri") && reason.contains("127.0.0.5"),
            "{reason}"
        ),
        other => panic!("an HNP elsewhere was passed to prted: {other:?}"),
    }
    assert_eq!(td.launches(), 0);
}

/// A daemon started through exec may start others only with the prrte-k8s-rsh installed with
/// the agent, not with any file of that name.
#[tokio::test]
async fn only_the_installed_rsh_may_start_further_daemons() {
    let td = TestDir::new();
    let agent = AgentProc::spawn(&td, &[]);
    let impostor = td.path("prrte-k8s-rsh");
    std::fs::write(&impostor, "#!/bin/sh\ntouch \"$0.ran\"\n").unwrap();
    let uri = "prte-x@0.0;tcp://127.0.0.1:7000:8";
    let with_agent = |rsh: &str| {
        let mut argv = vec!["prted".to_string()];
        argv.extend(mode_args("exit-0"));
        for (k, v) in [
            ("plm", "ssh"),
            ("plm_ssh_agent", rsh),
            ("prte_hnp_uri", uri),
            ("prte_parent_uri", uri),
        ] {
            argv.extend(["--prtemca".into(), k.into(), v.into()]);
        }
        argv.push("--tree-spawn".into());
        argv
    };
    for bad in [
        impostor.to_str().unwrap(),
        "/bin/sh",
        "ssh",
        "prrte-k8s-rsh /bin/sh",
    ] {
        match exec(&agent, &td, with_agent(bad), vec![]).await {
            Reply::Failed { reason } => {
                assert!(
                    reason.contains("prrte-k8s-rsh") && reason.contains(RSH),
                    "{reason}"
                )
            }
            other => panic!("plm_ssh_agent {bad} was accepted: {other:?}"),
        }
    }
    assert_eq!(td.launches(), 0);
    for good in [RSH.to_string(), format!("{RSH} -x")] {
        let reply = exec(&agent, &td, with_agent(&good), vec![]).await;
        assert!(matches!(reply, Reply::Started { .. }), "{good}: {reply:?}");
    }
}

/// Variables of a request.
type Env = Vec<(&'static str, String)>;

/// The PRRTE prefix of the tests (as the end-to-end tests find it).
fn prrte_prefix() -> PathBuf {
    let p = PathBuf::from(
        std::env::var("PRRTE_K8S_PREFIX")
            .unwrap_or_else(|_| "/opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5-k8s3".into()),
    );
    assert!(
        p.join("bin/prted").is_file(),
        "PRRTE is not installed at {}: run prrte-config/setup.sh",
        p.display()
    );
    p
}

/// A PMIx component that, when loaded, writes `MARKER` (its constructor runs at dlopen).
fn marker_component(dir: &Path, marker: &Path) -> PathBuf {
    let src = dir.join("marker.c");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void m(void) {{ \
             FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\\n\", f); fclose(f); }} }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let comp = dir.join("components");
    std::fs::create_dir_all(comp.join(".pmix/components")).unwrap();
    let so = comp.join("pmix_mca_pcompress_marker.so");
    let o = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .output()
        .expect("a C compiler (cc) builds the marker component");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::copy(
        &so,
        comp.join(".pmix/components/pmix_mca_pcompress_marker.so"),
    )
    .unwrap();
    comp
}

/// The real prted behind the agent: requests that would make it load a component from a
/// directory of the requester's choice (an override parameter file, the component path under
/// an abbreviated flag, a home directory, an install directory) are refused, and the marker
/// component never runs. (Started by hand with any of these, the same prted runs it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_makes_the_real_prted_load_other_code() {
    let prefix = prrte_prefix();
    let td = TestDir::new();
    let marker = td.path("marker-ran");
    let comp = marker_component(td.dir.path(), &marker);
    let override_file = td.path("override.conf");
    std::fs::write(
        &override_file,
        format!("mca_base_component_path = {}\n", comp.display()),
    )
    .unwrap();
    let tmp = td.path("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let prted = prefix.join("bin/prted").display().to_string();
    let mut args = AgentProc::test_args(&td, &["--tmpdir", tmp.to_str().unwrap()]);
    let at = args.iter().position(|a| a == "--prted").unwrap();
    args[at + 1] = prted.clone();
    let agent = AgentProc::spawn_args(&args, &[]).expect("agent starts");
    #[rustfmt::skip]
    let basic: Vec<String> = [
        "--prtemca", "ess", "env", "--prtemca", "ess_base_nspace", "x@0", "--prtemca",
        "ess_base_vpid", "1", "--prtemca", "ess_base_num_procs", "2", "--prtemca",
        "prte_hnp_uri", "x@0.0;tcp://127.0.0.1:9:8", "--allow-run-as-root",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let comp_s = comp.display().to_string();
    let with = |extra: &[&str]| {
        let mut a = basic.clone();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let launches: Vec<(Vec<String>, Env)> = vec![
        (
            basic.clone(),
            vec![(
                "PMIX_MCA_mca_base_override_param_file",
                override_file.display().to_string(),
            )],
        ),
        (
            basic.clone(),
            vec![("PMIX_MCA_mca_base_component_path", comp_s.clone())],
        ),
        (
            with(&["--pmixm", "mca_base_component_path", &comp_s]),
            vec![],
        ),
        (
            with(&["--pmixmca", "\"mca_base_component_path\"", &comp_s]),
            vec![],
        ),
    ];
    for (argv, env) in launches {
        let req = Request::Launch {
            argv,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            dvm_uri: None,
        };
        let reply = c.request(&req).await;
        assert!(matches!(reply, Reply::Failed { .. }), "{env:?}: {reply:?}");
    }
    for (name, value) in [
        ("HOME", comp_s.clone()),
        ("PMIX_MCA_mca_base_component_path", comp_s.clone()),
        ("PRTE_LIBDIR", comp_s.clone()),
        (
            "PMIX_MCA_mca_base_override_param_file",
            override_file.display().to_string(),
        ),
    ] {
        let mut argv = vec![prted.clone()];
        argv.extend(basic.iter().cloned());
        let reply = exec(&agent, &td, argv, vec![(name.into(), value)]).await;
        assert!(matches!(reply, Reply::Failed { .. }), "{name}: {reply:?}");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !marker.exists(),
        "a request made prted load the marker component"
    );
}

/// The review's attack on the prefix check: `PMIX_PREFIX` and `PRTE_PREFIX` written through
/// `/proc/self/cwd` resolve, where the agent checks them, to prted's own installation, but in
/// prted, whose working directory the request chooses, to a copy planted below that directory,
/// whose component then ran inside prted. Such a prefix is not taken now: the planted
/// component never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_through_proc_self_cwd_does_not_reach_prted() {
    let prefix = std::fs::canonicalize(prrte_prefix()).unwrap();
    let td = TestDir::new();
    let marker = td.path("marker-ran");
    let comp = marker_component(td.dir.path(), &marker);
    let plant = td.path("plant");
    let planted = plant
        .join(prefix.strip_prefix("/").unwrap())
        .join("lib/pmix");
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::copy(
        comp.join("pmix_mca_pcompress_marker.so"),
        planted.join("pmix_mca_pcompress_zlib.so"),
    )
    .unwrap();
    // As many levels below `plant` as the prefix climbs (more than the agent's own depth).
    let ups = 16;
    let cwd = (0..ups).fold(plant.clone(), |p, i| p.join(format!("d{i}")));
    std::fs::create_dir_all(&cwd).unwrap();
    let sneaky = format!(
        "/proc/self/cwd/{}{}",
        "../".repeat(ups),
        prefix.display().to_string().trim_start_matches('/')
    );
    let tmp = td.path("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let prted = prefix.join("bin/prted").display().to_string();
    let mut args = AgentProc::test_args(&td, &["--tmpdir", tmp.to_str().unwrap()]);
    let at = args.iter().position(|a| a == "--prted").unwrap();
    args[at + 1] = prted.clone();
    let agent = AgentProc::spawn_args(&args, &[]).expect("agent starts");
    #[rustfmt::skip]
    let argv: Vec<String> = [
        prted.as_str(), "--prtemca", "ess", "env", "--prtemca", "ess_base_nspace", "x@0",
        "--prtemca", "ess_base_vpid", "1", "--prtemca", "ess_base_num_procs", "2",
        "--prtemca", "prte_hnp_uri", "x@0.0;tcp://127.0.0.1:9:8", "--allow-run-as-root",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut c = RawClient::connect(agent.addr, Some(&td.secret))
        .await
        .unwrap();
    let reply = c
        .request(&Request::Exec {
            argv,
            env: vec![
                ("PMIX_PREFIX".into(), sneaky.clone()),
                ("PRTE_PREFIX".into(), sneaky.clone()),
            ],
            cwd: Some(cwd.display().to_string()),
            stdin: false,
        })
        .await;
    // prted starts (with its own installation) and ends: its head does not answer.
    assert!(matches!(reply, Reply::Started { .. }), "{reply:?}");
    loop {
        match c.recv(WAIT).await {
            Ok(Reply::Exited { .. }) => break,
            Ok(Reply::Output { .. }) => {}
            other => panic!("the exec did not end: {other:?}"),
        }
    }
    assert!(
        !marker.exists(),
        "prted loaded the component planted below the request's cwd through {sneaky}"
    );
}
