use super::*;
use std::collections::BTreeSet;
use std::time::Duration;

/// The text of `doc`, a file relative to the repository's root.
fn read_doc(doc: &str) -> String {
    let path = format!("{}/../{doc}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The block of `doc` from its line `begin` to its line `end`, both included; `what` names it in
/// the failure, which shows `rendered`, the block that belongs there.
fn doc_block(doc: &str, what: &str, begin: &str, end: &str, rendered: &str) -> String {
    let text = read_doc(doc);
    let start = text.find(begin).unwrap_or_else(|| {
        panic!("{doc} lacks the {what}; put this where it belongs:\n{rendered}")
    });
    let stop = text[start..]
        .find(end)
        .map(|i| start + i + end.len() + 1)
        .unwrap_or_else(|| panic!("{doc}: the {what} has no end line"));
    text[start..stop].to_owned()
}

#[test]
fn the_docs_mca_table_is_the_registry() {
    let rendered = readme::mca_table();
    let what = "MCA parameter table";
    let block = doc_block(readme::MCA_DOC, what, readme::BEGIN, readme::END, &rendered);
    assert!(
        block == rendered,
        "{}'s {what} differs from adapter/src/settings/mca.rs; replace it with:\n{rendered}",
        readme::MCA_DOC
    );
}

#[test]
fn the_docs_agent_tables_are_the_registry() {
    for table in readme::AGENT_TABLES {
        let rendered = table.render();
        let (begin, end) = (table.begin(), table.end());
        let block = doc_block(table.doc, table.what, &begin, &end, &rendered);
        assert!(
            block == rendered,
            "{}'s {} differ from adapter/src/settings/agent.rs; replace them with:\n{rendered}",
            table.doc,
            table.what
        );
    }
}

#[test]
fn every_agent_option_is_in_one_table() {
    for s in agent::ALL {
        let n = readme::AGENT_TABLES
            .iter()
            .filter(|t| t.settings.contains(s))
            .count();
        assert_eq!(n, 1, "{} is in {n} of the docs' agent tables", s.name());
    }
    let listed: usize = readme::AGENT_TABLES.iter().map(|t| t.settings.len()).sum();
    assert_eq!(listed, agent::ALL.len(), "an option is listed twice");
}

/// Each component's table lists its settings, of its framework, each in storage of the C type
/// its kind needs, and the snapshot's defaults are the registry's.
#[test]
fn mca_tables_are_the_registry_with_matching_types_and_defaults() {
    fn check<P: McaParams + std::fmt::Debug>(list: &[&Setting], framework: &str) {
        let settings: Vec<&Setting> = P::PARAMS.iter().map(|p| p.setting).collect();
        assert_eq!(settings, list);
        let mut defaults = P::default();
        for p in P::PARAMS {
            let s = p.setting;
            assert_eq!(s.mca.map(|m| m.framework), Some(framework), "{}", s.name());
            match (&p.field, s.kind) {
                (Field::Bool(f), Kind::Bool) => {
                    assert_eq!(*f(&mut defaults), s.default == "true", "{}", s.name())
                }
                (Field::Int(f), Kind::Int { .. } | Kind::Port | Kind::Seconds) => {
                    assert_eq!(
                        *f(&mut defaults),
                        s.mca_int(s.default).unwrap(),
                        "{}",
                        s.name()
                    )
                }
                (
                    Field::Str(f),
                    Kind::Text | Kind::Path | Kind::Choice(_) | Kind::ChoiceOrCount { .. },
                ) => assert_eq!(
                    f(&mut defaults).as_deref(),
                    Some(s.default).filter(|d| !d.is_empty()),
                    "{}",
                    s.name()
                ),
                _ => panic!("{}: storage type and kind differ", s.name()),
            }
        }
    }
    check::<mca::RasParams>(mca::RAS, "ras");
    check::<mca::PlmParams>(mca::PLM, "plm");
}

#[test]
fn every_name_flag_and_variable_is_unique_per_program() {
    let mut mca = BTreeSet::new();
    for s in mca::RAS.iter().chain(mca::PLM.iter()) {
        let m = s.mca.expect("an MCA table entry has an MCA name");
        assert!(mca.insert(m.full), "{} twice", m.full);
        assert_eq!(m.full, format!("{}_k8s_{}", m.framework, m.name));
        assert_eq!(m.env, format!("PRTE_MCA_{}", m.full));
        assert!(!s.help.is_empty(), "{} has no help", m.full);
    }
    let mut flags = BTreeSet::new();
    let mut vars = BTreeSet::new();
    for s in agent::ALL {
        assert!(!s.help.is_empty(), "{} has no help", s.name());
        assert!(
            s.flag.is_empty() || flags.insert(s.flag),
            "--{} twice",
            s.flag
        );
        for v in s.env_names() {
            assert!(vars.insert(v), "{v} twice");
        }
    }
}

#[test]
fn every_default_is_a_valid_value() {
    for s in all() {
        if !s.default.is_empty() {
            s.parse(s.default)
                .unwrap_or_else(|e| panic!("{}: default {:?}: {e}", s.name(), s.default));
        }
    }
}

#[test]
fn errors_name_the_setting_the_value_and_what_it_takes() {
    let e = mca::TIMEOUT.seconds("0").unwrap_err().to_string();
    assert!(
        e.contains("ras_k8s_timeout")
            && e.contains("\"0\"")
            && e.contains("positive number of seconds")
            && e.contains("--prtemca ras_k8s_timeout SECS")
            && e.contains("PRTE_MCA_ras_k8s_timeout=SECS")
            && e.contains("--timeout SECS"),
        "{e}"
    );
    let e = mca::AGENT_PORT.port("70000").unwrap_err().to_string();
    assert!(
        e.contains("plm_k8s_agent_port") && e.contains("1-65535"),
        "{e}"
    );
    assert!(mca::AGENT_PORT.port("0").is_err());
    assert_eq!(mca::AGENT_PORT.port(" 9000 ").unwrap(), 9000);
    let e = mca::SLOTS.parse("cores").unwrap_err().to_string();
    assert!(
        e.contains("one of auto, annotation, gpu, cpu, one, or a whole number from 1 to 1048576"),
        "{e}"
    );
    assert_eq!(mca::SLOTS.parse(" 3 ").unwrap(), Value::Int(3));
    assert_eq!(mca::SLOTS.parse("GPU").unwrap(), Value::Text("gpu".into()));
    for bad in ["0", "1048577", "-2", "2.5", ""] {
        let e = mca::SLOTS.parse(bad).unwrap_err().to_string();
        assert!(
            e.contains("ras_k8s_slots") && e.contains(&format!("{bad:?}")),
            "{e}"
        );
    }
    let problems =
        |v: &str| mca::env_problems(&[("PRTE_MCA_ras_k8s_slots".to_string(), v.to_string())]);
    assert!(problems("4").is_empty() && problems("cpus").is_empty());
    let p = problems("0");
    assert!(
        p.len() == 1 && p[0].contains("$PRTE_MCA_ras_k8s_slots"),
        "{p:?}"
    );
    assert_eq!(
        mca::TIMEOUT.seconds("1.5").unwrap(),
        Duration::from_millis(1500)
    );
    assert!(mca::TIMEOUT.seconds("inf").is_err() && mca::TIMEOUT.seconds("-1").is_err());
    assert!(mca::TIMEOUT.seconds("31536001").is_err());
    assert!(mca::EXPECTED_PODS.int("-1").is_err());
    assert_eq!(mca::EXPECTED_PODS.int("0").unwrap(), 0);
}

#[test]
fn the_agent_port_is_one_setting_under_both_names() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    let vars: Vec<_> = agent::PORT.env_names().collect();
    assert_eq!(
        vars,
        ["PRRTE_K8S_AGENT_PORT", "PRTE_MCA_plm_k8s_agent_port"]
    );
    assert_eq!(agent::PORT.default, mca::AGENT_PORT.default);
    for pairs in [
        &[("PRRTE_K8S_AGENT_PORT", "9000")][..],
        &[("PRTE_MCA_plm_k8s_agent_port", "9000")],
        &[
            ("PRRTE_K8S_AGENT_PORT", "9000"),
            ("PRTE_MCA_plm_k8s_agent_port", " 9000"),
        ],
    ] {
        let got = agent::PORT.from_env(&env(pairs), Setting::port).unwrap();
        assert_eq!(got, Some(9000), "{pairs:?}");
    }
    let got = agent::PORT.from_env(&env(&[]), Setting::port).unwrap();
    assert_eq!(got, Some(7117));
    let e = agent::PORT
        .from_env(
            &env(&[
                ("PRRTE_K8S_AGENT_PORT", "9000"),
                ("PRTE_MCA_plm_k8s_agent_port", "9001"),
            ]),
            Setting::port,
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("PRRTE_K8S_AGENT_PORT=\"9000\"")
            && e.contains("PRTE_MCA_plm_k8s_agent_port=\"9001\"")
            && e.contains("disagree"),
        "{e}"
    );
    let e = agent::PORT
        .from_env(&env(&[("PRTE_MCA_plm_k8s_agent_port", "x")]), Setting::port)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("$PRTE_MCA_plm_k8s_agent_port") && e.contains("\"x\""),
        "{e}"
    );
}

