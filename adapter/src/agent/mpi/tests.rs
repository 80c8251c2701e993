//! Detection and the launcher's environment against fake images: a temp dir with `bin/`
//! scripts that answer as the real programs do (`prte_info`, `prted --version`, `ompi_info
//! --version`, `mpiexec.hydra --version`), and a fake injected runtime.

use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use clap::Parser;

use super::detect::{detect, DetectEnv};
use super::error::MpiError;
use super::kind::MpiKind;
use super::plan::{Launch, Plan};
use super::prepare::Prepared;
use super::select::resolve;
use crate::agent::config::{AgentArgs, MpiChoice};
use crate::hostfile::Host;

const TRIXIE_PRTE_INFO: &str = r#"case "$1" in
--path) echo "               Pkglibdir: $PKGLIBDIR" ;;
*) cat <<'X'
                    PRTE: 3.0.82025-02-17
      PRTE repo revision: 2025-02-17
                    PMIx: OpenPMIx 5.0.7a1 (PMIx Standard: 5.1, Stable ABI:
              dl support: yes
X
;;
esac"#;

const WHEEL_PRTE_INFO: &str = r#"cat <<'X'
                    PRTE: 3.0.11a12025-05-30
      PRTE repo revision: 2025-05-30
                    PMIx: OpenPMIx 5.0.8a1 (PMIx Standard: 5.1, Stable ABI:
              dl support: no
X"#;

/// Debian unstable's (Open MPI 6.0.0~rc2): PRRTE 5 names itself `PRRTE` and says nothing of
/// its PMIx.
const SID_PRTE_INFO: &str = r#"case "$1" in
--path) echo "               Pkglibdir: /usr/lib/x86_64-linux-gnu/prte" ;;
*) cat <<'X'
                 Package: PRRTE username@hostname Distribution
                   PRRTE: 5.0.0rc1
     PRRTE repo revision: 2026-09-28
      PRRTE release date: N/A
                  Prefix: /usr
              dl support: yes
X
;;
esac"#;

