//! What a launch request may ask of prted.
//!
//! The agent starts only its configured prted, but prted itself can be told to run or load other
//! code: an MCA parameter naming a program (`prte_launch_agent`, `plm_ssh_agent`,
//! `odls_base_exec_agent`, ...), a directory or file of components or parameters
//! (`*_component_path`, `mca_base_param_files`, `PRTE_PKGLIBDIR`), or an installation prefix
//! whose libraries and binaries it then uses. A launch request that sets any of these, in its
//! environment or through `--prtemca`/`--pmixmca`/`--mca` arguments alike, is refused with the
//! name of the parameter. Only the environment PRRTE's k8s PLM sends is admitted at all:
//! `PRTE_MCA_*`, `PMIX_MCA_*` and `OMPI_MCA_*` variables.
//!
//! Site settings of that kind belong in the pod spec (the agent's own environment, which prted
//! inherits) or in PRRTE's parameter files inside the image, which the launcher cannot change.

/// Flags followed by an MCA `name value` pair on prted's command line.
const MCA_FLAGS: &[&str] = &[
    "--prtemca",
    "-prtemca",
    "--pmixmca",
    "-pmixmca",
    "--mca",
    "-mca",
    "--gmca",
    "-gmca",
    "--omca",
    "-omca",
];

/// prted options that name programs, prefixes or files to load.
const REFUSED_OPTIONS: &[&str] = &[
    "--prefix",
    "--noprefix",
    "--launch-agent",
    "--exec-agent",
    "--tune",
    "--personality",
];

/// Environment variables (besides MCA parameters) that change where PRRTE/PMIx load code from.
const REFUSED_ENV_SUFFIXES: &[&str] =
    &["PKGLIBDIR", "PREFIX", "INSTALL_PREFIX", "LIBDIR", "BINDIR"];

/// Why a launch request is refused by this policy; the message names the parameter and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyRefusal {
    #[error(
        "argv[{index}]: prted option `{option}` is not allowed in a launch request (it names \
         programs or files for prted to run or load); set it in the pod spec instead"
    )]
    Option { index: usize, option: &'static str },
    #[error("argv[{index}]: `{flag}` without a parameter name")]
    NoParameterName { index: usize, flag: String },
    /// `name` is already made printable.
    #[error(
        "argv[{index}]: MCA parameter `{name}` is not allowed in a launch request: it {why}; \
         set it in the pod spec (the agent's environment) or PRRTE's parameter file in the \
         image instead"
    )]
    Parameter {
        index: usize,
        name: String,
        why: &'static str,
    },
    /// `key` is already made printable; `why` is empty or a parenthesis with a leading space.
    #[error(
        "environment variable `{key}` is not allowed in a launch request{why}: only \
         PRTE_MCA_*, PMIX_MCA_* and OMPI_MCA_* parameters are passed to prted"
    )]
    Variable { key: String, why: &'static str },
    #[error(
        "environment variable `{key}` is not allowed in a launch request: MCA parameter \
         `{param}` {why}; set it in the pod spec (the agent's environment) instead"
    )]
    VariableParameter {
        key: String,
        param: String,
        why: &'static str,
    },
    #[error(
        "dvm_uri names {host}, but the launcher connects from {launcher}: an agent publishes \
         only the URI of a DVM on the launcher's own address"
    )]
    DvmUriElsewhere {
        host: std::net::Ipv4Addr,
        launcher: std::net::IpAddr,
    },
    #[error("dvm_uri has no IPv4 address")]
    DvmUriNoIpv4,
}

/// The agent answers a refused launch with the reason as text (`failed {reason}`).
impl From<PolicyRefusal> for String {
    fn from(e: PolicyRefusal) -> String {
        e.to_string()
    }
}

