use super::indexes::{compress_indexes, parse_indexes};
use super::job::{
    has_timers, reconcile_job, reconcile_job_seeing, reconcile_timed_jobs, INDEX_KEY,
};
use super::pods::phase;
use super::statefulset::reconcile_sts;
use crate::api::resources::{JOBS, NAMESPACES, PODS, STATEFULSETS};
use crate::api::{DeleteOptions, Part, Store};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

fn store() -> Store {
    let s = Store::new();
    s.create(
        &NAMESPACES,
        "",
        json!({"metadata": {"name": "default"}}),
        false,
    )
    .unwrap();
    s
}

#[test]
fn indexes() {
    let s: BTreeSet<i64> = [0, 1, 2, 3, 5, 7, 8].into_iter().collect();
    assert_eq!(compress_indexes(&s), "0-3,5,7-8");
    assert_eq!(compress_indexes(&BTreeSet::new()), "");
}

#[test]
fn indexed_job_expands_and_completes() {
    let s = store();
    s.create(
        &JOBS,
        "default",
        json!({"metadata": {"name": "j"}, "spec": {
            "completionMode": "Indexed", "completions": 3, "parallelism": 3,
            "template": {"spec": {"subdomain": "svc", "restartPolicy": "Never", "containers": [{"name": "c", "command": ["true"]}]}}}}),
        false,
    )
    .unwrap();
    reconcile_job(&s, "default", "j");
    let pods = s
        .list(&PODS, Some("default"), &Default::default())
        .unwrap()
        .items;
    assert_eq!(pods.len(), 3);
    let mut idx: Vec<String> = pods
        .iter()
        .map(|p| {
            p["metadata"]["annotations"][INDEX_KEY]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    idx.sort();
    assert_eq!(idx, ["0", "1", "2"]);
    for p in &pods {
        let i = p["metadata"]["labels"][INDEX_KEY].as_str().unwrap();
        assert_eq!(p["spec"]["hostname"], format!("j-{i}"));
        assert_eq!(p["spec"]["subdomain"], "svc");
        assert_eq!(p["metadata"]["labels"]["job-name"], "j");
        assert!(p["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with(&format!("j-{i}-")));
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "Job");
        assert_eq!(
            p["spec"]["containers"][0]["env"][0]["name"],
            "JOB_COMPLETION_INDEX"
        );
    }
    // Reconciling again makes nothing new.
    reconcile_job(&s, "default", "j");
    assert_eq!(
        s.list(&PODS, Some("default"), &Default::default())
            .unwrap()
            .items
            .len(),
        3
    );
    for p in &pods {
        s.modify(
            &PODS,
            "default",
            p["metadata"]["name"].as_str().unwrap(),
            Part::Status,
            |v| v["status"]["phase"] = json!("Succeeded"),
        )
        .unwrap();
    }
    reconcile_job(&s, "default", "j");
    let j = s.get(&JOBS, "default", "j").unwrap();
    assert_eq!(j["status"]["succeeded"], 3);
    assert_eq!(j["status"]["completedIndexes"], "0-2");
    assert!(j["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Complete"));
    // Deleting the job deletes its pods.
    s.delete(&JOBS, "default", "j", &DeleteOptions::default())
        .unwrap();
    assert!(s
        .list(&PODS, Some("default"), &Default::default())
        .unwrap()
        .items
        .is_empty());
}

fn indexed_job(s: &Store, name: &str, n: i64, extra: Value) -> Vec<Arc<Value>> {
    let mut spec = json!({
        "completionMode": "Indexed", "completions": n, "parallelism": n, "backoffLimit": 0,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "command": ["true"]}]}}});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    s.create(
        &JOBS,
        "default",
        json!({"metadata": {"name": name}, "spec": spec}),
        false,
    )
    .unwrap();
    reconcile_job(s, "default", name);
    let mut pods = s
        .list(&PODS, Some("default"), &Default::default())
        .unwrap()
        .items;
    pods.retain(|p| p["metadata"]["labels"]["job-name"] == name);
    pods.sort_by_key(|p| {
        p["metadata"]["labels"][INDEX_KEY]
            .as_str()
            .unwrap()
            .parse::<i64>()
            .unwrap()
    });
    pods
}

