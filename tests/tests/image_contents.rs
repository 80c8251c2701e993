//! The images `make image` builds (prrte-config/image), checked from inside with `buildah run`:
//! what PRRTE sees with no environment set, the user, and a real MPI job of the example app;
//! the inject image's bundle (static programs that run in an image without libc, the
//! components, `install-runtime`), and what the bundle's agent finds in the user images of
//! `sandbox::app_images` (built here on first use), with MPI_Comm_spawn in trixie's Open MPI
//! under its own PRRTE with the components loaded; the controller's image, the static
//! `prrte-k8s` alone.
//! `make test` builds the images first; run `make image` before `cargo test` on its own.
#![forbid(unsafe_code)]
use sandbox::app_images::{app_image, check_pi, AppImage, InjectBundle, INJECT_IMAGE};
use std::path::Path;
use std::process::Command;

const RUNTIME: &str = "localhost/prrte-k8s:latest";
const BUILDER: &str = "localhost/prrte-k8s-builder:latest";
const APP: &str = "localhost/prrte-k8s-allreduce:latest";
const CONTROLLER: &str = "localhost/prrte-k8s-controller:latest";

/// A buildah working container from an image, removed when dropped.
struct Ctr(String);

impl Ctr {
    fn from(image: &str) -> Ctr {
        // Unique: tests run in parallel, several from one image.
        let name = format!(
            "pk8s-imagetest-{}-{:08x}-{}",
            std::process::id(),
            rand::random::<u32>(),
            image.replace(['/', ':'], "-")
        );
        let out = Command::new("buildah")
            .args(["from", "--pull-never", "--name", &name, image])
            .output()
            .expect("run buildah");
        assert!(
            out.status.success(),
            "image {image} is not in the local store (build it with `make image`): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ctr(name)
    }

    /// `buildah run` as the image's user, with only the image's environment.
    fn run(&self, argv: &[&str]) -> (bool, String) {
        let (code, out) = self.run_with(&[], argv);
        (code == Some(0), out)
    }

    /// `buildah run` with host directories mounted (`host:path[:ro]`); the exit code and
    /// stdout followed by stderr.
    fn run_with(&self, volumes: &[String], argv: &[&str]) -> (Option<i32>, String) {
        let (code, stdout, stderr) = self.run_split(volumes, argv);
        (code, format!("{stdout}{stderr}"))
    }

    /// [`Ctr::run_with`] for a program that always prints on stdout (the agent's
    /// `--detect-only`): run again, at most twice more, when stdout came back empty. Debian's
    /// buildah 1.28 can lose a program's stdout under `--isolation chroot` (its chroot runtime
    /// reads the program's output pipe only after it has taken the exit status, and may end
    /// first): with 6 `buildah run`s side by side, 1-2 runs of the agent's `--detect-only` in
    /// 60-90 came back with an empty stdout, while the same agent run directly never lost a
    /// line in 120. Such an attempt tells nothing of the program: its exit status may be
    /// buildah's own (seen once in a full run: 1, where the next attempt of the same program
    /// printed and exited 0), so it is reported on stderr and the next attempt decides.
    fn run_printing(&self, volumes: &[String], argv: &[&str]) -> (Option<i32>, String) {
        let mut lost = Vec::new();
        for _ in 0..3 {
            let (code, stdout, stderr) = self.run_split(volumes, argv);
            if !stdout.is_empty() {
                if !lost.is_empty() {
                    eprintln!("{argv:?}: stdout lost by buildah in {lost:?}, then exit {code:?}");
                }
                return (code, format!("{stdout}{stderr}"));
            }
            lost.push((code, stderr));
        }
        panic!("{argv:?} printed nothing on stdout in 3 runs (exit codes and stderr: {lost:?})");
    }

    /// `buildah run`: the exit code, stdout and stderr.
    fn run_split(&self, volumes: &[String], argv: &[&str]) -> (Option<i32>, String, String) {
        let mut cmd = Command::new("buildah");
        cmd.args(["run", "--isolation", "chroot"]);
        for v in volumes {
            cmd.args(["-v", v]);
        }
        let out = cmd
            .args([&self.0, "--"])
            .args(argv)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .output()
            .expect("run buildah");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Ctr {
    fn drop(&mut self) {
        let _ = Command::new("buildah").args(["rm", &self.0]).output();
    }
}

#[test]
fn runtime_image_lists_the_k8s_components_with_no_environment_and_runs_as_non_root() {
    let c = Ctr::from(RUNTIME);
    let (ok, text) = c.run(&["prte_info"]);
    assert!(ok, "prte_info in the image: {text}");
    assert!(
        text.contains("MCA ras: k8s (MCA v2.1.0, API v2.0.0, Component v0.1.0)"),
        "{text}"
    );
    assert!(
        text.contains("MCA plm: k8s (MCA v2.1.0, API v2.0.0, Component v0.1.0)"),
        "{text}"
    );
    assert!(
        !text.contains("built for PRRTE"),
        "the version guard admits the image's own PRRTE: {text}"
    );
    let (ok, text) = c.run(&["prte_info", "--param", "ras:k8s"]);
    assert!(ok && text.contains("ras_k8s_timeout"), "{text}");

    let (ok, uid) = c.run(&["id", "-u"]);
    assert!(ok, "{uid}");
    let uid: u32 = uid
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("id -u: {uid}"));
    assert_ne!(uid, 0, "the image runs as a non-root user by default");
    assert!(uid >= 1000, "uid {uid}");

    // The site parameter file is the image's, components found without PRTE_PKGLIBDIR.
    let (ok, env) = c.run(&["env"]);
    assert!(
        ok && !env.contains("PRTE_PKGLIBDIR") && !env.contains("PRTE_MCA_"),
        "{env}"
    );
    let (ok, conf) = c.run(&[
        "sh",
        "-c",
        "cat \"$(prte_info --path sysconfdir | awk '{print $2}')/prte-mca-params.conf\"",
    ]);
    assert!(
        ok && conf.contains("ras = k8s") && conf.contains("plm = k8s"),
        "{conf}"
    );

    // Open MPI's own front end, on the image's PRRTE; the agent is the entrypoint and runs.
    let (ok, text) = c.run(&["mpirun", "--version"]);
    assert!(
        ok && text.contains("Open MPI") && text.contains("5.0.7"),
        "{text}"
    );
    let (ok, text) = c.run(&["prrte-k8s-agent", "--version"]);
    assert!(ok && text.contains("prrte-k8s-agent"), "{text}");
    let (ok, text) = c.run(&["prrte-k8s", "--help"]);
    assert!(ok && text.contains("doctor"), "{text}");
    // The ssh stand-in for launchers that start daemons with ssh (MPICH, Intel MPI) in app images.
    // Without a host it runs, prints its usage and exits 255 as ssh does.
    let (ok, text) = c.run(&["prrte-k8s-rsh"]);
    assert!(
        !ok && text.contains("usage: prrte-k8s-rsh [ssh options] HOST COMMAND"),
        "{text}"
    );
}

#[test]
fn builder_image_compiles_with_the_runtime_images_mpi() {
    let c = Ctr::from(BUILDER);
    let (ok, text) = c.run(&["sh", "-c", "printf '#include <mpi.h>\\nint main(int c,char**v){MPI_Init(&c,&v);MPI_Finalize();return 0;}\\n' >/tmp/t.c && mpicc -o /tmp/t /tmp/t.c && ldd /tmp/t"]);
    assert!(ok, "mpicc in the builder: {text}");
    assert!(
        text.contains("libmpi.so.40 => /opt/prrte-k8s/ompi-5.0.7-"),
        "links the image's own libmpi: {text}"
    );
    let (ok, uid) = c.run(&["id", "-u"]);
    assert!(ok && uid.trim() != "0", "{uid}");
}

/// PMIx's headers ship in the builder: `pmixcc` builds a PMIx tool and a PMIx client there,
/// linked to the image's own libpmix; the tool runs (initialized without a server to connect to)
/// and the client, started outside any PMIx server, fails to initialize with PMIx's error.
#[test]
fn builder_image_builds_pmix_tools_and_clients_with_pmixcc() {
    let c = Ctr::from(BUILDER);
    let tool = r#"#include <stdio.h>
#include <pmix_tool.h>
int main(void) {
    pmix_proc_t me; pmix_info_t info;
    PMIX_INFO_LOAD(&info, PMIX_TOOL_DO_NOT_CONNECT, NULL, PMIX_BOOL);
    pmix_status_t rc = PMIx_tool_init(&me, &info, 1);
    printf("tool init: %s\n", PMIx_Error_string(rc));
    if (PMIX_SUCCESS == rc) PMIx_tool_finalize();
    return PMIX_SUCCESS == rc ? 0 : 1;
}
"#;
    let client = r#"#include <stdio.h>
#include <pmix.h>
int main(void) {
    pmix_proc_t me;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    printf("client init: %s\n", PMIx_Error_string(rc));
    if (PMIX_SUCCESS == rc) PMIx_Finalize(NULL, 0);
    return 0;
}
"#;
    for (name, src) in [("tool", tool), ("client", client)] {
        let script = format!(
            "cat >/tmp/{name}.c <<'EOF'\n{src}EOF\npmixcc -o /tmp/{name} /tmp/{name}.c && ldd /tmp/{name} && TMPDIR=$(mktemp -d) /tmp/{name}"
        );
        let (ok, text) = c.run(&["sh", "-c", &script]);
        assert!(ok, "pmixcc {name} in the builder: {text}");
        assert!(
            text.contains("libpmix.so.2 => /opt/prrte-k8s/prrte-"),
            "{name} links the image's own libpmix: {text}"
        );
        match name {
            "tool" => assert!(text.contains("tool init: PMIX_SUCCESS"), "{text}"),
            _ => assert!(
                text.contains("client init: PMIX_ERR")
                    && !text.contains("client init: PMIX_SUCCESS"),
                "{text}"
            ),
        }
    }
}

/// The example application image (builder's mpicc, runtime base) runs a real MPI job inside the
/// image: PRRTE's local launcher (the k8s components decline outside Kubernetes when not
/// selected; the site file selects them, so the command line deselects them here).
#[test]
fn example_app_image_runs_mpi_jobs_in_c_and_mpi4py() {
    let c = Ctr::from(APP);
    let local = [
        "mpirun", "--mca", "ras", "^k8s", "--mca", "plm", "^k8s", "-n", "2",
    ];
    let (ok, text) = c.run(&[&local[..], &["/home/mpi/allreduce"]].concat());
    assert!(ok, "{text}");
    assert_eq!(text.matches("size=2").count(), 2, "{text}");
    assert_eq!(text.matches("sum=3 OK").count(), 2, "{text}");
    let (ok, text) = c.run(&[&local[..], &["python3", "/home/mpi/allreduce.py"]].concat());
    assert!(ok, "{text}");
    assert_eq!(text.matches("mpi4py allreduce").count(), 2, "{text}");
    assert_eq!(text.matches("sum=3 OK").count(), 2, "{text}");
    let (ok, text) = c.run(&[
        "python3",
        "-c",
        "from mpi4py import MPI; print(MPI.Get_library_version())",
    ]);
    assert!(ok && text.contains("Open MPI v5.0.7"), "{text}");
}

/// Whether an ELF file names a program interpreter (a PT_INTERP program header): a dynamically
/// linked executable does, a static one does not.
fn has_interpreter(elf: &[u8]) -> bool {
    assert!(
        elf.len() > 64 && &elf[..4] == b"\x7fELF" && elf[4] == 2,
        "an ELF64 file"
    );
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[32..40].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    (0..phnum).any(|i| {
        let o = phoff + i * phentsize;
        u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) == 3
    })
}

fn bundle_mount(b: &InjectBundle, at: &str) -> String {
    format!("{}:{at}:ro", b.dir.display())
}

/// The inject image holds the bundle only: static programs, the components under both names,
/// the site parameter file, VERSION; its entrypoint copies the bundle, as uid 1000.
#[test]
fn inject_image_holds_only_the_bundle_with_static_programs() {
    let b = InjectBundle::mount().unwrap();
    let mut top: Vec<String> = std::fs::read_dir(&b.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["opt"], "the image holds /opt/prrte-k8s-bundle only");
    for prog in ["prrte-k8s", "prrte-k8s-agent", "prrte-k8s-rsh"] {
        let p = b.dir.join("bin").join(prog);
        let elf = std::fs::read(&p).unwrap();
        assert!(!has_interpreter(&elf), "{prog} names a program interpreter");
        let out = Command::new("file").arg("-b").arg(&p).output().unwrap();
        let what = String::from_utf8_lossy(&out.stdout);
        assert!(
            what.contains("static-pie linked") || what.contains("statically linked"),
            "{prog}: {what}"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{prog}");
    }
    let lib = std::fs::read(b.dir.join("lib/prte/prte_mca_ras_k8s.so")).unwrap();
    for sym in ["prte_mca_ras_k8s_component", "prte_mca_plm_k8s_component"] {
        assert!(
            lib.windows(sym.len()).any(|w| w == sym.as_bytes()),
            "the components' library exports {sym}"
        );
    }
    assert_eq!(
        std::fs::read_link(b.dir.join("lib/prte/prte_mca_plm_k8s.so")).unwrap(),
        Path::new("prte_mca_ras_k8s.so")
    );
    let conf = std::fs::read_to_string(b.dir.join("etc/prte-mca-params.conf")).unwrap();
    assert!(conf.contains("odls_base_max_threads = 0"), "{conf}");
    let version = std::fs::read_to_string(b.dir.join("VERSION")).unwrap();
    let words: Vec<&str> = version.split_whitespace().collect();
    assert!(
        words.len() == 3
            && words[0] == "prrte-k8s"
            && words[1] == env!("CARGO_PKG_VERSION")
            && words[2].len() == 12
            && words[2].bytes().all(|c| c.is_ascii_hexdigit()),
        "VERSION: {version:?}"
    );
    let out = Command::new("buildah")
        .args([
            "inspect",
            "--type",
            "image",
            "--format",
            "{{.OCIv1.Config.Entrypoint}} {{.OCIv1.Config.User}}",
            INJECT_IMAGE,
        ])
        .output()
        .unwrap();
    let cfg = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        cfg.trim(),
        "[/opt/prrte-k8s-bundle/bin/prrte-k8s install-runtime --to /opt/prrte-k8s] 1000:1000",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The controller's image holds the static `prrte-k8s` and nothing else (no libc, no shell);
/// it runs `prrte-k8s controller` as uid 65532, and the program runs there.
#[test]
fn controller_image_holds_only_the_static_prrte_k8s_and_runs_it_as_non_root() {
    let c = Ctr::from(CONTROLLER);
    let out = Command::new("buildah")
        .args(["mount", &c.0])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let root = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert_eq!(
        walk(&root),
        ["prrte-k8s"],
        "the image holds /prrte-k8s only"
    );
    let elf = std::fs::read(root.join("prrte-k8s")).unwrap();
    assert!(
        !has_interpreter(&elf),
        "prrte-k8s names a program interpreter"
    );
    let out = Command::new("buildah")
        .args([
            "inspect",
            "--type",
            "image",
            "--format",
            "{{.OCIv1.Config.Entrypoint}} {{.OCIv1.Config.Cmd}} {{.OCIv1.Config.User}}",
            CONTROLLER,
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "[/prrte-k8s] [controller] 65532:65532"
    );
    let (ok, out) = c.run(&["/prrte-k8s", "crd"]);
    assert!(ok && out.contains("name: mpijobs.kubeflow.org"), "{out}");
}

/// The image with no libc at all: the bundle's programs run there, and `install-runtime`
/// copies the bundle as the image's non-root user into an empty directory, as the init
/// container does; the agent finds no MPI and says what it looked for.
#[test]
fn static_programs_run_and_install_in_an_image_without_libc() {
    let image = app_image(AppImage::NoLibc).unwrap();
    let c = Ctr::from(&image);
    let root = String::from_utf8_lossy(
        &Command::new("buildah")
            .args(["mount", &c.0])
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .to_string();
    let libcs: Vec<String> = walk(Path::new(&root))
        .into_iter()
        .filter(|n| n.starts_with("ld-") || n.starts_with("libc.") || n.starts_with("libc-"))
        .collect();
    assert!(libcs.is_empty(), "no libc in the image: {libcs:?}");
    let b = InjectBundle::mount().unwrap();
    let dest = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dest.path(), std::fs::Permissions::from_mode(0o2777)).unwrap();
    let vols = [
        bundle_mount(&b, "/opt/prrte-k8s-bundle"),
        format!("{}:/opt/prrte-k8s", dest.path().display()),
    ];
    let (code, out) = c.run_with(&vols, &["id", "-u"]);
    assert!(code == Some(0) && out.trim() == "1000", "{out}");
    let (code, out) = c.run_with(
        &vols,
        &[
            "/opt/prrte-k8s-bundle/bin/prrte-k8s",
            "install-runtime",
            "--to",
            "/opt/prrte-k8s",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.starts_with("prrte-k8s install-runtime: installed prrte-k8s ")
            && out.lines().count() == 1,
        "one line: {out}"
    );
    for f in [
        "bin/prrte-k8s",
        "bin/prrte-k8s-agent",
        "bin/prrte-k8s-rsh",
        "lib/prte/prte_mca_ras_k8s.so",
        "lib/prte/prte_mca_plm_k8s.so",
        "etc/prte-mca-params.conf",
        "VERSION",
    ] {
        let copied = std::fs::read(dest.path().join(f)).unwrap();
        assert_eq!(copied, std::fs::read(b.dir.join(f)).unwrap(), "{f}");
    }
    for (prog, word) in [
        ("prrte-k8s-agent", "prrte-k8s-agent 0."),
        ("prrte-k8s", "prrte-k8s 0."),
    ] {
        let (code, out) = c.run_with(&vols, &[&format!("/opt/prrte-k8s/bin/{prog}"), "--version"]);
        assert!(code == Some(0) && out.contains(word), "{prog}: {out}");
    }
    let (code, out) = c.run_with(&vols, &["/opt/prrte-k8s/bin/prrte-k8s-rsh"]);
    assert!(
        code == Some(255) && out.contains("usage: prrte-k8s-rsh"),
        "{code:?} {out}"
    );
    let (code, out) = c.run_printing(
        &vols,
        &[
            "/opt/prrte-k8s/bin/prrte-k8s-agent",
            "--mpi",
            "auto",
            "--detect-only",
        ],
    );
    assert_eq!(code, Some(2), "{out}");
    assert!(out.starts_with("launch: none\n"), "{out}");
    for word in [
        "prted",
        "orted",
        "hydra_pmi_proxy",
        "hydra_bstrap_proxy",
        "PATH (/bin)",
    ] {
        assert!(out.contains(word), "{word}: {out}");
    }
}

/// File names under `dir` (symlinks not followed).
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&p));
        }
        out.push(e.file_name().to_string_lossy().into_owned());
    }
    out
}

