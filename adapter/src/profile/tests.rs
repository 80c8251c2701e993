use super::*;
use crate::protocol::params::{forwardable, lookup, Origin, Project};

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn a_version_finds_the_profile_of_its_line() {
    for (version, line) in [
        ("3.0.8", Some("3.0")),
        ("3.0.11", Some("3.0")),
        ("5.0.0", Some("5.0")),
        ("5.0.1", Some("5.0")),
        ("4.1.0", None),
        ("3.1.0", None),
        ("5", None),
        ("", None),
    ] {
        assert_eq!(Profile::of(version).map(|p| p.line), line, "{version}");
    }
    assert_eq!(Profile::with_components(built::PRRTE), Some(COMPONENTS));
    for other in ["3.0.11", "5.0.0", "3.0"] {
        assert_eq!(Profile::with_components(other), None, "{other}");
    }
    assert_eq!(Profile::of(built::PRRTE), Some(COMPONENTS));
}

#[test]
fn only_the_components_line_has_a_k8s_plm_grammar_and_states() {
    for p in PROFILES {
        assert_eq!(
            p.prted_launch.is_some(),
            p.components.is_some(),
            "{}",
            p.line
        );
        assert!(std::ptr::eq(p.prted_exec.params, p.params), "{}", p.line);
    }
    let c = COMPONENTS.components.unwrap();
    assert_eq!(c.prrte, built::PRRTE);
    assert!(built::PMIX.starts_with(&format!("{}.", c.pmix)));
    assert_eq!(c.patch_level, built::PATCH_LEVEL);
    assert_eq!(
        built::default_prefix(),
        format!(
            "/opt/prrte-k8s/prrte-{}-pmix-{}-{}",
            built::PRRTE,
            built::PMIX,
            built::PATCH_LEVEL
        )
    );
}

/// Patches written for the next patch level and not applied yet: applying one changes the
/// prefix's name, so it moves into the profile's list when build-prrte.sh applies it
/// (docs/pmix-allocation-requests.md, "Remaining steps").
const STAGED: &[&str] = &[];

/// The profile's patches are the ones in prrte-config/patches that build-prrte.sh applies (the
/// staged ones aside, which it does not apply yet), and the script builds the profile's release.
#[test]
fn the_patches_are_the_ones_the_build_applies() {
    let c = COMPONENTS.components.unwrap();
    let dir = repo().join("prrte-config/patches");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("prrte-{}-", c.prrte)))
        .collect();
    on_disk.sort();
    let file = |p: &&str| format!("prrte-{}-{p}", c.prrte);
    let named: Vec<String> = c.patches.iter().map(file).collect();
    let staged: Vec<String> = STAGED.iter().map(file).collect();
    let mut expected = [named.clone(), staged.clone()].concat();
    expected.sort();
    assert_eq!(on_disk, expected);
    let script = std::fs::read_to_string(repo().join("prrte-config/build-prrte.sh")).unwrap();
    assert!(
        script.contains(&format!("PRRTE_VERSION={}\n", c.prrte)),
        "build-prrte.sh builds another PRRTE than the profile's {}",
        c.prrte
    );
    for n in &named {
        assert!(
            script.contains(n.as_str()),
            "build-prrte.sh does not apply {n}"
        );
    }
    for n in &staged {
        assert!(
            !script.contains(n.as_str()),
            "build-prrte.sh applies {n}: move it from STAGED into the profile's patches"
        );
    }
}

#[test]
fn names_are_matched_exactly() {
    let l = [COMPONENTS.params];
    assert!(lookup(&l, Project::Prte, "ess_base_vpid").is_some());
    for bad in [
        "ESS_BASE_VPID",
        "ess_base_vpi",
        "\"ess_base_vpid\"",
        "ess_base_vpid ",
        "prte_ess_base_vpid",
        "ess_base_vpid=1",
    ] {
        assert!(lookup(&l, Project::Prte, bad).is_none(), "{bad}");
    }
    assert!(lookup(&l, Project::Pmix, "ess_base_vpid").is_none());
    assert!(lookup(&l, Project::Prte, "ras_base_verbose").is_some());
    assert!(lookup(&l, Project::Pmix, "ptl_base_verbose").is_some());
    for bad in [
        "mca_base_verbose_x",
        "RAS_base_verbose",
        "_base_verbose",
        "a/b_base_verbose",
    ] {
        assert!(lookup(&l, Project::Prte, bad).is_none(), "{bad}");
    }
}

