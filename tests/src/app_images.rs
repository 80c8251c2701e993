//! The user images the injected runtime serves, built as mpi-operator's examples are: a Debian
//! base (mmdebstrap, `prrte-config/image/base.sh`) with the distribution's MPI, openssh
//! installed but never started, user `mpiuser` (uid 1000), and `pi`/`spawn` compiled with the
//! MPI's own wrappers (`prrte-config/image/Containerfile.mpi-app`, `tests/programs/pi.cc`,
//! `spawn.c`); and an image with no libc at all (`Containerfile.nolibc`). Nothing of prrte-k8s
//! is in them.
//!
//! `make image` builds them (`prrte-config/image/app-images.sh`, keyed by recipe, sources and
//! base image); [`app_image`] runs the same script for one, so a missing or stale image is
//! made the same way and an up-to-date one only looked up. [`InjectBundle`] gives the
//! injected runtime of `localhost/prrte-k8s-inject:latest` as a host directory, for mounting
//! where a pod's init container would copy it.

use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::images::inspect;

/// The repository of the app images (`prrte-config/image/app-images.sh`).
pub const APP_IMAGE_REPO: &str = "localhost/prrte-k8s-app";
/// The inject image `make image` builds.
pub const INJECT_IMAGE: &str = "localhost/prrte-k8s-inject:latest";
/// Where the inject image holds the bundle.
pub const BUNDLE_DIR: &str = "opt/prrte-k8s-bundle";

/// One user image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppImage {
    /// Debian trixie + openmpi-bin: Open MPI 5.0.7 on PRRTE 3.0.8, PMIx 5.0.7.
    TrixieOpenmpi,
    /// Debian trixie + mpich (4.2, Hydra).
    TrixieMpich,
    /// Debian bookworm + openmpi-bin: Open MPI 4.1 (ORTE).
    BookwormOpenmpi,
    /// Debian bullseye (glibc 2.31) + mpich (3.4, Hydra).
    BullseyeMpich,
    /// Debian unstable + openmpi-bin: Open MPI 6.0.0~rc2 on PRRTE 5.0.0~rc1, PMIx 7.0.0~rc1.
    SidOpenmpi,
    /// Debian trixie + openmpi-bin + python3 as `python`: what the Kubeflow SDK's
    /// `CustomTrainer` runs its function with (`python FILE` under `mpirun`).
    TrixieOpenmpiPython,
    /// Debian's busybox-static in an empty image: no libc, no MPI.
    NoLibc,
}

/// What the agent's `--mpi auto --detect-only` prints first for an image, and what its MPI
/// reports: the expectations of the tests that run the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    /// The `launch:` line's value (`none`: no MPI, the agent exits 2).
    pub launch: &'static str,
    /// The start of the MPI's version in the `mpi:` line.
    pub mpi: &'static str,
    /// The daemon the agent serves.
    pub daemon: &'static str,
}

impl AppImage {
    pub const ALL: [AppImage; 7] = [
        AppImage::TrixieOpenmpi,
        AppImage::TrixieMpich,
        AppImage::BookwormOpenmpi,
        AppImage::BullseyeMpich,
        AppImage::SidOpenmpi,
        AppImage::TrixieOpenmpiPython,
        AppImage::NoLibc,
    ];

    /// The image's name in the local store.
    pub fn image(self) -> String {
        format!("{APP_IMAGE_REPO}/{}:latest", self.name())
    }

    /// The image's short name (its repository under [`APP_IMAGE_REPO`]).
    pub fn name(self) -> &'static str {
        match self {
            AppImage::TrixieOpenmpi => "trixie-openmpi",
            AppImage::TrixieMpich => "trixie-mpich",
            AppImage::BookwormOpenmpi => "bookworm-openmpi",
            AppImage::BullseyeMpich => "bullseye-mpich",
            AppImage::SidOpenmpi => "sid-openmpi",
            AppImage::TrixieOpenmpiPython => "trixie-openmpi-python",
            AppImage::NoLibc => "nolibc",
        }
    }

    /// What the agent finds in it.
    pub fn expected(self) -> Expected {
        match self {
            AppImage::TrixieOpenmpi | AppImage::TrixieOpenmpiPython => Expected {
                launch: "prrte-components",
                mpi: "Open MPI 5.0",
                daemon: "/usr/bin/prted",
            },
            AppImage::TrixieMpich => Expected {
                launch: "mpich-hydra",
                mpi: "MPICH 4.",
                daemon: "/usr/bin/hydra_pmi_proxy",
            },
            AppImage::BookwormOpenmpi => Expected {
                launch: "orte-rsh",
                mpi: "Open MPI 4.1",
                daemon: "/usr/bin/orted",
            },
            AppImage::BullseyeMpich => Expected {
                launch: "mpich-hydra",
                mpi: "MPICH 3.",
                daemon: "/usr/bin/hydra_pmi_proxy",
            },
            AppImage::SidOpenmpi => Expected {
                launch: "prrte-rsh",
                mpi: "Open MPI 6.0",
                daemon: "/usr/bin/prted",
            },
            AppImage::NoLibc => Expected {
                launch: "none",
                mpi: "",
                daemon: "",
            },
        }
    }
}