fn script(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A fake image root with programs under `bin/`, and a fake injected runtime.
struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    fn new() -> Fake {
        let f = Fake {
            dir: tempfile::tempdir().unwrap(),
        };
        let rt = f.runtime();
        script(&rt.join("bin/prrte-k8s-rsh"), "exit 255");
        std::fs::create_dir_all(rt.join("lib/prte")).unwrap();
        std::fs::write(rt.join("lib/prte/prte_mca_ras_k8s.so"), "so").unwrap();
        std::os::unix::fs::symlink(
            "prte_mca_ras_k8s.so",
            rt.join("lib/prte/prte_mca_plm_k8s.so"),
        )
        .unwrap();
        std::fs::create_dir_all(rt.join("etc")).unwrap();
        std::fs::write(
            rt.join("etc/prte-mca-params.conf"),
            "# site\nras = k8s\nplm = k8s\nras_k8s_timeout = 300\nodls_base_max_threads = 0\n",
        )
        .unwrap();
        std::fs::create_dir_all(f.path("tmp")).unwrap();
        f
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn bin(&self) -> PathBuf {
        self.path("usr/bin")
    }
    fn runtime(&self) -> PathBuf {
        self.path("opt/prrte-k8s")
    }
    fn prog(&self, name: &str, body: &str) {
        script(&self.bin().join(name), body);
    }
    fn env(&self) -> DetectEnv {
        DetectEnv {
            path: Some(OsString::from(format!(
                "{}:{}",
                self.path("nonexistent").display(),
                self.bin().display()
            ))),
            extra_dirs: vec![self.path("usr/lib64/openmpi/bin").display().to_string()],
            skip: vec![self.runtime().join("bin")],
        }
    }
    /// An Open MPI 5.0.7 on PRRTE 3.0.8 as in Debian trixie, with one DSO component of its own.
    fn trixie_openmpi(&self) {
        let pkglib = self.path("usr/lib/openmpi/lib/prte");
        std::fs::create_dir_all(&pkglib).unwrap();
        std::fs::write(pkglib.join("prte_mca_ras_own.so"), "so").unwrap();
        self.prog(
            "prte_info",
            &TRIXIE_PRTE_INFO.replace("$PKGLIBDIR", &pkglib.display().to_string()),
        );
        self.prog("prted", "echo 'prted (PRRTE) 3.0.8'");
        self.prog("prte", "echo 'prte (PRRTE) 3.0.8'");
        self.prog("mpirun", "echo 'mpirun (Open MPI) 5.0.7'");
    }
    async fn plan(&self, choice: MpiChoice) -> Result<Plan, MpiError> {
        let found = detect(choice, &self.env()).await?;
        Plan::decide(found, &self.runtime())
    }
    fn prepare(&self, plan: Plan) -> Prepared {
        Prepared::new(plan, &self.path("tmp"), Some(Ipv4Addr::LOCALHOST.into())).unwrap()
    }
}

fn env_of(p: &Prepared, k: &str) -> Option<String> {
    p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

fn alloc(slots: &[u32]) -> Vec<Host> {
    slots
        .iter()
        .enumerate()
        .map(|(i, s)| Host {
            hostname: format!("x-{i}"),
            ip: Ipv4Addr::new(10, 9, 0, 2 + i as u8),
            slots: *s,
        })
        .collect()
}

#[tokio::test]
async fn trixie_open_mpi_5_gets_the_components_with_its_own_next_to_them() {
    let f = Fake::new();
    f.trixie_openmpi();
    let plan = f.plan(MpiChoice::Auto).await.unwrap();
    assert_eq!(plan.found.kind, MpiKind::Prrte);
    assert_eq!(plan.launch, Launch::Components);
    assert_eq!(plan.found.version.as_deref(), Some("Open MPI 5.0.7"));
    let info = plan.found.prrte.clone().unwrap();
    assert_eq!(info.version.as_deref(), Some("3.0.8"));
    assert_eq!(info.pmix.as_deref(), Some("5.0.7"));
    assert_eq!(plan.daemon(), f.bin().join("prted"));
    assert_eq!(plan.prte(), Some(f.bin().join("prte")));
    assert!(plan.exec_allow().is_empty());
    assert_eq!(plan.hostfile_format(), None);
    let p = f.prepare(plan);
    let dir = PathBuf::from(env_of(&p, "PRTE_PKGLIBDIR").unwrap());
    assert!(dir.starts_with(f.path("tmp")), "{}", dir.display());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "prte_mca_plm_k8s.so",
            "prte_mca_ras_k8s.so",
            "prte_mca_ras_own.so"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("prte_mca_plm_k8s.so")).unwrap(),
        "so"
    );
    assert_eq!(env_of(&p, "PRTE_MCA_ras").as_deref(), Some("k8s"));
    assert_eq!(env_of(&p, "PRTE_MCA_plm").as_deref(), Some("k8s"));
    assert_eq!(
        env_of(&p, "PRTE_MCA_odls_base_max_threads").as_deref(),
        Some("0")
    );
    assert_eq!(
        env_of(&p, "PRTE_MCA_ras_k8s_timeout").as_deref(),
        Some("300")
    );
    assert_eq!(p.hostfile, None);
    // The pod spec wins; PATH gets the runtime's bin/ appended.
    let cmd = p.command_env(None, |k| match k {
        "PRTE_MCA_odls_base_max_threads" => Some("4".into()),
        "PATH" => Some("/usr/bin:/bin".into()),
        _ => None,
    });
    let get = |k: &str| {
        cmd.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    };
    assert_eq!(get("PRTE_MCA_odls_base_max_threads"), None);
    assert_eq!(get("PRTE_MCA_plm").as_deref(), Some("k8s"));
    assert_eq!(
        get("PATH").unwrap(),
        format!("/usr/bin:/bin:{}", f.runtime().join("bin").display())
    );
    let report = p.report().join("\n");
    assert!(report.starts_with("launch: prrte-components\n"), "{report}");
    // The agent's directory goes with it.
    let state = p.state.clone();
    drop(p);
    assert!(!state.exists());
}