#[test]
fn launch_requests_never_carry_tree_spawn_parameters() {
    let lists = COMPONENTS.launch_lists();
    let fw =
        |n: &str, v: &str, o: Origin, env: bool| forwardable(&lists, Project::Prte, n, v, o, env);
    assert!(fw("plm", "ssh", Origin::Exec, false));
    assert!(!fw("plm", "ssh", Origin::Launch, false));
    assert!(!fw(
        "prte_parent_uri",
        "x.0;tcp://1.2.3.4:5:24",
        Origin::Launch,
        false
    ));
    assert!(fw(
        "oob_tcp_dynamic_ipv4_ports",
        "7121",
        Origin::Launch,
        true
    ));
    assert!(!fw(
        "prte_hnp_uri",
        "x.0;tcp://1.2.3.4:5:24",
        Origin::Launch,
        true
    ));
    assert!(!fw("prte_launch_agent", "/bin/sh", Origin::Exec, false));
    assert!(COMPONENTS.launch_param(Project::Ompi, "btl").is_some());
    assert!(COMPONENTS
        .launch_param(Project::Prte, "plm_ssh_agent")
        .is_none());
}

/// What only one line's launcher sends stays that line's.
#[test]
fn lines_differ_only_where_their_launchers_do() {
    let v5 = Profile::of("5.0.0").unwrap();
    let only_in = |a: &Profile, b: &Profile| -> Vec<&str> {
        a.params
            .iter()
            .filter(|p| lookup(&[b.params], p.project, p.name).is_none())
            .map(|p| p.name)
            .collect()
    };
    assert_eq!(
        only_in(v5, COMPONENTS),
        ["prte_default_hostfile", "prte_dynamic_ipv4_ports"]
    );
    assert!(only_in(COMPONENTS, v5).is_empty());
    assert!(COMPONENTS.features.launch_thread_race);
    assert!(!v5.features.launch_thread_race);
}

/// The version the components are built for is written in one production file: this profile's
/// `built.rs` (test code, comments, shell scripts and documents aside).
#[test]
fn the_components_release_is_written_in_one_production_file() {
    let mut found = Vec::new();
    let mut dirs = vec![repo().join("adapter/src"), repo().join("cabi/src")];
    let mut files = vec![repo().join("cabi/build.rs")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    for f in files {
        // Unit tests: `tests.rs`, and the files of a `tests/` folder beside it.
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if name == "tests.rs" || f.parent().is_some_and(|d| d.ends_with("tests")) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        // Code, not prose: comments may name the release they describe.
        let production = text.split("#[cfg(test)]").next().unwrap_or_default();
        let code = production
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"));
        if code.into_iter().any(|l| l.contains(built::PRRTE)) {
            found.push(f.strip_prefix(repo()).unwrap().display().to_string());
        }
    }
    assert_eq!(found, ["adapter/src/profile/built.rs"]);
}

#[test]
fn a_renamed_parameter_reaches_the_daemons_under_both_names() {
    // The pods set PRRTE 3.0's names; a line that reads another gets both, and its launcher
    // hands every PRTE_MCA_ variable to prted, so both must pass its allowlist.
    for prof in PROFILES {
        for (old, new) in prof.renamed {
            let l = [prof.params];
            assert!(
                lookup(&l, Project::Prte, old).is_some(),
                "{} {old}",
                prof.line
            );
            assert!(
                lookup(&l, Project::Prte, new).is_some(),
                "{} {new}",
                prof.line
            );
            assert_ne!(old, new);
        }
    }
    let v5 = Profile::of("5.0.0").map(|p| p.renamed);
    assert_eq!(
        v5,
        Some(&[("oob_tcp_dynamic_ipv4_ports", "prte_dynamic_ipv4_ports")][..])
    );
    assert_eq!(COMPONENTS.renamed, &[][..]);
}