/// Why an MCA parameter name is refused, if it is.
pub(crate) fn refused_mca(name: &str) -> Option<&'static str> {
    let n = name.to_ascii_lowercase();
    // PMIx/PRRTE accept framework names with or without the project prefix.
    let bare = n
        .strip_prefix("prte_")
        .or_else(|| n.strip_prefix("pmix_"))
        .or_else(|| n.strip_prefix("opal_"))
        .or_else(|| n.strip_prefix("ompi_"))
        .unwrap_or(&n);
    if n.ends_with("agent") {
        return Some("names a program to run (launch/exec agent)");
    }
    if n.contains("component_path") || n.contains("component_show_load_errors_path") {
        return Some("names a directory of components to load");
    }
    if n.contains("param_files") || n.contains("envar_file") || n.contains("param_file_prefix") {
        return Some("names parameter files to read");
    }
    if bare == "plm" || bare.starts_with("plm_ssh_") || bare.starts_with("plm_rsh_") {
        return Some("selects or configures how prted starts other daemons");
    }
    if bare == "prefix" || n.ends_with("_prefix") && !n.ends_with("tmpdir_prefix") {
        return Some("names an installation prefix to run programs and load libraries from");
    }
    if bare.starts_with("odls_") && (n.contains("exec") || n.contains("fork")) {
        return Some("changes how prted starts processes");
    }
    if bare.starts_with("pdl_") || bare == "pdl" {
        return Some("changes how components are loaded");
    }
    if bare == "xterm" {
        return Some("names a program to run (xterm)");
    }
    None
}

/// Checks a launch request's arguments and environment against the policy above; the error
/// names the parameter and why.
pub fn check_launch<'a>(
    argv: &[String],
    env: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), PolicyRefusal> {
    let mut i = 0;
    while i < argv.len() {
        let a = argv[i].as_str();
        let flag = a.split('=').next().unwrap_or(a);
        if let Some(option) = REFUSED_OPTIONS.iter().find(|o| **o == flag) {
            return Err(PolicyRefusal::Option { index: i, option });
        }
        if MCA_FLAGS.contains(&flag) {
            let Some(name) = argv.get(i + 1) else {
                return Err(PolicyRefusal::NoParameterName {
                    index: i,
                    flag: a.to_owned(),
                });
            };
            if let Some(why) = refused_mca(name) {
                return Err(PolicyRefusal::Parameter {
                    index: i + 1,
                    name: crate::text::printable(name, 200),
                    why,
                });
            }
            i += 3;
            continue;
        }
        i += 1;
    }
    for (key, _) in env {
        let param = ["PRTE_MCA_", "PMIX_MCA_", "OMPI_MCA_"]
            .iter()
            .find_map(|p| key.strip_prefix(p));
        let Some(param) = param else {
            let why = if REFUSED_ENV_SUFFIXES.iter().any(|s| key.ends_with(s)) {
                " (it changes where PRRTE loads code from)"
            } else {
                ""
            };
            return Err(PolicyRefusal::Variable {
                key: crate::text::printable(key, 200),
                why,
            });
        };
        if let Some(why) = refused_mca(param) {
            return Err(PolicyRefusal::VariableParameter {
                key: crate::text::printable(key, 200),
                param: param.to_owned(),
                why,
            });
        }
    }
    Ok(())
}

