//! Container images for sandbox pods: the local image store (containers-storage, as `buildah`
//! leaves it), each image's configuration, its root filesystem, and a tiny test image.
//!
//! A sandbox has no registry: an image runs when it is in the local store (built with
//! `buildah bud`, imported with `buildah`/`podman`, or tagged there). Its root filesystem comes
//! from a `buildah from --pull-never` working container, mounted once per image and sandbox
//! (`buildah mount`) and removed when the sandbox stops; every pod stacks its own writable
//! layer on it. The working containers are named after the sandbox's network prefix, so
//! [`crate::podnet::leftovers`] finds them if a sandbox was killed.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// Images whose name starts with this (any tag), the empty image and `none` run the host's
/// programs in the host's filesystem, as sandbox pods always did.
pub const HOST_IMAGE_REPO: &str = "prrte-k8s/sandbox-host";

/// Where containers-storage keeps its working-container list (for leftovers).
pub const CONTAINERS_JSON: &str = "/var/lib/containers/storage/overlay-containers/containers.json";

/// Whether a pod with this image runs host programs (no image root filesystem).
pub fn runs_on_host(image: &str) -> bool {
    let image = image.trim();
    image.is_empty()
        || image == "none"
        || image == HOST_IMAGE_REPO
        || image.starts_with(&format!("{HOST_IMAGE_REPO}:"))
        || image.starts_with(&format!("{HOST_IMAGE_REPO}@"))
}

/// The reference a container runtime resolves an image name to, as containerd and CRI-O do
/// (Docker's normalization): a name whose first component is not a registry (no `.` or `:`,
/// not `localhost`) is on `docker.io`, a single-component name in its `library/`, and a name
/// without tag or digest is `:latest`. `mpioperator/x:1` is `docker.io/mpioperator/x:1`,
/// `ubuntu` is `docker.io/library/ubuntu:latest`, `localhost/x` is `localhost/x:latest`. An
/// image ID (64 hex digits, or `sha256:` and them) stays as it is.
pub fn normalize(image: &str) -> String {
    let image = image.trim();
    let hex = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    if hex(image) || image.strip_prefix("sha256:").is_some_and(hex) {
        return image.to_string();
    }
    let mut full = match image.split_once('/') {
        Some((first, _))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.bytes().any(|b| b.is_ascii_uppercase()) =>
        {
            image.to_string()
        }
        Some(_) => format!("docker.io/{image}"),
        None => format!("docker.io/library/{image}"),
    };
    if let Some(rest) = full.strip_prefix("docker.io/") {
        if !rest.contains('/') {
            full = format!("docker.io/library/{rest}");
        }
    }
    let last = full.rsplit('/').next().unwrap_or("");
    if !full.contains('@') && !last.contains(':') {
        full.push_str(":latest");
    }
    full
}

/// Kubernetes' default `imagePullPolicy` for an image name: `Always` when it names the tag
/// `latest` or no tag (and no digest), else `IfNotPresent`.
pub fn default_pull_policy(image: &str) -> &'static str {
    let image = image.trim();
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or("");
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

/// An image's configuration (from `buildah inspect --type image`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// The image ID (hex, without `sha256:`).
    pub id: String,
    /// The name the store resolved (e.g. `localhost/app:1`).
    pub resolved: String,
    /// `USER`: "", "uid", "name", "uid:gid", "name:group".
    pub user: String,
    pub env: Vec<(String, String)>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub workdir: String,
}

fn buildah() -> Result<PathBuf> {
    ["/usr/bin/buildah", "/usr/local/bin/buildah"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("buildah is not installed (pods that run images read the local image store with it); run prrte-config/setup.sh"))
}

fn run_buildah(args: &[&str]) -> Result<std::process::Output> {
    Command::new(buildah()?)
        .args(args)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running buildah {}", args.join(" ")))
}