#[tokio::test]
async fn open_mpi_5_on_another_prrte_falls_back_to_rsh_saying_why() {
    let f = Fake::new();
    f.prog("prte_info", WHEEL_PRTE_INFO);
    f.prog("prted", "echo 'Sorry! no help file' >&2; exit 1");
    f.prog("mpirun", "echo 'mpirun (Open MPI) 5.0.8'");
    let plan = f.plan(MpiChoice::Openmpi).await.unwrap();
    assert_eq!(plan.launch, Launch::PrrteRsh);
    let why = plan.fallback.clone().unwrap();
    assert!(why.contains("3.0.11") && why.contains("3.0.8"), "{why}");
    assert_eq!(plan.exec_allow(), [f.bin().join("prted")]);
    assert_eq!(plan.prte(), None);
    let p = f.prepare(plan);
    let rsh = f.runtime().join("bin/prrte-k8s-rsh").display().to_string();
    assert_eq!(env_of(&p, "PRTE_MCA_plm_ssh_agent"), Some(rsh));
    let hostfile = p.hostfile.clone().unwrap();
    assert_eq!(
        env_of(&p, "PRTE_MCA_prte_default_hostfile"),
        Some(hostfile.display().to_string())
    );
    assert_eq!(
        env_of(&p, "PRTE_MCA_odls_base_max_threads").as_deref(),
        Some("0")
    );
    assert_eq!(env_of(&p, "PRTE_MCA_plm"), None, "no plm k8s on this path");
    assert_eq!(env_of(&p, "PRTE_PKGLIBDIR"), None);
    assert!(!hostfile.exists(), "written only from discovery");
    p.write_hostfile(&alloc(&[2, 3, 1])).unwrap();
    assert_eq!(
        std::fs::read_to_string(&hostfile).unwrap(),
        "10.9.0.2 slots=2\n10.9.0.3 slots=3\n10.9.0.4 slots=1\n"
    );
    assert!(p
        .report()
        .iter()
        .any(|l| l.starts_with("components: not used: ")));
}

/// Open MPI 6 (PRRTE 5.0) goes through PRRTE's ssh launcher, its prted checked by the 5.0
/// profile; that line has no launch-thread race, so the launcher is not told to avoid threads.
#[tokio::test]
async fn open_mpi_6_on_prrte_5_goes_through_rsh_by_its_profile() {
    let f = Fake::new();
    f.prog("prte_info", SID_PRTE_INFO);
    f.prog(
        "prted",
        "printf '\\nprted (PRRTE) 5.0.0rc1\\n\\nReport bugs to: x\\n'",
    );
    f.prog("mpirun", "echo 'mpirun (Open MPI) 6.0.0rc2'");
    let plan = f.plan(MpiChoice::Auto).await.unwrap();
    assert_eq!(plan.launch, Launch::PrrteRsh);
    let why = plan.fallback.clone().unwrap();
    assert!(why.contains("5.0.0") && why.contains("3.0."), "{why}");
    assert_eq!(plan.prrte_profile().map(|p| p.line), Some("5.0"));
    assert_eq!(plan.exec_allow(), [f.bin().join("prted")]);
    let p = f.prepare(plan);
    assert!(env_of(&p, "PRTE_MCA_plm_ssh_agent").is_some());
    assert!(env_of(&p, "PRTE_MCA_prte_default_hostfile").is_some());
    assert_eq!(env_of(&p, "PRTE_MCA_odls_base_max_threads"), None);
    // The pod's OOB port under 3.0's name reaches 5.0's launcher under 5.0's name too.
    let port = |set_new: bool| {
        let cmd = p.command_env(None, |k| match k {
            "PRTE_MCA_oob_tcp_dynamic_ipv4_ports" => Some("7121".into()),
            "PRTE_MCA_prte_dynamic_ipv4_ports" if set_new => Some("7300".into()),
            _ => None,
        });
        cmd.iter()
            .find(|(n, _)| n == "PRTE_MCA_prte_dynamic_ipv4_ports")
            .map(|(_, v)| v.to_string_lossy().into_owned())
    };
    assert_eq!(port(false).as_deref(), Some("7121"));
    // The pod spec wins.
    assert_eq!(port(true), None);
    assert!(p
        .command_env(None, |_| None)
        .iter()
        .all(|(n, _)| n != "PRTE_MCA_prte_dynamic_ipv4_ports"));
    // The ranks' TCP BTL on the interface holding the pod's address (the fake pod's is on
    // `lo`), not on what the image's parameter file names (Debian's 6.0 packages: `lo`).
    assert_eq!(
        env_of(&p, "OMPI_MCA_btl_tcp_if_include").as_deref(),
        Some("lo")
    );
}

