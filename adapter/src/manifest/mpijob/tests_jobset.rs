//! The launcher's own pod: an MPIJob rendered as a JobSet (replicated jobs `launcher` and
//! `worker`, each from its own template), its startup order, and the single Indexed Job it
//! falls back to.

use serde_json::Value;

use super::convert::{from_mpijob, Overrides};
use super::tests::{job, overrides};
use crate::manifest::plan::JobPlan;
use crate::manifest::render::objects;
use crate::workload::NODE_GROUP_ANNOTATION;

/// A GPU-style MPIJob: a small CPU-only launcher with its own image, workers with more.
const GPU_STYLE: &str = r#"
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: train}
spec:
  slotsPerWorker: 2
  POLICY
  runPolicy: {cleanPodPolicy: Running, suspend: true}
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          nodeSelector: {pool: cpu}
          containers:
            - name: launcher
              image: example.com/launcher:1
              command: [mpirun, -n, "6", /app/train]
              resources:
                limits: {cpu: 1, memory: 512Mi}
    Worker:
      replicas: 3
      template:
        spec:
          nodeSelector: {pool: gpu}
          containers:
            - name: worker
              image: example.com/train:1
              resources:
                limits: {cpu: 4, memory: 8Gi}
"#;

fn jobset_overrides() -> Overrides {
    Overrides {
        jobset: true,
        ..overrides()
    }
}

fn convert(policy: &str, o: &Overrides) -> JobPlan {
    let text = GPU_STYLE.replace("POLICY", policy);
    from_mpijob(&text, o)
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .0
}

fn jobset(plan: &JobPlan) -> Value {
    objects(plan, None)
        .unwrap()
        .into_iter()
        .find(|o| o["kind"] == "JobSet")
        .expect("a JobSet")
}

/// The replicated job `name` of the JobSet `js`.
fn replicated<'a>(js: &'a Value, name: &str) -> &'a Value {
    js["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no replicated job {name}: {js}"))
}

fn env<'a>(template: &'a Value, name: &str) -> Option<&'a Value> {
    template["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| &e["value"])
}

