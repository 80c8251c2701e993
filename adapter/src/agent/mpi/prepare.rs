//! What the agent sets up for the job's launcher once it knows the MPI: its own directory under
//! the agent's `--tmpdir` (removed when the agent ends) with the component directory PRRTE
//! loads from and the hostfile, and the environment the batch command and the DVM head get.
//!
//! - **Components** (Open MPI 5 on the components' PRRTE): `PRTE_MCA_ras=k8s`, `PRTE_MCA_plm=k8s`,
//!   `PRTE_PKGLIBDIR` naming a directory of symlinks to the injected runtime's two components
//!   and to every file of the image's own component directory (`PRTE_PKGLIBDIR` replaces
//!   PRRTE's default directory, so the image's own DSO components must be there too), and the
//!   injected runtime's site parameter file as `PRTE_MCA_<name>` variables: prte forwards
//!   those to every prted it starts, which a parameter file in the image would not reach here
//!   (the image's PRRTE reads only its own `etc/`).
//! - **PRRTE's ssh launcher**: `PRTE_MCA_plm_ssh_agent=<runtime>/bin/prrte-k8s-rsh`,
//!   `PRTE_MCA_prte_default_hostfile=<hostfile>`, and where the line's profile says its launch
//!   threads race (the short-job hang of the unpatched 3.0.x lines)
//!   `PRTE_MCA_odls_base_max_threads=0`; a parameter the pod sets under 3.0's name that the
//!   line reads under another (its profile's `renamed`) also under the new name.
//! - **ORTE**: `OMPI_MCA_plm_rsh_agent`, `OMPI_MCA_orte_default_hostfile`,
//!   `OMPI_MCA_plm_rsh_no_tree_spawn=1` (mpirun starts every orted itself),
//!   `OMPI_MCA_orte_leave_session_attached=1` (each orted stays the program of its exec
//!   request instead of daemonizing, so its agent supervises it and stops it when the
//!   launcher's connection goes). ORTE's mpirun hands every `OMPI_MCA_*` of its environment to
//!   the orteds as `-mca` arguments, which the exec allowlist admits.
//! - **Hydra**: see `hydra::hydra_env`; Intel MPI also `I_MPI_PERHOST=<slots>` when
//!   every pod has the same number of slots (its `-f` host file carries no counts).
//! - **Every Open MPI** (the three above that are not Hydra):
//!   `OMPI_MCA_btl_tcp_if_include=<the interface holding POD_IP>`, as Hydra's interface: the
//!   ranks' TCP BTL on the pod network, not what the image's own `openmpi-mca-params.conf`
//!   chose (Debian's Open MPI 6.0.0~rc2 ships `btl_tcp_if_include=lo` there, a single-host
//!   setting with which ranks on two pods find no reachable pair of interfaces). mpirun hands
//!   its `OMPI_MCA_*` to every rank, the launcher pod's interface name with them (the
//!   container runtime names every pod's interface alike, `eth0`); a pod spec setting
//!   `OMPI_MCA_btl_tcp_if_exclude` keeps it out (Open MPI takes only one of the two).
//!
//! Every variable is set only where the agent's own environment does not set it (the pod spec
//! wins). `PATH` gets the injected runtime's `bin/` appended (and the MPI's directory when it
//! was found off `PATH`).

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use super::error::MpiError;
use super::hydra::hydra_env;
use super::kind::MpiKind;
use super::openmpi::parse_param_file;
use super::plan::{Launch, Plan};
use crate::hostfile::{render, Host, Use};

/// `PATH` for the command when the agent has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The interfaces of Open MPI's TCP BTL: the pod's, for every Open MPI.
const TCP_IF_INCLUDE: &str = "OMPI_MCA_btl_tcp_if_include";
/// Open MPI refuses it beside an include list: a pod spec that sets it keeps ours out.
const TCP_IF_EXCLUDE: &str = "OMPI_MCA_btl_tcp_if_exclude";

/// The plan with the agent's files in place.
#[derive(Debug)]
pub struct Prepared {
    pub plan: Plan,
    /// The agent's directory for this MPI (`<tmpdir>/prrte-k8s-mpi-<pid>`).
    pub state: PathBuf,
    /// Where the hostfile is written from discovery, when the launcher needs one.
    pub hostfile: Option<PathBuf>,
    /// The directory `PRTE_PKGLIBDIR` names (components launch only).
    pub pkglibdir: Option<PathBuf>,
    /// The variables the command gets (unless the agent's environment sets them).
    pub env: Vec<(String, String)>,
    /// Directories appended to the command's `PATH`.
    pub(crate) path_append: Vec<PathBuf>,
    /// The site parameter file could not be read (logged at start).
    pub warnings: Vec<String>,
}

