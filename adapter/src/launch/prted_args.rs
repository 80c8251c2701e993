//! prted's command line as PRRTE builds it, adapted for a launch through the pod's agent.
//!
//! PRRTE's helpers produce `[prted, --prtemca, key, value, ...]` with a placeholder where each
//! daemon's vpid goes. The agent runs its own configured prted, so the executable is dropped;
//! our own selections (`ras`, `ras_k8s_*`, `plm_k8s_*`) are removed so prted does not go looking
//! for components it has no use for, and so is every MCA parameter the agents would refuse
//! (the parameters of the components' PRRTE profile, [`crate::profile::COMPONENTS`]: PRRTE
//! forwards all of prte's command-line and environment MCA settings; those the list leaves out
//! concern prte itself, and every pod's prted has the pod template's environment anyway).

use crate::profile::COMPONENTS;
use crate::protocol::params::{forwardable, Origin, Project};

use super::error::PrtedArgsError;

/// MCA flags that take `key value`.
const MCA_FLAGS: [&str; 4] = ["--prtemca", "-prtemca", "--pmixmca", "-pmixmca"];

fn ours(key: &str) -> bool {
    key == "ras" || key == "plm" || key.starts_with("ras_k8s_") || key.starts_with("plm_k8s_")
}

/// Whether the agents take `--<flag> key value` from the k8s PLM (values they would refuse
/// are left for them to refuse, naming the problem).
fn agents_take(flag: &str, key: &str) -> bool {
    let project = if flag.ends_with("pmixmca") {
        Project::Pmix
    } else {
        Project::Prte
    };
    COMPONENTS.launch_param(project, key).is_some()
}

/// The argument template for the agents and the index of the vpid in it.
///
/// `argv` is the full command (executable first) and `vpid_index` the index PRRTE reported for
/// the vpid placeholder in it. Returns `None` if the index does not fall inside the arguments.
pub(crate) fn agent_template(argv: &[String], vpid_index: usize) -> Option<(Vec<String>, usize)> {
    if argv.is_empty() || vpid_index == 0 || vpid_index >= argv.len() {
        return None;
    }
    let mut out = Vec::with_capacity(argv.len());
    let mut new_index = None;
    let mut i = 1;
    while i < argv.len() {
        let a = &argv[i];
        if MCA_FLAGS.contains(&a.as_str())
            && i + 2 < argv.len()
            && (ours(&argv[i + 1]) || !agents_take(a, &argv[i + 1]))
            && vpid_index != i + 2
        {
            i += 3;
            continue;
        }
        if i == vpid_index {
            new_index = Some(out.len());
        }
        out.push(a.clone());
        i += 1;
    }
    new_index.map(|n| (out, n))
}

/// The template with one daemon's vpid filled in.
pub(crate) fn for_vpid(template: &[String], index: usize, vpid: u32) -> Vec<String> {
    let mut v = template.to_vec();
    if let Some(slot) = v.get_mut(index) {
        *slot = vpid.to_string();
    }
    v
}

/// prted's arguments for the agents, with the slot where each daemon's vpid goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrtedTemplate {
    args: Vec<String>,
    vpid_slot: usize,
}

impl PrtedTemplate {
    /// From the full command line PRRTE's helpers built (executable first) and the index of the
    /// vpid placeholder in it (see `agent_template`).
    pub fn from_prrte(argv: &[String], vpid_index: usize) -> Result<PrtedTemplate, PrtedArgsError> {
        agent_template(argv, vpid_index)
            .map(|(args, vpid_slot)| PrtedTemplate { args, vpid_slot })
            .ok_or(PrtedArgsError::NoVpidSlot)
    }

    /// With `--prtemca key value` added at the end, unless the arguments already set `key`
    /// (a value from the site, which prte passed on, is kept).
    pub fn with_default(mut self, key: &str, value: &str) -> PrtedTemplate {
        let set = self
            .args
            .windows(2)
            .any(|w| w[0].trim_start_matches('-') == "prtemca" && w[1] == key);
        if !set {
            self.args
                .extend(["--prtemca".to_string(), key.to_string(), value.to_string()]);
        }
        self
    }

    /// The arguments of the daemon `vpid`.
    pub(crate) fn for_vpid(&self, vpid: u32) -> Vec<String> {
        for_vpid(&self.args, self.vpid_slot, vpid)
    }
}

