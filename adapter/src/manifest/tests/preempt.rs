//! The notice of preemption and the Role as the options render them: the pod's grace period
//! and the site's preemption signal, and discovery's 403 hints matching the Role rule for rule.

use super::support::{args, objects, T};
use crate::manifest::options::ManifestArgs;
use crate::manifest::secret::fresh_key;
use clap::Parser;
use serde_json::{json, Value};

/// The pod's grace period reaches the pod spec and the agents; the site's preemption signal
/// reaches the launcher's parameter, spelled as the parameter lists it; a signal no program
/// can catch is refused.
#[test]
fn grace_period_and_preempt_signal() {
    let env_of = |a: &ManifestArgs| {
        let objs = objects(a, None).unwrap();
        let job = objs.iter().find(|o| o["kind"] == "Job").unwrap().clone();
        let spec = job["spec"]["template"]["spec"].clone();
        let env = spec["containers"][0]["env"].as_array().unwrap().clone();
        let get = |k: &str| {
            env.iter()
                .find(|e| e["name"] == k)
                .map(|e| e["value"].as_str().unwrap().to_string())
        };
        (
            spec["terminationGracePeriodSeconds"].clone(),
            get("PRRTE_K8S_PREEMPT_GRACE"),
            get("PRTE_MCA_plm_k8s_preempt_signal"),
        )
    };
    let (grace, agent, signal) = env_of(&args(&["--", "mpirun", "x"]));
    assert_eq!(
        (grace, agent.as_deref(), signal),
        (json!(30), Some("30"), None)
    );
    let a = args(&[
        "--grace-period",
        "90",
        "--preempt-signal",
        "usr1",
        "--",
        "mpirun",
        "x",
    ]);
    let (grace, agent, signal) = env_of(&a);
    assert_eq!(grace, json!(90));
    assert_eq!(agent.as_deref(), Some("90"));
    assert_eq!(signal.as_deref(), Some("SIGUSR1"));
    let mut argv = vec!["manifest", "--preempt-signal", "SIGKILL"];
    argv.push("--");
    argv.push("x");
    let e = T::try_parse_from(argv).err().unwrap().to_string();
    assert!(
        e.contains("plm_k8s_preempt_signal") && e.contains("SIGUSR1"),
        "{e}"
    );
}

/// What discovery's 403 hint tells an administrator to grant is, rule for rule, what the Role
/// `prrte-k8s manifest` renders holds (the owner `get` limited by `resourceNames` to the
/// workload).
#[test]
fn discovery_hints_name_the_role_rules_exactly() {
    for (kind, group, resource) in [
        ("job", "batch", "jobs"),
        ("statefulset", "apps", "statefulsets"),
        ("jobset", "jobset.x-k8s.io", "jobsets"),
    ] {
        let mut argv = vec!["--name", "hinted", "--pods", "2", "--kind", kind];
        if kind != "statefulset" {
            argv.extend(["--", "mpirun", "./a"]);
        }
        let objs = objects(&args(&argv), Some(&fresh_key())).unwrap();
        let role = objs.iter().find(|o| o["kind"] == "Role").unwrap();
        let rules = role["rules"].as_array().unwrap();
        let hint = |g: &str, r: &str, verb: &str, name: Option<&str>| -> Value {
            let text = crate::discovery::required_rule(g, r, verb, name);
            let v: Vec<Value> = serde_yaml::from_str(&text).unwrap();
            v.into_iter().next().unwrap()
        };
        assert_eq!(hint("", "pods", "list", None), rules[0], "{kind}");
        assert_eq!(
            hint(group, resource, "get", Some("hinted")),
            rules[1],
            "{kind}"
        );
        assert_eq!(rules.len(), 2, "{kind}");
    }
}

/// An MPIJob whose Worker template has `grace` (a `terminationGracePeriodSeconds` line, or
/// nothing).
fn mpijob(grace: &str) -> String {
    format!(
        "apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: j
spec:
  mpiReplicaSpecs:
    Launcher:
      template:
        spec:
          containers:
          - name: l
            image: app:1
            command: [mpirun, ./a]
    Worker:
      replicas: 2
      template:
        spec:
{grace}          containers:
          - name: w
            image: app:1
"
    )
}

/// A converted MPIJob's pods get the preemption notice as any job's do: the grace period (the
/// option's, else the template's, else 30 s) in the pod spec and the agents' environment, and
/// the site's signal; an option replacing the template's value is noted.
#[test]
fn from_mpijob_carries_grace_period_and_preempt_signal() {
    let run = |grace: &str, opts: &[&str]| {
        let mut argv = vec!["--from-mpijob", "-"];
        argv.extend(opts);
        let a = args(&argv);
        let text = mpijob(grace);
        let (plan, notes) = crate::manifest::render::prepare(&a, &mut text.as_bytes()).unwrap();
        let job = crate::manifest::render::objects(&plan, None)
            .unwrap()
            .into_iter()
            .find(|o| o["kind"] == "Job")
            .unwrap();
        let spec = job["spec"]["template"]["spec"].clone();
        let env = spec["containers"][0]["env"].as_array().unwrap().clone();
        let get = |k: &str| {
            env.iter()
                .find(|e| e["name"] == k)
                .map(|e| e["value"].as_str().unwrap().to_string())
        };
        let notes: Vec<String> = notes.iter().map(|n| n.to_string()).collect();
        (
            spec["terminationGracePeriodSeconds"].clone(),
            get("PRRTE_K8S_PREEMPT_GRACE"),
            get("PRTE_MCA_plm_k8s_preempt_signal"),
            notes,
        )
    };
    let (grace, agent, signal, _) = run("", &[]);
    assert_eq!(
        (grace, agent.as_deref(), signal),
        (json!(30), Some("30"), None)
    );
    let own = "          terminationGracePeriodSeconds: 45\n";
    let (grace, agent, _, notes) = run(own, &[]);
    assert_eq!((grace, agent.as_deref()), (json!(45), Some("45")));
    assert!(
        !notes.iter().any(|n| n.contains("--grace-period")),
        "{notes:?}"
    );
    let opts = ["--grace-period", "90", "--preempt-signal", "usr1"];
    let (grace, agent, signal, notes) = run(own, &opts);
    assert_eq!(grace, json!(90));
    assert_eq!(agent.as_deref(), Some("90"));
    assert_eq!(signal.as_deref(), Some("SIGUSR1"));
    assert!(
        notes
            .iter()
            .any(|n| n.contains("terminationGracePeriodSeconds")
                && n.contains("45 replaced by --grace-period 90")),
        "{notes:?}"
    );
    let bad = "          terminationGracePeriodSeconds: soon\n";
    let a = args(&["--from-mpijob", "-"]);
    let e = crate::manifest::render::prepare(&a, &mut mpijob(bad).as_bytes())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("terminationGracePeriodSeconds") && e.contains("--grace-period"),
        "{e}"
    );
}
