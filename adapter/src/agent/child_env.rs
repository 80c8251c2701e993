//! The environment of the processes the agent starts (prted, and the programs of `exec`
//! requests): a minimal base, not the agent's whole environment, as the agent's documentation
//! ([`super`]) lists it. The request's own variables are added by the caller, last.

use std::ffi::OsString;

use super::checked_config::AgentConfig;

/// `PATH` for prted when the agent has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Agent variables passed to prted when set (besides PATH, HOME, HOSTNAME, TMPDIR).
const BASE_PASSTHROUGH: &[&str] = &["LANG", "LC_ALL", "TZ", "USER", "LD_LIBRARY_PATH"];

/// prted's base environment (see the agent's documentation); `get` reads one of the agent's
/// variables, `all` lists them all.
pub(crate) fn base_env(
    config: &AgentConfig,
    get: impl Fn(&str) -> Option<OsString>,
    all: impl Iterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    let mut put = |k: &str, v: OsString| env.push((k.into(), v));
    put(
        "PATH",
        get("PATH")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| DEFAULT_PATH.into()),
    );
    put(
        "HOME",
        get("HOME")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "/".into()),
    );
    let hostname = get("HOSTNAME")
        .filter(|v| !v.is_empty())
        .or_else(|| nix::unistd::gethostname().ok());
    if let Some(h) = hostname {
        put("HOSTNAME", h);
    }
    for name in BASE_PASSTHROUGH
        .iter()
        .copied()
        .chain(config.pass_env.iter().map(String::as_str))
    {
        if let Some(v) = get(name) {
            put(name, v);
        }
    }
    for (k, v) in all {
        if let Some(key) = k.to_str() {
            if ["PRTE_", "PMIX_", "OMPI_"]
                .iter()
                .any(|p| key.starts_with(p))
            {
                env.push((k, v));
            }
        }
    }
    env.push(("TMPDIR".into(), config.tmpdir.clone().into_os_string()));
    // What a program told by a signal has after it (see `super::preempt`).
    if let Some(hold) =
        super::preempt::Preemption::hold_for(config.preempt_grace, config.kill_grace)
    {
        env.push((PREEMPT_SECONDS.into(), hold.as_secs().to_string().into()));
    }
    env
}

/// The seconds the job's processes have after a preemption notice, in prted's environment
/// (and so its ranks') when the agent runs with `--preempt-grace`.
pub const PREEMPT_SECONDS: &str = "PRRTE_K8S_PREEMPT_SECONDS";

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn base_env_is_minimal_and_documented() {
        let d = tempfile::tempdir().unwrap();
        let config = AgentConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            health_listen: None,
            metrics_listen: None,
            prted: "/bin/true".into(),
            secret: None,
            secret_file: "/nonexistent".into(),
            tmpdir: d.path().to_owned(),
            kill_grace: Duration::from_secs(1),
            preempt_grace: Duration::ZERO,
            max_frame: 4096,
            pass_env: vec!["EXTRA".into()],
            dvm_uri_file: d.path().join("dvm.uri"),
            head: None,
            batch: None,
            cgroup: false,
            limits: Default::default(),
            heartbeat_timeout: None,
            mpi: None,
        };
        let agent_env: Vec<(OsString, OsString)> = [
            ("PATH", "/opt/bin"),
            ("SECRET_TOKEN", "x"),
            ("PRRTE_K8S_SECRET_FILE", "/s"),
            ("PRTE_MCA_a", "1"),
            ("OMPI_MCA_b", "2"),
            ("EXTRA", "e"),
            ("LANG", "C.UTF-8"),
            ("HOSTNAME", "pod-0"),
        ]
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
        let lookup = |k: &str| {
            agent_env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        let env = base_env(&config, lookup, agent_env.clone().into_iter());
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_str().unwrap().to_owned())
        };
        assert_eq!(get("PATH").as_deref(), Some("/opt/bin"));
        assert_eq!(get("HOME").as_deref(), Some("/"));
        assert_eq!(get("HOSTNAME").as_deref(), Some("pod-0"));
        assert_eq!(get("LANG").as_deref(), Some("C.UTF-8"));
        assert_eq!(get("EXTRA").as_deref(), Some("e"));
        assert_eq!(get("PRTE_MCA_a").as_deref(), Some("1"));
        assert_eq!(get("OMPI_MCA_b").as_deref(), Some("2"));
        assert_eq!(get("TMPDIR").as_deref(), Some(d.path().to_str().unwrap()));
        assert_eq!(get("SECRET_TOKEN"), None);
        assert_eq!(get("PRRTE_K8S_SECRET_FILE"), None);
    }
}
