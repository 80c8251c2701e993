//! The local image store through `buildah`: images' configurations, names, working containers.
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Where containers-storage keeps its working-container list (for leftovers).
pub const CONTAINERS_JSON: &str = "/var/lib/containers/storage/overlay-containers/containers.json";

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

pub(super) fn run_buildah(args: &[&str]) -> Result<std::process::Output> {
    Command::new(buildah()?)
        .args(args)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running buildah {}", args.join(" ")))
}

pub(super) fn buildah_ok(args: &[&str]) -> Result<String> {
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

pub(super) fn parse_inspect(v: &Value) -> ImageConfig {
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