/// The bundle's static agent finds each user image's MPI (`--mpi auto --detect-only`), and
/// each image but bullseye's runs its pi program on its own (its MPI works; the lines the e2e
/// tests expect).
#[test]
fn the_static_agent_detects_the_mpi_of_each_user_image() {
    let b = InjectBundle::mount().unwrap();
    let vols = [bundle_mount(&b, "/opt/prrte-k8s")];
    for app in [
        AppImage::TrixieOpenmpi,
        AppImage::TrixieMpich,
        AppImage::BookwormOpenmpi,
        AppImage::BullseyeMpich,
        AppImage::SidOpenmpi,
    ] {
        let image = app_image(app).unwrap();
        let c = Ctr::from(&image);
        let want = app.expected();
        let (code, out) = c.run_printing(
            &vols,
            &[
                "/opt/prrte-k8s/bin/prrte-k8s-agent",
                "--mpi",
                "auto",
                "--detect-only",
            ],
        );
        assert_eq!(code, Some(0), "{}: {out}", app.name());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            format!("launch: {}", want.launch),
            "{}: {out}",
            app.name()
        );
        assert!(
            lines[1].starts_with(&format!("mpi: {}", want.mpi)),
            "{}: {out}",
            app.name()
        );
        assert!(
            lines.contains(&format!("daemon: {}", want.daemon).as_str()),
            "{}: {out}",
            app.name()
        );
        if want.launch != "prrte-components" {
            assert!(
                lines.contains(&format!("exec-allow: {}", want.daemon).as_str()),
                "{}: {out}",
                app.name()
            );
        }
        let launcher = if want.mpi.starts_with("MPICH") {
            "mpiexec"
        } else {
            "mpirun"
        };
        if app == AppImage::BullseyeMpich {
            // MPICH 3.4's ch3 and Hydra look up the host name `buildah run` gives the
            // container, which its /etc/hosts does not resolve: in this harness only its
            // detection is checked.
            continue;
        }
        // `buildah run` gives the container a host name its /etc/hosts may not resolve, which
        // MPICH's ch3 looks up for its business card unless given an address.
        let (code, out) = c.run_with(
            &[],
            &[
                "env",
                "MPIR_CVAR_CH3_INTERFACE_HOSTNAME=127.0.0.1",
                launcher,
                "-n",
                "2",
                "/home/mpiuser/pi",
            ],
        );
        assert_eq!(code, Some(0), "{}: {out}", app.name());
        check_pi(&out, 2).unwrap_or_else(|e| panic!("{}: {e:#}", app.name()));
    }
    // bullseye's glibc is 2.31: older than the 2.36 the glibc builds need (DT_RELR).
    let c = Ctr::from(&app_image(AppImage::BullseyeMpich).unwrap());
    let (_, out) = c.run_with(&[], &["ldd", "--version"]);
    assert!(out.lines().next().unwrap_or("").ends_with(" 2.31"), "{out}");
    let (code, out) = c.run_with(&vols, &["/opt/prrte-k8s/bin/prrte-k8s-agent", "--version"]);
    assert!(
        code == Some(0) && out.starts_with("prrte-k8s-agent "),
        "{out}"
    );
}