fn buildah_ok(args: &[&str]) -> Result<String> {
    let out = run_buildah(args)?;
    if !out.status.success() {
        bail!(
            "`buildah {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The configuration of `image` in the local store; `None` when the store does not have it.
pub fn inspect(image: &str) -> Result<Option<ImageConfig>> {
    let out = run_buildah(&["inspect", "--type", "image", "--", image])?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("image not known")
            || err.contains("not found")
            || err.contains("no such image")
        {
            return Ok(None);
        }
        bail!(
            "`buildah inspect --type image {image}` failed: {}",
            err.trim()
        );
    }
    let v: Value =
        serde_json::from_slice(&out.stdout).context("parsing buildah inspect's output")?;
    Ok(Some(parse_inspect(&v)))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn parse_inspect(v: &Value) -> ImageConfig {
    let c = &v["OCIv1"]["config"];
    ImageConfig {
        id: v["FromImageID"].as_str().unwrap_or("").to_string(),
        resolved: v["FromImage"].as_str().unwrap_or("").to_string(),
        user: c["User"].as_str().unwrap_or("").to_string(),
        env: strings(&c["Env"])
            .into_iter()
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (kv, String::new()),
            })
            .collect(),
        entrypoint: strings(&c["Entrypoint"]),
        cmd: strings(&c["Cmd"]),
        workdir: c["WorkingDir"].as_str().unwrap_or("").to_string(),
    }
}

/// An image's root filesystem, mounted for the lifetime of a sandbox.
#[derive(Debug)]
pub struct MountedImage {
    pub config: ImageConfig,
    /// The working container holding the mount.
    pub container: String,
    /// Its root filesystem (never written by pods: they stack their own layer on it).
    pub rootfs: PathBuf,
}

/// The images a sandbox has mounted, by image ID.
pub struct ImageStore {
    prefix: String,
    mounted: Mutex<HashMap<String, Arc<MountedImage>>>,
    released: Mutex<bool>,
}

impl ImageStore {
    /// Working containers are named `<prefix>-img-<image id>`; use the network's prefix.
    pub fn new(prefix: &str) -> ImageStore {
        ImageStore {
            prefix: prefix.to_string(),
            mounted: Mutex::new(HashMap::new()),
            released: Mutex::new(false),
        }
    }

    /// The mounted root filesystem of `image` (mounted on first use); `None` when the local store
    /// does not have the image.
    pub fn get(&self, image: &str) -> Result<Option<Arc<MountedImage>>> {
        let Some(config) = inspect(image)? else {
            return Ok(None);
        };
        let mut m = self.mounted.lock().unwrap_or_else(|p| p.into_inner());
        if *self.released.lock().unwrap_or_else(|p| p.into_inner()) {
            bail!("the sandbox is shutting down");
        }
        if let Some(mi) = m.get(&config.id) {
            return Ok(Some(mi.clone()));
        }
        let name = format!(
            "{}-img-{}",
            self.prefix,
            &config.id[..12.min(config.id.len())]
        );
        // A stale one from an earlier attempt of this same sandbox (never of another).
        let _ = run_buildah(&["rm", &name]);
        buildah_ok(&[
            "from",
            "--pull-never",
            "--quiet",
            "--name",
            &name,
            &config.id,
        ])
        .with_context(|| format!("creating a working container of image {image}"))?;
        let rootfs = match buildah_ok(&["mount", &name]) {
            Ok(p) => PathBuf::from(p),
            Err(e) => {
                let _ = run_buildah(&["rm", &name]);
                return Err(e.context(format!("mounting image {image}")));
            }
        };
        let mi = Arc::new(MountedImage {
            config,
            container: name,
            rootfs,
        });
        m.insert(mi.config.id.clone(), mi.clone());
        Ok(Some(mi))
    }

    /// Unmounts and removes every working container (after the sandbox's pods are gone).
    pub fn release(&self) {
        *self.released.lock().unwrap_or_else(|p| p.into_inner()) = true;
        let all: Vec<Arc<MountedImage>> = self
            .mounted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, v)| v)
            .collect();
        for mi in all {
            if let Err(e) = buildah_ok(&["rm", &mi.container]) {
                tracing::warn!("removing working container {}: {e:#}", mi.container);
            }
        }
    }
}

impl Drop for ImageStore {
    fn drop(&mut self) {
        self.release();
    }
}

/// Gives `image` the additional name `name` (`buildah tag`), taking it from the image that had
/// it. See [`untag`] for why name changes take a lock.
pub fn tag(image: &str, name: &str) -> Result<()> {
    let _lock = names_lock()?;
    buildah_ok(&["tag", image, name]).map(|_| ())
}

/// Removes the name `name` from the local store (`buildah rmi`: the image goes only with its
/// last name). Changes of image names are serialized across processes (tests run in parallel
/// binaries): buildah reads an image's names and writes the list back whole, so two changes of
/// one image's names at once lose one of them (a new name vanishes, a moved one comes back).
pub fn untag(name: &str) -> Result<()> {
    let _lock = names_lock()?;
    buildah_ok(&["rmi", name]).map(|_| ())
}

fn names_lock() -> Result<nix::fcntl::Flock<std::fs::File>> {
    let path = std::env::temp_dir().join("prrte-k8s-test-image-names.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow!("locking {}: {e}", path.display()))
}

/// Names of buildah working containers starting with `prefix` (read from containers-storage's
/// list, without running buildah).
pub fn working_containers(prefix: &str) -> Vec<String> {
    let Ok(text) = std::fs::read(CONTAINERS_JSON) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_slice(&text).unwrap_or(Value::Null);
    let mut out: Vec<String> = v
        .as_array()
        .map(|a| {
            a.iter()
                .flat_map(|c| strings(&c["names"]))
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Removes buildah working containers (used when cleaning up after a killed sandbox).
pub fn remove_working_container(name: &str) -> Result<()> {
    buildah_ok(&["rm", name]).map(|_| ())
}

// ---------------------------------------------------------------------------------------------
// Users and groups of an image
// ---------------------------------------------------------------------------------------------

/// An `/etc/passwd` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswdEntry {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
}

/// The entries of the image's `/etc/passwd` (none if it has none).
pub fn passwd(rootfs: &Path) -> Vec<PasswdEntry> {
    let text = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            if f.len() < 7 {
                return None;
            }
            Some(PasswdEntry {
                name: f[0].to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
                home: f[5].to_string(),
            })
        })
        .collect()
}

/// (name, gid, members) of the image's `/etc/group`.
pub fn groups(rootfs: &Path) -> Vec<(String, u32, Vec<String>)> {
    let text = std::fs::read_to_string(rootfs.join("etc/group")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4).then(|| {
                Some((
                    f[0].to_string(),
                    f[2].parse().ok()?,
                    f[3].split(',')
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect(),
                ))
            })?
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// A tiny test image
// ---------------------------------------------------------------------------------------------

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

#[cfg(test)]
mod tests {
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
}