/// The repository root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the repository")
        .to_path_buf()
}

fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The image `app` as `make image` builds it, `localhost/prrte-k8s-app/<name>:latest`: made
/// or found up to date by `prrte-config/image/app-images.sh NAME` (the same script, so the
/// same recipe and cache key), one build at a time on the machine.
pub fn app_image(app: AppImage) -> Result<String> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let lock_path = std::env::temp_dir().join("prrte-k8s-app-image.lock");
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)?;
    let _flock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow!("locking {}: {e}", lock_path.display()))?;
    let script = repo().join("prrte-config/image/app-images.sh");
    run(
        Command::new("bash")
            .arg(&script)
            .arg(app.name())
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        &format!("{} {}", script.display(), app.name()),
    )?;
    let name = app.image();
    inspect(&name)?.ok_or_else(|| anyhow!("{} made no {name}", script.display()))?;
    Ok(name)
}

/// The injected runtime of [`INJECT_IMAGE`] as a directory on the host (the image mounted by a
/// buildah working container, removed when dropped).
pub struct InjectBundle {
    container: String,
    /// The bundle: `bin/`, `lib/prte/`, `etc/`, `VERSION`.
    pub dir: PathBuf,
    /// The image's root filesystem.
    pub root: PathBuf,
}

impl InjectBundle {
    pub fn mount() -> Result<InjectBundle> {
        let container = format!(
            "pk8s-inject-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        run(
            Command::new("buildah").args([
                "from",
                "--pull-never",
                "--quiet",
                "--name",
                &container,
                INJECT_IMAGE,
            ]),
            &format!("buildah from {INJECT_IMAGE} (is it built? `make image`)"),
        )?;
        let root = match run(
            Command::new("buildah").args(["mount", &container]),
            "buildah mount",
        ) {
            Ok(p) => PathBuf::from(p),
            Err(e) => {
                let _ = Command::new("buildah").args(["rm", &container]).output();
                return Err(e);
            }
        };
        Ok(InjectBundle {
            container,
            dir: root.join(BUNDLE_DIR),
            root,
        })
    }
}

impl Drop for InjectBundle {
    fn drop(&mut self) {
        let _ = Command::new("buildah")
            .args(["rm", &self.container])
            .stdin(Stdio::null())
            .output();
    }
}

/// One run of `pi`: the worker count rank 0 printed, each rank's host (by rank), and pi.
#[derive(Debug, Clone, PartialEq)]
pub struct PiRun {
    pub workers: usize,
    pub hosts: Vec<String>,
    pub pi: f64,
}

/// Checks `pi`'s output for `np` ranks: `Workers: np` once, `Rank R on host H` once for every
/// R in 0..np, and `pi is approximately P` with P within 1e-9 of pi.
pub fn check_pi(stdout: &str, np: usize) -> Result<PiRun> {
    let workers: Vec<usize> = stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Workers: "))
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    if workers != [np] {
        bail!("expected one \"Workers: {np}\" line, found {workers:?} in:\n{stdout}");
    }
    let mut hosts: Vec<Option<String>> = vec![None; np];
    for l in stdout.lines() {
        let Some(rest) = l.trim().strip_prefix("Rank ") else {
            continue;
        };
        let Some((r, h)) = rest.split_once(" on host ") else {
            continue;
        };
        let r: usize = r.trim().parse().with_context(|| format!("rank in {l:?}"))?;
        if r >= np || hosts[r].is_some() {
            bail!("rank {r} out of range or twice in:\n{stdout}");
        }
        hosts[r] = Some(h.trim().to_string());
    }
    let hosts: Vec<String> = hosts
        .into_iter()
        .enumerate()
        .map(|(r, h)| h.ok_or_else(|| anyhow!("no line of rank {r} in:\n{stdout}")))
        .collect::<Result<_>>()?;
    let pi: f64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("pi is approximately "))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow!("no \"pi is approximately\" line in:\n{stdout}"))?;
    if (pi - std::f64::consts::PI).abs() > 1e-9 {
        bail!("pi = {pi} is wrong:\n{stdout}");
    }
    Ok(PiRun {
        workers: np,
        hosts,
        pi,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pi_output() {
        let out = "Workers: 2\nRank 1 on host b\nRank 0 on host a\npi is approximately 3.1415926535898731, error 8.00e-15\n";
        let r = check_pi(out, 2).unwrap();
        assert_eq!(r.hosts, ["a", "b"]);
        assert!(check_pi(out, 3).is_err());
        assert!(check_pi(&out.replace("Rank 1 on host b\n", ""), 2).is_err());
        assert!(check_pi(&out.replace("3.14159265358987", "3.14159"), 2).is_err());
    }

    #[test]
    fn every_image_is_built_by_the_script_and_has_an_expectation() {
        let script =
            std::fs::read_to_string(repo().join("prrte-config/image/app-images.sh")).unwrap();
        for a in AppImage::ALL {
            assert!(
                script.contains(&format!("\n        {}) ", a.name())),
                "app-images.sh builds {}",
                a.name()
            );
            assert!(!a.expected().launch.is_empty());
        }
    }
}