/// A launch's `dvm_uri` (already checked by [`crate::protocol::validate_dvm_uri`]) must point at
/// the launcher's own address: prte runs the DVM's tool server where it launches from, so any
/// other address would let a launcher send this pod's `prrte-k8s prun` elsewhere.
pub fn check_dvm_uri_host(uri: &str, launcher: std::net::IpAddr) -> Result<(), PolicyRefusal> {
    let host = uri
        .split_once(";tcp4://")
        .and_then(|(_, hp)| hp.rsplit_once(':'))
        .and_then(|(h, _)| h.parse::<std::net::Ipv4Addr>().ok());
    let launcher4 = match launcher {
        std::net::IpAddr::V4(a) => Some(a),
        std::net::IpAddr::V6(a) => a.to_ipv4_mapped(),
    };
    match (host, launcher4) {
        (Some(h), Some(l)) if h == l => Ok(()),
        (Some(host), _) => Err(PolicyRefusal::DvmUriElsewhere { host, launcher }),
        (None, _) => Err(PolicyRefusal::DvmUriNoIpv4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn env(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// What PRRTE's PLM actually sends (from a real `prte --prtemca plm k8s` launch) passes.
    #[test]
    fn what_the_plm_sends_passes() {
        let argv = s(&[
            "--prtemca",
            "ess",
            "env",
            "--prtemca",
            "ess_base_nspace",
            "prte-x-1@0",
            "--prtemca",
            "ess_base_vpid",
            "1",
            "--prtemca",
            "ess_base_num_procs",
            "3",
            "--prtemca",
            "prte_hnp_uri",
            "prte-x-1@0.0;tcp://10.0.0.2:40000",
            "--prtemca",
            "prte_if_include",
            "10.0.0.0/24",
            "--pmixmca",
            "ptl_base_if_include",
            "eth0",
            "--prtemca",
            "odls_base_max_threads",
            "0",
            "--prtemca",
            "pmix_session_server",
            "1",
            "--prtemca",
            "ras_base_verbose",
            "5",
            "--prtemca",
            "plm_base_verbose",
            "5",
            "--leave-session-attached",
        ]);
        let e = env(&[
            ("PRTE_MCA_prte_if_include", "10.0.0.0/24"),
            ("PMIX_MCA_ptl_base_if_include", "eth0"),
            ("OMPI_MCA_btl", "tcp,self"),
        ]);
        assert_eq!(check_launch(&argv, &e), Ok(()));
    }

    #[test]
    fn code_loading_parameters_are_refused_in_args_and_env_alike() {
        for name in [
            "prte_launch_agent",
            "plm_ssh_agent",
            "odls_base_exec_agent",
            "prte_fork_agent",
            "mca_base_component_path",
            "pmix_mca_base_component_path",
            "prte_mca_base_component_path",
            "mca_base_param_files",
            "mca_base_envar_file_prefix",
            "plm_ssh_args",
            "plm_rsh_agent",
            "plm",
            "prte_prefix",
            "PRTE_LAUNCH_AGENT",
            "prte_xterm",
        ] {
            for flag in ["--prtemca", "--pmixmca", "-mca"] {
                let argv = s(&[flag, name, "/tmp/evil"]);
                let e = check_launch(&argv, &BTreeMap::new())
                    .unwrap_err()
                    .to_string();
                assert!(e.contains(name), "{e}");
            }
            for p in ["PRTE_MCA_", "PMIX_MCA_", "OMPI_MCA_"] {
                let key = format!("{p}{name}");
                let e = check_launch(&[], &env(&[(&key, "/tmp/evil")]))
                    .unwrap_err()
                    .to_string();
                assert!(e.contains(&key), "{e}");
            }
        }
        let e = check_launch(&s(&["--prefix", "/tmp/evil"]), &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("--prefix"), "{e}");
        let e = check_launch(&s(&["--prefix=/tmp/evil"]), &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("--prefix"), "{e}");
    }

    #[test]
    fn only_mca_variables_are_admitted() {
        for key in [
            "PRTE_PKGLIBDIR",
            "PMIX_INSTALL_PREFIX",
            "PRTE_PREFIX",
            "OMPI_FOO",
        ] {
            let e = check_launch(&[], &env(&[(key, "/x")]))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains("PRTE_MCA_*"), "{e}");
        }
        let e = check_launch(&[], &env(&[("PRTE_PKGLIBDIR", "/x")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("loads code"), "{e}");
    }

    #[test]
    fn dvm_uri_only_on_the_launchers_address() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let uri = "prte-x@0.0;tcp4://10.0.0.5:7120";
        assert_eq!(check_dvm_uri_host(uri, ip("10.0.0.5")), Ok(()));
        assert_eq!(check_dvm_uri_host(uri, ip("::ffff:10.0.0.5")), Ok(()));
        let e = check_dvm_uri_host(uri, ip("10.0.0.6"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("10.0.0.5") && e.contains("10.0.0.6"), "{e}");
    }

    /// The value of a parameter is not taken for a name (`--prtemca x plm` is fine).
    #[test]
    fn values_are_not_names() {
        let argv = s(&["--prtemca", "ess", "plm", "--prtemca", "btl", "prefix"]);
        assert_eq!(check_launch(&argv, &BTreeMap::new()), Ok(()));
        let e = check_launch(&s(&["--prtemca"]), &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("without a parameter name"), "{e}");
    }
}
