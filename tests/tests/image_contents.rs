//! The images `make image` builds (prrte-config/image), checked from inside with `buildah run`:
//! what PRRTE sees with no environment set, the user, and a real MPI job of the example app.
//! `make test` builds the images first; run `make image` before `cargo test` on its own.
#![forbid(unsafe_code)]
use std::process::Command;

const RUNTIME: &str = "localhost/prrte-k8s:latest";
const BUILDER: &str = "localhost/prrte-k8s-builder:latest";
const APP: &str = "localhost/prrte-k8s-allreduce:latest";

/// A buildah working container from an image, removed when dropped.
struct Ctr(String);

impl Ctr {
    fn from(image: &str) -> Ctr {
        let name = format!(
            "prrte-k8s-imagetest-{}-{}",
            std::process::id(),
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
        let out = Command::new("buildah")
            .args(["run", "--isolation", "chroot", &self.0, "--"])
            .args(argv)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .output()
            .expect("run buildah");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
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