/// Environment forwarded with a launch: the MCA settings of prte's own environment that the
/// agents take there, less our own selections. (PRRTE also passes them on the command line.)
pub(crate) fn forwarded_env(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vars
        .filter(|(k, v)| {
            [Project::Prte, Project::Pmix, Project::Ompi]
                .into_iter()
                .find_map(|p| Some((p, k.strip_prefix(p.env_prefix())?)))
                .is_some_and(|(p, key)| {
                    !ours(key)
                        && forwardable(&COMPONENTS.launch_lists(), p, key, v, Origin::Launch, true)
                })
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn drops_executable_and_our_selections_and_tracks_vpid() {
        let argv = s(&[
            "prted",
            "--prtemca",
            "ess",
            "env",
            "--prtemca",
            "ras",
            "k8s",
            "--prtemca",
            "ess_base_vpid",
            "<template>",
            "--prtemca",
            "ras_k8s_selector",
            "app=x",
            "--prtemca",
            "prte_hnp_uri",
            "uri",
            "--pmixmca",
            "ptl_base_if_include",
            "eth0",
        ]);
        let (t, idx) = agent_template(&argv, 9).unwrap();
        assert_eq!(
            t,
            s(&[
                "--prtemca",
                "ess",
                "env",
                "--prtemca",
                "ess_base_vpid",
                "<template>",
                "--prtemca",
                "prte_hnp_uri",
                "uri",
                "--pmixmca",
                "ptl_base_if_include",
                "eth0"
            ])
        );
        assert_eq!(t[idx], "<template>");
        let one = for_vpid(&t, idx, 7);
        assert_eq!(one[idx], "7");
        assert_eq!(one.len(), t.len());
    }

    #[test]
    fn template_fills_each_vpid_and_names_a_missing_slot() {
        let argv = s(&["prted", "--prtemca", "ess_base_vpid", "<template>"]);
        let t = PrtedTemplate::from_prrte(&argv, 3).unwrap();
        assert_eq!(t.for_vpid(5), s(&["--prtemca", "ess_base_vpid", "5"]));
        assert_eq!(t.for_vpid(12), s(&["--prtemca", "ess_base_vpid", "12"]));
        let e = PrtedTemplate::from_prrte(&argv, 0).unwrap_err().to_string();
        assert!(e.contains("no vpid slot"), "{e}");
    }

    #[test]
    fn a_default_is_added_unless_the_site_set_the_parameter() {
        let argv = s(&["prted", "--prtemca", "ess_base_vpid", "<template>"]);
        let t = PrtedTemplate::from_prrte(&argv, 3)
            .unwrap()
            .with_default("odls_base_max_threads", "0");
        assert_eq!(
            t.for_vpid(2),
            s(&[
                "--prtemca",
                "ess_base_vpid",
                "2",
                "--prtemca",
                "odls_base_max_threads",
                "0"
            ])
        );
        // Idempotent, and a value prte passed on (the site's) is kept.
        assert_eq!(t.clone().with_default("odls_base_max_threads", "0"), t);
        let argv = s(&[
            "prted",
            "--prtemca",
            "odls_base_max_threads",
            "4",
            "--prtemca",
            "ess_base_vpid",
            "<template>",
        ]);
        let t = PrtedTemplate::from_prrte(&argv, 6).unwrap();
        assert_eq!(t.clone().with_default("odls_base_max_threads", "0"), t);
        assert_eq!(t.for_vpid(1)[2], "4");
    }

    #[test]
    fn rejects_bad_index() {
        let argv = s(&["prted", "--prtemca", "ess_base_vpid", "<template>"]);
        assert!(agent_template(&argv, 0).is_none());
        assert!(agent_template(&argv, 4).is_none());
        assert_eq!(agent_template(&argv, 3).unwrap().1, 2);
    }

    #[test]
    fn env_keeps_mca_settings_only() {
        let env = forwarded_env(
            vec![
                (
                    "PRTE_MCA_prte_if_include".to_string(),
                    "10.0.0.0/24".to_string(),
                ),
                ("PRTE_MCA_ras".to_string(), "k8s".to_string()),
                ("PRTE_MCA_plm_k8s_secret_file".to_string(), "/s".to_string()),
                (
                    "PMIX_MCA_ptl_base_if_include".to_string(),
                    "eth0".to_string(),
                ),
                ("HOME".to_string(), "/root".to_string()),
                ("PRTE_PREFIX".to_string(), "/opt".to_string()),
            ]
            .into_iter(),
        );
        assert_eq!(
            env,
            vec![
                (
                    "PMIX_MCA_ptl_base_if_include".to_string(),
                    "eth0".to_string()
                ),
                (
                    "PRTE_MCA_prte_if_include".to_string(),
                    "10.0.0.0/24".to_string()
                ),
            ]
        );
    }
}
