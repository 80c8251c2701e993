//! The checks a launch request passes before the agent looks at it further: its environment
//! names, its arguments, and the DVM URI it may carry.

/// Why a launch request's arguments or environment are refused; the message names the item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchRefusal {
    #[error(
        "environment variable `{}` is not allowed: launch requests may only set variables \
         matching ^(PRTE|PMIX|OMPI)_[A-Za-z0-9_]*$",
        key.escape_debug()
    )]
    EnvName { key: String },
    #[error(
        "argv[0] `{}` looks like an executable: `argv` holds only the arguments after the \
         executable; the agent always runs its configured prted",
        arg.escape_debug()
    )]
    Executable { arg: String },
    #[error("argv[{index}] contains a NUL byte")]
    NulInArgument { index: usize },
    #[error("the value of environment variable `{key}` contains a NUL byte")]
    NulInValue { key: String },
}

/// Checks an environment variable name a launch request may set.
pub(crate) fn validate_env_key(key: &str) -> Result<(), LaunchRefusal> {
    let rest = ["PRTE_", "PMIX_", "OMPI_"]
        .iter()
        .find_map(|p| key.strip_prefix(p));
    match rest {
        Some(rest) if rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => Ok(()),
        _ => Err(LaunchRefusal::EnvName { key: key.into() }),
    }
}

/// Checks a launch request's arguments and environment; the error names the offending item.
pub fn validate_launch<'a>(
    argv: &[String],
    env: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), LaunchRefusal> {
    if let Some(first) = argv.first() {
        let base = first.rsplit('/').next().unwrap_or(first);
        if !first.starts_with('-') && (first.contains('/') || base == "prted") {
            return Err(LaunchRefusal::Executable { arg: first.clone() });
        }
    }
    if let Some(index) = argv.iter().position(|a| a.contains('\0')) {
        return Err(LaunchRefusal::NulInArgument { index });
    }
    for (key, value) in env {
        validate_env_key(key)?;
        if value.contains('\0') {
            return Err(LaunchRefusal::NulInValue { key: key.clone() });
        }
    }
    Ok(())
}

/// A DVM URI that is not of the form prte writes; the message says what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid dvm_uri {uri:?}: {why}; expected <nspace>.<rank>;tcp4://<ipv4>:<port> (what prte \
     --report-uri writes)"
)]
pub struct InvalidDvmUri {
    /// The URI (its first 120 characters).
    pub uri: String,
    /// What is wrong with it.
    pub why: String,
}

/// Longest DVM URI accepted in a launch request.
pub(crate) const MAX_DVM_URI_LEN: usize = 1024;

/// Checks a DVM URI of the form `<nspace>.<rank>;tcp4://<ipv4>:<port>` (what prte's
/// `--report-uri` writes, e.g. `prte-pod-0-77@0.0;tcp4://10.0.0.5:7120`). The namespace is
/// printable ASCII without whitespace or `;`, the rank a decimal number, the address a dotted
/// IPv4 address and the port 1..=65535. Anything else is refused with the reason.
pub fn validate_dvm_uri(uri: &str) -> Result<(), InvalidDvmUri> {
    let bad = |why: &str| {
        Err(InvalidDvmUri {
            uri: uri.chars().take(120).collect(),
            why: why.to_owned(),
        })
    };
    if uri.len() > MAX_DVM_URI_LEN {
        return bad(&format!("longer than {MAX_DVM_URI_LEN} bytes"));
    }
    let Some((proc_part, addr_part)) = uri.split_once(';') else {
        return bad("no `;` between the process name and the address");
    };
    let Some((nspace, rank)) = proc_part.rsplit_once('.') else {
        return bad("the process name has no `.<rank>`");
    };
    if nspace.is_empty()
        || !nspace
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b';' && b != b'\\')
    {
        return bad("the namespace must be non-empty printable ASCII without spaces, `;` or `\\`");
    }
    if rank.is_empty() || !rank.bytes().all(|b| b.is_ascii_digit()) || rank.parse::<u32>().is_err()
    {
        return bad("the rank is not a decimal number");
    }
    let Some(hostport) = addr_part.strip_prefix("tcp4://") else {
        return bad("the address does not start with tcp4://");
    };
    let Some((host, port)) = hostport.rsplit_once(':') else {
        return bad("the address has no :<port>");
    };
    if host.parse::<std::net::Ipv4Addr>().is_err() {
        return bad("the host is not an IPv4 address");
    }
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return bad("the port is not a number");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => bad("the port is not in 1..=65535"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn env_keys_and_argv_are_validated() {
        assert!(validate_env_key("PRTE_MCA_x").is_ok());
        assert!(validate_env_key("PMIX_").is_ok());
        assert!(validate_env_key("OMPI_COMM_WORLD_SIZE9").is_ok());
        for bad in [
            "LD_PRELOAD",
            "PATH",
            "PRTE",
            "prte_x",
            "PRTE_A-B",
            "PRTE_A B",
            "XPRTE_A",
            "PRTE_é",
        ] {
            let e = validate_env_key(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
        let env: BTreeMap<String, String> = [("PRTE_X".to_string(), "a\0b".to_string())].into();
        assert!(validate_launch(&[], &env)
            .unwrap_err()
            .to_string()
            .contains("PRTE_X"));
        let none = BTreeMap::new();
        assert!(validate_launch(&["/bin/sh".into()], &none).is_err());
        assert!(validate_launch(&["prted".into()], &none).is_err());
        assert!(validate_launch(&["--prtemca".into(), "/x/y".into()], &none).is_ok());
        assert!(validate_launch(&["--a".into(), "b\0".into()], &none)
            .unwrap_err()
            .to_string()
            .contains("argv[1]"));
    }

    #[test]
    fn dvm_uris_are_checked() {
        for ok in [
            "prte-pod-0-77@0.0;tcp4://10.0.0.5:7120",
            "ns.0;tcp4://127.0.0.1:1",
            "a.b.c.12;tcp4://192.168.1.200:65535",
        ] {
            assert_eq!(validate_dvm_uri(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("", "`;`"),
            ("ns.0", "`;`"),
            ("ns;tcp4://10.0.0.1:7120", "rank"),
            ("ns.x;tcp4://10.0.0.1:7120", "rank"),
            (".0;tcp4://10.0.0.1:7120", "namespace"),
            ("n s.0;tcp4://10.0.0.1:7120", "namespace"),
            ("ns.0;tcp6://[::1]:7120", "tcp4://"),
            ("ns.0;tcp4://10.0.0.1", "port"),
            ("ns.0;tcp4://host:7120", "IPv4"),
            ("ns.0;tcp4://10.0.0.1:0", "1..=65535"),
            ("ns.0;tcp4://10.0.0.1:70000", "1..=65535"),
            ("ns.0;tcp4://10.0.0.1:7120;tcp4://10.0.0.2:7120", "IPv4"),
            ("ns.0;tcp4://10.0.0.1:7120\n", "port"),
        ] {
            let e = validate_dvm_uri(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("expected"), "{bad:?}: {e}");
        }
        assert!(validate_dvm_uri(&format!("{}.0;tcp4://1.2.3.4:5", "n".repeat(2000))).is_err());
    }
}