/// Every Open MPI's TCP BTL gets the interface holding the pod's address, unless the pod spec
/// names interfaces itself, either way (Open MPI takes an include or an exclude list, not
/// both); Hydra gets its own variable; an address no interface holds sets nothing.
#[tokio::test]
async fn open_mpis_tcp_btl_gets_the_pods_interface_unless_the_pod_spec_names_one() {
    let f = Fake::new();
    f.trixie_openmpi();
    let p = f.prepare(f.plan(MpiChoice::Auto).await.unwrap());
    assert_eq!(p.plan.launch, Launch::Components);
    let include = |k: &str, v: &str| {
        p.command_env(None, |n| (n == k).then(|| v.into()))
            .into_iter()
            .find(|(n, _)| n == "OMPI_MCA_btl_tcp_if_include")
            .map(|(_, v)| v.to_string_lossy().into_owned())
    };
    assert_eq!(include("PATH", "/bin").as_deref(), Some("lo"));
    assert_eq!(include("OMPI_MCA_btl_tcp_if_include", "eth1"), None);
    assert_eq!(include("OMPI_MCA_btl_tcp_if_exclude", "lo,docker0"), None);
    // An empty exclude list is no list: the pod's interface still goes in.
    assert_eq!(
        include("OMPI_MCA_btl_tcp_if_exclude", "").as_deref(),
        Some("lo")
    );
    assert!(p
        .report()
        .contains(&"env: OMPI_MCA_btl_tcp_if_include=lo".to_string()));
    drop(p);

    // An address the pod does not hold (TEST-NET-1): nothing to name, Open MPI chooses.
    let plan = f.plan(MpiChoice::Auto).await.unwrap();
    let p = Prepared::new(
        plan,
        &f.path("tmp"),
        Some(Ipv4Addr::new(192, 0, 2, 1).into()),
    )
    .unwrap();
    assert_eq!(env_of(&p, "OMPI_MCA_btl_tcp_if_include"), None);
    drop(p);

    let f = Fake::new();
    f.prog("orted", "exit 1");
    f.prog("ompi_info", "echo 'Open MPI v4.1.4'");
    let p = f.prepare(f.plan(MpiChoice::Auto).await.unwrap());
    assert_eq!(p.plan.launch, Launch::OrteRsh);
    assert_eq!(
        env_of(&p, "OMPI_MCA_btl_tcp_if_include").as_deref(),
        Some("lo")
    );
    drop(p);

    let f = Fake::new();
    f.prog("hydra_pmi_proxy", "exit 1");
    f.prog(
        "mpiexec.hydra",
        "echo 'HYDRA build details:'; echo '    Version:                                 4.2.1'",
    );
    let p = f.prepare(f.plan(MpiChoice::Auto).await.unwrap());
    assert_eq!(p.plan.launch, Launch::MpichHydra);
    assert_eq!(env_of(&p, "OMPI_MCA_btl_tcp_if_include"), None);
}