/// The bundle's components load in trixie's own prte (PRRTE 3.0.8 on PMIx 5.0.7): listed by
/// prte_info with PRTE_PKGLIBDIR, and the version guard admits them.
#[test]
fn the_bundles_components_load_in_trixies_own_prte() {
    let b = InjectBundle::mount().unwrap();
    let c = Ctr::from(&app_image(AppImage::TrixieOpenmpi).unwrap());
    let (code, out) = c.run_with(
        &[bundle_mount(&b, "/opt/prrte-k8s")],
        &["env", "PRTE_PKGLIBDIR=/opt/prrte-k8s/lib/prte", "prte_info"],
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("MCA ras: k8s (MCA v2.1.0, API v2.0.0, Component v0.1.0)"),
        "{out}"
    );
    assert!(
        out.contains("MCA plm: k8s (MCA v2.1.0, API v2.0.0, Component v0.1.0)"),
        "{out}"
    );
    assert!(!out.contains("built for PRRTE"), "{out}");
    let (_, out) = c.run_with(&[], &["prte_info"]);
    assert!(!out.contains("k8s"), "not without the bundle: {out}");
}

/// MPI_Comm_spawn in trixie's Open MPI 5.0.7 under its own PRRTE 3.0.8 (PMIx 5.0.7, client and
/// server alike) with the bundle's components loaded (opened and queried; outside a pod they
/// decline, so PRRTE's own launcher runs the job here; the sandbox's pods select them).
#[test]
fn mpi_comm_spawn_works_in_trixies_open_mpi_with_the_components_loaded() {
    let b = InjectBundle::mount().unwrap();
    let c = Ctr::from(&app_image(AppImage::TrixieOpenmpi).unwrap());
    // `buildah run` shares the host's network namespace, whose many interfaces (the sandboxes'
    // bridges and veths) Open MPI's netlink reachability pairs wrongly between the parent and
    // the child job; loopback is what both jobs share here. Pods have eth0 and lo only.
    let (code, out) = c.run_with(
        &[bundle_mount(&b, "/opt/prrte-k8s")],
        &[
            "env",
            "PRTE_PKGLIBDIR=/opt/prrte-k8s/lib/prte",
            "OMPI_MCA_btl_tcp_if_include=lo",
            "timeout",
            "120",
            "mpirun",
            "--prtemca",
            "ras_base_verbose",
            "10",
            "--prtemca",
            "plm_base_verbose",
            "10",
            "--prtemca",
            "odls_base_max_threads",
            "0",
            "--oversubscribe",
            "-n",
            "2",
            "/home/mpiuser/spawn",
            "3",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        out.matches("components_open: component k8s open function successful")
            .count(),
        2,
        "ras k8s and plm k8s opened in trixie's prte: {out}"
    );
    assert!(
        out.contains("spawn: parents=2 children=3 sum=6 OK"),
        "{out}"
    );
    assert_eq!(out.matches("spawn: child ").count(), 3, "{out}");
}
