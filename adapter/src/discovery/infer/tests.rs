use super::*;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

fn owned(name: &str, kind: &str, owner: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.owner_references = Some(vec![OwnerReference {
        kind: kind.into(),
        name: owner.into(),
        controller: Some(true),
        api_version: "batch/v1".into(),
        uid: "u".into(),
        ..Default::default()
    }]);
    p
}

#[test]
fn self_identity_precedence() {
    let r = SelfIdentity::resolve(Some("cfg"), Some("env"), Some("host")).unwrap();
    assert_eq!((r.name.as_str(), r.source), ("cfg", SelfNameSource::Config));
    let r = SelfIdentity::resolve(Some(" "), Some("env"), Some("host")).unwrap();
    assert_eq!(
        (r.name.as_str(), r.source),
        ("env", SelfNameSource::PodNameEnv)
    );
    let r = SelfIdentity::resolve(None, None, Some("host")).unwrap();
    assert_eq!(
        (r.name.as_str(), r.source),
        ("host", SelfNameSource::HostnameEnv)
    );
    let r = SelfIdentity::resolve(None, None, None).unwrap();
    assert_eq!(r.source, SelfNameSource::Gethostname);
}

#[test]
fn hostname_identity_matches_spec_hostname() {
    let mut p = Pod::default();
    p.metadata.name = Some("job-0-x7k2p".into());
    p.spec = Some(PodSpec {
        hostname: Some("job-0".into()),
        ..Default::default()
    });
    let by_host = SelfIdentity {
        name: "job-0".into(),
        source: SelfNameSource::HostnameEnv,
    };
    let by_name = SelfIdentity {
        name: "job-0".into(),
        source: SelfNameSource::PodNameEnv,
    };
    assert!(by_host.matches(&p));
    assert!(!by_name.matches(&p));
    assert!(SelfIdentity {
        name: "job-0-x7k2p".into(),
        source: SelfNameSource::PodNameEnv
    }
    .matches(&p));
}

#[test]
fn label_selector_rendering() {
    let sel = LabelSelector {
        match_labels: Some([("app".to_string(), "mpi".to_string())].into()),
        match_expressions: Some(vec![
            LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["a".into(), "b".into()]),
            },
            LabelSelectorRequirement {
                key: "x".into(),
                operator: "DoesNotExist".into(),
                values: None,
            },
        ]),
    };
    let s = label_selector_string(&sel).unwrap();
    assert_eq!(s, "app=mpi,tier in (a,b),!x");
    assert!(super::super::selector::parse_selector(&s).is_ok());
    assert_eq!(label_selector_string(&LabelSelector::default()), None);
}

#[test]
fn workload_detection() {
    let r = |p: &Pod| PodRecord::from(p);
    let a = r(&owned("a", "Job", "j1"));
    let b = r(&owned("b", "Job", "j1"));
    let whole = |kind, name: &str| Some(Owner::whole(kind, name));
    assert_eq!(workload_of(&[&a, &b]), whole(WorkloadKind::Job, "j1"));
    let c = r(&owned("c", "Job", "j2"));
    assert_eq!(workload_of(&[&a, &c]), None);
    let s = r(&owned("s-0", "StatefulSet", "s"));
    assert_eq!(workload_of(&[&s]), whole(WorkloadKind::StatefulSet, "s"));
    let mut j1 = r(&owned("x", "Job", "js-w-0"));
    let mut j2 = r(&owned("y", "Job", "js-w-1"));
    for p in [&mut j1, &mut j2] {
        p.metadata.labels = Some(
            [
                (JOBSET_NAME_LABEL.to_string(), "js".to_string()),
                (JOBSET_REPLICATED_JOB_LABEL.to_string(), "w".to_string()),
            ]
            .into(),
        );
    }
    assert_eq!(
        workload_of(&[&j1, &j2]),
        Some(Owner {
            workload: WorkloadRef::new(WorkloadKind::JobSet, "js"),
            replicated_jobs: Some(["w".to_string()].into())
        })
    );
    assert_eq!(workload_of(&[]), None);
}

#[test]
fn a_statefulsets_template_labels_leave_out_what_is_set_per_pod_or_revision() {
    let labels: BTreeMap<String, String> = [
        ("app", "ranks"),
        ("tier", "mpi"),
        ("apps.kubernetes.io/pod-index", "1"),
        ("statefulset.kubernetes.io/pod-name", "ranks-1"),
        ("controller-revision-hash", "ranks-7d9"),
        ("pod-template-hash", "5f6"),
        ("bad key!", "x"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(
        template_selector(WorkloadKind::StatefulSet, &labels).as_deref(),
        Some("app=ranks,tier=mpi")
    );
    let per_pod_only: BTreeMap<String, String> = [(
        "statefulset.kubernetes.io/pod-name".to_string(),
        "s-0".to_string(),
    )]
    .into();
    assert_eq!(
        template_selector(WorkloadKind::StatefulSet, &per_pod_only),
        None
    );
}