#[test]
fn the_launcher_and_the_workers_get_their_own_templates_in_one_jobset() {
    let plan = convert("", &jobset_overrides());
    let js = jobset(&plan);
    assert_eq!(js["metadata"]["name"], "train");
    let names: Vec<&str> = js["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["launcher", "worker"]);
    let (l, w) = (replicated(&js, "launcher"), replicated(&js, "worker"));
    assert_eq!(
        (l["replicas"].as_u64(), w["replicas"].as_u64()),
        (Some(1), Some(1))
    );
    let (lj, wj) = (&l["template"]["spec"], &w["template"]["spec"]);
    assert_eq!(
        (lj["completions"].as_u64(), lj["parallelism"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        (wj["completions"].as_u64(), wj["parallelism"].as_u64()),
        (Some(3), Some(3))
    );
    for j in [lj, wj] {
        assert_eq!(j["completionMode"], "Indexed");
        assert_eq!(j["backoffLimit"], 0, "one try: {j}");
        let rules = j["podFailurePolicy"]["rules"].as_array().unwrap();
        assert!(rules.iter().all(|r| r["action"] == "FailJob"), "{j}");
        assert!(
            rules
                .iter()
                .any(|r| r["onPodConditions"][0]["type"] == "DisruptionTarget"),
            "an evicted pod fails its Job: {j}"
        );
        assert!(
            j["successPolicy"].is_null(),
            "no Job succeeds on index 0 alone: {j}"
        );
        assert!(
            j.get("suspend").is_none(),
            "the JobSet is suspended, not its Jobs: {j}"
        );
    }
    let (lt, wt) = (&lj["template"], &wj["template"]);
    let (lc, wc) = (&lt["spec"]["containers"][0], &wt["spec"]["containers"][0]);
    assert_eq!(lc["image"], "example.com/launcher:1");
    assert_eq!(lc["resources"]["limits"]["cpu"], 1);
    assert_eq!(lt["spec"]["nodeSelector"]["pool"], "cpu");
    assert_eq!(wc["image"], "example.com/train:1");
    assert_eq!(wc["resources"]["limits"]["cpu"], 4);
    assert_eq!(wt["spec"]["nodeSelector"]["pool"], "gpu");
    // The launcher's agent runs the command, the workers' serve; both carry the command.
    assert_eq!(env(lt, "PRRTE_K8S_BATCH_ROLE").unwrap(), "launcher");
    assert_eq!(env(wt, "PRRTE_K8S_BATCH_ROLE").unwrap(), "worker");
    let command = lc["command"].as_array().unwrap();
    assert!(command.iter().any(|w| w == "/app/train"), "{lc}");
    // Ranks on the workers only: the launcher's pod leaves itself out of the allocation.
    assert_eq!(env(lt, "PRTE_MCA_ras_k8s_exclude_self").unwrap(), "true");
    // Discovery puts the launcher first whatever the order of the replicated jobs.
    let group = |t: &Value| t["metadata"]["annotations"][NODE_GROUP_ANNOTATION].clone();
    assert_eq!((group(lt), group(wt)), ("0".into(), "1".into()));
    for t in [lt, wt] {
        assert_eq!(t["metadata"]["annotations"]["prrte-k8s.io/slots"], "2");
        assert_eq!(t["metadata"]["labels"]["prrte-k8s.io/job"], "train");
    }
    // One workload: suspended, failed and succeeded as a whole.
    let spec = &js["spec"];
    assert_eq!(spec["suspend"], true);
    assert_eq!(spec["failurePolicy"]["maxRestarts"], 0);
    assert_eq!(spec["successPolicy"]["operator"], "Any");
    assert_eq!(
        spec["successPolicy"]["targetReplicatedJobs"],
        serde_json::json!(["launcher"])
    );
    assert_eq!(spec["startupPolicy"]["startupPolicyOrder"], "AnyOrder");
    assert_eq!(plan.pods, 4);
}

#[test]
fn run_launcher_as_worker_gives_the_launcher_ranks() {
    let plan = convert("runLauncherAsWorker: true", &jobset_overrides());
    let js = jobset(&plan);
    let lt = &replicated(&js, "launcher")["template"]["spec"]["template"];
    assert_eq!(env(lt, "PRTE_MCA_ras_k8s_exclude_self"), None);
    assert_eq!(env(lt, "PRRTE_K8S_BATCH_ROLE").unwrap(), "launcher");
}

#[test]
fn wait_for_workers_ready_lists_the_workers_first_and_starts_in_order() {
    let plan = convert(
        "launcherCreationPolicy: WaitForWorkersReady",
        &jobset_overrides(),
    );
    let js = jobset(&plan);
    let names: Vec<&str> = js["spec"]["replicatedJobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["worker", "launcher"]);
    assert_eq!(js["spec"]["startupPolicy"]["startupPolicyOrder"], "InOrder");
    let at = convert("launcherCreationPolicy: AtStartup", &jobset_overrides());
    assert_eq!(
        jobset(&at)["spec"]["startupPolicy"]["startupPolicyOrder"],
        "AnyOrder"
    );
}

#[test]
fn without_jobset_one_indexed_job_gets_the_workers_template_and_says_so() {
    let text = GPU_STYLE.replace("POLICY", "launcherCreationPolicy: WaitForWorkersReady");
    let (plan, notes) = from_mpijob(&text, &overrides()).unwrap();
    assert!(plan.launcher.is_none());
    let j = job(&plan);
    assert_eq!(j["spec"]["completions"], 4);
    let c = &j["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "example.com/train:1");
    assert_eq!(env(&j["spec"]["template"], "PRRTE_K8S_BATCH_ROLE"), None);
    let text: String = notes.iter().map(|n| format!("{n}\n")).collect();
    for said in [
        "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].image",
        "in a JobSet the launcher has its own pod",
        "spec.launcherCreationPolicy: WaitForWorkersReady not honoured",
    ] {
        assert!(text.contains(said), "{said:?} not in the notes:\n{text}");
    }
    assert!(
        plan.origin[0].contains("every pod from the Worker's template"),
        "{:?}",
        plan.origin
    );
}