#[tokio::test]
async fn open_mpi_4_goes_through_orte_rsh_with_a_hostfile() {
    let f = Fake::new();
    f.prog("orted", "exit 1");
    f.prog(
        "ompi_info",
        "echo 'Open MPI v4.1.4'; echo; echo 'https://www.open-mpi.org'",
    );
    let plan = f.plan(MpiChoice::Auto).await.unwrap();
    assert_eq!(plan.found.kind, MpiKind::Orte);
    assert_eq!(plan.launch, Launch::OrteRsh);
    assert_eq!(plan.found.version.as_deref(), Some("Open MPI 4.1.4"));
    assert_eq!(plan.daemon(), f.bin().join("orted"));
    assert_eq!(plan.exec_allow(), [f.bin().join("orted")]);
    let p = f.prepare(plan);
    assert_eq!(
        env_of(&p, "OMPI_MCA_plm_rsh_agent"),
        Some(f.runtime().join("bin/prrte-k8s-rsh").display().to_string())
    );
    assert_eq!(
        env_of(&p, "OMPI_MCA_orte_default_hostfile"),
        Some(p.hostfile.clone().unwrap().display().to_string())
    );
    assert_eq!(
        env_of(&p, "OMPI_MCA_plm_rsh_no_tree_spawn").as_deref(),
        Some("1")
    );
    assert_eq!(
        env_of(&p, "OMPI_MCA_orte_leave_session_attached").as_deref(),
        Some("1")
    );
}

#[tokio::test]
async fn mpich_and_intel_hydra_get_the_rsh_and_a_machinefile() {
    let f = Fake::new();
    f.prog("hydra_pmi_proxy", "exit 1");
    f.prog(
        "mpiexec.hydra",
        "echo 'HYDRA build details:'; echo '    Version:                                 4.2.1'",
    );
    let plan = f.plan(MpiChoice::Auto).await.unwrap();
    assert_eq!(plan.launch, Launch::MpichHydra);
    assert_eq!(plan.found.version.as_deref(), Some("MPICH 4.2.1"));
    assert_eq!(plan.exec_allow(), [f.bin().join("hydra_pmi_proxy")]);
    let p = f.prepare(plan);
    assert_eq!(env_of(&p, "HYDRA_LAUNCHER").as_deref(), Some("ssh"));
    assert_eq!(
        env_of(&p, "HYDRA_LAUNCHER_EXEC"),
        Some(f.runtime().join("bin/prrte-k8s-rsh").display().to_string())
    );
    assert_eq!(env_of(&p, "HYDRA_IFACE").as_deref(), Some("lo"));
    p.write_hostfile(&alloc(&[2, 2])).unwrap();
    assert_eq!(
        std::fs::read_to_string(p.hostfile.as_ref().unwrap()).unwrap(),
        "10.9.0.2:2\n10.9.0.3:2\n"
    );
    drop(p);

    // Intel's directory holds both proxies: it is Intel MPI, not MPICH.
    f.prog("hydra_bstrap_proxy", "exit 1");
    f.prog(
        "mpiexec.hydra",
        "echo 'Intel(R) MPI Library for Linux* OS, Version 2021.16 Build 20250722 (id: c37a540)'",
    );
    let plan = f.plan(MpiChoice::Auto).await.unwrap();
    assert_eq!(plan.launch, Launch::IntelHydra);
    assert_eq!(plan.found.version.as_deref(), Some("Intel MPI 2021.16"));
    assert_eq!(plan.exec_allow(), [f.bin().join("hydra_bstrap_proxy")]);
    let p = f.prepare(plan);
    assert_eq!(env_of(&p, "I_MPI_HYDRA_BOOTSTRAP").as_deref(), Some("ssh"));
    let perhost = |a: &[Host]| {
        p.command_env(Some(a), |_| None)
            .into_iter()
            .find(|(k, _)| k == "I_MPI_PERHOST")
            .map(|(_, v)| v.to_string_lossy().into_owned())
    };
    assert_eq!(perhost(&alloc(&[3, 3])).as_deref(), Some("3"));
    assert_eq!(perhost(&alloc(&[3, 2])), None);
    assert!(matches!(
        f.plan(MpiChoice::Mpich).await,
        Err(MpiError::NotFound { .. })
    ));
}