/// The interface holding `ip`, if any (Hydra's proxies call back on it).
pub(crate) fn interface_of(ip: IpAddr) -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for a in addrs {
        let Some(sa) = a.address else { continue };
        let found = match ip {
            IpAddr::V4(v4) => sa.as_sockaddr_in().map(|s| s.ip() == v4),
            IpAddr::V6(v6) => sa.as_sockaddr_in6().map(|s| s.ip() == v6),
        };
        if found == Some(true) {
            return Some(a.interface_name);
        }
    }
    None
}

/// A directory of symlinks: to each of `ours` (all of it), then to each entry of `image` whose
/// name is not taken yet. A missing `image` directory is no error (Debian's is not created).
pub(crate) fn merge_components(
    dst: &Path,
    ours: &Path,
    image: Option<&Path>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    let link_all = |from: &Path, required: bool| -> std::io::Result<()> {
        let entries = match std::fs::read_dir(from) {
            Ok(e) => e,
            Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut names: Vec<OsString> = entries
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        names.sort();
        for name in names {
            let link = dst.join(&name);
            if std::fs::symlink_metadata(&link).is_ok() {
                continue;
            }
            std::os::unix::fs::symlink(from.join(&name), &link)?;
        }
        Ok(())
    };
    link_all(ours, true)?;
    if let Some(image) = image.filter(|i| *i != ours) {
        link_all(image, false)?;
    }
    Ok(())
}

impl Prepared {
    /// Creates the agent's directory under `tmpdir` and the files the plan needs;
    /// `pod_ip` is the pod's address (Hydra's interface is the one holding it).
    pub fn new(plan: Plan, tmpdir: &Path, pod_ip: Option<IpAddr>) -> Result<Prepared, MpiError> {
        let state = tmpdir.join(format!("prrte-k8s-mpi-{}", std::process::id()));
        let setup = |what: &str, e: std::io::Error| {
            MpiError::Setup(format!("cannot create {what}: {e}; the agent's --tmpdir must be writable (an emptyDir on /tmp)"))
        };
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(&state).map_err(|e| setup(&state.display().to_string(), e))?;
        let mut p = Prepared {
            hostfile: None,
            pkglibdir: None,
            env: Vec::new(),
            path_append: vec![plan.bin_dir()],
            warnings: Vec::new(),
            state,
            plan,
        };
        if !p.plan.found.on_path {
            p.path_append.insert(0, p.plan.found.dir.clone());
        }
        let rsh = p.plan.rsh().display().to_string();
        let hostfile = p.plan.hostfile_format().map(|f| {
            p.state.join(match f {
                crate::hostfile::Format::Openmpi => "hostfile",
                _ => "machinefile",
            })
        });
        let host = hostfile
            .as_ref()
            .map(|h| h.display().to_string())
            .unwrap_or_default();
        // The interface holding the pod's address: the pod network, where the NetworkPolicy
        // admits the MPI's ports.
        let iface = pod_ip.and_then(interface_of);
        let mut env: Vec<(String, String)> = Vec::new();
        let mut put = |k: &str, v: String| env.push((k.to_owned(), v));
        match p.plan.launch {
            Launch::Components => {
                let dir = p.state.join("components");
                let image_dir = p
                    .plan
                    .found
                    .prrte
                    .as_ref()
                    .and_then(|i| i.pkglibdir.clone());
                merge_components(&dir, &p.plan.components_dir(), image_dir.as_deref())
                    .map_err(|e| setup(&format!("the component directory {}", dir.display()), e))?;
                put("PRTE_MCA_ras", "k8s".into());
                put("PRTE_MCA_plm", "k8s".into());
                put("PRTE_PKGLIBDIR", dir.display().to_string());
                p.pkglibdir = Some(dir);
                match std::fs::read_to_string(p.plan.param_file()) {
                    Ok(text) => {
                        let params = parse_param_file(&text);
                        for (k, v) in params.into_iter().filter(|(k, _)| k != "ras" && k != "plm") {
                            put(&format!("PRTE_MCA_{k}"), v);
                        }
                    }
                    Err(e) => p.warnings.push(format!(
                        "cannot read the site parameter file {}: {e}; PRRTE runs with its defaults",
                        p.plan.param_file().display()
                    )),
                }
            }
            Launch::PrrteRsh => {
                put("PRTE_MCA_plm_ssh_agent", rsh);
                put("PRTE_MCA_prte_default_hostfile", host);
                let race = p
                    .plan
                    .prrte_profile()
                    .is_some_and(|prof| prof.features.launch_thread_race);
                if race {
                    put("PRTE_MCA_odls_base_max_threads", "0".into());
                }
            }
            Launch::OrteRsh => {
                put("OMPI_MCA_plm_rsh_agent", rsh);
                put("OMPI_MCA_orte_default_hostfile", host);
                put("OMPI_MCA_plm_rsh_no_tree_spawn", "1".into());
                put("OMPI_MCA_orte_leave_session_attached", "1".into());
            }
            Launch::MpichHydra | Launch::IntelHydra => {
                let kind = if p.plan.launch == Launch::IntelHydra {
                    MpiKind::Intel
                } else {
                    MpiKind::Mpich
                };
                let rsh = p.plan.rsh();
                let h = hostfile.clone().unwrap_or_default();
                for (k, v) in hydra_env(kind, &rsh, &h, iface.as_deref()) {
                    put(&k, v);
                }
            }
        }
        if p.plan.launch.is_open_mpi() {
            // Open MPI's TCP BTL on the pod network, whatever the image's own parameter file
            // says: Debian's Open MPI 6.0 packages pin it to `lo` there, which leaves ranks on
            // different pods without a reachable pairing of interfaces.
            if let Some(i) = &iface {
                put(TCP_IF_INCLUDE, i.clone());
            }
        }
        p.env = env;
        p.hostfile = hostfile;
        Ok(p)
    }

    /// The command's variables (the plan's, `I_MPI_PERHOST` from `hosts` (the job's pods), a renamed PRRTE
    /// parameter under its line's name, the `PATH` with the runtime appended), each only where
    /// `current` (the agent's environment) does not set it (nor, for the TCP BTL's include
    /// list, its exclude list), `PATH` always.
    pub(crate) fn command_env(
        &self,
        hosts: Option<&[Host]>,
        current: impl Fn(&str) -> Option<OsString>,
    ) -> Vec<(OsString, OsString)> {
        let set = |k: &str| current(k).is_some_and(|v| !v.is_empty());
        // The pod spec's own value, or (for the TCP BTL's include list) its exclude list.
        let pod_sets = |k: &str| set(k) || (k == TCP_IF_INCLUDE && set(TCP_IF_EXCLUDE));
        let mut out: Vec<(OsString, OsString)> = self
            .env
            .iter()
            .filter(|(k, _)| !pod_sets(k))
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        if self.plan.launch == Launch::PrrteRsh {
            // A parameter the pod sets under PRRTE 3.0's name, also under the line's own.
            let renamed = self
                .plan
                .prrte_profile()
                .map_or(&[][..], |prof| prof.renamed);
            for (old, new) in renamed {
                let new = format!("PRTE_MCA_{new}");
                let value = current(&format!("PRTE_MCA_{old}")).filter(|v| !v.is_empty());
                if let (false, Some(v)) = (set(&new), value) {
                    out.push((new.into(), v));
                }
            }
        }
        if self.plan.launch == Launch::IntelHydra && !set("I_MPI_PERHOST") {
            if let Some(n) = hosts.and_then(uniform_slots) {
                out.push(("I_MPI_PERHOST".into(), n.to_string().into()));
            }
        }
        let path = current("PATH")
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| DEFAULT_PATH.into());
        let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
        for d in &self.path_append {
            if !dirs.contains(d) {
                dirs.push(d.clone());
            }
        }
        if let Ok(joined) = std::env::join_paths(dirs) {
            out.push(("PATH".into(), joined));
        }
        out
    }

    /// Writes the hostfile (if the plan has one) of `hosts` (the job's pods): one line per pod
    /// in allocation order, by IP (no DNS), atomically (the command never sees half a file).
    pub(crate) fn write_hostfile(&self, hosts: &[Host]) -> Result<Option<&Path>, HostfileError> {
        let (Some(path), Some(format)) = (&self.hostfile, self.plan.hostfile_format()) else {
            return Ok(None);
        };
        let text = render(hosts, format, Use::Ips);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|source| HostfileError {
                path: path.clone(),
                source,
            })?;
        Ok(Some(path))
    }

    /// What the agent found and does, one `key: value` per line (`--detect-only` prints it).
    pub fn report(&self) -> Vec<String> {
        let mut lines = vec![
            format!("launch: {}", self.plan.launch.name()),
            format!("mpi: {}", self.plan.found.summary()),
            format!("how: {}", self.plan.launch.describe()),
        ];
        if let Some(why) = &self.plan.fallback {
            lines.push(format!("components: not used: {why}"));
        }
        lines.push(format!("daemon: {}", self.plan.daemon().display()));
        if let Some(prte) = self.plan.prte() {
            lines.push(format!("prte: {}", prte.display()));
        }
        for a in self.plan.exec_allow() {
            lines.push(format!("exec-allow: {}", a.display()));
        }
        if let Some(h) = &self.hostfile {
            lines.push(format!(
                "hostfile: {} (written from discovery)",
                h.display()
            ));
        }
        for (k, v) in &self.env {
            lines.push(format!("env: {k}={v}"));
        }
        for d in &self.path_append {
            lines.push(format!("path: +{}", d.display()));
        }
        for w in &self.warnings {
            lines.push(format!("warning: {w}"));
        }
        lines
    }
}

/// The hostfile could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the hostfile {}: {source}", path.display())]
pub(crate) struct HostfileError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// The slots of every pod, when they are all the same.
fn uniform_slots(hosts: &[Host]) -> Option<u32> {
    let first = hosts.first()?.slots;
    hosts.iter().all(|n| n.slots == first).then_some(first)
}

impl Drop for Prepared {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state);
    }
}
