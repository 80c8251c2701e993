//! The workload that owns the job's pods (Job, StatefulSet, JobSet) tells discovery how many
//! pods to wait for. When it cannot be read (403: the Role lacks the rule; 404: it is gone or
//! its API is not served), discovery fails naming the rule and `ras_k8s_expected_pods`, instead
//! of silently allocating only the pods found at the first list; with `ras_k8s_expected_pods`
//! set, the owner is not needed.
#![forbid(unsafe_code)]

mod discovery_support;

use discovery_support::{names, Fixture};
use prrte_k8s::discovery::{self, DiscoveryError, ErrorKind, PODS_RULE};
use sandbox::api::Rule;
use serde_json::json;

async fn two_ready_job_pods(f: &Fixture, job: &str) {
    let owner = json!({"metadata": {"ownerReferences": [{
        "apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "0000-gone", "controller": true,
    }]}});
    for i in 0..2 {
        let labels = json!({"batch.kubernetes.io/job-name": job, "batch.kubernetes.io/job-completion-index": i.to_string()});
        f.create_pod(&format!("{job}-{i}-abcde"), labels, owner.clone())
            .await;
        f.make_ready(&format!("{job}-{i}-abcde"), &format!("10.7.0.{}", i + 1))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_owner_job_fails_unless_the_count_is_given() {
    let f = Fixture::new("owner404").await;
    two_ready_job_pods(&f, "gone").await;
    let cfg = discovery::DiscoveryConfig {
        self_pod: Some("gone-0-abcde".into()),
        ..f.config()
    };
    let err = discovery::discover(&cfg)
        .await
        .expect_err("the owning Job does not exist");
    assert!(
        matches!(err, DiscoveryError::OwnerUnreadable { code: 404, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("Job owner404/gone") && msg.contains("404"),
        "{msg}"
    );
    assert!(msg.contains("ras_k8s_expected_pods"), "{msg}");
    let cfg = discovery::DiscoveryConfig {
        expected_pods: Some(2),
        ..cfg
    };
    let alloc = discovery::discover(&cfg).await.expect("the count is given");
    assert_eq!(names(&alloc), ["gone-0-abcde", "gone-1-abcde"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_owner_job_names_the_missing_rule() {
    let f = Fixture::new("owner403").await;
    two_ready_job_pods(&f, "pi").await;
    // Exactly the pods rule, nothing on jobs.
    f.server.add_token(
        "tok-pods-only",
        "bob",
        Some("owner403"),
        vec![Rule::new(&["get", "list", "watch"], &[""], &["pods"])],
    );
    let cfg = discovery::DiscoveryConfig {
        self_pod: Some("pi-1-abcde".into()),
        kubeconfig: Some(f.kubeconfig_for("tok-pods-only")),
        ..f.config()
    };
    let err = discovery::discover(&cfg)
        .await
        .expect_err("jobs are forbidden");
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    let msg = err.to_string();
    assert!(msg.contains("Job owner403/pi"), "{msg}");
    assert!(
        msg.contains("apiGroups: [\"batch\"]")
            && msg.contains("resources: [\"jobs\"]")
            && msg.contains("verbs: [\"get\"]"),
        "{msg}"
    );
    assert!(msg.contains("ras_k8s_expected_pods"), "{msg}");
    assert!(!msg.contains(PODS_RULE), "{msg}");
    let cfg = discovery::DiscoveryConfig {
        expected_pods: Some(2),
        ..cfg
    };
    let alloc = discovery::discover(&cfg).await.expect("the count is given");
    assert_eq!(names(&alloc), ["pi-0-abcde", "pi-1-abcde"]);
}