#[tokio::test]
async fn nothing_found_names_what_was_looked_for_and_where() {
    let f = Fake::new();
    std::fs::create_dir_all(f.bin()).unwrap();
    let e = f.plan(MpiChoice::Auto).await.unwrap_err().to_string();
    for word in [
        "prted",
        "orted",
        "hydra_pmi_proxy",
        "hydra_bstrap_proxy",
        &f.bin().display().to_string(),
        &f.path("usr/lib64/openmpi/bin").display().to_string(),
        "--mpi",
        "--prted",
    ] {
        assert!(e.contains(word), "{word} in: {e}");
    }
    f.prog("orted", "exit 1");
    let e = f.plan(MpiChoice::Mpich).await.unwrap_err().to_string();
    assert!(e.contains("hydra_pmi_proxy") && !e.contains("orted"), "{e}");
    // The runtime's own bin/ is never mistaken for the image's MPI.
    script(&f.runtime().join("bin/prted"), "exit 0");
    let mut env = f.env();
    env.path = Some(f.runtime().join("bin").into_os_string());
    assert!(detect(MpiChoice::Openmpi, &env).await.is_err());
}

#[tokio::test]
async fn an_mpi_off_path_is_found_and_put_on_the_commands_path() {
    let f = Fake::new();
    std::fs::create_dir_all(f.bin()).unwrap();
    let dir = f.path("usr/lib64/openmpi/bin");
    script(&dir.join("orted"), "exit 1");
    script(&dir.join("ompi_info"), "echo 'Open MPI v4.1.1'");
    let plan = f.plan(MpiChoice::Auto).await.unwrap();
    assert!(!plan.found.on_path);
    let p = f.prepare(plan);
    let path = p
        .command_env(None, |k| (k == "PATH").then(|| "/bin".into()))
        .into_iter()
        .find(|(k, _)| k == "PATH")
        .unwrap()
        .1;
    assert_eq!(
        path.to_string_lossy(),
        format!(
            "/bin:{}:{}",
            dir.display(),
            f.runtime().join("bin").display()
        )
    );
}

#[tokio::test]
async fn two_mpis_are_told_apart_by_the_launcher_on_path_or_refused() {
    let f = Fake::new();
    f.trixie_openmpi();
    std::fs::remove_file(f.bin().join("mpirun")).unwrap();
    f.prog("hydra_pmi_proxy", "exit 1");
    f.prog("mpiexec.hydra", "echo '    Version:      4.2.1'");
    let e = f.plan(MpiChoice::Auto).await.unwrap_err();
    assert!(
        matches!(&e, MpiError::Ambiguous { found } if found.contains("prted") && found.contains("hydra_pmi_proxy")),
        "{e}"
    );
    assert!(e.to_string().contains("--mpi openmpi|mpich|intel"), "{e}");
    // Debian's alternatives: mpirun -> mpirun.openmpi (or mpirun.mpich -> mpiexec.hydra).
    f.prog("mpirun.openmpi", "echo 'mpirun (Open MPI) 5.0.7'");
    std::os::unix::fs::symlink(f.bin().join("mpirun.openmpi"), f.bin().join("mpirun")).unwrap();
    assert_eq!(
        f.plan(MpiChoice::Auto).await.unwrap().found.kind,
        MpiKind::Prrte
    );
    std::fs::remove_file(f.bin().join("mpirun")).unwrap();
    std::os::unix::fs::symlink("mpiexec.hydra", f.bin().join("mpirun")).unwrap();
    assert_eq!(
        f.plan(MpiChoice::Auto).await.unwrap().found.kind,
        MpiKind::Mpich
    );
    // An explicit choice needs no launcher.
    assert_eq!(
        f.plan(MpiChoice::Openmpi).await.unwrap().found.kind,
        MpiKind::Prrte
    );
}