#[test]
fn plm_values_are_checked_once() {
    let ok = mca::PlmParams::default().check(&|_| None).unwrap();
    assert_eq!(ok.agent_port, 7117);
    assert_eq!(ok.launch_timeout, Duration::from_secs(60));
    assert_eq!(ok.connect_timeout, Duration::from_secs(10));
    assert_eq!(
        ok.secret_file.as_deref(),
        Some(std::path::Path::new("/etc/prrte-k8s/secret/key"))
    );
    for bad in [
        mca::PlmParams {
            agent_port: 0,
            ..Default::default()
        },
        mca::PlmParams {
            agent_port: 65536,
            ..Default::default()
        },
        mca::PlmParams {
            launch_timeout: 0,
            ..Default::default()
        },
        mca::PlmParams {
            connect_timeout: -1,
            ..Default::default()
        },
    ] {
        assert!(bad.check(&|_| None).is_err(), "{bad:?}");
    }
    let insecure = mca::PlmParams {
        insecure: true,
        ..Default::default()
    };
    assert_eq!(insecure.check(&|_| None).unwrap().secret_file, None);
}

#[test]
fn help_shows_a_documented_default() {
    assert_eq!(mca::TIMEOUT.help_with_default(), mca::TIMEOUT.help);
    assert!(mca::SELF_POD
        .help_with_default()
        .ends_with("[default: $POD_NAME, else the hostname]"));
    assert_eq!(mca::TIMEOUT.default_u64(), 300);
}

