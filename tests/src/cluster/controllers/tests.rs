use super::indexes::{compress_indexes, parse_indexes};
use super::job::{
    has_timers, reconcile_job, reconcile_job_seeing, reconcile_timed_jobs, INDEX_KEY,
};
use super::job_tracking::TRACKING_FINALIZER;
use super::pods::phase;
use super::statefulset::reconcile_sts;
use crate::api::resources::{JOBS, NAMESPACES, PODS, STATEFULSETS};
use crate::api::{DeleteOptions, Part, Store};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

pub(super) fn store() -> Store {
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

pub(super) fn indexed_job(s: &Store, name: &str, n: i64, extra: Value) -> Vec<Arc<Value>> {
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

pub(super) fn end_pod(s: &Store, p: &Value, phase: &str, code: i64, conds: Value) {
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

pub(super) fn cond<'a>(j: &'a Value, ty: &str) -> Option<&'a Value> {
    j["status"]["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == ty && c["status"] == "True"))
}

pub(super) fn names(s: &Store) -> Vec<String> {
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
    // The failed pod, and the two still running when the Job failed.
    assert_eq!(j["status"]["failed"], 3);
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
    reconcile_job_seeing(&s, "default", "ev", Some(&last), false);
    let j = s.get(&JOBS, "default", "ev").unwrap();
    assert!(cond(&j, "Complete").is_none(), "{}", j["status"]);
    assert_eq!(cond(&j, "Failed").unwrap()["reason"], "PodFailurePolicy");
    // A new Job of the same name (a JobSet's restart) does not count the old Job's pod.
    s.delete(&JOBS, "default", "ev", &DeleteOptions::default())
        .unwrap();
    indexed_job(&s, "ev", 3, extra);
    reconcile_job_seeing(&s, "default", "ev", Some(&last), false);
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

/// How a pod deleted by hand ends, as the kubelet reports it: exit code `Some(c)` (phase
/// Succeeded for 0, else Failed), or None: it never started (Failed, its container waiting).
pub(super) fn kubelet_ends(s: &Store, name: &str, exit: Option<i64>) -> Arc<Value> {
    s.modify(&PODS, "default", name, Part::Status, |v| {
        v["status"]["phase"] = json!(if exit == Some(0) {
            "Succeeded"
        } else {
            "Failed"
        });
        v["status"]["containerStatuses"] = match exit {
            Some(c) => json!([{"name": "c", "state": {"terminated": {"exitCode": c}}}]),
            None => json!([{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}]),
        };
    })
    .unwrap()
}

/// Pod index 1 of a 2-pod Indexed Job on a node that terminates pods is deleted by hand; the
/// kubelet ends it (`exit`, see [`kubelet_ends`]) and removes it (grace period 0). The
/// controller handles the three events in order, each as soon as it happened (`late`: only
/// after all three had): as its loop does, with the event's object. Returns the Job, the
/// pods left (index 0 is never ended by a kubelet here), and whether a new pod for index 1
/// was ever there while the old one had not ended.
fn delete_index_1(
    policy: Option<Value>,
    exit: Option<i64>,
    late: bool,
) -> (Value, Vec<String>, bool) {
    let s = store();
    s.set_node_terminates_pods("n1", true);
    let mut extra = json!({"backoffLimit": 1, "template": {"spec": {"nodeName": "n1", "restartPolicy": "Never", "containers": [{"name": "c", "command": ["true"]}]}}});
    if let Some(p) = policy {
        extra["podFailurePolicy"] = p;
        extra["backoffLimit"] = json!(0);
    }
    let pods = indexed_job(&s, "del", 2, extra);
    assert!(pods.iter().all(|p| p["metadata"]["finalizers"]
        .as_array()
        .unwrap()
        .contains(&json!(TRACKING_FINALIZER))));
    let victim = pods[1]["metadata"]["name"].as_str().unwrap().to_string();
    let replaced_early = std::cell::Cell::new(false);
    let look = |ev: &Arc<Value>| {
        reconcile_job_seeing(&s, "default", "del", Some(ev), false);
        let ended = s
            .get(&PODS, "default", &victim)
            .map(|p| matches!(phase(&p), "Succeeded" | "Failed"))
            .unwrap_or(true);
        let new_1 = s
            .list(&PODS, Some("default"), &Default::default())
            .unwrap()
            .items
            .iter()
            .any(|p| {
                p["metadata"]["labels"][INDEX_KEY] == "1"
                    && p["metadata"]["name"] != victim.as_str()
            });
        if new_1 && !ended {
            replaced_early.set(true);
        }
    };
    let mut events = Vec::new();
    let deleted = s
        .delete(&PODS, "default", &victim, &DeleteOptions::default())
        .unwrap();
    assert!(deleted["metadata"]["deletionTimestamp"].is_string());
    events.push(deleted);
    if !late {
        look(events.last().unwrap());
    }
    events.push(kubelet_ends(&s, &victim, exit));
    if !late {
        look(events.last().unwrap());
    }
    let removal = DeleteOptions {
        grace_period: Some(0),
        precondition_uid: Some(pods[1]["metadata"]["uid"].as_str().unwrap().into()),
        ..Default::default()
    };
    if let Ok(last) = s.delete(&PODS, "default", &victim, &removal) {
        events.push(last);
    }
    if late {
        for ev in &events {
            look(ev);
        }
    } else if events.len() == 3 {
        look(&events[2]);
    }
    reconcile_job(&s, "default", "del");
    reconcile_job(&s, "default", "del");
    assert!(
        s.get(&PODS, "default", &victim).is_err(),
        "the deleted pod is gone once counted"
    );
    let job = (*s.get(&JOBS, "default", "del").unwrap()).clone();
    (job, names(&s), replaced_early.get())
}

/// Every deleted-pod case ends the same whether the controller looked at once or late.
fn delete_index_1_both_ways(
    policy: Option<Value>,
    exit: Option<i64>,
) -> (Value, Vec<String>, bool) {
    let (a, na, ra) = delete_index_1(policy.clone(), exit, false);
    let (b, nb, rb) = delete_index_1(policy, exit, true);
    let status = |j: &Value| {
        let mut st = j["status"].clone();
        for c in st["conditions"].as_array_mut().into_iter().flatten() {
            c["lastTransitionTime"] = json!(null);
            c["lastProbeTime"] = json!(null);
            // It names the pod, whose name differs.
            c["message"] = json!(null);
        }
        st["startTime"] = json!(null);
        st["completionTime"] = json!(null);
        st
    };
    assert_eq!(status(&a), status(&b), "at once and late");
    assert_eq!(na.len(), nb.len(), "at once and late");
    // Late, the old pod had ended before the controller looked at all.
    assert!(!rb);
    (a, na, ra)
}

const FAIL_ON_NONZERO: &str =
    r#"{"rules": [{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}]}"#;

fn fail_on_nonzero() -> Option<Value> {
    Some(serde_json::from_str(FAIL_ON_NONZERO).unwrap())
}

#[test]
fn deleted_running_pod_exiting_non_zero_with_a_failure_policy_fails_the_job() {
    let (j, left, replaced_early) = delete_index_1_both_ways(fail_on_nonzero(), Some(143));
    let f = cond(&j, "Failed").expect("the Job failed");
    assert_eq!(f["reason"], "PodFailurePolicy");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("exit code 143 matching FailJob rule at index 0"),
        "{f}"
    );
    assert!(!replaced_early, "not replaced while it ended");
    // Index 1 failed, and index 0, still running when the Job failed, counts as failed too.
    assert_eq!(j["status"]["failed"], 2, "{}", j["status"]);
    assert_eq!(j["status"]["completedIndexes"], "");
    assert_eq!(left.len(), 1, "index 0, being terminated: {left:?}");
}

#[test]
fn deleted_running_pod_exiting_zero_with_a_failure_policy_completes_its_index() {
    let (j, left, replaced_early) = delete_index_1_both_ways(fail_on_nonzero(), Some(0));
    assert!(cond(&j, "Failed").is_none(), "{}", j["status"]);
    assert_eq!(j["status"]["completedIndexes"], "1");
    assert_eq!(j["status"]["succeeded"], 1);
    assert!(j["status"].get("failed").is_none(), "{}", j["status"]);
    assert!(!replaced_early);
    assert_eq!(
        left.len(),
        1,
        "index 0 runs on, index 1 is not made again: {left:?}"
    );
}

#[test]
fn pod_deleted_before_it_started_with_a_failure_policy_counts_as_failed() {
    // No exit code to match: the default action, Count (backoffLimit 0 here).
    let (j, _, replaced_early) = delete_index_1_both_ways(fail_on_nonzero(), None);
    assert_eq!(
        cond(&j, "Failed").expect("the Job failed")["reason"],
        "BackoffLimitExceeded"
    );
    assert!(!replaced_early);
    assert_eq!(j["status"]["failed"], 2, "{}", j["status"]);
}

#[test]
fn deleted_running_pod_exiting_non_zero_without_a_failure_policy_counts_once_and_is_replaced() {
    let (j, left, replaced_early) = delete_index_1_both_ways(None, Some(143));
    assert!(
        cond(&j, "Failed").is_none(),
        "backoffLimit 1: {}",
        j["status"]
    );
    assert_eq!(j["status"]["failed"], 1, "{}", j["status"]);
    assert!(replaced_early, "replaced at once (TerminatingOrFailed)");
    assert_eq!(left.len(), 2, "index 0 and the new index 1: {left:?}");
}

#[test]
fn deleted_running_pod_exiting_zero_without_a_failure_policy_counts_as_failed() {
    // Being deleted before it ended: failed as the controller first saw it.
    let (j, left, replaced_early) = delete_index_1_both_ways(None, Some(0));
    assert!(cond(&j, "Complete").is_none(), "{}", j["status"]);
    assert_eq!(j["status"]["failed"], 1, "{}", j["status"]);
    assert_eq!(j["status"]["completedIndexes"], "");
    assert!(replaced_early);
    assert_eq!(left.len(), 2, "{left:?}");
}

#[test]
fn pod_deleted_before_it_started_without_a_failure_policy_counts_as_failed() {
    let (j, left, replaced_early) = delete_index_1_both_ways(None, None);
    assert_eq!(j["status"]["failed"], 1, "{}", j["status"]);
    assert!(cond(&j, "Failed").is_none());
    assert!(replaced_early);
    assert_eq!(left.len(), 2, "{left:?}");
}

/// A Job's pods carry the tracking finalizer; deleting the Job (or its finishing) releases
/// them, and a pod whose Job is gone is released by the controller's resync.
#[test]
fn tracking_finalizers_are_released_with_the_job() {
    let s = store();
    s.set_node_terminates_pods("n1", true);
    let pods = indexed_job(
        &s,
        "rel",
        2,
        json!({"template": {"spec": {"nodeName": "n1", "restartPolicy": "Never", "containers": [{"name": "c", "command": ["true"]}]}}}),
    );
    // Deleted with its Job while running, then ended and removed by the kubelet: held until
    // released.
    s.delete(&JOBS, "default", "rel", &DeleteOptions::default())
        .unwrap();
    let name = pods[0]["metadata"]["name"].as_str().unwrap();
    kubelet_ends(&s, name, Some(143));
    let removal = DeleteOptions {
        grace_period: Some(0),
        ..Default::default()
    };
    let held = s.delete(&PODS, "default", name, &removal).unwrap();
    assert!(
        s.get(&PODS, "default", name).is_ok(),
        "held by its finalizer"
    );
    reconcile_job_seeing(&s, "default", "rel", Some(&held), false);
    assert!(s.get(&PODS, "default", name).is_err(), "released: gone");
    // The other one, found by the resync.
    let other = pods[1]["metadata"]["name"].as_str().unwrap();
    kubelet_ends(&s, other, Some(0));
    s.delete(&PODS, "default", other, &removal).unwrap();
    assert!(s.get(&PODS, "default", other).is_ok());
    super::reconcile_all(&s);
    assert!(s.get(&PODS, "default", other).is_err());
}

/// The collector running beside the controllers: a Job made after its owner was deleted goes,
/// with any pod it got, as Kubernetes' garbage collector removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_made_after_its_owner_went_is_collected_with_its_pods() {
    let s = store();
    let owner = s
        .create(
            &crate::api::resources::SECRETS,
            "default",
            json!({"metadata": {"name": "owner"}}),
            false,
        )
        .unwrap();
    let controllers = super::spawn(s.clone());
    s.delete(
        &crate::api::resources::SECRETS,
        "default",
        "owner",
        &DeleteOptions::default(),
    )
    .unwrap();
    s.create(
        &JOBS,
        "default",
        json!({"metadata": {"name": "late", "ownerReferences": [{"apiVersion": "v1",
            "kind": "Secret", "name": "owner", "uid": owner["metadata"]["uid"],
            "controller": true}]},
            "spec": {"completions": 2, "parallelism": 2, "completionMode": "Indexed",
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "i"}]}}}}),
        false,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let job = s.get(&JOBS, "default", "late");
        let pods = names(&s);
        if job.is_err() && pods.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still there: job {:?}, pods {pods:?}",
            job.map(|j| j["metadata"]["name"].clone())
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    controllers.abort();
}