#[tokio::test]
async fn an_mpi_whose_programs_do_not_run_and_a_runtime_without_its_files_fail_at_once() {
    let f = Fake::new();
    std::fs::create_dir_all(f.bin()).unwrap();
    std::fs::write(f.bin().join("prted"), "#!/nonexistent/interpreter\n").unwrap();
    std::fs::set_permissions(
        f.bin().join("prted"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let e = f.plan(MpiChoice::Auto).await.unwrap_err();
    assert!(matches!(e, MpiError::Unusable { .. }), "{e}");
    assert!(e.to_string().contains("prted --version"), "{e}");

    let f = Fake::new();
    f.trixie_openmpi();
    std::fs::remove_file(f.runtime().join("lib/prte/prte_mca_ras_k8s.so")).unwrap();
    let e = f.plan(MpiChoice::Auto).await.unwrap_err().to_string();
    assert!(
        e.contains("prte_mca_ras_k8s.so")
            && e.contains("install-runtime")
            && e.contains("--runtime-dir"),
        "{e}"
    );
    let f = Fake::new();
    f.prog("orted", "exit 1");
    std::fs::remove_file(f.runtime().join("bin/prrte-k8s-rsh")).unwrap();
    let e = f.plan(MpiChoice::Auto).await.unwrap_err().to_string();
    assert!(e.contains("prrte-k8s-rsh"), "{e}");
}

fn agent_args(extra: &[&str]) -> AgentArgs {
    let mut v = vec!["prrte-k8s-agent".to_string()];
    v.extend(extra.iter().map(|s| s.to_string()));
    AgentArgs::try_parse_from(v).unwrap()
}

#[tokio::test]
async fn resolve_fills_in_the_daemon_the_head_and_the_allowlist() {
    let f = Fake::new();
    f.trixie_openmpi();
    let rt = f.runtime().display().to_string();
    let mut a = agent_args(&["--runtime-dir", &rt]);
    let plan = resolve(&mut a, &f.env()).await.unwrap();
    assert_eq!(plan.launch, Launch::Components);
    assert_eq!(a.prted, Some(f.bin().join("prted")));
    assert_eq!(a.prte, Some(f.bin().join("prte")));
    assert!(a.exec.allow.is_empty());
    // An explicit --prted stays.
    let mut a = agent_args(&[
        "--runtime-dir",
        &rt,
        "--prted",
        "/x/prted",
        "--mpi",
        "openmpi",
    ]);
    resolve(&mut a, &f.env()).await.unwrap();
    assert_eq!(a.prted.as_deref(), Some(Path::new("/x/prted")));

    let f = Fake::new();
    f.prog("hydra_pmi_proxy", "exit 1");
    let rt = f.runtime().display().to_string();
    let mut a = agent_args(&["--runtime-dir", &rt, "--exec-allow", "/usr/bin/true"]);
    resolve(&mut a, &f.env()).await.unwrap();
    let proxy = f.bin().join("hydra_pmi_proxy");
    assert_eq!(a.prted.as_deref(), Some(proxy.as_path()));
    assert_eq!(
        a.exec.allow,
        ["/usr/bin/true".to_string(), proxy.display().to_string()]
    );
    // A DVM head needs an MPI the components serve.
    let mut a = agent_args(&["--runtime-dir", &rt, "--dvm-head", "auto"]);
    let e = resolve(&mut a, &f.env()).await.unwrap_err().to_string();
    assert!(e.contains("--dvm-head") && e.contains("batch mode"), "{e}");
}
