use super::*;
use crate::elastic::grow::GrowError;
use crate::workload::WorkloadKind;

fn req(d: Directive) -> Request {
    Request {
        directive: Some(d),
        ..Request::default()
    }
}

fn pool(busy: &[(&str, &str)]) -> Vec<PoolNode> {
    ["el-0", "el-1", "el-2", "el-3"]
        .iter()
        .map(|h| PoolNode {
            hostname: h.to_string(),
            busy_with: busy.iter().find(|b| b.0 == *h).map(|b| b.1.to_string()),
        })
        .collect()
}

fn refused(r: Result<impl std::fmt::Debug, Refusal>) -> (Status, String) {
    let e = r.expect_err("refused");
    (e.status, e.reason)
}

#[test]
fn directives_are_pmix_numbers() {
    let got: Vec<Directive> = (0..=6).map(Directive::from_pmix).collect();
    assert_eq!(
        got,
        [
            Directive::Unknown(0),
            Directive::New,
            Directive::Extend,
            Directive::Release,
            Directive::Reacquire,
            Directive::Cancel,
            Directive::Unknown(6)
        ]
    );
}

#[test]
fn an_extension_is_counted_in_pods() {
    let mut r = req(Directive::Extend);
    r.num_nodes = Some(2);
    assert_eq!(ask(&r, 4), Ok(Ask::Extend(2)));
    // CPUs become pods of the template's slots, rounded up; nodes win when both are given.
    let mut r = req(Directive::Extend);
    r.num_cpus = Some(5);
    assert_eq!(ask(&r, 2), Ok(Ask::Extend(3)));
    assert_eq!(ask(&r, 0), Ok(Ask::Extend(5)));
    r.num_nodes = Some(1);
    assert_eq!(ask(&r, 2), Ok(Ask::Extend(1)));
}

#[test]
fn a_bad_extension_is_refused_with_its_reason() {
    let (s, why) = refused(ask(&req(Directive::Extend), 2));
    assert_eq!(s, Status::BadParam);
    assert!(
        why.contains("PMIX_ALLOC_NUM_NODES or PMIX_ALLOC_NUM_CPUS"),
        "{why}"
    );
    let mut r = req(Directive::Extend);
    r.num_nodes = Some(0);
    assert_eq!(refused(ask(&r, 2)).0, Status::BadParam);
    r.num_nodes = Some(u64::MAX);
    assert_eq!(refused(ask(&r, 2)).0, Status::OutOfResource);
    let mut r = req(Directive::Extend);
    r.num_nodes = Some(1);
    r.node_list = Some("a".into());
    assert!(refused(ask(&r, 2))
        .1
        .contains("Kubernetes names the new pods"));
    let mut r = req(Directive::Extend);
    r.num_nodes = Some(1);
    r.unhonoured = vec!["pmix.alloc.time".into()];
    let (s, why) = refused(ask(&r, 2));
    assert_eq!(s, Status::BadParam);
    assert!(
        why.starts_with("ras k8s cannot honour pmix.alloc.time"),
        "{why}"
    );
}

#[test]
fn new_reacquire_and_unknown_directives_are_refused() {
    assert_eq!(
        refused(ask(&req(Directive::New), 2)).0,
        Status::NotSupported
    );
    assert_eq!(
        refused(ask(&req(Directive::Reacquire), 2)).0,
        Status::NotSupported
    );
    let (s, why) = refused(ask(&req(Directive::Unknown(9)), 2));
    assert_eq!(
        (s, why.as_str()),
        (Status::BadParam, "unknown allocation directive 9")
    );
    assert_eq!(refused(ask(&Request::default(), 2)).0, Status::BadParam);
}

#[test]
fn a_release_by_count_takes_the_highest_nodes() {
    let mut r = req(Directive::Release);
    r.num_nodes = Some(2);
    let a = ask(&r, 2).unwrap();
    assert_eq!(a, Ask::ReleaseCount(2));
    assert_eq!(release_targets(&a, &pool(&[])).unwrap(), ["el-3", "el-2"]);
    // Never prte's own node.
    let (s, why) = refused(release_targets(&Ask::ReleaseCount(4), &pool(&[])));
    assert_eq!(s, Status::OutOfResource);
    assert!(why.contains("at most 3"), "{why}");
    assert_eq!(
        release_targets(&Ask::ReleaseCount(3), &pool(&[])).unwrap(),
        ["el-3", "el-2", "el-1"]
    );
}

#[test]
fn a_release_by_name_must_name_the_highest_nodes() {
    let mut r = req(Directive::Release);
    r.node_list = Some("el-2, el-3".into());
    let a = ask(&r, 2).unwrap();
    assert_eq!(release_targets(&a, &pool(&[])).unwrap(), ["el-3", "el-2"]);
    let named = Ask::ReleaseNamed(vec!["el-1".into()]);
    let (s, why) = refused(release_targets(&named, &pool(&[])));
    assert_eq!(s, Status::BadParam);
    assert_eq!(
        why,
        "Kubernetes removes the job's highest pods only: el-1 cannot be released alone; releasing 1 node(s) means el-3"
    );
    let twice = Ask::ReleaseNamed(vec!["el-3".into(), "el-3".into()]);
    assert!(refused(release_targets(&twice, &pool(&[])))
        .1
        .contains("a node named twice"));
    let mut r = req(Directive::Release);
    r.node_list = Some("pmix[el-2,el-3]".into());
    assert!(refused(ask(&r, 2)).1.contains("regular expression"));
    r.node_list = Some(" , ".into());
    assert_eq!(refused(ask(&r, 2)).0, Status::BadParam);
    r.node_list = Some("el-3".into());
    r.num_nodes = Some(1);
    assert!(refused(ask(&r, 2)).1.contains("not both"));
}