#[test]
fn an_indexed_job_lowered_deletes_its_highest_pods_and_counts_none() {
    let s = store();
    s.set_node_terminates_pods("n1", true);
    let pods = indexed_job(
        &s,
        "el",
        4,
        json!({"backoffLimit": 0, "template": {"spec": {"nodeName": "n1", "restartPolicy": "Never", "containers": [{"name": "c", "command": ["true"]}]}}}),
    );
    assert_eq!(pods.len(), 4);
    s.modify(&JOBS, "default", "el", Part::Main, |j| {
        j["spec"]["parallelism"] = json!(2);
        j["spec"]["completions"] = json!(2);
    })
    .unwrap();
    reconcile_job(&s, "default", "el");
    // Indexes 2 and 3 are being deleted, without the tracking finalizer; 0 and 1 run on.
    for p in &pods[2..] {
        let name = p["metadata"]["name"].as_str().unwrap();
        // (Gone already is as good.)
        if let Ok(now) = s.get(&PODS, "default", name) {
            assert!(!now["metadata"]["deletionTimestamp"].is_null(), "{now}");
            let fins = now["metadata"]["finalizers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(!fins.iter().any(|f| f == TRACKING_FINALIZER), "{now}");
            // The kubelet ends it as a deleted pod ends.
            kubelet_ends(&s, name, Some(143));
            reconcile_job(&s, "default", "el");
        }
    }
    reconcile_job(&s, "default", "el");
    for p in &pods[..2] {
        let now = s
            .get(&PODS, "default", p["metadata"]["name"].as_str().unwrap())
            .unwrap();
        assert!(now["metadata"]["deletionTimestamp"].is_null(), "{now}");
    }
    let j = s.get(&JOBS, "default", "el").unwrap();
    assert_eq!(j["status"]["failed"].as_i64().unwrap_or(0), 0, "{j}");
    assert!(cond(&j, "Failed").is_none(), "{j}");
    assert!(cond(&j, "Complete").is_none(), "{j}");
    assert_eq!(j["status"]["active"], 2, "{j}");
    // No pod is made again for the indexes that went.
    reconcile_job(&s, "default", "el");
    let idx: BTreeSet<String> = s
        .list(&PODS, Some("default"), &Default::default())
        .unwrap()
        .items
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            p["metadata"]["labels"][INDEX_KEY]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        idx,
        ["0".to_string(), "1".to_string()].into_iter().collect()
    );
}
