use super::*;
use std::net::Ipv4Addr;

fn job(pods: u32, max: Option<&str>) -> Workload {
    Workload {
        kind: WorkloadKind::Job,
        name: "el".into(),
        namespace: "ns".into(),
        pods,
        max_pods: max.map(String::from),
        refusal: None,
    }
}

fn node(i: u8, uid: &str) -> PodNode {
    PodNode {
        pod: format!("el-{i}-abc"),
        namespace: "ns".into(),
        hostname: format!("el-{i}"),
        ip: Ipv4Addr::new(10, 0, 0, i),
        slots: 2,
        index: Some(u64::from(i)),
        is_self: false,
        uid: uid.into(),
    }
}

fn alloc(nodes: Vec<PodNode>) -> Allocation {
    Allocation {
        namespace: "ns".into(),
        selector: "s".into(),
        nodes,
    }
}

#[test]
fn an_elastic_job_grows_up_to_its_max() {
    assert_eq!(check(&job(4, Some("8")), 2).unwrap(), 6);
    assert_eq!(check(&job(4, Some("6")), 2).unwrap(), 6);
    let e = check(&job(4, Some("6")), 3).unwrap_err();
    assert!(
        matches!(
            e,
            GrowError::BeyondMax {
                wanted: 7,
                max: 6,
                room: 2,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "growing Job el by 3 to 7 pods is beyond its --max-pods 6 (it has 4): nothing was changed; grow by at most 2"
    );
    assert!(matches!(check(&job(4, Some("8")), 0), Err(GrowError::Zero)));
}

#[test]
fn a_job_not_rendered_elastic_is_refused_with_the_remedy() {
    let e = check(&job(4, None), 1).unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with(
            "Job ns/el is not elastic (no prrte-k8s.io/max-pods annotation): nothing was changed"
        ) && text.contains("prrte-k8s manifest --elastic --max-pods M"),
        "{text}"
    );
    assert!(matches!(
        check(&job(4, Some("many")), 1),
        Err(GrowError::BadMax { .. })
    ));
    let mut plain = job(4, Some("8"));
    plain.refusal = WorkloadKind::Job.scale_refusal(&serde_json::json!({"spec": {}}));
    let e = check(&plain, 1).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Job el is not Indexed: only an Indexed Job's completions may change with its parallelism; nothing was changed"
    );
    // A StatefulSet has no completion mode.
    let sts = Workload {
        kind: WorkloadKind::StatefulSet,
        ..job(2, Some("3"))
    };
    assert_eq!(check(&sts, 1).unwrap(), 3);
}

#[test]
fn a_jobset_is_refused_with_the_remedy() {
    let e = GrowError::Fixed {
        kind: WorkloadKind::JobSet,
        name: "js".into(),
        reason: WorkloadKind::JobSet.fixed().unwrap(),
    };
    assert_eq!(
        e.to_string(),
        "the job is a JobSet js: a JobSet's replicated Jobs cannot change while it runs; render the job with --kind job or statefulset and --elastic to grow it"
    );
}

#[test]
fn the_new_pods_are_those_not_there_before_with_their_slots() {
    let before = alloc(vec![node(0, "a"), node(1, "b")]);
    // A pod replaced under the same name counts as new (another uid).
    let after = alloc(vec![
        node(0, "a"),
        node(1, "b2"),
        node(2, "c"),
        node(3, "d"),
    ]);
    let new = new_nodes(&before, &after);
    let names: Vec<&str> = new.iter().map(|n| n.hostname.as_str()).collect();
    assert_eq!(names, ["el-1", "el-2", "el-3"]);
    assert_eq!(add_host_arg(&new[1..]), "el-2:2,el-3:2");
    assert_eq!(add_host_arg(&[]), "");
}