#[test]
fn a_node_with_processes_is_never_released() {
    let (s, why) = refused(release_targets(
        &Ask::ReleaseCount(2),
        &pool(&[("el-2", "prterun-x-3")]),
    ));
    assert_eq!(s, Status::ResourceBusy);
    assert_eq!(
        why,
        "node el-2 still runs processes of job prterun-x-3: release it when that job has ended"
    );
    // A busy node below the released ones does not matter.
    assert_eq!(
        release_targets(&Ask::ReleaseCount(1), &pool(&[("el-2", "j")])).unwrap(),
        ["el-3"]
    );
}

#[test]
fn a_cancel_names_its_request() {
    let mut r = req(Directive::Cancel);
    assert_eq!(refused(ask(&r, 2)).0, Status::BadParam);
    r.req_id = Some(" grow-1 ".into());
    assert_eq!(ask(&r, 2), Ok(Ask::Cancel("grow-1".into())));
}

#[test]
fn a_refused_growth_keeps_grows_reason_with_a_pmix_status() {
    let not_elastic = GrowError::NotElastic {
        kind: WorkloadKind::Job,
        namespace: "ns".into(),
        name: "el".into(),
    };
    let r = from_grow(&not_elastic);
    assert_eq!(r.status, Status::NotSupported);
    assert_eq!(r.reason, not_elastic.to_string());
    let beyond = GrowError::BeyondMax {
        kind: WorkloadKind::Job,
        name: "el".into(),
        by: 3,
        pods: 2,
        wanted: 5,
        max: 4,
        room: 2,
    };
    assert_eq!(from_grow(&beyond).status, Status::OutOfResource);
    assert_eq!(from_grow(&GrowError::Zero).status, Status::BadParam);
}

#[test]
fn extending_needs_uniform_slots_as_prrte_does() {
    let n = |v: &[(&str, i32)]| {
        v.iter()
            .map(|(h, s)| (h.to_string(), *s))
            .collect::<Vec<_>>()
    };
    assert!(uniform_slots(&n(&[("a", 2), ("b", 2)])).is_ok());
    assert!(uniform_slots(&[]).is_ok());
    let (status, reason) = refused(uniform_slots(&n(&[("a", 2), ("b", 1), ("c", 2)])));
    assert_eq!(status, Status::Error);
    assert!(
        reason.contains("node b has 1") && reason.contains("--host b:2"),
        "{reason}"
    );
}

fn pods_named(names: &[(&str, Option<u64>)]) -> Vec<crate::discovery::PodNode> {
    names
        .iter()
        .map(|(h, i)| crate::discovery::PodNode {
            pod: format!("{h}-x7k2p"),
            namespace: "ns".into(),
            hostname: h.to_string(),
            ip: std::net::Ipv4Addr::new(10, 0, 0, 2),
            slots: 2,
            index: *i,
            is_self: false,
            uid: h.to_string(),
        })
        .collect()
}

#[test]
fn the_new_pods_names_are_told_from_the_pods_now() {
    let now = pods_named(&[("el-0", Some(0)), ("el-1", Some(1))]);
    assert_eq!(next_hostnames(&now, 2, 2).unwrap(), ["el-2", "el-3"]);
    // A name with dashes of its own.
    let now = pods_named(&[("my-job-0", Some(0)), ("my-job-1", Some(1))]);
    assert_eq!(next_hostnames(&now, 2, 1).unwrap(), ["my-job-2"]);
    // No index, a name not ending in its index, two prefixes, no pod: cannot be told.
    assert_eq!(next_hostnames(&pods_named(&[("el-0", None)]), 1, 1), None);
    assert_eq!(
        next_hostnames(&pods_named(&[("host-a", Some(0))]), 1, 1),
        None
    );
    assert_eq!(
        next_hostnames(&pods_named(&[("a-0", Some(0)), ("b-1", Some(1))]), 2, 1),
        None
    );
    assert_eq!(next_hostnames(&[], 0, 1), None);
}

#[test]
fn an_extension_onto_a_given_back_name_is_refused_before_anything_changes() {
    let now = pods_named(&[("el-0", Some(0)), ("el-1", Some(1))]);
    let back = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(check_given_back(&now, 2, 2, &[]), Ok(()));
    assert_eq!(check_given_back(&now, 2, 2, &back(&["el-7"])), Ok(()));
    let r = check_given_back(&now, 2, 2, &back(&["el-3", "el-4"])).unwrap_err();
    assert_eq!(r.status, Status::NotSupported);
    assert!(
        r.reason.starts_with(
            "the new pod(s) el-3 would take the place of nodes this DVM gave back before"
        ) && r
            .reason
            .contains("cannot take a released node back into a running DVM")
            && r.reason.ends_with("nothing was changed"),
        "{}",
        r.reason
    );
    // Names that cannot be told, and nodes given back: refused rather than risked.
    let odd = pods_named(&[("host-a", Some(0))]);
    assert_eq!(check_given_back(&odd, 1, 1, &[]), Ok(()));
    let r = check_given_back(&odd, 1, 1, &back(&["host-b"])).unwrap_err();
    assert_eq!(r.status, Status::NotSupported);
    assert!(r.reason.contains("cannot be told"), "{}", r.reason);
}
