//! Pod discovery against the sandbox API server: readiness through the watch, RBAC and
//! credential errors, selector and expected-count inference, ordering, exclusion and slots.
#![forbid(unsafe_code)]

mod discovery_support;

use std::time::{Duration, Instant};

use discovery_support::{names, Fixture, WAIT};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use prrte_k8s::discovery::client::Environment;
use prrte_k8s::discovery::{self, DiscoveryError, ErrorKind, Progress, SlotsPolicy, PODS_RULE};
use sandbox::api::Rule;
use serde_json::json;
use tokio::sync::mpsc;

/// Runs discovery in a task, forwarding its progress reports to a channel.
fn spawn_discovery(
    cfg: discovery::DiscoveryConfig,
) -> (
    tokio::task::JoinHandle<Result<discovery::Allocation, DiscoveryError>>,
    mpsc::UnboundedReceiver<Progress>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = tokio::spawn(async move {
        let mut report = move |p: &Progress| {
            let _ = tx.send(p.clone());
        };
        discovery::discover_with(&cfg, &Environment::default(), &mut report).await
    });
    (handle, rx)
}

/// Waits for the first progress report that satisfies `pred`.
async fn progress_until(
    rx: &mut mpsc::UnboundedReceiver<Progress>,
    what: &str,
    pred: impl Fn(&Progress) -> bool,
) -> Progress {
    tokio::time::timeout(WAIT, async {
        loop {
            match rx.recv().await {
                Some(p) if pred(&p) => return p,
                Some(_) => continue,
                None => panic!("discovery ended before reporting {what}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no progress report {what} within {WAIT:?}"))
}

fn ready_count(n: u32) -> impl Fn(&Progress) -> bool {
    move |p| matches!(p, Progress::Ready { ready, .. } if *ready == n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocation_waits_through_the_watch_for_late_pods() {
    let f = Fixture::new("late").await;
    for i in 0..4 {
        f.create_pod(&format!("w-{i}"), json!({"app": "late"}), json!({}))
            .await;
    }
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=late".into()),
        ..f.config()
    };
    let (handle, mut rx) = spawn_discovery(cfg);

    let resolved = progress_until(&mut rx, "resolution", |p| {
        matches!(p, Progress::Resolved { .. })
    })
    .await;
    match resolved {
        Progress::Resolved {
            expected,
            expected_source,
            ..
        } => {
            assert_eq!(expected, 4);
            assert!(expected_source.contains("first list"), "{expected_source}");
        }
        _ => unreachable!(),
    }
    progress_until(&mut rx, "0 ready", ready_count(0)).await;
    progress_until(&mut rx, "the watch", |p| {
        matches!(p, Progress::Watching { .. })
    })
    .await;

    for i in 0..3 {
        f.make_ready(&format!("w-{i}"), &format!("10.0.0.{}", 10 + i))
            .await;
    }
    // Discovery has seen three pods become ready through the watch and must still be waiting.
    progress_until(&mut rx, "3 ready", ready_count(3)).await;
    assert!(
        !handle.is_finished(),
        "discovery returned before the last pod was ready"
    );

    f.make_ready("w-3", "10.0.0.13").await;
    let alloc = tokio::time::timeout(WAIT, handle)
        .await
        .expect("discovery finishes")
        .unwrap()
        .expect("allocation");
    assert_eq!(names(&alloc), ["w-0", "w-1", "w-2", "w-3"]);
    assert_eq!(alloc.nodes[3].ip.to_string(), "10.0.0.13");
    assert_eq!(alloc.namespace, "late");
    assert_eq!(alloc.selector, "app=late");
    assert!(alloc
        .nodes
        .iter()
        .all(|n| n.slots == 1 && !n.is_self && !n.uid.is_empty()));
}

/// The watch breaks mid-wait twice: once dropped (the watcher resumes from the last resource
/// version it saw), once dropped after the store compacted its history (the resumed watch gets
/// 410 Gone and the watcher lists again). Pods that became ready in between are not missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_watch_and_a_410_mid_wait_still_give_the_right_allocation() {
    let f = Fixture::new("gone").await;
    for i in 0..4 {
        f.create_pod(&format!("g-{i}"), json!({"app": "gone"}), json!({}))
            .await;
    }
    // A pod of another job, ready all along: never part of the allocation.
    f.create_pod("other-0", json!({"app": "other"}), json!({}))
        .await;
    f.make_ready("other-0", "10.3.0.99").await;
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=gone".into()),
        ..f.config()
    };
    let (handle, mut rx) = spawn_discovery(cfg);
    progress_until(&mut rx, "the watch", |p| {
        matches!(p, Progress::Watching { listed: 4 })
    })
    .await;

    // 1. The watch is dropped; changes made before it is resumed are replayed.
    f.server.drop_watches();
    f.make_ready("g-0", "10.3.0.10").await;
    progress_until(&mut rx, "1 ready", ready_count(1)).await;

    // 2. History compacted, then the watch dropped: resuming gets 410, the watcher lists again.
    f.make_ready("g-1", "10.3.0.11").await;
    f.server.store().compact();
    f.server.drop_watches();
    progress_until(&mut rx, "a new list after 410", |p| {
        matches!(p, Progress::Watching { listed: 4 })
    })
    .await;
    assert!(
        !handle.is_finished(),
        "discovery returned before the pods were ready"
    );

    f.make_ready("g-2", "10.3.0.12").await;
    f.make_ready("g-3", "10.3.0.13").await;
    let alloc = tokio::time::timeout(WAIT, handle)
        .await
        .expect("discovery finishes")
        .unwrap()
        .expect("allocation");
    assert_eq!(names(&alloc), ["g-0", "g-1", "g-2", "g-3"]);
    let ips: Vec<String> = alloc.nodes.iter().map(|n| n.ip.to_string()).collect();
    assert_eq!(ips, ["10.3.0.10", "10.3.0.11", "10.3.0.12", "10.3.0.13"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_never_becomes_ready_times_out_naming_it() {
    let f = Fixture::new("stuck").await;
    for i in 0..3 {
        f.create_pod(&format!("s-{i}"), json!({"app": "stuck"}), json!({}))
            .await;
    }
    f.make_ready("s-0", "10.1.0.1").await;
    f.make_ready("s-1", "10.1.0.2").await;
    f.set_status(
        "s-2",
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}]}),
    )
    .await;
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=stuck".into()),
        expected_pods: Some(4),
        timeout: Duration::from_secs(2),
        ..f.config()
    };
    let start = Instant::now();
    let err = discovery::discover(&cfg).await.expect_err("must time out");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(1900),
        "returned after {took:?}, before the timeout"
    );
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}, far beyond the 2 s timeout"
    );
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let msg = err.to_string();
    for needle in [
        "s-2",
        "phase Pending",
        "PodScheduled=False (Unschedulable",
        "2 of 4 ready",
        "1 expected pod does not exist yet",
        "ras_k8s_timeout",
    ] {
        assert!(msg.contains(needle), "missing {needle:?} in: {msg}");
    }
    assert!(
        !msg.contains("pod s-0 is"),
        "ready pods are not problems: {msg}"
    );
    assert_eq!(err.exit_code(), 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_list_right_gives_403_with_the_rule_and_the_rule_fixes_it() {
    let f = Fixture::new("rbac").await;
    f.create_pod("r-0", json!({"app": "r"}), json!({})).await;
    f.make_ready("r-0", "10.2.0.1").await;

    // A static token that may get pods but not list them.
    f.server.add_token(
        "tok-get-only",
        "alice",
        Some("rbac"),
        vec![Rule::new(&["get"], &[""], &["pods"])],
    );
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=r".into()),
        kubeconfig: Some(f.kubeconfig_for("tok-get-only")),
        ..f.config()
    };
    let err = discovery::discover(&cfg)
        .await
        .expect_err("list is forbidden");
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    let msg = err.to_string();
    assert!(msg.contains("may not list pods"), "{msg}");
    assert!(msg.contains("namespace \"rbac\""), "{msg}");
    assert!(msg.contains(PODS_RULE), "{msg}");
    assert!(
        msg.contains("cannot list resource \"pods\""),
        "the server's words are kept: {msg}"
    );
    assert_eq!(err.exit_code(), 6);

    // A service account with no role at all, then with exactly the printed rule.
    let sa_token = f.server.service_account_token("rbac", "mpi");
    let sa_cfg = discovery::DiscoveryConfig {
        kubeconfig: Some(f.kubeconfig_for(&sa_token)),
        ..cfg.clone()
    };
    let err = discovery::discover(&sa_cfg).await.expect_err("no role yet");
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    let rules: serde_json::Value =
        serde_yaml::from_str(PODS_RULE).expect("the printed rule is YAML");
    let role: Role =
        serde_json::from_value(json!({"metadata": {"name": "prrte-discovery"}, "rules": rules}))
            .unwrap();
    Api::<Role>::namespaced(f.client.clone(), "rbac")
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "prrte-discovery"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "prrte-discovery"},
        "subjects": [{"kind": "ServiceAccount", "name": "mpi", "namespace": "rbac"}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(f.client.clone(), "rbac")
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let alloc = discovery::discover(&sa_cfg)
        .await
        .expect("the printed rule is enough");
    assert_eq!(names(&alloc), ["r-0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_watch_right_is_reported_when_waiting() {
    let f = Fixture::new("nowatch").await;
    f.create_pod("n-0", json!({"app": "n"}), json!({})).await;
    f.server.add_token(
        "tok-no-watch",
        "bob",
        Some("nowatch"),
        vec![Rule::new(&["get", "list"], &[""], &["pods"])],
    );
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=n".into()),
        kubeconfig: Some(f.kubeconfig_for("tok-no-watch")),
        ..f.config()
    };
    let err = discovery::discover(&cfg)
        .await
        .expect_err("watch is forbidden");
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert!(err.to_string().contains("may not watch pods"), "{err}");
    assert!(err.to_string().contains(PODS_RULE), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_token_gives_401() {
    let f = Fixture::new("authn").await;
    let kc = f.kubeconfig_for("no-such-token");
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=x".into()),
        kubeconfig: Some(kc.clone()),
        ..f.config()
    };
    let err = discovery::discover(&cfg).await.expect_err("401");
    assert_eq!(err.kind(), ErrorKind::Unauthorized, "{err}");
    let msg = err.to_string();
    assert!(msg.contains("401"), "{msg}");
    assert!(
        msg.contains(&kc.display().to_string()),
        "names the kubeconfig: {msg}"
    );
    assert!(msg.contains(&f.server.url()), "names the server: {msg}");
    assert_eq!(err.exit_code(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_names_the_url() {
    let f = Fixture::new("gone").await;
    // A kubeconfig for a port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let text = std::fs::read_to_string(f.server.admin_kubeconfig())
        .unwrap()
        .replace(&f.server.url(), &format!("https://127.0.0.1:{port}"));
    let kc = f.dir.path().join("closed.yaml");
    std::fs::write(&kc, text).unwrap();
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=x".into()),
        kubeconfig: Some(kc),
        timeout: Duration::from_secs(5),
        ..f.config()
    };
    let start = Instant::now();
    let err = discovery::discover(&cfg)
        .await
        .expect_err("nothing listens");
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "bounded by the timeout"
    );
    assert_eq!(err.kind(), ErrorKind::Unreachable, "{err}");
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
    assert!(
        err.to_string().contains("list pods"),
        "says what was tried: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_rejects_what_the_client_accepts_as_400_mapped_to_selector_error() {
    // Client-side validation catches syntax errors before any request is made.
    let f = Fixture::new("sel").await;
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app in (a".into()),
        ..f.config()
    };
    let err = discovery::discover(&cfg).await.expect_err("bad selector");
    assert!(
        matches!(err, DiscoveryError::InvalidSelector { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("ras_k8s_selector"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selector_and_expected_count_come_from_our_pods_job() {
    let f = Fixture::new("jobs").await;
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "pi"},
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "completionMode": "Indexed",
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "mpi"}]}},
        },
    }))
    .unwrap();
    let job = Api::<Job>::namespaced(f.client.clone(), "jobs")
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
    let owner = json!({"metadata": {"ownerReferences": [{
        "apiVersion": "batch/v1", "kind": "Job", "name": "pi",
        "uid": job.metadata.uid.clone().unwrap(), "controller": true,
    }]}});
    let job_labels = |i: u32| json!({"batch.kubernetes.io/job-name": "pi", "batch.kubernetes.io/job-completion-index": i.to_string()});
    // Names whose random suffixes sort against the completion index.
    f.create_pod("pi-1-aaaaa", job_labels(1), owner.clone())
        .await;
    f.create_pod("pi-0-zzzzz", job_labels(0), owner.clone())
        .await;
    // A pod of another job is never selected.
    f.create_pod(
        "other-0-bbbbb",
        json!({"batch.kubernetes.io/job-name": "other"}),
        json!({}),
    )
    .await;
    f.make_ready("pi-1-aaaaa", "10.3.0.2").await;
    f.make_ready("pi-0-zzzzz", "10.3.0.1").await;
    f.make_ready("other-0-bbbbb", "10.3.9.9").await;

    let cfg = discovery::DiscoveryConfig {
        self_pod: Some("pi-1-aaaaa".into()),
        ..f.config()
    };
    let (handle, mut rx) = spawn_discovery(cfg);
    let resolved = progress_until(&mut rx, "resolution", |p| {
        matches!(p, Progress::Resolved { .. })
    })
    .await;
    let Progress::Resolved {
        selector,
        selector_source,
        expected,
        expected_source,
        ..
    } = resolved
    else {
        unreachable!()
    };
    assert_eq!(selector, "batch.kubernetes.io/job-name=pi");
    assert!(selector_source.contains("pi-1-aaaaa"), "{selector_source}");
    // Only two pods exist yet: three are expected because the Job's parallelism says so.
    assert_eq!(expected, 3);
    assert!(expected_source.contains("Job jobs/pi"), "{expected_source}");
    progress_until(&mut rx, "2 ready", ready_count(2)).await;
    assert!(!handle.is_finished());

    f.create_pod("pi-2-mmmmm", job_labels(2), owner.clone())
        .await;
    f.make_ready("pi-2-mmmmm", "10.3.0.3").await;
    let alloc = tokio::time::timeout(WAIT, handle)
        .await
        .unwrap()
        .unwrap()
        .expect("allocation");
    assert_eq!(names(&alloc), ["pi-0-zzzzz", "pi-1-aaaaa", "pi-2-mmmmm"]);
    assert_eq!(
        alloc.nodes.iter().map(|n| n.index).collect::<Vec<_>>(),
        [Some(0), Some(1), Some(2)]
    );
    assert_eq!(
        alloc.nodes.iter().map(|n| n.is_self).collect::<Vec<_>>(),
        [false, true, false]
    );
    assert_eq!(alloc.self_node().unwrap().ip.to_string(), "10.3.0.2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statefulset_owner_gives_selector_and_replicas() {
    let f = Fixture::new("sts").await;
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "ranks"},
        "spec": {
            "replicas": 2,
            "serviceName": "ranks",
            "selector": {"matchLabels": {"app": "ranks"}},
            "template": {"metadata": {"labels": {"app": "ranks"}}, "spec": {"containers": [{"name": "main", "image": "mpi"}]}},
        },
    }))
    .unwrap();
    let sts = Api::<StatefulSet>::namespaced(f.client.clone(), "sts")
        .create(&PostParams::default(), &sts)
        .await
        .unwrap();
    for i in 0..2u32 {
        let name = format!("ranks-{i}");
        f.create_pod(
            &name,
            json!({"app": "ranks", "apps.kubernetes.io/pod-index": i.to_string(), "statefulset.kubernetes.io/pod-name": name.clone()}),
            json!({
                "metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ranks", "uid": sts.metadata.uid.clone().unwrap(), "controller": true}]},
                "spec": {"hostname": name.clone(), "subdomain": "ranks"},
            }),
        )
        .await;
        f.make_ready(&name, &format!("10.4.0.{}", i + 1)).await;
    }
    // A pod with the same app label but not the StatefulSet's would be selected too: the
    // selector is the StatefulSet's, so none is created here; the count comes from replicas.
    let cfg = discovery::DiscoveryConfig {
        self_pod: Some("ranks-0".into()),
        ..f.config()
    };
    let (handle, mut rx) = spawn_discovery(cfg);
    let Progress::Resolved {
        selector,
        expected,
        expected_source,
        ..
    } = progress_until(&mut rx, "resolution", |p| {
        matches!(p, Progress::Resolved { .. })
    })
    .await
    else {
        unreachable!()
    };
    assert_eq!(selector, "app=ranks");
    assert_eq!(expected, 2);
    assert!(
        expected_source.contains("StatefulSet sts/ranks"),
        "{expected_source}"
    );
    let alloc = tokio::time::timeout(WAIT, handle)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(names(&alloc), ["ranks-0", "ranks-1"]);
    assert!(alloc.nodes[0].is_self);
    assert_eq!(alloc.nodes[1].hostname, "ranks-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inference_failures_explain_themselves() {
    let f = Fixture::new("noinfer").await;
    f.create_pod("loner", json!({"app": "loner"}), json!({}))
        .await;
    let cfg = discovery::DiscoveryConfig {
        self_pod: Some("loner".into()),
        ..f.config()
    };
    let err = discovery::discover(&cfg)
        .await
        .expect_err("nothing to infer from");
    assert_eq!(err.kind(), ErrorKind::SelectorNotInferable, "{err}");
    let msg = err.to_string();
    for needle in [
        "noinfer/loner",
        "batch.kubernetes.io/job-name",
        "jobset.sigs.k8s.io/jobset-name",
        "training.kubeflow.org/job-name",
        "StatefulSet",
        "ras_k8s_selector",
    ] {
        assert!(msg.contains(needle), "missing {needle:?}: {msg}");
    }
    let cfg = discovery::DiscoveryConfig {
        self_pod: Some("ghost".into()),
        ..f.config()
    };
    let err = discovery::discover(&cfg).await.expect_err("no such pod");
    assert!(
        matches!(err, DiscoveryError::SelfPodNotFound { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("\"ghost\"") && err.to_string().contains("POD_NAME"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_pods_are_ordered_numerically_and_index_labels_win() {
    let f = Fixture::new("order").await;
    let mut order: Vec<u32> = (0..12).collect();
    order.reverse();
    order.swap(2, 9);
    for i in &order {
        let name = format!("w-{i}");
        f.create_pod(&name, json!({"app": "order"}), json!({}))
            .await;
        f.make_ready(&name, &format!("10.5.0.{}", i + 1)).await;
    }
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=order".into()),
        ..f.config()
    };
    let alloc = discovery::discover(&cfg).await.unwrap();
    let expected: Vec<String> = (0..12).map(|i| format!("w-{i}")).collect();
    assert_eq!(names(&alloc), expected);
    assert_eq!(alloc.nodes[11].ip.to_string(), "10.5.0.12");

    // Index labels beat names: a-* pods carry indices against their names' order.
    for (name, idx) in [("a-0", 2), ("a-1", 0), ("a-2", 1)] {
        f.create_pod(
            name,
            json!({"app": "idx", "apps.kubernetes.io/pod-index": idx.to_string()}),
            json!({}),
        )
        .await;
        f.make_ready(name, "10.5.1.1").await;
    }
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=idx".into()),
        ..f.config()
    };
    let alloc = discovery::discover(&cfg).await.unwrap();
    assert_eq!(names(&alloc), ["a-1", "a-2", "a-0"]);

    // More ready pods than expected: the first ones by order are taken.
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=order".into()),
        expected_pods: Some(5),
        ..f.config()
    };
    let alloc = discovery::discover(&cfg).await.unwrap();
    assert_eq!(names(&alloc), ["w-0", "w-1", "w-2", "w-3", "w-4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_and_deleted_pods_are_never_allocated() {
    let f = Fixture::new("done").await;
    for name in ["d-0", "d-1", "d-2", "d-3", "d-4"] {
        f.create_pod(name, json!({"app": "done"}), json!({})).await;
        f.make_ready(name, "10.6.0.1").await;
    }
    // Finished pods keep their last Ready condition and IP: still never allocated.
    f.set_status("d-1", json!({"phase": "Failed", "reason": "Evicted"}))
        .await;
    f.set_status("d-2", json!({"phase": "Succeeded"})).await;
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=done".into()),
        ..f.config()
    };
    let alloc = discovery::discover(&cfg).await.unwrap();
    assert_eq!(
        names(&alloc),
        ["d-0", "d-3", "d-4"],
        "expected count is the non-finished pods at the first list"
    );

    // Waiting for 3 with d-4 deleted and d-5 joining later: d-4 must not be allocated.
    f.pods().delete("d-4", &Default::default()).await.unwrap();
    f.create_pod("d-5", json!({"app": "done"}), json!({})).await;
    let cfg = discovery::DiscoveryConfig {
        expected_pods: Some(3),
        ..cfg
    };
    let (handle, mut rx) = spawn_discovery(cfg);
    progress_until(&mut rx, "2 ready", ready_count(2)).await;
    f.make_ready("d-5", "10.6.0.5").await;
    let alloc = tokio::time::timeout(WAIT, handle)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(names(&alloc), ["d-0", "d-3", "d-5"]);

    // Only finished pods: a clear "no pods" error naming them.
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=done,!missing".into()),
        expected_pods: None,
        ..f.config()
    };
    for name in ["d-0", "d-3", "d-5"] {
        f.set_status(name, json!({"phase": "Succeeded"})).await;
    }
    let err = discovery::discover(&cfg).await.expect_err("nothing left");
    assert_eq!(err.kind(), ErrorKind::NoPods, "{err}");
    assert!(
        err.to_string().contains("d-1") && err.to_string().contains("app=done"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_from_annotation_gpu_and_cpu() {
    let f = Fixture::new("slots").await;
    let with = |resources: serde_json::Value| json!({"spec": {"containers": [{"name": "main", "image": "mpi", "resources": resources}]}});
    f.create_pod(
        "s-0",
        json!({"app": "s"}),
        json!({"metadata": {"annotations": {"prrte-k8s.io/slots": "6"}}}),
    )
    .await;
    f.create_pod(
        "s-1",
        json!({"app": "s"}),
        with(json!({"limits": {"nvidia.com/gpu": "2"}, "requests": {"cpu": "16"}})),
    )
    .await;
    f.create_pod(
        "s-2",
        json!({"app": "s"}),
        with(json!({"requests": {"cpu": "2500m"}})),
    )
    .await;
    f.create_pod(
        "s-3",
        json!({"app": "s"}),
        with(json!({"requests": {"memory": "1Gi"}})),
    )
    .await;
    for i in 0..4 {
        f.make_ready(&format!("s-{i}"), &format!("10.7.0.{}", i + 1))
            .await;
    }
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=s".into()),
        ..f.config()
    };
    let alloc = discovery::discover(&cfg).await.unwrap();
    assert_eq!(
        alloc.nodes.iter().map(|n| n.slots).collect::<Vec<_>>(),
        [6, 2, 2, 1]
    );
    assert_eq!(alloc.total_slots(), 11);
    let cpu = discovery::discover(&discovery::DiscoveryConfig {
        slots: SlotsPolicy::Cpu,
        ..cfg.clone()
    })
    .await
    .unwrap();
    assert_eq!(
        cpu.nodes.iter().map(|n| n.slots).collect::<Vec<_>>(),
        [1, 16, 2, 1]
    );
    let one = discovery::discover(&discovery::DiscoveryConfig {
        slots: SlotsPolicy::One,
        ..cfg.clone()
    })
    .await
    .unwrap();
    assert!(one.nodes.iter().all(|n| n.slots == 1));

    f.create_pod(
        "s-4",
        json!({"app": "s"}),
        json!({"metadata": {"annotations": {"prrte.k8s.io/slots": "four"}}}),
    )
    .await;
    f.make_ready("s-4", "10.7.0.5").await;
    let err = discovery::discover(&cfg).await.expect_err("bad annotation");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(
        err.to_string().contains("slots/s-4") && err.to_string().contains("\"four\""),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_cluster_configuration_and_namespace_from_the_service_account() {
    let f = Fixture::new("incluster").await;
    f.create_pod(
        "ic-0",
        json!({"batch.kubernetes.io/job-name": "ic"}),
        json!({}),
    )
    .await;
    f.make_ready("ic-0", "10.8.0.1").await;
    let sa = f.dir.path().join("serviceaccount");
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::write(sa.join("token"), f.server.admin_token()).unwrap();
    std::fs::copy(f.server.ca_pem_path(), sa.join("ca.crt")).unwrap();
    std::fs::write(sa.join("namespace"), "incluster").unwrap();
    let addr = f.server.addr();
    let env = Environment {
        service_host: Some(addr.ip().to_string()),
        service_port: Some(addr.port().to_string()),
        service_account_dir: Some(sa),
        pod_name: Some("ic-0".into()),
        ..Default::default()
    };
    // Neither namespace, selector nor kubeconfig configured: all from the pod's environment.
    let cfg = discovery::DiscoveryConfig {
        timeout: Duration::from_secs(20),
        ..Default::default()
    };
    let alloc = tokio::time::timeout(WAIT, discovery::discover_with(&cfg, &env, &mut |_| {}))
        .await
        .unwrap()
        .expect("in-cluster discovery");
    assert_eq!(alloc.namespace, "incluster");
    assert_eq!(alloc.selector, "batch.kubernetes.io/job-name=ic");
    assert_eq!(names(&alloc), ["ic-0"]);
    assert!(alloc.nodes[0].is_self);
}

#[test]
fn blocking_discovery_from_a_plain_thread() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let f = rt.block_on(async {
        let f = Fixture::new("blocking").await;
        f.create_pod("b-0", json!({"app": "b"}), json!({})).await;
        f.make_ready("b-0", "10.9.0.1").await;
        f
    });
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=b".into()),
        ..f.config()
    };
    // The server keeps running on `rt`'s worker while a plain thread discovers.
    let alloc = std::thread::spawn(move || discovery::discover_blocking(&cfg))
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(names(&alloc), ["b-0"]);
    drop(f);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_api_server_while_waiting_ends_in_a_bounded_timeout() {
    let f = Fixture::new("lost").await;
    f.create_pod("l-0", json!({"app": "l"}), json!({})).await;
    f.create_pod("l-1", json!({"app": "l"}), json!({})).await;
    f.make_ready("l-0", "10.10.0.1").await;
    let cfg = discovery::DiscoveryConfig {
        selector: Some("app=l".into()),
        timeout: Duration::from_secs(3),
        ..f.config()
    };
    let (handle, mut rx) = spawn_discovery(cfg);
    progress_until(&mut rx, "the watch", |p| {
        matches!(p, Progress::Watching { .. })
    })
    .await;
    let start = Instant::now();
    let Fixture { server, .. } = f;
    drop(server);
    let err = tokio::time::timeout(WAIT, handle)
        .await
        .expect("bounded")
        .unwrap()
        .expect_err("no server, no allocation");
    assert!(
        start.elapsed() < Duration::from_secs(6),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("pod l-1 is not ready") && msg.contains("1 of 2 ready"),
        "{msg}"
    );
    assert!(msg.contains("the last watch attempt failed"), "{msg}");
}

/// `ras_k8s_exclude_self`: the launcher's pod (index 0, where prte runs) is waited for like
/// every pod of the Job but left out of the allocation; a Job of that one pod is an error
/// naming the parameter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclude_self_leaves_the_launchers_pod_out_but_waits_for_it() {
    let f = Fixture::new("launcher").await;
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "pi"},
        "spec": {
            "parallelism": 3,
            "completions": 3,
            "completionMode": "Indexed",
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "mpi", "image": "mpi"}]}},
        },
    }))
    .unwrap();
    let job = Api::<Job>::namespaced(f.client.clone(), "launcher")
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
    let owner = json!({"metadata": {"ownerReferences": [{
        "apiVersion": "batch/v1", "kind": "Job", "name": "pi",
        "uid": job.metadata.uid.clone().unwrap(), "controller": true,
    }]}});
    let labels = |i: u32| json!({"batch.kubernetes.io/job-name": "pi", "batch.kubernetes.io/job-completion-index": i.to_string()});
    for (i, name) in ["pi-0-aaaaa", "pi-1-bbbbb", "pi-2-ccccc"]
        .iter()
        .enumerate()
    {
        f.create_pod(name, labels(i as u32), owner.clone()).await;
    }
    f.make_ready("pi-1-bbbbb", "10.4.0.2").await;
    f.make_ready("pi-2-ccccc", "10.4.0.3").await;
    let cfg = discovery::DiscoveryConfig {
        self_pod: Some("pi-0-aaaaa".into()),
        exclude_self: true,
        ..f.config()
    };
    let (handle, mut rx) = spawn_discovery(cfg.clone());
    let resolved = progress_until(&mut rx, "resolution", |p| {
        matches!(p, Progress::Resolved { .. })
    })
    .await;
    assert!(
        matches!(resolved, Progress::Resolved { expected: 3, .. }),
        "the launcher's pod is counted: {resolved:?}"
    );
    progress_until(&mut rx, "2 ready", ready_count(2)).await;
    // The two workers are ready, but the launcher's own pod is not yet: still waiting.
    assert!(
        !handle.is_finished(),
        "discovery waits for the launcher's pod too"
    );
    f.make_ready("pi-0-aaaaa", "10.4.0.1").await;
    let alloc = tokio::time::timeout(WAIT, handle)
        .await
        .unwrap()
        .unwrap()
        .expect("allocation");
    assert_eq!(names(&alloc), ["pi-1-bbbbb", "pi-2-ccccc"]);
    assert!(alloc.self_node().is_none());
    assert_eq!(alloc.total_slots(), 2);

    // Without the parameter the same discovery allocates all three.
    let all = discovery::discover(&discovery::DiscoveryConfig {
        exclude_self: false,
        ..cfg.clone()
    })
    .await
    .unwrap();
    assert_eq!(names(&all), ["pi-0-aaaaa", "pi-1-bbbbb", "pi-2-ccccc"]);
    assert!(all.nodes[0].is_self);

    // A job of the launcher's pod alone leaves nothing for the ranks.
    f.create_pod("solo-0-ddddd", json!({"app": "solo"}), json!({}))
        .await;
    f.make_ready("solo-0-ddddd", "10.4.0.9").await;
    let err = discovery::discover(&discovery::DiscoveryConfig {
        selector: Some("app=solo".into()),
        self_pod: Some("solo-0-ddddd".into()),
        exclude_self: true,
        ..f.config()
    })
    .await
    .expect_err("only the launcher's pod");
    assert!(matches!(err, DiscoveryError::OnlySelf { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("launcher/solo-0-ddddd") && msg.contains("ras_k8s_exclude_self"),
        "{msg}"
    );
}