#[test]
fn preempt_signal_names() {
    use super::mca::preempt_signal;
    assert_eq!(preempt_signal("none").unwrap(), None);
    assert_eq!(preempt_signal("sigusr1").unwrap(), Some(10));
    assert_eq!(preempt_signal(" SIGUSR2 ").unwrap(), Some(12));
    let e = preempt_signal("SIGKILL").unwrap_err().to_string();
    assert!(
        e.contains("plm_k8s_preempt_signal") && e.contains("SIGUSR1"),
        "{e}"
    );
    let e = preempt_signal("USR1").unwrap_err().to_string();
    assert!(e.contains("one of none, SIGUSR1"), "{e}");
}

#[test]
fn each_table_is_in_its_doc_only() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut docs = vec!["README.md".to_owned(), "prrte-config/README.md".to_owned()];
    for e in std::fs::read_dir(format!("{root}/docs")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    assert!(docs.iter().any(|d| d == readme::MCA_DOC), "{docs:?}");
    let tables = readme::AGENT_TABLES
        .iter()
        .map(|t| (t.what.to_owned(), t.doc, t.begin()))
        .chain([(
            "MCA parameter table".to_owned(),
            readme::MCA_DOC,
            readme::BEGIN.to_owned(),
        )]);
    for (what, doc, begin) in tables {
        let holders: Vec<&String> = docs
            .iter()
            .filter(|d| read_doc(d).contains(&begin))
            .collect();
        assert_eq!(
            holders,
            [doc],
            "the {what} belongs in {doc} alone (a copy elsewhere would go stale)"
        );
    }
}