fn end_pod(s: &Store, p: &Value, phase: &str, code: i64, conds: Value) {
    s.modify(
        &PODS,
        "default",
        p["metadata"]["name"].as_str().unwrap(),
        Part::Status,
        |v| {
            v["status"]["phase"] = json!(phase);
            v["status"]["containerStatuses"] =
                json!([{"name": "c", "state": {"terminated": {"exitCode": code}}}]);
            v["status"]["conditions"] = conds;
        },
    )
    .unwrap();
}

fn cond<'a>(j: &'a Value, ty: &str) -> Option<&'a Value> {
    j["status"]["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == ty && c["status"] == "True"))
}

fn names(s: &Store) -> Vec<String> {
    s.list(&PODS, Some("default"), &Default::default())
        .unwrap()
        .items
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn index_sets_parse() {
    assert_eq!(
        parse_indexes("0-2,5")
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>(),
        [0, 1, 2, 5]
    );
    assert_eq!(parse_indexes("").unwrap().len(), 0);
    assert!(parse_indexes("3-1").is_none() && parse_indexes("x").is_none());
}

#[test]
fn success_policy_on_index_0_completes_and_terminates_the_rest() {
    let s = store();
    let pods = indexed_job(
        &s,
        "sp",
        3,
        json!({"successPolicy": {"rules": [{"succeededIndexes": "0"}]}}),
    );
    assert_eq!(pods.len(), 3);
    // Index 1 succeeding is not enough.
    end_pod(&s, &pods[1], "Succeeded", 0, json!([]));
    reconcile_job(&s, "default", "sp");
    assert!(cond(&s.get(&JOBS, "default", "sp").unwrap(), "Complete").is_none());
    end_pod(&s, &pods[0], "Succeeded", 0, json!([]));
    reconcile_job(&s, "default", "sp");
    let j = s.get(&JOBS, "default", "sp").unwrap();
    assert_eq!(
        cond(&j, "SuccessCriteriaMet").unwrap()["reason"],
        "SuccessPolicy"
    );
    assert_eq!(cond(&j, "Complete").unwrap()["reason"], "SuccessPolicy");
    assert!(j["status"]["completionTime"].is_string());
    let left = names(&s);
    assert!(
        !left.contains(&pods[2]["metadata"]["name"].as_str().unwrap().to_string()),
        "index 2 was still running: terminated"
    );
    assert_eq!(left.len(), 2, "finished pods stay: {left:?}");
}

#[test]
fn backoff_limit_0_fails_at_the_first_failure_and_terminates_the_rest() {
    let s = store();
    let pods = indexed_job(&s, "bl", 3, json!({}));
    end_pod(&s, &pods[0], "Failed", 3, json!([]));
    reconcile_job(&s, "default", "bl");
    let j = s.get(&JOBS, "default", "bl").unwrap();
    assert_eq!(
        cond(&j, "Failed").unwrap()["reason"],
        "BackoffLimitExceeded"
    );
    assert!(cond(&j, "FailureTarget").is_some());
    assert!(cond(&j, "Complete").is_none());
    assert_eq!(
        names(&s),
        [pods[0]["metadata"]["name"].as_str().unwrap()],
        "only the failed pod is left"
    );
    assert_eq!(j["status"]["failed"], 1);
    assert!(j["status"].get("active").is_none());
    // Nothing is made again.
    reconcile_job(&s, "default", "bl");
    assert_eq!(names(&s).len(), 1);
}

#[test]
fn pod_failure_policy_fail_job_ignore_and_count() {
    let policy = json!({"podFailurePolicy": {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": "c", "operator": "In", "values": [42]}},
    ]}, "backoffLimit": 1});
    let s = store();
    let pods = indexed_job(&s, "pf", 2, policy.clone());
    // Evicted: ignored, not counted, the index is made again.
    end_pod(
        &s,
        &pods[1],
        "Failed",
        137,
        json!([{"type": "DisruptionTarget", "status": "True"}]),
    );
    reconcile_job(&s, "default", "pf");
    let j = s.get(&JOBS, "default", "pf").unwrap();
    assert!(cond(&j, "Failed").is_none());
    assert!(j["status"].get("failed").is_none(), "{}", j["status"]);
    assert_eq!(names(&s).len(), 3, "a new pod for index 1");
    // Exit code 1 counts (backoffLimit 1: not yet failed).
    end_pod(&s, &pods[0], "Failed", 1, json!([]));
    reconcile_job(&s, "default", "pf");
    assert!(cond(&s.get(&JOBS, "default", "pf").unwrap(), "Failed").is_none());
    // Exit code 42 fails the Job at once, naming the rule.
    let fresh: Vec<Arc<Value>> = s
        .list(&PODS, Some("default"), &Default::default())
        .unwrap()
        .items
        .into_iter()
        .filter(|p| phase(p) != "Failed")
        .collect();
    end_pod(&s, &fresh[0], "Failed", 42, json!([]));
    reconcile_job(&s, "default", "pf");
    let j = s.get(&JOBS, "default", "pf").unwrap();
    let f = cond(&j, "Failed").unwrap();
    assert_eq!(f["reason"], "PodFailurePolicy");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("exit code 42 matching FailJob rule at index 1"),
        "{f}"
    );
    assert!(
        s.list(&PODS, Some("default"), &Default::default())
            .unwrap()
            .items
            .iter()
            .all(|p| phase(p) == "Failed"),
        "no pod left running"
    );
}

