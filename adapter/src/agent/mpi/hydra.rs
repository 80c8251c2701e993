//! MPICH's and Intel MPI's Hydra: what `mpiexec.hydra --version` says, and the environment that
//! makes Hydra start its proxies through `prrte-k8s-rsh` on the job's pods.

use std::path::Path;

use super::kind::MpiKind;
use super::probe::{probe, PROBE_TIMEOUT};

/// The MPI and version from `mpiexec.hydra --version`: MPICH prints `HYDRA build details:` and
/// `Version: 4.2.1`; Intel MPI `Intel(R) MPI Library for Linux* OS, Version 2021.16 Build ...`.
pub(crate) fn parse_hydra_version(kind: MpiKind, text: &str) -> Option<String> {
    if let Some(v) = text.lines().find_map(|l| {
        let (_, rest) = l.split_once("Intel(R) MPI Library")?;
        let (_, v) = rest.split_once("Version")?;
        v.split_whitespace().next().map(str::to_owned)
    }) {
        return Some(format!("Intel MPI {v}"));
    }
    let v = text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "Version").then(|| v.trim().to_owned())
    })?;
    let name = match kind {
        MpiKind::Intel => "Intel MPI",
        _ => "MPICH",
    };
    (!v.is_empty()).then(|| format!("{name} {v}"))
}

/// The version of the Hydra in `dir` (`mpiexec.hydra --version`, else `mpiexec --version`).
pub(crate) async fn probe_hydra_version(kind: MpiKind, dir: &Path) -> Option<String> {
    for prog in ["mpiexec.hydra", "mpiexec"] {
        let p = dir.join(prog);
        if !p.is_file() {
            continue;
        }
        if let Ok(out) = probe(&p, &["--version"], PROBE_TIMEOUT).await {
            if let Some(v) = parse_hydra_version(kind, &out.text) {
                return Some(v);
            }
        }
    }
    None
}

/// Hydra's settings for the job's command (each only where the agent's environment does not
/// set it): the ssh launcher is `rsh`, the hosts are `hostfile`, and the proxies call back on
/// the pod's interface `iface` (pods have no DNS names for each other).
pub(crate) fn hydra_env(
    kind: MpiKind,
    rsh: &Path,
    hostfile: &Path,
    iface: Option<&str>,
) -> Vec<(String, String)> {
    let (launcher, exec, hosts, if_var) = match kind {
        MpiKind::Intel => (
            "I_MPI_HYDRA_BOOTSTRAP",
            "I_MPI_HYDRA_BOOTSTRAP_EXEC",
            "I_MPI_HYDRA_HOST_FILE",
            "I_MPI_HYDRA_IFACE",
        ),
        _ => (
            "HYDRA_LAUNCHER",
            "HYDRA_LAUNCHER_EXEC",
            "HYDRA_HOST_FILE",
            "HYDRA_IFACE",
        ),
    };
    let mut env = vec![
        (launcher.to_owned(), "ssh".to_owned()),
        (exec.to_owned(), rsh.display().to_string()),
        (hosts.to_owned(), hostfile.display().to_string()),
    ];
    if let Some(i) = iface {
        env.push((if_var.to_owned(), i.to_owned()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let mpich = "HYDRA build details:\n    Version:                                 4.2.1\n    Release Date:                            Wed Apr 17\n";
        assert_eq!(
            parse_hydra_version(MpiKind::Mpich, mpich).as_deref(),
            Some("MPICH 4.2.1")
        );
        let intel = "Intel(R) MPI Library for Linux* OS, Version 2021.16 Build 20250722 (id: c37a540)\nCopyright 2003-2025, Intel Corporation.\n";
        assert_eq!(
            parse_hydra_version(MpiKind::Intel, intel).as_deref(),
            Some("Intel MPI 2021.16")
        );
        assert_eq!(parse_hydra_version(MpiKind::Mpich, "usage: ..."), None);
    }

    #[test]
    fn environment_names_the_rsh_and_the_hosts() {
        let e = hydra_env(
            MpiKind::Mpich,
            Path::new("/opt/prrte-k8s/bin/prrte-k8s-rsh"),
            Path::new("/tmp/x/machinefile"),
            Some("eth0"),
        );
        assert_eq!(
            e,
            [
                ("HYDRA_LAUNCHER", "ssh"),
                ("HYDRA_LAUNCHER_EXEC", "/opt/prrte-k8s/bin/prrte-k8s-rsh"),
                ("HYDRA_HOST_FILE", "/tmp/x/machinefile"),
                ("HYDRA_IFACE", "eth0"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        let e = hydra_env(MpiKind::Intel, Path::new("/r"), Path::new("/h"), None);
        let names: Vec<&str> = e.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "I_MPI_HYDRA_BOOTSTRAP",
                "I_MPI_HYDRA_BOOTSTRAP_EXEC",
                "I_MPI_HYDRA_HOST_FILE"
            ]
        );
    }
}
