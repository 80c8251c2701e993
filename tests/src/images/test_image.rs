//! A tiny test image built from the host's static busybox.
use super::buildah::{buildah_ok, inspect, run_buildah};
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The repository of the test images [`test_image`] builds.
pub const TEST_IMAGE_REPO: &str = "localhost/prrte-k8s-test/busybox";

/// A small image built from the host's static busybox (Debian `busybox-static`): `/bin/sh` and
/// the usual tools, a user `app` (1000:1000, also in group `extra` 2000), `HOME=/home/app`
/// owned by it, an empty `/data`, `ENV GREETING=hello-from-image`, `WORKDIR /home/app`,
/// `CMD ["sleep", "3600"]`. With `root` the image has no `USER` (it runs as root), else
/// `USER 1000:1000`. Built once into the local store under a tag keyed by the busybox binary
/// and this recipe, so later calls (and later test runs) only look it up. Returns the name.
pub fn test_image(root: bool) -> Result<String> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let (busybox, bytes) = static_busybox()?;
    let key = recipe_key(&bytes);
    let name = format!("{TEST_IMAGE_REPO}:{key}{}", if root { "-root" } else { "" });
    if inspect(&name)?.is_some() {
        return Ok(name);
    }
    // Serialize builds across processes too (tests run in parallel binaries).
    let lock_path = std::env::temp_dir().join("prrte-k8s-test-image.lock");
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)?;
    let _flock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow!("locking {}: {e}", lock_path.display()))?;
    if inspect(&name)?.is_some() {
        return Ok(name);
    }
    build_test_image(&busybox, &name, root)?;
    Ok(name)
}

/// The host's busybox and its contents; it must be linked statically.
fn static_busybox() -> Result<(PathBuf, Vec<u8>)> {
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("busybox is not installed (the test image is made from Debian's busybox-static); run prrte-config/setup.sh"))?;
    let bytes =
        std::fs::read(&busybox).with_context(|| format!("reading {}", busybox.display()))?;
    if !is_static(&bytes) {
        bail!("{} is not statically linked; install Debian's busybox-static (prrte-config/setup.sh does)", busybox.display());
    }
    Ok((busybox, bytes))
}

/// The test image's tag: a hash of the busybox binary and of the recipe's version.
fn recipe_key(bytes: &[u8]) -> String {
    const RECIPE: u32 = 2;
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    RECIPE.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Builds the test image `name` in a working container from scratch, removed afterwards.
fn build_test_image(busybox: &Path, name: &str, root: bool) -> Result<()> {
    let ctr = format!("prrte-k8s-test-image-build-{}", std::process::id());
    let _ = run_buildah(&["rm", &ctr]);
    buildah_ok(&["from", "--quiet", "--name", &ctr, "scratch"])?;
    let r = (|| -> Result<()> {
        let m = PathBuf::from(buildah_ok(&["mount", &ctr])?);
        fill_test_root(&m, busybox)?;
        let mut cfg = vec![
            "config",
            "--env",
            "GREETING=hello-from-image",
            "--env",
            "PATH=/bin",
            "--workingdir",
            "/home/app",
            "--cmd",
            "[\"sleep\", \"3600\"]",
        ];
        if !root {
            cfg.extend(["--user", "1000:1000"]);
        }
        cfg.push(&ctr);
        buildah_ok(&cfg)?;
        buildah_ok(&["commit", "--quiet", &ctr, name])?;
        Ok(())
    })();
    let _ = run_buildah(&["rm", &ctr]);
    r.with_context(|| format!("building the test image {name}"))
}

/// The test image's files in its mounted root `m`: busybox and its applets, the directories,
/// the users and groups.
fn fill_test_root(m: &Path, busybox: &Path) -> Result<()> {
    for d in [
        "bin", "etc", "tmp", "home/app", "data", "root", "proc", "sys", "dev",
    ] {
        std::fs::create_dir_all(m.join(d))?;
    }
    std::fs::copy(busybox, m.join("bin/busybox"))?;
    let out = Command::new(m.join("bin/busybox"))
        .arg("--list")
        .output()
        .context("busybox --list")?;
    for applet in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|a| !a.is_empty() && *a != "busybox")
    {
        let _ = std::os::unix::fs::symlink("busybox", m.join("bin").join(applet));
    }
    // As in Debian: /var/run is an absolute link (mount paths must resolve in the image).
    std::fs::create_dir_all(m.join("run"))?;
    std::fs::create_dir_all(m.join("var"))?;
    std::os::unix::fs::symlink("/run", m.join("var/run"))?;
    std::fs::write(m.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")?;
    std::fs::write(
        m.join("etc/group"),
        "root:x:0:\napp:x:1000:\nextra:x:2000:app\nnogroup:x:65534:\n",
    )?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(m.join("tmp"), std::fs::Permissions::from_mode(0o1777))?;
    std::os::unix::fs::chown(m.join("home/app"), Some(1000), Some(1000))?;
    Ok(())
}

fn is_static(elf: &[u8]) -> bool {
    // A dynamically linked ELF names its interpreter (PT_INTERP); look for the loader's name.
    !elf.windows(b"ld-linux".len())
        .take(64 * 1024)
        .any(|w| w == b"ld-linux")
}