/// With a pod failure policy a pod being deleted (evicted) is not replaced before it Failed
/// (`podReplacementPolicy: Failed`, the default then), and its failure fails the Job even when
/// its object was removed before the controller saw it end (the tracking finalizer's job):
/// the success of index 0 that follows does not complete the Job.
#[test]
fn an_evicted_pod_is_not_replaced_and_fails_the_job_even_once_removed() {
    let s = store();
    s.set_node_terminates_pods("n1", true);
    let extra = json!({"podFailurePolicy": {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
           "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
           "template": {"spec": {"nodeName": "n1", "restartPolicy": "Never", "containers": [{"name": "c", "command": ["true"]}]}}});
    let mut pods = indexed_job(&s, "ev", 3, extra.clone());
    let j = s.get(&JOBS, "default", "ev").unwrap();
    assert_eq!(j["spec"]["podReplacementPolicy"], "Failed");
    let victim = pods.remove(2);
    let vname = victim["metadata"]["name"].as_str().unwrap();
    let terminating = s
        .delete(&PODS, "default", vname, &DeleteOptions::default())
        .unwrap();
    assert!(terminating["metadata"]["deletionTimestamp"].is_string());
    reconcile_job(&s, "default", "ev");
    assert_eq!(
        names(&s).len(),
        3,
        "index 2 is not made again while its pod ends"
    );
    // It ends Failed (exit 143, evicted) and is removed before the controller looks again.
    end_pod(
        &s,
        &victim,
        "Failed",
        143,
        json!([{"type": "DisruptionTarget", "status": "True"}]),
    );
    let last = s.get(&PODS, "default", vname).unwrap();
    let removed = DeleteOptions {
        grace_period: Some(0),
        ..Default::default()
    };
    s.delete(&PODS, "default", vname, &removed).unwrap();
    end_pod(&s, &pods[0], "Succeeded", 0, json!([]));
    reconcile_job_seeing(&s, "default", "ev", Some(&last));
    let j = s.get(&JOBS, "default", "ev").unwrap();
    assert!(cond(&j, "Complete").is_none(), "{}", j["status"]);
    assert_eq!(cond(&j, "Failed").unwrap()["reason"], "PodFailurePolicy");
    // A new Job of the same name (a JobSet's restart) does not count the old Job's pod.
    s.delete(&JOBS, "default", "ev", &DeleteOptions::default())
        .unwrap();
    indexed_job(&s, "ev", 3, extra);
    reconcile_job_seeing(&s, "default", "ev", Some(&last));
    let j = s.get(&JOBS, "default", "ev").unwrap();
    assert!(cond(&j, "Failed").is_none(), "{}", j["status"]);
    // Without a pod failure policy a terminating pod is replaced at once, as before.
    let s = store();
    s.set_node_terminates_pods("n1", true);
    let pods = indexed_job(
        &s,
        "tf",
        2,
        json!({"backoffLimit": 6, "template": {"spec": {"nodeName": "n1", "restartPolicy": "Never", "containers": [{"name": "c", "command": ["true"]}]}}}),
    );
    assert_eq!(
        s.get(&JOBS, "default", "tf").unwrap()["spec"]["podReplacementPolicy"],
        "TerminatingOrFailed"
    );
    let name = pods[1]["metadata"]["name"].as_str().unwrap();
    s.delete(&PODS, "default", name, &DeleteOptions::default())
        .unwrap();
    reconcile_job(&s, "default", "tf");
    assert_eq!(names(&s).len(), 3, "index 1 made again");
}

#[test]
fn deadline_fails_and_ttl_deletes() {
    let s = store();
    let pods = indexed_job(
        &s,
        "dl",
        2,
        json!({"activeDeadlineSeconds": 0, "ttlSecondsAfterFinished": 0}),
    );
    assert_eq!(pods.len(), 2);
    reconcile_job(&s, "default", "dl");
    let j = s.get(&JOBS, "default", "dl").unwrap();
    assert_eq!(cond(&j, "Failed").unwrap()["reason"], "DeadlineExceeded");
    assert!(names(&s).is_empty(), "running pods terminated");
    assert!(has_timers(&j));
    reconcile_timed_jobs(&s);
    assert!(
        s.get(&JOBS, "default", "dl").is_err(),
        "the TTL removed the Job"
    );
    // A TTL in the future keeps it.
    let pods = indexed_job(&s, "keep", 1, json!({"ttlSecondsAfterFinished": 3600}));
    end_pod(&s, &pods[0], "Succeeded", 0, json!([]));
    reconcile_job(&s, "default", "keep");
    reconcile_timed_jobs(&s);
    assert!(cond(&s.get(&JOBS, "default", "keep").unwrap(), "Complete").is_some());
}

#[test]
fn statefulset_ordered_ready() {
    let s = store();
    s.create(
        &STATEFULSETS,
        "default",
        json!({"metadata": {"name": "w"}, "spec": {
            "replicas": 2, "serviceName": "w",
            "selector": {"matchLabels": {"app": "w"}},
            "template": {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [{"name": "c", "command": ["sleep", "9"]}]}}}}),
        false,
    )
    .unwrap();
    reconcile_sts(&s, "default", "w");
    let pods = s
        .list(&PODS, Some("default"), &Default::default())
        .unwrap()
        .items;
    assert_eq!(pods.len(), 1, "OrderedReady waits for w-0");
    assert_eq!(pods[0]["metadata"]["name"], "w-0");
    assert_eq!(
        pods[0]["metadata"]["labels"]["apps.kubernetes.io/pod-index"],
        "0"
    );
    assert_eq!(pods[0]["spec"]["subdomain"], "w");
    s.modify(&PODS, "default", "w-0", Part::Status, |v| {
        v["status"]["phase"] = json!("Running");
        v["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
    })
    .unwrap();
    reconcile_sts(&s, "default", "w");
    assert!(s.get(&PODS, "default", "w-1").is_ok());
    assert_eq!(
        s.get(&STATEFULSETS, "default", "w").unwrap()["status"]["readyReplicas"],
        1
    );
}
